/*
 * feed.c — one epoch, read once, dealt to many consumers by reference;
 * every other position reached by a seek.
 *
 * A feed runs a sio_epoch on a producer thread into a ring (the window)
 * holding indices [lo, hi) of Y. Cursors index the ring directly: consumer
 * r of W at share position k reads Y[G + r + k*W] (partition.c). Samples
 * stay in the window after every cursor took them (history, so that a
 * consumer that reconnects a little behind finds them in memory), up to
 * 1/4 of the window in samples and bytes; the producer reads ahead of the
 * slowest need by at most 3/4 of it (prefix sums of the sample sizes
 * account for both). The window never slides past a sample still needed,
 * except by the lag policy below.
 *
 * Seeks. A cursor whose next index has left the window (a reconnect from
 * behind, a late joiner, a start= / global_start= resume, the even-pad
 * tail, a consumer detached for lagging) moves to a seek feed: a child
 * feed whose epoch starts at that index (sio_epoch_open_at: computed from
 * the shard indexes, reading only what is needed from there on). Cursors
 * whose indexes meet share a child; children are limited in number
 * (SIO_ERR_BUSY beyond) and closed when unused. A child whose position is
 * not reachable from the indexes yet replays the epoch from its start
 * instead (the fallback, limited and shared the same way). A cursor on a
 * child returns to the main window as soon as its next index is there
 * again; one that came back from a reconnect keeps its place in the main
 * window pinned meanwhile ("return pin").
 *
 * Lag policy (SIO_FEED_LAG_DETACH, the default): when the window is full,
 * nothing below the slowest need can go, and some cursor waits for new
 * samples for lag_grace_ms, the window slides anyway (by 1/8). Cursors,
 * detached places, reservations and return pins below the new low edge
 * lose their hold; their consumers continue by seeks. So one consumer that
 * stops reading never stalls the others. SIO_FEED_LAG_WAIT keeps the old
 * rule: the slowest consumer paces everyone.
 *
 * Reservations: when a cursor of world W attaches, the other ranks of W
 * are expected for join_timeout_ms; a cursor that detaches keeps its place
 * for rejoin_grace_ms. Both hold samples only inside the window and only
 * under the lag policy above: they never block the producer for longer.
 * Groups (world, global_start) are at most FEED_GROUPS_MAX, recycled when
 * expired; detached places at most FEED_DETACHED_MAX, the oldest evicted.
 *
 * Locking: a feed and its children share one mutex (fam->mu), which
 * guards every window, cursor list, heap and reservation of the family.
 * notify callbacks run with it held. Feeds are closed with it released;
 * a producer stuck in object-store I/O is joined by a detached closer
 * thread, so sio_feed_close never blocks (sio_io_busy counts those).
 * Ownership: a window owns one reference per held sample; a cursor hands
 * out new references.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store_int.h"

#define FEED_WINDOW_SAMPLES_DEFAULT 65536u
#define FEED_WINDOW_BYTES_DEFAULT (256ull << 20)
#define FEED_WINDOW_SAMPLES_MAX (16u << 20)
#define FEED_JOIN_TIMEOUT_DEFAULT 30000u
#define FEED_REJOIN_GRACE_DEFAULT 60000u
#define FEED_LAG_GRACE_DEFAULT 2000u
#define FEED_SEEKS_DEFAULT 4u
#define FEED_SEEKS_MAX 256u
/* A child with no cursor lingers this long for others to join it. */
#define FEED_CHILD_LINGER_MS 2000u
/* Distinct (world, global_start) groups expected at once. */
#define FEED_GROUPS_MAX 16
/* Detached cursors remembered at once. */
#define FEED_DETACHED_MAX 4096
/* How often a blocked producer re-checks timers. */
#define FEED_TICK_MS 250
/* Waking a consumer costs a context switch (and in the server a resumed
 * connection): wake it for a batch of samples, not for every one. */
#define FEED_WAKE_BATCH_DEFAULT 16u
/* Read-ahead per shard of a seek feed's epoch. */
#define SEEK_READAHEAD_BYTES (1ull << 20)
/* Times one feed opens its epoch again after a shard index it relied on
 * was dropped (sio_epoch_index_dropped); each drop rebuilds that shard's
 * index, so a second one means another shard's was wrong too. */
#define FEED_REOPENS_MAX 4u
/* Internal step result: the cursor must move to a seek feed. */
#define STEP_SEEK ((sio_code)1000)

typedef struct family {
    pthread_mutex_t mu;
    atomic_int refs;
    void (*released)(void *userdata); /* the last feed is gone */
    void *userdata;
} family;

typedef struct group {
    uint32_t world;
    uint64_t gstart, start;  /* start position assumed for absent ranks */
    uint64_t deadline_ms;    /* reservations end */
    uint32_t nseen;
    unsigned char *seen;     /* world bits: rank attached at least once */
} group;

typedef struct detached {
    uint32_t rank, world;
    uint64_t gstart, need;
    uint64_t deadline_ms;
    uint64_t position;
} detached;

struct sio_cursor {
    sio_feed *root;
    sio_feed *src;          /* the feed whose window it reads */
    sio_cursor_config cfg;
    uint64_t k;             /* next own element of the share */
    uint64_t pos;           /* position handed out so far */
    int done;
    const sio_sample *pending; /* even-drop: taken, awaiting its round */
    uint64_t pending_end;      /* the index that completes that round */
    int tail;               /* even-pad: dealing the padded tail */
    uint64_t n;             /* even-pad tail: the epoch's length */
    uint64_t rpin;          /* return pin in the root window, or MAX */
    int heap_at;            /* index in src's waiting heap, -1 if not */
    uint64_t ready_at;      /* waiting: ready once src->hi > ready_at */
    int blocking_wait;      /* in sio_cursor_next_wait, on cv */
    pthread_cond_t cv;
    uint64_t last_ms;
    struct sio_cursor *next, *prev; /* src->cursors list */
    uint64_t seeks;         /* times it moved to a seek feed */
    char err[800];
};

