/*
 * storestats.h — the object-store counters and latency histograms of one
 * sio_io, by backend and operation (internal; the snapshot type and names
 * are public: sio_store_stats in shardio.h).
 *
 * The io owns one sio_storestats; its fetch engine (http, s3) and the file
 * backend add to it. Every field is an atomic updated without a lock, once
 * per request or per read call, never per sample.
 */
#ifndef SHARDIO_STORESTATS_H
#define SHARDIO_STORESTATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "shardio.h"

typedef struct sio_storestats_backend {
    _Atomic uint64_t requests, retries, throttles, errors, bytes;
    _Atomic uint32_t inflight;
} sio_storestats_backend;

typedef struct sio_storestats {
    sio_storestats_backend b[SIO_STORE_BACKENDS];
    sio_hist latency[SIO_STORE_BACKENDS][SIO_STORE_OPS];
} sio_storestats;

/* Copy counters and histograms into out (concurrency left 0). */
void sio_storestats_snapshot(const sio_storestats *s, sio_store_stats *out);

/* The io's stats (NULL when io is NULL). Defined in io.c. */
sio_storestats *sio_io_storestats(sio_io *io);

#endif /* SHARDIO_STORESTATS_H */
