/*
 * frames.c — the format=frames wire format (contract in
 * include/shardio_wire.h): the streaming encoder sio_framew used by the
 * server, and the incremental decoder sio_framer used by clients.
 *
 * Threading: an encoder or a decoder belongs to one thread at a time. No
 * global mutable state.
 * Ownership: the encoder owns its copy of the field filter, a small header
 * buffer and the bitmap of shards announced; it never keeps a sample or a
 * payload pointer beyond the call that received it, and payloads go to the
 * sink straight from the sample. The decoder owns the partial-frame buffer
 * (grown only as bytes arrive, bounded by payload_max), the field view
 * array (bounded by fields_max), the table of announced shard URLs
 * (bounded by shards_max and shard_bytes_max), copies of the HEADER
 * strings and the decoded ERROR trailer (reason cut to
 * SIO_WIRE_REASON_MAX). Views it hands out point into the caller's input
 * or into that partial-frame buffer.
 */
#include "shardio_wire.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "core/redact.h"
#include "wire/common.h"

/* The encoder's header buffer: a frame head plus the fixed part of a
 * SAMPLE, or one field head, fit with room to spare; keys and names that
 * do not fit what is left go to the sink straight from the sample. */
#define HBUF_SIZE 256u

/* Keys and field names are u16-length-prefixed on the wire. */
#define U16_MAX 65535u

/* ------------------------------------------------------------------ */
/* Little-endian helpers                                                */

static void put_u16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v & 0xFF);
    p[1] = (unsigned char)((v >> 8) & 0xFF);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)((v >> (8 * i)) & 0xFF);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((v >> (8 * i)) & 0xFF);
}

static uint32_t get_u16(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ================================================================== */
/* Encoder                                                              */

typedef struct sio_framew {
    sio_wenc base; /* first: the encoder interface */
    int failed; /* a write failed: only the error trailer is allowed */
    sio_wire_filter filter;
    unsigned char hbuf[HBUF_SIZE];
    size_t hlen;
    unsigned char *announced; /* bitmap of shard indices announced */
    size_t announced_len;     /* bytes; <= SIO_FRAMEW_SHARDS_MAX / 8 + 1 */
} sio_framew;

static sio_code emit(sio_framew *w, const void *data, size_t len)
{
    return sio_wire_emit(&w->base.out, data, len);
}

static sio_code flush_hbuf(sio_framew *w)
{
    sio_code rc = emit(w, w->hbuf, w->hlen);
    w->hlen = 0;
    return rc;
}

/* Small bytes go through the header buffer; anything that does not fit
 * what is left of it flushes it and goes to the sink as it is. */
static sio_code put(sio_framew *w, const void *data, size_t len)
{
    sio_code rc = SIO_OK;
    if (len <= HBUF_SIZE - w->hlen) {
        memcpy(w->hbuf + w->hlen, data, len);
        w->hlen += len;
        goto out;
    }
    rc = flush_hbuf(w);
    if (rc != SIO_OK)
        goto out;
    rc = emit(w, data, len);
out:
    return rc;
}

static void frame_head(unsigned char p[SIO_FRAME_HEAD_LEN], int type,
                       uint32_t len)
{
    p[0] = (unsigned char)type;
    p[1] = 0;
    p[2] = 0;
    p[3] = 0;
    put_u32(p + 4, len);
}

/* One whole frame whose payload is in memory. */
static sio_code emit_frame(sio_framew *w, int type, const void *payload,
                           size_t len)
{
    sio_code rc = SIO_OK;
    unsigned char head[SIO_FRAME_HEAD_LEN];

    if (len > SIO_FRAME_PAYLOAD_MAX) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }
    frame_head(head, type, (uint32_t)len);
    rc = put(w, head, sizeof head);
    if (rc == SIO_OK)
        rc = put(w, payload, len);
    if (rc == SIO_OK)
        rc = flush_hbuf(w);
out:
    return rc;
}

