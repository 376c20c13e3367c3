/*
 * test_tarwrite.c — the tar wire encoder (shardio/wire/tarwrite.c).
 *
 * Encodes synthetic samples and reads the bytes back twice: with libarchive
 * (names, sizes, contents — it applies pax path= and hides pax headers) and
 * with a small raw block walker in this file (pax records, which libarchive
 * does not expose for unknown keys, header fields, the trailer layout).
 */
#include <archive.h>
#include <archive_entry.h>
#include <inttypes.h>
#include <locale.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shardio.h"
#include "shardio_wire.h"

#define MAX_ENTRIES 64
#define MAX_RECORDS 8

/* One member as read back. */
typedef struct entry {
    char name[1024];
    char type;
    uint64_t size;
    unsigned char *data; /* malloc'd (libarchive reading only) */
    size_t nrec;         /* pax records that preceded it (raw walk only) */
    char rkey[MAX_RECORDS][64];
    char rval[MAX_RECORDS][1024];
} entry;

typedef struct listing {
    entry e[MAX_ENTRIES];
    size_t n;
    int zero_blocks; /* raw walk: zero blocks seen at the end */
    int ok;
} listing;

static void listing_free(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].data);
    l->n = 0;
}

/* Read a tar stream with libarchive. */
static void read_libarchive(const unsigned char *buf, size_t len, listing *l)
{
    struct archive *a = archive_read_new();
    struct archive_entry *ae;
    memset(l, 0, sizeof *l);
    archive_read_support_format_tar(a);
    l->ok = archive_read_open_memory(a, buf, len) == ARCHIVE_OK;
    while (l->ok && l->n < MAX_ENTRIES) {
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK) {
            fprintf(stderr, "libarchive: %s\n", archive_error_string(a));
            l->ok = 0;
            break;
        }
        entry *e = &l->e[l->n++];
        snprintf(e->name, sizeof e->name, "%s", archive_entry_pathname(ae));
        e->size = (uint64_t)archive_entry_size(ae);
        e->type = archive_entry_filetype(ae) == AE_IFREG ? '0' : '?';
        CHECK_EQ_U64(archive_entry_mode(ae) & 07777, 0644);
        CHECK_EQ_U64(archive_entry_uid(ae), 0);
        CHECK_EQ_U64(archive_entry_gid(ae), 0);
        CHECK_EQ_U64(archive_entry_mtime(ae), 0);
        e->data = malloc(e->size ? e->size : 1);
        la_ssize_t got = archive_read_data(a, e->data, e->size);
        CHECK_EQ_U64(got, e->size);
    }
    archive_read_free(a);
}

static uint64_t parse_size(const unsigned char *f)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        for (int i = 1; i < 12; i++)
            v = (v << 8) | f[i];
        return v;
    }
    for (int i = 0; i < 12 && f[i] >= '0' && f[i] <= '7'; i++)
        v = v * 8 + (uint64_t)(f[i] - '0');
    return v;
}

static int is_zero(const unsigned char *b)
{
    for (size_t i = 0; i < SIO_TAR_BLOCK; i++)
        if (b[i])
            return 0;
    return 1;
}

/* Walk the raw blocks: every header's fixed fields, pax records attached to
 * the member that follows, the trailing zero blocks. */
