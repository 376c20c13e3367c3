/*
 * plan_int.h — what the plan (plan.c) and its readers (planread.c) share
 * (internal to shardio/plan).
 *
 * Threading: a built plan is immutable.
 */
#ifndef SHARDIO_PLAN_INT_H
#define SHARDIO_PLAN_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "shardio_plan.h"

/* A shard file as the plan found it: a reader that opens the shard later
 * must find the same file (a file rewritten or replaced since is not the
 * one the plan's byte ranges describe). */
typedef struct plan_file {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int known; /* 0: the shard is outside the epoch's part of the list */
} plan_file;

/* Items live in chunks of PLAN_CHUNK items, found through directory
 * blocks of PLAN_DIR chunk pointers under a fixed top table: a chunk never
 * moves once written, so a plan that grows is read while it grows, and
 * SIO_PLAN_ITEMS_MAX items fit. */
#define PLAN_CHUNK_BITS 12u
#define PLAN_DIR_BITS 12u
#define PLAN_CHUNK ((uint64_t)1 << PLAN_CHUNK_BITS)
#define PLAN_DIR ((uint64_t)1 << PLAN_DIR_BITS)
#define PLAN_TOP (SIO_PLAN_ITEMS_MAX / PLAN_CHUNK / PLAN_DIR)

struct plan_grow;

/* The plan's shard descriptors, shared by its readers: a shard file is
 * opened (and its identity checked) once while any reader of the plan
 * holds it, not once per stream, and read with pread() by every reader.
 * A reader holds an entry (users) while it keeps the shard in its own
 * table; an entry nobody holds any more is closed. */
#define PLAN_FDS 512u
typedef struct plan_fd {
    uint32_t shard;
    int fd, sfd;      /* -1: free; sfd: a cache entry's block sums */
    uint32_t users;
    uint64_t used;
    int cached;       /* a shard-cache entry (its bytes are hits) */
    int bad;          /* found changed: closed once its users let go */
} plan_fd;

/* A reader waiting for a growing plan (linked under the plan's mu). */
typedef struct plan_waiter {
    struct plan_waiter *next, *prev;
    int linked;
    void (*fn)(void *ud); /* called once, under the plan's mu */
    void *ud;
} plan_waiter;

/* Staging (stage.c): a remote shard that is neither a local file nor a
 * shard-cache entry is fetched whole, once, into memory (a memfd) by the
 * step that indexes it, and read from there by every reader of the plan.
 * Its bytes are let go once every reader that counts has passed its last
 * item (and no reader holds it); a reader behind that (detached, late, a
 * resume from before) has the shard fetched again for it ("restage").
 * One record per shard of the list; guarded by the plan's mu. */
/* stage_shard.kind: read in place (0), staged in memory (1), staged in
 * memory decompressed (a compressed shard; its index is stream-only: the
 * positions of the decompressed stream). */
enum { STAGE_IN_PLACE = 0, STAGE_MEMORY = 1, STAGE_DECOMPRESS = 2,
       STAGE_ZIP = 3 /* a zip, staged as the tar its samples make */ };
/* Thinning (stage.c): an item of a staged shard decided (its Y index and
 * byte range), and a run of the shard's bytes no reader needs any more
 * (items passed by every reader, merged) with the bytes of it whose
 * pages were given back. */
typedef struct stage_piece {
    uint64_t y, a, b;
    uint64_t len; /* bytes counted in the plan_stage's waiting (b - a,
                     0 for a last group whose end was not known) */
} stage_piece;
typedef struct stage_dead {
    uint64_t a, b, punched;
} stage_dead;

