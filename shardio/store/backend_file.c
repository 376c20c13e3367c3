/*
 * backend_file.c — the local file backend: plain paths and file:// URLs.
 *
 * Threading: the context is the io's object-store stats (storestats.h:
 * atomics; NULL without an io), to which open, stat and list add a request
 * and its latency, and reads their bytes; each stream is one fd used by
 * one thread. Ownership: a stream owns its fd and closes it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/backend_ops.h"
#include "store/store_int.h"
#include "store/storestats.h"

/* Longest path we accept (PATH_MAX on Linux). */
#define FILE_PATH_MAX 4096

typedef struct file_stream {
    sio_stream base;
    sio_storestats *st; /* may be NULL */
    int fd;
    uint64_t left; /* bytes the range still allows (UINT64_MAX: all) */
    /* The file as opened: every read is followed by an fstat, and a file
     * whose size or modification time moved since (rewritten in place,
     * truncated, appended to) fails the read with SIO_ERR_CHANGED, so that
     * no sample is made of two versions of the file. That proves only
     * writes that start after the open: the open refuses a file a write
     * may be under way on (sio_file_settled). A file replaced by a
     * rename is not seen: the descriptor keeps the old one, whole. */
    off_t size;
    struct timespec mtim;
    char err[256];
} file_stream;

static pthread_once_t sigio_once = PTHREAD_ONCE_INIT;

/* A lease break sends SIGIO (the lease's owner is the process), whose
 * default action ends the process: ignored unless someone handles it. */
