/*
 * test_client.c — the C client library (clients/c, shardcast_client.h)
 * against a tiny in-process HTTP server (tests/unit/testhttpd.h) that
 * serves streams made by the wire module's own encoders (sio_framew,
 * sio_tarw) in chunked encoding, and misbehaves on request: both formats
 * and the field filter; resume after a cut mid-frame and after a stall; an
 * error trailer; a retryable error trailer (a drain) and a 503 with
 * Retry-After resumed after the advised wait; the retry budget (attempts,
 * time) running out; reconnects running out; 404/401 with the server's
 * reason; a wrong Content-Type; connection refused; the content hash. (The
 * tar reader the client uses, sio_tarr_parse, is tested on its own in
 * tests/unit/wire/test_tarread.c.)
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "shardcast_client.h"
#include "shardio_wire.h"
#include "testhttpd.h"

#define NSAMPLES 20

typedef struct fake {
    _Atomic int requests;
    char starts[64][32]; /* start= of each request, in order */
    pthread_mutex_t mu;
} fake;

/* Chunked sink into a socket; budget < 0: unlimited, else cut (close the
 * connection) once that many payload bytes were written. */
typedef struct csink {
    int fd;
    long budget;
} csink;

static sio_code chunk_write(void *ud, const void *data, size_t len)
{
    csink *c = ud;
    char head[32];
    if (c->budget >= 0) {
        if ((long)len > c->budget) {
            /* Write the part that fits, unterminated, then fail. */
            int hl = snprintf(head, sizeof head, "%zx\r\n", len);
            thttp_write(c->fd, head, (size_t)hl);
            thttp_write(c->fd, data, (size_t)c->budget);
            c->budget = 0;
            return SIO_ERR_IO;
        }
        c->budget -= (long)len;
    }
    int hl = snprintf(head, sizeof head, "%zx\r\n", len);
    if (thttp_write(c->fd, head, (size_t)hl) || thttp_write(c->fd, data, len) ||
        thttp_write(c->fd, "\r\n", 2))
        return SIO_ERR_IO;
    return SIO_OK;
}

static int query(const char *path, const char *name, char *buf, size_t len)
{
    const char *q = strchr(path, '?');
    size_t n = strlen(name);
    while (q) {
        q++;
        if (strncmp(q, name, n) == 0 && q[n] == '=') {
            const char *v = q + n + 1;
            size_t vl = strcspn(v, "&");
            if (vl >= len)
                vl = len - 1;
            memcpy(buf, v, vl);
            buf[vl] = '\0';
            return 0;
        }
        q = strchr(q, '&');
    }
    return -1;
}

static void make_sample(uint64_t i, uint32_t rank, uint32_t world,
                        char *key, size_t klen, char *url, size_t ulen,
                        char *cls, unsigned char *bin, sio_field f[2],
                        sio_sample *s)
{
    snprintf(key, klen, "dir/s%04" PRIu64, i);
    snprintf(url, ulen, "file:///d/shard-%" PRIu64 ".tar", i % 3);
    snprintf(cls, 8, "%" PRIu64, i % 10);
    for (size_t k = 0; k < i * 100; k++)
        bin[k] = (unsigned char)(i + k);
    f[0].name = "cls";
    f[0].data = (const unsigned char *)cls;
    f[0].len = strlen(cls);
    f[1].name = "bin";
    f[1].data = bin;
    f[1].len = i * 100;
    memset(s, 0, sizeof *s);
    s->key = key;
    s->shard_url = url;
    s->shard_index = (uint32_t)(i % 3);
    s->global_index = i * world + rank;
    s->nfields = 2;
    s->fields = f;
    s->bytes = f[0].len + f[1].len;
}

