/*
 * cli_bench.h — the pieces of `shardcast bench` shared by its files:
 * cli_bench.c (options and the run: consumer threads, progress),
 * cli_bench_verify.c (the --verify file and the per-sample and
 * exactly-once checks) and cli_bench_report.c (the summary, as text or
 * JSON).
 *
 * Threading: a consumer record is written by its own thread while it runs
 * (the counters the progress line reads are atomics) and read by the main
 * thread after the join; the manifest is read-only once loaded, except its
 * atomic delivery counters.
 */
#ifndef SCC_CLI_BENCH_H
#define SCC_CLI_BENCH_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cli.h"

/* Problems listed in detail by --verify (the counts are always complete). */
#define VERIFY_SHOWN 10

/* What the command line asked for. */
typedef struct bench_args {
    cli_conn cc;
    uint64_t n, first, limit, interval; /* --consumers, --first-rank,
                                           --limit (0: none), --interval */
    int json;                           /* --json */
    const char *verify;                 /* --verify FILE, or NULL */
    char verify_field[SCC_FIELD_NAME_MAX + 1]; /* --verify-field, lowercased
                                                  ("" when not given) */
} bench_args;

typedef struct manifest {
    json_t *root;                /* a JSON manifest, or NULL */
    char *text;                  /* the file's bytes (a plain list's keys
                                    point into it, NUL-terminated) */
    const char *field;           /* --verify-field (lowercased), or NULL:
                                    the whole-sample content hash */
    int plain;                   /* a plain list */
    size_t n;
    const char **keys;           /* views into root or text */
    unsigned char (*hash)[32];
    size_t *table;               /* open addressing: index + 1, 0 empty */
    size_t cap;
    _Atomic uint32_t *seen;      /* deliveries per sample */
} manifest;

typedef struct consumer {
    uint32_t rank;
    const scc_options *base;
    manifest *mf;
    uint64_t limit;
    uint64_t t0_ns;
    _Atomic uint64_t samples, bytes;
    _Atomic int done;
    uint64_t ttfs_ns, end_ns; /* UINT64_MAX: no sample */
    uint64_t wire_bytes;
    uint32_t reconnects;
    uint32_t failovers;       /* connections another replica took over */
    uint64_t max_stall_ns;    /* longest gap between two of its samples */
    uint64_t failover_stall_ns; /* longest time from a replica's failure
                                   to the next sample, over its failovers */
    uint64_t fail_ns;         /* when the replica that failed did */
    int fail_pending;         /* a failover waits for its first sample */
    scc_code rc;
    char err[512];
    char partition[16];
    uint64_t unknown, mismatched;
    char problems[VERIFY_SHOWN][160];
    size_t nproblems;
    int complete; /* reached the clean end */
} consumer;

/* Load the --verify file (a JSON manifest, or with field a plain list);
 * -1 with a message on stderr (m is then empty). field must outlive m. */
int bench_manifest_load(manifest *m, const char *path, const char *field);
void bench_manifest_free(manifest *m);

/* Check one delivered sample against the manifest (consumer thread). */
void bench_check_sample(consumer *c, const scc_sample *s);

/*
 * The exactly-once verdict over the n consumers that ran: unknown keys and
 * hash mismatches, and, when the consumers were the whole world run to the
 * end, missing and duplicated samples against what the partition policy
 * allows. Writes the text line into msg and the JSON object into *out;
 * returns 1 when the check passed.
 */
int bench_verify_tally(const bench_args *a, manifest *mf, const consumer *cs,
                       char *msg, size_t len, json_t **out);

/* Print the summary of the n consumers (tmp has room for n doubles) and
 * the failures on stderr; returns the exit code. */
int bench_report(const bench_args *a, manifest *mf, const consumer *cs,
                 double *tmp, uint64_t wall_ns);

#endif /* SCC_CLI_BENCH_H */
