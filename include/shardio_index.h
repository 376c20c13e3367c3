/*
 * shardio_index.h — shard indexes and epoch journals: what makes every
 * position of an epoch reachable without re-reading its prefix.
 *
 * A shard index records, per shard, where each WebDataset sample (a "group"
 * of tar members with one key, good or bad) starts and ends in the tar, its
 * payload size and whether it is valid. With the indexes of the shards an
 * epoch has opened, the order of the epoch up to any position P is a pure
 * function of metadata (sio_epoch_open_at: PRNG arithmetic, no bytes), and
 * a stream at P reads only what it needs: the buffer's samples at P and
 * the slot shards from their offsets, by ranged reads.
 *
 * An index is built while a shard is streamed for the first time (by any
 * epoch of any job of the process), persisted under a directory (the
 * server's state_dir/index), read back after a restart when the shard's
 * size (and, for local files, mtime) still match, and may be written ahead
 * of time (`shardcast index SOURCE`) or read from a sidecar file next to
 * the shard ("<shard URL>.scidx").
 *
 * Compressed and zip shards (.tar.gz, .tar.zst, .zip) are indexed too (counts, sizes,
 * validity: enough for the order), but their offsets are positions in the
 * decompressed stream, so a seek into one re-reads it from its start and
 * skips to the group it needs ("stream-only").
 *
 * The index file format (version 2; little-endian; a change is a new
 * version, never a silent one):
 *
 *   header   "SCIDX\0\1\0"                         8 bytes, magic
 *            u32 version = 2 (SIO_INDEX_VERSION)
 *            u32 flags       bit 0: stream-only (compressed shard)
 *            u64 size        shard size in bytes (UINT64_MAX: unknown)
 *            u64 mtime       seconds (local files; 0: unknown)
 *   records, one per group, in tar order:
 *            u8  'G'
 *            u64 offset      first byte of the group's first member header
 *                            (extension headers included)
 *            u64 end         first byte after the group (the next group's
 *                            offset; UINT64_MAX: up to the end of the tar)
 *            u64 bytes       payload bytes (sum of field sizes; 0 if bad)
 *            u32 flags       bit 0: bad (repeated field, over a limit)
 *            u16 keylen      at most SIO_INDEX_KEY_MAX
 *            u16 nfields     at most SIO_INDEX_FIELDS_MAX
 *            keylen bytes    the key
 *            nfields x { u8 namelen (1..255), name, u64 size }
 *   trailer  u8  'E'
 *            u64 ngroups     the number of 'G' records
 *            u64 checksum    FNV-1a 64 of every byte before this field
 *   Nothing may follow the trailer. A file without it is incomplete and
 *   never used.
 *
 * Index files are hints, never trusted (a sidecar is written by whoever
 * can write to the bucket; a file under state_dir by whoever can write
 * there). One is adopted only when (sio_index_check) its counts and
 * offsets are plausible for the shard's size as the store reports it
 * now; before it is relied on (sio_index_vet) a read of its first and
 * last groups must agree with it. The
 * groups in between are checked as shard readers read them: the first
 * read that disagrees (another key, size, offset or validity, a group
 * past its end, a shard that ends elsewhere) drops the adopted index
 * (sio_index_reject) and the shard is indexed again by reading it.
 *
 * Threading: an sio_index and its entries are thread-safe. Entries live
 * until the index is closed.
 */
#ifndef SHARDIO_INDEX_H
#define SHARDIO_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The index file format's version. A file of another version is not
 * read: the shard is indexed again. 2: a shard whose bytes end without
 * the archive's end blocks is truncated, not whole (a version 1 file may
 * hold its last group, which may have lost members, as good). */
#define SIO_INDEX_VERSION 2u
#define SIO_INDEX_SUFFIX ".scidx"
/* Sanity limits on an index file (a reader refuses anything beyond). */
#define SIO_INDEX_KEY_MAX 4096u
#define SIO_INDEX_FIELDS_MAX 1024u
#define SIO_INDEX_GROUPS_MAX (1ull << 26)      /* groups in one shard */
#define SIO_INDEX_FILE_MAX (1ull << 30)        /* bytes of one file */
/* Plausibility (sio_index_check). A group of a tar spans at least one
 * 512-byte header block and its payload: so a shard of S bytes holds at
 * most S/512 groups, at most S/1024 of them with a payload. A compressed
 * shard's groups are counted against its compressed size at 4 bytes per
 * group at least (a tar header compresses to no less: its name and
 * checksum differ from the previous one). */
