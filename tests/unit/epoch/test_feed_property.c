/*
 * test_feed_property.c — property tests of the feed (shardio/epoch/feed.c) with
 * seeks: random datasets (sizes not divisible by W), seeds, K, B, byte
 * caps, W, all three partitions, small windows and a short lag grace.
 * Consumers disconnect at random positions and resume with what they
 * actually received (the last samples taken before a disconnect are
 * "lost in flight"); some are slow, one joins late, some resume
 * elastically from a global cursor. Every rank ends, and what each
 * received is exactly its share of the streamed order (partition.c).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "tarutil.h"

#define MAXY 20000
#define MAXW 6

static _Atomic uint64_t rnd_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    uint64_t x = atomic_load(&rnd_state);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    atomic_store(&rnd_state, x);
    return x;
}

static sio_io *io;
static sio_shardlist *list;
static uint64_t Y[MAXY]; /* shard << 32 | group */
static size_t N;

typedef struct consumer {
    sio_feed *f;
    uint32_t rank, world;
    uint64_t gstart;
    sio_partition p;
    int slow, late, stall;
    uint64_t got[MAXY];
    size_t n;
    unsigned seed;
} consumer;

static void *run(void *arg)
{
    consumer *c = arg;
    unsigned seed = c->seed;
    if (c->late)
        usleep(20000);
    for (int session = 0; session < 200; session++) {
        sio_cursor *cur = NULL;
        sio_cursor_config cc = {.rank = c->rank, .world = c->world,
                                .policy = c->p, .global_start = c->gstart,
                                .start = c->n};
        sio_error e;
        sio_code rc = sio_feed_attach(c->f, &cc, &cur, &e);
        if (rc == SIO_ERR_BUSY) {
            if (getenv("SC_DEBUG") && session > 190)
                fprintf(stderr, "busy rank %u/%u n=%zu: %s\n", c->rank,
                        c->world, c->n, e.msg);
            usleep(5000);
            continue;
        }
        CHECK(rc == SIO_OK);
        if (rc)
            return NULL;
        size_t take = 1 + (size_t)(rand_r(&seed) % 60);
        size_t lost = (size_t)(rand_r(&seed) % 4);
        size_t taken = 0, start_n = c->n;
        int end = 0;
        for (;;) {
            const sio_sample *s = NULL;
            rc = sio_cursor_next_wait(cur, &s);
            if (rc == SIO_ERR_BUSY)
                break; /* the client comes back later */
            CHECK(rc == SIO_OK);
            if (rc != SIO_OK) {
                fprintf(stderr, "rank %u/%u: %s\n", c->rank, c->world,
                        sio_cursor_errmsg(cur));
                end = 1;
                break;
            }
            if (!s) {
                end = 1;
                break;
            }
            if (c->n < MAXY)
                c->got[c->n] = (uint64_t)s->shard_index << 32 |
                               s->index_in_shard;
            c->n++;
            taken++;
            sio_sample_unref(s);
            if (c->slow && taken % 7 == 0)
                usleep(3000);
            /* stops reading for a while, attached: the others must not
             * wait for it beyond the lag grace */
            if (c->stall && taken == 5 && rand_r(&seed) % 3 == 0)
                usleep(250000);
            if (taken == take)
                break;
        }
        /* the last samples taken never reached the consumer */
        if (!end) {
            size_t keep = taken > lost ? taken - lost : 0;
            c->n = start_n + keep;
        }
        CHECK_EQ_U64(sio_cursor_position(cur), start_n + taken);
        sio_cursor_close(cur);
        if (end)
            return NULL;
    }
    CHECK(!"a consumer did not finish");
    return NULL;
}

static void check_share(const consumer *c)
{
    uint64_t len = sio_share_length(N, c->gstart, c->rank, c->world, c->p);
    CHECK_EQ_U64(c->n, len);
    int ok = c->n == len;
    for (uint64_t k = 0; ok && k < len && k < MAXY; k++) {
        uint64_t i = c->gstart + c->rank + k * c->world;
        if (i >= N)
            i = sio_share_pad_source(N, c->gstart, i);
        ok = c->got[k] == Y[i];
        if (!ok)
            fprintf(stderr, "rank %u/%u %s G=%llu: differs at %llu\n",
                    c->rank, c->world, sio_partition_name(c->p),
                    (unsigned long long)c->gstart, (unsigned long long)k);
    }
    CHECK(ok);
}

static consumer cons[MAXW];

