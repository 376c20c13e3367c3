/*
 * objset.c — object-set sources (docs/operations.md "Datasets of small objects").
 *
 * A source "<prefix>?objects[=N]" takes every object under the prefix (an
 * s3:// prefix, an http-free store with a listing, or a local directory),
 * sorted bytewise by URL. Objects are grouped into samples by the
 * WebDataset key rule over their names relative to the prefix (abc.jpg +
 * abc.json form one sample; names the rule skips are skipped), and runs of
 * N consecutive samples (default 1000) form virtual shards. A virtual
 * shard is read as the tar archive its objects would make, in order: for
 * each object a ustar header (preceded by a pax "path=" header when the
 * name does not fit ustar), its bytes, zero padding to 512, and two zero
 * blocks at the end. So virtual shards take part in the shard permutation,
 * the interleave, the buffer, the indexes and seeks exactly like tar
 * shards.
 *
 * A virtual shard's URL is "<prefix>?objects=N&set=<digest>&shard=<i>":
 * the digest (SHA-256 of N and every member's name and size, 16 hex
 * digits) changes when the listing does, so indexes of an old listing are
 * never applied to a new one. The sets are registered in the io when a
 * source resolves; a virtual shard of a set that is not registered cannot
 * be opened.
 *
 * Reading: objects of the shard are fetched ahead in order (up to
 * OBJSET_AHEAD objects and OBJSET_AHEAD_BYTES bytes in flight, each one
 * GET through the fetch engine, so its concurrency limit and AIMD apply),
 * so the reader never waits on one object at a time. An object whose size
 * differs from the listing fails the shard as changed; a missing one as
 * not found (on_error decides).
 *
 * Threading: the registry has its own lock; sets are immutable once
 * registered and live as long as the io. A stream is used by one thread.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/core_int.h"
#include "store/backend_ops.h"
#include "store/store_int.h"
#include "shardio_tarhdr.h"

#define OBJSET_MARK "?objects"
#define OBJSET_PER_DEFAULT 1000u
#define OBJSET_PER_MAX 1000000u
#define OBJSET_AHEAD 32u
#define OBJSET_AHEAD_BYTES (16u << 20)
/* Longest relative name of a member (a pax path= value). */
#define OBJSET_NAME_MAX 4096u
/* Directory levels a walk of a local tree goes down at most. */
#define WALK_DEPTH_MAX 16

typedef struct objset {
    struct objset *next;
    char *prefix;          /* ends with '/' */
    uint32_t per;
    int links;             /* links=inside: follow symbolic links that
                              resolve inside the directory */
    int folders;           /* pair=folders: the first path component is
                              not part of a member's name */
    char digest[17];
    size_t nobj;
    char **urls;           /* full object URLs (as listed) */
    const char **names;    /* relative names (into urls) */
    uint64_t *sizes;
    uint64_t *off;         /* member's first byte within its shard */
    uint32_t *paxlen;      /* bytes of its pax header member (0: none) */
    uint32_t nshards;
    size_t *first;         /* shard i: objects [first[i], first[i + 1]) */
    uint64_t *ssize;       /* shard sizes */
} objset;

typedef struct registry {
    pthread_mutex_t mu;
    objset *sets;
    sio_io *io;
} registry;

static uint64_t pad512(uint64_t n)
{
    return (n + SIO_TAR_BLOCK - 1) / SIO_TAR_BLOCK * SIO_TAR_BLOCK;
}

/* The pax record "<len> path=<name>\n" (len counts itself). */
static void objset_free(objset *s)
{
    if (!s)
        return;
    for (size_t i = 0; s->urls && i < s->nobj; i++)
        free(s->urls[i]);
    free(s->urls);
    free(s->names);
    free(s->sizes);
    free(s->off);
    free(s->paxlen);
    free(s->first);
    free(s->ssize);
    free(s->prefix);
    free(s);
}

/* ------------------------------------------------------------------ */
/* The backend                                                          */

