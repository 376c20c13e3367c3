/*
 * test_order.c — the determinism contract: PRNG, permutation, buffer
 * shuffle, interleave and partition, with golden values.
 *
 * The golden values below are the contract. If one of these checks fails,
 * the order of every epoch of every user has changed: that needs a new
 * contract version, never a silent update of the numbers.
 */
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "tarutil.h"

static sio_io *io;

static void test_rng_golden(void)
{
    sio_rng r = {{1, 2, 3, 4}};
    /* xoshiro256** reference outputs for the state {1, 2, 3, 4} */
    CHECK_EQ_U64(sio_rng_next(&r), 11520u);
    CHECK_EQ_U64(sio_rng_next(&r), 0u);
    CHECK_EQ_U64(sio_rng_next(&r), 1509978240u);
    CHECK_EQ_U64(sio_rng_next(&r), 1215971899390074240ull);
    /* seeding from (seed, epoch, stream) */
    sio_rng_seed(&r, 1234, 0, SIO_RNG_SHARDS);
    CHECK_EQ_U64(sio_rng_next(&r), 18091081584388955836ull);
    CHECK_EQ_U64(sio_rng_next(&r), 7943272506192505018ull);
    CHECK_EQ_U64(sio_rng_next(&r), 6709315140147773649ull);
    /* below() */
    static const uint64_t below_golden[10] = {5, 4, 2, 2, 4, 9, 3, 6, 7, 0};
    sio_rng_seed(&r, 42, 0, SIO_RNG_BUFFER);
    for (int i = 0; i < 10; i++)
        CHECK_EQ_U64(sio_rng_below(&r, 10), below_golden[i]);
    CHECK_EQ_U64(sio_rng_below(&r, 1), 0);
    /* below() stays in range for awkward n, incl. n near 2^64 */
    for (int i = 0; i < 1000; i++) {
        CHECK(sio_rng_below(&r, 3) < 3);
        CHECK(sio_rng_below(&r, (1ull << 63) + 1) < (1ull << 63) + 1);
    }
    /* permutations */
    static const uint32_t p0[10] = {0, 2, 8, 4, 3, 9, 1, 5, 6, 7};
    static const uint32_t p1[10] = {8, 4, 5, 9, 7, 2, 0, 6, 3, 1};
    uint32_t p[10];
    sio_rng_seed(&r, 42, 0, SIO_RNG_SHARDS);
    sio_permute(&r, p, 10);
    CHECK(memcmp(p, p0, sizeof p) == 0);
    sio_rng_seed(&r, 42, 1, SIO_RNG_SHARDS);
    sio_permute(&r, p, 10);
    CHECK(memcmp(p, p1, sizeof p) == 0);
    /* a permutation of a large n hits every value once */
    static uint32_t big[100000];
    static unsigned char seen[100000];
    sio_rng_seed(&r, 7, 7, SIO_RNG_SHARDS);
    sio_permute(&r, big, 100000);
    int ok = 1;
    for (int i = 0; i < 100000; i++) {
        if (big[i] >= 100000 || seen[big[i]])
            ok = 0;
        else
            seen[big[i]] = 1;
    }
    CHECK(ok);
    /* rough uniformity of below(): 60000 draws over 6 buckets */
    int hist[6] = {0};
    sio_rng_seed(&r, 1, 2, 3);
    for (int i = 0; i < 60000; i++)
        hist[sio_rng_below(&r, 6)]++;
    for (int i = 0; i < 6; i++)
        CHECK(hist[i] > 9400 && hist[i] < 10600);
}

/* Run a whole epoch over src, writing "key" lines into keys[]. */
static size_t run_epoch(const char *src, const sio_epoch_config *cfg,
                        char keys[][48], size_t max)
{
    sio_shardlist *l = NULL;
    sio_epoch *ep = NULL;
    size_t n = 0;
    CHECK(sio_shardlist_resolve(io, src, &l, NULL) == SIO_OK);
    CHECK(sio_epoch_open(io, l, cfg, &ep, NULL) == SIO_OK);
    for (;;) {
        const sio_sample *s = NULL;
        if (sio_epoch_next(ep, &s) != SIO_OK || !s)
            break;
        CHECK_EQ_U64(s->global_index, n);
        if (n < max)
            snprintf(keys[n], 48, "%s", s->key);
        n++;
        sio_sample_unref(s);
    }
    sio_epoch_close(ep);
    sio_shardlist_free(l);
    return n;
}

