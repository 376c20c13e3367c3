/*
 * error.c — result-code strings, error detail and the logging helper.
 * Stateless; safe from any thread.
 */
#include <stdarg.h>
#include <stdio.h>

#include "core/core_int.h"

const char *sio_strerror(sio_code code)
{
    switch (code) {
    case SIO_OK: return "no error";
    case SIO_ERR_NOMEM: return "out of memory";
    case SIO_ERR_INVALID: return "invalid argument";
    case SIO_ERR_IO: return "I/O error";
    case SIO_ERR_NOTFOUND: return "not found";
    case SIO_ERR_FORMAT: return "corrupt or unsupported data";
    case SIO_ERR_SAMPLE: return "bad sample";
    case SIO_ERR_LIMIT: return "limit exceeded";
    case SIO_ERR_RETRY: return "transient failure";
    case SIO_ERR_CANCELED: return "canceled";
    case SIO_ERR_UNSUPPORTED: return "unsupported";
    case SIO_ERR_AUTH: return "authentication failed";
    case SIO_ERR_AGAIN: return "not ready yet";
    case SIO_ERR_CHANGED: return "object changed";
    case SIO_ERR_BUSY: return "busy";
    }
    return "unknown error";
}

sio_code sio_seterr(sio_error *err, sio_code code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void sio_log_(const sio_logger *lg, int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    lg->fn(lg->userdata, level, line);
}
