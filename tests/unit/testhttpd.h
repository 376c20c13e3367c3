/*
 * testhttpd.h — a tiny HTTP/1.1 server on 127.0.0.1 for the fetch and
 * credential unit tests (fake object stores, STS, container and IMDS
 * endpoints). One accept thread, one thread per connection, keep-alive;
 * the test's handler writes each response itself, so it can also cut,
 * stall or reset a body. Test code only: no hardening beyond fixed buffers.
 */
#ifndef SHARDCAST_TESTHTTPD_H
#define SHARDCAST_TESTHTTPD_H

#include <stdatomic.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define THTTP_CONNS_MAX 256

typedef struct thttp_req {
    char method[16];
    char path[4096];
    char headers[16384];
    char body[65536];
    size_t body_len;
} thttp_req;

/* Write the response to fd; return 1 to keep the connection, 0 to close. */
typedef int (*thttp_handler)(void *ud, int fd, const thttp_req *r);

typedef struct thttp {
    int lfd, port;
    thttp_handler handler;
    void *ud;
    atomic_int stop; /* set by thttp_stop, read by the server threads */
    pthread_t accept_th;
    pthread_mutex_t mu;
    pthread_t th[THTTP_CONNS_MAX];
    int fds[THTTP_CONNS_MAX];
    int n;
} thttp;

typedef struct thttp_conn {
    thttp *srv;
    int fd;
} thttp_conn;

/* Value of header name in r (case-insensitive) into buf; 0 when found. */
__attribute__((unused)) static int thttp_header(const thttp_req *r,
                                                const char *name, char *buf,
                                                size_t len)
{
    size_t nl = strlen(name);
    const char *p = r->headers;
    while (*p) {
        const char *e = strstr(p, "\r\n");
        if (!e)
            break;
        if ((size_t)(e - p) > nl && strncasecmp(p, name, nl) == 0 &&
            p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(e - v);
            if (vl >= len)
                vl = len - 1;
            memcpy(buf, v, vl);
            buf[vl] = '\0';
            return 0;
        }
        p = e + 2;
    }
    return -1;
}

__attribute__((unused)) static int thttp_write(int fd, const void *buf,
                                               size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A whole response with a body and optional extra header lines. */
__attribute__((unused)) static int thttp_respond(int fd, int status,
                                                 const char *extra,
                                                 const void *body, size_t n)
{
    char head[2048];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s\r\n", status,
                      n, extra ? extra : "");
    if (thttp_write(fd, head, (size_t)hl))
        return -1;
    return n ? thttp_write(fd, body, n) : 0;
}

static int thttp_wait(thttp *s, int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    while (!s->stop) {
        int r = poll(&p, 1, 50);
        if (r > 0)
            return 0;
        if (r < 0)
            return -1;
    }
    return -1;
}

/* Read one request; -1 on EOF or error. */
static int thttp_read_req(thttp *s, int fd, thttp_req *r)
{
    size_t have = 0;
    char *end = NULL;
    memset(r, 0, sizeof *r);
    while (!end) {
        if (have + 1 >= sizeof r->headers || thttp_wait(s, fd))
            return -1;
        ssize_t n = recv(fd, r->headers + have, sizeof r->headers - 1 - have, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
        r->headers[have] = '\0';
        end = strstr(r->headers, "\r\n\r\n");
    }
    size_t hlen = (size_t)(end - r->headers) + 4;
    char cl[32];
    sscanf(r->headers, "%15s %4095s", r->method, r->path);
    size_t want = 0;
    if (thttp_header(r, "Content-Length", cl, sizeof cl) == 0)
        want = (size_t)strtoul(cl, NULL, 10);
    if (want > sizeof r->body)
        return -1;
    size_t extra = have - hlen;
    memcpy(r->body, r->headers + hlen, extra);
    r->headers[hlen - 2] = '\0'; /* keep the last CRLF for thttp_header */
    while (extra < want) {
        if (thttp_wait(s, fd))
            return -1;
        ssize_t n = recv(fd, r->body + extra, want - extra, 0);
        if (n <= 0)
            return -1;
        extra += (size_t)n;
    }
    r->body_len = want;
    return 0;
}

static void *thttp_conn_main(void *arg)
{
    thttp_conn *c = arg;
    thttp_req *r = malloc(sizeof *r);
    while (r && !c->srv->stop && thttp_read_req(c->srv, c->fd, r) == 0)
        if (!c->srv->handler(c->srv->ud, c->fd, r))
            break;
    free(r);
    shutdown(c->fd, SHUT_RDWR);
    free(c);
    return NULL;
}

static void *thttp_accept_main(void *arg)
{
    thttp *s = arg;
    while (!s->stop) {
        if (thttp_wait(s, s->lfd))
            break;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        thttp_conn *c = malloc(sizeof *c);
        pthread_mutex_lock(&s->mu);
        if (!c || s->n == THTTP_CONNS_MAX) {
            pthread_mutex_unlock(&s->mu);
            free(c);
            close(fd);
            continue;
        }
        c->srv = s;
        c->fd = fd;
        s->fds[s->n] = fd;
        if (pthread_create(&s->th[s->n], NULL, thttp_conn_main, c) == 0)
            s->n++;
        else {
            close(fd);
            free(c);
        }
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

__attribute__((unused)) static int thttp_start(thttp *s, thttp_handler h,
                                               void *ud)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int one = 1;
    memset(s, 0, sizeof *s);
    s->handler = h;
    s->ud = ud;
    pthread_mutex_init(&s->mu, NULL);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 64) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al))
        return -1;
    s->port = ntohs(a.sin_port);
    return pthread_create(&s->accept_th, NULL, thttp_accept_main, s);
}

__attribute__((unused)) static void thttp_stop(thttp *s)
{
    s->stop = 1;
    pthread_join(s->accept_th, NULL);
    for (int i = 0; i < s->n; i++) {
        pthread_join(s->th[i], NULL);
        close(s->fds[i]);
    }
    close(s->lfd);
    pthread_mutex_destroy(&s->mu);
}

#endif
