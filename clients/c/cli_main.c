/*
 * cli_main.c — the `shardcast` command: subcommand dispatch, the top-level
 * help with the exit codes, and the small parsing and formatting helpers
 * of cli.h. The connection options are in cli_conn.c.
 *
 * Threading: main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardio.h"

static const char usage[] =
    "usage: shardcast [--version] [--help] COMMAND [ARGS]\n"
    "\n"
    "The command-line client of shardcast.\n"
    "\n"
    "Commands:\n"
    "  ls SOURCE      the shards a source resolves to, with sizes\n"
    "                 (--count also reads them and counts samples)\n"
    "  index SOURCE   build the shard indexes of a source ahead of time\n"
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
    "  SHARDCAST_URLS    a replica set instead (cat, bench): the replicas'\n"
    "                    base URLs, comma-separated, replica 0 first\n"
    "  SHARDCAST_URL_TEMPLATE, SHARDCAST_REPLICAS\n"
    "                    or a URL template with {j} for the replica number\n"
    "                    and the number of replicas R (j = 0..R-1)\n"
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
    "  8  another HTTP error from the server\n"
    "  9  the replica set is set up wrongly: replicas in another place than\n"
    "     the one given, or disagreeing on the job's order\n";

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
    case SCC_ERR_CONFIG: return CLI_EXIT_CONFIG;
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
