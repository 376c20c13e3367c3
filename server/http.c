/*
 * http.c — libmicrohttpd daemon, dispatch, auth, rate limits, bodies,
 * replies, the route handlers (status, metrics, jobs, streams), drain and
 * the per-request log line (contract in http.h).
 *
 * Request lifecycle: MHD's URI-log callback allocates a req_ctx holding a
 * bounded copy of the raw request target (before MHD unescapes it) and a
 * request id; the access handler parses it (request.c, against the route
 * table of routes.h), checks the route's rate limit and role, and calls
 * its handler; a PUT body is collected (bounded by SC_JOBSPEC_BODY_MAX)
 * before the answer. A stream request gets a binding to its job
 * (sc_jobs_stream_begin), a stream built here (stream.c), the epoch's feed
 * and a cursor (sc_jobs_open_stream), and an MHD callback response read by
 * sc_stream_reader. The request-completed callback marks the stream gone,
 * hands its binding to the jobs manager, logs one line and frees the
 * context: the only place a req_ctx is freed.
 *
 * Threading: callbacks run on MHD's worker threads; request counters are
 * atomics; srv->mu orders stream opening against the drain (http.h).
 * Nothing here blocks an MHD thread.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "peers.h"
#include "metrics.h"
#include "request.h"
#include "stream.h"

/* Body chunks asked of the stream reader; MHD caps it further by what is
 * left of the connection's memory pool. */
#define STREAM_BLOCK (32u * 1024u)
/* Bytes of the request path kept for the log line. */
#define LOG_PATH_MAX 256u
#define REASON_MAX 512u
/* After the drain's cut, how long streams get to send their trailer. */
#define CUT_WAIT_MS 5000u
/* The retry advice in the drain's error trailer: this process exits
 * within CUT_WAIT_MS of the cut, and its replacement (a restart on the same
 * address, or another replica behind the Service) needs a moment to listen
 * and resolve its jobs; coming back earlier only meets refused
 * connections, later wastes training time. Clients back off further on
 * their own while nothing listens. */
#define DRAIN_RETRY_AFTER_MS 2000u
/* Largest /metrics body. */
#define METRICS_MAX (4u << 20)

/* Status codes counted per route in metrics (the last slot: any other). */
static const unsigned counted_codes[] = {200, 201, 204, 400, 401, 403, 404,
                                         405, 409, 413, 414, 422, 429, 500, 503,
                                         0};
#define NCODES (sizeof counted_codes / sizeof counted_codes[0])
#define NROUTES SC_ROUTE_COUNT

typedef struct req_ctx {
    sc_server *srv;
    char id[40];
    char method[16];
    struct timespec t0;
    char *target;        /* raw request target, NUL-terminated */
    size_t target_len;   /* its full length (may exceed what was kept) */
    unsigned status;     /* status answered, 0 before */
    uint64_t bytes;      /* body bytes of a non-stream answer */
    int in_body;         /* collecting a PUT body */
    int headers_seen;    /* a GET or HEAD: the first call came */
    int body_too_large;
    sio_wbuf body;
    sc_stream *stream;
    sc_binding *binding;
    sc_request req;      /* parsed request */
    /* A stream whose epoch's plan is being built: its connection is
     * suspended on srv->waiters until the planner's waker resumes it, and
     * the access handler then opens the stream again. */
    struct MHD_Connection *conn;
    int plan_wait;       /* opened again when the handler is called */
    int on_waiters;      /* linked on srv->waiters (srv->wait_mu) */
    struct req_ctx *wait_prev, *wait_next;
} req_ctx;

struct sc_server {
    const sc_config *cfg;
    sio_io *io;
    sc_jobs *jobs;
    sc_auth *auth;
    sc_ratelimit *rl;
    sc_ratelimit *srl;     /* stream opens per address (--stream-rate-limit) */
    sc_connlimit *cl;      /* connections per address */
    sc_peers *peers;       /* the replica set (--peers), instance id */
    struct MHD_Daemon *d;
    /* The listening socket is ours, not libmicrohttpd's: the acceptor
     * thread hands each connection over with MHD_add_connection. Its
     * MHD_quiesce_daemon races its own epoll workers over removing the
     * listening socket from their epoll sets and aborts the process when
     * it loses (libmicrohttpd 0.9.75 "Failed to remove listen FD from
     * epoll set", seen on SIGTERM). Draining stops the acceptor and
     * closes the socket: new connections are refused at once. */
    int lsock;        /* -1 once closed */
    int wake[2];      /* the acceptor's stop pipe (-1: none) */
    pthread_t acceptor;
    int acceptor_on;  /* started, not joined yet */
    uint16_t port;
    uint64_t boot;    /* makes request ids unique across restarts */
    atomic_uint_fast64_t next_id;
    pthread_mutex_t mu;
    int draining;     /* guarded by mu; read unlocked via the atomic copy */
    atomic_int draining_flag;
    atomic_uint_fast64_t requests[NROUTES][NCODES];
    atomic_uint_fast64_t rate_limited;
    atomic_uint_fast64_t stream_rate_limited;
    atomic_uint_fast64_t conn_refused_ip;  /* per-address limit bit */
    atomic_uint_fast64_t timeouts;         /* requests ended by a timeout */
    atomic_long connections; /* open, counted by notify_connection */
    /* Streams waiting for an epoch's plan (answer_stream). wait_mu is
     * taken after the jobs' locks are released, and under the planner's
     * leaf lock by the waker: it is the last lock before MHD's. */
    pthread_mutex_t wait_mu;
    req_ctx *waiters;             /* (wait_mu) */
    int waiters_closed;           /* no more suspensions (wait_mu) */
    atomic_uint_fast64_t plan_gen; /* builds ended (bumped under wait_mu) */
};

