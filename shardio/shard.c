/*
 * shard.c — streaming one tar shard into WebDataset samples.
 *
 * A shard is read through a backend stream, so only one read buffer and
 * the sample being built are in memory, whatever the shard's size. Two
 * readers share the grouping code below:
 *  - an uncompressed tar (the common case) is parsed here (tarparse.c's
 *    rules: ustar/GNU/pax headers, GNU long names, pax path and size), and
 *    member data is read straight from the stream into the sample's pool
 *    block, with no per-member allocation and no locale conversion of
 *    member names;
 *  - compressed shards (gzip, zstd, xz, bzip2, detected from the first
 *    bytes) and tar entries only libarchive interprets (sparse files, ACL
 *    and volume headers, pax charsets, ...) go through libarchive. The
 *    switch happens at a header boundary: libarchive gets the bytes still
 *    buffered from that header on, or the stream is reopened at its offset
 *    (a ranged read), so both readers produce the same groups and offsets
 *    (tests/unit/test_tarparse.c, fuzz_shard).
 * Grouping follows product.md / upstream WebDataset: key = path up to
 * the first dot of the last component, extension = the rest (lowercased);
 * consecutive members with one key form a sample; non-regular members, names
 * without such a split and top-level "__*__" names are skipped; a repeated
 * field makes that sample bad (SIO_ERR_SAMPLE) but not the shard.
 *
 * Threading: a sio_shard is used by one thread at a time.
 * Ownership: the shard owns its stream, archive and builder; samples it
 * returns are independent references.
 */
#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "sample.h"
#include "shardio_index.h"
#include "tarparse.h"

/* Longest member name we accept (PATH_MAX-like; libarchive accepts more).
 * The plain reader truncates longer names to this length, so they are
 * skipped alike. */
#define SHARD_NAME_MAX SIO_TARP_NAME_MAX

/* Tests: read every shard through libarchive. */
static int force_libarchive;

void sio_shard_force_libarchive(int on)
{
    force_libarchive = on;
}

struct sio_shard {
    sio_io *io;
    char *url;
    uint32_t index;
    sio_shard_limits lim;
    sio_stream *stream;
    sio_code stream_rc;      /* error seen by the read callback */
    char stream_err[256];
    unsigned char *rbuf;
    size_t rcap;
    struct archive *ar;      /* libarchive reader (NULL: plain reader) */
    const sio_backend_ops *ops; /* how to reopen the stream at an offset */
    void *ctx;               /* (ops NULL: it cannot be reopened) */
    int plain;               /* the plain reader is in use */
    sio_tar_plain tp;        /* its state */
    const unsigned char *handoff; /* bytes libarchive gets first */
    size_t handoff_len;
    uint64_t la_base;        /* stream offset where libarchive started */
    sio_tar_entry cur;       /* the entry whose header was read last */
    int pending;             /* cur: header read, data not yet consumed */
    int eof;
    int bad;                 /* current sample had a repeated field */
    char bad_reason[320];
    uint64_t groups;         /* key groups seen (good and bad), counted
                                from at.first_group */
    sample_builder sb;
    sio_shard_at at;         /* where the reader started, what it skips */
    uint64_t gstart;         /* offset of the current group's first header */
    int filtered;            /* compressed: offsets are not byte offsets */
    char err[640];
};

int sio_split_key(const char *name, size_t *key_len)
{
    const char *last = strrchr(name, '/');
    const char *base = last ? last + 1 : name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base)
        return -1;
    *key_len = (size_t)(dot - name);
    return 0;
}

static la_ssize_t read_cb(struct archive *a, void *ud, const void **buf)
{
    sio_shard *sh = ud;
    size_t got = 0;
    if (sh->handoff_len) {
        /* What the plain reader had buffered from la_base on. */
        *buf = sh->handoff;
        got = sh->handoff_len;
        sh->handoff_len = 0;
        return (la_ssize_t)got;
    }
    sio_code rc = sh->stream->ops->read(sh->stream, sh->rbuf, sh->rcap, &got);
    if (rc) {
        sh->stream_rc = rc;
        snprintf(sh->stream_err, sizeof sh->stream_err, "%s",
                 sh->stream->ops->errmsg(sh->stream));
        archive_set_error(a, EIO, "%s", sh->stream_err);
        return -1;
    }
    *buf = sh->rbuf;
    return (la_ssize_t)got;
}

