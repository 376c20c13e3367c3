/*
 * peers.c — the other replicas of this server's set (see peers.h).
 */
#include "peers.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"
#include "shardio.h"

/* A poll of one peer may take at most this long (and never longer than
 * the interval). */
#define PEER_TIMEOUT_MS 3000u

enum {
    PEER_UNKNOWN = 0,
    PEER_OK,
    PEER_SELF,
    PEER_DOWN,
    PEER_MISMATCH,
    PEER_CONFLICT,
    PEER_NSTATES
};
static const char *const state_names[PEER_NSTATES] = {
    "unknown", "ok", "self", "down", "mismatch", "conflict"};

typedef struct peer {
    char *url;
    int state;
    long long replica;  /* what it answered, -1: nothing */
    long long replicas;
    char detail[800];
    uint64_t last_ms;   /* of the last answer */
} peer;

struct sc_peers {
    const sc_config *cfg;
    sc_jobs *jobs;
    char instance[SC_INSTANCE_LEN + 1];
    uint32_t npeers;    /* R with --peers, else 0 */
    peer *peers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int started;
    pthread_t thread;
    atomic_uint_fast64_t conflicts; /* transitions into conflict */
};

sc_peers *sc_peers_create(const sc_config *cfg, sc_jobs *jobs)
{
    sc_peers *p = calloc(1, sizeof *p);
    unsigned char rnd[SC_INSTANCE_LEN / 2];
    if (!p)
        return NULL;
    p->cfg = cfg;
    p->jobs = jobs;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        /* no entropy source: time and address still tell processes apart */
        uint64_t v = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)p ^
                     ((uint64_t)sio_now_ms() << 20);
        memcpy(rnd, &v, sizeof rnd < sizeof v ? sizeof rnd : sizeof v);
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(p->instance + 2 * i, 3, "%02x", rnd[i]);
    uint32_t R = cfg->replicas > 1 ? cfg->replicas : 1;
    if (cfg->peers) {
        char msg[300];
        char **urls = sc_peers_parse(cfg->peers, R, msg, sizeof msg);
        if (!urls) { /* validated with the settings: out of memory */
            sc_peers_destroy(p);
            return NULL;
        }
        p->peers = calloc(R, sizeof *p->peers);
        if (!p->peers) {
            sc_peers_free_urls(urls, R);
            sc_peers_destroy(p);
            return NULL;
        }
        for (uint32_t i = 0; i < R; i++) {
            p->peers[i].url = urls[i];
            p->peers[i].replica = p->peers[i].replicas = -1;
        }
        free(urls);
        p->npeers = R;
    }
    return p;
}

const char *sc_peers_instance(const sc_peers *p)
{
    return p->instance;
}

typedef struct body {
    char *data;
    size_t len;
} body;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    body *b = ud;
    size_t n = size * nmemb;
    if (n > SC_PEER_BODY_MAX - b->len)
        return 0; /* too large: the transfer fails */
    char *d = realloc(b->data, b->len + n + 1);
    if (!d)
        return 0;
    memcpy(d + b->len, ptr, n);
    b->data = d;
    b->len += n;
    d[b->len] = '\0';
    return n;
}

/* GET url/v1/topology: the parsed JSON object, or NULL with why. */
static json_t *fetch_topology(sc_peers *p, const char *url, char *why,
                              size_t why_len)
{
    char target[SC_PEER_URL_MAX + 32];
    body b = {NULL, 0};
    json_t *o = NULL;
    long code = 0;
    struct curl_slist *hdr = NULL;
    char auth[600];
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    uint32_t timeout = p->cfg->peer_interval_ms < PEER_TIMEOUT_MS
                           ? p->cfg->peer_interval_ms
                           : PEER_TIMEOUT_MS;
    snprintf(target, sizeof target, "%s/v1/topology", url);
    curl_easy_setopt(c, CURLOPT_URL, target);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (p->cfg->token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s",
                 p->cfg->token);
        hdr = curl_slist_append(NULL, auth);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK) {
        snprintf(why, why_len, "%s", curl_easy_strerror(rc));
    } else if (code != 200) {
        snprintf(why, why_len, "GET /v1/topology answered HTTP %ld", code);
    } else {
        json_error_t je;
        o = json_loadb(b.data ? b.data : "", b.len, 0, &je);
        if (!json_is_object(o)) {
            json_decref(o);
            o = NULL;
            snprintf(why, why_len, "GET /v1/topology: not a JSON object");
        }
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    free(b.data);
    return o;
}

