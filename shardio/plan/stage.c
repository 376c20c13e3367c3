/*
 * stage.c — a plan's staged shards: remote shards held in memory while
 * the plan's readers need them (plan_int.h has the records).
 *
 * A shard of an object store or an HTTP server that is not in the shard
 * cache (there is none, or it has no room for the epoch) is fetched whole,
 * once, by the plan's step that indexes it, into a memfd. Every reader of
 * the plan reads its samples from there with pread(), as it reads a local
 * file: one fetch from the store for all the consumers of the epoch.
 *
 * What is kept. Items are decided in Y order, so a shard's last item is
 * known when its last group leaves the buffer; shards whose last item is
 * decided queue in that order (done). A consumer rank counts while it
 * reads, while it is expected (the join grace, from the first reader), and
 * for the rejoin grace after its last reader closed; the lowest Y index a
 * counting rank reads next is low. A shard whose last item is below low
 * is let go: its memfd is closed once no reader holds it.
 *
 * Room. The steps stage a shard only while the staged bytes stay within
 * the budget (the shards the order reads now are staged regardless: the
 * order cannot go on without them). When a rank holds the room (the steps
 * wait and readers wait for the steps), it is detached: at once when it is
 * more than lag_samples behind the furthest rank, else after lag_grace_ms;
 * under --lag-policy wait nobody is. A detached rank, a late one or a
 * resume from before low reads on: a shard let go is fetched again for it
 * (restage) by the planner, within a second budget of the same size (a
 * reader beyond it is told to come back: SIO_ERR_BUSY). So at most
 * budget + interleave x the largest shard are staged by the steps, plus
 * budget for readers behind (docs/architecture.md "Memory").
 *
 * Threading: every record is guarded by the plan's mu; fetches run with no
 * lock held (the planner's threads). Descriptors are closed outside the
 * lock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/core_int.h"
#include "plan/plan_int.h"
#include "store/backend_ops.h"
#include "store/store_int.h"

/* Memfds let go, kept for the next shard to be written into (a shard's
 * pages are allocated once, not per shard and epoch): at most SPARES_MAX
 * of them and a plan's budget of bytes, server-wide. */
#define SPARES_MAX 64u
static struct {
    pthread_mutex_t mu;
    int fd[SPARES_MAX];
    uint64_t size[SPARES_MAX];
    size_t n;
    uint64_t bytes;
} spares = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, 0, 0};

/* Keep fd (size bytes) as a spare within cap bytes: 1, else 0 (the
 * caller closes it). */
static int spare_put(int fd, uint64_t size, uint64_t cap)
{
    int kept = 0;
    pthread_mutex_lock(&spares.mu);
    if (spares.n < SPARES_MAX && spares.bytes <= cap &&
        size <= cap - spares.bytes) {
        spares.fd[spares.n] = fd;
        spares.size[spares.n++] = size;
        spares.bytes += size;
        kept = 1;
    }
    pthread_mutex_unlock(&spares.mu);
    return kept;
}

uint64_t stage_spare_bytes(void)
{
    pthread_mutex_lock(&spares.mu);
    uint64_t b = spares.bytes;
    pthread_mutex_unlock(&spares.mu);
    return b;
}

/* Bytes a fetch reads from its stream at once. */
#define STAGE_READ (1u << 20)
/* Ranks of the world the plan follows (a larger world is not followed:
 * its readers count as behind). */
#define STAGE_WORLD_MAX 65536u

plan_stage *stage_new(size_t total)
{
    plan_stage *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    size_t n = total ? total : 1;
    st->sh = calloc(n, sizeof *st->sh);
    st->done = calloc(n, sizeof *st->done);
    st->want = calloc(n, sizeof *st->want);
    if (!st->sh || !st->done || !st->want) {
        stage_free(st);
        return NULL;
    }
    st->total = total;
    for (size_t i = 0; i < total; i++)
        st->sh[i].fd = -1;
    return st;
}

