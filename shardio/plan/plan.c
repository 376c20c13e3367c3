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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/core_int.h"
#include "plan/plan_int.h"
#include "shardio_cache.h"
#include "store/backend_ops.h"
#include "store/store_int.h"
#include "tar/tarparse.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* file_identity's opener (sio_file_opener): the shard's descriptor as
 * readers open it, stat'ed; only a local file is looked at for writes. */
struct ident_open {
    sio_io *io;
    const sio_epoch_config *cfg;
    const char *url;
    size_t i;
    sio_error *err;
};

static sio_code ident_opener(void *ud, int *fd, struct stat *st, int *check)
{
    const struct ident_open *o = ud;
    sio_code rc = sio_io_open_fd_probe(o->io, o->cfg->cache, o->url, fd,
                                       o->err);
    if (rc)
        return rc;
    if (fstat(*fd, st) != 0) {
        close(*fd);
        *fd = -1;
        return sio_seterr(o->err, SIO_ERR_IO, "shard %zu: cannot stat",
                          o->i);
    }
    *check = sio_io_url_is_file(o->io, o->url);
    return SIO_OK;
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
    char why[120] = "";
    struct ident_open io_ = {io, cfg, url, i, err};
    /* Readers prove their bytes against this identity: a local file a
     * write may be under way on has none yet (sio_file_open_settled;
     * looked at again for a few clock ticks, then the plan stops here and
     * the epoch's feed retries the file). */
    sio_code rc = sio_file_open_settled(ident_opener, &io_, &fd, &st, why,
                                        sizeof why);
    if (rc == SIO_ERR_RETRY)
        return sio_seterr(err, SIO_ERR_CHANGED, "shard %zu is being "
                          "written: %s", i, why);
    if (rc)
        return rc == SIO_ERR_NOTFOUND ? SIO_ERR_CHANGED : rc;
    close(fd);
    if ((info->size != 0 && info->size != UINT64_MAX &&
         (uint64_t)st.st_size != info->size) ||
        (info->mtime != 0 && (uint64_t)st.st_mtime != info->mtime))
        return sio_seterr(err, SIO_ERR_CHANGED,
                          "shard %zu changed since it was indexed", i);
    *pf = (plan_file){st.st_dev, st.st_ino, st.st_size, st.st_mtim, 1};
    return SIO_OK;
}

static int zip_name(const char *url);
static sio_index_entry *grow_entry(void *ud, uint32_t s);

/* A virtual shard of an object set: an object the store makes (its
 * members fetched object by object), staged in memory like a remote
 * shard, never filled into the shard cache (its objects are the store's
 * own; nothing answers a HEAD for the tar they make). */
static int virtual_shard(const char *url)
{
    return sio_backend_for(url) == &sio_backend_objset;
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
            /* An object not in the shard cache (yet): a plan that grows
             * stages it (sio_plan_start), in the cache or in memory. */
            if (sio_cache_covers(url) || virtual_shard(url))
                return sio_seterr(err, SIO_ERR_AGAIN,
                                  "shard %zu is not in the shard cache: it "
                                  "is staged", i);
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
        /* Compressed: its index holds positions in the decompressed
         * stream, which a plan reads from staging (a plan that grows);
         * a zip's are not byte positions at all. */
        if (info.stream_only && cfg->stage_bytes)
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu is compressed or a zip: it is "
                              "staged (decompressed, or as a tar)", i);
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

/* Room for item i (the next one): its chunk, and the chunk's directory
 * block, allocated when it starts one. NULL when memory ran out. A
 * windowed plan's chunks come from window_slot. */
static sio_plan_item *window_slot(sio_plan *p, uint64_t i);
static sio_plan_item *item_slot(sio_plan *p, uint64_t i)
{
    size_t t = (size_t)(i >> (PLAN_CHUNK_BITS + PLAN_DIR_BITS));
    size_t d = (size_t)((i >> PLAN_CHUNK_BITS) & (PLAN_DIR - 1));
    if (i >= SIO_PLAN_ITEMS_MAX)
        return NULL;
    if (plan_windowed(p))
        return window_slot(p, i);
    if (!p->top[t]) {
        p->top[t] = calloc(PLAN_DIR, sizeof *p->top[t]);
        if (!p->top[t])
            return NULL;
        atomic_fetch_add(&p->item_bytes, PLAN_DIR * sizeof *p->top[t]);
    }
    if (!p->top[t][d]) {
        /* A plan of known length takes no more than its items. */
        uint64_t base = i & ~(PLAN_CHUNK - 1), k = PLAN_CHUNK;
        if (p->length_hint && p->length_hint - base < k)
            k = p->length_hint - base;
        sio_plan_item *c = malloc((size_t)k * sizeof *c);
        if (!c)
            return NULL;
        atomic_fetch_add(&p->item_bytes, (size_t)k * sizeof *c);
        atomic_fetch_add(&p->held, 1);
        p->top[t][d] = c;
    }
    return &p->top[t][d][i & (PLAN_CHUNK - 1)];
}

static void items_free(sio_plan *p)
{
    for (size_t t = 0; t < PLAN_TOP; t++) {
        if (!p->top[t])
            continue;
        for (size_t d = 0; d < PLAN_DIR; d++)
            free(p->top[t][d]);
        free(p->top[t]);
        p->top[t] = NULL;
    }
}

/* Filling a plan's items as the order decides them (sio_order_next):
 * each element of Y with its byte range, size and key hash from the
 * shard's index, read through a view where the index is complete, else
 * (a shard the journal cut short) group by group. */
typedef struct fill_ctx {
    sio_plan *p;
    uint64_t base;    /* Y's index of the call's item 0 */
    uint64_t max;     /* items Y may have */
    const sio_index_view *views;
    sio_index_entry **ents;
    size_t total;
    sio_error *err;
    unsigned char *seen; /* shards Y draws from (NULL: not noted) */
    /* Made again (a chunk let go): the items of [dst_base, dst_base +
     * dst_n) go to dst, the others are passed over; nothing is staged. */
    sio_plan_item *dst;
    uint64_t dst_base, dst_n;
} fill_ctx;

#define LEAD_STEP 8u
#define LEAD_RING 16384u /* 131,072 items */

static void lead_note(struct plan_grow *g, uint64_t y, uint64_t a,
                      uint64_t b, uint64_t n);

static sio_code fill_item(void *ud, uint64_t i, const sio_order_item *it)
{
    fill_ctx *c = ud;
    uint32_t s = it->shard;
    uint64_t y = c->base + i;
    sio_index_group g;
    int known = 0;
    if (s < c->total && c->ents[s] && it->group <= UINT32_MAX) {
        if (c->views[s].open)
            known = it->group < c->views[s].n &&
                    ((g = c->views[s].g[it->group]), 1);
        else
            known = sio_index_group_get(c->ents[s], it->group, &g);
    }
    if (c->dst && (y < c->dst_base || y - c->dst_base >= c->dst_n))
        return SIO_OK; /* before the chunk made again */
    if (y >= c->max)
        return sio_seterr(c->err, SIO_ERR_LIMIT,
                          "the epoch has more than the plan's limit of "
                          "%" PRIu64 " samples", c->max);
    if (!known || (g.flags & SIO_INDEX_GROUP_BAD) || g.end <= g.offset)
        return sio_seterr(c->err, SIO_ERR_CHANGED,
                          "Y[%" PRIu64 "] (shard %" PRIu32 " group %" PRIu64
                          ") is not a good indexed group", y, s, it->group);
    sio_plan_item *dst = c->dst ? &c->dst[y - c->dst_base]
                                : item_slot(c->p, y);
    if (!dst)
        return sio_seterr(c->err, SIO_ERR_NOMEM, "out of memory");
    *dst = (sio_plan_item){.offset = g.offset,
                           .end = g.end,
                           .bytes = g.bytes,
                           .shard = s,
                           .group = (uint32_t)it->group,
                           .keyhash = g.keyhash,
                           .source = it->source};
    if (c->dst)
        return SIO_OK;
    if (c->seen)
        c->seen[s] = 1;
    if (c->p->g)
        lead_note(c->p->g, y, g.offset, g.end, g.bytes);
    if (c->p->stage)
        stage_item(c->p, s, y, g.offset, g.end);
    return SIO_OK;
}

/* Bad groups of the shards marked in seen, up to the journal's cut. */
static uint64_t tally_bad(const sio_epoch_config *cfg, sio_index_entry **ents,
                          const unsigned char *seen, size_t total)
{
    uint64_t bad = 0;
    for (size_t s = 0; s < total; s++) {
        if (!seen[s] || !ents[s])
            continue;
        uint64_t cut = UINT64_MAX, good, nbad;
        if (cfg->journal && !sio_journal_cut(cfg->journal, (uint32_t)s, &cut))
            cut = UINT64_MAX;
        sio_index_tally(ents[s], cut, &good, &nbad);
        bad += nbad;
    }
    return bad;
}

/* Bad groups of the shards the first n items draw from, each shard
 * once, up to the journal's cut. */
static uint64_t bad_groups(const sio_plan *p, const sio_epoch_config *cfg,
                           sio_index_entry **ents, size_t total, uint64_t n)
{
    unsigned char *seen = calloc(total ? total : 1, 1);
    if (!seen)
        return 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t s = plan_item(p, i)->shard;
        if (s < total)
            seen[s] = 1;
    }
    uint64_t bad = tally_bad(cfg, ents, seen, total);
    free(seen);
    return bad;
}

sio_code plan_fd_open(sio_plan *p, sio_io *io, struct sio_cache_user *cache,
                      const char *url, uint32_t s, int *fd, int *sfd,
                      char *err, size_t errlen)
{
    sio_error e = {SIO_OK, ""};
    struct stat st;
    *fd = *sfd = -1;
    sio_code rc = sio_io_open_fd_checked(io, cache, url, fd, sfd, &e);
    if (rc == SIO_ERR_NOTFOUND)
        rc = SIO_ERR_CHANGED; /* it was there when indexed */
    if (rc == SIO_OK && fstat(*fd, &st) != 0) {
        rc = SIO_ERR_IO;
        snprintf(e.msg, sizeof e.msg, "url=%s: cannot stat", url);
    } else if (rc == SIO_OK && !plan_file_same(p, s, &st)) {
        rc = SIO_ERR_CHANGED;
        snprintf(e.msg, sizeof e.msg,
                 "url=%s is not the file the epoch's plan was made from "
                 "(rewritten or replaced since)", url);
    }
    if (rc) {
        if (*fd >= 0)
            close(*fd);
        if (*sfd >= 0)
            close(*sfd);
        *fd = *sfd = -1;
        snprintf(err, errlen, "%s", e.msg);
    }
    return rc;
}

int plan_fd_take(sio_plan *p, sio_io *io, struct sio_cache_user *cache,
                 const char *url, uint32_t s, int *fd, int *sfd, int *cached,
                 sio_code *rc, char *err, size_t errlen)
{
    int nfd = -1, nsfd = -1;
    *rc = SIO_OK;
    /* A local file is opened by every reader that takes it, as if it
     * had the shard to itself: a file deleted, rewritten or replaced
     * since is refused before any sample of it (a reader that holds it
     * already reads on from the descriptor it has, the plan's file). */
    int local = sio_io_url_is_file(io, url);
    if (local) {
        *rc = plan_fd_open(p, io, cache, url, s, &nfd, &nsfd, err, errlen);
        if (*rc)
            return -1;
    }
    pthread_mutex_lock(&p->fd_mu);
    if (!p->fds) {
        p->fds = malloc(PLAN_FDS * sizeof *p->fds);
        for (size_t i = 0; p->fds && i < PLAN_FDS; i++)
            p->fds[i] = (plan_fd){.fd = -1, .sfd = -1};
    }
    int free_i = -1;
    for (size_t i = 0; p->fds && i < PLAN_FDS; i++) {
        plan_fd *f = &p->fds[i];
        if (f->fd >= 0 && f->shard == s && !f->bad) {
            f->users++;
            f->used = ++p->fd_clock;
            *fd = f->fd;
            *sfd = f->sfd;
            *cached = f->cached;
            pthread_mutex_unlock(&p->fd_mu);
            if (nfd >= 0)
                close(nfd);
            return (int)i;
        }
        if (f->fd < 0 && free_i < 0)
            free_i = (int)i;
    }
    if (free_i < 0) {
        /* Every entry held (or no memory): the caller opens its own. */
        pthread_mutex_unlock(&p->fd_mu);
        if (nfd >= 0)
            close(nfd);
        return -1;
    }
    /* Opened under the lock: one open per shard, whoever asks. */
    if (!local) {
        *rc = plan_fd_open(p, io, cache, url, s, &nfd, &nsfd, err, errlen);
        if (*rc) {
            pthread_mutex_unlock(&p->fd_mu);
            return -1;
        }
    }
    plan_fd *v = &p->fds[free_i];
    *v = (plan_fd){.shard = s, .fd = nfd, .sfd = nsfd, .users = 1,
                   .used = ++p->fd_clock, .cached = cache && !local};
    *fd = v->fd;
    *sfd = v->sfd;
    *cached = v->cached;
    pthread_mutex_unlock(&p->fd_mu);
    return free_i;
}

void plan_fd_release(sio_plan *p, int i, int bad)
{
    if (i < 0 || (size_t)i >= PLAN_FDS)
        return;
    pthread_mutex_lock(&p->fd_mu);
    plan_fd *f = &p->fds[i];
    if (f->users > 0)
        f->users--;
    if (bad)
        f->bad = 1;
    /* Nobody holds it: closed (a file deleted or replaced since, or an
     * evicted cache entry, gives its space back; the next reader opens
     * the file as it is then). */
    if (f->users == 0) {
        if (f->fd >= 0)
            close(f->fd);
        if (f->sfd >= 0)
            close(f->sfd);
        *f = (plan_fd){.fd = -1, .sfd = -1};
    }
    pthread_mutex_unlock(&p->fd_mu);
}

static sio_plan *plan_new(size_t total)
{
    sio_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->files = calloc(total ? total : 1, sizeof *p->files);
    if (!p->files) {
        free(p);
        return NULL;
    }
    p->nfiles = total;
    atomic_init(&p->refs, 1);
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->fd_mu, NULL);
    pthread_rwlock_init(&p->items_lk, NULL);
    return p;
}

