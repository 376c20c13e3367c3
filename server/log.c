/*
 * log.c — key=value log lines on stderr for the daemon and, through
 * sc_log_sio, for libshardio.
 *
 * Every line is redacted before it leaves the caller (sio_redact_text: any
 * URL's user information and credential query values masked), whoever
 * formatted it, so a URL a library message quotes raw never reaches the log.
 *
 * Threading: any thread may log. The level is written once by sc_log_init
 * before threads exist. Before sc_log_start and after sc_log_stop a line is
 * written with one write(2) by the caller. In between, lines go into a
 * bounded byte queue (--log-queue-bytes) drained by one logging thread, so
 * an HTTP event loop never waits for a slow log collector: when the queue
 * is full the line is dropped and counted (shardcast_log_dropped_total, and
 * an event=log_dropped line once the queue drains). q_mu guards the queue
 * and is held only for a memcpy; nothing else is taken under it.
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Longest log line; longer ones are cut and end in "...". */
#define LINE_MAX_BYTES 4096
/* Smallest queue: a few lines at their longest. */
#define QUEUE_MIN_BYTES (4u * LINE_MAX_BYTES)

static int log_level = SIO_LOG_INFO; /* set once at start-up */


/* The queue: a ring of records "u32 length, bytes" (q_mu). */
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static unsigned char *q_buf;
static size_t q_cap, q_head, q_used;
static int q_running, q_stop;
static pthread_t q_thread;
static atomic_uint_fast64_t q_dropped;    /* lines dropped, ever */
static atomic_uint_fast64_t q_written;    /* lines written, ever */

void sc_log_init(int level)
{
    log_level = level;
}

int sc_log_level(void)
{
    return log_level;
}

const char *sc_log_level_name(int level)
{
#define LEVEL_NAME(name, lvl)                                              \
    if (level == (lvl))                                                    \
        return name;
    SC_LOG_LEVELS(LEVEL_NAME)
#undef LEVEL_NAME
    return "unknown";
}

static void write_all(const char *line, size_t len)
{
    /* stderr is the log; a failed write has nowhere to be reported. */
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, line, len);
        if (w <= 0)
            return;
        line += w;
        len -= (size_t)w;
    }
    atomic_fetch_add(&q_written, 1);
}

static void ring_copy_in(const void *src, size_t n)
{
    size_t tail = (q_head + q_used) % q_cap;
    size_t first = n < q_cap - tail ? n : q_cap - tail;
    memcpy(q_buf + tail, src, first);
    memcpy(q_buf, (const unsigned char *)src + first, n - first);
    q_used += n;
}

static void ring_copy_out(void *dst, size_t n)
{
    size_t first = n < q_cap - q_head ? n : q_cap - q_head;
    memcpy(dst, q_buf + q_head, first);
    memcpy((unsigned char *)dst + first, q_buf, n - first);
    q_head = (q_head + n) % q_cap;
    q_used -= n;
}

/* Queue one finished line, or write it at once when no thread runs. */
static void emit(const char *line, size_t len)
{
    uint32_t n = (uint32_t)len;
    pthread_mutex_lock(&q_mu);
    if (!q_running) {
        pthread_mutex_unlock(&q_mu);
        write_all(line, len);
        return;
    }
    if (q_cap - q_used < sizeof n + len) {
        pthread_mutex_unlock(&q_mu);
        atomic_fetch_add(&q_dropped, 1);
        return;
    }
    ring_copy_in(&n, sizeof n);
    ring_copy_in(line, len);
    pthread_cond_signal(&q_cv);
    pthread_mutex_unlock(&q_mu);
}

static void format_line(int level, const char *body, char *line,
                        size_t *len_out)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, LINE_MAX_BYTES,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s %s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                     sc_log_level_name(level), body);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len >= LINE_MAX_BYTES) {
        len = LINE_MAX_BYTES - 1;
        memcpy(line + len - 4, "...", 3);
        len--;
    }
    line[len++] = '\n';
    *len_out = len;
}

static void *log_main(void *arg)
{
    char line[LINE_MAX_BYTES + 8];
    uint64_t reported = 0;
    (void)arg;
    pthread_mutex_lock(&q_mu);
    for (;;) {
        while (q_used == 0 && !q_stop)
            pthread_cond_wait(&q_cv, &q_mu);
        if (q_used == 0 && q_stop)
            break;
        uint32_t n;
        ring_copy_out(&n, sizeof n);
        ring_copy_out(line, n);
        pthread_mutex_unlock(&q_mu);
        write_all(line, n);
        uint64_t dropped = atomic_load(&q_dropped);
        if (dropped != reported) {
            char body[128], l2[LINE_MAX_BYTES];
            size_t len;
            snprintf(body, sizeof body,
                     "event=log_dropped lines=%llu total=%llu",
                     (unsigned long long)(dropped - reported),
                     (unsigned long long)dropped);
            format_line(SIO_LOG_WARN, body, l2, &len);
            write_all(l2, len);
            reported = dropped;
        }
        pthread_mutex_lock(&q_mu);
    }
    pthread_mutex_unlock(&q_mu);
    return NULL;
}

int sc_log_start(size_t queue_bytes)
{
    int rc = 0;
    if (queue_bytes < QUEUE_MIN_BYTES)
        queue_bytes = QUEUE_MIN_BYTES;
    pthread_mutex_lock(&q_mu);
    if (q_running)
        goto out;
    q_buf = malloc(queue_bytes);
    if (!q_buf) {
        rc = -1;
        goto out;
    }
    q_cap = queue_bytes;
    q_head = q_used = 0;
    q_stop = 0;
    if (pthread_create(&q_thread, NULL, log_main, NULL) != 0) {
        free(q_buf);
        q_buf = NULL;
        rc = -1;
        goto out;
    }
    q_running = 1;
out:
    pthread_mutex_unlock(&q_mu);
    return rc;
}

void sc_log_stop(void)
{
    pthread_mutex_lock(&q_mu);
    if (!q_running) {
        pthread_mutex_unlock(&q_mu);
        return;
    }
    q_stop = 1;
    pthread_cond_signal(&q_cv);
    pthread_mutex_unlock(&q_mu);
    pthread_join(q_thread, NULL);
    pthread_mutex_lock(&q_mu);
    q_running = 0;
    free(q_buf);
    q_buf = NULL;
    q_cap = q_used = q_head = 0;
    pthread_mutex_unlock(&q_mu);
}

uint64_t sc_log_dropped(void)
{
    return atomic_load(&q_dropped);
}

uint64_t sc_log_written(void)
{
    return atomic_load(&q_written);
}

void sc_log_(int level, const char *fmt, ...)
{
    char body[LINE_MAX_BYTES], red[LINE_MAX_BYTES], line[LINE_MAX_BYTES];
    size_t len;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    sio_redact_text(body, red, sizeof red);
    format_line(level, red, line, &len);
    emit(line, len);
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
