/*
 * partition.c — how an epoch's sequence Y is dealt to consumers: the
 * policy names and the index arithmetic that the feed and the reference
 * consumer (sio_consumer) share. Every index a client can influence
 * (rank, world, global_start, start) goes through here, overflow-checked
 * against SIO_POSITION_MAX.
 *
 * Consumer r of W from global_start G gets, at share position k, the
 * index i = G + r + k*W. With N samples in Y and m = N - G:
 *   even-drop: k < floor(m / W)           (the last m mod W are dropped)
 *   even-pad:  k < ceil(m / W); i >= N takes Y[G + (i - G) mod m]
 *   none:      i < N                      (counts differ by at most one)
 *
 * Pure functions, no state: thread-safe.
 */
#include <stdio.h>
#include <string.h>

#include "shardio.h"

const char *sio_partition_name(sio_partition p)
{
    switch (p) {
    case SIO_PARTITION_EVEN_DROP: return "even-drop";
    case SIO_PARTITION_EVEN_PAD: return "even-pad";
    case SIO_PARTITION_NONE: return "none";
    }
    return "unknown";
}

int sio_partition_parse(const char *s, sio_partition *out)
{
    static const sio_partition all[] = {SIO_PARTITION_EVEN_DROP,
                                        SIO_PARTITION_EVEN_PAD,
                                        SIO_PARTITION_NONE};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(s, sio_partition_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

int sio_share_validate(uint32_t rank, uint32_t world, uint64_t global_start,
                       uint64_t start, char *msg, size_t len)
{
    if (world < 1 || world > SIO_WORLD_MAX || rank >= world) {
        snprintf(msg, len, "rank %u / world %u: need 0 <= rank < world <= %u",
                 rank, world, SIO_WORLD_MAX);
        return -1;
    }
    if (global_start > SIO_POSITION_MAX - rank) {
        snprintf(msg, len, "global_start above %llu",
                 (unsigned long long)(SIO_POSITION_MAX - rank));
        return -1;
    }
    /* The first index, G + r + start*W, must stay within the bound. */
    if (start > (SIO_POSITION_MAX - global_start - rank) / world) {
        snprintf(msg, len, "start %llu out of range for world %u",
                 (unsigned long long)start, world);
        return -1;
    }
    return 0;
}

int sio_share_index(uint64_t global_start, uint32_t rank, uint32_t world,
                    uint64_t k, uint64_t *index)
{
    if (world == 0 || global_start > SIO_POSITION_MAX - rank ||
        k > (SIO_POSITION_MAX - global_start - rank) / world)
        return -1;
    *index = global_start + rank + k * world;
    return 0;
}

uint64_t sio_share_length(uint64_t n, uint64_t global_start, uint32_t rank,
                          uint32_t world, sio_partition p)
{
    uint64_t m = n > global_start ? n - global_start : 0;
    if (world == 0 || rank >= world)
        return 0;
    switch (p) {
    case SIO_PARTITION_EVEN_DROP:
        return m / world;
    case SIO_PARTITION_EVEN_PAD:
        return m / world + (m % world != 0);
    case SIO_PARTITION_NONE:
        return m / world + (rank < m % world);
    }
    return 0;
}

uint64_t sio_share_pad_source(uint64_t n, uint64_t global_start,
                              uint64_t index)
{
    uint64_t m = n - global_start; /* callers ensure n > global_start */
    return global_start + (index - global_start) % m;
}