static int handler(void *ud, int fd, const thttp_req *r)
{
    fake *fk = ud;
    char job[64] = "", fmt[16] = "tar", sv[32] = "0", rv[16] = "0",
         wv[16] = "1", fields[128] = "", auth[128] = "";
    int nreq = atomic_fetch_add(&fk->requests, 1);
    sscanf(r->path, "/v1/jobs/%63[^/]", job);
    query(r->path, "format", fmt, sizeof fmt);
    query(r->path, "start", sv, sizeof sv);
    query(r->path, "rank", rv, sizeof rv);
    query(r->path, "world", wv, sizeof wv);
    int has_fields = query(r->path, "fields", fields, sizeof fields) == 0;
    pthread_mutex_lock(&fk->mu);
    if (nreq < 64)
        snprintf(fk->starts[nreq], sizeof fk->starts[0], "%s", sv);
    pthread_mutex_unlock(&fk->mu);

    if (strcmp(job, "nojob") == 0) {
        static const char b[] = "error: unknown job \"nojob\"\n";
        thttp_respond(fd, 404, "Content-Type: text/plain\r\n", b,
                      sizeof b - 1);
        return 0;
    }
    if (strcmp(job, "auth") == 0 &&
        (thttp_header(r, "Authorization", auth, sizeof auth) != 0 ||
         strcmp(auth, "Bearer sekrit") != 0)) {
        static const char b[] = "error: missing or wrong bearer token\n";
        thttp_respond(fd, 401, NULL, b, sizeof b - 1);
        return 0;
    }
    if (strcmp(job, "html") == 0) {
        static const char b[] = "<html></html>";
        thttp_respond(fd, 200, "Content-Type: text/html\r\n", b,
                      sizeof b - 1);
        return 0;
    }

    if (strcmp(job, "busy") == 0 && nreq == 1) {
        /* The restarted server is not ready yet. */
        static const char b[] = "error: job busy is not ready: loading\n";
        thttp_respond(fd, 503, "Retry-After: 1\r\n", b, sizeof b - 1);
        return 0;
    }

    int frames = strcmp(fmt, "frames") == 0;
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
                      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                      frames ? SIO_FRAMES_CONTENT_TYPE : "application/x-tar");
    thttp_write(fd, head, (size_t)hl);

    uint64_t start = strtoull(sv, NULL, 10);
    uint32_t rank = (uint32_t)strtoul(rv, NULL, 10);
    uint32_t world = (uint32_t)strtoul(wv, NULL, 10);
    csink cs = {fd, -1};
    /* "cut": the first response breaks inside the 4th sample's frame;
     * "alwayscut": every response breaks after the first sample. */
    if ((strcmp(job, "cut") == 0 && nreq == 0) || strcmp(job, "alwayscut") == 0)
        cs.budget = strcmp(job, "cut") != 0 ? 0 : frames ? 900 : 5000;
    const char *flist[4];
    size_t nf = 0;
    if (has_fields) {
        char *save = NULL;
        for (char *t = strtok_r(fields, ",", &save); t && nf < 4;
             t = strtok_r(NULL, ",", &save))
            flist[nf++] = t;
    }
    sio_wenc *fw = NULL;
    sio_wenc *tw = NULL;
    sio_error err;
    sio_code rc;
    if (frames) {
        sio_frames_header h = {job, 0, rank, world, start, 0,
                               SIO_PARTITION_EVEN_DROP, NULL, 0, NULL, 0, 0, 0, 0, 0};
        rc = sio_framew_create(&h, flist, nf, chunk_write, &cs, &fw, &err);
    } else {
        rc = sio_tarw_create(flist, nf, chunk_write, &cs, &tw, &err);
    }
    unsigned char *bin = malloc(NSAMPLES * 100 + 1);
    for (uint64_t i = start; rc == SIO_OK && i < NSAMPLES; i++) {
        char key[32], url[64], cls[8];
        sio_field f[2];
        sio_sample s;
        if (strcmp(job, "error") == 0 && i == 5) {
            const char *why = "shard file:///d/shard-2.tar: corrupt tar";
            if (frames)
                sio_wenc_error(fw, why, 0, 0);
            else
                sio_wenc_error(tw, why, 0, 0);
            rc = SIO_ERR_IO;
            break;
        }
        /* "drain": the first response ends after 5 samples with the
         * retryable trailer of a drain (come back in 300 ms); "busy": after
         * 3 samples, no advice (the second request gets a 503);
         * "alwaysdrain": every response ends so at once. */
        uint32_t after = 0;
        int drain = (strcmp(job, "drain") == 0 && nreq == 0 && i == 5 &&
                     (after = 300) != 0) ||
                    (strcmp(job, "busy") == 0 && nreq == 0 && i == 3) ||
                    (strcmp(job, "alwaysdrain") == 0 && (after = 50) != 0);
        if (drain) {
            if (frames)
                sio_wenc_error(fw, "server shutting down", 1, after);
            else
                sio_wenc_error(tw, "server shutting down", 1, after);
            rc = SIO_ERR_IO;
            break;
        }
        if (strcmp(job, "stall") == 0 && nreq == 0 && i == 2) {
            struct timespec d = {1, 500000000L};
            nanosleep(&d, NULL);
            rc = SIO_ERR_IO;
            break;
        }
        make_sample(i, rank, world, key, sizeof key, url, sizeof url, cls,
                    bin, f, &s);
        rc = frames ? sio_wenc_sample(fw, &s, i) : sio_wenc_sample(tw, &s, i);
    }
    if (rc == SIO_OK) {
        sio_tarw_summary sum = {0, rank, world, start, NSAMPLES - start,
                                NSAMPLES};
        rc = frames ? sio_wenc_end(fw, &sum) : sio_wenc_end(tw, &sum);
        if (rc == SIO_OK)
            thttp_write(fd, "0\r\n\r\n", 5);
    }
    free(bin);
    sio_wenc_destroy(fw);
    sio_wenc_destroy(tw);
    return 0; /* close: a cut response ends without the chunk terminator */
}