static void read_raw(const unsigned char *buf, size_t len, listing *l)
{
    size_t off = 0;
    size_t nrec = 0;
    char rkey[MAX_RECORDS][64], rval[MAX_RECORDS][1024];
    memset(l, 0, sizeof *l);
    l->ok = 1;
    CHECK(len % SIO_TAR_BLOCK == 0);
    while (off + SIO_TAR_BLOCK <= len) {
        const unsigned char *h = buf + off;
        if (is_zero(h)) {
            l->zero_blocks++;
            off += SIO_TAR_BLOCK;
            continue;
        }
        CHECK(l->zero_blocks == 0); /* zero blocks only at the very end */
        CHECK(memcmp(h + 257, "ustar\0" "00", 8) == 0);
        CHECK(memcmp(h + 100, "0000644", 8) == 0);
        CHECK(memcmp(h + 108, "0000000", 8) == 0);
        CHECK(memcmp(h + 116, "0000000", 8) == 0);
        CHECK(memcmp(h + 136, "00000000000", 12) == 0);
        CHECK(h[265] == 0 && h[297] == 0); /* empty uname, gname */
        unsigned sum = 0;
        for (size_t i = 0; i < SIO_TAR_BLOCK; i++)
            sum += (i >= 148 && i < 156) ? ' ' : h[i];
        CHECK_EQ_U64(strtoul((const char *)h + 148, NULL, 8), sum);
        uint64_t size = parse_size(h + 124);
        size_t padded = (size_t)((size + SIO_TAR_BLOCK - 1) / SIO_TAR_BLOCK *
                                 SIO_TAR_BLOCK);
        if (off + SIO_TAR_BLOCK + padded > len) {
            l->ok = 0;
            break;
        }
        const unsigned char *d = h + SIO_TAR_BLOCK;
        if (h[156] == 'x') {
            size_t p = 0;
            nrec = 0;
            while (p < size) {
                char *sp;
                unsigned long rl = strtoul((const char *)d + p, &sp, 10);
                const char *rec = (const char *)d + p;
                CHECK(*sp == ' ' && rl > 0 && p + rl <= size);
                if (*sp != ' ' || rl == 0 || p + rl > size) {
                    l->ok = 0;
                    break;
                }
                CHECK(rec[rl - 1] == '\n');
                const char *k = sp + 1;
                const char *eq = memchr(k, '=', (size_t)(rec + rl - k));
                CHECK(eq != NULL);
                if (eq && nrec < MAX_RECORDS) {
                    snprintf(rkey[nrec], sizeof rkey[0], "%.*s",
                             (int)(eq - k), k);
                    snprintf(rval[nrec], sizeof rval[0], "%.*s",
                             (int)(rec + rl - 1 - eq - 1), eq + 1);
                    nrec++;
                }
                p += rl;
            }
        } else {
            CHECK(l->n < MAX_ENTRIES);
            if (l->n >= MAX_ENTRIES)
                break;
            entry *e = &l->e[l->n++];
            char prefix[156] = {0}, nm[101] = {0};
            memcpy(prefix, h + 345, 155);
            memcpy(nm, h, 100);
            snprintf(e->name, sizeof e->name, "%s%s%s", prefix,
                     prefix[0] ? "/" : "", nm);
            e->type = (char)h[156];
            e->size = size;
            e->nrec = nrec;
            memcpy(e->rkey, rkey, sizeof rkey);
            memcpy(e->rval, rval, sizeof rval);
            nrec = 0;
        }
        off += SIO_TAR_BLOCK + padded;
    }
}

static const char *rec(const entry *e, const char *key)
{
    for (size_t i = 0; i < e->nrec; i++)
        if (strcmp(e->rkey[i], key) == 0)
            return e->rval[i];
    return NULL;
}

/* ------------------------------------------------------------------ */

static unsigned char big[3000];

