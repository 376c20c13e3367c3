/*
 * test_index_check.c — index files and sidecars are hints: the plausibility
 * rules (sio_index_check, sio_index_parse_for) and what the store does with
 * a forged file under its directory: one that is implausible for the shard
 * or disagrees with a read of its first or last group is never adopted
 * (counted, the file removed); one that passes but disagrees with a later
 * read is dropped and the shard indexed again by reading it.
 *
 * Regression: a sidecar claiming 500,000 groups for a 0.6 MiB shard used to
 * be adopted (RSS 58 -> 405 MiB), one listing half of the groups shifted
 * every sample number after it, and forged offsets broke seeks for good.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "tarutil.h"

#define NG 20
#define PAYLOAD 1500

/* Rules on a parsed index, no file involved. */
static void test_rules(void)
{
    sio_index_group g[3] = {
        {.offset = 0, .end = 2048, .bytes = 1500},
        {.offset = 2048, .end = 4096, .bytes = 1500},
        {.offset = 4096, .end = UINT64_MAX, .bytes = 1500},
    };
    sio_index_file f = {.ngroups = 3, .groups = g};
    sio_error e;
    CHECK(sio_index_check(&f, 10240, &e) == SIO_OK);
    /* the size unknown: never plausible */
    CHECK(sio_index_check(&f, UINT64_MAX, &e) == SIO_ERR_LIMIT);
    CHECK(sio_index_check(&f, 0, &e) == SIO_ERR_LIMIT);
    /* more groups than size/512 */
    CHECK(sio_index_check(&f, 1535, &e) == SIO_ERR_LIMIT);
    /* the last group starts past the end */
    CHECK(sio_index_check(&f, 4096, &e) == SIO_ERR_LIMIT);
    /* the last one's payload does not fit between its start and the end */
    CHECK(sio_index_check(&f, 4096 + 512 + 1499, &e) == SIO_ERR_LIMIT);
    CHECK(sio_index_check(&f, 4096 + 512 + 1500, &e) == SIO_OK);
    /* a gap: a group left out */
    g[1].offset = 2560;
    CHECK(sio_index_check(&f, 10240, &e) == SIO_ERR_LIMIT);
    g[1].offset = 2048;
    /* the last group must reach the tar's end */
    g[2].end = 8192;
    CHECK(sio_index_check(&f, 10240, &e) == SIO_ERR_LIMIT);
    g[2].end = UINT64_MAX;
    /* a payload larger than its group's span */
    g[0].bytes = 1537;
    CHECK(sio_index_check(&f, 10240, &e) == SIO_ERR_LIMIT);
    g[0].bytes = 1536;
    CHECK(sio_index_check(&f, 10240, &e) == SIO_OK);
    /* a compressed shard: only the count, against size/4 */
    f.flags = SIO_INDEX_STREAM_ONLY;
    g[2].offset = 1ull << 40;
    CHECK(sio_index_check(&f, 12, &e) == SIO_OK);
    CHECK(sio_index_check(&f, 11, &e) == SIO_ERR_LIMIT);
    /* an empty index fits any shard */
    f.ngroups = 0;
    f.flags = 0;
    CHECK(sio_index_check(&f, 1, &e) == SIO_OK);
}

/* An index file writer (the format of include/shardio_index.h): group g
 * has key "k%05d" (keyoff shifts the number) and one field "bin". */
static void put(unsigned char **p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        *(*p)++ = (unsigned char)(v >> (8 * i));
}