static int os_matches(const char *url)
{
    const char *q = strstr(url, OBJSET_MARK "=");
    return q && strstr(q, "&set=") && strstr(q, "&shard=");
}

static sio_code os_create(sio_io *io, void **ctx, sio_error *err)
{
    registry *r = calloc(1, sizeof *r);
    if (!r)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    r->io = io;
    *ctx = r;
    return SIO_OK;
}

static void os_destroy(void *ctx)
{
    registry *r = ctx;
    if (!r)
        return;
    while (r->sets) {
        objset *s = r->sets;
        r->sets = s->next;
        objset_free(s);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* The set and shard of a virtual shard URL, or NULL. */
static objset *lookup(registry *r, const char *url, uint32_t *shard)
{
    const char *q = strstr(url, OBJSET_MARK "=");
    const char *sp = q ? strstr(q, "&set=") : NULL;
    const char *sh = q ? strstr(q, "&shard=") : NULL;
    char digest[17];
    objset *s;
    if (!q || !sp || !sh || strlen(sp + 5) < 16)
        return NULL;
    memcpy(digest, sp + 5, 16);
    digest[16] = '\0';
    char *end;
    unsigned long v = strtoul(sh + 7, &end, 10);
    if (end == sh + 7 || *end || v > UINT32_MAX)
        return NULL;
    *shard = (uint32_t)v;
    pthread_mutex_lock(&r->mu);
    for (s = r->sets; s; s = s->next)
        if (!strcmp(s->digest, digest) &&
            (size_t)(q - url) == strlen(s->prefix) &&
            !strncmp(url, s->prefix, (size_t)(q - url)))
            break;
    pthread_mutex_unlock(&r->mu);
    if (s && *shard >= s->nshards)
        return NULL;
    return s;
}

static int os_is_container(void *ctx, const char *url)
{
    (void)ctx;
    (void)url;
    return 0;
}

static sio_code os_list(void *ctx, const char *url, sio_objlist *out,
                        sio_error *err)
{
    (void)ctx;
    (void)out;
    return sio_seterr(err, SIO_ERR_UNSUPPORTED, "a virtual shard is not a "
                      "prefix: %s", url);
}

static sio_code os_stat(void *ctx, const char *url, uint64_t *size,
                        sio_error *err)
{
    uint32_t shard;
    objset *s = lookup(ctx, url, &shard);
    if (!s)
        return sio_seterr(err, SIO_ERR_NOTFOUND,
                          "no resolved object set for %s", url);
    *size = s->ssize[shard];
    return SIO_OK;
}

/* One open object of the shard being read. */
typedef struct obj_slot {
    size_t j;              /* member index */
    sio_stream *st;
    uint64_t got;          /* data bytes read from it */
    int checked;
} obj_slot;

typedef struct ostream {
    sio_stream base;
    registry *r;
    objset *s;
    uint32_t shard;
    size_t j0, j1;         /* members of the shard */
    size_t j;              /* member at pos */
    uint64_t pos, end;     /* offsets within the shard's tar */
    obj_slot ring[OBJSET_AHEAD];
    size_t rhead, rlen;    /* open objects: members j .. j + rlen - 1 */
    size_t next_open;      /* next member to open ahead */
    uint64_t ahead_bytes;  /* bytes of the open objects not read yet */
    uint64_t first_data;   /* data offset to open member j at (seek) */
    unsigned char *pax;    /* scratch: a pax member */
    size_t paxcap;
    char err[512];
} ostream;

static void close_slot(obj_slot *o)
{
    if (o->st)
        o->st->ops->close(o->st);
    o->st = NULL;
}

/* Open members ahead of the reader, in order, within the bounds. */
static sio_code open_ahead(ostream *o)
{
    while (o->next_open < o->j1 && o->rlen < OBJSET_AHEAD &&
           (o->rlen == 0 || o->ahead_bytes < OBJSET_AHEAD_BYTES)) {
        size_t j = o->next_open;
        const sio_backend_ops *ops;
        void *ctx;
        sio_error e;
        uint64_t from = j == o->j ? o->first_data : 0;
        obj_slot *sl = &o->ring[(o->rhead + o->rlen) % OBJSET_AHEAD];
        e.msg[0] = '\0';
        sio_code rc = sio_io_backend(o->r->io, o->s->urls[j], &ops, &ctx, &e);
        if (rc == SIO_OK) {
            memset(sl, 0, sizeof *sl);
            sl->j = j;
            sl->got = from;
            if (o->s->sizes[j] == 0)
                sl->st = NULL; /* nothing to fetch */
            else if (ops->open_range)
                rc = ops->open_range(ctx, o->s->urls[j], from,
                                     o->s->sizes[j], &sl->st, &e);
            else
                rc = ops->open(ctx, o->s->urls[j], from, &sl->st, &e);
        }
        if (rc) {
            snprintf(o->err, sizeof o->err, "object %s: %s", o->s->urls[j],
                     e.msg);
            return rc;
        }
        o->rlen++;
        o->next_open++;
        o->ahead_bytes += o->s->sizes[j] - from;
    }
    return SIO_OK;
}

/* Member j's layout: [pax][header][data][pad]. */
static void member_parts(const objset *s, size_t j, uint64_t *pax,
                         uint64_t *hdr_end, uint64_t *data_end,
                         uint64_t *total)
{
    *pax = s->paxlen[j];
    *hdr_end = *pax + SIO_TAR_BLOCK;
    *data_end = *hdr_end + s->sizes[j];
    *total = *hdr_end + pad512(s->sizes[j]);
}

/* Bytes [a, a + n) of member j's pax member into buf. */
static sio_code pax_bytes(ostream *o, size_t j, uint64_t a, unsigned char *buf,
                          size_t n)
{
    const objset *s = o->s;
    size_t need = s->paxlen[j];
    if (need > o->paxcap) {
        unsigned char *nb = realloc(o->pax, need);
        if (!nb)
            return SIO_ERR_NOMEM;
        o->pax = nb;
        o->paxcap = need;
    }
    memset(o->pax, 0, need);
    size_t nl = strlen(s->names[j]), rl = sio_tar_pax_path_len(nl);
    int fits;
    sio_tar_header(o->pax, "././@PaxHeader", 14, 'x', rl, &fits);
    snprintf((char *)o->pax + SIO_TAR_BLOCK, need - SIO_TAR_BLOCK,
             "%zu path=%s\n", rl, s->names[j]);
    o->pax[SIO_TAR_BLOCK + rl] = 0; /* snprintf's NUL lies in the padding */
    memcpy(buf, o->pax + a, n);
    return SIO_OK;
}

static sio_code os_read(sio_stream *st, void *vbuf, size_t cap, size_t *got)
{
    ostream *o = (ostream *)st;
    unsigned char *buf = vbuf;
    const objset *s = o->s;
    sio_code rc;
    *got = 0;
    if (o->pos >= o->end || cap == 0)
        return SIO_OK;
    if (cap > o->end - o->pos)
        cap = (size_t)(o->end - o->pos);
    uint64_t trailer = s->ssize[o->shard] - 2 * SIO_TAR_BLOCK;
    if (o->pos >= trailer) { /* the two zero blocks */
        memset(buf, 0, cap);
        o->pos += cap;
        *got = cap;
        return SIO_OK;
    }
    size_t j = o->j;
    uint64_t a = o->pos - s->off[j], pax, hdr_end, data_end, total;
    member_parts(s, j, &pax, &hdr_end, &data_end, &total);
    size_t n;
    if (a < pax) {
        n = (size_t)(pax - a) < cap ? (size_t)(pax - a) : cap;
        rc = pax_bytes(o, j, a, buf, n);
        if (rc)
            return rc;
    } else if (a < hdr_end) {
        unsigned char blk[SIO_TAR_BLOCK];
        int fits;
        sio_tar_header(blk, s->names[j], strlen(s->names[j]), '0',
                       s->sizes[j], &fits);
        n = (size_t)(hdr_end - a) < cap ? (size_t)(hdr_end - a) : cap;
        memcpy(buf, blk + (a - pax), n);
    } else if (a < data_end) {
        rc = open_ahead(o);
        if (rc)
            return rc;
        obj_slot *sl = &o->ring[o->rhead];
        if (!o->rlen || sl->j != j || !sl->st) {
            snprintf(o->err, sizeof o->err, "object set reader out of step");
            return SIO_ERR_IO;
        }
        uint64_t want = data_end - a;
        n = want < cap ? (size_t)want : cap;
        size_t r = 0;
        rc = sl->st->ops->read(sl->st, buf, n, &r);
        if (rc) {
            snprintf(o->err, sizeof o->err, "object %s: %s", s->urls[j],
                     sl->st->ops->errmsg(sl->st));
            return rc;
        }
        if (!sl->checked && sl->st->ops->info) {
            sio_objinfo oi = {UINT64_MAX, ""};
            sl->st->ops->info(sl->st, &oi);
            sl->checked = 1;
            if (oi.size != UINT64_MAX && oi.size != s->sizes[j]) {
                snprintf(o->err, sizeof o->err,
                         "object %s changed: %" PRIu64 " bytes, listed %"
                         PRIu64, s->urls[j], oi.size, s->sizes[j]);
                return SIO_ERR_CHANGED;
            }
        }
        if (r == 0) {
            snprintf(o->err, sizeof o->err,
                     "object %s ended at %" PRIu64 " of its listed %" PRIu64
                     " bytes", s->urls[j], sl->got, s->sizes[j]);
            return SIO_ERR_CHANGED;
        }
        sl->got += r;
        o->ahead_bytes -= r;
        n = r;
    } else {
        n = (size_t)(total - a) < cap ? (size_t)(total - a) : cap;
        memset(buf, 0, n);
    }
    o->pos += n;
    *got = n;
    if (o->pos - s->off[j] >= total) {
        /* the member is done: its object slot goes, the next one starts */
        if (o->rlen && o->ring[o->rhead].j == j) {
            close_slot(&o->ring[o->rhead]);
            o->rhead = (o->rhead + 1) % OBJSET_AHEAD;
            o->rlen--;
        }
        o->j++;
        o->first_data = 0;
        if (o->next_open < o->j)
            o->next_open = o->j; /* a member passed without its data */
    }
    return SIO_OK;
}

static const char *os_errmsg(const sio_stream *st)
{
    return ((const ostream *)st)->err;
}

static void os_close(sio_stream *st)
{
    ostream *o = (ostream *)st;
    if (!o)
        return;
    for (size_t i = 0; i < o->rlen; i++)
        close_slot(&o->ring[(o->rhead + i) % OBJSET_AHEAD]);
    free(o->pax);
    free(o);
}

static void os_info(sio_stream *st, sio_objinfo *out)
{
    ostream *o = (ostream *)st;
    out->size = o->s->ssize[o->shard];
    snprintf(out->validator, sizeof out->validator, "set:%s",
             o->s->digest);
}

static const sio_stream_ops objset_stream_ops = {os_read, os_errmsg,
                                                 os_close, os_info, NULL};

static sio_code os_open_range(void *ctx, const char *url, uint64_t offset,
                              uint64_t end, sio_stream **out, sio_error *err)
{
    registry *r = ctx;
    uint32_t shard;
    objset *s = lookup(r, url, &shard);
    ostream *o;
    *out = NULL;
    if (!s)
        return sio_seterr(err, SIO_ERR_NOTFOUND,
                          "no resolved object set for %s", url);
    o = calloc(1, sizeof *o);
    if (!o)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    o->base.ops = &objset_stream_ops;
    o->r = r;
    o->s = s;
    o->shard = shard;
    o->j0 = s->first[shard];
    o->j1 = s->first[shard + 1];
    o->end = end < s->ssize[shard] ? end : s->ssize[shard];
    o->pos = offset < o->end ? offset : o->end;
    /* The member at offset (binary search over the members' offsets). */
    size_t lo = o->j0, hi = o->j1;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->off[mid] <= o->pos)
            lo = mid;
        else
            hi = mid;
    }
    o->j = lo;
    if (o->j < o->j1) {
        uint64_t pax, hdr_end, data_end, total;
        member_parts(s, o->j, &pax, &hdr_end, &data_end, &total);
        uint64_t a = o->pos - s->off[o->j];
        if (a >= total) {
            o->j++; /* in the end blocks */
        } else if (a > hdr_end) {
            o->first_data = (a < data_end ? a : data_end) - hdr_end;
        }
    }
    o->next_open = o->j;
    *out = &o->base;
    return SIO_OK;
}

