/*
 * test_pool.c — the sample memory pool (shardio.h "Sample memory").
 *
 * Size classes hold what was asked with at most 25% slack; a released
 * block is handed out again (no fresh memory in a steady state); above
 * the idle budget blocks give their pages back and are still reusable
 * (they read as zero, whatever they held); trimming; large blocks bypass
 * the pool; four threads getting and putting random sizes keep every
 * block's contents intact; with a decay, memory released above the budget
 * stays resident for the next round and goes back once it stays idle.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"

static void test_classes(void)
{
    static const size_t sizes[] = {1,    255,  256,   257,   320,    321,
                                   1000, 1024, 1025,  4097,  100000, 131073,
                                   1u << 20, (1u << 20) + 1, 33554433,
                                   SIO_POOL_CLASS_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t cap = 0;
        unsigned char *p = sio_pool_get(sizes[i], &cap);
        CHECK(p != NULL);
        CHECK(cap >= sizes[i]);
        CHECK(sizes[i] < 256 || cap <= sizes[i] + sizes[i] / 4);
        memset(p, 0xab, cap);
        sio_pool_put(p, cap);
    }
    /* Every size class boundary: cap is a class and holds n. */
    for (size_t n = 1; n < 70000; n += 97) {
        size_t cap = 0;
        void *p = sio_pool_get(n, &cap);
        CHECK(p && cap >= n);
        size_t cap2 = 0;
        void *q = sio_pool_get(cap, &cap2);
        CHECK(q && cap2 == cap); /* a class size maps to itself */
        sio_pool_put(q, cap2);
        sio_pool_put(p, cap);
    }
}

static void test_reuse_and_budget(void)
{
    sio_pool_stats a, b;
    size_t cap = 0, cap2 = 0;
    sio_pool_configure(64u << 20);
    void *p = sio_pool_get(100000, &cap);
    sio_pool_put(p, cap);
    sio_pool_get_stats(&a);
    void *q = sio_pool_get(100000, &cap2);
    sio_pool_get_stats(&b);
    CHECK(q == p);
    CHECK(cap2 == cap);
    CHECK_EQ_U64(b.reused, a.reused + 1);
    CHECK_EQ_U64(b.fresh, a.fresh);
    CHECK(b.idle_bytes + cap == a.idle_bytes);
    sio_pool_put(q, cap2);

    /* Over budget: pages go back, the block is still handed out again. */
    sio_pool_configure(0);
    sio_pool_get_stats(&a);
    CHECK_EQ_U64(a.idle_bytes, 0);
    void *blocks[8];
    size_t caps[8];
    for (int i = 0; i < 8; i++) {
        blocks[i] = sio_pool_get(200000, &caps[i]);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x5a, caps[i]);
    }
    for (int i = 0; i < 8; i++)
        sio_pool_put(blocks[i], caps[i]);
    sio_pool_get_stats(&b);
    CHECK_EQ_U64(b.idle_bytes, 0);
    CHECK(b.released >= a.released + 8);
    for (int i = 0; i < 8; i++) {
        blocks[i] = sio_pool_get(200000, &caps[i]);
        CHECK(blocks[i] != NULL);
        /* Whole pages given back read as zero again. */
        unsigned char *c = blocks[i];
        CHECK(c[caps[i] / 2] == 0 || c[caps[i] / 2] == 0x5a);
        memset(blocks[i], 0x11, caps[i]);
    }
    for (int i = 0; i < 8; i++)
        sio_pool_put(blocks[i], caps[i]);

    /* Trim: idle resident memory goes to zero. */
    sio_pool_configure(64u << 20);
    for (int i = 0; i < 8; i++)
        blocks[i] = sio_pool_get(3000, &caps[i]);
    for (int i = 0; i < 8; i++)
        sio_pool_put(blocks[i], caps[i]);
    sio_pool_get_stats(&a);
    CHECK(a.idle_bytes >= 8 * 3000);
    sio_pool_trim();
    sio_pool_get_stats(&b);
    CHECK_EQ_U64(b.idle_bytes, 0);

    /* Above the largest class: plain malloc, exact size. */
    void *big = sio_pool_get(SIO_POOL_CLASS_MAX + 1, &cap);
    CHECK(big != NULL);
    CHECK_EQ_U64(cap, SIO_POOL_CLASS_MAX + 1);
    sio_pool_put(big, cap);
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    enum { LIVE = 64 };
    unsigned char *p[LIVE] = {0};
    size_t cap[LIVE] = {0}, len[LIVE] = {0};
    unsigned char tag[LIVE] = {0};
    for (int it = 0; it < 20000; it++) {
        int i = rand_r(&seed) % LIVE;
        if (p[i]) {
            for (size_t k = 0; k < len[i]; k += 61)
                if (p[i][k] != tag[i]) {
                    CHECK(p[i][k] == tag[i]);
                    break;
                }
            sio_pool_put(p[i], cap[i]);
            p[i] = NULL;
        } else {
            len[i] = 1 + (size_t)(rand_r(&seed) % (rand_r(&seed) % 4 ? 4000
                                                                     : 300000));
            p[i] = sio_pool_get(len[i], &cap[i]);
            CHECK(p[i] != NULL);
            tag[i] = (unsigned char)rand_r(&seed);
            memset(p[i], tag[i], len[i]);
        }
    }
    for (int i = 0; i < LIVE; i++)
        sio_pool_put(p[i], cap[i]);
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[4];
    sio_pool_configure(8u << 20); /* some blocks go cold, some stay warm */
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    sio_pool_stats st;
    sio_pool_get_stats(&st);
    CHECK(st.idle_bytes <= (8u << 20));
    CHECK(st.reused > 0);
}

