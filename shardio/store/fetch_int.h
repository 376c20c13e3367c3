/*
 * fetch_int.h — the fetch engine's shared internals (store/fetch*.c only).
 *
 * The engine is three files around one transfer record (xfer):
 *  - fetch.c: the engine thread, its lists and queues, scheduling, AIMD,
 *    retries with backoff, the curl callbacks every transfer shares, the
 *    engine's life;
 *  - fetch_stream.c: ranged parts of a stream, their buffers, resume, the
 *    sio_stream a reader drains (sio_fetch_open*);
 *  - fetch_call.c: one-shot requests with a collected body
 *    (sio_fetch_perform).
 * What differs between the two kinds of transfer is one table of
 * operations (xfer_ops) each kind's file defines; the engine never asks
 * which kind a transfer is.
 *
 * Threading and lock order as in fetch.c: the engine thread owns the
 * lists and every curl handle; a stream's lock may be held while taking
 * the engine lock, never the other way round.
 */
#ifndef SHARDIO_FETCH_INT_H
#define SHARDIO_FETCH_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "store/fetch.h"
#include "store/storestats.h"

/* libcurl's receive buffer: larger reads mean fewer callbacks and lock
 * round trips per byte. It hands over at most this much at once, so a
 * part's buffer that must take a whole chunk (a probe answered with the
 * whole object) is at least this large. */
#define SIO_FETCH_RECV_BUFFER (256u * 1024u)

/* Largest body a perform keeps when the request names no limit. */
#define FETCH_DEF_BODY_MAX (1u << 20)
/* Longest Content-Range value we parse. */
#define FETCH_CRANGE_MAX 128u

enum { L_NONE, L_PENDING, L_WAIT, L_ACTIVE };

typedef struct xfer xfer;
typedef struct fstream fstream;
typedef struct call call;

typedef struct xlist {
    xfer *head, *tail;
    size_t n;
} xlist;

/* The headers one attempt adds besides the caller's (Range, If-Match),
 * and the storage their values live in during the attempt's setup. */
typedef struct xfer_hdrs {
    sio_sigv4_pair v[2];
    size_t n;
    char range[64];
    char ifmatch[SIO_FETCH_ETAG_MAX + 64];
} xfer_hdrs;

/*
 * What one kind of transfer does at each step; the engine calls these and
 * nothing else kind-specific. Engine thread, inside or around curl.
 */
typedef struct xfer_ops {
    /* Before each attempt: reset what the last attempt left in the owner
     * and add the headers this attempt asks with. */
    void (*begin)(xfer *x, xfer_hdrs *h);
    /* The kind's curl options: timeouts, method, request body. */
    void (*setopt)(const sio_fetch *f, xfer *x);
    /* First look at an answer once its headers are in: the status, and
     * whatever the kind checks (takes the owner's lock itself). */
    void (*judge)(xfer *x);
    /* Body bytes of this attempt (the curl write callback). */
    size_t (*write)(xfer *x, const char *ptr, size_t n);
    /* A transport error ended the attempt: set x->early_complete when
     * every byte wanted had arrived anyway. NULL: it never had. */
    void (*settle)(xfer *x);
    /* A 2xx attempt ended: nonzero, with why, when its body came short
     * (the attempt is retried). NULL: a body is never short. */
    int (*short_body)(xfer *x, char *why, size_t len);
    /* Tell the owner how the transfer ended; the engine frees x next. */
    void (*finish)(xfer *x, sio_code rc, const char *msg);
} xfer_ops;

extern const xfer_ops sio_fetch_part_ops; /* fetch_stream.c */
extern const xfer_ops sio_fetch_call_ops; /* fetch_call.c */

struct xfer {
    sio_fetch *f;
    const xfer_ops *ops;
    xfer *prev, *next; /* links in one engine list */
    int list;          /* L_* */
    xfer *qnext;       /* incoming queue link */
    xfer *unext;       /* unpause queue link */
    int unpause_queued;
    /* fixed at submission by the owner */
    const char *method;      /* borrowed from the owner */
    const char *display_url; /* borrowed from the owner */
    sio_fetch_prepare_fn prepare;
    void *pctx;
    unsigned max_retries;
    int trusted;               /* may reach link-local addresses */
    sio_store_backend backend; /* metrics labels */
    sio_store_op op;
    CURL *h;
    struct curl_slist *hdrs;
    char *url;
    unsigned attempt;
    uint64_t due_ms;
    char last_reason[256];
    /* this attempt's answer */
    long status;
    int headers_done;
    int early_complete; /* every byte wanted came (a 200 that ignored
                           Range, a reset after the last byte) */
    char etag[SIO_FETCH_ETAG_MAX];
    char lastmod[SIO_FETCH_LASTMOD_MAX];
    char crange[FETCH_CRANGE_MAX];
    uint64_t clen;
    char *errbody;
    size_t errlen;
    uint64_t skip;       /* body bytes to drop (Range ignored) */
    uint64_t want_start; /* first byte asked (parts) */
    sio_code fatal;      /* set by a callback: fail for good */
    char fatal_msg[384];
    /* owner: a stream's part, or a perform's call */
    fstream *s;
    unsigned pi; /* index of the part in s->parts */
    call *c;
};