void stage_free(plan_stage *st)
{
    if (!st)
        return;
    for (size_t i = 0; st->sh && i < st->total; i++)
        if (st->sh[i].fd >= 0 &&
            !spare_put(st->sh[i].fd, st->sh[i].size, st->budget))
            close(st->sh[i].fd);
    free(st->sh);
    free(st->done);
    free(st->want);
    free(st->rank);
    free(st);
}

static uint64_t vhash_of(const char *v)
{
    uint64_t h = 1469598103934665603ull;
    if (!v || !*v)
        return 0;
    for (; *v; v++)
        h = (h ^ (unsigned char)*v) * 1099511628211ull;
    return h ? h : 1;
}

static sio_code write_all(int fd, const unsigned char *p, size_t n,
                          sio_error *err)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return sio_seterr(err, SIO_ERR_NOMEM,
                              "cannot stage a shard in memory: %s",
                              w < 0 ? strerror(errno) : "short write");
        p += w;
        n -= (size_t)w;
    }
    return SIO_OK;
}

/* A compressed shard's bytes through libarchive's filters (raw format:
 * the decompressed stream itself), STAGE_LA_READ at a time. */
#define STAGE_LA_READ (64u << 10)
typedef struct la_src {
    sio_stream *in;
    unsigned char *buf;
    sio_code rc;
    char err[300];
} la_src;

static la_ssize_t la_read(struct archive *a, void *ud, const void **out)
{
    la_src *s = ud;
    size_t got = 0;
    sio_code rc = s->in->ops->read(s->in, s->buf, STAGE_READ, &got);
    if (rc) {
        s->rc = rc;
        snprintf(s->err, sizeof s->err, "%s", s->in->ops->errmsg(s->in));
        archive_set_error(a, EIO, "%s", s->err);
        return -1;
    }
    *out = s->buf;
    return (la_ssize_t)got;
}