/* Emit a JSON object as one frame; takes the reference to obj. */
static sio_code emit_json(sio_framew *w, int type, json_t *obj)
{
    sio_code rc = SIO_OK;
    char *text = NULL;

    if (!obj) {
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) {
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    rc = emit_frame(w, type, text, strlen(text));
out:
    free(text);
    json_decref(obj);
    return rc;
}

static sio_code frames_sample(sio_wenc *e, const sio_sample *s,
                              uint64_t position);
static sio_code frames_end(sio_wenc *e, const sio_tarw_summary *sum);
static sio_code frames_error(sio_wenc *e, const char *json);
static void frames_free(sio_wenc *e);

/* The source names of a mixed job travel in the HEADER (h->sources): no
 * set_sources. */
static sio_code frames_keepalive(sio_wenc *e);
static const sio_wenc_ops frames_ops = {frames_sample,    frames_end,
                                        frames_error,     NULL,
                                        frames_free,      frames_keepalive};

sio_code sio_framew_create(const sio_frames_header *h,
                           const char *const *fields, size_t nfields,
                           sio_tarw_write_fn fn, void *userdata,
                           sio_wenc **out, sio_error *err)
{
    sio_code rc = SIO_OK;
    sio_framew *w = NULL;
    json_t *obj = NULL, *farr = NULL;

    *out = NULL;
    if (!h || !fn || nfields > SIO_TARW_FILTER_MAX || (nfields && !fields)) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "framew: bad arguments");
        goto out;
    }
    size_t jlen = h->job ? strlen(h->job) : 0;
    if (jlen == 0 || jlen > SIO_FRAMES_JOB_MAX) {
        rc = sio_seterr(err, SIO_ERR_INVALID,
                        "framew: job name is empty or above %u bytes",
                        SIO_FRAMES_JOB_MAX);
        goto out;
    }
    if (h->epoch > INT64_MAX || h->start > INT64_MAX ||
        h->global_start > INT64_MAX) {
        rc = sio_seterr(err, SIO_ERR_INVALID,
                        "framew: epoch/start above the JSON integer range");
        goto out;
    }
    const char *pname = sio_partition_name(h->partition);
    sio_partition known;
    if (sio_partition_parse(pname, &known) != 0) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "framew: unknown partition");
        goto out;
    }
    w = calloc(1, sizeof *w);
    if (!w) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "framew: out of memory");
        goto out;
    }
    rc = sio_wire_filter_set(&w->filter, fields, nfields, "framew", err);
    if (rc != SIO_OK)
        goto out;
    w->base.ops = &frames_ops;
    w->base.out.fn = fn;
    w->base.out.userdata = userdata;

    if (nfields) {
        farr = json_array();
        for (size_t i = 0; farr && i < nfields; i++)
            if (json_array_append_new(farr, json_string(w->filter.names[i])) != 0) {
                json_decref(farr);
                farr = NULL;
            }
    } else {
        farr = json_null();
    }
    if (!farr) {
        rc = sio_seterr(err, SIO_ERR_INVALID,
                        "framew: field names must be UTF-8");
        goto out;
    }
    json_t *job = json_stringn(h->job, jlen);
    if (!job) {
        json_decref(farr);
        rc = sio_seterr(err, SIO_ERR_INVALID, "framew: job must be UTF-8");
        goto out;
    }
    if (h->nsources > SIO_MIX_SOURCES_MAX) {
        json_decref(farr);
        json_decref(job);
        rc = sio_seterr(err, SIO_ERR_INVALID, "framew: too many sources");
        goto out;
    }
    obj = json_pack("{s:i,s:o,s:I,s:I,s:I,s:I,s:I,s:s,s:o}", "version",
                    SIO_FRAMES_VERSION, "job", job, "epoch",
                    (json_int_t)h->epoch, "rank", (json_int_t)h->rank,
                    "world", (json_int_t)h->world, "start",
                    (json_int_t)h->start, "global_start",
                    (json_int_t)h->global_start, "partition", pname,
                    "fields", farr);
    if (!obj) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "framew: out of memory");
        goto out;
    }
    if (h->nsources) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < h->nsources; i++) {
            json_t *one = json_pack(
                "{s:s,s:I,s:I}", "name",
                h->sources[i].name ? h->sources[i].name : "", "first",
                (json_int_t)h->sources[i].first, "count",
                (json_int_t)h->sources[i].count);
            if (!one || json_array_append_new(arr, one) != 0) {
                json_decref(arr);
                arr = NULL;
            }
        }
        if (!arr || json_object_set_new(obj, "sources", arr) != 0) {
            rc = sio_seterr(err, SIO_ERR_INVALID,
                            "framew: source names must be UTF-8");
            goto out;
        }
    }
    if (h->fingerprint) {
        if (strlen(h->fingerprint) != SIO_FINGERPRINT_LEN ||
            strspn(h->fingerprint, "0123456789abcdef") !=
                SIO_FINGERPRINT_LEN ||
            h->replicas == 0 || h->replica >= h->replicas ||
            h->served_by >= h->replicas) {
            rc = sio_seterr(err, SIO_ERR_INVALID, "framew: bad identity");
            goto out;
        }
        if (json_object_set_new(obj, "fingerprint",
                                json_string(h->fingerprint)) != 0 ||
            json_object_set_new(obj, "replica",
                                json_integer((json_int_t)h->replica)) != 0 ||
            json_object_set_new(obj, "replicas",
                                json_integer((json_int_t)h->replicas)) != 0 ||
            json_object_set_new(obj, "served_by",
                                json_integer((json_int_t)h->served_by)) != 0) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "framew: out of memory");
            goto out;
        }
    }
    if (h->heartbeat_ms &&
        (h->heartbeat_ms > SIO_FRAMES_HEARTBEAT_MAX_MS ||
         json_object_set_new(obj, "heartbeat_ms",
                             json_integer((json_int_t)h->heartbeat_ms)) != 0)) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "framew: bad heartbeat_ms");
        goto out;
    }
    rc = put(w, SIO_FRAMES_MAGIC, SIO_FRAMES_MAGIC_LEN);
    if (rc == SIO_OK)
        rc = emit_json(w, SIO_FRAME_HEADER, obj);
    else
        json_decref(obj);
    obj = NULL;
    if (rc != SIO_OK) {
        sio_seterr(err, rc, "framew: writing the header: %s",
                   sio_strerror(rc));
        goto out;
    }
    *out = &w->base;
    w = NULL;
out:
    json_decref(obj);
    if (w)
        free(w->announced);
    free(w);
    return rc;
}

/* Announce shard s->shard_index unless done already. */
static sio_code announce(sio_framew *w, const sio_sample *s)
{
    sio_code rc = SIO_OK;
    uint32_t idx = s->shard_index;
    size_t byte = idx / 8;
    unsigned char bit = (unsigned char)(1u << (idx % 8));

    if (idx >= SIO_FRAMEW_SHARDS_MAX) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }
    if (byte < w->announced_len && (w->announced[byte] & bit))
        goto out;
    if (byte >= w->announced_len) {
        size_t ncap = w->announced_len ? w->announced_len * 2 : 64;
        if (ncap <= byte)
            ncap = byte + 1;
        if (ncap > SIO_FRAMEW_SHARDS_MAX / 8 + 1)
            ncap = SIO_FRAMEW_SHARDS_MAX / 8 + 1;
        unsigned char *nb = realloc(w->announced, ncap);
        if (!nb) {
            rc = SIO_ERR_NOMEM;
            goto out;
        }
        memset(nb + w->announced_len, 0, ncap - w->announced_len);
        w->announced = nb;
        w->announced_len = ncap;
    }
    /* The shard's URL in its redacted form: consumers never see user
     * information or a presigned signature. */
    char url[SIO_URL_MAX + 64];
    const char *raw = s->shard_url ? s->shard_url : "";
    if (strlen(raw) > SIO_FRAMES_URL_MAX) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }
    sio_url_redact(raw, url, sizeof url);
    size_t ulen = strlen(url);
    unsigned char head[SIO_FRAME_HEAD_LEN + 4];
    frame_head(head, SIO_FRAME_SHARD, (uint32_t)(4 + ulen));
    put_u32(head + SIO_FRAME_HEAD_LEN, idx);
    rc = put(w, head, sizeof head);
    if (rc == SIO_OK)
        rc = put(w, url, ulen);
    if (rc != SIO_OK)
        goto out;
    w->announced[byte] |= bit;
