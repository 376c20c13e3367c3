/*
 * fetch.c — the fetch engine proper: libcurl multi on one thread,
 * scheduling (pending / waiting / active lists, the global and per-host
 * limits), AIMD concurrency, retries with backoff and full jitter, the
 * curl callbacks every transfer shares, the engine's life. What a kind of
 * transfer does differently (ranged stream parts: fetch_stream.c; one-shot
 * calls: fetch_call.c) comes through its xfer_ops table (fetch_int.h);
 * what an error body says comes from the classifier a store registers
 * (backend_s3.c reads S3 <Error> documents).
 *
 * Threading: one engine thread owns the CURLM handle, every easy handle and
 * the pending / waiting / active lists; nothing else calls curl on them.
 * Other threads talk to it through three intrusive queues under the engine
 * lock (new transfers, unpause requests, stream cancellations) and
 * curl_multi_wakeup(). Lock order: stream lock, then engine lock; the
 * engine thread never holds the engine lock while it takes a stream lock
 * or calls into curl. Counters are atomics.
 *
 * Ownership: a transfer (xfer) belongs to whoever submits it until it is on
 * the incoming queue, then to the engine thread, which frees it when it
 * ends (success, final failure, cancellation) after its kind's finish
 * operation told the owner.
 *
 * Memory bound: error bodies are cut at SIO_FETCH_ERRBODY_MAX; the kinds
 * bound their own bodies (fetch_stream.c, fetch_call.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "store/fetch_int.h"

/* The multiplicative decrease happens at most once per this interval, so
 * one burst of 503s halves the concurrency once, not once per answer. */
#define AIMD_DECREASE_GAP_MS 200u

/* xorshift64*: only for backoff jitter, which needs no quality beyond
 * decorrelating clients. Engine thread only. */
static uint64_t rng_next(sio_fetch *f)
{
    uint64_t x = f->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    f->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Lists --------------------------------------------------------------- */

static void list_push(xlist *l, xfer *x, int which)
{
    x->prev = l->tail;
    x->next = NULL;
    if (l->tail)
        l->tail->next = x;
    else
        l->head = x;
    l->tail = x;
    l->n++;
    x->list = which;
}

static void list_push_front(xlist *l, xfer *x, int which)
{
    x->prev = NULL;
    x->next = l->head;
    if (l->head)
        l->head->prev = x;
    else
        l->tail = x;
    l->head = x;
    l->n++;
    x->list = which;
}

static void list_remove(xlist *l, xfer *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        l->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        l->tail = x->prev;
    x->prev = x->next = NULL;
    l->n--;
    x->list = L_NONE;
}

static xlist *list_of(sio_fetch *f, xfer *x)
{
    switch (x->list) {
    case L_PENDING: return &f->pending;
    case L_WAIT: return &f->wait;
    case L_ACTIVE: return &f->active;
    default: return NULL;
    }
}

/* Detach x from whatever list holds it (and from the multi when active). */
static void detach(sio_fetch *f, xfer *x)
{
    xlist *l = list_of(f, x);
    if (x->list == L_ACTIVE) {
        curl_multi_remove_handle(f->multi, x->h);
        atomic_fetch_sub(&BSTAT(f, x)->inflight, 1);
    }
    if (l)
        list_remove(l, x);
}

/* Errors ------------------------------------------------------------- */

/* The final error of an HTTP answer: names method, URL, status and, when
 * the store's reading of the error body found them, its code and
 * message. */
static sio_code http_error(const char *method, const char *display_url,
                           long status, const sio_fetch_verdict *v,
                           sio_error *err)
{
    sio_code rc;
    switch (status) {
    case 404: rc = SIO_ERR_NOTFOUND; break;
    case 401:
    case 403: rc = SIO_ERR_AUTH; break;
    default: rc = SIO_ERR_IO; break;
    }
    if (v->code[0])
        return sio_seterr(err, rc,
                          "%s url=%s status=%ld code=%s message=\"%s\"",
                          method, display_url, status, v->code, v->message);
    return sio_seterr(err, rc, "%s url=%s status=%ld", method, display_url,
                      status);
}

void sio_fetch_set_classifier(sio_fetch *f, sio_fetch_classify_fn fn)
{
    size_t n = f->nlanes ? f->nlanes : 1;
    for (size_t i = 0; i < n; i++) {
        sio_fetch *l = f->nlanes ? f->lanes[i] : f;
        pthread_mutex_lock(&l->mu);
        l->classify = fn;
        pthread_mutex_unlock(&l->mu);
    }
}

static int curl_retryable(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
        return 1;
    default:
        return 0;
    }
}

