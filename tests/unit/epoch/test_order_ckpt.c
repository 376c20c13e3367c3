/*
 * test_order_ckpt.c — checkpoints of a persistent order (sio_order_save,
 * sio_order_open_ckpt) over random datasets and configs (K, B, byte caps,
 * shard ranges, replicas, resampling, on_error=fail with bad samples,
 * mixed orders whose checkpoints hold each source's open pass):
 * an order opened from a checkpoint saved at position P yields exactly
 * what the saved order yielded from P on, and stops with SIO_ERR_AGAIN at
 * the same places (indexes built shard by shard as the order asks, with
 * and without a gate; shards cut short whose end the journal records only
 * when asked), ends or fails where it did; a checkpoint of such an order
 * is saved again and goes on the same; a checkpoint is refused for
 * another config; sio_order_pos is the position.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "shardio_index.h"
#include "samplesum.h"
#include "tarutil.h"

#define NSH_MAX 8
#define SAVES_MAX 16

static uint64_t rnd_state = 0x6a09e667f3bcc909ull;
static uint64_t rnd(void)
{
    return xorshift_next(&rnd_state);
}

/* The dataset: its list and what building each shard's index finds. */
static sio_io *io;
static sio_shardlist *list;
static size_t nsh;
static int broken[NSH_MAX];        /* the build fails: the shard is cut */
static uint64_t reached[NSH_MAX];  /* groups read before it failed */
static sio_shard_limits limits;

/* What the order has to go on: shards indexed so far, journal cuts. A
 * world is made again from its flags, so an order opened from a
 * checkpoint sees the world the saved one saw. */
typedef struct world {
    sio_index *ix;
    sio_journal *j;
    unsigned char built[NSH_MAX];
    unsigned char cut[NSH_MAX];
    int precut;                    /* a decision from the start ... */
    uint32_t precut_shard;         /* ... for this shard ... */
    uint64_t precut_group;         /* ... after this many groups */
    int gated;                     /* a gate lets built shards in */
} world;

static void build(world *w, uint32_t s)
{
    sio_index_entry *e = sio_index_get(w->ix, io, sio_shardlist_url(list, s),
                                       sio_shardlist_size(list, s));
    uint64_t got = 0;
    sio_error er;
    CHECK(e != NULL);
    sio_code rc = sio_index_build_to(io, sio_shardlist_url(list, s), s,
                                     &limits, e, NULL, NULL, &got, &er);
    broken[s] = rc != SIO_OK;
    reached[s] = got;
    w->built[s] = 1;
}

static void cut(world *w, uint32_t s)
{
    sio_journal_record(w->j, s, reached[s], SIO_ERR_FORMAT, "cut short");
    w->cut[s] = 1;
}

/* Make w's store and journal from its flags. */
static void world_open(world *w)
{
    sio_index_config mem = {0};
    CHECK(sio_index_open(&mem, &w->ix, NULL) == SIO_OK);
    CHECK(sio_journal_open(NULL, 0, &w->j, NULL) == SIO_OK);
    if (w->precut)
        sio_journal_record(w->j, w->precut_shard, w->precut_group,
                           SIO_ERR_NOTFOUND, "gone");
    for (uint32_t s = 0; s < nsh; s++)
        if (w->built[s])
            build(w, s);
    for (uint32_t s = 0; s < nsh; s++)
        if (w->cut[s])
            cut(w, s);
}

static void world_close(world *w)
{
    sio_journal_close(w->j);
    sio_index_close(w->ix);
    w->j = NULL;
    w->ix = NULL;
}

/* A copy of w's flags with a store and journal of its own. */
static void world_copy(world *dst, const world *src)
{
    *dst = *src;
    dst->ix = NULL;
    dst->j = NULL;
    world_open(dst);
}

static uint64_t gate(void *ud, uint32_t shard, uint64_t at)
{
    const world *w = ud;
    (void)at; /* (a shard is let in whole here) */
    return w->built[shard] ? UINT64_MAX : 0;
}

