/*
 * cli_bench.c — `shardcast bench`: N concurrent consumers of one epoch
 * against a server, with a live progress line and a summary (samples/s,
 * MB/s, time to first sample, per-consumer spread), optionally as JSON,
 * and optionally an exactly-once check against a mkwds manifest or a
 * plain list of per-sample hashes ("key sha256" lines). This file reads
 * the options and runs the consumers; the check is cli_bench_verify.c,
 * the summary cli_bench_report.c (shared declarations: cli_bench.h).
 *
 * Threading: one thread per consumer, each owning its stream; the main
 * thread prints progress from atomic counters.
 * Ownership: cli_bench owns every consumer record and the manifest.
 */
#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli_bench.h"

/* Most consumers one bench runs (each is a thread with its own stream). */
#define BENCH_CONSUMERS_MAX 1024u

static const char bench_help_head[] =
    "usage: shardcast bench [OPTIONS]\n"
    "\n"
    "Run N consumers of one epoch at once (ranks FIRST..FIRST+N-1 of\n"
    "--world, default ranks 0..N-1 of N) and report samples/s, MB/s\n"
    "(payload bytes, 10^6), time to first sample and the per-consumer\n"
    "spread (min/median/max samples and MB/s). A progress line is drawn on\n"
    "stderr when it is a terminal, else a plain line every --interval.\n"
    "With a replica set (--urls) the ranks are global consumers, each\n"
    "served by replica rank mod R; the set is checked once before the\n"
    "consumers start, each failover is told on stderr as by `cat`, and the\n"
    "summary adds the failovers and the max stall: the longest gap between\n"
    "two samples of one consumer (and the longest from a replica's failure\n"
    "to the next sample of a consumer it served).\n"
    "\n"
    "  -n, --consumers N     concurrent consumers (default 4, at most 1024)\n"
    "  --first-rank R        rank of the first consumer (default 0)\n"
    "  --limit N             stop each consumer after N samples\n"
    "  --verify FILE         check every sample against FILE: content hash,\n"
    "                        and (when the consumers are the whole world and\n"
    "                        run to the end) that together they got every\n"
    "                        sample exactly once (as the partition policy\n"
    "                        allows). FILE is one of\n"
    "                        - a JSON manifest {\"samples\": [{\"key\": K,\n"
    "                          \"hash\": H}, ...]} (other keys ignored), K the\n"
    "                          sample's WebDataset key, H the hex sha256 over\n"
    "                          its fields sorted by name, each as the name\n"
    "                          (UTF-8), a 0 byte, the length as 8 bytes\n"
    "                          little-endian and the data\n"
    "                          (shardcast.sample_hash in Python; the test\n"
    "                          generator tests/tools/mkwds.py writes one);\n"
    "                        - a plain list, one line per sample: the key,\n"
    "                          white space, the hex sha256 of ONE field's\n"
    "                          bytes, the field named by --verify-field\n"
    "                          (e.g. \"cat/0001 9f86d0...\"; blank lines and\n"
    "                          lines starting with # are skipped; the hash is\n"
    "                          the last word, so keys may hold spaces).\n"
    "                        A file starting with '{' is a manifest.\n"
    "  --verify-field NAME   the hashes of --verify are sha256 of field NAME\n"
    "                        (required for a plain list; with a manifest they\n"
    "                        come from samples[].fields[NAME].sha256, which\n"
    "                        mkwds.py writes). A sample without the field is\n"
    "                        a mismatch. --fields may then name NAME\n"
    "  --json                print the summary as JSON on stdout\n"
    "  --interval D          time between plain progress lines (default 5s;\n"
    "                        whole seconds, a bare number is seconds); they\n"
    "                        give min_samples, the samples of the consumer\n"
    "                        that has the fewest\n"
    "  --help                this text\n";

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A failover of consumer ud's stream, told on stderr (the library prints
 * nothing) and timed until its next sample. */
