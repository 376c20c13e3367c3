/*
 * sample.h — building sio_sample objects (internal).
 *
 * A builder collects the fields of one sample while its tar members are
 * read, then hands the payload block over to the finished sample without
 * copying it. A builder is used by one thread; finished samples are
 * immutable and reference counted (atomic), so they may be shared.
 */
#ifndef SHARDIO_SAMPLE_H
#define SHARDIO_SAMPLE_H

#include "shardio.h"

typedef struct sample_field_ref {
    size_t name_off; /* offset of the name in the builder's name buffer */
    size_t data_off; /* offset of the payload in the data block */
    size_t len;
} sample_field_ref;

typedef struct sample_builder {
    unsigned char *data; /* payload block being filled */
    size_t dlen, dcap;
    char *names;         /* NUL separated field names */
    size_t nlen, ncap;
    sample_field_ref *f;
    size_t nf, fcap;
    char *key;           /* current key (malloc'd) */
    size_t keylen;
    uint64_t data_max;   /* limit on dlen (the sample limit) */
    uint32_t fields_max;
} sample_builder;

void sb_init(sample_builder *b, uint64_t data_max, uint32_t fields_max);
void sb_free(sample_builder *b);
/* Forget the current sample, keep the buffers. */
void sb_reset(sample_builder *b);
sio_code sb_set_key(sample_builder *b, const char *key, size_t len);
/* Is a field of this name already in the sample? */
int sb_has_field(const sample_builder *b, const char *name);
/* Reserve room for len payload bytes of a new field named name; returns the
 * write pointer (valid until the next builder call) or NULL with *rc set. */
unsigned char *sb_begin_field(sample_builder *b, const char *name,
                              uint64_t len, sio_code *rc);
/* A field of len bytes that are not kept (its size and name only, as
 * sb_begin_field checks them): the builder then describes a group, and
 * must be reset, not finished. */
sio_code sb_size_field(sample_builder *b, const char *name, uint64_t len);
/* Commit `len` bytes written to the last field (may be less than reserved
 * only when the field is being abandoned). */
void sb_end_field(sample_builder *b, size_t len);
/* Turn the collected fields into a sample (refcount 1). The builder is
 * reset and keeps no pointer into the result. */
sio_code sb_finish(sample_builder *b, const char *shard_url,
                   uint32_t shard_index, uint64_t index_in_shard,
                   const sio_sample **out);

#endif
