/*
 * io.c — the I/O context: backend selection by URL scheme, object lists.
 *
 * Threading: an sio_io is immutable after sio_io_create() except inside the
 * backends' own contexts, which do their own locking; any thread may use it.
 * Ownership: the io owns each backend context and destroys it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/backend_ops.h"
#include "store/store_int.h"
#include "store/fetch.h"
#include "store/storestats.h"
#include "shardio_plan.h"

#define IO_READ_BUFFER_DEFAULT (256u * 1024u)
#define IO_READ_BUFFER_MAX (64u * 1024u * 1024u)


/* Backends added at run time (tests, embedders), asked before the built-in
 * ones. Registered before the io is shared; immutable afterwards. */
#define IO_EXTRA_BACKENDS_MAX 4

/* One shard's sidecar fact from a listing (sio_io_sidecar_hint). */
typedef struct side_hint {
    struct side_hint *next;
    int present;
    char url[];
} side_hint;
#define SIDE_HINT_BUCKETS 65536u

struct sio_io {
    pthread_mutex_t hint_mu;
    side_hint **hints;    /* SIDE_HINT_BUCKETS chains, made on first use */
    size_t nhints;
    sio_io_config cfg;
    sio_fetch *fetch; /* the engine of the http and s3 backends */
    void *ctx[SIO_NBACKENDS];
    const sio_backend_ops *extra[IO_EXTRA_BACKENDS_MAX];
    void *extra_ctx[IO_EXTRA_BACKENDS_MAX];
    size_t nextra;
    atomic_int busy; /* closers still using the io (sio_io_busy) */
    sio_storestats stats; /* object-store metrics (engine, file backend) */
};

sio_code sio_io_create(const sio_io_config *cfg, sio_io **out, sio_error *err)
{
    sio_io *io = calloc(1, sizeof *io);
    if (!io)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&io->hint_mu, NULL);
    if (cfg)
        io->cfg = *cfg;
    if (io->cfg.read_buffer == 0)
        io->cfg.read_buffer = IO_READ_BUFFER_DEFAULT;
    if (io->cfg.read_buffer > IO_READ_BUFFER_MAX) {
        free(io);
        return sio_seterr(err, SIO_ERR_INVALID, "read_buffer %u above %u",
                          (unsigned)cfg->read_buffer, IO_READ_BUFFER_MAX);
    }
    {
        sio_fetch_setup fs = {
            .fetch = io->cfg.fetch,
            .log = io->cfg.log,
            .allow_link_local = io->cfg.allow_link_local,
            .stats = &io->stats,
        };
        sio_code rc = sio_fetch_create(&fs, &io->fetch, err);
        for (size_t i = 0; rc == SIO_OK && i < SIO_NBACKENDS; i++)
            if (sio_backends[i]->create)
                rc = sio_backends[i]->create(io, &io->ctx[i], err);
        if (rc) {
            sio_io_destroy(io);
            return rc;
        }
    }
    *out = io;
    return SIO_OK;
}

sio_fetch *sio_io_fetch(sio_io *io)
{
    return io ? io->fetch : NULL;
}

const sio_io_config *sio_io_get_config(const sio_io *io)
{
    return &io->cfg;
}

void sio_io_get_stats(const sio_io *io, sio_io_stats *st)
{
    sio_fetch_get_stats(io ? io->fetch : NULL, st);
}

void sio_io_get_store_stats(const sio_io *io, sio_store_stats *st)
{
    sio_io_stats eng;
    sio_storestats_snapshot(io ? &io->stats : NULL, st);
    sio_fetch_get_stats(io ? io->fetch : NULL, &eng);
    st->backend[SIO_STORE_HTTP].concurrency = eng.concurrency;
    st->backend[SIO_STORE_S3].concurrency = eng.concurrency;
}

sio_storestats *sio_io_storestats(sio_io *io)
{
    return io ? &io->stats : NULL;
}

