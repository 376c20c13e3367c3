/*
 * index.c — shard indexes: built while shards stream, kept in memory,
 * persisted as files (format in include/shardio_index.h).
 *
 * The store maps a shard URL to an entry. An entry's groups grow by offers
 * from shard readers, strictly in order (group g is taken only when g
 * groups are known), so readers that stream one shard at the same time
 * agree without coordination. While an entry is built its records are
 * appended to "<sha256(url)>.scidx.tmp" in the store's directory; the
 * trailer, fsync and rename make the file visible only when complete, so
 * a crash never leaves a file that is used. File names are hashes: no URL
 * (which may carry credentials) is written anywhere.
 *
 * Locking: x->mu guards the table; e->mu guards one entry. x->mu may be
 * held while taking e->mu, never the other way round (the counters are
 * atomic for that reason). File I/O of a
 * builder runs under e->mu (buffered stdio; the fsync once per shard).
 * Ownership: the store owns its entries until sio_index_close().
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "store/store_int.h"
#include "shardio_index.h"

#define INDEX_MAGIC "SCIDX\0\1\0"
#define INDEX_HEADER_LEN (8 + 4 + 4 + 8 + 8)
#define INDEX_TRAILER_LEN (1 + 8 + 8)
/* Remote directories remembered, and the misses after which one with no
 * sidecar is not asked again. */
#define SIDECAR_DIRS 64
#define SIDECAR_GIVE_UP 8u
/* A sidecar larger than this is ignored (it would be read into memory). */
#define INDEX_SIDECAR_MAX (256ull << 20)
#define INDEX_BUCKETS_MIN 1024u
/* A check read of a file's first group asks the store for the group and
 * this much after it: enough for the next group's headers (pax and GNU
 * long-name headers included), which tell where the group ends. */
#define INDEX_PROBE_SLACK (16u << 10)

struct sio_index_entry {
    pthread_mutex_t mu;
    sio_group_recorder rec; /* sio_index_recorder: offer/finish on it */
    char *url;
    char hash[65];
    uint64_t size, mtime;
    uint64_t mtime_ns;    /* a local file's mtime in ns when the entry was
                             made or refreshed (memory only; 0: unknown) */
    uint64_t vsize;       /* ... and what that read staged then (the
                             object's bytes; decompressed; a zip's tar) */
    uint64_t version;     /* a remote object's validator (hash) when a read
                             indexed it whole (memory only; 0: unknown) */
    sio_index_group *g;
    uint64_t n, cap;
    uint64_t good, bytes;
    int complete, stream_only;
    /* Where the groups came from: read here, or loaded from a file
     * (SRC_STATE, SRC_SIDECAR: a hint until a read from the start to the
     * end agreed with every group); confirmed: the leading groups such a
     * read agreed with so far; gen: times loaded groups were dropped. */
    int src;
    uint64_t confirmed;
    _Atomic uint64_t gen;
    /* Open views (sio_index_view_open) and the group arrays dropped while
     * some were open: freed when the last view closes. */
    unsigned views;
    struct retired { sio_index_group *g; struct retired *next; } *retired;
    /* Checks that wait for someone who relies on the index
     * (sio_index_vet): deferred, a file may exist but the shard's size was
     * not known; unprobed, the first and last groups were not read yet.
     * settled: neither is pending (read without the lock). */
    int deferred, unprobed;
    atomic_int settled;
    FILE *tmp;            /* being written (dir set) */
    uint64_t sum;         /* FNV-1a 64 of what tmp holds */
    int write_failed;
    char *path;           /* final file, once complete */
    struct sio_index_entry *next; /* hash chain */
    sio_index *x;
};

enum { SRC_READ = 0, SRC_STATE = 1, SRC_SIDECAR = 2 };
static const char *const src_name[] = {"read", "state", "sidecar"};

struct sio_index {
    pthread_mutex_t mu;
    char *dir;
    int sidecars;
    int probe_sidecars;   /* ask for unlisted remote shards' sidecars */
    sio_logger log;
    sio_index_entry **b;
    size_t nb, n;
    /* Counters: atomic, so that no entry path takes x->mu (an entry's
     * lock is never held while taking the store's). */
    atomic_uint_fast64_t entries, complete, groups, loaded, built, invalid,
        write_errors, rejected[3], dropped;
    /* Remote directories whose sidecars keep being absent: after
     * SIDECAR_GIVE_UP misses and no hit, a directory is not asked again
     * (each ask is a request to the store, which may throttle). sidemu
     * is taken with an entry's lock held, never the other way round. */
    pthread_mutex_t sidemu;
    struct side_dir {
        uint64_t h;          /* hash of the directory URL (0: free) */
        uint32_t misses, hits;
    } side[SIDECAR_DIRS];
    size_t side_next;
};

/* Little-endian encoding ------------------------------------------------ */

static void put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#define FNV64_INIT 0xcbf29ce484222325ull

static uint64_t fnv64(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint32_t sio_index_keyhash(const char *key, size_t len)
{
    uint32_t h = 0x811c9dc5u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x01000193u;
    }
    return h;
}

/* The parser -------------------------------------------------------------- */

/* The smallest group record: 'G', offset, end, bytes, flags, keylen,
 * nfields and a one-byte key (a bad group has no fields). */
#define INDEX_RECORD_MIN (1 + 8 + 8 + 8 + 4 + 2 + 2 + 1)

/* Parse data; with size (not UINT64_MAX) the group count the trailer
 * claims is checked against the shard's size before the groups are
 * allocated. The trailer is where it must be (the file's last bytes), so
 * its count is known before the records are read; the records must then
 * agree with it. */
static sio_code parse(const void *data, size_t len, uint64_t size,
                      sio_index_file *out, sio_error *err)
{
    const unsigned char *p = data, *end = p + len;
    sio_index_group *g = NULL;
    uint64_t n = 0, claim, most;
    sio_code rc = SIO_OK;

    memset(out, 0, sizeof *out);
    if (len > SIO_INDEX_FILE_MAX)
        return sio_seterr(err, SIO_ERR_FORMAT, "index file above %llu bytes",
                          (unsigned long long)SIO_INDEX_FILE_MAX);
    if (len < INDEX_HEADER_LEN + INDEX_TRAILER_LEN ||
        memcmp(p, INDEX_MAGIC, 8) != 0)
        return sio_seterr(err, SIO_ERR_FORMAT, "not an index file");
    if (get_u32(p + 8) != SIO_INDEX_VERSION)
        return sio_seterr(err, SIO_ERR_FORMAT, "index version %u unknown",
                          get_u32(p + 8));
    out->flags = get_u32(p + 12);
    if (out->flags & ~(uint32_t)SIO_INDEX_STREAM_ONLY)
        return sio_seterr(err, SIO_ERR_FORMAT, "unknown index flags %#x",
                          out->flags);
    out->size = get_u64(p + 16);
    out->mtime = get_u64(p + 24);
    if (*(end - INDEX_TRAILER_LEN) != 'E')
        return sio_seterr(err, SIO_ERR_FORMAT, "index without trailer");
    claim = get_u64(end - INDEX_TRAILER_LEN + 1);
    most = (len - INDEX_HEADER_LEN - INDEX_TRAILER_LEN) / INDEX_RECORD_MIN;
    if (claim > most || claim > SIO_INDEX_GROUPS_MAX)
        return sio_seterr(err, SIO_ERR_FORMAT,
                          "trailer counts %" PRIu64 " groups, a file of %zu "
                          "bytes holds at most %" PRIu64, claim, len,
                          most < SIO_INDEX_GROUPS_MAX
                              ? most
                              : (uint64_t)SIO_INDEX_GROUPS_MAX);
    if (size != UINT64_MAX) {
        most = size / ((out->flags & SIO_INDEX_STREAM_ONLY)
                           ? SIO_INDEX_PACKED_GROUP_MIN
                           : SIO_INDEX_GROUP_SPAN_MIN);
        if (claim > most)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "index claims %" PRIu64 " groups, a shard of "
                              "%" PRIu64 " bytes holds at most %" PRIu64,
                              claim, size, most);
    }
    if (claim && !(g = malloc((size_t)claim * sizeof *g)))
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    p += INDEX_HEADER_LEN;
    for (;;) {
        if (p >= end) {
            rc = sio_seterr(err, SIO_ERR_FORMAT, "index without trailer");
            goto out;
        }
        if (*p == 'E') {
            if ((size_t)(end - p) != INDEX_TRAILER_LEN) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "bytes around the index trailer");
                goto out;
            }
            if (get_u64(p + 1) != n) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "trailer counts %" PRIu64 " groups, file "
                                "holds %" PRIu64, get_u64(p + 1), n);
                goto out;
            }
            if (get_u64(p + 9) !=
                fnv64(FNV64_INIT, data, (size_t)(p + 9 - (const unsigned char *)data))) {
                rc = sio_seterr(err, SIO_ERR_FORMAT, "index checksum mismatch");
                goto out;
            }
            break;
        }
        if (*p != 'G' || end - p < 1 + 8 + 8 + 8 + 4 + 2 + 2) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "bad index record at byte %zu",
                            (size_t)(p - (const unsigned char *)data));
            goto out;
        }
        if (n >= claim) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "more groups than the trailer's %" PRIu64, claim);
            goto out;
        }
        sio_index_group r;
        r.offset = get_u64(p + 1);
        r.end = get_u64(p + 9);
        r.bytes = get_u64(p + 17);
        r.flags = get_u32(p + 25);
        uint16_t keylen = get_u16(p + 29), nf = get_u16(p + 31);
        p += 33;
        if (r.flags & ~(uint32_t)SIO_INDEX_GROUP_BAD || keylen == 0 ||
            keylen > SIO_INDEX_KEY_MAX || nf > SIO_INDEX_FIELDS_MAX ||
            r.end <= r.offset ||
            (n > 0 && r.offset < g[n - 1].end) ||
            (size_t)(end - p) < keylen) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "bad index group %" PRIu64, n);
            goto out;
        }
        r.keyhash = sio_index_keyhash((const char *)p, keylen);
        p += keylen;
        uint64_t sum = 0;
        for (uint16_t i = 0; i < nf; i++) {
            if (end - p < 1 || p[0] == 0 || (size_t)(end - p) < 1u + p[0] + 8u) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "bad field in index group %" PRIu64, n);
                goto out;
            }
            size_t nl = p[0];
            uint64_t fs = get_u64(p + 1 + nl);
            if (fs > UINT64_MAX - sum) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "field sizes overflow in group %" PRIu64, n);
                goto out;
            }
            sum += fs;
            p += 1 + nl + 8;
        }
        if (!(r.flags & SIO_INDEX_GROUP_BAD) && (nf == 0 || sum != r.bytes)) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "group %" PRIu64 " sizes do not add up", n);
            goto out;
        }
        if ((r.flags & SIO_INDEX_GROUP_BAD) && r.bytes != 0) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "bad group %" PRIu64 " with payload", n);
            goto out;
        }
        g[n++] = r;
    }
    out->ngroups = n;
    out->groups = g;
    g = NULL;
