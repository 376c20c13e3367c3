/*
 * auth.c — bearer tokens and the per-address rate limit (contract in
 * auth.h).
 *
 * Threading: sc_auth is read-only after sc_auth_create. sc_ratelimit's
 * table is guarded by r->mu. Ownership: both own their memory; no token
 * text is stored, only digests.
 */
#include "auth.h"

#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "settings.h"

struct sc_auth {
    int has_token, has_admin;
    unsigned char token[SHA256_DIGEST_LENGTH];
    unsigned char admin[SHA256_DIGEST_LENGTH];
};

sc_auth *sc_auth_create(const char *token, const char *admin_token)
{
    sc_auth *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    if (token) {
        a->has_token = 1;
        SHA256((const unsigned char *)token, strlen(token), a->token);
    }
    if (admin_token) {
        a->has_admin = 1;
        SHA256((const unsigned char *)admin_token, strlen(admin_token),
               a->admin);
    }
    return a;
}

void sc_auth_destroy(sc_auth *a)
{
    if (a) {
        OPENSSL_cleanse(a, sizeof *a);
        free(a);
    }
}

/* The token of "Bearer <token>" (scheme case-insensitive), or NULL. */
static const char *bearer(const char *h, size_t *len)
{
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return NULL;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = strlen(h);
    while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t'))
        n--;
    if (n == 0 || n > SC_TOKEN_MAX)
        return NULL;
    *len = n;
    return h;
}

unsigned sc_auth_check(const sc_auth *a, sc_role need,
                       const char *authorization, const char **reason)
{
    unsigned char d[SHA256_DIGEST_LENGTH];
    size_t len = 0;
    int is_consumer = 0, is_admin = 0;

    *reason = "";
    if (need == SC_ROLE_PUBLIC)
        return 0;
    if (need == SC_ROLE_CONSUMER && !a->has_token)
        return 0;
    if (need == SC_ROLE_ADMIN && !a->has_admin) {
        *reason = "the admin API is off (no admin token configured)";
        return 403;
    }
    const char *t = bearer(authorization, &len);
    if (t) {
        SHA256((const unsigned char *)t, len, d);
        /* Both comparisons always run. */
        is_consumer = a->has_token &&
                      CRYPTO_memcmp(d, a->token, sizeof d) == 0;
        is_admin = a->has_admin && CRYPTO_memcmp(d, a->admin, sizeof d) == 0;
        OPENSSL_cleanse(d, sizeof d);
    }
    if (is_admin || (need == SC_ROLE_CONSUMER && is_consumer))
        return 0;
    if (need == SC_ROLE_ADMIN && is_consumer) {
        *reason = "a consumer token cannot make admin calls";
        return 403;
    }
    *reason = t ? "invalid token"
                : "missing bearer token (Authorization: Bearer <token>)";
    return 401;
}

/* Rate limit -------------------------------------------------------- */

/* Slots probed for an address before the least recently seen of them is
 * taken over. */
#define PROBES 8u
/* Bucket arithmetic is in thousandths of a request. */
#define MILLI 1000u

typedef struct slot {
    unsigned char key[17]; /* family byte + up to 16 address bytes */
    int used;
    uint64_t tokens;  /* milli-requests available */
    uint64_t last_ms; /* last refill */
} slot;

struct sc_ratelimit {
    pthread_mutex_t mu;
    uint32_t rate, burst;
    slot *slots;
};

sc_ratelimit *sc_ratelimit_create(uint32_t rate, uint32_t burst)
{
    sc_ratelimit *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->rate = rate;
    r->burst = burst ? burst : 1;
    if (rate) {
        r->slots = calloc(SC_RATE_SLOTS, sizeof *r->slots);
        if (!r->slots) {
            free(r);
            return NULL;
        }
    }
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void sc_ratelimit_destroy(sc_ratelimit *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->mu);
    free(r->slots);
    free(r);
}

static void addr_key(const struct sockaddr *sa, unsigned char key[17])
{
    memset(key, 0, 17);
    if (!sa)
        return;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        key[0] = 4;
        memcpy(key + 1, &s4->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        key[0] = 6;
        memcpy(key + 1, &s6->sin6_addr, 16);
    }
}

static uint32_t hash_key(const unsigned char key[17])
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 17; i++) {
        h ^= key[i];
        h *= 16777619u;
    }
    return h;
}

