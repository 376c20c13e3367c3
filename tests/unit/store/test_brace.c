/* test_brace.c — brace-pattern expansion (shardio/store/brace.c). */
#include "check.h"
#include "shardio.h"

static void expect(const char *pat, size_t n, const char *first,
                   const char *last)
{
    char **v = NULL;
    size_t got = 0;
    sio_error e;
    sio_code rc = sio_brace_expand(pat, 0, &v, &got, &e);
    CHECK(rc == SIO_OK);
    CHECK_EQ_U64(got, n);
    if (rc == SIO_OK && got == n && n > 0) {
        CHECK_STR(v[0], first);
        CHECK_STR(v[n - 1], last);
    }
    sio_strv_free(v, got);
}

static void expect_err(const char *pat, size_t max, sio_code want)
{
    char **v = NULL;
    size_t got = 0;
    sio_error e;
    sio_code rc = sio_brace_expand(pat, max, &v, &got, &e);
    CHECK(rc == want);
    CHECK(v == NULL && got == 0);
    sio_strv_free(v, got);
}

int main(void)
{
    expect("/data/train-{000..127}.tar", 128, "/data/train-000.tar",
           "/data/train-127.tar");
    expect("s-{0..10}.tar", 11, "s-0.tar", "s-10.tar");
    expect("s-{8..12}.tar", 5, "s-8.tar", "s-12.tar");
    /* zero padding to the wider bound */
    expect("s-{0..0100}.tar", 101, "s-0000.tar", "s-0100.tar");
    expect("s-{09..10}.tar", 2, "s-09.tar", "s-10.tar");
    /* descending range in written order */
    expect("s-{3..1}", 3, "s-3", "s-1");
    /* alternatives, empty alternative */
    expect("{a,b,c}.tar", 3, "a.tar", "c.tar");
    expect("x{,y}.tar", 2, "x.tar", "xy.tar");
    /* several braces: leftmost varies slowest */
    expect("d{0..1}/s{00..02}.tar", 6, "d0/s00.tar", "d1/s02.tar");
    {
        char **v = NULL;
        size_t n = 0;
        CHECK(sio_brace_expand("{a,b}{1..2}", 0, &v, &n, NULL) == SIO_OK);
        CHECK_EQ_U64(n, 4);
        if (n == 4) {
            CHECK_STR(v[0], "a1");
            CHECK_STR(v[1], "a2");
            CHECK_STR(v[2], "b1");
            CHECK_STR(v[3], "b2");
        }
        sio_strv_free(v, n);
    }
    /* no braces: the pattern itself */
    expect("plain.tar", 1, "plain.tar", "plain.tar");
    /* braces without ',' or '..' are literal, as in the shell */
    expect("lit{x}.tar", 1, "lit{x}.tar", "lit{x}.tar");
    expect("a{1..x}b", 1, "a{1..x}b", "a{1..x}b");
    /* errors */
    expect_err("s-{0..3", 0, SIO_ERR_INVALID);
    expect_err("s-0..3}", 0, SIO_ERR_INVALID);
    expect_err("s-{a,{b,c}}", 0, SIO_ERR_INVALID);
    expect_err("s-{0..99}", 50, SIO_ERR_LIMIT);
    /* a product that would overflow size_t is a limit error, not a wrap */
    expect_err("{0..999999}{0..999999}{0..999999}{0..999999}", 0,
               SIO_ERR_LIMIT);
    /* 19-digit bounds are refused as ranges (kept literal) */
    expect("{0..9999999999999999999}", 1, "{0..9999999999999999999}",
           "{0..9999999999999999999}");
    CHECK_MAIN_END();
}
