/*
 * test_url.c — splitting http(s)/s3 URLs and redacting them for messages.
 */
#include "check.h"
#include "store/url.h"

static void parses(const char *in, const char *scheme, const char *host,
                   unsigned port, const char *path, int ipv6)
{
    sio_url u;
    sio_error e;
    CHECK(sio_url_parse(in, &u, &e) == SIO_OK);
    CHECK_STR(u.scheme, scheme);
    CHECK_STR(u.host, host);
    CHECK_EQ_U64(u.port, port);
    CHECK_STR(u.path, path);
    CHECK_EQ_U64(u.ipv6, ipv6);
    sio_url_free(&u);
}

static void refuses(const char *in, sio_code want)
{
    sio_url u;
    sio_error e;
    CHECK(sio_url_parse(in, &u, &e) == want);
    CHECK(u.host == NULL && u.path == NULL);
}

int main(void)
{
    char buf[256];
    sio_url u;
    sio_error e;

    parses("http://example.com/a/b.tar", "http", "example.com", 0, "/a/b.tar",
           0);
    parses("HTTPS://h:8443/x?y=1#frag", "https", "h", 8443, "/x?y=1", 0);
    parses("http://h", "http", "h", 0, "/", 0);
    parses("http://h?q=1", "http", "h", 0, "/?q=1", 0);
    parses("http://[::1]:9000/p", "http", "::1", 9000, "/p", 1);
    parses("http://user:pw@h/p", "http", "h", 0, "/p", 0);
    /* s3 keys are raw: '?', '#' and spaces belong to the key */
    parses("s3://bucket/dir/a b?c#d.tar", "s3", "bucket", 0,
           "/dir/a b?c#d.tar", 0);
    parses("s3://bucket", "s3", "bucket", 0, "/", 0);

    refuses("no-scheme/path", SIO_ERR_INVALID);
    refuses("http:///path", SIO_ERR_INVALID);
    refuses("http://h:0/", SIO_ERR_INVALID);
    refuses("http://h:65536/", SIO_ERR_INVALID);
    refuses("http://h:12a/", SIO_ERR_INVALID);
    refuses("http://[::1/", SIO_ERR_INVALID);
    refuses("http://h/a b", SIO_ERR_INVALID);
    refuses("http://h/a\r\nX: y", SIO_ERR_INVALID);
    refuses("s3://b/a\nb", SIO_ERR_INVALID);
    {
        char host[300], url[400];
        memset(host, 'a', 299);
        host[299] = '\0';
        snprintf(url, sizeof url, "http://%s/", host);
        refuses(url, SIO_ERR_LIMIT);
    }
    {
        char *big = malloc(SIO_URL_MAX + 20);
        memcpy(big, "http://h/", 9);
        memset(big + 9, 'x', SIO_URL_MAX + 5);
        big[SIO_URL_MAX + 14] = '\0';
        refuses(big, SIO_ERR_LIMIT);
        free(big);
    }

    /* authority */
    CHECK(sio_url_parse("http://[fd00::1]:81/", &u, &e) == SIO_OK);
    sio_url_authority(&u, buf, sizeof buf);
    CHECK_STR(buf, "[fd00::1]:81");
    sio_url_free(&u);
    CHECK(sio_url_parse("http://h.example/", &u, &e) == SIO_OK);
    sio_url_authority(&u, buf, sizeof buf);
    CHECK_STR(buf, "h.example");
    CHECK(u.userinfo == 0);
    sio_url_free(&u);

    /* local / IP endpoints pick path-style addressing */
    CHECK(sio_url_host_is_local_or_ip("127.0.0.1"));
    CHECK(sio_url_host_is_local_or_ip("::1"));
    CHECK(sio_url_host_is_local_or_ip("localhost"));
    CHECK(sio_url_host_is_local_or_ip("minio.localhost"));
    CHECK(!sio_url_host_is_local_or_ip("s3.us-east-1.amazonaws.com"));
    CHECK(!sio_url_host_is_local_or_ip("1.2.3.4.example"));

    /* redaction: no user info, no credential query value */
    sio_url_redact("https://user:secret@h/p?X-Amz-Signature=abc", buf,
                   sizeof buf);
    CHECK_STR(buf, "https://***@h/p?X-Amz-Signature=***");
    sio_url_redact("s3://b/k?x", buf, sizeof buf);
    CHECK_STR(buf, "s3://b/k?x");
    sio_url_redact("http://h/a\tb", buf, sizeof buf);
    CHECK_STR(buf, "http://h/a%09b");
    /* Found by fuzz_redact: a control byte shown as '?' made the rest of
     * the path look like an unmasked query. */
    sio_url_redact("http://a:b@h:9/x.tar\037token=t", buf, sizeof buf);
    CHECK_STR(buf, "http://***@h:9/x.tar%1Ftoken=t");
    /* Found by fuzz_redact: user information of a URL nested in a path. */
    sio_url_redact("http://http://a:b@h:9/x.tar?to", buf, sizeof buf);
    CHECK_STR(buf, "http://http://***@h:9/x.tar?to");
    sio_url_redact("https://h/p/https://u:p@o/y", buf, sizeof buf);
    CHECK_STR(buf, "https://h/p/https://***@o/y");
    /* Found by fuzz_redact: a presigned URL nested in a query value. */
    sio_url_redact("http://h/a?next=https://o/b?sig=2&e=https%3A%2F%2Fo%3Fsig%3D3"
                   "&t=10:30", buf, sizeof buf);
    CHECK_STR(buf, "http://h/a?next=***&e=***&t=10:30");
    sio_url_redact("http://h/a?https://u:p@o/b&x=1", buf, sizeof buf);
    CHECK_STR(buf, "http://h/a?***&x=1");
    sio_url_redact("s3://b/k//u:p@x/y", buf, sizeof buf);
    CHECK_STR(buf, "s3://b/k//***@x/y");
    sio_url_redact("http://h/abcdef", buf, 10);
    CHECK_STR(buf, "http://h/");
    /* an '@' in the path is not user info */
    sio_url_redact("http://h/a@b", buf, sizeof buf);
    CHECK_STR(buf, "http://h/a@b");

    /* Issue 12: credential query values are masked, the rest kept. */
    sio_url_redact("https://h/b/s.tar?X-Amz-Algorithm=A&X-Amz-Credential=AKIA"
                   "&X-Amz-Signature=s1&versionId=7#tok", buf, sizeof buf);
    CHECK_STR(buf, "https://h/b/s.tar?X-Amz-Algorithm=***&X-Amz-Credential=***"
                   "&X-Amz-Signature=***&versionId=7#***");
    sio_url_redact("http://h/x?sig=a&se=b&token=c&api_key=d&Key-Pair-Id=e"
                   "&Signature=f&Policy=g&X%2DAmz%2DSecurity-Token=h&part=2",
                   buf, sizeof buf);
    CHECK_STR(buf, "http://h/x?sig=***&se=***&token=***&api_key=***"
                   "&Key-Pair-Id=***&Signature=***&Policy=***"
                   "&X%2DAmz%2DSecurity-Token=***&part=2");
    sio_url_redact("http://h/x?next=https://u:p@o/&n=https%3A%2F%2Fu%40o",
                   buf, sizeof buf);
    CHECK_STR(buf, "http://h/x?next=***&n=***");
    sio_url_redact("http://u:p@[::1]:9/x?password", buf, sizeof buf);
    CHECK_STR(buf, "http://***@[::1]:9/x?password");
    CHECK(sio_url_param_is_credential("X-Amz-Date", 10));
    CHECK(sio_url_param_is_credential("access_token", 12));
    CHECK(!sio_url_param_is_credential("partNumber", 10));
    /* Free text: every URL, sources joined by "::", quotes end a URL. */
    sio_redact_text("shard failed url=https://a:b@h/s.tar?token=T1 code=io: "
                    "GET \"http://h2/y?X-Amz-Signature=T2\" ok\n",
                    buf, sizeof buf);
    CHECK_STR(buf, "shard failed url=https://***@h/s.tar?token=*** code=io: "
                   "GET \"http://h2/y?X-Amz-Signature=***\" ok\n");
    sio_redact_text("http://u:p@h/a?k=1::https://v:q@[::1]/b?sig=2", buf,
                    sizeof buf);
    CHECK_STR(buf, "http://***@h/a?k=***");
    sio_redact_text("http://u:p@h/a::https://v:q@[::1]/b?sig=2", buf,
                    sizeof buf);
    CHECK_STR(buf, "http://***@h/a::https://***@[::1]/b?sig=***");
    sio_redact_text("key s3://b/k,https://h/o?X-Amz-Signature=z end", buf,
                    sizeof buf);
    CHECK_STR(buf, "key s3://b/k,https://h/o?X-Amz-Signature=*** end");
    sio_redact_text("no url here", buf, 4);
    CHECK_STR(buf, "no ");
    CHECK_MAIN_END();
}
