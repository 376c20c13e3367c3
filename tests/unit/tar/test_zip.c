/*
 * test_zip.c — zip shards (shardio/tar/shard.c through libarchive's streamable
 * zip reader): the variants that stream give exactly the samples of the
 * same members in a tar; the ones that cannot be streamed fail the shard
 * with a message naming the problem, after the samples before them;
 * every size is bounded by the member/sample limits (huge declared sizes,
 * a deflate bomb); a zip is indexed stream-only and seeks into it agree
 * with streaming; listings take .zip names.
 *
 * The zips are written here byte by byte (so every flag and size can be
 * set or faked); deflate data comes from libarchive's gzip filter with the
 * gzip header and trailer cut off.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_int.h"
#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "tarutil.h"

static sio_io *io;
static char dir[] = "/tmp/shardcast-zip-XXXXXX";

/* Building zips ------------------------------------------------------- */

typedef struct buf {
    unsigned char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->len + n)
            c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p)
            abort();
        b->cap = c;
    }
    if (n)
        memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void put16(buf *b, unsigned v)
{
    unsigned char x[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    put(b, x, 2);
}

static void put32(buf *b, uint32_t v)
{
    put16(b, v & 0xffff);
    put16(b, v >> 16);
}

static void put64(buf *b, uint64_t v)
{
    put32(b, (uint32_t)v);
    put32(b, (uint32_t)(v >> 32));
}

static uint32_t crc32_update(uint32_t crc, const void *data, size_t n)
{
    static uint32_t t[256];
    const unsigned char *p = data;
    if (!t[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* Raw deflate of `reps` copies of data (libarchive's gzip filter minus
 * the gzip header and trailer). */
static void raw_deflate(const void *data, size_t len, size_t reps, buf *out)
{
    buf g = {0};
    struct archive *a = archive_write_new();
    struct archive_entry *e = archive_entry_new();
    size_t cap = len + len / 8 + reps * 1024 + 65536, used = 0;
    g.p = malloc(cap);
    archive_write_add_filter_gzip(a);
    archive_write_set_format_raw(a);
    archive_write_set_bytes_in_last_block(a, 1);
    CHECK(archive_write_open_memory(a, g.p, cap, &used) == ARCHIVE_OK);
    archive_entry_set_pathname(e, "x");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_size(e, (la_int64_t)(len * reps));
    CHECK(archive_write_header(a, e) == ARCHIVE_OK);
    for (size_t r = 0; r < reps; r++)
        CHECK(archive_write_data(a, data, len) == (la_ssize_t)len);
    CHECK(archive_write_close(a) == ARCHIVE_OK);
    archive_write_free(a);
    archive_entry_free(e);
    /* gzip: 10 bytes, then the optional fields the flags announce */
    size_t off = 10;
    CHECK(used > 18 && g.p[0] == 0x1f && g.p[1] == 0x8b);
    unsigned flg = g.p[3];
    if (flg & 4)
        off += 2 + (size_t)(g.p[off] | g.p[off + 1] << 8);
    if (flg & 8)
        off += strlen((char *)g.p + off) + 1;
    if (flg & 16)
        off += strlen((char *)g.p + off) + 1;
    if (flg & 2)
        off += 2;
    put(out, g.p + off, used - 8 - off);
    free(g.p);
}

enum { DD_NONE, DD_SIG, DD_NOSIG };

typedef struct zent {
    const char *name;  /* ends in '/': a directory */
    const void *data;
    size_t len;        /* 0 with data: strlen(data) */
    int method;        /* 0 stored, 8 deflate; others: data as is */
    int dd;            /* DD_*: sizes in a data descriptor after the data */
    int zip64;         /* a zip64 extra field in the local header */
    unsigned flags;    /* more general purpose flags (1: encrypted, ...) */
    int64_t declare;   /* > 0: declare this uncompressed size instead */
    uint32_t crc_xor;  /* corrupt the CRC */
    size_t reps;       /* data repeated this many times (0: once) */
} zent;

/* A zip of the entries: local headers and data in order, then a central
 * directory and its end record (which a streaming reader never needs). */
static void zip_build(buf *z, const zent *v, size_t n)
{
    buf cd = {0};
    for (size_t i = 0; i < n; i++) {
        const zent *e = &v[i];
        size_t len = e->data ? (e->len ? e->len : strlen(e->data)) : 0;
        size_t reps = e->reps ? e->reps : 1;
        uint64_t usize = (uint64_t)len * reps;
        uint32_t crc = 0;
        for (size_t r = 0; r < reps; r++)
            crc = crc32_update(crc, e->data, len);
        crc ^= e->crc_xor;
        buf body = {0};
        if (e->method == 8)
            raw_deflate(e->data, len, reps, &body);
        else
            for (size_t r = 0; r < reps; r++)
                put(&body, e->data, len);
        uint64_t csize = body.len;
        if (e->declare > 0)
            usize = (uint64_t)e->declare;
        unsigned flags = e->flags | (e->dd ? 8u : 0u);
        size_t nl = strlen(e->name);
        uint64_t lofs = z->len;
        /* local header */
        put32(z, 0x04034b50);
        put16(z, e->zip64 ? 45 : 20);
        put16(z, flags);
        put16(z, (unsigned)e->method);
        put16(z, 0);      /* time */
        put16(z, 0x21);   /* date */
        put32(z, e->dd ? 0 : crc);
        if (e->zip64) {
            put32(z, 0xffffffffu);
            put32(z, 0xffffffffu);
        } else {
            put32(z, e->dd ? 0 : (uint32_t)csize);
            put32(z, e->dd ? 0 : (uint32_t)usize);
        }
        put16(z, (unsigned)nl);
        put16(z, e->zip64 ? 20 : 0);
        put(z, e->name, nl);
        if (e->zip64) {
            put16(z, 1);
            put16(z, 16);
            put64(z, e->dd ? 0 : usize);
            put64(z, e->dd ? 0 : csize);
        }
        put(z, body.p, body.len);
        if (e->dd) {
            if (e->dd == DD_SIG)
                put32(z, 0x08074b50);
            put32(z, crc);
            if (e->zip64) {
                put64(z, csize);
                put64(z, usize);
            } else {
                put32(z, (uint32_t)csize);
                put32(z, (uint32_t)usize);
            }
        }
        free(body.p);
        /* central directory header */
        put32(&cd, 0x02014b50);
        put16(&cd, 0x031e); /* made by: Unix */
        put16(&cd, e->zip64 ? 45 : 20);
        put16(&cd, flags);
        put16(&cd, (unsigned)e->method);
        put16(&cd, 0);
        put16(&cd, 0x21);
        put32(&cd, crc);
        put32(&cd, e->zip64 ? 0xffffffffu : (uint32_t)csize);
        put32(&cd, e->zip64 ? 0xffffffffu : (uint32_t)usize);
        put16(&cd, (unsigned)nl);
        put16(&cd, e->zip64 ? 20 : 0);
        put16(&cd, 0);
        put16(&cd, 0);
        put16(&cd, 0);
        put32(&cd, nl && e->name[nl - 1] == '/' ? 0x41ed0010u : 0x81a40000u);
        put32(&cd, (uint32_t)lofs);
        put(&cd, e->name, nl);
        if (e->zip64) {
            put16(&cd, 1);
            put16(&cd, 16);
            put64(&cd, usize);
            put64(&cd, csize);
        }
    }
    uint64_t cdofs = z->len;
    put(z, cd.p, cd.len);
    put32(z, 0x06054b50);
    put16(z, 0);
    put16(z, 0);
    put16(z, (unsigned)(n > 0xffff ? 0xffff : n));
    put16(z, (unsigned)(n > 0xffff ? 0xffff : n));
    put32(z, (uint32_t)cd.len);
    put32(z, (uint32_t)cdofs);
    put16(z, 0);
    free(cd.p);
}

static void write_file(const char *path, const buf *b)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(b->p, 1, b->len, f) == b->len);
    fclose(f);
}

static const char *tmp_path(char *p, size_t n, const char *name)
{
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Reading shards ------------------------------------------------------ */

/* What a shard gave: a digest line per sample or bad sample, the final
 * code and message. */
typedef struct account {
    char *text;     /* one line per result */
    size_t len, cap;
    size_t samples, bad;
    sio_code final;
    char msg[700];
} account;

static void acc_add(account *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void acc_add(account *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    text_vappend(&a->text, &a->len, &a->cap, fmt, ap);
    va_end(ap);
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Read sh to its end into a. */
static void drain_shard(sio_shard *sh, account *a)
{
    for (;;) {
        const sio_sample *s = NULL;
        sio_code rc = sio_shard_next(sh, &s);
        if (rc == SIO_ERR_SAMPLE) {
            a->bad++;
            acc_add(a, "bad\n");
            continue;
        }
        if (rc != SIO_OK) {
            a->final = rc;
            snprintf(a->msg, sizeof a->msg, "%s", sio_shard_errmsg(sh));
            break;
        }
        if (!s)
            break;
        a->samples++;
        acc_add(a, "%s #%llu", s->key, (unsigned long long)s->index_in_shard);
        for (size_t f = 0; f < s->nfields; f++)
            acc_add(a, " %s:%zu:%016llx", s->fields[f].name, s->fields[f].len,
                    (unsigned long long)fnv(s->fields[f].data,
                                            s->fields[f].len));
        acc_add(a, "\n");
        sio_sample_unref(s);
    }
}

static void read_path(const char *path, const sio_shard_limits *lim,
                      account *a)
{
    sio_shard *sh = NULL;
    sio_error e;
    memset(a, 0, sizeof *a);
    acc_add(a, "%s", "");
    a->final = sio_shard_open(io, path, 0, lim, &sh, &e);
    if (a->final) {
        snprintf(a->msg, sizeof a->msg, "%s", e.msg);
        return;
    }
    drain_shard(sh, a);
    sio_shard_close(sh);
}

static void acc_free(account *a)
{
    free(a->text);
    a->text = NULL;
}

/* The tar tap (sio_shard_set_tar_tap, the staging of a zip for a plan):
 * its tar into a buffer. */
static sio_code tap_put(void *ud, const void *p, size_t n)
{
    put(ud, p, n);
    return SIO_OK;
}

/* z read with the tar tap gives what it gives without (a), and the tar the
 * tap wrote, read by the tar reader, gives the same samples and bad
 * samples with the same group numbers: whole when a ended well, else up
 * to where a ended (a sample cut by the failure is lost on both sides). */
static void tap_check(const buf *z, const sio_shard_limits *lim,
                      const account *a)
{
    sio_stream *st = NULL;
    sio_shard *sh = NULL;
    sio_error e;
    buf t = {0};
    account b, c;
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    acc_add(&b, "%s", "");
    acc_add(&c, "%s", "");
    CHECK(sio_stream_memory(z->p, z->len, &st) == SIO_OK);
    if (sio_shard_open_stream(io, st, "mem://z", 0, lim, &sh, &e) == SIO_OK) {
        sio_shard_set_tar_tap(sh, tap_put, &t);
        drain_shard(sh, &b);
        sio_shard_close(sh);
        CHECK(b.final == a->final);
        CHECK_STR(b.text, a->text);
        static const unsigned char none[1];
        CHECK(sio_stream_memory(t.len ? t.p : none, t.len, &st) == SIO_OK);
        sh = NULL;
        c.final = sio_shard_open_stream(io, st, "mem://t", 0, lim, &sh, &e);
        if (c.final == SIO_OK) {
            drain_shard(sh, &c);
            sio_shard_close(sh);
        }
        if (strcmp(c.text, a->text) != 0)
            fprintf(stderr, "the tap's tar differs from the zip (%s / %s; "
                    "tar of %zu bytes, code %d)\n", a->msg, c.msg, t.len,
                    c.final);

        CHECK_STR(c.text, a->text);
        if (a->final == SIO_OK)
            CHECK(c.final == SIO_OK);
    }
    acc_free(&b);
    acc_free(&c);
    free(t.p);
}

static void read_mem(const buf *z, const sio_shard_limits *lim, int force,
                     account *a)
{
    sio_stream *st = NULL;
    sio_shard *sh = NULL;
    sio_error e;
    memset(a, 0, sizeof *a);
    acc_add(a, "%s", "");
    sio_shard_force_libarchive(force);
    CHECK(sio_stream_memory(z->p, z->len, &st) == SIO_OK);
    a->final = sio_shard_open_stream(io, st, "mem://z", 0, lim, &sh, &e);
    if (a->final)
        snprintf(a->msg, sizeof a->msg, "%s", e.msg);
    else {
        drain_shard(sh, a);
        sio_shard_close(sh);
    }
    sio_shard_force_libarchive(0);
    if (!force)
        tap_check(z, lim, a);
}


static int contains(const char *hay, const char *needle)
{
    int ok = strstr(hay, needle) != NULL;
    if (!ok)
        fprintf(stderr, "  \"%s\" not in \"%s\"\n", needle, hay);
    return ok;
}

/* Streamable variants ------------------------------------------------- */

static uint64_t rnd_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* Members of a random WebDataset shard (as tarutil's make_random_shard:
 * 1-3 fields, bad samples with a repeated field, directories, long names,
 * "__*__" metadata, names without an extension). */
typedef struct memberset {
    tar_member m[400];
    char names[400][300];
    size_t n;
} memberset;

static void random_members(memberset *ms, int ngroups)
{
    static char payload[8192];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (char)('a' + (i * 7 + i / 100) % 26);
    ms->n = 0;
    for (int g = 0; g < ngroups && ms->n + 6 < 400; g++) {
        int nf = 1 + (int)(rnd() % 3);
        int bad = rnd() % 11 == 0;
        int longname = rnd() % 7 == 0;
        int r = (int)(rnd() % 12);
        if (r == 0 || r == 1) {
            snprintf(ms->names[ms->n], 300, r ? "dir%d" : "__meta%d__", g);
            ms->m[ms->n].name = ms->names[ms->n];
            ms->m[ms->n].data = r ? NULL : "meta";
            ms->m[ms->n++].len = 0;
        } else if (r == 2) {
            snprintf(ms->names[ms->n], 300, "README%d", g);
            ms->m[ms->n].name = ms->names[ms->n];
            ms->m[ms->n].data = "no extension";
            ms->m[ms->n++].len = 0;
        }
        for (int f = 0; f < nf + bad; f++) {
            const char *ext = f == 0 ? "jpg" : f == 1 ? "Seg.PNG" : "cls";
            if (f == nf)
                ext = "jpg";
            if (longname)
                snprintf(ms->names[ms->n], 300, "%0150d/deep/k%05d.%s", g, g,
                         ext);
            else
                snprintf(ms->names[ms->n], 300, "k%05d.%s", g, ext);
            ms->m[ms->n].name = ms->names[ms->n];
            ms->m[ms->n].data = payload + rnd() % 100;
            ms->m[ms->n++].len = 1 + (size_t)(rnd() % 3000);
        }
    }
}

/* The members as zip entries of one variant. A tar directory "dirN" is a
 * zip directory "dirN/". */
static void members_zip(const memberset *ms, int method, int dd, int zip64,
                        buf *z)
{
    zent *v = calloc(ms->n, sizeof *v);
    char (*dn)[310] = calloc(ms->n, sizeof *dn);
    for (size_t i = 0; i < ms->n; i++) {
        v[i].name = ms->m[i].name;
        v[i].data = ms->m[i].data;
        v[i].len = ms->m[i].len;
        v[i].method = method;
        v[i].dd = dd;
        v[i].zip64 = zip64;
        if (!ms->m[i].data) {
            snprintf(dn[i], sizeof dn[i], "%s/", ms->m[i].name);
            v[i].name = dn[i];
            v[i].method = 0;
            v[i].dd = 0;
        }
    }
    zip_build(z, v, ms->n);
    free(v);
    free(dn);
}

static void test_variants_match_tar(void)
{
    static const struct {
        int method, dd, zip64;
        const char *what;
    } var[] = {
        {0, DD_NONE, 0, "stored"},
        {8, DD_NONE, 0, "deflated"},
        {0, DD_SIG, 0, "stored, data descriptor with signature"},
        {8, DD_SIG, 0, "deflated, data descriptor"},
        {8, DD_NOSIG, 0, "deflated, data descriptor without signature"},
        {0, DD_NONE, 1, "stored, zip64"},
        {8, DD_NONE, 1, "deflated, zip64"},
        {0, DD_SIG, 1, "stored, zip64 data descriptor"},
        {8, DD_SIG, 1, "deflated, zip64 data descriptor"},
    };
    char tp[600], zp[600];
    for (int round = 0; round < 6; round++) {
        memberset *ms = malloc(sizeof *ms);
        random_members(ms, 5 + (int)(rnd() % 60));
        snprintf(tp, sizeof tp, "%s/ref-%d.tar", dir, round);
        CHECK(write_tar(tp, ms->m, ms->n, "none", "pax") == 0);
        account ref;
        read_path(tp, NULL, &ref);
        CHECK(ref.final == SIO_OK);
        CHECK(ref.samples > 0);
        for (size_t k = 0; k < sizeof var / sizeof var[0]; k++) {
            buf z = {0};
            account a, b, c;
            members_zip(ms, var[k].method, var[k].dd, var[k].zip64, &z);
            snprintf(zp, sizeof zp, "%s/v-%d-%zu.zip", dir, round, k);
            write_file(zp, &z);
            read_path(zp, NULL, &a);
            read_mem(&z, NULL, 0, &b);
            read_mem(&z, NULL, 1, &c);
            if (a.final != SIO_OK || strcmp(a.text, ref.text) != 0)
                fprintf(stderr, "variant %s differs from the tar (%s)\n",
                        var[k].what, a.msg);
            CHECK(a.final == SIO_OK);
            CHECK_STR(a.text, ref.text);
            CHECK_EQ_U64(a.bad, ref.bad);
            CHECK(b.final == SIO_OK && strcmp(b.text, ref.text) == 0);
            CHECK(c.final == SIO_OK && strcmp(c.text, ref.text) == 0);
            acc_free(&a);
            acc_free(&b);
            acc_free(&c);
            free(z.p);
        }
        acc_free(&ref);
        free(ms);
    }
}

/* Grouping details: keys, lowercased multi-dot extensions, what is skipped,
 * an empty zip, markers before the first header, UTF-8 names. */
static void test_grouping(void)
{
    buf z = {0};
    account a;
    zent v[] = {
        {.name = "a/"},
        {.name = "a/x.JPG", .data = "1"},
        {.name = "a/x.Seg.Png", .data = "22", .method = 8},
        {.name = "__key__", .data = "meta"},
        {.name = "a/noext", .data = "skipped"},
        {.name = "a/x.cls", .data = "333", .dd = DD_SIG},
        {.name = "b.d/y.txt", .data = "4", .method = 8, .dd = DD_SIG},
        {.name = "b.d/y.txt", .data = "dup"}, /* repeated field: bad */
        {.name = "c/__key__.txt", .data = "5"}, /* not top-level: a key */
        {.name = "dos\\k.jpg", .data = "6"}, /* MS-DOS separators */
    };
    zip_build(&z, v, sizeof v / sizeof v[0]);
    read_mem(&z, NULL, 0, &a);
    CHECK(a.final == SIO_OK);
    CHECK_EQ_U64(a.samples, 3);
    CHECK_EQ_U64(a.bad, 1);
    CHECK(contains(a.text, "a/x #0 jpg:1:"));
    CHECK(contains(a.text, " seg.png:2:"));
    CHECK(contains(a.text, " cls:3:"));
    CHECK(contains(a.text, "bad\nc/__key__ #2 txt:1:"));
    CHECK(contains(a.text, "dos/k #3 jpg:1:"));
    acc_free(&a);
    free(z.p);

    /* An empty zip (only the end record), a zip of directories only. */
    z.p = NULL;
    z.len = z.cap = 0;
    zip_build(&z, NULL, 0);
    CHECK_EQ_U64(z.len, 22);
    read_mem(&z, NULL, 0, &a);
    CHECK(a.final == SIO_OK && a.samples == 0 && a.bad == 0);
    acc_free(&a);
    free(z.p);
    z.p = NULL;
    z.len = z.cap = 0;
    zent dirs[] = {{.name = "d1/"}, {.name = "d1/d2/"}};
    zip_build(&z, dirs, 2);
    read_mem(&z, NULL, 0, &a);
    CHECK(a.final == SIO_OK && a.samples == 0);
    acc_free(&a);

    /* A split-archive marker before the first local header. */
    static const char *const marks[] = {"PK\x07\x08", "PK00"};
    for (int i = 0; i < 2; i++) {
        buf m = {0};
        zent one = {.name = "k.txt", .data = "marked"};
        put(&m, marks[i], 4);
        free(z.p);
        z.p = NULL;
        z.len = z.cap = 0;
        zip_build(&z, &one, 1);
        put(&m, z.p, z.len);
        read_mem(&m, NULL, 0, &a);
        CHECK(a.final == SIO_OK && a.samples == 1);
        acc_free(&a);
        free(m.p);
    }
    free(z.p);

    /* Names: flagged UTF-8 (bit 11) come out as UTF-8 whatever the
     * process locale; unflagged names are raw bytes; a flagged name that is
     * not UTF-8 fails the shard (and the sample still open, z, whose end
     * it would have told). */
    z.p = NULL;
    z.len = z.cap = 0;
    zent u[] = {
        {.name = "\xc3\xbc/cl\xc3\xa9.jpg", .data = "u", .flags = 0x800},
        {.name = "raw\xe9.jpg", .data = "r"},
        {.name = "z.txt", .data = "z"},
        {.name = "bad\xff\xfe.jpg", .data = "b", .flags = 0x800},
    };
    zip_build(&z, u, 4);
    read_mem(&z, NULL, 0, &a);
    CHECK(contains(a.text, "\xc3\xbc/cl\xc3\xa9 #0 jpg:1:"));
    CHECK(contains(a.text, "raw\xe9 #1 jpg:1:"));
    CHECK_EQ_U64(a.samples, 2);
    CHECK(a.final == SIO_ERR_FORMAT);
    CHECK(contains(a.msg, "zip entry name cannot be read"));
    acc_free(&a);
    free(z.p);

    /* A tar whose first member's name starts like a zip is a tar. */
    char tp[600];
    tar_member tm[] = {{"PK\x03\x04name.txt", "tar", 0}};
    CHECK(write_tar(tmp_path(tp, sizeof tp, "pk.tar"), tm, 1, "none",
                    "ustar") == 0);
    read_path(tp, NULL, &a);
    CHECK(a.final == SIO_OK && a.samples == 1);
    CHECK(contains(a.text, "PK\x03\x04name #0 txt:3:"));
    acc_free(&a);
}

/* Variants that cannot be streamed ------------------------------------ */

/* A zip: good sample g0, the entry under test (as key "x"), good g1. */
static void check_refused(const zent *bad, sio_code want, const char *msg,
                          size_t want_samples, const char *what)
{
    buf z = {0};
    account a, b;
    zent v[3] = {{.name = "g0.txt", .data = "good zero"}, *bad,
                 {.name = "g1.txt", .data = "good one"}};
    zip_build(&z, v, 3);
    read_mem(&z, NULL, 0, &a);
    read_mem(&z, NULL, 1, &b);
    if (a.final != want || a.samples != want_samples)
        fprintf(stderr, "%s: code %d (want %d), %zu samples (want %zu): %s\n",
                what, a.final, want, a.samples, want_samples, a.msg);
    CHECK(a.final == want);
    CHECK_EQ_U64(a.samples, want_samples);
    CHECK(contains(a.msg, msg));
    CHECK(contains(a.msg, "url=mem://z: zip entry "));
    CHECK(b.final == a.final && strcmp(b.text, a.text) == 0 &&
          strcmp(b.msg, a.msg) == 0);
    acc_free(&a);
    acc_free(&b);
    free(z.p);
}

static void test_not_streamable(void)
{
    static char big[5000];
    memset(big, 'q', sizeof big);
    /* Encryption: traditional PKWARE (bit 0), WinZip AES (method 99). */
    zent enc = {.name = "x.bin", .data = "ciphertext..", .flags = 1};
    check_refused(&enc, SIO_ERR_UNSUPPORTED,
                  "zip entry x.bin: encrypted: encrypted zip entries cannot "
                  "be read",
                  1, "encrypted");
    zent aes = {.name = "x.bin", .data = "ciphertext..", .flags = 1,
                .method = 99};
    check_refused(&aes, SIO_ERR_UNSUPPORTED, "encrypted", 1, "aes");
    zent encdd = {.name = "x.bin", .data = "ciphertext..", .flags = 1,
                  .dd = DD_SIG, .method = 8};
    check_refused(&encdd, SIO_ERR_UNSUPPORTED, "encrypted", 1,
                  "encrypted, descriptor");
    /* An encrypted field of the open sample: that sample is lost too. */
    zent encg0 = {.name = "g0.bin", .data = "ciphertext..", .flags = 1};
    check_refused(&encg0, SIO_ERR_UNSUPPORTED, "zip entry g0.bin: encrypted",
                  0, "encrypted field");
    /* Stored, size only in a data descriptor without its signature: the
     * end of the data cannot be found. */
    zent nosig = {.name = "x.bin", .data = big, .len = sizeof big,
                  .dd = DD_NOSIG};
    check_refused(&nosig, SIO_ERR_FORMAT,
                  "stored entry whose size is only in a data descriptor", 1,
                  "stored, descriptor without signature");
    /* Compression methods libarchive does not have. */
    zent m9 = {.name = "x.bin", .data = "not really deflate64", .method = 9};
    check_refused(&m9, SIO_ERR_FORMAT,
                  "Unsupported ZIP compression method (9", 1, "deflate64");
    zent m6 = {.name = "x.bin", .data = "imploded?", .method = 6};
    check_refused(&m6, SIO_ERR_FORMAT, "Unsupported ZIP compression method",
                  1, "implode");
    /* Corrupt data. */
    zent crc = {.name = "x.bin", .data = big, .len = 100, .crc_xor = 1};
    check_refused(&crc, SIO_ERR_FORMAT, "ZIP bad CRC", 1, "stored crc");
    zent crcd = {.name = "x.bin", .data = big, .len = 4000, .method = 8,
                 .crc_xor = 1};
    check_refused(&crcd, SIO_ERR_FORMAT, "ZIP bad CRC", 1, "deflated crc");
    zent crcdd = {.name = "x.bin", .data = big, .len = 100, .dd = DD_SIG,
                  .crc_xor = 1};
    /* (a wrong CRC in the descriptor hides the descriptor itself) */
    check_refused(&crcdd, SIO_ERR_FORMAT, "zip entry x.bin", 1,
                  "stored descriptor crc");
    /* Sizes that lie. */
    zent small = {.name = "x.bin", .data = big, .len = 400, .declare = 10};
    check_refused(&small, SIO_ERR_FORMAT,
                  "more data than its declared size of 10 bytes", 1,
                  "stored, declared too small");
    zent smalld = {.name = "x.bin", .data = big, .len = 4000, .method = 8,
                   .declare = 10};
    check_refused(&smalld, SIO_ERR_FORMAT, "zip entry x.bin", 1,
                  "deflated, declared too small");
    zent larged = {.name = "x.bin", .data = big, .len = 400, .method = 8,
                   .declare = 1000};
    check_refused(&larged, SIO_ERR_FORMAT, "zip entry x.bin", 1,
                  "deflated, declared too large");

    /* Strong encryption with an encrypted central directory (bits 0, 6,
     * 13): libarchive stops at the header. */
    {
        buf z = {0};
        account a;
        zent v[2] = {{.name = "g0.txt", .data = "good"},
                     {.name = "x.bin", .data = "????", .flags = 0x2041}};
        zip_build(&z, v, 2);
        read_mem(&z, NULL, 0, &a);
        CHECK(a.final == SIO_ERR_UNSUPPORTED);
        CHECK(contains(a.msg, "zip with encrypted metadata (strong "
                              "encryption): cannot be read"));
        acc_free(&a);
        free(z.p);
    }

    /* Truncated anywhere: an error or fewer samples, never a crash or a
     * hang, and never a sample that is not in the whole zip. */
    {
        buf z = {0};
        account whole;
        zent v[] = {
            {.name = "t0.txt", .data = big, .len = 700},
            {.name = "t1.txt", .data = big, .len = 900, .method = 8},
            {.name = "t2.txt", .data = big, .len = 300, .dd = DD_SIG},
            {.name = "t3.txt", .data = big, .len = 800, .method = 8,
             .dd = DD_SIG},
            {.name = "t4.txt", .data = "end"},
        };
        zip_build(&z, v, 5);
        read_mem(&z, NULL, 0, &whole);
        CHECK(whole.final == SIO_OK && whole.samples == 5);
        size_t full = z.len;
        const unsigned char *cd = memmem(z.p, z.len, "PK\x01\x02", 4);
        size_t cdofs = cd ? (size_t)(cd - z.p) : 0;
        CHECK(cd != NULL);
        int errors = 0;
        for (size_t cut = 0; cut < full; cut++) {
            account a;
            z.len = cut;
            read_mem(&z, NULL, 0, &a);
            CHECK(strncmp(a.text, whole.text, strlen(a.text)) == 0);
            if (a.final != SIO_OK) {
                errors++;
                CHECK(a.msg[0] != '\0');
                if (strstr(a.msg, "without a message"))
                    fprintf(stderr, "cut %zu: %s\n", cut, a.msg);
                CHECK(!strstr(a.msg, "without a message"));
            }
            if (cut == cdofs)
                CHECK(contains(a.msg, "zip data ends without a central "
                                      "directory (truncated?)"));
            /* all five only once the central directory's signature
             * ends the entries */
            CHECK(a.samples < 5 || cut >= cdofs + 4);
            CHECK(a.final != SIO_OK || a.samples == 5 || cut == 0);
            acc_free(&a);
        }
        CHECK(errors > 0);
        acc_free(&whole);
        free(z.p);
    }
}

/* Limits -------------------------------------------------------------- */

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_limits(void)
{
    static char data[300000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 31 + i / 777);
    sio_shard_limits lim = {.member_max = 100000, .sample_max = 250000,
                            .fields_max = 3};
    /* One entry over member_max, sizes known or in a descriptor, stored
     * or deflated: that sample is bad, the shard goes on. */
    for (int k = 0; k < 4; k++) {
        buf z = {0};
        account a;
        zent v[] = {
            {.name = "a.bin", .data = data, .len = 1000},
            {.name = "b.bin", .data = data, .len = 100001,
             .method = k & 1 ? 8 : 0, .dd = k & 2 ? DD_SIG : DD_NONE},
            {.name = "b.cls", .data = "1"},
            {.name = "c.bin", .data = data, .len = 100000,
             .method = k & 1 ? 8 : 0, .dd = k & 2 ? DD_SIG : DD_NONE},
        };
        zip_build(&z, v, 4);
        read_mem(&z, &lim, 0, &a);
        CHECK(a.final == SIO_OK);
        CHECK_EQ_U64(a.samples, 2);
        CHECK_EQ_U64(a.bad, 1);
        CHECK(contains(a.text, "a #0 bin:1000:"));
        CHECK(contains(a.text, "bad\nc #2 bin:100000:"));
        acc_free(&a);
        free(z.p);
    }
    /* sample_max and fields_max with sizes in descriptors. */
    {
        buf z = {0};
        account a;
        zent v[] = {
            {.name = "s.a", .data = data, .len = 90000, .dd = DD_SIG},
            {.name = "s.b", .data = data, .len = 90000, .dd = DD_SIG,
             .method = 8},
            {.name = "s.c", .data = data, .len = 90000, .dd = DD_SIG},
            {.name = "t.a", .data = "1", .dd = DD_SIG},
            {.name = "t.b", .data = "2", .dd = DD_SIG, .method = 8},
            {.name = "t.c", .data = "3", .dd = DD_SIG},
            {.name = "t.d", .data = "4", .dd = DD_SIG},
            {.name = "u.a", .data = data, .len = 80000, .dd = DD_SIG},
            {.name = "u.b", .data = data, .len = 80000, .dd = DD_SIG,
             .method = 8},
            {.name = "u.c", .data = data, .len = 80000, .dd = DD_SIG},
        };
        zip_build(&z, v, sizeof v / sizeof v[0]);
        read_mem(&z, &lim, 0, &a);
        CHECK(a.final == SIO_OK);
        CHECK_EQ_U64(a.bad, 2);
        CHECK_EQ_U64(a.samples, 1);
        CHECK(contains(a.text, "bad\nbad\nu #2 a:80000:"));
        acc_free(&a);
        free(z.p);
    }
    /* A huge declared size (zip64) on a few bytes: over member_max, no
     * allocation; the skip runs into the end of the data. */
    {
        buf z = {0};
        account a;
        zent v[] = {{.name = "a.txt", .data = "ok"},
                    {.name = "h.bin", .data = "tiny", .zip64 = 1,
                     .declare = (int64_t)1 << 62}};
        zip_build(&z, v, 2);
        read_mem(&z, &lim, 0, &a);
        CHECK_EQ_U64(a.samples, 1);
        CHECK(a.final == SIO_ERR_FORMAT || a.bad == 1);
        acc_free(&a);
        free(z.p);
    }
    /* A deflate bomb: 256 MiB of zeros in about 256 KiB, sizes known
     * (zip64) or only in a descriptor. member_max = 1 MiB: the sample is
     * bad, the shard goes on, and memory stays far below the data. */
    {
        static char zeros[1 << 20];
        sio_shard_limits bl = {.member_max = 1 << 20};
        for (int dd = 0; dd < 2; dd++) {
            buf z = {0};
            account a;
            zent v[] = {{.name = "a.txt", .data = "before"},
                        {.name = "b.bin", .data = zeros, .len = sizeof zeros,
                         .reps = 256, .method = 8, .zip64 = 1,
                         .dd = dd ? DD_SIG : DD_NONE},
                        {.name = "c.txt", .data = "after"}};
            zip_build(&z, v, 3);
            CHECK(z.len < (1u << 20));
            long before = max_rss_kb();
            read_mem(&z, &bl, 0, &a);
            long grew = max_rss_kb() - before;
            if (grew > 64 * 1024)
                fprintf(stderr, "bomb (dd=%d): max RSS grew by %ld KiB\n",
                        dd, grew);
            CHECK(grew < 64 * 1024);
            CHECK(a.final == SIO_OK);
            CHECK_EQ_U64(a.samples, 2);
            CHECK_EQ_U64(a.bad, 1);
            CHECK(contains(a.text, "a #0 txt:6:"));
            CHECK(contains(a.text, "bad\nc #2 txt:5:"));
            acc_free(&a);
            free(z.p);
        }
    }
}

/* Many entries: more than 65535 (a zip64 end record in a real zip; the
 * streaming reader never reads it). */
static void test_many(void)
{
    buf z = {0};
    account a;
    size_t n = 70000;
    zent *v = calloc(n, sizeof *v);
    char (*nm)[16] = calloc(n, sizeof *nm);
    for (size_t i = 0; i < n; i++) {
        snprintf(nm[i], sizeof nm[i], "%06zu.%s", i / 2, i % 2 ? "cls" : "txt");
        v[i].name = nm[i];
        v[i].data = nm[i];
    }
    zip_build(&z, v, n);
    read_mem(&z, NULL, 0, &a);
    CHECK(a.final == SIO_OK);
    CHECK_EQ_U64(a.samples, n / 2);
    CHECK(contains(a.text, "034999 #34999 txt:10:"));
    acc_free(&a);
    free(z.p);
    free(v);
    free(nm);
}

/* Indexes and seeks --------------------------------------------------- */

typedef struct yitem {
    uint32_t shard;
    uint64_t group, sum;
} yitem;

static size_t stream_epoch(const sio_shardlist *l, const sio_epoch_config *c,
                           uint64_t from, yitem *y, size_t max)
{
    sio_epoch *ep = NULL;
    sio_error e;
    size_t n = 0;
    if (sio_epoch_open_at(io, l, c, from, &ep, &e) != SIO_OK) {
        fprintf(stderr, "open_at %llu: %s\n", (unsigned long long)from, e.msg);
        CHECK(0);
        return 0;
    }
    for (;;) {
        const sio_sample *s;
        sio_code rc = sio_epoch_next(ep, &s);
        CHECK(rc == SIO_OK);
        if (rc || !s)
            break;
        if (n < max) {
            y[n].shard = s->shard_index;
            y[n].group = s->index_in_shard;
            uint64_t h = fnv(s->key, strlen(s->key));
            for (size_t f = 0; f < s->nfields; f++)
                h ^= fnv(s->fields[f].data, s->fields[f].len) + f;
            y[n].sum = h;
        }
        n++;
        sio_sample_unref(s);
    }
    sio_epoch_close(ep);
    return n;
}

static void test_seek(void)
{
    char sub[600], p[700];
    snprintf(sub, sizeof sub, "%s/seek", dir);
    CHECK(mkdir(sub, 0755) == 0);
    for (int s = 0; s < 6; s++) {
        memberset *ms = malloc(sizeof *ms);
        random_members(ms, 10 + (int)(rnd() % 50));
        if (s % 3 == 2) {
            snprintf(p, sizeof p, "%s/shard-%02d.tar", sub, s);
            CHECK(write_tar(p, ms->m, ms->n, "none", "pax") == 0);
        } else {
            buf z = {0};
            members_zip(ms, s % 2 ? 8 : 0, s > 2 ? DD_SIG : DD_NONE, 0, &z);
            snprintf(p, sizeof p, "%s/shard-%02d.zip", sub, s);
            write_file(p, &z);
            free(z.p);
        }
        free(ms);
    }
    sio_shardlist *l = NULL;
    sio_index *ix = NULL;
    sio_index_config icfg = {0};
    CHECK(sio_shardlist_resolve(io, sub, &l, NULL) == SIO_OK);
    CHECK_EQ_U64(sio_shardlist_count(l), 6);
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);
    yitem *y = malloc(4000 * sizeof *y), *z = malloc(4000 * sizeof *z);
    for (int trial = 0; trial < 3; trial++) {
        sio_epoch_config c = {0};
        c.seed = rnd();
        c.interleave = 1 + (uint32_t)(rnd() % 4);
        c.buffer_samples = 1 + (uint32_t)(rnd() % 40);
        c.read_threads = (uint32_t)(rnd() % 3);
        c.index = ix;
        size_t n = stream_epoch(l, &c, 0, y, 4000);
        CHECK(n > 0);
        for (int k = 0; k < 6; k++) {
            uint64_t at = rnd() % (n + 1);
            size_t m = stream_epoch(l, &c, at, z, 4000);
            CHECK_EQ_U64(m, n - at);
            int same = m == n - at;
            for (size_t i = 0; same && i < m; i++)
                same = y[at + i].shard == z[i].shard &&
                       y[at + i].group == z[i].group &&
                       y[at + i].sum == z[i].sum;
            CHECK(same);
        }
    }
    /* The zip shards are indexed stream-only, the tar byte-addressed. */
    for (size_t i = 0; i < sio_shardlist_count(l); i++) {
        const char *url = sio_shardlist_url(l, i);
        sio_index_entry *e = sio_index_peek(ix, url);
        sio_index_info info;
        CHECK(e != NULL);
        if (!e)
            continue;
        sio_index_get_info(e, &info);
        CHECK(info.complete);
        size_t ul = strlen(url);
        CHECK(info.stream_only == (ul > 4 && !strcmp(url + ul - 4, ".zip")));
    }
    /* A zip is never opened at an offset. */
    {
        sio_shard *sh = NULL;
        sio_error e;
        sio_shard_at at = {.end = UINT64_MAX};
        buf zz = {0};
        zent v[2] = {{.name = "a.txt", .data = "x"},
                     {.name = "b.txt", .data = "y"}};
        zip_build(&zz, v, 2);
        /* the second local header is at 30 + 5 + 1 = 36 */
        at.offset = 36;
        snprintf(p, sizeof p, "%s/at.zip", dir);
        write_file(p, &zz);
        CHECK(sio_shard_open_at(io, p, 0, NULL, &at, &sh, &e) ==
              SIO_ERR_FORMAT);
        CHECK(contains(e.msg, "a zip shard is read from its start only"));
        free(zz.p);
    }
    free(y);
    free(z);
    sio_index_close(ix);
    sio_shardlist_free(l);
}

/*
 * A stored entry of unknown size whose data holds a fake data descriptor
 * and a fake local header (a zip stored in a zip): libarchive's reader
 * ends the entry only at a descriptor with the right CRC, its skip at the
 * first signature. Reading past the group (a seek) must land where reading
 * it does, so both give the same next sample.
 */
static void test_read_past(void)
{
    buf inner = {0}, z = {0};
    /* the inner part: a descriptor-like record, then a local header */
    put(&inner, "payload ", 8);
    put32(&inner, 0x08074b50);
    put32(&inner, 0x12345678);
    put32(&inner, 8);
    put32(&inner, 8);
    zent fake = {.name = "evil.txt", .data = "phantom!"};
    zip_build(&inner, &fake, 1);
    zent v[] = {{.name = "s0.npz", .data = inner.p, .len = inner.len,
                 .dd = DD_SIG},
                {.name = "s1.txt", .data = "the real second sample"}};
    zip_build(&z, v, 2);
    char p[600];
    write_file(tmp_path(p, sizeof p, "nested.zip"), &z);
    account seq, past;
    read_path(p, NULL, &seq);
    CHECK(seq.final == SIO_OK);
    CHECK_EQ_U64(seq.samples, 2);
    CHECK(contains(seq.text, "\ns1 #1 txt:22:"));
    sio_shard *sh = NULL;
    sio_error e;
    sio_shard_at at = {.end = UINT64_MAX, .skip_until = 1};
    memset(&past, 0, sizeof past);
    acc_add(&past, "%s", "");
    CHECK(sio_shard_open_at(io, p, 0, NULL, &at, &sh, &e) == SIO_OK);
    if (sh) {
        drain_shard(sh, &past);
        sio_shard_close(sh);
    }
    CHECK(past.final == SIO_OK);
    CHECK_EQ_U64(past.samples, 1);
    CHECK(contains(seq.text, past.text));
    acc_free(&seq);
    acc_free(&past);
    /* The same entry skipped (no extension): still read to its end. */
    free(z.p);
    z.p = NULL;
    z.len = z.cap = 0;
    v[0].name = "README";
    zip_build(&z, v, 2);
    read_mem(&z, NULL, 0, &seq);
    CHECK(seq.final == SIO_OK);
    CHECK_EQ_U64(seq.samples, 1);
    CHECK(contains(seq.text, "s1 #0 txt:22:"));
    acc_free(&seq);
    free(inner.p);
    free(z.p);
}

/* Listings take .zip names (any case). */
static void test_listing(void)
{
    char sub[600], p[700];
    static const char *const files[] = {"a.tar", "b.zip", "c.ZIP", "d.zipx",
                                        "e.txt", "f.tar.zip", "zip"};
    snprintf(sub, sizeof sub, "%s/list", dir);
    CHECK(mkdir(sub, 0755) == 0);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", sub, files[i]);
        FILE *f = fopen(p, "wb");
        CHECK(f != NULL);
        if (f)
            fclose(f);
    }
    sio_shardlist *l = NULL;
    CHECK(sio_shardlist_resolve(io, sub, &l, NULL) == SIO_OK);
    if (!l)
        return;
    static const char *const want[] = {"a.tar", "b.zip", "c.ZIP",
                                       "f.tar.zip"};
    CHECK_EQ_U64(sio_shardlist_count(l), 4);
    for (size_t i = 0; i < 4 && i < sio_shardlist_count(l); i++) {
        const char *u = sio_shardlist_url(l, i);
        const char *base = strrchr(u, '/');
        CHECK_STR(base ? base + 1 : u, want[i]);
    }
    sio_shardlist_free(l);
}

int main(void)
{
    char cmd[700];
    CHECK(mkdtemp(dir) != NULL);
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    test_variants_match_tar();
    test_grouping();
    test_not_streamable();
    test_limits();
    test_many();
    test_seek();
    test_read_past();
    test_listing();
    sio_io_destroy(io);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