/* The golden test: over the shards in dir (seed 1234, K = 2, B = 100) an
 * epoch has `total` samples and begins with golden0 (epoch 0) and golden1
 * (epoch 1); the same inputs give the same order. */
static void check_golden(const char *dir, size_t total,
                         const char *const golden0[8],
                         const char *const golden1[8])
{
    static char a[1200][48], b[1200][48], c[1200][48];
    sio_epoch_config cfg = {.seed = 1234, .epoch = 0, .interleave = 2,
                            .buffer_samples = 100};
    CHECK_EQ_U64(run_epoch(dir, &cfg, a, 1200), total);
    for (int i = 0; i < 8; i++)
        CHECK_STR(a[i], golden0[i]);
    /* the same inputs give the same order */
    CHECK_EQ_U64(run_epoch(dir, &cfg, b, 1200), total);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* another epoch gives another order */
    cfg.epoch = 1;
    CHECK_EQ_U64(run_epoch(dir, &cfg, c, 1200), total);
    for (int i = 0; i < 8; i++)
        CHECK_STR(c[i], golden1[i]);
    CHECK(memcmp(a, c, sizeof a) != 0);
}

/* On the generated corpus (tests/tools/mkfixtures.py: GNU with directories
 * and long names, gzip GNU, gzip pax, pax). The values depend only on the
 * shard names and the keys of their samples, which the generator fixes;
 * they agree with the independent Python reference
 * (tests/contract/reference.py). */
static void test_golden_generated(void)
{
    char wds[4096];
    static const char *const golden0[8] = {
        "18", "with space/k 1", "25", "b266f4010e6070377986c6ae54c14e02",
        "d5823ce76a54e18b6822262e15730473", "9b207876379758ecae482139f1a167ae",
        "10ab3607c43f9268431d6b38aab381f5", "1fb6fa0fa543767b00443889e5a6680d"};
    static const char *const golden1[8] = {
        "2763d7cd03be98fa99d02666757de78e", "36", "20", "34",
        "6626986d882083e3b5358d7be9395137", "4366982fc26e1e62690b1974918eeef3",
        "89ddd57e6580f36bf98a8664e685cefe", "49eb27ace3e07a5a5dd5be74f74d8fa2"};
    check_golden(fixture_path(wds, sizeof wds, "wds"), 8 + 90 + 5 + 1000,
                 golden0, golden1);
}

/* On the upstream shards (the conformance layer, ../shared/testdata/wds). */
static void test_golden_upstream(void)
{
    char wds[4096];
    static const char *const golden0[8] = {
        "20", "compressed/0003", "27", "ece8e9216a7b4bc8b38149e86cd57037",
        "399e9b5edd3d4f4da01c3ab1cc434bda", "8f94cd458ebe46e1b9ba7fc1007a6c9e",
        "1b5d0b9fd7d64b1998fb94e5b9ba1866", "4059dac63ebe453789bd2dcf396548ad"};
    static const char *const golden1[8] = {
        "32", "f3a61f69fdff4c2c8e8f8f806d9d8312",
        "c74afa38fd9648da9ebb0e40276369ab",
        "b4e4d035be2041fb83889868f355a74a", "31", "10", "55", "49"};
    check_golden(shared_path(wds, sizeof wds, "testdata/wds"), 90 + 3 + 1000,
                 golden0, golden1);
}

/* Build shards s0..s(n-1) with `per` samples each in dir. */
static void make_shards(const char *dir, int n, int per)
{
    for (int s = 0; s < n; s++) {
        tar_member m[64];
        char names[64][32];
        for (int i = 0; i < per; i++) {
            snprintf(names[i], 32, "s%d_%02d.bin", s, i);
            m[i].name = names[i];
            m[i].data = "0123456789";
            m[i].len = (size_t)(1 + i % 10);
        }
        char p[512];
        snprintf(p, sizeof p, "%s/shard-%02d.tar", dir, s);
        CHECK(write_tar(p, m, (size_t)per, "none", "pax") == 0);
    }
}

