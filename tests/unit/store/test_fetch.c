/*
 * test_fetch.c — the fetch engine and the http backend against a fake
 * object store in this process (testhttpd.h): parallel ranged parts
 * reassembled in order, a server that ignores Range (the paused single
 * stream), resets and truncation resumed with Range + If-Match, 503
 * SlowDown retried and counted as throttling (AIMD), an object that
 * changes mid-read, 404/403 with S3 error codes, exhausted retries, an
 * empty object, and the body limit of a perform. The counters and latency
 * histograms by backend and operation (sio_store_stats), for the http
 * backend, requests labelled s3 (listing, credentials) and local files.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "store/fetch.h"
#include "testhttpd.h"

#define OBJ_SIZE (1u << 20) /* 16 parts of 64 KiB */

enum { M_NORMAL, M_NORANGE, M_RESET, M_TRUNC, M_SLOWDOWN, M_CHANGE, M_404,
       M_403, M_500, M_EMPTY };

typedef struct store {
    unsigned char *obj;
    int mode;
    atomic_int gets;   /* GETs seen */
    atomic_int faults; /* faults still to inject */
    atomic_int if_match_seen;
    int norange; /* ignore Range in every mode */
} store;

static unsigned char byte_at(size_t i)
{
    return (unsigned char)((i * 2654435761u) >> 13);
}

static int handler(void *ud, int fd, const thttp_req *r)
{
    store *st = ud;
    char range[128], im[128], extra[512];
    size_t size = st->mode == M_EMPTY ? 0 : OBJ_SIZE;
    size_t a = 0, b = size ? size - 1 : 0;
    int ranged = 0;
    const char *etag = "\"v1\"";

    atomic_fetch_add(&st->gets, 1);
    if (strncmp(r->path, "/obj", 4) != 0 || st->mode == M_404) {
        const char *x = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code>"
                        "<Message>The specified key does not exist.</Message>"
                        "</Error>";
        return thttp_respond(fd, 404, NULL, x, strlen(x)) == 0;
    }
    if (st->mode == M_403) {
        const char *x = "<Error><Code>AccessDenied</Code><Message>Access "
                        "Denied</Message></Error>";
        return thttp_respond(fd, 403, NULL, x, strlen(x)) == 0;
    }
    if (st->mode == M_500) {
        return thttp_respond(fd, 500, NULL, "", 0) == 0;
    }
    if (st->mode == M_SLOWDOWN && atomic_fetch_sub(&st->faults, 1) > 0) {
        const char *x = "<Error><Code>SlowDown</Code><Message>Please reduce "
                        "your request rate.</Message></Error>";
        return thttp_respond(fd, 503, NULL, x, strlen(x)) == 0;
    }
    if (st->mode == M_CHANGE && atomic_load(&st->gets) > 1)
        etag = "\"v2\"";
    if (thttp_header(r, "If-Match", im, sizeof im) == 0) {
        atomic_fetch_add(&st->if_match_seen, 1);
        if (strcmp(im, etag) != 0)
            return thttp_respond(fd, 412, NULL, "", 0) == 0;
    }
    if (st->mode != M_NORANGE && !st->norange &&
        thttp_header(r, "Range", range, sizeof range) == 0) {
        unsigned long long x, y;
        int n = sscanf(range, "bytes=%llu-%llu", &x, &y);
        if (n >= 1) {
            if (size == 0 || x >= size) {
                snprintf(extra, sizeof extra, "Content-Range: bytes */%zu\r\n",
                         size);
                return thttp_respond(fd, 416, extra, "", 0) == 0;
            }
            a = (size_t)x;
            b = n == 2 && y < size ? (size_t)y : size - 1;
            ranged = 1;
        }
    }
    size_t len = size ? b - a + 1 : 0;
    int status = ranged ? 206 : 200;
    int n = snprintf(extra, sizeof extra, "ETag: %s\r\n", etag);
    if (ranged)
        snprintf(extra + n, sizeof extra - (size_t)n,
                 "Content-Range: bytes %zu-%zu/%zu\r\n", a, b, size);
    char head[1024];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s\r\n", status,
                      len, extra);
    if (thttp_write(fd, head, (size_t)hl))
        return 0;
    if (strcmp(r->method, "HEAD") == 0 || !len)
        return 1;
    if ((st->mode == M_RESET || st->mode == M_TRUNC) && len > 1000 &&
        atomic_fetch_sub(&st->faults, 1) > 0) {
        /* Half the body, then the connection goes. */
        thttp_write(fd, st->obj + a, len / 2);
        if (st->mode == M_RESET) {
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        return 0;
    }
    return thttp_write(fd, st->obj + a, len) == 0;
}

