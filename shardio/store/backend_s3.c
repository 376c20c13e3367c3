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
 * shared queue that the listing threads drain concurrently, each
 * following continuation tokens, and the key range of one prefix is split
 * between threads that would otherwise sit idle (start-after at split
 * points, work stealing as in Dataflux; see "Listing" below). The whole
 * prefix is listed (recursively); the caller filters shard names and sorts.
 * sio_io_config.s3_list_workers (1..64, default 8) sets the number of
 * listing threads, s3_list_split turns range splitting off; left at 0 they
 * fall back to SHARDCAST_S3_LIST_WORKERS / SHARDCAST_S3_LIST_SPLIT (the
 * server sets both from its settings, shardcastd --help).
 *
 * Errors: the backend registers with the engine its reading of S3 <Error>
 * bodies (sio_s3_classify): throttling codes (SlowDown, ...) lower the
 * concurrency and are retried, transient ones (RequestTimeout, ...) are
 * retried, and every code and message is named in errors.
 *
 * Threading: the context is immutable after create (the credential
 * provider and the engine lock for themselves). Ownership: the context
 * owns the provider; each stream owns its target (bucket, key).
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "store/creds.h"
#include "store/fetch.h"
#include "store/s3xml.h"
#include "store/url.h"

/* Threads that list at once (sub-prefixes and ranges of one prefix): each
 * holds one request in flight; the engine's limits apply on top.
 * SIO_S3_LIST_WORKERS_DEFAULT, at most SIO_S3_LIST_WORKERS_MAX (shardio.h). */
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
    unsigned list_workers; /* listing threads */
    int list_split;      /* split a prefix's key range between them */
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

/*
 * A listing is a set of work items drained by the listing threads. An item
 * is a range of one level: the entries (keys and CommonPrefixes, relative
 * to the level's prefix) e with lo < e <= hi, listed with delimiter '/',
 * start-after = prefix + lo (none when lo is "") and continuation tokens.
 * A level starts as one item (lo "", hi none); every CommonPrefix found is
 * a new level. A lister that has just read a page while threads sit idle
 * and the queue is empty splits the rest of its range (last entry seen,
 * hi] at points between the two and queues the upper pieces; it keeps the
 * lowest. Entries outside (lo, hi] and repeats (a key not above the
 * largest key the range has had, a CommonPrefix that was on its previous
 * page) are dropped, so the ranges of a level partition its entries
 * whatever a page holds.
 *
 * Split points contain no '/': for any CommonPrefix C, C and every key
 * under C then compare alike with a point, so a sub-prefix belongs to
 * exactly one range. Points are interpolated between the bounds read as
 * numbers in the base of the level's alphabet (the code points seen in its
 * entries), which keeps them valid UTF-8 made of characters the keys use.
 *
 * A store that ignores start-after answers a split range with entries at
 * or below lo. The first split of a listing waits for that answer before
 * any other split is made; when start-after was ignored, the range gives
 * its keys back to the one it was split from (or, when that one has ended,
 * lists on alone, dropping what is not its own), and nothing is split any
 * more: the listing goes on serially.
 */

/* Most pieces one split makes. */
#define S3_LIST_SPLIT_WAYS 16u
/* Most splits in one listing (beyond: no more splitting, not an error). */
#define S3_LIST_SPLITS_MAX 100000u
/* Consecutive pages of a range that bring nothing new (empty, or only
 * entries already seen) before the store is judged to loop. */
#define S3_LIST_STUCK_MAX 100u
/* Distinct non-ASCII code points a level's alphabet keeps. */
#define S3_LIST_WIDE_MAX 512u
/* Longest range bound, in code points (keys are at most 1024 bytes). */
#define S3_LIST_DIGITS_MAX (SIO_S3XML_KEY_MAX + 2u)

typedef struct list_level {
    char *prefix;       /* e.g. "train/"; "" for the bucket's root */
    size_t plen;
    uint64_t ascii[2];  /* printable ASCII code points seen (not '/') */
    uint32_t *wide;     /* sorted non-ASCII code points seen */
    size_t nwide;
    unsigned refs;      /* items of the level */
} list_level;

typedef struct list_item {
    list_level *lv;
    char *lo;           /* exclusive lower bound, relative; "": the start */
    char *hi;           /* inclusive upper bound, relative; NULL: none */
    struct list_item *parent; /* split from it before start-after was
                                 known to work: it may take this range back */
    unsigned refs;
    int done;           /* its lister has finished with it */
    int probe;          /* its first answer tells whether start-after works */
} list_item;

typedef struct list_job {
    s3_ctx *s3;
    const char *bucket;
    sio_objlist *out;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    list_item **queue;
    size_t qn, qcap, visited, splits, pages;
    unsigned busy, idle;
    int split_on;       /* range splitting allowed */
    int sa;             /* start-after: 0 not known yet, 1 works, -1 not */
    int probing;        /* a probe range is out */
    int failed;
    sio_error err;
} list_job;

