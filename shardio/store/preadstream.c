/*
 * preadstream.c — a sio_stream over bytes [offset, end) of an open file
 * descriptor, read with pread() (sio_stream_pread): how the plan's data
 * plane hands a sample's byte range to the tar reader without a backend.
 *
 * A file that ends before `end` has shrunk since it was indexed: the read
 * fails with SIO_ERR_CHANGED, never returns a short object. Over a
 * shard-cache entry (sio_pread_stream_checked) every read is checked
 * against the entry's block sums; a block that fails is SIO_ERR_CHANGED.
 *
 * Threading: one thread at a time, like every sio_stream. Ownership: the
 * descriptor is borrowed (the caller closes it after the stream).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store/backend_ops.h"
#include "store/store_int.h"

static sio_code pr_read(sio_stream *s, void *buf, size_t cap, size_t *got)
{
    pread_stream *p = (pread_stream *)s;
    *got = 0;
    if (p->pos >= p->end || cap == 0)
        return SIO_OK;
    if (cap > p->end - p->pos)
        cap = (size_t)(p->end - p->pos);
    if (cap > (size_t)1 << 30)
        cap = (size_t)1 << 30;
    if (p->cu) {
        /* Checked whole: a cache entry is never shorter than its size;
         * a range reaching past it was not indexed from this object. */
        if (p->end != UINT64_MAX && p->end > p->size) {
            snprintf(p->err, sizeof p->err,
                     "the entry ends at %llu, before the indexed %llu "
                     "(it shrank)",
                     (unsigned long long)p->size,
                     (unsigned long long)p->end);
            return SIO_ERR_CHANGED;
        }
        if (p->pos >= p->size)
            return SIO_OK;
        if (cap > p->size - p->pos)
            cap = (size_t)(p->size - p->pos);
        sio_code rc =
            p->nowait ? sio_cache_pread_nowait(p->cu, p->url, p->fd, p->sfd,
                                               p->size, buf, cap, p->pos,
                                               p->carry, p->err,
                                               sizeof p->err)
                      : sio_cache_pread(p->cu, p->url, p->fd, p->sfd, p->size,
                                        buf, cap, p->pos, p->carry, p->err,
                                        sizeof p->err);
        if (rc == SIO_ERR_AGAIN)
            p->nowait_missed = 1;
        if (rc)
            return rc;
        p->pos += cap;
        *got = cap;
        return SIO_OK;
    }
    if (p->wait) {
        /* Written so far: a read stops there (or fails as the writer
         * did, or ends with it). */
        uint64_t avail = 0;
        sio_code wrc = p->wait(p->wait_ud, p->pos + cap, &avail, p->err,
                               sizeof p->err);
        if (avail <= p->pos) {
            if (wrc)
                return wrc;
            if (p->end != UINT64_MAX) {
                snprintf(p->err, sizeof p->err,
                         "the file ends at %llu, before the indexed %llu",
                         (unsigned long long)p->pos,
                         (unsigned long long)p->end);
                return SIO_ERR_CHANGED;
            }
            return SIO_OK; /* its end */
        }
        if (cap > avail - p->pos)
            cap = (size_t)(avail - p->pos);
    }
    for (;;) {
        ssize_t r;
        if (p->nowait) {
            struct iovec v = {buf, cap};
            r = preadv2(p->fd, &v, 1, (off_t)p->pos, RWF_NOWAIT);
            if (r < 0 && errno == EAGAIN) {
                p->nowait_missed = 1;
                snprintf(p->err, sizeof p->err, "read at %llu: not in the "
                         "page cache", (unsigned long long)p->pos);
                return SIO_ERR_AGAIN;
            }
            if (r < 0 && (errno == EOPNOTSUPP || errno == EINVAL ||
                          errno == ENOSYS)) {
                p->nowait = 0; /* not here: read as usual */
                continue;
            }
            /* Short: the file's end, or pages not in memory after those
             * read (the range is warmed whole). */
            struct stat st;
            if (r >= 0 && (size_t)r < cap &&
                (fstat(p->fd, &st) != 0 ||
                 p->pos + (uint64_t)r < (uint64_t)st.st_size)) {
                p->nowait_missed = 1;
                snprintf(p->err, sizeof p->err, "read at %llu: not all in "
                         "the page cache", (unsigned long long)p->pos);
                return SIO_ERR_AGAIN;
            }
        } else {
            r = pread(p->fd, buf, cap, (off_t)p->pos);
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(p->err, sizeof p->err, "read at %llu: %s",
                     (unsigned long long)p->pos, strerror(errno));
            return SIO_ERR_IO;
        }
        if (r == 0 && p->end != UINT64_MAX) {
            snprintf(p->err, sizeof p->err,
                     "the file ends at %llu, before the indexed %llu "
                     "(it shrank)",
                     (unsigned long long)p->pos,
                     (unsigned long long)p->end);
            return SIO_ERR_CHANGED;
        }
        p->pos += (uint64_t)r;
        *got = (size_t)r;
        return SIO_OK;
    }
}

