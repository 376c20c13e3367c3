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
/* The placeholder of $SHARDCAST_URL_TEMPLATE. */
#define TEMPLATE_J "{j}"

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
    "Replica set (shardcastd --replica J --replicas R, one URL each):\n"
    "  --urls URL,URL,...    the replicas' base URLs, replica 0 first\n"
    "                        (instead of --server; else $SHARDCAST_URLS, or\n"
    "                        $SHARDCAST_URL_TEMPLATE with {j} for J and\n"
    "                        $SHARDCAST_REPLICAS=R). --rank/--world are then\n"
    "                        the global consumer c of W (W >= R): it reads\n"
    "                        replica c mod R's part of the epoch as local\n"
    "                        rank c div R. Before streaming, every replica is\n"
    "                        asked for GET /v1/topology?job=JOB: each must\n"
    "                        report its own place (replica j of R) and the\n"
    "                        same fingerprint of the job's order, else the\n"
    "                        command fails naming the replicas and the\n"
    "                        settings that differ (exit 9); a replica that\n"
    "                        cannot be reached is skipped. A stream that\n"
    "                        breaks moves to another replica at once (any\n"
    "                        replica serves any part), resuming at the\n"
    "                        position reached, and a line on stderr says so\n"
    "  --no-verify           skip that check (streams must still be the part\n"
    "                        asked for, with one fingerprint throughout)\n"
    "Connection (durations take a unit, 500ms, 30s, 5m, 1h, as shardcastd's\n"
    "settings do; a bare number is ms for options named -ms):\n"
    "  --token-file FILE       bearer token (else $SHARDCAST_TOKEN)\n"
    "  --connect-timeout-ms D  (default 10s)\n"
    "  --idle-timeout-ms D     no byte for this long: reconnect (default\n"
    "                          60s; tar streams, and servers that send no\n"
    "                          heartbeat)\n"
    "  --header-timeout-ms D   the connect and the wait for the response\n"
    "                          headers together (default 10s): a stopped or\n"
    "                          hung server still accepts connections\n"
    "  --heartbeat-timeout-ms D  a frames stream whose server sends\n"
    "                          heartbeats (about one a second while it has\n"
    "                          nothing else to send): no byte for this long\n"
    "                          means it is hung: reconnect, or move to\n"
    "                          another replica (default 3s)\n"
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
    c->header_timeout_ms = SCC_HEADER_TIMEOUT_DEFAULT_MS;
    c->heartbeat_timeout_ms = SCC_HEARTBEAT_TIMEOUT_DEFAULT_MS;
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
    case OPT_URLS: c->replicas_arg = arg; return 1;
    case OPT_NO_VERIFY: c->no_verify = 1; return 1;
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
    case OPT_HEADER_TIMEOUT_MS:
    case OPT_HEARTBEAT_TIMEOUT_MS:
        if (cli_parse_units(arg, SIO_UNIT_MS, 86400000, &v) != 0 || v == 0)
            what = opt == OPT_HEADER_TIMEOUT_MS
                       ? "--header-timeout-ms (a duration, 1ms..24h)"
                       : "--heartbeat-timeout-ms (a duration, 1ms..24h)";
        else if (opt == OPT_HEADER_TIMEOUT_MS)
            c->header_timeout_ms = (uint32_t)v;
        else
            c->heartbeat_timeout_ms = (uint32_t)v;
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

/* A replica's base URL: http(s)://host..., no query or fragment. */
static int base_url_ok(const char *u)
{
    return (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0) &&
           strlen(u) > 8 && !strpbrk(u, "?# \t") && strlen(u) < SCC_URL_MAX;
}

static int add_replica(cli_conn *c, const char *u, size_t n, const char *cmd)
{
    while (n && (*u == ' ' || *u == '\t')) {
        u++;
        n--;
    }
    while (n && (u[n - 1] == ' ' || u[n - 1] == '\t' || u[n - 1] == '/'))
        n--;
    if (n == 0)
        return 0; /* "a,,b" and a trailing comma: nothing */
    if (c->nreplicas == SCC_REPLICAS_MAX) {
        fprintf(stderr, "shardcast %s: %s: more than %u replicas\n", cmd,
                c->replicas_from, SCC_REPLICAS_MAX);
        return -1;
    }
    char *d = malloc(n + 1);
    if (!d) {
        fprintf(stderr, "shardcast %s: out of memory\n", cmd);
        return -1;
    }
    memcpy(d, u, n);
    d[n] = '\0';
    c->replicas[c->nreplicas++] = d;
    if (!base_url_ok(d)) {
        fprintf(stderr, "shardcast %s: %s: \"%s\" is not an http(s)://HOST"
                "[:PORT] base URL\n", cmd, c->replicas_from, d);
        return -1;
    }
    for (size_t k = 0; k + 1 < c->nreplicas; k++)
        if (strcmp(c->replicas[k], d) == 0) {
            fprintf(stderr, "shardcast %s: %s: %s is given twice (as replica "
                    "%zu and %zu)\n", cmd, c->replicas_from, d, k,
                    c->nreplicas - 1);
            return -1;
        }
    return 0;
}

