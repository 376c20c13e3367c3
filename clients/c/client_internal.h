/*
 * client_internal.h — pieces of libshardcast_client shared between its
 * sources (not installed): the tar stream reader.
 *
 * Threading: pure functions on caller-provided memory; safe from any
 * thread.
 */
#ifndef SCC_CLIENT_INTERNAL_H
#define SCC_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "shardcast_client.h"
#include "shardio_wire.h"

/* What one call of scc_tar_parse found. */
typedef enum scc_tar_kind {
    SCC_TAR_NEED = 0,  /* call again once `need` bytes are buffered */
    SCC_TAR_SAMPLE,    /* a complete sample */
    SCC_TAR_END,       /* the "__shardcast_end__" member */
    SCC_TAR_ERROR      /* the "__shardcast_error__" member */
} scc_tar_kind;

/* Sanity limits of the tar reader. */
#define SCC_TAR_PAX_MAX (512u * 1024u) /* bytes of one pax header: the
                                          encoder's own bound (8 records of
                                          at most 64 KiB) */
#define SCC_TAR_TRAILER_MAX 65536u     /* bytes of an end/error member */

typedef struct scc_tar_result {
    scc_tar_kind kind;
    size_t need;     /* NEED: bytes from the start of the input */
    size_t consumed; /* SAMPLE/END/ERROR: bytes that belong to it */
    scc_sample sample; /* SAMPLE: views into the input; fields in the
                          caller's array */
    scc_summary summary; /* END */
    char reason[SIO_WIRE_REASON_MAX + 1]; /* ERROR: the server's reason */
    int retryable;       /* ERROR: the server asks to come back ... */
    uint32_t retry_after_ms; /* ... no sooner than this (0: no advice) */
} scc_tar_result;

/*
 * Parse the shardcast tar stream in p[0..len), which starts at a member
 * boundary. A sample is complete once the header after its last member is
 * in view (or a trailer member). `fields` has room for fields_max entries;
 * member_max bounds one member's size. Returns SCC_OK with *r filled,
 * SCC_ERR_PROTOCOL (bad checksum, a member outside any sample, a name not
 * of the stream's form, a trailer that is not the expected JSON, the end
 * of the archive without a trailer), or SCC_ERR_LIMIT (a member above
 * member_max, more fields than fields_max, a pax header above
 * SCC_TAR_PAX_MAX), with a message in err[errlen].
 */
scc_code scc_tar_parse(const unsigned char *p, size_t len,
                       scc_field *fields, size_t fields_max,
                       uint64_t member_max, scc_tar_result *r, char *err,
                       size_t errlen);

#endif /* SCC_CLIENT_INTERNAL_H */
