/*
 * feed.c — one epoch, read once, dealt to many consumers by reference.
 *
 * A producer thread runs a sio_epoch and appends Y to a ring (the window)
 * holding indices [lo, hi). Cursors index the ring directly: consumer r of
 * W at share position k reads Y[G + r + k*W]. The window's low end is the
 * smallest index still needed by an attached cursor, a detached one within
 * its grace period, or an expected rank (reservation); the producer waits
 * while the window is full, so the slowest consumer paces the epoch and
 * memory is bounded by window_samples / window_bytes.
 *
 * Readiness: none / even-pad need Y[i] to exist; even-drop also needs the
 * whole round, i.e. Y[G + (k+1)W - 1], or the end of the epoch (then the
 * incomplete round is dropped). Waiting cursors sit in a min-heap keyed by
 * the index that makes a batch of their samples ready (wake_batch); an
 * append pops exactly those, and a full window or the end pops them all.
 *
 * Fallback: a cursor whose next sample has left the window (late joiner,
 * resume far behind, an even-pad tail sample from the start) reads from a
 * private feed of the same epoch — same samples, same order, more reading.
 *
 * Locking: one mutex per feed (f->mu) guards the window, the cursor list,
 * the heap, reservations and detached records. notify callbacks run with it
 * held. A private feed is a separate feed with its own lock; the outer
 * feed's lock is never held while calling into a private one.
 * Ownership: the window owns one reference per held sample; a cursor hands
 * out new references.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

#define FEED_WINDOW_SAMPLES_DEFAULT 65536u
#define FEED_WINDOW_BYTES_DEFAULT (256ull << 20)
#define FEED_WINDOW_SAMPLES_MAX (16u << 20)
#define FEED_JOIN_TIMEOUT_DEFAULT 30000u
#define FEED_REJOIN_GRACE_DEFAULT 60000u
/* Window of a private replay feed (one cursor). */
#define FEED_PRIVATE_WINDOW 1024u
/* Distinct (world, global_start) groups expected at once. */
#define FEED_GROUPS_MAX 16
/* Detached cursors remembered at once. */
#define FEED_DETACHED_MAX 4096
/* How often a producer blocked by reservations re-checks their expiry. */
#define FEED_TICK_MS 500
/* Waking a consumer costs a context switch (and in the server a resumed
 * connection): wake it for a batch of samples, not for every one. */
#define FEED_WAKE_BATCH_DEFAULT 16u

typedef struct group {
    uint32_t world;
    uint64_t gstart, start;  /* start position assumed for absent ranks */
    uint64_t deadline_ms;    /* reservations end */
    unsigned char *seen;     /* world bits: rank attached at least once */
} group;

typedef struct detached {
    uint32_t rank, world;
    uint64_t gstart, need;
    uint64_t deadline_ms;
    uint64_t position;
} detached;

struct sio_cursor {
    sio_feed *f;
    sio_cursor_config cfg;
    uint64_t k;             /* next own element of the share */
    uint64_t pos;           /* position handed out so far */
    int done;
    int heap_at;            /* index in the waiting heap, -1 if not there */
    uint64_t ready_at;      /* waiting: ready once hi > ready_at */
    int blocking_wait;      /* in sio_cursor_next_wait, on cv */
    pthread_cond_t cv;
    uint64_t last_ms;
    struct sio_cursor *next, *prev; /* f->cursors list */
    sio_feed *priv;         /* private replay, or NULL */
    sio_cursor *pc;
    char err[800];
};