int sio_io_busy(const sio_io *io)
{
    return io ? atomic_load(&((sio_io *)(uintptr_t)io)->busy) : 0;
}

void sio_io_busy_add(sio_io *io, int delta)
{
    atomic_fetch_add(&io->busy, delta);
}

void sio_io_destroy(sio_io *io)
{
    /* Closer threads of feeds still use the engine: wait for them (a
     * host that cannot wait checks sio_io_busy() first). */
    while (io && atomic_load(&io->busy) > 0)
        usleep(10000);
    if (!io)
        return;
    for (size_t i = 0; i < SIO_NBACKENDS; i++)
        if (io->ctx[i] && sio_backends[i]->destroy)
            sio_backends[i]->destroy(io->ctx[i]);
    sio_fetch_destroy(io->fetch);
    for (size_t b = 0; io->hints && b < SIDE_HINT_BUCKETS; b++)
        for (side_hint *h = io->hints[b], *n; h; h = n) {
            n = h->next;
            free(h);
        }
    free(io->hints);
    pthread_mutex_destroy(&io->hint_mu);
    free(io);
}

const sio_logger *sio_io_logger(const sio_io *io)
{
    return io ? &io->cfg.log : NULL;
}

static size_t hint_bucket(const char *url)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = url; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return (size_t)(h % SIDE_HINT_BUCKETS);
}

void sio_io_sidecar_hint(sio_io *io, const char *url, int present)
{
    size_t b = hint_bucket(url);
    pthread_mutex_lock(&io->hint_mu);
    if (!io->hints)
        io->hints = calloc(SIDE_HINT_BUCKETS, sizeof *io->hints);
    side_hint *h = io->hints ? io->hints[b] : NULL;
    while (h && strcmp(h->url, url) != 0)
        h = h->next;
    if (h) {
        h->present = present; /* the newest listing is right */
    } else if (io->hints && io->nhints < SIO_IO_SIDECAR_HINTS_MAX &&
               (h = malloc(sizeof *h + strlen(url) + 1)) != NULL) {
        memcpy(h->url, url, strlen(url) + 1);
        h->present = present;
        h->next = io->hints[b];
        io->hints[b] = h;
        io->nhints++;
    }
    pthread_mutex_unlock(&io->hint_mu);
}

int sio_io_sidecar_known(sio_io *io, const char *url)
{
    int known = -1;
    if (!io)
        return -1;
    size_t b = hint_bucket(url);
    pthread_mutex_lock(&io->hint_mu);
    for (side_hint *h = io->hints ? io->hints[b] : NULL; h; h = h->next)
        if (strcmp(h->url, url) == 0) {
            known = h->present;
            break;
        }
    pthread_mutex_unlock(&io->hint_mu);
    return known;
}

sio_code sio_io_backend(sio_io *io, const char *url,
                        const sio_backend_ops **ops, void **ctx,
                        sio_error *err)
{
    for (size_t i = 0; io && i < io->nextra; i++) {
        if (io->extra[i]->matches(url)) {
            *ops = io->extra[i];
            *ctx = io->extra_ctx[i];
            return SIO_OK;
        }
    }
    for (size_t i = 0; i < SIO_NBACKENDS; i++) {
        if (sio_backends[i]->matches(url)) {
            *ops = sio_backends[i];
            *ctx = io ? io->ctx[i] : NULL;
            return SIO_OK;
        }
    }
    return sio_seterr(err, SIO_ERR_UNSUPPORTED, "no backend for url=%s", url);
}

void *sio_io_backend_ctx(sio_io *io, const sio_backend_ops *ops)
{
    for (size_t i = 0; io && i < SIO_NBACKENDS; i++)
        if (sio_backends[i] == ops)
            return io->ctx[i];
    return NULL;
}

