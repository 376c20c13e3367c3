/*
 * fetch.h — the fetch engine: every HTTP request of libshardio (internal).
 *
 * One engine per sio_io runs the libcurl multi interface on its own
 * threads (curl_multi_poll / curl_multi_wakeup; nothing spins): one lane
 * per thread (sio_fetch_config.threads), each a multi handle with its
 * share of the bounds below; a stream (all its parts) or a request goes to
 * one lane, dealt in turn, so a second epoch's reads do not queue behind
 * the first one's on a single thread. It reuses
 * connections (HTTP/1.1 keep-alive, TLS through libcurl's OpenSSL), bounds
 * the requests in flight (a global limit lowered on throttling and raised
 * again slowly: AIMD; and a per-host connection limit), and retries
 * transient failures (500/502/503/504, 429, S3 SlowDown and RequestTimeout,
 * timeouts, stalls, resets, truncated bodies) with exponential backoff and
 * full jitter. Which error bodies mean "retry" or "slow down" (S3 SlowDown,
 * RequestTimeout, ...) is for the store to say: its backend registers a
 * classifier (sio_fetch_set_classifier).
 *
 * Two kinds of work:
 *  - sio_fetch_perform(): one request whose (small, bounded) body is
 *    collected in memory; the caller's thread blocks until it is done.
 *    Listing pages, HEAD, STS, instance metadata.
 *  - sio_fetch_open(): an object streamed into bounded buffers as a
 *    sio_stream. The first part is a ranged GET that tells the size and
 *    ETag; later parts of part_size bytes are fetched in parallel (at most
 *    parts_per_stream at once) and handed to the reader in order. A server
 *    that ignores Range is read as one body through a part_size buffer,
 *    the transfer paused (CURL_WRITEFUNC_PAUSE) while the buffer is full.
 *    A body cut mid-way resumes with Range from the byte reached and
 *    If-Match on the ETag, so a changed object is an error, never a mix.
 *
 * Requests are described by a prepare callback called before every attempt
 * (on the engine thread for streams, on the engine thread for performs as
 * well), so each attempt is signed afresh (S3) with the current time and
 * credentials. It must not block on the network.
 *
 * Threading: all functions are thread-safe. A stream is read by one thread
 * at a time. Lock order: a stream's lock may be held while taking the
 * engine's lock, never the other way round; curl calls are made by the
 * engine thread only, without the engine lock held.
 *
 * Ownership: the engine must outlive every stream and outstanding perform;
 * sio_fetch_destroy() cancels what is left and joins the thread.
 *
 * Files: fetch.c (engine thread, scheduling, AIMD, retries), fetch_stream.c
 * (streams: ranged parts, resume), fetch_call.c (performs); shared
 * internals in fetch_int.h.
 */
#ifndef SHARDIO_FETCH_H
#define SHARDIO_FETCH_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "store/backend_ops.h"
#include "store/store_int.h"
#include "store/sigv4.h"

typedef struct sio_fetch sio_fetch;

/* The engine's settings, their defaults and limits (configuration beyond
 * them is SIO_ERR_INVALID) are sio_fetch_config in shardio.h. */
/* Largest response body sio_fetch_perform() keeps (a listing page is
 * bounded by SIO_S3XML_DOC_MAX; everything else is far smaller). */
#define SIO_FETCH_BODY_MAX (64u * 1024u * 1024u)
/* Error bodies (S3 <Error> documents) beyond this are cut: they only feed
 * the error message. */
#define SIO_FETCH_ERRBODY_MAX (64u * 1024u)
/* Longest ETag kept (S3 ETags are 34-45 bytes with quotes). */
#define SIO_FETCH_ETAG_MAX 128u
/* Longest Last-Modified kept (an HTTP date is 29 bytes). */
#define SIO_FETCH_LASTMOD_MAX 30u

/* The validator of an answer (sio_objinfo.validator): the ETag, else "lm:"
 * and the Last-Modified date, else "". */
void sio_fetch_validator(const char *etag, const char *last_modified,
                         char *out, size_t cap);

/* What an engine is made of: its settings and what its io gives it. */
typedef struct sio_fetch_setup {
    sio_fetch_config fetch;      /* the settings (sio_io_config.fetch);
                                    ca_file copied */
    sio_logger log;              /* copied */
    int allow_link_local;        /* see sio_io_config */
    struct sio_storestats *stats; /* counters and latencies go here (must
                                     outlive the engine); NULL: the
                                     engine's own */
} sio_fetch_setup;

/* Start an engine and its thread. On SIO_OK *out is owned by the caller. */
sio_code sio_fetch_create(const sio_fetch_setup *setup, sio_fetch **out,
                          sio_error *err);
/* Cancel what is left, join the thread, free. NULL is fine. */
void sio_fetch_destroy(sio_fetch *f);
/* Snapshot of the counters; thread-safe. */
void sio_fetch_get_stats(const sio_fetch *f, sio_io_stats *st);

/* What a store's error body says about an answer (its reading by the
 * backend that registered the classifier). */
typedef struct sio_fetch_verdict {
    int retry;         /* transient: try again (with backoff) */
    int throttle;      /* the store asks to slow down: lower the
                          concurrency (AIMD) too */
    char code[128];    /* the store's error code, "" when none; named in
                          retry reasons and errors */
    char message[256]; /* its message, named in errors */
} sio_fetch_verdict;

/* Read an error answer's body (len > 0 bytes, NUL-terminated). v comes in
 * with what the status alone says (429/503 throttle and retry; 500, 502,
 * 504 retry); the function may set more and fills code and message. Runs
 * on the engine thread; must not block. */
