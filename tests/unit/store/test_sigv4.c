/*
 * test_sigv4.c — SigV4 signing against vectors botocore computes at test
 * time (tests/tools/mksigv4.py, in the layout of Amazon's
 * aws-signing-test-suite/v4) and against S3-specific rules the AWS suites do
 * not cover (UNSIGNED-PAYLOAD, x-amz-content-sha256, S3 key encoding without
 * normalisation, the wire path, input checks and limits).
 *
 * `test_sigv4 --upstream` is the conformance test on Amazon's two public
 * test suites (../shared/testdata/sigv4/, see its README.md; skipped when
 * absent).
 *
 * Those vectors describe generic AWS services: the request line carries the
 * path as sent, which the canonical request encodes again, and most cases
 * normalise the path. They are run with SIO_SIGV4_PATH_ENCODED and, where the
 * case asks for it, SIO_SIGV4_NORMALIZE_PATH. Every case of both suites
 * runs; if one ever has to be skipped it goes into skip_cases[] below with
 * its reason, and the summary counts it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "check.h"
#include "store/sigv4.h"

/* Cases of either suite that are not run, by folder name, with the reason.
 * (botocore skips normalize-path/get-space and the three query-order cases
 * with repeated keys because its own request parser cannot read them; this
 * harness parses them, and the signer sorts repeated keys by value as the
 * expected results require, so they run here.) */
static const struct {
    const char *name;
    const char *reason;
} skip_cases[] = {
    {NULL, NULL},
};

static const char *skip_reason(const char *name)
{
    for (size_t i = 0; skip_cases[i].name; i++)
        if (strcmp(skip_cases[i].name, name) == 0)
            return skip_cases[i].reason;
    return NULL;
}

/* The fixed parameters of the classic suite (its README). */
#define SUITE_AK "AKIDEXAMPLE"
#define SUITE_SK "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_DATE "20150830T123600Z"

typedef struct suite_stats {
    int ran, passed, skipped;
} suite_stats;

/* ------------------------------------------------------------------ */
/* Files and raw requests                                              */

/* Whole file, NUL-terminated, or NULL when it cannot be read. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *p = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0) {
        p = malloc((size_t)n + 1);
        if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
            free(p);
            p = NULL;
        } else if (p) {
            p[n] = '\0';
            if (len)
                *len = (size_t)n;
        }
    }
    fclose(f);
    return p;
}

#define RAW_MAX 64

/* A parsed .req / request.txt: every string is owned. */
typedef struct rawreq {
    char method[32];
    char *path;
    char *host;
    char *amz_date;  /* an X-Amz-Date header, when present */
    char *token;     /* an X-Amz-Security-Token header, when present */
    sio_sigv4_pair query[RAW_MAX];
    size_t nquery;
    sio_sigv4_pair headers[RAW_MAX];
    size_t nheaders;
    char *body;
    size_t bodylen;
} rawreq;

static void rawreq_free(rawreq *r)
{
    for (size_t i = 0; i < r->nquery; i++) {
        free((char *)r->query[i].name);
        free((char *)r->query[i].value);
    }
    for (size_t i = 0; i < r->nheaders; i++) {
        free((char *)r->headers[i].name);
        free((char *)r->headers[i].value);
    }
    free(r->path);
    free(r->host);
    free(r->amz_date);
    free(r->token);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static char *dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode n bytes (the query on the request line is as sent). */
static char *pct_decode(const char *s, size_t n)
{
    char *o = malloc(n + 1);
    size_t j = 0;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n &&
            hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            o[j++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            o[j++] = s[i];
        }
    }
    o[j] = '\0';
    return o;
}

/*
 * Parse a raw request: request line (the target is everything between the
 * first and the last space, so a path with a space survives), header lines
 * "Name:value" with leading-space continuation lines joined by a space, an
 * empty line, the body.
 */
static int parse_request(const char *text, rawreq *r)
{
    memset(r, 0, sizeof *r);
    const char *eol = strchr(text, '\n');
    size_t l1 = eol ? (size_t)(eol - text) : strlen(text);
    const char *sp1 = memchr(text, ' ', l1);
    const char *sp2 = NULL;
    for (const char *p = text + l1; p > text; p--)
        if (p[-1] == ' ') {
            sp2 = p - 1;
            break;
        }
    if (!sp1 || !sp2 || sp2 <= sp1 || (size_t)(sp1 - text) >= sizeof r->method)
        return -1;
    memcpy(r->method, text, (size_t)(sp1 - text));
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(sp2 - target);
    const char *qm = memchr(target, '?', tlen);
    r->path = dupn(target, qm ? (size_t)(qm - target) : tlen);
    if (qm) {
        const char *q = qm + 1, *qend = target + tlen;
        while (q < qend && r->nquery < RAW_MAX) {
            const char *amp = memchr(q, '&', (size_t)(qend - q));
            const char *e = amp ? amp : qend;
            const char *eq = memchr(q, '=', (size_t)(e - q));
            const char *ne = eq ? eq : e;
            r->query[r->nquery].name = pct_decode(q, (size_t)(ne - q));
            r->query[r->nquery].value =
                eq ? pct_decode(eq + 1, (size_t)(e - eq - 1)) : dupn("", 0);
            r->nquery++;
            q = e + 1;
        }
    }
    const char *p = eol ? eol + 1 : text + l1;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0) { /* the empty line: the body follows */
            p++;
            r->body = dupn(p, strlen(p));
            r->bodylen = strlen(p);
            return 0;
        }
        if ((p[0] == ' ' || p[0] == '\t') && r->nheaders) {
            sio_sigv4_pair *h = &r->headers[r->nheaders - 1];
            size_t old = strlen(h->value);
            char *v = malloc(old + 1 + n + 1);
            if (!v)
                return -1;
            memcpy(v, h->value, old);
            v[old] = ' ';
            memcpy(v + old + 1, p, n);
            v[old + 1 + n] = '\0';
            free((char *)h->value);
            h->value = v;
        } else {
            const char *colon = memchr(p, ':', n);
            if (!colon)
                return -1;
            char *name = dupn(p, (size_t)(colon - p));
            char *value = dupn(colon + 1, n - (size_t)(colon - p) - 1);
            if (strcasecmp(name, "host") == 0) {
                free(r->host);
                r->host = value;
                free(name);
            } else if (strcasecmp(name, "x-amz-date") == 0) {
                free(r->amz_date);
                r->amz_date = value;
                free(name);
            } else if (strcasecmp(name, "x-amz-security-token") == 0) {
                free(r->token);
                r->token = value;
                free(name);
            } else if (r->nheaders < RAW_MAX) {
                r->headers[r->nheaders].name = name;
                r->headers[r->nheaders].value = value;
                r->nheaders++;
            } else {
                free(name);
                free(value);
                return -1;
            }
        }
        p += n + (e ? 1 : 0);
    }
    r->body = dupn("", 0);
    return 0;
}