static void mhd_log(void *cls, const char *fmt, va_list ap)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 0)))
#endif
    ;

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512], q[600];
    (void)cls;
    if (SIO_LOG_WARN > sc_log_level())
        return;
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
        len--;
    sc_log_(SIO_LOG_WARN, "src=mhd msg=%s", sc_log_quote(q, sizeof q, msg, len));
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 +
           (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static void count(sc_server *srv, sc_route route, unsigned status)
{
    size_t c = NCODES - 1;
    for (size_t i = 0; i + 1 < NCODES; i++)
        if (counted_codes[i] == status)
            c = i;
    atomic_fetch_add(&srv->requests[route < NROUTES ? route : 0][c], 1);
}

/* MHD_OPTION_URI_LOG_CALLBACK: the first look at a request. Its return
 * value becomes the request's context. */
static void *uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
{
    sc_server *srv = cls;
    req_ctx *ctx = calloc(1, sizeof *ctx);
    (void)conn;
    if (!ctx)
        return NULL;
    ctx->srv = srv;
    clock_gettime(CLOCK_MONOTONIC, &ctx->t0);
    uint64_t n = atomic_fetch_add(&srv->next_id, 1) + 1;
    snprintf(ctx->id, sizeof ctx->id, "%08" PRIx64 "-%" PRIu64, srv->boot, n);
    /* Keep at most max_url + 1 bytes: enough to parse any acceptable
     * target and to know that a longer one is too long. */
    size_t len = strlen(uri);
    size_t keep = len <= srv->cfg->max_url ? len : srv->cfg->max_url + 1;
    ctx->target = malloc(keep + 1);
    if (!ctx->target) {
        free(ctx);
        return NULL;
    }
    memcpy(ctx->target, uri, keep);
    ctx->target[keep] = '\0';
    ctx->target_len = len;
    sio_wbuf_init(&ctx->body, SC_JOBSPEC_BODY_MAX);
    return ctx;
}

/* Queue a response built from `body` (copied, or taken when `take`). */
static enum MHD_Result reply_body(req_ctx *ctx, struct MHD_Connection *conn,
                                  unsigned status, const char *ctype,
                                  char *body, size_t len, int take,
                                  unsigned retry_after)
{
    enum MHD_Result ret;
    char ra[16];
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, take ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
    if (!r) {
        if (take)
            free(body);
        return MHD_NO;
    }
    if (ctype)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (ctx) {
        MHD_add_response_header(r, "X-Request-Id", ctx->id);
        if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
            MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW,
                                    sc_route_allow(ctx->req.route));
    }
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"shardcast\"");
    if (retry_after) {
        snprintf(ra, sizeof ra, "%u", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    if (ctx) {
        ctx->status = status;
        ctx->bytes = len;
        count(ctx->srv, ctx->req.route, status);
    }
    return ret;
}

static enum MHD_Result reply_text(req_ctx *ctx, struct MHD_Connection *conn,
                                  unsigned status, const char *text)
{
    return reply_body(ctx, conn, status, "text/plain; charset=utf-8",
                      (char *)(uintptr_t)text, strlen(text), 0, 0);
}

static enum MHD_Result reply_error_ra(req_ctx *ctx,
                                      struct MHD_Connection *conn,
                                      unsigned status, const char *reason,
                                      unsigned retry_after)
{
    char body[REASON_MAX + 16];
    snprintf(body, sizeof body, "error: %s\n", reason);
    return reply_body(ctx, conn, status, "text/plain; charset=utf-8", body,
                      strlen(body), 0, retry_after);
}

static enum MHD_Result reply_error(req_ctx *ctx, struct MHD_Connection *conn,
                                   unsigned status, const char *reason)
{
    return reply_error_ra(ctx, conn, status, reason, 0);
}

/* A JSON body (taken); NULL means out of memory. */
static enum MHD_Result reply_json(req_ctx *ctx, struct MHD_Connection *conn,
                                  unsigned status, char *json)
{
    if (!json)
        return reply_error(ctx, conn, 503, "out of memory");
    return reply_body(ctx, conn, status, "application/json", json,
                      strlen(json), 1, 0);
}

/* Build the stream of a begun binding and open it (srv->mu held).
 * Returns 200 with ctx->stream and ctx->binding set, or the status. */
static unsigned open_stream(req_ctx *ctx, struct MHD_Connection *conn,
                            unsigned *retry_after, char *reason,
                            size_t reason_len)
{
    sc_server *srv = ctx->srv;
    sc_stream_params p;
    sc_stream_fields *f = malloc(sizeof *f); /* ~4 KiB: not on the stack */
    sc_binding *b = NULL;
    sc_stream *s = NULL;
    sio_error err = {SIO_OK, ""};
    unsigned status;

    if (!f) {
        snprintf(reason, reason_len, "out of memory");
        return 503;
    }
    status = sc_jobs_stream_begin(srv->jobs, &ctx->req, &p, f, &b,
                                  retry_after, reason, reason_len);
    if (status != 200)
        goto out;
    p.id = ctx->id;
    p.conn = conn;
    p.heartbeat_ms = srv->cfg->heartbeat_ms;
    sio_code rc = sc_stream_create(&p, &s, &err);
    if (rc) {
        snprintf(reason, reason_len, "%s", err.msg);
        sc_jobs_stream_abort(srv->jobs, b);
        status = rc == SIO_ERR_INVALID ? 400 : 503;
        goto out;
    }
    status = sc_jobs_open_stream(srv->jobs, b, &ctx->req, s, retry_after,
                                 reason, reason_len);
    if (status != 200) { /* SC_JOBS_PLAN_PENDING too: opened again later */
        sc_stream_destroy(s);
        goto out;
    }
    ctx->stream = s;
    ctx->binding = b;
out:
    free(f);
    return status;
}

static enum MHD_Result answer_stream(req_ctx *ctx, struct MHD_Connection *conn)
{
    sc_server *srv = ctx->srv;
    char reason[REASON_MAX];
    unsigned retry_after = 0, status;

    for (;;) {
        /* Builds that end from here on wake this request. */
        uint64_t gen = atomic_load(&srv->plan_gen);
        /* Under srv->mu: a drain that starts after this check cuts the
         * stream bound here (http.h). */
        pthread_mutex_lock(&srv->mu);
        if (srv->draining) {
            pthread_mutex_unlock(&srv->mu);
            return reply_error_ra(ctx, conn, 503, "server shutting down", 5);
        }
        status = open_stream(ctx, conn, &retry_after, reason, sizeof reason);
        pthread_mutex_unlock(&srv->mu);
        if (status != SC_JOBS_PLAN_PENDING)
            break;
        /* The epoch's plan is being built on the planner thread: this
         * connection waits off the HTTP thread, suspended, and the handler
         * runs again once a build ended (plan_waker). */
        pthread_mutex_lock(&srv->wait_mu);
        if (srv->waiters_closed) {
            pthread_mutex_unlock(&srv->wait_mu);
            return reply_error_ra(ctx, conn, 503, "server shutting down", 5);
        }
        if (atomic_load(&srv->plan_gen) != gen) {
            pthread_mutex_unlock(&srv->wait_mu);
            continue; /* a build ended meanwhile: open again */
        }
        ctx->conn = conn;
        ctx->plan_wait = 1;
        ctx->on_waiters = 1;
        ctx->wait_prev = NULL;
        ctx->wait_next = srv->waiters;
        if (srv->waiters)
            srv->waiters->wait_prev = ctx;
        srv->waiters = ctx;
        MHD_suspend_connection(conn);
        pthread_mutex_unlock(&srv->wait_mu);
        return MHD_YES;
    }
    if (status != 200) {
        SC_LOG(SIO_LOG_INFO, "event=stream_refused id=%s status=%u", ctx->id,
               status);
        return reply_error_ra(ctx, conn, status, reason, retry_after);
    }
    sc_stream_set_arrival(ctx->stream, &ctx->t0, ctx->req.route);
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, STREAM_BLOCK, sc_stream_reader, ctx->stream, NULL);
    if (!r) {
        sc_stream_cut(ctx->stream, "out of memory");
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            ctx->req.format == SC_FORMAT_FRAMES
                                ? SIO_FRAMES_CONTENT_TYPE
                                : "application/x-tar");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Request-Id", ctx->id);
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    /* A streaming connection gets the idle timeout; until now it had the
     * header timeout of connections that have not started a stream. */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned int)srv->cfg->idle_timeout);
    ctx->status = MHD_HTTP_OK;
    count(srv, ctx->req.route, 200);
    SC_LOG(SIO_LOG_DEBUG,
           "event=stream_start id=%s job=%s epoch=%" PRIu64 " rank=%" PRIu32
           " world=%" PRIu32 " start=%" PRIu64 " global_start=%" PRIu64
           " format=%s",
           ctx->id, ctx->req.job, ctx->req.epoch, ctx->req.rank,
           ctx->req.world, ctx->req.start, ctx->req.global_start,
           ctx->req.format == SC_FORMAT_FRAMES ? "frames" : "tar");
    return ret;
}

