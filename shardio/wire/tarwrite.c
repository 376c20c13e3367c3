/*
 * tarwrite.c — the streaming tar encoder of the format=tar wire format
 * (contract in include/shardio_wire.h): ustar header blocks, member-name
 * sanitising, pax records and the sio_tarw encoder. Its scratch buffers are
 * sio_wbufs (wire/wbuf.c).
 *
 * Threading: a sio_tarw belongs to one thread at a time (the producer of one
 * stream). No global mutable state.
 * Ownership: the encoder owns its copy of the field filter and two scratch
 * buffers (member name, pax records) reused across samples; it never keeps
 * a sample or a payload pointer beyond the call that received it. Payloads
 * go to the sink straight from the sample, so the sink's copy is the only
 * one.
 */
#include "shardio_wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "core/redact.h"
#include "wire/common.h"

/* Scratch buffers: the longest name is "<G>/" + key + "." + ext, each
 * bounded by SIO_TARW_NAME_MAX; a pax header holds five records. */
#define NAME_BUF_MAX (3u * SIO_TARW_NAME_MAX)
#define PAX_BUF_MAX (8u * SIO_TARW_NAME_MAX)

static const unsigned char zero_block[SIO_TAR_BLOCK];

typedef struct sio_tarw {
    sio_wenc base; /* first: the encoder interface */
    sio_wire_filter filter;
    sio_wbuf name; /* member name being built */
    sio_wbuf pax;  /* pax records being built */
    const char *const *sources; /* a mixed job's source names */
    size_t nsources;
    int started; /* a sample was written */
} sio_tarw;

static void tar_set_sources(sio_wenc *e, const char *const *names, size_t n)
{
    sio_tarw *w = (sio_tarw *)e;
    w->sources = names;
    w->nsources = n;
}

/* ------------------------------------------------------------------ */
/* Encoder                                                              */

static sio_code emit(sio_tarw *w, const void *data, size_t len)
{
    return sio_wire_emit(&w->base.out, data, len);
}

/* Header, payload and padding of one member: the payload is data, or
 * field `field` of sample s when s is not NULL. */
static sio_code emit_member_of(sio_tarw *w, const char *name,
                               size_t name_len, char typeflag,
                               const void *data, uint64_t len,
                               const sio_sample *s, size_t field)
{
    unsigned char blk[SIO_TAR_BLOCK];
    int fits;
    sio_code rc;

    sio_tar_header(blk, name, name_len, typeflag, len, &fits);
    rc = emit(w, blk, sizeof blk);
    if (rc != SIO_OK)
        goto out;
    rc = s ? sio_wire_emit_field(&w->base.out, s, field)
           : emit(w, data, (size_t)len);
    if (rc != SIO_OK)
        goto out;
    size_t pad = (size_t)((SIO_TAR_BLOCK - len % SIO_TAR_BLOCK) % SIO_TAR_BLOCK);
    rc = emit(w, zero_block, pad);
out:
    return rc;
}

static sio_code emit_member(sio_tarw *w, const char *name, size_t name_len,
                            char typeflag, const void *data, uint64_t len)
{
    return emit_member_of(w, name, name_len, typeflag, data, len, NULL, 0);
}

static size_t dec_digits(size_t v)
{
    size_t d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Append one pax record "<len> <key>=<value>\n"; <len> counts the whole
 * record in bytes, itself included. */
static sio_code pax_record(sio_wbuf *b, const char *key, const char *val,
                           size_t vlen)
{
    sio_code rc = SIO_OK;
    char lenbuf[24];

    if (vlen > SIO_TARW_NAME_MAX) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }
    size_t body = 1 + strlen(key) + 1 + vlen + 1;
    size_t d = dec_digits(body);
    /* Prefixing d digits can add at most one digit to the total. */
    size_t total = body + d;
    if (dec_digits(total) > d)
        total++;
    int n = snprintf(lenbuf, sizeof lenbuf, "%zu ", total);
    rc = sio_wbuf_append(b, lenbuf, (size_t)n);
    if (rc == SIO_OK)
        rc = sio_wbuf_append(b, key, strlen(key));
    if (rc == SIO_OK)
        rc = sio_wbuf_append(b, "=", 1);
    if (rc == SIO_OK)
        rc = sio_wbuf_append(b, val, vlen);
    if (rc == SIO_OK)
        rc = sio_wbuf_append(b, "\n", 1);
out:
    return rc;
}

static sio_code tar_sample(sio_wenc *e, const sio_sample *s,
                           uint64_t position);
static sio_code tar_end(sio_wenc *e, const sio_tarw_summary *sum);
static sio_code tar_error(sio_wenc *e, const char *json);
static void tar_free(sio_wenc *e);

static const sio_wenc_ops tar_ops = {tar_sample,      tar_end,  tar_error,
                                     tar_set_sources, tar_free, NULL};

