/*
 * sigv4.h — AWS Signature Version 4 request signing (internal to libshardio).
 *
 * The S3 backend describes each request (method, Host, raw path, raw query
 * pairs, the extra headers it will send) in a sio_sigv4_request, and
 * sio_sigv4_sign() returns the Authorization value, the headers the signer
 * adds (x-amz-date, x-amz-content-sha256, x-amz-security-token) as ready
 * "Name: value" lines, and the exact encoded path+query to put on the wire,
 * so that what is sent is byte for byte what was signed.
 *
 * S3 rules (the default, flags == SIO_SIGV4_S3): `path` is the raw,
 * unencoded path ("/bucket/key" or "/key"); every byte except the RFC 3986
 * unreserved set and '/' is percent-encoded, once, for both the wire and the
 * canonical request; no path normalisation ("a//b/../c" stays as it is);
 * x-amz-content-sha256 is sent and signed; a session token is sent and
 * signed as x-amz-security-token.
 *
 * Query: names and values are raw (unencoded); each is encoded with '/'
 * encoded too, and pairs are sorted by encoded name, then encoded value. A
 * NULL or empty value gives "name=". The wire query is the canonical query.
 *
 * Threading: pure functions, no shared state; any thread may sign at once.
 * Secrets: the secret key and derived keys never leave this module and are
 * wiped from memory after use; error messages never quote credentials.
 */
#ifndef SHARDIO_SIGV4_H
#define SHARDIO_SIGV4_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"

/* Sanity limits on what one request may carry. They bound every buffer the
 * signer builds; inputs beyond them are SIO_ERR_LIMIT. */
#define SIO_SIGV4_PATH_MAX 4096u    /* raw path bytes; S3 keys are <= 1024 */
#define SIO_SIGV4_QUERY_MAX 64u     /* query pairs; ListObjectsV2 uses ~6 */
#define SIO_SIGV4_HEADERS_MAX 64u   /* extra headers to sign */
#define SIO_SIGV4_NAME_MAX 256u     /* bytes of one header or query name */
#define SIO_SIGV4_VALUE_MAX 8192u   /* bytes of one header or query value
                                       (continuation tokens, long prefixes) */
#define SIO_SIGV4_TOKEN_MAX 8192u   /* bytes of a session token (STS tokens
                                       are up to a few KiB) */
#define SIO_SIGV4_KEY_MAX 512u      /* bytes of an access or secret key */
#define SIO_SIGV4_SCOPE_MAX 64u     /* bytes of region and of service */
#define SIO_SIGV4_HOST_MAX 512u     /* bytes of the Host value */
#define SIO_SIGV4_EXPIRES_MAX 604800u /* presign lifetime cap (7 days) */

/* Hex SHA-256 of the empty payload, the hash of every body-less request. */
#define SIO_SIGV4_EMPTY_SHA256 \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* Payload hash used when req->payload_hash is NULL. */
#define SIO_SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

/* Flags (bits of sio_sigv4_request.flags). */
enum {
    /* S3: raw path encoded once, not normalised, content hash signed. */
    SIO_SIGV4_S3 = 0,
    /* `path` is already percent-encoded as it goes on the wire (other AWS
     * services); the canonical URI encodes it again ("double encoding")
     * and the wire path is `path` verbatim. */
    SIO_SIGV4_PATH_ENCODED = 1u << 0,
    /* Remove "." and ".." segments and collapse runs of '/' before
     * encoding the canonical URI (other AWS services; never S3). */
    SIO_SIGV4_NORMALIZE_PATH = 1u << 1,
    /* Do not add or sign x-amz-content-sha256 (non-S3 services). */
    SIO_SIGV4_NO_CONTENT_SHA256 = 1u << 2,
    /* The session token is sent but not signed: it is added after the
     * signature is computed (some non-S3 services). */
    SIO_SIGV4_TOKEN_AFTER = 1u << 3,
    /* Query-string authentication (a presigned URL): the X-Amz-* auth
     * parameters go into the query, no Authorization header and no
     * x-amz-date / x-amz-content-sha256 headers are produced. */
    SIO_SIGV4_PRESIGN = 1u << 4,
    /* The generic rules of the AWS test suites for non-S3 services. */
    SIO_SIGV4_GENERIC = SIO_SIGV4_PATH_ENCODED | SIO_SIGV4_NORMALIZE_PATH |
                        SIO_SIGV4_NO_CONTENT_SHA256
};

/* A (name, value) pair. Both are borrowed for the duration of the call. */
typedef struct sio_sigv4_pair {
    const char *name;
    const char *value; /* NULL is the same as "" */
} sio_sigv4_pair;

/*
 * One request to sign. Every pointer is borrowed for the duration of the
 * call only; nothing is kept.
 */
