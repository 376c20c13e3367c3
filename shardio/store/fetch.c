/*
 * fetch.c — the fetch engine: libcurl multi on one thread, bounded streams,
 * parallel ranged parts, retries with backoff and resume, AIMD concurrency.
 *
 * Threading: one engine thread owns the CURLM handle, every easy handle and
 * the pending / waiting / active lists; nothing else calls curl on them.
 * Other threads talk to it through three intrusive queues under the engine
 * lock (new transfers, unpause requests, stream cancellations) and
 * curl_multi_wakeup(). Each stream has its own lock and condition variable
 * guarding its parts' buffers; the engine's write callback fills them under
 * that lock, the reader drains them. Lock order: stream lock, then engine
 * lock; the engine thread never holds the engine lock while it takes a
 * stream lock or calls into curl. Counters are atomics.
 *
 * Ownership: a transfer (xfer) belongs to whoever submits it until it is on
 * the incoming queue, then to the engine thread, which frees it when it
 * ends (success, final failure, cancellation). A part's buffer belongs to
 * its stream. A perform's call record lives on the caller's stack; the
 * caller waits until the engine says it is done.
 *
 * Memory bound: a stream holds at most parts_per_stream parts of at most
 * part_size bytes; a perform's body is bounded by body_max; error bodies by
 * SIO_FETCH_ERRBODY_MAX.
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
#include <netinet/in.h>
#include <sys/socket.h>

#include "store/fetch.h"
#include "store/s3xml.h"
#include "store/storestats.h"

/* Defaults; see sio_io_config. part_size and parts_per_stream: reading a
 * 1 GiB object from nginx on loopback (2 cores) gave 0.8-1.6 GB/s for one
 * stream with 8 MiB parts and 1-2 parts in flight, and no gain (often a
 * loss: more buffers, more cache misses) from 4-8 parts or from 1-4 MiB
 * parts; loopback is CPU-bound, not connection-bound. Remote stores cap
 * each connection (S3: tens of MB/s), which is what parallel parts are
 * for, and the epoch already reads K shards at once. 8 MiB x 2 keeps two
 * connections per shard at 16 MiB of buffer per stream. */
#define DEF_INFLIGHT 64u
#define DEF_PER_HOST 32u
#define DEF_PART (8u * 1024u * 1024u)
#define DEF_PARTS 2u
#define DEF_RETRIES 10u
#define DEF_BASE_MS 100u
#define DEF_MAX_MS 20000u
#define DEF_CONNECT_MS 10000u
#define DEF_STALL_MS 30000u
#define DEF_BODY_MAX (1u << 20)
/* The multiplicative decrease happens at most once per this interval, so
 * one burst of 503s halves the concurrency once, not once per answer. */
#define AIMD_DECREASE_GAP_MS 200u
/* libcurl's receive buffer: larger reads mean fewer callbacks and lock
 * round trips per byte. */
#define CURL_RECV_BUFFER (256L * 1024L)
/* Longest Content-Range value we parse. */
#define CRANGE_MAX 128u

enum { K_CALL, K_PART };
enum { L_NONE, L_PENDING, L_WAIT, L_ACTIVE };

typedef struct xfer xfer;
typedef struct fstream fstream;
typedef struct call call;

typedef struct xlist {
    xfer *head, *tail;
    size_t n;
} xlist;

struct xfer {
    sio_fetch *f;
    xfer *prev, *next; /* links in one engine list */
    int list;          /* L_* */
    xfer *qnext;       /* incoming queue link */
    xfer *unext;       /* unpause queue link */
    int unpause_queued;
    int kind;
    sio_store_backend backend; /* metrics labels */
    sio_store_op op;
    CURL *h;
    struct curl_slist *hdrs;
    char *url;
    unsigned attempt;
    uint64_t due_ms;
    char last_reason[256];
    /* this attempt's answer */
    long status;
    int headers_done;
    int early_complete; /* a 200 (Range ignored) gave the whole part */
    char etag[SIO_FETCH_ETAG_MAX];
    char lastmod[SIO_FETCH_LASTMOD_MAX];
    char crange[CRANGE_MAX];
    uint64_t clen;
    char *errbody;
    size_t errlen;
    uint64_t skip;       /* body bytes to drop (Range ignored) */
    uint64_t want_start; /* first byte asked (parts) */
    sio_code fatal;      /* set by a callback: fail for good */
    char fatal_msg[384];
    /* owner */
    fstream *s;
    unsigned pi; /* index of the part in s->parts */
    call *c;
};

typedef struct part {
    uint64_t start;
    uint64_t len; /* UINT64_MAX: unknown (probe before its answer, or the
                     whole rest of the object in single mode) */
    unsigned char *buf;
    size_t cap, rpos, wpos;
    uint64_t got; /* body bytes stored into buf over all attempts */
    int done;
    int paused;
    size_t need; /* bytes the paused chunk needs */
    xfer *x;     /* NULL once the engine let go of the transfer */
} part;