static void test_samples(void)
{
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (unsigned char)(i * 7 + 3);

    /* 1: a short key with an empty field. */
    sio_field f1[] = {{"jpg", big, 1000}, {"cls", (const unsigned char *)"7", 1},
                      {"txt", (const unsigned char *)"", 0}};
    sio_sample s1 = {"000123", "file:///data/a.tar", 0, 3, 5, 3, f1, 1001, 0};
    /* 2: a key with directories and a dotted extension. */
    sio_field f2[] = {{"txt.gz", big + 10, 35}};
    sio_sample s2 = {"compressed/0001", "file:///data/b.tar", 1, 0, 42, 1, f2, 35, 0};
    /* 3: a 120-byte key without a slash: "<G>/<key>.<ext>" cannot be split
     * into prefix/name, so every member needs pax path=. */
    char k3[121];
    memset(k3, 'k', 120);
    k3[120] = 0;
    sio_field f3[] = {{"json", (const unsigned char *)"{}", 2},
                      {"png", big, 513}};
    sio_sample s3 = {k3, "file:///data/c.tar", 2, 1, 7, 2, f3, 515, 0};
    /* 4: a 180-byte key with a slash at 120: the 197-byte name splits into
     * prefix (133 bytes) + name (63), so no path= is needed. */
    char k4[181];
    memset(k4, 'd', 180);
    k4[120] = '/';
    k4[180] = 0;
    sio_field f4[] = {{"cls", (const unsigned char *)"1", 1}};
    sio_sample s4 = {k4, "file:///data/c.tar", 2, 2, 8, 1, f4, 1, 0};
    /* 5: a UTF-8 key long enough to need path= and to be cut in the
     * placeholder name (each character is 2 or 3 bytes). */
    char k5[400] = ""; /* 20 x 11 bytes */
    for (int i = 0; i < 20; i++)
        strcat(k5, "ключ画");
    sio_field f5[] = {{"txt", (const unsigned char *)"utf", 3}};
    sio_sample s5 = {k5, "s3://bucket/ü.tar", 3, 0, 123456789012ull, 1, f5, 3, 0};

    const sio_sample *all[] = {&s1, &s2, &s3, &s4, &s5};
    sio_wbuf out;
    sio_wbuf_init(&out, 1u << 20);
    sio_wenc *w = NULL;
    sio_error err;
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &out, &w, &err) == SIO_OK);
    for (size_t i = 0; i < 5; i++)
        CHECK(sio_wenc_sample(w, all[i], 10 + i) == SIO_OK);
    sio_tarw_summary sum = {3, 1, 4, 10, 5, 15};
    CHECK(sio_wenc_end(w, &sum) == SIO_OK);
    CHECK_EQ_U64(sio_wenc_bytes(w), out.len);
    sio_wenc_destroy(w);

    char n3a[200], n3b[200], n4[240], n5[700];
    snprintf(n3a, sizeof n3a, "000000000007/%s.json", k3);
    snprintf(n3b, sizeof n3b, "000000000007/%s.png", k3);
    snprintf(n4, sizeof n4, "000000000008/%s.cls", k4);
    snprintf(n5, sizeof n5, "123456789012/%s.txt", k5);
    struct {
        const char *name;
        const unsigned char *data;
        size_t len;
    } want[] = {
        {"000000000005/000123.jpg", big, 1000},
        {"000000000005/000123.cls", (const unsigned char *)"7", 1},
        {"000000000005/000123.txt", (const unsigned char *)"", 0},
        {"000000000042/compressed/0001.txt.gz", big + 10, 35},
        {n3a, (const unsigned char *)"{}", 2},
        {n3b, big, 513},
        {n4, (const unsigned char *)"1", 1},
        {n5, (const unsigned char *)"utf", 3},
        {SIO_TARW_END_NAME, NULL, 0},
    };
    const size_t nwant = sizeof want / sizeof want[0];
    const char *end_json = "{\"status\":\"ok\",\"epoch\":3,\"rank\":1,"
                           "\"world\":4,\"start\":10,\"samples\":5,"
                           "\"position\":15}";

    listing la;
    read_libarchive(out.data, out.len, &la);
    CHECK(la.ok);
    CHECK_EQ_U64(la.n, nwant);
    for (size_t i = 0; i < nwant && i < la.n; i++) {
        CHECK_STR(la.e[i].name, want[i].name);
        CHECK(la.e[i].type == '0');
        if (want[i].data) {
            CHECK_EQ_U64(la.e[i].size, want[i].len);
            CHECK(la.e[i].size != want[i].len ||
                  memcmp(la.e[i].data, want[i].data, want[i].len) == 0);
        }
    }
    if (la.n == nwant) {
        CHECK_EQ_U64(la.e[nwant - 1].size, strlen(end_json));
        CHECK(memcmp(la.e[nwant - 1].data, end_json, strlen(end_json)) == 0);
    }
    listing_free(&la);

    listing raw;
    read_raw(out.data, out.len, &raw);
    CHECK(raw.ok);
    CHECK_EQ_U64(raw.n, nwant);
    CHECK_EQ_U64(raw.zero_blocks, 2);
    if (raw.n == nwant) {
        /* The first member of each sample carries the sample's records. */
        const entry *e = &raw.e[0];
        CHECK_EQ_U64(e->nrec, 4);
        CHECK_STR(rec(e, "SHARDCAST.key"), "000123");
        CHECK_STR(rec(e, "SHARDCAST.shard"), "file:///data/a.tar");
        CHECK_STR(rec(e, "SHARDCAST.index"), "5");
        CHECK_STR(rec(e, "SHARDCAST.position"), "10");
        CHECK(rec(e, "path") == NULL);
        /* Later members of a sample with short names get none. */
        CHECK_EQ_U64(raw.e[1].nrec, 0);
        CHECK_EQ_U64(raw.e[2].nrec, 0);
        CHECK_STR(raw.e[2].name, "000000000005/000123.txt");
        CHECK_EQ_U64(raw.e[2].size, 0);
        e = &raw.e[3];
        CHECK_STR(rec(e, "SHARDCAST.key"), "compressed/0001");
        CHECK_STR(rec(e, "SHARDCAST.position"), "11");
        CHECK_STR(rec(e, "SHARDCAST.index"), "42");
        /* The long name: path= on the first member (with the sample's
         * records) and on the second (alone). */
        e = &raw.e[4];
        CHECK_EQ_U64(e->nrec, 5);
        CHECK_STR(rec(e, "path"), n3a);
        CHECK_STR(rec(e, "SHARDCAST.key"), k3);
        CHECK_EQ_U64(strlen(e->name), 100);
        CHECK(strncmp(e->name, n3a, 100) == 0);
        e = &raw.e[5];
        CHECK_EQ_U64(e->nrec, 1);
        CHECK_STR(rec(e, "path"), n3b);
        /* Split into prefix/name: no path=, the raw fields rebuild it. */
        e = &raw.e[6];
        CHECK_EQ_U64(e->nrec, 4);
        CHECK(rec(e, "path") == NULL);
        CHECK_STR(e->name, n4);
        /* UTF-8: path= byte-exact, the placeholder cut on a character
         * boundary, the pax record lengths counted in bytes. */
        e = &raw.e[7];
        CHECK_STR(rec(e, "path"), n5);
        CHECK_STR(rec(e, "SHARDCAST.key"), k5);
        CHECK_STR(rec(e, "SHARDCAST.shard"), "s3://bucket/ü.tar");
        CHECK_STR(rec(e, "SHARDCAST.index"), "123456789012");
        CHECK(strlen(e->name) <= 100 && strlen(e->name) >= 98);
        CHECK(((unsigned char)n5[strlen(e->name)] & 0xC0) != 0x80);
        /* The trailer is top-level and has no pax header. */
        CHECK_EQ_U64(raw.e[8].nrec, 0);
        CHECK_STR(raw.e[8].name, SIO_TARW_END_NAME);
    }
    sio_wbuf_free(&out);
}