sio_code stage_fetch(sio_io *io, const char *url, uint64_t cap,
                     int decompress, int *fd, uint64_t *size,
                     uint64_t *vhash, sio_error *err)
{
    const sio_backend_ops *ops = NULL;
    void *ctx = NULL;
    sio_stream *in = NULL;
    unsigned char *buf = NULL, *lbuf = NULL;
    struct archive *ar = NULL;
    la_src src = {0};
    uint64_t got_total = 0;
    char shown[512];
    int m = *fd; /* a spare (stage_spare), or -1 */
    *size = 0;
    *vhash = 0;
    sio_code rc = sio_io_backend(io, url, &ops, &ctx, err);
    if (rc) {
        if (m >= 0)
            close(m);
        *fd = -1;
        return rc;
    }
    if (m >= 0 && lseek(m, 0, SEEK_SET) != 0) {
        close(m);
        m = -1;
    }
    if (m < 0)
        m = memfd_create("shardcast-stage", MFD_CLOEXEC);
    *fd = m;
    if (m < 0)
        return sio_seterr(err, SIO_ERR_NOMEM, "cannot stage a shard in "
                          "memory: memfd_create: %s", strerror(errno));
    buf = malloc(STAGE_READ);
    if (!buf)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    rc = ops->open(ctx, url, 0, &in, err);
    if (rc == SIO_OK && decompress) {
        lbuf = malloc(STAGE_READ);
        ar = archive_read_new();
        src = (la_src){.in = in, .buf = lbuf, .rc = SIO_OK};
        struct archive_entry *ent = NULL;
        if (!lbuf || !ar)
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        else if (archive_read_support_filter_all(ar) != ARCHIVE_OK ||
                 archive_read_support_format_raw(ar) != ARCHIVE_OK ||
                 archive_read_open(ar, &src, NULL, la_read, NULL) !=
                     ARCHIVE_OK ||
                 archive_read_next_header(ar, &ent) != ARCHIVE_OK) {
            sio_url_redact(url, shown, sizeof shown);
            rc = sio_seterr(err, src.rc ? src.rc : SIO_ERR_FORMAT,
                            "url=%s: %s", shown,
                            src.rc ? src.err : archive_error_string(ar)
                                                   ? archive_error_string(ar)
                                                   : "cannot decompress");
        }
    }
    while (rc == SIO_OK) {
        size_t got = 0;
        if (ar) {
            /* In the filters' own blocks: a stream cut short gives the
             * blocks before the cut, as a shard reader's reads get them. */
            la_ssize_t n = archive_read_data(ar, buf, STAGE_LA_READ);
            if (n < 0) {
                sio_url_redact(url, shown, sizeof shown);
                rc = sio_seterr(err, src.rc ? src.rc : SIO_ERR_FORMAT,
                                "url=%s: %s", shown,
                                src.rc ? src.err
                                : archive_error_string(ar)
                                    ? archive_error_string(ar)
                                    : "corrupt compressed data");
                break;
            }
            got = (size_t)n;
        } else {
            rc = in->ops->read(in, buf, STAGE_READ, &got);
            if (rc) {
                sio_url_redact(url, shown, sizeof shown);
                sio_seterr(err, rc, "url=%s: %s", shown,
                           in->ops->errmsg(in));
                break;
            }
        }
        if (got == 0)
            break;
        if ((uint64_t)got > cap - got_total) {
            sio_url_redact(url, shown, sizeof shown);
            rc = sio_seterr(err, SIO_ERR_LIMIT,
                            "url=%s is larger than the staging budget "
                            "(%" PRIu64 " bytes%s)", shown, cap,
                            decompress ? ", decompressed" : "");
            break;
        }
        if (ar && got_total == 0 && got >= 4 && buf[0] == 'P' &&
            buf[1] == 'K' && buf[2] == 3 && buf[3] == 4) {
            sio_url_redact(url, shown, sizeof shown);
            rc = sio_seterr(err, SIO_ERR_UNSUPPORTED,
                            "url=%s is a zip: its members are not staged",
                            shown);
            break;
        }
        rc = write_all(m, buf, got, err);
        got_total += got;
    }
    if (ar)
        archive_read_free(ar);
    free(lbuf);
    if (in && rc == SIO_OK && in->ops->info) {
        sio_objinfo oi;
        memset(&oi, 0, sizeof oi);
        in->ops->info(in, &oi);
        *vhash = vhash_of(oi.validator);
    }
    if (in)
        in->ops->close(in);
    free(buf);
    *size = got_total;
    /* A spare longer than this shard: its tail goes (readers read to the
     * file's end for the last group). */
    if (ftruncate(m, (off_t)got_total) != 0 && rc == SIO_OK)
        rc = sio_seterr(err, SIO_ERR_NOMEM, "cannot stage a shard in "
                        "memory: ftruncate: %s", strerror(errno));
    return rc;
}

int stage_spare(sio_plan *p)
{
    int fd = -1;
    (void)p;
    pthread_mutex_lock(&spares.mu);
    if (spares.n) {
        spares.n--;
        fd = spares.fd[spares.n];
        spares.bytes -= spares.size[spares.n];
    }
    pthread_mutex_unlock(&spares.mu);
    return fd;
}

/* Account shard x let go (mu held): its descriptor is kept as a spare
 * (within the budget), else goes to *closing (-1: kept). */
static void let_go(plan_stage *st, stage_shard *x, int *closing)
{
    *closing = x->fd;
    if (x->fd >= 0 && spare_put(x->fd, x->size, st->budget))
        *closing = -1;
    x->fd = -1;
    x->doomed = 0;
    st->bytes -= x->size <= st->bytes ? x->size : st->bytes;
    if (x->restaged) {
        st->restage_bytes -= x->size <= st->restage_bytes
                                 ? x->size
                                 : st->restage_bytes;
        x->restaged = 0;
    } else {
        st->step_bytes -= x->size <= st->step_bytes ? x->size
                                                    : st->step_bytes;
    }
    st->released++;
}

