/*
 * test_chain.c — the output chain (sio_wchain, include/shardio_wire.h):
 * copied, referenced and file pieces drained in order, in buffers of every
 * size from 1 byte up; copies that follow each other merge into one piece;
 * a file piece's bytes come from the reader at the piece's offset, and a
 * failing read stops the drain where it is (and a later drain goes on from
 * there); the piece limit and the copy limit; reset (and its shrink).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shardio.h"
#include "shardio_wire.h"

/* The "file": byte i of fd f is (f * 31 + i) & 0xff; reads fail once
 * fail_at bytes have been read in all. */
typedef struct rd {
    size_t read, fail_at;
    int calls;
} rd;

static sio_code read_fn(void *ud, int fd, void *buf, size_t n, uint64_t off)
{
    rd *r = ud;
    r->calls++;
    if (r->read + n > r->fail_at)
        return SIO_ERR_CHANGED;
    unsigned char *p = buf;
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((fd * 31 + off + i) & 0xff);
    r->read += n;
    return SIO_OK;
}

/* The bytes the chain below stands for. */
static size_t expected(unsigned char *out, const unsigned char *ref)
{
    size_t n = 0;
    memcpy(out + n, "head", 4), n += 4;
    memcpy(out + n, "er1", 3), n += 3;
    memcpy(out + n, ref, 100), n += 100;
    for (size_t i = 0; i < 700; i++)
        out[n++] = (unsigned char)((3 * 31 + 5000 + i) & 0xff);
    memcpy(out + n, "tail", 4), n += 4;
    return n;
}

static void build(sio_wchain *c, const unsigned char *ref)
{
    CHECK(sio_wchain_copy(c, "head", 4) == SIO_OK);
    CHECK(sio_wchain_copy(c, "er1", 3) == SIO_OK); /* merges */
    CHECK(sio_wchain_copy(c, "", 0) == SIO_OK);     /* nothing */
    CHECK(sio_wchain_ref(c, ref, 100) == SIO_OK);
    CHECK(sio_wchain_file(c, 3, 5000, 700) == SIO_OK);
    CHECK(sio_wchain_copy(c, "tail", 4) == SIO_OK);
}

static void test_drain_in_every_size(void)
{
    unsigned char ref[100], want[1000], got[1000];
    for (int i = 0; i < 100; i++)
        ref[i] = (unsigned char)(200 - i);
    size_t total = expected(want, ref);
    for (size_t step = 1; step <= total + 1; step++) {
        sio_wchain c;
        sio_wchain_init(&c, 1 << 10, 16);
        build(&c, ref);
        CHECK(c.n == 4); /* head+er1, ref, file, tail */
        CHECK(sio_wchain_used(&c) && sio_wchain_pending(&c));
        rd r = {0, SIZE_MAX, 0};
        size_t n = 0;
        while (sio_wchain_pending(&c)) {
            sio_code rc;
            size_t k = sio_wchain_drain(&c, got + n, step, read_fn, &r, &rc);
            CHECK(rc == SIO_OK);
            CHECK(k > 0 && k <= step);
            n += k;
            if (n > total)
                break;
        }
        CHECK_EQ_U64(n, total);
        CHECK(memcmp(got, want, total) == 0);
        CHECK_EQ_U64(r.read, 700);
        sio_code rc;
        CHECK(sio_wchain_drain(&c, got, 10, read_fn, &r, &rc) == 0 &&
              rc == SIO_OK);
        CHECK(sio_wchain_used(&c) && !sio_wchain_pending(&c));
        sio_wchain_reset(&c, SIZE_MAX);
        CHECK(!sio_wchain_used(&c) && !sio_wchain_pending(&c));
        sio_wchain_free(&c);
    }
}

static void test_failed_read_stops(void)
{
    unsigned char ref[100] = {0}, got[1000], want[1000];
    size_t total = expected(want, ref);
    sio_wchain c;
    sio_wchain_init(&c, 1 << 10, 16);
    build(&c, ref);
    rd r = {0, 300, 0};
    sio_code rc;
    /* head, ref, then the file piece fails on its first read of 700 */
    size_t n = sio_wchain_drain(&c, got, sizeof got, read_fn, &r, &rc);
    CHECK(rc == SIO_ERR_CHANGED);
    CHECK_EQ_U64(n, 107);
    CHECK(memcmp(got, want, 107) == 0);
    CHECK(sio_wchain_pending(&c));
    /* in smaller reads it goes on to where the reader fails */
    size_t m = sio_wchain_drain(&c, got + n, 200, read_fn, &r, &rc);
    CHECK(rc == SIO_OK && m == 200);
    m = sio_wchain_drain(&c, got + n + 200, 200, read_fn, &r, &rc);
    CHECK(rc == SIO_ERR_CHANGED && m == 0);
    r.fail_at = SIZE_MAX;
    size_t k = n + 200;
    while (sio_wchain_pending(&c)) {
        m = sio_wchain_drain(&c, got + k, 64, read_fn, &r, &rc);
        CHECK(rc == SIO_OK && m > 0);
        k += m;
        if (k > total)
            break;
    }
    CHECK_EQ_U64(k, total);
    CHECK(memcmp(got, want, total) == 0);
    /* a file piece with no reader stops the drain too */
    sio_wchain_reset(&c, SIZE_MAX);
    CHECK(sio_wchain_file(&c, 1, 0, 10) == SIO_OK);
    CHECK(sio_wchain_drain(&c, got, 10, NULL, NULL, &rc) == 0 &&
          rc == SIO_ERR_INVALID);
    sio_wchain_free(&c);
}

static void test_limits(void)
{
    sio_wchain c;
    unsigned char x[64] = {0};
    sio_wchain_init(&c, 100, 3);
    CHECK(sio_wchain_ref(&c, x, 1) == SIO_OK);
    CHECK(sio_wchain_copy(&c, x, 60) == SIO_OK);
    CHECK(sio_wchain_ref(&c, x, 1) == SIO_OK);
    CHECK(sio_wchain_ref(&c, x, 1) == SIO_ERR_LIMIT);  /* 3 pieces */
    CHECK(sio_wchain_copy(&c, x, 1) == SIO_ERR_LIMIT); /* a 4th piece */
    sio_wchain_reset(&c, SIZE_MAX);
    CHECK(sio_wchain_copy(&c, x, 60) == SIO_OK);
    CHECK(sio_wchain_copy(&c, x, 41) == SIO_ERR_LIMIT); /* copy max 100 */
    CHECK(sio_wchain_copy(&c, x, 40) == SIO_OK);        /* merges: 100 */
    CHECK(c.n == 1);
    /* reset frees a copy buffer grown above keep */
    CHECK(c.copy.cap >= 100);
    sio_wchain_reset(&c, 64);
    CHECK(c.copy.cap == 0 && c.copy.data == NULL && c.copy.max == 100);
    CHECK(sio_wchain_copy(&c, x, 10) == SIO_OK);
    sio_wchain_free(&c);
    sio_wchain_free(&c); /* twice: harmless */
}

int main(void)
{
    test_drain_in_every_size();
    test_failed_read_stops();
    test_limits();
    CHECK_MAIN_END();
}
