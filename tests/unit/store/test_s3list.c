/*
 * test_s3list.c — the S3 backend's listing (backend_s3.c) against a fake
 * ListObjectsV2 server in this process (testhttpd.h) that keeps its keys
 * sorted bytewise as S3 does and answers prefix, delimiter, max-keys,
 * start-after, continuation tokens and EncodingType=url like S3.
 *
 * Checked: 100k keys under one prefix listed as parallel ranges give
 * exactly the key set, with about as many pages as the serial listing and
 * in less time when every page takes 10 ms; keys with bytes
 * below '/' and above 'z', control characters, 2-4 byte UTF-8 (code points
 * above U+FFFF next to U+FFxx), keys that are prefixes of others, nested
 * prefixes mixed with flat ones; empty pages; a store that ignores
 * start-after (detected, serial, no duplicate); a store that repeats its
 * token or ignores it (an error, not a loop); 503 SlowDown bursts, resets
 * and cut bodies; the object-count limit; the bound on listers in flight;
 * SHARDCAST_S3_LIST_WORKERS / SHARDCAST_S3_LIST_SPLIT.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <time.h>

#include "store/store_int.h"
#include "check.h"
#include "store/s3xml.h"
#include "testhttpd.h"

typedef struct fake {
    char **keys; /* sorted bytewise, unique */
    size_t n;
    int ignore_start_after;
    int empty_every;  /* every Nth answer is an empty truncated page */
    int same_token;   /* always the same NextContinuationToken */
    int ignore_token; /* answers every token from the start (new tokens) */
    int page_max;     /* entries per page at most (0: max-keys) */
    int s3rver_pages; /* as s3rver: CommonPrefixes do not count toward
                         max-keys, a page takes those up to the next key
                         and the token is its last key, so the next page
                         sends them again */
    int latency_ms;   /* per listing request */
    int fault_every;  /* every Nth request: a fault (cycling kinds) */
    atomic_int faults_left;
    atomic_int reqs, sa_reqs, answers, inflight, max_inflight, faults;
} fake;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Value of query parameter name (URL-decoded) into out; 1 when present. */
static int qparam(const char *path, const char *name, char *out, size_t cap)
{
    const char *q = strchr(path, '?');
    size_t nl = strlen(name);
    while (q && *q) {
        q++;
        if (strncmp(q, name, nl) == 0 && (q[nl] == '=' || q[nl] == '&' ||
                                          !q[nl])) {
            const char *v = q + nl + (q[nl] == '=');
            size_t o = 0;
            while (*v && *v != '&' && o + 1 < cap) {
                if (*v == '%' && hexval(v[1]) >= 0 && hexval(v[2]) >= 0) {
                    out[o++] = (char)(hexval(v[1]) * 16 + hexval(v[2]));
                    v += 3;
                } else {
                    out[o++] = *v++;
                }
            }
            out[o] = '\0';
            return 1;
        }
        q = strchr(q, '&');
    }
    return 0;
}

/* Growable text. */
typedef struct tbuf {
    char *p;
    size_t n, cap;
} tbuf;

static void tb_put(tbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void tb_str(tbuf *b, const char *s)
{
    tb_put(b, s, strlen(s));
}

/* EncodingType=url: everything but unreserved characters as %XX. */
static void tb_urlenc(tbuf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[4];
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
            (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
            *p == '_' || *p == '~') {
            tb_put(b, (const char *)p, 1);
        } else {
            snprintf(e, sizeof e, "%%%02X", *p);
            tb_put(b, e, 3);
        }
    }
}

static void tb_hex(tbuf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[3];
        snprintf(e, sizeof e, "%02x", *p);
        tb_put(b, e, 2);
    }
}