/* The lowest Y index a counting rank reads next (mu held); UINT64_MAX
 * when none counts. Ranks whose grace ran out stop counting here. */
static uint64_t low_of(plan_stage *st, uint64_t now)
{
    uint64_t low = UINT64_MAX;
    if (!st->world)
        return 0; /* nobody came yet: everything is still to be read */
    for (uint32_t r = 0; r < st->world; r++) {
        stage_rank *k = &st->rank[r];
        if (k->detached)
            continue;
        if (!k->joined) {
            if (now < st->join_deadline_ms)
                return 0;
            continue;
        }
        if (!k->open && k->gone_ms && now - k->gone_ms >= st->rejoin_ms) {
            k->detached = 1;
            st->detaches++;
            continue;
        }
        if (k->t < low)
            low = k->t;
    }
    return low;
}

/* Let go of what no counting rank needs any more (mu held): up to cap
 * descriptors to close in closing[]. */
static size_t sweep(sio_plan *p, int *closing, size_t cap)
{
    plan_stage *st = p->stage;
    size_t nc = 0;
    uint64_t low = low_of(st, sio_now_ms());
    while (st->done_n && nc < cap) {
        stage_shard *x = &st->sh[st->done[st->done_head]];
        if (x->last >= low)
            break;
        st->done_head = (st->done_head + 1) % st->total;
        st->done_n--;
        if (x->held) { /* a cache entry held for the readers: let go */
            closing[nc++] = -x->hold_pi - 1;
            x->held = 0;
            continue;
        }
        if (x->fd < 0)
            continue;
        if (x->pins == 0) {
            int c;
            let_go(st, x, &c);
            if (c >= 0)
                closing[nc++] = c;
        } else {
            x->doomed = 1;
        }
    }
    return nc;
}

/* Close what a sweep let go (no lock held): a descriptor, or (below 0)
 * the plan's shared descriptor -v - 1 held for a cache entry. */
static void close_all(sio_plan *p, const int *closing, size_t nc)
{
    for (size_t i = 0; i < nc; i++) {
        if (closing[i] >= 0)
            close(closing[i]);
        else
            plan_fd_release(p, -closing[i] - 1, 0);
    }
}

/* close_all, and a step that waits for room is asked to go on. */
static void after_sweep(sio_plan *p, const int *closing, size_t nc)
{
    void (*fn)(void *) = NULL;
    void *ud = NULL;
    close_all(p, closing, nc);
    pthread_mutex_lock(&p->mu);
    if (p->stage->blocked_ms && atomic_load(&p->parked) && p->kick) {
        atomic_store(&p->parked, 0);
        fn = p->kick;
        ud = p->kick_ud;
    }
    pthread_mutex_unlock(&p->mu);
    if (fn)
        fn(ud);
}

void stage_put(sio_plan *p, uint32_t s, int fd, uint64_t size,
               uint64_t vhash, uint64_t items)
{
    plan_stage *st = p->stage;
    int closing = -1, unused = -1;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    if (x->fd >= 0) {
        closing = x->fd; /* staged again by a later step: the newer */
        st->bytes -= x->size <= st->bytes ? x->size : st->bytes;
        st->step_bytes -= x->size <= st->step_bytes ? x->size
                                                    : st->step_bytes;
    }
    x->fd = fd;
    x->size = size;
    x->vhash = vhash;
    x->left = items;
    x->final = items == 0;
    x->doomed = 0;
    st->bytes += size;
    st->step_bytes += size;
    st->staged++;
    st->fetched_bytes += size;
    if (st->bytes > st->peak)
        st->peak = st->bytes;
    if (size > st->max_shard)
        st->max_shard = size;
    if (items == 0) /* nothing of it is read */
        let_go(st, x, &unused);
    pthread_mutex_unlock(&p->mu);
    if (closing >= 0)
        close(closing);
    if (unused >= 0)
        close(unused);
}

