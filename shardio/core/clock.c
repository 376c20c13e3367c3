/*
 * clock.c — the monotonic millisecond clock (sio_now_ms, include/shardio.h).
 * Part of the wire library too, so the C client shares it.
 *
 * Threading: pure function.
 */
#include <stdint.h>
#include <time.h>

#include "shardio.h"

uint64_t sio_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