struct sio_feed {
    family *fam;
    sio_feed *root;         /* self for the root */
    sio_io *io;
    const sio_shardlist *list;
    sio_epoch_config ecfg;
    sio_feed_config cfg;
    sio_epoch *ep;
    uint64_t base;          /* the epoch starts at Y[base] */
    pthread_t thread;
    int thread_started;
    pthread_cond_t room;    /* producer: the window may slide */
    const sio_sample **win;
    uint64_t *cum;          /* cum[i % window]: bytes appended before Y[i] */
    uint64_t total_in;      /* bytes appended so far */
    uint64_t lo, hi, bytes;
    uint64_t need_hint;     /* a lower bound of the slowest need */
    uint64_t blocked_ms;    /* since when a full window blocks waiters */
    int woke_blocked;       /* every waiter was woken in this blocked
                               period */
    uint64_t resume_at;     /* a blocked producer wants waking once the
                               slowest need reaches this (a batch past
                               where it blocked, not every take) */
    int ended, failed, stop;
    uint64_t n_end;         /* at the end: the epoch's length N */
    uint64_t n_known;       /* root: N once any feed of the family ended
                               (0: not yet) */
    int producer_waiting;   /* in a wait on `room` */
    int in_read;            /* producer inside sio_epoch_next / open */
    int replay;             /* child: not reachable by a seek; replays */
    int attached_once;      /* a cursor has been here */
    sio_epoch *dropped_eps[FEED_REOPENS_MAX]; /* epochs that failed on a
                               wrong index, closed with the feed (a
                               stopping feed may be cancelling one) */
    uint32_t reopens;
    uint64_t skip_below;    /* a replay after a reopen: samples below this
                               are in the window already */
    sio_code fail_rc;
    char errmsg[800];
    sio_cursor *cursors;
    size_t ncursors;
    sio_cursor **heap;
    size_t nheap, heapcap;
    uint64_t idle_since;    /* child: no cursor since (0: in use) */
    uint64_t started_us;    /* child: when it opened (0: counted) */
    sio_feed *children, *next_child; /* root: its seek feeds */
    sio_feed *graveyard;    /* root: unlinked children to stop */
    uint32_t nchildren;
    group groups[FEED_GROUPS_MAX];
    detached *det;
    size_t ndet;
    sio_epoch_stats est;
    sio_feed_seek_stats seek; /* root: counters of seeks and lag */
};

static uint64_t cursor_index(const sio_cursor *c)
{
    return c->cfg.global_start + c->cfg.rank + c->k * c->cfg.world;
}

/* The index c needs next from a window: its tail source, its own index. */
static uint64_t cursor_need(const sio_cursor *c)
{
    if (c->done)
        return UINT64_MAX;
    if (c->tail)
        return sio_share_pad_source(c->n, c->cfg.global_start,
                                    cursor_index(c));
    return cursor_index(c);
}

/* The waiting heap (min by ready_at), per feed ---------------------- */

static void heap_swap(sio_feed *f, size_t a, size_t b)
{
    sio_cursor *t = f->heap[a];
    f->heap[a] = f->heap[b];
    f->heap[b] = t;
    f->heap[a]->heap_at = (int)a;
    f->heap[b]->heap_at = (int)b;
}

