/*
 * metrics.c — HTTP and first-sample histograms, object-store series and
 * process_* metrics (contract in metrics.h).
 *
 * Threading: the histograms are zero-initialised process globals updated
 * with relaxed atomics (sio_hist); nothing here takes a lock. The writers
 * run on the MHD thread answering /metrics and write through sc_prom
 * (prom.h) like every other family.
 */
#include "metrics.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define NROUTES SC_ROUTE_COUNT

enum { M_GET, M_HEAD, M_PUT, M_DELETE, M_OTHER, NMETHODS };
static const char *const method_names[NMETHODS] = {"GET", "HEAD", "PUT",
                                                   "DELETE", "other"};

static sio_hist http_hist[NROUTES][NMETHODS];
/* [0]: SC_ROUTE_STREAM, [1]: SC_ROUTE_SAMPLE */
static sio_hist first_hist[2];

static int method_index(const char *m)
{
    if (!m)
        return M_OTHER;
    if (strcmp(m, "GET") == 0)
        return M_GET;
    if (strcmp(m, "HEAD") == 0)
        return M_HEAD;
    if (strcmp(m, "PUT") == 0)
        return M_PUT;
    if (strcmp(m, "DELETE") == 0)
        return M_DELETE;
    return M_OTHER;
}

void sc_metrics_http_done(sc_route route, const char *method,
                          const struct timespec *t0)
{
    unsigned r = (unsigned)route < NROUTES ? (unsigned)route : 0;
    sio_hist_observe(&http_hist[r][method_index(method)], &sio_hist_duration,
                     sio_hist_ns_since(t0));
}

void sc_metrics_first_sample(sc_route route, const struct timespec *t0)
{
    sio_hist_observe(&first_hist[route == SC_ROUTE_SAMPLE],
                     &sio_hist_latency, sio_hist_ns_since(t0));
}

void sc_metrics_write_http(sc_prom *p)
{
    sio_hist_snap s;

    sc_prom_family(p, "shardcast_http_request_duration_seconds", "histogram",
                   "Time from a request's arrival to its response completed "
                   "(for streams: the end of the stream), by route and "
                   "method.");
    for (size_t r = 0; r < NROUTES; r++)
        for (int m = 0; m < NMETHODS; m++) {
            sio_hist_snapshot(&http_hist[r][m], &s);
            if (sio_hist_snap_count(&s) == 0)
                continue;
            sc_prom_hist(p, "shardcast_http_request_duration_seconds",
                         SC_PROM_LABELS({"route", sc_route_metric((sc_route)r)},
                                        {"method", method_names[m]}),
                         &sio_hist_duration, &s);
        }
    sc_prom_family(p, "shardcast_stream_first_sample_seconds", "histogram",
                   "Time from a stream request's arrival to its first sample "
                   "queued for sending, by route.");
    for (int k = 0; k < 2; k++) {
        sio_hist_snapshot(&first_hist[k], &s);
        if (sio_hist_snap_count(&s) == 0)
            continue;
        sc_prom_hist(p, "shardcast_stream_first_sample_seconds",
                     SC_PROM_LABELS({"route", k ? "sample" : "stream"}),
                     &sio_hist_latency, &s);
    }
}

/* Fields of /proc/self/stat (proc(5)) that process_* needs. */
typedef struct proc_stat {
    unsigned long long utime, stime; /* clock ticks */
    unsigned long long starttime;    /* clock ticks after boot */
    unsigned long long vsize;        /* bytes */
    long long rss;                   /* pages */
} proc_stat;

static int read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0 ? 0 : -1;
}

static int read_proc_stat(proc_stat *ps)
{
    char buf[2048];
    if (read_file("/proc/self/stat", buf, sizeof buf) != 0)
        return -1;
    /* The command name (field 2) is in parentheses and may hold anything,
     * ')' included: fields resume after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    memset(ps, 0, sizeof *ps);
    for (int field = 3; field <= 24; field++) {
        while (*p == ' ')
            p++;
        if (!*p)
            return -1;
        char *end = p;
        if (field >= 4) {
            unsigned long long v = strtoull(p, &end, 10);
            if (end == p)
                return -1;
            switch (field) {
            case 14: ps->utime = v; break;
            case 15: ps->stime = v; break;
            case 22: ps->starttime = v; break;
            case 23: ps->vsize = v; break;
            case 24: ps->rss = (long long)v; break;
            default: break;
            }
        } else {
            while (*end && *end != ' ')
                end++;
        }
        p = end;
    }
    return 0;
}

/* Boot time (seconds since the epoch) from /proc/stat's btime line (read
 * line by line: the intr line before it can be long). */
static int read_btime(unsigned long long *btime)
{
    FILE *f = fopen("/proc/stat", "re");
    char *line = NULL;
    size_t cap = 0;
    int rc = -1;
    if (!f)
        return -1;
    while (getline(&line, &cap, f) > 0)
        if (strncmp(line, "btime ", 6) == 0) {
            rc = sscanf(line + 6, "%llu", btime) == 1 ? 0 : -1;
            break;
        }
    free(line);
    fclose(f);
    return rc;
}

/* Open descriptors: the entries of /proc/self/fd, less the one reading it. */
static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long n = 0;
    if (!d)
        return -1;
    int self = dirfd(d);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (atoi(e->d_name) == self)
            continue;
        n++;
    }
    closedir(d);
    return n;
}

