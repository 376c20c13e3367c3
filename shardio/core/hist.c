/*
 * hist.c — fixed-bucket duration histograms and their Prometheus text
 * (contract in shardio_hist.h).
 *
 * Threading: sio_hist is updated with relaxed atomics (each bucket and the
 * sum are independent counters; a reader sums a snapshot of the buckets,
 * so what it writes is cumulative and monotone whatever runs meanwhile).
 * sio_hist_snap is plain memory.
 */
#include "shardio_hist.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shardio.h"
#include "shardio_wire.h"

static const uint64_t dur_ns[] = {
    500000u,           1000000u,          2500000u,
    5000000u,          10000000u,         25000000u,
    50000000u,         100000000u,        250000000u,
    500000000u,        1000000000u,       2500000000u,
    5000000000u,       10000000000u,      30000000000u,
    60000000000u,      300000000000u,     900000000000u,
    3600000000000u};
static const char *const dur_le[] = {
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",  "0.5",    "1",     "2.5",  "5",     "10",
    "30",     "60",    "300",    "900",   "3600"};

_Static_assert(sizeof dur_ns / sizeof dur_ns[0] ==
                   sizeof dur_le / sizeof dur_le[0],
               "bounds and their text");
_Static_assert(sizeof dur_ns / sizeof dur_ns[0] + 1 <= SIO_HIST_BUCKETS_MAX,
               "SIO_HIST_BUCKETS_MAX holds the largest layout and +Inf");

/* The latency layout is the first 16 bounds of the duration layout. */
const sio_hist_layout sio_hist_latency = {16, dur_ns, dur_le};
const sio_hist_layout sio_hist_duration = {sizeof dur_ns / sizeof dur_ns[0],
                                           dur_ns, dur_le};

static size_t bucket_of(const sio_hist_layout *l, uint64_t ns)
{
    size_t i = 0;
    while (i < l->n && ns > l->le_ns[i])
        i++;
    return i;
}

void sio_hist_observe(sio_hist *h, const sio_hist_layout *l, uint64_t ns)
{
    atomic_fetch_add_explicit(&h->bucket[bucket_of(l, ns)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void sio_hist_snapshot(const sio_hist *h, sio_hist_snap *out)
{
    sio_hist *m = (sio_hist *)(uintptr_t)h;
    for (size_t i = 0; i < SIO_HIST_BUCKETS_MAX; i++)
        out->bucket[i] =
            atomic_load_explicit(&m->bucket[i], memory_order_relaxed);
    out->sum_ns = atomic_load_explicit(&m->sum_ns, memory_order_relaxed);
}

void sio_hist_snap_observe(sio_hist_snap *s, const sio_hist_layout *l,
                           uint64_t ns)
{
    s->bucket[bucket_of(l, ns)]++;
    s->sum_ns += ns;
}

void sio_hist_snap_add(sio_hist_snap *a, const sio_hist_snap *b)
{
    for (size_t i = 0; i < SIO_HIST_BUCKETS_MAX; i++)
        a->bucket[i] += b->bucket[i];
    a->sum_ns += b->sum_ns;
}

uint64_t sio_hist_snap_count(const sio_hist_snap *s)
{
    uint64_t n = 0;
    for (size_t i = 0; i < SIO_HIST_BUCKETS_MAX; i++)
        n += s->bucket[i];
    return n;
}

uint64_t sio_hist_ns_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t ns = ((int64_t)t1.tv_sec - (int64_t)t0->tv_sec) * 1000000000 +
                 ((int64_t)t1.tv_nsec - (int64_t)t0->tv_nsec);
    return ns > 0 ? (uint64_t)ns : 0;
}

/* One whole exposition line (never cut). */
#define put(out, ...) sio_wbuf_printf((out), __VA_ARGS__)

int sio_hist_write(struct sio_wbuf *out, const char *name, const char *labels,
                   const sio_hist_layout *l, const sio_hist_snap *s)
{
    const char *sep = labels && labels[0] ? "," : "";
    uint64_t cum = 0;
    int rc = SIO_OK;
    if (!labels)
        labels = "";
    /* Bounds past this layout hold nothing (a snapshot of another layout
     * would be a caller's bug): everything above the last bound is +Inf. */
    for (size_t i = 0; rc == SIO_OK && i < l->n; i++) {
        cum += s->bucket[i];
        rc = put(out, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", name, labels,
                 sep, l->le[i], cum);
    }
    for (size_t i = l->n; i < SIO_HIST_BUCKETS_MAX; i++)
        cum += s->bucket[i];
    if (rc == SIO_OK)
        rc = put(out, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels,
                 sep, cum);
    if (rc == SIO_OK) {
        if (labels[0])
            rc = put(out,
                     "%s_sum{%s} %" PRIu64 ".%09" PRIu64 "\n"
                     "%s_count{%s} %" PRIu64 "\n",
                     name, labels, s->sum_ns / 1000000000u,
                     s->sum_ns % 1000000000u, name, labels, cum);
        else
            rc = put(out,
                     "%s_sum %" PRIu64 ".%09" PRIu64 "\n%s_count %" PRIu64
                     "\n",
                     name, s->sum_ns / 1000000000u, s->sum_ns % 1000000000u,
                     name, cum);
    }
    return rc;
}