static void on_failover(void *ud, const scc_failover *f)
{
    consumer *c = ud;
    uint64_t now = now_ns();
    uint64_t ago = f->stalled_ms * 1000000u;
    fprintf(stderr, "shardcast bench: replica %u (%s) failed: %s; continuing "
            "consumer %u at position %llu from replica %u (%s)\n", f->from,
            f->from_url, f->reason, c->rank, (unsigned long long)f->position,
            f->to, f->to_url);
    c->fail_ns = ago < now ? now - ago : 0;
    c->fail_pending = 1;
}

static void *consumer_main(void *arg)
{
    consumer *c = arg;
    scc_stream *s = NULL;
    scc_options o = *c->base;
    uint64_t last_ns = 0;
    o.rank = c->rank;
    o.on_failover = on_failover;
    o.on_failover_ud = c;

    c->ttfs_ns = UINT64_MAX;
    c->rc = scc_stream_open(&o, &s);
    while (c->rc == SCC_OK) {
        const scc_sample *smp = NULL;
        c->rc = scc_stream_next(s, &smp);
        if (c->rc != SCC_OK)
            break;
        if (!smp) {
            c->complete = 1;
            break;
        }
        uint64_t now = now_ns();
        if (c->ttfs_ns == UINT64_MAX)
            c->ttfs_ns = now - c->t0_ns;
        if (last_ns && now - last_ns > c->max_stall_ns)
            c->max_stall_ns = now - last_ns;
        last_ns = now;
        if (c->fail_pending) {
            c->fail_pending = 0;
            if (now - c->fail_ns > c->failover_stall_ns)
                c->failover_stall_ns = now - c->fail_ns;
        }
        if (c->mf)
            bench_check_sample(c, smp);
        atomic_fetch_add(&c->bytes, smp->bytes);
        if (atomic_fetch_add(&c->samples, 1) + 1 == c->limit)
            break;
    }
    if (c->rc != SCC_OK)
        snprintf(c->err, sizeof c->err, "%s",
                 s ? scc_stream_errmsg(s) : scc_strerror(c->rc));
    if (s) {
        const char *p = scc_stream_partition(s);
        snprintf(c->partition, sizeof c->partition, "%s", p ? p : "");
        c->wire_bytes = scc_stream_bytes(s);
        c->reconnects = scc_stream_reconnects(s);
        c->failovers = scc_stream_failovers(s);
    }
    scc_stream_close(s);
    c->end_ns = now_ns() - c->t0_ns;
    atomic_store(&c->done, 1);
    return NULL;
}

/* Read the command line into *a (and the --verify file into *mf). Returns
 * -1 when the bench should run, else the exit code (usage errors, --help).
 * a->cc is initialised in every case (cli_conn_free it). */