void sc_metrics_write_process(sc_prom *p)
{
    proc_stat ps;
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    unsigned long long btime = 0;
    struct rlimit rl;
    long fds;

    if (tck <= 0)
        tck = 100;
    if (read_proc_stat(&ps) == 0) {
        sc_prom_family(p, "process_cpu_seconds_total", "counter",
                       "Total user and system CPU time spent in seconds.");
        sc_prom_f64(p, "process_cpu_seconds_total", SC_PROM_NOLABELS,
                    (double)(ps.utime + ps.stime) / (double)tck, 2);
        sc_prom_family(p, "process_virtual_memory_bytes", "gauge",
                       "Virtual memory size in bytes.");
        sc_prom_u64(p, "process_virtual_memory_bytes", SC_PROM_NOLABELS,
                    ps.vsize);
        sc_prom_family(p, "process_resident_memory_bytes", "gauge",
                       "Resident memory size in bytes.");
        sc_prom_i64(p, "process_resident_memory_bytes", SC_PROM_NOLABELS,
                    ps.rss * (long long)(page > 0 ? page : 4096));
        if (read_btime(&btime) == 0) {
            sc_prom_family(p, "process_start_time_seconds", "gauge",
                           "Start time of the process since unix epoch in "
                           "seconds.");
            sc_prom_f64(p, "process_start_time_seconds", SC_PROM_NOLABELS,
                        (double)btime + (double)ps.starttime / (double)tck,
                        2);
        }
    }
    if ((fds = count_fds()) >= 0) {
        sc_prom_family(p, "process_open_fds", "gauge",
                       "Number of open file descriptors.");
        sc_prom_i64(p, "process_open_fds", SC_PROM_NOLABELS, fds);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        sc_prom_family(p, "process_max_fds", "gauge",
                       "Maximum number of open file descriptors.");
        sc_prom_u64(p, "process_max_fds", SC_PROM_NOLABELS,
                    rl.rlim_cur == RLIM_INFINITY ? (uint64_t)INT64_MAX
                                                 : (uint64_t)rl.rlim_cur);
    }
}

void sc_metrics_write_store(sio_io *io, sc_prom *p)
{
    sio_store_stats *st = malloc(sizeof *st); /* ~4 KiB: not on the stack */

    if (!st) {
        if (p->rc == SIO_OK)
            p->rc = SIO_ERR_NOMEM;
        return;
    }
    sio_io_get_store_stats(io, st);
#define BY_BACKEND(name, type, help, field)                                \
    do {                                                                   \
        sc_prom_family(p, name, type, help);                               \
        for (int b = 0; b < SIO_STORE_BACKENDS; b++)                       \
            sc_prom_u64(p, name,                                           \
                        SC_PROM_LABELS({"backend",                         \
                                        sio_store_backend_name(            \
                                            (sio_store_backend)b)}),       \
                        (uint64_t)st->backend[b].field);                   \
    } while (0)
    BY_BACKEND("shardcast_fetch_requests_total", "counter",
               "Object-store requests started (attempts), by backend.",
               requests);
    BY_BACKEND("shardcast_fetch_retries_total", "counter",
               "Object-store attempts that were retries, by backend.",
               retries);
    BY_BACKEND("shardcast_fetch_throttles_total", "counter",
               "Object-store throttling answers (503, 429, SlowDown), by "
               "backend.",
               throttles);
    BY_BACKEND("shardcast_fetch_errors_total", "counter",
               "Object-store requests that failed for good, by backend.",
               errors);
    BY_BACKEND("shardcast_fetch_bytes_total", "counter",
               "Object-store response body bytes received (files: bytes "
               "read), by backend.",
               bytes);
    BY_BACKEND("shardcast_fetch_inflight", "gauge",
               "Object-store requests in flight, by backend.", inflight);
#undef BY_BACKEND
    sc_prom_family(p, "shardcast_fetch_latency_seconds", "histogram",
                   "Object-store request latency, by backend and operation: "
                   "start of an attempt to the first byte of its answer "
                   "(files: the open, stat or listing calls).");
    for (int b = 0; b < SIO_STORE_BACKENDS; b++)
        for (int op = 0; op < SIO_STORE_OPS; op++) {
            const sio_hist_snap *s = &st->latency[b][op];
            if (sio_hist_snap_count(s) == 0)
                continue;
            sc_prom_hist(
                p, "shardcast_fetch_latency_seconds",
                SC_PROM_LABELS(
                    {"backend", sio_store_backend_name((sio_store_backend)b)},
                    {"op", sio_store_op_name((sio_store_op)op)}),
                &sio_hist_latency, s);
        }
    free(st);
}
