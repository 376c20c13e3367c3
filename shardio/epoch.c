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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* Sanity limits on the epoch configuration. */
#define EPOCH_INTERLEAVE_MAX 4096u
#define EPOCH_BUFFER_MAX (64u * 1024u * 1024u) /* samples */
#define CONSUMER_WORLD_MAX 65536u

typedef struct slot {
    sio_shard *sh; /* NULL when inactive */
    uint32_t idx;  /* shard list index of sh */
} slot;

struct sio_epoch {
    sio_io *io;
    const sio_shardlist *list;
    sio_epoch_config cfg;
    uint32_t *perm;
    size_t nshards, next_shard;
    slot *slots;
    uint32_t cur, active;
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

sio_code sio_epoch_open(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, sio_epoch **out,
                        sio_error *err)
{
    sio_epoch *ep;
    sio_rng srng;
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
    ep = calloc(1, sizeof *ep);
    if (!ep)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    ep->io = io;
    ep->list = list;
    ep->cfg = *cfg;
    ep->nshards = sio_shardlist_count(list);
    ep->perm = malloc((ep->nshards ? ep->nshards : 1) * sizeof *ep->perm);
    ep->slots = calloc(cfg->interleave, sizeof *ep->slots);
    ep->buf = malloc(cfg->buffer_samples * sizeof *ep->buf);
    /* The byte-cap eviction emits at most the whole buffer plus one. */
    ep->outq = malloc(((size_t)cfg->buffer_samples + 1) * sizeof *ep->outq);
    if (!ep->perm || !ep->slots || !ep->buf || !ep->outq) {
        sio_epoch_close(ep);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    sio_rng_seed(&srng, cfg->seed, cfg->epoch, SIO_RNG_SHARDS);
    sio_permute(&srng, ep->perm, ep->nshards);
    sio_rng_seed(&ep->brng, cfg->seed, cfg->epoch, SIO_RNG_BUFFER);
    ep->active = cfg->interleave; /* slots are filled on first use */
    for (uint32_t i = 0; i < cfg->interleave; i++)
        ep->slots[i].sh = NULL;
    ep->cur = 0;
    ep->next_shard = 0;
    *out = ep;
    return SIO_OK;
}

void sio_epoch_close(sio_epoch *ep)
{
    if (!ep)
        return;
    if (ep->slots)
        for (uint32_t i = 0; i < ep->cfg.interleave; i++)
            sio_shard_close(ep->slots[i].sh);
    for (size_t i = 0; ep->buf && i < ep->count; i++)
        sio_sample_unref(ep->buf[i]);
    for (size_t i = 0; ep->outq && i < ep->qlen; i++)
        sio_sample_unref(
            ep->outq[(ep->qhead + i) % ((size_t)ep->cfg.buffer_samples + 1)]);
    free(ep->outq);
    free(ep->buf);
    free(ep->slots);
    free(ep->perm);
    free(ep);
}

/* A shard failed (open or read). Skip or fail per on_error. */
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

/* Give slot s the next shard of the permuted order; it stays empty when
 * none is left. Shards that cannot be opened are skipped (on_error). */
static sio_code fill_slot(sio_epoch *ep, uint32_t s)
{
    while (ep->next_shard < ep->nshards) {
        uint32_t idx = ep->perm[ep->next_shard++];
        const char *url = sio_shardlist_url(ep->list, idx);
        sio_error e;
        sio_code rc = sio_shard_open(ep->io, url, idx, &ep->cfg.limits,
                                     &ep->slots[s].sh, &e);
        if (rc == SIO_OK) {
            ep->slots[s].idx = idx;
            return SIO_OK;
        }
        rc = shard_failed(ep, rc, url, e.msg);
        if (rc)
            return rc;
    }
    ep->slots[s].sh = NULL;
    return SIO_OK;
}

/* Next sample of the interleaved sequence, or NULL when all are done. */
static sio_code interleave_next(sio_epoch *ep, const sio_sample **out)
{
    sio_code rc;
    *out = NULL;
    if (ep->next_shard == 0 && ep->nshards > 0) {
        /* First call: slot i takes shard perm[i]. */
        for (uint32_t i = 0; i < ep->cfg.interleave; i++) {
            rc = fill_slot(ep, i);
            if (rc)
                return rc;
        }
        ep->active = 0;
        for (uint32_t i = 0; i < ep->cfg.interleave; i++)
            ep->active += ep->slots[i].sh != NULL;
    } else if (ep->nshards == 0) {
        ep->active = 0;
    }
    while (ep->active > 0) {
        uint32_t s = ep->cur;
        ep->cur = (ep->cur + 1) % ep->cfg.interleave;
        if (!ep->slots[s].sh)
            continue;
        for (;;) {
            const sio_sample *smp = NULL;
            sio_shard *sh = ep->slots[s].sh;
            rc = sio_shard_next(sh, &smp);
            if (rc == SIO_OK && smp) {
                *out = smp;
                return SIO_OK;
            }
            if (rc == SIO_ERR_SAMPLE) {
                if (ep->cfg.on_error == SIO_ON_ERROR_FAIL) {
                    snprintf(ep->err, sizeof ep->err, "bad sample: %s",
                             sio_shard_errmsg(sh));
                    ep->failed = 1;
                    return rc;
                }
                ep->st.samples_skipped++;
                SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
                        "event=sample_skipped reason=\"%s\"",
                        sio_shard_errmsg(sh));
                continue;
            }
            if (rc != SIO_OK) {
                char why[640];
                snprintf(why, sizeof why, "%s", sio_shard_errmsg(sh));
                rc = shard_failed(
                    ep, rc, sio_shardlist_url(ep->list, ep->slots[s].idx),
                    why);
                if (rc)
                    return rc;
            } else {
                ep->st.shards_done++;
            }
            sio_shard_close(sh);
            ep->slots[s].sh = NULL;
            rc = fill_slot(ep, s);
            if (rc)
                return rc;
            if (!ep->slots[s].sh) {
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
        uint64_t i = y->global_index;
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
