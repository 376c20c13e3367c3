/*
 * backend_http.c — http:// and https:// shards through the fetch engine.
 *
 * A URL names one object; brace patterns are expanded by the caller
 * (source.c), there is no listing. stat() is a HEAD; open() streams with
 * ranged GETs (fetch.h), so the retry, resume and ETag rules are the
 * engine's. The URL is sent as written (the user encodes it); messages
 * show it redacted (no user info, no query).
 *
 * Threading: the context is the io's engine, which is thread-safe.
 * Ownership: each stream owns a copy of its URL.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/fetch.h"
#include "store/url.h"

typedef struct http_target {
    char *url;
} http_target;

static int http_matches(const char *url)
{
    return strncasecmp(url, "http://", 7) == 0 ||
           strncasecmp(url, "https://", 8) == 0;
}

static sio_code http_create(sio_io *io, void **ctx, sio_error *err)
{
    *ctx = sio_io_fetch(io);
    return SIO_OK;
}

static int http_is_container(void *ctx, const char *url)
{
    return 0;
}

static sio_code http_list(void *ctx, const char *url, sio_objlist *out,
                          sio_error *err)
{
    char shown[512];
    sio_url_redact(url, shown, sizeof shown);
    return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                      "http sources cannot be listed; name shards with a "
                      "brace pattern: %s", shown);
}

static sio_code http_prepare(void *ctx, const sio_fetch_attempt *a,
                             char **url, struct curl_slist **headers,
                             sio_error *err)
{
    const http_target *t = ctx;
    (void)a;
    (void)headers;
    *url = strdup(t->url);
    return *url ? SIO_OK : sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
}

static void target_free(void *ctx)
{
    http_target *t = ctx;
    if (t) {
        free(t->url);
        free(t);
    }
}

/* Validate url and make a target for it. */
static sio_code make_target(const char *url, http_target **out, sio_error *err)
{
    sio_url u;
    sio_code rc = sio_url_parse(url, &u, err);
    *out = NULL;
    if (rc)
        return rc;
    sio_url_free(&u);
    http_target *t = calloc(1, sizeof *t);
    if (!t || !(t->url = strdup(url))) {
        free(t);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    *out = t;
    return SIO_OK;
}

static sio_code http_head(void *ctx, const char *url, sio_objinfo *out,
                          sio_error *err)
{
    char shown[512];
    http_target *t = NULL;
    sio_fetch_response resp;
    sio_fetch_request req;
    sio_code rc = make_target(url, &t, err);

    memset(&resp, 0, sizeof resp);
    if (rc)
        goto out;
    sio_url_redact(url, shown, sizeof shown);
    memset(&req, 0, sizeof req);
    req.method = "HEAD";
    req.display_url = shown;
    req.prepare = http_prepare;
    req.ctx = t;
    req.max_retries = -1;
    req.backend = SIO_STORE_HTTP;
    rc = sio_fetch_perform(ctx, &req, &resp, err);
    if (rc)
        goto out;
    out->size = resp.content_length;
    sio_fetch_validator(resp.etag, resp.last_modified, out->validator,
                        sizeof out->validator);
out:
    sio_fetch_response_free(&resp);
    target_free(t);
    return rc;
}

static sio_code http_stat(void *ctx, const char *url, uint64_t *size,
                          sio_error *err)
{
    sio_objinfo oi;
    sio_code rc = http_head(ctx, url, &oi, err);
    if (rc == SIO_OK)
        *size = oi.size;
    return rc;
}

static sio_code http_open_range(void *ctx, const char *url, uint64_t offset,
                                uint64_t end, sio_stream **out,
                                sio_error *err)
{
    char shown[512];
    http_target *t = NULL;
    sio_fetch_target ft;
    sio_code rc = make_target(url, &t, err);
    *out = NULL;
    if (rc)
        return rc;
    sio_url_redact(url, shown, sizeof shown);
    ft.display_url = shown;
    ft.prepare = http_prepare;
    ft.ctx = t;
    ft.ctx_free = target_free;
    ft.backend = SIO_STORE_HTTP;
    return sio_fetch_open_range(ctx, &ft, offset, end, out, err);
}

static sio_code http_open(void *ctx, const char *url, uint64_t offset,
                          sio_stream **out, sio_error *err)
{
    return http_open_range(ctx, url, offset, UINT64_MAX, out, err);
}

const sio_backend_ops sio_backend_http = {
    .name = "http",
    .matches = http_matches,
    .list = http_list,
    .stat = http_stat,
    .is_container = http_is_container,
    .open = http_open,
    .destroy = NULL,
    .create = http_create,
    .open_range = http_open_range,
    .head = http_head,
};
