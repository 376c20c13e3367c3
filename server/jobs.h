/*
 * jobs.h — the jobs a server serves, and the epochs in flight of each
 * (jobs.c; status JSON and job metrics: status.c).
 *
 * A job is a sc_jobspec plus its resolved shard list. Per job, each epoch
 * in flight is one sio_feed (the epoch read once into a bounded window and
 * dealt to every consumer by reference). A feed is opened by the first
 * stream of its epoch, or by prefetch (--prefetch: once epoch E has been
 * read to its end, E+1 is opened so its window fills before its consumers
 * arrive); at most --max-epochs are in flight per job. A feed with no
 * stream for --feed-idle-ms is closed; one that failed is replaced for the
 * next stream. Each stream holds a sio_cursor of its epoch's feed; the
 * binding ties stream, cursor, feed and job together until the request
 * completes and a housekeeping thread (the manager) closes the cursor and
 * frees the stream, so nothing that can block runs on an HTTP thread.
 *
 * Three kinds of thread run here: the manager (releases streams, closes idle and
 * retired feeds, prefetches, samples throughput, frees deleted jobs; it
 * wakes when work is queued and every 500 ms for timers), the resolver
 * (resolves job sources, retrying failures with backoff from 1 s to 60 s)
 * and two planners (build epochs' plans in the order they were asked for,
 * so that one long build does not hold back another job's, and read a new
 * epoch's journal from state_dir for its first stream; a stream that
 * needs either is answered SC_JOBS_PLAN_PENDING and opened again once the
 * planner's waker says a piece of work ended).
 *
 * Lock order: registry mutex -> job mutex -> feed mutex (inside libshardio)
 * -> stream mutex -> MHD. The registry mutex is never held while a job
 * mutex is taken the other way round; feeds are closed (which joins their
 * producer) with no lock held.
 *
 * Threading: every function is thread-safe. Ownership: sc_jobs owns the
 * jobs; a binding holds its job from sc_jobs_stream_begin, and owns its
 * stream from sc_jobs_open_stream until the manager frees it after
 * sc_jobs_release. The stream itself is built by the caller (http.c):
 * nothing here knows the HTTP library.
 */
#ifndef SC_JOBS_H
#define SC_JOBS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "prom.h"
#include "request.h"
#include "settings.h"
#include "shardio.h"
#include "shardio_wire.h"
#include "stream.h"

typedef struct sc_jobs sc_jobs;

/* The bounds that refuse a new epoch (counted for /metrics). */
enum {
    SC_REFUSED_EPOCH_AHEAD = 0, /* --max-epochs-ahead (409) */
    SC_REFUSED_FEEDS_JOB,       /* --max-feeds-per-job (429) */
    SC_REFUSED_FEEDS_SERVER,    /* --max-feeds (429) */
    SC_REFUSED_EPOCH_RATE,      /* --max-new-epochs-per-minute (429) */
    SC_REFUSED_WORLD,           /* world above the window (400) */
    SC_REFUSED_COUNT
};
typedef struct sc_binding sc_binding;

/* Consumers listed per epoch in status (the rest are counted). */
#define SC_STATUS_CONSUMERS_MAX 4096u
/* Recent errors kept per job for status. */
#define SC_JOB_ERRORS_MAX 8u

/* Create the registry and start its threads. cfg and io must outlive it.
 * The jobs of cfg are not added here (see sc_jobs_put). */
sio_code sc_jobs_create(const sc_config *cfg, sio_io *io, sc_jobs **out,
                        char *msg, size_t msg_len);

/* Stop the threads, close every feed, free every job. Every binding must
 * have been released (the HTTP server is stopped first). NULL is fine.
 * Returns 0; or -1 when a thread is still inside object-store I/O after
 * a few seconds (a resolution or an epoch read in long retries): then
 * nothing is freed, io must stay alive, and the caller should exit. */
int sc_jobs_destroy(sc_jobs *j);

/*
 * Add a job, or replace the job of that name. An identical spec is a
 * no-op (200). A different one replaces the job: the old job's streams are
 * cut with an error trailer ("job redefined") and its feeds closed (200).
 * A new job answers 201. 409 when --max-jobs jobs exist. The source is
 * resolved by the resolver thread: the job is "resolving" until then.
 */
unsigned sc_jobs_put(sc_jobs *j, const sc_jobspec *spec, char *reason,
                     size_t reason_len);

/* Remove a job; its streams are cut ("job deleted"). 204, or 404. */
unsigned sc_jobs_delete(sc_jobs *j, const char *name, char *reason,
                        size_t reason_len);

/* sc_job_exists_fn for the request parser; userdata is the sc_jobs. */
int sc_jobs_exists(void *jobs, const char *name);

/* Wait until every job has had one resolution attempt (or timeout_ms). */
void sc_jobs_wait_resolved(sc_jobs *j, uint32_t timeout_ms);

/* Are all jobs resolved? 1, or 0 with a one-line reason. */
int sc_jobs_ready(sc_jobs *j, char *reason, size_t reason_len);

/*
 * What fixes the order of a job's epochs over the replica set (docs/operations.md
 * "Scale-out"): the fields below, and their fingerprint, the first
 * SIO_FINGERPRINT_LEN hex digits of the SHA-256 of their canonical text.
 * The server's own replica number is not part of it: every replica of a
 * set that is set up right has the same fingerprint.
 */