#define SIO_INDEX_GROUP_SPAN_MIN 512u
#define SIO_INDEX_PACKED_GROUP_MIN 4u

enum { SIO_INDEX_STREAM_ONLY = 1u };
enum { SIO_INDEX_GROUP_BAD = 1u };

/* One group (sample) of a shard, as kept in memory. */
typedef struct sio_index_group {
    uint64_t offset;   /* first header byte of the group */
    uint64_t end;      /* first byte after it; UINT64_MAX: the tar's end */
    uint64_t bytes;    /* payload bytes; 0 for a bad group */
    uint32_t flags;    /* SIO_INDEX_GROUP_BAD */
    uint32_t keyhash;  /* FNV-1a 32 of the key: a seek checks it */
} sio_index_group;

/* FNV-1a 32 of a key, as stored in keyhash. */
uint32_t sio_index_keyhash(const char *key, size_t len);

typedef struct sio_index sio_index;
typedef struct sio_index_entry sio_index_entry;

typedef struct sio_index_config {
    const char *dir;       /* where index files live; NULL: memory only */
    int sidecars;          /* 1: look for "<shard URL>.scidx" once per
                              shard before building an index: a local
                              shard's always; a remote shard's when the
                              listing that found it showed one, or, with
                              probe_sidecars, when no listing said (a
                              brace pattern): a request per shard */
    int probe_sidecars;
    sio_logger log;
} sio_index_config;

/* Open an index store; creates cfg->dir when missing and removes
 * incomplete files left by a crash. *out is owned by the caller. */
sio_code sio_index_open(const sio_index_config *cfg, sio_index **out,
                        sio_error *err);
/* Free every entry. NULL is fine. No reader or builder may be active. */
void sio_index_close(sio_index *x);

/*
 * The entry of one shard: loaded from the store's directory or a sidecar
 * when a valid file exists for this shard (size, and for local files
 * mtime, match), else an empty entry that the first reader fills. io is
 * used for sidecars and may be NULL. NULL only when memory ran out.
 * The entry stays valid until sio_index_close().
 */
sio_index_entry *sio_index_get(sio_index *x, sio_io *io, const char *url,
                               uint64_t size);

/*
 * Before relying on entry e's groups (a seek's offsets, counts, a plan):
 * run the checks that wait for such a use. A file or sidecar of a remote
 * shard whose size no listing gave is loaded now, the size asked of the
 * store (a HEAD); an adopted file's first and last groups are read (through
 * cache, this job's view of the shard cache, or NULL) and the file dropped
 * when they disagree. Readers that start at the shard's start need none of
 * this: what they read checks every group. Once per entry; cheap after.
 * Thread-safe.
 */
struct sio_cache_user;
/* limits: the sample limits the index was built with (they decide which
 * groups are bad); NULL: the defaults. */
void sio_index_vet(sio_index_entry *e, sio_io *io,
                   struct sio_cache_user *cache,
                   const sio_shard_limits *limits);

/* The entry of url if the store holds it already, else NULL: never reads
 * a file or a sidecar (for callers that must not block). */
sio_index_entry *sio_index_peek(sio_index *x, const char *url);
/* Is url indexed whole: in memory, or a file in the state directory
 * (looked for, not read)? */
int sio_index_known(sio_index *x, const char *url);

/* Group g of the entry: 1 with *out filled when it is known, 0 when not
 * (yet). Thread-safe. */
int sio_index_group_get(sio_index_entry *e, uint64_t g, sio_index_group *out);

/*
 * The groups of a complete entry, read without the entry's lock (a plan
 * build, an epoch over indexes: millions of look-ups). While a view is
 * open its array stays allocated even if the entry is dropped meanwhile
 * (sio_index_reject, sio_index_refresh): it then describes the file as it
 * was, and sio_index_view_current says 0. sio_index_view_open returns 0,
 * and opens nothing, for an entry that is not complete. Every view opened
 * is closed with sio_index_view_close. Thread-safe.
 */
typedef struct sio_index_view {
    const sio_index_group *g;
    uint64_t n;
    uint64_t gen;     /* the entry's generation (sio_index_info.gen) */
    int open;         /* opened: to be closed */
} sio_index_view;
int sio_index_view_open(sio_index_entry *e, sio_index_view *v);
/* 1 while the entry still holds the groups v shows (no lock; a drop that
 * happens right after may still be missed: the readers of the bytes
 * check them against the file). */
