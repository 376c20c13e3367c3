/*
 * settings.h — the daemon's settings and the job spec: ONE table (name,
 * scope, type, default, bounds, help) that the command line (--name VALUE or
 * --name=VALUE), the environment (SHARDCAST_<NAME>, upper case, '-' as '_'),
 * the JSON config file (--config; the Kubernetes ConfigMap) and the jobs API
 * (PUT /v1/jobs/{job}) all go through.
 *
 * Each setting has one name: its flag (--shuffle-buffer-bytes), its
 * environment variable (SHARDCAST_SHUFFLE_BUFFER_BYTES) and its config-file
 * or job key (shuffle_buffer_bytes); the job's name is --job / "name".
 * Older spellings are accepted as deprecated aliases (settings.c).
 *
 * Server settings apply to the process; among them the object-store (io)
 * settings are what the server hands libshardio's sio_io (sc_config.io).
 * Job settings describe one job; on
 * the command line they define the single job of the --job/--source form,
 * in the config file and the API they are the keys of a job object
 * ({"name", "source", "seed", "shuffle_buffer", "shuffle_buffer_bytes",
 * "interleave", "partition", "fields", "on_error", "read_threads",
 * "cache", "epoch_size"}, or "sources" instead of "source": an array of
 * {"name", "source", "weight" | "repeat" | "choose", "sampling"}) and the
 * table's defaults are the job defaults.
 * Precedence of server settings: command line > environment > config file >
 * default. Bad values are rejected with a message naming the setting and
 * where the value came from.
 *
 * Threading: sc_settings_load runs once in main before threads start; the
 * sc_config is read-only afterwards. sc_jobspec_* are pure functions safe
 * from any thread. Ownership: strings in sc_config and sc_jobspec are
 * malloc'd and freed by sc_settings_free / sc_jobspec_free.
 */
#ifndef SC_SETTINGS_H
#define SC_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "names.h"
#include "shardio.h"
#include "shardio_wire.h"

/* Longest job source: a long brace pattern or list of specs, not a dataset
 * manifest. */
#define SC_SOURCE_MAX 65536u
/* Longest token (consumer or admin). */
#define SC_TOKEN_MAX 1024u
/* Most jobs in one config file (and the bound of --max-jobs). */
#define SC_JOBS_MAX 1024u
/* Largest config file and largest PUT body (a job spec). */
#define SC_CONFIG_FILE_MAX (4u << 20)
#define SC_JOBSPEC_BODY_MAX (128u * 1024u)

/* One job: what to read and how to order it. */
typedef struct sc_jobspec {
    char *name;             /* [A-Za-z0-9._-], 1..SC_JOB_NAME_MAX */
    char *source;           /* shard source (see sio_shardlist_resolve) */
    uint64_t seed;
    uint32_t shuffle_buffer;  /* B samples */
    uint64_t buffer_bytes;    /* byte cap of the shuffle buffer (0: none) */
    uint32_t interleave;      /* K shards open at once */
    int partition;            /* sio_partition */
    int on_error;             /* sio_on_error */
    uint32_t read_threads;    /* read-ahead threads of each epoch */
    char *fields;             /* default field filter: "a,b" lowercased, or
                                 NULL for every field */
    int cache;                /* read shards through the server's shard
                                 cache (when it has one) */
    uint64_t epoch_size;      /* samples per epoch (0: one pass, or the
                                 sources' quotas) */
    char *sources;            /* a mixed job's sources: canonical JSON
                                 array (sc_mix_parse), or NULL */
} sc_jobspec;

/* Why a mixed job (sources, or an epoch_size) is refused on a replica
 * set (%u: R): its epoch is one sequence that draws every sample from all
 * sources by quota, and cannot be dealt out by shard as R parts. */
#define SC_MIX_REPLICAS_REASON                                             \
    "a mixed job (\"sources\" or \"epoch_size\") cannot be split over "    \
    "--replicas %u: its epoch is one sequence drawn from all sources by "  \
    "quota, which R replicas cannot deal out by shard; serve it from one " \
    "replica (--replicas 1) or a separate shardcastd"

/* One source of a mixed job (docs/order.md "Mixing datasets"). */
#define SC_MIX_NAME_MAX 64u
typedef struct sc_mixsrc {
    char name[SC_MIX_NAME_MAX + 1];
    char *source;             /* malloc'd */
    int kind;                 /* sio_mix_kind */
    double value;             /* weight or repeat */
    uint64_t choose;
    int resample;             /* sampling=with_replacement */
} sc_mixsrc;

/* Parse the canonical sources JSON of a spec into *out (n entries, free
 * with sc_mix_free). -1 with msg on error (cannot happen for a spec that
 * sc_jobspec_parse accepted, except out of memory). */
int sc_mix_parse(const char *json, sc_mixsrc **out, size_t *n, char *msg,
                 size_t msg_len);
void sc_mix_free(sc_mixsrc *v, size_t n);