typedef struct sc_job_identity {
    char fingerprint[SIO_FINGERPRINT_LEN + 1];
    int contract;            /* 1; 2 for a mixed job or one with an
                                epoch_size */
    char shards[17];         /* hash of the resolved shard list, in order */
    uint64_t nshards;
    uint64_t seed;
    uint32_t interleave, shuffle_buffer;
    uint64_t buffer_bytes;
    const char *partition;   /* static strings */
    const char *on_error;
    char mix[17];            /* hash of the mixing spec and epoch_size, or
                                "none" */
    uint64_t epoch_size;
    uint64_t sample_max, field_max; /* a larger sample is a bad one */
    uint32_t replicas;       /* R */
} sc_job_identity;

/* The identity of job `name`: 200 with *out, 404 (no such job) or 503
 * (its source is not resolved yet, *reason says why). */
unsigned sc_jobs_identity(sc_jobs *j, const char *name, sc_job_identity *out,
                          char *reason, size_t reason_len);

/* {job name: fingerprint} of every job whose source is resolved (a new
 * JSON object; an empty one when out of memory). */
json_t *sc_jobs_fingerprints(sc_jobs *j);

/* Storage for the field names a stream's filter points at while the
 * stream is created (sc_jobs_stream_begin fills it). */
typedef struct sc_stream_fields {
    char names[SIO_TARW_FILTER_MAX][SIO_TARW_FIELD_NAME_MAX + 1];
    const char *ptrs[SIO_TARW_FILTER_MAX];
} sc_stream_fields;

/*
 * Begin a stream of req (route SC_ROUTE_STREAM or SC_ROUTE_SAMPLE): hold
 * its job in a new binding and fill *p with the stream's parameters, the
 * request's and the job's (partition, the default field filter, counters,
 * mix sources); p->id and p->conn are left to the caller. Pointers in *p
 * point into the job (valid while the binding holds it), into f and into
 * req. Returns 200 with *binding set, or 404 (unknown job) or 503 (not
 * ready, *retry_after seconds) with a one-line reason. The caller then
 * creates the stream (sc_stream_create) and opens it, or gives the binding
 * back with sc_jobs_stream_abort.
 */
unsigned sc_jobs_stream_begin(sc_jobs *j, const sc_request *req,
                              sc_stream_params *p, sc_stream_fields *f,
                              sc_binding **binding, unsigned *retry_after,
                              char *reason, size_t reason_len);

/* Give back a binding that was begun and not opened (NULL is fine). */
void sc_jobs_stream_abort(sc_jobs *j, sc_binding *b);

/*
 * Open the stream s of a begun binding: find or open the epoch's feed
 * (a /samples/{i} request: a feed of that one sample) and attach a cursor
 * that notifies s (sc_stream_notify), given to s with
 * sc_stream_set_cursor. A new epoch passes the churn bounds first
 * (--max-epochs-ahead: 409; --max-feeds-per-job, --max-feeds,
 * --max-new-epochs-per-minute: 429 with *retry_after), and the request's
 * world is checked before any feed is opened. Returns 200: the binding
 * owns s from here until sc_jobs_release; or the HTTP status (400, 404,
 * 409, 429, 503 with *retry_after seconds when > 0, 500) and a one-line
 * reason: the binding is gone and s is still the caller's.
 */
unsigned sc_jobs_open_stream(sc_jobs *j, sc_binding *b, const sc_request *req,
                             sc_stream *s, unsigned *retry_after,
                             char *reason, size_t reason_len);

/* What sc_jobs_open_stream answers (not an HTTP status) when the epoch's
 * plan is being built on a planner thread, or a new epoch's journal is
 * being read from state_dir there: the binding is gone and s is still the
 * caller's, as for an error. The caller waits, off its thread,
 * for the waker (sc_jobs_set_plan_waker) and opens the stream again from
 * sc_jobs_stream_begin. */
#define SC_JOBS_PLAN_PENDING 2u

/* The function the planner calls after every build or journal read, with ud (the HTTP
 * front resumes the requests that waited). Called on the planner thread,
 * with the planner's leaf lock held: it must not call back into the jobs.
 * fn NULL clears it; that returns after a call in progress ended. */
void sc_jobs_set_plan_waker(sc_jobs *j, void (*fn)(void *ud), void *ud);

/* The request of a binding completed (MHD's completion callback, after
 * sc_stream_gone): the manager closes the cursor, logs the outcome and
 * frees the stream. */
void sc_jobs_release(sc_jobs *j, sc_binding *b);

/* Cut every stream (drain) with the error trailer and `reason`, marked
 * retryable: consumers come back after retry_after_ms and resume. */
void sc_jobs_cut_all(sc_jobs *j, const char *reason, uint32_t retry_after_ms);

/* Wait until no stream is bound, or timeout_ms; returns those left. */
size_t sc_jobs_wait_streams(sc_jobs *j, uint32_t timeout_ms);

/* Status as JSON text (malloc'd; caller frees): name NULL lists every job
 * (GET /v1/jobs), otherwise one job in detail (GET /v1/jobs/{job}); NULL
 * when the job does not exist or memory ran out (*missing tells which). */
char *sc_jobs_status(sc_jobs *j, const char *name, int *missing);

/* Write the job, fetch, index, cache and sample-pool metrics; returns
 * the writer's state (sc_prom_done). */
sio_code sc_jobs_metrics(sc_jobs *j, sc_prom *p);

/* Write the server-wide epoch-churn metrics (no job names): feeds open and
 * new epochs refused by each bound. Returns the writer's state. */
sio_code sc_jobs_limits_metrics(sc_jobs *j, sc_prom *p);

#endif /* SC_JOBS_H */
