/*
 * storestats.c — snapshots and names of the object-store metrics
 * (storestats.h, shardio.h).
 *
 * Threading: counters are atomics; a snapshot reads each once.
 */
#include "store/storestats.h"

#include <string.h>

const char *sio_store_backend_name(sio_store_backend b)
{
    switch (b) {
    case SIO_STORE_HTTP: return "http";
    case SIO_STORE_S3: return "s3";
    case SIO_STORE_FILE: return "file";
    case SIO_STORE_BACKENDS: break;
    }
    return "other";
}

const char *sio_store_op_name(sio_store_op op)
{
    switch (op) {
    case SIO_STORE_GET: return "get";
    case SIO_STORE_HEAD: return "head";
    case SIO_STORE_LIST: return "list";
    case SIO_STORE_CREDENTIALS: return "credentials";
    case SIO_STORE_OTHER:
    case SIO_STORE_OPS: break;
    }
    return "other";
}

void sio_storestats_snapshot(const sio_storestats *s, sio_store_stats *out)
{
    sio_storestats *m = (sio_storestats *)(uintptr_t)s;
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    for (int b = 0; b < SIO_STORE_BACKENDS; b++) {
        sio_io_stats *o = &out->backend[b];
        o->requests = atomic_load(&m->b[b].requests);
        o->retries = atomic_load(&m->b[b].retries);
        o->throttles = atomic_load(&m->b[b].throttles);
        o->errors = atomic_load(&m->b[b].errors);
        o->bytes = atomic_load(&m->b[b].bytes);
        o->inflight = atomic_load(&m->b[b].inflight);
        for (int op = 0; op < SIO_STORE_OPS; op++)
            sio_hist_snapshot(&m->latency[b][op], &out->latency[b][op]);
    }
}
