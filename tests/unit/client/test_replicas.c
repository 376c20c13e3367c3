/*
 * test_replicas.c — the C client's replica set (shardcast_client.h:
 * scc_options.replicas, scc_route, scc_replicas_verify; clients/c/replicas.h)
 * without shardcastd:
 *   - the routing rule and the failover candidate order;
 *   - the comparison of the replicas' /v1/topology?job= answers: a correct
 *     set, two replicas claiming one place, a different R, fingerprints
 *     that differ (with the differing "order" fields and each replica's
 *     value, equal values grouped), no fingerprint, no answer at all;
 *   - streams from fake replicas (tests/unit/testhttpd.h) that state the
 *     identity as shardcastd does, in both formats: the part is asked for
 *     with replica=J at the home replica; a home that breaks mid-share and
 *     then stays down is failed over to the next candidate at the position
 *     reached, every sample once, told to on_failover and counted; a dead
 *     home at open; a replica that answers 503 to the check and then
 *     answers; a replica that cannot be reached is skipped by the check;
 *     SCC_ERR_CONFIG for a replica that serves another part, a stream with
 *     another fingerprint, one without identity (unless no_verify), and a
 *     misplaced replica; W < R refused.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shardcast_client.h"
#include "shardio_wire.h"
#include "testhttpd.h"
/* The library's internal helpers (not in the public header). */
#include "../../../clients/c/replicas.h"

#define FP_A "0123456789abcdef0123456789abcdef"
#define FP_B "fedcba9876543210fedcba9876543210"
#define PART_SAMPLES 12u /* samples of each consumer's share */

/* ------------------------------------------------------------------ */
/* Pure pieces                                                          */

static void test_route_and_candidates(void)
{
    uint32_t j, l, lw;
    CHECK(scc_route(7, 9, 3, &j, &l, &lw) == SCC_OK);
    CHECK(j == 1 && l == 2 && lw == 3);
    CHECK(scc_route(4, 5, 3, &j, &l, &lw) == SCC_OK);
    CHECK(j == 1 && l == 1 && lw == 2);
    CHECK(scc_route(2, 5, 3, &j, &l, &lw) == SCC_OK);
    CHECK(j == 2 && l == 0 && lw == 1);
    CHECK(scc_route(0, 2, 3, &j, &l, &lw) == SCC_ERR_INVALID); /* W < R */
    CHECK(scc_route(5, 5, 1, &j, &l, &lw) == SCC_ERR_INVALID); /* c >= W */
    CHECK(scc_route(0, 1, 0, &j, &l, &lw) == SCC_ERR_INVALID);
    CHECK(scc_route(UINT32_MAX - 1, UINT32_MAX, 2, &j, &l, &lw) == SCC_OK);
    CHECK(j == 0 && lw == UINT32_MAX / 2 + 1);

    /* Home first, then (J + 1 + ((l + i) mod (R - 1))) mod R, i = 0..R-2,
     * and round again. */
    CHECK(scc_candidate(1, 0, 3, 0) == 1);
    CHECK(scc_candidate(1, 0, 3, 1) == 2);
    CHECK(scc_candidate(1, 0, 3, 2) == 0);
    CHECK(scc_candidate(1, 0, 3, 3) == 1);
    CHECK(scc_candidate(1, 1, 3, 1) == 0);
    CHECK(scc_candidate(1, 1, 3, 2) == 2);
    CHECK(scc_candidate(0, 5, 1, 1) == 0);
    /* A dead replica's consumers spread over the others. */
    uint32_t first[4] = {0, 0, 0, 0};
    for (uint32_t lr = 0; lr < 6; lr++)
        first[scc_candidate(2, lr, 4, 1)]++;
    CHECK(first[2] == 0 && first[0] == 2 && first[1] == 2 && first[3] == 2);
    /* Every candidate list is a permutation of the replicas. */
    for (uint32_t R = 1; R < 7; R++)
        for (uint32_t h = 0; h < R; h++)
            for (uint32_t lr = 0; lr < 9; lr++) {
                uint32_t seen = 0;
                for (uint32_t i = 0; i < R; i++)
                    seen |= 1u << scc_candidate(h, lr, R, i);
                CHECK(seen == (1u << R) - 1);
            }
}

