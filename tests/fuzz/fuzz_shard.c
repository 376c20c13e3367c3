/*
 * fuzz_shard.c — libFuzzer harness for tar reading + WebDataset grouping.
 *
 * The input is a shard (any compression libarchive detects). Limits are
 * small so that a hostile size field cannot make the harness allocate
 * more than a few MiB: every allocation must follow the named limits.
 */
#include <stdint.h>
#include <string.h>

#include "backend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sio_stream *st = NULL;
    sio_shard *sh = NULL;
    sio_shard_limits lim = {.member_max = 1u << 20, .sample_max = 4u << 20,
                            .fields_max = 64};
    if (sio_stream_memory(data, size, &st) != SIO_OK)
        return 0;
    if (sio_shard_open_stream(NULL, st, "fuzz://input", 0, &lim, &sh, NULL) !=
        SIO_OK)
        return 0;
    for (int i = 0; i < 100000; i++) {
        const sio_sample *s = NULL;
        sio_code rc = sio_shard_next(sh, &s);
        if (rc == SIO_ERR_SAMPLE)
            continue;
        if (rc != SIO_OK || !s)
            break;
        size_t total = 0;
        for (size_t f = 0; f < s->nfields; f++) {
            total += s->fields[f].len;
            /* touch every byte so ASan sees any bad pointer */
            volatile unsigned char x = 0;
            for (size_t b = 0; b < s->fields[f].len; b++)
                x ^= s->fields[f].data[b];
            (void)x;
            (void)strlen(s->fields[f].name);
        }
        if (total != s->bytes || s->bytes > lim.sample_max)
            __builtin_trap();
        (void)strlen(s->key);
        sio_sample_unref(s);
    }
    sio_shard_close(sh);
    return 0;
}