typedef struct stage_shard {
    int fd;            /* the memfd (-1: not staged, or let go) */
    uint8_t kind;      /* STAGE_*: staged in memory, not read in place */
    uint8_t final;     /* every item of it decided: last is its last */
    uint8_t doomed;    /* let go as soon as no reader holds it */
    uint8_t restaged;  /* staged again for readers behind (restage budget) */
    uint8_t queued;    /* a restage is asked for */
    uint8_t failed;    /* the last restage failed (why: the plan's) */
    uint8_t held;      /* a cache entry the plan holds open (hold_pi) */
    uint8_t gone;      /* its memfd was let go (readers passed it) and it
                          was not staged again since, or it was never
                          staged (deferred: left to its readers) */
    uint8_t adopt;     /* left to its readers with no validator known (its
                          index loaded from state_dir or a sidecar): the
                          first fetch of its bytes takes the store's, and
                          every later one is held to it */
    uint8_t taken;     /* (restaged) a reader took it since it came: no
                          reader waits for it (it may make room) */
    uint8_t swept;     /* its last item is behind every counting rank:
                          taken off the done queue (a shard fetched again
                          after that goes as soon as its readers let go) */
    int hold_pi;       /* the plan's shared descriptor held */
    uint32_t pins;     /* readers holding fd */
    uint64_t size;     /* bytes (as first staged) */
    uint64_t vhash;    /* the store's validator as first staged (0: none) */
    uint64_t uhash;    /* its URL and kind (what a spare memfd holds) */
    uint64_t left;     /* items of it not decided yet (once sized) */
    uint64_t decided;  /* items of it decided so far */
    uint64_t last;     /* Y index of its last item decided so far */
    uint8_t sized;     /* its item count is known (left is kept) */
    uint8_t partial;   /* fd holds only the items at Y >= cover (a ranged
                          restage), not the whole shard */
    uint64_t cover;    /* (partial) the lowest Y index whose item is in fd */
    uint64_t cover_to; /* (partial) ... and the highest: a shard drawn
                          again (a repeat, a draw with replacement, an
                          epoch that wraps) has items decided after its
                          ranges were fetched, which are not in fd */
    uint64_t mem;      /* (restaged) bytes fd holds (the shard's size, or
                          the ranges fetched) */
    uint8_t ahead;     /* (restaged) fetched for a reader's item ahead of
                          where it reads (stage_prefetch) and not taken
                          yet: it may make room for a reader that waits */
    uint8_t guess;     /* size is a guess (a compressed shard or zip left
                          to its readers that no read staged since the
                          server started): its first fetch again finds it */
    struct stage_rhold *rhold; /* (a compressed shard or zip larger than
                          the budget, made again a window at a time) its
                          source after the last window, open where that
                          one stopped: the next window forward goes on
                          from there rather than from the object's start */
    /* Thinning: a shard the steps staged whole gives back the pages of
     * the items every reader passed (fallocate PUNCH_HOLE) while the rest
     * of it is still read: the samples still in the order's buffer, and
     * items decided but not read yet. It is then partial (cover: the
     * lowest Y index it holds, cover_to UINT64_MAX). */
    uint8_t nothin;    /* never again: items of it were fetched back in
                          (a reader behind the cut), or its log is full */
    uint8_t punching;  /* holes being punched now (pinned meanwhile) */
    uint8_t fetching;  /* a step's job still writes it (size not known:
                          have bytes so far) */
    uint64_t have;     /* (fetching) bytes written so far */
    uint64_t tvhash;   /* the object's validator when its fetch opened
                          (a shard thinned while fetched: its items are
                          fetched back held to it) */
    uint64_t tsize;    /* (fetching) the object's size the store told (a
                          plain tar's: its ranges fetched back are held
                          to it; 0: not told) */
    uint8_t queued_thin; /* in the plan_stage's thin list */
    _Atomic uint64_t cut; /* (thinned) items at Y below it may be holes:
                             a reader checks it before reading, without
                             the lock (plan_int.h stage_cut) */
    uint64_t thin;     /* bytes punched out of fd */
    uint64_t pend;     /* bytes of items passed, not punched yet */
    uint64_t wait;     /* bytes of its logged items a counting rank has
                          still to read (from lscan on) */
    stage_piece *log;  /* its items decided, in Y order, from lpos on */
    size_t nlog, caplog, lpos;
    size_t pscan;      /* items before it counted into pend */
    size_t lscan;      /* items before it are behind every counting rank
                          (not in wait) */
    stage_dead *dead;  /* passed runs, sorted by offset, disjoint */
    size_t ndead;
} stage_shard;

/* A consumer rank of a world the plan's readers use: where it reads,
 * whether it counts for what is kept. */
typedef struct stage_rank {
    uint64_t t;        /* next Y index it reads */
    uint64_t gone_ms;  /* its last reader closed then (0: one is open) */
    uint32_t open;     /* readers of it open */
    uint8_t joined, detached;
} stage_rank;

/* The worlds whose readers the staging follows: the first reader's, and
 * others that read the epoch at the same time (an elastic restart with
 * fewer ranks, an evaluation reader of world 1 beside the training job). */
