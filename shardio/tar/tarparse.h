/*
 * tarparse.h — the plain tar reader (internal).
 *
 * Reads an uncompressed tar from a sio_stream: ustar, GNU and pax headers,
 * GNU long names ('L'), pax `path` and `size`, following libarchive 3.6's
 * tar reader rule for rule where it takes an entry: the same names, sizes,
 * types, data lengths, header offsets, end of archive, resynchronisation
 * after a damaged lone header, and errors (damaged or truncated archives,
 * refused sizes). It says "unsupported" for what only libarchive
 * interprets (sparse files, ACL and volume headers, pax charsets and
 * non-ASCII paths, more than 32 extension headers
 * in a row, a first block that is not a tar header), so the caller hands
 * that entry to libarchive, from the entry's first header.
 *
 * Member data can be read straight into the caller's memory: bytes already
 * buffered are copied, the rest is read from the stream into the
 * destination.
 *
 * Threading: one reader, one thread at a time. It does not own the stream
 * or the buffer.
 */
#ifndef SHARDIO_TARPARSE_H
#define SHARDIO_TARPARSE_H

#include <stdint.h>

#include "store/store_int.h"

/* Longest name (GNU long name or pax path) the reader assembles. */
#define SIO_TARP_NAME_MAX 4096
/* Longest name a ustar header holds: a 155-byte prefix, '/', 100 bytes. */
#define SIO_TARP_DMG_NAME_MAX 256
/* Largest pax or GNU long-name record it reads. */
#define SIO_TARP_EXT_MAX (1u << 20)

typedef struct sio_tar_entry {
    const char *name;  /* NUL-terminated; valid until the next header */
    uint64_t size;     /* data bytes that follow the header */
    int regular;       /* a regular file (else skipped by the caller) */
    uint64_t hdr_pos;  /* stream offset of its first header block
                          (extension headers included) */
} sio_tar_entry;

typedef struct sio_tar_plain {
    sio_stream *stream;
    unsigned char *buf; /* the caller's read buffer */
    size_t cap, pos, len;
    uint64_t off;       /* stream offset of buf[pos] */
    uint64_t start;     /* where the stream started */
    int seof;           /* the stream ended */
    int need_end;       /* the stream's end is the archive's (not the end
                           of a byte range): ending there without an
                           end-of-archive block is a truncated archive */
    int large;          /* the last regular entry was large */
    int fmt;            /* libarchive's idea of the format (FMT_*) */
    uint64_t data_left; /* unread data of the current entry */
    uint64_t pad;       /* padding after it */
    sio_code rc;        /* the stream's error (when a call failed) */
    uint32_t damaged;   /* header blocks dropped for a bad checksum
                           before the entry or end the last
                           sio_tarp_next returned (0: none) */
    /* The first block dropped for a bad checksum since the last entry
     * (when damaged > 0), read as the regular member's header it most
     * likely was: its offset; the blocks that header and its data take by
     * its size field (0 when it names no regular member with a readable,
     * printable name and an octal size); that name (ustar prefix
     * included). Whether the name can be believed is the caller's call:
     * see sio_group_damage_owner (tar/group.h). */
    uint64_t dmg_off;
    uint64_t dmg_blocks;
    char dmg_name[SIO_TARP_DMG_NAME_MAX + 1];
    char name[SIO_TARP_NAME_MAX + 1];
    char lname[SIO_TARP_NAME_MAX + 1]; /* the last GNU long name read */
    char err[256];
} sio_tar_plain;

enum { FMT_NONE = 0, FMT_PAX, FMT_USTAR, FMT_GNU, FMT_OLD };

enum {
    SIO_TARP_ENTRY = 0,      /* *e is the next entry */
    SIO_TARP_END = 1,        /* end of the archive */
    SIO_TARP_UNSUPPORTED = 2 /* e->hdr_pos: where libarchive must take over */
};

void sio_tarp_init(sio_tar_plain *t, sio_stream *stream, unsigned char *buf,
                   size_t cap, uint64_t offset);
/* As sio_tarp_init for a reader used before: the same state without
 * clearing its name buffers (a reader started at many offsets). */
void sio_tarp_reset(sio_tar_plain *t, sio_stream *stream, unsigned char *buf,
                    size_t cap, uint64_t offset);
/* Skip what is left of the current entry, read the next header(s).
 * Blocks dropped on the way for a bad checksum (libarchive's
 * resynchronisation) are counted in t->damaged: the entry returned, or
 * the end, follows a damaged header, so whatever that header began was
 * lost (the caller must not take the samples around it as whole).
 * Returns SIO_OK with *what set, or an error (t->err says why:
 * SIO_ERR_FORMAT for a damaged or truncated archive, the stream's code for
 * a read error). */
sio_code sio_tarp_next(sio_tar_plain *t, sio_tar_entry *e, int *what);
/* Read n bytes of the current entry's data into dst (n <= data left). */
sio_code sio_tarp_read(sio_tar_plain *t, void *dst, size_t n);

/* Look at the next n (<= cap) bytes without consuming them; *have may
 * be less at the end of the stream. */
sio_code sio_tarp_peek(sio_tar_plain *t, size_t n, const unsigned char **p,
                       size_t *have);
/* The bytes from stream offset pos to the end of the buffer, when they
 * are still buffered (1), else 0: what a reader taking over at pos gets
 * before reading the stream on. */
int sio_tarp_buffered_from(const sio_tar_plain *t, uint64_t pos,
                           const unsigned char **p, size_t *n);

/* Do these first bytes of a stream start a tar the plain reader takes
 * (nothing, an end block or a header with a valid checksum)? Else
 * libarchive decides what they are. */
int sio_tarp_starts_tar(const unsigned char *p, size_t n);
/* Is this the start of a compressed stream (gzip, zstd, xz, bzip2)? */
int sio_tarp_compressed(const unsigned char *p, size_t n);

#endif
