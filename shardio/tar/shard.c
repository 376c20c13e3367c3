/*
 * shard.c — streaming one tar shard into WebDataset samples.
 *
 * A shard is read through a backend stream, so only one read buffer and
 * the sample being built are in memory, whatever the shard's size. Two
 * readers share the group reader below (read_group):
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
 *    (tests/unit/tar/test_tarparse.c, fuzz_shard);
 *  - zip shards (a local file header "PK\3\4", or an empty zip, in the
 *    first bytes) go through libarchive's streamable zip reader, which
 *    reads the local headers in order and never the central directory.
 *    Regular entries are grouped like tar members. A zip is indexed like a
 *    compressed shard (stream-only: a seek re-reads it from the start),
 *    because libarchive's header positions lag the real local headers.
 *    Entries whose size is only in a trailing data descriptor are read in
 *    chunks up to member_max. What cannot be read from a stream fails the
 *    shard with a message naming it (see zip_* below and
 *    tests/unit/tar/test_zip.c): encrypted entries, entries whose end cannot be
 *    found (stored with a data descriptor that has no signature),
 *    compression methods libarchive lacks. A plan stages a zip as the tar
 *    of its samples: the group builder below writes what it reads to a tar
 *    tap (sio_shard_set_tar_tap), so the tar's groups are the zip's.
 * Grouping follows upstream WebDataset (docs/architecture.md, "Shard
 * formats"), by the rule in group.c, the one the plan's reader follows
 * too: key = path up to the first dot of the last component, extension =
 * the rest (lowercased); consecutive members with one key form a sample;
 * non-regular members, names without such a split and top-level "__*__"
 * names are skipped; a repeated field or a limit passed makes that sample
 * bad (SIO_ERR_SAMPLE) but not the shard.
 *
 * Threading: a sio_shard is used by one thread at a time.
 * Ownership: the shard owns its stream, archive and builder; samples it
 * returns are independent references.
 */
#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"
#include "core/sample.h"
#include "shardio_index.h"
#include "tar/group.h"
#include "tar/tarparse.h"
#include "shardio_tarhdr.h"

/* Longest member name we accept (PATH_MAX-like; libarchive accepts more).
 * The plain reader truncates longer names to this length, so they are
 * skipped alike. */
#define SHARD_NAME_MAX SIO_TARP_NAME_MAX
_Static_assert(SIO_GROUP_EXT_MAX >= SHARD_NAME_MAX, "ext buffers");

/* Tests: read every shard through libarchive. */
static int force_libarchive;

void sio_shard_force_libarchive(int on)
{
    force_libarchive = on;
}

struct sio_shard {
    int skim;                /* sio_shard_skim: members' sizes only */
    int skimmed;             /* a group was skimmed by the last call */
    sio_io *io;
    char *url;
    uint32_t index;
    sio_shard_limits lim;
    sio_stream *stream;
    sio_code stream_rc;      /* error seen by the read callback */
    char stream_err[256];
    unsigned char *rbuf; /* read buffer: a sample-pool block of rbcap */
    size_t rcap, rbcap;
    struct archive *ar;      /* libarchive reader (NULL: plain reader) */
    const sio_backend_ops *ops; /* how to reopen the stream at an offset */
    void *ctx;               /* (ops NULL: it cannot be reopened) */
    int plain;               /* the plain reader is in use */
    sio_tar_plain tp;        /* its state */
    const unsigned char *handoff; /* bytes libarchive gets first */
    size_t handoff_len;
    uint64_t la_base;        /* stream offset where libarchive started */
    uint64_t la_dend;        /* libarchive's (tar) position where the last
                                entry's data and padding end: still there
                                at its end, no end-of-archive block was
                                read */
    sio_tar_entry cur;       /* the entry whose header was read last */
    int pending;             /* cur: header read, data not yet consumed */
    int eof;
    sio_group g;             /* the group being read (the rule, group.h):
                                g.bad, g.reason: it is bad, and why */
    int damaged;             /* a damaged header was dropped since the
                                last member taken (tar_damage) */
    int bad_next;            /* the next group is bad (a damaged header
                                before its first member) */
    int dmg_known;           /* plain reader: the one damaged header
                                pending read as a regular member's, and
                                exactly its header and data were dropped */
    char dmg_name[SIO_TARP_DMG_NAME_MAX + 1]; /* that member's name */
    uint64_t dmg_off;        /* and where its header lies */
    int lone;                /* a sample of one member whose header is
                                damaged lies after the group just read:
                                it is the next group, bad (damage_owner 3) */
    char lone_key[SIO_TARP_DMG_NAME_MAX + 1];
    uint64_t lone_off;       /* its offset: the open group ends there */
    int need;                /* the next group is bad unless it has a
                                member of extension need_ext (a damaged
                                header taken for the group before's may
                                have been its own) */
    char need_ext[SIO_TARP_DMG_NAME_MAX + 1];
    uint64_t damage_seen;    /* damaged-header events (tests) */
    int bad_kind;            /* why the last bad group was (tests):
                                SIO_SHARD_BAD_* */
    uint64_t groups;         /* key groups seen (good and bad), counted
                                from at.first_group */
    sample_builder sb;
    sio_shard_at at;         /* where the reader started, what it skips */
    uint64_t gstart;         /* offset of the current group's first header */
    int filtered;            /* compressed: offsets are not byte offsets */
    int zip;                 /* a zip shard (libarchive's streamable zip) */
    int zdrain;              /* zip: the current entry's data must be read
                                to its end before the next header */
    int zknown;              /* zip: the current entry's size is known */
    int zcrypt;              /* zip: the current entry is encrypted */
    unsigned char *zbuf;     /* zip: an entry of unknown size, being read */
    size_t zcap;
    /* The tar tap (sio_shard_set_tar_tap). */
    sio_shard_tap_fn tap;
    void *tap_ud;
    int tap_wrote;           /* a member of the group being built went */
    int tap_bad;             /* ... and its "bad" members */
    int tap_done;            /* the tap's tar ended */
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
    sio_group_limits(&sh->lim);
    sio_group_init(&sh->g);
    sb_init(&sh->sb, sh->lim.sample_max, sh->lim.fields_max);
    sh->url = strdup(url);
    sh->rcap = sh->at.read_cap ? sh->at.read_cap : sio_io_read_buffer(io);
    sh->rbuf = sio_pool_get(sh->rcap, &sh->rbcap);
    if (!sh->url || !sh->rbuf)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    return SIO_OK;
}