static char *topo_body(int j, int r, const char *fp, int seed,
                       const char *partition)
{
    char *b = malloc(1024);
    if (!fp)
        snprintf(b, 1024, "{\"replica\": %d, \"replicas\": %d}", j, r);
    else
        snprintf(b, 1024,
                 "{\"replica\": %d, \"replicas\": %d, \"rule\": \"...\", "
                 "\"job\": {\"name\": \"t\", \"fingerprint\": \"%s\", "
                 "\"order\": {\"contract\": 1, \"shards\": "
                 "\"00112233aabbccdd\", \"nshards\": 6, \"seed\": %d, "
                 "\"interleave\": 2, \"shuffle_buffer\": 32, \"partition\": "
                 "\"%s\", \"mix\": \"none\", \"replicas\": %d}}}",
                 j, r, fp, seed, partition, r);
    return b;
}

static void test_compare(void)
{
    const char *urls[3] = {"http://a:1", "http://b:2", "http://c:3"};
    char *bodies[3] = {NULL, NULL, NULL};
    const char *notes[3] = {NULL, NULL, NULL};
    char fp[SCC_FINGERPRINT_MAX + 1], msg[SCC_REPLICAS_MSG_MAX];
#define CMP(n)                                                             \
    scc_replicas_compare(n, urls, (const char *const *)bodies, notes, "t", \
                         fp, msg, sizeof msg)
#define FREE_BODIES()                                                      \
    do {                                                                   \
        for (int i_ = 0; i_ < 3; i_++) {                                   \
            free(bodies[i_]);                                              \
            bodies[i_] = NULL;                                             \
        }                                                                  \
    } while (0)

    /* A correct set. */
    for (int k = 0; k < 3; k++)
        bodies[k] = topo_body(k, 3, FP_A, 7, "even-drop");
    CHECK(CMP(3) == SCC_OK);
    CHECK_STR(fp, FP_A);
    /* One not answering: skipped. */
    free(bodies[1]);
    bodies[1] = NULL;
    notes[1] = "connection refused";
    CHECK(CMP(3) == SCC_OK);
    CHECK_STR(fp, FP_A);
    FREE_BODIES();

    /* None answering. */
    notes[0] = notes[2] = "connection refused";
    CHECK(CMP(3) == SCC_ERR_CONNECT);
    CHECK(strstr(msg, "no replica answered") && strstr(msg, "http://c:3") &&
          strstr(msg, "connection refused"));
    notes[0] = notes[1] = notes[2] = NULL;

    /* Two replicas claiming replica 0 of 2. */
    bodies[0] = topo_body(0, 2, FP_A, 7, "even-drop");
    bodies[1] = topo_body(0, 2, FP_A, 7, "even-drop");
    CHECK(CMP(2) == SCC_ERR_CONFIG);
    CHECK(strstr(msg, "http://a:1 and http://b:2 both report replica 0 of 2"));
    CHECK(strstr(msg, "http://b:2 is given as replica 1"));
    CHECK(strstr(msg, "http://a:1 = replica 0 of 2"));
    FREE_BODIES();

    /* Another R. */
    bodies[0] = topo_body(0, 2, FP_A, 7, "even-drop");
    bodies[1] = topo_body(1, 3, FP_A, 7, "even-drop");
    CHECK(CMP(2) == SCC_ERR_CONFIG);
    CHECK(strstr(msg, "http://b:2 reports replicas = 3, but the set given "
                      "has 2"));
    FREE_BODIES();

    /* Fingerprints differ: the fields that differ, each replica's value,
     * equal values grouped. */
    bodies[0] = topo_body(0, 3, FP_A, 7, "even-drop");
    bodies[1] = topo_body(1, 3, FP_B, 8, "even-drop");
    bodies[2] = topo_body(2, 3, FP_A, 7, "none");
    CHECK(CMP(3) == SCC_ERR_CONFIG);
    CHECK(strstr(msg, "disagree on the order of job t"));
    CHECK(strstr(msg, FP_A " at http://a:1 and http://c:3, " FP_B
                      " at http://b:2"));
    CHECK(strstr(msg, "seed: 7 at http://a:1 and http://c:3, 8 at "
                      "http://b:2"));
    CHECK(strstr(msg, "partition: \"even-drop\" at http://a:1 and "
                      "http://b:2, \"none\" at http://c:3"));
    CHECK(strstr(msg, "interleave") == NULL);
    FREE_BODIES();

    /* No fingerprint (a server without the check). */
    bodies[0] = topo_body(0, 1, NULL, 0, NULL);
    CHECK(CMP(1) == SCC_ERR_CONFIG);
    CHECK(strstr(msg, "states no fingerprint"));
    FREE_BODIES();

    /* Not the expected JSON. */
    bodies[0] = strdup("[1, 2]");
    CHECK(CMP(1) == SCC_ERR_PROTOCOL);
    FREE_BODIES();

    /* A small message buffer: cut, never overrun. */
    bodies[0] = topo_body(0, 2, FP_A, 7, "even-drop");
    bodies[1] = topo_body(0, 2, FP_B, 8, "none");
    char tiny[40];
    CHECK(scc_replicas_compare(2, urls, (const char *const *)bodies, notes,
                               "t", fp, tiny, sizeof tiny) == SCC_ERR_CONFIG);
    CHECK(strlen(tiny) == sizeof tiny - 1);
    FREE_BODIES();
#undef CMP
#undef FREE_BODIES
}

