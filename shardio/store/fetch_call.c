/*
 * fetch_call.c — the fetch engine's one-shot requests: HEAD, GET, PUT,
 * POST with a small body collected in memory (sio_fetch_perform): listing
 * pages, HEADs, STS and instance-metadata calls.
 *
 * Threading: the caller's thread submits the transfer and blocks on the
 * call's condition variable; the call operations (sio_fetch_call_ops) run
 * on the engine thread and fill the call record, under its lock when the
 * transfer ends. Ownership: the call record lives on the caller's stack,
 * which waits until the engine says it is done; the body (or the error
 * body) is handed to the response, which the caller frees.
 * Memory bound: a body is bounded by body_max, an error body by
 * SIO_FETCH_ERRBODY_MAX.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/fetch_int.h"

/* Call operations (engine thread) ------------------------------------- */

static void call_begin(xfer *x, xfer_hdrs *h)
{
    (void)h; /* a call adds no header of its own */
    if (x->c->body) {
        x->c->len = 0;
        x->c->body[0] = '\0';
    }
}

static void call_setopt(const sio_fetch *f, xfer *x)
{
    const sio_fetch_request *r = x->c->req;
    const char *method = r->method;
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
}

static size_t write_call(xfer *x, const char *ptr, size_t n)
{
    call *c = x->c;
    if (!x->headers_done)
        sio_fetch_read_status(x);
    if (!sio_fetch_is_2xx(x->status))
        return sio_fetch_keep_errbody(x, ptr, n);
    if (n > c->max - c->len) {
        sio_fetch_set_fatal(x, SIO_ERR_LIMIT,
                            "response body larger than %zu bytes", c->max);
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
            sio_fetch_set_fatal(x, SIO_ERR_NOMEM, "out of memory");
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

static void call_finish(xfer *x, sio_code rc, const char *msg)
{
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

const xfer_ops sio_fetch_call_ops = {
    .begin = call_begin,
    .setopt = call_setopt,
    .judge = sio_fetch_read_status,
    .write = write_call,
    .settle = NULL,     /* a call's body has no length to have reached */
    .short_body = NULL, /* curl itself checks Content-Length */
    .finish = call_finish,
};

/* Performs (caller's thread) -------------------------------------------- */

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

    f = sio_fetch_lane(f);
    memset(resp, 0, sizeof *resp);
    resp->content_length = UINT64_MAX;
    if (!f || !req || !req->method || !req->prepare || !req->display_url)
        return sio_seterr(err, SIO_ERR_INVALID, "bad fetch request");
    if (req->body_max > SIO_FETCH_BODY_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "body_max above %u",
                          SIO_FETCH_BODY_MAX);
    memset(&c, 0, sizeof c);
    c.req = req;
    c.max = req->body_max ? req->body_max : FETCH_DEF_BODY_MAX;
    x = sio_fetch_xfer_new(f, &sio_fetch_call_ops);
    if (!x)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    x->c = &c;
    x->method = req->method;
    x->display_url = req->display_url;
    x->prepare = req->prepare;
    x->pctx = req->ctx;
    x->max_retries = req->max_retries >= 0 ? (unsigned)req->max_retries
                                           : f->cfg.max_retries;
    x->trusted = req->trusted_endpoint;
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
    sio_fetch_submit(f, x);
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
