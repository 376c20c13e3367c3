/*
 * cli_main.c — the `shardcast` command: subcommand dispatch, the top-level
 * help with the exit codes, and the connection options shared by the
 * subcommands that read streams.
 *
 * Threading: main thread only. Ownership: a cli_conn owns the split field
 * list and the token it read (wiped on free).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardio.h"

/* A token file larger than this is not a token. */
#define TOKEN_MAX 4096u

static const char usage[] =
    "usage: shardcast [--version] [--help] COMMAND [ARGS]\n"
    "\n"
    "The command-line client of shardcast.\n"
    "\n"
    "Commands:\n"
    "  ls SOURCE      the shards a source resolves to, with sizes\n"
    "  index SOURCE   build the shard indexes of a source ahead of time\n"
    "                 (--count also reads them and counts samples)\n"
    "  cat [URL]      one consumer's share of an epoch, written as tar\n"
    "  stat [JOB]     a job's status (or the list of jobs) as a table\n"
    "  bench          N concurrent consumers against a server: samples/s,\n"
    "                 MB/s, time to first sample, spread; --verify checks\n"
    "                 exactly-once delivery against a manifest\n"
    "\n"
    "Run `shardcast COMMAND --help` for a command's options.\n"
    "\n"
    "Environment:\n"
    "  SHARDCAST_SERVER  default for --server (e.g. http://127.0.0.1:8080)\n"
    "  SHARDCAST_TOKEN   bearer token sent to the server (or --token-file)\n"
    "  AWS_* variables   S3 settings and credentials for `ls`\n"
    "\n"
    "Exit codes:\n"
    "  0  success\n"
    "  1  other failure (I/O, out of memory)\n"
    "  2  bad command line\n"
    "  3  not found (unknown job, path or source)\n"
    "  4  cannot reach the server, or timed out\n"
    "  5  the stream failed: the server's error trailer, a cut stream that\n"
    "     could not be resumed, or malformed data\n"
    "  6  bench --verify: wrong, missing or duplicated samples\n"
    "  7  not authorised (token missing or refused)\n"
    "  8  another HTTP error from the server\n";

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

int cli_exit_for(scc_code rc)
{
    switch (rc) {
    case SCC_OK: return CLI_EXIT_OK;
    case SCC_ERR_INVALID: return CLI_EXIT_USAGE;
    case SCC_ERR_NOTFOUND: return CLI_EXIT_NOTFOUND;
    case SCC_ERR_CONNECT:
    case SCC_ERR_TIMEOUT: return CLI_EXIT_CONNECT;
    case SCC_ERR_SERVER:
    case SCC_ERR_CUT:
    case SCC_ERR_PROTOCOL:
    case SCC_ERR_LIMIT: return CLI_EXIT_STREAM;
    case SCC_ERR_AUTH: return CLI_EXIT_AUTH;
    case SCC_ERR_HTTP: return CLI_EXIT_HTTP;
    case SCC_ERR_NOMEM: return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_FAIL;
}

int cli_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    return cli_parse_units(s, SIO_UNIT_COUNT, max, out);
}

int cli_parse_units(const char *s, sio_unit_kind kind, uint64_t max,
                    uint64_t *out)
{
    uint64_t v;
    if (sio_parse_units(s, kind, &v, NULL) != 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_legacy_ms(const char *s, uint64_t max, uint64_t *out,
                        const char *cmd, const char *opt, const char *repl)
{
    uint64_t v;
    int had_unit = 0;
    if (sio_parse_units(s, SIO_UNIT_MS, &v, &had_unit) != 0 || v > max)
        return -1;
    if (!had_unit)
        fprintf(stderr, "shardcast %s: warning: --%s %s: a bare number is "
                "read as milliseconds here (deprecated); give a unit "
                "(500ms, 30s, 5m) or use --%s\n", cmd, opt, s, repl);
    *out = v;
    return 0;
}

int cli_parse_idle_timeout(const char *s, uint64_t *out_ms, const char *cmd)
{
    uint64_t v;
    int had_unit = 0;
    /* In ms with an explicit unit; a bare number is seconds. */
    if (sio_parse_units(s, SIO_UNIT_MS, &v, &had_unit) != 0)
        return -1;
    if (!had_unit) {
        if (v > 86400)
            return -1;
        if (v >= 1000)
            fprintf(stderr, "shardcast %s: warning: --idle-timeout %s is "
                    "%llu seconds (a bare number is seconds, as in "
                    "shardcastd; it was milliseconds before): write 500ms "
                    "or use --idle-timeout-ms for milliseconds\n", cmd, s,
                    (unsigned long long)v);
        v *= 1000;
    }
    if (v > 86400000)
        return -1;
    *out_ms = v;
    return 0;
}

void cli_human_bytes(double b, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
    size_t u = 0;
    while (b >= 1000.0 && u + 1 < sizeof unit / sizeof *unit) {
        b /= 1000.0;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

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

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("shardcast %s\n", SIO_VERSION_STRING);
        return CLI_EXIT_OK;
    }
    if (scc_global_init() != SCC_OK) {
        fprintf(stderr, "shardcast: cannot initialise libcurl\n");
        return CLI_EXIT_FAIL;
    }
    if (strcmp(cmd, "ls") == 0)
        return cli_ls(argc - 1, argv + 1);
    if (strcmp(cmd, "index") == 0)
        return cli_index(argc - 1, argv + 1);
    if (strcmp(cmd, "cat") == 0)
        return cli_cat(argc - 1, argv + 1);
    if (strcmp(cmd, "stat") == 0)
        return cli_stat(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return cli_bench(argc - 1, argv + 1);
    fprintf(stderr, "shardcast: unknown command \"%s\" (see shardcast "
            "--help)\n", cmd);
    return CLI_EXIT_USAGE;
}
