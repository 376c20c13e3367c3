/*
 * shardio_plan.h — the epoch's plan apart from its bytes.
 *
 * Once every shard an epoch reads is indexed (shardio_index.h), the
 * epoch's sequence Y is a function of metadata: sio_plan_build() computes
 * it once, from the indexes alone, as a list of (shard, group, byte range)
 * with no sample bytes. A plan is immutable and reference counted: every
 * consumer of the epoch, at any rank, world, start or global_start and
 * under every partition policy, reads its share from the same plan.
 *
 * A consumer's share is read by a sio_planread: it takes its own items of
 * the plan (no lock, no window, no thread shared with other consumers) and
 * reads each sample's bytes straight from the shard where they already
 * are — a local file or a complete shard-cache entry — by pread() of the
 * sample's byte range into the sample's memory, through the same tar
 * reader as the streaming path, so a sample is byte for byte what
 * streaming the epoch gives.
 *
 * What takes the plan: uncompressed tar shards (plain, GNU, pax) that are
 * local files or complete entries of the job's shard cache, in an epoch
 * that is not mixed. Compressed and zip shards (their indexes hold
 * positions in the decompressed stream: "stream-only"), shards only an
 * object store holds, and mixed epochs keep the streaming path (feeds).
 *
 * Faults: the plan takes each shard file's identity (device, inode, size,
 * modification time) when it is built, and only from a file that is still
 * the one its index describes (size; a local file's mtime). The plan
 * opens each shard once for all its readers, refuses a file that is not
 * the plan's, and after every sample a reader checks that nothing wrote to the file since, and that the
 * sample is the one the index describes (group number, key hash, payload
 * size). A shard that changed, shrank or disappeared is SIO_ERR_CHANGED:
 * the caller ends the consumer's stream with a retryable error and drops
 * the plan (the streaming path then applies its own rules). No sample is
 * ever returned from bytes that differ from the ones indexed.
 *
 * Cost (docs/architecture.md "The data plane"): building a plan is PRNG and index
 * arithmetic, sizeof(sio_plan_item) = 40 bytes per sample of the epoch.
 *
 * Threading: a plan's items are immutable once published (any thread may
 * read them; a growing plan publishes more, below); its descriptor table
 * has its own lock; a plan reader is used by one thread at a time.
 */
