/*
 * shardcast_client.h — the C client of shardcast (libshardcast_client).
 *
 * A stream is one consumer's share of one epoch, read over HTTP from a
 * shardcastd (GET /v1/jobs/{job}/epochs/{epoch}/stream). The client speaks
 * both wire formats (format=frames, the default, and format=tar; see
 * include/shardio_wire.h) and hands out samples without copying them: the
 * bytes of a sample are views into the stream's receive buffer, valid until
 * the next call on that stream. It tells a complete share (the server's
 * clean end) from a cut one and, when the connection breaks or the server
 * says to come back (a retryable error trailer, a 5xx), reconnects with
 * start = the position reached within a retry budget (below), so the
 * caller sees every sample of its share once.
 *
 * Threading: a stream is used by one thread at a time; distinct streams are
 * independent and may run on different threads at once. The library keeps
 * no mutable global state, but libcurl's global initialisation must have
 * happened before streams are opened from several threads: call
 * scc_global_init() once at program start (it is also called implicitly,
 * which is safe only while the program has one thread).
 *
 * Errors: every fallible call returns an scc_code; the stream keeps the
 * detail text (scc_stream_errmsg). Nothing is printed, and the bearer token
 * never appears in any message.
 */
#ifndef SHARDCAST_CLIENT_H
#define SHARDCAST_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes. Values are fixed; new ones are only ever appended. */
typedef enum scc_code {
    SCC_OK = 0,
    SCC_ERR_NOMEM = 1,     /* out of memory */
    SCC_ERR_INVALID = 2,   /* bad argument or URL */
    SCC_ERR_CONNECT = 3,   /* cannot connect (refused, unreachable, DNS) */
    SCC_ERR_HTTP = 4,      /* the server answered with an HTTP error
                              (4xx other than 401/403/404, 5xx); the
                              server's reason is in the detail text */
    SCC_ERR_NOTFOUND = 5,  /* 404: unknown job or path */
    SCC_ERR_AUTH = 6,      /* 401/403: token missing or refused */
    SCC_ERR_SERVER = 7,    /* the stream ended with the server's error
                              trailer: final, or retryable and the retry
                              budget ran out (reason in the detail text) */
    SCC_ERR_CUT = 8,       /* the stream broke and could not be resumed
                              within the retry budget */
    SCC_ERR_PROTOCOL = 9,  /* the bytes violate the wire format */
    SCC_ERR_TIMEOUT = 10,  /* no byte for idle_timeout_ms */
    SCC_ERR_LIMIT = 11,    /* a sample or response above a client limit */
    SCC_ERR_CONFIG = 12    /* the replica set is set up wrongly: replicas
                              that report another place in the set, or
                              disagree on the job's order (fingerprint),
                              or a stream that is not the part asked for;
                              never retried (detail names the replicas and
                              the differing settings) */
} scc_code;

/* Fixed English text of a code; never NULL. */
const char *scc_strerror(scc_code code);

/* Call once before any other function when the program has (or will have)
 * several threads; later calls do nothing. Returns SCC_OK or
 * SCC_ERR_NOMEM. */
scc_code scc_global_init(void);

typedef enum scc_format {
    SCC_FORMAT_FRAMES = 0, /* default */
    SCC_FORMAT_TAR = 1
} scc_format;

/* Sanity limits. */
#define SCC_FIELDS_MAX 64u          /* names in a fields= filter */
#define SCC_FIELD_NAME_MAX 64u      /* bytes in one such name */
#define SCC_URL_MAX 8192u           /* bytes of a stream URL */
#define SCC_ERROR_BODY_MAX 4096u    /* bytes of an HTTP error body kept */
#define SCC_SAMPLE_MAX_DEFAULT (1ull << 30) /* bytes of one sample (frame) */
#define SCC_REPLICAS_MAX 65536u     /* URLs in a replica set */
#define SCC_FINGERPRINT_MAX 64u     /* hex digits of a fingerprint */

