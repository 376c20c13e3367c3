/*
 * log.h — the daemon's logging: one key=value line per event on stderr.
 *
 * The level is set once at start-up (sc_log_init) before any thread starts
 * and only read afterwards. SC_LOG checks it before its arguments are
 * evaluated or formatted. Every line is redacted (sio_redact_text). Once
 * sc_log_start has run, lines go through a bounded queue to a logging
 * thread, so no caller ever waits on write(2); a full queue drops the line
 * and counts it. Lines never interleave.
 * Never pass credentials, signatures, Authorization headers or query
 * strings that may carry tokens to these functions.
 */
#ifndef SC_LOG_H
#define SC_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"

/* Levels: the library's (SIO_LOG_ERROR .. SIO_LOG_DEBUG), and their names
 * in log lines and in --log-level: X(name, level) for each, in level
 * order. */
#define SC_LOG_LEVELS(X)                                                   \
    X("error", SIO_LOG_ERROR)                                              \
    X("warn", SIO_LOG_WARN)                                                \
    X("info", SIO_LOG_INFO)                                                \
    X("debug", SIO_LOG_DEBUG)

/* Set the level; call before any thread is started. */
void sc_log_init(int level);
int sc_log_level(void);
/* The name of a level (SC_LOG_LEVELS), "unknown" for any other value. */
const char *sc_log_level_name(int level);

/*
 * Start the logging thread with a queue of queue_bytes (at least 16 KiB).
 * Returns 0, or -1 (out of memory or threads): lines are then written by
 * the caller as before. Call once, from the main thread.
 */
int sc_log_start(size_t queue_bytes);
/* Write what is queued, stop the thread; later lines are written by the
 * caller. Safe without sc_log_start. */
void sc_log_stop(void);
/* Lines dropped because the queue was full, and lines written, ever. */
uint64_t sc_log_dropped(void);
uint64_t sc_log_written(void);

/* Log one line "ts=... level=... <fmt>" (no trailing newline in fmt). */
void sc_log_(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define SC_LOG(lvl, ...)                                                   \
    do {                                                                   \
        if ((lvl) <= sc_log_level())                                       \
            sc_log_((lvl), __VA_ARGS__);                                   \
    } while (0)

/*
 * Quote len bytes of src as a log value: wrapped in double quotes, with
 * '"', '\\' and bytes outside printable ASCII escaped (\xNN), cut with
 * "..." so the result fits cap bytes (NUL included). Returns dst.
 */
char *sc_log_quote(char *dst, size_t cap, const char *src, size_t len);

/* The sio_logger callback for libshardio: userdata unused. */
void sc_log_sio(void *userdata, int level, const char *msg);

#endif /* SC_LOG_H */