/* Fill req from a parsed request; payload_hash points into hash[]. */
static void request_from_raw(const rawreq *r, sio_sigv4_request *req,
                             char hash[65])
{
    memset(req, 0, sizeof *req);
    sio_sigv4_sha256_hex(r->body, r->bodylen, hash);
    req->method = r->method;
    req->host = r->host;
    req->path = r->path;
    req->query = r->query;
    req->nquery = r->nquery;
    req->headers = r->headers;
    req->nheaders = r->nheaders;
    req->payload_hash = hash;
}

/* dir/name+ext into out; a path that does not fit is a broken checkout. */
static const char *pjoin(char *out, size_t cap, const char *dir,
                         const char *name, const char *ext)
{
    int n = snprintf(out, cap, "%s/%s%s", dir, name, ext);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "path too long: %s/%s%s\n", dir, name, ext);
        abort();
    }
    return out;
}

/* Compare a result with an expected file; a missing file is a failure. */
static int same_as_file(const char *got, const char *path)
{
    char *want = read_file(path, NULL);
    int ok = want && got && strcmp(got, want) == 0;
    if (!ok)
        fprintf(stderr, "mismatch with %s:\n--- got\n%s\n--- want\n%s\n",
                path, got ? got : "(null)", want ? want : "(missing)");
    free(want);
    return ok;
}

/* Trailing newline and blanks removed (header-signature.txt etc.). */
static void chomp(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        s[--n] = '\0';
}

/* ------------------------------------------------------------------ */
/* Suite 1: aws4_testsuite (classic layout)                            */

/* The token of the suite's session-token cases: the classic layout keeps it
 * only in the expected output, so it is taken from the newer layout's
 * context.json of the same case. */
static char *suite_token(const char *v4_case)
{
    char path[1024], rel[512];
    json_error_t jerr;
    char *tok = NULL;
    snprintf(rel, sizeof rel,
             "testdata/sigv4/aws-signing-test-suite/v4/%s/context.json",
             v4_case);
    json_t *ctx = json_load_file(shared_path(path, sizeof path, rel), 0, &jerr);
    const char *t = json_string_value(
        json_object_get(json_object_get(ctx, "credentials"), "token"));
    if (t)
        tok = strdup(t);
    json_decref(ctx);
    return tok;
}

static int run_classic_case(const char *dir, const char *name)
{
    char path[2048], *text;
    rawreq r;
    sio_sigv4_request req;
    sio_sigv4_result res;
    sio_error err = {0};
    sio_sigv4_creds creds = {SUITE_AK, SUITE_SK, NULL};
    char hash[65], *token = NULL;
    int ok = 1;

    pjoin(path, sizeof path, dir, name, ".req");
    text = read_file(path, NULL);
    CHECK(text != NULL);
    if (!text)
        return 0;
    CHECK(parse_request(text, &r) == 0);
    free(text);
    request_from_raw(&r, &req, hash);
    req.region = "us-east-1";
    req.service = "service";
    req.amz_date = SUITE_DATE;
    req.flags = SIO_SIGV4_PATH_ENCODED | SIO_SIGV4_NO_CONTENT_SHA256;
    /* The classic suite describes a generic service: every case, those of
     * normalize-path/ included, expects a normalised path. */
    req.flags |= SIO_SIGV4_NORMALIZE_PATH;
    if (r.amz_date)
        CHECK_STR(r.amz_date, SUITE_DATE);
    if (r.token) {
        creds.session_token = r.token;
    } else if (strcmp(name, "get-vanilla-with-session-token") == 0) {
        token = suite_token(name);
        CHECK(token != NULL);
        creds.session_token = token;
    } else if (strcmp(name, "post-sts-header-after") == 0) {
        /* The token is added after signing: not in the signature, but the
         * signer still hands back its header line. */
        token = suite_token(name);
        CHECK(token != NULL);
        creds.session_token = token;
        req.flags |= SIO_SIGV4_TOKEN_AFTER;
    }

    sio_code rc = sio_sigv4_sign(&req, &creds, &res, &err);
    CHECK_EQ_U64(rc, SIO_OK);
    if (rc != SIO_OK) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        ok = 0;
        goto out;
    }
    pjoin(path, sizeof path, dir, name, ".creq");
    ok &= same_as_file(res.canonical_request, path);
    pjoin(path, sizeof path, dir, name, ".sts");
    ok &= same_as_file(res.string_to_sign, path);
    pjoin(path, sizeof path, dir, name, ".authz");
    ok &= same_as_file(res.authorization, path);
    if (token && (req.flags & SIO_SIGV4_TOKEN_AFTER)) {
        int found = 0;
        for (size_t i = 0; i < res.nheaders; i++)
            if (strncmp(res.headers[i], "X-Amz-Security-Token: ", 22) == 0)
                found = strcmp(res.headers[i] + 22, token) == 0;
        ok &= found;
    }
    sio_sigv4_result_free(&res);
