/*
 * shardio_cache.h — the shard cache: each shard read from the store once
 * per cache lifetime, shared by every epoch, job and seek of a process.
 *
 * Entries are whole objects (shards) from http(s):// and s3:// sources,
 * keyed by URL and checked by validator (the store's ETag, else
 * Last-Modified) and size, their bytes by block checksums (below). They live in files under a directory (kept
 * across restarts) or, without one, in memory (memfd). A shard is filled
 * by one background transfer however many readers want it at once
 * (single-flight); readers follow the fill as it is written, so nobody
 * waits for the whole object. A partial entry (a fill cut by an error or
 * a restart) resumes from the byte it reached, after checking the
 * validator again. Crash safety: the data is fsync'd before the entry's
 * metadata says it is there (metadata written to a temporary file, fsync'd
 * and renamed), so a killed process never leaves an entry that serves
 * bytes the store did not send.
 *
 * Integrity: nothing read back from an entry is trusted without its
 * checksum. Each entry's bytes are cut into blocks of 4 KiB (the last one
 * shorter) and each block carries a CRC-32C, computed by the fill as it
 * writes the block. The sums sit beside the data ("<id>.sums" in the
 * directory, a second memfd in memory) in this format, little-endian:
 *   bytes 0..7    magic "SCSUMS1\n"
 *   bytes 8..11   format version (1)
 *   bytes 12..15  block size (4096; another is not this format)
 *   bytes 16..23  the object's size
 *   bytes 24..27  zero
 *   bytes 28..31  CRC-32C of bytes 0..27
 *   then one CRC-32C per block, block i at 32 + 4 * i.
 * The fill writes a block's sum before readers may read the block (bytes
 * are published at block boundaries), and fsyncs the sums with the data
 * before the metadata says those bytes are durable; a partial entry
 * resumes at a block boundary. Every read of entry bytes, by the cache's
 * streams and by the plan's readers of its descriptors, checks the blocks
 * it returns (reading the rest of an edge block a range cuts). A block
 * that fails its sum (or cannot be read) drops the entry: the reader
 * goes on from the store at the same position (a stream) or fails the
 * sample as changed (the plan, whose consumer retries), a later open
 * fills the entry again, and the failure is counted (`corrupt`) and
 * logged (event=cache_corrupt). At start-up an entry whose metadata or
 * sums header does not parse, or whose sums do not belong to its object,
 * is removed; one whose sums or data stop short is cut back to the last
 * block both cover (and filled again from there when used). The data
 * itself is checked when it is read, not at start-up.
 *
 * Validation: a job (sio_cache_user) checks each entry once before it
 * uses it: with a HEAD to the store (0 body bytes) unless the job itself
 * filled the entry. A different validator or size means the object
 * changed: the entry is dropped and refilled, never served stale.
 *
 * Admission and eviction (the stable-subset policy): every URL has a fixed
 * pseudo-random priority (a keyed hash of the URL). An object is admitted
 * when it fits in the budget, or when enough unused entries of lower
 * priority (or unused for longer than `idle_s`, those first) can be
 * evicted to make room. A sequential epoch over a dataset larger than the
 * cache thus keeps the same highest-priority subset, epoch after epoch:
 * the hit ratio is about cache / dataset instead of LRU's zero. Entries in
 * use (open by a reader, or filling) are never evicted.
 *
 * The budget counts the object bytes of every entry, entries being filled
 * included (they reserve their full size when admitted), and is never
 * exceeded. On disk each entry adds a metadata file of a few hundred bytes
 * and the file system's block rounding (under 8 KiB per entry).
 *
 * Threading: every function is thread-safe. Ownership: the cache must
 * outlive its users and every stream opened through it; the io of the
 * backends must outlive the cache (sio_cache_destroy() waits for the fills).
 */
#ifndef SHARDIO_CACHE_H
#define SHARDIO_CACHE_H

#include <stdint.h>

#include "shardio.h"

typedef struct sio_cache sio_cache;
typedef struct sio_cache_user sio_cache_user;

/* Limits of the configuration. */
#define SIO_CACHE_BYTES_MAX (UINT64_C(1) << 50)
/* Fills running at once; beyond it a miss reads the store directly. */
#define SIO_CACHE_FILLS_DEFAULT 32u
#define SIO_CACHE_FILLS_MAX 1024u

typedef struct sio_cache_config {
    const char *dir;     /* entries kept here across restarts (created);
                            NULL: held in memory */
    uint64_t budget;     /* bytes (> 0) */
    uint32_t idle_s;     /* an entry unused this long is evicted first
                            (0: 86400) */
    uint32_t max_fills;  /* 0: SIO_CACHE_FILLS_DEFAULT */
    sio_logger log;
} sio_cache_config;

/* Open (and, with a dir, load: partial entries are truncated to their
 * durable length, broken ones removed). */
sio_code sio_cache_create(const sio_cache_config *cfg, sio_cache **out,
                          sio_error *err);
/* Stop the fills (they keep their partial entries), wait for them (at
 * most SIO_CACHE_STOP_WAIT_S) and free: 0. -1 when a fill is still inside
 * a store read (a stalled store): nothing is freed, the backends' io must
 * stay, and the caller should exit. Every user and stream must be gone.
 * NULL is fine. */
#define SIO_CACHE_STOP_WAIT_S 10
int sio_cache_destroy(sio_cache *c);

typedef struct sio_cache_stats {
    uint64_t budget;
    uint64_t entries;        /* complete and partial */
    uint64_t complete;       /* complete entries */
    uint64_t used_bytes;     /* charged against the budget */
    uint64_t data_bytes;     /* bytes of object data held */
    uint32_t fills;          /* fills running now */
    uint64_t hits, misses;   /* shard opens: the entry was complete and
                                valid / it was not */
    uint64_t hit_bytes, miss_bytes; /* bytes those opens delivered */
    uint64_t store_bytes;    /* object bytes read from the store into the
                                cache */
    uint64_t fills_started, fills_done, fills_failed;
    uint64_t evictions, evicted_bytes;
    uint64_t stale;          /* entries dropped: the object changed */
    uint64_t rejected;       /* misses not admitted (the policy, or all
                                fills busy): read straight from the store */
    uint64_t validations;    /* HEAD requests made to check an entry */
    uint64_t write_errors;   /* cache storage failures (the entry is
                                dropped; readers go to the store) */
    uint64_t corrupt;        /* reads of entry bytes that failed their
                                block checksum (the entry is dropped) */
} sio_cache_stats;

void sio_cache_get_stats(const sio_cache *c, sio_cache_stats *st);

/* One job's view: its own counters and which entries it has checked. */
sio_code sio_cache_user_create(sio_cache *c, sio_cache_user **out);
void sio_cache_user_destroy(sio_cache_user *u);

typedef struct sio_cache_user_stats {
    uint64_t hits, misses, hit_bytes, miss_bytes;
} sio_cache_user_stats;
void sio_cache_user_get_stats(const sio_cache_user *u,
                              sio_cache_user_stats *st);

/* How many of the n URLs url_at(ctx, i) have a complete entry, and their
 * bytes (*entries, *bytes; e.g. one job's shards). */
void sio_cache_held(sio_cache *c,
                    const char *(*url_at)(const void *ctx, size_t i),
                    const void *ctx, size_t n, uint64_t *entries,
                    uint64_t *bytes);

/* Is url's backend one whose objects are cached (http(s), s3)? */
int sio_cache_covers(const char *url);

/* The priority of a URL under the stable-subset policy (tests, tools). */
uint64_t sio_cache_priority(const char *url);

#endif /* SHARDIO_CACHE_H */