/* Common part of opening: limits, buffers, libarchive over sh->stream. */
static sio_code shard_start(sio_shard *sh, sio_io *io, const char *url,
                            uint32_t index, const sio_shard_limits *limits,
                            sio_error *err)
{
    sh->io = io;
    sh->index = index;
    if (limits)
        sh->lim = *limits;
    if (!sh->lim.member_max)
        sh->lim.member_max = SIO_MEMBER_MAX_DEFAULT;
    if (!sh->lim.sample_max)
        sh->lim.sample_max = SIO_SAMPLE_MAX_DEFAULT;
    if (!sh->lim.fields_max)
        sh->lim.fields_max = SIO_FIELDS_MAX_DEFAULT;
    sb_init(&sh->sb, sh->lim.sample_max, sh->lim.fields_max);
    sh->url = strdup(url);
    sh->rcap = sio_io_read_buffer(io);
    sh->rbuf = malloc(sh->rcap);
    if (!sh->url || !sh->rbuf)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    return SIO_OK;
}

static sio_code shard_open_archive(sio_shard *sh, sio_error *err)
{
    sh->ar = archive_read_new();
    if (!sh->ar)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    archive_read_support_filter_gzip(sh->ar);
    archive_read_support_filter_zstd(sh->ar);
    archive_read_support_filter_xz(sh->ar);
    archive_read_support_filter_bzip2(sh->ar);
    archive_read_support_format_tar(sh->ar);
    archive_read_support_format_empty(sh->ar);
    if (archive_read_open(sh->ar, sh, NULL, read_cb, NULL) != ARCHIVE_OK)
        return sio_seterr(err, sh->stream_rc ? sh->stream_rc : SIO_ERR_FORMAT,
                          "url=%s: %s", sh->url,
                          sh->stream_rc ? sh->stream_err
                                        : archive_error_string(sh->ar));
    return SIO_OK;
}

/* Stream read errors seen by the plain reader become the shard's. */
static void plain_stream_error(sio_shard *sh)
{
    if (sh->tp.rc && !sh->stream_rc) {
        sh->stream_rc = sh->tp.rc;
        snprintf(sh->stream_err, sizeof sh->stream_err, "%s", sh->tp.err);
    }
}

/* Open sh's object from byte pos to sh->at.end: through the job's cache
 * when it has one, else from the store. */
static sio_code open_stream(sio_shard *sh, uint64_t pos, sio_error *err)
{
    if (sh->at.cache)
        return sio_cache_open(sh->at.cache, sh->ops, sh->ctx, sh->url,
                              sh->at.size_hint ? sh->at.size_hint
                                               : UINT64_MAX,
                              pos, sh->at.end, &sh->stream, err);
    if (sh->ops->open_range && (pos || sh->at.end != UINT64_MAX))
        return sh->ops->open_range(sh->ctx, sh->url, pos, sh->at.end,
                                   &sh->stream, err);
    return sh->ops->open(sh->ctx, sh->url, pos, &sh->stream, err);
}

/* Let libarchive go on from stream offset pos (a header boundary): with
 * the bytes the plain reader still buffers from there, else by reopening
 * the stream at pos. */
static sio_code handover(sio_shard *sh, uint64_t pos, sio_error *err)
{
    const unsigned char *p;
    size_t n;
    sio_code rc;

    sh->plain = 0;
    sh->la_base = pos;
    if (sio_tarp_buffered_from(&sh->tp, pos, &p, &n)) {
        sh->handoff = p;
        sh->handoff_len = n;
    } else if (sh->ops) {
        sh->stream->ops->close(sh->stream);
        sh->stream = NULL;
        rc = open_stream(sh, pos, err);
        if (rc)
            return rc;
    } else {
        return sio_seterr(err, SIO_ERR_FORMAT,
                          "url=%s: tar entry at offset %llu needs a reader "
                          "restart this stream cannot do",
                          sh->url, (unsigned long long)pos);
    }
    return shard_open_archive(sh, err);
}

/* Choose the reader from the first bytes: the plain one for an
 * uncompressed tar, libarchive for compressed data (and, when testing,
 * for everything). */
