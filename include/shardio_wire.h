/*
 * shardio_wire.h — the wire formats shardcast sends to its consumers, and
 * everything that writes or reads them: the tar stream's encoder and
 * reader, the frames encoder and decoder, the error trailer both formats
 * carry, and sio_wbuf. The module is shardio/wire/ (the library
 * shardcast_wire, which the C client and the Python accelerator link).
 *
 * The tar stream (format=tar): each sample of a consumer's share becomes its
 * fields as consecutive ustar regular-file members named
 * "<G>/<key>.<ext>", where <G> is the sample's global index in the epoch as
 * 12 zero-padded decimal digits. The first member of each sample is preceded
 * by a pax extended header (typeflag 'x', name "<G>/PaxHeader") carrying
 *   SHARDCAST.key=<original key>      SHARDCAST.shard=<redacted shard URL>
 *   SHARDCAST.index=<G>               SHARDCAST.position=<position in share>
 * and, for a mixed job (sio_wenc_set_sources), SHARDCAST.source=<name>
 * and a "path=" record when the member name does not fit the ustar
 * name/prefix fields; later members of the sample get a pax header only when
 * they need "path=".
 * The <key> of a member name is the sample key sanitised so that no
 * extractor can be led outside its directory (sio_tar_key_sanitize): the key
 * is split at '/'; empty components (a leading '/', "//") and "." are
 * dropped; ".." becomes "__"; control bytes and '\\' become '_'; an empty
 * result is "_". Keys are C strings, so they never hold NUL. The extension
 * gets the same byte replacement. The original key is always in
 * SHARDCAST.key; the shard URL is redacted as by sio_url_redact. Members: mode 0644, uid/gid 0, empty uname/gname,
 * mtime 0, magic "ustar\0" version "00", sizes in octal, base-256 from 8 GiB.
 *
 * A clean end is a top-level member "__shardcast_end__" holding the JSON
 * summary, then two zero blocks. A failure after streaming began is a member
 * "__shardcast_error__" holding the error trailer JSON (below: status,
 * reason, retryable, retry_after_ms) and NO zero blocks: the transport is
 * then cut, so no tar reader mistakes a broken stream for a complete one.
 *
 * Threading: a sio_tarw is used by one thread at a time; distinct writers
 * are independent. A sio_wbuf likewise. Nothing here has global state.
 */
#ifndef SHARDIO_WIRE_H
#define SHARDIO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"
#include "shardio_tarhdr.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Hex digits of a replica set's fingerprint (see sio_stream_ident). */
#define SIO_FINGERPRINT_LEN 32u

/*
 * What a stream says of where it comes from, in both formats: the frames
 * HEADER's identity keys, and the tar stream's first member, a pax global
 * header (typeflag 'g', name "pax_global_header") with the records
 *   SHARDCAST.job=<job>  SHARDCAST.epoch=<E>
 *   SHARDCAST.fingerprint=<hex>  SHARDCAST.replica=<J>
 *   SHARDCAST.replicas=<R>  SHARDCAST.served_by=<K>
 * fingerprint: what fixes the order of the replica set's epochs (the
 * server's /v1/topology?job= says what it covers); replica: the part of
 * the epoch served; served_by: the answering server's own replica number.
 */
typedef struct sio_stream_ident {
    char job[257];
    uint64_t epoch;
    char fingerprint[SIO_FINGERPRINT_LEN + 1];
    uint32_t replica, replicas, served_by;
} sio_stream_ident;

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
/* Append printf-style text, whole or not at all (a metrics line is never
 * cut). Errors as sio_wbuf_append; SIO_ERR_INVALID for a bad format. */
