/*
 * store_int.h — libshardio's store internals shared with the rest of the
 * library (internal): limits, object lists (error setting and logging are
 * in core/core_int.h, included here),
 * the io's accessors, the shard cache's entry point, memory streams.
 *
 * Threading: the object list functions work on one list from one thread;
 * sio_io accessors are thread-safe after sio_io_create (except
 * sio_io_register_backend, called before the io is shared).
 * Ownership: an object list owns its URLs (sio_objlist_free).
 */
#ifndef SHARDIO_STORE_INT_H
#define SHARDIO_STORE_INT_H

#include <sys/stat.h>
#include <time.h>

#include "shardio.h"
#include "shardio_index.h"
#include "core/core_int.h"
#include "store/backend_ops.h"

/* One object found by a listing. */
typedef struct sio_object {
    char *url;     /* malloc'd, owned by the list */
    uint64_t size; /* UINT64_MAX when unknown */
} sio_object;

/* A growable list of objects with a maximum fixed at creation. */
struct sio_objlist {
    sio_object *v;
    size_t n, cap;
    size_t max; /* SIO_ERR_LIMIT beyond this many objects */
};

/* Sanity limit on the number of shards in one dataset. */
#define SIO_SHARDS_MAX 10000000u

/* Longest single spec inside a source string. */
#define SIO_SOURCE_SPEC_MAX 8192u

/* The next spec of the source string at *cursor (specs are separated by
 * "::" or whitespace; "::" inside [...] is an IPv6 host) copied into
 * spec[SIO_SOURCE_SPEC_MAX], *got 1; *got 0 at the end. SIO_ERR_LIMIT for
 * a longer spec. Advances *cursor (srccheck.c). */
sio_code sio_source_next(const char **cursor, char *spec, int *got,
                         sio_error *err);
/* Does spec hold a brace group ('{' with a '}' after it)? */
int sio_source_has_braces(const char *spec);

/* A brace pattern's names one at a time, in order (brace.c): open counts
 * them (SIO_ERR_LIMIT beyond max, before anything is expanded); each next
 * gives the next name in *name, valid until the following call (NULL at
 * the end). One thread at a time; free with sio_brace_iter_free. */
typedef struct sio_brace_iter sio_brace_iter;
sio_code sio_brace_iter_open(const char *pattern, uint64_t max,
                             sio_brace_iter **it, uint64_t *count,
                             sio_error *err);
sio_code sio_brace_iter_next(sio_brace_iter *it, const char **name,
                             sio_error *err);
void sio_brace_iter_free(sio_brace_iter *it);

void sio_objlist_init(sio_objlist *l, size_t max);
/* Append a copy of url. */
sio_code sio_objlist_add(sio_objlist *l, const char *url, uint64_t size);
void sio_objlist_free(sio_objlist *l);
/* Sort bytewise by URL (a listing's order). */
void sio_objlist_sort(sio_objlist *l);

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

#define SIO_CACHE_BLOCK 4096u /* bytes of an entry summed together */

/* A complete shard-cache entry of url that this job has checked: 1, with
 * new read-only descriptors of its bytes in *fd and of its block sums in
 * *sfd when fd is not NULL (a cache hit when count). Every byte read
 * through *fd must pass sio_cache_check before it is used. */
int sio_cache_entry_fd(struct sio_cache_user *u, const char *url, int *fd,
                       int *sfd, int count);
/* Wait while url's entry is being filled: 1 when it is complete then, 0
 * when there is none or its fill stopped short (a reader that read the
 * bytes it needed may end before the fill has written the object's last
 * bytes and marked it complete). */
int sio_cache_wait_filled(struct sio_cache_user *u, const char *url);
/* Bytes of the cache's budget not charged now (a snapshot). */
uint64_t sio_cache_user_room(struct sio_cache_user *u);
/* The size a HEAD told this job of url (an object whose size no listing
 * gave), or UINT64_MAX when none did. NULL u: UINT64_MAX. */
uint64_t sio_cache_user_known_size(struct sio_cache_user *u,
                                   const char *url);
/* The same, asked of the store (a HEAD through ops/ctx) when no HEAD told
 * it yet; kept for the next reads of url, which admit it to the cache by
 * it, and taken as this job's check of an entry of url (the validator):
 * *stale set when that entry is of another version of the object (it is
 * dropped). UINT64_MAX when the store does not tell. */
