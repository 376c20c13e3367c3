/*
 * fuzz_cacheentry.c — libFuzzer harness for the shard cache's entry
 * reader (shardio/store/cache.c): what a cache directory on disk may
 * claim (sio_cache_entry_parse: the metadata file's text, the sums file's
 * header and length, the data file's length; nothing under state_dir is
 * trusted), and the block check of a range read (sio_cache_check,
 * sio_cache_pread) over any data and sums.
 *
 * Input: u16 LE metadata length, the metadata, u16 LE sums length, the
 * sums file, then the data file; the last 8 bytes (when there are) pick
 * the range read. Besides memory safety it checks what an accepted entry
 * promises: have <= size, have within the data and covered by sums, a
 * block boundary unless complete, complete only with have == size; the
 * URL and validator are NUL-terminated single lines; the parse is
 * deterministic. And the range check agrees with a reference (the table
 * CRC over each block the range touches).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "shardio_cache.h"
#include "store/store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t take16(const uint8_t **p, size_t *n)
{
    if (*n < 2)
        return 0;
    size_t v = (size_t)(*p)[0] | (size_t)(*p)[1] << 8;
    *p += 2;
    *n -= 2;
    return v < *n ? v : *n;
}

static int one_line(const char *s, size_t cap)
{
    size_t l = strnlen(s, cap);
    if (l == cap || l == 0)
        return 0;
    for (size_t i = 0; i < l; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

/* The reference: do the blocks of [off, off + len) match their sums? */
static int blocks_ok(const uint8_t *d, uint64_t size, const uint8_t *sums,
                     size_t slen, uint64_t off, size_t len)
{
    if (len == 0)
        return 1;
    for (uint64_t b = off / SIO_CACHE_BLOCK; b <= (off + len - 1) / SIO_CACHE_BLOCK;
         b++) {
        uint64_t bs = b * SIO_CACHE_BLOCK;
        uint64_t be = bs + SIO_CACHE_BLOCK < size ? bs + SIO_CACHE_BLOCK : size;
        uint64_t at = SIO_CACHE_SUMS_HDR + 4 * b;
        if (at + 4 > slen)
            return 0;
        uint32_t want = (uint32_t)sums[at] | (uint32_t)sums[at + 1] << 8 |
                        (uint32_t)sums[at + 2] << 16 |
                        (uint32_t)sums[at + 3] << 24;
        if (sio_crc32c_sw(0, d + bs, (size_t)(be - bs)) != want)
            return 0;
    }
    return 1;
}

static sio_cache *cache;
static sio_cache_user *user;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sio_cache_entry_info a, b;
    const uint8_t *p = data;
    size_t n = size;
    size_t mlen = take16(&p, &n);
    const char *meta = (const char *)p;
    p += mlen;
    n -= mlen;
    size_t slen = take16(&p, &n);
    const uint8_t *sums = p;
    p += slen;
    n -= slen;
    const uint8_t *d = p;
    size_t dlen = n;

    int ra = sio_cache_entry_parse(meta, mlen, sums, slen, slen, dlen, &a);
    int rb = sio_cache_entry_parse(meta, mlen, sums, slen, slen, dlen, &b);
    if (ra != rb || (ra == 0 && memcmp(&a, &b, sizeof a) != 0))
        abort();
    if (ra == 0) {
        if (a.have > a.size || a.have > dlen || a.size > SIO_CACHE_BYTES_MAX ||
            (a.complete && a.have != a.size) ||
            (!a.complete && a.have % SIO_CACHE_BLOCK != 0) ||
            SIO_CACHE_SUMS_HDR + 4 * ((a.have + SIO_CACHE_BLOCK - 1) /
                                      SIO_CACHE_BLOCK) > slen ||
            !one_line(a.url, sizeof a.url) ||
            !one_line(a.validator, sizeof a.validator))
            abort();
    }

    /* A range of the data checked against the sums, as an entry's reader
     * would (whatever the metadata said). */
    if (dlen < 8 || slen < SIO_CACHE_SUMS_HDR)
        return 0;
    if (!cache) {
        sio_cache_config cc = {0};
        sio_error e;
        cc.budget = 1 << 20;
        if (sio_cache_create(&cc, &cache, &e) != SIO_OK ||
            sio_cache_user_create(cache, &user) != SIO_OK)
            abort();
    }
    uint64_t pick;
    memcpy(&pick, d + dlen - 8, 8);
    uint64_t off = (pick & 0xffff) % dlen;
    size_t len = (size_t)((pick >> 16 & 0xffff) % (dlen - off + 1));
    int dfd = memfd_create("fz-data", MFD_CLOEXEC);
    int sfd = memfd_create("fz-sums", MFD_CLOEXEC);
    if (dfd < 0 || sfd < 0 || write(dfd, d, dlen) != (ssize_t)dlen ||
        write(sfd, sums, slen) != (ssize_t)slen)
        abort();
    char msg[256];
    unsigned char *buf = malloc(len ? len : 1);
    int want = blocks_ok(d, dlen, sums, slen, off, len);
    int got = sio_cache_check(user, "fuzz://x", dfd, sfd, dlen, off, NULL,
                              len, msg, sizeof msg) == SIO_OK;
    if (got != want)
        abort();
    got = sio_cache_pread(user, "fuzz://x", dfd, sfd, dlen, buf, len, off,
                          NULL, msg, sizeof msg) == SIO_OK;
    if (got != want || (got && len && memcmp(buf, d + off, len) != 0))
        abort();
    /* The same range in two pieces, the second going on from the block
     * the first kept: the same bytes when both pass. */
    static sio_cache_carry carry;
    size_t half = len / 2;
    memset(&carry, 0, sizeof carry);
    got = sio_cache_pread(user, "fuzz://x", dfd, sfd, dlen, buf, half, off,
                          &carry, msg, sizeof msg) == SIO_OK &&
          sio_cache_pread(user, "fuzz://x", dfd, sfd, dlen, buf + half,
                          len - half, off + half, &carry, msg,
                          sizeof msg) == SIO_OK;
    if (got != want || (got && len && memcmp(buf, d + off, len) != 0))
        abort();
    free(buf);
    close(dfd);
    close(sfd);
    return 0;
}
