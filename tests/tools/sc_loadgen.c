/*
 * sc_loadgen.c — many concurrent shardcast consumers in one process, for
 * load tests (tests/server/test_load.py).
 *
 * Opens one HTTP/1.1 connection per consumer (rank r of --world W, ranks
 * --first .. --first+--consumers-1) to GET
 * /v1/jobs/JOB/epochs/E/stream?rank=r&world=W&format=frames, all driven by
 * one epoll loop over non-blocking sockets. Each response is de-chunked and
 * parsed as the frames format (include/shardio_wire.h) far enough to check
 * it and to hash every sample: the content hash of shardcast.sample_hash
 * (sha256 over the fields sorted by name, each as name, NUL, u64 LE length,
 * data). Per consumer it checks that positions are dense from the start and
 * that the stream ends with END; ERROR and cut streams are counted as such.
 *
 * Output: one JSON object on stdout: {"consumers", "completed", "errors",
 * "cut", "http_errors", "samples", "payload_bytes", "body_bytes", "seconds",
 * "samples_per_s", "mb_per_s", "min_samples", "max_samples", "problems":
 * [first few problems]}. --dump FILE writes one line per sample:
 * "rank global_index position key content_hash".
 * Exit status: 0 when every consumer completed with END, 1 otherwise, 2 on
 * bad arguments.
 *
 * Limits: a frame payload above --max-frame (default 64 MiB) fails that
 * consumer; each consumer buffers at most one frame. Raises its own
 * RLIMIT_NOFILE to the hard limit. Loopback use only (the host is an
 * address literal).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK (256u * 1024u)
#define HEAD_MAX 16384u
#define PROBLEMS_MAX 10
#define FIELDS_MAX 1024u

enum { HTTP_HEAD = 0, HTTP_CHUNK_SIZE, HTTP_CHUNK_DATA, HTTP_CHUNK_CRLF,
       HTTP_DONE };
enum { C_CONNECTING = 0, C_SENDING, C_READING, C_CLOSED };
enum { R_NONE = 0, R_END, R_ERROR, R_CUT, R_HTTP };

typedef struct consumer {
    int fd;
    uint32_t rank;
    int state;
    char req[1024];
    size_t req_len, req_off;
    /* HTTP */
    int http;
    unsigned char head[HEAD_MAX];
    size_t head_len;
    int chunked;
    uint64_t chunk_left;
    char sizeline[32];
    size_t sizeline_len;
    int status;
    /* frames */
    unsigned char *buf; /* the frame being assembled */
    size_t buf_len, buf_cap;
    int magic_ok;
    uint64_t samples, payload, body;
    uint64_t next_pos, start;
    int result;
    char reason[200];
} consumer;

typedef struct opts {
    const char *host, *job, *token, *dump;
    unsigned port;
    uint64_t epoch, start;
    uint32_t world, first, consumers;
    double timeout_s;
    uint64_t max_frame;
} opts;

static opts O;
static FILE *dumpf;
static char problems[PROBLEMS_MAX][256];
static int nproblems;
static EVP_MD_CTX *mdctx;