out:
    free(token);
    rawreq_free(&r);
    return ok;
}

/* Case folders hold <name>.req; folders without one group more cases. */
static void walk_classic(const char *dir, const char *rel, suite_stats *st)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    CHECK(d != NULL);
    if (!d)
        return;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof *names);
            if (!names)
                abort();
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        char sub[2048], req[4096], relname[1024];
        struct stat sb;
        pjoin(sub, sizeof sub, dir, names[i], "");
        snprintf(relname, sizeof relname, "%s%s%s", rel, *rel ? "/" : "",
                 names[i]);
        if (stat(sub, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        pjoin(req, sizeof req, sub, names[i], ".req");
        if (stat(req, &sb) != 0) {
            walk_classic(sub, relname, st);
            continue;
        }
        const char *why = skip_reason(relname);
        if (why) {
            printf("skip aws4_testsuite/%s: %s\n", relname, why);
            st->skipped++;
            continue;
        }
        st->ran++;
        if (run_classic_case(sub, names[i]))
            st->passed++;
        else
            fprintf(stderr, "FAIL aws4_testsuite/%s\n", relname);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* ------------------------------------------------------------------ */
/* Suite 2: aws-signing-test-suite/v4 (context.json layout)            */

/* "2015-08-30T12:36:00Z" -> "20150830T123600Z". */
static int iso_to_amz(const char *iso, char out[17])
{
    size_t j = 0;
    for (const char *p = iso; *p && j < 16; p++)
        if (*p != '-' && *p != ':')
            out[j++] = *p;
    out[j] = '\0';
    return j == 16 ? 0 : -1;
}

/* The query of a signed request line, each pair percent-decoded (the
 * suite's expected lines leave UTF-8 raw), sorted, for comparing parameter
 * sets regardless of their order and escaping on the line. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *sorted_query(const char *q)
{
    char *copy = strdup(q), *save = NULL, *tok;
    char *parts[RAW_MAX * 2];
    size_t n = 0, total = 0;
    for (tok = strtok_r(copy, "&", &save); tok && n < RAW_MAX * 2;
         tok = strtok_r(NULL, "&", &save)) {
        parts[n++] = pct_decode(tok, strlen(tok));
        total += strlen(tok) + 1;
    }
    qsort(parts, n, sizeof parts[0], cmp_str);
    char *out = calloc(1, total + 1);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(out, "&");
        strcat(out, parts[i]);
        free(parts[i]);
    }
    free(copy);
    return out;
}

/* The request target of the first line of a signed request file. */
static char *signed_target(const char *path)
{
    char *text = read_file(path, NULL), *out = NULL;
    if (!text)
        return NULL;
    char *sp1 = strchr(text, ' ');
    char *eol = strchr(text, '\n');
    if (sp1 && eol) {
        *eol = '\0';
        char *sp2 = strrchr(sp1 + 1, ' ');
        if (sp2)
            out = dupn(sp1 + 1, (size_t)(sp2 - sp1 - 1));
    }
    free(text);
    return out;
}

static int run_v4_case(const char *dir, const char *name)
{
    char path[2048], amz[17], hash[65], *text;
    rawreq r;
    json_error_t jerr;
    sio_sigv4_request req;
    sio_sigv4_result res;
    sio_error err = {0};
    int ok = 1;

    pjoin(path, sizeof path, dir, "context.json", "");
    json_t *ctx = json_load_file(path, 0, &jerr);
    CHECK(ctx != NULL);
    if (!ctx)
        return 0;
    json_t *cred = json_object_get(ctx, "credentials");
    sio_sigv4_creds creds = {
        json_string_value(json_object_get(cred, "access_key_id")),
        json_string_value(json_object_get(cred, "secret_access_key")),
        json_string_value(json_object_get(cred, "token"))};
    CHECK(iso_to_amz(json_string_value(json_object_get(ctx, "timestamp"))
                         ? json_string_value(json_object_get(ctx, "timestamp"))
                         : "",
                     amz) == 0);

    pjoin(path, sizeof path, dir, "request.txt", "");
    text = read_file(path, NULL);
    CHECK(text != NULL);
    if (!text || parse_request(text, &r) != 0) {
        free(text);
        json_decref(ctx);
        return 0;
    }
    free(text);
    request_from_raw(&r, &req, hash);
    req.region = json_string_value(json_object_get(ctx, "region"));
    req.service = json_string_value(json_object_get(ctx, "service"));
    req.amz_date = amz;
    req.flags = SIO_SIGV4_PATH_ENCODED;
    if (json_is_true(json_object_get(ctx, "normalize")))
        req.flags |= SIO_SIGV4_NORMALIZE_PATH;
    /* Beyond the AWS layout (mksigv4.py): UNSIGNED-PAYLOAD, sent and signed
     * as x-amz-content-sha256, and cases without query signing. */
    int unsigned_payload = json_is_true(json_object_get(ctx, "unsigned_payload"));
    int query_signing = !json_is_false(json_object_get(ctx, "query_signing"));
    if (unsigned_payload)
        req.payload_hash = NULL;
    if (!json_is_true(json_object_get(ctx, "sign_body")) && !unsigned_payload)
        req.flags |= SIO_SIGV4_NO_CONTENT_SHA256;
    if (json_is_true(json_object_get(ctx, "omit_session_token")))
        req.flags |= SIO_SIGV4_TOKEN_AFTER;

    /* Authorization header signing. */
    sio_code rc = sio_sigv4_sign(&req, &creds, &res, &err);
    CHECK_EQ_U64(rc, SIO_OK);
    if (rc == SIO_OK) {
        char line[1024];
        pjoin(path, sizeof path, dir, "header-canonical-request.txt", "");
        ok &= same_as_file(res.canonical_request, path);
        pjoin(path, sizeof path, dir, "header-string-to-sign.txt", "");
        ok &= same_as_file(res.string_to_sign, path);
        pjoin(path, sizeof path, dir, "header-signature.txt", "");
        char *sig = read_file(path, NULL);
        if (sig)
            chomp(sig);
        CHECK_STR(res.signature, sig);
        ok &= sig && strcmp(res.signature, sig) == 0;
        free(sig);
        /* The signed request carries our Authorization value. */
        pjoin(path, sizeof path, dir, "header-signed-request.txt", "");
        char *sreq = read_file(path, NULL);
        snprintf(line, sizeof line, "\nAuthorization:%s\n", res.authorization);
        CHECK(sreq && strstr(sreq, line));
        ok &= sreq && strstr(sreq, line) != NULL;
        free(sreq);
        sio_sigv4_result_free(&res);
    } else {
        fprintf(stderr, "%s (header): %s\n", name, err.msg);
        ok = 0;
    }

    /* Query-string (presigned URL) signing. */
    if (!query_signing)
        goto done;
    req.flags |= SIO_SIGV4_PRESIGN;
    req.expires = (uint32_t)json_integer_value(
        json_object_get(ctx, "expiration_in_seconds"));
    rc = sio_sigv4_sign(&req, &creds, &res, &err);
    CHECK_EQ_U64(rc, SIO_OK);
    if (rc == SIO_OK) {
        pjoin(path, sizeof path, dir, "query-canonical-request.txt", "");
        ok &= same_as_file(res.canonical_request, path);
        pjoin(path, sizeof path, dir, "query-string-to-sign.txt", "");
        ok &= same_as_file(res.string_to_sign, path);
        pjoin(path, sizeof path, dir, "query-signature.txt", "");
        char *sig = read_file(path, NULL);
        if (sig)
            chomp(sig);
        CHECK_STR(res.signature, sig);
        ok &= sig && strcmp(res.signature, sig) == 0;
        free(sig);
        CHECK(res.authorization == NULL);
        CHECK_EQ_U64(res.nheaders, 0);
        /* Same path and the same query parameters as the expected signed
         * request line (their order on the line does not matter). */
        pjoin(path, sizeof path, dir, "query-signed-request.txt", "");
        char *want = signed_target(path);
        CHECK(want != NULL);
        if (want) {
            char *wq = strchr(want, '?'), *gq = strchr(res.wire_path, '?');
            CHECK(wq && gq);
            if (wq && gq) {
                *wq++ = '\0';
                *gq++ = '\0';
                /* The expected line keeps the raw path as the request had
                 * it; ours is the caller's encoded path verbatim too. */
                CHECK_STR(res.wire_path, want);
                char *a = sorted_query(gq), *b = sorted_query(wq);
                CHECK_STR(a, b);
                ok &= strcmp(a, b) == 0 && strcmp(res.wire_path, want) == 0;
                free(a);
                free(b);
            } else {
                ok = 0;
            }
            free(want);
        } else {
            ok = 0;
        }
        sio_sigv4_result_free(&res);
    } else {
        fprintf(stderr, "%s (query): %s\n", name, err.msg);
        ok = 0;
    }
done:
    rawreq_free(&r);
    json_decref(ctx);
    return ok;
}

/* label names the vector set in messages. */
static void walk_v4(const char *dir, const char *label, suite_stats *st)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    CHECK(d != NULL);
    if (!d)
        return;
    while ((e = readdir(d))) {
        char sub[2048], ctx[4096];
        struct stat sb;
        if (e->d_name[0] == '.')
            continue;
        pjoin(sub, sizeof sub, dir, e->d_name, "");
        pjoin(ctx, sizeof ctx, sub, "context.json", "");
        if (stat(ctx, &sb) != 0)
            continue;
        const char *why = skip_reason(e->d_name);
        if (why) {
            printf("skip %s/%s: %s\n", label, e->d_name, why);
            st->skipped++;
            continue;
        }
        st->ran++;
        if (run_v4_case(sub, e->d_name))
            st->passed++;
        else
            fprintf(stderr, "FAIL %s/%s\n", label, e->d_name);
    }
    closedir(d);
}

/* ------------------------------------------------------------------ */
/* S3 rules the suites do not cover                                     */

static void test_uri_encode(void)
{
    char *out = NULL;
    static const struct {
        const char *in;
        int keep_slash;
        const char *want;
    } cases[] = {
        {"-._~AZaz09", 1, "-._~AZaz09"},
        {"a b+c=d%e", 1, "a%20b%2Bc%3Dd%25e"},
        {"dir/sub dir/k~1", 1, "dir/sub%20dir/k~1"},
        {"dir/sub", 0, "dir%2Fsub"},
        {"\xc3\xa9t\xc3\xa9", 1, "%C3%A9t%C3%A9"},
        {"%2F", 1, "%252F"},  /* no decoding: '%' is data */
        {"", 1, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sio_code rc = sio_sigv4_uri_encode(cases[i].in, strlen(cases[i].in),
                                           cases[i].keep_slash, 1024, &out,
                                           NULL);
        CHECK_EQ_U64(rc, SIO_OK);
        CHECK_STR(out, cases[i].want);
        free(out);
        out = NULL;
    }
    /* Bytes past a NUL are data too (len, not strlen). */
    CHECK_EQ_U64(sio_sigv4_uri_encode("a\0b", 3, 1, 64, &out, NULL), SIO_OK);
    CHECK_STR(out, "a%00b");
    free(out);
    /* The output limit holds. */
    sio_error err = {0};
    CHECK_EQ_U64(sio_sigv4_uri_encode("   ", 3, 1, 8, &out, &err),
                 SIO_ERR_LIMIT);
    CHECK(out == NULL);
    CHECK_EQ_U64(err.code, SIO_ERR_LIMIT);
}

static void test_sha256(void)
{
    char hex[65];
    CHECK_EQ_U64(sio_sigv4_sha256_hex("", 0, hex), SIO_OK);
    CHECK_STR(hex, SIO_SIGV4_EMPTY_SHA256);
    CHECK_EQ_U64(sio_sigv4_sha256_hex("abc", 3, hex), SIO_OK);
    CHECK_STR(hex,
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* An S3 GET of an object with a key that needs every encoding rule. */
static void test_s3_object_request(void)
{
    sio_sigv4_pair hdr[] = {{"Range", "bytes=0-1023"}};
    sio_sigv4_request req = {
        .method = "GET",
        .host = "127.0.0.1:9000",
        .path = "/bucket/dir//a b+c=d%e~f/\xe2\x82\xac/../x.tar",
        .headers = hdr,
        .nheaders = 1,
        .region = "us-east-1",
        .service = "s3",
        .amz_date = "20240102T030405Z",
    };
    sio_sigv4_creds creds = {"AKIDEXAMPLE", SUITE_SK, NULL};
    sio_sigv4_result res;
    sio_error err = {0};
    const char *enc =
        "/bucket/dir//a%20b%2Bc%3Dd%25e~f/%E2%82%AC/../x.tar";

    CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &res, &err), SIO_OK);
    /* No normalisation and one encoding, on the wire and in the signature. */
    CHECK_STR(res.wire_path, enc);
    char want[1024];
    snprintf(want, sizeof want,
             "GET\n%s\n\n"
             "host:127.0.0.1:9000\n"
             "range:bytes=0-1023\n"
             "x-amz-content-sha256:UNSIGNED-PAYLOAD\n"
             "x-amz-date:20240102T030405Z\n\n"
             "host;range;x-amz-content-sha256;x-amz-date\n"
             "UNSIGNED-PAYLOAD",
             enc);
    CHECK_STR(res.canonical_request, want);
    CHECK_STR(res.signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
    CHECK_EQ_U64(res.nheaders, 3);
    CHECK_STR(res.headers[0], "X-Amz-Date: 20240102T030405Z");
    CHECK_STR(res.headers[1], "X-Amz-Content-SHA256: UNSIGNED-PAYLOAD");
    CHECK(strncmp(res.headers[2], "Authorization: AWS4-HMAC-SHA256 "
                                  "Credential=AKIDEXAMPLE/20240102/us-east-1/"
                                  "s3/aws4_request, SignedHeaders=host;range;"
                                  "x-amz-content-sha256;x-amz-date, Signature=",
                  strlen("Authorization: AWS4-HMAC-SHA256 "
                         "Credential=AKIDEXAMPLE/20240102/us-east-1/"
                         "s3/aws4_request, SignedHeaders=host;range;"
                         "x-amz-content-sha256;x-amz-date, Signature=")) == 0);
    CHECK_STR(res.headers[2] + strlen("Authorization: "), res.authorization);
    CHECK_EQ_U64(strlen(res.signature), 64);
    /* The string to sign hashes the canonical request. */
    char h[65];
    sio_sigv4_sha256_hex(res.canonical_request, strlen(res.canonical_request),
                         h);
    snprintf(want, sizeof want,
             "AWS4-HMAC-SHA256\n20240102T030405Z\n"
             "20240102/us-east-1/s3/aws4_request\n%s", h);
    CHECK_STR(res.string_to_sign, want);
    /* Signing is a pure function. */
    sio_sigv4_result again;
    CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &again, NULL), SIO_OK);
    CHECK_STR(again.authorization, res.authorization);
    sio_sigv4_result_free(&again);
    /* A different secret gives a different signature. */
    creds.secret_key = "another-secret";
    CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &again, NULL), SIO_OK);
    CHECK(strcmp(again.signature, res.signature) != 0);
    sio_sigv4_result_free(&again);
    sio_sigv4_result_free(&res);
    CHECK(res.authorization == NULL && res.nheaders == 0);
}

