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

#include "store/fetch.h"
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


/* inet_aton(3)'s reading of s: 1 to 4 parts; each part decimal, "0x" hex
 * or "0" octal; all parts but the last are one byte, the last fills the
 * remaining bytes. 0 when s is no such literal. */
static int ipv4_any_form(const char *s, unsigned char out[4])
{
    uint64_t part[4];
    size_t np = 0;
    const char *p = s;
    for (;;) {
        uint64_t v = 0;
        int base = 10, digits = 0;
        if (np == 4 || !isdigit((unsigned char)*p))
            return 0;
        if (*p == '0') {
            p++;
            if (*p == 'x' || *p == 'X') {
                base = 16;
                p++;
            } else {
                base = 8;
                digits = 1; /* "0" itself */
            }
        }
        for (;; p++) {
            int d = sio_hexval((unsigned char)*p);
            if (d < 0 || d >= base)
                break;
            v = v * (uint64_t)base + (uint64_t)d;
            if (v > 0xffffffffu) /* longer than any address: no wrap */
                return 0;
            digits = 1;
        }
        if (!digits)
            return 0;
        part[np++] = v;
        if (*p != '.')
            break;
        p++;
    }
    if (*p)
        return 0;
    uint64_t last_max = np == 1 ? 0xffffffffu : 0xffffffu >> (8 * (np - 2));
    for (size_t i = 0; i + 1 < np; i++)
        if (part[i] > 0xff)
            return 0;
    if (part[np - 1] > last_max)
        return 0;
    uint32_t a = (uint32_t)part[np - 1];
    for (size_t i = 0; i + 1 < np; i++)
        a |= (uint32_t)part[i] << (24 - 8 * i);
    out[0] = (unsigned char)(a >> 24);
    out[1] = (unsigned char)(a >> 16);
    out[2] = (unsigned char)(a >> 8);
    out[3] = (unsigned char)a;
    return 1;
}

int sio_url_host_addr(const char *host, int ipv6, unsigned char addr[16])
{
    char h[SIO_URL_HOST_MAX + 1];
    size_t hl = strlen(host), o = 0;
    if (hl > SIO_URL_HOST_MAX)
        return -1;
    if (ipv6) {
        /* "[fe80::1%25eth0]": the zone id goes; the address must parse */
        size_t al = strcspn(host, "%");
        memcpy(h, host, al);
        h[al] = '\0';
        return inet_pton(AF_INET6, h, addr) == 1 ? AF_INET6 : -1;
    }
    /* Decoded the way libcurl decodes a host name before resolving it
     * (an invalid escape stays as written). */
    for (size_t i = 0; i < hl; i++) {
        unsigned char c = (unsigned char)host[i];
        if (c == '%' && i + 2 < hl &&
            sio_hexval((unsigned char)host[i + 1]) >= 0 &&
            sio_hexval((unsigned char)host[i + 2]) >= 0) {
            c = (unsigned char)(sio_hexval((unsigned char)host[i + 1]) * 16 +
                                sio_hexval((unsigned char)host[i + 2]));
            i += 2;
        }
        if (c < 0x20 || c == 0x7f)
            return -1;
        h[o++] = (char)c;
    }
    h[o] = '\0';
    /* "169.254.169.254." is the same address to the resolver */
    if (o > 1 && h[o - 1] == '.')
        h[--o] = '\0';
    if (ipv4_any_form(h, addr))
        return AF_INET;
    return 0;
}

int sio_url_host_is_link_local(const char *host, int ipv6)
{
    unsigned char a[16];
    struct sockaddr_in s4;
    struct sockaddr_in6 s6;
    switch (sio_url_host_addr(host, ipv6, a)) {
    case AF_INET:
        memset(&s4, 0, sizeof s4);
        s4.sin_family = AF_INET;
        memcpy(&s4.sin_addr, a, 4);
        return sio_addr_is_link_local((const struct sockaddr *)(void *)&s4);
    case AF_INET6:
        memset(&s6, 0, sizeof s6);
        s6.sin6_family = AF_INET6;
        memcpy(&s6.sin6_addr, a, 16);
        return sio_addr_is_link_local((const struct sockaddr *)(void *)&s6);
    default:
        return 0;
    }
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
