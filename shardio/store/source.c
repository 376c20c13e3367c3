/*
 * source.c — resolving a source string to the dataset's shard list.
 *
 * Listing order is bytewise-sorted per directory/prefix; brace patterns and
 * several specs keep their written order (docs/order.md, "The order of an epoch").
 * A sio_shardlist is immutable after it is built and may be shared by
 * threads. It owns its strings.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "shardio_index.h"
#include "store/store_int.h"

/* Objects a listing may hold beyond twice the shards it may add. */
#define SOURCE_LISTING_SLACK 64u

/*
 * The shard list keeps its URLs packed: one buffer of NUL-terminated names
 * back to back, and per shard its name's offset and its size (16 bytes
 * plus the name, where one malloc per name cost a 48-byte chunk for a
 * 33-byte URL). The three buffers grow by doubling and are trimmed to
 * their contents once the list is built; large ones are mmapped by malloc,
 * so freeing the list gives their pages back to the system.
 */
struct sio_shardlist {
    char *names;     /* names[off[i]..]: URL of shard i */
    size_t nbytes, bcap;
    uint64_t *off;
    uint64_t *size;  /* UINT64_MAX: unknown */
    size_t n, cap;
    size_t max;      /* shards it may hold (<= SIO_SHARDS_MAX) */
};

size_t sio_shardlist_count(const sio_shardlist *l)
{
    return l ? l->n : 0;
}

const char *sio_shardlist_url(const sio_shardlist *l, size_t i)
{
    return i < l->n ? l->names + l->off[i] : NULL;
}

uint64_t sio_shardlist_size(const sio_shardlist *l, size_t i)
{
    return i < l->n ? l->size[i] : UINT64_MAX;
}

void sio_shardlist_free(sio_shardlist *l)
{
    if (!l)
        return;
    free(l->names);
    free(l->off);
    free(l->size);
    free(l);
}

/* A new empty list of at most max shards (0 or above SIO_SHARDS_MAX:
 * SIO_SHARDS_MAX). */
static sio_shardlist *list_new(size_t max)
{
    sio_shardlist *l = calloc(1, sizeof *l);
    if (l)
        l->max = max && max < SIO_SHARDS_MAX ? max : SIO_SHARDS_MAX;
    return l;
}

/* Append url (copied) with its size: SIO_ERR_LIMIT past l->max shards,
 * SIO_ERR_NOMEM. */
static sio_code list_add(sio_shardlist *l, const char *url, uint64_t size)
{
    size_t len = strlen(url) + 1;
    if (l->n >= l->max)
        return SIO_ERR_LIMIT;
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        if (ncap > l->max)
            ncap = l->max;
        uint64_t *no = realloc(l->off, ncap * sizeof *no);
        if (!no)
            return SIO_ERR_NOMEM;
        l->off = no;
        uint64_t *ns = realloc(l->size, ncap * sizeof *ns);
        if (!ns)
            return SIO_ERR_NOMEM;
        l->size = ns;
        l->cap = ncap;
    }
    if (len > l->bcap - l->nbytes) {
        size_t nb = l->bcap ? l->bcap : 4096;
        while (nb - l->nbytes < len) {
            if (nb > SIZE_MAX / 2)
                return SIO_ERR_NOMEM;
            nb *= 2;
        }
        char *p = realloc(l->names, nb);
        if (!p)
            return SIO_ERR_NOMEM;
        l->names = p;
        l->bcap = nb;
    }
    memcpy(l->names + l->nbytes, url, len);
    l->off[l->n] = l->nbytes;
    l->size[l->n] = size;
    l->nbytes += len;
    l->n++;
    return SIO_OK;
}

/* Trim the buffers to the list's contents (a failed shrink keeps them). */
static void list_trim(sio_shardlist *l)
{
    if (l->n < l->cap && l->n) {
        uint64_t *no = realloc(l->off, l->n * sizeof *no);
        if (no)
            l->off = no;
        uint64_t *ns = realloc(l->size, l->n * sizeof *ns);
        if (ns)
            l->size = ns;
        l->cap = l->n;
    }
    if (l->nbytes < l->bcap && l->nbytes) {
        char *p = realloc(l->names, l->nbytes);
        if (p)
            l->names = p;
        l->bcap = l->nbytes;
    }
}