static void test_filter(void)
{
    sio_field fa[] = {{"jpg", big, 600}, {"cls", (const unsigned char *)"3", 1}};
    sio_sample a = {"a", "u", 0, 0, 1, 2, fa, 601, 0};
    sio_field fb[] = {{"jpg", big, 10}}; /* no kept field */
    sio_sample b = {"b", "u", 0, 1, 2, 1, fb, 10, 0};
    sio_field fc[] = {{"txt", (const unsigned char *)"x", 1},
                      {"cls", (const unsigned char *)"4", 1}};
    sio_sample c = {"c", "u", 0, 2, 3, 2, fc, 2, 0};
    const char *keep[] = {"cls", "txt"};

    sio_wbuf out;
    sio_wbuf_init(&out, 1u << 20);
    sio_wenc *w = NULL;
    CHECK(sio_tarw_create(keep, 2, sio_wbuf_append, &out, &w, NULL) == SIO_OK);
    CHECK(sio_wenc_sample(w, &a, 0) == SIO_OK);
    size_t after_a = out.len;
    CHECK(sio_wenc_sample(w, &b, 1) == SIO_OK);
    CHECK_EQ_U64(out.len, after_a); /* sample b: nothing written */
    CHECK(sio_wenc_sample(w, &c, 2) == SIO_OK);
    sio_tarw_summary sum = {0, 0, 1, 0, 3, 3};
    CHECK(sio_wenc_end(w, &sum) == SIO_OK);
    sio_wenc_destroy(w);

    listing raw;
    read_raw(out.data, out.len, &raw);
    CHECK_EQ_U64(raw.n, 4);
    if (raw.n == 4) {
        CHECK_STR(raw.e[0].name, "000000000001/a.cls");
        CHECK_STR(rec(&raw.e[0], "SHARDCAST.position"), "0");
        /* c's first kept member is its first field, carrying the records. */
        CHECK_STR(raw.e[1].name, "000000000003/c.txt");
        CHECK_STR(rec(&raw.e[1], "SHARDCAST.position"), "2");
        CHECK_STR(raw.e[2].name, "000000000003/c.cls");
        CHECK_EQ_U64(raw.e[2].nrec, 0);
        CHECK_STR(raw.e[3].name, SIO_TARW_END_NAME);
    }
    sio_wbuf_free(&out);

    /* Bad filters. */
    const char *empty[] = {""};
    CHECK(sio_tarw_create(empty, 1, sio_wbuf_append, &out, &w, NULL) ==
          SIO_ERR_INVALID);
    CHECK(w == NULL);
    char longname[SIO_TARW_FIELD_NAME_MAX + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    const char *toolong[] = {longname};
    CHECK(sio_tarw_create(toolong, 1, sio_wbuf_append, &out, &w, NULL) ==
          SIO_ERR_INVALID);
    CHECK(sio_tarw_create(keep, SIO_TARW_FILTER_MAX + 1, sio_wbuf_append, &out,
                          &w, NULL) == SIO_ERR_INVALID);
}

static void test_error_trailer(void)
{
    sio_field fa[] = {{"cls", (const unsigned char *)"3", 1}};
    sio_sample a = {"a", "u", 0, 0, 1, 1, fa, 1, 0};
    sio_wbuf out;
    sio_wbuf_init(&out, 1u << 20);
    sio_wenc *w = NULL;
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &out, &w, NULL) == SIO_OK);
    CHECK(sio_wenc_sample(w, &a, 0) == SIO_OK);
    CHECK(sio_wenc_error(w, "shard \"x\"\\ failed\n\xff", 0, 0) == SIO_OK);
    sio_wenc_destroy(w);

    listing raw;
    read_raw(out.data, out.len, &raw);
    CHECK_EQ_U64(raw.n, 2);
    CHECK_EQ_U64(raw.zero_blocks, 0); /* a cut stream has no end blocks */
    listing la;
    read_libarchive(out.data, out.len, &la);
    CHECK_EQ_U64(la.n, 2);
    if (la.n == 2) {
        const char *want = "{\"status\":\"error\",\"reason\":"
                           "\"shard \\\"x\\\"\\\\ failed\\n?\","
                           "\"retryable\":false}";
        CHECK_STR(la.e[1].name, SIO_TARW_ERROR_NAME);
        CHECK_EQ_U64(la.e[1].size, strlen(want));
        CHECK(memcmp(la.e[1].data, want, strlen(want)) == 0);
    }
    listing_free(&la);
    sio_wbuf_free(&out);
}

