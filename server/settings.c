/*
 * settings.c — the settings table, its loaders (defaults, config file,
 * environment, command line) and the job spec parser (contract in
 * settings.h).
 *
 * Threading: sc_settings_load runs on the main thread before any other
 * thread; the job spec functions are pure and run on MHD threads for
 * PUT /v1/jobs/{job}. Ownership: string values are malloc'd copies owned by
 * the sc_config / sc_jobspec they are stored in.
 * Every value, defaults included, goes through the same parser and bounds
 * check, so a default can never be out of its own bounds, and a job from
 * the API is held to exactly the rules of a job from the command line.
 */
#include "settings.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "shardio.h"
#include "shardio_units.h"
#include "shardio_wire.h"

typedef enum stype {
    T_STRING, /* free text of min..max bytes */
    T_PATH,   /* a file path, may stay unset */
    T_SECRET, /* a token: visible ASCII, never printed */
    T_JOB,    /* a job name: 1..SC_JOB_NAME_MAX of [A-Za-z0-9._-] */
    T_ADDR,   /* an IPv4 or IPv6 literal */
    T_U32,
    T_U64,
    T_BYTES,  /* integer with optional K/M/G/T (binary) suffix, or a
                 Kubernetes binary quantity (Ki/Mi/Gi/Ti) */
    T_BYTES32, /* T_BYTES stored in a uint32 */
    T_MS,     /* a duration in milliseconds (uint32): a bare number is
                 ms; or with a unit: 500ms, 30s, 5m, 1h */
    T_SECS,   /* a duration in seconds (uint32): a bare number is s; or
                 with a unit (whole seconds: 30s, 5m, 1h, 2000ms) */
    T_ENUM,
    T_BOOL,   /* true/false, 1/0, yes/no, on/off; stored as 1/0, or as
                 choices[0].value / choices[1].value when choices is set */
    T_FIELDS  /* a field filter: comma-separated extensions */
} stype;

/* S_IO: the server's object-store settings (the sio_io_config it hands
 * libshardio, sc_config.io); loaded, logged and shown like S_SERVER. */
enum { S_SERVER = 0, S_JOB = 1, S_IO = 2 };

typedef struct choice {
    const char *name;
    int value;
} choice;

typedef struct setting {
    const char *name;      /* --name, SHARDCAST_NAME, config-file key */
    const char *key;       /* job spec key (S_JOB only) */
    int scope;             /* S_SERVER, S_IO: offset in sc_config;
                              S_JOB: in sc_jobspec */
    size_t offset;
    stype type;
    const char *def;       /* NULL: unset (required for job name/source) */
    uint64_t min, max;
    const choice *choices; /* T_ENUM, terminated by a NULL name */
    const char *help;
} setting;

static const choice partition_choices[] = {
    {"even-drop", SIO_PARTITION_EVEN_DROP},
    {"even-pad", SIO_PARTITION_EVEN_PAD},
    {"none", SIO_PARTITION_NONE},
    {NULL, 0}};
static const choice on_error_choices[] = {
    {"skip", SIO_ON_ERROR_SKIP}, {"fail", SIO_ON_ERROR_FAIL}, {NULL, 0}};
static const choice plane_choices[] = {{"auto", SC_DATA_PLANE_AUTO},
                                       {"stream", SC_DATA_PLANE_STREAM},
                                       {NULL, 0}};
static const choice lag_choices[] = {{"detach", SIO_FEED_LAG_DETACH},
                                     {"wait", SIO_FEED_LAG_WAIT},
                                     {NULL, 0}};
/* A T_BOOL stored as SIO_S3_LIST_SPLIT_* (0 would mean "ask the
 * environment" to libshardio). */
static const choice split_values[] = {{"true", SIO_S3_LIST_SPLIT_ON},
                                      {"false", SIO_S3_LIST_SPLIT_OFF},
                                      {NULL, 0}};
#define LEVEL_CHOICE(name, level) {name, level},
static const choice level_choices[] = {SC_LOG_LEVELS(LEVEL_CHOICE){NULL, 0}};

/* Bounds of the feed window (libshardio caps window_samples at 16 Mi). */
#define WINDOW_SAMPLES_MAX (16u << 20)
/* Epoch read-ahead threads (libshardio's own cap is higher). */
#define READ_THREADS_MAX 64u