static void heap_up(sio_feed *f, size_t i)
{
    while (i > 0 && f->heap[(i - 1) / 2]->ready_at > f->heap[i]->ready_at) {
        heap_swap(f, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(sio_feed *f, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < f->nheap && f->heap[l]->ready_at < f->heap[m]->ready_at)
            m = l;
        if (r < f->nheap && f->heap[r]->ready_at < f->heap[m]->ready_at)
            m = r;
        if (m == i)
            return;
        heap_swap(f, i, m);
        i = m;
    }
}

static void heap_remove(sio_feed *f, sio_cursor *c)
{
    if (c->heap_at < 0)
        return;
    size_t i = (size_t)c->heap_at;
    c->heap_at = -1;
    f->nheap--;
    if (i != f->nheap) {
        f->heap[i] = f->heap[f->nheap];
        f->heap[i]->heap_at = (int)i;
        heap_down(f, i);
        heap_up(f, i);
    }
}

/* Room in f's heap for every cursor of f and one more. */
static int heap_reserve(sio_feed *f)
{
    if (f->ncursors + 1 <= f->heapcap && f->nheap < f->heapcap)
        return 0;
    size_t ncap = f->heapcap ? f->heapcap * 2 : 64;
    while (ncap < f->ncursors + 1 || ncap <= f->nheap)
        ncap *= 2;
    sio_cursor **nh = realloc(f->heap, ncap * sizeof *nh);
    if (!nh)
        return -1;
    f->heap = nh;
    f->heapcap = ncap;
    return 0;
}

static void wake_one(sio_cursor *c)
{
    if (c->blocking_wait)
        pthread_cond_signal(&c->cv);
    else if (c->cfg.notify)
        c->cfg.notify(c->cfg.userdata);
}

/* Wake every waiting cursor of f that can proceed; all of them when the
 * epoch ended or `all`. */
static void wake(sio_feed *f, int all)
{
    while (f->nheap > 0 &&
           (all || f->ended || f->heap[0]->ready_at < f->hi)) {
        sio_cursor *c = f->heap[0];
        heap_remove(f, c);
        wake_one(c);
    }
}

/* Cursor lists ------------------------------------------------------- */

static void list_add(sio_feed *f, sio_cursor *c)
{
    c->src = f;
    c->prev = NULL;
    c->next = f->cursors;
    if (f->cursors)
        f->cursors->prev = c;
    f->cursors = c;
    f->ncursors++;
    f->idle_since = 0;
    f->attached_once = 1;
    if (!f->ep)
        pthread_cond_signal(&f->room); /* a lazy producer starts */
}

static void list_remove(sio_feed *f, sio_cursor *c)
{
    heap_remove(f, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        f->cursors = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    f->ncursors--;
    if (f->ncursors == 0 && f != f->root)
        f->idle_since = sio_now_ms();
}

/* The window ---------------------------------------------------------- */

/* Smallest index of Y still needed in f's window, at or above lo; hi
 * when nothing below it is needed. */
static uint64_t lowest_need(sio_feed *f, uint64_t now)
{
    uint64_t need = f->hi;
    /* Before anyone attached, nothing may go: the first consumers are
     * about to come for the start. */
    if (!f->attached_once)
        return f->lo;
    for (sio_cursor *c = f->cursors; c; c = c->next) {
        uint64_t i = cursor_need(c);
        if (i >= f->lo && i < need)
            need = i;
    }
    if (f != f->root)
        return need;
    for (sio_feed *ch = f->children; ch; ch = ch->next_child)
        for (sio_cursor *c = ch->cursors; c; c = c->next)
            if (c->rpin >= f->lo && c->rpin < need)
                need = c->rpin;
    for (size_t d = 0; d < f->ndet;) {
        if (f->det[d].deadline_ms <= now || f->det[d].need < f->lo) {
            f->det[d] = f->det[--f->ndet];
            continue;
        }
        if (f->det[d].need < need)
            need = f->det[d].need;
        d++;
    }
    for (size_t g = 0; g < FEED_GROUPS_MAX; g++) {
        group *gr = &f->groups[g];
        if (!gr->seen || gr->deadline_ms <= now || gr->nseen == gr->world)
            continue;
        for (uint32_t r = 0; r < gr->world; r++) {
            uint64_t i;
            if (gr->seen[r / 8] & (1u << (r % 8)))
                continue;
            if (sio_share_index(gr->gstart, r, gr->world, gr->start, &i) ||
                i < f->lo)
                continue;
            if (i < need)
                need = i;
            break; /* the lowest absent rank gives the lowest index */
        }
    }
    return need;
}

static void drop_lo(sio_feed *f)
{
    const sio_sample *s = f->win[f->lo % f->cfg.window_samples];
    f->bytes -= s->bytes;
    sio_sample_unref(s);
    f->lo++;
}

/* Bytes appended before Y[i], for lo <= i <= hi. */
static uint64_t prefix(const sio_feed *f, uint64_t i)
{
    return i >= f->hi ? f->total_in : f->cum[i % f->cfg.window_samples];
}

static int full(const sio_feed *f)
{
    return f->hi - f->lo >= f->cfg.window_samples ||
           f->bytes >= f->cfg.window_bytes;
}

/* History (samples below every need) beyond its share, 1/4 of the window
 * in samples and in bytes? need may be a stale lower bound. */
static int history_over(const sio_feed *f, uint64_t need)
{
    return need - f->lo > f->cfg.window_samples / 4 ||
           prefix(f, need) - prefix(f, f->lo) > f->cfg.window_bytes / 4;
}

/* Drop history nobody needs: keep at most 1/4 of the window, and none
 * when the window is full. Returns 1 when there is room now. */
static int make_room(sio_feed *f)
{
    uint64_t need = lowest_need(f, sio_now_ms());
    f->need_hint = need;
    while (f->lo < need && (full(f) || history_over(f, need)))
        drop_lo(f);
    return !full(f);
}

/* May the producer read ahead? At most 3/4 of the window (samples and
 * bytes) beyond the slowest need, so the rest stays history. */
/* Does anyone still want this feed to read on? Before the first attach
 * it reads ahead (prefetch); after, only for its cursors and holds. */
static int wanted(const sio_feed *f)
{
    if (!f->attached_once || f->ncursors > 0)
        return 1;
    if (f != f->root)
        return 0;
    if (f->ndet > 0)
        return 1;
    for (size_t g = 0; g < FEED_GROUPS_MAX; g++)
        if (f->groups[g].seen && f->groups[g].nseen < f->groups[g].world &&
            f->groups[g].deadline_ms > sio_now_ms())
            return 1;
    for (const sio_feed *ch = f->children; ch; ch = ch->next_child)
        for (const sio_cursor *c = ch->cursors; c; c = c->next)
            if (c->rpin != UINT64_MAX)
                return 1;
    return 0;
}

static int ahead_below(const sio_feed *f, uint64_t need)
{
    uint64_t ahead = f->cfg.window_samples / 4 * 3;
    if (ahead < 1)
        ahead = 1;
    return f->hi - need < ahead &&
           f->total_in - prefix(f, need) < f->cfg.window_bytes / 4 * 3 + 1;
}

static int ahead_ok(sio_feed *f)
{
    if (!wanted(f))
        return 0;
    if (ahead_below(f, f->need_hint))
        return 1;
    f->need_hint = lowest_need(f, sio_now_ms());
    return ahead_below(f, f->need_hint);
}

/* Does a cursor of f wait for samples not produced yet? */
static int someone_waits(const sio_feed *f)
{
    for (size_t i = 0; i < f->nheap; i++)
        if (f->heap[i]->ready_at >= f->hi)
            return 1;
    return 0;
}

/* The lag policy: slide past whatever holds the window back (the
 * slowest need, and 1/8 of the window beyond it). Cursors left below lo
 * move to seeks when they next step. */
static void force_slide(sio_feed *f)
{
    uint64_t target = f->need_hint + f->cfg.window_samples / 8 + 1;
    if (target > f->hi)
        target = f->hi;
    while (f->lo < target || (full(f) && f->lo < f->hi))
        drop_lo(f);
    f->root->seek.lag_detaches++;
    f->need_hint = f->lo;
    wake(f, 1);
}

/*
 * Open f's epoch on its producer thread: a sample feed's one sample; a
 * lazy main feed's epoch once a cursor reads it; a seek's epoch at its
 * base from the indexes, else a replay from the start. Returns SIO_OK, or
 * an error with the feed failed (and its waiters woken), or
 * SIO_ERR_CANCELED when the feed stopped first.
 */
static sio_code open_epoch(sio_feed *f)
{
    pthread_mutex_t *mu = &f->fam->mu;
    sio_epoch *ep = NULL;
    sio_error e;
    sio_code rc;
    int replay = 0;

    if (f == f->root) {
        /* Lazy: read nothing until a cursor reads this feed itself (the
         * first one may go to a seek instead). */
        pthread_mutex_lock(mu);
        while (!f->stop && !(f->attached_once && f->ncursors > 0))
            pthread_cond_wait(&f->room, mu);
        pthread_mutex_unlock(mu);
        if (f->stop)
            return SIO_ERR_CANCELED;
        rc = sio_epoch_open(f->io, f->list, &f->ecfg, &ep, &e);
    } else {
        rc = sio_epoch_open_at(f->io, f->list, &f->ecfg, f->base, &ep, &e);
        if (rc == SIO_ERR_AGAIN || rc == SIO_ERR_UNSUPPORTED) {
            rc = sio_epoch_open(f->io, f->list, &f->ecfg, &ep, &e);
            replay = 1;
        }
    }
    pthread_mutex_lock(mu);
    f->ep = ep;
    if (ep && f->stop)
        sio_epoch_cancel(ep); /* feed_stop saw no epoch to cancel */
    if (replay) {
        f->replay = 1;
        f->lo = f->hi = 0;
        if (!f->stop) /* a stopped child may outlive its root */
            f->root->seek.replays++;
    }
    if (rc) {
        f->failed = f->ended = 1;
        f->fail_rc = rc;
        snprintf(f->errmsg, sizeof f->errmsg, "%s%s",
                 f != f->root ? "seek: " : "", e.msg);
        wake(f, 1);
    }
    pthread_mutex_unlock(mu);
    return rc;
}

/*
 * f's epoch failed because a shard index loaded from a file or sidecar
 * turned out wrong (it was dropped and the shard indexed again by reading
 * it). Open the epoch again where it stopped: from the indexes as they
 * are now, else by a replay that keeps nothing below that position; a
 * sample feed looks its sample up again. The consumers see no error.
 * Returns SIO_OK with f->ep replaced. mu NOT held; only the producer
 * thread calls it.
 */
static sio_code reopen_epoch(sio_feed *f)
{
    pthread_mutex_t *mu = &f->fam->mu;
    sio_epoch *ep = NULL;
    sio_error e;
    sio_code rc;
    uint64_t at;
    int replay = 0;

    pthread_mutex_lock(mu);
    at = f->hi;
    rc = f->stop || f->reopens >= FEED_REOPENS_MAX ? SIO_ERR_CANCELED
                                                   : SIO_OK;
    pthread_mutex_unlock(mu);
    if (rc)
        return rc;
    rc = sio_epoch_open_at(f->io, f->list, &f->ecfg, at, &ep, &e);
    if (rc == SIO_ERR_AGAIN || rc == SIO_ERR_UNSUPPORTED) {
        rc = sio_epoch_open(f->io, f->list, &f->ecfg, &ep, &e);
        replay = 1;
    }
    if (rc)
        return rc;
    pthread_mutex_lock(mu);
    sio_epoch_cancel(f->ep); /* its readers stop now */
    f->dropped_eps[f->reopens++] = f->ep;
    f->ep = ep;
    if (replay) {
        f->replay = 1;
        f->skip_below = at;
    }
    if (f->stop)
        sio_epoch_cancel(ep);
    pthread_mutex_unlock(mu);
    SIO_LOG(&f->ecfg.log, SIO_LOG_WARN,
            "event=epoch_reopened position=%" PRIu64 " how=%s reason=\"a "
            "shard index it relied on was wrong and is rebuilt\"", at,
            replay ? "replay" : "seek");
    return SIO_OK;
}

static void *producer_main(void *arg)
{
    sio_feed *f = arg;
    pthread_mutex_t *mu = &f->fam->mu;
    sio_code rc = SIO_OK;

    if (f != f->root || !f->ep) {
        if (open_epoch(f) != SIO_OK)
            return NULL;
    }
    pthread_mutex_lock(mu);
    while (!f->stop) {
        if (full(f) || history_over(f, f->need_hint))
            make_room(f);
        if (full(f) || !ahead_ok(f)) {
            /* Blocked by the slowest need. Under the lag policy, when
             * others wait for new samples, that need loses its hold after
             * lag_grace_ms. */
            uint64_t now = sio_now_ms();
            int waits = someone_waits(f);
            /* Waiting cursors take what is there (a wake batch may ask
             * for more than the window will hold): once per blocked
             * period, not at every signal, or each take of the slowest
             * cursor would wake them all again. */
            if (!f->woke_blocked) {
                wake(f, 1);
                f->woke_blocked = 1;
            }
            if (f->cfg.lag_policy == SIO_FEED_LAG_DETACH && waits) {
                if (!f->blocked_ms)
                    f->blocked_ms = now;
                if (now - f->blocked_ms >= f->cfg.lag_grace_ms) {
                    force_slide(f);
                    f->blocked_ms = 0;
                    continue;
                }
            } else {
                f->blocked_ms = 0;
            }
            struct timespec ts;
            sio_deadline_in(&ts, FEED_TICK_MS);
            f->resume_at = f->need_hint + f->cfg.window_samples / 16 + 1;
            f->producer_waiting = 1;
            pthread_cond_timedwait(&f->room, mu, &ts);
            f->producer_waiting = 0;
            continue;
        }
        f->blocked_ms = 0;
        f->woke_blocked = 0;
        f->in_read = 1;
        pthread_mutex_unlock(mu);
        const sio_sample *s = NULL;
        rc = sio_epoch_next(f->ep, &s);
        while (rc != SIO_OK && sio_epoch_index_dropped(f->ep) &&
               reopen_epoch(f) == SIO_OK)
            rc = sio_epoch_next(f->ep, &s);
        sio_epoch_stats est;
        sio_epoch_get_stats(f->ep, &est);
        pthread_mutex_lock(mu);
        f->in_read = 0;
        f->est = est;
        if (rc != SIO_OK) {
            f->failed = 1;
            f->fail_rc = rc;
            snprintf(f->errmsg, sizeof f->errmsg, "%s",
                     sio_epoch_errmsg(f->ep));
            f->ended = 1;
        } else if (!s) {
            f->ended = 1;
            f->n_end = sio_epoch_emitted(f->ep);
            if (!f->stop)
                f->root->n_known = f->n_end + 1; /* +1: 0 means unknown */
        } else if (s->global_index < f->skip_below) {
            sio_sample_unref(s); /* produced before the reopen */
        } else if (s->global_index < f->lo) {
            sio_sample_unref(s); /* a replay before its first need */
            f->hi = f->lo;
        } else {
            if (f->started_us && !f->stop) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t us = (uint64_t)ts.tv_sec * 1000000u +
                              (uint64_t)ts.tv_nsec / 1000u;
                f->root->seek.ready_us += us - f->started_us;
                f->root->seek.ready_count++;
                sio_hist_snap_observe(&f->root->seek.ready, &sio_hist_latency,
                                      (us - f->started_us) * 1000u);
                f->started_us = 0;
            }
            if (f->hi == f->lo && f->replay)
                f->lo = s->global_index;
            f->hi = s->global_index;
            f->win[f->hi % f->cfg.window_samples] = s;
            f->cum[f->hi % f->cfg.window_samples] = f->total_in;
            f->total_in += s->bytes;
            f->hi++;
            f->bytes += s->bytes;
            /* A replay keeps nothing below what its cursors need. */
            if (f->replay)
                while (f->lo < f->hi && f->lo < lowest_need(f, sio_now_ms()) &&
                       f->hi - f->lo > 1)
                    drop_lo(f);
        }
        wake(f, 0);
        if (f->ended)
            break;
    }
    pthread_mutex_unlock(mu);
    return NULL;
}

static void family_unref(family *fam)
{
    if (atomic_fetch_sub(&fam->refs, 1) == 1) {
        void (*cb)(void *) = fam->released;
        void *ud = fam->userdata;
        pthread_mutex_destroy(&fam->mu);
        free(fam);
        if (cb)
            cb(ud);
    }
}

/* Free a stopped feed whose producer has been joined. */
static void feed_free(sio_feed *f)
{
    sio_epoch_close(f->ep);
    for (uint32_t i = 0; i < f->reopens; i++)
        sio_epoch_close(f->dropped_eps[i]);
    for (uint64_t i = f->lo; f->win && i < f->hi; i++)
        sio_sample_unref(f->win[i % f->cfg.window_samples]);
    for (size_t g = 0; g < FEED_GROUPS_MAX; g++)
        free(f->groups[g].seen);
    free(f->heap);
    free(f->det);
    free(f->win);
    free(f->cum);
    pthread_cond_destroy(&f->room);
    if (f->fam)
        family_unref(f->fam);
    free(f);
}

static void *closer_main(void *arg)
{
    sio_feed *f = arg;
    sio_io *io = f->io;
    pthread_join(f->thread, NULL);
    feed_free(f);
    sio_io_busy_add(io, -1);
    return NULL;
}

/* Stop f's producer and free f, waiting for it only briefly: one stuck in
 * object-store I/O is left to a detached closer thread. No lock held. */
static void feed_stop(sio_feed *f)
{
    struct timespec ts;
    pthread_attr_t at;
    pthread_t t;
    if (!f)
        return;
    int reading;
    sio_epoch *ep;
    pthread_mutex_lock(&f->fam->mu);
    f->stop = 1;
    /* a seek (or a lazy feed) may be opening its epoch */
    reading = f->in_read || (!f->ep && (f != f->root || f->attached_once));
    /* Read under the lock: the producer sets it (open_epoch) and swaps it
     * (reopen_epoch, which keeps the old one until feed_free and cancels
     * a new one itself once stop is set). */
    ep = f->ep;
    pthread_cond_broadcast(&f->room);
    pthread_mutex_unlock(&f->fam->mu);
    if (ep)
        sio_epoch_cancel(ep);
    if (!f->thread_started) {
        feed_free(f);
        return;
    }
    /* A producer outside a read only has to wake up and leave: join it
     * here. One inside a read (object-store I/O, retries) is left to a
     * closer thread after a short wait. */
    if (!reading) {
        pthread_join(f->thread, NULL);
        feed_free(f);
        return;
    }
    sio_deadline_in(&ts, 20);
    if (pthread_timedjoin_np(f->thread, NULL, &ts) == 0) {
        feed_free(f);
        return;
    }
    sio_io_busy_add(f->io, 1);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, closer_main, f) != 0) {
        pthread_attr_destroy(&at);
        closer_main(f); /* no thread: wait here */
        return;
    }
    pthread_attr_destroy(&at);
}

