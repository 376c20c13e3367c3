/*
 * cli_util.c — the small helpers every subcommand of the `shardcast`
 * command shares (cli.h): exit codes of result codes, number and duration
 * parsing with libshardio's parser, byte counts for people.
 *
 * Threading: main thread only (the warnings go to stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardio.h"

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
