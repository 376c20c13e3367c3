/*
 * epoch.c — the global sample sequence Y of one epoch, and its partition.
 *
 * Order (product.md; README "The order of an epoch"):
 *  1. shard order: sio_permute() of the shard list with the stream
 *     SIO_RNG_SHARDS of (seed, epoch);
 *  2. interleave: K slots take shards in permuted order; samples are taken
 *     round-robin over the slots in slot order; a finished (or failed and
 *     skipped) shard's slot takes the next shard in the permuted order at
 *     once; a slot with no shard left drops out. Bad samples are invisible:
 *     the slot yields its next good sample instead;
 *  3. buffer shuffle with the stream SIO_RNG_BUFFER: while the buffer holds
 *     fewer than B samples (and, with a byte cap, the incoming sample fits),
 *     the sample is appended and nothing is emitted. Otherwise j =
 *     below(count), buf[j] is emitted and the incoming sample takes its
 *     place; then, while a byte cap is exceeded and count > 1, j =
 *     below(count), buf[j] is emitted and buf[count-1] moves into slot j.
 *     At the end: while count > 0, j = below(count), emit buf[j],
 *     buf[j] = buf[count-1].
 *  4. partition (sio_consumer): Y[i] goes to consumer i mod W.
 * Everything is a function of the data and (seed, epoch, K, B, byte cap);
 * nothing depends on timing.
 *
 * Threading: one sio_epoch / sio_consumer is driven by one thread.
 * Ownership: the epoch holds references to buffered samples and releases
 * them on close; each sample handed out is a new reference for the caller.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* Sanity limits on the epoch configuration. */
#define EPOCH_INTERLEAVE_MAX 4096u
#define EPOCH_BUFFER_MAX (64u * 1024u * 1024u) /* samples */
#define EPOCH_THREADS_MAX 64u
#define EPOCH_REPLICAS_MAX 1024u
#define EPOCH_READAHEAD_SHARDS_MAX 4096u
#define CONSUMER_WORLD_MAX 65536u

/*
 * Shard readers. Reader j reads shard perm[j] into a bounded queue of
 * samples. Readers exist for the shards in the slots and for the next
 * readahead_shards positions of the permuted order; worker threads (or,
 * when none, the consuming thread itself) fill them. Which reader a slot
 * takes and when is decided only by the consuming side, in logical order,
 * so timing never changes the sequence.
 *
 * Locking: ep->mu guards every reader's queue and flags, the reader table
 * and `stop`. Workers read from a shard with mu released; a reader being
 * read has busy = 1 and nobody else touches its sio_shard. One lock, no
 * lock order to keep.
 */
typedef struct reader {
    uint32_t pos;            /* position in the permuted order */
    uint32_t idx;            /* shard list index */
    sio_shard *sh;           /* opened lazily by whoever reads first */
    const sio_sample **q;    /* ring of decoded samples */
    size_t qhead, qlen;
    uint64_t qbytes;
    int busy, done;
    sio_code rc;             /* at done: SIO_OK or why the shard ended */
    char msg[640];
    uint64_t bad_samples;    /* SIO_ERR_SAMPLE seen (skipped) */
    char bad_msg[640];       /* first bad sample (for on_error=fail) */
    int opened;
} reader;

struct sio_epoch {
    sio_io *io;
    const sio_shardlist *list;
    sio_epoch_config cfg;
    uint32_t *perm;
    size_t nshards, next_shard; /* next permuted position for a slot */
    reader **slots;             /* slot s reads slots[s] (NULL: inactive) */
    uint32_t cur, active;
    int started;

    pthread_mutex_t mu;
    pthread_cond_t work;    /* workers: a reader needs filling */
    pthread_cond_t ready;   /* consumer: a reader got a sample or ended */
    /* Live readers: those in slots plus the look-ahead ones, at most
     * K + readahead_shards (positions in [next_shard, ahead_end) are not
     * in a slot yet, and ahead_end <= next_shard + readahead_shards). */
    reader **readers;
    size_t nreaders, rcap;
    size_t ahead_end;       /* readers were made for positions < ahead_end */
    pthread_t *threads;
    uint32_t nthreads;
    int stop;
    /* Waiters, so that signals are only sent to someone waiting: a
     * wake-up per sample would cost more than decoding the sample. */
    uint32_t workers_idle;
    int consumer_waiting;