/* Does the name look like a shard (.tar, .tar.gz, .tgz, .tar.zst, .zip)? */
static int is_shard_name(const char *url)
{
    static const char *const ext[] = {".tar", ".tar.gz", ".tgz", ".tar.zst",
                                      ".zip"};
    size_t ul = strlen(url);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t el = strlen(ext[i]);
        if (ul > el && strcasecmp(url + ul - el, ext[i]) == 0)
            return 1;
    }
    return 0;
}

/* Is name in the sorted listing? */
static int in_listing(const sio_objlist *dir, const char *name)
{
    size_t lo = 0, hi = dir->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(dir->v[mid].url, name);
        if (c == 0)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* Add one spec (directory/prefix, brace pattern or single object). */
static sio_code add_spec(sio_io *io, const char *spec, unsigned flags,
                         sio_shardlist *out, sio_error *err)
{
    const sio_backend_ops *ops;
    void *ctx;
    sio_brace_iter *it = NULL;
    size_t i;
    sio_objlist dir;
    uint64_t size;
    sio_code rc;

    if (sio_objset_spec(spec)) {
        /* the set's virtual shards (at most what the list has left), then
         * copied into the list */
        if (out->n >= out->max)
            return sio_seterr(err, SIO_ERR_LIMIT, "too many shards (max %zu)",
                              out->max);
        sio_objlist_init(&dir, out->max - out->n);
        rc = sio_objset_resolve(io, spec, &dir, err);
        for (i = 0; rc == SIO_OK && i < dir.n; i++) {
            rc = list_add(out, dir.v[i].url, dir.v[i].size);
            if (rc)
                sio_seterr(err, rc, "too many shards (max %zu)", out->max);
        }
        goto out;
    }
    rc = sio_io_backend(io, spec, &ops, &ctx, err);
    /* A listing holds the shards and what lies beside them (an index
     * sidecar per shard, a manifest): it stops at twice the shards the
     * list may still take, plus a little. */
    sio_objlist_init(&dir, out->max - out->n < SIO_SHARDS_MAX / 2
                               ? 2 * (out->max - out->n) + SOURCE_LISTING_SLACK
                               : SIO_SHARDS_MAX);
    if (rc)
        goto out;
    if (sio_source_has_braces(spec)) {
        /* Counted before a name is made, at most what the list has left;
         * then named one at a time, straight into the list. */
        uint64_t count;
        const char *name;
        rc = sio_brace_iter_open(spec, out->max - out->n, &it, &count, err);
        if (rc == SIO_ERR_LIMIT && sio_brace_count(spec, &count, NULL) == 0)
            sio_seterr(err, rc, "too many shards (max %zu): a pattern names "
                       "%llu", out->max, (unsigned long long)count);
        while (rc == SIO_OK &&
               (rc = sio_brace_iter_next(it, &name, err)) == SIO_OK &&
               name) {
            size = UINT64_MAX;
            /* Local shards are checked now; remote ones are not probed one
             * by one (no listing, no HEAD storm): a missing one surfaces
             * when it is read and follows on_error. */
            if (ops == &sio_backend_file) {
                rc = ops->stat(ctx, name, &size, err);
                if (rc)
                    goto out;
            }
            rc = list_add(out, name, size);
            if (rc) {
                sio_seterr(err, rc, "too many shards (max %zu)", out->max);
                goto out;
            }
        }
        if (rc)
            goto out;
    } else if (ops->is_container(ctx, spec)) {
        rc = ops->list(ctx, spec, &dir, err);
        if (rc == SIO_ERR_LIMIT)
            sio_seterr(err, rc,
                       "too many shards (max %zu): the listing of %s holds "
                       "more than %zu objects", out->max, spec, dir.max);
        if (rc)
            goto out;
        sio_objlist_sort(&dir);
        for (i = 0; i < dir.n; i++) {
            if (!(flags & SIO_RESOLVE_ALL_OBJECTS) &&
                !is_shard_name(dir.v[i].url))
                continue;
            /* The listing shows the shard's index sidecar: the index asks
             * the store for it (and, unless told to probe, for no other:
             * only the sidecars that exist are remembered, so the memory
             * follows them, not the shards). */
            if (is_shard_name(dir.v[i].url)) {
                size_t ul = strlen(dir.v[i].url);
                char *side = malloc(ul + sizeof SIO_INDEX_SUFFIX);
                if (side) {
                    memcpy(side, dir.v[i].url, ul);
                    memcpy(side + ul, SIO_INDEX_SUFFIX,
                           sizeof SIO_INDEX_SUFFIX);
                    if (in_listing(&dir, side))
                        sio_io_sidecar_hint(io, dir.v[i].url, 1);
                    free(side);
                }
            }
            rc = list_add(out, dir.v[i].url, dir.v[i].size);
            if (rc) {
                sio_seterr(err, rc, "too many shards (max %zu)", out->max);
                goto out;
            }
        }
    } else {
        size = UINT64_MAX;
        rc = ops->stat(ctx, spec, &size, err);
        if (rc)
            goto out;
        rc = list_add(out, spec, size);
        if (rc)
            sio_seterr(err, rc, "too many shards (max %zu)", out->max);
    }
out:
    sio_brace_iter_free(it);
    sio_objlist_free(&dir);
    return rc;
}

sio_code sio_shardlist_resolve(sio_io *io, const char *source,
                               sio_shardlist **out, sio_error *err)
{
    return sio_shardlist_resolve_ex(io, source, 0, out, err);
}

sio_code sio_shardlist_resolve_ex(sio_io *io, const char *source,
                                  unsigned flags, sio_shardlist **out,
                                  sio_error *err)
{
    return sio_shardlist_resolve_max(io, source, flags, SIO_SHARDS_MAX, out,
                                     err);
}

sio_code sio_shardlist_resolve_max(sio_io *io, const char *source,
                                   unsigned flags, size_t max,
                                   sio_shardlist **out, sio_error *err)
{
    sio_shardlist *l = NULL;
    char spec[SIO_SOURCE_SPEC_MAX];
    const char *p = source;
    int got;
    sio_code rc = SIO_OK;

    *out = NULL;
    if (!source)
        return sio_seterr(err, SIO_ERR_INVALID, "no source");
    l = list_new(max);
    if (!l)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (;;) {
        rc = sio_source_next(&p, spec, &got, err);
        if (rc || !got)
            break;
        rc = add_spec(io, spec, flags, l, err);
        if (rc)
            goto out;
    }
    if (rc)
        goto out;
    if (l->n == 0) {
        rc = sio_seterr(err, SIO_ERR_NOTFOUND, "source has no shards: %s",
                        source);
        goto out;
    }
    list_trim(l);
    *out = l;
    l = NULL;
out:
    sio_shardlist_free(l);
    return rc;
}

sio_code sio_shardlist_from_urls(const char *const *urls, size_t n,
                                 sio_shardlist **out, sio_error *err)
{
    sio_shardlist *l = list_new(SIO_SHARDS_MAX);
    sio_code rc = SIO_OK;
    *out = NULL;
    if (!l)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        rc = list_add(l, urls[i], UINT64_MAX);
        if (rc) {
            sio_seterr(err, rc, "adding shard %zu: %s", i, sio_strerror(rc));
            sio_shardlist_free(l);
            return rc;
        }
    }
    list_trim(l);
    *out = l;
    return SIO_OK;
}

sio_code sio_shardlist_concat(const sio_shardlist *const *parts, size_t n,
                              sio_shardlist **out, sio_error *err)
{
    sio_shardlist *l = list_new(SIO_SHARDS_MAX);
    sio_code rc = SIO_OK;
    *out = NULL;
    if (!l)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (size_t p = 0; p < n && rc == SIO_OK; p++)
        for (size_t i = 0; parts[p] && i < parts[p]->n; i++) {
            rc = list_add(l, sio_shardlist_url(parts[p], i), parts[p]->size[i]);
            if (rc) {
                sio_seterr(err, rc, "too many shards (max %u)",
                           SIO_SHARDS_MAX);
                break;
            }
        }
    if (rc) {
        sio_shardlist_free(l);
        return rc;
    }
    list_trim(l);
    *out = l;
    return SIO_OK;
}
