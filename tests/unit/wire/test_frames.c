/*
 * test_frames.c — the frames wire format (shardio/wire/frames.c): encoder ->
 * decoder round trips at every split point and under random chunkings,
 * the field filter, shard announcements, END/ERROR trailers, truncation,
 * encoder limits and hostile inputs to the decoder.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shardio_wire.h"

/* ------------------------------------------------------------------ */
/* Building samples and streams                                         */

typedef struct tsample {
    sio_sample s;
    sio_field f[4];
} tsample;

static void mk_sample(tsample *t, const char *key, const char *url,
                      uint32_t shard, uint64_t g, size_t nf,
                      const char *const *names, const char *const *data,
                      const size_t *lens)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < nf; i++) {
        t->f[i].name = names[i];
        t->f[i].data = (const unsigned char *)data[i];
        t->f[i].len = lens ? lens[i] : strlen(data[i]);
        t->s.bytes += t->f[i].len;
    }
    t->s.key = key;
    t->s.shard_url = url;
    t->s.shard_index = shard;
    t->s.global_index = g;
    t->s.nfields = nf;
    t->s.fields = t->f;
}

static sio_frames_header hdr(const char *job, uint64_t start)
{
    sio_frames_header h = {job, 3, 1, 4, start, 0, SIO_PARTITION_EVEN_DROP, NULL, 0, NULL, 0, 0, 0, 0, 0};
    return h;
}

/* A stream of n samples over shards 5 and 9 (alternating in runs of
 * three), start position `start`; big > 0 makes every 7th sample carry a
 * field of that many bytes. Ends with END unless error_reason is set. */
static void build_stream(sio_wbuf *out, size_t n, uint64_t start, size_t big,
                         const char *const *filter, size_t nfilter,
                         const char *error_reason)
{
    sio_wenc *w = NULL;
    sio_error err;
    sio_frames_header h = hdr("train-1", start);
    char key[64], cls[32];
    unsigned char *bigbuf = NULL;

    sio_wbuf_init(out, 1u << 30);
    CHECK(sio_framew_create(&h, filter, nfilter, sio_wbuf_append, out, &w,
                            &err) == SIO_OK);
    if (!w)
        return;
    if (big) {
        bigbuf = malloc(big);
        for (size_t i = 0; i < big; i++)
            bigbuf[i] = (unsigned char)(i * 31 + 7);
    }
    for (size_t i = 0; i < n; i++) {
        tsample t;
        uint32_t shard = (i / 3) % 2 ? 9 : 5;
        snprintf(key, sizeof key, "dir/sample%04zu", i);
        snprintf(cls, sizeof cls, "%zu", i % 10);
        const char *names[] = {"jpg", "cls", "txt"};
        const char *data[] = {"JPEGDATA", cls, "some text"};
        size_t lens[] = {8, strlen(cls), 9};
        if (big && i % 7 == 0) {
            data[0] = (const char *)bigbuf;
            lens[0] = big;
        }
        mk_sample(&t, key, shard == 5 ? "file:///d/shard-5.tar"
                                      : "file:///d/shard-9.tar",
                  shard, 100 + i * 4 + 1, i % 5 == 4 ? 1 : 3,
                  i % 5 == 4 ? names + 2 : names,
                  i % 5 == 4 ? data + 2 : data, i % 5 == 4 ? lens + 2 : lens);
        CHECK(sio_wenc_sample(w, &t.s, start + i) == SIO_OK);
    }
    if (error_reason) {
        CHECK(sio_wenc_error(w, error_reason, 0, 0) == SIO_OK);
    } else {
        sio_tarw_summary sum = {3, 1, 4, start, n, start + n};
        CHECK(sio_wenc_end(w, &sum) == SIO_OK);
    }
    CHECK_EQ_U64(sio_wenc_bytes(w), out->len);
    sio_wenc_destroy(w);
    free(bigbuf);
}

/* ------------------------------------------------------------------ */
/* Decoding into a transcript                                           */

typedef struct result {
    sio_wbuf t;        /* transcript of events */
    sio_code rc;       /* first error of feed, else finish() */
    sio_framer_status status;
    size_t headers, shards, samples, ends, errors;
    int retryable;           /* of the ERROR event */
    uint32_t retry_after_ms; /* of the ERROR event */
    char errmsg[512];
} result;

