/*
 * tarparse.c — the plain tar reader (contract in tarparse.h).
 *
 * The rules follow libarchive's tar reader where an entry is taken: a
 * header whose checksum matches (unsigned or signed byte sum) starts an
 * entry; an all-zero block, or the stream ending at a header boundary,
 * ends the archive; a partial header or partial data is a truncated
 * archive; a lone header block whose checksum does not match is dropped
 * and the next block is tried, as libarchive resynchronises. Names: pax `path`, else a GNU long name, else the ustar
 * prefix "/" name (POSIX magic only), else the name field. Sizes: pax
 * `size`, else the octal or base-256 size field. Anything else libarchive
 * would interpret (see the list in tarparse.h) is "unsupported" and left
 * to it, at the offset of the entry's first header.
 */
#include "tarparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 512u

void sio_tarp_init(sio_tar_plain *t, sio_stream *stream, unsigned char *buf,
                   size_t cap, uint64_t offset)
{
    memset(t, 0, sizeof *t);
    t->stream = stream;
    t->buf = buf;
    t->cap = cap;
    t->off = offset;
    t->start = offset;
}

static sio_code stream_fail(sio_tar_plain *t, sio_code rc)
{
    t->rc = rc;
    snprintf(t->err, sizeof t->err, "%s", t->stream->ops->errmsg(t->stream));
    return rc;
}

/* After an entry of at least this size, headers are read in reads of at
 * most HEADER_READ bytes, so the next large member is mostly read straight
 * into its sample's memory instead of through the buffer. */
#define LARGE_ENTRY (64u << 10)
#define HEADER_READ (8u << 10)

/* Have at least `need` (<= cap) bytes buffered, unless the stream ends
 * first; read at most `most` bytes at a time (0: the buffer's room).
 * Returns SIO_OK; the bytes buffered are t->len - t->pos. */
static sio_code fill_at_most(sio_tar_plain *t, size_t need, size_t most)
{
    if (t->len - t->pos >= need)
        return SIO_OK;
    if (t->cap - t->pos < need) {
        memmove(t->buf, t->buf + t->pos, t->len - t->pos);
        t->len -= t->pos;
        t->pos = 0;
    }
    while (t->len - t->pos < need && !t->seof) {
        size_t got = 0, room = t->cap - t->len;
        if (most && room > most && most >= need - (t->len - t->pos))
            room = most;
        sio_code rc = t->stream->ops->read(t->stream, t->buf + t->len, room,
                                           &got);
        if (rc)
            return stream_fail(t, rc);
        if (got == 0)
            t->seof = 1;
        t->len += got;
    }
    return SIO_OK;
}

static sio_code fill(sio_tar_plain *t, size_t need)
{
    return fill_at_most(t, need, 0);
}

static void consume(sio_tar_plain *t, size_t n)
{
    t->pos += n;
    t->off += n;
}

static sio_code truncated(sio_tar_plain *t)
{
    snprintf(t->err, sizeof t->err, "truncated tar archive at offset %llu",
             (unsigned long long)t->off);
    return SIO_ERR_FORMAT;
}

/* Drop n bytes of the stream. */
static sio_code skip(sio_tar_plain *t, uint64_t n)
{
    while (n > 0) {
        if (t->pos == t->len) {
            t->pos = t->len = 0;
            /* Padding after a large member: read little, so the next
             * large member is read into its sample's memory directly. */
            sio_code rc = fill_at_most(t, 1, n < BLOCK && t->large
                                                 ? HEADER_READ : 0);
            if (rc)
                return rc;
            if (t->pos == t->len)
                return truncated(t);
        }
        size_t k = t->len - t->pos;
        if (k > n)
            k = (size_t)n;
        consume(t, k);
        n -= k;
    }
    return SIO_OK;
}