static sio_code start_reader(sio_shard *sh, sio_error *err)
{
    const unsigned char *p;
    size_t have = 0;
    sio_code rc;

    sio_tarp_init(&sh->tp, sh->stream, sh->rbuf, sh->rcap, sh->at.offset);
    sh->plain = 1;
    rc = sio_tarp_peek(&sh->tp, 512, &p, &have);
    if (rc) {
        plain_stream_error(sh);
        return sio_seterr(err, sh->stream_rc, "url=%s: %s", sh->url,
                          sh->stream_err);
    }
    if (force_libarchive || sio_tarp_compressed(p, have) ||
        !sio_tarp_starts_tar(p, have))
        return handover(sh, sh->at.offset, err);
    return SIO_OK;
}

sio_code sio_shard_open(sio_io *io, const char *url, uint32_t index,
                        const sio_shard_limits *limits, sio_shard **out,
                        sio_error *err)
{
    return sio_shard_open_at(io, url, index, limits, NULL, out, err);
}

sio_code sio_shard_open_at(sio_io *io, const char *url, uint32_t index,
                           const sio_shard_limits *limits,
                           const sio_shard_at *at, sio_shard **out,
                           sio_error *err)
{
    const sio_backend_ops *ops;
    void *ctx;
    sio_code rc;
    sio_shard *sh = calloc(1, sizeof *sh);

    *out = NULL;
    if (!sh)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    if (at)
        sh->at = *at;
    else
        sh->at.end = UINT64_MAX;
    if (sh->at.end <= sh->at.offset) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "empty shard range");
        goto out;
    }
    sh->groups = sh->at.first_group;
    rc = shard_start(sh, io, url, index, limits, err);
    if (rc)
        goto out;
    rc = sio_io_backend(io, url, &ops, &ctx, err);
    if (rc)
        goto out;
    sh->ops = ops;
    sh->ctx = ctx;
    rc = open_stream(sh, sh->at.offset, err);
    if (rc)
        goto out;
    rc = start_reader(sh, err);
    if (rc)
        goto out;
    *out = sh;
    sh = NULL;
out:
    sio_shard_close(sh);
    return rc;
}

sio_code sio_shard_open_stream(sio_io *io, sio_stream *stream,
                               const char *url, uint32_t index,
                               const sio_shard_limits *limits,
                               sio_shard **out, sio_error *err)
{
    sio_code rc;
    sio_shard *sh = calloc(1, sizeof *sh);

    *out = NULL;
    if (!sh) {
        stream->ops->close(stream);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    sh->stream = stream;
    sh->at.end = UINT64_MAX;
    rc = shard_start(sh, io, url, index, limits, err);
    if (rc)
        goto out;
    rc = start_reader(sh, err);
    if (rc)
        goto out;
    *out = sh;
    sh = NULL;
out:
    sio_shard_close(sh);
    return rc;
}

/* A stream over memory ---------------------------------------------- */

typedef struct mem_stream {
    sio_stream base;
    const unsigned char *p;
    size_t left;
} mem_stream;

static sio_code mem_read(sio_stream *s, void *buf, size_t cap, size_t *got)
{
    mem_stream *m = (mem_stream *)s;
    size_t n = m->left < cap ? m->left : cap;
    if (n)
        memcpy(buf, m->p, n);
    m->p += n;
    m->left -= n;
    *got = n;
    return SIO_OK;
}

static const char *mem_errmsg(const sio_stream *s)
{
    return "";
}

static void mem_close(sio_stream *s)
{
    free(s);
}

static const sio_stream_ops mem_stream_ops = {mem_read, mem_errmsg,
                                              mem_close, NULL};

sio_code sio_stream_memory(const void *data, size_t len, sio_stream **out)
{
    mem_stream *m = calloc(1, sizeof *m);
    if (!m)
        return SIO_ERR_NOMEM;
    m->base.ops = &mem_stream_ops;
    m->p = data;
    m->left = len;
    *out = &m->base;
    return SIO_OK;
}

void sio_shard_close(sio_shard *sh)
{
    if (!sh)
        return;
    if (sh->ar)
        archive_read_free(sh->ar);
    if (sh->stream)
        sh->stream->ops->close(sh->stream);
    sb_free(&sh->sb);
    free(sh->rbuf);
    free(sh->url);
    free(sh);
}

const char *sio_shard_errmsg(const sio_shard *sh)
{
    return sh->err;
}

static sio_code fail(sio_shard *sh, sio_code rc, const char *what)
{
    if (sh->stream_rc) {
        rc = sh->stream_rc;
        what = sh->stream_err;
    }
    snprintf(sh->err, sizeof sh->err, "url=%s: %s", sh->url, what);
    sh->eof = 1;
    return rc;
}

/* Read the next header into sh->cur (sh->pending set); pending 0 at the
 * end. */
static sio_code next_header(sio_shard *sh)
{
    sio_error e2;
    if (sh->plain) {
        int what = 0;
        sio_code rc = sio_tarp_next(&sh->tp, &sh->cur, &what);
        if (rc) {
            plain_stream_error(sh);
            return fail(sh, rc, sh->tp.err);
        }
        if (what != SIO_TARP_UNSUPPORTED) {
            sh->pending = what == SIO_TARP_ENTRY;
            return SIO_OK;
        }
        rc = handover(sh, sh->cur.hdr_pos, &e2);
        if (rc)
            return fail(sh, rc, e2.msg);
    }
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(sh->ar, &e);
        if (r == ARCHIVE_EOF) {
            sh->pending = 0;
            return SIO_OK;
        }
        if (r == ARCHIVE_RETRY)
            continue;
        if (r < ARCHIVE_WARN)
            return fail(sh, SIO_ERR_FORMAT, archive_error_string(sh->ar));
        sh->cur.name = archive_entry_pathname(e);
        sh->cur.regular = archive_entry_filetype(e) == AE_IFREG;
        la_int64_t size =
            archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        sh->cur.size = size < 0 ? UINT64_MAX : (uint64_t)size;
        sh->cur.hdr_pos =
            sh->la_base + (uint64_t)archive_read_header_position(sh->ar);
        if (!sh->filtered && archive_filter_count(sh->ar) > 1)
            sh->filtered = 1;
        sh->pending = 1;
        return SIO_OK;
    }
}