out:
    return rc;
}

static sio_code frames_sample(sio_wenc *e, const sio_sample *s,
                              uint64_t position)
{
    sio_framew *w = (sio_framew *)e;
    sio_code rc = SIO_OK;
    const char *key = s->key ? s->key : "";
    size_t klen = strlen(key);
    size_t nkept = 0;
    uint64_t before = w->base.out.bytes;

    if (w->failed) {
        rc = SIO_ERR_INVALID;
        goto out;
    }
    if (klen == 0) {
        rc = SIO_ERR_INVALID;
        goto out;
    }
    if (klen > U16_MAX) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }
    /* Size the payload first: every term is bounded, the sum is checked
     * against the frame limit as it grows. */
    uint64_t plen = SIO_FRAME_SAMPLE_FIXED + (uint64_t)klen;
    for (size_t i = 0; i < s->nfields; i++) {
        const sio_field *f = &s->fields[i];
        if (!sio_wire_filter_keeps(&w->filter, f->name))
            continue;
        size_t nlen = strlen(f->name);
        if (nlen > U16_MAX || f->len > SIO_FRAME_PAYLOAD_MAX) {
            rc = SIO_ERR_LIMIT;
            goto out;
        }
        plen += SIO_FRAME_FIELD_FIXED + (uint64_t)nlen + (uint64_t)f->len;
        if (plen > SIO_FRAME_PAYLOAD_MAX) {
            rc = SIO_ERR_LIMIT;
            goto out;
        }
        nkept++;
    }
    if (nkept > U16_MAX) {
        rc = SIO_ERR_LIMIT;
        goto out;
    }

    rc = announce(w, s);
    if (rc != SIO_OK)
        goto out;

    unsigned char head[SIO_FRAME_HEAD_LEN + SIO_FRAME_SAMPLE_FIXED];
    frame_head(head, SIO_FRAME_SAMPLE, (uint32_t)plen);
    unsigned char *p = head + SIO_FRAME_HEAD_LEN;
    put_u64(p, s->global_index);
    put_u64(p + 8, position);
    put_u32(p + 16, s->shard_index);
    put_u16(p + 20, (uint32_t)klen);
    put_u16(p + 22, (uint32_t)nkept);
    rc = put(w, head, sizeof head);
    if (rc == SIO_OK)
        rc = put(w, key, klen);
    for (size_t i = 0; rc == SIO_OK && i < s->nfields; i++) {
        const sio_field *f = &s->fields[i];
        if (!sio_wire_filter_keeps(&w->filter, f->name))
            continue;
        size_t nlen = strlen(f->name);
        unsigned char fh[SIO_FRAME_FIELD_FIXED];
        put_u16(fh, (uint32_t)nlen);
        put_u32(fh + 2, (uint32_t)f->len);
        rc = put(w, fh, sizeof fh);
        if (rc == SIO_OK)
            rc = put(w, f->name, nlen);
        if (rc == SIO_OK)
            rc = flush_hbuf(w);
        if (rc == SIO_OK)
            rc = sio_wire_emit_field(&w->base.out, s, i);
    }
    if (rc == SIO_OK)
        rc = flush_hbuf(w);
out:
    /* A failure after bytes reached the sink leaves a partial frame: only
     * the error trailer may follow (a reader then sees a broken frame,
     * which is the truth). A sample refused before any byte was written
     * leaves the stream intact. */
    if (rc != SIO_OK && w->base.out.bytes != before)
        w->failed = 1;
    w->hlen = 0;
    return rc;
}

static sio_code frames_end(sio_wenc *e, const sio_tarw_summary *sum)
{
    sio_framew *w = (sio_framew *)e;
    sio_code rc = SIO_OK;
    char json[SIO_WIRE_SUMMARY_MAX];

    if (w->failed) {
        rc = SIO_ERR_INVALID;
        goto out;
    }
    size_t n = sio_wire_summary_json(sum, e->skipped, json);
    rc = emit_frame(w, SIO_FRAME_END, json, n);
    if (rc != SIO_OK)
        w->failed = 1;
out:
    return rc;
}

static sio_code frames_error(sio_wenc *e, const char *json)
{
    sio_framew *w = (sio_framew *)e;
    /* Whatever a failed sample left in the header buffer is dropped: the
     * trailer follows the last byte that reached the sink. */
    w->hlen = 0;
    return emit_frame(w, SIO_FRAME_ERROR, json, strlen(json));
}

static sio_code frames_keepalive(sio_wenc *e)
{
    sio_framew *w = (sio_framew *)e;
    if (w->failed)
        return SIO_ERR_INVALID;
    return emit_frame(w, SIO_FRAME_KEEPALIVE, "", 0);
}

static void frames_free(sio_wenc *e)
{
    sio_framew *w = (sio_framew *)e;
    free(w->announced);
    free(w);
}

/* ================================================================== */
/* Decoder                                                              */

enum dstate {
    D_MAGIC = 0, /* collecting the 4 magic bytes */
    D_HEAD,      /* collecting an 8-byte frame head */
    D_PAYLOAD,   /* collecting a payload into buf */
    D_SKIP,      /* skipping an extension frame's payload */
    D_DONE       /* END or ERROR decoded, or broken */
};

