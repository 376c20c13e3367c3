/*
 * cli_stat.c — `shardcast stat [JOB]`: a job's status (GET /v1/jobs/{job})
 * or the list of jobs (GET /v1/jobs) as tables.
 *
 * The status JSON belongs to the server and grows over time, so it is read
 * defensively: every member is optional, a missing or mistyped one prints
 * as "-", unknown members are ignored (--json shows everything).
 *
 * Threading: main thread only. Ownership: the body and the parsed JSON
 * are freed before returning.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Largest status body accepted (a job lists at most a bounded number of
 * consumers per epoch; this is far above it). */
#define STATUS_BODY_MAX (16u << 20)
/* Consumers shown per epoch in the table (--json has them all). */
#define CONSUMERS_SHOWN 64

static const char stat_help[] =
    "usage: shardcast stat [OPTIONS] [JOB]\n"
    "\n"
    "Show a job's status as tables: source, shards, settings, throughput,\n"
    "totals, the epochs in flight and each consumer's position and lag,\n"
    "and recent errors. Without JOB (and without --job), list the jobs.\n"
    "\n"
    "  --server URL       server root (default $SHARDCAST_SERVER)\n"
    "  --job NAME         same as the JOB argument\n"
    "  --token-file FILE  bearer token (else $SHARDCAST_TOKEN)\n"
    "  --timeout-ms D     for the request (default 10s; a duration with a\n"
    "                     unit, 500ms, 30s, 1m, or a bare number of ms)\n"
    "  --json             print the server's JSON as it is\n"
    "  --help             this text\n"
    "Deprecated: --timeout D, the same with a unit; a bare number is still\n"
    "read as ms (with a warning).\n";

/* Text of a member: a string as is, a number formatted, else "-". */
static const char *txt(json_t *o, const char *name, char *buf, size_t len)
{
    json_t *v = json_object_get(o, name);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_integer(v))
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%.1f", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
    else
        snprintf(buf, len, "-");
    return buf;
}

static double num(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    return json_is_number(v) ? json_number_value(v) : -1.0;
}

static void print_jobs(json_t *root)
{
    char b[8][48];
    json_t *jobs = json_object_get(root, "jobs");
    size_t i;
    json_t *j;

    printf("%-24s %-10s %8s %12s %10s %9s %8s %8s\n", "JOB", "STATE",
           "SHARDS", "SAMPLES/S", "MB/S", "ATTACHED", "MISSING", "LAGGING");
    if (!json_is_array(jobs)) {
        printf("(no jobs list in the answer)\n");
        return;
    }
    json_array_foreach(jobs, i, j) {
        json_t *tp = json_object_get(j, "throughput");
        double sps = num(tp, "samples_per_s"), mbps = num(tp, "mb_per_s");
        snprintf(b[3], sizeof b[3], sps < 0 ? "-" : "%.1f", sps);
        snprintf(b[4], sizeof b[4], mbps < 0 ? "-" : "%.2f", mbps);
        printf("%-24s %-10s %8s %12s %10s %9s %8s %8s\n",
               txt(j, "name", b[0], sizeof b[0]),
               txt(j, "state", b[1], sizeof b[1]),
               txt(j, "shards", b[2], sizeof b[2]), b[3], b[4],
               txt(j, "consumers_attached", b[5], sizeof b[5]),
               txt(j, "consumers_missing", b[6], sizeof b[6]),
               txt(j, "consumers_lagging", b[7], sizeof b[7]));
    }
    if (json_array_size(jobs) == 0)
        printf("(no jobs)\n");
}

/* "key=value ..." of every scalar member of an object. */
static void print_scalars(const char *label, json_t *o)
{
    const char *k;
    json_t *v;
    char b[64];
    if (!json_is_object(o))
        return;
    printf("%-12s", label);
    json_object_foreach(o, k, v) {
        if (json_is_object(v) || json_is_array(v))
            continue;
        printf(" %s=%s", k, txt(o, k, b, sizeof b));
    }
    printf("\n");
}