static void test_interleave_and_buffer(void)
{
    char dir[] = "/tmp/shardcast-order-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    make_shards(dir, 3, 4);
    static char k[64][48];
    uint32_t perm[3];
    sio_rng r;
    /* B = 1, K = 1: shards in permuted order, samples in shard order */
    sio_epoch_config cfg = {.seed = 9, .epoch = 2, .interleave = 1,
                            .buffer_samples = 1};
    CHECK_EQ_U64(run_epoch(dir, &cfg, k, 64), 12);
    sio_rng_seed(&r, 9, 2, SIO_RNG_SHARDS);
    sio_permute(&r, perm, 3);
    for (int i = 0; i < 12; i++) {
        char want[48];
        snprintf(want, sizeof want, "s%u_%02d", perm[i / 4], i % 4);
        CHECK_STR(k[i], want);
    }
    /* B = 1, K = 2: round-robin over two slots; the third shard takes the
     * first slot that finishes */
    cfg.interleave = 2;
    CHECK_EQ_U64(run_epoch(dir, &cfg, k, 64), 12);
    const char *order[12];
    static char want[12][48];
    int pos[3] = {0, 0, 0}, idx = 0;
    /* slots 0 and 1 alternate for 4 rounds; then slot 0 takes shard 3rd
     * and runs alone */
    for (int round = 0; round < 4; round++)
        for (int s = 0; s < 2; s++) {
            snprintf(want[idx], 48, "s%u_%02d", perm[s], pos[s]++);
            order[idx] = want[idx];
            idx++;
        }
    for (int i = 0; i < 4; i++) {
        snprintf(want[idx], 48, "s%u_%02d", perm[2], pos[2]++);
        order[idx] = want[idx];
        idx++;
    }
    for (int i = 0; i < 12; i++)
        CHECK_STR(k[i], order[i]);
    /* a buffer shuffles but keeps every sample exactly once */
    cfg.buffer_samples = 5;
    CHECK_EQ_U64(run_epoch(dir, &cfg, k, 64), 12);
    int same = 1;
    for (int i = 0; i < 12; i++) {
        same &= strcmp(k[i], order[i]) == 0;
        int found = 0;
        for (int j = 0; j < 12; j++)
            found += strcmp(k[i], order[j]) == 0;
        CHECK_EQ_U64(found, 1);
    }
    CHECK(!same);
    /* K larger than the number of shards, B larger than the dataset */
    cfg.interleave = 16;
    cfg.buffer_samples = 1000;
    CHECK_EQ_U64(run_epoch(dir, &cfg, k, 64), 12);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static void test_bad_config(void)
{
    sio_shardlist *l = NULL;
    sio_epoch *ep = NULL;
    sio_consumer *c = NULL;
    sio_error e;
    const char *urls[] = {"/nonexistent/a.tar"};
    CHECK(sio_shardlist_from_urls(urls, 1, &l, NULL) == SIO_OK);
    sio_epoch_config cfg = {.interleave = 0, .buffer_samples = 1};
    CHECK(sio_epoch_open(io, l, &cfg, &ep, &e) == SIO_ERR_INVALID);
    cfg.interleave = 1;
    cfg.buffer_samples = 0;
    CHECK(sio_epoch_open(io, l, &cfg, &ep, &e) == SIO_ERR_INVALID);
    cfg.buffer_samples = 1;
    /* a missing shard is skipped (on_error=skip): an empty epoch */
    CHECK(sio_epoch_open(io, l, &cfg, &ep, &e) == SIO_OK);
    const sio_sample *s = (const sio_sample *)1;
    CHECK(sio_epoch_next(ep, &s) == SIO_OK && s == NULL);
    sio_epoch_stats st;
    sio_epoch_get_stats(ep, &st);
    CHECK_EQ_U64(st.shards_skipped, 1);
    sio_epoch_close(ep);
    /* ... and fails the epoch with on_error=fail, naming the URL */
    cfg.on_error = SIO_ON_ERROR_FAIL;
    CHECK(sio_epoch_open(io, l, &cfg, &ep, &e) == SIO_OK);
    CHECK(sio_epoch_next(ep, &s) == SIO_ERR_NOTFOUND);
    CHECK(strstr(sio_epoch_errmsg(ep), "/nonexistent/a.tar") != NULL);
    sio_epoch_close(ep);
    /* consumer arguments */
    CHECK(sio_epoch_open(io, l, &cfg, &ep, &e) == SIO_OK);
    CHECK(sio_consumer_open(ep, 2, 2, SIO_PARTITION_NONE, 0, &c, &e) ==
          SIO_ERR_INVALID); /* takes ep even on error */
    CHECK(sio_epoch_open(io, l, &cfg, &ep, &e) == SIO_OK);
    CHECK(sio_consumer_open(ep, 0, 0, SIO_PARTITION_NONE, 0, &c, &e) ==
          SIO_ERR_INVALID);
    sio_partition p;
    CHECK(sio_partition_parse("even-drop", &p) == 0 &&
          p == SIO_PARTITION_EVEN_DROP);
    CHECK(sio_partition_parse("even-pad", &p) == 0 &&
          p == SIO_PARTITION_EVEN_PAD);
    CHECK(sio_partition_parse("none", &p) == 0 && p == SIO_PARTITION_NONE);
    CHECK(sio_partition_parse("odd", &p) == -1);
    sio_shardlist_free(l);
}

/* even-drop / even-pad / none over W consumers on an epoch of 12. */
static void test_partition(void)
{
    char dir[] = "/tmp/shardcast-part-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    make_shards(dir, 3, 4); /* N = 12 */
    sio_shardlist *l = NULL;
    CHECK(sio_shardlist_resolve(io, dir, &l, NULL) == SIO_OK);
    sio_epoch_config cfg = {.seed = 3, .interleave = 2, .buffer_samples = 4};
    static const struct {
        sio_partition p;
        uint32_t w;
        uint64_t per, total;
    } cases[] = {
        {SIO_PARTITION_EVEN_DROP, 5, 2, 10}, {SIO_PARTITION_EVEN_DROP, 4, 3, 12},
        {SIO_PARTITION_EVEN_PAD, 5, 3, 15},  {SIO_PARTITION_NONE, 5, 0, 12},
        {SIO_PARTITION_EVEN_PAD, 20, 1, 20}, {SIO_PARTITION_EVEN_DROP, 20, 0, 0},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        uint64_t total = 0, hits[12] = {0};
        for (uint32_t r = 0; r < cases[t].w; r++) {
            sio_epoch *ep = NULL;
            sio_consumer *c = NULL;
            uint64_t n = 0;
            CHECK(sio_epoch_open(io, l, &cfg, &ep, NULL) == SIO_OK);
            CHECK(sio_consumer_open(ep, r, cases[t].w, cases[t].p, 0, &c,
                                    NULL) == SIO_OK);
            for (;;) {
                const sio_sample *s = NULL;
                CHECK(sio_consumer_next(c, &s) == SIO_OK);
                if (!s)
                    break;
                CHECK(s->global_index < 12);
                /* own samples are i mod W == r; only an even-pad tail
                 * sample (the last of a share) repeats another's */
                if (cases[t].p != SIO_PARTITION_EVEN_PAD ||
                    n + 1 < cases[t].per)
                    CHECK_EQ_U64(s->global_index % cases[t].w, r);
                hits[s->global_index]++;
                n++;
                sio_sample_unref(s);
            }
            CHECK_EQ_U64(sio_consumer_position(c), n);
            if (cases[t].p != SIO_PARTITION_NONE)
                CHECK_EQ_U64(n, cases[t].per);
            total += n;
            sio_consumer_close(c);
        }
        CHECK_EQ_U64(total, cases[t].total);
        for (int i = 0; i < 12; i++) {
            if (cases[t].p == SIO_PARTITION_EVEN_DROP)
                CHECK_EQ_U64(hits[i], (uint64_t)i < cases[t].total ? 1 : 0);
            else
                CHECK(hits[i] >= 1); /* none and pad: nothing lost */
        }
    }
    sio_shardlist_free(l);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
    int upstream = check_upstream_arg(argc, argv);
    if (upstream) {
        /* The conformance test on ../shared/testdata/wds. */
        char p[4096];
        int rc = conformance_missing(shared_path(p, sizeof p, "testdata/wds"));
        if (rc)
            return rc;
    }
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    if (upstream) {
        test_golden_upstream();
    } else {
        test_rng_golden();
        test_golden_generated();
        test_interleave_and_buffer();
        test_bad_config();
        test_partition();
    }
    sio_io_destroy(io);
    CHECK_MAIN_END();
}
