/*
 * pool.c — recycled sample memory (contract in include/shardio.h,
 * "Sample memory").
 *
 * Blocks come in size classes of four steps per power of two (256, 320,
 * 384, 448, 512, 640, ... bytes up to SIO_POOL_CLASS_MAX), so a block is at
 * most 25% larger than asked for. Fresh blocks are carved from slabs of
 * SLAB_BYTES (anonymous mappings; MADV_HUGEPAGE was tried and measured
 * slower here: zeroing fresh 2 MiB pages cost more than the faults it
 * saved). A block is never unmapped: a released one goes onto its
 * class's warm list while the pool holds less than `idle_max` bytes of idle
 * memory, otherwise its pages go back to the kernel (MADV_DONTNEED) and it
 * waits on the class's cold list. get() takes a warm block, then a cold one
 * (faulted in again as it is written), then carves. The address space is
 * thus the peak of blocks in use; resident idle memory is at most
 * `idle_max` plus the partial pages of cold blocks. Larger requests bypass
 * the pool (plain malloc).
 *
 * Decay (decay_ms > 0): a server releases a whole epoch's window at once
 * when it closes, and the next epoch needs the same memory a moment later;
 * giving it back above `idle_max` at once meant faulting it all in again,
 * every epoch. With a decay, released blocks stay warm above `idle_max`;
 * what stayed idle above it for a whole period of decay_ms (the lowest
 * idle level of the period, minus idle_max) goes back at the end of that
 * period. So idle memory above the budget lives at most two periods, and
 * resident memory never exceeds the peak of blocks in use. Periods are
 * closed by sio_pool_tick(), which get() and put() call now and then and a
 * server calls on its timer (a pool nobody uses still decays).
 *
 * Why: a sample's block used to be malloc'd fresh and freed by another
 * thread. With large samples glibc returned the memory to the kernel and
 * faulted it back in (page faults and zeroing were a quarter of the
 * server's time at 100 KiB); with small ones the one malloc arena's lock
 * was contended between shard readers and HTTP threads. In a steady state
 * every block now comes from the free list: no page fault, no malloc.
 *
 * Threading: every function may be called from any thread. Each class has
 * its own mutex, held for a list push or pop only; the counters are
 * atomic. Under AddressSanitizer idle blocks are poisoned, so a use after
 * release is still reported.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shardio.h"

#if defined(__SANITIZE_ADDRESS__)
#define POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ASAN 1
#endif
#endif
#ifdef POOL_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define MIN_SHIFT 8 /* the smallest class is 256 bytes */
#define STEPS 4     /* classes per power of two */
#define MAX_SHIFT 26
#define NCLASSES ((MAX_SHIFT - MIN_SHIFT) * STEPS + 1)

typedef struct free_block {
    struct free_block *next;
} free_block;

typedef struct pool_class {
    pthread_mutex_t mu;
    free_block *warm; /* idle, resident */
    free_block *cold; /* idle, pages given back */
} pool_class;

#define SLAB_BYTES ((size_t)64 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

static pool_class classes[NCLASSES];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_size_t idle_bytes;
static atomic_size_t idle_max = SIO_POOL_IDLE_DEFAULT;
static atomic_size_t mapped_bytes;
static atomic_uint_fast64_t n_reused, n_fresh, n_released;
static size_t page_size;
/* Decay: the period's start (0: none yet), its lowest idle level, and an
 * operation count that has get/put look at the clock now and then. */
static atomic_uint decay_ms;
static atomic_uint_fast64_t period_start;
static atomic_size_t period_low;
static atomic_uint ops;
#define TICK_EVERY 256u

/* The slab being carved (slab_mu). */
static pthread_mutex_t slab_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *slab_p;
static size_t slab_left;

static void pool_init(void)
{
    for (size_t i = 0; i < NCLASSES; i++)
        pthread_mutex_init(&classes[i].mu, NULL);
    long ps = sysconf(_SC_PAGESIZE);
    page_size = ps > 0 ? (size_t)ps : 4096;
}

/* A fresh block of sz bytes from the current slab (a new one when it is
 * used up: its tail is left unused, at most one block's worth). */
