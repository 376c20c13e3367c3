/*
 * test_feed.c — one epoch dealt to many cursors (shardio/epoch/feed.c): every
 * cursor gets exactly what a private sio_consumer would, whatever the
 * window size, threads, join order, detach/reattach, late joins and
 * elastic resume.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "tarutil.h"

#define MAXN 2000

static sio_io *io;
static sio_shardlist *list;
static sio_epoch_config ecfg = {.seed = 11, .epoch = 1, .interleave = 3,
                                .buffer_samples = 50, .read_threads = 2};

/* Global indices of the share from a private sio_consumer (the oracle). */
static size_t oracle(uint32_t rank, uint32_t world, sio_partition p,
                     uint64_t gstart, uint64_t start, uint64_t *out)
{
    sio_epoch *ep = NULL;
    sio_consumer *c = NULL;
    size_t n = 0;
    CHECK(sio_epoch_open(io, list, &ecfg, &ep, NULL) == SIO_OK);
    CHECK(sio_consumer_open_at(ep, rank, world, p, gstart, start, &c, NULL) ==
          SIO_OK);
    for (;;) {
        const sio_sample *s = NULL;
        CHECK(sio_consumer_next(c, &s) == SIO_OK);
        if (!s)
            break;
        if (n < MAXN)
            out[n] = s->global_index;
        n++;
        sio_sample_unref(s);
    }
    sio_consumer_close(c);
    return n;
}

typedef struct job {
    sio_feed *f;
    sio_cursor_config cc;
    uint64_t got[MAXN];
    size_t n;
    int sleep_every; /* a slow consumer */
    int stop_after;  /* detach after this many (0: never) */
} job;

static void *run_cursor(void *arg)
{
    job *j = arg;
    sio_cursor *c = NULL;
    CHECK(sio_feed_attach(j->f, &j->cc, &c, NULL) == SIO_OK);
    if (!c)
        return NULL;
    for (;;) {
        const sio_sample *s = NULL;
        sio_code rc = sio_cursor_next_wait(c, &s);
        CHECK(rc == SIO_OK);
        if (rc != SIO_OK)
            fprintf(stderr, "cursor %u/%u: %s\n", j->cc.rank, j->cc.world,
                    sio_cursor_errmsg(c));
        if (rc != SIO_OK || !s)
            break;
        if (j->n < MAXN)
            j->got[j->n] = s->global_index;
        j->n++;
        sio_sample_unref(s);
        if (j->sleep_every && j->n % (size_t)j->sleep_every == 0)
            usleep(2000);
        if (j->stop_after && j->n == (size_t)j->stop_after)
            break;
    }
    CHECK_EQ_U64(sio_cursor_position(c), j->cc.start + j->n);
    sio_cursor_close(c);
    return NULL;
}

static void compare(const job *j, sio_partition p)
{
    static uint64_t want[MAXN];
    size_t n = oracle(j->cc.rank, j->cc.world, p, j->cc.global_start,
                      j->cc.start, want);
    if (j->stop_after && n > (size_t)j->stop_after)
        n = (size_t)j->stop_after;
    CHECK_EQ_U64(j->n, n);
    CHECK(memcmp(j->got, want, (n < MAXN ? n : MAXN) * sizeof *want) == 0);
}

/* W threads read one feed at once; each share equals the oracle's. */
static void test_threads(sio_partition p, uint32_t world, uint32_t window)
{
    sio_feed_config fc = {.window_samples = window, .join_timeout_ms = 2000};
    sio_feed *f = NULL;
    static job jobs[8];
    pthread_t t[8];
    CHECK(sio_feed_open(io, list, &ecfg, &fc, &f, NULL) == SIO_OK);
    for (uint32_t r = 0; r < world; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].f = f;
        jobs[r].cc = (sio_cursor_config){.rank = r, .world = world,
                                         .policy = p};
        jobs[r].sleep_every = r == 0 ? 50 : 0; /* rank 0 is slow */
        pthread_create(&t[r], NULL, run_cursor, &jobs[r]);
    }
    for (uint32_t r = 0; r < world; r++)
        pthread_join(t[r], NULL);
    sio_feed_stats st;
    size_t nc = 0;
    sio_feed_consumer cons[16];
    sio_feed_get_stats(f, &st, cons, 16, &nc);
    CHECK(st.ended);
    CHECK(st.window_samples <= window);
    for (uint32_t r = 0; r < world; r++)
        compare(&jobs[r], p);
    sio_feed_close(f);
}