void stage_item(sio_plan *p, uint32_t s, uint64_t y)
{
    plan_stage *st = p->stage;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    if (!x->kind && !x->held) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    x->last = y;
    if (x->left && --x->left == 0 && !x->final) {
        x->final = 1;
        st->done[(st->done_head + st->done_n) % st->total] = s;
        st->done_n++;
    }
    pthread_mutex_unlock(&p->mu);
}

/* Room for need more bytes by the steps (mu held)? */
static int has_room(const plan_stage *st, uint64_t need)
{
    return st->step_bytes == 0 || (st->step_bytes < st->budget &&
                                   need <= st->budget - st->step_bytes);
}

int stage_room(sio_plan *p, uint64_t size, int slot)
{
    plan_stage *st = p->stage;
    int closing[64];
    size_t nc;
    int ok;
    pthread_mutex_lock(&p->mu);
    nc = sweep(p, closing, 64);
    uint64_t need = size == UINT64_MAX ? 1 : size;
    ok = has_room(st, need);
    /* A shard the order reads now, when no staged shard waits for a
     * reader to pass it (what is staged is what the order itself holds
     * open: its slots and the shards of the samples in its buffer). */
    if (!ok && slot && st->done_n == 0)
        ok = 1;
    if (!ok && !st->lag_wait && st->world) {
        uint64_t now = sio_now_ms();
        if (!st->blocked_ms)
            st->blocked_ms = now;
        /* Who holds the room: ranks far behind the furthest at once,
         * else the slowest once the grace is spent (and ranks that
         * never came). A rank whose share is read (t UINT64_MAX) holds
         * nothing and is no measure. */
        uint64_t far = 0;
        for (uint32_t r = 0; r < st->world; r++)
            if (st->rank[r].joined && !st->rank[r].detached &&
                st->rank[r].t != UINT64_MAX && st->rank[r].t > far)
                far = st->rank[r].t;
        int moved = 0;
        if (st->lag_samples && far > st->lag_samples)
            for (uint32_t r = 0; r < st->world; r++) {
                stage_rank *k = &st->rank[r];
                if (k->joined && !k->detached &&
                    k->t < far - st->lag_samples) {
                    k->detached = 1;
                    st->detaches++;
                    moved = 1;
                }
            }
        if (!moved && now - st->blocked_ms >= st->lag_grace_ms) {
            st->join_deadline_ms = 0;
            stage_rank *slow = NULL;
            for (uint32_t r = 0; r < st->world; r++) {
                stage_rank *k = &st->rank[r];
                if (k->joined && !k->detached && (!slow || k->t < slow->t))
                    slow = k;
            }
            if (slow && slow->t < far) {
                slow->detached = 1;
                st->detaches++;
            }
            st->blocked_ms = now; /* the next one after another grace */
        }
        nc += sweep(p, closing + nc, 64 - nc);
        ok = has_room(st, need);
    }
    if (ok)
        st->blocked_ms = 0;
    else if (!st->blocked_ms)
        st->blocked_ms = sio_now_ms();
    pthread_mutex_unlock(&p->mu);
    close_all(p, closing, nc);
    return ok;
}