#define SRV(f) S_SERVER, offsetof(sc_config, f)
#define JOB(f) S_JOB, offsetof(sc_jobspec, f)
#define IO(f) S_IO, offsetof(sc_config, io.f)
static const setting settings[] = {
    /* ---- jobs: the --job form, and the keys of a job object ---- */
    {"job", "name", JOB(name), T_JOB, NULL, 1, SC_JOB_NAME_MAX, NULL,
     "job name (URL path /v1/jobs/NAME/...)"},
    {"source", "source", JOB(source), T_STRING, NULL, 1, SC_SOURCE_MAX, NULL,
     "shards: directory, path, brace pattern or URL; several joined by ::"},
    {"seed", "seed", JOB(seed), T_U64, "0", 0, UINT64_MAX, NULL,
     "shuffle seed; with the epoch it fixes the order"},
    {"shuffle-buffer", "shuffle_buffer", JOB(shuffle_buffer), T_U32, "1000",
     1, SIO_EPOCH_BUFFER_MAX, NULL, "samples in the shuffle buffer (1: no shuffle)"},
    {"shuffle-buffer-bytes", "shuffle_buffer_bytes", JOB(buffer_bytes), T_BYTES,
     "256MiB", 0, UINT64_C(1) << 40, NULL,
     "byte cap of the shuffle buffer (0: no cap)"},
    {"interleave", "interleave", JOB(interleave), T_U32, "4", 1, 4096, NULL,
     "shards open at once, read round-robin"},
    {"partition", "partition", JOB(partition), T_ENUM, "even-drop", 0, 0,
     partition_choices, "even-drop | even-pad | none"},
    {"fields", "fields", JOB(fields), T_FIELDS, NULL, 0, 0, NULL,
     "fields sent when a request names none (default: every field)"},
    {"on-error", "on_error", JOB(on_error), T_ENUM, "skip", 0, 0,
     on_error_choices, "a missing or corrupt shard: skip it, or fail"},
    {"read-threads", "read_threads", JOB(read_threads), T_U32, "2", 0,
     READ_THREADS_MAX, NULL,
     "threads decoding shards ahead of each epoch (0: none)"},
    {"epoch-size", "epoch_size", JOB(epoch_size), T_U64, "0", 0,
     UINT64_C(1) << 53, NULL,
     "samples per epoch: passes wrap or stop there (0: one pass over the "
     "source, or the sum of the sources' quotas)"},
    {"cache", "cache", JOB(cache), T_BOOL, "true", 0, 0, NULL,
     "read this job's shards through the server's shard cache (when "
     "--cache-bytes is set): on | off"},

    /* ---- the server ---- */
    {"config", NULL, SRV(config), T_PATH, NULL, 1, 4096, NULL,
     "JSON config file: {\"jobs\":[{job keys}...], server settings}"},
    {"listen", NULL, SRV(listen), T_ADDR, "127.0.0.1", 0, 0, NULL,
     "address to listen on (IPv4 or IPv6 literal)"},
    {"port", NULL, SRV(port), T_U32, "8080", 0, 65535, NULL,
     "TCP port (0: pick a free one)"},
    {"log-level", NULL, SRV(log_level), T_ENUM, "info", 0, 0, level_choices,
     "error | warn | info | debug"},
    {"threads", NULL, SRV(threads), T_U32, "0", 0, 64, NULL,
     "HTTP worker threads, each with its own epoll loop; plan streams do "
     "their reading on them (0: one per CPU, at most 64)"},
    {"max-connections", NULL, SRV(max_connections), T_U32, "4096", 1,
     1000000, NULL, "simultaneous HTTP connections"},
    {"max-connections-per-ip", NULL, SRV(max_connections_ip), T_U32, "256",
     0, 1000000, NULL,
     "simultaneous connections from one address (0: any); refusals are "
     "counted"},
    {"header-timeout", NULL, SRV(header_timeout), T_SECS, "10", 1, 3600, NULL,
     "seconds a connection that has not started a stream may stay silent "
     "(sending its request, or idle between requests)"},
    {"stream-rate-limit", NULL, SRV(stream_rate_limit), T_U32, "50", 0,
     1000000, NULL,
     "stream opens per second per client address (0: no limit)"},
    {"stream-rate-burst", NULL, SRV(stream_rate_burst), T_U32, "500", 1,
     1000000, NULL, "stream opens a client address may make at once"},
    {"max-url", NULL, SRV(max_url), T_U32, "4096", 64, SC_TARGET_MAX, NULL,
     "longest request target (path and query) in bytes"},
    {"connection-memory", NULL, SRV(connection_memory), T_BYTES, "64KiB",
     16384, 16u << 20, NULL,
     "memory per connection; bounds the request header size"},
    {"sample-pool-idle", NULL, SRV(sample_pool_idle), T_BYTES, "64MiB", 0,
     1ull << 40, NULL,
     "idle sample memory kept for reuse (resident); blocks above it give "
     "their pages back to the kernel"},
    {"sample-pool-decay-ms", NULL, SRV(sample_pool_decay_ms), T_MS, "10000",
     0, 86400000, NULL,
     "sample memory idle above sample-pool-idle stays resident for this long "
     "(the next epoch reuses it without page faults; 0: give it back at "
     "once)"},
    {"idle-timeout", NULL, SRV(idle_timeout), T_SECS, "600", 0, 86400, NULL,
     "seconds a connection may make no progress (0: none)"},
    {"heartbeat-ms", NULL, SRV(heartbeat_ms), T_MS, "1000", 0,
     SIO_FRAMES_HEARTBEAT_MAX_MS, NULL,
     "a frames stream with nothing to send sends a KEEPALIVE frame about "
     "this often (announced in its HEADER), so a client sees a hung server "
     "in seconds (0: none)"},
    {"stream-stall-timeout", NULL, SRV(stream_stall_timeout), T_SECS, "120",
     0, 86400, NULL,
     "a stream that has waited this long for its next sample while its job "
     "sent no sample and read nothing from the store ends with a retryable "
     "error: heartbeats do not hide a stuck server (0: never)"},
    {"token", NULL, SRV(token), T_SECRET, NULL, 1, SC_TOKEN_MAX, NULL,
     "bearer token consumers must send (default: none needed)"},
    {"token-file", NULL, SRV(token_file), T_PATH, NULL, 1, 4096, NULL,
     "file holding the consumer token"},
    {"admin-token", NULL, SRV(admin_token), T_SECRET, NULL, 1, SC_TOKEN_MAX,
     NULL, "bearer token of the admin API (default: admin API off)"},
    {"admin-token-file", NULL, SRV(admin_token_file), T_PATH, NULL, 1, 4096,
     NULL, "file holding the admin token"},
    {"rate-limit", NULL, SRV(rate_limit), T_U32, "100", 0, 1000000, NULL,
     "non-stream requests per second per client address (0: no limit)"},
    {"rate-burst", NULL, SRV(rate_burst), T_U32, "200", 1, 1000000, NULL,
     "requests a client address may make at once"},
    {"max-jobs", NULL, SRV(max_jobs), T_U32, "64", 1, SC_JOBS_MAX, NULL,
     "jobs served at once"},
    {"max-epochs", NULL, SRV(max_epochs), T_U32, "2", 1, 16, NULL,
     "epochs in flight per job (each holds a feed window)"},
    {"max-feeds-per-job", NULL, SRV(max_feeds_job), T_U32, "8", 1, 1024,
     NULL,
     "feeds of one job, live and retired (retired ones still serve their "
     "streams); a new epoch beyond it gets 429"},
    {"max-feeds", NULL, SRV(max_feeds), T_U32, "128", 1, 65536, NULL,
     "feeds of the whole server, live and retired; beyond it 429"},
    {"max-new-epochs-per-minute", NULL, SRV(max_new_epochs_min), T_U32, "30",
     0, 1000000, NULL,
     "feeds a job may open per minute (0: no limit); beyond it 429"},
    {"max-epochs-ahead", NULL, SRV(max_epochs_ahead), T_U32, "4", 0, 1000000,
     NULL,
     "an epoch more than this many above the newest epoch in flight of its "
     "job is refused with 409 (0: no check)"},
    {"max-sample-bytes", NULL, SRV(max_sample_bytes), T_BYTES, "0", 0,
     UINT64_C(1) << 31, NULL,
     "largest sample (bytes of its fields); a larger one is a bad sample, "
     "skipped and counted under on_error=skip (0: window-bytes / 8, at "
     "least 1 MiB)"},
    {"max-field-bytes", NULL, SRV(max_field_bytes), T_BYTES, "0", 0,
     UINT64_C(1) << 30, NULL,
     "largest field (tar member) of a sample (0: max-sample-bytes)"},
    {"max-job-sources", NULL, SRV(max_job_sources), T_U32, "1024", 1,
     65536, NULL,
     "source specs (directories, prefixes, patterns, objects: the pieces "
     "of a job's source, or of all its sources, split at ::) of one job; "
     "a PUT over it is refused with 422"},
    {"max-job-shards", NULL, SRV(max_job_shards), T_U32, "10000000", 1,
     10000000, NULL,
     "shards of one job: its brace patterns are counted at PUT (422 "
     "beyond), its listings are cut there when it resolves (the job "
     "fails, not retryable)"},
    {"max-shards", NULL, SRV(max_shards), T_U64, "20000000", 1,
     UINT64_C(1) << 32, NULL,
     "shards of all jobs together (each takes memory: 16 bytes "
     "plus its URL); a PUT over it is refused with 409"},
    {"allow-link-local-sources", NULL, IO(allow_link_local), T_BOOL,
     "false", 0, 0, NULL,
     "let http(s)/s3 sources reach link-local and instance-metadata "
     "addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254)"},
    {"log-queue-bytes", NULL, SRV(log_queue_bytes), T_BYTES, "1MiB", 16384,
     UINT64_C(1) << 30, NULL,
     "log lines waiting for the logging thread; beyond it lines are "
     "dropped and counted"},
    {"prefetch", NULL, SRV(prefetch), T_BOOL, "true", 0, 0, NULL,
     "open epoch E+1 once epoch E has been read, so its buffer fills"},
    {"window-samples", NULL, SRV(window_samples), T_U32, "65536", 1,
     WINDOW_SAMPLES_MAX, NULL,
     "samples of an epoch held for its consumers (the feed window)"},
    {"window-bytes", NULL, SRV(window_bytes), T_BYTES, "256MiB", 1,
     UINT64_C(1) << 40, NULL, "bytes of the feed window"},
    {"join-timeout-ms", NULL, SRV(join_timeout_ms), T_MS, "30000", 1,
     86400000, NULL, "how long the window waits for the other ranks"},
    {"rejoin-grace-ms", NULL, SRV(rejoin_grace_ms), T_MS, "60000", 1,
     86400000, NULL,
     "how long a disconnected consumer's place is kept for a resume"},
    {"feed-idle-ms", NULL, SRV(feed_idle_ms), T_MS, "60000", 0, 86400000,
     NULL, "an epoch with no stream for this long is closed"},
    {"drain-grace", NULL, SRV(drain_grace), T_SECS, "30", 0, 86400, NULL,
     "seconds streams may run after SIGTERM before they are cut"},
    {"lag-samples", NULL, SRV(lag_samples), T_U32, "0", 0,
     WINDOW_SAMPLES_MAX, NULL,
     "a consumer this many samples behind is lagging (0: half the window)"},
    {"state-dir", NULL, SRV(state_dir), T_PATH, NULL, 1, 3000, NULL,
     "directory kept across restarts: shard indexes (index/) and epoch "
     "journals (journal/); none: in memory only"},
    {"cache-bytes", NULL, SRV(cache_bytes), T_BYTES, "0", 0,
     UINT64_C(1) << 50, NULL,
     "shard cache budget: shards read from http(s)/s3 are kept (whole) "
     "under --cache-dir and read from there by every epoch, job and seek "
     "(0: no cache)"},
    {"cache-dir", NULL, SRV(cache_dir), T_PATH, NULL, 1, 3000, NULL,
     "shard cache directory (default: <state-dir>/cache; with no "
     "state-dir the cache is held in memory)"},
    {"cache-idle", NULL, SRV(cache_idle), T_SECS, "86400", 1, 31536000, NULL,
     "a cache entry unused for this many seconds is evicted before any "
     "other"},
    {"index-sidecars", NULL, SRV(index_sidecars), T_BOOL, "true", 0, 0, NULL,
     "read a shard's index from \"<shard URL>.scidx\" when it exists (local "
     "shards: always looked for; remote: when the source's listing shows "
     "it)"},
    {"index-sidecars-probe", NULL, SRV(index_sidecars_probe), T_BOOL,
     "false", 0, 0, NULL,
     "also ask the store for the sidecar of every remote shard no listing "
     "told about (a brace pattern): one request per shard"},
    {"max-seeks", NULL, SRV(max_seeks), T_U32, "4", 1, 256, NULL,
     "seek feeds per epoch at once (reconnects, late ranks, laggards)"},
    {"max-seeks-total", NULL, SRV(max_seeks_total), T_U32, "32", 1, 65536,
     NULL, "seek feeds in the whole server at once; beyond: 503"},
    {"data-plane", NULL, SRV(data_plane), T_ENUM, "auto", 0, 0,
     plane_choices,
     "auto: an epoch of uncompressed tar shards is served from its plan, "
     "each stream reading its samples in place (local files, cache "
     "entries, or remote shards staged once in memory: --stage-bytes); the "
     "plan is built once the shards are indexed, and grows while they are "
     "indexed before that (the first pass) or while remote shards are "
     "staged; stream: every stream reads the epoch's shared feed"},
    {"plan-keep-samples", NULL, SRV(plan_keep_samples), T_U64, "16777216",
     1, 1ull << 32, NULL,
     "items of an epoch's plan held in memory (40 bytes each): an epoch of "
     "more samples is planned with a window, its items let go behind the "
     "readers and made again from checkpoints of the order for a reader "
     "that comes back to them; epochs of any length are planned"},
    {"plan-ahead-samples", NULL, SRV(plan_ahead_samples), T_U64, "0", 0,
     1ull << 32, NULL,
     "samples a plan that grows (the first pass) decides ahead of its "
     "furthest stream before it waits for the streams (it reads the shards "
     "that far ahead of them); 0: 4 x the shuffle buffer, at least 65536. "
     "A plan that stages shards in memory also waits once the samples it "
     "decided ahead hold half of --stage-bytes"},
    {"stage-bytes", NULL, SRV(stage_bytes), T_BYTES, "256MiB", 0,
     UINT64_C(1) << 44, NULL,
     "bytes of remote shards an epoch may hold in memory when the shard "
     "cache cannot take them (no cache, or no room), so that the epoch is "
     "planned: each shard is fetched once, read by every stream from "
     "there as its bytes arrive, and let go once the streams passed it; "
     "as much again for shards fetched a second time for streams behind "
     "the others (docs/architecture.md \"Memory\"); compressed shards "
     "(tar.gz, tar.zst...) are staged there decompressed, so their epochs "
     "are planned too. Staged: the first pass over such shards and every "
     "later epoch. 0 (deprecated: it kept such epochs on the feed) stands "
     "for half of --window-bytes, at least 16 MiB"},
    {"stage-indexed", NULL, SRV(stage_indexed), T_BOOL, "true", 0, 0, NULL,
     "deprecated, always true: the epochs of remote shards that are all "
     "indexed (after the first pass) are staged as the first pass is, "
     "each shard fetched once for every consumer; a stream that starts "
     "far into the epoch has the shards it passes left to their readers, "
     "and a stream behind (a late world's too) has a shard already let go "
     "fetched again, only its items' byte ranges where they are few. "
     "false is accepted, logged as deprecated and ignored"},
    {"lag-policy", NULL, SRV(lag_policy), T_ENUM, "detach", 0, 0, lag_choices,
     "a consumer that holds a full window back: detach it into a seek "
     "after --lag-grace-ms, or make everyone wait"},
    {"lag-grace-ms", NULL, SRV(lag_grace_ms), T_MS, "2000", 1, 86400000,
     NULL, "how long a full window may keep other consumers waiting"},
    {"replica", NULL, SRV(replica), T_U32, "0", 0, 1023, NULL,
     "this server's replica number J (scale-out)"},
    {"replicas", NULL, SRV(replicas), T_U32, "1", 1, 1024, NULL,
     "number of replicas R serving the same jobs"},
    {"peers", NULL, SRV(peers), T_STRING, NULL, 1, 65536, NULL,
     "the set's replicas: R base URLs in replica order, comma-separated, "
     "or one URL with {j} (e.g. http://shardcast-{j}.shardcast-headless:"
     "8080); each is asked for GET /v1/topology, and another server "
     "answering as this --replica makes this one not ready"},
    {"peer-interval", NULL, SRV(peer_interval_ms), T_MS, "5000", 100,
     3600000, NULL, "how often the --peers are asked"},

    /* ---- object stores: the fetch engine (http, https, s3) and S3
     * listings; bounds are libshardio's (shardio.h) ---- */
    {"fetch-inflight", NULL, IO(fetch.max_inflight), T_U32, "64", 1,
     SIO_FETCH_INFLIGHT_MAX, NULL,
     "object-store requests in flight, all hosts (lowered on throttling, "
     "raised again slowly)"},
    {"fetch-threads", NULL, IO(fetch.threads), T_U32, "0", 0,
     SIO_FETCH_THREADS_MAX, NULL,
     "fetch engine threads; each runs its own libcurl multi with its share "
     "of --fetch-inflight and --fetch-per-host, and shard streams are dealt "
     "to them in turn (0: one per four CPUs, 1..8)"},
    {"fetch-per-host", NULL, IO(fetch.max_per_host), T_U32, "32", 1,
     SIO_FETCH_INFLIGHT_MAX, NULL, "connections to one object-store host"},
    {"fetch-part-size", NULL, IO(fetch.part_size), T_BYTES32, "8MiB",
     SIO_FETCH_PART_MIN, SIO_FETCH_PART_MAX, NULL,
     "bytes of one ranged GET of a shard"},
    {"fetch-parts-per-stream", NULL, IO(fetch.parts_per_stream), T_U32, "2",
     1, SIO_FETCH_PARTS_MAX, NULL,
     "ranged GETs in flight per shard (each buffers up to fetch-part-size)"},
    {"fetch-retries", NULL, IO(fetch.max_retries), T_U32, "10", 1,
     SIO_FETCH_RETRIES_MAX, NULL,
     "retries of one object-store request (5xx, 429, SlowDown, timeouts, "
     "resets, cut bodies)"},
    {"fetch-retry-base-ms", NULL, IO(fetch.retry_base_ms), T_MS, "100", 1,
     3600000, NULL,
     "backoff: retry n waits a random time up to min(fetch-retry-max-ms, "
     "this * 2^n)"},
    {"fetch-retry-max-ms", NULL, IO(fetch.retry_max_ms), T_MS, "20000", 1,
     3600000, NULL, "longest backoff before a retry"},
    {"fetch-connect-timeout-ms", NULL, IO(fetch.connect_timeout_ms), T_MS,
     "10000", 1, 600000, NULL, "connecting to an object store"},
    {"fetch-stall-timeout-ms", NULL, IO(fetch.stall_timeout_ms), T_MS,
     "30000", 1000, 86400000, NULL,
     "an object-store answer that sends no byte for this long is retried "
     "(rounded up to whole seconds)"},
    {"ca-file", NULL, IO(fetch.ca_file), T_PATH, NULL, 1, 4096, NULL,
     "CA bundle for https object stores (default: the system's)"},
    {"s3-list-workers", NULL, IO(s3_list_workers), T_U32, "8", 1,
     SIO_S3_LIST_WORKERS_MAX, NULL,
     "threads listing one s3:// prefix (sub-prefixes and key ranges)"},
    {"s3-list-split", NULL, IO(s3_list_split), T_BOOL, "true", 0, 0,
     split_values,
     "split a prefix's key range between idle listing threads"},
};
#undef SRV
#undef JOB
#undef IO
#define NSETTINGS (sizeof settings / sizeof settings[0])