sio_code sio_wbuf_printf(sio_wbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Free the storage; the buffer is empty afterwards and can be reused. */
void sio_wbuf_free(sio_wbuf *b);

/* ------------------------------------------------------------------ */
/* The output chain: what the encoders made of a sample, in order        */

/*
 * A stream's bytes between its encoder and the socket, as pieces: header
 * bytes copied into the chain's own buffer, references into a sample's
 * memory (valid while the caller holds the sample), and byte ranges of
 * files, read only when the chain is drained, through the caller's reader
 * (which checks them). The encoders' sink appends pieces; the stream
 * drains them into the transport's buffer, as much at a time as it
 * takes. One copy of every payload byte: into that buffer.
 *
 * Threading: a chain belongs to one thread at a time; no global state.
 */
typedef struct sio_wpiece sio_wpiece;
typedef struct sio_wchain {
    sio_wbuf copy;       /* the copied bytes */
    sio_wpiece *pieces;
    size_t n, cap, max;  /* pieces, at most max */
    size_t at, at_off;   /* the next piece to drain, its bytes drained */
} sio_wchain;

/* An empty chain: copied bytes up to copy_max, at most pieces_max
 * pieces (appends beyond fail with SIO_ERR_LIMIT). */
void sio_wchain_init(sio_wchain *c, size_t copy_max, size_t pieces_max);
void sio_wchain_free(sio_wchain *c);
/* Append len bytes copied now / a reference to len bytes at p / len bytes
 * at off of fd. SIO_ERR_LIMIT, SIO_ERR_NOMEM. */
sio_code sio_wchain_copy(sio_wchain *c, const void *p, size_t len);
sio_code sio_wchain_ref(sio_wchain *c, const void *p, size_t len);
sio_code sio_wchain_file(sio_wchain *c, int fd, uint64_t off, size_t len);
/* Reads n bytes at off of fd into buf (a file piece's bytes), checked as
 * the caller wants: SIO_OK or the code that stops the drain. */
typedef sio_code (*sio_wchain_read_fn)(void *ud, int fd, void *buf,
                                       size_t n, uint64_t off);
/* Copy the chain's next bytes, at most max, into buf: the count. A file
 * piece whose read fails stops there (*rc its code, else SIO_OK). */
size_t sio_wchain_drain(sio_wchain *c, void *buf, size_t max,
                        sio_wchain_read_fn rd, void *ud, sio_code *rc);
/* Pieces appended and not drained yet; pieces appended at all. */
int sio_wchain_pending(const sio_wchain *c);
int sio_wchain_used(const sio_wchain *c);
/* Forget every piece; a copy buffer grown above keep bytes is freed. */
void sio_wchain_reset(sio_wchain *c, size_t keep);

/* ------------------------------------------------------------------ */
/* The error trailer, shared by both formats                            */

/*
 * The "__shardcast_error__" member and the ERROR frame carry one UTF-8 JSON
 * object, in this key order:
 *   {"status":"error","reason":"<text>","retryable":false}
 *   {"status":"error","reason":"<text>","retryable":true,"retry_after_ms":N}
 * retryable true: the failure is a transient state of the server (it is
 * draining for a restart, say), not of the share; the consumer should open
 * the stream again, no sooner than N ms from now, with start= the position
 * it reached, and will get the rest of its share exactly once.
 * retryable false: the share failed (corrupt data with on_error=fail, the
 * job was deleted, ...). A reader treats a trailer without "retryable" (a
 * server that predates the key) as false, ignores retry_after_ms when it
 * is false, and clamps N to SIO_RETRY_AFTER_MAX_MS. Unknown keys are
 * ignored.
 */

/* Bytes of reason text the encoders write and the parser keeps. */
#define SIO_WIRE_REASON_MAX 1024u
/* The longest retry advice honoured (10 minutes): a restart takes seconds
 * to minutes, and a corrupt or hostile value must not park a consumer. */
#define SIO_RETRY_AFTER_MAX_MS 600000u

/* A decoded error trailer. */
typedef struct sio_wire_error {
    char reason[SIO_WIRE_REASON_MAX + 1]; /* NUL-terminated */
    int retryable;
    uint32_t retry_after_ms; /* 0 unless retryable */
} sio_wire_error;

/* Encode the trailer JSON. On SIO_OK *out is a malloc'd NUL-terminated
 * string the caller frees; SIO_ERR_NOMEM otherwise (*out NULL). reason is
 * treated as by sio_wenc_error; retry_after_ms is written only when
 * retryable, clamped to SIO_RETRY_AFTER_MAX_MS. */
sio_code sio_wire_error_json(const char *reason, int retryable,
                             uint32_t retry_after_ms, char **out);

/* Parse a trailer of len bytes (not NUL-terminated) into *out. Errors (err
 * may be NULL): SIO_ERR_LIMIT (above SIO_FRAMES_JSON_MAX bytes),
 * SIO_ERR_FORMAT (not a JSON object, status not "error", no string reason,
 * retryable not a boolean, retry_after_ms not a non-negative integer). */
sio_code sio_wire_error_parse(const void *json, size_t len,
                              sio_wire_error *out, sio_error *err);

/* One ustar header block (sio_tar_header, sio_tar_name_fits):
 * shardio_tarhdr.h. */

/*
 * Append the member-name form of key (klen bytes) to out under the rule
 * above: the result has no ".." component, no leading '/', no empty
 * component, no control byte and no '\\'. SIO_ERR_LIMIT / SIO_ERR_NOMEM
 * from the buffer (out is then unchanged).
 */
sio_code sio_tar_key_sanitize(const char *key, size_t klen, sio_wbuf *out);

/* ------------------------------------------------------------------ */
/* The encoder interface                                                */

/*
 * One interface, two formats: a stream drives an sio_wenc made by
 * sio_tarw_create (format=tar) or sio_framew_create (format=frames) the
 * same way: samples, then the end or an error trailer.
 */
typedef struct sio_wenc sio_wenc;

/* The summary written at the clean end. */
/*
 * What the epoch skipped, told in the END summary of both formats as
 * "skipped": a JSON object the caller builds, e.g. {"shards":3,
 * "shard_urls":["s3://b/x-7.tar",...]} (at most
 * SIO_WIRE_SKIPPED_MAX bytes; a longer one is not sent). Set before
 * sio_wenc_end(); the text must live until then. Readers ignore keys they
 * do not know.
 */
#define SIO_WIRE_SKIPPED_MAX 8192u
void sio_wenc_set_skipped(sio_wenc *e, const char *json);

typedef struct sio_tarw_summary {
    uint64_t epoch;
    uint32_t rank;
    uint32_t world;
    uint64_t start;    /* the requested start position */
    uint64_t samples;  /* samples of the share handed out in this response */
    uint64_t position; /* position reached (start + samples) */
} sio_tarw_summary;

/*
 * Encode one sample at `position` of the consumer's share. The sample is
 * only read during the call; payloads are handed to the sink straight from
 * the sample, never copied by the encoder. A sample with no kept field:
 * tar writes nothing, frames a SAMPLE frame with no field.
 * Returns SIO_OK, SIO_ERR_INVALID (empty key), SIO_ERR_LIMIT (a name, key,
 * pax value, URL or payload above the format's limit, below),
 * SIO_ERR_NOMEM or the sink's code. After an error the stream is unusable
 * except for sio_wenc_error().
 */
sio_code sio_wenc_sample(sio_wenc *e, const sio_sample *s, uint64_t position);

/*
 * Payloads that are not in memory: a field's bytes at `offset` of file
 * descriptor fd (fd < 0: the field's bytes are in memory, at its data
 * pointer). The plan's data plane (shardio_plan.h) hands the stream's
 * sink where a payload lies instead of a copy of it, and the sink reads
 * it straight into the socket's buffer.
 */
typedef struct sio_extent {
    int fd;
    uint64_t offset;
} sio_extent;

/* Where an encoder hands a field that lies in a file: len bytes of
 * extent x (only read during the call). Return SIO_OK or a code that
 * stops the encoder, as sio_tarw_write_fn. */
typedef sio_code (*sio_wenc_extent_fn)(void *userdata, const sio_extent *x,
                                       size_t len);

/* Give the encoder a sink for file extents (it writes to the same
 * userdata as its byte sink). Needed before sio_wenc_sample_ext. */
void sio_wenc_set_extent_sink(sio_wenc *e, sio_wenc_extent_fn fn);

/* As sio_wenc_sample, where field i with ext[i].fd >= 0 lies in a file:
 * its bytes go to the extent sink, not the byte sink (its data pointer is
 * not read). The output is the same bytes as for the sample in memory.
 * SIO_ERR_INVALID when no extent sink was set. */
sio_code sio_wenc_sample_ext(sio_wenc *e, const sio_sample *s,
                             const sio_extent *ext, uint64_t position);

/* Write the clean end with the summary {"status":"ok",...}: tar, the
 * "__shardcast_end__" member then two zero blocks; frames, the END frame.
 * The caller then ends the response normally. */
sio_code sio_wenc_end(sio_wenc *e, const sio_tarw_summary *sum);

/*
 * Write the error trailer: tar, the "__shardcast_error__" member (no zero
 * blocks follow); frames, the ERROR frame. Its JSON is {"status":"error",
 * "reason":reason,"retryable":false}, or for a transient condition the
 * consumer should come back from (retryable != 0: the server drains for a
 * restart, ...) "retryable":true and "retry_after_ms" (above
 * SIO_RETRY_AFTER_MAX_MS written as that maximum). reason is any
 * NUL-terminated text (cut to SIO_WIRE_REASON_MAX bytes, escaped as JSON,
 * invalid UTF-8 replaced). The caller cuts the transport after it.
 */
sio_code sio_wenc_error(sio_wenc *e, const char *reason, int retryable,
                        uint32_t retry_after_ms);

/* A mixed job's source names, by sio_sample.source. tar: each sample's pax
 * header then carries SHARDCAST.source (names must outlive the encoder);
 * frames: nothing (the HEADER announced them, sio_frames_header.sources). */
void sio_wenc_set_sources(sio_wenc *e, const char *const *names, size_t n);

/* A heartbeat between samples: frames, a KEEPALIVE frame (type 0x80,
 * no payload: readers that do not know it skip it as an extension frame);
 * tar has none (SIO_ERR_UNSUPPORTED, nothing written). */
sio_code sio_wenc_keepalive(sio_wenc *e);

/* Bytes handed to the sink so far (frames: magic and HEADER included). */
uint64_t sio_wenc_bytes(const sio_wenc *e);

/* Free the encoder (NULL is fine). Writes nothing. */
void sio_wenc_destroy(sio_wenc *e);

/* ------------------------------------------------------------------ */
/* The streaming tar encoder                                             */

/*
 * Create a tar encoder that writes through fn(userdata, ...). `fields`,
 * when nfields > 0, is the filter: only fields whose names are listed are
 * sent (names are copied; each 1..SIO_TARW_FIELD_NAME_MAX bytes, at most
 * SIO_TARW_FILTER_MAX of them, else SIO_ERR_INVALID). nfields == 0 sends
 * every field. A sample is written as its kept fields as members, in the
 * sample's field order, the first one preceded by the sample's pax header;
 * its limits: a name or pax value above SIO_TARW_NAME_MAX is
 * SIO_ERR_LIMIT. On success *out is owned by the caller:
 * sio_wenc_destroy().
 */
sio_code sio_tarw_create(const char *const *fields, size_t nfields,
                         sio_tarw_write_fn fn, void *userdata,
                         sio_wenc **out, sio_error *err);

/*
 * Write the stream's identity as a pax global header (see
 * sio_stream_ident). Only before the first sample; SIO_ERR_INVALID after,
 * or for a job name that is empty or longer than 256 bytes or a
 * fingerprint that is not SIO_FINGERPRINT_LEN hex digits.
 */
sio_code sio_tarw_write_ident(sio_wenc *enc, const sio_stream_ident *id,
                              sio_error *err);

/* ================================================================== */
/* The frames format (format=frames), version 1                         */
/* ================================================================== */

/*
 * A compact length-prefixed binary stream for shardcast's own clients. All
 * integers are little-endian.
 *
 *   stream  = "SCF1" frame*
 *   frame   = u8 type, u8 flags (0), u16 reserved (0), u32 length L,
 *             L payload bytes
 *   HEADER  (0x01, first frame, exactly once): UTF-8 JSON
 *             {"version":1,"job":..,"epoch":E,"rank":R,"world":W,"start":S,
 *              "global_start":G,"partition":"even-drop"|"even-pad"|"none",
 *              "fields":[..] or null}, and for a mixed job
 *              "sources":[{"name":..,"first":F,"count":C},...] (readers
 *              ignore keys they do not know)
 *   SHARD   (0x02): u32 shard index, then the shard URL (rest of payload).
 *             Sent once per shard, before the first SAMPLE that refers to it.
 *   SAMPLE  (0x03): u64 global index, u64 position (in the consumer's
 *             share), u32 shard index, u16 key length, u16 field count, key
 *             bytes, then per field: u16 name length, u32 data length, name
 *             bytes, data bytes. Fields in shard order, after the fields=
 *             filter; a sample with no kept field is still sent (0 fields),
 *             so positions stay dense: start, start+1, ...
 *   END     (0x04, last frame on success): JSON {"status":"ok","epoch":E,
 *             "rank":R,"world":W,"start":S,"samples":N,"position":P}
 *   ERROR   (0x05, last frame on failure): the error trailer JSON
 *             (below); the transport is cut after it.
 * Types >= 0x80 are extensions a reader skips; any other unknown type is an
 * error. A stream that stops without END or ERROR is a cut stream, never a
 * complete epoch.
 *
 * Threading: an encoder or a sio_framer is used by one thread at a time;
 * distinct ones are independent.
 */

#define SIO_FRAMES_MAGIC "SCF1"
#define SIO_FRAMES_MAGIC_LEN 4u
#define SIO_FRAMES_VERSION 1
#define SIO_FRAMES_CONTENT_TYPE "application/x-shardcast-frames"

/* Bytes of a frame header: type, flags, reserved, length. */
#define SIO_FRAME_HEAD_LEN 8u
/* Readers reject a payload length above this (2^31 - 1): the largest
 * payload a signed 32-bit reader can hold, and above any sample the library
 * produces (SIO_SAMPLE_MAX_DEFAULT is 2 GiB including field data only). */
#define SIO_FRAME_PAYLOAD_MAX 0x7fffffffu
/* Fixed part of a SAMPLE payload and of one field within it. */
#define SIO_FRAME_SAMPLE_FIXED 24u
#define SIO_FRAME_FIELD_FIXED 6u
/* Sanity limit on a JSON payload (HEADER, END, ERROR): they carry a job
 * name, a field filter of at most SIO_TARW_FILTER_MAX short names, or a
 * reason that encoders cut to 1 KiB. */
#define SIO_FRAMES_JSON_MAX 65536u
/* Sanity limit on a job name in HEADER. */
#define SIO_FRAMES_JOB_MAX 256u
/* Sanity limit on a shard URL in SHARD (as for tar pax values). */
#define SIO_FRAMES_URL_MAX SIO_TARW_NAME_MAX
/* The encoder remembers which shards it has announced in a bitmap indexed
 * by shard index; indices at or above this (the library's own limit on
 * shards in one dataset) are refused with SIO_ERR_LIMIT. The bitmap grows
 * with the largest index seen: one bit per shard of the dataset (128 bytes
 * for 1,000 shards, 1.25 MB at this limit), which the memory formula of docs/architecture.md
 * formula counts per frames stream. */
#define SIO_FRAMEW_SHARDS_MAX 10000000u

typedef enum sio_frame_type {
    SIO_FRAME_HEADER = 0x01,
    SIO_FRAME_SHARD = 0x02,
    SIO_FRAME_SAMPLE = 0x03,
    SIO_FRAME_END = 0x04,
    SIO_FRAME_ERROR = 0x05,
    SIO_FRAME_EXT_MIN = 0x80, /* types from here on are skippable */
    /* A heartbeat: no payload. A server that announces heartbeat_ms in
     * HEADER sends one at least that often while the stream has nothing
     * else to send. */
    SIO_FRAME_KEEPALIVE = 0x80
} sio_frame_type;
/* Largest heartbeat_ms a HEADER may announce (a decoder refuses more). */
#define SIO_FRAMES_HEARTBEAT_MAX_MS 600000u

/* Longest source name a decoder accepts. */
#define SIO_FRAMES_SOURCE_NAME_MAX 64u

/* A mixed job's source: its name and its part of the shard list. */
typedef struct sio_frames_source {
    const char *name;
    uint32_t first, count; /* shard indices [first, first + count) */
} sio_frames_source;

/* What a stream is: the HEADER frame's content. Strings are not owned. */
typedef struct sio_frames_header {
    const char *job;
    uint64_t epoch;
    uint32_t rank, world;
    uint64_t start;        /* position within the share of the first sample */
    uint64_t global_start; /* elastic resume base (0: none) */
    sio_partition partition;
    /* A mixed job's sources (nsources 0: none, and no "sources" key):
     * HEADER gets "sources":[{"name":..,"first":F,"count":C},...], so a
     * sample's source is the one whose part holds its shard index. */
    const sio_frames_source *sources;
    size_t nsources;
    /* The replica set's identity (fingerprint NULL: not sent, and the
     * keys are absent): HEADER gets "fingerprint" (what fixes the order of
     * the set's epochs, SIO_FINGERPRINT_LEN hex digits), "replica" (the
     * part of the epoch this stream serves), "replicas" (R) and
     * "served_by" (the answering server's own replica). The decoder sets
     * has_ident and points fingerprint at its own copy ("" without). */
    const char *fingerprint;
    uint32_t replica, replicas, served_by;
    int has_ident;
    /* The server sends a KEEPALIVE frame at least every heartbeat_ms while
     * it has nothing else to send (0: it sends none, and HEADER has no
     * "heartbeat_ms" key): a reader may take a few times that of silence
     * for a dead server. */
    uint32_t heartbeat_ms;
} sio_frames_header;

/* ------------------------------------------------------------------ */
/* Encoder                                                              */

/*
 * Create a frames encoder writing through fn(userdata, ...) and write the
 * magic and the HEADER frame. `fields`, when nfields > 0, is the field
 * filter with the limits of sio_tarw_create (names copied); it is also
 * announced in the HEADER ("fields": null when nfields == 0). h and its
 * strings are only read during the call. Integers above INT64_MAX and a job
 * name that is NULL, empty or longer than SIO_FRAMES_JOB_MAX are
 * SIO_ERR_INVALID. A sample is written as a SHARD frame first when its
 * shard was not announced on this stream yet, then the SAMPLE frame with
 * the kept fields; its limits: key or field name above 65535 bytes, shard
 * URL above SIO_FRAMES_URL_MAX, payload above SIO_FRAME_PAYLOAD_MAX, shard
 * index >= SIO_FRAMEW_SHARDS_MAX are SIO_ERR_LIMIT. On success *out is
 * owned by the caller: sio_wenc_destroy(). On failure nothing is owned;
 * bytes may already have reached the sink.
 */
sio_code sio_framew_create(const sio_frames_header *h,
                           const char *const *fields, size_t nfields,
                           sio_tarw_write_fn fn, void *userdata,
                           sio_wenc **out, sio_error *err);

/* ------------------------------------------------------------------ */
/* Decoder: an incremental push parser                                  */

typedef struct sio_framer sio_framer;

/* Decoder limits; 0 means the default named beside each. */
typedef struct sio_framer_limits {
    uint32_t payload_max;  /* largest frame payload (SIO_FRAME_PAYLOAD_MAX) */
    uint32_t fields_max;   /* fields in one sample (SIO_FIELDS_MAX_DEFAULT) */
    uint32_t shards_max;   /* shards announced on one stream
                              (SIO_FRAMER_SHARDS_MAX_DEFAULT) */
    uint64_t shard_bytes_max; /* bytes of shard URLs held
                                 (SIO_FRAMER_SHARD_BYTES_DEFAULT) */
} sio_framer_limits;

#define SIO_FRAMER_SHARDS_MAX_DEFAULT 1000000u
#define SIO_FRAMER_SHARD_BYTES_DEFAULT (256ull << 20)

/* Events (sio_frame_event.type). */
typedef enum sio_framer_event_type {
    SIO_FRAMER_NONE = 0, /* all input consumed, no complete frame yet */
    SIO_FRAMER_HEADER = SIO_FRAME_HEADER,
    SIO_FRAMER_SHARD = SIO_FRAME_SHARD,
    SIO_FRAMER_SAMPLE = SIO_FRAME_SAMPLE,
    SIO_FRAMER_END = SIO_FRAME_END,
    SIO_FRAMER_ERROR = SIO_FRAME_ERROR
} sio_framer_event_type;

/* One field of a decoded sample: views, not NUL-terminated. */
typedef struct sio_frame_field {
    const char *name;
    size_t name_len;
    const unsigned char *data;
    size_t len;
} sio_frame_field;

/*
 * A decoded event. Views marked (call) are valid until the next call on
 * the decoder and, when they point into the caller's input (a frame that
 * arrived whole in one chunk), as long as that input is unchanged. Those
 * marked (decoder) live as long as the decoder.
 */
typedef struct sio_frame_event {
    int type; /* sio_framer_event_type */

    /* HEADER (decoder): the header, plus the field filter, if any. */
    sio_frames_header header;
    int has_fields;             /* 0: "fields": null */
    size_t nfields;
    const char *const *fields;  /* NUL-terminated names */

    /* SHARD and SAMPLE: shard index and its URL (decoder, NUL-terminated) */
    uint32_t shard_index;
    const char *shard_url;
    size_t shard_url_len;

    /* SAMPLE (call) */
    uint64_t global_index;
    uint64_t position;
    const char *key;            /* not NUL-terminated */
    size_t key_len;
    size_t nsample_fields;
    const sio_frame_field *sample_fields;
    size_t sample_bytes;        /* sum of field data lengths */
    uint32_t source;            /* a mixed job's source of the sample
                                   (header.sources index), UINT32_MAX
                                   when the stream names none */

    /* END */
    sio_tarw_summary summary;
    /* END (call): the summary's JSON as sent, for what the struct does
     * not hold (e.g. "skipped", sio_wenc_set_skipped) */
    const char *end_json;
    size_t end_json_len;

    /* ERROR (decoder until the decoder is destroyed) */
    const char *reason;
    int retryable;           /* the server asks the consumer to come back */
    uint32_t retry_after_ms; /* no sooner than this (0 unless retryable) */
} sio_frame_event;

/* State of a decoder (sio_framer_state). */
typedef enum sio_framer_status {
    SIO_FRAMER_OPEN = 0,   /* no END/ERROR yet */
    SIO_FRAMER_ENDED = 1,  /* END decoded: the share ended cleanly */
    SIO_FRAMER_FAILED = 2, /* ERROR decoded: the server gave up */
    SIO_FRAMER_BROKEN = 3  /* the bytes violate the format */
} sio_framer_status;

/* Create a decoder (limits may be NULL). Owned by the caller:
 * sio_framer_destroy(). */
sio_code sio_framer_create(const sio_framer_limits *limits, sio_framer **out,
                           sio_error *err);

/*
 * Push bytes. Consumes input up to and including the next complete frame
 * and stops there: *used is the number of bytes of data taken, ev->type the
 * event (SIO_FRAMER_NONE when all len bytes were taken without completing a
 * frame). Call again with the rest. Any chunking of the stream gives the
 * same events. Payload lengths, counts and sizes are checked against the
 * limits and the frame's own length before use.
 * Errors (the decoder is then BROKEN and returns the same code forever;
 * detail in sio_framer_errmsg()): SIO_ERR_FORMAT (bad magic, unknown type,
 * non-zero flags, malformed payload or JSON, a sample of an unannounced
 * shard, positions that are not dense, END that disagrees with what was
 * received, bytes after END/ERROR), SIO_ERR_LIMIT (a length above a limit),
 * SIO_ERR_UNSUPPORTED (HEADER version other than 1), SIO_ERR_NOMEM.
 */
sio_code sio_framer_feed(sio_framer *f, const void *data, size_t len,
                         size_t *used, sio_frame_event *ev);

/*
 * The input is over. SIO_OK when the stream ended with END; SIO_ERR_IO when
 * it ended with ERROR (detail: "server error: <reason>") or was cut
 * (detail says where: before the header, inside a frame, between frames);
 * the decoder's error code when it is BROKEN.
 */
sio_code sio_framer_finish(sio_framer *f);

sio_framer_status sio_framer_state(const sio_framer *f);
/* Detail of the last error; "" when none. Valid until the next call. */
const char *sio_framer_errmsg(const sio_framer *f);
/* Bytes consumed so far, and SAMPLE frames decoded so far. */
uint64_t sio_framer_bytes(const sio_framer *f);
uint64_t sio_framer_samples(const sio_framer *f);
void sio_framer_destroy(sio_framer *f);

/* ================================================================== */
/* Reading the tar stream                                               */
/* ================================================================== */

/*
 * sio_tarr_parse reads the format=tar stream back into samples (the C
 * client's tar path). It is a pure function over a buffer that starts at a
 * member boundary: the caller buffers until the answer is not NEED and
 * calls it again on the grown buffer, so it keeps no state between calls
 * and every view it returns points into that buffer.
 */

/* What one call of sio_tarr_parse found. */
typedef enum sio_tarr_kind {
    SIO_TARR_NEED = 0, /* call again once `need` bytes are buffered */
    SIO_TARR_SAMPLE,   /* a complete sample */
    SIO_TARR_END,      /* the "__shardcast_end__" member */
    SIO_TARR_ERROR,    /* the "__shardcast_error__" member */
    SIO_TARR_IDENT     /* the pax global header with the stream's identity
                          (r->ident); skip `consumed` bytes and go on */
} sio_tarr_kind;

/* Sanity limits of the reader. */
#define SIO_TARR_PAX_MAX (512u * 1024u) /* bytes of one pax header: the
                                           encoder's own bound (8 records
                                           of at most 64 KiB) */