static void problem(consumer *c, const char *what)
{
    snprintf(c->reason, sizeof c->reason, "%s", what);
    if (nproblems < PROBLEMS_MAX)
        snprintf(problems[nproblems++], sizeof problems[0], "rank %u: %s",
                 c->rank, what);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint16_t le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

typedef struct fview {
    const unsigned char *name;
    size_t nlen;
    const unsigned char *data;
    size_t len;
} fview;

static int cmp_fview(const void *a, const void *b)
{
    const fview *x = a, *y = b;
    size_t n = x->nlen < y->nlen ? x->nlen : y->nlen;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    return (x->nlen > y->nlen) - (x->nlen < y->nlen);
}

/* One SAMPLE payload: check, hash, count. Returns -1 on a bad frame. */
static int on_sample(consumer *c, const unsigned char *p, size_t len)
{
    static fview f[FIELDS_MAX];
    unsigned char md[32];
    char hex[65];
    if (len < 24)
        return -1;
    uint64_t gidx = le64(p), pos = le64(p + 8);
    uint16_t klen = le16(p + 20), nf = le16(p + 22);
    size_t o = 24;
    if (nf > FIELDS_MAX || o + klen > len)
        return -1;
    const unsigned char *key = p + o;
    o += klen;
    for (uint16_t i = 0; i < nf; i++) {
        if (o + 6 > len)
            return -1;
        uint16_t nl = le16(p + o);
        uint32_t dl = le32(p + o + 2);
        o += 6;
        if (o + nl > len || (uint64_t)o + nl + dl > len)
            return -1;
        f[i].name = p + o;
        f[i].nlen = nl;
        f[i].data = p + o + nl;
        f[i].len = dl;
        o += (size_t)nl + dl;
        c->payload += dl;
    }
    if (o != len)
        return -1;
    if (pos != c->next_pos) {
        char m[128];
        snprintf(m, sizeof m, "position %llu, expected %llu",
                 (unsigned long long)pos, (unsigned long long)c->next_pos);
        problem(c, m);
        return -1;
    }
    c->next_pos++;
    c->samples++;
    qsort(f, nf, sizeof f[0], cmp_fview);
    EVP_DigestInit_ex(mdctx, EVP_sha256(), NULL);
    for (uint16_t i = 0; i < nf; i++) {
        unsigned char l8[8], z = 0;
        for (int b = 0; b < 8; b++)
            l8[b] = (unsigned char)((uint64_t)f[i].len >> (8 * b));
        EVP_DigestUpdate(mdctx, f[i].name, f[i].nlen);
        EVP_DigestUpdate(mdctx, &z, 1);
        EVP_DigestUpdate(mdctx, l8, 8);
        EVP_DigestUpdate(mdctx, f[i].data, f[i].len);
    }
    EVP_DigestFinal_ex(mdctx, md, NULL);
    if (dumpf) {
        for (int b = 0; b < 32; b++)
            snprintf(hex + 2 * b, 3, "%02x", md[b]);
        fprintf(dumpf, "%u %llu %llu %.*s %s\n", c->rank,
                (unsigned long long)gidx, (unsigned long long)pos, (int)klen,
                (const char *)key, hex);
    }
    return 0;
}

/* Feed de-chunked body bytes to the frames parser. */
static int on_body(consumer *c, const unsigned char *p, size_t n)
{
    c->body += n;
    while (n > 0) {
        if (c->result != R_NONE) {
            problem(c, "bytes after the last frame");
            return -1;
        }
        size_t need;
        if (!c->magic_ok)
            need = 4;
        else if (c->buf_len < 8)
            need = 8;
        else {
            uint64_t l = le32(c->buf + 4);
            if (l > O.max_frame) {
                problem(c, "frame above --max-frame");
                return -1;
            }
            need = 8 + (size_t)l;
        }
        if (need > c->buf_cap) {
            size_t cap = c->buf_cap ? c->buf_cap : 4096;
            while (cap < need)
                cap *= 2;
            unsigned char *nb = realloc(c->buf, cap);
            if (!nb) {
                problem(c, "out of memory");
                return -1;
            }
            c->buf = nb;
            c->buf_cap = cap;
        }
        size_t k = need - c->buf_len < n ? need - c->buf_len : n;
        memcpy(c->buf + c->buf_len, p, k);
        c->buf_len += k;
        p += k;
        n -= k;
        if (c->buf_len < need)
            continue;
        if (!c->magic_ok) {
            if (memcmp(c->buf, "SCF1", 4) != 0) {
                problem(c, "bad magic");
                return -1;
            }
            c->magic_ok = 1;
            c->buf_len = 0;
            continue;
        }
        if (need == 8 && le32(c->buf + 4) != 0)
            continue; /* header only so far: now the payload length */
        unsigned type = c->buf[0];
        const unsigned char *pl = c->buf + 8;
        size_t plen = need - 8;
        switch (type) {
        case 0x01: /* HEADER */
        case 0x02: /* SHARD */
            break;
        case 0x03:
            if (on_sample(c, pl, plen) != 0) {
                if (!c->reason[0])
                    problem(c, "bad SAMPLE frame");
                return -1;
            }
            break;
        case 0x04:
            c->result = R_END;
            break;
        case 0x05:
            c->result = R_ERROR;
            snprintf(c->reason, sizeof c->reason, "ERROR frame: %.*s",
                     (int)(plen < 150 ? plen : 150), (const char *)pl);
            if (nproblems < PROBLEMS_MAX)
                snprintf(problems[nproblems++], sizeof problems[0],
                         "rank %u: %s", c->rank, c->reason);
            break;
        default:
            if (type < 0x80) {
                problem(c, "unknown frame type");
                return -1;
            }
        }
        c->buf_len = 0;
    }
    return 0;
}

/* Index just past the blank line ending the headers, or -1. */
static long head_end(const unsigned char *h, size_t len)
{
    for (size_t i = 3; i < len; i++)
        if (!memcmp(h + i - 3, "\r\n\r\n", 4))
            return (long)i + 1;
    return -1;
}

/* Parse the status line and the headers (hlen bytes of c->head). */
static int parse_head(consumer *c, size_t hlen)
{
    c->head[hlen - 1] = 0;
    if (sscanf((char *)c->head, "HTTP/1.%*d %d", &c->status) != 1) {
        problem(c, "bad status line");
        return -1;
    }
    for (size_t i = 0; i < hlen; i++)
        if (c->head[i] >= 'A' && c->head[i] <= 'Z')
            c->head[i] = (unsigned char)(c->head[i] + 32);
    c->chunked = strstr((char *)c->head, "transfer-encoding: chunked") != NULL;
    if (c->status != 200) {
        char m[64];
        snprintf(m, sizeof m, "HTTP status %d", c->status);
        problem(c, m);
        c->result = R_HTTP;
        return -1;
    }
    c->http = c->chunked ? HTTP_CHUNK_SIZE : HTTP_CHUNK_DATA;
    c->chunk_left = UINT64_MAX; /* not chunked: until close */
    return 0;
}

/* Feed raw socket bytes through the HTTP layer. */
static int on_bytes(consumer *c, const unsigned char *p, size_t n)
{
    while (n > 0) {
        switch (c->http) {
        case HTTP_HEAD: {
            size_t before = c->head_len;
            size_t k = HEAD_MAX - 1 - before < n ? HEAD_MAX - 1 - before : n;
            memcpy(c->head + before, p, k);
            c->head_len += k;
            long hlen = head_end(c->head, c->head_len);
            if (hlen < 0) {
                if (c->head_len >= HEAD_MAX - 1) {
                    problem(c, "headers too long");
                    return -1;
                }
                p += k;
                n -= k;
                continue;
            }
            if (parse_head(c, (size_t)hlen) != 0)
                return -1;
            p += (size_t)hlen - before;
            n -= (size_t)hlen - before;
            continue;
        }
        case HTTP_CHUNK_SIZE:
            while (n > 0) {
                char ch = (char)*p++;
                n--;
                if (ch == '\n') {
                    c->sizeline[c->sizeline_len] = 0;
                    char *e = NULL;
                    unsigned long long v = strtoull(c->sizeline, &e, 16);
                    if (e == c->sizeline)
                        return -1;
                    c->sizeline_len = 0;
                    c->chunk_left = v;
                    c->http = v ? HTTP_CHUNK_DATA : HTTP_DONE;
                    break;
                }
                if (ch != '\r' && c->sizeline_len + 1 < sizeof c->sizeline)
                    c->sizeline[c->sizeline_len++] = ch;
            }
            continue;
        case HTTP_CHUNK_DATA: {
            size_t k = c->chunk_left < n ? (size_t)c->chunk_left : n;
            if (on_body(c, p, k) != 0)
                return -1;
            p += k;
            n -= k;
            if (c->chunk_left != UINT64_MAX) {
                c->chunk_left -= k;
                if (c->chunk_left == 0)
                    c->http = HTTP_CHUNK_CRLF;
            }
            continue;
        }
        case HTTP_CHUNK_CRLF:
            if (*p == '\n')
                c->http = HTTP_CHUNK_SIZE;
            p++;
            n--;
            continue;
        case HTTP_DONE:
            return 0; /* trailers: ignored */
        }
    }
    return 0;
}

static void close_consumer(consumer *c, int epfd)
{
    if (c->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    if (c->result == R_NONE) {
        c->result = R_CUT;
        problem(c, c->http == HTTP_DONE ? "stream ended without END frame"
                                        : "connection cut before the end");
    }
    free(c->buf);
    c->buf = NULL;
    c->state = C_CLOSED;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: sc_loadgen --port P --job J --world W [--host 127.0.0.1] "
            "[--epoch E] [--first R] [--consumers N] [--start S] "
            "[--token T] [--timeout SECONDS] [--dump FILE] "
            "[--max-frame BYTES]\n");
    return 2;
}

int main(int argc, char **argv)
{
    O.host = "127.0.0.1";
    O.timeout_s = 120;
    O.max_frame = 64u << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--host"))
            O.host = v;
        else if (!strcmp(a, "--port"))
            O.port = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--job"))
            O.job = v;
        else if (!strcmp(a, "--token"))
            O.token = v;
        else if (!strcmp(a, "--dump"))
            O.dump = v;
        else if (!strcmp(a, "--epoch"))
            O.epoch = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--start"))
            O.start = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--world"))
            O.world = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--first"))
            O.first = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--consumers"))
            O.consumers = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--timeout"))
            O.timeout_s = strtod(v, NULL);
        else if (!strcmp(a, "--max-frame"))
            O.max_frame = strtoull(v, NULL, 10);
        else
            return usage();
    }
    if (!O.port || !O.job || !O.world)
        return usage();
    if (!O.consumers)
        O.consumers = O.world - O.first;
    if ((uint64_t)O.first + O.consumers > O.world)
        return usage();

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (O.dump && !(dumpf = fopen(O.dump, "w"))) {
        perror(O.dump);
        return 2;
    }
    mdctx = EVP_MD_CTX_new();
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)O.port);
    if (inet_pton(AF_INET, O.host, &sa.sin_addr) != 1 || !mdctx)
        return usage();

    consumer *cs = calloc(O.consumers, sizeof *cs);
    int epfd = epoll_create1(0);
    if (!cs || epfd < 0)
        return 2;
    double t0 = now_s();
    for (uint32_t i = 0; i < O.consumers; i++) {
        consumer *c = &cs[i];
        c->rank = O.first + i;
        c->start = c->next_pos = O.start;
        c->req_len = (size_t)snprintf(
            c->req, sizeof c->req,
            "GET /v1/jobs/%s/epochs/%llu/stream?rank=%u&world=%u&start=%llu"
            "&format=frames HTTP/1.1\r\nHost: %s:%u\r\n%s%s%s"
            "Connection: close\r\n\r\n",
            O.job, (unsigned long long)O.epoch, c->rank, O.world,
            (unsigned long long)O.start, O.host, O.port,
            O.token ? "Authorization: Bearer " : "", O.token ? O.token : "",
            O.token ? "\r\n" : "");
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (c->fd < 0) {
            problem(c, "socket() failed (file limit?)");
            c->result = R_CUT;
            c->state = C_CLOSED;
            continue;
        }
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0 &&
            errno != EINPROGRESS) {
            problem(c, "connect failed");
            c->result = R_CUT;
            close(c->fd);
            c->fd = -1;
            c->state = C_CLOSED;
            continue;
        }
        struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN,
                                 .data.u32 = i};
        epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    }

    static unsigned char rbuf[READ_CHUNK];
    struct epoll_event evs[256];
    size_t open_n = 0;
    for (uint32_t i = 0; i < O.consumers; i++)
        open_n += cs[i].state != C_CLOSED;
    while (open_n > 0) {
        if (now_s() - t0 > O.timeout_s)
            break;
        int n = epoll_wait(epfd, evs, 256, 1000);
        for (int e = 0; e < n; e++) {
            consumer *c = &cs[evs[e].data.u32];
            if (c->state == C_CLOSED)
                continue;
            if (c->state == C_CONNECTING || c->state == C_SENDING) {
                if (evs[e].events & (EPOLLERR | EPOLLHUP)) {
                    problem(c, "connect failed");
                    close_consumer(c, epfd);
                    open_n--;
                    continue;
                }
                if (evs[e].events & EPOLLOUT) {
                    ssize_t w = send(c->fd, c->req + c->req_off,
                                     c->req_len - c->req_off, MSG_NOSIGNAL);
                    if (w > 0)
                        c->req_off += (size_t)w;
                    c->state = C_SENDING;
                    if (c->req_off == c->req_len) {
                        struct epoll_event ev = {.events = EPOLLIN,
                                                 .data.u32 = evs[e].data.u32};
                        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
                        c->state = C_READING;
                    }
                }
                continue;
            }
            for (;;) {
                ssize_t r = recv(c->fd, rbuf, sizeof rbuf, 0);
                if (r > 0) {
                    if (on_bytes(c, rbuf, (size_t)r) != 0) {
                        close_consumer(c, epfd);
                        open_n--;
                        break;
                    }
                    continue;
                }
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                    break;
                close_consumer(c, epfd); /* EOF or reset */
                open_n--;
                break;
            }
        }
    }
    double secs = now_s() - t0;
    uint64_t samples = 0, payload = 0, body = 0, minv = UINT64_MAX, maxv = 0;
    unsigned completed = 0, errors = 0, cut = 0, http = 0;
    for (uint32_t i = 0; i < O.consumers; i++) {
        consumer *c = &cs[i];
        if (c->state != C_CLOSED) {
            problem(c, "timed out");
            close_consumer(c, epfd);
        }
        samples += c->samples;
        payload += c->payload;
        body += c->body;
        if (c->samples < minv)
            minv = c->samples;
        if (c->samples > maxv)
            maxv = c->samples;
        completed += c->result == R_END;
        errors += c->result == R_ERROR;
        cut += c->result == R_CUT;
        http += c->result == R_HTTP;
    }
    printf("{\"consumers\": %u, \"completed\": %u, \"errors\": %u, "
           "\"cut\": %u, \"http_errors\": %u, \"samples\": %llu, "
           "\"payload_bytes\": %llu, \"body_bytes\": %llu, \"seconds\": %.3f, "
           "\"samples_per_s\": %.1f, \"mb_per_s\": %.2f, \"min_samples\": %llu, "
           "\"max_samples\": %llu, \"problems\": [",
           O.consumers, completed, errors, cut, http,
           (unsigned long long)samples, (unsigned long long)payload,
           (unsigned long long)body, secs, secs > 0 ? samples / secs : 0.0,
           secs > 0 ? body / 1e6 / secs : 0.0,
           (unsigned long long)(minv == UINT64_MAX ? 0 : minv),
           (unsigned long long)maxv);
    for (int i = 0; i < nproblems; i++) {
        printf("%s\"", i ? ", " : "");
        for (const char *p = problems[i]; *p; p++)
            if (*p == '"' || *p == '\\')
                printf("\\%c", *p);
            else if ((unsigned char)*p >= 0x20)
                putchar(*p);
        putchar('"');
    }
    printf("]}\n");
    if (dumpf)
        fclose(dumpf);
    EVP_MD_CTX_free(mdctx);
    free(cs);
    close(epfd);
    return completed == O.consumers ? 0 : 1;
}