static void tr(result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tr(result *r, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = sizeof line - 1; /* cut, never read past line */
    sio_wbuf_append(&r->t, line, (size_t)n);
}

static void record(result *r, const sio_frame_event *ev)
{
    switch (ev->type) {
    case SIO_FRAMER_HEADER:
        r->headers++;
        tr(r, "H %s %" PRIu64 " %u/%u %" PRIu64 " %" PRIu64 " %s %d:",
           ev->header.job, ev->header.epoch, ev->header.rank,
           ev->header.world, ev->header.start, ev->header.global_start,
           sio_partition_name(ev->header.partition), ev->has_fields);
        for (size_t i = 0; i < ev->nfields; i++)
            tr(r, " %s", ev->fields[i]);
        tr(r, "\n");
        break;
    case SIO_FRAMER_SHARD:
        r->shards++;
        tr(r, "S %u %s\n", ev->shard_index, ev->shard_url);
        break;
    case SIO_FRAMER_SAMPLE:
        r->samples++;
        tr(r, "M %" PRIu64 " %" PRIu64 " %u %s %.*s %zu %zu:",
           ev->global_index, ev->position, ev->shard_index, ev->shard_url,
           (int)ev->key_len, ev->key, ev->nsample_fields, ev->sample_bytes);
        for (size_t i = 0; i < ev->nsample_fields; i++) {
            const sio_frame_field *f = &ev->sample_fields[i];
            tr(r, " %.*s=%zu:", (int)f->name_len, f->name, f->len);
            sio_wbuf_append(&r->t, f->data, f->len);
        }
        tr(r, "\n");
        break;
    case SIO_FRAMER_END:
        r->ends++;
        tr(r, "E %" PRIu64 " %u/%u %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
           ev->summary.epoch, ev->summary.rank, ev->summary.world,
           ev->summary.start, ev->summary.samples, ev->summary.position);
        break;
    case SIO_FRAMER_ERROR:
        r->errors++;
        r->retryable = ev->retryable;
        r->retry_after_ms = ev->retry_after_ms;
        tr(r, "X %s %d %u\n", ev->reason, ev->retryable, ev->retry_after_ms);
        break;
    default:
        break;
    }
}

/* Feed one chunk completely, recording events; returns the feed code. */
static sio_code feed_all(sio_framer *f, result *r, const unsigned char *p,
                         size_t len)
{
    sio_code rc = SIO_OK;
    while (len > 0 || rc != SIO_OK) {
        sio_frame_event ev;
        size_t used = 0;
        rc = sio_framer_feed(f, p, len, &used, &ev);
        if (rc != SIO_OK)
            break;
        CHECK(used <= len);
        CHECK(used > 0 || ev.type != SIO_FRAMER_NONE);
        record(r, &ev);
        p += used;
        len -= used;
        if (ev.type == SIO_FRAMER_NONE)
            CHECK(len == 0);
    }
    return rc;
}

/* Decode `len` bytes split at the offsets in cuts[] (ascending). */
static void decode_chunks(result *r, const unsigned char *p, size_t len,
                          const size_t *cuts, size_t ncuts,
                          const sio_framer_limits *lim)
{
    sio_framer *f = NULL;
    sio_error err;
    memset(r, 0, sizeof *r);
    sio_wbuf_init(&r->t, 1u << 30);
    CHECK(sio_framer_create(lim, &f, &err) == SIO_OK);
    size_t at = 0;
    r->rc = SIO_OK;
    for (size_t i = 0; i <= ncuts && r->rc == SIO_OK; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        r->rc = feed_all(f, r, p + at, end - at);
        at = end;
    }
    if (r->rc == SIO_OK)
        r->rc = sio_framer_finish(f);
    r->status = sio_framer_state(f);
    snprintf(r->errmsg, sizeof r->errmsg, "%s", sio_framer_errmsg(f));
    sio_framer_destroy(f);
    /* NUL-terminate for strstr; the terminator is not part of len. */
    if (sio_wbuf_append(&r->t, "", 1) == SIO_OK)
        r->t.len--;
}

static void decode_whole(result *r, const unsigned char *p, size_t len)
{
    decode_chunks(r, p, len, NULL, 0, NULL);
}

static int same_transcript(const result *a, const result *b)
{
    return a->t.len == b->t.len &&
           (a->t.len == 0 || memcmp(a->t.data, b->t.data, a->t.len) == 0) &&
           a->rc == b->rc && a->status == b->status;
}

/* ------------------------------------------------------------------ */
/* Round trips                                                          */

static void test_round_trip_every_split(void)
{
    sio_wbuf s;
    result whole, part;
    build_stream(&s, 7, 0, 0, NULL, 0, NULL);
    decode_whole(&whole, s.data, s.len);
    CHECK(whole.rc == SIO_OK);
    CHECK(whole.status == SIO_FRAMER_ENDED);
    CHECK_EQ_U64(whole.headers, 1);
    CHECK_EQ_U64(whole.samples, 7);
    CHECK_EQ_U64(whole.shards, 2);
    CHECK_EQ_U64(whole.ends, 1);

    /* The exact transcript of the first sample and the header. */
    const char *want_head = "H train-1 3 1/4 0 0 even-drop 0:\n"
                            "S 5 file:///d/shard-5.tar\n"
                            "M 101 0 5 file:///d/shard-5.tar dir/sample0000 "
                            "3 18: jpg=8:JPEGDATA cls=1:0 txt=9:some text\n";
    CHECK(whole.t.len > strlen(want_head) &&
          memcmp(whole.t.data, want_head, strlen(want_head)) == 0);

    /* Every single split point, and byte-at-a-time. */
    int all_same = 1;
    for (size_t k = 0; k <= s.len; k++) {
        decode_chunks(&part, s.data, s.len, &k, 1, NULL);
        if (!same_transcript(&whole, &part)) {
            all_same = 0;
            fprintf(stderr, "split at %zu differs\n", k);
        }
        sio_wbuf_free(&part.t);
    }
    CHECK(all_same);
    size_t *cuts = malloc(s.len * sizeof *cuts);
    for (size_t k = 0; k < s.len; k++)
        cuts[k] = k;
    decode_chunks(&part, s.data, s.len, cuts, s.len, NULL);
    CHECK(same_transcript(&whole, &part));
    sio_wbuf_free(&part.t);
    free(cuts);
    sio_wbuf_free(&whole.t);
    sio_wbuf_free(&s);
}

static void test_round_trip_random_chunks(void)
{
    sio_wbuf s;
    result whole, part;
    /* 300 samples, every 7th with a 200 KB field, resuming at 40. */
    build_stream(&s, 300, 40, 200000, NULL, 0, NULL);
    decode_whole(&whole, s.data, s.len);
    CHECK(whole.rc == SIO_OK);
    CHECK_EQ_U64(whole.samples, 300);
    CHECK(memmem(whole.t.data, whole.t.len, "E 3 1/4 40 300 340\n", 19) != NULL);

    uint64_t seed = 0x9E3779B97F4A7C15ull;
    size_t *cuts = malloc(s.len * sizeof *cuts);
    for (int round = 0; round < 20; round++) {
        size_t n = 0, at = 0;
        size_t maxchunk = round % 2 ? 64 : 300000;
        for (;;) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            at += 1 + (size_t)(seed % maxchunk);
            if (at >= s.len)
                break;
            cuts[n++] = at;
        }
        decode_chunks(&part, s.data, s.len, cuts, n, NULL);
        CHECK(same_transcript(&whole, &part));
        sio_wbuf_free(&part.t);
    }
    free(cuts);
    sio_wbuf_free(&whole.t);
    sio_wbuf_free(&s);
}