    sio_rng brng;
    const sio_sample **buf; /* shuffle buffer */
    size_t count;
    uint64_t bytes;
    const sio_sample **outq; /* emitted, not yet handed out (FIFO) */
    size_t qhead, qlen;
    int input_done, failed;
    uint64_t emitted;
    sio_epoch_stats st;
    char err[768];
};

const char *sio_epoch_errmsg(const sio_epoch *ep)
{
    return ep->err;
}

void sio_epoch_get_stats(const sio_epoch *ep, sio_epoch_stats *st)
{
    *st = ep->st;
}

static void reader_free(reader *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->qlen; i++)
        sio_sample_unref(r->q[(r->qhead + i) % SIO_READAHEAD_SAMPLES]);
    sio_shard_close(r->sh);
    free(r->q);
    free(r);
}

/* Has the reader room for one more sample? (mu held) */
static int reader_wants(const sio_epoch *ep, const reader *r)
{
    return !r->done && !r->busy && r->qlen < SIO_READAHEAD_SAMPLES &&
           (r->qlen == 0 || r->qbytes < ep->cfg.readahead_bytes);
}

/* Read one sample into r (busy set by the caller, mu NOT held on entry
 * and exit). Opening the shard happens on the first call. */
static void reader_step(sio_epoch *ep, reader *r)
{
    const sio_sample *s = NULL;
    sio_code rc = SIO_OK;
    char msg[640] = "";
    if (!r->opened) {
        sio_error e;
        e.msg[0] = '\0';
        rc = sio_shard_open(ep->io, sio_shardlist_url(ep->list, r->idx),
                            r->idx, &ep->cfg.limits, &r->sh, &e);
        r->opened = 1;
        if (rc)
            snprintf(msg, sizeof msg, "%s", e.msg);
    }
    while (rc == SIO_OK) {
        rc = sio_shard_next(r->sh, &s);
        if (rc != SIO_ERR_SAMPLE)
            break;
        /* A bad sample: counted; the first one's text is kept. */
        pthread_mutex_lock(&ep->mu);
        if (r->bad_samples++ == 0)
            snprintf(r->bad_msg, sizeof r->bad_msg, "%s",
                     sio_shard_errmsg(r->sh));
        pthread_mutex_unlock(&ep->mu);
        SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
                "event=sample_bad reason=\"%s\"", sio_shard_errmsg(r->sh));
        rc = SIO_OK;
        if (ep->cfg.on_error == SIO_ON_ERROR_FAIL) {
            rc = SIO_ERR_SAMPLE;
            snprintf(msg, sizeof msg, "%s", r->bad_msg);
            break;
        }
    }
    if (rc != SIO_OK && !msg[0] && r->sh)
        snprintf(msg, sizeof msg, "%s", sio_shard_errmsg(r->sh));
    pthread_mutex_lock(&ep->mu);
    if (rc != SIO_OK || !s) {
        r->done = 1;
        r->rc = rc;
        snprintf(r->msg, sizeof r->msg, "%s", msg);
        /* The shard is finished: release its stream and archive now. */
        sio_shard_close(r->sh);
        r->sh = NULL;
    } else {
        r->q[(r->qhead + r->qlen) % SIO_READAHEAD_SAMPLES] = s;
        r->qlen++;
        r->qbytes += s->bytes;
    }
    r->busy = 0;
    if (ep->consumer_waiting)
        pthread_cond_broadcast(&ep->ready);
    pthread_mutex_unlock(&ep->mu);
}

