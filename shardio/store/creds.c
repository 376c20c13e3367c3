/*
 * creds.c — the AWS credential provider chain and its refresher.
 *
 * Threading: one mutex guards the current credentials, the chosen source
 * and the loading flag; network fetches run without it held, so readers
 * keep getting the current snapshot during a refresh. A refresher thread
 * is started when the first temporary credentials arrive; it sleeps on a
 * condition variable until refresh_before_s before expiry (or until
 * destroy) and fetches from the same source.
 *
 * Ownership: the provider owns its copies of the configuration and the
 * current secrets (wiped on replace and destroy); snapshots belong to the
 * caller. Secrets never reach a log line or an error message: errors name
 * files, URLs, HTTP status and STS error codes only.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/creds.h"
#include "store/s3xml.h"
#include "store/url.h"

#define DEF_REFRESH_BEFORE_S 300u
#define DEF_IMDS_TIMEOUT_MS 1000u
/* STS gets the engine's usual retries; a credentials endpoint on the
 * local node answers fast or not at all. */
#define LOCAL_ENDPOINT_RETRIES 1
/* After a failed refresh, try again after this long (or sooner when the
 * credentials expire sooner). */
#define REFRESH_RETRY_S 30
/* IMDS session token lifetime asked for (the maximum IMDS allows). */
#define IMDS_TOKEN_TTL "21600"
/* Longest IMDS role name / token taken from an answer. */
#define IMDS_FIELD_MAX 4096u
/* Bound on credential JSON documents (a few hundred bytes in practice). */
#define CREDS_JSON_MAX (64u << 10)

enum { SRC_NONE, SRC_ENV, SRC_PROFILE, SRC_WEBID, SRC_CONTAINER, SRC_IMDS };
static const char *const src_names[] = {"", "env", "profile", "web-identity",
                                        "container", "imds"};

struct sio_creds {
    sio_fetch *fetch;
    char *profile, *region, *sts_endpoint;
    int profile_explicit;
    uint32_t refresh_before_s, imds_timeout_ms;
    sio_logger log;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int loaded, loading, stop;
    int source;
    /* web identity parameters of the chosen source (from env or profile) */
    char *role_arn, *token_file, *session_name;
    sio_creds_value cur;
    pthread_t thread;
    int thread_started;
};

/* Helpers ---------------------------------------------------------------- */

static void wipe_free(char *s)
{
    if (s) {
        volatile char *p = s;
        while (*p)
            *p++ = 0;
        free(s);
    }
}

void sio_creds_value_free(sio_creds_value *v)
{
    if (!v)
        return;
    wipe_free(v->access_key);
    wipe_free(v->secret_key);
    wipe_free(v->session_token);
    memset(v, 0, sizeof *v);
}

static sio_code value_copy(sio_creds_value *dst, const sio_creds_value *src)
{
    memset(dst, 0, sizeof *dst);
    dst->access_key = strdup(src->access_key);
    dst->secret_key = strdup(src->secret_key);
    dst->session_token = src->session_token ? strdup(src->session_token) : NULL;
    dst->expires_at = src->expires_at;
    if (!dst->access_key || !dst->secret_key ||
        (src->session_token && !dst->session_token)) {
        sio_creds_value_free(dst);
        return SIO_ERR_NOMEM;
    }
    return SIO_OK;
}

