/*
 * test_cache.c — the shard cache against a store that counts what it is
 * asked: single-flight, hits and ranged reads from cached bytes, budget and
 * the stable-subset policy, validation (a changed object never served
 * stale), restart reuse, resume of partial entries, broken files left
 * by a crash never served, and integrity: bytes or sums damaged in an
 * entry (running, or while stopped) never served, the entry dropped and
 * filled again; what an entry on disk may claim.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "store/store_int.h"
#include "check.h"
#include "shardio_cache.h"

/* ---- a fake store: fake://NAME, objects in memory -------------------- */

#define NOBJ 64
typedef struct fobj {
    char url[64];
    unsigned char *data;
    size_t len;
    char etag[32];
} fobj;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fobj o[NOBJ];
    int n;
    int gate_closed;         /* reads block while set */
    uint64_t fail_after;     /* a stream fails past this offset (0: never) */
    _Atomic int opens, heads;
    _Atomic uint64_t bytes;  /* body bytes sent */
    _Atomic uint64_t last_open_offset;
} store;

static fobj *obj(const char *url)
{
    for (int i = 0; i < store.n; i++)
        if (strcmp(store.o[i].url, url) == 0)
            return &store.o[i];
    return NULL;
}

static void put_obj(const char *url, size_t len, unsigned seed)
{
    pthread_mutex_lock(&store.mu);
    fobj *o = obj(url);
    if (!o) {
        o = &store.o[store.n++];
        snprintf(o->url, sizeof o->url, "%s", url);
    }
    free(o->data);
    o->data = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        o->data[i] = (unsigned char)((i * 131u + seed * 7u) >> 3);
    o->len = len;
    snprintf(o->etag, sizeof o->etag, "\"e%u-%zu\"", seed, len);
    pthread_mutex_unlock(&store.mu);
}

typedef struct fstream {
    sio_stream base;
    unsigned char *copy; /* the object as it was when opened */
    size_t len;
    char etag[32];
    uint64_t pos, end;
    char err[64];
} fstream;

static sio_code f_read(sio_stream *st, void *buf, size_t cap, size_t *got)
{
    fstream *s = (fstream *)st;
    pthread_mutex_lock(&store.mu);
    while (store.gate_closed)
        pthread_cond_wait(&store.cv, &store.mu);
    uint64_t fail = store.fail_after;
    pthread_mutex_unlock(&store.mu);
    *got = 0;
    if (fail && s->pos >= fail) {
        snprintf(s->err, sizeof s->err, "connection reset");
        return SIO_ERR_IO;
    }
    uint64_t stop = s->end < s->len ? s->end : s->len;
    if (s->pos >= stop)
        return SIO_OK;
    size_t n = cap < 65536 ? cap : 65536;
    if (n > stop - s->pos)
        n = (size_t)(stop - s->pos);
    memcpy(buf, s->copy + s->pos, n);
    s->pos += n;
    *got = n;
    atomic_fetch_add(&store.bytes, n);
    return SIO_OK;
}

static const char *f_errmsg(const sio_stream *st)
{
    return ((const fstream *)st)->err;
}

static void f_close(sio_stream *st)
{
    fstream *s = (fstream *)st;
    free(s->copy);
    free(s);
}

static void f_info(sio_stream *st, sio_objinfo *out)
{
    fstream *s = (fstream *)st;
    out->size = s->len;
    snprintf(out->validator, sizeof out->validator, "%s", s->etag);
}

static const sio_stream_ops f_stream_ops = {f_read, f_errmsg, f_close,
                                            f_info, NULL};

static int f_matches(const char *url)
{
    return strncmp(url, "fake://", 7) == 0;
}

static sio_code f_open_range(void *ctx, const char *url, uint64_t offset,
                             uint64_t end, sio_stream **out, sio_error *err)
{
    (void)ctx;
    pthread_mutex_lock(&store.mu);
    fobj *o = obj(url);
    if (!o) {
        pthread_mutex_unlock(&store.mu);
        return sio_seterr(err, SIO_ERR_NOTFOUND, "no %s", url);
    }
    fstream *s = calloc(1, sizeof *s);
    s->base.ops = &f_stream_ops;
    s->copy = malloc(o->len ? o->len : 1);
    memcpy(s->copy, o->data, o->len);
    s->len = o->len;
    snprintf(s->etag, sizeof s->etag, "%s", o->etag);
    pthread_mutex_unlock(&store.mu);
    s->pos = offset;
    s->end = end;
    atomic_fetch_add(&store.opens, 1);
    atomic_store(&store.last_open_offset, offset);
    *out = &s->base;
    return SIO_OK;
}

