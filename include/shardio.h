/*
 * shardio.h — the public API of libshardio, shardcast's I/O library.
 *
 * libshardio turns a source (a directory, paths, brace patterns, http(s)://
 * and s3:// URLs and prefixes, object sets, several joined by ::) into a
 * sorted shard list, reads tar/WebDataset shards (and zip) as a stream of
 * samples, and computes the deterministic order of an epoch (docs/order.md,
 * "The order of an epoch" and "Mixing datasets"); feeds deal an epoch to
 * many cursors. It knows nothing of HTTP serving.
 *
 * Threading: the only process-wide state is the sample pool (thread-safe,
 * "Sample memory" below) and the tests' switch of the tar reader
 * (sio_shard_force_libarchive, store/store_int.h). Each handle (sio_shardlist, sio_shard,
 * sio_epoch, sio_consumer) is used by one thread at a time; a
 * sio_shardlist is immutable once built and may be read by many threads.
 * A sio_sample is immutable and reference counted; references may be taken
 * and dropped from any thread.
 *
 * Errors: every fallible call returns a sio_code. Where a handle exists, the
 * detail text of the last error lives on it (..._errmsg()); calls that build
 * a handle take a sio_error that receives the detail. Nothing is printed.
 */
#ifndef SHARDIO_H
#define SHARDIO_H

#include <stddef.h>
#include <stdint.h>

#include "shardcast_version.h"
#include "shardio_hist.h"

