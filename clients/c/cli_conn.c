/*
 * cli_conn.c — the connection options every stream-reading subcommand of
 * the `shardcast` command takes (cli.h: cli_conn, CLI_CONN_OPTIONS): their
 * help text, parsing, the token from --token-file or $SHARDCAST_TOKEN, and
 * the scc_options they make.
 *
 * Threading: main thread only. Ownership: a cli_conn owns the split field
 * list and the token it read (wiped on free).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A token file larger than this is not a token. */
#define TOKEN_MAX 4096u

const char cli_conn_help[] =
    "Stream selection (instead of a URL):\n"
    "  --server URL          server root (default $SHARDCAST_SERVER)\n"
    "  --job NAME            job name\n"
    "  --epoch E             epoch (default 0)\n"
    "  --rank R --world W    this consumer's rank of W (default 0 of 1)\n"
    "  --start P             position within the share to start from\n"
    "  --global-start G      elastic resume base\n"
    "  --fields a,b          send only these fields\n"
    "  --format frames|tar   wire format to request\n"
    "Connection (durations take a unit, 500ms, 30s, 5m, 1h, as shardcastd's\n"
    "settings do; a bare number is ms for options named -ms):\n"
    "  --token-file FILE       bearer token (else $SHARDCAST_TOKEN)\n"
    "  --connect-timeout-ms D  (default 10s)\n"
    "  --idle-timeout-ms D     no byte for this long: reconnect (default\n"
    "                          60s)\n"
    "  --reconnects N          reconnect attempts in a row (no sample in\n"
    "                          between) before giving up (default 30)\n"
    "  --retry-budget-ms D     time such a streak may take (default 120s;\n"
    "                          0: attempts only)\n"
    "  --idle-timeout D        the same; a bare number is seconds, as for\n"
    "                          shardcastd's --idle-timeout\n"
    "  Deprecated: --connect-timeout, --retry-budget D: the same with a\n"
    "  unit; a bare number is still read as ms (warning).\n"
    "A stream that breaks, a 5xx while reconnecting, or a retryable error\n"
    "from the server (a drain before a restart) is resumed at the position\n"
    "reached, after a backoff of 0.2 s doubling to 5 s or the server's\n"
    "retry advice when longer: the defaults ride out a restart of about a\n"
    "minute.\n";

void cli_conn_init(cli_conn *c)
{
    memset(c, 0, sizeof *c);
    c->world = 1;
    c->format = SCC_FORMAT_FRAMES;
    c->connect_timeout_ms = 10000;
    c->idle_timeout_ms = 60000;
    c->reconnects = SCC_RECONNECTS_DEFAULT;
    c->retry_budget_ms = SCC_RETRY_BUDGET_DEFAULT_MS;
}

static char *read_token_file(const char *path, const char *cmd)
{
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "shardcast %s: cannot open token file %s: %s\n", cmd,
                path, strerror(errno));
        return NULL;
    }
    buf = calloc(1, TOKEN_MAX + 2);
    size_t n = buf ? fread(buf, 1, TOKEN_MAX + 1, f) : 0;
    fclose(f);
    if (!buf || n > TOKEN_MAX) {
        fprintf(stderr, "shardcast %s: token file %s is too large\n", cmd,
                path);
        free(buf);
        return NULL;
    }
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                 buf[n - 1] == ' '))
        buf[--n] = '\0';
    return buf;
}