/* Views of a frame that arrives whole point into the caller's bytes. */
static void test_zero_copy_views(void)
{
    sio_wbuf s;
    sio_framer *f = NULL;
    sio_error err;
    build_stream(&s, 3, 0, 0, NULL, 0, NULL);
    CHECK(sio_framer_create(NULL, &f, &err) == SIO_OK);
    const unsigned char *p = s.data;
    size_t len = s.len;
    int saw = 0;
    while (len) {
        sio_frame_event ev;
        size_t used;
        CHECK(sio_framer_feed(f, p, len, &used, &ev) == SIO_OK);
        if (ev.type == SIO_FRAMER_SAMPLE) {
            const unsigned char *d = ev.sample_fields[0].data;
            CHECK(d >= s.data && d < s.data + s.len);
            CHECK((const unsigned char *)ev.key >= s.data &&
                  (const unsigned char *)ev.key < s.data + s.len);
            saw++;
        }
        p += used;
        len -= used;
    }
    CHECK_EQ_U64(saw, 3);
    CHECK(sio_framer_finish(f) == SIO_OK);
    CHECK_EQ_U64(sio_framer_bytes(f), s.len);
    CHECK_EQ_U64(sio_framer_samples(f), 3);
    sio_framer_destroy(f);
    sio_wbuf_free(&s);
}

/* The encoder hands payloads to the sink by pointer. */
typedef struct ptr_sink {
    const void *want;
    int seen;
    size_t calls;
} ptr_sink;

static sio_code ptr_sink_write(void *u, const void *data, size_t len)
{
    ptr_sink *ps = u;
    ps->calls++;
    if (data == ps->want)
        ps->seen = 1;
    (void)len;
    return SIO_OK;
}

static void test_encoder_zero_copy(void)
{
    static char payload[5000];
    ptr_sink ps = {payload, 0, 0};
    sio_wenc *w = NULL;
    sio_error err;
    sio_frames_header h = hdr("j", 0);
    tsample t;
    const char *names[] = {"bin"};
    const char *data[] = {payload};
    size_t lens[] = {sizeof payload};
    mk_sample(&t, "k", "u", 0, 0, 1, names, data, lens);
    CHECK(sio_framew_create(&h, NULL, 0, ptr_sink_write, &ps, &w, &err) ==
          SIO_OK);
    CHECK(sio_wenc_sample(w, &t.s, 0) == SIO_OK);
    CHECK(ps.seen);
    sio_wenc_destroy(w);
}

/* ------------------------------------------------------------------ */
/* Filter, shards, trailers                                             */

static void test_fields_filter(void)
{
    sio_wbuf s;
    result r;
    const char *filter[] = {"cls", "jpg"};
    build_stream(&s, 5, 0, 0, filter, 2, NULL);
    decode_whole(&r, s.data, s.len);
    CHECK(r.rc == SIO_OK);
    const char *t = (const char *)r.t.data;
    CHECK(strncmp(t, "H train-1 3 1/4 0 0 even-drop 1: cls jpg\n", 40) == 0);
    /* Sample 0 keeps jpg and cls in shard order; sample 4 has only txt and
     * comes with 0 fields, so positions stay dense. */
    CHECK(strstr(t, "dir/sample0000 2 9: jpg=8:JPEGDATA cls=1:0\n") != NULL);
    CHECK(strstr(t, "M 117 4 9 file:///d/shard-9.tar dir/sample0004 0 0:\n") !=
          NULL);
    CHECK(strstr(t, "txt=") == NULL);
    CHECK_EQ_U64(r.samples, 5);
    sio_wbuf_free(&r.t);
    sio_wbuf_free(&s);

    /* Filter limits as for the tar encoder. */
    sio_wenc *w = NULL;
    sio_error err;
    sio_frames_header h = hdr("j", 0);
    const char *bad[] = {""};
    sio_wbuf b;
    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_framew_create(&h, bad, 1, sio_wbuf_append, &b, &w, &err) ==
          SIO_ERR_INVALID);
    CHECK(w == NULL);
    sio_wbuf_free(&b);
}

static void test_shard_announcements(void)
{
    sio_wbuf s;
    result r;
    build_stream(&s, 12, 0, 0, NULL, 0, NULL);
    decode_whole(&r, s.data, s.len);
    CHECK(r.rc == SIO_OK);
    /* Shards 5 and 9 alternate in runs of three: each announced once,
     * right before its first sample. */
    CHECK_EQ_U64(r.shards, 2);
    const char *t = (const char *)r.t.data;
    const char *s5 = strstr(t, "S 5 "), *s9 = strstr(t, "S 9 ");
    const char *m3 = strstr(t, "dir/sample0003");
    const char *m2 = strstr(t, "dir/sample0002");
    CHECK(s5 && s9 && m3 && m2 && s5 < s9 && m2 < s9 && s9 < m3);
    sio_wbuf_free(&r.t);
    sio_wbuf_free(&s);
}

static void test_error_trailer(void)
{
    sio_wbuf s;
    result r;
    build_stream(&s, 4, 0, 0, NULL, 0, "shard file:///d/x.tar: corrupt");
    decode_whole(&r, s.data, s.len);
    CHECK(r.rc == SIO_ERR_IO);
    CHECK(r.status == SIO_FRAMER_FAILED);
    CHECK_EQ_U64(r.errors, 1);
    CHECK_EQ_U64(r.samples, 4);
    CHECK_STR(r.errmsg, "server error: shard file:///d/x.tar: corrupt");
    sio_wbuf_free(&r.t);
    sio_wbuf_free(&s);

    /* A reason that is not UTF-8 is still sent, with '?' in its place. */
    build_stream(&s, 0, 0, 0, NULL, 0, "bad \xff byte");
    decode_whole(&r, s.data, s.len);
    CHECK(r.status == SIO_FRAMER_FAILED);
    CHECK_STR(r.errmsg, "server error: bad ? byte");
    sio_wbuf_free(&r.t);
    sio_wbuf_free(&s);
}

static void test_truncation(void)
{
    sio_wbuf s;
    result r;
    build_stream(&s, 6, 0, 0, NULL, 0, NULL);
    /* Every proper prefix is a cut stream, never a clean end. */
    int all_cut = 1;
    for (size_t k = 0; k < s.len; k++) {
        decode_whole(&r, s.data, k);
        if (r.rc != SIO_ERR_IO || r.status != SIO_FRAMER_OPEN ||
            strncmp(r.errmsg, "truncated stream:", 17) != 0) {
            all_cut = 0;
            fprintf(stderr, "prefix %zu: rc %d status %d %s\n", k, r.rc,
                    r.status, r.errmsg);
        }
        sio_wbuf_free(&r.t);
    }
    CHECK(all_cut);
    decode_whole(&r, s.data, 0);
    CHECK_STR(r.errmsg, "truncated stream: no data");
    sio_wbuf_free(&r.t);
    decode_whole(&r, s.data, s.len);
    CHECK(r.rc == SIO_OK);
    sio_wbuf_free(&r.t);
    sio_wbuf_free(&s);
}