/* The retryable trailer of a drain: same member, retry advice in the JSON
 * (clamped to the format's maximum), and it reads back through the shared
 * parser. */
static void test_error_trailer_retry(void)
{
    static const struct {
        uint32_t ms, want_ms;
    } cases[] = {{2000, 2000}, {0, 0}, {UINT32_MAX, SIO_RETRY_AFTER_MAX_MS}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sio_wbuf out;
        sio_wbuf_init(&out, 1u << 20);
        sio_wenc *w = NULL;
        CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &out, &w, NULL) ==
              SIO_OK);
        CHECK(sio_wenc_error(w, "server shutting down", 1,
                                   cases[i].ms) == SIO_OK);
        sio_wenc_destroy(w);
        listing la;
        read_libarchive(out.data, out.len, &la);
        CHECK_EQ_U64(la.n, 1);
        if (la.n == 1) {
            char want[160];
            snprintf(want, sizeof want,
                     "{\"status\":\"error\",\"reason\":\"server shutting "
                     "down\",\"retryable\":true,\"retry_after_ms\":%u}",
                     cases[i].want_ms);
            CHECK_STR(la.e[0].name, SIO_TARW_ERROR_NAME);
            CHECK_EQ_U64(la.e[0].size, strlen(want));
            CHECK(memcmp(la.e[0].data, want, strlen(want)) == 0);
            sio_wire_error we;
            CHECK(sio_wire_error_parse(la.e[0].data, la.e[0].size, &we,
                                       NULL) == SIO_OK);
            CHECK(we.retryable == 1);
            CHECK_EQ_U64(we.retry_after_ms, cases[i].want_ms);
            CHECK_STR(we.reason, "server shutting down");
        }
        listing_free(&la);
        sio_wbuf_free(&out);
    }
}