#ifndef SHARDIO_PLAN_H
#define SHARDIO_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"
#include "shardio_index.h"
#include "shardio_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One element of Y: group `group` of shard `shard` (shard list index),
 * bytes [offset, end) of the shard (end UINT64_MAX: to the tar's end). */
typedef struct sio_plan_item {
    uint64_t offset;
    uint64_t end;
    uint64_t bytes;   /* payload bytes (the index's) */
    uint32_t shard;
    uint32_t group;   /* the sample's index_in_shard */
    uint32_t keyhash; /* sio_index_keyhash of the sample's key */
    uint32_t source;  /* a mixed epoch's source of the sample (else 0) */
} sio_plan_item;

/* Items above this are not planned (SIO_ERR_LIMIT): 2^32 samples. */
#define SIO_PLAN_ITEMS_MAX (1ull << 32)

typedef struct sio_plan sio_plan;

/*
 * The plan of the epoch cfg describes over list: Y in full, from
 * cfg->index alone (no byte of a shard is read). SIO_ERR_AGAIN with err's
 * reason when a shard the epoch reads is not fully indexed yet;
 * SIO_ERR_UNSUPPORTED when the epoch cannot take a plan (no index, a
 * mixed epoch, a stream-only shard); SIO_ERR_LIMIT for an epoch of more
 * than max_samples samples (0: SIO_PLAN_ITEMS_MAX). *out has one
 * reference (sio_plan_unref).
 */
sio_code sio_plan_build(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, uint64_t max_samples,
                        sio_plan **out, sio_error *err);

/*
 * Sample i of the dataset's unshuffled order (the list's shards in order,
 * each shard's good groups in tar order; GET /samples/{i}) as a complete
 * plan of one item, read by a sio_planread of rank 0 of world 1 (its
 * sample's global_index is i). Reads no shard byte and no index file: the
 * shards up to the one that holds it must be indexed whole in memory
 * (SIO_ERR_AGAIN otherwise, with the reason: the caller reads the
 * indexes another way), and that shard must be a local plain tar file
 * whose index was read through (SIO_ERR_UNSUPPORTED otherwise: a remote
 * shard, a shard-cache entry whose damaged block the caller reads again
 * from the store within the request, a compressed shard or a zip, an
 * index loaded from a file that a read has not proven yet).
 * SIO_ERR_NOTFOUND, "sample i is past the dataset's N samples", when every
 * shard is indexed and i is not below N, as the indexes in memory count.
 * The sample's own local file is looked at (a stat: rewritten or
 * replaced since it was indexed, its index is dropped: SIO_ERR_AGAIN);
 * the files before it are the caller's to look at (sio_index_refresh),
 * off the serving threads. Its file's identity is taken now: the reader
 * refuses bytes of another file, as an epoch's plan does. cfg: index,
 * cache and limits are used.
 */
sio_code sio_plan_sample(sio_io *io, const sio_shardlist *list,
                         const sio_epoch_config *cfg, uint64_t i,
                         sio_plan **out, sio_error *err);

/*
 * The same for any shard, blocking (a worker thread's: it reads): the
 * shards up to the one that holds sample i are indexed as needed (loaded,
 * or read whole), and the sample is read whole into memory from where its
 * shard is: a ranged read of a plain tar (local, remote, or through the
 * job's shard cache, whose blocks are checked and read again from the
 * store when they fail), a compressed shard or a zip from its start. The
 * plan's reader hands that sample out (no file is read after). A loaded
 * index the read disagrees with is dropped, the shard indexed again and
 * the sample looked for once more. SIO_ERR_NOTFOUND past the end, as
 * sio_plan_sample; SIO_ERR_CHANGED when the shard is not what its index
 * says (a caller may come again); other codes from the store.
 */
sio_code sio_plan_sample_fetch(sio_io *io, const sio_shardlist *list,
                               const sio_epoch_config *cfg, uint64_t i,
                               sio_plan **out, sio_error *err);

/* Could the epoch take a plan now (every shard indexed and local)? SIO_OK,
 * or the code sio_plan_build would give before building anything. */
sio_code sio_plan_possible(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *cfg, sio_error *err);

/*
 * A plan that grows: Y produced as far as the shards indexed so far
 * decide it, for an epoch whose shards are not all indexed yet (the first
 * pass over a dataset). The order engine runs over the indexes and stops
 * where a shard it opened is not indexed; sio_plan_grow indexes the next
 * shards the order needs (reading them once, in the order the interleave
 * opens them), journals the end of a shard whose read fails (on_error
 * skip: the decision every reader of the epoch follows, as the streaming
 * path records it) and extends Y. Readers read the items published so
 * far and wait (sio_planread_set_notify) at the end of them.
 *
 * sio_plan_start: SIO_ERR_UNSUPPORTED when the epoch cannot grow a plan
 * (a shard not readable in place, compressed, a zip, a mixed epoch,
 * on_error=fail, no journal); the plan starts empty. sio_plan_grow is one
 * step, run by one thread at a time: SIO_ERR_AGAIN when there is more to
 * do (call again), SIO_ERR_BUSY when it is far enough ahead of its
 * readers (a reader that comes near calls the kick set by
 * sio_plan_set_kick, then call again), SIO_OK when the plan is complete or
 * failed (nothing more to do; sio_plan_failed says which). A plan that
 * failed stops at the items it published: readers that reach its end get
 * SIO_ERR_CHANGED with the reason (the epoch goes on elsewhere).
 *
 * keep > 0 makes the plan windowed: its memory is bounded whatever the
 * epoch's length. Items are kept in chunks; once more than keep items
 * (at least the steps' ahead bound and two chunks more) are held, the
 * oldest chunks no reader reads now are let go. The order is checkpointed
 * every keep items, at most 2^20 (at most 256 checkpoints: the interval
 * doubles beyond),
 * and a chunk a reader comes back to (a resume, a rank behind, the
 * even-pad tail) is made again from the checkpoint before it by
 * sio_plan_restage, on the function set by sio_plan_set_restage. Memory:
 * keep x sizeof(sio_plan_item) + a chunk per reader behind + the
 * checkpoints (sio_order_ckpt_bytes each: about 24 bytes per buffered
 * sample). keep 0: every item is kept (a plan of at most
 * SIO_PLAN_ITEMS_MAX items).
 */
sio_code sio_plan_start(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, uint64_t keep,
                        sio_plan **out, sio_error *err);
sio_code sio_plan_grow(sio_plan *p, sio_error *err);
/* fn(ud) asks for the next sio_plan_grow of a parked plan; it is called
 * with no lock of the plan held, on a reader's thread. NULL: none (set it
 * to NULL before ud goes). */
void sio_plan_set_kick(sio_plan *p, void (*fn)(void *ud), void *ud);
/* Is a growing plan parked (its last step answered SIO_ERR_BUSY and no
 * reader kicked it since)? */
int sio_plan_parked(const sio_plan *p);
/* Do its steps wait for staging room (readers to let shards go, or a rank
 * to be detached by the lag rules)? A parked plan that does is to be
 * kicked again now and then: the lag rules change with time. */
int sio_plan_stage_blocked(sio_plan *p);
/* Can a plan that stages not serve a reader of world? The staging keeps
 * a shard until the ranks of every world that reads the epoch passed it
 * (up to STAGE_WORLDS worlds, each from its first reader on, its ranks
 * expected for the join grace). A reader of a world that comes after the
 * others let go of shards it needs, or of a world beyond those it
 * follows, has the shards let go fetched again for it. 1 only for a
 * world of no ranks or more than STAGE_WORLD_MAX (such a reader is the
 * feed's, which refuses it). */
int sio_plan_stage_other_world(const sio_plan *p, uint32_t world);

/* Does plan p stage any shard (in memory or into the shard cache), or
 * read every shard in place (local files, complete cache entries)? */
int sio_plan_stages(const sio_plan *p);
/* Would a stream that starts at index t of Y have the staging fetch every
 * shard the order passes on its way there first? 1 for a plan that
 * stages an epoch whose shards were all indexed when it started, with t
 * more than a buffer's worth (buffer_samples) beyond the items made so far
 * (a resume far in, a server restarted under its clients), unless every
 * shard it stages may be left to its readers (plain tars indexed whole,
 * of known sizes: the steps then fetch none of the
 * shards every reader is far past, and a reader has the ranges of its
 * items fetched). Where it is 1 the stream is the feed's, which reads
 * the ranges it needs. 0 otherwise. */
int sio_plan_stage_far(const sio_plan *p, uint64_t t);
/* How far (samples of Y) a growing plan's steps run ahead of its
 * furthest reader before they park (default: 4 x the shuffle buffer, at
 * least 65,536); a reader within half of it of the end kicks. Set it
 * before the first step. */
void sio_plan_set_ahead(sio_plan *p, uint64_t samples);
/* Staging: a plan whose remote shards are neither local nor in the shard
 * cache holds them in memory while its readers need them, within the
 * epoch config's stage_bytes (the steps; and as much again for shards
 * fetched again for readers behind). join_ms: how long ranks of the first
 * reader's
 * world are waited for; rejoin_ms: how long a rank whose readers closed
 * is; lag_grace_ms / lag_samples / lag_wait: when a rank that holds the
 * room is detached, as --lag-grace-ms, --lag-samples and --lag-policy
 * wait). Set before the first step; nothing for a plan that stages
 * nothing. */
typedef struct sio_plan_stage_config {
    uint32_t join_ms, rejoin_ms, lag_grace_ms;
    uint64_t lag_samples;
    int lag_wait;
} sio_plan_stage_config;
void sio_plan_set_stage(sio_plan *p, const sio_plan_stage_config *c);
/* fn(ud) asks for sio_plan_restage (a reader needs a windowed plan's
 * chunk let go: on its thread, no lock of the plan held). NULL: none
 * (readers that need a chunk or a staged shard let go then fail with
 * SIO_ERR_CHANGED). */
void sio_plan_set_restage(sio_plan *p, void (*fn)(void *ud), void *ud);
/* Make again the chunks readers asked for (a planner thread). A staged
 * shard asked for again is fetched on the staging jobs' threads, not
 * here. */
void sio_plan_restage(sio_plan *p);
typedef struct sio_plan_stage_stats {
    int staging;            /* the plan stages shards in memory */
    uint64_t budget;        /* bytes */
    uint64_t bytes, peak;   /* staged now, most at once */
    uint64_t max_shard;     /* the largest shard staged */
    uint64_t staged;        /* shards staged by the steps */
    uint64_t fetched_bytes; /* bytes fetched into staging */
    uint64_t restages;      /* shards fetched again for readers behind */
    uint64_t ranged;        /* ... of those, only the byte ranges of the
                               items still to be read */
    uint64_t revived;       /* ... taken back from a spare instead */
    uint64_t released;      /* shards let go */
    uint64_t detaches;      /* ranks no longer waited for */
    uint64_t refused;       /* readers told to come back (no room) */
    uint64_t evicted;       /* shards fetched again that no reader held,
                               let go before their readers passed them to
                               make room for another (fetched again when
                               a reader comes to them) */
    uint64_t windows_moved; /* windows of shards fetched again that moved
                               to where a reader is, written afresh into
                               the same memory (no reader held the last
                               window) */
    uint64_t windows_continued; /* windows of a compressed shard or a zip
                               larger than the budget made from where the
                               last window's source stopped (held open),
                               not from the object's start */
    uint64_t deferred;      /* shards left to their readers: every reader
                               was far past where the order read them
                               (a resume far in), so no step fetched
                               them whole; readers that reach their items
                               have those fetched (restages) */
    uint64_t thinned_bytes; /* pages of staged shards given back while
                               the shard was still read: items every
                               reader passed (samples of it still in the
                               shuffle buffer, or not read yet, kept) */
    uint64_t thin_passes;   /* ... the passes that gave some back */
    uint64_t held;          /* shards decided that wait for a reader */
    uint64_t spare;         /* staging memory kept for the next shards
                               (server-wide, within stage_bytes) */
    int blocked;            /* the steps wait for room now */
} sio_plan_stage_stats;
void sio_plan_get_stage_stats(sio_plan *p, sio_plan_stage_stats *out);
/* Stop a growing plan where it is (its readers fail at its end with
 * reason). Nothing for a complete plan. */
void sio_plan_abandon(sio_plan *p, const char *reason);
/* 1 (and the reason) when a growing plan stopped short. */
int sio_plan_failed(const sio_plan *p, char *msg, size_t len);
/* The code the epoch itself fails with where a growing plan stopped (an
 * epoch under on_error=fail: a bad sample, a shard whose read failed;
 * its feed fails it at the same place), else SIO_OK (the plan only
 * stopped: the feed goes on from there). */
sio_code sio_plan_fatal(const sio_plan *p);
/* 1 once Y is complete (a built plan always). */
int sio_plan_complete(const sio_plan *p);

void sio_plan_ref(sio_plan *p);
void sio_plan_unref(sio_plan *p);

/* N, the number of samples of Y (of a growing plan: published so far). */
uint64_t sio_plan_count(const sio_plan *p);
/* The bad samples (SIO_INDEX_GROUP_BAD groups, up to the journal's cut)
 * of the shards Y draws from: what the epoch's feed would have counted as
 * skipped. */
uint64_t sio_plan_skipped(const sio_plan *p);
/* Y[i] (i < count) of a plan that is not windowed (sio_plan_build's). */
const sio_plan_item *sio_plan_item_at(const sio_plan *p, uint64_t i);
/* Y[i] copied into *out, of any plan: 1, or 0 when i is not published or
 * (a windowed plan) its chunk is let go now. */
int sio_plan_item_get(sio_plan *p, uint64_t i, sio_plan_item *out);
/* A windowed plan (sio_plan_start with keep): items held now, chunks of
 * PLAN_CHUNK items let go and made again, and the order's checkpoints. */
typedef struct sio_plan_window {
    int windowed;              /* chunks of 4,096 items */
    uint64_t keep;             /* items held before chunks are let go */
    uint64_t held_items;       /* in whole chunks */
    uint64_t released_chunks, refilled_chunks;
    uint64_t checkpoints, checkpoint_every, checkpoint_bytes;
} sio_plan_window;
void sio_plan_window_stats(sio_plan *p, sio_plan_window *out);
/* Samples of planned streams whose bytes were not in the page cache and
 * were read by the warm threads instead of a stream's own (serving)
 * thread, and their bytes (process-wide). */
void sio_plan_cold_stats(uint64_t *reads, uint64_t *bytes);
/* Bytes the plan holds (its items and the struct; a fetched one-sample
 * plan's sample payload too). */
size_t sio_plan_memory(const sio_plan *p);
/* Nanoseconds its build took. */
uint64_t sio_plan_build_ns(const sio_plan *p);

/* ------------------------------------------------------------------ */
/* Reading a consumer's share                                           */

typedef struct sio_planread sio_planread;

typedef struct sio_planread_config {
    uint32_t rank, world;
    sio_partition policy;
    uint64_t start;        /* position within the share */
    uint64_t global_start; /* elastic resume (as sio_cursor_config) */
    sio_shard_limits limits;
    /* The job's view of the shard cache (NULL: none): shards of http(s)
     * and s3 sources are read from their complete cache entries. */
    struct sio_cache_user *cache;
    /* The job's shard indexes (NULL: none): an index loaded from
     * state_dir or a sidecar that a sample read disagrees with is dropped
     * (sio_index_reject), so that a plan made again indexes the shard
     * anew rather than trusting it again. */
    sio_index *index;
} sio_planread_config;

/* Shards one reader keeps at hand at once (the least recently used is
 * let go beyond): references to the plan's descriptors, which the plan
 * opens once for all the readers that hold a shard and closes when none
 * does (512 at most at once; beyond, a reader opens its own). */
#define SIO_PLANREAD_FILES 64u

/*
 * A reader of consumer (rank, world)'s share of the plan, from position
 * start. Validates the share as sio_feed_attach does (SIO_ERR_INVALID with
 * err's reason). io and list must outlive the reader; it holds a
 * reference on the plan.
 */
sio_code sio_planread_open(sio_io *io, const sio_shardlist *list,
                           sio_plan *plan, const sio_planread_config *cfg,
                           sio_planread **out, sio_error *err);
/*
 * Next sample of the share: SIO_OK with *out the sample (global_index
 * set), or NULL at the end of the share. The sample is the reader's: valid
 * until the next call or close, never to be unreferenced. *ext is NULL
 * when its payload is in memory; otherwise ext[i] says where field i's
 * bytes lie (ext[i].fd >= 0: in that file at that offset, and the field's
 * data pointer is NULL): the caller reads them (sio_planread_pread) and
 * then calls sio_planread_verify before it hands them on.
 * SIO_ERR_AGAIN: a growing plan has not decided it yet, or a windowed
 * plan makes its chunk again (set_notify),
 * SIO_ERR_CHANGED: a shard changed, shrank or vanished under the plan, or
 * a growing plan stopped short of it,
 * SIO_ERR_BUSY: the process is out of file descriptors (the plan is
 * still good: come back later), SIO_ERR_UNSUPPORTED: a shard is not
 * local (not a file, not in the cache), other codes: the shard could not
 * be read; sio_planread_errmsg says which and why. After an error the reader stays at the failed
 * position.
 */
sio_code sio_planread_next(sio_planread *r, const sio_sample **out,
                           const sio_extent **ext);
/* A growing plan's reader: sio_planread_next says SIO_ERR_AGAIN while
 * the share's next sample is not decided yet, and fn(ud) is called once
 * when the plan grew or ended after that (on the builder's thread, with
 * the plan's lock held: it must only note the wake-up). Without a notify
 * the caller polls. */
void sio_planread_set_notify(sio_planread *r, void (*fn)(void *ud),
                             void *ud);
/* Read n bytes of an extent (fd and offset from sio_planread_next) into
 * buf: SIO_OK, or SIO_ERR_CHANGED when the file ended early or a shard
 * cache entry's bytes failed their block check (the entry is dropped;
 * sio_planread_errmsg says why). Read extents this way, then call
 * sio_planread_verify. */
sio_code sio_planread_pread(sio_planread *r, int fd, void *buf, size_t n,
                            uint64_t off);
/* Have the files whose samples were handed out since the last check (in
 * memory or as extents) kept their identity? SIO_OK, or SIO_ERR_CHANGED:
 * the bytes read from them since may not be the indexed ones
 * (sio_planread_errmsg). Call it before any byte of those samples goes
 * out; one call covers every sample since the last (an fstat per file,
 * not per sample). */
sio_code sio_planread_verify(sio_planread *r);
const char *sio_planread_errmsg(const sio_planread *r);
/* 1 when the last error of sio_planread_next is the epoch's own failure
 * (sio_plan_fatal): the share ends there with it, on any data plane. */
int sio_planread_fatal(const sio_planread *r);
/* Position within the share (samples handed out, including start). */
uint64_t sio_planread_position(const sio_planread *r);
/* The same, read from another thread than the reader's (status). */
uint64_t sio_planread_position_now(const sio_planread *r);
/* Samples in the share (start included). */
uint64_t sio_planread_length(const sio_planread *r);
void sio_planread_close(sio_planread *r);

/*
 * A file descriptor from which the bytes of shard url can be read with
 * pread(): the file itself for local paths (file://, plain paths), a
 * duplicate of a complete shard-cache entry for http(s) and s3 objects
 * that this job's cache view has checked. SIO_ERR_UNSUPPORTED: no such
 * place (an object store without a complete cache entry, a virtual
 * shard). The caller closes *fd. The bytes of a cache entry read through
 * it are not checked against the entry's block sums (shardio_cache.h):
 * libshardio's own readers (sio_planread) use a form that checks them.
 */
sio_code sio_io_open_fd(sio_io *io, struct sio_cache_user *cache,
                        const char *url, int *fd, sio_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SHARDIO_PLAN_H */
