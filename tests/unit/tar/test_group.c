/*
 * test_group.c — tar reading and WebDataset grouping (shardio/tar/shard.c) on
 * the generated corpus (tests/tools/mkfixtures.py: GNU, pax and gzip tars,
 * directory keys, multi-dot extensions, long and UTF-8 names, "__*__"
 * members), checked sample by sample against its manifest, and on small
 * fixtures written here.
 *
 * `test_group --upstream` is the conformance test on the upstream
 * webdataset shards in ../shared/testdata/wds (skipped when absent).
 */
#include <stdint.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "tarutil.h"

static sio_io *io;

/* Read every sample of a shard; counts SIO_ERR_SAMPLE in *bad. */
static size_t read_all(const char *path, const sio_sample **keep, size_t max,
                       int *bad, sio_code *final)
{
    sio_shard *sh = NULL;
    sio_error e;
    size_t n = 0;
    *bad = 0;
    *final = sio_shard_open(io, path, 0, NULL, &sh, &e);
    if (*final != SIO_OK) {
        fprintf(stderr, "open %s: %s\n", path, e.msg);
        return 0;
    }
    for (;;) {
        const sio_sample *s = NULL;
        sio_code rc = sio_shard_next(sh, &s);
        if (rc == SIO_ERR_SAMPLE) {
            (*bad)++;
            continue;
        }
        if (rc != SIO_OK) {
            *final = rc;
            break;
        }
        if (!s)
            break;
        if (n < max)
            keep[n] = s;
        else
            sio_sample_unref(s);
        n++;
    }
    sio_shard_close(sh);
    return n;
}

static void release(const sio_sample **v, size_t n, size_t max)
{
    for (size_t i = 0; i < n && i < max; i++)
        sio_sample_unref(v[i]);
}

static void test_split_key(void)
{
    size_t k;
    CHECK(sio_split_key("a/b.c.d", &k) == 0 && k == 3);
    CHECK(sio_split_key("compressed/0001.txt.gz", &k) == 0 && k == 15);
    CHECK(sio_split_key("x.y/z.jpg", &k) == 0 && k == 5); /* dot in dir */
    CHECK(sio_split_key("noext", &k) == -1);
    CHECK(sio_split_key("dir.d/noext", &k) == -1);
    CHECK(sio_split_key(".hidden", &k) == -1);
    CHECK(sio_split_key("d/.hidden", &k) == -1);
}

static void test_sample_tgz(void)
{
    char p[4096];
    const sio_sample *v[128];
    int bad;
    sio_code rc;
    size_t n = read_all(shared_path(p, sizeof p, "testdata/wds/sample.tgz"),
                        v, 128, &bad, &rc);
    CHECK(rc == SIO_OK);
    CHECK_EQ_U64(n, 90);
    CHECK_EQ_U64(bad, 0);
    if (n == 90) {
        CHECK_STR(v[0]->key, "10");
        CHECK_STR(v[89]->key, "99");
        for (size_t i = 0; i < n; i++) {
            char want[8];
            snprintf(want, sizeof want, "%zu", i + 10);
            CHECK_STR(v[i]->key, want);
            CHECK_EQ_U64(v[i]->nfields, 2);
            CHECK_STR(v[i]->fields[0].name, "cls");
            CHECK_STR(v[i]->fields[1].name, "png");
            CHECK_EQ_U64(v[i]->fields[0].len, 1);
            CHECK(v[i]->fields[0].data[0] >= '0' &&
                  v[i]->fields[0].data[0] <= '9');
            CHECK(memcmp(v[i]->fields[1].data, "\x89PNG", 4) == 0);
            CHECK_EQ_U64(v[i]->index_in_shard, i);
        }
        CHECK_EQ_U64(v[0]->fields[1].len, 306);
        CHECK_EQ_U64(v[1]->fields[1].len, 345);
        CHECK(sio_sample_field(v[2], "png") != NULL &&
              sio_sample_field(v[2], "png")->len == 295);
        CHECK(sio_sample_field(v[2], "jpg") == NULL);
    }
    release(v, n, 128);
}