/* A failover, as told to scc_options.on_failover (see below). Strings are
 * valid during the call only. */
typedef struct scc_failover {
    uint32_t part;        /* J: the replica whose part of the epoch the
                             stream reads (its home replica) */
    uint32_t from, to;    /* the replica that served the stream until it
                             failed, and the one serving it now */
    const char *from_url, *to_url; /* their base URLs */
    uint64_t position;    /* position within the share it continues at */
    uint32_t attempts;    /* attempts this took (1: the first one) */
    uint64_t stalled_ms;  /* from the failure to the new connection's
                             answer */
    const char *reason;   /* why `from` was left */
} scc_failover;
typedef void (*scc_failover_fn)(void *userdata, const scc_failover *f);

/* What an epoch lost, as told to scc_options.on_loss once per (job,
 * epoch) and process (see below). Strings are valid during the call. */
typedef struct scc_loss {
    const char *job;       /* as given, or taken from the URL's path
                              (NULL when it names none) */
    uint64_t epoch;
    uint64_t shards;       /* shards skipped or cut short */
    uint64_t samples;      /* single bad samples skipped */
    int partial;           /* the server did not know all yet */
    const char *first;     /* the first names: "URL, URL; URL sample N" */
    const char *json;      /* the END summary's "skipped" object */
} scc_loss;
typedef void (*scc_loss_fn)(void *userdata, const scc_loss *l);

/*
 * How to open a stream. Initialise with scc_options_init() (which sets the
 * defaults noted), then set what you need. Strings are copied by
 * scc_stream_open().
 *
 * Either `url` is a full stream URL (".../v1/jobs/J/epochs/E/stream?
 * rank=R&world=W..."; its start= is replaced on resume and a format= is
 * added when missing), or `server` plus job/epoch/rank/world/... build it,
 * or `replicas` (a replica set, below) plus job/epoch/rank/world/....
 *
 * A replica set: nreplicas >= 1 base URLs, replicas[j] being the server
 * started with --replica j --replicas nreplicas. `server` and `url` are
 * then not used, and rank/world are the GLOBAL consumer c of W: the stream
 * reads replica J = c mod R's part of the epoch, as local rank c div R of
 * a local world of (W - J + R - 1) div R consumers (scc_route; W < R is
 * SCC_ERR_INVALID: a replica would have no consumer). Each request names
 * the part (&replica=J), so that any replica can serve it:
 *   - verify (default): scc_stream_open first asks every replica for
 *     GET /v1/topology?job=JOB (scc_replicas_verify; skipped when
 *     `fingerprint` is given) and fails with SCC_ERR_CONFIG unless every
 *     replica that answers reports its own place (replica j of nreplicas)
 *     and the same fingerprint; every stream header must then carry that
 *     fingerprint and the part asked for, else SCC_ERR_CONFIG;
 *   - failover: the stream starts at its home replica J (open tries the
 *     other replicas once each when J cannot be reached or answers 5xx);
 *     a failure that is retried (above) moves to the next replica of the
 *     consumer's candidate list (home, then (J + 1 + ((l + i) mod (R - 1)))
 *     mod R for i = 0..R-2, l the local rank; round and round, so a home
 *     that comes back is used again) at once for the first round, with the
 *     backoff after that, and resumes there at the position reached;
 *   - no_verify: no topology check and no fingerprint is required; a
 *     stream that states its identity must still be the part asked for,
 *     and keep the fingerprint the stream first had across failovers.
 */