#define STAGE_WORLDS 4u
typedef struct stage_world {
    uint32_t world;    /* its ranks */
    stage_rank *rank;
    uint64_t join_deadline_ms; /* its ranks are expected until then */
} stage_world;

/* A reader's place for the window (plan_mark_*): the chunk of Y it
 * reads now, which the window keeps while it can. Linked under the plan's
 * mu; chunk is written by the reader alone. */
#define PLAN_MARK_AT_BITS 2u
typedef struct plan_mark {
    struct plan_mark *next, *prev;
    _Atomic uint64_t chunk; /* UINT64_MAX: none */
    _Atomic uint64_t at;    /* the Y index it reads, rounded down to
                               2^PLAN_MARK_AT_BITS (a staged plan's
                               thinning: stage.c) */
    int linked;
} plan_mark;

typedef struct plan_stage {
    stage_shard *sh;   /* by shard list index */
    size_t total;
    uint64_t budget;   /* bytes the steps stage before they wait */
    uint64_t bytes;    /* staged now (restaged included) */
    uint64_t step_bytes;    /* of those, staged by the steps */
    uint64_t restage_bytes; /* staged again for readers behind, or
                               reserved for that */
    uint64_t peak;     /* most bytes staged at once */
    uint64_t max_shard;/* the largest shard staged */
    uint64_t slots;    /* the interleave's slots (of every mixed source) */
    uint64_t open_shards; /* shards the order may hold open at once: the
                             interleave's slots (of every mixed source)
                             and the shards of the samples in its buffer,
                             min(shards, buffer_samples) */
    uint32_t *done;    /* shards whose last item is decided, in that order
                          (a ring of total entries) */
    size_t done_head, done_n;
    stage_world w[STAGE_WORLDS];
    unsigned nw;       /* worlds in w (0: no reader yet) */
    uint32_t join_ms, rejoin_ms, lag_grace_ms;
    unsigned retries;  /* a staging job's failures that may pass it takes
                          again before the shard fails (on_error=skip:
                          STAGE_RETRIES, as the feed's reads; under
                          on_error=fail none, as the feed) */
    int lag_wait;      /* --lag-policy wait: nobody is detached */
    uint64_t lag_samples; /* a rank this far behind the furthest is
                             detached when the steps wait for room (0:
                             only after lag_grace_ms) */
    uint64_t blocked_ms;  /* the steps wait for room since (0: they do
                             not) */
    char why[300];     /* the last restage failure */
    sio_shard_limits limits; /* the epoch's (a zip's tar is made with
                                them; set by the first job) */
    /* Shards being fetched (stage jobs, each on its own thread): their
     * groups are let in to the order as their bytes arrive. */
    struct stage_job *jobs;
    struct stage_rhold *rdrop; /* held sources let go, closed off the lock
                                  (rholds_reap) */
    struct stage_rhold *rheld, *rheld_tail; /* held on shards, newest
                                  first (stage.c RHOLD_MAX) */
    unsigned nheld;
    unsigned running;  /* jobs not ended yet */
    uint64_t reserved; /* room taken for their bytes still to come */
    _Atomic uint64_t jobgen; /* moves with every job's progress */
    _Atomic int waiting;     /* a step waits for that (cv) */
    pthread_cond_t cv;       /* with the plan's mu */
    /* Thinning: shards with items decided not punched yet (a list of
     * shard indices), and whether the epoch may thin at all (not a mixed
     * epoch: a source's shard drawn again reads its groups again). */
    uint32_t *thinq;
    size_t nthinq, capthinq;
    int thin_on;
    int thin_waiters; /* a reader waits for a punch to end */
    _Atomic int pressed; /* more than the budget is staged now (bytes >
                            budget: thinning punches, and the steps'
                            fetches of plain tars hold STAGE_AHEAD ahead of
                            the order) */

    /* counters */
    uint64_t staged, fetched_bytes, restages, ranged, revived, released,
        detaches, refused, deferred, evicted, slides, thinned, thin_passes,
        continued;
} plan_stage;