static uint64_t fnv64(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static unsigned char *index_bytes(uint64_t size, const sio_index_group *g,
                                  uint64_t n, int keyoff, size_t *len)
{
    unsigned char *buf = malloc(64 + (size_t)n * 64), *p = buf;
    memcpy(p, "SCIDX\0\1\0", 8);
    p += 8;
    put(&p, SIO_INDEX_VERSION, 4);
    put(&p, 0, 4);
    put(&p, size, 8);
    put(&p, 0, 8);
    for (uint64_t i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%05d", (int)i + (i == 7 ? keyoff : 0));
        *p++ = 'G';
        put(&p, g[i].offset, 8);
        put(&p, g[i].end, 8);
        put(&p, g[i].bytes, 8);
        put(&p, g[i].flags, 4);
        put(&p, strlen(key), 2);
        put(&p, 1, 2);
        memcpy(p, key, strlen(key));
        p += strlen(key);
        *p++ = 3;
        memcpy(p, "bin", 3);
        p += 3;
        put(&p, g[i].bytes, 8);
    }
    *p++ = 'E';
    put(&p, n, 8);
    uint64_t sum = fnv64(buf, (size_t)(p - buf));
    put(&p, sum, 8);
    *len = (size_t)(p - buf);
    return buf;
}

static void write_file(const char *path, const unsigned char *b, size_t n)
{
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (fp) {
        CHECK(fwrite(b, 1, n, fp) == n);
        fclose(fp);
    }
}

/* The one index file under dir/index (path into out). */
static int find_index_file(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int found = 0;
    while (d && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l > 6 && strcmp(de->d_name + l - 6, ".scidx") == 0) {
            snprintf(out, cap, "%s/%s", dir, de->d_name);
            found++;
        }
    }
    if (d)
        closedir(d);
    return found == 1;
}

typedef struct fixture {
    char dir[64], shard[128], state[128], file[512];
    uint64_t size;
    sio_index_group truth[NG];
    sio_io *io;
} fixture;

static void fixture_make(fixture *fx)
{
    static char payload[PAYLOAD];
    static char names[NG][32];
    tar_member m[NG];
    struct stat st;
    sio_index *x = NULL;
    sio_index_config cfg = {0};
    memset(payload, 'x', sizeof payload);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/shardcast-ixchk-XXXXXX");
    CHECK(mkdtemp(fx->dir) != NULL);
    snprintf(fx->shard, sizeof fx->shard, "%s/shard.tar", fx->dir);
    snprintf(fx->state, sizeof fx->state, "%s/state", fx->dir);
    for (int g = 0; g < NG; g++) {
        snprintf(names[g], sizeof names[g], "k%05d.bin", g);
        m[g] = (tar_member){names[g], payload, PAYLOAD};
    }
    CHECK(write_tar(fx->shard, m, NG, "none", "ustar") == 0);
    CHECK(stat(fx->shard, &st) == 0);
    fx->size = (uint64_t)st.st_size;
    CHECK(sio_io_create(NULL, &fx->io, NULL) == SIO_OK);
    cfg.dir = fx->state;
    CHECK(sio_index_open(&cfg, &x, NULL) == SIO_OK);
    sio_index_entry *e = sio_index_get(x, fx->io, fx->shard, fx->size);
    CHECK(sio_index_build(fx->io, fx->shard, 0, NULL, e, NULL) == SIO_OK);
    for (int g = 0; g < NG; g++)
        CHECK(sio_index_group_get(e, (uint64_t)g, &fx->truth[g]));
    sio_index_close(x);
    CHECK(find_index_file(fx->state, fx->file, sizeof fx->file));
}

/* Put a forged file in place, open the store and get the entry; the
 * counters after. */
static sio_index_entry *load_forged(fixture *fx, const unsigned char *b,
                                    size_t n, sio_index **x,
                                    sio_index_stats *st)
{
    sio_index_config cfg = {.dir = fx->state};
    write_file(fx->file, b, n);
    CHECK(sio_index_open(&cfg, x, NULL) == SIO_OK);
    sio_index_entry *e = sio_index_get(*x, fx->io, fx->shard, fx->size);
    sio_index_vet(e, fx->io, NULL, NULL); /* as a seek does before relying on it */
    sio_index_get_stats(*x, st);
    return e;
}

/* A forged file that must be refused before anything relies on it
 * (implausible: never adopted; first or last group wrong: dropped by
 * sio_index_vet), counted, removed; the store then indexes the shard by
 * reading it and writes the true file. */