static void test_compressed_tar(void)
{
    char p[4096];
    const sio_sample *v[8];
    int bad;
    sio_code rc;
    size_t n = read_all(
        shared_path(p, sizeof p, "testdata/wds/compressed.tar"), v, 8, &bad,
        &rc);
    CHECK(rc == SIO_OK);
    CHECK_EQ_U64(n, 3);
    if (n == 3) {
        CHECK_STR(v[0]->key, "compressed/0001");
        CHECK_STR(v[1]->key, "compressed/0002");
        CHECK_STR(v[2]->key, "compressed/0003");
        for (int i = 0; i < 3; i++) {
            CHECK_EQ_U64(v[i]->nfields, 1);
            CHECK_STR(v[i]->fields[0].name, "txt.gz");
            CHECK(v[i]->fields[0].data[0] == 0x1f &&
                  v[i]->fields[0].data[1] == 0x8b);
        }
        CHECK_EQ_U64(v[0]->fields[0].len, 35);
        CHECK_EQ_U64(v[2]->fields[0].len, 34);
    }
    release(v, n, 8);
}

static int ishex32(const char *k)
{
    if (strlen(k) != 32)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f')))
            return 0;
    return 1;
}

static void test_testgz_pax(void)
{
    char p[4096];
    static const sio_sample *v[1100];
    int bad;
    sio_code rc;
    uint64_t total = 0;
    size_t n = read_all(shared_path(p, sizeof p, "testdata/wds/testgz.tar"),
                        v, 1100, &bad, &rc);
    CHECK(rc == SIO_OK);
    CHECK_EQ_U64(n, 1000);
    int allhex = 1, allgz = 1, distinct = 1;
    for (size_t i = 0; i < n && i < 1100; i++) {
        allhex &= ishex32(v[i]->key);
        allgz &= v[i]->nfields == 1 &&
                 strcmp(v[i]->fields[0].name, "txt.gz") == 0;
        total += v[i]->bytes;
        /* PaxHeader entries must never become keys */
        CHECK(strstr(v[i]->key, "PaxHeader") == NULL);
    }
    /* distinct keys: sort pointers by key and compare neighbours */
    for (size_t i = 1; i < n && distinct; i++)
        for (size_t j = 0; j < i && distinct; j++)
            if (strcmp(v[i]->key, v[j]->key) == 0)
                distinct = 0;
    CHECK(allhex);
    CHECK(allgz);
    CHECK(distinct);
    CHECK_EQ_U64(total, 836805);
    if (n == 1000) {
        CHECK_STR(v[0]->key, "71671c5e285c455c892fb565330233ba");
        CHECK_EQ_U64(v[0]->fields[0].len, 45);
        CHECK_STR(v[1]->key, "828d49cfaff64355882ec39c611ecb84");
        CHECK_EQ_U64(v[1]->fields[0].len, 987);
    }
    release(v, n, 1100);
}

/* ------------------------------------------------------------------ */
/* The generated corpus against its manifest                           */

static void sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    out[0] = '\0';
    if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
        return;
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static const sio_sample *find_key(const sio_sample **v, size_t n,
                                  const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i]->key, key) == 0)
            return v[i];
    return NULL;
}

#define GEN_MAX 1100

/* One shard: every sample the manifest lists, in order, byte for byte;
 * the members it says are skipped never become a key. Returns the count. */