struct sio_plan {
    atomic_uint refs;
    /* Items published: final once `complete`. Written (release) by the
     * builder after the items, files and chunks they need; readers load
     * it (acquire) before they look at any of those. */
    _Atomic uint64_t n;
    uint64_t skipped; /* bad samples of the epoch's shards (not in Y),
                         known once complete */
    uint64_t build_ns;
    uint64_t index_base; /* added to a sample's global_index: the
                            dataset position of a one-sample plan's item
                            (sio_plan_sample); 0 for an epoch's plan */
    const sio_sample *single; /* a one-sample plan's sample, read whole
                            into memory (sio_plan_sample_fetch; one
                            reference): its reader hands it out */
    sio_plan_item **top[PLAN_TOP];
    _Atomic size_t item_bytes; /* chunks and directory blocks allocated */
    uint64_t length_hint; /* Y's length when known before the items (0:
                             not known: chunks are whole) */
    plan_file *files; /* by shard list index */
    size_t nfiles;

    /* A plan that grows (sio_plan_start) while its shards are indexed. */
    int growing;
    int stage_seeks;        /* it stages an epoch whose shards were all
                               indexed (sio_plan_stage_far) */
    int stage_defers;       /* ... and every shard it stages in memory may
                               be left to its readers (plan_defer): a
                               resume far in is the plan's */
    _Atomic int complete;   /* n is Y's length */
    _Atomic int failed;     /* Y cannot be planned past n: fail_msg */
    sio_code fatal;         /* set before failed: the epoch itself fails
                               at n with this code (on_error=fail), where
                               its feed would fail it too; 0: the plan
                               only stops there, the feed goes on */
    _Atomic uint64_t want;  /* 1 + the highest index of Y a reader asked */
    _Atomic int parked;     /* the builder waits for readers to come near */
    _Atomic uint64_t g_ahead_low; /* a reader this near n kicks a parked
                                     one */
    pthread_mutex_t mu;     /* waiters, kick, fail_msg */
    plan_waiter *waiters;   /* readers waiting past n */
    void (*kick)(void *ud); /* ask for the next step of a parked plan */
    void *kick_ud;
    char fail_msg[700];
    struct plan_grow *g;    /* the builder's state (one thread at a time) */
    pthread_mutex_t fd_mu;  /* fds, fd_clock */
    plan_fd *fds;           /* PLAN_FDS, allocated at the first use */
    uint64_t fd_clock;
    plan_stage *stage;      /* NULL: nothing staged in memory */
    void (*restage_fn)(void *ud); /* ask for sio_plan_restage */
    void *restage_ud;

    /* The window (a growing plan with keep > 0): chunks of items behind
     * the readers are let go once more than keep items are held, and made
     * again from the order's checkpoints for a reader that comes back to
     * them (sio_plan_restage). Readers copy items under items_lk (read);
     * chunks are let go and put back under it (write). */
    uint64_t keep;          /* items held before chunks are let go (0:
                               every item is kept: not windowed) */
    pthread_rwlock_t items_lk;
    _Atomic uint64_t held;  /* chunks held */
    uint64_t lo;            /* no chunk below is held (items_lk) */
    uint64_t *refill;       /* chunks readers asked for again (mu) */
    size_t nrefill, refill_cap;
    plan_mark *marks;       /* readers' chunks (mu) */
    _Atomic uint64_t released, refilled; /* chunks let go, made again */
};

static inline int plan_windowed(const sio_plan *p)
{
    return p->keep != 0;
}

/* Y[i], for i below the published n, of a plan that is not windowed. */
static inline const sio_plan_item *plan_item(const sio_plan *p, uint64_t i)
{
    return &p->top[i >> (PLAN_CHUNK_BITS + PLAN_DIR_BITS)]
                  [(i >> PLAN_CHUNK_BITS) & (PLAN_DIR - 1)]
                  [i & (PLAN_CHUNK - 1)];
}

/* Y[i] (i below the published n) copied into *out: 1, or 0 when its
 * chunk is let go (a windowed plan: plan_refill_wait). */
int plan_item_copy(sio_plan *p, uint64_t i, sio_plan_item *out);
/* Ask for Y[i]'s chunk again: 0 when it is held (read it), 1 when the
 * reader waits (w is woken once it is made again), -1 when nobody makes
 * it (no restage function): err says why. */
int plan_refill_wait(sio_plan *p, plan_waiter *w, uint64_t i, char *err,
                     size_t errlen);
/* A reader's mark: linked at its start, moved as it reads (no lock: the
 * reader's own), unlinked at its close. */
