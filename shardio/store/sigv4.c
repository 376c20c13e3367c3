/*
 * sigv4.c — AWS Signature Version 4 (AWS4-HMAC-SHA256) request signing.
 *
 * Builds the canonical request, the string to sign, the signing key and the
 * signature of one request, for the Authorization header or for a presigned
 * URL, and the encoded path+query that goes on the wire, so that the bytes
 * sent are the bytes signed. The rules are in sigv4.h.
 *
 * Threading: no state outside the call; any number of threads may sign at
 * once. Ownership: inputs are borrowed for the call; every output string is
 * malloc'd and belongs to the sio_sigv4_result. Secrets: the secret key is
 * only copied into the "AWS4"+secret stack buffer, which is wiped, as are
 * the derived keys; no message quotes a credential or a header value.
 */
#include "store/sigv4.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "store/store_int.h"

/* No string the signer builds may exceed this. The input limits of sigv4.h
 * bound the worst case (64 headers and 64 query pairs of 8 KiB, each byte
 * encoded as 3) to about 2.5 MiB, so valid input never reaches it; it is a
 * backstop against an arithmetic slip turning into unbounded growth. */
#define OUT_MAX (4u << 20)
/* Longest method name accepted ("OPTIONS" is 7). */
#define METHOD_MAX 32u
#define ALGORITHM "AWS4-HMAC-SHA256"

/* ------------------------------------------------------------------ */
/* A growable string with a maximum.                                   */

typedef struct buf {
    char *p;
    size_t n, cap, max;
} buf;

static void buf_init(buf *b, size_t max)
{
    b->p = NULL;
    b->n = b->cap = 0;
    b->max = max;
}

/* Free the storage, wiping it first (it may hold a session token). */
static void buf_free(buf *b)
{
    if (b->p)
        OPENSSL_clear_free(b->p, b->cap);
    buf_init(b, b->max);
}

static sio_code buf_add(buf *b, const void *data, size_t len)
{
    if (len > b->max - b->n)
        return SIO_ERR_LIMIT;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1)
            cap *= 2;
        if (cap > b->max + 1)
            cap = b->max + 1;
        /* Grow by copy so that the old block can be wiped. */
        char *p = malloc(cap);
        if (!p)
            return SIO_ERR_NOMEM;
        if (b->p) {
            memcpy(p, b->p, b->n);
            OPENSSL_clear_free(b->p, b->cap);
        }
        b->p = p;
        b->cap = cap;
    }
    if (len)
        memcpy(b->p + b->n, data, len);
    b->n += len;
    b->p[b->n] = '\0';
    return SIO_OK;
}

static sio_code buf_str(buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

static sio_code buf_ch(buf *b, char c)
{
    return buf_add(b, &c, 1);
}

/* Hand the string over (never NULL on SIO_OK: an empty buffer gives ""). */
static sio_code buf_take(buf *b, char **out)
{
    sio_code rc = SIO_OK;
    if (!b->p)
        rc = buf_add(b, "", 0);
    if (rc == SIO_OK) {
        *out = b->p;
        buf_init(b, b->max);
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* Encoding and hashing                                                */

static int is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

static sio_code encode_into(buf *b, const char *in, size_t len, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    sio_code rc = SIO_OK;
    size_t i = 0;
    while (i < len && rc == SIO_OK) {
        /* Copy the longest run that needs no escaping in one go. */
        size_t j = i;
        while (j < len && (is_unreserved((unsigned char)in[j]) ||
                           (keep_slash && in[j] == '/')))
            j++;
        if (j > i) {
            rc = buf_add(b, in + i, j - i);
            i = j;
            continue;
        }
        unsigned char c = (unsigned char)in[i++];
        char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
        rc = buf_add(b, esc, 3);
    }
    return rc;
}

sio_code sio_sigv4_uri_encode(const char *in, size_t len, int keep_slash,
                              size_t max_out, char **out, sio_error *err)
{
    buf b;
    sio_code rc;
    buf_init(&b, max_out);
    *out = NULL;
    rc = encode_into(&b, in, len, keep_slash);
    if (rc == SIO_OK)
        rc = buf_take(&b, out);
    buf_free(&b);
    if (rc == SIO_ERR_LIMIT)
        return sio_seterr(err, rc, "sigv4: encoded text longer than %zu bytes",
                          max_out);
    if (rc != SIO_OK)
        return sio_seterr(err, rc, "sigv4: out of memory");
    return SIO_OK;
}

static void to_hex(const unsigned char *d, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n] = '\0';
}

sio_code sio_sigv4_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    hex[0] = '\0';
    if (!EVP_Digest(data ? data : "", len, md, &mdlen, EVP_sha256(), NULL) ||
        mdlen != 32)
        return SIO_ERR_NOMEM; /* OpenSSL fails only on allocation */
    to_hex(md, 32, hex);
    return SIO_OK;
}

/* HMAC-SHA256(key, msg) into out[32]. */
static sio_code hmac256(const void *key, size_t keylen, const char *msg,
                        size_t msglen, unsigned char out[32])
{
    unsigned int outlen = 0;
    if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg,
              msglen, out, &outlen) ||
        outlen != 32)
        return SIO_ERR_NOMEM;
    return SIO_OK;
}