/* UTF-8 ------------------------------------------------------------------ */

/* Decode one code point of s; its length, or 0 for an invalid sequence. */
static size_t utf8_dec(const unsigned char *s, uint32_t *cp)
{
    uint32_t c = s[0], min;
    size_t n;
    if (c < 0x80) {
        *cp = c;
        return c ? 1 : 0;
    }
    if ((c & 0xE0) == 0xC0) {
        n = 2, c &= 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, c &= 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, c &= 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return n;
}

static size_t utf8_enc(uint32_t c, char *o)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* Decode s into at most cap code points; the count, or SIZE_MAX when s is
 * not valid UTF-8 or too long. */
static size_t utf8_decode_all(const char *s, uint32_t *cps, size_t cap)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    while (*p) {
        size_t l;
        if (n == cap || (l = utf8_dec(p, &cps[n])) == 0)
            return SIZE_MAX;
        p += l;
        n++;
    }
    return n;
}

/* Characters a split point may be made of beyond the bounds' own: no
 * controls, no '/', nothing XML 1.0 cannot carry. */
static int alpha_ok(uint32_t c)
{
    return c >= 0x20 && c != '/' && c != 0x7F && c != 0xFFFE && c != 0xFFFF;
}

/* Learn the code points of a relative entry (job lock held). */
static void level_learn(list_level *lv, const char *rel)
{
    const unsigned char *p = (const unsigned char *)rel;
    while (*p) {
        uint32_t c;
        size_t l = utf8_dec(p, &c);
        if (l == 0)
            return;
        p += l;
        if (!alpha_ok(c))
            continue;
        if (c < 0x80) {
            lv->ascii[c >> 6] |= (uint64_t)1 << (c & 63);
            continue;
        }
        size_t a = 0, b = lv->nwide;
        while (a < b) {
            size_t m = (a + b) / 2;
            if (lv->wide[m] < c)
                a = m + 1;
            else
                b = m;
        }
        if ((a < lv->nwide && lv->wide[a] == c) ||
            lv->nwide == S3_LIST_WIDE_MAX)
            continue;
        if (!lv->wide) {
            lv->wide = malloc(S3_LIST_WIDE_MAX * sizeof *lv->wide);
            if (!lv->wide)
                return; /* splits get coarser, nothing else */
        }
        memmove(lv->wide + a + 1, lv->wide + a,
                (lv->nwide - a) * sizeof *lv->wide);
        lv->wide[a] = c;
        lv->nwide++;
    }
}

/* Split points ------------------------------------------------------------ */

/*
 * Range bounds are read as numbers of L digits in base n, the digits being
 * the ranks of their code points in a sorted alphabet of n code points
 * (shorter strings padded with the smallest one). Digit 0 of every array
 * is an overflow digit, so an array has L + 1 digits; the order of the
 * numbers is the order of the strings they stand for, truncated to L code
 * points.
 */

/* Growth of the pieces of an unbounded range: piece i spans about
 * S3_LIST_GROWTH^i pages of the page just read. */
#define S3_LIST_GROWTH 4u

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static size_t alpha_index(const uint32_t *al, size_t n, uint32_t c)
{
    size_t a = 0, b = n;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (al[m] < c)
            a = m + 1;
        else
            b = m;
    }
    return a; /* c is in al: the bounds' characters were added */
}

typedef struct digits {
    const uint32_t *al; /* the alphabet */
    int64_t n;          /* its size, the base */
    size_t L;           /* digits 1..L; digit 0 overflows */
} digits;

/* x = the string of code points cp[0..ncp) at L digits. */
static void dg_from(const digits *g, const uint32_t *cp, size_t ncp,
                    int32_t *x)
{
    x[0] = 0;
    for (size_t i = 1; i <= g->L; i++)
        x[i] = i - 1 < ncp
                   ? (int32_t)alpha_index(g->al, (size_t)g->n, cp[i - 1])
                   : 0;
}

/* x = a - b; returns 1 when b > a. */
static int dg_sub(const digits *g, const int32_t *a, const int32_t *b,
                  int32_t *x)
{
    int32_t borrow = 0;
    for (size_t i = g->L + 1; i-- > 0;) {
        int32_t d = a[i] - b[i] - borrow;
        borrow = d < 0;
        x[i] = d < 0 ? d + (int32_t)g->n : d;
    }
    return borrow;
}

/* x = a + b; returns 1 on overflow past digit 0. */
static int dg_add(const digits *g, const int32_t *a, const int32_t *b,
                  int32_t *x)
{
    int64_t carry = 0;
    for (size_t i = g->L + 1; i-- > 0;) {
        int64_t t = (int64_t)a[i] + b[i] + carry;
        x[i] = (int32_t)(t % g->n);
        carry = t / g->n;
    }
    return carry != 0 || x[0] != 0;
}

