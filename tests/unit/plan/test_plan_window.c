/*
 * test_plan_window.c — a windowed plan (sio_plan_start with keep): over
 * synthetic indexes (metadata only: empty shard files whose groups are
 * offered to the index, some bad, some shards cut by the journal), the
 * items every reader copies are Y as a whole plan has it, while readers
 * move at different speeds, come back to the start and jump; chunks
 * behind the readers are let go once more than keep items are held, and
 * made again from the order's checkpoints when a reader comes back; the
 * items held stay within the bound; the skipped count is the whole
 * plan's.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "plan/plan_int.h"
#include "samplesum.h"
#include "shardio.h"
#include "shardio_index.h"
#include "shardio_plan.h"

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    return xorshift_next(&rnd_state);
}

static int kicks;
static void note_kick(void *ud)
{
    (void)ud;
    kicks++;
}
static int woken;
static void note_wake(void *ud)
{
    (void)ud;
    woken++;
}

/* A reader of the test: its place in Y and its mark. */
typedef struct treader {
    uint64_t t;
    plan_mark mark;
    plan_waiter w;
} treader;

/* Y[t] as a reader gets it: copied, or its chunk made again first (the
 * reader waits; the restage a planner thread would run is run here). 1
 * when it was made again. */
static int copy_item(sio_plan *p, plan_waiter *w, uint64_t t, sio_io *io,
                     const sio_shardlist *l, sio_plan_item *it)
{
    if (plan_item_copy(p, t, it))
        return 0;
    char why[200];
    int before = woken;
    CHECK(plan_refill_wait(p, w, t, why, sizeof why) == 1);
    sio_plan_restage(p);
    CHECK(woken > before);
    CHECK(plan_item_copy(p, t, it));
    return 1;
}