/*
 * Old spellings, kept working and deprecated: as a flag (--old) and an
 * environment variable (SHARDCAST_OLD). Every name of the table is its
 * flag, its environment variable and (with '_') its config-file or job
 * key; the one exception is the job's name, --job / "name". A use is
 * logged as event=deprecated_setting when the log starts
 * (sc_settings_log); the canonical spelling wins when both are given in
 * the environment.
 */
typedef struct alias {
    const char *old;  /* deprecated flag name */
    const char *name; /* the setting it means */
} alias;
static const alias aliases[] = {
    /* the flag did not match its key shuffle_buffer_bytes */
    {"buffer-bytes", "shuffle-buffer-bytes"},
    /* a cap on planned epochs once; now what a plan holds in memory */
    {"plan-max-samples", "plan-keep-samples"},
};
#define NALIASES (sizeof aliases / sizeof aliases[0])
_Static_assert(NALIASES <= 32, "sc_config.deprecated_used has 32 bits");

static int fail(char *msg, size_t msg_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *msg, size_t msg_len, const char *fmt, ...)
{
    va_list ap;
    if (!msg_len)
        return -1;
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
    return -1;
}

/* --peers ----------------------------------------------------------- */

static int is_http_url(const char *u)
{
    return strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0;
}

void sc_peers_free_urls(char **urls, uint32_t n)
{
    if (!urls)
        return;
    for (uint32_t i = 0; i < n; i++)
        free(urls[i]);
    free(urls);
}

/* One URL of the list: http(s)://host..., no query, no fragment, no
 * space, bounded; a trailing '/' dropped. */