/* ListObjectsV2 with a session token and the explicit empty-body hash. */
static void test_s3_list_request(void)
{
    sio_sigv4_pair q[] = {
        {"prefix", "train/shard 0+"},
        {"list-type", "2"},
        {"continuation-token", "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="},
        {"delimiter", "/"},
        {"max-keys", "1000"},
        {"fetch-owner", NULL},
    };
    sio_sigv4_request req = {
        .method = "GET",
        .host = "bucket.s3.us-west-2.amazonaws.com",
        .path = "/",
        .query = q,
        .nquery = sizeof q / sizeof q[0],
        .payload_hash = SIO_SIGV4_EMPTY_SHA256,
        .region = "us-west-2",
        .service = "s3",
        .amz_date = "20240102T030405Z",
    };
    sio_sigv4_creds creds = {"AKIDEXAMPLE", SUITE_SK, "token/with+chars="};
    sio_sigv4_result res;
    const char *query =
        "continuation-token=1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36Hy4vbOwM%3D"
        "&delimiter=%2F&fetch-owner=&list-type=2&max-keys=1000"
        "&prefix=train%2Fshard%200%2B";
    char want[2048];

    CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &res, NULL), SIO_OK);
    snprintf(want, sizeof want, "/?%s", query);
    CHECK_STR(res.wire_path, want);
    snprintf(want, sizeof want,
             "GET\n/\n%s\n"
             "host:bucket.s3.us-west-2.amazonaws.com\n"
             "x-amz-content-sha256:%s\n"
             "x-amz-date:20240102T030405Z\n"
             "x-amz-security-token:token/with+chars=\n\n"
             "host;x-amz-content-sha256;x-amz-date;x-amz-security-token\n%s",
             query, SIO_SIGV4_EMPTY_SHA256, SIO_SIGV4_EMPTY_SHA256);
    CHECK_STR(res.canonical_request, want);
    CHECK_EQ_U64(res.nheaders, 4);
    CHECK_STR(res.headers[2], "X-Amz-Security-Token: token/with+chars=");
    /* sio_sigv4_wire_path() gives the same string without signing. */
    char *wire = NULL;
    CHECK_EQ_U64(sio_sigv4_wire_path(&req, &wire, NULL), SIO_OK);
    CHECK_STR(wire, res.wire_path);
    free(wire);
    sio_sigv4_result_free(&res);
}