/* Stats -------------------------------------------------------------- */

void sio_fetch_get_stats(const sio_fetch *f, sio_io_stats *st)
{
    sio_fetch *m = (sio_fetch *)(uintptr_t)f;
    memset(st, 0, sizeof *st);
    if (!f)
        return;
    /* The engine's backends only (files have no engine). */
    for (int b = SIO_STORE_HTTP; b <= SIO_STORE_S3; b++) {
        sio_storestats_backend *c = &m->st->b[b];
        st->requests += atomic_load(&c->requests);
        st->retries += atomic_load(&c->retries);
        st->throttles += atomic_load(&c->throttles);
        st->errors += atomic_load(&c->errors);
        st->bytes += atomic_load(&c->bytes);
        st->inflight += atomic_load(&c->inflight);
    }
    /* The lanes' own figures add up (the counters above are shared). */
    size_t n = m->nlanes ? m->nlanes : 1;
    for (size_t i = 0; i < n; i++) {
        sio_fetch *l = m->nlanes ? m->lanes[i] : m;
        st->latency_us_sum += atomic_load(&l->lat_sum);
        st->latency_count += atomic_load(&l->lat_count);
        st->concurrency += atomic_load(&l->n_limit);
    }
}

/* Submission (any thread) ---------------------------------------------- */

void sio_fetch_submit(sio_fetch *f, xfer *x)
{
    pthread_mutex_lock(&f->mu);
    x->qnext = NULL;
    if (f->in_tail)
        f->in_tail->qnext = x;
    else
        f->in_head = x;
    f->in_tail = x;
    pthread_mutex_unlock(&f->mu);
    curl_multi_wakeup(f->multi);
}

xfer *sio_fetch_xfer_new(sio_fetch *f, const xfer_ops *ops)
{
    xfer *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->f = f;
    x->ops = ops;
    x->clen = UINT64_MAX;
    return x;
}

/* Engine thread: free x after its owner has been told. */
static void xfer_free(sio_fetch *f, xfer *x)
{
    pthread_mutex_lock(&f->mu);
    if (x->unpause_queued) {
        xfer **pp = &f->unpause;
        while (*pp && *pp != x)
            pp = &(*pp)->unext;
        if (*pp)
            *pp = x->unext;
        x->unpause_queued = 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (x->h)
        curl_easy_cleanup(x->h);
    curl_slist_free_all(x->hdrs);
    free(x->url);
    free(x->errbody);
    free(x);
}

/* Callbacks (engine thread, inside curl) ------------------------------- */

static void trim_copy(char *dst, size_t cap, const char *v, size_t n)
{
    while (n && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' ||
                 v[n - 1] == '\t'))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static size_t header_cb(char *buf, size_t sz, size_t nm, void *ud)
{
    xfer *x = ud;
    size_t n = sz * nm;
    const char *colon;
    if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
        /* A new response (after 100 Continue, say): forget earlier ones. */
        x->etag[0] = x->crange[0] = x->lastmod[0] = '\0';
        x->clen = UINT64_MAX;
        return n;
    }
    colon = memchr(buf, ':', n);
    if (!colon)
        return n;
    size_t nl = (size_t)(colon - buf), vl = n - nl - 1;
    if (nl == 4 && strncasecmp(buf, "etag", 4) == 0) {
        trim_copy(x->etag, sizeof x->etag, colon + 1, vl);
    } else if (nl == 13 && strncasecmp(buf, "last-modified", 13) == 0) {
        trim_copy(x->lastmod, sizeof x->lastmod, colon + 1, vl);
    } else if (nl == 13 && strncasecmp(buf, "content-range", 13) == 0) {
        trim_copy(x->crange, sizeof x->crange, colon + 1, vl);
    } else if (nl == 14 && strncasecmp(buf, "content-length", 14) == 0) {
        char tmp[32];
        char *end;
        trim_copy(tmp, sizeof tmp, colon + 1, vl);
        errno = 0;
        unsigned long long v = strtoull(tmp, &end, 10);
        if (!errno && end != tmp && !*end && tmp[0] != '-')
            x->clen = v;
    }
    return n;
}