static void fill_defaults(sio_feed_config *c)
{
    if (!c->window_samples)
        c->window_samples = FEED_WINDOW_SAMPLES_DEFAULT;
    if (!c->window_bytes)
        c->window_bytes = FEED_WINDOW_BYTES_DEFAULT;
    if (!c->join_timeout_ms)
        c->join_timeout_ms = FEED_JOIN_TIMEOUT_DEFAULT;
    if (!c->rejoin_grace_ms)
        c->rejoin_grace_ms = FEED_REJOIN_GRACE_DEFAULT;
    if (!c->wake_batch)
        c->wake_batch = FEED_WAKE_BATCH_DEFAULT;
    if (!c->lag_grace_ms)
        c->lag_grace_ms = FEED_LAG_GRACE_DEFAULT;
    if (!c->max_seeks)
        c->max_seeks = FEED_SEEKS_DEFAULT;
    if (!c->seek_window_samples)
        c->seek_window_samples = c->window_samples / 16 ? c->window_samples / 16
                                                        : 1;
    if (!c->seek_window_bytes)
        c->seek_window_bytes = c->window_bytes / 16 ? c->window_bytes / 16 : 1;
}

/* Allocate a feed (root when parent is NULL) and start its producer. */
static sio_code feed_start(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *ecfg,
                           const sio_feed_config *fcfg, sio_feed *parent,
                           uint64_t base, sio_feed **out, sio_error *err)
{
    sio_code rc = SIO_OK;
    sio_feed *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_cond_init(&f->room, NULL);
    f->io = io;
    f->list = list;
    f->ecfg = *ecfg;
    f->cfg = *fcfg;
    f->base = f->lo = f->hi = f->need_hint = base;
    if (parent) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        f->started_us = (uint64_t)ts.tv_sec * 1000000u +
                        (uint64_t)ts.tv_nsec / 1000u;
        f->root = parent;
        f->fam = parent->fam;
        atomic_fetch_add(&f->fam->refs, 1);
        f->cfg.window_samples = parent->cfg.seek_window_samples;
        f->cfg.window_bytes = parent->cfg.seek_window_bytes;
        /* A seek may end soon (a reconnect catching up): read ahead less. */
        if (f->ecfg.readahead_bytes == 0 ||
            f->ecfg.readahead_bytes > SEEK_READAHEAD_BYTES)
            f->ecfg.readahead_bytes = SEEK_READAHEAD_BYTES;
    } else {
        f->root = f;
        f->fam = calloc(1, sizeof *f->fam);
        if (!f->fam) {
            feed_free(f);
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        }
        pthread_mutex_init(&f->fam->mu, NULL);
        atomic_init(&f->fam->refs, 1);
        f->fam->released = fcfg->released;
        f->fam->userdata = fcfg->released_userdata;
        f->det = malloc(FEED_DETACHED_MAX * sizeof *f->det);
        if (!f->det) {
            feed_free(f);
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        }
    }
    f->win = malloc(f->cfg.window_samples * sizeof *f->win);
    f->cum = malloc(f->cfg.window_samples * sizeof *f->cum);
    if (!f->win || !f->cum) {
        feed_free(f);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    if (!parent && !fcfg->lazy) {
        rc = sio_epoch_open(io, list, ecfg, &f->ep, err);
        if (rc) {
            feed_free(f);
            return rc;
        }
    }
    if (pthread_create(&f->thread, NULL, producer_main, f) != 0) {
        feed_free(f);
        return sio_seterr(err, SIO_ERR_NOMEM, "cannot start a thread");
    }
    f->thread_started = 1;
    *out = f;
    return SIO_OK;
}

