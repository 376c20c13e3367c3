/*
 * replicas.c — libshardcast_client's replica set check and routing
 * (shardcast_client.h: scc_route, scc_replicas_verify; replicas.h: the
 * failover candidates and the comparison of the replicas' answers).
 *
 * scc_replicas_verify asks every replica for GET /v1/topology?job=JOB and
 * hands the bodies to scc_replicas_compare, which parses them with jansson
 * (each body is bounded by SCC_TOPOLOGY_BODY_MAX) and says, in one bounded
 * message, everything that is wrong: a replica in another place than the
 * one it is given, two replicas claiming the same place, a different R, and
 * fingerprints that differ, with the fields of the job's "order" objects
 * that differ and each replica's value.
 *
 * Threading: no shared state; scc_replicas_verify blocks the calling
 * thread (one GET at a time, with the retry backoff for a 503).
 */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replicas.h"
#include "shardio_wire.h"

/* Longest value of an order field quoted in a message. */
#define VALUE_TEXT_MAX 64u
/* The longest backoff between two asks of a replica answering 503. */
#define VERIFY_DELAY_MAX_MS 5000u

scc_code scc_route(uint32_t consumer, uint32_t world, uint32_t replicas,
                   uint32_t *replica, uint32_t *local_rank,
                   uint32_t *local_world)
{
    if (replicas == 0 || world == 0 || consumer >= world || world < replicas)
        return SCC_ERR_INVALID;
    uint32_t j = consumer % replicas;
    *replica = j;
    *local_rank = consumer / replicas;
    /* (W - J + R - 1) div R, in 64 bits: W + R may exceed 2^32. */
    *local_world = (uint32_t)(((uint64_t)world - j + replicas - 1) / replicas);
    return SCC_OK;
}

uint32_t scc_candidate(uint32_t home, uint32_t local_rank, uint32_t replicas,
                       uint32_t i)
{
    if (replicas <= 1 || i % replicas == 0)
        return home;
    i %= replicas;
    uint64_t off = ((uint64_t)local_rank + i - 1) % (replicas - 1);
    return (uint32_t)(((uint64_t)home + 1 + off) % replicas);
}

int scc_fingerprint_ok(const char *fp)
{
    size_t n = fp ? strlen(fp) : 0;
    return n >= 1 && n <= SCC_FINGERPRINT_MAX &&
           strspn(fp, "0123456789abcdef") == n;
}

/* ------------------------------------------------------------------ */
/* A bounded message                                                    */

typedef struct msgbuf {
    char *p;
    size_t len, cap; /* cap includes the NUL */
} msgbuf;