static sio_code f_open(void *ctx, const char *url, uint64_t offset,
                       sio_stream **out, sio_error *err)
{
    return f_open_range(ctx, url, offset, UINT64_MAX, out, err);
}

static sio_code f_head(void *ctx, const char *url, sio_objinfo *out,
                       sio_error *err)
{
    (void)ctx;
    atomic_fetch_add(&store.heads, 1);
    pthread_mutex_lock(&store.mu);
    fobj *o = obj(url);
    sio_code rc = SIO_OK;
    if (!o) {
        rc = sio_seterr(err, SIO_ERR_NOTFOUND, "no %s", url);
    } else {
        out->size = o->len;
        snprintf(out->validator, sizeof out->validator, "%s", o->etag);
    }
    pthread_mutex_unlock(&store.mu);
    return rc;
}

static const sio_backend_ops fake_ops = {
    .name = "fake",
    .matches = f_matches,
    .open = f_open,
    .open_range = f_open_range,
    .head = f_head,
};

static void reset_counts(void)
{
    atomic_store(&store.opens, 0);
    atomic_store(&store.heads, 0);
    atomic_store(&store.bytes, 0);
}

/* Read [offset, end) of url through the cache; 1 when the bytes equal the
 * store's current object. */
static int read_check(sio_cache_user *u, const char *url, uint64_t offset,
                      uint64_t end, sio_code *rc_out)
{
    sio_stream *s = NULL;
    sio_error e;
    sio_code rc = sio_cache_open(u, &fake_ops, NULL, url, UINT64_MAX, offset,
                                 end, &s, &e);
    if (rc_out)
        *rc_out = rc;
    if (rc)
        return 0;
    pthread_mutex_lock(&store.mu);
    fobj *o = obj(url);
    size_t len = o->len;
    unsigned char *want = malloc(len ? len : 1);
    memcpy(want, o->data, len);
    pthread_mutex_unlock(&store.mu);
    uint64_t stop = end < len ? end : len;
    unsigned char buf[70000];
    uint64_t pos = offset;
    int ok = 1;
    for (;;) {
        size_t got = 0;
        rc = s->ops->read(s, buf, sizeof buf, &got);
        if (rc) {
            if (rc_out)
                *rc_out = rc;
            ok = 0;
            break;
        }
        if (got == 0)
            break;
        if (pos + got > stop || memcmp(buf, want + pos, got) != 0)
            ok = 0;
        pos += got;
    }
    if (pos != stop)
        ok = 0;
    s->ops->close(s);
    free(want);
    return ok;
}

static void wait_fills(sio_cache *c)
{
    sio_cache_stats st;
    for (int i = 0; i < 2000; i++) {
        sio_cache_get_stats(c, &st);
        if (st.fills == 0)
            return;
        usleep(1000);
    }
}

static char tmpl[] = "/tmp/test_cache.XXXXXX";

static void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[4096];
    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
}

/* Sum of the sizes of the .data files in dir. */
static uint64_t data_on_disk(const char *dir, int *nmeta)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t sum = 0;
    char p[4096];
    *nmeta = 0;
    while (d && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".data") == 0 &&
            stat(p, &st) == 0)
            sum += (uint64_t)st.st_size;
        if (l > 5 && strcmp(de->d_name + l - 5, ".meta") == 0)
            (*nmeta)++;
    }
    if (d)
        closedir(d);
    return sum;
}

static sio_cache *make(const char *dir, uint64_t budget)
{
    sio_cache_config cc = {0};
    sio_cache *c = NULL;
    sio_error e;
    cc.dir = dir;
    cc.budget = budget;
    sio_code rc = sio_cache_create(&cc, &c, &e);
    if (rc)
        fprintf(stderr, "cache: %s\n", e.msg);
    CHECK(rc == SIO_OK);
    return c;
}

/* ---- tests ----------------------------------------------------------- */

typedef struct reader_arg {
    sio_cache_user *u;
    const char *url;
    int ok;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    a->ok = read_check(a->u, a->url, 0, UINT64_MAX, NULL);
    return NULL;
}