static int bench_parse(int argc, char **argv, bench_args *a, manifest *mf)
{
    enum { OPT_FIRST = OPT_CONN_END + 1, OPT_LIMIT, OPT_VERIFY, OPT_JSON,
           OPT_INTERVAL, OPT_VERIFY_FIELD };
    static const struct option opts[] = {
        {"consumers", required_argument, 0, 'n'},
        {"first-rank", required_argument, 0, OPT_FIRST},
        {"limit", required_argument, 0, OPT_LIMIT},
        {"verify", required_argument, 0, OPT_VERIFY},
        {"verify-field", required_argument, 0, OPT_VERIFY_FIELD},
        {"json", no_argument, 0, OPT_JSON},
        {"interval", required_argument, 0, OPT_INTERVAL},
        {"help", no_argument, 0, 'h'},
        CLI_CONN_OPTIONS,
        {0, 0, 0, 0}};
    cli_conn *cc = &a->cc;
    int c, json = 0, world_given = 0;
    uint64_t n = 4, first = 0, limit = 0, interval = 5;
    const char *verify = NULL;
    char *verify_field = a->verify_field;

    memset(a, 0, sizeof *a);
    cli_conn_init(cc);
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'n':
            bad = cli_parse_u64(optarg, BENCH_CONSUMERS_MAX, &n) != 0 || !n;
            break;
        case OPT_FIRST:
            bad = cli_parse_u64(optarg, UINT32_MAX - 1, &first) != 0;
            break;
        case OPT_LIMIT:
            bad = cli_parse_u64(optarg, UINT64_MAX - 1, &limit) != 0 || !limit;
            break;
        case OPT_VERIFY: verify = optarg; break;
        case OPT_VERIFY_FIELD: {
            /* Field names are the lowercased extensions (WebDataset). */
            size_t fl = strlen(optarg);
            bad = fl == 0 || fl > SCC_FIELD_NAME_MAX || strchr(optarg, ',');
            for (size_t i = 0; !bad && i <= fl; i++)
                verify_field[i] = (char)tolower((unsigned char)optarg[i]);
            break;
        }
        case OPT_JSON: json = 1; break;
        case OPT_INTERVAL:
            bad = cli_parse_units(optarg, SIO_UNIT_SECS, 3600, &interval) != 0 ||
                  !interval;
            break;
        case 'h':
            fputs(bench_help_head, stdout);
            fputs(cli_conn_help, stdout);
            return CLI_EXIT_OK;
        default: {
            if (c == OPT_WORLD)
                world_given = 1;
            int r = cli_conn_option(cc, c, optarg, "bench");
            if (r == 1)
                continue;
            if (r == 0)
                fprintf(stderr, "%s%s", bench_help_head, cli_conn_help);
            return CLI_EXIT_USAGE;
        }
        }
        if (bad) {
            fprintf(stderr, "shardcast bench: bad value for option: %s\n",
                    optarg);
            return CLI_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "shardcast bench: unexpected argument %s\n",
                argv[optind]);
        return CLI_EXIT_USAGE;
    }
    if (!world_given)
        cc->world = (uint32_t)(first + n);
    if (first + n > cc->world) {
        fprintf(stderr, "shardcast bench: ranks %" PRIu64 "..%" PRIu64
                " do not fit --world %u\n", first, first + n - 1, cc->world);
        return CLI_EXIT_USAGE;
    }
    if (cli_conn_finish(cc, "bench", 1) != 0) {
        return CLI_EXIT_USAGE;
    }
    if (verify_field[0] && !verify) {
        fprintf(stderr, "shardcast bench: --verify-field needs --verify\n");
        return CLI_EXIT_USAGE;
    }
    if (verify && cc->nfields) {
        int has = 0;
        for (size_t i = 0; i < cc->nfields; i++)
            has |= strcasecmp(cc->fields[i], verify_field) == 0;
        if (!verify_field[0] || !has) {
            fprintf(stderr, "shardcast bench: --verify needs %s: %s\n",
                    verify_field[0] ? "the --verify-field among --fields"
                                    : "every field (the content hash "
                                      "covers them all)",
                    verify_field[0] ? "add it" : "drop --fields");
            return CLI_EXIT_USAGE;
        }
    }
    if (verify && bench_manifest_load(mf, verify,
                                      verify_field[0] ? verify_field
                                                      : NULL) != 0) {
        return CLI_EXIT_USAGE;
    }
    a->n = n;
    a->first = first;
    a->limit = limit;
    a->interval = interval;
    a->json = json;
    a->verify = verify;
    return -1;
}

/* Run the consumers, one thread each, with the progress line on stderr
 * until all ended. *nstarted: threads started (fewer than a->n only on a
 * failure to start one, then CLI_EXIT_FAIL); *wall: ns until the last
 * consumer ended. */