sio_code sio_feed_open(sio_io *io, const sio_shardlist *list,
                       const sio_epoch_config *ecfg,
                       const sio_feed_config *fcfg, sio_feed **out,
                       sio_error *err)
{
    sio_feed_config c = {0};
    if (fcfg)
        c = *fcfg;
    fill_defaults(&c);
    *out = NULL;
    if (c.window_samples > FEED_WINDOW_SAMPLES_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "window_samples above %u",
                          FEED_WINDOW_SAMPLES_MAX);
    if (c.max_seeks > FEED_SEEKS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "max_seeks above %u",
                          FEED_SEEKS_MAX);
    if (c.lag_policy != SIO_FEED_LAG_DETACH && c.lag_policy != SIO_FEED_LAG_WAIT)
        return sio_seterr(err, SIO_ERR_INVALID, "unknown lag policy");
    return feed_start(io, list, ecfg, &c, NULL, 0, out, err);
}

/* Unlink and stop children with no cursor for a while (fam->mu held);
 * returns them as a list to stop once the lock is released. */
static sio_feed *reap_children(sio_feed *root, uint64_t now, int all)
{
    sio_feed *dead = root->graveyard, **pp = &root->children;
    root->graveyard = NULL;
    while (*pp) {
        sio_feed *ch = *pp;
        if (all || (ch->ncursors == 0 && ch->idle_since &&
                    now - ch->idle_since >= FEED_CHILD_LINGER_MS) ||
            (ch->ncursors == 0 && ch->failed)) {
            *pp = ch->next_child;
            root->nchildren--;
            if (root->cfg.seek_budget)
                atomic_fetch_sub(root->cfg.seek_budget, 1);
            ch->next_child = dead;
            dead = ch;
            continue;
        }
        pp = &ch->next_child;
    }
    return dead;
}