static enum MHD_Result answer_topology(req_ctx *ctx,
                                       struct MHD_Connection *conn)
{
    const sc_config *cfg = ctx->srv->cfg;
    uint32_t R = cfg->replicas ? cfg->replicas : 1, J = cfg->replica;
    /*
     * Scale-out mapping (the rule a client or an operator applies): with R
     * replicas each reading the shards at permuted positions p with
     * p mod R == J, consumer c of a world of W consumers is served by
     * replica c mod R, as local rank c div R of a local world of
     * |{c' < W : c' mod R == J}| = (W - J + R - 1) div R consumers.
     */
    json_t *o = json_pack(
        "{s:I, s:I, s:s}", "replica", (json_int_t)J, "replicas",
        (json_int_t)R, "rule",
        "consumer c of world W is served by replica c mod R as local rank "
        "c div R of local world |{c' < W : c' mod R == J}| = "
        "(W - J + R - 1) div R; replica J reads the shards at permuted "
        "positions p with p mod R == J");
    if (o) {
        json_object_set_new(o, "instance",
                            json_string(sc_peers_instance(ctx->srv->peers)));
        json_object_set_new(o, "jobs", sc_jobs_fingerprints(ctx->srv->jobs));
        json_t *pj = sc_peers_json(ctx->srv->peers);
        if (pj)
            json_object_set_new(o, "peers", pj);
    }
    if (o && ctx->req.job[0]) {
        /* What fixes the order of this job's epochs over the set: the
         * clients compare it across the replicas they use. */
        sc_job_identity id;
        char why[REASON_MAX];
        unsigned st = sc_jobs_identity(ctx->srv->jobs, ctx->req.job, &id, why,
                                       sizeof why);
        if (st != 200) {
            json_decref(o);
            if (st == 503)
                return reply_error_ra(ctx, conn, 503, why, 2);
            return reply_error(ctx, conn, st, why);
        }
        json_t *order = json_pack(
            "{s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:I, s:I, "
            "s:I, s:I}",
            "contract", id.contract, "shards", id.shards, "nshards",
            (json_int_t)id.nshards, "seed", (json_int_t)id.seed, "interleave",
            (json_int_t)id.interleave, "shuffle_buffer",
            (json_int_t)id.shuffle_buffer, "buffer_bytes",
            (json_int_t)id.buffer_bytes, "partition", id.partition,
            "on_error", id.on_error, "mix", id.mix, "epoch_size",
            (json_int_t)id.epoch_size, "sample_max",
            (json_int_t)id.sample_max, "field_max", (json_int_t)id.field_max,
            "replicas", (json_int_t)id.replicas);
        json_object_set_new(o, "job",
                            json_pack("{s:s, s:s, s:o}", "name",
                                      ctx->req.job, "fingerprint",
                                      id.fingerprint, "order", order));
    }
    if (o && ctx->req.world) {
        uint64_t W = ctx->req.world;
        uint64_t local = W > J ? (W - J + R - 1) / R : 0;
        json_object_set_new(o, "world", json_integer((json_int_t)W));
        json_object_set_new(o, "local_world", json_integer((json_int_t)local));
        json_object_set_new(o, "first_consumer", json_integer((json_int_t)J));
        json_object_set_new(o, "consumer_stride", json_integer((json_int_t)R));
    }
    char *text = o ? json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return reply_json(ctx, conn, 200, text);
}

static int detail_allowed(sc_server *srv, struct MHD_Connection *conn);