static char base[64];

static void opts_for(scc_options *o, const char *job, scc_format fmt)
{
    scc_options_init(o);
    o->server = base;
    o->job = job;
    o->rank = 1;
    o->world = 2;
    o->format = fmt;
    o->reconnect_delay_ms = 10;
    o->idle_timeout_ms = 500;
    o->connect_timeout_ms = 2000;
}

/* Read a whole stream; check each sample against what the server made.
 * Returns the final code; *count the samples read. */
static scc_code read_all(scc_stream *s, uint64_t first, int fields_cls_only,
                         uint64_t *count)
{
    const scc_sample *smp;
    scc_code rc;
    uint64_t want = first;
    *count = 0;
    while ((rc = scc_stream_next(s, &smp)) == SCC_OK && smp) {
        char key[32];
        snprintf(key, sizeof key, "dir/s%04" PRIu64, want);
        CHECK_EQ_U64(smp->position, want);
        CHECK_EQ_U64(smp->global_index, want * 2 + 1);
        CHECK(smp->key_len == strlen(key) &&
              memcmp(smp->key, key, smp->key_len) == 0);
        CHECK(smp->shard_url_len == strlen("file:///d/shard-0.tar"));
        const scc_field *cls = scc_sample_field(smp, "cls");
        const scc_field *bin = scc_sample_field(smp, "bin");
        CHECK(cls && cls->len >= 1 && cls->data[0] == '0' + want % 10);
        if (fields_cls_only) {
            CHECK(bin == NULL);
            CHECK_EQ_U64(smp->nfields, 1);
        } else if (want > 0) {
            int ok = bin && bin->len == want * 100;
            for (size_t k = 0; ok && k < bin->len; k++)
                ok = bin->data[k] == (unsigned char)(want + k);
            CHECK(ok);
        }
        want++;
        (*count)++;
    }
    return rc;
}