int sio_index_view_current(sio_index_entry *e, const sio_index_view *v);
void sio_index_view_close(sio_index_entry *e, sio_index_view *v);
/* Good and bad groups among the first `upto` known ones (a journal's cut;
 * UINT64_MAX: all). Thread-safe. */
void sio_index_tally(sio_index_entry *e, uint64_t upto, uint64_t *good,
                     uint64_t *bad);

typedef struct sio_index_info {
    uint64_t known;    /* groups recorded so far */
    int complete;      /* known is every group of the shard */
    int stream_only;   /* compressed: offsets are not byte offsets */
    uint64_t good;     /* groups that are not bad, of the known ones */
    uint64_t bytes;    /* payload bytes of the known groups */
    uint64_t size;     /* the shard's size it describes (UINT64_MAX or 0:
                          unknown) */
    uint64_t mtime;    /* a local file's mtime in seconds (0: unknown) */
    int hint;          /* loaded from a file or sidecar and not yet read
                          through from start to end: may still be dropped */
    uint64_t gen;      /* times the entry's groups were dropped */
} sio_index_info;
void sio_index_get_info(sio_index_entry *e, sio_index_info *info);

/*
 * Drop the entry's loaded groups because a read disagreed with them
 * (reason: one line, no URL; it is logged with the URL redacted, and
 * counted as rejected by the file's source). The persisted file is
 * removed; the entry is empty again and the next reader from the start
 * indexes the shard anew. Does nothing to an entry that was built by
 * reading (a disagreement there means the shard changed, which readers
 * report themselves) or that is empty. Returns 1 when it dropped
 * something. Thread-safe.
 */
int sio_index_reject(sio_index_entry *e, const char *reason);

/*
 * A local shard's file against the one the entry describes: when its size
 * or modification time (nanoseconds) is not what the entry was made for
 * (the file was rewritten, truncated or replaced), every group is dropped
 * whatever its source, the persisted file and a file being written are
 * removed, and the entry takes the file's new size and time: the next
 * reader from the start indexes the shard anew (counted in `dropped`, as
 * a rejection is, so epochs count their length again). Returns 1 when it
 * dropped the entry; 0 for a remote shard, a file that is gone (readers
 * report that themselves) or one that is unchanged. Thread-safe; a stat.
 */
int sio_index_refresh(sio_index_entry *e);
/*
 * A remote shard found to be another version of the object than the one
 * its groups were read from (the store's validator changed): every group
 * is dropped whatever its source, as sio_index_refresh drops a local
 * file's, and the entry takes size (UINT64_MAX: unknown). Returns 1 when
 * it dropped something. Thread-safe.
 */
int sio_index_object_changed(sio_index_entry *e, uint64_t size);
/* The version (a hash of the store's validator; 0: unknown) of the remote
 * object a read indexed whole, and the size of what it staged, set by
 * that read (a complete entry only;
 * memory only, not persisted). A later fetch of the object that finds
 * another validator drops the groups (sio_index_object_changed) before it
 * indexes the object again. Thread-safe. */
void sio_index_set_version(sio_index_entry *e, uint64_t version,
                           uint64_t size);
uint64_t sio_index_version(sio_index_entry *e);
/* sio_index_version, and the size of what that read staged (*size: the
 * object's bytes, a compressed shard's decompressed, a zip's tar of its
 * samples: the stream the entry's positions are in; 0 when no read
 * staged it whole since the server started or since its groups were
 * dropped). A local file's read sets the size with version 0. */
uint64_t sio_index_version_size(sio_index_entry *e, uint64_t *size);
/* The shard's size as the entry knows it (a listing, a stat), else asked
 * of the store now (a stat or HEAD, no lock held across it) and kept on
 * the entry: UINT64_MAX when the store does not tell. Thread-safe. */
uint64_t sio_index_object_size(sio_index_entry *e, sio_io *io);

/* A field of a group being recorded. */
typedef struct sio_index_field {
    const char *name;
    uint64_t size;
} sio_index_field;

/*
 * Record group g as read by a shard reader. Taken only when g is the next
 * unknown group (readers of one shard may offer the same group; the first
 * wins) and the entry is not complete. Thread-safe.
 */
