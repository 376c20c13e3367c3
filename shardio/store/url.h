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

/* SIO_URL_MAX, sio_url_param_is_credential and the redaction:
 * core/redact.h and include/shardio.h. */

#endif /* SHARDIO_URL_H */