void plan_mark_link(sio_plan *p, plan_mark *m, uint64_t i);
static inline void plan_mark_move(plan_mark *m, uint64_t i)
{
    uint64_t c = i >> PLAN_CHUNK_BITS;
    uint64_t a = i == UINT64_MAX ? i : i & ~((UINT64_C(1) << PLAN_MARK_AT_BITS) - 1);
    if (atomic_load_explicit(&m->chunk, memory_order_relaxed) != c)
        atomic_store_explicit(&m->chunk, c, memory_order_relaxed);
    /* seq_cst: a thinning pass that stores a shard's cut and then reads
     * the marks sees this one, or the reader sees the cut (stage_cut). */
    if (atomic_load_explicit(&m->at, memory_order_relaxed) != a)
        atomic_store(&m->at, a);
}
void plan_mark_unlink(sio_plan *p, plan_mark *m);
/* Make the chunks readers asked for again (a planner thread: restage). */
void plan_refill_run(sio_plan *p);

/* A reader's cold read handed to the warm threads (warm.c): bytes [off,
 * off + len) of fd (duplicated) read into the page cache, then fn(ud)
 * (under the pool's lock). plan_warm_submit: 0, or -1 when it cannot
 * (read it here); *slot is the reader's job (made at its first use).
 * plan_warm_cancel: the reader lets go of it, waiting for nothing; fn is
 * not called after it returns. */
typedef struct plan_warm {
    struct plan_warm *next;
    int fd;
    _Atomic int state; /* written under the pool's lock */
    int orphan;        /* let go while being read: its thread frees it */
    uint64_t off, len;
    void (*fn)(void *ud);
    void *ud;
} plan_warm;
int plan_warm_submit(plan_warm **slot, int fd, uint64_t off, uint64_t len,
                     void (*fn)(void *ud), void *ud);
void plan_warm_cancel(plan_warm **slot);
/* Is a job of w queued or being read (its notify still to come)? */
static inline int plan_warm_busy(plan_warm *w)
{
    return w && atomic_load(&w->state) != 0;
}

/* A reader waits for the plan to grow past index t: 0 when it may read
 * (t below n, or the plan complete or failed), 1 when it was queued and
 * is woken (its notify) once the plan grew or ended. */
int plan_wait_for(sio_plan *p, plan_waiter *w, uint64_t t);
/* Queue w (once; nothing without a notify) to be woken when the plan
 * grows or ends, or a staged shard comes (mu held). */
void plan_link_waiter(sio_plan *p, plan_waiter *w);
/* A reader that closes leaves the queue. */
void plan_unwait(sio_plan *p, plan_waiter *w);

/* Take shard s's shared descriptor (opened now when no entry holds it):
 * the entry's index, with its fd, sfd and cached; -1 with *rc SIO_OK when
 * every entry is held (the caller opens its own), or -1 with *rc and err
 * when the file cannot be opened or is not the plan's. */
struct sio_cache_user;
int plan_fd_take(sio_plan *p, sio_io *io, struct sio_cache_user *cache,
                 const char *url, uint32_t s, int *fd, int *sfd, int *cached,
                 sio_code *rc, char *err, size_t errlen);
/* Open shard s (url) as the plan found it: SIO_OK with *fd (and a cache
 * entry's block sums in *sfd, else -1), SIO_ERR_CHANGED when the file is
 * gone or not the plan's, another code (SIO_ERR_BUSY: out of
 * descriptors) with err. */
sio_code plan_fd_open(sio_plan *p, sio_io *io, struct sio_cache_user *cache,
                      const char *url, uint32_t s, int *fd, int *sfd,
                      char *err, size_t errlen);
/* Let go of entry i; bad: its file was found changed (it is closed once
 * nobody holds it, and taken by nobody meanwhile). */
void plan_fd_release(sio_plan *p, int i, int bad);

