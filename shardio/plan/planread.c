/*
 * planread.c — one consumer's share of an epoch read from its plan
 * (include/shardio_plan.h has the contract).
 *
 * The reader walks its own indices of Y (rank + k * world from
 * global_start, the even-pad tail from the front, as the feed deals them).
 * For each sample it reads the tar headers of the sample's byte range with
 * pread() through the plain tar reader (wire-compatible with the streaming
 * path: the same header rules, the same WebDataset grouping and limits),
 * and hands the sample on without its payload in memory:
 *   - a small sample (its byte range at most PLANREAD_SMALL bytes) is read
 *     in one pread() into the reader's buffer, and its fields point there;
 *   - a larger one is described by extents (descriptor, offset) per field:
 *     the stream's sink reads them with pread() straight into the
 *     socket's buffer, the one copy a byte makes before the kernel's.
 * Entries the plain reader leaves to libarchive (sparse files, pax
 * charsets...) take the shard reader for that sample (sio_shard_open_at
 * over the descriptor), which holds the payload in memory.
 * Nothing is shared with other readers: no lock, no window, no thread;
 * the file descriptors are the reader's own.
 *
 * Change detection: the plan holds each shard file's identity (dev,
 * inode, size, mtime) as it was when the plan was built; a descriptor
 * whose file is not that one is refused when opened. A write to the file
 * moves mtime (and a
 * truncation the size) before its bytes are copied in, so comparing the
 * identity with fstat() after the bytes were copied and before they are
 * sent proves they are the indexed ones: sio_planread_next does it for
 * the bytes it read itself, the caller (sio_planread_verify) for extents
 * once it has read them. ctime is not compared: unlinking or renaming
 * over the file (a cache eviction, a replaced shard) changes it but not
 * the bytes the descriptor reads. A short read (a truncated file) is a
 * change too. The sample must also be the indexed one: the same key hash,
 * payload size and group.
 *
 * Cache entries: a shard held by the shard cache is read through its
 * entry's descriptor and every byte is checked against the entry's block
 * sums as it is read (the tar reader's preads, the extents by
 * sio_planread_pread, the range the shard reader fallback reads); a
 * block that fails drops the entry and fails the sample as changed.
 *
 * Threading: one thread at a time. Ownership: the reader owns its
 * descriptors, its buffer and the sample it hands out (valid until the
 * next call), and holds a reference on the plan.
 */
#include "shardio_plan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/core_int.h"
#include "plan/plan_int.h"
#include "shardio_cache.h"
#include "store/store_int.h"
#include "tar/group.h"
#include "tar/tarparse.h"

/* A sample whose byte range is at most this is read whole, in one pread,
 * into the reader's buffer; a larger one is read by its headers, its
 * payload left in the file as extents. */
#define PLANREAD_SMALL (32u << 10)
/* The tar reader's buffer for the headers of a large sample. */
#define PLANREAD_HEADERS (8u << 10)
/* Items of its share ahead of a reader that waits for a fetch whose
 * shards' fetches start with it (fetch_ahead). */
#define PLANREAD_AHEAD 32u

typedef struct pfile {
    uint32_t shard;
    int pi;             /* the plan's shared entry held (-1: fd is the
                           reader's own) */
    int fd;             /* -1: free slot */
    int sfd;            /* a cache entry's block sums (-1: a local file) */
    int unverified;     /* extents of it were handed out since a check */
    sio_cache_carry *carry; /* a cache entry's last checked block (NULL:
                               a local file) */
    int cached;         /* a shard-cache entry (its bytes are hits) */
    int staged;         /* the plan's staged bytes (stage.c): pinned, not
                           the reader's to close; never written */
    uint64_t lo, hi;    /* (staged) the Y indices whose items it holds
                           (stage_cover): a memfd fetched again holds
                           only some of the shard's items */
    uint64_t used;      /* LRU clock */
} pfile;

/* A field being collected: offsets into names, its payload. */
typedef struct pfield {
    size_t name_off;
    const unsigned char *data; /* in buf (small sample) */
    uint64_t off;              /* in the file (large sample) */
    uint64_t len;
} pfield;

