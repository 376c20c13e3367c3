/*
 * tarhdr.c — one ustar header block (contract in include/shardio_tarhdr.h).
 *
 * The lowest layer's tar writer: the stream encoder (wire/tarwrite.c) and
 * the virtual shards of an object set (store/objset.c) both write their
 * member headers with it, so neither reaches into the other's layer.
 */
#include "shardio_tarhdr.h"

#include <stdio.h>
#include <string.h>

/* ustar header layout (POSIX.1-1988 / pax). */
#define OFF_NAME 0
#define LEN_NAME 100
#define OFF_MODE 100
#define OFF_UID 108
#define OFF_GID 116
#define OFF_SIZE 124
#define LEN_SIZE 12
#define OFF_MTIME 136
#define OFF_CHKSUM 148
#define OFF_TYPEFLAG 156
#define OFF_MAGIC 257
#define OFF_VERSION 263
#define OFF_PREFIX 345
#define LEN_PREFIX 155

/* 8^11: the first size that no longer fits 11 octal digits (8 GiB). */
#define OCTAL_SIZE_LIMIT (UINT64_C(1) << 33)

/* Write v as zero-padded octal in width-1 digits plus a NUL. */
static void put_octal(unsigned char *field, size_t width, uint64_t v)
{
    field[width - 1] = '\0';
    for (size_t i = width - 1; i-- > 0;) {
        field[i] = (unsigned char)('0' + (v & 7));
        v >>= 3;
    }
}

/* Where the name can be split into prefix "/" name: the index of the slash,
 * or (size_t)-1 when it cannot. Names of at most 100 bytes need no split
 * (returns len). */
static size_t split_point(const char *name, size_t len)
{
    if (len <= LEN_NAME)
        return len;
    if (len > LEN_PREFIX + 1 + LEN_NAME)
        return (size_t)-1;
    /* The rightmost slash that keeps the prefix within 155 bytes leaves the
     * shortest name part; if even that is too long, nothing fits. */
    size_t i = len - 1 < LEN_PREFIX ? len - 1 : LEN_PREFIX;
    for (;; i--) {
        if (name[i] == '/') {
            size_t rest = len - i - 1;
            if (rest >= 1 && rest <= LEN_NAME)
                return i;
            return (size_t)-1;
        }
        if (i == 0)
            break;
    }
    return (size_t)-1;
}

int sio_tar_name_fits(const char *name, size_t name_len)
{
    return split_point(name, name_len) != (size_t)-1;
}

void sio_tar_header(unsigned char block[SIO_TAR_BLOCK], const char *name,
                    size_t name_len, char typeflag, uint64_t size, int *fits)
{
    memset(block, 0, SIO_TAR_BLOCK);
    size_t sp = split_point(name, name_len);
    if (sp == name_len) {
        memcpy(block + OFF_NAME, name, name_len);
        *fits = 1;
    } else if (sp != (size_t)-1) {
        memcpy(block + OFF_PREFIX, name, sp);
        memcpy(block + OFF_NAME, name + sp + 1, name_len - sp - 1);
        *fits = 1;
    } else {
        /* Placeholder for readers without pax: the leading bytes, cut at a
         * UTF-8 character boundary. The pax path= record is authoritative. */
        size_t n = LEN_NAME;
        while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
            n--;
        memcpy(block + OFF_NAME, name, n);
        *fits = 0;
    }
    put_octal(block + OFF_MODE, 8, 0644);
    put_octal(block + OFF_UID, 8, 0);
    put_octal(block + OFF_GID, 8, 0);
    if (size < OCTAL_SIZE_LIMIT) {
        put_octal(block + OFF_SIZE, LEN_SIZE, size);
    } else {
        /* GNU/star base-256: high bit of the first byte set, the value big
         * endian in the remaining 11 bytes. */
        block[OFF_SIZE] = 0x80;
        uint64_t v = size;
        for (size_t i = LEN_SIZE - 1; i >= 1; i--) {
            block[OFF_SIZE + i] = (unsigned char)(v & 0xFF);
            v >>= 8;
        }
    }
    put_octal(block + OFF_MTIME, 12, 0);
    block[OFF_TYPEFLAG] = (unsigned char)typeflag;
    memcpy(block + OFF_MAGIC, "ustar", 6); /* with its NUL */
    memcpy(block + OFF_VERSION, "00", 2);

    /* Checksum: sum of all bytes with the checksum field read as spaces,
     * stored as six octal digits, NUL, space. */
    memset(block + OFF_CHKSUM, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < SIO_TAR_BLOCK; i++)
        sum += block[i];
    put_octal(block + OFF_CHKSUM, 7, sum);
    block[OFF_CHKSUM + 7] = ' ';
}

size_t sio_tar_pax_path_len(size_t nlen)
{
    size_t body = 1 + 5 + nlen + 1; /* ' ' "path=" name '\n' */
    size_t len = body + 1, digits;
    for (;;) {
        digits = (size_t)snprintf(NULL, 0, "%zu", len);
        if (body + digits == len)
            return len;
        len = body + digits;
    }
}
