/*
 * stream.h — one consumer stream: the response to one
 * GET /v1/jobs/{job}/epochs/{epoch}/stream (or /samples/{i}) request.
 *
 * A stream reads its share from a sio_cursor of the job's shared feed for
 * that epoch (jobs.h), or, when the epoch has a plan, from its own plan
 * reader (shardio_plan.h), and encodes it (tar or frames) straight into
 * MHD's response buffer from MHD's content-reader callback
 * (sc_stream_reader). A plan's payloads stay in their files: the sink
 * records them as file segments, read with pread() into MHD's buffer and
 * checked (sio_planread_verify) before the buffer goes out; a failed
 * check sends the retryable trailer after the last whole sample, or cuts
 * the connection when the sample's first bytes were already sent. A plan
 * stream never waits: it has no notify and never suspends.
 * Nothing runs per stream: no thread, no byte queue. When the cursor has
 * nothing ready (SIO_ERR_AGAIN) the reader suspends the MHD connection; the
 * cursor's notify callback (sc_stream_notify, on the feed's producer
 * thread) resumes it. Backpressure is the feed window: a consumer that does
 * not read keeps its samples in the window, and the producer waits.
 *
 * One copy: the encoders hand payload pointers that point into the
 * sample's field memory (or file extents, on a plan) to their sink; the
 * sink appends them to the stream's output chain (sio_wchain,
 * shardio_wire.h) as references (the sample stays referenced until they
 * are sent) and copies only header bytes into the chain. The reader
 * drains the chain into MHD's buffer. Per-stream memory: the struct (about 1 KiB), the
 * encoder (a few hundred bytes; frames adds a shard bitmap of one bit per
 * shard index seen), the pending buffer (headers of one sample: typically
 * under 2 KiB, never above SC_STREAM_PENDING_MAX) and the chain's pieces
 * (at most SC_STREAM_SEGMENTS_MAX entries of 40 bytes), plus MHD's
 * per-connection pool (--connection-memory).
 *
 * Threading and lock order: s->mu guards the suspend/resume handshake
 * (suspended, notified, cut, gone). Everything else belongs to the thread
 * running the reader (one MHD worker at a time). Lock order:
 *   feed mutex (notify runs under it) -> s->mu -> MHD's internal mutexes.
 * The reader never holds s->mu while calling into the feed.
 * MHD_resume_connection is called from notify (producer thread, feed lock
 * held) and from sc_stream_cut: in libmicrohttpd 0.9.75 it only takes the
 * daemon's cleanup mutex for a few stores and writes the daemon's eventfd
 * (non-blocking), and MHD never calls application callbacks with that mutex
 * held (upgraded connections aside, which shardcast does not use), so it
 * neither blocks nor closes a lock cycle. A resume is only issued for a
 * connection this stream suspended and that has not been resumed since.
 */
#ifndef SC_STREAM_H
#define SC_STREAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "request.h"
#include "shardio.h"
#include "shardio_plan.h"

/* Header bytes one sample may need (tar: pax header with key and URL up to
 * SIO_TARW_NAME_MAX each, a header block per field; frames: the SAMPLE
 * frame's fixed part, names and a SHARD frame). Above it the stream fails
 * with an error trailer. */
#define SC_STREAM_PENDING_MAX (4u << 20)
/* Key of the stub sent in place of a sample whose headers exceed the
 * bounds above (no field; see stream.c encode_skipped). */
#define SC_STREAM_SKIPPED_KEY "__shardcast_skipped__"
/* A pending buffer grown above this is freed once its sample is sent. */
#define SC_STREAM_PENDING_KEEP (64u * 1024u)
/* Segments one sample may need (about two per field). */
#define SC_STREAM_SEGMENTS_MAX (4u * 1024u + 16u)

typedef struct sc_stream sc_stream;
struct MHD_Connection;

/* Counters a stream adds to (owned by its job, which outlives it). */
typedef struct sc_stream_counters {
    atomic_uint_fast64_t samples;
    atomic_uint_fast64_t bytes;
} sc_stream_counters;

typedef struct sc_stream_params {
    const char *job;             /* copied into the frames header */
    uint64_t epoch;
    uint32_t rank, world;
    uint64_t start, global_start;
    sio_partition partition;
    sc_format format;
    const char *const *fields;   /* filter (copied); nfields 0: all */
    size_t nfields;
    const char *id;              /* request id for log lines (copied) */
    sc_stream_counters *counters; /* may be NULL */
    /* A mixed job's sources (nsources 0: none): announced in the frames
     * HEADER, named in tar pax headers, and samples sent counted per
     * source in source_sent[]. All owned by the job, which outlives the
     * stream. */
    /* The replica set's identity, stated in the stream's header (both
     * formats; fingerprint NULL: none): the fingerprint of what fixes the
     * order, the part served, R, and this server's own replica. */
    const char *fingerprint;
    uint32_t replica, replicas, served_by;
    const sio_frames_source *sources;
    const char *const *source_names;
    size_t nsources;
    _Atomic uint64_t *source_sent;
    /* The connection the reader suspends while nothing is ready (NULL:
     * none, the reader then returns 0 when nothing is ready: a caller
     * other than MHD, such as a test, calls it again). */
    struct MHD_Connection *conn;
    /* frames: a KEEPALIVE frame at least about this often while nothing
     * else is sent, announced in HEADER (0: none; tar: never). */
    uint32_t heartbeat_ms;
} sc_stream_params;