static char *peer_url(const char *s, size_t n, char *msg, size_t msg_len)
{
    while (n && (s[0] == ' ' || s[0] == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    while (n && s[n - 1] == '/')
        n--;
    if (n == 0 || n > SC_PEER_URL_MAX) {
        snprintf(msg, msg_len, "--peers: a URL is empty or longer than %u "
                 "bytes", SC_PEER_URL_MAX);
        return NULL;
    }
    char *u = strndup(s, n);
    if (!u) {
        snprintf(msg, msg_len, "out of memory");
        return NULL;
    }
    if (!is_http_url(u) || strlen(u) != n || strpbrk(u, "?# \t\r\n") ||
        (strncmp(u, "http://", 7) == 0 ? n == 7 : n == 8)) {
        snprintf(msg, msg_len,
                 "--peers: \"%.100s\" is not an http(s)://host[:port] URL", u);
        free(u);
        return NULL;
    }
    return u;
}

char **sc_peers_parse(const char *spec, uint32_t replicas, char *msg,
                      size_t msg_len)
{
    char **urls = NULL;
    uint32_t n = 0;
    if (!spec || replicas == 0) {
        snprintf(msg, msg_len, "--peers: nothing to parse");
        return NULL;
    }
    urls = calloc(replicas, sizeof *urls);
    if (!urls) {
        snprintf(msg, msg_len, "out of memory");
        return NULL;
    }
    const char *ph = strstr(spec, "{j}");
    if (ph) {
        if (strchr(spec, ',') || strstr(ph + 3, "{j}")) {
            snprintf(msg, msg_len, "--peers: give a list of URLs or one "
                     "template with {j} once, not both");
            goto fail;
        }
        for (n = 0; n < replicas; n++) {
            char buf[SC_PEER_URL_MAX + 16];
            int k = snprintf(buf, sizeof buf, "%.*s%" PRIu32 "%s",
                             (int)(ph - spec), spec, n, ph + 3);
            if (k < 0 || (size_t)k >= sizeof buf) {
                snprintf(msg, msg_len, "--peers: the template is longer than "
                         "%u bytes", SC_PEER_URL_MAX);
                goto fail;
            }
            if (!(urls[n] = peer_url(buf, (size_t)k, msg, msg_len)))
                goto fail;
        }
        return urls;
    }
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == replicas) {
            snprintf(msg, msg_len, "--peers lists more than --replicas %" PRIu32
                     " URLs (one per replica, in replica order)", replicas);
            goto fail;
        }
        if (!(urls[n] = peer_url(p, len, msg, msg_len)))
            goto fail;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    if (n != replicas) {
        snprintf(msg, msg_len, "--peers lists %" PRIu32 " URLs for --replicas "
                 "%" PRIu32 " (one per replica, in replica order)", n,
                 replicas);
        goto fail;
    }
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t b = a + 1; b < n; b++)
            if (strcmp(urls[a], urls[b]) == 0) {
                snprintf(msg, msg_len, "--peers names %.200s twice", urls[a]);
                goto fail;
            }
    return urls;
fail:
    sc_peers_free_urls(urls, replicas);
    return NULL;
}

/* Where a setting is named in messages: --name for the command line and
 * the environment, "name" for a job object. */
static const char *label(const setting *st, int job_object, char *buf,
                         size_t len)
{
    if (job_object)
        snprintf(buf, len, "\"%s\"", st->key);
    else
        snprintf(buf, len, "--%s", st->name);
    return buf;
}

static int set_string(char **slot, const char *v, char *msg, size_t msg_len)
{
    char *copy = strdup(v);
    if (!copy)
        return fail(msg, msg_len, "out of memory");
    free(*slot);
    *slot = copy;
    return 0;
}

/* Parse v into the field of `base` that st names; `from` says where v came
 * from ("from the command line", ...); job_object: name it as a JSON key. */
static int set_value(void *base, const setting *st, const char *v,
                     const char *from, int job_object, char *msg,
                     size_t msg_len)
{
    char *field = (char *)base + st->offset;
    char lb[80];
    uint64_t x;
    size_t n = strlen(v);

    label(st, job_object, lb, sizeof lb);
    switch (st->type) {
    case T_ADDR: {
        unsigned char a[16];
        if (inet_pton(AF_INET, v, a) != 1 && inet_pton(AF_INET6, v, a) != 1)
            return fail(msg, msg_len,
                        "invalid value for %s (%s): expected an IPv4 or "
                        "IPv6 address literal",
                        lb, from);
        return set_string((char **)(void *)field, v, msg, msg_len);
    }
    case T_STRING:
    case T_PATH:
    case T_JOB:
    case T_SECRET:
        if (n < st->min || n > st->max)
            return fail(msg, msg_len,
                        "invalid value for %s (%s): length must be %" PRIu64
                        "..%" PRIu64,
                        lb, from, st->min, st->max);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)v[i];
            if (st->type == T_JOB && !sc_job_name_char(c))
                return fail(msg, msg_len,
                            "invalid value for %s (%s): use only letters, "
                            "digits, '.', '_' and '-'",
                            lb, from);
            /* The value itself is never echoed: it is a secret. */
            if (st->type == T_SECRET && (c < 0x21 || c > 0x7e))
                return fail(msg, msg_len,
                            "invalid value for %s (%s): a token is visible "
                            "ASCII without spaces",
                            lb, from);
        }
        return set_string((char **)(void *)field, v, msg, msg_len);
    case T_FIELDS: {
        char names[SIO_TARW_FILTER_MAX][SIO_TARW_FIELD_NAME_MAX + 1];
        char norm[SIO_TARW_FILTER_MAX * (SIO_TARW_FIELD_NAME_MAX + 1)];
        size_t nn = 0, o = 0;
        char **slot = (char **)(void *)field;
        if (n == 0) { /* empty: every field */
            free(*slot);
            *slot = NULL;
            return 0;
        }
        if (n >= sizeof norm || sc_fields_split(v, names, &nn) != 0)
            return fail(msg, msg_len,
                        "invalid value for %s (%s): expected distinct field "
                        "names of 1..%u characters [A-Za-z0-9._+-], at most "
                        "%u",
                        lb, from, SIO_TARW_FIELD_NAME_MAX,
                        SIO_TARW_FILTER_MAX);
        for (size_t i = 0; i < nn; i++)
            o += (size_t)snprintf(norm + o, sizeof norm - o, "%s%s",
                                  i ? "," : "", names[i]);
        return set_string(slot, norm, msg, msg_len);
    }
    case T_U32:
    case T_U64:
    case T_BYTES:
    case T_BYTES32:
    case T_MS:
    case T_SECS: {
        /* libshardio's one parser of sizes and durations, which the
         * shardcast command uses too. */
        sio_unit_kind kind = st->type == T_BYTES || st->type == T_BYTES32
                                 ? SIO_UNIT_BYTES
                             : st->type == T_MS   ? SIO_UNIT_MS
                             : st->type == T_SECS ? SIO_UNIT_SECS
                                                  : SIO_UNIT_COUNT;
        if (sio_parse_units(v, kind, &x, NULL) != 0 || x < st->min ||
            x > st->max)
            return fail(msg, msg_len,
                        "invalid value '%.64s' for %s (%s): expected %s in "
                        "%" PRIu64 "..%" PRIu64,
                        v, lb, from, sio_units_describe(kind), st->min,
                        st->max);
        }
        if (st->type == T_U32 || st->type == T_MS || st->type == T_SECS ||
            st->type == T_BYTES32)
            *(uint32_t *)(void *)field = (uint32_t)x;
        else
            *(uint64_t *)(void *)field = x;
        return 0;
    case T_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") ||
            !strcmp(v, "on")) {
            *(int *)(void *)field = st->choices ? st->choices[0].value : 1;
            return 0;
        }
        if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no") ||
            !strcmp(v, "off")) {
            *(int *)(void *)field = st->choices ? st->choices[1].value : 0;
            return 0;
        }
        return fail(msg, msg_len,
                    "invalid value '%.64s' for %s (%s): expected true or "
                    "false",
                    v, lb, from);
    case T_ENUM:
        for (const choice *c = st->choices; c->name; c++) {
            if (strcmp(v, c->name) == 0) {
                *(int *)(void *)field = c->value;
                return 0;
            }
        }
        return fail(msg, msg_len, "invalid value '%.64s' for %s (%s): %s", v,
                    lb, from, st->help);
    }
    return fail(msg, msg_len, "internal: bad setting type");
}

/* A setting by name; '_' matches '-' so config files may use either. */
static const setting *find(const char *name, size_t len)
{
    for (size_t i = 0; i < NSETTINGS; i++) {
        const char *s = settings[i].name;
        if (strlen(s) != len)
            continue;
        size_t k = 0;
        for (; k < len; k++)
            if (s[k] != name[k] && !(s[k] == '-' && name[k] == '_'))
                break;
        if (k == len)
            return &settings[i];
    }
    return NULL;
}

/* find(), or the setting an alias names; *alias_index is the alias
 * used, or -1. */