struct fstream {
    sio_stream base;
    sio_fetch *f;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *display_url;
    sio_fetch_prepare_fn prepare;
    void *ctx;
    void (*ctx_free)(void *);
    sio_store_backend backend;
    uint64_t offset;
    uint64_t total; /* object size, UINT64_MAX unknown */
    uint64_t end_limit; /* read nothing at or past this (UINT64_MAX) */
    uint64_t next_len;  /* size of the next ranged part: parts start at
                           FETCH_FIRST_PART (part_size for a whole-object
                           read) and double up to part_size, so a short
                           read fetches little */
    int probed;     /* the first answer told size and Range support */
    int single;     /* Range ignored: one part, the whole body */
    char etag[SIO_FETCH_ETAG_MAX];
    char lastmod[SIO_FETCH_LASTMOD_MAX]; /* of the first answer */
    part parts[SIO_FETCH_PARTS_MAX];
    unsigned head, nparts;
    uint64_t next_start;
    unsigned live; /* transfers the engine holds */
    fstream *cnext;
    int cancel_queued;
    sio_code rc;
    char err[512];
};

struct call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    const sio_fetch_request *req;
    char *body;
    size_t len, cap, max;
    sio_code rc;
    sio_error err;
    long status;
    uint64_t clen;
    char etag[SIO_FETCH_ETAG_MAX];
    char lastmod[SIO_FETCH_LASTMOD_MAX];
};

struct sio_fetch {
    sio_fetch_config cfg;
    char *ca_file;
    CURLM *multi;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu; /* guards the three queues and stop */
    xfer *in_head, *in_tail;
    xfer *unpause;
    fstream *cancel;
    int stop;
    /* engine thread only */
    xlist pending, wait, active;
    double limit;
    uint64_t last_decrease_ms;
    uint64_t rng;
    /* counters: per backend in *st (the io's, or own); these are the
     * engine's */
    sio_storestats own, *st;
    _Atomic uint64_t lat_sum, lat_count;
    _Atomic uint32_t n_limit;
};

/* The counters of x's backend. */
#define BSTAT(f, x) (&(f)->st->b[(x)->backend])

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

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

sio_code sio_fetch_http_error(const char *method, const char *display_url,
                              long status, const char *body, size_t len,
                              sio_error *err)
{
    char code[128] = "", msg[256] = "";
    sio_code rc;
    if (body && len)
        (void)sio_s3xml_parse_error(body, len, code, sizeof code, msg,
                                    sizeof msg);
    switch (status) {
    case 404: rc = SIO_ERR_NOTFOUND; break;
    case 401:
    case 403: rc = SIO_ERR_AUTH; break;
    default: rc = SIO_ERR_IO; break;
    }
    if (code[0])
        return sio_seterr(err, rc, "%s url=%s status=%ld code=%s message=\"%s\"",
                          method, display_url, status, code, msg);
    return sio_seterr(err, rc, "%s url=%s status=%ld", method, display_url,
                      status);
}

/* Is this S3 error code one to retry (and is it throttling)? */
static int s3_code_retryable(const char *code, int *throttle)
{
    static const char *const throttling[] = {"SlowDown", "Throttling",
                                             "ThrottlingException",
                                             "RequestLimitExceeded",
                                             "TooManyRequestsException"};
    static const char *const transient[] = {"RequestTimeout", "InternalError",
                                            "ServiceUnavailable",
                                            "RequestTimeTooSkewed",
                                            "ExpiredToken"};
    for (size_t i = 0; i < sizeof throttling / sizeof throttling[0]; i++)
        if (strcmp(code, throttling[i]) == 0) {
            *throttle = 1;
            return 1;
        }
    for (size_t i = 0; i < sizeof transient / sizeof transient[0]; i++)
        if (strcmp(code, transient[i]) == 0)
            return 1;
    return 0;
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
    st->latency_us_sum = atomic_load(&m->lat_sum);
    st->latency_count = atomic_load(&m->lat_count);
    st->concurrency = atomic_load(&m->n_limit);
}

const sio_fetch_config *sio_fetch_get_config(const sio_fetch *f)
{
    return &f->cfg;
}

/* Submission (any thread) ---------------------------------------------- */

static void submit(sio_fetch *f, xfer *x)
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