typedef struct counter {
    atomic_int n;
} counter;

static void bump(void *ud)
{
    atomic_fetch_add(&((counter *)ud)->n, 1);
}

/* Non-blocking use with notify: AGAIN, then a notification, then data. */
static void test_notify(void)
{
    sio_feed_config fc = {.window_samples = 8, .join_timeout_ms = 1};
    sio_feed *f = NULL;
    counter cnt = {0};
    sio_cursor *c = NULL;
    static uint64_t want[MAXN];
    size_t n = oracle(0, 1, SIO_PARTITION_NONE, 0, 0, want), got = 0;
    CHECK(sio_feed_open(io, list, &ecfg, &fc, &f, NULL) == SIO_OK);
    sio_cursor_config cc = {.rank = 0, .world = 1,
                            .policy = SIO_PARTITION_NONE, .notify = bump,
                            .userdata = &cnt};
    CHECK(sio_feed_attach(f, &cc, &c, NULL) == SIO_OK);
    int agains = 0;
    for (;;) {
        const sio_sample *s = NULL;
        int before = atomic_load(&cnt.n);
        sio_code rc = sio_cursor_next(c, &s);
        if (rc == SIO_ERR_AGAIN) {
            agains++;
            /* wait for the notification, not by spinning on next() */
            /* (a deadline of a minute: a loaded machine may not run the
             * producer for a long while) */
            for (int w = 0; w < 300000 && atomic_load(&cnt.n) == before; w++)
                usleep(200);
            CHECK(atomic_load(&cnt.n) > before);
            continue;
        }
        CHECK(rc == SIO_OK);
        if (!s)
            break;
        if (got < MAXN)
            CHECK_EQ_U64(s->global_index, want[got]);
        got++;
        sio_sample_unref(s);
    }
    CHECK_EQ_U64(got, n);
    CHECK(agains >= 1);
    sio_cursor_close(c);
    sio_feed_close(f);
}

/* Detach and reattach with the position, a late joiner beyond the window,
 * and an elastic resume with another world. */