/* ------------------------------------------------------------------ */
/* Input checks                                                        */

/* RFC 9110 token characters (header names, methods). */
static int is_tchar(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int all_tchar(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!is_tchar((unsigned char)*s))
            return 0;
    return 1;
}

/* No control bytes but HT (CR and LF would split a header line). */
static int no_ctl(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

/* Visible ASCII only, and none of the credential scope's separators. */
static int key_chars_ok(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= 0x20 || c >= 0x7f || c == '/' || c == ',' || c == '=')
            return 0;
    }
    return 1;
}

static int scope_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SIO_SIGV4_SCOPE_MAX)
        return 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

static int amz_date_ok(const char *s)
{
    if (strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z')
        return 0;
    for (int i = 0; i < 15; i++)
        if (i != 8 && (s[i] < '0' || s[i] > '9'))
            return 0;
    return 1;
}

static int payload_hash_ok(const char *s)
{
    if (strcmp(s, SIO_SIGV4_UNSIGNED_PAYLOAD) == 0)
        return 1;
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

/* Header names the signer sets itself. */
static int reserved_header(const char *name)
{
    static const char *const names[] = {"host", "x-amz-date",
                                        "x-amz-content-sha256",
                                        "x-amz-security-token",
                                        "authorization"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(name, names[i]) == 0)
            return 1;
    return 0;
}

static sio_code check_request(const sio_sigv4_request *req,
                              const sio_sigv4_creds *creds, sio_error *err)
{
    if (!req || !creds)
        return sio_seterr(err, SIO_ERR_INVALID, "sigv4: no request");
    if (!req->method || strlen(req->method) > METHOD_MAX ||
        !all_tchar(req->method))
        return sio_seterr(err, SIO_ERR_INVALID, "sigv4: bad method");
    if (!req->host || !*req->host || !key_chars_ok(req->host) ||
        strchr(req->host, '@'))
        return sio_seterr(err, SIO_ERR_INVALID, "sigv4: bad host");
    if (strlen(req->host) > SIO_SIGV4_HOST_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "sigv4: host longer than %u",
                          SIO_SIGV4_HOST_MAX);
    if (!req->path || req->path[0] != '/')
        return sio_seterr(err, SIO_ERR_INVALID,
                          "sigv4: path must start with '/'");
    if (strlen(req->path) > SIO_SIGV4_PATH_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "sigv4: path longer than %u",
                          SIO_SIGV4_PATH_MAX);
    if ((req->flags & SIO_SIGV4_PATH_ENCODED) &&
        (!no_ctl(req->path) || strpbrk(req->path, "?#")))
        return sio_seterr(err, SIO_ERR_INVALID,
                          "sigv4: encoded path holds a control byte, '?' or '#'");
    if (req->nquery > SIO_SIGV4_QUERY_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "sigv4: more than %u query pairs",
                          SIO_SIGV4_QUERY_MAX);
    if (req->nquery && !req->query)
        return sio_seterr(err, SIO_ERR_INVALID, "sigv4: no query array");
    for (size_t i = 0; i < req->nquery; i++) {
        const sio_sigv4_pair *q = &req->query[i];
        if (!q->name)
            return sio_seterr(err, SIO_ERR_INVALID,
                              "sigv4: query pair %zu has no name", i);
        if (strlen(q->name) > SIO_SIGV4_NAME_MAX ||
            (q->value && strlen(q->value) > SIO_SIGV4_VALUE_MAX))
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "sigv4: query pair %zu too long", i);
        if ((req->flags & SIO_SIGV4_PRESIGN) &&
            strncasecmp(q->name, "X-Amz-", 6) == 0)
            return sio_seterr(err, SIO_ERR_INVALID,
                              "sigv4: presign query may not hold X-Amz-*");
    }
    if (req->nheaders > SIO_SIGV4_HEADERS_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "sigv4: more than %u headers",
                          SIO_SIGV4_HEADERS_MAX);
    if (req->nheaders && !req->headers)
        return sio_seterr(err, SIO_ERR_INVALID, "sigv4: no header array");
    for (size_t i = 0; i < req->nheaders; i++) {
        const sio_sigv4_pair *h = &req->headers[i];
        if (!h->name || !all_tchar(h->name))
            return sio_seterr(err, SIO_ERR_INVALID,
                              "sigv4: header %zu has a bad name", i);
        if (strlen(h->name) > SIO_SIGV4_NAME_MAX ||
            (h->value && strlen(h->value) > SIO_SIGV4_VALUE_MAX))
            return sio_seterr(err, SIO_ERR_LIMIT, "sigv4: header %s too long",
                              h->name);
        if (reserved_header(h->name))
            return sio_seterr(err, SIO_ERR_INVALID,
                              "sigv4: header %s is set by the signer",
                              h->name);
        if (h->value && !no_ctl(h->value))
            return sio_seterr(err, SIO_ERR_INVALID,
                              "sigv4: header %s holds a control byte",
                              h->name);
    }
    if (req->payload_hash && !payload_hash_ok(req->payload_hash))
        return sio_seterr(err, SIO_ERR_INVALID,
                          "sigv4: payload hash is not lowercase hex SHA-256");
    if (!req->region || !scope_ok(req->region))
        return sio_seterr(err, SIO_ERR_INVALID, "sigv4: bad region");
    if (!req->service || !scope_ok(req->service))
        return sio_seterr(err, SIO_ERR_INVALID, "sigv4: bad service");
    if (!req->amz_date || !amz_date_ok(req->amz_date))
        return sio_seterr(err, SIO_ERR_INVALID,
                          "sigv4: amz_date is not YYYYMMDDTHHMMSSZ");
    if ((req->flags & SIO_SIGV4_PRESIGN) &&
        (req->expires < 1 || req->expires > SIO_SIGV4_EXPIRES_MAX))
        return sio_seterr(err, SIO_ERR_INVALID,
                          "sigv4: expires must be 1..%u seconds",
                          SIO_SIGV4_EXPIRES_MAX);
    /* Credentials: the checks never echo the value. */
    if (!creds->access_key || !*creds->access_key ||
        !key_chars_ok(creds->access_key))
        return sio_seterr(err, SIO_ERR_AUTH, "sigv4: missing or bad access key");
    if (!creds->secret_key || !*creds->secret_key)
        return sio_seterr(err, SIO_ERR_AUTH, "sigv4: missing secret key");
    if (strlen(creds->access_key) > SIO_SIGV4_KEY_MAX ||
        strlen(creds->secret_key) > SIO_SIGV4_KEY_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "sigv4: key longer than %u",
                          SIO_SIGV4_KEY_MAX);
    if (creds->session_token) {
        if (strlen(creds->session_token) > SIO_SIGV4_TOKEN_MAX)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "sigv4: session token longer than %u",
                              SIO_SIGV4_TOKEN_MAX);
        if (!no_ctl(creds->session_token))
            return sio_seterr(err, SIO_ERR_AUTH,
                              "sigv4: session token holds a control byte");
    }
    return SIO_OK;
}

