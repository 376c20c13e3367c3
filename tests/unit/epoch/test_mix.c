/*
 * test_mix.c — mixed epochs (docs/order.md "Mixing datasets", contract version 2):
 * the quota rules, the mix sequence rebuilt from first principles (the
 * draw with stream 3 over the quotas left, each source's passes as
 * version-1 epochs with B = 1 and their own order stream), passes without
 * duplicates, resampling, a dry source, counts, the sources' sample
 * counters, golden values, and an unmixed epoch unchanged.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "tarutil.h"

#define MAXS 4096
/* test_golden: "shard.group" of the epoch, pinned. */
static const char GOLDEN_MIX[] =
    "2.1 2.0 0.0 1.1 2.2 1.0 0.1 0.2 1.3 2.4 1.0 0.0 2.3 1.2 2.0";

typedef struct item {
    uint32_t shard, source;
    uint64_t group;
} item;

/* Shards <dir>/<p>-NN.tar with per[i] samples each. */
static void make_source(const char *dir, const char *p, int n, const int *per)
{
    for (int s = 0; s < n; s++) {
        tar_member m[64];
        char names[64][48];
        for (int i = 0; i < per[s]; i++) {
            snprintf(names[i], sizeof names[i], "%s%d_%02d.bin", p, s, i);
            m[i].name = names[i];
            m[i].data = "0123456789abcdef";
            m[i].len = (size_t)(1 + (i * 7 + s) % 16);
        }
        char path[512];
        snprintf(path, sizeof path, "%s/%s-%02d.tar", dir, p, s);
        if (per[s] == 0) {
            /* an empty archive: two zero blocks */
            FILE *f = fopen(path, "wb");
            static const char z[1024];
            fwrite(z, 1, sizeof z, f);
            fclose(f);
        } else {
            CHECK(write_tar(path, m, (size_t)per[s], "none", "pax") == 0);
        }
    }
}

typedef struct fixture {
    sio_io *io;
    sio_shardlist *list;
    sio_index *ix;
    sio_mix_source src[4];
    uint32_t n;
} fixture;

static void fixture_open(fixture *fx, const char *const *dirs, uint32_t n)
{
    sio_shardlist *parts[4];
    sio_index_config ic = {0};
    uint32_t first = 0;
    memset(fx, 0, sizeof *fx);
    CHECK(sio_io_create(NULL, &fx->io, NULL) == SIO_OK);
    CHECK(sio_index_open(&ic, &fx->ix, NULL) == SIO_OK);
    for (uint32_t i = 0; i < n; i++) {
        CHECK(sio_shardlist_resolve(fx->io, dirs[i], &parts[i], NULL) ==
              SIO_OK);
        fx->src[i].first = first;
        fx->src[i].count = (uint32_t)sio_shardlist_count(parts[i]);
        first += fx->src[i].count;
    }
    CHECK(sio_shardlist_concat((const sio_shardlist *const *)parts, n,
                               &fx->list, NULL) == SIO_OK);
    CHECK_EQ_U64(sio_shardlist_count(fx->list), first);
    for (uint32_t i = 0; i < n; i++)
        sio_shardlist_free(parts[i]);
    fx->n = n;
}

/* Index every shard of the list (a count needs complete indexes; a
 * mixed epoch may stop reading a shard when a quota is met). */
static void index_all(fixture *fx)
{
    for (uint32_t i = 0; i < sio_shardlist_count(fx->list); i++) {
        const char *u = sio_shardlist_url(fx->list, i);
        sio_index_entry *e = sio_index_get(fx->ix, fx->io, u, UINT64_MAX);
        sio_index_info info;
        sio_index_get_info(e, &info);
        if (!info.complete)
            CHECK(sio_index_build(fx->io, u, i, NULL, e, NULL) == SIO_OK);
    }
}

static void fixture_close(fixture *fx)
{
    sio_shardlist_free(fx->list);
    sio_index_close(fx->ix);
    sio_io_destroy(fx->io);
}