struct sio_planread {
    sio_io *io;
    const sio_shardlist *list;
    sio_plan *plan;
    sio_planread_config cfg;
    uint64_t n;      /* samples of Y */
    uint64_t length; /* samples of the share */
    uint64_t k;      /* next position in the share */
    _Atomic uint64_t shown; /* k, for other threads (status) */
    uint64_t clock;
    uint64_t hit_bytes; /* read from cache entries, not yet counted */
    pfile files[SIO_PLANREAD_FILES];
    /* The tar reader and its buffer (a pool block). */
    sio_tar_plain tp;
    pread_stream ps;
    unsigned char *buf;
    size_t bufcap;
    /* The sample handed out (valid until the next call). */
    sio_sample smp;
    sio_group g;            /* the group read (the rule: tar/group.h) */
    pfield *pf;
    sio_field *fields;
    sio_extent *ext;
    size_t nf, fcap;
    size_t tcap;            /* entries of fields and ext */
    const sio_sample *held; /* a sample from the shard reader (fallback) */
    plan_waiter w;          /* waiting for a growing plan */
    plan_mark mark;         /* the chunk of Y it reads (a windowed plan) */
    plan_warm *warm;        /* a cold read handed to the warm threads */
    uint64_t warmed;        /* 1 + the Y index warmed last (0: none) */
    int final;              /* n and length are the plan's final ones */
    uint64_t noted;         /* the Y index last told to the staging */
    uint64_t note_bytes;    /* bytes of samples read since */
    uint64_t cur;           /* the Y index being read */
    int fatal;              /* err is the epoch's own failure */
    int stale;              /* a file let go before its check failed it:
                               the next sio_planread_verify says so
                               (stale_err) */
    char stale_err[700];
    char err[700];
};

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
    r->buf = sio_pool_get(PLANREAD_SMALL, &r->bufcap);
    if (!r->buf) {
        free(r);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    r->io = io;
    r->list = list;
    r->plan = plan;
    sio_plan_ref(plan);
    r->cfg = *cfg;
    sio_group_limits(&r->cfg.limits);
    sio_group_init(&r->g);
    r->n = sio_plan_count(plan);
    r->final = sio_plan_complete(plan);
    r->length = r->final ? sio_share_length(r->n, cfg->global_start,
                                            cfg->rank, cfg->world,
                                            cfg->policy)
                         : UINT64_MAX;
    r->k = cfg->start;
    atomic_store_explicit(&r->shown, r->k, memory_order_relaxed);
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++) {
        r->files[i].fd = r->files[i].sfd = -1;
        r->files[i].pi = -1;
    }
    uint64_t t0 = 0;
    if (sio_share_index(cfg->global_start, cfg->rank, cfg->world,
                        cfg->start, &t0) != 0)
        t0 = UINT64_MAX;
    plan_mark_link(plan, &r->mark, t0);
    if (plan->stage) {
        /* The staging keeps what this rank reads from here on. */
        r->noted = t0;
        stage_reader(plan, cfg->rank, cfg->world, t0, 1);
    }
    *out = r;
    return SIO_OK;
}

/* Let go of f (bad: its file was found changed). Bytes of it handed out
 * since the last check are checked first (the caller's next
 * sio_planread_verify reports a change). */
static void file_drop(sio_planread *r, pfile *f, int bad)
{
    if (!bad && f->fd >= 0 && f->unverified && !f->staged) {
        struct stat now;
        if (fstat(f->fd, &now) != 0 ||
            !plan_file_same(r->plan, f->shard, &now)) {
            bad = 1;
            r->stale = 1;
            snprintf(r->stale_err, sizeof r->stale_err,
                     "url=%s changed while the epoch's plan read it",
                     sio_shardlist_url(r->list, f->shard));
        }
    }
    if (f->staged) {
        if (f->fd >= 0)
            stage_unpin(r->plan, f->shard);
    } else if (f->pi >= 0) {
        plan_fd_release(r->plan, f->pi, bad);
    } else {
        if (f->fd >= 0)
            close(f->fd);
        if (f->sfd >= 0)
            close(f->sfd);
    }
    f->pi = -1;
    f->fd = f->sfd = -1;
    f->unverified = 0;
    f->staged = 0;
    free(f->carry);
    f->carry = NULL;
}

static sio_code changed(sio_planread *r, const char *url)
{
    snprintf(r->err, sizeof r->err,
             "url=%s changed while the epoch's plan read it", url);
    return SIO_ERR_CHANGED;
}

