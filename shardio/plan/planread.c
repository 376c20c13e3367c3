/*
 * planread.c — one consumer's share of an epoch read from its plan
 * (include/shardio_plan.h has the contract).
 *
 * The reader walks its own indices of Y (rank + k * world from
 * global_start, the even-pad tail from the front, as the feed deals them),
 * and reads each sample's byte range from the shard's descriptor with
 * pread() into the sample's memory, through the shard reader (the same tar
 * reader and sample builder as the streaming path, started at the group's
 * offset). Nothing is shared with other readers: no lock, no window, no
 * thread; the file descriptors are the reader's own.
 *
 * Change detection: each descriptor's identity (dev, inode, size, mtime)
 * is taken when it is opened and compared with fstat() after every sample
 * is read; a write to the file moves mtime (and a truncation the size)
 * before its bytes are copied in, so a sample read across a change is
 * never returned. ctime is not compared: unlinking or renaming over the
 * file (a cache eviction, a replaced shard) changes it but not the bytes
 * the descriptor reads. The sample must also be the indexed one:
 * same group number, key hash and payload size.
 *
 * Threading: one thread at a time. Ownership: the reader owns its
 * descriptors and holds a reference on the plan.
 */
#include "shardio_plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core_int.h"
#include "store/store_int.h"

/* The shard reader's buffer: headers and small members come through it,
 * a member's bytes beyond it go straight into the sample's memory. */
#define PLANREAD_BUFFER (16u << 10)

typedef struct pfile {
    uint32_t shard;
    int fd;             /* -1: free slot */
    uint64_t used;      /* LRU clock */
    struct stat st;     /* identity when opened */
} pfile;

struct sio_planread {
    sio_io *io;
    const sio_shardlist *list;
    sio_plan *plan;
    sio_planread_config cfg;
    uint64_t n;      /* samples of Y */
    uint64_t length; /* samples of the share */
    uint64_t k;      /* next position in the share */
    uint64_t clock;
    pfile files[SIO_PLANREAD_FILES];
    char err[700];
};

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
           a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

sio_code sio_planread_open(sio_io *io, const sio_shardlist *list,
                           sio_plan *plan, const sio_planread_config *cfg,
                           sio_planread **out, sio_error *err)
{
    char why[160];
    *out = NULL;
    if (sio_share_validate(cfg->rank, cfg->world, cfg->global_start,
                           cfg->start, why, sizeof why) != 0)
        return sio_seterr(err, SIO_ERR_INVALID, "%s", why);
    sio_planread *r = calloc(1, sizeof *r);
    if (!r)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    r->io = io;
    r->list = list;
    r->plan = plan;
    sio_plan_ref(plan);
    r->cfg = *cfg;
    r->n = sio_plan_count(plan);
    r->length = sio_share_length(r->n, cfg->global_start, cfg->rank,
                                 cfg->world, cfg->policy);
    r->k = cfg->start;
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++)
        r->files[i].fd = -1;
    *out = r;
    return SIO_OK;
}

/* The descriptor of shard s, opened (and its identity taken) when it is
 * not open yet; the least recently used one is closed to make room. */
static pfile *file_for(sio_planread *r, uint32_t s, sio_code *rc)
{
    pfile *victim = &r->files[0];
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++) {
        pfile *f = &r->files[i];
        if (f->fd >= 0 && f->shard == s) {
            f->used = ++r->clock;
            return f;
        }
        if (f->fd < 0 || (victim->fd >= 0 && f->used < victim->used))
            victim = f;
    }
    if (victim->fd >= 0)
        close(victim->fd);
    victim->fd = -1;
    sio_error e = {SIO_OK, ""};
    const char *url = sio_shardlist_url(r->list, s);
    int fd = -1;
    *rc = sio_io_open_fd(r->io, r->cfg.cache, url, &fd, &e);
    if (*rc) {
        if (*rc == SIO_ERR_NOTFOUND)
            *rc = SIO_ERR_CHANGED; /* it was there when indexed */
        snprintf(r->err, sizeof r->err, "%s", e.msg);
        return NULL;
    }
    if (fstat(fd, &victim->st) != 0) {
        close(fd);
        *rc = SIO_ERR_IO;
        snprintf(r->err, sizeof r->err, "url=%s: cannot stat", url);
        return NULL;
    }
    uint64_t want = sio_shardlist_size(r->list, s);
    if (want != 0 && want != UINT64_MAX &&
        (uint64_t)victim->st.st_size != want) {
        close(fd);
        *rc = SIO_ERR_CHANGED;
        snprintf(r->err, sizeof r->err,
                 "url=%s: %llu bytes, listed with %" PRIu64
                 " (the shard changed)", url,
                 (unsigned long long)victim->st.st_size, want);
        return NULL;
    }
    victim->fd = fd;
    victim->shard = s;
    victim->used = ++r->clock;
    return victim;
}