static void sigio_quiet(void)
{
    struct sigaction old;
    if (sigaction(SIGIO, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        (void)sigaction(SIGIO, &ign, NULL);
    }
}

int sio_file_settled(int fd, const struct stat *st, const struct timespec *c0,
                     char *buf, size_t len)
{
    /* mtime - c0 in ns, saturated: at or after c0, and less than a
     * second after it (a write takes the time of its start; a time
     * further ahead was set, by utime or a clock that was ahead, and a
     * write now would move it back: seen). */
    int64_t ahead = ((int64_t)st->st_mtim.tv_sec - (int64_t)c0->tv_sec);
    ahead = ahead > 2 ? 2 : ahead < -2 ? -2 : ahead;
    ahead = ahead * 1000000000 +
            ((int64_t)st->st_mtim.tv_nsec - (int64_t)c0->tv_nsec);
    if (ahead >= 0 && ahead < 1000000000) {
        snprintf(buf, len, "it was modified just now (a write may still be "
                           "under way)");
        return 0;
    }
#ifdef F_SETLEASE
    pthread_once(&sigio_once, sigio_quiet);
    /* Held for two system calls: a writer that opens the file meanwhile
     * waits for the release, not for a lease break time. */
    if (fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
        (void)fcntl(fd, F_SETLEASE, F_UNLCK);
    } else if (errno == EAGAIN) {
        snprintf(buf, len, "a process has it open for writing (a write may "
                           "be under way)");
        return 0;
    }
#else
    (void)fd;
#endif
    return 1;
}

int sio_file_settle_pause(unsigned attempt)
{
    if (attempt >= SIO_FILE_SETTLE_TRIES - 1)
        return 0;
    struct timespec ts = {0, (long)(attempt + 1) * 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return 1;
}

sio_code sio_file_open_settled(sio_file_opener open, void *ud, int *fd,
                               struct stat *st, char *why, size_t len)
{
    for (unsigned a = 0;; a++) {
        struct timespec c0;
        int check = 1;
        clock_gettime(CLOCK_REALTIME_COARSE, &c0);
        sio_code rc = open(ud, fd, st, &check);
        if (rc)
            return rc;
        if (!check || sio_file_settled(*fd, st, &c0, why, len))
            return SIO_OK;
        close(*fd);
        *fd = -1;
        if (!sio_file_settle_pause(a))
            return SIO_ERR_RETRY;
    }
}

static int file_matches(const char *url)
{
    if (strncmp(url, "file://", 7) == 0)
        return 1;
    return strstr(url, "://") == NULL;
}

/* Local path of url into buf: file:///p and file://localhost/p are /p with
 * %XX decoded; anything else is a plain path taken verbatim. */
static sio_code to_path(const char *url, char *buf, size_t len, sio_error *err)
{
    const char *p = url;
    size_t o = 0;
    int decode = 0;
    if (strncmp(url, "file://", 7) == 0) {
        p = url + 7;
        if (strncmp(p, "localhost/", 10) == 0)
            p += 9;
        if (*p != '/')
            return sio_seterr(err, SIO_ERR_INVALID,
                              "file URL needs an absolute path url=%s", url);
        decode = 1;
    }
    for (; *p; p++) {
        int c = (unsigned char)*p;
        if (decode && c == '%') {
            int h = sio_hexval(p[1]), l = h >= 0 ? sio_hexval(p[2]) : -1;
            if (h < 0 || l < 0)
                return sio_seterr(err, SIO_ERR_INVALID,
                                  "bad percent-escape in url=%s", url);
            c = h * 16 + l;
            p += 2;
            if (c == 0)
                return sio_seterr(err, SIO_ERR_INVALID, "NUL in url=%s", url);
        }
        if (o + 1 >= len)
            return sio_seterr(err, SIO_ERR_LIMIT, "path too long url=%s", url);
        buf[o++] = (char)c;
    }
    if (o == 0)
        return sio_seterr(err, SIO_ERR_INVALID, "empty path");
    buf[o] = '\0';
    return SIO_OK;
}

/* A request of the file backend starts: counted, timed by its caller. */
static void req_start(sio_storestats *st, struct timespec *t0)
{
    if (!st)
        return;
    atomic_fetch_add(&st->b[SIO_STORE_FILE].requests, 1);
    atomic_fetch_add(&st->b[SIO_STORE_FILE].inflight, 1);
    clock_gettime(CLOCK_MONOTONIC, t0);
}

static sio_code req_end(sio_storestats *st, const struct timespec *t0,
                        sio_store_op op, sio_code rc)
{
    if (!st)
        return rc;
    sio_hist_observe(&st->latency[SIO_STORE_FILE][op], &sio_hist_latency,
                     sio_hist_ns_since(t0));
    atomic_fetch_sub(&st->b[SIO_STORE_FILE].inflight, 1);
    if (rc != SIO_OK)
        atomic_fetch_add(&st->b[SIO_STORE_FILE].errors, 1);
    return rc;
}

static sio_code file_create(sio_io *io, void **ctx, sio_error *err)
{
    *ctx = sio_io_storestats(io);
    return SIO_OK;
}

static sio_code errno_code(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR: return SIO_ERR_NOTFOUND;
    case ENOMEM: return SIO_ERR_NOMEM;
    case EACCES:
    case EPERM: return SIO_ERR_AUTH;
    default: return SIO_ERR_IO;
    }
}

static sio_code file_stat(void *ctx, const char *url, uint64_t *size,
                          sio_error *err)
{
    char path[FILE_PATH_MAX];
    struct stat st;
    struct timespec t0 = {0, 0};
    sio_code rc = to_path(url, path, sizeof path, err);
    if (rc)
        return rc;
    req_start(ctx, &t0);
    if (stat(path, &st) != 0)
        rc = sio_seterr(err, errno_code(errno), "stat url=%s: %s", url,
                        strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = sio_seterr(err, SIO_ERR_INVALID, "not a regular file url=%s",
                        url);
    else
        *size = (uint64_t)st.st_size;
    return req_end(ctx, &t0, SIO_STORE_HEAD, rc);
}

static int file_is_container(void *ctx, const char *url)
{
    char path[FILE_PATH_MAX];
    struct stat st;
    if (to_path(url, path, sizeof path, NULL) != SIO_OK)
        return 0;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static sio_code file_list(void *ctx, const char *url, sio_objlist *out,
                          sio_error *err)
{
    char path[FILE_PATH_MAX], child[FILE_PATH_MAX * 2];
    sio_code rc = to_path(url, path, sizeof path, err);
    DIR *d = NULL;
    struct dirent *e;
    size_t ul = strlen(url);
    const char *sep = (ul && url[ul - 1] == '/') ? "" : "/";
    struct timespec t0 = {0, 0};
    if (rc)
        return rc;
    req_start(ctx, &t0);
    d = opendir(path);
    if (!d) {
        rc = sio_seterr(err, errno_code(errno), "opendir url=%s: %s", url,
                        strerror(errno));
        goto out;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.' &&
            (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0)))
            continue;
        snprintf(child, sizeof child, "%s%s%s", path,
                 path[strlen(path) - 1] == '/' ? "" : "/", e->d_name);
        if (stat(child, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        /* Keep the caller's spelling (plain path or file:// URL). */
        if (strncmp(url, "file://", 7) == 0)
            snprintf(child, sizeof child, "%s%s%s", url, sep, e->d_name);
        rc = sio_objlist_add(out, child, (uint64_t)st.st_size);
        if (rc) {
            sio_seterr(err, rc, "listing url=%s: %s", url, sio_strerror(rc));
            goto out;
        }
    }
out:
    if (d)
        closedir(d);
    return req_end(ctx, &t0, SIO_STORE_LIST, rc);
}

static sio_code fs_read(sio_stream *s, void *buf, size_t cap, size_t *got)
{
    file_stream *fs = (file_stream *)s;
    if (cap > fs->left)
        cap = (size_t)fs->left;
    if (cap == 0) {
        *got = 0;
        return SIO_OK;
    }
    for (;;) {
        ssize_t r = read(fs->fd, buf, cap);
        struct stat now;
        if (r >= 0 && fstat(fs->fd, &now) == 0 &&
            (now.st_size != fs->size ||
             now.st_mtim.tv_sec != fs->mtim.tv_sec ||
             now.st_mtim.tv_nsec != fs->mtim.tv_nsec)) {
            snprintf(fs->err, sizeof fs->err,
                     "the file changed while it was read (size %lld, now "
                     "%lld, or its modification time moved)",
                     (long long)fs->size, (long long)now.st_size);
            *got = 0;
            return SIO_ERR_CHANGED;
        }
        if (r >= 0) {
            *got = (size_t)r;
            fs->left -= (uint64_t)r;
            if (fs->st && r > 0)
                atomic_fetch_add(&fs->st->b[SIO_STORE_FILE].bytes,
                                 (uint64_t)r);
            return SIO_OK;
        }
        if (errno == EINTR)
            continue;
        snprintf(fs->err, sizeof fs->err, "read: %s", strerror(errno));
        *got = 0;
        return SIO_ERR_IO;
    }
}

static const char *fs_errmsg(const sio_stream *s)
{
    return ((const file_stream *)s)->err;
}

static void fs_close(sio_stream *s)
{
    file_stream *fs = (file_stream *)s;
    if (fs->fd >= 0)
        close(fs->fd);
    free(fs);
}

static const sio_stream_ops file_stream_ops = {fs_read, fs_errmsg, fs_close,
                                              NULL, NULL};

/* Open path (url's) read-only: a regular file, else an error; *oserr is
 * open()'s errno when it failed (else 0); *st what fstat said of it. */
static sio_code open_regular(const char *url, const char *path, int *fd,
                             int *oserr, struct stat *stp, sio_error *err)
{
    struct stat st;
    *oserr = 0;
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        *oserr = errno;
        return sio_seterr(err, errno_code(*oserr), "open url=%s: %s", url,
                          strerror(*oserr));
    }
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        return sio_seterr(err, SIO_ERR_INVALID, "not a regular file url=%s",
                          url);
    }
    if (stp)
        *stp = st;
    return SIO_OK;
}

/* open_regular as a sio_file_opener. */
struct regular_open {
    const char *url, *path;
    sio_error *err;
};

static sio_code regular_opener(void *ud, int *fd, struct stat *st,
                               int *check)
{
    const struct regular_open *ro = ud;
    int oserr;
    (void)check;
    return open_regular(ro->url, ro->path, fd, &oserr, st, ro->err);
}

static sio_code file_open_range(void *ctx, const char *url, uint64_t offset,
                                uint64_t end, sio_stream **out,
                                sio_error *err)
{
    char path[FILE_PATH_MAX];
    file_stream *fs = NULL;
    struct timespec t0 = {0, 0};
    sio_code rc = to_path(url, path, sizeof path, err);
    if (rc)
        return rc;
    fs = calloc(1, sizeof *fs);
    if (!fs)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    req_start(ctx, &t0);
    fs->base.ops = &file_stream_ops;
    fs->st = ctx;
    fs->left = end > offset ? end - offset : 0;
    struct stat st;
    char why[120];
    struct regular_open ro = {url, path, err};
    /* Its mtime and size are what every read is checked against: taken
     * from a file no write is under way on (sio_file_open_settled: a
     * write that is ending is waited for a few clock ticks); then a
     * transient failure, which a reader retries with its backoff as it
     * retries a store's. */
    rc = sio_file_open_settled(regular_opener, &ro, &fs->fd, &st, why,
                               sizeof why);
    if (rc == SIO_ERR_RETRY)
        rc = sio_seterr(err, SIO_ERR_RETRY, "url=%s is being written: %s",
                        url, why);
    if (rc)
        goto out;
    fs->size = st.st_size;
    fs->mtim = st.st_mtim;
    if (offset && lseek(fs->fd, (off_t)offset, SEEK_SET) < 0) {
        rc = sio_seterr(err, SIO_ERR_IO, "seek url=%s: %s", url,
                        strerror(errno));
        goto out;
    }
    (void)posix_fadvise(fs->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    *out = &fs->base;
    fs = NULL;
out:
    if (fs)
        fs_close(&fs->base);
    return req_end(ctx, &t0, SIO_STORE_GET, rc);
}

static sio_code file_open(void *ctx, const char *url, uint64_t offset,
                          sio_stream **out, sio_error *err)
{
    return file_open_range(ctx, url, offset, UINT64_MAX, out, err);
}

/* The file itself, for pread() in place (counted as an open). */
static sio_code file_open_fd(void *ctx, const char *url, int *fd,
                             sio_error *err)
{
    char path[FILE_PATH_MAX];
    struct timespec t0 = {0, 0};
    sio_code rc = to_path(url, path, sizeof path, err);
    *fd = -1;
    if (rc)
        return rc;
    req_start(ctx, &t0);
    int oserr;
    rc = open_regular(url, path, fd, &oserr, NULL, err);
    /* Out of descriptors: a limit of the moment, not the file's fault. */
    if (oserr == EMFILE || oserr == ENFILE)
        rc = SIO_ERR_BUSY;
    return req_end(ctx, &t0, SIO_STORE_GET, rc);
}

const sio_backend_ops sio_backend_file = {
    .name = "file",
    .matches = file_matches,
    .list = file_list,
    .stat = file_stat,
    .is_container = file_is_container,
    .open = file_open,
    .destroy = NULL,
    .create = file_create,
    .open_range = file_open_range,
    .open_fd = file_open_fd,
};