/* Integer member in 0..max, else -1. */
static long long jnum(json_t *o, const char *k, long long max)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > max)
        return -1;
    return json_integer_value(v);
}

/* The state of peer k from its answer o (NULL: none, why says so). */
static int judge(sc_peers *p, uint32_t k, json_t *o, const char *why,
                 json_t *mine, peer *out)
{
    uint32_t J = p->cfg->replica, R = p->cfg->replicas > 1 ? p->cfg->replicas
                                                           : 1;
    const char *url = p->peers[k].url;
    out->replica = out->replicas = -1;
    out->detail[0] = '\0';
    if (!o) {
        snprintf(out->detail, sizeof out->detail, "%s", why);
        return PEER_DOWN;
    }
    const char *inst = json_string_value(json_object_get(o, "instance"));
    out->replica = jnum(o, "replica", UINT32_MAX);
    out->replicas = jnum(o, "replicas", UINT32_MAX);
    if (inst && strcmp(inst, p->instance) == 0) {
        if (k != J) {
            snprintf(out->detail, sizeof out->detail,
                     "this server (replica %" PRIu32 ") answers at %s, the "
                     "URL --peers gives replica %" PRIu32
                     ": its --replica or the list is wrong", J, url, k);
            return PEER_CONFLICT;
        }
        return PEER_SELF;
    }
    if (out->replica < 0 || out->replicas < 1) {
        snprintf(out->detail, sizeof out->detail,
                 "answers without a replica number");
        return PEER_MISMATCH;
    }
    if (out->replica == (long long)J && out->replicas == (long long)R) {
        snprintf(out->detail, sizeof out->detail,
                 "%s also serves replica %" PRIu32 " of %" PRIu32
                 ": two servers with one --replica serve the same part "
                 "twice (every sample of it would be delivered twice)",
                 url, J, R);
        return PEER_CONFLICT;
    }
    if (out->replicas != (long long)R) {
        snprintf(out->detail, sizeof out->detail,
                 "runs with --replicas %lld, this server with %" PRIu32,
                 out->replicas, R);
        return PEER_MISMATCH;
    }
    if (out->replica != (long long)k) {
        snprintf(out->detail, sizeof out->detail,
                 "answers as replica %lld, --peers lists it as replica "
                 "%" PRIu32, out->replica, k);
        return PEER_MISMATCH;
    }
    /* Jobs both serve must agree on what fixes their order. */
    json_t *theirs = json_object_get(o, "jobs");
    const char *name;
    json_t *fp;
    int st = PEER_OK;
    json_object_foreach(mine, name, fp) {
        const char *t = json_string_value(json_object_get(theirs, name));
        if (t && strcmp(t, json_string_value(fp)) != 0) {
            snprintf(out->detail, sizeof out->detail,
                     "job %.128s: fingerprint %s here, %.40s there (the "
                     "jobs differ in what fixes their order: compare GET "
                     "/v1/topology?job=%.128s on both)",
                     name, json_string_value(fp), t, name);
            st = PEER_MISMATCH;
            break;
        }
    }
    return st;
}

