/*
 * redact.h — the credential rule of URL redaction (internal to
 * libshardio; sio_url_redact and sio_redact_text are public in
 * include/shardio.h). Implemented in core/redact.c.
 */
#ifndef SHARDIO_REDACT_H
#define SHARDIO_REDACT_H

#include <stddef.h>

/* Longest URL accepted (the whole string). S3 keys are <= 1024 bytes;
 * http URLs with long queries fit easily. */
#define SIO_URL_MAX 8192u
/* Longest query parameter name compared against the credential list;
 * longer names are treated as credentials. */
#define SIO_URL_PARAM_NAME_MAX 64u

/*
 * Does the query parameter name (n bytes, percent-encoded as written)
 * carry a credential? The documented list (include/shardio.h,
 * sio_url_redact) matched on the decoded, lowercased name.
 */
int sio_url_param_is_credential(const char *name, size_t n);

#endif /* SHARDIO_REDACT_H */