/* Is this member to be skipped entirely (not a regular file, metadata)? */
static int skip_member(const sio_tar_entry *e, size_t *keylen)
{
    const char *name = e->name;
    if (!e->regular)
        return 1;
    if (!name || !*name)
        return 1;
    size_t nl = strlen(name);
    if (!strchr(name, '/') && nl >= 4 && name[0] == '_' && name[1] == '_' &&
        name[nl - 1] == '_' && name[nl - 2] == '_')
        return 1;
    return sio_split_key(name, keylen) != 0;
}

/* Read the pending member's data into the builder as field `ext`. */
static sio_code read_member(sio_shard *sh, const sio_tar_entry *e,
                            const char *ext)
{
    sio_code rc;
    if (sh->groups < sh->at.skip_until)
        return SIO_OK; /* read past: the next header read skips the data */
    uint64_t size = e->size;
    if (size > sh->lim.member_max) {
        snprintf(sh->bad_reason, sizeof sh->bad_reason,
                 "member of %llu bytes above member_max=%llu",
                 (unsigned long long)size,
                 (unsigned long long)sh->lim.member_max);
        sh->bad = 1;
        return SIO_OK; /* data skipped by the next header read */
    }
    unsigned char *dst = sb_begin_field(&sh->sb, ext, size, &rc);
    if (!dst) {
        if (rc == SIO_ERR_NOMEM)
            return fail(sh, rc, "out of memory");
        snprintf(sh->bad_reason, sizeof sh->bad_reason,
                 "sample above sample_max=%llu bytes or fields_max=%u",
                 (unsigned long long)sh->lim.sample_max, sh->lim.fields_max);
        sh->bad = 1;
        return SIO_OK;
    }
    if (sh->plain) {
        /* Straight from the stream into the sample's block. */
        rc = sio_tarp_read(&sh->tp, dst, (size_t)size);
        if (rc) {
            plain_stream_error(sh);
            return fail(sh, rc, sh->tp.err);
        }
        sb_end_field(&sh->sb, (size_t)size);
        return SIO_OK;
    }
    size_t got = 0;
    while (got < (size_t)size) {
        la_ssize_t r = archive_read_data(sh->ar, dst + got, (size_t)size - got);
        if (r < 0)
            return fail(sh, SIO_ERR_FORMAT, archive_error_string(sh->ar));
        if (r == 0)
            break;
        got += (size_t)r;
    }
    if (got != (size_t)size)
        return fail(sh, SIO_ERR_FORMAT, "truncated member");
    sb_end_field(&sh->sb, got);
    return SIO_OK;
}