/* Build a value from borrowed strings; empty token means none. */
static sio_code value_set(sio_creds_value *v, const char *ak, const char *sk,
                          const char *tok, int64_t exp, sio_error *err)
{
    memset(v, 0, sizeof *v);
    if (!ak || !*ak || !sk || !*sk)
        return sio_seterr(err, SIO_ERR_AUTH, "incomplete credentials");
    if (strlen(ak) > SIO_SIGV4_KEY_MAX || strlen(sk) > SIO_SIGV4_KEY_MAX ||
        (tok && strlen(tok) > SIO_SIGV4_TOKEN_MAX))
        return sio_seterr(err, SIO_ERR_LIMIT, "credential value too long");
    sio_creds_value src = {(char *)(uintptr_t)ak, (char *)(uintptr_t)sk,
                           (tok && *tok) ? (char *)(uintptr_t)tok : NULL, exp};
    if (value_copy(v, &src))
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    return SIO_OK;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

static int env_true(const char *name)
{
    const char *v = env(name);
    return v && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* Read a whole small file into a malloc'd NUL-terminated buffer. */
static sio_code read_file(const char *path, size_t max, char **out,
                          size_t *len, sio_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    char *buf = NULL;
    size_t n = 0;
    sio_code rc = SIO_OK;

    *out = NULL;
    if (fd < 0)
        return sio_seterr(err, errno == ENOENT ? SIO_ERR_NOTFOUND : SIO_ERR_IO,
                          "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = sio_seterr(err, SIO_ERR_IO, "not a regular file: %s", path);
        goto out;
    }
    if ((uint64_t)st.st_size > max) {
        rc = sio_seterr(err, SIO_ERR_LIMIT, "%s is larger than %zu bytes",
                        path, max);
        goto out;
    }
    buf = malloc(max + 1);
    if (!buf) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (;;) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = sio_seterr(err, SIO_ERR_IO, "reading %s: %s", path,
                            strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max) {
            rc = sio_seterr(err, SIO_ERR_LIMIT, "%s is larger than %zu bytes",
                            path, max);
            goto out;
        }
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
out:
    if (buf) {
        memset(buf, 0, n);
        free(buf);
    }
    close(fd);
    return rc;
}

/* Trim trailing whitespace and newlines in place (token files). */
static void rtrim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

/* INI ----------------------------------------------------------------------- */

/* Walk lines; calls fn(section, key, value) for each key=value. Returns
 * SIO_ERR_LIMIT on an over-long line. */
typedef int (*ini_fn)(void *ud, const char *sec, const char *key,
                      const char *val);

static sio_code ini_walk(const char *text, size_t len, ini_fn fn, void *ud)
{
    char line[SIO_CREDS_LINE_MAX + 1];
    char sec[SIO_CREDS_LINE_MAX + 1] = "";
    size_t i = 0;
    int have_sec = 0;
    sio_code rc = SIO_OK;

    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        size_t ll = j - i;
        if (ll > SIO_CREDS_LINE_MAX) {
            rc = SIO_ERR_LIMIT;
            break;
        }
        memcpy(line, text + i, ll);
        line[ll] = '\0';
        i = j + 1;
        if (ll && line[ll - 1] == '\r')
            line[--ll] = '\0';
        /* Indented lines belong to a nested block (e.g. "s3 =\n  x = y"). */
        int indented = ll && (line[0] == ' ' || line[0] == '\t');
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#' || *p == ';')
            continue;
        if (*p == '[') {
            char *e = strrchr(p, ']');
            if (!e)
                continue;
            *e = '\0';
            p++;
            while (*p == ' ' || *p == '\t')
                p++;
            size_t sl = strlen(p);
            while (sl && (p[sl - 1] == ' ' || p[sl - 1] == '\t'))
                p[--sl] = '\0';
            /* "[profile   dev]" is "[profile dev]". */
            if (strncmp(p, "profile", 7) == 0 && (p[7] == ' ' || p[7] == '\t')) {
                char *n = p + 7;
                while (*n == ' ' || *n == '\t')
                    n++;
                snprintf(sec, sizeof sec, "profile %s", n);
            } else {
                snprintf(sec, sizeof sec, "%s", p);
            }
            have_sec = 1;
            continue;
        }
        if (indented || !have_sec)
            continue;
        char *eq = strchr(p, '=');
        if (!eq)
            continue;
        char *k = p, *ke = eq;
        while (ke > k && (ke[-1] == ' ' || ke[-1] == '\t'))
            ke--;
        *ke = '\0';
        char *v = eq + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t vl = strlen(v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            v[--vl] = '\0';
        if (fn(ud, sec, k, v))
            break;
    }
    memset(line, 0, sizeof line);
    return rc;
}

typedef struct ini_q {
    const char *section, *key;
    char *out;
    size_t outlen;
    int found, toolong, sec_seen;
} ini_q;

static int ini_get_fn(void *ud, const char *sec, const char *key,
                      const char *val)
{
    ini_q *q = ud;
    if (strcmp(sec, q->section) != 0 || strcasecmp(key, q->key) != 0)
        return 0;
    size_t vl = strlen(val);
    if (vl >= q->outlen) {
        q->toolong = 1;
        return 1;
    }
    memcpy(q->out, val, vl + 1);
    q->found = 1; /* the last occurrence wins, as in the SDKs */
    return 0;
}

sio_code sio_creds_ini_get(const char *text, size_t len, const char *section,
                           const char *key, char *out, size_t outlen)
{
    ini_q q = {section, key, out, outlen, 0, 0, 0};
    sio_code rc;
    if (!outlen)
        return SIO_ERR_LIMIT;
    out[0] = '\0';
    rc = ini_walk(text, len, ini_get_fn, &q);
    if (rc)
        return rc;
    if (q.toolong) {
        out[0] = '\0';
        return SIO_ERR_LIMIT;
    }
    return q.found ? SIO_OK : SIO_ERR_NOTFOUND;
}

/* Section presence needs the header lines, which ini_walk does not report
 * on their own; scan for them directly. */
int sio_creds_ini_has_section(const char *text, size_t len,
                              const char *section)
{
    size_t i = 0, sl = strlen(section);
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        const char *p = text + i, *e = text + j;
        while (p < e && (*p == ' ' || *p == '\t'))
            p++;
        if (p < e && *p == '[') {
            p++;
            while (p < e && (*p == ' ' || *p == '\t'))
                p++;
            const char *q = e;
            while (q > p && q[-1] != ']')
                q--;
            if (q > p) {
                q--; /* at ']' */
                while (q > p && (q[-1] == ' ' || q[-1] == '\t'))
                    q--;
                size_t n = (size_t)(q - p);
                if (strncmp(section, "profile ", 8) == 0 && n > 8 &&
                    strncmp(p, "profile", 7) == 0) {
                    const char *a = p + 7;
                    while (a < q && (*a == ' ' || *a == '\t'))
                        a++;
                    if ((size_t)(q - a) == sl - 8 &&
                        memcmp(a, section + 8, sl - 8) == 0)
                        return 1;
                } else if (n == sl && memcmp(p, section, sl) == 0) {
                    return 1;
                }
            }
        }
        i = j + 1;
    }
    return 0;
}

/* HTTP for providers ---------------------------------------------------- */

typedef struct plain_req {
    const char *url;
    const char *const *headers;
    size_t nheaders;
} plain_req;

static sio_code plain_prepare(void *ctx, const sio_fetch_attempt *a,
                              char **url, struct curl_slist **headers,
                              sio_error *err)
{
    plain_req *r = ctx;
    (void)a;
    *url = strdup(r->url);
    if (!*url)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < r->nheaders; i++) {
        struct curl_slist *n = curl_slist_append(*headers, r->headers[i]);
        if (!n)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        *headers = n;
    }
    return SIO_OK;
}