/* ------------------------------------------------------------------ */
/* Path                                                                */

/*
 * Remove "." and ".." segments and empty segments (runs of '/'), keeping a
 * trailing '/' when the path had one and something is left before it: the
 * normalisation the AWS suites expect of non-S3 services.
 */
static sio_code normalize_path(const char *path, buf *out)
{
    size_t len = strlen(path);
    /* Segment start offsets into out; a path of L bytes has < L segments. */
    size_t *starts = malloc((len + 1) * sizeof *starts);
    size_t nseg = 0;
    sio_code rc = SIO_OK;
    if (!starts)
        return SIO_ERR_NOMEM;
    const char *p = path;
    while (*p && rc == SIO_OK) {
        while (*p == '/')
            p++;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        size_t n = (size_t)(e - p);
        if (n == 0 || (n == 1 && p[0] == '.')) {
            /* nothing */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (nseg) {
                out->n = starts[--nseg];
                out->p[out->n] = '\0';
            }
        } else {
            starts[nseg++] = out->n;
            rc = buf_ch(out, '/');
            if (rc == SIO_OK)
                rc = buf_add(out, p, n);
        }
        p = e;
    }
    if (rc == SIO_OK && (out->n == 0 || (len > 1 && path[len - 1] == '/')))
        rc = buf_ch(out, '/');
    free(starts);
    return rc;
}