/* ------------------------------------------------------------------ */
/* Encoder limits                                                       */

static sio_code failing_sink(void *u, const void *data, size_t len)
{
    size_t *budget = u;
    (void)data;
    if (len > *budget)
        return SIO_ERR_IO;
    *budget -= len;
    return SIO_OK;
}

static void test_encoder_limits(void)
{
    sio_wenc *w = NULL;
    sio_error err;
    sio_wbuf b;
    sio_frames_header h = hdr("", 0);
    sio_wbuf_init(&b, 1 << 24);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &err) ==
          SIO_ERR_INVALID);
    h = hdr("job", 0);
    h.partition = (sio_partition)42;
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &err) ==
          SIO_ERR_INVALID);
    h = hdr("job", 0);
    h.epoch = UINT64_MAX;
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &err) ==
          SIO_ERR_INVALID);
    CHECK_EQ_U64(b.len, 0);

    h = hdr("job", 0);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &err) ==
          SIO_OK);
    tsample t;
    const char *names[] = {"txt"};
    const char *data[] = {"x"};
    /* A key above 65535 bytes and a shard index above the bitmap's bound
     * are refused before anything is written; the stream goes on. */
    char *longkey = malloc(70000);
    memset(longkey, 'k', 69999);
    longkey[69999] = '\0';
    mk_sample(&t, longkey, "u", 0, 0, 1, names, data, NULL);
    size_t before = b.len;
    CHECK(sio_wenc_sample(w, &t.s, 0) == SIO_ERR_LIMIT);
    mk_sample(&t, "k", "u", SIO_FRAMEW_SHARDS_MAX, 0, 1, names, data, NULL);
    CHECK(sio_wenc_sample(w, &t.s, 0) == SIO_ERR_LIMIT);
    mk_sample(&t, "", "u", 0, 0, 1, names, data, NULL);
    CHECK(sio_wenc_sample(w, &t.s, 0) == SIO_ERR_INVALID);
    CHECK_EQ_U64(b.len, before);
    mk_sample(&t, "k", "u", SIO_FRAMEW_SHARDS_MAX - 1, 0, 1, names, data,
              NULL);
    CHECK(sio_wenc_sample(w, &t.s, 0) == SIO_OK);
    sio_tarw_summary sum = {3, 1, 4, 0, 1, 1};
    CHECK(sio_wenc_end(w, &sum) == SIO_OK);
    sio_wenc_destroy(w);
    result r;
    decode_whole(&r, b.data, b.len);
    CHECK(r.rc == SIO_OK);
    CHECK_EQ_U64(r.samples, 1);
    sio_wbuf_free(&r.t);
    free(longkey);
    sio_wbuf_free(&b);

    /* A sink error mid-sample is returned, and the stream then refuses
     * samples and END (only the error trailer may follow). */
    size_t budget = 200;
    CHECK(sio_framew_create(&h, NULL, 0, failing_sink, &budget, &w, &err) ==
          SIO_OK);
    static char big[1000];
    const char *bdata[] = {big};
    size_t blen[] = {sizeof big};
    mk_sample(&t, "k", "u", 0, 0, 1, names, bdata, blen);
    CHECK(sio_wenc_sample(w, &t.s, 0) == SIO_ERR_IO);
    CHECK(sio_wenc_sample(w, &t.s, 1) == SIO_ERR_INVALID);
    CHECK(sio_wenc_end(w, &sum) == SIO_ERR_INVALID);
    budget = 1000;
    CHECK(sio_wenc_error(w, "sink failed", 0, 0) == SIO_OK);
    sio_wenc_destroy(w);
}

/* ------------------------------------------------------------------ */
/* Hostile inputs                                                       */

static void put_frame(sio_wbuf *b, int type, const void *payload, size_t len)
{
    unsigned char h[8] = {(unsigned char)type, 0, 0, 0,
                          (unsigned char)(len & 0xFF),
                          (unsigned char)((len >> 8) & 0xFF),
                          (unsigned char)((len >> 16) & 0xFF),
                          (unsigned char)((len >> 24) & 0xFF)};
    sio_wbuf_append(b, h, 8);
    sio_wbuf_append(b, payload, len);
}

static void put_json(sio_wbuf *b, int type, const char *json)
{
    put_frame(b, type, json, strlen(json));
}

#define GOOD_HEADER                                                         \
    "{\"version\":1,\"job\":\"j\",\"epoch\":0,\"rank\":0,\"world\":1,"      \
    "\"start\":0,\"global_start\":0,\"partition\":\"none\",\"fields\":null}"

static void start_stream(sio_wbuf *b)
{
    sio_wbuf_init(b, 1 << 24);
    sio_wbuf_append(b, "SCF1", 4);
    put_json(b, SIO_FRAME_HEADER, GOOD_HEADER);
}

static void put_shard(sio_wbuf *b, uint32_t idx, const char *url)
{
    unsigned char p[256];
    size_t ul = strlen(url);
    p[0] = (unsigned char)idx;
    p[1] = (unsigned char)(idx >> 8);
    p[2] = (unsigned char)(idx >> 16);
    p[3] = (unsigned char)(idx >> 24);
    memcpy(p + 4, url, ul);
    put_frame(b, SIO_FRAME_SHARD, p, 4 + ul);
}

/* A SAMPLE payload with one field; nf/dlen/klen overridable. */
static size_t sample_payload(unsigned char *p, uint64_t pos, uint32_t shard,
                             uint32_t klen, uint32_t nf, uint32_t nlen,
                             uint32_t dlen)
{
    memset(p, 0, 64);
    p[8] = (unsigned char)pos;
    p[16] = (unsigned char)shard;
    p[20] = (unsigned char)klen;
    p[21] = (unsigned char)(klen >> 8);
    p[22] = (unsigned char)nf;
    p[23] = (unsigned char)(nf >> 8);
    memcpy(p + 24, "key", 3);
    p[27] = (unsigned char)nlen;
    p[28] = (unsigned char)(nlen >> 8);
    p[29] = (unsigned char)dlen;
    p[30] = (unsigned char)(dlen >> 8);
    p[31] = (unsigned char)(dlen >> 16);
    p[32] = (unsigned char)(dlen >> 24);
    memcpy(p + 33, "txt", 3);
    memcpy(p + 36, "hi", 2);
    return 38;
}