sio_code sio_planread_verify(sio_planread *r)
{
    struct stat now;
    sio_code rc = SIO_OK;
    if (r->stale) {
        r->stale = 0;
        snprintf(r->err, sizeof r->err, "%s", r->stale_err);
        rc = SIO_ERR_CHANGED;
    }
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++) {
        pfile *f = &r->files[i];
        if (f->fd < 0 || !f->unverified || f->staged)
            continue;
        if (fstat(f->fd, &now) != 0 ||
            !plan_file_same(r->plan, f->shard, &now)) {
            rc = changed(r, sio_shardlist_url(r->list, f->shard));
            file_drop(r, f, 1);
        } else {
            f->unverified = 0;
        }
    }
    return rc;
}

/* The descriptor of shard s, opened (and its identity taken) when it is
 * not open yet; the least recently used one is closed to make room. */
/* Shard s's descriptor: the plan's, shared with its other readers (the
 * entry's index returned), or, when every shared entry is held, one of
 * the reader's own (-1). *rc says whether there is one. */
static int shard_take(sio_planread *r, const char *url, uint32_t s, int *fd,
                      int *sfd, int *cached, sio_code *rc)
{
    int pi = plan_fd_take(r->plan, r->io, r->cfg.cache, url, s, fd, sfd,
                          cached, rc, r->err, sizeof r->err);
    if (pi >= 0 || *rc)
        return pi;
    *rc = plan_fd_open(r->plan, r->io, r->cfg.cache, url, s, fd, sfd, r->err,
                       sizeof r->err);
    *cached = r->cfg.cache && !sio_io_url_is_file(r->io, url);
    return -1;
}

/* Let go of the staged shards this reader holds whose last item is
 * before Y index t, and of windows of shards fetched again that end
 * before it (the window moves on once no reader holds it). */
static void drop_passed(sio_planread *r, uint64_t t)
{
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++) {
        pfile *f = &r->files[i];
        if (f->fd >= 0 && f->staged &&
            (f->hi < t || stage_passed(r->plan, f->shard, t)))
            file_drop(r, f, 0);
    }
}

/* f holds shard s's staged memfd (pinned). */
static pfile *staged_file(sio_planread *r, pfile *f, uint32_t s, int fd)
{
    stage_cover(r->plan, s, &f->lo, &f->hi);
    f->pi = -1;
    f->fd = fd;
    f->sfd = -1;
    f->staged = 1;
    f->shard = s;
    f->used = ++r->clock;
    f->cached = 0;
    return f;
}

/* The reader waits for a staged shard fetched again (a resume far in: a
 * shard left to its readers, or let go): the fetches of the shards of its
 * next PLANREAD_AHEAD items are started too, so that they come at once
 * rather than one after another as it reaches them. */
static void fetch_ahead(sio_planread *r)
{
    uint32_t seen[PLANREAD_AHEAD];
    size_t ns = 0;
    for (uint64_t k = r->k + 1; k <= r->k + PLANREAD_AHEAD; k++) {
        uint64_t i;
        sio_plan_item it;
        if (sio_share_index(r->cfg.global_start, r->cfg.rank, r->cfg.world,
                            k, &i) != 0 ||
            i >= r->n || !plan_item_copy(r->plan, i, &it))
            break;
        if (!stage_kind(r->plan, it.shard))
            continue;
        size_t j = 0;
        while (j < ns && seen[j] != it.shard)
            j++;
        if (j < ns)
            continue;
        seen[ns++] = it.shard;
        if (!stage_prefetch(r->plan, it.shard, i))
            break;
    }
}