/* Sink that fails after a number of bytes: the code must come back. */
typedef struct failing {
    size_t left;
} failing;

static sio_code failing_write(void *ud, const void *data, size_t len)
{
    failing *f = ud;
    (void)data;
    if (len > f->left)
        return SIO_ERR_CANCELED;
    f->left -= len;
    return SIO_OK;
}

static void test_sink_errors(void)
{
    sio_field fa[] = {{"bin", big, 2000}};
    sio_sample a = {"a", "u", 0, 0, 1, 1, fa, 2000, 0};
    failing f = {1024 + 100};
    sio_wenc *w = NULL;
    CHECK(sio_tarw_create(NULL, 0, failing_write, &f, &w, NULL) == SIO_OK);
    CHECK(sio_wenc_sample(w, &a, 0) == SIO_ERR_CANCELED);
    CHECK_EQ_U64(sio_wenc_bytes(w), 1024); /* pax header + data block */
    sio_wenc_destroy(w);

    /* A bounded buffer refuses to grow past its maximum. */
    sio_wbuf b;
    sio_wbuf_init(&b, 1000);
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &b, &w, NULL) == SIO_OK);
    CHECK(sio_wenc_sample(w, &a, 0) == SIO_ERR_LIMIT);
    CHECK(b.len <= 1000);
    sio_wenc_destroy(w);
    sio_wbuf_free(&b);

    /* An empty key is refused rather than producing "<G>/.ext". */
    sio_sample e = {"", "u", 0, 0, 1, 1, fa, 2000, 0};
    sio_wbuf_init(&b, 1u << 20);
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &b, &w, NULL) == SIO_OK);
    CHECK(sio_wenc_sample(w, &e, 0) == SIO_ERR_INVALID);
    CHECK_EQ_U64(b.len, 0);
    sio_wenc_destroy(w);
    sio_wbuf_free(&b);
}

/* Sizes: octal up to 8 GiB - 1, base-256 from 8 GiB; libarchive agrees. */
static void test_sizes(void)
{
    const uint64_t sizes[] = {0, 511, 512, (1ull << 33) - 1, 1ull << 33,
                              9ull << 30, (1ull << 40) + 12345};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        /* A header followed by enough zero blocks that libarchive can
         * read the header without needing the (absent) payload. */
        unsigned char buf[SIO_TAR_BLOCK * 3];
        memset(buf, 0, sizeof buf);
        int fits = 0;
        sio_tar_header(buf, "x/y.bin", 7, '0', sizes[i], &fits);
        CHECK(fits);
        CHECK_EQ_U64(parse_size(buf + 124), sizes[i]);
        if (sizes[i] < (1ull << 33))
            CHECK(buf[124] >= '0' && buf[124] <= '7' && buf[135] == 0);
        else
            CHECK(buf[124] == 0x80);
        struct archive *a = archive_read_new();
        struct archive_entry *ae;
        archive_read_support_format_tar(a);
        CHECK(archive_read_open_memory(a, buf, sizeof buf) == ARCHIVE_OK);
        CHECK(archive_read_next_header(a, &ae) == ARCHIVE_OK);
        CHECK_EQ_U64(archive_entry_size(ae), sizes[i]);
        archive_read_free(a);
    }
}

/* Name placement: exactly 100 bytes uses the whole name field; up to
 * 155 + 1 + 100 may split at a slash; anything else needs pax. */
static void test_names(void)
{
    char n[300];
    memset(n, 'a', sizeof n);
    CHECK(sio_tar_name_fits(n, 100));
    CHECK(!sio_tar_name_fits(n, 101)); /* no slash */
    n[155] = '/';
    CHECK(sio_tar_name_fits(n, 256));  /* prefix 155, name 100 */
    CHECK(!sio_tar_name_fits(n, 257)); /* name part 101 */
    n[155] = 'a';
    n[156] = '/';
    CHECK(!sio_tar_name_fits(n, 200)); /* prefix would be 156 */
    n[156] = 'a';
    n[150] = '/';
    CHECK(!sio_tar_name_fits(n, 151)); /* empty name part */
    CHECK(sio_tar_name_fits(n, 152));

    unsigned char blk[SIO_TAR_BLOCK];
    int fits = 0;
    memset(n, 'b', 100);
    sio_tar_header(blk, n, 100, '0', 1, &fits);
    CHECK(fits && memcmp(blk, n, 100) == 0 && blk[100] == '0');
}