/* First index with keys[i] > s (after) or >= s (!after). */
static size_t bound(const fake *f, const char *s, int after)
{
    size_t a = 0, b = f->n;
    while (a < b) {
        size_t m = (a + b) / 2;
        int c = strcmp(f->keys[m], s);
        if (c < 0 || (after && c == 0))
            a = m + 1;
        else
            b = m;
    }
    return a;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int fake_handler(void *ud, int fd, const thttp_req *r)
{
    fake *f = ud;
    char cur[4096];
    tbuf b = {0};
    size_t i, plen, emitted = 0, maxk = 1000;
    int n = atomic_fetch_add(&f->reqs, 1) + 1, in, has_sa, has_tok;
    int ret = 1;

    in = atomic_fetch_add(&f->inflight, 1) + 1;
    for (int m = atomic_load(&f->max_inflight); in > m;)
        if (atomic_compare_exchange_weak(&f->max_inflight, &m, in))
            break;
    if (f->latency_ms)
        sleep_ms(f->latency_ms);
    if (f->fault_every && n % f->fault_every == 0 &&
        atomic_fetch_sub(&f->faults_left, 1) > 0) {
        int kind = (n / f->fault_every) % 3;
        atomic_fetch_add(&f->faults, 1);
        atomic_fetch_sub(&f->inflight, 1);
        if (kind == 0) {
            const char *x = "<?xml version=\"1.0\"?><Error><Code>SlowDown"
                            "</Code><Message>Please reduce your request "
                            "rate.</Message></Error>";
            return thttp_respond(fd, 503, NULL, x, strlen(x)) == 0;
        }
        if (kind == 1)
            return 0; /* connection closed, no answer */
        /* A body cut in the middle. */
        const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"
                        "<?xml version=\"1.0\"?><ListBucketResult>";
        thttp_write(fd, h, strlen(h));
        return 0;
    }

    {
        char *pfx = malloc(2048), *sav = malloc(2048), *tv = malloc(8192);
        char dlm[8] = "", mks[16] = "";
        if (!pfx || !sav || !tv)
            abort();
        if (!qparam(r->path, "prefix", pfx, 2048))
            pfx[0] = '\0';
        has_sa = qparam(r->path, "start-after", sav, 2048);
        has_tok = qparam(r->path, "continuation-token", tv, 8192);
        qparam(r->path, "delimiter", dlm, sizeof dlm);
        if (qparam(r->path, "max-keys", mks, sizeof mks))
            maxk = (size_t)strtoul(mks, NULL, 10);
        if (f->page_max && (size_t)f->page_max < maxk)
            maxk = (size_t)f->page_max;
        if (has_sa && !has_tok)
            atomic_fetch_add(&f->sa_reqs, 1);
        plen = strlen(pfx);

        /* Where to start: a token "k<hex>" is after that key, "p<hex>"
         * after every key under that CommonPrefix; "-N" tails make empty
         * pages' tokens differ. */
        if (has_tok && !f->ignore_token && !f->same_token &&
            (tv[0] == 'k' || tv[0] == 'p')) {
            size_t o = 0;
            for (const char *h = tv + 1; h[0] && h[1] && h[0] != '-'; h += 2)
                cur[o++] = (char)(hexval(h[0]) * 16 + hexval(h[1]));
            cur[o] = '\0';
            if (tv[0] == 'k') {
                i = bound(f, cur, 1);
            } else {
                size_t cl = strlen(cur);
                cur[cl - 1]++; /* "x/" -> "x0": past every "x/..." */
                i = bound(f, cur, 0);
            }
        } else if (has_tok && !f->ignore_token && !f->same_token &&
                   tv[0] == 's') {
            i = bound(f, pfx, 0);
        } else if (has_sa && !f->ignore_start_after &&
                   strcmp(sav, pfx) > 0) {
            i = bound(f, sav, 1);
        } else {
            i = bound(f, pfx, 0);
        }
        int answer = atomic_fetch_add(&f->answers, 1) + 1;
        tb_str(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/"
                   "2006-03-01/\"><Name>b</Name><Prefix>");
        tb_urlenc(&b, pfx);
        tb_str(&b, "</Prefix><EncodingType>url</EncodingType>");
        tbuf body = {0};
        char last[4096] = "";
        int last_prefix = 0, truncated = 0;
        if (f->empty_every && answer % f->empty_every == 0) {
            /* An empty page that goes on from where this one started. */
            truncated = 1;
            tb_str(&body, "");
            if (i > 0) {
                snprintf(last, sizeof last, "%s", f->keys[i - 1]);
            }
        } else {
            while (i < f->n && strncmp(f->keys[i], pfx, plen) == 0) {
                const char *k = f->keys[i];
                const char *d = dlm[0] ? strchr(k + plen, dlm[0]) : NULL;
                if (emitted == maxk && (!f->s3rver_pages || !d)) {
                    truncated = 1;
                    break;
                }
                if (d) {
                    size_t cl = (size_t)(d - k) + 1;
                    memcpy(cur, k, cl);
                    cur[cl] = '\0';
                    tb_str(&body, "<CommonPrefixes><Prefix>");
                    tb_urlenc(&body, cur);
                    tb_str(&body, "</Prefix></CommonPrefixes>");
                    if (!f->s3rver_pages) {
                        snprintf(last, sizeof last, "%s", cur);
                        last_prefix = 1;
                    }
                    cur[cl - 1]++;
                    i = bound(f, cur, 0);
                    if (f->s3rver_pages)
                        continue; /* not counted */
                } else {
                    tb_str(&body, "<Contents><Key>");
                    tb_urlenc(&body, k);
                    tb_str(&body, "</Key><Size>1</Size></Contents>");
                    snprintf(last, sizeof last, "%s", k);
                    last_prefix = 0;
                    i++;
                }
                emitted++;
            }
        }
        tb_str(&b, truncated ? "<IsTruncated>true</IsTruncated>"
                             : "<IsTruncated>false</IsTruncated>");
        if (truncated) {
            tb_str(&b, "<NextContinuationToken>");
            if (f->same_token) {
                tb_str(&b, "kSAME");
            } else {
                if (!last[0] && !emitted) {
                    tb_str(&b, "s");
                } else {
                    tb_str(&b, last_prefix ? "p" : "k");
                    tb_hex(&b, last);
                }
                if (emitted == 0 || f->ignore_token) {
                    char nonce[32];
                    snprintf(nonce, sizeof nonce, "-%d", answer);
                    tb_str(&b, nonce);
                }
            }
            tb_str(&b, "</NextContinuationToken>");
        }
        if (body.p)
            tb_put(&b, body.p, body.n);
        tb_str(&b, "</ListBucketResult>");
        free(body.p);
        free(pfx);
        free(sav);
        free(tv);
    }
    atomic_fetch_sub(&f->inflight, 1);
    {
        /* Head and body in one write: two small writes would wait for the
         * client's delayed ACK (Nagle). */
        tbuf w = {0};
        char head[128];
        snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: "
                 "application/xml\r\nContent-Length: %zu\r\n\r\n", b.n);
        tb_str(&w, head);
        tb_put(&w, b.p, b.n);
        if (thttp_write(fd, w.p, w.n))
            ret = 0;
        free(w.p);
    }
    free(b.p);
    return ret;
}