/* The replica set from a comma-separated list. */
static int replicas_from_list(cli_conn *c, const char *list, const char *cmd)
{
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (n > SCC_REPLICAS_MAX)
        n = SCC_REPLICAS_MAX + 1;
    c->replicas = calloc(n, sizeof *c->replicas);
    if (!c->replicas) {
        fprintf(stderr, "shardcast %s: out of memory\n", cmd);
        return -1;
    }
    for (const char *p = list;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (add_replica(c, p, len, cmd) != 0)
            return -1;
        if (!e)
            break;
        p = e + 1;
    }
    if (c->nreplicas == 0) {
        fprintf(stderr, "shardcast %s: %s names no replica\n", cmd,
                c->replicas_from);
        return -1;
    }
    return 0;
}

/* The replica set of a URL template with one {j}, for R replicas. */
static int replicas_from_template(cli_conn *c, const char *tpl,
                                  const char *rtext, const char *cmd)
{
    const char *at = strstr(tpl, TEMPLATE_J);
    uint64_t r = 0;
    if (!at || strstr(at + 1, TEMPLATE_J)) {
        fprintf(stderr, "shardcast %s: SHARDCAST_URL_TEMPLATE \"%s\" must "
                "hold %s exactly once\n", cmd, tpl, TEMPLATE_J);
        return -1;
    }
    if (!rtext || cli_parse_u64(rtext, SCC_REPLICAS_MAX, &r) != 0 || r == 0) {
        fprintf(stderr, "shardcast %s: SHARDCAST_URL_TEMPLATE needs "
                "SHARDCAST_REPLICAS=R (1..%u), got \"%s\"\n", cmd,
                SCC_REPLICAS_MAX, rtext ? rtext : "");
        return -1;
    }
    c->replicas = calloc((size_t)r, sizeof *c->replicas);
    if (!c->replicas) {
        fprintf(stderr, "shardcast %s: out of memory\n", cmd);
        return -1;
    }
    size_t head = (size_t)(at - tpl), tail = strlen(at + 3);
    for (uint64_t j = 0; j < r; j++) {
        char num[24];
        int nl = snprintf(num, sizeof num, "%llu", (unsigned long long)j);
        size_t n = head + (size_t)nl + tail;
        char *u = malloc(n + 1);
        if (!u) {
            fprintf(stderr, "shardcast %s: out of memory\n", cmd);
            return -1;
        }
        memcpy(u, tpl, head);
        memcpy(u + head, num, (size_t)nl);
        memcpy(u + head + (size_t)nl, at + 3, tail + 1);
        int bad = add_replica(c, u, n, cmd);
        free(u);
        if (bad)
            return -1;
    }
    return 0;
}

/* --urls, else (no --server, and a server is needed) the
 * environment's replica set. */
static int conn_replicas(cli_conn *c, const char *cmd, int need_job)
{
    if (c->replicas_arg) {
        if (!need_job) {
            fprintf(stderr, "shardcast %s: give a stream URL or --urls, "
                    "not both\n", cmd);
            return -1;
        }
        if (c->server) {
            fprintf(stderr, "shardcast %s: give --server or --urls, not "
                    "both\n", cmd);
            return -1;
        }
        c->replicas_from = "--urls";
        return replicas_from_list(c, c->replicas_arg, cmd);
    }
    if (!need_job || c->server)
        return 0;
    const char *urls = getenv("SHARDCAST_URLS");
    const char *tpl = getenv("SHARDCAST_URL_TEMPLATE");
    if (urls && !*urls)
        urls = NULL;
    if (tpl && !*tpl)
        tpl = NULL;
    if (urls && tpl) {
        fprintf(stderr, "shardcast %s: set SHARDCAST_URLS or "
                "SHARDCAST_URL_TEMPLATE, not both\n", cmd);
        return -1;
    }
    if (urls) {
        c->replicas_from = "SHARDCAST_URLS";
        return replicas_from_list(c, urls, cmd);
    }
    if (tpl) {
        c->replicas_from = "SHARDCAST_URL_TEMPLATE";
        return replicas_from_template(c, tpl, getenv("SHARDCAST_REPLICAS"),
                                      cmd);
    }
    return 0;
}

int cli_conn_finish(cli_conn *c, const char *cmd, int need_job)
{
    if (conn_replicas(c, cmd, need_job) != 0)
        return -1;
    if (!c->server && !c->nreplicas)
        c->server = getenv("SHARDCAST_SERVER");
    if (!c->token) {
        const char *t = getenv("SHARDCAST_TOKEN");
        if (t && *t && !(c->token = strdup(t)))
            return -1;
    }
    if (need_job && !c->nreplicas && (!c->server || !*c->server)) {
        fprintf(stderr, "shardcast %s: no server (--server or "
                "$SHARDCAST_SERVER, or a replica set: --urls, "
                "$SHARDCAST_URLS, $SHARDCAST_URL_TEMPLATE)\n", cmd);
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
    if (c->nreplicas > c->world) {
        fprintf(stderr, "shardcast %s: --world %u is below the %zu replicas "
                "(%s): every replica needs a consumer, or its part of the "
                "epoch is never read\n", cmd, c->world, c->nreplicas,
                c->replicas_from);
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
    o->header_timeout_ms = c->header_timeout_ms;
    o->heartbeat_timeout_ms = c->heartbeat_timeout_ms;
    o->max_reconnects = c->reconnects;
    o->retry_budget_ms = c->retry_budget_ms;
    o->replicas = (const char *const *)c->replicas;
    o->nreplicas = c->nreplicas;
    o->no_verify = c->no_verify;
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
    if (c->replicas)
        for (size_t k = 0; k < c->nreplicas; k++)
            free(c->replicas[k]);
    free(c->replicas);
    c->replicas = NULL;
    c->nreplicas = 0;
}