static sio_code http_do(sio_creds *c, const char *method, const char *url,
                        const char *const *headers, size_t nheaders,
                        const char *body, int local, sio_fetch_response *resp,
                        sio_error *err)
{
    char shown[512];
    plain_req pr = {url, headers, nheaders};
    sio_fetch_request req;
    memset(&req, 0, sizeof req);
    sio_url_redact(url, shown, sizeof shown);
    req.method = method;
    req.display_url = shown;
    req.prepare = plain_prepare;
    req.ctx = &pr;
    req.body = body;
    req.body_len = body ? strlen(body) : 0;
    req.body_max = CREDS_JSON_MAX;
    req.max_retries = local ? LOCAL_ENDPOINT_RETRIES : -1;
    /* Credential endpoints are set by the environment, not by job
     * sources: IMDS and container credentials live at link-local
     * addresses. */
    req.trusted_endpoint = 1;
    /* Counted as the s3 backend's "credentials" operation. */
    req.backend = SIO_STORE_S3;
    if (local) {
        req.timeout_ms = c->imds_timeout_ms;
        req.connect_timeout_ms = c->imds_timeout_ms;
    }
    if (!c->fetch)
        return sio_seterr(err, SIO_ERR_INVALID, "no fetch engine");
    return sio_fetch_perform(c->fetch, &req, resp, err);
}

/* {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"} as the
 * container endpoint and IMDS send them. */
static sio_code parse_json_creds(const char *body, size_t len, const char *who,
                                 sio_creds_value *v, sio_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    sio_code rc;
    const char *ak, *sk, *tok, *exp, *code;
    int64_t expires = 0;

    if (!root || !json_is_object(root)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "%s: credentials are not a JSON "
                        "object", who);
        goto out;
    }
    code = json_string_value(json_object_get(root, "Code"));
    if (code && strcmp(code, "Success") != 0) {
        char safe[64];
        snprintf(safe, sizeof safe, "%s", code);
        for (char *p = safe; *p; p++)
            if (!isalnum((unsigned char)*p))
                *p = '?';
        rc = sio_seterr(err, SIO_ERR_AUTH, "%s: credentials Code=%s", who,
                        safe);
        goto out;
    }
    ak = json_string_value(json_object_get(root, "AccessKeyId"));
    sk = json_string_value(json_object_get(root, "SecretAccessKey"));
    tok = json_string_value(json_object_get(root, "Token"));
    exp = json_string_value(json_object_get(root, "Expiration"));
    if (!ak || !sk) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "%s: AccessKeyId or "
                        "SecretAccessKey missing", who);
        goto out;
    }
    if (exp && sio_s3xml_parse_iso8601(exp, &expires) != SIO_OK) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "%s: bad Expiration", who);
        goto out;
    }
    rc = value_set(v, ak, sk, tok, expires, err);