/* x = a * m / q (m, q small); returns 1 on overflow past digit 0. */
static int dg_muldiv(const digits *g, const int32_t *a, unsigned m,
                     unsigned q, int32_t *x)
{
    int64_t carry = 0, rem;
    for (size_t i = g->L + 1; i-- > 0;) {
        int64_t t = (int64_t)a[i] * m + carry;
        x[i] = (int32_t)(t % g->n);
        carry = t / g->n;
    }
    rem = carry; /* the digit above digit 0 */
    if (rem >= (int64_t)q)
        return 1;
    for (size_t i = 0; i <= g->L; i++) {
        int64_t t = rem * g->n + x[i];
        x[i] = (int32_t)(t / q);
        rem = t % q;
    }
    return 0;
}

/* a >= v (v small)? */
static int dg_at_least(const digits *g, const int32_t *a, uint64_t v)
{
    uint64_t x = 0;
    for (size_t i = 0; i <= g->L; i++) {
        x = x * (uint64_t)g->n + (uint64_t)a[i];
        if (x >= v)
            return 1;
    }
    return 0;
}

static int dg_zero(const digits *g, const int32_t *a)
{
    for (size_t i = 0; i <= g->L; i++)
        if (a[i])
            return 0;
    return 1;
}

/* a / b, roughly (b not zero), saturated at 1e9. */
static double dg_ratio(const digits *g, const int32_t *a, const int32_t *b)
{
    size_t ia = 0, ib = 0;
    double va = 0, vb = 0;
    long ea, eb;
    while (ia <= g->L && a[ia] == 0)
        ia++;
    while (ib <= g->L && b[ib] == 0)
        ib++;
    if (ia > g->L)
        return 0;
    for (size_t i = ia; i <= g->L && i < ia + 4; i++)
        va = va * (double)g->n + a[i];
    for (size_t i = ib; i <= g->L && i < ib + 4; i++)
        vb = vb * (double)g->n + b[i];
    ea = (long)g->L + 1 - (long)(ia + 4 < g->L + 1 ? ia + 4 : g->L + 1);
    eb = (long)g->L + 1 - (long)(ib + 4 < g->L + 1 ? ib + 4 : g->L + 1);
    if (ea - eb > 8)
        return 1e9;
    if (ea - eb < -8)
        return 0;
    double r = va / vb * pow((double)g->n, (double)(ea - eb));
    return r > 1e9 ? 1e9 : r;
}

/* A bound as split_points uses it: a CommonPrefix "x/" (and everything
 * under it) is below "x0" ('/' + 1), and "x0" is below every other entry
 * above "x/"; so from the first '/' on, "x/..." counts as "x0". */
static char *bound_of(const char *s)
{
    char *b = strdup(s), *slash;
    if (b && (slash = strchr(b, '/')) != NULL) {
        slash[0] = '0';
        slash[1] = '\0';
    }
    return b;
}

/*
 * Up to ways-1 split points p1 < p2 < ... with after < p1 and p_last < hi
 * (hi NULL: no bound), none containing '/', each at most maxlen bytes,
 * into pts (malloc'd). after is the largest entry the range has consumed,
 * first the smallest entry of the page just read: (first, after] is what
 * one page spans, the estimate of the keys' density.
 *
 * A bounded range is cut into equal pieces, as many as there are about
 * pages left (at most ways), none when less than two pages are left. An
 * unbounded one (the top of a level, whose end nobody knows) is cut at
 * after + span * 4^i: pieces of about 4, 16, 64 ... pages, the last one
 * unbounded; whichever holds the keys is cut evenly once its own lister
 * has read a page.
 *
 * Returns the number of points (0: no split); out of memory gives none.
 */
