/*
 * url.c — splitting http(s) and s3 URLs; the one redacted form of a URL
 * (user information and credential-bearing query values masked) used for
 * everything that leaves the backends: samples and wire formats, errors,
 * logs, status and metrics.
 *
 * Threading: pure functions, no shared state. Ownership: see url.h.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/store_int.h"
#include "store/url.h"

void sio_url_free(sio_url *u)
{
    if (!u)
        return;
    free(u->scheme);
    free(u->host);
    free(u->path);
    memset(u, 0, sizeof *u);
}

/* Bounded output of the redaction: appends stop at len - 1 bytes. */
typedef struct rout {
    char *buf;
    size_t len, o;
    int full; /* an escape did not fit: nothing more is appended */
} rout;

static void rput(rout *r, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n && !r->full && r->o + 1 < r->len; i++) {
        unsigned char c = (unsigned char)s[i];
        /* Controls never reach a log line or a header verbatim. They are
         * percent-encoded: a replacement such as '?' would turn the rest of
         * a path into a query the masking above has not seen. */
        if (c < 0x20 || c == 0x7f) {
            if (r->o + 3 >= r->len) {
                r->full = 1;
                break;
            }
            r->buf[r->o++] = '%';
            r->buf[r->o++] = hex[c >> 4];
            r->buf[r->o++] = hex[c & 15];
            continue;
        }
        r->buf[r->o++] = (char)c;
    }
}

static void rputs(rout *r, const char *s)
{
    rput(r, s, strlen(s));
}

/* Text outside URLs is copied as it is. */
static void rput_raw(rout *r, const char *s, size_t n)
{
    for (size_t i = 0; i < n && !r->full && r->o + 1 < r->len; i++)
        r->buf[r->o++] = s[i];
}

static int hexv(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/*
 * The credential-bearing query parameter names (see url.h). Matched on the
 * percent-decoded, lowercased name: a prefix, a whole name, or a part of
 * the name. Over-matching costs a masked harmless value; under-matching
 * leaks a secret, so the parts are broad.
 */
static const char *const cred_prefixes[] = {"x-amz-", "x-goog-", "x-ms-",
                                            "x-oss-", NULL};
static const char *const cred_names[] = {"sig", "se", "sp", "sv", "sr",
                                         "skoid", "sktid", "pwd", "code",
                                         "policy", "jwt", "sas", "st",
                                         NULL};
static const char *const cred_parts[] = {"sign", "token", "key", "secret",
                                         "pass", "credential", "auth",
                                         "session", "accessid", "cookie",
                                         NULL};

int sio_url_param_is_credential(const char *name, size_t n)
{
    char low[SIO_URL_PARAM_NAME_MAX + 1];
    size_t o = 0;

    /* Decode; a name too long to compare is treated as a credential. */
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (c == '%' && i + 2 < n && hexv(name[i + 1]) >= 0 &&
            hexv(name[i + 2]) >= 0) {
            c = (char)(hexv(name[i + 1]) * 16 + hexv(name[i + 2]));
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (o == SIO_URL_PARAM_NAME_MAX)
            return 1;
        low[o++] = (char)tolower((unsigned char)c);
    }
    low[o] = '\0';
    /* Separators and spaces do not hide a name: "api_key", "api-key",
     * "x amz signature" all match. */
    for (size_t i = 0; cred_prefixes[i]; i++)
        if (strncmp(low, cred_prefixes[i], strlen(cred_prefixes[i])) == 0)
            return 1;
    for (size_t i = 0; cred_names[i]; i++)
        if (strcmp(low, cred_names[i]) == 0)
            return 1;
    for (size_t i = 0; cred_parts[i]; i++)
        if (strstr(low, cred_parts[i]))
            return 1;
    return 0;
}

/* Does a query value carry user information or a whole URL (which may be
 * presigned), plainly or percent-encoded? Such values are masked whole. */
static int value_nests_url(const char *v, size_t n)
{
    if (memchr(v, '@', n) || memmem(v, n, "://", 3))
        return 1;
    for (size_t i = 0; i + 3 <= n; i++)
        if (v[i] == '%' && ((v[i + 1] == '4' && v[i + 2] == '0') ||
                            (v[i + 1] == '3' && (v[i + 2] == 'a' ||
                                                 v[i + 2] == 'A'))))
            return 1; /* "%40" ('@') or "%3A" (':' of "https%3A%2F%2F") */
    return 0;
}

/* Append query (n bytes, no '?') with credential values masked. */
static void redact_query(rout *r, const char *q, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const char *amp = memchr(q + i, '&', n - i);
        size_t end = amp ? (size_t)(amp - q) : n;
        const char *piece = q + i;
        size_t plen = end - i;
        const char *eq = memchr(piece, '=', plen);
        size_t klen = eq ? (size_t)(eq - piece) : plen;
        const char *v = eq ? eq + 1 : NULL;
        size_t vlen = eq ? plen - klen - 1 : 0;
        if (value_nests_url(piece, klen)) {
            /* A name holding user information or a URL: masked whole. */
            rputs(r, "***");
            if (amp)
                rputs(r, "&");
            i = end + 1;
            continue;
        }
        rput(r, piece, klen);
        if (eq) {
            rputs(r, "=");
            /* A value holding a nested URL's user info or an '@' is
             * masked too: "?next=https://u:p@h/" must not pass. */
            if (sio_url_param_is_credential(piece, klen) ||
                value_nests_url(v, vlen))
                rputs(r, vlen ? "***" : "");
            else
                rput(r, v, vlen);
        }
        if (amp)
            rputs(r, "&");
        i = end + 1;
    }
}

