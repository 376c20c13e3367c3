/*
 * test_plan.c — the epoch's plan (shardio_plan.h) over random datasets:
 * Y from the plan equals the streamed Y (with and without a journal, with
 * byte caps, with a scale-out replica); every consumer's share read by a
 * sio_planread equals what sio_consumer deals from a streamed epoch, sample
 * for sample and byte for byte, under every partition policy and random
 * start / global_start; compressed shards, mixed epochs and shards not
 * indexed yet are refused; a shard truncated or rewritten under a plan
 * reader gives SIO_ERR_CHANGED and never a sample with other bytes.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "shardio_plan.h"
#include "samplesum.h"
#include "tarutil.h"

typedef struct yitem {
    uint32_t shard, source;
    uint64_t group, global;
    uint64_t sum; /* FNV of key, field names and payload */
} yitem;

static uint64_t rnd_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    return xorshift_next(&rnd_state);
}

static uint64_t sample_sum(const sio_sample *s)
{
    return sample_sum_of(s, 1);
}

static yitem item_of(const sio_sample *s)
{
    return (yitem){s->shard_index, s->source, s->index_in_shard,
                   s->global_index, sample_sum(s)};
}

/* A plan reader's sample: its payload read from its extents (as the
 * stream's sink does), then checked. Large samples must come as extents,
 * small ones in memory. -1 when the check fails. */
static int planned_item(sio_planread *r, const sio_sample *s,
                        const sio_extent *ext, yitem *out)
{
    sio_field f[64];
    unsigned char *mem[64] = {0};
    sio_sample c = *s;
    int rc = 0;
    CHECK(s->nfields <= 64);
    for (size_t i = 0; i < s->nfields && i < 64; i++) {
        f[i] = s->fields[i];
        if (ext && ext[i].fd >= 0) {
            CHECK(f[i].data == NULL);
            mem[i] = malloc(f[i].len + 1);
            ssize_t got = pread(ext[i].fd, mem[i], f[i].len,
                                (off_t)ext[i].offset);
            if (got != (ssize_t)f[i].len)
                rc = -1;
            f[i].data = mem[i];
        }
    }
    c.fields = f;
    if (sio_planread_verify(r) != SIO_OK)
        rc = -1;
    *out = item_of(&c);
    for (size_t i = 0; i < 64; i++)
        free(mem[i]);
    return rc;
}

/* Consumer (rank, world)'s share from a streamed epoch. */
static size_t share_streamed(sio_io *io, const sio_shardlist *l,
                             const sio_epoch_config *c, uint32_t rank,
                             uint32_t world, sio_partition p, uint64_t gs,
                             uint64_t start, yitem *y, size_t max)
{
    sio_epoch *ep = NULL;
    sio_consumer *cons = NULL;
    size_t n = 0;
    CHECK(sio_epoch_open(io, l, c, &ep, NULL) == SIO_OK);
    CHECK(sio_consumer_open_at(ep, rank, world, p, gs, start, &cons, NULL) ==
          SIO_OK);
    for (;;) {
        const sio_sample *s = NULL;
        sio_code rc = sio_consumer_next(cons, &s);
        CHECK(rc == SIO_OK);
        if (rc || !s)
            break;
        if (n < max)
            y[n] = item_of(s);
        n++;
        sio_sample_unref(s);
    }
    sio_consumer_close(cons);
    return n;
}

/* The same share from the plan. */
static size_t share_planned(sio_io *io, const sio_shardlist *l,
                            sio_plan *plan, uint32_t rank, uint32_t world,
                            sio_partition p, uint64_t gs, uint64_t start,
                            yitem *y, size_t max)
{
    sio_planread *r = NULL;
    sio_planread_config pc = {.rank = rank, .world = world, .policy = p,
                              .start = start, .global_start = gs};
    size_t n = 0;
    sio_error e;
    CHECK(sio_planread_open(io, l, plan, &pc, &r, &e) == SIO_OK);
    for (;;) {
        const sio_sample *s = NULL;
        const sio_extent *ext = NULL;
        sio_code rc = sio_planread_next(r, &s, &ext);
        if (rc)
            fprintf(stderr, "planread: %s\n", sio_planread_errmsg(r));
        CHECK(rc == SIO_OK);
        if (rc || !s)
            break;
        yitem it;
        CHECK(planned_item(r, s, ext, &it) == 0);
        if (n < max)
            y[n] = it;
        n++;
        CHECK_EQ_U64(sio_planread_position(r), start + n);
    }
    sio_planread_close(r);
    return n;
}