static void print_job(json_t *j)
{
    char b[10][48];
    json_t *tp = json_object_get(j, "throughput");
    json_t *epochs = json_object_get(j, "epochs");
    json_t *errors = json_object_get(j, "errors");
    size_t i, k;
    json_t *e, *cns;

    printf("%-12s %s\n", "job", txt(j, "name", b[0], sizeof b[0]));
    printf("%-12s %s", "state", txt(j, "state", b[0], sizeof b[0]));
    if (json_is_string(json_object_get(j, "reason")) &&
        *json_string_value(json_object_get(j, "reason")))
        printf(" (%s)", json_string_value(json_object_get(j, "reason")));
    printf("\n");
    printf("%-12s %s\n", "source", txt(j, "source", b[0], sizeof b[0]));
    printf("%-12s %s\n", "shards", txt(j, "shards", b[0], sizeof b[0]));
    print_scalars("settings", json_object_get(j, "settings"));
    if (json_is_object(tp)) {
        double sps = num(tp, "samples_per_s"), mbps = num(tp, "mb_per_s");
        double win = num(tp, "window_s");
        printf("%-12s ", "throughput");
        if (sps >= 0)
            printf("%.1f samples/s", sps);
        else
            printf("- samples/s");
        if (mbps >= 0)
            printf(", %.2f MB/s", mbps);
        if (win > 0)
            printf(" (over the last %.1f s)", win);
        printf("\n");
    }
    print_scalars("totals", json_object_get(j, "totals"));
    print_scalars("skipped", json_object_get(j, "skipped"));
    printf("%-12s attached=%s missing=%s lagging=%s\n", "consumers",
           txt(j, "consumers_attached", b[0], sizeof b[0]),
           txt(j, "consumers_missing", b[1], sizeof b[1]),
           txt(j, "consumers_lagging", b[2], sizeof b[2]));
    print_scalars("fetch", json_object_get(j, "fetch"));

    if (json_is_array(epochs) && json_array_size(epochs)) {
        printf("\n%-8s %10s %10s %12s %6s %6s %10s %9s %8s\n", "EPOCH",
               "PRODUCED", "SAMPLES", "BYTES", "ENDED", "FAILED", "WINDOW",
               "ATTACHED", "LAGGING");
        json_array_foreach(epochs, i, e) {
            if (json_is_integer(e)) { /* a summary entry: the number only */
                printf("%-8" JSON_INTEGER_FORMAT "\n", json_integer_value(e));
                continue;
            }
            json_t *win = json_object_get(e, "window");
            printf("%-8s %10s %10s %12s %6s %6s %10s %9s %8s\n",
                   txt(e, "epoch", b[0], sizeof b[0]),
                   txt(e, "produced", b[1], sizeof b[1]),
                   txt(e, "samples", b[2], sizeof b[2]),
                   txt(e, "bytes", b[3], sizeof b[3]),
                   txt(e, "ended", b[4], sizeof b[4]),
                   txt(e, "failed", b[5], sizeof b[5]),
                   txt(win, "samples", b[6], sizeof b[6]),
                   txt(e, "attached", b[7], sizeof b[7]),
                   txt(e, "lagging_count", b[8], sizeof b[8]));
        }
        int header = 0;
        json_array_foreach(epochs, i, e) {
            cns = json_object_get(e, "consumers");
            if (!json_is_array(cns))
                continue;
            json_t *cn;
            json_array_foreach(cns, k, cn) {
                if (!header) {
                    printf("\n%-8s %12s %12s %12s %10s %10s\n", "EPOCH",
                           "RANK/WORLD", "POSITION", "LAG", "STATE",
                           "IDLE_MS");
                    header = 1;
                }
                if (k == CONSUMERS_SHOWN) {
                    printf("%-8s ... %zu more (see --json)\n",
                           txt(e, "epoch", b[0], sizeof b[0]),
                           json_array_size(cns) - k);
                    break;
                }
                char rw[64];
                snprintf(rw, sizeof rw, "%s/%s",
                         txt(cn, "rank", b[1], sizeof b[1]),
                         txt(cn, "world", b[2], sizeof b[2]));
                printf("%-8s %12s %12s %12s %10s %10s\n",
                       txt(e, "epoch", b[0], sizeof b[0]), rw,
                       txt(cn, "position", b[3], sizeof b[3]),
                       txt(cn, "lag", b[4], sizeof b[4]),
                       txt(cn, "state", b[5], sizeof b[5]),
                       txt(cn, "idle_ms", b[6], sizeof b[6]));
            }
        }
    } else {
        printf("\n(no epochs in flight)\n");
    }
    if (json_is_array(errors) && json_array_size(errors)) {
        printf("\nERRORS\n");
        json_array_foreach(errors, i, e)
            printf("  %s  %s\n", txt(e, "unix_ms", b[0], sizeof b[0]),
                   txt(e, "message", b[1], sizeof b[1]));
    }
}