struct sio_feed {
    sio_io *io;
    const sio_shardlist *list;
    sio_epoch_config ecfg;
    sio_feed_config cfg;
    sio_epoch *ep;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t room;    /* producer: the window slid */
    const sio_sample **win;
    uint64_t lo, hi, bytes;
    int ended, failed, stop;
    int producer_waiting;   /* in a wait on `room` */
    sio_code fail_rc;
    char errmsg[800];
    uint32_t max_world;
    sio_cursor *cursors;
    size_t ncursors;
    sio_cursor **heap;
    size_t nheap, heapcap;
    group groups[FEED_GROUPS_MAX];
    size_t ngroups;
    detached *det;
    size_t ndet;
    sio_epoch_stats est;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The waiting heap (min by ready_at) -------------------------------- */

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

/* Wake every waiting cursor that can proceed; all of them when the epoch
 * ended or `all` (the window is full: nothing more comes until cursors
 * take what is there). */
static void wake(sio_feed *f, int all)
{
    while (f->nheap > 0 &&
           (all || f->ended || f->heap[0]->ready_at < f->hi)) {
        sio_cursor *c = f->heap[0];
        heap_remove(f, c);
        if (c->blocking_wait)
            pthread_cond_signal(&c->cv);
        else if (c->cfg.notify)
            c->cfg.notify(c->cfg.userdata);
    }
}

/* The window ---------------------------------------------------------- */

/* Smallest index of Y still needed by anyone; UINT64_MAX when nobody
 * has said anything yet (then the window does not slide). */
static uint64_t lowest_need(sio_feed *f, uint64_t now)
{
    uint64_t need = UINT64_MAX;
    for (sio_cursor *c = f->cursors; c; c = c->next) {
        if (c->done || c->priv)
            continue;
        uint64_t i = c->cfg.global_start + c->cfg.rank + c->k * c->cfg.world;
        if (i < need)
            need = i;
    }
    for (size_t d = 0; d < f->ndet;) {
        if (f->det[d].deadline_ms <= now) {
            f->det[d] = f->det[--f->ndet];
            continue;
        }
        if (f->det[d].need < need)
            need = f->det[d].need;
        d++;
    }
    for (size_t g = 0; g < f->ngroups; g++) {
        group *gr = &f->groups[g];
        if (gr->deadline_ms <= now)
            continue;
        for (uint32_t r = 0; r < gr->world; r++) {
            if (gr->seen[r / 8] & (1u << (r % 8)))
                continue;
            uint64_t i = gr->gstart + r + gr->start * gr->world;
            if (i < need)
                need = i;
            break; /* the lowest absent rank gives the lowest index */
        }
    }
    return need;
}

/* Drop samples nobody needs any more (mu held). */
static void slide(sio_feed *f)
{
    uint64_t need = lowest_need(f, now_ms());
    if (need == UINT64_MAX)
        return;
    if (need > f->hi)
        need = f->hi;
    if (need <= f->lo)
        return;
    while (f->lo < need) {
        const sio_sample *s = f->win[f->lo % f->cfg.window_samples];
        f->bytes -= s->bytes;
        sio_sample_unref(s);
        f->lo++;
    }
    if (f->producer_waiting)
        pthread_cond_signal(&f->room);
}

static int window_has_room(const sio_feed *f)
{
    uint64_t held = f->hi - f->lo;
    if (held >= f->cfg.window_samples)
        return 0;
    /* The byte cap gives way to a full round of the widest world, or an
     * even-drop consumer could wait for a round the window cannot hold. */
    return f->bytes < f->cfg.window_bytes || held < f->max_world;
}

static int reservations_pending(const sio_feed *f, uint64_t now)
{
    if (f->ndet)
        return 1;
    for (size_t g = 0; g < f->ngroups; g++)
        if (f->groups[g].deadline_ms > now)
            return 1;
    return 0;
}

static void *producer_main(void *arg)
{
    sio_feed *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        if (!window_has_room(f)) {
            slide(f);
            if (window_has_room(f))
                continue;
            wake(f, 1);
            if (reservations_pending(f, now_ms())) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += FEED_TICK_MS * 1000000L;
                ts.tv_sec += ts.tv_nsec / 1000000000L;
                ts.tv_nsec %= 1000000000L;
                f->producer_waiting = 1;
                pthread_cond_timedwait(&f->room, &f->mu, &ts);
                f->producer_waiting = 0;
            } else {
                f->producer_waiting = 1;
                pthread_cond_wait(&f->room, &f->mu);
                f->producer_waiting = 0;
            }
            continue;
        }
        pthread_mutex_unlock(&f->mu);
        const sio_sample *s = NULL;
        sio_code rc = sio_epoch_next(f->ep, &s);
        sio_epoch_stats est;
        sio_epoch_get_stats(f->ep, &est);
        pthread_mutex_lock(&f->mu);
        f->est = est;
        if (rc != SIO_OK) {
            f->failed = 1;
            f->fail_rc = rc;
            snprintf(f->errmsg, sizeof f->errmsg, "%s",
                     sio_epoch_errmsg(f->ep));
            f->ended = 1;
        } else if (!s) {
            f->ended = 1;
        } else {
            f->win[f->hi % f->cfg.window_samples] = s;
            f->hi++;
            f->bytes += s->bytes;
        }
        wake(f, 0);
        if (f->ended)
            break;
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

sio_code sio_feed_open(sio_io *io, const sio_shardlist *list,
                       const sio_epoch_config *ecfg,
                       const sio_feed_config *fcfg, sio_feed **out,
                       sio_error *err)
{
    sio_code rc;
    sio_feed *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->room, NULL);
    f->io = io;
    f->list = list;
    f->ecfg = *ecfg;
    if (fcfg)
        f->cfg = *fcfg;
    if (!f->cfg.window_samples)
        f->cfg.window_samples = FEED_WINDOW_SAMPLES_DEFAULT;
    if (!f->cfg.window_bytes)
        f->cfg.window_bytes = FEED_WINDOW_BYTES_DEFAULT;
    if (!f->cfg.join_timeout_ms)
        f->cfg.join_timeout_ms = FEED_JOIN_TIMEOUT_DEFAULT;
    if (!f->cfg.rejoin_grace_ms)
        f->cfg.rejoin_grace_ms = FEED_REJOIN_GRACE_DEFAULT;
    if (!f->cfg.wake_batch)
        f->cfg.wake_batch = FEED_WAKE_BATCH_DEFAULT;
    if (f->cfg.window_samples > FEED_WINDOW_SAMPLES_MAX) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "window_samples above %u",
                        FEED_WINDOW_SAMPLES_MAX);
        goto out;
    }
    f->win = malloc(f->cfg.window_samples * sizeof *f->win);
    f->det = malloc(FEED_DETACHED_MAX * sizeof *f->det);
    if (!f->win || !f->det) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    rc = sio_epoch_open(io, list, ecfg, &f->ep, err);
    if (rc)
        goto out;
    if (pthread_create(&f->thread, NULL, producer_main, f) != 0) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "cannot start a thread");
        goto out;
    }
    f->thread_started = 1;
    *out = f;
    f = NULL;