static void stop_list(sio_feed *dead)
{
    while (dead) {
        sio_feed *nx = dead->next_child;
        feed_stop(dead);
        dead = nx;
    }
}

void sio_feed_close(sio_feed *f)
{
    sio_feed *dead;
    if (!f)
        return;
    pthread_mutex_lock(&f->fam->mu);
    dead = reap_children(f, sio_now_ms(), 1);
    pthread_mutex_unlock(&f->fam->mu);
    stop_list(dead);
    feed_stop(f);
}

/* Note an attaching rank in its group; create or recycle the group. */
static void group_note(sio_feed *f, const sio_cursor_config *cfg,
                       uint64_t now)
{
    group *gr = NULL, *spare = NULL;
    for (size_t g = 0; g < FEED_GROUPS_MAX; g++) {
        group *x = &f->groups[g];
        if (x->seen && x->world == cfg->world &&
            x->gstart == cfg->global_start) {
            gr = x;
            break;
        }
        if (!spare && (!x->seen || x->deadline_ms <= now ||
                       x->nseen == x->world))
            spare = x;
    }
    if (!gr && spare) {
        unsigned char *seen = calloc((cfg->world + 7) / 8, 1);
        if (seen) {
            free(spare->seen);
            gr = spare;
            gr->world = cfg->world;
            gr->gstart = cfg->global_start;
            gr->start = cfg->start;
            gr->deadline_ms = now + f->cfg.join_timeout_ms;
            gr->nseen = 0;
            gr->seen = seen;
        }
    }
    if (gr && !(gr->seen[cfg->rank / 8] & (1u << (cfg->rank % 8)))) {
        gr->seen[cfg->rank / 8] |= (unsigned char)(1u << (cfg->rank % 8));
        gr->nseen++;
    }
}

/* How far ahead of a feed's production a new cursor seeks instead of
 * waiting: beyond a buffer's worth of samples (what a seek reads first),
 * and at least 1024. */
static uint64_t far_ahead(const sio_feed *f)
{
    uint64_t b = f->ecfg.buffer_samples;
    return b > 1024 ? b : 1024;
}

/* Move c to a feed whose window reaches index t: a child that covers it,
 * a new child, or SIO_ERR_BUSY (fam->mu held). */
static sio_code reseat(sio_cursor *c, uint64_t t)
{
    sio_feed *root = c->root, *ch, *best = NULL;
    sio_error e;
    uint64_t reach = root->cfg.seek_window_samples / 2;
    for (ch = root->children; ch; ch = ch->next_child) {
        if (ch->failed || ch->stop || ch == c->src)
            continue;
        if (ch->lo <= t && t <= ch->hi + reach &&
            (!best || ch->hi > best->hi))
            best = ch;
    }
    if (!best && root->nchildren >= root->cfg.max_seeks) {
        /* At the limit: an unused child makes room; the one c leaves
         * counts as unused when c is its only cursor. */
        sio_feed **pp = &root->children;
        while (*pp && (*pp)->ncursors > 0 &&
               !(*pp == c->src && (*pp)->ncursors == 1))
            pp = &(*pp)->next_child;
        if (*pp) {
            sio_feed *idle = *pp;
            if (idle == c->src) {
                list_remove(idle, c);
                c->src = NULL;
            }
            *pp = idle->next_child;
            root->nchildren--;
            if (root->cfg.seek_budget)
                atomic_fetch_sub(root->cfg.seek_budget, 1);
            idle->next_child = root->graveyard;
            root->graveyard = idle;
        }
    }
    if (!best) {
        if (root->nchildren >= root->cfg.max_seeks ||
            (root->cfg.seek_budget &&
             atomic_fetch_add(root->cfg.seek_budget, 1) >=
                 root->cfg.seek_budget_max)) {
            if (root->nchildren < root->cfg.max_seeks && root->cfg.seek_budget)
                atomic_fetch_sub(root->cfg.seek_budget, 1);
            root->seek.busy++;
            snprintf(c->err, sizeof c->err,
                     "too many seeks in flight (%u); retry later",
                     root->nchildren);
            if (!c->src)
                list_add(root, c);
            return SIO_ERR_BUSY;
        }
        if (heap_reserve(root) != 0 ||
            feed_start(root->io, root->list, &root->ecfg, &root->cfg, root, t,
                       &best, &e) != SIO_OK) {
            if (root->cfg.seek_budget)
                atomic_fetch_sub(root->cfg.seek_budget, 1);
            snprintf(c->err, sizeof c->err, "seek: cannot start");
            if (!c->src)
                list_add(root, c);
            return SIO_ERR_NOMEM;
        }
        best->next_child = root->children;
        root->children = best;
        root->nchildren++;
        root->seek.opened++;
    } else {
        root->seek.shared++;
    }
    if (heap_reserve(best) != 0) {
        snprintf(c->err, sizeof c->err, "out of memory");
        if (!c->src)
            list_add(root, c);
        return SIO_ERR_NOMEM;
    }
    if (c->src)
        list_remove(c->src, c);
    list_add(best, c);
    c->seeks++;
    return SIO_OK;
}