out:
    free(g);
    return rc;
}

sio_code sio_index_parse(const void *data, size_t len, sio_index_file *out,
                         sio_error *err)
{
    return parse(data, len, UINT64_MAX, out, err);
}

sio_code sio_index_check(const sio_index_file *f, uint64_t size,
                         sio_error *err)
{
    uint64_t most;
    if (size == 0 || size == UINT64_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "the shard's size is unknown");
    if (f->flags & SIO_INDEX_STREAM_ONLY) {
        /* Offsets are positions in the decompressed stream: only the
         * count can be held against the compressed size. */
        most = size / SIO_INDEX_PACKED_GROUP_MIN;
        if (f->ngroups > most)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "%" PRIu64 " groups in a compressed shard of "
                              "%" PRIu64 " bytes (at most %" PRIu64 ")",
                              f->ngroups, size, most);
        return SIO_OK;
    }
    most = size / SIO_INDEX_GROUP_SPAN_MIN;
    if (f->ngroups > most)
        return sio_seterr(err, SIO_ERR_LIMIT,
                          "%" PRIu64 " groups in a shard of %" PRIu64
                          " bytes (at most %" PRIu64 ")",
                          f->ngroups, size, most);
    /* With no gap between groups, every span inside the shard and each at
     * least a header block plus its payload, the payloads sum to at most
     * the shard's size. */
    for (uint64_t i = 0; i < f->ngroups; i++) {
        const sio_index_group *g = &f->groups[i];
        int last = i + 1 == f->ngroups;
        if (g->offset >= size)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "group %" PRIu64 " starts at %" PRIu64
                              ", past the shard's %" PRIu64 " bytes",
                              i, g->offset, size);
        if (last ? g->end != UINT64_MAX : g->end != f->groups[i + 1].offset)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              last ? "the last group (%" PRIu64 ") does not "
                                     "reach the tar's end"
                                   : "group %" PRIu64 " does not end where "
                                     "the next one starts",
                              i);
        uint64_t span = (last ? size : g->end) - g->offset;
        if (g->end != UINT64_MAX && g->end > size)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "group %" PRIu64 " ends past the shard's %"
                              PRIu64 " bytes", i, size);
        if (span < SIO_INDEX_GROUP_SPAN_MIN ||
            span - SIO_INDEX_GROUP_SPAN_MIN < g->bytes)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "group %" PRIu64 " holds %" PRIu64 " payload "
                              "bytes in %" PRIu64 " bytes of tar",
                              i, g->bytes, span);
    }
    return SIO_OK;
}

sio_code sio_index_parse_for(const void *data, size_t len, uint64_t shard_size,
                             sio_index_file *out, sio_error *err)
{
    sio_code rc;
    if (shard_size == 0 || shard_size == UINT64_MAX) {
        memset(out, 0, sizeof *out);
        return sio_seterr(err, SIO_ERR_LIMIT, "the shard's size is unknown");
    }
    rc = parse(data, len, shard_size, out, err);
    if (rc == SIO_OK && (rc = sio_index_check(out, shard_size, err)) != SIO_OK) {
        free(out->groups);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* The store --------------------------------------------------------------- */

/* The key an index file is named by: a local shard's absolute path with
 * links and "." / ".." resolved, however the source spells it (a
 * relative path, "file://", "file://localhost"), so that `shardcast index
 * shards` and a server given /data/shards find one file; remote URLs as
 * they are. */
static void index_key(const char *url, char *out, size_t cap)
{
    const char *path = NULL;
    char real[PATH_MAX];
    if (strncmp(url, "file://localhost/", 17) == 0)
        path = url + 16;
    else if (strncmp(url, "file://", 7) == 0)
        path = url + 7;
    else if (!strstr(url, "://"))
        path = url;
    if (path && realpath(path, real) && strlen(real) < cap) {
        memcpy(out, real, strlen(real) + 1);
        return;
    }
    snprintf(out, cap, "%s", url);
}

/* The persisted index file of hash in x's directory: 0, or -1 when the
 * path does not fit (or there is no directory). */
static int index_path(const sio_index *x, const char *hash, char *out,
                      size_t cap)
{
    return x->dir && snprintf(out, cap, "%s/%s%s", x->dir, hash,
                              SIO_INDEX_SUFFIX) < (int)cap
               ? 0
               : -1;
}

static void url_hash(const char *url, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char key[PATH_MAX + 8192];
    index_key(url, key, sizeof key);
    url = key;
    EVP_Digest(url, strlen(url), md, &mdlen, EVP_sha256(), NULL);
    for (unsigned i = 0; i < 32 && i < mdlen; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[64] = '\0';
}

static uint64_t str_hash(const char *s)
{
    return fnv64(FNV64_INIT, s, strlen(s));
}

/* Remove "*.scidx.tmp" files a crash left behind. */
static void remove_partials(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l > 10 && strcmp(de->d_name + l - 10, ".scidx.tmp") == 0) {
            char path[4096];
            if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) <
                (int)sizeof path)
                unlink(path);
        }
    }
    closedir(d);
}

static int mkdir_p(const char *dir)
{
    char buf[4096];
    size_t l = strlen(dir);
    if (l == 0 || l >= sizeof buf)
        return -1;
    memcpy(buf, dir, l + 1);
    for (size_t i = 1; i <= l; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            buf[i] = c;
        }
    }
    return 0;
}

sio_code sio_index_open(const sio_index_config *cfg, sio_index **out,
                        sio_error *err)
{
    sio_index *x = calloc(1, sizeof *x);
    *out = NULL;
    if (!x)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&x->mu, NULL);
    pthread_mutex_init(&x->sidemu, NULL);
    x->nb = INDEX_BUCKETS_MIN;
    x->b = calloc(x->nb, sizeof *x->b);
    if (!x->b) {
        sio_index_close(x);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    if (cfg) {
        x->sidecars = cfg->sidecars;
        x->probe_sidecars = cfg->probe_sidecars;
        x->log = cfg->log;
        if (cfg->dir && cfg->dir[0]) {
            x->dir = strdup(cfg->dir);
            if (!x->dir) {
                sio_index_close(x);
                return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            }
            if (mkdir_p(x->dir) != 0) {
                sio_code rc = sio_seterr(err, SIO_ERR_IO,
                                         "cannot create %s: %s", x->dir,
                                         strerror(errno));
                sio_index_close(x);
                return rc;
            }
            remove_partials(x->dir);
        }
    }
    *out = x;
    return SIO_OK;
}

/* An index file being written for e is given up: closed and removed. */
static void tmp_discard(sio_index_entry *e)
{
    char tmp[4200];
    if (!e->tmp)
        return;
    fclose(e->tmp);
    e->tmp = NULL;
    if (e->x->dir && snprintf(tmp, sizeof tmp, "%s/%s.scidx.tmp", e->x->dir,
                              e->hash) < (int)sizeof tmp)
        unlink(tmp);
}

/* Group arrays dropped while views read them, freed. */
static void retired_free(struct retired *r)
{
    while (r) {
        struct retired *next = r->next;
        free(r->g);
        free(r);
        r = next;
    }
}

static void entry_free(sio_index_entry *e)
{
    tmp_discard(e);
    pthread_mutex_destroy(&e->mu);
    free(e->g);
    retired_free(e->retired);
    free(e->url);
    free(e->path);
    free(e);
}

void sio_index_close(sio_index *x)
{
    if (!x)
        return;
    for (size_t i = 0; x->b && i < x->nb; i++) {
        sio_index_entry *e = x->b[i];
        while (e) {
            sio_index_entry *nx = e->next;
            entry_free(e);
            e = nx;
        }
    }
    free(x->b);
    free(x->dir);
    pthread_mutex_destroy(&x->mu);
    pthread_mutex_destroy(&x->sidemu);
    free(x);
}

/* stat of a local shard (file:// or a path): 0 when it is one and the
 * stat worked. */
static int local_stat(const char *url, struct stat *st)
{
    const char *path = url;
    if (strncmp(url, "file://", 7) == 0)
        path = url + 7;
    else if (strstr(url, "://"))
        return -1;
    return stat(path, st);
}

static uint64_t stat_mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000ull +
           (uint64_t)st->st_mtim.tv_nsec;
}

/* Log and count a loaded index that is not taken, or is dropped, for a
 * reason of its own (not a stale file: that is "invalid"). */
