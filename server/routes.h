/*
 * routes.h — the route table of shardcastd: every path it answers, with
 * its methods, who may call it, its label in metrics and its handler, in
 * one place. The request parser (request.c) reads the pattern, methods and
 * parameters; the HTTP front (http.c) the roles, rate limit and handler;
 * metrics the route label. An X-macro, so each reader takes the columns it
 * needs and the parser stays free of HTTP types:
 *
 *   X(id, pattern, methods, role, write_role, metric, params, limit, handler)
 *
 *   id          SC_ROUTE_<id> (request.h), in table order
 *   pattern     the path; {job} is a job name, {epoch} an epoch (0..2^63-1),
 *               {index} a sample index (global_start, rank 0 of world 1)
 *   methods     the methods allowed, as the Allow header lists them
 *   role        who may call it with GET or HEAD (auth.h SC_ROLE_<role>)
 *   write_role  who may call it with its other methods (PUT, DELETE)
 *   metric      its route label in shardcast_http_* ("other": no route)
 *   params      the query parameters it takes (request.c PARAMS_<params>):
 *               NONE (a query is ignored), STREAM, TOPOLOGY, SAMPLE
 *   limit       the per-address rate limit it counts against (http.c):
 *               REQUESTS (--rate-limit), STREAM_OPENS (--stream-rate-limit),
 *               NONE
 *   handler     answer_<handler> in http.c
 *
 * Requests that match no route (or are refused before routing) are
 * public, count against REQUESTS and are labelled "other".
 */
#ifndef SC_ROUTES_H
#define SC_ROUTES_H

/* clang-format off */
#define SC_ROUTES(X)                                                        \
    X(HEALTHZ,  "/healthz",       "GET, HEAD",        PUBLIC,   PUBLIC,     \
      "healthz",  NONE,     REQUESTS,     healthz)                          \
    X(READYZ,   "/readyz",        "GET, HEAD",        PUBLIC,   PUBLIC,     \
      "readyz",   NONE,     REQUESTS,     readyz)                           \
    X(METRICS,  "/metrics",       "GET, HEAD",        PUBLIC,   PUBLIC,     \
      "metrics",  NONE,     REQUESTS,     metrics)                          \
    X(JOBS,     "/v1/jobs",       "GET",              CONSUMER, CONSUMER,   \
      "jobs",     NONE,     REQUESTS,     jobs)                             \
    X(JOB,      "/v1/jobs/{job}", "GET, PUT, DELETE", CONSUMER, ADMIN,      \
      "job",      NONE,     REQUESTS,     job)                              \
    X(STREAM,   "/v1/jobs/{job}/epochs/{epoch}/stream", "GET", CONSUMER,    \
      CONSUMER,   "stream", STREAM,       STREAM_OPENS, stream)             \
    X(SETTINGS, "/v1/settings",   "GET",              ADMIN,    ADMIN,      \
      "settings", NONE,     REQUESTS,     settings)                         \
    X(TOPOLOGY, "/v1/topology",   "GET",              CONSUMER, CONSUMER,   \
      "topology", TOPOLOGY, REQUESTS,     topology)                         \
    X(SAMPLE,   "/v1/jobs/{job}/samples/{index}", "GET", CONSUMER,          \
      CONSUMER,   "sample", SAMPLE,       NONE,         stream)
/* clang-format on */

#endif /* SC_ROUTES_H */