static xfer *xfer_new(sio_fetch *f, int kind)
{
    xfer *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->f = f;
    x->kind = kind;
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

static int is_2xx(long s)
{
    return s >= 200 && s < 300;
}

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

static void set_fatal(xfer *x, sio_code rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void set_fatal(xfer *x, sio_code rc, const char *fmt, ...)
{
    va_list ap;
    if (x->fatal)
        return;
    x->fatal = rc;
    va_start(ap, fmt);
    vsnprintf(x->fatal_msg, sizeof x->fatal_msg, fmt, ap);
    va_end(ap);
}

/* Parse "bytes a-b/total" ("*" total gives UINT64_MAX). */
static int parse_crange(const char *v, uint64_t *a, uint64_t *b, uint64_t *t)
{
    char *end;
    if (strncasecmp(v, "bytes", 5) != 0)
        return -1;
    v += 5;
    while (*v == ' ')
        v++;
    if (*v == '*') {
        *a = *b = UINT64_MAX;
        v++;
    } else {
        if (*v < '0' || *v > '9')
            return -1;
        *a = strtoull(v, &end, 10);
        if (*end != '-')
            return -1;
        v = end + 1;
        if (*v < '0' || *v > '9')
            return -1;
        *b = strtoull(v, &end, 10);
        v = end;
        if (*b < *a)
            return -1;
    }
    if (*v != '/')
        return -1;
    v++;
    if (*v == '*') {
        *t = UINT64_MAX;
        return v[1] ? -1 : 0;
    }
    if (*v < '0' || *v > '9')
        return -1;
    *t = strtoull(v, &end, 10);
    return *end ? -1 : 0;
}

/* Check and remember the ETag of a successful answer (stream lock held). */
static void check_etag(xfer *x, fstream *s)
{
    if (!s->probed)
        snprintf(s->lastmod, sizeof s->lastmod, "%s", x->lastmod);
    if (!x->etag[0])
        return;
    if (!s->etag[0]) {
        snprintf(s->etag, sizeof s->etag, "%s", x->etag);
        return;
    }
    if (strcmp(s->etag, x->etag) != 0)
        set_fatal(x, SIO_ERR_CHANGED,
                  "object changed while reading (ETag %s, now %s)", s->etag,
                  x->etag);
}

/* First look at a part's answer (stream lock held). */
static void judge_part(xfer *x)
{
    fstream *s = x->s;
    part *p = &s->parts[x->pi];
    uint64_t a, b, t;

    x->headers_done = 1;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status == 206) {
        check_etag(x, s);
        if (!x->crange[0] || parse_crange(x->crange, &a, &b, &t) != 0 ||
            a == UINT64_MAX || t == UINT64_MAX) {
            set_fatal(x, SIO_ERR_FORMAT, "bad Content-Range \"%s\"",
                      x->crange);
            return;
        }
        if (a != x->want_start || b >= t) {
            set_fatal(x, SIO_ERR_IO,
                      "answer starts at the wrong byte (Content-Range \"%s\", "
                      "asked %" PRIu64 ")", x->crange, x->want_start);
            return;
        }
        if (!s->probed) {
            s->probed = 1;
            s->total = t;
            p->len = b - a + 1;
            s->next_start = p->start + p->len;
            s->next_len = p->len * 2 < s->f->cfg.part_size
                              ? p->len * 2
                              : s->f->cfg.part_size;
            pthread_cond_broadcast(&s->cv);
        } else if (t != s->total) {
            set_fatal(x, SIO_ERR_CHANGED, "object size changed (Content-Range "
                      "\"%s\")", x->crange);
        } else if (p->len != UINT64_MAX &&
                   b + 1 > p->start + p->len && !s->single) {
            set_fatal(x, SIO_ERR_IO, "answer longer than the part asked "
                      "(Content-Range \"%s\")", x->crange);
        }
        return;
    }
    if (x->status == 200) {
        /* Range ignored: the whole object from byte 0. */
        check_etag(x, s);
        x->skip = x->want_start;
        if (!s->probed) {
            s->probed = 1;
            s->single = 1;
            if (x->clen != UINT64_MAX) {
                s->total = x->clen;
                p->len = x->clen > p->start ? x->clen - p->start : 0;
            } else {
                p->len = UINT64_MAX;
            }
            pthread_cond_broadcast(&s->cv);
        } else if (x->clen != UINT64_MAX && s->total != UINT64_MAX &&
                   x->clen != s->total) {
            set_fatal(x, SIO_ERR_CHANGED, "object size changed (%" PRIu64 " bytes)",
                      x->clen);
        }
        return;
    }
    if (x->status == 416 && !s->probed) {
        /* Nothing at or after the offset: an empty object (S3 answers 416
         * to a Range on a zero-byte object) or an offset at its end. */
        if (p->start == 0 ||
            (parse_crange(x->crange, &a, &b, &t) == 0 && a == UINT64_MAX &&
             t != UINT64_MAX && t <= p->start)) {
            s->probed = 1;
            s->total = p->start;
            p->len = 0;
            s->next_start = p->start;
            x->early_complete = 1;
            pthread_cond_broadcast(&s->cv);
        }
        return;
    }
    if (x->status == 412)
        set_fatal(x, SIO_ERR_CHANGED,
                  "object changed while reading (If-Match %s failed)",
                  s->etag);
}

static void judge_call(xfer *x)
{
    x->headers_done = 1;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
}

static size_t append_errbody(xfer *x, const char *ptr, size_t n)
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

static size_t write_call(xfer *x, const char *ptr, size_t n)
{
    call *c = x->c;
    if (!x->headers_done)
        judge_call(x);
    if (!is_2xx(x->status))
        return append_errbody(x, ptr, n);
    if (n > c->max - c->len) {
        set_fatal(x, SIO_ERR_LIMIT, "response body larger than %zu bytes",
                  c->max);
        return 0;
    }
    if (c->len + n + 1 > c->cap) {
        size_t nc = c->cap ? c->cap : 16384;
        while (nc < c->len + n + 1)
            nc *= 2;
        if (nc > c->max + 1)
            nc = c->max + 1;
        char *nb = realloc(c->body, nc);
        if (!nb) {
            set_fatal(x, SIO_ERR_NOMEM, "out of memory");
            return 0;
        }
        c->body = nb;
        c->cap = nc;
    }
    memcpy(c->body + c->len, ptr, n);
    c->len += n;
    c->body[c->len] = '\0';
    atomic_fetch_add(&BSTAT(x->f, x)->bytes, n);
    return n;
}

static size_t write_part(xfer *x, const char *ptr, size_t n)
{
    fstream *s = x->s;
    part *p = &s->parts[x->pi];
    size_t ret = n;

    pthread_mutex_lock(&s->mu);
    if (!x->headers_done)
        judge_part(x);
    if (x->fatal) {
        ret = 0;
        goto out;
    }
    if (!is_2xx(x->status)) {
        ret = append_errbody(x, ptr, n);
        goto out;
    }
    size_t drop = x->skip < n ? (size_t)x->skip : n;
    size_t rest = n - drop;
    int complete = 0;
    if (p->len != UINT64_MAX && rest > p->len - p->got) {
        if (x->status != 200) {
            set_fatal(x, SIO_ERR_IO, "server sent more than the range asked");
            ret = 0;
            goto out;
        }
        rest = (size_t)(p->len - p->got);
        complete = 1;
    }
    if (rest > p->cap - p->wpos && p->rpos > 0) {
        memmove(p->buf, p->buf + p->rpos, p->wpos - p->rpos);
        p->wpos -= p->rpos;
        p->rpos = 0;
    }
    if (rest > p->cap - p->wpos) {
        /* Full: curl keeps this chunk and hands it over again after the
         * reader made room and asked us to unpause. Nothing was taken. */
        p->paused = 1;
        p->need = rest;
        ret = CURL_WRITEFUNC_PAUSE;
        goto out;
    }
    x->skip -= drop;
    memcpy(p->buf + p->wpos, ptr + drop, rest);
    p->wpos += rest;
    p->got += rest;
    atomic_fetch_add(&BSTAT(x->f, x)->bytes, rest);
    if (rest)
        pthread_cond_broadcast(&s->cv);
    if (complete) {
        /* The whole object came for one part: stop it here. */
        x->early_complete = 1;
        ret = 0;
    }
out:
    pthread_mutex_unlock(&s->mu);
    return ret;
}

static size_t write_cb(char *ptr, size_t sz, size_t nm, void *ud)
{
    xfer *x = ud;
    size_t n = sz * nm;
    return x->kind == K_PART ? write_part(x, ptr, n) : write_call(x, ptr, n);
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
        const unsigned char *a6 =
            (const unsigned char *)&((const struct sockaddr_in6 *)(const void *)sa)
                ->sin6_addr;
        if (a6[0] == 0xfe && (a6[1] & 0xc0) == 0x80)
            return 1;
        /* fd00:ec2::254, AWS's IPv6 IMDS (the last group is 0x0254). */
        if (memcmp(a6, ec2, 14) == 0 && a6[14] == 0x02 && a6[15] == 0x54)
            return 1;
        if (memcmp(a6, mapped, 12) != 0)
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
        set_fatal(x, SIO_ERR_INVALID,
                  "refused to connect to a link-local or instance-metadata "
                  "address (--allow-link-local-sources)");
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

static sio_code start_attempt(sio_fetch *f, xfer *x)
{
    sio_fetch_attempt a;
    sio_sigv4_pair hv[2];
    char range[64], line[SIO_FETCH_ETAG_MAX + 64];
    sio_error e;
    size_t nh = 0;
    const char *method;
    sio_fetch_prepare_fn prep;
    void *pctx;
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
    if (x->kind == K_PART) {
        fstream *s = x->s;
        part *p;
        pthread_mutex_lock(&s->mu);
        p = &s->parts[x->pi];
        p->paused = 0;
        x->want_start = p->start + p->got;
        if (p->len != UINT64_MAX) {
            if (p->got < p->len) {
                snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64,
                         x->want_start, p->start + p->len - 1);
                hv[nh].name = "Range";
                hv[nh++].value = range;
            }
        } else if (!s->probed) {
            uint64_t plen = s->next_len;
            if (s->end_limit - p->start < plen)
                plen = s->end_limit - p->start;
            snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64,
                     x->want_start, p->start + plen - 1);
            hv[nh].name = "Range";
            hv[nh++].value = range;
        } else if (x->want_start > 0) {
            snprintf(range, sizeof range, "bytes=%" PRIu64 "-", x->want_start);
            hv[nh].name = "Range";
            hv[nh++].value = range;
        }
        /* If-Match only with a strong ETag: a weak one never matches. */
        if (s->etag[0] && strncmp(s->etag, "W/", 2) != 0) {
            snprintf(line, sizeof line, "%s", s->etag);
            hv[nh].name = "If-Match";
            hv[nh++].value = line;
        }
        pthread_mutex_unlock(&s->mu);
        method = "GET";
        prep = s->prepare;
        pctx = s->ctx;
    } else {
        method = x->c->req->method;
        prep = x->c->req->prepare;
        pctx = x->c->req->ctx;
        if (x->c->body) {
            x->c->len = 0;
            x->c->body[0] = '\0';
        }
    }
    a.method = method;
    a.headers = hv;
    a.nheaders = nh;
    a.attempt = x->attempt;
    rc = prep(pctx, &a, &x->url, &x->hdrs, &e);
    if (rc) {
        finish(f, x, rc, e.msg);
        return rc;
    }
    for (size_t i = 0; i < nh; i++) {
        char hl[SIO_FETCH_ETAG_MAX + 80];
        struct curl_slist *nl;
        snprintf(hl, sizeof hl, "%s: %s", hv[i].name, hv[i].value);
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
    if (!f->cfg.allow_link_local &&
        !(x->kind == K_CALL && x->c->req->trusted_endpoint)) {
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
    curl_easy_setopt(x->h, CURLOPT_BUFFERSIZE, CURL_RECV_BUFFER);
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_TIME, stall_s);
    if (f->ca_file)
        curl_easy_setopt(x->h, CURLOPT_CAINFO, f->ca_file);
    if (x->kind == K_CALL) {
        const sio_fetch_request *r = x->c->req;
        curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)(r->connect_timeout_ms ? r->connect_timeout_ms
                                                      : f->cfg.connect_timeout_ms));
        if (r->timeout_ms)
            curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
        if (strcmp(method, "HEAD") == 0) {
            curl_easy_setopt(x->h, CURLOPT_NOBODY, 1L);
        } else if (strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0) {
            curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE_LARGE,
                             (curl_off_t)r->body_len);
            curl_easy_setopt(x->h, CURLOPT_COPYPOSTFIELDS,
                             r->body ? (const char *)r->body : "");
            if (method[1] == 'U')
                curl_easy_setopt(x->h, CURLOPT_CUSTOMREQUEST, "PUT");
        } else if (strcmp(method, "GET") != 0) {
            curl_easy_setopt(x->h, CURLOPT_CUSTOMREQUEST, method);
        }
    } else {
        curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)f->cfg.connect_timeout_ms);
    }
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
    if (x->kind == K_PART) {
        fstream *s = x->s;
        pthread_mutex_lock(&s->mu);
        part *p = &s->parts[x->pi];
        p->done = 1;
        p->x = NULL;
        if (rc == SIO_OK && p->len == UINT64_MAX) {
            /* Single mode without a known length: the end is where the
             * body ended. */
            p->len = p->got;
            if (s->total == UINT64_MAX)
                s->total = p->start + p->got;
        }
        if (rc && !s->rc) {
            s->rc = rc;
            snprintf(s->err, sizeof s->err, "%s", msg);
        }
        s->live--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    } else {
        call *c = x->c;
        pthread_mutex_lock(&c->mu);
        c->rc = rc;
        c->status = x->status;
        c->clen = x->clen;
        snprintf(c->etag, sizeof c->etag, "%s", x->etag);
        snprintf(c->lastmod, sizeof c->lastmod, "%s", x->lastmod);
        if (rc) {
            sio_seterr(&c->err, rc, "%s", msg);
            if (x->errbody && x->errlen) {
                /* Hand the error body over in place of a body. */
                free(c->body);
                c->body = x->errbody;
                c->len = x->errlen;
                x->errbody = NULL;
            }
        }
        c->done = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    xfer_free(f, x);
}

