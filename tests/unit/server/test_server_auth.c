/*
 * test_server_auth.c — bearer tokens and the per-address rate limit
 * (server/auth.c): who may call what (401 vs 403), header parsing, and the
 * token bucket's refill, Retry-After and bounded table.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "auth.h"
#include "check.h"

static void test_tokens(void)
{
    const char *why = NULL;
    sc_auth *open = sc_auth_create(NULL, NULL);
    sc_auth *a = sc_auth_create("cons-token", "admin-token");

    /* No tokens configured: consumer calls are open, admin calls are off. */
    CHECK_EQ_U64(sc_auth_check(open, SC_ROLE_PUBLIC, NULL, &why), 0);
    CHECK_EQ_U64(sc_auth_check(open, SC_ROLE_CONSUMER, NULL, &why), 0);
    CHECK_EQ_U64(sc_auth_check(open, SC_ROLE_ADMIN, "Bearer x", &why), 403);
    CHECK(strstr(why, "admin API is off") != NULL);

    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_PUBLIC, NULL, &why), 0);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, NULL, &why), 401);
    CHECK(strstr(why, "missing bearer token") != NULL);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "Bearer cons-token", &why),
                 0);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "bearer   cons-token  ",
                               &why),
                 0);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "Bearer admin-token", &why),
                 0);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "Bearer cons-toke", &why),
                 401);
    CHECK_STR(why, "invalid token");
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "Bearer cons-tokenX", &why),
                 401);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "Basic cons-token", &why),
                 401);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "Bearercons-token", &why),
                 401);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_CONSUMER, "Bearer ", &why), 401);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_ADMIN, "Bearer admin-token", &why), 0);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_ADMIN, "Bearer cons-token", &why),
                 403);
    CHECK(strstr(why, "consumer token") != NULL);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_ADMIN, "Bearer nope", &why), 401);
    CHECK_EQ_U64(sc_auth_check(a, SC_ROLE_ADMIN, NULL, &why), 401);
    /* A reason never repeats the presented token. */
    CHECK(strstr(why, "nope") == NULL);
    sc_auth_destroy(a);
    sc_auth_destroy(open);
}

static struct sockaddr_in addr4(const char *ip)
{
    struct sockaddr_in s;
    memset(&s, 0, sizeof s);
    s.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &s.sin_addr);
    return s;
}

static void test_rate_limit(void)
{
    uint32_t ra = 0;
    sc_ratelimit *off = sc_ratelimit_create(0, 1);
    for (int i = 0; i < 1000; i++)
        CHECK(sc_ratelimit_take(off, NULL, 0, &ra));
    sc_ratelimit_destroy(off);

    sc_ratelimit *r = sc_ratelimit_create(2, 3); /* 2/s, bursts of 3 */
    struct sockaddr_in a = addr4("127.0.0.1"), b = addr4("127.0.0.2");
    const struct sockaddr *sa = (const struct sockaddr *)&a;
    const struct sockaddr *sb = (const struct sockaddr *)&b;
    uint64_t t = 1000000;
    for (int i = 0; i < 3; i++)
        CHECK(sc_ratelimit_take(r, sa, t, &ra));
    CHECK(!sc_ratelimit_take(r, sa, t, &ra));
    CHECK_EQ_U64(ra, 1);
    /* Another address has its own bucket. */
    CHECK(sc_ratelimit_take(r, sb, t, &ra));
    /* Half a second refills one request at 2/s. */
    CHECK(!sc_ratelimit_take(r, sa, t + 400, &ra));
    CHECK(sc_ratelimit_take(r, sa, t + 500, &ra));
    CHECK(!sc_ratelimit_take(r, sa, t + 500, &ra));
    /* A long pause refills only up to the burst. */
    for (int i = 0; i < 3; i++)
        CHECK(sc_ratelimit_take(r, sa, t + 100000, &ra));
    CHECK(!sc_ratelimit_take(r, sa, t + 100000, &ra));
    sc_ratelimit_destroy(r);

    /* Many addresses: the table stays bounded and keeps working. */
    r = sc_ratelimit_create(1, 1);
    for (uint32_t i = 0; i < 3 * SC_RATE_SLOTS; i++) {
        struct sockaddr_in x = addr4("10.0.0.0");
        x.sin_addr.s_addr = htonl(0x0a000000u + i);
        CHECK(sc_ratelimit_take(r, (const struct sockaddr *)&x, t, &ra));
    }
    CHECK(sc_ratelimit_take(r, sa, t, &ra));
    CHECK(!sc_ratelimit_take(r, sa, t, &ra));
    sc_ratelimit_destroy(r);
}

/* Issue 12: the per-address connection limit, and its table under churn
 * (removal by backward shifting must keep every other address findable). */
static void test_conn_limit(void)
{
    sc_connlimit *c = sc_connlimit_create(3, 64);
    CHECK(c != NULL);
    struct sockaddr_in a = addr4("10.1.1.1"), b = addr4("10.1.1.2");
    const struct sockaddr *sa = (const struct sockaddr *)&a;
    const struct sockaddr *sb = (const struct sockaddr *)&b;
    for (int i = 0; i < 3; i++) {
        CHECK(sc_connlimit_allows(c, sa));
        sc_connlimit_add(c, sa, +1);
    }
    CHECK(!sc_connlimit_allows(c, sa));
    CHECK(sc_connlimit_allows(c, sb));
    sc_connlimit_add(c, sa, -1);
    CHECK(sc_connlimit_allows(c, sa));
    /* Churn: many addresses in and out; counts stay exact. */
    static int count[200];
    for (int round = 0; round < 2000; round++) {
        int k = (round * 7919) % 200;
        struct sockaddr_in x = addr4("10.0.0.0");
        x.sin_addr.s_addr = htonl(0x0a020000u + (uint32_t)k);
        const struct sockaddr *sx = (const struct sockaddr *)&x;
        if (count[k] < 3 && (round % 3)) {
            CHECK(sc_connlimit_allows(c, sx));
            sc_connlimit_add(c, sx, +1);
            count[k]++;
        } else if (count[k] > 0) {
            sc_connlimit_add(c, sx, -1);
            count[k]--;
        }
        CHECK(sc_connlimit_allows(c, sx) == (count[k] < 3));
    }
    for (int k = 0; k < 200; k++) {
        struct sockaddr_in x = addr4("10.0.0.0");
        x.sin_addr.s_addr = htonl(0x0a020000u + (uint32_t)k);
        CHECK(sc_connlimit_allows(c, (const struct sockaddr *)&x) == (count[k] < 3));
    }
    CHECK(!sc_connlimit_allows(c, sa) == 0);
    sc_connlimit_destroy(c);
    /* limit 0: nothing tracked, everything allowed. */
    c = sc_connlimit_create(0, 64);
    sc_connlimit_add(c, sa, +1);
    CHECK(sc_connlimit_allows(c, sa));
    sc_connlimit_destroy(c);
}

int main(void)
{
    test_tokens();
    test_rate_limit();
    test_conn_limit();
    CHECK_MAIN_END();
}
