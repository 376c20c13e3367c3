/*
 * sample.c — sample construction and reference counting.
 *
 * Memory: a finished sample is one block from the sample pool (pool.c):
 * the payload the builder read into it, then, 16-byte aligned, the header
 * (struct, field table, key, names, shard URL). The builder reserves room
 * for the header while it reads, so finishing a sample copies no payload;
 * nothing is copied per consumer either. The reference count is atomic;
 * the last sio_sample_unref() gives the block back to the pool.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample.h"

/* Header room reserved behind the payload while a sample is read. */
#define HDR_RESERVE 512u
#define HDR_ALIGN 16u

typedef struct sample_impl {
    sio_sample pub;
    atomic_uint refs;
    void *block;        /* the pool block holding payload and header */
    size_t cap;         /* its size */
    sio_field fields[]; /* followed by key, names and URL strings */
} sample_impl;

void sio_sample_ref(const sio_sample *s)
{
    sample_impl *si = (sample_impl *)(uintptr_t)s;
    atomic_fetch_add_explicit(&si->refs, 1, memory_order_relaxed);
}

void sio_sample_unref(const sio_sample *s)
{
    if (!s)
        return;
    sample_impl *si = (sample_impl *)(uintptr_t)s;
    if (atomic_fetch_sub_explicit(&si->refs, 1, memory_order_acq_rel) == 1) {
        void *block = si->block;
        size_t cap = si->cap;
        sio_pool_put(block, cap); /* si lives in the block */
    }
}

const sio_field *sio_sample_field(const sio_sample *s, const char *name)
{
    for (size_t i = 0; i < s->nfields; i++)
        if (strcmp(s->fields[i].name, name) == 0)
            return &s->fields[i];
    return NULL;
}

void sb_init(sample_builder *b, uint64_t data_max, uint32_t fields_max)
{
    memset(b, 0, sizeof *b);
    b->data_max = data_max;
    b->fields_max = fields_max;
}

void sb_free(sample_builder *b)
{
    sio_pool_put(b->data, b->dcap);
    free(b->names);
    free(b->f);
    free(b->key);
    memset(b, 0, sizeof *b);
}

void sb_reset(sample_builder *b)
{
    b->dlen = b->nlen = b->nf = 0;
    if (b->key)
        b->key[0] = '\0';
    b->keylen = 0;
}

sio_code sb_set_key(sample_builder *b, const char *key, size_t len)
{
    char *k = realloc(b->key, len + 1);
    if (!k)
        return SIO_ERR_NOMEM;
    memcpy(k, key, len);
    k[len] = '\0';
    b->key = k;
    b->keylen = len;
    return SIO_OK;
}

int sb_has_field(const sample_builder *b, const char *name)
{
    for (size_t i = 0; i < b->nf; i++)
        if (strcmp(b->names + b->f[i].name_off, name) == 0)
            return 1;
    return 0;
}

/* Grow *buf to hold need bytes; capacity doubles, capped at max. */
static int grow(void **buf, size_t *cap, size_t need, size_t elem, size_t max)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap = ncap > max / 2 ? max : ncap * 2;
    if (ncap < need)
        return -1;
    void *nb = realloc(*buf, ncap * elem);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* Make room for `more` payload bytes plus the header reserve. The payload
 * moves to a larger pool block when the current one is too small. */
static int reserve_data(sample_builder *b, size_t more)
{
    size_t need = b->dlen + more + 1 + HDR_RESERVE;
    if (need <= b->dcap)
        return 0;
    if (b->dcap && need < b->dcap + b->dcap / 2)
        need = b->dcap + b->dcap / 2;
    size_t cap = 0;
    unsigned char *nb = sio_pool_get(need, &cap);
    if (!nb)
        return -1;
    if (b->dlen)
        memcpy(nb, b->data, b->dlen);
    sio_pool_put(b->data, b->dcap);
    b->data = nb;
    b->dcap = cap;
    return 0;
}

/* Room for one more field named name of len bytes (limits checked):
 * SIO_OK, SIO_ERR_LIMIT or SIO_ERR_NOMEM. */