static size_t split_points(const list_level *lv, const char *first,
                           const char *after, const char *hi, unsigned ways,
                           size_t maxlen, char **pts)
{
    size_t na, nf, nh = 0, n = 0, got = 0, lmax, dfs, L0;
    uint32_t *ca = NULL, *cf = NULL, *ch = NULL, *al = NULL;
    int32_t *S = NULL, *E = NULL, *F = NULL, *D = NULL, *X = NULL, *P = NULL;
    char *lo = NULL, *fb = NULL, *buf = NULL;
    digits g;

    if (ways < 2)
        return 0;
    lo = bound_of(after);
    fb = bound_of(first);
    ca = malloc(S3_LIST_DIGITS_MAX * sizeof *ca);
    cf = malloc(S3_LIST_DIGITS_MAX * sizeof *cf);
    ch = malloc(S3_LIST_DIGITS_MAX * sizeof *ch);
    al = malloc((128 + S3_LIST_WIDE_MAX + 3 * S3_LIST_DIGITS_MAX) *
                sizeof *al);
    if (!lo || !fb || !ca || !cf || !ch || !al)
        goto out;
    if (strcmp(fb, lo) > 0) {
        free(fb);
        fb = strdup(lo);
        if (!fb)
            goto out;
    }
    if (hi && strcmp(lo, hi) >= 0)
        goto out;
    na = utf8_decode_all(lo, ca, S3_LIST_DIGITS_MAX);
    nf = utf8_decode_all(fb, cf, S3_LIST_DIGITS_MAX);
    if (na == SIZE_MAX || nf == SIZE_MAX)
        goto out;
    if (hi) {
        nh = utf8_decode_all(hi, ch, S3_LIST_DIGITS_MAX);
        if (nh == SIZE_MAX)
            goto out;
    }
    /* The alphabet: what the level has seen and the bounds' characters. */
    for (uint32_t c = 0; c < 128; c++)
        if (lv->ascii[c >> 6] & ((uint64_t)1 << (c & 63)))
            al[n++] = c;
    for (size_t i = 0; i < lv->nwide; i++)
        al[n++] = lv->wide[i];
    for (size_t i = 0; i < na; i++)
        al[n++] = ca[i];
    for (size_t i = 0; i < nf; i++)
        al[n++] = cf[i];
    for (size_t i = 0; i < nh; i++)
        al[n++] = ch[i];
    qsort(al, n, sizeof *al, cmp_u32);
    {
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || al[u - 1] != al[i])
                al[u++] = al[i];
        n = u;
    }
    if (n < 2)
        goto out;
    lmax = (na > nh ? na : nh) + 3;
    if (lmax > maxlen)
        lmax = maxlen;
    if (lmax > S3_LIST_DIGITS_MAX)
        lmax = S3_LIST_DIGITS_MAX;
    S = malloc((lmax + 1) * sizeof *S);
    E = malloc((lmax + 1) * sizeof *E);
    F = malloc((lmax + 1) * sizeof *F);
    D = malloc((lmax + 1) * sizeof *D);
    X = malloc((lmax + 1) * sizeof *X);
    P = malloc((lmax + 1) * sizeof *P);
    buf = malloc(4 * lmax + 1);
    if (!S || !E || !F || !D || !X || !P || !buf)
        goto out;
    g.al = al;
    g.n = (int64_t)n;

    /* L: enough digits for hi - lo >= 2, and for two significant digits
     * of the page's span. */
    for (dfs = 0; dfs < na && dfs < nf && ca[dfs] == cf[dfs]; dfs++)
        ;
    L0 = 1;
    if (hi) {
        for (L0 = 1; L0 <= lmax; L0++) {
            g.L = L0;
            dg_from(&g, ca, na, S);
            dg_from(&g, ch, nh, E);
            if (dg_sub(&g, E, S, D))
                goto out; /* cannot be: lo < hi */
            if (dg_at_least(&g, D, 2))
                break;
        }
        if (L0 > lmax)
            goto out;
    }
    g.L = dfs + 2 > L0 ? dfs + 2 : L0;
    if (g.L > lmax)
        g.L = lmax;
    dg_from(&g, ca, na, S);
    dg_from(&g, cf, nf, F);
    if (hi)
        dg_from(&g, ch, nh, E);
    else {
        memset(E, 0, (g.L + 1) * sizeof *E);
        E[0] = 1; /* n^L: above every string of L digits */
    }
    if (dg_sub(&g, S, F, X) || dg_zero(&g, X)) {
        /* No measurable span: one unit of the last digit. */
        memset(X, 0, (g.L + 1) * sizeof *X);
        X[g.L] = 1;
    }
    if (dg_sub(&g, E, S, D))
        goto out;

    unsigned k = ways;
    if (hi) {
        double pages = dg_ratio(&g, D, X);
        if (pages < 2)
            goto out;
        if (pages < k)
            k = (unsigned)pages;
    }
    for (unsigned j = 1; j < k; j++) {
        size_t bl = 0;
        if (hi) {
            /* P = S + D * j / k */
            if (dg_muldiv(&g, D, j, k, P) || dg_add(&g, S, P, P))
                continue;
        } else {
            /* P = S + X * GROWTH^j */
            int over = 0;
            memcpy(P, X, (g.L + 1) * sizeof *P);
            for (unsigned t = 0; t < j && !over; t++)
                over = dg_muldiv(&g, P, S3_LIST_GROWTH, 1, P);
            if (over || dg_add(&g, S, P, P))
                break; /* past the alphabet's end: the rest is the top */
        }
        for (size_t i = 1; i <= g.L; i++)
            bl += utf8_enc(al[P[i]], buf + bl);
        buf[bl] = '\0';
        if (bl > maxlen || strchr(buf, '/') || strcmp(buf, lo) <= 0 ||
            strcmp(buf, after) <= 0 || (hi && strcmp(buf, hi) >= 0) ||
            (got && strcmp(buf, pts[got - 1]) <= 0))
            continue;
        pts[got] = strdup(buf);
        if (!pts[got])
            break;
        got++;
    }
out:
    free(lo);
    free(fb);
    free(ca);
    free(cf);
    free(ch);
    free(al);
    free(S);
    free(E);
    free(F);
    free(D);
    free(X);
    free(P);
    free(buf);
    return got;
}

/* Items ------------------------------------------------------------------- */