/* Regression (issue 12): a key like "../../x" used to become the member
 * "000000000001/../../x.jpg", so an unfiltered `tar -x` of a stream wrote
 * outside its directory. Member names are now sanitised; the key travels
 * unchanged in SHARDCAST.key, and the shard URL is redacted. */
static void sanitized(const char *key, const char *want)
{
    sio_wbuf b;
    sio_wbuf_init(&b, 1u << 16);
    CHECK(sio_tar_key_sanitize(key, strlen(key), &b) == SIO_OK);
    CHECK(sio_wbuf_append(&b, "", 1) == SIO_OK);
    CHECK_STR((const char *)b.data, want);
    sio_wbuf_free(&b);
}

static void test_hostile_keys(void)
{
    sanitized("plain/key", "plain/key");
    sanitized("../../x", "__/__/x");
    sanitized("/etc/passwd", "etc/passwd");
    sanitized("a//./b/..", "a/b/__");
    sanitized("..", "__");
    sanitized("/", "_");
    sanitized("", "_");
    sanitized("..\\..\\w", ".._.._w");
    sanitized("a\001b", "a_b");
    sanitized("..a/b..", "..a/b..");

    static const char *const keys[] = {"../../x", "/abs/p", "a/./../b"};
    sio_field f[] = {{"jpg", (const unsigned char *)"J", 1}};
    sio_wbuf out;
    sio_wbuf_init(&out, 1u << 20);
    sio_wenc *w = NULL;
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &out, &w, NULL) == SIO_OK);
    for (size_t i = 0; i < 3; i++) {
        sio_sample s = {keys[i],
                        "https://AKIA:pw@h/s.tar?X-Amz-Signature=SECRETSIG&v=1",
                        0, 0, i, 1, f, 1, 0};
        CHECK(sio_wenc_sample(w, &s, i) == SIO_OK);
    }
    sio_wenc_destroy(w);
    CHECK(memmem(out.data, out.len, "SECRETSIG", 9) == NULL);
    CHECK(memmem(out.data, out.len, "AKIA:pw", 7) == NULL);
    listing la;
    read_libarchive(out.data, out.len, &la);
    CHECK_EQ_U64(la.n, 3);
    for (size_t i = 0; i < la.n && i < 3; i++) {
        const char *nm = la.e[i].name;
        CHECK(nm[0] != '/');
        CHECK(strstr(nm, "..") == NULL);
    }
    if (la.n == 3) {
        CHECK_STR(la.e[0].name, "000000000000/__/__/x.jpg");
        CHECK_STR(la.e[1].name, "000000000001/abs/p.jpg");
        CHECK_STR(la.e[2].name, "000000000002/a/__/b.jpg");
    }
    listing_free(&la);
    listing raw;
    read_raw(out.data, out.len, &raw);
    CHECK(raw.n >= 2);
    if (raw.n >= 2) {
        CHECK(rec(&raw.e[0], "SHARDCAST.key") &&
              strcmp(rec(&raw.e[0], "SHARDCAST.key"), "../../x") == 0);
        CHECK(rec(&raw.e[0], "SHARDCAST.shard") &&
              strcmp(rec(&raw.e[0], "SHARDCAST.shard"),
                     "https://***@h/s.tar?X-Amz-Signature=***&v=1") == 0);
    }
    sio_wbuf_free(&out);
}

int main(void)
{
    /* libarchive converts UTF-8 pathnames to the locale's charset. */
    if (!setlocale(LC_ALL, "C.UTF-8"))
        setlocale(LC_ALL, "");
    test_samples();
    test_filter();
    test_error_trailer();
    test_error_trailer_retry();
    test_sink_errors();
    test_sizes();
    test_names();
    test_hostile_keys();
    CHECK_MAIN_END();
}