/* The published example of the S3 docs' presigned URL (GET test.txt,
 * 86400 s): checks presigning with S3 rules. */
static void test_s3_presign(void)
{
    sio_sigv4_request req = {
        .method = "GET",
        .host = "examplebucket.s3.amazonaws.com",
        .path = "/test.txt",
        .region = "us-east-1",
        .service = "s3",
        .amz_date = "20130524T000000Z",
        .expires = 86400,
        .flags = SIO_SIGV4_PRESIGN,
    };
    sio_sigv4_creds creds = {"AKIAIOSFODNN7EXAMPLE",
                             "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", NULL};
    sio_sigv4_result res;
    CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &res, NULL), SIO_OK);
    CHECK_STR(res.signature,
              "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
    CHECK_STR(res.wire_path,
              "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
              "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1"
              "%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z"
              "&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
              "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c26"
              "5957d157751f604d404");
    sio_sigv4_result_free(&res);
}

/* The published examples of the S3 docs' header signing (same keys). */
static void test_s3_docs_examples(void)
{
    sio_sigv4_creds creds = {"AKIAIOSFODNN7EXAMPLE",
                             "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", NULL};
    sio_sigv4_pair range[] = {{"Range", "bytes=0-9"}};
    sio_sigv4_request get = {
        .method = "GET",
        .host = "examplebucket.s3.amazonaws.com",
        .path = "/test.txt",
        .headers = range,
        .nheaders = 1,
        .payload_hash = SIO_SIGV4_EMPTY_SHA256,
        .region = "us-east-1",
        .service = "s3",
        .amz_date = "20130524T000000Z",
    };
    sio_sigv4_result res;
    CHECK_EQ_U64(sio_sigv4_sign(&get, &creds, &res, NULL), SIO_OK);
    CHECK_STR(res.signature,
              "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    sio_sigv4_result_free(&res);

    sio_sigv4_pair q[] = {{"max-keys", "2"}, {"prefix", "J"}};
    sio_sigv4_request list = {
        .method = "GET",
        .host = "examplebucket.s3.amazonaws.com",
        .path = "/",
        .query = q,
        .nquery = 2,
        .payload_hash = SIO_SIGV4_EMPTY_SHA256,
        .region = "us-east-1",
        .service = "s3",
        .amz_date = "20130524T000000Z",
    };
    CHECK_EQ_U64(sio_sigv4_sign(&list, &creds, &res, NULL), SIO_OK);
    CHECK_STR(res.signature,
              "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
    CHECK_STR(res.wire_path, "/?max-keys=2&prefix=J");
    sio_sigv4_result_free(&res);
}

/* Header canonicalisation: case, trimming, repeated names, empty values. */
static void test_headers(void)
{
    sio_sigv4_pair hdr[] = {
        {"X-Amz-Meta-B", "  two   words\there  "},
        {"x-amz-meta-a", "1"},
        {"X-AMZ-META-A", " 2 "},
        {"x-amz-meta-empty", ""},
        {"x-amz-meta-null", NULL},
    };
    sio_sigv4_request req = {
        .method = "HEAD", .host = "h", .path = "/k", .headers = hdr,
        .nheaders = 5, .region = "r", .service = "s3",
        .amz_date = "20240102T030405Z",
        .flags = SIO_SIGV4_NO_CONTENT_SHA256,
    };
    sio_sigv4_creds creds = {"AK", "SK", NULL};
    sio_sigv4_result res;
    CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &res, NULL), SIO_OK);
    CHECK_STR(res.canonical_request,
              "HEAD\n/k\n\nhost:h\nx-amz-date:20240102T030405Z\n"
              "x-amz-meta-a:1,2\nx-amz-meta-b:two words here\n"
              "x-amz-meta-empty:\nx-amz-meta-null:\n\n"
              "host;x-amz-date;x-amz-meta-a;x-amz-meta-b;x-amz-meta-empty;"
              "x-amz-meta-null\nUNSIGNED-PAYLOAD");
    CHECK_EQ_U64(res.nheaders, 2); /* X-Amz-Date, Authorization */
    sio_sigv4_result_free(&res);
}