static void item_unref(list_item *it)
{
    while (it && --it->refs == 0) {
        list_item *parent = it->parent;
        if (--it->lv->refs == 0) {
            free(it->lv->prefix);
            free(it->lv->wide);
            free(it->lv);
        }
        free(it->lo);
        free(it->hi);
        free(it);
        it = parent;
    }
}

/* Queue an item (job lock held). On failure the item is freed. */
static sio_code push_item(list_job *j, list_item *it)
{
    if (j->qn == j->qcap) {
        size_t nc = j->qcap ? j->qcap * 2 : 64;
        list_item **nq = realloc(j->queue, nc * sizeof *nq);
        if (!nq) {
            item_unref(it);
            return sio_seterr(&j->err, SIO_ERR_NOMEM, "out of memory");
        }
        j->queue = nq;
        j->qcap = nc;
    }
    j->queue[j->qn++] = it;
    pthread_cond_broadcast(&j->cv);
    return SIO_OK;
}

/* Queue a prefix as a new level (job lock held). */
static sio_code push_prefix(list_job *j, const char *p)
{
    list_level *lv;
    list_item *it;
    if (j->visited >= S3_LIST_PREFIXES_MAX)
        return sio_seterr(&j->err, SIO_ERR_LIMIT,
                          "listing s3://%s/ visits more than %u prefixes",
                          j->bucket, S3_LIST_PREFIXES_MAX);
    lv = calloc(1, sizeof *lv);
    it = calloc(1, sizeof *it);
    if (lv)
        lv->prefix = strdup(p);
    if (it)
        it->lo = strdup("");
    if (!lv || !it || !lv->prefix || !it->lo) {
        if (lv)
            free(lv->prefix);
        free(lv);
        if (it)
            free(it->lo);
        free(it);
        return sio_seterr(&j->err, SIO_ERR_NOMEM, "out of memory");
    }
    lv->plen = strlen(p);
    lv->refs = 1;
    it->lv = lv;
    it->refs = 1;
    j->visited++;
    return push_item(j, it);
}

/* Room for n more items in the queue (job lock held). */
static sio_code reserve_items(list_job *j, size_t n)
{
    if (j->qcap - j->qn >= n)
        return SIO_OK;
    size_t nc = j->qcap ? j->qcap : 64;
    while (nc - j->qn < n)
        nc *= 2;
    list_item **nq = realloc(j->queue, nc * sizeof *nq);
    if (!nq)
        return SIO_ERR_NOMEM;
    j->queue = nq;
    j->qcap = nc;
    return SIO_OK;
}

/* Split the rest of it, (after, it->hi], for the idle threads (job lock
 * held): queue the upper pieces, keep the lowest. first is the smallest
 * entry of the page just read (see split_points). Out of memory only
 * means no split. */
static void maybe_split(list_job *j, list_item *it, const char *first,
                        const char *after)
{
    sio_io_stats st;
    unsigned ways, want;
    char *pts[S3_LIST_SPLIT_WAYS], *his[S3_LIST_SPLIT_WAYS];
    list_item *nts[S3_LIST_SPLIT_WAYS];
    char *mine;
    size_t np, maxlen, i;

    if (!j->split_on || j->sa < 0 || j->probing || j->failed ||
        j->splits >= S3_LIST_SPLITS_MAX || j->idle <= j->qn ||
        it->lv->plen >= SIO_S3XML_KEY_MAX)
        return;
    want = j->idle - (unsigned)j->qn;
    /* Throttling: no more listers than the engine lets run at once. */
    sio_fetch_get_stats(j->s3->f, &st);
    if (st.concurrency <= j->busy)
        return;
    if (want > st.concurrency - j->busy)
        want = st.concurrency - j->busy;
    if (j->sa == 0)
        want = 1; /* one probe first: does the store honour start-after? */
    ways = want + 1 > S3_LIST_SPLIT_WAYS ? S3_LIST_SPLIT_WAYS : want + 1;
    if (strcmp(after, it->lo) < 0)
        after = it->lo;
    if (strcmp(first, after) > 0)
        first = after;
    maxlen = SIO_S3XML_KEY_MAX - it->lv->plen;
    np = split_points(it->lv, first, after, it->hi, ways, maxlen, pts);
    if (np == 0)
        return;
    /* Piece i is (pts[i], pts[i+1]], the last one up to it->hi; the lister
     * keeps (lo, pts[0]]. Everything is allocated before anything
     * changes. */
    memset(his, 0, sizeof his);
    memset(nts, 0, sizeof nts);
    mine = strdup(pts[0]);
    int ok = mine && reserve_items(j, np) == SIO_OK;
    for (i = 0; ok && i < np; i++) {
        const char *h = i + 1 < np ? pts[i + 1] : it->hi;
        nts[i] = calloc(1, sizeof *nts[i]);
        if (h)
            his[i] = strdup(h);
        ok = nts[i] && (!h || his[i]);
    }
    if (!ok) {
        free(mine);
        for (i = 0; i < np; i++) {
            free(pts[i]);
            free(his[i]);
            free(nts[i]);
        }
        return;
    }
    for (i = np; i-- > 0;) {
        list_item *nt = nts[i];
        nt->lv = it->lv;
        nt->lo = pts[i];
        nt->hi = his[i];
        nt->refs = 1;
        it->lv->refs++;
        if (j->sa == 0) {
            nt->probe = 1;
            nt->parent = it;
            it->refs++;
            j->probing = 1;
        }
        j->queue[j->qn++] = nt;
        j->splits++;
    }
    SIO_LOG(&j->s3->log, SIO_LOG_DEBUG,
            "event=s3_list_split prefix=%s after=%s first=%s last=%s "
            "hi=%s pieces=%zu", it->lv->prefix, after, pts[0], pts[np - 1],
            it->hi ? it->hi : "(none)", np);
    free(it->hi);
    it->hi = mine;
    pthread_cond_broadcast(&j->cv);
}

