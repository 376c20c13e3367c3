/*
 * request.h — parsing of a request line's target (path and query) into a
 * route of the route table (routes.h) and its parameters. Pure functions on caller-provided memory: no
 * allocation, no MHD, no global state; safe from any thread. This is the
 * part of the request path that sees untrusted bytes first, so it is what
 * tests/fuzz/fuzz_request.c exercises.
 */
#ifndef SC_REQUEST_H
#define SC_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "routes.h"
#include "names.h"
#include "shardio_wire.h"


/* Query parameters beyond this many make the request a 400. */
#define SC_QUERY_PARAMS_MAX 64u
/* The largest world (ranks x DataLoader workers) a stream may name. */
#define SC_WORLD_MAX 65536u
/* Largest --replicas, and bound of a request's replica=. */
#define SC_REPLICAS_MAX 1024u
/* Largest epoch, start and global_start: both wire formats (the frames
 * HEADER JSON, the tar summary read by JSON parsers) carry them as signed
 * 64-bit integers, so one validation serves every format. */
#define SC_INT_PARAM_MAX ((uint64_t)INT64_MAX)

/* The routes, in the order of the route table (routes.h). */
typedef enum sc_route {
    SC_ROUTE_NONE = 0, /* no route: not found, or refused while parsing */
#define SC_ROUTE_ID(id, ...) SC_ROUTE_##id,
    SC_ROUTES(SC_ROUTE_ID)
#undef SC_ROUTE_ID
    SC_ROUTE_COUNT
} sc_route;

typedef enum sc_format { SC_FORMAT_TAR = 0, SC_FORMAT_FRAMES = 1 } sc_format;

typedef struct sc_request {
    sc_route route;
    char job[SC_JOB_NAME_MAX + 1]; /* decoded, NUL-terminated */
    uint64_t epoch;
    uint32_t rank;
    uint32_t world;       /* stream; topology: 0 when not given */
    uint64_t start;       /* position within the share to start from */
    uint64_t global_start; /* elastic resume: Y[global_start + i] goes to
                              consumer i mod world */
    sc_format format;
    int has_replica;      /* replica= was given: stream that replica's part
                             of the epoch (rank/world local to it) */
    uint32_t replica;
    int has_fields;       /* fields= was given */
    size_t nfields;       /* 0 with has_fields 0: the job's default */
    char fields[SIO_TARW_FILTER_MAX][SIO_TARW_FIELD_NAME_MAX + 1];
    uint64_t arrival_us;  /* when the request came (CLOCK_MONOTONIC, µs;
                             set by the HTTP layer, not the parser) */
} sc_request;

/* Does the server have a job of this name? (decoded, NUL-terminated) */
typedef int (*sc_job_exists_fn)(void *userdata, const char *job);

/*
 * Parse a request target (origin-form "/path?query", target_len bytes, not
 * necessarily NUL-terminated) for `method`. job_exists (may be NULL: every
 * well-formed name exists) tells unknown jobs (404) apart; PUT may name a
 * job that does not exist yet.
 * Returns the HTTP status to answer with: 200 when *out is a valid request,
 * otherwise 400 (bad parameter or job name), 404 (unknown job or path),
 * 405 (method), 414 (target longer than max_target) with a one-line reason
 * in reason[reason_len] (no newline). Checks, in order: length, path, job,
 * method, then parameters. A stream or topology request with a parameter
 * the route does not take is a 400 naming it ("unknown parameter x");
 * epoch, start and global_start above 2^63-1 are 400 whatever the format.
 */
unsigned sc_request_parse(const char *method, const char *target,
                          size_t target_len, size_t max_target,
                          sc_job_exists_fn job_exists, void *userdata,
                          sc_request *out, char *reason, size_t reason_len);

/* The methods a route allows, for an Allow header ("GET, HEAD"; "GET"
 * for SC_ROUTE_NONE). */
const char *sc_route_allow(sc_route route);

/* The route's label in metrics ("other" for SC_ROUTE_NONE and anything
 * out of range). */
const char *sc_route_metric(sc_route route);

/*
 * Percent-decode len bytes of src into dst (cap bytes, NUL-terminated on
 * success); '+' becomes a space when plus_is_space. Returns the decoded
 * length, or -1 on a malformed escape, a decoded NUL byte, or when the
 * result does not fit.
 */
long sc_pct_decode(const char *src, size_t len, int plus_is_space, char *dst,
                   size_t cap);

/* Strict unsigned decimal: 1..20 digits, no sign or space, no overflow
 * beyond max. Returns 0 and sets *out, or -1. */
int sc_parse_u64(const char *s, uint64_t max, uint64_t *out);

#endif /* SC_REQUEST_H */