typedef struct scc_options {
    const char *url;       /* full stream URL, or NULL */
    const char *server;    /* "http://host:port" (with url == NULL) */
    const char *job;
    uint64_t epoch;
    uint32_t rank, world;  /* rank < world */
    uint64_t start;        /* position within the share to start from */
    uint64_t global_start; /* elastic resume base; 0: none */
    const char *const *fields; /* send only these fields (NULL: all) */
    size_t nfields;
    scc_format format;         /* default SCC_FORMAT_FRAMES */
    const char *token;         /* bearer token, or NULL */
    uint32_t connect_timeout_ms; /* default 10000 */
    uint32_t idle_timeout_ms;    /* no byte for this long: a broken
                                    connection (default 60000) */
    uint32_t max_reconnects;     /* reconnect attempts in a row, i.e.
                                    without a sample in between (default
                                    SCC_RECONNECTS_DEFAULT; 0: none) */
    uint32_t reconnect_delay_ms; /* first backoff, doubled per attempt,
                                    at most 5 s unless the server advises
                                    a longer wait (default 200) */
    uint64_t max_sample_bytes;   /* largest sample accepted (default
                                    SCC_SAMPLE_MAX_DEFAULT) */
    uint32_t retry_budget_ms;    /* time a streak of reconnects may take,
                                    from its first failure; an attempt
                                    that would start later is not made
                                    (default SCC_RETRY_BUDGET_DEFAULT_MS;
                                    0: attempts only) */
    /* The replica set (see above); NULL/0: a single server. */
    const char *const *replicas;
    size_t nreplicas;
    int no_verify;               /* 1: skip the replica set check */
    const char *fingerprint;     /* the set's fingerprint as already
                                    verified (scc_replicas_verify), so that
                                    many streams check once; NULL: open
                                    verifies */
    scc_failover_fn on_failover; /* told of each failover, on the thread
                                    that reads the stream, from within
                                    scc_stream_open/next (NULL: none) */
    void *on_failover_ud;
    /* The connect and the wait for the response headers, bounded together
     * (a stopped or hung server still accepts the connection: this is
     * where it is seen); also each request of the replica check. Default
     * SCC_HEADER_TIMEOUT_DEFAULT_MS (0: the default); at most
     * connect_timeout_ms + idle_timeout_ms. */
    uint32_t header_timeout_ms;
    /* A frames stream whose server announces heartbeats (its HEADER's
     * heartbeat_ms: a KEEPALIVE frame about every second while it has
     * nothing else to send): this long without a byte means the server or
     * its host is hung (SCC_ERR_TIMEOUT, and the next replica takes over).
     * At least twice the server's interval, at most idle_timeout_ms (set it
     * to idle_timeout_ms to wait as long as a stream without heartbeats).
     * Default SCC_HEARTBEAT_TIMEOUT_DEFAULT_MS (0: the default). A replica
     * found hung or unreachable is not asked again by this stream while
     * another candidate is left. */
    uint32_t heartbeat_timeout_ms;
    /* An epoch that lost samples (its END summary's "skipped": shards
     * skipped or cut short, bad samples, under on_error=skip) is told
     * once per (job, epoch) and process, by the first of its streams that
     * ends: to on_loss when set (on the thread that reads the stream),
     * else as one warning line on stderr. The counts stay in
     * scc_stream_summary. */
    scc_loss_fn on_loss;
    void *on_loss_ud;
} scc_options;
#define SCC_HEADER_TIMEOUT_DEFAULT_MS 10000u
#define SCC_HEARTBEAT_TIMEOUT_DEFAULT_MS 3000u

/*
 * The retry budget. Once a stream has been opened, a connection that
 * breaks (reset, cut, idle timeout), a 5xx answer to a reconnect, and an
 * error trailer the server marks retryable (it drains for a restart) are
 * retried with start = the position reached, so the caller sees every
 * sample once. The pause doubles from reconnect_delay_ms up to 5 s, and is
 * never shorter than the server's advice (the trailer's retry_after_ms, a
 * Retry-After header in seconds; at most 10 minutes). The
 * defaults, 30 attempts within 120 s, ride out a rolling restart of the
 * server of a minute or so. A sample handed out starts a new budget.
 * scc_stream_open itself does not retry: a server that cannot be reached
 * or refuses at the start is reported at once (with a replica set, once
 * each replica of the consumer's candidate list was tried; see above).
 */
#define SCC_RECONNECTS_DEFAULT 30u
#define SCC_RETRY_BUDGET_DEFAULT_MS 120000u