/* Where a stream's samples come from (--data-plane). */
enum { SC_DATA_PLANE_AUTO = 0, SC_DATA_PLANE_STREAM = 1 };

typedef struct sc_config {
    /* Server settings. */
    char *config;           /* --config: JSON file with jobs and settings */
    char *listen;           /* --listen: IPv4 or IPv6 literal */
    uint32_t port;          /* --port: 0 picks a free port */
    int log_level;          /* --log-level: SIO_LOG_* */
    uint32_t threads;       /* --threads: MHD worker threads (epoll each) */
    uint32_t max_connections;     /* --max-connections */
    uint32_t max_connections_ip;  /* --max-connections-per-ip (0: no cap) */
    uint32_t max_url;       /* --max-url: longest request target */
    uint64_t connection_memory; /* --connection-memory: MHD per-connection
                                   pool; bounds the request header size */
    uint64_t sample_pool_idle; /* --sample-pool-idle: idle pool bytes */
    uint32_t sample_pool_decay_ms; /* --sample-pool-decay-ms */
    uint32_t idle_timeout;  /* --idle-timeout: seconds without progress */
    uint32_t heartbeat_ms;  /* --heartbeat-ms (0: no KEEPALIVE frames) */
    uint32_t stream_stall_timeout; /* --stream-stall-timeout: seconds */
    char *token;            /* --token (SHARDCAST_TOKEN): consumers */
    char *token_file;
    char *admin_token;      /* --admin-token (SHARDCAST_ADMIN_TOKEN) */
    char *admin_token_file;
    uint32_t rate_limit;    /* --rate-limit: non-stream requests per second
                               per client address (0: no limit) */
    uint32_t rate_burst;    /* --rate-burst: bucket size */
    uint32_t max_jobs;      /* --max-jobs */
    uint32_t max_epochs;    /* --max-epochs: epochs in flight per job */
    int prefetch;           /* --prefetch: open epoch E+1 when E is read */
    uint32_t window_samples;  /* --window-samples: feed window */
    uint64_t window_bytes;    /* --window-bytes */
    uint32_t join_timeout_ms; /* --join-timeout-ms */
    uint32_t rejoin_grace_ms; /* --rejoin-grace-ms */
    uint32_t feed_idle_ms;    /* --feed-idle-ms */
    uint32_t drain_grace;     /* --drain-grace: seconds */
    uint32_t lag_samples;     /* --lag-samples: lagging threshold (0: half
                                 the window) */
    uint32_t replica, replicas; /* --replica J --replicas R */
    char *peers;              /* --peers: the set's R URLs, or a template
                                 with {j} (NULL: none) */
    uint32_t peer_interval_ms; /* --peer-interval */
    char *state_dir;          /* --state-dir: indexes, journals (NULL) */
    uint64_t cache_bytes;     /* --cache-bytes: shard cache budget (0: no
                                 cache) */
    char *cache_dir;          /* --cache-dir (NULL: state_dir/cache, or in
                                 memory without a state_dir) */
    uint32_t cache_idle;      /* --cache-idle: seconds after which an unused
                                 entry is evicted first */
    int index_sidecars;       /* --index-sidecars */
    int index_sidecars_probe; /* --index-sidecars-probe */
    uint32_t max_seeks;       /* --max-seeks: per epoch */
    uint32_t max_seeks_total; /* --max-seeks-total: per server */
    int lag_policy;           /* --lag-policy: sio_feed_lag */
    int data_plane;           /* --data-plane: SC_DATA_PLANE_* */
    uint64_t plan_keep_samples; /* --plan-keep-samples: a plan's window */
    uint64_t plan_ahead_samples; /* --plan-ahead-samples: 0 auto */
    int stage_indexed;        /* --stage-indexed */
    uint64_t stage_bytes;     /* --stage-bytes: remote shards held in memory
                                 per epoch */
    uint32_t lag_grace_ms;    /* --lag-grace-ms */
    /* Bounds against hostile or runaway clients (SECURITY.md). */
    uint32_t header_timeout;     /* --header-timeout: seconds */
    uint32_t stream_rate_limit;  /* --stream-rate-limit: opens/s/address */
    uint32_t stream_rate_burst;  /* --stream-rate-burst */
    uint32_t max_feeds_job;      /* --max-feeds-per-job (live + retired) */
    uint32_t max_feeds;          /* --max-feeds (server, live + retired) */
    uint32_t max_new_epochs_min; /* --max-new-epochs-per-minute (per job) */
    uint32_t max_epochs_ahead;   /* --max-epochs-ahead */
    uint64_t max_sample_bytes;   /* --max-sample-bytes (0: derived) */
    uint64_t max_field_bytes;    /* --max-field-bytes (0: derived) */
    uint64_t log_queue_bytes;    /* --log-queue-bytes */
    uint32_t max_job_sources;    /* --max-job-sources: specs of one job */
    uint32_t max_job_shards;     /* --max-job-shards: shards of one job */
    uint64_t max_shards;         /* --max-shards: shards of all jobs */
    /* Object-store settings (the io scope): the fetch engine's
     * (--fetch-*, --ca-file), the S3 listing's (--s3-list-*) and
     * --allow-link-local-sources, as libshardio takes them; the log
     * fields are the server's to fill. io.fetch.ca_file is malloc'd. */
    sio_io_config io;
    /* Deprecated spellings used (bit i: alias i of settings.c), logged by
     * sc_settings_log. */
    uint32_t deprecated_used;

    /* The job of the command-line form (cli_job.name NULL: none). */
    sc_jobspec cli_job;
    /* Jobs of the config file, in file order. */
    sc_jobspec *jobs;
    size_t njobs;
} sc_config;