static size_t check_generated_shard(const char *dir, json_t *shard,
                                    json_t *samples, const sio_sample **v)
{
    const char *file = json_string_value(json_object_get(shard, "file"));
    char path[4096];
    int bad;
    sio_code rc;
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "?");
    size_t n = read_all(path, v, GEN_MAX, &bad, &rc);
    CHECK(rc == SIO_OK);
    CHECK_EQ_U64(bad, 0);
    CHECK_EQ_U64(n, json_integer_value(json_object_get(shard, "samples")));
    size_t i = 0, j;
    json_t *want;
    json_array_foreach(samples, j, want) {
        const char *wshard = json_string_value(json_object_get(want, "shard"));
        if (!wshard || !file || strcmp(wshard, file) != 0)
            continue;
        if (i >= n || i >= GEN_MAX) {
            i++;
            continue;
        }
        const sio_sample *s = v[i];
        json_t *fields = json_object_get(want, "fields"), *f;
        size_t k;
        uint64_t bytes = 0;
        CHECK_STR(s->key, json_string_value(json_object_get(want, "key")));
        CHECK_EQ_U64(s->index_in_shard,
                     json_integer_value(json_object_get(want, "index_in_shard")));
        CHECK_EQ_U64(s->nfields, json_array_size(fields));
        json_array_foreach(fields, k, f) {
            if (k >= s->nfields)
                break;
            char hex[65];
            sha256_hex(s->fields[k].data, s->fields[k].len, hex);
            CHECK_STR(s->fields[k].name,
                      json_string_value(json_object_get(f, "name")));
            CHECK_EQ_U64(s->fields[k].len,
                         json_integer_value(json_object_get(f, "size")));
            CHECK_STR(hex, json_string_value(json_object_get(f, "sha256")));
            bytes += s->fields[k].len;
        }
        CHECK_EQ_U64(s->bytes, bytes);
        i++;
    }
    CHECK_EQ_U64(i, n);
    json_t *skipped = json_object_get(shard, "skipped"), *m;
    json_array_foreach(skipped, j, m) {
        const char *name = json_string_value(json_object_get(m, "member"));
        size_t keylen;
        char key[1024];
        /* neither the member nor what its key would be is a sample key */
        snprintf(key, sizeof key, "%s", name ? name : "");
        if (sio_split_key(key, &keylen) == 0)
            key[keylen] = '\0';
        for (size_t x = 0; x < n && x < GEN_MAX; x++) {
            CHECK(strcmp(v[x]->key, name ? name : "") != 0);
            CHECK(strcmp(v[x]->key, key) != 0);
        }
    }
    for (size_t x = 0; x < n && x < GEN_MAX; x++)
        CHECK(strstr(v[x]->key, "PaxHeader") == NULL &&
              strstr(v[x]->key, "@LongLink") == NULL);
    return n;
}

static void test_generated_corpus(void)
{
    char dir[2048], path[2100];
    static const sio_sample *v[GEN_MAX];
    json_error_t jerr;
    fixture_path(dir, sizeof dir, "wds");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_t *man = json_load_file(path, 0, &jerr);
    CHECK(man != NULL);
    if (!man) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return;
    }
    json_t *shards = json_object_get(man, "shards");
    json_t *samples = json_object_get(man, "samples"), *shard;
    size_t i, total = 0;
    CHECK_EQ_U64(json_array_size(shards), 4);
    json_array_foreach(shards, i, shard) {
        const char *file = json_string_value(json_object_get(shard, "file"));
        size_t n = check_generated_shard(dir, shard, samples, v);
        total += n;
        /* What each flavour is there for, independently of the manifest. */
        if (file && strcmp(file, "gnu-gzip.tgz") == 0) {
            CHECK_EQ_U64(n, 90);
            for (size_t k = 0; k < n; k++) {
                char want[8];
                snprintf(want, sizeof want, "%zu", k + 10);
                CHECK_STR(v[k]->key, want);
                CHECK_EQ_U64(v[k]->nfields, 2);
                CHECK_STR(v[k]->fields[0].name, "cls");
                CHECK_STR(v[k]->fields[1].name, "png");
                CHECK_EQ_U64(v[k]->fields[0].len, 1);
                CHECK(memcmp(v[k]->fields[1].data, "\x89PNG", 4) == 0);
            }
        } else if (file && strcmp(file, "gnu-dirs.tar") == 0) {
            const sio_sample *c = find_key(v, n, "compressed/0001");
            CHECK(c && c->nfields == 1 && strcmp(c->fields[0].name, "txt.gz") == 0 &&
                  c->fields[0].data[0] == 0x1f && c->fields[0].data[1] == 0x8b);
            c = find_key(v, n, "a/b/c");
            CHECK(c && c->nfields == 3 && sio_sample_field(c, "seg.json") &&
                  sio_sample_field(c, "txt")); /* "c.TXT" lowercased */
            CHECK(find_key(v, n, "x.y/z") != NULL);
            CHECK(find_key(v, n, "d/__x__") != NULL);
            int longkey = 0;
            for (size_t k = 0; k < n; k++)
                if (strlen(v[k]->key) > 100 &&
                    sio_sample_field(v[k], "x.seg.json"))
                    longkey = 1; /* a GNU ././@LongLink name */
            CHECK(longkey);
        } else if (file && strcmp(file, "pax.tar") == 0) {
            CHECK_EQ_U64(n, 1000);
            for (size_t k = 0; k < n; k++)
                CHECK(strlen(v[k]->key) == 32 && v[k]->nfields == 1 &&
                      strcmp(v[k]->fields[0].name, "txt.gz") == 0);
        } else if (file && strcmp(file, "pax-names.tar.gz") == 0) {
            CHECK(find_key(v, n, "donn\xc3\xa9" "es/\xc3\xa9t\xc3\xa9") != NULL);
            CHECK(find_key(v, n, "with space/k 1") != NULL);
        }
        release(v, n, GEN_MAX);
    }
    CHECK_EQ_U64(total, json_integer_value(json_object_get(man, "total_samples")));
    CHECK(total > 1000);
    json_decref(man);
}