static void plan_free(sio_plan *p);

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
    p = plan_new(total);
    if (!ents || !p) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
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
    p->length_hint = n;
    views = calloc(total ? total : 1, sizeof *views);
    if (!views) {
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
    fill_ctx fc = {.p = p, .base = 0, .max = n, .views = views,
                   .ents = ents, .total = total, .err = err};
    rc = sio_epoch_order_each(io, list, cfg, 0, (size_t)n, fill_item, &fc,
                              &got, err);
    if (rc && cfg->on_error == SIO_ON_ERROR_FAIL && rc != SIO_ERR_NOMEM &&
        rc != SIO_ERR_CANCELED && rc != SIO_ERR_AGAIN) {
        /* The epoch fails midway (a bad sample, a shard that ends
         * short): a plan that grows (sio_plan_start) ends there. */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        rc = sio_seterr(err, SIO_ERR_AGAIN, "the epoch fails after %zu "
                        "samples under on_error=fail: %.400s", got, why);
    }
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
    p->skipped = bad_groups(p, cfg, ents, total, n);
    atomic_store_explicit(&p->n, n, memory_order_release);
    atomic_store(&p->complete, 1);
    p->build_ns = mono_ns() - t0;
    *out = p;
    p = NULL;
out:
    plan_free(p);
    for (size_t i = 0; views && i < total; i++)
        sio_index_view_close(ents[i], &views[i]);
    free(views);
    free(ents);
    return rc;
}

/* A complete plan of one item, group g (gr its index record) of shard s
 * of a list of total shards, at index i of the dataset's order; smp (one
 * reference, taken: freed on failure too) is the sample read whole, NULL
 * when the reader reads it in place. */
static sio_code one_sample_plan(size_t total, uint32_t s, uint64_t g,
                                const sio_index_group *gr, uint64_t i,
                                const sio_sample *smp, uint64_t t0,
                                sio_plan **out, sio_error *err)
{
    sio_plan *p = plan_new(total);
    sio_plan_item *it = NULL;
    if (p) {
        p->length_hint = 1;
        it = item_slot(p, 0);
    }
    if (!it) {
        sio_sample_unref(smp);
        plan_free(p);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    *it = (sio_plan_item){.offset = gr->offset,
                          .end = gr->end,
                          .bytes = gr->bytes,
                          .shard = s,
                          .group = (uint32_t)g,
                          .keyhash = gr->keyhash};
    p->single = smp;
    p->index_base = i;
    atomic_store_explicit(&p->n, 1, memory_order_release);
    atomic_store(&p->complete, 1);
    p->build_ns = mono_ns() - t0;
    *out = p;
    return SIO_OK;
}

/* Group number of the k-th good group of a complete view: 1 with *g
 * and *out, 0 when the shard has fewer. */
static int kth_good(const sio_index_view *v, uint64_t k, uint64_t *g,
                    sio_index_group *out)
{
    for (uint64_t x = 0; x < v->n; x++) {
        if (v->g[x].flags & SIO_INDEX_GROUP_BAD)
            continue;
        if (k-- > 0)
            continue;
        *g = x;
        *out = v->g[x];
        return 1;
    }
    return 0;
}

sio_code sio_plan_sample(sio_io *io, const sio_shardlist *list,
                         const sio_epoch_config *cfg, uint64_t i,
                         sio_plan **out, sio_error *err)
{
    uint64_t t0 = mono_ns();
    size_t total = sio_shardlist_count(list);
    uint64_t left = i;
    *out = NULL;
    if (!cfg->index)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED, "no shard indexes");
    if (i > SIO_POSITION_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "sample index above %llu",
                          (unsigned long long)SIO_POSITION_MAX);
    for (size_t s = 0; s < total; s++) {
        const char *url = sio_shardlist_url(list, s);
        sio_index_entry *e = sio_index_peek(cfg->index, url);
        sio_index_info info;
        if (!e)
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu's index is not in memory", s);
        sio_index_get_info(e, &info);
        if (!info.complete)
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu is not indexed whole", s);
        if (left >= info.good) {
            left -= info.good;
            continue;
        }
        /* The shard that holds it: a local plain tar, read in place
         * from byte offsets. (A shard-cache entry is fetched: a block
         * that fails its check there is read again from the store within
         * the same request, where a plan's reader can only end the
         * stream with a retryable error.) */
        if (info.stream_only || !sio_io_url_is_file(io, url))
            return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                              "shard %zu is not a local plain tar", s);
        /* A local file rewritten since: its index goes, and the next
         * read from its start indexes it again. */
        if (sio_index_refresh(e))
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu changed since it was indexed", s);
        sio_index_get_info(e, &info);
        if (!info.complete || info.good <= left)
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu's index was dropped", s);
        /* An index loaded from a file or sidecar and not yet read through:
         * a read that disagrees with it must drop it and look again, as a
         * fetch does (sio_plan_sample_fetch). */
        if (info.hint)
            return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                              "shard %zu's index is not proven yet", s);
        sio_index_view v;
        if (!sio_index_view_open(e, &v))
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu's index was dropped", s);
        uint64_t g = 0;
        sio_index_group gr;
        int found = kth_good(&v, left, &g, &gr);
        sio_index_view_close(e, &v);
        if (!found || g > UINT32_MAX || gr.end <= gr.offset)
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "shard %zu's index does not hold sample "
                              "%" PRIu64, s, i);
        plan_file pf;
        sio_code rc = file_identity(io, cfg, url, s, &info, &pf, err);
        if (rc)
            return rc == SIO_ERR_CHANGED ? SIO_ERR_AGAIN : rc;
        rc = one_sample_plan(total, (uint32_t)s, g, &gr, i, NULL, t0, out,
                             err);
        if (rc == SIO_OK)
            (*out)->files[s] = pf;
        return rc;
    }
    return sio_seterr(err, SIO_ERR_NOTFOUND,
                      "sample %" PRIu64 " is past the dataset's %" PRIu64
                      " samples", i, i - left);
}

/* A read of one sample that went wrong and may pass (the store's
 * transient failures): tried this often, with this pause between. */
#define SAMPLE_READ_TRIES 3u
#define SAMPLE_READ_PAUSE_MS 100u

/* Read group g (gr: its index record) of shard s whole into memory
 * (*out, one reference), from wherever the shard is. */
static sio_code read_group(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *cfg, uint32_t s,
                           uint64_t g, const sio_index_group *gr,
                           int stream_only, const sio_sample **out,
                           sio_error *err)
{
    const char *url = sio_shardlist_url(list, s);
    uint64_t size = sio_shardlist_size(list, s);
    sio_code rc = SIO_OK;
    *out = NULL;
    for (unsigned attempt = 0; attempt < SAMPLE_READ_TRIES; attempt++) {
        if (attempt) {
            struct timespec ts = {0, SAMPLE_READ_PAUSE_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        sio_shard_at at;
        memset(&at, 0, sizeof at);
        at.end = UINT64_MAX;
        at.skip_until = g;
        at.cache = cfg->cache;
        at.size_hint = size == UINT64_MAX ? 0 : size;
        /* A plain tar from the group's bytes (a ranged read of a remote
         * one); a compressed shard or a zip from its start, reading past
         * the groups before. */
        if (!stream_only) {
            at.offset = gr->offset;
            at.end = gr->end;
            at.first_group = g;
        }
        sio_shard *sh = NULL;
        sio_error er = {SIO_OK, ""};
        rc = sio_shard_open_at(io, url, s, &cfg->limits, &at, &sh, &er);
        if (rc) {
            sio_seterr(err, rc, "%s", er.msg);
        } else {
            for (;;) {
                const sio_sample *smp = NULL;
                rc = sio_shard_next(sh, &smp);
                if (rc == SIO_ERR_SAMPLE)
                    continue;
                if (rc) {
                    sio_seterr(err, rc, "%s", sio_shard_errmsg(sh));
                    break;
                }
                if (!smp) {
                    rc = sio_seterr(err, SIO_ERR_CHANGED, "shard %" PRIu32
                                    " ended before group %" PRIu64 ": it "
                                    "changed since it was indexed", s, g);
                    break;
                }
                if (smp->index_in_shard < g) {
                    sio_sample_unref(smp);
                    continue;
                }
                if (smp->index_in_shard != g || smp->bytes != gr->bytes ||
                    sio_index_keyhash(smp->key, strlen(smp->key)) !=
                        gr->keyhash) {
                    sio_sample_unref(smp);
                    rc = sio_seterr(err, SIO_ERR_CHANGED, "shard %" PRIu32
                                    " group %" PRIu64 " is not the indexed "
                                    "sample (the shard changed since it was "
                                    "indexed)", s, g);
                    break;
                }
                *out = smp;
                break;
            }
            sio_shard_close(sh);
        }
        if (rc != SIO_ERR_IO && rc != SIO_ERR_RETRY)
            break;
    }
    return rc;
}

sio_code sio_plan_sample_fetch(sio_io *io, const sio_shardlist *list,
                               const sio_epoch_config *cfg, uint64_t i,
                               sio_plan **out, sio_error *err)
{
    uint64_t t0 = mono_ns();
    size_t total = sio_shardlist_count(list);
    *out = NULL;
    if (!cfg->index)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED, "no shard indexes");
    if (i > SIO_POSITION_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "sample index above %llu",
                          (unsigned long long)SIO_POSITION_MAX);
    /* A loaded index the read disagrees with is dropped and the shard
     * indexed again by reading it: then once more. */
    for (unsigned pass = 0; pass < 2; pass++) {
        uint64_t left = i;
        int again = 0;
        for (size_t s = 0; s < total && !again; s++) {
            const char *url = sio_shardlist_url(list, s);
            sio_index_entry *e = sio_index_get(cfg->index, io, url,
                                               sio_shardlist_size(list, s));
            sio_index_info info;
            if (!e)
                return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            sio_index_refresh(e); /* a local file rewritten since */
            sio_index_vet(e, io, cfg->cache, &cfg->limits);
            sio_index_get_info(e, &info);
            if (!info.complete) {
                sio_code rc = sio_index_build_to(io, url, (uint32_t)s,
                                                 &cfg->limits, e, cfg->cache,
                                                 NULL, NULL, err);
                if (rc)
                    return rc;
                sio_index_get_info(e, &info);
                if (!info.complete)
                    return sio_seterr(err, SIO_ERR_IO, "shard %zu: no "
                                      "index", s);
            }
            if (left >= info.good) {
                left -= info.good;
                continue;
            }
            sio_index_view v;
            if (!sio_index_view_open(e, &v))
                return sio_seterr(err, SIO_ERR_CHANGED, "shard %zu's "
                                  "index was dropped", s);
            uint64_t g = 0;
            sio_index_group gr;
            int found = kth_good(&v, left, &g, &gr);
            sio_index_view_close(e, &v);
            if (!found || g > UINT32_MAX)
                return sio_seterr(err, SIO_ERR_CHANGED, "shard %zu's index "
                                  "does not hold sample %" PRIu64, s, i);
            const sio_sample *smp = NULL;
            sio_code rc = read_group(io, list, cfg, (uint32_t)s, g, &gr,
                                     info.stream_only, &smp, err);
            if (rc == SIO_ERR_CHANGED && info.hint && pass == 0 &&
                sio_index_reject(e, "a sample read from it is not the "
                                    "indexed one")) {
                again = 1; /* indexed again, then looked for again */
                continue;
            }
            if (rc)
                return rc;
            return one_sample_plan(total, (uint32_t)s, g, &gr, i, smp, t0,
                                   out, err);
        }
        if (!again)
            return sio_seterr(err, SIO_ERR_NOTFOUND,
                              "sample %" PRIu64 " is past the dataset's "
                              "%" PRIu64 " samples", i, i - left);
    }
    return sio_seterr(err, SIO_ERR_CHANGED, "sample %" PRIu64 ": its "
                      "shard's index was wrong twice", i);
}

void sio_plan_ref(sio_plan *p)
{
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}

void sio_plan_unref(sio_plan *p)
{
    if (!p)
        return;
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
        plan_free(p);
}

uint64_t sio_plan_count(const sio_plan *p)
{
    return atomic_load_explicit(&p->n, memory_order_acquire);
}

int sio_plan_complete(const sio_plan *p)
{
    return atomic_load(&p->complete);
}

uint64_t sio_plan_skipped(const sio_plan *p)
{
    return atomic_load(&p->complete) ? p->skipped : 0;
}

const sio_plan_item *sio_plan_item_at(const sio_plan *p, uint64_t i)
{
    return i < sio_plan_count(p) ? plan_item(p, i) : NULL;
}

static size_t ck_bytes_of(const sio_plan *p);

size_t sio_plan_memory(const sio_plan *p)
{
    return sizeof *p + atomic_load(&p->item_bytes) +
           p->nfiles * sizeof *p->files + ck_bytes_of(p) +
           (p->single ? (size_t)p->single->bytes : 0);
}

uint64_t sio_plan_build_ns(const sio_plan *p)
{
    return p->build_ns;
}

/* ------------------------------------------------------------------ */
/* A plan that grows while its shards are indexed                        */

/* Shards one step indexes at most (beyond those the order waits on). */
#define GROW_STEP_SHARDS 4u
/* A shard whose read fails for a reason that may pass (an I/O error) is
 * read again at once this many times; then the plan stops and the feed,
 * which retries with a backoff, goes on. */
#define GROW_READ_TRIES 2u

/* A step waits this long at most for the shards still arriving; it goes
 * on with them for GROW_SLICE_NS, a round (the order run, its items
 * published, its readers woken) at most every GROW_ROUND_NS, before it
 * gives its planner thread back (and is queued again). */
#define GROW_WAIT_MS 100u
#define GROW_SLICE_NS (250ull * 1000 * 1000)
#define GROW_ROUND_NS (1000ull * 1000)

typedef struct plan_grow {
    sio_plan *owner; /* the plan it grows */
    sio_io *io;
    const sio_shardlist *list;
    sio_epoch_config cfg;
    sio_order *o;
    size_t total;
    sio_index_entry **ents; /* by list index: set once the shard is ready
                               (the order can take it as it is) */
    sio_index_view *views;  /* open where the index is complete */
    sio_mix_source *mix;    /* a mixed epoch's sources (cfg.nmix), copied:
                               how far apart a source's draws come */
    uint64_t mix_total;     /* the sum of their quotas */
    _Atomic uint64_t *gready; /* groups of a ready shard the order may
                               take (the gate: UINT64_MAX, all; fewer
                               while a job still fetches it) */
    uint32_t *ahead;
    size_t ahead_cap;
    uint64_t made;          /* items written (published or not) */
    uint64_t max;           /* items Y may have in the plan */
    uint64_t ahead_bound;   /* items it makes ahead of its readers */
    /* ... and bytes (a plan that stages in memory: lead_max, half its
     * budget): the items' bytes made so far, and in a ring of LEAD_RING
     * entries the bytes of the items before every LEAD_STEP-th one, so
     * the bytes made past the furthest reader are known. */
    uint64_t made_bytes;
    _Atomic uint64_t *lead_ring;
    _Atomic uint64_t lead_made; /* items made at the ring's last entry */
    uint64_t lead_max;
    uint64_t t0;
    unsigned char *seen;    /* shards Y draws from (the skipped count) */
    /* A windowed plan's checkpoints of the order, every ck_every items
     * from 0 (thinned to at most PLAN_CKPTS by doubling ck_every): a
     * chunk let go is made again from the one before it. ck_mu: the
     * list (the steps add, thin; a refill reads it while it runs). */
    pthread_mutex_t ck_mu;
    sio_order_ckpt **ck;
    size_t nck;
    uint64_t ck_every, ck_next;
    _Atomic size_t ck_bytes;
    sio_plan_item *wchunk;  /* the chunk being written, c's (windowed) */
    uint64_t wchunk_c;
    uint64_t skip_to;       /* items below it are not written (a chunk
                               partly passed over is passed over whole) */
    uint64_t throttles;     /* the store's throttle answers seen so far */
    uint64_t quiet_ms;      /* no fetch ahead of the order before then */
    unsigned char *uncached; /* shards the shard cache would not keep: in
                                memory (NULL: every one the cache has room
                                for when its step comes) */
    struct grow_stop *stops; /* under on_error=fail: shards whose read
                                failed, where (the order's stop hook) */
} plan_grow;

/* Item y (its bytes [a, b), b UINT64_MAX to the shard's end: n payload
 * bytes counted then) was made: the lead's count (staged plans). */
static void lead_note(struct plan_grow *g, uint64_t y, uint64_t a, uint64_t b,
                      uint64_t n)
{
    if (!g->lead_ring)
        return;
    g->made_bytes += b != UINT64_MAX && b > a ? b - a : n;
    if ((y + 1) % LEAD_STEP == 0) {
        atomic_store_explicit(&g->lead_ring[((y + 1) / LEAD_STEP) % LEAD_RING],
                              g->made_bytes, memory_order_relaxed);
        atomic_store_explicit(&g->lead_made, y + 1, memory_order_release);
    }
}

/* Bytes of the items made past index want (from the LEAD_STEP-th item at
 * or before it; UINT64_MAX when the ring no longer holds that far back). */
static uint64_t lead_bytes(const plan_grow *g, uint64_t made, uint64_t want)
{
    if (want >= made)
        return 0;
    uint64_t k = want / LEAD_STEP;
    if (made / LEAD_STEP - k >= LEAD_RING)
        return UINT64_MAX;
    uint64_t at = k ? atomic_load_explicit(&g->lead_ring[k % LEAD_RING],
                                           memory_order_relaxed)
                    : 0;
    return g->made_bytes > at ? g->made_bytes - at : 0;
}

uint64_t plan_bytes_behind(sio_plan *p, uint64_t low, uint64_t bytes)
{
    plan_grow *g = p->g;
    if (!g || !g->lead_ring || !low)
        return 0;
    uint64_t m1 = atomic_load_explicit(&g->lead_made, memory_order_acquire);
    uint64_t hi = low / LEAD_STEP, top = m1 / LEAD_STEP;
    if (hi > top)
        hi = top;
    /* entries still in the ring (a margin of a quarter of it: the builder
     * writes on meanwhile) */
    uint64_t lo = top >= LEAD_RING * 3 / 4 ? top - LEAD_RING * 3 / 4 : 0;
    if (hi <= lo)
        return 0;
#define CUM(k) ((k) ? atomic_load_explicit(&g->lead_ring[(k) % LEAD_RING], \
                                           memory_order_relaxed)          \
                    : 0)
    uint64_t end = CUM(hi);
    if (end - CUM(lo) < bytes)
        return 0; /* (what the ring holds is less than the margin) */
    /* the largest k in [lo, hi] with end - CUM(k) >= bytes */
    uint64_t a = lo, b = hi;
    while (a < b) {
        uint64_t mid = a + (b - a + 1) / 2;
        if (end - CUM(mid) >= bytes)
            a = mid;
        else
            b = mid - 1;
    }
    uint64_t m2 = atomic_load_explicit(&g->lead_made, memory_order_acquire);
    if (m2 / LEAD_STEP - lo >= LEAD_RING)
        return 0; /* overwritten while read */