static void test_single_flight(const char *dir)
{
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u1, *u2;
    sio_cache_user_create(c, &u1);
    sio_cache_user_create(c, &u2);
    put_obj("fake://sf", 3000000, 1);
    reset_counts();
    /* Four readers (two jobs) at once while the store holds every byte
     * back: one GET. */
    pthread_mutex_lock(&store.mu);
    store.gate_closed = 1;
    pthread_mutex_unlock(&store.mu);
    pthread_t th[4];
    reader_arg ra[4];
    for (int i = 0; i < 4; i++) {
        ra[i].u = i < 2 ? u1 : u2;
        ra[i].url = "fake://sf";
        ra[i].ok = 0;
        pthread_create(&th[i], NULL, reader, &ra[i]);
    }
    usleep(100000);
    pthread_mutex_lock(&store.mu);
    store.gate_closed = 0;
    pthread_cond_broadcast(&store.cv);
    pthread_mutex_unlock(&store.mu);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(ra[i].ok);
    }
    wait_fills(c);
    CHECK_EQ_U64(atomic_load(&store.opens), 1);
    CHECK_EQ_U64(atomic_load(&store.bytes), 3000000);
    /* Hits now, ranges served from cached bytes; u1 filled it (no check),
     * u2 checked it once when it joined the fill. */
    reset_counts();
    CHECK(read_check(u1, "fake://sf", 0, UINT64_MAX, NULL));
    CHECK(read_check(u1, "fake://sf", 1234567, 2000000, NULL));
    CHECK(read_check(u2, "fake://sf", 2999999, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.opens), 0);
    CHECK_EQ_U64(atomic_load(&store.bytes), 0);
    sio_cache_user_stats us;
    sio_cache_user_get_stats(u1, &us);
    CHECK_EQ_U64(us.hits, 2);
    CHECK_EQ_U64(us.hit_bytes, 3000000 + 765433);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.entries, 1);
    CHECK_EQ_U64(st.complete, 1);
    CHECK_EQ_U64(st.store_bytes, 3000000);
    CHECK_EQ_U64(st.used_bytes, 3000000);
    sio_cache_user_destroy(u1);
    sio_cache_user_destroy(u2);
    sio_cache_destroy(c);
    rm_rf(dir);
}

static void test_changed_object_never_stale(const char *dir)
{
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u1, *u2, *u3;
    sio_cache_user_create(c, &u1);
    put_obj("fake://ch", 500000, 2);
    CHECK(read_check(u1, "fake://ch", 0, UINT64_MAX, NULL));
    wait_fills(c);
    /* A second job checks the entry once (HEAD), then trusts it. */
    sio_cache_user_create(c, &u2);
    reset_counts();
    CHECK(read_check(u2, "fake://ch", 0, UINT64_MAX, NULL));
    CHECK(read_check(u2, "fake://ch", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.heads), 1);
    CHECK_EQ_U64(atomic_load(&store.opens), 0);
    /* The object changes (new ETag, same size): a job that has not checked
     * it since gets the new bytes, and the entry is replaced. */
    put_obj("fake://ch", 500000, 3);
    sio_cache_user_create(c, &u3);
    reset_counts();
    CHECK(read_check(u3, "fake://ch", 0, UINT64_MAX, NULL));
    wait_fills(c);
    CHECK_EQ_U64(atomic_load(&store.heads), 1);
    CHECK_EQ_U64(atomic_load(&store.opens), 1);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.stale, 1);
    CHECK_EQ_U64(st.entries, 1);
    /* ...and once refilled it is a hit with the new content. */
    reset_counts();
    CHECK(read_check(u3, "fake://ch", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.opens), 0);
    /* A size change is caught as well. */
    put_obj("fake://ch", 400000, 4);
    sio_cache_user *u4;
    sio_cache_user_create(c, &u4);
    CHECK(read_check(u4, "fake://ch", 0, UINT64_MAX, NULL));
    wait_fills(c);
    sio_cache_user_destroy(u1);
    sio_cache_user_destroy(u2);
    sio_cache_user_destroy(u3);
    sio_cache_user_destroy(u4);
    sio_cache_destroy(c);
    rm_rf(dir);
}

/* Epochs over 10 equal objects with room for 5: after the first epoch the
 * cache holds the 5 of highest priority and keeps them. */
