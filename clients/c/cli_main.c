/*
 * cli_main.c — the `shardcast` command: subcommand dispatch and the
 * top-level help with the exit codes. The subcommands (cli_ls.c, ...)
 * use the helpers of cli_util.c and the connection options of
 * cli_conn.c, never this file.
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