#undef CUM
    return a * LEAD_STEP;
}

/* Is the builder far enough ahead of its furthest reader (want: 1 + the
 * highest index a reader asked) to wait for it: ahead_bound items, or
 * lead_max bytes? */
static int lead_full(const plan_grow *g, uint64_t want)
{
    if (g->made <= want)
        return 0;
    if (g->made - want >= g->ahead_bound)
        return 1;
    return g->lead_max && g->lead_ring &&
           lead_bytes(g, g->made, want) > g->lead_max;
}


/* A shard whose read failed under on_error=fail: the order fails where
 * it would take group `at` of it (the steps write, the order reads, both
 * on the step's thread). */
typedef struct grow_stop {
    struct grow_stop *next;
    uint32_t s;
    uint64_t at;
    sio_code rc;
    char msg[600];
} grow_stop;

static size_t ck_bytes_of(const sio_plan *p)
{
    return p->g ? atomic_load(&p->g->ck_bytes) : 0;
}

int plan_source(const sio_plan *p, uint32_t s, sio_io **io,
                const char **url)
{
    if (!p->g || s >= p->g->total)
        return 0;
    *io = p->g->io;
    *url = sio_shardlist_url(p->g->list, s);
    return *url != NULL;
}

static void grow_free(plan_grow *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->nck; i++)
        sio_order_ckpt_free(g->ck[i]);
    free(g->ck);
    free(g->seen);
    pthread_mutex_destroy(&g->ck_mu);
    for (size_t i = 0; g->views && i < g->total; i++)
        if (g->ents[i])
            sio_index_view_close(g->ents[i], &g->views[i]);
    sio_order_close(g->o);
    free(g->ents);
    free(g->views);
    free(g->gready);
    free(g->lead_ring);
    free(g->ahead);
    free(g->mix);
    free(g->uncached);
    while (g->stops) {
        grow_stop *x = g->stops;
        g->stops = x->next;
        free(x);
    }
    free(g);
}