static pfile *file_for(sio_planread *r, uint32_t s, uint64_t t,
                       sio_code *rc)
{
    pfile *victim = &r->files[0];
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++) {
        pfile *f = &r->files[i];
        /* (a staged shard thinned below t since it was taken: its
         * item may be a hole now, taken again: stage_cut) */
        if (f->fd >= 0 && f->shard == s &&
            (!f->staged || (t >= f->lo && t <= f->hi &&
                            t >= stage_cut(r->plan, s)))) {
            f->used = ++r->clock;
            return f;
        }
        if (f->fd >= 0 && f->shard == s) {
            /* A memfd that does not hold this item (a shard drawn again
             * after its ranges were fetched): taken again, which fetches
             * the items it lacks. */
            file_drop(r, f, 0);
            victim = f;
            continue;
        }
        if (f->fd < 0 || (victim->fd >= 0 && f->used < victim->used))
            victim = f;
    }
    file_drop(r, victim, 0);
    const char *url = sio_shardlist_url(r->list, s);
    int fd = -1, sfd = -1, cached = 0;
    if (stage_kind(r->plan, s)) {
        /* Staged in memory: pinned while held; fetched again when it was
         * let go (SIO_ERR_AGAIN: the notify follows). Staged shards this
         * reader has passed are let go first. */
        drop_passed(r, r->cur);
        *rc = stage_take(r->plan, s, t, &r->w, &fd, r->err,
                         sizeof r->err);
        if (*rc == SIO_ERR_AGAIN)
            fetch_ahead(r);
        return *rc ? NULL : staged_file(r, victim, s, fd);
    }
    int pi = shard_take(r, url, s, &fd, &sfd, &cached, rc);
    if (*rc == SIO_ERR_BUSY) {
        /* Out of descriptors: give back this reader's others, once. */
        for (size_t i = 0; i < SIO_PLANREAD_FILES; i++)
            file_drop(r, &r->files[i], 0);
        pi = shard_take(r, url, s, &fd, &sfd, &cached, rc);
    }
    if ((*rc == SIO_ERR_UNSUPPORTED || *rc == SIO_ERR_CHANGED) &&
        r->plan->stage && r->plan->stage->budget && r->cfg.cache &&
        sio_cache_covers(url) &&
        !sio_io_url_is_file(r->io, url)) {
        /* A cache entry the plan read in place went (evicted for another
         * object): the shard is fetched into memory for the readers (its
         * bytes must be the ones planned: the size and every sample's
         * key, size and group are checked). */
        *rc = stage_take_instead(r->plan, s, t, &r->w, &fd, r->err,
                                 sizeof r->err);
        return *rc ? NULL : staged_file(r, victim, s, fd);
    }
    if (*rc)
        return NULL;
    if (sfd >= 0 && !(victim->carry = calloc(1, sizeof *victim->carry))) {
        if (pi >= 0) {
            plan_fd_release(r->plan, pi, 0);
        } else {
            close(fd);
            close(sfd);
        }
        *rc = SIO_ERR_NOMEM;
        snprintf(r->err, sizeof r->err, "out of memory");
        return NULL;
    }
    victim->pi = pi;
    victim->fd = fd;
    victim->sfd = sfd;
    victim->shard = s;
    victim->used = ++r->clock;
    victim->cached = cached;
    return victim;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 8;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* The group at the reader's tar position, collected into r->smp by the
 * grouping rule every reader follows (tar/group.h).
 * SIO_OK: r->smp is the sample (ext set when large); SIO_ERR_UNSUPPORTED:
 * an entry only libarchive reads (the caller takes the shard reader);
 * else the bytes are not the indexed sample. */
