/*
 * clock.c — the monotonic millisecond clock (sio_now_ms, include/shardio.h),
 * and deadlines for timed waits (sio_deadline_in, core/core_int.h).
 * Part of the wire library too, so the C client shares it.
 *
 * Threading: pure function.
 */
#include <stdint.h>
#include <time.h>

#include "core/core_int.h"

void sio_deadline_in(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)(ms / 1000u);
    ts->tv_nsec += (long)(ms % 1000u) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

uint64_t sio_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