/* Read Y[t] from its shard's bytes. */
static sio_code read_item(sio_planread *r, uint64_t t,
                          const sio_sample **out)
{
    const sio_plan_item *it = sio_plan_item_at(r->plan, t);
    const char *url = sio_shardlist_url(r->list, it->shard);
    sio_shard *sh = NULL;
    const sio_sample *smp = NULL;
    sio_error e = {SIO_OK, ""};
    sio_code rc;
    struct stat now;

    pfile *f = file_for(r, it->shard, &rc);
    if (!f)
        return rc;
    sio_shard_at at;
    memset(&at, 0, sizeof at);
    at.offset = it->offset;
    at.end = it->end;
    at.first_group = it->group;
    at.use_fd = 1;
    at.fd = f->fd;
    at.read_cap = PLANREAD_BUFFER;
    rc = sio_shard_open_at(r->io, url, it->shard, &r->cfg.limits, &at, &sh,
                           &e);
    if (rc == SIO_OK) {
        rc = sio_shard_next(sh, &smp);
        if (rc)
            snprintf(e.msg, sizeof e.msg, "%s", sio_shard_errmsg(sh));
    }
    sio_shard_close(sh);
    /* Whatever was read: was the file written to meanwhile? */
    if (fstat(f->fd, &now) != 0 || !same_file(&now, &f->st)) {
        sio_sample_unref(smp);
        close(f->fd);
        f->fd = -1;
        snprintf(r->err, sizeof r->err,
                 "url=%s changed while the epoch's plan read it", url);
        return SIO_ERR_CHANGED;
    }
    if (rc || !smp) {
        sio_sample_unref(smp);
        snprintf(r->err, sizeof r->err, "url=%s group %" PRIu32 ": %s", url,
                 it->group, rc ? e.msg : "no sample where the index has one");
        /* The bytes are not what was indexed. */
        return rc == SIO_ERR_NOMEM ? rc : SIO_ERR_CHANGED;
    }
    if (smp->index_in_shard != it->group || smp->bytes != it->bytes ||
        sio_index_keyhash(smp->key, strlen(smp->key)) != it->keyhash) {
        snprintf(r->err, sizeof r->err,
                 "url=%s group %" PRIu32 ": the sample read is not the "
                 "indexed one (the shard changed)", url, it->group);
        sio_sample_unref(smp);
        return SIO_ERR_CHANGED;
    }
    ((sio_sample *)(uintptr_t)smp)->global_index = t;
    *out = smp;
    return SIO_OK;
}

sio_code sio_planread_next(sio_planread *r, const sio_sample **out)
{
    uint64_t i, t;
    *out = NULL;
    if (r->k >= r->length)
        return SIO_OK;
    if (sio_share_index(r->cfg.global_start, r->cfg.rank, r->cfg.world,
                        r->k, &i) != 0)
        return SIO_OK;
    t = i;
    if (t >= r->n) /* the even-pad tail repeats from global_start on */
        t = sio_share_pad_source(r->n, r->cfg.global_start, i);
    sio_code rc = read_item(r, t, out);
    if (rc == SIO_OK)
        r->k++;
    return rc;
}

const char *sio_planread_errmsg(const sio_planread *r)
{
    return r->err;
}

uint64_t sio_planread_position(const sio_planread *r)
{
    return r->k;
}

uint64_t sio_planread_length(const sio_planread *r)
{
    return r->length;
}

void sio_planread_close(sio_planread *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++)
        if (r->files[i].fd >= 0)
            close(r->files[i].fd);
    sio_plan_unref(r->plan);
    free(r);
}