void sio_fetch_set_fatal(xfer *x, sio_code rc, const char *fmt, ...)
{
    va_list ap;
    if (x->fatal)
        return;
    x->fatal = rc;
    va_start(ap, fmt);
    vsnprintf(x->fatal_msg, sizeof x->fatal_msg, fmt, ap);
    va_end(ap);
}

void sio_fetch_read_status(xfer *x)
{
    x->headers_done = 1;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
}

size_t sio_fetch_keep_errbody(xfer *x, const char *ptr, size_t n)
{
    if (!x->errbody) {
        x->errbody = malloc(SIO_FETCH_ERRBODY_MAX + 1);
        if (!x->errbody)
            return n; /* the message just lacks the S3 code */
    }
    size_t room = SIO_FETCH_ERRBODY_MAX - x->errlen;
    size_t k = n < room ? n : room;
    memcpy(x->errbody + x->errlen, ptr, k);
    x->errlen += k;
    x->errbody[x->errlen] = '\0';
    return n;
}

static size_t write_cb(char *ptr, size_t sz, size_t nm, void *ud)
{
    xfer *x = ud;
    size_t n = sz * nm;
    return x->ops->write(x, ptr, n);
}

/* Attempts (engine thread) ----------------------------------------------- */

static void finish(sio_fetch *f, xfer *x, sio_code rc, const char *msg);

int sio_addr_is_link_local(const struct sockaddr *sa)
{
    const unsigned char *b;
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET) {
        b = (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)
                ->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        static const unsigned char ec2[15] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0,
                                              0,    0,    0,    0,    0, 0, 0};
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                 0xff, 0xff};
        /* IPv4-compatible ::a.b.c.d (deprecated, still parsed) and the
         * NAT64 well-known prefix 64:ff9b::/96 carry an IPv4 address too */
        static const unsigned char compat[12] = {0};
        static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0,
                                                0, 0,    0,    0,    0, 0};
        const unsigned char *a6 =
            (const unsigned char *)&((const struct sockaddr_in6 *)(const void *)sa)
                ->sin6_addr;
        if (a6[0] == 0xfe && (a6[1] & 0xc0) == 0x80)
            return 1;
        /* fd00:ec2::254, AWS's IPv6 IMDS (the last group is 0x0254). */
        if (memcmp(a6, ec2, 14) == 0 && a6[14] == 0x02 && a6[15] == 0x54)
            return 1;
        if (memcmp(a6, mapped, 12) != 0 && memcmp(a6, compat, 12) != 0 &&
            memcmp(a6, nat64, 12) != 0)
            return 0;
        b = a6 + 12;
    } else {
        return 0;
    }
    return (b[0] == 169 && b[1] == 254) ||
           (b[0] == 100 && b[1] == 100 && b[2] == 100 && b[3] == 200);
}

/* CURLOPT_OPENSOCKETFUNCTION of data requests: refuse link-local and
 * metadata addresses (after DNS, so a name pointing there is caught). */
