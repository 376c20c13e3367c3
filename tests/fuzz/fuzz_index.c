/*
 * fuzz_index.c — libFuzzer harness for the shard index file reader
 * (shardio/tar/index.c: sio_index_parse, and sio_index_parse_for /
 * sio_index_check, the plausibility rules against the shard's size),
 * which reads files from state_dir and sidecars next to shards
 * (untrusted: anyone who can write to the bucket can write a sidecar).
 *
 * The input is an index file. The shard's size is taken from the input
 * too: the size its header claims, and that size shifted right by the low
 * 4 bits of the last byte (so that smaller shards, and the count bound,
 * are reached from any seed).
 *
 * Besides memory safety it checks the reader's promises on what it
 * accepts: groups in order and non-overlapping, a bad group has no
 * payload, at most SIO_INDEX_GROUPS_MAX groups; the parse is
 * deterministic (parsing twice gives the same groups); and what
 * sio_index_parse_for accepts for a shard size is what sio_index_parse
 * accepts and keeps every plausibility rule for that size: at most
 * size/512 groups (size/4 compressed), each starting inside the shard,
 * none with a gap before the next, the last reaching the tar's end, each
 * spanning a header block plus its payload.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardio_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ordered(const sio_index_file *f)
{
    if (f->ngroups > SIO_INDEX_GROUPS_MAX)
        abort();
    for (uint64_t i = 0; i < f->ngroups; i++) {
        const sio_index_group *g = &f->groups[i];
        if (g->end <= g->offset)
            abort();
        if (i > 0 && g->offset < f->groups[i - 1].end)
            abort();
        if ((g->flags & SIO_INDEX_GROUP_BAD) && g->bytes != 0)
            abort();
    }
}

static void check_plausible(const sio_index_file *f, uint64_t shard)
{
    if (shard == 0 || shard == UINT64_MAX)
        abort(); /* an unknown size is never plausible */
    if (f->flags & SIO_INDEX_STREAM_ONLY) {
        if (f->ngroups > shard / SIO_INDEX_PACKED_GROUP_MIN)
            abort();
        return;
    }
    if (f->ngroups > shard / SIO_INDEX_GROUP_SPAN_MIN)
        abort();
    uint64_t sum = 0;
    for (uint64_t i = 0; i < f->ngroups; i++) {
        const sio_index_group *g = &f->groups[i];
        int last = i + 1 == f->ngroups;
        if (g->offset >= shard)
            abort();
        if (last ? g->end != UINT64_MAX : g->end != f->groups[i + 1].offset)
            abort();
        uint64_t end = last ? shard : g->end;
        if (end > shard || end - g->offset < SIO_INDEX_GROUP_SPAN_MIN + g->bytes)
            abort();
        sum += g->bytes;
    }
    if (sum > shard) /* the payloads fit in the shard */
        abort();
}

static void check_for_size(const uint8_t *data, size_t size, uint64_t shard,
                           const sio_index_file *plain)
{
    sio_index_file f;
    sio_error e;
    if (sio_index_parse_for(data, size, shard, &f, &e) != SIO_OK) {
        if (f.groups || f.ngroups)
            abort(); /* nothing is kept of a refused file */
        return;
    }
    /* accepted for a size: accepted without one, the same groups */
    if (!plain || plain->ngroups != f.ngroups ||
        (f.ngroups &&
         memcmp(plain->groups, f.groups, (size_t)f.ngroups * sizeof *f.groups)))
        abort();
    if (sio_index_check(&f, shard, &e) != SIO_OK)
        abort();
    check_plausible(&f, shard);
    free(f.groups);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sio_index_file a, b;
    sio_error e;
    int ok = sio_index_parse(data, size, &a, &e) == SIO_OK;
    if (ok) {
        check_ordered(&a);
        if (sio_index_parse(data, size, &b, &e) != SIO_OK ||
            b.ngroups != a.ngroups ||
            (a.ngroups && memcmp(a.groups, b.groups,
                                 (size_t)a.ngroups * sizeof *a.groups) != 0))
            abort();
        free(b.groups);
    }
    if (size >= 24) {
        uint64_t shard = 0;
        for (int i = 7; i >= 0; i--)
            shard = (shard << 8) | data[16 + i];
        check_for_size(data, size, shard, ok ? &a : NULL);
        check_for_size(data, size, shard >> (data[size - 1] & 15),
                       ok ? &a : NULL);
    }
    if (ok)
        free(a.groups);
    return 0;
}