/* Generic mode: normalisation and double encoding of an encoded path. */
static void test_generic_path(void)
{
    sio_sigv4_request req = {
        .method = "GET", .host = "h", .path = "/a/./b//c/../d%20e/",
        .region = "r", .service = "svc", .amz_date = "20240102T030405Z",
        .payload_hash = SIO_SIGV4_EMPTY_SHA256, .flags = SIO_SIGV4_GENERIC,
    };
    sio_sigv4_creds creds = {"AK", "SK", NULL};
    sio_sigv4_result res;
    CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &res, NULL), SIO_OK);
    CHECK(strncmp(res.canonical_request, "GET\n/a/b/d%2520e/\n", 18) == 0);
    CHECK_STR(res.wire_path, "/a/./b//c/../d%20e/");
    sio_sigv4_result_free(&res);
    static const struct {
        const char *in, *want;
    } norm[] = {
        {"/", "/"},   {"//", "/"},     {"/..", "/"},  {"/a/..", "/"},
        {"/a/../", "/"}, {"/./a", "/a"}, {"/a/b/../../..", "/"},
        {"/a//", "/a/"},
    };
    for (size_t i = 0; i < sizeof norm / sizeof norm[0]; i++) {
        char want[64];
        req.path = norm[i].in;
        CHECK_EQ_U64(sio_sigv4_sign(&req, &creds, &res, NULL), SIO_OK);
        snprintf(want, sizeof want, "GET\n%s\n", norm[i].want);
        CHECK(res.canonical_request &&
              strncmp(res.canonical_request, want, strlen(want)) == 0);
        sio_sigv4_result_free(&res);
    }
}