static int same(const yitem *a, const yitem *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].shard != b[i].shard || a[i].group != b[i].group ||
            a[i].global != b[i].global || a[i].sum != b[i].sum ||
            a[i].source != b[i].source) {
            fprintf(stderr, "differs at %zu: %u/%llu/%llu vs %u/%llu/%llu\n",
                    i, a[i].shard, (unsigned long long)a[i].group,
                    (unsigned long long)a[i].global, b[i].shard,
                    (unsigned long long)b[i].group,
                    (unsigned long long)b[i].global);
            return 0;
        }
    return 1;
}

/* A shard of large samples (their fields past the plan reader's in-memory
 * size, so read as extents), mixed with small ones, in the given tar
 * format: 1-3 fields of up to ~90 KiB, a bad sample, a directory, GNU or
 * pax long names. */
static void make_large_shard(const char *path, int ngroups,
                             const char *format)
{
    static unsigned char payload[100000];
    static char names[200][300];
    tar_member m[200];
    size_t n = 0;
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (unsigned char)(i * 131 + (i >> 9));
    for (int g = 0; g < ngroups && n + 5 < 200; g++) {
        int nf = 1 + (int)(rnd() % 3);
        int bad = rnd() % 13 == 0;
        int longname = rnd() % 5 == 0;
        if (rnd() % 9 == 0) {
            snprintf(names[n], 300, "d%d/", g);
            m[n].name = names[n];
            m[n].data = NULL;
            m[n++].len = 0;
        }
        for (int f = 0; f < nf + bad; f++) {
            const char *ext = f == 0 ? "JPG" : f == 1 ? "json" : "npy";
            if (f == nf)
                ext = "jpg";
            if (longname)
                snprintf(names[n], 300, "%0130d/s%05d.%s", g, g, ext);
            else
                snprintf(names[n], 300, "s%05d.%s", g, ext);
            m[n].name = names[n];
            m[n].data = (const char *)payload + rnd() % 1000;
            m[n++].len = rnd() % 4 == 0 ? (size_t)(rnd() % 600)
                                        : 20000 + (size_t)(rnd() % 70000);
        }
    }
    if (write_tar(path, m, n, "none", format) != 0)
        fprintf(stderr, "cannot write %s\n", path);
}

/* Read the whole epoch once so that every shard is indexed. */
static size_t stream_epoch(sio_io *io, const sio_shardlist *l,
                           const sio_epoch_config *c, yitem *y, size_t max)
{
    sio_epoch *ep = NULL;
    size_t n = 0;
    CHECK(sio_epoch_open(io, l, c, &ep, NULL) == SIO_OK);
    for (;;) {
        const sio_sample *s = NULL;
        CHECK(sio_epoch_next(ep, &s) == SIO_OK);
        if (!s)
            break;
        if (n < max)
            y[n] = item_of(s);
        n++;
        sio_sample_unref(s);
    }
    sio_epoch_close(ep);
    return n;
}