/* Offer the group just read to the index (good: the builder's fields). */
static void offer_group(sio_shard *sh, uint64_t g, uint64_t end, int bad)
{
    sio_index_field fv[32];
    sio_index_field *f = fv;
    size_t nf = bad ? 0 : sh->sb.nf;
    if (!sh->at.ix || !sh->sb.key)
        return;
    if (nf == 0)
        f = NULL;
    else if (nf > sizeof fv / sizeof fv[0]) {
        f = malloc(nf * sizeof *f);
        if (!f)
            return;
    }
    for (size_t i = 0; i < nf; i++) {
        f[i].name = sh->sb.names + sh->sb.f[i].name_off;
        f[i].size = sh->sb.f[i].len;
    }
    sio_index_group grp = {.offset = sh->gstart,
                           .end = end,
                           .bytes = bad ? 0 : sh->sb.dlen,
                           .flags = bad ? SIO_INDEX_GROUP_BAD : 0};
    sio_index_offer(sh->at.ix, g, &grp, sh->sb.key, sh->sb.keylen, f, nf,
                    sh->filtered);
    if (f && f != fv)
        free(f);
}

/* Read the next group into the builder. Returns SIO_OK with *open set
 * when a group was read (sh->bad tells whether it is good), *open = 0 at
 * the end of the shard. */
static sio_code read_group(sio_shard *sh, int *open)
{
    sio_code rc = SIO_OK;
    char ext[SHARD_NAME_MAX];

    *open = 0;
    sb_reset(&sh->sb);
    sh->bad = 0;
    for (;;) {
        if (!sh->pending) {
            rc = next_header(sh);
            if (rc)
                return rc;
        }
        if (!sh->pending) { /* end of the archive */
            sh->eof = 1;
            break;
        }
        const sio_tar_entry *e = &sh->cur;
        const char *name = e->name;
        size_t keylen = 0;
        if (skip_member(e, &keylen)) {
            sh->pending = 0;
            continue;
        }
        size_t nl = strlen(name);
        if (nl >= SHARD_NAME_MAX) {
            sh->pending = 0;
            continue;
        }
        if (*open) {
            /* A different key closes the current sample; the member stays
             * pending for the next call. */
            if (keylen != sh->sb.keylen ||
                memcmp(name, sh->sb.key, keylen) != 0)
                break;
        } else {
            rc = sb_set_key(&sh->sb, name, keylen);
            if (rc)
                return fail(sh, rc, "out of memory");
            *open = 1;
            sh->gstart = e->hdr_pos;
        }
        sh->pending = 0;
        if (sh->groups < sh->at.skip_until)
            continue; /* read past: no field is kept */
        for (size_t i = keylen + 1; i <= nl; i++)
            ext[i - keylen - 1] = (char)tolower((unsigned char)name[i]);
        if (sb_has_field(&sh->sb, ext)) {
            snprintf(sh->bad_reason, sizeof sh->bad_reason,
                     "repeated field %.64s", ext);
            sh->bad = 1;
            continue;
        }
        if (sh->bad)
            continue;
        rc = read_member(sh, e, ext);
        if (rc)
            return rc;
    }
    return SIO_OK;
}

sio_code sio_shard_next(sio_shard *sh, const sio_sample **out)
{
    sio_code rc = SIO_OK;
    int open;

    *out = NULL;
    for (;;) {
        if (sh->eof)
            return SIO_OK;
        rc = read_group(sh, &open);
        if (rc)
            return rc;
        if (!open) {
            /* The end of the shard: every group up to here is known. */
            sio_index_finish(sh->at.ix, sh->groups);
            return SIO_OK; /* *out stays NULL */
        }
        uint64_t end = sh->eof ? UINT64_MAX : sh->cur.hdr_pos;
        uint64_t idx = sh->groups++;
        if (idx < sh->at.skip_until)
            continue;
        offer_group(sh, idx, end, sh->bad);
        if (sh->eof && !sh->bad)
            sio_index_finish(sh->at.ix, sh->groups);
        if (sh->bad) {
            snprintf(sh->err, sizeof sh->err, "url=%s key=%.256s: %s",
                     sh->url, sh->sb.key ? sh->sb.key : "", sh->bad_reason);
            if (sh->eof)
                sio_index_finish(sh->at.ix, sh->groups);
            sb_reset(&sh->sb);
            return SIO_ERR_SAMPLE;
        }
        rc = sb_finish(&sh->sb, sh->url, sh->index, idx, out);
        if (rc)
            return fail(sh, rc, "out of memory");
        return SIO_OK;
    }
}

uint64_t sio_shard_groups(const sio_shard *sh)
{
    return sh->groups;
}