static void expect(const sio_wbuf *b, sio_code want, const char *what)
{
    result r;
    decode_whole(&r, b->data, b->len);
    if (r.rc != want)
        fprintf(stderr, "%s: got %d (%s), want %d\n", what, r.rc, r.errmsg,
                want);
    CHECK(r.rc == want);
    if (want != SIO_OK && want != SIO_ERR_IO)
        CHECK(r.status == SIO_FRAMER_BROKEN && r.errmsg[0]);
    sio_wbuf_free(&r.t);
}

static void test_hostile(void)
{
    sio_wbuf b;
    unsigned char p[64];
    unsigned char big[8] = {SIO_FRAME_SAMPLE, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};

    /* The well-formed baseline: header, shard, one sample, END. */
    start_stream(&b);
    put_shard(&b, 1, "u");
    put_frame(&b, SIO_FRAME_SAMPLE, p, sample_payload(p, 0, 1, 3, 1, 3, 2));
    put_json(&b, SIO_FRAME_END, "{\"status\":\"ok\",\"epoch\":0,\"rank\":0,"
             "\"world\":1,\"start\":0,\"samples\":1,\"position\":1}");
    expect(&b, SIO_OK, "baseline");
    /* Bytes after END. */
    sio_wbuf_append(&b, "x", 1);
    expect(&b, SIO_ERR_FORMAT, "after end");
    sio_wbuf_free(&b);

    sio_wbuf_init(&b, 1 << 20);
    sio_wbuf_append(&b, "SCF2", 4);
    put_json(&b, SIO_FRAME_HEADER, GOOD_HEADER);
    expect(&b, SIO_ERR_FORMAT, "bad magic");
    sio_wbuf_free(&b);

    sio_wbuf_init(&b, 1 << 20);
    sio_wbuf_append(&b, "GET / HTTP/1.1\r\n", 16);
    expect(&b, SIO_ERR_FORMAT, "not frames");
    sio_wbuf_free(&b);

    /* Length above 2^31 - 1, and above a configured limit. */
    start_stream(&b);
    sio_wbuf_append(&b, big, 8);
    expect(&b, SIO_ERR_LIMIT, "huge length");
    sio_wbuf_free(&b);
    {
        start_stream(&b);
        put_shard(&b, 1, "u");
        put_frame(&b, SIO_FRAME_SAMPLE, p,
                  sample_payload(p, 0, 1, 3, 1, 3, 2));
        result r;
        sio_framer_limits lim = {30, 0, 0, 0};
        decode_chunks(&r, b.data, b.len, NULL, 0, &lim);
        CHECK(r.rc == SIO_ERR_LIMIT);
        sio_wbuf_free(&r.t);
        sio_wbuf_free(&b);
    }
    /* A 2^31 - 1 SAMPLE that never comes: memory follows the bytes that
     * arrived, and the end is a truncation. */
    start_stream(&b);
    big[4] = 0xFF, big[5] = 0xFF, big[6] = 0xFF, big[7] = 0x7F;
    sio_wbuf_append(&b, big, 8);
    sio_wbuf_append(&b, p, 40);
    expect(&b, SIO_ERR_IO, "announced huge, cut");
    sio_wbuf_free(&b);

    /* Unknown type vs a skippable extension. */
    start_stream(&b);
    put_frame(&b, 0x06, "zz", 2);
    expect(&b, SIO_ERR_FORMAT, "unknown type");
    sio_wbuf_free(&b);
    start_stream(&b);
    put_frame(&b, 0x80, "extension", 9);
    put_frame(&b, 0xFF, "", 0);
    put_json(&b, SIO_FRAME_END, "{\"status\":\"ok\",\"epoch\":0,\"rank\":0,"
             "\"world\":1,\"start\":0,\"samples\":0,\"position\":0}");
    expect(&b, SIO_OK, "extensions skipped");
    sio_wbuf_free(&b);

    /* Non-zero flags. */
    start_stream(&b);
    unsigned char fl[8] = {SIO_FRAME_SHARD, 1, 0, 0, 5, 0, 0, 0};
    sio_wbuf_append(&b, fl, 8);
    sio_wbuf_append(&b, "\1\0\0\0u", 5);
    expect(&b, SIO_ERR_FORMAT, "flags");
    sio_wbuf_free(&b);

    /* Frame order: SAMPLE before HEADER, HEADER twice. */
    sio_wbuf_init(&b, 1 << 20);
    sio_wbuf_append(&b, "SCF1", 4);
    put_shard(&b, 1, "u");
    expect(&b, SIO_ERR_FORMAT, "before header");
    sio_wbuf_free(&b);
    start_stream(&b);
    put_json(&b, SIO_FRAME_HEADER, GOOD_HEADER);
    expect(&b, SIO_ERR_FORMAT, "second header");
    sio_wbuf_free(&b);

    /* Bad HEADERs. */
    const char *bad_headers[] = {
        "not json",
        "[1,2]",
        "{\"version\":1}",
        "{\"version\":1,\"job\":\"j\",\"epoch\":0,\"rank\":1,\"world\":1,"
        "\"start\":0,\"global_start\":0,\"partition\":\"none\"}",
        "{\"version\":1,\"job\":\"j\",\"epoch\":-1,\"rank\":0,\"world\":1,"
        "\"start\":0,\"global_start\":0,\"partition\":\"none\"}",
        "{\"version\":1,\"job\":\"j\",\"epoch\":0,\"rank\":0,\"world\":1,"
        "\"start\":0,\"global_start\":0,\"partition\":\"odd\"}",
        "{\"version\":1,\"job\":\"j\",\"epoch\":0,\"rank\":0,\"world\":1,"
        "\"start\":0,\"global_start\":0,\"partition\":\"none\","
        "\"fields\":[\"\"]}",
        "{\"version\":1,\"version\":1}",
    };
    for (size_t i = 0; i < sizeof bad_headers / sizeof *bad_headers; i++) {
        sio_wbuf_init(&b, 1 << 20);
        sio_wbuf_append(&b, "SCF1", 4);
        put_json(&b, SIO_FRAME_HEADER, bad_headers[i]);
        expect(&b, SIO_ERR_FORMAT, bad_headers[i]);
        sio_wbuf_free(&b);
    }
    sio_wbuf_init(&b, 1 << 20);
    sio_wbuf_append(&b, "SCF1", 4);
    put_json(&b, SIO_FRAME_HEADER, "{\"version\":2}");
    expect(&b, SIO_ERR_UNSUPPORTED, "version 2");
    sio_wbuf_free(&b);

    /* SAMPLE payloads whose counts and lengths do not add up. */
    struct {
        uint32_t klen, nf, nlen, dlen, shard;
        uint64_t pos;
        const char *what;
    } bad[] = {
        {3, 65535, 3, 2, 1, 0, "field count overflows the frame"},
        {3, 1, 3, 0xFFFFFFFFu, 1, 0, "data length overflows"},
        {3, 1, 0xFFFF, 2, 1, 0, "name length overflows"},
        {0xFFFF, 1, 3, 2, 1, 0, "key length overflows"},
        {0, 1, 3, 2, 1, 0, "empty key"},
        {3, 1, 0, 5, 1, 0, "empty field name"},
        {3, 1, 3, 1, 1, 0, "trailing bytes"},
        {3, 1, 3, 2, 2, 0, "unannounced shard"},
        {3, 1, 3, 2, 1, 1, "position not dense"},
        {3, 2, 3, 2, 1, 0, "second field missing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        start_stream(&b);
        put_shard(&b, 1, "u");
        put_frame(&b, SIO_FRAME_SAMPLE, p,
                  sample_payload(p, bad[i].pos, bad[i].shard, bad[i].klen,
                                 bad[i].nf, bad[i].nlen, bad[i].dlen));
        expect(&b, SIO_ERR_FORMAT, bad[i].what);
        sio_wbuf_free(&b);
    }
    /* More fields than the limit. */
    {
        build_stream(&b, 1, 0, 0, NULL, 0, NULL); /* 3 fields */
        result r;
        sio_framer_limits lim = {0, 2, 0, 0};
        decode_chunks(&r, b.data, b.len, NULL, 0, &lim);
        CHECK(r.rc == SIO_ERR_LIMIT);
        sio_wbuf_free(&r.t);
        sio_wbuf_free(&b);
    }
    /* Shards: announced twice, NUL in the URL, more than the limit. */
    start_stream(&b);
    put_shard(&b, 1, "u");
    put_shard(&b, 1, "u");
    expect(&b, SIO_ERR_FORMAT, "shard twice");
    sio_wbuf_free(&b);
    start_stream(&b);
    put_frame(&b, SIO_FRAME_SHARD, "\1\0\0\0a\0b", 7);
    expect(&b, SIO_ERR_FORMAT, "NUL in URL");
    sio_wbuf_free(&b);
    {
        start_stream(&b);
        for (uint32_t i = 0; i < 200; i++)
            put_shard(&b, i, "file:///x");
        result r;
        sio_framer_limits lim = {0, 0, 100, 0};
        decode_chunks(&r, b.data, b.len, NULL, 0, &lim);
        CHECK(r.rc == SIO_ERR_LIMIT);
        CHECK_EQ_U64(r.shards, 100);
        sio_wbuf_free(&r.t);
        decode_whole(&r, b.data, b.len);
        CHECK(r.rc == SIO_ERR_IO); /* all 200 fit the default; no END */
        CHECK_EQ_U64(r.shards, 200);
        sio_wbuf_free(&r.t);
        sio_wbuf_free(&b);
    }
    /* END that disagrees with the stream; ERROR without a reason. */
    start_stream(&b);
    put_json(&b, SIO_FRAME_END, "{\"status\":\"ok\",\"epoch\":0,\"rank\":0,"
             "\"world\":1,\"start\":0,\"samples\":5,\"position\":5}");
    expect(&b, SIO_ERR_FORMAT, "END count");
    sio_wbuf_free(&b);
    start_stream(&b);
    put_json(&b, SIO_FRAME_END, "{\"status\":\"error\"}");
    expect(&b, SIO_ERR_FORMAT, "END status");
    sio_wbuf_free(&b);
    start_stream(&b);
    put_json(&b, SIO_FRAME_ERROR, "{\"status\":\"error\"}");
    expect(&b, SIO_ERR_FORMAT, "ERROR without reason");
    sio_wbuf_free(&b);
    /* A JSON frame above its sanity limit. */
    start_stream(&b);
    unsigned char jh[8] = {SIO_FRAME_ERROR, 0, 0, 0, 0, 0, 2, 0};
    sio_wbuf_append(&b, jh, 8);
    expect(&b, SIO_ERR_LIMIT, "JSON above limit");
    sio_wbuf_free(&b);

    /* A broken decoder keeps returning its error. */
    {
        sio_framer *f = NULL;
        sio_error err;
        sio_frame_event ev;
        size_t used;
        CHECK(sio_framer_create(NULL, &f, &err) == SIO_OK);
        CHECK(sio_framer_feed(f, "XXXX", 4, &used, &ev) == SIO_ERR_FORMAT);
        CHECK(sio_framer_feed(f, "SCF1", 4, &used, &ev) == SIO_ERR_FORMAT);
        CHECK_EQ_U64(used, 0);
        CHECK(sio_framer_finish(f) == SIO_ERR_FORMAT);
        CHECK(sio_framer_state(f) == SIO_FRAMER_BROKEN);
        sio_framer_destroy(f);
    }
}

/* The ERROR frame's JSON bytes of a stream built by the encoder. */
static int error_payload(const sio_wbuf *s, char *out, size_t outlen)
{
    size_t off = SIO_FRAMES_MAGIC_LEN;
    while (off + SIO_FRAME_HEAD_LEN <= s->len) {
        const unsigned char *h = s->data + off;
        size_t len = (size_t)h[4] | ((size_t)h[5] << 8) |
                     ((size_t)h[6] << 16) | ((size_t)h[7] << 24);
        if (h[0] == SIO_FRAME_ERROR && len < outlen) {
            memcpy(out, h + SIO_FRAME_HEAD_LEN, len);
            out[len] = '\0';
            return 0;
        }
        off += SIO_FRAME_HEAD_LEN + len;
    }
    return -1;
}

/* Retry advice in the ERROR frame: written by sio_wenc_error(retryable),
 * "retryable":false without it, and decoded into the event; a
 * trailer from a server without the key reads as not retryable. */
static void test_error_trailer_retry(void)
{
    sio_wbuf s;
    result r;
    char json[256];

    /* The drain's trailer, after two samples. */
    sio_wenc *w = NULL;
    sio_error err;
    sio_frames_header h = hdr("train-1", 0);
    sio_wbuf_init(&s, 1u << 20);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &s, &w, &err) ==
          SIO_OK);
    CHECK(sio_wenc_error(w, "server shutting down", 1, 2000) == SIO_OK);
    sio_wenc_destroy(w);
    CHECK(error_payload(&s, json, sizeof json) == 0);
    CHECK_STR(json, "{\"status\":\"error\",\"reason\":\"server shutting "
                    "down\",\"retryable\":true,\"retry_after_ms\":2000}");
    decode_whole(&r, s.data, s.len);
    CHECK(r.rc == SIO_ERR_IO);
    CHECK(r.status == SIO_FRAMER_FAILED);
    CHECK_EQ_U64(r.errors, 1);
    CHECK(r.retryable == 1);
    CHECK_EQ_U64(r.retry_after_ms, 2000);
    CHECK_STR(r.errmsg, "server error: server shutting down (retryable)");
    sio_wbuf_free(&r.t);
    sio_wbuf_free(&s);

    /* A final error says so. */
    build_stream(&s, 1, 0, 0, NULL, 0, "corrupt");
    CHECK(error_payload(&s, json, sizeof json) == 0);
    CHECK_STR(json, "{\"status\":\"error\",\"reason\":\"corrupt\","
                    "\"retryable\":false}");
    decode_whole(&r, s.data, s.len);
    CHECK(r.retryable == 0 && r.retry_after_ms == 0);
    sio_wbuf_free(&r.t);
    sio_wbuf_free(&s);

    /* Hand-made trailers: what readers accept and what they refuse. */
    static const struct {
        const char *json;
        sio_code rc;
        int retryable;
        uint32_t after;
    } cases[] = {
        /* a server that predates the key */
        {"{\"status\":\"error\",\"reason\":\"old\"}", SIO_ERR_IO, 0, 0},
        /* advice without retryable is ignored */
        {"{\"status\":\"error\",\"reason\":\"x\",\"retryable\":false,"
         "\"retry_after_ms\":500}", SIO_ERR_IO, 0, 0},
        /* retryable without advice: the client's own backoff */
        {"{\"status\":\"error\",\"reason\":\"x\",\"retryable\":true}",
         SIO_ERR_IO, 1, 0},
        /* advice above the maximum is clamped */
        {"{\"status\":\"error\",\"reason\":\"x\",\"retryable\":true,"
         "\"retry_after_ms\":99999999999}", SIO_ERR_IO, 1,
         SIO_RETRY_AFTER_MAX_MS},
        /* unknown keys are ignored */
        {"{\"status\":\"error\",\"reason\":\"x\",\"retryable\":true,"
         "\"retry_after_ms\":7,\"hint\":[1]}", SIO_ERR_IO, 1, 7},
        /* malformed advice breaks the stream */
        {"{\"status\":\"error\",\"reason\":\"x\",\"retryable\":1}",
         SIO_ERR_FORMAT, 0, 0},
        {"{\"status\":\"error\",\"reason\":\"x\",\"retryable\":true,"
         "\"retry_after_ms\":-1}", SIO_ERR_FORMAT, 0, 0},
        {"{\"status\":\"error\",\"reason\":\"x\",\"retryable\":true,"
         "\"retry_after_ms\":\"2s\"}", SIO_ERR_FORMAT, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sio_wbuf b;
        start_stream(&b);
        put_json(&b, SIO_FRAME_ERROR, cases[i].json);
        decode_whole(&r, b.data, b.len);
        if (r.rc != cases[i].rc)
            fprintf(stderr, "case %zu: got %d (%s)\n", i, r.rc, r.errmsg);
        CHECK(r.rc == cases[i].rc);
        if (cases[i].rc == SIO_ERR_IO) {
            CHECK(r.status == SIO_FRAMER_FAILED);
            CHECK(r.retryable == cases[i].retryable);
            CHECK_EQ_U64(r.retry_after_ms, cases[i].after);
        } else {
            CHECK(r.status == SIO_FRAMER_BROKEN);
        }
        sio_wbuf_free(&r.t);
        sio_wbuf_free(&b);
    }
}

