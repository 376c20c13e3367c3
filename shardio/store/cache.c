/*
 * cache.c — the shard cache (include/shardio_cache.h has the contract).
 *
 * Layout of a cache directory: per entry "<id>.data" (the object's bytes
 * from offset 0), "<id>.sums" (the block sums, format in shardio_cache.h)
 * and "<id>.meta" (text: format line, url, validator, size, durable
 * length, complete flag), where id is 32 hex digits of SHA-256 of the URL,
 * a dot and a 16-digit generation, so an entry refilled after a change
 * never shares a file with the one it replaces. Temporary files end in
 * ".tmp". Anything else in the directory is left alone. A memory entry
 * keeps its data and its sums in two memfds.
 *
 * Checks: the fill sums each block as it writes it, and publishes e->have
 * only at block boundaries (or the object's end), after the sums of the
 * blocks below it are written; every read of entry bytes (cs_read, and
 * sio_cache_check for the plan's descriptors) checks the blocks it
 * returns, reading the rest of a partial edge block to do so. A block that
 * fails drops the entry (corrupt()); the reader goes to the store.
 *
 * Threading: one mutex (c->mu) guards the table, the entries' states,
 * reference counts and the budget. Data is written by the fill thread and
 * read with pread() by streams without the lock: bytes below e->have are
 * written, summed and never change. Lock order: a user's mutex may be
 * taken while c->mu is held, never the other way round.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/crc32c.h"
#include "store/backend_ops.h"
#include "store/store_int.h"
#include "shardio_cache.h"

/* 2: block sums beside the data (entries of format 1 are removed). */
#define CACHE_META_MAGIC "shardcast-cache 2"
#define CACHE_URL_MAX SIO_CACHE_URL_MAX
#define CACHE_BLOCK SIO_CACHE_BLOCK
#define SUMS_HDR SIO_CACHE_SUMS_HDR
#define SUMS_MAGIC "SCSUMS1\n"
#define SUMS_VERSION 1u
/* The fill makes its progress durable (fdatasync, metadata) this often. */
#define CACHE_SYNC_EVERY (64u << 20)
/* One read of the fill. */
#define CACHE_FILL_CHUNK (1u << 20)
#define CACHE_IDLE_DEFAULT 86400u
#define CACHE_ID_LEN 49 /* 32 hex, '.', 16 hex */

typedef enum { E_PARTIAL, E_FILLING, E_COMPLETE } estate;

typedef struct entry {
    struct entry *next; /* hash chain */
    char *url;
    uint64_t h;         /* hash of url (table) */
    uint64_t prio;      /* sio_cache_priority(url) */
    char id[CACHE_ID_LEN + 1];
    char validator[SIO_VALIDATOR_MAX]; /* "" until the fill learns it */
    uint64_t size;      /* object size */
    uint64_t charge;    /* against the budget, released when freed */
    _Atomic uint64_t have; /* bytes [0, have) and their block sums are
                              written: a multiple of CACHE_BLOCK, or size */
    uint64_t durable;   /* bytes fsync'd (data and sums) and recorded in
                           the metadata */
    estate state;
    int in_table;       /* 0: dropped (files unlinked), freed at refs 0 */
    int fd;             /* -1: closed (opened while refs > 0) */
    int sfd;            /* the block sums, open when fd is */
    unsigned refs;
    uint64_t last_use;  /* monotonic seconds */
    pthread_cond_t cv;  /* fill progress and end */
} entry;

struct sio_cache {
    char *dir; /* NULL: memory (memfd) */
    uint64_t budget;
    uint32_t idle_s, max_fills;
    sio_logger log;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a fill ended (destroy waits) */
    entry **tab;
    size_t tab_cap, n, ncomplete;
    uint64_t used, data;
    uint32_t fills;
    int stopping;
    uint64_t gen;
    /* counters (updated without c->mu) */
    _Atomic uint64_t hits, misses, hit_bytes, miss_bytes, store_bytes;
    _Atomic uint64_t fills_started, fills_done, fills_failed;
    _Atomic uint64_t evictions, evicted_bytes, stale, rejected;
    _Atomic uint64_t validations, write_errors, corrupt;
};

/* ------------------------------------------------------------------ */
/* Jobs: counters and checked entries                                  */

typedef struct memo {
    struct memo *next;
    uint64_t h;
    char *url;
    int checked;        /* the job checked or filled the entry */
    char validator[SIO_VALIDATOR_MAX]; /* "": the job filled it itself */
    uint64_t size;      /* what a HEAD said of an object the cache did not
                           take (UINT64_MAX: none) */
} memo;

struct sio_cache_user {
    sio_cache *c;
    pthread_mutex_t mu;
    memo **tab;
    size_t cap, n;
    _Atomic uint64_t hits, misses, hit_bytes, miss_bytes;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec;
}

sio_code sio_cache_user_create(sio_cache *c, sio_cache_user **out)
{
    sio_cache_user *u = calloc(1, sizeof *u);
    *out = NULL;
    if (!u)
        return SIO_ERR_NOMEM;
    u->c = c;
    pthread_mutex_init(&u->mu, NULL);
    *out = u;
    return SIO_OK;
}

void sio_cache_user_destroy(sio_cache_user *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->cap; i++) {
        memo *m = u->tab[i];
        while (m) {
            memo *nx = m->next;
            free(m->url);
            free(m);
            m = nx;
        }
    }
    free(u->tab);
    pthread_mutex_destroy(&u->mu);
    free(u);
}

void sio_cache_user_get_stats(const sio_cache_user *u,
                              sio_cache_user_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!u)
        return;
    st->hits = atomic_load(&u->hits);
    st->misses = atomic_load(&u->misses);
    st->hit_bytes = atomic_load(&u->hit_bytes);
    st->miss_bytes = atomic_load(&u->miss_bytes);
}

/* The validator the job has checked for url: 1 and *v (NUL: trusted) when
 * known. u->mu held. */
static memo *memo_find(sio_cache_user *u, const char *url, uint64_t h)
{
    if (!u->cap)
        return NULL;
    for (memo *m = u->tab[h & (u->cap - 1)]; m; m = m->next)
        if (m->h == h && strcmp(m->url, url) == 0)
            return m;
    return NULL;
}

/* Does the job accept validator v for url? */
static int memo_ok(sio_cache_user *u, const char *url, const char *v)
{
    uint64_t h = hash_str(url);
    int ok;
    pthread_mutex_lock(&u->mu);
    memo *m = memo_find(u, url, h);
    ok = m && m->checked &&
         (!m->validator[0] || strcmp(m->validator, v) == 0);
    pthread_mutex_unlock(&u->mu);
    return ok;
}

/* Remember that the job checked url at validator v ("": filled it). A
 * failed allocation only costs a later check. */
/* url's memo, made when missing (u->mu held); NULL when memory ran out. */
static memo *memo_get(sio_cache_user *u, const char *url, uint64_t h);

static void memo_set(sio_cache_user *u, const char *url, const char *v)
{
    uint64_t h = hash_str(url);
    pthread_mutex_lock(&u->mu);
    memo *m = memo_get(u, url, h);
    if (m) {
        m->checked = 1;
        snprintf(m->validator, sizeof m->validator, "%s", v);
    }
    pthread_mutex_unlock(&u->mu);
}

/* Remember the size a HEAD gave for an object the cache did not take, so
 * that the next epoch does not ask the store again while it still cannot
 * take it (sio_cache_open). */
static void memo_size_set(sio_cache_user *u, const char *url, uint64_t size)
{
    uint64_t h = hash_str(url);
    pthread_mutex_lock(&u->mu);
    memo *m = memo_get(u, url, h);
    if (m)
        m->size = size;
    pthread_mutex_unlock(&u->mu);
}

static uint64_t memo_size(sio_cache_user *u, const char *url)
{
    uint64_t h = hash_str(url), size = UINT64_MAX;
    pthread_mutex_lock(&u->mu);
    memo *m = memo_find(u, url, h);
    if (m)
        size = m->size;
    pthread_mutex_unlock(&u->mu);
    return size;
}

static memo *memo_get(sio_cache_user *u, const char *url, uint64_t h)
{
    memo *m = memo_find(u, url, h);
    if (!m) {
        if (u->n + 1 > u->cap * 2) {
            size_t ncap = u->cap ? u->cap * 2 : 64;
            memo **nt = calloc(ncap, sizeof *nt);
            if (!nt)
                return NULL;
            for (size_t i = 0; i < u->cap; i++) {
                memo *x = u->tab[i];
                while (x) {
                    memo *nx = x->next;
                    x->next = nt[x->h & (ncap - 1)];
                    nt[x->h & (ncap - 1)] = x;
                    x = nx;
                }
            }
            free(u->tab);
            u->tab = nt;
            u->cap = ncap;
        }
        m = calloc(1, sizeof *m);
        if (!m || !(m->url = strdup(url))) {
            free(m);
            return NULL;
        }
        m->h = h;
        m->size = UINT64_MAX;
        m->next = u->tab[h & (u->cap - 1)];
        u->tab[h & (u->cap - 1)] = m;
        u->n++;
    }
    return m;
}