static void one_dataset(int round)
{
    char dir[] = "/tmp/shardcast-plan-XXXXXX";
    char cmd[700];
    sio_io *io = NULL;
    sio_shardlist *l = NULL;
    sio_index *ix = NULL;
    sio_index_config icfg = {0};
    const size_t MAX = 5000;
    yitem *y = malloc(MAX * sizeof *y), *z = malloc(MAX * sizeof *z);
    CHECK(mkdtemp(dir) != NULL);
    int nshards = 1 + (int)(rnd() % 6);
    int gz = round % 4 == 3; /* one dataset in four has a compressed shard */
    for (int s = 0; s < nshards; s++) {
        char p[600];
        int z1 = gz && s == 0;
        snprintf(p, sizeof p, "%s/shard-%02d.tar%s", dir, s, z1 ? ".gz" : "");
        if (round % 4 == 1 || (round % 4 == 2 && s % 2))
            make_large_shard(p, (int)(rnd() % 30),
                             s % 3 == 0 ? "gnu" : s % 3 == 1 ? "pax"
                                                             : "ustar");
        else
            make_random_shard(p, (int)(rnd() % 70), z1, rnd);
    }
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_shardlist_resolve(io, dir, &l, NULL) == SIO_OK);
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);

    sio_epoch_config c = {0};
    c.seed = rnd();
    c.epoch = rnd() % 5;
    c.interleave = 1 + (uint32_t)(rnd() % 4);
    c.buffer_samples = 1 + (uint32_t)(rnd() % 50);
    c.buffer_bytes = rnd() % 2 ? 0 : 3000 + rnd() % 30000;
    c.index = ix;
    sio_plan *plan = NULL;
    sio_error e;
    /* Nothing indexed yet: not now. */
    CHECK(sio_plan_build(io, l, &c, 0, &plan, &e) == SIO_ERR_AGAIN);
    CHECK(plan == NULL);
    size_t n = stream_epoch(io, l, &c, y, MAX);
    sio_code rc = sio_plan_build(io, l, &c, 0, &plan, &e);
    if (gz) {
        /* A compressed shard has no byte ranges: the epoch streams. */
        CHECK(rc == SIO_ERR_UNSUPPORTED);
        goto out;
    }
    if (rc)
        fprintf(stderr, "plan: %s\n", e.msg);
    CHECK(rc == SIO_OK);
    if (rc)
        goto out;
    CHECK_EQ_U64(sio_plan_count(plan), n);
    CHECK(sio_plan_memory(plan) >= n * sizeof(sio_plan_item));
    if (n > 1) { /* above the caller's bound: not planned */
        sio_plan *big = NULL;
        CHECK(sio_plan_build(io, l, &c, n - 1, &big, &e) == SIO_ERR_LIMIT);
        CHECK(big == NULL);
    }
    for (size_t i = 0; i < n && i < MAX; i++) {
        const sio_plan_item *it = sio_plan_item_at(plan, i);
        CHECK(it->shard == y[i].shard && it->group == y[i].group);
    }
    CHECK(sio_plan_item_at(plan, n) == NULL);

    /* Every share, every policy, random resumes: the same samples with
     * the same bytes as the streamed epoch deals. */
    for (int t = 0; t < 6; t++) {
        uint32_t world = 1 + (uint32_t)(rnd() % 5);
        sio_partition pol = (sio_partition)(rnd() % 3);
        uint64_t gs = rnd() % 3 == 0 && n ? rnd() % (n + 2) : 0;
        for (uint32_t rank = 0; rank < world; rank++) {
            uint64_t start = rnd() % 2 ? rnd() % (n / world + 2) : 0;
            size_t a = share_streamed(io, l, &c, rank, world, pol, gs, start,
                                      y, MAX);
            size_t b = share_planned(io, l, plan, rank, world, pol, gs,
                                     start, z, MAX);
            CHECK_EQ_U64(a, b);
            if (!same(y, z, a < MAX ? a : MAX))
                fprintf(stderr, "round %d world %u rank %u policy %d gs "
                        "%llu start %llu\n", round, world, rank, (int)pol,
                        (unsigned long long)gs, (unsigned long long)start);
        }
    }
    /* Out of file descriptors: SIO_ERR_BUSY (the plan is still good), and
     * the same reader goes on from the same position once there are. (A
     * plan of its own: the plan above keeps the descriptors its readers
     * opened, shared, and would need no new one.) */
    if (n > 0) {
        struct rlimit old, low;
        sio_planread *r = NULL;
        const sio_sample *s = NULL;
        const sio_extent *ext = NULL;
        sio_planread_config pc = {.rank = 0, .world = 1};
        sio_plan *fresh = NULL;
        CHECK(sio_plan_build(io, l, &c, 0, &fresh, &e) == SIO_OK);
        sio_plan_unref(plan);
        plan = fresh;
        CHECK(sio_planread_open(io, l, plan, &pc, &r, &e) == SIO_OK);
        CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
        int probe = dup(0); /* the lowest free descriptor: all below it */
        CHECK(probe >= 0);
        close(probe);
        low = old;
        low.rlim_cur = (rlim_t)probe;
        CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
        CHECK(sio_planread_next(r, &s, &ext) == SIO_ERR_BUSY);
        CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
        CHECK_EQ_U64(sio_planread_position(r), 0);
        CHECK(sio_planread_next(r, &s, &ext) == SIO_OK && s != NULL);
        yitem got;
        if (s) {
            const sio_plan_item *it0 = sio_plan_item_at(plan, 0);
            CHECK(planned_item(r, s, ext, &got) == 0);
            CHECK(got.global == 0 && got.shard == it0->shard &&
                  got.group == it0->group);
        }
        sio_planread_close(r);
    }
    /* A share the feed refuses is refused. */
    {
        sio_planread *r = NULL;
        sio_planread_config pc = {.rank = 3, .world = 3};
        CHECK(sio_planread_open(io, l, plan, &pc, &r, &e) ==
              SIO_ERR_INVALID);
        CHECK(r == NULL);
    }
    sio_plan_unref(plan);
    plan = NULL;

    /* With a journal decision (shard 0 ends early) and with a scale-out
     * replica, the plan is still the streamed Y. */
    {
        char jpath[700];
        sio_journal *j = NULL;
        snprintf(jpath, sizeof jpath, "%s/journal", dir);
        CHECK(sio_journal_open(jpath, 0, &j, NULL) == SIO_OK);
        sio_journal_record(j, 0, rnd() % 8, SIO_ERR_NOTFOUND, "gone");
        sio_epoch_config cj = c;
        cj.journal = j;
        size_t nj = stream_epoch(io, l, &cj, y, MAX);
        CHECK(sio_plan_build(io, l, &cj, 0, &plan, &e) == SIO_OK);
        CHECK_EQ_U64(sio_plan_count(plan), nj);
        size_t b = share_planned(io, l, plan, 0, 1, SIO_PARTITION_NONE, 0, 0,
                                 z, MAX);
        CHECK_EQ_U64(b, nj);
        CHECK(same(y, z, nj < MAX ? nj : MAX));
        sio_plan_unref(plan);
        plan = NULL;
        sio_journal_close(j);

        sio_epoch_config cr = c;
        cr.replica = 1;
        cr.replicas = 2;
        size_t nr = stream_epoch(io, l, &cr, y, MAX);
        CHECK(sio_plan_build(io, l, &cr, 0, &plan, &e) == SIO_OK);
        b = share_planned(io, l, plan, 0, 1, SIO_PARTITION_NONE, 0, 0, z,
                          MAX);
        CHECK_EQ_U64(b, nr);
        CHECK(same(y, z, nr < MAX ? nr : MAX));
        sio_plan_unref(plan);
        plan = NULL;
    }
    /* A mixed epoch (two sources, one drawn with replacement) is planned
     * from the indexes: the plan is the streamed Y, source by source. */
    if (nshards >= 2) {
        sio_mix_source ms[2] = {{0, (uint32_t)(nshards / 2), 10, 0},
                                {(uint32_t)(nshards / 2),
                                 (uint32_t)(nshards - nshards / 2), 7, 1}};
        sio_epoch_config cm = c;
        cm.mix = ms;
        cm.nmix = 2;
        size_t nm = stream_epoch(io, l, &cm, y, MAX);
        CHECK(sio_plan_build(io, l, &cm, 0, &plan, &e) == SIO_OK);
        CHECK_EQ_U64(sio_plan_count(plan), nm);
        size_t b = share_planned(io, l, plan, 0, 1, SIO_PARTITION_NONE, 0, 0,
                                 z, MAX);
        CHECK_EQ_U64(b, nm);
        CHECK(same(y, z, nm < MAX ? nm : MAX));
        sio_plan_unref(plan);
        plan = NULL;
    }

    /* Shards that change under a plan: truncated, rewritten in place
     * (same size), replaced by another file. Every sample returned is the
     * streamed one; the change is SIO_ERR_CHANGED. */
    if (n > 0) {
        stream_epoch(io, l, &c, y, MAX);
        for (int mode = 0; mode < 3; mode++) {
            /* A plan of the files as they are now. */
            CHECK(sio_plan_build(io, l, &c, 0, &plan, &e) == SIO_OK);
            sio_planread *r = NULL;
            sio_planread_config pc = {.rank = 0, .world = 1};
            CHECK(sio_planread_open(io, l, plan, &pc, &r, &e) == SIO_OK);
            const sio_sample *s = NULL;
            const sio_extent *ext = NULL;
            yitem got;
            /* opens Y[0]'s shard */
            CHECK(sio_planread_next(r, &s, &ext) == SIO_OK);
            CHECK(s != NULL);
            if (s) {
                CHECK(planned_item(r, s, ext, &got) == 0);
                CHECK(same(y, &got, 1));
            }
            const char *url = sio_shardlist_url(l, y[0].shard);
            struct stat st;
            CHECK(stat(url, &st) == 0);
            char *orig = malloc((size_t)st.st_size + 1);
            int fd = open(url, O_RDONLY);
            CHECK(fd >= 0 && read(fd, orig, (size_t)st.st_size) == st.st_size);
            close(fd);
            if (mode == 0) {
                CHECK(truncate(url, st.st_size / 2) == 0);
            } else if (mode == 1) {
                char *flip = malloc((size_t)st.st_size);
                for (off_t i = 0; i < st.st_size; i++)
                    flip[i] = (char)(orig[i] ^ 0x20);
                fd = open(url, O_WRONLY);
                CHECK(fd >= 0 && write(fd, flip, (size_t)st.st_size) ==
                                     st.st_size);
                close(fd);
                free(flip);
            } else {
                char tmp[700];
                snprintf(tmp, sizeof tmp, "%s.new", url);
                fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                CHECK(fd >= 0 && write(fd, orig, (size_t)st.st_size) ==
                                     st.st_size);
                close(fd);
                CHECK(rename(tmp, url) == 0);
            }
            /* Read on: samples of other shards are exact; the changed
             * shard's next sample is SIO_ERR_CHANGED (a replaced file with
             * the same bytes keeps being read from the old descriptor). */
            size_t k = 1;
            int changed = 0;
            for (; k < n && k < MAX; k++) {
                rc = sio_planread_next(r, &s, &ext);
                if (rc == SIO_OK && s &&
                    planned_item(r, s, ext, &got) != 0)
                    rc = SIO_ERR_CHANGED; /* caught by the caller's check */
                if (rc == SIO_ERR_CHANGED) {
                    changed = 1;
                    CHECK(y[k].shard == y[0].shard);
                    CHECK(sio_planread_position(r) <= k + 1);
                    break;
                }
                CHECK(rc == SIO_OK && s);
                if (rc || !s)
                    break;
                CHECK(same(&y[k], &got, 1));
            }
            int more_of_it = 0;
            for (size_t q = 1; q < n && q < MAX; q++)
                more_of_it |= y[q].shard == y[0].shard;
            if (mode < 2)
                CHECK(changed == more_of_it);
            else
                CHECK(!changed);
            sio_planread_close(r);
            /* A reader that opens the shard now finds another file than
             * the plan's: refused before any sample of it. */
            if (mode < 2 && changed) {
                CHECK(sio_planread_open(io, l, plan, &pc, &r, &e) == SIO_OK);
                CHECK(sio_planread_next(r, &s, &ext) == SIO_ERR_CHANGED);
                sio_planread_close(r);
            }
            sio_plan_unref(plan);
            plan = NULL;
            /* Put the shard back for the next mode, with its mtime (the
             * index's record of the file). */
            fd = open(url, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            CHECK(fd >= 0 && write(fd, orig, (size_t)st.st_size) ==
                                 st.st_size);
            struct timespec tv[2] = {st.st_atim, st.st_mtim};
            CHECK(futimens(fd, tv) == 0);
            close(fd);
            free(orig);
        }
    }
out:
    sio_plan_unref(plan);
    sio_index_close(ix);
    sio_shardlist_free(l);
    sio_io_destroy(io);
    free(y);
    free(z);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* A plan that grows: every share of a fresh dataset's epoch, its shards
 * indexed only by the plan's own steps, read while the plan grows (each
 * reader reads until it must wait, then the plan takes a step), equals
 * the share a streamed epoch deals (by then indexed), sample for sample
 * and byte for byte; a reader woken by its notify after each step; a
 * plan abandoned midway fails its readers at its end with CHANGED. */