void sio_index_offer(sio_index_entry *e, uint64_t g, const sio_index_group *grp,
                     const char *key, size_t keylen,
                     const sio_index_field *fields, size_t nfields,
                     int stream_only);
/* The reader reached the end of the shard after ngroups groups: the
 * entry is complete (when every group was recorded) and is persisted. */
void sio_index_finish(sio_index_entry *e, uint64_t ngroups);

/*
 * What a shard reader tells about the groups it reads: the interface
 * through which an index is written while a shard streams (the reader
 * knows nothing of indexes). offer: group g was read (as
 * sio_index_offer); finish: the shard ended after ngroups groups.
 */
typedef struct sio_group_recorder {
    void (*offer)(void *ud, uint64_t g, const sio_index_group *grp,
                  const char *key, size_t keylen,
                  const sio_index_field *fields, size_t nfields,
                  int stream_only);
    void (*finish)(void *ud, uint64_t ngroups);
    void *ud;
} sio_group_recorder;

/* The recorder that fills entry e (NULL for NULL); valid while e is. */
const sio_group_recorder *sio_index_recorder(sio_index_entry *e);

/* Read shard `url` (number `index` of its list) once, streaming, so that
 * entry e gets every group: the index built ahead of time. */
sio_code sio_index_build(sio_io *io, const char *url, uint32_t index,
                         const sio_shard_limits *limits, sio_index_entry *e,
                         sio_error *err);

/* The same, and *reached (may be NULL) is the number of groups read
 * before the shard ended or failed: where a failed shard ends for the
 * epoch's journal, as an epoch's reader would have found it. Bad samples
 * are logged to log (NULL: not) as an epoch's reader logs them. With
 * cache (a job's view of the shard cache, NULL: none) a remote shard is
 * read through it, so its entry is filled by the same read. */
struct sio_cache_user;
sio_code sio_index_build_to(sio_io *io, const char *url, uint32_t index,
                            const sio_shard_limits *limits,
                            sio_index_entry *e, struct sio_cache_user *cache,
                            const sio_logger *log, uint64_t *reached,
                            sio_error *err);

/* The same over url's bytes staged whole in fd (read with pread from
 * offset 0; borrowed), with two more facts: decompressed,
 * fd holds a compressed shard's decompressed bytes (a tar.gz, tar.zst...)
 * and the entry records the positions in that stream, as a read of the
 * shard itself does (stream-only); cut_at (not UINT64_MAX): the fetch
 * failed after cut_at bytes, so the shard does not end there (a read that
 * reaches it fails as a read of the shard did: no group after it, and the
 * entry is not complete). The writer of sio_index_build_growing, ended. */
sio_code sio_index_build_staged(sio_io *io, const char *url, uint32_t index,
                                const sio_shard_limits *limits,
                                sio_index_entry *e, int fd, int decompressed,
                                uint64_t cut_at, const sio_logger *log,
                                uint64_t *reached, sio_error *err);

/* A shard whose bytes are still being staged into a descriptor (the
 * index pass runs while they arrive, sio_index_build_growing): wait(ud,
 * want, avail, err, errlen) returns once *avail, the bytes written from
 * the start, is at least want, or the writer ended (then *avail is where:
 * SIO_OK at the shard's end, else the writer's failure with err);
 * progress(ud, groups) is told after each group the pass read. */
typedef struct sio_stage_hooks {
    sio_code (*wait)(void *ud, uint64_t want, uint64_t *avail, char *err,
                     size_t errlen);
    void (*progress)(void *ud, uint64_t groups);
    void *ud;
} sio_stage_hooks;

/* The same over a shard still being staged into fd (hooks->wait tells
 * how far it is written; hooks->progress hears each group read). */
sio_code sio_index_build_growing(sio_io *io, const char *url, uint32_t index,
                                 const sio_shard_limits *limits,
                                 sio_index_entry *e, int fd,
                                 int decompressed,
                                 const sio_stage_hooks *hooks,
                                 const sio_logger *log, uint64_t *reached,
                                 sio_error *err);

/* Path of the entry's persisted file (valid while the index lives), or
 * NULL when memory only or not complete yet. */
const char *sio_index_entry_path(sio_index_entry *e);