/* A key set ------------------------------------------------------------- */

typedef struct keyset {
    char **v;
    size_t n, cap;
} keyset;

static void ks_add(keyset *k, const char *s)
{
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 1024;
        k->v = realloc(k->v, k->cap * sizeof *k->v);
        if (!k->v)
            abort();
    }
    k->v[k->n++] = strdup(s);
}

/* Sort and drop duplicates. */
static void ks_finish(keyset *k)
{
    size_t u = 0;
    qsort(k->v, k->n, sizeof *k->v, cmp_str);
    for (size_t i = 0; i < k->n; i++) {
        if (u && strcmp(k->v[u - 1], k->v[i]) == 0)
            free(k->v[i]);
        else
            k->v[u++] = k->v[i];
    }
    k->n = u;
}

static void ks_free(keyset *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->v[i]);
    free(k->v);
    memset(k, 0, sizeof *k);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Pieces keys are made of: below '/', digits, letters, above 'z',
 * controls, 2-4 byte UTF-8 (U+00E9, U+65E5, U+FF5A, U+1F600, U+10FFFD). */
static const char *const pieces[] = {
    " ", "!", "\"", "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-",
    ".", "0", "1", "5", "9", ":", ";", "<", "=", ">", "?", "@", "A", "Z",
    "[", "\\", "]", "^", "_", "`", "a", "b", "m", "z", "{", "|", "}", "~",
    "\x7f", "\x01", "\t", "\xc3\xa9", "\xe6\x97\xa5", "\xef\xbd\x9a",
    "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbd", "ab", "a-", "a.", "img",
    "000", "\xc3\xa9\xc3\xa9"};
#define NPIECES (sizeof pieces / sizeof pieces[0])

/* Listing through the backend -------------------------------------------- */

