/*
 * test_seek.c — the order from the shard indexes equals the order streamed,
 * and an epoch opened at position P yields exactly Y[P:], over random
 * datasets (plain and compressed shards, bad samples, skipped members,
 * long names), random seeds, K, B and byte caps; with indexes built while
 * streaming, persisted and reloaded, partial indexes, and journals.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "samplesum.h"
#include "tarutil.h"

typedef struct yitem {
    uint32_t shard;
    uint64_t group;
    uint64_t bytes;
    uint64_t sum; /* FNV of key and payload */
} yitem;

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    return xorshift_next(&rnd_state);
}

static uint64_t sample_sum(const sio_sample *s)
{
    return sample_sum_of(s, 0);
}

/* Stream the whole epoch (building indexes), recording Y. */
static size_t stream_all(sio_io *io, const sio_shardlist *l,
                         const sio_epoch_config *c, uint64_t from,
                         yitem *y, size_t max)
{
    sio_epoch *ep = NULL;
    sio_error e;
    size_t n = 0;
    sio_code rc = sio_epoch_open_at(io, l, c, from, &ep, &e);
    if (rc) {
        fprintf(stderr, "open_at %llu: %s\n", (unsigned long long)from, e.msg);
        CHECK(rc == SIO_OK);
        return 0;
    }
    for (;;) {
        const sio_sample *s;
        rc = sio_epoch_next(ep, &s);
        CHECK(rc == SIO_OK);
        if (rc || !s)
            break;
        CHECK_EQ_U64(s->global_index, from + n);
        if (n < max) {
            y[n].shard = s->shard_index;
            y[n].group = s->index_in_shard;
            y[n].bytes = s->bytes;
            y[n].sum = sample_sum(s);
        }
        n++;
        sio_sample_unref(s);
    }
    sio_epoch_close(ep);
    return n;
}

static int same(const yitem *a, const yitem *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].shard != b[i].shard || a[i].group != b[i].group ||
            a[i].bytes != b[i].bytes || a[i].sum != b[i].sum) {
            fprintf(stderr, "differs at %zu: %u/%llu vs %u/%llu\n", i,
                    a[i].shard, (unsigned long long)a[i].group, b[i].shard,
                    (unsigned long long)b[i].group);
            return 0;
        }
    return 1;
}

static void check_order(sio_io *io, const sio_shardlist *l,
                        const sio_epoch_config *c, const yitem *y, size_t n)
{
    sio_order_item *it = malloc((n + 1) * sizeof *it);
    size_t got = 0;
    sio_error e;
    CHECK(sio_epoch_order(io, l, c, 0, it, n + 1, &got, &e) == SIO_OK);
    CHECK_EQ_U64(got, n);
    int ok = got == n;
    for (size_t i = 0; ok && i < n; i++)
        ok = it[i].shard == y[i].shard && it[i].group == y[i].group;
    CHECK(ok);
    uint64_t cnt;
    CHECK(sio_epoch_count(io, l, c, &cnt) == SIO_OK);
    CHECK_EQ_U64(cnt, n);
    free(it);
}