static void test_stable_subset(const char *dir)
{
    enum { N = 10, SZ = 200000 };
    char urls[N][32];
    sio_cache *c = make(dir, 5 * SZ);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    for (int i = 0; i < N; i++) {
        snprintf(urls[i], sizeof urls[i], "fake://ss-%02d", i);
        put_obj(urls[i], SZ, 10 + (unsigned)i);
    }
    uint64_t per_epoch[4];
    for (int ep = 0; ep < 4; ep++) {
        reset_counts();
        for (int k = 0; k < N; k++) {
            /* a different order every epoch */
            int i = (k * 3 + ep * 7) % N;
            CHECK(read_check(u, urls[i], 0, UINT64_MAX, NULL));
            wait_fills(c);
            sio_cache_stats st;
            sio_cache_get_stats(c, &st);
            CHECK(st.used_bytes <= 5 * SZ);
            int nmeta;
            CHECK(data_on_disk(dir, &nmeta) <= 5 * SZ);
        }
        per_epoch[ep] = atomic_load(&store.bytes);
    }
    CHECK_EQ_U64(per_epoch[0], (uint64_t)N * SZ);
    for (int ep = 1; ep < 4; ep++)
        CHECK_EQ_U64(per_epoch[ep], (uint64_t)(N / 2) * SZ);
    /* The held ones are the five of highest priority. */
    uint64_t pr[N], cut;
    for (int i = 0; i < N; i++)
        pr[i] = sio_cache_priority(urls[i]);
    {
        uint64_t s[N];
        memcpy(s, pr, sizeof s);
        for (int i = 0; i < N; i++)
            for (int j = i + 1; j < N; j++)
                if (s[j] > s[i]) {
                    uint64_t t = s[i];
                    s[i] = s[j];
                    s[j] = t;
                }
        cut = s[N / 2 - 1];
    }
    for (int i = 0; i < N; i++) {
        reset_counts();
        CHECK(read_check(u, urls[i], 0, UINT64_MAX, NULL));
        wait_fills(c);
        CHECK_EQ_U64(atomic_load(&store.bytes), pr[i] >= cut ? 0 : SZ);
    }
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK(st.evictions >= 1);
    CHECK(st.rejected >= 5);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
    rm_rf(dir);
}

static void test_object_larger_than_budget(void)
{
    sio_cache *c = make(NULL, 100000);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    put_obj("fake://big", 300000, 5);
    reset_counts();
    CHECK(read_check(u, "fake://big", 0, UINT64_MAX, NULL));
    CHECK(read_check(u, "fake://big", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.bytes), 600000);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.entries, 0);
    CHECK_EQ_U64(st.used_bytes, 0);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
}

static void test_memory_mode(void)
{
    sio_cache *c = make(NULL, 8 << 20);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    put_obj("fake://mem", 1000000, 6);
    reset_counts();
    CHECK(read_check(u, "fake://mem", 0, UINT64_MAX, NULL));
    wait_fills(c);
    CHECK(read_check(u, "fake://mem", 10, 20, NULL));
    CHECK(read_check(u, "fake://mem", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.bytes), 1000000);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
}

static void test_restart_reuse(const char *dir)
{
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    put_obj("fake://rs-a", 700000, 7);
    put_obj("fake://rs-b", 300000, 8);
    CHECK(read_check(u, "fake://rs-a", 0, UINT64_MAX, NULL));
    CHECK(read_check(u, "fake://rs-b", 0, UINT64_MAX, NULL));
    wait_fills(c);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);

    /* A new process: both entries are there; each is checked once (HEAD)
     * and read from the cache; one changed meanwhile and is refetched. */
    put_obj("fake://rs-b", 300000, 9);
    c = make(dir, 64 << 20);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.entries, 2);
    CHECK_EQ_U64(st.complete, 2);
    sio_cache_user_create(c, &u);
    reset_counts();
    CHECK(read_check(u, "fake://rs-a", 0, UINT64_MAX, NULL));
    CHECK(read_check(u, "fake://rs-b", 0, UINT64_MAX, NULL));
    wait_fills(c);
    CHECK_EQ_U64(atomic_load(&store.heads), 2);
    CHECK_EQ_U64(atomic_load(&store.bytes), 300000);
    CHECK(read_check(u, "fake://rs-b", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.bytes), 300000);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
    rm_rf(dir);
}

/* A fill cut by the store keeps its bytes; a later reader (and a new
 * process) resumes from the byte reached. */
static void test_partial_resume(const char *dir)
{
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u;
    sio_code rc;
    sio_cache_user_create(c, &u);
    put_obj("fake://pr", 900000, 11);
    store.fail_after = 400000;
    CHECK(!read_check(u, "fake://pr", 0, UINT64_MAX, &rc));
    CHECK(rc == SIO_ERR_IO);
    wait_fills(c);
    store.fail_after = 0;
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);

    c = make(dir, 64 << 20);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.entries, 1);
    CHECK_EQ_U64(st.complete, 0);
    CHECK(st.data_bytes >= 400000);
    sio_cache_user_create(c, &u);
    reset_counts();
    CHECK(read_check(u, "fake://pr", 0, UINT64_MAX, NULL));
    wait_fills(c);
    CHECK_EQ_U64(atomic_load(&store.opens), 1);
    CHECK(atomic_load(&store.last_open_offset) >= 400000);
    CHECK_EQ_U64(atomic_load(&store.bytes),
                 900000 - atomic_load(&store.last_open_offset));
    reset_counts();
    CHECK(read_check(u, "fake://pr", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.bytes), 0);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
    rm_rf(dir);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* What a crash can leave (and worse) is removed or cut back, never
 * served. */
