/*
 * backend_s3.c — s3://bucket/key shards and s3://bucket/prefix/ listings.
 *
 * Requests go through the fetch engine; each attempt is built by a prepare
 * callback that signs it with SigV4 (sigv4.h) at the current time with a
 * snapshot of the credentials (creds.h), UNSIGNED-PAYLOAD for body-less
 * requests, or leaves it unsigned for anonymous access. The key is encoded
 * by the signer, so what goes on the wire is what was signed.
 *
 * Endpoint: config, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
 * https://s3.<region>.amazonaws.com. Addressing: path style
 * (endpoint/bucket/key) or virtual-hosted (bucket.endpoint/key); AUTO picks
 * AWS_S3_ADDRESSING_STYLE=path|virtual when set, else path style for an
 * endpoint that is an IP address or localhost, else virtual-hosted; a
 * bucket name that is not a plain DNS label (dots, capitals, '_') always
 * uses path style (dots break TLS wildcard certificates).
 *
 * Listing: ListObjectsV2 with delimiter '/', so every page returns the
 * objects of one "directory" and its sub-prefixes; sub-prefixes go on a
 * shared queue that S3_LIST_WORKERS threads drain concurrently, each
 * following continuation tokens. The whole prefix is listed (recursively);
 * the caller filters shard names and sorts.
 *
 * Threading: the context is immutable after create (the credential
 * provider and the engine lock for themselves). Ownership: the context
 * owns the provider; each stream owns its target (bucket, key).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "creds.h"
#include "fetch.h"
#include "s3xml.h"
#include "url.h"

/* Threads that list sub-prefixes at once. Each holds one request in
 * flight; the engine's limits apply on top. */
#define S3_LIST_WORKERS 8u
/* Most sub-prefixes one listing may visit (a bound on the queue). */
#define S3_LIST_PREFIXES_MAX 1000000u
/* Keys per page asked for (S3's maximum). */
#define S3_LIST_PAGE "1000"
/* Longest region name (AWS's are ~15 bytes). */
#define S3_REGION_MAX 63u

typedef struct s3_ctx {
    sio_fetch *f;
    sio_logger log;
    char region[S3_REGION_MAX + 1];
    sio_url ep;          /* endpoint: scheme, host, port */
    int custom_endpoint;
    int path_style;      /* resolved addressing for DNS-safe buckets */
    int anonymous;
    sio_creds *creds;    /* NULL when anonymous */
} s3_ctx;

/* One object (or bucket, for listing) a request is about. */
typedef struct s3_target {
    s3_ctx *s3;
    char *bucket;
    char *key;                  /* NULL: a bucket-level request (listing) */
    const sio_sigv4_pair *query; /* borrowed (listing), may be NULL */
    size_t nquery;
} s3_target;

static int s3_matches(const char *url)
{
    return strncasecmp(url, "s3://", 5) == 0;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

/* A bucket that can be a DNS label under the endpoint. */
static int bucket_dns_ok(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63 || b[0] == '-' || b[n - 1] == '-')
        return 0;
    for (; *b; b++)
        if (!(islower((unsigned char)*b) || isdigit((unsigned char)*b) ||
              *b == '-'))
            return 0;
    return 1;
}

/* Split s3://bucket/key; key may be "" (bucket root). */
static sio_code split_s3(const char *url, char **bucket, char **key,
                         sio_error *err)
{
    sio_url u;
    char shown[512];
    sio_code rc = sio_url_parse(url, &u, err);
    *bucket = *key = NULL;
    if (rc)
        return rc;
    sio_url_redact(url, shown, sizeof shown);
    if (strcmp(u.scheme, "s3") != 0 || u.userinfo || u.port || u.ipv6) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "not an s3://bucket/key URL: %s",
                        shown);
        goto out;
    }
    if (strlen(u.path + 1) > SIO_S3XML_KEY_MAX) {
        rc = sio_seterr(err, SIO_ERR_LIMIT, "S3 key longer than %u bytes: %s",
                        SIO_S3XML_KEY_MAX, shown);
        goto out;
    }
    *bucket = strdup(u.host);
    *key = strdup(u.path + 1);
    if (!*bucket || !*key) {
        free(*bucket);
        free(*key);
        *bucket = *key = NULL;
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
out:
    sio_url_free(&u);
    return rc;
}

