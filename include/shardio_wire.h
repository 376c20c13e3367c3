/*
 * shardio_wire.h — the wire formats shardcast sends to its consumers.
 *
 * The tar stream (format=tar): each sample of a consumer's share becomes its
 * fields as consecutive ustar regular-file members named
 * "<G>/<key>.<ext>", where <G> is the sample's global index in the epoch as
 * 12 zero-padded decimal digits. The first member of each sample is preceded
 * by a pax extended header (typeflag 'x', name "<G>/PaxHeader") carrying
 *   SHARDCAST.key=<original key>      SHARDCAST.shard=<shard URL>
 *   SHARDCAST.index=<G>               SHARDCAST.position=<position in share>
 * and a "path=" record when the member name does not fit the ustar
 * name/prefix fields; later members of the sample get a pax header only when
 * they need "path=". Members: mode 0644, uid/gid 0, empty uname/gname,
 * mtime 0, magic "ustar\0" version "00", sizes in octal, base-256 from 8 GiB.
 *
 * A clean end is a top-level member "__shardcast_end__" holding the JSON
 * summary, then two zero blocks. A failure after streaming began is a member
 * "__shardcast_error__" holding {"status":"error","reason":...} and NO zero
 * blocks: the transport is then cut, so no tar reader mistakes a broken
 * stream for a complete one.
 *
 * Threading: a sio_tarw is used by one thread at a time; distinct writers
 * are independent. A sio_wbuf likewise. Nothing here has global state.
 */
#ifndef SHARDIO_WIRE_H
#define SHARDIO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIO_TAR_BLOCK 512u

/* Names of the trailer members of a tar stream. */
#define SIO_TARW_END_NAME "__shardcast_end__"
#define SIO_TARW_ERROR_NAME "__shardcast_error__"

/* Digits of the zero-padded global index that starts every member name. */
#define SIO_TARW_INDEX_DIGITS 12

/*
 * Sanity limit on one member name ("<G>/<key>.<ext>") and on one pax value:
 * keys and URLs come from shard contents and configuration, and a pax header
 * is built in memory, so both are bounded. 64 KiB is far above PATH_MAX and
 * any object-store key length (S3: 1024 bytes).
 */
#define SIO_TARW_NAME_MAX 65536u

/* Limits of a field filter: how many names, and how long one name may be. */
#define SIO_TARW_FILTER_MAX 64u
#define SIO_TARW_FIELD_NAME_MAX 64u

/*
 * Output callback of the encoder: consume len bytes at data. data is valid
 * only during the call (payload pointers point straight into the sample, so
 * the sink is the one place where payload bytes are copied). Return SIO_OK,
 * or any other code to stop the encoder (which returns that code).
 */
typedef sio_code (*sio_tarw_write_fn)(void *userdata, const void *data,
                                      size_t len);

/* ------------------------------------------------------------------ */
/* A growable byte buffer with a maximum, usable as a sio_tarw sink      */

typedef struct sio_wbuf {
    unsigned char *data; /* malloc'd, owned by the buffer; NULL when empty */
    size_t len;          /* bytes in use */
    size_t cap;          /* bytes allocated */
    size_t max;          /* appends beyond this many bytes fail (LIMIT) */
} sio_wbuf;

/* Start an empty buffer that will never hold more than max bytes. */
void sio_wbuf_init(sio_wbuf *b, size_t max);
/* Append len bytes. SIO_ERR_LIMIT beyond b->max, SIO_ERR_NOMEM. Has the
 * signature of sio_tarw_write_fn with userdata = the sio_wbuf. */
sio_code sio_wbuf_append(void *b, const void *data, size_t len);
/* Free the storage; the buffer is empty afterwards and can be reused. */
void sio_wbuf_free(sio_wbuf *b);

/* ------------------------------------------------------------------ */
/* Low-level: one ustar header block                                    */

/*
 * Fill block[SIO_TAR_BLOCK] with a ustar header for `name` (name_len bytes,
 * not necessarily NUL-terminated), typeflag ('0' regular, 'x' pax) and size,
 * with the fixed attributes of the stream format. The name is split into
 * the ustar prefix/name fields when it fits; otherwise *fits is set to 0 and
 * the name field holds a truncated form (the caller must then precede the
 * member with a pax "path=" record). Sizes >= 8 GiB are written base-256.
 */
void sio_tar_header(unsigned char block[SIO_TAR_BLOCK], const char *name,
                    size_t name_len, char typeflag, uint64_t size, int *fits);

/* Does `name` fit the ustar prefix/name fields (so needs no pax path=)? */
int sio_tar_name_fits(const char *name, size_t name_len);

/* ------------------------------------------------------------------ */
/* The streaming tar encoder                                             */

typedef struct sio_tarw sio_tarw;

/*
 * Create an encoder that writes through fn(userdata, ...). `fields`, when
 * nfields > 0, is the filter: only fields whose names are listed are sent
 * (names are copied; each 1..SIO_TARW_FIELD_NAME_MAX bytes, at most
 * SIO_TARW_FILTER_MAX of them, else SIO_ERR_INVALID). nfields == 0 sends
 * every field. On success *out is owned by the caller: sio_tarw_destroy().
 */
sio_code sio_tarw_create(const char *const *fields, size_t nfields,
                         sio_tarw_write_fn fn, void *userdata,
                         sio_tarw **out, sio_error *err);

/*
 * Encode one sample: its kept fields as members, in the sample's field
 * order, the first one preceded by the sample's pax header. `position` is
 * the sample's position within the consumer's share. A sample with no kept
 * field writes nothing. The sample is only read during the call; payloads
 * are handed to the sink without an intermediate copy.
 * Returns SIO_OK, SIO_ERR_LIMIT (a name or pax value above
 * SIO_TARW_NAME_MAX), SIO_ERR_INVALID (empty key), SIO_ERR_NOMEM, or the
 * sink's code. After an error the stream is unusable except for
 * sio_tarw_error().
 */
sio_code sio_tarw_sample(sio_tarw *w, const sio_sample *s, uint64_t position);

/* The summary written into the end member. */
typedef struct sio_tarw_summary {
    uint64_t epoch;
    uint32_t rank;
    uint32_t world;
    uint64_t start;    /* the requested start position */
    uint64_t samples;  /* samples of the share handed out in this response */
    uint64_t position; /* position reached (start + samples) */
} sio_tarw_summary;

/* Write the clean end: the "__shardcast_end__" member with the JSON
 * summary, then two zero blocks. */
sio_code sio_tarw_end(sio_tarw *w, const sio_tarw_summary *sum);

/* Write the error trailer: the "__shardcast_error__" member with
 * {"status":"error","reason":reason}. No zero blocks follow; the caller cuts
 * the transport after it. reason is any NUL-terminated text (escaped as JSON;
 * invalid UTF-8 is replaced). */
sio_code sio_tarw_error(sio_tarw *w, const char *reason);

/* Bytes handed to the sink so far. */
uint64_t sio_tarw_bytes(const sio_tarw *w);

/* Free the encoder (NULL is fine). Writes nothing. */
void sio_tarw_destroy(sio_tarw *w);

#ifdef __cplusplus
}
#endif
#endif /* SHARDIO_WIRE_H */
