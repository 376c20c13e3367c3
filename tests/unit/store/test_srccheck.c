/*
 * test_srccheck.c — what a job spec's source is refused for before any
 * I/O: the brace counter (shardio/store/brace.c), the host canonicaliser
 * (shardio/store/url.c) and sio_source_check (shardio/store/srccheck.c).
 *
 * Regression: a PUT of 12 sources of 10^6 names each was refused only after
 * the names were expanded (RSS 35 -> 1,976 MiB), and http://2852039166/,
 * http://0xa9fea9fe/ and http://[::ffff:169.254.169.254]/ were accepted
 * (201) and failed later, retryably, when the connection was refused.
 */
#include <arpa/inet.h>
#include <curl/curl.h>

#include "check.h"
#include "shardio.h"
#include "store/store_int.h"
#include "store/url.h"

/* The count agrees with the expansion wherever the expansion is cheap. */
static void count_is(const char *pat, uint64_t want)
{
    uint64_t n = 12345;
    sio_error e;
    CHECK(sio_brace_count(pat, &n, &e) == SIO_OK);
    CHECK_EQ_U64(n, want);
    if (want <= 100000) {
        char **v = NULL;
        size_t got = 0;
        CHECK(sio_brace_expand(pat, 0, &v, &got, &e) == SIO_OK);
        CHECK_EQ_U64(got, want);
        sio_strv_free(v, got);
    }
}

static void count_err(const char *pat, sio_code want)
{
    uint64_t n = 12345;
    sio_error e;
    CHECK(sio_brace_count(pat, &n, &e) == want);
    CHECK_EQ_U64(n, 0);
}

static void test_count(void)
{
    count_is("plain.tar", 1);
    count_is("/d/train-{000..127}.tar", 128);
    count_is("s-{3..1}", 3);
    count_is("{a,b,c}{1..2}", 6);
    count_is("x{,y}.tar", 2);
    count_is("lit{x}.tar", 1);
    count_is("a{1..x}b", 1);
    count_is("{-5..5}", 11);
    /* 10^6 x 10^3: counted, not expanded */
    count_is("s-{000000..999999}-{000..999}.tar", UINT64_C(1000000000));
    /* the widest range: 2 x (10^18 - 1) + 1 names */
    count_is("{-999999999999999999..999999999999999999}",
             UINT64_C(1999999999999999999));
    /* a product past 2^64 saturates, never wraps */
    count_is("{0..999999}{0..999999}{0..999999}{0..999999}", UINT64_MAX);
    count_is("{0..999999999999999999}{0..99}", UINT64_MAX);
    count_err("s-{0..3", SIO_ERR_INVALID);
    count_err("s-0..3}", SIO_ERR_INVALID);
    count_err("s-{a,{b,c}}", SIO_ERR_INVALID);
    {
        char pat[33 * 6 + 1];
        size_t o = 0;
        for (int i = 0; i < 33; i++)
            o += (size_t)snprintf(pat + o, sizeof pat - o, "{a,b}/");
        count_err(pat, SIO_ERR_LIMIT); /* more than 32 braces */
    }
    /* the expansion refuses what the count says is too many, before
     * allocating */
    {
        char **v = NULL;
        size_t n = 0;
        CHECK(sio_brace_expand("{0..999999999}", 0, &v, &n, NULL) ==
              SIO_ERR_LIMIT);
        CHECK(v == NULL && n == 0);
    }
}

/* The iterator names what the expansion names, in order, one buffer for
 * all; it refuses over its maximum before naming anything. */
static void test_iter(void)
{
    static const char *const want[] = {"d0/s00.tar", "d0/s01.tar",
                                       "d0/s02.tar", "d1/s00.tar",
                                       "d1/s01.tar", "d1/s02.tar"};
    sio_brace_iter *it = NULL;
    const char *name = "x";
    uint64_t count = 0;
    size_t n = 0;
    CHECK(sio_brace_iter_open("d{0..1}/s{00..02}.tar", 6, &it, &count,
                              NULL) == SIO_OK);
    CHECK_EQ_U64(count, 6);
    while (it && sio_brace_iter_next(it, &name, NULL) == SIO_OK && name) {
        CHECK(n < 6 && strcmp(name, want[n]) == 0);
        n++;
    }
    CHECK_EQ_U64(n, 6);
    CHECK(name == NULL);
    sio_brace_iter_free(it);
    it = NULL;
    CHECK(sio_brace_iter_open("d{0..1}/s{00..02}.tar", 5, &it, &count,
                              NULL) == SIO_ERR_LIMIT);
    CHECK(it == NULL && count == 0);
    CHECK(sio_brace_iter_open("s-{000000000..999999999}", 10000000, &it,
                              &count, NULL) == SIO_ERR_LIMIT);
    CHECK(it == NULL);
}