static const char *x_url(xfer *x)
{
    return x->kind == K_PART ? x->s->display_url : x->c->req->display_url;
}

static const char *x_method(xfer *x)
{
    return x->kind == K_PART ? "GET" : x->c->req->method;
}

static unsigned x_max_retries(sio_fetch *f, xfer *x)
{
    if (x->kind == K_CALL && x->c->req->max_retries >= 0)
        return (unsigned)x->c->req->max_retries;
    return f->cfg.max_retries;
}

static void aimd_throttle(sio_fetch *f, xfer *x)
{
    uint64_t now = now_ms();
    atomic_fetch_add(&BSTAT(f, x)->throttles, 1);
    if (now - f->last_decrease_ms < AIMD_DECREASE_GAP_MS)
        return;
    f->last_decrease_ms = now;
    f->limit /= 2;
    if (f->limit < 1)
        f->limit = 1;
    atomic_store(&f->n_limit, (uint32_t)f->limit);
    SIO_LOG(&f->cfg.log, SIO_LOG_INFO, "event=throttled concurrency=%u",
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
    unsigned max = x_max_retries(f, x);
    detach(f, x);
    snprintf(x->last_reason, sizeof x->last_reason, "%s", why);
    if (x->attempt >= max) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s url=%s: gave up after %u attempts: %s",
                 x_method(x), x_url(x), x->attempt + 1, why);
        finish(f, x, SIO_ERR_IO, msg);
        return;
    }
    uint64_t cap = (uint64_t)f->cfg.retry_base_ms << (x->attempt < 20 ? x->attempt : 20);
    if (cap > f->cfg.retry_max_ms)
        cap = f->cfg.retry_max_ms;
    uint64_t delay = cap ? rng_next(f) % (cap + 1) : 0; /* full jitter */
    x->attempt++;
    x->due_ms = now_ms() + delay;
    atomic_fetch_add(&BSTAT(f, x)->retries, 1);
    SIO_LOG(&f->cfg.log, SIO_LOG_INFO,
            "event=retry method=%s url=%s attempt=%u delay_ms=%" PRIu64
            " reason=\"%s\"",
            x_method(x), x_url(x), x->attempt, delay, why);
    list_push(&f->wait, x, L_WAIT);
}

