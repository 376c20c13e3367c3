/*
 * test_readahead.c — read-ahead threads and slow storage never change the
 * order of an epoch.
 *
 * A "slow://" backend wraps local files and sleeps a pseudo-random time
 * (fixed per delay seed, shard and read) before every read, so shards
 * finish in a different real-time order than the logical one. The epoch
 * must be identical with 0, 1 and 16 read threads and any delay pattern.
 */
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "store/store_int.h"
#include "check.h"
#include "tarutil.h"

typedef struct slow_ctx {
    uint64_t seed;
    atomic_ulong reads;
} slow_ctx;

typedef struct slow_stream {
    sio_stream base;
    sio_stream *inner;
    uint64_t state;
} slow_stream;

static int slow_matches(const char *url)
{
    return strncmp(url, "slow://", 7) == 0;
}

static sio_code slow_read(sio_stream *s, void *buf, size_t cap, size_t *got)
{
    slow_stream *ss = (slow_stream *)s;
    ss->state = ss->state * 6364136223846793005ull + 1442695040888963407ull;
    struct timespec ts = {0, (long)((ss->state >> 33) % 3000) * 1000};
    nanosleep(&ts, NULL);
    return ss->inner->ops->read(ss->inner, buf, cap, got);
}

static const char *slow_errmsg(const sio_stream *s)
{
    const slow_stream *ss = (const slow_stream *)s;
    return ss->inner->ops->errmsg(ss->inner);
}

static void slow_close(sio_stream *s)
{
    slow_stream *ss = (slow_stream *)s;
    ss->inner->ops->close(ss->inner);
    free(ss);
}

static const sio_stream_ops slow_stream_ops = {slow_read, slow_errmsg,
                                               slow_close, NULL, NULL};

static sio_code slow_stat(void *ctx, const char *url, uint64_t *size,
                          sio_error *err)
{
    return sio_backend_file.stat(NULL, url + 7, size, err);
}

static int slow_is_container(void *ctx, const char *url)
{
    return 0;
}

static sio_code slow_list(void *ctx, const char *url, sio_objlist *out,
                          sio_error *err)
{
    return sio_seterr(err, SIO_ERR_UNSUPPORTED, "no listing");
}

static sio_code slow_open(void *ctx, const char *url, uint64_t offset,
                          sio_stream **out, sio_error *err)
{
    slow_ctx *c = ctx;
    slow_stream *ss = calloc(1, sizeof *ss);
    if (!ss)
        return SIO_ERR_NOMEM;
    sio_code rc = sio_backend_file.open(NULL, url + 7, offset, &ss->inner,
                                        err);
    if (rc) {
        free(ss);
        return rc;
    }
    ss->base.ops = &slow_stream_ops;
    ss->state = c->seed;
    for (const char *p = url; *p; p++)
        ss->state = ss->state * 31 + (unsigned char)*p;
    atomic_fetch_add(&c->reads, 1);
    *out = &ss->base;
    return SIO_OK;
}

static const sio_backend_ops slow_backend = {
    .name = "slow",
    .matches = slow_matches,
    .list = slow_list,
    .stat = slow_stat,
    .is_container = slow_is_container,
    .open = slow_open,
};

#define NSHARDS 8
#define MAXS 400

static size_t run(const char *dir, uint64_t delay_seed, uint32_t threads,
                  uint32_t ahead, char out[][32])
{
    sio_io *io = NULL;
    sio_io_config ic = {.read_buffer = 1024};
    slow_ctx ctx = {.seed = delay_seed};
    sio_shardlist *l = NULL;
    sio_epoch *ep = NULL;
    size_t n = 0;
    char pattern[600];
    CHECK(sio_io_create(&ic, &io, NULL) == SIO_OK);
    CHECK(sio_io_register_backend(io, &slow_backend, &ctx) == SIO_OK);
    snprintf(pattern, sizeof pattern, "slow://%s/shard-{0..%d}.tar", dir,
             NSHARDS - 1);
    CHECK(sio_shardlist_resolve(io, pattern, &l, NULL) == SIO_OK);
    sio_epoch_config cfg = {.seed = 77, .epoch = 3, .interleave = 3,
                            .buffer_samples = 20, .read_threads = threads,
                            .readahead_shards = ahead,
                            .readahead_bytes = 2000};
    CHECK(sio_epoch_open(io, l, &cfg, &ep, NULL) == SIO_OK);
    for (;;) {
        const sio_sample *s = NULL;
        CHECK(sio_epoch_next(ep, &s) == SIO_OK);
        if (!s)
            break;
        if (n < MAXS)
            snprintf(out[n], 32, "%s", s->key);
        n++;
        sio_sample_unref(s);
    }
    sio_epoch_close(ep);
    sio_shardlist_free(l);
    sio_io_destroy(io);
    CHECK(atomic_load(&ctx.reads) == NSHARDS);
    return n;
}

int main(void)
{
    char dir[] = "/tmp/shardcast-ra-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    /* shards of different lengths, so slots finish at different times */
    for (int s = 0; s < NSHARDS; s++) {
        tar_member m[64];
        static char names[64][32];
        static char data[64][700];
        int per = 5 + (s * 7) % 40;
        for (int i = 0; i < per; i++) {
            snprintf(names[i], 32, "s%d_%02d.bin", s, i);
            memset(data[i], 'a' + i % 26, sizeof data[i]);
            m[i].name = names[i];
            m[i].data = data[i];
            m[i].len = (size_t)(100 + (i * 37) % 600);
        }
        char p[512];
        snprintf(p, sizeof p, "%s/shard-%d.tar", dir, s);
        CHECK(write_tar(p, m, (size_t)per, "none", "pax") == 0);
    }
    static char want[MAXS][32], got[MAXS][32];
    size_t n = run(dir, 0, 0, 0, want);
    CHECK(n > 100);
    static const struct { uint64_t seed; uint32_t threads, ahead; } v[] = {
        {1, 1, 0}, {2, 1, 4}, {3, 16, 0}, {4, 16, 8}, {5, 2, 2}, {6, 16, 16},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        memset(got, 0, sizeof got);
        CHECK_EQ_U64(run(dir, v[i].seed, v[i].threads, v[i].ahead, got), n);
        CHECK(memcmp(want, got, sizeof want) == 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