/* Build one attempt: URL, Host and the signature headers. */
static sio_code s3_prepare(void *ctx, const sio_fetch_attempt *a, char **url,
                           struct curl_slist **headers, sio_error *err)
{
    const s3_target *t = ctx;
    s3_ctx *s3 = t->s3;
    char host[SIO_URL_HOST_MAX + 80], hostline[SIO_URL_HOST_MAX + 96];
    char amz_date[32], *path = NULL, *wire = NULL;
    size_t plen;
    int path_style = s3->path_style || !bucket_dns_ok(t->bucket);
    sio_sigv4_request req;
    sio_sigv4_result res;
    sio_creds_value cv;
    struct curl_slist *nl;
    struct tm tm;
    time_t now = time(NULL);
    sio_code rc = SIO_OK;

    memset(&res, 0, sizeof res);
    memset(&cv, 0, sizeof cv);
    if (path_style) {
        sio_url_authority(&s3->ep, host, sizeof host);
    } else {
        char auth[SIO_URL_HOST_MAX + 16];
        sio_url_authority(&s3->ep, auth, sizeof auth);
        snprintf(host, sizeof host, "%s.%s", t->bucket, auth);
    }
    plen = strlen(t->bucket) + (t->key ? strlen(t->key) : 0) + 4;
    path = malloc(plen);
    if (!path) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (path_style)
        snprintf(path, plen, "/%s%s%s", t->bucket, t->key ? "/" : "",
                 t->key ? t->key : "");
    else
        snprintf(path, plen, "/%s", t->key ? t->key : "");
    gmtime_r(&now, &tm);
    strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
    memset(&req, 0, sizeof req);
    req.method = a->method;
    req.host = host;
    req.path = path;
    req.query = t->query;
    req.nquery = t->nquery;
    req.headers = a->headers;
    req.nheaders = a->nheaders;
    req.payload_hash = NULL; /* UNSIGNED-PAYLOAD: no request bodies here */
    req.region = s3->region;
    req.service = "s3";
    req.amz_date = amz_date;
    req.flags = SIO_SIGV4_S3;
    snprintf(hostline, sizeof hostline, "Host: %s", host);
    nl = curl_slist_append(*headers, hostline);
    if (!nl) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    *headers = nl;
    if (s3->anonymous) {
        rc = sio_sigv4_wire_path(&req, &wire, err);
        if (rc)
            goto out;
    } else {
        sio_sigv4_creds sc;
        /* Never block here: this runs on the engine thread. The caller of
         * open/list/stat loaded the credentials beforehand. */
        rc = sio_creds_get(s3->creds, 0, &cv, err);
        if (rc)
            goto out;
        sc.access_key = cv.access_key;
        sc.secret_key = cv.secret_key;
        sc.session_token = cv.session_token;
        rc = sio_sigv4_sign(&req, &sc, &res, err);
        if (rc)
            goto out;
        for (size_t i = 0; i < res.nheaders; i++) {
            nl = curl_slist_append(*headers, res.headers[i]);
            if (!nl) {
                rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
                goto out;
            }
            *headers = nl;
        }
        wire = res.wire_path;
        res.wire_path = NULL;
    }
    {
        size_t ul = strlen(s3->ep.scheme) + strlen(host) + strlen(wire) + 4;
        *url = malloc(ul);
        if (!*url) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            goto out;
        }
        snprintf(*url, ul, "%s://%s%s", s3->ep.scheme, host, wire);
    }
out:
    free(path);
    free(wire);
    sio_sigv4_result_free(&res);
    sio_creds_value_free(&cv);
    return rc;
}

static void target_free(void *ctx)
{
    s3_target *t = ctx;
    if (t) {
        free(t->bucket);
        free(t->key);
        free(t);
    }
}

/* Make sure credentials are loaded (and not expired) before a request is
 * handed to the engine, whose thread must not block on them. */
static sio_code ensure_creds(s3_ctx *s3, sio_error *err)
{
    sio_creds_value v;
    sio_code rc;
    if (s3->anonymous)
        return SIO_OK;
    rc = sio_creds_get(s3->creds, 1, &v, err);
    sio_creds_value_free(&v);
    return rc;
}

static int s3_is_container(void *ctx, const char *url)
{
    size_t n = strlen(url);
    const char *slash;
    if (n && url[n - 1] == '/')
        return 1;
    slash = strchr(url + 5, '/');
    return slash == NULL; /* "s3://bucket" */
}