/*
 * Append a path (n bytes) with nested user information masked: wherever
 * "//" starts a segment holding an '@' before the next '/' (a URL nested in
 * the path, "http://h/x/http://u:p@o/" or "http://http://u:p@o/"), that
 * part up to its last '@' becomes "***@".
 */
static void put_path(rout *r, const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const char *dd = memmem(p + i, n - i, "//", 2);
        if (!dd) {
            rput(r, p + i, n - i);
            return;
        }
        size_t k = (size_t)(dd - p) + 2;
        rput(r, p + i, k - i);
        size_t seg = k;
        while (seg < n && p[seg] != '/')
            seg++;
        const char *at = NULL;
        for (size_t m = k; m < seg; m++)
            if (p[m] == '@')
                at = p + m;
        if (at) {
            rputs(r, "***@");
            i = (size_t)(at - p) + 1;
        } else {
            i = k;
        }
    }
}

static void redact_url(rout *r, const char *url)
{
    const char *sep, *auth, *auth_end, *at = NULL, *p;
    int is_s3;

    if (!url)
        url = "";
    sep = strstr(url, "://");
    /* s3 keys are raw: a '?' or '#' there is part of the key. */
    is_s3 = strncasecmp(url, "s3://", 5) == 0;
    if (!sep) {
        /* Not a URL (a local path): nothing to mask but a query-like
         * tail is still treated as one. */
        const char *qm = strchr(url, '?');
        if (qm) {
            rput(r, url, (size_t)(qm - url) + 1);
            redact_query(r, qm + 1, strcspn(qm + 1, "#"));
        } else {
            rputs(r, url);
        }
        return;
    }
    auth = sep + 3;
    auth_end = auth + strcspn(auth, is_s3 ? "/" : "/?#");
    for (p = auth; p < auth_end; p++)
        if (*p == '@')
            at = p;
    rput(r, url, (size_t)(auth - url));
    if (at) {
        rputs(r, "***@");
        auth = at + 1;
    }
    rput(r, auth, (size_t)(auth_end - auth));
    p = auth_end;
    if (is_s3) {
        put_path(r, p, strlen(p));
    } else {
        size_t path = strcspn(p, "?#");
        put_path(r, p, path);
        p += path;
        if (*p == '?') {
            size_t ql = strcspn(p + 1, "#");
            rputs(r, "?");
            redact_query(r, p + 1, ql);
            p += 1 + ql;
        }
        /* A fragment never goes on the wire but may carry a token
         * (OAuth implicit flow): masked whole. */
        if (*p == '#')
            rputs(r, "#***");
    }
}