typedef struct run {
    sio_code open_rc, read_rc;
    size_t bytes;
    int equal;
    char err[600];
    sio_io_stats st;
    sio_store_stats ss;
} run;

/* Observations of one latency histogram. */
#define LAT(ss, b, op) sio_hist_snap_count(&(ss).latency[SIO_STORE_##b][SIO_STORE_##op])

static void read_all(store *st, thttp *srv, int mode, int faults,
                     const sio_io_config *cfg, const char *path, run *out)
{
    sio_io *io = NULL;
    sio_error e;
    const sio_backend_ops *ops;
    void *ctx;
    sio_stream *s = NULL;
    char url[256];
    unsigned char *buf = malloc(100000);

    memset(out, 0, sizeof *out);
    st->mode = mode;
    atomic_store(&st->faults, faults);
    atomic_store(&st->gets, 0);
    atomic_store(&st->if_match_seen, 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", srv->port, path);
    out->equal = 1;
    CHECK(sio_io_create(cfg, &io, &e) == SIO_OK);
    CHECK(sio_io_backend(io, url, &ops, &ctx, &e) == SIO_OK);
    out->open_rc = ops->open(ctx, url, 0, &s, &e);
    if (out->open_rc == SIO_OK) {
        for (;;) {
            size_t got = 0;
            /* odd read sizes so reads straddle part boundaries */
            out->read_rc = s->ops->read(s, buf, 77777, &got);
            if (out->read_rc) {
                snprintf(out->err, sizeof out->err, "%s", s->ops->errmsg(s));
                break;
            }
            if (!got)
                break;
            for (size_t i = 0; i < got; i++)
                if (buf[i] != byte_at(out->bytes + i))
                    out->equal = 0;
            out->bytes += got;
        }
        s->ops->close(s);
    }
    sio_io_get_stats(io, &out->st);
    sio_io_get_store_stats(io, &out->ss);
    sio_io_destroy(io);
    free(buf);
}

static char perform_url[128];

static sio_code url_prepare(void *ctx, const sio_fetch_attempt *a, char **url,
                            struct curl_slist **headers, sio_error *err)
{
    *url = strdup(ctx);
    return *url ? SIO_OK : SIO_ERR_NOMEM;
}

static sio_io_config small_parts(void)
{
    sio_io_config c;
    memset(&c, 0, sizeof c);
    c.fetch.part_size = 64 * 1024;
    c.fetch.parts_per_stream = 4;
    c.fetch.retry_base_ms = 10;
    c.fetch.retry_max_ms = 50;
    c.fetch.max_retries = 6;
    return c;
}

int main(void)
{
    store st;
    thttp srv;
    run r;
    sio_io_config c = small_parts();

    memset(&st, 0, sizeof st);
    st.obj = malloc(OBJ_SIZE);
    for (size_t i = 0; i < OBJ_SIZE; i++)
        st.obj[i] = byte_at(i);
    CHECK(thttp_start(&srv, handler, &st) == 0);

    /* Parallel ranged parts, handed over in order. */
    sio_pool_stats p0, p1;
    sio_pool_get_stats(&p0);
    read_all(&st, &srv, M_NORMAL, 0, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_OK && r.equal);
    /* Part buffers are sample-pool blocks: a part reuses the memory of
     * one handed over before it (at most the parts in flight, of the
     * sizes the ramp goes through, are ever fresh), and all of it is
     * back in the pool once the stream closed. */
    sio_pool_get_stats(&p1);
    CHECK(p1.reused - p0.reused >= 8);
    CHECK(p1.fresh - p0.fresh <= 8);
    CHECK(p1.idle_bytes >= p0.idle_bytes + 4 * 64 * 1024);
    CHECK_EQ_U64(r.bytes, OBJ_SIZE);
    CHECK_EQ_U64(r.st.requests, OBJ_SIZE / (64 * 1024));
    CHECK_EQ_U64(r.st.retries, 0);
    CHECK_EQ_U64(r.st.bytes, OBJ_SIZE);
    CHECK(r.st.latency_count == r.st.requests);
    /* By backend: all of it is http; every part's GET answered. */
    CHECK_EQ_U64(r.ss.backend[SIO_STORE_HTTP].requests, r.st.requests);
    CHECK_EQ_U64(r.ss.backend[SIO_STORE_HTTP].bytes, OBJ_SIZE);
    CHECK_EQ_U64(r.ss.backend[SIO_STORE_HTTP].inflight, 0);
    CHECK_EQ_U64(r.ss.backend[SIO_STORE_S3].requests, 0);
    CHECK_EQ_U64(r.ss.backend[SIO_STORE_FILE].requests, 0);
    CHECK_EQ_U64(LAT(r.ss, HTTP, GET), r.st.requests);
    CHECK_EQ_U64(LAT(r.ss, HTTP, HEAD), 0);
    CHECK(r.ss.latency[SIO_STORE_HTTP][SIO_STORE_GET].sum_ns > 0);
    CHECK(r.ss.backend[SIO_STORE_HTTP].concurrency > 0);

    /* An engine of 4 threads: the same stream, the same requests; the
     * engine's concurrency is its lanes' together. */
    {
        sio_io_config c4 = c;
        c4.fetch.threads = 4;
        for (int k = 0; k < 3; k++) {
            read_all(&st, &srv, M_NORMAL, 0, &c4, "/obj", &r);
            CHECK(r.read_rc == SIO_OK && r.equal);
            CHECK_EQ_U64(r.bytes, OBJ_SIZE);
            CHECK_EQ_U64(r.st.requests, OBJ_SIZE / (64 * 1024));
            CHECK_EQ_U64(r.st.retries, 0);
            CHECK(r.st.latency_count == r.st.requests);
            CHECK(r.st.concurrency >= 4);
        }
        /* Faults on a lane: resumed there. */
        read_all(&st, &srv, M_RESET, 3, &c4, "/obj", &r);
        CHECK(r.read_rc == SIO_OK && r.equal);
        CHECK_EQ_U64(r.st.retries, 3);
    }

    /* Range ignored: one body through a 64 KiB buffer (pauses). */
    read_all(&st, &srv, M_NORANGE, 0, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_OK && r.equal);
    CHECK_EQ_U64(r.bytes, OBJ_SIZE);
    CHECK_EQ_U64(r.st.requests, 1);

    /* Resets mid-body: resumed from the byte reached with If-Match. */
    read_all(&st, &srv, M_RESET, 3, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_OK && r.equal);
    CHECK_EQ_U64(r.bytes, OBJ_SIZE);
    CHECK_EQ_U64(r.st.retries, 3);
    CHECK(atomic_load(&st.if_match_seen) >= 3);

    /* Truncated bodies (Content-Length not met). */
    read_all(&st, &srv, M_TRUNC, 4, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_OK && r.equal);
    CHECK_EQ_U64(r.st.retries, 4);

    /* Resets from a server that ignores Range: each resume gets the whole
     * body again and skips the bytes already delivered. */
    st.norange = 1;
    read_all(&st, &srv, M_RESET, 3, &c, "/obj", &r);
    st.norange = 0;
    CHECK(r.read_rc == SIO_OK && r.equal);
    CHECK_EQ_U64(r.bytes, OBJ_SIZE);
    CHECK_EQ_U64(r.st.retries, 3);

    /* SlowDown: retried, counted as throttles, concurrency lowered. */
    read_all(&st, &srv, M_SLOWDOWN, 5, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_OK && r.equal);
    CHECK_EQ_U64(r.st.throttles, 5);
    CHECK_EQ_U64(r.st.retries, 5);
    CHECK_EQ_U64(r.ss.backend[SIO_STORE_HTTP].throttles, 5);
    CHECK_EQ_U64(r.ss.backend[SIO_STORE_HTTP].retries, 5);
    CHECK(r.st.concurrency < 64);

    /* The object changes between parts: an error, not a mix; permanent
     * (a skip decision, never retried into a mix). */
    read_all(&st, &srv, M_CHANGE, 0, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_ERR_CHANGED);
    CHECK(strstr(r.err, "changed") != NULL);

    /* 404 and 403: not retried; URL, status, S3 code in the message. */
    read_all(&st, &srv, M_404, 0, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_ERR_NOTFOUND);
    CHECK(strstr(r.err, "status=404") && strstr(r.err, "code=NoSuchKey") &&
          strstr(r.err, "/obj"));
    CHECK_EQ_U64(r.st.retries, 0);
    read_all(&st, &srv, M_403, 0, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_ERR_AUTH);
    CHECK(strstr(r.err, "code=AccessDenied") != NULL);

    /* Retries run out. */
    {
        sio_io_config c3 = c;
        c3.fetch.max_retries = 2;
        read_all(&st, &srv, M_500, 0, &c3, "/obj", &r);
        CHECK(r.read_rc == SIO_ERR_IO);
        CHECK(strstr(r.err, "gave up after 3 attempts") != NULL);
        CHECK_EQ_U64(r.st.requests, 3);
        CHECK_EQ_U64(r.st.errors, 1);
        CHECK_EQ_U64(r.ss.backend[SIO_STORE_HTTP].errors, 1);
        /* Each attempt got an answer (500): each is timed. */
        CHECK_EQ_U64(LAT(r.ss, HTTP, GET), 3);
    }

    /* An empty object (416 to the first Range) reads as empty. */
    read_all(&st, &srv, M_EMPTY, 0, &c, "/obj", &r);
    CHECK(r.read_rc == SIO_OK);
    CHECK_EQ_U64(r.bytes, 0);

    /* stat (HEAD) and the body limit of a perform. */
    {
        sio_io *io;
        sio_error e;
        const sio_backend_ops *ops;
        void *ctx;
        uint64_t size = 0;
        char url[128];
        st.mode = M_NORMAL;
        snprintf(url, sizeof url, "http://127.0.0.1:%d/obj", srv.port);
        CHECK(sio_io_create(&c, &io, &e) == SIO_OK);
        CHECK(sio_io_backend(io, url, &ops, &ctx, &e) == SIO_OK);
        CHECK(ops->stat(ctx, url, &size, &e) == SIO_OK);
        CHECK_EQ_U64(size, OBJ_SIZE);
        CHECK(ops->is_container(ctx, url) == 0);
        snprintf(url, sizeof url, "http://127.0.0.1:%d/missing", srv.port);
        CHECK(ops->stat(ctx, url, &size, &e) == SIO_ERR_NOTFOUND);
        CHECK(ops->list(ctx, url, NULL, &e) == SIO_ERR_UNSUPPORTED);
        {
            sio_store_stats *ss = malloc(sizeof *ss);
            sio_io_get_store_stats(io, ss);
            CHECK_EQ_U64(LAT(*ss, HTTP, HEAD), 2);
            CHECK_EQ_U64(LAT(*ss, HTTP, GET), 0);
            CHECK_EQ_U64(ss->backend[SIO_STORE_HTTP].requests, 2);
            CHECK_EQ_U64(ss->backend[SIO_STORE_HTTP].errors, 1);
            free(ss);
        }
        sio_io_destroy(io);
    }
    {
        /* Requests labelled s3 (a listing page, a credential call) and
         * an unlabelled one (http, op from the method). */
        sio_io *io;
        sio_error e;
        sio_fetch_response resp;
        sio_fetch_request req;
        sio_io_stats tot;
        sio_store_stats *ss = malloc(sizeof *ss);
        st.mode = M_NORMAL;
        CHECK(sio_io_create(&c, &io, &e) == SIO_OK);
        snprintf(perform_url, sizeof perform_url, "http://127.0.0.1:%d/obj",
                 srv.port);
        memset(&req, 0, sizeof req);
        req.method = "HEAD";
        req.display_url = "test";
        req.max_retries = -1;
        req.prepare = url_prepare;
        req.ctx = perform_url;
        req.backend = SIO_STORE_S3;
        req.list = 1;
        CHECK(sio_fetch_perform(sio_io_fetch(io), &req, &resp, &e) == SIO_OK);
        sio_fetch_response_free(&resp);
        req.list = 0;
        req.trusted_endpoint = 1;
        CHECK(sio_fetch_perform(sio_io_fetch(io), &req, &resp, &e) == SIO_OK);
        sio_fetch_response_free(&resp);
        req.trusted_endpoint = 0;
        req.backend = SIO_STORE_HTTP;
        CHECK(sio_fetch_perform(sio_io_fetch(io), &req, &resp, &e) == SIO_OK);
        sio_fetch_response_free(&resp);
        sio_io_get_store_stats(io, ss);
        sio_io_get_stats(io, &tot);
        CHECK_EQ_U64(ss->backend[SIO_STORE_S3].requests, 2);
        CHECK_EQ_U64(ss->backend[SIO_STORE_HTTP].requests, 1);
        CHECK_EQ_U64(tot.requests, 3); /* totals over http and s3 */
        CHECK_EQ_U64(LAT(*ss, S3, LIST), 1);
        CHECK_EQ_U64(LAT(*ss, S3, CREDENTIALS), 1);
        CHECK_EQ_U64(LAT(*ss, HTTP, HEAD), 1);
        CHECK_EQ_U64(LAT(*ss, S3, GET), 0);
        CHECK_STR(sio_store_backend_name(SIO_STORE_S3), "s3");
        CHECK_STR(sio_store_op_name(SIO_STORE_CREDENTIALS), "credentials");
        free(ss);
        sio_io_destroy(io);
    }
    {
        /* Local files: open (get), stat (head), a directory (list), bytes
         * read; a missing file is an error. Not in the engine's totals. */
        sio_io *io;
        sio_error e;
        const sio_backend_ops *ops;
        void *ctx;
        sio_stream *s = NULL;
        sio_objlist l;
        sio_io_stats tot;
        uint64_t size = 0;
        char dir[] = "/tmp/test_fetch_XXXXXX", path[128], missing[160];
        unsigned char buf[4096];
        sio_store_stats *ss = malloc(sizeof *ss);
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/a.tar", dir);
        snprintf(missing, sizeof missing, "%s/missing.tar", dir);
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        CHECK(fwrite(st.obj, 1, 10000, f) == 10000);
        fclose(f);
        CHECK(sio_io_create(&c, &io, &e) == SIO_OK);
        CHECK(sio_io_backend(io, path, &ops, &ctx, &e) == SIO_OK);
        CHECK(ops->open(ctx, path, 0, &s, &e) == SIO_OK);
        for (size_t got = 1, n = 0; got; n += got) {
            got = 0;
            CHECK(s->ops->read(s, buf, sizeof buf, &got) == SIO_OK);
            if (!got)
                CHECK_EQ_U64(n, 10000);
        }
        s->ops->close(s);
        CHECK(ops->stat(ctx, path, &size, &e) == SIO_OK);
        CHECK(ops->open(ctx, missing, 0, &s, &e) == SIO_ERR_NOTFOUND);
        sio_objlist_init(&l, 0);
        CHECK(ops->list(ctx, dir, &l, &e) == SIO_OK);
        CHECK_EQ_U64(l.n, 1);
        sio_objlist_free(&l);
        sio_io_get_store_stats(io, ss);
        sio_io_get_stats(io, &tot);
        CHECK_EQ_U64(ss->backend[SIO_STORE_FILE].requests, 4);
        CHECK_EQ_U64(ss->backend[SIO_STORE_FILE].errors, 1);
        CHECK_EQ_U64(ss->backend[SIO_STORE_FILE].bytes, 10000);
        CHECK_EQ_U64(ss->backend[SIO_STORE_FILE].inflight, 0);
        CHECK_EQ_U64(LAT(*ss, FILE, GET), 2);
        CHECK_EQ_U64(LAT(*ss, FILE, HEAD), 1);
        CHECK_EQ_U64(LAT(*ss, FILE, LIST), 1);
        CHECK_EQ_U64(ss->backend[SIO_STORE_HTTP].requests, 0);
        CHECK_EQ_U64(tot.requests, 0);
        free(ss);
        sio_io_destroy(io);
        unlink(path);
        rmdir(dir);
    }
    {
        sio_fetch *f;
        sio_error e;
        sio_fetch_response resp;
        sio_fetch_request req;
        CHECK(sio_fetch_create(NULL, &f, &e) == SIO_OK);
        memset(&req, 0, sizeof req);
        req.method = "GET";
        req.display_url = "test";
        req.max_retries = -1;
        req.body_max = 1000;
        req.prepare = NULL;
        CHECK(sio_fetch_perform(f, &req, &resp, &e) == SIO_ERR_INVALID);
        sio_fetch_response_free(&resp);
        /* 1 MiB answer, 1000-byte limit. */
        snprintf(perform_url, sizeof perform_url, "http://127.0.0.1:%d/obj",
                 srv.port);
        req.prepare = url_prepare;
        req.ctx = perform_url;
        CHECK(sio_fetch_perform(f, &req, &resp, &e) == SIO_ERR_LIMIT);
        sio_fetch_response_free(&resp);
        req.body_max = 0;
        req.method = "HEAD";
        CHECK(sio_fetch_perform(f, &req, &resp, &e) == SIO_OK);
        CHECK_EQ_U64(resp.status, 200);
        CHECK_EQ_U64(resp.content_length, OBJ_SIZE);
        CHECK_STR(resp.etag, "\"v1\"");
        sio_fetch_response_free(&resp);
        sio_fetch_destroy(f);

        /* Requests dealt to the threads of a 3-thread engine, each
         * answered; a thread count above the maximum is refused. */
        sio_fetch_setup fs;
        memset(&fs, 0, sizeof fs);
        fs.fetch.threads = 3;
        CHECK(sio_fetch_create(&fs, &f, &e) == SIO_OK);
        for (int k = 0; k < 7; k++) {
            CHECK(sio_fetch_perform(f, &req, &resp, &e) == SIO_OK);
            CHECK_EQ_U64(resp.status, 200);
            sio_fetch_response_free(&resp);
        }
        sio_io_stats es;
        sio_fetch_get_stats(f, &es);
        CHECK_EQ_U64(es.latency_count, 7);
        sio_fetch_destroy(f);
        fs.fetch.threads = SIO_FETCH_THREADS_MAX + 1;
        CHECK(sio_fetch_create(&fs, &f, &e) == SIO_ERR_INVALID);
    }
    {
        /* Bad configuration is refused. */
        sio_io *io = NULL;
        sio_error e;
        sio_io_config bad = c;
        bad.fetch.part_size = 1000;
        CHECK(sio_io_create(&bad, &io, &e) == SIO_ERR_INVALID);
        bad = c;
        bad.fetch.parts_per_stream = 1000;
        CHECK(sio_io_create(&bad, &io, &e) == SIO_ERR_INVALID);
    }
    thttp_stop(&srv);
    free(st.obj);
    CHECK_MAIN_END();
}