/* ------------------------------------------------------------------ */
/* Names, priorities, metadata                                         */

static void sha256(const char *prefix, const char *s, unsigned char md[32])
{
    EVP_MD_CTX *x = EVP_MD_CTX_new();
    unsigned int len = 0;
    memset(md, 0, 32);
    if (!x)
        return;
    if (EVP_DigestInit_ex(x, EVP_sha256(), NULL) == 1 &&
        EVP_DigestUpdate(x, prefix, strlen(prefix) + 1) == 1 &&
        EVP_DigestUpdate(x, s, strlen(s)) == 1)
        EVP_DigestFinal_ex(x, md, &len);
    EVP_MD_CTX_free(x);
}

uint64_t sio_cache_priority(const char *url)
{
    unsigned char md[32];
    uint64_t p = 0;
    sha256("shardcast cache priority", url, md);
    for (int i = 0; i < 8; i++)
        p = p << 8 | md[i];
    return p;
}

static void url_hex(const char *url, char out[33])
{
    static const char hx[] = "0123456789abcdef";
    unsigned char md[32];
    sha256("shardcast cache entry", url, md);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[32] = '\0';
}

/* A string that can go on one metadata line. */
static int line_safe(const char *s, size_t max)
{
    size_t n = 0;
    for (; *s; s++, n++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || n >= max)
            return 0;
    return 1;
}

static void entry_path(const sio_cache *c, const entry *e, const char *ext,
                       char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s%s", c->dir, e->id, ext);
}

/* Write e's metadata (durable length `durable`, complete flag) by a
 * temporary file, fsync and rename. Data must be fsync'd first. */
