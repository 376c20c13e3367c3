/*
 * request.c — request-target parsing (see request.h for the contract).
 *
 * Threading: pure functions, no state. Ownership: everything lives in the
 * caller's memory; decoded values are bounded by fixed buffers whose sizes
 * are the limits named below, so no input length reaches an allocation.
 */
#include "request.h"
#include "shardio.h"


#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Longest decoded query key we compare; longer keys are unknown ones. */
#define KEY_MAX 32u
/* Longest decoded query value: a full fields list (64 names of 64 bytes
 * and the commas) fits. */
#define VALUE_MAX (SIO_TARW_FILTER_MAX * (SIO_TARW_FIELD_NAME_MAX + 1))
/* Path segments longer than this cannot name anything we serve. */
#define SEGMENT_MAX 256u
/* More path segments than this cannot name anything we serve. */
#define SEGMENTS_MAX 8u

static unsigned fail(unsigned status, char *reason, size_t reason_len,
                     const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static unsigned fail(unsigned status, char *reason, size_t reason_len,
                     const char *fmt, ...)
{
    va_list ap;
    if (reason_len) {
        va_start(ap, fmt);
        vsnprintf(reason, reason_len, fmt, ap);
        va_end(ap);
    }
    return status;
}


/* Are all escapes in s well formed ('%' and two hex digits)? */
static int pct_valid(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%')
            continue;
        if (i + 2 >= len || sio_hexval(s[i + 1]) < 0 || sio_hexval(s[i + 2]) < 0)
            return 0;
        i += 2;
    }
    return 1;
}

long sc_pct_decode(const char *src, size_t len, int plus_is_space, char *dst,
                   size_t cap)
{
    size_t o = 0;
    long rc = -1;

    if (cap == 0)
        goto out;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '%') {
            int hi, lo;
            if (i + 2 >= len)
                goto out;
            hi = sio_hexval(src[i + 1]);
            lo = sio_hexval(src[i + 2]);
            if (hi < 0 || lo < 0)
                goto out;
            c = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '+' && plus_is_space) {
            c = ' ';
        }
        if (c == '\0' || o + 1 >= cap)
            goto out;
        dst[o++] = c;
    }
    dst[o] = '\0';
    rc = (long)o;
out:
    return rc;
}