/* host (as in a URL) reads as the IPv4 address want (dotted), or with
 * want NULL as a name. */
static void v4(const char *host, const char *want)
{
    unsigned char a[16], w[4];
    int fam = sio_url_host_addr(host, 0, a);
    if (!want) {
        CHECK_EQ_U64(fam, 0);
        return;
    }
    CHECK_EQ_U64(fam, AF_INET);
    CHECK(inet_pton(AF_INET, want, w) == 1);
    CHECK(fam == AF_INET && memcmp(a, w, 4) == 0);
}

/* libcurl's own reading of the URL's host, when it makes an IPv4 literal
 * of it, is ours. */
static void like_curl(const char *url)
{
    CURLU *h = curl_url();
    char *host = NULL;
    sio_url u;
    unsigned char a[16], c[16];
    if (!h)
        return;
    if (curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(h, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        inet_pton(AF_INET, host, c) == 1) {
        CHECK(sio_url_parse(url, &u, NULL) == SIO_OK);
        int fam = u.host ? sio_url_host_addr(u.host, u.ipv6, a) : -1;
        CHECK_EQ_U64(fam, AF_INET);
        if (fam != AF_INET || memcmp(a, c, 4) != 0)
            fprintf(stderr, "differs from libcurl (%s): %s\n", host, url);
        CHECK(fam == AF_INET && memcmp(a, c, 4) == 0);
        sio_url_free(&u);
    }
    curl_free(host);
    curl_url_cleanup(h);
}

static void forbidden(const char *host, int ipv6, int want)
{
    CHECK_EQ_U64(sio_url_host_is_link_local(host, ipv6), want);
    if (sio_url_host_is_link_local(host, ipv6) != want)
        fprintf(stderr, "link-local(%s) != %d\n", host, want);
}

static void test_hosts(void)
{
    v4("169.254.169.254", "169.254.169.254");
    v4("2852039166", "169.254.169.254");
    v4("0xa9fea9fe", "169.254.169.254");
    v4("0XA9FEA9FE", "169.254.169.254");
    v4("0251.0376.0251.0376", "169.254.169.254");
    v4("0xa9.0xfe.0xa9.0xfe", "169.254.169.254");
    v4("169.254.43518", "169.254.169.254");
    v4("169.16689662", "169.254.169.254");
    v4("0251.0xfe.43518", "169.254.169.254");
    v4("169.254.169.254.", "169.254.169.254");
    v4("%31%36%39.254.169.254", "169.254.169.254");
    v4("0", "0.0.0.0");
    v4("127.1", "127.0.0.1");
    /* not addresses: names, left to DNS and the connection's check */
    v4("256.1.1.1", NULL);
    v4("1.2.3.4.5", NULL);
    v4("08.1.1.1", NULL);
    v4("0x", NULL);
    v4("4294967296", NULL);
    v4("99999999999999999999999", NULL);
    v4("169.254.169.254..", NULL);
    v4("example.com", NULL);
    v4("0xa9fea9fe.example", NULL);
    v4("1.2.3.4x", NULL);
    /* a control byte once decoded: no URL parser takes it */
    {
        unsigned char a[16];
        CHECK(sio_url_host_addr("a%0ab", 0, a) == -1);
        CHECK(sio_url_host_addr("not-v6", 1, a) == -1);
        CHECK(sio_url_host_addr("fe80::1%25eth0", 1, a) == AF_INET6);
    }

    forbidden("169.254.169.254", 0, 1);
    forbidden("169.254.0.1", 0, 1);
    forbidden("2852039166", 0, 1);
    forbidden("0xa9fea9fe", 0, 1);
    forbidden("0251.0376.0251.0376", 0, 1);
    forbidden("169.254.43518", 0, 1);
    forbidden("%31%36%39.254.169.254", 0, 1);
    forbidden("100.100.100.200", 0, 1);
    forbidden("::ffff:169.254.169.254", 1, 1);
    forbidden("::ffff:a9fe:a9fe", 1, 1);
    forbidden("::169.254.169.254", 1, 1);
    forbidden("64:ff9b::169.254.169.254", 1, 1);
    forbidden("fe80::1", 1, 1);
    forbidden("fe80::1%25eth0", 1, 1);
    forbidden("febf:ffff::1", 1, 1);
    forbidden("FE80::1", 1, 1);
    forbidden("fd00:ec2::254", 1, 1);
    forbidden("169.253.169.254", 0, 0);
    forbidden("127.0.0.1", 0, 0);
    forbidden("10.0.0.1", 0, 0);
    forbidden("fec0::1", 1, 0);
    forbidden("::1", 1, 0);
    forbidden("::ffff:127.0.0.1", 1, 0);
    forbidden("example.com", 0, 0);
    forbidden("169.254.169.254.nip.io", 0, 0);

    static const char *const urls[] = {
        "http://169.254.169.254/x.tar", "http://2852039166/x.tar",
        "http://0xa9fea9fe/x.tar", "http://0251.0376.0251.0376/x.tar",
        "http://0xa9.0xfe.0xa9.0xfe/", "http://169.254.43518/",
        "http://169.16689662/", "http://0251.0xfe.43518/",
        "http://127.1/", "http://0/", "http://256.1.1.1/",
        "http://08.1.1.1/", "http://1.2.3.4.5/",
        "http://%31%36%39.254.169.254/", "http://169.254.169.254./"};
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++)
        like_curl(urls[i]);
}

