/*
 * plan.c — an epoch's plan: Y computed once from the shard indexes
 * (include/shardio_plan.h has the contract).
 *
 * The order itself is the epoch's own code run over metadata
 * (sio_epoch_order: the interleave and the buffer shuffle over the
 * indexes, the journal's decisions followed), so a plan is Y by
 * construction, not a second implementation of the contract. This file
 * adds what serving needs next to each element: the byte range, payload
 * size and key hash from the index, so a reader needs no index look-up
 * (and no index lock) per sample.
 *
 * Threading: sio_plan_build runs on the caller's thread; a built plan is
 * immutable and shared by reference (atomic count).
 * Ownership: the plan owns its item array.
 */
#include "shardio_plan.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core_int.h"
#include "plan/plan_int.h"
#include "shardio_cache.h"
#include "store/store_int.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The identity of shard i's file now, which must be the file its index
 * describes (its size, and a local file's mtime). */
static sio_code file_identity(sio_io *io, const sio_epoch_config *cfg,
                              const char *url, size_t i,
                              const sio_index_info *info, plan_file *pf,
                              sio_error *err)
{
    int fd = -1;
    struct stat st;
    sio_code rc = sio_io_open_fd_probe(io, cfg->cache, url, &fd, err);
    if (rc)
        return rc == SIO_ERR_NOTFOUND ? SIO_ERR_CHANGED : rc;
    int ok = fstat(fd, &st) == 0;
    close(fd);
    if (!ok)
        return sio_seterr(err, SIO_ERR_IO, "shard %zu: cannot stat", i);
    if ((info->size != 0 && info->size != UINT64_MAX &&
         (uint64_t)st.st_size != info->size) ||
        (info->mtime != 0 && (uint64_t)st.st_mtime != info->mtime))
        return sio_seterr(err, SIO_ERR_CHANGED,
                          "shard %zu changed since it was indexed", i);
    *pf = (plan_file){st.st_dev, st.st_ino, st.st_size, st.st_mtim, 1};
    return SIO_OK;
}

/* Is every shard of the epoch's part of the list indexed completely, with
 * byte offsets, and readable in place? The entries go into ents[], and
 * with files non-NULL each file's identity into files[]. */
static sio_code check_shards(sio_io *io, const sio_shardlist *list,
                             const sio_epoch_config *cfg,
                             sio_index_entry **ents, plan_file *files,
                             sio_error *err)
{
    size_t total = sio_shardlist_count(list);
    size_t first = cfg->range_count ? cfg->range_first : 0;
    size_t count = cfg->range_count ? cfg->range_count : total;
    if (first > total || count > total - first)
        return sio_seterr(err, SIO_ERR_INVALID, "shard range out of list");
    for (size_t i = first; i < first + count; i++) {
        const char *url = sio_shardlist_url(list, i);
        /* Where the bytes are first: a shard that is not local is not
         * looked up further (no sidecar request to a store). */
        if (!sio_io_fd_capable(io, cfg->cache, url)) {
            /* A cached source's shard may be filled later: not yet. */
            if (cfg->cache && sio_cache_covers(url))
                return sio_seterr(err, SIO_ERR_AGAIN,
                                  "shard %zu is not in the shard cache yet",
                                  i);
            return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                              "shard %zu is not a local file or a complete "
                              "shard-cache entry", i);
        }
        /* In memory, else from state_dir or a sidecar. */
        sio_index_entry *e = sio_index_get(cfg->index, io, url,
                                           sio_shardlist_size(list, i));
        sio_index_info info;
        if (!e)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        /* A local file rewritten or replaced since it was indexed: its
         * index is dropped, and the next read from the start (the feed's
         * pass over this epoch) indexes it again; a later epoch is
         * planned. */
        if (sio_index_refresh(e))
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu changed since it was indexed: it "
                              "is indexed again by the next read", i);
        /* A plan being built relies on it (whether one could be is
         * answered from what is loaded, reading no shard byte). */
        if (files)
            sio_index_vet(e, io, cfg->cache, &cfg->limits);
        sio_index_get_info(e, &info);
        if (info.stream_only)
            return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                              "shard %zu is compressed or a zip (its index "
                              "holds no byte offsets)", i);
        if (!info.complete)
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu indexed up to group %" PRIu64, i,
                              info.known);
        if (files) {
            sio_code rc = file_identity(io, cfg, url, i, &info, &files[i],
                                        err);
            if (rc)
                return rc;
        }
        ents[i] = e;
    }
    return SIO_OK;
}

/* What makes an epoch streamed whatever its shards are. */
static sio_code epoch_plannable(const sio_epoch_config *cfg, sio_error *err)
{
    if (!cfg->index)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED, "no shard indexes");
    if (cfg->nmix)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "a mixed epoch is streamed");
    return SIO_OK;
}

sio_code sio_plan_possible(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *cfg, sio_error *err)
{
    sio_code rc = epoch_plannable(cfg, err);
    if (rc)
        return rc;
    size_t total = sio_shardlist_count(list);
    sio_index_entry **ents = calloc(total ? total : 1, sizeof *ents);
    if (!ents)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    rc = check_shards(io, list, cfg, ents, NULL, err);
    free(ents);
    return rc;
}

/* Bad groups of the shards the n items draw from, each shard once, up
 * to the journal's cut. */