/* Grouping rules on a fixture written in each tar flavour and filter. */
static void test_rules(const char *filter, const char *format)
{
    char longdir[300];
    memset(longdir, 'd', sizeof longdir - 1);
    longdir[sizeof longdir - 1] = '\0';
    char longname[400];
    snprintf(longname, sizeof longname, "%s/k9.JSON", longdir);
    const tar_member m[] = {
        {"top/", NULL, 0},             /* directory: skipped */
        {"__meta__", "m", 0},          /* top-level metadata: skipped */
        {"README", "no dot", 0},       /* no dot: skipped */
        {"a/k1.jpg", "J1", 0},
        {"a/k1.CLS", "1", 0},          /* extension lowercased */
        {"a/k1.seg.png", "P", 0},      /* multi-dot extension */
        {"k2.txt", "t2", 0},
        {"k2.txt", "dup", 0},          /* repeated field: sample bad */
        {"k2.cls", "2", 0},
        {"k3.txt", "", 0},             /* empty field */
        {"k1.jpg", "other", 0},        /* same key as a/k1? no: other key */
        {"a/k1.jpg", "again", 0},      /* not consecutive: a new sample */
        {longname, "{}", 0},           /* long name (pax/gnu) */
    };
    char path[] = "/tmp/shardcast-test-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    /* ustar cannot hold the long name: leave that member out there. */
    int ustar = strcmp(format, "ustar") == 0;
    size_t nm = sizeof m / sizeof m[0] - (ustar ? 1 : 0);
    CHECK(write_tar(path, m, nm, filter, format) == 0);
    const sio_sample *v[16];
    int bad;
    sio_code rc;
    size_t n = read_all(path, v, 16, &bad, &rc);
    if (ustar) {
        CHECK_EQ_U64(n, 4);
    } else {
        CHECK_EQ_U64(n, 5);
    }
    CHECK(rc == SIO_OK);
    CHECK_EQ_U64(bad, 1);
    if (n >= 4) {
        CHECK_STR(v[0]->key, "a/k1");
        CHECK_EQ_U64(v[0]->nfields, 3);
        CHECK_STR(v[0]->fields[0].name, "jpg");
        CHECK_STR(v[0]->fields[1].name, "cls");
        CHECK_STR(v[0]->fields[2].name, "seg.png");
        CHECK(memcmp(v[0]->fields[0].data, "J1", 2) == 0);
        CHECK_EQ_U64(v[0]->bytes, 4);
        CHECK_STR(v[1]->key, "k3");
        CHECK_EQ_U64(v[1]->fields[0].len, 0);
        CHECK_STR(v[2]->key, "k1");
        CHECK_STR(v[3]->key, "a/k1");
        CHECK(memcmp(v[3]->fields[0].data, "again", 5) == 0);
        /* bad sample k2 still took a position in the shard */
        CHECK_EQ_U64(v[1]->index_in_shard, 2);
    }
    if (n == 5) {
        char wantkey[400];
        snprintf(wantkey, sizeof wantkey, "%s/k9", longdir);
        CHECK_STR(v[4]->key, wantkey);
        CHECK_STR(v[4]->fields[0].name, "json");
    }
    release(v, n, 16);
    unlink(path);
}