typedef struct run {
    sio_objlist got;
    sio_code rc;
    sio_error err;
    double secs;
    sio_io_stats st;
} run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void log_stderr(void *ud, int level, const char *msg)
{
    (void)ud;
    fprintf(stderr, "log %d %s\n", level, msg);
}

/* List url (s3://b/...) with the fake at port; workers/split as the
 * environment knobs ("" leaves them unset). */
static void do_list(int port, const char *url, const char *workers,
                    const char *split, size_t max, run *out)
{
    sio_io_config cfg;
    sio_io *io = NULL;
    const sio_backend_ops *ops;
    void *ctx;
    char ep[64];

    memset(out, 0, sizeof *out);
    sio_objlist_init(&out->got, max);
    if (workers[0])
        setenv("SHARDCAST_S3_LIST_WORKERS", workers, 1);
    else
        unsetenv("SHARDCAST_S3_LIST_WORKERS");
    if (split[0])
        setenv("SHARDCAST_S3_LIST_SPLIT", split, 1);
    else
        unsetenv("SHARDCAST_S3_LIST_SPLIT");
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
    memset(&cfg, 0, sizeof cfg);
    cfg.s3_endpoint = ep;
    cfg.s3_anonymous = 1;
    cfg.s3_region = "us-east-1";
    cfg.fetch.retry_base_ms = 1;
    cfg.fetch.retry_max_ms = 20;
    cfg.fetch.max_retries = 20;
    if (getenv("TEST_S3LIST_LOG")) {
        cfg.log.fn = log_stderr;
        cfg.log.level = SIO_LOG_DEBUG;
    }
    out->rc = sio_io_create(&cfg, &io, &out->err);
    if (out->rc == SIO_OK)
        out->rc = sio_io_backend(io, url, &ops, &ctx, &out->err);
    if (out->rc == SIO_OK) {
        double t0 = now_s();
        out->rc = ops->list(ctx, url, &out->got, &out->err);
        out->secs = now_s() - t0;
        sio_io_get_stats(io, &out->st);
    }
    sio_io_destroy(io);
    unsetenv("SHARDCAST_S3_LIST_WORKERS");
    unsetenv("SHARDCAST_S3_LIST_SPLIT");
}

/* The listing is exactly "s3://b/" + want (no duplicate, nothing else). */
static int same_set(sio_objlist *got, const keyset *want)
{
    size_t dups = 0, bad = 0;
    sio_objlist_sort(got);
    for (size_t i = 1; i < got->n; i++)
        if (strcmp(got->v[i - 1].url, got->v[i].url) == 0)
            dups++;
    if (got->n != want->n || dups) {
        fprintf(stderr, "listing: %zu objects, want %zu, %zu duplicates\n",
                got->n, want->n, dups);
        return 0;
    }
    for (size_t i = 0; i < got->n; i++)
        if (strncmp(got->v[i].url, "s3://b/", 7) != 0 ||
            strcmp(got->v[i].url + 7, want->v[i]) != 0) {
            if (bad++ < 5)
                fprintf(stderr, "listing[%zu]: %s, want s3://b/%s\n", i,
                        got->v[i].url, want->v[i]);
        }
    return bad == 0;
}

/* The keys a listing of prefix returns: every key under it except
 * "directory" markers (ending in '/'). */
static void expected(const fake *f, const char *prefix, keyset *want)
{
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < f->n; i++) {
        size_t kl = strlen(f->keys[i]);
        if (strncmp(f->keys[i], prefix, pl) == 0 && kl &&
            f->keys[i][kl - 1] != '/')
            ks_add(want, f->keys[i]);
    }
    ks_finish(want);
}

static void fake_reset(fake *f)
{
    atomic_store(&f->reqs, 0);
    atomic_store(&f->sa_reqs, 0);
    atomic_store(&f->answers, 0);
    atomic_store(&f->max_inflight, 0);
    atomic_store(&f->faults, 0);
}

/* Tests ------------------------------------------------------------------ */

/* 100k keys in one flat prefix: serial and ranges, same set, ranges
 * faster with a per-page latency, about the same number of pages. */