static enum MHD_Result answer_metrics(req_ctx *ctx,
                                      struct MHD_Connection *conn)
{
    sc_server *srv = ctx->srv;
    sio_wbuf b;
    sc_prom p;
    sio_wbuf_init(&b, METRICS_MAX);
    sc_prom_init(&p, &b);

    sc_prom_family(&p, "shardcast_build_info", "gauge",
                   "Version of the running shardcastd.");
    sc_prom_u64(&p, "shardcast_build_info",
                SC_PROM_LABELS({"version", SIO_VERSION_STRING}), 1);
    sc_prom_family(&p, "shardcast_http_requests_total", "counter",
                   "HTTP requests answered, by route and status.");
    for (size_t r = 0; r < NROUTES; r++)
        for (size_t c = 0; c < NCODES; c++) {
            uint64_t v = atomic_load(&srv->requests[r][c]);
            char code[16] = "other";
            if (!v)
                continue;
            if (counted_codes[c])
                snprintf(code, sizeof code, "%u", counted_codes[c]);
            sc_prom_u64(&p, "shardcast_http_requests_total",
                        SC_PROM_LABELS({"route", sc_route_metric((sc_route)r)},
                                       {"code", code}),
                        v);
        }
    sc_prom_family(&p, "shardcast_rate_limited_total", "counter",
                   "Requests refused by the per-address rate limit.");
    sc_prom_u64(&p, "shardcast_rate_limited_total", SC_PROM_NOLABELS,
                atomic_load(&srv->rate_limited));
    sc_prom_family(&p, "shardcast_http_connections", "gauge",
                   "Open HTTP connections.");
    sc_prom_i64(&p, "shardcast_http_connections", SC_PROM_NOLABELS,
                atomic_load(&srv->connections));
    sc_prom_family(&p, "shardcast_draining", "gauge",
                   "1 while the server drains (SIGTERM).");
    sc_prom_i64(&p, "shardcast_draining", SC_PROM_NOLABELS,
                atomic_load(&srv->draining_flag));
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    sc_prom_family(&p, "shardcast_resident_memory_bytes", "gauge",
                   "Resident set size of the server.");
    sc_prom_i64(&p, "shardcast_resident_memory_bytes", SC_PROM_NOLABELS,
                (int64_t)rss * sysconf(_SC_PAGESIZE));
    sc_prom_family(&p, "shardcast_connections_refused_total", "counter",
                   "Connections refused by a bound.");
    sc_prom_u64(&p, "shardcast_connections_refused_total",
                SC_PROM_LABELS({"bound", "per_ip"}),
                atomic_load(&srv->conn_refused_ip));
    sc_prom_family(&p, "shardcast_requests_timed_out_total", "counter",
                   "Requests ended by the header or idle timeout.");
    sc_prom_u64(&p, "shardcast_requests_timed_out_total", SC_PROM_NOLABELS,
                atomic_load(&srv->timeouts));
    sc_prom_family(&p, "shardcast_stream_opens_rate_limited_total",
                   "counter",
                   "Stream opens refused with 429 by the per-address stream "
                   "rate limit.");
    sc_prom_u64(&p, "shardcast_stream_opens_rate_limited_total",
                SC_PROM_NOLABELS, atomic_load(&srv->stream_rate_limited));
    sc_prom_family(&p, "shardcast_log_dropped_total", "counter",
                   "Log lines dropped because the log queue was full.");
    sc_prom_u64(&p, "shardcast_log_dropped_total", SC_PROM_NOLABELS,
                sc_log_dropped());
    sc_metrics_write_http(&p);
    sc_metrics_write_process(&p);
    sc_jobs_limits_metrics(srv->jobs, &p);
    /* Per-job series name the jobs: only for authorised callers. */
    if (detail_allowed(srv, conn))
        sc_jobs_metrics(srv->jobs, &p);
    sc_peers_metrics(srv->peers, &p);
    if (sc_prom_done(&p) != SIO_OK) {
        sio_wbuf_free(&b);
        return reply_error(ctx, conn, 503, "cannot build the metrics");
    }
    enum MHD_Result ret = reply_body(
        ctx, conn, 200, "text/plain; version=0.0.4; charset=utf-8",
        (char *)b.data, b.len, 0, 0);
    sio_wbuf_free(&b);
    return ret;
}

/* The PUT body is complete: parse, validate, apply. */
static enum MHD_Result answer_put(req_ctx *ctx, struct MHD_Connection *conn)
{
    sc_server *srv = ctx->srv;
    sc_jobspec spec;
    char reason[REASON_MAX];
    ctx->in_body = 0;
    if (ctx->body_too_large) {
        snprintf(reason, sizeof reason, "job spec larger than %u bytes",
                 SC_JOBSPEC_BODY_MAX);
        return reply_error(ctx, conn, 413, reason);
    }
    if (sc_jobspec_parse(ctx->body.data ? (const char *)ctx->body.data : "",
                         ctx->body.len, ctx->req.job, &spec, reason,
                         sizeof reason) != 0)
        return reply_error(ctx, conn, 400, reason);
    pthread_mutex_lock(&srv->mu);
    int draining = srv->draining;
    pthread_mutex_unlock(&srv->mu);
    if (draining) {
        sc_jobspec_free(&spec);
        return reply_error_ra(ctx, conn, 503, "server shutting down", 5);
    }
    unsigned st = sc_jobs_put(srv->jobs, &spec, reason, sizeof reason);
    sc_jobspec_free(&spec);
    if (st >= 400)
        return reply_error(ctx, conn, st, reason);
    json_t *o = json_pack("{s:s, s:s}", "job", ctx->req.job, "result", reason);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return reply_json(ctx, conn, st, text);
}

/* May the caller of a public route see details (job names, reasons)? When
 * a consumer token is set, only with it (or the admin token); otherwise
 * anyone can read the job status anyway. */
static int detail_allowed(sc_server *srv, struct MHD_Connection *conn)
{
    const char *why = "";
    return sc_auth_check(srv->auth, SC_ROLE_CONSUMER,
                         MHD_lookup_connection_value(
                             conn, MHD_HEADER_KIND,
                             MHD_HTTP_HEADER_AUTHORIZATION),
                         &why) == 0;
}