static void refused(fixture *fx, const unsigned char *b, size_t n,
                    const char *what)
{
    sio_index *x = NULL;
    sio_index_stats st;
    sio_index_info info;
    struct stat sb;
    sio_index_entry *e = load_forged(fx, b, n, &x, &st);
    fprintf(stderr, "forged index (%s): ", what);
    sio_index_get_info(e, &info);
    CHECK(!info.complete && info.known == 0);
    CHECK_EQ_U64(st.rejected_state, 1);
    CHECK(stat(fx->file, &sb) != 0); /* removed */
    CHECK(sio_index_build(fx->io, fx->shard, 0, NULL, e, NULL) == SIO_OK);
    sio_index_get_info(e, &info);
    CHECK(info.complete && !info.hint && info.known == NG);
    CHECK(stat(fx->file, &sb) == 0); /* the true one */
    sio_index_close(x);
    fprintf(stderr, "refused (%s)\n", st.loaded ? "read" : "plausibility");
}

/* A forged file plausible enough to be adopted: the first read that
 * disagrees drops it; the groups then are the shard's. */
static void dropped_on_read(fixture *fx, const unsigned char *b, size_t n,
                            const char *what)
{
    sio_index *x = NULL;
    sio_index_stats st;
    sio_index_info info;
    sio_index_entry *e = load_forged(fx, b, n, &x, &st);
    fprintf(stderr, "forged index (%s): ", what);
    sio_index_get_info(e, &info);
    CHECK(info.complete && info.hint);
    CHECK_EQ_U64(st.loaded, 1);
    CHECK_EQ_U64(st.rejected_state, 0);
    CHECK(sio_index_build(fx->io, fx->shard, 0, NULL, e, NULL) == SIO_OK);
    sio_index_get_stats(x, &st);
    CHECK_EQ_U64(st.rejected_state, 1);
    CHECK_EQ_U64(st.dropped, 1);
    sio_index_get_info(e, &info);
    CHECK(info.complete && !info.hint && info.known == NG && info.gen == 1);
    for (int g = 0; g < NG; g++) {
        sio_index_group gr;
        CHECK(sio_index_group_get(e, (uint64_t)g, &gr));
        CHECK(memcmp(&gr, &fx->truth[g], sizeof gr) == 0);
    }
    sio_index_close(x);
    /* the file written by that read is the true one: adopted, and a read
     * through confirms it */
    {
        sio_index_config cfg = {.dir = fx->state};
        CHECK(sio_index_open(&cfg, &x, NULL) == SIO_OK);
        e = sio_index_get(x, fx->io, fx->shard, fx->size);
        CHECK(sio_index_build(fx->io, fx->shard, 0, NULL, e, NULL) == SIO_OK);
        sio_index_get_stats(x, &st);
        sio_index_get_info(e, &info);
        CHECK(st.loaded == 1 && st.rejected_state == 0 && !info.hint);
        sio_index_close(x);
    }
    fprintf(stderr, "dropped\n");
}

