/*
 * test_hist.c — the fixed-bucket histograms (shardio_hist.h): bucket
 * bounds are inclusive upper bounds, the text is cumulative with +Inf
 * equal to _count, _sum is exact seconds, the two layouts, snapshots and
 * sums, and observations from several threads at once lose nothing.
 */
#include <pthread.h>
#include <time.h>

#include "check.h"
#include "shardio.h"
#include "shardio_hist.h"
#include "shardio_wire.h"

/* The value of the series line that starts with `prefix` (-1: none). */
static long long value_of(const char *text, const char *prefix)
{
    const char *p = text;
    size_t n = strlen(prefix);
    while (p && *p) {
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
            return atoll(p + n + 1);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

static sio_hist shared_h;

static void *observer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100000; i++)
        sio_hist_observe(&shared_h, &sio_hist_latency,
                         (uint64_t)(i % 7) * 1000000u);
    return NULL;
}

int main(void)
{
    /* Layouts. */
    CHECK_EQ_U64(sio_hist_latency.n, 16);
    CHECK_EQ_U64(sio_hist_duration.n, 19);
    CHECK_STR(sio_hist_latency.le[0], "0.0005");
    CHECK_STR(sio_hist_latency.le[15], "60");
    CHECK_STR(sio_hist_duration.le[18], "3600");
    for (size_t i = 1; i < sio_hist_duration.n; i++)
        CHECK(sio_hist_duration.le_ns[i] > sio_hist_duration.le_ns[i - 1]);
    CHECK(sio_hist_duration.n + 1 <= SIO_HIST_BUCKETS_MAX);

    /* Upper bounds are inclusive: exactly 1 ms is in le="0.001". */
    {
        sio_hist h;
        sio_hist_snap s;
        sio_wbuf b;
        memset(&h, 0, sizeof h);
        sio_hist_observe(&h, &sio_hist_latency, 0);
        sio_hist_observe(&h, &sio_hist_latency, 1000000u);     /* 1 ms */
        sio_hist_observe(&h, &sio_hist_latency, 1000001u);     /* just above */
        sio_hist_observe(&h, &sio_hist_latency, 61000000000u); /* 61 s */
        sio_hist_snapshot(&h, &s);
        CHECK_EQ_U64(sio_hist_snap_count(&s), 4);
        CHECK_EQ_U64(s.bucket[0], 1);
        CHECK_EQ_U64(s.bucket[1], 1);
        CHECK_EQ_U64(s.bucket[2], 1);
        CHECK_EQ_U64(s.bucket[16], 1); /* +Inf of the latency layout */
        CHECK_EQ_U64(s.sum_ns, 0 + 1000000u + 1000001u + 61000000000u);

        sio_wbuf_init(&b, 1 << 20);
        CHECK(sio_hist_write(&b, "x_seconds", "a=\"1\"", &sio_hist_latency,
                             &s) == SIO_OK);
        CHECK(sio_wbuf_append(&b, "", 1) == SIO_OK);
        const char *t = (const char *)b.data;
        CHECK_EQ_U64(value_of(t, "x_seconds_bucket{a=\"1\",le=\"0.0005\"}"), 1);
        CHECK_EQ_U64(value_of(t, "x_seconds_bucket{a=\"1\",le=\"0.001\"}"), 2);
        CHECK_EQ_U64(value_of(t, "x_seconds_bucket{a=\"1\",le=\"0.0025\"}"), 3);
        CHECK_EQ_U64(value_of(t, "x_seconds_bucket{a=\"1\",le=\"60\"}"), 3);
        CHECK_EQ_U64(value_of(t, "x_seconds_bucket{a=\"1\",le=\"+Inf\"}"), 4);
        CHECK_EQ_U64(value_of(t, "x_seconds_count{a=\"1\"}"), 4);
        CHECK(strstr(t, "x_seconds_sum{a=\"1\"} 61.002000001\n") != NULL);
        CHECK(strstr(t, "le=\"300\"") == NULL); /* not in this layout */
        /* Cumulative and monotone, +Inf last. */
        {
            long long prev = -1;
            int lines = 0;
            for (const char *p = t; (p = strstr(p, "x_seconds_bucket{")); p++) {
                long long v = atoll(strchr(p, ' ') + 1);
                CHECK(v >= prev);
                prev = v;
                lines++;
            }
            CHECK_EQ_U64(lines, 17);
        }
        sio_wbuf_free(&b);

        /* Unlabelled, and the duration layout. */
        sio_wbuf_init(&b, 1 << 20);
        CHECK(sio_hist_write(&b, "y_seconds", "", &sio_hist_duration, &s) ==
              SIO_OK);
        CHECK(sio_wbuf_append(&b, "", 1) == SIO_OK);
        t = (const char *)b.data;
        CHECK_EQ_U64(value_of(t, "y_seconds_bucket{le=\"60\"}"), 3);
        CHECK_EQ_U64(value_of(t, "y_seconds_bucket{le=\"300\"}"), 4);
        CHECK_EQ_U64(value_of(t, "y_seconds_bucket{le=\"+Inf\"}"), 4);
        CHECK(strstr(t, "\ny_seconds_sum 61.002000001\ny_seconds_count 4\n") !=
              NULL);
        sio_wbuf_free(&b);
    }

    /* Plain snapshots: observe, add. */
    {
        sio_hist_snap a, c;
        memset(&a, 0, sizeof a);
        memset(&c, 0, sizeof c);
        sio_hist_snap_observe(&a, &sio_hist_latency, 20000000u); /* 20 ms */
        sio_hist_snap_observe(&c, &sio_hist_latency, 20000000u);
        sio_hist_snap_observe(&c, &sio_hist_latency, 7000000000u); /* 7 s */
        sio_hist_snap_add(&a, &c);
        CHECK_EQ_U64(sio_hist_snap_count(&a), 3);
        CHECK_EQ_U64(a.bucket[5], 2); /* le 0.025 */
        CHECK_EQ_U64(a.bucket[13], 1); /* le 10 */
        CHECK_EQ_U64(a.sum_ns, 7040000000u);
    }

    /* Several threads at once. */
    {
        pthread_t t[4];
        sio_hist_snap s;
        for (int i = 0; i < 4; i++)
            CHECK(pthread_create(&t[i], NULL, observer, NULL) == 0);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
        sio_hist_snapshot(&shared_h, &s);
        CHECK_EQ_U64(sio_hist_snap_count(&s), 400000);
    }

    /* ns_since is monotone and not negative. */
    {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(sio_hist_ns_since(&t0) < 10000000000u);
        t0.tv_sec += 1000;
        CHECK_EQ_U64(sio_hist_ns_since(&t0), 0);
    }
    CHECK_MAIN_END();
}
