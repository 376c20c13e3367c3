/*
 * shardio_tarhdr.h — one ustar header block, the tar writer every layer
 * shares: the stream encoder (shardio_wire.h) writes its members with it,
 * and so do the virtual shards of an object set (the store layer).
 */
#ifndef SHARDIO_TARHDR_H
#define SHARDIO_TARHDR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIO_TAR_BLOCK 512u

/*
 * Fill block[SIO_TAR_BLOCK] with a ustar header for `name` (name_len bytes,
 * not necessarily NUL-terminated), typeflag ('0' regular, 'x' pax) and size,
 * with the fixed attributes of the stream format. The name is split into
 * the ustar prefix/name fields when it fits; otherwise *fits is set to 0 and
 * the name field holds a truncated form (the caller must then precede the
 * member with a pax "path=" record). Sizes >= 8 GiB are written base-256.
 */
void sio_tar_header(unsigned char block[SIO_TAR_BLOCK], const char *name,
                    size_t name_len, char typeflag, uint64_t size, int *fits);

/* Does `name` fit the ustar prefix/name fields (so needs no pax path=)? */
int sio_tar_name_fits(const char *name, size_t name_len);

/* Bytes of the pax record "<len> path=<name>\n" for a name of name_len
 * bytes (its own length included). */
size_t sio_tar_pax_path_len(size_t name_len);

#ifdef __cplusplus
}
#endif

#endif