/* A truncated shard ends with an error after its good samples. */
static void test_truncated(void)
{
    char big[3000];
    memset(big, 'x', sizeof big);
    const tar_member m[] = {{"s1.bin", big, sizeof big},
                            {"s2.bin", big, sizeof big},
                            {"s3.bin", big, sizeof big}};
    char path[] = "/tmp/shardcast-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_tar(path, m, 3, "none", "pax") == 0);
    CHECK(truncate(path, 512 * 2 + 3000 + 1024 + 100) == 0);
    const sio_sample *v[4];
    int bad;
    sio_code rc;
    size_t n = read_all(path, v, 4, &bad, &rc);
    CHECK(rc == SIO_ERR_FORMAT);
    CHECK(n >= 1 && n <= 2);
    release(v, n, 4);
    /* garbage is a format error, not a crash or an empty shard */
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 2000; i++)
        fputc((i * 7919) & 0xff, f);
    fclose(f);
    n = read_all(path, v, 4, &bad, &rc);
    CHECK(rc == SIO_ERR_FORMAT);
    CHECK_EQ_U64(n, 0);
    release(v, n, 4);
    unlink(path);
}

/* Member and sample size limits make one sample bad, not the shard. */
static void test_limits(void)
{
    char big[5000];
    memset(big, 'y', sizeof big);
    const tar_member m[] = {{"a.bin", "small", 0},
                            {"b.bin", big, sizeof big},
                            {"c.x", big, 2000},
                            {"c.y", big, 2000},
                            {"d.bin", "ok", 0}};
    char path[] = "/tmp/shardcast-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_tar(path, m, 5, "none", "pax") == 0);
    sio_shard_limits lim = {.member_max = 4096, .sample_max = 3000,
                            .fields_max = 8};
    sio_shard *sh = NULL;
    CHECK(sio_shard_open(io, path, 7, &lim, &sh, NULL) == SIO_OK);
    const sio_sample *s = NULL;
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s && strcmp(s->key, "a") == 0);
    CHECK(s && s->shard_index == 7);
    sio_sample_unref(s);
    CHECK(sio_shard_next(sh, &s) == SIO_ERR_SAMPLE); /* b: member_max */
    CHECK(strstr(sio_shard_errmsg(sh), "member_max") != NULL);
    CHECK(sio_shard_next(sh, &s) == SIO_ERR_SAMPLE); /* c: sample_max */
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s && strcmp(s->key, "d") == 0);
    sio_sample_unref(s);
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s == NULL);
    sio_shard_close(sh);
    unlink(path);
}

/* A gzip copy of the file at path, named in gz (path.tar.gz). */
static void gzip_copy(const char *path, char *gz, size_t len)
{
    char cmd[200];
    snprintf(gz, len, "%s.tar.gz", path);
    snprintf(cmd, sizeof cmd, "gzip -c %s > %s", path, gz);
    CHECK(system(cmd) == 0);
}

/* Flip bits of the byte at off in the file at path (damage on disk). */
static void xor_byte(const char *path, long off, unsigned char x)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    unsigned char b;
    CHECK(fseek(f, off, SEEK_SET) == 0);
    CHECK(fread(&b, 1, 1, f) == 1);
    b ^= x;
    CHECK(fseek(f, off, SEEK_SET) == 0);
    CHECK(fwrite(&b, 1, 1, f) == 1);
    fclose(f);
}