out:
    if (root)
        json_decref(root);
    return rc;
}

/* Providers --------------------------------------------------------------- */

static sio_code from_env(sio_creds_value *v, sio_error *err)
{
    const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
    if (!ak || !sk)
        return SIO_ERR_NOTFOUND;
    return value_set(v, ak, sk, env("AWS_SESSION_TOKEN"), 0, err);
}

static void home_file(char *buf, size_t len, const char *envname,
                      const char *rel)
{
    const char *p = env(envname);
    const char *home = env("HOME");
    if (p)
        snprintf(buf, len, "%s", p);
    else
        snprintf(buf, len, "%s/.aws/%s", home ? home : "", rel);
}

static sio_code ini_take(const char *text, size_t len, const char *sec,
                         const char *key, char **out)
{
    char *buf = malloc(SIO_CREDS_VALUE_MAX);
    sio_code rc;
    *out = NULL;
    if (!buf)
        return SIO_ERR_NOMEM;
    rc = sio_creds_ini_get(text, len, sec, key, buf, SIO_CREDS_VALUE_MAX);
    if (rc == SIO_OK)
        *out = buf;
    else
        wipe_free(buf);
    return rc;
}

static sio_code fetch_webid(sio_creds *c, sio_creds_value *v, sio_error *err);

/* Shared credentials then config file. SIO_ERR_NOTFOUND: nothing there. */
static sio_code from_profile(sio_creds *c, sio_creds_value *v, sio_error *err)
{
    char cpath[4096], fpath[4096], sec[600];
    char *ctext = NULL, *ftext = NULL;
    size_t clen = 0, flen = 0;
    char *ak = NULL, *sk = NULL, *tok = NULL, *role = NULL, *tfile = NULL,
         *sess = NULL;
    int seen = 0;
    sio_code rc;

    home_file(cpath, sizeof cpath, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
    home_file(fpath, sizeof fpath, "AWS_CONFIG_FILE", "config");
    rc = read_file(cpath, SIO_CREDS_FILE_MAX, &ctext, &clen, err);
    if (rc && rc != SIO_ERR_NOTFOUND)
        goto out;
    rc = read_file(fpath, SIO_CREDS_FILE_MAX, &ftext, &flen, err);
    if (rc && rc != SIO_ERR_NOTFOUND)
        goto out;
    rc = SIO_OK;
    if (ctext && sio_creds_ini_has_section(ctext, clen, c->profile)) {
        seen = 1;
        (void)ini_take(ctext, clen, c->profile, "aws_access_key_id", &ak);
        (void)ini_take(ctext, clen, c->profile, "aws_secret_access_key", &sk);
        (void)ini_take(ctext, clen, c->profile, "aws_session_token", &tok);
    }
    /* The config file names profiles "[profile x]", except "[default]". */
    if (strcmp(c->profile, "default") == 0)
        snprintf(sec, sizeof sec, "default");
    else
        snprintf(sec, sizeof sec, "profile %s", c->profile);
    if (ftext && sio_creds_ini_has_section(ftext, flen, sec)) {
        seen = 1;
        if (!ak || !sk) {
            wipe_free(ak);
            wipe_free(sk);
            wipe_free(tok);
            ak = sk = tok = NULL;
            (void)ini_take(ftext, flen, sec, "aws_access_key_id", &ak);
            (void)ini_take(ftext, flen, sec, "aws_secret_access_key", &sk);
            (void)ini_take(ftext, flen, sec, "aws_session_token", &tok);
        }
        (void)ini_take(ftext, flen, sec, "role_arn", &role);
        (void)ini_take(ftext, flen, sec, "web_identity_token_file", &tfile);
        (void)ini_take(ftext, flen, sec, "role_session_name", &sess);
    }
    if (ak && sk) {
        rc = value_set(v, ak, sk, tok, 0, err);
        goto out;
    }
    if (role && tfile) {
        free(c->role_arn);
        free(c->token_file);
        free(c->session_name);
        c->role_arn = role;
        c->token_file = tfile;
        c->session_name = sess;
        role = tfile = sess = NULL;
        rc = fetch_webid(c, v, err);
        goto out;
    }
    if (!seen && c->profile_explicit)
        rc = sio_seterr(err, SIO_ERR_AUTH, "profile %s not found in %s or %s",
                        c->profile, cpath, fpath);
    else if (seen && c->profile_explicit)
        rc = sio_seterr(err, SIO_ERR_AUTH, "profile %s has no usable "
                        "credentials", c->profile);
    else
        rc = SIO_ERR_NOTFOUND;
out:
    wipe_free(ak);
    wipe_free(sk);
    wipe_free(tok);
    free(role);
    free(tfile);
    free(sess);
    if (ctext) {
        memset(ctext, 0, clen);
        free(ctext);
    }
    if (ftext) {
        memset(ftext, 0, flen);
        free(ftext);
    }
    return rc;
}

static void sts_url(sio_creds *c, char *buf, size_t len)
{
    const char *ep = c->sts_endpoint ? c->sts_endpoint
                   : env("AWS_ENDPOINT_URL_STS") ? env("AWS_ENDPOINT_URL_STS")
                                                 : env("AWS_ENDPOINT_URL");
    if (ep) {
        size_t n = strlen(ep);
        snprintf(buf, len, "%s%s", ep, (n && ep[n - 1] == '/') ? "" : "/");
    } else if (c->region) {
        snprintf(buf, len, "https://sts.%s.amazonaws.com/", c->region);
    } else {
        snprintf(buf, len, "https://sts.amazonaws.com/");
    }
}

/* Append "&name=<encoded value>" to a growing form body. */
static sio_code form_add(char **body, const char *name, const char *value,
                         sio_error *err)
{
    char *enc = NULL;
    sio_code rc = sio_sigv4_uri_encode(value, strlen(value), 0,
                                       3 * SIO_CREDS_TOKEN_FILE_MAX, &enc, err);
    if (rc)
        return rc;
    size_t ol = *body ? strlen(*body) : 0;
    size_t nl = ol + strlen(name) + strlen(enc) + 3;
    char *nb = realloc(*body, nl);
    if (!nb) {
        wipe_free(enc);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    snprintf(nb + ol, nl - ol, "%s%s=%s", ol ? "&" : "", name, enc);
    *body = nb;
    wipe_free(enc);
    return SIO_OK;
}

static sio_code fetch_webid(sio_creds *c, sio_creds_value *v, sio_error *err)
{
    char url[1024], sess[128];
    char *token = NULL, *body = NULL;
    size_t tlen = 0;
    sio_fetch_response resp;
    sio_s3_sts_creds sts;
    static const char *const hdrs[] = {
        "Content-Type: application/x-www-form-urlencoded",
        "Accept: application/xml"};
    sio_code rc;

    memset(&resp, 0, sizeof resp);
    memset(&sts, 0, sizeof sts);
    rc = read_file(c->token_file, SIO_CREDS_TOKEN_FILE_MAX, &token, &tlen, err);
    if (rc)
        goto out;
    rtrim(token);
    if (c->session_name)
        snprintf(sess, sizeof sess, "%s", c->session_name);
    else
        snprintf(sess, sizeof sess, "shardcast-%lld", (long long)time(NULL));
    if ((rc = form_add(&body, "Action", "AssumeRoleWithWebIdentity", err)) ||
        (rc = form_add(&body, "Version", "2011-06-15", err)) ||
        (rc = form_add(&body, "RoleArn", c->role_arn, err)) ||
        (rc = form_add(&body, "RoleSessionName", sess, err)) ||
        (rc = form_add(&body, "WebIdentityToken", token, err)))
        goto out;
    sts_url(c, url, sizeof url);
    rc = http_do(c, "POST", url, hdrs, 2, body, 0, &resp, err);
    if (rc)
        goto out;
    rc = sio_s3xml_parse_sts(resp.body, resp.body_len, &sts, err);
    if (rc)
        goto out;
    rc = value_set(v, sts.access_key_id, sts.secret_access_key,
                   sts.session_token, sts.expires_at, err);
out:
    if (token) {
        memset(token, 0, tlen);
        free(token);
    }
    wipe_free(body);
    if (resp.body)
        memset(resp.body, 0, resp.body_len);
    sio_fetch_response_free(&resp);
    sio_s3_sts_creds_free(&sts);
    return rc;
}

/* Hosts a plain-http container endpoint may name (the SDKs' rule: the
 * loopback, the ECS and EKS Pod Identity agents). */
static int container_host_ok(const sio_url *u)
{
    static const char *const ok[] = {"169.254.170.2", "169.254.170.23",
                                     "fd00:ec2::23", "localhost", "::1"};
    if (strcmp(u->scheme, "https") == 0)
        return 1;
    if (strcmp(u->scheme, "http") != 0)
        return 0;
    if (strncmp(u->host, "127.", 4) == 0)
        return 1;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcasecmp(u->host, ok[i]) == 0)
            return 1;
    return 0;
}

static sio_code fetch_container(sio_creds *c, sio_creds_value *v,
                                sio_error *err)
{
    char url[4096], hdr[SIO_CREDS_TOKEN_FILE_MAX + 32], shown[512];
    const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    const char *tokfile = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    const char *tokenv = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    const char *hdrs[1];
    size_t nh = 0;
    char *tok = NULL;
    size_t tlen = 0;
    sio_url u;
    sio_fetch_response resp;
    sio_code rc;

    memset(&resp, 0, sizeof resp);
    memset(&u, 0, sizeof u);
    hdr[0] = '\0';
    if (rel)
        snprintf(url, sizeof url, "http://169.254.170.2%s", rel);
    else
        snprintf(url, sizeof url, "%s", full);
    sio_url_redact(url, shown, sizeof shown);
    rc = sio_url_parse(url, &u, err);
    if (rc)
        goto out;
    if (!rel && !container_host_ok(&u)) {
        rc = sio_seterr(err, SIO_ERR_AUTH, "container credentials URL %s is "
                        "neither https nor a loopback or agent address",
                        shown);
        goto out;
    }
    if (tokfile) {
        rc = read_file(tokfile, SIO_CREDS_TOKEN_FILE_MAX, &tok, &tlen, err);
        if (rc)
            goto out;
        rtrim(tok);
    } else if (tokenv) {
        tok = strdup(tokenv);
        tlen = tok ? strlen(tok) : 0;
        if (!tok) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            goto out;
        }
    }
    if (tok) {
        if (strpbrk(tok, "\r\n")) {
            rc = sio_seterr(err, SIO_ERR_AUTH, "container authorization token "
                            "has a line break");
            goto out;
        }
        snprintf(hdr, sizeof hdr, "Authorization: %s", tok);
        hdrs[nh++] = hdr;
    }
    rc = http_do(c, "GET", url, hdrs, nh, NULL, 1, &resp, err);
    if (rc)
        goto out;
    rc = parse_json_creds(resp.body, resp.body_len, shown, v, err);
out:
    memset(hdr, 0, sizeof hdr);
    if (tok) {
        memset(tok, 0, tlen);
        free(tok);
    }
    if (resp.body)
        memset(resp.body, 0, resp.body_len);
    sio_fetch_response_free(&resp);
    sio_url_free(&u);
    return rc;
}