/* The replica set's identity in HEADER: written, decoded; absent keys
 * leave has_ident 0; a malformed one is refused on both sides. */
/* The HEADER of hdr("job", 0) written and read back, its bytes without
 * `key` (string members of the result are not valid: the decoder is
 * gone). */
static sio_frames_header plain_header(const char *key)
{
    sio_frames_header h = hdr("job", 0);
    sio_wbuf b;
    sio_wenc *w = NULL;
    sio_framer *f = NULL;
    sio_error e;
    sio_frame_event ev;
    size_t used = 0;
    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &e) ==
          SIO_OK);
    sio_wenc_destroy(w);
    CHECK(memmem(b.data, b.len, key, strlen(key)) == NULL);
    CHECK(sio_framer_create(NULL, &f, &e) == SIO_OK);
    CHECK(sio_framer_feed(f, b.data, b.len, &used, &ev) == SIO_OK);
    CHECK(ev.type == SIO_FRAMER_HEADER);
    h = ev.header;
    h.job = NULL;
    h.fingerprint = NULL;
    h.sources = NULL;
    sio_framer_destroy(f);
    sio_wbuf_free(&b);
    return h;
}

/* A stream of the magic and a HEADER with the usual keys and `extra`
 * (JSON members): the decoder refuses it (SIO_ERR_FORMAT). */
