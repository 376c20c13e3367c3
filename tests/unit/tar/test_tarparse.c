/*
 * test_tarparse.c — the plain tar reader against libarchive.
 *
 * Random shards (pax, GNU and ustar; long names, ustar prefixes,
 * directories, symlinks, hard links, non-ASCII names, empty and large
 * members, members larger than the read buffer, metadata members,
 * repeated fields), plus damaged copies (bytes flipped in a header,
 * truncated at random points, garbage appended, a header's type or size
 * changed with a valid checksum), are read through
 * sio_shard_open_at twice: with the plain reader (the default) and with
 * every shard forced through libarchive. For intact shards both must give
 * the same samples (key, group number, fields, payload hash), the same
 * bad samples, and the same index offsets; for damaged ones the same
 * outcome up to the first error, and both must end in an error or both
 * not. Read buffers of 1 KiB to 256 KiB exercise the hand-over to
 * libarchive both from buffered bytes and by reopening the stream.
 */
#include <archive.h>
#include <archive_entry.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store_int.h"
#include "check.h"
#include "shardio.h"
#include "shardio_index.h"

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static size_t below(size_t n)
{
    return n ? (size_t)(rnd() % n) : 0;
}

static char dir[64];

/* Write a random shard; returns 0 on success. */
static int make_shard(const char *path, int variant)
{
    struct archive *a = archive_write_new();
    const char *fmt = variant % 3 == 0 ? "pax" : variant % 3 == 1 ? "gnu"
                                                                   : "ustar";
    if (!strcmp(fmt, "gnu"))
        archive_write_set_format_gnutar(a);
    else if (!strcmp(fmt, "ustar"))
        archive_write_set_format_ustar(a);
    else
        archive_write_set_format_pax_restricted(a);
    archive_write_set_bytes_per_block(a, below(2) ? 10240 : 512);
    if (archive_write_open_filename(a, path) != ARCHIVE_OK)
        return -1;
    size_t nsamples = 1 + below(40);
    static const char *exts[] = {"jpg", "cls", "json", "txt.gz", "seg.png",
                                 "npy", "JPG"};
    unsigned char *data = malloc(600000);
    for (size_t i = 0; i < 600000; i++)
        data[i] = (unsigned char)rnd();
    for (size_t s = 0; s < nsamples; s++) {
        char key[400];
        int kind = (int)below(10);
        if (kind == 0 && strcmp(fmt, "ustar"))
            snprintf(key, sizeof key, "%0150zu/deep/k%zu", s, s); /* long */
        else if (kind == 1)
            snprintf(key, sizeof key, "%080zu/sub/%030zu", s, s); /* prefix */
        else if (kind == 2 && !strcmp(fmt, "pax"))
            snprintf(key, sizeof key, "caf\xc3\xa9/%zu", s); /* UTF-8 */
        else
            snprintf(key, sizeof key, "d%zu/s%06zu", s % 3, s);
        size_t nf = 1 + below(4);
        for (size_t f = 0; f < nf; f++) {
            char name[600];
            int odd = (int)below(30);
            struct archive_entry *e = archive_entry_new();
            size_t len = below(4) == 0 ? below(300000) : below(3000);
            if (odd == 0)
                len = 0;
            snprintf(name, sizeof name, "%s.%s", key, exts[below(7)]);
            archive_entry_set_pathname(e, name);
            archive_entry_set_perm(e, 0644);
            archive_entry_set_mtime(e, 1700000000, 0);
            if (odd == 1) { /* a directory */
                archive_entry_set_filetype(e, AE_IFDIR);
                archive_entry_set_size(e, 0);
                len = 0;
            } else if (odd == 2) { /* a symlink */
                archive_entry_set_filetype(e, AE_IFLNK);
                archive_entry_set_symlink(e, "elsewhere.jpg");
                archive_entry_set_size(e, 0);
                len = 0;
            } else if (odd == 3 && s > 0) { /* a hard link */
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_hardlink(e, "d0/s000000.jpg");
                archive_entry_set_size(e, 0);
                len = 0;
            } else if (odd == 4) { /* metadata member */
                archive_entry_set_pathname(e, "__meta__");
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_size(e, (la_int64_t)len);
            } else {
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_size(e, (la_int64_t)len);
            }
            if (archive_write_header(a, e) < ARCHIVE_WARN) {
                archive_entry_free(e); /* e.g. a name ustar cannot hold */
                continue;
            }
            if (len)
                archive_write_data(a, data + below(600000 - len), len);
            archive_entry_free(e);
        }
    }
    free(data);
    archive_write_close(a);
    archive_write_free(a);
    return 0;
}

/* A printable account of reading the shard: one line per result. */
typedef struct account {
    char *s;
    size_t len, cap;
    int failed;
} account;

