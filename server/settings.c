/*
 * settings.c — the settings table and its loaders (contract in settings.h).
 *
 * Threading: start-up only (main thread, before any other thread).
 * Ownership: string values are malloc'd copies owned by sc_config.
 * Every value, defaults included, goes through the same parser and bounds
 * check, so a default can never be out of its own bounds.
 */
#include "settings.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "request.h"
#include "shardio.h"
#include "stream.h"

typedef enum stype {
    T_STRING, /* free text of 1..max bytes */
    T_JOB,    /* a job name: 1..SC_JOB_NAME_MAX of [A-Za-z0-9._-] */
    T_ADDR,   /* an IPv4 or IPv6 literal */
    T_U32,
    T_U64,
    T_BYTES,  /* integer with optional K/M/G/T (binary) suffix */
    T_ENUM
} stype;

typedef struct choice {
    const char *name;
    int value;
} choice;

typedef struct setting {
    const char *name;
    stype type;
    size_t offset;
    const char *def; /* NULL: required */
    uint64_t min, max;
    const choice *choices; /* T_ENUM, terminated by a NULL name */
    const char *help;
} setting;

static const choice partition_choices[] = {
    {"even-drop", SIO_PARTITION_EVEN_DROP},
    {"even-pad", SIO_PARTITION_EVEN_PAD},
    {"none", SIO_PARTITION_NONE},
    {NULL, 0}};
static const choice on_error_choices[] = {
    {"skip", SIO_ON_ERROR_SKIP}, {"fail", SIO_ON_ERROR_FAIL}, {NULL, 0}};
static const choice level_choices[] = {{"error", SIO_LOG_ERROR},
                                       {"warn", SIO_LOG_WARN},
                                       {"info", SIO_LOG_INFO},
                                       {"debug", SIO_LOG_DEBUG},
                                       {NULL, 0}};

/* Longest --source: a long brace pattern or list of specs, not a dataset
 * manifest. */
#define SOURCE_MAX 65536u

#define OFF(f) offsetof(sc_config, f)
static const setting settings[] = {
    {"job", T_JOB, OFF(job), NULL, 1, SC_JOB_NAME_MAX, NULL,
     "name of the job served (URL path /v1/jobs/NAME/...)"},
    {"source", T_STRING, OFF(source), NULL, 1, SOURCE_MAX, NULL,
     "shards: directory, path, brace pattern or URL; several joined by ::"},
    {"seed", T_U64, OFF(seed), "0", 0, UINT64_MAX, NULL,
     "shuffle seed; with the epoch it fixes the order"},
    {"shuffle-buffer", T_U32, OFF(shuffle_buffer), "1000", 1, 100000000, NULL,
     "samples in the shuffle buffer (1: no buffer shuffle)"},
    {"buffer-bytes", T_BYTES, OFF(buffer_bytes), "256MiB", 0,
     UINT64_C(1) << 40, NULL, "byte cap of the shuffle buffer (0: no cap)"},
    {"interleave", T_U32, OFF(interleave), "4", 1, 4096, NULL,
     "shards open at once, read round-robin"},
    {"partition", T_ENUM, OFF(partition), "even-drop", 0, 0,
     partition_choices, "even-drop | even-pad | none"},
    {"on-error", T_ENUM, OFF(on_error), "skip", 0, 0, on_error_choices,
     "a missing or corrupt shard: skip it, or fail the stream"},
    {"listen", T_ADDR, OFF(listen), "127.0.0.1", 0, 0, NULL,
     "address to listen on (IPv4 or IPv6 literal)"},
    {"port", T_U32, OFF(port), "8080", 0, 65535, NULL,
     "TCP port (0: pick a free one)"},
    {"log-level", T_ENUM, OFF(log_level), "info", 0, 0, level_choices,
     "error | warn | info | debug"},
    {"threads", T_U32, OFF(threads), "2", 1, 64, NULL,
     "HTTP worker threads"},
    {"max-connections", T_U32, OFF(max_connections), "1024", 1, 65536, NULL,
     "simultaneous HTTP connections"},
    {"max-url", T_U32, OFF(max_url), "4096", 64, SC_TARGET_MAX, NULL,
     "longest request target (path and query) in bytes"},
    {"connection-memory", T_BYTES, OFF(connection_memory), "64KiB", 16384,
     16u << 20, NULL, "memory per connection; bounds the request header size"},
    {"queue-bytes", T_BYTES, OFF(queue_bytes), "4MiB", SC_STREAM_QUEUE_MIN,
     UINT64_C(1) << 30, NULL, "bytes queued per stream ahead of the client"},
    {"idle-timeout", T_U32, OFF(idle_timeout), "600", 0, 86400, NULL,
     "seconds a connection may make no progress (0: none)"},
};
#undef OFF
#define NSETTINGS (sizeof settings / sizeof settings[0])

