/*
 * redact.c — the one redacted form of a URL (user information and
 * credential-bearing query values masked) used for everything that leaves
 * the backends: samples and wire formats, errors, logs, status and
 * metrics (sio_url_redact, sio_redact_text: include/shardio.h). Part of
 * the wire library too, which carries shard URLs.
 *
 * Threading: pure functions, no shared state.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/redact.h"
#include "shardio.h"

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

int sio_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
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
        if (c == '%' && i + 2 < n && sio_hexval(name[i + 1]) >= 0 &&
            sio_hexval(name[i + 2]) >= 0) {
            c = (char)(sio_hexval(name[i + 1]) * 16 + sio_hexval(name[i + 2]));
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
