/*
 * tarparse.c — the plain tar reader (contract in tarparse.h).
 *
 * The rules are libarchive 3.6.2's tar reader's (archive_read_support_
 * format_tar.c), taken one by one where an entry is read here:
 *  - a block is a header when its checksum field holds octal digits and
 *    matches the unsigned or signed byte sum; an all-zero block, or the
 *    stream ending at a header boundary, ends the archive (after extension
 *    headers other than global ones that is a damaged archive); a partial
 *    header or partial data is a truncated archive; a lone header whose
 *    checksum does not match is dropped and the next block tried
 *    (libarchive resynchronises), after an extension header it is fatal;
 *  - names: the GNU long name and the pax path of the last 'L' and the
 *    last 'x' of the chain (libarchive keeps one buffer for each), the
 *    outermost kind winning; else the ustar prefix "/" name (POSIX magic),
 *    else the name field; sizes: the last pax size, else the octal or
 *    base-256 field (negative or overflowing: fatal);
 *  - types: what libarchive does not special-case is a regular file;
 *    links, devices, directories and FIFOs carry no data whatever their
 *    size says; hard links and 'M' entries take their type from the mode,
 *    and a hard link's data follows libarchive's format heuristic;
 *  - the first block must pass libarchive's tar bid.
 * What only libarchive interprets (tarparse.h) is "unsupported" and left
 * to it, from the offset of the entry's first header.
 */
#include "tar/tarparse.h"

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

void sio_tarp_reset(sio_tar_plain *t, sio_stream *stream, unsigned char *buf,
                    size_t cap, uint64_t offset)
{
    t->stream = stream;
    t->buf = buf;
    t->cap = cap;
    t->pos = t->len = 0;
    t->off = t->start = offset;
    t->seof = 0;
    t->large = 0;
    t->fmt = FMT_NONE;
    t->data_left = t->pad = 0;
    t->rc = SIO_OK;
    t->damaged = 0;
    t->name[0] = t->lname[0] = t->err[0] = '\0';
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
        if (t->pos == t->len && t->stream->ops->skip) {
            /* Nothing buffered: a stream that can skip is not read. */
            sio_code rc = t->stream->ops->skip(t->stream, n);
            if (rc)
                return stream_fail(t, rc);
            t->pos = t->len = 0;
            t->off += n;
            return SIO_OK;
        }
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

/* libarchive's validate_number_field: base-256, or blanks, octal digits
 * and then only blanks and NULs. */
static int number_field_ok(const unsigned char *f, size_t n)
{
    if (f[0] == 128 || f[0] == 255 || f[0] == 0)
        return 1;
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    while (i < n && f[i] >= '0' && f[i] <= '7')
        i++;
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != 0)
            return 0;
    return 1;
}

/* libarchive's tar bid on a header block (not all zero). */
static int bid_score(const unsigned char *h)
{
    int bid = 0;
    if (!checksum_ok(h))
        return 0;
    bid += 48;
    if (memcmp(h + 257, "ustar\0", 6) == 0 && memcmp(h + 263, "00", 2) == 0)
        bid += 56;
    if (memcmp(h + 257, "ustar ", 6) == 0 && memcmp(h + 263, " \0", 2) == 0)
        bid += 56;
    unsigned char t = h[156];
    if (t != 0 && !(t >= '0' && t <= '9') && !(t >= 'A' && t <= 'Z') &&
        !(t >= 'a' && t <= 'z'))
        return 0;
    bid += 2;
    static const struct { unsigned short off, len; } fields[] = {
        {100, 8}, {108, 8}, {116, 8}, {136, 12}, {124, 12}, {329, 8},
        {337, 8}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!number_field_ok(h + fields[i].off, fields[i].len))
            return 0;
    return bid;
}

/* Would libarchive's tar bid take this block as the start of a tar? */
static int bid_ok(const unsigned char *h)
{
    return all_zero(h) || bid_score(h) > 0;
}