sio_code sio_tarw_create(const char *const *fields, size_t nfields,
                         sio_tarw_write_fn fn, void *userdata,
                         sio_wenc **out, sio_error *err)
{
    sio_code rc = SIO_OK;
    sio_tarw *w = NULL;

    *out = NULL;
    if (!fn || nfields > SIO_TARW_FILTER_MAX || (nfields && !fields)) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "tarw: bad arguments");
        goto out;
    }
    w = calloc(1, sizeof *w);
    if (!w) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "tarw: out of memory");
        goto out;
    }
    rc = sio_wire_filter_set(&w->filter, fields, nfields, "tarw", err);
    if (rc != SIO_OK)
        goto out;
    w->base.ops = &tar_ops;
    w->base.out.fn = fn;
    w->base.out.userdata = userdata;
    sio_wbuf_init(&w->name, NAME_BUF_MAX);
    sio_wbuf_init(&w->pax, PAX_BUF_MAX);
    *out = &w->base;
    w = NULL;
out:
    free(w);
    return rc;
}

sio_code sio_tarw_write_ident(sio_wenc *enc, const sio_stream_ident *id,
                              sio_error *err)
{
    sio_tarw *w = (sio_tarw *)enc;
    char num[32];
    sio_code rc = SIO_OK;
    size_t jl = id ? strnlen(id->job, sizeof id->job) : 0;

    if (!enc || enc->ops != &tar_ops || w->started || !id || jl == 0 ||
        jl >= sizeof id->job ||
        strlen(id->fingerprint) != SIO_FINGERPRINT_LEN ||
        strspn(id->fingerprint, "0123456789abcdef") != SIO_FINGERPRINT_LEN)
        return sio_seterr(err, SIO_ERR_INVALID, "tarw: bad identity");
    w->pax.len = 0;
    rc = pax_record(&w->pax, "SHARDCAST.job", id->job, jl);
    int n = snprintf(num, sizeof num, "%" PRIu64, id->epoch);
    if (rc == SIO_OK)
        rc = pax_record(&w->pax, "SHARDCAST.epoch", num, (size_t)n);
    if (rc == SIO_OK)
        rc = pax_record(&w->pax, "SHARDCAST.fingerprint", id->fingerprint,
                        SIO_FINGERPRINT_LEN);
    const struct {
        const char *k;
        uint32_t v;
    } nums[3] = {{"SHARDCAST.replica", id->replica},
                 {"SHARDCAST.replicas", id->replicas},
                 {"SHARDCAST.served_by", id->served_by}};
    for (size_t i = 0; i < 3 && rc == SIO_OK; i++) {
        n = snprintf(num, sizeof num, "%" PRIu32, nums[i].v);
        rc = pax_record(&w->pax, nums[i].k, num, (size_t)n);
    }
    if (rc == SIO_OK)
        rc = emit_member(w, "pax_global_header", 17, 'g', w->pax.data,
                         w->pax.len);
    if (rc != SIO_OK)
        return sio_seterr(err, rc, "tarw: writing the identity: %s",
                          sio_strerror(rc));
    return SIO_OK;
}

/* A byte a member name may carry as it is: controls and '\\' (a path
 * separator to Windows extractors) become '_'. */
static char name_byte(char c)
{
    unsigned char u = (unsigned char)c;
    return (u < 0x20 || u == 0x7f || c == '\\') ? '_' : c;
}

sio_code sio_tar_key_sanitize(const char *key, size_t klen, sio_wbuf *out)
{
    sio_code rc = SIO_OK;
    size_t start = out->len;
    int any = 0;

    for (size_t i = 0; i <= klen && rc == SIO_OK;) {
        const char *slash = i < klen ? memchr(key + i, '/', klen - i) : NULL;
        size_t end = slash ? (size_t)(slash - key) : klen;
        const char *c = key + i;
        size_t cl = end - i;
        i = end + 1;
        /* Empty components (a leading '/', "//") and "." vanish. */
        if (cl == 0 || (cl == 1 && c[0] == '.'))
            goto next;
        if (any)
            rc = sio_wbuf_append(out, "/", 1);
        if (rc == SIO_OK && cl == 2 && c[0] == '.' && c[1] == '.') {
            rc = sio_wbuf_append(out, "__", 2);
        } else {
            for (size_t k = 0; k < cl && rc == SIO_OK; k++) {
                char b = name_byte(c[k]);
                rc = sio_wbuf_append(out, &b, 1);
            }
        }
        any = 1;
    next:
        if (!slash)
            break;
    }
    if (rc == SIO_OK && !any)
        rc = sio_wbuf_append(out, "_", 1);
    if (rc != SIO_OK)
        out->len = start;
    return rc;
}