static sio_code field_room(sample_builder *b, size_t nl, uint64_t len)
{
    if (b->nf >= b->fields_max)
        return SIO_ERR_LIMIT;
    if (len > b->data_max || b->dlen > b->data_max - len)
        return SIO_ERR_LIMIT;
    if (grow((void **)&b->f, &b->fcap, b->nf + 1, sizeof *b->f, SIZE_MAX) ||
        grow((void **)&b->names, &b->ncap, b->nlen + nl, 1, SIZE_MAX))
        return SIO_ERR_NOMEM;
    return SIO_OK;
}

/* Record the field (room made) with len bytes at the data's end. */
static void field_add(sample_builder *b, const char *name, size_t nl,
                      size_t len)
{
    memcpy(b->names + b->nlen, name, nl);
    b->f[b->nf].name_off = b->nlen;
    b->f[b->nf].data_off = b->dlen;
    b->f[b->nf].len = len;
    b->nlen += nl;
    b->nf++;
}

unsigned char *sb_begin_field(sample_builder *b, const char *name,
                              uint64_t len, sio_code *rc)
{
    size_t nl = strlen(name) + 1;
    *rc = field_room(b, nl, len);
    if (*rc == SIO_OK && reserve_data(b, (size_t)len))
        *rc = SIO_ERR_NOMEM;
    if (*rc)
        return NULL;
    field_add(b, name, nl, 0);
    return b->data + b->dlen;
}

sio_code sb_size_field(sample_builder *b, const char *name, uint64_t len)
{
    size_t nl = strlen(name) + 1;
    sio_code rc = field_room(b, nl, len);
    if (rc)
        return rc;
    field_add(b, name, nl, (size_t)len);
    b->dlen += (size_t)len;
    return SIO_OK;
}

void sb_end_field(sample_builder *b, size_t len)
{
    b->f[b->nf - 1].len = len;
    b->dlen += len;
}

sio_code sb_finish(sample_builder *b, const char *shard_url,
                   uint32_t shard_index, uint64_t index_in_shard,
                   const sio_sample **out)
{
    size_t ul = strlen(shard_url) + 1;
    size_t hoff = (b->dlen + HDR_ALIGN - 1) & ~(size_t)(HDR_ALIGN - 1);
    size_t hdr = sizeof(sample_impl) + b->nf * sizeof(sio_field);
    size_t total = hoff + hdr + b->keylen + 1 + b->nlen + ul;
    if (total > b->dcap) {
        /* The header did not fit the reserve (long key, names or URL). */
        size_t cap = 0;
        unsigned char *nb = sio_pool_get(total, &cap);
        if (!nb)
            return SIO_ERR_NOMEM;
        if (b->dlen)
            memcpy(nb, b->data, b->dlen);
        sio_pool_put(b->data, b->dcap);
        b->data = nb;
        b->dcap = cap;
    }
    unsigned char *block = b->data;
    sample_impl *si = (sample_impl *)(void *)(block + hoff);
    char *p = (char *)si + hdr;
    memcpy(p, b->key ? b->key : "", b->keylen + 1);
    si->pub.key = p;
    p += b->keylen + 1;
    memcpy(p, b->names, b->nlen);
    char *names = p;
    p += b->nlen;
    memcpy(p, shard_url, ul);
    si->pub.shard_url = p;
    si->block = block;
    si->cap = b->dcap;
    b->data = NULL;
    b->dcap = 0;
    for (size_t i = 0; i < b->nf; i++) {
        si->fields[i].name = names + b->f[i].name_off;
        si->fields[i].data = block + b->f[i].data_off;
        si->fields[i].len = b->f[i].len;
    }
    si->pub.fields = si->fields;
    si->pub.nfields = b->nf;
    si->pub.bytes = b->dlen;
    si->pub.shard_index = shard_index;
    si->pub.index_in_shard = index_in_shard;
    si->pub.global_index = UINT64_MAX;
    si->pub.source = 0; /* a mixed epoch sets its own */
    atomic_init(&si->refs, 1);
    sb_reset(b);
    *out = &si->pub;
    return SIO_OK;
}
