/*
 * metrics.h — shardcastd's histograms and process metrics for /metrics
 * (the counters stay with their owners: http.c, jobs.c, log.c; the job
 * series are written by status.c). Every family goes through the one
 * Prometheus writer, prom.h.
 *
 *   shardcast_http_request_duration_seconds{route,method}  (histogram,
 *     layout sio_hist_duration) from the request line's arrival to the
 *     completion of the response: for an ordinary request its last byte
 *     handed to the socket; for a stream (route "stream" or "sample") the
 *     end of the whole stream, END or error trailer included, or the
 *     moment the client went away. method: GET, HEAD, PUT, DELETE, other.
 *   shardcast_stream_first_sample_seconds{route}  (histogram, layout
 *     sio_hist_latency) from the request line's arrival to the first
 *     sample of the response encoded and queued for sending (route
 *     "stream" or "sample"); a stream that ends before its first sample is
 *     not counted.
 *   shardcast_fetch_*{backend} and shardcast_fetch_latency_seconds
 *     {backend,op}: the object store (sio_store_stats, shardio.h).
 *   process_*: as the Prometheus client libraries export them, from
 *     /proc/self.
 *
 * Threading: observations are lock-free (sio_hist) and may come from any
 * thread; the writers read snapshots. The histograms are process-wide
 * (one server per process).
 */
#ifndef SC_METRICS_H
#define SC_METRICS_H

#include <time.h>

#include "prom.h"
#include "request.h"
#include "shardio.h"
#include "shardio_wire.h"

/* A request completed (route as parsed, method as received, "" when none;
 * t0 its arrival on CLOCK_MONOTONIC). */
void sc_metrics_http_done(sc_route route, const char *method,
                          const struct timespec *t0);

/* The first sample of a stream response was queued (route
 * SC_ROUTE_STREAM or SC_ROUTE_SAMPLE; t0 the request's arrival). */
void sc_metrics_first_sample(sc_route route, const struct timespec *t0);

/* Write the HTTP histograms (routes labelled by sc_route_metric). */
void sc_metrics_write_http(sc_prom *p);

/* Write process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds and
 * process_start_time_seconds (families whose source cannot be read are
 * left out). */
void sc_metrics_write_process(sc_prom *p);

/* Write the object-store counters (by backend) and latency histograms
 * (by backend and operation) of io. */
void sc_metrics_write_store(sio_io *io, sc_prom *p);

#endif /* SC_METRICS_H */