static const setting *find_any(const char *name, size_t len,
                               int *alias_index)
{
    const setting *st = find(name, len);
    *alias_index = -1;
    if (st)
        return st;
    for (size_t i = 0; i < NALIASES; i++) {
        const char *a = aliases[i].old;
        if (strlen(a) != len)
            continue;
        size_t k = 0;
        for (; k < len; k++)
            if (a[k] != name[k] && !(a[k] == '-' && name[k] == '_'))
                break;
        if (k == len) {
            *alias_index = (int)i;
            return find(aliases[i].name, strlen(aliases[i].name));
        }
    }
    return NULL;
}

static const setting *find_key(const char *key)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].scope == S_JOB && strcmp(settings[i].key, key) == 0)
            return &settings[i];
    return NULL;
}

static void env_of_name(const char *name, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "SHARDCAST_");
    for (const char *p = name; *p && o + 1 < len; p++)
        buf[o++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[o] = '\0';
}

static void env_name(const setting *st, char *buf, size_t len)
{
    env_of_name(st->name, buf, len);
}

void sc_settings_usage(FILE *f, const char *prog)
{
    char env[64];
    fprintf(f,
            "usage: %s [--job NAME --source SRC] [--config FILE] "
            "[options]\n",
            prog);
    static const int order[] = {S_JOB, S_SERVER, S_IO};
    for (size_t o = 0; o < sizeof order / sizeof order[0]; o++) {
        int scope = order[o];
        fprintf(f, scope == S_JOB
                       ? "\nJob settings (--job form; in a job object the key "
                         "is shown in brackets; the defaults are the job "
                         "defaults):\n"
                   : scope == S_SERVER
                       ? "\nServer settings (command line > environment > "
                         "config file > default):\n"
                       : "\nObject-store settings (http, https, s3; "
                         "precedence as for server settings):\n");
        for (size_t i = 0; i < NSETTINGS; i++) {
            const setting *st = &settings[i];
            if (st->scope != scope)
                continue;
            env_name(st, env, sizeof env);
            char head[96];
            if (scope == S_JOB)
                snprintf(head, sizeof head, "--%s [%s]", st->name, st->key);
            else
                snprintf(head, sizeof head, "--%s", st->name);
            const char *d = st->def;
            if (!d)
                d = scope == S_JOB && (st->type == T_JOB ||
                                       st->type == T_STRING)
                        ? "(required)"
                        : "(unset)";
            if (strlen(head) > 34) /* too wide for the column */
                fprintf(f, "  %s\n  %-34s %s\n  %-34s default: %s; env %s\n",
                        head, "", st->help, "", d, env);
            else
                fprintf(f, "  %-34s %s\n  %-34s default: %s; env %s\n",
                        head, st->help, "", d, env);
        }
    }
    fprintf(f, "\nDeprecated spellings (still accepted; the log names each "
               "use):\n");
    for (size_t i = 0; i < NALIASES; i++) {
        char old_env[64];
        env_of_name(aliases[i].old, old_env, sizeof old_env);
        env_of_name(aliases[i].name, env, sizeof env);
        fprintf(f, "  --%s, %s: use --%s, %s\n", aliases[i].old, old_env,
                aliases[i].name, env);
    }
}

static void apply_defaults(void *base, int scope)
{
    char msg[256];
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].scope == scope && settings[i].def)
            (void)set_value(base, &settings[i], settings[i].def, "default", 0,
                            msg, sizeof msg);
}

void sc_jobspec_free(sc_jobspec *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->source);
    free(s->fields);
    free(s->sources);
    memset(s, 0, sizeof *s);
}

int sc_jobspec_copy(sc_jobspec *dst, const sc_jobspec *src)
{
    *dst = *src;
    dst->name = src->name ? strdup(src->name) : NULL;
    dst->source = src->source ? strdup(src->source) : NULL;
    dst->fields = src->fields ? strdup(src->fields) : NULL;
    dst->sources = src->sources ? strdup(src->sources) : NULL;
    if ((src->name && !dst->name) || (src->source && !dst->source) ||
        (src->fields && !dst->fields) || (src->sources && !dst->sources)) {
        sc_jobspec_free(dst);
        return -1;
    }
    return 0;
}

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int sc_jobspec_equal(const sc_jobspec *a, const sc_jobspec *b)
{
    return str_eq(a->name, b->name) && str_eq(a->source, b->source) &&
           a->seed == b->seed && a->shuffle_buffer == b->shuffle_buffer &&
           a->buffer_bytes == b->buffer_bytes &&
           a->interleave == b->interleave && a->partition == b->partition &&
           a->on_error == b->on_error && a->read_threads == b->read_threads &&
           a->cache == b->cache && str_eq(a->fields, b->fields) &&
           a->epoch_size == b->epoch_size && str_eq(a->sources, b->sources);
}

/* The text form of a JSON value for set_value; -1 when the type does not
 * fit the setting. buf holds numbers and booleans. */
static int json_text(const json_t *v, const setting *st, char *buf,
                     size_t len, const char **out)
{
    if (json_is_string(v)) {
        *out = json_string_value(v);
        /* A string with an embedded NUL is not what it looks like. */
        return strlen(*out) == json_string_length(v) ? 0 : -1;
    }
    if (json_is_integer(v)) {
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        *out = buf;
        return 0;
    }
    if (json_is_boolean(v) && st->type == T_BOOL) {
        *out = json_is_true(v) ? "true" : "false";
        return 0;
    }
    if (st->type == T_FIELDS && (json_is_array(v) || json_is_null(v))) {
        size_t o = 0, i;
        json_t *e;
        buf[0] = '\0';
        if (json_is_array(v) && json_array_size(v) == 0)
            return -1;
        json_array_foreach(v, i, e)
        {
            if (!json_is_string(e) ||
                strlen(json_string_value(e)) != json_string_length(e) ||
                json_string_length(e) == 0)
                return -1;
            int w = snprintf(buf + o, len - o, "%s%s", i ? "," : "",
                             json_string_value(e));
            if (w < 0 || (size_t)w >= len - o)
                return -1;
            o += (size_t)w;
        }
        *out = buf;
        return 0;
    }
    return -1;
}

/* ---- mixed jobs: the "sources" array ---- */

static int mix_name_ok(const char *n)
{
    size_t l = strlen(n);
    if (l == 0 || l > SC_MIX_NAME_MAX)
        return 0;
    for (; *n; n++)
        if (!isalnum((unsigned char)*n) && *n != '.' && *n != '_' &&
            *n != '-')
            return 0;
    return 1;
}

void sc_mix_free(sc_mixsrc *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].source);
    free(v);
}

/* Check one source object and fill *m (m->source malloc'd). */
static int mix_entry(const json_t *o, size_t i, sc_mixsrc *m, char *msg,
                     size_t msg_len)
{
    const char *k;
    json_t *v;
    int kinds = 0;
    memset(m, 0, sizeof *m);
    m->kind = SIO_MIX_REPEAT;
    m->value = 1;
    if (!json_is_object(o))
        return fail(msg, msg_len, "sources[%zu] must be an object", i);
    json_object_foreach((json_t *)o, k, v)
    {
        if (!strcmp(k, "name")) {
            if (!json_is_string(v) || !mix_name_ok(json_string_value(v)))
                return fail(msg, msg_len,
                            "sources[%zu].name: 1..%u of [A-Za-z0-9._-]", i,
                            SC_MIX_NAME_MAX);
            snprintf(m->name, sizeof m->name, "%s", json_string_value(v));
        } else if (!strcmp(k, "source")) {
            if (!json_is_string(v) || json_string_length(v) == 0 ||
                json_string_length(v) > SC_SOURCE_MAX ||
                strlen(json_string_value(v)) != json_string_length(v))
                return fail(msg, msg_len,
                            "sources[%zu].source: a source string of 1..%u "
                            "bytes", i, SC_SOURCE_MAX);
            free(m->source);
            m->source = strdup(json_string_value(v));
            if (!m->source)
                return fail(msg, msg_len, "out of memory");
        } else if (!strcmp(k, "weight") || !strcmp(k, "repeat")) {
            double d = json_number_value(v);
            int w = k[0] == 'w';
            kinds++;
            if (!json_is_number(v) ||
                (w ? !(d >= SIO_MIX_WEIGHT_MIN && d <= SIO_MIX_WEIGHT_MAX)
                   : !(d >= 0 && d <= SIO_MIX_WEIGHT_MAX)))
                return fail(msg, msg_len,
                            "sources[%zu].%s: a number in %s", i, k,
                            w ? "[2^-20, 2^20]" : "[0, 2^20]");
            m->kind = w ? SIO_MIX_WEIGHT : SIO_MIX_REPEAT;
            m->value = d;
        } else if (!strcmp(k, "choose")) {
            kinds++;
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > ((json_int_t)1 << 53))
                return fail(msg, msg_len,
                            "sources[%zu].choose: an integer in 0..2^53", i);
            m->kind = SIO_MIX_CHOOSE;
            m->choose = (uint64_t)json_integer_value(v);
        } else if (!strcmp(k, "sampling")) {
            const char *sv = json_is_string(v) ? json_string_value(v) : "";
            if (!strcmp(sv, "with_replacement"))
                m->resample = 1;
            else if (strcmp(sv, "without_replacement") != 0)
                return fail(msg, msg_len,
                            "sources[%zu].sampling: without_replacement or "
                            "with_replacement", i);
        } else {
            return fail(msg, msg_len, "unknown key \"%.64s\" in sources[%zu]",
                        k, i);
        }
    }
    if (!m->name[0])
        return fail(msg, msg_len, "sources[%zu] has no name", i);
    if (!m->source)
        return fail(msg, msg_len, "sources[%zu] has no source", i);
    if (kinds > 1)
        return fail(msg, msg_len,
                    "sources[%zu]: at most one of weight, repeat, choose", i);
    return 0;
}