#ifdef __cplusplus
extern "C" {
#endif

/* shardcast's version: SHARDCAST_VERSION_STRING of the generated
 * shardcast_version.h (CMakeLists.txt's project(VERSION)). */
#define SIO_VERSION_STRING SHARDCAST_VERSION_STRING

/* Result codes. Values are fixed; new ones are only ever appended. */
typedef enum sio_code {
    SIO_OK = 0,
    SIO_ERR_NOMEM = 1,     /* out of memory */
    SIO_ERR_INVALID = 2,   /* bad argument or bad configuration */
    SIO_ERR_IO = 3,        /* read/open failed (grade: skip or fail) */
    SIO_ERR_NOTFOUND = 4,  /* object or file does not exist */
    SIO_ERR_FORMAT = 5,    /* corrupt tar, bad compression (grade: skip) */
    SIO_ERR_SAMPLE = 6,    /* one bad sample, e.g. repeated field (skip) */
    SIO_ERR_LIMIT = 7,     /* a configured or sanity limit was exceeded */
    SIO_ERR_RETRY = 8,     /* transient failure, worth retrying */
    SIO_ERR_CANCELED = 9,  /* the operation was cancelled */
    SIO_ERR_UNSUPPORTED = 10, /* scheme or format not supported */
    SIO_ERR_AUTH = 11,     /* credentials missing or refused */
    SIO_ERR_AGAIN = 12,    /* nothing ready yet; a notification follows */
    SIO_ERR_CHANGED = 13,  /* the object changed (ETag, size, content no
                              longer matches its index): permanent */
    SIO_ERR_BUSY = 14      /* a limit on concurrent work was reached; try
                              again later */
} sio_code;

/* Fixed, static English text for a code; never NULL. */
const char *sio_strerror(sio_code code);

/* The value of one hexadecimal digit (0-9, a-f, A-F), or -1 for any other
 * byte: percent-escapes, hex digests and URL-encoded listings all decode
 * through it. c: a char (signed or not) or an unsigned char's value. */
int sio_hexval(int c);

/* Milliseconds of CLOCK_MONOTONIC: the one clock of deadlines, timeouts
 * and ages in libshardio, the server and the C client. */
uint64_t sio_now_ms(void);

/* Detail of an error from a call that has no handle yet. */
typedef struct sio_error {
    sio_code code;
    char msg[512];
} sio_error;

/* Log levels, lowest is most severe. */
enum { SIO_LOG_ERROR = 0, SIO_LOG_WARN = 1, SIO_LOG_INFO = 2, SIO_LOG_DEBUG = 3 };

/* The library logs only through this callback, installed by the host.
 * msg is a key=value line without a trailing newline, valid during the call.
 * It may be called from any of the library's threads. */
typedef void (*sio_log_fn)(void *userdata, int level, const char *msg);

typedef struct sio_logger {
    sio_log_fn fn;   /* NULL: no logging */
    void *userdata;
    int level;       /* messages above this level are not formatted */
} sio_logger;

/* ------------------------------------------------------------------ */
/* The I/O context                                                     */

/*
 * An sio_io holds what reaching storage needs: the backends (file; http and
 * s3 where built), their settings, credentials and the fetch engine. It is
 * thread-safe: one context serves every shard list, shard and epoch of a
 * process. Zero-initialised config means defaults.
 */
typedef struct sio_io sio_io;

/* S3 addressing styles (sio_io_config.s3_addressing). */
enum {
    SIO_S3_ADDRESSING_AUTO = 0,    /* env AWS_S3_ADDRESSING_STYLE, else path
                                      style for an endpoint that is an IP or
                                      localhost, else virtual-hosted */
    SIO_S3_ADDRESSING_PATH = 1,    /* http://endpoint/bucket/key */
    SIO_S3_ADDRESSING_VIRTUAL = 2  /* http://bucket.endpoint/key */
};

/*
 * The fetch engine's settings (http, https, s3); 0 / NULL means the
 * default. Defaults (part_size and parts_per_stream: reading a 1 GiB object
 * from nginx on loopback gave 0.8-1.6 GB/s for one stream with 8 MiB parts
 * and 1-2 parts in flight, and no gain from more or smaller parts; remote
 * stores cap each connection, which is what parallel parts are for, and an
 * epoch already reads K shards at once) and limits (beyond them
 * sio_io_create() is SIO_ERR_INVALID) follow.
 */
#define SIO_FETCH_DEFAULT_INFLIGHT 64u
#define SIO_FETCH_DEFAULT_PER_HOST 32u
#define SIO_FETCH_DEFAULT_PART_SIZE (8u * 1024u * 1024u)
#define SIO_FETCH_DEFAULT_PARTS 2u
#define SIO_FETCH_DEFAULT_RETRIES 10u
#define SIO_FETCH_DEFAULT_RETRY_BASE_MS 100u
#define SIO_FETCH_DEFAULT_RETRY_MAX_MS 20000u
#define SIO_FETCH_DEFAULT_CONNECT_MS 10000u
#define SIO_FETCH_DEFAULT_STALL_MS 30000u
#define SIO_FETCH_INFLIGHT_MAX 1024u
#define SIO_FETCH_PARTS_MAX 64u              /* parts in flight per stream */
#define SIO_FETCH_PART_MIN (64u * 1024u)     /* smaller parts waste requests */
#define SIO_FETCH_PART_MAX (256u * 1024u * 1024u)
#define SIO_FETCH_RETRIES_MAX 100u

typedef struct sio_fetch_config {
    uint32_t max_inflight;      /* requests in flight, all hosts (0: 64) */
    uint32_t max_per_host;      /* connections to one host (0: 32) */
    uint32_t part_size;         /* bytes of one ranged GET part (0: 8 MiB) */
    uint32_t parts_per_stream;  /* ranged parts in flight per shard (0: 2);
                                   a stream holds at most this many parts
                                   of part_size bytes */
    uint32_t max_retries;       /* retries of one request (0: 10) */
    uint32_t retry_base_ms;     /* backoff: attempt n sleeps a uniform
                                   random time in [0, min(retry_max_ms,
                                   retry_base_ms * 2^n)] (0: 100) */
    uint32_t retry_max_ms;      /* (0: 20000) */
    uint32_t connect_timeout_ms;/* (0: 10000) */
    uint32_t stall_timeout_ms;  /* a response that delivers no byte for
                                   this long is retried (0: 30000; rounded
                                   up to whole seconds) */
    const char *ca_file;        /* CA bundle for https (NULL: system);
                                   copied */
    uint32_t threads;           /* engine threads, each a libcurl multi
                                   with its share of max_inflight and
                                   max_per_host; streams and requests are
                                   dealt to them in turn (0: one per four
                                   CPUs, 1..8) */
} sio_fetch_config;

/* Most fetch engine threads. */
#define SIO_FETCH_THREADS_MAX 64u

/* S3 listing threads (sio_io_config.s3_list_workers). */
#define SIO_S3_LIST_WORKERS_DEFAULT 8u
#define SIO_S3_LIST_WORKERS_MAX 64u
/* Splitting a prefix's key range between them
 * (sio_io_config.s3_list_split). */
enum {
    SIO_S3_LIST_SPLIT_AUTO = 0, /* env SHARDCAST_S3_LIST_SPLIT (0/1,
                                   true/false, on/off), else on */
    SIO_S3_LIST_SPLIT_ON = 1,
    SIO_S3_LIST_SPLIT_OFF = 2
};

typedef struct sio_io_config {
    sio_logger log;
    uint32_t read_buffer;  /* bytes per read from a backend (0: 256 KiB) */

    /* Object storage (http, https, s3). Strings are copied by
     * sio_io_create(). */
    sio_fetch_config fetch;
    int allow_link_local;       /* 0 (default): http(s)/s3 data requests
                                   refuse to connect to link-local and
                                   instance-metadata addresses
                                   (169.254.0.0/16, fe80::/10,
                                   fd00:ec2::254, 100.100.100.200), checked
                                   on the resolved address; credential
                                   endpoints (IMDS, container credentials)
                                   are exempt */
    const char *s3_region;      /* NULL: AWS_REGION, AWS_DEFAULT_REGION,
                                   else us-east-1 */
    const char *s3_endpoint;    /* "http(s)://host[:port]"; NULL:
                                   AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL,
                                   else AWS's regional endpoint */
    int s3_addressing;          /* SIO_S3_ADDRESSING_* */
    int s3_anonymous;           /* 1: unsigned requests (public buckets);
                                   0: env AWS_NO_SIGN_REQUEST=true/1 */
    const char *aws_profile;    /* NULL: AWS_PROFILE, else "default" */
    const char *sts_endpoint;   /* NULL: AWS_ENDPOINT_URL_STS,
                                   AWS_ENDPOINT_URL, else AWS STS */
    uint32_t s3_list_workers;   /* threads listing one S3 prefix,
                                   1..SIO_S3_LIST_WORKERS_MAX (0: env
                                   SHARDCAST_S3_LIST_WORKERS, else 8) */
    int s3_list_split;          /* SIO_S3_LIST_SPLIT_* */
} sio_io_config;

sio_code sio_io_create(const sio_io_config *cfg, sio_io **out, sio_error *err);
void sio_io_destroy(sio_io *io);

/* Counters of the fetch engine since the io was created (for metrics). */
typedef struct sio_io_stats {
    uint64_t requests;        /* HTTP requests started (attempts) */
    uint64_t retries;         /* attempts that were retries */
    uint64_t throttles;       /* 503 / 429 / SlowDown answers */
    uint64_t errors;          /* requests that failed for good */
    uint64_t bytes;           /* response body bytes received */
    uint64_t latency_us_sum;  /* time to first byte, summed over ... */
    uint64_t latency_count;   /* ... this many answered requests */
    uint32_t inflight;        /* requests in flight now */
    uint32_t concurrency;     /* current AIMD limit on requests in flight */
} sio_io_stats;

/* Fill *st with a snapshot of the counters (all zero when io has no
 * engine). Thread-safe. Totals over the engine's backends (http, s3). */
void sio_io_get_stats(const sio_io *io, sio_io_stats *st);

/* Object-store work by backend and operation (for metrics). */
typedef enum sio_store_backend {
    SIO_STORE_HTTP = 0,   /* http(s):// through the fetch engine */
    SIO_STORE_S3,         /* s3:// (and its credential requests) */
    SIO_STORE_FILE,       /* local files */
    SIO_STORE_BACKENDS
} sio_store_backend;

typedef enum sio_store_op {
    SIO_STORE_GET = 0,      /* a ranged GET of shard bytes; files: open */
    SIO_STORE_HEAD,         /* object size (HEAD; files: stat) */
    SIO_STORE_LIST,         /* a listing page (files: a directory) */
    SIO_STORE_CREDENTIALS,  /* STS, IMDS, container credentials (s3) */
    SIO_STORE_OTHER,
    SIO_STORE_OPS
} sio_store_op;

/* "http", "s3", "file"; "get", "head", "list", "credentials", "other". */
const char *sio_store_backend_name(sio_store_backend b);
const char *sio_store_op_name(sio_store_op op);

typedef struct sio_store_stats {
    /* Counters of each backend; `concurrency` is the engine's (the same
     * for http and s3, 0 for files). latency_* are not kept per backend. */
    sio_io_stats backend[SIO_STORE_BACKENDS];
    /*
     * Latency of each request attempt that got an answer (any status),
     * layout sio_hist_latency: for http and s3 from the attempt's start
     * (DNS, connect and TLS included; not the time queued behind the
     * concurrency limit or a retry's backoff) to the first byte of the
     * answer (libcurl's CURLINFO_STARTTRANSFER_TIME); for files the
     * open / stat / directory listing system calls.
     */
    sio_hist_snap latency[SIO_STORE_BACKENDS][SIO_STORE_OPS];
} sio_store_stats;

/* Snapshot of the io's object-store counters and latencies (all zero when
 * io is NULL). Thread-safe. */
void sio_io_get_store_stats(const sio_io *io, sio_store_stats *st);

/* Work that still uses io after its owner let go (a feed closed while its
 * producer was inside object-store I/O is freed by a closer thread):
 * sio_io_destroy must wait for sio_io_busy() == 0. Thread-safe. */
int sio_io_busy(const sio_io *io);
void sio_io_busy_add(sio_io *io, int delta);

/* ------------------------------------------------------------------ */
/* Brace patterns                                                      */

/* Sanity limit on the number of names one pattern may expand to. */
#define SIO_BRACE_MAX_DEFAULT 10000000u

/*
 * Expand a brace pattern: "{000..127}" (numeric range, zero padded to the
 * width of the wider bound when either bound has a leading zero), "{a,b,c}"
 * (alternatives), several braces (the cartesian product, leftmost brace
 * varies slowest). Text outside braces is copied. Names come out in
 * written order. At most max_items names (0: SIO_BRACE_MAX_DEFAULT), else
 * SIO_ERR_LIMIT. On success *out is a malloc'd array of *n malloc'd strings;
 * free it with sio_strv_free(*out, *n).
 */
sio_code sio_brace_expand(const char *pattern, size_t max_items, char ***out,
                          size_t *n, sio_error *err);

/*
 * The number of names pattern expands to, counted without expanding or
 * allocating: the product of the braces' choice counts (1 without braces),
 * saturated at UINT64_MAX. The syntax and the length and brace limits are
 * those of sio_brace_expand (SIO_ERR_INVALID, SIO_ERR_LIMIT; *n is then 0).
 */
sio_code sio_brace_count(const char *pattern, uint64_t *n, sio_error *err);

/* Free an array of n malloc'd strings and the array. NULL is fine. */
void sio_strv_free(char **v, size_t n);

/* ------------------------------------------------------------------ */
/* Sources and shard lists                                             */

typedef struct sio_shardlist sio_shardlist;

/*
 * Resolve a source to the shard list of a dataset.
 * A source is one or more specs separated by "::" (as in WebDataset) or by
 * whitespace, each one of:
 *   - a directory (local path or file:// URL): its regular files whose names
 *     end in .tar, .tar.gz, .tgz, .tar.zst or .zip, sorted bytewise (no recursion);
 *   - a brace pattern or a plain path to one shard (file:// or local path).
 * Specs are concatenated in written order; a directory's listing is sorted.
 * Every shard must exist (SIO_ERR_NOTFOUND names it).
 * On success *out is owned by the caller: sio_shardlist_free().
 */
sio_code sio_shardlist_resolve(sio_io *io, const char *source,
                               sio_shardlist **out, sio_error *err);

/* Flags of sio_shardlist_resolve_ex. */
enum {
    /* Keep every object a directory or prefix listing holds, not only the
     * shard names (for `shardcast ls --all`); such a list is not a
     * dataset: never serve it. */
    SIO_RESOLVE_ALL_OBJECTS = 1u
};
/* sio_shardlist_resolve with flags (0: the same). */
sio_code sio_shardlist_resolve_ex(sio_io *io, const char *source,
                                  unsigned flags, sio_shardlist **out,
                                  sio_error *err);

/* What a source names before any I/O (sio_source_check). */
typedef struct sio_source_counts {
    uint64_t specs;    /* specs (the pieces between "::" or whitespace) */
    uint64_t names;    /* shards named without a listing: a brace pattern's
                          count, 1 for any other spec; saturated */
    uint64_t listings; /* specs without braces, which may be a directory,
                          a prefix or an object set: they add what they
                          list when resolved */
} sio_source_counts;

/*
 * Check source without I/O and add what it names to *c (zero it first;
 * several sources add up). Checked: the split into specs and their length,
 * brace syntax and counts (counted, never expanded), the scheme (local
 * path, file://, http(s)://, s3://), URL syntax, and, unless
 * allow_link_local, http(s) hosts that are link-local or instance-metadata
 * addresses in any spelling (decimal, hex, octal, short forms,
 * percent-encoded, IPv4-mapped, -compatible or NAT64 IPv6, fe80::/10;
 * braces in a host are expanded, at most 64 hosts). SIO_ERR_INVALID,
 * SIO_ERR_LIMIT or SIO_ERR_UNSUPPORTED with err naming the spec (its URL
 * redacted). Host names and listings are left to resolution.
 */
sio_code sio_source_check(const char *source, int allow_link_local,
                          sio_source_counts *c, sio_error *err);

/* sio_shardlist_resolve_ex holding the list to at most max shards (0 or
 * more than the library's 10^7: 10^7): a brace pattern is counted before
 * it is expanded, and a listing stops at max objects; beyond,
 * SIO_ERR_LIMIT. A server passes each job's bound. */
sio_code sio_shardlist_resolve_max(sio_io *io, const char *source,
                                   unsigned flags, size_t max,
                                   sio_shardlist **out, sio_error *err);

/* Build a shard list from explicit URLs/paths, taken in order (copied). */
sio_code sio_shardlist_from_urls(const char *const *urls, size_t n,
                                 sio_shardlist **out, sio_error *err);

/* One list of the n lists' shards, in order (copied): a mixed job's
 * sources are its consecutive parts. */
sio_code sio_shardlist_concat(const sio_shardlist *const *parts, size_t n,
                              sio_shardlist **out, sio_error *err);

size_t sio_shardlist_count(const sio_shardlist *l);
/* URL of shard i, valid as long as the list lives. */
const char *sio_shardlist_url(const sio_shardlist *l, size_t i);

/*
 * The one redacted form of a URL, used for everything that leaves the
 * backends (wire formats, samples' shard_url as consumers see it, errors,
 * logs, status, metrics); the raw URL stays inside the backend.
 *   - user information "user:password@" becomes "***@";
 *   - in http(s) URLs, the value of every query parameter that carries a
 *     credential becomes "***"; names are compared percent-decoded and
 *     lowercased: prefixes x-amz-, x-goog-, x-ms-, x-oss-; whole names
 *     sig, se, sp, sv, sr, skoid, sktid, pwd, code, policy, jwt, sas, st
 *     (Azure SAS and friends); any name containing sign, token, key,
 *     secret, pass, credential, auth, session, accessid or cookie. A value
 *     holding '@', "://", "%40" or "%3A" (user information or a nested,
 *     possibly presigned URL) is masked too;
 *   - a fragment becomes "#***";
 *   - s3:// keys are raw text and kept (S3 URLs carry no credentials);
 *   - control bytes become %XX (never a '?' that would start a query).
 * Parameter names, the host and the path are kept, so a redacted URL
 * still names its object. Always NUL-terminated, truncated to len.
 * Threading: pure function.
 */
void sio_url_redact(const char *url, char *buf, size_t len);

/*
 * Free text (an error message, a log line, a source list joined by "::")
 * with every URL in it redacted as by sio_url_redact. A URL starts at
 * "scheme://" and ends at white space, a quote, '<', '>', '`' or '\\'; in an
 * s3 URL, a nested "scheme://" starts the next URL. Sources joined by "::"
 * are one URL to this rule: the later ones are nested in its path (user
 * information masked) or in a query value (masked whole). Always NUL-terminated, truncated to len.
 */
void sio_redact_text(const char *text, char *buf, size_t len);
/* Size in bytes of shard i, or UINT64_MAX when unknown. */
uint64_t sio_shardlist_size(const sio_shardlist *l, size_t i);
void sio_shardlist_free(sio_shardlist *l);

/* ------------------------------------------------------------------ */
/* Samples                                                             */

typedef struct sio_field {
    const char *name;           /* extension, lowercased, e.g. "jpg", "txt.gz" */
    const unsigned char *data;  /* payload */
    size_t len;
} sio_field;

/*
 * A sample: the consecutive tar members that share one key. Immutable once
 * produced; all pointers inside stay valid until the last reference is
 * dropped. Samples are never copied per consumer: hand out references.
 */
typedef struct sio_sample {
    const char *key;         /* WebDataset key, e.g. "compressed/0001" */
    const char *shard_url;   /* URL of the shard it came from */
    uint32_t shard_index;    /* index of that shard in the shard list */
    uint64_t index_in_shard; /* 0-based position among the shard's samples */
    uint64_t global_index;   /* position in the epoch's sequence Y (set by
                                the epoch; UINT64_MAX before) */
    size_t nfields;
    const sio_field *fields; /* in tar order */
    size_t bytes;            /* sum of field lengths */
    uint32_t source;         /* a mixed epoch's source it came from
                                (sio_mix_source order; 0 unmixed) */
} sio_sample;

/* Take / drop a reference. Thread-safe. The last unref frees the sample. */
void sio_sample_ref(const sio_sample *s);
void sio_sample_unref(const sio_sample *s);

/* Field by name, or NULL. */
const sio_field *sio_sample_field(const sio_sample *s, const char *name);

/*
 * Sample memory. A sample is one block: its payload, then its header (the
 * struct, field table, key, names and URL). Blocks of up to
 * SIO_POOL_CLASS_MAX bytes come from a process-wide pool in size classes
 * (four per power of two, so a block is at most 25% above what it holds),
 * carved from large anonymous slabs, and go back to the pool when the
 * last reference is dropped. The pool keeps at most `idle_max` bytes of
 * idle blocks resident (SIO_POOL_IDLE_DEFAULT until configured); the pages
 * of the others go back to the kernel while their addresses wait for
 * reuse, so the mapped size is the peak of blocks in use. Larger blocks are
 * malloc'd and freed. Thread-safe.
 */
#define SIO_POOL_CLASS_MAX ((size_t)1 << 26)
#define SIO_POOL_IDLE_DEFAULT ((size_t)64 << 20)

typedef struct sio_pool_stats {
    size_t idle_bytes; /* held idle now */
    size_t idle_max;
    uint64_t reused;   /* blocks handed out from the pool */
    uint64_t fresh;    /* blocks that had to be malloc'd */
    uint64_t released; /* released blocks whose pages went back (pool full) */
    size_t mapped_bytes; /* slabs mapped (address space) */
} sio_pool_stats;

/* A block of at least `need` bytes; *cap receives its size. NULL when out
 * of memory. */
void *sio_pool_get(size_t need, size_t *cap);
/* Give a block back (cap as returned by sio_pool_get). */
void sio_pool_put(void *block, size_t cap);
/* Set the idle budget; frees idle blocks above it. */
void sio_pool_configure(size_t idle_max);
/* Give the pages of every idle block back to the kernel. */
void sio_pool_trim(void);
/*
 * Decay (0, the default: none). With ms > 0, released blocks stay resident
 * above idle_max too, and what stays idle above it for a whole period of
 * ms goes back at the period's end: memory released at once (an epoch's
 * window) and needed again soon (the next epoch) is not faulted in again.
 * Idle memory above idle_max lives at most 2 x ms.
 */
void sio_pool_set_decay(uint32_t ms);
/* Close the decay period when it is due (get and put call it now and then;
 * call it on a timer so that a pool nobody uses still decays). */
void sio_pool_tick(void);
void sio_pool_get_stats(sio_pool_stats *st);

/* ------------------------------------------------------------------ */
/* Reading one shard                                                   */

/* Sanity limits on what a shard may contain (defaults when 0). */
#define SIO_MEMBER_MAX_DEFAULT (1ull << 30) /* bytes in one tar member */
#define SIO_SAMPLE_MAX_DEFAULT (2ull << 30) /* bytes in one sample */
#define SIO_FIELDS_MAX_DEFAULT 1024u        /* fields in one sample */

typedef struct sio_shard_limits {
    uint64_t member_max;
    uint64_t sample_max;
    uint32_t fields_max;
} sio_shard_limits;

typedef struct sio_shard sio_shard;

/*
 * Open shard number `index` of `url` for streaming (tar, tar.gz/tgz,
 * tar.zst, zip; ustar, GNU and pax headers; the format is detected from
 * the bytes). Nothing but the current sample is held in memory. limits may be
 * NULL. The url is copied; io must outlive the shard.
 */
sio_code sio_shard_open(sio_io *io, const char *url, uint32_t index,
                        const sio_shard_limits *limits, sio_shard **out,
                        sio_error *err);

/*
 * Next sample of the shard. On SIO_OK *out is a new reference (release it
 * with sio_sample_unref) or NULL at the end of the shard.
 * SIO_ERR_SAMPLE: one sample was bad (e.g. a repeated field); it was
 *   dropped, the shard can go on.
 * SIO_ERR_FORMAT / SIO_ERR_IO / SIO_ERR_LIMIT: the shard cannot go on.
 * Detail: sio_shard_errmsg().
 */
sio_code sio_shard_next(sio_shard *sh, const sio_sample **out);
/* The same, to index a shard: the next group is read by its headers, its
 * members' data skipped (not read where the stream can skip: a descriptor
 * read with pread, sio_shard_at.use_fd), and told to the recorder, with
 * the same rules and errors as sio_shard_next; no sample is made. *end is
 * 1 at the end of the shard. */
sio_code sio_shard_skim(sio_shard *sh, int *end);
const char *sio_shard_errmsg(const sio_shard *sh);
void sio_shard_close(sio_shard *sh);

/*
 * The WebDataset key/extension split of one member name: the key is the
 * name up to the first dot of its last path component, the extension the
 * rest. Returns 0 and sets *key_len when the name has such a split, -1 when
 * the member yields no sample (no dot in the last component, empty key or
 * extension).
 */
int sio_split_key(const char *name, size_t *key_len);

/* ------------------------------------------------------------------ */
/* Deterministic randomness (part of the public contract; see docs/order.md)  */

typedef struct sio_rng {
    uint64_t s[4];
} sio_rng;

/* Stream identifiers used in the contract. */
enum { SIO_RNG_SHARDS = 1, SIO_RNG_BUFFER = 2, SIO_RNG_MIX = 3 };
/* The stream of pass k of source s of a mixed epoch (docs/order.md "Mixing datasets"). */
#define SIO_RNG_PASS(s, k) ((((uint64_t)(s) + 1) << 32) | (uint32_t)(k))

/* Seed xoshiro256** from (seed, epoch, stream) through SplitMix64. */
void sio_rng_seed(sio_rng *r, uint64_t seed, uint64_t epoch, uint64_t stream);
uint64_t sio_rng_next(sio_rng *r);
/* Uniform integer in [0, n), n >= 1, by rejection (no modulo bias). */
uint64_t sio_rng_below(sio_rng *r, uint64_t n);
/* Fisher-Yates permutation of 0..n-1 into perm[]. */
void sio_permute(sio_rng *r, uint32_t *perm, size_t n);

/* ------------------------------------------------------------------ */
/* The epoch: the global sequence Y                                    */

typedef enum sio_on_error { SIO_ON_ERROR_SKIP = 0, SIO_ON_ERROR_FAIL = 1 } sio_on_error;

/* Shard indexes and epoch journals (include/shardio_index.h). */
typedef struct sio_index sio_index;
typedef struct sio_journal sio_journal;
/* Largest shuffle buffer in samples an epoch accepts (buffer_samples). */
#define SIO_EPOCH_BUFFER_MAX (64u * 1024u * 1024u)

/* ------------------------------------------------------------------ */
/* Mixing (contract version 2; docs/order.md "Mixing datasets")               */

/* How a source's samples per epoch (its quota) are set. */
typedef enum sio_mix_kind {
    SIO_MIX_REPEAT = 0, /* value passes of the source: round(value * N) */
    SIO_MIX_WEIGHT = 1, /* a proportion of epoch_size */
    SIO_MIX_CHOOSE = 2  /* exactly `choose` samples */
} sio_mix_kind;

/* Limits: sources of one job, and passes of one source in one epoch. */
#define SIO_MIX_SOURCES_MAX 256u
#define SIO_MIX_PASSES_MAX (1u << 20)
/* Reader threads one mixed epoch's sources share (unless read_threads
 * alone asks for more): a thread per source would be 512 threads for 256
 * sources at read_threads 2. */
#define SIO_MIX_THREADS_MAX 16u
/* Bounds of a weight (and of repeat's upper end). */
#define SIO_MIX_WEIGHT_MIN (1.0 / 1048576.0)
#define SIO_MIX_WEIGHT_MAX 1048576.0

typedef struct sio_mix_spec {
    sio_mix_kind kind;
    double value;     /* repeat: passes (>= 0); weight: > 0 */
    uint64_t choose;  /* SIO_MIX_CHOOSE */
} sio_mix_spec;

/*
 * Quotas of an epoch: choose -> choose; repeat r -> floor(r * N + 0.5)
 * with N = counts[s] (the source's good samples; UINT64_MAX: unknown ->
 * SIO_ERR_AGAIN); weights share epoch_size minus the other quotas by the
 * largest-remainder rule on integer weights floor(w * 2^32 + 0.5) (ties
 * to the lower source). Weights need an epoch_size; with an epoch_size
 * and no weighted source the quotas must add up to it. SIO_ERR_INVALID
 * with err's reason otherwise.
 */
sio_code sio_mix_quotas(const sio_mix_spec *specs, size_t n,
                        uint64_t epoch_size, const uint64_t *counts,
                        uint64_t *quotas, sio_error *err);

/* One source of a mixed epoch: a part of the shard list. */
typedef struct sio_mix_source {
    uint32_t first, count; /* shard list indices [first, first + count) */
    uint64_t quota;        /* samples this epoch */
    int resample;          /* shards drawn with replacement */
} sio_mix_source;

typedef struct sio_epoch_config {
    uint64_t seed;
    uint64_t epoch;
    uint32_t interleave;       /* K >= 1 shards open at once */
    uint32_t buffer_samples;   /* B >= 1; 1 means no buffer shuffle */
    uint64_t buffer_bytes;     /* byte cap of the buffer; 0: no cap */
    sio_on_error on_error;
    sio_shard_limits limits;
    sio_logger log;
    /* Read-ahead (none of these changes the order of the epoch):
     * read_threads threads decode shards ahead of the interleave (0: the
     * calling thread reads, nothing runs ahead); the K shards in the slots
     * and the next readahead_shards of the permuted order are open at once;
     * each holds at most readahead_bytes of decoded samples (0: 4 MiB) and
     * SIO_READAHEAD_SAMPLES samples. A mixed epoch's sources share one
     * pool of min(read_threads x sources, max(read_threads,
     * SIO_MIX_THREADS_MAX)) threads. */
    uint32_t read_threads;
    uint32_t readahead_shards;
    uint64_t readahead_bytes;
    /* Scale-out: replica j of R (R = 0 or 1: a single server) reads only
     * the shards at positions p of the permuted order with p mod R == j,
     * and seeds its buffer with stream SIO_RNG_BUFFER + 256 * j; its Y is
     * that replica's part of the epoch. The parts of all R replicas are
     * disjoint and together hold every sample once. */
    uint32_t replica, replicas;
    /* Shard indexes (may be NULL): readers offer every group they read, and
     * sio_epoch_open_at() computes positions from them. Thread-safe; must
     * outlive the epoch. */
    sio_index *index;
    /* The epoch's skip decisions (may be NULL: then a failed shard is
     * skipped without a record, and a seek cannot follow it). Shared by
     * every reader of this (job, epoch); must outlive the epoch. */
    sio_journal *journal;
    /* The job's view of the shard cache (shardio_cache.h; NULL: shards
     * are read from the store). Must outlive the epoch. */
    struct sio_cache_user *cache;
    /* The part of the list this epoch reads: indices [range_first,
     * range_first + range_count) (range_count 0: all), in an order drawn
     * with stream order_stream (0: SIO_RNG_SHARDS): a permutation, or
     * with resample n draws below(n) (with replacement). */
    uint32_t range_first, range_count;
    uint64_t order_stream;
    int resample;
    /* A mixed epoch (nmix > 0; contract version 2): its sources, each a
     * part of the list with its quota. Copied. Needs replicas <= 1. */
    const sio_mix_source *mix;
    uint32_t nmix;
    /* A plan's budget for remote shards held in memory (plan/stage.c:
     * neither local nor taken by the cache); 0: such shards are not
     * staged, their epochs are the feed's. */
    uint64_t stage_bytes;
} sio_epoch_config;

/* Samples one shard reader may hold ahead of the interleave. */
#define SIO_READAHEAD_SAMPLES 4096u
/* Default bytes one shard reader may hold ahead. */
#define SIO_READAHEAD_BYTES_DEFAULT (4ull << 20)

typedef struct sio_epoch sio_epoch;

/* Start an epoch over `list`; io and list must outlive the epoch. */
sio_code sio_epoch_open(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, sio_epoch **out,
                        sio_error *err);

/*
 * Start the epoch at position pos of Y (its first sample is Y[pos]): the
 * state at pos (slot positions, buffer contents, PRNG) is computed from
 * cfg->index alone, then only what Y[pos:] needs is read: the buffer's
 * samples and the slot shards from their offsets, by ranged reads.
 * SIO_ERR_AGAIN: the indexes do not reach pos yet (a shard the epoch
 * opened before pos is not indexed that far); SIO_ERR_UNSUPPORTED without
 * an index. A pos at or past the end gives an epoch that ends at once.
 */
sio_code sio_epoch_open_at(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *cfg, uint64_t pos,
                           sio_epoch **out, sio_error *err);

/* One element of Y by its place: group `group` of shard list index
 * `shard` (the sample's index_in_shard). */
typedef struct sio_order_item {
    uint32_t shard;
    uint64_t group;
    uint32_t source; /* a mixed epoch's source of the item (else 0) */
} sio_order_item;

/*
 * Y[from], Y[from+1], ... (at most max) from the indexes alone, equal to
 * what streaming the epoch produces. *n is how many were written; fewer
 * than max at the end of the epoch. SIO_ERR_AGAIN (with *n items written)
 * where the indexes stop. No bytes are read.
 */
sio_code sio_epoch_order(sio_io *io, const sio_shardlist *list,
                         const sio_epoch_config *cfg, uint64_t from,
                         sio_order_item *items, size_t max, size_t *n,
                         sio_error *err);

/* The same, each item handed to fn(ud, i, item) as it is decided (item i
 * is Y[from + i]) instead of written to an array; fn returns SIO_OK to go
 * on, else the order stops there with that code. */
typedef sio_code (*sio_order_fn)(void *ud, uint64_t i,
                                 const sio_order_item *item);
sio_code sio_epoch_order_each(sio_io *io, const sio_shardlist *list,
                              const sio_epoch_config *cfg, uint64_t from,
                              size_t max, sio_order_fn fn, void *ud,
                              size_t *n, sio_error *err);

/*
 * The same order kept open: Y from position `from`, produced by
 * sio_order_next as far as the indexes reach and continued from there by
 * the next call once they reach further (a plan that grows while its
 * shards are indexed). sio_order_next hands at most max items to fn (item
 * i of a call is the call's i-th) and returns SIO_OK (fewer than max: the
 * epoch ended, sio_order_done says 1), SIO_ERR_AGAIN where the indexes or
 * the journal do not decide the next item yet (a shard the order opened is
 * indexed only so far: index it, or record its end in the journal, and
 * call again), or another code with err's reason: the epoch fails there
 * (on_error=fail, a bad sample under fail). One thread at a time.
 */
typedef struct sio_order sio_order;
sio_code sio_order_open(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, uint64_t from,
                        sio_order **out, sio_error *err);
sio_code sio_order_next(sio_order *o, size_t max, sio_order_fn fn, void *ud,
                        size_t *n, sio_error *err);
int sio_order_done(const sio_order *o);
/* Take no group of a shard before fn(ud, shard, at) lets it in: fn says
 * how many of the shard's groups the order may take (0: none yet;
 * UINT64_MAX: all its index has; the index is what the caller decided to
 * rely on: others may be filling it meanwhile, and a shard still arriving
 * is let in as far as its bytes came); at is the group the order takes
 * next there (what it took of the shard so far). The order stops with
 * SIO_ERR_AGAIN at the first group not let in, and asks again when it
 * comes back there. */
void sio_order_set_gate(sio_order *o,
                        uint64_t (*fn)(void *ud, uint32_t shard,
                                       uint64_t at),
                        void *ud);
/* Shards that fail the order (an epoch under on_error=fail whose reads
 * its owner makes): fn(ud, shard, &at, &rc, msg, msglen) returns 1 when
 * a read of shard failed with rc (msg: why) after its first `at` groups.
 * The order then fails where it would take group `at` of that shard, as
 * the read failing there fails the epoch's own readers (the same code
 * and message: "shard failed url=... code=...: msg"). Asked where the
 * gate or the index keeps the order from the shard's next group, and
 * before each group while fn has named no place for the shard. */
void sio_order_set_stop(sio_order *o,
                        int (*fn)(void *ud, uint32_t shard, uint64_t *at,
                                  sio_code *rc, char *msg, size_t msglen),
                        void *ud);
/* Where the order finds shard's groups: fn(ud, shard), or (fn NULL or
 * returning NULL) the index's entry for the shard's URL (a plan staging a
 * zip as the tar of its samples keeps that tar's groups apart). Asked
 * once per shard the order opens. */
struct sio_index_entry;
void sio_order_set_entries(sio_order *o,
                           struct sio_index_entry *(*fn)(void *ud,
                                                         uint32_t shard),
                           void *ud);
/* Did the order fail (a code other than SIO_OK or SIO_ERR_AGAIN: the
 * epoch failed there, under on_error=fail, or it ran out of memory)? */
int sio_order_failed(const sio_order *o);
/* How many of the entries sio_order_shards_ahead writes first are the
 * shards the order reads now (its slots; a mixed order's: those of every
 * source's open pass, an entry UINT32_MAX where a slot holds none). */
size_t sio_order_slot_count(const sio_order *o);
/* The shards the order reads next, in the order it needs them: those
 * open in its slots, then the next ones of its permutation (at most max
 * written to shards; list indexes, a shard may repeat under resampling). */
size_t sio_order_shards_ahead(const sio_order *o, uint32_t *shards,
                              size_t max);
void sio_order_close(sio_order *o);
/* Items of Y the order has handed out so far, counted from position 0
 * (the `from` it was opened at included). */
uint64_t sio_order_pos(const sio_order *o);

/*
 * A checkpoint of an open order: its whole state (slots and the groups
 * they reached, the buffer's and the output queue's entries, the PRNG,
 * the counters) at the position it reached, so that Y can be produced
 * again from there without replaying it from the start. A checkpoint is
 * metadata only (about 24 bytes per buffered entry plus a few per slot).
 *
 * sio_order_save: the state of o now; NULL when out of memory or when o
 * failed (an order that returned a code other than SIO_OK or
 * SIO_ERR_AGAIN). sio_order_open_ckpt: an order that goes on from c
 * exactly as the saved one went on (items i of its calls are Y[pos + i]),
 * given the io, list and cfg the saved order was opened with (the gate is
 * not part of the state: set it again when wanted). Checkpoints are
 * immutable: any thread may open orders from one at once.
 */
typedef struct sio_order_ckpt sio_order_ckpt;
sio_order_ckpt *sio_order_save(const sio_order *o);
uint64_t sio_order_ckpt_pos(const sio_order_ckpt *c);
size_t sio_order_ckpt_bytes(const sio_order_ckpt *c);
void sio_order_ckpt_free(sio_order_ckpt *c);
sio_code sio_order_open_ckpt(sio_io *io, const sio_shardlist *list,
                             const sio_epoch_config *cfg,
                             const sio_order_ckpt *c, sio_order **out,
                             sio_error *err);

/* The number of samples of the epoch (this replica's part), once every
 * shard is indexed; SIO_ERR_AGAIN before. */
sio_code sio_epoch_count(sio_io *io, const sio_shardlist *list,
                         const sio_epoch_config *cfg, uint64_t *count);

/*
 * Next sample of Y. On SIO_OK *out is a new reference with global_index set,
 * or NULL at the end of the epoch. Any other code ends the epoch (with
 * on_error=fail, or an unrecoverable condition); detail in
 * sio_epoch_errmsg().
 */
sio_code sio_epoch_next(sio_epoch *ep, const sio_sample **out);
const char *sio_epoch_errmsg(const sio_epoch *ep);
/* 1 when the epoch failed because a shard index it relied on (a seek's
 * offsets, a sample's place) was loaded from a file or sidecar that a read
 * then disagreed with: the index was dropped and the shard indexed again
 * by reading it, so an epoch opened again at the position reached is
 * right (the feed does so). Call after sio_epoch_next failed. */
int sio_epoch_index_dropped(const sio_epoch *ep);

/* Counters of an epoch so far. */
/* Samples a mixed epoch took from source s so far (0 unmixed). */
uint64_t sio_epoch_source_samples(const sio_epoch *ep, uint32_t s);

typedef struct sio_epoch_stats {
    uint64_t samples;        /* emitted */
    uint64_t bytes;          /* payload bytes emitted */
    uint64_t shards_done;
    uint64_t shards_skipped; /* on_error=skip */
    uint64_t samples_skipped;
} sio_epoch_stats;
void sio_epoch_get_stats(const sio_epoch *ep, sio_epoch_stats *st);
void sio_epoch_close(sio_epoch *ep);
/* Samples of Y emitted so far, counted from Y[0] also after a seek: at the
 * end of the epoch, its length N. */
uint64_t sio_epoch_emitted(const sio_epoch *ep);
/* Ask the epoch to stop: waits and retry backoffs end at once; a read in
 * progress ends when the store answers. Thread-safe; the epoch must still
 * be closed. */
void sio_epoch_cancel(sio_epoch *ep);

/* ------------------------------------------------------------------ */
/* Partition: consumer r of W gets Y[i] with i mod W == r              */

typedef enum sio_partition {
    SIO_PARTITION_EVEN_DROP = 0, /* equal counts, the remainder is dropped */
    SIO_PARTITION_EVEN_PAD = 1,  /* equal counts, tail padded from the start */
    SIO_PARTITION_NONE = 2       /* i mod W, counts may differ by one */
} sio_partition;

const char *sio_partition_name(sio_partition p);
/* Parse "even-drop" | "even-pad" | "none"; -1 when unknown. */
int sio_partition_parse(const char *s, sio_partition *out);

/* Bounds on what a consumer may ask for (shardio/epoch/partition.c). Every
 * index of Y a request can reach stays at or below SIO_POSITION_MAX, so
 * no arithmetic on it can wrap. */
#define SIO_WORLD_MAX 65536u
#define SIO_POSITION_MAX (1ull << 62)

/* 0 when consumer rank of world may start at share position `start` from
 * global_start; -1 with a one-line reason (a 400 for the server). */
int sio_share_validate(uint32_t rank, uint32_t world, uint64_t global_start,
                       uint64_t start, char *msg, size_t len);
/* *index = global_start + rank + k*world; -1 when above SIO_POSITION_MAX. */
int sio_share_index(uint64_t global_start, uint32_t rank, uint32_t world,
                    uint64_t k, uint64_t *index);
/* Samples in consumer rank's share of an epoch of n samples. */
uint64_t sio_share_length(uint64_t n, uint64_t global_start, uint32_t rank,
                          uint32_t world, sio_partition p);
/* even-pad: the index of Y that a tail index (>= n) repeats; needs
 * n > global_start. */
uint64_t sio_share_pad_source(uint64_t n, uint64_t global_start,
                              uint64_t index);

typedef struct sio_consumer sio_consumer;

/*
 * A consumer's share of an epoch. It takes ownership of `ep`. `start` is a
 * position within the share (the number of the share's samples already
 * consumed); those are skipped.
 */
sio_code sio_consumer_open(sio_epoch *ep, uint32_t rank, uint32_t world,
                           sio_partition policy, uint64_t start,
                           sio_consumer **out, sio_error *err);
/*
 * As sio_consumer_open, for an elastic resume: Y[global_start + i] goes to
 * consumer i mod world (the samples before global_start were consumed by a
 * previous run); even-pad pads from Y[global_start] on.
 */
sio_code sio_consumer_open_at(sio_epoch *ep, uint32_t rank, uint32_t world,
                              sio_partition policy, uint64_t global_start,
                              uint64_t start, sio_consumer **out,
                              sio_error *err);
/* Next sample of the share: as sio_epoch_next(). */
sio_code sio_consumer_next(sio_consumer *c, const sio_sample **out);
const char *sio_consumer_errmsg(const sio_consumer *c);
/* Position within the share: samples handed out so far, including start. */
uint64_t sio_consumer_position(const sio_consumer *c);
void sio_consumer_close(sio_consumer *c);

/* ------------------------------------------------------------------ */
/* Feeds: one epoch read once, dealt to many consumers                 */

/*
 * A feed runs one epoch (one sio_epoch on its own producer thread) into a
 * window of Y that every attached cursor reads from by reference. The
 * window slides past an index once no cursor (and no reservation, below)
 * still needs it; the producer waits while the window is full, so the
 * slowest consumer sets the pace and memory stays bounded.
 *
 * Reservations: when a cursor of world W attaches, the other ranks of W
 * are expected; for join_timeout_ms the window keeps their first samples.
 * A cursor that detaches keeps its place for rejoin_grace_ms, so a
 * consumer that reconnects with its position continues from the window.
 * A cursor whose samples have already left the window (a very late joiner,
 * a resume far behind) reads them from a private replay of the epoch:
 * slower, but the same samples in the same order.
 *
 * Threading: the feed is thread-safe; each cursor is used by one thread at
 * a time. notify callbacks run on the producer thread with the feed's lock
 * held: they must be quick, must not block and must not call the feed.
 */
typedef struct sio_feed sio_feed;
typedef struct sio_cursor sio_cursor;

/* What a feed does with a consumer that holds the window back. */
typedef enum sio_feed_lag {
    SIO_FEED_LAG_DETACH = 0, /* after lag_grace_ms, slide anyway: the
                                laggard continues by seeks (default) */
    SIO_FEED_LAG_WAIT = 1    /* the slowest consumer paces everyone */
} sio_feed_lag;

typedef struct sio_feed_config {
    uint32_t window_samples;    /* 0: 65536 */
    uint64_t window_bytes;      /* 0: 256 MiB */
    uint32_t join_timeout_ms;   /* 0: 30000 */
    uint32_t rejoin_grace_ms;   /* 0: 60000 */
    uint32_t wake_batch;        /* a waiting cursor is woken once this many
                                   of its samples are ready, or the window
                                   is full, or the epoch ended (0: 16) */
    sio_feed_lag lag_policy;
    uint32_t lag_grace_ms;      /* a full window may keep waiting consumers
                                   waiting this long (0: 2000) */
    uint32_t max_seeks;         /* seek feeds at once for this feed (0: 4,
                                   at most 256); beyond: SIO_ERR_BUSY */
    uint32_t seek_window_samples; /* window of a seek feed (0: 1/16 of
                                     window_samples) */
    uint64_t seek_window_bytes;   /* (0: 1/16 of window_bytes) */
    /* A budget of seek feeds shared by many feeds (a server's), or NULL:
     * *seek_budget counts them, at most seek_budget_max. */
    _Atomic uint32_t *seek_budget;
    uint32_t seek_budget_max;
    /* 0: start reading at once (a prefetch fills its window before anyone
     * comes); 1: read nothing until a cursor reads this feed itself (the
     * first consumer may resume far ahead, by a seek). */
    int lazy;
    /* Called once the feed and all its seek feeds are freed (perhaps on a
     * closer thread, after sio_feed_close returned): what the feed uses
     * (io, list, index, journal) may go from then on. May be NULL. */
    void (*released)(void *userdata);
    void *released_userdata;
} sio_feed_config;

/* Start reading the epoch. io and list must outlive the feed. */
sio_code sio_feed_open(sio_io *io, const sio_shardlist *list,
                       const sio_epoch_config *ecfg,
                       const sio_feed_config *fcfg, sio_feed **out,
                       sio_error *err);
/* Stop the producer and free the feed; every cursor must be closed.
 * Never blocks: a producer inside object-store I/O is joined by a closer
 * thread (see sio_io_busy and sio_feed_config.released). */
void sio_feed_close(sio_feed *f);

typedef void (*sio_notify_fn)(void *userdata);

typedef struct sio_cursor_config {
    uint32_t rank, world;
    sio_partition policy;
    uint64_t start;         /* position within the share to start from */
    uint64_t global_start;  /* elastic resume: Y[global_start + i] goes to
                               consumer i mod world */
    sio_notify_fn notify;   /* called when sio_cursor_next() may proceed
                               after it returned SIO_ERR_AGAIN (may be NULL
                               for blocking use) */
    void *userdata;
} sio_cursor_config;

sio_code sio_feed_attach(sio_feed *f, const sio_cursor_config *cfg,
                         sio_cursor **out, sio_error *err);

/*
 * Next sample of the cursor's share. SIO_OK with *out a new reference, or
 * NULL at the end of the share; SIO_ERR_AGAIN when the next sample is not
 * in the window yet (the notify callback fires when it may be); any other
 * code: the epoch failed (sio_cursor_errmsg).
 */
sio_code sio_cursor_next(sio_cursor *c, const sio_sample **out);
/* As sio_cursor_next, but waits instead of returning SIO_ERR_AGAIN. */
sio_code sio_cursor_next_wait(sio_cursor *c, const sio_sample **out);
const char *sio_cursor_errmsg(const sio_cursor *c);
/* Position within the share (samples handed out, including start). */
uint64_t sio_cursor_position(const sio_cursor *c);
/* Detach: the feed keeps the cursor's place for rejoin_grace_ms. */
void sio_cursor_close(sio_cursor *c);

/* Status of a feed, for the status endpoint. */
typedef struct sio_feed_consumer {
    uint32_t rank, world;
    uint64_t position;   /* within the share */
    uint64_t next_index; /* next index of Y it needs */
    uint64_t lag;        /* samples of Y produced beyond next_index */
    int attached;        /* 0: detached within its grace, or expected */
    int replay;          /* reading from a seek feed */
    uint64_t idle_ms;    /* since it last took a sample or attached */
    int expected;        /* never attached: a rank of a world seen from its
                            peers, within the join timeout (attached = 0) */
} sio_feed_consumer;

/* Seeks of a feed: counters since it opened, and what is open now. */
typedef struct sio_feed_seek_stats {
    uint64_t opened;        /* seek feeds started */
    uint64_t shared;        /* cursors that joined an open seek feed */
    uint64_t busy;          /* refused: max_seeks or the budget reached */
    uint64_t replays;       /* seeks that had to replay from the start
                               (shards not indexed far enough) */
    uint64_t lag_detaches;  /* times the lag policy slid the window */
    uint32_t active;        /* seek feeds open now */
    uint32_t replaying;     /* of which replays */
    uint64_t window_bytes;  /* bytes held by their windows */
    uint64_t ready_us;      /* opening to first sample, summed over ... */
    uint64_t ready_count;   /* ... this many seek feeds */
    sio_hist_snap ready;    /* the same times (sio_hist_latency) */
} sio_feed_seek_stats;

typedef struct sio_feed_stats {
    uint64_t produced;      /* samples of Y produced so far */
    uint64_t window_lo;     /* first index still held */
    uint64_t window_samples, window_bytes;
    int ended;              /* the epoch has been read to its end */
    int failed;
    uint64_t length;        /* N, once a feed of the family read the epoch
                               to its end; UINT64_MAX before */
    sio_epoch_stats epoch;
    sio_feed_seek_stats seek;
} sio_feed_stats;

/* Snapshot of the feed; up to max consumers (attached, detached within
 * grace, and expected) into cons, their total count in *ncons. */
void sio_feed_get_stats(sio_feed *f, sio_feed_stats *st,
                        sio_feed_consumer *cons, size_t max, size_t *ncons);

#ifdef __cplusplus
}
#endif
#endif /* SHARDIO_H */