static sio_code s3_head(void *ctx, const char *url, sio_objinfo *out,
                        sio_error *err)
{
    s3_ctx *s3 = ctx;
    s3_target t = {s3, NULL, NULL, NULL, 0};
    sio_fetch_request req;
    sio_fetch_response resp;
    char shown[512];
    sio_code rc;

    memset(&resp, 0, sizeof resp);
    rc = split_s3(url, &t.bucket, &t.key, err);
    if (rc)
        goto out;
    rc = ensure_creds(s3, err);
    if (rc)
        goto out;
    sio_url_redact(url, shown, sizeof shown);
    memset(&req, 0, sizeof req);
    req.method = "HEAD";
    req.display_url = shown;
    req.prepare = s3_prepare;
    req.ctx = &t;
    req.max_retries = -1;
    req.backend = SIO_STORE_S3;
    rc = sio_fetch_perform(s3->f, &req, &resp, err);
    if (rc)
        goto out;
    out->size = resp.content_length;
    sio_fetch_validator(resp.etag, resp.last_modified, out->validator,
                        sizeof out->validator);
out:
    sio_fetch_response_free(&resp);
    free(t.bucket);
    free(t.key);
    return rc;
}

static sio_code s3_stat(void *ctx, const char *url, uint64_t *size,
                        sio_error *err)
{
    sio_objinfo oi;
    sio_code rc = s3_head(ctx, url, &oi, err);
    if (rc == SIO_OK)
        *size = oi.size;
    return rc;
}

static sio_code s3_open_range(void *ctx, const char *url, uint64_t offset,
                              uint64_t end, sio_stream **out, sio_error *err)
{
    s3_ctx *s3 = ctx;
    s3_target *t;
    sio_fetch_target ft;
    char shown[512];
    sio_code rc;

    *out = NULL;
    t = calloc(1, sizeof *t);
    if (!t)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    t->s3 = s3;
    rc = split_s3(url, &t->bucket, &t->key, err);
    if (!rc)
        rc = ensure_creds(s3, err);
    if (rc) {
        target_free(t);
        return rc;
    }
    sio_url_redact(url, shown, sizeof shown);
    ft.display_url = shown;
    ft.prepare = s3_prepare;
    ft.ctx = t;
    ft.ctx_free = target_free;
    ft.backend = SIO_STORE_S3;
    return sio_fetch_open_range(s3->f, &ft, offset, end, out, err);
}

static sio_code s3_open(void *ctx, const char *url, uint64_t offset,
                        sio_stream **out, sio_error *err)
{
    return s3_open_range(ctx, url, offset, UINT64_MAX, out, err);
}

/* Listing ------------------------------------------------------------------- */

typedef struct list_job {
    s3_ctx *s3;
    const char *bucket;
    sio_objlist *out;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char **queue;
    size_t qn, qcap, visited;
    unsigned busy;
    int failed;
    sio_error err;
} list_job;

/* Queue a prefix (job lock held). */
static sio_code push_prefix(list_job *j, const char *p)
{
    if (j->visited >= S3_LIST_PREFIXES_MAX)
        return sio_seterr(&j->err, SIO_ERR_LIMIT,
                          "listing s3://%s/ visits more than %u prefixes",
                          j->bucket, S3_LIST_PREFIXES_MAX);
    if (j->qn == j->qcap) {
        size_t nc = j->qcap ? j->qcap * 2 : 64;
        char **nq = realloc(j->queue, nc * sizeof *nq);
        if (!nq)
            return sio_seterr(&j->err, SIO_ERR_NOMEM, "out of memory");
        j->queue = nq;
        j->qcap = nc;
    }
    j->queue[j->qn] = strdup(p);
    if (!j->queue[j->qn])
        return sio_seterr(&j->err, SIO_ERR_NOMEM, "out of memory");
    j->qn++;
    j->visited++;
    pthread_cond_broadcast(&j->cv);
    return SIO_OK;
}

