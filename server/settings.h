/*
 * settings.h — the daemon's settings: one table (name, type, default,
 * bounds, help) that the command line (--name VALUE or --name=VALUE) and the
 * environment (SHARDCAST_<NAME>, upper case, '-' as '_') go through.
 * Precedence: command line > environment > default. Bad values are
 * rejected at start-up with a message naming the setting and its source.
 *
 * Threading: loaded once in main before threads start; read-only after.
 * Ownership: strings in sc_config are malloc'd; sc_settings_free frees them.
 */
#ifndef SC_SETTINGS_H
#define SC_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sc_config {
    char *job;              /* --job: the one job served (required) */
    char *source;           /* --source: shard source (required) */
    uint64_t seed;          /* --seed */
    uint32_t shuffle_buffer; /* --shuffle-buffer: B samples */
    uint64_t buffer_bytes;  /* --buffer-bytes: byte cap of the buffer */
    uint32_t interleave;    /* --interleave: K shards open at once */
    int partition;          /* --partition: sio_partition */
    int on_error;           /* --on-error: sio_on_error */
    char *listen;           /* --listen: IPv4 or IPv6 literal */
    uint32_t port;          /* --port: 0 picks a free port */
    int log_level;          /* --log-level: SIO_LOG_* */
    uint32_t threads;       /* --threads: MHD thread pool size */
    uint32_t max_connections; /* --max-connections */
    uint32_t max_url;       /* --max-url: longest request target */
    uint64_t connection_memory; /* --connection-memory: MHD per-connection
                                   pool, bounds request headers */
    uint64_t queue_bytes;   /* --queue-bytes: per-stream byte queue */
    uint32_t idle_timeout;  /* --idle-timeout: seconds without progress */
} sc_config;

typedef enum sc_settings_result {
    SC_SETTINGS_OK = 0,
    SC_SETTINGS_HELP = 1,  /* --help or --version was given; output done */
    SC_SETTINGS_ERROR = 2  /* msg says what is wrong */
} sc_settings_result;

/*
 * Fill *cfg from defaults, the environment and argv (argv[0] is the program
 * name). On SC_SETTINGS_ERROR msg[msg_len] holds one line without newline.
 * On SC_SETTINGS_HELP the text went to `out`. In every case release the
 * strings with sc_settings_free().
 */
sc_settings_result sc_settings_load(sc_config *cfg, int argc,
                                    char *const *argv, FILE *out, char *msg,
                                    size_t msg_len);

void sc_settings_free(sc_config *cfg);

/* Print the usage text (every setting with its default and help). */
void sc_settings_usage(FILE *f, const char *prog);

/* Log the values in effect, one line per setting (level info). */
void sc_settings_log(const sc_config *cfg);

#endif /* SC_SETTINGS_H */
