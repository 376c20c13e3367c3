/*
 * crc32c.c — CRC-32C, reflected polynomial 0x82F63B78 (crc32c.h has the
 * contract).
 *
 * The table version reads 8 bytes per step (slicing by 8). The hardware
 * version runs the crc32 instruction on 8 bytes at a time; an instruction
 * takes 3 cycles but a new one can start every cycle, so long inputs are
 * cut into blocks of three lanes of LANE bytes that run side by side, and
 * the lanes' sums are joined with "append LANE zero bytes" tables: the
 * register after A then B is shift(reg(A), |B|) ^ reg_from_0(B), the CRC
 * being linear over GF(2).
 *
 * Threading: the tables are built once (pthread_once) and only read after.
 */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_X86 1
#include <nmmintrin.h>
#endif

#define POLY 0x82F63B78u
/* Bytes per lane of the interleaved loop (a multiple of 8): three lanes
 * cover a 4 KiB block (the cache's) but for 16 bytes. */
#define LANE 1360u

static uint32_t tab[8][256];
/* shift[k][b]: the register b << 8k followed by LANE zero bytes. */
static uint32_t shift[4][256];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int have_hw;

/* Append n zero bytes to register r, one bit at a time (table setup). */
static uint32_t zeros_slow(uint32_t r, size_t n)
{
    for (size_t i = 0; i < n * 8; i++)
        r = r & 1 ? (r >> 1) ^ POLY : r >> 1;
    return r;
}

static void init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int k = 0; k < 8; k++)
            r = r & 1 ? (r >> 1) ^ POLY : r >> 1;
        tab[0][b] = r;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int t = 1; t < 8; t++)
            tab[t][b] = (tab[t - 1][b] >> 8) ^ tab[0][tab[t - 1][b] & 0xff];
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            shift[k][b] = zeros_slow(b << (8 * k), LANE);
#ifdef CRC32C_X86
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* The raw register (no pre/post inversion) over p[0..n). */
static uint32_t sw_raw(uint32_t r, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        r = (r >> 8) ^ tab[0][(r ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= r;
        r = tab[7][lo & 0xff] ^ tab[6][(lo >> 8) & 0xff] ^
            tab[5][(lo >> 16) & 0xff] ^ tab[4][lo >> 24] ^
            tab[3][hi & 0xff] ^ tab[2][(hi >> 8) & 0xff] ^
            tab[1][(hi >> 16) & 0xff] ^ tab[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        r = (r >> 8) ^ tab[0][(r ^ *p++) & 0xff];
    return r;
}

uint32_t sio_crc32c_sw(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
    return ~sw_raw(~crc, p, n);
}

#ifdef CRC32C_X86
static uint32_t lane_shift(uint32_t r)
{
    return shift[0][r & 0xff] ^ shift[1][(r >> 8) & 0xff] ^
           shift[2][(r >> 16) & 0xff] ^ shift[3][r >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t
hw_raw(uint32_t r, const unsigned char *p, size_t n)
{
    uint64_t a = r;
    while (n && ((uintptr_t)p & 7)) {
        a = _mm_crc32_u8((uint32_t)a, *p++);
        n--;
    }
    while (n >= 3 * LANE) {
        uint64_t b = 0, c = 0;
        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t x, y, z;
            memcpy(&x, p + i, 8);
            memcpy(&y, p + LANE + i, 8);
            memcpy(&z, p + 2 * LANE + i, 8);
            a = _mm_crc32_u64(a, x);
            b = _mm_crc32_u64(b, y);
            c = _mm_crc32_u64(c, z);
        }
        a = lane_shift(lane_shift((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * LANE;
        n -= 3 * LANE;
    }
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        a = _mm_crc32_u64(a, x);
        p += 8;
        n -= 8;
    }
    while (n--)
        a = _mm_crc32_u8((uint32_t)a, *p++);
    return (uint32_t)a;
}
#endif

uint32_t sio_crc32c_hw(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
#ifdef CRC32C_X86
    if (have_hw)
        return ~hw_raw(~crc, p, n);
#endif
    return ~sw_raw(~crc, p, n);
}

int sio_crc32c_hw_available(void)
{
    pthread_once(&once, init);
    return have_hw;
}

uint32_t sio_crc32c(uint32_t crc, const void *p, size_t n)
{
    return sio_crc32c_hw(crc, p, n);
}