out:
    sio_feed_close(f);
    return rc;
}

void sio_feed_close(sio_feed *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_broadcast(&f->room);
    pthread_mutex_unlock(&f->mu);
    /* The producer may be inside sio_epoch_next (reading); it returns when
     * that read does. */
    if (f->thread_started)
        pthread_join(f->thread, NULL);
    sio_epoch_close(f->ep);
    for (uint64_t i = f->lo; f->win && i < f->hi; i++)
        sio_sample_unref(f->win[i % f->cfg.window_samples]);
    for (size_t g = 0; g < f->ngroups; g++)
        free(f->groups[g].seen);
    free(f->heap);
    free(f->det);
    free(f->win);
    pthread_cond_destroy(&f->room);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* Note an attaching rank in its group; create the group (mu held). */
static void group_note(sio_feed *f, const sio_cursor_config *cfg,
                       uint64_t now)
{
    group *gr = NULL;
    for (size_t g = 0; g < f->ngroups; g++)
        if (f->groups[g].world == cfg->world &&
            f->groups[g].gstart == cfg->global_start)
            gr = &f->groups[g];
    if (!gr && f->ngroups < FEED_GROUPS_MAX) {
        unsigned char *seen = calloc((cfg->world + 7) / 8, 1);
        if (seen) {
            gr = &f->groups[f->ngroups++];
            gr->world = cfg->world;
            gr->gstart = cfg->global_start;
            gr->start = cfg->start;
            gr->deadline_ms = now + f->cfg.join_timeout_ms;
            gr->seen = seen;
        }
    }
    if (gr)
        gr->seen[cfg->rank / 8] |= (unsigned char)(1u << (cfg->rank % 8));
}

static sio_code open_private(sio_cursor *c)
{
    sio_feed *f = c->f;
    sio_feed_config pf = {.window_samples = FEED_PRIVATE_WINDOW,
                          .window_bytes = f->cfg.window_bytes / 4 + 1,
                          .join_timeout_ms = 1,
                          .rejoin_grace_ms = 1};
    sio_cursor_config cc = c->cfg;
    sio_error e;
    sio_code rc;
    sio_feed *priv = NULL;
    sio_cursor *pc = NULL;
    if (pf.window_samples < c->cfg.world)
        pf.window_samples = c->cfg.world;
    pthread_mutex_lock(&f->mu);
    cc.start = c->k;
    pthread_mutex_unlock(&f->mu);
    rc = sio_feed_open(f->io, f->list, &f->ecfg, &pf, &priv, &e);
    if (rc == SIO_OK)
        rc = sio_feed_attach(priv, &cc, &pc, &e);
    if (rc) {
        snprintf(c->err, sizeof c->err, "replay: %s", e.msg);
        sio_cursor_close(pc);
        sio_feed_close(priv);
        return rc;
    }
    pthread_mutex_lock(&f->mu);
    c->priv = priv;
    c->pc = pc;
    slide(f); /* it no longer holds the shared window */
    pthread_mutex_unlock(&f->mu);
    return SIO_OK;
}

sio_code sio_feed_attach(sio_feed *f, const sio_cursor_config *cfg,
                         sio_cursor **out, sio_error *err)
{
    sio_cursor *c;
    uint64_t now = now_ms(), need;
    *out = NULL;
    if (cfg->world < 1 || cfg->world > 65536u || cfg->rank >= cfg->world)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "rank %u / world %u: need 0 <= rank < world <= "
                          "65536", cfg->rank, cfg->world);
    if (cfg->world > f->cfg.window_samples)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "world %u above the window of %u samples",
                          cfg->world, f->cfg.window_samples);
    if (cfg->start > (UINT64_MAX - cfg->global_start) / cfg->world)
        return sio_seterr(err, SIO_ERR_INVALID, "start out of range");
    c = calloc(1, sizeof *c);
    if (!c)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    c->f = f;
    c->cfg = *cfg;
    c->k = cfg->start;
    c->pos = cfg->start;
    c->heap_at = -1;
    c->last_ms = now;
    pthread_cond_init(&c->cv, NULL);
    need = cfg->global_start + cfg->rank + c->k * cfg->world;
    pthread_mutex_lock(&f->mu);
    /* The heap holds at most every cursor: it grows with the list. */
    if (f->ncursors + 1 > f->heapcap) {
        size_t ncap = f->heapcap ? f->heapcap * 2 : 64;
        sio_cursor **nh = realloc(f->heap, ncap * sizeof *nh);
        if (!nh) {
            pthread_mutex_unlock(&f->mu);
            pthread_cond_destroy(&c->cv);
            free(c);
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        }
        f->heap = nh;
        f->heapcap = ncap;
    }
    /* A reattaching consumer replaces its detached record. */
    for (size_t d = 0; d < f->ndet; d++)
        if (f->det[d].rank == cfg->rank && f->det[d].world == cfg->world &&
            f->det[d].gstart == cfg->global_start) {
            f->det[d] = f->det[--f->ndet];
            break;
        }
    group_note(f, cfg, now);
    if (cfg->world > f->max_world)
        f->max_world = cfg->world;
    int behind = need < f->lo;
    c->next = f->cursors;
    if (f->cursors)
        f->cursors->prev = c;
    f->cursors = c;
    f->ncursors++;
    /* The set of needs changed: samples below every need can go now (a
     * producer waiting on a window full of samples nobody wants — e.g. the
     * first cursor resumes far ahead — would otherwise wait for ever). */
    if (!behind)
        slide(f);
    pthread_mutex_unlock(&f->mu);
    if (behind) {
        /* Its samples have left the window: read them from a replay. */
        sio_code rc = open_private(c);
        if (rc) {
            sio_seterr(err, rc, "%s", c->err);
            sio_cursor_close(c);
            return rc;
        }
    }
    *out = c;
    return SIO_OK;
}