static enum MHD_Result answer_healthz(req_ctx *ctx,
                                      struct MHD_Connection *conn)
{
    return reply_text(ctx, conn, 200, "ok\n");
}

static enum MHD_Result answer_readyz(req_ctx *ctx,
                                     struct MHD_Connection *conn)
{
    sc_server *srv = ctx->srv;
    char reason[REASON_MAX];
    if (atomic_load(&srv->draining_flag))
        return reply_error(ctx, conn, 503, "draining");
    if (!sc_peers_ready(srv->peers, reason, sizeof reason))
        return reply_error(ctx, conn, 503,
                           detail_allowed(srv, conn) ? reason
                                                     : "replica conflict");
    if (!sc_jobs_ready(srv->jobs, reason, sizeof reason))
        /* Job names and their errors only to authorised callers. */
        return reply_error(ctx, conn, 503,
                           detail_allowed(srv, conn) ? reason : "not ready");
    return reply_text(ctx, conn, 200, "ready\n");
}

static enum MHD_Result answer_jobs(req_ctx *ctx, struct MHD_Connection *conn)
{
    int missing = 0;
    return reply_json(ctx, conn, 200,
                      sc_jobs_status(ctx->srv->jobs, NULL, &missing));
}

/* GET: status; DELETE: remove; PUT: read the job spec (answer_put). */
static enum MHD_Result answer_job(req_ctx *ctx, struct MHD_Connection *conn)
{
    sc_server *srv = ctx->srv;
    char reason[REASON_MAX];
    if (strcmp(ctx->method, "GET") == 0) {
        int missing = 0;
        char *text = sc_jobs_status(srv->jobs, ctx->req.job, &missing);
        if (missing)
            return reply_error(ctx, conn, 404, "unknown job");
        return reply_json(ctx, conn, 200, text);
    }
    if (strcmp(ctx->method, "DELETE") == 0) {
        unsigned st = sc_jobs_delete(srv->jobs, ctx->req.job, reason,
                                     sizeof reason);
        if (st != 204)
            return reply_error(ctx, conn, st, reason);
        return reply_body(ctx, conn, 204, NULL, (char *)"", 0, 0, 0);
    }
    /* PUT: refuse an announced oversized body before reading it. */
    const char *cl = MHD_lookup_connection_value(
        conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t n = 0;
    if (cl && sc_parse_u64(cl, UINT64_MAX, &n) == 0 &&
        n > SC_JOBSPEC_BODY_MAX) {
        snprintf(reason, sizeof reason, "job spec larger than %u bytes",
                 SC_JOBSPEC_BODY_MAX);
        return reply_error(ctx, conn, 413, reason);
    }
    ctx->in_body = 1;
    return MHD_YES;
}

static enum MHD_Result answer_settings(req_ctx *ctx,
                                       struct MHD_Connection *conn)
{
    return reply_json(ctx, conn, 200, sc_settings_json(ctx->srv->cfg));
}

static enum MHD_Result answer_not_found(req_ctx *ctx,
                                        struct MHD_Connection *conn)
{
    return reply_error(ctx, conn, MHD_HTTP_NOT_FOUND, "not found");
}

/* The HTTP side of the route table (routes.h): who may call a route, the
 * rate limit it counts against, and its handler; indexed by sc_route. */
enum { LIMIT_NONE, LIMIT_REQUESTS, LIMIT_STREAM_OPENS };
typedef struct route_http {
    sc_role role, write_role;
    int limit;
    enum MHD_Result (*handler)(req_ctx *ctx, struct MHD_Connection *conn);
} route_http;

static const route_http routes[NROUTES] = {
    [SC_ROUTE_NONE] = {SC_ROLE_PUBLIC, SC_ROLE_PUBLIC, LIMIT_REQUESTS,
                       answer_not_found},
#define ROUTE(id, pattern, methods, role, write_role, metric, params, limit, \
              handler)                                                      \
    [SC_ROUTE_##id] = {SC_ROLE_##role, SC_ROLE_##write_role, LIMIT_##limit, \
                       answer_##handler},
    SC_ROUTES(ROUTE)
#undef ROUTE
};

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *conn,
                                      const char *url, const char *method,
                                      const char *version,
                                      const char *upload_data,
                                      size_t *upload_data_size, void **req_cls)
{
    sc_server *srv = cls;
    req_ctx *ctx = *req_cls;
    char reason[REASON_MAX];
    (void)url;
    (void)version;

    if (!ctx)
        return reply_error(NULL, conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                           "out of memory");
    if (ctx->in_body) {
        if (*upload_data_size) {
            if (!ctx->body_too_large &&
                sio_wbuf_append(&ctx->body, upload_data, *upload_data_size))
                ctx->body_too_large = 1; /* the rest is read and dropped */
            *upload_data_size = 0;
            return MHD_YES;
        }
        return answer_put(ctx, conn);
    }
    /* A GET or HEAD is answered on the second call, once libmicrohttpd
     * has the whole request: a response queued on the first call makes
     * it close the connection after the response (no keep-alive). */
    if (!ctx->headers_seen && (!strcmp(method, MHD_HTTP_METHOD_GET) ||
                               !strcmp(method, MHD_HTTP_METHOD_HEAD))) {
        ctx->headers_seen = 1;
        return MHD_YES;
    }
    /* Other routes take no body: drop whatever arrives. */
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (ctx->plan_wait) {
        /* Resumed after a plan build: open the stream again (parsed,
         * authorised and counted against the limits the first time). */
        ctx->plan_wait = 0;
        return answer_stream(ctx, conn);
    }
    if (ctx->status)
        return MHD_YES;
    snprintf(ctx->method, sizeof ctx->method, "%s", method);

    /* No job lookup while parsing: whether a job exists is told only to
     * callers that pass the auth check below (404 against 401 would name
     * jobs to anyone). */
    unsigned status = sc_request_parse(method, ctx->target, ctx->target_len,
                                       srv->cfg->max_url, NULL, NULL,
                                       &ctx->req, reason, sizeof reason);
    ctx->req.arrival_us = (uint64_t)ctx->t0.tv_sec * 1000000u +
                          (uint64_t)ctx->t0.tv_nsec / 1000u;
    /* Requests are rate limited by their route's class (routes.h);
     * refused ones (route NONE) count against --rate-limit, errors
     * included. */
    const route_http *rt = &routes[ctx->req.route < NROUTES ? ctx->req.route
                                                            : SC_ROUTE_NONE];
    if (rt->limit == LIMIT_REQUESTS) {
        uint32_t ra = 0;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!sc_ratelimit_take(srv->rl, ci ? ci->client_addr : NULL,
                               sio_now_ms(), &ra)) {
            atomic_fetch_add(&srv->rate_limited, 1);
            return reply_error_ra(ctx, conn, 429, "too many requests", ra);
        }
    }
    if (status != 200)
        return reply_error(ctx, conn, status, reason);

    const char *why = "";
    int reads = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    unsigned denied = sc_auth_check(
        srv->auth, reads ? rt->role : rt->write_role,
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_AUTHORIZATION),
        &why);
    if (denied)
        return reply_error(ctx, conn, denied, why);
    /* Authorised: now the job may be looked up (a PUT may create it; a
     * sample's is looked up when it is opened). */
    if ((ctx->req.route == SC_ROUTE_STREAM ||
         (ctx->req.route == SC_ROUTE_JOB && strcmp(method, "PUT") != 0)) &&
        !sc_jobs_exists(srv->jobs, ctx->req.job))
        return reply_error(ctx, conn, 404, "unknown job");
    if (rt->limit == LIMIT_STREAM_OPENS) {
        uint32_t ra = 0;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!sc_ratelimit_take(srv->srl, ci ? ci->client_addr : NULL,
                               sio_now_ms(), &ra)) {
            atomic_fetch_add(&srv->stream_rate_limited, 1);
            return reply_error_ra(ctx, conn, 429,
                                  "too many stream opens from this address "
                                  "(--stream-rate-limit)", ra);
        }
    }
    return rt->handler(ctx, conn);
}