static sio_code collect(sio_planread *r, const sio_plan_item *it,
                        const char *url, int large, int fd)
{
    const sio_shard_limits *lim = &r->cfg.limits;
    sio_group *g = &r->g;
    sio_tar_entry e;
    char ext[SIO_GROUP_EXT_MAX];

    r->nf = 0;
    sio_group_reset(g);
    for (;;) {
        int what = 0;
        sio_code rc = sio_tarp_next(&r->tp, &e, &what);
        if (rc) {
            snprintf(r->err, sizeof r->err, "url=%s: %s", url, r->tp.err);
            return rc == SIO_ERR_NOMEM || rc == SIO_ERR_AGAIN
                       ? rc
                       : SIO_ERR_CHANGED;
        }
        if (r->tp.damaged) {
            /* Blocks dropped for a bad checksum after the group's last
             * member, up to the end of its indexed range: the index
             * builder took the damaged header for the next group's first
             * member; believe it where this read sees the same. */
            int known = r->tp.dmg_blocks != 0 &&
                        r->tp.damaged == r->tp.dmg_blocks;
            if (g->open && what == SIO_TARP_END &&
                sio_group_damage_after(g, r->tp.dmg_name, known))
                break; /* the next group's damaged first member */
            /* The index took this range for a whole sample: a header
             * dropped for its checksum means it is not that sample. */
            snprintf(r->err, sizeof r->err,
                     "url=%s: damaged tar header (bad checksum) inside an "
                     "indexed sample", url);
            return SIO_ERR_CHANGED;
        }
        if (what == SIO_TARP_UNSUPPORTED)
            return SIO_ERR_UNSUPPORTED;
        if (what == SIO_TARP_END)
            break;
        int first = 0;
        int m = sio_group_member(g, &e, ext, &first);
        if (m < 0)
            return SIO_ERR_NOMEM;
        if (m == SIO_GROUP_SKIP)
            continue;
        if (m == SIO_GROUP_NEXT)
            break; /* the next group: past the indexed end */
        size_t name_off = 0;
        int keep = sio_group_field(g, ext, e.size, lim, &name_off);
        if (keep < 0)
            return SIO_ERR_NOMEM;
        if (!keep)
            continue; /* bad: told below */
        if (grow((void **)&r->pf, &r->fcap, r->nf + 1, sizeof *r->pf))
            return SIO_ERR_NOMEM;
        pfield *pf = &r->pf[r->nf++];
        pf->name_off = name_off;
        pf->len = e.size;
        pf->off = r->tp.off; /* the data follows the header */
        pf->data = NULL;
        if (!large) {
            /* The whole range is buffered: the data is there. */
            if (r->tp.len - r->tp.pos < e.size) {
                snprintf(r->err, sizeof r->err,
                         "url=%s: member data past the indexed range", url);
                return SIO_ERR_CHANGED;
            }
            pf->data = r->tp.buf + r->tp.pos;
        }
    }
    if (!g->open || g->bad) {
        snprintf(r->err, sizeof r->err,
                 "url=%s group %" PRIu32 ": %s%s where the index has a good "
                 "sample (the shard changed)", url, it->group,
                 g->open ? "a bad sample: " : "no sample",
                 g->open ? g->reason : "");
        return SIO_ERR_CHANGED;
    }
    /* The field table (the reader's arrays; sizes only grow). */
    if (r->tcap < r->nf) {
        sio_field *nf = realloc(r->fields, r->fcap * sizeof *nf);
        if (!nf)
            return SIO_ERR_NOMEM;
        r->fields = nf;
        sio_extent *nx = realloc(r->ext, r->fcap * sizeof *nx);
        if (!nx)
            return SIO_ERR_NOMEM;
        r->ext = nx;
        r->tcap = r->fcap;
    }
    for (size_t f = 0; f < r->nf; f++) {
        r->fields[f].name = g->names + r->pf[f].name_off;
        r->fields[f].data = r->pf[f].data;
        r->fields[f].len = (size_t)r->pf[f].len;
        r->ext[f].fd = large ? fd : -1;
        r->ext[f].offset = r->pf[f].off;
    }
    r->smp = (sio_sample){.key = g->key,
                          .shard_url = url,
                          .shard_index = it->shard,
                          .index_in_shard = it->group,
                          .global_index = UINT64_MAX,
                          .nfields = r->nf,
                          .fields = r->fields,
                          .bytes = (size_t)g->dlen,
                          .source = 0};
    return SIO_OK;
}

/* The shard reader over the descriptor, for a sample the plain reader
 * leaves to libarchive. */
static sio_code read_by_shard(sio_planread *r, const sio_plan_item *it,
                              const char *url, int fd)
{
    sio_shard *sh = NULL;
    const sio_sample *smp = NULL;
    sio_error e = {SIO_OK, ""};
    sio_shard_at at;
    memset(&at, 0, sizeof at);
    at.offset = it->offset;
    at.end = it->end;
    at.first_group = it->group;
    at.use_fd = 1;
    at.fd = fd;
    sio_code rc = sio_shard_open_at(r->io, url, it->shard, &r->cfg.limits,
                                    &at, &sh, &e);
    if (rc == SIO_OK) {
        rc = sio_shard_next(sh, &smp);
        if (rc)
            snprintf(e.msg, sizeof e.msg, "%s", sio_shard_errmsg(sh));
    }
    sio_shard_close(sh);
    if (rc || !smp) {
        snprintf(r->err, sizeof r->err, "url=%s group %" PRIu32 ": %s", url,
                 it->group, rc ? e.msg : "no sample where the index has one");
        return rc == SIO_ERR_NOMEM ? rc : SIO_ERR_CHANGED;
    }
    r->held = smp;
    return SIO_OK;
}