/*
 * Create a stream and its encoder (the frames magic and HEADER are encoded
 * at once). SIO_ERR_INVALID (bad fields, or no job name for frames),
 * SIO_ERR_NOMEM. On success *out is owned by the caller (http.c builds it)
 * until sc_jobs_open_stream binds it (jobs.h; from then its binding owns
 * it), or the caller destroys it.
 */
sio_code sc_stream_create(const sc_stream_params *p, sc_stream **out,
                          sio_error *err);

/* Give the stream its cursor (created with notify = sc_stream_notify,
 * userdata = the stream), before the response is queued. The cursor stays
 * owned by the one that attached it (jobs.c). */
void sc_stream_set_cursor(sc_stream *s, sio_cursor *c);

/* Or read the share from the epoch's plan (shardio_plan.h) with the
 * stream's own reader, owned by the binding (jobs.c) like a cursor. On a
 * plan failure the stream sets *broken to gen (the epoch's flag: the
 * plan of that generation is dropped, jobs.c slot_plan) and ends with a
 * retryable trailer. gen is never 0. */
void sc_stream_set_planread(sc_stream *s, sio_planread *r,
                            _Atomic unsigned *broken, unsigned gen);
/* The retry advice of that trailer. */
#define SC_STREAM_PLAN_RETRY_MS 200u

/* What the epoch lost up to the share's last item, asked when the share
 * ends cleanly at `position` (its length): fn writes a JSON object of at
 * most len - 1 bytes into buf (SIO_WIRE_SKIPPED_MAX + 1), or leaves it
 * empty when nothing was lost; it goes into the END summary as "skipped"
 * (sio_wenc_set_skipped). fn returns 0 while the epoch's readers have not
 * got that far (the stream asks again shortly), unless `late`: then it
 * writes what is known and returns 1. Called on the stream's thread;
 * userdata outlives the stream (the binding). */
typedef int (*sc_stream_skipped_fn)(void *userdata, uint64_t position,
                                    int late, char *buf, size_t len);
void sc_stream_set_skipped(sc_stream *s, sc_stream_skipped_fn fn,
                           void *userdata);

/* The sio_notify_fn of the stream's cursor (any thread, feed lock held). */
void sc_stream_notify(void *stream);

/* The request's arrival (CLOCK_MONOTONIC) and route, before the response
 * is queued: the first sample queued is timed from it (metrics.h). */
void sc_stream_set_arrival(sc_stream *s, const struct timespec *t0,
                           sc_route route);

/* The MHD content reader; cls is the sc_stream. MHD thread only. */
ssize_t sc_stream_reader(void *cls, uint64_t pos, char *buf, size_t max);

/* Ask the stream to end (any thread): after the sample being sent, the
 * error trailer with `reason` (not retryable: the share is over for this
 * consumer), then the connection is cut. Resumes a suspended connection.
 * Idempotent (the first cut wins). */
void sc_stream_cut(sc_stream *s, const char *reason);

/* The same for a transient condition (a drain before a restart): the
 * trailer is marked retryable and asks the consumer to come back after
 * retry_after_ms and resume where it stopped (shardio_wire.h). */
void sc_stream_cut_retry(sc_stream *s, const char *reason,
                         uint32_t retry_after_ms);

/* The request completed (MHD's completion callback; completed_ok: MHD
 * sent the whole response): MHD will never call the reader again and the
 * connection is gone; notify becomes a no-op. */
void sc_stream_gone(sc_stream *s, int completed_ok);

/* Is it cut / done (no more reader calls needed)? For drain waits. */
typedef enum sc_stream_outcome {
    SC_STREAM_RUNNING = 0,
    SC_STREAM_OK,          /* END written */
    SC_STREAM_ERROR,       /* the epoch failed: ERROR written */
    SC_STREAM_CUT,         /* cut (drain, job deleted): ERROR written */
    SC_STREAM_CLIENT_GONE  /* the client left before the end */
} sc_stream_outcome;

typedef struct sc_stream_stats {
    uint64_t bytes_out; /* bytes handed to MHD */
    uint64_t samples;   /* samples of the share sent in this response */
    uint64_t position;  /* position reached in the share */
    sc_stream_outcome outcome;
    int plan_failed;    /* ended because the plan could not go on */
} sc_stream_stats;

/* Counters; exact once the request completed. */
void sc_stream_get_stats(sc_stream *s, sc_stream_stats *st);
/* How long (ms, at now) the stream has waited for its next sample with
 * nothing to send; 0 when it is not waiting. Any thread. */
uint64_t sc_stream_waiting_ms(sc_stream *s, uint64_t now);
const char *sc_stream_outcome_name(sc_stream_outcome o);
const char *sc_stream_id(const sc_stream *s);
/* The reason of the error trailer sent ("" when none). */
const char *sc_stream_error(const sc_stream *s);

/* Free the stream (NULL is fine). Its cursor must be closed already (or
 * never bound), so no notify can reach it. */
void sc_stream_destroy(sc_stream *s);

#endif /* SC_STREAM_H */