typedef struct sio_sigv4_request {
    const char *method;       /* "GET", "HEAD", ... (sent as is) */
    const char *host;         /* the Host header exactly as sent: "host" or
                                 "host:port" for a non-default port */
    const char *path;         /* raw path starting with '/' (see flags) */
    const sio_sigv4_pair *query; /* raw query pairs, any order */
    size_t nquery;
    const sio_sigv4_pair *headers; /* extra headers the caller sends and
                                      wants signed (e.g. Range). Names are
                                      case-insensitive; a repeated name's
                                      values are joined with ',' in the given
                                      order. Must not name host, x-amz-date,
                                      x-amz-content-sha256,
                                      x-amz-security-token or authorization:
                                      the signer owns those. */
    size_t nheaders;
    const char *payload_hash; /* lowercase hex SHA-256 of the body, or NULL
                                 for UNSIGNED-PAYLOAD */
    const char *region;       /* e.g. "us-east-1" */
    const char *service;      /* "s3" */
    const char *amz_date;     /* "YYYYMMDDTHHMMSSZ" (UTC) */
    uint32_t expires;         /* SIO_SIGV4_PRESIGN: X-Amz-Expires seconds,
                                 1..SIO_SIGV4_EXPIRES_MAX; else unused */
    unsigned flags;           /* SIO_SIGV4_* bits */
} sio_sigv4_request;

/* Credentials, borrowed for the call. */
typedef struct sio_sigv4_creds {
    const char *access_key;
    const char *secret_key;
    const char *session_token; /* NULL or "": none */
} sio_sigv4_creds;

/* At most this many header lines are produced by a signature. */
#define SIO_SIGV4_OUT_HEADERS 4u

/*
 * The outcome of sio_sigv4_sign(). Every string is malloc'd and owned by the
 * result; release them with sio_sigv4_result_free() (which also wipes them,
 * as some carry the session token). Never log authorization, headers[] or
 * the canonical request.
 */
typedef struct sio_sigv4_result {
    /* The value of the Authorization header ("AWS4-HMAC-SHA256
     * Credential=..., SignedHeaders=..., Signature=..."); NULL when
     * presigning. */
    char *authorization;
    /* Header lines "Name: value" (no CRLF) to add to the request besides the
     * caller's own headers and Host, in this order: X-Amz-Date,
     * X-Amz-Content-SHA256, X-Amz-Security-Token, Authorization (each only
     * when it applies). Ready for curl_slist_append(). */
    char *headers[SIO_SIGV4_OUT_HEADERS];
    size_t nheaders;
    /* Encoded path, then '?' and the query when there is one, exactly as it
     * must be sent on the request line (presign parameters included). */
    char *wire_path;
    char *canonical_request; /* for tests and debugging */
    char *string_to_sign;    /* for tests and debugging */
    char *signed_headers;    /* "host;range;x-amz-date;..." */
    char signature[65];      /* lowercase hex, NUL-terminated */
} sio_sigv4_result;

/*
 * Sign `req` with `creds`. On SIO_OK *res is filled (the caller frees it with
 * sio_sigv4_result_free); on failure *res is left zeroed and err (may be
 * NULL) says what was wrong: SIO_ERR_INVALID for malformed input (bad date,
 * CR/LF in a header value, a reserved header name), SIO_ERR_AUTH for missing
 * or malformed credentials, SIO_ERR_LIMIT for input past a SIO_SIGV4_*
 * limit, SIO_ERR_NOMEM. The message never quotes a credential.
 */
sio_code sio_sigv4_sign(const sio_sigv4_request *req,
                        const sio_sigv4_creds *creds, sio_sigv4_result *res,
                        sio_error *err);

/* Free and wipe every string of a result and zero it. NULL is fine. */
void sio_sigv4_result_free(sio_sigv4_result *res);

/*
 * The encoded path+query of `req` as it goes on the wire, without presign
 * parameters: the same string sio_sigv4_sign() puts in wire_path for a
 * header-signed request. On SIO_OK *out is malloc'd (free()).
 */
sio_code sio_sigv4_wire_path(const sio_sigv4_request *req, char **out,
                             sio_error *err);

/*
 * Percent-encode len bytes of `in` by the SigV4 rules: A-Z a-z 0-9 - . _ ~
 * are kept, '/' is kept when keep_slash is nonzero, every other byte becomes
 * %XX (uppercase hex). At most max_out bytes of output (else SIO_ERR_LIMIT).
 * On SIO_OK *out is malloc'd and NUL-terminated (free()).
 */
sio_code sio_sigv4_uri_encode(const char *in, size_t len, int keep_slash,
                              size_t max_out, char **out, sio_error *err);

/* Lowercase hex SHA-256 of len bytes into hex[65] (NUL-terminated). */
sio_code sio_sigv4_sha256_hex(const void *data, size_t len, char hex[65]);

#endif /* SHARDIO_SIGV4_H */