static void one_dataset(int round)
{
    char dir[] = "/tmp/shardcast-seek-XXXXXX";
    char state[600], cmd[700];
    sio_io *io = NULL;
    sio_shardlist *l = NULL;
    sio_index *ix = NULL;
    sio_index_config icfg = {0};
    CHECK(mkdtemp(dir) != NULL);
    int nshards = 1 + (int)(rnd() % 7);
    for (int s = 0; s < nshards; s++) {
        char p[600];
        int gz = rnd() % 4 == 0;
        snprintf(p, sizeof p, "%s/shard-%02d.tar%s", dir, s, gz ? ".gz" : "");
        make_random_shard(p, (int)(rnd() % 70), gz, rnd);
    }
    snprintf(state, sizeof state, "%s/state", dir);
    icfg.dir = state;
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_shardlist_resolve(io, dir, &l, NULL) == SIO_OK);
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);

    for (int trial = 0; trial < 4; trial++) {
        sio_epoch_config c = {0};
        c.seed = rnd();
        c.epoch = rnd() % 5;
        c.interleave = 1 + (uint32_t)(rnd() % 5);
        c.buffer_samples = 1 + (uint32_t)(rnd() % 60);
        c.buffer_bytes = rnd() % 2 ? 0 : 2000 + rnd() % 40000;
        c.read_threads = (uint32_t)(rnd() % 3);
        c.index = ix;
        yitem *y = malloc(5000 * sizeof *y), *z = malloc(5000 * sizeof *z);
        size_t n = stream_all(io, l, &c, 0, y, 5000);
        check_order(io, l, &c, y, n);
        for (int k = 0; k < 5; k++) {
            uint64_t p = n ? rnd() % (n + 1) : 0;
            size_t m = stream_all(io, l, &c, p, z, 5000);
            CHECK_EQ_U64(m, n - p);
            CHECK(same(y + p, z, m));
        }
        /* past the end: an empty epoch */
        CHECK_EQ_U64(stream_all(io, l, &c, n + 5, z, 5000), 0);

        /* A journal decision: shard 0 ends after a few groups. Streaming
         * with the journal, the order from the index and seeks agree. */
        sio_journal *j = NULL;
        char jpath[700];
        snprintf(jpath, sizeof jpath, "%s/journal-%d", state, trial);
        CHECK(sio_journal_open(jpath, 0, &j, NULL) == SIO_OK);
        uint64_t cut = rnd() % 10;
        CHECK_EQ_U64(sio_journal_record(j, 0, cut, SIO_ERR_NOTFOUND, "gone"),
                     cut);
        CHECK_EQ_U64(sio_journal_record(j, 0, cut + 3, SIO_ERR_IO, "later"),
                     cut); /* the first decision wins */
        sio_journal_close(j);
        CHECK(sio_journal_open(jpath, 0, &j, NULL) == SIO_OK); /* reloaded */
        uint64_t have = 0;
        CHECK(sio_journal_cut(j, 0, &have) && have == cut);
        c.journal = j;
        size_t nj = stream_all(io, l, &c, 0, y, 5000);
        CHECK(nj <= n);
        check_order(io, l, &c, y, nj);
        for (int k = 0; k < 3; k++) {
            uint64_t p = nj ? rnd() % (nj + 1) : 0;
            size_t m = stream_all(io, l, &c, p, z, 5000);
            CHECK_EQ_U64(m, nj - p);
            CHECK(same(y + p, z, m));
        }
        sio_journal_close(j);
        free(y);
        free(z);
    }
    sio_index_stats st;
    sio_index_get_stats(ix, &st);
    CHECK_EQ_U64(st.complete, (uint64_t)nshards);
    sio_index_close(ix);

    /* Reloaded from state: complete without reading a shard. */
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);
    {
        sio_epoch_config c = {.seed = 5, .epoch = 1, .interleave = 2,
                              .buffer_samples = 7, .index = ix};
        uint64_t cnt = 0;
        CHECK(sio_epoch_count(io, l, &c, &cnt) == SIO_OK);
        sio_index_get_stats(ix, &st);
        CHECK_EQ_U64(st.loaded, (uint64_t)nshards);
        yitem *y = malloc(5000 * sizeof *y);
        size_t n = stream_all(io, l, &c, 0, y, 5000);
        CHECK_EQ_U64(n, cnt);
        check_order(io, l, &c, y, n);
        free(y);
    }
    sio_index_close(ix);

    /* Partial indexes: a memory store, an epoch read only in part. A seek
     * either reaches P (and then is exact) or says SIO_ERR_AGAIN. */
    {
        sio_index_config mem = {0};
        CHECK(sio_index_open(&mem, &ix, NULL) == SIO_OK);
        sio_epoch_config c = {.seed = (uint64_t)round, .epoch = 2,
                              .interleave = 3, .buffer_samples = 9,
                              .read_threads = 1};
        yitem *y = malloc(5000 * sizeof *y), *z = malloc(5000 * sizeof *z);
        size_t n = stream_all(io, l, &c, 0, y, 5000); /* no index */
        c.index = ix;
        sio_epoch *ep = NULL;
        CHECK(sio_epoch_open(io, l, &c, &ep, NULL) == SIO_OK);
        size_t half = n / 2;
        for (size_t i = 0; i < half; i++) {
            const sio_sample *s;
            CHECK(sio_epoch_next(ep, &s) == SIO_OK);
            sio_sample_unref(s);
        }
        sio_epoch_close(ep);
        for (size_t p = 0; p <= half; p += 1 + half / 7) {
            sio_epoch *e2 = NULL;
            sio_error er;
            sio_code rc = sio_epoch_open_at(io, l, &c, p, &e2, &er);
            CHECK(rc == SIO_OK || rc == SIO_ERR_AGAIN);
            sio_epoch_close(e2);
            if (rc == SIO_OK) {
                size_t m = stream_all(io, l, &c, p, z, 5000);
                CHECK_EQ_U64(m, n - p);
                CHECK(same(y + p, z, m));
            }
        }
        free(y);
        free(z);
        sio_index_close(ix);
    }
    sio_shardlist_free(l);
    sio_io_destroy(io);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* A corrupt or stale index file is refused, never used. */
static void test_parse(void)
{
    unsigned char buf[256];
    sio_index_file f;
    sio_error e;
    memset(buf, 0, sizeof buf);
    CHECK(sio_index_parse(buf, sizeof buf, &f, &e) == SIO_ERR_FORMAT);
    CHECK(sio_index_parse("SCIDX", 5, &f, &e) == SIO_ERR_FORMAT);
}

int main(void)
{
    test_parse();
    for (int round = 0; round < 12; round++)
        one_dataset(round);
    CHECK_MAIN_END();
}
