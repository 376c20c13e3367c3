/*
 * crc32c.h — CRC-32C (Castagnoli, the iSCSI/ext4 checksum): how the shard
 * cache checks the blocks it stored (store/cache.c) — internal.
 *
 * sio_crc32c(crc, p, n) continues a checksum: start from 0, and
 * sio_crc32c(sio_crc32c(0, a, na), b, nb) equals the sum of a followed by
 * b. With SSE 4.2 (detected at run time) the crc32 instruction does the
 * work, on three interleaved lanes for long inputs; else a table.
 *
 * Threading: thread-safe (the tables are built once, under pthread_once).
 */
#ifndef SHARDIO_CORE_CRC32C_H
#define SHARDIO_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t sio_crc32c(uint32_t crc, const void *p, size_t n);

/* The table version and the crc32-instruction version (tests, benches):
 * the latter is sio_crc32c_sw where the CPU lacks SSE 4.2. */
uint32_t sio_crc32c_sw(uint32_t crc, const void *p, size_t n);
uint32_t sio_crc32c_hw(uint32_t crc, const void *p, size_t n);
/* 1 when sio_crc32c uses the crc32 instruction. */
int sio_crc32c_hw_available(void);

#endif /* SHARDIO_CORE_CRC32C_H */
