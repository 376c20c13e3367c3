/*
 * url.c — splitting http(s) and s3 URLs (the redacted form of a URL is
 * core/redact.c).
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