void scc_options_init(scc_options *o);

/* One field of a sample: views, not NUL-terminated. */
typedef struct scc_field {
    const char *name;
    size_t name_len;
    const unsigned char *data;
    size_t len;
} scc_field;

/*
 * A sample. Every pointer is a view into the stream's buffers, valid until
 * the next call on the stream.
 */
typedef struct scc_sample {
    uint64_t global_index; /* index in the epoch's sequence Y */
    uint64_t position;     /* position within the consumer's share */
    uint32_t shard_index;  /* frames: index in the shard list; tar:
                              UINT32_MAX (the format does not carry it) */
    const char *shard_url; /* not NUL-terminated */
    size_t shard_url_len;
    const char *key;       /* original WebDataset key; not NUL-terminated */
    size_t key_len;
    size_t nfields;
    const scc_field *fields; /* in shard order */
    uint64_t bytes;          /* sum of field lengths */
} scc_sample;

/* The server's summary of a share that ended cleanly. */
typedef struct scc_summary {
    uint64_t epoch;
    uint32_t rank, world;
    uint64_t start;    /* start of the last response (after reconnects) */
    uint64_t samples;  /* samples of the last response */
    uint64_t position; /* position reached */
    /* What the epoch lost up to the share's last item (the END summary's
     * "skipped"; docs/http-api.md): shards skipped or cut short, single
     * bad samples skipped; partial: the server did not know all yet. */
    uint64_t lost_shards, lost_samples;
    int lost_partial;
    const char *lost_json; /* that object as sent (NUL-terminated), or
                              NULL when nothing was lost */
} scc_summary;

typedef struct scc_stream scc_stream;

/*
 * Open a stream: connect, send the request and read the response head. On
 * success the server accepted the request (200). Errors: SCC_ERR_INVALID,
 * SCC_ERR_CONNECT, SCC_ERR_NOTFOUND (unknown job), SCC_ERR_AUTH,
 * SCC_ERR_HTTP (with the server's reason), SCC_ERR_TIMEOUT, SCC_ERR_NOMEM,
 * and with a replica set SCC_ERR_CONFIG (the check failed) and the codes
 * of scc_replicas_verify.
 * On failure *out is still set when a stream could be created, so that
 * scc_stream_errmsg() gives the detail; destroy it with scc_stream_close().
 */
scc_code scc_stream_open(const scc_options *opts, scc_stream **out);

/*
 * Next sample. SCC_OK with *out set, or *out == NULL at the clean end of
 * the share (then scc_stream_summary() holds the server's summary). Errors
 * end the stream: SCC_ERR_SERVER (a final error trailer, or a retryable
 * one and the retry budget spent), SCC_ERR_CUT (broken, and the retry
 * budget spent or no reconnect allowed), SCC_ERR_PROTOCOL, SCC_ERR_TIMEOUT,
 * SCC_ERR_LIMIT, SCC_ERR_NOMEM, SCC_ERR_CONFIG (with a replica set: a
 * stream that is not the part asked for, or has another fingerprint; never
 * retried), and on a failed reconnect the codes of scc_stream_open. The
 * sample's views are valid until the next call.
 */
scc_code scc_stream_next(scc_stream *s, const scc_sample **out);

/* Field of a sample by name, or NULL. */
const scc_field *scc_sample_field(const scc_sample *smp, const char *name);

/*
 * Content hash of a sample: sha256 over its fields sorted by name (bytewise),
 * each fed as name + "\0" + the data length as 8-byte little-endian + data
 * (the hash of tests/tools/mkwds.py's manifest and of the Python client).
 */
scc_code scc_sample_hash(const scc_sample *smp, unsigned char out[32]);

