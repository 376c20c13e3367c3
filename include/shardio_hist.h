/*
 * shardio_hist.h — fixed-bucket histograms of durations, exported in the
 * Prometheus text format (`<name>_bucket{le="..."}` cumulative up to
 * `+Inf`, `<name>_sum` in seconds, `<name>_count`).
 *
 * Two layouts of upper bounds, in seconds:
 *   sio_hist_latency:  0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25
 *                      0.5 1 2.5 5 10 30 60
 *   sio_hist_duration: the same, then 300 900 3600 (HTTP requests, which
 *                      include streams lasting a whole epoch)
 *
 * A sio_hist is for hot paths shared by threads: an observation is one
 * relaxed atomic add on its bucket and one on the sum (nanoseconds), no
 * lock, no allocation; a zeroed sio_hist is empty. Buckets are stored
 * non-cumulative and cumulated when written, so a snapshot taken while
 * others observe is always monotone, and its count is its +Inf bucket.
 * A sio_hist_snap is the plain copy (also usable on its own under a lock
 * that its owner already holds).
 */
#ifndef SHARDIO_HIST_H
#define SHARDIO_HIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Upper bounds (excluding +Inf) of the largest layout, plus +Inf. */
#define SIO_HIST_BUCKETS_MAX 20u

typedef struct sio_hist_layout {
    size_t n;               /* finite upper bounds */
    const uint64_t *le_ns;  /* ascending, in nanoseconds */
    const char *const *le;  /* the same as text for le="..." */
} sio_hist_layout;

extern const sio_hist_layout sio_hist_latency;
extern const sio_hist_layout sio_hist_duration;

typedef struct sio_hist_snap {
    uint64_t bucket[SIO_HIST_BUCKETS_MAX]; /* non-cumulative; [n]: +Inf */
    uint64_t sum_ns;
} sio_hist_snap;

#ifndef __cplusplus
#include <stdatomic.h>
typedef struct sio_hist {
    _Atomic uint64_t bucket[SIO_HIST_BUCKETS_MAX];
    _Atomic uint64_t sum_ns;
} sio_hist;

/* Record one duration (thread-safe, lock-free). */
void sio_hist_observe(sio_hist *h, const sio_hist_layout *l, uint64_t ns);
/* Copy the counts (thread-safe). */
void sio_hist_snapshot(const sio_hist *h, sio_hist_snap *out);
#endif

/* Record one duration into a plain snapshot (caller's synchronisation). */
void sio_hist_snap_observe(sio_hist_snap *s, const sio_hist_layout *l,
                           uint64_t ns);
/* a += b. */
void sio_hist_snap_add(sio_hist_snap *a, const sio_hist_snap *b);
/* Observations in s (its +Inf bucket). */
uint64_t sio_hist_snap_count(const sio_hist_snap *s);

/* Nanoseconds since *t0 on CLOCK_MONOTONIC (0 if the clock went back). */
struct timespec;
uint64_t sio_hist_ns_since(const struct timespec *t0);

/*
 * Append one histogram series to out (a sio_wbuf, shardio_wire.h):
 * `name_bucket{labels,le="..."}` for every bound and +Inf, `name_sum`,
 * `name_count`. labels is "" or `a="x",b="y"` (already escaped). The
 * family's # HELP / # TYPE lines are the caller's.
 */
struct sio_wbuf;
int sio_hist_write(struct sio_wbuf *out, const char *name, const char *labels,
                   const sio_hist_layout *l, const sio_hist_snap *s);

#ifdef __cplusplus
}
#endif
#endif /* SHARDIO_HIST_H */