int sc_ratelimit_take(sc_ratelimit *r, const struct sockaddr *sa,
                      uint64_t now_ms, uint32_t *retry_after_s)
{
    unsigned char key[17];
    int ok;
    slot *s = NULL, *oldest = NULL;

    *retry_after_s = 0;
    if (!r->rate)
        return 1;
    addr_key(sa, key);
    uint32_t h = hash_key(key);
    uint64_t cap = (uint64_t)r->burst * MILLI;
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < PROBES; i++) {
        slot *c = &r->slots[(h + i) % SC_RATE_SLOTS];
        if (c->used && memcmp(c->key, key, sizeof key) == 0) {
            s = c;
            break;
        }
        if (!oldest || !c->used ||
            (oldest->used && c->last_ms < oldest->last_ms))
            oldest = c;
    }
    if (!s) {
        /* A new (or evicted) address starts with a full bucket. */
        s = oldest;
        memcpy(s->key, key, sizeof key);
        s->used = 1;
        s->tokens = cap;
        s->last_ms = now_ms;
    }
    if (now_ms > s->last_ms) {
        uint64_t add = (now_ms - s->last_ms) * r->rate; /* milli per ms */
        s->tokens = add >= cap - s->tokens ? cap : s->tokens + add;
        s->last_ms = now_ms;
    }
    ok = s->tokens >= MILLI;
    if (ok) {
        s->tokens -= MILLI;
    } else {
        uint64_t need_ms = (MILLI - s->tokens + r->rate - 1) / r->rate;
        *retry_after_s = (uint32_t)((need_ms + 999) / 1000);
        if (*retry_after_s == 0)
            *retry_after_s = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* Per-address connection counts ----------------------------------------
 * Open addressing with linear probing over a power-of-two table at least
 * twice the number of connections the server admits, so it never fills;
 * an entry whose count drops to zero is removed by backward shifting, so
 * lookups need no tombstones. */

typedef struct conn_slot {
    unsigned char key[17];
    uint32_t count; /* 0: empty */
} conn_slot;

struct sc_connlimit {
    pthread_mutex_t mu;
    uint32_t limit;
    size_t mask;
    size_t used;    /* entries with a count; kept below the table size so
                       probing always ends (more addresses than that are
                       not tracked: fail open) */
    conn_slot *slots;
};

sc_connlimit *sc_connlimit_create(uint32_t limit, uint32_t max_connections)
{
    sc_connlimit *c = calloc(1, sizeof *c);
    size_t n = 64;
    if (!c)
        return NULL;
    c->limit = limit;
    if (limit) {
        while (n < (size_t)max_connections * 2 + 64)
            n *= 2;
        c->slots = calloc(n, sizeof *c->slots);
        if (!c->slots) {
            free(c);
            return NULL;
        }
        c->mask = n - 1;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void sc_connlimit_destroy(sc_connlimit *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c);
}

/* The slot of key, or the empty slot where it would go (mu held). */
static size_t conn_find(const sc_connlimit *c, const unsigned char key[17])
{
    size_t i = hash_key(key) & c->mask;
    while (c->slots[i].count && memcmp(c->slots[i].key, key, 17) != 0)
        i = (i + 1) & c->mask;
    return i;
}

int sc_connlimit_allows(sc_connlimit *c, const struct sockaddr *sa)
{
    unsigned char key[17];
    int ok = 1;
    if (!c->limit || !sa)
        return 1;
    addr_key(sa, key);
    pthread_mutex_lock(&c->mu);
    ok = c->slots[conn_find(c, key)].count < c->limit;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

void sc_connlimit_add(sc_connlimit *c, const struct sockaddr *sa, int delta)
{
    unsigned char key[17];
    if (!c->limit || !sa)
        return;
    addr_key(sa, key);
    pthread_mutex_lock(&c->mu);
    size_t i = conn_find(c, key);
    conn_slot *s = &c->slots[i];
    if (delta > 0) {
        if (!s->count) {
            if (c->used + 1 >= c->mask) {
                pthread_mutex_unlock(&c->mu);
                return;
            }
            memcpy(s->key, key, sizeof key);
            c->used++;
        }
        s->count++;
    } else if (s->count && --s->count == 0) {
        c->used--;
        /* Backward-shift deletion: move later members of the run into
         * the hole when their home slot is not after it. */
        size_t hole = i, j = i;
        for (;;) {
            j = (j + 1) & c->mask;
            if (!c->slots[j].count)
                break;
            size_t home = hash_key(c->slots[j].key) & c->mask;
            /* j may move to hole unless home lies cyclically in (hole, j]. */
            int in_range = hole <= j ? (home > hole && home <= j)
                                     : (home > hole || home <= j);
            if (in_range)
                continue;
            c->slots[hole] = c->slots[j];
            c->slots[j].count = 0;
            hole = j;
        }
    }
    pthread_mutex_unlock(&c->mu);
}
