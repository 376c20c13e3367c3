/*
 * http.h — the HTTP front of shardcastd on libmicrohttpd: the daemon,
 * routing, auth, limits, error replies, status/metrics endpoints, drain,
 * and one log line per request.
 *
 * Routes (auth: P public, C consumer token if one is set, A admin token):
 *   GET|HEAD /healthz                         P  200 "ok" while alive
 *   GET|HEAD /readyz                          P  200 once every job's source
 *                                                is resolved; 503 + reason
 *   GET|HEAD /metrics                         P  Prometheus text format
 *   GET /v1/jobs, GET /v1/jobs/{job}          C  status JSON
 *   PUT /v1/jobs/{job} (JSON job spec)        A  201 created, 200 replaced
 *   DELETE /v1/jobs/{job}                     A  204
 *   GET /v1/settings                          A  settings in effect
 *   GET /v1/topology[?world=W]                C  scale-out mapping
 *   GET /v1/jobs/{job}/epochs/{E}/stream?rank=R&world=W[&start=S]
 *       [&global_start=G][&format=tar|frames][&fields=a,b]   C
 * Errors before streaming are text/plain "error: <reason>\n" with 4xx/5xx;
 * 401 carries WWW-Authenticate, 429 and 503 Retry-After. Requests other
 * than streams are rate limited per client address (--rate-limit).
 *
 * Threading: MHD runs one epoll loop per worker thread (--threads); every
 * callback here runs on one of them and never blocks: streams are
 * suspended when they have nothing to send (stream.h), and whatever can
 * block (closing cursors and feeds, resolving sources) runs on the jobs
 * threads (jobs.h). sc_server_start/drain/stop run on the main thread.
 * srv->mu serialises opening a stream against the start of a drain, so a
 * drain's cut reaches every stream. Lock order: srv->mu -> jobs (jobs.h).
 */
#ifndef SC_HTTP_H
#define SC_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "jobs.h"
#include "settings.h"
#include "shardio.h"

typedef struct sc_server sc_server;

/*
 * Start serving the jobs of `jobs` on cfg->listen:cfg->port. cfg, io and
 * jobs must outlive the server. On failure msg[msg_len] says why.
 */
sio_code sc_server_start(const sc_config *cfg, sio_io *io, sc_jobs *jobs,
                         sc_server **out, char *msg, size_t msg_len);

/* The bound port (the real one when cfg->port was 0). */
uint16_t sc_server_port(const sc_server *srv);

/*
 * Drain (SIGTERM): stop accepting connections, refuse new streams and job
 * changes (503), let running streams go on for grace_s seconds, then cut
 * the remaining ones with the error trailer and give them a few seconds to
 * send it. Returns the number of streams that were cut.
 */
size_t sc_server_drain(sc_server *srv, uint32_t grace_s);

/* Stop: cut whatever streams remain, close every connection, free the
 * server. NULL is fine. */
void sc_server_stop(sc_server *srv);

#endif /* SC_HTTP_H */