sio_code sio_feed_attach(sio_feed *f, const sio_cursor_config *cfg,
                         sio_cursor **out, sio_error *err)
{
    sio_cursor *c;
    uint64_t now = sio_now_ms(), need;
    char why[160];
    sio_code rc = SIO_OK;
    sio_feed *dead;
    *out = NULL;
    if (sio_share_validate(cfg->rank, cfg->world, cfg->global_start,
                           cfg->start, why, sizeof why) != 0)
        return sio_seterr(err, SIO_ERR_INVALID, "%s", why);
    c = calloc(1, sizeof *c);
    if (!c)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    c->root = f;
    c->cfg = *cfg;
    c->k = cfg->start;
    c->pos = cfg->start;
    c->heap_at = -1;
    c->rpin = UINT64_MAX;
    c->last_ms = now;
    pthread_cond_init(&c->cv, NULL);
    pthread_mutex_lock(&f->fam->mu);
    if (cfg->policy == SIO_PARTITION_EVEN_PAD && f->n_known &&
        cursor_index(c) >= f->n_known - 1 && f->n_known - 1 > cfg->global_start) {
        c->tail = 1;
        c->n = f->n_known - 1;
    }
    need = cursor_need(c);
    if (heap_reserve(f) != 0) {
        pthread_mutex_unlock(&f->fam->mu);
        pthread_cond_destroy(&c->cv);
        free(c);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    /* A reattaching consumer replaces its detached record; its place
     * there becomes its return pin while it catches up from behind. */
    for (size_t d = 0; d < f->ndet; d++)
        if (f->det[d].rank == cfg->rank && f->det[d].world == cfg->world &&
            f->det[d].gstart == cfg->global_start) {
            if (need < f->lo && f->det[d].need >= f->lo)
                c->rpin = f->det[d].need;
            f->det[d] = f->det[--f->ndet];
            break;
        }
    group_note(f, cfg, now);
    list_add(f, c);
    /* Behind the window, or so far ahead that reading up to it would mean
     * reading what nobody asked for: a seek. */
    if (need < f->lo || (need > f->hi && need - f->hi > far_ahead(f))) {
        rc = reseat(c, need);
        if (rc) {
            list_remove(c->src, c);
            sio_seterr(err, rc, "%s", c->err);
        }
    }
    /* The set of needs changed: a waiting producer re-checks. */
    if (f->producer_waiting)
        pthread_cond_signal(&f->room);
    dead = reap_children(f, now, 0);
    pthread_mutex_unlock(&f->fam->mu);
    stop_list(dead);
    if (rc) {
        pthread_cond_destroy(&c->cv);
        free(c);
        return rc;
    }
    *out = c;
    return SIO_OK;
}

/* Take Y[i] from c's window as the next sample of c (mu held). */
static void take(sio_cursor *c, uint64_t i, const sio_sample **out)
{
    sio_feed *f = c->src;
    const sio_sample *s = f->win[i % f->cfg.window_samples];
    uint64_t old = cursor_need(c);
    sio_sample_ref(s);
    *out = s;
    c->k++;
    c->pos++;
    c->last_ms = sio_now_ms();
    /* The slowest cursor moving on may let a blocked producer go on:
     * wake it once a batch of room is there. */
    if (f->producer_waiting && old <= f->need_hint &&
        cursor_need(c) >= f->resume_at)
        pthread_cond_signal(&f->room);
}

/* The epoch ended on c's feed before c's next sample. */
static sio_code ended(sio_cursor *c)
{
    sio_feed *f = c->src;
    if (f->failed) {
        snprintf(c->err, sizeof c->err, "%s", f->errmsg);
        return f->fail_rc ? f->fail_rc : SIO_ERR_IO;
    }
    sio_sample_unref(c->pending);
    c->pending = NULL;
    c->done = 1;
    return SIO_OK;
}

/* Decide c's next step (mu held). Returns SIO_OK with *out set or NULL
 * (end), SIO_ERR_AGAIN with c->ready_at set, another error, or STEP_SEEK
 * with *seek_to: the index c needs from a seek feed. */
static sio_code step(sio_cursor *c, const sio_sample **out, uint64_t *seek_to)
{
    sio_feed *f = c->src, *root = c->root;
    uint64_t W = c->cfg.world, G = c->cfg.global_start;
    uint64_t wb = c->root->cfg.wake_batch;
    *out = NULL;
    if (c->done)
        return SIO_OK;
    for (;;) {
        if (c->pending) {
            if (c->pending_end < f->hi) {
                *out = c->pending;
                c->pending = NULL;
                c->pos++;
                return SIO_OK;
            }
            if (f->ended)
                return ended(c);
            c->ready_at = c->pending_end + (wb - 1) * W;
            return SIO_ERR_AGAIN;
        }
        uint64_t i;
        if (sio_share_index(G, c->cfg.rank, c->cfg.world, c->k, &i) != 0) {
            c->done = 1; /* past every index Y can have */
            return SIO_OK;
        }
        uint64_t t = i;
        /* even-pad: once the family knows N, indices past it are tail */
        if (!c->tail && c->cfg.policy == SIO_PARTITION_EVEN_PAD &&
            root->n_known && i >= root->n_known - 1 &&
            root->n_known - 1 > G) {
            c->tail = 1;
            c->n = root->n_known - 1;
        }
        if (c->tail) {
            if (i >= G + (c->n - G + W - 1) / W * W) {
                c->done = 1;
                return SIO_OK;
            }
            t = sio_share_pad_source(c->n, G, i);
        }
        /* Back to the main window as soon as it holds what c needs. */
        if (f != root && t >= root->lo && t < root->hi && !root->failed) {
            list_remove(f, c);
            list_add(root, c);
            c->rpin = UINT64_MAX;
            f = root;
        }
        if (t < f->lo) {
            *seek_to = t;
            return STEP_SEEK;
        }
        if (t < f->hi) {
            if (c->cfg.policy == SIO_PARTITION_EVEN_DROP) {
                const sio_sample *s;
                take(c, t, &s);
                c->pos--; /* counted when the round completes */
                c->pending = s;
                c->pending_end = G + c->k * W - 1;
                continue;
            }
            take(c, t, out);
            return SIO_OK;
        }
        if (!f->ended) {
            c->ready_at = t + (wb - 1) * W;
            if (c->tail)
                c->ready_at = t;
            return SIO_ERR_AGAIN;
        }
        if (f->failed || c->cfg.policy != SIO_PARTITION_EVEN_PAD || c->tail)
            return ended(c);
        /* even-pad: Y has N samples; the tail repeats from G on. */
        if (f->n_end <= G)
            return ended(c);
        c->tail = 1;
        c->n = f->n_end;
    }
}

static sio_code cursor_next(sio_cursor *c, const sio_sample **out,
                            int wait)
{
    sio_feed *root = c->root;
    pthread_mutex_t *mu = &root->fam->mu;
    sio_code rc;
    uint64_t seek_to = 0;
    *out = NULL;
    pthread_mutex_lock(mu);
    for (;;) {
        rc = step(c, out, &seek_to);
        if (rc == STEP_SEEK) {
            rc = reseat(c, seek_to);
            if (rc)
                break;
            continue;
        }
        sio_feed *f = c->src;
        if (rc == SIO_ERR_AGAIN && c->heap_at < 0) {
            /* Wait in the heap: the producer wakes exactly the cursors
             * whose next sample (or round) it has just produced. (A
             * cursor that moved between feeds may find no room yet.) */
            if (f->nheap >= f->heapcap && heap_reserve(f) != 0) {
                rc = SIO_ERR_NOMEM;
                snprintf(c->err, sizeof c->err, "out of memory");
                break;
            }
            f->heap[f->nheap] = c;
            c->heap_at = (int)f->nheap++;
            heap_up(f, (size_t)c->heap_at);
            /* a producer that waits for room may now have waiters */
            if (f->producer_waiting)
                pthread_cond_signal(&f->room);
        }
        if (rc != SIO_ERR_AGAIN || !wait)
            break;
        c->blocking_wait = 1;
        while (c->heap_at >= 0)
            pthread_cond_wait(&c->cv, mu);
        c->blocking_wait = 0;
    }
    sio_feed *dead =
        root->graveyard ? reap_children(root, sio_now_ms(), 0) : NULL;
    pthread_mutex_unlock(mu);
    stop_list(dead);
    if (rc != SIO_OK && rc != SIO_ERR_AGAIN && !c->err[0])
        snprintf(c->err, sizeof c->err, "%s", sio_strerror(rc));
    return rc;
}

sio_code sio_cursor_next(sio_cursor *c, const sio_sample **out)
{
    return cursor_next(c, out, 0);
}

sio_code sio_cursor_next_wait(sio_cursor *c, const sio_sample **out)
{
    return cursor_next(c, out, 1);
}

const char *sio_cursor_errmsg(const sio_cursor *c)
{
    return c->err;
}

uint64_t sio_cursor_position(const sio_cursor *c)
{
    return c->pos;
}

void sio_cursor_close(sio_cursor *c)
{
    sio_feed *f, *dead;
    if (!c)
        return;
    f = c->root;
    pthread_mutex_lock(&f->fam->mu);
    list_remove(c->src, c);
    if (!c->done) {
        uint64_t need = c->src == f ? cursor_need(c) : c->rpin;
        if (c->pending)
            need = c->pending->global_index;
        if (need != UINT64_MAX && need >= f->lo) {
            if (f->ndet == FEED_DETACHED_MAX) {
                /* full: the place expiring first goes */
                size_t o = 0;
                for (size_t d = 1; d < f->ndet; d++)
                    if (f->det[d].deadline_ms < f->det[o].deadline_ms)
                        o = d;
                f->det[o] = f->det[--f->ndet];
            }
            detached *d = &f->det[f->ndet++];
            d->rank = c->cfg.rank;
            d->world = c->cfg.world;
            d->gstart = c->cfg.global_start;
            d->need = need;
            d->position = c->pos;
            d->deadline_ms = sio_now_ms() + f->cfg.rejoin_grace_ms;
        }
    }
    sio_sample_unref(c->pending);
    if (f->producer_waiting)
        pthread_cond_signal(&f->room);
    dead = reap_children(f, sio_now_ms(), 0);
    pthread_mutex_unlock(&f->fam->mu);
    stop_list(dead);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static void fill_consumer(sio_feed_consumer *x, const sio_cursor *c,
                          const sio_feed *root, uint64_t now)
{
    memset(x, 0, sizeof *x);
    x->rank = c->cfg.rank;
    x->world = c->cfg.world;
    x->position = c->pos;
    x->next_index = cursor_index(c);
    x->lag = root->hi > x->next_index ? root->hi - x->next_index : 0;
    x->attached = 1;
    x->replay = c->src != root;
    x->idle_ms = now - c->last_ms;
}

void sio_feed_get_stats(sio_feed *f, sio_feed_stats *st,
                        sio_feed_consumer *cons, size_t max, size_t *ncons)
{
    size_t n = 0;
    uint64_t now = sio_now_ms();
    sio_feed *dead;
    pthread_mutex_lock(&f->fam->mu);
    memset(st, 0, sizeof *st);
    st->produced = f->hi;
    st->window_lo = f->lo;
    st->window_samples = f->hi - f->lo;
    st->window_bytes = f->bytes;
    st->ended = f->ended;
    st->failed = f->failed;
    st->length = f->root->n_known ? f->root->n_known - 1 : UINT64_MAX;
    st->epoch = f->est;
    st->seek = f->seek;
    st->seek.active = f->nchildren;
    for (sio_feed *ch = f->children; ch; ch = ch->next_child) {
        st->seek.window_bytes += ch->bytes;
        st->seek.replaying += ch->replay;
    }
    if (!cons || max == 0) {
        /* Counts only: no walk over ranks or cursors. */
        n = f->ncursors;
        for (sio_feed *ch = f->children; ch; ch = ch->next_child)
            n += ch->ncursors;
        for (size_t d = 0; d < f->ndet; d++)
            n += f->det[d].deadline_ms > now;
        for (size_t g = 0; g < FEED_GROUPS_MAX; g++)
            if (f->groups[g].seen && f->groups[g].deadline_ms > now)
                n += f->groups[g].world - f->groups[g].nseen;
        goto done;
    }
    for (sio_cursor *c = f->cursors; c; c = c->next, n++)
        if (n < max)
            fill_consumer(&cons[n], c, f, now);
    for (sio_feed *ch = f->children; ch; ch = ch->next_child)
        for (sio_cursor *c = ch->cursors; c; c = c->next, n++)
            if (n < max)
                fill_consumer(&cons[n], c, f, now);
    for (size_t d = 0; d < f->ndet; d++) {
        if (f->det[d].deadline_ms <= now)
            continue;
        if (n < max) {
            sio_feed_consumer *x = &cons[n];
            memset(x, 0, sizeof *x);
            x->rank = f->det[d].rank;
            x->world = f->det[d].world;
            x->position = f->det[d].position;
            x->next_index = f->det[d].need;
            x->lag = f->hi > x->next_index ? f->hi - x->next_index : 0;
            x->idle_ms = now + f->cfg.rejoin_grace_ms - f->det[d].deadline_ms;
        }
        n++;
    }
    /* Expected ranks that never attached, while their group waits. */
    for (size_t g = 0; g < FEED_GROUPS_MAX; g++) {
        group *gr = &f->groups[g];
        if (!gr->seen || gr->deadline_ms <= now)
            continue;
        if (n >= max) { /* only counted from here */
            n += gr->world - gr->nseen;
            continue;
        }
        for (uint32_t r = 0; r < gr->world; r++) {
            if (gr->seen[r / 8] & (1u << (r % 8)))
                continue;
            if (n < max) {
                sio_feed_consumer *x = &cons[n];
                memset(x, 0, sizeof *x);
                x->rank = r;
                x->world = gr->world;
                x->position = gr->start;
                if (sio_share_index(gr->gstart, r, gr->world, gr->start,
                                    &x->next_index) != 0)
                    x->next_index = UINT64_MAX;
                x->idle_ms = now + f->cfg.join_timeout_ms - gr->deadline_ms;
                x->expected = 1;
            }
            n++;
        }
    }
done:
    dead = reap_children(f, now, 0);
    pthread_mutex_unlock(&f->fam->mu);
    stop_list(dead);
    if (ncons)
        *ncons = n;
}