/* A header with a bad checksum inside a shard (byte `at` of member
 * `member`'s header xor'd with x): the sample that lost a member is bad
 * (counted), never delivered without it. The plain reader tells whose
 * member it was where the damaged header's name, size and the samples
 * around it agree; libarchive (gzip) says nothing of the header, so both
 * samples around it are bad there. */
static void damaged_at(int member, int at, unsigned char x, const char *want,
                       int want_bad, int gzip)
{
    static char pay[8][600];
    static const char *names[8] = {"a.bin", "a.cls", "b.bin", "b.cls",
                                   "c.bin", "d.bin", "d.cls", "e.bin"};
    tar_member m[8];
    for (int i = 0; i < 8; i++) {
        for (size_t k = 0; k < sizeof pay[i]; k++)
            pay[i][k] = (char)('a' + (k * 7 + (size_t)i) % 26);
        m[i] = (tar_member){names[i], pay[i], sizeof pay[i]};
    }
    char path[] = "/tmp/shardcast-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_tar(path, m, 8, "none", "ustar") == 0);
    /* ustar, 600-byte members: member i's header is at i * 1536. */
    xor_byte(path, (long)member * 1536 + at, x);
    char gz[64] = "";
    if (gzip)
        gzip_copy(path, gz, sizeof gz);
    const sio_sample *v[8];
    int bad;
    sio_code rc;
    size_t n = read_all(gzip ? gz : path, v, 8, &bad, &rc);
    if (!want) {
        CHECK(rc == SIO_ERR_FORMAT);
        CHECK_EQ_U64(n, 0);
        want = "";
    } else {
        CHECK(rc == SIO_OK);
    }
    char got[16] = "";
    for (size_t i = 0; i < n && i < 8; i++) {
        strncat(got, v[i]->key, 1);
        /* every sample delivered is whole: all its fields, all bytes */
        size_t want_fields = strchr("abd", v[i]->key[0]) ? 2 : 1;
        CHECK_EQ_U64(v[i]->nfields, want_fields);
        for (size_t k = 0; k < v[i]->nfields; k++)
            CHECK_EQ_U64(v[i]->fields[k].len, 600);
    }
    if (strcmp(got, want) != 0 || bad != want_bad)
        fprintf(stderr, "damaged member %d at %d (%s): got %s bad %d, want "
                "%s bad %d\n", member, at, gzip ? "gzip" : "plain", got, bad,
                want, want_bad);
    CHECK(strcmp(got, want) == 0);
    CHECK_EQ_U64((uint64_t)bad, (uint64_t)want_bad);
    release(v, n, 8);
    if (gzip)
        unlink(gz);
    unlink(path);
}

/* Byte 140 is in the mtime field: the name and size still read. */
static void damaged_case(int member, const char *want, int want_bad,
                         int gzip)
{
    damaged_at(member, 140, 0x5a, want, want_bad, gzip);
}

/* A reader bounded at a group's indexed end (a seek's gather, a plan's
 * fallback) agrees with the whole read: b.bin's header is damaged, a is
 * whole and its range ends at b.cls's header, past the dropped blocks. */
static void test_damaged_header_bounded(void)
{
    static char pay[4][600];
    static const char *names[4] = {"a.bin", "a.cls", "b.bin", "b.cls"};
    tar_member m[4];
    for (int i = 0; i < 4; i++) {
        memset(pay[i], 'a' + i, sizeof pay[i]);
        m[i] = (tar_member){names[i], pay[i], sizeof pay[i]};
    }
    char path[] = "/tmp/shardcast-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_tar(path, m, 4, "none", "ustar") == 0);
    xor_byte(path, 2 * 1536 + 140, 0x5a);
    sio_shard_at at;
    memset(&at, 0, sizeof at);
    at.offset = 0;
    at.end = 3 * 1536; /* b.cls's header: a's end in the index */
    sio_shard *sh = NULL;
    const sio_sample *s = NULL;
    CHECK(sio_shard_open_at(io, path, 0, NULL, &at, &sh, NULL) == SIO_OK);
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s && strcmp(s->key, "a") == 0);
    CHECK(s && s->nfields == 2);
    sio_sample_unref(s);
    s = NULL;
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s == NULL);
    sio_shard_close(sh);
    /* Unbounded, the same: a whole, b bad. */
    sh = NULL;
    CHECK(sio_shard_open(io, path, 0, NULL, &sh, NULL) == SIO_OK);
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s && strcmp(s->key, "a") == 0);
    sio_sample_unref(s);
    CHECK(sio_shard_next(sh, &s) == SIO_ERR_SAMPLE);
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s == NULL);
    sio_shard_close(sh);
    unlink(path);
}