static void plan_free(sio_plan *p)
{
    if (!p)
        return;
    grow_free(p->g);
    stage_free(p->stage);
    sio_sample_unref(p->single);
    items_free(p);
    free(p->files);
    for (size_t i = 0; p->fds && i < PLAN_FDS; i++) {
        if (p->fds[i].fd >= 0)
            close(p->fds[i].fd);
        if (p->fds[i].sfd >= 0)
            close(p->fds[i].sfd);
    }
    free(p->fds);
    free(p->refill);
    pthread_rwlock_destroy(&p->items_lk);
    pthread_mutex_destroy(&p->fd_mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void plan_wake_all(sio_plan *p)
{
    plan_waiter *w = p->waiters;
    p->waiters = NULL;
    while (w) {
        plan_waiter *next = w->next;
        w->linked = 0;
        w->next = w->prev = NULL;
        w->fn(w->ud);
        w = next;
    }
}

/* Items up to g->made are Y's: readers see them. */
static void publish(sio_plan *p)
{
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->n, p->g->made, memory_order_release);
    plan_wake_all(p);
    pthread_mutex_unlock(&p->mu);
}

/* The plan stops growing at n: readers that reach its end fail there
 * with reason (they resume elsewhere). */
static void grow_fail_code(sio_plan *p, sio_code fatal, const char *reason)
{
    pthread_mutex_lock(&p->mu);
    if (!atomic_load(&p->failed) && !atomic_load(&p->complete)) {
        snprintf(p->fail_msg, sizeof p->fail_msg, "%s", reason);
        p->fatal = fatal;
        atomic_store(&p->failed, 1);
    }
    plan_wake_all(p);
    pthread_mutex_unlock(&p->mu);
}

static void grow_fail(sio_plan *p, const char *reason)
{
    grow_fail_code(p, SIO_OK, reason);
}

void sio_plan_abandon(sio_plan *p, const char *reason)
{
    if (p && p->growing)
        grow_fail(p, reason);
}

int sio_plan_stage_far(const sio_plan *p, uint64_t t)
{
    if (!p->stage_seeks || p->stage_defers || !p->g)
        return 0;
    uint64_t n = sio_plan_count(p);
    uint64_t slack = p->g->cfg.buffer_samples;
    return t > n && t - n > slack;
}

int sio_plan_failed(const sio_plan *p, char *msg, size_t len)
{
    if (!atomic_load(&p->failed))
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    if (msg && len)
        snprintf(msg, len, "%s", p->fail_msg);
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return 1;
}

sio_code sio_plan_fatal(const sio_plan *p)
{
    return atomic_load(&p->failed) ? p->fatal : SIO_OK;
}

int sio_plan_parked(const sio_plan *p)
{
    return atomic_load(&p->parked);
}

int sio_plan_stage_blocked(sio_plan *p)
{
    if (!p->stage)
        return 0;
    pthread_mutex_lock(&p->mu);
    int b = p->stage->blocked_ms != 0;
    pthread_mutex_unlock(&p->mu);
    return b;
}

void sio_plan_set_ahead(sio_plan *p, uint64_t samples)
{
    if (!p->growing || !samples)
        return;
    pthread_mutex_lock(&p->mu);
    p->g->ahead_bound = samples;
    atomic_store(&p->g_ahead_low, samples / 2 ? samples / 2 : 1);
    pthread_mutex_unlock(&p->mu);
}

void sio_plan_set_kick(sio_plan *p, void (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&p->mu);
    p->kick = fn;
    p->kick_ud = fn ? ud : NULL;
    pthread_mutex_unlock(&p->mu);
}

int plan_wait_for(sio_plan *p, plan_waiter *w, uint64_t t)
{
    int wait = 0, kick = 0;
    void (*fn)(void *) = NULL;
    void *ud = NULL;
    if (!p->growing)
        return 0;
    /* How far readers have come: the builder works that far ahead. */
    uint64_t want = atomic_load(&p->want);
    while (t + 1 > want &&
           !atomic_compare_exchange_weak(&p->want, &want, t + 1))
        ;
    uint64_t n = atomic_load_explicit(&p->n, memory_order_acquire);
    if (t < n && (!atomic_load(&p->parked) || n - t >= p->g_ahead_low))
        return 0;
    pthread_mutex_lock(&p->mu);
    n = atomic_load_explicit(&p->n, memory_order_acquire);
    if (atomic_load(&p->parked) && p->kick &&
        (t >= n || n - t < p->g_ahead_low)) {
        atomic_store(&p->parked, 0);
        kick = 1;
        fn = p->kick;
        ud = p->kick_ud;
    }
    wait = t >= n && !atomic_load(&p->complete) && !atomic_load(&p->failed);
    if (wait)
        plan_link_waiter(p, w);
    pthread_mutex_unlock(&p->mu);
    if (kick)
        fn(ud);
    return wait;
}

void plan_link_waiter(sio_plan *p, plan_waiter *w)
{
    if (!w->fn || w->linked)
        return;
    w->linked = 1;
    w->prev = NULL;
    w->next = p->waiters;
    if (p->waiters)
        p->waiters->prev = w;
    p->waiters = w;
}

void plan_unwait(sio_plan *p, plan_waiter *w)
{
    pthread_mutex_lock(&p->mu);
    if (w->linked) {
        if (w->prev)
            w->prev->next = w->next;
        else
            p->waiters = w->next;
        if (w->next)
            w->next->prev = w->prev;
        w->linked = 0;
        w->next = w->prev = NULL;
    }
    pthread_mutex_unlock(&p->mu);
}

/* ------------------------------------------------------------------ */
/* The window: chunks let go behind the readers, made again on demand    */

/* A windowed plan checkpoints its order every keep items, within
 * [PLAN_CHUNK, PLAN_CKPT_EVERY] (a multiple of PLAN_CHUNK), and keeps at
 * most PLAN_CKPTS checkpoints: a chunk is made again by replaying at
 * most ck_every items. */
#define PLAN_CKPT_EVERY ((uint64_t)1 << 20)
#define PLAN_CKPTS 256u

/* The order's state at g->made, kept (the builder's thread). Beyond
 * PLAN_CKPTS, every other one goes and the interval doubles. */
static sio_code ck_add(sio_plan *p)
{
    plan_grow *g = p->g;
    sio_order_ckpt *c = sio_order_save(g->o);
    if (!c)
        return SIO_ERR_NOMEM;
    pthread_mutex_lock(&g->ck_mu);
    if (g->nck == PLAN_CKPTS) {
        size_t k = 0;
        for (size_t i = 0; i < g->nck; i++) {
            if (i % 2 == 0) {
                g->ck[k++] = g->ck[i];
                continue;
            }
            atomic_fetch_sub(&g->ck_bytes, sio_order_ckpt_bytes(g->ck[i]));
            sio_order_ckpt_free(g->ck[i]);
        }
        g->nck = k;
        g->ck_every *= 2;
    }
    if (!g->ck) {
        g->ck = calloc(PLAN_CKPTS, sizeof *g->ck);
        if (!g->ck) {
            pthread_mutex_unlock(&g->ck_mu);
            sio_order_ckpt_free(c);
            return SIO_ERR_NOMEM;
        }
    }
    g->ck[g->nck++] = c;
    atomic_fetch_add(&g->ck_bytes, sio_order_ckpt_bytes(c));
    g->ck_next = g->made + g->ck_every;
    pthread_mutex_unlock(&g->ck_mu);
    return SIO_OK;
}

/* Chunk c's pointer in the directory (items_lk held). */
static sio_plan_item **chunk_ref(sio_plan *p, uint64_t c)
{
    sio_plan_item **dir = p->top[c >> PLAN_DIR_BITS];
    return dir ? &dir[c & (PLAN_DIR - 1)] : NULL;
}

/* Chunk c's pointer, its directory block allocated when missing
 * (items_lk held for writing): NULL when memory ran out. */
static sio_plan_item **chunk_ref_make(sio_plan *p, uint64_t c)
{
    size_t t = (size_t)(c >> PLAN_DIR_BITS);
    if (t >= PLAN_TOP)
        return NULL;
    if (!p->top[t]) {
        p->top[t] = calloc(PLAN_DIR, sizeof *p->top[t]);
        if (!p->top[t])
            return NULL;
        atomic_fetch_add(&p->item_bytes, PLAN_DIR * sizeof *p->top[t]);
    }
    return &p->top[t][c & (PLAN_DIR - 1)];
}

/* item_slot of a windowed plan (the builder's thread): the chunk being
 * written is the builder's (g->wchunk); a new one is put in place under
 * the write lock, and nothing of the directory is read without it. */
static sio_plan_item *window_slot(sio_plan *p, uint64_t i)
{
    plan_grow *g = p->g;
    uint64_t c = i >> PLAN_CHUNK_BITS;
    if (!g->wchunk || g->wchunk_c != c) {
        sio_plan_item *chunk = malloc(PLAN_CHUNK * sizeof *chunk);
        if (!chunk)
            return NULL;
        pthread_rwlock_wrlock(&p->items_lk);
        sio_plan_item **ref = chunk_ref_make(p, c);
        if (ref && !*ref) {
            *ref = chunk;
            atomic_fetch_add(&p->held, 1);
            atomic_fetch_add(&p->item_bytes,
                             PLAN_CHUNK * sizeof(sio_plan_item));
        } else if (ref) { /* not expected: a chunk at made is new */
            free(chunk);
            chunk = *ref;
        } else {
            free(chunk);
            chunk = NULL;
        }
        if (chunk) {
            g->wchunk = chunk;
            g->wchunk_c = c;
        }
        pthread_rwlock_unlock(&p->items_lk);
        if (!chunk)
            return NULL;
    }
    return &g->wchunk[i & (PLAN_CHUNK - 1)];
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* More than keep items held: let chunks go, the oldest first, except
 * those a reader reads now and the one being written. */
static void window_trim(sio_plan *p)
{
    if (!plan_windowed(p))
        return;
    uint64_t keep = p->keep;
    if (p->g && keep < p->g->ahead_bound + 2 * PLAN_CHUNK)
        keep = p->g->ahead_bound + 2 * PLAN_CHUNK;
    uint64_t keep_chunks = (keep + PLAN_CHUNK - 1) >> PLAN_CHUNK_BITS;
    if (atomic_load(&p->held) <= keep_chunks)
        return;
    uint64_t *mk = NULL;
    size_t nm = 0, cap = 0;
    pthread_mutex_lock(&p->mu);
    for (plan_mark *m = p->marks; m; m = m->next)
        cap++;
    mk = cap ? malloc(cap * sizeof *mk) : NULL;
    for (plan_mark *m = p->marks; mk && m; m = m->next)
        mk[nm++] = atomic_load_explicit(&m->chunk, memory_order_relaxed);
    pthread_mutex_unlock(&p->mu);
    if (cap && !mk)
        return; /* out of memory: nothing let go now */
    if (nm > 1)
        qsort(mk, nm, sizeof *mk, u64_cmp);
    /* The chunk that holds n may still be written. */
    uint64_t front = sio_plan_count(p) >> PLAN_CHUNK_BITS;
    pthread_rwlock_wrlock(&p->items_lk);
    for (uint64_t c = p->lo;
         c < front && atomic_load(&p->held) > keep_chunks; c++) {
        sio_plan_item **ref = chunk_ref(p, c);
        if (!ref || !*ref) {
            if (c == p->lo)
                p->lo = c + 1;
            continue;
        }
        if (nm && bsearch(&c, mk, nm, sizeof *mk, u64_cmp))
            continue;
        if (p->g && *ref == p->g->wchunk)
            continue; /* still written */
        free(*ref);
        *ref = NULL;
        atomic_fetch_sub(&p->held, 1);
        atomic_fetch_sub(&p->item_bytes, PLAN_CHUNK * sizeof(sio_plan_item));
        atomic_fetch_add(&p->released, 1);
        if (c == p->lo)
            p->lo = c + 1;
    }
    pthread_rwlock_unlock(&p->items_lk);
    free(mk);
}

int plan_item_copy(sio_plan *p, uint64_t i, sio_plan_item *out)
{
    if (!plan_windowed(p)) {
        *out = *plan_item(p, i);
        return 1;
    }
    pthread_rwlock_rdlock(&p->items_lk);
    sio_plan_item **ref = chunk_ref(p, i >> PLAN_CHUNK_BITS);
    const sio_plan_item *c = ref ? *ref : NULL;
    if (c)
        *out = c[i & (PLAN_CHUNK - 1)];
    pthread_rwlock_unlock(&p->items_lk);
    return c != NULL;
}

int sio_plan_item_get(sio_plan *p, uint64_t i, sio_plan_item *out)
{
    return i < sio_plan_count(p) && plan_item_copy(p, i, out);
}

int plan_refill_wait(sio_plan *p, plan_waiter *w, uint64_t i, char *err,
                     size_t errlen)
{
    uint64_t c = i >> PLAN_CHUNK_BITS;
    sio_plan_item it;
    void (*fn)(void *) = NULL;
    void *ud = NULL;
    pthread_mutex_lock(&p->mu);
    if (plan_item_copy(p, i, &it)) {
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    if (!p->restage_fn) {
        pthread_mutex_unlock(&p->mu);
        snprintf(err, errlen, "sample %" PRIu64 " of the epoch's plan was "
                 "let go and cannot be made again", i);
        return -1;
    }
    size_t k = 0;
    while (k < p->nrefill && p->refill[k] != c)
        k++;
    if (k == p->nrefill) {
        if (p->nrefill == p->refill_cap) {
            size_t ncap = p->refill_cap ? 2 * p->refill_cap : 16;
            uint64_t *q = realloc(p->refill, ncap * sizeof *q);
            if (!q) {
                pthread_mutex_unlock(&p->mu);
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            p->refill = q;
            p->refill_cap = ncap;
        }
        p->refill[p->nrefill++] = c;
    }
    fn = p->restage_fn;
    ud = p->restage_ud;
    plan_link_waiter(p, w);
    pthread_mutex_unlock(&p->mu);
    fn(ud);
    return 1;
}

void plan_mark_link(sio_plan *p, plan_mark *m, uint64_t i)
{
    atomic_init(&m->chunk, i >> PLAN_CHUNK_BITS);
    atomic_init(&m->at, i == UINT64_MAX
                            ? i
                            : i & ~((UINT64_C(1) << PLAN_MARK_AT_BITS) - 1));
    /* (a staged plan's marks also say which items no reader may read
     * any more: stage.c thins staged shards below them) */
    if (!plan_windowed(p) && !p->stage)
        return;
    pthread_mutex_lock(&p->mu);
    m->prev = NULL;
    m->next = p->marks;
    if (p->marks)
        p->marks->prev = m;
    p->marks = m;
    m->linked = 1;
    pthread_mutex_unlock(&p->mu);
}

void plan_mark_unlink(sio_plan *p, plan_mark *m)
{
    if (!m->linked)
        return;
    pthread_mutex_lock(&p->mu);
    if (m->prev)
        m->prev->next = m->next;
    else
        p->marks = m->next;
    if (m->next)
        m->next->prev = m->prev;
    m->linked = 0;
    pthread_mutex_unlock(&p->mu);
}

/* Chunk c made again from the checkpoint before it (a planner thread). */
static sio_code refill_chunk(sio_plan *p, uint64_t c, sio_error *err)
{
    plan_grow *g = p->g;
    uint64_t base = c << PLAN_CHUNK_BITS, n = sio_plan_count(p);
    if (base >= n)
        return SIO_OK;
    uint64_t k = n - base < PLAN_CHUNK ? n - base : PLAN_CHUNK;
    /* A chunk the order passed over in part (far ahead of every reader)
     * is made once the order is past its end: its waiters are woken by
     * the steps meanwhile, and ask again. */
    if (k < PLAN_CHUNK && !sio_plan_complete(p))
        return SIO_OK;
    sio_plan_item *buf = malloc(PLAN_CHUNK * sizeof *buf);
    if (!buf)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    sio_order *o = NULL;
    size_t got = 0;
    uint64_t from = 0;
    pthread_mutex_lock(&g->ck_mu);
    const sio_order_ckpt *ck = NULL;
    for (size_t i = 0; i < g->nck; i++)
        if (sio_order_ckpt_pos(g->ck[i]) <= base)
            ck = g->ck[i];
    sio_code rc = ck ? sio_order_open_ckpt(g->io, g->list, &g->cfg, ck, &o,
                                           err)
                     : sio_seterr(err, SIO_ERR_CHANGED, "no checkpoint "
                                  "before sample %" PRIu64, base);
    if (rc == SIO_OK)
        sio_order_set_entries(o, grow_entry, p);
    if (rc == SIO_OK) {
        from = sio_order_ckpt_pos(ck);
        fill_ctx fc = {.p = p, .base = from, .max = g->max,
                       .views = g->views, .ents = g->ents, .total = g->total,
                       .err = err, .dst = buf, .dst_base = base, .dst_n = k};
        rc = sio_order_next(o, (size_t)(base + k - from), fill_item, &fc,
                            &got, err);
    }
    pthread_mutex_unlock(&g->ck_mu);
    sio_order_close(o);
    if (rc == SIO_OK && got != base + k - from)
        rc = sio_seterr(err, SIO_ERR_CHANGED, "the order ended before "
                        "sample %" PRIu64 " when it was made again",
                        base + k);
    if (rc) {
        free(buf);
        return rc;
    }
    pthread_rwlock_wrlock(&p->items_lk);
    sio_plan_item **ref = chunk_ref_make(p, c);
    if (ref && !*ref) {
        *ref = buf;
        buf = NULL;
        atomic_fetch_add(&p->held, 1);
        atomic_fetch_add(&p->item_bytes, PLAN_CHUNK * sizeof(sio_plan_item));
        if (c < p->lo)
            p->lo = c;
    }
    pthread_rwlock_unlock(&p->items_lk);
    free(buf);
    atomic_fetch_add(&p->refilled, 1);
    return SIO_OK;
}

void plan_refill_run(sio_plan *p)
{
    if (!plan_windowed(p) || !p->g)
        return;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (!p->nrefill) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        uint64_t c = p->refill[--p->nrefill];
        pthread_mutex_unlock(&p->mu);
        sio_error err = {SIO_OK, ""};
        if (refill_chunk(p, c, &err) != SIO_OK) {
            /* Its readers fail with the reason and resume elsewhere. */
            grow_fail(p, err.msg);
            break;
        }
        pthread_mutex_lock(&p->mu);
        plan_wake_all(p);
        pthread_mutex_unlock(&p->mu);
    }
    window_trim(p);
}

void sio_plan_window_stats(sio_plan *p, sio_plan_window *out)
{
    memset(out, 0, sizeof *out);
    out->windowed = plan_windowed(p);
    out->keep = p->keep;
    out->held_items = atomic_load(&p->held) * PLAN_CHUNK;
    out->released_chunks = atomic_load(&p->released);
    out->refilled_chunks = atomic_load(&p->refilled);
    if (p->g) {
        pthread_mutex_lock(&p->g->ck_mu);
        out->checkpoints = p->g->nck;
        out->checkpoint_every = p->g->ck_every;
        pthread_mutex_unlock(&p->g->ck_mu);
        out->checkpoint_bytes = atomic_load(&p->g->ck_bytes);
    }
}

/* A URL whose name says it is compressed or a zip (a remote shard's
 * first bytes are not asked for before it is read). */
static int name_ends(const char *url, const char *const *ext, size_t n_ext)
{
    size_t n = strlen(url);
    const char *q = strpbrk(url, "?#");
    if (q)
        n = (size_t)(q - url);
    for (size_t i = 0; i < n_ext; i++) {
        size_t k = strlen(ext[i]);
        if (n >= k && strncasecmp(url + n - k, ext[i], k) == 0)
            return 1;
    }
    return 0;
}

static int zip_name(const char *url)
{
    static const char *const ext[] = {".zip"};
    return name_ends(url, ext, 1);
}

static int compressed_name(const char *url)
{
    static const char *const ext[] = {".gz", ".tgz", ".zst", ".zstd", ".xz",
                                      ".bz2", ".zip"};
    return name_ends(url, ext, sizeof ext / sizeof ext[0]);
}

/* The index key of zip shard url as the tar of its samples: the URL and
 * a suffix no URL has, so that the zip reader's index (its positions are
 * libarchive's) and this one never mix. malloc'd; NULL: no memory. */
#define ZIP_TAR_KEY "\x1ftar-of-samples"
static char *zip_tar_key(const char *url)
{
    size_t n = strlen(url);
    char *key = malloc(n + sizeof ZIP_TAR_KEY);
    if (key) {
        memcpy(key, url, n);
        memcpy(key + n, ZIP_TAR_KEY, sizeof ZIP_TAR_KEY);
    }
    return key;
}

/* Was url staged as a zip (the tar of its samples indexed, in memory or
 * in state_dir)? Its complete index says "stream-only" alone, as a
 * compressed shard's does. */
static int zip_tar_known(sio_index *x, const char *url)
{
    char *key = zip_tar_key(url);
    int known = key && sio_index_known(x, key);
    free(key);
    return known;
}

/* What the first bytes of a shard (got of them) say it is: 2 a zip, 1
 * compressed, 0 a tar (or what libarchive decides). */
static int bytes_kind(const unsigned char *head, size_t got)
{
    if (got >= 4 && head[0] == 'P' && head[1] == 'K' &&
        ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6)))
        return 2;
    return sio_tarp_compressed(head, got) ? 1 : 0;
}

/* bytes_kind of the file fd; 1 when it cannot be read (not planned: the
 * feed reports it). */
static int fd_kind(int fd)
{
    unsigned char head[512];
    ssize_t got = pread(fd, head, sizeof head, 0);
    return got < 0 ? 1 : bytes_kind(head, (size_t)got);
}

/* What a local shard starts with: 0 a tar (or anything else read as
 * one), 1 a compressed stream, 2 a zip; -1 (err) when it cannot be
 * opened. One read of 512 bytes. */
static int head_kind(sio_io *io, const sio_epoch_config *cfg,
                     const char *url, sio_error *err)
{
    int fd = -1;
    if (sio_io_open_fd_probe(io, cfg->cache, url, &fd, err) != SIO_OK)
        return -1;
    int kind = fd_kind(fd);
    close(fd);
    return kind;
}

/* Shard i's size before it is fetched: listed, else the size its
 * complete index describes, else what a HEAD told the job's shard cache
 * (a shard of a brace pattern, read by an earlier epoch); UINT64_MAX when
 * none tells. */
static uint64_t known_size(const sio_shardlist *list,
                           const sio_epoch_config *cfg, size_t i)
{
    uint64_t sz = sio_shardlist_size(list, i);
    const char *url = sio_shardlist_url(list, i);
    sio_index_entry *e;
    sio_index_info info;
    if (sz != UINT64_MAX)
        return sz;
    if (cfg->index && (e = sio_index_peek(cfg->index, url))) {
        sio_index_get_info(e, &info);
        if (info.complete && !info.stream_only && info.size &&
            info.size != UINT64_MAX)
            return info.size;
    }
    sz = sio_cache_user_known_size(cfg->cache, url);
    return sz ? sz : UINT64_MAX;
}

/* Can the epoch grow a plan from its shards as they are indexed? Every
 * shard must be readable in place (a local file, a complete cache entry)
 * or, from an object store, be staged by the step that indexes it: into
 * the job's shard cache (its size listed), or in memory (*stage: with
 * stage_bytes). A compressed shard (tar.gz, tar.zst...) is staged in
 * memory decompressed, with stage_bytes; a zip is never planned. Shards
 * whose index is complete are taken as they are. kinds[i] gets shard i's
 * STAGE_* kind. */
static sio_code growable(sio_io *io, const sio_shardlist *list,
                         const sio_epoch_config *cfg, int *stage,
                         int *indexed, uint8_t *kinds, sio_error *err)
{
    size_t total = sio_shardlist_count(list);
    size_t first = cfg->range_count ? cfg->range_first : 0;
    size_t count = cfg->range_count ? cfg->range_count : total;
    uint64_t to_fill = 0;
    int dec = cfg->stage_bytes > 0; /* compressed shards staged */
    int all_indexed = 1;
    if (first > total || count > total - first)
        return sio_seterr(err, SIO_ERR_INVALID, "shard range out of list");
    /* Under on_error=skip a failed read is a decision every reader
     * follows (the journal); under on_error=fail the plan ends where the
     * read fails the epoch (grow_stop). */
    if (cfg->on_error == SIO_ON_ERROR_SKIP && !cfg->journal)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "an epoch under on_error=skip without a journal "
                          "is streamed");
    for (size_t i = first; i < first + count; i++) {
        const char *url = sio_shardlist_url(list, i);
        int vshard = virtual_shard(url);
        int object = sio_cache_covers(url) || vshard;
        int zipn = zip_name(url), cname = compressed_name(url) && !zipn;
        sio_index_entry *e = sio_index_peek(cfg->index, url);
        sio_index_info info = {0};
        if (e)
            sio_index_get_info(e, &info);
        /* Compressed (1) or a zip (2): as its complete index says, else
         * as its name says, else (a local file) as its first bytes say;
         * a local shard whose index is stream-only is asked too (a zip
         * named .tar). */
        int kind = (e && info.complete) ? (info.stream_only ? 1 : 0)
                   : zipn               ? 2
                   : cname              ? 1
                                        : 0;
        if (kind == 1 && (zipn || (!cname && zip_tar_known(cfg->index, url))))
            kind = 2;
        /* (a zip: the tar of its samples is what is indexed) */
        if (all_indexed && !(kind != 2 && e && info.complete) &&
            !sio_index_known(cfg->index, url) &&
            !(kind == 2 && zip_tar_known(cfg->index, url)))
            all_indexed = 0;
        int local = !object && sio_io_fd_capable(io, cfg->cache, url);
        if (local && ((kind == 0 && !(e && info.complete)) ||
                      (kind == 1 && info.stream_only))) {
            /* (one that cannot be opened now, gone since the listing: a
             * plain tar read in place, whose read fails where the order
             * opens it, journaled or failing the epoch as the feed's) */
            kind = head_kind(io, cfg, url, err);
            if (kind < 0) {
                kind = 0;
                if (err)
                    *err = (sio_error){SIO_OK, ""};
            }
        }
        if (kind == 1 || kind == 2) {
            /* Compressed: staged in memory decompressed; a zip: staged in
             * memory as the tar of its samples (the zip reader's own
             * group builder writes it). Read from there. */
            if (!dec)
                return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                                  "shard %zu is %s and there is no staging "
                                  "(--stage-bytes 0) to hold it %s", i,
                                  kind == 2 ? "a zip" : "compressed",
                                  kind == 2 ? "as a tar" : "decompressed");
            if (!object && !local)
                return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                                  "shard %zu cannot be read", i);
            kinds[i] = kind == 2 ? STAGE_ZIP : STAGE_DECOMPRESS;
            *stage = 1;
            continue;
        }
        if (object) {
            /* An object: staged in the job's shard cache where the
             * listing (or the index an earlier epoch made) says how much
             * it takes and the cache has room for it when its step comes,
             * else in memory (with --stage-bytes), while the epoch's
             * readers need it (stage.c). With a cache, a shard whose size
             * nothing told yet (the first pass over a brace pattern over
             * http) has it asked of the store by its step (a HEAD, as the
             * feed's read through the cache would); without staging in
             * memory to fall back on, it keeps the feed. A complete entry
             * is not opened here (a reader holding it would keep the
             * cache from evicting it meanwhile). */
            uint64_t sz = known_size(list, cfg, i);
            kinds[i] = STAGE_MEMORY;
            /* A virtual shard: in memory only. */
            const sio_cache_user *cache = vshard ? NULL : cfg->cache;
            if (cache && sio_io_fd_capable(io, cfg->cache, url))
                continue;
            if (cache && sz == UINT64_MAX && !cfg->stage_bytes)
                return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                                  "shard %zu's size is not listed and "
                                  "there is no staging (--stage-bytes 0): "
                                  "its first pass is the feed's", i);
            if (!cache && !cfg->stage_bytes)
                return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                                  "shard %zu is not a local file, there is "
                                  "no shard cache and no staging "
                                  "(--stage-bytes 0)", i);
            /* One the budget cannot hold at all: a shard of a
             * single-source epoch (a plain tar, an object set's virtual
             * tar) is fetched only so far ahead of where the order reads
             * it and thinned behind its readers (stage.c STAGE_AHEAD), so
             * it is staged whatever its size; a mixed epoch's, the feed
             * from the start (not a plan that stops there and hands its
             * streams over). */
            if (!cache && sz != UINT64_MAX && sz > cfg->stage_bytes &&
                cfg->nmix)
                return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                                  "shard %zu (%" PRIu64 " bytes) is larger "
                                  "than --stage-bytes", i, sz);
            if (cache)
                to_fill = sz > UINT64_MAX - to_fill ? UINT64_MAX
                                                    : to_fill + sz;
            *stage = 1;
            continue;
        }
        if (!local)
            return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                              "shard %zu cannot be read in place", i);
        /* A local tar (what it starts with was asked above when it is not
         * indexed yet: a gzip named .tar must not stop the plan midway;
         * one libarchive reads in another format stops the plan at that
         * shard, and the feed goes on from there). */
    }
    /* Without staging in memory, the cache must have room for every
     * shard to fetch now. */
    int room = !to_fill || to_fill <= sio_cache_user_room(cfg->cache);
    if (!room && !cfg->stage_bytes)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "the shards to fetch (%" PRIu64 " bytes) do not "
                          "fit in the shard cache's free room and there is "
                          "no staging (--stage-bytes 0)", to_fill);
    *indexed = all_indexed;
    return SIO_OK;
}