static void test_formats(void)
{
    scc_format fmts[2] = {SCC_FORMAT_FRAMES, SCC_FORMAT_TAR};
    for (int i = 0; i < 2; i++) {
        scc_options o;
        scc_stream *s = NULL;
        uint64_t n;
        opts_for(&o, "good", fmts[i]);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(scc_stream_format(s) == fmts[i]);
        CHECK(read_all(s, 0, 0, &n) == SCC_OK);
        CHECK_EQ_U64(n, NSAMPLES);
        const scc_summary *sum = scc_stream_summary(s);
        CHECK(sum && sum->position == NSAMPLES && sum->rank == 1 &&
              sum->world == 2);
        CHECK_EQ_U64(scc_stream_reconnects(s), 0);
        /* After the end, next keeps saying "end". */
        const scc_sample *smp = (const scc_sample *)1;
        CHECK(scc_stream_next(s, &smp) == SCC_OK && smp == NULL);
        if (fmts[i] == SCC_FORMAT_FRAMES)
            CHECK_STR(scc_stream_partition(s), "even-drop");
        scc_stream_close(s);

        /* A start position, and the field filter. */
        opts_for(&o, "good", fmts[i]);
        const char *fl[] = {"cls"};
        o.start = 7;
        o.fields = fl;
        o.nfields = 1;
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(strstr(scc_stream_url(s), "fields=cls") != NULL);
        CHECK(read_all(s, 7, 1, &n) == SCC_OK);
        CHECK_EQ_U64(n, NSAMPLES - 7);
        scc_stream_close(s);
    }
}

static void test_url_form(void)
{
    char url[256];
    scc_options o;
    scc_stream *s = NULL;
    uint64_t n;
    snprintf(url, sizeof url,
             "%s/v1/jobs/good/epochs/0/stream?rank=1&world=2&start=4", base);
    scc_options_init(&o);
    o.url = url;
    CHECK(scc_stream_open(&o, &s) == SCC_OK);
    /* start= is kept (and replaced on resume); format defaults to frames */
    CHECK(strstr(scc_stream_url(s), "start=4") != NULL);
    CHECK(strstr(scc_stream_url(s), "format=frames") != NULL);
    CHECK(read_all(s, 4, 0, &n) == SCC_OK);
    CHECK_EQ_U64(n, NSAMPLES - 4);
    scc_stream_close(s);
}

static void test_resume(fake *fk)
{
    scc_format fmts[2] = {SCC_FORMAT_FRAMES, SCC_FORMAT_TAR};
    const char *jobs[2] = {"cut", "stall"};
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 2; i++) {
            scc_options o;
            scc_stream *s = NULL;
            uint64_t n;
            atomic_store(&fk->requests, 0);
            opts_for(&o, jobs[j], fmts[i]);
            CHECK(scc_stream_open(&o, &s) == SCC_OK);
            CHECK(read_all(s, 0, 0, &n) == SCC_OK);
            /* Every sample exactly once, in order, across the break. */
            CHECK_EQ_U64(n, NSAMPLES);
            CHECK_EQ_U64(scc_stream_reconnects(s), 1);
            CHECK_EQ_U64(atomic_load(&fk->requests), 2);
            pthread_mutex_lock(&fk->mu);
            uint64_t resumed = strtoull(fk->starts[1], NULL, 10);
            pthread_mutex_unlock(&fk->mu);
            /* The second request starts where the first one stopped: the
             * stall after 2 samples (tar: a sample is complete only once
             * the next one's header is in, so 1), the cut inside sample 3
             * (frames: 900 bytes) or sample 1 (tar: 5000 bytes). */
            uint64_t want = i == 1 ? 1 : j == 1 ? 2 : 3;
            if (resumed != want)
                fprintf(stderr, "%s/%d resumed at %" PRIu64 "\n", jobs[j], i,
                        resumed);
            CHECK_EQ_U64(resumed, want);
            scc_stream_close(s);
        }

    /* Reconnects run out: a cut stream is reported as such. */
    scc_options o;
    scc_stream *s = NULL;
    uint64_t n;
    opts_for(&o, "alwayscut", SCC_FORMAT_FRAMES);
    o.max_reconnects = 2;
    CHECK(scc_stream_open(&o, &s) == SCC_OK);
    CHECK(read_all(s, 0, 0, &n) == SCC_ERR_CUT);
    CHECK_EQ_U64(n, 0);
    CHECK_EQ_U64(scc_stream_reconnects(s), 2);
    CHECK(strstr(scc_stream_errmsg(s), "cut") != NULL);
    scc_stream_close(s);

    /* No reconnects allowed. */
    opts_for(&o, "cut", SCC_FORMAT_TAR);
    o.max_reconnects = 0;
    atomic_store(&fk->requests, 0);
    CHECK(scc_stream_open(&o, &s) == SCC_OK);
    CHECK(read_all(s, 0, 0, &n) == SCC_ERR_CUT);
    CHECK(n < NSAMPLES);
    scc_stream_close(s);
}