static void mb_add(msgbuf *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void mb_add(msgbuf *m, const char *fmt, ...)
{
    va_list ap;
    if (m->len + 1 >= m->cap)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(m->p + m->len, m->cap - m->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= m->cap - m->len) {
        m->len = m->cap - 1;
        /* Truncated: say so. */
        if (m->cap > 4)
            memcpy(m->p + m->cap - 4, "...", 4);
    } else {
        m->len += (size_t)n;
    }
}

/* ------------------------------------------------------------------ */
/* The answers                                                          */

typedef struct answer {
    json_t *root;
    int answered;      /* a body was given */
    int valid;         /* replica/replicas are integers */
    long long replica, replicas;
    const char *fp;    /* job.fingerprint, or NULL */
    json_t *order;     /* job.order, or NULL */
} answer;

/* value as compact JSON text (bounded), "(absent)" for NULL. */
static void value_text(json_t *v, char *out, size_t len)
{
    if (!v) {
        snprintf(out, len, "(absent)");
        return;
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!t) {
        snprintf(out, len, "?");
        return;
    }
    if (strlen(t) > VALUE_TEXT_MAX)
        snprintf(out, len, "%.*s...", (int)VALUE_TEXT_MAX, t);
    else
        snprintf(out, len, "%s", t);
    free(t);
}

static int same_value(json_t *a, json_t *b)
{
    if (!a || !b)
        return a == b;
    return json_equal(a, b);
}

/* "v1 at URL_a and URL_b, v2 at URL_c": each distinct value of key in the
 * answering replicas' order objects (key NULL: the fingerprints). */
static void list_values(msgbuf *m, const answer *as, size_t n,
                        const char *const *urls, const char *key)
{
    char *done = calloc(n ? n : 1, 1);
    int first_group = 1;
    if (!done)
        return;
    for (size_t k = 0; k < n; k++) {
        if (!as[k].answered || done[k])
            continue;
        json_t *vk = key ? json_object_get(as[k].order, key) : NULL;
        char text[VALUE_TEXT_MAX + 8];
        if (key)
            value_text(vk, text, sizeof text);
        else
            snprintf(text, sizeof text, "%s", as[k].fp ? as[k].fp : "(none)");
        mb_add(m, "%s%s at %s", first_group ? "" : ", ", text, urls[k]);
        first_group = 0;
        done[k] = 1;
        for (size_t k2 = k + 1; k2 < n; k2++) {
            if (!as[k2].answered || done[k2])
                continue;
            int eq = key ? same_value(vk, json_object_get(as[k2].order, key))
                         : (as[k].fp && as[k2].fp &&
                            strcmp(as[k].fp, as[k2].fp) == 0);
            if (eq) {
                done[k2] = 1;
                mb_add(m, " and %s", urls[k2]);
            }
        }
    }
    free(done);
}

/* Every key of the answering order objects whose values differ. */
static size_t list_order_diff(msgbuf *m, const answer *as, size_t n,
                              const char *const *urls)
{
    size_t ndiff = 0;
    for (size_t k = 0; k < n; k++) {
        const char *key;
        json_t *v;
        if (!as[k].answered || !as[k].order)
            continue;
        json_object_foreach(as[k].order, key, v) {
            /* Listed already, from an earlier replica's object? */
            int seen = 0;
            for (size_t e = 0; e < k && !seen; e++)
                seen = as[e].answered && as[e].order &&
                       json_object_get(as[e].order, key) != NULL;
            if (seen)
                continue;
            int differs = 0;
            for (size_t k2 = 0; k2 < n && !differs; k2++)
                if (as[k2].answered)
                    differs = !same_value(v, json_object_get(as[k2].order,
                                                             key));
            if (!differs)
                continue;
            mb_add(m, "%s%s: ", ndiff ? "; " : "", key);
            list_values(m, as, n, urls, key);
            ndiff++;
        }
    }
    return ndiff;
}

scc_code scc_replicas_compare(size_t n, const char *const *urls,
                              const char *const *bodies,
                              const char *const *notes, const char *job,
                              char fp[SCC_FINGERPRINT_MAX + 1], char *msg,
                              size_t len)
{
    scc_code rc = SCC_OK;
    answer *as = calloc(n ? n : 1, sizeof *as);
    char *probs = malloc(SCC_REPLICAS_MSG_MAX);
    char *done = calloc(n ? n : 1, 1);
    msgbuf out = {msg, 0, len};
    msgbuf pb = {probs, 0, SCC_REPLICAS_MSG_MAX};
    size_t nans = 0, nprob = 0;

    if (msg && len)
        msg[0] = '\0';
    fp[0] = '\0';
    if (!as || !probs || !done) {
        rc = SCC_ERR_NOMEM;
        mb_add(&out, "out of memory");
        goto out;
    }
    probs[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        answer *a = &as[k];
        json_error_t jerr;
        if (!bodies[k])
            continue;
        a->answered = 1;
        nans++;
        a->root = json_loads(bodies[k], 0, &jerr);
        json_t *jr = json_object_get(a->root, "replica");
        json_t *jn = json_object_get(a->root, "replicas");
        if (!json_is_object(a->root) || !json_is_integer(jr) ||
            !json_is_integer(jn)) {
            rc = SCC_ERR_PROTOCOL;
            mb_add(&out, "replica set check for job %s: %s (given as replica "
                   "%zu of %zu) answered GET /v1/topology with something "
                   "else than {\"replica\": J, \"replicas\": R, ...}%s%s",
                   job, urls[k], k, n, a->root ? "" : ": ",
                   a->root ? "" : jerr.text);
            goto out;
        }
        a->valid = 1;
        a->replica = json_integer_value(jr);
        a->replicas = json_integer_value(jn);
        json_t *jj = json_object_get(a->root, "job");
        const char *f = json_string_value(json_object_get(jj, "fingerprint"));
        a->fp = f && scc_fingerprint_ok(f) ? f : NULL;
        a->order = json_object_get(jj, "order");
        if (!json_is_object(a->order))
            a->order = NULL;
    }
    if (nans == 0) {
        rc = SCC_ERR_CONNECT;
        mb_add(&out, "replica set check for job %s: no replica answered GET "
               "/v1/topology:", job);
        for (size_t k = 0; k < n; k++)
            mb_add(&out, "%s %s (replica %zu of %zu): %s", k ? ";" : "",
                   urls[k], k, n,
                   notes && notes[k] ? notes[k] : "no answer");
        goto out;
    }

    /* Two or more replicas claiming the same place. */
    for (size_t k = 0; k < n; k++) {
        if (!as[k].answered || done[k])
            continue;
        size_t same = 0;
        for (size_t k2 = k + 1; k2 < n; k2++)
            same += as[k2].answered && as[k2].replica == as[k].replica;
        if (!same)
            continue;
        mb_add(&pb, "%s%s", nprob++ ? "; " : "", urls[k]);
        size_t left = same;
        for (size_t k2 = k + 1; k2 < n; k2++)
            if (as[k2].answered && as[k2].replica == as[k].replica) {
                done[k2] = 1;
                left--;
                mb_add(&pb, "%s%s", left ? ", " : " and ", urls[k2]);
            }
        mb_add(&pb, " %s report replica %lld of %lld", same > 1 ? "all" : "both",
               as[k].replica, as[k].replicas);
    }
    /* A replica in another place, or with another R. */
    for (size_t k = 0; k < n; k++) {
        const answer *a = &as[k];
        if (!a->answered)
            continue;
        if (a->replica != (long long)k)
            mb_add(&pb, "%s%s is given as replica %zu (its place in the list) "
                   "but reports replica %lld of %lld", nprob++ ? "; " : "",
                   urls[k], k, a->replica, a->replicas);
        if (a->replicas != (long long)n)
            mb_add(&pb, "%s%s reports replicas = %lld, but the set given has "
                   "%zu", nprob++ ? "; " : "", urls[k], a->replicas, n);
    }
    /* The order: a fingerprint each, all the same. */
    int fp_missing = 0, fp_differ = 0;
    const char *common = NULL;
    for (size_t k = 0; k < n; k++) {
        if (!as[k].answered)
            continue;
        if (!as[k].fp) {
            fp_missing = 1;
            mb_add(&pb, "%s%s states no fingerprint for job %s (a shardcastd "
                   "without the replica set check? no_verify / --no-verify "
                   "skips it)", nprob++ ? "; " : "", urls[k], job);
            continue;
        }
        if (!common)
            common = as[k].fp;
        else if (strcmp(common, as[k].fp) != 0)
            fp_differ = 1;
    }
    if (fp_differ) {
        mb_add(&pb, "%sthe replicas disagree on the order of job %s "
               "(fingerprint ", nprob++ ? "; " : "", job);
        list_values(&pb, as, n, urls, NULL);
        mb_add(&pb, "); differing settings: ");
        if (list_order_diff(&pb, as, n, urls) == 0)
            mb_add(&pb, "none in \"order\" (the fingerprints differ all the "
                   "same)");
    }
    if (nprob) {
        rc = SCC_ERR_CONFIG;
        mb_add(&out, "replica set check failed for job %s: %s. Replicas "
               "given:", job, probs);
        for (size_t k = 0; k < n; k++) {
            if (as[k].answered)
                mb_add(&out, "%s %s = replica %zu of %zu (reports %lld of "
                       "%lld)", k ? "," : "", urls[k], k, n, as[k].replica,
                       as[k].replicas);
            else
                mb_add(&out, "%s %s = replica %zu of %zu (no answer: %s)",
                       k ? "," : "", urls[k], k, n,
                       notes && notes[k] ? notes[k] : "skipped");
        }
        goto out;
    }
    (void)fp_missing;
    snprintf(fp, SCC_FINGERPRINT_MAX + 1, "%s", common);
out:
    if (as)
        for (size_t k = 0; k < n; k++)
            json_decref(as[k].root);
    free(as);
    free(probs);
    free(done);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Asking the replicas                                                  */

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

scc_code scc_replicas_verify(const scc_options *o,
                             char fp[SCC_FINGERPRINT_MAX + 1], char *errmsg,
                             size_t errlen)
{
    scc_code rc = SCC_OK;
    char dummy[8];
    char *esc = NULL;
    size_t n = o ? o->nreplicas : 0;
    char **urls = NULL, **bodies = NULL, **notes = NULL;

    if (!errmsg) {
        errmsg = dummy;
        errlen = sizeof dummy;
    }
    errmsg[0] = '\0';
    fp[0] = '\0';
    if (!o || !o->replicas || n == 0 || n > SCC_REPLICAS_MAX || !o->job ||
        !*o->job) {
        snprintf(errmsg, errlen, "replica set check: need a job and 1..%u "
                 "replica URLs", SCC_REPLICAS_MAX);
        return SCC_ERR_INVALID;
    }
    if (scc_global_init() != SCC_OK)
        return SCC_ERR_NOMEM;
    urls = calloc(n, sizeof *urls);
    bodies = calloc(n, sizeof *bodies);
    notes = calloc(n, sizeof *notes);
    esc = curl_easy_escape(NULL, o->job, 0);
    if (!urls || !bodies || !notes || !esc) {
        rc = SCC_ERR_NOMEM;
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        const char *r = o->replicas[k];
        size_t rl = r ? strlen(r) : 0;
        while (rl && r[rl - 1] == '/')
            rl--;
        if (rl == 0 || rl > SCC_URL_MAX) {
            snprintf(errmsg, errlen, "replica %zu: empty or too long URL", k);
            rc = SCC_ERR_INVALID;
            goto out;
        }
        urls[k] = malloc(rl + 1);
        if (!urls[k]) {
            rc = SCC_ERR_NOMEM;
            goto out;
        }
        memcpy(urls[k], r, rl);
        urls[k][rl] = '\0';
    }
    /* Each request as a stream's head: within the header timeout (a
     * stopped replica accepts the connection and never answers). */
    uint32_t timeout = o->header_timeout_ms ? o->header_timeout_ms
                                            : SCC_HEADER_TIMEOUT_DEFAULT_MS;
    if (o->connect_timeout_ms + o->idle_timeout_ms &&
        timeout > o->connect_timeout_ms + o->idle_timeout_ms)
        timeout = o->connect_timeout_ms + o->idle_timeout_ms;
    for (size_t k = 0; k < n; k++) {
        size_t ul = strlen(urls[k]) + strlen(esc) + 32;
        char *url = malloc(ul);
        char em[512];
        uint32_t attempts = 0, delay = o->reconnect_delay_ms;
        uint64_t t0 = sio_now_ms();
        if (!url) {
            rc = SCC_ERR_NOMEM;
            goto out;
        }
        snprintf(url, ul, "%s/v1/topology?job=%s", urls[k], esc);
        for (;;) {
            size_t blen = 0;
            int st = 0;
            char *body = NULL;
            scc_code g = scc_http_get(url, o->token, timeout,
                                      SCC_TOPOLOGY_BODY_MAX, &body, &blen, &st,
                                      em, sizeof em);
            if (g == SCC_OK) {
                bodies[k] = body;
                break;
            }
            free(body);
            if (g == SCC_ERR_CONNECT || g == SCC_ERR_TIMEOUT ||
                g == SCC_ERR_CUT) {
                /* Not there: skipped; the others must still agree. */
                notes[k] = strdup(em);
                break;
            }
            if (g == SCC_ERR_HTTP && st == 503 &&
                attempts < o->max_reconnects &&
                (o->retry_budget_ms == 0 ||
                 sio_now_ms() + delay - t0 <= o->retry_budget_ms)) {
                /* The job is still resolving there: ask again. */
                sleep_ms(delay);
                attempts++;
                delay = delay * 2 > VERIFY_DELAY_MAX_MS ? VERIFY_DELAY_MAX_MS
                                                        : delay * 2;
                if (delay == 0)
                    delay = 1;
                continue;
            }
            snprintf(errmsg, errlen, "replica set check for job %s: %s "
                     "(replica %zu of %zu): GET /v1/topology?job=: %s%s",
                     o->job, urls[k], k, n, em,
                     st == 503 ? " (still, after the retry budget)" : "");
            rc = g;
            break;
        }
        free(url);
        if (rc != SCC_OK)
            goto out;
    }
    rc = scc_replicas_compare(n, (const char *const *)urls,
                              (const char *const *)bodies,
                              (const char *const *)notes, o->job, fp, errmsg,
                              errlen);
out:
    if (rc == SCC_ERR_NOMEM && !errmsg[0])
        snprintf(errmsg, errlen, "out of memory");
    for (size_t k = 0; k < n; k++) {
        if (urls)
            free(urls[k]);
        if (bodies)
            free(bodies[k]);
        if (notes)
            free(notes[k]);
    }
    free(urls);
    free(bodies);
    free(notes);
    curl_free(esc);
    return rc;
}
