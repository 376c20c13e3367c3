/*
 * source.c — resolving a source string to the dataset's shard list.
 *
 * Listing order is bytewise-sorted per directory/prefix; brace patterns and
 * several specs keep their written order (docs/order.md, "The order of an epoch").
 * A sio_shardlist is immutable after it is built and may be shared by
 * threads. It owns its strings.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "shardio_index.h"
#include "store/store_int.h"

/* Objects a listing may hold beyond twice the shards it may add. */
#define SOURCE_LISTING_SLACK 64u

struct sio_shardlist {
    sio_objlist objs;
};

size_t sio_shardlist_count(const sio_shardlist *l)
{
    return l ? l->objs.n : 0;
}

const char *sio_shardlist_url(const sio_shardlist *l, size_t i)
{
    return i < l->objs.n ? l->objs.v[i].url : NULL;
}

uint64_t sio_shardlist_size(const sio_shardlist *l, size_t i)
{
    return i < l->objs.n ? l->objs.v[i].size : UINT64_MAX;
}

void sio_shardlist_free(sio_shardlist *l)
{
    if (!l)
        return;
    sio_objlist_free(&l->objs);
    free(l);
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
                         sio_objlist *out, sio_error *err)
{
    const sio_backend_ops *ops;
    void *ctx;
    sio_brace_iter *it = NULL;
    size_t i;
    sio_objlist dir;
    uint64_t size;
    sio_code rc;

    if (sio_objset_spec(spec))
        return sio_objset_resolve(io, spec, out, err);
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
            rc = sio_objlist_add(out, name, size);
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
            rc = sio_objlist_add(out, dir.v[i].url, dir.v[i].size);
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
        rc = sio_objlist_add(out, spec, size);
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
    l = calloc(1, sizeof *l);
    if (!l)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    sio_objlist_init(&l->objs,
                     max && max < SIO_SHARDS_MAX ? max : SIO_SHARDS_MAX);
    for (;;) {
        rc = sio_source_next(&p, spec, &got, err);
        if (rc || !got)
            break;
        rc = add_spec(io, spec, flags, &l->objs, err);
        if (rc)
            goto out;
    }
    if (rc)
        goto out;
    if (l->objs.n == 0) {
        rc = sio_seterr(err, SIO_ERR_NOTFOUND, "source has no shards: %s",
                        source);
        goto out;
    }
    *out = l;
    l = NULL;
out:
    sio_shardlist_free(l);
    return rc;
}

sio_code sio_shardlist_from_urls(const char *const *urls, size_t n,
                                 sio_shardlist **out, sio_error *err)
{
    sio_shardlist *l = calloc(1, sizeof *l);
    sio_code rc = SIO_OK;
    *out = NULL;
    if (!l)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    sio_objlist_init(&l->objs, SIO_SHARDS_MAX);
    for (size_t i = 0; i < n; i++) {
        rc = sio_objlist_add(&l->objs, urls[i], UINT64_MAX);
        if (rc) {
            sio_seterr(err, rc, "adding shard %zu: %s", i, sio_strerror(rc));
            sio_shardlist_free(l);
            return rc;
        }
    }
    *out = l;
    return SIO_OK;
}

sio_code sio_shardlist_concat(const sio_shardlist *const *parts, size_t n,
                              sio_shardlist **out, sio_error *err)
{
    sio_shardlist *l = calloc(1, sizeof *l);
    sio_code rc = SIO_OK;
    *out = NULL;
    if (!l)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    sio_objlist_init(&l->objs, SIO_SHARDS_MAX);
    for (size_t p = 0; p < n && rc == SIO_OK; p++)
        for (size_t i = 0; parts[p] && i < parts[p]->objs.n; i++) {
            rc = sio_objlist_add(&l->objs, parts[p]->objs.v[i].url,
                                 parts[p]->objs.v[i].size);
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
    *out = l;
    return SIO_OK;
}