/* After SIO_ERR_AGAIN: one step of the world, decided by it and by the
 * shards the order needs next (an order in the same state takes the same
 * step). 0 when there is nothing left to do. */
static int world_step(world *w, const sio_order *o)
{
    uint32_t ahead[64];
    size_t n = sio_order_shards_ahead(o, ahead, 64);
    for (size_t i = 0; i < n; i++) {
        uint32_t s = ahead[i];
        if (s >= nsh)
            continue; /* a mixed order's slot not open yet */
        if (!w->built[s]) {
            build(w, s);
            return 1;
        }
        if (broken[s] && !w->cut[s] &&
            !(w->precut && w->precut_shard == s)) {
            cut(w, s);
            return 1;
        }
    }
    return 0;
}

static void world_use(world *w, sio_epoch_config *c, sio_order *o)
{
    c->index = w->ix;
    c->journal = w->j;
    if (o && w->gated)
        sio_order_set_gate(o, gate, w);
}

/* An order's run from 0: Y, where it said SIO_ERR_AGAIN, how it ended. */
typedef struct trace {
    sio_order_item *y;
    size_t n, cap;
    uint64_t again[4096];
    size_t nagain;
    sio_code end;                  /* SIO_OK: done; else how it failed */
} trace;

/* A checkpoint with the world it was saved in. */
typedef struct saved {
    sio_order_ckpt *ck;
    uint64_t pos;
    size_t nagain;                 /* AGAINs before it */
    world w;                       /* flags only */
} saved;

typedef struct take_ctx {
    trace *t;
    int record;
    uint64_t pos;                  /* Y's index of the call's item 0 */
    int bad;
} take_ctx;

static sio_code take(void *ud, uint64_t i, const sio_order_item *it)
{
    take_ctx *x = ud;
    trace *t = x->t;
    uint64_t y = x->pos + i;
    if (x->record) {
        CHECK_EQ_U64(y, t->n);
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 256;
            t->y = realloc(t->y, t->cap * sizeof *t->y);
            if (!t->y)
                abort();
        }
        t->y[t->n++] = *it;
    } else if (y >= t->n || t->y[y].shard != it->shard ||
               t->y[y].group != it->group || t->y[y].source != it->source) {
        if (!x->bad)
            fprintf(stderr, "Y[%llu] differs: %u/%llu\n",
                    (unsigned long long)y, it->shard,
                    (unsigned long long)it->group);
        x->bad = 1;
    }
    return SIO_OK;
}

static void save(const sio_order *o, const world *w, size_t nagain,
                 saved *sv, size_t *nsv)
{
    if (*nsv >= SAVES_MAX)
        return;
    sio_order_ckpt *ck = sio_order_save(o);
    CHECK(ck != NULL);
    if (!ck)
        return;
    CHECK_EQ_U64(sio_order_ckpt_pos(ck), sio_order_pos(o));
    CHECK(sio_order_ckpt_bytes(ck) > 0);
    sv[*nsv].ck = ck;
    sv[*nsv].pos = sio_order_pos(o);
    sv[*nsv].nagain = nagain;
    sv[*nsv].w = *w;
    sv[*nsv].w.ix = NULL;
    sv[*nsv].w.j = NULL;
    (*nsv)++;
}

/*
 * Drive o (at position pos, nagain AGAINs seen) to its end in world w,
 * in calls of random sizes, stepping the world at each SIO_ERR_AGAIN.
 * record: write the trace; else check against it. Saves checkpoints into
 * sv (when given) at random points, and at the end.
 */