static void one_round(int round)
{
    char dir[] = "/tmp/shardcast-window-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    size_t nsh = 40 + (size_t)(rnd() % 40);
    char **urls = calloc(nsh, sizeof *urls);
    for (size_t i = 0; i < nsh; i++) {
        urls[i] = malloc(600);
        snprintf(urls[i], 600, "%s/shard-%03zu.tar", dir, i);
        int fd = open(urls[i], O_CREAT | O_WRONLY | O_TRUNC, 0644);
        CHECK(fd >= 0);
        close(fd);
    }
    sio_io *io = NULL;
    sio_shardlist *l = NULL;
    sio_index *ix = NULL;
    sio_journal *jr = NULL;
    sio_index_config icfg = {0};
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_shardlist_from_urls((const char *const *)urls, nsh, &l,
                                  NULL) == SIO_OK);
    CHECK(sio_index_open(&icfg, &ix, NULL) == SIO_OK);
    CHECK(sio_journal_open(NULL, nsh, &jr, NULL) == SIO_OK);
    for (size_t i = 0; i < nsh; i++) {
        sio_index_entry *e = sio_index_get(ix, io, urls[i], UINT64_MAX);
        CHECK(e != NULL);
        uint64_t n = 50 + rnd() % 1500;
        for (uint64_t g = 0; e && g < n; g++) {
            int bad = rnd() % 37 == 0;
            sio_index_group grp = {g * 2048, (g + 1) * 2048,
                                   bad ? 0 : 100 + rnd() % 1000,
                                   bad ? SIO_INDEX_GROUP_BAD : 0,
                                   (uint32_t)rnd()};
            char key[32];
            int kl = snprintf(key, sizeof key, "s%03zu-%06" PRIu64, i, g);
            sio_index_field f = {"bin", grp.bytes};
            sio_index_offer(e, g, &grp, key, (size_t)kl, &f, 1, 0);
        }
        if (e)
            sio_index_finish(e, n);
        if (rnd() % 9 == 0) /* a shard whose read ended early */
            sio_journal_record(jr, (uint32_t)i, rnd() % n, SIO_ERR_IO,
                               "cut");
    }
    sio_epoch_config c = {0};
    c.seed = rnd();
    c.epoch = rnd() % 5;
    c.interleave = 1 + (uint32_t)(rnd() % 6);
    c.buffer_samples = 1 + (uint32_t)(rnd() % 3000);
    if (round % 3 == 1)
        c.buffer_bytes = 1 + rnd() % 200000;
    c.index = ix;
    c.journal = jr;
    sio_error e;

    /* Y as a whole plan has it. */
    sio_plan *whole = NULL;
    CHECK(sio_plan_build(io, l, &c, 0, &whole, &e) == SIO_OK);
    if (!whole) {
        fprintf(stderr, "build: %s\n", e.msg);
        return;
    }
    uint64_t n = sio_plan_count(whole);
    sio_plan_item *y = malloc((n ? n : 1) * sizeof *y);
    for (uint64_t i = 0; i < n; i++)
        y[i] = *sio_plan_item_at(whole, i);
    /* Its limit: an epoch of more samples is SIO_ERR_LIMIT. */
    sio_plan *lim = NULL;
    if (n > 1)
        CHECK(sio_plan_build(io, l, &c, n - 1, &lim, &e) == SIO_ERR_LIMIT);
    sio_plan_unref(lim);

    /* The windowed plan: a small window, a small bound ahead. */
    sio_plan *p = NULL;
    CHECK(sio_plan_start(io, l, &c, 1, &p, &e) == SIO_OK);
    if (!p)
        return;
    uint64_t ahead = 100 + rnd() % 1000;
    sio_plan_set_ahead(p, ahead);
    sio_plan_set_kick(p, note_kick, NULL);
    sio_plan_set_restage(p, note_kick, NULL);
    enum { R = 4 };
    treader rd[R];
    memset(rd, 0, sizeof rd);
    for (int k = 0; k < R; k++) {
        rd[k].w.fn = note_wake;
        plan_mark_link(p, &rd[k].mark, 0);
    }
    /* Bound on what is held: the window (at least the ahead bound and two
     * chunks), a chunk per reader, the chunk being written, and what one
     * run between two checkpoints makes past the ahead bound. */
    uint64_t keep = 2 * PLAN_CHUNK;
    if (keep < ahead + 2 * PLAN_CHUNK)
        keep = ahead + 2 * PLAN_CHUNK;
    uint64_t bound_chunks = (keep + PLAN_CHUNK - 1) / PLAN_CHUNK + R + 1 +
                            (keep + PLAN_CHUNK - 1) / PLAN_CHUNK;
    uint64_t most = 0;
    int refills = 0, steps = 0, bad = 0;
    for (uint64_t iter = 0; iter < 40u * n + 100000; iter++) {
        int k = (int)(rnd() % R);
        /* reader 0 is fast, 3 slow; now and then one goes back */
        uint64_t stride = k == 0 ? 7 : k == 3 ? 1 : 3;
        if (rnd() % 5000 == 0)
            rd[k].t = rnd() % (rd[k].t + 1);
        if (rd[k].t >= n)
            rd[k].t = rnd() % 64 == 0 ? rnd() % (n ? n : 1) : n;
        if (rd[k].t >= n) {
            int all = 1;
            for (int q = 0; q < R; q++)
                all = all && rd[q].t >= n;
            if (all)
                break;
            continue;
        }
        uint64_t t = rd[k].t;
        plan_mark_move(&rd[k].mark, t);
        while (t >= sio_plan_count(p) && !sio_plan_complete(p)) {
            sio_code rc = plan_wait_for(p, &rd[k].w, t) ? SIO_ERR_AGAIN
                                                         : SIO_OK;
            (void)rc;
            rc = sio_plan_grow(p, &e);
            CHECK(rc == SIO_OK || rc == SIO_ERR_AGAIN || rc == SIO_ERR_BUSY);
            steps++;
            uint64_t h = atomic_load(&p->held);
            if (h > most)
                most = h;
        }
        plan_unwait(p, &rd[k].w);
        CHECK(t < sio_plan_count(p));
        sio_plan_item it;
        refills += copy_item(p, &rd[k].w, t, io, l, &it);
        if (memcmp(&it, &y[t], sizeof it) != 0 && bad++ < 5)
            fprintf(stderr, "round %d: Y[%" PRIu64 "] differs (shard %u/%u "
                    "group %u/%u)\n", round, t, it.shard, y[t].shard,
                    it.group, y[t].group);
        rd[k].t += stride;
        uint64_t h = atomic_load(&p->held);
        if (h > most)
            most = h;
    }
    CHECK(bad == 0);
    CHECK(sio_plan_complete(p));
    CHECK(!sio_plan_failed(p, NULL, 0));
    CHECK_EQ_U64(sio_plan_count(p), n);
    CHECK_EQ_U64(sio_plan_skipped(p), sio_plan_skipped(whole));
    if (most > bound_chunks)
        fprintf(stderr, "round %d: %" PRIu64 " chunks held, bound %" PRIu64
                "\n", round, most, bound_chunks);
    CHECK(most <= bound_chunks);
    sio_plan_window wst;
    sio_plan_window_stats(p, &wst);
    if (getenv("WINDOW_DEBUG"))
        fprintf(stderr, "round %d: n %" PRIu64 " keep %" PRIu64 " most %" PRIu64 " released %" PRIu64 " refilled %" PRIu64 " ckpts %" PRIu64 " refills %d\n", round, n, keep, most, wst.released_chunks, wst.refilled_chunks, wst.checkpoints, refills);
    CHECK(wst.windowed);
    CHECK(wst.checkpoints >= 1);
    if (n > 4 * keep) {
        CHECK(wst.released_chunks > 0);
        CHECK(refills > 0 || wst.refilled_chunks == 0);
    }
    for (int k = 1; k < R; k++)
        plan_mark_unlink(p, &rd[k].mark);
    /* A reader anywhere after it completed (marked where it reads, as
     * sio_planread marks itself): every item copies, made again where let
     * go. */
    for (int q = 0; q < 200 && n; q++) {
        uint64_t t = rnd() % n;
        sio_plan_item it;
        plan_waiter w = {.fn = note_wake};
        plan_mark_move(&rd[0].mark, t);
        copy_item(p, &w, t, io, l, &it);
        CHECK(memcmp(&it, &y[t], sizeof it) == 0);
    }
    plan_mark_unlink(p, &rd[0].mark);
    /* Without a restage function a chunk let go is an error, not a wait. */
    sio_plan_set_restage(p, NULL, NULL);
    for (uint64_t t = 0; t < n; t += PLAN_CHUNK) {
        sio_plan_item it;
        if (plan_item_copy(p, t, &it))
            continue;
        char why[200];
        plan_waiter w = {.fn = note_wake};
        CHECK(plan_refill_wait(p, &w, t, why, sizeof why) == -1);
        CHECK(strstr(why, "let go") != NULL);
        break;
    }
    (void)steps;
    sio_plan_unref(p);

    /* A fresh plan whose only reader starts at 90%: the order passes over
     * the items before it without writing them, then reads on; the items
     * passed over are made again when the reader goes back. */
    if (n > 8 * PLAN_CHUNK) {
        CHECK(sio_plan_start(io, l, &c, 1, &p, &e) == SIO_OK);
        sio_plan_set_ahead(p, ahead);
        sio_plan_set_kick(p, note_kick, NULL);
        sio_plan_set_restage(p, note_kick, NULL);
        treader one;
        memset(&one, 0, sizeof one);
        one.w.fn = note_wake;
        uint64_t at = n / 10 * 9;
        plan_mark_link(p, &one.mark, at);
        uint64_t most1 = 0;
        for (uint64_t t = at; t < n; t++) {
            plan_mark_move(&one.mark, t);
            while (t >= sio_plan_count(p) && !sio_plan_complete(p)) {
                plan_wait_for(p, &one.w, t);
                sio_code rc = sio_plan_grow(p, &e);
                CHECK(rc == SIO_OK || rc == SIO_ERR_AGAIN ||
                      rc == SIO_ERR_BUSY);
                if (atomic_load(&p->held) > most1)
                    most1 = atomic_load(&p->held);
            }
            plan_unwait(p, &one.w);
            sio_plan_item it;
            copy_item(p, &one.w, t, io, l, &it);
            CHECK(memcmp(&it, &y[t], sizeof it) == 0);
        }
        CHECK(sio_plan_complete(p));
        CHECK_EQ_U64(sio_plan_skipped(p), sio_plan_skipped(whole));
        /* nothing before the reader's chunk was written */
        CHECK(most1 <= bound_chunks);
        sio_plan_window ws;
        sio_plan_window_stats(p, &ws);
        CHECK(ws.released_chunks <= 1); /* nothing was written to let go */
        for (uint64_t t = n / 10; t < n / 10 + 3 * PLAN_CHUNK; t += 97) {
            sio_plan_item it;
            plan_mark_move(&one.mark, t);
            copy_item(p, &one.w, t, io, l, &it);
            CHECK(memcmp(&it, &y[t], sizeof it) == 0);
        }
        plan_mark_unlink(p, &one.mark);
        sio_plan_unref(p);
    }
    sio_plan_unref(whole);
    free(y);
    sio_journal_close(jr);
    sio_index_close(ix);
    sio_shardlist_free(l);
    sio_io_destroy(io);
    for (size_t i = 0; i < nsh; i++) {
        unlink(urls[i]);
        free(urls[i]);
    }
    free(urls);
    rmdir(dir);
}

int main(void)
{
    for (int round = 0; round < 8; round++)
        one_round(round);
    CHECK_MAIN_END();
}