static void test_forged_files(void)
{
    fixture fx;
    sio_index_group g[NG];
    unsigned char *b;
    size_t n;
    fixture_make(&fx);

    /* The writer here writes what the store writes: adopted. */
    {
        sio_index *x = NULL;
        sio_index_stats st;
        b = index_bytes(fx.size, fx.truth, NG, 0, &n);
        load_forged(&fx, b, n, &x, &st);
        CHECK(st.loaded == 1 && st.rejected_state == 0 && st.invalid == 0);
        sio_index_close(x);
        free(b);
    }

    /* Half the groups, the last one made to reach the tar's end. */
    memcpy(g, fx.truth, sizeof g);
    g[NG / 2 - 1].end = UINT64_MAX;
    b = index_bytes(fx.size, g, NG / 2, 0, &n);
    refused(&fx, b, n, "half the groups");
    free(b);

    /* The second half only: the first group is not where the shard's is. */
    b = index_bytes(fx.size, fx.truth + NG / 2, NG / 2, 0, &n);
    refused(&fx, b, n, "the second half");
    free(b);

    /* Every other group: gaps. */
    for (int i = 0; i < NG / 2; i++) {
        g[i] = fx.truth[2 * i];
        g[i].end = i + 1 < NG / 2 ? fx.truth[2 * i + 2].offset : UINT64_MAX;
    }
    b = index_bytes(fx.size, g, NG / 2, 0, &n);
    refused(&fx, b, n, "every other group, spans widened");
    free(b);

    /* The last group past the shard's end. */
    memcpy(g, fx.truth, sizeof g);
    g[NG - 1].offset = fx.size + 512;
    g[NG - 2].end = g[NG - 1].offset;
    b = index_bytes(fx.size, g, NG, 0, &n);
    refused(&fx, b, n, "offset past the end");
    free(b);

    /* Offsets shifted by a block inside the shard. */
    memcpy(g, fx.truth, sizeof g);
    g[NG - 1].offset += 512;
    g[NG - 2].end += 512;
    b = index_bytes(fx.size, g, NG, 0, &n);
    refused(&fx, b, n, "last offset shifted");
    free(b);

    /* 500,000 groups for a shard of 40 KB: refused from the trailer's
     * count, before the groups are allocated. */
    {
        uint64_t big = 500000;
        sio_index_group *h = calloc(big, sizeof *h);
        for (uint64_t i = 0; i < big; i++) {
            h[i].offset = i * 512;
            h[i].end = i + 1 < big ? (i + 1) * 512 : UINT64_MAX;
            h[i].bytes = 1;
        }
        b = index_bytes(fx.size, h, big, 0, &n);
        sio_index_file f;
        sio_error e;
        CHECK(sio_index_parse_for(b, n, fx.size, &f, &e) == SIO_ERR_LIMIT);
        CHECK(f.groups == NULL && strstr(e.msg, "500000") != NULL);
        refused(&fx, b, n, "500,000 groups");
        free(b);
        free(h);
    }

    /* Plausible, with the right first and last group, but group 7's key
     * or size is another: adopted, dropped by the first read through. */
    b = index_bytes(fx.size, fx.truth, NG, 100, &n);
    dropped_on_read(&fx, b, n, "wrong key");
    free(b);
    memcpy(g, fx.truth, sizeof g);
    g[3].bytes -= 10;
    b = index_bytes(fx.size, g, NG, 0, &n);
    dropped_on_read(&fx, b, n, "wrong size");
    free(b);

    /* The header's shard size is another: stale, not adopted. */
    {
        sio_index *x = NULL;
        sio_index_stats st;
        b = index_bytes(fx.size + 512, fx.truth, NG, 0, &n);
        load_forged(&fx, b, n, &x, &st);
        CHECK(st.loaded == 0 && st.invalid == 1);
        sio_index_close(x);
        free(b);
    }

    /* The shard's size unknown when the entry is made (a local file: a
     * stat gives it at once). */
    {
        sio_index *x = NULL;
        sio_index_config cfg = {.dir = fx.state};
        sio_index_stats st;
        sio_index_info info;
        b = index_bytes(fx.size, fx.truth, NG, 0, &n);
        write_file(fx.file, b, n);
        CHECK(sio_index_open(&cfg, &x, NULL) == SIO_OK);
        sio_index_entry *e = sio_index_get(x, fx.io, fx.shard, UINT64_MAX);
        sio_index_vet(e, fx.io, NULL, NULL);
        sio_index_get_stats(x, &st);
        sio_index_get_info(e, &info);
        CHECK(st.loaded == 1 && info.complete && info.size == fx.size);
        sio_index_close(x);
        free(b);
    }

    sio_io_destroy(fx.io);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx.dir);
    CHECK(system(cmd) == 0);
}

/* A local shard rewritten or replaced after it was indexed
 * (sio_index_refresh): the entry built by reading it is dropped whatever
 * its source, its state file removed, the new size and time taken; a
 * read then indexes the new file; an unchanged file keeps its entry. */
