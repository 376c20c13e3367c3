/*
 * backend_ops.h — what a storage backend implements inside libshardio
 * (internal): its const table of operations (sio_backend_ops) and the
 * streams it opens (sio_stream, sio_stream_ops, sio_objinfo).
 *
 * A backend (file, http, s3, objset) implements one table; sio_io picks
 * the backend by URL scheme. A sio_stream is one object's bytes from an
 * offset on, read sequentially by one thread (the tar reader's). What a
 * backend calls back into (errors, logging, object lists, the io) is in
 * store/store_int.h.
 *
 * Threading: the ops tables are immutable. list/stat/open may be called from
 * any thread at once with the same backend context; a stream is used by one
 * thread at a time.
 */
#ifndef SHARDIO_BACKEND_OPS_H
#define SHARDIO_BACKEND_OPS_H

#include "shardio.h"

/* A listing's result (store_int.h). */
typedef struct sio_objlist sio_objlist;

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
    /* Drop the next n bytes without reading them (NULL: the reader reads
     * and drops them). Past the end is not an error here: the next read
     * says what is there. */
    sio_code (*skip)(sio_stream *s, uint64_t n);
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
    /* A descriptor of the object that pread() can read in place (the
     * plan's data plane, shardio_plan.h); NULL: the object has no such
     * place (the shard cache may still have one). */
    sio_code (*open_fd)(void *ctx, const char *url, int *fd,
                        sio_error *err);
} sio_backend_ops;

extern const sio_backend_ops sio_backend_objset;
extern const sio_backend_ops sio_backend_file;
extern const sio_backend_ops sio_backend_http;
extern const sio_backend_ops sio_backend_s3;

/* The built-in backends in the order they are asked (backends.c): the
 * first whose matches() takes a URL serves it. */
#define SIO_NBACKENDS 4u
extern const sio_backend_ops *const sio_backends[SIO_NBACKENDS];
/* The built-in backend that serves url, or NULL. */
const sio_backend_ops *sio_backend_for(const char *url);

#endif /* SHARDIO_BACKEND_OPS_H */