/* Create readers up to position `end` (mu held). */
static sio_code ensure_readers(sio_epoch *ep, size_t end)
{
    if (end > ep->nshards)
        end = ep->nshards;
    while (ep->ahead_end < end) {
        reader *r = calloc(1, sizeof *r);
        if (r)
            r->q = malloc(SIO_READAHEAD_SAMPLES * sizeof *r->q);
        if (!r || !r->q) {
            free(r);
            return SIO_ERR_NOMEM;
        }
        r->pos = (uint32_t)ep->ahead_end;
        r->idx = ep->perm[ep->ahead_end];
        ep->readers[ep->nreaders++] = r; /* nreaders < rcap, see above */
        ep->ahead_end++;
    }
    if (ep->workers_idle)
        pthread_cond_broadcast(&ep->work);
    return SIO_OK;
}

static void *worker_main(void *arg)
{
    sio_epoch *ep = arg;
    pthread_mutex_lock(&ep->mu);
    for (;;) {
        reader *pick = NULL;
        if (ep->stop)
            break;
        /* The reader needed soonest: slots first, in position order. */
        /* Emptiest queue first, then the earliest position. */
        for (size_t i = 0; i < ep->nreaders; i++) {
            reader *r = ep->readers[i];
            if (reader_wants(ep, r) &&
                (!pick || r->qlen < pick->qlen ||
                 (r->qlen == pick->qlen && r->pos < pick->pos)))
                pick = r;
        }
        if (!pick) {
            ep->workers_idle++;
            pthread_cond_wait(&ep->work, &ep->mu);
            ep->workers_idle--;
            continue;
        }
        pick->busy = 1;
        pthread_mutex_unlock(&ep->mu);
        reader_step(ep, pick);
        pthread_mutex_lock(&ep->mu);
    }
    pthread_mutex_unlock(&ep->mu);
    return NULL;
}

sio_code sio_epoch_open(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, sio_epoch **out,
                        sio_error *err)
{
    sio_epoch *ep;
    sio_rng srng;
    sio_code rc = SIO_OK;
    *out = NULL;
    if (!list || !cfg)
        return sio_seterr(err, SIO_ERR_INVALID, "no shard list or config");
    if (cfg->interleave < 1 || cfg->interleave > EPOCH_INTERLEAVE_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "interleave %u not in 1..%u",
                          cfg->interleave, EPOCH_INTERLEAVE_MAX);
    if (cfg->buffer_samples < 1 || cfg->buffer_samples > EPOCH_BUFFER_MAX)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "shuffle buffer %u not in 1..%u",
                          cfg->buffer_samples, EPOCH_BUFFER_MAX);
    if (cfg->replicas > EPOCH_REPLICAS_MAX ||
        (cfg->replicas > 1 && cfg->replica >= cfg->replicas) ||
        (cfg->replicas <= 1 && cfg->replica != 0))
        return sio_seterr(err, SIO_ERR_INVALID,
                          "replica %u of %u: need replica < replicas <= %u",
                          cfg->replica, cfg->replicas, EPOCH_REPLICAS_MAX);
    if (cfg->read_threads > EPOCH_THREADS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "read_threads %u above %u",
                          cfg->read_threads, EPOCH_THREADS_MAX);
    if (cfg->readahead_shards > EPOCH_READAHEAD_SHARDS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "readahead_shards %u above %u",
                          cfg->readahead_shards, EPOCH_READAHEAD_SHARDS_MAX);
    ep = calloc(1, sizeof *ep);
    if (!ep)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&ep->mu, NULL);
    pthread_cond_init(&ep->work, NULL);
    pthread_cond_init(&ep->ready, NULL);
    ep->io = io;
    ep->list = list;
    ep->cfg = *cfg;
    if (!ep->cfg.readahead_bytes)
        ep->cfg.readahead_bytes = SIO_READAHEAD_BYTES_DEFAULT;
    ep->nshards = sio_shardlist_count(list);
    /* Readers alive at once: K in slots + the look-ahead window. */
    ep->rcap = (size_t)cfg->interleave + cfg->readahead_shards + 1;
    ep->perm = malloc((ep->nshards ? ep->nshards : 1) * sizeof *ep->perm);
    ep->slots = calloc(cfg->interleave, sizeof *ep->slots);
    ep->readers = calloc(ep->rcap, sizeof *ep->readers);
    ep->buf = malloc(cfg->buffer_samples * sizeof *ep->buf);
    /* The byte-cap eviction emits at most the whole buffer plus one. */
    ep->outq = malloc(((size_t)cfg->buffer_samples + 1) * sizeof *ep->outq);
    ep->threads = calloc(cfg->read_threads ? cfg->read_threads : 1,
                         sizeof *ep->threads);
    if (!ep->perm || !ep->slots || !ep->readers || !ep->buf || !ep->outq ||
        !ep->threads) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    sio_rng_seed(&srng, cfg->seed, cfg->epoch, SIO_RNG_SHARDS);
    sio_permute(&srng, ep->perm, ep->nshards);
    if (cfg->replicas > 1) {
        /* This replica's shards: permuted positions j, j+R, j+2R, ... */
        size_t n = 0;
        for (size_t p = cfg->replica; p < ep->nshards; p += cfg->replicas)
            ep->perm[n++] = ep->perm[p];
        ep->nshards = n;
    }
    sio_rng_seed(&ep->brng, cfg->seed, cfg->epoch,
                 SIO_RNG_BUFFER + 256ull * cfg->replica);
    pthread_mutex_lock(&ep->mu);
    rc = ensure_readers(ep, (size_t)cfg->interleave + cfg->readahead_shards);
    pthread_mutex_unlock(&ep->mu);
    if (rc) {
        sio_seterr(err, rc, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < cfg->read_threads; i++) {
        if (pthread_create(&ep->threads[i], NULL, worker_main, ep) != 0) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "cannot start a thread");
            goto out;
        }
        ep->nthreads++;
    }
    *out = ep;
    ep = NULL;