/* libarchive's message (some failures set none). */
static const char *la_error(sio_shard *sh)
{
    const char *m = archive_error_string(sh->ar);
    return m && *m ? m : "libarchive failed without a message";
}

static sio_code shard_open_archive(sio_shard *sh, sio_error *err)
{
    sh->ar = archive_read_new();
    if (!sh->ar)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    if (sh->zip) {
        /* Local headers in stream order; no filter (a zip compresses
         * entry by entry), no central directory. */
        archive_read_support_format_zip_streamable(sh->ar);
    } else {
        archive_read_support_filter_gzip(sh->ar);
        archive_read_support_filter_zstd(sh->ar);
        archive_read_support_filter_xz(sh->ar);
        archive_read_support_filter_bzip2(sh->ar);
        archive_read_support_format_tar(sh->ar);
        archive_read_support_format_empty(sh->ar);
    }
    if (archive_read_open(sh->ar, sh, NULL, read_cb, NULL) != ARCHIVE_OK)
        return sio_seterr(err, sh->stream_rc ? sh->stream_rc : SIO_ERR_FORMAT,
                          "url=%s: %s", sh->url,
                          sh->stream_rc ? sh->stream_err : la_error(sh));
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
    if (sh->at.use_fd) {
        if (sio_stream_pread(sh->at.fd, pos, sh->at.end, &sh->stream))
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        if (sh->at.grow)
            sio_stream_pread_wait(sh->stream, sh->at.grow->wait,
                                  sh->at.grow->ud);
        return SIO_OK;
    }
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
    sh->la_dend = 0;
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

/* Does a zip start here? A local file header, the end record of an empty
 * zip, or the marker of a split/spanned archive before a local header.
 * (Checked only where the bytes are not a tar header.) */
static int zip_magic(const unsigned char *p, size_t n)
{
    if (n < 4 || p[0] != 'P' || p[1] != 'K')
        return 0;
    if ((p[2] == 3 && p[3] == 4) || (p[2] == 5 && p[3] == 6))
        return 1;
    return n >= 8 &&
           ((p[2] == 7 && p[3] == 8) || (p[2] == '0' && p[3] == '0')) &&
           memcmp(p + 4, "PK\3\4", 4) == 0;
}

/* Choose the reader from the first bytes: the plain one for an
 * uncompressed tar, libarchive for compressed data and zip (and, when
 * testing, for everything). */
static sio_code start_reader(sio_shard *sh, sio_error *err)
{
    const unsigned char *p;
    size_t have = 0;
    sio_code rc;

    sio_tarp_init(&sh->tp, sh->stream, sh->rbuf, sh->rcap, sh->at.offset);
    /* Read to the shard's end (not a byte range of it): the bytes must
     * end in the archive's end blocks. */
    sh->tp.need_end = sh->at.end == UINT64_MAX;
    sh->plain = 1;
    if (sh->at.use_fd && sh->at.decompressed)
        sh->filtered = 1; /* positions in a decompressed stream */
    rc = sio_tarp_peek(&sh->tp, 512, &p, &have);
    if (rc) {
        plain_stream_error(sh);
        return sio_seterr(err, sh->stream_rc, "url=%s: %s", sh->url,
                          sh->stream_err);
    }
    if (!sio_tarp_starts_tar(p, have) && !sio_tarp_compressed(p, have) &&
        zip_magic(p, have)) {
        /* Zip offsets are not byte offsets (stream-only index): a zip is
         * only ever read from its start. */
        if (sh->at.offset)
            return sio_seterr(err, SIO_ERR_FORMAT,
                              "url=%s: zip data at offset %llu: a zip shard "
                              "is read from its start only",
                              sh->url, (unsigned long long)sh->at.offset);
        sh->zip = 1;
        sh->filtered = 1;
        return handover(sh, 0, err);
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

void sio_shard_close(sio_shard *sh)
{
    if (!sh)
        return;
    if (sh->ar)
        archive_read_free(sh->ar);
    if (sh->stream)
        sh->stream->ops->close(sh->stream);
    sb_free(&sh->sb);
    sio_group_free(&sh->g);
    free(sh->zbuf);
    sio_pool_put(sh->rbuf, sh->rbcap);
    free(sh->url);
    free(sh);
}

const char *sio_shard_errmsg(const sio_shard *sh)
{
    return sh->err;
}

static void tap_end(sio_shard *sh);
static void tap_cut(sio_shard *sh);

static sio_code fail(sio_shard *sh, sio_code rc, const char *what)
{
    if (sh->stream_rc) {
        rc = sh->stream_rc;
        what = sh->stream_err;
    }
    snprintf(sh->err, sizeof sh->err, "url=%s: %s", sh->url, what);
    sh->eof = 1;
    /* Between samples the tap's tar ends whole; inside one it ends short
     * (the sample is lost on both sides). */
    if (sh->tap && !sh->tap_done && !sh->tap_wrote)
        tap_end(sh);
    else if (sh->tap && !sh->tap_done)
        tap_cut(sh);
    sh->tap_done = 1;
    return rc;
}

/* The tar tap --------------------------------------------------------- */

void sio_shard_set_tar_tap(sio_shard *sh, sio_shard_tap_fn fn, void *ud)
{
    sh->tap = fn;
    sh->tap_ud = ud;
}

static const unsigned char tap_zeros[2 * SIO_TAR_BLOCK];

/* Member `name` of size bytes (data: its bytes, or NULL with size 0). */
static sio_code tap_member(sio_shard *sh, const char *name,
                           const unsigned char *data, uint64_t size)
{
    unsigned char blk[SIO_TAR_BLOCK];
    size_t nl = strlen(name);
    int fits;
    sio_code rc = SIO_OK;
    if (!sio_tar_name_fits(name, nl)) {
        size_t rl = sio_tar_pax_path_len(nl);
        char head[32];
        sio_tar_header(blk, "././@PaxHeader", 14, 'x', rl, &fits);
        int hl = snprintf(head, sizeof head, "%zu path=", rl);
        rc = sh->tap(sh->tap_ud, blk, sizeof blk);
        if (!rc)
            rc = sh->tap(sh->tap_ud, head, (size_t)hl);
        if (!rc)
            rc = sh->tap(sh->tap_ud, name, nl);
        if (!rc)
            rc = sh->tap(sh->tap_ud, "\n", 1);
        size_t pad = (SIO_TAR_BLOCK - rl % SIO_TAR_BLOCK) % SIO_TAR_BLOCK;
        if (!rc && pad)
            rc = sh->tap(sh->tap_ud, tap_zeros, pad);
    }
    sio_tar_header(blk, name, nl, '0', size, &fits);
    if (!rc)
        rc = sh->tap(sh->tap_ud, blk, sizeof blk);
    if (!rc && size)
        rc = sh->tap(sh->tap_ud, data, (size_t)size);
    size_t pad = (size_t)((SIO_TAR_BLOCK - size % SIO_TAR_BLOCK) %
                          SIO_TAR_BLOCK);
    if (!rc && pad)
        rc = sh->tap(sh->tap_ud, tap_zeros, pad);
    sh->tap_wrote = 1;
    return rc;
}

/* The group being built is bad: two empty "<key>.bad" members, once. */
static sio_code tap_bad_group(sio_shard *sh)
{
    if (sh->tap_bad || !sh->sb.key)
        return SIO_OK;
    sh->tap_bad = 1;
    size_t kl = sh->sb.keylen;
    char *name = malloc(kl + 5);
    if (!name)
        return SIO_ERR_NOMEM;
    memcpy(name, sh->sb.key, kl);
    memcpy(name + kl, ".bad", 5);
    sio_code rc = tap_member(sh, name, NULL, 0);
    if (!rc)
        rc = tap_member(sh, name, NULL, 0);
    free(name);
    return rc;
}

/* The member just read into the builder (its last field) goes, or the
 * group's "bad" members when it made the group bad. */
static sio_code tap_read(sio_shard *sh, const char *name, size_t nf0)
{
    if (sh->g.bad)
        return tap_bad_group(sh);
    if (sh->sb.nf == nf0)
        return SIO_OK; /* nothing kept (read past) */
    const sample_field_ref *f = &sh->sb.f[sh->sb.nf - 1];
    return tap_member(sh, name, sh->sb.data + f->data_off, f->len);
}

/* The tar ends inside a header block: its reader fails there, and the
 * sample open then is lost (a tar that ends after a whole member reads
 * as ended there). */
static void tap_cut(sio_shard *sh)
{
    unsigned char blk[SIO_TAR_BLOCK];
    int fits;
    if (!sh->tap || sh->tap_done)
        return;
    sh->tap_done = 1;
    sio_tar_header(blk, "__shardcast_cut__", 17, '0', 0, &fits);
    (void)sh->tap(sh->tap_ud, blk, SIO_TAR_BLOCK / 2);
}

/* The tar's end: two zero blocks. */
static void tap_end(sio_shard *sh)
{
    if (!sh->tap || sh->tap_done)
        return;
    sh->tap_done = 1;
    (void)sh->tap(sh->tap_ud, tap_zeros, sizeof tap_zeros);
}

/* Zip ------------------------------------------------------------------ */

/*
 * Entry names flagged UTF-8 (general purpose bit 11) are converted by
 * libarchive from UTF-8 to the charset of the calling thread's locale; in
 * the "C" locale of the server every non-ASCII name fails. Headers are
 * read under a UTF-8 LC_CTYPE (this thread only, uselocale), so such names
 * come out as UTF-8. Names without the flag are taken as raw bytes.
 */
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static locale_t utf8_locale; /* (locale_t)0: none available */

static void utf8_init(void)
{
    static const char *const names[] = {"C.UTF-8", "C.utf8", "en_US.UTF-8"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !utf8_locale;
         i++)
        utf8_locale = newlocale(LC_CTYPE_MASK, names[i], (locale_t)0);
}

/* archive_read_next_header under the UTF-8 locale. */
static int zip_next_header(sio_shard *sh, struct archive_entry **e)
{
    pthread_once(&utf8_once, utf8_init);
    locale_t old = utf8_locale ? uselocale(utf8_locale) : (locale_t)0;
    int r = archive_read_next_header(sh->ar, e);
    if (old)
        uselocale(old);
    return r;
}

/* Fail the shard at zip entry `name` with a message naming the problem. */
static sio_code zip_fail(sio_shard *sh, sio_code rc, const char *name,
                         const char *what)
{
    char m[512];
    const char *fmt = archive_format_name(sh->ar);
    const char *hint = "";
    int wl = (int)strlen(what);
    /* libarchive names the entry's method in the format name: "ZIP 2.0
     * (uncompressed)". A stored entry of unknown size ends only where a
     * data descriptor with its signature and the data's CRC follows. */
    if (!sh->zknown && fmt &&
        (strstr(fmt, "(uncompressed)") || strstr(fmt, "(stored)")))
        hint = " (a stored entry whose size is only in a data descriptor "
               "after the data: its end is found only by the descriptor's "
               "signature PK\\x07\\x08 and CRC, so without them it cannot "
               "be streamed)";
    while (wl > 0 && isspace((unsigned char)what[wl - 1]))
        wl--; /* some libarchive messages end in a newline */
    snprintf(m, sizeof m, "zip entry %.200s: %.*s%s", name ? name : "?", wl,
             what, hint);
    return fail(sh, rc, m);
}

/* What a zip entry's header tells: refuse what cannot be read. */
static sio_code zip_entry_check(sio_shard *sh, struct archive_entry *e)
{
    const char *name = archive_entry_pathname(e);
    sh->zknown = archive_entry_size_is_set(e) && archive_entry_size(e) >= 0;
    /* An entry of unknown size is read to its end even when skipped (a
     * directory, "__*__", no extension): reading checks the CRC of the
     * descriptor that ends it, libarchive's skip takes the first
     * signature. read_group decides for the entries of samples. */
    sh->zdrain = !sh->zknown;
    if (!name) {
        /* libarchive could not convert a name flagged UTF-8. */
        char m[512];
        snprintf(m, sizeof m, "zip entry name cannot be read: %s (%s)",
                 utf8_locale ? "flagged UTF-8 but not valid UTF-8"
                             : "no UTF-8 locale (C.UTF-8) to read it",
                 la_error(sh));
        return fail(sh, SIO_ERR_FORMAT, m);
    }
    /* Refused when the grouping reaches it (read_group), so the samples
     * before it are still delivered. */
    sh->zcrypt = archive_entry_is_encrypted(e) != 0;
    return SIO_OK;
}

/*
 * Read the rest of the current entry's data and drop it. Entries that are
 * part of a sample are always read to their end, whether their data is
 * kept or not (a bad sample, a seek reading past groups), so the stream
 * position after them and the errors seen do not depend on what was kept:
 * libarchive's skip finds the end of some entries differently from its
 * reader (it looks for a descriptor signature without checking the CRC).
 * Only entries of known size that are skipped or over member_max are left
 * to libarchive's skip (by their compressed size: a bomb is not inflated).
 */
static sio_code zip_drain(sio_shard *sh)
{
    sh->zdrain = 0;
    for (;;) {
        const void *b;
        size_t n;
        la_int64_t off;
        int r = archive_read_data_block(sh->ar, &b, &n, &off);
        if (r == ARCHIVE_EOF)
            return SIO_OK;
        if (r != ARCHIVE_OK)
            return zip_fail(sh, SIO_ERR_FORMAT, sh->cur.name, la_error(sh));
    }
}

/* Read the current entry (declared size `size`) into dst, to its end. */
static sio_code zip_read_sized(sio_shard *sh, const char *name,
                               unsigned char *dst, uint64_t size)
{
    uint64_t got = 0;
    for (;;) {
        const void *b;
        size_t n;
        la_int64_t off;
        int r = archive_read_data_block(sh->ar, &b, &n, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK)
            return zip_fail(sh, SIO_ERR_FORMAT, name, la_error(sh));
        if (off < 0 || (uint64_t)off != got)
            return zip_fail(sh, SIO_ERR_FORMAT, name, "data out of order");
        if (n > size - got) {
            char m[128];
            snprintf(m, sizeof m, "more data than its declared size of %llu "
                     "bytes", (unsigned long long)size);
            return zip_fail(sh, SIO_ERR_FORMAT, name, m);
        }
        if (n)
            memcpy(dst + got, b, n);
        got += n;
    }
    sh->zdrain = 0;
    if (got != size) {
        char m[128];
        snprintf(m, sizeof m, "%llu bytes of data, %llu declared",
                 (unsigned long long)got, (unsigned long long)size);
        return zip_fail(sh, SIO_ERR_FORMAT, name, m);
    }
    sb_end_field(&sh->sb, (size_t)size);
    return SIO_OK;
}

/* Scratch memory for an entry of unknown size: `want` bytes (at most
 * max). */
static int zip_reserve(sio_shard *sh, uint64_t want, uint64_t max)
{
    if (want <= sh->zcap)
        return 0;
    uint64_t cap = sh->zcap ? sh->zcap : 64 * 1024;
    while (cap < want)
        cap = cap > max / 2 ? max : cap * 2;
    if (cap > SIZE_MAX)
        return -1;
    unsigned char *nb = realloc(sh->zbuf, (size_t)cap);
    if (!nb)
        return -1;
    sh->zbuf = nb;
    sh->zcap = (size_t)cap;
    return 0;
}

/* The scratch is kept for the next entry up to this size. */
#define ZIP_SCRATCH_KEEP (1u << 20)

/*
 * Read the current entry, whose size is only in a data descriptor after its
 * data (general purpose bit 3), as field `ext`: into scratch memory, which
 * holds at most member_max bytes and what the sample has room for; past
 * that the sample is bad and the rest of the data is drained later.
 */
static sio_code zip_read_unsized(sio_shard *sh, const char *name,
                                 const char *ext)
{
    sio_code rc = SIO_OK;
    uint64_t room = sh->sb.data_max - sh->sb.dlen;
    uint64_t keep = room < sh->lim.member_max ? room : sh->lim.member_max;
    uint64_t got = 0;
    int end = 0;
    while (got <= sh->lim.member_max) {
        const void *b;
        size_t n;
        la_int64_t off;
        int r = archive_read_data_block(sh->ar, &b, &n, &off);
        if (r == ARCHIVE_EOF) {
            end = 1;
            break;
        }
        if (r != ARCHIVE_OK)
            return zip_fail(sh, SIO_ERR_FORMAT, name, la_error(sh));
        if (off < 0 || (uint64_t)off != got)
            return zip_fail(sh, SIO_ERR_FORMAT, name, "data out of order");
        if (n && got + n <= keep) {
            if (zip_reserve(sh, got + n, keep))
                return fail(sh, SIO_ERR_NOMEM, "out of memory");
            memcpy(sh->zbuf + got, b, n);
        }
        got += n;
    }
    if (end)
        sh->zdrain = 0;
    /* Its size now known, the rule's limits (group.c) decide. */
    if (sio_group_grow(&sh->g, got, &sh->lim) == 0) {
        unsigned char *dst = got > keep ? NULL
                                        : sb_begin_field(&sh->sb, ext, got,
                                                         &rc);
        if (!dst)
            return fail(sh, rc ? rc : SIO_ERR_LIMIT,
                        rc == SIO_ERR_NOMEM ? "out of memory"
                                            : "sample builder refused a "
                                              "field the grouping rule took");
        if (got)
            memcpy(dst, sh->zbuf, (size_t)got);
        sb_end_field(&sh->sb, (size_t)got);
    }
    if (sh->zcap > ZIP_SCRATCH_KEEP) {
        free(sh->zbuf);
        sh->zbuf = NULL;
        sh->zcap = 0;
    }
    return SIO_OK;
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
            if (sh->tp.damaged)
                sh->damage_seen++; /* the error came while resynchronising */
            plain_stream_error(sh);
            return fail(sh, rc, sh->tp.err);
        }
        if (sh->tp.damaged) {
            /* One damaged header since the last member, and what was
             * dropped is exactly its header and data by its size field:
             * its name may tell whose member it was (damage_owner). */
            sh->dmg_known = !sh->damaged && sh->tp.dmg_blocks != 0 &&
                            sh->tp.damaged == sh->tp.dmg_blocks;
            if (sh->dmg_known) {
                memcpy(sh->dmg_name, sh->tp.dmg_name,
                       strlen(sh->tp.dmg_name) + 1);
                sh->dmg_off = sh->tp.dmg_off;
            }
            sh->damaged = 1;
            sh->damage_seen++;
        }
        if (what != SIO_TARP_UNSUPPORTED) {
            sh->pending = what == SIO_TARP_ENTRY;
            return SIO_OK;
        }
        rc = handover(sh, sh->cur.hdr_pos, &e2);
        if (rc)
            return fail(sh, rc, e2.msg);
    }
    if (sh->zip && sh->zdrain) {
        sio_code rc = zip_drain(sh);
        if (rc)
            return rc;
    }
    for (;;) {
        struct archive_entry *e = NULL;
        int r = sh->zip ? zip_next_header(sh, &e)
                        : archive_read_next_header(sh->ar, &e);
        if (r == ARCHIVE_EOF) {
            /* libarchive ends a tar at a header boundary without its end
             * blocks as at them; the plain reader calls it truncated
             * (tarparse.c), and so does this one. */
            if (!sh->zip && sh->at.end == UINT64_MAX &&
                (uint64_t)archive_filter_bytes(sh->ar, 0) == sh->la_dend) {
                char m[200];
                snprintf(m, sizeof m,
                         "tar archive ends without its end-of-archive "
                         "blocks at offset %llu of its %s (truncated, or "
                         "written without them)",
                         (unsigned long long)(sh->la_base + sh->la_dend),
                         sh->filtered ? "decompressed bytes" : "bytes");
                return fail(sh, SIO_ERR_FORMAT, m);
            }
            sh->pending = 0;
            return SIO_OK;
        }
        if (r == ARCHIVE_RETRY) {
            /* A tar header with a bad checksum, dropped (the plain
             * reader's t->damaged). */
            if (!sh->zip) {
                sh->damaged = 1;
                sh->dmg_known = 0; /* libarchive says nothing of it */
                sh->damage_seen++;
            }
            continue;
        }
        if (r < ARCHIVE_WARN) {
            if (sh->zip && e && archive_entry_is_metadata_encrypted(e))
                return fail(sh, SIO_ERR_UNSUPPORTED,
                            "zip with encrypted metadata (strong "
                            "encryption): cannot be read");
            /* The streamable zip reader says nothing when the data ends
             * where a local header or the central directory should be. */
            if (sh->zip && !archive_error_string(sh->ar))
                return fail(sh, SIO_ERR_FORMAT,
                            "zip data ends without a central directory "
                            "(truncated?)");
            return fail(sh, SIO_ERR_FORMAT, la_error(sh));
        }
        if (sh->zip) {
            sio_code rc = zip_entry_check(sh, e);
            if (rc)
                return rc;
        }
        sh->cur.name = archive_entry_pathname(e);
        sh->cur.regular = archive_entry_filetype(e) == AE_IFREG;
        la_int64_t size =
            archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        sh->cur.size = size < 0 ? UINT64_MAX : (uint64_t)size;
        sh->cur.hdr_pos =
            sh->la_base + (uint64_t)archive_read_header_position(sh->ar);
        /* libarchive stands at the entry's data now (its headers read). */
        if (!sh->zip)
            sh->la_dend = (uint64_t)archive_filter_bytes(sh->ar, 0) +
                          ((sh->cur.size == UINT64_MAX ? 0 : sh->cur.size) +
                           511) / 512 * 512;
        if (!sh->filtered && archive_filter_count(sh->ar) > 1)
            sh->filtered = 1;
        sh->pending = 1;
        return SIO_OK;
    }
}

/* Read the pending member's data into the builder as field `ext` (the
 * rule took it as a field: sio_group_field checked its limits). */
static sio_code read_member(sio_shard *sh, const sio_tar_entry *e,
                            const char *ext)
{
    sio_code rc;
    if (sh->zip && !sh->zknown)
        return zip_read_unsized(sh, e->name, ext);
    uint64_t size = e->size;
    /* Skimming (sio_shard_skim): its size only, the next header read
     * skips the data. */
    int skim = sh->skim && sh->plain;
    unsigned char *dst = NULL;
    if (skim)
        rc = sb_size_field(&sh->sb, ext, size);
    else
        dst = sb_begin_field(&sh->sb, ext, size, &rc);
    if (rc) /* the builder's bounds are the rule's limits, checked */
        return fail(sh, rc,
                    rc == SIO_ERR_NOMEM ? "out of memory"
                                        : "sample builder refused a field "
                                          "the grouping rule took");
    if (skim)
        return SIO_OK;
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
    if (sh->zip)
        return zip_read_sized(sh, e->name, dst, size);
    size_t got = 0;
    while (got < (size_t)size) {
        la_ssize_t r = archive_read_data(sh->ar, dst + got, (size_t)size - got);
        if (r < 0)
            return fail(sh, SIO_ERR_FORMAT, la_error(sh));
        if (r == 0)
            break;
        got += (size_t)r;
    }
    if (got != (size_t)size)
        return fail(sh, SIO_ERR_FORMAT, "truncated member");
    sb_end_field(&sh->sb, got);
    return SIO_OK;
}

/* Tell the recorder (an index being built) that the shard ended. */
static void finish_groups(sio_shard *sh)
{
    if (sh->at.rec)
        sh->at.rec->finish(sh->at.rec->ud, sh->groups);
}

/* Offer the group just read to the index (good: the builder's fields). */
static void offer_group(sio_shard *sh, uint64_t g, uint64_t end, int bad)
{
    sio_index_field fv[32];
    sio_index_field *f = fv;
    size_t nf = bad ? 0 : sh->sb.nf;
    if (!sh->at.rec || !sh->sb.key)
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
    sh->at.rec->offer(sh->at.rec->ud, g, &grp, sh->sb.key, sh->sb.keylen, f,
                      nf, sh->filtered);
    if (f && f != fv)
        free(f);
}

/* A header with a bad checksum was dropped inside the current sample or
 * next to it: whatever member it began is lost, so the sample is bad
 * (counted, or fatal under on_error=fail), never delivered shortened. */
static void tar_damage(sio_shard *sh)
{
    snprintf(sh->g.reason, sizeof sh->g.reason,
             "damaged tar header (bad checksum) in or next to the sample: "
             "a member may be lost");
    sh->g.bad = 1;
    sh->bad_kind = SIO_SHARD_BAD_DAMAGE;
}

/* A damaged header lies between the open group and the next one (key
 * `next`; NULL at the archive's end): whose member it began, as the rule
 * tells (sio_group_damage_owner); a sample of its own (3) is noted to
 * follow (sh->lone). */
static int damage_owner(sio_shard *sh, const char *next, size_t nextlen,
                        char *ext)
{
    size_t kl = 0;
    int who = sio_group_damage_owner(&sh->g, sh->dmg_name, sh->dmg_known,
                                     next, nextlen, &kl, ext);
    if (who == 3) {
        sh->lone = 1;
        memcpy(sh->lone_key, sh->dmg_name, kl);
        sh->lone_key[kl] = '\0';
        sh->lone_off = sh->dmg_off;
    }
    return who;
}

/* The open group is closing: the extension a damage before it asked of
 * it (damage_owner 1). */
static void need_check(sio_shard *sh)
{
    if (sh->need && sio_group_has_ext(&sh->g, sh->need_ext) != 1)
        tar_damage(sh);
    sh->need = 0;
}

/* Read the next group into the builder. Returns SIO_OK with *open set
 * when a group was read (sh->g.bad tells whether it is good), *open = 0
 * at the end of the shard. Which members make the group, and when it is
 * bad, is the rule's (group.c); this reads their data and follows the
 * damaged headers the tar reader reports. */
static sio_code read_group(sio_shard *sh, int *open)
{
    sio_code rc = SIO_OK;
    char ext[SIO_GROUP_EXT_MAX];

    *open = 0;
    sb_reset(&sh->sb);
    sio_group_reset(&sh->g);
    sh->tap_wrote = sh->tap_bad = 0;
    sh->bad_kind = SIO_SHARD_BAD_OTHER; /* unless tar_damage says more */
    if (sh->bad_next) {
        sh->bad_next = 0;
        tar_damage(sh);
    }
    for (;;) {
        if (!sh->pending) {
            rc = next_header(sh);
            if (rc)
                return rc;
        }
        if (!sh->pending) { /* end of the archive */
            if (*open)
                need_check(sh);
            if (sh->damaged && *open &&
                !(sh->at.end != UINT64_MAX &&
                  sio_group_damage_after(&sh->g, sh->dmg_name,
                                         sh->dmg_known))) {
                char ext2[SIO_TARP_DMG_NAME_MAX + 1];
                /* at the tar's end only: a bounded reader cannot tell */
                int who = sh->at.end == UINT64_MAX
                              ? damage_owner(sh, NULL, 0, ext2)
                              : 0;
                if (who != 3)
                    tar_damage(sh);
            }
            sh->damaged = 0;
            sh->eof = 1;
            tap_end(sh);
            break;
        }
        const sio_tar_entry *e = &sh->cur;
        const char *name = e->name;
        int first = 0;
        int what = sio_group_member(&sh->g, e, ext, &first);
        if (what < 0)
            return fail(sh, SIO_ERR_NOMEM, "out of memory");
        if (sh->zip && sh->zcrypt) {
            /* An encrypted zip entry fails the shard; a sample it does
             * not belong to is complete and delivered first. */
            if (*open && what != SIO_GROUP_MEMBER)
                break;
            return zip_fail(sh, SIO_ERR_UNSUPPORTED, name,
                            "encrypted: encrypted zip entries cannot be "
                            "read (no passphrase)");
        }
        if (what == SIO_GROUP_SKIP) {
            /* Not a member, but past a damaged header it makes the
             * dropped blocks no longer that header's alone. */
            if (sh->damaged)
                sh->dmg_known = 0;
            sh->pending = 0;
            continue;
        }
        if (what == SIO_GROUP_NEXT) {
            /* A different key closes the current sample; the member stays
             * pending for the next call. A damaged header between two
             * samples: the one whose member it began is bad; when that
             * cannot be told, both are. */
            need_check(sh);
            if (sh->damaged) {
                char ext2[SIO_TARP_DMG_NAME_MAX + 1];
                size_t keylen = 0;
                (void)sio_tar_skip_member(e, &keylen);
                int who = damage_owner(sh, name, keylen, ext2);
                if (who == 0 || who == 1)
                    tar_damage(sh);
                if (who == 0 || who == 2)
                    sh->bad_next = 1;
                if (who == 1 || who == 3) {
                    sh->need = 1;
                    memcpy(sh->need_ext, ext2, strlen(ext2) + 1);
                }
                sh->damaged = 0;
            }
            break;
        }
        if (first) {
            rc = sb_set_key(&sh->sb, sh->g.key, sh->g.keylen);
            if (rc)
                return fail(sh, rc, "out of memory");
            *open = 1;
            sh->gstart = e->hdr_pos;
        }
        if (sh->damaged) {
            tar_damage(sh);
            sh->damaged = 0;
        }
        sh->pending = 0;
        /* A zip entry of the sample is read to its end before the next
         * header (zip_drain), unless it is known to be over member_max
         * (libarchive skips it by its compressed size, even a bomb). */
        if (sh->zip)
            sh->zdrain = !(sh->zknown && e->size > sh->lim.member_max);
        if (sh->groups < sh->at.skip_until)
            continue; /* read past: no field is kept */
        int was_bad = sh->g.bad;
        size_t name_off = 0;
        int keep = sio_group_field(&sh->g, ext,
                                   sh->zip && !sh->zknown
                                       ? SIO_GROUP_SIZE_UNKNOWN
                                       : e->size,
                                   &sh->lim, &name_off);
        if (keep < 0)
            return fail(sh, SIO_ERR_NOMEM, "out of memory");
        if (!keep) {
            /* Bad now (a repeated extension, a limit): the tap's "bad"
             * members. */
            if (!was_bad && sh->tap && (rc = tap_bad_group(sh)) != SIO_OK)
                return fail(sh, rc, rc == SIO_ERR_LIMIT
                                       ? "the zip's tar is larger than the staging budget"
                                       : "staging the zip's tar failed");
            continue;
        }
        size_t nf0 = sh->sb.nf;
        rc = read_member(sh, e, ext);
        if (rc)
            return rc;
        if (sh->tap && (rc = tap_read(sh, name, nf0)) != SIO_OK)
            return fail(sh, rc, rc == SIO_ERR_LIMIT
                                       ? "the zip's tar is larger than the staging budget"
                                       : "staging the zip's tar failed");
    }
    return SIO_OK;
}

sio_code sio_shard_next(sio_shard *sh, const sio_sample **out)
{
    sio_code rc = SIO_OK;
    int open;

    *out = NULL;
    for (;;) {
        if (sh->lone) {
            /* The sample of one member lost to a damaged header: a bad
             * group from that header to the next group (or the end). */
            uint64_t end = sh->eof ? UINT64_MAX : sh->cur.hdr_pos;
            uint64_t idx = sh->groups++;
            sh->lone = 0;
            sb_reset(&sh->sb);
            if (sb_set_key(&sh->sb, sh->lone_key, strlen(sh->lone_key)))
                return fail(sh, SIO_ERR_NOMEM, "out of memory");
            sh->gstart = sh->lone_off;
            if (idx < sh->at.skip_until)
                continue;
            offer_group(sh, idx, end, 1);
            if (sh->eof)
                finish_groups(sh);
            snprintf(sh->err, sizeof sh->err, "url=%s key=%.256s: damaged "
                     "tar header (bad checksum): the sample's only member "
                     "is lost", sh->url, sh->lone_key);
            sh->bad_kind = SIO_SHARD_BAD_LONE;
            sb_reset(&sh->sb);
            return SIO_ERR_SAMPLE;
        }
        if (sh->eof)
            return SIO_OK;
        rc = read_group(sh, &open);
        if (rc)
            return rc;
        if (!open) {
            /* The end of the shard: every group up to here is known. */
            finish_groups(sh);
            return SIO_OK; /* *out stays NULL */
        }
        /* A lost sample of one member follows: this group ends at its
         * damaged header. */
        uint64_t end = sh->lone ? sh->lone_off
                       : sh->eof ? UINT64_MAX : sh->cur.hdr_pos;
        uint64_t idx = sh->groups++;
        if (idx < sh->at.skip_until)
            continue;
        offer_group(sh, idx, end, sh->g.bad);
        if (sh->eof && !sh->g.bad && !sh->lone)
            finish_groups(sh);
        if (sh->g.bad) {
            snprintf(sh->err, sizeof sh->err, "url=%s key=%.256s: %s",
                     sh->url, sh->sb.key ? sh->sb.key : "", sh->g.reason);
            if (sh->eof && !sh->lone)
                finish_groups(sh);
            sb_reset(&sh->sb);
            return SIO_ERR_SAMPLE;
        }
        if (sh->skim && sh->plain) {
            /* Offered to the recorder above; no sample is made. */
            sb_reset(&sh->sb);
            sh->skimmed = 1;
            return SIO_OK;
        }
        rc = sb_finish(&sh->sb, sh->url, sh->index, idx, out);
        if (rc)
            return fail(sh, rc, "out of memory");
        return SIO_OK;
    }
}

sio_code sio_shard_skim(sio_shard *sh, int *end)
{
    const sio_sample *s = NULL;
    sh->skim = 1;
    sh->skimmed = 0;
    sio_code rc = sio_shard_next(sh, &s);
    *end = rc == SIO_OK && !s && !sh->skimmed;
    sio_sample_unref(s); /* a group libarchive read: made whole */
    return rc;
}

uint64_t sio_shard_groups(const sio_shard *sh)
{
    return sh->groups;
}

uint64_t sio_shard_damage_seen(const sio_shard *sh)
{
    return sh->damage_seen;
}

int sio_shard_bad_kind(const sio_shard *sh)
{
    return sh->bad_kind;
}