/* One announced shard (open addressing by index). */
typedef struct shard_slot {
    uint32_t index;
    int used;
    char *url; /* malloc'd, NUL-terminated */
    size_t len;
} shard_slot;

struct sio_framer {
    sio_framer_limits lim;
    enum dstate st;
    sio_framer_status status;
    sio_code rc; /* the code a BROKEN decoder returns */
    char errmsg[512];

    unsigned char hb[SIO_FRAME_HEAD_LEN]; /* partial magic / frame head */
    size_t hlen;
    int type;      /* of the frame being read */
    uint32_t need; /* its payload length */
    uint64_t skip; /* extension bytes still to skip */

    unsigned char *buf; /* partial payload; cap grows as bytes arrive */
    size_t have, cap;

    sio_frame_field *fv; /* field views; cap fields_max */
    size_t fv_cap;

    shard_slot *shards; /* power-of-two table, at most half full */
    size_t shards_cap, nshards;
    uint64_t shard_bytes;

    int got_header;
    char *job;
    char fingerprint[SIO_FINGERPRINT_LEN + 1]; /* HEADER's, "" without */
    sio_frames_source *srcs; /* a mixed job's sources (HEADER) */
    char (*srcnames)[SIO_FRAMES_SOURCE_NAME_MAX + 1];
    size_t nsrcs;
    char **fields;
    size_t nfields;
    int has_fields;
    sio_frames_header header;
    sio_wire_error werr; /* the ERROR frame, once decoded */

    uint64_t bytes;   /* consumed */
    uint64_t samples; /* SAMPLE frames decoded */
};

static sio_code fail(sio_framer *f, sio_code rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Mark the decoder broken with a detail message; returns rc. */
static sio_code fail(sio_framer *f, sio_code rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->errmsg, sizeof f->errmsg, fmt, ap);
    va_end(ap);
    f->rc = rc;
    f->st = D_DONE;
    f->status = SIO_FRAMER_BROKEN;
    return rc;
}

sio_code sio_framer_create(const sio_framer_limits *limits, sio_framer **out,
                           sio_error *err)
{
    sio_code rc = SIO_OK;
    sio_framer *f = NULL;

    *out = NULL;
    f = calloc(1, sizeof *f);
    if (!f) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "framer: out of memory");
        goto out;
    }
    if (limits)
        f->lim = *limits;
    if (f->lim.payload_max == 0 || f->lim.payload_max > SIO_FRAME_PAYLOAD_MAX)
        f->lim.payload_max = SIO_FRAME_PAYLOAD_MAX;
    if (f->lim.fields_max == 0)
        f->lim.fields_max = SIO_FIELDS_MAX_DEFAULT;
    if (f->lim.fields_max > U16_MAX)
        f->lim.fields_max = U16_MAX;
    if (f->lim.shards_max == 0)
        f->lim.shards_max = SIO_FRAMER_SHARDS_MAX_DEFAULT;
    if (f->lim.shard_bytes_max == 0)
        f->lim.shard_bytes_max = SIO_FRAMER_SHARD_BYTES_DEFAULT;
    f->st = D_MAGIC;
    f->status = SIO_FRAMER_OPEN;
    *out = f;
    f = NULL;
out:
    free(f);
    return rc;
}

void sio_framer_destroy(sio_framer *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->shards_cap; i++)
        free(f->shards[i].url);
    free(f->shards);
    for (size_t i = 0; i < f->nfields; i++)
        free(f->fields[i]);
    free(f->fields);
    free(f->job);
    free(f->srcs);
    free(f->srcnames);
    free(f->buf);
    free(f->fv);
    free(f);
}

sio_framer_status sio_framer_state(const sio_framer *f)
{
    return f->status;
}

const char *sio_framer_errmsg(const sio_framer *f)
{
    return f->errmsg;
}

uint64_t sio_framer_bytes(const sio_framer *f)
{
    return f->bytes;
}

uint64_t sio_framer_samples(const sio_framer *f)
{
    return f->samples;
}

/* --- the shard table ------------------------------------------------ */

static size_t slot_of(const sio_framer *f, uint32_t index)
{
    /* Fibonacci hashing; the table size is a power of two. */
    uint64_t h = (uint64_t)index * UINT64_C(11400714819323198485);
    size_t mask = f->shards_cap - 1;
    size_t i = (size_t)(h >> 32) & mask;
    while (f->shards[i].used && f->shards[i].index != index)
        i = (i + 1) & mask;
    return i;
}

static const shard_slot *shard_find(const sio_framer *f, uint32_t index)
{
    if (f->shards_cap == 0)
        return NULL;
    const shard_slot *s = &f->shards[slot_of(f, index)];
    return s->used ? s : NULL;
}

static sio_code shard_add(sio_framer *f, uint32_t index, const char *url,
                          size_t len, const shard_slot **added)
{
    sio_code rc = SIO_OK;
    char *copy = NULL;

    if (f->nshards >= f->lim.shards_max) {
        rc = fail(f, SIO_ERR_LIMIT, "frames: more than %" PRIu32
                  " shards announced", f->lim.shards_max);
        goto out;
    }
    if (len > f->lim.shard_bytes_max - f->shard_bytes) {
        rc = fail(f, SIO_ERR_LIMIT, "frames: shard URLs above %" PRIu64
                  " bytes", f->lim.shard_bytes_max);
        goto out;
    }
    if ((f->nshards + 1) * 2 > f->shards_cap) {
        size_t ncap = f->shards_cap ? f->shards_cap * 2 : 64;
        shard_slot *old = f->shards;
        size_t ocap = f->shards_cap;
        shard_slot *nt = calloc(ncap, sizeof *nt);
        if (!nt) {
            rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory");
            goto out;
        }
        f->shards = nt;
        f->shards_cap = ncap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].used)
                f->shards[slot_of(f, old[i].index)] = old[i];
        free(old);
    }
    copy = malloc(len + 1);
    if (!copy) {
        rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory");
        goto out;
    }
    memcpy(copy, url, len);
    copy[len] = '\0';
    shard_slot *s = &f->shards[slot_of(f, index)];
    s->used = 1;
    s->index = index;
    s->url = copy;
    s->len = len;
    copy = NULL;
    f->nshards++;
    f->shard_bytes += len;
    *added = s;