/* ------------------------------------------------------------------ */
/* Fake replicas                                                        */

enum {
    M_OK = 0,      /* serves what is asked for */
    M_CUT_DIE,     /* the first stream breaks after 3 samples, then every
                      request is dropped unanswered */
    M_DEAD,        /* every request dropped unanswered */
    M_WRONG_PART,  /* serves its own part, whatever replica= says */
    M_OTHER_FP,    /* streams with FP_B */
    M_NO_IDENT,    /* streams without identity */
    M_BUSY_ONCE    /* the first topology request gets 503 */
};

typedef struct rep {
    int j, R;        /* what it reports */
    int mode;
    _Atomic int streams, topos;
    char last[4096]; /* the last stream request's path */
    pthread_mutex_t mu;
    thttp srv;
    char url[64];
} rep;

static sio_code sock_write(void *ud, const void *data, size_t len)
{
    const int *fd = ud;
    return thttp_write(*fd, data, len) ? SIO_ERR_IO : SIO_OK;
}

static int qparam(const char *path, const char *name, char *buf, size_t len)
{
    const char *q = strchr(path, '?');
    size_t n = strlen(name);
    while (q) {
        q++;
        if (strncmp(q, name, n) == 0 && q[n] == '=') {
            size_t vl = strcspn(q + n + 1, "&");
            if (vl >= len)
                vl = len - 1;
            memcpy(buf, q + n + 1, vl);
            buf[vl] = '\0';
            return 0;
        }
        q = strchr(q, '&');
    }
    return -1;
}

