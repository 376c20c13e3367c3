/*
 * stream.c — one consumer stream (contract and lock order in stream.h).
 *
 * Threading: the producer thread runs produce(); MHD's thread runs
 * sc_stream_poll_open / sc_stream_reader; anyone may run sc_stream_cancel.
 * Every field below the mutex is protected by it, except the producer-only
 * fields marked so.
 * Ownership: the stream owns its queue, its copies of the parameters and,
 * while the producer runs, the consumer (which owns the epoch); the
 * producer closes them before it exits.
 */
#include "stream.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "shardio_wire.h"

/* The producer wakes a suspended reader once this many bytes are queued,
 * or at the end of each sample, so that small header writes do not each
 * cost a resume/suspend round. */
#define FLUSH_BYTES (32u * 1024u)

#define REASON_MAX 512

enum { FIN_NONE = 0, FIN_OK, FIN_ERROR, FIN_CANCELLED, FIN_OPEN_FAILED };

struct sc_stream {
    pthread_mutex_t mu;
    pthread_cond_t space; /* signalled when the reader frees queue bytes */
    struct MHD_Connection *conn;
    int suspended;        /* we suspended conn and owe it a resume */
    int cancelled;
    sc_open_state open_state;
    unsigned open_status;
    char open_reason[REASON_MAX];
    int finished;         /* FIN_*: the producer wrote its last byte */
    unsigned char *q;     /* ring buffer of cap bytes */
    size_t cap, head, len;
    uint64_t bytes_out;
    uint64_t samples;
    uint64_t position;

    /* Set before the producer starts, then read-only. */
    pthread_t thread;
    int thread_started;
    sio_io *io;
    const sio_shardlist *list;
    sio_epoch_config ecfg;
    sio_partition partition;
    uint32_t rank, world;
    uint64_t start;
    size_t nfields;
    char fields[SIO_TARW_FILTER_MAX][SIO_TARW_FIELD_NAME_MAX + 1];
    char id[32];
};

/* Resume the connection if we suspended it. Caller holds s->mu. */
static void wake_reader_locked(sc_stream *s)
{
    if (s->suspended) {
        s->suspended = 0;
        MHD_resume_connection(s->conn);
    }
}