int cli_stat(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, 0, 's'},
        {"job", required_argument, 0, 'j'},
        {"token-file", required_argument, 0, OPT_TOKEN_FILE},
        {"timeout-ms", required_argument, 0, 'T'},
        {"timeout", required_argument, 0, 't'}, /* deprecated */
        {"json", no_argument, 0, 'J'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    cli_conn cc;
    int c, json = 0, ret = CLI_EXIT_OK;
    uint64_t timeout = 10000;
    char *body = NULL, *url = NULL, *esc = NULL;
    size_t len = 0;
    char err[512];
    json_t *root = NULL;

    cli_conn_init(&cc);
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': cc.server = optarg; break;
        case 'j': cc.job = optarg; break;
        case 'J': json = 1; break;
        case 'T':
        case 't':
            if ((c == 't' ? cli_parse_legacy_ms(optarg, 3600000, &timeout,
                                                "stat", "timeout",
                                                "timeout-ms")
                          : cli_parse_units(optarg, SIO_UNIT_MS, 3600000,
                                            &timeout)) != 0 ||
                !timeout) {
                fprintf(stderr, "shardcast stat: bad --timeout-ms %s (a "
                        "duration, 1ms..1h)\n", optarg);
                ret = CLI_EXIT_USAGE;
                goto out;
            }
            break;
        case 'h': fputs(stat_help, stdout); goto out;
        case OPT_TOKEN_FILE:
            if (cli_conn_option(&cc, c, optarg, "stat") != 1) {
                ret = CLI_EXIT_USAGE;
                goto out;
            }
            break;
        default:
            fputs(stat_help, stderr);
            ret = CLI_EXIT_USAGE;
            goto out;
        }
    }
    if (optind == argc - 1 && !cc.job)
        cc.job = argv[optind];
    else if (optind != argc) {
        fputs(stat_help, stderr);
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    if (cli_conn_finish(&cc, "stat", 0) != 0) {
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    if (!cc.server || !*cc.server) {
        fprintf(stderr, "shardcast stat: no server (--server or "
                "$SHARDCAST_SERVER)\n");
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    size_t slen = strlen(cc.server);
    while (slen && cc.server[slen - 1] == '/')
        slen--;
    if (cc.job) {
        esc = curl_easy_escape(NULL, cc.job, 0);
        if (!esc) {
            ret = CLI_EXIT_FAIL;
            goto out;
        }
    }
    size_t ulen = slen + (esc ? strlen(esc) : 0) + 16;
    url = malloc(ulen);
    if (!url) {
        ret = CLI_EXIT_FAIL;
        goto out;
    }
    snprintf(url, ulen, "%.*s/v1/jobs%s%s", (int)slen, cc.server,
             esc ? "/" : "", esc ? esc : "");
    scc_code rc = scc_http_get(url, cc.token, (uint32_t)timeout,
                               STATUS_BODY_MAX, &body, &len, NULL, err,
                               sizeof err);
    if (rc != SCC_OK) {
        fprintf(stderr, "shardcast stat: %s\n", err[0] ? err
                                                       : scc_strerror(rc));
        ret = cli_exit_for(rc);
        goto out;
    }
    if (json) {
        fwrite(body, 1, len, stdout);
        if (len && body[len - 1] != '\n')
            putchar('\n');
        goto out;
    }
    json_error_t jerr;
    root = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(root)) {
        fprintf(stderr, "shardcast stat: the server's answer is not a JSON "
                "object (%s)\n", jerr.text);
        ret = CLI_EXIT_FAIL;
        goto out;
    }
    if (cc.job)
        print_job(root);
    else
        print_jobs(root);
out:
    if (fflush(stdout) != 0 && ret == CLI_EXIT_OK)
        ret = CLI_EXIT_FAIL;
    json_decref(root);
    curl_free(esc);
    free(url);
    free(body);
    cli_conn_free(&cc);
    return ret;
}