/* Run an epoch; items and per-source counters. */
static size_t run(fixture *fx, sio_epoch_config *cfg, item *out, size_t max,
                  uint64_t *per_source)
{
    sio_epoch *ep = NULL;
    sio_error e;
    size_t n = 0;
    cfg->mix = fx->src;
    cfg->nmix = fx->n;
    cfg->index = fx->ix;
    if (sio_epoch_open(fx->io, fx->list, cfg, &ep, &e) != SIO_OK) {
        fprintf(stderr, "open: %s\n", e.msg);
        CHECK(0);
        return 0;
    }
    for (;;) {
        const sio_sample *s = NULL;
        CHECK(sio_epoch_next(ep, &s) == SIO_OK);
        if (!s)
            break;
        CHECK_EQ_U64(s->global_index, n);
        if (n < max) {
            out[n].shard = s->shard_index;
            out[n].source = s->source;
            out[n].group = s->index_in_shard;
        }
        n++;
        sio_sample_unref(s);
    }
    for (uint32_t i = 0; per_source && i < fx->n; i++)
        per_source[i] = sio_epoch_source_samples(ep, i);
    sio_epoch_close(ep);
    return n;
}

/* Source i's own sequence, pass after pass, as version-1 epochs (B = 1)
 * over its part of the list with stream SIO_RNG_PASS(i, k). */
static size_t source_sequence(fixture *fx, const sio_epoch_config *base,
                              uint32_t i, item *out, size_t want)
{
    size_t n = 0;
    for (uint32_t k = 0; n < want; k++) {
        sio_epoch_config c = *base;
        sio_epoch *ep = NULL;
        size_t before = n;
        c.mix = NULL;
        c.nmix = 0;
        c.buffer_samples = 1;
        c.buffer_bytes = 0;
        c.range_first = fx->src[i].first;
        c.range_count = fx->src[i].count;
        c.resample = fx->src[i].resample;
        c.order_stream = SIO_RNG_PASS(i, k);
        CHECK(sio_epoch_open(fx->io, fx->list, &c, &ep, NULL) == SIO_OK);
        for (;;) {
            const sio_sample *s = NULL;
            CHECK(sio_epoch_next(ep, &s) == SIO_OK);
            if (!s || n == want) {
                if (s)
                    sio_sample_unref(s);
                break;
            }
            out[n].shard = s->shard_index;
            out[n].source = i;
            out[n].group = s->index_in_shard;
            n++;
            sio_sample_unref(s);
        }
        sio_epoch_close(ep);
        if (n == before)
            break; /* dry */
    }
    return n;
}