/* List one prefix with delimiter '/', every page. */
static sio_code list_prefix(list_job *j, const char *prefix, sio_error *err)
{
    char *token = NULL, shown[600];
    sio_code rc = SIO_OK;
    s3_target t = {j->s3, (char *)(uintptr_t)j->bucket, NULL, NULL, 0};
    size_t blen = strlen(j->bucket);

    snprintf(shown, sizeof shown, "s3://%s/%s", j->bucket, prefix);
    for (;;) {
        sio_sigv4_pair q[6];
        size_t nq = 0;
        sio_fetch_request req;
        sio_fetch_response resp;
        sio_s3_list_page page;

        q[nq].name = "list-type";
        q[nq++].value = "2";
        q[nq].name = "delimiter";
        q[nq++].value = "/";
        q[nq].name = "max-keys";
        q[nq++].value = S3_LIST_PAGE;
        q[nq].name = "encoding-type";
        q[nq++].value = "url";
        q[nq].name = "prefix";
        q[nq++].value = prefix;
        if (token) {
            q[nq].name = "continuation-token";
            q[nq++].value = token;
        }
        t.query = q;
        t.nquery = nq;
        memset(&req, 0, sizeof req);
        req.method = "GET";
        req.display_url = shown;
        req.prepare = s3_prepare;
        req.ctx = &t;
        req.body_max = SIO_S3XML_DOC_MAX;
        req.max_retries = -1;
        req.backend = SIO_STORE_S3;
        req.list = 1;
        rc = sio_fetch_perform(j->s3->f, &req, &resp, err);
        if (rc) {
            sio_fetch_response_free(&resp);
            break;
        }
        rc = sio_s3xml_parse_list(resp.body, resp.body_len, &page, err);
        sio_fetch_response_free(&resp);
        if (rc)
            break;
        pthread_mutex_lock(&j->mu);
        for (size_t i = 0; rc == SIO_OK && i < page.n; i++) {
            size_t kl = strlen(page.keys[i]);
            if (kl == 0 || page.keys[i][kl - 1] == '/')
                continue; /* "directory" marker objects */
            char *u = malloc(blen + kl + 7);
            if (!u) {
                rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
                break;
            }
            snprintf(u, blen + kl + 7, "s3://%s/%s", j->bucket, page.keys[i]);
            rc = sio_objlist_add(j->out, u, page.sizes[i]);
            free(u);
            if (rc)
                sio_seterr(err, rc, "listing %s: %s", shown, sio_strerror(rc));
        }
        for (size_t i = 0; rc == SIO_OK && i < page.nprefixes; i++) {
            /* S3 never returns the prefix itself; a server that does would
             * loop forever without this check. */
            if (strcmp(page.prefixes[i], prefix) == 0)
                continue;
            rc = push_prefix(j, page.prefixes[i]);
            if (rc)
                *err = j->err;
        }
        pthread_mutex_unlock(&j->mu);
        free(token);
        token = NULL;
        if (rc == SIO_OK && page.truncated) {
            if (!page.next_token || !page.next_token[0]) {
                rc = sio_seterr(err, SIO_ERR_FORMAT, "listing %s: truncated "
                                "page without NextContinuationToken", shown);
            } else {
                token = page.next_token;
                page.next_token = NULL;
            }
        }
        sio_s3_list_page_free(&page);
        if (rc || !token)
            break;
    }
    free(token);
    return rc;
}

