/*
 * samplesum.h — what the epoch and plan tests compare samples by: a
 * FNV-1a sum of a sample's key and payload (and, for a stricter check,
 * its field names), and the xorshift generator their random datasets
 * come from.
 */
#ifndef SHARDCAST_TEST_SAMPLESUM_H
#define SHARDCAST_TEST_SAMPLESUM_H

#include <stdint.h>
#include <string.h>

#include "shardio.h"

static inline uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Key and payload; with names, the field names too. */
static inline uint64_t sample_sum_of(const sio_sample *s, int names)
{
    uint64_t h = fnv_bytes(0xcbf29ce484222325ull, s->key, strlen(s->key));
    for (size_t f = 0; f < s->nfields; f++) {
        if (names)
            h = fnv_bytes(h, s->fields[f].name, strlen(s->fields[f].name));
        h = fnv_bytes(h, s->fields[f].data, s->fields[f].len);
    }
    return h;
}

static inline uint64_t xorshift_next(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

#endif