/* A server that drains for a restart: its retryable trailer and a 503
 * with Retry-After are resumed after the advised wait, exactly once; a
 * final trailer is not (test_errors); the budget runs out as documented. */
static void test_retryable(fake *fk)
{
    scc_format fmts[2] = {SCC_FORMAT_FRAMES, SCC_FORMAT_TAR};
    for (int i = 0; i < 2; i++) {
        scc_options o;
        scc_stream *s = NULL;
        uint64_t n;

        atomic_store(&fk->requests, 0);
        opts_for(&o, "drain", fmts[i]);
        uint64_t t0 = sio_now_ms();
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_all(s, 0, 0, &n) == SCC_OK);
        CHECK_EQ_U64(n, NSAMPLES);
        CHECK_EQ_U64(scc_stream_reconnects(s), 1);
        /* the advice, not the 10 ms backoff */
        CHECK(sio_now_ms() - t0 >= 300);
        pthread_mutex_lock(&fk->mu);
        CHECK_STR(fk->starts[1], "5");
        pthread_mutex_unlock(&fk->mu);
        scc_stream_close(s);

        /* Trailer without advice, then a 503 with Retry-After: 1. */
        atomic_store(&fk->requests, 0);
        opts_for(&o, "busy", fmts[i]);
        t0 = sio_now_ms();
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_all(s, 0, 0, &n) == SCC_OK);
        CHECK_EQ_U64(n, NSAMPLES);
        CHECK_EQ_U64(scc_stream_reconnects(s), 2);
        CHECK(sio_now_ms() - t0 >= 1000);
        pthread_mutex_lock(&fk->mu);
        CHECK_STR(fk->starts[1], "3");
        CHECK_STR(fk->starts[2], "3");
        pthread_mutex_unlock(&fk->mu);
        scc_stream_close(s);

        /* The attempts run out: the server's reason and the budget are in
         * the message, the code is the server's. */
        opts_for(&o, "alwaysdrain", fmts[i]);
        o.max_reconnects = 3;
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_all(s, 0, 0, &n) == SCC_ERR_SERVER);
        CHECK_EQ_U64(n, 0);
        CHECK_EQ_U64(scc_stream_reconnects(s), 3);
        CHECK(strstr(scc_stream_errmsg(s), "server shutting down") != NULL);
        CHECK(strstr(scc_stream_errmsg(s), "attempts spent") != NULL);
        scc_stream_close(s);

        /* The time runs out first: 50 ms advice, 120 ms budget. */
        opts_for(&o, "alwaysdrain", fmts[i]);
        o.retry_budget_ms = 120;
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_all(s, 0, 0, &n) == SCC_ERR_SERVER);
        CHECK(scc_stream_reconnects(s) >= 1 && scc_stream_reconnects(s) <= 3);
        CHECK(strstr(scc_stream_errmsg(s), "time spent") != NULL);
        scc_stream_close(s);
    }
}