sio_code sio_tarp_read(sio_tar_plain *t, void *dst, size_t n)
{
    unsigned char *d = dst;
    if (n > t->data_left)
        return truncated(t);
    size_t k = t->len - t->pos;
    if (k > n)
        k = n;
    memcpy(d, t->buf + t->pos, k);
    consume(t, k);
    d += k;
    n -= k;
    t->data_left -= k;
    while (n > 0) {
        /* The buffer is empty: read the rest straight into dst. */
        size_t got = 0;
        if (t->seof)
            return truncated(t);
        sio_code rc = t->stream->ops->read(t->stream, d, n, &got);
        if (rc)
            return stream_fail(t, rc);
        if (got == 0) {
            t->seof = 1;
            return truncated(t);
        }
        d += got;
        n -= got;
        t->off += got;
        t->data_left -= got;
        t->pos = t->len = 0; /* the buffer no longer precedes t->off */
    }
    return SIO_OK;
}

sio_code sio_tarp_peek(sio_tar_plain *t, size_t n, const unsigned char **p,
                       size_t *have)
{
    sio_code rc = fill(t, n);
    *p = t->buf + t->pos;
    *have = t->len - t->pos;
    return rc;
}

int sio_tarp_buffered_from(const sio_tar_plain *t, uint64_t pos,
                           const unsigned char **p, size_t *n)
{
    uint64_t base = t->off - t->pos; /* stream offset of buf[0] */
    if (pos < base || pos > base + t->len)
        return 0;
    *p = t->buf + (size_t)(pos - base);
    *n = t->len - (size_t)(pos - base);
    return 1;
}

int sio_tarp_compressed(const unsigned char *p, size_t n)
{
    static const unsigned char zstd[] = {0x28, 0xb5, 0x2f, 0xfd};
    static const unsigned char xz[] = {0xfd, '7', 'z', 'X', 'Z', 0x00};
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
        return 1;
    if (n >= sizeof zstd && memcmp(p, zstd, sizeof zstd) == 0)
        return 1;
    if (n >= sizeof xz && memcmp(p, xz, sizeof xz) == 0)
        return 1;
    if (n >= 3 && p[0] == 'B' && p[1] == 'Z' && p[2] == 'h')
        return 1;
    return 0;
}

static int checksum_ok(const unsigned char *h);
static int all_zero(const unsigned char *h);

int sio_tarp_starts_tar(const unsigned char *p, size_t n)
{
    return n == 0 || (n >= BLOCK && (all_zero(p) || checksum_ok(p)));
}

static int all_zero(const unsigned char *h)
{
    for (size_t i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* An octal field as libarchive reads it: leading blanks, then octal
 * digits up to the first other byte. Base-256 when the high bit is set
 * (negative values: -1). */
static int64_t field_num(const unsigned char *f, size_t n)
{
    if (f[0] & 0x80) {
        if (f[0] & 0x40)
            return -1; /* negative */
        uint64_t v = f[0] & 0x3f;
        for (size_t i = 1; i < n; i++) {
            if (v > (UINT64_C(1) << 55))
                return -1;
            v = (v << 8) | f[i];
        }
        return v > (UINT64_C(1) << 62) ? -1 : (int64_t)v;
    }
    size_t i = 0;
    uint64_t v = 0;
    while (i < n && (f[i] == ' ' || f[i] == '\t'))
        i++;
    if (i < n && f[i] == '-')
        return -1; /* negative: libarchive's error */
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > (UINT64_C(1) << 58))
            return -1; /* overflow: libarchive's error */
        v = (v << 3) | (uint64_t)(f[i] - '0');
    }
    return (int64_t)v;
}

