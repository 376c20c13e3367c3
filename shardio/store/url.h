/*
 * url.h — splitting object-store URLs (internal to libshardio).
 *
 * http(s)://[user@]host[:port]/path?query and s3://bucket/key are split into
 * their parts without decoding: an http path is sent as the user wrote it,
 * an s3 key is the raw key (the S3 backend encodes it the way SigV4 signs
 * it). Every part is checked against a named limit and for bytes that can
 * never appear on a request line (controls, space).
 *
 * Threading: pure functions. Ownership: a sio_url owns its strings
 * (sio_url_free).
 */
#ifndef SHARDIO_URL_H
#define SHARDIO_URL_H

#include <stddef.h>

#include "core/redact.h"
#include "shardio.h"

/* Longest host name (RFC 1035 allows 253; S3 buckets are <= 63). */
#define SIO_URL_HOST_MAX 255u

typedef struct sio_url {
    char *scheme; /* lowercase: "http", "https", "s3" */
    char *host;   /* host name or IP (no brackets); for s3: the bucket */
    int ipv6;     /* host is an IPv6 literal (was in brackets) */
    unsigned port;/* 0 when none was written */
    char *path;   /* from the first '/' on, query included ("/" at least);
                     for s3: "/" + key, the key possibly empty */
    int userinfo; /* the URL carried user[:password]@ (never kept) */
} sio_url;

/*
 * Split url. SIO_ERR_INVALID for a malformed URL (no scheme, empty host, bad
 * port, control bytes), SIO_ERR_LIMIT past SIO_URL_MAX / SIO_URL_HOST_MAX.
 * On SIO_OK *u is filled and owned by the caller (sio_url_free); on error it
 * is zeroed. Error texts quote the URL redacted (sio_url_redact).
 */
sio_code sio_url_parse(const char *url, sio_url *u, sio_error *err);
void sio_url_free(sio_url *u);

/* "host", "host:port", "[v6]" or "[v6]:port" into buf (truncated to len). */
void sio_url_authority(const sio_url *u, char *buf, size_t len);

/* Nonzero when host is an IPv4/IPv6 literal or "localhost" (or a name in
 * .localhost): endpoints where virtual-hosted S3 addressing cannot work. */
int sio_url_host_is_local_or_ip(const char *host);

/*
 * The address a URL's host names, read the way libcurl and the resolver
 * read it: percent-encoding decoded (libcurl decodes a host name before
 * resolving it), then an IPv4 literal in any inet_aton(3) spelling (1 to 4
 * parts, each decimal, 0x hex or 0 octal: 169.254.169.254, 2852039166,
 * 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518; one trailing dot
 * allowed), or, when bracketed (ipv6 set; the zone id after '%' dropped),
 * an IPv6 literal. Returns AF_INET (addr[0..3]) or AF_INET6 (addr[0..15]),
 * 0 for a host name (resolved later; the connection checks what DNS
 * says), -1 for a host no URL parser accepts (a control byte once
 * decoded, a bracketed host that is no IPv6 literal).
 */
int sio_url_host_addr(const char *host, int ipv6, unsigned char addr[16]);

/*
 * Is host (as sio_url_host_addr reads it) a link-local or instance-metadata
 * address in any spelling: 169.254.0.0/16, 100.100.100.200, fe80::/10,
 * fd00:ec2::254, and IPv4 ones embedded in IPv6 (IPv4-mapped ::ffff:0:0/96,
 * IPv4-compatible ::/96, NAT64 64:ff9b::/96)? The rule is
 * sio_addr_is_link_local's (fetch.h), which checks the resolved address
 * when a request connects; this one lets a job spec be refused before.
 */
int sio_url_host_is_link_local(const char *host, int ipv6);

/* SIO_URL_MAX, sio_url_param_is_credential and the redaction:
 * core/redact.h and include/shardio.h. */

#endif /* SHARDIO_URL_H */