static void drive(sio_order *o, world *w, trace *t, int record,
                  uint64_t pos, size_t nagain, saved *sv, size_t *nsv,
                  unsigned save_every)
{
    take_ctx x = {.t = t, .record = record};
    sio_code end = SIO_OK;
    int steps = 0;
    CHECK_EQ_U64(sio_order_pos(o), pos);
    for (;;) {
        if (sv && rnd() % save_every == 0)
            save(o, w, nagain, sv, nsv);
        size_t max = 1 + (size_t)(rnd() % 12), n = 0;
        sio_error e;
        x.pos = pos;
        sio_code rc = sio_order_next(o, max, take, &x, &n, &e);
        CHECK(n <= max);
        pos += n;
        CHECK_EQ_U64(sio_order_pos(o), pos);
        if (rc == SIO_ERR_AGAIN) {
            CHECK(n < max);
            if (record) {
                CHECK(t->nagain < sizeof t->again / sizeof t->again[0]);
                if (t->nagain < sizeof t->again / sizeof t->again[0])
                    t->again[t->nagain] = pos;
                t->nagain++;
            } else {
                CHECK(nagain < t->nagain && t->again[nagain] == pos);
            }
            nagain++;
            int stepped = world_step(w, o);
            CHECK(stepped);
            if (!stepped || ++steps > 1000)
                break;
            continue;
        }
        if (rc == SIO_OK) {
            if (n == max)
                continue;
            CHECK(sio_order_done(o));
            break;
        }
        /* Failed (a bad sample under on_error=fail): no checkpoint. */
        end = rc;
        CHECK(sio_order_save(o) == NULL);
        break;
    }
    if (sv && end == SIO_OK) {
        /* At the end, and once more: nothing more comes. */
        save(o, w, nagain, sv, nsv);
        size_t n = 1;
        x.pos = pos;
        CHECK(sio_order_next(o, 5, take, &x, &n, NULL) == SIO_OK && n == 0);
    }
    CHECK(!x.bad);
    if (record) {
        t->end = end;
    } else {
        CHECK_EQ_U64(pos, t->n);
        CHECK_EQ_U64(nagain, t->nagain);
        CHECK(end == t->end);
    }
}

/* An order from checkpoint sv goes on as the saved one did; half the
 * time it is saved again midway and that checkpoint checked too. */
static void replay(const sio_epoch_config *cfg, const saved *sv, trace *t,
                   int depth)
{
    world w;
    sio_epoch_config c = *cfg;
    sio_order *o = NULL;
    sio_error e;
    world_copy(&w, &sv->w);
    world_use(&w, &c, NULL);
    sio_code rc = sio_order_open_ckpt(io, list, &c, sv->ck, &o, &e);
    if (rc)
        fprintf(stderr, "open_ckpt: %s\n", e.msg);
    CHECK(rc == SIO_OK);
    if (o) {
        world_use(&w, &c, o);
        CHECK_EQ_U64(sio_order_pos(o), sv->pos);
        saved again[SAVES_MAX];
        size_t nagain = 0;
        int resave = depth == 0 && rnd() % 2;
        drive(o, &w, t, 0, sv->pos, sv->nagain, resave ? again : NULL,
              &nagain, 4);
        sio_order_close(o);
        for (size_t i = 0; i < nagain; i++) {
            replay(cfg, &again[i], t, depth + 1);
            sio_order_ckpt_free(again[i].ck);
        }
    }
    world_close(&w);
}

/* A checkpoint is refused for a config of another order. */
static void check_refused(const sio_epoch_config *cfg, const saved *sv)
{
    world w;
    sio_epoch_config c = *cfg;
    sio_order *o = (sio_order *)1;
    sio_error e;
    world_copy(&w, &sv->w);
    world_use(&w, &c, NULL);
    c.interleave = cfg->interleave % 4 + 1;
    CHECK(sio_order_open_ckpt(io, list, &c, sv->ck, &o, &e) ==
          SIO_ERR_INVALID);
    CHECK(o == NULL);
    CHECK(strstr(e.msg, "interleave") != NULL);
    c = *cfg;
    world_use(&w, &c, NULL);
    c.buffer_samples = cfg->buffer_samples + 1;
    CHECK(sio_order_open_ckpt(io, list, &c, sv->ck, &o, &e) ==
          SIO_ERR_INVALID);
    c = *cfg;
    world_use(&w, &c, NULL);
    c.seed = cfg->seed + 1;
    CHECK(sio_order_open_ckpt(io, list, &c, sv->ck, &o, &e) ==
          SIO_ERR_INVALID);
    c = *cfg;
    world_use(&w, &c, NULL);
    c.on_error = cfg->on_error == SIO_ON_ERROR_FAIL ? SIO_ON_ERROR_SKIP
                                                    : SIO_ON_ERROR_FAIL;
    CHECK(sio_order_open_ckpt(io, list, &c, sv->ck, &o, &e) ==
          SIO_ERR_INVALID);
    CHECK(o == NULL);
    world_close(&w);
}