out:
    free(copy);
    return rc;
}

/* --- JSON helpers ----------------------------------------------------- */

/* A non-negative integer member, or -1 (missing, wrong type, negative). */
static int json_u64(json_t *obj, const char *name, uint64_t *out)
{
    json_t *v = json_object_get(obj, name);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int json_u32(json_t *obj, const char *name, uint32_t *out)
{
    uint64_t v;
    if (json_u64(obj, name, &v) != 0 || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static json_t *parse_json(sio_framer *f, const unsigned char *p, size_t len,
                          const char *what)
{
    json_error_t jerr;
    json_t *obj = json_loadb((const char *)p, len, JSON_REJECT_DUPLICATES,
                             &jerr);
    if (!obj || !json_is_object(obj)) {
        json_decref(obj);
        fail(f, SIO_ERR_FORMAT, "frames: %s is not a JSON object%s%s", what,
             obj ? "" : ": ", obj ? "" : jerr.text);
        return NULL;
    }
    return obj;
}

/* --- frame decoders ----------------------------------------------------- */

static sio_code decode_header(sio_framer *f, const unsigned char *p,
                              size_t len, sio_frame_event *ev)
{
    sio_code rc = SIO_OK;
    json_t *obj = parse_json(f, p, len, "HEADER");
    uint64_t version;

    if (!obj) {
        rc = f->rc;
        goto out;
    }
    if (json_u64(obj, "version", &version) != 0) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: HEADER has no version");
        goto out;
    }
    if (version != SIO_FRAMES_VERSION) {
        rc = fail(f, SIO_ERR_UNSUPPORTED,
                  "frames: version %" PRIu64 " is not supported", version);
        goto out;
    }
    json_t *job = json_object_get(obj, "job");
    const char *part = json_string_value(json_object_get(obj, "partition"));
    sio_frames_header *h = &f->header;
    if (!json_is_string(job) || json_string_length(job) == 0 ||
        json_string_length(job) > SIO_FRAMES_JOB_MAX ||
        strlen(json_string_value(job)) != json_string_length(job) ||
        json_u64(obj, "epoch", &h->epoch) != 0 ||
        json_u32(obj, "rank", &h->rank) != 0 ||
        json_u32(obj, "world", &h->world) != 0 ||
        json_u64(obj, "start", &h->start) != 0 ||
        json_u64(obj, "global_start", &h->global_start) != 0 || !part ||
        sio_partition_parse(part, &h->partition) != 0 || h->world == 0 ||
        h->rank >= h->world) {
        rc = fail(f, SIO_ERR_FORMAT,
                  "frames: HEADER lacks or has a bad job, epoch, rank, world, "
                  "start, global_start or partition");
        goto out;
    }
    f->job = strdup(json_string_value(job));
    if (!f->job) {
        rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory");
        goto out;
    }
    h->job = f->job;
    h->fingerprint = f->fingerprint;
    json_t *fp = json_object_get(obj, "fingerprint");
    if (fp) {
        const char *fs = json_string_value(fp);
        if (!fs || json_string_length(fp) != SIO_FINGERPRINT_LEN ||
            strspn(fs, "0123456789abcdef") != SIO_FINGERPRINT_LEN ||
            json_u32(obj, "replica", &h->replica) != 0 ||
            json_u32(obj, "replicas", &h->replicas) != 0 ||
            json_u32(obj, "served_by", &h->served_by) != 0 ||
            h->replicas == 0 || h->replica >= h->replicas ||
            h->served_by >= h->replicas) {
            rc = fail(f, SIO_ERR_FORMAT,
                      "frames: HEADER has a bad fingerprint, replica, "
                      "replicas or served_by");
            goto out;
        }
        memcpy(f->fingerprint, fs, SIO_FINGERPRINT_LEN + 1);
        h->has_ident = 1;
    }
    h->heartbeat_ms = 0;
    if (json_object_get(obj, "heartbeat_ms") &&
        (json_u32(obj, "heartbeat_ms", &h->heartbeat_ms) != 0 ||
         h->heartbeat_ms == 0 ||
         h->heartbeat_ms > SIO_FRAMES_HEARTBEAT_MAX_MS)) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: HEADER has a bad heartbeat_ms");
        goto out;
    }
    json_t *sv = json_object_get(obj, "sources");
    if (sv) {
        size_t n = json_is_array(sv) ? json_array_size(sv) : 0;
        if (!json_is_array(sv) || n == 0 || n > SIO_MIX_SOURCES_MAX) {
            rc = fail(f, SIO_ERR_FORMAT, "frames: HEADER sources must be an "
                      "array of 1..%u sources", SIO_MIX_SOURCES_MAX);
            goto out;
        }
        f->srcs = calloc(n, sizeof *f->srcs);
        f->srcnames = calloc(n, sizeof *f->srcnames);
        if (!f->srcs || !f->srcnames) {
            rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(sv, i), *nm = json_object_get(e, "name");
            size_t nl = json_string_length(nm);
            if (!json_is_object(e) || !json_is_string(nm) || nl == 0 ||
                nl > SIO_FRAMES_SOURCE_NAME_MAX ||
                strlen(json_string_value(nm)) != nl ||
                json_u32(e, "first", &f->srcs[i].first) != 0 ||
                json_u32(e, "count", &f->srcs[i].count) != 0) {
                rc = fail(f, SIO_ERR_FORMAT,
                          "frames: HEADER source %zu is not {name, first, "
                          "count}", i);
                goto out;
            }
            memcpy(f->srcnames[i], json_string_value(nm), nl + 1);
            f->srcs[i].name = f->srcnames[i];
        }
        f->nsrcs = n;
        h->sources = f->srcs;
        h->nsources = n;
    }
    json_t *fl = json_object_get(obj, "fields");
    if (json_is_array(fl)) {
        size_t n = json_array_size(fl);
        if (n > SIO_TARW_FILTER_MAX) {
            rc = fail(f, SIO_ERR_LIMIT, "frames: HEADER lists %zu fields, "
                      "limit %u", n, SIO_TARW_FILTER_MAX);
            goto out;
        }
        f->fields = calloc(n ? n : 1, sizeof *f->fields);
        if (!f->fields) {
            rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(fl, i);
            size_t el = json_string_length(e);
            if (!json_is_string(e) || el == 0 ||
                el > SIO_TARW_FIELD_NAME_MAX ||
                strlen(json_string_value(e)) != el) {
                rc = fail(f, SIO_ERR_FORMAT,
                          "frames: HEADER field %zu is not a valid name", i);
                goto out;
            }
            f->fields[i] = strdup(json_string_value(e));
            if (!f->fields[i]) {
                rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory");
                goto out;
            }
            f->nfields = i + 1;
        }
        f->has_fields = 1;
    } else if (fl && !json_is_null(fl)) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: HEADER fields is not a list");
        goto out;
    }
    f->got_header = 1;
    ev->type = SIO_FRAMER_HEADER;
    ev->header = *h;
    ev->has_fields = f->has_fields;
    ev->nfields = f->nfields;
    ev->fields = (const char *const *)f->fields;
out:
    json_decref(obj);
    return rc;
}

