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
#define PLAN_CHUNK_BITS 14u
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

struct sio_plan {
    atomic_uint refs;
    /* Items published: final once `complete`. Written (release) by the
     * builder after the items, files and chunks they need; readers load
     * it (acquire) before they look at any of those. */
    _Atomic uint64_t n;
    uint64_t skipped; /* bad samples of the epoch's shards (not in Y),
                         known once complete */
    uint64_t build_ns;
    sio_plan_item **top[PLAN_TOP];
    size_t item_bytes;    /* chunks and directory blocks allocated */
    uint64_t length_hint; /* Y's length when known before the items (0:
                             not known: chunks are whole) */
    plan_file *files; /* by shard list index */
    size_t nfiles;

    /* A plan that grows (sio_plan_start) while its shards are indexed. */
    int growing;
    _Atomic int complete;   /* n is Y's length */
    _Atomic int failed;     /* Y cannot be planned past n: fail_msg */
    _Atomic uint64_t want;  /* 1 + the highest index of Y a reader asked */
    _Atomic int parked;     /* the builder waits for readers to come near */
    uint64_t g_ahead_low;   /* a reader this near n kicks a parked one */
    pthread_mutex_t mu;     /* waiters, kick, fail_msg */
    plan_waiter *waiters;   /* readers waiting past n */
    void (*kick)(void *ud); /* ask for the next step of a parked plan */
    void *kick_ud;
    char fail_msg[700];
    struct plan_grow *g;    /* the builder's state (one thread at a time) */
    pthread_mutex_t fd_mu;  /* fds, fd_clock */
    plan_fd *fds;           /* PLAN_FDS, allocated at the first use */
    uint64_t fd_clock;
};

/* Y[i], for i below the published n. */
static inline const sio_plan_item *plan_item(const sio_plan *p, uint64_t i)
{
    return &p->top[i >> (PLAN_CHUNK_BITS + PLAN_DIR_BITS)]
                  [(i >> PLAN_CHUNK_BITS) & (PLAN_DIR - 1)]
                  [i & (PLAN_CHUNK - 1)];
}

/* A reader waits for the plan to grow past index t: 0 when it may read
 * (t below n, or the plan complete or failed), 1 when it was queued and
 * is woken (its notify) once the plan grew or ended. */
int plan_wait_for(sio_plan *p, plan_waiter *w, uint64_t t);
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

#endif /* SHARDIO_PLAN_INT_H */
