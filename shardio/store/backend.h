/*
 * backend.h — the storage backend interface inside libshardio (internal).
 *
 * A backend (file, http, s3) implements one const table of operations.
 * sio_io picks the backend by URL scheme. A sio_stream is one object's bytes
 * from an offset on, read sequentially by one thread (the tar reader's).
 *
 * Threading: the ops tables are immutable. list/stat/open may be called from
 * any thread at once with the same backend context; a stream is used by one
 * thread at a time.
 */
#ifndef SHARDIO_BACKEND_H
#define SHARDIO_BACKEND_H

#include "shardio.h"
#include "shardio_index.h"

/* One object found by a listing. */
typedef struct sio_object {
    char *url;     /* malloc'd, owned by the list */
    uint64_t size; /* UINT64_MAX when unknown */
} sio_object;

/* A growable list of objects with a maximum fixed at creation. */
typedef struct sio_objlist {
    sio_object *v;
    size_t n, cap;
    size_t max; /* SIO_ERR_LIMIT beyond this many objects */
} sio_objlist;

/* Sanity limit on the number of shards in one dataset. */
#define SIO_SHARDS_MAX 10000000u

void sio_objlist_init(sio_objlist *l, size_t max);
/* Append a copy of url. */
sio_code sio_objlist_add(sio_objlist *l, const char *url, uint64_t size);
void sio_objlist_free(sio_objlist *l);
/* Sort bytewise by URL (a listing's order). */
void sio_objlist_sort(sio_objlist *l);

typedef struct sio_stream sio_stream;

/* Longest validator kept (an ETag of SIO_FETCH_ETAG_MAX, or "lm:" and a
 * Last-Modified date). */
#define SIO_VALIDATOR_MAX 160u

/* What is known about the object behind a stream or a HEAD. */
typedef struct sio_objinfo {
    uint64_t size;                      /* UINT64_MAX: unknown */
    char validator[SIO_VALIDATOR_MAX];  /* the ETag as sent, else "lm:" and
                                           the Last-Modified date; "" when
                                           the store gave neither */
} sio_objinfo;

typedef struct sio_stream_ops {
    /* Read up to cap bytes into buf. *got == 0 with SIO_OK means the end of
     * the object. Blocks until at least one byte, the end or an error. */
    sio_code (*read)(sio_stream *s, void *buf, size_t cap, size_t *got);
    /* Detail of the last error; valid until the next call on s. */
    const char *(*errmsg)(const sio_stream *s);
    void (*close)(sio_stream *s);
    /* The object's size and validator as the store told them, once the
     * first read has returned (NULL, or size UINT64_MAX and validator "":
     * not known). */
    void (*info)(sio_stream *s, sio_objinfo *out);
} sio_stream_ops;

/* Every backend's stream struct starts with this. */
struct sio_stream {
    const sio_stream_ops *ops;
};

typedef struct sio_backend_ops {
    const char *name;
    /* Nonzero when this backend serves url. */
    int (*matches)(const char *url);
    /* Objects in a directory / under a prefix (unsorted, every file;
     * the caller filters shard names and sorts). */
    sio_code (*list)(void *ctx, const char *url, sio_objlist *out,
                     sio_error *err);
    /* Size of one object; SIO_ERR_NOTFOUND when it does not exist. */
    sio_code (*stat)(void *ctx, const char *url, uint64_t *size,
                     sio_error *err);
    /* Is url a directory / prefix to list rather than one object? */
    int (*is_container)(void *ctx, const char *url);
    /* Open url for reading from byte offset. */
    sio_code (*open)(void *ctx, const char *url, uint64_t offset,
                     sio_stream **out, sio_error *err);
    /* Free ctx. */
    void (*destroy)(void *ctx);
    /* Build the backend's context for io (called by sio_io_create after
     * the fetch engine exists); NULL: the backend needs no context. */
    sio_code (*create)(sio_io *io, void **ctx, sio_error *err);
    /* Open bytes [offset, end) of url (end UINT64_MAX: to the object's
     * end); the stream ends at `end` and asks the store for nothing past
     * it. NULL: open() is used and the reader stops by itself. */
    sio_code (*open_range)(void *ctx, const char *url, uint64_t offset,
                           uint64_t end, sio_stream **out, sio_error *err);
    /* Size and validator of one object (a HEAD); NULL: the backend cannot
     * tell a validator (its objects are not cached). */
    sio_code (*head)(void *ctx, const char *url, sio_objinfo *out,
                     sio_error *err);
} sio_backend_ops;

extern const sio_backend_ops sio_backend_objset;
extern const sio_backend_ops sio_backend_file;
extern const sio_backend_ops sio_backend_http;
extern const sio_backend_ops sio_backend_s3;

/* Object-set sources (objset.c): is spec "<prefix>?objects[=N]"? Then
 * resolve it into virtual shards appended to out (the set is registered
 * in io for the objset backend). */
int sio_objset_spec(const char *spec);
sio_code sio_objset_resolve(sio_io *io, const char *spec, sio_objlist *out,
                            sio_error *err);
/* The context io made for a built-in backend (NULL: none). */
void *sio_io_backend_ctx(sio_io *io, const sio_backend_ops *ops);

/* Open bytes [offset, end) of url through the shard cache for job u
 * (shardio_cache.h); size_hint is the object's size when the listing told
 * it (UINT64_MAX: unknown). Objects of backends without head() are opened
 * directly. */
struct sio_cache_user;
sio_code sio_cache_open(struct sio_cache_user *u, const sio_backend_ops *ops,
                        void *ctx, const char *url, uint64_t size_hint,
                        uint64_t offset, uint64_t end, sio_stream **out,
                        sio_error *err);

/* A stream over bytes in memory (not copied: data must outlive it). */
sio_code sio_stream_memory(const void *data, size_t len, sio_stream **out);

/* Open a shard over an already open stream, which the shard then owns
 * (closed by sio_shard_close, also on error). Used by tests and fuzzers. */
sio_code sio_shard_open_stream(sio_io *io, sio_stream *stream,
                               const char *url, uint32_t index,
                               const sio_shard_limits *limits,
                               sio_shard **out, sio_error *err);

/* Tests: read every shard through libarchive instead of the plain tar
 * reader (process-wide; set before opening shards). */
void sio_shard_force_libarchive(int on);

/* The backend of url and its context, or SIO_ERR_UNSUPPORTED. */
sio_code sio_io_backend(sio_io *io, const char *url,
                        const sio_backend_ops **ops, void **ctx,
                        sio_error *err);
/* Add a backend asked before the built-in ones (tests, embedders). Call
 * before the io is shared between threads. ctx is not freed by the io. */
sio_code sio_io_register_backend(sio_io *io, const sio_backend_ops *ops,
                                 void *ctx);
uint32_t sio_io_read_buffer(const sio_io *io);

/* Set err (may be NULL) to code and a formatted message; returns code. */
sio_code sio_seterr(sio_error *err, sio_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Log through a logger; the level is checked before formatting. */
void sio_log_(const sio_logger *lg, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
#define SIO_LOG(lg, lvl, ...)                                          \
    do {                                                               \
        const sio_logger *lg_ = (lg);                                  \
        if (lg_ && lg_->fn && (lvl) <= lg_->level)                     \
            sio_log_(lg_, (lvl), __VA_ARGS__);                         \
    } while (0)

#endif /* SHARDIO_BACKEND_H */