static int fail(char *msg, size_t msg_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *msg, size_t msg_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
    return -1;
}

/* Strict unsigned decimal with an optional binary suffix for T_BYTES. */
static int parse_number(const char *v, int bytes, uint64_t *out)
{
    uint64_t x = 0, mult = 1;
    size_t i = 0;

    if (!isdigit((unsigned char)v[0]))
        return -1;
    for (; isdigit((unsigned char)v[i]); i++) {
        unsigned d = (unsigned)(v[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    const char *suf = v + i;
    if (*suf) {
        static const struct {
            const char *s;
            uint64_t m;
        } sufs[] = {{"b", 1},
                    {"k", 1ull << 10}, {"kb", 1ull << 10}, {"kib", 1ull << 10},
                    {"m", 1ull << 20}, {"mb", 1ull << 20}, {"mib", 1ull << 20},
                    {"g", 1ull << 30}, {"gb", 1ull << 30}, {"gib", 1ull << 30},
                    {"t", 1ull << 40}, {"tb", 1ull << 40}, {"tib", 1ull << 40}};
        if (!bytes)
            return -1;
        mult = 0;
        for (size_t k = 0; k < sizeof sufs / sizeof sufs[0]; k++)
            if (strcasecmp(suf, sufs[k].s) == 0)
                mult = sufs[k].m;
        if (mult == 0 || x > UINT64_MAX / mult)
            return -1;
    }
    *out = x * mult;
    return 0;
}

static int set_value(sc_config *cfg, const setting *st, const char *v,
                     const char *from, char *msg, size_t msg_len)
{
    char *field = (char *)cfg + st->offset;
    uint64_t x;

    switch (st->type) {
    case T_STRING:
    case T_JOB:
    case T_ADDR: {
        size_t n = strlen(v);
        if (st->type == T_ADDR) {
            unsigned char a[16];
            if (inet_pton(AF_INET, v, a) != 1 && inet_pton(AF_INET6, v, a) != 1)
                return fail(msg, msg_len,
                            "invalid value for --%s (%s): expected an IPv4 or "
                            "IPv6 address literal",
                            st->name, from);
        } else if (n < st->min || n > st->max) {
            return fail(msg, msg_len,
                        "invalid value for --%s (%s): length must be %" PRIu64
                        "..%" PRIu64,
                        st->name, from, st->min, st->max);
        }
        if (st->type == T_JOB)
            for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)v[i]) && !strchr("._-", v[i]))
                    return fail(msg, msg_len,
                                "invalid value for --%s (%s): use only "
                                "letters, digits, '.', '_' and '-'",
                                st->name, from);
        char *copy = strdup(v);
        if (!copy)
            return fail(msg, msg_len, "out of memory");
        char **slot = (char **)(void *)field;
        free(*slot);
        *slot = copy;
        return 0;
    }
    case T_U32:
    case T_U64:
    case T_BYTES:
        if (parse_number(v, st->type == T_BYTES, &x) != 0 || x < st->min ||
            x > st->max)
            return fail(msg, msg_len,
                        "invalid value '%.64s' for --%s (%s): expected %s in "
                        "%" PRIu64 "..%" PRIu64,
                        v, st->name, from,
                        st->type == T_BYTES ? "a byte count (suffix K/M/G/T)"
                                            : "an integer",
                        st->min, st->max);
        if (st->type == T_U32)
            *(uint32_t *)(void *)field = (uint32_t)x;
        else
            *(uint64_t *)(void *)field = x;
        return 0;
    case T_ENUM:
        for (const choice *c = st->choices; c->name; c++) {
            if (strcmp(v, c->name) == 0) {
                *(int *)(void *)field = c->value;
                return 0;
            }
        }
        return fail(msg, msg_len, "invalid value '%.64s' for --%s (%s): %s", v,
                    st->name, from, st->help);
    }
    return fail(msg, msg_len, "internal: bad setting type");
}

static const setting *find(const char *name, size_t len)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strlen(settings[i].name) == len &&
            strncmp(settings[i].name, name, len) == 0)
            return &settings[i];
    return NULL;
}

static void env_name(const setting *st, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "SHARDCAST_");
    for (const char *p = st->name; *p && o + 1 < len; p++)
        buf[o++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[o] = '\0';
}

