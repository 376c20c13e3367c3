/*
 * http.c — libmicrohttpd daemon, routing, limits, error replies and the
 * per-request log line (contract in http.h).
 *
 * Request lifecycle: MHD's URI-log callback allocates a req_ctx holding a
 * bounded copy of the raw request target (before MHD unescapes it) and a
 * request id; the access handler parses it (request.c) and answers, or
 * starts a stream (stream.c) and suspends the connection until the
 * producer has opened the epoch; the request-completed callback stops and
 * joins the stream, logs one line, frees the context. That callback is the
 * only place a req_ctx is freed.
 *
 * Threading: callbacks run on MHD's worker threads. srv->mu guards the
 * registry of contexts with streams and the stopping flag; lock order:
 * srv->mu -> stream mutex -> MHD internals. Nothing here blocks an MHD
 * thread except joining a cancelled producer (bounded, see stream.h).
 */
#include "http.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "request.h"
#include "stream.h"

/* Body chunks asked of the stream reader; MHD caps it further by what is
 * left of the connection's memory pool. */
#define STREAM_BLOCK (32u * 1024u)
/* Bytes of the request path kept for the log line. */
#define LOG_PATH_MAX 256u
#define REASON_MAX 512u

typedef struct req_ctx {
    sc_server *srv;
    char id[40];
    char method[16];
    struct timespec t0;
    char *target;        /* raw request target, NUL-terminated */
    size_t target_len;   /* its full length (may exceed what was kept) */
    unsigned status;     /* status answered, 0 before */
    uint64_t bytes;      /* body bytes of a non-stream answer */
    sc_stream *stream;
    sc_request req;      /* parsed request (stream route) */
    struct req_ctx *prev, *next; /* registry, while stream != NULL */
} req_ctx;

struct sc_server {
    const sc_config *cfg;
    sio_io *io;
    const sio_shardlist *list;
    struct MHD_Daemon *d;
    MHD_socket lsock; /* from MHD_quiesce_daemon; closed after stop */
    uint16_t port;
    uint64_t boot;    /* makes request ids unique across restarts */
    atomic_uint_fast64_t next_id;
    pthread_mutex_t mu;
    int stopping;     /* guarded by mu */
    req_ctx *live;    /* guarded by mu */
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
    return ctx;
}

static enum MHD_Result reply_text(req_ctx *ctx, struct MHD_Connection *conn,
                                  unsigned status, const char *body)
{
    enum MHD_Result ret;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (ctx)
        MHD_add_response_header(r, "X-Request-Id", ctx->id);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    if (ctx) {
        ctx->status = status;
        ctx->bytes = strlen(body);
    }
    return ret;
}

static enum MHD_Result reply_error(req_ctx *ctx, struct MHD_Connection *conn,
                                   unsigned status, const char *reason)
{
    char body[REASON_MAX + 16];
    snprintf(body, sizeof body, "error: %s\n", reason);
    return reply_text(ctx, conn, status, body);
}

static enum MHD_Result reply_stream(req_ctx *ctx, struct MHD_Connection *conn)
{
    enum MHD_Result ret;
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, STREAM_BLOCK, sc_stream_reader, ctx->stream, NULL);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/x-tar");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Request-Id", ctx->id);
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    ctx->status = MHD_HTTP_OK;
    return ret;
}

/* Answer an open stream: queue the stream, an error, or wait (suspended). */
static enum MHD_Result answer_stream(req_ctx *ctx, struct MHD_Connection *conn)
{
    unsigned status = 500;
    char reason[REASON_MAX];

    switch (sc_stream_poll_open(ctx->stream, &status, reason, sizeof reason)) {
    case SC_OPEN_PENDING:
        return MHD_YES; /* suspended; called again once resumed */
    case SC_OPEN_FAILED:
        return reply_error(ctx, conn, status, reason);
    case SC_OPEN_OK:
        break;
    }
    return reply_stream(ctx, conn);
}

static enum MHD_Result start_stream(req_ctx *ctx, struct MHD_Connection *conn)
{
    sc_server *srv = ctx->srv;
    const sc_config *cfg = srv->cfg;
    const char *fields[SIO_TARW_FILTER_MAX];
    sio_error err = {SIO_OK, ""};
    sc_stream_params p;

    memset(&p, 0, sizeof p);
    p.io = srv->io;
    p.list = srv->list;
    p.epoch_cfg.seed = cfg->seed;
    p.epoch_cfg.epoch = ctx->req.epoch;
    p.epoch_cfg.interleave = cfg->interleave;
    p.epoch_cfg.buffer_samples = cfg->shuffle_buffer;
    p.epoch_cfg.buffer_bytes = cfg->buffer_bytes;
    p.epoch_cfg.on_error = (sio_on_error)cfg->on_error;
    p.epoch_cfg.log.fn = sc_log_sio;
    p.epoch_cfg.log.level = sc_log_level();
    p.partition = (sio_partition)cfg->partition;
    p.rank = ctx->req.rank;
    p.world = ctx->req.world;
    p.start = ctx->req.start;
    for (size_t i = 0; i < ctx->req.nfields; i++)
        fields[i] = ctx->req.fields[i];
    p.fields = fields;
    p.nfields = ctx->req.nfields;
    p.queue_bytes = (size_t)cfg->queue_bytes;
    p.id = ctx->id;

