/*
 * request.h — parsing of a request line's target (path and query) into a
 * route and its parameters. Pure functions on caller-provided memory: no
 * allocation, no MHD, no global state; safe from any thread. This is the
 * part of the request path that sees untrusted bytes first, so it is what
 * tests/fuzz/fuzz_request.c exercises.
 */
#ifndef SC_REQUEST_H
#define SC_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "shardio_wire.h"

/* A job name: at most this many bytes (after percent-decoding). */
#define SC_JOB_NAME_MAX 128u
/* Query parameters beyond this many make the request a 400. */
#define SC_QUERY_PARAMS_MAX 64u
/* The largest world (ranks x DataLoader workers) a stream may name. */
#define SC_WORLD_MAX 65536u
/* The longest request target the parser accepts (callers may set lower). */
#define SC_TARGET_MAX 65536u

typedef enum sc_route {
    SC_ROUTE_NONE = 0,
    SC_ROUTE_HEALTHZ,
    SC_ROUTE_STREAM
} sc_route;

typedef enum sc_format { SC_FORMAT_TAR = 0 } sc_format;

typedef struct sc_request {
    sc_route route;
    char job[SC_JOB_NAME_MAX + 1]; /* decoded, NUL-terminated */
    uint64_t epoch;
    uint32_t rank;
    uint32_t world;
    uint64_t start;
    sc_format format;
    size_t nfields; /* 0: every field */
    char fields[SIO_TARW_FILTER_MAX][SIO_TARW_FIELD_NAME_MAX + 1];
} sc_request;

/*
 * Parse a request target (origin-form "/path?query", target_len bytes, not
 * necessarily NUL-terminated) for `method`. `job` is the name of the job
 * this server serves; other names are 404.
 * Returns the HTTP status to answer with: 200 when *out is a valid request,
 * otherwise 400 (bad parameter), 404 (unknown job or path), 405 (method),
 * 414 (target longer than max_target) with a one-line reason in
 * reason[reason_len] (no newline). Checks, in order: length, path, job,
 * method, then parameters.
 */
unsigned sc_request_parse(const char *method, const char *target,
                          size_t target_len, size_t max_target,
                          const char *job, sc_request *out, char *reason,
                          size_t reason_len);

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