static int mix_array(const json_t *arr, sc_mixsrc **out, size_t *n,
                     char *msg, size_t msg_len)
{
    size_t cnt = json_is_array(arr) ? json_array_size(arr) : 0;
    sc_mixsrc *v;
    *out = NULL;
    *n = 0;
    if (!json_is_array(arr) || cnt == 0 || cnt > SIO_MIX_SOURCES_MAX)
        return fail(msg, msg_len,
                    "\"sources\" must be an array of 1..%u source objects",
                    SIO_MIX_SOURCES_MAX);
    v = calloc(cnt, sizeof *v);
    if (!v)
        return fail(msg, msg_len, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        if (mix_entry(json_array_get(arr, i), i, &v[i], msg, msg_len) != 0) {
            sc_mix_free(v, i + 1);
            return -1;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(v[k].name, v[i].name)) {
                fail(msg, msg_len, "sources[%zu]: name \"%s\" used twice", i,
                     v[i].name);
                sc_mix_free(v, i + 1);
                return -1;
            }
    }
    *out = v;
    *n = cnt;
    return 0;
}

int sc_mix_parse(const char *json, sc_mixsrc **out, size_t *n, char *msg,
                 size_t msg_len)
{
    json_error_t je;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (!root)
        return fail(msg, msg_len, "sources: invalid JSON");
    rc = mix_array(root, out, n, msg, msg_len);
    json_decref(root);
    return rc;
}

int sc_jobspec_check(const sc_jobspec *spec, const sc_config *cfg,
                     uint64_t *shards, char *reason, size_t reason_len)
{
    sio_source_counts c = {0, 0, 0};
    sio_error err = {SIO_OK, ""};
    sc_mixsrc *ms = NULL;
    size_t n = 0, i = 0;
    char shown[sizeof err.msg];
    int rc = 0;

    *shards = 0;
    if (spec->sources &&
        sc_mix_parse(spec->sources, &ms, &n, reason, reason_len) != 0)
        return -1;
    for (i = 0; i < (spec->sources ? n : 1); i++) {
        const char *src = spec->sources ? ms[i].source : spec->source;
        if (sio_source_check(src, cfg->io.allow_link_local, &c, &err) !=
            SIO_OK) {
            sc_redact_source(err.msg, shown, sizeof shown);
            if (spec->sources)
                rc = fail(reason, reason_len, "sources[%zu] (%s): %s", i,
                          ms[i].name, shown);
            else
                rc = fail(reason, reason_len, "source: %s", shown);
            goto out;
        }
        /* Counted as they add up: a job of 256 sources of 10^9 names
         * stops at the first source over the bound. */
        if (c.specs > cfg->max_job_sources) {
            rc = fail(reason, reason_len,
                      "the job has more than %" PRIu32 " source specs "
                      "(--max-job-sources)", cfg->max_job_sources);
            goto out;
        }
        if (c.names > cfg->max_job_shards) {
            char count[32];
            if (c.names == UINT64_MAX)
                snprintf(count, sizeof count, "more than 2^64");
            else
                snprintf(count, sizeof count, "%" PRIu64, c.names);
            rc = fail(reason, reason_len,
                      "the job's sources name %s shards%s, more than "
                      "--max-job-shards %" PRIu32 " (counted, not "
                      "expanded)", count,
                      spec->sources && i + 1 < n ? " already" : "",
                      cfg->max_job_shards);
            goto out;
        }
    }
    *shards = c.names;
out:
    sc_mix_free(ms, n);
    return rc;
}

/* Fill *out from a job object (defaults for absent keys). `where` names
 * the object in messages ("job 2 of the config file", "the job"). */
static int jobspec_from_json(const json_t *obj, const char *url_name,
                             const char *where, sc_jobspec *out, char *msg,
                             size_t msg_len)
{
    const char *k;
    json_t *v;
    char buf[SIO_TARW_FILTER_MAX * (SIO_TARW_FIELD_NAME_MAX + 1) + 64];
    char from[160];

    memset(out, 0, sizeof *out);
    if (!json_is_object(obj))
        return fail(msg, msg_len, "%s must be a JSON object", where);
    apply_defaults(out, S_JOB);
    snprintf(from, sizeof from, "in %s", where);
    json_object_foreach((json_t *)obj, k, v)
    {
        const setting *st = find_key(k);
        const char *text;
        if (!strcmp(k, "sources")) {
            sc_mixsrc *mv;
            size_t mn;
            if (mix_array(v, &mv, &mn, msg, msg_len) != 0)
                goto bad;
            sc_mix_free(mv, mn);
            /* Kept as canonical JSON: compared and copied as a string. */
            out->sources = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
            if (!out->sources) {
                fail(msg, msg_len, "out of memory");
                goto bad;
            }
            continue;
        }
        if (!st) {
            fail(msg, msg_len, "unknown key \"%.64s\" %s", k, from);
            goto bad;
        }
        if (json_text(v, st, buf, sizeof buf, &text) != 0) {
            fail(msg, msg_len, "wrong type for \"%s\" %s", st->key, from);
            goto bad;
        }
        if (set_value(out, st, text, from, 1, msg, msg_len) != 0)
            goto bad;
    }
    if (url_name) {
        if (out->name && strcmp(out->name, url_name) != 0) {
            fail(msg, msg_len, "\"name\" %s differs from the job in the URL",
                 from);
            goto bad;
        }
        if (!out->name &&
            set_value(out, &settings[0], url_name, "in the URL", 1, msg,
                      msg_len) != 0)
            goto bad;
    }
    if (!out->name) {
        fail(msg, msg_len, "missing \"name\" %s", from);
        goto bad;
    }
    if (!out->source == !out->sources) {
        fail(msg, msg_len, "%s \"source\" or \"sources\" %s",
             out->source ? "both" : "missing", from);
        goto bad;
    }
    return 0;
bad:
    sc_jobspec_free(out);
    return -1;
}

int sc_jobspec_parse(const char *json, size_t len, const char *name,
                     sc_jobspec *out, char *reason, size_t reason_len)
{
    json_error_t je;
    int rc;
    memset(out, 0, sizeof *out);
    if (len > SC_JOBSPEC_BODY_MAX)
        return fail(reason, reason_len, "job spec larger than %u bytes",
                    SC_JOBSPEC_BODY_MAX);
    /* JSON_REJECT_DUPLICATES: "seed" twice is a mistake, not a choice. */
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fail(reason, reason_len, "invalid JSON at line %d: %.200s",
                    je.line, je.text);
    rc = jobspec_from_json(root, name, "the job", out, reason, reason_len);
    json_decref(root);
    return rc;
}

/* Read a whole small file (at most max bytes) into a malloc'd string. */
static char *read_small_file(const char *path, size_t max, size_t *len,
                             char *msg, size_t msg_len, const char *what)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    if (!f) {
        fail(msg, msg_len, "cannot open %s %.200s: %s", what, path,
             strerror(errno));
        return NULL;
    }
    buf = malloc(max + 1);
    if (!buf) {
        fail(msg, msg_len, "out of memory");
        goto out;
    }
    n = fread(buf, 1, max + 1, f);
    if (ferror(f) || n > max) {
        fail(msg, msg_len, "cannot read %s %.200s: %s", what, path,
             n > max ? "too large" : "read error");
        free(buf);
        buf = NULL;
        goto out;
    }
    buf[n] = '\0';
    *len = n;
out:
    fclose(f);
    return buf;
}