static void test_resume(void)
{
    /* The lag grace is far above any pause a loaded machine makes: the
     * checks below look at a state the detached place holds for its
     * rejoin grace, and a slide by the lag policy would end that hold.
     * So is the join grace: rank 1's thread may start late, and a rank
     * not waited for lets the window go on without it. */
    sio_feed_config fc = {.window_samples = 16, .join_timeout_ms = 600000,
                          .rejoin_grace_ms = 600000, .lag_grace_ms = 600000};
    sio_feed *f = NULL;
    static job a, b, late, el;
    CHECK(sio_feed_open(io, list, &ecfg, &fc, &f, NULL) == SIO_OK);
    /* rank 0 of 2 stops after 37 samples and comes back at 37 */
    memset(&a, 0, sizeof a);
    a.f = f;
    a.cc = (sio_cursor_config){.rank = 0, .world = 2,
                               .policy = SIO_PARTITION_EVEN_DROP};
    a.stop_after = 37;
    memset(&b, 0, sizeof b);
    b.f = f;
    b.cc = (sio_cursor_config){.rank = 1, .world = 2,
                               .policy = SIO_PARTITION_EVEN_DROP};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_cursor, &a);
    pthread_create(&tb, NULL, run_cursor, &b);
    pthread_join(ta, NULL);
    compare(&a, SIO_PARTITION_EVEN_DROP);
    /* the detached rank holds the window: rank 1 cannot run away */
    usleep(100000);
    sio_feed_stats st;
    sio_feed_consumer cons[8];
    size_t nc = 0;
    sio_feed_get_stats(f, &st, cons, 8, &nc);
    CHECK(st.window_lo <= 2 * 37);
    CHECK(nc >= 1);
    int saw_detached = 0;
    for (size_t i = 0; i < nc && i < 8; i++)
        saw_detached |= cons[i].rank == 0 && !cons[i].attached &&
                        cons[i].position == 37;
    CHECK(saw_detached);
    memset(&a, 0, sizeof a);
    a.f = f;
    a.cc = (sio_cursor_config){.rank = 0, .world = 2, .start = 37,
                               .policy = SIO_PARTITION_EVEN_DROP};
    pthread_create(&ta, NULL, run_cursor, &a);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    compare(&a, SIO_PARTITION_EVEN_DROP);
    compare(&b, SIO_PARTITION_EVEN_DROP);
    /* the window has slid past the start: a late joiner gets a replay */
    memset(&late, 0, sizeof late);
    late.f = f;
    late.cc = (sio_cursor_config){.rank = 2, .world = 3,
                                  .policy = SIO_PARTITION_EVEN_PAD};
    run_cursor(&late);
    compare(&late, SIO_PARTITION_EVEN_PAD);
    sio_feed_close(f);

    /* Regression: the producer fills the window before anyone attaches and
     * waits; a cursor resuming beyond the window must make it slide (it
     * used to wait for ever, nobody taking a sample to wake the producer). */
    {
        sio_feed_config small = {.window_samples = 4, .join_timeout_ms = 1};
        sio_cursor *c = NULL;
        static uint64_t want[MAXN];
        size_t n = oracle(0, 1, SIO_PARTITION_NONE, 30, 0, want);
        CHECK(sio_feed_open(io, list, &ecfg, &small, &f, NULL) == SIO_OK);
        usleep(50000); /* let the producer fill the window and wait */
        sio_cursor_config cc = {.rank = 0, .world = 1, .global_start = 30,
                                .policy = SIO_PARTITION_NONE};
        CHECK(sio_feed_attach(f, &cc, &c, NULL) == SIO_OK);
        size_t got = 0;
        for (;;) {
            const sio_sample *s = NULL;
            CHECK(sio_cursor_next_wait(c, &s) == SIO_OK);
            if (!s)
                break;
            if (got < MAXN)
                CHECK_EQ_U64(s->global_index, want[got]);
            got++;
            sio_sample_unref(s);
        }
        CHECK_EQ_U64(got, n);
        sio_cursor_close(c);
        sio_feed_close(f);
    }

    /* elastic: a run of W=2 stopped at global cursor 40 continues with
     * W=3; the union after the cursor is the rest of Y, in order */
    static uint64_t full[MAXN];
    size_t n = oracle(0, 1, SIO_PARTITION_NONE, 0, 0, full);
    CHECK(sio_feed_open(io, list, &ecfg, &fc, &f, NULL) == SIO_OK);
    static job e3[3];
    pthread_t t3[3];
    for (uint32_t r = 0; r < 3; r++) {
        memset(&e3[r], 0, sizeof e3[r]);
        e3[r].f = f;
        e3[r].cc = (sio_cursor_config){.rank = r, .world = 3,
                                       .global_start = 40,
                                       .policy = SIO_PARTITION_NONE};
        pthread_create(&t3[r], NULL, run_cursor, &e3[r]);
    }
    for (uint32_t r = 0; r < 3; r++)
        pthread_join(t3[r], NULL);
    size_t total = 0;
    for (uint32_t r = 0; r < 3; r++) {
        compare(&e3[r], SIO_PARTITION_NONE);
        for (size_t i = 0; i < e3[r].n && i < MAXN; i++)
            CHECK_EQ_U64(e3[r].got[i], full[40 + r + i * 3]);
        total += e3[r].n;
    }
    CHECK_EQ_U64(total, n - 40);
    sio_feed_close(f);
    (void)el;
}

int main(void)
{
    char dir[] = "/tmp/shardcast-feed-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    for (int s = 0; s < 6; s++) {
        tar_member m[80];
        static char names[80][32];
        int per = 10 + s * 13;
        for (int i = 0; i < per; i++) {
            snprintf(names[i], 32, "s%d_%03d.bin", s, i);
            m[i].name = names[i];
            m[i].data = "payload-payload-payload";
            m[i].len = (size_t)(1 + i % 20);
        }
        char p[512];
        snprintf(p, sizeof p, "%s/shard-%d.tar", dir, s);
        CHECK(write_tar(p, m, (size_t)per, "none", "pax") == 0);
    }
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_shardlist_resolve(io, dir, &list, NULL) == SIO_OK);
    test_threads(SIO_PARTITION_EVEN_DROP, 4, 8);
    test_threads(SIO_PARTITION_EVEN_DROP, 3, 1000);
    test_threads(SIO_PARTITION_NONE, 5, 16);
    test_threads(SIO_PARTITION_EVEN_PAD, 7, 7);
    test_threads(SIO_PARTITION_EVEN_PAD, 1, 4);
    test_notify();
    test_resume();
    sio_shardlist_free(list);
    sio_io_destroy(io);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
