/*
 * stream.c — one consumer stream: cursor or plan reader -> encoder ->
 * output chain (sio_wchain, shardio_wire.h) -> MHD (contract, memory
 * bounds and lock order in stream.h). This file only writes the chain to
 * libmicrohttpd, suspends and resumes, and writes trailers.
 *
 * Threading: the reader state (encoder, output chain, held sample,
 * counters) is touched only by the thread running
 * sc_stream_reader, and after the request completed by the thread that
 * destroys the stream. s->mu guards suspended / notified / cut / gone and
 * the cut reason, which notify and cut touch from other threads.
 * Ownership: the stream owns its encoder, its output chain and one
 * reference to the sample whose pieces are being sent. It does not own
 * its cursor (jobs.c closes it before destroying the stream).
 */
#include "stream.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "metrics.h"
#include "settings.h"
#include "shardio_wire.h"

#define REASON_MAX 512

enum { ST_STREAMING = 0, ST_END_OK, ST_END_ERROR };

struct sc_stream {
    sc_stream_skipped_fn skipped_fn; /* what the epoch skipped (END) */
    void *skipped_ud;
    int end_pending;       /* the share ended; the END waits for the
                              epoch's losses up to its last item */
    uint64_t end_wait_ms;  /* since when (0: not yet asked) */
    pthread_mutex_t mu;
    struct MHD_Connection *conn;
    int suspended; /* we suspended conn and owe it a resume (mu) */
    int notified;  /* notify came while not suspended (mu) */
    int cut;       /* (mu) */
    int gone;      /* the request completed (mu) */
    char cut_reason[REASON_MAX]; /* (mu) */
    int cut_retryable;           /* (mu) */
    uint32_t cut_retry_after_ms; /* (mu) */

    /* A mixed job's samples sent per source (the job's counters). */
    _Atomic uint64_t *source_sent;
    size_t nsources;

    /* Reader state: samples come from the feed's cursor, or from the
     * epoch's plan (plan non-NULL: the stream's own reader). */
    sio_cursor *cursor;
    sio_planread *plan;
    _Atomic unsigned *plan_broken; /* the epoch's flag, set to plan_gen on
                                      a plan failure */
    unsigned plan_gen;
    int plan_failed;          /* this stream ended by one */
    int file_read;            /* file bytes read since the last check */
    int file_fail;            /* a file segment failed, or its check */
    int started_here;         /* the current sample began in this call */
    uint32_t encoding_source; /* the source of the sample just encoded */
    size_t start_off;         /* at this offset of the call's buffer */
    /* The samples begun in this call (a plan's: their files are checked
     * once, before the call's bytes go out): the first one's offset, and
     * the counters as they were before it. */
    int batch_open;
    size_t batch_off;
    uint64_t batch_samples, batch_position;
    uint32_t *batch_src;      /* per source, samples of the batch */
    sio_wenc *enc; /* the format's encoder */
    sio_wchain out; /* the encoded bytes not sent yet (shardio_wire.h) */
    const sio_sample *held; /* referenced while its segments are sent */
    const sio_sample *encoding; /* the sample being encoded (sink check) */
    sio_code sink_rc;
    int state;
    sc_stream_outcome outcome;
    uint64_t epoch, start;
    uint32_t rank, world;
    uint64_t bytes_out, samples, position;
    sc_stream_counters *counters;
    char id[40];
    char error[256]; /* reason of an ERROR trailer */
    struct timespec arrival; /* of the request (first-sample metric) */
    sc_route route;          /* 0: no arrival set, nothing timed */
    /* Heartbeats (frames): a KEEPALIVE frame goes out when the stream has
     * nothing to send and sent nothing for half of heartbeat_ms (the
     * manager's once-a-second resume brings it back here). */
    uint32_t heartbeat_ms;
    uint64_t last_out_ms;
    /* Since when the stream waits for its next sample (0: it does not;
     * read by the manager's stall check). */
    _Atomic uint64_t wait_since_ms;
};

