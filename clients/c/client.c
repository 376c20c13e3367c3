/*
 * client.c — libshardcast_client: one consumer's stream over HTTP
 * (contract in include/shardcast_client.h).
 *
 * Transport: one libcurl easy handle driven by a private multi handle, so
 * that the stream pulls bytes only when its reader asks for the next
 * sample (curl_multi_poll waits, nothing spins). The write callback appends
 * to the receive buffer `rx`; the parsers (sio_framer for frames,
 * sio_tarr_parse for tar; both in the wire module, shardio/wire/) run
 * only on whole units in rx (a frame, a
 * sample's members), so the views handed out point into rx and each byte
 * is copied once, from curl's buffer into rx. The buffer holds at most
 * max(what the current unit needs, RX_READAHEAD) plus one curl chunk; past
 * that the transfer is paused (backpressure on the server), and it is
 * compacted only when its consumed head is at least as long as its live
 * tail, so compaction costs O(1) per byte.
 *
 * Resume: the stream counts the position reached. When a connection ends
 * without the server's END (reset, cut, idle timeout, or an ERROR trailer
 * the server marked retryable, e.g. a drain before a restart), it
 * reconnects with start = that position, with a doubling backoff that
 * honours the server's retry advice (the trailer's retry_after_ms, a
 * Retry-After header on a 5xx), within a budget per failure streak:
 * max_reconnects attempts and retry_budget_ms of time, both counted from
 * the last sample handed out. Samples before the position are never
 * handed out twice.
 *
 * Threading: a stream is used by one thread at a time; streams share
 * nothing. Ownership: the stream owns its copies of the options, the curl
 * handles, rx and the decoder; samples are views valid until the next call.
 */
#include "shardcast_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "replicas.h"
#include "shardio_wire.h"

/* Bytes the stream may hold beyond what the unit being parsed needs: a
 * few frames' worth of read-ahead keeps the connection busy while the
 * reader works. */
#define RX_READAHEAD (1u << 20)
/* Slack for headers around the largest sample: frame/field heads, tar
 * headers, pax records, padding. */
#define RX_SLACK (4u << 20)
/* The longest backoff between reconnects (the server's retry advice may
 * ask for more, up to SIO_RETRY_AFTER_MAX_MS). */
#define RECONNECT_DELAY_MAX_MS 5000u
/* curl's receive chunk (CURLOPT_BUFFERSIZE); at most CURL_MAX_READ_SIZE. */
#define CURL_CHUNK (256L * 1024L)
/* Poll slice while waiting for bytes; the idle timeout is checked
 * between slices. */
#define POLL_SLICE_MS 200

const char *scc_strerror(scc_code code)
{
    switch (code) {
    case SCC_OK: return "no error";
    case SCC_ERR_NOMEM: return "out of memory";
    case SCC_ERR_INVALID: return "invalid argument";
    case SCC_ERR_CONNECT: return "cannot connect to the server";
    case SCC_ERR_HTTP: return "HTTP error";
    case SCC_ERR_NOTFOUND: return "not found (unknown job or path)";
    case SCC_ERR_AUTH: return "not authorised";
    case SCC_ERR_SERVER: return "the server ended the stream with an error";
    case SCC_ERR_CUT: return "the stream was cut";
    case SCC_ERR_PROTOCOL: return "malformed stream";
    case SCC_ERR_TIMEOUT: return "timed out";
    case SCC_ERR_LIMIT: return "limit exceeded";
    case SCC_ERR_CONFIG:
        return "the replica set is set up wrongly";
    }
    return "unknown error";
}

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc; /* written once under global_once */