static sio_code decode_shard(sio_framer *f, const unsigned char *p,
                             size_t len, sio_frame_event *ev)
{
    sio_code rc = SIO_OK;
    const shard_slot *s = NULL;
    uint32_t idx = get_u32(p);
    const char *url = (const char *)p + 4;
    size_t ulen = len - 4;

    if (memchr(url, '\0', ulen)) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: shard %" PRIu32
                  " URL holds a NUL byte", idx);
        goto out;
    }
    if (shard_find(f, idx)) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: shard %" PRIu32
                  " announced twice", idx);
        goto out;
    }
    rc = shard_add(f, idx, url, ulen, &s);
    if (rc != SIO_OK)
        goto out;
    ev->type = SIO_FRAMER_SHARD;
    ev->shard_index = idx;
    ev->shard_url = s->url;
    ev->shard_url_len = s->len;
out:
    return rc;
}

static sio_code decode_sample(sio_framer *f, const unsigned char *p,
                              size_t len, sio_frame_event *ev)
{
    sio_code rc = SIO_OK;
    uint64_t g = get_u64(p), pos = get_u64(p + 8);
    uint32_t idx = get_u32(p + 16);
    size_t klen = get_u16(p + 20), nf = get_u16(p + 22);
    size_t off = SIO_FRAME_SAMPLE_FIXED;
    size_t total = 0;

    const shard_slot *s = shard_find(f, idx);
    if (!s) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: sample %" PRIu64
                  " refers to unannounced shard %" PRIu32, g, idx);
        goto out;
    }
    if (pos != f->header.start + f->samples) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: sample at position %" PRIu64
                  ", expected %" PRIu64, pos, f->header.start + f->samples);
        goto out;
    }
    if (klen == 0 || klen > len - off) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: sample %" PRIu64
                  " key length %zu is empty or beyond the frame", g, klen);
        goto out;
    }
    /* Each field needs at least its fixed head, so a count the payload
     * cannot hold is refused before any array is sized from it. */
    if (nf > (len - off - klen) / SIO_FRAME_FIELD_FIXED) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: sample %" PRIu64
                  " field count %zu does not fit its frame", g, nf);
        goto out;
    }
    if (nf > f->lim.fields_max) {
        rc = fail(f, SIO_ERR_LIMIT, "frames: sample %" PRIu64
                  " has %zu fields, limit %" PRIu32, g, nf,
                  f->lim.fields_max);
        goto out;
    }
    if (nf > f->fv_cap) {
        size_t ncap = f->fv_cap ? f->fv_cap : 16;
        while (ncap < nf)
            ncap *= 2;
        if (ncap > f->lim.fields_max)
            ncap = f->lim.fields_max;
        sio_frame_field *nv = realloc(f->fv, ncap * sizeof *nv);
        if (!nv) {
            rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory");
            goto out;
        }
        f->fv = nv;
        f->fv_cap = ncap;
    }
    ev->key = (const char *)p + off;
    ev->key_len = klen;
    off += klen;
    for (size_t i = 0; i < nf; i++) {
        if (len - off < SIO_FRAME_FIELD_FIXED) {
            rc = fail(f, SIO_ERR_FORMAT, "frames: sample %" PRIu64
                      " field %zu head beyond the frame", g, i);
            goto out;
        }
        size_t nlen = get_u16(p + off);
        size_t dlen = get_u32(p + off + 2);
        off += SIO_FRAME_FIELD_FIXED;
        /* Both terms are below 2^32 and off <= len <= 2^31 - 1, so the
         * comparisons below cannot wrap. */
        if (nlen == 0 || nlen > len - off || dlen > len - off - nlen) {
            rc = fail(f, SIO_ERR_FORMAT, "frames: sample %" PRIu64
                      " field %zu (name %zu, data %zu bytes) beyond the frame",
                      g, i, nlen, dlen);
            goto out;
        }
        f->fv[i].name = (const char *)p + off;
        f->fv[i].name_len = nlen;
        off += nlen;
        f->fv[i].data = p + off;
        f->fv[i].len = dlen;
        off += dlen;
        total += dlen;
    }
    if (off != len) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: sample %" PRIu64
                  " has %zu trailing bytes", g, len - off);
        goto out;
    }
    f->samples++;
    ev->type = SIO_FRAMER_SAMPLE;
    ev->global_index = g;
    ev->position = pos;
    ev->shard_index = idx;
    ev->source = UINT32_MAX;
    for (size_t i = 0; i < f->nsrcs; i++)
        if (idx >= f->srcs[i].first && idx - f->srcs[i].first < f->srcs[i].count) {
            ev->source = (uint32_t)i;
            break;
        }
    ev->shard_url = s->url;
    ev->shard_url_len = s->len;
    ev->nsample_fields = nf;
    ev->sample_fields = nf ? f->fv : NULL;
    ev->sample_bytes = total;