sio_code stage_take(sio_plan *p, uint32_t s, plan_waiter *w, int *fd,
                    char *err, size_t errlen)
{
    plan_stage *st = p->stage;
    void (*fn)(void *) = NULL;
    void *ud = NULL;
    *fd = -1;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    if (x->fd >= 0) {
        x->pins++;
        *fd = x->fd;
        pthread_mutex_unlock(&p->mu);
        return SIO_OK;
    }
    if (x->failed) {
        x->failed = 0;
        snprintf(err, errlen, "shard %" PRIu32 " was fetched again for a "
                 "reader behind the others and failed: %s", s, st->why);
        pthread_mutex_unlock(&p->mu);
        return SIO_ERR_CHANGED;
    }
    if (!x->queued) {
        if (!p->restage_fn) {
            snprintf(err, errlen, "shard %" PRIu32 " was let go by the "
                     "epoch's staging and cannot be fetched again", s);
            pthread_mutex_unlock(&p->mu);
            return SIO_ERR_CHANGED;
        }
        if (st->restage_bytes > st->budget ||
            x->size > st->budget - st->restage_bytes) {
            st->refused++;
            snprintf(err, errlen, "shard %" PRIu32 " was let go and the "
                     "room to fetch shards again for readers behind "
                     "(%" PRIu64 " bytes) is taken: come back shortly", s,
                     st->budget);
            pthread_mutex_unlock(&p->mu);
            return SIO_ERR_BUSY;
        }
        st->restage_bytes += x->size; /* reserved until it is let go */
        x->restaged = 1;
        x->queued = 1;
        st->want[st->nwant++] = s;
        fn = p->restage_fn;
        ud = p->restage_ud;
    }
    plan_link_waiter(p, w);
    pthread_mutex_unlock(&p->mu);
    if (fn)
        fn(ud);
    return SIO_ERR_AGAIN;
}

void stage_hold(sio_plan *p, uint32_t s, int pi, uint64_t items)
{
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &p->stage->sh[s];
    x->held = 1;
    x->hold_pi = pi;
    x->left = items;
    x->final = items == 0;
    int now = items == 0;
    if (now)
        x->held = 0;
    pthread_mutex_unlock(&p->mu);
    if (now)
        plan_fd_release(p, pi, 0);
}

sio_code stage_take_instead(sio_plan *p, uint32_t s, plan_waiter *w,
                            int *fd, char *err, size_t errlen)
{
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &p->stage->sh[s];
    if (!x->size && x->fd < 0 && !x->queued)
        x->size = (uint64_t)p->files[s].size; /* never staged: as planned */
    pthread_mutex_unlock(&p->mu);
    return stage_take(p, s, w, fd, err, errlen);
}

void stage_unpin(sio_plan *p, uint32_t s)
{
    plan_stage *st = p->stage;
    int closing = -1;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    if (x->pins)
        x->pins--;
    if (x->pins == 0 && x->doomed && x->fd >= 0)
        let_go(st, x, &closing);
    int gone = x->fd < 0 && x->pins == 0;
    pthread_mutex_unlock(&p->mu);
    if (closing >= 0)
        close(closing);
    if (gone)
        after_sweep(p, NULL, 0);
}

void stage_reader(sio_plan *p, uint32_t rank, uint32_t world, uint64_t t,
                  int open)
{
    plan_stage *st = p->stage;
    int closing[64];
    size_t nc = 0;
    pthread_mutex_lock(&p->mu);
    uint64_t released = st->released;
    if (!st->world && open > 0 && world && world <= STAGE_WORLD_MAX) {
        st->rank = calloc(world, sizeof *st->rank);
        if (st->rank) {
            st->world = world;
            st->join_deadline_ms = sio_now_ms() + st->join_ms;
        }
    }
    if (st->world && world == st->world && rank < world) {
        stage_rank *k = &st->rank[rank];
        if (open > 0) {
            if (!k->detached && !k->open && k->gone_ms &&
                sio_now_ms() - k->gone_ms >= st->rejoin_ms)
                st->detaches++; /* its grace ran out while it was away */
            k->open++;
            k->joined = 1;
            k->detached = 0;
            k->gone_ms = 0;
        } else if (open < 0 && k->open && --k->open == 0) {
            k->gone_ms = sio_now_ms();
            if (!k->gone_ms)
                k->gone_ms = 1;
        }
        k->t = t;
        nc = sweep(p, closing, 64);
    }
    int any = st->released != released;
    pthread_mutex_unlock(&p->mu);
    if (nc || any)
        after_sweep(p, closing, nc);
}