static sio_code stream_err(sio_error *err, sio_code code, const char *fmt,
                           ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static sio_code stream_err(sio_error *err, sio_code code, const char *fmt,
                           ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Does [p, p+len) lie inside one field of the sample being encoded? Then
 * it is payload that stays valid while the sample is referenced. */
static int in_sample(const sio_sample *smp, const unsigned char *p,
                     size_t len)
{
    if (!smp)
        return 0;
    for (size_t i = 0; i < smp->nfields; i++) {
        const sio_field *f = &smp->fields[i];
        if (f->len && p >= f->data && len <= f->len &&
            (size_t)(p - f->data) <= f->len - len)
            return 1;
    }
    return 0;
}

/* The encoders' extent sink: a payload left in its file (plan streams). */
static sio_code sink_extent(void *ud, const sio_extent *x, size_t len)
{
    sc_stream *s = ud;
    return sio_wchain_file(&s->out, x->fd, x->offset, len);
}

/* The encoders' sink: record payload by reference, copy header bytes. */
static sio_code sink(void *ud, const void *data, size_t len)
{
    sc_stream *s = ud;
    if (in_sample(s->encoding, data, len))
        return sio_wchain_ref(&s->out, data, len);
    return sio_wchain_copy(&s->out, data, len);
}

/* Everything recorded has been sent: drop the sample, reset buffers. */
static void segments_done(sc_stream *s)
{
    sio_wchain_reset(&s->out, SC_STREAM_PENDING_KEEP);
    if (s->held) {
        sio_sample_unref(s->held);
        s->held = NULL;
    }
}

/* A file piece's next bytes (pread: the one copy the payload makes
 * before the socket; a shard-cache entry's bytes are checked against its
 * block sums as they are read). SIO_OK, or SIO_ERR_CHANGED when the file
 * ended early, failed or failed its check (it changed under the plan). */
static sio_code read_piece(void *ud, int fd, void *dst, size_t k,
                           uint64_t off)
{
    sc_stream *s = ud;
    if (!s->plan)
        return SIO_ERR_INVALID;
    sio_code rc = sio_planread_pread(s->plan, fd, dst, k, off);
    if (rc == SIO_OK)
        s->file_read = 1;
    return rc;
}

/* Copy the chain's next bytes into buf; returns the bytes copied. A file
 * piece that cannot be read whole, or a plan check that fails once the
 * sample's bytes are read, sets s->file_fail and stops. */
static size_t drain(sc_stream *s, char *buf, size_t max)
{
    sio_code rc;
    size_t n = sio_wchain_drain(&s->out, buf, max, read_piece, s, &rc);
    if (rc) {
        s->file_fail = 1;
        return n;
    }
    if (!sio_wchain_pending(&s->out) && sio_wchain_used(&s->out)) {
        /* The sample's file bytes are read: are they the indexed ones? */
        if (s->file_read && s->plan &&
            sio_planread_verify(s->plan) != SIO_OK) {
            s->file_fail = 1;
            return n;
        }
        s->file_read = 0;
        segments_done(s);
    }
    return n;
}

/* A stream cut because the seek limits were reached comes back after
 * this long (the advice in its retryable trailer). */
#define SEEK_BUSY_RETRY_MS 2000u

/* Encode the error trailer (segments must be empty) and end. */
static void write_error_retry(sc_stream *s, const char *reason,
                              sc_stream_outcome outcome, int retryable,
                              uint32_t retry_after_ms)
{
    sio_code rc = sio_wenc_error(s->enc, reason, retryable, retry_after_ms);
    if (rc != SIO_OK) {
        /* Nothing better to send: the cut connection says it all. */
        sio_wchain_reset(&s->out, SIZE_MAX);
    }
    s->state = ST_END_ERROR;
    s->outcome = outcome;
    /* The stream's record of the reason (logs, status) keeps its first
     * bytes; the trailer above carried it whole. */
    size_t n = strnlen(reason, sizeof s->error - 1);
    memcpy(s->error, reason, n);
    s->error[n] = '\0';
}

static void write_error(sc_stream *s, const char *reason,
                        sc_stream_outcome outcome)
{
    write_error_retry(s, reason, outcome, 0, 0);
}

sio_code sc_stream_create(const sc_stream_params *p, sc_stream **out,
                          sio_error *err)
{
    sio_code rc = SIO_OK;
    sc_stream *s = NULL;

    *out = NULL;
    if (p->nfields > SIO_TARW_FILTER_MAX)
        return stream_err(err, SIO_ERR_INVALID, "too many fields");
    s = calloc(1, sizeof *s);
    if (!s)
        return stream_err(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    sio_wchain_init(&s->out, SC_STREAM_PENDING_MAX, SC_STREAM_SEGMENTS_MAX);
    s->epoch = p->epoch;
    s->rank = p->rank;
    s->world = p->world;
    s->start = p->start;
    s->position = p->start;
    s->counters = p->counters;
    s->conn = p->conn;
    s->heartbeat_ms = p->format == SC_FORMAT_FRAMES ? p->heartbeat_ms : 0;
    s->last_out_ms = sio_now_ms();
    snprintf(s->id, sizeof s->id, "%s", p->id ? p->id : "-");
    if (p->format == SC_FORMAT_FRAMES) {
        sio_frames_header h;
        memset(&h, 0, sizeof h);
        h.job = p->job;
        h.epoch = p->epoch;
        h.rank = p->rank;
        h.world = p->world;
        h.start = p->start;
        h.global_start = p->global_start;
        h.partition = p->partition;
        h.sources = p->sources;
        h.nsources = p->nsources;
        h.fingerprint = p->fingerprint;
        h.replica = p->replica;
        h.replicas = p->replicas;
        h.served_by = p->served_by;
        h.heartbeat_ms = s->heartbeat_ms;
        rc = sio_framew_create(&h, p->fields, p->nfields, sink, s, &s->enc,
                               err);
    } else {
        rc = sio_tarw_create(p->fields, p->nfields, sink, s, &s->enc, err);
        if (rc == SIO_OK && p->nsources)
            sio_wenc_set_sources(s->enc, p->source_names, p->nsources);
        if (rc == SIO_OK && p->fingerprint && p->job) {
            sio_stream_ident id;
            memset(&id, 0, sizeof id);
            snprintf(id.job, sizeof id.job, "%s", p->job);
            id.epoch = p->epoch;
            snprintf(id.fingerprint, sizeof id.fingerprint, "%s",
                     p->fingerprint);
            id.replica = p->replica;
            id.replicas = p->replicas;
            id.served_by = p->served_by;
            rc = sio_tarw_write_ident(s->enc, &id, err);
        }
    }
    s->source_sent = p->source_sent;
    s->nsources = p->nsources;
    if (rc == SIO_OK && p->nsources &&
        !(s->batch_src = calloc(p->nsources, sizeof *s->batch_src)))
        rc = SIO_ERR_NOMEM;
    if (rc)
        goto out;
    *out = s;
    s = NULL;
out:
    sc_stream_destroy(s);
    return rc;
}

void sc_stream_set_arrival(sc_stream *s, const struct timespec *t0,
                           sc_route route)
{
    s->arrival = *t0;
    s->route = route;
}

void sc_stream_set_cursor(sc_stream *s, sio_cursor *c)
{
    s->cursor = c;
}

void sc_stream_set_skipped(sc_stream *s, sc_stream_skipped_fn fn,
                           void *userdata)
{
    s->skipped_fn = fn;
    s->skipped_ud = userdata;
}

void sc_stream_set_planread(sc_stream *s, sio_planread *r,
                            _Atomic unsigned *broken, unsigned gen)
{
    s->plan = r;
    s->plan_broken = broken;
    s->plan_gen = gen;
    sio_wenc_set_extent_sink(s->enc, sink_extent);
    /* A plan that grows wakes the stream when its next sample is decided
     * (sc_stream_notify: a flag and a resume, under s->mu only). */
    sio_planread_set_notify(r, sc_stream_notify, s);
}

/* Resume the connection if this stream suspended it (s->mu held). */
static void resume_locked(sc_stream *s)
{
    if (s->suspended && !s->gone) {
        s->suspended = 0;
        MHD_resume_connection(s->conn);
    }
}

void sc_stream_notify(void *stream)
{
    sc_stream *s = stream;
    pthread_mutex_lock(&s->mu);
    if (s->suspended)
        resume_locked(s);
    else
        s->notified = 1;
    pthread_mutex_unlock(&s->mu);
}

static void cut(sc_stream *s, const char *reason, int retryable,
                uint32_t retry_after_ms)
{
    pthread_mutex_lock(&s->mu);
    if (!s->cut) {
        s->cut = 1;
        snprintf(s->cut_reason, sizeof s->cut_reason, "%s", reason);
        s->cut_retryable = retryable;
        s->cut_retry_after_ms = retry_after_ms;
    }
    resume_locked(s);
    pthread_mutex_unlock(&s->mu);
}

void sc_stream_cut(sc_stream *s, const char *reason)
{
    cut(s, reason, 0, 0);
}

void sc_stream_cut_retry(sc_stream *s, const char *reason,
                         uint32_t retry_after_ms)
{
    cut(s, reason, 1, retry_after_ms);
}

void sc_stream_gone(sc_stream *s, int completed_ok)
{
    pthread_mutex_lock(&s->mu);
    s->gone = 1;
    s->suspended = 0;
    pthread_mutex_unlock(&s->mu);
    /* Only a response MHD finished sending is a delivered end. */
    if (s->state == ST_STREAMING ||
        (s->state == ST_END_OK && (!completed_ok || sio_wchain_pending(&s->out))))
        s->outcome = SC_STREAM_CLIENT_GONE;
}

/* Has the consumer closed or reset its connection? A peek that sees the
 * end of the stream (0) or an error other than "nothing to read" says so;
 * bytes waiting (a pipelined request) or EAGAIN mean it is still there. */
static int peer_gone(sc_stream *s)
{
    if (!s->conn)
        return 0;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char c;
    if (!ci)
        return 0;
    ssize_t r = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0)
        return 1;
    return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* Take the next sample (or the end) from the cursor and encode it.
 * Returns 1 when segments were added or the stream ended, 0 when nothing
 * is ready (SIO_ERR_AGAIN). */
/*
 * A sample whose headers do not fit the stream's bounds (pending bytes or
 * segments: a huge key repeated over many fields) used to fail the stream
 * at its position, and so every resume at the same place. It is now sent
 * as a placeholder at its position instead: key SC_STREAM_SKIPPED_KEY and no
 * field (frames: a SAMPLE with 0 fields, positions stay dense; tar:
 * nothing, as for a sample the field filter empties), and logged.
 */
static sio_code encode_skipped(sc_stream *s, const sio_sample *smp,
                               uint64_t pos)
{
    sio_sample empty = *smp;
    sio_wchain_reset(&s->out, SIZE_MAX);
    empty.key = SC_STREAM_SKIPPED_KEY;
    empty.nfields = 0;
    empty.fields = NULL;
    empty.bytes = 0;
    SC_LOG(SIO_LOG_WARN,
           "event=sample_skipped id=%s index=%" PRIu64 " position=%" PRIu64
           " reason=\"sample headers above the stream's bounds\"",
           s->id, smp->global_index, pos);
    return sio_wenc_sample(s->enc, &empty, pos);
}

/* The plan could not give the next sample (a shard changed, shrank or
 * vanished under it): the epoch drops its plan, and the consumer comes
 * back shortly and resumes where it is, from the streaming path. */
/* Why the plan could not go on (a file segment that came short leaves
 * the reader no message of its own). */
static const char *plan_why(const sc_stream *s)
{
    const char *why = sio_planread_errmsg(s->plan);
    return *why ? why : "a shard file ended early";
}

static void plan_broken(sc_stream *s, sio_code rc)
{
    SC_LOG(SIO_LOG_WARN, "event=plan_failed id=%s code=%d reason=\"%s\"",
           s->id, (int)rc, plan_why(s));
    if (s->plan_broken)
        atomic_store(s->plan_broken, s->plan_gen);
    s->plan_failed = 1;
}

static void plan_failed(sc_stream *s, sio_code rc)
{
    char reason[REASON_MAX];
    plan_broken(s, rc);
    snprintf(reason, sizeof reason, "%s: %s (retry: the epoch's plan is "
             "made again)", sio_strerror(rc), plan_why(s));
    write_error_retry(s, reason, SC_STREAM_CUT, 1, SC_STREAM_PLAN_RETRY_MS);
}

/* A file segment could not be read, or its bytes failed the plan's check:
 * none of the current sample may go out. When it began in this call, the
 * buffer is cut back to its start and the retryable trailer follows (1);
 * when its first bytes were sent before, only cutting the connection is
 * left (0). */
/* The batch's samples went out: their per-source counts join the job's. */
static void batch_commit(sc_stream *s)
{
    s->batch_open = 0;
    for (size_t i = 0; s->batch_src && i < s->nsources; i++)
        if (s->batch_src[i]) {
            atomic_fetch_add(&s->source_sent[i], s->batch_src[i]);
            s->batch_src[i] = 0;
        }
}

/* The batch's samples do not go out: its counters as they were. */
static void batch_undo(sc_stream *s)
{
    if (!s->batch_open)
        return;
    uint64_t k = s->samples - s->batch_samples;
    if (s->counters && k)
        atomic_fetch_sub(&s->counters->samples, k);
    s->samples = s->batch_samples;
    s->position = s->batch_position;
    for (size_t i = 0; s->batch_src && i < s->nsources; i++)
        s->batch_src[i] = 0;
    s->batch_open = 0;
}

static int file_failed(sc_stream *s, size_t *n)
{
    s->file_fail = 0;
    s->file_read = 0;
    sio_wchain_reset(&s->out, SIZE_MAX);
    if (s->batch_open) {
        /* Every sample begun in this call goes: the check covered the
         * files of them all. */
        *n = s->batch_off;
        batch_undo(s);
        s->started_here = 0;
        plan_failed(s, SIO_ERR_CHANGED);
        return 1;
    }
    if (s->started_here) {
        *n = s->start_off;
        s->started_here = 0;
        plan_failed(s, SIO_ERR_CHANGED);
        return 1;
    }
    plan_broken(s, SIO_ERR_CHANGED);
    s->state = ST_END_ERROR;
    s->outcome = SC_STREAM_CUT;
    snprintf(s->error, sizeof s->error,
             "a shard changed under the epoch's plan mid-sample: "
             "connection cut");
    return 0;
}

/*
 * The clean end. Its summary tells what the epoch lost up to the share's
 * last item (skipped_fn), which every reader of the epoch finds the same
 * way; where no reader of the epoch has got that far yet (a consumer that
 * resumes at its share's end on a server just started), the END waits for
 * one, at most END_LOSS_WAIT_MS, then goes with what is known, marked
 * "partial". Returns 1 when the end was encoded, 0 while it waits.
 */
#define END_LOSS_WAIT_MS 30000u
static int encode_end(sc_stream *s)
{
    char reason[REASON_MAX];
    sio_tarw_summary sum = {s->epoch, s->rank,    s->world,
                            s->start, s->samples, s->position};
    /* Only while the end is encoded (the sink copies it): no stream
     * holds the buffer for its whole life. Out of memory: no
     * "skipped", the end itself still goes. */
    char *skipped = s->skipped_fn ? malloc(SIO_WIRE_SKIPPED_MAX + 1) : NULL;
    if (skipped) {
        uint64_t now = sio_now_ms();
        if (!s->end_wait_ms)
            s->end_wait_ms = now ? now : 1;
        int late = now - s->end_wait_ms >= END_LOSS_WAIT_MS;
        skipped[0] = '\0';
        if (!s->skipped_fn(s->skipped_ud, s->position, late, skipped,
                           SIO_WIRE_SKIPPED_MAX + 1)) {
            free(skipped);
            return 0; /* asked again on the next notify (once a second) */
        }
    }
    sio_code rc;
    sio_wenc_set_skipped(s->enc, skipped && skipped[0] ? skipped : NULL);
    rc = sio_wenc_end(s->enc, &sum);
    sio_wenc_set_skipped(s->enc, NULL);
    free(skipped);
    s->end_pending = 0;
    if (rc != SIO_OK) {
        snprintf(reason, sizeof reason, "cannot encode the end: %s",
                 sio_strerror(rc));
        sio_wchain_reset(&s->out, SIZE_MAX);
        write_error(s, reason, SC_STREAM_ERROR);
        return 1;
    }
    s->state = ST_END_OK;
    s->outcome = SC_STREAM_OK;
    return 1;
}

static int advance(sc_stream *s)
{
    const sio_sample *smp = NULL;
    char reason[REASON_MAX];
    sio_code rc;

    if (s->end_pending)
        return encode_end(s);

    const sio_extent *ext = NULL;
    if (s->plan) {
        rc = sio_planread_next(s->plan, &smp, &ext);
        if (rc == SIO_ERR_BUSY) {
            /* Out of descriptors for now: the plan stays, the consumer
             * comes back and resumes. */
            snprintf(reason, sizeof reason, "%s: %s", sio_strerror(rc),
                     sio_planread_errmsg(s->plan));
            SC_LOG(SIO_LOG_WARN, "event=stream_busy id=%s reason=\"%s\"",
                   s->id, sio_planread_errmsg(s->plan));
            write_error_retry(s, reason, SC_STREAM_CUT, 1,
                              SEEK_BUSY_RETRY_MS);
            return 1;
        }
        if (rc == SIO_ERR_AGAIN)
            return 0; /* a growing plan: woken when it has the sample */
        if (rc != SIO_OK && !sio_planread_fatal(s->plan)) {
            plan_failed(s, rc);
            return 1;
        }
        /* Else the epoch itself fails here (on_error=fail): as on its
         * feed. */
    } else {
        rc = sio_cursor_next(s->cursor, &smp);
    }
    if (rc == SIO_ERR_AGAIN)
        return 0;
    if (rc != SIO_OK) {
        snprintf(reason, sizeof reason, "%s: %s", sio_strerror(rc),
                 s->plan ? sio_planread_errmsg(s->plan)
                         : sio_cursor_errmsg(s->cursor));
        char red[REASON_MAX], q[REASON_MAX + 16];
        sc_redact_source(reason, red, sizeof red);
        SC_LOG(SIO_LOG_WARN, "event=stream_failed id=%s code=%d reason=%s",
               s->id, (int)rc, sc_log_quote(q, sizeof q, red, strlen(red)));
        /* The seek limits were reached (the consumer fell behind the
         * window, or needs the even-pad tail): it comes back shortly and
         * resumes where it is. */
        if (rc == SIO_ERR_BUSY)
            write_error_retry(s, reason, SC_STREAM_CUT, 1,
                              SEEK_BUSY_RETRY_MS);
        /* A shard that changed under a seek's read (a local file
         * rewritten while it was read): whole samples of it only, and the
         * consumer comes back for the rest (read as the file is then). */
        else if (rc == SIO_ERR_CHANGED && !s->plan)
            write_error_retry(s, reason, SC_STREAM_CUT, 1,
                              SC_STREAM_PLAN_RETRY_MS);
        else
            write_error(s, reason, SC_STREAM_ERROR);
        return 1;
    }
    if (!smp) {
        s->end_pending = 1;
        return encode_end(s);
    }
    /* The position of this sample is the count before it. */
    uint64_t pos = (s->plan ? sio_planread_position(s->plan)
                            : sio_cursor_position(s->cursor)) - 1;
    s->encoding = smp;
    s->encoding_source = smp->source;
    rc = sio_wenc_sample_ext(s->enc, smp, ext, pos);
    s->encoding = NULL;
    if (rc == SIO_ERR_LIMIT)
        rc = encode_skipped(s, smp, pos);
    /* A plan's sample is its reader's (valid until the next one), not a
     * reference of the stream's. */
    if (s->plan)
        smp = NULL;
    if (rc != SIO_OK) {
        /* Nothing of this sample has been sent yet: drop what the encoder
         * recorded, so the trailer follows a whole sample. */
        sio_sample_unref(smp);
        sio_wchain_reset(&s->out, SIZE_MAX);
        snprintf(reason, sizeof reason, "cannot encode sample %" PRIu64
                 ": %s", pos, sio_strerror(rc));
        write_error(s, reason, SC_STREAM_ERROR);
        return 1;
    }
    uint32_t source = s->encoding_source;
    s->held = smp;
    s->samples++;
    if (atomic_load_explicit(&s->wait_since_ms, memory_order_relaxed))
        atomic_store_explicit(&s->wait_since_ms, 0, memory_order_relaxed);
    s->position = pos + 1;
    if (s->counters)
        atomic_fetch_add(&s->counters->samples, 1);
    if (s->batch_src && source < s->nsources)
        s->batch_src[source]++; /* counted once the batch goes out */
    if (s->samples == 1 && s->route)
        sc_metrics_first_sample(s->route, &s->arrival);
    if (!sio_wchain_used(&s->out))
        segments_done(s); /* a tar sample with no kept field */
    return 1;
}

/* Before the call's bytes go out: the files the plan read for them since
 * the last check kept their identity? 0: they go; 1: a file changed
 * (s->file_fail set: the samples begun in this call are cut back and a
 * retryable trailer follows, or the connection is cut). Without a plan
 * sample in the call, the per-source counts of the feed's samples join
 * the job's here too. */
static int sent_unchecked(sc_stream *s)
{
    if (s->plan && (s->file_read || s->batch_open) &&
        sio_planread_verify(s->plan) != SIO_OK) {
        s->file_fail = 1;
        return 1;
    }
    s->file_read = 0;
    batch_commit(s);
    return 0;
}

ssize_t sc_stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    sc_stream *s = cls;
    size_t n = 0;
    ssize_t ret;
    (void)pos;

    if (max > (size_t)SSIZE_MAX)
        max = (size_t)SSIZE_MAX;
    s->started_here = 0;
    s->batch_open = 0;
    for (;;) {
        if (!s->file_fail)
            n += drain(s, buf + n, max - n);
        if (s->file_fail) {
            if (file_failed(s, &n))
                continue; /* the trailer follows the last whole sample */
            ret = MHD_CONTENT_READER_END_WITH_ERROR;
            goto out;
        }
        if (n == max || sio_wchain_pending(&s->out)) {
            /* The call's bytes go out (part of a sample among them): the
             * files read for them are checked first. */
            if (sent_unchecked(s))
                continue;
            break;
        }
        /* Every recorded byte is out: the end, or the next sample. */
        if (s->state == ST_END_OK) {
            if (n == 0) {
                ret = MHD_CONTENT_READER_END_OF_STREAM;
                goto out;
            }
            if (sent_unchecked(s))
                continue;
            break;
        }
        if (s->state == ST_END_ERROR) {
            if (n == 0) {
                /* The trailer is out: cut the connection without the
                 * chunked terminator. */
                ret = MHD_CONTENT_READER_END_WITH_ERROR;
                goto out;
            }
            if (sent_unchecked(s))
                continue;
            break;
        }
        pthread_mutex_lock(&s->mu);
        int was_cut = s->cut, retryable = s->cut_retryable;
        uint32_t retry_after_ms = s->cut_retry_after_ms;
        char reason[REASON_MAX];
        if (was_cut)
            snprintf(reason, sizeof reason, "%s", s->cut_reason);
        pthread_mutex_unlock(&s->mu);
        if (was_cut) {
            write_error_retry(s, reason, SC_STREAM_CUT, retryable,
                              retry_after_ms);
            continue;
        }
        s->started_here = 1;
        s->start_off = n;
        if (s->plan && !s->batch_open) {
            s->batch_open = 1;
            s->batch_off = n;
            s->batch_samples = s->samples;
            s->batch_position = s->position;
        }
        if (advance(s))
            continue;
        if (n > 0) {
            /* send what we have; the notify flag catches up */
            if (sent_unchecked(s))
                continue;
            break;
        }
        /* Nothing to send. A suspended connection is not polled, so look
         * at the socket first: a consumer that went away while waiting
         * ends the request now (its cursor detaches and stops holding the
         * window) instead of when data next comes. */
        if (peer_gone(s)) {
            s->outcome = SC_STREAM_CLIENT_GONE;
            ret = MHD_CONTENT_READER_END_WITH_ERROR;
            goto out;
        }
        uint64_t now = sio_now_ms();
        if (!atomic_load_explicit(&s->wait_since_ms, memory_order_relaxed))
            atomic_store_explicit(&s->wait_since_ms, now ? now : 1,
                                  memory_order_relaxed);
        /* A heartbeat while it waits: the consumer sees the server alive
         * (a stuck one is cut by the manager's stall check instead). */
        if (s->heartbeat_ms && now - s->last_out_ms >= s->heartbeat_ms / 2 &&
            sio_wenc_keepalive(s->enc) == SIO_OK) {
            s->last_out_ms = now;
            continue;
        }
        /* Leave MHD's event loop until notify or cut resumes us (returning
         * 0 without suspending would spin). A notify that came since
         * sio_cursor_next returned means "try again" instead. */
        pthread_mutex_lock(&s->mu);
        if (s->notified || s->cut) {
            s->notified = 0;
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        /* Without a connection (a caller other than MHD) there is nothing
         * to suspend: 0 means "nothing yet, call again". */
        if (s->conn) {
            s->suspended = 1;
            MHD_suspend_connection(s->conn);
        }
        pthread_mutex_unlock(&s->mu);
        ret = 0;
        goto out;
    }
    ret = (ssize_t)n;
out:
    if (ret > 0) {
        if (s->heartbeat_ms)
            s->last_out_ms = sio_now_ms();
        s->bytes_out += (uint64_t)ret;
        if (s->counters)
            atomic_fetch_add(&s->counters->bytes, (uint64_t)ret);
    }
    return ret;
}

uint64_t sc_stream_waiting_ms(sc_stream *s, uint64_t now)
{
    uint64_t since = atomic_load_explicit(&s->wait_since_ms,
                                          memory_order_relaxed);
    return since && now > since ? now - since : 0;
}

void sc_stream_get_stats(sc_stream *s, sc_stream_stats *st)
{
    st->bytes_out = s->bytes_out;
    st->samples = s->samples;
    st->position = s->position;
    st->outcome = s->outcome;
    st->plan_failed = s->plan_failed;
}

const char *sc_stream_outcome_name(sc_stream_outcome o)
{
    switch (o) {
    case SC_STREAM_RUNNING:
        return "running";
    case SC_STREAM_OK:
        return "ok";
    case SC_STREAM_ERROR:
        return "error";
    case SC_STREAM_CUT:
        return "cut";
    case SC_STREAM_CLIENT_GONE:
        return "client_gone";
    }
    return "unknown";
}

const char *sc_stream_error(const sc_stream *s)
{
    return s->error;
}

const char *sc_stream_id(const sc_stream *s)
{
    return s->id;
}

void sc_stream_destroy(sc_stream *s)
{
    if (!s)
        return;
    if (s->held)
        sio_sample_unref(s->held);
    sio_wenc_destroy(s->enc);
    sio_wchain_free(&s->out);
    free(s->batch_src);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