static curl_socket_t open_socket(void *clientp, curlsocktype purpose,
                                 struct curl_sockaddr *a)
{
    xfer *x = clientp;
    if (purpose == CURLSOCKTYPE_IPCXN && sio_addr_is_link_local(&a->addr)) {
        sio_fetch_set_fatal(x, SIO_ERR_INVALID,
                            "refused to connect to a link-local or "
                            "instance-metadata address "
                            "(--allow-link-local-sources)");
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

static sio_code start_attempt(sio_fetch *f, xfer *x)
{
    sio_fetch_attempt a;
    xfer_hdrs hv;
    sio_error e;
    long stall_s;
    sio_code rc;

    e.msg[0] = '\0';
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    free(x->url);
    x->url = NULL;
    x->status = 0;
    x->headers_done = 0;
    x->early_complete = 0;
    x->etag[0] = x->crange[0] = '\0';
    x->clen = UINT64_MAX;
    x->errlen = 0;
    x->skip = 0;
    x->fatal = SIO_OK;
    hv.n = 0;
    x->ops->begin(x, &hv);
    a.method = x->method;
    a.headers = hv.v;
    a.nheaders = hv.n;
    a.attempt = x->attempt;
    rc = x->prepare(x->pctx, &a, &x->url, &x->hdrs, &e);
    if (rc) {
        finish(f, x, rc, e.msg);
        return rc;
    }
    for (size_t i = 0; i < hv.n; i++) {
        char hl[SIO_FETCH_ETAG_MAX + 80];
        struct curl_slist *nl;
        snprintf(hl, sizeof hl, "%s: %s", hv.v[i].name, hv.v[i].value);
        nl = curl_slist_append(x->hdrs, hl);
        if (!nl)
            goto nomem;
        x->hdrs = nl;
    }
    {
        /* No "Expect: 100-continue" round trip for small bodies. */
        struct curl_slist *nl = curl_slist_append(x->hdrs, "Expect:");
        if (!nl)
            goto nomem;
        x->hdrs = nl;
    }
    if (!x->h) {
        x->h = curl_easy_init();
        if (!x->h)
            goto nomem;
    } else {
        curl_easy_reset(x->h);
    }
    stall_s = (long)((f->cfg.stall_timeout_ms + 999u) / 1000u);
    if (!f->allow_link_local && !x->trusted) {
        curl_easy_setopt(x->h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
        curl_easy_setopt(x->h, CURLOPT_OPENSOCKETDATA, x);
    }
    curl_easy_setopt(x->h, CURLOPT_URL, x->url);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(x->h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(x->h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(x->h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(x->h, CURLOPT_BUFFERSIZE, (long)SIO_FETCH_RECV_BUFFER);
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_TIME, stall_s);
    if (f->ca_file)
        curl_easy_setopt(x->h, CURLOPT_CAINFO, f->ca_file);
    x->ops->setopt(f, x);
    if (curl_multi_add_handle(f->multi, x->h) != CURLM_OK)
        goto nomem;
    list_push(&f->active, x, L_ACTIVE);
    atomic_fetch_add(&BSTAT(f, x)->inflight, 1);
    atomic_fetch_add(&BSTAT(f, x)->requests, 1);
    return SIO_OK;
nomem:
    finish(f, x, SIO_ERR_NOMEM, "out of memory starting a request");
    return SIO_ERR_NOMEM;
}

/* Tell the owner that x ended with rc (SIO_OK: success) and free x. */
static void finish(sio_fetch *f, xfer *x, sio_code rc, const char *msg)
{
    detach(f, x);
    if (rc && rc != SIO_ERR_CANCELED)
        atomic_fetch_add(&BSTAT(f, x)->errors, 1);
    x->ops->finish(x, rc, msg);
    xfer_free(f, x);
}

static void aimd_throttle(sio_fetch *f, xfer *x)
{
    uint64_t now = sio_now_ms();
    atomic_fetch_add(&BSTAT(f, x)->throttles, 1);
    if (now - f->last_decrease_ms < AIMD_DECREASE_GAP_MS)
        return;
    f->last_decrease_ms = now;
    f->limit /= 2;
    if (f->limit < 1)
        f->limit = 1;
    atomic_store(&f->n_limit, (uint32_t)f->limit);
    SIO_LOG(&f->log, SIO_LOG_INFO, "event=throttled concurrency=%u",
            (unsigned)f->limit);
}

static void aimd_success(sio_fetch *f)
{
    double max = (double)f->cfg.max_inflight;
    if (f->limit >= max)
        return;
    f->limit += 1.0 / f->limit;
    if (f->limit > max)
        f->limit = max;
    atomic_store(&f->n_limit, (uint32_t)f->limit);
}

/* Schedule another attempt of x, or give up. */
static void retry(sio_fetch *f, xfer *x, const char *why)
{
    detach(f, x);
    snprintf(x->last_reason, sizeof x->last_reason, "%s", why);
    if (x->attempt >= x->max_retries) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s url=%s: gave up after %u attempts: %s",
                 x->method, x->display_url, x->attempt + 1, why);
        finish(f, x, SIO_ERR_IO, msg);
        return;
    }
    uint64_t cap = (uint64_t)f->cfg.retry_base_ms << (x->attempt < 20 ? x->attempt : 20);
    if (cap > f->cfg.retry_max_ms)
        cap = f->cfg.retry_max_ms;
    uint64_t delay = cap ? rng_next(f) % (cap + 1) : 0; /* full jitter */
    x->attempt++;
    x->due_ms = sio_now_ms() + delay;
    atomic_fetch_add(&BSTAT(f, x)->retries, 1);
    SIO_LOG(&f->log, SIO_LOG_INFO,
            "event=retry method=%s url=%s attempt=%u delay_ms=%" PRIu64
            " reason=\"%s\"",
            x->method, x->display_url, x->attempt, delay, why);
    list_push(&f->wait, x, L_WAIT);
}

/* An HTTP error answer: retry it (throttled or transient) or fail. The
 * status alone says 429/503 (throttling) and 500/502/504 (transient); the
 * store's classifier may read more in the error body (S3 SlowDown,
 * RequestTimeout, ...) and names its code for the message. */
static void on_http_error(sio_fetch *f, xfer *x)
{
    sio_fetch_verdict v;
    sio_fetch_classify_fn classify;
    char why[384];
    sio_error e;

    memset(&v, 0, sizeof v);
    switch (x->status) {
    case 429:
    case 503: v.throttle = 1; v.retry = 1; break;
    case 500:
    case 502:
    case 504: v.retry = 1; break;
    default: break;
    }
    pthread_mutex_lock(&f->mu);
    classify = f->classify;
    pthread_mutex_unlock(&f->mu);
    if (classify && x->errlen)
        classify(x->status, x->errbody, x->errlen, &v);
    if (v.throttle)
        aimd_throttle(f, x);
    if (v.retry) {
        if (v.code[0])
            snprintf(why, sizeof why, "status=%ld code=%s", x->status,
                     v.code);
        else
            snprintf(why, sizeof why, "status=%ld", x->status);
        retry(f, x, why);
        return;
    }
    http_error(x->method, x->display_url, x->status, &v, &e);
    finish(f, x, e.code, e.msg);
}

/* An attempt ended (engine thread). */
static void on_done(sio_fetch *f, xfer *x, CURLcode res)
{
    char why[384];
    curl_off_t ttfb = 0;

    if (!x->headers_done)
        x->ops->judge(x);
    if (x->status > 0 &&
        curl_easy_getinfo(x->h, CURLINFO_STARTTRANSFER_TIME_T, &ttfb) == CURLE_OK) {
        atomic_fetch_add(&f->lat_sum, (uint64_t)ttfb);
        atomic_fetch_add(&f->lat_count, 1);
        sio_hist_observe(&f->st->latency[x->backend][x->op],
                         &sio_hist_latency, (uint64_t)ttfb * 1000u);
    }
    if (x->fatal) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s url=%s: %s", x->method, x->display_url,
                 x->fatal_msg);
        finish(f, x, x->fatal, msg);
        return;
    }
    if (res != CURLE_OK && x->ops->settle)
        x->ops->settle(x);
    if (res != CURLE_OK && !x->early_complete) {
        if (curl_retryable(res)) {
            snprintf(why, sizeof why, "%s", curl_easy_strerror(res));
            retry(f, x, why);
        } else {
            char msg[512];
            snprintf(msg, sizeof msg, "%s url=%s: %s", x->method,
                     x->display_url, curl_easy_strerror(res));
            finish(f, x, SIO_ERR_IO, msg);
        }
        return;
    }
    if (sio_fetch_is_2xx(x->status) || x->early_complete) {
        if (x->ops->short_body && x->ops->short_body(x, why, sizeof why)) {
            retry(f, x, why);
            return;
        }
        aimd_success(f);
        finish(f, x, SIO_OK, "");
        return;
    }
    on_http_error(f, x);
}

/* Cancel every transfer of s (engine thread). */
static void cancel_stream(sio_fetch *f, fstream *s)
{
    xlist *ls[3] = {&f->pending, &f->wait, &f->active};
    for (int i = 0; i < 3; i++) {
        xfer *x = ls[i]->head;
        while (x) {
            xfer *nx = x->next;
            if (x->s == s) /* a call's x->s is NULL */
                finish(f, x, SIO_ERR_CANCELED, "canceled");
            x = nx;
        }
    }
}

static void *engine_main(void *arg)
{
    sio_fetch *f = arg;
    for (;;) {
        xfer *in, *up;
        fstream *cs;
        int stop;
        pthread_mutex_lock(&f->mu);
        stop = f->stop;
        in = f->in_head;
        f->in_head = f->in_tail = NULL;
        up = f->unpause;
        f->unpause = NULL;
        for (xfer *u = up; u; u = u->unext)
            u->unpause_queued = 0;
        cs = f->cancel;
        f->cancel = NULL;
        pthread_mutex_unlock(&f->mu);

        while (in) {
            xfer *nx = in->qnext;
            list_push(&f->pending, in, L_PENDING);
            in = nx;
        }
        /* Unpause before cancelling: nothing is freed in between, so every
         * xfer on the local list is alive. */
        while (up) {
            xfer *nx = up->unext;
            if (up->list == L_ACTIVE)
                curl_easy_pause(up->h, CURLPAUSE_CONT);
            up = nx;
        }
        while (cs) {
            fstream *nx = cs->cnext;
            cancel_stream(f, cs);
            /* fs_close waits for this before it frees the stream. */
            pthread_mutex_lock(&cs->mu);
            cs->cancel_queued = 0;
            pthread_cond_broadcast(&cs->cv);
            pthread_mutex_unlock(&cs->mu);
            cs = nx;
        }
        if (stop)
            break;
        uint64_t now = sio_now_ms(), next_due = UINT64_MAX;
        for (xfer *x = f->wait.head; x;) {
            xfer *nx = x->next;
            if (x->due_ms <= now) {
                list_remove(&f->wait, x);
                /* Retries go first: they hold buffers and readers wait. */
                list_push_front(&f->pending, x, L_PENDING);
            } else if (x->due_ms < next_due) {
                next_due = x->due_ms;
            }
            x = nx;
        }
        while (f->pending.head && f->active.n < (size_t)f->limit) {
            xfer *x = f->pending.head;
            list_remove(&f->pending, x);
            (void)start_attempt(f, x);
        }
        int running = 0;
        curl_multi_perform(f->multi, &running);
        CURLMsg *m;
        int left;
        int progressed = 0;
        while ((m = curl_multi_info_read(f->multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            xfer *x = NULL;
            CURLcode res = m->data.result;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            if (x) {
                on_done(f, x, res);
                progressed = 1;
            }
        }
        if (progressed || (f->pending.head && f->active.n < (size_t)f->limit))
            continue;
        long ct = -1;
        curl_multi_timeout(f->multi, &ct);
        int timeout = 1000;
        if (ct >= 0 && ct < timeout)
            timeout = (int)ct;
        if (next_due != UINT64_MAX) {
            uint64_t d = next_due > now ? next_due - now : 0;
            if (d < (uint64_t)timeout)
                timeout = (int)d;
        }
        curl_multi_poll(f->multi, NULL, 0, timeout, NULL);
    }
    /* Shutting down: fail what is left so no waiter hangs. */
    xlist *ls[3] = {&f->pending, &f->wait, &f->active};
    for (int i = 0; i < 3; i++)
        while (ls[i]->head)
            finish(f, ls[i]->head, SIO_ERR_CANCELED, "fetch engine shut down");
    return NULL;
}

/* Engine life ----------------------------------------------------------- */

#define DEF(v, d) ((v) ? (v) : (d))

/* One lane: a libcurl multi and its thread, with settings c (already
 * checked). */
static sio_code lane_create(const sio_fetch_setup *setup,
                            const sio_fetch_config *cin, sio_fetch **out,
                            sio_error *err)
{
    sio_fetch *f;
    sio_fetch_config c = *cin;
    sio_code rc = SIO_OK;
    int mu_init = 0;

    *out = NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return sio_seterr(err, SIO_ERR_IO, "libcurl initialisation failed");
    f = calloc(1, sizeof *f);
    if (!f) {
        curl_global_cleanup();
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    f->cfg = c;
    f->cfg.ca_file = NULL;
    if (setup) {
        f->log = setup->log;
        f->allow_link_local = setup->allow_link_local;
    }
    f->st = setup && setup->stats ? setup->stats : &f->own;
    if (c.ca_file) {
        f->ca_file = strdup(c.ca_file);
        if (!f->ca_file) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            goto out;
        }
        f->cfg.ca_file = f->ca_file;
    }
    f->limit = c.max_inflight;
    atomic_store(&f->n_limit, c.max_inflight);
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        f->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                 (uint64_t)(uintptr_t)f;
        if (!f->rng)
            f->rng = 0x9E3779B97F4A7C15ull;
    }
    if (pthread_mutex_init(&f->mu, NULL) != 0) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "mutex");
        goto out;
    }
    mu_init = 1;
    f->multi = curl_multi_init();
    if (!f->multi) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "curl_multi_init failed");
        goto out;
    }
    curl_multi_setopt(f->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                      (long)c.max_per_host);
    curl_multi_setopt(f->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      (long)c.max_inflight);
    curl_multi_setopt(f->multi, CURLMOPT_MAXCONNECTS, (long)c.max_inflight);
    if (pthread_create(&f->thread, NULL, engine_main, f) != 0) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "cannot start the fetch thread");
        goto out;
    }
    f->thread_started = 1;
    *out = f;
    f = NULL;