static int woken, kicked;
static void note_wake(void *ud)
{
    (void)ud;
    woken++;
}
static void note_kick(void *ud)
{
    (void)ud;
    kicked++;
}

static void growing_dataset(int round)
{
    char dir[] = "/tmp/shardcast-grow-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int nshards = 1 + (int)(rnd() % 7);
    for (int s = 0; s < nshards; s++) {
        char p[600];
        snprintf(p, sizeof p, "%s/shard-%02d.tar", dir, s);
        if (round % 2)
            make_large_shard(p, (int)(rnd() % 25),
                             s % 2 ? "gnu" : "pax");
        else
            make_random_shard(p, (int)(rnd() % 60), 0, rnd);
    }
    /* A shard cut short inside its data: its end goes to the journal. */
    if (round % 3 == 2) {
        char p[600];
        struct stat st;
        snprintf(p, sizeof p, "%s/shard-%02d.tar", dir, 0);
        CHECK(stat(p, &st) == 0);
        if (st.st_size > 2000)
            CHECK(truncate(p, st.st_size / 2 + 77) == 0);
    }
    sio_io *io = NULL;
    sio_shardlist *l = NULL;
    sio_index *ix = NULL;
    sio_journal *jr = NULL;
    sio_index_config icfg = {0};
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_shardlist_resolve(io, dir, &l, NULL) == SIO_OK);
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);
    CHECK(sio_journal_open(NULL, (size_t)nshards, &jr, NULL) == SIO_OK);
    sio_epoch_config c = {0};
    c.seed = rnd();
    c.epoch = rnd() % 5;
    c.interleave = 1 + (uint32_t)(rnd() % 4);
    c.buffer_samples = 1 + (uint32_t)(rnd() % 50);
    c.index = ix;
    c.journal = jr;
    sio_plan *plan = NULL;
    sio_error e;
    /* One round in three, another reader (an epoch streamed with another
     * seed) has indexed the start of some shards already: the plan's
     * order must not take those groups before its own step made the
     * shard ready (its journal decides where a failed shard ends). */
    if (round % 3 == 1) {
        sio_epoch_config o = c;
        sio_epoch *ep = NULL;
        o.seed = c.seed + 1;
        o.journal = NULL;
        o.read_threads = 0;
        CHECK(sio_epoch_open(io, l, &o, &ep, NULL) == SIO_OK);
        for (int k = 0; ep && k < 7; k++) {
            const sio_sample *x = NULL;
            if (sio_epoch_next(ep, &x) != SIO_OK || !x)
                break;
            sio_sample_unref(x);
        }
        sio_epoch_close(ep);
    }
    CHECK(sio_plan_build(io, l, &c, 0, &plan, &e) == SIO_ERR_AGAIN ||
          round % 3 == 1);
    sio_plan_unref(plan);
    plan = NULL;
    CHECK(sio_plan_start(io, l, &c, 0, &plan, &e) == SIO_OK);
    CHECK(!sio_plan_complete(plan));
    /* Half the rounds with a small bound ahead of the readers: the steps
     * park, and a reader that comes near kicks. */
    int parking = round % 2 == 0;
    if (parking) {
        sio_plan_set_ahead(plan, 1 + rnd() % 8);
        sio_plan_set_kick(plan, note_kick, NULL);
    }
    kicked = 0;
    int parked = 0, parks = 0;
    enum { W = 3, MAXY = 4096 };
    uint32_t world = 1 + (uint32_t)(rnd() % W);
    sio_partition pol = (sio_partition)(rnd() % 3);
    sio_planread *r[W] = {0};
    yitem *got[W];
    size_t ng[W] = {0};
    int done[W] = {0};
    for (uint32_t k = 0; k < world; k++) {
        sio_planread_config pc = {.rank = k, .world = world, .policy = pol};
        got[k] = calloc(MAXY, sizeof *got[k]);
        CHECK(sio_planread_open(io, l, plan, &pc, &r[k], &e) == SIO_OK);
        sio_planread_set_notify(r[k], note_wake, NULL);
    }
    int steps = 0, left = (int)world;
    while (left > 0 && steps < 100000) {
        int waiting = 0;
        for (uint32_t k = 0; k < world; k++) {
            while (!done[k]) {
                const sio_sample *s = NULL;
                const sio_extent *ext = NULL;
                sio_code rc = sio_planread_next(r[k], &s, &ext);
                if (rc == SIO_ERR_AGAIN) {
                    waiting++;
                    break;
                }
                if (rc)
                    fprintf(stderr, "grow: %s\n", sio_planread_errmsg(r[k]));
                CHECK(rc == SIO_OK);
                if (rc || !s) {
                    done[k] = 1;
                    left--;
                    break;
                }
                yitem it;
                CHECK(planned_item(r[k], s, ext, &it) == 0);
                if (ng[k] < MAXY)
                    got[k][ng[k]] = it;
                ng[k]++;
            }
        }
        if (left == 0)
            break;
        if (parked) {
            /* The readers came to its end: they asked for a step. */
            CHECK(kicked > 0);
            kicked = 0;
            parked = 0;
        }
        int before = woken;
        sio_code rc = sio_plan_grow(plan, &e);
        CHECK(rc == SIO_OK || rc == SIO_ERR_AGAIN ||
              (parking && rc == SIO_ERR_BUSY));
        if (rc == SIO_ERR_BUSY) {
            parked = 1;
            parks++;
        }
        steps++;
        /* Every reader that waited is woken by the step. */
        CHECK(woken - before == waiting);
    }
    CHECK(left == 0);
    CHECK(sio_plan_complete(plan));
    (void)parks;
    CHECK(!sio_plan_failed(plan, NULL, 0));
    /* The same shares as the streamed epoch, which follows the journal the
     * plan's steps wrote. */
    yitem *y = calloc(MAXY, sizeof *y);
    for (uint32_t k = 0; k < world; k++) {
        size_t a = share_streamed(io, l, &c, k, world, pol, 0, 0, y, MAXY);
        CHECK_EQ_U64(a, ng[k]);
        if (!same(y, got[k], a < MAXY ? a : MAXY))
            fprintf(stderr, "growing round %d world %u rank %u policy %d\n",
                    round, world, k, (int)pol);
        sio_planread_close(r[k]);
        free(got[k]);
    }
    /* What a build gives now that every shard is indexed: the same Y. */
    sio_plan *whole = NULL;
    sio_code brc = sio_plan_build(io, l, &c, 0, &whole, &e);
    /* (a shard cut short keeps an index without its end: built plans
     * want complete ones) */
    CHECK(brc == SIO_OK || (brc == SIO_ERR_AGAIN && sio_journal_count(jr)));
    if (whole) {
        CHECK_EQ_U64(sio_plan_count(whole), sio_plan_count(plan));
        for (uint64_t i = 0; i < sio_plan_count(whole); i++)
            CHECK(memcmp(sio_plan_item_at(whole, i), sio_plan_item_at(plan, i),
                         sizeof(sio_plan_item)) == 0);
        CHECK_EQ_U64(sio_plan_skipped(whole), sio_plan_skipped(plan));
    }
    sio_plan_unref(whole);
    sio_plan_unref(plan);
    plan = NULL;

    /* Abandoned before its first step: a reader fails, not waits. */
    sio_index_close(ix);
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);
    c.index = ix;
    CHECK(sio_plan_start(io, l, &c, 0, &plan, &e) == SIO_OK);
    sio_planread_config pc0 = {.rank = 0, .world = 1};
    sio_planread *r0 = NULL;
    CHECK(sio_planread_open(io, l, plan, &pc0, &r0, &e) == SIO_OK);
    sio_planread_set_notify(r0, note_wake, NULL);
    const sio_sample *s0 = NULL;
    const sio_extent *x0 = NULL;
    CHECK(sio_planread_next(r0, &s0, &x0) == SIO_ERR_AGAIN);
    int before = woken;
    sio_plan_abandon(plan, "test");
    CHECK(woken == before + 1);
    CHECK(sio_planread_next(r0, &s0, &x0) == SIO_ERR_CHANGED);
    CHECK(strstr(sio_planread_errmsg(r0), "test") != NULL);
    CHECK(sio_plan_grow(plan, &e) == SIO_OK); /* nothing more to do */
    sio_planread_close(r0);
    sio_plan_unref(plan);

    /* A windowed plan (keep 3: its least window): its reader copies every
     * item and reads the whole share, the streamed epoch's (the window's
     * own letting go and making again: test_plan_window). */
    sio_index_close(ix);
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);
    c.index = ix;
    CHECK(sio_plan_start(io, l, &c, 3, &plan, &e) == SIO_OK);
    CHECK(sio_planread_open(io, l, plan, &pc0, &r0, &e) == SIO_OK);
    for (int k = 0; k < 1000 && sio_plan_grow(plan, &e) == SIO_ERR_AGAIN; k++)
        ;
    CHECK(sio_plan_complete(plan));
    size_t got3 = 0;
    sio_code rc3;
    yitem *w3 = calloc(MAXY, sizeof *w3);
    while ((rc3 = sio_planread_next(r0, &s0, &x0)) == SIO_OK && s0) {
        yitem it;
        CHECK(planned_item(r0, s0, x0, &it) == 0);
        if (got3 < MAXY)
            w3[got3] = it;
        got3++;
    }
    CHECK(rc3 == SIO_OK);
    size_t a3 = share_streamed(io, l, &c, 0, 1, SIO_PARTITION_NONE, 0, 0, y,
                               MAXY);
    CHECK_EQ_U64(a3, got3);
    CHECK(same(y, w3, a3 < MAXY ? a3 : MAXY));
    free(w3);
    sio_planread_close(r0);
    sio_plan_unref(plan);

    /* A compressed shard: no growing plan (the epoch streams). */
    {
        char p[600];
        snprintf(p, sizeof p, "%s/shard-99.tar.gz", dir);
        make_random_shard(p, 5, 1, rnd);
        sio_shardlist *l2 = NULL;
        CHECK(sio_shardlist_resolve(io, dir, &l2, NULL) == SIO_OK);
        sio_plan *p2 = NULL;
        CHECK(sio_plan_start(io, l2, &c, 0, &p2, &e) == SIO_ERR_UNSUPPORTED);
        CHECK(p2 == NULL);
        sio_shardlist_free(l2);
    }
    free(y);
    sio_journal_close(jr);
    sio_index_close(ix);
    sio_shardlist_free(l);
    sio_io_destroy(io);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    for (int round = 0; round < 16; round++)
        one_dataset(round);
    for (int round = 0; round < 24; round++)
        growing_dataset(round);
    CHECK_MAIN_END();
}