void sio_url_redact(const char *url, char *buf, size_t len)
{
    rout r = {buf, len, 0, 0};
    if (!len)
        return;
    redact_url(&r, url);
    buf[r.o] = '\0';
}

/* Bytes that end a URL inside free text. */
static int url_stop(char c)
{
    return c == '\0' || c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
           c == '"' || c == '\'' || c == '<' || c == '>' || c == '`' ||
           c == '\\';
}

void sio_redact_text(const char *text, char *buf, size_t len)
{
    rout r = {buf, len, 0, 0};
    const char *p = text ? text : "";
    char one[SIO_URL_MAX + 64];

    if (!len)
        return;
    while (*p && r.o + 1 < len) {
        const char *sep = strstr(p, "://");
        if (!sep) {
            rput_raw(&r, p, strlen(p));
            break;
        }
        /* The scheme: letters, digits, '+', '-', '.' before "://". */
        const char *s = sep;
        while (s > p && (isalnum((unsigned char)s[-1]) || s[-1] == '+' ||
                         s[-1] == '-' || s[-1] == '.'))
            s--;
        rput_raw(&r, p, (size_t)(s - p));
        /* The URL ends at a stop byte. Sources joined by "::" stay one
         * URL: the later ones are nested in its path (their user
         * information is masked there) or in a query value (masked
         * whole), which over-masks but never splits a URL wrongly. */
        const char *e = sep + 3;
        while (!url_stop(*e))
            e++;
        /* An s3 key is raw text up to the end; in free text a scheme in it
         * starts the next URL, which is redacted as one of its own. */
        if (e - s > 5 && strncasecmp(s, "s3://", 5) == 0) {
            const char *n = memmem(sep + 3, (size_t)(e - sep - 3), "://", 3);
            if (n) {
                while (n > sep + 3 && isalnum((unsigned char)n[-1]))
                    n--;
                if (n > sep + 3)
                    e = n;
            }
        }
        size_t ul = (size_t)(e - s);
        if (ul > SIO_URL_MAX) {
            /* Too long to copy: mask everything past the authority. */
            rputs(&r, "<long URL redacted>");
        } else {
            memcpy(one, s, ul);
            one[ul] = '\0';
            char red[SIO_URL_MAX + 64];
            sio_url_redact(one, red, sizeof red);
            rputs(&r, red);
        }
        p = e;
    }
    buf[r.o] = '\0';
}

int sio_url_host_is_local_or_ip(const char *host)
{
    unsigned char tmp[16];
    size_t hl = strlen(host);
    if (inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1)
        return 1;
    if (strcasecmp(host, "localhost") == 0)
        return 1;
    return hl > 10 && strcasecmp(host + hl - 10, ".localhost") == 0;
}