out:
    if (f) {
        if (f->multi)
            curl_multi_cleanup(f->multi);
        if (mu_init)
            pthread_mutex_destroy(&f->mu);
        free(f->ca_file);
        free(f);
        curl_global_cleanup();
    }
    return rc;
}

static void lane_destroy(sio_fetch *f)
{
    if (!f)
        return;
    if (f->thread_started) {
        pthread_mutex_lock(&f->mu);
        f->stop = 1;
        pthread_mutex_unlock(&f->mu);
        curl_multi_wakeup(f->multi);
        pthread_join(f->thread, NULL);
    }
    curl_multi_cleanup(f->multi);
    pthread_mutex_destroy(&f->mu);
    free(f->ca_file);
    free(f);
    curl_global_cleanup();
}


sio_code sio_fetch_create(const sio_fetch_setup *setup, sio_fetch **out,
                          sio_error *err)
{
    sio_fetch_config c;
    sio_fetch **lanes = NULL;
    sio_code rc = SIO_OK;
    size_t n;

    *out = NULL;
    memset(&c, 0, sizeof c);
    if (setup)
        c = setup->fetch;
    c.max_inflight = DEF(c.max_inflight, SIO_FETCH_DEFAULT_INFLIGHT);
    c.max_per_host = DEF(c.max_per_host, SIO_FETCH_DEFAULT_PER_HOST);
    c.part_size = DEF(c.part_size, SIO_FETCH_DEFAULT_PART_SIZE);
    c.parts_per_stream = DEF(c.parts_per_stream, SIO_FETCH_DEFAULT_PARTS);
    c.max_retries = DEF(c.max_retries, SIO_FETCH_DEFAULT_RETRIES);
    c.retry_base_ms = DEF(c.retry_base_ms, SIO_FETCH_DEFAULT_RETRY_BASE_MS);
    c.retry_max_ms = DEF(c.retry_max_ms, SIO_FETCH_DEFAULT_RETRY_MAX_MS);
    c.connect_timeout_ms = DEF(c.connect_timeout_ms, SIO_FETCH_DEFAULT_CONNECT_MS);
    c.stall_timeout_ms = DEF(c.stall_timeout_ms, SIO_FETCH_DEFAULT_STALL_MS);
    if (c.max_inflight > SIO_FETCH_INFLIGHT_MAX ||
        c.max_per_host > SIO_FETCH_INFLIGHT_MAX)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "max_inflight/max_per_host above %u",
                          SIO_FETCH_INFLIGHT_MAX);
    if (c.part_size < SIO_FETCH_PART_MIN || c.part_size > SIO_FETCH_PART_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "part_size %u not in %u..%u",
                          c.part_size, SIO_FETCH_PART_MIN, SIO_FETCH_PART_MAX);
    if (c.parts_per_stream > SIO_FETCH_PARTS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "parts_per_stream %u above %u",
                          c.parts_per_stream, SIO_FETCH_PARTS_MAX);
    if (c.max_retries > SIO_FETCH_RETRIES_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "max_retries %u above %u",
                          c.max_retries, SIO_FETCH_RETRIES_MAX);
    if (c.threads > SIO_FETCH_THREADS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "threads %u above %u",
                          c.threads, SIO_FETCH_THREADS_MAX);
    n = c.threads;
    if (n == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        n = ncpu >= 8 ? (size_t)(ncpu / 4) : 1;
        if (n > 8)
            n = 8;
    }
    /* No lane gets less than one request or connection. */
    if (n > c.max_inflight)
        n = c.max_inflight;
    /* Each lane its share of the engine's bounds (rounded up). */
    sio_fetch_config lc = c;
    lc.max_inflight = (uint32_t)((c.max_inflight + n - 1) / n);
    lc.max_per_host = (uint32_t)((c.max_per_host + n - 1) / n);
    lanes = calloc(n, sizeof *lanes);
    if (!lanes)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == SIO_OK; i++)
        rc = lane_create(setup, n > 1 ? &lc : &c, &lanes[i], err);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            lane_destroy(lanes[i]);
        free(lanes);
        return rc;
    }
    lanes[0]->lanes = lanes;
    lanes[0]->nlanes = n;
    *out = lanes[0];
    return SIO_OK;
}

sio_fetch *sio_fetch_lane(sio_fetch *f)
{
    if (!f || f->nlanes <= 1)
        return f;
    size_t i = atomic_fetch_add_explicit(&f->next_lane, 1,
                                         memory_order_relaxed);
    return f->lanes[i % f->nlanes];
}

void sio_fetch_destroy(sio_fetch *f)
{
    if (!f)
        return;
    sio_fetch **lanes = f->lanes;
    size_t n = f->nlanes;
    for (size_t i = 1; i < n; i++)
        lane_destroy(lanes[i]);
    lane_destroy(f);
    free(lanes);
}