/* Bad input is refused with the right code, secrets are never quoted, and
 * a failed call leaves nothing to free. */
static void test_errors(void)
{
    const char *secret = "SECRET-must-not-leak";
    const char *token = "TOKEN-must-not-leak";
    sio_sigv4_pair hdr[1] = {{"x-custom", "ok"}};
    sio_sigv4_request good = {
        .method = "GET", .host = "h", .path = "/k", .headers = hdr,
        .nheaders = 1, .region = "us-east-1", .service = "s3",
        .amz_date = "20240102T030405Z",
    };
    sio_sigv4_creds creds = {"AK", secret, token};
    sio_sigv4_result res;
    sio_error err;

    CHECK_EQ_U64(sio_sigv4_sign(&good, &creds, &res, NULL), SIO_OK);
    sio_sigv4_result_free(&res);

#define EXPECT_FAIL(req_, creds_, code_)                                    \
    do {                                                                    \
        memset(&err, 0, sizeof err);                                        \
        CHECK_EQ_U64(sio_sigv4_sign(&(req_), &(creds_), &res, &err), code_); \
        CHECK_EQ_U64(err.code, code_);                                      \
        CHECK(strstr(err.msg, secret) == NULL);                             \
        CHECK(strstr(err.msg, token) == NULL);                              \
        CHECK(res.authorization == NULL && res.canonical_request == NULL);  \
    } while (0)

    sio_sigv4_request r = good;
    r.path = "k";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    r = good;
    r.amz_date = "2024-01-02T03:04:05Z";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    r = good;
    r.payload_hash = "E3B0";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    r = good;
    r.region = "us east";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    r = good;
    r.method = "GE T";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    r = good;
    r.host = "h\r\nX: y";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);

    /* Header injection and reserved names. */
    sio_sigv4_pair bad[1] = {{"x-custom", "a\r\nInjected: 1"}};
    r = good;
    r.headers = bad;
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    bad[0].name = "Bad Name";
    bad[0].value = "v";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    bad[0].name = "X-Amz-Date";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    bad[0].name = "authorization";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    bad[0].name = "Host";
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);

    /* Credentials. */
    sio_sigv4_creds c = creds;
    c.access_key = "";
    EXPECT_FAIL(good, c, SIO_ERR_AUTH);
    c = creds;
    c.secret_key = NULL;
    EXPECT_FAIL(good, c, SIO_ERR_AUTH);
    c = creds;
    c.access_key = "AK/evil";
    EXPECT_FAIL(good, c, SIO_ERR_AUTH);
    c = creds;
    c.session_token = "TOKEN-must-not-leak\n";
    EXPECT_FAIL(good, c, SIO_ERR_AUTH);

    /* Limits. */
    char *big = malloc(SIO_SIGV4_PATH_MAX + 2);
    memset(big, 'a', SIO_SIGV4_PATH_MAX + 1);
    big[0] = '/';
    big[SIO_SIGV4_PATH_MAX + 1] = '\0';
    r = good;
    r.path = big;
    EXPECT_FAIL(r, creds, SIO_ERR_LIMIT);
    big[SIO_SIGV4_PATH_MAX] = '\0'; /* exactly at the limit is fine */
    CHECK_EQ_U64(sio_sigv4_sign(&r, &creds, &res, NULL), SIO_OK);
    sio_sigv4_result_free(&res);
    free(big);

    char *longval = malloc(SIO_SIGV4_VALUE_MAX + 2);
    memset(longval, 'v', SIO_SIGV4_VALUE_MAX + 1);
    longval[SIO_SIGV4_VALUE_MAX + 1] = '\0';
    sio_sigv4_pair lh[1] = {{"x-long", longval}};
    r = good;
    r.headers = lh;
    EXPECT_FAIL(r, creds, SIO_ERR_LIMIT);
    free(longval);

    sio_sigv4_pair many[SIO_SIGV4_QUERY_MAX + 1];
    for (size_t i = 0; i <= SIO_SIGV4_QUERY_MAX; i++)
        many[i] = (sio_sigv4_pair){"k", "v"};
    r = good;
    r.query = many;
    r.nquery = SIO_SIGV4_QUERY_MAX + 1;
    EXPECT_FAIL(r, creds, SIO_ERR_LIMIT);
    r.nquery = SIO_SIGV4_QUERY_MAX;
    CHECK_EQ_U64(sio_sigv4_sign(&r, &creds, &res, NULL), SIO_OK);
    sio_sigv4_result_free(&res);

    char *longkey = malloc(SIO_SIGV4_KEY_MAX + 2);
    memset(longkey, 'k', SIO_SIGV4_KEY_MAX + 1);
    longkey[SIO_SIGV4_KEY_MAX + 1] = '\0';
    c = creds;
    c.secret_key = longkey;
    EXPECT_FAIL(good, c, SIO_ERR_LIMIT);
    free(longkey);

    /* Presigning needs a lifetime and owns the X-Amz-* parameters. */
    r = good;
    r.flags = SIO_SIGV4_PRESIGN;
    r.expires = 0;
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    r.expires = SIO_SIGV4_EXPIRES_MAX + 1;
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
    sio_sigv4_pair xq[1] = {{"X-Amz-Signature", "x"}};
    r.expires = 60;
    r.query = xq;
    r.nquery = 1;
    EXPECT_FAIL(r, creds, SIO_ERR_INVALID);
