/*
 * memstream.c — a sio_stream over bytes in memory (sio_stream_memory): the
 * store's one stream that reaches no backend. Tests and fuzzers feed shards
 * through it.
 *
 * Threading: a stream is used by one thread at a time, like every
 * sio_stream. Ownership: the bytes are borrowed (not copied) and must
 * outlive the stream; close frees the stream only.
 */
#include <stdlib.h>
#include <string.h>

#include "store/backend_ops.h"
#include "store/store_int.h"

typedef struct mem_stream {
    sio_stream base;
    const unsigned char *p;
    size_t left;
} mem_stream;

static sio_code mem_read(sio_stream *s, void *buf, size_t cap, size_t *got)
{
    mem_stream *m = (mem_stream *)s;
    size_t n = m->left < cap ? m->left : cap;
    if (n)
        memcpy(buf, m->p, n);
    m->p += n;
    m->left -= n;
    *got = n;
    return SIO_OK;
}

static const char *mem_errmsg(const sio_stream *s)
{
    return "";
}

static void mem_close(sio_stream *s)
{
    free(s);
}

static const sio_stream_ops mem_stream_ops = {mem_read, mem_errmsg,
                                              mem_close, NULL, NULL};

sio_code sio_stream_memory(const void *data, size_t len, sio_stream **out)
{
    mem_stream *m = calloc(1, sizeof *m);
    if (!m)
        return SIO_ERR_NOMEM;
    m->base.ops = &mem_stream_ops;
    m->p = data;
    m->left = len;
    *out = &m->base;
    return SIO_OK;
}