static int bench_run(const bench_args *a, manifest *mf, consumer *cs,
                     size_t *nstarted, uint64_t *wall)
{
    uint64_t n = a->n, first = a->first, limit = a->limit;
    uint64_t interval = a->interval;
    const char *verify = a->verify;
    int ret = CLI_EXIT_OK;
    size_t started = 0;
    scc_options base;
    pthread_t *th = calloc(n, sizeof *th);

    *nstarted = 0;
    if (!th)
        return CLI_EXIT_FAIL;
    cli_conn_options(&a->cc, &base);
    char fp[SCC_FINGERPRINT_MAX + 1];
    if (base.nreplicas && !base.no_verify) {
        /* The replica set is checked once, not by every consumer. */
        char *msg = malloc(8192);
        scc_code rc = msg ? scc_replicas_verify(&base, fp, msg, 8192)
                          : SCC_ERR_NOMEM;
        if (rc != SCC_OK) {
            fprintf(stderr, "shardcast bench: %s\n",
                    msg ? msg : scc_strerror(rc));
            free(msg);
            free(th);
            return cli_exit_for(rc);
        }
        free(msg);
        base.fingerprint = fp;
    }
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        cs[i].rank = (uint32_t)(first + i);
        cs[i].base = &base;
        cs[i].mf = verify ? mf : NULL;
        cs[i].limit = limit;
        cs[i].t0_ns = t0;
        if (pthread_create(&th[i], NULL, consumer_main, &cs[i]) != 0) {
            fprintf(stderr, "shardcast bench: cannot start thread %zu\n", i);
            ret = CLI_EXIT_FAIL;
            break;
        }
        started++;
    }

    /* Progress until every consumer is done. */
    int tty = isatty(STDERR_FILENO);
    uint64_t last_print = t0;
    for (;;) {
        size_t ndone = 0;
        uint64_t ts = 0, tb = 0, tmin = UINT64_MAX;
        for (size_t i = 0; i < started; i++) {
            uint64_t cn = atomic_load(&cs[i].samples);
            ndone += atomic_load(&cs[i].done) != 0;
            ts += cn;
            tb += atomic_load(&cs[i].bytes);
            if (cn < tmin)
                tmin = cn;
        }
        if (tmin == UINT64_MAX)
            tmin = 0;
        uint64_t now = now_ns();
        double el = (double)(now - t0) / 1e9;
        if (ndone == started)
            break;
        if (tty) {
            fprintf(stderr, "\r\033[Kbench: %.1fs %" PRIu64 " samples %.0f "
                    "samples/s %.1f MB/s %zu/%zu running", el, ts,
                    el > 0 ? (double)ts / el : 0.0,
                    el > 0 ? (double)tb / 1e6 / el : 0.0, started - ndone,
                    started);
        } else if (now - last_print >= interval * 1000000000ull) {
            fprintf(stderr, "bench: elapsed_s=%.1f samples=%" PRIu64
                    " samples_per_s=%.0f mb_per_s=%.1f running=%zu"
                    " min_samples=%" PRIu64 "\n", el, ts,
                    el > 0 ? (double)ts / el : 0.0,
                    el > 0 ? (double)tb / 1e6 / el : 0.0, started - ndone,
                    tmin);
            last_print = now;
        }
        struct timespec d = {0, 200 * 1000000L};
        nanosleep(&d, NULL);
    }
    if (tty)
        fprintf(stderr, "\r\033[K");
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    /* Elapsed time: until the last consumer ended, as each recorded it
     * (the progress loop above only polls every 200 ms). */
    uint64_t wall_ns = 0;
    for (size_t i = 0; i < started; i++)
        if (cs[i].end_ns > wall_ns)
            wall_ns = cs[i].end_ns;
    if (wall_ns == 0)
        wall_ns = now_ns() - t0;
    free(th);
    *nstarted = started;
    *wall = wall_ns;
    return ret;
}

int cli_bench(int argc, char **argv)
{
    bench_args a;
    manifest mf;
    consumer *cs = NULL;
    double *tmp = NULL;
    size_t started = 0;
    uint64_t wall_ns = 0;
    int ret;

    memset(&mf, 0, sizeof mf);
    ret = bench_parse(argc, argv, &a, &mf);
    if (ret != -1)
        goto out;
    cs = calloc(a.n, sizeof *cs);
    tmp = calloc(a.n, sizeof *tmp);
    if (!cs || !tmp) {
        ret = CLI_EXIT_FAIL;
        goto out;
    }
    ret = bench_run(&a, &mf, cs, &started, &wall_ns);
    if (started < a.n)
        goto out;
    ret = bench_report(&a, &mf, cs, tmp, wall_ns);
out:
    if (fflush(stdout) != 0 && ret == CLI_EXIT_OK)
        ret = CLI_EXIT_FAIL;
    free(cs);
    free(tmp);
    bench_manifest_free(&mf);
    cli_conn_free(&a.cc);
    return ret;
}
