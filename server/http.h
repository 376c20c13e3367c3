/*
 * http.h — the HTTP front of shardcastd on libmicrohttpd: the daemon,
 * routing, request limits, error replies, one log line per request.
 *
 * Routes: GET|HEAD /healthz -> 200 "ok\n"; GET
 * /v1/jobs/{job}/epochs/{epoch}/stream -> the consumer's share as a tar
 * stream (stream.h). Errors before streaming are text/plain
 * "error: <reason>\n" with 4xx/5xx.
 *
 * Threading: MHD runs an internal epoll (or auto-selected) event loop on a
 * small thread pool; every callback here runs on one of those threads.
 * sc_server_start/stop run on the main thread. The server's registry of
 * live streams is guarded by its own mutex (lock order in stream.h).
 */
#ifndef SC_HTTP_H
#define SC_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "settings.h"
#include "shardio.h"

typedef struct sc_server sc_server;

/*
 * Start serving cfg->job on cfg->listen:cfg->port. cfg, io and list must
 * outlive the server. On failure msg[msg_len] says why.
 */
sio_code sc_server_start(const sc_config *cfg, sio_io *io,
                         const sio_shardlist *list, sc_server **out,
                         char *msg, size_t msg_len);

/* The bound port (the real one when cfg->port was 0). */
uint16_t sc_server_port(const sc_server *srv);

/* Stop accepting, cancel every stream, let MHD finish every connection,
 * join every producer, free the server. NULL is fine. */
void sc_server_stop(sc_server *srv);

#endif /* SC_HTTP_H */