/* Add the cache bytes read to the job's cache counters (in batches: no
 * shared counter is touched per sample). */
static void flush_hits(sio_planread *r)
{
    sio_cache_add_hit_bytes(r->cfg.cache, r->hit_bytes);
    r->hit_bytes = 0;
}

/* collect() over item it's byte range (span bytes) of f, read through
 * the entry's checks for a cache entry; nowait: with RWF_NOWAIT. */
static sio_code collect_at(sio_planread *r, pfile *f, const sio_plan_item *it,
                           const char *url, uint64_t span, int nowait)
{
    int large = span > r->bufcap;
    sio_pread_stream_init(&r->ps, f->fd, it->offset, it->end);
    r->ps.nowait = nowait;
    if (f->sfd >= 0)
        sio_pread_stream_checked(&r->ps, r->cfg.cache, url, f->sfd,
                                 (uint64_t)r->plan->files[it->shard].size,
                                 f->carry);
    /* A small sample: one read of exactly its range. */
    sio_tarp_reset(&r->tp, &r->ps.base, r->buf,
                   large ? PLANREAD_HEADERS : span ? (size_t)span : 1,
                   it->offset);
    return collect(r, it, url, large, f->fd);
}

/* Read Y[t]: *out and *ext as sio_planread_next. */
static sio_code read_item(sio_planread *r, uint64_t t,
                          const sio_sample **out, const sio_extent **ext)
{
    sio_plan_item copy;
    const sio_plan_item *it = &copy;
    const sio_sample *smp;
    sio_code rc;

    /* Its bytes are being read into the page cache: the warm threads'
     * notify follows (a stream that had bytes to send comes back before
     * it; it must not read them here meanwhile). */
    if (plan_warm_busy(r->warm))
        return SIO_ERR_AGAIN;
    /* A windowed plan's chunk let go: made again, the reader waits. */
    while (!plan_item_copy(r->plan, t, &copy)) {
        int w = plan_refill_wait(r->plan, &r->w, t, r->err, sizeof r->err);
        if (w < 0)
            return SIO_ERR_CHANGED;
        if (w > 0)
            return SIO_ERR_AGAIN;
    }
    const char *url = sio_shardlist_url(r->list, it->shard);

    pfile *f = file_for(r, it->shard, t, &rc);
    if (!f)
        return rc;
    uint64_t end = it->end;
    if (end == UINT64_MAX) { /* the last group: up to the file's end */
        uint64_t size = (uint64_t)r->plan->files[it->shard].size;
        end = size > it->offset ? size : it->offset;
    }
    uint64_t span = end - it->offset;
    int large = span > r->bufcap;
    /* Bytes of a file that may wait for the disk (a local shard, a cache
     * entry) are read with RWF_NOWAIT: not in the page cache, the range
     * goes to the warm threads and the stream waits for its notify, so no
     * HTTP thread waits for a disk (once per sample: the read after the
     * warm-up is a plain one). Staged bytes are memory. */
    int nowait = !f->staged && r->w.fn && r->warmed != t + 1;
    rc = collect_at(r, f, it, url, span, nowait);
    /* A large sample's payload is read by the caller from the file: its
     * last byte in memory too, or the range is warmed first. */
    if (rc == SIO_OK && large && r->ps.nowait) {
        unsigned char last;
        struct iovec v = {&last, 1};
        ssize_t got = preadv2(f->fd, &v, 1, (off_t)(end - 1), RWF_NOWAIT);
        if (got < 0 && errno == EAGAIN)
            rc = SIO_ERR_AGAIN;
    }
    if (rc == SIO_ERR_AGAIN) {
        r->warmed = t + 1;
        if (plan_warm_submit(&r->warm, f->fd, it->offset, span, r->w.fn,
                             r->w.ud) == 0)
            return SIO_ERR_AGAIN;
        rc = collect_at(r, f, it, url, span, 0); /* no warm thread: here */
    }
    if (rc == SIO_ERR_UNSUPPORTED && f->sfd >= 0)
        /* The shard reader reads the descriptor itself: the range is
         * checked first (a cache file is never written once complete). */
        rc = sio_cache_check(r->cfg.cache, url, f->fd, f->sfd,
                             (uint64_t)r->plan->files[it->shard].size,
                             it->offset, NULL, (size_t)span, r->err,
                             sizeof r->err) == SIO_OK ? SIO_ERR_UNSUPPORTED
                                                       : SIO_ERR_CHANGED;
    if (rc == SIO_ERR_UNSUPPORTED)
        rc = read_by_shard(r, it, url, f->fd);
    /* Was the file written to meanwhile? Asked by the caller's
     * sio_planread_verify before the bytes go out, once for every sample
     * read from the file since the last check (an fstat per output
     * buffer, not per sample); staged bytes never are. */
    if (!f->staged)
        f->unverified = 1;
    if (rc)
        return rc;
    smp = r->held ? r->held : &r->smp;
    if (smp->index_in_shard != it->group || smp->bytes != it->bytes ||
        sio_index_keyhash(smp->key, strlen(smp->key)) != it->keyhash) {
        snprintf(r->err, sizeof r->err,
                 "url=%s group %" PRIu32 ": the sample read is not the "
                 "indexed one (the shard changed)", url, it->group);
        if (r->cfg.index)
            sio_index_reject(sio_index_peek(r->cfg.index, url),
                             "a sample read from it is not the indexed one");
        return SIO_ERR_CHANGED;
    }
    ((sio_sample *)(uintptr_t)smp)->global_index = r->plan->index_base + t;
    ((sio_sample *)(uintptr_t)smp)->source = it->source;
    r->note_bytes += end - it->offset;
    if (f->cached) {
        r->hit_bytes += end - it->offset;
        if (r->hit_bytes >= (4u << 20))
            flush_hits(r);
    }
    *out = smp;
    if (!r->held && large)
        *ext = r->ext;
    return SIO_OK;
}

