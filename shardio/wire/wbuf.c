/*
 * wbuf.c — sio_wbuf, a growable byte buffer with a maximum (contract in
 * include/shardio_wire.h): the scratch buffer of the tar encoder and a
 * sink any wire encoder can write into (sio_wbuf_append has the signature
 * of sio_tarw_write_fn).
 *
 * Threading: a sio_wbuf belongs to one thread at a time; no global state.
 * Ownership: the buffer owns its storage until sio_wbuf_free().
 */
#include "shardio_wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sio_wbuf_init(sio_wbuf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

sio_code sio_wbuf_append(void *vb, const void *data, size_t len)
{
    sio_wbuf *b = vb;
    sio_code rc = SIO_OK;

    if (len > b->max || b->len > b->max - len) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }
    if (b->len + len > b->cap) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap < b->len + len)
            ncap = ncap > b->max / 2 ? b->max : ncap * 2;
        unsigned char *nd = realloc(b->data, ncap);
        if (!nd) {
            rc = SIO_ERR_NOMEM;
            goto out;
        }
        b->data = nd;
        b->cap = ncap;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
out:
    return rc;
}

sio_code sio_wbuf_printf(sio_wbuf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return SIO_ERR_INVALID;
    if ((size_t)n < sizeof line)
        return sio_wbuf_append(b, line, (size_t)n);
    if ((size_t)n > b->max)
        return SIO_ERR_LIMIT;
    char *big = malloc((size_t)n + 1);
    if (!big)
        return SIO_ERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sio_code rc = sio_wbuf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

void sio_wbuf_free(sio_wbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}