/* sio_order_open(from = k) in the whole world: its position is k, its
 * checkpoint's too, and both go on with Y[k:]. */
static void check_from(const sio_epoch_config *cfg, world *whole,
                       trace *t)
{
    for (int i = 0; i < 3; i++) {
        uint64_t k = t->n ? rnd() % (t->n + 1) : 0;
        sio_epoch_config c = *cfg;
        sio_order *o = NULL;
        sio_error e;
        world_use(whole, &c, NULL);
        sio_code rc = sio_order_open(io, list, &c, k, &o, &e);
        if (rc && t->end != SIO_OK)
            continue; /* the failure comes before k */
        CHECK(rc == SIO_OK);
        if (rc)
            continue;
        CHECK_EQ_U64(sio_order_pos(o), k);
        saved sv[SAVES_MAX];
        size_t nsv = 0;
        save(o, whole, t->nagain, sv, &nsv);
        take_ctx x = {.t = t, .pos = k};
        size_t n = 0;
        rc = sio_order_next(o, SIZE_MAX, take, &x, &n, &e);
        CHECK(rc == t->end);
        CHECK(!x.bad);
        CHECK_EQ_U64(k + n, t->n);
        sio_order_close(o);
        if (nsv) {
            /* the world is whole: no AGAIN from here */
            sio_order *o2 = NULL;
            CHECK(sio_order_open_ckpt(io, list, &c, sv[0].ck, &o2, &e) ==
                  SIO_OK);
            if (o2) {
                CHECK_EQ_U64(sio_order_pos(o2), k);
                take_ctx x2 = {.t = t, .pos = k};
                rc = sio_order_next(o2, SIZE_MAX, take, &x2, &n, &e);
                CHECK(rc == t->end);
                CHECK(!x2.bad);
                CHECK_EQ_U64(k + n, t->n);
            }
            sio_order_close(o2);
            sio_order_ckpt_free(sv[0].ck);
        }
    }
}

static sio_epoch_config random_config(int trial)
{
    sio_epoch_config c = {0};
    c.seed = rnd();
    c.epoch = rnd() % 5;
    c.interleave = 1 + (uint32_t)(rnd() % 4);
    c.buffer_samples = 1 + (uint32_t)(rnd() % 50);
    c.buffer_bytes = rnd() % 3 ? 0 : 3000 + rnd() % 30000;
    if (trial % 5 == 4) {
        /* the first bad sample fails the order: a small buffer lets
         * items out before it */
        c.on_error = SIO_ON_ERROR_FAIL;
        c.buffer_samples = 1 + (uint32_t)(rnd() % 4);
    }
    if (rnd() % 4 == 0 && nsh > 1) {
        c.range_first = (uint32_t)(rnd() % nsh);
        c.range_count = 1 + (uint32_t)(rnd() % (nsh - c.range_first));
    }
    if (rnd() % 5 == 0) {
        c.replicas = 2 + (uint32_t)(rnd() % 2);
        c.replica = (uint32_t)(rnd() % c.replicas);
    }
    if (rnd() % 5 == 0)
        c.resample = 1;
    if (rnd() % 6 == 0)
        c.order_stream = 1000 + rnd() % 1000;
    if (trial % 5 == 3 && nsh > 1) {
        /* A mixed order: two or three sources over parts of the list
         * (they may overlap), quotas that wrap into further passes or
         * stop early, some drawn with replacement. */
        static sio_mix_source mix[3];
        uint32_t k = 2 + (uint32_t)(rnd() % 2);
        for (uint32_t i = 0; i < k; i++) {
            mix[i].first = (uint32_t)(rnd() % nsh);
            mix[i].count = 1 + (uint32_t)(rnd() % (nsh - mix[i].first));
            mix[i].quota = rnd() % 200;
            mix[i].resample = rnd() % 3 == 0;
        }
        c.mix = mix;
        c.nmix = k;
        c.range_first = c.range_count = 0;
        c.replica = c.replicas = 0;
        c.resample = 0;
        c.order_stream = 0;
    }
    return c;
}