static sio_code fetch_imds(sio_creds *c, sio_creds_value *v, sio_error *err)
{
    char base[1024], url[2048], tokhdr[IMDS_FIELD_MAX + 64], role[256];
    const char *ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    const char *puth[] = {"X-aws-ec2-metadata-token-ttl-seconds: " IMDS_TOKEN_TTL};
    const char *geth[1];
    sio_fetch_response resp;
    sio_code rc;
    size_t n;

    memset(&resp, 0, sizeof resp);
    snprintf(base, sizeof base, "%s", ep ? ep : "http://169.254.169.254");
    n = strlen(base);
    if (n && base[n - 1] == '/')
        base[n - 1] = '\0';
    snprintf(url, sizeof url, "%s/latest/api/token", base);
    rc = http_do(c, "PUT", url, puth, 1, "", 1, &resp, err);
    if (rc)
        goto out;
    if (resp.body_len == 0 || resp.body_len > IMDS_FIELD_MAX ||
        strpbrk(resp.body, "\r\n")) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "IMDS token answer is malformed");
        goto out;
    }
    snprintf(tokhdr, sizeof tokhdr, "X-aws-ec2-metadata-token: %s", resp.body);
    geth[0] = tokhdr;
    sio_fetch_response_free(&resp);
    snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/",
             base);
    rc = http_do(c, "GET", url, geth, 1, NULL, 1, &resp, err);
    if (rc)
        goto out;
    n = strcspn(resp.body, "\r\n");
    if (n == 0 || n >= sizeof role) {
        rc = sio_seterr(err, SIO_ERR_AUTH, "IMDS has no instance role");
        goto out;
    }
    memcpy(role, resp.body, n);
    role[n] = '\0';
    for (char *p = role; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("+=,.@_-", *p)) {
            rc = sio_seterr(err, SIO_ERR_FORMAT, "IMDS role name is malformed");
            goto out;
        }
    sio_fetch_response_free(&resp);
    snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/%s",
             base, role);
    rc = http_do(c, "GET", url, geth, 1, NULL, 1, &resp, err);
    if (rc)
        goto out;
    rc = parse_json_creds(resp.body, resp.body_len, "IMDS", v, err);