typedef struct part {
    uint64_t start;
    uint64_t len; /* UINT64_MAX: unknown (probe before its answer, or the
                     whole rest of the object in single mode) */
    unsigned char *buf; /* a sample-pool block of bcap bytes (warm memory
                           reused from part to part) */
    size_t cap, bcap, rpos, wpos;
    uint64_t got; /* body bytes stored into buf over all attempts */
    int done;
    int paused;
    size_t need; /* bytes the paused chunk needs */
    xfer *x;     /* NULL once the engine let go of the transfer */
} part;

struct fstream {
    sio_stream base;
    sio_fetch *f;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *display_url;
    sio_fetch_prepare_fn prepare;
    void *ctx;
    void (*ctx_free)(void *);
    sio_store_backend backend;
    uint64_t offset;
    uint64_t total; /* object size, UINT64_MAX unknown */
    uint64_t end_limit; /* read nothing at or past this (UINT64_MAX) */
    uint64_t next_len;  /* size of the next ranged part: parts start at
                           FETCH_FIRST_PART (part_size for a whole-object
                           read) and double up to part_size, so a short
                           read fetches little */
    int probed;     /* the first answer told size and Range support */
    int single;     /* Range ignored: one part, the whole body */
    char etag[SIO_FETCH_ETAG_MAX];
    char lastmod[SIO_FETCH_LASTMOD_MAX]; /* of the first answer */
    part parts[SIO_FETCH_PARTS_MAX];
    unsigned head, nparts;
    uint64_t next_start;
    unsigned live; /* transfers the engine holds */
    fstream *cnext;
    int cancel_queued;
    sio_code rc;
    char err[512];
};

struct call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    const sio_fetch_request *req;
    char *body;
    size_t len, cap, max;
    sio_code rc;
    sio_error err;
    long status;
    uint64_t clen;
    char etag[SIO_FETCH_ETAG_MAX];
    char lastmod[SIO_FETCH_LASTMOD_MAX];
};

struct sio_fetch {
    sio_fetch_config cfg; /* defaults filled in; cfg.ca_file is ca_file */
    sio_logger log;
    int allow_link_local;
    char *ca_file;
    CURLM *multi;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu; /* guards the three queues, stop and classify */
    xfer *in_head, *in_tail;
    xfer *unpause;
    fstream *cancel;
    int stop;
    sio_fetch_classify_fn classify; /* a store's reading of error bodies */
    /* engine thread only */
    xlist pending, wait, active;
    double limit;
    uint64_t last_decrease_ms;
    uint64_t rng;
    /* counters: per backend in *st (the io's, or own); these are the
     * engine's */
    sio_storestats own, *st;
    _Atomic uint64_t lat_sum, lat_count;
    _Atomic uint32_t n_limit;
    /* The engine's threads ("lanes"): the engine handed out is lane 0
     * and holds them all; every lane is a sio_fetch of its own. */
    sio_fetch **lanes;
    size_t nlanes;
    _Atomic size_t next_lane;
};

/* The lane a new stream or request goes to (f itself when it has none). */
sio_fetch *sio_fetch_lane(sio_fetch *f);

/* The counters of x's backend. */
#define BSTAT(f, x) (&(f)->st->b[(x)->backend])

static inline int sio_fetch_is_2xx(long s)
{
    return s >= 200 && s < 300;
}

/* A new transfer of the given kind (owner fields left to the caller). */
xfer *sio_fetch_xfer_new(sio_fetch *f, const xfer_ops *ops);
/* Hand x to the engine thread (any thread); x is the engine's from now. */
void sio_fetch_submit(sio_fetch *f, xfer *x);
/* Fail the attempt for good with rc and a message (first one wins). */
void sio_fetch_set_fatal(xfer *x, sio_code rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Keep (up to SIO_FETCH_ERRBODY_MAX of) an error answer's body; returns
 * n, so the transfer goes on. */
size_t sio_fetch_keep_errbody(xfer *x, const char *ptr, size_t n);
/* The answer's status, once (sets headers_done). */
void sio_fetch_read_status(xfer *x);

#endif /* SHARDIO_FETCH_INT_H */