static sio_code os_open(void *ctx, const char *url, uint64_t offset,
                        sio_stream **out, sio_error *err)
{
    return os_open_range(ctx, url, offset, UINT64_MAX, out, err);
}

const sio_backend_ops sio_backend_objset = {
    .name = "objset",
    .matches = os_matches,
    .list = os_list,
    .stat = os_stat,
    .is_container = os_is_container,
    .open = os_open,
    .destroy = os_destroy,
    .create = os_create,
    .open_range = os_open_range,
};

/* ------------------------------------------------------------------ */
/* Resolving "<prefix>?objects[=N]"                                     */

int sio_objset_spec(const char *spec)
{
    const char *q = strstr(spec, OBJSET_MARK);
    return q && (q[sizeof OBJSET_MARK - 1] == '\0' ||
                 q[sizeof OBJSET_MARK - 1] == '=' ||
                 q[sizeof OBJSET_MARK - 1] == '&') &&
           !strstr(q, "&set=");
}

static int cmp_obj(const void *a, const void *b)
{
    const sio_object *x = a, *y = b;
    return strcmp(x->url, y->url);
}

/* pair=folders: the member name of url below the prefix (after its
 * first path component), or NULL when it has none. */
static const char *below_folder(const char *url, size_t pl)
{
    const char *slash = strchr(url + pl, '/');
    return slash && slash[1] ? slash + 1 : NULL;
}