static uint64_t shard_ready(void *ud, uint32_t s, uint64_t at);
static int plan_defers(sio_plan *p);
static int grow_stop_at(void *ud, uint32_t s, uint64_t *at, sio_code *rc,
                        char *msg, size_t msglen);

typedef struct {
    uint64_t prio, size;
    uint32_t s;
} cache_cand;

static int cmp_cand(const void *a, const void *b)
{
    const cache_cand *x = a, *y = b;
    return x->prio > y->prio ? -1 : x->prio < y->prio ? 1 : 0;
}

/* Which of the epoch's objects to fill into the shard cache when it has
 * no room for all of them (and staging in memory holds the others): the
 * ones its stable-subset policy keeps, the highest sio_cache_priority
 * first, within its room now. Filled in the order's order instead, the
 * first pass left whichever came first in the cache, and the next epochs
 * swapped them for the ones the policy keeps, shard by shard (whole
 * fetches again), by an amount that depended on the machine's load (an
 * entry in use is not evicted). g->uncached stays NULL when all fit or
 * nothing is to be filled; SIO_ERR_NOMEM. */
static sio_code cache_subset(sio_plan *p, plan_grow *g)
{
    const sio_epoch_config *cfg = &g->cfg;
    if (!cfg->cache || !p->stage || !p->stage->budget)
        return SIO_OK;
    size_t first = cfg->range_count ? cfg->range_first : 0;
    size_t count = cfg->range_count ? cfg->range_count : g->total;
    cache_cand *c = malloc((count ? count : 1) * sizeof *c);
    if (!c)
        return SIO_ERR_NOMEM;
    size_t n = 0;
    uint64_t want = 0;
    for (size_t i = first; i < first + count; i++) {
        const char *url = sio_shardlist_url(g->list, i);
        uint64_t sz = known_size(g->list, cfg, i);
        if (p->stage->sh[i].kind != STAGE_MEMORY || sz == UINT64_MAX ||
            virtual_shard(url) || sio_io_fd_capable(g->io, cfg->cache, url))
            continue;
        c[n++] = (cache_cand){sio_cache_priority(url), sz, (uint32_t)i};
        want = sz > UINT64_MAX - want ? UINT64_MAX : want + sz;
    }
    uint64_t room = sio_cache_user_room(cfg->cache);
    if (want <= room) {
        free(c);
        return SIO_OK;
    }
    g->uncached = calloc(g->total ? g->total : 1, 1);
    if (!g->uncached) {
        free(c);
        return SIO_ERR_NOMEM;
    }
    qsort(c, n, sizeof *c, cmp_cand);
    for (size_t k = 0; k < n; k++) {
        if (c[k].size <= room)
            room -= c[k].size;
        else
            g->uncached[c[k].s] = 1;
    }
    free(c);
    return SIO_OK;
}