out:
    sio_epoch_close(ep);
    return rc;
}

void sio_epoch_close(sio_epoch *ep)
{
    if (!ep)
        return;
    pthread_mutex_lock(&ep->mu);
    ep->stop = 1;
    pthread_cond_broadcast(&ep->work);
    pthread_mutex_unlock(&ep->mu);
    for (uint32_t i = 0; i < ep->nthreads; i++)
        pthread_join(ep->threads[i], NULL);
    for (size_t i = 0; ep->readers && i < ep->nreaders; i++)
        reader_free(ep->readers[i]);
    for (size_t i = 0; ep->buf && i < ep->count; i++)
        sio_sample_unref(ep->buf[i]);
    for (size_t i = 0; ep->outq && i < ep->qlen; i++)
        sio_sample_unref(
            ep->outq[(ep->qhead + i) % ((size_t)ep->cfg.buffer_samples + 1)]);
    pthread_cond_destroy(&ep->ready);
    pthread_cond_destroy(&ep->work);
    pthread_mutex_destroy(&ep->mu);
    free(ep->threads);
    free(ep->outq);
    free(ep->buf);
    free(ep->readers);
    free(ep->slots);
    free(ep->perm);
    free(ep);
}

/* A shard ended with an error. Skip or fail per on_error. */
static sio_code shard_failed(sio_epoch *ep, sio_code rc, const char *url,
                             const char *why)
{
    if (ep->cfg.on_error == SIO_ON_ERROR_FAIL) {
        snprintf(ep->err, sizeof ep->err, "shard failed url=%s code=%s: %s",
                 url, sio_strerror(rc), why);
        ep->failed = 1;
        return rc;
    }
    ep->st.shards_skipped++;
    SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
            "event=shard_skipped url=%s code=%s reason=\"%s\"", url,
            sio_strerror(rc), why);
    return SIO_OK;
}

/* Give slot s the reader of the next permuted position (or none). */
static sio_code fill_slot(sio_epoch *ep, uint32_t s)
{
    sio_code rc = SIO_OK;
    ep->slots[s] = NULL;
    if (ep->next_shard >= ep->nshards)
        return SIO_OK;
    pthread_mutex_lock(&ep->mu);
    size_t pos = ep->next_shard++;
    rc = ensure_readers(ep, pos + 1 + ep->cfg.readahead_shards);
    for (size_t i = 0; rc == SIO_OK && i < ep->nreaders; i++)
        if (ep->readers[i]->pos == pos)
            ep->slots[s] = ep->readers[i];
    pthread_mutex_unlock(&ep->mu);
    return rc;
}