/* Counters of a store (status, metrics). */
typedef struct sio_index_stats {
    uint64_t entries, complete, groups;
    uint64_t loaded;        /* entries read from files or sidecars */
    uint64_t built;         /* entries completed by reading */
    uint64_t invalid;       /* files refused (stale, corrupt) */
    uint64_t write_errors;
    /* Files and sidecars implausible for their shard, or dropped after a
     * read disagreed with them (by where they came from). */
    uint64_t rejected_state, rejected_sidecar;
    uint64_t dropped;       /* adopted ones of those, dropped after a read:
                               what was computed from them (an epoch's
                               length, a plan) is stale when this grows */
} sio_index_stats;
void sio_index_get_stats(sio_index *x, sio_index_stats *st);

/*
 * Parse and check an index file held in memory (the same reader the store
 * uses; fuzzed). On SIO_OK: the groups (malloc'd array, free()) and the
 * header fields. SIO_ERR_FORMAT with err naming the first problem.
 */
typedef struct sio_index_file {
    uint32_t flags;
    uint64_t size, mtime;
    uint64_t ngroups;
    sio_index_group *groups;
} sio_index_file;
sio_code sio_index_parse(const void *data, size_t len, sio_index_file *out,
                         sio_error *err);

/*
 * As sio_index_parse, for a shard of shard_size bytes: the group count
 * the trailer claims is checked against the shard's size before anything
 * is allocated (memory is bounded by the shard's size, not by what the
 * file says), and what parses must pass sio_index_check. SIO_ERR_LIMIT
 * when the file is well-formed but implausible for the shard.
 */
sio_code sio_index_parse_for(const void *data, size_t len, uint64_t shard_size,
                             sio_index_file *out, sio_error *err);

/*
 * Is a parsed index plausible for a shard of `size` bytes (UINT64_MAX or
 * 0: unknown, which is never plausible)? For a tar: at most
 * size/SIO_INDEX_GROUP_SPAN_MIN groups; every group starts inside the
 * shard; groups follow each other with no gap (each ends where the next
 * starts; the last one at the tar's end, UINT64_MAX); each spans at
 * least a header block plus its payload, so the payloads sum to at most
 * the size. For a compressed shard (offsets in the decompressed stream):
 * at most size/SIO_INDEX_PACKED_GROUP_MIN groups. SIO_OK, or
 * SIO_ERR_LIMIT with err naming the first rule broken.
 */
sio_code sio_index_check(const sio_index_file *f, uint64_t size,
                         sio_error *err);

/* Where a shard reader starts and what it skips (sio_shard_open_at). */
typedef struct sio_shard_at {
    uint64_t offset;      /* byte offset of a group's first header (0: the
                             start); for a compressed shard always 0 */
    uint64_t end;         /* read no byte at or past this (UINT64_MAX) */
    uint64_t first_group; /* number of the group at offset */
    uint64_t skip_until;  /* groups below this are read past (no payload
                             kept, nothing returned) */
    const sio_group_recorder *rec; /* told every group read (may be
                             NULL): how an index is built
                             (sio_index_recorder) */
    struct sio_cache_user *cache; /* read through this job's view of the
                             shard cache (NULL: the store directly) */
    uint64_t size_hint;   /* the object's size from the listing (0:
                             unknown) */
    int use_fd;           /* 1: read the bytes from fd with pread() (the
                             plan's data plane), not from the store */
    int fd;               /* borrowed; used when use_fd */
    uint32_t read_cap;    /* read buffer size (0: the io's): a small one
                             reads large members straight into the
                             sample's memory */
    int decompressed;     /* with use_fd: fd holds a compressed shard's
                             decompressed bytes (the groups recorded are
                             positions in that stream: stream-only, as a
                             read of the shard itself records them) */
    const sio_stage_hooks *grow; /* with use_fd: fd is still being written
                             (its reads wait for the bytes; NULL: it is
                             whole) */
} sio_shard_at;

/* Open a shard at a group (at NULL: from the start, as sio_shard_open).
 * Samples carry their group number as index_in_shard. */
sio_code sio_shard_open_at(sio_io *io, const char *url, uint32_t index,
                           const sio_shard_limits *limits,
                           const sio_shard_at *at, sio_shard **out,
                           sio_error *err);
/* Groups read so far, counted from at->first_group (the number of the
 * next group). */
uint64_t sio_shard_groups(const sio_shard *sh);

/* ------------------------------------------------------------------ */
/* Epoch journals                                                       */