/* A damaged header whose member's data starts with zeros: the plain
 * reader takes the zero blocks inside the data its size gives for data,
 * not the archive's end, and reads on (libarchive ends the archive there:
 * what follows is lost, the open sample counted bad). */
static void test_damaged_header_zero_data(void)
{
    static char zero_then[2048], pay[600];
    memset(zero_then, 0, 1024);
    memset(zero_then + 1024, 'z', 1024);
    memset(pay, 'p', sizeof pay);
    const tar_member m[] = {{"a.bin", pay, sizeof pay},
                            {"a.cls", pay, sizeof pay},
                            {"b.bin", zero_then, sizeof zero_then},
                            {"b.cls", pay, sizeof pay},
                            {"c.bin", pay, sizeof pay},
                            {"c.cls", pay, sizeof pay}};
    for (int gzip = 0; gzip < 2; gzip++) {
        char path[] = "/tmp/shardcast-test-XXXXXX";
        int fd = mkstemp(path);
        close(fd);
        CHECK(write_tar(path, m, 6, "none", "ustar") == 0);
        /* b.bin's header: after a's two (512 + 1024 each) */
        xor_byte(path, 2 * 1536 + 140, 0x5a);
        char gz[64] = "";
        if (gzip)
            gzip_copy(path, gz, sizeof gz);
        const sio_sample *v[4];
        int bad;
        sio_code rc;
        size_t n = read_all(gzip ? gz : path, v, 4, &bad, &rc);
        CHECK(rc == SIO_OK);
        char got[8] = "";
        for (size_t i = 0; i < n && i < 4; i++) {
            strncat(got, v[i]->key, 1);
            CHECK_EQ_U64(v[i]->nfields, 2);
        }
        /* plain: b lost its .bin (a has one): a and c are whole */
        CHECK(strcmp(got, gzip ? "" : "ac") == 0);
        CHECK_EQ_U64((uint64_t)bad, 1);
        release(v, n, 4);
        if (gzip)
            unlink(gz);
        unlink(path);
    }
}