uint64_t sio_cache_user_head_size(struct sio_cache_user *u,
                                  const sio_backend_ops *ops,
                                  void *ctx, const char *url, int *stale);

/* Check bytes [off, off + len) of url's entry (of size bytes) read
 * through fd, sums sfd (sio_cache_entry_fd): buf holds those bytes (NULL:
 * they are read again from fd); the rest of the edge blocks is read from
 * fd. SIO_OK, or SIO_ERR_CHANGED when a block fails its sum or cannot be
 * read: the entry is dropped (a later open fills it again from the store),
 * counted (sio_cache_stats.corrupt) and logged; msg (cap bytes) says
 * which block. Thread-safe. */
sio_code sio_cache_check(struct sio_cache_user *u, const char *url, int fd,
                         int sfd, uint64_t size, uint64_t off,
                         const void *buf, size_t len, char *msg, size_t cap);

/* What a reader of one entry descriptor keeps between checked reads:
 * the last block a read ended inside, checked, so that a read going on
 * from there (an extent read in pieces) neither reads nor sums it again;
 * and a window of the entry's sums (those of 4 MiB of data), so that
 * reads near each other read the sums once. A complete entry's sums never
 * change. Belongs to one descriptor: zero it (calloc) for a new one. */
#define SIO_CACHE_SUMS_WINDOW 1024u
typedef struct sio_cache_carry {
    uint64_t blk;   /* block index */
    uint64_t len;   /* bytes of the block held (0: none) */
    unsigned char b[SIO_CACHE_BLOCK];
    uint64_t sw_first;  /* block of the window's first sum */
    uint64_t sw_n;      /* sums in the window (0: none) */
    unsigned char sw[SIO_CACHE_SUMS_WINDOW * 4];
} sio_cache_carry;

/* Read bytes [off, off + len) of url's entry through fd into buf and
 * check them as sio_cache_check does (the edge blocks' other bytes come
 * in the same preadv; with carry, a first block it holds is not read
 * again, and the last block, when the range ends inside it, is kept).
 * SIO_OK with every byte read, else as sio_cache_check (a file that ends
 * early counts as damaged). */
sio_code sio_cache_pread(struct sio_cache_user *u, const char *url, int fd,
                         int sfd, uint64_t size, void *buf, size_t len,
                         uint64_t off, sio_cache_carry *carry, char *msg,
                         size_t cap);
/* The same, waiting for nothing: SIO_ERR_AGAIN (nothing checked, nothing
 * counted) when the range is not all in the page cache. */
sio_code sio_cache_pread_nowait(struct sio_cache_user *u, const char *url,
                                int fd, int sfd, uint64_t size, void *buf,
                                size_t len, uint64_t off,
                                sio_cache_carry *carry, char *msg,
                                size_t cap);

/* The on-disk formats of the cache (shardio_cache.h), for the loader,
 * tests and the fuzzer. */
#define SIO_CACHE_SUMS_HDR 32u  /* the sums file's header */
#define SIO_CACHE_URL_MAX 8192u /* longest URL an entry keeps */
/* The sums header of an object of size bytes. */
void sio_cache_sums_header(uint64_t size, unsigned char out[32]);
/* Parse a sums header (n bytes at p): 0 and the object's *size, or -1
 * (bad magic, version, block size, reserved bytes or header sum). */
int sio_cache_sums_header_parse(const unsigned char *p, size_t n,
                                uint64_t *size);
/* What an entry on disk may be trusted with. */
typedef struct sio_cache_entry_info {
    char url[SIO_CACHE_URL_MAX + 1];
    char validator[SIO_VALIDATOR_MAX];
    uint64_t size;  /* the object's */
    uint64_t have;  /* bytes usable from offset 0: a multiple of
                       SIO_CACHE_BLOCK, or size */
    int complete;   /* have == size, every sum present */
} sio_cache_entry_info;
/* Judge an entry found on disk from its metadata file's text (meta, mlen
 * bytes, not NUL-terminated), the first hlen bytes of its sums file (hdr),
 * the sums file's length and the data file's length: 0 and *out (have cut
 * to what the sums and data cover, at a block boundary unless complete),
 * or -1: not an entry (remove it). Pure: no I/O, any input. */
int sio_cache_entry_parse(const char *meta, size_t mlen,
                          const unsigned char *hdr, size_t hlen,
                          uint64_t sums_len, uint64_t data_len,
                          sio_cache_entry_info *out);

