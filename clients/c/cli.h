/*
 * cli.h — the `shardcast` command's shared pieces: exit codes, the options
 * every stream-reading subcommand takes (cli_conn.c), small parsing helpers
 * (cli_main.c) and the subcommands (cli_<name>.c).
 *
 * Threading: the helpers are pure; the subcommands run on the main thread
 * except `bench`, whose consumer threads each own one stream.
 */
#ifndef SCC_CLI_H
#define SCC_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

#include "shardcast_client.h"
#include "shardio_units.h"

/* Exit codes (documented in `shardcast --help`). */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,     /* any other failure (I/O, out of memory) */
    CLI_EXIT_USAGE = 2,    /* bad command line */
    CLI_EXIT_NOTFOUND = 3, /* unknown job, path or source */
    CLI_EXIT_CONNECT = 4,  /* cannot reach the server, or timed out */
    CLI_EXIT_STREAM = 5,   /* the stream failed: server error trailer, cut
                              beyond the reconnects, malformed bytes */
    CLI_EXIT_VERIFY = 6,   /* bench --verify found wrong, missing or
                              duplicated samples */
    CLI_EXIT_AUTH = 7,     /* the server refused the token */
    CLI_EXIT_HTTP = 8,     /* another HTTP error from the server */
    CLI_EXIT_CONFIG = 9    /* the replica set is set up wrongly (replicas
                              in the wrong place, or disagreeing on the
                              job's order) */
};

/* Exit code for a client result. */
int cli_exit_for(scc_code rc);

/* Where a stream comes from: a URL, or server + job + epoch + rank/world,
 * or a replica set + job + epoch + rank/world (rank/world then global). */
typedef struct cli_conn {
    const char *server;     /* --server, else $SHARDCAST_SERVER */
    const char *replicas_arg; /* --urls "URL,URL,..." */
    char **replicas;        /* the replica set's base URLs (malloc'd, each
                               malloc'd): --urls, else $SHARDCAST_URLS,
                               else $SHARDCAST_URL_TEMPLATE expanded for
                               $SHARDCAST_REPLICAS; NULL: none */
    size_t nreplicas;
    const char *replicas_from; /* where they came from, for messages */
    int no_verify;          /* --no-verify */
    const char *job;
    uint64_t epoch;
    uint32_t rank, world;
    uint64_t start, global_start;
    const char *fields_arg; /* "a,b" */
    char *fields_buf;       /* split copy of fields_arg (malloc'd) */
    const char *fields[SCC_FIELDS_MAX];
    size_t nfields;
    scc_format format;
    char *token;            /* from --token-file or $SHARDCAST_TOKEN */
    uint32_t connect_timeout_ms, idle_timeout_ms, reconnects;
    uint32_t retry_budget_ms;
    uint32_t header_timeout_ms, heartbeat_timeout_ms;
} cli_conn;

/* Long options every stream subcommand takes (values >= 1000), and the
 * getopt_long entries for them (terminated by a zero entry). */