out:
    memset(tokhdr, 0, sizeof tokhdr);
    if (resp.body)
        memset(resp.body, 0, resp.body_len);
    sio_fetch_response_free(&resp);
    return rc;
}

/* Fetch from a known source (refresh). */
static sio_code fetch_source(sio_creds *c, int src, sio_creds_value *v,
                             sio_error *err)
{
    switch (src) {
    case SRC_ENV: return from_env(v, err);
    case SRC_PROFILE: return from_profile(c, v, err);
    case SRC_WEBID: return fetch_webid(c, v, err);
    case SRC_CONTAINER: return fetch_container(c, v, err);
    case SRC_IMDS: return fetch_imds(c, v, err);
    default: return sio_seterr(err, SIO_ERR_AUTH, "no credential source");
    }
}

/* Walk the chain. */
static sio_code load_chain(sio_creds *c, sio_creds_value *v, int *src,
                           sio_error *err)
{
    sio_code rc;
    rc = from_env(v, err);
    if (rc != SIO_ERR_NOTFOUND) {
        *src = SRC_ENV;
        return rc;
    }
    rc = from_profile(c, v, err);
    if (rc != SIO_ERR_NOTFOUND) {
        *src = SRC_PROFILE;
        return rc;
    }
    if (env("AWS_WEB_IDENTITY_TOKEN_FILE") && env("AWS_ROLE_ARN")) {
        free(c->role_arn);
        free(c->token_file);
        free(c->session_name);
        c->role_arn = strdup(env("AWS_ROLE_ARN"));
        c->token_file = strdup(env("AWS_WEB_IDENTITY_TOKEN_FILE"));
        c->session_name = env("AWS_ROLE_SESSION_NAME")
                              ? strdup(env("AWS_ROLE_SESSION_NAME")) : NULL;
        if (!c->role_arn || !c->token_file)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        *src = SRC_WEBID;
        return fetch_webid(c, v, err);
    }
    if (env("AWS_CONTAINER_CREDENTIALS_FULL_URI") ||
        env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
        *src = SRC_CONTAINER;
        return fetch_container(c, v, err);
    }
    if (!env_true("AWS_EC2_METADATA_DISABLED")) {
        sio_error e;
        *src = SRC_IMDS;
        rc = fetch_imds(c, v, &e);
        if (rc == SIO_OK)
            return SIO_OK;
        return sio_seterr(err, SIO_ERR_AUTH,
                          "no AWS credentials found (tried env, shared files "
                          "profile %s, web identity, container, IMDS: %s)",
                          c->profile, e.msg);
    }
    return sio_seterr(err, SIO_ERR_AUTH,
                      "no AWS credentials found (tried env, shared files "
                      "profile %s, web identity, container; IMDS disabled)",
                      c->profile);
}