static void note_rejected(sio_index_entry *e, int src, const char *reason)
{
    char shown[512];
    sio_url_redact(e->url, shown, sizeof shown);
    atomic_fetch_add(&e->x->rejected[src], 1);
    SIO_LOG(&e->x->log, SIO_LOG_WARN,
            "event=index_rejected url=%s source=%s reason=\"%s\"", shown,
            src_name[src], reason);
}

/* Take a parsed, checked file as e's content when it fits the shard
 * (e->mu held). */
static int entry_adopt(sio_index_entry *e, sio_index_file *f, int src)
{
    sio_index *x = e->x;
    if ((e->size != UINT64_MAX && f->size != UINT64_MAX && f->size != e->size) ||
        (e->mtime && f->mtime && f->mtime != e->mtime)) {
        SIO_LOG(&x->log, SIO_LOG_INFO,
                "event=index_stale what=%s hash=%.16s", src_name[src], e->hash);
        free(f->groups);
        return 0;
    }
    e->g = f->groups;
    e->n = e->cap = f->ngroups;
    e->complete = 1;
    e->stream_only = (f->flags & SIO_INDEX_STREAM_ONLY) != 0;
    e->src = src;
    e->confirmed = 0;
    for (uint64_t i = 0; i < e->n; i++) {
        if (!(e->g[i].flags & SIO_INDEX_GROUP_BAD))
            e->good++;
        e->bytes += e->g[i].bytes;
    }
    return 1;
}

/* The shard's size now: the listing's, else the store's (a stat of a
 * local file, a HEAD of a remote object). UINT64_MAX when unknown. Asked
 * only when a file or sidecar was found, so a shard without one costs no
 * request. */
static uint64_t store_size(const char *url, sio_io *io)
{
    const sio_backend_ops *ops;
    void *ctx;
    uint64_t size;
    if (sio_io_backend(io, url, &ops, &ctx, NULL) != SIO_OK || !ops->stat ||
        ops->stat(ctx, url, &size, NULL) != SIO_OK || size == 0 ||
        size == UINT64_MAX)
        return UINT64_MAX;
    return size;
}

static uint64_t shard_size(sio_index_entry *e, sio_io *io)
{
    if (e->size != UINT64_MAX && e->size != 0)
        return e->size;
    return store_size(e->url, io);
}