static void trial(int t, sio_index *ix)
{
    sio_epoch_config ec = {0};
    ec.seed = rnd();
    ec.epoch = (uint64_t)t;
    ec.interleave = 1 + (uint32_t)(rnd() % 4);
    ec.buffer_samples = 1 + (uint32_t)(rnd() % 40);
    ec.buffer_bytes = rnd() % 2 ? 0 : 3000 + rnd() % 30000;
    ec.read_threads = 1 + (uint32_t)(rnd() % 2);
    /* the streamed order */
    sio_epoch *ep = NULL;
    CHECK(sio_epoch_open(io, list, &ec, &ep, NULL) == SIO_OK);
    N = 0;
    for (;;) {
        const sio_sample *s;
        CHECK(sio_epoch_next(ep, &s) == SIO_OK);
        if (!s)
            break;
        if (N < MAXY)
            Y[N] = (uint64_t)s->shard_index << 32 | s->index_in_shard;
        N++;
        sio_sample_unref(s);
    }
    sio_epoch_close(ep);
    ec.index = ix;
    sio_feed_config fc = {0};
    fc.window_samples = 4 + (uint32_t)(rnd() % 60);
    fc.window_bytes = rnd() % 2 ? 0 : 20000 + rnd() % 200000;
    fc.join_timeout_ms = 1 + (uint32_t)(rnd() % 200);
    fc.rejoin_grace_ms = 1 + (uint32_t)(rnd() % 300);
    fc.lag_grace_ms = 20 + (uint32_t)(rnd() % 80);
    fc.max_seeks = 1 + (uint32_t)(rnd() % 4);
    sio_feed *f = NULL;
    CHECK(sio_feed_open(io, list, &ec, &fc, &f, NULL) == SIO_OK);
    uint32_t W = 1 + (uint32_t)(rnd() % (MAXW - 1));
    sio_partition p = (sio_partition)(rnd() % 3);
    uint64_t G = rnd() % 3 == 0 && N ? rnd() % (N / 2 + 1) : 0;
    pthread_t th[MAXW];
    for (uint32_t r = 0; r < W; r++) {
        memset(&cons[r], 0, sizeof cons[r]);
        cons[r].f = f;
        cons[r].rank = r;
        cons[r].world = W;
        cons[r].gstart = G;
        cons[r].p = p;
        cons[r].slow = rnd() % 3 == 0;
        cons[r].late = r == W - 1 && rnd() % 2;
        cons[r].stall = r == 0 && W > 1 && rnd() % 2;
        cons[r].seed = (unsigned)rnd();
        pthread_create(&th[r], NULL, run, &cons[r]);
    }
    for (uint32_t r = 0; r < W; r++)
        pthread_join(th[r], NULL);
    for (uint32_t r = 0; r < W; r++)
        check_share(&cons[r]);
    sio_feed_stats st;
    sio_feed_get_stats(f, &st, NULL, 0, NULL);
    if (getenv("SC_VERBOSE"))
        fprintf(stderr, "trial %d: N=%zu W=%u %s G=%llu win=%u seeks=%llu "
                "shared=%llu busy=%llu replays=%llu lag=%llu\n", t, N, W,
                sio_partition_name(p), (unsigned long long)G,
                fc.window_samples, (unsigned long long)st.seek.opened,
                (unsigned long long)st.seek.shared,
                (unsigned long long)st.seek.busy,
                (unsigned long long)st.seek.replays,
                (unsigned long long)st.seek.lag_detaches);
    sio_feed_close(f);
}

int main(void)
{
    char dir[] = "/tmp/shardcast-feedprop-XXXXXX";
    char cmd[600];
    CHECK(mkdtemp(dir) != NULL);
    int nshards = 5;
    for (int s = 0; s < nshards; s++) {
        char p[600];
        snprintf(p, sizeof p, "%s/shard-%02d.tar%s", dir, s,
                 s == 3 ? ".gz" : "");
        make_random_shard(p, 20 + (int)(rnd() % 80), s == 3, rnd);
    }
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_shardlist_resolve(io, dir, &list, NULL) == SIO_OK);
    sio_index *ix = NULL;
    sio_index_config icfg = {0};
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);
    int trials = getenv("SC_TRIALS") ? atoi(getenv("SC_TRIALS")) : 24;
    for (int t = 0; t < trials; t++)
        trial(t, ix);
    /* without indexes every seek is a (limited, shared) replay */
    for (int t = 0; t < 4; t++)
        trial(100 + t, NULL);
    sio_index_close(ix);
    sio_shardlist_free(list);
    sio_io_destroy(io);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