void sio_planread_set_notify(sio_planread *r, void (*fn)(void *ud),
                             void *ud)
{
    r->w.fn = fn;
    r->w.ud = ud;
}

/* A growing plan: is the share's next sample decided yet? SIO_OK when it
 * is (r->n covers it) or the plan is complete (r->n and r->length are
 * then final); SIO_ERR_AGAIN when it is not yet (the notify follows);
 * SIO_ERR_CHANGED when the plan stopped short of it. */
static sio_code grow_wait(sio_planread *r)
{
    uint64_t i, need;
    for (;;) {
        if (sio_plan_complete(r->plan)) {
            r->n = sio_plan_count(r->plan);
            r->length = sio_share_length(r->n, r->cfg.global_start,
                                         r->cfg.rank, r->cfg.world,
                                         r->cfg.policy);
            r->final = 1;
            return SIO_OK;
        }
        if (sio_share_index(r->cfg.global_start, r->cfg.rank, r->cfg.world,
                            r->k, &i) != 0) {
            r->length = r->k; /* past every position: the end */
            return SIO_OK;
        }
        /* Under even-drop a position is in the share only when its whole
         * row of the world is in Y. */
        need = i;
        if (r->cfg.policy == SIO_PARTITION_EVEN_DROP)
            need = i + (r->cfg.world - 1 - r->cfg.rank);
        int wait = plan_wait_for(r->plan, &r->w, need);
        if (sio_plan_complete(r->plan))
            continue;
        r->n = sio_plan_count(r->plan);
        if (need < r->n)
            return SIO_OK;
        char why[600];
        if (sio_plan_failed(r->plan, why, sizeof why)) {
            sio_code fatal = sio_plan_fatal(r->plan);
            if (fatal) {
                /* The epoch's own failure, as its feed reports it. */
                snprintf(r->err, sizeof r->err, "%.500s", why);
                r->fatal = 1;
                return fatal;
            }
            snprintf(r->err, sizeof r->err, "the epoch's plan stopped at "
                     "sample %" PRIu64 ": %.500s", r->n, why);
            return SIO_ERR_CHANGED;
        }
        if (!wait)
            continue; /* it grew meanwhile: look again */
        return SIO_ERR_AGAIN;
    }
}

/* Tell the staging where this reader is (every STAGE_NOTE samples of Y
 * or STAGE_NOTE_BYTES of samples read, or when it moved back), and let go
 * of staged shards it has passed (the previous sample's extents were
 * read). */