static int rep_handler(void *ud, int fd, const thttp_req *r)
{
    rep *p = ud;
    if (strncmp(r->path, "/v1/topology", 12) == 0) {
        int n = atomic_fetch_add(&p->topos, 1);
        if (p->mode == M_DEAD)
            return 0;
        if (p->mode == M_BUSY_ONCE && n == 0) {
            static const char b[] = "error: job t is resolving\n";
            thttp_respond(fd, 503, "Retry-After: 1\r\n", b, sizeof b - 1);
            return 0;
        }
        char *b = topo_body(p->j, p->R, FP_A, 7, "even-drop");
        thttp_respond(fd, 200, "Content-Type: application/json\r\n", b,
                      strlen(b));
        free(b);
        return 0;
    }
    int n = atomic_fetch_add(&p->streams, 1);
    pthread_mutex_lock(&p->mu);
    snprintf(p->last, sizeof p->last, "%s", r->path);
    pthread_mutex_unlock(&p->mu);
    if (p->mode == M_DEAD || (p->mode == M_CUT_DIE && n > 0))
        return 0; /* closed without an answer */

    char fmt[16] = "frames", sv[32] = "0", rv[16] = "0", wv[16] = "1",
         jv[16] = "";
    qparam(r->path, "format", fmt, sizeof fmt);
    qparam(r->path, "start", sv, sizeof sv);
    qparam(r->path, "rank", rv, sizeof rv);
    qparam(r->path, "world", wv, sizeof wv);
    uint32_t part = qparam(r->path, "replica", jv, sizeof jv) == 0
                        ? (uint32_t)strtoul(jv, NULL, 10)
                        : (uint32_t)p->j;
    if (p->mode == M_WRONG_PART)
        part = (uint32_t)p->j;
    uint64_t start = strtoull(sv, NULL, 10);
    uint32_t rank = (uint32_t)strtoul(rv, NULL, 10);
    uint32_t world = (uint32_t)strtoul(wv, NULL, 10);
    int frames = strcmp(fmt, "frames") == 0;
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
                      "Connection: close\r\n\r\n",
                      frames ? SIO_FRAMES_CONTENT_TYPE : "application/x-tar");
    thttp_write(fd, head, (size_t)hl);

    int sinkv[1] = {fd};
    sio_wenc *w = NULL;
    sio_error err;
    sio_code rc;
    const char *fp = p->mode == M_OTHER_FP ? FP_B : FP_A;
    int ident = p->mode != M_NO_IDENT;
    if (frames) {
        sio_frames_header h;
        memset(&h, 0, sizeof h);
        h.job = "t";
        h.rank = rank;
        h.world = world;
        h.start = start;
        h.partition = SIO_PARTITION_EVEN_DROP;
        h.fingerprint = ident ? fp : NULL;
        h.replica = part;
        h.replicas = (uint32_t)p->R;
        h.served_by = (uint32_t)p->j;
        rc = sio_framew_create(&h, NULL, 0, sock_write, sinkv, &w, &err);
    } else {
        rc = sio_tarw_create(NULL, 0, sock_write, sinkv, &w, &err);
        if (rc == SIO_OK && ident) {
            sio_stream_ident id;
            memset(&id, 0, sizeof id);
            snprintf(id.job, sizeof id.job, "t");
            snprintf(id.fingerprint, sizeof id.fingerprint, "%s", fp);
            id.replica = part;
            id.replicas = (uint32_t)p->R;
            id.served_by = (uint32_t)p->j;
            rc = sio_tarw_write_ident(w, &id, &err);
        }
    }
    for (uint64_t i = start; rc == SIO_OK && i < PART_SAMPLES; i++) {
        if (p->mode == M_CUT_DIE && n == 0 && i == 3) {
            rc = SIO_ERR_IO; /* cut: no trailer */
            break;
        }
        char key[64], cls[64];
        snprintf(key, sizeof key, "p%u/r%u/s%04" PRIu64, part, rank, i);
        snprintf(cls, sizeof cls, "%u-%" PRIu64, part, i);
        sio_field f = {"cls", (const unsigned char *)cls, strlen(cls)};
        sio_sample s;
        memset(&s, 0, sizeof s);
        s.key = key;
        s.shard_url = "file:///d/x.tar";
        s.global_index = i * world + rank;
        s.nfields = 1;
        s.fields = &f;
        s.bytes = f.len;
        rc = sio_wenc_sample(w, &s, i);
    }
    if (rc == SIO_OK) {
        sio_tarw_summary sum = {0, rank, world, start, PART_SAMPLES - start,
                                PART_SAMPLES};
        sio_wenc_end(w, &sum);
    }
    sio_wenc_destroy(w);
    return 0;
}

static void rep_start(rep *p, int j, int R, int mode)
{
    memset(p, 0, sizeof *p);
    p->j = j;
    p->R = R;
    p->mode = mode;
    pthread_mutex_init(&p->mu, NULL);
    if (thttp_start(&p->srv, rep_handler, p) != 0) {
        fprintf(stderr, "cannot start a fake replica\n");
        exit(1);
    }
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d", p->srv.port);
}

static void rep_stop(rep *p)
{
    thttp_stop(&p->srv);
    pthread_mutex_destroy(&p->mu);
}

typedef struct told {
    int n;
    scc_failover last;
    char reason[256];
} told;

static void on_failover(void *ud, const scc_failover *f)
{
    told *t = ud;
    t->n++;
    t->last = *f;
    snprintf(t->reason, sizeof t->reason, "%s", f->reason);
    t->last.reason = t->reason;
    t->last.from_url = t->last.to_url = NULL;
}

static void opts_set(scc_options *o, const char *const *urls, size_t n,
                     uint32_t rank, uint32_t world, scc_format fmt, told *t)
{
    scc_options_init(o);
    o->replicas = urls;
    o->nreplicas = n;
    o->job = "t";
    o->rank = rank;
    o->world = world;
    o->format = fmt;
    o->reconnect_delay_ms = 10;
    o->idle_timeout_ms = 2000;
    o->connect_timeout_ms = 2000;
    o->on_failover = on_failover;
    o->on_failover_ud = t;
}

/* Read the share; every sample must be part `part`'s, in order from
 * position `from`. Returns the final code. */
static scc_code read_share(scc_stream *s, uint32_t part, uint64_t from,
                           uint64_t *count)
{
    const scc_sample *smp;
    scc_code rc;
    uint64_t want = from;
    *count = 0;
    while ((rc = scc_stream_next(s, &smp)) == SCC_OK && smp) {
        char cls[64];
        snprintf(cls, sizeof cls, "%u-%" PRIu64, part, want);
        const scc_field *f = scc_sample_field(smp, "cls");
        CHECK_EQ_U64(smp->position, want);
        CHECK(f && f->len == strlen(cls) && memcmp(f->data, cls, f->len) == 0);
        want++;
        (*count)++;
    }
    return rc;
}