static int stopping(sc_peers *p)
{
    pthread_mutex_lock(&p->mu);
    int s = p->stop;
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void poll_once(sc_peers *p)
{
    /* One peer after the other, each bounded by PEER_TIMEOUT_MS; a stop
     * waits for the one in flight at most. This server's fingerprints,
     * once per round. */
    json_t *mine = sc_jobs_fingerprints(p->jobs);
    for (uint32_t k = 0; k < p->npeers && !stopping(p); k++) {
        char why[300] = "";
        json_t *o = fetch_topology(p, p->peers[k].url, why, sizeof why);
        peer now;
        memset(&now, 0, sizeof now);
        int st = judge(p, k, o, why, mine, &now);
        json_decref(o);
        pthread_mutex_lock(&p->mu);
        peer *pe = &p->peers[k];
        int changed = st != pe->state || strcmp(now.detail, pe->detail) != 0;
        if (st == PEER_CONFLICT && pe->state != PEER_CONFLICT)
            atomic_fetch_add(&p->conflicts, 1);
        pe->state = st;
        pe->replica = now.replica;
        pe->replicas = now.replicas;
        memcpy(pe->detail, now.detail, sizeof pe->detail);
        if (st != PEER_DOWN)
            pe->last_ms = sio_now_ms();
        pthread_mutex_unlock(&p->mu);
        if (changed)
            SC_LOG(st == PEER_CONFLICT || st == PEER_MISMATCH
                       ? SIO_LOG_ERROR
                       : st == PEER_DOWN ? SIO_LOG_WARN : SIO_LOG_INFO,
                   "event=peer_state peer=%" PRIu32 " url=%s state=%s "
                   "detail=\"%s\"",
                   k, pe->url, state_names[st], now.detail);
    }
    json_decref(mine);
}

static void *peers_main(void *arg)
{
    sc_peers *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        pthread_mutex_unlock(&p->mu);
        poll_once(p);
        pthread_mutex_lock(&p->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec +
                      (uint64_t)p->cfg->peer_interval_ms * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        while (!p->stop &&
               pthread_cond_timedwait(&p->cv, &p->mu, &ts) == 0)
            ;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int sc_peers_start(sc_peers *p)
{
    if (!p->npeers || p->started)
        return 0;
    if (pthread_create(&p->thread, NULL, peers_main, p) != 0)
        return -1;
    p->started = 1;
    return 0;
}

void sc_peers_destroy(sc_peers *p)
{
    if (!p)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (uint32_t i = 0; i < p->npeers; i++)
        free(p->peers[i].url);
    free(p->peers);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int sc_peers_ready(sc_peers *p, char *reason, size_t reason_len)
{
    int ok = 1;
    pthread_mutex_lock(&p->mu);
    for (uint32_t k = 0; k < p->npeers && ok; k++)
        if (p->peers[k].state == PEER_CONFLICT) {
            ok = 0;
            snprintf(reason, reason_len, "replica conflict: %s",
                     p->peers[k].detail);
        }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

json_t *sc_peers_json(sc_peers *p)
{
    if (!p->npeers)
        return NULL;
    json_t *a = json_array();
    pthread_mutex_lock(&p->mu);
    for (uint32_t k = 0; a && k < p->npeers; k++) {
        const peer *pe = &p->peers[k];
        json_t *o = json_pack("{s:s, s:I, s:s}", "url", pe->url, "peer",
                              (json_int_t)k, "state", state_names[pe->state]);
        if (!o)
            continue;
        if (pe->replica >= 0)
            json_object_set_new(o, "replica", json_integer(pe->replica));
        if (pe->replicas >= 0)
            json_object_set_new(o, "replicas", json_integer(pe->replicas));
        if (pe->detail[0])
            json_object_set_new(o, "detail", json_string(pe->detail));
        json_array_append_new(a, o);
    }
    pthread_mutex_unlock(&p->mu);
    return a;
}

void sc_peers_metrics(sc_peers *p, sc_prom *pr)
{
    uint64_t n[PEER_NSTATES] = {0};
    pthread_mutex_lock(&p->mu);
    for (uint32_t k = 0; k < p->npeers; k++)
        n[p->peers[k].state]++;
    pthread_mutex_unlock(&p->mu);
    sc_prom_family(pr, "shardcast_peers", "gauge",
                   "Replicas of the set (--peers) by the state this server "
                   "sees them in.");
    for (int s = 0; s < PEER_NSTATES; s++)
        sc_prom_u64(pr, "shardcast_peers",
                    SC_PROM_LABELS({"state", state_names[s]}), n[s]);
    sc_prom_family(pr, "shardcast_peer_conflicts_total", "counter",
                   "Times a peer was found serving this server's own part "
                   "(or this server answering at another replica's URL).");
    sc_prom_u64(pr, "shardcast_peer_conflicts_total", SC_PROM_NOLABELS,
                atomic_load(&p->conflicts));
}