uint64_t sio_index_object_size(sio_index_entry *e, sio_io *io)
{
    if (!e)
        return UINT64_MAX;
    pthread_mutex_lock(&e->mu);
    uint64_t n = e->size;
    pthread_mutex_unlock(&e->mu);
    if (n != UINT64_MAX && n != 0)
        return n;
    n = store_size(e->url, io); /* no lock held across the request */
    pthread_mutex_lock(&e->mu);
    if (n != UINT64_MAX && (e->size == UINT64_MAX || e->size == 0))
        e->size = n;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* What a check read saw of the group it wanted. */
typedef struct probe {
    uint64_t want;
    int got;
    sio_index_group g;
} probe;

static void probe_offer(void *ud, uint64_t g, const sio_index_group *grp,
                        const char *key, size_t keylen,
                        const sio_index_field *fields, size_t nfields,
                        int stream_only)
{
    probe *p = ud;
    (void)fields;
    (void)nfields;
    (void)stream_only;
    if (p->got || g != p->want)
        return;
    p->g = *grp;
    p->g.keyhash = sio_index_keyhash(key, keylen);
    if (p->g.flags & SIO_INDEX_GROUP_BAD)
        p->g.bytes = 0;
    p->got = 1;
}

static void probe_finish(void *ud, uint64_t ngroups)
{
    (void)ud;
    (void)ngroups;
}

/*
 * Read group i of the shard as the index says it lies (group 0 from the shard's
 * start, so that nothing before it goes unseen; another from its offset)
 * and compare what the reader reports: offset, end (the next group's
 * offset, or the tar's end), payload bytes, validity and key. For an
 * empty index, the shard must have no group. 0: agrees; 1: disagrees
 * (why says how); -1: the shard could not be read (the index is not
 * taken, and not counted against it).
 */
static int probe_group(sio_io *io, struct sio_cache_user *cache,
                       const sio_shard_limits *limits,
                       const char *url, const sio_index_group *groups,
                       uint64_t ngroups, uint64_t size, uint64_t i, char *why,
                       size_t len)
{
    probe p = {.want = i};
    sio_group_recorder rec = {probe_offer, probe_finish, &p};
    sio_shard_at at = {.end = UINT64_MAX, .rec = &rec, .cache = cache,
                       .size_hint = size};
    sio_shard *sh = NULL;
    const sio_sample *s = NULL;
    sio_code rc;
    int res = 0;
    if (i > 0) {
        /* the last group, to the shard's end, from the nearest good
         * group before it (else the first): a damaged header between
         * them decides whether the last one is bad (shard.c's
         * damage_owner), and a bad group may begin at a damaged header (a
         * sample lost with it) */
        uint64_t from = i - 1;
        while (from > 0 && (groups[from].flags & SIO_INDEX_GROUP_BAD))
            from--;
        at.offset = groups[from].offset;
        at.first_group = from;
        at.skip_until = i;
    } else if (ngroups != 1) {
        /* the first group and the next one's headers, not the shard (an
         * index of one group is checked to the shard's end); past a bad
         * second group (a sample lost to a damaged header), the third
         * one's, which decides the first */
        uint64_t end = ngroups > 1 ? groups[0].end : 0;
        if (ngroups > 1 && (groups[1].flags & SIO_INDEX_GROUP_BAD))
            end = groups[1].end;
        if (end < size && size - end > INDEX_PROBE_SLACK)
            at.end = end + INDEX_PROBE_SLACK;
    }
    rc = sio_shard_open_at(io, url, 0, limits, &at, &sh, NULL);
    if (rc == SIO_OK) {
        rc = sio_shard_next(sh, &s);
        if (rc == SIO_ERR_SAMPLE)
            rc = SIO_OK; /* a bad group: offered as bad */
        sio_sample_unref(s);
    }
    if (rc != SIO_OK) {
        /* No tar header where the index says a group starts. */
        res = i > 0 && rc == SIO_ERR_FORMAT ? 1 : -1;
        snprintf(why, len, "group %" PRIu64 " cannot be read from offset %"
                 PRIu64 ": %s", i, at.offset, sh ? sio_shard_errmsg(sh) : "");
    } else if (ngroups == 0) {
        if (p.got) {
            res = 1;
            snprintf(why, len, "the index is empty, the shard is not");
        }
    } else if (!p.got) {
        res = 1;
        snprintf(why, len, "no group %" PRIu64 " at offset %" PRIu64, i,
                 groups[i].offset);
    } else {
        const sio_index_group *w = &groups[i];
        if (p.g.offset != w->offset || p.g.end != w->end ||
            p.g.bytes != w->bytes || p.g.flags != w->flags ||
            p.g.keyhash != w->keyhash) {
            res = 1;
            snprintf(why, len, "group %" PRIu64 " differs from the shard "
                     "(offset %" PRIu64 "/%" PRIu64 ", end %" PRIu64 "/%"
                     PRIu64 ", bytes %" PRIu64 "/%" PRIu64 ", %s key)",
                     i, w->offset, p.g.offset, w->end, p.g.end, w->bytes,
                     p.g.bytes, p.g.keyhash == w->keyhash ? "same" : "another");
        }
    }
    sio_shard_close(sh);
    return res;
}

/* Is a file's content plausible for e's shard (e->mu held)? The size
 * from the store (a stat or HEAD when no listing gave one), then the
 * count, before anything is allocated, then the rules of
 * sio_index_check. 0: *f holds it; 1: rejected (why); 2: corrupt (why);
 * -1: cannot tell (why). */
static int entry_plausible(sio_index_entry *e, sio_io *io, const char *data,
                           size_t len, sio_index_file *f, char *why,
                           size_t wlen)
{
    sio_error er;
    uint64_t size = shard_size(e, io);
    sio_code rc;
    er.msg[0] = '\0';
    if (size == UINT64_MAX) {
        snprintf(why, wlen, "the shard's size is unknown");
        return -1;
    }
    e->size = size;
    rc = sio_index_parse_for(data, len, size, f, &er);
    if (rc != SIO_OK) {
        snprintf(why, wlen, "%s", er.msg);
        return rc == SIO_ERR_LIMIT ? 1 : rc == SIO_ERR_NOMEM ? -1 : 2;
    }
    return 0;
}

/* Do e's adopted first and last groups agree with a read of the shard
 * (e->mu held)? 0: yes; 1: no (why); -1: the shard could not be read. */
static int entry_probe(sio_index_entry *e, sio_io *io,
                       struct sio_cache_user *cache,
                       const sio_shard_limits *limits, char *why, size_t wlen)
{
    int res = probe_group(io, cache, limits, e->url, e->g, e->n, e->size, 0,
                          why, wlen);
    if (res == 0 && e->n > 1)
        res = probe_group(io, cache, limits, e->url, e->g, e->n, e->size,
                          e->n - 1, why, wlen);
    return res;
}

/* The buffer of a bounded read grown to hold n + more bytes: doubling
 * from 64 KiB, never past max + 1 (a byte past max says "too long"). */
static size_t read_grow(size_t cap, size_t max)
{
    size_t nc = cap ? (cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2) : 65536;
    return nc > max ? max + 1 : nc;
}

/* Read a whole local file of at most max bytes (a longer one: NULL with
 * *over set). */
static void *read_file(const char *path, size_t max, size_t *len, int *over)
{
    FILE *fp = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    *over = 0;
    if (!fp)
        return NULL;
    for (;;) {
        if (n == cap) {
            size_t nc = read_grow(cap, max);
            unsigned char *nb;
            if (cap > max) {
                *over = 1;
                free(buf);
                fclose(fp);
                return NULL;
            }
            nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n, fp);
        n += r;
        if (r == 0)
            break;
    }
    fclose(fp);
    if (n > max) {
        *over = 1;
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Read an object through its backend (a sidecar) of at most max bytes
 * (a longer one: NULL with *over set). */
static void *read_object(sio_io *io, const char *url, size_t max, size_t *len,
                         int *over)
{
    const sio_backend_ops *ops;
    void *ctx;
    sio_stream *s = NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    *over = 0;
    if (sio_io_backend(io, url, &ops, &ctx, NULL) != SIO_OK)
        return NULL;
    if (ops->open(ctx, url, 0, &s, NULL) != SIO_OK)
        return NULL;
    for (;;) {
        size_t got = 0;
        if (n == cap) {
            size_t nc = read_grow(cap, max);
            unsigned char *nb;
            if (cap > max) {
                *over = 1;
                goto fail;
            }
            nb = realloc(buf, nc);
            if (!nb)
                goto fail;
            buf = nb;
            cap = nc;
        }
        if (s->ops->read(s, buf + n, cap - n, &got) != SIO_OK)
            goto fail;
        if (got == 0)
            break;
        n += got;
    }
    s->ops->close(s);
    if (n > max) {
        *over = 1;
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
fail:
    s->ops->close(s);
    free(buf);
    return NULL;
}

/* The remembered state of url's directory, for a remote url (NULL for a
 * local file: asking costs a stat). sidemu held. */
static struct side_dir *side_dir(sio_index *x, sio_io *io, const char *url,
                                 int create)
{
    const sio_backend_ops *ops;
    void *ctx;
    const char *slash = strrchr(url, '/');
    uint64_t h = 1469598103934665603ull;
    if (!slash || sio_io_backend(io, url, &ops, &ctx, NULL) != SIO_OK ||
        ops == &sio_backend_file)
        return NULL;
    for (const char *p = url; p < slash; p++) {
        h ^= (unsigned char)*p;
        h *= 1099511628211ull;
    }
    h |= 1; /* never 0 */
    for (size_t i = 0; i < SIDECAR_DIRS; i++)
        if (x->side[i].h == h)
            return &x->side[i];
    if (!create)
        return NULL;
    struct side_dir *d = &x->side[x->side_next++ % SIDECAR_DIRS];
    d->h = h;
    d->misses = d->hits = 0;
    return d;
}

/* Ask for url's sidecar? Not in a remote directory where SIDECAR_GIVE_UP
 * asks found none. */
static int side_ask(sio_index *x, sio_io *io, const char *url)
{
    /* A listing said whether the sidecar is there: no request needed to
     * find out. Without one (a brace pattern), a remote store is asked
     * only when told to probe; a local file costs a stat, not a request. */
    int known = sio_io_sidecar_known(io, url);
    if (known >= 0)
        return known;
    if (!x->probe_sidecars && !sio_io_url_is_file(io, url))
        return 0;
    pthread_mutex_lock(&x->sidemu);
    struct side_dir *d = side_dir(x, io, url, 0);
    int ask = !d || d->hits > 0 || d->misses < SIDECAR_GIVE_UP;
    pthread_mutex_unlock(&x->sidemu);
    return ask;
}

static void side_result(sio_index *x, sio_io *io, const char *url, int hit)
{
    pthread_mutex_lock(&x->sidemu);
    struct side_dir *d = side_dir(x, io, url, 1);
    if (d) {
        if (hit)
            d->hits++;
        else if (++d->misses == SIDECAR_GIVE_UP && d->hits == 0)
            SIO_LOG(&x->log, SIO_LOG_INFO,
                    "event=index_sidecars_absent misses=%u: the store is not "
                    "asked for more sidecars in this directory",
                    d->misses);
    }
    pthread_mutex_unlock(&x->sidemu);
}

/* The most bytes an index file of a shard of `size` bytes may take
 * (max when the size is unknown): every group spans at least a 512-byte
 * tar header, which also holds its key and field names, so an index takes
 * less than the shard; a compressed shard (up to size/4 groups) packs its
 * names tighter: 16 bytes of index a shard byte, plus 64 KiB. Memory for
 * reading an index thus follows the shard's size, not what the file
 * claims. */
static size_t index_file_bound(uint64_t size, size_t max)
{
    if (size == UINT64_MAX || size == 0 || max <= 65536 ||
        size > (max - 65536) / 16)
        return max;
    return (size_t)(65536 + 16 * size);
}

/* Try the persisted file, then a sidecar (e->mu held, x->mu not held).
 * Either is taken only when entry_vet finds it fit; a rejected persisted
 * file is removed (the read that indexes the shard writes a new one). */
static void entry_load(sio_index_entry *e, sio_io *io, int lazy)
{
    sio_index *x = e->x;
    sio_index_file f;
    void *data = NULL;
    size_t len = 0;
    int src = SRC_READ;
    char path[4200], why[400];

    int have_path = index_path(x, e->hash, path, sizeof path) == 0;
    /* A persisted file of a remote shard of unknown size (no listing: a
     * brace pattern) would need a HEAD before it could be held against
     * the shard: that waits for someone who relies on the index
     * (sio_index_vet); a reader from the start indexes the shard
     * meanwhile. (A sidecar is asked for only when a listing showed it, or
     * when told to probe: a request per shard was accepted then.) */
    if (lazy && have_path && (e->size == UINT64_MAX || e->size == 0) &&
        !(io && sio_io_url_is_file(io, e->url)) && access(path, F_OK) == 0) {
        e->deferred = 1;
        return;
    }
    /* The shard's size bounds what is read: the listing's, or a local
     * file's (a stat); a remote shard is asked (a HEAD) only when a file
     * was found (the deferred load, !lazy), not for every shard. */
    uint64_t known = e->size != UINT64_MAX && e->size != 0 ? e->size
                     : io && (!lazy || sio_io_url_is_file(io, e->url))
                         ? shard_size(e, io)
                         : UINT64_MAX;
    if (known != UINT64_MAX)
        e->size = known; /* asked once (entry_plausible takes it) */
    int over = 0;
    if (have_path) {
        size_t max = index_file_bound(known, SIO_INDEX_FILE_MAX);
        data = read_file(path, max, &len, &over);
        if (data) {
            src = SRC_STATE;
        } else if (over) {
            snprintf(why, sizeof why, "file above %zu bytes, the most an "
                     "index of the shard's %" PRIu64 " bytes takes", max,
                     known);
            note_rejected(e, SRC_STATE, why);
            unlink(path);
        }
    }
    if (!data && io && x->sidecars && side_ask(x, io, e->url)) {
        size_t ul = strlen(e->url);
        char *side = malloc(ul + sizeof SIO_INDEX_SUFFIX);
        if (side) {
            memcpy(side, e->url, ul);
            memcpy(side + ul, SIO_INDEX_SUFFIX, sizeof SIO_INDEX_SUFFIX);
            size_t max = index_file_bound(known, INDEX_SIDECAR_MAX);
            data = read_object(io, side, max, &len, &over);
            free(side);
            if (data) {
                src = SRC_SIDECAR;
            } else if (over) {
                snprintf(why, sizeof why, "sidecar above %zu bytes, the "
                         "most an index of the shard's %" PRIu64 " bytes "
                         "takes", max, known);
                note_rejected(e, SRC_SIDECAR, why);
            }
            side_result(x, io, e->url, data != NULL);
        }
    }
    if (!data)
        return;
    /* Without the store there is no size to hold the file against and no
     * way to read the shard: nothing is taken. */
    int res = io ? entry_plausible(e, io, data, len, &f, why, sizeof why)
                 : -1;
    if (!io)
        snprintf(why, sizeof why, "no store to check it against");
    free(data);
    if (res == 2) {
        SIO_LOG(&x->log, SIO_LOG_WARN,
                "event=index_invalid what=%s hash=%.16s reason=\"%s\"",
                src_name[src], e->hash, why);
        atomic_fetch_add(&x->invalid, 1);
        return;
    }
    if (res == 1)
        note_rejected(e, src, why);
    if (res < 0)
        SIO_LOG(&x->log, SIO_LOG_INFO,
                "event=index_unchecked what=%s hash=%.16s reason=\"%s\": the "
                "shard is indexed by reading it", src_name[src], e->hash, why);
    if (res != 0) {
        if (res == 1 && src == SRC_STATE)
            unlink(path);
        return;
    }
    int ok = entry_adopt(e, &f, src);
    if (ok) {
        /* a compressed shard's offsets are not byte offsets: its count
         * was all there was to check */
        e->unprobed = !e->stream_only;
        atomic_fetch_add(&x->loaded, 1);
        atomic_fetch_add(&x->complete, 1);
        atomic_fetch_add(&x->groups, e->n);
    } else {
        atomic_fetch_add(&x->invalid, 1);
    }
    if (ok && src == SRC_STATE)
        e->path = strdup(path);
}

/* Empty e (e->mu held): its groups and persisted file go, counted as
 * dropped; the next reader from the start indexes the shard anew. */
static void entry_clear(sio_index_entry *e)
{
    sio_index *x = e->x;
    if (e->path) {
        unlink(e->path);
        free(e->path);
        e->path = NULL;
    }
    if (e->complete) {
        atomic_fetch_sub(&x->complete, 1);
        atomic_fetch_sub(&x->groups, e->n);
    }
    atomic_fetch_add(&x->dropped, 1);
    if (e->views && e->g) {
        /* Views still read it: freed when the last one closes (without
         * memory for the note it is leaked, never freed under a reader). */
        struct retired *r = malloc(sizeof *r);
        if (r) {
            r->g = e->g;
            r->next = e->retired;
            e->retired = r;
        }
    } else {
        free(e->g);
    }
    e->g = NULL;
    e->n = e->cap = e->good = e->bytes = 0;
    e->complete = e->stream_only = 0;
    e->version = e->vsize = 0;
    e->src = SRC_READ;
    e->confirmed = 0;
    e->unprobed = 0;
    atomic_fetch_add(&e->gen, 1);
}

/* Drop e's loaded groups (e->mu held): e is empty again. */
static void entry_drop(sio_index_entry *e, const char *reason)
{
    note_rejected(e, e->src, reason);
    entry_clear(e);
}

/* Every group of e dropped whatever its source (e->mu held): the shard
 * changed since it was indexed (why: what changed), and the next read
 * from the start indexes it anew; e takes size. */
static void entry_restart(sio_index_entry *e, uint64_t size, const char *why)
{
    SIO_LOG(&e->x->log, SIO_LOG_INFO,
            "event=index_stale what=changed hash=%.16s groups=%" PRIu64
            " size=%" PRIu64 "/%" PRIu64 " reason=\"the %s changed since it "
            "was indexed: indexed again by the next read\"",
            e->hash, e->n, e->size, size, why);
    tmp_discard(e);
    entry_clear(e);
    e->deferred = 0;
    atomic_store(&e->settled, 1);
    e->size = size;
}

int sio_index_refresh(sio_index_entry *e)
{
    struct stat st;
    if (!e || local_stat(e->url, &st) != 0)
        return 0;
    uint64_t size = (uint64_t)st.st_size, ns = stat_mtime_ns(&st);
    pthread_mutex_lock(&e->mu);
    int changed =
        (e->mtime_ns && ns != e->mtime_ns) ||
        (e->mtime && (uint64_t)st.st_mtime != e->mtime) ||
        (e->size != 0 && e->size != UINT64_MAX && size != e->size);
    if (!changed) {
        if (!e->mtime_ns) { /* the file was not there when the entry was
                               made */
            e->mtime = (uint64_t)st.st_mtime;
            e->mtime_ns = ns;
        }
        pthread_mutex_unlock(&e->mu);
        return 0;
    }
    entry_restart(e, size, "shard file");
    e->mtime = (uint64_t)st.st_mtime;
    e->mtime_ns = ns;
    pthread_mutex_unlock(&e->mu);
    return 1;
}

int sio_index_object_changed(sio_index_entry *e, uint64_t size)
{
    if (!e)
        return 0;
    pthread_mutex_lock(&e->mu);
    int had = e->n > 0 || e->complete;
    if (had)
        entry_restart(e, size, "object");
    e->size = size;
    e->version = 0;
    e->vsize = 0;
    pthread_mutex_unlock(&e->mu);
    return had;
}

void sio_index_set_version(sio_index_entry *e, uint64_t version,
                           uint64_t size)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    if (e->complete) {
        e->version = version;
        e->vsize = size;
    }
    pthread_mutex_unlock(&e->mu);
}

uint64_t sio_index_version(sio_index_entry *e)
{
    return sio_index_version_size(e, NULL);
}

uint64_t sio_index_version_size(sio_index_entry *e, uint64_t *size)
{
    if (size)
        *size = 0;
    if (!e)
        return 0;
    pthread_mutex_lock(&e->mu);
    uint64_t v = e->complete ? e->version : 0;
    if (e->complete && size)
        *size = e->vsize;
    pthread_mutex_unlock(&e->mu);
    return v;
}

int sio_index_reject(sio_index_entry *e, const char *reason)
{
    int dropped = 0;
    if (!e)
        return 0;
    pthread_mutex_lock(&e->mu);
    if (e->src != SRC_READ && e->complete) {
        entry_drop(e, reason);
        dropped = 1;
    }
    pthread_mutex_unlock(&e->mu);
    return dropped;
}

void sio_index_vet(sio_index_entry *e, sio_io *io,
                   struct sio_cache_user *cache,
                   const sio_shard_limits *limits)
{
    char why[400];
    if (!e || atomic_load(&e->settled))
        return;
    pthread_mutex_lock(&e->mu);
    if (e->deferred) {
        e->deferred = 0;
        if (io && !e->complete && e->n == 0)
            entry_load(e, io, 0);
    }
    if (e->unprobed && e->complete && e->src != SRC_READ) {
        int res =
            io ? entry_probe(e, io, cache, limits, why, sizeof why) : -1;
        if (res == 1)
            entry_drop(e, why);
        else if (res < 0)
            SIO_LOG(&e->x->log, SIO_LOG_INFO,
                    "event=index_unchecked what=%s hash=%.16s reason=\"%s\": "
                    "kept, checked by the reads to come", src_name[e->src],
                    e->hash, io ? why : "no store to check it against");
    }
    e->unprobed = 0;
    atomic_store(&e->settled, 1);
    pthread_mutex_unlock(&e->mu);
}

static void rehash(sio_index *x)
{
    size_t nb = x->nb * 2;
    sio_index_entry **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < x->nb; i++) {
        sio_index_entry *e = x->b[i];
        while (e) {
            sio_index_entry *nx = e->next;
            size_t h = (size_t)(str_hash(e->url) % nb);
            e->next = b[h];
            b[h] = e;
            e = nx;
        }
    }
    free(x->b);
    x->b = b;
    x->nb = nb;
}

/* The entry of url in the table, or NULL; *bucket gets its bucket
 * (x->mu held). */
/* The entry's recorder (sio_index_recorder), below. */
static void rec_offer(void *ud, uint64_t g, const sio_index_group *grp,
                      const char *key, size_t keylen,
                      const sio_index_field *fields, size_t nfields,
                      int stream_only);
static void rec_finish(void *ud, uint64_t ngroups);

static sio_index_entry *find_locked(sio_index *x, const char *url,
                                    size_t *bucket)
{
    sio_index_entry *e;
    size_t h = (size_t)(str_hash(url) % x->nb);
    for (e = x->b[h]; e; e = e->next)
        if (strcmp(e->url, url) == 0)
            break;
    *bucket = h;
    return e;
}

sio_index_entry *sio_index_get(sio_index *x, sio_io *io, const char *url,
                               uint64_t size)
{
    sio_index_entry *e;
    size_t h;
    pthread_mutex_lock(&x->mu);
    e = find_locked(x, url, &h);
    if (e) {
        pthread_mutex_unlock(&x->mu);
        return e;
    }
    e = calloc(1, sizeof *e);
    if (!e || !(e->url = strdup(url))) {
        free(e);
        pthread_mutex_unlock(&x->mu);
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    e->rec = (sio_group_recorder){rec_offer, rec_finish, e};
    e->x = x;
    e->size = size;
    {
        struct stat st;
        if (local_stat(url, &st) == 0) {
            e->mtime = (uint64_t)st.st_mtime;
            e->mtime_ns = stat_mtime_ns(&st);
        }
    }
    url_hash(url, e->hash);
    /* Loading happens under the entry's lock, published first so that a
     * second caller waits for it instead of loading twice. */
    pthread_mutex_lock(&e->mu);
    e->next = x->b[h];
    x->b[h] = e;
    x->n++;
    atomic_fetch_add(&x->entries, 1);
    if (x->n > x->nb * 2)
        rehash(x);
    pthread_mutex_unlock(&x->mu);
    entry_load(e, io, 1);
    atomic_store(&e->settled, !e->deferred && !e->unprobed);
    pthread_mutex_unlock(&e->mu);
    return e;
}

sio_index_entry *sio_index_peek(sio_index *x, const char *url)
{
    sio_index_entry *e;
    size_t h;
    pthread_mutex_lock(&x->mu);
    e = find_locked(x, url, &h);
    pthread_mutex_unlock(&x->mu);
    return e;
}

int sio_index_known(sio_index *x, const char *url)
{
    sio_index_entry *e = sio_index_peek(x, url);
    sio_index_info info;
    char hash[65], path[4200];
    if (e) {
        sio_index_get_info(e, &info);
        if (info.complete)
            return 1;
    }
    url_hash(url, hash);
    return index_path(x, hash, path, sizeof path) == 0 &&
           access(path, F_OK) == 0;
}

int sio_index_view_open(sio_index_entry *e, sio_index_view *v)
{
    int ok;
    memset(v, 0, sizeof *v);
    if (!e)
        return 0;
    pthread_mutex_lock(&e->mu);
    ok = e->complete;
    if (ok) {
        e->views++;
        v->g = e->g;
        v->n = e->n;
        v->gen = atomic_load(&e->gen);
        v->open = 1;
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

int sio_index_view_current(sio_index_entry *e, const sio_index_view *v)
{
    return e && atomic_load(&e->gen) == v->gen;
}

void sio_index_view_close(sio_index_entry *e, sio_index_view *v)
{
    struct retired *free_list = NULL;
    if (!e || !v->open)
        return;
    pthread_mutex_lock(&e->mu);
    if (--e->views == 0) {
        free_list = e->retired;
        e->retired = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    retired_free(free_list);
    memset(v, 0, sizeof *v);
}

int sio_index_group_get(sio_index_entry *e, uint64_t g, sio_index_group *out)
{
    int known;
    pthread_mutex_lock(&e->mu);
    known = g < e->n;
    if (known)
        *out = e->g[g];
    pthread_mutex_unlock(&e->mu);
    return known;
}

void sio_index_tally(sio_index_entry *e, uint64_t upto, uint64_t *good,
                     uint64_t *bad)
{
    uint64_t nbad = 0;
    pthread_mutex_lock(&e->mu);
    uint64_t n = upto < e->n ? upto : e->n;
    if (n == e->n) /* every group: counted as they came */
        nbad = e->n - e->good;
    else
        for (uint64_t g = 0; g < n; g++)
            nbad += (e->g[g].flags & SIO_INDEX_GROUP_BAD) != 0;
    pthread_mutex_unlock(&e->mu);
    *good = n - nbad;
    *bad = nbad;
}

void sio_index_get_info(sio_index_entry *e, sio_index_info *info)
{
    pthread_mutex_lock(&e->mu);
    info->known = e->n;
    info->complete = e->complete;
    info->stream_only = e->stream_only;
    info->good = e->good;
    info->bytes = e->bytes;
    info->size = e->size;
    info->mtime = e->mtime;
    info->hint = e->src != SRC_READ;
    info->gen = atomic_load(&e->gen);
    pthread_mutex_unlock(&e->mu);
}

const char *sio_index_entry_path(sio_index_entry *e)
{
    const char *p;
    pthread_mutex_lock(&e->mu);
    p = e->complete ? e->path : NULL;
    pthread_mutex_unlock(&e->mu);
    return p;
}

/* Append bytes to the file being built (e->mu held). */
static void tmp_write(sio_index_entry *e, const void *p, size_t n)
{
    if (!e->tmp || e->write_failed)
        return;
    if (fwrite(p, 1, n, e->tmp) != n)
        e->write_failed = 1;
    e->sum = fnv64(e->sum, p, n);
}

static void tmp_start(sio_index_entry *e)
{
    sio_index *x = e->x;
    char path[4200];
    unsigned char h[INDEX_HEADER_LEN];
    if (!x->dir ||
        snprintf(path, sizeof path, "%s/%s.scidx.tmp", x->dir, e->hash) >=
            (int)sizeof path)
        return;
    e->tmp = fopen(path, "wb");
    if (!e->tmp) {
        SIO_LOG(&x->log, SIO_LOG_WARN,
                "event=index_write_failed hash=%.16s reason=\"%s\"", e->hash,
                strerror(errno));
        atomic_fetch_add(&x->write_errors, 1);
        return;
    }
    e->sum = FNV64_INIT;
    e->write_failed = 0;
    memcpy(h, INDEX_MAGIC, 8);
    put_u32(h + 8, SIO_INDEX_VERSION);
    put_u32(h + 12, e->stream_only ? SIO_INDEX_STREAM_ONLY : 0);
    put_u64(h + 16, e->size);
    put_u64(h + 24, e->mtime);
    tmp_write(e, h, sizeof h);
}

static void rec_offer(void *ud, uint64_t g, const sio_index_group *grp,
                      const char *key, size_t keylen,
                      const sio_index_field *fields, size_t nfields,
                      int stream_only)
{
    sio_index_offer(ud, g, grp, key, keylen, fields, nfields, stream_only);
}

static void rec_finish(void *ud, uint64_t ngroups)
{
    sio_index_finish(ud, ngroups);
}

const sio_group_recorder *sio_index_recorder(sio_index_entry *e)
{
    return e ? &e->rec : NULL;
}

/* A reader offers group g of a shard whose index was loaded (e->mu
 * held): agreeing groups read from the start are confirmed one by one;
 * the first that disagrees drops the loaded groups (then, when g is 0,
 * the offer starts the index anew). */
static void hint_offer(sio_index_entry *e, uint64_t g,
                       const sio_index_group *grp, const char *key,
                       size_t keylen, int stream_only)
{
    char why[300];
    uint64_t bytes = (grp->flags & SIO_INDEX_GROUP_BAD) ? 0 : grp->bytes;
    if (g >= e->n) {
        snprintf(why, sizeof why, "a read found group %" PRIu64 " past the "
                 "index's %" PRIu64, g, e->n);
    } else {
        const sio_index_group *w = &e->g[g];
        /* A compressed shard's offsets count decompressed bytes: the
         * readers agree on them, so they are compared as well. */
        if (w->offset == grp->offset && w->end == grp->end &&
            w->bytes == bytes && w->flags == grp->flags &&
            w->keyhash == sio_index_keyhash(key, keylen) &&
            !stream_only == !e->stream_only) {
            if (g == e->confirmed)
                e->confirmed++;
            return;
        }
        snprintf(why, sizeof why, "a read of group %" PRIu64 " disagrees "
                 "(offset %" PRIu64 "/%" PRIu64 ", bytes %" PRIu64 "/%" PRIu64
                 ", %s key)", g, w->offset, grp->offset, w->bytes, bytes,
                 w->keyhash == sio_index_keyhash(key, keylen) ? "same"
                                                              : "another");
    }
    entry_drop(e, why);
}

void sio_index_offer(sio_index_entry *e, uint64_t g, const sio_index_group *grp,
                     const char *key, size_t keylen,
                     const sio_index_field *fields, size_t nfields,
                     int stream_only)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    if (e->complete && e->src != SRC_READ)
        hint_offer(e, g, grp, key, keylen, stream_only);
    if (e->complete || g != e->n || g >= SIO_INDEX_GROUPS_MAX ||
        keylen == 0 || keylen > SIO_INDEX_KEY_MAX ||
        nfields > SIO_INDEX_FIELDS_MAX) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    if (e->n == e->cap) {
        uint64_t nc = e->cap ? e->cap * 2 : 256;
        sio_index_group *ng = realloc(e->g, (size_t)nc * sizeof *ng);
        if (!ng) {
            pthread_mutex_unlock(&e->mu);
            return;
        }
        e->g = ng;
        e->cap = nc;
    }
    if (g == 0) {
        e->stream_only = stream_only;
        tmp_start(e);
    }
    sio_index_group r = *grp;
    r.keyhash = sio_index_keyhash(key, keylen);
    if (r.flags & SIO_INDEX_GROUP_BAD)
        r.bytes = 0;
    e->g[e->n++] = r;
    if (!(r.flags & SIO_INDEX_GROUP_BAD))
        e->good++;
    e->bytes += r.bytes;
    if (e->tmp) {
        unsigned char b[33];
        b[0] = 'G';
        put_u64(b + 1, r.offset);
        put_u64(b + 9, r.end);
        put_u64(b + 17, r.bytes);
        put_u32(b + 25, r.flags);
        put_u16(b + 29, (uint16_t)keylen);
        put_u16(b + 31, (uint16_t)((r.flags & SIO_INDEX_GROUP_BAD) ? 0 : nfields));
        tmp_write(e, b, sizeof b);
        tmp_write(e, key, keylen);
        for (size_t i = 0; !(r.flags & SIO_INDEX_GROUP_BAD) && i < nfields; i++) {
            size_t nl = strlen(fields[i].name);
            unsigned char l = (unsigned char)(nl > 255 ? 255 : nl);
            unsigned char sz[8];
            put_u64(sz, fields[i].size);
            tmp_write(e, &l, 1);
            tmp_write(e, fields[i].name, l);
            tmp_write(e, sz, 8);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

void sio_index_finish(sio_index_entry *e, uint64_t ngroups)
{
    sio_index *x;
    if (!e)
        return;
    x = e->x;
    pthread_mutex_lock(&e->mu);
    if (e->complete && e->src != SRC_READ) {
        /* A read reached the shard's end: a loaded index that counts
         * other groups is dropped; one whose every group a read from the
         * start agreed with is the shard's index from now on. */
        if (ngroups != e->n) {
            char why[160];
            snprintf(why, sizeof why, "the shard ends after %" PRIu64
                     " groups, the index counts %" PRIu64, ngroups, e->n);
            entry_drop(e, why);
        } else if (e->confirmed == e->n) {
            e->src = SRC_READ;
            e->unprobed = 0;
        }
    }
    if (e->complete || ngroups != e->n) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    e->complete = 1;
    if (e->n == 0 && !e->tmp)
        tmp_start(e); /* an empty shard has an index too */
    if (e->tmp) {
        unsigned char t[INDEX_TRAILER_LEN];
        char tmp[4200], fin[4200];
        t[0] = 'E';
        put_u64(t + 1, e->n);
        tmp_write(e, t, 9);
        put_u64(t + 9, e->sum);
        if (!e->write_failed && fwrite(t + 9, 1, 8, e->tmp) != 8)
            e->write_failed = 1;
        if (fflush(e->tmp) != 0 || fsync(fileno(e->tmp)) != 0)
            e->write_failed = 1;
        fclose(e->tmp);
        e->tmp = NULL;
        snprintf(tmp, sizeof tmp, "%s/%s.scidx.tmp", x->dir, e->hash);
        int rerr = 0;
        if (e->write_failed || index_path(x, e->hash, fin, sizeof fin) ||
            (rename(tmp, fin) != 0 && (rerr = errno))) {
            unlink(tmp);
            SIO_LOG(&x->log, SIO_LOG_WARN,
                    "event=index_write_failed hash=%.16s reason=\"%s\"",
                    e->hash,
                    rerr ? strerror(rerr)
                         : "writing the index file failed (disk full or "
                           "not writable)");
            atomic_fetch_add(&x->write_errors, 1);
        } else {
            free(e->path);
            e->path = strdup(fin);
        }
    }
    uint64_t n = e->n;
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_add(&x->built, 1);
    atomic_fetch_add(&x->complete, 1);
    atomic_fetch_add(&x->groups, n);
}

/* One read of the shard from its start, offering every group to e. */
static sio_code build_pass(sio_io *io, const char *url, uint32_t index,
                           const sio_shard_limits *limits, sio_index_entry *e,
                           struct sio_cache_user *cache, int fd_in,
                           int decompressed, const sio_stage_hooks *hooks,
                           const sio_logger *log, uint64_t *reached,
                           sio_error *err)
{
    sio_shard *sh = NULL;
    sio_shard_at at = {.end = UINT64_MAX, .rec = sio_index_recorder(e),
                       .cache = cache};
    /* The size the listing gave (the entry's): a read through the shard
     * cache admits the object by it, as the feed's does, rather than
     * asking the store for it first (a HEAD per shard). */
    pthread_mutex_lock(&e->mu);
    if (e->size && e->size != UINT64_MAX)
        at.size_hint = e->size;
    pthread_mutex_unlock(&e->mu);
    /* A local file (or the bytes staged in fd_in) is skimmed through a
     * descriptor: headers read, the members' data skipped, not read (the
     * shard's own index pass, at a fraction of its bytes). */
    int fd = -1;
    sio_error fe;
    if (fd_in >= 0) {
        at.cache = NULL;
        at.use_fd = 1;
        at.fd = fd_in;
        at.read_cap = 16u << 10;
        at.decompressed = decompressed;
        at.grow = hooks;
    } else if (!cache && sio_io_url_is_file(io, url) &&
               sio_io_open_fd_probe(io, NULL, url, &fd, &fe) == SIO_OK) {
        at.use_fd = 1;
        at.fd = fd;
        at.read_cap = 16u << 10;
    }
    sio_code rc = sio_shard_open_at(io, url, index, limits, &at, &sh, err);
    while (rc == SIO_OK) {
        int end = 0;
        rc = sio_shard_skim(sh, &end);
        if (rc == SIO_ERR_SAMPLE) { /* bad groups are indexed as bad */
            if (log)
                SIO_LOG(log, SIO_LOG_WARN, "event=sample_bad reason=\"%s\"",
                        sio_shard_errmsg(sh));
            rc = SIO_OK;
            continue;
        }
        if (rc) {
            sio_seterr(err, rc, "%s", sio_shard_errmsg(sh));
            break;
        }
        if (end)
            break;
        if (hooks && hooks->progress)
            hooks->progress(hooks->ud, sio_shard_groups(sh));
    }
    *reached = sh ? sio_shard_groups(sh) : 0;
    sio_shard_close(sh);
    if (fd >= 0)
        close(fd);
    return rc;
}

static sio_code build_twice(sio_io *io, const char *url, uint32_t index,
                            const sio_shard_limits *limits,
                            sio_index_entry *e, struct sio_cache_user *cache,
                            int fd, int decompressed,
                            const sio_stage_hooks *hooks,
                            const sio_logger *log, uint64_t *reached,
                            sio_error *err)
{
    sio_index_info before, after;
    uint64_t got = 0;
    sio_index_get_info(e, &before);
    sio_code rc = build_pass(io, url, index, limits, e, cache, fd,
                             decompressed, hooks, log, &got, err);
    sio_index_get_info(e, &after);
    /* A loaded index this read disagreed with was dropped midway, after
     * the groups before were offered (and taken as agreeing): a second
     * read from the start records them all. */
    if (rc == SIO_OK && !after.complete && after.gen != before.gen)
        rc = build_pass(io, url, index, limits, e, cache, fd, decompressed,
                        hooks, log, &got, err);
    if (reached)
        *reached = got;
    return rc;
}

sio_code sio_index_build_to(sio_io *io, const char *url, uint32_t index,
                            const sio_shard_limits *limits,
                            sio_index_entry *e, struct sio_cache_user *cache,
                            const sio_logger *log, uint64_t *reached,
                            sio_error *err)
{
    return build_twice(io, url, index, limits, e, cache, -1, 0, NULL, log,
                       reached, err);
}

/* A writer that ended after cut_at bytes, its fetch failed. */
static sio_code cut_wait(void *ud, uint64_t want, uint64_t *avail, char *err,
                         size_t errlen)
{
    uint64_t cut_at = *(const uint64_t *)ud;
    *avail = cut_at;
    if (want <= cut_at)
        return SIO_OK;
    snprintf(err, errlen, "the fetch stopped after %llu bytes",
             (unsigned long long)cut_at);
    return SIO_ERR_IO;
}

sio_code sio_index_build_staged(sio_io *io, const char *url, uint32_t index,
                                const sio_shard_limits *limits,
                                sio_index_entry *e, int fd, int decompressed,
                                uint64_t cut_at, const sio_logger *log,
                                uint64_t *reached, sio_error *err)
{
    sio_stage_hooks cut = {cut_wait, NULL, &cut_at};
    return build_twice(io, url, index, limits, e, NULL, fd, decompressed,
                       cut_at == UINT64_MAX ? NULL : &cut, log, reached, err);
}

sio_code sio_index_build_growing(sio_io *io, const char *url, uint32_t index,
                                 const sio_shard_limits *limits,
                                 sio_index_entry *e, int fd,
                                 int decompressed,
                                 const sio_stage_hooks *hooks,
                                 const sio_logger *log, uint64_t *reached,
                                 sio_error *err)
{
    return build_twice(io, url, index, limits, e, NULL, fd, decompressed,
                       hooks, log, reached, err);
}

sio_code sio_index_build(sio_io *io, const char *url, uint32_t index,
                         const sio_shard_limits *limits, sio_index_entry *e,
                         sio_error *err)
{
    return sio_index_build_to(io, url, index, limits, e, NULL, NULL, NULL,
                              err);
}

void sio_index_get_stats(sio_index *x, sio_index_stats *st)
{
    st->entries = atomic_load(&x->entries);
    st->complete = atomic_load(&x->complete);
    st->groups = atomic_load(&x->groups);
    st->loaded = atomic_load(&x->loaded);
    st->built = atomic_load(&x->built);
    st->invalid = atomic_load(&x->invalid);
    st->write_errors = atomic_load(&x->write_errors);
    st->rejected_state = atomic_load(&x->rejected[SRC_STATE]);
    st->rejected_sidecar = atomic_load(&x->rejected[SRC_SIDECAR]);
    st->dropped = atomic_load(&x->dropped);
}

/* Journals ---------------------------------------------------------------- */

typedef struct jentry {
    uint32_t shard;
    uint64_t groups;
} jentry;

struct sio_journal {
    pthread_mutex_t mu;
    _Atomic uint64_t gen; /* decisions taken so far (read without mu) */
    FILE *fp;
    jentry *v;     /* decisions in the order they were taken */
    size_t *ord;   /* positions in v, sorted by shard (lookups) */
    size_t n, cap;
    size_t max;    /* shards of the dataset: a decision names one below */
    /* The losses (sio_journal_loss), under mu: one event per shard end
     * that lost something, with the counts so far; events found at the
     * same `at` share one entry. */
    struct lossev {
        uint64_t at, shards, samples; /* samples and shards up to it */
    } *lv;
    size_t ln, lcap;
    uint64_t lseq;                    /* losses told (their seq) */
    uint64_t lshards, lsamples;       /* totals */
    size_t nsref, nlref;
    uint64_t sref_at[SIO_LOSS_REFS_MAX], lref_at[SIO_LOSS_REFS_MAX];
    uint32_t sref[SIO_LOSS_REFS_MAX];
    sio_loss_ref lref[SIO_LOSS_REFS_MAX];
    _Atomic uint64_t lcovered;        /* losses before Y[lcovered] told */
};

/* The position in ord where shard is, or would be inserted. */
static size_t journal_pos(const sio_journal *j, uint32_t shard)
{
    size_t lo = 0, hi = j->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (j->v[j->ord[mid]].shard < shard)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int journal_find(const sio_journal *j, uint32_t shard, uint64_t *groups)
{
    size_t at = journal_pos(j, shard);
    if (at < j->n && j->v[j->ord[at]].shard == shard) {
        *groups = j->v[j->ord[at]].groups;
        return 1;
    }
    return 0;
}

static int journal_reserve(sio_journal *j, size_t want)
{
    if (want <= j->cap)
        return 0;
    if (want > j->max)
        return -1;
    size_t nc = j->cap ? j->cap : 16;
    while (nc < want)
        nc = nc > j->max / 2 ? j->max : nc * 2;
    jentry *nv = realloc(j->v, nc * sizeof *nv);
    if (!nv)
        return -1;
    j->v = nv;
    size_t *no = realloc(j->ord, nc * sizeof *no);
    if (!no)
        return -1;
    j->ord = no;
    j->cap = nc;
    return 0;
}

/* Add a decision for a shard that has none (it is not there: checked). */
static int journal_add(sio_journal *j, uint32_t shard, uint64_t groups)
{
    if (j->n >= j->max || journal_reserve(j, j->n + 1))
        return -1;
    size_t at = journal_pos(j, shard);
    memmove(j->ord + at + 1, j->ord + at, (j->n - at) * sizeof *j->ord);
    j->ord[at] = j->n;
    j->v[j->n].shard = shard;
    j->v[j->n].groups = groups;
    j->n++;
    return 0;
}

typedef struct jsort {
    uint32_t shard;
    size_t pos;
} jsort;

static int cmp_jsort(const void *a, const void *b)
{
    const jsort *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos; /* the first first */
}

/* Settle what was loaded (v[0..n) in file order): the first decision for
 * a shard wins, later ones for it are dropped (v keeps its order), and
 * ord is built. */
static void journal_settle(sio_journal *j)
{
    size_t n = j->n, kept = 0;
    if (n == 0)
        return;
    jsort *t = malloc(n * sizeof *t);
    if (!t) {
        j->n = 0; /* no memory: the decisions are taken again */
        return;
    }
    for (size_t i = 0; i < n; i++)
        t[i] = (jsort){j->v[i].shard, i};
    qsort(t, n, sizeof *t, cmp_jsort);
    /* a repeat is marked by a shard number past every real one */
    for (size_t i = 1; i < n; i++)
        if (t[i].shard == t[i - 1].shard)
            j->v[t[i].pos].shard = UINT32_MAX;
    for (size_t i = 0; i < n; i++)
        if (j->v[i].shard != UINT32_MAX)
            j->v[kept++] = j->v[i];
    j->n = kept;
    for (size_t i = 0; i < kept; i++)
        t[i] = (jsort){j->v[i].shard, i};
    qsort(t, kept, sizeof *t, cmp_jsort);
    for (size_t i = 0; i < kept; i++)
        j->ord[i] = t[i].pos;
    free(t);
}

/* The next line of a journal file into line[cap] (NUL-terminated, the
 * newline dropped): 1; 2 for a line that cannot be a decision (longer
 * than cap - 1 or holding a NUL byte); -1 for a last line without its
 * newline (torn); 0 at the end. */
static int journal_line(FILE *in, char *line, size_t cap)
{
    size_t n = 0;
    int c, bad = 0;
    while ((c = getc(in)) != EOF) {
        if (c == '\n') {
            line[n < cap ? n : cap - 1] = '\0';
            return bad ? 2 : 1;
        }
        if (c == '\0' || n + 1 >= cap)
            bad = 1;
        else
            line[n] = (char)c;
        n++;
    }
    return n ? -1 : 0;
}

sio_code sio_journal_open(const char *path, size_t shards, sio_journal **out,
                          sio_error *err)
{
    sio_journal *j = calloc(1, sizeof *j);
    *out = NULL;
    if (!j)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&j->mu, NULL);
    j->max = shards && shards < SIO_SHARDS_MAX ? shards : SIO_SHARDS_MAX;
    if (path) {
        FILE *in = fopen(path, "r");
        if (in) {
            /* A journal holds at most one decision per shard: its lines
             * are read up to the dataset's shards (a longer file is not
             * one the server wrote); a line that does not parse or names
             * a shard past the dataset is not a decision. */
            char line[1024];
            int cut = 0, r;
            size_t lines = 0;
            off_t whole = 0; /* where the last complete line ends */
            while (lines < j->max && (r = journal_line(in, line,
                                                       sizeof line)) != 0) {
                unsigned long long s, g;
                if (r < 0) {
                    /* A torn last line (crash while appending) is ignored
                     * (its decision was never acted on before the fsync)
                     * and cut off, so the next decision starts a line of
                     * its own. */
                    cut = 1;
                    break;
                }
                whole = ftello(in);
                lines++;
                if (r == 2)
                    continue; /* overlong or holding a NUL: no decision */
                if (sscanf(line, "SKIP %llu %llu", &s, &g) != 2 ||
                    s >= j->max)
                    continue;
                if (journal_reserve(j, j->n + 1))
                    break;
                j->v[j->n].shard = (uint32_t)s;
                j->v[j->n].groups = (uint64_t)g;
                j->n++;
            }
            fclose(in);
            journal_settle(j);
            if (cut && whole >= 0 && truncate(path, whole) != 0) {
                sio_code rc = sio_seterr(err, SIO_ERR_IO,
                                         "cannot cut the torn last line of "
                                         "%s: %s", path, strerror(errno));
                sio_journal_close(j);
                return rc;
            }
        }
        j->fp = fopen(path, "a");
        if (!j->fp) {
            sio_code rc = sio_seterr(err, SIO_ERR_IO, "cannot open %s: %s",
                                     path, strerror(errno));
            sio_journal_close(j);
            return rc;
        }
    }
    *out = j;
    return SIO_OK;
}

void sio_journal_close(sio_journal *j)
{
    if (!j)
        return;
    if (j->fp)
        fclose(j->fp);
    free(j->v);
    free(j->ord);
    free(j->lv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

int sio_journal_cut(sio_journal *j, uint32_t shard, uint64_t *groups)
{
    int found;
    if (!j)
        return 0;
    pthread_mutex_lock(&j->mu);
    found = j->n && journal_find(j, shard, groups);
    pthread_mutex_unlock(&j->mu);
    return found;
}

uint64_t sio_journal_record(sio_journal *j, uint32_t shard, uint64_t groups,
                            sio_code code, const char *reason)
{
    uint64_t have;
    if (!j)
        return groups;
    pthread_mutex_lock(&j->mu);
    if (journal_find(j, shard, &have)) {
        pthread_mutex_unlock(&j->mu);
        return have;
    }
    if (journal_add(j, shard, groups) != 0) {
        /* past the dataset's shards, or no memory: not taken */
        pthread_mutex_unlock(&j->mu);
        return groups;
    }
    atomic_fetch_add_explicit(&j->gen, 1, memory_order_release);
    if (j->fp) {
        /* The reason is one line of printable text, no secrets (callers
         * pass redacted text). */
        char r[256];
        size_t k = 0;
        for (const char *p = reason ? reason : ""; *p && k + 1 < sizeof r; p++)
            r[k++] = (*p >= 0x20 && *p < 0x7f) ? *p : ' ';
        r[k] = '\0';
        fprintf(j->fp, "SKIP %u %" PRIu64 " %s %s\n", shard, groups,
                sio_strerror(code), r);
        fflush(j->fp);
        fsync(fileno(j->fp));
    }
    pthread_mutex_unlock(&j->mu);
    return groups;
}

uint64_t sio_journal_generation(sio_journal *j)
{
    return j ? atomic_load_explicit(&j->gen, memory_order_acquire) : 0;
}

size_t sio_journal_count(sio_journal *j)
{
    size_t n;
    if (!j)
        return 0;
    pthread_mutex_lock(&j->mu);
    n = j->n;
    pthread_mutex_unlock(&j->mu);
    return n;
}

size_t sio_journal_list(sio_journal *j, uint32_t *shards, uint64_t *groups,
                        size_t max)
{
    size_t n;
    if (!j)
        return 0;
    pthread_mutex_lock(&j->mu);
    n = j->n;
    for (size_t i = 0; i < n && i < max; i++) {
        shards[i] = j->v[i].shard;
        if (groups)
            groups[i] = j->v[i].groups;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

int sio_journal_persistent(const sio_journal *j)
{
    return j && j->fp != NULL;
}

/* Losses ------------------------------------------------------------- */

/* One more event entry (mu held): a new one for a new `at`; the last one
 * again for the same `at`, or once SIO_LOSS_EVENTS_MAX are kept (then a
 * loss counts from the last entry's place: told to shares that end a
 * little earlier than it was found, the same way by every reader). */
static struct lossev *loss_entry(sio_journal *j, uint64_t at)
{
    if (j->ln && (j->lv[j->ln - 1].at == at || j->ln >= SIO_LOSS_EVENTS_MAX))
        return &j->lv[j->ln - 1];
    if (j->ln == j->lcap) {
        size_t nc = j->lcap ? j->lcap * 2 : 16;
        if (nc > SIO_LOSS_EVENTS_MAX)
            nc = SIO_LOSS_EVENTS_MAX;
        struct lossev *nv = realloc(j->lv, nc * sizeof *nv);
        if (!nv)
            return j->ln ? &j->lv[j->ln - 1] : NULL;
        j->lv = nv;
        j->lcap = nc;
    }
    j->lv[j->ln] = (struct lossev){at, j->lshards, j->lsamples};
    return &j->lv[j->ln++];
}

int sio_journal_loss(sio_journal *j, uint64_t seq, uint64_t at,
                     uint32_t shard, int shard_lost, uint64_t samples,
                     const uint64_t *groups, size_t ngroups)
{
    if (!j)
        return 0;
    pthread_mutex_lock(&j->mu);
    if (seq != j->lseq) {
        /* told before (in step), or a loss past a gap (not in step) */
        int ok = seq < j->lseq;
        pthread_mutex_unlock(&j->mu);
        return ok;
    }
    /* The last entry's place never moves back: a loss found later in the
     * order is found at an `at` no smaller. */
    if (j->ln && at < j->lv[j->ln - 1].at)
        at = j->lv[j->ln - 1].at;
    struct lossev *e = loss_entry(j, at);
    if (!e) {
        pthread_mutex_unlock(&j->mu);
        return 0; /* no memory: this loss is not told; nor is coverage */
    }
    j->lseq++;
    j->lshards += shard_lost ? 1 : 0;
    j->lsamples += samples;
    e->shards = j->lshards;
    e->samples = j->lsamples;
    if (shard_lost && j->nsref < SIO_LOSS_REFS_MAX) {
        j->sref_at[j->nsref] = at;
        j->sref[j->nsref++] = shard;
    }
    for (size_t i = 0; i < ngroups && j->nlref < SIO_LOSS_REFS_MAX; i++) {
        j->lref_at[j->nlref] = at;
        j->lref[j->nlref++] = (sio_loss_ref){shard, groups[i]};
    }
    pthread_mutex_unlock(&j->mu);
    return 1;
}

void sio_journal_loss_reach(sio_journal *j, uint64_t emitted)
{
    if (!j)
        return;
    uint64_t have = atomic_load_explicit(&j->lcovered, memory_order_relaxed);
    while (have < emitted &&
           !atomic_compare_exchange_weak_explicit(&j->lcovered, &have,
                                                  emitted,
                                                  memory_order_release,
                                                  memory_order_relaxed))
        ;
}

uint64_t sio_journal_loss_count(sio_journal *j)
{
    uint64_t n;
    if (!j)
        return 0;
    pthread_mutex_lock(&j->mu);
    n = j->lseq;
    pthread_mutex_unlock(&j->mu);
    return n;
}

int sio_journal_losses(sio_journal *j, uint64_t last, sio_losses_info *out)
{
    memset(out, 0, sizeof *out);
    if (!j)
        return 1;
    uint64_t cov = atomic_load_explicit(&j->lcovered, memory_order_acquire);
    pthread_mutex_lock(&j->mu);
    /* the last entry at or before `last` */
    size_t lo = 0, hi = j->ln;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (j->lv[mid].at <= last)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0) {
        out->shards = j->lv[lo - 1].shards;
        out->samples = j->lv[lo - 1].samples;
    }
    for (size_t i = 0; i < j->nsref; i++)
        if (j->sref_at[i] <= last)
            out->shard_refs[out->nshard_refs++] = j->sref[i];
    for (size_t i = 0; i < j->nlref; i++)
        if (j->lref_at[i] <= last)
            out->sample_refs[out->nsample_refs++] = j->lref[i];
    pthread_mutex_unlock(&j->mu);
    return cov == UINT64_MAX || (last != UINT64_MAX && cov > last);
}