/* The next sample of slot s's shard: *out, or NULL when the shard ended
 * (then *rc_out and msg say how). Waits for a worker, or reads itself. */
static void slot_take(sio_epoch *ep, reader *r, const sio_sample **out,
                      sio_code *rc_out, char *msg, size_t msglen)
{
    *out = NULL;
    pthread_mutex_lock(&ep->mu);
    while (r->qlen == 0 && !r->done) {
        if (!r->busy && ep->nthreads == 0) {
            r->busy = 1;
            pthread_mutex_unlock(&ep->mu);
            reader_step(ep, r);
            pthread_mutex_lock(&ep->mu);
            continue;
        }
        if (!r->busy && ep->workers_idle) /* a worker must look at it */
            pthread_cond_signal(&ep->work);
        ep->consumer_waiting = 1;
        pthread_cond_wait(&ep->ready, &ep->mu);
        ep->consumer_waiting = 0;
    }
    if (r->qlen > 0) {
        int was_full = !r->busy && !reader_wants(ep, r);
        *out = r->q[r->qhead];
        r->qhead = (r->qhead + 1) % SIO_READAHEAD_SAMPLES;
        r->qlen--;
        r->qbytes -= (*out)->bytes;
        if (was_full && ep->workers_idle) /* room again */
            pthread_cond_signal(&ep->work);
    } else {
        *rc_out = r->rc;
        snprintf(msg, msglen, "%s", r->msg);
    }
    pthread_mutex_unlock(&ep->mu);
}

/* Next sample of the interleaved sequence, or NULL when all are done. */
static sio_code interleave_next(sio_epoch *ep, const sio_sample **out)
{
    sio_code rc;
    *out = NULL;
    if (!ep->started) {
        ep->started = 1;
        for (uint32_t i = 0; i < ep->cfg.interleave; i++) {
            rc = fill_slot(ep, i);
            if (rc)
                return rc;
        }
        ep->active = 0;
        for (uint32_t i = 0; i < ep->cfg.interleave; i++)
            ep->active += ep->slots[i] != NULL;
    }
    while (ep->active > 0) {
        uint32_t s = ep->cur;
        ep->cur = (ep->cur + 1) % ep->cfg.interleave;
        if (!ep->slots[s])
            continue;
        for (;;) {
            reader *r = ep->slots[s];
            const sio_sample *smp = NULL;
            sio_code end_rc = SIO_OK;
            char why[640];
            slot_take(ep, r, &smp, &end_rc, why, sizeof why);
            if (smp) {
                *out = smp;
                return SIO_OK;
            }
            /* The shard ended: account for it in logical order. */
            ep->st.samples_skipped += r->bad_samples;
            if (end_rc == SIO_ERR_SAMPLE) {
                snprintf(ep->err, sizeof ep->err, "bad sample: %s", why);
                ep->failed = 1;
                return end_rc;
            }
            if (end_rc != SIO_OK) {
                rc = shard_failed(ep, end_rc,
                                  sio_shardlist_url(ep->list, r->idx), why);
                if (rc)
                    return rc;
            } else {
                ep->st.shards_done++;
            }
            pthread_mutex_lock(&ep->mu);
            for (size_t i = 0; i < ep->nreaders; i++)
                if (ep->readers[i] == r) {
                    ep->readers[i] = ep->readers[--ep->nreaders];
                    break;
                }
            pthread_mutex_unlock(&ep->mu);
            reader_free(r);
            rc = fill_slot(ep, s);
            if (rc)
                return rc;
            if (!ep->slots[s]) {
                ep->active--;
                break;
            }
        }
    }
    return SIO_OK;
}