int sc_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;

    if (!s[0])
        return -1;
    for (; s[i]; i++) {
        if (s[i] < '0' || s[i] > '9' || i >= 20)
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Split "a,b,c" into req->fields (rules of sc_fields_split). */
static int parse_fields(const char *v, sc_request *req)
{
    return sc_fields_split(v, req->fields, &req->nfields);
}

enum {
    P_RANK,
    P_WORLD,
    P_START,
    P_GLOBAL_START,
    P_FORMAT,
    P_FIELDS,
    P_REPLICA,
    P_JOB,
    P_COUNT
};
static const char *const param_names[P_COUNT] = {
    "rank", "world", "start", "global_start", "format", "fields", "replica",
    "job"};

/* Parameters each route takes (the params column of routes.h); any other
 * is a 400 naming it (a typo such as "globalstart" must not silently
 * stream from the wrong place). */
#define PARAMS_NONE 0u
#define PARAMS_STREAM                                                      \
    ((1u << P_RANK) | (1u << P_WORLD) | (1u << P_START) |                  \
     (1u << P_GLOBAL_START) | (1u << P_FORMAT) | (1u << P_FIELDS) |      \
     (1u << P_REPLICA))
#define PARAMS_TOPOLOGY ((1u << P_WORLD) | (1u << P_JOB))
#define PARAMS_SAMPLE ((1u << P_FORMAT) | (1u << P_FIELDS))

/* What the parser reads of the route table. */
typedef struct route_row {
    sc_route id;
    const char *pattern;
    const char *methods;
    const char *metric;
    unsigned params;
} route_row;

static const route_row routes[] = {
#define ROW(id, pattern, methods, role, write_role, metric, params, limit,  \
            handler)                                                       \
    {SC_ROUTE_##id, pattern, methods, metric, PARAMS_##params},
    SC_ROUTES(ROW)
#undef ROW
};
#define NROWS (sizeof routes / sizeof routes[0])

static unsigned parse_query(const char *q, size_t len, unsigned accepted,
                            sc_request *req, char *reason, size_t reason_len)
{
    char key[KEY_MAX + 1];
    char val[VALUE_MAX + 1];
    int seen[P_COUNT] = {0};
    size_t nparams = 0;
    uint64_t v;

    for (size_t i = 0; i < len;) {
        const char *amp = memchr(q + i, '&', len - i);
        size_t end = amp ? (size_t)(amp - q) : len;
        const char *piece = q + i;
        size_t plen = end - i;
        i = end + 1;
        if (plen == 0)
            continue;
        if (++nparams > SC_QUERY_PARAMS_MAX)
            return fail(400, reason, reason_len,
                        "more than %u query parameters", SC_QUERY_PARAMS_MAX);
        if (!pct_valid(piece, plen))
            return fail(400, reason, reason_len,
                        "bad percent-encoding in query");
        const char *eq = memchr(piece, '=', plen);
        size_t klen = eq ? (size_t)(eq - piece) : plen;
        /* A key that does not decode into key[] (too long, or a NUL) is
         * none of ours. */
        int which = -1;
        long kl = sc_pct_decode(piece, klen, 1, key, sizeof key);
        if (kl >= 0)
            for (int p = 0; p < P_COUNT; p++)
                if ((accepted & (1u << p)) && strcmp(key, param_names[p]) == 0)
                    which = p;
        if (which < 0) {
            char shown[KEY_MAX + 1];
            size_t o = 0;
            /* Named as far as it is printable, cut to KEY_MAX bytes. */
            for (long k = 0; kl > 0 && k < kl && o < KEY_MAX; k++)
                shown[o++] = (key[k] > 0x20 && key[k] < 0x7f) ? key[k] : '?';
            shown[o] = '\0';
            return fail(400, reason, reason_len, "unknown parameter %s%s",
                        kl < 0 ? "(too long)" : shown,
                        kl < 0 ? "" : "");
        }
        const char *vsrc = eq ? eq + 1 : piece + plen;
        size_t vlen = eq ? plen - klen - 1 : 0;
        if (sc_pct_decode(vsrc, vlen, 1, val, sizeof val) < 0)
            return fail(400, reason, reason_len, "bad value for parameter %s",
                        param_names[which]);
        if (seen[which])
            return fail(400, reason, reason_len, "duplicated parameter %s",
                        param_names[which]);
        seen[which] = 1;
        switch (which) {
        case P_RANK:
            if (sc_parse_u64(val, UINT32_MAX, &v) != 0)
                return fail(400, reason, reason_len,
                            "rank must be a non-negative integer");
            req->rank = (uint32_t)v;
            break;
        case P_WORLD:
            if (sc_parse_u64(val, UINT32_MAX, &v) != 0 || v == 0 ||
                v > SC_WORLD_MAX)
                return fail(400, reason, reason_len,
                            "world must be an integer in 1..%u", SC_WORLD_MAX);
            req->world = (uint32_t)v;
            break;
        case P_START:
            if (sc_parse_u64(val, SC_INT_PARAM_MAX, &v) != 0)
                return fail(400, reason, reason_len,
                            "start must be an integer in 0..2^63-1");
            req->start = v;
            break;
        case P_GLOBAL_START:
            if (sc_parse_u64(val, SC_INT_PARAM_MAX, &v) != 0)
                return fail(400, reason, reason_len,
                            "global_start must be an integer in 0..2^63-1");
            req->global_start = v;
            break;
        case P_FORMAT:
            if (strcmp(val, "tar") == 0)
                req->format = SC_FORMAT_TAR;
            else if (strcmp(val, "frames") == 0)
                req->format = SC_FORMAT_FRAMES;
            else
                return fail(400, reason, reason_len,
                            "unknown format (supported: tar, frames)");
            break;
        case P_REPLICA:
            /* bounded by the server's R where it is used (jobs.c) */
            if (sc_parse_u64(val, SC_REPLICAS_MAX - 1, &v) != 0)
                return fail(400, reason, reason_len,
                            "replica must be an integer in 0..%u",
                            SC_REPLICAS_MAX - 1);
            req->replica = (uint32_t)v;
            req->has_replica = 1;
            break;
        case P_JOB:
            if (!sc_job_name_valid(val))
                return fail(400, reason, reason_len,
                            "bad job name (1..%u of [A-Za-z0-9._-])",
                            SC_JOB_NAME_MAX);
            memcpy(req->job, val, strlen(val) + 1);
            break;
        case P_FIELDS:
            if (parse_fields(val, req) != 0)
                return fail(400, reason, reason_len,
                            "bad fields list (comma-separated distinct names "
                            "of 1..%u characters [A-Za-z0-9._+-], at most %u)",
                            SIO_TARW_FIELD_NAME_MAX, SIO_TARW_FILTER_MAX);
            req->has_fields = 1;
            break;
        }
    }
    if (accepted != PARAMS_STREAM)
        return 200;
    if (!seen[P_RANK])
        return fail(400, reason, reason_len, "missing parameter rank");
    if (!seen[P_WORLD])
        return fail(400, reason, reason_len, "missing parameter world");
    if (req->rank >= req->world)
        return fail(400, reason, reason_len, "rank must be less than world");
    /* The feed addresses Y[global_start + rank + start * world]: one
     * bound for every index a request can reach (partition.c). */
    char why[160];
    if (sio_share_validate(req->rank, req->world, req->global_start,
                           req->start, why, sizeof why) != 0)
        return fail(400, reason, reason_len, "%s", why);
    return 200;
}

static const route_row *row_of(sc_route route)
{
    for (size_t i = 0; i < NROWS; i++)
        if (routes[i].id == route)
            return &routes[i];
    return NULL;
}

const char *sc_route_allow(sc_route route)
{
    const route_row *r = row_of(route);
    return r ? r->methods : "GET";
}

const char *sc_route_metric(sc_route route)
{
    const route_row *r = row_of(route);
    return r ? r->metric : "other";
}

/* Is method one of the list ("GET, PUT, DELETE")? */
static int method_in(const char *method, const char *list)
{
    size_t n = strlen(method);
    for (const char *m = list; *m;) {
        const char *comma = strchr(m, ',');
        size_t len = comma ? (size_t)(comma - m) : strlen(m);
        if (len == n && memcmp(m, method, n) == 0)
            return 1;
        if (!comma)
            break;
        m = comma + 1;
        while (*m == ' ')
            m++;
    }
    return 0;
}

unsigned sc_request_parse(const char *method, const char *target,
                          size_t target_len, size_t max_target,
                          sc_job_exists_fn job_exists, void *userdata,
                          sc_request *out, char *reason, size_t reason_len)
{
    const char *seg[SEGMENTS_MAX];
    size_t seglen[SEGMENTS_MAX];
    size_t nseg = 0;
    char buf[SEGMENT_MAX + 1];
    sc_route route = SC_ROUTE_NONE;
    unsigned accepted = 0;

    memset(out, 0, sizeof *out);
    if (reason_len)
        reason[0] = '\0';
    if (target_len > max_target || target_len > SC_TARGET_MAX)
        return fail(414, reason, reason_len, "request target longer than %zu",
                    max_target < SC_TARGET_MAX ? max_target
                                               : (size_t)SC_TARGET_MAX);
    if (target_len == 0 || target[0] != '/')
        return fail(400, reason, reason_len, "bad request target");

    const char *qmark = memchr(target, '?', target_len);
    size_t path_len = qmark ? (size_t)(qmark - target) : target_len;
    const char *query = qmark ? qmark + 1 : target + target_len;
    size_t query_len = qmark ? target_len - path_len - 1 : 0;

    /* Split "/a/b/c" into segments (the leading slash is skipped). */
    for (size_t i = 1; i <= path_len;) {
        const char *slash = memchr(target + i, '/', path_len - i);
        size_t end = slash ? (size_t)(slash - target) : path_len;
        if (nseg == SEGMENTS_MAX)
            return fail(404, reason, reason_len, "not found");
        seg[nseg] = target + i;
        seglen[nseg] = end - i;
        nseg++;
        i = end + 1;
        if (!slash)
            break;
    }

    /* The first row whose pattern has as many segments, each literal one
     * equal after decoding (like any path); {name} segments match
     * anything and are read below. */
    const route_row *row = NULL;
    size_t cap_job = SIZE_MAX, cap_epoch = SIZE_MAX, cap_index = SIZE_MAX;
    for (size_t r = 0; r < NROWS && !row; r++) {
        const char *p = routes[r].pattern + 1;
        size_t k = 0;
        int ok = 1;
        cap_job = cap_epoch = cap_index = SIZE_MAX;
        for (;; k++) {
            const char *slash = strchr(p, '/');
            size_t plen = slash ? (size_t)(slash - p) : strlen(p);
            if (k == nseg) {
                ok = 0;
                break;
            }
            if (p[0] == '{') {
                if (plen == 5 && memcmp(p, "{job}", 5) == 0)
                    cap_job = k;
                else if (plen == 7 && memcmp(p, "{epoch}", 7) == 0)
                    cap_epoch = k;
                else /* {index} */
                    cap_index = k;
            } else if (sc_pct_decode(seg[k], seglen[k], 0, buf, sizeof buf) <
                           0 ||
                       strlen(buf) != plen || memcmp(buf, p, plen) != 0) {
                ok = 0;
                break;
            }
            if (!slash)
                break;
            p = slash + 1;
        }
        if (ok && k + 1 == nseg)
            row = &routes[r];
    }
    if (!row)
        return fail(404, reason, reason_len, "not found");
    route = row->id;

    if (cap_job != SIZE_MAX) {
        char jobbuf[SC_JOB_NAME_MAX + 1];
        /* A method that may create the job (PUT) may name one that does
         * not exist yet. */
        int put = strcmp(method, "PUT") == 0 && method_in("PUT", row->methods);
        if (!pct_valid(seg[cap_job], seglen[cap_job]))
            return fail(400, reason, reason_len,
                        "bad percent-encoding in path");
        /* A name too long for jobbuf (or holding a NUL, or other bytes
         * than a job name has) is not one we serve, nor one to create. */
        if (sc_pct_decode(seg[cap_job], seglen[cap_job], 0, jobbuf,
                          sizeof jobbuf) < 0 ||
            !sc_job_name_valid(jobbuf)) {
            if (put)
                return fail(400, reason, reason_len,
                            "bad job name (1..%u of [A-Za-z0-9._-])",
                            SC_JOB_NAME_MAX);
            return fail(404, reason, reason_len, "unknown job");
        }
        if (!put && job_exists && !job_exists(userdata, jobbuf))
            return fail(404, reason, reason_len, "unknown job");
        memcpy(out->job, jobbuf, sizeof jobbuf);
    }

    if (!method_in(method, row->methods))
        return fail(405, reason, reason_len, "method not allowed");

    if (cap_epoch != SIZE_MAX &&
        (sc_pct_decode(seg[cap_epoch], seglen[cap_epoch], 0, buf,
                       sizeof buf) < 0 ||
         sc_parse_u64(buf, SC_INT_PARAM_MAX, &out->epoch) != 0))
        return fail(400, reason, reason_len,
                    "epoch must be an integer in 0..2^63-1");
    if (cap_index != SIZE_MAX) {
        /* sample i of the unshuffled order: one sample, as a stream of
         * rank 0 of 1 from global index i */
        if (sc_pct_decode(seg[cap_index], seglen[cap_index], 0, buf,
                          sizeof buf) < 0 ||
            sc_parse_u64(buf, SIO_POSITION_MAX, &out->global_start) != 0)
            return fail(400, reason, reason_len,
                        "sample index must be an integer in 0..%llu",
                        (unsigned long long)SIO_POSITION_MAX);
        out->world = 1;
    }
    accepted = row->params;
    if (accepted) {
        unsigned st = parse_query(query, query_len, accepted, out, reason,
                                  reason_len);
        if (st != 200)
            return st;
    }
    out->route = route;
    return 200;
}