/* Build "<G>/<sanitised key>.<ext>" NUL-terminated in w->name. */
static sio_code build_name(sio_tarw *w, uint64_t g, const char *key,
                           size_t klen, const char *ext)
{
    sio_code rc;
    char gbuf[32];
    size_t elen = strlen(ext);

    if (klen > SIO_TARW_NAME_MAX || elen > SIO_TARW_NAME_MAX) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }
    int n = snprintf(gbuf, sizeof gbuf, "%0*" PRIu64 "/",
                     SIO_TARW_INDEX_DIGITS, g);
    w->name.len = 0;
    rc = sio_wbuf_append(&w->name, gbuf, (size_t)n);
    if (rc == SIO_OK)
        rc = sio_tar_key_sanitize(key, klen, &w->name);
    if (rc == SIO_OK)
        rc = sio_wbuf_append(&w->name, ".", 1);
    /* The extension is the rest of the last component: no '/', but
     * controls and '\\' are replaced like the key's. */
    for (size_t k = 0; k < elen && rc == SIO_OK; k++) {
        char b = name_byte(ext[k]);
        rc = sio_wbuf_append(&w->name, b == '/' ? "_" : &b, 1);
    }
    if (rc == SIO_OK)
        rc = sio_wbuf_append(&w->name, "", 1);
    if (rc == SIO_OK)
        w->name.len--; /* keep the NUL out of the length */
out:
    return rc;
}

static sio_code tar_sample(sio_wenc *e, const sio_sample *s,
                           uint64_t position)
{
    sio_tarw *w = (sio_tarw *)e;
    sio_code rc = SIO_OK;
    int first = 1;
    char num[32], paxname[48];
    const char *key = s->key ? s->key : "";
    size_t klen = strlen(key);
    const char *shard = s->shard_url ? s->shard_url : "";

    if (klen == 0) {
        rc = SIO_ERR_INVALID;
        goto out;
    }
    w->started = 1;
    int pn = snprintf(paxname, sizeof paxname, "%0*" PRIu64 "/PaxHeader",
                      SIO_TARW_INDEX_DIGITS, s->global_index);
    for (size_t i = 0; i < s->nfields; i++) {
        const sio_field *f = &s->fields[i];
        if (!sio_wire_filter_keeps(&w->filter, f->name))
            continue;
        rc = build_name(w, s->global_index, key, klen, f->name);
        if (rc != SIO_OK)
            goto out;
        const char *name = (const char *)w->name.data;
        int fits = sio_tar_name_fits(name, w->name.len);
        if (first || !fits) {
            w->pax.len = 0;
            if (!fits)
                rc = pax_record(&w->pax, "path", name, w->name.len);
            if (rc == SIO_OK && first) {
                rc = pax_record(&w->pax, "SHARDCAST.key", key, klen);
                if (rc == SIO_OK) {
                    /* The redacted form: no user information, no
                     * credential in the query (sio_url_redact). */
                    char red[SIO_URL_MAX + 64];
                    sio_url_redact(shard, red, sizeof red);
                    rc = pax_record(&w->pax, "SHARDCAST.shard", red,
                                    strlen(red));
                }
                int n = snprintf(num, sizeof num, "%" PRIu64, s->global_index);
                if (rc == SIO_OK)
                    rc = pax_record(&w->pax, "SHARDCAST.index", num, (size_t)n);
                n = snprintf(num, sizeof num, "%" PRIu64, position);
                if (rc == SIO_OK)
                    rc = pax_record(&w->pax, "SHARDCAST.position", num,
                                    (size_t)n);
                if (rc == SIO_OK && s->source < w->nsources)
                    rc = pax_record(&w->pax, "SHARDCAST.source",
                                    w->sources[s->source],
                                    strlen(w->sources[s->source]));
            }
            if (rc != SIO_OK)
                goto out;
            rc = emit_member(w, paxname, (size_t)pn, 'x', w->pax.data,
                             w->pax.len);
            if (rc != SIO_OK)
                goto out;
        }
        rc = emit_member_of(w, name, w->name.len, '0', NULL, f->len, s, i);
        if (rc != SIO_OK)
            goto out;
        first = 0;
    }
out:
    return rc;
}

static sio_code tar_end(sio_wenc *e, const sio_tarw_summary *sum)
{
    sio_tarw *w = (sio_tarw *)e;
    sio_code rc;
    char json[SIO_WIRE_SUMMARY_MAX];

    size_t n = sio_wire_summary_json(sum, e->skipped, json);
    rc = emit_member(w, SIO_TARW_END_NAME, strlen(SIO_TARW_END_NAME), '0',
                     json, (uint64_t)n);
    if (rc != SIO_OK)
        goto out;
    rc = emit(w, zero_block, sizeof zero_block);
    if (rc != SIO_OK)
        goto out;
    rc = emit(w, zero_block, sizeof zero_block);
out:
    return rc;
}

static sio_code tar_error(sio_wenc *e, const char *json)
{
    return emit_member((sio_tarw *)e, SIO_TARW_ERROR_NAME,
                       strlen(SIO_TARW_ERROR_NAME), '0', json, strlen(json));
}

static void tar_free(sio_wenc *e)
{
    sio_tarw *w = (sio_tarw *)e;
    sio_wbuf_free(&w->name);
    sio_wbuf_free(&w->pax);
    free(w);
}