enum {
    OPT_SERVER = 1000, OPT_JOB, OPT_EPOCH, OPT_RANK, OPT_WORLD, OPT_START,
    OPT_GLOBAL_START, OPT_FIELDS, OPT_FORMAT, OPT_TOKEN_FILE,
    OPT_CONNECT_TIMEOUT_MS, OPT_IDLE_TIMEOUT_MS, OPT_RECONNECTS,
    OPT_RETRY_BUDGET_MS, OPT_URLS, OPT_NO_VERIFY, OPT_HEADER_TIMEOUT_MS,
    OPT_HEARTBEAT_TIMEOUT_MS,
    /* deprecated spellings of the three durations (bare number: ms) */
    OPT_CONNECT_TIMEOUT, OPT_IDLE_TIMEOUT, OPT_RETRY_BUDGET, OPT_CONN_END
};
#define CLI_CONN_OPTIONS                                                    \
    {"server", required_argument, 0, OPT_SERVER},                           \
    {"job", required_argument, 0, OPT_JOB},                                 \
    {"epoch", required_argument, 0, OPT_EPOCH},                             \
    {"rank", required_argument, 0, OPT_RANK},                               \
    {"world", required_argument, 0, OPT_WORLD},                             \
    {"start", required_argument, 0, OPT_START},                             \
    {"global-start", required_argument, 0, OPT_GLOBAL_START},               \
    {"fields", required_argument, 0, OPT_FIELDS},                           \
    {"format", required_argument, 0, OPT_FORMAT},                           \
    {"token-file", required_argument, 0, OPT_TOKEN_FILE},                   \
    {"connect-timeout-ms", required_argument, 0, OPT_CONNECT_TIMEOUT_MS},   \
    {"idle-timeout-ms", required_argument, 0, OPT_IDLE_TIMEOUT_MS},         \
    {"header-timeout-ms", required_argument, 0, OPT_HEADER_TIMEOUT_MS},     \
    {"heartbeat-timeout-ms", required_argument, 0, OPT_HEARTBEAT_TIMEOUT_MS}, \
    {"reconnects", required_argument, 0, OPT_RECONNECTS},                   \
    {"retry-budget-ms", required_argument, 0, OPT_RETRY_BUDGET_MS},         \
    {"urls", required_argument, 0, OPT_URLS},                       \
    {"no-verify", no_argument, 0, OPT_NO_VERIFY},                           \
    {"connect-timeout", required_argument, 0, OPT_CONNECT_TIMEOUT},         \
    {"idle-timeout", required_argument, 0, OPT_IDLE_TIMEOUT},               \
    {"retry-budget", required_argument, 0, OPT_RETRY_BUDGET}

/* Help text of those options. */
extern const char cli_conn_help[];

void cli_conn_init(cli_conn *c);
/* Handle option c with argument arg: 1 handled, 0 not a connection
 * option, -1 bad value (message printed). */
int cli_conn_option(cli_conn *c, int opt, const char *arg, const char *cmd);
/* After parsing: token, server or replica set from the environment,
 * checks. 0 ok, -1 (message printed). need_job: server (or a replica set)
 * and job are required; without it (a stream URL) no replica set may be
 * given on the command line, and the environment's is not read. */
int cli_conn_finish(cli_conn *c, const char *cmd, int need_job);
/* Fill stream options (pointers into c). */
void cli_conn_options(const cli_conn *c, scc_options *o);
void cli_conn_free(cli_conn *c);

/* Parse a non-negative decimal integer <= max; -1 when malformed. */
int cli_parse_u64(const char *s, uint64_t max, uint64_t *out);

/*
 * Numbers with units, read by libshardio's parser exactly as shardcastd
 * reads its settings (shardio_units.h): kind SIO_UNIT_MS for options named
 * "--*-ms" (a bare number is ms), SIO_UNIT_SECS for other durations (a bare
 * number is s), SIO_UNIT_BYTES for sizes. 0 ok (value <= max), -1 when
 * malformed or too large.
 */
int cli_parse_units(const char *s, sio_unit_kind kind, uint64_t max,
                    uint64_t *out);

/*
 * A deprecated duration option that predates the unit rule: its bare
 * number is still read as ms (what it always meant), with a warning on
 * stderr naming the option to use; with a unit it reads like shardcastd.
 * opt is the old name without "--", repl the new one.
 */
/* --idle-timeout: a duration; a bare number is seconds (shardcastd's
 * unit for its setting of that name). Result in ms. */
int cli_parse_idle_timeout(const char *s, uint64_t *out_ms, const char *cmd);
int cli_parse_legacy_ms(const char *s, uint64_t max, uint64_t *out,
                        const char *cmd, const char *opt, const char *repl);

/* "12.3 MB" style, for tables. */
void cli_human_bytes(double bytes, char *buf, size_t len);

/* Subcommands: argc/argv start at the subcommand's name. */
int cli_ls(int argc, char **argv);
int cli_index(int argc, char **argv);
int cli_cat(int argc, char **argv);
int cli_stat(int argc, char **argv);
int cli_bench(int argc, char **argv);

#endif /* SCC_CLI_H */
