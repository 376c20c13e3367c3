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
 * the budget; the shards the order reads now are staged beyond it while
 * the shards that wait only for readers take no more than the budget (the
 * rest is what the order holds open, its slots and the shards of the
 * samples in its buffer: no reader can give that back). When ranks hold
 * more (the steps wait and readers wait for the steps), a rank is
 * detached: at once when it is more than lag_samples behind the furthest
 * rank, else after lag_grace_ms; under --lag-policy wait nobody is. A detached rank, a late one or a
 * resume from before low reads on: a shard let go is fetched again for it
 * (restage) by the planner, within a second budget of the same size,
 * and beyond it by what readers hold now up to the shards the order
 * holds open at a reader's place (restage_room; a reader beyond that is
 * told to come back: SIO_ERR_BUSY). So at most budget + interleave x the
 * largest shard + the pages of the buffer's samples (shards thinned:
 * below; a mixed epoch's shards with samples in the buffer whole) are
 * staged by the steps, and as much for readers behind
 * (docs/architecture.md "Memory"). What waits only for readers is the
 * shards done that a counting rank has not passed and, of the others,
 * the items decided that a counting rank has still to read. A shard
 * fetched again is fetched by a job (restage_start), on the jobs'
 * threads: no planner thread waits for the store. When the reader's own
 * items of it from where it is (and every other rank's there) are few
 * (a client resuming a little before where its cut stream was, near the
 * epoch's end where the last items of many shards leave the buffer),
 * only their byte ranges are fetched (ranged_of: at most half the
 * shard), as a seek would; a shard larger than a quarter of the budget
 * has one window of them fetched at a time (window_of), never the whole
 * shard. The memfd is partial and serves readers within its cover, a
 * reader before that has the items between fetched into it too, and a
 * reader beyond it the next window (into it, or in its place when no
 * reader holds it).
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
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core_int.h"
#include "plan/plan_int.h"
#include "store/backend_ops.h"
#include "store/store_int.h"

/* Memfds let go, kept for the next shard to be written into (a shard's
 * pages are allocated once, not per shard and epoch): at most SPARES_MAX
 * of them and a plan's budget of bytes, server-wide, oldest first. Until
 * it is written again a spare still holds its shard, whole: a stream
 * that comes back for a shard just let go (a client resuming after a cut
 * connection, from before the position its stream had reached) takes it
 * back from here instead of fetching it again (spare_revive). */
#define SPARES_MAX 64u
typedef struct spare {
    int fd;
    uint64_t size, uhash, vhash; /* what it holds */
} spare;
static struct {
    pthread_mutex_t mu;
    spare s[SPARES_MAX]; /* oldest first */
    size_t n;
    uint64_t bytes;
} spares = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Take spare i out (spares.mu held): its fd. */
static int spare_take(size_t i)
{
    int fd = spares.s[i].fd;
    spares.bytes -= spares.s[i].size;
    spares.n--;
    memmove(&spares.s[i], &spares.s[i + 1], (spares.n - i) * sizeof *spares.s);
    return fd;
}

/* Keep fd (size bytes of the shard uhash, whole when vhash is not 0) as a
 * spare within cap bytes: 1, else 0 (the caller closes it). */
static int spare_put(int fd, uint64_t size, uint64_t cap, uint64_t uhash,
                     uint64_t vhash)
{
    int kept = 0, old[SPARES_MAX];
    size_t nold = 0;
    pthread_mutex_lock(&spares.mu);
    /* The newest are kept: the oldest make room (a shard let go last is
     * the one a resuming client may come back for). */
    while (spares.n && size <= cap &&
           (spares.n == SPARES_MAX || spares.bytes > cap - size))
        old[nold++] = spare_take(0);
    if (spares.n < SPARES_MAX && spares.bytes <= cap &&
        size <= cap - spares.bytes) {
        spares.s[spares.n++] = (spare){fd, size, uhash, vhash};
        spares.bytes += size;
        kept = 1;
    }
    pthread_mutex_unlock(&spares.mu);
    for (size_t i = 0; i < nold; i++)
        close(old[i]);
    return kept;
}

/* The spare that still holds the whole shard uhash of size bytes and
 * validator vhash (not 0), taken out; -1 when none does. */
static int spare_revive(uint64_t uhash, uint64_t vhash, uint64_t size)
{
    int fd = -1;
    if (!vhash)
        return -1;
    pthread_mutex_lock(&spares.mu);
    for (size_t i = spares.n; i-- > 0;)
        if (spares.s[i].uhash == uhash && spares.s[i].vhash == vhash &&
            spares.s[i].size == size) {
            fd = spare_take(i);
            break;
        }
    pthread_mutex_unlock(&spares.mu);
    return fd;
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

/* A ranged restage (ranged_of): Y positions looked at, items of the
 * shard and ranges asked of the store at most; two items fewer than
 * RANGED_GAP bytes apart are asked for as one range. */
#define RANGED_SCAN_MAX 16384u
#define RANGED_ITEMS_MAX 1024u
#define RANGED_MAX 32u
#define RANGED_GAP (64u << 10)
/* A ranged restage asks for its next ranges this many at once (each
 * answer's latency overlaps the others'). */
#define RANGED_AHEAD 8u
typedef struct stage_range {
    uint64_t a, b; /* bytes [a, b) of the shard */
} stage_range;
/* Ranks of the world the plan follows (a larger world is not followed:
 * its readers count as behind). */
#define STAGE_WORLD_MAX 65536u

static void jobs_free(plan_stage *st);
static void let_go(plan_stage *st, stage_shard *x, int *closing);
static void thin_reset(plan_stage *st, stage_shard *x);
static void rhold_close(struct stage_rhold *h);
static void rholds_close(struct stage_rhold *h);

plan_stage *stage_new(size_t total)
{
    plan_stage *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    pthread_cond_init(&st->cv, NULL);
    size_t n = total ? total : 1;
    st->sh = calloc(n, sizeof *st->sh);
    st->done = calloc(n, sizeof *st->done);
    if (!st->sh || !st->done) {
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
    for (size_t i = 0; st->sh && i < st->total; i++) {
        stage_shard *x = &st->sh[i];
        /* A partial memfd (ranges fetched again, or thinned) is kept for
         * its pages, never taken back whole. */
        if (x->fd >= 0 &&
            !spare_put(x->fd, x->size, st->budget, x->uhash,
                       x->partial ? 0 : x->vhash))
            close(x->fd);
        free(x->log);
        free(x->dead);
    }
    rholds_close(st->rdrop);
    rholds_close(st->rheld);
    free(st->sh);
    free(st->thinq);
    free(st->done);
    for (unsigned i = 0; i < st->nw; i++)
        free(st->w[i].rank);
    jobs_free(st);
    pthread_cond_destroy(&st->cv);
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

/* What a spare holds: shard url staged as kind (a compressed shard's
 * memfd holds it decompressed). */
static uint64_t uhash_of(const char *url, int kind)
{
    uint64_t h = vhash_of(url) ^ ((uint64_t)kind << 56);
    return h ? h : 1;
}

/* n bytes into fd at byte at (-1: at its position). */
static sio_code write_all(int fd, const unsigned char *p, size_t n,
                          int64_t at, sio_error *err)
{
    while (n > 0) {
        ssize_t w = at < 0 ? write(fd, p, n) : pwrite(fd, p, n, (off_t)at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return sio_seterr(err, SIO_ERR_NOMEM,
                              "cannot stage a shard in memory: %s",
                              w < 0 ? strerror(errno) : "short write");
        p += w;
        n -= (size_t)w;
        if (at >= 0)
            at += w;
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

/* A shard's bytes from the store, as staged: the object's own, or a
 * compressed one's decompressed (dec), at most cap of them. */
typedef struct stage_src {
    const char *url;
    const sio_backend_ops *ops;
    void *ctx;
    sio_stream *in;
    struct archive *ar;
    la_src la;
    int dec;
    /* A zip: its samples as a tar (the shard reader's tap), handed out
     * from zout; zrc: how the shard ended once zout is out. */
    sio_shard *zsh;
    sio_wbuf zout;
    size_t zpos;
    int zend;
    sio_code zrc;
    size_t zcut;    /* 1 + where the reader's cut or end blocks begin in
                       zout (zcutlen bytes) */
    size_t zcutlen;
    char zerr[640];
    uint64_t cap, got;
    uint64_t vopen; /* the validator's hash when opened (0: none) */
    int iszip;      /* (dec) its bytes are a zip's, not a compressed tar */
    /* Bytes made again past where a restart had to reach (src_resume of
     * a decompressed or zip source): handed out first, not counted
     * again. */
    unsigned char *pend;
    size_t pend_len;
    char shown[512];
} stage_src;

/* The name of the zip reader's tap's cut block (shard.c tap_cut). */
#define ZIP_CUT "__shardcast_cut__"

/* The zip reader's tap: its tar into zout. */
static sio_code zip_tap(void *ud, const void *p, size_t n)
{
    stage_src *s = ud;
    /* What the reader writes where it fails: the half header block of a
     * failure inside a sample, the end blocks of one between samples (its
     * tar ends there). Noted, so that a failure that may pass takes it
     * back (the source is read again: src_restart): else the tar would
     * end cleanly there, and the samples after it would be lost without
     * a word. */
    static const unsigned char zeros[2 * SIO_TAR_BLOCK];
    if ((n == SIO_TAR_BLOCK / 2 && n >= sizeof ZIP_CUT - 1 &&
         memcmp(p, ZIP_CUT, sizeof ZIP_CUT - 1) == 0) ||
        (n == sizeof zeros && memcmp(p, zeros, n) == 0))
        s->zcut = s->zout.len + 1, s->zcutlen = n;
    return sio_wbuf_append(&s->zout, p, n);
}

/* A shard being fetched into memory on a thread of its own (a job): the
 * index pass reads its bytes as they arrive (job_wait fetches what the
 * pass asks for, on the pass's thread), and lets its groups in to the
 * order as it goes (job_progress). */
struct stage_job {
    struct stage_job *next;
    struct stage_job *qnext; /* the workers' queue */
    sio_plan *p;
    sio_io *io;
    uint32_t s;
    sio_index_entry *e;
    char *url;
    sio_shard_limits limits;
    sio_logger log;
    int fd;
    int dec;
    int zip;            /* a zip, staged as the tar of its samples */
    stage_src src;
    unsigned char *buf;
    uint64_t avail;     /* bytes written to fd */
    uint64_t reserve;   /* room taken for bytes still to come */
    int ended;          /* the source ended (src_rc: how) */
    sio_code src_rc;
    sio_error src_err;
    unsigned resumes;
    uint64_t vfirst;  /* the object's validator hash when first opened */
    int checked, foreign; /* the index's kind looked at; not the stream
                             staged (a compressed shard staged raw): none
                             of its groups is let in */
    _Atomic uint64_t *ready;
    /* Flow (a plain tar a step stages: STAGE_AHEAD): the group the order
     * takes next (stage_taken), the groups indexed so far (the last one
     * held back: it may end at the object's end), and whether the fetch
     * holds now. */
    int flow;
    uint64_t ahead;     /* (flow) bytes it may run past the order */
    _Atomic uint64_t taken;
    _Atomic uint64_t indexed;
    int holding;
    /* The end, under the plan's mu. */
    int done;
    stage_result res;
    /* A shard let go, fetched again for a reader behind (no index pass):
     * the object the plan was made from (want_size, want_v), its byte
     * ranges rg[0..nr) (a whole shard: one range, [0, want_size)), which
     * hold its items at Y >= from. restage 2: the object's own bytes
     * (ranged_run); 1: a compressed shard or a zip made again from its
     * start, the bytes of its ranges kept (restage_run). extend: into the memfd the shard has (pinned for
     * the job), else into a new one. want_mem: the room reserved. */
    int restage;
    uint64_t want_size, want_v;
    int guess;  /* want_size a guess: the fetch finds the size (within the
                   staging budget) */
    int adopt;  /* want_v 0: the validator of the first answer is taken
                   (a shard left to its readers from a loaded index:
                   stage_defer), every later range is held to it */
    int extend;
    size_t nr;
    stage_range rg[RANGED_MAX];
    uint64_t from, want_mem;
    uint64_t to;    /* the highest Y index whose item the ranges hold */
    int forward;    /* an extension with the items after to's of before */
    /* (restage 1 of a shard larger than the budget) the source the last
     * window left open, taken from the shard (or NULL), and whether this
     * one's is left open for the next */
    struct stage_rhold *hold;
    int keep_src;
};

/* Jobs ended and not reaped (none runs: each holds a reference to the
 * plan). */
static void jobs_free(plan_stage *st)
{
    while (st->jobs) {
        struct stage_job *j = st->jobs;
        st->jobs = j->next;
        free(j->url);
        free(j);
    }
}

/* The object's size the store told (0: none). */
static uint64_t src_size(stage_src *s)
{
    sio_objinfo oi;
    if (!s->in || !s->in->ops->info)
        return 0;
    memset(&oi, 0, sizeof oi);
    oi.size = UINT64_MAX;
    s->in->ops->info(s->in, &oi);
    return oi.size == UINT64_MAX ? 0 : oi.size;
}

static uint64_t src_validator(stage_src *s)
{
    sio_objinfo oi;
    if (!s->in || !s->in->ops->info)
        return 0;
    memset(&oi, 0, sizeof oi);
    s->in->ops->info(s->in, &oi);
    return vhash_of(oi.validator);
}

/* What a source makes of the object: its bytes, decompressed, or (a
 * zip) the tar of its samples. */
enum { SRC_RAW = 0, SRC_DEC = 1, SRC_ZIP = 2 };

static sio_code src_open(stage_src *s, sio_io *io, const char *url,
                         uint64_t cap, int mode,
                         const sio_shard_limits *limits, sio_error *err)
{
    int dec = mode == SRC_DEC;
    memset(s, 0, sizeof *s);
    s->url = url;
    s->cap = cap;
    s->dec = dec;
    sio_url_redact(url, s->shown, sizeof s->shown);
    sio_code rc = sio_io_backend(io, url, &s->ops, &s->ctx, err);
    if (rc == SIO_OK)
        rc = s->ops->open(s->ctx, url, 0, &s->in, err);
    if (rc == SIO_OK)
        s->vopen = src_validator(s);
    if (rc == SIO_OK && mode == SRC_ZIP) {
        /* The shard reader owns the stream from here (it closes it). */
        sio_wbuf_init(&s->zout, (size_t)1 << 30);
        rc = sio_shard_open_stream(io, s->in, url, 0, limits, &s->zsh, err);
        if (rc == SIO_OK)
            sio_shard_set_tar_tap(s->zsh, zip_tap, s);
        else
            s->in = NULL; /* closed by the failed open */
    }
    if (rc == SIO_OK && dec) {
        struct archive_entry *ent = NULL;
        s->la = (la_src){.in = s->in, .buf = malloc(STAGE_READ),
                         .rc = SIO_OK};
        s->ar = archive_read_new();
        if (!s->la.buf || !s->ar)
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        else if (archive_read_support_filter_all(s->ar) != ARCHIVE_OK ||
                 archive_read_support_format_raw(s->ar) != ARCHIVE_OK ||
                 archive_read_open(s->ar, &s->la, NULL, la_read, NULL) !=
                     ARCHIVE_OK ||
                 archive_read_next_header(s->ar, &ent) != ARCHIVE_OK)
            rc = sio_seterr(err, s->la.rc ? s->la.rc : SIO_ERR_FORMAT,
                            "url=%s: %s", s->shown,
                            s->la.rc ? s->la.err
                            : archive_error_string(s->ar)
                                ? archive_error_string(s->ar)
                                : "cannot decompress");
    }
    return rc;
}

/* The next bytes: *got of them at *out (0 at the end), read into buf (at
 * most STAGE_READ), or (a zip) the source's own tar buffer, not copied. */
static sio_code src_read(stage_src *s, unsigned char *buf,
                         const unsigned char **out, size_t *got,
                         sio_error *err)
{
    sio_code rc;
    *got = 0;
    *out = buf;
    if (s->pend_len) {
        size_t n = s->pend_len < STAGE_READ ? s->pend_len : STAGE_READ;
        memcpy(buf, s->pend, n);
        memmove(s->pend, s->pend + n, s->pend_len - n);
        s->pend_len -= n;
        *got = n;
        return SIO_OK;
    }
    if (s->zsh) {
        /* The tar the zip reader's tap wrote, sample by sample; the
         * shard's end (or failure) once it is all out. */
        while (s->zpos == s->zout.len && !s->zend) {
            const sio_sample *smp = NULL;
            s->zout.len = s->zpos = 0;
            s->zcut = 0;
            sio_code r = sio_shard_next(s->zsh, &smp);
            /* A failure that may pass: the members read are the same when
             * the zip is read again, the cut block is not. */
            if ((r == SIO_ERR_IO || r == SIO_ERR_RETRY) && s->zcut &&
                s->zcut - 1 + s->zcutlen == s->zout.len)
                s->zout.len = s->zcut - 1;
            if (r == SIO_OK && smp) {
                sio_sample_unref(smp);
            } else if (r == SIO_OK) {
                s->zend = 1;
            } else if (r != SIO_ERR_SAMPLE) {
                s->zend = 1;
                s->zrc = r;
                snprintf(s->zerr, sizeof s->zerr, "%s",
                         sio_shard_errmsg(s->zsh));
            }
        }
        if (s->zpos == s->zout.len) {
            if (s->zrc)
                return sio_seterr(err, s->zrc, "%s", s->zerr);
            return SIO_OK; /* the end */
        }
        size_t n = s->zout.len - s->zpos;
        *out = s->zout.data + s->zpos;
        s->zpos += n;
        *got = n;
    } else if (s->ar) {
        /* In the filters' own blocks: a stream cut short gives the
         * blocks before the cut, as a shard reader's reads get them. */
        la_ssize_t n = archive_read_data(s->ar, buf, STAGE_LA_READ);
        if (n < 0)
            return sio_seterr(err, s->la.rc ? s->la.rc : SIO_ERR_FORMAT,
                              "url=%s: %s", s->shown,
                              s->la.rc ? s->la.err
                              : archive_error_string(s->ar)
                                  ? archive_error_string(s->ar)
                                  : "corrupt compressed data");
        *got = (size_t)n;
    } else {
        rc = s->in->ops->read(s->in, buf, STAGE_READ, got);
        if (rc)
            return sio_seterr(err, rc, "url=%s: %s", s->shown,
                              s->in->ops->errmsg(s->in));
    }
    if ((uint64_t)*got > s->cap - s->got)
        return sio_seterr(err, SIO_ERR_LIMIT,
                          "url=%s is larger than the staging budget "
                          "(%" PRIu64 " bytes%s)", s->shown, s->cap,
                          s->dec ? ", decompressed" : "");
    if (s->ar && s->got == 0 && *got >= 4 && buf[0] == 'P' &&
        buf[1] == 'K' && buf[2] == 3 && buf[3] == 4) {
        s->iszip = 1;
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "url=%s is a zip: its members are not staged",
                          s->shown);
    }
    s->got += *got;
    return SIO_OK;
}

static uint64_t src_close(stage_src *s, int whole);

/* A decompressed or zip source after a failure that may pass: the object
 * again from its start, the same version, its output made again up to
 * where it stopped (decompression and the zip's tar are the same bytes
 * every time) and dropped; what the last read made past that is handed
 * out next (pend). buf: STAGE_READ bytes of scratch. */
static sio_code src_restart(stage_src *s, sio_io *io, const char *url,
                            uint64_t cap, const sio_shard_limits *limits,
                            unsigned char *buf, uint64_t want,
                            uint64_t vopen, int mode, sio_error *err)
{
    src_close(s, 0);
    sio_code rc = src_open(s, io, url, cap, mode, limits, err);
    if (rc == SIO_OK && vopen && s->vopen && s->vopen != vopen)
        rc = sio_seterr(err, SIO_ERR_CHANGED, "url=%s changed while it "
                        "was fetched", s->shown);
    while (rc == SIO_OK && s->got < want) {
        const unsigned char *data = buf;
        size_t got = 0;
        uint64_t before = s->got;
        rc = src_read(s, buf, &data, &got, err);
        if (rc)
            break;
        if (got == 0) {
            rc = sio_seterr(err, SIO_ERR_CHANGED, "url=%s ended at %" PRIu64
                            " bytes where it had made %" PRIu64 " before",
                            s->shown, s->got, want);
            break;
        }
        if (s->got > want && s->zsh) {
            /* A zip's tar is still in zout: handed out again from there. */
            size_t keep = (size_t)(s->got - want);
            s->zpos -= keep;
            s->got -= keep;
        } else if (s->got > want) {
            /* Decompressed into buf (one read's worth): kept aside. */
            size_t keep = (size_t)(s->got - want);
            size_t skip = (size_t)(want - before);
            s->pend = malloc(keep);
            if (!s->pend)
                return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            memcpy(s->pend, data + skip, keep);
            s->pend_len = keep;
        }
    }
    return rc;
}

/* After a failure that may pass: the object again from where its bytes
 * stopped (want bytes made), the same version (vopen: its validator's
 * hash when first opened, 0: none); a decompressed or zip source (mode)
 * by src_restart. A restart that fails leaves s closed: the next one
 * starts from the same want. */
static sio_code src_resume(stage_src *s, sio_io *io, const char *url,
                           uint64_t cap, const sio_shard_limits *limits,
                           unsigned char *buf, uint64_t want,
                           uint64_t vopen, int mode, sio_error *err)
{
    if (mode != SRC_RAW)
        return src_restart(s, io, url, cap, limits, buf, want, vopen, mode,
                           err);
    if (s->in)
        s->in->ops->close(s->in);
    s->in = NULL;
    sio_code rc = s->ops->open(s->ctx, s->url, s->got, &s->in, err);
    if (rc == SIO_OK && s->vopen && src_validator(s) &&
        src_validator(s) != s->vopen)
        rc = sio_seterr(err, SIO_ERR_CHANGED, "url=%s changed while it "
                        "was fetched", s->shown);
    return rc;
}

/* The store's validator's hash (whole: the object was read to its end,
 * else 0), and everything let go. */
static uint64_t src_close(stage_src *s, int whole)
{
    uint64_t vh = whole ? src_validator(s) : 0;
    if (s->zsh) {
        sio_shard_close(s->zsh); /* and its stream */
        s->in = NULL;
        sio_wbuf_free(&s->zout);
    }
    if (s->ar)
        archive_read_free(s->ar);
    free(s->la.buf);
    free(s->pend);
    if (s->in)
        s->in->ops->close(s->in);
    memset(s, 0, sizeof *s);
    return vh;
}

/* A compressed shard or a zip larger than the budget is made again a
 * window of its items at a time for readers that reach it (stage_take):
 * each window's restage decompresses (or reads the zip) from the
 * object's start to its last range, so the windows of one shard read in
 * turn would make it over and over. The source a window stopped at is
 * held on the shard instead (one connection and the decompressor's
 * state), and the next window that starts at or after where it stopped
 * goes on from there: the shard is made once for its windows forward.
 * One behind it opens the object again; one that fails closes it. The
 * shard keeps it when its memfd is let go between windows (a reader
 * passed one window before it asked for the next). At most RHOLD_MAX are
 * held per plan, each at most RHOLD_MS since its window (closed when the
 * next restage starts, or with the plan). */
#define RHOLD_MAX 8u
#define RHOLD_MS 30000u

struct stage_rhold {
    struct stage_rhold *next; /* (plan_stage.rdrop, or the held list) */
    struct stage_rhold *prev; /* (the held list: newest first) */
    stage_src src;
    char *url;  /* (src.url points here) */
    sio_io *io; /* busy while held */
    int mode;
    uint32_t s;
    uint64_t pos; /* bytes made */
    uint64_t at;  /* when its window ended (ms) */
};

static void rhold_close(struct stage_rhold *h)
{
    if (!h)
        return;
    src_close(&h->src, 0);
    if (h->io)
        sio_io_busy_add(h->io, -1);
    free(h->url);
    free(h);
}

/* Shard x's held source off it and off the held list (mu held). */
static struct stage_rhold *rhold_take(plan_stage *st, stage_shard *x)
{
    struct stage_rhold *h = x->rhold;
    if (!h)
        return NULL;
    if (h->prev)
        h->prev->next = h->next;
    else
        st->rheld = h->next;
    if (h->next)
        h->next->prev = h->prev;
    else
        st->rheld_tail = h->prev;
    h->next = h->prev = NULL;
    st->nheld--;
    x->rhold = NULL;
    return h;
}

/* The held sources past RHOLD_MS, or beyond RHOLD_MAX, to rdrop (mu
 * held; the oldest are at the tail). */
static void rholds_expire(plan_stage *st, uint64_t now)
{
    while (st->rheld_tail &&
           (st->nheld > RHOLD_MAX || now - st->rheld_tail->at >= RHOLD_MS)) {
        struct stage_rhold *h = rhold_take(st, &st->sh[st->rheld_tail->s]);
        h->next = st->rdrop;
        st->rdrop = h;
    }
}

/* Hold h on shard s (mu held; it has none). */
static void rhold_put(plan_stage *st, uint32_t s, struct stage_rhold *h)
{
    h->s = s;
    h->at = sio_now_ms();
    h->prev = NULL;
    h->next = st->rheld;
    if (st->rheld)
        st->rheld->prev = h;
    else
        st->rheld_tail = h;
    st->rheld = h;
    st->nheld++;
    st->sh[s].rhold = h;
    rholds_expire(st, h->at);
}

/* Close a list of held sources (no lock held). */
static void rholds_close(struct stage_rhold *h)
{
    while (h) {
        struct stage_rhold *n = h->next;
        rhold_close(h);
        h = n;
    }
}

/* Close the held sources let go, and those held too long. */
static void rholds_reap(sio_plan *p)
{
    pthread_mutex_lock(&p->mu);
    rholds_expire(p->stage, sio_now_ms());
    struct stage_rhold *h = p->stage->rdrop;
    p->stage->rdrop = NULL;
    pthread_mutex_unlock(&p->mu);
    rholds_close(h);
}

/* A memfd to write a shard into from its start: fd (a spare), else a new
 * one; -1 with err. */
static int stage_memfd(int fd, sio_error *err)
{
    if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        fd = memfd_create("shardcast-stage", MFD_CLOEXEC);
    if (fd < 0)
        sio_seterr(err, SIO_ERR_NOMEM, "cannot stage a shard in memory: "
                   "memfd_create: %s", strerror(errno));
    return fd;
}


/* More than the budget staged now? (mu held; after bytes moved) A fetch
 * that holds is told when that ends. */
static void press_note(plan_stage *st)
{
    int now = st->budget && st->bytes > st->budget;
    if (atomic_load(&st->pressed) != now) {
        atomic_store(&st->pressed, now);
        if (!now)
            pthread_cond_broadcast(&st->cv);
    }
}

/* Tell a step that waits for the jobs that one moved. */
static void jobs_moved(sio_plan *p)
{
    plan_stage *st = p->stage;
    atomic_fetch_add(&st->jobgen, 1);
    if (atomic_load(&st->waiting)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Wait before retry `attempt` of job j (STAGE_RETRY_BASE_MS doubling,
 * at most STAGE_RETRY_MAX_MS), in slices: 1 when the plan stopped
 * meanwhile. */
static void workers_retrying(int delta);

static int job_backoff(struct stage_job *j, unsigned attempt)
{
    uint64_t ms = STAGE_RETRY_BASE_MS;
    for (unsigned i = 0; i < attempt && ms < STAGE_RETRY_MAX_MS; i++)
        ms *= 2;
    if (ms > STAGE_RETRY_MAX_MS)
        ms = STAGE_RETRY_MAX_MS;
    uint64_t end = sio_now_ms() + ms;
    int stopped = 1;
    workers_retrying(1);
    while (!atomic_load(&j->p->failed)) {
        uint64_t now = sio_now_ms();
        if (now >= end) {
            stopped = 0;
            break;
        }
        uint64_t left = end - now < 50 ? end - now : 50;
        struct timespec ts = {0, (long)(left * 1000000)};
        nanosleep(&ts, NULL);
    }
    workers_retrying(-1);
    return stopped;
}

/* Before job j's next resume (j->resumes of them so far), after a
 * failure that may pass (why): none for the first STAGE_RESUMES, then
 * logged and waited for (job_backoff). 1 when the plan stopped. */
static int job_retry_wait(struct stage_job *j, const char *why)
{
    if (j->resumes < STAGE_RESUMES)
        return 0;
    char shown[512];
    sio_url_redact(j->url, shown, sizeof shown);
    SIO_LOG(&j->log, SIO_LOG_WARN,
            "event=shard_retry url=%s at_byte=%" PRIu64 " attempt=%u "
            "reason=\"%s\"", shown, j->avail, j->resumes + 1, why);
    return job_backoff(j, j->resumes - STAGE_RESUMES);
}

/* The most bytes job j's source may make: the budget, or (a fetch that
 * holds ahead of the order, and is thinned behind its readers) any. */
static uint64_t job_cap(const struct stage_job *j)
{
    return j->flow ? UINT64_MAX : j->p->stage->budget;
}

/* Where the order reads job j's shard: the offset of the group it takes
 * next, when that group is indexed (else UINT64_MAX: the order waits at
 * the fetch's front, nothing holds it). */
static uint64_t job_base(struct stage_job *j)
{
    sio_index_group g;
    uint64_t at = atomic_load(&j->taken);
    /* (the last group indexed is let in only once the next one is seen:
     * an order that waits for it waits for the fetch) */
    if (at + 1 >= atomic_load(&j->indexed) ||
        !sio_index_group_get(j->e, at, &g))
        return UINT64_MAX;
    return g.offset;
}

/* Groups of job j's shard the order may take now, of `groups` indexed
 * (the last one held back: it may end at the object's end): all, unless
 * more than the budget is staged; then those that end within half of
 * its ahead bytes past where the order reads (at least the one it takes
 * next), so that the order asks again before the fetch holds. */
static uint64_t job_publishable(struct stage_job *j, uint64_t groups)
{
    uint64_t r = groups ? groups - 1 : 0;
    if (!j->flow || !atomic_load(&j->p->stage->pressed))
        return r;
    uint64_t at = atomic_load(&j->taken), base = job_base(j);
    if (base == UINT64_MAX || at >= r)
        return r;
    uint64_t limit = base + j->ahead / 2, lo = at + 1, hi = r;
    /* the most groups [0, n) whose last ends within limit: groups are in
     * the shard's order, so their ends grow */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        sio_index_group g;
        if (sio_index_group_get(j->e, mid - 1, &g) && g.end <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Let in to the order what job j may publish now (any thread). */
static void job_publish(struct stage_job *j)
{
    if (j->foreign)
        return;
    uint64_t r = job_publishable(j, atomic_load(&j->indexed));
    uint64_t was = atomic_load(j->ready);
    while (r > was && was != UINT64_MAX &&
           !atomic_compare_exchange_weak(j->ready, &was, r))
        ;
    if (r > was && was != UINT64_MAX)
        jobs_moved(j->p);
}

/* What job j's source makes of the object. */
static int job_mode(const struct stage_job *j)
{
    return j->dec ? SRC_DEC : j->zip ? SRC_ZIP : SRC_RAW;
}

/* A fetch holds while more than the budget is staged and it is its ahead
 * bytes or more past where the order reads the shard; held long, its
 * connection goes and the object is opened again where it stopped (a
 * decompressed or zip source: made again from the object's start, so
 * only after STAGE_HOLD_CLOSE_MADE_MS). SIO_OK to read on, else a
 * failure (e). */
static sio_code job_hold(struct stage_job *j, sio_error *e)
{
    sio_plan *p = j->p;
    plan_stage *st = p->stage;
    uint64_t t0 = 0;
    for (;;) {
        /* (the index's lock is taken with no other held: the index pass
         * calls the hooks with none held, and takes the plan's mu) */
        uint64_t base = job_base(j), at = atomic_load(&j->taken);
        if (atomic_load(&p->failed) || !atomic_load(&st->pressed) ||
            base == UINT64_MAX || j->avail < base ||
            j->avail - base < j->ahead)
            break;
        uint64_t now = sio_now_ms();
        if (!t0)
            t0 = now;
        if (now - t0 >= (job_mode(j) == SRC_RAW ? STAGE_HOLD_CLOSE_MS
                                                : STAGE_HOLD_CLOSE_MADE_MS) &&
            j->src.in && !j->src.zsh) {
            j->src.in->ops->close(j->src.in);
            j->src.in = NULL;
        }
        pthread_mutex_lock(&p->mu);
        j->holding = 1;
        if (atomic_load(&j->taken) == at && atomic_load(&st->pressed) &&
            !atomic_load(&p->failed)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&st->cv, &p->mu, &ts);
        }
        j->holding = 0;
        pthread_mutex_unlock(&p->mu);
    }
    if (!j->src.in && !j->ended)
        return src_resume(&j->src, j->io, j->url, job_cap(j), &j->limits,
                          j->buf, j->avail, j->vfirst, job_mode(j), e);
    return SIO_OK;
}

void stage_taken(sio_plan *p, uint32_t s, uint64_t at)
{
    plan_stage *st = p->stage;
    struct stage_job *hit = NULL;
    pthread_mutex_lock(&p->mu);
    for (struct stage_job *j = st->jobs; j; j = j->next)
        if (j->s == s && j->flow && !j->done) {
            if (at > atomic_load(&j->taken))
                atomic_store(&j->taken, at);
            hit = j;
            if (j->holding)
                pthread_cond_broadcast(&st->cv);
            break;
        }
    /* (the job is freed by the step that reaps it, on this thread) */
    pthread_mutex_unlock(&p->mu);
    if (hit)
        job_publish(hit);
}

/* sio_stage_hooks.wait: fetch until want bytes are written (or the
 * object ends, or fails). Runs on the job's thread (the index pass's). */
static sio_code job_wait(void *ud, uint64_t want, uint64_t *avail,
                         char *err, size_t errlen)
{
    struct stage_job *j = ud;
    plan_stage *st = j->p->stage;
    while (j->avail < want && !j->ended) {
        size_t got = 0;
        sio_error e = {SIO_OK, ""};
        sio_code rc = SIO_OK;
        const unsigned char *data = j->buf;
        if (j->flow)
            rc = job_hold(j, &e);
        if (rc)
            ;
        else if (atomic_load(&j->p->failed))
            rc = sio_seterr(&e, SIO_ERR_CANCELED, "the epoch's plan "
                            "stopped");
        else
            rc = src_read(&j->src, j->buf, &data, &got, &e);
        /* A failure that may pass: the object again from its byte
         * reached (a compressed or zip source from its start, its output
         * made again to where it stopped: src_restart). */
        int resumed = 0;
        while (!resumed && (rc == SIO_ERR_IO || rc == SIO_ERR_RETRY) &&
               j->resumes < st->retries) {
            if (job_retry_wait(j, e.msg)) {
                rc = sio_seterr(&e, SIO_ERR_CANCELED, "the epoch's plan "
                                "stopped");
                break;
            }
            j->resumes++;
            rc = src_resume(&j->src, j->io, j->url, job_cap(j), &j->limits,
                            j->buf, j->avail, j->vfirst, job_mode(j), &e);
            resumed = rc == SIO_OK;
        }
        if (resumed)
            continue;
        if (rc == SIO_OK && got > 0)
            rc = write_all(j->fd, data, got, -1, &e);
        if (rc || got == 0) {
            j->ended = 1;
            j->src_rc = rc;
            j->src_err = e;
            break;
        }
        j->avail += got;
        pthread_mutex_lock(&j->p->mu);
        uint64_t take = got < j->reserve ? got : j->reserve;
        j->reserve -= take;
        st->reserved -= take <= st->reserved ? take : st->reserved;
        st->bytes += got;
        st->step_bytes += got;
        st->fetched_bytes += got;
        st->sh[j->s].have = j->avail;
        if (!st->sh[j->s].tvhash) /* (known once the store answered) */
            st->sh[j->s].tvhash = src_validator(&j->src);
        if (!st->sh[j->s].tsize && !j->dec && !j->zip)
            st->sh[j->s].tsize = src_size(&j->src);
        if (st->bytes > st->peak)
            st->peak = st->bytes;
        press_note(st);
        pthread_mutex_unlock(&j->p->mu);
    }
    *avail = j->avail;
    if (j->avail < want && j->ended && j->src_rc) {
        snprintf(err, errlen, "%s", j->src_err.msg);
        return j->src_rc;
    }
    return SIO_OK;
}

/* sio_stage_hooks.progress: the groups read so far are in memory, but
 * the last one (it may end at the object's end, whose size comes with
 * the job's end): let in to the order. */
static void job_progress(void *ud, uint64_t groups)
{
    struct stage_job *j = ud;
    if (groups && !j->checked) {
        /* Positions of a decompressed stream (a gzip under a .tar name)
         * are not positions in what is staged: the step stops the plan
         * at this shard (staged_end), and no item of it is made. */
        sio_index_info info;
        sio_index_get_info(j->e, &info);
        j->checked = 1;
        j->foreign = info.stream_only != j->dec;
    }
    if (groups > atomic_load(&j->indexed))
        atomic_store(&j->indexed, groups);
    job_publish(j);
}

/* Run job j with buf (STAGE_READ bytes) to its end. */
static void job_run(struct stage_job *j, unsigned char *buf)
{
    sio_plan *p = j->p;
    sio_io *io = j->io;
    plan_stage *st = p->stage;
    sio_error e2 = {SIO_OK, ""};
    uint64_t reached = 0, vh = 0;
    sio_code brc = SIO_OK;
    j->buf = buf;
    sio_code rc = buf ? src_open(&j->src, io, j->url, job_cap(j),
                                 job_mode(j), &j->limits, &e2)
                      : sio_seterr(&e2, SIO_ERR_NOMEM, "out of memory");
    /* Its first request failing as may pass: asked again as a resume
     * would be (job_wait), with the same count and backoff. */
    while ((rc == SIO_ERR_IO || rc == SIO_ERR_RETRY) && buf &&
           j->resumes < st->retries) {
        if (job_retry_wait(j, e2.msg)) {
            rc = sio_seterr(&e2, SIO_ERR_CANCELED, "the epoch's plan "
                            "stopped");
            break;
        }
        j->resumes++;
        src_close(&j->src, 0);
        rc = src_open(&j->src, io, j->url, job_cap(j), job_mode(j),
                      &j->limits, &e2);
    }
    if (rc) {
        j->ended = 1;
        j->src_rc = rc;
        j->src_err = e2;
    } else {
        j->vfirst = j->src.vopen;
        sio_stage_hooks h = {job_wait, job_progress, j};
        /* Another version of the object than the one its index was read
         * from (replaced in the store since): indexed again from these
         * bytes, before any of its groups is let in to the order. */
        uint64_t iv = sio_index_version(j->e);
        if (iv && !j->dec) {
            uint64_t first, now;
            char none[8];
            job_wait(j, 1, &first, none, sizeof none); /* the store told */
            now = src_validator(&j->src);
            if (now && now != iv)
                sio_index_object_changed(j->e, UINT64_MAX);
        }
        brc = sio_index_build_growing(io, j->url, j->s, &j->limits, j->e,
                                      j->fd, j->dec, &h, &j->log, &reached,
                                      &e2);
        /* The object to its end: its size and validator whole (a shard
         * fetched again for a reader behind is checked against them). */
        uint64_t all;
        char none[8];
        if (!j->ended && brc != SIO_ERR_CANCELED)
            job_wait(j, UINT64_MAX, &all, none, sizeof none);
    }
    /* A zip taken for a compressed tar (an earlier index said
     * "stream-only", its name nothing): none of it was staged. */
    if (j->src.iszip)
        j->foreign = 2;
    int whole = j->ended && j->src_rc == SIO_OK;
    vh = src_close(&j->src, whole);
    /* Read whole: the object's validator (a compressed one's too: a
     * fetch again for a reader is held to it), and what it staged (the
     * size a fetch again must make). */
    if (whole && brc == SIO_OK && !j->foreign)
        sio_index_set_version(j->e, vh, j->avail);
    j->buf = NULL;
    struct stat sb;
    int ok = ftruncate(j->fd, (off_t)j->avail) == 0 && fstat(j->fd, &sb) == 0;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[j->s];
    x->size = j->avail;
    x->vhash = vh;
    x->fetching = 0;
    if (st->thin_waiters) { /* readers behind its cut: fetched back now */
        st->thin_waiters = 0;
        plan_wake_all(p);
    }
    if (j->avail > st->max_shard)
        st->max_shard = j->avail;
    st->reserved -= j->reserve <= st->reserved ? j->reserve : st->reserved;
    j->reserve = 0;
    st->running--;
    /* Readers of the last group read to the file's end. */
    if (ok)
        p->files[j->s] = (plan_file){sb.st_dev, sb.st_ino, sb.st_size,
                                     sb.st_mtim, 1};
    j->res.s = j->s;
    j->res.e = j->e;
    j->res.reached = reached;
    j->res.foreign = j->foreign;
    if (j->src_rc) {
        j->res.rc = j->src_rc;
        j->res.err = j->src_err;
    } else if (!ok) {
        j->res.rc = sio_seterr(&j->res.err, SIO_ERR_NOMEM, "shard %" PRIu32
                               ": its staged bytes cannot be kept: %s",
                               j->s, strerror(errno));
    } else {
        j->res.rc = brc;
        j->res.err = e2;
    }
    j->done = 1;
    /* The whole shard is let in to the order once it is read to its end.
     * A job that failed is not: the step takes its end first (staged_end
     * journals the cut, or under on_error=fail names where the order
     * fails) and lets the rest in then, so the order never takes the end
     * of what was read for the shard's end. */
    if (!j->foreign && j->res.rc == SIO_OK)
        atomic_store(j->ready, UINT64_MAX);
    atomic_fetch_add(&st->jobgen, 1);
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&p->mu);
    /* (j is the step's from here: it may be reaped and freed.) The plan
     * goes before the io's count: the plan's end uses the index. */
    sio_plan_unref(p);
    sio_io_busy_add(io, -1);
}

/* The jobs' threads, server-wide, started at the first job and kept (a
 * thread's fetch buffers stay warm from one shard to the next: a thread
 * per job faulted every shard's buffers in afresh). A job that waits
 * before a retry (job_backoff) holds its thread: while jobs wait in the
 * queue and no thread is free, one more is started, up to
 * STAGE_THREADS_MAX (a store that fails for minutes under one job does
 * not hold the others' staging). */
#define STAGE_THREADS 16u
#define STAGE_THREADS_MAX 64u
static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t work;
    struct stage_job *head, *tail;
    unsigned threads;
    unsigned idle;     /* threads waiting for a job */
    unsigned retrying; /* threads whose job waits before a retry */
} workers = {.once = PTHREAD_ONCE_INIT,
             .mu = PTHREAD_MUTEX_INITIALIZER,
             .work = PTHREAD_COND_INITIALIZER};

static void *worker_main(void *arg);

/* Start one more worker (detached, with its read buffer): 1, else 0. */
static int worker_add(void)
{
    pthread_t th;
    pthread_attr_t a;
    unsigned char *buf = malloc(STAGE_READ);
    if (!buf)
        return 0;
    int ok = pthread_attr_init(&a) == 0;
    ok = ok && pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
         pthread_create(&th, &a, worker_main, buf) == 0;
    if (ok)
        workers.threads++;
    else
        free(buf);
    pthread_attr_destroy(&a);
    return ok;
}

/* One more thread (workers.mu held) when jobs wait, none is free, and
 * some hold theirs in a retry's wait. */
static void workers_grow_locked(void)
{
    if (workers.head && !workers.idle && workers.retrying &&
        workers.threads < STAGE_THREADS_MAX)
        (void)worker_add();
}

static void workers_retrying(int delta)
{
    pthread_mutex_lock(&workers.mu);
    workers.retrying = (unsigned)((int)workers.retrying + delta);
    workers_grow_locked();
    pthread_mutex_unlock(&workers.mu);
}

static int range_cmp(const void *a, const void *b)
{
    const stage_range *x = a, *y = b;
    return x->a < y->a ? -1 : x->a > y->a;
}

/* The byte ranges of shard s's items at Y [from, to] into rg (at most
 * RANGED_MAX, sorted, items closer than a gap merged) and their sum in
 * *bytes: the number of ranges, 0 when they cannot be told here (a chunk
 * of Y let go, an item past size, none). A window: the scan stops after
 * RANGED_SCAN_MAX positions, RANGED_ITEMS_MAX items of the shard or cap
 * bytes of them (the first item is always in), and *upto is the last Y
 * index it covers (to when nothing stopped it). mu held: items_lk is
 * taken under it, never the other way round. */
static size_t ranged_of(sio_plan *p, uint32_t s, uint64_t from, uint64_t to,
                        uint64_t size, uint64_t cap, stage_range *rg,
                        uint64_t *bytes, uint64_t *upto)
{
    *bytes = 0;
    *upto = to;
    if (to < from || from >= sio_plan_count(p))
        return 0;
    if (to >= sio_plan_count(p))
        to = sio_plan_count(p) - 1;
    if (to - from >= RANGED_SCAN_MAX)
        to = from + RANGED_SCAN_MAX - 1;
    *upto = to;
    stage_range *all = malloc(RANGED_ITEMS_MAX * sizeof *all);
    size_t n = 0, nr = 0;
    uint64_t sum = 0;
    if (!all)
        return 0;
    for (uint64_t i = from; i <= to; i++) {
        sio_plan_item it;
        if (!plan_item_copy(p, i, &it)) {
            free(all);
            return 0;
        }
        if (it.shard != s)
            continue;
        uint64_t b = it.end == UINT64_MAX ? size : it.end;
        if (it.offset >= b || b > size) {
            free(all);
            return 0;
        }
        if (n && (n == RANGED_ITEMS_MAX || b - it.offset > cap - sum ||
                  sum > cap)) {
            *upto = i - 1; /* the window ends before this item */
            break;
        }
        all[n++] = (stage_range){it.offset, b};
        sum += b - it.offset;
    }
    if (n > 1)
        qsort(all, n, sizeof *all, range_cmp);
    for (uint64_t gap = RANGED_GAP; n; gap *= 4) {
        nr = 0;
        for (size_t i = 0; i < n && nr <= RANGED_MAX; i++) {
            if (nr && all[i].a <= rg[nr - 1].b + gap) {
                if (all[i].b > rg[nr - 1].b)
                    rg[nr - 1].b = all[i].b;
            } else if (nr < RANGED_MAX) {
                rg[nr++] = all[i];
            } else {
                nr = RANGED_MAX + 1; /* too many: a wider gap */
            }
        }
        if (nr <= RANGED_MAX)
            break;
    }
    free(all);
    for (size_t i = 0; i < nr; i++)
        *bytes += rg[i].b - rg[i].a;
    return nr;
}

/* One window of a shard fetched again for readers (mu held): the Y
 * positions it spans (*span) and the bytes of the shard's items it holds
 * at most (*cap). Every position is one item of some shard, so the
 * windows of the shards a reader reads at once, each over the same
 * positions, hold about a quarter of the room for readers behind
 * together (the shard's mean item size: its bytes over its items), and
 * one shard's window at most that quarter. */
static void window_of(const plan_stage *st, const stage_shard *x,
                      uint64_t *span, uint64_t *cap)
{
    uint64_t w = st->budget / 4 < RANGED_GAP ? RANGED_GAP : st->budget / 4;
    uint64_t items = x->decided ? x->decided : 1;
    uint64_t mean = x->size / items ? x->size / items : 1;
    *cap = w;
    *span = w / mean ? w / mean : 1;
}

/* Does restage j fetch the whole shard? */
static int restage_whole(const struct stage_job *j)
{
    return j->nr == 1 && j->rg[0].a == 0 && j->rg[0].b == j->want_size;
}

/* Restage j ended with rc (mem bytes written): the shard's memfd now
 * holds its items from j->from on (all of them when whole), or its
 * readers are told it failed; either way they are woken. */
static void restage_settle(struct stage_job *j, uint64_t mem, sio_code rc,
                          const sio_error *e)
{
    sio_plan *p = j->p;
    plan_stage *st = p->stage;
    int closing = -1;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[j->s];
    x->queued = 0;
    st->restage_bytes -= j->want_mem <= st->restage_bytes
                             ? j->want_mem
                             : st->restage_bytes;
    if (rc == SIO_OK && j->guess && x->guess && restage_whole(j)) {
        /* The size the fetch found: the shard's from now on (its last
         * group's readers read to its end). */
        x->size = mem;
        x->guess = 0;
        p->files[j->s].size = (off_t)mem;
    }
    if (rc == SIO_OK) {
        int whole = restage_whole(j);
        if (j->adopt && !x->vhash)
            x->vhash = j->want_v; /* the object read: later ranges too */
        uint64_t lim = x->fetching ? x->have : x->size;
        uint64_t now = j->extend ? x->mem + mem : mem;
        if (now > lim || (whole && !x->fetching))
            now = lim;
        if (!j->extend) {
            /* Behind every counting rank (a reader behind the others):
             * let go once its readers let go of it. Else (a shard left
             * to its readers, stage_defer) kept until they passed it, as
             * a shard the steps staged. */
            x->fd = j->fd;
            x->doomed = x->swept;
            x->taken = 0; /* for the reader that waits for it */
            x->mem = 0;
        }
        /* Fetched back into a shard the steps staged (thinned): its own
         * bytes again, the steps' share, not the room for readers behind
         * (which its reader, who alone lets it go by reading on, could
         * otherwise hold so that the next shard it needs is refused
         * for good). */
        if (j->extend && !x->restaged)
            st->step_bytes += now - x->mem;
        else
            st->restage_bytes += now - x->mem;
        st->bytes += now - x->mem;
        x->mem = now;
        /* Ranges hold the items decided when they were asked for, never
         * those of a later draw of the shard, however many bytes they
         * add up to (ranges asked again, or merged across a gap, count
         * twice): only a whole fetch holds every item. */
        x->partial = !whole;
        if (!x->partial) {
            x->cover = x->cover_to = 0;
        } else if (!j->extend) {
            x->cover = j->from;
            x->cover_to = j->to;
        } else if (j->forward) {
            x->cover_to = j->to;
        } else {
            x->cover = j->from;
        }
        /* A thinned shard (the steps staged it) fetched back in for a
         * reader behind its cut: readers check the cut. */
        if (!x->restaged)
            atomic_store(&x->cut, x->partial ? x->cover : 0);
        st->restages++;
        st->ranged += !whole;
        st->fetched_bytes += mem;
        if (st->bytes > st->peak)
            st->peak = st->bytes;
        press_note(st);
    } else {
        x->failed = 1;
        if (!j->extend) {
            x->restaged = 0;
            closing = j->fd;
        }
        snprintf(st->why, sizeof st->why, "%.299s", e->msg);
    }
    /* The job's pin goes; the shard stays for the reader that waits for
     * it (let go once readers let go of it, as a fresh restage). */
    if (j->extend && x->pins)
        x->pins--;
    plan_wake_all(p);
    pthread_mutex_unlock(&p->mu);
    if (closing >= 0)
        close(closing);
}

/* A restage job is done: freed with what it held. */
static void restage_end(struct stage_job *j)
{
    sio_plan *p = j->p;
    sio_io *io = j->io;
    rhold_close(j->hold);
    free(j->url);
    free(j);
    sio_plan_unref(p);
    sio_io_busy_add(io, -1);
}

/* Run ranged restage j with buf (STAGE_READ bytes): each range asked of
 * the store on its own (a range cut by a failure that may pass is asked
 * again from where it stopped, STAGE_RESUMES times), its bytes written at
 * their place in the memfd. The object must be the one the plan was made
 * from: its validator and size are checked before a byte of it is
 * written. Freed here. */
static void ranged_run(struct stage_job *j, unsigned char *buf)
{
    sio_io *io = j->io;
    sio_error e = {SIO_OK, ""};
    const sio_backend_ops *ops = NULL;
    void *ctx = NULL;
    uint64_t mem = 0;
    char shown[512];
    sio_url_redact(j->url, shown, sizeof shown);
    sio_code rc = buf ? sio_io_backend(io, j->url, &ops, &ctx, &e)
                      : sio_seterr(&e, SIO_ERR_NOMEM, "out of memory");
    /* A new memfd (a spare: another shard's pages) holds only the ranges
     * written: the rest reads as zeros, never as another shard. */
    if (rc == SIO_OK && !j->extend &&
        ((!restage_whole(j) && ftruncate(j->fd, 0) != 0) ||
         ftruncate(j->fd, (off_t)j->want_size) != 0))
        rc = sio_seterr(&e, SIO_ERR_NOMEM, "cannot stage a shard in "
                        "memory: ftruncate: %s", strerror(errno));
    unsigned tries = 0;
    sio_stream *ahead[RANGED_MAX] = {NULL};
    size_t asked = 0;
    for (size_t i = 0; rc == SIO_OK && i < j->nr; i++) {
        uint64_t pos = j->rg[i].a, end = j->rg[i].b;
        /* The next ranges are asked for now (one that cannot be is
         * asked again when its turn comes). */
        while (ops->open_range && asked < j->nr && asked < i + RANGED_AHEAD) {
            sio_error ae = {SIO_OK, ""};
            if (ops->open_range(ctx, j->url, j->rg[asked].a, j->rg[asked].b,
                                &ahead[asked], &ae) != SIO_OK)
                ahead[asked] = NULL;
            asked++;
        }
        sio_stream *in = i < asked ? ahead[i] : NULL;
        ahead[i] = NULL;
        int checked = 0;
        while (rc == SIO_OK && pos < end) {
            if (!in) {
                rc = ops->open_range
                         ? ops->open_range(ctx, j->url, pos, end, &in, &e)
                         : ops->open(ctx, j->url, pos, &in, &e);
                if (rc)
                    break;
            }
            size_t got = 0,
                   want = end - pos < STAGE_READ ? (size_t)(end - pos)
                                                 : STAGE_READ;
            rc = in->ops->read(in, buf, want, &got);
            if (rc) {
                sio_seterr(&e, rc, "url=%s: %s", shown,
                           in->ops->errmsg(in));
                in->ops->close(in);
                in = NULL;
                if ((rc == SIO_ERR_IO || rc == SIO_ERR_RETRY) &&
                    tries < STAGE_RESUMES) {
                    tries++;
                    rc = SIO_OK; /* asked again from pos */
                }
                continue;
            }
            if (got == 0 || got > want) {
                rc = sio_seterr(&e, SIO_ERR_CHANGED, "url=%s: the range "
                                "to byte %" PRIu64 " %s at byte %" PRIu64,
                                shown, end, got ? "went on" : "ended", pos);
                break;
            }
            if (!checked) {
                sio_objinfo oi;
                memset(&oi, 0, sizeof oi);
                oi.size = UINT64_MAX;
                if (in->ops->info)
                    in->ops->info(in, &oi);
                uint64_t vh = vhash_of(oi.validator);
                if (j->adopt && !j->want_v)
                    j->want_v = vh;
                if ((vh && vh != j->want_v) ||
                    (oi.size != UINT64_MAX && oi.size != j->want_size)) {
                    rc = sio_seterr(&e, SIO_ERR_CHANGED,
                                    "the object is not the one the "
                                    "epoch's plan was made from");
                    break;
                }
                checked = 1;
            }
            rc = write_all(j->fd, buf, got, (int64_t)pos, &e);
            pos += got;
            mem += got;
        }
        if (in)
            in->ops->close(in);
    }
    for (size_t i = 0; i < asked; i++)
        if (ahead[i])
            ahead[i]->ops->close(ahead[i]);
    restage_settle(j, mem, rc, &e);
    restage_end(j);
}

/* Run restage job j of a compressed shard or a zip with buf (STAGE_READ
 * bytes): the object made again from its start (decompressed, or the
 * tar of its samples), the bytes of its ranges written at their place
 * in the memfd (the whole shard: all of them), and no further than the
 * last range's end; then the readers that wait for it are woken. A
 * failure that may pass makes it again from the start to where it
 * stopped (src_restart), STAGE_RESUMES times. The object must be the
 * one the plan was made from: its validator when it answers, its size
 * when read whole. The job is its own (on no list), freed here. */
static void restage_run(struct stage_job *j, unsigned char *buf)
{
    sio_error e = {SIO_OK, ""};
    int whole = restage_whole(j);
    int mode = job_mode(j);
    uint64_t cap = !whole   ? UINT64_MAX /* (made to end at most) */
                   : j->guess ? j->p->stage->budget
                              : j->want_size;
    uint64_t end = whole ? UINT64_MAX : j->rg[j->nr - 1].b;
    uint64_t pos = 0, mem = 0; /* made so far; written */
    unsigned tries = 0;
    size_t ri = 0;
    sio_code rc = SIO_OK;
    const unsigned char *lastd = NULL; /* the last read's bytes */
    size_t lastn = 0;
    rholds_reap(j->p);
    /* The source the shard's last window stopped at: this window's ranges
     * start at or after where it stopped, of the same object. */
    struct stage_rhold *h = j->hold;
    j->hold = NULL;
    if (h && (whole || !buf || h->mode != mode || h->pos > j->rg[0].a ||
              (j->want_v && h->src.vopen && h->src.vopen != j->want_v))) {
        rhold_close(h);
        h = NULL;
    }
    if (h) {
        pos = h->pos;
        pthread_mutex_lock(&j->p->mu);
        j->p->stage->continued++;
        pthread_mutex_unlock(&j->p->mu);
    } else if (!buf || !(h = calloc(1, sizeof *h)) ||
               !(h->url = strdup(j->url))) {
        free(h);
        h = NULL;
        rc = sio_seterr(&e, SIO_ERR_NOMEM, "out of memory");
    } else {
        h->io = j->io;
        h->mode = mode;
        sio_io_busy_add(j->io, 1);
        rc = src_open(&h->src, j->io, h->url, cap, mode,
                      &j->p->stage->limits, &e);
    }
    stage_src *src = h ? &h->src : NULL;
    if (rc == SIO_OK && j->adopt && !j->want_v)
        j->want_v = src->vopen; /* (held to it: later ranges too) */
    if (rc == SIO_OK && j->want_v && src->vopen && src->vopen != j->want_v)
        rc = sio_seterr(&e, SIO_ERR_CHANGED, "the object is not the one "
                        "the epoch's plan was made from (another "
                        "validator)");
    /* A new memfd (a spare: another shard's pages) that takes only some
     * ranges: the rest reads as zeros, never as another shard. */
    if (rc == SIO_OK && !j->extend && !whole &&
        (ftruncate(j->fd, 0) != 0 ||
         ftruncate(j->fd, (off_t)j->want_size) != 0))
        rc = sio_seterr(&e, SIO_ERR_NOMEM, "cannot stage a shard in "
                        "memory: ftruncate: %s", strerror(errno));
    while (rc == SIO_OK && pos < end) {
        size_t got = 0;
        const unsigned char *data = buf;
        rc = src_read(src, buf, &data, &got, &e);
        if ((rc == SIO_ERR_IO || rc == SIO_ERR_RETRY) &&
            tries < STAGE_RESUMES) {
            tries++;
            rc = src_restart(src, j->io, h->url, cap, &j->p->stage->limits,
                             buf, pos, j->want_v ? j->want_v : src->vopen,
                             mode, &e);
            continue;
        }
        if (rc || got == 0)
            break;
        lastd = data;
        lastn = got;
        if (whole) {
            rc = write_all(j->fd, data, got, (int64_t)pos, &e);
            mem += got;
        }
        /* (the ranges are sorted and apart) */
        while (!whole && ri < j->nr && j->rg[ri].b <= pos)
            ri++;
        for (size_t k = ri; !whole && rc == SIO_OK && k < j->nr &&
                            j->rg[k].a < pos + got;
             k++) {
            uint64_t a = j->rg[k].a > pos ? j->rg[k].a : pos;
            uint64_t b = j->rg[k].b < pos + got ? j->rg[k].b : pos + got;
            rc = write_all(j->fd, data + (a - pos), (size_t)(b - a),
                           (int64_t)a, &e);
            mem += b - a;
        }
        pos += got;
    }
    /* (a size guessed from the index after a restart: the last range,
     * to the tar's end, ends where the object does) */
    if (rc == SIO_OK && !whole && pos < end &&
        !(j->guess && pos > j->rg[j->nr - 1].a))
        rc = sio_seterr(&e, SIO_ERR_CHANGED, "the object is not the one "
                        "the epoch's plan was made from (it ended at "
                        "%" PRIu64 " bytes made)", pos);
    /* Held for the next window forward, else closed. The last read made
     * bytes past the last range: the next window gets them first (a
     * decompressed source's are kept aside, pend, before what may be
     * there already; a zip's are still in its tar buffer). */
    uint64_t vh = 0;
    if (h && rc == SIO_OK && j->keep_src && !whole && pos < j->want_size &&
        pos - end <= lastn) {
        size_t over = (size_t)(pos - end);
        if (over && src->zsh) {
            src->zpos -= over;
            src->got -= over;
        } else if (over) {
            unsigned char *pend = malloc(over + src->pend_len);
            if (pend) {
                memcpy(pend, lastd + (lastn - over), over);
                if (src->pend_len)
                    memcpy(pend + over, src->pend, src->pend_len);
                free(src->pend);
                src->pend = pend;
                src->pend_len += over;
            } else {
                rhold_close(h);
                h = NULL;
            }
        }
        if (h) {
            h->pos = end;
            pthread_mutex_lock(&j->p->mu);
            stage_shard *x = &j->p->stage->sh[j->s];
            if (!x->rhold) {
                rhold_put(j->p->stage, j->s, h);
                h = NULL;
            }
            pthread_mutex_unlock(&j->p->mu);
        }
    } else if (h) {
        vh = src_close(src, whole && rc == SIO_OK);
    }
    rhold_close(h);
    if (rc == SIO_OK && whole && ftruncate(j->fd, (off_t)pos) != 0)
        rc = sio_seterr(&e, SIO_ERR_NOMEM, "cannot stage a shard in "
                        "memory: ftruncate: %s", strerror(errno));
    if (rc == SIO_OK && whole &&
        ((!j->guess && pos != j->want_size) ||
         (j->want_v && vh && vh != j->want_v)))
        rc = sio_seterr(&e, SIO_ERR_CHANGED,
                        "the object is not the one the epoch's plan was "
                        "made from (%" PRIu64 " bytes, %s validator)", pos,
                        j->want_v && vh && vh != j->want_v ? "another"
                                                           : "the same");
    restage_settle(j, mem, rc, &e);
    restage_end(j);
}

static void *worker_main(void *arg)
{
    unsigned char *buf = arg;
    pthread_mutex_lock(&workers.mu);
    for (;;) {
        while (!workers.head) {
            workers.idle++;
            pthread_cond_wait(&workers.work, &workers.mu);
            workers.idle--;
        }
        struct stage_job *j = workers.head;
        workers.head = j->qnext;
        if (!workers.head)
            workers.tail = NULL;
        pthread_mutex_unlock(&workers.mu);
        if (j->restage == 2)
            ranged_run(j, buf);
        else if (j->restage)
            restage_run(j, buf);
        else
            job_run(j, buf);
        pthread_mutex_lock(&workers.mu);
    }
    return NULL;
}

static void workers_start(void)
{
    for (unsigned i = 0; i < STAGE_THREADS; i++)
        if (!worker_add())
            break;
}

/* Hand job j to the workers (it holds a reference to its plan and a
 * busy count of its io); run here when no worker could be started. */
static void job_queue(struct stage_job *j)
{
    pthread_once(&workers.once, workers_start);
    if (!workers.threads) { /* no thread: here, whole */
        unsigned char *buf = malloc(STAGE_READ);
        if (j->restage == 2)
            ranged_run(j, buf);
        else if (j->restage)
            restage_run(j, buf);
        else
            job_run(j, buf);
        free(buf);
        return;
    }
    pthread_mutex_lock(&workers.mu);
    if (workers.tail)
        workers.tail->qnext = j;
    else
        workers.head = j;
    workers.tail = j;
    pthread_cond_signal(&workers.work);
    workers_grow_locked();
    pthread_mutex_unlock(&workers.mu);
}

sio_code stage_job_start(sio_plan *p, uint32_t s, sio_index_entry *e,
                         sio_io *io, const char *url,
                         const sio_shard_limits *limits,
                         const sio_logger *log, uint64_t reserve,
                         _Atomic uint64_t *ready, sio_error *err)
{
    plan_stage *st = p->stage;
    struct stage_job *j = calloc(1, sizeof *j);
    if (!j || !(j->url = strdup(url))) {
        free(j);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    j->fd = stage_memfd(stage_spare(p), err);
    if (j->fd < 0) {
        free(j->url);
        free(j);
        return err->code;
    }
    j->p = p;
    j->io = io;
    j->s = s;
    j->e = e;
    j->dec = st->sh[s].kind == STAGE_DECOMPRESS;
    j->zip = st->sh[s].kind == STAGE_ZIP;
    /* A shard of a store (as it is, decompressed or a zip's tar; an
     * object set's virtual tar, which opens again at any offset) in an
     * epoch whose shards are thinned: fetched its ahead bytes past the
     * order while more than the budget is staged. */
    j->flow = st->thin_on;
    uint64_t slots = st->slots ? st->slots : 1;
    j->ahead = st->budget / (2 * slots);
    j->ahead = j->ahead < STAGE_AHEAD_MIN ? STAGE_AHEAD_MIN
               : j->ahead > STAGE_AHEAD   ? STAGE_AHEAD
                                          : j->ahead;
    j->limits = *limits;
    st->limits = *limits;
    j->log = *log;
    j->ready = ready;
    j->reserve = reserve;
    atomic_store(ready, 0);
    int closing = -1;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    if (x->fd >= 0 && x->pins == 0) /* staged before: the newer */
        let_go(st, x, &closing);
    else
        thin_reset(st, x); /* (what was logged is the earlier staging's) */
    x->fd = j->fd;
    x->gone = 0;
    x->uhash = uhash_of(url, x->kind);
    x->size = 0;
    x->fetching = 1;
    x->have = 0;
    x->tvhash = 0;
    x->tsize = 0;
    x->left = x->decided = 0;
    x->sized = x->final = x->doomed = x->swept = x->adopt = 0;
    st->staged++;
    st->reserved += reserve;
    st->running++;
    j->next = st->jobs;
    st->jobs = j;
    pthread_mutex_unlock(&p->mu);
    if (closing >= 0)
        close(closing);
    sio_plan_ref(p);
    sio_io_busy_add(io, 1);
    job_queue(j);
    return SIO_OK;
}

int stage_job_reap(sio_plan *p, stage_result *out)
{
    plan_stage *st = p->stage;
    struct stage_job *j = NULL;
    if (!st)
        return 0;
    pthread_mutex_lock(&p->mu);
    for (struct stage_job **pp = &st->jobs; *pp; pp = &(*pp)->next)
        if ((*pp)->done) {
            j = *pp;
            *pp = j->next;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    if (!j)
        return 0;
    *out = j->res;
    free(j->url);
    free(j);
    return 1;
}

unsigned stage_jobs(sio_plan *p)
{
    unsigned n = 0;
    if (!p->stage)
        return 0;
    pthread_mutex_lock(&p->mu);
    for (struct stage_job *j = p->stage->jobs; j; j = j->next)
        n++;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void stage_jobs_wait(sio_plan *p, uint64_t gen0, unsigned ms)
{
    plan_stage *st = p->stage;
    struct timespec ts;
    sio_deadline_in(&ts, ms);
    pthread_mutex_lock(&p->mu);
    atomic_store(&st->waiting, 1);
    while (atomic_load(&st->jobgen) == gen0 && st->running > 0 &&
           !atomic_load(&p->failed))
        if (pthread_cond_timedwait(&st->cv, &p->mu, &ts) == ETIMEDOUT)
            break;
    atomic_store(&st->waiting, 0);
    pthread_mutex_unlock(&p->mu);
}

int stage_spare(sio_plan *p)
{
    int fd = -1;
    (void)p;
    pthread_mutex_lock(&spares.mu);
    if (spares.n)
        fd = spare_take(0); /* the oldest: the recent ones may be revived */
    pthread_mutex_unlock(&spares.mu);
    return fd;
}

/* Shard x's thinning state let go (its memfd goes, or is staged anew). */
static void thin_reset(plan_stage *st, stage_shard *x)
{
    (void)st;
    free(x->log);
    free(x->dead);
    x->log = NULL;
    x->dead = NULL;
    x->nlog = x->caplog = x->lpos = x->pscan = x->lscan = 0;
    x->ndead = 0;
    x->thin = x->pend = x->wait = 0;
    x->nothin = 0;
    atomic_store(&x->cut, 0);
}

/* Account shard x let go (mu held): its descriptor is kept as a spare
 * (within the budget), else goes to *closing (-1: kept). */
static void let_go(plan_stage *st, stage_shard *x, int *closing)
{
    /* A shard the steps staged holds its size less what thinning gave
     * back, and what was fetched back into it for a reader behind its cut
     * (x->mem): the steps' share. One fetched again: x->mem, the room
     * for readers behind. */
    uint64_t held = x->restaged ? x->mem
                    : (x->size > x->thin ? x->size - x->thin : 0) + x->mem;
    uint64_t own = x->restaged ? 0 : held;
    *closing = x->fd;
    /* A partial memfd is kept for its pages, never taken back whole. */
    if (x->fd >= 0 &&
        spare_put(x->fd, held, st->budget, x->uhash,
                  x->partial ? 0 : x->vhash))
        *closing = -1;
    x->fd = -1;
    x->doomed = 0;
    x->partial = 0;
    x->ahead = 0;
    x->cover = x->cover_to = 0;
    x->gone = 1;
    st->bytes -= held <= st->bytes ? held : st->bytes;
    if (x->restaged)
        st->restage_bytes -= x->mem <= st->restage_bytes
                                 ? x->mem
                                 : st->restage_bytes;
    else
        st->step_bytes -= own <= st->step_bytes ? own : st->step_bytes;
    x->restaged = 0;
    x->mem = 0;
    thin_reset(st, x);
    st->released++;
    press_note(st);
}

/* The lowest Y index a counting rank of any world reads next (mu
 * held); UINT64_MAX when none counts. Ranks whose grace ran out stop
 * counting here. */
static uint64_t low_of(plan_stage *st, uint64_t now)
{
    uint64_t low = UINT64_MAX;
    if (!st->nw)
        return 0; /* nobody came yet: everything is still to be read */
    for (unsigned wi = 0; wi < st->nw; wi++)
    for (uint32_t r = 0; r < st->w[wi].world; r++) {
        stage_rank *k = &st->w[wi].rank[r];
        if (k->detached)
            continue;
        if (!k->joined) {
            if (now < st->w[wi].join_deadline_ms)
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
        x->swept = 1;
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

/* Shard s is queued as done once every item of it is decided (mu held). */
static void done_check(plan_stage *st, stage_shard *x, uint32_t s)
{
    if (x->sized && x->left == 0 && !x->final) {
        x->final = 1;
        st->done[(st->done_head + st->done_n) % st->total] = s;
        st->done_n++;
    }
}

void stage_end(sio_plan *p, uint32_t s, uint64_t items)
{
    plan_stage *st = p->stage;
    int unused = -1;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    x->sized = 1;
    x->left = items > x->decided ? items - x->decided : 0;
    if (items == 0) { /* nothing of it is read */
        x->final = 1;
        if (x->fd >= 0 && x->pins == 0)
            let_go(st, x, &unused);
        else
            x->doomed = 1;
    } else {
        done_check(st, x, s);
    }
    pthread_mutex_unlock(&p->mu);
    if (unused >= 0)
        close(unused);
}

/* Thinning. A shard the steps staged whole is let go once every reader
 * passed its last item; until then, with a large shuffle buffer, it is
 * held for a few of its samples still in the buffer (the samples of
 * about min(shards, buffer) shards are there at once), and a large shard
 * in the interleave's slots is held whole while most of it was read
 * long ago. So the pages of its items that every reader passed are
 * given back while the rest is read (fallocate PUNCH_HOLE: what a reader
 * reads is never moved, and a reader behind has those items fetched
 * back into the same memfd by their byte ranges, stage_take; a
 * compressed shard or a zip's, made again from the object's start with
 * the bytes of those ranges kept, restage_run).
 *
 * Which items no reader reads any more: those at Y below both the
 * lowest counting rank (low_of: ranks expected, or away within the
 * rejoin grace, count) and every open reader's mark (its chunk of Y,
 * plan_mark_move). A reader that holds the memfd checks the shard's cut
 * before it reads an item there (stage_cut): a pass stores the cut, then
 * reads the marks again (both seq_cst), so either it sees the reader's
 * mark and punches nothing the reader reads, or the reader sees the cut
 * and takes the shard again. Holes are punched once a shard's passed
 * bytes reach THIN_SLOT (a shard the order still reads from) or
 * THIN_BUFFER (every group of it went to the order: only samples in the
 * buffer and items decided but not read are left), or every shard with
 * any once all of them together reach THIN_TOTAL; whole pages only, and
 * only while the plan stages more than its budget. */
#define THIN_PAGE 4096u
#define THIN_SLOT (1u << 20)
#define THIN_BUFFER (64u << 10)
#define THIN_KEEP (8u << 20)    /* bytes a rank may come back for: kept
                                   behind the cut (a client resuming from
                                   what it received: what was in flight in
                                   socket buffers when its stream broke) */
#define THIN_TOTAL (8u << 20)   /* passed, not punched, all shards: at
                                   most this (beyond it, every shard with
                                   any is punched) */
#define THIN_LOG_MAX (1u << 22) /* items of a shard logged at most */
#define THIN_SHARDS 32u         /* shards punched by one pass at most */

/* Log item y (bytes [a, b)) of shard s for thinning (mu held). */
static void thin_log(plan_stage *st, stage_shard *x, uint32_t s, uint64_t y,
                     uint64_t a, uint64_t b)
{
    size_t base = x->lpos < x->lscan ? x->lpos : x->lscan;
    if (base && base >= x->nlog / 2) {
        memmove(x->log, x->log + base, (x->nlog - base) * sizeof *x->log);
        x->nlog -= base;
        x->lpos -= base;
        x->lscan -= base;
        x->pscan -= x->pscan >= base ? base : x->pscan;
    }
    if (x->nlog == x->caplog) {
        size_t cap = x->caplog ? 2 * x->caplog : 64;
        stage_piece *q = x->nlog < THIN_LOG_MAX
                             ? realloc(x->log, cap * sizeof *q)
                             : NULL;
        if (!q) {
            x->nothin = 1; /* (out of memory, or too many: kept whole) */
            return;
        }
        x->log = q;
        x->caplog = cap;
    }
    uint64_t len = b == UINT64_MAX ? 0 : b - a;
    x->log[x->nlog++] = (stage_piece){y, a, b, len};
    x->wait += len;
    if (!x->queued_thin) {
        if (st->nthinq == st->capthinq) {
            size_t cap = st->capthinq ? 2 * st->capthinq : 16;
            uint32_t *q = realloc(st->thinq, cap * sizeof *q);
            if (!q) {
                x->nothin = 1;
                return;
            }
            st->thinq = q;
            st->capthinq = cap;
        }
        st->thinq[st->nthinq++] = s;
        x->queued_thin = 1;
    }
}

void stage_item(sio_plan *p, uint32_t s, uint64_t y, uint64_t a, uint64_t b)
{
    plan_stage *st = p->stage;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    if (!x->kind && !x->held) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    x->last = y;
    x->decided++;
    if (x->sized && x->left) {
        x->left--;
        done_check(st, x, s);
    } else if (x->sized) {
        x->nothin = 1; /* drawn again: never thinned */
    }
    if (st->thin_on && x->kind != STAGE_IN_PLACE && !x->held &&
        !x->restaged && !x->nothin && x->fd >= 0 && a < b)
        thin_log(st, x, s, y, a, b);
    pthread_mutex_unlock(&p->mu);
}

/* The lowest Y index an open reader of the plan may read (its mark;
 * mu held); UINT64_MAX when none is open. */
static uint64_t marks_low(sio_plan *p)
{
    uint64_t low = UINT64_MAX;
    for (plan_mark *m = p->marks; m; m = m->next) {
        uint64_t a = atomic_load(&m->at);
        if (a < low)
            low = a;
    }
    return low;
}

/* Shard x's logged items at Y below c counted into pend (mu held; each
 * item once). */
static void thin_count(stage_shard *x, uint64_t c)
{
    if (x->pscan < x->lpos)
        x->pscan = x->lpos;
    for (; x->pscan < x->nlog && x->log[x->pscan].y < c; x->pscan++) {
        uint64_t end = x->size ? x->size : x->have;
        uint64_t b = x->log[x->pscan].b > end ? end : x->log[x->pscan].b;
        x->pend += b > x->log[x->pscan].a ? b - x->log[x->pscan].a : 0;
    }
}

static int dead_cmp(const void *a, const void *b)
{
    const stage_dead *x = a, *y = b;
    return x->a < y->a ? -1 : x->a > y->a;
}

/* Shard x's logged items at Y below c join its passed runs (mu held):
 * 0, or -1 out of memory (nothing changed). */
static int thin_take(stage_shard *x, uint64_t c)
{
    size_t k = x->lpos, m = 0;
    while (k < x->nlog && x->log[k].y < c)
        k++;
    if (k == x->lpos)
        return 0;
    stage_dead *all = malloc((x->ndead + (k - x->lpos)) * sizeof *all);
    if (!all)
        return -1;
    size_t nnew = 0;
    for (size_t q = x->lpos; q < k; q++) {
        uint64_t end = x->size ? x->size : x->have;
        uint64_t b = x->log[q].b > end ? end : x->log[q].b;
        if (b > x->log[q].a)
            all[x->ndead + nnew++] = (stage_dead){x->log[q].a, b, 0};
    }
    if (nnew == 0) {
        free(all);
        x->lpos = k;
        return 0;
    }
    if (x->ndead)
        memcpy(all, x->dead, x->ndead * sizeof *all);
    /* (the runs are sorted; the new ones are sorted and merged in) */
    qsort(all + x->ndead, nnew, sizeof *all, dead_cmp);
    size_t n = x->ndead + nnew;
    stage_dead *tmp = malloc(n * sizeof *tmp);
    if (!tmp) {
        free(all);
        return -1;
    }
    size_t i = 0, j = x->ndead;
    while (i < x->ndead || j < n) {
        stage_dead d = (j >= n || (i < x->ndead && all[i].a <= all[j].a))
                           ? all[i++]
                           : all[j++];
        if (m && d.a <= tmp[m - 1].b) {
            if (d.b > tmp[m - 1].b)
                tmp[m - 1].b = d.b;
            tmp[m - 1].punched += d.punched;
        } else {
            tmp[m++] = d;
        }
    }
    free(all);
    free(x->dead);
    x->dead = tmp;
    x->ndead = m;
    x->lpos = k;
    return 0;
}

/* One pass of thinning over the plan's staged shards (no lock held). */
static void thin_pass(sio_plan *p)
{
    plan_stage *st = p->stage;
    struct {
        uint32_t s;
        int fd;
        stage_range *rg;
        size_t n;
        uint64_t freed;
    } w[THIN_SHARDS];
    uint32_t cand[THIN_SHARDS];
    uint64_t old[THIN_SHARDS], pend_all = 0;
    size_t nw = 0, nc = 0;
    if (!st || !st->thin_on)
        return;
    pthread_mutex_lock(&p->mu);
    if (!st->nthinq) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    uint64_t low = low_of(st, sio_now_ms()), ml = marks_low(p);
    uint64_t c0 = ml < low ? ml : low;
    /* Kept behind it: THIN_KEEP for each rank of the widest world (their
     * items interleave in Y), half the budget at most. */
    uint32_t widest = 1;
    for (unsigned wi = 0; wi < st->nw; wi++)
        if (st->w[wi].world > widest)
            widest = st->w[wi].world;
    uint64_t keep = (uint64_t)widest * THIN_KEEP;
    if (keep > st->budget / 2)
        keep = st->budget / 2;
    if (c0 && c0 != UINT64_MAX)
        c0 = plan_bytes_behind(p, c0, keep);
    /* Punched only while more than the budget is staged: below it a
     * shard kept whole goes to the spares whole when it is let go, and a
     * world that comes after the others takes it back from there
     * (spare_revive) rather than fetching its items again. */
    if (st->bytes <= st->budget)
        c0 = 0;
    for (size_t i = 0; i < st->nthinq;) {
        uint32_t s = st->thinq[i];
        stage_shard *x = &st->sh[s];
        /* What every counting rank passed no longer waits for readers. */
        for (; x->lscan < x->nlog && x->log[x->lscan].y < low; x->lscan++)
            x->wait -= x->log[x->lscan].len <= x->wait ? x->log[x->lscan].len
                                                       : x->wait;
        if (x->fd < 0 || (x->lpos >= x->nlog && x->lscan >= x->nlog)) {
            x->queued_thin = 0;
            st->thinq[i] = st->thinq[--st->nthinq];
            continue;
        }
        i++;
        if (!c0 || c0 == UINT64_MAX || x->nothin || x->restaged ||
            x->held || x->lpos >= x->nlog)
            continue;
        /* Only a shard read whole with its validator (a reader behind
         * its cut has its items fetched back by ranges, held to it), not
         * one being fetched for a reader, nor punched now. */
        if (nc == THIN_SHARDS || x->log[x->lpos].y >= c0 ||
            (!x->vhash && !x->tvhash) || x->queued || x->punching ||
            (!x->size && !x->have) || !p->restage_fn)
            continue;
        uint64_t lim = x->sized ? THIN_BUFFER : THIN_SLOT;
        thin_count(x, c0);
        pend_all += x->pend;
        if (x->pend < lim)
            continue;
        old[nc] = atomic_load(&x->cut);
        if (old[nc] < c0)
            atomic_store(&x->cut, c0);
        cand[nc++] = s;
    }
    /* What waits to be punched, all shards together, beyond THIN_TOTAL:
     * every shard with any is punched too (so what is not punched yet is
     * bounded by a constant, however many shards the buffer spans). */
    for (size_t i = 0; pend_all >= THIN_TOTAL && c0 && c0 != UINT64_MAX &&
                       i < st->nthinq && nc < THIN_SHARDS;
         i++) {
        uint32_t s = st->thinq[i];
        stage_shard *x = &st->sh[s];
        size_t k = 0;
        while (k < nc && cand[k] != s)
            k++;
        if (k < nc || !x->pend || x->punching || x->queued || x->nothin ||
            x->restaged || x->held || x->fd < 0)
            continue;
        old[nc] = atomic_load(&x->cut);
        if (old[nc] < c0)
            atomic_store(&x->cut, c0);
        cand[nc++] = s;
    }
    if (!nc) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    /* The marks again, after the cuts: a reader that moved back meanwhile
     * (an even-pad tail, a second stream of a rank) is seen now. */
    atomic_thread_fence(memory_order_seq_cst);
    ml = marks_low(p);
    uint64_t c = ml < c0 ? ml : c0;
    for (size_t k = 0; k < nc; k++) {
        stage_shard *x = &st->sh[cand[k]];
        uint64_t cut = old[k] > c ? old[k] : c;
        atomic_store(&x->cut, cut);
        x->cover = cut;
        x->cover_to = UINT64_MAX;
        x->partial = cut != 0;
        if (thin_take(x, cut) != 0)
            continue;
        /* Whole pages inside passed runs not given back yet. */
        x->pend = 0;
        stage_range *rg = x->ndead ? malloc(x->ndead * sizeof *rg) : NULL;
        if (!rg)
            continue;
        uint64_t freed = 0;
        size_t nr = 0;
        for (size_t i = 0; i < x->ndead; i++) {
            stage_dead *d = &x->dead[i];
            uint64_t pa = (d->a + THIN_PAGE - 1) & ~(uint64_t)(THIN_PAGE - 1);
            uint64_t pb = d->b & ~(uint64_t)(THIN_PAGE - 1);
            if (pb > pa && pb - pa > d->punched) {
                rg[nr++] = (stage_range){pa, pb};
                freed += pb - pa - d->punched;
                d->punched = pb - pa;
            }
        }
        if (!nr) {
            free(rg);
            continue;
        }
        x->pins++;
        x->punching = 1;
        w[nw].s = cand[k];
        w[nw].fd = x->fd;
        w[nw].rg = rg;
        w[nw].n = nr;
        w[nw].freed = freed;
        nw++;
    }
    pthread_mutex_unlock(&p->mu);
    for (size_t k = 0; k < nw; k++)
        for (size_t i = 0; i < w[k].n; i++)
            if (fallocate(w[k].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                          (off_t)w[k].rg[i].a,
                          (off_t)(w[k].rg[i].b - w[k].rg[i].a)) != 0)
                w[k].freed = 0; /* (not counted: kept whole from now) */
    int closing[THIN_SHARDS];
    size_t ncl = 0;
    uint64_t freed = 0;
    pthread_mutex_lock(&p->mu);
    for (size_t k = 0; k < nw; k++) {
        stage_shard *x = &st->sh[w[k].s];
        x->punching = 0;
        if (!w[k].freed && w[k].n)
            x->nothin = 1;
        x->thin += w[k].freed;
        freed += w[k].freed;
        st->bytes -= w[k].freed <= st->bytes ? w[k].freed : st->bytes;
        st->step_bytes -= w[k].freed <= st->step_bytes ? w[k].freed
                                                       : st->step_bytes;
        if (x->pins)
            x->pins--;
        if (x->pins == 0 && x->doomed && x->fd >= 0) {
            let_go(st, x, &closing[ncl]);
            if (closing[ncl] >= 0)
                ncl++;
        }
        free(w[k].rg);
    }
    st->thinned += freed;
    st->thin_passes += nw != 0;
    press_note(st);
    if (st->thin_waiters) {
        st->thin_waiters = 0;
        plan_wake_all(p);
    }
    pthread_mutex_unlock(&p->mu);
    if (freed || ncl)
        after_sweep(p, closing, ncl);
}

/* Room for need more bytes by the steps (mu held)? */
static int has_room(const plan_stage *st, uint64_t need)
{
    uint64_t used = st->step_bytes + st->reserved;
    return used == 0 || (used < st->budget && need <= st->budget - used);
}

/* Is shard x's thinning logging its items (what of them waits for
 * readers is x->wait)? mu held. */
static int thin_tracked(const plan_stage *st, const stage_shard *x)
{
    return st->thin_on && x->queued_thin && !x->nothin && !x->held &&
           x->kind != STAGE_IN_PLACE;
}

/* Bytes the steps staged that wait only for readers to pass them (every
 * item decided; mu held). */
static uint64_t done_bytes(const plan_stage *st)
{
    uint64_t done = 0;
    for (size_t i = 0; i < st->done_n; i++) {
        const stage_shard *x = &st->sh[st->done[(st->done_head + i) %
                                               st->total]];
        if (x->fd >= 0 && !x->restaged && !thin_tracked(st, x))
            done += x->size > x->thin ? x->size - x->thin : 0;
    }
    /* ... and, of shards thinned (done or not: samples of them still in
     * the buffer, groups the order has still to read), the items decided
     * that a counting rank has still to read: the order runs ahead of
     * the readers by that much at most. What thinning keeps behind the
     * cut (for clients that come back a little, at most half the budget
     * all shards together), and the pages the marks of open streams keep,
     * wait for no reader: counted, they could keep the order waiting for
     * readers that have read everything it decided. */
    for (size_t i = 0; i < st->nthinq; i++) {
        const stage_shard *x = &st->sh[st->thinq[i]];
        if (x->fd >= 0 && !x->restaged && thin_tracked(st, x))
            done += x->wait;
    }
    return done;
}

/* Readers hold more than the room (mu held): ranks far behind the
 * furthest are detached at once (--lag-samples), else the slowest once
 * the lag grace is spent (and ranks that never came), of whichever
 * world; what they held is swept into closing (*nc of cap). */
static void lag_rules(sio_plan *p, int *closing, size_t *nc, size_t cap)
{
    plan_stage *st = p->stage;
    uint64_t now = sio_now_ms();
    if (!st->blocked_ms)
        st->blocked_ms = now;
    /* A rank whose share is read (t UINT64_MAX) holds nothing and is no
     * measure. */
    uint64_t far = 0;
    for (unsigned wi = 0; wi < st->nw; wi++)
        for (uint32_t r = 0; r < st->w[wi].world; r++) {
            const stage_rank *k = &st->w[wi].rank[r];
            if (k->joined && !k->detached && k->t != UINT64_MAX &&
                k->t > far)
                far = k->t;
        }
    int moved = 0;
    if (st->lag_samples && far > st->lag_samples)
        for (unsigned wi = 0; wi < st->nw; wi++)
            for (uint32_t r = 0; r < st->w[wi].world; r++) {
                stage_rank *k = &st->w[wi].rank[r];
                if (k->joined && !k->detached &&
                    k->t < far - st->lag_samples) {
                    k->detached = 1;
                    st->detaches++;
                    moved = 1;
                }
            }
    if (!moved && now - st->blocked_ms >= st->lag_grace_ms) {
        stage_rank *slow = NULL;
        for (unsigned wi = 0; wi < st->nw; wi++) {
            st->w[wi].join_deadline_ms = 0;
            for (uint32_t r = 0; r < st->w[wi].world; r++) {
                stage_rank *k = &st->w[wi].rank[r];
                if (k->joined && !k->detached && (!slow || k->t < slow->t))
                    slow = k;
            }
        }
        if (slow && slow->t < far) {
            slow->detached = 1;
            st->detaches++;
        }
        st->blocked_ms = now; /* the next one after another grace */
    }
    *nc += sweep(p, closing + *nc, cap - *nc);
}

/* Room now (mu held)? readers 0: for a new shard of need bytes by the
 * steps (slot: the order reads it now); 1: for the order to decide more
 * items (stage_readers_room). A shard the order reads now, while the
 * shards that wait only for readers to pass them stay within the budget:
 * the rest of what is staged is what the order itself holds open (its
 * slots and the shards of the samples in its buffer, which may be every
 * shard of the epoch when the buffer is large), which no reader can give
 * back; waiting for readers (and detaching them) would not make room.
 * Readers that hold more than the budget are waited for. */
static int room_ok(const plan_stage *st, uint64_t need, int slot,
                   int readers)
{
    if (readers)
        return !atomic_load(&st->pressed) || done_bytes(st) <= st->budget;
    return has_room(st, need) || (slot && done_bytes(st) <= st->budget);
}

/* stage_room and stage_readers_room: what readers passed given back and
 * swept, then the room; without it, the lag rules. */
static int room_wait(sio_plan *p, uint64_t need, int slot, int readers)
{
    plan_stage *st = p->stage;
    int closing[64];
    size_t nc;
    thin_pass(p); /* (what readers passed: given back, no longer waiting) */
    pthread_mutex_lock(&p->mu);
    nc = sweep(p, closing, 64);
    int ok = room_ok(st, need, slot, readers);
    if (!ok && !st->lag_wait && st->nw) {
        lag_rules(p, closing, &nc, 64);
        ok = room_ok(st, need, slot, readers);
    }
    if (ok)
        st->blocked_ms = 0;
    else if (!st->blocked_ms)
        st->blocked_ms = sio_now_ms();
    pthread_mutex_unlock(&p->mu);
    close_all(p, closing, nc);
    return ok;
}

int stage_room(sio_plan *p, uint64_t size, int slot)
{
    return room_wait(p, size == UINT64_MAX ? 1 : size, slot, 0);
}

int stage_readers_room(sio_plan *p)
{
    plan_stage *st = p->stage;
    if (!st || !st->budget || !atomic_load(&st->pressed))
        return 1;
    /* (the common case, readers within the budget: no pass, no sweep) */
    pthread_mutex_lock(&p->mu);
    int ok = room_ok(st, 0, 0, 1);
    if (ok)
        st->blocked_ms = 0;
    pthread_mutex_unlock(&p->mu);
    return ok || room_wait(p, 0, 0, 1);
}

/* The most bytes fetched again for readers behind (mu held): the budget,
 * and beyond it what the order holds open at a reader's place (the
 * shards with items there: its slots and its buffer's), at the largest
 * shard staged. docs/architecture.md "Memory". */
static uint64_t restage_room(const plan_stage *st)
{
    uint64_t open = st->open_shards ? st->open_shards : 1;
    uint64_t held = st->max_shard && open > UINT64_MAX / st->max_shard
                        ? UINT64_MAX
                        : open * st->max_shard;
    return held > UINT64_MAX - st->budget ? UINT64_MAX : st->budget + held;
}

/* Queue restage j (no lock held; stage_take marked its shard queued and
 * reserved its room; an extension pinned the shard and writes into its
 * memfd, else one is taken here: a spare for a whole shard). */
static void restage_start(struct stage_job *j)
{
    sio_error e = {SIO_OK, ""};
    sio_io *io = NULL;
    const char *url = NULL;
    if (!plan_source(j->p, j->s, &io, &url) || !(j->url = strdup(url))) {
        sio_seterr(&e, SIO_ERR_NOMEM, "shard %" PRIu32 " cannot be fetched "
                   "again: %s", j->s, url ? "out of memory" : "no source");
    } else if (!j->extend) {
        j->fd = stage_memfd(j->fd >= 0          ? j->fd
                            : restage_whole(j) ? stage_spare(j->p)
                                               : -1,
                            &e);
    }
    if (e.code) {
        restage_settle(j, 0, e.code, &e);
        rhold_close(j->hold);
        free(j->url);
        free(j);
        return;
    }
    j->io = io;
    sio_plan_ref(j->p);
    sio_io_busy_add(io, 1);
    job_queue(j);
}

/* The waiter stage_prefetch takes with (none: nobody is woken). */
static plan_waiter prefetch_waiter;

sio_code stage_take(sio_plan *p, uint32_t s, uint64_t t, plan_waiter *w,
                    int *fd, char *err, size_t errlen)
{
    plan_stage *st = p->stage;
    int pre = w == &prefetch_waiter; /* no reader waits */
    struct stage_job *rj = NULL; /* a restage to start */
    *fd = -1;
    int closing[16];
    size_t nclosing = 0;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    if (x->fd >= 0 &&
        (!x->partial || (t >= x->cover && t <= x->cover_to))) {
        x->pins++;
        x->taken = 1;
        x->ahead = 0;
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
    /* A shard thinned while its step still fetches it has the items
     * behind its cut fetched back in at once (the fetch may hold until
     * the order moves on, which this reader may be the one to move),
     * held to the validator and size of the fetch's first answer. */
    int fetching = x->fetching && x->fd >= 0;
    uint64_t size_now = fetching ? x->have : x->size;
    if (!x->queued && x->fd >= 0 &&
        (x->punching ||
         (fetching && x->partial && t < x->cover &&
          (!x->tvhash || (x->kind == STAGE_MEMORY && !x->tsize))))) {
        /* Its holes are being punched: items fetched back in now could
         * be punched again; or it is thinned while its step still fetches
         * it and the store told no validator or size to hold its ranges
         * to: woken when the pass, or the fetch, ends. */
        st->thin_waiters = 1;
        plan_link_waiter(p, w);
        pthread_mutex_unlock(&p->mu);
        return SIO_ERR_AGAIN;
    }
    if (!x->queued) {
        /* Let go (fd -1), or partial from beyond t (extend). */
        int extend = x->fd >= 0, slide = -1;
        /* A partial memfd that no reader holds, whose window this
         * reader is past, or more than a window before (readers that
         * went on left it there; growing it back to t could take more
         * than the room, and nothing would make room): its window moves
         * to t (the memfd written afresh) rather than growing. */
        uint64_t wspan = 0, wcap = 0;
        if (extend && x->partial)
            window_of(st, x, &wspan, &wcap);
        int made = x->kind == STAGE_DECOMPRESS || x->kind == STAGE_ZIP;
        /* (a compressed shard or a zip larger than the budget: a window
         * of it at a time, never whole; of a size guessed from its index
         * after a restart too, which its ranges end within) */
        int big = made && x->size > st->budget && (x->vhash || x->adopt);
        /* (one being made, or larger than the budget: the source of each
         * of its windows is held for the next, restage_run) */
        int large = made && (x->size ? x->size : x->have) > st->budget;
        if (extend && x->partial && x->restaged && x->pins == 0 &&
            (x->kind == STAGE_MEMORY || made) &&
            (t > x->cover_to || (t < x->cover && x->cover - t > wspan))) {
            slide = x->fd;
            st->bytes -= x->mem <= st->bytes ? x->mem : st->bytes;
            st->restage_bytes -= x->mem <= st->restage_bytes
                                     ? x->mem
                                     : st->restage_bytes;
            x->mem = 0;
            x->fd = -1;
            x->partial = 0;
            x->cover = x->cover_to = 0;
            extend = 0;
        }
        if (!p->restage_fn) {
            snprintf(err, errlen, "shard %" PRIu32 " was let go by the "
                     "epoch's staging and cannot be fetched again", s);
            pthread_mutex_unlock(&p->mu);
            return SIO_ERR_CHANGED;
        }
        if (!extend && !x->uhash) {
            sio_io *io;
            const char *url;
            if (plan_source(p, s, &io, &url))
                x->uhash = uhash_of(url, x->kind);
        }
        /* Let go a moment ago (a client resuming from before where its
         * cut stream was): still whole in a spare. */
        int rfd = -1;
        uint64_t room = restage_room(st);
        if (!extend && slide < 0 && st->restage_bytes <= room &&
            x->size <= room - st->restage_bytes &&
            (rfd = spare_revive(x->uhash, x->vhash, x->size)) >= 0) {
            st->restage_bytes += x->size;
            x->restaged = 1;
            x->fd = rfd;
            x->doomed = x->swept; /* as a restage (restage_settle) */
            x->partial = 0;
            x->cover = x->cover_to = 0;
            x->mem = x->size;
            x->pins++;
            x->taken = 1;
            st->bytes += x->size;
            st->revived++;
            if (st->bytes > st->peak)
                st->peak = st->bytes;
            *fd = rfd;
            pthread_mutex_unlock(&p->mu);
            return SIO_OK;
        }
        /* The items from t on, one window of them (window_of): the
         * reader's own and the other ranks' there (they come back from
         * about where this one does); the whole shard when the rest of
         * it is small and most of it, or when its items cannot be told
         * (in place when extending a partial one; decompressed for a
         * compressed one). */
        stage_range rg = {0, x->size}, part[RANGED_MAX];
        uint64_t need = x->size - (extend && x->mem <= x->size ? x->mem : 0),
                 rb = 0, from = 0;
        size_t nr = 0;
        /* A partial memfd is extended with the items before its cover
         * (a reader behind it: all of them up to the cover), or with the
         * next window after it (a reader beyond it, or items decided
         * after its ranges were fetched: forward). */
        int forward = extend && t > x->cover_to;
        int back = extend && !forward;
        uint64_t lo = forward ? x->cover_to + 1 : t;
        uint64_t hi = back ? x->cover - 1 : x->last;
        if (extend || big ||
            (x->kind == STAGE_MEMORY && (x->vhash || x->adopt) &&
             x->final && x->size && !x->guess)) {
            uint64_t span, cap, end = hi, upto = hi;
            window_of(st, x, &span, &cap);
            /* A shard that fits a window: the ranges of all its items
             * from t on where they are not most of it (7/8), else the
             * whole shard (one request). A larger one: one window. */
            int fits = !extend && x->size <= cap;
            /* (forward: up to a window past t, where the reader is) */
            uint64_t at = t > lo ? t : lo;
            if (!back && !fits && hi >= at && hi - at >= span)
                end = at + span - 1;
            nr = hi >= lo ? ranged_of(p, s, lo, end, size_now,
                                      back || fits ? UINT64_MAX : cap, part,
                                      &rb, &upto)
                          : 0;
            if (nr && (back || fits) && upto < hi)
                nr = 0; /* the cover, or the rest, is not met: whole */
            /* (still fetched: what it has so far, which holds every item
             * decided of it) */
            if (!nr && fetching) {
                part[0] = (stage_range){0, x->have};
                nr = x->have ? 1 : 0;
                rb = x->have;
                upto = hi;
            }
            /* (ranges that are most of it: the whole shard, one
             * request; a shard's items from t on are mostly one run of
             * its bytes, its tail, which ranged_of joins) */
            if (nr && fits && rb > x->size - x->size / 8)
                nr = 0;
            if (nr)
                hi = upto;
        }
        if (nr) {
            need = rb;
            from = lo;
        }
        /* Shards fetched again that no reader holds now make room first,
         * the one needed last first (a shard left to its readers is kept
         * until they passed it; readers that need more than the room at
         * once must get on): fetched again when a reader comes to them. */
        while (!pre && nclosing + 1 < sizeof closing / sizeof *closing &&
               (st->restage_bytes > st->budget ||
                need > st->budget - st->restage_bytes)) {
            stage_shard *best = NULL;
            for (size_t k = 0; k < st->total; k++) {
                stage_shard *y = &st->sh[k];
                if (y->restaged && (y->taken || y->ahead) && y->fd >= 0 &&
                    y->pins == 0 &&
                    !y->queued && y != x && (!best || y->last > best->last))
                    best = y;
            }
            if (!best)
                break;
            let_go(st, best, &closing[nclosing]);
            if (closing[nclosing] >= 0)
                nclosing++;
            st->evicted++;
        }
        /* What readers hold now (pinned, or being fetched) beyond the
         * budget: as the steps stage the shards the order holds open
         * beyond theirs, a reader behind reads where the order held
         * open_shards shards at once, and with less room than that the
         * readers of a world that comes after the others let go of its
         * shards take them from each other (evicted, refused, fetched
         * again: 1.5x the dataset and 30 readers told to come back on
         * the 100 KiB bench set, 107 samples/s). */
        int refuse = st->restage_bytes > room ||
                     need > room - st->restage_bytes;
        /* Nothing fetched again is held: one fetch goes whatever it
         * needs (an item larger than the room: a --stage-bytes below a
         * sample's size), so that readers never wait for good. */
        if (refuse && st->restage_bytes == 0 && !pre)
            refuse = 0;
        /* A fetch for an item ahead takes at most half the room left, and
         * makes none: the reader's own item comes first. */
        if (pre && !refuse && need > (room - st->restage_bytes) / 2)
            refuse = 1;
        if (!refuse && !(rj = calloc(1, sizeof *rj)))
            refuse = -1;
        if (refuse && slide >= 0) {
            /* The window that moved is let go instead. */
            x->restaged = 0;
            x->gone = 1;
            closing[nclosing++] = slide;
        } else if (slide >= 0) {
            st->slides++;
        }
        if (refuse > 0) {
            if (!pre)
                st->refused++;
            snprintf(err, errlen, "shard %" PRIu32 " was let go and the "
                     "room to fetch shards again for readers behind "
                     "(%" PRIu64 " bytes) is taken: come back shortly", s,
                     st->budget);
            pthread_mutex_unlock(&p->mu);
            close_all(p, closing, nclosing);
            return SIO_ERR_BUSY;
        }
        if (refuse) {
            snprintf(err, errlen, "out of memory");
            pthread_mutex_unlock(&p->mu);
            close_all(p, closing, nclosing);
            return SIO_ERR_NOMEM;
        }
        *rj = (struct stage_job){
            .p = p, .s = s, .fd = extend ? x->fd : slide,
            .dec = x->kind == STAGE_DECOMPRESS,
            .zip = x->kind == STAGE_ZIP,
            .restage = x->kind == STAGE_DECOMPRESS || x->kind == STAGE_ZIP
                           ? 1 : 2,
            .extend = extend,
            .want_size = !fetching                 ? x->size
                         : x->kind == STAGE_MEMORY ? x->tsize
                                                   : 0,
            .want_v = x->vhash ? x->vhash : fetching ? x->tvhash : 0,
            .guess = x->guess,
            .adopt = x->adopt && !x->vhash,
            .to = hi, .forward = forward,
            .want_mem = need, .from = from, .nr = nr ? nr : 1,
            .keep_src = large && nr};
        memcpy(rj->rg, nr ? part : &rg, rj->nr * sizeof rg);
        /* (the source the last window of it stopped at: restage_run
         * goes on from there when this one starts at or after it) */
        rj->hold = rhold_take(st, x);
        st->restage_bytes += need; /* reserved until it is let go */
        x->ahead = (uint8_t)pre;
        if (extend && !x->restaged)
            x->nothin = 1; /* thinned, fetched back in: thinned no more */
        if (extend)
            x->pins++; /* the job's */
        else
            x->restaged = 1;
        x->queued = 1;
    }
    plan_link_waiter(p, w);
    pthread_mutex_unlock(&p->mu);
    close_all(p, closing, nclosing);
    if (rj)
        restage_start(rj);
    return SIO_ERR_AGAIN;
}

int stage_prefetch(sio_plan *p, uint32_t s, uint64_t t)
{
    plan_stage *st = p->stage;
    char why[8];
    int fd = -1;
    pthread_mutex_lock(&p->mu);
    const stage_shard *x = &st->sh[s];
    int there = x->fd >= 0 &&
                (!x->partial || (t >= x->cover && t <= x->cover_to));
    int skip = there || x->queued || x->failed || !x->gone ||
               x->kind != STAGE_MEMORY;
    pthread_mutex_unlock(&p->mu);
    if (skip)
        return 1;
    sio_code rc = stage_take(p, s, t, &prefetch_waiter, &fd, why, sizeof why);
    if (rc == SIO_OK)
        stage_unpin(p, s);
    return rc == SIO_OK || rc == SIO_ERR_AGAIN;
}

void stage_cover(sio_plan *p, uint32_t s, uint64_t *lo, uint64_t *hi)
{
    pthread_mutex_lock(&p->mu);
    const stage_shard *x = &p->stage->sh[s];
    *lo = x->partial ? x->cover : 0;
    *hi = x->partial ? x->cover_to : UINT64_MAX;
    pthread_mutex_unlock(&p->mu);
}

void stage_hold(sio_plan *p, uint32_t s, int pi, uint64_t items)
{
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &p->stage->sh[s];
    x->held = 1;
    x->hold_pi = pi;
    x->left = items;
    x->sized = 1;
    x->final = items == 0;
    int now = items == 0;
    if (now)
        x->held = 0;
    pthread_mutex_unlock(&p->mu);
    if (now)
        plan_fd_release(p, pi, 0);
}

sio_code stage_take_instead(sio_plan *p, uint32_t s, uint64_t t,
                            plan_waiter *w, int *fd, char *err,
                            size_t errlen)
{
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &p->stage->sh[s];
    if (!x->size && x->fd < 0 && !x->queued)
        x->size = (uint64_t)p->files[s].size; /* never staged: as planned */
    pthread_mutex_unlock(&p->mu);
    return stage_take(p, s, t, w, fd, err, errlen);
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

/* Does world w hold nothing any more (mu held): none of its readers
 * open, and each rank read its share, was detached, or never came within
 * the join grace? */
static int world_gone(const plan_stage *st, const stage_world *w,
                      uint64_t now)
{
    (void)st;
    for (uint32_t r = 0; r < w->world; r++) {
        const stage_rank *k = &w->rank[r];
        if (k->open)
            return 0;
        if (k->detached || (k->joined && k->t == UINT64_MAX))
            continue;
        if (!k->joined && now >= w->join_deadline_ms)
            continue;
        return 0;
    }
    return 1;
}

void stage_reader(sio_plan *p, uint32_t rank, uint32_t world, uint64_t t,
                  int open)
{
    plan_stage *st = p->stage;
    int closing[64];
    size_t nc = 0;
    pthread_mutex_lock(&p->mu);
    uint64_t released = st->released;
    stage_world *sw = NULL;
    for (unsigned i = 0; i < st->nw && !sw; i++)
        if (st->w[i].world == world)
            sw = &st->w[i];
    /* A world not followed yet: from its first reader on, its ranks are
     * expected for the join grace, as the first world's were. It takes
     * the place of a world whose readers are all gone for good. */
    if (!sw && open > 0 && world && world <= STAGE_WORLD_MAX) {
        unsigned at = st->nw;
        for (unsigned i = 0; i < st->nw && at == st->nw; i++)
            if (world_gone(st, &st->w[i], sio_now_ms()))
                at = i;
        stage_rank *ranks = at < STAGE_WORLDS ? calloc(world, sizeof *ranks)
                                              : NULL;
        if (ranks) {
            if (at == st->nw)
                st->nw++;
            else
                free(st->w[at].rank);
            sw = &st->w[at];
            sw->world = world;
            sw->rank = ranks;
            sw->join_deadline_ms = sio_now_ms() + st->join_ms;
        }
    }
    if (sw && rank < world) {
        stage_rank *k = &sw->rank[rank];
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
    thin_pass(p);
}

uint64_t stage_low_readers(sio_plan *p)
{
    plan_stage *st = p->stage;
    uint64_t low = UINT64_MAX, now = sio_now_ms();
    pthread_mutex_lock(&p->mu);
    if (!st->nw)
        low = 0;
    for (unsigned wi = 0; wi < st->nw && low; wi++) {
        const stage_world *w = &st->w[wi];
        uint64_t wl = UINT64_MAX;
        int joined = 0, expected = 0;
        for (uint32_t r = 0; r < w->world; r++) {
            const stage_rank *k = &w->rank[r];
            if (k->detached)
                continue;
            if (!k->joined) {
                expected |= now < w->join_deadline_ms;
                continue;
            }
            joined = 1;
            if (k->t < wl)
                wl = k->t;
        }
        if (expected && !joined)
            wl = 0;
        if (wl < low)
            low = wl;
    }
    pthread_mutex_unlock(&p->mu);
    return low;
}

uint32_t stage_widest_world(sio_plan *p)
{
    plan_stage *st = p->stage;
    uint32_t widest = 1;
    pthread_mutex_lock(&p->mu);
    for (unsigned wi = 0; wi < st->nw; wi++)
        if (st->w[wi].world > widest)
            widest = st->w[wi].world;
    pthread_mutex_unlock(&p->mu);
    return widest;
}

int stage_defer(sio_plan *p, uint32_t s, const char *url, uint64_t size,
                uint64_t vhash, int exact)
{
    plan_stage *st = p->stage;
    pthread_mutex_lock(&p->mu);
    stage_shard *x = &st->sh[s];
    int ok = x->fd < 0 && !x->queued && !x->pins;
    if (ok) {
        x->gone = 1;
        x->size = size;
        x->guess = !exact;
        x->vhash = vhash;
        x->adopt = vhash == 0;
        x->uhash = uhash_of(url, x->kind);
        x->left = x->decided = 0;
        x->sized = x->final = x->doomed = x->swept = 0;
        x->partial = 0;
        x->cover = x->cover_to = 0;
        st->deferred++;
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
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

int sio_plan_stages(const sio_plan *p)
{
    return p && p->stage != NULL;
}

int sio_plan_stage_other_world(const sio_plan *p, uint32_t world)
{
    /* A world that comes after the others let go of shards it needs
     * reads them fetched again (stage_take, restage_room). A fifth world
     * while four read is followed by nobody (stage_reader finds it no
     * place): like a detached rank, it holds no shard back and has a
     * shard let go fetched again for it. Only a world the staging could
     * never follow is left to the feed. */
    return p->stage && (world == 0 || world > STAGE_WORLD_MAX);
}

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

void sio_plan_restage(sio_plan *p)
{
    plan_refill_run(p);
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
    out->ranged = st->ranged;
    out->revived = st->revived;
    out->released = st->released;
    out->detaches = st->detaches;
    out->refused = st->refused;
    out->deferred = st->deferred;
    out->evicted = st->evicted;
    out->windows_moved = st->slides;
    out->windows_continued = st->continued;
    out->thinned_bytes = st->thinned;
    out->thin_passes = st->thin_passes;
    out->held = st->done_n;
    out->spare = stage_spare_bytes();
    out->blocked = st->blocked_ms != 0;
    pthread_mutex_unlock(&p->mu);
}
