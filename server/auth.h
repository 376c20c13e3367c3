/*
 * auth.h — who may call what: bearer tokens (consumer and admin) and a
 * per-client-address request rate limit.
 *
 * Tokens: only SHA-256 digests of the configured tokens are kept; a
 * presented token is hashed and compared digest to digest with
 * CRYPTO_memcmp, so the time taken does not depend on where (or whether)
 * the presented token differs. Nothing here logs or returns token text.
 *
 * Rate limit: a token bucket per client address in a fixed-size table
 * (SC_RATE_SLOTS entries, least recently seen evicted), so memory does not
 * grow with the number of clients.
 *
 * Threading: an sc_auth is immutable after creation and may be shared by
 * every thread. An sc_ratelimit is thread-safe (one mutex, held for a few
 * arithmetic operations).
 */
#ifndef SC_AUTH_H
#define SC_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef enum sc_role {
    SC_ROLE_PUBLIC = 0,   /* health, readiness, metrics */
    SC_ROLE_CONSUMER = 1, /* streams, job status, topology */
    SC_ROLE_ADMIN = 2     /* job changes, settings */
} sc_role;

typedef struct sc_auth sc_auth;

/* Either token may be NULL: no consumer token means consumer calls need
 * none; no admin token means the admin API is off. The strings are not
 * kept. NULL when out of memory. */
sc_auth *sc_auth_create(const char *token, const char *admin_token);
void sc_auth_destroy(sc_auth *a);

/*
 * May a request with this Authorization header value (NULL: none) act as
 * `need`? Returns 0 when it may, else the HTTP status to answer (401:
 * missing or invalid credentials; 403: valid credentials of the wrong
 * kind, or the admin API is off) with a static reason in *reason.
 * The admin token is accepted wherever the consumer token is.
 */
unsigned sc_auth_check(const sc_auth *a, sc_role need,
                       const char *authorization, const char **reason);

/* Client addresses tracked at once by the rate limiter. */
#define SC_RATE_SLOTS 4096u

typedef struct sc_ratelimit sc_ratelimit;

/* rate requests per second with bursts of `burst`; rate 0 disables the
 * limit (sc_ratelimit_take always allows). NULL when out of memory. */
sc_ratelimit *sc_ratelimit_create(uint32_t rate, uint32_t burst);
void sc_ratelimit_destroy(sc_ratelimit *r);

/* Take one request from the bucket of the address sa (NULL: one shared
 * bucket) at time now_ms (monotonic). Returns 1 when allowed; 0 when
 * limited, with *retry_after_s the whole seconds until a request fits. */
int sc_ratelimit_take(sc_ratelimit *r, const struct sockaddr *sa,
                      uint64_t now_ms, uint32_t *retry_after_s);

/*
 * Connections per client address (--max-connections-per-ip). The HTTP
 * server asks sc_connlimit_allows when it accepts a connection (and refuses
 * and counts it when not), then counts it with sc_connlimit_add(+1) when
 * the connection starts and (-1) when it closes. Between the check and the
 * count another worker thread may admit one more from the same address, so
 * the limit may be passed by at most the number of HTTP threads - 1. The
 * table holds 2 x max_connections entries and never fills. limit 0: no
 * limit (nothing is tracked). Thread-safe (one mutex).
 */
typedef struct sc_connlimit sc_connlimit;
sc_connlimit *sc_connlimit_create(uint32_t limit, uint32_t max_connections);
void sc_connlimit_destroy(sc_connlimit *c);
int sc_connlimit_allows(sc_connlimit *c, const struct sockaddr *sa);
void sc_connlimit_add(sc_connlimit *c, const struct sockaddr *sa, int delta);

#endif /* SC_AUTH_H */