/* MHD_OPTION_NOTIFY_CONNECTION: the connection gauge of /metrics (srv->d
 * is not read on MHD threads: they may run before it is assigned). */
static void notify_connection(void *cls, struct MHD_Connection *conn,
                              void **socket_context,
                              enum MHD_ConnectionNotificationCode code)
{
    sc_server *srv = cls;
    (void)socket_context;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&srv->connections, 1);
        sc_connlimit_add(srv->cl, sa, +1);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        atomic_fetch_sub(&srv->connections, 1);
        sc_connlimit_add(srv->cl, sa, -1);
    }
}

/* MHD_OPTION_ACCEPT_POLICY_CALLBACK: the per-address connection limit,
 * counted when it refuses. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr,
                                     socklen_t addrlen)
{
    sc_server *srv = cls;
    (void)addrlen;
    if (sc_connlimit_allows(srv->cl, addr))
        return MHD_YES;
    atomic_fetch_add(&srv->conn_refused_ip, 1);
    return MHD_NO;
}

/* Unlink a waiting request (srv->wait_mu held). */
static void waiter_unlink(sc_server *srv, req_ctx *ctx)
{
    if (!ctx->on_waiters)
        return;
    if (ctx->wait_prev)
        ctx->wait_prev->wait_next = ctx->wait_next;
    else
        srv->waiters = ctx->wait_next;
    if (ctx->wait_next)
        ctx->wait_next->wait_prev = ctx->wait_prev;
    ctx->on_waiters = 0;
    ctx->wait_prev = ctx->wait_next = NULL;
}

/* Resume every request that waits for a plan: each opens its stream again
 * (and waits again if its epoch's plan is still being built). */
static void waiters_resume(sc_server *srv, int close)
{
    pthread_mutex_lock(&srv->wait_mu);
    atomic_fetch_add(&srv->plan_gen, 1);
    if (close)
        srv->waiters_closed = 1;
    while (srv->waiters) {
        req_ctx *ctx = srv->waiters;
        waiter_unlink(srv, ctx);
        MHD_resume_connection(ctx->conn);
    }
    pthread_mutex_unlock(&srv->wait_mu);
}

/* The planner's waker (sc_jobs_set_plan_waker): a build ended. */
static void plan_waker(void *ud)
{
    waiters_resume(ud, 0);
}

static const char *toe_name(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return "completed";
    case MHD_REQUEST_TERMINATED_WITH_ERROR:
        return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR:
        return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        return "client_abort";
    }
    return "unknown";
}

static void request_completed(void *cls, struct MHD_Connection *conn,
                              void **req_cls,
                              enum MHD_RequestTerminationCode toe)
{
    sc_server *srv = cls;
    req_ctx *ctx = *req_cls;
    char path[LOG_PATH_MAX + 16], meth[40], extra[300] = "";

