/*
 * stream.h — one consumer stream: the response to one
 * GET /v1/jobs/{job}/epochs/{epoch}/stream request.
 *
 * A producer thread opens the epoch (sio_epoch_open), the consumer's share
 * (sio_consumer_open) and encodes each sample as tar into a bounded byte
 * queue; MHD's content-reader callback (sc_stream_reader) copies bytes out.
 * No one polls: when the queue is empty the reader suspends the MHD
 * connection and the producer resumes it when bytes (or the end) arrive;
 * when the queue is full the producer waits on a condition variable until
 * the reader makes room (backpressure).
 *
 * Threading and lock order: each stream has one mutex, taken by the
 * producer, by MHD's thread (reader, access handler) and by whoever cancels.
 * MHD_suspend_connection / MHD_resume_connection are called with that mutex
 * held, so a resume can never overtake the suspend it answers (MHD leaves
 * resuming an unsuspended connection undefined). Lock order:
 *   server registry mutex -> stream mutex -> MHD's internal mutexes.
 * MHD calls the reader and the completion callback without holding its own
 * mutexes, so this order has no cycle.
 *
 * Ownership: the stream belongs to its request context (http.c); it copies
 * its parameters; io and the shard list must outlive it.
 */
#ifndef SC_STREAM_H
#define SC_STREAM_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shardio.h"

typedef struct sc_stream sc_stream;

typedef struct sc_stream_params {
    sio_io *io;                  /* must outlive the stream */
    const sio_shardlist *list;   /* must outlive the stream */
    sio_epoch_config epoch_cfg;  /* epoch number included; copied */
    sio_partition partition;
    uint32_t rank;
    uint32_t world;
    uint64_t start;
    const char *const *fields;   /* filter (copied); nfields 0: all */
    size_t nfields;
    size_t queue_bytes;          /* capacity of the byte queue */
    const char *id;              /* request id for log lines (copied) */
} sc_stream_params;

/* Smallest queue: it must hold at least a few tar headers. */
#define SC_STREAM_QUEUE_MIN (64u * 1024u)

/*
 * Create the stream for `conn` and start its producer thread.
 * SIO_ERR_INVALID (bad params), SIO_ERR_NOMEM, SIO_ERR_IO (no thread).
 * On success *out is owned by the caller: sc_stream_destroy().
 */
sio_code sc_stream_start(const sc_stream_params *p, struct MHD_Connection *conn,
                         sc_stream **out, sio_error *err);

typedef enum sc_open_state {
    SC_OPEN_PENDING = 0, /* not known yet: the connection was suspended */
    SC_OPEN_OK = 1,      /* streaming can begin */
    SC_OPEN_FAILED = 2   /* answer *status with *reason */
} sc_open_state;

/*
 * Called from the access handler (MHD thread): has the producer opened the
 * epoch? When PENDING, the connection has been suspended and will be
 * resumed (and the handler called again) once the answer is known. On
 * FAILED, *status is the HTTP status and reason the one-line reason.
 */
sc_open_state sc_stream_poll_open(sc_stream *s, unsigned *status,
                                  char *reason, size_t reason_len);

/* The MHD content reader; cls is the sc_stream. MHD thread only. */
ssize_t sc_stream_reader(void *cls, uint64_t pos, char *buf, size_t max);

/* Ask the stream to stop (any thread): wakes the producer, resumes the
 * connection if it is suspended so that MHD can finish it. Idempotent. */
void sc_stream_cancel(sc_stream *s);

typedef struct sc_stream_stats {
    uint64_t bytes_out; /* bytes handed to MHD */
    uint64_t samples;   /* samples of the share handed out */
    uint64_t position;  /* position reached in the share */
    const char *outcome; /* "ok", "error", "cancelled", "open_failed",
                            "running" (static strings) */
} sc_stream_stats;

void sc_stream_get_stats(sc_stream *s, sc_stream_stats *st);

/* Cancel, join the producer, fill *final (may be NULL) with the final
 * counters and free everything (s NULL is fine). Called from MHD's
 * request-completed callback. It blocks at most until the producer notices
 * the cancel: at once when it waits for queue space, after the sample
 * being read otherwise. */
void sc_stream_destroy(sc_stream *s, sc_stream_stats *final);

#endif /* SC_STREAM_H */