/* Take Y[i] from the window as the next sample of c (mu held). */
static void take(sio_cursor *c, uint64_t i, const sio_sample **out)
{
    sio_feed *f = c->f;
    const sio_sample *s = f->win[i % f->cfg.window_samples];
    sio_sample_ref(s);
    *out = s;
    c->k++;
    c->pos++;
    c->last_ms = now_ms();
    slide(f);
}

/* Decide c's next step (mu held). Returns SIO_OK with *out set or NULL
 * (end), SIO_ERR_AGAIN with c->ready_at set, another error, or
 * SIO_ERR_UNSUPPORTED meaning "switch to a private replay". */
static sio_code step(sio_cursor *c, const sio_sample **out)
{
    sio_feed *f = c->f;
    uint64_t W = c->cfg.world, G = c->cfg.global_start;
    uint64_t i = G + c->cfg.rank + c->k * W;
    *out = NULL;
    if (c->done)
        return SIO_OK;
    if (i < f->lo)
        return SIO_ERR_UNSUPPORTED;
    switch (c->cfg.policy) {
    case SIO_PARTITION_EVEN_DROP: {
        uint64_t round_end = G + (c->k + 1) * W - 1;
        if (round_end < f->hi) {
            take(c, i, out);
            return SIO_OK;
        }
        if (f->ended)
            break;
        c->ready_at = round_end + (f->cfg.wake_batch - 1) * W;
        return SIO_ERR_AGAIN;
    }
    case SIO_PARTITION_NONE:
        if (i < f->hi) {
            take(c, i, out);
            return SIO_OK;
        }
        if (f->ended)
            break;
        c->ready_at = i + (f->cfg.wake_batch - 1) * W;
        return SIO_ERR_AGAIN;
    case SIO_PARTITION_EVEN_PAD:
        if (i < f->hi) {
            take(c, i, out);
            return SIO_OK;
        }
        if (!f->ended) {
            c->ready_at = i + (f->cfg.wake_batch - 1) * W;
            return SIO_ERR_AGAIN;
        }
        if (f->failed)
            break;
        {
            uint64_t m = f->hi > G ? f->hi - G : 0;
            uint64_t padded_end = m ? G + (m + W - 1) / W * W : G;
            if (i < padded_end) {
                uint64_t j = G + (i - G) % m;
                if (j < f->lo)
                    return SIO_ERR_UNSUPPORTED;
                take(c, j, out);
                return SIO_OK;
            }
        }
        break;
    }
    /* The epoch ended (or failed) before the cursor's next sample. */
    if (f->failed) {
        snprintf(c->err, sizeof c->err, "%s", f->errmsg);
        return f->fail_rc;
    }
    c->done = 1;
    slide(f);
    return SIO_OK;
}