static void put(account *ac, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(account *ac, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    text_vappend(&ac->s, &ac->len, &ac->cap, fmt, ap);
    va_end(ap);
}

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void read_all(const char *path, uint32_t rbuf, int force, account *ac,
                     int with_index)
{
    sio_io_config cfg = {0};
    sio_io *io = NULL;
    sio_shard *sh = NULL;
    sio_error err = {0};
    sio_index *x = NULL;
    sio_index_entry *ie = NULL;
    sio_index_config xc = {0};

    cfg.read_buffer = rbuf;
    if (sio_io_create(&cfg, &io, &err) != SIO_OK) {
        put(ac, "io: %s\n", err.msg);
        return;
    }
    sio_shard_force_libarchive(force);
    sio_shard_at at = {.end = UINT64_MAX};
    if (with_index) {
        sio_index_open(&xc, &x, NULL);
        ie = sio_index_get(x, NULL, path, 0);
        at.rec = sio_index_recorder(ie);
    }
    sio_code rc = sio_shard_open_at(io, path, 0, NULL, &at, &sh, &err);
    if (rc) {
        put(ac, "open rc=%d\n", (int)rc);
        ac->failed = 1;
    } else {
        for (;;) {
            const sio_sample *s = NULL;
            rc = sio_shard_next(sh, &s);
            if (rc == SIO_ERR_SAMPLE) {
                put(ac, "bad %s\n", sio_shard_errmsg(sh));
                continue;
            }
            if (rc) {
                put(ac, "error rc=%d\n", (int)rc);
                ac->failed = 1;
                break;
            }
            if (!s)
                break;
            put(ac, "sample %s #%llu", s->key,
                (unsigned long long)s->index_in_shard);
            for (size_t i = 0; i < s->nfields; i++)
                put(ac, " %s:%zu:%016llx", s->fields[i].name, s->fields[i].len,
                    (unsigned long long)fnv(s->fields[i].data,
                                            s->fields[i].len));
            put(ac, "\n");
            sio_sample_unref(s);
        }
        put(ac, "groups %llu\n", (unsigned long long)sio_shard_groups(sh));
    }
    sio_shard_close(sh);
    if (ie) {
        sio_index_info info;
        sio_index_get_info(ie, &info);
        put(ac, "index known=%llu complete=%d\n",
            (unsigned long long)info.known, info.complete);
        for (uint64_t g = 0; g < info.known; g++) {
            sio_index_group grp;
            if (sio_index_group_get(ie, g, &grp))
                put(ac, "g%llu %llu %llu %llu %u\n", (unsigned long long)g,
                    (unsigned long long)grp.offset,
                    (unsigned long long)grp.end,
                    (unsigned long long)grp.bytes, grp.flags);
        }
    }
    sio_index_close(x);
    sio_shard_force_libarchive(0);
    sio_io_destroy(io);
}

/* The account up to its first error line (damaged shards). */
static size_t prefix_len(const account *ac)
{
    const char *e = strstr(ac->s ? ac->s : "", "error rc=");
    return e ? (size_t)(e - ac->s) : ac->len;
}

/* Is this 512-byte block a tar header (valid checksum)? */
static int is_header(const unsigned char *b)
{
    unsigned sum = 0, want = 0;
    for (int i = 0; i < 512; i++)
        sum += (i >= 148 && i < 156) ? ' ' : b[i];
    for (int i = 148; i < 156 && b[i] >= '0' && b[i] <= '7'; i++)
        want = want * 8 + (unsigned)(b[i] - '0');
    return sum == want && sum != 8 * ' ';
}

static void fix_checksum(unsigned char *b)
{
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (i >= 148 && i < 156) ? ' ' : b[i];
    snprintf((char *)b + 148, 8, "%06o", sum);
    b[155] = ' ';
}

static void damage(const char *src, const char *dst, int how)
{
    FILE *f = fopen(src, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 4096);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    size_t len = got;
    if (how == 0 && len > 1) { /* truncate */
        len = below(len);
    } else if (how == 1 && len >= 512) { /* flip bytes of a header block */
        size_t blk = below(len / 512) * 512;
        for (int k = 0; k < 3; k++)
            b[blk + below(512)] ^= (unsigned char)(1 + below(255));
    } else if (how == 3 || how == 4) {
        /* A valid header changed: another type (3) or size (4), with a
         * correct checksum, so both readers take it as a header. */
        size_t hdrs[4096], nh = 0;
        for (size_t off = 0; off + 512 <= len && nh < 4096; off += 512)
            if (is_header(b + off))
                hdrs[nh++] = off;
        for (int k = 0; nh && k < 2; k++) {
            unsigned char *h = b + hdrs[below(nh)];
            if (how == 3) {
                static const char types[] = "0127345689DMNSVAXZxgLK\001 ";
                h[156] = (unsigned char)types[below(sizeof types - 1)];
                if (below(2))
                    snprintf((char *)h + 100, 8, "%07o",
                             below(2) ? 0100644u : 0644u);
            } else {
                static const char *sizes[] = {"00000000000", "00000001000",
                                              "-0000000001", "77777777777",
                                              "0000001 0x0", "00000000777"};
                memcpy(h + 124, sizes[below(6)], 11);
            }
            fix_checksum(h);
        }
    } else if (how == 5 || how == 6) {
        /* Where the end-of-archive blocks (and the record padding)
         * start. */
        while (len >= 512) {
            size_t z = 0;
            while (z < 512 && b[len - 512 + z] == 0)
                z++;
            if (z < 512)
                break;
            len -= 512;
        }
        /* 5: cut on a block boundary before them (a header boundary or
         * inside a member's data); 6: every member whole, the end blocks
         * cut off. */
        if (how == 5)
            len = below(len / 512 + 1) * 512;
    } else { /* garbage after the end */
        for (size_t i = 0; i < 4096; i++)
            b[len + i] = (unsigned char)rnd();
        len += 4096;
    }
    f = fopen(dst, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    free(b);
}

/* A shard's read buffer is a sample-pool block: the next shard reuses
 * it (warm memory) instead of mapping and faulting in a fresh one. */
static void test_read_buffer_pooled(const char *path)
{
    sio_io_config c;
    sio_io *io = NULL;
    sio_shard *sh = NULL;
    sio_pool_stats a, b;
    memset(&c, 0, sizeof c);
    c.read_buffer = 262144;
    CHECK(sio_io_create(&c, &io, NULL) == SIO_OK);
    CHECK(sio_shard_open(io, path, 0, NULL, &sh, NULL) == SIO_OK);
    sio_shard_close(sh);
    for (int i = 0; i < 3; i++) {
        sio_pool_get_stats(&a);
        CHECK(sio_shard_open(io, path, 0, NULL, &sh, NULL) == SIO_OK);
        sio_pool_get_stats(&b);
        sio_shard_close(sh);
        CHECK_EQ_U64(b.fresh - a.fresh, 0);
        CHECK(b.reused - a.reused >= 1);
    }
    sio_io_destroy(io);
}

int main(void)
{
    static const uint32_t bufs[] = {1024, 4096, 65536, 262144};
    snprintf(dir, sizeof dir, "/tmp/test_tarparse.%d", (int)getpid());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    CHECK(system(cmd) == 0);
    int intact = 0, damaged = 0, same_damaged = 0;
    /* TARPARSE_SHARDS / TARPARSE_SEED: longer runs by hand. */
    int nshards = getenv("TARPARSE_SHARDS") ? atoi(getenv("TARPARSE_SHARDS"))
                                            : 60;
    if (getenv("TARPARSE_SEED"))
        rs = strtoull(getenv("TARPARSE_SEED"), NULL, 10) | 1;
    for (int v = 0; v < nshards; v++) {
        char path[160], bad[160];
        snprintf(path, sizeof path, "%s/s%d.tar", dir, v);
        CHECK(make_shard(path, v) == 0);
        uint32_t rb = bufs[below(4)];
        account a = {0}, b = {0};
        read_all(path, rb, 0, &a, 1);
        read_all(path, rb, 1, &b, 1);
        CHECK(a.s && b.s && a.len == b.len && memcmp(a.s, b.s, a.len) == 0);
        if (!(a.s && b.s && a.len == b.len && !memcmp(a.s, b.s, a.len)))
            fprintf(stderr, "shard %d (buffer %u):\n--- plain\n%s--- "
                    "libarchive\n%s", v, rb, a.s ? a.s : "",
                    b.s ? b.s : "");
        CHECK(!a.failed);
        intact++;
        free(a.s);
        free(b.s);
        for (int how = 0; how < 7; how++) {
            snprintf(bad, sizeof bad, "%s/bad%d_%d.tar", dir, v, how);
            damage(path, bad, how);
            account c = {0}, d = {0};
            read_all(bad, rb, 0, &c, 0);
            read_all(bad, rb, 1, &d, 0);
            damaged++;
            /* Both fail or neither; the same samples up to the error. */
            CHECK(c.failed == d.failed);
            size_t pc = prefix_len(&c), pd = prefix_len(&d);
            CHECK(pc == pd && memcmp(c.s, d.s, pc) == 0);
            /* Bytes that end without an end-of-archive block are a
             * truncated archive to both readers. */
            if (how >= 5)
                CHECK(c.failed && d.failed);
            if (how == 6 && !c.failed)
                fprintf(stderr, "shard %d without its end blocks read "
                        "whole:\n%s", v, c.s ? c.s : "");
            if (c.failed != d.failed || pc != pd || memcmp(c.s, d.s, pc))
                fprintf(stderr, "damaged %d/%d (buffer %u):\n--- plain\n%s"
                        "--- libarchive\n%s", v, how, rb, c.s ? c.s : "",
                        d.s ? d.s : "");
            else
                same_damaged++;
            free(c.s);
            free(d.s);
        }
    }
    {
        char first[160];
        snprintf(first, sizeof first, "%s/s0.tar", dir);
        test_read_buffer_pooled(first);
    }
    printf("intact shards: %d, damaged: %d (%d read alike)\n", intact,
           damaged, same_damaged);
    if (!getenv("TARPARSE_KEEP")) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    CHECK_MAIN_END();
}