#define SIO_TARR_TRAILER_MAX 65536u     /* bytes of an end/error member */

/* A sample read from the tar stream: views into the caller's buffer (key
 * and shard URL not NUL-terminated); fields in the caller's array, in
 * stream order. The tar format does not carry the shard index. */
typedef struct sio_tarr_sample {
    uint64_t global_index; /* from the "<G>/" member names */
    uint64_t position;     /* SHARDCAST.position */
    const char *key;       /* SHARDCAST.key */
    size_t key_len;
    const char *shard_url; /* SHARDCAST.shard ("" when absent) */
    size_t shard_url_len;
    size_t nfields;
    sio_frame_field *fields;
    uint64_t bytes;        /* sum of field data lengths */
} sio_tarr_sample;

typedef struct sio_tarr_result {
    sio_tarr_kind kind;
    size_t need;            /* NEED: bytes from the start of the input */
    size_t consumed;        /* SAMPLE/END/ERROR: bytes that belong to it */
    sio_tarr_sample sample; /* SAMPLE */
    sio_tarw_summary summary; /* END */
    const char *end_json;     /* END: its JSON as sent (a view into the
                                 buffer), for keys the struct does not
                                 hold, e.g. "skipped" */
    size_t end_json_len;
    sio_wire_error error;   /* ERROR: the trailer; an empty reason reads
                               "(no reason given)" */
    sio_stream_ident ident; /* IDENT */
} sio_tarr_result;

/*
 * Parse the stream in p[0..len). A sample is complete once the header
 * after its last member is in view (or a trailer member). `fields` has
 * room for fields_max entries; member_max bounds one member's size.
 * Returns SIO_OK with *r filled, SIO_ERR_FORMAT (bad checksum, a member
 * outside any sample, a name not of the stream's form, a trailer that is
 * not the expected JSON, the end of the archive without a trailer), or
 * SIO_ERR_LIMIT (a member above member_max, more fields than fields_max, a
 * pax header above SIO_TARR_PAX_MAX), with the detail in err (may be NULL).
 */
sio_code sio_tarr_parse(const unsigned char *p, size_t len,
                        sio_frame_field *fields, size_t fields_max,
                        uint64_t member_max, sio_tarr_result *r,
                        sio_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SHARDIO_WIRE_H */