static sio_code cursor_next(sio_cursor *c, const sio_sample **out,
                            int wait)
{
    sio_feed *f = c->f;
    sio_code rc;
    *out = NULL;
    if (c->pc) {
        rc = wait ? sio_cursor_next_wait(c->pc, out)
                  : sio_cursor_next(c->pc, out);
        if (rc == SIO_OK) {
            pthread_mutex_lock(&f->mu);
            if (*out) {
                c->pos++;
                c->k++;
                c->last_ms = now_ms();
            } else {
                c->done = 1;
            }
            pthread_mutex_unlock(&f->mu);
        } else if (rc != SIO_ERR_AGAIN) {
            snprintf(c->err, sizeof c->err, "%s", sio_cursor_errmsg(c->pc));
        }
        return rc;
    }
    pthread_mutex_lock(&f->mu);
    for (;;) {
        rc = step(c, out);
        if (rc == SIO_ERR_AGAIN && c->heap_at < 0) {
            /* Wait in the heap: the producer wakes exactly the cursors
             * whose next sample (or round) it has just produced. */
            f->heap[f->nheap] = c;
            c->heap_at = (int)f->nheap++;
            heap_up(f, (size_t)c->heap_at);
        }
        if (rc != SIO_ERR_AGAIN || !wait)
            break;
        c->blocking_wait = 1;
        while (c->heap_at >= 0)
            pthread_cond_wait(&c->cv, &f->mu);
        c->blocking_wait = 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (rc == SIO_ERR_UNSUPPORTED) {
        rc = open_private(c);
        if (rc)
            return rc;
        return cursor_next(c, out, wait);
    }
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
    if (!c)
        return;
    sio_feed *f = c->f;
    sio_cursor_close(c->pc);
    sio_feed_close(c->priv);
    pthread_mutex_lock(&f->mu);
    heap_remove(f, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        f->cursors = c->next;
    if (c->next)
        c->next->prev = c->prev;
    f->ncursors--;
    if (!c->done && !c->priv && f->ndet < FEED_DETACHED_MAX) {
        detached *d = &f->det[f->ndet++];
        d->rank = c->cfg.rank;
        d->world = c->cfg.world;
        d->gstart = c->cfg.global_start;
        d->need = c->cfg.global_start + c->cfg.rank + c->k * c->cfg.world;
        d->position = c->pos;
        d->deadline_ms = now_ms() + f->cfg.rejoin_grace_ms;
    }
    slide(f);
    pthread_mutex_unlock(&f->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

void sio_feed_get_stats(sio_feed *f, sio_feed_stats *st,
                        sio_feed_consumer *cons, size_t max, size_t *ncons)
{
    size_t n = 0;
    uint64_t now = now_ms();
    pthread_mutex_lock(&f->mu);
    memset(st, 0, sizeof *st);
    st->produced = f->hi;
    st->window_lo = f->lo;
    st->window_samples = f->hi - f->lo;
    st->window_bytes = f->bytes;
    st->ended = f->ended;
    st->failed = f->failed;
    st->epoch = f->est;
    for (sio_cursor *c = f->cursors; c; c = c->next, n++) {
        if (n >= max)
            continue;
        sio_feed_consumer *x = &cons[n];
        x->rank = c->cfg.rank;
        x->world = c->cfg.world;
        x->position = c->pos;
        x->next_index = c->cfg.global_start + c->cfg.rank +
                        c->k * c->cfg.world;
        x->lag = f->hi > x->next_index ? f->hi - x->next_index : 0;
        x->attached = 1;
        x->expected = 0;
        x->replay = c->priv != NULL;
        x->idle_ms = now - c->last_ms;
    }
    for (size_t d = 0; d < f->ndet; d++, n++) {
        if (n >= max || f->det[d].deadline_ms <= now)
            continue;
        sio_feed_consumer *x = &cons[n];
        memset(x, 0, sizeof *x);
        x->rank = f->det[d].rank;
        x->world = f->det[d].world;
        x->position = f->det[d].position;
        x->next_index = f->det[d].need;
        x->lag = f->hi > x->next_index ? f->hi - x->next_index : 0;
        x->idle_ms = now + f->cfg.rejoin_grace_ms - f->det[d].deadline_ms;
    }
    /* Expected ranks that never attached, while their group waits. */
    for (size_t g = 0; g < f->ngroups; g++) {
        group *gr = &f->groups[g];
        if (gr->deadline_ms <= now)
            continue;
        for (uint32_t r = 0; r < gr->world; r++, n++) {
            if (gr->seen[r / 8] & (1u << (r % 8))) {
                n--;
                continue;
            }
            if (n >= max)
                continue;
            sio_feed_consumer *x = &cons[n];
            memset(x, 0, sizeof *x);
            x->rank = r;
            x->world = gr->world;
            x->position = gr->start;
            x->next_index = gr->gstart + r + gr->start * gr->world;
            x->idle_ms = now + f->cfg.join_timeout_ms - gr->deadline_ms;
            x->expected = 1;
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (ncons)
        *ncons = n;
}