static void emit(sio_epoch *ep, const sio_sample *s)
{
    size_t cap = (size_t)ep->cfg.buffer_samples + 1;
    ((sio_sample *)(uintptr_t)s)->global_index = ep->emitted++;
    ep->st.samples++;
    ep->st.bytes += s->bytes;
    ep->outq[(ep->qhead + ep->qlen) % cap] = s;
    ep->qlen++;
}

/* Feed one incoming sample to the buffer (step 3). */
static void buffer_push(sio_epoch *ep, const sio_sample *x)
{
    uint64_t cap = ep->cfg.buffer_bytes;
    if (ep->count == 0 ||
        (ep->count < ep->cfg.buffer_samples &&
         (cap == 0 || ep->bytes + x->bytes <= cap))) {
        ep->buf[ep->count++] = x;
        ep->bytes += x->bytes;
        return;
    }
    size_t j = (size_t)sio_rng_below(&ep->brng, ep->count);
    const sio_sample *o = ep->buf[j];
    ep->buf[j] = x;
    ep->bytes = ep->bytes - o->bytes + x->bytes;
    emit(ep, o);
    while (cap && ep->bytes > cap && ep->count > 1) {
        j = (size_t)sio_rng_below(&ep->brng, ep->count);
        o = ep->buf[j];
        ep->buf[j] = ep->buf[--ep->count];
        ep->bytes -= o->bytes;
        emit(ep, o);
    }
}

sio_code sio_epoch_next(sio_epoch *ep, const sio_sample **out)
{
    size_t cap = (size_t)ep->cfg.buffer_samples + 1;
    *out = NULL;
    if (ep->failed)
        return SIO_ERR_IO;
    while (ep->qlen == 0) {
        if (!ep->input_done) {
            const sio_sample *x;
            sio_code rc = interleave_next(ep, &x);
            if (rc)
                return rc;
            if (x) {
                buffer_push(ep, x);
                continue;
            }
            ep->input_done = 1;
        }
        if (ep->count == 0)
            return SIO_OK; /* end of the epoch */
        size_t j = (size_t)sio_rng_below(&ep->brng, ep->count);
        const sio_sample *o = ep->buf[j];
        ep->buf[j] = ep->buf[--ep->count];
        ep->bytes -= o->bytes;
        emit(ep, o);
    }
    *out = ep->outq[ep->qhead];
    ep->qhead = (ep->qhead + 1) % cap;
    ep->qlen--;
    return SIO_OK;
}

/* ------------------------------------------------------------------ */
/* Partition                                                           */

const char *sio_partition_name(sio_partition p)
{
    switch (p) {
    case SIO_PARTITION_EVEN_DROP: return "even-drop";
    case SIO_PARTITION_EVEN_PAD: return "even-pad";
    case SIO_PARTITION_NONE: return "none";
    }
    return "unknown";
}