/* An attempt ended (engine thread). */
static void on_done(sio_fetch *f, xfer *x, CURLcode res)
{
    char why[384];
    curl_off_t ttfb = 0;

    if (!x->headers_done) {
        if (x->kind == K_PART) {
            pthread_mutex_lock(&x->s->mu);
            judge_part(x);
            pthread_mutex_unlock(&x->s->mu);
        } else {
            judge_call(x);
        }
    }
    if (x->status > 0 &&
        curl_easy_getinfo(x->h, CURLINFO_STARTTRANSFER_TIME_T, &ttfb) == CURLE_OK) {
        atomic_fetch_add(&f->lat_sum, (uint64_t)ttfb);
        atomic_fetch_add(&f->lat_count, 1);
        sio_hist_observe(&f->st->latency[x->backend][x->op],
                         &sio_hist_latency, (uint64_t)ttfb * 1000u);
    }
    if (x->fatal) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s url=%s: %s", x_method(x), x_url(x),
                 x->fatal_msg);
        finish(f, x, x->fatal, msg);
        return;
    }
    if (res != CURLE_OK && x->kind == K_PART) {
        /* An error after the last byte of a known-length part (a reset as
         * the connection closes) loses nothing. */
        pthread_mutex_lock(&x->s->mu);
        part *p = &x->s->parts[x->pi];
        if (p->len != UINT64_MAX && p->got == p->len && is_2xx(x->status))
            x->early_complete = 1;
        pthread_mutex_unlock(&x->s->mu);
    }
    if (res != CURLE_OK && !x->early_complete) {
        if (curl_retryable(res)) {
            snprintf(why, sizeof why, "%s", curl_easy_strerror(res));
            retry(f, x, why);
        } else {
            char msg[512];
            snprintf(msg, sizeof msg, "%s url=%s: %s", x_method(x), x_url(x),
                     curl_easy_strerror(res));
            finish(f, x, SIO_ERR_IO, msg);
        }
        return;
    }
    if (is_2xx(x->status) || x->early_complete) {
        if (x->kind == K_PART) {
            fstream *s = x->s;
            int short_body;
            uint64_t got, len;
            pthread_mutex_lock(&s->mu);
            got = s->parts[x->pi].got;
            len = s->parts[x->pi].len;
            short_body = len != UINT64_MAX && got < len;
            pthread_mutex_unlock(&s->mu);
            if (short_body) {
                snprintf(why, sizeof why,
                         "body ended after %" PRIu64 " of %" PRIu64 " bytes",
                         got, len);
                retry(f, x, why);
                return;
            }
        }
        aimd_success(f);
        finish(f, x, SIO_OK, "");
        return;
    }
    /* An HTTP error answer. */
    {
        char code[128] = "", msg[256] = "";
        int throttle = 0, transient = 0;
        if (x->errlen)
            (void)sio_s3xml_parse_error(x->errbody, x->errlen, code,
                                        sizeof code, msg, sizeof msg);
        switch (x->status) {
        case 429:
        case 503: throttle = 1; transient = 1; break;
        case 500:
        case 502:
        case 504: transient = 1; break;
        default: break;
        }
        if (code[0] && s3_code_retryable(code, &throttle))
            transient = 1;
        if (throttle)
            aimd_throttle(f, x);
        if (transient) {
            if (code[0])
                snprintf(why, sizeof why, "status=%ld code=%s", x->status,
                         code);
            else
                snprintf(why, sizeof why, "status=%ld", x->status);
            retry(f, x, why);
            return;
        }
        sio_error e;
        sio_fetch_http_error(x_method(x), x_url(x), x->status, x->errbody,
                             x->errlen, &e);
        finish(f, x, e.code, e.msg);
    }
}