/* Is st the file the plan found for shard s? */
static inline int plan_file_same(const sio_plan *p, uint32_t s,
                                 const struct stat *st)
{
    if (s >= p->nfiles || !p->files[s].known)
        return 0;
    const plan_file *f = &p->files[s];
    return f->dev == st->st_dev && f->ino == st->st_ino &&
           f->size == st->st_size &&
           f->mtime.tv_sec == st->st_mtim.tv_sec &&
           f->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Wake every reader waiting on the plan (mu held). */
void plan_wake_all(sio_plan *p);

/* Staging (stage.c). stage_new: the records for a plan of total shards
 * (kind set by the caller). The rest take the plan's mu themselves. */
plan_stage *stage_new(size_t total);
void stage_free(plan_stage *st);
/* Where a growing plan's shard s comes from: 1 with *io and *url, 0 for
 * a plan that was not grown (no source kept). */
int plan_source(const sio_plan *p, uint32_t s, sio_io **io,
                const char **url);
/* Is shard s staged in memory (read from its memfd, not in place)? */
static inline int stage_kind(const sio_plan *p, uint32_t s)
{
    return p->stage && s < p->stage->total && p->stage->sh[s].kind;
}
/* A memfd to stage into: one let go before, by this plan or an earlier
 * epoch's (its pages written again: none allocated nor freed per shard),
 * else -1 (the job makes one). */
int stage_spare(sio_plan *p);
/* Bytes of the spares kept now (server-wide). */
uint64_t stage_spare_bytes(void);
/* Jobs: shard s is fetched into memory on a thread of its own, and
 * indexed into e as its bytes arrive; *ready (the order's gate for s)
 * says how many of its groups are in memory (UINT64_MAX once the job
 * ended). reserve: room taken for it now (its listed size, or 0). */
#define STAGE_JOBS_MAX 8u
/* A job's failure that may pass (an I/O error, a 5xx after the fetch
 * engine's own retries) resumes the object from where its bytes stopped
 * (under on_error=skip; under on_error=fail the shard fails at once, as
 * on the feed): STAGE_RESUMES times at once, then up to STAGE_RETRIES
 * times in all with a backoff doubling from STAGE_RETRY_BASE_MS to
 * STAGE_RETRY_MAX_MS, as the feed retries a shard's read; then the shard
 * fails (journaled where it stopped). */
#define STAGE_RESUMES 2u
/* While more than the budget is staged, a step's fetch of a shard (a
 * plain tar, a compressed tar decompressed, a zip made a tar) runs at most its ahead bytes past where the order reads the shard (the
 * budget over twice the interleave's slots, within STAGE_AHEAD_MIN and
 * STAGE_AHEAD), and lets in to the order its groups up to half that past
 * there (so the order asks again, stage_taken, before the fetch holds):
 * a shard the order reads holds that much of bytes not taken yet,
 * whatever its size. A fetch held longer than STAGE_HOLD_CLOSE_MS lets
 * its connection go and opens the object again where it stopped; a
 * decompressed or zip source, which can only be made again from the
 * object's start, keeps its connection for STAGE_HOLD_CLOSE_MADE_MS. */
#define STAGE_AHEAD (16u << 20)
#define STAGE_AHEAD_MIN (1u << 20)
#define STAGE_HOLD_CLOSE_MS 2000u
#define STAGE_HOLD_CLOSE_MADE_MS 30000u
#define STAGE_RETRIES 24u
#define STAGE_RETRY_BASE_MS 500u
#define STAGE_RETRY_MAX_MS 30000u
sio_code stage_job_start(sio_plan *p, uint32_t s, sio_index_entry *e,
                         sio_io *io, const char *url,
                         const sio_shard_limits *limits,
                         const sio_logger *log, uint64_t reserve,
                         _Atomic uint64_t *ready, sio_error *err);
/* A job's end, for the step (stage_job_reap). */
typedef struct stage_result {
    uint32_t s;
    sio_index_entry *e;
    sio_code rc;       /* the fetch's failure, else the index pass's */
    sio_error err;
    uint64_t reached;  /* groups the pass read */
    int foreign;       /* its bytes are not what it was staged as (none
                          of its groups went to the order); 2: a zip
                          staged as a compressed tar */
} stage_result;
/* An ended job's result (1), or 0 when none ended. */
int stage_job_reap(sio_plan *p, stage_result *out);
/* Jobs not reaped yet. */
unsigned stage_jobs(sio_plan *p);
/* The Y index, at most low, from which the items up to low hold at least
 * `bytes` (to LEAD_STEP items; 0 when not known: no staging in memory, or
 * further back than the builder's record of its items' bytes). Any
 * thread. */
uint64_t plan_bytes_behind(sio_plan *p, uint64_t low, uint64_t bytes);
/* The order reads shard s at its group `at` (it took that many): a job
 * staging s that waits to be that far behind fetches on. */
void stage_taken(sio_plan *p, uint32_t s, uint64_t at);
/* Wait until a job moved since jobgen was gen0, at most ms. */
void stage_jobs_wait(sio_plan *p, uint64_t gen0, unsigned ms);
/* The step is done with shard s's job: items of it are read (0: none,
 * its bytes go). */
void stage_end(sio_plan *p, uint32_t s, uint64_t items);
/* Can the steps stage a shard of size bytes (UINT64_MAX: unknown) now?
 * slot: the order reads it now (staged beyond the budget when nothing
 * staged waits for readers). Detaches ranks by the lag rules when they
 * hold the room. */
int stage_room(sio_plan *p, uint64_t size, int slot);
/* May the order decide more items now? Not while more than the budget is
 * staged and the items decided that a counting rank has still to read
 * (and shards done that wait for readers) hold more than the budget: the
 * readers behind the furthest are waited for, and detached by the lag
 * rules, as stage_room does for a new shard. */
int stage_readers_room(sio_plan *p);
/* Item y of shard s, bytes [a, b) of it (b UINT64_MAX: to its end), was
 * decided (the builder, no lock held). */
void stage_item(sio_plan *p, uint32_t s, uint64_t y, uint64_t a, uint64_t b);
/* Items of shard s at Y below this may have been given back (thinning):
 * a reader that holds s's memfd checks it before it reads item t there,
 * with no lock; seq_cst, paired with the reader's mark (plan_mark_move). */
static inline uint64_t stage_cut(const sio_plan *p, uint32_t s)
{
    return atomic_load(&p->stage->sh[s].cut);
}
/* A reader at Y index t takes shard s's memfd: SIO_OK with *fd (pinned:
 * it holds every item of s at Y >= t), SIO_ERR_AGAIN when it is fetched
 * again for this reader (w is woken then), SIO_ERR_BUSY when the room for
 * that is taken, another code with err. */
sio_code stage_take(sio_plan *p, uint32_t s, uint64_t t, plan_waiter *w,
                    int *fd, char *err, size_t errlen);
/* The Y indices [*lo, *hi] whose items shard s's memfd holds now (a
 * reader that took it: the whole shard, or what a ranged fetch put in). */
void stage_cover(sio_plan *p, uint32_t s, uint64_t *lo, uint64_t *hi);
/* Shard s is read in place from a cache entry, held open as the plan's
 * shared descriptor pi (plan_fd_take) until its readers passed it, so that
 * the cache evicting it meanwhile does not take its bytes from them. */
void stage_hold(sio_plan *p, uint32_t s, int pi, uint64_t items);
/* stage_take for a shard the plan read in place (a shard-cache entry)
 * whose entry went meanwhile: fetched into memory for the readers. */
sio_code stage_take_instead(sio_plan *p, uint32_t s, uint64_t t,
                            plan_waiter *w, int *fd, char *err,
                            size_t errlen);
void stage_unpin(sio_plan *p, uint32_t s);
/* Reader of rank/world at Y index t (open 1: it opened, -1: it closed,
 * 0: it moved). */
void stage_reader(sio_plan *p, uint32_t rank, uint32_t world, uint64_t t,
                  int open);
/* Is shard s done with for a reader at Y index t (its last item before)? */
int stage_passed(sio_plan *p, uint32_t s, uint64_t t);
/* Where the readers the staging follows read next, for a step that asks
 * whether a shard is needed now: the lowest next Y index of a counting
 * rank that joined; a rank still expected counts as the lowest joined
 * rank of its world (the ranks of a world come back together). 0 while
 * no reader came, or a world that is expected has no rank joined. */
uint64_t stage_low_readers(sio_plan *p);
/* The most ranks of a world the staging follows (1 with none). */
uint32_t stage_widest_world(sio_plan *p);
/* A reader's item t of shard s ahead of where it reads: when s was let
 * go (or left to its readers) and is a plain tar, its fetch for t is
 * started now (stage_take without a waiter), so that the fetches of the
 * items a reader comes to next run at once. 0 when no more should be
 * started now (the room is taken). */
int stage_prefetch(sio_plan *p, uint32_t s, uint64_t t);
/* Shard s (size bytes, a guess unless exact; the store's validator
 * vhash; 0: none known, the first fetch takes the store's) is not fetched
 * by the step that opens it: every reader is far past where the order
 * reads it, so its items are fetched by the readers that reach them
 * (stage_take's restage: their byte ranges, or the shard). 1, or 0 when
 * it is staged or pinned already (the step stages it). */
int stage_defer(sio_plan *p, uint32_t s, const char *url, uint64_t size,
                uint64_t vhash, int exact);

#endif /* SHARDIO_PLAN_INT_H */