/*
 * The skip decisions of one epoch: shard s ended (for good: 404, 403,
 * corrupt data, a changed object) after its first `groups` groups. Every
 * reader of the epoch (the main stream, seeks, replays, a restarted
 * server) follows it, so the sequence of an epoch never changes once
 * served: the first decision for a shard wins. Persisted as text lines
 * "SKIP <shard> <groups> <code> <reason>" appended with fsync.
 * Thread-safe.
 */
typedef struct sio_journal sio_journal;

/* Open (and load) the journal at path (NULL: memory only) of a dataset of
 * `shards` shards (0: SIO_SHARDS_MAX). The file is not trusted: it is read
 * up to one decision per shard; lines that do not parse, name a shard
 * past the dataset or repeat a shard's decision are not decisions (the
 * first one for a shard wins). Lookups take O(log n). */
sio_code sio_journal_open(const char *path, size_t shards, sio_journal **out,
                          sio_error *err);
void sio_journal_close(sio_journal *j);
/* 1 with *groups when shard s has a decision. */
int sio_journal_cut(sio_journal *j, uint32_t shard, uint64_t *groups);
/* Record a decision unless one exists; returns the decision in force. */
uint64_t sio_journal_record(sio_journal *j, uint32_t shard, uint64_t groups,
                            sio_code code, const char *reason);
/* Decisions recorded. */
size_t sio_journal_count(sio_journal *j);
/* Moves whenever a decision is recorded (no lock): a reader that keeps
 * a shard's cut asks sio_journal_cut again only when it moved. */
uint64_t sio_journal_generation(sio_journal *j);
/* The first `max` decisions in the order they were made (shard and the
 * groups kept before the cut; groups may be NULL); returns how many there
 * are in all. */
size_t sio_journal_list(sio_journal *j, uint32_t *shards, uint64_t *groups,
                        size_t max);
/* 1 when the journal is persisted (a restart will find it). */
int sio_journal_persistent(const sio_journal *j);

/*
 * The epoch's losses, in its logical order (memory only; a journal opened
 * again starts with none, and the epoch's readers tell them again as they
 * pass). A loss is told where the interleave ends a shard (the order's
 * step 4): the shard's bad samples (invisible to the order) and, when a
 * decision or failure ended it, the shard itself. Every reader of the
 * epoch (the feed, a seek, a plan's order, after a restart) finds the
 * same losses at the same places, so what was lost before Y[p] is a
 * function of the data, whichever reader tells it first.
 *
 * A reader numbers its losses from 0 (seq; a checkpoint's order goes on
 * from its own count) and tells each with `at` = the number of items of Y
 * emitted when it was found: it belongs to every share whose last item
 * has a global index >= at. The first teller of loss seq records it; a
 * later one is only compared (1 returned while they agree and the reader
 * is in step; 0: it is not, and must not vouch for coverage).
 * sio_journal_loss_reach: the reader emitted `emitted` items, every loss
 * found before is told (UINT64_MAX: the epoch's input ended).
 */
#define SIO_LOSS_REFS_MAX 16u
#define SIO_LOSS_EVENTS_MAX (1u << 20) /* then coarser: see losses.c */
typedef struct sio_loss_ref {
    uint32_t shard;  /* shard list index */
    uint64_t sample; /* the sample's number in its shard (its group:
                        samples and bad ones alike, from 0) */
} sio_loss_ref;
typedef struct sio_losses_info {
    uint64_t shards;  /* shards skipped or cut short */
    uint64_t samples; /* single bad samples skipped */
    size_t nshard_refs, nsample_refs; /* the first ones, in order */
    uint32_t shard_refs[SIO_LOSS_REFS_MAX];
    sio_loss_ref sample_refs[SIO_LOSS_REFS_MAX];
} sio_losses_info;
int sio_journal_loss(sio_journal *j, uint64_t seq, uint64_t at,
                     uint32_t shard, int shard_lost, uint64_t samples,
                     const uint64_t *groups, size_t ngroups);
void sio_journal_loss_reach(sio_journal *j, uint64_t emitted);
/* Losses told so far (the next seq a reader in step records). */
uint64_t sio_journal_loss_count(sio_journal *j);
/* What was lost before Y[last] was emitted (last: the global index of a
 * share's last item; UINT64_MAX: the whole epoch). Returns 1 when every
 * such loss is known (some reader emitted past last), 0 when not yet
 * (out still holds what is known). */
int sio_journal_losses(sio_journal *j, uint64_t last, sio_losses_info *out);

#ifdef __cplusplus
}
#endif
#endif /* SHARDIO_INDEX_H */