int sio_partition_parse(const char *s, sio_partition *out)
{
    static const sio_partition all[] = {SIO_PARTITION_EVEN_DROP,
                                        SIO_PARTITION_EVEN_PAD,
                                        SIO_PARTITION_NONE};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(s, sio_partition_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

struct sio_consumer {
    sio_epoch *ep;
    uint32_t rank, world;
    sio_partition policy;
    uint64_t start, pos;
    uint64_t gstart;           /* Y indices below are not dealt */
    const sio_sample *pending; /* even-drop: own sample awaiting its round */
    uint64_t release_at;       /* Y index that completes pending's round */
    const sio_sample **first;  /* even-pad: Y[0..min(N,W)-1] */
    size_t nfirst;
    uint64_t seen;             /* Y samples read so far (N at the end) */
    int ended, pad_done;
    char err[800];
};

sio_code sio_consumer_open(sio_epoch *ep, uint32_t rank, uint32_t world,
                           sio_partition policy, uint64_t start,
                           sio_consumer **out, sio_error *err)
{
    return sio_consumer_open_at(ep, rank, world, policy, 0, start, out, err);
}

sio_code sio_consumer_open_at(sio_epoch *ep, uint32_t rank, uint32_t world,
                              sio_partition policy, uint64_t global_start,
                              uint64_t start, sio_consumer **out,
                              sio_error *err)
{
    sio_consumer *c;
    *out = NULL;
    if (world < 1 || world > CONSUMER_WORLD_MAX || rank >= world) {
        sio_epoch_close(ep);
        return sio_seterr(err, SIO_ERR_INVALID,
                          "rank %u / world %u: need 0 <= rank < world <= %u",
                          rank, world, CONSUMER_WORLD_MAX);
    }
    c = calloc(1, sizeof *c);
    if (c && policy == SIO_PARTITION_EVEN_PAD) {
        c->first = calloc(world, sizeof *c->first);
        if (!c->first) {
            free(c);
            c = NULL;
        }
    }
    if (!c) {
        sio_epoch_close(ep);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    c->ep = ep;
    c->rank = rank;
    c->world = world;
    c->policy = policy;
    c->start = start;
    c->gstart = global_start;
    *out = c;
    return SIO_OK;
}

void sio_consumer_close(sio_consumer *c)
{
    if (!c)
        return;
    sio_sample_unref(c->pending);
    for (size_t i = 0; i < c->nfirst; i++)
        sio_sample_unref(c->first[i]);
    free(c->first);
    sio_epoch_close(c->ep);
    free(c);
}

const char *sio_consumer_errmsg(const sio_consumer *c)
{
    return c->err[0] ? c->err : sio_epoch_errmsg(c->ep);
}

uint64_t sio_consumer_position(const sio_consumer *c)
{
    return c->pos;
}

sio_epoch *sio_consumer_epoch(sio_consumer *c)
{
    return c->ep;
}

/* A sample of the share is ready: skip it while before `start`. Returns 1
 * when it is handed out through *out. Takes the reference of s. */
static int deliver(sio_consumer *c, const sio_sample *s,
                   const sio_sample **out)
{
    if (c->pos++ < c->start) {
        sio_sample_unref(s);
        return 0;
    }
    *out = s;
    return 1;
}

sio_code sio_consumer_next(sio_consumer *c, const sio_sample **out)
{
    *out = NULL;
    while (!c->ended) {
        const sio_sample *y;
        sio_code rc = sio_epoch_next(c->ep, &y);
        if (rc)
            return rc;
        if (!y) {
            c->ended = 1;
            /* even-drop: an incomplete last round is dropped. */
            sio_sample_unref(c->pending);
            c->pending = NULL;
            break;
        }
        if (y->global_index < c->gstart) {
            sio_sample_unref(y);
            continue;
        }
        /* From here on, indices count from global_start. */
        uint64_t i = y->global_index - c->gstart;
        c->seen = i + 1;
        if (c->policy == SIO_PARTITION_EVEN_PAD && i < c->world) {
            sio_sample_ref(y);
            c->first[c->nfirst++] = y;
        }
        const sio_sample *ready = NULL;
        if (c->pending && i >= c->release_at) {
            ready = c->pending;
            c->pending = NULL;
        }
        if (i % c->world == c->rank) {
            if (c->policy == SIO_PARTITION_EVEN_DROP) {
                c->pending = y;
                c->release_at = (i / c->world + 1) * c->world - 1;
                if (i >= c->release_at && !ready) {
                    ready = c->pending;
                    c->pending = NULL;
                }
            } else {
                ready = y;
            }
        } else {
            sio_sample_unref(y);
        }
        /* Own samples are W apart, so at most one is ready per step,
         * except when W == 1 where pending is released at once. */
        if (ready && deliver(c, ready, out))
            return SIO_OK;
    }
    if (c->policy == SIO_PARTITION_EVEN_PAD && !c->pad_done) {
        uint64_t n = c->seen, w = c->world;
        c->pad_done = 1;
        if (n > 0 && n % w != 0) {
            uint64_t padded_end = (n + w - 1) / w * w;
            /* the one own index in [n, padded_end), if any */
            uint64_t i = n + ((c->rank + w - n % w) % w);
            if (i < padded_end) {
                const sio_sample *s = c->first[i % n];
                sio_sample_ref(s);
                if (deliver(c, s, out))
                    return SIO_OK;
            }
        }
    }
    return SIO_OK;
}