static void global_init_once(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

scc_code scc_global_init(void)
{
    pthread_once(&global_once, global_init_once);
    return global_rc == CURLE_OK ? SCC_OK : SCC_ERR_NOMEM;
}

void scc_options_init(scc_options *o)
{
    memset(o, 0, sizeof *o);
    o->format = SCC_FORMAT_FRAMES;
    o->connect_timeout_ms = 10000;
    o->idle_timeout_ms = 60000;
    o->header_timeout_ms = SCC_HEADER_TIMEOUT_DEFAULT_MS;
    o->heartbeat_timeout_ms = SCC_HEARTBEAT_TIMEOUT_DEFAULT_MS;
    o->max_reconnects = SCC_RECONNECTS_DEFAULT;
    o->reconnect_delay_ms = 200;
    o->retry_budget_ms = SCC_RETRY_BUDGET_DEFAULT_MS;
    o->max_sample_bytes = SCC_SAMPLE_MAX_DEFAULT;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------ */
/* The stream                                                           */

struct scc_stream {
    scc_options o;        /* copy; strings below */
    char *url_base;       /* the request URL up to where start= goes
                             (with a replica set: from the path on; the
                             root is roots[at]) */
    char *url;            /* current request URL */
    char *auth;           /* "Authorization: Bearer ..." or NULL */
    struct curl_slist *headers;

    CURLM *multi;
    CURL *easy;
    int done;             /* the transfer finished (any outcome) */
    CURLcode result;
    int head_done;        /* response headers complete */
    long status;
    uint32_t hdr_retry_after_ms; /* Retry-After of this response, or 0 */
    char ctype[128];
    scc_format fmt;

    unsigned char *rx;
    size_t rpos, rlen, rcap, rx_max;
    size_t want;          /* bytes from rpos the current unit needs */
    int paused;
    char ebody[SCC_ERROR_BODY_MAX + 1]; /* body of an HTTP error */
    size_t elen;
    uint64_t last_byte_ms;

    sio_framer *framer;
    uint32_t payload_max; /* the decoder's frame limit */
    int partition;        /* sio_partition from HEADER, -1 before */
    int magic_done;
    uint64_t resp_start;  /* start= of the current response */
    uint64_t next_pos;    /* position of the next sample */
    scc_sample cur;
    scc_field *fields;    /* SIO_FIELDS_MAX_DEFAULT entries */
    sio_frame_field *wfields; /* the decoders' views of them, as many */
    sio_tarr_result *tar;

    uint32_t reconnects;
    uint32_t streak;          /* reconnects since the last sample */
    uint64_t streak_start_ms; /* when that streak's first failure came */
    int retryable;            /* the last failure asks to come back ... */
    uint32_t retry_after_ms;  /* ... no sooner than this */
    uint64_t bytes;
    int finished;         /* clean end reached */
    scc_code failed;      /* sticky error once the stream is over */
    int have_summary;
    scc_summary summary;
    char *lost_json;      /* the summary's "skipped" (summary.lost_json) */

    /* The replica set (nrep == 0: a single server or a URL). */
    char **roots;         /* base URLs, no trailing '/' */
    uint32_t nrep;
    uint32_t home, lrank, lworld; /* part J, local rank and world */
    uint32_t cand;        /* index in the candidate list of the replica
                             the current (or next) request goes to */
    uint32_t at;          /* that replica */
    int serving;          /* the replica that answered the last request
                             with 200, -1 before one did */
    char fp[SCC_FINGERPRINT_MAX + 1]; /* the fingerprint streams must
                                         carry ("" until known) */
    uint32_t failovers;
    unsigned char *dead;  /* per replica: found hung or unreachable by
                             this stream (not asked again while another
                             candidate is left) */
    uint32_t silence_ms;  /* no byte for this long: broken (idle_timeout_ms,
                             or the heartbeat bound once HEADER announced
                             heartbeats) */
    uint32_t heartbeat_ms; /* what this response's HEADER announced */
    uint64_t fail_ms;     /* when the serving replica failed */
    char fail_reason[512];
    int ident_checked;    /* this response's identity was checked */
    int has_ident;
    scc_ident ident;
    char errmsg[SCC_REPLICAS_MSG_MAX];
};

static scc_code seterr(scc_stream *s, scc_code rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static scc_code seterr(scc_stream *s, scc_code rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
    va_end(ap);
    return rc;
}

/* Copy src into d (n bytes), cut short when longer. */
static void scopy(char *d, size_t n, const char *src)
{
    size_t l = strlen(src);
    if (l >= n)
        l = n - 1;
    memcpy(d, src, l);
    d[l] = '\0';
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
    scc_stream *s = ud;
    size_t len = size * n;
    static const char ct[] = "content-type:";
    static const char ra[] = "retry-after:";

    s->last_byte_ms = sio_now_ms();
    if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        /* A new response (after a 1xx): forget the previous one. */
        s->ctype[0] = '\0';
        s->hdr_retry_after_ms = 0;
        s->head_done = 0;
    } else if (len > sizeof ra - 1 &&
               strncasecmp(buf, ra, sizeof ra - 1) == 0) {
        /* Delay-seconds only; an HTTP-date is ignored (the backoff
         * applies). Bounded like the trailer's advice. */
        unsigned long long v = 0;
        size_t i = sizeof ra - 1;
        while (i < len && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        while (i < len && buf[i] >= '0' && buf[i] <= '9' &&
               v <= SIO_RETRY_AFTER_MAX_MS)
            v = v * 10 + (unsigned)(buf[i++] - '0');
        v *= 1000u;
        s->hdr_retry_after_ms = v > SIO_RETRY_AFTER_MAX_MS
                                    ? SIO_RETRY_AFTER_MAX_MS
                                    : (uint32_t)v;
    } else if (len > sizeof ct - 1 && strncasecmp(buf, ct, sizeof ct - 1) == 0) {
        size_t i = sizeof ct - 1, j = 0;
        while (i < len && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        while (i < len && buf[i] != '\r' && buf[i] != '\n' && buf[i] != ';' &&
               j + 1 < sizeof s->ctype)
            s->ctype[j++] = buf[i++];
        s->ctype[j] = '\0';
    } else if (len <= 2 && (buf[0] == '\r' || buf[0] == '\n')) {
        long st = 0;
        curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &st);
        if (st >= 200) {
            s->status = st;
            s->head_done = 1;
        }
    }
    return len;
}

static void compact(scc_stream *s)
{
    if (s->rpos == 0)
        return;
    memmove(s->rx, s->rx + s->rpos, s->rlen - s->rpos);
    s->rlen -= s->rpos;
    s->rpos = 0;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud)
{
    scc_stream *s = ud;
    size_t len = size * n;

    s->last_byte_ms = sio_now_ms();
    if (s->status != 200) {
        size_t k = len;
        if (k > SCC_ERROR_BODY_MAX - s->elen)
            k = SCC_ERROR_BODY_MAX - s->elen;
        memcpy(s->ebody + s->elen, buf, k);
        s->elen += k;
        s->ebody[s->elen] = '\0';
        return len;
    }
    size_t buffered = s->rlen - s->rpos;
    size_t enough = s->want > RX_READAHEAD ? s->want : RX_READAHEAD;
    if (buffered >= enough) {
        s->paused = 1;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (s->rlen + len > s->rcap) {
        /* No view is alive while curl runs (it only runs inside
         * scc_stream_next before the next unit is parsed), so the buffer
         * may move. */
        compact(s);
    }
    if (s->rlen + len > s->rcap) {
        size_t ncap = s->rcap ? s->rcap * 2 : 64u * 1024u;
        while (ncap < s->rlen + len)
            ncap *= 2;
        if (ncap > s->rx_max)
            ncap = s->rx_max;
        if (ncap < s->rlen + len) {
            /* Cannot happen while want <= the sample limit plus slack
             * (rx_max has room for it, the read-ahead and one chunk);
             * kept as a guard: wait instead of growing. */
            s->paused = 1;
            return CURL_WRITEFUNC_PAUSE;
        }
        unsigned char *nb = realloc(s->rx, ncap);
        if (!nb)
            return 0; /* curl fails the transfer: CURLE_WRITE_ERROR */
        s->rx = nb;
        s->rcap = ncap;
    }
    memcpy(s->rx + s->rlen, buf, len);
    s->rlen += len;
    s->bytes += len;
    return len;
}

/* Drop the current connection (if any). */
static void drop_transfer(scc_stream *s)
{
    if (s->easy) {
        curl_multi_remove_handle(s->multi, s->easy);
        curl_easy_cleanup(s->easy);
        s->easy = NULL;
    }
    s->done = 0;
    s->head_done = 0;
    s->paused = 0;
    s->status = 0;
    s->hdr_retry_after_ms = 0;
    s->elen = 0;
    s->ebody[0] = '\0';
    s->ctype[0] = '\0';
}

/* Run curl once; wait up to POLL_SLICE_MS for activity when `wait`. */
static void pump(scc_stream *s, int wait)
{
    int running = 0, left;
    CURLMsg *m;

    if (s->paused && !s->done) {
        s->paused = 0;
        curl_easy_pause(s->easy, CURLPAUSE_CONT);
    }
    curl_multi_perform(s->multi, &running);
    while ((m = curl_multi_info_read(s->multi, &left)) != NULL)
        if (m->msg == CURLMSG_DONE && m->easy_handle == s->easy) {
            s->done = 1;
            s->result = m->data.result;
        }
    if (!s->done && wait && !s->paused)
        curl_multi_poll(s->multi, NULL, 0, POLL_SLICE_MS, NULL);
}

static scc_code map_curl_error(scc_stream *s, CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return seterr(s, SCC_ERR_CONNECT, "cannot connect (%s): %s",
                      s->url, curl_easy_strerror(c));
    case CURLE_OPERATION_TIMEDOUT:
        return seterr(s, SCC_ERR_TIMEOUT, "connecting timed out: %s",
                      curl_easy_strerror(c));
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return seterr(s, SCC_ERR_INVALID, "bad URL: %s",
                      curl_easy_strerror(c));
    default:
        return seterr(s, SCC_ERR_CUT, "connection failed: %s",
                      curl_easy_strerror(c));
    }
}

/* The server's one-line reason from an error body ("error: ...\n"). */
static const char *error_reason(scc_stream *s)
{
    char *r = s->ebody;
    if (strncmp(r, "error: ", 7) == 0)
        r += 7;
    size_t n = strlen(r);
    while (n && (r[n - 1] == '\n' || r[n - 1] == '\r' || r[n - 1] == ' '))
        r[--n] = '\0';
    return n ? r : "(no reason given)";
}

static scc_code map_status(long st, const char *reason, char *msg,
                           size_t msglen)
{
    scc_code rc = st == 404 ? SCC_ERR_NOTFOUND
                : (st == 401 || st == 403) ? SCC_ERR_AUTH
                : SCC_ERR_HTTP;
    snprintf(msg, msglen, "HTTP %ld: %s", st, reason);
    return rc;
}

/* Start one request at s->next_pos and wait for its response head. */
static scc_code request(scc_stream *s)
{
    scc_code rc = SCC_OK;
    sio_error err;
    const char *root = s->nrep ? s->roots[s->at] : "";
    size_t ulen = strlen(root) + strlen(s->url_base) + 32;

    drop_transfer(s);
    free(s->url);
    s->url = malloc(ulen);
    if (!s->url) {
        rc = seterr(s, SCC_ERR_NOMEM, "out of memory");
        goto out;
    }
    snprintf(s->url, ulen, "%s%sstart=%llu", root, s->url_base,
             (unsigned long long)s->next_pos);
    s->ident_checked = 0;
    s->has_ident = 0;
    s->rpos = s->rlen = 0;
    s->want = 0;
    s->magic_done = 0;
    s->resp_start = s->next_pos;
    sio_framer_destroy(s->framer);
    s->framer = NULL;
    sio_framer_limits lim = {0, 0, 0, 0};
    lim.payload_max = s->payload_max;
    if (sio_framer_create(&lim, &s->framer, &err) != SIO_OK) {
        rc = seterr(s, SCC_ERR_NOMEM, "out of memory");
        goto out;
    }

    s->easy = curl_easy_init();
    if (!s->easy) {
        rc = seterr(s, SCC_ERR_NOMEM, "out of memory (curl)");
        goto out;
    }
    curl_easy_setopt(s->easy, CURLOPT_URL, s->url);
    curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(s->easy, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)s->o.connect_timeout_ms);
    curl_easy_setopt(s->easy, CURLOPT_BUFFERSIZE, CURL_CHUNK);
    curl_easy_setopt(s->easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(s->easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(s->easy, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    if (s->headers)
        curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
    if (curl_multi_add_handle(s->multi, s->easy) != CURLM_OK) {
        rc = seterr(s, SCC_ERR_NOMEM, "out of memory (curl multi)");
        goto out;
    }
    s->last_byte_ms = sio_now_ms();
    s->silence_ms = s->o.idle_timeout_ms;
    s->heartbeat_ms = 0;
    /* The head: the connect and the wait for the answer, together within
     * header_timeout_ms (a stopped server accepts the connection). */
    uint64_t head_limit = s->o.header_timeout_ms;
    int by_idle = 0; /* the connect and idle timeouts bound it first */
    if (head_limit > (uint64_t)s->o.idle_timeout_ms + s->o.connect_timeout_ms) {
        head_limit = (uint64_t)s->o.idle_timeout_ms + s->o.connect_timeout_ms;
        by_idle = 1;
    }
    while (!s->head_done && !s->done) {
        pump(s, 1);
        if (!s->head_done && !s->done &&
            sio_now_ms() - s->last_byte_ms > head_limit) {
            if (by_idle)
                rc = seterr(s, SCC_ERR_TIMEOUT,
                            "no answer from %s within %u ms", s->url,
                            s->o.idle_timeout_ms);
            else
                rc = seterr(s, SCC_ERR_TIMEOUT,
                            "no answer from %s within %llu ms (header "
                            "timeout): the server or its host is hung or "
                            "unreachable",
                            s->url, (unsigned long long)head_limit);
            goto out;
        }
    }
    if (!s->head_done) {
        rc = map_curl_error(s, s->result);
        goto out;
    }
    if (s->status != 200) {
        /* Read the (bounded) error body for the server's reason. */
        uint64_t t0 = sio_now_ms();
        while (!s->done && sio_now_ms() - t0 < s->o.idle_timeout_ms)
            pump(s, 1);
        rc = map_status(s->status, error_reason(s), s->errmsg,
                        sizeof s->errmsg);
        goto out;
    }
    if (strcasecmp(s->ctype, SIO_FRAMES_CONTENT_TYPE) == 0) {
        s->fmt = SCC_FORMAT_FRAMES;
    } else if (strcasecmp(s->ctype, "application/x-tar") == 0) {
        s->fmt = SCC_FORMAT_TAR;
    } else {
        rc = seterr(s, SCC_ERR_PROTOCOL,
                    "unexpected Content-Type \"%s\" (not a shardcast stream)",
                    s->ctype);
        goto out;
    }
out:
    return rc;
}

/* Escape s into b (curl's percent-encoding), appending. */
static int append(char **b, size_t *len, size_t *cap, const char *txt)
{
    size_t n = strlen(txt);
    if (*len + n + 1 > SCC_URL_MAX)
        return -1;
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        char *nb = realloc(*b, nc);
        if (!nb)
            return -1;
        *b = nb;
        *cap = nc;
    }
    memcpy(*b + *len, txt, n + 1);
    *len += n;
    return 0;
}

static int append_esc(char **b, size_t *len, size_t *cap, const char *txt)
{
    char *e = curl_easy_escape(NULL, txt, 0);
    int r = e ? append(b, len, cap, e) : -1;
    curl_free(e);
    return r;
}

/* Build s->url_base: the request URL, ending in '?' or '&' where start=
 * is appended. */
static scc_code build_base(scc_stream *s, const scc_options *o)
{
    scc_code rc = SCC_OK;
    char *b = NULL, num[96];
    size_t len = 0, cap = 0;
    const char *fmt = o->format == SCC_FORMAT_TAR ? "tar" : "frames";
    int bad = 0;

    if (o->url) {
        const char *q = strchr(o->url, '?');
        size_t plen = q ? (size_t)(q - o->url) : strlen(o->url);
        int has_format = 0;
        if (plen + 1 > SCC_URL_MAX || strlen(o->url) > SCC_URL_MAX) {
            rc = seterr(s, SCC_ERR_INVALID, "URL too long");
            goto out;
        }
        b = malloc(plen + 2);
        if (!b) {
            rc = seterr(s, SCC_ERR_NOMEM, "out of memory");
            goto out;
        }
        memcpy(b, o->url, plen);
        b[plen] = '?';
        b[plen + 1] = '\0';
        len = plen + 1;
        cap = plen + 2;
        /* Keep every parameter but start= (set per request). */
        const char *p = q ? q + 1 : NULL;
        while (p && *p && !bad) {
            const char *e = strchr(p, '&');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (n && !(n >= 6 && strncmp(p, "start=", 6) == 0)) {
                char item[SCC_URL_MAX];
                if (n >= sizeof item) {
                    bad = 1;
                    break;
                }
                memcpy(item, p, n);
                item[n] = '\0';
                if (strncmp(item, "format=", 7) == 0)
                    has_format = 1;
                bad |= append(&b, &len, &cap, item);
                bad |= append(&b, &len, &cap, "&");
            }
            p = e ? e + 1 : NULL;
        }
        if (!has_format) {
            bad |= append(&b, &len, &cap, "format=");
            bad |= append(&b, &len, &cap, fmt);
            bad |= append(&b, &len, &cap, "&");
        }
    } else {
        if ((!s->nrep && !o->server) || !o->job || !*o->job ||
            o->world == 0 || o->rank >= o->world) {
            rc = seterr(s, SCC_ERR_INVALID,
                        "need a URL, or server, job and rank < world");
            goto out;
        }
        /* With a replica set, the root is the replica's (request()). */
        if (!s->nrep) {
            bad |= append(&b, &len, &cap, o->server);
            while (!bad && len > 0 && b[len - 1] == '/')
                b[--len] = '\0';
        }
        bad |= append(&b, &len, &cap, "/v1/jobs/");
        bad |= append_esc(&b, &len, &cap, o->job);
        snprintf(num, sizeof num,
                 "/epochs/%llu/stream?rank=%u&world=%u&format=%s&",
                 (unsigned long long)o->epoch,
                 s->nrep ? s->lrank : o->rank,
                 s->nrep ? s->lworld : o->world, fmt);
        bad |= append(&b, &len, &cap, num);
        if (s->nrep) {
            /* The part asked for: any replica serves it. */
            snprintf(num, sizeof num, "replica=%u&", s->home);
            bad |= append(&b, &len, &cap, num);
        }
        if (o->global_start) {
            snprintf(num, sizeof num, "global_start=%llu&",
                     (unsigned long long)o->global_start);
            bad |= append(&b, &len, &cap, num);
        }
        if (o->nfields) {
            bad |= append(&b, &len, &cap, "fields=");
            for (size_t i = 0; i < o->nfields && !bad; i++) {
                if (i)
                    bad |= append(&b, &len, &cap, ",");
                bad |= append_esc(&b, &len, &cap, o->fields[i]);
            }
            bad |= append(&b, &len, &cap, "&");
        }
    }
    if (bad) {
        rc = seterr(s, SCC_ERR_INVALID, "URL too long or out of memory");
        goto out;
    }
    s->url_base = b;
    b = NULL;
out:
    free(b);
    return rc;
}

/* start= of a URL, when it has one (the resume point of `cat URL`). */
static uint64_t url_start(const char *url)
{
    const char *q = url ? strchr(url, '?') : NULL;
    while (q) {
        q++;
        if (strncmp(q, "start=", 6) == 0)
            return strtoull(q + 6, NULL, 10);
        q = strchr(q, '&');
    }
    return 0;
}

/* A new connection answered 200: when it is another replica than the one
 * that served before, that is a failover (counted, and told). */
static void note_serving(scc_stream *s, uint32_t attempts)
{
    if (s->nrep && s->serving >= 0 && (uint32_t)s->serving != s->at) {
        s->failovers++;
        if (s->o.on_failover) {
            scc_failover f;
            f.part = s->home;
            f.from = (uint32_t)s->serving;
            f.to = s->at;
            f.from_url = s->roots[s->serving];
            f.to_url = s->roots[s->at];
            f.position = s->next_pos;
            f.attempts = attempts;
            f.stalled_ms = sio_now_ms() - s->fail_ms;
            f.reason = s->fail_reason;
            s->o.on_failover(s->o.on_failover_ud, &f);
        }
    }
    s->serving = (int)s->at;
}

/* The replica set of opts: checks, the route, the roots. */
static scc_code setup_replicas(scc_stream *s, const scc_options *o)
{
    if (o->url)
        return seterr(s, SCC_ERR_INVALID, "a stream URL and a replica set "
                      "exclude each other");
    if (!o->replicas || o->nreplicas > SCC_REPLICAS_MAX)
        return seterr(s, SCC_ERR_INVALID, "a replica set has 1..%u URLs",
                      SCC_REPLICAS_MAX);
    if (!o->job || !*o->job)
        return seterr(s, SCC_ERR_INVALID, "need a job");
    s->nrep = (uint32_t)o->nreplicas;
    if (scc_route(o->rank, o->world, s->nrep, &s->home, &s->lrank,
                  &s->lworld) != SCC_OK)
        return seterr(s, SCC_ERR_INVALID,
                      "consumer %u of world %u cannot be served by %u "
                      "replicas: need rank < world and world >= replicas "
                      "(every replica needs a consumer, or its part of the "
                      "epoch is never read)", o->rank, o->world, s->nrep);
    s->roots = calloc(s->nrep, sizeof *s->roots);
    s->dead = calloc(s->nrep, 1);
    if (!s->roots || !s->dead)
        return seterr(s, SCC_ERR_NOMEM, "out of memory");
    for (uint32_t k = 0; k < s->nrep; k++) {
        const char *r = o->replicas[k];
        size_t rl = r ? strlen(r) : 0;
        while (rl && r[rl - 1] == '/')
            rl--;
        if (rl == 0 || rl > SCC_URL_MAX)
            return seterr(s, SCC_ERR_INVALID,
                          "replica %u: empty or too long URL", k);
        if (!(s->roots[k] = malloc(rl + 1)))
            return seterr(s, SCC_ERR_NOMEM, "out of memory");
        memcpy(s->roots[k], r, rl);
        s->roots[k][rl] = '\0';
    }
    s->cand = 0;
    s->at = s->home;
    return SCC_OK;
}

/* Open with a replica set: the check (unless no_verify), then the home
 * replica, and the others once each when it cannot serve. */
static scc_code open_replicas(scc_stream *s, const scc_options *o)
{
    scc_code rc = SCC_OK;
    if (!o->no_verify) {
        if (o->fingerprint) {
            if (!scc_fingerprint_ok(o->fingerprint))
                return seterr(s, SCC_ERR_INVALID, "fingerprint: not 1..%u "
                              "lowercase hex digits", SCC_FINGERPRINT_MAX);
            snprintf(s->fp, sizeof s->fp, "%s", o->fingerprint);
        } else {
            rc = scc_replicas_verify(o, s->fp, s->errmsg, sizeof s->errmsg);
            if (rc != SCC_OK)
                return rc;
        }
    }
    s->serving = (int)s->home;
    for (uint32_t i = 0; i < s->nrep; i++) {
        s->cand = i;
        s->at = scc_candidate(s->home, s->lrank, s->nrep, i);
        rc = request(s);
        if (rc == SCC_OK) {
            note_serving(s, i + 1);
            return SCC_OK;
        }
        if (i == 0) {
            scopy(s->fail_reason, sizeof s->fail_reason, s->errmsg);
            s->fail_ms = sio_now_ms();
        }
        if (rc == SCC_ERR_CONNECT || rc == SCC_ERR_TIMEOUT)
            s->dead[s->at] = 1;
        /* Another replica may serve what this one cannot reach or has no
         * capacity for; not what it refuses. */
        if (!(rc == SCC_ERR_CONNECT || rc == SCC_ERR_TIMEOUT ||
              rc == SCC_ERR_CUT || (rc == SCC_ERR_HTTP && s->status >= 500)))
            return rc;
        if (s->nrep > 1 && i + 1 == s->nrep) {
            char last[sizeof s->fail_reason];
            scopy(last, sizeof last, s->errmsg);
            seterr(s, rc, "%s; no other replica could serve replica %u's "
                   "part either (the last: %s)", s->fail_reason, s->home,
                   last);
        }
    }
    return rc;
}

scc_code scc_stream_open(const scc_options *opts, scc_stream **out)
{
    scc_code rc = SCC_OK;
    scc_stream *s = NULL;

    *out = NULL;
    if (!opts || opts->nfields > SCC_FIELDS_MAX ||
        (opts->nfields && !opts->fields))
        return SCC_ERR_INVALID;
    for (size_t i = 0; i < opts->nfields; i++) {
        size_t n = opts->fields[i] ? strlen(opts->fields[i]) : 0;
        if (n == 0 || n > SCC_FIELD_NAME_MAX)
            return SCC_ERR_INVALID;
    }
    if (scc_global_init() != SCC_OK)
        return SCC_ERR_NOMEM;
    s = calloc(1, sizeof *s);
    if (!s)
        return SCC_ERR_NOMEM;
    *out = s;
    s->partition = -1;
    s->serving = -1;
    s->o = *opts;
    /* The caller's strings are used during open only (build_base, the
     * Authorization header, the replica set check); the copy must not
     * point at them. */
    s->o.url = s->o.server = s->o.job = s->o.token = NULL;
    s->o.fields = NULL;
    s->o.nfields = 0;
    s->o.replicas = NULL;
    s->o.nreplicas = 0;
    s->o.fingerprint = NULL;
    if (s->o.max_sample_bytes == 0)
        s->o.max_sample_bytes = SCC_SAMPLE_MAX_DEFAULT;
    if (s->o.max_sample_bytes > SIO_FRAME_PAYLOAD_MAX)
        s->o.max_sample_bytes = SIO_FRAME_PAYLOAD_MAX;
    if (s->o.connect_timeout_ms == 0)
        s->o.connect_timeout_ms = 10000;
    if (s->o.idle_timeout_ms == 0)
        s->o.idle_timeout_ms = 60000;
    if (s->o.header_timeout_ms == 0)
        s->o.header_timeout_ms = SCC_HEADER_TIMEOUT_DEFAULT_MS;
    if (s->o.heartbeat_timeout_ms == 0)
        s->o.heartbeat_timeout_ms = SCC_HEARTBEAT_TIMEOUT_DEFAULT_MS;
    s->rx_max = (size_t)s->o.max_sample_bytes + RX_SLACK + RX_READAHEAD +
                (size_t)CURL_CHUNK;
    s->payload_max = s->o.max_sample_bytes + RX_SLACK > SIO_FRAME_PAYLOAD_MAX
                         ? SIO_FRAME_PAYLOAD_MAX
                         : (uint32_t)(s->o.max_sample_bytes + RX_SLACK);
    if (opts->nreplicas) {
        rc = setup_replicas(s, opts);
        if (rc != SCC_OK)
            goto out;
    }
    rc = build_base(s, opts);
    if (rc != SCC_OK)
        goto out;
    s->next_pos = opts->url ? url_start(opts->url) : opts->start;
    if (opts->token && *opts->token) {
        size_t n = strlen(opts->token) + 32;
        s->auth = malloc(n);
        if (!s->auth) {
            rc = seterr(s, SCC_ERR_NOMEM, "out of memory");
            goto out;
        }
        snprintf(s->auth, n, "Authorization: Bearer %s", opts->token);
        s->headers = curl_slist_append(NULL, s->auth);
        if (!s->headers) {
            rc = seterr(s, SCC_ERR_NOMEM, "out of memory");
            goto out;
        }
    }
    s->fields = calloc(SIO_FIELDS_MAX_DEFAULT, sizeof *s->fields);
    s->wfields = calloc(SIO_FIELDS_MAX_DEFAULT, sizeof *s->wfields);
    s->tar = calloc(1, sizeof *s->tar);
    s->multi = curl_multi_init();
    if (!s->fields || !s->wfields || !s->tar || !s->multi) {
        rc = seterr(s, SCC_ERR_NOMEM, "out of memory");
        goto out;
    }
    rc = s->nrep ? open_replicas(s, opts) : request(s);
out:
    if (rc != SCC_OK) {
        s->failed = rc;
        if (!s->errmsg[0])
            seterr(s, rc, "%s", scc_strerror(rc));
    }
    return rc;
}

/* The pause before the next attempt of a streak: the doubling backoff
 * (doubled n times), or the server's advice when that is longer. */
static uint32_t retry_delay(const scc_stream *s, uint32_t advice_ms,
                            uint32_t n)
{
    uint32_t delay = s->o.reconnect_delay_ms;
    for (uint32_t i = 0; i < n && delay < RECONNECT_DELAY_MAX_MS; i++)
        delay *= 2;
    if (delay > RECONNECT_DELAY_MAX_MS)
        delay = RECONNECT_DELAY_MAX_MS;
    return advice_ms > delay ? advice_ms : delay;
}

/*
 * The connection ended without END (cut, stalled, or a retryable ERROR
 * trailer): reconnect and resume at the position reached, or give up once
 * the streak's budget (max_reconnects attempts, retry_budget_ms since the
 * streak's first failure) would be exceeded. `why` says what happened;
 * why_code is SCC_ERR_CUT, SCC_ERR_TIMEOUT or SCC_ERR_SERVER, and is the
 * code returned when the budget runs out.
 */
/* The next candidate after the current one that this stream has not
 * found hung or unreachable (all of them: simply the next, they may be
 * back). */
static void next_candidate(scc_stream *s)
{
    uint32_t c = (s->cand + 1) % s->nrep;
    for (uint32_t k = 1; k <= s->nrep; k++) {
        uint32_t x = (s->cand + k) % s->nrep;
        if (!s->dead[scc_candidate(s->home, s->lrank, s->nrep, x)]) {
            c = x;
            break;
        }
    }
    s->cand = c;
    s->at = scc_candidate(s->home, s->lrank, s->nrep, c);
}

static scc_code resume(scc_stream *s, scc_code why_code, const char *why)
{
    scc_code rc = why_code;
    char reason[sizeof s->errmsg];
    uint32_t advice = s->retryable ? s->retry_after_ms : 0;
    const char *spent = "attempts";

    snprintf(reason, sizeof reason, "%s", why);
    if (s->streak == 0) {
        s->streak_start_ms = sio_now_ms();
        s->fail_ms = s->streak_start_ms;
        scopy(s->fail_reason, sizeof s->fail_reason, why);
    }
    s->retryable = 0;
    s->retry_after_ms = 0;
    /* With a replica set, the first round through the other replicas goes
     * at once (the backoff and the advice are about the one that failed);
     * the backoff starts after it. */
    uint32_t fast = s->nrep > 1 ? s->nrep - 1 : 0;
    if (s->nrep > 1 && why_code == SCC_ERR_TIMEOUT)
        s->dead[s->at] = 1; /* hung: silent past its heartbeats */
    for (;;) {
        if (s->streak >= s->o.max_reconnects)
            break;
        uint32_t delay = s->streak < fast
                             ? 0
                             : retry_delay(s, advice, s->streak - fast);
        if (s->o.retry_budget_ms &&
            sio_now_ms() + delay - s->streak_start_ms > s->o.retry_budget_ms) {
            spent = "time";
            break;
        }
        drop_transfer(s);
        if (delay)
            sleep_ms(delay);
        s->streak++;
        s->reconnects++;
        if (s->nrep > 1) {
            /* The next candidate: round and round, home included, those
             * found hung or unreachable left out while others remain. */
            next_candidate(s);
        }
        rc = request(s);
        if (rc == SCC_OK) {
            note_serving(s, s->streak);
            return SCC_OK;
        }
        if (s->nrep > 1 && (rc == SCC_ERR_CONNECT || rc == SCC_ERR_TIMEOUT))
            s->dead[s->at] = 1;
        /* A server that is back but refuses the request (unknown job after
         * a restart, auth) will not change its mind: stop. Connection
         * failures and 5xx are worth another attempt. */
        if (rc == SCC_ERR_NOTFOUND || rc == SCC_ERR_AUTH ||
            rc == SCC_ERR_INVALID || rc == SCC_ERR_NOMEM ||
            rc == SCC_ERR_PROTOCOL || (rc == SCC_ERR_HTTP && s->status < 500))
            return rc;
        advice = s->hdr_retry_after_ms;
        snprintf(reason, sizeof reason, "%s", s->errmsg);
    }
    unsigned long long took =
        (unsigned long long)(sio_now_ms() - s->streak_start_ms);
    if (why_code == SCC_ERR_SERVER)
        return seterr(s, SCC_ERR_SERVER,
                      "%s; gave up at position %llu after %u reconnect(s) in "
                      "%llu ms (retry budget: %u attempts, %u ms; %s spent)",
                      reason, (unsigned long long)s->next_pos, s->streak,
                      took, s->o.max_reconnects, s->o.retry_budget_ms, spent);
    return seterr(s, why_code == SCC_ERR_TIMEOUT ? SCC_ERR_TIMEOUT
                                                   : SCC_ERR_CUT,
                  "stream cut at position %llu after %u reconnect(s) in "
                  "%llu ms (retry budget: %u attempts, %u ms; %s spent): %s",
                  (unsigned long long)s->next_pos, s->streak, took,
                  s->o.max_reconnects, s->o.retry_budget_ms, spent, reason);
}

/*
 * Make sure `need` bytes from rpos are buffered. SCC_OK when they are;
 * SCC_ERR_CUT/TIMEOUT (with errmsg) when the connection ended or stalled
 * first (the caller then resumes).
 */
static scc_code fill(scc_stream *s, size_t need)
{
    s->want = need;
    if (need > (size_t)s->o.max_sample_bytes + RX_SLACK)
        return seterr(s, SCC_ERR_LIMIT, "a unit of %zu bytes is above the "
                      "client's sample limit", need);
    while (s->rlen - s->rpos < need) {
        if (s->done) {
            if (s->result == CURLE_OK)
                return seterr(s, SCC_ERR_CUT, "the server closed the stream "
                              "without an end trailer");
            if (s->result == CURLE_WRITE_ERROR)
                return seterr(s, SCC_ERR_NOMEM, "out of memory for the "
                              "receive buffer");
            return seterr(s, SCC_ERR_CUT, "connection broken: %s",
                          curl_easy_strerror(s->result));
        }
        pump(s, 1);
        if (s->rlen - s->rpos < need && !s->done &&
            sio_now_ms() - s->last_byte_ms > s->silence_ms) {
            if (s->heartbeat_ms)
                return seterr(s, SCC_ERR_TIMEOUT,
                              "no byte and no heartbeat for %u ms (the "
                              "server sends one every %u ms): the server or "
                              "its host is hung", s->silence_ms,
                              s->heartbeat_ms);
            return seterr(s, SCC_ERR_TIMEOUT, "no data for %u ms",
                          s->silence_ms);
        }
    }
    return SCC_OK;
}

static scc_code map_sio(scc_stream *s, sio_code c)
{
    const char *m = sio_framer_errmsg(s->framer);
    if (c == SIO_ERR_LIMIT)
        return seterr(s, SCC_ERR_LIMIT, "%s", m);
    if (c == SIO_ERR_NOMEM)
        return seterr(s, SCC_ERR_NOMEM, "%s", m);
    return seterr(s, SCC_ERR_PROTOCOL, "%s", m);
}

/* The server's error trailer: final, or (retryable) a reason to resume
 * after the advised delay. */
static scc_code server_error(scc_stream *s, const char *reason, int retryable,
                             uint32_t retry_after_ms)
{
    s->retryable = retryable;
    s->retry_after_ms = retryable ? retry_after_ms : 0;
    if (retryable)
        return seterr(s, SCC_ERR_SERVER,
                      "server error: %s (retryable, retry after %u ms)",
                      reason, retry_after_ms);
    return seterr(s, SCC_ERR_SERVER, "server error: %s", reason);
}

/*
 * The identity a response states (id), or that it stated none (NULL):
 * with a replica set it must be the part asked for, of R replicas, carry
 * the set's fingerprint (the verified one, or under no_verify the first
 * one seen) and, when verified, come from the replica it is given as.
 */
static scc_code check_ident(scc_stream *s, const scc_ident *id)
{
    s->ident_checked = 1;
    s->has_ident = id != NULL;
    if (id)
        s->ident = *id;
    if (!s->nrep)
        return SCC_OK;
    const char *u = s->roots[s->at];
    if (!id) {
        if (s->o.no_verify)
            return SCC_OK;
        return seterr(s, SCC_ERR_CONFIG, "%s (replica %u of %u) sent its "
                      "stream without the replica set's identity (no "
                      "fingerprint): a shardcastd without the replica set "
                      "check? (no_verify / --no-verify skips the check)", u,
                      s->at, s->nrep);
    }
    if (id->replica != s->home || id->replicas != s->nrep)
        return seterr(s, SCC_ERR_CONFIG, "%s (given as replica %u of %u) "
                      "streams replica %u of %u's part of the epoch, but "
                      "replica %u of %u's was asked for", u, s->at, s->nrep,
                      id->replica, id->replicas, s->home, s->nrep);
    if (!s->o.no_verify && id->served_by != s->at)
        return seterr(s, SCC_ERR_CONFIG, "%s is given as replica %u of %u "
                      "but its stream says it is replica %u (served_by): "
                      "the replica set changed since it was checked", u,
                      s->at, s->nrep, id->served_by);
    if (!s->fp[0]) {
        snprintf(s->fp, sizeof s->fp, "%s", id->fingerprint);
        return SCC_OK;
    }
    if (strcmp(id->fingerprint, s->fp) != 0)
        return seterr(s, SCC_ERR_CONFIG, "%s (replica %u of %u) streams job "
                      "%s epoch %llu with fingerprint %s, but the replica "
                      "set's is %s: its order settings differ from the "
                      "others' (restarted with another configuration?)", u,
                      s->at, s->nrep, id->job,
                      (unsigned long long)id->epoch, id->fingerprint, s->fp);
    return SCC_OK;
}

/* The current sample's fields: the decoder's views, as the client's. */
static const scc_field *take_fields(scc_stream *s, const sio_frame_field *wf,
                                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s->fields[i].name = wf[i].name;
        s->fields[i].name_len = wf[i].name_len;
        s->fields[i].data = wf[i].data;
        s->fields[i].len = wf[i].len;
    }
    return s->fields;
}

/* (job, epoch) pairs whose losses this process told (FNV-1a 64 of the
 * job's name and the server, with the epoch): a warning once per epoch,
 * not once per stream. A full table tells again rather than never. */
#define TOLD_MAX 256u
static pthread_mutex_t told_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t told_key[TOLD_MAX];
static uint64_t told_epoch[TOLD_MAX];
static size_t told_n, told_next;

static uint64_t fnv64(uint64_t h, const char *p)
{
    for (; p && *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h;
}

/* 1 the first time (key, epoch) is asked. */
static int first_told(uint64_t key, uint64_t epoch)
{
    int first = 1;
    pthread_mutex_lock(&told_mu);
    for (size_t i = 0; i < told_n; i++)
        if (told_key[i] == key && told_epoch[i] == epoch)
            first = 0;
    if (first) {
        told_key[told_next] = key;
        told_epoch[told_next] = epoch;
        told_next = (told_next + 1) % TOLD_MAX;
        if (told_n < TOLD_MAX)
            told_n++;
    }
    pthread_mutex_unlock(&told_mu);
    return first;
}

/* The first names of a "skipped" object: "URL, URL; URL sample N" (at
 * most 5 of each). */
static void loss_names(json_t *sk, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    json_t *urls = json_object_get(sk, "shard_urls");
    json_t *refs = json_object_get(sk, "sample_refs");
    for (size_t i = 0; i < json_array_size(urls) && i < 5; i++) {
        const char *u = json_string_value(json_array_get(urls, i));
        if (u && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", u);
    }
    for (size_t i = 0; i < json_array_size(refs) && i < 5; i++) {
        json_t *r = json_array_get(refs, i);
        const char *u = json_string_value(json_object_get(r, "url"));
        json_t *k = json_object_get(r, "sample");
        if (u && json_is_integer(k) && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%s sample %" PRIu64,
                                  n ? (i ? ", " : "; ") : "", u,
                                  (uint64_t)json_integer_value(k));
    }
}

/* The END summary's "skipped": into the summary, and told once per
 * (job, epoch) and process. */
static void take_losses(scc_stream *s, const char *js, size_t len)
{
    json_error_t je;
    json_t *o = js && len ? json_loadb(js, len, 0, &je) : NULL;
    json_t *sk = json_object_get(o, "skipped");
    json_t *sh = json_object_get(sk, "shards");
    json_t *sa = json_object_get(sk, "samples");
    if (json_is_object(sk)) {
        s->summary.lost_shards = json_is_integer(sh) && json_integer_value(sh) > 0
                                     ? (uint64_t)json_integer_value(sh) : 0;
        s->summary.lost_samples = json_is_integer(sa) && json_integer_value(sa) > 0
                                      ? (uint64_t)json_integer_value(sa) : 0;
        s->summary.lost_partial = json_is_true(json_object_get(sk, "partial"));
        free(s->lost_json);
        s->lost_json = json_dumps(sk, JSON_COMPACT);
        s->summary.lost_json = s->lost_json;
    }
    /* the job: as given, or from a URL's path (".../jobs/J/epochs/...") */
    char jb[256] = "";
    const char *job = s->o.job;
    const char *at = s->url_base ? strstr(s->url_base, "/jobs/") : NULL;
    if (!job && at) {
        at += 6;
        size_t n = strcspn(at, "/?");
        if (n < sizeof jb) {
            memcpy(jb, at, n);
            jb[n] = '\0';
            job = jb;
        }
    }
    if (s->summary.lost_shards + s->summary.lost_samples > 0 &&
        first_told(fnv64(fnv64(0xcbf29ce484222325ull, job), s->url_base),
                   s->summary.epoch)) {
        char first[2048];
        loss_names(sk, first, sizeof first);
        scc_loss l = {job, s->summary.epoch, s->summary.lost_shards,
                      s->summary.lost_samples, s->summary.lost_partial, first,
                      s->lost_json ? s->lost_json : "{}"};
        if (s->o.on_loss)
            s->o.on_loss(s->o.on_loss_ud, &l);
        else
            fprintf(stderr, "shardcast: warning: epoch %" PRIu64 " of job %s "
                    "lost %" PRIu64 " shard(s) (skipped or cut short) and %"
                    PRIu64 " bad sample(s)%s%s%s\n", l.epoch,
                    l.job ? l.job : "?", l.shards, l.samples,
                    l.partial ? " (partial: the server did not know all yet)"
                              : "",
                    first[0] ? ": " : "", first);
    }
    json_decref(o);
}

/* The server's clean-end summary. */
static void take_summary(scc_stream *s, const sio_tarw_summary *sum,
                         const char *js, size_t len)
{
    s->summary.epoch = sum->epoch;
    s->summary.rank = sum->rank;
    s->summary.world = sum->world;
    s->summary.start = sum->start;
    s->summary.samples = sum->samples;
    s->summary.position = sum->position;
    take_losses(s, js, len);
    s->have_summary = 1;
    s->finished = 1;
}

/* One step of the frames parser: SCC_OK with *got set when a sample (or
 * the end) was produced. SCC_ERR_AGAIN-like: *got == 0 means go on. */
static scc_code step_frames(scc_stream *s, const scc_sample **out, int *got)
{
    scc_code rc = SCC_OK;
    size_t need;
    sio_frame_event ev;
    size_t used = 0;

    *got = 0;
    /* Feed whole frames only: the head first has to be in view to know
     * the frame's length, then the whole frame. */
    for (;;) {
        size_t avail = s->rlen - s->rpos;
        if (!s->magic_done) {
            need = SIO_FRAMES_MAGIC_LEN;
        } else {
            need = SIO_FRAME_HEAD_LEN;
            if (avail >= SIO_FRAME_HEAD_LEN) {
                const unsigned char *h = s->rx + s->rpos;
                uint32_t l = (uint32_t)h[4] | ((uint32_t)h[5] << 8) |
                             ((uint32_t)h[6] << 16) | ((uint32_t)h[7] << 24);
                /* A length above the decoder's limit is fed with its head
                 * alone, so that the decoder reports it. */
                if (l <= s->payload_max)
                    need += l;
            }
        }
        if (avail >= need)
            break;
        rc = fill(s, need);
        if (rc != SCC_OK)
            goto out;
    }
    sio_code c = sio_framer_feed(s->framer, s->rx + s->rpos, need, &used, &ev);
    s->rpos += used;
    if (c != SIO_OK) {
        rc = map_sio(s, c);
        goto out;
    }
    s->magic_done = 1;
    switch (ev.type) {
    case SIO_FRAMER_HEADER: {
        scc_ident id;
        memset(&id, 0, sizeof id);
        snprintf(id.job, sizeof id.job, "%s",
                 ev.header.job ? ev.header.job : "");
        id.epoch = ev.header.epoch;
        snprintf(id.fingerprint, sizeof id.fingerprint, "%s",
                 ev.header.fingerprint ? ev.header.fingerprint : "");
        id.replica = ev.header.replica;
        id.replicas = ev.header.replicas;
        id.served_by = ev.header.served_by;
        if (ev.header.heartbeat_ms) {
            /* Heartbeats: a few missed, the server is hung. */
            uint64_t b = (uint64_t)ev.header.heartbeat_ms * 2u;
            if (b < s->o.heartbeat_timeout_ms)
                b = s->o.heartbeat_timeout_ms;
            if (b > s->o.idle_timeout_ms)
                b = s->o.idle_timeout_ms;
            s->silence_ms = (uint32_t)b;
            s->heartbeat_ms = ev.header.heartbeat_ms;
        }
        rc = check_ident(s, ev.header.has_ident ? &id : NULL);
        if (rc != SCC_OK)
            goto out;
        s->partition = (int)ev.header.partition;
        if (ev.header.start != s->resp_start) {
            rc = seterr(s, SCC_ERR_PROTOCOL, "the server started at %llu, "
                        "asked for %llu",
                        (unsigned long long)ev.header.start,
                        (unsigned long long)s->resp_start);
            goto out;
        }
        break;
    }
    case SIO_FRAMER_SAMPLE: {
        scc_sample *c2 = &s->cur;
        c2->global_index = ev.global_index;
        c2->position = ev.position;
        c2->shard_index = ev.shard_index;
        c2->shard_url = ev.shard_url;
        c2->shard_url_len = ev.shard_url_len;
        c2->key = ev.key;
        c2->key_len = ev.key_len;
        c2->nfields = ev.nsample_fields;
        c2->fields = take_fields(s, ev.sample_fields, ev.nsample_fields);
        c2->bytes = ev.sample_bytes;
        s->next_pos = ev.position + 1;
        s->streak = 0;
        *out = c2;
        *got = 1;
        break;
    }
    case SIO_FRAMER_END:
        take_summary(s, &ev.summary, ev.end_json, ev.end_json_len);
        *out = NULL;
        *got = 1;
        break;
    case SIO_FRAMER_ERROR:
        rc = server_error(s, ev.reason, ev.retryable, ev.retry_after_ms);
        break;
    default:
        break;
    }
out:
    return rc;
}

static scc_code step_tar(scc_stream *s, const scc_sample **out, int *got)
{
    scc_code rc = SCC_OK;
    sio_tarr_result *r = s->tar;
    sio_error e = {SIO_OK, ""};

    *got = 0;
    sio_code c = sio_tarr_parse(s->rx + s->rpos, s->rlen - s->rpos,
                                s->wfields, SIO_FIELDS_MAX_DEFAULT,
                                s->o.max_sample_bytes, r, &e);
    if (c != SIO_OK) {
        rc = seterr(s, c == SIO_ERR_LIMIT ? SCC_ERR_LIMIT : SCC_ERR_PROTOCOL,
                    "%s", e.msg);
        goto out;
    }
    switch (r->kind) {
    case SIO_TARR_NEED:
        rc = fill(s, r->need);
        break;
    case SIO_TARR_SAMPLE: {
        const sio_tarr_sample *t = &r->sample;
        /* No identity before the first sample: the stream has none. */
        if (!s->ident_checked && (rc = check_ident(s, NULL)) != SCC_OK)
            goto out;
        if (t->position < s->next_pos) {
            rc = seterr(s, SCC_ERR_PROTOCOL, "tar: sample at position %llu, "
                        "expected at least %llu",
                        (unsigned long long)t->position,
                        (unsigned long long)s->next_pos);
            goto out;
        }
        scc_sample *c2 = &s->cur;
        c2->global_index = t->global_index;
        c2->position = t->position;
        c2->shard_index = UINT32_MAX; /* the tar format does not carry it */
        c2->shard_url = t->shard_url;
        c2->shard_url_len = t->shard_url_len;
        c2->key = t->key;
        c2->key_len = t->key_len;
        c2->nfields = t->nfields;
        c2->fields = take_fields(s, t->fields, t->nfields);
        c2->bytes = t->bytes;
        s->rpos += r->consumed;
        s->next_pos = t->position + 1;
        s->streak = 0;
        *out = c2;
        *got = 1;
        break;
    }
    case SIO_TARR_IDENT: {
        /* The stream's identity (its first member). */
        scc_ident id;
        memset(&id, 0, sizeof id);
        snprintf(id.job, sizeof id.job, "%s", r->ident.job);
        id.epoch = r->ident.epoch;
        snprintf(id.fingerprint, sizeof id.fingerprint, "%s",
                 r->ident.fingerprint);
        id.replica = r->ident.replica;
        id.replicas = r->ident.replicas;
        id.served_by = r->ident.served_by;
        s->rpos += r->consumed;
        rc = check_ident(s, &id);
        break;
    }
    case SIO_TARR_END:
        if (!s->ident_checked && (rc = check_ident(s, NULL)) != SCC_OK)
            goto out;
        s->rpos += r->consumed;
        take_summary(s, &r->summary, r->end_json, r->end_json_len);
        *out = NULL;
        *got = 1;
        break;
    case SIO_TARR_ERROR:
        rc = server_error(s, r->error.reason, r->error.retryable,
                          r->error.retry_after_ms);
        break;
    }
out:
    return rc;
}

scc_code scc_stream_next(scc_stream *s, const scc_sample **out)
{
    scc_code rc = SCC_OK;
    int got = 0;

    *out = NULL;
    if (s->failed) {
        rc = s->failed;
        goto out;
    }
    if (s->finished)
        goto out;
    /* The previous sample's views die here: reclaim consumed space once
     * it is at least as large as what is still buffered. */
    if (s->rpos > 0 && s->rpos >= s->rlen - s->rpos)
        compact(s);
    while (!got) {
        rc = s->fmt == SCC_FORMAT_FRAMES ? step_frames(s, out, &got)
                                         : step_tar(s, out, &got);
        if (rc == SCC_ERR_CUT || rc == SCC_ERR_TIMEOUT ||
            (rc == SCC_ERR_SERVER && s->retryable)) {
            char why[sizeof s->errmsg];
            snprintf(why, sizeof why, "%s", s->errmsg);
            rc = resume(s, rc, why);
        }
        if (rc != SCC_OK)
            goto out;
    }
    if (s->finished)
        drop_transfer(s);
out:
    if (rc != SCC_OK) {
        s->failed = rc;
        *out = NULL;
        drop_transfer(s);
    }
    return rc;
}

const scc_field *scc_sample_field(const scc_sample *smp, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < smp->nfields; i++)
        if (smp->fields[i].name_len == n &&
            memcmp(smp->fields[i].name, name, n) == 0)
            return &smp->fields[i];
    return NULL;
}

static int field_cmp(const scc_field *a, const scc_field *b)
{
    size_t n = a->name_len < b->name_len ? a->name_len : b->name_len;
    int c = memcmp(a->name, b->name, n);
    if (c)
        return c;
    return a->name_len < b->name_len ? -1 : a->name_len > b->name_len;
}

scc_code scc_sample_hash(const scc_sample *smp, unsigned char out[32])
{
    scc_code rc = SCC_OK;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    const scc_field **order = NULL;

    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        rc = SCC_ERR_NOMEM;
        goto out;
    }
    order = malloc((smp->nfields ? smp->nfields : 1) * sizeof *order);
    if (!order) {
        rc = SCC_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < smp->nfields; i++)
        order[i] = &smp->fields[i];
    /* Insertion sort: samples have a handful of fields. */
    for (size_t i = 1; i < smp->nfields; i++)
        for (size_t j = i; j > 0 && field_cmp(order[j - 1], order[j]) > 0;
             j--) {
            const scc_field *t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (size_t i = 0; i < smp->nfields; i++) {
        unsigned char le[8];
        uint64_t n = order[i]->len;
        for (int k = 0; k < 8; k++)
            le[k] = (unsigned char)(n >> (8 * k));
        if (EVP_DigestUpdate(ctx, order[i]->name, order[i]->name_len) != 1 ||
            EVP_DigestUpdate(ctx, "", 1) != 1 ||
            EVP_DigestUpdate(ctx, le, 8) != 1 ||
            EVP_DigestUpdate(ctx, order[i]->data, order[i]->len) != 1) {
            rc = SCC_ERR_NOMEM;
            goto out;
        }
    }
    if (EVP_DigestFinal_ex(ctx, out, NULL) != 1)
        rc = SCC_ERR_NOMEM;
out:
    free(order);
    EVP_MD_CTX_free(ctx);
    return rc;
}

const char *scc_stream_errmsg(const scc_stream *s)
{
    return s ? s->errmsg : "";
}

int scc_stream_http_status(const scc_stream *s)
{
    return (int)s->status;
}

scc_format scc_stream_format(const scc_stream *s)
{
    return s->fmt;
}

uint64_t scc_stream_position(const scc_stream *s)
{
    return s->next_pos;
}

uint32_t scc_stream_reconnects(const scc_stream *s)
{
    return s->reconnects;
}

uint64_t scc_stream_bytes(const scc_stream *s)
{
    return s->bytes;
}

const char *scc_stream_partition(const scc_stream *s)
{
    return s->partition < 0 ? NULL
                            : sio_partition_name((sio_partition)s->partition);
}

const scc_summary *scc_stream_summary(const scc_stream *s)
{
    return s->have_summary ? &s->summary : NULL;
}

const char *scc_stream_url(const scc_stream *s)
{
    return s->url ? s->url : "";
}

uint32_t scc_stream_failovers(const scc_stream *s)
{
    return s->failovers;
}

int scc_stream_replica(const scc_stream *s)
{
    return s->nrep ? (int)s->at : -1;
}

const scc_ident *scc_stream_ident(const scc_stream *s)
{
    return s->has_ident ? &s->ident : NULL;
}

void scc_stream_close(scc_stream *s)
{
    if (!s)
        return;
    drop_transfer(s);
    if (s->multi)
        curl_multi_cleanup(s->multi);
    curl_slist_free_all(s->headers);
    if (s->auth) {
        /* The token is a secret: do not leave it in freed memory. */
        memset(s->auth, 0, strlen(s->auth));
        free(s->auth);
    }
    sio_framer_destroy(s->framer);
    if (s->roots)
        for (uint32_t k = 0; k < s->nrep; k++)
            free(s->roots[k]);
    free(s->roots);
    free(s->dead);
    free(s->url_base);
    free(s->url);
    free(s->lost_json);
    free(s->rx);
    free(s->fields);
    free(s->wfields);
    free(s->tar);
    free(s);
}

/* ------------------------------------------------------------------ */
/* One-shot GET                                                         */

typedef struct get_buf {
    char *data;
    size_t len, max;
    int over;
} get_buf;

static size_t get_write(char *buf, size_t size, size_t n, void *ud)
{
    get_buf *g = ud;
    size_t len = size * n;
    if (len > g->max - g->len) {
        g->over = 1;
        return 0;
    }
    char *nd = realloc(g->data, g->len + len + 1);
    if (!nd)
        return 0;
    g->data = nd;
    memcpy(g->data + g->len, buf, len);
    g->len += len;
    g->data[g->len] = '\0';
    return len;
}

scc_code scc_http_get(const char *url, const char *token,
                      uint32_t timeout_ms, size_t max_body, char **body,
                      size_t *len, int *http_status, char *errmsg,
                      size_t errlen)
{
    scc_code rc = SCC_OK;
    CURL *e = NULL;
    struct curl_slist *h = NULL;
    char *auth = NULL;
    get_buf g = {NULL, 0, max_body, 0};
    char dummy[8];
    long st = 0;

    if (!errmsg) {
        errmsg = dummy;
        errlen = sizeof dummy;
    }
    errmsg[0] = '\0';
    *body = NULL;
    *len = 0;
    if (http_status)
        *http_status = 0;
    if (scc_global_init() != SCC_OK || !(e = curl_easy_init())) {
        rc = SCC_ERR_NOMEM;
        goto out;
    }
    if (token && *token) {
        size_t n = strlen(token) + 32;
        auth = malloc(n);
        if (!auth) {
            rc = SCC_ERR_NOMEM;
            goto out;
        }
        snprintf(auth, n, "Authorization: Bearer %s", token);
        h = curl_slist_append(NULL, auth);
        if (!h) {
            rc = SCC_ERR_NOMEM;
            goto out;
        }
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_ms ? timeout_ms
                                                               : 30000));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, get_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &g);
    CURLcode c = curl_easy_perform(e);
    if (c != CURLE_OK) {
        if (g.over) {
            rc = SCC_ERR_LIMIT;
            snprintf(errmsg, errlen, "response above %zu bytes", max_body);
        } else {
            rc = (c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST)
                     ? SCC_ERR_CONNECT
                 : c == CURLE_OPERATION_TIMEDOUT ? SCC_ERR_TIMEOUT
                 : c == CURLE_URL_MALFORMAT || c == CURLE_UNSUPPORTED_PROTOCOL
                     ? SCC_ERR_INVALID
                     : SCC_ERR_CUT;
            snprintf(errmsg, errlen, "GET failed: %s", curl_easy_strerror(c));
        }
        goto out;
    }
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
    if (http_status)
        *http_status = (int)st;
    if (st < 200 || st >= 300) {
        char reason[512];
        const char *r = g.data ? g.data : "";
        if (strncmp(r, "error: ", 7) == 0)
            r += 7;
        snprintf(reason, sizeof reason, "%s", *r ? r : "(no reason given)");
        size_t n = strlen(reason);
        while (n && (reason[n - 1] == '\n' || reason[n - 1] == '\r'))
            reason[--n] = '\0';
        rc = map_status(st, reason, errmsg, errlen);
        goto out;
    }
    if (!g.data) {
        g.data = calloc(1, 1);
        if (!g.data) {
            rc = SCC_ERR_NOMEM;
            goto out;
        }
    }
    *body = g.data;
    *len = g.len;
    g.data = NULL;
out:
    free(g.data);
    curl_slist_free_all(h);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    if (e)
        curl_easy_cleanup(e);
    return rc;
}