typedef void (*sio_fetch_classify_fn)(long status, const char *body,
                                      size_t len, sio_fetch_verdict *v);
/* Register the classifier of error bodies (one per engine: the last call
 * wins; NULL: the status alone decides). The s3 backend registers its
 * reading of S3 <Error> documents when an io is created. */
void sio_fetch_set_classifier(sio_fetch *f, sio_fetch_classify_fn fn);

/* What an attempt must carry besides the caller's own headers. */
typedef struct sio_fetch_attempt {
    const char *method;             /* "GET", "HEAD", "PUT", "POST" */
    const sio_sigv4_pair *headers;  /* Range, If-Match as the engine wants
                                       them sent (and an S3 signer signs
                                       them); valid during the call */
    size_t nheaders;
    unsigned attempt;               /* 0 for the first try */
} sio_fetch_attempt;

/*
 * Build one attempt: *url gets the full request URL (malloc'd, the engine
 * frees it) and *headers the header lines to send (curl_slist_append; the
 * engine appends a's headers itself and frees the list). Must not block on
 * the network. A non-OK return fails the request for good with err's text.
 */
typedef sio_code (*sio_fetch_prepare_fn)(void *ctx,
                                         const sio_fetch_attempt *a,
                                         char **url,
                                         struct curl_slist **headers,
                                         sio_error *err);

/* ------------------------------------------------------------------ */
/* One request with a collected body                                   */

typedef struct sio_fetch_request {
    const char *method;          /* GET, HEAD, PUT or POST */
    const char *display_url;     /* names the request in errors; must not
                                    carry secrets */
    sio_fetch_prepare_fn prepare;
    void *ctx;                   /* borrowed for the call */
    const void *body;            /* request body (PUT/POST), copied */
    size_t body_len;
    size_t body_max;             /* response body limit (0: 1 MiB; at most
                                    SIO_FETCH_BODY_MAX) */
    int max_retries;             /* < 0: the engine's setting */
    uint32_t timeout_ms;         /* whole attempt (0: no limit but stalls) */
    uint32_t connect_timeout_ms; /* 0: the engine's setting */
    int trusted_endpoint;        /* a credential endpoint: may be
                                    link-local (IMDS); counted as
                                    SIO_STORE_CREDENTIALS */
    sio_store_backend backend;   /* metrics label (0: http) */
    int list;                    /* a listing page (metrics: op list) */
} sio_fetch_request;

/* Is the socket address link-local or an instance-metadata address
 * (169.254.0.0/16, 100.100.100.200, fe80::/10, fd00:ec2::254, and the IPv4
 * ones IPv4-mapped, IPv4-compatible or behind the NAT64 prefix)? */
int sio_addr_is_link_local(const struct sockaddr *sa);

typedef struct sio_fetch_response {
    long status;                 /* last HTTP status (0: none) */
    char *body;                  /* malloc'd, NUL-terminated; on success
                                    the body, else the error body (cut) */
    size_t body_len;
    uint64_t content_length;     /* Content-Length, UINT64_MAX unknown */
    char etag[SIO_FETCH_ETAG_MAX];
    char last_modified[SIO_FETCH_LASTMOD_MAX]; /* "" when absent */
} sio_fetch_response;

/*
 * Run req to completion (retries included) and block until it ends.
 * SIO_OK when the final answer is 2xx (resp has its body). Otherwise:
 * SIO_ERR_NOTFOUND (404), SIO_ERR_AUTH (401, 403), SIO_ERR_IO (other
 * answers, retries exhausted), SIO_ERR_LIMIT (body past body_max),
 * SIO_ERR_CANCELED (engine shut down); err names the URL, status, S3 error
 * code and message, and resp still tells the status. Free resp with
 * sio_fetch_response_free() in every case.
 */
sio_code sio_fetch_perform(sio_fetch *f, const sio_fetch_request *req,
                           sio_fetch_response *resp, sio_error *err);
void sio_fetch_response_free(sio_fetch_response *resp);

/* ------------------------------------------------------------------ */
/* Streams                                                             */

typedef struct sio_fetch_target {
    const char *display_url;  /* copied; names the object in errors */
    sio_fetch_prepare_fn prepare;
    void *ctx;                /* owned by the stream from the call on */
    void (*ctx_free)(void *ctx); /* frees ctx when the stream goes (may be
                                    NULL) */
    sio_store_backend backend;   /* metrics label */
} sio_fetch_target;

/*
 * Open the object from byte `offset` as a sio_stream (backend_ops.h). Returns
 * at once; the first part is requested in the background and errors
 * (404, 403, exhausted retries) surface from read(). ctx is owned by the
 * stream even when this fails.
 */
sio_code sio_fetch_open(sio_fetch *f, const sio_fetch_target *t,
                        uint64_t offset, sio_stream **out, sio_error *err);
/* As sio_fetch_open, for bytes [offset, end) only: no request asks for a
 * byte at or past end (a server that ignores Range still sends the whole
 * object; the stream then ends where the body does). */
sio_code sio_fetch_open_range(sio_fetch *f, const sio_fetch_target *t,
                              uint64_t offset, uint64_t end,
                              sio_stream **out, sio_error *err);

/* The engine of an io (created with it); NULL when io is NULL. Defined in
 * io.c. */
sio_fetch *sio_io_fetch(sio_io *io);
/* The configuration the io was created with. Defined in io.c. */
const sio_io_config *sio_io_get_config(const sio_io *io);

#endif /* SHARDIO_FETCH_H */