static void *list_worker(void *arg)
{
    list_job *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->qn == 0 && j->busy > 0 && !j->failed)
            pthread_cond_wait(&j->cv, &j->mu);
        if (j->failed || j->qn == 0)
            break;
        char *p = j->queue[--j->qn];
        j->busy++;
        pthread_mutex_unlock(&j->mu);
        sio_error e;
        sio_code rc = list_prefix(j, p, &e);
        free(p);
        pthread_mutex_lock(&j->mu);
        j->busy--;
        if (rc && !j->failed) {
            j->failed = 1;
            j->err = e;
            j->err.code = rc;
        }
        pthread_cond_broadcast(&j->cv);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static sio_code s3_list(void *ctx, const char *url, sio_objlist *out,
                        sio_error *err)
{
    s3_ctx *s3 = ctx;
    list_job j;
    char *bucket = NULL, *prefix = NULL;
    pthread_t th[S3_LIST_WORKERS];
    unsigned nth = 0;
    sio_code rc;

    memset(&j, 0, sizeof j);
    rc = split_s3(url, &bucket, &prefix, err);
    if (rc)
        return rc;
    rc = ensure_creds(s3, err);
    if (rc)
        goto out;
    j.s3 = s3;
    j.bucket = bucket;
    j.out = out;
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    pthread_mutex_lock(&j.mu);
    rc = push_prefix(&j, prefix);
    pthread_mutex_unlock(&j.mu);
    if (rc) {
        *err = j.err;
        goto destroy;
    }
    for (unsigned i = 1; i < S3_LIST_WORKERS; i++)
        if (pthread_create(&th[nth], NULL, list_worker, &j) == 0)
            nth++;
    list_worker(&j);
    for (unsigned i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (j.failed) {
        rc = j.err.code ? j.err.code : SIO_ERR_IO;
        if (err)
            *err = j.err;
    }
    SIO_LOG(&s3->log, SIO_LOG_INFO,
            "event=s3_listed bucket=%s prefixes=%zu objects=%zu rc=%s", bucket,
            j.visited, out->n, sio_strerror(rc));
destroy:
    for (size_t i = 0; i < j.qn; i++)
        free(j.queue[i]);
    free(j.queue);
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
out:
    free(bucket);
    free(prefix);
    return rc;
}

/* Life -------------------------------------------------------------------- */

static void s3_destroy(void *ctx)
{
    s3_ctx *s3 = ctx;
    if (!s3)
        return;
    sio_creds_destroy(s3->creds);
    sio_url_free(&s3->ep);
    free(s3);
}

static sio_code s3_create(sio_io *io, void **ctx, sio_error *err)
{
    const sio_io_config *cfg = sio_io_get_config(io);
    s3_ctx *s3 = calloc(1, sizeof *s3);
    const char *region, *ep, *style, *nosign;
    char epbuf[600];
    int addressing = cfg->s3_addressing;
    sio_code rc = SIO_OK;

    *ctx = NULL;
    if (!s3)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    s3->f = sio_io_fetch(io);
    s3->log = cfg->log;
    region = cfg->s3_region ? cfg->s3_region
           : env("AWS_REGION") ? env("AWS_REGION")
           : env("AWS_DEFAULT_REGION") ? env("AWS_DEFAULT_REGION")
                                       : "us-east-1";
    if (strlen(region) > S3_REGION_MAX || !*region) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "bad S3 region");
        goto out;
    }
    for (const char *p = region; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-') {
            rc = sio_seterr(err, SIO_ERR_INVALID, "bad S3 region \"%s\"",
                            region);
            goto out;
        }
    snprintf(s3->region, sizeof s3->region, "%s", region);
    ep = cfg->s3_endpoint ? cfg->s3_endpoint
       : env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3")
                                    : env("AWS_ENDPOINT_URL");
    s3->custom_endpoint = ep != NULL;
    if (!ep) {
        snprintf(epbuf, sizeof epbuf, "https://s3.%s.amazonaws.com", region);
        ep = epbuf;
    }
    rc = sio_url_parse(ep, &s3->ep, err);
    if (rc)
        goto out;
    if ((strcmp(s3->ep.scheme, "http") != 0 &&
         strcmp(s3->ep.scheme, "https") != 0) ||
        strcmp(s3->ep.path, "/") != 0 || s3->ep.userinfo) {
        char shown[512];
        sio_url_redact(ep, shown, sizeof shown);
        rc = sio_seterr(err, SIO_ERR_INVALID, "S3 endpoint must be "
                        "http(s)://host[:port]: %s", shown);
        goto out;
    }
    if (addressing == SIO_S3_ADDRESSING_AUTO) {
        style = env("AWS_S3_ADDRESSING_STYLE");
        if (style && strcasecmp(style, "path") == 0)
            addressing = SIO_S3_ADDRESSING_PATH;
        else if (style && strcasecmp(style, "virtual") == 0)
            addressing = SIO_S3_ADDRESSING_VIRTUAL;
        else if (s3->custom_endpoint &&
                 sio_url_host_is_local_or_ip(s3->ep.host))
            addressing = SIO_S3_ADDRESSING_PATH;
        else
            addressing = SIO_S3_ADDRESSING_VIRTUAL;
    }
    s3->path_style = addressing == SIO_S3_ADDRESSING_PATH || s3->ep.ipv6;
    nosign = env("AWS_NO_SIGN_REQUEST");
    s3->anonymous = cfg->s3_anonymous ||
                    (nosign && (strcasecmp(nosign, "true") == 0 ||
                                strcmp(nosign, "1") == 0 ||
                                strcasecmp(nosign, "yes") == 0));
    if (!s3->anonymous) {
        sio_creds_config cc;
        memset(&cc, 0, sizeof cc);
        cc.fetch = s3->f;
        cc.profile = cfg->aws_profile;
        cc.region = s3->region;
        cc.sts_endpoint = cfg->sts_endpoint;
        cc.log = cfg->log;
        rc = sio_creds_create(&cc, &s3->creds, err);
        if (rc)
            goto out;
    }
    *ctx = s3;
    s3 = NULL;
out:
    s3_destroy(s3);
    return rc;
}

const sio_backend_ops sio_backend_s3 = {
    .name = "s3",
    .matches = s3_matches,
    .list = s3_list,
    .stat = s3_stat,
    .is_container = s3_is_container,
    .open = s3_open,
    .open_range = s3_open_range,
    .head = s3_head,
    .destroy = s3_destroy,
    .create = s3_create,
};
