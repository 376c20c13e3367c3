/*
 * creds.h — AWS credential providers (internal to libshardio).
 *
 * The chain, in the AWS SDKs' order, stops at the first provider that has
 * credentials:
 *   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
 *      [, AWS_SESSION_TOKEN];
 *   2. shared files: AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) then
 *      AWS_CONFIG_FILE (~/.aws/config, "[profile NAME]" sections), for the
 *      profile from the config, AWS_PROFILE or "default"; a profile with
 *      role_arn + web_identity_token_file uses web identity;
 *   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
 *      [+ AWS_ROLE_SESSION_NAME] through STS AssumeRoleWithWebIdentity
 *      (endpoint: config, AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, else the
 *      regional STS endpoint);
 *   4. container endpoint: AWS_CONTAINER_CREDENTIALS_FULL_URI or
 *      AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, with
 *      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or ..._TOKEN;
 *   5. IMDSv2 (AWS_EC2_METADATA_SERVICE_ENDPOINT, default
 *      http://169.254.169.254; off with AWS_EC2_METADATA_DISABLED=true),
 *      with short timeouts so it never stalls start-up off EC2.
 * The chain is resolved on first use. Temporary credentials (those with an
 * expiry) are refreshed by a background thread refresh_before_s seconds
 * before they expire, from the provider that gave them; readers keep
 * getting the old, still valid ones meanwhile.
 *
 * Threading: a provider is thread-safe; sio_creds_get() copies a snapshot
 * under the provider's lock. Secrets: values never appear in logs or error
 * messages; snapshots are wiped when freed.
 */
#ifndef SHARDIO_CREDS_H
#define SHARDIO_CREDS_H

#include <stddef.h>
#include <stdint.h>

#include "store/fetch.h"

/* Limits on what the providers read. */
#define SIO_CREDS_FILE_MAX (1u << 20)   /* a shared credentials/config file */
#define SIO_CREDS_LINE_MAX 4096u        /* one line of such a file */
#define SIO_CREDS_TOKEN_FILE_MAX (64u << 10) /* web identity / container token */
#define SIO_CREDS_VALUE_MAX 16384u      /* one credential value */

typedef struct sio_creds sio_creds;

typedef struct sio_creds_config {
    sio_fetch *fetch;          /* for STS, container and IMDS; borrowed, must
                                  outlive the provider */
    const char *profile;       /* NULL: AWS_PROFILE, else "default" */
    const char *region;        /* picks the regional STS endpoint (NULL:
                                  the global one) */
    const char *sts_endpoint;  /* NULL: AWS_ENDPOINT_URL_STS,
                                  AWS_ENDPOINT_URL, else AWS STS */
    uint32_t refresh_before_s; /* 0: 300 */
    uint32_t imds_timeout_ms;  /* per IMDS / container request (0: 1000) */
    sio_logger log;
} sio_creds_config;

/* One set of credentials; every string malloc'd; secrets. */
typedef struct sio_creds_value {
    char *access_key;
    char *secret_key;
    char *session_token; /* NULL: none */
    int64_t expires_at;  /* Unix seconds; 0: does not expire */
} sio_creds_value;

/* Build a provider (reads nothing yet). Strings are copied. */
sio_code sio_creds_create(const sio_creds_config *cfg, sio_creds **out,
                          sio_error *err);
void sio_creds_destroy(sio_creds *c);

/*
 * A snapshot of the current credentials into *out (free it with
 * sio_creds_value_free). may_block nonzero: resolve the chain on first use
 * and refresh credentials that have already expired, in this thread. Zero
 * (the fetch engine's thread): never touch the network; SIO_ERR_AUTH when
 * nothing was loaded yet. SIO_ERR_AUTH also when no provider has
 * credentials; err says which providers were tried, never a secret.
 */
sio_code sio_creds_get(sio_creds *c, int may_block, sio_creds_value *out,
                       sio_error *err);
void sio_creds_value_free(sio_creds_value *v);

/* The provider in use: "env", "profile", "web-identity", "container",
 * "imds", or "" before the first successful load. */
const char *sio_creds_source(sio_creds *c);

/*
 * INI lookup as the shared files use it: `section` is the whole bracketed
 * name ("default", "profile dev"); keys are matched case-insensitively,
 * whitespace around '=' and values is trimmed, lines starting with '#' or
 * ';' are comments, indented lines continue a nested block and are
 * skipped. On SIO_OK out holds the value (NUL-terminated);
 * SIO_ERR_NOTFOUND when absent, SIO_ERR_LIMIT for a line past
 * SIO_CREDS_LINE_MAX or a value past outlen.
 */
sio_code sio_creds_ini_get(const char *text, size_t len, const char *section,
                           const char *key, char *out, size_t outlen);

/* Nonzero when the INI text has the section. */
int sio_creds_ini_has_section(const char *text, size_t len,
                              const char *section);

/* AWS's reading of error bodies (S3 <Error>, STS <ErrorResponse>: code,
 * message, which codes mean retry or slow down), a sio_fetch_classify_fn.
 * Defined in backend_s3.c, which registers it on the io's engine; the
 * credential calls (STS) rely on it through that same engine. */
void sio_s3_classify(long status, const char *body, size_t len,
                     sio_fetch_verdict *v);

#endif /* SHARDIO_CREDS_H */