static void test_broken_files(const char *dir)
{
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    put_obj("fake://bf-a", 200000, 12);
    put_obj("fake://bf-b", 200000, 13);
    put_obj("fake://bf-c", 200000, 14);
    CHECK(read_check(u, "fake://bf-a", 0, UINT64_MAX, NULL));
    CHECK(read_check(u, "fake://bf-b", 0, UINT64_MAX, NULL));
    CHECK(read_check(u, "fake://bf-c", 0, UINT64_MAX, NULL));
    wait_fills(c);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);

    /* a: its data cut short (complete says 200000): kept as a partial
     * entry of the 24 whole blocks left (98304 bytes), resumed from there;
     * b: its metadata is garbage; c: intact. Plus orphans: data without
     * metadata, a temporary metadata file. */
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[4096], ida[64] = "", idb[64] = "";
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".meta") != 0)
            continue;
        char text[512];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        FILE *f = fopen(p, "r");
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        if (strstr(text, "fake://bf-a"))
            snprintf(ida, sizeof ida, "%.*s", (int)(l - 5), de->d_name);
        if (strstr(text, "fake://bf-b"))
            snprintf(idb, sizeof idb, "%.*s", (int)(l - 5), de->d_name);
    }
    closedir(d);
    CHECK(ida[0] && idb[0]);
    snprintf(p, sizeof p, "%s/%s.data", dir, ida);
    CHECK(truncate(p, 100000) == 0);
    snprintf(p, sizeof p, "%s/%s.meta", dir, idb);
    write_file(p, "shardcast-cache 1\nurl fake://bf-b\nvalidator\n");
    snprintf(p, sizeof p, "%s/0123456789abcdef0123456789abcdef.0000000000000001"
                          ".data", dir);
    write_file(p, "orphan");
    snprintf(p, sizeof p, "%s/0123456789abcdef0123456789abcdef.0000000000000002"
                          ".meta.tmp", dir);
    write_file(p, "half");
    snprintf(p, sizeof p, "%s/keep-me.txt", dir);
    write_file(p, "not ours");

    c = make(dir, 64 << 20);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.entries, 2);
    CHECK_EQ_U64(st.complete, 1);
    int nmeta;
    CHECK_EQ_U64(data_on_disk(dir, &nmeta), 200000 + 98304);
    CHECK_EQ_U64(nmeta, 2);
    CHECK(access(p, F_OK) == 0);
    sio_cache_user_create(c, &u);
    reset_counts();
    CHECK(read_check(u, "fake://bf-a", 0, UINT64_MAX, NULL));
    CHECK(read_check(u, "fake://bf-b", 0, UINT64_MAX, NULL));
    CHECK(read_check(u, "fake://bf-c", 0, UINT64_MAX, NULL));
    wait_fills(c);
    CHECK_EQ_U64(atomic_load(&store.bytes), 200000 + (200000 - 98304));
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
    unlink(p);
    rm_rf(dir);
}

/* A lowered budget at start-up evicts down to it. */
static void test_budget_lowered(const char *dir)
{
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u;
    char url[32];
    sio_cache_user_create(c, &u);
    for (int i = 0; i < 6; i++) {
        snprintf(url, sizeof url, "fake://bl-%d", i);
        put_obj(url, 100000, 20 + (unsigned)i);
        CHECK(read_check(u, url, 0, UINT64_MAX, NULL));
        wait_fills(c);
    }
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
    c = make(dir, 250000);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.entries, 2);
    CHECK(st.used_bytes <= 250000);
    int nmeta;
    CHECK(data_on_disk(dir, &nmeta) <= 250000);
    sio_cache_destroy(c);
    rm_rf(dir);
}

static void test_config_bounds(void)
{
    sio_cache_config cc = {0};
    sio_cache *c = NULL;
    CHECK(sio_cache_create(&cc, &c, NULL) == SIO_ERR_INVALID);
    cc.budget = SIO_CACHE_BYTES_MAX + 1;
    CHECK(sio_cache_create(&cc, &c, NULL) == SIO_ERR_INVALID);
    cc.budget = 1;
    cc.max_fills = SIO_CACHE_FILLS_MAX + 1;
    CHECK(sio_cache_create(&cc, &c, NULL) == SIO_ERR_INVALID);
    CHECK(c == NULL);
    CHECK(sio_cache_covers("s3://b/k.tar"));
    CHECK(sio_cache_covers("https://h/k.tar"));
    CHECK(!sio_cache_covers("/data/k.tar"));
}

