/*
 * core_int.h — what every part of libshardio uses to report: error setting
 * (sio_error, include/shardio.h) and logging through the caller's logger.
 * Both live in core/error.c.
 */
#ifndef SHARDIO_CORE_INT_H
#define SHARDIO_CORE_INT_H

#include "shardio.h"

/* Set err (may be NULL) to code and a formatted message; returns code. */
sio_code sio_seterr(sio_error *err, sio_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Log through a logger; the level is checked before formatting. */
void sio_log_(const sio_logger *lg, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
#define SIO_LOG(lg, lvl, ...)                                          \
    do {                                                               \
        const sio_logger *lg_ = (lg);                                  \
        if (lg_ && lg_->fn && (lvl) <= lg_->level)                     \
            sio_log_(lg_, (lvl), __VA_ARGS__);                         \
    } while (0)

/* The CLOCK_REALTIME time ms milliseconds from now, for
 * pthread_cond_timedwait on a condition of the default clock (clock.c). */
struct timespec;
void sio_deadline_in(struct timespec *ts, uint64_t ms);

#endif /* SHARDIO_CORE_INT_H */