sio_code sio_plan_start(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, uint64_t keep,
                        sio_plan **out, sio_error *err)
{
    *out = NULL;
    sio_code rc = epoch_plannable(cfg, err);
    if (rc)
        return rc;
    int stage = 0;
    size_t total = sio_shardlist_count(list);
    uint8_t *kinds = calloc(total ? total : 1, 1);
    if (!kinds)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    int indexed = 0;
    rc = growable(io, list, cfg, &stage, &indexed, kinds, err);
    if (rc) {
        free(kinds);
        return rc;
    }
    sio_plan *p = plan_new(total);
    plan_grow *g = calloc(1, sizeof *g);
    if (!p || !g || (stage && !(p->stage = stage_new(total)))) {
        free(kinds);
        free(g);
        plan_free(p);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    if (stage) {
        /* Every object not read in place is staged, in the cache or in
         * memory (prepare_shard decides, shard by shard), and every
         * compressed shard in memory, decompressed; the graces come with
         * sio_plan_set_stage (none until then). */
        p->stage->budget = cfg->stage_bytes; /* 0: none in memory */
        p->stage->slots =
            (uint64_t)cfg->interleave * (cfg->nmix ? cfg->nmix : 1);
        p->stage->open_shards =
            (uint64_t)cfg->interleave * (cfg->nmix ? cfg->nmix : 1) +
            (cfg->buffer_samples < total ? cfg->buffer_samples : total);
        /* A mixed epoch draws a source's shards again (repeats, draws
         * with replacement, a source's next pass): items of a shard
         * decided after others were passed read the same bytes, so its
         * staged shards are never thinned. */
        p->stage->thin_on = cfg->nmix == 0;
        p->stage->retries = cfg->on_error == SIO_ON_ERROR_SKIP
                                ? STAGE_RETRIES
                                : 0;
        for (size_t i = 0; i < total; i++)
            p->stage->sh[i].kind = kinds[i];
    }
    free(kinds);
    pthread_mutex_init(&g->ck_mu, NULL);
    p->growing = 1;
    p->stage_seeks = stage && indexed;
    p->g = g;
    g->owner = p;
    if (keep)
        p->keep = keep < 2 * PLAN_CHUNK ? 2 * PLAN_CHUNK : keep;
    g->io = io;
    g->list = list;
    g->cfg = *cfg;
    g->total = total;
    g->t0 = mono_ns();
    g->max = SIO_PLAN_ITEMS_MAX;
    /* The slots (of every mixed source's pass) and the next few. */
    g->ahead_cap = (size_t)cfg->interleave * (cfg->nmix ? cfg->nmix : 1) +
                   GROW_STEP_SHARDS;
    {
        sio_io_stats ist;
        sio_io_get_stats(io, &ist);
        g->throttles = ist.throttles;
    }
    g->ents = calloc(total ? total : 1, sizeof *g->ents);
    g->views = calloc(total ? total : 1, sizeof *g->views);
    g->ahead = calloc(g->ahead_cap, sizeof *g->ahead);
    g->seen = calloc(total ? total : 1, 1);
    g->gready = calloc(total ? total : 1, sizeof *g->gready);
    /* Ahead of the furthest reader: the buffer's worth and then some, so
     * that readers never wait for the builder while it keeps up. */
    g->ahead_bound = 4ull * cfg->buffer_samples;
    if (g->ahead_bound < 65536)
        g->ahead_bound = 65536;
    atomic_init(&p->g_ahead_low, g->ahead_bound / 2);
    /* Staged in memory: the builder's lead is held to half the budget in
     * bytes too (what it decides past the readers is staged). */
    if (p->stage && cfg->stage_bytes) {
        g->lead_ring = calloc(LEAD_RING, sizeof *g->lead_ring);
        atomic_init(&g->lead_made, 0);
        g->lead_max = cfg->stage_bytes / 2;
    }
    if (!g->ents || !g->views || !g->ahead || !g->seen || !g->gready ||
        (p->stage && cfg->stage_bytes && !g->lead_ring)) {
        plan_free(p);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < total; i++)
        atomic_init(&g->gready[i], UINT64_MAX);
    if (cache_subset(p, g) != SIO_OK) {
        plan_free(p);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    rc = sio_order_open(io, list, cfg, 0, &g->o, err);
    if (rc) {
        plan_free(p);
        return rc;
    }
    if (plan_windowed(p)) {
        g->ck_every = p->keep < PLAN_CKPT_EVERY
                          ? p->keep & ~(PLAN_CHUNK - 1)
                          : PLAN_CKPT_EVERY;
        g->ck_next = 0;
        if (ck_add(p) != SIO_OK) {
            plan_free(p);
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        }
    }
    if (cfg->nmix && cfg->mix &&
        (g->mix = malloc(cfg->nmix * sizeof *g->mix)) != NULL) {
        memcpy(g->mix, cfg->mix, cfg->nmix * sizeof *g->mix);
        for (uint32_t m = 0; m < cfg->nmix; m++)
            g->mix_total = g->mix[m].quota > UINT64_MAX - g->mix_total
                               ? UINT64_MAX
                               : g->mix_total + g->mix[m].quota;
    }
    p->stage_defers = plan_defers(p);
    sio_order_set_gate(g->o, shard_ready, g);
    sio_order_set_entries(g->o, grow_entry, p);
    if (cfg->on_error == SIO_ON_ERROR_FAIL)
        sio_order_set_stop(g->o, grow_stop_at, g);
    *out = p;
    return SIO_OK;
}

/* The order takes a shard's groups only once its step made it ready
 * (another reader may be indexing it meanwhile), and those of a shard
 * still arriving as far as its bytes came. */
static uint64_t shard_ready(void *ud, uint32_t s, uint64_t at)
{
    plan_grow *g = ud;
    if (s >= g->total || !g->ents[s])
        return 0;
    /* (a shard being staged is fetched only so far ahead of where the
     * order reads it while the plan stages more than its budget) */
    if (stage_kind(g->owner, s))
        stage_taken(g->owner, s, at);
    return atomic_load(&g->gready[s]);
}

static int transient_read(sio_code rc)
{
    return rc == SIO_ERR_IO || rc == SIO_ERR_RETRY;
}

/* Where shard s ends short, when it does: the epoch's journal's cut
 * (on_error=skip), or where its read failed (on_error=fail). */
static int shard_cut(const plan_grow *g, uint32_t s, uint64_t *cut)
{
    if (sio_journal_cut(g->cfg.journal, s, cut))
        return 1;
    for (const grow_stop *x = g->stops; x; x = x->next)
        if (x->s == s) {
            *cut = x->at;
            return 1;
        }
    return 0;
}

/* The order's stop hook (sio_order_set_stop). */
static int grow_stop_at(void *ud, uint32_t s, uint64_t *at, sio_code *rc,
                        char *msg, size_t msglen)
{
    const plan_grow *g = ud;
    for (const grow_stop *x = g->stops; x; x = x->next)
        if (x->s == s) {
            *at = x->at;
            *rc = x->rc;
            snprintf(msg, msglen, "%s", x->msg);
            return 1;
        }
    return 0;
}

/* Shard s's read failed with rc after reached groups: the decision every
 * reader of the epoch follows, journaled as the feed journals it; under
 * on_error=fail, the place where the order fails the epoch. */
static sio_code shard_ended(plan_grow *g, uint32_t s, const char *url,
                            sio_code rc, uint64_t reached, const char *why,
                            sio_error *err)
{
    char shown[512];
    sio_url_redact(url, shown, sizeof shown);
    if (g->cfg.on_error == SIO_ON_ERROR_FAIL) {
        uint64_t have;
        if (shard_cut(g, s, &have))
            return SIO_OK;
        grow_stop *x = calloc(1, sizeof *x);
        if (!x)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        x->s = s;
        x->at = reached;
        x->rc = rc;
        snprintf(x->msg, sizeof x->msg, "%s", why);
        x->next = g->stops;
        g->stops = x;
        SIO_LOG(&g->cfg.log, SIO_LOG_WARN,
                "event=shard_failed url=%s code=%s group=%" PRIu64
                " reason=\"%s\"", shown, sio_strerror(rc), reached, why);
        return SIO_OK;
    }
    uint64_t d = sio_journal_record(g->cfg.journal, s, reached, rc, why);
    if (d != reached)
        return sio_seterr(err, SIO_ERR_CANCELED,
                          "shard %" PRIu32 " ended at sample group "
                          "%" PRIu64 " where the epoch's journal says "
                          "%" PRIu64, s, reached, d);
    SIO_LOG(&g->cfg.log, SIO_LOG_WARN,
            "event=shard_skipped url=%s code=%s reason=\"%s\"", shown,
            sio_strerror(rc), why);
    return SIO_OK;
}

static uint64_t stage_size(sio_plan *p, uint32_t s);

/* The index entry of zip shard s as the tar of its samples (its own key,
 * zip_tar_key). */
static sio_index_entry *zip_tar_entry(plan_grow *g, uint32_t s)
{
    char *key = zip_tar_key(sio_shardlist_url(g->list, s));
    if (!key)
        return NULL;
    sio_index_entry *e = sio_index_get(g->cfg.index, g->io, key, UINT64_MAX);
    free(key);
    return e;
}

/* The order's entries (sio_order_set_entries): a zip's is its tar's. */
static sio_index_entry *grow_entry(void *ud, uint32_t s)
{
    sio_plan *p = ud;
    if (!p->stage || s >= p->stage->total ||
        p->stage->sh[s].kind != STAGE_ZIP)
        return NULL;
    return p->g->ents[s];
}

/* Shard s of a plan that stages: fetched into memory by a job on a
 * thread of its own (stage.c) and indexed from there as its bytes
 * arrive; the order takes its groups as they come (the gate), and the
 * step takes the job's end (staged_end). */
static sio_code prepare_staged(sio_plan *p, uint32_t s, sio_index_entry *e,
                               sio_error *err)
{
    plan_grow *g = p->g;
    uint64_t cut = UINT64_MAX;
    if (shard_cut(g, s, &cut) && cut == 0) {
        g->ents[s] = e; /* journaled with no group: nothing read */
        return SIO_OK;
    }
    uint64_t sz = stage_size(p, s);
    sio_code rc = stage_job_start(p, s, e, g->io,
                                  sio_shardlist_url(g->list, s),
                                  &g->cfg.limits, &g->cfg.log,
                                  sz == UINT64_MAX ? 0 : sz, &g->gready[s],
                                  err);
    if (rc == SIO_OK)
        g->ents[s] = e;
    return rc;
}

/* Shard s, staged as it is and found compressed or a zip by its index
 * pass, or staged decompressed and found a zip (no group of it went to
 * the order), staged again as kind says (2: a zip; 0: as its first
 * staged bytes say): decompressed, or as the tar of its samples. */
static sio_code restage_as(sio_plan *p, uint32_t s, sio_index_entry *e,
                           int kind, sio_error *err)
{
    plan_stage *st = p->stage;
    if (!kind) {
        pthread_mutex_lock(&p->mu);
        int fd = st->sh[s].fd >= 0 ? dup(st->sh[s].fd) : -1;
        pthread_mutex_unlock(&p->mu);
        kind = fd >= 0 ? fd_kind(fd) : 0;
        if (fd >= 0)
            close(fd);
    }
    int now = kind == 2 ? STAGE_ZIP : STAGE_DECOMPRESS;
    if ((kind != 1 && kind != 2) || st->sh[s].kind == now)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "shard %" PRIu32 " is compressed or a zip", s);
    SIO_LOG(&p->g->cfg.log, SIO_LOG_INFO,
            "event=shard_restaged shard=%" PRIu32 " as=%s", s,
            kind == 2 ? "zip" : "compressed");
    pthread_mutex_lock(&p->mu);
    st->sh[s].kind = (uint8_t)now;
    pthread_mutex_unlock(&p->mu);
    if (kind == 2) {
        e = zip_tar_entry(p->g, s);
        if (!e)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    p->g->ents[s] = NULL;
    return prepare_staged(p, s, e, err);
}

/* A staged shard's job ended: where the shard ends (journaled when its
 * fetch or read failed, as the feed journals it), and how many of its
 * items readers read, so that its bytes go once they passed them. */
static sio_code staged_end(sio_plan *p, const stage_result *r,
                           sio_error *err)
{
    plan_grow *g = p->g;
    uint32_t s = r->s;
    sio_index_entry *e = r->e;
    const char *url = sio_shardlist_url(g->list, s);
    int dec = p->stage->sh[s].kind == STAGE_DECOMPRESS;
    sio_index_info info;
    uint64_t cut = UINT64_MAX;
    int has_cut = shard_cut(g, s, &cut);
    sio_code rc = r->rc;
    /* A zip staged as a compressed tar (its index said "stream-only",
     * its name nothing): nothing of it was staged; as a zip now. */
    if (r->foreign == 2 && dec && p->stage->budget && !virtual_shard(url))
        return restage_as(p, s, e, 2, err);
    /* A failure that may pass: under on_error=skip the job retried it as
     * the feed retries a read (stage.c); then, and at once under
     * on_error=fail (as the feed gives up at once), it is the shard's
     * failure: journaled below as the feed journals it, or where the
     * epoch fails. */
    if (rc == SIO_ERR_NOMEM || rc == SIO_ERR_LIMIT || rc == SIO_ERR_CANCELED)
        return sio_seterr(err, rc, "shard %" PRIu32 ": %s", s, r->err.msg);
    sio_index_get_info(e, &info);
    if (rc != SIO_OK && !(has_cut && info.known >= cut)) {
        sio_code jr = shard_ended(g, s, url, rc, r->reached, r->err.msg,
                                  err);
        if (jr)
            return jr;
        has_cut = shard_cut(g, s, &cut);
    } else if (rc == SIO_OK && !info.complete) {
        return sio_seterr(err, SIO_ERR_CHANGED,
                          "shard %" PRIu32 " was read to its end but its "
                          "index is not complete", s);
    }
    /* A failed read's cut or stop is known now (journaled above, or
     * before): the order may come to the place where the read ended
     * (stage.c left the gate there). */
    if (rc != SIO_OK)
        atomic_store(&g->gready[s], UINT64_MAX);
    int foreign = info.stream_only != dec || r->foreign; /* not the
                                                          stream staged */
    /* A shard staged as it is that its index pass found compressed or a
     * zip (a gzip under a .tar name): none of its groups went to the
     * order; staged again decompressed, or as the tar of its samples,
     * as its first bytes say. */
    if (foreign && info.stream_only && rc == SIO_OK && p->stage->budget &&
        (p->stage->sh[s].kind == STAGE_MEMORY ||
         p->stage->sh[s].kind == STAGE_DECOMPRESS) &&
        !virtual_shard(url))
        return restage_as(p, s, e, 0, err);
    if (foreign || (!info.complete && !(has_cut && info.known >= cut)))
        return sio_seterr(err, foreign ? SIO_ERR_UNSUPPORTED
                                       : SIO_ERR_CHANGED,
                          "shard %" PRIu32 " %s", s,
                          foreign ? "is compressed or a zip"
                                  : "is indexed short and has no end");
    uint64_t good = 0, bad = 0;
    sio_index_tally(e, has_cut ? cut : UINT64_MAX, &good, &bad);
    stage_end(p, s, good);
    if (info.complete && !sio_index_view_open(e, &g->views[s]))
        g->views[s].open = 0;
    return SIO_OK;
}

/* Make shard s ready for the order: indexed as far as it goes, its end
 * journaled when its read failed, its file's identity taken. SIO_OK, or
 * a code that stops the plan (err says why). */
static sio_code prepare_shard(sio_plan *p, uint32_t s, sio_error *err)
{
    plan_grow *g = p->g;
    const char *url = sio_shardlist_url(g->list, s);
    sio_index_entry *e = sio_index_get(g->cfg.index, g->io, url,
                                       sio_shardlist_size(g->list, s));
    sio_index_info info;
    if (!e)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    sio_index_refresh(e);
    /* A compressed shard: in memory, decompressed; a zip: in memory, as
     * the tar of its samples, indexed apart from the zip's own index
     * (whose positions are the zip reader's). */
    if (p->stage && p->stage->sh[s].kind == STAGE_DECOMPRESS)
        return prepare_staged(p, s, e, err);
    if (p->stage && p->stage->sh[s].kind == STAGE_ZIP) {
        sio_index_entry *ze = zip_tar_entry(g, s);
        if (!ze)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        return prepare_staged(p, s, ze, err);
    }
    /* An object not in place: filled into the shard cache when it has
     * room for it now (by the listed size: a plan does not evict shards
     * of its own epoch, so the cached subset stays put) and is one the
     * cache keeps (cache_subset), else staged in memory; one the cache
     * did not keep after all is staged in memory too. */
    int try_cache = 0;
    /* A remote shard not in the cache yet is read through it (indexed
     * already or not): the read fills its entry, where readers find it. */
    int fill = !sio_io_fd_capable(g->io, g->cfg.cache, url);
    if (stage_kind(p, s)) {
        uint64_t listed = known_size(g->list, &g->cfg, s);
        const sio_backend_ops *ops;
        void *ctx;
        int stale = 0;
        /* No size known yet (a brace pattern): asked of the store, and
         * kept for the read through the cache that fills the entry. A
         * cache entry of another version of the object means the index
         * is of that version too: read again from the start. */
        if (fill && g->cfg.cache && listed == UINT64_MAX && !virtual_shard(url) &&
            sio_io_backend(g->io, url, &ops, &ctx, NULL) == SIO_OK)
            listed = sio_cache_user_head_size(g->cfg.cache, ops, ctx, url,
                                              &stale);
        if (stale)
            sio_index_object_changed(e, listed);
        if (!fill)
            p->stage->sh[s].kind = 0;
        else if (virtual_shard(url) && p->stage->budget)
            return prepare_staged(p, s, e, err);
        else if (g->cfg.cache && listed != UINT64_MAX && !virtual_shard(url) &&
                 !(g->uncached && g->uncached[s]) &&
                 listed <= sio_cache_user_room(g->cfg.cache))
            try_cache = 1;
        else if (!p->stage->budget)
            return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                              "shard %" PRIu32 " does not fit in the shard "
                              "cache's free room and there is no staging "
                              "(--stage-bytes 0): the epoch goes on from "
                              "its feed", s);
        else
            return prepare_staged(p, s, e, err);
    }
    sio_index_get_info(e, &info);
    uint64_t cut = UINT64_MAX;
    int has_cut = shard_cut(g, s, &cut);
    int read = fill || (!info.complete && !(has_cut && info.known >= cut));
    /* Groups relied on without a read from the start (a loaded index):
     * the checks that wait for such a use (a read checks every group). */
    if (!read) {
        sio_index_vet(e, g->io, g->cfg.cache, &g->cfg.limits);
        sio_index_get_info(e, &info);
        read = !info.complete && !(has_cut && info.known >= cut);
    }
    if (read) {
        sio_code rc = SIO_OK;
        uint64_t reached = 0;
        sio_error e2 = {SIO_OK, ""};
        for (unsigned tries = 0; tries < GROW_READ_TRIES; tries++) {
            e2.msg[0] = '\0';
            rc = sio_index_build_to(g->io, url, s, &g->cfg.limits, e,
                                    fill ? g->cfg.cache : NULL, &g->cfg.log,
                                    &reached, &e2);
            if (!transient_read(rc))
                break;
        }
        sio_index_get_info(e, &info);
        if (rc == SIO_ERR_NOMEM || rc == SIO_ERR_CANCELED)
            return sio_seterr(err, rc, "shard %" PRIu32 ": %s", s, e2.msg);
        /* A failure that may pass (the store's own retries spent) on a
         * remote shard read into the shard cache: under on_error=skip it
         * is staged in memory instead, by a job that retries as the feed
         * retries a read (this is a planner thread: it does not wait
         * minutes); under on_error=fail it is the shard's failure, where
         * the feed fails. Else (no staging in memory) the feed retries
         * it: the plan stops here and hands the epoch to it. */
        if (transient_read(rc) && fill && try_cache &&
            g->cfg.on_error == SIO_ON_ERROR_SKIP && p->stage->budget &&
            !(has_cut && cut == 0)) {
            SIO_LOG(&g->cfg.log, SIO_LOG_WARN,
                    "event=shard_retry shard=%" PRIu32 " as=memory "
                    "reason=\"%s\"", s, e2.msg);
            return prepare_staged(p, s, e, err);
        }
        if (transient_read(rc) && (g->cfg.on_error == SIO_ON_ERROR_SKIP ||
                                   !fill))
            return sio_seterr(err, rc, "shard %" PRIu32 ": %s (the feed "
                              "retries it)", s, e2.msg);
        if (rc != SIO_OK) {
            /* The decision every reader of the epoch follows: the shard
             * ends after the groups read. */
            sio_code jr = shard_ended(g, s, url, rc, reached, e2.msg, err);
            if (jr)
                return jr;
        } else if (!info.complete) {
            return sio_seterr(err, SIO_ERR_CHANGED,
                              "shard %" PRIu32 " was read to its end but "
                              "its index is not complete", s);
        }
        has_cut = shard_cut(g, s, &cut);
    }
    if (info.stream_only)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "shard %" PRIu32 " is compressed or a zip", s);
    /* Read through the cache: its fill may still write the object's last
     * bytes (the tar reader stops at the end-of-archive blocks). */
    if (fill)
        sio_cache_wait_filled(g->cfg.cache, url);
    /* Read whole and not in the cache: the cache did not take it. */
    if ((!has_cut || cut > 0) && !sio_io_fd_capable(g->io, g->cfg.cache, url)) {
        if (try_cache && p->stage->budget)
            return prepare_staged(p, s, e, err);
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "shard %" PRIu32 " was not kept by the shard cache "
                          "(no room): the epoch goes on from its feed", s);
    }
    if (!info.complete && !(has_cut && info.known >= cut))
        return sio_seterr(err, SIO_ERR_CHANGED,
                          "shard %" PRIu32 " is indexed to group %" PRIu64
                          " and has no end", s, info.known);
    /* The file the groups describe, as readers must find it. A shard that
     * is gone (its read failed and was journaled with no group) has no
     * item: no identity. */
    if (!has_cut || cut > 0) {
        sio_code rc = file_identity(g->io, &g->cfg, url, s, &info,
                                    &p->files[s], err);
        if (rc)
            return rc;
    }
    if (info.complete && !sio_index_view_open(e, &g->views[s]))
        g->views[s].open = 0;
    if (try_cache) { /* kept by the cache: read in place, held open */
        int hfd, hsfd, hcached;
        sio_code hrc;
        char hmsg[200];
        p->stage->sh[s].kind = 0;
        int pi = (!has_cut || cut > 0)
                     ? plan_fd_take(p, g->io, g->cfg.cache, url, s, &hfd,
                                    &hsfd, &hcached, &hrc, hmsg, sizeof hmsg)
                     : -1;
        if (pi >= 0) {
            uint64_t good = 0, bad = 0;
            sio_index_tally(e, has_cut ? cut : UINT64_MAX, &good, &bad);
            stage_hold(p, s, pi, good);
        }
    }
    g->ents[s] = e;
    return SIO_OK;
}