/* Decay: blocks released above the budget stay resident and the next
 * round takes them again (no fresh memory, no page given back, contents
 * intact); what then stays idle above the budget for a whole period goes
 * back, down to the budget. */
static void test_decay(void)
{
    enum { N = 16, SZ = 500000 };
    sio_pool_stats a, b;
    void *blocks[N];
    size_t caps[N];
    sio_pool_trim();
    sio_pool_configure(1u << 20);
    sio_pool_set_decay(500);
    for (int i = 0; i < N; i++) {
        blocks[i] = sio_pool_get(SZ, &caps[i]);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x77, caps[i]);
    }
    sio_pool_get_stats(&a);
    for (int i = 0; i < N; i++)
        sio_pool_put(blocks[i], caps[i]);
    sio_pool_get_stats(&b);
    CHECK(b.idle_bytes >= (size_t)N * SZ); /* above the 1 MiB budget */
    CHECK_EQ_U64(b.released, a.released);
    for (int i = 0; i < N; i++) {
        blocks[i] = sio_pool_get(SZ, &caps[i]);
        CHECK(blocks[i] != NULL);
        /* resident all along: what was written is still there */
        CHECK(((unsigned char *)blocks[i])[caps[i] / 2] == 0x77);
    }
    sio_pool_get_stats(&b);
    CHECK_EQ_U64(b.fresh, a.fresh);
    CHECK_EQ_U64(b.released, a.released);
    for (int i = 0; i < N; i++)
        sio_pool_put(blocks[i], caps[i]);
    /* Idle above the budget from now on: gone after at most two periods
     * (the test's clock is generous: a slow machine only waits longer). */
    for (int w = 0; w < 500; w++) {
        sio_pool_get_stats(&b);
        if (b.idle_bytes <= (1u << 20))
            break;
        usleep(20000);
        sio_pool_tick();
    }
    sio_pool_get_stats(&b);
    CHECK(b.idle_bytes <= (1u << 20));
    CHECK(b.released >= a.released + N - 2);
    /* Back to no decay: the budget holds at once again. */
    sio_pool_set_decay(0);
    for (int i = 0; i < N; i++)
        blocks[i] = sio_pool_get(SZ, &caps[i]);
    for (int i = 0; i < N; i++)
        sio_pool_put(blocks[i], caps[i]);
    sio_pool_get_stats(&b);
    CHECK(b.idle_bytes <= (1u << 20));
    sio_pool_configure(64u << 20);
}

int main(void)
{
    test_classes();
    test_reuse_and_budget();
    test_threads();
    test_decay();
    sio_pool_trim();
    CHECK_MAIN_END();
}