static void test_streams(void)
{
    scc_format fmts[2] = {SCC_FORMAT_FRAMES, SCC_FORMAT_TAR};
    for (int fi = 0; fi < 2; fi++) {
        rep r[3];
        const char *urls[3];
        scc_options o;
        scc_stream *s = NULL;
        told t;
        uint64_t n;

        /* Consumer 4 of 6 over 3 replicas: home 1, local rank 1 of 2; its
         * home breaks after 3 samples and stays down: the next candidate,
         * (1 + 1 + (1 mod 2)) mod 3 = 0, takes over at position 3. */
        rep_start(&r[0], 0, 3, M_OK);
        rep_start(&r[1], 1, 3, M_CUT_DIE);
        rep_start(&r[2], 2, 3, M_OK);
        for (int k = 0; k < 3; k++)
            urls[k] = r[k].url;
        memset(&t, 0, sizeof t);
        opts_set(&o, urls, 3, 4, 6, fmts[fi], &t);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(strstr(scc_stream_url(s), r[1].url) == scc_stream_url(s));
        CHECK(strstr(scc_stream_url(s), "rank=1&world=2&"));
        CHECK(strstr(scc_stream_url(s), "&replica=1&"));
        CHECK(scc_stream_replica(s) == 1);
        CHECK(read_share(s, 1, 0, &n) == SCC_OK);
        CHECK_EQ_U64(n, PART_SAMPLES);
        CHECK_EQ_U64(scc_stream_failovers(s), 1);
        CHECK(scc_stream_replica(s) == 0);
        CHECK(t.n == 1 && t.last.from == 1 && t.last.to == 0 &&
              t.last.part == 1 && t.last.attempts == 1);
        /* (tar: a sample is complete once the next one's header is in,
         * so the cut after 3 samples leaves 2) */
        uint64_t reached = fmts[fi] == SCC_FORMAT_TAR ? 2 : 3;
        CHECK_EQ_U64(t.last.position, reached);
        CHECK(strstr(scc_stream_url(s), r[0].url) == scc_stream_url(s));
        char want[64];
        snprintf(want, sizeof want, "&replica=1&start=%" PRIu64, reached);
        CHECK(strstr(scc_stream_url(s), want));
        const scc_ident *id = scc_stream_ident(s);
        CHECK(id && id->replica == 1 && id->served_by == 0 &&
              id->replicas == 3 && strcmp(id->fingerprint, FP_A) == 0);
        scc_stream_close(s);

        /* The same consumer again, its home now down from the start:
         * open goes to the next candidate at once. */
        memset(&t, 0, sizeof t);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 1, 0, &n) == SCC_OK);
        CHECK_EQ_U64(n, PART_SAMPLES);
        CHECK(t.n == 1 && t.last.from == 1 && t.last.to == 0);
        CHECK_EQ_U64(t.last.position, 0);
        scc_stream_close(s);

        /* Consumer 1 of 6 (home 1, local rank 0): the next candidate is
         * (1 + 1 + 0) mod 3 = 2. */
        memset(&t, 0, sizeof t);
        opts_set(&o, urls, 3, 1, 6, fmts[fi], &t);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 1, 0, &n) == SCC_OK);
        CHECK(t.n == 1 && t.last.to == 2);
        pthread_mutex_lock(&r[2].mu);
        CHECK(strstr(r[2].last, "rank=0&world=2&") &&
              strstr(r[2].last, "replica=1&"));
        pthread_mutex_unlock(&r[2].mu);
        scc_stream_close(s);

        /* A replica that serves its own part, not the one asked for (1 and
         * 2 down, so that consumer 1's stream goes to 0): a config error,
         * not retried. */
        r[0].mode = M_WRONG_PART;
        r[1].mode = M_DEAD;
        r[2].mode = M_DEAD;
        opts_set(&o, urls, 3, 1, 6, fmts[fi], &t);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 1, 0, &n) == SCC_ERR_CONFIG);
        CHECK(strstr(scc_stream_errmsg(s), "streams replica 0 of 3's part"));
        CHECK(strstr(scc_stream_errmsg(s), "replica 1 of 3's was asked for"));
        scc_stream_close(s);

        /* Another fingerprint in a stream. */
        r[0].mode = r[1].mode = r[2].mode = M_OK;
        r[2].mode = M_OTHER_FP;
        opts_set(&o, urls, 3, 2, 6, fmts[fi], &t);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 2, 0, &n) == SCC_ERR_CONFIG);
        CHECK(n == 0);
        CHECK(strstr(scc_stream_errmsg(s), "with fingerprint " FP_B));
        scc_stream_close(s);

        /* No identity: refused when verifying, read under no_verify. */
        r[2].mode = M_NO_IDENT;
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 2, 0, &n) == SCC_ERR_CONFIG);
        CHECK(strstr(scc_stream_errmsg(s), "without the replica set's "
                                           "identity"));
        scc_stream_close(s);
        o.no_verify = 1;
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 2, 0, &n) == SCC_OK);
        CHECK_EQ_U64(n, PART_SAMPLES);
        CHECK(scc_stream_ident(s) == NULL);
        scc_stream_close(s);
        CHECK(atomic_load(&r[0].topos) > 0);
        int topos = atomic_load(&r[0].topos);

        /* A fingerprint already verified: no topology request. */
        r[2].mode = M_OK;
        opts_set(&o, urls, 3, 2, 6, fmts[fi], &t);
        o.fingerprint = FP_A;
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 2, 0, &n) == SCC_OK);
        scc_stream_close(s);
        CHECK(atomic_load(&r[0].topos) == topos);
        o.fingerprint = FP_B; /* and a wrong one is a config error */
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(read_share(s, 2, 0, &n) == SCC_ERR_CONFIG);
        scc_stream_close(s);

        /* The check: 503 asked again; a replica down is skipped. */
        r[0].mode = M_BUSY_ONCE;
        atomic_store(&r[0].topos, 0);
        r[1].mode = M_DEAD;
        opts_set(&o, urls, 3, 0, 6, fmts[fi], &t);
        CHECK(scc_stream_open(&o, &s) == SCC_OK);
        CHECK(atomic_load(&r[0].topos) == 2);
        CHECK(read_share(s, 0, 0, &n) == SCC_OK);
        scc_stream_close(s);
        char fp[SCC_FINGERPRINT_MAX + 1], msg[1024];
        CHECK(scc_replicas_verify(&o, fp, msg, sizeof msg) == SCC_OK);
        CHECK_STR(fp, FP_A);

        /* A replica in another place: the stream is never opened. */
        r[1].mode = M_OK;
        r[1].j = 0;
        CHECK(scc_stream_open(&o, &s) == SCC_ERR_CONFIG);
        CHECK(s && strstr(scc_stream_errmsg(s), "both report replica 0 of "
                                                "3"));
        CHECK(s && strstr(scc_stream_errmsg(s), r[1].url));
        scc_stream_close(s);
        int streams = atomic_load(&r[0].streams);
        CHECK(scc_replicas_verify(&o, fp, msg, sizeof msg) ==
              SCC_ERR_CONFIG);
        CHECK(atomic_load(&r[0].streams) == streams);
        r[1].j = 1;

        /* W < R, and a URL with a replica set. */
        opts_set(&o, urls, 3, 0, 2, fmts[fi], &t);
        CHECK(scc_stream_open(&o, &s) == SCC_ERR_INVALID);
        CHECK(s && strstr(scc_stream_errmsg(s), "every replica needs a "
                                                "consumer"));
        scc_stream_close(s);
        opts_set(&o, urls, 3, 0, 3, fmts[fi], &t);
        o.url = "http://127.0.0.1:1/v1/jobs/t/epochs/0/stream?rank=0&world=1";
        CHECK(scc_stream_open(&o, &s) == SCC_ERR_INVALID);
        scc_stream_close(s);

        /* Every replica down: open reports it, naming the home. */
        r[0].mode = r[1].mode = r[2].mode = M_DEAD;
        opts_set(&o, urls, 3, 0, 3, fmts[fi], &t);
        o.no_verify = 1;
        CHECK(scc_stream_open(&o, &s) == SCC_ERR_CUT);
        CHECK(s && strstr(scc_stream_errmsg(s), "no other replica could "
                                                "serve"));
        scc_stream_close(s);

        for (int k = 0; k < 3; k++)
            rep_stop(&r[k]);
    }
}

int main(void)
{
    CHECK(scc_global_init() == SCC_OK);
    test_route_and_candidates();
    test_compare();
    test_streams();
    CHECK_MAIN_END();
}
