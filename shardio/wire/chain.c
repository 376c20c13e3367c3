/*
 * chain.c — sio_wchain, the output chain between the encoders and the
 * socket (contract in include/shardio_wire.h): copied header bytes,
 * references into a sample's memory and file ranges, drained in order.
 *
 * Threading: a chain belongs to one thread at a time; no global state.
 * Ownership: the chain owns its pieces and its copy buffer; referenced
 * memory and file descriptors are the caller's.
 */
#include "shardio_wire.h"

#include <stdlib.h>
#include <string.h>

enum { PIECE_COPY = 0, PIECE_REF = 1, PIECE_FILE = 2 };

struct sio_wpiece {
    int kind;
    const unsigned char *p; /* PIECE_REF */
    size_t off;             /* PIECE_COPY: offset in the copy buffer */
    size_t len;
    int fd;                 /* PIECE_FILE: the bytes at foff of fd */
    uint64_t foff;
};

void sio_wchain_init(sio_wchain *c, size_t copy_max, size_t pieces_max)
{
    memset(c, 0, sizeof *c);
    sio_wbuf_init(&c->copy, copy_max);
    c->max = pieces_max;
}

void sio_wchain_free(sio_wchain *c)
{
    sio_wbuf_free(&c->copy);
    free(c->pieces);
    c->pieces = NULL;
    c->n = c->cap = c->at = c->at_off = 0;
}

static sio_code add(sio_wchain *c, sio_wpiece pc)
{
    if (c->n == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 16;
        if (ncap > c->max)
            ncap = c->max;
        if (ncap <= c->n)
            return SIO_ERR_LIMIT;
        sio_wpiece *np = realloc(c->pieces, ncap * sizeof *np);
        if (!np)
            return SIO_ERR_NOMEM;
        c->pieces = np;
        c->cap = ncap;
    }
    c->pieces[c->n++] = pc;
    return SIO_OK;
}

sio_code sio_wchain_copy(sio_wchain *c, const void *p, size_t len)
{
    if (len == 0)
        return SIO_OK;
    size_t off = c->copy.len;
    sio_code rc = sio_wbuf_append(&c->copy, p, len);
    if (rc)
        return rc;
    /* Copied bytes right after the last piece's: one piece. */
    if (c->n > 0 && c->pieces[c->n - 1].kind == PIECE_COPY &&
        c->pieces[c->n - 1].off + c->pieces[c->n - 1].len == off) {
        c->pieces[c->n - 1].len += len;
        return SIO_OK;
    }
    return add(c, (sio_wpiece){PIECE_COPY, NULL, off, len, -1, 0});
}

sio_code sio_wchain_ref(sio_wchain *c, const void *p, size_t len)
{
    if (len == 0)
        return SIO_OK;
    return add(c, (sio_wpiece){PIECE_REF, p, 0, len, -1, 0});
}

sio_code sio_wchain_file(sio_wchain *c, int fd, uint64_t off, size_t len)
{
    if (len == 0)
        return SIO_OK;
    return add(c, (sio_wpiece){PIECE_FILE, NULL, 0, len, fd, off});
}

size_t sio_wchain_drain(sio_wchain *c, void *buf, size_t max,
                        sio_wchain_read_fn rd, void *ud, sio_code *rc)
{
    unsigned char *out = buf;
    size_t n = 0;
    *rc = SIO_OK;
    while (n < max && c->at < c->n) {
        const sio_wpiece *g = &c->pieces[c->at];
        size_t k = g->len - c->at_off;
        if (k > max - n)
            k = max - n;
        if (g->kind == PIECE_FILE) {
            sio_code r = rd ? rd(ud, g->fd, out + n, k, g->foff + c->at_off)
                            : SIO_ERR_INVALID;
            if (r) {
                *rc = r;
                return n;
            }
        } else {
            const unsigned char *src =
                g->kind == PIECE_REF ? g->p : c->copy.data + g->off;
            memcpy(out + n, src + c->at_off, k);
        }
        n += k;
        c->at_off += k;
        if (c->at_off == g->len) {
            c->at++;
            c->at_off = 0;
        }
    }
    return n;
}

int sio_wchain_pending(const sio_wchain *c)
{
    return c->at < c->n;
}

int sio_wchain_used(const sio_wchain *c)
{
    return c->n > 0;
}

void sio_wchain_reset(sio_wchain *c, size_t keep)
{
    c->n = c->at = c->at_off = 0;
    c->copy.len = 0;
    if (c->copy.cap > keep) {
        size_t max = c->copy.max;
        sio_wbuf_free(&c->copy);
        sio_wbuf_init(&c->copy, max);
    }
}