static sio_code check(const char *src, int allow, sio_source_counts *c)
{
    sio_error e;
    memset(c, 0, sizeof *c);
    return sio_source_check(src, allow, c, &e);
}

static void test_source_check(void)
{
    sio_source_counts c;
    CHECK(check("/d/s-{000..099}.tar", 0, &c) == SIO_OK);
    CHECK_EQ_U64(c.specs, 1);
    CHECK_EQ_U64(c.names, 100);
    CHECK_EQ_U64(c.listings, 0);
    CHECK(check("/d/a.tar :: file:///d/ :: s3://b/p/{0..9}.tar "
                "http://h:8080/s-{0..4}.tar",
                0, &c) == SIO_OK);
    CHECK_EQ_U64(c.specs, 4);
    CHECK_EQ_U64(c.names, 1 + 1 + 10 + 5);
    CHECK_EQ_U64(c.listings, 2);
    /* 10^9 names: counted, nothing expanded */
    CHECK(check("/d/s-{000000000..999999999}.tar", 0, &c) == SIO_OK);
    CHECK_EQ_U64(c.names, UINT64_C(1000000000));
    CHECK(check("/d/s-{0..3}}", 0, &c) == SIO_ERR_INVALID);
    CHECK(check("ftp://h/x.tar", 0, &c) == SIO_ERR_UNSUPPORTED);
    CHECK(check("http://h:99999/x.tar", 0, &c) == SIO_ERR_INVALID);
    CHECK(check("http://2852039166/x.tar", 0, &c) == SIO_ERR_INVALID);
    CHECK(check("http://2852039166/x.tar", 1, &c) == SIO_OK);
    CHECK(check("/d/a.tar::https://[::ffff:169.254.169.254]:443/s.tar", 0,
                &c) == SIO_ERR_INVALID);
    CHECK(check("http://[fe80::1%25eth0]/s.tar", 0, &c) == SIO_ERR_INVALID);
    CHECK(check("http://169.254.169.{250..255}/s.tar", 0, &c) ==
          SIO_ERR_INVALID);
    CHECK(check("http://h{1..4}.example/s-{0..9}.tar", 0, &c) == SIO_OK);
    CHECK_EQ_U64(c.names, 40);
    CHECK(check("http://h{1..100}.example/s.tar", 0, &c) == SIO_ERR_LIMIT);
    CHECK(check("http://u:p@0xa9fea9fe/s.tar?objects=64", 0, &c) ==
          SIO_ERR_INVALID);
    {
        sio_error e;
        memset(&c, 0, sizeof c);
        CHECK(sio_source_check("http://u:secret@0xa9fea9fe/s.tar", 0, &c,
                               &e) == SIO_ERR_INVALID);
        CHECK(strstr(e.msg, "secret") == NULL);
        CHECK(strstr(e.msg, "link-local") != NULL);
    }
    /* several sources add up */
    memset(&c, 0, sizeof c);
    for (int i = 0; i < 12; i++)
        CHECK(sio_source_check("/d/s-{000000..999999}.tar", 0, &c, NULL) ==
              SIO_OK);
    CHECK_EQ_U64(c.names, UINT64_C(12000000));
    CHECK_EQ_U64(c.specs, 12);
}

int main(void)
{
    test_count();
    test_iter();
    test_hosts();
    test_source_check();
    CHECK_MAIN_END();
}