int sio_tarp_starts_tar(const unsigned char *p, size_t n)
{
    return n == 0 || (n >= BLOCK && bid_ok(p));
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

/* Printable ASCII up to the first NUL of a field (at least one byte):
 * its length, else 0. */
static size_t printable_field(const unsigned char *f, size_t max)
{
    size_t n = 0;
    while (n < max && f[n]) {
        if (f[n] < 0x20 || f[n] > 0x7e)
            return 0;
        n++;
    }
    return n;
}

/* The block at t->off failed its checksum: note where it lies and, if it
 * reads as a regular member's header (type, octal size, printable name),
 * its name and the blocks it and its data take. Nothing here is trusted:
 * the caller compares it with what came before and after. */
static void damaged_header(sio_tar_plain *t, const unsigned char *h)
{
    t->dmg_off = t->off;
    t->dmg_blocks = 0;
    t->dmg_name[0] = '\0';
    if (h[156] != '0' && h[156] != '\0' && h[156] != '7')
        return;
    if (!number_field_ok(h + 124, 12) || (h[124] & 0x80))
        return;
    int64_t size = field_num(h + 124, 12);
    size_t nl = printable_field(h, 100), pl = 0;
    if (size < 0 || nl == 0)
        return;
    if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345]) {
        pl = printable_field(h + 345, 155);
        if (pl == 0)
            return;
        memcpy(t->dmg_name, h + 345, pl);
        if (t->dmg_name[pl - 1] != '/')
            t->dmg_name[pl++] = '/';
    }
    memcpy(t->dmg_name + pl, h, nl);
    t->dmg_name[pl + nl] = '\0';
    t->dmg_blocks = 1 + ((uint64_t)size + BLOCK - 1) / BLOCK;
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

/* What reading one pax record set said. */
enum { PAX_DONE = 0, PAX_STOPPED = 1, PAX_FATAL = 2, PAX_OTHER = 3 };

/* A decimal value as libarchive's tar_atol10 reads it (leading blanks,
 * digits up to the first other byte); -1 for a negative value or an
 * overflow (libarchive refuses both). */