void sc_settings_usage(FILE *f, const char *prog)
{
    char env[64];
    fprintf(f, "usage: %s --job NAME --source SRC [options]\n\n", prog);
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *st = &settings[i];
        env_name(st, env, sizeof env);
        fprintf(f, "  --%-18s %s\n  %-20s default: %s; env %s\n", st->name,
                st->help, "", st->def ? st->def : "(required)", env);
    }
}

sc_settings_result sc_settings_load(sc_config *cfg, int argc,
                                    char *const *argv, FILE *out, char *msg,
                                    size_t msg_len)
{
    char env[64], from[96];

    memset(cfg, 0, sizeof *cfg);
    msg[0] = '\0';
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (settings[i].def &&
            set_value(cfg, &settings[i], settings[i].def, "default", msg,
                      msg_len) != 0)
            return SC_SETTINGS_ERROR;
    }
    for (size_t i = 0; i < NSETTINGS; i++) {
        env_name(&settings[i], env, sizeof env);
        const char *v = getenv(env);
        if (!v)
            continue;
        snprintf(from, sizeof from, "from %s", env);
        if (set_value(cfg, &settings[i], v, from, msg, msg_len) != 0)
            return SC_SETTINGS_ERROR;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            sc_settings_usage(out, argv[0]);
            return SC_SETTINGS_HELP;
        }
        if (strcmp(a, "--version") == 0) {
            fprintf(out, "shardcastd %s\n", SIO_VERSION_STRING);
            return SC_SETTINGS_HELP;
        }
        if (strncmp(a, "--", 2) != 0) {
            fail(msg, msg_len, "unexpected argument '%.64s' (see --help)", a);
            return SC_SETTINGS_ERROR;
        }
        const char *eq = strchr(a + 2, '=');
        size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        const setting *st = find(a + 2, nlen);
        if (!st) {
            fail(msg, msg_len, "unknown option '--%.*s' (see --help)",
                 (int)(nlen > 64 ? 64 : nlen), a + 2);
            return SC_SETTINGS_ERROR;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                fail(msg, msg_len, "missing value for --%s", st->name);
                return SC_SETTINGS_ERROR;
            }
            v = argv[++i];
        }
        if (set_value(cfg, st, v, "from the command line", msg, msg_len) != 0)
            return SC_SETTINGS_ERROR;
    }
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *st = &settings[i];
        if (st->def)
            continue;
        if (!*(char **)(void *)((char *)cfg + st->offset)) {
            env_name(st, env, sizeof env);
            fail(msg, msg_len, "missing required setting --%s (or %s)",
                 st->name, env);
            return SC_SETTINGS_ERROR;
        }
    }
    return SC_SETTINGS_OK;
}

void sc_settings_free(sc_config *cfg)
{
    free(cfg->job);
    free(cfg->source);
    free(cfg->listen);
    cfg->job = cfg->source = cfg->listen = NULL;
}

/* Copy a source for logging with any URL userinfo ("://user:pw@") masked:
 * credentials must never reach a log. */
static void redact_source(const char *src, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; src[i] && o + 4 < cap;) {
        if (strncmp(src + i, "://", 3) == 0) {
            memcpy(dst + o, "://", 3);
            o += 3;
            i += 3;
            size_t auth = strcspn(src + i, "/ \t\n");
            const char *at = memchr(src + i, '@', auth);
            if (at && o + 5 < cap) {
                memcpy(dst + o, "***@", 4);
                o += 4;
                i = (size_t)(at - src) + 1;
            }
            continue;
        }
        dst[o++] = src[i++];
    }
    dst[o] = '\0';
}

void sc_settings_log(const sc_config *cfg)
{
    char val[1024], q[1100];
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *st = &settings[i];
        const char *field = (const char *)cfg + st->offset;
        switch (st->type) {
        case T_STRING:
        case T_JOB:
        case T_ADDR: {
            const char *s = *(char *const *)(const void *)field;
            redact_source(s ? s : "", val, sizeof val);
            break;
        }
        case T_U32:
            snprintf(val, sizeof val, "%" PRIu32,
                     *(const uint32_t *)(const void *)field);
            break;
        case T_U64:
        case T_BYTES:
            snprintf(val, sizeof val, "%" PRIu64,
                     *(const uint64_t *)(const void *)field);
            break;
        case T_ENUM: {
            int v = *(const int *)(const void *)field;
            snprintf(val, sizeof val, "?");
            for (const choice *c = st->choices; c->name; c++)
                if (c->value == v)
                    snprintf(val, sizeof val, "%s", c->name);
            break;
        }
        }
        SC_LOG(SIO_LOG_INFO, "event=setting name=%s value=%s", st->name,
               sc_log_quote(q, sizeof q, val, strlen(val)));
    }
}