/* ---- integrity: block sums ------------------------------------------ */

/* The path of url's entry file ext (".data", ".sums") in dir. */
static int entry_file(const char *dir, const char *url, const char *ext,
                      char *out, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int found = 0;
    while (d && !found && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        char p[4096], text[512];
        if (l < 6 || strcmp(de->d_name + l - 5, ".meta") != 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        FILE *f = fopen(p, "r");
        size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
        if (f)
            fclose(f);
        text[n] = '\0';
        char want[128];
        snprintf(want, sizeof want, "\nurl %s\n", url);
        if (strstr(text, want)) {
            snprintf(out, cap, "%s/%.*s%s", dir, (int)(l - 5), de->d_name,
                     ext);
            found = 1;
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* Flip the n bytes at off of a file (or a descriptor when path is NULL). */
static void flip(const char *path, int fd, uint64_t off, size_t n)
{
    unsigned char b[64];
    int own = path != NULL;
    if (own)
        fd = open(path, O_RDWR);
    CHECK(fd >= 0 && n <= sizeof b);
    CHECK(pread(fd, b, n, (off_t)off) == (ssize_t)n);
    for (size_t i = 0; i < n; i++)
        b[i] ^= 0x5a;
    CHECK(pwrite(fd, b, n, (off_t)off) == (ssize_t)n);
    if (own)
        close(fd);
}

static uint64_t corrupt_count(sio_cache *c)
{
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    return st.corrupt;
}

/* Damaged data or sums are never served: the stream goes on from the
 * store at the same byte, the entry is dropped, counted, and filled again
 * by the next reader; after that the entry serves hits again. Also after
 * a restart (the data is checked when read, not when loaded). */
static void test_corrupt_stream(const char *dir)
{
    char p[4096];
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    put_obj("fake://cr-a", 300000, 21);
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    wait_fills(c);

    /* 64 bytes flipped in the middle of the data. */
    CHECK(entry_file(dir, "fake://cr-a", ".data", p, sizeof p));
    flip(p, -1, 150000, 64);
    reset_counts();
    CHECK(read_check(u, "fake://cr-a", 149990, 150010, NULL));
    CHECK_EQ_U64(corrupt_count(c), 1);
    CHECK(access(p, F_OK) != 0); /* dropped: its files removed */
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL)); /* refill */
    wait_fills(c);
    reset_counts();
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.bytes), 0); /* a hit again */

    /* A whole-object read that meets the damage half-way: the first
     * blocks from the cache, the rest from the store. */
    CHECK(entry_file(dir, "fake://cr-a", ".data", p, sizeof p));
    flip(p, -1, 200000, 1);
    reset_counts();
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(corrupt_count(c), 2);
    CHECK(atomic_load(&store.bytes) < 300000);

    /* A damaged sum is a damaged entry too. */
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    wait_fills(c);
    CHECK(entry_file(dir, "fake://cr-a", ".sums", p, sizeof p));
    flip(p, -1, SIO_CACHE_SUMS_HDR + 4 * 10, 1);
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(corrupt_count(c), 3);
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    wait_fills(c);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);

    /* Damage while stopped: loaded, caught when read. */
    CHECK(entry_file(dir, "fake://cr-a", ".data", p, sizeof p));
    flip(p, -1, 4096 * 5 + 7, 3);
    c = make(dir, 64 << 20);
    sio_cache_user_create(c, &u);
    sio_cache_stats st;
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.complete, 1);
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(corrupt_count(c), 1);
    CHECK(read_check(u, "fake://cr-a", 0, UINT64_MAX, NULL));
    wait_fills(c);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);

    /* A sums header that does not check out: the entry is removed at
     * start-up. */
    CHECK(entry_file(dir, "fake://cr-a", ".sums", p, sizeof p));
    flip(p, -1, 17, 1);
    c = make(dir, 64 << 20);
    sio_cache_get_stats(c, &st);
    CHECK_EQ_U64(st.entries, 0);
    CHECK(access(p, F_OK) != 0);
    sio_cache_destroy(c);
    rm_rf(dir);
}

/* The descriptor of the named memfd ("/memfd:NAME (deleted)") opened
 * last, -1 when none. */
static int find_memfd(const char *name)
{
    int found = -1;
    char want[128];
    snprintf(want, sizeof want, "/memfd:%s (deleted)", name);
    for (int fd = 3; fd < 1024; fd++) {
        char p[64], l[256];
        snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(p, l, sizeof l - 1);
        if (n <= 0)
            continue;
        l[n] = '\0';
        if (strcmp(l, want) == 0)
            found = fd;
    }
    return found;
}