void sio_url_authority(const sio_url *u, char *buf, size_t len)
{
    if (u->port)
        snprintf(buf, len, u->ipv6 ? "[%s]:%u" : "%s:%u", u->host, u->port);
    else
        snprintf(buf, len, u->ipv6 ? "[%s]" : "%s", u->host);
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

sio_code sio_url_parse(const char *url, sio_url *u, sio_error *err)
{
    char shown[256];
    const char *p, *sep, *auth, *auth_end, *host, *host_end, *at = NULL;
    size_t ul, i;
    int is_s3;
    sio_code rc = SIO_OK;

    memset(u, 0, sizeof *u);
    if (!url)
        return sio_seterr(err, SIO_ERR_INVALID, "no URL");
    sio_url_redact(url, shown, sizeof shown);
    ul = strlen(url);
    if (ul > SIO_URL_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "URL longer than %u bytes: %s",
                          SIO_URL_MAX, shown);
    /* An s3 key is raw text: spaces, '?' and '#' are part of it. */
    is_s3 = strncasecmp(url, "s3://", 5) == 0;
    for (i = 0; i < ul; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c < 0x20 || c == 0x7f || (c == ' ' && !is_s3))
            return sio_seterr(err, SIO_ERR_INVALID,
                              "control byte or space in URL: %s", shown);
    }
    sep = strstr(url, "://");
    if (!sep || sep == url)
        return sio_seterr(err, SIO_ERR_INVALID, "no scheme in URL: %s", shown);
    for (p = url; p < sep; p++)
        if (!isalpha((unsigned char)*p) && !(p > url && (isdigit((unsigned char)*p) ||
                                                       *p == '+' || *p == '-' || *p == '.')))
            return sio_seterr(err, SIO_ERR_INVALID, "bad scheme in URL: %s",
                              shown);
    auth = sep + 3;
    auth_end = auth + strcspn(auth, is_s3 ? "/" : "/?#");
    for (p = auth; p < auth_end; p++)
        if (*p == '@')
            at = p;
    host = at ? at + 1 : auth;
    u->userinfo = at != NULL;
    u->scheme = dupn(url, (size_t)(sep - url));
    if (!u->scheme) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (char *s = u->scheme; *s; s++)
        *s = (char)tolower((unsigned char)*s);
    if (*host == '[') {
        host_end = memchr(host, ']', (size_t)(auth_end - host));
        if (!host_end) {
            rc = sio_seterr(err, SIO_ERR_INVALID, "unclosed '[' in URL: %s",
                            shown);
            goto out;
        }
        u->ipv6 = 1;
        host++;
        p = host_end + 1;
    } else {
        host_end = host;
        while (host_end < auth_end && *host_end != ':')
            host_end++;
        p = host_end;
    }
    if (host_end == host) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "empty host in URL: %s", shown);
        goto out;
    }
    if ((size_t)(host_end - host) > SIO_URL_HOST_MAX) {
        rc = sio_seterr(err, SIO_ERR_LIMIT, "host longer than %u in URL: %s",
                        SIO_URL_HOST_MAX, shown);
        goto out;
    }
    if (p < auth_end) {
        unsigned long port = 0;
        if (*p != ':' || p + 1 == auth_end) {
            rc = sio_seterr(err, SIO_ERR_INVALID, "bad authority in URL: %s",
                            shown);
            goto out;
        }
        for (p++; p < auth_end; p++) {
            if (!isdigit((unsigned char)*p) || port > 65535) {
                rc = sio_seterr(err, SIO_ERR_INVALID, "bad port in URL: %s",
                                shown);
                goto out;
            }
            port = port * 10 + (unsigned long)(*p - '0');
        }
        if (port == 0 || port > 65535) {
            rc = sio_seterr(err, SIO_ERR_INVALID, "bad port in URL: %s", shown);
            goto out;
        }
        u->port = (unsigned)port;
    }
    u->host = dupn(host, (size_t)(host_end - host));
    if (*auth_end == '/') {
        size_t pl = is_s3 ? strlen(auth_end) : strcspn(auth_end, "#");
        u->path = dupn(auth_end, pl);
    } else if (*auth_end == '?') {
        /* "http://h?q" means path "/" with a query. */
        size_t pl = strcspn(auth_end, "#");
        u->path = malloc(pl + 2);
        if (u->path) {
            u->path[0] = '/';
            memcpy(u->path + 1, auth_end, pl);
            u->path[pl + 1] = '\0';
        }
    } else {
        u->path = dupn("/", 1);
    }
    if (!u->host || !u->path) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
out:
    if (rc)
        sio_url_free(u);
    return rc;
}