sio_code sio_io_register_backend(sio_io *io, const sio_backend_ops *ops,
                                 void *ctx)
{
    if (io->nextra == IO_EXTRA_BACKENDS_MAX)
        return SIO_ERR_LIMIT;
    io->extra[io->nextra] = ops;
    io->extra_ctx[io->nextra] = ctx;
    io->nextra++;
    return SIO_OK;
}

uint32_t sio_io_read_buffer(const sio_io *io)
{
    return io ? io->cfg.read_buffer : IO_READ_BUFFER_DEFAULT;
}

/* Object lists ------------------------------------------------------- */

void sio_objlist_init(sio_objlist *l, size_t max)
{
    memset(l, 0, sizeof *l);
    l->max = max ? max : SIO_SHARDS_MAX;
}

sio_code sio_objlist_add(sio_objlist *l, const char *url, uint64_t size)
{
    if (l->n >= l->max)
        return SIO_ERR_LIMIT;
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        if (ncap > l->max)
            ncap = l->max;
        sio_object *nv = realloc(l->v, ncap * sizeof *nv);
        if (!nv)
            return SIO_ERR_NOMEM;
        l->v = nv;
        l->cap = ncap;
    }
    char *u = strdup(url);
    if (!u)
        return SIO_ERR_NOMEM;
    l->v[l->n].url = u;
    l->v[l->n].size = size;
    l->n++;
    return SIO_OK;
}

void sio_objlist_free(sio_objlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].url);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_obj(const void *a, const void *b)
{
    const sio_object *x = a, *y = b;
    return strcmp(x->url, y->url);
}

void sio_objlist_sort(sio_objlist *l)
{
    if (l->n > 1)
        qsort(l->v, l->n, sizeof *l->v, cmp_obj);
}

/* In-place reads (the plan's data plane) ---------------------------- */

int sio_io_url_is_file(sio_io *io, const char *url)
{
    const sio_backend_ops *ops;
    void *ctx;
    return sio_io_backend(io, url, &ops, &ctx, NULL) == SIO_OK &&
           ops->open_fd != NULL;
}

int sio_io_fd_capable(sio_io *io, struct sio_cache_user *cache,
                      const char *url)
{
    const sio_backend_ops *ops;
    void *ctx;
    if (sio_io_backend(io, url, &ops, &ctx, NULL) != SIO_OK)
        return 0;
    if (ops->open_fd)
        return 1;
    return cache && ops->head && sio_cache_entry_fd(cache, url, NULL, NULL, 0);
}

static sio_code open_fd(sio_io *io, struct sio_cache_user *cache,
                        const char *url, int *fd, int *sfd, int count,
                        sio_error *err)
{
    const sio_backend_ops *ops;
    void *ctx;
    int sums = -1;
    *fd = -1;
    if (sfd)
        *sfd = -1;
    sio_code rc = sio_io_backend(io, url, &ops, &ctx, err);
    if (rc)
        return rc;
    if (ops->open_fd)
        return ops->open_fd(ctx, url, fd, err);
    if (cache && ops->head && sio_cache_entry_fd(cache, url, fd, &sums, count)) {
        if (sfd)
            *sfd = sums;
        else
            close(sums);
        return SIO_OK;
    }
    return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                      "url=%s: not in the shard cache", url);
}

sio_code sio_io_open_fd(sio_io *io, struct sio_cache_user *cache,
                        const char *url, int *fd, sio_error *err)
{
    return open_fd(io, cache, url, fd, NULL, 1, err);
}

sio_code sio_io_open_fd_checked(sio_io *io, struct sio_cache_user *cache,
                                const char *url, int *fd, int *sfd,
                                sio_error *err)
{
    return open_fd(io, cache, url, fd, sfd, 1, err);
}

sio_code sio_io_open_fd_probe(sio_io *io, struct sio_cache_user *cache,
                              const char *url, int *fd, sio_error *err)
{
    return open_fd(io, cache, url, fd, NULL, 0, err);
}