static void one_trial(int trial, int grow)
{
    sio_epoch_config cfg = random_config(trial);
    world w = {0};
    trace t = {0};
    saved sv[SAVES_MAX];
    size_t nsv = 0;
    sio_order *o = NULL;
    sio_error e;

    /* A journal decision from the start for one good shard, some trials;
     * indexes built as the order asks (a gate in half of those), or all
     * from the start. */
    if (rnd() % 3 == 0) {
        uint32_t s = (uint32_t)(rnd() % nsh);
        if (!broken[s]) {
            w.precut = 1;
            w.precut_shard = s;
            w.precut_group = rnd() % 12;
        }
    }
    w.gated = grow && rnd() % 2;
    if (!grow)
        memset(w.built, 1, sizeof w.built);
    world_open(&w);
    sio_epoch_config c = cfg;
    world_use(&w, &c, NULL);
    CHECK(sio_order_open(io, list, &c, 0, &o, &e) == SIO_OK);
    if (!o) {
        world_close(&w);
        return;
    }
    world_use(&w, &c, o);
    save(o, &w, 0, sv, &nsv); /* at 0 */
    drive(o, &w, &t, 1, 0, 0, sv, &nsv, 4);
    sio_order_close(o);

    /* Y does not depend on the steps: a fresh order in the world reached
     * gives the same. */
    {
        sio_order *o2 = NULL;
        take_ctx x = {.t = &t};
        size_t n = 0;
        world_use(&w, &c, NULL);
        CHECK(sio_order_open(io, list, &c, 0, &o2, &e) == SIO_OK);
        if (o2)
            CHECK(sio_order_next(o2, SIZE_MAX, take, &x, &n, &e) == t.end);
        CHECK(!x.bad);
        CHECK_EQ_U64(n, t.n);
        sio_order_close(o2);
    }
    for (size_t i = 0; i < nsv; i++)
        replay(&cfg, &sv[i], &t, 0);
    if (nsv)
        check_refused(&cfg, &sv[rnd() % nsv]);
    check_from(&cfg, &w, &t);
    for (size_t i = 0; i < nsv; i++)
        sio_order_ckpt_free(sv[i].ck);
    world_close(&w);
    free(t.y);
}

static void one_dataset(int round)
{
    char dir[] = "/tmp/shardcast-ockpt-XXXXXX";
    char cmd[700];
    CHECK(mkdtemp(dir) != NULL);
    nsh = 1 + (size_t)(rnd() % NSH_MAX);
    for (size_t s = 0; s < nsh; s++) {
        char p[600];
        int gz = rnd() % 5 == 0;
        snprintf(p, sizeof p, "%s/shard-%02zu.tar%s", dir, s, gz ? ".gz" : "");
        make_random_shard(p, (int)(rnd() % 90), gz, rnd);
        /* Some shards cut short inside their data. */
        struct stat st;
        if (round % 2 == 1 && rnd() % 3 == 0 && stat(p, &st) == 0 &&
            st.st_size > 4000)
            CHECK(truncate(p, st.st_size / 2 + 77) == 0);
    }
    CHECK(sio_shardlist_resolve(io, dir, &list, NULL) == SIO_OK);
    CHECK_EQ_U64(sio_shardlist_count(list), nsh);
    /* Which shards fail to index, and where. */
    {
        world probe = {0};
        memset(probe.built, 1, sizeof probe.built);
        world_open(&probe);
        world_close(&probe);
    }
    for (int trial = 0; trial < 5; trial++)
        one_trial(trial, (trial + round) % 2);
    sio_shardlist_free(list);
    list = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    for (int round = 0; round < 16; round++)
        one_dataset(round);
    sio_order_ckpt_free(NULL);
    sio_io_destroy(io);
    CHECK_MAIN_END();
}