/* sio_tarw sink: copy into the ring, waiting for room (backpressure). */
static sio_code queue_write(void *ud, const void *data, size_t len)
{
    sc_stream *s = ud;
    const unsigned char *p = data;
    sio_code rc = SIO_OK;

    pthread_mutex_lock(&s->mu);
    while (len > 0) {
        while (s->len == s->cap && !s->cancelled)
            pthread_cond_wait(&s->space, &s->mu);
        if (s->cancelled) {
            rc = SIO_ERR_CANCELED;
            goto out;
        }
        size_t tail = (s->head + s->len) % s->cap;
        size_t room = s->cap - s->len;
        size_t n = len < room ? len : room;
        size_t first = n < s->cap - tail ? n : s->cap - tail;
        memcpy(s->q + tail, p, first);
        memcpy(s->q, p + first, n - first);
        s->len += n;
        p += n;
        len -= n;
        if (s->len >= FLUSH_BYTES || s->len == s->cap)
            wake_reader_locked(s);
    }
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Make queued bytes visible to a suspended reader now. */
static void queue_flush(sc_stream *s, uint64_t samples, uint64_t position)
{
    pthread_mutex_lock(&s->mu);
    s->samples = samples;
    s->position = position;
    if (s->len > 0)
        wake_reader_locked(s);
    pthread_mutex_unlock(&s->mu);
}

static void set_finished(sc_stream *s, int fin)
{
    pthread_mutex_lock(&s->mu);
    s->finished = fin;
    wake_reader_locked(s);
    pthread_mutex_unlock(&s->mu);
}

static void set_open(sc_stream *s, sc_open_state st, unsigned status,
                     const char *reason)
{
    pthread_mutex_lock(&s->mu);
    s->open_state = st;
    s->open_status = status;
    snprintf(s->open_reason, sizeof s->open_reason, "%s", reason);
    if (st == SC_OPEN_FAILED)
        s->finished = FIN_OPEN_FAILED;
    wake_reader_locked(s);
    pthread_mutex_unlock(&s->mu);
}

static sio_code stream_err(sio_error *err, sio_code code, const char *fmt,
                           ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Fill err (may be NULL) and return code: the server's counterpart of the
 * library-internal sio_seterr. */
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

static unsigned open_status(sio_code rc)
{
    switch (rc) {
    case SIO_ERR_INVALID:
        return 400;
    case SIO_ERR_NOMEM:
    case SIO_ERR_RETRY:
        return 503;
    default:
        return 500;
    }
}

static void *produce(void *arg)
{
    sc_stream *s = arg;
    sio_epoch *ep = NULL;
    sio_consumer *c = NULL;
    sio_tarw *w = NULL;
    sio_error err = {SIO_OK, ""};
    char reason[REASON_MAX];
    const char *filter[SIO_TARW_FILTER_MAX];
    uint64_t samples = 0;
    uint64_t reached = s->start; /* position after the last sample sent */
    sio_code rc;
    int fin = FIN_OK;

    for (size_t i = 0; i < s->nfields; i++)
        filter[i] = s->fields[i];
    rc = sio_tarw_create(filter, s->nfields, queue_write, s, &w, &err);
    if (rc == SIO_OK)
        rc = sio_epoch_open(s->io, s->list, &s->ecfg, &ep, &err);
    if (rc == SIO_OK) {
        /* The consumer owns ep from here on, even when this fails. */
        rc = sio_consumer_open(ep, s->rank, s->world, s->partition, s->start,
                               &c, &err);
        ep = NULL;
    }
    if (rc != SIO_OK) {
        snprintf(reason, sizeof reason, "cannot open epoch: %s",
                 err.msg[0] ? err.msg : sio_strerror(rc));
        SC_LOG(SIO_LOG_WARN, "event=stream_open_failed id=%s code=%d", s->id,
               (int)rc);
        set_open(s, SC_OPEN_FAILED, open_status(rc), reason);
        fin = FIN_OPEN_FAILED;
        goto out;
    }
    set_open(s, SC_OPEN_OK, 200, "");

    for (;;) {
        const sio_sample *smp = NULL;
        rc = sio_consumer_next(c, &smp);
        if (rc != SIO_OK) {
            snprintf(reason, sizeof reason, "%s: %s", sio_strerror(rc),
                     sio_consumer_errmsg(c));
            break;
        }
        if (!smp)
            break;
        /* The position of this sample is the count before it. */
        uint64_t pos = sio_consumer_position(c) - 1;
        rc = sio_tarw_sample(w, smp, pos);
        sio_sample_unref(smp);
        if (rc != SIO_OK) {
            snprintf(reason, sizeof reason, "cannot encode sample: %s",
                     sio_strerror(rc));
            break;
        }
        samples++;
        reached = sio_consumer_position(c);
        queue_flush(s, samples, reached);
    }
    if (rc == SIO_ERR_CANCELED) {
        fin = FIN_CANCELLED;
    } else if (rc == SIO_OK) {
        sio_tarw_summary sum = {s->ecfg.epoch, s->rank, s->world,
                                s->start,      samples, reached};
        rc = sio_tarw_end(w, &sum);
        fin = rc == SIO_OK ? FIN_OK : FIN_CANCELLED;
    } else {
        SC_LOG(SIO_LOG_WARN, "event=stream_failed id=%s code=%d", s->id,
               (int)rc);
        rc = sio_tarw_error(w, reason);
        fin = rc == SIO_OK ? FIN_ERROR : FIN_CANCELLED;
    }
    queue_flush(s, samples, reached);
out:
    set_finished(s, fin);
    sio_consumer_close(c);
    sio_epoch_close(ep);
    sio_tarw_destroy(w);
    return NULL;
}

sio_code sc_stream_start(const sc_stream_params *p, struct MHD_Connection *conn,
                         sc_stream **out, sio_error *err)
{
    sio_code rc = SIO_OK;
    sc_stream *s = NULL;
    int mu_ok = 0, cv_ok = 0;

    *out = NULL;
    if (!p->io || !p->list || p->nfields > SIO_TARW_FILTER_MAX ||
        p->queue_bytes < SC_STREAM_QUEUE_MIN) {
        rc = stream_err(err, SIO_ERR_INVALID, "stream: bad parameters");
        goto out;
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->q = malloc(p->queue_bytes))) {
        rc = stream_err(err, SIO_ERR_NOMEM, "stream: out of memory");
        goto out;
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        rc = stream_err(err, SIO_ERR_NOMEM, "stream: no mutex");
        goto out;
    }
    mu_ok = 1;
    if (pthread_cond_init(&s->space, NULL) != 0) {
        rc = stream_err(err, SIO_ERR_NOMEM, "stream: no condition variable");
        goto out;
    }
    cv_ok = 1;
    s->cap = p->queue_bytes;
    s->conn = conn;
    s->io = p->io;
    s->list = p->list;
    s->ecfg = p->epoch_cfg;
    s->partition = p->partition;
    s->rank = p->rank;
    s->world = p->world;
    s->start = p->start;
    s->position = p->start;
    for (size_t i = 0; i < p->nfields; i++) {
        if (strlen(p->fields[i]) > SIO_TARW_FIELD_NAME_MAX) {
            rc = stream_err(err, SIO_ERR_INVALID, "stream: field too long");
            goto out;
        }
        strcpy(s->fields[i], p->fields[i]);
    }
    s->nfields = p->nfields;
    snprintf(s->id, sizeof s->id, "%s", p->id ? p->id : "-");
    int e = pthread_create(&s->thread, NULL, produce, s);
    if (e != 0) {
        rc = stream_err(err, SIO_ERR_IO, "stream: cannot start producer: %s",
                        strerror(e));
        goto out;
    }
    s->thread_started = 1;
    *out = s;
    s = NULL;
out:
    if (s) {
        if (cv_ok)
            pthread_cond_destroy(&s->space);
        if (mu_ok)
            pthread_mutex_destroy(&s->mu);
        free(s->q);
        free(s);
    }
    return rc;
}

sc_open_state sc_stream_poll_open(sc_stream *s, unsigned *status,
                                  char *reason, size_t reason_len)
{
    sc_open_state st;

    pthread_mutex_lock(&s->mu);
    st = s->open_state;
    if (s->cancelled && st != SC_OPEN_FAILED) {
        st = SC_OPEN_FAILED;
        *status = 503;
        snprintf(reason, reason_len, "server shutting down");
    } else if (st == SC_OPEN_FAILED) {
        *status = s->open_status;
        snprintf(reason, reason_len, "%s", s->open_reason);
    } else if (st == SC_OPEN_PENDING) {
        s->suspended = 1;
        MHD_suspend_connection(s->conn);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

ssize_t sc_stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    sc_stream *s = cls;
    ssize_t rc;

    (void)pos;
    pthread_mutex_lock(&s->mu);
    if (s->cancelled) {
        rc = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (s->len > 0) {
        size_t n = s->len < max ? s->len : max;
        if (n > (size_t)SSIZE_MAX)
            n = (size_t)SSIZE_MAX;
        size_t first = n < s->cap - s->head ? n : s->cap - s->head;
        memcpy(buf, s->q + s->head, first);
        memcpy(buf + first, s->q, n - first);
        s->head = (s->head + n) % s->cap;
        s->len -= n;
        s->bytes_out += n;
        pthread_cond_signal(&s->space);
        rc = (ssize_t)n;
    } else if (s->finished == FIN_OK) {
        rc = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (s->finished != FIN_NONE) {
        /* The error trailer (if any) has been sent: cut the connection
         * without the chunked terminator. */
        rc = MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        /* Nothing to send yet: leave MHD's event loop until the producer
         * resumes us (returning 0 without suspending would spin). */
        s->suspended = 1;
        MHD_suspend_connection(s->conn);
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void sc_stream_cancel(sc_stream *s)
{
    pthread_mutex_lock(&s->mu);
    s->cancelled = 1;
    pthread_cond_broadcast(&s->space);
    wake_reader_locked(s);
    pthread_mutex_unlock(&s->mu);
}

void sc_stream_get_stats(sc_stream *s, sc_stream_stats *st)
{
    pthread_mutex_lock(&s->mu);
    st->bytes_out = s->bytes_out;
    st->samples = s->samples;
    st->position = s->position;
    switch (s->finished) {
    case FIN_OK:
        st->outcome = s->len == 0 ? "ok" : "cancelled";
        break;
    case FIN_ERROR:
        st->outcome = "error";
        break;
    case FIN_OPEN_FAILED:
        st->outcome = "open_failed";
        break;
    case FIN_CANCELLED:
        st->outcome = "cancelled";
        break;
    default:
        st->outcome = s->cancelled ? "cancelled" : "running";
        break;
    }
    pthread_mutex_unlock(&s->mu);
}

void sc_stream_destroy(sc_stream *s, sc_stream_stats *final)
{
    if (!s)
        return;
    /* MHD completes a request only when its connection is not suspended,
     * so there is nothing to resume here: only stop the producer. */
    pthread_mutex_lock(&s->mu);
    s->cancelled = 1;
    pthread_cond_broadcast(&s->space);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    if (final)
        sc_stream_get_stats(s, final);
    pthread_cond_destroy(&s->space);
    pthread_mutex_destroy(&s->mu);
    free(s->q);
    free(s);
}