static uint64_t bad_groups(const sio_epoch_config *cfg,
                           sio_index_entry **ents, size_t total,
                           const sio_plan_item *items, uint64_t n)
{
    unsigned char *seen = calloc(total ? total : 1, 1);
    uint64_t bad = 0;
    if (!seen)
        return 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t s = items[i].shard;
        if (s >= total || seen[s] || !ents[s])
            continue;
        seen[s] = 1;
        uint64_t cut = UINT64_MAX, good, nbad;
        if (cfg->journal && !sio_journal_cut(cfg->journal, s, &cut))
            cut = UINT64_MAX;
        sio_index_tally(ents[s], cut, &good, &nbad);
        bad += nbad;
    }
    free(seen);
    return bad;
}

/* Filling a plan's items as the order decides them (sio_epoch_order_each):
 * each element of Y with its byte range, size and key hash from the
 * shard's index, read through a view. */
typedef struct fill_ctx {
    sio_plan_item *items;
    uint64_t n;
    const sio_index_view *views;
    sio_index_entry **ents;
    size_t total;
    sio_error *err;
} fill_ctx;

static sio_code fill_item(void *ud, uint64_t i, const sio_order_item *it)
{
    fill_ctx *c = ud;
    uint32_t s = it->shard;
    sio_index_group g;
    if (i >= c->n || s >= c->total || !c->ents[s] ||
        it->group > UINT32_MAX || it->group >= c->views[s].n ||
        ((g = c->views[s].g[it->group]).flags & SIO_INDEX_GROUP_BAD) ||
        g.end <= g.offset)
        return sio_seterr(c->err, SIO_ERR_CHANGED,
                          "Y[%" PRIu64 "] (shard %" PRIu32 " group %" PRIu64
                          ") is not a good indexed group", i, s, it->group);
    c->items[i] = (sio_plan_item){.offset = g.offset,
                                  .end = g.end,
                                  .bytes = g.bytes,
                                  .shard = s,
                                  .group = (uint32_t)it->group,
                                  .keyhash = g.keyhash};
    return SIO_OK;
}

sio_code sio_plan_build(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, uint64_t max_samples,
                        sio_plan **out, sio_error *err)
{
    uint64_t t0 = mono_ns();
    sio_index_entry **ents = NULL;
    sio_index_view *views = NULL;
    sio_plan *p = NULL;
    uint64_t n = 0;
    size_t got = 0;
    sio_code rc;

    *out = NULL;
    rc = epoch_plannable(cfg, err);
    if (rc)
        return rc;
    size_t total = sio_shardlist_count(list);
    ents = calloc(total ? total : 1, sizeof *ents);
    p = calloc(1, sizeof *p);
    if (p)
        p->files = calloc(total ? total : 1, sizeof *p->files);
    if (!ents || !p || !p->files) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    p->nfiles = total;
    rc = check_shards(io, list, cfg, ents, p->files, err);
    if (rc)
        goto out;
    rc = sio_epoch_count(io, list, cfg, &n);
    if (rc) {
        rc = sio_seterr(err, rc, "the epoch's length is not known yet");
        goto out;
    }
    if (!max_samples || max_samples > SIO_PLAN_ITEMS_MAX)
        max_samples = SIO_PLAN_ITEMS_MAX;
    if (n > max_samples || n > SIZE_MAX / sizeof(sio_plan_item)) {
        rc = sio_seterr(err, SIO_ERR_LIMIT,
                        "epoch of %" PRIu64 " samples above the plan's "
                        "limit", n);
        goto out;
    }
    p->items = malloc((n ? n : 1) * sizeof *p->items);
    views = calloc(total ? total : 1, sizeof *views);
    if (!p->items || !views) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* The groups are read through views: no entry lock per item. */
    for (size_t i = 0; i < total; i++)
        if (ents[i] && !sio_index_view_open(ents[i], &views[i])) {
            rc = sio_seterr(err, SIO_ERR_CHANGED,
                            "shard %zu's index was dropped meanwhile", i);
            goto out;
        }
    fill_ctx fc = {p->items, n, views, ents, total, err};
    rc = sio_epoch_order_each(io, list, cfg, 0, (size_t)n, fill_item, &fc,
                              &got, err);
    if (rc)
        goto out;
    if (got != n) {
        rc = sio_seterr(err, SIO_ERR_CHANGED,
                        "the order gave %zu samples, the indexes count "
                        "%" PRIu64, got, n);
        goto out;
    }
    for (size_t i = 0; i < total; i++)
        if (ents[i] && !sio_index_view_current(ents[i], &views[i])) {
            rc = sio_seterr(err, SIO_ERR_CHANGED,
                            "shard %zu's index was dropped meanwhile", i);
            goto out;
        }
    p->n = n;
    p->skipped = bad_groups(cfg, ents, total, p->items, n);
    atomic_init(&p->refs, 1);
    p->build_ns = mono_ns() - t0;
    *out = p;
    p = NULL;
out:
    if (p) {
        free(p->items);
        free(p->files);
    }
    free(p);
    for (size_t i = 0; views && i < total; i++)
        sio_index_view_close(ents[i], &views[i]);
    free(views);
    free(ents);
    return rc;
}

void sio_plan_ref(sio_plan *p)
{
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}

void sio_plan_unref(sio_plan *p)
{
    if (!p)
        return;
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
        free(p->items);
        free(p->files);
        free(p);
    }
}

uint64_t sio_plan_count(const sio_plan *p)
{
    return p->n;
}

uint64_t sio_plan_skipped(const sio_plan *p)
{
    return p->skipped;
}

const sio_plan_item *sio_plan_item_at(const sio_plan *p, uint64_t i)
{
    return i < p->n ? &p->items[i] : NULL;
}

size_t sio_plan_memory(const sio_plan *p)
{
    return sizeof *p + (size_t)p->n * sizeof *p->items +
           p->nfiles * sizeof *p->files;
}

uint64_t sio_plan_build_ns(const sio_plan *p)
{
    return p->build_ns;
}