/* The canonical URI and the wire path of req (both NUL-terminated). */
static sio_code build_paths(const sio_sigv4_request *req, buf *canon,
                            buf *wire)
{
    buf norm;
    sio_code rc = SIO_OK;
    const char *src = req->path;
    buf_init(&norm, SIO_SIGV4_PATH_MAX + 1);
    if (req->flags & SIO_SIGV4_NORMALIZE_PATH) {
        rc = normalize_path(req->path, &norm);
        if (rc)
            goto out;
        src = norm.p;
    }
    if (req->flags & SIO_SIGV4_PATH_ENCODED) {
        /* The wire carries the caller's encoding; the canonical URI encodes
         * it once more. */
        rc = buf_str(wire, req->path);
        if (rc == SIO_OK)
            rc = encode_into(canon, src, strlen(src), 1);
    } else {
        rc = encode_into(canon, src, strlen(src), 1);
        if (rc == SIO_OK)
            rc = buf_add(wire, canon->p, canon->n);
    }
out:
    buf_free(&norm);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Query                                                               */

typedef struct qpair {
    char *name; /* encoded */
    char *value;
} qpair;

typedef struct qlist {
    qpair v[SIO_SIGV4_QUERY_MAX + 8]; /* room for the presign parameters */
    size_t n;
} qlist;

static void qlist_free(qlist *q)
{
    for (size_t i = 0; i < q->n; i++) {
        free(q->v[i].name);
        if (q->v[i].value)
            OPENSSL_clear_free(q->v[i].value, strlen(q->v[i].value) + 1);
    }
    q->n = 0;
}

static sio_code qlist_add(qlist *q, const char *name, const char *value)
{
    sio_code rc;
    qpair *p = &q->v[q->n];
    const char *v = value ? value : "";
    p->name = p->value = NULL;
    rc = sio_sigv4_uri_encode(name, strlen(name), 0, OUT_MAX, &p->name, NULL);
    if (rc == SIO_OK)
        rc = sio_sigv4_uri_encode(v, strlen(v), 0, OUT_MAX, &p->value, NULL);
    if (rc != SIO_OK) {
        free(p->name);
        free(p->value);
        return rc;
    }
    q->n++;
    return SIO_OK;
}

static int qpair_cmp(const void *a, const void *b)
{
    const qpair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static sio_code qlist_join(const qlist *q, buf *out)
{
    sio_code rc = SIO_OK;
    for (size_t i = 0; i < q->n && rc == SIO_OK; i++) {
        if (i)
            rc = buf_ch(out, '&');
        if (rc == SIO_OK)
            rc = buf_str(out, q->v[i].name);
        if (rc == SIO_OK)
            rc = buf_ch(out, '=');
        if (rc == SIO_OK)
            rc = buf_str(out, q->v[i].value);
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* Headers                                                             */

typedef struct hdr {
    char *name;        /* lowercase, malloc'd */
    const char *value; /* borrowed, untrimmed */
    size_t order;      /* position given, to keep repeated names in order */
} hdr;

static int hdr_cmp(const void *a, const void *b)
{
    const hdr *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* A value with leading/trailing blanks removed and inner runs of blanks
 * collapsed to one space. */
static sio_code add_trimmed(buf *out, const char *v)
{
    sio_code rc = SIO_OK;
    int pending_space = 0, any = 0;
    for (; *v && rc == SIO_OK; v++) {
        if (*v == ' ' || *v == '\t') {
            pending_space = any;
            continue;
        }
        if (pending_space)
            rc = buf_ch(out, ' ');
        if (rc == SIO_OK)
            rc = buf_ch(out, *v);
        pending_space = 0;
        any = 1;
    }
    return rc;
}

typedef struct hlist {
    hdr v[SIO_SIGV4_HEADERS_MAX + 4]; /* room for the signer's own */
    size_t n;
} hlist;

static void hlist_free(hlist *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->v[i].name);
    h->n = 0;
}

static sio_code hlist_add(hlist *h, const char *name, const char *value)
{
    size_t n = strlen(name);
    char *l = malloc(n + 1);
    if (!l)
        return SIO_ERR_NOMEM;
    for (size_t i = 0; i <= n; i++) {
        char c = name[i];
        l[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    h->v[h->n].name = l;
    h->v[h->n].value = value ? value : "";
    h->v[h->n].order = h->n;
    h->n++;
    return SIO_OK;
}

/* Canonical header block ("name:value\n" per name) and the signed list. */
static sio_code canon_headers(hlist *h, buf *block, buf *signed_list)
{
    sio_code rc = SIO_OK;
    qsort(h->v, h->n, sizeof h->v[0], hdr_cmp);
    for (size_t i = 0; i < h->n && rc == SIO_OK; i++) {
        int repeat = i > 0 && strcmp(h->v[i].name, h->v[i - 1].name) == 0;
        if (repeat) {
            rc = buf_ch(block, ',');
        } else {
            if (i > 0)
                rc = buf_ch(block, '\n');
            if (rc == SIO_OK && signed_list->n)
                rc = buf_ch(signed_list, ';');
            if (rc == SIO_OK)
                rc = buf_str(signed_list, h->v[i].name);
            if (rc == SIO_OK)
                rc = buf_str(block, h->v[i].name);
            if (rc == SIO_OK)
                rc = buf_ch(block, ':');
        }
        if (rc == SIO_OK)
            rc = add_trimmed(block, h->v[i].value);
    }
    if (rc == SIO_OK && h->n)
        rc = buf_ch(block, '\n');
    return rc;
}

/* ------------------------------------------------------------------ */
/* Signing                                                             */

void sio_sigv4_result_free(sio_sigv4_result *res)
{
    if (!res)
        return;
    char *strs[] = {res->authorization, res->wire_path,
                    res->canonical_request, res->string_to_sign,
                    res->signed_headers};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (strs[i])
            OPENSSL_clear_free(strs[i], strlen(strs[i]) + 1);
    for (size_t i = 0; i < res->nheaders && i < SIO_SIGV4_OUT_HEADERS; i++)
        if (res->headers[i])
            OPENSSL_clear_free(res->headers[i], strlen(res->headers[i]) + 1);
    memset(res, 0, sizeof *res);
}

/* Append "Name: value" to the result's header lines. */
static sio_code add_line(sio_sigv4_result *res, const char *name,
                         const char *value)
{
    buf b;
    sio_code rc;
    buf_init(&b, OUT_MAX);
    rc = buf_str(&b, name);
    if (rc == SIO_OK)
        rc = buf_str(&b, ": ");
    if (rc == SIO_OK)
        rc = buf_str(&b, value);
    if (rc == SIO_OK)
        rc = buf_take(&b, &res->headers[res->nheaders]);
    if (rc == SIO_OK)
        res->nheaders++;
    buf_free(&b);
    return rc;
}

/* signature = hex(HMAC(kSigning, sts)), kSigning derived from the secret.
 * Every intermediate key lives on this frame and is wiped before return. */
static sio_code compute_signature(const char *secret, const char *amz_date,
                                  const char *region, const char *service,
                                  const char *sts, char sig[65])
{
    char kinit[4 + SIO_SIGV4_KEY_MAX];
    unsigned char k1[32], k2[32], k3[32], k4[32], mac[32];
    size_t slen = strlen(secret);
    sio_code rc;

    memcpy(kinit, "AWS4", 4);
    memcpy(kinit + 4, secret, slen);
    rc = hmac256(kinit, 4 + slen, amz_date, 8, k1);
    if (rc == SIO_OK)
        rc = hmac256(k1, 32, region, strlen(region), k2);
    if (rc == SIO_OK)
        rc = hmac256(k2, 32, service, strlen(service), k3);
    if (rc == SIO_OK)
        rc = hmac256(k3, 32, "aws4_request", 12, k4);
    if (rc == SIO_OK)
        rc = hmac256(k4, 32, sts, strlen(sts), mac);
    if (rc == SIO_OK)
        to_hex(mac, 32, sig);
    OPENSSL_cleanse(kinit, sizeof kinit);
    OPENSSL_cleanse(k1, sizeof k1);
    OPENSSL_cleanse(k2, sizeof k2);
    OPENSSL_cleanse(k3, sizeof k3);
    OPENSSL_cleanse(k4, sizeof k4);
    OPENSSL_cleanse(mac, sizeof mac);
    return rc;
}

/* Fill q with the caller's pairs (and, presigning, the auth parameters
 * except the signature), sorted. */
static sio_code build_query(const sio_sigv4_request *req,
                            const sio_sigv4_creds *creds, const char *scope,
                            const char *signed_list, qlist *q)
{
    sio_code rc = SIO_OK;
    int presign = (req->flags & SIO_SIGV4_PRESIGN) != 0;
    const char *token = creds->session_token;
    for (size_t i = 0; i < req->nquery && rc == SIO_OK; i++)
        rc = qlist_add(q, req->query[i].name, req->query[i].value);
    if (rc == SIO_OK && presign) {
        char expires[16], cred[SIO_SIGV4_KEY_MAX + SIO_SIGV4_SCOPE_MAX * 2 + 40];
        snprintf(expires, sizeof expires, "%u", (unsigned)req->expires);
        snprintf(cred, sizeof cred, "%s/%s", creds->access_key, scope);
        rc = qlist_add(q, "X-Amz-Algorithm", ALGORITHM);
        if (rc == SIO_OK)
            rc = qlist_add(q, "X-Amz-Credential", cred);
        if (rc == SIO_OK)
            rc = qlist_add(q, "X-Amz-Date", req->amz_date);
        if (rc == SIO_OK)
            rc = qlist_add(q, "X-Amz-Expires", expires);
        if (rc == SIO_OK && token && *token &&
            !(req->flags & SIO_SIGV4_TOKEN_AFTER))
            rc = qlist_add(q, "X-Amz-Security-Token", token);
        if (rc == SIO_OK)
            rc = qlist_add(q, "X-Amz-SignedHeaders", signed_list);
    }
    if (rc == SIO_OK)
        qsort(q->v, q->n, sizeof q->v[0], qpair_cmp);
    return rc;
}

sio_code sio_sigv4_wire_path(const sio_sigv4_request *req, char **out,
                             sio_error *err)
{
    static const sio_sigv4_creds none = {"-", "-", NULL};
    buf canon, wire;
    qlist *q = NULL;
    sio_sigv4_request plain;
    sio_code rc;

    *out = NULL;
    buf_init(&canon, OUT_MAX);
    buf_init(&wire, OUT_MAX);
    rc = check_request(req, &none, err);
    if (rc)
        goto out;
    plain = *req;
    plain.flags &= ~(unsigned)SIO_SIGV4_PRESIGN;
    rc = build_paths(&plain, &canon, &wire);
    if (rc)
        goto fail;
    q = calloc(1, sizeof *q);
    if (!q) {
        rc = SIO_ERR_NOMEM;
        goto fail;
    }
    rc = build_query(&plain, &none, "", "", q);
    if (rc == SIO_OK && q->n) {
        rc = buf_ch(&wire, '?');
        if (rc == SIO_OK)
            rc = qlist_join(q, &wire);
    }
    if (rc == SIO_OK)
        rc = buf_take(&wire, out);
fail:
    if (rc)
        sio_seterr(err, rc, "sigv4: building the wire path: %s",
                   sio_strerror(rc));
out:
    if (q) {
        qlist_free(q);
        free(q);
    }
    buf_free(&canon);
    buf_free(&wire);
    return rc;
}

sio_code sio_sigv4_sign(const sio_sigv4_request *req,
                        const sio_sigv4_creds *creds, sio_sigv4_result *res,
                        sio_error *err)
{
    buf canon_uri, wire, hblock, slist, creq, sts, auth;
    qlist *q = NULL;
    hlist *h = NULL;
    sio_code rc;
    char scope[8 + 3 + 2 * SIO_SIGV4_SCOPE_MAX + 16];
    char creq_hash[65];
    const char *payload;
    const char *token;
    int presign, sign_token, content_hdr;

    memset(res, 0, sizeof *res);
    buf_init(&canon_uri, OUT_MAX);
    buf_init(&wire, OUT_MAX);
    buf_init(&hblock, OUT_MAX);
    buf_init(&slist, OUT_MAX);
    buf_init(&creq, OUT_MAX);
    buf_init(&sts, OUT_MAX);
    buf_init(&auth, OUT_MAX);

    rc = check_request(req, creds, err);
    if (rc)
        goto out;
    presign = (req->flags & SIO_SIGV4_PRESIGN) != 0;
    token = (creds->session_token && *creds->session_token)
                ? creds->session_token : NULL;
    sign_token = token && !(req->flags & SIO_SIGV4_TOKEN_AFTER);
    content_hdr = !presign && !(req->flags & SIO_SIGV4_NO_CONTENT_SHA256);
    payload = req->payload_hash ? req->payload_hash
                                : SIO_SIGV4_UNSIGNED_PAYLOAD;
    snprintf(scope, sizeof scope, "%.8s/%s/%s/aws4_request", req->amz_date,
             req->region, req->service);

    q = calloc(1, sizeof *q);
    h = calloc(1, sizeof *h);
    if (!q || !h) {
        rc = SIO_ERR_NOMEM;
        goto fail;
    }

    /* Headers: the caller's, then the signer's own. */
    for (size_t i = 0; i < req->nheaders && rc == SIO_OK; i++)
        rc = hlist_add(h, req->headers[i].name, req->headers[i].value);
    if (rc == SIO_OK)
        rc = hlist_add(h, "host", req->host);
    if (rc == SIO_OK && !presign)
        rc = hlist_add(h, "x-amz-date", req->amz_date);
    if (rc == SIO_OK && content_hdr)
        rc = hlist_add(h, "x-amz-content-sha256", payload);
    if (rc == SIO_OK && sign_token && !presign)
        rc = hlist_add(h, "x-amz-security-token", token);
    if (rc == SIO_OK)
        rc = canon_headers(h, &hblock, &slist);
    if (rc == SIO_OK)
        rc = build_paths(req, &canon_uri, &wire);
    if (rc == SIO_OK)
        rc = build_query(req, creds, scope, slist.p, q);
    if (rc)
        goto fail;

    /* The canonical request. */
    rc = buf_str(&creq, req->method);
    if (rc == SIO_OK)
        rc = buf_ch(&creq, '\n');
    if (rc == SIO_OK)
        rc = buf_add(&creq, canon_uri.p, canon_uri.n);
    if (rc == SIO_OK)
        rc = buf_ch(&creq, '\n');
    if (rc == SIO_OK)
        rc = qlist_join(q, &creq);
    if (rc == SIO_OK)
        rc = buf_ch(&creq, '\n');
    if (rc == SIO_OK)
        rc = buf_add(&creq, hblock.p, hblock.n);
    if (rc == SIO_OK)
        rc = buf_ch(&creq, '\n');
    if (rc == SIO_OK)
        rc = buf_add(&creq, slist.p, slist.n);
    if (rc == SIO_OK)
        rc = buf_ch(&creq, '\n');
    if (rc == SIO_OK)
        rc = buf_str(&creq, payload);
    if (rc == SIO_OK)
        rc = sio_sigv4_sha256_hex(creq.p, creq.n, creq_hash);
    if (rc)
        goto fail;

    /* The string to sign and the signature. */
    rc = buf_str(&sts, ALGORITHM "\n");
    if (rc == SIO_OK)
        rc = buf_str(&sts, req->amz_date);
    if (rc == SIO_OK)
        rc = buf_ch(&sts, '\n');
    if (rc == SIO_OK)
        rc = buf_str(&sts, scope);
    if (rc == SIO_OK)
        rc = buf_ch(&sts, '\n');
    if (rc == SIO_OK)
        rc = buf_str(&sts, creq_hash);
    if (rc == SIO_OK)
        rc = compute_signature(creds->secret_key, req->amz_date, req->region,
                               req->service, sts.p, res->signature);
    if (rc)
        goto fail;

    /* What goes on the wire. */
    if (q->n) {
        rc = buf_ch(&wire, '?');
        if (rc == SIO_OK)
            rc = qlist_join(q, &wire);
    }
    if (rc == SIO_OK && presign) {
        rc = buf_str(&wire, q->n ? "&X-Amz-Signature=" : "?X-Amz-Signature=");
        if (rc == SIO_OK)
            rc = buf_str(&wire, res->signature);
        if (rc == SIO_OK && token && !sign_token) {
            rc = buf_str(&wire, "&X-Amz-Security-Token=");
            if (rc == SIO_OK)
                rc = encode_into(&wire, token, strlen(token), 0);
        }
    }
    if (rc == SIO_OK && !presign) {
        rc = buf_str(&auth, ALGORITHM " Credential=");
        if (rc == SIO_OK)
            rc = buf_str(&auth, creds->access_key);
        if (rc == SIO_OK)
            rc = buf_ch(&auth, '/');
        if (rc == SIO_OK)
            rc = buf_str(&auth, scope);
        if (rc == SIO_OK)
            rc = buf_str(&auth, ", SignedHeaders=");
        if (rc == SIO_OK)
            rc = buf_add(&auth, slist.p, slist.n);
        if (rc == SIO_OK)
            rc = buf_str(&auth, ", Signature=");
        if (rc == SIO_OK)
            rc = buf_str(&auth, res->signature);
        if (rc == SIO_OK)
            rc = add_line(res, "X-Amz-Date", req->amz_date);
        if (rc == SIO_OK && content_hdr)
            rc = add_line(res, "X-Amz-Content-SHA256", payload);
        if (rc == SIO_OK && token)
            rc = add_line(res, "X-Amz-Security-Token", token);
        if (rc == SIO_OK)
            rc = add_line(res, "Authorization", auth.p);
        if (rc == SIO_OK)
            rc = buf_take(&auth, &res->authorization);
    }
    if (rc == SIO_OK)
        rc = buf_take(&wire, &res->wire_path);
    if (rc == SIO_OK)
        rc = buf_take(&creq, &res->canonical_request);
    if (rc == SIO_OK)
        rc = buf_take(&sts, &res->string_to_sign);
    if (rc == SIO_OK)
        rc = buf_take(&slist, &res->signed_headers);

fail:
    if (rc) {
        sio_sigv4_result_free(res);
        sio_seterr(err, rc, "sigv4: signing failed: %s", sio_strerror(rc));
    }
out:
    if (q) {
        qlist_free(q);
        free(q);
    }
    if (h) {
        hlist_free(h);
        free(h);
    }
    buf_free(&canon_uri);
    buf_free(&wire);
    buf_free(&hblock);
    buf_free(&slist);
    buf_free(&creq);
    buf_free(&sts);
    buf_free(&auth);
    return rc;
}
