/*
 * fetch_stream.c — the fetch engine's streams: an object read as ranged
 * parts into bounded buffers (sio_fetch_open, sio_fetch_open_range).
 *
 * The first part (the probe) tells the size, the ETag and whether the
 * server honours Range; later parts start at FETCH_FIRST_PART bytes and
 * double up to part_size, at most parts_per_stream in flight, handed to
 * the reader in order. A server that ignores Range is read as one body
 * through the probe's buffer, the transfer paused while it is full. An
 * attempt cut mid-way resumes from the byte reached with If-Match on the
 * (strong) ETag; a changed object is SIO_ERR_CHANGED, never a mix.
 *
 * Threading: each stream has its own lock and condition variable guarding
 * its parts' buffers. The part operations (sio_fetch_part_ops) run on the
 * engine thread and take the stream lock; the reader drains the buffers
 * under it and asks the engine to unpause (stream lock, then engine lock).
 * Ownership: a part's buffer belongs to its stream; the stream owns the
 * target's ctx and outlives its transfers (close cancels them and waits
 * for the engine to let go).
 * Memory bound: at most parts_per_stream parts of at most part_size bytes.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/fetch_int.h"

/* The first ranged part of a stream; later ones double up to part_size. */
#define FETCH_FIRST_PART (1u << 20)

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
        sio_fetch_set_fatal(x, SIO_ERR_CHANGED,
                            "object changed while reading (ETag %s, now %s)",
                            s->etag, x->etag);
}