static int write_meta(sio_cache *c, const entry *e, uint64_t durable,
                      int complete)
{
    char tmp[4096], fin[4096];
    entry_path(c, e, ".meta.tmp", tmp, sizeof tmp);
    entry_path(c, e, ".meta", fin, sizeof fin);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%s\nurl %s\nvalidator %s\nsize %" PRIu64 "\nhave %" PRIu64
               "\ncomplete %d\n",
            CACHE_META_MAGIC, e->url, e->validator, e->size, durable,
            complete);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0)
        bad = 1;
    if (bad || rename(tmp, fin) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Block sums                                                          */

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t nblocks(uint64_t bytes)
{
    return bytes / CACHE_BLOCK + (bytes % CACHE_BLOCK != 0);
}

void sio_cache_sums_header(uint64_t size, unsigned char out[SUMS_HDR])
{
    memset(out, 0, SUMS_HDR);
    memcpy(out, SUMS_MAGIC, 8);
    put_le32(out + 8, SUMS_VERSION);
    put_le32(out + 12, CACHE_BLOCK);
    put_le32(out + 16, (uint32_t)size);
    put_le32(out + 20, (uint32_t)(size >> 32));
    put_le32(out + 28, sio_crc32c(0, out, 28));
}

int sio_cache_sums_header_parse(const unsigned char *p, size_t n,
                                uint64_t *size)
{
    if (n < SUMS_HDR || memcmp(p, SUMS_MAGIC, 8) != 0 ||
        get_le32(p + 8) != SUMS_VERSION || get_le32(p + 12) != CACHE_BLOCK ||
        get_le32(p + 24) != 0 || get_le32(p + 28) != sio_crc32c(0, p, 28))
        return -1;
    *size = (uint64_t)get_le32(p + 16) | (uint64_t)get_le32(p + 20) << 32;
    return *size <= SIO_CACHE_BYTES_MAX ? 0 : -1;
}

static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Sums read per pread while checking a range. */
#define CHECK_SUMS_BATCH 256u

/* Check bytes [off, off + len) of an entry of `size` bytes, data in dfd,
 * sums in sfd: buf holds those bytes (NULL: they are read from dfd); the
 * parts of the first and last blocks outside the range are in pre and suf
 * when not NULL (the bytes from the block's start to off, and from the
 * range's end to its block's end), else read to sum the whole blocks.
 * 0: every block matches; 1: block *bad does not, or its bytes or sum
 * could not be read (the entry cannot be trusted). */
static int check_range(int dfd, int sfd, uint64_t size, uint64_t off,
                       const unsigned char *buf, size_t len,
                       const unsigned char *pre, const unsigned char *suf,
                       sio_cache_carry *cr, uint64_t *bad)
{
    unsigned char edge[CACHE_BLOCK], batch[CHECK_SUMS_BATCH * 4];
    const unsigned char *raw;
    if (len == 0)
        return 0;
    uint64_t end = off + len;
    if (end < off || end > size) {
        *bad = off / CACHE_BLOCK;
        return 1;
    }
    uint64_t b1 = (end - 1) / CACHE_BLOCK;
    for (uint64_t b = off / CACHE_BLOCK; b <= b1;) {
        uint64_t ns = b1 - b + 1;
        *bad = b;
        if (cr) {
            /* From the reader's window of sums, loaded when b is not in. */
            if (b < cr->sw_first || b - cr->sw_first >= cr->sw_n) {
                uint64_t first = b - b % SIO_CACHE_SUMS_WINDOW;
                ssize_t r;
                cr->sw_n = 0;
                do
                    r = pread(sfd, cr->sw, sizeof cr->sw,
                              (off_t)(SUMS_HDR + first * 4));
                while (r < 0 && errno == EINTR);
                if (r < 0 || (uint64_t)r / 4 <= b - first)
                    return 1;
                cr->sw_first = first;
                cr->sw_n = (uint64_t)r / 4;
            }
            raw = cr->sw + 4 * (b - cr->sw_first);
            if (ns > cr->sw_first + cr->sw_n - b)
                ns = cr->sw_first + cr->sw_n - b;
        } else {
            if (ns > CHECK_SUMS_BATCH)
                ns = CHECK_SUMS_BATCH;
            if (pread_full(sfd, batch, (size_t)ns * 4, SUMS_HDR + b * 4) != 0)
                return 1;
            raw = batch;
        }
        for (uint64_t k = 0; k < ns; k++, b++) {
            uint64_t bs = b * CACHE_BLOCK;
            uint64_t be = bs + CACHE_BLOCK < size ? bs + CACHE_BLOCK : size;
            uint64_t lo = bs > off ? bs : off, hi = be < end ? be : end;
            uint32_t crc = 0;
            *bad = b;
            if (lo > bs) {
                if (!pre && pread_full(dfd, edge, (size_t)(lo - bs), bs) != 0)
                    return 1;
                crc = sio_crc32c(crc, pre ? pre : edge, (size_t)(lo - bs));
            }
            if (buf) {
                crc = sio_crc32c(crc, buf + (lo - off), (size_t)(hi - lo));
            } else {
                if (pread_full(dfd, edge, (size_t)(hi - lo), lo) != 0)
                    return 1;
                crc = sio_crc32c(crc, edge, (size_t)(hi - lo));
            }
            if (hi < be) {
                if (!suf && pread_full(dfd, edge, (size_t)(be - hi), hi) != 0)
                    return 1;
                crc = sio_crc32c(crc, suf ? suf : edge, (size_t)(be - hi));
            }
            if (crc != get_le32(raw + 4 * k))
                return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The table                                                           */

static entry *find(sio_cache *c, const char *url)
{
    uint64_t h = hash_str(url);
    if (!c->tab_cap)
        return NULL;
    for (entry *e = c->tab[h & (c->tab_cap - 1)]; e; e = e->next)
        if (e->h == h && strcmp(e->url, url) == 0)
            return e;
    return NULL;
}

static int insert(sio_cache *c, entry *e)
{
    if (c->n + 1 > c->tab_cap) {
        size_t ncap = c->tab_cap ? c->tab_cap * 2 : 256;
        entry **nt = calloc(ncap, sizeof *nt);
        if (!nt)
            return -1;
        for (size_t i = 0; i < c->tab_cap; i++) {
            entry *x = c->tab[i];
            while (x) {
                entry *nx = x->next;
                x->next = nt[x->h & (ncap - 1)];
                nt[x->h & (ncap - 1)] = x;
                x = nx;
            }
        }
        free(c->tab);
        c->tab = nt;
        c->tab_cap = ncap;
    }
    e->next = c->tab[e->h & (c->tab_cap - 1)];
    c->tab[e->h & (c->tab_cap - 1)] = e;
    e->in_table = 1;
    c->n++;
    c->data += atomic_load(&e->have);
    if (e->state == E_COMPLETE)
        c->ncomplete++;
    return 0;
}

static entry *entry_new(sio_cache *c, const char *url, uint64_t size)
{
    char hex[33];
    entry *e = calloc(1, sizeof *e);
    if (!e || !(e->url = strdup(url))) {
        free(e);
        return NULL;
    }
    e->h = hash_str(url);
    e->prio = sio_cache_priority(url);
    url_hex(url, hex);
    snprintf(e->id, sizeof e->id, "%s.%016" PRIx64, hex, ++c->gen);
    e->size = size;
    e->charge = size;
    e->fd = e->sfd = -1;
    e->last_use = now_s();
    pthread_cond_init(&e->cv, NULL);
    return e;
}

static void entry_free(sio_cache *c, entry *e)
{
    c->used -= e->charge;
    if (e->fd >= 0)
        close(e->fd);
    if (e->sfd >= 0)
        close(e->sfd);
    pthread_cond_destroy(&e->cv);
    free(e->url);
    free(e);
}

/* Take e out of the table and remove its files (c->mu held); it is freed
 * now, or by the last unref. */
static void drop(sio_cache *c, entry *e)
{
    if (!e->in_table)
        return;
    entry **pp = &c->tab[e->h & (c->tab_cap - 1)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    e->in_table = 0;
    c->n--;
    c->data -= atomic_load(&e->have);
    if (e->state == E_COMPLETE)
        c->ncomplete--;
    if (c->dir) {
        char p[4096];
        entry_path(c, e, ".meta", p, sizeof p);
        unlink(p);
        entry_path(c, e, ".data", p, sizeof p);
        unlink(p);
        entry_path(c, e, ".sums", p, sizeof p);
        unlink(p);
    }
    pthread_cond_broadcast(&e->cv);
    if (e->refs == 0)
        entry_free(c, e);
}

/* Open e's data and sums files (c->mu held). */
static int entry_open_fd(sio_cache *c, entry *e)
{
    char p[4096];
    if (e->fd >= 0)
        return 0;
    if (!c->dir) {
        e->fd = memfd_create("shardcast-cache", MFD_CLOEXEC);
        e->sfd = memfd_create("shardcast-cache-sums", MFD_CLOEXEC);
    } else {
        entry_path(c, e, ".data", p, sizeof p);
        e->fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        entry_path(c, e, ".sums", p, sizeof p);
        e->sfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    }
    if (e->fd < 0 || e->sfd < 0) {
        if (e->fd >= 0)
            close(e->fd);
        if (e->sfd >= 0)
            close(e->sfd);
        e->fd = e->sfd = -1;
        return -1;
    }
    (void)posix_fadvise(e->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return 0;
}

static void ref(entry *e)
{
    e->refs++;
}

/* c->mu held. A memory entry keeps its fd: it is the storage. */
static void unref(sio_cache *c, entry *e)
{
    if (--e->refs > 0)
        return;
    if (!e->in_table) {
        entry_free(c, e);
        return;
    }
    if (c->dir && e->fd >= 0) {
        close(e->fd);
        close(e->sfd);
        e->fd = e->sfd = -1;
    }
}

typedef struct victim {
    entry *e;
    int idle;
} victim;

static int cmp_victim(const void *a, const void *b)
{
    const victim *x = a, *y = b;
    if (x->idle != y->idle)
        return x->idle ? -1 : 1;
    if (x->idle) /* least recently used first */
        return x->e->last_use < y->e->last_use ? -1
               : x->e->last_use > y->e->last_use ? 1 : 0;
    return x->e->prio < y->e->prio ? -1 : x->e->prio > y->e->prio ? 1 : 0;
}

/* Make room for `charge` bytes of an object of priority prio under the
 * stable-subset policy: 1 (charged) or 0 (nothing changed). c->mu held. */
/* Could admit() take charge now (c->mu held)? It changes nothing. */
static int admit_possible(sio_cache *c, uint64_t charge, uint64_t prio)
{
    if (charge > c->budget)
        return 0;
    if (c->used + charge <= c->budget)
        return 1;
    uint64_t need = c->used + charge - c->budget, avail = 0;
    uint64_t now = now_s();
    for (size_t i = 0; i < c->tab_cap && avail < need; i++)
        for (entry *e = c->tab[i]; e; e = e->next) {
            if (e->refs || e->state == E_FILLING)
                continue;
            if (now - e->last_use < c->idle_s && e->prio >= prio)
                continue;
            avail += e->charge;
        }
    return avail >= need;
}

static int admit(sio_cache *c, uint64_t charge, uint64_t prio)
{
    if (charge > c->budget)
        return 0;
    if (c->used + charge <= c->budget) {
        c->used += charge;
        return 1;
    }
    uint64_t need = c->used + charge - c->budget, avail = 0;
    uint64_t now = now_s();
    size_t nv = 0;
    victim *v = malloc((c->n ? c->n : 1) * sizeof *v);
    if (!v)
        return 0;
    for (size_t i = 0; i < c->tab_cap; i++)
        for (entry *e = c->tab[i]; e; e = e->next) {
            if (e->refs || e->state == E_FILLING)
                continue;
            int idle = now - e->last_use >= c->idle_s;
            if (!idle && e->prio >= prio)
                continue;
            v[nv].e = e;
            v[nv++].idle = idle;
            avail += e->charge;
        }
    if (avail < need) {
        free(v);
        return 0;
    }
    qsort(v, nv, sizeof *v, cmp_victim);
    for (size_t i = 0; i < nv && c->used + charge > c->budget; i++) {
        atomic_fetch_add(&c->evictions, 1);
        atomic_fetch_add(&c->evicted_bytes, v[i].e->size);
        SIO_LOG(&c->log, SIO_LOG_DEBUG,
                "event=cache_evict url=%s bytes=%" PRIu64 " reason=%s",
                v[i].e->url, v[i].e->size, v[i].idle ? "idle" : "priority");
        drop(c, v[i].e);
    }
    free(v);
    c->used += charge;
    return 1;
}

/* ------------------------------------------------------------------ */
/* Loading a directory                                                 */

/* A metadata file longer than this is not one of ours. */
#define CACHE_META_MAX (CACHE_URL_MAX + 2048u)

/* A decimal number of at most 20 digits, nothing else: 0, or -1. */
static int parse_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int sio_cache_entry_parse(const char *meta, size_t mlen,
                          const unsigned char *hdr, size_t hlen,
                          uint64_t sums_len, uint64_t data_len,
                          sio_cache_entry_info *out)
{
    enum { K_URL = 1, K_VAL = 2, K_SIZE = 4, K_HAVE = 8, K_COMPLETE = 16 };
    unsigned seen = 0;
    uint64_t hsize, complete = 2;
    size_t pos = 0, nlines = 0;

    memset(out, 0, sizeof *out);
    if (mlen > CACHE_META_MAX || memchr(meta, '\0', mlen))
        return -1;
    while (pos < mlen) {
        const char *line = meta + pos;
        const char *nl = memchr(line, '\n', mlen - pos);
        if (!nl)
            return -1; /* a cut last line */
        size_t l = (size_t)(nl - line);
        pos += l + 1;
        if (nlines++ == 0) {
            if (l != strlen(CACHE_META_MAGIC) ||
                memcmp(line, CACHE_META_MAGIC, l) != 0)
                return -1;
            continue;
        }
        const char *sp = memchr(line, ' ', l);
        if (!sp)
            return -1;
        size_t kl = (size_t)(sp - line), vl = l - kl - 1;
        const char *v = sp + 1;
        unsigned k = kl == 3 && !memcmp(line, "url", 3)         ? K_URL
                     : kl == 9 && !memcmp(line, "validator", 9) ? K_VAL
                     : kl == 4 && !memcmp(line, "size", 4)      ? K_SIZE
                     : kl == 4 && !memcmp(line, "have", 4)      ? K_HAVE
                     : kl == 8 && !memcmp(line, "complete", 8)  ? K_COMPLETE
                                                                : 0;
        if (!k || (seen & k))
            return -1; /* unknown or repeated */
        seen |= k;
        if (k == K_URL || k == K_VAL) {
            char *dst = k == K_URL ? out->url : out->validator;
            size_t cap = k == K_URL ? sizeof out->url : sizeof out->validator;
            if (vl == 0 || vl >= cap)
                return -1;
            memcpy(dst, v, vl);
            dst[vl] = '\0';
            if (!line_safe(dst, cap - 1))
                return -1;
        } else if (parse_u64(v, vl, k == K_SIZE   ? &out->size
                                    : k == K_HAVE ? &out->have
                                                  : &complete) != 0) {
            return -1;
        }
    }
    if (seen != (K_URL | K_VAL | K_SIZE | K_HAVE | K_COMPLETE) ||
        complete > 1 || out->size > SIO_CACHE_BYTES_MAX ||
        out->have > out->size || (complete && out->have != out->size))
        return -1;
    out->complete = (int)complete;
    /* The sums must be this object's; the bytes they cover are the most
     * the entry may claim, a complete entry only with all of them. */
    if (sio_cache_sums_header_parse(hdr, hlen, &hsize) != 0 ||
        hsize != out->size || sums_len < SUMS_HDR)
        return -1;
    uint64_t ns = (sums_len - SUMS_HDR) / 4;
    uint64_t cov = ns >= nblocks(out->size) ? out->size : ns * CACHE_BLOCK;
    if (out->have > cov)
        out->have = cov;
    if (out->have > data_len)
        out->have = data_len;
    if (out->have != out->size) {
        out->have -= out->have % CACHE_BLOCK; /* resumes at a block */
        out->complete = 0;
    } else {
        /* every byte is there and summed (a fill stopped before it said
         * so): the entry is whole, its reads are checked all the same */
        out->complete = 1;
    }
    if (out->complete && data_len > out->size)
        return -1; /* longer than the object: not this entry's data */
    return 0;
}

/* Read at most cap bytes of a regular file (no symbolic link) into buf:
 * *len, and the file's length in *flen; -1 when it cannot be read. */
static int read_head(const char *path, void *buf, size_t cap, size_t *len,
                     uint64_t *flen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    int rc = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        size_t want = (uint64_t)st.st_size < cap ? (size_t)st.st_size : cap;
        if (pread_full(fd, buf, want, 0) == 0) {
            *len = want;
            *flen = (uint64_t)st.st_size;
            rc = 0;
        }
    }
    close(fd);
    return rc;
}

/* Judge one entry on disk (sio_cache_entry_parse) and make a new entry of
 * it; its files are cut to what the checks cover. NULL when it is not
 * valid. */
static entry *load_meta(sio_cache *c, const char *dir, const char *id)
{
    char p[4096], *meta = malloc(CACHE_META_MAX + 1);
    unsigned char hdr[SUMS_HDR];
    size_t mlen = 0, hlen = 0;
    uint64_t mflen = 0, sums_len = 0, data_len = 0;
    sio_cache_entry_info *in = malloc(sizeof *in);
    entry *e = NULL;
    struct stat st;

    if (!meta || !in)
        goto out;
    snprintf(p, sizeof p, "%s/%s.meta", dir, id);
    if (read_head(p, meta, CACHE_META_MAX + 1, &mlen, &mflen) != 0 ||
        mflen > CACHE_META_MAX)
        goto out;
    snprintf(p, sizeof p, "%s/%s.sums", dir, id);
    if (read_head(p, hdr, sizeof hdr, &hlen, &sums_len) != 0)
        goto out;
    snprintf(p, sizeof p, "%s/%s.data", dir, id);
    if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode))
        goto out;
    data_len = (uint64_t)st.st_size;
    if (sio_cache_entry_parse(meta, mlen, hdr, hlen, sums_len, data_len,
                              in) != 0)
        goto out;
    {
        char hex[33];
        url_hex(in->url, hex);
        if (strncmp(hex, id, 32) != 0)
            goto out; /* not this URL's file */
    }
    if (!in->complete) {
        /* Bytes past what is summed and durable are not kept. */
        if (data_len > in->have && truncate(p, (off_t)in->have) != 0)
            goto out;
        uint64_t slen = SUMS_HDR + 4 * nblocks(in->have);
        snprintf(p, sizeof p, "%s/%s.sums", dir, id);
        if (sums_len > slen && truncate(p, (off_t)slen) != 0)
            goto out;
    }
    e = entry_new(c, in->url, in->size);
    if (!e)
        goto out;
    snprintf(e->id, sizeof e->id, "%s", id);
    snprintf(e->validator, sizeof e->validator, "%s", in->validator);
    atomic_store(&e->have, in->have);
    e->durable = in->have;
    e->state = in->complete ? E_COMPLETE : E_PARTIAL;
out:
    free(meta);
    free(in);
    return e;
}

static int is_id(const char *s, size_t n)
{
    if (n != CACHE_ID_LEN || s[32] != '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (i != 32 && !((s[i] >= '0' && s[i] <= '9') ||
                         (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static void remove_entry_files(const char *dir, const char *id)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.meta", dir, id);
    unlink(p);
    snprintf(p, sizeof p, "%s/%s.data", dir, id);
    unlink(p);
    snprintf(p, sizeof p, "%s/%s.sums", dir, id);
    unlink(p);
}

static sio_code load_dir(sio_cache *c, sio_error *err)
{
    DIR *d = opendir(c->dir);
    struct dirent *de;
    size_t loaded = 0, removed = 0;
    if (!d)
        return sio_seterr(err, SIO_ERR_IO, "cache dir %s: %s", c->dir,
                          strerror(errno));
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        size_t l = strlen(nm);
        char id[CACHE_ID_LEN + 1];
        if (l > CACHE_ID_LEN && is_id(nm, CACHE_ID_LEN)) {
            memcpy(id, nm, CACHE_ID_LEN);
            id[CACHE_ID_LEN] = '\0';
            const char *ext = nm + CACHE_ID_LEN;
            if (strcmp(ext, ".meta.tmp") == 0) {
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", c->dir, nm);
                unlink(p);
                continue;
            }
            if (strcmp(ext, ".meta") != 0 && strcmp(ext, ".data") != 0 &&
                strcmp(ext, ".sums") != 0)
                continue;
            /* Each id is judged once, by its .meta; a .data or .sums
             * alone is an entry whose metadata was never written. */
            char p[4096];
            snprintf(p, sizeof p, "%s/%s.meta", c->dir, id);
            if (strcmp(ext, ".meta") != 0) {
                if (access(p, F_OK) != 0) {
                    remove_entry_files(c->dir, id);
                    removed++;
                }
                continue;
            }
            entry *e = load_meta(c, c->dir, id);
            if (!e) {
                remove_entry_files(c->dir, id);
                removed++;
                continue;
            }
            entry *old = find(c, e->url);
            if (old) {
                /* Two generations of one URL (a crash while replacing):
                 * keep the further one. */
                entry *lose = atomic_load(&old->have) >= atomic_load(&e->have)
                                  ? e : old;
                if (lose == old)
                    drop(c, old);
                else {
                    remove_entry_files(c->dir, e->id);
                    c->used += e->charge; /* entry_free releases it */
                    entry_free(c, e);
                    removed++;
                    continue;
                }
            }
            c->used += e->charge;
            if (insert(c, e) != 0) {
                entry_free(c, e);
                closedir(d);
                return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            }
            loaded++;
        }
    }
    closedir(d);
    /* A lowered budget: evict by the policy until it holds. */
    while (c->used > c->budget) {
        entry *worst = NULL;
        for (size_t i = 0; i < c->tab_cap; i++)
            for (entry *e = c->tab[i]; e; e = e->next)
                if (!worst || e->prio < worst->prio)
                    worst = e;
        if (!worst)
            break;
        atomic_fetch_add(&c->evictions, 1);
        atomic_fetch_add(&c->evicted_bytes, worst->size);
        drop(c, worst);
    }
    SIO_LOG(&c->log, SIO_LOG_INFO,
            "event=cache_loaded dir=%s entries=%zu complete=%zu "
            "bytes=%" PRIu64 " budget=%" PRIu64 " removed=%zu",
            c->dir, c->n, c->ncomplete, c->used, c->budget, removed);
    (void)loaded;
    return SIO_OK;
}

/* ------------------------------------------------------------------ */
/* Life                                                                */

static int mkdir_p(const char *path)
{
    char tmp[4096];
    size_t l = strlen(path);
    if (l == 0 || l >= sizeof tmp)
        return -1;
    memcpy(tmp, path, l + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

sio_code sio_cache_create(const sio_cache_config *cfg, sio_cache **out,
                          sio_error *err)
{
    sio_cache *c;
    *out = NULL;
    if (!cfg || cfg->budget == 0 || cfg->budget > SIO_CACHE_BYTES_MAX)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "cache budget must be 1..%" PRIu64 " bytes",
                          SIO_CACHE_BYTES_MAX);
    if (cfg->max_fills > SIO_CACHE_FILLS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "cache fills above %u",
                          SIO_CACHE_FILLS_MAX);
    if (cfg->dir && strlen(cfg->dir) > 3000)
        return sio_seterr(err, SIO_ERR_INVALID, "cache dir path too long");
    c = calloc(1, sizeof *c);
    if (!c)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    c->budget = cfg->budget;
    c->idle_s = cfg->idle_s ? cfg->idle_s : CACHE_IDLE_DEFAULT;
    c->max_fills = cfg->max_fills ? cfg->max_fills : SIO_CACHE_FILLS_DEFAULT;
    c->log = cfg->log;
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c->gen = ((uint64_t)ts.tv_sec << 24) ^ (uint64_t)ts.tv_nsec;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (cfg->dir) {
        c->dir = strdup(cfg->dir);
        if (!c->dir) {
            sio_cache_destroy(c);
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        }
        if (mkdir_p(c->dir) != 0) {
            sio_seterr(err, SIO_ERR_IO, "cache dir %s: %s", c->dir,
                       strerror(errno));
            sio_cache_destroy(c);
            return SIO_ERR_IO;
        }
        sio_code rc = load_dir(c, err);
        if (rc) {
            sio_cache_destroy(c);
            return rc;
        }
    }
    *out = c;
    return SIO_OK;
}

int sio_cache_destroy(sio_cache *c)
{
    struct timespec dl;
    if (!c)
        return 0;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += SIO_CACHE_STOP_WAIT_S;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    for (size_t i = 0; i < c->tab_cap; i++)
        for (entry *e = c->tab[i]; e; e = e->next)
            pthread_cond_broadcast(&e->cv);
    while (c->fills > 0 &&
           pthread_cond_timedwait(&c->cv, &c->mu, &dl) == 0)
        ;
    if (c->fills > 0) {
        /* A fill is inside a store read that outlives the wait (a stalled
         * store, retries): it still uses the cache, which stays. */
        SIO_LOG(&c->log, SIO_LOG_WARN,
                "event=cache_stop_incomplete fills=%u", c->fills);
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    for (size_t i = 0; i < c->tab_cap; i++) {
        entry *e = c->tab[i];
        while (e) {
            entry *nx = e->next;
            entry_free(c, e);
            e = nx;
        }
    }
    pthread_mutex_unlock(&c->mu);
    free(c->tab);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
    return 0;
}

int sio_cache_wait_filled(struct sio_cache_user *u, const char *url)
{
    sio_cache *c = u->c;
    int ok = 0;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, url);
    if (e) {
        ref(e);
        while (e->state == E_FILLING && e->in_table && !c->stopping)
            pthread_cond_wait(&e->cv, &c->mu);
        ok = e->state == E_COMPLETE && e->in_table;
        unref(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

uint64_t sio_cache_user_room(struct sio_cache_user *u)
{
    sio_cache *c = u->c;
    pthread_mutex_lock(&c->mu);
    uint64_t room = c->used < c->budget ? c->budget - c->used : 0;
    pthread_mutex_unlock(&c->mu);
    return room;
}

uint64_t sio_cache_user_known_size(struct sio_cache_user *u, const char *url)
{
    return u ? memo_size(u, url) : UINT64_MAX;
}

/* What a HEAD of url told (oi) against its entry e, if any (c->mu held):
 * a stale entry is dropped (NULL), else this job's check of it is
 * remembered. */
static entry *head_checks(sio_cache *c, sio_cache_user *u, entry *e,
                          const char *url, const sio_objinfo *oi)
{
    if (e && (strcmp(oi->validator, e->validator) != 0 ||
              oi->size != e->size)) {
        SIO_LOG(&c->log, SIO_LOG_INFO,
                "event=cache_stale url=%s cached=%s store=%s", url,
                e->validator, oi->validator);
        atomic_fetch_add(&c->stale, 1);
        drop(c, e);
        return NULL;
    }
    if (e)
        memo_set(u, url, e->validator);
    return e;
}

uint64_t sio_cache_user_head_size(struct sio_cache_user *u,
                                  const sio_backend_ops *ops, void *ctx,
                                  const char *url, int *stale)
{
    sio_objinfo oi = {UINT64_MAX, ""};
    sio_error he;
    uint64_t size = memo_size(u, url);
    if (size != UINT64_MAX || !ops->head)
        return size;
    atomic_fetch_add(&u->c->validations, 1);
    if (ops->head(ctx, url, &oi, &he) != SIO_OK || oi.size == 0)
        return UINT64_MAX;
    memo_size_set(u, url, oi.size);
    /* The HEAD checks an entry of url too, as sio_cache_open's would. */
    sio_cache *c = u->c;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, url);
    if (e && e->validator[0] && !head_checks(c, u, e, url, &oi))
        *stale = 1;
    pthread_mutex_unlock(&c->mu);
    return oi.size;
}

void sio_cache_get_stats(const sio_cache *cc, sio_cache_stats *st)
{
    sio_cache *c = (sio_cache *)(uintptr_t)cc;
    memset(st, 0, sizeof *st);
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    st->budget = c->budget;
    st->entries = c->n;
    st->complete = c->ncomplete;
    st->used_bytes = c->used;
    st->data_bytes = c->data;
    st->fills = c->fills;
    pthread_mutex_unlock(&c->mu);
    st->hits = atomic_load(&c->hits);
    st->misses = atomic_load(&c->misses);
    st->hit_bytes = atomic_load(&c->hit_bytes);
    st->miss_bytes = atomic_load(&c->miss_bytes);
    st->store_bytes = atomic_load(&c->store_bytes);
    st->fills_started = atomic_load(&c->fills_started);
    st->fills_done = atomic_load(&c->fills_done);
    st->fills_failed = atomic_load(&c->fills_failed);
    st->evictions = atomic_load(&c->evictions);
    st->evicted_bytes = atomic_load(&c->evicted_bytes);
    st->stale = atomic_load(&c->stale);
    st->rejected = atomic_load(&c->rejected);
    st->validations = atomic_load(&c->validations);
    st->write_errors = atomic_load(&c->write_errors);
    st->corrupt = atomic_load(&c->corrupt);
}

void sio_cache_held(sio_cache *c,
                    const char *(*url_at)(const void *ctx, size_t i),
                    const void *ctx, size_t n, uint64_t *entries,
                    uint64_t *bytes)
{
    *entries = *bytes = 0;
    if (!c)
        return;
    /* In slices, so a long list never holds the lock for long. */
    for (size_t i = 0; i < n;) {
        pthread_mutex_lock(&c->mu);
        for (size_t k = 0; k < 4096 && i < n; k++, i++) {
            const char *u = url_at(ctx, i);
            entry *e = u ? find(c, u) : NULL;
            if (e && e->state == E_COMPLETE) {
                (*entries)++;
                *bytes += e->size;
            }
        }
        pthread_mutex_unlock(&c->mu);
    }
}

/* ------------------------------------------------------------------ */
/* Fills                                                               */

typedef struct fill {
    sio_cache *c;
    entry *e;
    const sio_backend_ops *ops;
    void *ctx;
} fill;

/* Codes after which the partial bytes are worth nothing. */
static int fill_drops(sio_code rc)
{
    return rc == SIO_ERR_CHANGED || rc == SIO_ERR_NOTFOUND ||
           rc == SIO_ERR_AUTH || rc == SIO_ERR_FORMAT;
}

/* Make bytes [0, have) of e durable: data and sums fsync'd, then the
 * metadata says so (e->durable). 0, or -1 with errno. */
static int sync_to(sio_cache *c, entry *e, uint64_t have, int complete)
{
    if (fdatasync(e->fd) != 0 || fdatasync(e->sfd) != 0 ||
        write_meta(c, e, have, complete) != 0)
        return -1;
    e->durable = have;
    return 0;
}

static void *fill_main(void *arg)
{
    fill *f = arg;
    sio_cache *c = f->c;
    entry *e = f->e;
    sio_stream *s = NULL;
    sio_error er;
    sio_code rc = SIO_OK;
    int local_err = 0, first = 1;
    /* have is at a block boundary (or the end): the fill resumes there,
     * and bcrc sums the block being written. */
    uint64_t pos = atomic_load(&e->have);
    uint32_t bcrc = 0;
    unsigned char *buf = malloc(CACHE_FILL_CHUNK);
    unsigned char hdr[SUMS_HDR];
    unsigned char sums[(CACHE_FILL_CHUNK / CACHE_BLOCK + 1) * 4];

    er.msg[0] = '\0';
    sio_cache_sums_header(e->size, hdr);
    if (!buf) {
        rc = SIO_ERR_NOMEM;
    } else if (pwrite_full(e->sfd, hdr, sizeof hdr, 0) != 0) {
        rc = sio_seterr(&er, SIO_ERR_IO, "cache sums: %s", strerror(errno));
        local_err = 1;
    } else if (pos == e->size && pos > 0)
        first = 0; /* every byte is there; only the metadata was missing */
    else if (f->ops->open_range)
        rc = f->ops->open_range(f->ctx, e->url, pos, UINT64_MAX, &s, &er);
    else
        rc = f->ops->open(f->ctx, e->url, pos, &s, &er);
    while (rc == SIO_OK && s) {
        size_t got = 0;
        pthread_mutex_lock(&c->mu);
        int stop = c->stopping || !e->in_table;
        pthread_mutex_unlock(&c->mu);
        if (stop) {
            rc = SIO_ERR_CANCELED;
            break;
        }
        if (pos == e->size && !first)
            break;
        rc = s->ops->read(s, buf, CACHE_FILL_CHUNK, &got);
        if (rc) {
            snprintf(er.msg, sizeof er.msg, "%s", s->ops->errmsg(s));
            break;
        }
        if (first) {
            sio_objinfo oi = {UINT64_MAX, ""};
            first = 0;
            if (s->ops->info)
                s->ops->info(s, &oi);
            if (oi.size != UINT64_MAX && oi.size != e->size) {
                rc = sio_seterr(&er, SIO_ERR_CHANGED,
                                "object size %" PRIu64 ", cache entry %" PRIu64,
                                oi.size, e->size);
                break;
            }
            pthread_mutex_lock(&c->mu);
            if (!e->validator[0]) {
                snprintf(e->validator, sizeof e->validator, "%s",
                         oi.validator);
            } else if (strcmp(e->validator, oi.validator) != 0) {
                rc = sio_seterr(&er, SIO_ERR_CHANGED,
                                "object validator %s, cache entry %s",
                                oi.validator[0] ? oi.validator : "(none)",
                                e->validator);
            }
            int novalidator = !e->validator[0];
            pthread_mutex_unlock(&c->mu);
            if (!rc && (novalidator || !line_safe(e->validator, 1000)))
                rc = sio_seterr(&er, SIO_ERR_CHANGED,
                                "the store gave no usable ETag or "
                                "Last-Modified: not cached");
            if (rc)
                break;
            if (c->dir && pos == 0 && write_meta(c, e, 0, 0) != 0) {
                rc = sio_seterr(&er, SIO_ERR_IO, "cache metadata: %s",
                                strerror(errno));
                local_err = 1;
                break;
            }
        }
        if (got == 0) {
            if (pos != e->size)
                rc = sio_seterr(&er, SIO_ERR_IO,
                                "object ended at %" PRIu64 " of %" PRIu64,
                                pos, e->size);
            break;
        }
        if (got > e->size - pos) {
            rc = sio_seterr(&er, SIO_ERR_CHANGED, "object longer than %" PRIu64,
                            e->size);
            break;
        }
        if (pwrite_full(e->fd, buf, got, pos) != 0) {
            rc = sio_seterr(&er, SIO_ERR_IO, "cache write: %s",
                            strerror(errno));
            local_err = 1;
            break;
        }
        /* The sums of the blocks these bytes complete, then have moves
         * up to the last of them: readers never see bytes unsummed. */
        size_t ns = 0;
        uint64_t first_blk = pos / CACHE_BLOCK;
        for (size_t i = 0; i < got;) {
            uint64_t at = pos + i;
            size_t n = CACHE_BLOCK - (size_t)(at % CACHE_BLOCK);
            if (n > got - i)
                n = got - i;
            bcrc = sio_crc32c(bcrc, buf + i, n);
            i += n;
            if ((at + n) % CACHE_BLOCK == 0 || at + n == e->size) {
                put_le32(sums + 4 * ns++, bcrc);
                bcrc = 0;
            }
        }
        if (ns && pwrite_full(e->sfd, sums, ns * 4,
                              SUMS_HDR + first_blk * 4) != 0) {
            rc = sio_seterr(&er, SIO_ERR_IO, "cache sums: %s",
                            strerror(errno));
            local_err = 1;
            break;
        }
        pos += got;
        atomic_fetch_add(&c->store_bytes, got);
        uint64_t have = pos == e->size ? pos : pos - pos % CACHE_BLOCK;
        pthread_mutex_lock(&c->mu);
        if (e->in_table)
            c->data += have - atomic_load(&e->have);
        atomic_store(&e->have, have);
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&c->mu);
        if (c->dir && have - e->durable >= CACHE_SYNC_EVERY &&
            have < e->size) {
            if (sync_to(c, e, have, 0) != 0) {
                rc = sio_seterr(&er, SIO_ERR_IO, "cache sync: %s",
                                strerror(errno));
                local_err = 1;
                break;
            }
        }
    }
    if (rc == SIO_OK && c->dir && sync_to(c, e, pos, 1) != 0) {
        rc = sio_seterr(&er, SIO_ERR_IO, "cache sync: %s", strerror(errno));
        local_err = 1;
    }
    if (rc && !local_err && !fill_drops(rc) && c->dir &&
        atomic_load(&e->have) > e->durable && e->validator[0])
        (void)sync_to(c, e, atomic_load(&e->have), 0); /* resumable */
    if (s)
        s->ops->close(s);
    free(buf);

    pthread_mutex_lock(&c->mu);
    if (rc == SIO_OK) {
        e->state = E_COMPLETE;
        if (e->in_table)
            c->ncomplete++;
        atomic_fetch_add(&c->fills_done, 1);
    } else {
        e->state = E_PARTIAL;
        if (rc != SIO_ERR_CANCELED)
            atomic_fetch_add(&c->fills_failed, 1);
        if (local_err)
            atomic_fetch_add(&c->write_errors, 1);
        if (rc == SIO_ERR_CHANGED)
            atomic_fetch_add(&c->stale, 1);
        if (local_err || fill_drops(rc) || rc == SIO_ERR_NOMEM ||
            !e->validator[0])
            drop(c, e);
        if (rc != SIO_ERR_CANCELED)
            SIO_LOG(&c->log, SIO_LOG_WARN,
                    "event=cache_fill_failed url=%s at=%" PRIu64
                    " code=%s msg=\"%s\"",
                    e->url, pos, sio_strerror(rc), er.msg);
    }
    pthread_cond_broadcast(&e->cv);
    unref(c, e);
    c->fills--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(f);
    return NULL;
}

/* Start a fill of e from e->have (c->mu held; e is in the table). */
static int start_fill(sio_cache *c, entry *e, const sio_backend_ops *ops,
                      void *ctx)
{
    pthread_attr_t at;
    pthread_t th;
    fill *f;
    if (c->stopping || c->fills >= c->max_fills)
        return -1;
    if (entry_open_fd(c, e) != 0) {
        atomic_fetch_add(&c->write_errors, 1);
        return -1;
    }
    f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->c = c;
    f->e = e;
    f->ops = ops;
    f->ctx = ctx;
    ref(e);
    e->state = E_FILLING;
    c->fills++;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int bad = pthread_create(&th, &at, fill_main, f) != 0;
    pthread_attr_destroy(&at);
    if (bad) {
        c->fills--;
        e->state = E_PARTIAL;
        unref(c, e);
        free(f);
        return -1;
    }
    atomic_fetch_add(&c->fills_started, 1);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Reader streams                                                      */

typedef struct cstream {
    sio_stream base;
    sio_cache *c;
    sio_cache_user *u;
    entry *e;                 /* NULL: the store only */
    const sio_backend_ops *ops;
    void *ctx;
    char *url;
    uint64_t pos, end;
    sio_stream *direct;       /* the store, from where the entry stopped */
    int hit;                  /* counters: the open was a hit */
    int check;                /* direct's first answer must match expect */
    char expect[SIO_VALIDATOR_MAX];
    char err[512];
    /* A checked block, for reads that do not cover whole blocks. */
    uint64_t blk_at, blk_len;  /* blk_len 0: none */
    unsigned char blk[CACHE_BLOCK];
} cstream;

static void count(cstream *s, size_t n)
{
    if (s->hit) {
        atomic_fetch_add(&s->c->hit_bytes, n);
        atomic_fetch_add(&s->u->hit_bytes, n);
    } else {
        atomic_fetch_add(&s->c->miss_bytes, n);
        atomic_fetch_add(&s->u->miss_bytes, n);
    }
}

static sio_code open_direct(cstream *s)
{
    sio_error er;
    sio_code rc;
    er.msg[0] = '\0';
    if (s->ops->open_range)
        rc = s->ops->open_range(s->ctx, s->url, s->pos, s->end, &s->direct,
                                &er);
    else
        rc = s->ops->open(s->ctx, s->url, s->pos, &s->direct, &er);
    if (rc)
        snprintf(s->err, sizeof s->err, "%s", er.msg);
    return rc;
}

static sio_code read_direct(cstream *s, void *buf, size_t cap, size_t *got)
{
    sio_code rc = s->direct->ops->read(s->direct, buf, cap, got);
    if (rc) {
        snprintf(s->err, sizeof s->err, "%s",
                 s->direct->ops->errmsg(s->direct));
        return rc;
    }
    if (s->check) {
        sio_objinfo oi = {UINT64_MAX, ""};
        s->check = 0;
        if (s->direct->ops->info)
            s->direct->ops->info(s->direct, &oi);
        if (strcmp(oi.validator, s->expect) != 0) {
            *got = 0;
            snprintf(s->err, sizeof s->err,
                     "url=%s: object changed while reading (cached %s, "
                     "store %s)",
                     s->url, s->expect, oi.validator[0] ? oi.validator
                                                        : "(none)");
            return SIO_ERR_CHANGED;
        }
    }
    s->pos += *got;
    count(s, *got);
    return SIO_OK;
}

/* A read of e failed its check at block blk (or its bytes could not be
 * read: damaged storage): drop the entry, count it, say so (c->mu held).
 * A reader that comes later fills it again from the store. */
static void corrupt(sio_cache *c, entry *e, uint64_t blk)
{
    atomic_fetch_add(&c->corrupt, 1);
    SIO_LOG(&c->log, SIO_LOG_WARN,
            "event=cache_corrupt url=%s block=%" PRIu64 " offset=%" PRIu64
            " entry=%s", e->url, blk, blk * CACHE_BLOCK, e->id);
    drop(c, e);
}

/* Entry bytes at s->pos into buf (at most cap, below have), checked: the
 * bytes read, or 0 when the entry failed (dropped: the caller goes to the
 * store). Whole blocks go straight into buf; a read that starts inside a
 * block or is shorter than one goes through s->blk. */
static size_t read_entry(cstream *s, entry *e, uint64_t have, void *buf,
                         size_t cap)
{
    sio_cache *c = s->c;
    uint64_t bs = s->pos - s->pos % CACHE_BLOCK, bad = s->pos / CACHE_BLOCK;
    uint64_t be = bs + CACHE_BLOCK < have ? bs + CACHE_BLOCK : have;
    int io = 0, damaged = 0;
    if (s->pos == bs && cap >= be - bs) {
        size_t n = cap;
        if (n > have - s->pos)
            n = (size_t)(have - s->pos);
        if (s->pos + n != e->size)
            n -= n % CACHE_BLOCK;
        io = pread_full(e->fd, buf, n, s->pos) != 0;
        damaged = !io && check_range(e->fd, e->sfd, e->size, s->pos, buf, n,
                                     NULL, NULL, NULL, &bad);
        if (!io && !damaged)
            return n;
    } else {
        if (!s->blk_len || s->blk_at != bs) {
            s->blk_len = 0;
            io = pread_full(e->fd, s->blk, (size_t)(be - bs), bs) != 0;
            damaged = !io && check_range(e->fd, e->sfd, e->size, bs, s->blk,
                                         (size_t)(be - bs), NULL, NULL, NULL,
                                         &bad);
            if (!io && !damaged) {
                s->blk_at = bs;
                s->blk_len = be - bs;
            }
        }
        if (s->blk_len) {
            size_t n = (size_t)(be - s->pos);
            if (n > cap)
                n = cap;
            memcpy(buf, s->blk + (s->pos - bs), n);
            return n;
        }
    }
    pthread_mutex_lock(&c->mu);
    snprintf(s->expect, sizeof s->expect, "%s", e->validator);
    if (io) {
        /* The cache's storage failed (a short or failed read): the store
         * has the bytes. */
        atomic_fetch_add(&c->write_errors, 1);
        drop(c, e);
    } else {
        corrupt(c, e, bad);
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static sio_code cs_read(sio_stream *st, void *buf, size_t cap, size_t *got)
{
    cstream *s = (cstream *)st;
    sio_cache *c = s->c;
    *got = 0;
    if (s->pos >= s->end || cap == 0)
        return SIO_OK;
    if (cap > s->end - s->pos)
        cap = (size_t)(s->end - s->pos);
    if (s->direct)
        return read_direct(s, buf, cap, got);
    for (;;) {
        entry *e = s->e;
        uint64_t have = atomic_load(&e->have);
        if (s->pos < have) {
            size_t n = read_entry(s, e, have, buf, cap);
            if (n == 0)
                break; /* dropped: the store from here */
            s->pos += n;
            *got = n;
            count(s, *got);
            return SIO_OK;
        }
        pthread_mutex_lock(&c->mu);
        while (e->state == E_FILLING && e->in_table && !c->stopping &&
               atomic_load(&e->have) <= s->pos)
            pthread_cond_wait(&e->cv, &c->mu);
        if (atomic_load(&e->have) > s->pos) {
            pthread_mutex_unlock(&c->mu);
            continue;
        }
        if (e->state == E_COMPLETE && e->in_table && s->pos >= e->size) {
            pthread_mutex_unlock(&c->mu);
            return SIO_OK; /* the end */
        }
        /* The fill stopped short of pos: the store from here, checked to
         * be the object the cached bytes came from. */
        snprintf(s->expect, sizeof s->expect, "%s", e->validator);
        pthread_mutex_unlock(&c->mu);
        break;
    }
    s->check = 1;
    sio_code rc = open_direct(s);
    if (rc)
        return rc;
    return read_direct(s, buf, cap, got);
}

static const char *cs_errmsg(const sio_stream *st)
{
    return ((const cstream *)st)->err;
}

static void cs_close(sio_stream *st)
{
    cstream *s = (cstream *)st;
    if (!s)
        return;
    if (s->direct)
        s->direct->ops->close(s->direct);
    if (s->e) {
        pthread_mutex_lock(&s->c->mu);
        unref(s->c, s->e);
        pthread_mutex_unlock(&s->c->mu);
    }
    free(s->url);
    free(s);
}

static void cs_info(sio_stream *st, sio_objinfo *out)
{
    cstream *s = (cstream *)st;
    if (s->direct && s->direct->ops->info) {
        s->direct->ops->info(s->direct, out);
        return;
    }
    out->size = UINT64_MAX;
    out->validator[0] = '\0';
    if (s->e) {
        pthread_mutex_lock(&s->c->mu);
        out->size = s->e->size;
        snprintf(out->validator, sizeof out->validator, "%s",
                 s->e->validator);
        pthread_mutex_unlock(&s->c->mu);
    }
}

static const sio_stream_ops cache_stream_ops = {cs_read, cs_errmsg, cs_close,
                                                cs_info, NULL};

int sio_cache_covers(const char *url)
{
    const sio_backend_ops *ops = sio_backend_for(url);
    return ops && ops->head != NULL;
}

void sio_cache_add_hit_bytes(sio_cache_user *u, uint64_t n)
{
    if (!u || !n)
        return;
    atomic_fetch_add(&u->c->hit_bytes, n);
    atomic_fetch_add(&u->hit_bytes, n);
}

/* A new read-only descriptor of e's data (ext ".data", fd e->fd) or sums
 * (".sums", e->sfd); -1 when it cannot be had (c->mu held). */
static int entry_dup(sio_cache *c, entry *e, int efd, const char *ext)
{
    char p[4096];
    if (efd >= 0)
        return fcntl(efd, F_DUPFD_CLOEXEC, 0);
    if (!c->dir)
        return -1;
    entry_path(c, e, ext, p, sizeof p);
    return open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

/* A complete entry of url that this job has checked: 1, and with fd
 * non-NULL new read-only descriptors of its data in *fd and of its block
 * sums in *sfd (the plan's data plane reads them with pread and checks
 * what it reads with sio_cache_check; the descriptors keep the bytes even
 * if the entry is evicted meanwhile). 0 otherwise. */
int sio_cache_entry_fd(sio_cache_user *u, const char *url, int *fd,
                       int *sfd, int count)
{
    sio_cache *c = u->c;
    int ok = 0;

    if (fd)
        *fd = *sfd = -1;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, url);
    if (e && e->state == E_COMPLETE && e->validator[0] &&
        memo_ok(u, url, e->validator)) {
        if (!fd) {
            ok = 1;
        } else {
            *fd = entry_dup(c, e, e->fd, ".data");
            *sfd = *fd >= 0 ? entry_dup(c, e, e->sfd, ".sums") : -1;
            ok = *sfd >= 0;
            if (!ok && *fd >= 0) {
                close(*fd);
                *fd = -1;
            }
        }
        if (ok && fd)
            e->last_use = now_s();
        if (ok && fd && count) {
            atomic_fetch_add(&c->hits, 1);
            atomic_fetch_add(&u->hits, 1);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* Is fd a descriptor of e's data (c->mu held)? */
static int entry_is(sio_cache *c, entry *e, int fd)
{
    struct stat a, b;
    char p[4096];
    if (fstat(fd, &a) != 0)
        return 0;
    if (e->fd >= 0) {
        if (fstat(e->fd, &b) != 0)
            return 0;
    } else {
        if (!c->dir)
            return 0;
        entry_path(c, e, ".data", p, sizeof p);
        if (stat(p, &b) != 0)
            return 0;
    }
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* A read through a plan descriptor failed its check at block bad: drop
 * the entry when fd is still its data, count, log, say why (msg). */
static sio_code check_failed(sio_cache_user *u, const char *url, int fd,
                             uint64_t bad, char *msg, size_t cap)
{
    sio_cache *c = u->c;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, url);
    if (e && entry_is(c, e, fd)) {
        corrupt(c, e, bad);
    } else {
        /* The entry is gone or replaced already: counted all the same,
         * these bytes were damaged too. */
        atomic_fetch_add(&c->corrupt, 1);
        SIO_LOG(&c->log, SIO_LOG_WARN,
                "event=cache_corrupt url=%s block=%" PRIu64
                " offset=%" PRIu64 " entry=gone", url, bad,
                bad * CACHE_BLOCK);
    }
    pthread_mutex_unlock(&c->mu);
    snprintf(msg, cap,
             "url=%s: shard cache entry block %" PRIu64 " failed its check "
             "(entry dropped: read again from the store)", url, bad);
    return SIO_ERR_CHANGED;
}

sio_code sio_cache_check(sio_cache_user *u, const char *url, int fd, int sfd,
                         uint64_t size, uint64_t off, const void *buf,
                         size_t len, char *msg, size_t cap)
{
    uint64_t bad = 0;
    if (check_range(fd, sfd, size, off, buf, len, NULL, NULL, NULL, &bad) == 0)
        return SIO_OK;
    return check_failed(u, url, fd, bad, msg, cap);
}

static sio_code cache_pread(sio_cache_user *u, const char *url, int fd,
                            int sfd, uint64_t size, void *buf, size_t len,
                            uint64_t off, sio_cache_carry *carry, char *msg,
                            size_t cap, int nowait);

sio_code sio_cache_pread(sio_cache_user *u, const char *url, int fd, int sfd,
                         uint64_t size, void *buf, size_t len, uint64_t off,
                         sio_cache_carry *carry, char *msg, size_t cap)
{
    return cache_pread(u, url, fd, sfd, size, buf, len, off, carry, msg, cap,
                       0);
}

sio_code sio_cache_pread_nowait(sio_cache_user *u, const char *url, int fd,
                                int sfd, uint64_t size, void *buf, size_t len,
                                uint64_t off, sio_cache_carry *carry,
                                char *msg, size_t cap)
{
    return cache_pread(u, url, fd, sfd, size, buf, len, off, carry, msg, cap,
                       1);
}

static sio_code cache_pread(sio_cache_user *u, const char *url, int fd,
                            int sfd, uint64_t size, void *buf, size_t len,
                            uint64_t off, sio_cache_carry *carry, char *msg,
                            size_t cap, int nowait)
{
    unsigned char pre[CACHE_BLOCK], suf[CACHE_BLOCK];
    unsigned char *dst = buf;
    uint64_t bad = off / CACHE_BLOCK;
    if (len == 0)
        return SIO_OK;
    uint64_t end = off + len;
    if (end < off || end > size) {
        if (carry)
            carry->len = 0;
        snprintf(msg, cap, "url=%s: read at %" PRIu64 " past the cache "
                 "entry's %" PRIu64 " bytes", url, off, size);
        return SIO_ERR_CHANGED;
    }
    uint64_t bs = off - off % CACHE_BLOCK;
    if (carry && carry->len && carry->blk == bs / CACHE_BLOCK && off > bs &&
        off - bs < carry->len) {
        /* The first block was checked by the previous read: its bytes
         * come from that copy, the rest starts at a block boundary. */
        size_t n = (size_t)(carry->len - (off - bs));
        if (n > len)
            n = len;
        memcpy(dst, carry->b + (off - bs), n);
        dst += n;
        off += n;
        len -= n;
        if (len == 0)
            return SIO_OK;
        bs = off - off % CACHE_BLOCK;
    }
    if (carry)
        carry->len = 0;
    uint64_t be = end % CACHE_BLOCK ? end - end % CACHE_BLOCK + CACHE_BLOCK
                                    : end;
    if (be > size)
        be = size;
    /* The edges of the first and last blocks come in the same call. */
    struct iovec iov[3] = {{pre, (size_t)(off - bs)},
                           {dst, len},
                           {suf, (size_t)(be - end)}};
    size_t total = iov[0].iov_len + len + iov[2].iov_len, done = 0;
    ssize_t r;
    for (;;) {
        r = nowait ? preadv2(fd, iov, 3, (off_t)bs, RWF_NOWAIT)
                   : preadv(fd, iov, 3, (off_t)bs);
        if (r < 0 && errno == EINTR)
            continue;
        if (nowait && r < 0 &&
            (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS)) {
            nowait = 0; /* not here: read as usual */
            continue;
        }
        break;
    }
    /* Waiting for nothing: bytes not in the page cache (the entry is
     * whole, so a short read is that too) are left to the caller. */
    if (nowait && ((r < 0 && errno == EAGAIN) ||
                   (r >= 0 && (size_t)r < total))) {
        snprintf(msg, cap, "url=%s: read at %" PRIu64 ": not in the page "
                 "cache", url, bs);
        return SIO_ERR_AGAIN;
    }
    if (r > 0)
        done = (size_t)r;
    if (done < total) {
        /* A short read: the rest piece by piece (a file cut short fails). */
        uint64_t at = bs;
        for (int i = 0; i < 3; i++) {
            size_t l = iov[i].iov_len;
            if (done < l &&
                pread_full(fd, (unsigned char *)iov[i].iov_base + done,
                           l - done, at + done) != 0)
                return check_failed(u, url, fd, bad, msg, cap);
            done = done > l ? done - l : 0;
            at += l;
        }
    }
    if (check_range(fd, sfd, size, off, dst, len, pre, suf, carry, &bad) != 0)
        return check_failed(u, url, fd, bad, msg, cap);
    if (carry && end < be) {
        /* Keep the checked last block for a read that goes on from end. */
        uint64_t lb = (end - 1) / CACHE_BLOCK * CACHE_BLOCK;
        size_t head = (size_t)(end - lb), from_pre = 0;
        if (lb < off) { /* the block began before this range */
            from_pre = (size_t)(off - lb);
            memcpy(carry->b, pre + (lb - bs), from_pre);
        }
        memcpy(carry->b + from_pre, dst + (lb + from_pre - off),
               head - from_pre);
        memcpy(carry->b + head, suf, (size_t)(be - end));
        carry->blk = lb / CACHE_BLOCK;
        carry->len = be - lb;
    }
    return SIO_OK;
}

sio_code sio_cache_open(sio_cache_user *u, const sio_backend_ops *ops,
                        void *ctx, const char *url, uint64_t size_hint,
                        uint64_t offset, uint64_t end, sio_stream **out,
                        sio_error *err)
{
    sio_cache *c = u->c;
    sio_objinfo oi = {UINT64_MAX, ""};
    int headed = 0;
    cstream *s;
    entry *e;

    *out = NULL;
    if (!ops->head || !line_safe(url, CACHE_URL_MAX)) {
        if (ops->open_range)
            return ops->open_range(ctx, url, offset, end, out, err);
        return ops->open(ctx, url, offset, out, err);
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->url = strdup(url))) {
        free(s);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    s->base.ops = &cache_stream_ops;
    s->c = c;
    s->u = u;
    s->ops = ops;
    s->ctx = ctx;
    s->pos = offset;
    s->end = end;

    pthread_mutex_lock(&c->mu);
again:
    e = find(c, url);
    /* An entry still learning its validator is being filled from the
     * store right now: nothing to check yet. */
    if (e && e->validator[0] && !memo_ok(u, url, e->validator)) {
        /* This job has not checked the entry: ask the store (0 bytes). */
        sio_error he;
        ref(e);
        pthread_mutex_unlock(&c->mu);
        atomic_fetch_add(&c->validations, 1);
        sio_code hrc = ops->head(ctx, url, &oi, &he);
        headed = hrc == SIO_OK;
        pthread_mutex_lock(&c->mu);
        unref(c, e);
        e = find(c, url);
        if (hrc != SIO_OK) {
            e = NULL; /* the store will say it to the reader */
            oi.size = UINT64_MAX;
        } else {
            e = head_checks(c, u, e, url, &oi);
        }
    }
    if (e) {
        e->last_use = now_s();
        if (e->state == E_COMPLETE) {
            s->hit = 1;
        } else if (offset > atomic_load(&e->have) && e->state == E_FILLING) {
            e = NULL; /* far ahead of the fill: the store directly */
        } else if (e->state == E_PARTIAL) {
            if (offset > atomic_load(&e->have) || start_fill(c, e, ops, ctx))
                e = NULL;
        }
    } else if (offset == 0 && !c->stopping && c->fills < c->max_fills) {
        /* A new entry: its size decides admission. */
        uint64_t size = headed ? oi.size : size_hint;
        uint64_t known = size == UINT64_MAX && !headed ? memo_size(u, url)
                                                       : UINT64_MAX;
        if (known != UINT64_MAX &&
            !admit_possible(c, known, sio_cache_priority(url))) {
            /* A HEAD told this job the size before, and it still does not
             * fit: no request to find that out again (the bytes come from
             * the store directly, as they would after a HEAD). */
            size = UINT64_MAX;
            headed = 1;
            oi.validator[0] = '\0';
        } else if (known != UINT64_MAX) {
            /* A HEAD told this job the size before and it may fit now:
             * taken as a listed size (the fill learns the validator). */
            size = known;
        } else if (size == UINT64_MAX && !headed) {
            sio_error he;
            pthread_mutex_unlock(&c->mu);
            atomic_fetch_add(&c->validations, 1);
            headed = ops->head(ctx, url, &oi, &he) == SIO_OK;
            size = headed ? oi.size : UINT64_MAX;
            if (headed)
                memo_size_set(u, url, size);
            pthread_mutex_lock(&c->mu);
            if (headed && find(c, url)) {
                /* Another reader started the entry meanwhile: follow it
                 * (the HEAD just made is this job's check). */
                memo_set(u, url, oi.validator);
                goto again;
            }
        }
        if (size != UINT64_MAX && (!headed || oi.validator[0]) &&
            !find(c, url) &&
            admit(c, size, sio_cache_priority(url))) {
            e = entry_new(c, url, size);
            if (e && headed)
                snprintf(e->validator, sizeof e->validator, "%s",
                         oi.validator);
            if (!e || insert(c, e) != 0) {
                if (e)
                    entry_free(c, e); /* releases the charge */
                else
                    c->used -= size;
                e = NULL;
            } else if (start_fill(c, e, ops, ctx) != 0) {
                drop(c, e);
                e = NULL;
            } else {
                memo_set(u, url, "");
            }
        } else {
            atomic_fetch_add(&c->rejected, 1);
        }
    } else {
        atomic_fetch_add(&c->rejected, 1);
    }
    if (e) {
        if (entry_open_fd(c, e) != 0) {
            atomic_fetch_add(&c->write_errors, 1);
            e = NULL;
        } else {
            ref(e);
            s->e = e;
        }
    }
    pthread_mutex_unlock(&c->mu);

    atomic_fetch_add(s->hit ? &c->hits : &c->misses, 1);
    atomic_fetch_add(s->hit ? &u->hits : &u->misses, 1);
    if (!s->e) {
        sio_code rc = open_direct(s);
        if (rc) {
            sio_seterr(err, rc, "%s", s->err);
            cs_close(&s->base);
            return rc;
        }
    }
    *out = &s->base;
    return SIO_OK;
}