static int64_t dec_value(const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v == '-')
        return -1;
    int64_t x = 0;
    for (; *v >= '0' && *v <= '9'; v++) {
        if (x > (INT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (*v - '0');
    }
    return x;
}

/*
 * Parse the records of a pax header as libarchive 3.6 does (p is modified:
 * line ends become NULs). Returns PAX_DONE when every record was read
 * (*path set when the header names a non-empty one), PAX_STOPPED when a
 * malformed record ended the reading (libarchive warns; sizes read before
 * it stay, the path does not apply), PAX_FATAL for what libarchive refuses
 * (a key starting with '=', a negative or overflowing size), PAX_OTHER
 * for what only libarchive interprets (sparse files, other sizes,
 * charsets, non-ASCII paths).
 */
static int pax_parse(char *p, size_t n, int global, char *path,
                     int *has_path, int64_t *size)
{
    char *attr = p;
    size_t left = n;
    int got_path = 0;
    while (left > 0) {
        size_t len = 0, l = left;
        char *q = attr;
        while (l > 0) {
            if (*q == ' ') {
                q++;
                l--;
                break;
            }
            if (*q < '0' || *q > '9')
                return PAX_STOPPED;
            len = len * 10 + (size_t)(*q - '0');
            if (len > 999999)
                return PAX_STOPPED;
            q++;
            l--;
        }
        if (len > left || len < 1 || attr[len - 1] != '\n')
            return PAX_STOPPED;
        attr[len - 1] = '\0';
        char *key = q;
        if (key[0] == '=')
            return PAX_FATAL;
        while (*q && *q != '=')
            q++;
        if (*q == '\0')
            return PAX_STOPPED;
        *q = '\0';
        const char *v = q + 1;
        if (strcmp(key, "path") == 0) {
            size_t vl = strlen(v); /* strcpy: up to a NUL */
            for (size_t k = 0; k < vl; k++)
                if ((unsigned char)v[k] >= 0x80)
                    return PAX_OTHER; /* locale conversion */
            if (!global) {
                if (vl > SIO_TARP_NAME_MAX)
                    vl = SIO_TARP_NAME_MAX; /* the caller skips it */
                memcpy(path, v, vl);
                path[vl] = '\0';
                got_path = vl > 0; /* the last record wins */
            }
        } else if (strcmp(key, "size") == 0) {
            if (!global) {
                int64_t x = dec_value(v);
                if (x < 0)
                    return PAX_FATAL;
                *size = x;
            }
        } else if (strncmp(key, "GNU.sparse", 10) == 0 ||
                   strcmp(key, "hdrcharset") == 0 ||
                   strcmp(key, "SCHILY.realsize") == 0) {
            if (!global)
                return PAX_OTHER;
        }
        attr += len;
        left -= len;
    }
    *has_path = got_path;
    return PAX_DONE;
}

static sio_code damaged(sio_tar_plain *t, const char *why)
{
    snprintf(t->err, sizeof t->err, "%s at offset %llu", why,
             (unsigned long long)t->off);
    return SIO_ERR_FORMAT;
}

/* The file type bits of a mode field (libarchive takes them from it for
 * hard links and 'M' entries). */
static int mode_is_regular(const unsigned char *h)
{
    int64_t m = field_num(h + 100, 8);
    return m >= 0 && (m & 0170000) == 0100000;
}

static sio_code next_entry(sio_tar_plain *t, sio_tar_entry *e, int *what,
                           char **paxp)
{
    sio_code rc;
    char *ext = NULL;
    /* The chain of extension headers before the entry. libarchive keeps
     * one buffer for the long name ('L') and one for the pax header ('x'),
     * so the last of each is what counts; every 'L' frame then applies the
     * long name and every 'x' frame the pax path (when its records were
     * all read and it names one), innermost first: the outermost of the
     * two kinds wins. The pax size is the last pax header's. */
    int nexts = 0, only_global = 1, has_long = 0, first_long = -1;
    char *pax = NULL; /* the last pax header's records (also in *paxp, so
                         the caller frees it on every return) */
    size_t pax_len = 0;
    int64_t pax_size = -1;
    int name_set = 0;

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
        if (have >= BLOCK && t->damaged && t->dmg_blocks && nexts == 0 &&
            t->off - t->dmg_off < t->dmg_blocks * BLOCK &&
            all_zero(t->buf + t->pos)) {
            /* Zeros inside the data a damaged header's size gives: data
             * (an all-zero stretch of a payload), not the archive's end,
             * which would lose the rest of the shard without a word.
             * (libarchive ends the archive here.) */
            consume(t, BLOCK);
            e->hdr_pos = t->off;
            if (t->damaged < UINT32_MAX)
                t->damaged++;
            continue;
        }
        if (have == 0 || (have >= BLOCK && all_zero(t->buf + t->pos))) {
            /* The end of the archive: clean at a header boundary or after
             * global headers only; after other extension headers
             * libarchive calls the archive damaged. */
            if (nexts && !only_global)
                return damaged(t, "damaged tar archive (no entry after an "
                                  "extension header)");
            if (have == 0 && t->need_end) {
                /* The bytes end at a header boundary with no end-of-archive
                 * block: an archive cut there (an interrupted upload, a
                 * partial copy) or written without them; either way the
                 * group being read may have lost members (libarchive calls
                 * this the end). */
                snprintf(t->err, sizeof t->err,
                         "tar archive ends without its end-of-archive blocks "
                         "at offset %llu (truncated, or written without them)",
                         (unsigned long long)t->off);
                return SIO_ERR_FORMAT;
            }
            *what = SIO_TARP_END;
            return SIO_OK;
        }
        if (have < BLOCK)
            return truncated(t);
        const unsigned char *h = t->buf + t->pos;
        if (!checksum_ok(h)) {
            /* At the archive's start the format is not recognised
             * (libarchive's call). After extension headers libarchive
             * fails the archive. A lone damaged header: the block is
             * dropped and the next one tried as a header
             * (libarchive resynchronises). */
            if (t->off == t->start)
                goto unsupported;
            if (nexts)
                return damaged(t, "damaged tar archive (bad header checksum "
                                  "after an extension header)");
            if (t->damaged == 0)
                damaged_header(t, h);
            consume(t, BLOCK);
            e->hdr_pos = t->off;
            if (t->damaged < UINT32_MAX)
                t->damaged++;
            continue;
        }
        if (nexts >= 32)
            goto unsupported; /* libarchive: too many special headers */
        char type = (char)h[156];
        int gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
        int posix = !gnu && memcmp(h + 257, "ustar", 5) == 0;
        /* libarchive's format state (it decides hard links' sizes). */
        if (type == 'x' || type == 'g')
            t->fmt = FMT_PAX;
        else if (type != 'L' && type != 'K') {
            if (gnu)
                t->fmt = FMT_GNU;
            else if (posix) {
                if (t->fmt != FMT_PAX)
                    t->fmt = FMT_USTAR;
            } else
                t->fmt = FMT_OLD;
        }
        if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
            int64_t size = field_num(h + 124, 12);
            if (size < 0 || (uint64_t)size > SIO_TARP_EXT_MAX)
                return damaged(t, "tar extension header too large");
            consume(t, BLOCK);
            rc = read_ext(t, (uint64_t)size, &ext);
            if (rc)
                return rc;
            nexts++;
            if (type != 'g')
                only_global = 0;
            if (type == 'x') {
                free(pax);
                pax = *paxp = ext; /* the last one is what counts */
                pax_len = (size_t)size;
                ext = NULL;
                if (first_long < 0)
                    first_long = 0;
            } else if (type == 'L') {
                size_t n = strnlen(ext, (size_t)size);
                if (n > SIO_TARP_NAME_MAX)
                    n = SIO_TARP_NAME_MAX;
                memcpy(t->lname, ext, n);
                t->lname[n] = '\0';
                has_long = 1;
                if (first_long < 0)
                    first_long = 1;
            }
            /* 'g' (global pax) and 'K' (long link) change nothing here. */
            free(ext);
            ext = NULL;
            continue;
        }
        if (pax) {
            char path[SIO_TARP_NAME_MAX + 1];
            int has_path = 0;
            int r = pax_parse(pax, pax_len, 0, path, &has_path, &pax_size);
            free(pax);
            pax = *paxp = NULL;
            if (r == PAX_OTHER)
                goto unsupported;
            if (r == PAX_FATAL)
                return damaged(t, "tar pax header refused");
            if (r == PAX_DONE && has_path && !(has_long && first_long)) {
                memcpy(t->name, path, strlen(path) + 1);
                name_set = 1;
            }
        }
        if (has_long && !name_set) {
            memcpy(t->name, t->lname, strlen(t->lname) + 1);
            name_set = 1;
        }
        if (gnu && (h[386] || h[483]))
            goto unsupported; /* GNU sparse map or real size */
        int64_t size = field_num(h + 124, 12);
        if (size < 0)
            return damaged(t, "tar entry with a negative or overflowing "
                              "size");
        if (pax_size >= 0)
            size = pax_size;
        if (!name_set) {
            size_t n = 0;
            if (posix && h[345]) {
                n = field_str(t->name, h + 345, 155);
                if (t->name[n - 1] != '/')
                    t->name[n++] = '/';
            }
            field_str(t->name + n, h, 100);
        }
        /* The entry's type and the data that follows, by libarchive's
         * header_common. */
        int regular;
        uint64_t data = (uint64_t)size;
        switch (type) {
        case '1': {
            /* A hard link: a regular file when its header size is not 0
             * (else its mode says); whether data follows is libarchive's
             * heuristic: pax archives obey the size, GNU and old ones
             * ignore it, ustar ones ignore it when the header bids as
             * ustar (above 50). A pax size is applied after that. */
            int64_t hsize = field_num(h + 124, 12);
            regular = hsize > 0 ? 1 : mode_is_regular(h);
            data = 0;
            if (hsize > 0 && (t->fmt == FMT_PAX ||
                              (t->fmt == FMT_USTAR && bid_score(h) <= 50)))
                data = (uint64_t)hsize;
            if (pax_size >= 0)
                data = (uint64_t)pax_size;
            break;
        }
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
            regular = 0;
            /* No data follows, whatever the header's size says; a pax
             * size is applied after that and stands. */
            data = pax_size >= 0 ? (uint64_t)pax_size : 0;
            break;
        case 'D': /* GNU incremental directory: data skipped */
            regular = 0;
            break;
        case 'M': /* multi-volume continuation: type from the mode */
            regular = mode_is_regular(h);
            break;
        case 'A':
        case 'S':
        case 'V':
        case 'X':
            goto unsupported; /* ACLs, sparse files, volume labels */
        default: /* '0', '7', NUL and any other type: a regular file */
            regular = 1;
            break;
        }
        size_t nl = strlen(t->name);
        if (regular && nl > 0 && t->name[nl - 1] == '/') {
            regular = 0; /* libarchive: a directory, and no data */
            data = 0;
        }
        consume(t, BLOCK);
        e->regular = regular;
        if (regular)
            t->large = data >= LARGE_ENTRY;
        e->size = data;
        t->data_left = data;
        t->pad = (BLOCK - data % BLOCK) % BLOCK;
        *what = SIO_TARP_ENTRY;
        return SIO_OK;
    }
unsupported:
    free(ext);
    *what = SIO_TARP_UNSUPPORTED;
    return SIO_OK;
}

sio_code sio_tarp_next(sio_tar_plain *t, sio_tar_entry *e, int *what)
{
    char *pax = NULL;
    t->damaged = 0;
    sio_code rc = next_entry(t, e, what, &pax);
    free(pax);
    return rc;
}