/* First look at a part's answer (stream lock held). */
static void judge_part(xfer *x)
{
    fstream *s = x->s;
    part *p = &s->parts[x->pi];
    uint64_t a, b, t;

    sio_fetch_read_status(x);
    if (x->status == 206) {
        check_etag(x, s);
        if (!x->crange[0] || parse_crange(x->crange, &a, &b, &t) != 0 ||
            a == UINT64_MAX || t == UINT64_MAX) {
            sio_fetch_set_fatal(x, SIO_ERR_FORMAT,
                                "bad Content-Range \"%s\"", x->crange);
            return;
        }
        if (a != x->want_start || b >= t) {
            sio_fetch_set_fatal(x, SIO_ERR_IO,
                                "answer starts at the wrong byte "
                                "(Content-Range \"%s\", asked %" PRIu64 ")",
                                x->crange, x->want_start);
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
            sio_fetch_set_fatal(x, SIO_ERR_CHANGED,
                                "object size changed (Content-Range \"%s\")",
                                x->crange);
        } else if (p->len != UINT64_MAX &&
                   b + 1 > p->start + p->len && !s->single) {
            sio_fetch_set_fatal(x, SIO_ERR_IO,
                                "answer longer than the part asked "
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
            sio_fetch_set_fatal(x, SIO_ERR_CHANGED,
                                "object size changed (%" PRIu64 " bytes)",
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
        sio_fetch_set_fatal(x, SIO_ERR_CHANGED,
                            "object changed while reading (If-Match %s "
                            "failed)", s->etag);
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
    if (!sio_fetch_is_2xx(x->status)) {
        ret = sio_fetch_keep_errbody(x, ptr, n);
        goto out;
    }
    size_t drop = x->skip < n ? (size_t)x->skip : n;
    size_t rest = n - drop;
    int complete = 0;
    if (p->len != UINT64_MAX && rest > p->len - p->got) {
        if (x->status != 200) {
            sio_fetch_set_fatal(x, SIO_ERR_IO,
                                "server sent more than the range asked");
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

/* Part operations (engine thread) ------------------------------------- */

static void part_begin(xfer *x, xfer_hdrs *h)
{
    fstream *s = x->s;
    part *p;
    pthread_mutex_lock(&s->mu);
    p = &s->parts[x->pi];
    p->paused = 0;
    x->want_start = p->start + p->got;
    if (p->len != UINT64_MAX) {
        if (p->got < p->len) {
            snprintf(h->range, sizeof h->range, "bytes=%" PRIu64 "-%" PRIu64,
                     x->want_start, p->start + p->len - 1);
            h->v[h->n].name = "Range";
            h->v[h->n++].value = h->range;
        }
    } else if (!s->probed) {
        uint64_t plen = s->next_len;
        if (s->end_limit - p->start < plen)
            plen = s->end_limit - p->start;
        snprintf(h->range, sizeof h->range, "bytes=%" PRIu64 "-%" PRIu64,
                 x->want_start, p->start + plen - 1);
        h->v[h->n].name = "Range";
        h->v[h->n++].value = h->range;
    } else if (x->want_start > 0) {
        snprintf(h->range, sizeof h->range, "bytes=%" PRIu64 "-",
                 x->want_start);
        h->v[h->n].name = "Range";
        h->v[h->n++].value = h->range;
    }
    /* If-Match only with a strong ETag: a weak one never matches. */
    if (s->etag[0] && strncmp(s->etag, "W/", 2) != 0) {
        snprintf(h->ifmatch, sizeof h->ifmatch, "%s", s->etag);
        h->v[h->n].name = "If-Match";
        h->v[h->n++].value = h->ifmatch;
    }
    pthread_mutex_unlock(&s->mu);
}

static void part_setopt(const sio_fetch *f, xfer *x)
{
    curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)f->cfg.connect_timeout_ms);
}

static void part_judge(xfer *x)
{
    pthread_mutex_lock(&x->s->mu);
    judge_part(x);
    pthread_mutex_unlock(&x->s->mu);
}

/* An error after the last byte of a known-length part (a reset as the
 * connection closes) loses nothing. */
static void part_settle(xfer *x)
{
    pthread_mutex_lock(&x->s->mu);
    part *p = &x->s->parts[x->pi];
    if (p->len != UINT64_MAX && p->got == p->len &&
        sio_fetch_is_2xx(x->status))
        x->early_complete = 1;
    pthread_mutex_unlock(&x->s->mu);
}

static int part_short_body(xfer *x, char *why, size_t len)
{
    fstream *s = x->s;
    uint64_t got, plen;
    pthread_mutex_lock(&s->mu);
    got = s->parts[x->pi].got;
    plen = s->parts[x->pi].len;
    pthread_mutex_unlock(&s->mu);
    if (plen == UINT64_MAX || got >= plen)
        return 0;
    snprintf(why, len, "body ended after %" PRIu64 " of %" PRIu64 " bytes",
             got, plen);
    return 1;
}

static void part_finish(xfer *x, sio_code rc, const char *msg)
{
    fstream *s = x->s;
    pthread_mutex_lock(&s->mu);
    part *p = &s->parts[x->pi];
    p->done = 1;
    p->x = NULL;
    if (rc == SIO_OK && p->len == UINT64_MAX) {
        /* Single mode without a known length: the end is where the body
         * ended. */
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
}

const xfer_ops sio_fetch_part_ops = {
    .begin = part_begin,
    .setopt = part_setopt,
    .judge = part_judge,
    .write = write_part,
    .settle = part_settle,
    .short_body = part_short_body,
    .finish = part_finish,
};

/* Streams (reader threads) ----------------------------------------------- */


static part *head_part(fstream *s)
{
    return &s->parts[s->head % SIO_FETCH_PARTS_MAX];
}

/* Add part [start, start+len) and submit it (stream lock held). */
static sio_code add_part(fstream *s, uint64_t start, uint64_t len, size_t cap)
{
    unsigned idx = (s->head + s->nparts) % SIO_FETCH_PARTS_MAX;
    part *p = &s->parts[idx];
    xfer *x = sio_fetch_xfer_new(s->f, &sio_fetch_part_ops);
    memset(p, 0, sizeof *p);
    if (!x)
        return SIO_ERR_NOMEM;
    p->buf = cap ? sio_pool_get(cap, &p->bcap) : NULL;
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
    x->method = "GET";
    x->display_url = s->display_url;
    x->prepare = s->prepare;
    x->pctx = s->ctx;
    x->max_retries = s->f->cfg.max_retries;
    s->nparts++;
    s->live++;
    sio_fetch_submit(s->f, x);
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
    sio_pool_put(p->buf, p->bcap);
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
        sio_pool_put(s->parts[i].buf, s->parts[i].bcap);
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
                                                fs_info, NULL};

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

    f = sio_fetch_lane(f); /* each stream's parts on one engine thread */
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
     * server honours Range; its buffer is the single-mode FIFO too (a
     * short range's no larger than the range, and never smaller than
     * what curl hands over at once: a server that ignores Range sends
     * the whole object through it). */
    size_t cap = f->cfg.part_size;
    if (end != UINT64_MAX && end > offset && end - offset < cap)
        cap = (size_t)(end - offset);
    if (cap < SIO_FETCH_RECV_BUFFER)
        cap = SIO_FETCH_RECV_BUFFER;
    rc = add_part(s, offset, UINT64_MAX, cap);
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        fstream_free(s);
        return sio_seterr(err, rc, "out of memory");
    }
    *out = &s->base;
    return SIO_OK;
}