static void test_quotas(void)
{
    sio_mix_spec sp[4];
    uint64_t q[4], counts[4] = {100, 40, UINT64_MAX, 7};
    sio_error e;
    memset(sp, 0, sizeof sp);
    /* weights share the rest; ties of the remainder go to the lower one */
    sp[0].kind = SIO_MIX_WEIGHT;
    sp[0].value = 1;
    sp[1].kind = SIO_MIX_WEIGHT;
    sp[1].value = 1;
    sp[2].kind = SIO_MIX_WEIGHT;
    sp[2].value = 1;
    CHECK(sio_mix_quotas(sp, 3, 10, NULL, q, &e) == SIO_OK);
    CHECK_EQ_U64(q[0], 4);
    CHECK_EQ_U64(q[1], 3);
    CHECK_EQ_U64(q[2], 3);
    /* 0.6 / 0.25 / choose 15: R = 85 */
    sp[0].value = 0.6;
    sp[1].value = 0.25;
    sp[2].kind = SIO_MIX_CHOOSE;
    sp[2].choose = 15;
    CHECK(sio_mix_quotas(sp, 3, 100, NULL, q, &e) == SIO_OK);
    CHECK_EQ_U64(q[0] + q[1] + q[2], 100);
    CHECK_EQ_U64(q[2], 15);
    CHECK_EQ_U64(q[0], 60); /* 85 * 0.6 / 0.85 = 60 */
    CHECK_EQ_U64(q[1], 25);
    /* repeat needs the count; 1.5 * 7 = 10.5 rounds up */
    sp[0].kind = SIO_MIX_REPEAT;
    sp[0].value = 1.5;
    CHECK(sio_mix_quotas(sp, 1, 0, counts + 3, q, &e) == SIO_OK);
    CHECK_EQ_U64(q[0], 11);
    CHECK(sio_mix_quotas(sp, 1, 0, counts + 2, q, &e) == SIO_ERR_AGAIN);
    /* without weights epoch_size must be the sum */
    sp[0].kind = SIO_MIX_CHOOSE;
    sp[0].choose = 5;
    CHECK(sio_mix_quotas(sp, 1, 5, NULL, q, &e) == SIO_OK);
    CHECK(sio_mix_quotas(sp, 1, 6, NULL, q, &e) == SIO_ERR_INVALID);
    /* weights need epoch_size, and room */
    sp[1].kind = SIO_MIX_WEIGHT;
    sp[1].value = 1;
    CHECK(sio_mix_quotas(sp, 2, 0, NULL, q, &e) == SIO_ERR_INVALID);
    CHECK(sio_mix_quotas(sp, 2, 4, NULL, q, &e) == SIO_ERR_INVALID);
    CHECK(sio_mix_quotas(sp, 2, 5, NULL, q, &e) == SIO_OK);
    CHECK_EQ_U64(q[1], 0);
    /* bounds */
    sp[1].value = 0;
    CHECK(sio_mix_quotas(sp, 2, 10, NULL, q, &e) == SIO_ERR_INVALID);
    sp[1].value = 2e6;
    CHECK(sio_mix_quotas(sp, 2, 10, NULL, q, &e) == SIO_ERR_INVALID);
    sp[1].value = SIO_MIX_WEIGHT_MIN;
    CHECK(sio_mix_quotas(sp, 2, 10, NULL, q, &e) == SIO_OK);
    CHECK(sio_mix_quotas(sp, 0, 10, NULL, q, &e) == SIO_ERR_INVALID);
    /* many weights, the shares add up */
    sio_mix_spec many[200];
    uint64_t mq[200], sum = 0;
    for (int i = 0; i < 200; i++) {
        many[i].kind = SIO_MIX_WEIGHT;
        many[i].value = 1.0 + i * 0.37;
        many[i].choose = 0;
    }
    CHECK(sio_mix_quotas(many, 200, 1000003, NULL, mq, &e) == SIO_OK);
    for (int i = 0; i < 200; i++)
        sum += mq[i];
    CHECK_EQ_U64(sum, 1000003);
}

