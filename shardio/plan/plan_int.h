/*
 * plan_int.h — what the plan (plan.c) and its readers (planread.c) share
 * (internal to shardio/plan).
 *
 * Threading: a built plan is immutable.
 */
#ifndef SHARDIO_PLAN_INT_H
#define SHARDIO_PLAN_INT_H

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

struct sio_plan {
    atomic_uint refs;
    uint64_t n;
    uint64_t skipped; /* bad samples of the epoch's shards (not in Y) */
    uint64_t build_ns;
    sio_plan_item *items;
    plan_file *files; /* by shard list index */
    size_t nfiles;
};

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