static const char *pr_errmsg(const sio_stream *s)
{
    return ((const pread_stream *)s)->err;
}

static void pr_close(sio_stream *s)
{
    free(s);
}

/* Bytes skipped were never read: where they are not there (past the
 * range's end, or the file's when it has none), the skip fails as the
 * tar reader fails on data that ends early, at the same offset. */
static sio_code pr_skip(sio_stream *s, uint64_t n)
{
    pread_stream *p = (pread_stream *)s;
    uint64_t lim = p->end;
    if (p->cu && p->size < lim)
        lim = p->size;
    if (p->wait) {
        /* Bytes skipped must be written first (the next header follows
         * them); a writer that ended before them fails the skip as its
         * read would. */
        uint64_t avail = 0, want = n > UINT64_MAX - p->pos ? UINT64_MAX
                                                          : p->pos + n;
        sio_code wrc = p->wait(p->wait_ud, want, &avail, p->err,
                               sizeof p->err);
        if (avail < want) {
            if (wrc) {
                p->pos = avail > p->pos ? avail : p->pos;
                return wrc;
            }
            if (avail < lim)
                lim = avail;
        }
    } else if (lim == UINT64_MAX) {
        struct stat st;
        if (!p->fsize_known && fstat(p->fd, &st) == 0) {
            p->fsize = (uint64_t)st.st_size;
            p->fsize_known = 1;
        }
        if (p->fsize_known)
            lim = p->fsize;
    }
    if (lim != UINT64_MAX && (p->pos >= lim || n > lim - p->pos)) {
        snprintf(p->err, sizeof p->err, "truncated tar archive at offset %llu",
                 (unsigned long long)(p->pos < lim ? lim : p->pos));
        p->pos = lim > p->pos ? lim : p->pos;
        return SIO_ERR_FORMAT;
    }
    p->pos += n;
    return SIO_OK;
}

static const sio_stream_ops pread_ops = {pr_read, pr_errmsg, pr_close, NULL,
                                         pr_skip};

void sio_pread_stream_init(pread_stream *p, int fd, uint64_t offset,
                           uint64_t end)
{
    memset(p, 0, sizeof *p);
    p->base.ops = &pread_ops;
    p->fd = fd;
    p->pos = offset;
    p->end = end;
}

void sio_pread_stream_checked(pread_stream *p, struct sio_cache_user *u,
                              const char *url, int sfd, uint64_t size,
                              sio_cache_carry *carry)
{
    p->carry = carry;
    p->cu = u;
    p->url = url;
    p->sfd = sfd;
    p->size = size;
}

void sio_stream_pread_wait(sio_stream *s, sio_pread_wait_fn fn, void *ud)
{
    pread_stream *p = (pread_stream *)s;
    p->wait = fn;
    p->wait_ud = fn ? ud : NULL;
}

sio_code sio_stream_pread(int fd, uint64_t offset, uint64_t end,
                          sio_stream **out)
{
    pread_stream *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p)
        return SIO_ERR_NOMEM;
    p->base.ops = &pread_ops;
    p->fd = fd;
    p->pos = offset;
    p->end = end;
    *out = &p->base;
    return SIO_OK;
}
