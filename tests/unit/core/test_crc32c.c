/*
 * test_crc32c.c — CRC-32C (shardio/core/crc32c.c), the checksum of the
 * shard cache's blocks: known vectors (RFC 3720 B.4), the table and the
 * crc32-instruction versions against each other at every length and
 * alignment around the interleaved loop's block, and continuation
 * (a sum over a split input). Prints both versions' throughput (not
 * checked: machines differ).
 */
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "core/crc32c.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void vectors(uint32_t (*f)(uint32_t, const void *, size_t))
{
    unsigned char b[32];
    CHECK_EQ_U64(f(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_U64(f(0, "", 0), 0);
    memset(b, 0, sizeof b);
    CHECK_EQ_U64(f(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, sizeof b);
    CHECK_EQ_U64(f(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)i;
    CHECK_EQ_U64(f(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)(31 - i);
    CHECK_EQ_U64(f(0, b, 32), 0x113FDB5Cu);
}

static void throughput(const char *name,
                       uint32_t (*f)(uint32_t, const void *, size_t),
                       const unsigned char *buf, size_t n)
{
    uint32_t acc = 0;
    int reps = 64;
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        acc ^= f(acc, buf, n);
    double t = now_s() - t0;
    printf("crc32c %s: %.0f MB/s (%08x)\n", name,
           t > 0 ? (double)n * reps / t / 1e6 : 0.0, (unsigned)acc);
}

int main(void)
{
    enum { N = 3 * 1024 * 4 + 64 };
    static unsigned char buf[N + 16];
    static unsigned char big[1 << 20];
    uint64_t x = 88172645463325252ull;

    vectors(sio_crc32c_sw);
    vectors(sio_crc32c_hw);
    vectors(sio_crc32c);
    for (size_t i = 0; i < sizeof buf; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    /* Every length up to a few interleaved blocks, at every alignment. */
    for (size_t al = 0; al < 8; al++)
        for (size_t n = 0; n <= N; n += n < 80 ? 1 : 61) {
            uint32_t s = sio_crc32c_sw(0, buf + al, n);
            CHECK_EQ_U64(sio_crc32c_hw(0, buf + al, n), s);
            size_t k = n / 3;
            CHECK_EQ_U64(sio_crc32c(sio_crc32c(0, buf + al, k), buf + al + k,
                                    n - k), s);
            CHECK_EQ_U64(sio_crc32c_sw(sio_crc32c_sw(0, buf + al, k),
                                       buf + al + k, n - k), s);
        }
    printf("crc32c: crc32 instruction %s\n",
           sio_crc32c_hw_available() ? "used" : "not available");
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (unsigned char)(i * 131 + (i >> 9));
    CHECK_EQ_U64(sio_crc32c_hw(0, big, sizeof big),
                 sio_crc32c_sw(0, big, sizeof big));
    throughput("table", sio_crc32c_sw, big, sizeof big);
    throughput("hw", sio_crc32c_hw, big, sizeof big);
    CHECK_MAIN_END();
}