int cli_conn_option(cli_conn *c, int opt, const char *arg, const char *cmd)
{
    uint64_t v;
    const char *what = NULL;
    switch (opt) {
    case OPT_SERVER: c->server = arg; return 1;
    case OPT_JOB: c->job = arg; return 1;
    case OPT_EPOCH:
        if (cli_parse_u64(arg, INT64_MAX, &c->epoch) != 0)
            what = "--epoch";
        break;
    case OPT_RANK:
        if (cli_parse_u64(arg, UINT32_MAX - 1, &v) != 0)
            what = "--rank";
        else
            c->rank = (uint32_t)v;
        break;
    case OPT_WORLD:
        if (cli_parse_u64(arg, UINT32_MAX, &v) != 0 || v == 0)
            what = "--world";
        else
            c->world = (uint32_t)v;
        break;
    case OPT_START:
        if (cli_parse_u64(arg, INT64_MAX, &c->start) != 0)
            what = "--start";
        break;
    case OPT_GLOBAL_START:
        if (cli_parse_u64(arg, INT64_MAX, &c->global_start) != 0)
            what = "--global-start";
        break;
    case OPT_FIELDS: {
        free(c->fields_buf);
        c->fields_buf = strdup(arg);
        c->nfields = 0;
        if (!c->fields_buf)
            return -1;
        for (char *save = NULL, *t = strtok_r(c->fields_buf, ",", &save); t;
             t = strtok_r(NULL, ",", &save)) {
            if (c->nfields == SCC_FIELDS_MAX ||
                strlen(t) > SCC_FIELD_NAME_MAX) {
                what = "--fields";
                break;
            }
            c->fields[c->nfields++] = t;
        }
        if (c->nfields == 0)
            what = "--fields";
        break;
    }
    case OPT_FORMAT:
        if (strcmp(arg, "frames") == 0)
            c->format = SCC_FORMAT_FRAMES;
        else if (strcmp(arg, "tar") == 0)
            c->format = SCC_FORMAT_TAR;
        else
            what = "--format (frames or tar)";
        break;
    case OPT_TOKEN_FILE:
        free(c->token);
        c->token = read_token_file(arg, cmd);
        if (!c->token)
            return -1;
        break;
    case OPT_CONNECT_TIMEOUT_MS:
    case OPT_CONNECT_TIMEOUT:
        if ((opt == OPT_CONNECT_TIMEOUT
                 ? cli_parse_legacy_ms(arg, 3600000, &v, cmd,
                                       "connect-timeout",
                                       "connect-timeout-ms")
                 : cli_parse_units(arg, SIO_UNIT_MS, 3600000, &v)) != 0 ||
            v == 0)
            what = "--connect-timeout-ms (a duration, 1ms..1h)";
        else
            c->connect_timeout_ms = (uint32_t)v;
        break;
    case OPT_IDLE_TIMEOUT_MS:
    case OPT_IDLE_TIMEOUT:
        /* --idle-timeout is also a shardcastd setting, where a bare
         * number is seconds: the same here (issue: one name, one unit). */
        if ((opt == OPT_IDLE_TIMEOUT
                 ? cli_parse_idle_timeout(arg, &v, cmd)
                 : cli_parse_units(arg, SIO_UNIT_MS, 86400000, &v)) != 0 ||
            v == 0)
            what = opt == OPT_IDLE_TIMEOUT
                       ? "--idle-timeout (a duration, 1ms..24h; bare: s)"
                       : "--idle-timeout-ms (a duration, 1ms..24h)";
        else
            c->idle_timeout_ms = (uint32_t)v;
        break;
    case OPT_RECONNECTS:
        if (cli_parse_u64(arg, 1000, &v) != 0)
            what = "--reconnects";
        else
            c->reconnects = (uint32_t)v;
        break;
    case OPT_RETRY_BUDGET_MS:
    case OPT_RETRY_BUDGET:
        if ((opt == OPT_RETRY_BUDGET
                 ? cli_parse_legacy_ms(arg, 86400000, &v, cmd, "retry-budget",
                                       "retry-budget-ms")
                 : cli_parse_units(arg, SIO_UNIT_MS, 86400000, &v)) != 0)
            what = "--retry-budget-ms (a duration, 0..24h)";
        else
            c->retry_budget_ms = (uint32_t)v;
        break;
    default:
        return 0;
    }
    if (what) {
        fprintf(stderr, "shardcast %s: bad value for %s: %s\n", cmd, what, arg);
        return -1;
    }
    return 1;
}

int cli_conn_finish(cli_conn *c, const char *cmd, int need_job)
{
    if (!c->server)
        c->server = getenv("SHARDCAST_SERVER");
    if (!c->token) {
        const char *t = getenv("SHARDCAST_TOKEN");
        if (t && *t && !(c->token = strdup(t)))
            return -1;
    }
    if (need_job && (!c->server || !*c->server)) {
        fprintf(stderr, "shardcast %s: no server (--server or "
                "$SHARDCAST_SERVER)\n", cmd);
        return -1;
    }
    if (need_job && (!c->job || !*c->job)) {
        fprintf(stderr, "shardcast %s: --job is required\n", cmd);
        return -1;
    }
    if (c->rank >= c->world) {
        fprintf(stderr, "shardcast %s: --rank must be below --world\n", cmd);
        return -1;
    }
    return 0;
}

void cli_conn_options(const cli_conn *c, scc_options *o)
{
    scc_options_init(o);
    o->server = c->server;
    o->job = c->job;
    o->epoch = c->epoch;
    o->rank = c->rank;
    o->world = c->world;
    o->start = c->start;
    o->global_start = c->global_start;
    o->fields = c->nfields ? c->fields : NULL;
    o->nfields = c->nfields;
    o->format = c->format;
    o->token = c->token;
    o->connect_timeout_ms = c->connect_timeout_ms;
    o->idle_timeout_ms = c->idle_timeout_ms;
    o->max_reconnects = c->reconnects;
    o->retry_budget_ms = c->retry_budget_ms;
}

void cli_conn_free(cli_conn *c)
{
    free(c->fields_buf);
    if (c->token) {
        memset(c->token, 0, strlen(c->token));
        free(c->token);
    }
    c->fields_buf = NULL;
    c->token = NULL;
}