/* Detail of the last error ("" when none); valid until the next call. */
const char *scc_stream_errmsg(const scc_stream *s);
/* HTTP status of the last response (0 before one arrived). */
int scc_stream_http_status(const scc_stream *s);
/* The wire format the server answered with. */
scc_format scc_stream_format(const scc_stream *s);
/* Position within the share: the position of the next sample. */
uint64_t scc_stream_position(const scc_stream *s);
/* Reconnects done so far. */
uint32_t scc_stream_reconnects(const scc_stream *s);
/* Response body bytes received so far, over all connections. */
uint64_t scc_stream_bytes(const scc_stream *s);
/* The partition policy the server announced ("even-drop", "even-pad",
 * "none"; frames only, NULL for tar or before the first sample). */
const char *scc_stream_partition(const scc_stream *s);
/* The summary of a clean end (NULL before it). */
const scc_summary *scc_stream_summary(const scc_stream *s);
/* The stream's current URL (start= updated on resume); the token is not
 * part of it. */
const char *scc_stream_url(const scc_stream *s);
/* Failovers so far: connections that another replica of the set took
 * over (0 without a replica set). */
uint32_t scc_stream_failovers(const scc_stream *s);
/* The replica (index into scc_options.replicas) serving the current
 * connection, or -1 without a replica set. */
int scc_stream_replica(const scc_stream *s);

/* What a stream states of where it comes from (the frames HEADER's and
 * the tar stream's global header's identity; see shardio_wire.h). */
typedef struct scc_ident {
    char job[257];
    uint64_t epoch;
    char fingerprint[SCC_FINGERPRINT_MAX + 1]; /* "" when not stated */
    uint32_t replica;   /* the part of the epoch served */
    uint32_t replicas;  /* R */
    uint32_t served_by; /* the answering server's own replica number */
} scc_ident;
/* The identity of the current connection's stream, or NULL when it stated
 * none (yet; a server without it, or before the first sample). */
const scc_ident *scc_stream_ident(const scc_stream *s);

/* Close the connection and free the stream (NULL is fine). */
void scc_stream_close(scc_stream *s);

/*
 * Consumer c of W with a replica set of R: its replica J = c mod R, local
 * rank c div R and local world (W - J + R - 1) div R. SCC_ERR_INVALID when
 * R == 0, c >= W or W < R.
 */
scc_code scc_route(uint32_t consumer, uint32_t world, uint32_t replicas,
                   uint32_t *replica, uint32_t *local_rank,
                   uint32_t *local_world);

/*
 * The replica set check of scc_stream_open, on its own: GET
 * {replicas[k]}/v1/topology?job=JOB on every replica of o->replicas (with
 * o->token; connect and idle timeouts as for a stream). A replica that
 * cannot be reached or times out is skipped (the others still have to
 * agree); a 503 (the job still resolving) is asked again within the retry
 * budget. SCC_OK with the common fingerprint in fp (NUL-terminated) when
 * every replica that answered reports its own place, replica k of
 * nreplicas, and all fingerprints are equal; SCC_ERR_CONFIG when not, with
 * errmsg naming the replicas (URL, the place given, what each reports)
 * and the fields of the job's "order" that differ, each replica's value;
 * SCC_ERR_CONNECT when none answered; SCC_ERR_NOTFOUND, SCC_ERR_AUTH,
 * SCC_ERR_HTTP as their names say; SCC_ERR_PROTOCOL for an answer that is
 * not the expected JSON. errmsg (errlen bytes) may be NULL.
 */
scc_code scc_replicas_verify(const scc_options *o,
                             char fp[SCC_FINGERPRINT_MAX + 1], char *errmsg,
                             size_t errlen);

/*
 * One-shot GET of url (e.g. a job's status), body bounded by max_body
 * bytes (SCC_ERR_LIMIT above it). On SCC_OK *body is a malloc'd,
 * NUL-terminated copy (free()) of a 2xx answer's body and *len its length.
 * HTTP errors map as for scc_stream_open; errmsg (errlen bytes, may be
 * NULL) receives the detail.
 */
scc_code scc_http_get(const char *url, const char *token,
                      uint32_t timeout_ms, size_t max_body, char **body,
                      size_t *len, int *http_status, char *errmsg,
                      size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* SHARDCAST_CLIENT_H */