static void expect_bad_header(const char *extra, const char *what)
{
    char json[512];
    sio_wbuf b;
    snprintf(json, sizeof json,
             "{\"version\":1,\"job\":\"j\",\"epoch\":0,\"rank\":0,"
             "\"world\":1,\"start\":0,\"global_start\":0,"
             "\"partition\":\"even-drop\",\"fields\":null,%s}", extra);
    sio_wbuf_init(&b, 1 << 20);
    sio_wbuf_append(&b, SIO_FRAMES_MAGIC, SIO_FRAMES_MAGIC_LEN);
    put_json(&b, SIO_FRAME_HEADER, json);
    expect(&b, SIO_ERR_FORMAT, what);
    sio_wbuf_free(&b);
}

static void test_ident(void)
{
    sio_wbuf b;
    sio_wenc *w = NULL;
    sio_error e;
    sio_frames_header h = hdr("job", 0);
    h.fingerprint = "00112233445566778899aabbccddeeff";
    h.replica = 1;
    h.replicas = 3;
    h.served_by = 2;
    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &e) ==
          SIO_OK);
    sio_wenc_destroy(w);
    sio_framer *f = NULL;
    CHECK(sio_framer_create(NULL, &f, &e) == SIO_OK);
    size_t used = 0;
    sio_frame_event ev;
    CHECK(sio_framer_feed(f, b.data, b.len, &used, &ev) == SIO_OK);
    CHECK(ev.type == SIO_FRAMER_HEADER && ev.header.has_ident);
    CHECK(strcmp(ev.header.fingerprint, h.fingerprint) == 0);
    CHECK(ev.header.replica == 1 && ev.header.replicas == 3 &&
          ev.header.served_by == 2);
    sio_framer_destroy(f);
    sio_wbuf_free(&b);

    /* Without: no keys, has_ident 0. */
    CHECK(!plain_header("fingerprint").has_ident);
    h = hdr("job", 0);

    /* The writer refuses a part outside the set or a bad fingerprint. */
    h.fingerprint = "00112233445566778899aabbccddeeff";
    h.replicas = 2;
    h.replica = 2;
    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &e) ==
          SIO_ERR_INVALID);
    h.replica = 0;
    h.fingerprint = "short";
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &e) ==
          SIO_ERR_INVALID);
    sio_wbuf_free(&b);

    /* Hostile HEADERs: a fingerprint that is not 32 hex digits, a replica
     * at or above replicas, served_by missing. */
    const char *bad[] = {
        "\"fingerprint\":\"zz112233445566778899aabbccddeeff\",\"replica\":0,"
        "\"replicas\":1,\"served_by\":0",
        "\"fingerprint\":\"00112233445566778899aabbccddeeff\",\"replica\":3,"
        "\"replicas\":3,\"served_by\":0",
        "\"fingerprint\":\"00112233445566778899aabbccddeeff\",\"replica\":0,"
        "\"replicas\":3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad_header(bad[i], "bad identity");
}