static void test_corrupt_memory(void)
{
    sio_cache *c = make(NULL, 8 << 20);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    put_obj("fake://cr-mem", 100000, 22);
    CHECK(read_check(u, "fake://cr-mem", 0, UINT64_MAX, NULL));
    wait_fills(c);
    int fd = find_memfd("shardcast-cache");
    CHECK(fd >= 0);
    if (fd >= 0)
        flip(NULL, fd, 5000, 64);
    CHECK(read_check(u, "fake://cr-mem", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(corrupt_count(c), 1);
    CHECK(read_check(u, "fake://cr-mem", 0, UINT64_MAX, NULL));
    wait_fills(c);
    reset_counts();
    CHECK(read_check(u, "fake://cr-mem", 0, UINT64_MAX, NULL));
    CHECK_EQ_U64(atomic_load(&store.bytes), 0);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
}

/* The plan's reads of an entry's descriptors: any range, checked with
 * its edge blocks; a damaged block drops the entry. */
static void test_checked_pread(const char *dir)
{
    char msg[256];
    unsigned char buf[20000];
    sio_cache *c = make(dir, 64 << 20);
    sio_cache_user *u;
    sio_cache_user_create(c, &u);
    put_obj("fake://cp", 50000, 23);
    CHECK(read_check(u, "fake://cp", 0, UINT64_MAX, NULL));
    wait_fills(c);
    int fd = -1, sfd = -1;
    CHECK(sio_cache_entry_fd(u, "fake://cp", &fd, &sfd, 0) == 1);
    const unsigned char *want = obj("fake://cp")->data;
    static const uint64_t at[][2] = {{0, 1},     {1, 4095},  {4095, 2},
                                     {4096, 4096}, {100, 19000}, {49999, 1},
                                     {45000, 5000}, {0, 20000}};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        memset(buf, 0, sizeof buf);
        CHECK(sio_cache_pread(u, "fake://cp", fd, sfd, 50000, buf,
                              (size_t)at[i][1], at[i][0], NULL, msg,
                              sizeof msg) == SIO_OK);
        CHECK(memcmp(buf, want + at[i][0], (size_t)at[i][1]) == 0);
        CHECK(sio_cache_check(u, "fake://cp", fd, sfd, 50000, at[i][0],
                              NULL, (size_t)at[i][1], msg,
                              sizeof msg) == SIO_OK);
    }
    CHECK(sio_cache_pread(u, "fake://cp", fd, sfd, 50000, buf, 2, 49999,
                          NULL, msg, sizeof msg) == SIO_ERR_CHANGED);
    /* An extent read in pieces that do not fall on blocks, with the
     * carried block. */
    static sio_cache_carry carry;
    static unsigned char whole[50000];
    for (size_t step = 1000; step <= 13000; step += 3000) {
        memset(&carry, 0, sizeof carry);
        memset(whole, 0, sizeof whole);
        for (uint64_t o = 123; o < 50000; o += step) {
            size_t n = 50000 - o < step ? (size_t)(50000 - o) : step;
            CHECK(sio_cache_pread(u, "fake://cp", fd, sfd, 50000, whole + o,
                                  n, o, &carry, msg, sizeof msg) == SIO_OK);
        }
        CHECK(memcmp(whole + 123, want + 123, 50000 - 123) == 0);
    }
    CHECK_EQ_U64(corrupt_count(c), 0);
    /* One byte outside the range read, inside its last block. */
    char p[4096];
    CHECK(entry_file(dir, "fake://cp", ".data", p, sizeof p));
    flip(p, -1, 12287, 1);
    CHECK(sio_cache_pread(u, "fake://cp", fd, sfd, 50000, buf, 100, 0, NULL,
                          msg, sizeof msg) == SIO_OK);
    CHECK(sio_cache_pread(u, "fake://cp", fd, sfd, 50000, buf, 10, 8200,
                          NULL, msg, sizeof msg) == SIO_ERR_CHANGED);
    CHECK(strstr(msg, "block 2") != NULL);
    CHECK_EQ_U64(corrupt_count(c), 1);
    CHECK(sio_cache_entry_fd(u, "fake://cp", NULL, NULL, 0) == 0);
    close(fd);
    close(sfd);
    sio_cache_user_destroy(u);
    sio_cache_destroy(c);
    rm_rf(dir);
}

/* What an entry on disk may claim (sio_cache_entry_parse). */
static int parse(const char *meta, uint64_t size_in_hdr, uint64_t sums_len,
                 uint64_t data_len, sio_cache_entry_info *in)
{
    unsigned char hdr[SIO_CACHE_SUMS_HDR];
    sio_cache_sums_header(size_in_hdr, hdr);
    return sio_cache_entry_parse(meta, strlen(meta), hdr, sizeof hdr,
                                 sums_len, data_len, in);
}

static void test_entry_parse(void)
{
    static sio_cache_entry_info in;
    const char *ok = "shardcast-cache 2\nurl http://h/a.tar\nvalidator "
                     "\"x\"\nsize 10000\nhave 10000\ncomplete 1\n";
    uint64_t full = SIO_CACHE_SUMS_HDR + 4 * 3;
    CHECK(parse(ok, 10000, full, 10000, &in) == 0);
    CHECK(in.complete && in.have == 10000 && in.size == 10000);
    CHECK(strcmp(in.url, "http://h/a.tar") == 0);
    /* sums or data short: a partial entry of the blocks both cover */
    CHECK(parse(ok, 10000, full - 1, 10000, &in) == 0);
    CHECK(!in.complete && in.have == 8192);
    CHECK(parse(ok, 10000, full, 5000, &in) == 0);
    CHECK(!in.complete && in.have == 4096);
    CHECK(parse(ok, 10000, SIO_CACHE_SUMS_HDR, 10000, &in) == 0);
    CHECK(in.have == 0);
    /* not this object's sums, no sums, data longer than the object */
    CHECK(parse(ok, 10001, full, 10000, &in) == -1);
    CHECK(parse(ok, 10000, 0, 10000, &in) == -1);
    CHECK(parse(ok, 10000, full, 10001, &in) == -1);
    unsigned char hdr[SIO_CACHE_SUMS_HDR];
    sio_cache_sums_header(10000, hdr);
    for (size_t i = 0; i < sizeof hdr; i++) {
        hdr[i] ^= 1;
        CHECK(sio_cache_entry_parse(ok, strlen(ok), hdr, sizeof hdr, full,
                                    10000, &in) == -1);
        hdr[i] ^= 1;
    }
    CHECK(sio_cache_entry_parse(ok, strlen(ok), hdr, 31, full, 10000,
                                &in) == -1);
    /* metadata that is not exactly ours */
    static const char *const bad[] = {
        "shardcast-cache 1\nurl u\nvalidator v\nsize 1\nhave 1\ncomplete 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 1\nhave 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 1\nhave 1\ncomplete 1",
        "shardcast-cache 2\nurl u\nurl u\nvalidator v\nsize 1\nhave 1\n"
        "complete 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize -1\nhave 1\ncomplete 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize  1\nhave 1\ncomplete 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 1\nhave 2\ncomplete 0\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 2\nhave 1\ncomplete 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 1\nhave 1\ncomplete 2\n",
        "shardcast-cache 2\nurl \nvalidator v\nsize 1\nhave 1\ncomplete 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 1\nhave 1\ncomplete 1\n"
        "extra 1\n",
        "shardcast-cache 2\nurl u\tv\nvalidator v\nsize 1\nhave 1\n"
        "complete 1\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 99999999999999999999\n"
        "have 1\ncomplete 0\n",
        "shardcast-cache 2\nurl u\nvalidator v\nsize 1125899906842625\n"
        "have 1\ncomplete 0\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(parse(bad[i], 1, SIO_CACHE_SUMS_HDR + 4, 1, &in) == -1);
    const char *nul = "shardcast-cache 2\nurl u\0x\nvalidator v\nsize 1\n"
                      "have 1\ncomplete 1\n";
    sio_cache_sums_header(1, hdr);
    CHECK(sio_cache_entry_parse(nul, 60, hdr, sizeof hdr,
                                SIO_CACHE_SUMS_HDR + 4, 1, &in) == -1);
}

/* ---- main ------------------------------------------------------------ */

int main(void)
{
    pthread_mutex_init(&store.mu, NULL);
    pthread_cond_init(&store.cv, NULL);
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    test_config_bounds();
    test_single_flight(dir);
    test_changed_object_never_stale(dir);
    test_stable_subset(dir);
    test_object_larger_than_budget();
    test_memory_mode();
    test_restart_reuse(dir);
    test_partial_resume(dir);
    test_broken_files(dir);
    test_budget_lowered(dir);
    test_entry_parse();
    test_corrupt_stream(dir);
    test_corrupt_memory();
    test_checked_pread(dir);
    rm_rf(dir);
    rmdir(dir);
    CHECK_MAIN_END();
}