static void test_refresh(void)
{
    static char payload[PAYLOAD];
    static char names[NG + 5][32];
    tar_member m[NG + 5];
    fixture fx;
    sio_index *x = NULL;
    sio_index_config cfg = {0};
    sio_index_info info;
    sio_index_stats st;
    struct stat sb;
    char file[512];
    memset(&fx, 0, sizeof fx);
    memset(payload, 'y', sizeof payload);
    snprintf(fx.dir, sizeof fx.dir, "/tmp/shardcast-ixref-XXXXXX");
    CHECK(mkdtemp(fx.dir) != NULL);
    snprintf(fx.shard, sizeof fx.shard, "%s/shard.tar", fx.dir);
    snprintf(fx.state, sizeof fx.state, "%s/state", fx.dir);
    for (int g = 0; g < NG + 5; g++) {
        snprintf(names[g], sizeof names[g], "r%05d.bin", g);
        m[g] = (tar_member){names[g], payload, PAYLOAD};
    }
    CHECK(write_tar(fx.shard, m, NG, "none", "ustar") == 0);
    CHECK(stat(fx.shard, &sb) == 0);
    CHECK(sio_io_create(NULL, &fx.io, NULL) == SIO_OK);
    cfg.dir = fx.state;
    CHECK(sio_index_open(&cfg, &x, NULL) == SIO_OK);
    sio_index_entry *e = sio_index_get(x, fx.io, fx.shard, (uint64_t)sb.st_size);
    CHECK(sio_index_build(fx.io, fx.shard, 0, NULL, e, NULL) == SIO_OK);
    CHECK(sio_index_refresh(e) == 0); /* unchanged */
    sio_index_get_info(e, &info);
    CHECK(info.complete && info.known == NG && info.gen == 0);
    CHECK(find_index_file(fx.state, file, sizeof file));

    /* replaced by a rename: five samples more */
    {
        char tmp[160];
        snprintf(tmp, sizeof tmp, "%s/shard.tar.new", fx.dir);
        CHECK(write_tar(tmp, m, NG + 5, "none", "ustar") == 0);
        CHECK(rename(tmp, fx.shard) == 0);
    }
    CHECK(stat(fx.shard, &sb) == 0);
    CHECK(sio_index_refresh(e) == 1);
    sio_index_get_info(e, &info);
    CHECK(!info.complete && info.known == 0 && info.gen == 1);
    CHECK_EQ_U64(info.size, (uint64_t)sb.st_size);
    CHECK(stat(file, &sb) != 0); /* the state file is gone */
    sio_index_get_stats(x, &st);
    CHECK_EQ_U64(st.dropped, 1);
    CHECK(sio_index_refresh(e) == 0); /* taken: unchanged now */
    CHECK(sio_index_build(fx.io, fx.shard, 0, NULL, e, NULL) == SIO_OK);
    sio_index_get_info(e, &info);
    CHECK(info.complete && info.known == NG + 5);

    /* a view open across a drop keeps the groups it shows readable (the
     * sanitizer build would see a use after free) and says it is stale */
    sio_index_view v, v2;
    CHECK(sio_index_view_open(e, &v) == 1);
    CHECK(sio_index_view_open(e, &v2) == 1);
    CHECK_EQ_U64(v.n, NG + 5);
    CHECK(sio_index_view_current(e, &v));

    /* rewritten in place, same size: its modification time moves */
    {
        struct timespec ts[2] = {{0, UTIME_OMIT}, {0, 0}};
        CHECK(stat(fx.shard, &sb) == 0);
        ts[1] = sb.st_mtim;
        ts[1].tv_nsec = (ts[1].tv_nsec + 1000) % 1000000000L;
        CHECK(utimensat(AT_FDCWD, fx.shard, ts, 0) == 0);
    }
    CHECK(sio_index_refresh(e) == 1);
    sio_index_get_info(e, &info);
    CHECK(!info.complete && info.known == 0 && info.gen == 2);
    CHECK(!sio_index_view_current(e, &v));
    {
        uint64_t sum = 0;
        for (uint64_t g = 0; g < v.n; g++)
            sum += v.g[g].bytes;
        CHECK_EQ_U64(sum, (uint64_t)(NG + 5) * PAYLOAD);
    }
    sio_index_view_close(e, &v);
    CHECK(v2.g[NG + 4].bytes == PAYLOAD); /* still held by the other view */
    sio_index_view_close(e, &v2);
    CHECK(sio_index_view_open(e, &v) == 0); /* not complete: nothing opened */
    sio_index_view_close(e, &v);
    sio_index_close(x);
    sio_io_destroy(fx.io);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx.dir);
    CHECK(system(cmd) == 0);
    fprintf(stderr, "refresh: ok\n");
}

int main(void)
{
    test_rules();
    test_forged_files();
    test_refresh();
    CHECK_MAIN_END();
}