    /* Registering under srv->mu with the stopping check makes the shutdown
     * sweep see every stream that will ever exist. */
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        return reply_error(ctx, conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                           "server shutting down");
    }
    sio_code rc = sc_stream_start(&p, conn, &ctx->stream, &err);
    if (rc == SIO_OK) {
        ctx->next = srv->live;
        if (srv->live)
            srv->live->prev = ctx;
        srv->live = ctx;
    }
    pthread_mutex_unlock(&srv->mu);
    if (rc != SIO_OK) {
        SC_LOG(SIO_LOG_ERROR, "event=stream_start_failed id=%s code=%d",
               ctx->id, (int)rc);
        return reply_error(ctx, conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                           "cannot start stream");
    }
    SC_LOG(SIO_LOG_DEBUG,
           "event=stream_start id=%s epoch=%" PRIu64 " rank=%" PRIu32
           " world=%" PRIu32 " start=%" PRIu64 " fields=%zu",
           ctx->id, ctx->req.epoch, ctx->req.rank, ctx->req.world,
           ctx->req.start, ctx->req.nfields);
    return answer_stream(ctx, conn);
}

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
    (void)upload_data;

    if (!ctx)
        return reply_error(NULL, conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                           "out of memory");
    /* No route takes a body: drop whatever arrives. */
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (ctx->stream)
        return answer_stream(ctx, conn);
    if (ctx->status)
        return MHD_YES;
    snprintf(ctx->method, sizeof ctx->method, "%s", method);

    unsigned status = sc_request_parse(method, ctx->target, ctx->target_len,
                                       srv->cfg->max_url, srv->cfg->job,
                                       &ctx->req, reason, sizeof reason);
    if (status != 200)
        return reply_error(ctx, conn, status, reason);
    switch (ctx->req.route) {
    case SC_ROUTE_HEALTHZ:
        return reply_text(ctx, conn, MHD_HTTP_OK, "ok\n");
    case SC_ROUTE_STREAM:
        return start_stream(ctx, conn);
    case SC_ROUTE_NONE:
        break;
    }
    return reply_error(ctx, conn, MHD_HTTP_NOT_FOUND, "not found");
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
    char path[LOG_PATH_MAX + 16], meth[40], extra[200] = "";
    (void)conn;

    if (!ctx)
        return;
    *req_cls = NULL;
    uint64_t bytes = ctx->bytes;
    if (ctx->stream) {
        pthread_mutex_lock(&srv->mu);
        if (ctx->prev)
            ctx->prev->next = ctx->next;
        else
            srv->live = ctx->next;
        if (ctx->next)
            ctx->next->prev = ctx->prev;
        pthread_mutex_unlock(&srv->mu);
        sc_stream_stats st;
        sc_stream_destroy(ctx->stream, &st);
        ctx->stream = NULL;
        if (ctx->status == MHD_HTTP_OK) {
            bytes = st.bytes_out;
            snprintf(extra, sizeof extra,
                     " epoch=%" PRIu64 " rank=%" PRIu32 " world=%" PRIu32
                     " start=%" PRIu64 " samples=%" PRIu64
                     " position=%" PRIu64 " outcome=%s",
                     ctx->req.epoch, ctx->req.rank, ctx->req.world,
                     ctx->req.start, st.samples, st.position, st.outcome);
        }
    }
    /* The path only: a query string may one day carry tokens. */
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
    free(ctx->target);
    free(ctx);
}

sio_code sc_server_start(const sc_config *cfg, sio_io *io,
                         const sio_shardlist *list, sc_server **out,
                         char *msg, size_t msg_len)
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
    srv->cfg = cfg;
    srv->io = io;
    srv->list = list;
    srv->lsock = MHD_INVALID_SOCKET;
    srv->boot = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    srv->boot &= 0xffffffffu;
    atomic_init(&srv->next_id, 0);

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
    /* epoll with its own threads where MHD has it; otherwise whatever
     * internal poller MHD picks. Suspend/resume needs MHD's inter-thread
     * channel, which MHD_ALLOW_SUSPEND_RESUME brings. */
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
        flags |= MHD_USE_EPOLL_INTERNAL_THREAD;
    else
        flags |= MHD_USE_AUTO_INTERNAL_THREAD;

    srv->d = MHD_start_daemon(
        flags, 0, NULL, NULL, access_handler, srv,
        /* The logger first, so MHD's own start-up messages use it. */
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_SOCK_ADDR, sa,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)cfg->threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->connection_memory,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->idle_timeout,
        MHD_OPTION_URI_LOG_CALLBACK, uri_log, srv,
        MHD_OPTION_NOTIFY_COMPLETED, request_completed, srv,
        MHD_OPTION_END);
    if (!srv->d) {
        snprintf(msg, msg_len, "cannot start the HTTP daemon on %s port %u",
                 cfg->listen, (unsigned)cfg->port);
        rc = SIO_ERR_IO;
        goto out;
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : (uint16_t)cfg->port;
    *out = srv;
    srv = NULL;
out:
    if (srv) {
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

void sc_server_stop(sc_server *srv)
{
    if (!srv)
        return;
    srv->lsock = MHD_quiesce_daemon(srv->d);
    /* MHD must not be stopped with suspended connections: cancel every
     * stream, which resumes its connection; new streams are refused. */
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    for (req_ctx *c = srv->live; c; c = c->next)
        sc_stream_cancel(c->stream);
    pthread_mutex_unlock(&srv->mu);
    MHD_stop_daemon(srv->d);
    if (srv->lsock != MHD_INVALID_SOCKET)
        close(srv->lsock);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}
