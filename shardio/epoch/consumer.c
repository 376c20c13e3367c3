/*
 * consumer.c — a consumer's share of an epoch read in one process
 * (sio_consumer, include/shardio.h): consumer r of W takes Y[i] for
 * i mod W == r from global_start on, by the partition policy (even-drop
 * holds its sample until the round completes, even-pad repeats the front
 * of Y for the tail, none deals what there is). It uses the epoch through
 * its public interface only.
 *
 * Threading: one consumer, one thread at a time. Ownership: it owns its
 * epoch (closed with it) and the references it holds.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardio.h"
#include "core/core_int.h"

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
    char why[160];
    if (sio_share_validate(rank, world, global_start, start, why,
                           sizeof why) != 0) {
        sio_epoch_close(ep);
        return sio_seterr(err, SIO_ERR_INVALID, "%s", why);
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