/* What staging shard s takes, as far as it is known before its fetch:
 * its listed size; not listed (or decompressed), the largest shard staged
 * so far; UINT64_MAX before any. */
static uint64_t stage_size(sio_plan *p, uint32_t s)
{
    uint64_t sz = p->stage->sh[s].kind == STAGE_DECOMPRESS ||
                          p->stage->sh[s].kind == STAGE_ZIP
                      ? UINT64_MAX
                      : known_size(p->g->list, &p->g->cfg, s);
    if (sz == UINT64_MAX) {
        pthread_mutex_lock(&p->mu);
        if (p->stage->max_shard)
            sz = p->stage->max_shard;
        pthread_mutex_unlock(&p->mu);
    }
    return sz;
}

/* An item passed over: the order decided it, nobody reads it now. */
static sio_code skip_item(void *ud, uint64_t i, const sio_order_item *it)
{
    fill_ctx *c = ud;
    (void)i;
    if (c->seen && it->shard < c->total)
        c->seen[it->shard] = 1;
    return SIO_OK;
}

/* Where the order may pass over items without writing them: below the
 * chunk of the lowest reader (a resume far into the epoch), when every
 * reader is past what the steps made. 0: nowhere. */
static uint64_t skip_end(sio_plan *p)
{
    uint64_t low = UINT64_MAX;
    int any = 0;
    pthread_mutex_lock(&p->mu);
    for (plan_mark *m = p->marks; m; m = m->next) {
        uint64_t c = atomic_load_explicit(&m->chunk, memory_order_relaxed);
        if (c < low)
            low = c;
        any = 1;
    }
    pthread_mutex_unlock(&p->mu);
    if (!any || low >= (SIO_PLAN_ITEMS_MAX >> PLAN_CHUNK_BITS))
        return 0;
    return low << PLAN_CHUNK_BITS;
}

/* Items as far as the order decides them now (*made_now of them). A
 * windowed plan runs to its next checkpoint at a time, publishes and
 * trims there, and stops once it is ahead_bound past its furthest
 * reader (the caller parks it). Far behind its lowest reader it passes
 * over items without writing them (they are made again from the
 * checkpoints if a reader comes back), whole chunks at a time; not where
 * it stages (its shards' readers are counted item by item). */
static sio_code order_run(sio_plan *p, size_t *made_now, sio_error *err)
{
    plan_grow *g = p->g;
    *made_now = 0;
    for (;;) {
        size_t got = 0;
        size_t lim = plan_windowed(p) ? (size_t)(g->ck_next - g->made) : SIZE_MAX;
        sio_order_fn fn = fill_item;
        if (plan_windowed(p) && !p->stage) {
            uint64_t end = g->made < g->skip_to ? g->skip_to : 0;
            if (!end && (g->made & (PLAN_CHUNK - 1)) == 0)
                end = skip_end(p);
            if (end > g->made) {
                fn = skip_item;
                if (end - g->made < lim)
                    lim = (size_t)(end - g->made);
            }
        }
        fill_ctx fc = {.p = p, .base = g->made, .max = g->max,
                       .views = g->views, .ents = g->ents,
                       .total = g->total, .err = err, .seen = g->seen};
        sio_code rc = sio_order_next(g->o, lim, fn, &fc, &got, err);
        g->made += got;
        *made_now += got;
        /* A chunk passed over in part is passed over whole. */
        if (fn == skip_item && (g->made & (PLAN_CHUNK - 1)) != 0)
            g->skip_to = (g->made | (PLAN_CHUNK - 1)) + 1;
        if (rc || !plan_windowed(p) || got < lim || sio_order_done(g->o))
            return rc;
        if (g->made < g->ck_next)
            continue; /* passed over to a reader's chunk, not a checkpoint */
        if (ck_add(p) != SIO_OK)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        publish(p);
        window_trim(p);
        uint64_t want = atomic_load(&p->want);
        if (lead_full(g, want))
            return SIO_OK;
    }
}

/* May the steps fetch shards ahead of those the order reads now? Once a
 * shard came whole (the store answers), and not within STAGE_QUIET_MS of
 * a throttle answer from the store (fetching ahead then only adds to the
 * requests it refuses: the order's own shards go first). */
#define STAGE_QUIET_MS 2000u
static int fetch_ahead(sio_plan *p)
{
    plan_grow *g = p->g;
    sio_io_stats st;
    uint64_t now = sio_now_ms();
    sio_io_get_stats(g->io, &st);
    if (st.throttles != g->throttles) {
        g->throttles = st.throttles;
        g->quiet_ms = now + STAGE_QUIET_MS;
    }
    pthread_mutex_lock(&p->mu);
    int came = p->stage->max_shard > 0;
    pthread_mutex_unlock(&p->mu);
    return came && now >= g->quiet_ms;
}

/* Take the ends of the jobs that ended (staged_end): SIO_OK, or the
 * first code that stops the plan (every ended job is taken all the
 * same). */
static sio_code staged_reap(sio_plan *p, sio_error *err)
{
    stage_result sr;
    sio_code rc = SIO_OK;
    while (stage_job_reap(p, &sr)) {
        sio_error e = {SIO_OK, ""};
        sio_code r = staged_end(p, &sr, &e);
        if (r != SIO_OK && rc == SIO_OK) {
            rc = r;
            *err = e;
        }
    }
    return rc;
}

/* Bytes beyond a group's payload a guessed size of its shard allows for
 * (its members' headers, the tar's end). */
#define GUESS_SLACK ((uint64_t)64 << 10)

/* May shard s be left to its readers (stage_defer) at all: staged in
 * memory (not read in place, not filled into the shard cache, not an
 * object set's virtual shard), indexed whole: a plain tar of a known
 * size, or a compressed shard or a zip (local too), whose readers have
 * it fetched again and made whole (decompressed; the tar of its samples).
 * *e: its entry (a zip's: its tar's; loaded from state_dir or a sidecar
 * when it was not in memory: a planner thread reads the file); *size:
 * the bytes a fetch again stages; *exact 0 when that is only guessed (a
 * compressed shard or zip no read staged since the server started: the
 * fetch finds it); *v: the object's validator when this server read it
 * whole (0: not known, the first fetch of its bytes takes the store's;
 * its groups are checked sample by sample as readers read them, as
 * every index loaded from a file is). */
static int shard_deferrable(sio_plan *p, uint32_t s, sio_index_entry **e,
                            sio_index_info *info, uint64_t *size,
                            uint64_t *v, int *exact, int vet)
{
    plan_grow *g = p->g;
    const char *url = sio_shardlist_url(g->list, s);
    *size = 0;
    *v = 0;
    *exact = 1;
    int kind = p->stage ? p->stage->sh[s].kind : STAGE_IN_PLACE;
    int made = kind == STAGE_DECOMPRESS || kind == STAGE_ZIP;
    if (!p->stage || !p->stage->budget ||
        !g->cfg.index || (kind != STAGE_MEMORY && !made))
        return 0;
    if (!made && ((g->cfg.cache && !(g->uncached && g->uncached[s])) ||
                  sio_io_fd_capable(g->io, g->cfg.cache, url)))
        return 0;
    *e = kind == STAGE_ZIP ? zip_tar_entry(g, s)
                           : sio_index_get(g->cfg.index, g->io, url,
                                           sio_shardlist_size(g->list, s));
    if (!*e)
        return 0;
    sio_index_get_info(*e, info);
    if (!info->complete && !vet) {
        /* A file of it in state_dir whose checks wait for a use (a
         * remote shard of a size no listing gave: a HEAD): asked when
         * the order comes to it (plan_defer), not for every shard now. */
        const char *key = kind == STAGE_ZIP ? NULL : url;
        return key ? sio_index_known(g->cfg.index, key)
                   : zip_tar_known(g->cfg.index, url);
    }
    if (!info->complete) {
        sio_index_vet(*e, g->io, g->cfg.cache, &g->cfg.limits);
        sio_index_get_info(*e, info);
    }
    if (!info->complete || info->stream_only != (kind == STAGE_DECOMPRESS))
        return 0;
    if (made) {
        /* What a read staged, or (a restart) about as much as its last
         * group's start and payload say: a reservation; the fetch again
         * is bounded by the staging budget and takes what it makes. */
        *v = sio_index_version_size(*e, size);
        if (!*size) {
            sio_index_group last;
            if (!info->known || !sio_index_group_get(*e, info->known - 1,
                                                     &last))
                return 0;
            uint64_t end = last.end != UINT64_MAX ? last.end : last.offset;
            *size = end > UINT64_MAX - last.bytes - GUESS_SLACK
                        ? UINT64_MAX
                        : end + last.bytes + GUESS_SLACK;
            *exact = 0;
        }
        /* One larger than the budget too: a reader that reaches its
         * items has them made again a window at a time, never whole
         * (stage_take), to the bytes its ranges reach. */
        return *size <= (uint64_t)INT64_MAX;
    }
    *v = sio_index_version_size(*e, size);
    if (!*v) {
        *size = info->size;
        if (!*size || *size == UINT64_MAX)
            *size = known_size(g->list, &g->cfg, s);
    }
    /* Indexed whole by a read that did not reach the object's end (the
     * epoch ended first), of a size no listing gave: asked of the store
     * when the order comes to it, as a vet asks it. */
    if ((!*size || *size == UINT64_MAX) && !vet)
        return 1;
    if (!*size || *size == UINT64_MAX)
        *size = sio_index_object_size(*e, g->io);
    return *size && *size != UINT64_MAX && *size <= (uint64_t)INT64_MAX;
}