static int checksum_ok(const unsigned char *h)
{
    /* The field holds an octal number: digits, spaces and NULs only. */
    for (size_t i = 148; i < 156; i++)
        if (h[i] != ' ' && h[i] != '\0' && (h[i] < '0' || h[i] > '7'))
            return 0;
    int64_t want = field_num(h + 148, 8);
    if (want < 0)
        return 0;
    /* The sum of the block with the checksum field read as spaces:
     * unsigned bytes (the standard), then signed (old writers). */
    uint32_t usum = 0;
    for (size_t i = 0; i < BLOCK; i++)
        usum += h[i];
    for (size_t i = 148; i < 156; i++)
        usum -= h[i];
    usum += 8u * ' ';
    if ((uint64_t)want == usum)
        return 1;
    int32_t ssum = 0;
    for (size_t i = 0; i < BLOCK; i++)
        ssum += (signed char)h[i];
    for (size_t i = 148; i < 156; i++)
        ssum -= (signed char)h[i];
    ssum += 8 * ' ';
    return want == ssum;
}

/* Copy at most max bytes of a NUL-padded field into out (NUL-terminated). */
static size_t field_str(char *out, const unsigned char *f, size_t max)
{
    size_t n = 0;
    while (n < max && f[n])
        n++;
    memcpy(out, f, n);
    out[n] = '\0';
    return n;
}

/* Read an extension record (pax or GNU long name) of size n into a fresh
 * buffer (NUL-terminated), then skip its padding. NULL on error. */
static sio_code read_ext(sio_tar_plain *t, uint64_t n, char **out)
{
    char *p = malloc((size_t)n + 1);
    if (!p)
        return SIO_ERR_NOMEM;
    t->data_left = n;
    sio_code rc = sio_tarp_read(t, p, (size_t)n);
    if (!rc)
        rc = skip(t, (BLOCK - n % BLOCK) % BLOCK);
    t->data_left = 0;
    if (rc) {
        free(p);
        return rc;
    }
    p[n] = '\0';
    *out = p;
    return SIO_OK;
}

/* Parse pax records. Returns 0 when taken (path/size filled where
 * present), -1 when the records need libarchive. */
static int pax_parse(const char *p, size_t n, int global, char *path,
                     int *has_path, int64_t *size)
{
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && p[j] >= '0' && p[j] <= '9') {
            len = len * 10 + (size_t)(p[j] - '0');
            if (len > 999999 || len > n)
                return -1; /* libarchive rejects records over 1 MB */
            j++;
        }
        if (j == i || j >= n || p[j] != ' ' || len > n - i || len < 5 ||
            p[i + len - 1] != '\n')
            return -1;
        const char *kv = p + j + 1, *end = p + i + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq || eq == kv || memchr(kv, '\0', (size_t)(eq - kv)))
            return -1;
        size_t kl = (size_t)(eq - kv), vl = (size_t)(end - eq - 1);
        const char *v = eq + 1;
        if (kl == 4 && memcmp(kv, "path", 4) == 0) {
            if (global)
                return -1;
            if (vl > SIO_TARP_NAME_MAX)
                vl = SIO_TARP_NAME_MAX; /* the caller skips such names */
            for (size_t k = 0; k < vl; k++)
                if ((unsigned char)v[k] >= 0x80 || v[k] == '\0')
                    return -1; /* locale conversion: libarchive's call */
            memcpy(path, v, vl);
            path[vl] = '\0';
            /* The last path record wins; an empty one leaves the
             * header's name in force (libarchive). */
            *has_path = vl > 0;
        } else if (kl == 4 && memcmp(kv, "size", 4) == 0) {
            if (global || vl == 0 || vl > 18)
                return -1;
            int64_t s = 0;
            for (size_t k = 0; k < vl; k++) {
                if (v[k] < '0' || v[k] > '9')
                    return -1;
                s = s * 10 + (v[k] - '0');
            }
            *size = s;
        } else if ((kl >= 10 && memcmp(kv, "GNU.sparse", 10) == 0) ||
                   (kl == 10 && memcmp(kv, "hdrcharset", 10) == 0) ||
                   (kl == 15 && memcmp(kv, "SCHILY.realsize", 15) == 0)) {
            return -1; /* sparse files, other sizes, other charsets */
        }
        i += len;
    }
    return 0;
}