#undef EXPECT_FAIL

    /* Nothing secret reaches the canonical request or the string to sign,
     * except the session token, which S3 signs. */
    CHECK_EQ_U64(sio_sigv4_sign(&good, &creds, &res, NULL), SIO_OK);
    CHECK(strstr(res.canonical_request, secret) == NULL);
    CHECK(strstr(res.string_to_sign, secret) == NULL);
    CHECK(strstr(res.authorization, secret) == NULL);
    CHECK(strstr(res.canonical_request, token) != NULL);
    sio_sigv4_result_free(&res);
}

/* The vectors botocore made (mksigv4.py): every case listed in its
 * cases.json runs and passes. */
static void test_botocore_vectors(void)
{
    char dir[2048], path[2100];
    json_error_t jerr;
    suite_stats st = {0};
    fixture_path(dir, sizeof dir, "sigv4");
    snprintf(path, sizeof path, "%s/cases.json", dir);
    json_t *index = json_load_file(path, 0, &jerr);
    CHECK(index != NULL);
    size_t listed = json_array_size(json_object_get(index, "cases"));
    snprintf(path, sizeof path, "%s/v4", dir);
    walk_v4(path, "botocore vectors", &st);
    printf("botocore %s vectors: %d ran, %d passed, %d skipped\n",
           json_string_value(json_object_get(index, "botocore")), st.ran,
           st.passed, st.skipped);
    CHECK(listed >= 40);
    CHECK_EQ_U64(st.ran, listed);
    CHECK_EQ_U64(st.passed, st.ran);
    json_decref(index);
}

/* The conformance test on Amazon's suites (../shared/testdata/sigv4). */
static int run_upstream(void)
{
    char dir[1024];
    suite_stats classic = {0}, v4 = {0};
    int rc = conformance_missing(shared_path(dir, sizeof dir, "testdata/sigv4"));
    if (rc)
        return rc;
    walk_classic(shared_path(dir, sizeof dir, "testdata/sigv4/aws4_testsuite"),
                 "", &classic);
    walk_v4(shared_path(dir, sizeof dir,
                        "testdata/sigv4/aws-signing-test-suite/v4"),
            "aws-signing-test-suite/v4", &v4);
    printf("aws4_testsuite: %d ran, %d passed, %d skipped\n", classic.ran,
           classic.passed, classic.skipped);
    printf("aws-signing-test-suite/v4: %d ran, %d passed, %d skipped\n",
           v4.ran, v4.passed, v4.skipped);
    /* Both suites must have been found and every case run must pass. */
    CHECK(classic.ran >= 30);
    CHECK(v4.ran >= 38);
    CHECK_EQ_U64(classic.passed, classic.ran);
    CHECK_EQ_U64(v4.passed, v4.ran);
    return 0;
}

int main(int argc, char **argv)
{
    int upstream = check_upstream_arg(argc, argv);
    if (upstream) {
        int rc = run_upstream();
        if (rc)
            return rc;
        CHECK_MAIN_END();
    }
    test_uri_encode();
    test_sha256();
    test_s3_object_request();
    test_s3_list_request();
    test_s3_presign();
    test_s3_docs_examples();
    test_headers();
    test_generic_path();
    test_errors();
    test_botocore_vectors();
    CHECK_MAIN_END();
}