/* The mix rebuilt from the sources' own sequences and the draw. */
static void test_sequence_from_first_principles(const char *root)
{
    char a[600], b[600], c[600];
    int pa[] = {5, 3, 7}, pb[] = {4, 0, 6, 2}, pc[] = {9};
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    snprintf(c, sizeof c, "%s/c", root);
    mkdir(a, 0755);
    mkdir(b, 0755);
    mkdir(c, 0755);
    make_source(a, "a", 3, pa);
    make_source(b, "b", 4, pb);
    make_source(c, "c", 1, pc);
    const char *dirs[] = {a, b, c};
    fixture fx;
    fixture_open(&fx, dirs, 3);
    fx.src[0].quota = 40; /* 15 per pass: 2 passes and 10 */
    fx.src[1].quota = 25; /* resampled */
    fx.src[1].resample = 1;
    fx.src[2].quota = 5;  /* downsampled */
    sio_epoch_config cfg = {.seed = 11, .epoch = 3, .interleave = 2,
                            .buffer_samples = 1};
    static item got[MAXS], seq[4][MAXS], want[MAXS];
    uint64_t per[3];
    size_t n = run(&fx, &cfg, got, MAXS, per);
    CHECK_EQ_U64(n, 70);
    CHECK_EQ_U64(per[0], 40);
    CHECK_EQ_U64(per[1], 25);
    CHECK_EQ_U64(per[2], 5);
    size_t len[3], at[3] = {0, 0, 0};
    for (uint32_t i = 0; i < 3; i++)
        len[i] = source_sequence(&fx, &cfg, i, seq[i], fx.src[i].quota);
    /* With B = 1 the epoch is the mix itself: draw by quotas left. */
    sio_rng r;
    uint64_t left[3] = {40, 25, 5};
    sio_rng_seed(&r, 11, 3, SIO_RNG_MIX);
    for (size_t k = 0; k < 70; k++) {
        uint64_t x = sio_rng_below(&r, left[0] + left[1] + left[2]);
        uint32_t s = 0;
        while (x >= left[s])
            x -= left[s++];
        CHECK(at[s] < len[s]);
        want[k] = seq[s][at[s]++];
        left[s]--;
    }
    for (size_t k = 0; k < 70; k++) {
        CHECK_EQ_U64(got[k].shard, want[k].shard);
        CHECK_EQ_U64(got[k].group, want[k].group);
        CHECK_EQ_U64(got[k].source, want[k].source);
    }
    /* Without replacement, each pass of a holds every sample once. */
    for (size_t p = 0; p + 15 <= 40; p += 15) {
        int seen[3][8] = {{0}};
        for (size_t k = p; k < p + 15; k++) {
            item *it = &seq[0][k];
            CHECK(it->shard < 3 && it->group < 8);
            seen[it->shard][it->group]++;
        }
        for (int s = 0; s < 3; s++)
            for (int g = 0; g < pa[s]; g++)
                CHECK_EQ_U64(seen[s][g], 1);
    }
    /* c is downsampled: 5 distinct of its 9 */
    for (size_t k = 0; k < 5; k++)
        for (size_t j = k + 1; j < 5; j++)
            CHECK(seq[2][k].group != seq[2][j].group);

    /* With a buffer the multiset is the same, the order differs, and a
     * rerun is identical. */
    cfg.buffer_samples = 16;
    static item got2[MAXS], got3[MAXS];
    CHECK_EQ_U64(run(&fx, &cfg, got2, MAXS, NULL), 70);
    CHECK_EQ_U64(run(&fx, &cfg, got3, MAXS, NULL), 70);
    CHECK(memcmp(got2, got3, 70 * sizeof *got2) == 0);
    CHECK(memcmp(got2, got, 70 * sizeof *got) != 0);

    /* Counts from the indexes */
    uint64_t count = 0;
    index_all(&fx);
    cfg.mix = fx.src;
    cfg.nmix = 3;
    CHECK(sio_epoch_count(fx.io, fx.list, &cfg, &count) == SIO_OK);
    CHECK_EQ_U64(count, 70);
    /* a seek into a mixed epoch is a replay */
    sio_epoch *ep = NULL;
    CHECK(sio_epoch_open_at(fx.io, fx.list, &cfg, 5, &ep, NULL) ==
          SIO_ERR_UNSUPPORTED);
    /* and replicas do not serve mixed epochs */
    cfg.replicas = 2;
    CHECK(sio_epoch_open(fx.io, fx.list, &cfg, &ep, NULL) ==
          SIO_ERR_UNSUPPORTED);
    fixture_close(&fx);
}

static void test_dry_source(const char *root)
{
    char a[600], z[600];
    int pa[] = {6, 6}, pz[] = {0, 0};
    snprintf(a, sizeof a, "%s/da", root);
    snprintf(z, sizeof z, "%s/dz", root);
    mkdir(a, 0755);
    mkdir(z, 0755);
    make_source(a, "da", 2, pa);
    make_source(z, "dz", 2, pz);
    const char *dirs[] = {a, z};
    fixture fx;
    fixture_open(&fx, dirs, 2);
    fx.src[0].quota = 30;
    fx.src[1].quota = 50;
    sio_epoch_config cfg = {.seed = 1, .interleave = 3, .buffer_samples = 5};
    static item got[MAXS];
    uint64_t per[2];
    CHECK_EQ_U64(run(&fx, &cfg, got, MAXS, per), 30);
    CHECK_EQ_U64(per[0], 30);
    CHECK_EQ_U64(per[1], 0);
    uint64_t count = 0;
    index_all(&fx);
    cfg.mix = fx.src;
    cfg.nmix = 2;
    CHECK(sio_epoch_count(fx.io, fx.list, &cfg, &count) == SIO_OK);
    CHECK_EQ_U64(count, 30);
    fixture_close(&fx);
}

