/*
 * srccheck.c — a source string split into its specs, and checked and
 * counted without I/O (sio_source_check): what a server can refuse when a
 * job is defined instead of when it is resolved.
 *
 * Decided here: the split into specs and each spec's length, brace syntax
 * and count (arithmetic, nothing expanded), the scheme (a built-in
 * backend's), the URL syntax of http(s) and s3 specs, and hosts that are
 * link-local or instance-metadata addresses in any spelling libcurl or the
 * resolver accepts (url.c). Left to resolution: whether objects exist, what
 * a directory or prefix lists (bounded then by the resolver's maximum), and
 * host names (the connection checks the address DNS gives).
 *
 * Threading: pure functions. Ownership: nothing is kept; the caller owns
 * every argument.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/store_int.h"
#include "store/url.h"

/* Hosts one spec's braces may spell ("http://node{1..8}/s.tar"): each is
 * checked, so their number is bounded. */
#define SOURCE_HOSTS_MAX 64u

sio_code sio_source_next(const char **cursor, char *spec, int *got,
                         sio_error *err)
{
    const char *p = *cursor;
    *got = 0;
    while (*p && (isspace((unsigned char)*p) || (p[0] == ':' && p[1] == ':')))
        p += (*p == ':') ? 2 : 1;
    if (!*p) {
        *cursor = p;
        return SIO_OK;
    }
    size_t len = 0;
    int bracket = 0; /* "::" inside [...] is an IPv6 host, not a split */
    while (p[len] && !isspace((unsigned char)p[len]) &&
           (bracket || !(p[len] == ':' && p[len + 1] == ':'))) {
        if (p[len] == '[')
            bracket = 1;
        else if (p[len] == ']')
            bracket = 0;
        len++;
    }
    if (len >= SIO_SOURCE_SPEC_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "source spec longer than %u",
                          SIO_SOURCE_SPEC_MAX);
    memcpy(spec, p, len);
    spec[len] = '\0';
    *cursor = p + len;
    *got = 1;
    return SIO_OK;
}

int sio_source_has_braces(const char *spec)
{
    const char *o = strchr(spec, '{');
    return o && strchr(o, '}');
}

/* Check one parsed http(s) URL's host. */
static sio_code check_host(const char *url, int allow_link_local,
                           sio_error *err)
{
    sio_url u;
    char shown[256];
    unsigned char addr[16];
    sio_code rc = sio_url_parse(url, &u, err);
    if (rc)
        return rc;
    if (sio_url_host_addr(u.host, u.ipv6, addr) < 0) {
        sio_url_redact(url, shown, sizeof shown);
        rc = sio_seterr(err, SIO_ERR_INVALID, "bad host in source %s",
                        shown);
    } else if (!allow_link_local &&
               sio_url_host_is_link_local(u.host, u.ipv6)) {
        sio_url_redact(url, shown, sizeof shown);
        rc = sio_seterr(err, SIO_ERR_INVALID,
                        "source %s names a link-local or instance-metadata "
                        "address (169.254.0.0/16, fe80::/10, "
                        "fd00:ec2::254, 100.100.100.200, in any spelling); "
                        "allowed only with --allow-link-local-sources",
                        shown);
    }
    sio_url_free(&u);
    return rc;
}

/* Check the hosts of an http(s) spec. Braces in the authority are
 * expanded (at most SOURCE_HOSTS_MAX hosts) and each host is checked;
 * braces after it do not change the host and are not expanded. */
static sio_code check_http(const char *spec, int allow_link_local,
                           sio_error *err)
{
    const char *auth = strstr(spec, "://") + 3, *p = auth;
    int braces = 0;
    char **hosts = NULL;
    size_t nhosts = 0;
    uint64_t count;
    sio_code rc;

    /* The authority ends at '/', '?' or '#' outside a brace group. */
    while (*p && !strchr("/?#", *p)) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (!close)
                break;
            braces = 1;
            p = close;
        }
        p++;
    }
    if (!braces || !sio_source_has_braces(spec))
        return check_host(spec, allow_link_local, err);
    size_t plen = (size_t)(p - spec);
    char *prefix = malloc(plen + 1);
    if (!prefix)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    memcpy(prefix, spec, plen);
    prefix[plen] = '\0';
    rc = sio_brace_count(prefix, &count, err);
    if (rc == SIO_OK && count > SOURCE_HOSTS_MAX)
        rc = sio_seterr(err, SIO_ERR_LIMIT,
                        "the braces in the host of a source spell %llu "
                        "hosts (at most %u)",
                        (unsigned long long)count, SOURCE_HOSTS_MAX);
    if (rc == SIO_OK)
        rc = sio_brace_expand(prefix, SOURCE_HOSTS_MAX, &hosts, &nhosts, err);
    for (size_t i = 0; rc == SIO_OK && i < nhosts; i++)
        rc = check_host(hosts[i], allow_link_local, err);
    sio_strv_free(hosts, nhosts);
    free(prefix);
    return rc;
}

/* Check and count one spec. */
static sio_code check_spec(const char *spec, int allow_link_local,
                           sio_source_counts *c, sio_error *err)
{
    const sio_backend_ops *ops;
    void *ctx;
    uint64_t n = 1;
    sio_code rc;

    /* Built-in backends only: a server serves no other. */
    rc = sio_io_backend(NULL, spec, &ops, &ctx, err);
    if (rc) {
        char shown[256];
        sio_url_redact(spec, shown, sizeof shown);
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "source %s: not a local path, file://, http://, "
                          "https:// or s3:// URL", shown);
    }
    if (sio_objset_spec(spec)) {
        c->listings++;
    } else if (sio_source_has_braces(spec)) {
        rc = sio_brace_count(spec, &n, err);
        if (rc)
            return rc;
    } else {
        c->listings++; /* a directory or prefix: counted when listed */
    }
    if (ops == &sio_backend_http) {
        rc = check_http(spec, allow_link_local, err);
    } else if (ops != &sio_backend_file) {
        sio_url u;
        rc = sio_url_parse(spec, &u, err);
        sio_url_free(&u);
    }
    if (rc)
        return rc;
    c->specs++;
    c->names = c->names > UINT64_MAX - n ? UINT64_MAX : c->names + n;
    return SIO_OK;
}

sio_code sio_source_check(const char *source, int allow_link_local,
                          sio_source_counts *c, sio_error *err)
{
    char *spec;
    const char *p = source;
    int got;
    sio_code rc = SIO_OK;

    if (!source)
        return sio_seterr(err, SIO_ERR_INVALID, "no source");
    spec = malloc(SIO_SOURCE_SPEC_MAX);
    if (!spec)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (;;) {
        rc = sio_source_next(&p, spec, &got, err);
        if (rc || !got)
            break;
        rc = check_spec(spec, allow_link_local, c, err);
        if (rc)
            break;
    }
    free(spec);
    return rc;
}