static void test_flat_100k(void)
{
    keyset ks = {0}, want = {0};
    fake f;
    thttp srv;
    run serial, par;
    char k[64];

    memset(&f, 0, sizeof f);
    for (int i = 0; i < 100000; i++) {
        snprintf(k, sizeof k, "flat/img-%07d.jpg", (i * 7919) % 100000);
        ks_add(&ks, k);
    }
    ks_add(&ks, "flat/");            /* a directory marker */
    ks_add(&ks, "flat0/other.tar");  /* beside the prefix */
    ks_add(&ks, "fla/x.tar");
    ks_finish(&ks);
    f.keys = ks.v;
    f.n = ks.n;
    f.latency_ms = 10;
    expected(&f, "flat/", &want);
    CHECK_EQ_U64(want.n, 100000);
    CHECK(thttp_start(&srv, fake_handler, &f) == 0);

    do_list(srv.port, "s3://b/flat/", "", "0", SIO_SHARDS_MAX, &serial);
    CHECK(serial.rc == SIO_OK);
    CHECK(same_set(&serial.got, &want));
    int serial_reqs = atomic_load(&f.reqs);
    CHECK_EQ_U64(serial_reqs, 101); /* 100k keys and the marker */
    CHECK_EQ_U64(atomic_load(&f.max_inflight), 1);
    fake_reset(&f);

    do_list(srv.port, "s3://b/flat/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    if (par.rc)
        fprintf(stderr, "list: %s\n", par.err.msg);
    CHECK(same_set(&par.got, &want));
    int par_reqs = atomic_load(&f.reqs);
    int par_max = atomic_load(&f.max_inflight);
    /* Pages: each range boundary costs about one page more. */
    CHECK(par_reqs >= 101 && par_reqs <= 180);
    CHECK(par_max >= 4 && par_max <= 8);
    CHECK(atomic_load(&f.sa_reqs) > 0);
    /* Time is not asserted (a timed check fails on a loaded machine):
     * the pages in flight at once (par_max above) are what make ranges
     * faster; bench/listing.py measures the speed-up. */
    printf("flat 100k keys, %d ms per page: serial %.3f s (%d pages), "
           "ranges %.3f s (%d pages, %d ranges at once at most)\n",
           f.latency_ms, serial.secs, serial_reqs, par.secs, par_reqs,
           par_max);
    sio_objlist_free(&par.got);
    fake_reset(&f);

    /* One listing thread: serial whatever SPLIT says. */
    do_list(srv.port, "s3://b/flat/", "1", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK(same_set(&par.got, &want));
    CHECK_EQ_U64(atomic_load(&f.max_inflight), 1);
    CHECK_EQ_U64(atomic_load(&f.reqs), 101);
    sio_objlist_free(&par.got);
    fake_reset(&f);

    /* The object-count limit bounds memory: an error, not a partial list. */
    f.latency_ms = 0;
    do_list(srv.port, "s3://b/flat/", "", "", 5000, &par);
    CHECK(par.rc == SIO_ERR_LIMIT);
    CHECK(par.got.n <= 5000);
    sio_objlist_free(&par.got);

    sio_objlist_free(&serial.got);
    thttp_stop(&srv);
    ks_free(&want);
    ks_free(&ks);
}

/* Keys made of awkward bytes, in a flat prefix with a few nested ones,
 * small pages so that ranges split often. */
static void test_awkward_keys(void)
{
    keyset ks = {0}, want = {0};
    fake f;
    thttp srv;
    run serial, par;
    char k[256];

    memset(&f, 0, sizeof f);
    for (int i = 0; i < 20000; i++) {
        size_t o = (size_t)snprintf(k, sizeof k, "d/");
        int np = 1 + (int)rnd(6);
        for (int p = 0; p < np; p++) {
            const char *s = pieces[rnd(NPIECES)];
            memcpy(k + o, s, strlen(s));
            o += strlen(s);
        }
        if (rnd(50) == 0) { /* some keys one or two levels deeper */
            memcpy(k + o, "/x", 2);
            o += 2;
            if (rnd(3) == 0) {
                memcpy(k + o, "/y\xc3\xa9", 4);
                o += 4;
            }
        }
        k[o] = '\0';
        ks_add(&ks, k);
    }
    /* Keys that are prefixes of one another, and the edges of the byte
     * range. */
    static const char *const edge[] = {
        "d/a", "d/a-b", "d/a.b", "d/a0", "d/a/", "d/a/b", "d/ab", "d/a ",
        "d/\x01", "d/\x7f", "d/~", "d/~~", "d/\xf4\x8f\xbf\xbf",
        "d/\xef\xbf\xbd", "d/ ", "d/!", "d/0", "d/00", "d/000", "d/",
        "d//x", "d//", "d/sub/", "d/sub/a", "d/sub/b/c", "d/sub0"};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        ks_add(&ks, edge[i]);
    ks_finish(&ks);
    f.keys = ks.v;
    f.n = ks.n;
    f.page_max = 37;
    expected(&f, "d/", &want);
    CHECK(thttp_start(&srv, fake_handler, &f) == 0);

    do_list(srv.port, "s3://b/d/", "", "0", SIO_SHARDS_MAX, &serial);
    CHECK(serial.rc == SIO_OK);
    CHECK(same_set(&serial.got, &want));
    fake_reset(&f);
    for (int round = 0; round < 4; round++) {
        f.latency_ms = round % 3; /* different interleavings */
        f.s3rver_pages = round == 3;
        do_list(srv.port, "s3://b/d/", "", "", SIO_SHARDS_MAX, &par);
        CHECK(par.rc == SIO_OK);
        if (par.rc)
            fprintf(stderr, "list: %s\n", par.err.msg);
        CHECK(same_set(&par.got, &want));
        CHECK(atomic_load(&f.sa_reqs) > 0);
        sio_objlist_free(&par.got);
        fake_reset(&f);
    }
    /* Serially too, with s3rver's repeated prefixes. */
    do_list(srv.port, "s3://b/d/", "", "0", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK(same_set(&par.got, &want));
    sio_objlist_free(&par.got);
    f.s3rver_pages = 0;
    printf("awkward keys: %zu objects listed the same serially and as "
           "ranges\n", want.n);
    sio_objlist_free(&serial.got);
    thttp_stop(&srv);
    ks_free(&want);
    ks_free(&ks);
}

/* Flat and nested together: sub-prefixes and ranges share the threads. */
static void test_nested(void)
{
    keyset ks = {0}, want = {0};
    fake f;
    thttp srv;
    run par;
    char k[128];

    memset(&f, 0, sizeof f);
    for (int d = 0; d < 40; d++)
        for (int i = 0; i < 500; i++) {
            snprintf(k, sizeof k, "n/part-%02d/s-%05d.tar", d, i);
            ks_add(&ks, k);
        }
    for (int i = 0; i < 30000; i++) {
        snprintf(k, sizeof k, "n/flat/%05d.cls", i);
        ks_add(&ks, k);
        snprintf(k, sizeof k, "n/flat/%05d.jpg", i);
        ks_add(&ks, k);
    }
    for (int i = 0; i < 3000; i++) {
        snprintf(k, sizeof k, "n/top-%04d.tar", i);
        ks_add(&ks, k);
    }
    ks_finish(&ks);
    f.keys = ks.v;
    f.n = ks.n;
    f.latency_ms = 1;
    expected(&f, "n/", &want);
    CHECK(thttp_start(&srv, fake_handler, &f) == 0);
    do_list(srv.port, "s3://b/n/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK(same_set(&par.got, &want));
    CHECK(atomic_load(&f.max_inflight) <= 8);
    sio_objlist_free(&par.got);
    fake_reset(&f);
    /* More threads than the default, fewer: the same set. */
    do_list(srv.port, "s3://b/n/", "16", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK(same_set(&par.got, &want));
    CHECK(atomic_load(&f.max_inflight) <= 16);
    sio_objlist_free(&par.got);
    do_list(srv.port, "s3://b/n/", "2", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK(same_set(&par.got, &want));
    sio_objlist_free(&par.got);
    do_list(srv.port, "s3://b/n/", "0", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_ERR_INVALID);
    sio_objlist_free(&par.got);
    do_list(srv.port, "s3://b/n/", "", "maybe", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_ERR_INVALID);
    sio_objlist_free(&par.got);
    thttp_stop(&srv);
    ks_free(&want);
    ks_free(&ks);
}

/* Stores that are not quite S3. */
static void test_odd_stores(void)
{
    keyset ks = {0}, want = {0};
    fake f;
    thttp srv;
    run par;
    char k[64];

    memset(&f, 0, sizeof f);
    for (int i = 0; i < 20000; i++) {
        snprintf(k, sizeof k, "o/%05d-%c.bin", i, 'a' + i % 26);
        ks_add(&ks, k);
    }
    ks_finish(&ks);
    f.keys = ks.v;
    f.n = ks.n;
    f.latency_ms = 1;
    expected(&f, "o/", &want);
    CHECK(thttp_start(&srv, fake_handler, &f) == 0);

    /* Empty truncated pages now and then. */
    f.empty_every = 3;
    do_list(srv.port, "s3://b/o/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    if (par.rc)
        fprintf(stderr, "list: %s\n", par.err.msg);
    CHECK(same_set(&par.got, &want));
    sio_objlist_free(&par.got);
    f.empty_every = 0;
    fake_reset(&f);

    /* start-after ignored: found out by the first split, serial from
     * there; no duplicate, and not many more pages than serial (20): the
     * extra ones are those in flight when the split's answer shows the
     * store ignored start-after, which depends on the scheduling (22 on
     * a quiet machine, 23 seen with 4 copies of the suite at once); the
     * bound allows one per listing thread. */
    f.ignore_start_after = 1;
    do_list(srv.port, "s3://b/o/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK(same_set(&par.got, &want));
    CHECK_EQ_U64(atomic_load(&f.sa_reqs), 1);
    CHECK(atomic_load(&f.reqs) <= 20 + (int)SIO_S3_LIST_WORKERS_DEFAULT);
    printf("store ignoring start-after: %d pages (serial: 20)\n",
           atomic_load(&f.reqs));
    sio_objlist_free(&par.got);
    f.ignore_start_after = 0;
    fake_reset(&f);

    /* The same token again: an error at once, not a loop. */
    f.same_token = 1;
    do_list(srv.port, "s3://b/o/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_ERR_FORMAT);
    CHECK(strstr(par.err.msg, "same continuation token") != NULL);
    CHECK(atomic_load(&f.reqs) <= 20);
    sio_objlist_free(&par.got);
    f.same_token = 0;
    fake_reset(&f);

    /* Tokens that change but lead nowhere: an error after a bound. */
    f.ignore_token = 1;
    f.latency_ms = 0;
    do_list(srv.port, "s3://b/o/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_ERR_FORMAT);
    CHECK(strstr(par.err.msg, "brought no new entry") != NULL);
    CHECK(atomic_load(&f.reqs) <= 1000);
    sio_objlist_free(&par.got);
    f.ignore_token = 0;
    fake_reset(&f);

    /* 503 SlowDown, closed connections and cut bodies on the listing
     * requests: retried, the same set. */
    f.fault_every = 4;
    atomic_store(&f.faults_left, 30);
    f.latency_ms = 1;
    do_list(srv.port, "s3://b/o/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    if (par.rc)
        fprintf(stderr, "list: %s\n", par.err.msg);
    CHECK(same_set(&par.got, &want));
    CHECK(atomic_load(&f.faults) >= 5);
    CHECK(par.st.retries >= 1);
    CHECK(par.st.throttles >= 1);
    printf("faults: %d injected, %" PRIu64 " retries, %" PRIu64
           " throttles\n", atomic_load(&f.faults), par.st.retries,
           par.st.throttles);
    sio_objlist_free(&par.got);
    f.fault_every = 0;

    thttp_stop(&srv);
    ks_free(&want);
    ks_free(&ks);
}

/* Little or nothing to list. */
static void test_small(void)
{
    keyset ks = {0}, want = {0};
    fake f;
    thttp srv;
    run par;

    memset(&f, 0, sizeof f);
    ks_add(&ks, "s/one.tar");
    ks_add(&ks, "s/two/");
    ks_finish(&ks);
    f.keys = ks.v;
    f.n = ks.n;
    expected(&f, "s/", &want);
    CHECK(thttp_start(&srv, fake_handler, &f) == 0);
    do_list(srv.port, "s3://b/s/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK(same_set(&par.got, &want));
    sio_objlist_free(&par.got);
    do_list(srv.port, "s3://b/none/", "", "", SIO_SHARDS_MAX, &par);
    CHECK(par.rc == SIO_OK);
    CHECK_EQ_U64(par.got.n, 0);
    sio_objlist_free(&par.got);
    thttp_stop(&srv);
    ks_free(&want);
    ks_free(&ks);
}

int main(void)
{
    test_small();
    test_flat_100k();
    test_awkward_keys();
    test_nested();
    test_odd_stores();
    CHECK_MAIN_END();
}
