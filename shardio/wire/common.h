/*
 * wire/common.h — what the two wire encoders (the tar encoder sio_tarw in
 * wire/tarwrite.c and the frames encoder sio_framew in wire/frames.c)
 * share, so that the formats cannot drift apart: the encoder interface
 * they implement, the sink that counts the bytes handed on, the field
 * filter, and the JSON of the end summary. The
 * error trailer, the other piece both formats carry, has its own file
 * (wire/wireerr.c, public in include/shardio_wire.h). Internal to the wire
 * module; not installed.
 *
 * Threading: a sink or a filter belongs to its encoder's thread; the
 * functions keep no state of their own.
 */
#ifndef SHARDIO_WIRE_COMMON_H
#define SHARDIO_WIRE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "shardio_wire.h"

/* Where an encoder's bytes go, and how many went there. */
typedef struct sio_wire_sink {
    sio_tarw_write_fn fn;
    void *userdata;
    uint64_t bytes; /* handed to fn and accepted */
    sio_wenc_extent_fn extent_fn; /* file extents (NULL: none) */
    const sio_extent *ext;        /* the sample's, during sample_ext */
} sio_wire_sink;

/* Hand len bytes to the sink (nothing for len 0) and count them when it
 * accepts them. Returns SIO_OK or the sink's code. */
sio_code sio_wire_emit(sio_wire_sink *k, const void *data, size_t len);

/* Hand field i of s to the sink: from its file extent when the sample
 * being encoded has one (sio_wenc_sample_ext), else from memory. The one
 * way an encoder hands on payload bytes. */
sio_code sio_wire_emit_field(sio_wire_sink *k, const sio_sample *s,
                             size_t i);

/* What each format implements behind the encoder interface (sio_wenc_*,
 * include/shardio_wire.h). error() gets the trailer's JSON text, already
 * built by sio_wire_error_json; set_sources may be NULL (the format has
 * nothing to do with the names). */
typedef struct sio_wenc_ops {
    sio_code (*sample)(sio_wenc *e, const sio_sample *s, uint64_t position);
    sio_code (*end)(sio_wenc *e, const sio_tarw_summary *sum);
    sio_code (*error)(sio_wenc *e, const char *json);
    void (*set_sources)(sio_wenc *e, const char *const *names, size_t n);
    void (*free)(sio_wenc *e);
    /* A heartbeat (NULL: the format has none). */
    sio_code (*keepalive)(sio_wenc *e);
} sio_wenc_ops;

/* The first member of each format's encoder. */
struct sio_wenc {
    const sio_wenc_ops *ops;
    sio_wire_sink out;
    const char *skipped; /* sio_wenc_set_skipped (NULL: none) */
};

/* The fields= filter of an encoder: n == 0 keeps every field. */
typedef struct sio_wire_filter {
    size_t n;
    char names[SIO_TARW_FILTER_MAX][SIO_TARW_FIELD_NAME_MAX + 1];
} sio_wire_filter;

/* Copy nfields names (the caller has checked nfields <= SIO_TARW_FILTER_MAX
 * and fields != NULL when nfields > 0). A name that is NULL, empty or above
 * SIO_TARW_FIELD_NAME_MAX bytes is SIO_ERR_INVALID with the message
 * "<who>: field name <i> is empty or too long"; f is then unusable. */
sio_code sio_wire_filter_set(sio_wire_filter *f, const char *const *fields,
                             size_t nfields, const char *who, sio_error *err);

/* Does the filter keep the field called name? */
int sio_wire_filter_keeps(const sio_wire_filter *f, const char *name);

/* Room for the end summary's JSON, NUL included. */
#define SIO_WIRE_SUMMARY_MAX (320u + SIO_WIRE_SKIPPED_MAX)

/* Write the end summary {"status":"ok","epoch":E,"rank":R,"world":W,
 * "start":S,"samples":N,"position":P} into buf, with "skipped":<json>
 * when skipped is not NULL (at most SIO_WIRE_SKIPPED_MAX bytes, else it is
 * left out); returns its length (the numbers need under 200 bytes). */
size_t sio_wire_summary_json(const sio_tarw_summary *sum, const char *skipped,
                             char buf[SIO_WIRE_SUMMARY_MAX]);

#endif /* SHARDIO_WIRE_COMMON_H */
