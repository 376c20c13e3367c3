/*
 * log.c — key=value log lines on stderr for the daemon and, through
 * sc_log_sio, for libshardio.
 *
 * Threading: any thread may log. The level is written once by sc_log_init
 * before threads exist. Each line is formatted into a stack buffer and
 * written with a single write(2), so concurrent lines never interleave.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Longest log line; longer ones are cut and end in "...". */
#define LINE_MAX_BYTES 4096

static int log_level = SIO_LOG_INFO; /* set once at start-up */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void sc_log_init(int level)
{
    log_level = level;
}

int sc_log_level(void)
{
    return log_level;
}

int sc_log_level_parse(const char *s, int *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return -1;
}

const char *sc_log_level_name(int level)
{
    return level >= 0 && level < 4 ? level_names[level] : "unknown";
}

static void write_line(int level, const char *body)
{
    char line[LINE_MAX_BYTES];
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s %s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                     sc_log_level_name(level), body);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len >= sizeof line) {
        len = sizeof line - 1;
        memcpy(line + len - 4, "...", 3);
        len--;
    }
    line[len++] = '\n';
    /* stderr is the log; a failed write has nowhere to be reported. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void sc_log_(int level, const char *fmt, ...)
{
    char body[LINE_MAX_BYTES];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    write_line(level, body);
}

void sc_log_sio(void *userdata, int level, const char *msg)
{
    (void)userdata;
    if (level <= log_level)
        sc_log_(level, "src=shardio %s", msg);
}

char *sc_log_quote(char *dst, size_t cap, const char *src, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    if (cap < 8) {
        if (cap)
            dst[0] = '\0';
        return dst;
    }
    dst[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        char esc[4];
        size_t n;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            n = 2;
        } else if (c < 0x20 || c >= 0x7f) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[c >> 4];
            esc[3] = hex[c & 15];
            n = 4;
        } else {
            esc[0] = (char)c;
            n = 1;
        }
        /* Keep room for "...", the closing quote and the NUL. */
        if (o + n + 5 > cap) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(dst + o, esc, n);
        o += n;
    }
    dst[o++] = '"';
    dst[o] = '\0';
    return dst;
}