/* Over 100k samples the realized proportions are the quotas. */
static void test_proportions(const char *root)
{
    char a[600], b[600], c[600];
    int pa[] = {40, 40, 40}, pb[] = {50, 50}, pc[] = {30, 30, 30, 30};
    snprintf(a, sizeof a, "%s/pa", root);
    snprintf(b, sizeof b, "%s/pb", root);
    snprintf(c, sizeof c, "%s/pc", root);
    mkdir(a, 0755);
    mkdir(b, 0755);
    mkdir(c, 0755);
    make_source(a, "pa", 3, pa);
    make_source(b, "pb", 2, pb);
    make_source(c, "pc", 4, pc);
    sio_mix_spec sp[3] = {{SIO_MIX_WEIGHT, 0.6, 0},
                          {SIO_MIX_WEIGHT, 0.25, 0},
                          {SIO_MIX_WEIGHT, 0.15, 0}};
    uint64_t q[3];
    CHECK(sio_mix_quotas(sp, 3, 100000, NULL, q, NULL) == SIO_OK);
    CHECK_EQ_U64(q[0], 60000);
    CHECK_EQ_U64(q[1], 25000);
    CHECK_EQ_U64(q[2], 15000);
    const char *dirs[] = {a, b, c};
    fixture fx;
    fixture_open(&fx, dirs, 3);
    for (int i = 0; i < 3; i++)
        fx.src[i].quota = q[i];
    sio_epoch_config cfg = {.seed = 5, .epoch = 1, .interleave = 4,
                            .buffer_samples = 1000};
    uint64_t per[3];
    /* in the first 10k of Y too, within 1% of the weights */
    static item got[10000];
    CHECK_EQ_U64(run(&fx, &cfg, got, 10000, per), 100000);
    CHECK_EQ_U64(per[0], 60000);
    CHECK_EQ_U64(per[1], 25000);
    CHECK_EQ_U64(per[2], 15000);
    uint64_t head[3] = {0, 0, 0};
    for (int k = 0; k < 10000; k++)
        head[got[k].source]++;
    CHECK(head[0] > 5900 && head[0] < 6100);
    CHECK(head[1] > 2400 && head[1] < 2600);
    CHECK(head[2] > 1400 && head[2] < 1600);
    fixture_close(&fx);
}

/* Golden: the first samples of one mixed epoch, pinned. */
static void test_golden(const char *root)
{
    char a[600], b[600];
    int pa[] = {3, 4}, pb[] = {5};
    snprintf(a, sizeof a, "%s/ga", root);
    snprintf(b, sizeof b, "%s/gb", root);
    mkdir(a, 0755);
    mkdir(b, 0755);
    make_source(a, "ga", 2, pa);
    make_source(b, "gb", 1, pb);
    const char *dirs[] = {a, b};
    fixture fx;
    fixture_open(&fx, dirs, 2);
    fx.src[0].quota = 9;
    fx.src[1].quota = 6;
    fx.src[1].resample = 1;
    sio_epoch_config cfg = {.seed = 42, .epoch = 0, .interleave = 2,
                            .buffer_samples = 4};
    static item got[64];
    CHECK_EQ_U64(run(&fx, &cfg, got, 64, NULL), 15);
    char line[512] = "", one[32];
    for (int k = 0; k < 15; k++) {
        snprintf(one, sizeof one, "%u.%" PRIu64 "%s", got[k].shard,
                 got[k].group, k < 14 ? " " : "");
        strcat(line, one);
    }
    CHECK_STR(line, GOLDEN_MIX);
    fixture_close(&fx);
}

int main(void)
{
    char root[] = "/tmp/shardcast-mix-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    test_quotas();
    test_sequence_from_first_principles(root);
    test_dry_source(root);
    test_proportions(root);
    test_golden(root);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