static void test_damaged_header(void)
{
    /* a.bin, the first header: not a tar (the whole shard fails) */
    damaged_case(0, NULL, 0, 0);
    damaged_case(0, NULL, 0, 1);
    /* The plain reader reads the damaged header's name: b.bin is b's
     * (a has its .bin); a.cls is a's (a has none yet), and b has a .cls of
     * its own, so the header was not b's with a damaged key. */
    damaged_case(2, "acde", 1, 0);
    damaged_case(1, "bcde", 1, 0);
    /* b.cls reads as b's, but c has no .cls: a key of c's damaged into
     * b's cannot be ruled out, so c is bad too; d.cls and e alike. */
    damaged_case(3, "ade", 2, 0);
    damaged_case(6, "abc", 2, 0);
    /* c.bin, a sample of one member: b and d both have a .bin, so it was
     * neither's: c is the bad sample (counted), b and d are whole. */
    damaged_case(4, "abde", 1, 0);
    /* e.bin, the last, alike: d has a .bin */
    damaged_case(7, "abcd", 1, 0);
    /* Where the name cannot be believed, both neighbours are bad:
     * b.bin's key turned into a's ("a.bin": a has a .bin already),
     * b.cls's into c's ("c.cls": b has no .cls, so b may be missing it),
     * a damaged size (the blocks dropped do not match it), a name that
     * is not printable. */
    damaged_at(2, 0, 'b' ^ 'a', "cde", 2, 0);
    damaged_at(3, 0, 'b' ^ 'c', "ade", 2, 0);
    damaged_at(3, 130, 0x01, "ade", 2, 0);
    damaged_at(2, 2, 0x80, "cde", 2, 0);
    /* libarchive (gzip) drops the header unread: both neighbours. */
    damaged_case(2, "cde", 2, 1);  /* b.bin: a or b lost it */
    damaged_case(3, "ade", 2, 1);  /* b.cls: b or c */
    damaged_case(4, "ae", 2, 1);   /* c.bin: b, c and d */
    damaged_case(6, "abc", 2, 1);  /* d.cls: d or e */
    damaged_case(7, "abc", 1, 1);  /* e.bin, the last: d and e */
    /* The message names the damage. */
    const tar_member m[] = {{"a.bin", "one", 0}, {"b.bin", "two", 0},
                            {"c.bin", "three", 0}};
    char path[] = "/tmp/shardcast-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_tar(path, m, 3, "none", "ustar") == 0);
    xor_byte(path, 1024 + 140, 0x5a); /* b.bin's mtime */
    sio_shard *sh = NULL;
    const sio_sample *s = NULL;
    CHECK(sio_shard_open(io, path, 0, NULL, &sh, NULL) == SIO_OK);
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s && strcmp(s->key, "a") == 0);
    sio_sample_unref(s);
    s = NULL;
    CHECK(sio_shard_next(sh, &s) == SIO_ERR_SAMPLE); /* b, lost */
    CHECK(strstr(sio_shard_errmsg(sh), "key=b: damaged tar header") != NULL);
    CHECK(strstr(sio_shard_errmsg(sh), "only member is lost") != NULL);
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s && strcmp(s->key, "c") == 0);
    sio_sample_unref(s);
    s = NULL;
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s == NULL);
    sio_shard_close(sh);
    /* A name that cannot be read: both neighbours, named as such. */
    xor_byte(path, 1024 + 140, 0x5a);
    xor_byte(path, 1024 + 1, 0x80);
    CHECK(sio_shard_open(io, path, 0, NULL, &sh, NULL) == SIO_OK);
    CHECK(sio_shard_next(sh, &s) == SIO_ERR_SAMPLE);
    CHECK(strstr(sio_shard_errmsg(sh), "key=a: damaged tar header") != NULL);
    CHECK(sio_shard_next(sh, &s) == SIO_ERR_SAMPLE);
    CHECK(strstr(sio_shard_errmsg(sh), "key=c: damaged tar header") != NULL);
    CHECK(sio_shard_next(sh, &s) == SIO_OK && s == NULL);
    sio_shard_close(sh);
    unlink(path);
}

static void test_missing(void)
{
    sio_shard *sh = NULL;
    sio_error e;
    CHECK(sio_shard_open(io, "/nonexistent/x.tar", 0, NULL, &sh, &e) ==
          SIO_ERR_NOTFOUND);
    CHECK(strstr(e.msg, "/nonexistent/x.tar") != NULL);
    CHECK(sh == NULL);
}

/* The conformance test on the upstream shards (../shared/testdata/wds). */
static int run_upstream(void)
{
    char p[4096];
    int rc = conformance_missing(shared_path(p, sizeof p, "testdata/wds"));
    if (rc)
        return rc;
    test_sample_tgz();
    test_compressed_tar();
    test_testgz_pax();
    return 0;
}

int main(int argc, char **argv)
{
    int upstream = check_upstream_arg(argc, argv);
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    if (upstream) {
        int rc = run_upstream();
        if (rc) {
            sio_io_destroy(io);
            return rc;
        }
    } else {
        test_split_key();
        test_generated_corpus();
        test_rules("none", "pax");
        test_rules("gzip", "gnu");
        test_rules("zstd", "pax");
        test_rules("none", "ustar");
        test_truncated();
        test_limits();
        test_damaged_header();
        test_damaged_header_zero_data();
        test_damaged_header_bounded();
        test_missing();
    }
    sio_io_destroy(io);
    CHECK_MAIN_END();
}