/* Apply the server settings and jobs of a config file. */
static int load_config_file(sc_config *cfg, const char *path, char *msg,
                            size_t msg_len)
{
    size_t len = 0;
    json_error_t je;
    json_t *root = NULL;
    const char *k;
    json_t *v;
    char from[300], buf[64];
    int rc = -1;
    char *text = read_small_file(path, SC_CONFIG_FILE_MAX, &len, msg,
                                 msg_len, "config file");
    if (!text)
        return -1;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        fail(msg, msg_len, "config file %.200s: invalid JSON at line %d: %.200s",
             path, je.line, je.text);
        goto out;
    }
    if (!json_is_object(root)) {
        fail(msg, msg_len, "config file %.200s: expected a JSON object", path);
        goto out;
    }
    snprintf(from, sizeof from, "from config file %.200s", path);
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "jobs") == 0) {
            size_t i;
            json_t *j;
            if (!json_is_array(v)) {
                fail(msg, msg_len, "config file %.200s: \"jobs\" must be an "
                     "array", path);
                goto out;
            }
            if (json_array_size(v) > SC_JOBS_MAX) {
                fail(msg, msg_len, "config file %.200s: more than %u jobs",
                     path, SC_JOBS_MAX);
                goto out;
            }
            cfg->jobs = calloc(json_array_size(v) + 1, sizeof *cfg->jobs);
            if (!cfg->jobs) {
                fail(msg, msg_len, "out of memory");
                goto out;
            }
            json_array_foreach(v, i, j)
            {
                char where[320];
                snprintf(where, sizeof where, "job %zu of config file %.200s",
                         i, path);
                if (jobspec_from_json(j, NULL, where, &cfg->jobs[i], msg,
                                      msg_len) != 0)
                    goto out;
                cfg->njobs = i + 1;
            }
            continue;
        }
        int ai;
        const setting *st = find_any(k, strlen(k), &ai);
        const char *textv;
        if (!st || st->scope == S_JOB ||
            (st->scope == S_SERVER &&
             st->offset == offsetof(sc_config, config))) {
            if (st && st->scope == S_JOB)
                fail(msg, msg_len, "config file %.200s: \"%s\" is a job key: "
                     "put it in a job of \"jobs\"", path, k);
            else
                fail(msg, msg_len, "config file %.200s: unknown setting "
                     "\"%.64s\"", path, k);
            goto out;
        }
        if (json_text(v, st, buf, sizeof buf, &textv) != 0) {
            fail(msg, msg_len, "config file %.200s: wrong type for \"%s\"",
                 path, k);
            goto out;
        }
        if (set_value(cfg, st, textv, from, 0, msg, msg_len) != 0)
            goto out;
        if (ai >= 0)
            cfg->deprecated_used |= 1u << ai;
    }
    rc = 0;
out:
    json_decref(root);
    free(text);
    return rc;
}

/* A token from a file: the first line, trailing whitespace removed. */
static int load_token_file(char **token, const char *path, const char *name,
                           char *msg, size_t msg_len)
{
    size_t len = 0;
    char what[64];
    snprintf(what, sizeof what, "--%s", name);
    char *text = read_small_file(path, SC_TOKEN_MAX + 2, &len, msg, msg_len,
                                 what);
    if (!text)
        return -1;
    while (len > 0 && isspace((unsigned char)text[len - 1]))
        text[--len] = '\0';
    int rc = 0;
    if (len == 0 || len > SC_TOKEN_MAX || strchr(text, '\n'))
        rc = fail(msg, msg_len, "%s: the file must hold one token of 1..%u "
                  "visible ASCII characters", what, SC_TOKEN_MAX);
    for (size_t i = 0; rc == 0 && i < len; i++)
        if ((unsigned char)text[i] < 0x21 || (unsigned char)text[i] > 0x7e)
            rc = fail(msg, msg_len, "%s: a token is visible ASCII without "
                      "spaces", what);
    if (rc == 0) {
        free(*token);
        *token = text;
    } else {
        /* The text may be a secret: wipe it before freeing. */
        memset(text, 0, len);
        free(text);
    }
    return rc;
}

static int check_config(sc_config *cfg, char *msg, size_t msg_len)
{
    if (cfg->token && cfg->token_file)
        return fail(msg, msg_len, "give --token or --token-file, not both");
    if (cfg->admin_token && cfg->admin_token_file)
        return fail(msg, msg_len,
                    "give --admin-token or --admin-token-file, not both");
    if (cfg->token_file &&
        load_token_file(&cfg->token, cfg->token_file, "token-file", msg,
                        msg_len) != 0)
        return -1;
    if (cfg->admin_token_file &&
        load_token_file(&cfg->admin_token, cfg->admin_token_file,
                        "admin-token-file", msg, msg_len) != 0)
        return -1;
    if (cfg->token && cfg->admin_token &&
        strcmp(cfg->token, cfg->admin_token) == 0)
        return fail(msg, msg_len,
                    "the consumer token and the admin token must differ");
    if (cfg->replicas > 1 ? cfg->replica >= cfg->replicas : cfg->replica != 0)
        return fail(msg, msg_len,
                    "--replica %u of --replicas %u: need replica < replicas",
                    cfg->replica, cfg->replicas);
    if (cfg->replicas > 1) {
        if (cfg->cli_job.sources || cfg->cli_job.epoch_size)
            return fail(msg, msg_len, "job %s: " SC_MIX_REPLICAS_REASON,
                        cfg->cli_job.name ? cfg->cli_job.name : "(cli)",
                        cfg->replicas);
        for (size_t i = 0; i < cfg->njobs; i++)
            if (cfg->jobs[i].sources || cfg->jobs[i].epoch_size)
                return fail(msg, msg_len, "job %s: " SC_MIX_REPLICAS_REASON,
                            cfg->jobs[i].name, cfg->replicas);
    }
    if (cfg->peers) {
        char why[300];
        uint32_t R = cfg->replicas > 1 ? cfg->replicas : 1;
        char **urls = sc_peers_parse(cfg->peers, R, why, sizeof why);
        if (!urls)
            return fail(msg, msg_len, "%s", why);
        sc_peers_free_urls(urls, R);
    }
    if (cfg->rate_limit && cfg->rate_burst < 1)
        return fail(msg, msg_len, "--rate-burst must be at least 1");
    if (cfg->cli_job.name || cfg->cli_job.source) {
        if (!cfg->cli_job.name)
            return fail(msg, msg_len,
                        "missing required setting --job (or SHARDCAST_JOB)");
        if (!cfg->cli_job.source)
            return fail(msg, msg_len, "missing required setting --source "
                        "(or SHARDCAST_SOURCE)");
    }
    size_t total = cfg->njobs + (cfg->cli_job.name ? 1 : 0);
    if (total == 0 && !cfg->admin_token)
        return fail(msg, msg_len,
                    "missing required setting --job (or SHARDCAST_JOB): give "
                    "--job and --source, a --config file with jobs, or an "
                    "admin token to create jobs through the API");
    if (total > cfg->max_jobs)
        return fail(msg, msg_len, "%zu jobs configured, --max-jobs is %u",
                    total, cfg->max_jobs);
    /* What a PUT would refuse is refused at start-up: each job's sources
     * and bounds, and the shards of all of them together. */
    uint64_t shards_all = 0;
    for (size_t i = 0; i <= cfg->njobs; i++) {
        const sc_jobspec *sp = i < cfg->njobs ? &cfg->jobs[i] : &cfg->cli_job;
        uint64_t shards;
        char why[512];
        if (!sp->name)
            continue;
        if (sc_jobspec_check(sp, cfg, &shards, why, sizeof why) != 0)
            return fail(msg, msg_len, "job %s: %s", sp->name, why);
        shards_all += shards; /* each at most --max-job-shards: no wrap */
        if (shards_all > cfg->max_shards)
            return fail(msg, msg_len,
                        "the configured jobs name %" PRIu64 " shards up to "
                        "job %s, more than --max-shards %" PRIu64,
                        shards_all, sp->name, cfg->max_shards);
    }
    for (size_t i = 0; i < cfg->njobs; i++) {
        if (cfg->cli_job.name && !strcmp(cfg->cli_job.name, cfg->jobs[i].name))
            return fail(msg, msg_len, "job \"%s\" is defined twice",
                        cfg->jobs[i].name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(cfg->jobs[i].name, cfg->jobs[j].name))
                return fail(msg, msg_len, "job \"%s\" is defined twice",
                            cfg->jobs[i].name);
    }
    return 0;
}

/* The value of --name in argv, if given (for --config before the rest). */
static const char *argv_value(int argc, char *const *argv, const char *name)
{
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0)
            continue;
        if (a[2 + n] == '=')
            return a + 3 + n;
        if (a[2 + n] == '\0' && i + 1 < argc)
            return argv[i + 1];
    }
    return NULL;
}