/* Heartbeats: HEADER announces heartbeat_ms, a KEEPALIVE frame (0x80,
 * no payload) between samples is skipped by the decoder, and a tar
 * encoder has none. */
static void test_keepalive(void)
{
    sio_wbuf b;
    sio_wenc *w = NULL;
    sio_error e;
    sio_frames_header h = hdr("job", 0);
    h.heartbeat_ms = 1000;
    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &e) ==
          SIO_OK);
    CHECK(memmem(b.data, b.len, "\"heartbeat_ms\":1000", 18) != NULL);
    size_t before = b.len;
    CHECK(sio_wenc_keepalive(w) == SIO_OK);
    CHECK_EQ_U64(b.len - before, SIO_FRAME_HEAD_LEN);
    CHECK(b.data[before] == SIO_FRAME_KEEPALIVE);
    tsample t;
    const char *names[] = {"cls"};
    const char *data[] = {"7"};
    mk_sample(&t, "k/1", "file:///s.tar", 0, 0, 1, names, data, NULL);
    CHECK(sio_wenc_sample(w, &t.s, 0) == SIO_OK);
    CHECK(sio_wenc_keepalive(w) == SIO_OK);
    sio_tarw_summary sum = {3, 1, 4, 0, 1, 1};
    CHECK(sio_wenc_end(w, &sum) == SIO_OK);
    sio_wenc_destroy(w);
    result r;
    decode_whole(&r, b.data, b.len);
    CHECK(r.rc == SIO_OK && r.headers == 1 && r.samples == 1 && r.ends == 1);
    sio_wbuf_free(&r.t);
    sio_framer *f = NULL;
    size_t used = 0;
    sio_frame_event ev;
    CHECK(sio_framer_create(NULL, &f, &e) == SIO_OK);
    CHECK(sio_framer_feed(f, b.data, b.len, &used, &ev) == SIO_OK);
    CHECK(ev.type == SIO_FRAMER_HEADER && ev.header.heartbeat_ms == 1000);
    sio_framer_destroy(f);
    sio_wbuf_free(&b);

    /* None announced: no key, 0 decoded. */
    CHECK(plain_header("heartbeat").heartbeat_ms == 0);
    h = hdr("job", 0);

    /* The writer refuses more than the maximum; tar has no heartbeat. */
    h.heartbeat_ms = SIO_FRAMES_HEARTBEAT_MAX_MS + 1;
    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_framew_create(&h, NULL, 0, sio_wbuf_append, &b, &w, &e) ==
          SIO_ERR_INVALID);
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &b, &w, &e) == SIO_OK);
    size_t tl = b.len;
    CHECK(sio_wenc_keepalive(w) == SIO_ERR_UNSUPPORTED);
    CHECK_EQ_U64(b.len, tl);
    sio_wenc_destroy(w);
    sio_wbuf_free(&b);

    /* Hostile HEADERs: 0, negative, a string, above the maximum. */
    const char *bad[] = {"\"heartbeat_ms\":0", "\"heartbeat_ms\":-5",
                         "\"heartbeat_ms\":\"1000\"",
                         "\"heartbeat_ms\":600001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad_header(bad[i], "heartbeat_ms");
}

int main(void)
{
    test_ident();
    test_keepalive();
    test_round_trip_every_split();
    test_round_trip_random_chunks();
    test_zero_copy_views();
    test_encoder_zero_copy();
    test_fields_filter();
    test_shard_announcements();
    test_error_trailer();
    test_error_trailer_retry();
    test_truncation();
    test_encoder_limits();
    test_hostile();
    CHECK_MAIN_END();
}