typedef enum sc_settings_result {
    SC_SETTINGS_OK = 0,
    SC_SETTINGS_HELP = 1,  /* --help or --version was given; output done */
    SC_SETTINGS_ERROR = 2  /* msg says what is wrong */
} sc_settings_result;

/*
 * Fill *cfg from defaults, the config file, the environment and argv
 * (argv[0] is the program name), read token files, check cross-setting
 * rules. On SC_SETTINGS_ERROR msg[msg_len] holds one line without newline.
 * On SC_SETTINGS_HELP the text went to `out`. In every case release the
 * strings with sc_settings_free().
 */
sc_settings_result sc_settings_load(sc_config *cfg, int argc,
                                    char *const *argv, FILE *out, char *msg,
                                    size_t msg_len);

void sc_settings_free(sc_config *cfg);

/* Print the usage text (every setting with its default and help, server
 * settings and job keys in two sections). */
void sc_settings_usage(FILE *f, const char *prog);

/* Log the values in effect, one line per server setting (level info);
 * secrets are shown as "<set>" or "<unset>". A deprecated spelling that
 * was used is logged first (level warn, event=deprecated_setting). */
void sc_settings_log(const sc_config *cfg);

/* The server settings in effect as a JSON object text (malloc'd, caller
 * frees), secrets redacted; NULL when out of memory. */
char *sc_settings_json(const sc_config *cfg);

/*
 * Parse a job spec from JSON text (len bytes, not necessarily
 * NUL-terminated). `name`, when not NULL, is the job name from the URL: the
 * body may omit "name" or must repeat it. Unknown keys, wrong types and
 * out-of-bounds values are rejected. On success returns 0 and *out holds the
 * spec (free with sc_jobspec_free); on failure returns -1 with a one-line
 * reason.
 */
int sc_jobspec_parse(const char *json, size_t len, const char *name,
                     sc_jobspec *out, char *reason, size_t reason_len);

/*
 * Check a parsed job spec's sources without I/O (sio_source_check: brace
 * syntax, schemes, URLs, link-local hosts unless
 * cfg->io.allow_link_local), and its bounds: at most cfg->max_job_sources
 * specs (the pieces of "source", or of every "sources" entry, split at
 * "::") and at most cfg->max_job_shards shards named by its patterns and
 * other specs (counted, never expanded; a directory or prefix counts 1
 * here and is bounded again when listed). *shards gets that count. Returns
 * 0, or -1 with a one-line reason naming the spec and the bound.
 */
int sc_jobspec_check(const sc_jobspec *spec, const sc_config *cfg,
                     uint64_t *shards, char *reason, size_t reason_len);

/* Deep copy; -1 when out of memory. */
int sc_jobspec_copy(sc_jobspec *dst, const sc_jobspec *src);
/* Do two specs describe the same job (every key equal)? */
int sc_jobspec_equal(const sc_jobspec *a, const sc_jobspec *b);
void sc_jobspec_free(sc_jobspec *s);

/* A source (or any text) with every URL in its redacted form
 * (sio_redact_text: user information and credential query values masked),
 * for logs, errors and status: credentials must never leave the process. */
void sc_redact_source(const char *src, char *dst, size_t cap);

/* The sample and field limits in effect (the settings, or their derived
 * defaults): what the memory formula counts per sample in flight. */
uint64_t sc_config_sample_max(const sc_config *cfg);
uint64_t sc_config_field_max(const sc_config *cfg);
/* The staging budget in memory (--stage-bytes; its deprecated 0: half of
 * --window-bytes). */
uint64_t sc_config_stage_bytes(const sc_config *cfg);


/* Bytes of one --peers URL. */
#define SC_PEER_URL_MAX 1024u
/*
 * Expand a --peers value for a set of R replicas: a comma-separated list
 * of exactly R http(s)://host[:port] URLs, or one URL holding "{j}".
 * Returns the R URLs (malloc'd array of malloc'd strings; free with
 * sc_peers_free_urls), or NULL with a one-line reason in msg.
 */
char **sc_peers_parse(const char *spec, uint32_t replicas, char *msg,
                      size_t msg_len);
void sc_peers_free_urls(char **urls, uint32_t n);

#endif /* SC_SETTINGS_H */
