/*
 * warm.c — cold reads of planned streams, off the threads that serve
 * connections.
 *
 * A plan stream reads its samples with pread() on the HTTP thread that
 * serves it (and other connections). Where a sample's bytes are not in
 * the page cache, that read would wait for the disk and stall every
 * connection of the thread. The reader first asks with RWF_NOWAIT; when
 * the bytes are not there, it hands the range to these threads, which
 * read it (into a scratch buffer: the page cache keeps it), and is woken
 * (its notify) to read it again from memory. One pool per process,
 * WARM_THREADS threads started at the first use.
 *
 * Locking: pool.mu guards the queue and every job's state; a job's notify
 * is called under it (it must only note the wake-up). A job belongs to its
 * reader until the reader lets go of it (plan_warm_cancel): one queued is
 * freed then, one being read is left to its thread, which frees it when
 * the read ends and calls no notify; the reader never waits for a disk.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "plan/plan_int.h"

#define WARM_THREADS 2u
#define WARM_READ (256u << 10)

enum { WARM_IDLE = 0, WARM_QUEUED = 1, WARM_RUNNING = 2 };

static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t work;
    plan_warm *head, *tail;
    unsigned threads;
    _Atomic uint64_t reads, bytes;
} pool = {.once = PTHREAD_ONCE_INIT,
          .mu = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER};

static void *warm_main(void *arg)
{
    (void)arg;
    unsigned char *buf = malloc(WARM_READ);
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (!pool.head)
            pthread_cond_wait(&pool.work, &pool.mu);
        plan_warm *w = pool.head;
        pool.head = w->next;
        if (!pool.head)
            pool.tail = NULL;
        w->next = NULL;
        w->state = WARM_RUNNING;
        int fd = w->fd;
        uint64_t off = w->off, left = w->len;
        pthread_mutex_unlock(&pool.mu);
        /* Read to the range's end, or the file's (a short read ends it:
         * the reader sees for itself what is there). */
        while (buf && left > 0) {
            size_t n = left < WARM_READ ? (size_t)left : WARM_READ;
            ssize_t got = pread(fd, buf, n, (off_t)off);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break;
            off += (uint64_t)got;
            left -= (uint64_t)got;
            atomic_fetch_add(&pool.bytes, (uint64_t)got);
        }
        close(fd);
        atomic_fetch_add(&pool.reads, 1);
        pthread_mutex_lock(&pool.mu);
        if (w->orphan) { /* its reader let go of it meanwhile */
            free(w);
            continue;
        }
        w->state = WARM_IDLE;
        w->fd = -1;
        if (w->fn)
            w->fn(w->ud);
    }
    return NULL;
}

static void warm_start(void)
{
    for (unsigned i = 0; i < WARM_THREADS; i++) {
        pthread_t th;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &a, warm_main, NULL) == 0)
            pool.threads++;
        pthread_attr_destroy(&a);
    }
}

int plan_warm_submit(plan_warm **slot, int fd, uint64_t off, uint64_t len,
                     void (*fn)(void *ud), void *ud)
{
    pthread_once(&pool.once, warm_start);
    if (!pool.threads)
        return -1;
    if (!*slot && !(*slot = calloc(1, sizeof **slot)))
        return -1;
    plan_warm *w = *slot;
    int dfd = dup(fd);
    if (dfd < 0)
        return -1;
    pthread_mutex_lock(&pool.mu);
    if (w->state != WARM_IDLE) { /* one job at a time per reader */
        pthread_mutex_unlock(&pool.mu);
        close(dfd);
        return -1;
    }
    w->fd = dfd;
    w->off = off;
    w->len = len;
    w->fn = fn;
    w->ud = ud;
    w->next = NULL;
    w->state = WARM_QUEUED;
    if (pool.tail)
        pool.tail->next = w;
    else
        pool.head = w;
    pool.tail = w;
    pthread_cond_signal(&pool.work);
    pthread_mutex_unlock(&pool.mu);
    return 0;
}

void plan_warm_cancel(plan_warm **slot)
{
    plan_warm *w = *slot;
    if (!w)
        return;
    *slot = NULL;
    pthread_mutex_lock(&pool.mu);
    if (w->state == WARM_QUEUED) {
        plan_warm **pp = &pool.head, *prev = NULL;
        while (*pp && *pp != w) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp) {
            *pp = w->next;
            if (pool.tail == w)
                pool.tail = prev;
        }
        close(w->fd);
    }
    if (w->state == WARM_RUNNING)
        w->orphan = 1; /* its thread frees it */
    else
        free(w);
    pthread_mutex_unlock(&pool.mu);
}

void sio_plan_cold_stats(uint64_t *reads, uint64_t *bytes)
{
    *reads = atomic_load(&pool.reads);
    *bytes = atomic_load(&pool.bytes);
}
