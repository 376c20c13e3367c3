/*
 * http.h — the HTTP front of shardcastd on libmicrohttpd: the daemon,
 * dispatch through the route table, auth, limits, error replies, the
 * endpoints' handlers, building streams, drain, and one log line per
 * request.
 *
 * The routes, their methods, roles (public, consumer token if one is
 * set, admin token), rate limits, metric labels and handlers are the route
 * table, routes.h. What they answer:
 *   /healthz                  200 "ok" while alive
 *   /readyz                   200 once every job's source is resolved;
 *                             503 + reason
 *   /metrics                  Prometheus text format (prom.h)
 *   GET /v1/jobs[/{job}]      status JSON; PUT /v1/jobs/{job} (JSON job
 *                             spec) 201 created, 200 replaced; DELETE 204
 *   /v1/settings              settings in effect
 *   /v1/topology[?world=W]    scale-out mapping
 *   /v1/jobs/{job}/epochs/{E}/stream?rank=R&world=W[&start=S]
 *       [&global_start=G][&format=tar|frames][&fields=a,b]   a stream
 *   /v1/jobs/{job}/samples/{i}[?format=][&fields=]  one sample
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