sio_code sio_tarp_next(sio_tar_plain *t, sio_tar_entry *e, int *what)
{
    sio_code rc;
    char *ext = NULL;
    int has_path = 0, has_long = 0, depth = 0;
    int64_t pax_size = -1;

    /* What is left of the previous entry. */
    rc = skip(t, t->data_left + t->pad);
    t->data_left = t->pad = 0;
    if (rc)
        return rc;
    e->hdr_pos = t->off;
    e->name = t->name;
    for (;;) {
        rc = fill_at_most(t, BLOCK, t->large ? HEADER_READ : 0);
        if (rc)
            return rc;
        size_t have = t->len - t->pos;
        if (have == 0 && !has_path && !has_long && e->hdr_pos == t->off) {
            *what = SIO_TARP_END; /* the stream ends at a header boundary */
            return SIO_OK;
        }
        if (have < BLOCK)
            return truncated(t);
        const unsigned char *h = t->buf + t->pos;
        if (all_zero(h)) {
            if (e->hdr_pos != t->off)
                goto unsupported; /* extension headers, then the end */
            *what = SIO_TARP_END;
            return SIO_OK;
        }
        if (!checksum_ok(h)) {
            /* A lone damaged header: libarchive drops the block and tries
             * the next one as a header (resynchronising). At the archive's
             * start, or after extension headers, libarchive's own rules
             * apply: it takes over at the entry's first header. */
            if (t->off == t->start || t->off != e->hdr_pos)
                goto unsupported;
            consume(t, BLOCK);
            e->hdr_pos = t->off;
            continue;
        }
        char type = (char)h[156];
        int64_t size = field_num(h + 124, 12);
        if (size < 0)
            goto unsupported;
        int gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
        int posix = !gnu && memcmp(h + 257, "ustar", 5) == 0;
        if (gnu && (h[386] || h[483]))
            goto unsupported; /* GNU sparse map or real size */
        if (++depth > 32)
            goto unsupported; /* libarchive: too many special headers */
        if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
            if ((uint64_t)size > SIO_TARP_EXT_MAX)
                goto unsupported;
            consume(t, BLOCK);
            rc = read_ext(t, (uint64_t)size, &ext);
            if (rc)
                return rc;
            if (type == 'x' || type == 'g') {
                if (pax_parse(ext, (size_t)size, type == 'g', t->name,
                              &has_path, &pax_size) != 0)
                    goto unsupported;
            } else if (type == 'L' && !has_path) {
                size_t n = strnlen(ext, (size_t)size);
                if (n > SIO_TARP_NAME_MAX)
                    n = SIO_TARP_NAME_MAX;
                memcpy(t->name, ext, n);
                t->name[n] = '\0';
                has_long = 1;
            }
            free(ext);
            ext = NULL;
            continue;
        }
        if (pax_size >= 0)
            size = pax_size;
        if (!has_path && !has_long) {
            size_t n = 0;
            if (posix && h[345]) {
                n = field_str(t->name, h + 345, 155);
                if (t->name[n - 1] != '/')
                    t->name[n++] = '/';
            }
            field_str(t->name + n, h, 100);
        }
        size_t nl = strlen(t->name);
        switch (type) {
        case '0':
        case '7':
        case '\0':
            if (nl > 0 && t->name[nl - 1] == '/')
                goto unsupported; /* libarchive: a directory, no data */
            e->regular = 1;
            break;
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
            if (size != 0)
                goto unsupported;
            e->regular = 0;
            break;
        default:
            goto unsupported; /* hard links, sparse, volumes, vendors */
        }
        consume(t, BLOCK);
        if (e->regular)
            t->large = (uint64_t)size >= LARGE_ENTRY;
        e->size = (uint64_t)size;
        t->data_left = (uint64_t)size;
        t->pad = (BLOCK - (uint64_t)size % BLOCK) % BLOCK;
        *what = SIO_TARP_ENTRY;
        return SIO_OK;
    }
unsupported:
    free(ext);
    *what = SIO_TARP_UNSUPPORTED;
    return SIO_OK;
}