/* Bytes a job read from complete cache entries in place (the plan's data
 * plane): counted as cache hit bytes. */
void sio_cache_add_hit_bytes(struct sio_cache_user *u, uint64_t n);
/* Is url a local file (its backend opens descriptors itself)? */
int sio_io_url_is_file(sio_io *io, const char *url);

/*
 * Whether a local file's bytes can be taken as one version of it, from
 * the fstat st of its descriptor fd made after c0, CLOCK_REALTIME_COARSE
 * read before it. Readers prove the bytes they read are the ones they
 * first saw by comparing mtime and size after every read; that holds
 * only for writes that start after the identity was taken. So it is not
 * settled (0, why in buf) when some process holds the file open for
 * writing (a read lease cannot be had: a write may be copying its bytes
 * in, after it moved mtime), or when mtime is not before c0 but within
 * a second of it (written in the clock's current tick: a write in the
 * same tick would not move it; a time further ahead was set, and a write
 * now would move it back).
 * Where the kernel cannot tell (leases refused: not the file's owner
 * without CAP_LEASE, a filesystem without them) only mtime counts.
 * SIGIO, which a lease break would send, is ignored from the first call
 * on where it had its default action.
 */
int sio_file_settled(int fd, const struct stat *st, const struct timespec *c0,
                     char *buf, size_t len);
/* Before look `attempt` + 2 at a file that was not settled: 1 after a
 * pause of a clock tick or two (5 ms x (attempt + 1)), 0 when the
 * SIO_FILE_SETTLE_TRIES looks (about 30 ms in all) are spent. */
#define SIO_FILE_SETTLE_TRIES 4u
int sio_file_settle_pause(unsigned attempt);
/* Opens a file for sio_file_open_settled: SIO_OK with *fd and *st (and
 * *check 0 when the file needs no look: not a local file), else a code
 * (nothing open). */
typedef sio_code (*sio_file_opener)(void *ud, int *fd, struct stat *st,
                                    int *check);
/* A file opened by open until no write is under way on it
 * (sio_file_settled), looked at again for a few clock ticks
 * (sio_file_settle_pause): SIO_OK with *fd (the caller's to close) and
 * *st; SIO_ERR_RETRY with why when a write is still under way after the
 * last look; else open's code. */
sio_code sio_file_open_settled(sio_file_opener open, void *ud, int *fd,
                               struct stat *st, char *why, size_t len);

/* The io's logger (for store code with no other). */
const sio_logger *sio_io_logger(const sio_io *io);

/* What listings told about index sidecars: shard url was listed with
 * "<url>.scidx" beside it (present 1; listings record only those, so the
 * memory follows the sidecars that exist). The index asks a remote store
 * for a sidecar only where a listing showed one (or where it was told to
 * probe), so that a store is not sent a request per shard for files that
 * are not there. At most SIO_IO_SIDECAR_HINTS_MAX are remembered (beyond
 * that: unknown). Thread-safe. */
#define SIO_IO_SIDECAR_HINTS_MAX (1u << 22)
void sio_io_sidecar_hint(sio_io *io, const char *url, int present);
/* 1 present, 0 absent, -1 no listing said. */
int sio_io_sidecar_known(sio_io *io, const char *url);

/* sio_io_open_fd for readers that check what they read: a cache entry's
 * block sums come in *sfd (-1 for a local file, whose bytes have no
 * sums); every byte read through *fd of an entry must then pass
 * sio_cache_check. The caller closes both. */
sio_code sio_io_open_fd_checked(sio_io *io, struct sio_cache_user *cache,
                                const char *url, int *fd, int *sfd,
                                sio_error *err);

/* sio_io_open_fd that counts no cache hit (a look at the file). */
sio_code sio_io_open_fd_probe(sio_io *io, struct sio_cache_user *cache,
                              const char *url, int *fd, sio_error *err);

/* Could sio_io_open_fd (shardio_plan.h) give url's bytes in place? */
int sio_io_fd_capable(sio_io *io, struct sio_cache_user *cache,
                      const char *url);

/* A stream over bytes [offset, end) of fd, by pread() (end UINT64_MAX:
 * to the file's end; a file ending before end is SIO_ERR_CHANGED). fd is
 * borrowed. */
sio_code sio_stream_pread(int fd, uint64_t offset, uint64_t end,
                          sio_stream **out);