out:
    return rc;
}

static sio_code decode_end(sio_framer *f, const unsigned char *p, size_t len,
                           sio_frame_event *ev)
{
    sio_code rc = SIO_OK;
    json_t *obj = parse_json(f, p, len, "END");
    sio_tarw_summary *sum = &ev->summary;
    const sio_frames_header *h = &f->header;

    if (!obj) {
        rc = f->rc;
        goto out;
    }
    const char *status = json_string_value(json_object_get(obj, "status"));
    if (!status || strcmp(status, "ok") != 0 ||
        json_u64(obj, "epoch", &sum->epoch) != 0 ||
        json_u32(obj, "rank", &sum->rank) != 0 ||
        json_u32(obj, "world", &sum->world) != 0 ||
        json_u64(obj, "start", &sum->start) != 0 ||
        json_u64(obj, "samples", &sum->samples) != 0 ||
        json_u64(obj, "position", &sum->position) != 0) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: END lacks status ok, epoch, "
                  "rank, world, start, samples or position");
        goto out;
    }
    if (sum->epoch != h->epoch || sum->rank != h->rank ||
        sum->world != h->world || sum->start != h->start ||
        sum->samples != f->samples ||
        sum->position != h->start + f->samples) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: END (samples %" PRIu64
                  ", position %" PRIu64 ") disagrees with the stream "
                  "(%" PRIu64 " samples from %" PRIu64 ")", sum->samples,
                  sum->position, f->samples, h->start);
        goto out;
    }
    f->st = D_DONE;
    f->status = SIO_FRAMER_ENDED;
    ev->type = SIO_FRAMER_END;
    ev->end_json = (const char *)p;
    ev->end_json_len = len;
out:
    json_decref(obj);
    return rc;
}

static sio_code decode_error(sio_framer *f, const unsigned char *p,
                             size_t len, sio_frame_event *ev)
{
    sio_code rc = SIO_OK;
    sio_error err = {SIO_OK, ""};

    rc = sio_wire_error_parse(p, len, &f->werr, &err);
    if (rc != SIO_OK) {
        rc = fail(f, rc, "frames: ERROR: %s", err.msg);
        goto out;
    }
    f->st = D_DONE;
    f->status = SIO_FRAMER_FAILED;
    snprintf(f->errmsg, sizeof f->errmsg, "server error: %.400s%s",
             f->werr.reason, f->werr.retryable ? " (retryable)" : "");
    ev->type = SIO_FRAMER_ERROR;
    ev->reason = f->werr.reason;
    ev->retryable = f->werr.retryable;
    ev->retry_after_ms = f->werr.retry_after_ms;
out:
    return rc;
}

/* Validate a frame head once its 8 bytes are in; set up the payload. */
static sio_code start_frame(sio_framer *f, const unsigned char *h)
{
    sio_code rc = SIO_OK;
    int type = h[0];
    uint32_t len = get_u32(h + 4);
    uint32_t min = 0, max = f->lim.payload_max;

    if (h[1] != 0 || h[2] != 0 || h[3] != 0) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: frame type 0x%02x has non-zero "
                  "flags or reserved bytes", type);
        goto out;
    }
    if (len > f->lim.payload_max) {
        rc = fail(f, SIO_ERR_LIMIT, "frames: frame type 0x%02x length %" PRIu32
                  " above the limit %" PRIu32, type, len, f->lim.payload_max);
        goto out;
    }
    if (type >= SIO_FRAME_EXT_MIN) {
        f->st = D_SKIP;
        f->skip = len;
        goto out;
    }
    switch (type) {
    case SIO_FRAME_HEADER:
    case SIO_FRAME_END:
    case SIO_FRAME_ERROR:
        min = 2; /* "{}" */
        if (max > SIO_FRAMES_JSON_MAX)
            max = SIO_FRAMES_JSON_MAX;
        break;
    case SIO_FRAME_SHARD:
        min = 4;
        if (max > 4 + SIO_FRAMES_URL_MAX)
            max = 4 + SIO_FRAMES_URL_MAX;
        break;
    case SIO_FRAME_SAMPLE:
        min = SIO_FRAME_SAMPLE_FIXED + 1; /* keys are never empty */
        break;
    default:
        rc = fail(f, SIO_ERR_FORMAT, "frames: unknown frame type 0x%02x",
                  type);
        goto out;
    }
    if (len < min || len > max) {
        rc = fail(f, len > max ? SIO_ERR_LIMIT : SIO_ERR_FORMAT,
                  "frames: frame type 0x%02x length %" PRIu32
                  " outside [%" PRIu32 ", %" PRIu32 "]", type, len, min, max);
        goto out;
    }
    if (!f->got_header && type != SIO_FRAME_HEADER) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: frame type 0x%02x before the "
                  "HEADER", type);
        goto out;
    }
    if (f->got_header && type == SIO_FRAME_HEADER) {
        rc = fail(f, SIO_ERR_FORMAT, "frames: a second HEADER");
        goto out;
    }
    f->type = type;
    f->need = len;
    f->have = 0;
    f->st = D_PAYLOAD;
out:
    return rc;
}

static sio_code decode(sio_framer *f, const unsigned char *p, size_t len,
                       sio_frame_event *ev)
{
    f->st = D_HEAD;
    switch (f->type) {
    case SIO_FRAME_HEADER: return decode_header(f, p, len, ev);
    case SIO_FRAME_SHARD: return decode_shard(f, p, len, ev);
    case SIO_FRAME_SAMPLE: return decode_sample(f, p, len, ev);
    case SIO_FRAME_END: return decode_end(f, p, len, ev);
    default: return decode_error(f, p, len, ev);
    }
}