    if (!ctx)
        return;
    *req_cls = NULL;
    if (ctx->req.route == SC_ROUTE_STREAM) {
        /* (on the waiter list only if it ended while suspended: a daemon
         * stop; read under the lock the waker writes it with) */
        pthread_mutex_lock(&srv->wait_mu);
        waiter_unlink(srv, ctx);
        pthread_mutex_unlock(&srv->wait_mu);
    }
    sc_metrics_http_done(ctx->req.route, ctx->method, &ctx->t0);
    if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
        atomic_fetch_add(&srv->timeouts, 1);
    else if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && ctx->binding)
        /* Kept alive after a stream: idle again until the next request. */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned int)srv->cfg->header_timeout);
    uint64_t bytes = ctx->bytes;
    if (ctx->binding) {
        sc_stream_stats st;
        sc_stream_gone(ctx->stream,
                       toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        sc_stream_get_stats(ctx->stream, &st);
        bytes = st.bytes_out;
        snprintf(extra, sizeof extra,
                 " job=%s epoch=%" PRIu64 " rank=%" PRIu32 " world=%" PRIu32
                 " start=%" PRIu64 " samples=%" PRIu64 " position=%" PRIu64
                 " outcome=%s",
                 ctx->req.job, ctx->req.epoch, ctx->req.rank, ctx->req.world,
                 ctx->req.start, st.samples, st.position,
                 sc_stream_outcome_name(st.outcome));
        /* From here the binding owns the stream. */
        sc_jobs_release(srv->jobs, ctx->binding);
        ctx->binding = NULL;
        ctx->stream = NULL;
    }
    /* The path only: a query string may carry anything. */
    const char *q = memchr(ctx->target, '?', strlen(ctx->target));
    size_t plen = q ? (size_t)(q - ctx->target) : strlen(ctx->target);
    if (plen > LOG_PATH_MAX)
        plen = LOG_PATH_MAX;
    SC_LOG(SIO_LOG_INFO,
           "event=request id=%s method=%s path=%s status=%u bytes=%" PRIu64
           " ms=%.1f end=%s%s",
           ctx->id,
           sc_log_quote(meth, sizeof meth, ctx->method, strlen(ctx->method)),
           sc_log_quote(path, sizeof path, ctx->target, plen), ctx->status,
           bytes, ms_since(&ctx->t0), toe_name(toe), extra);
    sio_wbuf_free(&ctx->body);
    free(ctx->target);
    free(ctx);
}

/* The acceptor thread: every connection on the listening socket goes to
 * libmicrohttpd (MHD_add_connection applies the accept policy and the
 * connection limit, and closes what it refuses). It ends when the stop
 * pipe is written. */
static void *acceptor_main(void *arg)
{
    sc_server *srv = arg;
    for (;;) {
        struct pollfd pf[2] = {{srv->lsock, POLLIN, 0},
                               {srv->wake[0], POLLIN, 0}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            SC_LOG(SIO_LOG_ERROR, "event=accept_failed reason=\"poll: %s\"",
                   strerror(errno));
            break;
        }
        if (pf[1].revents)
            break;
        if (!(pf[0].revents & POLLIN))
            continue;
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(srv->lsock, (struct sockaddr *)&ss, &len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED ||
                errno == EPROTO)
                continue;
            /* Out of descriptors or memory: the backlog waits a moment
             * rather than the loop spinning. */
            SC_LOG(SIO_LOG_WARN, "event=accept_failed reason=\"%s\"",
                   strerror(errno));
            poll(&pf[1], 1, 50);
            continue;
        }
        (void)MHD_add_connection(srv->d, fd, (const struct sockaddr *)&ss,
                                 len);
    }
    return NULL;
}

/* Stop the acceptor and wait for it (once). */
static void acceptor_stop(sc_server *srv)
{
    if (!srv->acceptor_on)
        return;
    if (srv->wake[1] >= 0) {
        ssize_t w;
        do
            w = write(srv->wake[1], "x", 1);
        while (w < 0 && errno == EINTR);
    }
    pthread_join(srv->acceptor, NULL);
    srv->acceptor_on = 0;
}

/* Close the listening socket and the stop pipe (the acceptor is not
 * running). */
static void close_listener(sc_server *srv)
{
    if (srv->lsock >= 0)
        close(srv->lsock);
    srv->lsock = -1;
    for (int i = 0; i < 2; i++) {
        if (srv->wake[i] >= 0)
            close(srv->wake[i]);
        srv->wake[i] = -1;
    }
}