#define STAGE_NOTE 256u
#define STAGE_NOTE_BYTES (4u << 20)
static void stage_note(sio_planread *r, uint64_t t, int now)
{
    if (!r->plan->stage || t == r->noted ||
        (!now && t > r->noted && t - r->noted < STAGE_NOTE &&
         r->note_bytes < STAGE_NOTE_BYTES))
        return;
    r->noted = t;
    r->note_bytes = 0;
    drop_passed(r, t);
    stage_reader(r->plan, r->cfg.rank, r->cfg.world, t, 0);
}

sio_code sio_planread_next(sio_planread *r, const sio_sample **out,
                           const sio_extent **ext)
{
    uint64_t i, t;
    *out = NULL;
    *ext = NULL;
    sio_sample_unref(r->held);
    r->held = NULL;
    /* What was read since the caller's last sio_planread_verify stays
     * to be checked (the caller checks before the bytes go out). */
    sio_code rc;
    if (!r->final) {
        rc = grow_wait(r);
        if (rc == SIO_ERR_AGAIN && sio_share_index(r->cfg.global_start,
                                                   r->cfg.rank, r->cfg.world,
                                                   r->k, &i) == 0)
            stage_note(r, i, 1); /* waits there: what is before can go */
        if (rc != SIO_OK)
            return rc;
    }
    if (r->k >= r->length ||
        sio_share_index(r->cfg.global_start, r->cfg.rank, r->cfg.world,
                        r->k, &i) != 0) {
        stage_note(r, UINT64_MAX, 1); /* the share is read: nothing kept */
        flush_hits(r);
        return SIO_OK;
    }
    t = i;
    if (t >= r->n) /* the even-pad tail repeats from global_start on */
        t = sio_share_pad_source(r->n, r->cfg.global_start, i);
    stage_note(r, t, 0);
    plan_mark_move(&r->mark, t);
    r->cur = t;
    if (r->plan->single) {
        /* A one-sample plan read whole into memory (the plan holds it). */
        sio_sample *smp = (sio_sample *)(uintptr_t)r->plan->single;
        smp->global_index = r->plan->index_base + t;
        smp->source = 0;
        *out = smp;
        rc = SIO_OK;
    } else {
        rc = read_item(r, t, out, ext);
    }
    if (rc == SIO_OK)
        atomic_store_explicit(&r->shown, ++r->k, memory_order_relaxed);
    return rc;
}

sio_code sio_planread_pread(sio_planread *r, int fd, void *buf, size_t n,
                            uint64_t off)
{
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++) {
        pfile *f = &r->files[i];
        if (f->fd != fd)
            continue;
        /* Bytes read from it now are checked by the next verify. */
        if (!f->staged)
            f->unverified = 1;
        if (f->sfd < 0)
            break;
        return sio_cache_pread(r->cfg.cache, sio_shardlist_url(r->list,
                                                               f->shard),
                               fd, f->sfd,
                               (uint64_t)r->plan->files[f->shard].size, buf,
                               n, off, f->carry, r->err, sizeof r->err);
    }
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            snprintf(r->err, sizeof r->err,
                     "a shard file ended or failed at %" PRIu64
                     " (it changed under the epoch's plan)", off);
            return SIO_ERR_CHANGED;
        }
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return SIO_OK;
}

const char *sio_planread_errmsg(const sio_planread *r)
{
    return r->err;
}

int sio_planread_fatal(const sio_planread *r)
{
    return r->fatal;
}

uint64_t sio_planread_position(const sio_planread *r)
{
    return r->k;
}

uint64_t sio_planread_position_now(const sio_planread *r)
{
    return atomic_load_explicit(&r->shown, memory_order_relaxed);
}

uint64_t sio_planread_length(const sio_planread *r)
{
    return r->length;
}

void sio_planread_close(sio_planread *r)
{
    if (!r)
        return;
    flush_hits(r);
    plan_unwait(r->plan, &r->w);
    plan_warm_cancel(&r->warm);
    plan_mark_unlink(r->plan, &r->mark);
    for (size_t i = 0; i < SIO_PLANREAD_FILES; i++)
        file_drop(r, &r->files[i], 0);
    if (r->plan->stage)
        stage_reader(r->plan, r->cfg.rank, r->cfg.world, r->noted, -1);
    sio_sample_unref(r->held);
    sio_pool_put(r->buf, r->bufcap);
    sio_group_free(&r->g);
    free(r->pf);
    free(r->fields);
    free(r->ext);
    sio_plan_unref(r->plan);
    free(r);
}