/* Refresher ----------------------------------------------------------------- */

static void *refresher(void *arg)
{
    sio_creds *c = arg;
    int64_t retry_at = 0;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        int64_t now = (int64_t)time(NULL);
        int64_t due = c->cur.expires_at - (int64_t)c->refresh_before_s;
        if (retry_at > due)
            due = retry_at;
        if (!c->cur.expires_at) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        if (now < due || c->loading) {
            struct timespec ts = {(time_t)(c->loading ? now + 1 : due), 0};
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            continue;
        }
        c->loading = 1;
        int src = c->source;
        pthread_mutex_unlock(&c->mu);
        sio_creds_value nv;
        sio_error e;
        sio_code rc = fetch_source(c, src, &nv, &e);
        pthread_mutex_lock(&c->mu);
        c->loading = 0;
        if (rc == SIO_OK) {
            sio_creds_value_free(&c->cur);
            c->cur = nv;
            retry_at = 0;
            SIO_LOG(&c->log, SIO_LOG_INFO,
                    "event=credentials_refreshed source=%s expires_in_s=%lld",
                    src_names[src],
                    (long long)(nv.expires_at ? nv.expires_at - now : 0));
        } else {
            int64_t left = c->cur.expires_at - now;
            int64_t wait = left / 4 < REFRESH_RETRY_S ? left / 4 : REFRESH_RETRY_S;
            retry_at = now + (wait < 1 ? 1 : wait);
            SIO_LOG(&c->log, SIO_LOG_WARN,
                    "event=credentials_refresh_failed source=%s reason=\"%s\"",
                    src_names[src], e.msg);
        }
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Public ------------------------------------------------------------------ */

sio_code sio_creds_create(const sio_creds_config *cfg, sio_creds **out,
                          sio_error *err)
{
    sio_creds *c = calloc(1, sizeof *c);
    const char *prof;
    *out = NULL;
    if (!c)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    c->fetch = cfg ? cfg->fetch : NULL;
    prof = (cfg && cfg->profile) ? cfg->profile : env("AWS_PROFILE");
    c->profile_explicit = prof != NULL;
    c->profile = strdup(prof ? prof : "default");
    c->region = (cfg && cfg->region) ? strdup(cfg->region) : NULL;
    c->sts_endpoint = (cfg && cfg->sts_endpoint) ? strdup(cfg->sts_endpoint)
                                                 : NULL;
    c->refresh_before_s = (cfg && cfg->refresh_before_s) ? cfg->refresh_before_s
                                                          : DEF_REFRESH_BEFORE_S;
    c->imds_timeout_ms = (cfg && cfg->imds_timeout_ms) ? cfg->imds_timeout_ms
                                                        : DEF_IMDS_TIMEOUT_MS;
    if (cfg)
        c->log = cfg->log;
    if (!c->profile || (cfg && cfg->region && !c->region) ||
        (cfg && cfg->sts_endpoint && !c->sts_endpoint)) {
        sio_creds_destroy(c);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    *out = c;
    return SIO_OK;
}

void sio_creds_destroy(sio_creds *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    if (c->profile) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
    }
    sio_creds_value_free(&c->cur);
    free(c->profile);
    free(c->region);
    free(c->sts_endpoint);
    free(c->role_arn);
    free(c->token_file);
    free(c->session_name);
    free(c);
}

const char *sio_creds_source(sio_creds *c)
{
    int s;
    pthread_mutex_lock(&c->mu);
    s = c->loaded ? c->source : SRC_NONE;
    pthread_mutex_unlock(&c->mu);
    return src_names[s];
}

sio_code sio_creds_get(sio_creds *c, int may_block, sio_creds_value *out,
                       sio_error *err)
{
    sio_code rc = SIO_OK;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        int64_t now = (int64_t)time(NULL);
        int expired = c->loaded && c->cur.expires_at && now >= c->cur.expires_at;
        if (c->loaded && (!expired || !may_block))
            break;
        if (!may_block) {
            rc = sio_seterr(err, SIO_ERR_AUTH, "credentials not loaded yet");
            goto out;
        }
        if (c->loading) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        /* First load, or expired and the refresher did not make it: load
         * here, without the lock, so snapshots stay available. */
        c->loading = 1;
        int src = c->loaded ? c->source : SRC_NONE;
        pthread_mutex_unlock(&c->mu);
        sio_creds_value nv;
        if (src == SRC_NONE)
            rc = load_chain(c, &nv, &src, err);
        else
            rc = fetch_source(c, src, &nv, err);
        pthread_mutex_lock(&c->mu);
        c->loading = 0;
        pthread_cond_broadcast(&c->cv);
        if (rc)
            goto out;
        sio_creds_value_free(&c->cur);
        c->cur = nv;
        c->source = src;
        if (!c->loaded)
            SIO_LOG(&c->log, SIO_LOG_INFO, "event=credentials_loaded source=%s",
                    src_names[src]);
        c->loaded = 1;
        if (c->cur.expires_at && !c->thread_started) {
            int prc = pthread_create(&c->thread, NULL, refresher, c);
            if (prc == 0)
                c->thread_started = 1;
            else
                SIO_LOG(&c->log, SIO_LOG_WARN,
                        "event=credentials_refresher_failed reason=\"%s\"",
                        strerror(prc));
        }
    }
    if (value_copy(out, &c->cur))
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}