sio_code sc_server_start(const sc_config *cfg, sio_io *io, sc_jobs *jobs,
                         sc_server **out, char *msg, size_t msg_len)
{
    sio_code rc = SIO_OK;
    sc_server *srv = NULL;
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *sa;
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    int mu_ok = 0;

    *out = NULL;
    srv = calloc(1, sizeof *srv);
    if (!srv) {
        snprintf(msg, msg_len, "out of memory");
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    if (pthread_mutex_init(&srv->mu, NULL) != 0) {
        snprintf(msg, msg_len, "cannot create a mutex");
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    mu_ok = 1;
    if (pthread_mutex_init(&srv->wait_mu, NULL) != 0) {
        snprintf(msg, msg_len, "cannot create a mutex");
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    mu_ok = 2;
    atomic_init(&srv->plan_gen, 0);
    srv->cfg = cfg;
    srv->io = io;
    srv->jobs = jobs;
    srv->lsock = -1;
    srv->wake[0] = srv->wake[1] = -1;
    srv->boot = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    srv->boot &= 0xffffffffu;
    atomic_init(&srv->next_id, 0);
    atomic_init(&srv->draining_flag, 0);
    atomic_init(&srv->connections, 0);
    srv->auth = sc_auth_create(cfg->token, cfg->admin_token);
    srv->rl = sc_ratelimit_create(cfg->rate_limit, cfg->rate_burst);
    srv->srl = sc_ratelimit_create(cfg->stream_rate_limit,
                                   cfg->stream_rate_burst);
    srv->cl = sc_connlimit_create(cfg->max_connections_ip,
                                  cfg->max_connections);
    srv->peers = sc_peers_create(cfg, jobs);
    if (!srv->auth || !srv->rl || !srv->srl || !srv->cl || !srv->peers) {
        snprintf(msg, msg_len, "out of memory");
        rc = SIO_ERR_NOMEM;
        goto out;
    }

    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, cfg->listen, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, cfg->listen, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(msg, msg_len, "bad listen address");
        rc = SIO_ERR_INVALID;
        goto out;
    }
    /* epoll, one loop per worker thread, where MHD has it; otherwise
     * whatever internal poller MHD picks. Suspend/resume needs MHD's
     * inter-thread channel, which MHD_ALLOW_SUSPEND_RESUME brings. */
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
        flags |= MHD_USE_EPOLL_INTERNAL_THREAD;
    else
        flags |= MHD_USE_AUTO_INTERNAL_THREAD;
    unsigned backlog = cfg->max_connections < 4096 ? cfg->max_connections
                                                   : 4096;
    if (backlog < 128)
        backlog = 128;

    {
        socklen_t salen = sa->sa_family == AF_INET6 ? sizeof a6 : sizeof a4;
        int one = 1;
        srv->lsock = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (srv->lsock < 0 ||
            setsockopt(srv->lsock, SOL_SOCKET, SO_REUSEADDR, &one,
                       sizeof one) != 0 ||
            (sa->sa_family == AF_INET6 &&
             setsockopt(srv->lsock, IPPROTO_IPV6, IPV6_V6ONLY, &one,
                        sizeof one) != 0) ||
            bind(srv->lsock, sa, salen) != 0 ||
            listen(srv->lsock, (int)backlog) != 0) {
            snprintf(msg, msg_len, "cannot listen on %s port %u: %s",
                     cfg->listen, (unsigned)cfg->port, strerror(errno));
            rc = SIO_ERR_IO;
            goto out;
        }
        struct sockaddr_storage bound;
        socklen_t blen = sizeof bound;
        if (getsockname(srv->lsock, (struct sockaddr *)&bound, &blen) != 0) {
            snprintf(msg, msg_len, "cannot listen on %s port %u: %s",
                     cfg->listen, (unsigned)cfg->port, strerror(errno));
            rc = SIO_ERR_IO;
            goto out;
        }
        srv->port = bound.ss_family == AF_INET6
                        ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
        if (pipe2(srv->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
            srv->wake[0] = srv->wake[1] = -1;
            snprintf(msg, msg_len, "cannot create a pipe: %s",
                     strerror(errno));
            rc = SIO_ERR_IO;
            goto out;
        }
    }
    flags |= MHD_USE_NO_LISTEN_SOCKET;

    /* Plan streams read and send on these threads: one per CPU. */
    unsigned threads = cfg->threads;
    if (threads == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu < 1 ? 2u : ncpu > 64 ? 64u : (unsigned)ncpu;
    }
    srv->d = MHD_start_daemon(
        /* The per-address connection limit is ours (accept_policy), so
         * that its refusals are counted. */
        flags, 0, accept_policy, srv, access_handler, srv,
        /* The logger first, so MHD's own start-up messages use it. */
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->connection_memory,
        /* Connections start with the header timeout; a stream gets the
         * idle timeout (answer_stream). */
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->header_timeout,
        MHD_OPTION_URI_LOG_CALLBACK, uri_log, srv,
        MHD_OPTION_NOTIFY_COMPLETED, request_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, srv,
        MHD_OPTION_END);
    if (!srv->d) {
        snprintf(msg, msg_len, "cannot start the HTTP daemon");
        rc = SIO_ERR_IO;
        goto out;
    }
    if (pthread_create(&srv->acceptor, NULL, acceptor_main, srv) != 0) {
        snprintf(msg, msg_len, "cannot start the acceptor thread");
        MHD_stop_daemon(srv->d);
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    srv->acceptor_on = 1;
    /* Streams that wait for a plan are resumed when a build ends. */
    sc_jobs_set_plan_waker(jobs, plan_waker, srv);
    if (sc_peers_start(srv->peers) != 0) {
        sc_jobs_set_plan_waker(jobs, NULL, NULL);
        snprintf(msg, msg_len, "cannot start the peers thread");
        acceptor_stop(srv); /* it must not hand MHD a connection now */
        MHD_stop_daemon(srv->d);
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    *out = srv;
    srv = NULL;
out:
    if (srv) {
        acceptor_stop(srv);
        close_listener(srv);
        sc_peers_destroy(srv->peers);
        sc_connlimit_destroy(srv->cl);
        sc_ratelimit_destroy(srv->srl);
        sc_ratelimit_destroy(srv->rl);
        sc_auth_destroy(srv->auth);
        if (mu_ok > 1)
            pthread_mutex_destroy(&srv->wait_mu);
        if (mu_ok)
            pthread_mutex_destroy(&srv->mu);
        free(srv);
    }
    return rc;
}

uint16_t sc_server_port(const sc_server *srv)
{
    return srv->port;
}

size_t sc_server_drain(sc_server *srv, uint32_t grace_s)
{
    /* Stop accepting: the acceptor ends and the listening socket is
     * closed, so new connections are refused at once. */
    acceptor_stop(srv);
    close_listener(srv);
    pthread_mutex_lock(&srv->mu);
    srv->draining = 1;
    atomic_store(&srv->draining_flag, 1);
    pthread_mutex_unlock(&srv->mu);
    /* Streams waiting for a plan are refused now (503), not bound. */
    waiters_resume(srv, 0);
    size_t left = sc_jobs_wait_streams(srv->jobs, grace_s * 1000u);
    SC_LOG(SIO_LOG_INFO, "event=drain streams_left=%zu grace_s=%u", left,
           grace_s);
    if (left) {
        sc_jobs_cut_all(srv->jobs, "server shutting down",
                        DRAIN_RETRY_AFTER_MS);
        left = sc_jobs_wait_streams(srv->jobs, CUT_WAIT_MS);
    }
    return left;
}

void sc_server_stop(sc_server *srv)
{
    if (!srv)
        return;
    if (!atomic_load(&srv->draining_flag)) {
        acceptor_stop(srv);
        close_listener(srv);
        pthread_mutex_lock(&srv->mu);
        srv->draining = 1;
        atomic_store(&srv->draining_flag, 1);
        pthread_mutex_unlock(&srv->mu);
    }
    /* MHD must not be stopped with suspended connections: a cut stream
     * is resumed and never suspends again, and no stream can be bound any
     * more (draining is set under srv->mu). Requests waiting for a plan
     * are resumed and none waits again; the planner calls into this
     * server no more once its waker is cleared. */
    sc_jobs_set_plan_waker(srv->jobs, NULL, NULL);
    waiters_resume(srv, 1);
    sc_jobs_cut_all(srv->jobs, "server shutting down", DRAIN_RETRY_AFTER_MS);
    MHD_stop_daemon(srv->d);
    sc_peers_destroy(srv->peers);
    sc_connlimit_destroy(srv->cl);
    sc_ratelimit_destroy(srv->srl);
    sc_ratelimit_destroy(srv->rl);
    sc_auth_destroy(srv->auth);
    pthread_mutex_destroy(&srv->wait_mu);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}