/* Cancel every transfer of s (engine thread). */
static void cancel_stream(sio_fetch *f, fstream *s)
{
    xlist *ls[3] = {&f->pending, &f->wait, &f->active};
    for (int i = 0; i < 3; i++) {
        xfer *x = ls[i]->head;
        while (x) {
            xfer *nx = x->next;
            if (x->kind == K_PART && x->s == s)
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
        uint64_t now = now_ms(), next_due = UINT64_MAX;
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

sio_code sio_fetch_create(const sio_fetch_config *cfg, sio_fetch **out,
                          sio_error *err)
{
    sio_fetch *f;
    sio_fetch_config c;
    sio_code rc = SIO_OK;
    int mu_init = 0;

    *out = NULL;
    memset(&c, 0, sizeof c);
    if (cfg)
        c = *cfg;
    c.max_inflight = DEF(c.max_inflight, DEF_INFLIGHT);
    c.max_per_host = DEF(c.max_per_host, DEF_PER_HOST);
    c.part_size = DEF(c.part_size, DEF_PART);
    c.parts_per_stream = DEF(c.parts_per_stream, DEF_PARTS);
    c.max_retries = DEF(c.max_retries, DEF_RETRIES);
    c.retry_base_ms = DEF(c.retry_base_ms, DEF_BASE_MS);
    c.retry_max_ms = DEF(c.retry_max_ms, DEF_MAX_MS);
    c.connect_timeout_ms = DEF(c.connect_timeout_ms, DEF_CONNECT_MS);
    c.stall_timeout_ms = DEF(c.stall_timeout_ms, DEF_STALL_MS);
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
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return sio_seterr(err, SIO_ERR_IO, "libcurl initialisation failed");
    f = calloc(1, sizeof *f);
    if (!f) {
        curl_global_cleanup();
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    f->cfg = c;
    f->cfg.ca_file = NULL;
    f->st = c.stats ? c.stats : &f->own;
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

void sio_fetch_destroy(sio_fetch *f)
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

/* Performs ---------------------------------------------------------------- */

void sio_fetch_response_free(sio_fetch_response *resp)
{
    if (!resp)
        return;
    free(resp->body);
    memset(resp, 0, sizeof *resp);
    resp->content_length = UINT64_MAX;
}

sio_code sio_fetch_perform(sio_fetch *f, const sio_fetch_request *req,
                           sio_fetch_response *resp, sio_error *err)
{
    call c;
    xfer *x;
    sio_code rc;

    memset(resp, 0, sizeof *resp);
    resp->content_length = UINT64_MAX;
    if (!f || !req || !req->method || !req->prepare || !req->display_url)
        return sio_seterr(err, SIO_ERR_INVALID, "bad fetch request");
    if (req->body_max > SIO_FETCH_BODY_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "body_max above %u",
                          SIO_FETCH_BODY_MAX);
    memset(&c, 0, sizeof c);
    c.req = req;
    c.max = req->body_max ? req->body_max : DEF_BODY_MAX;
    x = xfer_new(f, K_CALL);
    if (!x)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    x->c = &c;
    x->backend = (unsigned)req->backend < SIO_STORE_BACKENDS ? req->backend
                                                             : SIO_STORE_HTTP;
    if (req->trusted_endpoint)
        x->op = SIO_STORE_CREDENTIALS;
    else if (req->list)
        x->op = SIO_STORE_LIST;
    else if (strcmp(req->method, "GET") == 0)
        x->op = SIO_STORE_GET;
    else if (strcmp(req->method, "HEAD") == 0)
        x->op = SIO_STORE_HEAD;
    else
        x->op = SIO_STORE_OTHER;
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    submit(f, x);
    pthread_mutex_lock(&c.mu);
    while (!c.done)
        pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    rc = c.rc;
    resp->status = c.status;
    resp->body = c.body;
    resp->body_len = c.len;
    if (!resp->body) {
        resp->body = calloc(1, 1);
        resp->body_len = 0;
    }
    resp->content_length = c.clen;
    snprintf(resp->etag, sizeof resp->etag, "%s", c.etag);
    snprintf(resp->last_modified, sizeof resp->last_modified, "%s",
             c.lastmod);
    if (rc && err)
        *err = c.err;
    return rc;
}

/* Streams ----------------------------------------------------------------- */

/* The first ranged part of a stream; later ones double up to part_size. */
#define FETCH_FIRST_PART (1u << 20)

static part *head_part(fstream *s)
{
    return &s->parts[s->head % SIO_FETCH_PARTS_MAX];
}

/* Add part [start, start+len) and submit it (stream lock held). */
static sio_code add_part(fstream *s, uint64_t start, uint64_t len, size_t cap)
{
    unsigned idx = (s->head + s->nparts) % SIO_FETCH_PARTS_MAX;
    part *p = &s->parts[idx];
    xfer *x = xfer_new(s->f, K_PART);
    memset(p, 0, sizeof *p);
    if (!x)
        return SIO_ERR_NOMEM;
    p->buf = cap ? malloc(cap) : NULL;
    if (cap && !p->buf) {
        free(x);
        return SIO_ERR_NOMEM;
    }
    p->start = start;
    p->len = len;
    p->cap = cap;
    p->x = x;
    x->s = s;
    x->pi = idx;
    x->backend = s->backend;
    x->op = SIO_STORE_GET;
    s->nparts++;
    s->live++;
    submit(s->f, x);
    return SIO_OK;
}

/* Keep parts_per_stream parts in flight (stream lock held). */
static void refill(fstream *s)
{
    const sio_fetch_config *c = &s->f->cfg;
    if (!s->probed || s->single || s->rc)
        return;
    uint64_t stop = s->total < s->end_limit ? s->total : s->end_limit;
    while (s->nparts < c->parts_per_stream && s->next_start < stop) {
        uint64_t len = stop - s->next_start;
        if (len > s->next_len)
            len = s->next_len;
        if (add_part(s, s->next_start, len, (size_t)len) != SIO_OK) {
            s->rc = SIO_ERR_NOMEM;
            snprintf(s->err, sizeof s->err, "out of memory");
            return;
        }
        s->next_start += len;
        if (s->next_len < c->part_size)
            s->next_len = s->next_len * 2 < c->part_size ? s->next_len * 2
                                                         : c->part_size;
    }
}

static void release_head(fstream *s)
{
    part *p = head_part(s);
    free(p->buf);
    memset(p, 0, sizeof *p);
    s->head = (s->head + 1) % SIO_FETCH_PARTS_MAX;
    s->nparts--;
}

static sio_code fs_read(sio_stream *st, void *buf, size_t cap, size_t *got)
{
    fstream *s = (fstream *)st;
    sio_code rc = SIO_OK;
    *got = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->rc) {
            rc = s->rc;
            break;
        }
        refill(s);
        if (s->nparts == 0)
            break; /* the end */
        part *p = head_part(s);
        if (p->wpos > p->rpos) {
            size_t n = p->wpos - p->rpos;
            if (n > cap)
                n = cap;
            memcpy(buf, p->buf + p->rpos, n);
            p->rpos += n;
            if (p->rpos == p->wpos)
                p->rpos = p->wpos = 0;
            if (p->paused && p->x &&
                p->cap - (p->wpos - p->rpos) >= p->need) {
                xfer *x = p->x;
                p->paused = 0;
                pthread_mutex_lock(&s->f->mu);
                if (!x->unpause_queued) {
                    x->unpause_queued = 1;
                    x->unext = s->f->unpause;
                    s->f->unpause = x;
                }
                pthread_mutex_unlock(&s->f->mu);
                curl_multi_wakeup(s->f->multi);
            }
            *got = n;
            break;
        }
        if (p->done) {
            release_head(s);
            continue;
        }
        pthread_cond_wait(&s->cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static const char *fs_errmsg(const sio_stream *st)
{
    return ((const fstream *)st)->err;
}

static void fstream_free(fstream *s)
{
    for (unsigned i = 0; i < SIO_FETCH_PARTS_MAX; i++)
        free(s->parts[i].buf);
    if (s->ctx_free)
        s->ctx_free(s->ctx);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->display_url);
    free(s);
}

static void fs_close(sio_stream *st)
{
    fstream *s = (fstream *)st;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->live > 0) {
        pthread_mutex_lock(&s->f->mu);
        if (!s->cancel_queued) {
            s->cancel_queued = 1;
            s->cnext = s->f->cancel;
            s->f->cancel = s;
        }
        pthread_mutex_unlock(&s->f->mu);
        curl_multi_wakeup(s->f->multi);
        while (s->live > 0)
            pthread_cond_wait(&s->cv, &s->mu);
    }
    /* The transfers may all end before the engine takes the cancel
     * request: wait for the engine to have taken it too, or it would walk
     * a freed stream (and cancel whatever new stream reuses the address). */
    while (s->cancel_queued)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    fstream_free(s);
}

void sio_fetch_validator(const char *etag, const char *last_modified,
                         char *out, size_t cap)
{
    if (etag && etag[0])
        snprintf(out, cap, "%s", etag);
    else if (last_modified && last_modified[0])
        snprintf(out, cap, "lm:%s", last_modified);
    else if (cap)
        out[0] = '\0';
}

static void fs_info(sio_stream *st, sio_objinfo *out)
{
    fstream *s = (fstream *)st;
    pthread_mutex_lock(&s->mu);
    out->size = s->probed ? s->total : UINT64_MAX;
    if (s->probed)
        sio_fetch_validator(s->etag, s->lastmod, out->validator,
                            sizeof out->validator);
    else
        out->validator[0] = '\0';
    pthread_mutex_unlock(&s->mu);
}

static const sio_stream_ops fetch_stream_ops = {fs_read, fs_errmsg, fs_close,
                                                fs_info};

sio_code sio_fetch_open(sio_fetch *f, const sio_fetch_target *t,
                        uint64_t offset, sio_stream **out, sio_error *err)
{
    return sio_fetch_open_range(f, t, offset, UINT64_MAX, out, err);
}

sio_code sio_fetch_open_range(sio_fetch *f, const sio_fetch_target *t,
                              uint64_t offset, uint64_t end,
                              sio_stream **out, sio_error *err)
{
    fstream *s;
    sio_code rc;

    *out = NULL;
    s = calloc(1, sizeof *s);
    if (!s || !(s->display_url = strdup(t->display_url))) {
        free(s);
        if (t->ctx_free)
            t->ctx_free(t->ctx);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    s->base.ops = &fetch_stream_ops;
    s->f = f;
    s->prepare = t->prepare;
    s->ctx = t->ctx;
    s->ctx_free = t->ctx_free;
    s->backend = (unsigned)t->backend < SIO_STORE_BACKENDS ? t->backend
                                                           : SIO_STORE_HTTP;
    s->offset = offset;
    s->total = UINT64_MAX;
    s->end_limit = end > offset ? end : offset + 1;
    /* A read of the whole object (from byte 0, no end) asks for a whole
     * part at once: one request per object up to part_size (a throttled
     * store counts requests). A read from an offset (a seek) starts small
     * and doubles, so a short read fetches little. */
    s->next_len = offset == 0 && end == UINT64_MAX ? f->cfg.part_size
                  : f->cfg.part_size < FETCH_FIRST_PART ? f->cfg.part_size
                                                        : FETCH_FIRST_PART;
    s->next_start = offset;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_lock(&s->mu);
    /* The probe: its answer tells the size, the ETag and whether the
     * server honours Range; its buffer is the single-mode FIFO too. */
    rc = add_part(s, offset, UINT64_MAX, f->cfg.part_size);
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        fstream_free(s);
        return sio_seterr(err, rc, "out of memory");
    }
    *out = &s->base;
    return SIO_OK;
}