static void *carve(size_t sz)
{
    void *p = NULL;
    pthread_mutex_lock(&slab_mu);
    if (slab_left < sz) {
        size_t len = sz > SLAB_BYTES ? sz : SLAB_BYTES;
        len = (len + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        /* Over-map by 2 MiB and align, so the kernel may back the slab
         * with huge pages where it does so by default. */
        unsigned char *m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                -1, 0);
        if (m == MAP_FAILED) {
            pthread_mutex_unlock(&slab_mu);
            return NULL;
        }
        uintptr_t a = ((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        unsigned char *al = (unsigned char *)a;
        if (al > m)
            munmap(m, (size_t)(al - m));
        if (al + len < m + len + HUGE_PAGE)
            munmap(al + len, (size_t)((m + len + HUGE_PAGE) - (al + len)));
        atomic_fetch_add_explicit(&mapped_bytes, len, memory_order_relaxed);
        slab_p = al;
        slab_left = len;
    }
    p = slab_p;
    slab_p += sz;
    slab_left -= sz;
    pthread_mutex_unlock(&slab_mu);
    return p;
}

/* Give a block's whole pages back to the kernel; it stays mapped. */
static void release_pages(void *block, size_t sz)
{
    uintptr_t a = ((uintptr_t)block + page_size - 1) & ~(uintptr_t)(page_size - 1);
    uintptr_t e = ((uintptr_t)block + sz) & ~(uintptr_t)(page_size - 1);
    if (e > a)
        madvise((void *)a, (size_t)(e - a), MADV_DONTNEED);
}

/* The size of class i. */
static size_t class_size(size_t i)
{
    size_t shift = MIN_SHIFT + i / STEPS;
    size_t base = (size_t)1 << shift;
    return base + (base / STEPS) * (i % STEPS);
}

/* The smallest class holding n bytes (n <= SIO_POOL_CLASS_MAX). */
static size_t class_of(size_t n)
{
    if (n <= ((size_t)1 << MIN_SHIFT))
        return 0;
    /* shift = floor(log2(n - 1)): the power of two below n. */
    size_t shift = (size_t)(63 - __builtin_clzll((unsigned long long)(n - 1)));
    size_t base = (size_t)1 << shift;
    size_t step = base / STEPS;
    size_t k = (n - base + step - 1) / step; /* 1..STEPS */
    size_t i = (shift - MIN_SHIFT) * STEPS + k;
    return i;
}

/* Record a new idle level for the decay's low-water mark. */
static void note_low(size_t idle)
{
    size_t low = atomic_load_explicit(&period_low, memory_order_relaxed);
    while (idle < low &&
           !atomic_compare_exchange_weak(&period_low, &low, idle))
        ;
}

/* Close a decay period now and then (a clock read per TICK_EVERY
 * operations). */
static void maybe_tick(void)
{
    if (atomic_load_explicit(&decay_ms, memory_order_relaxed) &&
        atomic_fetch_add_explicit(&ops, 1, memory_order_relaxed) %
                TICK_EVERY ==
            0)
        sio_pool_tick();
}

void *sio_pool_get(size_t need, size_t *cap)
{
    if (need == 0)
        need = 1;
    if (need > SIO_POOL_CLASS_MAX) {
        void *p = malloc(need);
        if (p) {
            *cap = need;
            atomic_fetch_add_explicit(&n_fresh, 1, memory_order_relaxed);
        }
        return p;
    }
    pthread_once(&once, pool_init);
    size_t i = class_of(need);
    size_t sz = class_size(i);
    pool_class *c = &classes[i];
    int warm = 1;
    pthread_mutex_lock(&c->mu);
    free_block *b = c->warm;
    if (b) {
        UNPOISON(b, sizeof *b);
        c->warm = b->next;
    } else if ((b = c->cold) != NULL) {
        UNPOISON(b, sizeof *b);
        c->cold = b->next;
        warm = 0;
    }
    pthread_mutex_unlock(&c->mu);
    if (b) {
        if (warm)
            note_low(atomic_fetch_sub_explicit(&idle_bytes, sz,
                                               memory_order_relaxed) - sz);
        maybe_tick();
        atomic_fetch_add_explicit(&n_reused, 1, memory_order_relaxed);
        UNPOISON(b, sz);
        *cap = sz;
        return b;
    }
    void *p = carve(sz);
    if (p) {
        atomic_fetch_add_explicit(&n_fresh, 1, memory_order_relaxed);
        *cap = sz;
    }
    return p;
}

/* Put a block on its class's warm or cold list. */
static void push(size_t i, void *block, size_t sz, int warm)
{
    free_block *b = block;
    pool_class *c = &classes[i];
    if (!warm)
        release_pages(block, sz);
    POISON((unsigned char *)block + sizeof *b, sz - sizeof *b);
    pthread_mutex_lock(&c->mu);
    if (warm) {
        b->next = c->warm;
        c->warm = b;
    } else {
        b->next = c->cold;
        c->cold = b;
    }
    POISON(b, sizeof *b);
    pthread_mutex_unlock(&c->mu);
}

void sio_pool_put(void *block, size_t cap)
{
    if (!block)
        return;
    if (cap > SIO_POOL_CLASS_MAX) {
        free(block);
        return;
    }
    pthread_once(&once, pool_init);
    size_t i = class_of(cap);
    size_t held = atomic_fetch_add_explicit(&idle_bytes, cap,
                                            memory_order_relaxed);
    maybe_tick();
    if (held + cap > atomic_load_explicit(&idle_max, memory_order_relaxed) &&
        atomic_load_explicit(&decay_ms, memory_order_relaxed) == 0) {
        atomic_fetch_sub_explicit(&idle_bytes, cap, memory_order_relaxed);
        atomic_fetch_add_explicit(&n_released, 1, memory_order_relaxed);
        push(i, block, cap, 0);
        return;
    }
    push(i, block, cap, 1);
}

/* Move warm blocks to the cold lists (pages given back) until at most
 * `keep` bytes stay idle and resident. */
static void trim_to(size_t keep)
{
    pthread_once(&once, pool_init);
    for (size_t i = NCLASSES; i-- > 0;) {
        pool_class *c = &classes[i];
        size_t sz = class_size(i);
        for (;;) {
            if (atomic_load_explicit(&idle_bytes, memory_order_relaxed) <=
                keep)
                return;
            pthread_mutex_lock(&c->mu);
            free_block *b = c->warm;
            if (b) {
                UNPOISON(b, sizeof *b);
                c->warm = b->next;
            }
            pthread_mutex_unlock(&c->mu);
            if (!b)
                break;
            note_low(atomic_fetch_sub_explicit(&idle_bytes, sz,
                                               memory_order_relaxed) - sz);
            atomic_fetch_add_explicit(&n_released, 1, memory_order_relaxed);
            UNPOISON(b, sz);
            push(i, b, sz, 0);
        }
    }
}

void sio_pool_configure(size_t idle_max_bytes)
{
    atomic_store_explicit(&idle_max, idle_max_bytes, memory_order_relaxed);
    trim_to(idle_max_bytes);
}

void sio_pool_trim(void)
{
    trim_to(0);
}

void sio_pool_set_decay(uint32_t ms)
{
    atomic_store_explicit(&decay_ms, ms, memory_order_relaxed);
    atomic_store_explicit(&period_start, 0, memory_order_relaxed);
    if (ms == 0)
        trim_to(atomic_load_explicit(&idle_max, memory_order_relaxed));
}

void sio_pool_tick(void)
{
    uint32_t d = atomic_load_explicit(&decay_ms, memory_order_relaxed);
    if (d == 0)
        return;
    uint64_t now = sio_now_ms(), start;
    start = atomic_load_explicit(&period_start, memory_order_relaxed);
    if (start != 0 && now - start < d)
        return;
    /* One thread closes the period. */
    if (!atomic_compare_exchange_strong(&period_start, &start, now ? now : 1))
        return;
    size_t idle = atomic_load_explicit(&idle_bytes, memory_order_relaxed);
    size_t low = atomic_exchange(&period_low, idle);
    size_t max = atomic_load_explicit(&idle_max, memory_order_relaxed);
    if (start == 0 || low <= max)
        return;
    /* Idle above the budget for the whole period: give it back. */
    size_t surplus = low - max;
    trim_to(idle > surplus ? idle - surplus : 0);
}

void sio_pool_get_stats(sio_pool_stats *st)
{
    st->idle_bytes = atomic_load_explicit(&idle_bytes, memory_order_relaxed);
    st->idle_max = atomic_load_explicit(&idle_max, memory_order_relaxed);
    st->reused = atomic_load_explicit(&n_reused, memory_order_relaxed);
    st->fresh = atomic_load_explicit(&n_fresh, memory_order_relaxed);
    st->released = atomic_load_explicit(&n_released, memory_order_relaxed);
    st->mapped_bytes = atomic_load_explicit(&mapped_bytes, memory_order_relaxed);
}