static void test_errors(void)
{
    scc_options o;
    scc_stream *s = NULL;
    uint64_t n;
    scc_format fmts[2] = {SCC_FORMAT_FRAMES, SCC_FORMAT_TAR};

    for (int i = 0; i < 2; i++) {
        opts_for(&o, "error", fmts[i]);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_all(s, 0, 0, &n) == SCC_ERR_SERVER);
        CHECK_EQ_U64(n, 5);
        CHECK_STR(scc_stream_errmsg(s),
                  "server error: shard file:///d/shard-2.tar: corrupt tar");
        CHECK_EQ_U64(scc_stream_reconnects(s), 0);
        scc_stream_close(s);
    }

    opts_for(&o, "nojob", SCC_FORMAT_FRAMES);
    CHECK(scc_stream_open(&o, &s) == SCC_ERR_NOTFOUND);
    CHECK_STR(scc_stream_errmsg(s), "HTTP 404: unknown job \"nojob\"");
    CHECK(scc_stream_http_status(s) == 404);
    scc_stream_close(s);

    opts_for(&o, "auth", SCC_FORMAT_FRAMES);
    CHECK(scc_stream_open(&o, &s) == SCC_ERR_AUTH);
    CHECK_STR(scc_stream_errmsg(s), "HTTP 401: missing or wrong bearer token");
    scc_stream_close(s);
    o.token = "sekrit";
    CHECK(scc_stream_open(&o, &s) == SCC_OK);
    CHECK(read_all(s, 0, 0, &n) == SCC_OK);
    CHECK(strstr(scc_stream_errmsg(s), "sekrit") == NULL);
    CHECK(strstr(scc_stream_url(s), "sekrit") == NULL);
    scc_stream_close(s);

    opts_for(&o, "html", SCC_FORMAT_FRAMES);
    CHECK(scc_stream_open(&o, &s) == SCC_ERR_PROTOCOL);
    scc_stream_close(s);

    /* Nothing listens on this port (bound, never listening). */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d", ntohs(a.sin_port));
    opts_for(&o, "good", SCC_FORMAT_FRAMES);
    o.server = dead;
    CHECK(scc_stream_open(&o, &s) == SCC_ERR_CONNECT);
    CHECK(strstr(scc_stream_errmsg(s), "connect") != NULL);
    scc_stream_close(s);
    close(fd);

    /* Bad arguments. */
    opts_for(&o, "good", SCC_FORMAT_FRAMES);
    o.rank = 2;
    CHECK(scc_stream_open(&o, &s) == SCC_ERR_INVALID);
    scc_stream_close(s);

    /* One-shot GET: body, and the reason of an error. */
    char url[128], *body = NULL, msg[256];
    size_t len;
    int st;
    snprintf(url, sizeof url, "%s/v1/jobs/nojob", base);
    CHECK(scc_http_get(url, NULL, 2000, 1 << 20, &body, &len, &st, msg,
                       sizeof msg) == SCC_ERR_NOTFOUND);
    CHECK(st == 404 && body == NULL);
    CHECK_STR(msg, "HTTP 404: unknown job \"nojob\"");
}

static void test_hash(void)
{
    /* sha256 over fields sorted by name: name, NUL, u64le length, data. */
    static const char want[] =
        "24ad99268280a32407bf4f4f35b5dc650350cef157b73245c4fcd5bd9e41e76a";
    scc_field f[2] = {{"txt", 3, (const unsigned char *)"hi", 2},
                      {"cls", 3, (const unsigned char *)"1", 1}};
    scc_sample s;
    unsigned char h[32];
    char hex[65];
    memset(&s, 0, sizeof s);
    s.nfields = 2;
    s.fields = f;
    CHECK(scc_sample_hash(&s, h) == SCC_OK);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    CHECK_STR(hex, want);
}

int main(void)
{
    thttp srv;
    fake fk;
    memset(&fk, 0, sizeof fk);
    pthread_mutex_init(&fk.mu, NULL);
    CHECK(scc_global_init() == SCC_OK);
    if (thttp_start(&srv, handler, &fk) != 0) {
        fprintf(stderr, "cannot start the test server\n");
        return 1;
    }
    snprintf(base, sizeof base, "http://127.0.0.1:%d", srv.port);
    test_formats();
    test_url_form();
    test_resume(&fk);
    test_retryable(&fk);
    test_errors();
    test_hash();
    thttp_stop(&srv);
    pthread_mutex_destroy(&fk.mu);
    CHECK_MAIN_END();
}