/* qsort_r order of pair=folders (arg: the prefix length). */
static int cmp_folders(const void *a, const void *b, void *arg)
{
    const sio_object *x = a, *y = b;
    size_t pl = *(const size_t *)arg;
    const char *nx = below_folder(x->url, pl);
    const char *ny = below_folder(y->url, pl);
    if (!nx || !ny)
        return nx ? 1 : ny ? -1 : strcmp(x->url, y->url);
    int c = strcmp(nx, ny);
    return c ? c : strcmp(x->url, y->url);
}

/* What a walk of a local tree keeps to: its root (resolved), whether
 * links inside it are followed, the directories on the current path (no
 * loops), and the links it passed over. */
typedef struct walker {
    char root[PATH_MAX];
    size_t rootlen;
    int links;
    struct {
        dev_t dev;
        ino_t ino;
    } path[WALK_DEPTH_MAX + 2];
    int npath;
    unsigned skipped;
} walker;

/* Every regular file under dir (recursively, at most WALK_DEPTH_MAX
 * levels), as "<url_prefix><relative path>" with its size. Symbolic links
 * are not followed (counted in w->skipped); with w->links, a link that
 * resolves inside the root is, unless it leads back to a directory on
 * the current path (a loop). */
static sio_code walk(walker *w, const char *dir, const char *url, int depth,
                     sio_objlist *out, sio_error *err)
{
    DIR *d;
    struct dirent *e;
    sio_code rc = SIO_OK;
    struct stat dst;
    if (depth > WALK_DEPTH_MAX)
        return SIO_OK;
    d = opendir(dir);
    if (!d)
        return sio_seterr(err, SIO_ERR_NOTFOUND, "opendir %s", dir);
    int pushed = 0; /* this directory is on the loop-check path */
    if (fstat(dirfd(d), &dst) == 0 && w->npath < WALK_DEPTH_MAX + 2) {
        w->path[w->npath].dev = dst.st_dev;
        w->path[w->npath].ino = dst.st_ino;
        w->npath++;
        pushed = 1;
    }
    while (rc == SIO_OK && (e = readdir(d)) != NULL) {
        char p[8192], u[8192];
        struct stat st;
        if (e->d_name[0] == '.' &&
            (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        if (snprintf(p, sizeof p, "%s%s", dir, e->d_name) >= (int)sizeof p ||
            snprintf(u, sizeof u, "%s%s", url, e->d_name) >= (int)sizeof u ||
            lstat(p, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char real[PATH_MAX];
            if (!w->links || !realpath(p, real) ||
                strncmp(real, w->root, w->rootlen) != 0 ||
                (real[w->rootlen] != '/' && real[w->rootlen] != '\0') ||
                stat(real, &st) != 0) {
                w->skipped++;
                continue;
            }
            int loop = 0;
            for (int i = 0; S_ISDIR(st.st_mode) && i < w->npath; i++)
                loop |= w->path[i].dev == st.st_dev &&
                        w->path[i].ino == st.st_ino;
            if (loop) {
                w->skipped++;
                continue;
            }
        }
        if (S_ISDIR(st.st_mode)) {
            strcat(p, "/");
            strcat(u, "/");
            if (strlen(p) < sizeof p - 1 && strlen(u) < sizeof u - 1)
                rc = walk(w, p, u, depth + 1, out, err);
        } else if (S_ISREG(st.st_mode)) {
            rc = sio_objlist_add(out, u, (uint64_t)st.st_size);
            if (rc)
                sio_seterr(err, rc, "too many objects under %s", url);
        }
    }
    closedir(d);
    if (pushed)
        w->npath--;
    return rc;
}

/* Skipped by the WebDataset rule: no key.ext split, or a top-level
 * "__*__" name. */
static int member_key(const char *name, size_t *klen)
{
    if (sio_split_key(name, klen) != 0)
        return -1;
    const char *slash = strchr(name, '/');
    size_t top = slash ? (size_t)(slash - name) : *klen;
    if (top >= 4 && name[0] == '_' && name[1] == '_' && name[top - 1] == '_' &&
        name[top - 2] == '_')
        return -1;
    return 0;
}

sio_code sio_objset_resolve(sio_io *io, const char *spec, sio_objlist *out,
                            sio_error *err)
{
    const char *q = strstr(spec, OBJSET_MARK);
    const sio_backend_ops *ops;
    void *ctx;
    sio_objlist l;
    objset *s = NULL;
    registry *reg;
    sio_code rc;
    unsigned long per = OBJSET_PER_DEFAULT;

    int folders = 0, links = 0;
    /* Options: "objects[=N]", "&pair=folders", "&links=inside". */
    const char *o = q + 1;
    while (*o) {
        const char *amp = strchr(o, '&');
        size_t len = amp ? (size_t)(amp - o) : strlen(o);
        if (len > 8 && !strncmp(o, "objects=", 8)) {
            char num[16], *end;
            if (len - 8 >= sizeof num)
                goto badopt;
            memcpy(num, o + 8, len - 8);
            num[len - 8] = '\0';
            per = strtoul(num, &end, 10);
            if (*end || per == 0 || per > OBJSET_PER_MAX)
                return sio_seterr(err, SIO_ERR_INVALID,
                                  "?objects=N: N samples per virtual shard, "
                                  "1..%u", OBJSET_PER_MAX);
        } else if (len == 12 && !strncmp(o, "pair=folders", 12)) {
            folders = 1;
        } else if (len == 12 && !strncmp(o, "links=inside", 12)) {
            links = 1;
        } else if (!(len == 7 && !strncmp(o, "objects", 7))) {
        badopt:
            return sio_seterr(err, SIO_ERR_INVALID,
                              "object set options: ?objects[=N][&pair="
                              "folders][&links=inside], not %.*s",
                              (int)(len > 64 ? 64 : len),
                              o);
        }
        o += len + (amp ? 1 : 0);
    }
    reg = sio_io_backend_ctx(io, &sio_backend_objset);
    if (!reg)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED, "object sets unavailable");
    s = calloc(1, sizeof *s);
    if (!s)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    size_t plen = (size_t)(q - spec);
    int slash = plen > 0 && spec[plen - 1] == '/';
    s->prefix = malloc(plen + 2);
    if (!s->prefix) {
        objset_free(s);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    memcpy(s->prefix, spec, plen);
    if (!slash)
        s->prefix[plen++] = '/';
    s->prefix[plen] = '\0';
    s->per = (uint32_t)per;
    s->folders = folders;
    s->links = links;
    /* objects, not shards: out->max bounds the virtual shards made of
     * them (up to `per` objects each) */
    sio_objlist_init(&l, SIO_SHARDS_MAX);
    rc = sio_io_backend(io, s->prefix, &ops, &ctx, err);
    if (rc == SIO_OK && !ops->is_container(ctx, s->prefix))
        rc = sio_seterr(err, SIO_ERR_NOTFOUND,
                        "an object set needs a prefix or directory to list: "
                        "%s", s->prefix);
    if (rc == SIO_OK && ops == &sio_backend_file &&
        strncmp(s->prefix, "file://", 7) != 0) {
        /* A local tree: nothing outside it, whatever links it holds. */
        walker *w = calloc(1, sizeof *w);
        if (!w) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        } else if (!realpath(s->prefix, w->root)) {
            rc = sio_seterr(err, SIO_ERR_NOTFOUND, "%s: %s", s->prefix,
                            strerror(errno));
        } else {
            w->rootlen = strlen(w->root);
            if (w->rootlen == 1) /* "/" */
                w->rootlen = 0;
            w->links = links;
            rc = walk(w, s->prefix, s->prefix, 0, &l, err);
            if (w->skipped)
                SIO_LOG(sio_io_logger(io), SIO_LOG_WARN,
                        "event=objset_links_skipped dir=%s count=%u "
                        "reason=\"%s\"", s->prefix, w->skipped,
                        links ? "symbolic links that resolve outside the "
                                "directory, dangle or loop are not followed"
                              : "symbolic links are not followed (object "
                                "set option links=inside follows those that "
                                "stay inside the directory)");
        }
        free(w);
    } else if (rc == SIO_OK)
        rc = ops->list(ctx, s->prefix, &l, err);
    if (rc)
        goto fail;
    if (folders) {
        /* pair=folders: sort by the name below the first folder, then by
         * the folder, so a sample's members from parallel folders meet. */
        size_t pl0 = strlen(s->prefix);
        qsort_r(l.v, l.n, sizeof *l.v, cmp_folders, &pl0);
    } else {
        qsort(l.v, l.n, sizeof *l.v, cmp_obj);
    }

    /* Members: the objects the key rule keeps, in order. */
    s->urls = calloc(l.n ? l.n : 1, sizeof *s->urls);
    s->names = calloc(l.n ? l.n : 1, sizeof *s->names);
    s->sizes = calloc(l.n ? l.n : 1, sizeof *s->sizes);
    s->off = calloc(l.n ? l.n : 1, sizeof *s->off);
    s->paxlen = calloc(l.n ? l.n : 1, sizeof *s->paxlen);
    s->first = calloc(l.n + 2, sizeof *s->first);
    s->ssize = calloc(l.n + 1, sizeof *s->ssize);
    if (!s->urls || !s->names || !s->sizes || !s->off || !s->paxlen ||
        !s->first || !s->ssize) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t pl = strlen(s->prefix);
    uint64_t samples = 0, shard_bytes = 0;
    const char *prev_key = NULL;
    size_t prev_klen = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto fail;
    }
    EVP_DigestUpdate(md, &s->per, sizeof s->per);
    EVP_DigestUpdate(md, &s->folders, sizeof s->folders);
    if (s->links) /* (absent before links=inside: old ids unchanged) */
        EVP_DigestUpdate(md, "links=inside", 12);
    s->first[0] = 0;
    for (size_t i = 0; i < l.n; i++) {
        const char *u = l.v[i].url;
        size_t klen;
        if (strncmp(u, s->prefix, pl) != 0 || !u[pl])
            continue;
        const char *name = folders ? below_folder(u, pl) : u + pl;
        if (!name)
            continue; /* pair=folders: not in a folder */
        size_t nl = strlen(name);
        if (nl > OBJSET_NAME_MAX || member_key(name, &klen) != 0 ||
            l.v[i].size == UINT64_MAX)
            continue;
        int new_sample = !prev_key || klen != prev_klen ||
                         memcmp(prev_key, name, klen) != 0;
        if (new_sample) {
            if (samples > 0 && samples % per == 0) {
                /* close the shard */
                s->ssize[s->nshards] = shard_bytes + 2 * SIO_TAR_BLOCK;
                s->first[++s->nshards] = s->nobj;
                shard_bytes = 0;
            }
            samples++;
        }
        size_t j = s->nobj++;
        s->urls[j] = l.v[i].url; /* taken over from the listing */
        l.v[i].url = NULL;
        s->names[j] = s->urls[j] + (name - u);
        s->sizes[j] = l.v[i].size;
        s->off[j] = shard_bytes;
        s->paxlen[j] = sio_tar_name_fits(name, nl)
                           ? 0
                           : (uint32_t)(SIO_TAR_BLOCK +
                                        pad512(sio_tar_pax_path_len(nl)));
        shard_bytes += s->paxlen[j] + SIO_TAR_BLOCK + pad512(s->sizes[j]);
        prev_key = s->names[j];
        prev_klen = klen;
        EVP_DigestUpdate(md, u + pl, strlen(u + pl) + 1);
        EVP_DigestUpdate(md, &s->sizes[j], sizeof s->sizes[j]);
    }
    if (s->nobj) {
        s->ssize[s->nshards] = shard_bytes + 2 * SIO_TAR_BLOCK;
        s->first[++s->nshards] = s->nobj;
    }
    {
        unsigned char h[32];
        unsigned int hl = 0;
        static const char hx[] = "0123456789abcdef";
        EVP_DigestFinal_ex(md, h, &hl);
        EVP_MD_CTX_free(md);
        for (int i = 0; i < 8; i++) {
            s->digest[2 * i] = hx[h[i] >> 4];
            s->digest[2 * i + 1] = hx[h[i] & 15];
        }
        s->digest[16] = '\0';
    }
    sio_objlist_free(&l);
    if (s->nobj == 0) {
        rc = sio_seterr(err, SIO_ERR_NOTFOUND, "no objects under %s",
                        s->prefix);
        goto fail;
    }
    /* The virtual shards, and the set in the registry (an identical set
     * already there is kept: its streams may be open). */
    for (uint32_t i = 0; i < s->nshards && rc == SIO_OK; i++) {
        char url[8192];
        int n = snprintf(url, sizeof url,
                         "%s" OBJSET_MARK "=%u%s&set=%s&shard=%06u",
                         s->prefix, s->per, s->folders ? "&pair=folders" : "",
                         s->digest, i);
        if (n < 0 || (size_t)n >= sizeof url)
            rc = sio_seterr(err, SIO_ERR_LIMIT, "prefix too long");
        else
            rc = sio_objlist_add(out, url, s->ssize[i]);
        if (rc == SIO_ERR_LIMIT && n >= 0 && (size_t)n < sizeof url)
            sio_seterr(err, rc, "too many shards (max %zu)", out->max);
    }
    if (rc)
        goto fail2;
    pthread_mutex_lock(&reg->mu);
    objset *have;
    for (have = reg->sets; have; have = have->next)
        if (!strcmp(have->digest, s->digest) && !strcmp(have->prefix, s->prefix))
            break;
    if (!have) {
        s->next = reg->sets;
        reg->sets = s;
        s = NULL;
    }
    pthread_mutex_unlock(&reg->mu);
    objset_free(s);
    return SIO_OK;
fail:
    sio_objlist_free(&l);
fail2:
    objset_free(s);
    return rc;
}
