/*
 * s3xml.h — parsing of the XML documents S3 and STS send (internal).
 *
 * ListObjectsV2 (and V1) pages, <Error> documents and the credentials of an
 * STS AssumeRoleWithWebIdentity response, parsed with libxml2 as untrusted
 * input: no network access, no DTD (a document that declares one is
 * refused before any entity is read), no entity expansion, and a named
 * limit on the size of every document and on every field taken from it.
 * The root element is matched by its local name, with or without the S3 /
 * STS namespace.
 *
 * Threading: every function may be called from any thread at once; the
 * structs they fill belong to the caller. libxml2's one-time global set-up
 * is not thread-safe on first use, so every parse call goes through
 * sio_s3xml_global_init() (a pthread_once); hosts that also use libxml2
 * themselves may call it early.
 *
 * Ownership: each output struct is owned by the caller and released with
 * its _free function; the input buffer is only read during the call.
 */
#ifndef SHARDIO_S3XML_H
#define SHARDIO_S3XML_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"

/* Largest listing page accepted. A real page of 1000 keys of 1 KiB each
 * with all its metadata is ~1.5 MiB; 64 MiB leaves room for servers that
 * ignore max-keys while bounding what one response can make us hold. */
#define SIO_S3XML_DOC_MAX (64u << 20)

/* Largest <Error> or STS document accepted; both are a few KiB in practice. */
#define SIO_S3XML_SMALL_DOC_MAX (1u << 20)

/* Most entries (Contents + CommonPrefixes) in one page. S3 returns at most
 * 1000 (MaxKeys); S3-compatible servers may return more, so tolerate 100x. */
#define SIO_S3XML_KEYS_MAX 100000u

/* Longest object key or prefix in bytes, after URL decoding: S3's maximum
 * key length is 1024 bytes of UTF-8. */
#define SIO_S3XML_KEY_MAX 1024u

/* Longest continuation token kept. S3's tokens are ~100-200 bytes; they are
 * opaque, so allow generous room for other servers. */
#define SIO_S3XML_TOKEN_MAX 4096u

/* Longest credential field (AccessKeyId, SecretAccessKey, SessionToken,
 * Expiration). Session tokens grow with session tags and policies; AWS
 * documents no fixed size, observed ones are under 4 KiB. */
#define SIO_S3XML_CRED_FIELD_MAX 16384u

/* One page of a ListObjectsV2 (or V1) response. */
typedef struct sio_s3_list_page {
    char **keys;        /* n malloc'd object keys (as in the XML, decoded if
                           EncodingType=url was used), in document order */
    uint64_t *sizes;    /* n sizes */
    char **prefixes;    /* nprefixes CommonPrefixes (when a delimiter was
                           used), decoded like keys */
    size_t n, nprefixes;
    int truncated;      /* IsTruncated (0 when absent) */
    char *next_token;   /* NextContinuationToken or NULL; a V1 listing has
                           none, continue from the last key (marker) then */
} sio_s3_list_page;

/*
 * Parse a ListBucketResult document of len bytes (need not be
 * NUL-terminated). On SIO_OK *page is filled (it is zeroed first, on every
 * path) and owned by the caller: sio_s3_list_page_free(). Errors:
 * SIO_ERR_FORMAT (malformed XML, a DTD, wrong root, a Contents without Key
 * or Size, a Size that is not a plain decimal uint64, a bad %-escape),
 * SIO_ERR_LIMIT (document, entry count, key or token over the limits
 * above), SIO_ERR_NOMEM. err (may be NULL) gets the detail.
 */
sio_code sio_s3xml_parse_list(const char *xml, size_t len,
                              sio_s3_list_page *page, sio_error *err);

/* Free what a page holds and zero it. NULL and a zeroed page are fine. */
void sio_s3_list_page_free(sio_s3_list_page *page);

/*
 * S3 <Error><Code>..</Code><Message>..</Message></Error>, also inside an
 * <ErrorResponse> (STS, IAM). Outputs are truncated to the buffers (at a
 * UTF-8 character boundary) and always NUL-terminated when their length is
 * non-zero; control characters become '?' so the text is safe for one log
 * line. A missing <Message> gives "". Only Code and Message are read, never
 * fields that may echo request details (StringToSign, CanonicalRequest).
 * SIO_OK when an error document with a <Code> was found, SIO_ERR_FORMAT when
 * the bytes are not one (outputs are then ""), SIO_ERR_LIMIT over
 * SIO_S3XML_SMALL_DOC_MAX, SIO_ERR_NOMEM.
 */
sio_code sio_s3xml_parse_error(const char *xml, size_t len, char *code,
                               size_t codelen, char *msg, size_t msglen);

/* Temporary credentials from STS. Secrets: never log or print them. */
typedef struct sio_s3_sts_creds {
    char *access_key_id;     /* malloc'd */
    char *secret_access_key; /* malloc'd, secret */
    char *session_token;     /* malloc'd, secret */
    char *expiration;        /* malloc'd, as sent, e.g. "2024-05-01T12:00:00Z" */
    int64_t expires_at;      /* the same instant in seconds since the epoch */
} sio_s3_sts_creds;

/*
 * Parse an AssumeRoleWithWebIdentityResponse (or AssumeRoleResponse):
 * .../Credentials/{AccessKeyId,SecretAccessKey,SessionToken,Expiration},
 * all four required and non-empty. On SIO_OK *out is filled (zeroed first
 * on every path) and owned by the caller: sio_s3_sts_creds_free().
 * An STS <ErrorResponse> gives SIO_ERR_AUTH with its Code and Message in
 * err; otherwise SIO_ERR_FORMAT / SIO_ERR_LIMIT / SIO_ERR_NOMEM. Error
 * messages never contain credential values.
 */
sio_code sio_s3xml_parse_sts(const char *xml, size_t len,
                             sio_s3_sts_creds *out, sio_error *err);

/* Wipe the secrets, free every field and zero *c. NULL is fine. */
void sio_s3_sts_creds_free(sio_s3_sts_creds *c);

/*
 * Parse an ISO 8601 UTC timestamp as S3, STS and the credential endpoints
 * write it: "YYYY-MM-DDThh:mm:ss" with optional fractional seconds
 * (ignored) and a zone "Z" or "+hh:mm"/"-hh:mm". *out gets seconds since
 * the Unix epoch. SIO_ERR_FORMAT on anything else (nothing else accepted,
 * fields range-checked).
 */
sio_code sio_s3xml_parse_iso8601(const char *s, int64_t *out);

/* Run libxml2's global initialisation exactly once (pthread_once). Called
 * by every parse function; safe to call any number of times from any
 * thread. Never calls xmlCleanupParser (that would break other users). */
void sio_s3xml_global_init(void);

#endif /* SHARDIO_S3XML_H */
