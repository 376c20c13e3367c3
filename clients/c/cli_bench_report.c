/*
 * cli_bench_report.c — the summary `shardcast bench` prints after its
 * consumers ended: totals, throughput, time to first sample and the
 * per-consumer spread, with the --verify verdict, as text or (--json) as
 * one JSON object on stdout; each failed consumer's error on stderr.
 *
 * Threading: main thread, after every consumer thread was joined.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_bench.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* min/median/max of v[0..n) (sorted in place); zeros when n == 0. */
static void spread(double *v, size_t n, double out[3])
{
    if (n == 0) {
        out[0] = out[1] = out[2] = 0;
        return;
    }
    qsort(v, n, sizeof *v, cmp_double);
    out[0] = v[0];
    out[1] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    out[2] = v[n - 1];
}

static json_t *spread_json(const double s[3])
{
    return json_pack("{s:f, s:f, s:f}", "min", s[0], "median", s[1], "max",
                     s[2]);
}

int bench_report(const bench_args *a, manifest *mf, const consumer *cs,
                 double *tmp, uint64_t wall_ns)
{
    uint64_t n = a->n, first = a->first;
    int ret = CLI_EXIT_OK;

    uint64_t total = 0, bytes = 0, wire = 0, reconnects = 0, failovers = 0;
    uint64_t max_stall = 0, fo_stall = 0;
    size_t failed = 0;
    int worst = CLI_EXIT_OK;
    double ttfs[3], sps[3], mbps[3];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        total += cs[i].samples;
        bytes += cs[i].bytes;
        wire += cs[i].wire_bytes;
        reconnects += cs[i].reconnects;
        failovers += cs[i].failovers;
        if (cs[i].max_stall_ns > max_stall)
            max_stall = cs[i].max_stall_ns;
        if (cs[i].failover_stall_ns > fo_stall)
            fo_stall = cs[i].failover_stall_ns;
        if (cs[i].rc != SCC_OK) {
            failed++;
            if (worst == CLI_EXIT_OK)
                worst = cli_exit_for(cs[i].rc);
        }
        if (cs[i].ttfs_ns != UINT64_MAX)
            tmp[k++] = (double)cs[i].ttfs_ns / 1e9;
    }
    spread(tmp, k, ttfs);
    for (size_t i = 0; i < n; i++)
        tmp[i] = (double)cs[i].samples;
    spread(tmp, n, sps);
    for (size_t i = 0; i < n; i++) {
        double secs = (double)cs[i].end_ns / 1e9;
        tmp[i] = secs > 0 ? (double)cs[i].bytes / 1e6 / secs : 0.0;
    }
    spread(tmp, n, mbps);
    double wall = (double)wall_ns / 1e9;

    /* Exactly-once check. */
    json_t *jv = json_null();
    int verify_ok = 1;
    char vmsg[256] = "";
    if (a->verify)
        verify_ok = bench_verify_tally(a, mf, cs, vmsg, sizeof vmsg, &jv);

    if (a->json) {
        json_t *detail = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *d = json_pack(
                "{s:I, s:I, s:I, s:f, s:I, s:s, s:b}", "rank",
                (json_int_t)cs[i].rank, "samples", (json_int_t)cs[i].samples,
                "bytes", (json_int_t)cs[i].bytes, "seconds",
                (double)cs[i].end_ns / 1e9, "reconnects",
                (json_int_t)cs[i].reconnects, "status",
                cs[i].rc == SCC_OK ? "ok" : scc_strerror(cs[i].rc),
                "complete", cs[i].complete);
            json_object_set_new(d, "ttfs_s",
                                cs[i].ttfs_ns == UINT64_MAX
                                    ? json_null()
                                    : json_real((double)cs[i].ttfs_ns / 1e9));
            json_object_set_new(d, "failovers",
                                json_integer((json_int_t)cs[i].failovers));
            json_object_set_new(d, "max_stall_s",
                                json_real((double)cs[i].max_stall_ns / 1e9));
            json_object_set_new(
                d, "failover_stall_s",
                json_real((double)cs[i].failover_stall_ns / 1e9));
            if (a->cc.nreplicas)
                json_object_set_new(
                    d, "replica",
                    json_integer((json_int_t)(cs[i].rank % a->cc.nreplicas)));
            if (cs[i].rc != SCC_OK)
                json_object_set_new(d, "error", json_string(cs[i].err));
            json_array_append_new(detail, d);
        }
        json_t *root = json_pack(
            "{s:I, s:I, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:o, s:{s:o, "
            "s:o}, s:I, s:I, s:o, s:o}",
            "consumers", (json_int_t)n, "world", (json_int_t)a->cc.world,
            "format", a->cc.format == SCC_FORMAT_TAR ? "tar" : "frames",
            "samples", (json_int_t)total, "bytes", (json_int_t)bytes,
            "wire_bytes", (json_int_t)wire, "seconds", wall,
            "samples_per_s", wall > 0 ? (double)total / wall : 0.0,
            "mb_per_s", wall > 0 ? (double)bytes / 1e6 / wall : 0.0,
            "ttfs_s", spread_json(ttfs), "per_consumer", "samples",
            spread_json(sps), "mb_per_s", spread_json(mbps), "reconnects",
            (json_int_t)reconnects, "failed", (json_int_t)failed, "verify",
            jv, "consumers_detail", detail);
        if (root) {
            json_object_set_new(root, "replicas",
                                json_integer((json_int_t)a->cc.nreplicas));
            json_object_set_new(root, "failovers",
                                json_integer((json_int_t)failovers));
            json_object_set_new(root, "max_stall_s",
                                json_real((double)max_stall / 1e9));
            json_object_set_new(root, "max_failover_stall_s",
                                json_real((double)fo_stall / 1e9));
        }
        char *text = root ? json_dumps(root, JSON_INDENT(1) |
                                                 JSON_PRESERVE_ORDER)
                          : NULL;
        if (text)
            puts(text);
        free(text);
        json_decref(root);
    } else {
        char hb[32];
        cli_human_bytes((double)bytes, hb, sizeof hb);
        printf("consumers        %" PRIu64 " (ranks %" PRIu64 "..%" PRIu64
               " of %u), format %s\n", n, first, first + n - 1, a->cc.world,
               a->cc.format == SCC_FORMAT_TAR ? "tar" : "frames");
        printf("samples          %" PRIu64 " (%s payload) in %.2f s\n", total,
               hb, wall);
        printf("throughput       %.1f samples/s, %.2f MB/s\n",
               wall > 0 ? (double)total / wall : 0.0,
               wall > 0 ? (double)bytes / 1e6 / wall : 0.0);
        printf("first sample     min %.3f s, median %.3f s, max %.3f s\n",
               ttfs[0], ttfs[1], ttfs[2]);
        printf("per consumer     samples min %.0f / median %.0f / max %.0f;"
               " MB/s min %.2f / median %.2f / max %.2f\n", sps[0], sps[1],
               sps[2], mbps[0], mbps[1], mbps[2]);
        printf("reconnects       %" PRIu64 "\n", reconnects);
        if (a->cc.nreplicas)
            printf("replicas         %zu\n", a->cc.nreplicas);
        printf("failovers        %" PRIu64 "\n", failovers);
        printf("max stall        %.3f s (longest gap between two samples of "
               "a consumer); after a failover %.3f s\n",
               (double)max_stall / 1e9, (double)fo_stall / 1e9);
        printf("failed           %zu\n", failed);
        if (a->verify) {
            printf("verify           %s\n", vmsg);
            for (size_t i = 0; i < n; i++)
                for (size_t p = 0; p < cs[i].nproblems; p++)
                    printf("  rank %u: %s\n", cs[i].rank, cs[i].problems[p]);
        }
        json_decref(jv);
    }
    for (size_t i = 0; i < n; i++)
        if (cs[i].rc != SCC_OK)
            fprintf(stderr, "shardcast bench: rank %u: %s\n", cs[i].rank,
                    cs[i].err);
    if (worst != CLI_EXIT_OK)
        ret = worst;
    else if (!verify_ok)
        ret = CLI_EXIT_VERIFY;
    return ret;
}