/* Every shard the epoch stages in memory may be left to its readers
 * (p->stage_defers: a resume far in is the plan's, sio_plan_stage_far). */
static int plan_defers(sio_plan *p)
{
    plan_grow *g = p->g;
    size_t first = g->cfg.range_count ? g->cfg.range_first : 0;
    size_t count = g->cfg.range_count ? g->cfg.range_count : g->total;
    if (!p->stage_seeks || (g->cfg.nmix && !g->mix))
        return 0;
    for (size_t i = first; i < first + count && i < g->total; i++) {
        sio_index_entry *e;
        sio_index_info info;
        uint64_t size, v;
        int exact;
        if (p->stage->sh[i].kind != STAGE_IN_PLACE &&
            !sio_io_fd_capable(g->io, g->cfg.cache,
                               sio_shardlist_url(g->list, i)) &&
            !shard_deferrable(p, (uint32_t)i, &e, &info, &size, &v, &exact,
                              0))
            return 0;
    }
    return 1;
}

/* Leave shard s to its readers when every reader the staging follows is
 * so far past where the order reads now that at least half of its items
 * are behind them: its K items leave the interleave of N shards within
 * about N x K items of here. (A margin of 2 x B for the shuffle buffer
 * staged every shard within about a buffer of a resume whole, most of
 * whose items no reader wanted: 31% of the dataset fetched for the last
 * 10% of an epoch, test_seek's resume at 90%.) The order takes its groups from
 * its index at once; a reader that reaches one of its items has the byte
 * ranges of those from there fetched, or the shard when they are most of
 * it (stage_take's restage, checked against the validator). 1 when it
 * was left so (ready for the order), 0 when its step stages it. */
static int plan_defer(sio_plan *p, uint32_t s)
{
    plan_grow *g = p->g;
    sio_index_entry *e = NULL;
    sio_index_info info;
    uint64_t cut, size, v;
    int exact;
    if (!p->stage_defers ||
        !shard_deferrable(p, s, &e, &info, &size, &v, &exact, 1) ||
        shard_cut(g, s, &cut))
        return 0;
    uint64_t n = (uint64_t)g->cfg.interleave ? g->cfg.interleave : 1;
    uint64_t reach = info.known > UINT64_MAX / n ? UINT64_MAX
                                                 : n * info.known;
    /* A mixed epoch draws from a source at its quota's share of the
     * positions: its shard's items are that much further apart. */
    if (g->cfg.nmix) {
        const sio_mix_source *src = NULL;
        for (uint32_t m = 0; m < g->cfg.nmix && !src; m++)
            if (s >= g->mix[m].first && s - g->mix[m].first < g->mix[m].count)
                src = &g->mix[m];
        if (!src || !src->quota)
            return 0;
        unsigned __int128 r = (unsigned __int128)reach * g->mix_total /
                              src->quota;
        reach = r > UINT64_MAX ? UINT64_MAX : (uint64_t)r;
    }
    /* Every reader is past where at least half its items go (they come
     * through the interleave within about reach items of here): a reader
     * that reaches one has the rest of them fetched (their ranges, or the
     * shard), and the step fetches none of those before. A reader waits
     * at most a world's width past what the order made; one further on
     * came there by a resume. */
    uint64_t margin = reach / 2 + 2 * (uint64_t)stage_widest_world(p);
    /* A compressed shard or a zip is made again from the object's start
     * (whole, or a window of its items at a time when it is larger than
     * a window) for each reader that reaches one of its items after the
     * room let it go: left to its readers only when every item is behind
     * them (the interleave's reach, and twice the shuffle buffer an item
     * may wait in). */
    if (p->stage->sh[s].kind != STAGE_MEMORY) {
        uint64_t tail = 2 * (uint64_t)g->cfg.buffer_samples;
        margin = reach > UINT64_MAX - tail ? UINT64_MAX : reach + tail;
    }
    /* One larger than the budget is made again a window at a time, each
     * from the object's start (or from where the last one stopped, when
     * it starts after it; an item that waited long in the buffer comes
     * after items that follow it in the shard): left to its readers only
     * with twice that margin. Else its step makes it once from its start
     * while the order passes its items, thinned behind it: what the feed
     * read. */
    if (p->stage->sh[s].kind != STAGE_MEMORY && size > p->stage->budget)
        margin = margin > UINT64_MAX / 2 ? UINT64_MAX : 2 * margin;
    uint64_t low = stage_low_readers(p);
    if (margin >= low || g->made >= low - margin)
        return 0;
    if (!sio_index_view_open(e, &g->views[s]))
        return 0;
    if (!stage_defer(p, s, sio_shardlist_url(g->list, s), size, v, exact)) {
        sio_index_view_close(e, &g->views[s]);
        return 0;
    }
    p->files[s] = (plan_file){0, 0, (off_t)size, {0, 0}, 1};
    g->ents[s] = e;
    uint64_t good = 0, bad = 0;
    sio_index_tally(e, UINT64_MAX, &good, &bad);
    stage_end(p, s, good);
    atomic_store(&g->gready[s], UINT64_MAX);
    return 1;
}

/* Does the order read a shard now (a slot) that no step made ready? */
static int slot_unready(sio_plan *p)
{
    plan_grow *g = p->g;
    size_t n = sio_order_shards_ahead(g->o, g->ahead, g->ahead_cap);
    size_t slots = sio_order_slot_count(g->o);
    for (size_t i = 0; i < n && i < slots; i++)
        if (g->ahead[i] < g->total && !g->ents[g->ahead[i]])
            return 1;
    return 0;
}

static sio_code grow_once(sio_plan *p, sio_error *err)
{
    plan_grow *g = p->g;
    sio_code rc = SIO_OK;
    int blocked = 0;
    if (!p->growing || atomic_load(&p->complete) || atomic_load(&p->failed))
        return SIO_OK;
    uint64_t gen0 = p->stage ? atomic_load(&p->stage->jobgen) : 0;
    /* Shards whose fetch ended: where they end, what of them is read. */
    rc = staged_reap(p, err);
    /* The shards the order needs now (its slots) and the next few: those
     * staged in memory are fetched by jobs, several at once, and the
     * order takes their groups as they arrive. */
    size_t n = sio_order_shards_ahead(g->o, g->ahead, g->ahead_cap);
    size_t slots = sio_order_slot_count(g->o);
    unsigned fresh = 0, deferred = 0;
    for (size_t i = 0; i < n && rc == SIO_OK; i++) {
        uint32_t s = g->ahead[i];
        if (s >= g->total || g->ents[s])
            continue;
        if (i >= slots && fresh >= GROW_STEP_SHARDS)
            break;
        if (stage_kind(p, s) && plan_defer(p, s)) {
            deferred++;
            continue;
        }
        /* A shard staged in memory: a job of its own, within the jobs'
         * count, ahead of the order's own only as fetch_ahead says, and
         * within the room (readers passing the shards before); one of a
         * size not known yet (none staged told how large shards are) only
         * when the order reads it now. A job's end asks again. */
        if (stage_kind(p, s)) {
            int slot = i < slots;
            if (stage_jobs(p) >= STAGE_JOBS_MAX || (!slot && !fetch_ahead(p)))
                break;
            uint64_t need = stage_size(p, s);
            if (need == UINT64_MAX && !slot)
                break;
            if (!stage_room(p, need, slot)) {
                blocked = 1;
                break;
            }
        }
        rc = prepare_shard(p, s, err);
        fresh++;
    }
    /* Readers behind the furthest hold more than the budget (within the
     * shards the order reads now, which no new shard's room looked at):
     * the order waits for them, parked as for room, and the lag rules
     * detach them. */
    int readers_hold = rc == SIO_OK && p->stage && !stage_readers_room(p);
    if (readers_hold)
        blocked = 1;
    if (rc == SIO_OK) {
        size_t got = 0;
        rc = readers_hold ? SIO_ERR_AGAIN : order_run(p, &got, err);
        /* The order may move on with no item made (its buffer filling):
         * a shard it opened since is made ready in the next round. */
        if (rc == SIO_ERR_AGAIN && got == 0 && fresh + deferred == 0 &&
            slot_unready(p) && !readers_hold)
            rc = SIO_OK;
        if (rc == SIO_ERR_AGAIN && got == 0 && fresh + deferred == 0 &&
            stage_jobs(p) && !readers_hold) {
            /* The order waits for shards still arriving: for their next
             * groups, a while (then the planner's other work goes, and
             * this step is queued again). */
            stage_jobs_wait(p, gen0, GROW_WAIT_MS);
            return SIO_ERR_AGAIN;
        }
        if (rc == SIO_ERR_AGAIN && got == 0 && fresh + deferred == 0 && blocked) {
            /* Waiting for room to stage the next shard: parked until a
             * reader lets shards go; while readers wait at the end, the
             * lag rules are looked at again shortly (stage_room). */
            pthread_mutex_lock(&p->mu);
            atomic_store_explicit(&p->n, g->made, memory_order_release);
            /* Under the lock that readers link under: one that comes
             * after sees the plan parked and kicks it; a sweep that lets
             * shards go kicks it, and so does the caller's timer while
             * readers wait (the lag rules change with time). */
            if (p->kick)
                atomic_store(&p->parked, 1);
            pthread_mutex_unlock(&p->mu);
            if (!p->kick) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
                return SIO_ERR_AGAIN;
            }
            return SIO_ERR_BUSY;
        }
        if (rc == SIO_ERR_AGAIN && got == 0 && fresh + deferred == 0)
            rc = sio_seterr(err, SIO_ERR_CHANGED,
                            "the order waits for a shard that is indexed: "
                            "%s", err->msg);
        else if (rc == SIO_ERR_AGAIN)
            rc = SIO_OK;
    }
    if (rc != SIO_OK) {
        publish(p);
        /* The order failed (on_error=fail: a bad sample, or a shard
         * whose read failed): the epoch fails at the items made, as it
         * fails on its feed; anything else only stops the plan. */
        int fatal = g->cfg.on_error == SIO_ON_ERROR_FAIL &&
                    sio_order_failed(g->o) && rc != SIO_ERR_NOMEM &&
                    rc != SIO_ERR_CANCELED;
        grow_fail_code(p, fatal ? rc : SIO_OK, err->msg);
        return SIO_OK;
    }
    if (sio_order_done(g->o)) {
        /* Every shard's last group was taken: their jobs ended (a job
         * lets the last one in at its end); what of them is read, so that
         * their bytes go once the readers passed them. */
        sio_error e2 = {SIO_OK, ""};
        if (staged_reap(p, &e2) != SIO_OK)
            SIO_LOG(&g->cfg.log, SIO_LOG_WARN,
                    "event=stage_end_failed reason=\"%s\"", e2.msg);
        for (size_t i = 0; i < g->total; i++)
            if (g->ents[i] && g->views[i].open &&
                !sio_index_view_current(g->ents[i], &g->views[i])) {
                publish(p);
                grow_fail(p, "a shard's index was dropped while the plan "
                             "grew");
                return SIO_OK;
            }
        p->skipped = tally_bad(&g->cfg, g->ents, g->seen, g->total);
        p->build_ns = mono_ns() - g->t0;
        pthread_mutex_lock(&p->mu);
        atomic_store_explicit(&p->n, g->made, memory_order_release);
        atomic_store(&p->complete, 1);
        plan_wake_all(p);
        pthread_mutex_unlock(&p->mu);
        return SIO_OK;
    }
    publish(p);
    window_trim(p);
    /* Far enough ahead of its readers: wait for them (a reader that comes
     * near kicks it). */
    pthread_mutex_lock(&p->mu);
    uint64_t want = atomic_load(&p->want);
    int park = lead_full(g, want) && p->kick;
    if (park) {
        /* A reader that comes within half the lead kicks it (of the
         * items: ahead_bound's half; of the bytes: half the items made
         * past it now). */
        uint64_t low = g->made - want >= g->ahead_bound
                           ? g->ahead_bound / 2
                           : (g->made - want) / 2;
        atomic_store(&p->g_ahead_low, low ? low : 1);
        atomic_store(&p->parked, 1);
    }
    pthread_mutex_unlock(&p->mu);
    return park ? SIO_ERR_BUSY : SIO_ERR_AGAIN;
}

sio_code sio_plan_grow(sio_plan *p, sio_error *err)
{
    uint64_t t0 = mono_ns();
    /* The staging of an indexed epoch fetches for its readers, and none
     * has asked yet (its first stream may be a resume far in, which the
     * feed serves): parked until one does (plan_wait_for kicks it). */
    if (p->stage_seeks && p->kick && atomic_load(&p->want) == 0) {
        pthread_mutex_lock(&p->mu);
        int park = atomic_load(&p->want) == 0;
        if (park)
            atomic_store(&p->parked, 1);
        pthread_mutex_unlock(&p->mu);
        if (park)
            return SIO_ERR_BUSY;
    }
    for (;;) {
        uint64_t r0 = mono_ns();
        sio_code rc = grow_once(p, err);
        /* Shards still arriving: the next round here, a while, so that
         * their groups are published in rounds of about a millisecond's
         * arrivals, not one round and one wake-up of every reader per
         * group. */
        if (rc != SIO_ERR_AGAIN || !p->stage || !stage_jobs(p) ||
            atomic_load(&p->failed))
            return rc;
        uint64_t now = mono_ns();
        if (now - t0 >= GROW_SLICE_NS)
            return rc;
        if (now - r0 < GROW_ROUND_NS) {
            struct timespec ts = {0, (long)(GROW_ROUND_NS - (now - r0))};
            nanosleep(&ts, NULL);
        }
    }
}