/* Room for n more payload bytes in buf: grow geometrically, never beyond
 * the frame's length, so memory follows the bytes that really arrived. */
static sio_code reserve(sio_framer *f, size_t n)
{
    sio_code rc = SIO_OK;
    size_t want = f->have + n;
    if (want <= f->cap)
        goto out;
    size_t ncap = f->cap ? f->cap : 4096;
    while (ncap < want)
        ncap = ncap > f->need / 2 ? f->need : ncap * 2;
    if (ncap > f->need)
        ncap = f->need;
    unsigned char *nb = realloc(f->buf, ncap);
    if (!nb) {
        rc = fail(f, SIO_ERR_NOMEM, "frames: out of memory for a %" PRIu32
                  "-byte frame", f->need);
        goto out;
    }
    f->buf = nb;
    f->cap = ncap;
out:
    return rc;
}

sio_code sio_framer_feed(sio_framer *f, const void *data, size_t len,
                         size_t *used, sio_frame_event *ev)
{
    sio_code rc = SIO_OK;
    const unsigned char *in = data;
    size_t p = 0;

    memset(ev, 0, sizeof *ev);
    ev->type = SIO_FRAMER_NONE;
    if (f->status == SIO_FRAMER_BROKEN) {
        rc = f->rc;
        goto out;
    }
    while (p < len && ev->type == SIO_FRAMER_NONE) {
        size_t avail = len - p;
        switch (f->st) {
        case D_MAGIC: {
            size_t n = SIO_FRAMES_MAGIC_LEN - f->hlen;
            if (n > avail)
                n = avail;
            memcpy(f->hb + f->hlen, in + p, n);
            f->hlen += n;
            p += n;
            if (f->hlen < SIO_FRAMES_MAGIC_LEN)
                break;
            f->hlen = 0;
            if (memcmp(f->hb, SIO_FRAMES_MAGIC, SIO_FRAMES_MAGIC_LEN) != 0) {
                rc = fail(f, SIO_ERR_FORMAT, "frames: bad magic (not a "
                          "shardcast frames stream)");
                goto out;
            }
            f->st = D_HEAD;
            break;
        }
        case D_HEAD: {
            const unsigned char *h;
            if (f->hlen == 0 && avail >= SIO_FRAME_HEAD_LEN) {
                h = in + p;
                p += SIO_FRAME_HEAD_LEN;
            } else {
                size_t n = SIO_FRAME_HEAD_LEN - f->hlen;
                if (n > avail)
                    n = avail;
                memcpy(f->hb + f->hlen, in + p, n);
                f->hlen += n;
                p += n;
                if (f->hlen < SIO_FRAME_HEAD_LEN)
                    break;
                f->hlen = 0;
                h = f->hb;
            }
            rc = start_frame(f, h);
            if (rc != SIO_OK)
                goto out;
            break;
        }
        case D_PAYLOAD:
            if (f->have == 0 && avail >= f->need) {
                /* Whole frame in the caller's bytes: views point there. */
                p += f->need;
                rc = decode(f, in + p - f->need, f->need, ev);
                if (rc != SIO_OK)
                    goto out;
                break;
            } else {
                size_t n = f->need - f->have;
                if (n > avail)
                    n = avail;
                rc = reserve(f, n);
                if (rc != SIO_OK)
                    goto out;
                memcpy(f->buf + f->have, in + p, n);
                f->have += n;
                p += n;
                if (f->have == f->need) {
                    f->have = 0;
                    rc = decode(f, f->buf, f->need, ev);
                    if (rc != SIO_OK)
                        goto out;
                }
            }
            break;
        case D_SKIP: {
            size_t n = f->skip < avail ? (size_t)f->skip : avail;
            f->skip -= n;
            p += n;
            if (f->skip == 0)
                f->st = D_HEAD;
            break;
        }
        case D_DONE:
            rc = fail(f, SIO_ERR_FORMAT, "frames: bytes after the %s frame",
                      f->status == SIO_FRAMER_ENDED ? "END" : "ERROR");
            goto out;
        }
    }
    /* A zero-length extension frame at the very end of the input is
     * complete already. */
    if (f->st == D_SKIP && f->skip == 0)
        f->st = D_HEAD;
out:
    f->bytes += p;
    *used = p;
    if (rc != SIO_OK)
        ev->type = SIO_FRAMER_NONE;
    return rc;
}

sio_code sio_framer_finish(sio_framer *f)
{
    sio_code rc = SIO_OK;

    switch (f->status) {
    case SIO_FRAMER_ENDED:
        goto out;
    case SIO_FRAMER_FAILED:
        rc = SIO_ERR_IO; /* errmsg holds "server error: <reason>" */
        goto out;
    case SIO_FRAMER_BROKEN:
        rc = f->rc;
        goto out;
    case SIO_FRAMER_OPEN:
        break;
    }
    if (f->st == D_MAGIC)
        snprintf(f->errmsg, sizeof f->errmsg,
                 "truncated stream: %s", f->hlen ? "inside the magic"
                                                  : "no data");
    else if (!f->got_header)
        snprintf(f->errmsg, sizeof f->errmsg,
                 "truncated stream: before the HEADER frame");
    else if (f->st == D_HEAD && f->hlen == 0)
        snprintf(f->errmsg, sizeof f->errmsg,
                 "truncated stream: cut between frames after %" PRIu64
                 " samples (no END frame)", f->samples);
    else
        snprintf(f->errmsg, sizeof f->errmsg,
                 "truncated stream: cut inside a frame after %" PRIu64
                 " samples", f->samples);
    rc = SIO_ERR_IO;
out:
    return rc;
}
