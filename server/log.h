/*
 * log.h — the daemon's logging: one key=value line per event on stderr.
 *
 * The level is set once at start-up (sc_log_init) before any thread starts
 * and only read afterwards. SC_LOG checks it before its arguments are
 * evaluated or formatted. Lines are written with one write per line, so
 * lines from different threads do not interleave.
 * Never pass credentials, signatures, Authorization headers or query
 * strings that may carry tokens to these functions.
 */
#ifndef SC_LOG_H
#define SC_LOG_H

#include <stddef.h>

#include "shardio.h"

/* Levels: the library's (SIO_LOG_ERROR .. SIO_LOG_DEBUG). */

/* Set the level; call before any thread is started. */
void sc_log_init(int level);
int sc_log_level(void);
/* Parse "error" | "warn" | "info" | "debug"; -1 when unknown. */
int sc_log_level_parse(const char *s, int *out);
const char *sc_log_level_name(int level);

/* Write one line "ts=... level=... <fmt>" (no trailing newline in fmt). */
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