int stage_passed(sio_plan *p, uint32_t s, uint64_t t)
{
    pthread_mutex_lock(&p->mu);
    const stage_shard *x = &p->stage->sh[s];
    int passed = x->final && x->last < t;
    pthread_mutex_unlock(&p->mu);
    return passed;
}

/* Public: settings, the restage work, counters. */

void sio_plan_set_stage(sio_plan *p, const sio_plan_stage_config *c)
{
    if (!p->stage)
        return;
    pthread_mutex_lock(&p->mu);
    plan_stage *st = p->stage;
    st->join_ms = c->join_ms;
    st->rejoin_ms = c->rejoin_ms;
    st->lag_grace_ms = c->lag_grace_ms;
    st->lag_wait = c->lag_wait;
    st->lag_samples = c->lag_samples;
    pthread_mutex_unlock(&p->mu);
}

void sio_plan_set_restage(sio_plan *p, void (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&p->mu);
    p->restage_fn = fn;
    p->restage_ud = fn ? ud : NULL;
    pthread_mutex_unlock(&p->mu);
}

void sio_plan_restage(sio_plan *p, sio_io *io, const sio_shardlist *list)
{
    plan_stage *st = p->stage;
    plan_refill_run(p);
    if (!st)
        return;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (!st->nwant) {
            pthread_mutex_unlock(&p->mu);
            return;
        }
        uint32_t s = st->want[--st->nwant];
        uint64_t want_size = st->sh[s].size, want_v = st->sh[s].vhash;
        pthread_mutex_unlock(&p->mu);

        int fd = stage_spare(p);
        uint64_t size = 0, vh = 0;
        sio_error e = {SIO_OK, ""};
        sio_code rc = stage_fetch(io, sio_shardlist_url(list, s), want_size,
                                  st->sh[s].kind == STAGE_DECOMPRESS, &fd,
                                  &size, &vh, &e);
        if (rc == SIO_OK && (size != want_size ||
                             (want_v && vh && vh != want_v)))
            rc = sio_seterr(&e, SIO_ERR_CHANGED,
                            "the object is not the one the epoch's plan "
                            "was made from (%" PRIu64 " bytes, %s "
                            "validator)", size,
                            want_v && vh && vh != want_v ? "another"
                                                         : "the same");
        pthread_mutex_lock(&p->mu);
        stage_shard *x = &st->sh[s];
        x->queued = 0;
        if (rc == SIO_OK) {
            x->fd = fd;
            x->doomed = 1; /* let go once its readers let go of it */
            st->bytes += size;
            st->restages++;
            st->fetched_bytes += size;
            if (st->bytes > st->peak)
                st->peak = st->bytes;
            fd = -1;
        } else {
            x->failed = 1;
            x->restaged = 0;
            st->restage_bytes -= want_size <= st->restage_bytes
                                     ? want_size
                                     : st->restage_bytes;
            snprintf(st->why, sizeof st->why, "%s", e.msg);
        }
        plan_wake_all(p);
        pthread_mutex_unlock(&p->mu);
        if (fd >= 0)
            close(fd);
    }
}

void sio_plan_get_stage_stats(sio_plan *p, sio_plan_stage_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!p->stage)
        return;
    pthread_mutex_lock(&p->mu);
    plan_stage *st = p->stage;
    out->staging = 1;
    out->budget = st->budget;
    out->bytes = st->bytes; /* held: spares too */
    out->peak = st->peak;
    out->max_shard = st->max_shard;
    out->staged = st->staged;
    out->fetched_bytes = st->fetched_bytes;
    out->restages = st->restages;
    out->released = st->released;
    out->detaches = st->detaches;
    out->refused = st->refused;
    out->held = st->done_n;
    out->spare = stage_spare_bytes();
    out->blocked = st->blocked_ms != 0;
    pthread_mutex_unlock(&p->mu);
}