/* The key relative to the level, or NULL when it is not under it. */
static const char *relative(const list_level *lv, const char *key)
{
    return strncmp(key, lv->prefix, lv->plen) == 0 ? key + lv->plen : NULL;
}

/* Sorted copies of a page's CommonPrefixes (relative), to recognise the
 * ones a store sends again on the next page. */
typedef struct prefix_set {
    char **v;
    size_t n;
} prefix_set;

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void prefix_set_free(prefix_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static int prefix_set_has(const prefix_set *s, const char *p)
{
    return s->n && bsearch(&p, s->v, s->n, sizeof *s->v, cmp_strp) != NULL;
}

/* The page's prefixes under lv into *s (replacing it). */
static sio_code prefix_set_load(prefix_set *s, const list_level *lv,
                                const sio_s3_list_page *page)
{
    prefix_set_free(s);
    if (!page->nprefixes)
        return SIO_OK;
    s->v = malloc(page->nprefixes * sizeof *s->v);
    if (!s->v)
        return SIO_ERR_NOMEM;
    for (size_t i = 0; i < page->nprefixes; i++) {
        const char *r = relative(lv, page->prefixes[i]);
        if (!r)
            continue;
        s->v[s->n] = strdup(r);
        if (!s->v[s->n])
            return SIO_ERR_NOMEM;
        s->n++;
    }
    qsort(s->v, s->n, sizeof *s->v, cmp_strp);
    return SIO_OK;
}

/* Replace *dst by a copy of src when src is larger (or *dst is NULL). */
static sio_code raise_mark(char **dst, const char *src)
{
    char *c;
    if (!src || (*dst && strcmp(src, *dst) <= 0))
        return SIO_OK;
    c = strdup(src);
    if (!c)
        return SIO_ERR_NOMEM;
    free(*dst);
    *dst = c;
    return SIO_OK;
}

/*
 * List one range of one level, every page. Repeats are dropped: a key not
 * above the largest key this range has had (pages follow each other in key
 * order), a CommonPrefix that was on the previous page (s3rver sends a
 * prefix again when its page ended before the objects that sort after the
 * prefix's directory). Nothing else is assumed of the order within a page.
 */
static sio_code list_range(list_job *j, list_item *it, sio_error *err)
{
    list_level *lv = it->lv;
    char *token = NULL, *start = NULL;
    char *seen = NULL;     /* the largest entry had: what the range has
                              consumed, where a split may start */
    char *seen_key = NULL; /* the largest key had */
    prefix_set prev = {NULL, 0};
    char shown[600];
    sio_code rc = SIO_OK;
    s3_target t = {j->s3, (char *)(uintptr_t)j->bucket, NULL, NULL, 0};
    size_t blen = strlen(j->bucket);
    unsigned stuck = 0;
    int probe = it->probe;

    snprintf(shown, sizeof shown, "s3://%s/%s", j->bucket, lv->prefix);
    if (it->lo[0]) {
        size_t ll = strlen(it->lo);
        start = malloc(lv->plen + ll + 1);
        if (!start)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        memcpy(start, lv->prefix, lv->plen);
        memcpy(start + lv->plen, it->lo, ll + 1);
    }
    for (;;) {
        sio_sigv4_pair q[7];
        size_t nq = 0;
        sio_fetch_request req;
        sio_fetch_response resp;
        sio_s3_list_page page;
        const char *top = NULL;    /* the largest entry of the page */
        const char *bottom = NULL; /* and the smallest */
        const char *top_key = NULL;
        int beyond = 0, below = 0, handed_back = 0, advanced = 0, kept = 0;

        q[nq].name = "list-type";
        q[nq++].value = "2";
        q[nq].name = "delimiter";
        q[nq++].value = "/";
        q[nq].name = "max-keys";
        q[nq++].value = S3_LIST_PAGE;
        q[nq].name = "encoding-type";
        q[nq++].value = "url";
        q[nq].name = "prefix";
        q[nq++].value = lv->prefix;
        if (token) {
            q[nq].name = "continuation-token";
            q[nq++].value = token;
        } else if (start) {
            q[nq].name = "start-after";
            q[nq++].value = start;
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

        /* What the page spans, whether it brings anything new, and whether
         * the store went below the start-after it was given. */
        for (size_t i = 0; i < page.n + page.nprefixes; i++) {
            int is_key = i < page.n;
            const char *e = is_key ? page.keys[i] : page.prefixes[i - page.n];
            const char *r = relative(lv, e);
            if (!r)
                continue;
            if (!top || strcmp(r, top) > 0)
                top = r;
            if (!bottom || strcmp(r, bottom) < 0)
                bottom = r;
            if (is_key && (!top_key || strcmp(r, top_key) > 0))
                top_key = r;
            if (is_key ? !seen_key || strcmp(r, seen_key) > 0
                       : !prefix_set_has(&prev, r))
                advanced = 1;
            if (start && strcmp(r, it->lo) <= 0)
                below = 1;
        }

        pthread_mutex_lock(&j->mu);
        j->pages++;
        if (probe) {
            /* The probe's first answer decides: a store that ignored
             * start-after answers from the level's start, where the range
             * this one was split from has seen entries. */
            probe = 0;
            j->probing = 0;
            if (!below) {
                j->sa = 1;
            } else {
                j->sa = -1;
                SIO_LOG(&j->s3->log, SIO_LOG_WARN,
                        "event=s3_list_serial bucket=%s reason=start-after "
                        "ignored", j->bucket);
                if (it->parent && !it->parent->done) {
                    /* The range it came from lists on to our end. */
                    char *h = it->hi ? strdup(it->hi) : NULL;
                    if (!it->hi || h) {
                        free(it->parent->hi);
                        it->parent->hi = h;
                        handed_back = 1;
                    }
                }
            }
        } else if (below && j->sa >= 0) {
            /* Start-after worked before and not now: split no more. */
            j->sa = -1;
            SIO_LOG(&j->s3->log, SIO_LOG_WARN,
                    "event=s3_list_serial bucket=%s reason=start-after "
                    "ignored", j->bucket);
        }
        for (size_t i = 0; !handed_back && i < page.n + page.nprefixes;
             i++) {
            int is_key = i < page.n;
            const char *e = is_key ? page.keys[i] : page.prefixes[i - page.n];
            const char *r = relative(lv, e);
            if (!r || strcmp(r, it->lo) <= 0)
                continue; /* not this range's */
            if (is_key ? seen_key && strcmp(r, seen_key) <= 0
                       : prefix_set_has(&prev, r))
                continue; /* had it already */
            if (it->hi && strcmp(r, it->hi) > 0) {
                beyond |= is_key ? 2 : 1;
                continue;
            }
            kept = 1;
            level_learn(lv, r);
            if (!is_key) {
                /* S3 never returns the prefix itself; a server that does
                 * would loop forever without this check. */
                if (r[0] == '\0')
                    continue;
                rc = push_prefix(j, e);
                if (rc) {
                    *err = j->err;
                    break;
                }
                continue;
            }
            size_t kl = strlen(e);
            if (kl == 0 || e[kl - 1] == '/')
                continue; /* "directory" marker objects */
            char *u = malloc(blen + kl + 7);
            if (!u) {
                rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
                break;
            }
            snprintf(u, blen + kl + 7, "s3://%s/%s", j->bucket, e);
            rc = sio_objlist_add(j->out, u, page.sizes[i]);
            free(u);
            if (rc) {
                sio_seterr(err, rc, "listing %s: %s", shown, sio_strerror(rc));
                break;
            }
        }
        if (rc == SIO_OK &&
            (raise_mark(&seen, top) || raise_mark(&seen_key, top_key) ||
             prefix_set_load(&prev, lv, &page)))
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        /* Past hi: a key above it ends the range (keys come in order); a
         * CommonPrefix above it only with nothing of the range beside it
         * (s3rver sends a prefix early when its directory's name is a
         * prefix of file names that sort before it as keys). */
        if (beyond & 2 || (beyond && !kept))
            beyond = 1;
        else
            beyond = 0;
        if (rc == SIO_OK && !handed_back && page.truncated && !beyond) {
            if (!page.next_token || !page.next_token[0]) {
                rc = sio_seterr(err, SIO_ERR_FORMAT, "listing %s: truncated "
                                "page without NextContinuationToken", shown);
            } else if (token && strcmp(token, page.next_token) == 0) {
                rc = sio_seterr(err, SIO_ERR_FORMAT, "listing %s: the store "
                                "sent the same continuation token again",
                                shown);
            } else if (!advanced && ++stuck > S3_LIST_STUCK_MAX) {
                rc = sio_seterr(err, SIO_ERR_FORMAT, "listing %s: %u pages "
                                "in a row brought no new entry", shown,
                                stuck - 1);
            } else {
                if (advanced)
                    stuck = 0;
                free(token);
                token = page.next_token;
                page.next_token = NULL;
                if (seen && bottom)
                    maybe_split(j, it, bottom, seen);
            }
        } else {
            free(token);
            token = NULL;
        }
        if (rc || !token)
            it->done = 1;
        pthread_mutex_unlock(&j->mu);
        sio_s3_list_page_free(&page);
        if (rc || !token)
            break;
    }
    if (rc) {
        pthread_mutex_lock(&j->mu);
        it->done = 1;
        if (probe)
            j->probing = 0; /* it failed before its answer */
        pthread_mutex_unlock(&j->mu);
    }
    free(token);
    free(seen);
    free(seen_key);
    prefix_set_free(&prev);
    free(start);
    return rc;
}

static void *list_worker(void *arg)
{
    list_job *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->qn == 0 && j->busy > 0 && !j->failed) {
            j->idle++;
            pthread_cond_wait(&j->cv, &j->mu);
            j->idle--;
        }
        if (j->failed || j->qn == 0)
            break;
        list_item *it = j->queue[--j->qn];
        j->busy++;
        pthread_mutex_unlock(&j->mu);
        sio_error e;
        sio_code rc = list_range(j, it, &e);
        pthread_mutex_lock(&j->mu);
        item_unref(it);
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
    pthread_t th[SIO_S3_LIST_WORKERS_MAX];
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
    j.split_on = s3->list_split;
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    pthread_mutex_lock(&j.mu);
    rc = push_prefix(&j, prefix);
    pthread_mutex_unlock(&j.mu);
    if (rc) {
        *err = j.err;
        goto destroy;
    }
    for (unsigned i = 1; i < s3->list_workers; i++)
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
            "event=s3_listed bucket=%s prefixes=%zu objects=%zu pages=%zu "
            "splits=%zu start_after=%s rc=%s", bucket, j.visited, out->n,
            j.pages, j.splits,
            j.sa > 0 ? "ok" : j.sa < 0 ? "ignored" : "untried",
            sio_strerror(rc));
destroy:
    for (size_t i = 0; i < j.qn; i++)
        item_unref(j.queue[i]);
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

/* The listing threads and range splitting: the io's config, else the
 * environment, else the defaults. */
static sio_code list_knobs(const sio_io_config *cfg, s3_ctx *s3,
                           sio_error *err)
{
    const char *w = env("SHARDCAST_S3_LIST_WORKERS");
    const char *sp = env("SHARDCAST_S3_LIST_SPLIT");
    s3->list_workers = SIO_S3_LIST_WORKERS_DEFAULT;
    s3->list_split = 1;
    if (cfg->s3_list_workers) {
        if (cfg->s3_list_workers > SIO_S3_LIST_WORKERS_MAX)
            return sio_seterr(err, SIO_ERR_INVALID,
                              "s3_list_workers %u above %u",
                              cfg->s3_list_workers, SIO_S3_LIST_WORKERS_MAX);
        s3->list_workers = cfg->s3_list_workers;
    } else if (w) {
        char *end;
        unsigned long v = strtoul(w, &end, 10);
        if (*end || v < 1 || v > SIO_S3_LIST_WORKERS_MAX)
            return sio_seterr(err, SIO_ERR_INVALID,
                              "SHARDCAST_S3_LIST_WORKERS must be 1..%u",
                              SIO_S3_LIST_WORKERS_MAX);
        s3->list_workers = (unsigned)v;
    }
    switch (cfg->s3_list_split) {
    case SIO_S3_LIST_SPLIT_ON: return SIO_OK;
    case SIO_S3_LIST_SPLIT_OFF: s3->list_split = 0; return SIO_OK;
    case SIO_S3_LIST_SPLIT_AUTO: break;
    default:
        return sio_seterr(err, SIO_ERR_INVALID, "bad s3_list_split %d",
                          cfg->s3_list_split);
    }
    if (!sp)
        return SIO_OK;
    if (strcmp(sp, "0") == 0 || strcasecmp(sp, "false") == 0 ||
        strcasecmp(sp, "off") == 0) {
        s3->list_split = 0;
        return SIO_OK;
    }
    if (strcmp(sp, "1") == 0 || strcasecmp(sp, "true") == 0 ||
        strcasecmp(sp, "on") == 0)
        return SIO_OK;
    return sio_seterr(err, SIO_ERR_INVALID,
                      "SHARDCAST_S3_LIST_SPLIT must be 0 or 1");
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

/* The engine's classifier of error bodies (creds.h): an S3 <Error>
 * document names a code and message; some codes mean retry. */
void sio_s3_classify(long status, const char *body, size_t len,
                     sio_fetch_verdict *v)
{
    (void)status; /* the engine judged the status already */
    (void)sio_s3xml_parse_error(body, len, v->code, sizeof v->code,
                                v->message, sizeof v->message);
    if (v->code[0] && s3_code_retryable(v->code, &v->throttle))
        v->retry = 1;
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
    sio_fetch_set_classifier(s3->f, sio_s3_classify);
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
    rc = list_knobs(cfg, s3, err);
    if (rc)
        goto out;
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
