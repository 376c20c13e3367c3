/*
 * test_units.c — libshardio's parser of counts, sizes and durations
 * (shardio/core/units.c), which shardcastd's settings and the shardcast command
 * both read their numbers with.
 */
#include <stdint.h>

#include "check.h"
#include "shardio_units.h"

static uint64_t val(const char *s, sio_unit_kind k)
{
    uint64_t v = UINT64_C(0xdeadbeef);
    CHECK(sio_parse_units(s, k, &v, NULL) == 0);
    return v;
}

static int bad(const char *s, sio_unit_kind k)
{
    uint64_t v = 7;
    int rc = sio_parse_units(s, k, &v, NULL);
    CHECK(v == 7); /* untouched on error */
    return rc == -1;
}

int main(void)
{
    /* counts */
    CHECK_EQ_U64(val("0", SIO_UNIT_COUNT), 0);
    CHECK_EQ_U64(val("18446744073709551615", SIO_UNIT_COUNT), UINT64_MAX);
    CHECK(bad("18446744073709551616", SIO_UNIT_COUNT));
    CHECK(bad("", SIO_UNIT_COUNT) && bad("-1", SIO_UNIT_COUNT));
    CHECK(bad("+1", SIO_UNIT_COUNT) && bad(" 1", SIO_UNIT_COUNT));
    CHECK(bad("1k", SIO_UNIT_COUNT) && bad("1s", SIO_UNIT_COUNT));
    CHECK(sio_parse_units(NULL, SIO_UNIT_COUNT, &(uint64_t){0}, NULL) == -1);

    /* sizes: binary, case-insensitive, Kubernetes quantities */
    CHECK_EQ_U64(val("256Mi", SIO_UNIT_BYTES), 256ull << 20);
    CHECK_EQ_U64(val("256MiB", SIO_UNIT_BYTES), 256ull << 20);
    CHECK_EQ_U64(val("256m", SIO_UNIT_BYTES), 256ull << 20);
    CHECK_EQ_U64(val("2Gi", SIO_UNIT_BYTES), 2ull << 30);
    CHECK_EQ_U64(val("2gb", SIO_UNIT_BYTES), 2ull << 30);
    CHECK_EQ_U64(val("64KiB", SIO_UNIT_BYTES), 64ull << 10);
    CHECK_EQ_U64(val("1T", SIO_UNIT_BYTES), 1ull << 40);
    CHECK_EQ_U64(val("100B", SIO_UNIT_BYTES), 100);
    CHECK_EQ_U64(val("100", SIO_UNIT_BYTES), 100);
    CHECK(bad("1.5Gi", SIO_UNIT_BYTES) && bad("1 Gi", SIO_UNIT_BYTES));
    CHECK(bad("1Pi", SIO_UNIT_BYTES) && bad("5s", SIO_UNIT_BYTES));
    CHECK(bad("20000000T", SIO_UNIT_BYTES)); /* 64-bit overflow */

    /* durations in ms: bare number ms; ms/s/m/h, lower case */
    CHECK_EQ_U64(val("500", SIO_UNIT_MS), 500);
    CHECK_EQ_U64(val("500ms", SIO_UNIT_MS), 500);
    CHECK_EQ_U64(val("30s", SIO_UNIT_MS), 30000);
    CHECK_EQ_U64(val("5m", SIO_UNIT_MS), 300000);
    CHECK_EQ_U64(val("1h", SIO_UNIT_MS), 3600000);
    CHECK(bad("5M", SIO_UNIT_MS) && bad("1d", SIO_UNIT_MS));
    CHECK(bad("3Mi", SIO_UNIT_MS) && bad("1.5s", SIO_UNIT_MS));

    /* durations in s: bare number s; whole seconds only */
    CHECK_EQ_U64(val("30", SIO_UNIT_SECS), 30);
    CHECK_EQ_U64(val("30s", SIO_UNIT_SECS), 30);
    CHECK_EQ_U64(val("2000ms", SIO_UNIT_SECS), 2);
    CHECK_EQ_U64(val("5m", SIO_UNIT_SECS), 300);
    CHECK(bad("1500ms", SIO_UNIT_SECS));

    /* had_unit tells a bare number from one with a suffix */
    uint64_t v;
    int u = -1;
    CHECK(sio_parse_units("60000", SIO_UNIT_MS, &v, &u) == 0 && u == 0);
    CHECK(sio_parse_units("60s", SIO_UNIT_MS, &v, &u) == 0 && u == 1);

    CHECK(strstr(sio_units_describe(SIO_UNIT_BYTES), "Ki/Mi/Gi/Ti") != NULL);
    CHECK(strstr(sio_units_describe(SIO_UNIT_MS), "500ms") != NULL);
    CHECK_MAIN_END();
}