sc_settings_result sc_settings_load(sc_config *cfg, int argc,
                                    char *const *argv, FILE *out, char *msg,
                                    size_t msg_len)
{
    char env[64], from[96];

    memset(cfg, 0, sizeof *cfg);
    msg[0] = '\0';
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            sc_settings_usage(out, argv[0]);
            return SC_SETTINGS_HELP;
        }
        if (strcmp(argv[i], "--version") == 0) {
            fprintf(out, "shardcastd %s\n", SIO_VERSION_STRING);
            return SC_SETTINGS_HELP;
        }
    }
    apply_defaults(cfg, S_SERVER);
    apply_defaults(cfg, S_IO);
    apply_defaults(&cfg->cli_job, S_JOB);

    /* The config file sits below the environment and the command line, so
     * it is read first; its own path comes from either of them. */
    const char *path = argv_value(argc, argv, "config");
    if (!path)
        path = getenv("SHARDCAST_CONFIG");
    if (path && *path && load_config_file(cfg, path, msg, msg_len) != 0)
        return SC_SETTINGS_ERROR;

    /* Deprecated names first, so that the canonical one wins. */
    for (size_t i = 0; i < NALIASES; i++) {
        env_of_name(aliases[i].old, env, sizeof env);
        const char *v = getenv(env);
        if (!v)
            continue;
        const setting *st = find(aliases[i].name, strlen(aliases[i].name));
        snprintf(from, sizeof from, "from %s", env);
        void *base = st->scope == S_JOB ? (void *)&cfg->cli_job : (void *)cfg;
        if (set_value(base, st, v, from, 0, msg, msg_len) != 0)
            return SC_SETTINGS_ERROR;
        cfg->deprecated_used |= 1u << i;
    }
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *st = &settings[i];
        env_name(st, env, sizeof env);
        const char *v = getenv(env);
        if (!v)
            continue;
        snprintf(from, sizeof from, "from %s", env);
        void *base = st->scope == S_JOB ? (void *)&cfg->cli_job : (void *)cfg;
        if (set_value(base, st, v, from, 0, msg, msg_len) != 0)
            return SC_SETTINGS_ERROR;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            fail(msg, msg_len, "unexpected argument '%.64s' (see --help)", a);
            return SC_SETTINGS_ERROR;
        }
        const char *eq = strchr(a + 2, '=');
        size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        int ai;
        const setting *st = find_any(a + 2, nlen, &ai);
        if (!st) {
            fail(msg, msg_len, "unknown option '--%.*s' (see --help)",
                 (int)(nlen > 64 ? 64 : nlen), a + 2);
            return SC_SETTINGS_ERROR;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                fail(msg, msg_len, "missing value for --%s", st->name);
                return SC_SETTINGS_ERROR;
            }
            v = argv[++i];
        }
        void *base = st->scope == S_JOB ? (void *)&cfg->cli_job : (void *)cfg;
        if (set_value(base, st, v, "from the command line", 0, msg,
                      msg_len) != 0)
            return SC_SETTINGS_ERROR;
        if (ai >= 0)
            cfg->deprecated_used |= 1u << ai;
    }
    if (check_config(cfg, msg, msg_len) != 0)
        return SC_SETTINGS_ERROR;
    return SC_SETTINGS_OK;
}

static void wipe_free(char *s)
{
    if (s) {
        memset(s, 0, strlen(s));
        free(s);
    }
}

void sc_settings_free(sc_config *cfg)
{
    free(cfg->config);
    free(cfg->listen);
    wipe_free(cfg->token);
    free(cfg->token_file);
    wipe_free(cfg->admin_token);
    free(cfg->admin_token_file);
    free(cfg->state_dir);
    free(cfg->cache_dir);
    free(cfg->peers);
    free((char *)(uintptr_t)cfg->io.fetch.ca_file);
    sc_jobspec_free(&cfg->cli_job);
    for (size_t i = 0; i < cfg->njobs; i++)
        sc_jobspec_free(&cfg->jobs[i]);
    free(cfg->jobs);
    memset(cfg, 0, sizeof *cfg);
}

/* A byte setting (v), or when it is 0 a share of the feed window: one
 * div-th of it, at least floor. */
static uint64_t or_window_share(const sc_config *cfg, uint64_t v,
                                unsigned div, uint64_t floor)
{
    if (v)
        return v;
    v = cfg->window_bytes / div;
    return v < floor ? floor : v;
}

uint64_t sc_config_sample_max(const sc_config *cfg)
{
    /* Default: an eighth of the feed window, so one sample never takes
     * the window alone; at least 1 MiB. */
    return or_window_share(cfg, cfg->max_sample_bytes, 8, 1u << 20);
}

uint64_t sc_config_stage_bytes(const sc_config *cfg)
{
    /* --stage-bytes 0 (deprecated) once kept staging off, so that such
     * epochs were the feed's: it stands for half the feed's window now
     * (their memory was the window's), at least 16 MiB. */
    return or_window_share(cfg, cfg->stage_bytes, 2, 16u << 20);
}

uint64_t sc_config_field_max(const sc_config *cfg)
{
    uint64_t s = sc_config_sample_max(cfg);
    uint64_t f = cfg->max_field_bytes ? cfg->max_field_bytes : s;
    if (f > s)
        f = s;
    if (f > SIO_MEMBER_MAX_DEFAULT)
        f = SIO_MEMBER_MAX_DEFAULT;
    return f;
}

void sc_redact_source(const char *src, char *dst, size_t cap)
{
    /* The library's one redacted form for every URL in the text. */
    sio_redact_text(src, dst, cap);
}

/* The text of a server setting's value for logs and /v1/settings; returns
 * a JSON value (new reference) too when j is not NULL. */
static json_t *value_of(const sc_config *cfg, const setting *st, char *val,
                        size_t len)
{
    const char *field = (const char *)cfg + st->offset;
    switch (st->type) {
    case T_SECRET: {
        const char *s = *(char *const *)(const void *)field;
        snprintf(val, len, "%s", s ? "<set>" : "<unset>");
        return s ? json_string("<redacted>") : json_null();
    }
    case T_STRING:
    case T_PATH:
    case T_JOB:
    case T_ADDR:
    case T_FIELDS: {
        const char *s = *(char *const *)(const void *)field;
        sc_redact_source(s ? s : "", val, len);
        return s ? json_string(val) : json_null();
    }
    case T_U32:
    case T_BYTES32:
    case T_MS:
    case T_SECS:
        snprintf(val, len, "%" PRIu32, *(const uint32_t *)(const void *)field);
        return json_integer((json_int_t) * (const uint32_t *)(const void *)field);
    case T_U64:
    case T_BYTES: {
        uint64_t x = *(const uint64_t *)(const void *)field;
        snprintf(val, len, "%" PRIu64, x);
        /* JSON integers are signed 64-bit: larger values go as text. */
        return x <= INT64_MAX ? json_integer((json_int_t)x) : json_string(val);
    }
    case T_BOOL: {
        int b = *(const int *)(const void *)field;
        if (st->choices)
            b = b == st->choices[0].value;
        snprintf(val, len, "%s", b ? "true" : "false");
        return json_boolean(b);
    }
    case T_ENUM: {
        int v = *(const int *)(const void *)field;
        snprintf(val, len, "?");
        for (const choice *c = st->choices; c->name; c++)
            if (c->value == v)
                snprintf(val, len, "%s", c->name);
        return json_string(val);
    }
    }
    return json_null();
}

void sc_settings_log(const sc_config *cfg)
{
    char val[1024], q[1100];
    for (size_t i = 0; i < NALIASES; i++)
        if (cfg->deprecated_used & (1u << i))
            SC_LOG(SIO_LOG_WARN,
                   "event=deprecated_setting name=%s use=%s", aliases[i].old,
                   aliases[i].name);
    if (!cfg->stage_bytes)
        SC_LOG(SIO_LOG_WARN,
               "event=deprecated_setting name=stage-bytes value=0 "
               "use=\"%" PRIu64 " (half of --window-bytes): remote shards "
               "are staged\"",
               sc_config_stage_bytes(cfg));
    if (!cfg->stage_indexed)
        SC_LOG(SIO_LOG_WARN,
               "event=deprecated_setting name=stage-indexed value=false "
               "use=\"none: indexed epochs are staged (ignored)\"");
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *st = &settings[i];
        if (st->scope == S_JOB)
            continue;
        json_decref(value_of(cfg, st, val, sizeof val));
        SC_LOG(SIO_LOG_INFO, "event=setting name=%s value=%s", st->name,
               sc_log_quote(q, sizeof q, val, strlen(val)));
    }
}

char *sc_settings_json(const sc_config *cfg)
{
    char val[1024];
    char *text = NULL;
    json_t *o = json_object();
    if (!o)
        return NULL;
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *st = &settings[i];
        if (st->scope == S_JOB)
            continue;
        json_t *v = value_of(cfg, st, val, sizeof val);
        if (!v || json_object_set_new(o, st->name, v) != 0)
            goto out;
    }
    text = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
out:
    json_decref(o);
    return text;
}