/* Bytes of a file still being written: wait(ud, want, avail, err,
 * errlen) returns once *avail (the bytes written from the file's start)
 * is at least want, or the writer ended (then *avail is its end). SIO_OK,
 * or the writer's failure (err says why) when it ended before want. */
typedef sio_code (*sio_pread_wait_fn)(void *ud, uint64_t want,
                                      uint64_t *avail, char *err,
                                      size_t errlen);
/* Make a sio_stream_pread stream's reads and skips wait for their bytes
 * (a read past what the writer wrote fails with the writer's code, or
 * ends there when it ended well). */
void sio_stream_pread_wait(sio_stream *s, sio_pread_wait_fn fn, void *ud);
/* The same stream held by the caller (never closed: nothing to free). */
typedef struct pread_stream pread_stream;
struct pread_stream {
    sio_stream base;
    int fd;
    uint64_t pos, end;
    char err[160];
    /* A shard-cache entry's descriptor (sio_pread_stream_checked): every
     * read goes through sio_cache_pread (cu NULL: plain pread). */
    struct sio_cache_user *cu;
    const char *url;
    int sfd;
    uint64_t size;
    sio_cache_carry *carry; /* may be NULL */
    /* A skip past the file's end fails as a read of those bytes would
     * (the file's size taken at the first skip with no end). */
    uint64_t fsize;
    int fsize_known;
    /* Reads that wait for nothing (RWF_NOWAIT): bytes not in the page
     * cache are SIO_ERR_AGAIN ("not in memory"), and nowait_missed is
     * set. A file system without it clears nowait and reads as usual. */
    int nowait, nowait_missed;
    /* A file still being written (a shard being staged, sio_pread_wait):
     * reads and skips ask wait for the bytes first. */
    sio_pread_wait_fn wait;
    void *wait_ud;
};
void sio_pread_stream_init(pread_stream *p, int fd, uint64_t offset,
                           uint64_t end);
/* Make p's reads check the bytes against the block sums of url's cache
 * entry (of size bytes; sums in sfd, from sio_io_open_fd_checked); a
 * block that fails is SIO_ERR_CHANGED. u and url must outlive p's use. */
void sio_pread_stream_checked(pread_stream *p, struct sio_cache_user *u,
                              const char *url, int sfd, uint64_t size,
                              sio_cache_carry *carry);

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

/*
 * A zip shard read as the tar its samples make (staging a zip for a plan):
 * fn receives, as the group builder reads them, the members of every
 * sample as a tar (a pax path header where the name does not fit ustar,
 * the ustar header, the data, the padding), and two zero blocks at the
 * end. Members the grouping rule skips are left out (they change no
 * group); a sample found bad gets two empty members "<key>.bad" (a
 * repeated field: the tar's reader finds it bad too) and nothing more of
 * it. A failure between samples ends the tar cleanly (the samples before
 * are whole); one inside a sample ends it short (that sample is lost, as
 * the zip's own reader loses it). So the tar's groups are the zip's, one
 * for one. Set before the first sio_shard_next; fn's error stops the
 * shard.
 */
typedef sio_code (*sio_shard_tap_fn)(void *ud, const void *p, size_t n);
void sio_shard_set_tar_tap(sio_shard *sh, sio_shard_tap_fn fn, void *ud);

/* Tests: how many times the reader dropped damaged tar header blocks
 * before an entry or the end (each run of dropped blocks counts once). */
uint64_t sio_shard_damage_seen(const sio_shard *sh);
/* Tests: why the group sio_shard_next last answered SIO_ERR_SAMPLE for
 * was bad. */
enum {
    SIO_SHARD_BAD_OTHER = 1,  /* its own content (limits, repeated field) */
    SIO_SHARD_BAD_DAMAGE = 2, /* a damaged tar header in or next to it */
    SIO_SHARD_BAD_LONE = 3    /* a sample of one member lost to one */
};
int sio_shard_bad_kind(const sio_shard *sh);

/* The backend of url and its context, or SIO_ERR_UNSUPPORTED. */
sio_code sio_io_backend(sio_io *io, const char *url,
                        const sio_backend_ops **ops, void **ctx,
                        sio_error *err);
/* Add a backend asked before the built-in ones (tests, embedders). Call
 * before the io is shared between threads. ctx is not freed by the io. */
sio_code sio_io_register_backend(sio_io *io, const sio_backend_ops *ops,
                                 void *ctx);
uint32_t sio_io_read_buffer(const sio_io *io);

#endif /* SHARDIO_STORE_INT_H */
