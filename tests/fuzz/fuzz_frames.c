/*
 * fuzz_frames.c — libFuzzer harness for the frames decoder
 * (shardio/wire/frames.c, sio_framer_*), the first code of a client that sees
 * a server's bytes.
 *
 * The input is a frames stream. It is decoded twice: whole, and in chunks
 * whose sizes are drawn from the input's own bytes. Besides memory safety
 * (every byte of every view is read, so a bad view shows under ASan) it
 * checks the decoder's promises: chunking does not change the events or
 * the outcome, `used` never exceeds what was offered, a field's data lies
 * inside its sample's bytes, and an outcome is always one of clean end,
 * server error, truncation or a broken stream with a message. Limits are
 * small so no input can make the harness allocate more than a few MiB.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardio_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* FNV-1a over the events, so two decodes can be compared cheaply. */
static void mix(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= UINT64_C(1099511628211);
    }
}

static void mix_event(uint64_t *h, const sio_frame_event *ev)
{
    if (ev->type == SIO_FRAMER_NONE)
        return; /* how often input ran out depends on the chunking */
    mix(h, &ev->type, sizeof ev->type);
    switch (ev->type) {
    case SIO_FRAMER_HEADER:
        mix(h, ev->header.job, strlen(ev->header.job));
        mix(h, &ev->header.start, sizeof ev->header.start);
        for (size_t i = 0; i < ev->nfields; i++)
            mix(h, ev->fields[i], strlen(ev->fields[i]));
        break;
    case SIO_FRAMER_SHARD:
        mix(h, &ev->shard_index, sizeof ev->shard_index);
        mix(h, ev->shard_url, ev->shard_url_len);
        break;
    case SIO_FRAMER_SAMPLE: {
        size_t total = 0;
        mix(h, &ev->global_index, sizeof ev->global_index);
        mix(h, &ev->position, sizeof ev->position);
        mix(h, ev->key, ev->key_len);
        mix(h, ev->shard_url, ev->shard_url_len);
        for (size_t i = 0; i < ev->nsample_fields; i++) {
            const sio_frame_field *f = &ev->sample_fields[i];
            mix(h, f->name, f->name_len);
            mix(h, f->data, f->len);
            total += f->len;
        }
        if (total != ev->sample_bytes)
            abort();
        break;
    }
    case SIO_FRAMER_END:
        mix(h, &ev->summary, sizeof ev->summary);
        break;
    case SIO_FRAMER_ERROR:
        mix(h, ev->reason, strlen(ev->reason));
        break;
    default:
        break;
    }
}

/* Decode data in chunks; chunk sizes come from `sizes` (cycled), or the
 * whole input at once when nsizes is 0. Returns the outcome code. */
static sio_code run(const uint8_t *data, size_t size, const uint8_t *sizes,
                    size_t nsizes, uint64_t *hash)
{
    sio_framer *f = NULL;
    sio_framer_limits lim = {.payload_max = 1u << 20, .fields_max = 64,
                             .shards_max = 1000, .shard_bytes_max = 1u << 20};
    sio_code rc;
    size_t at = 0, k = 0;

    *hash = UINT64_C(14695981039346656037);
    if (sio_framer_create(&lim, &f, NULL) != SIO_OK)
        return SIO_ERR_NOMEM;
    rc = SIO_OK;
    while (at < size && rc == SIO_OK) {
        size_t chunk = size - at;
        if (nsizes) {
            size_t want = (size_t)sizes[k++ % nsizes] + 1;
            if (want < chunk)
                chunk = want;
        }
        size_t off = 0;
        while (off < chunk && rc == SIO_OK) {
            sio_frame_event ev;
            size_t used = 0;
            rc = sio_framer_feed(f, data + at + off, chunk - off, &used, &ev);
            if (used > chunk - off)
                abort();
            if (rc == SIO_OK) {
                if (used == 0 && ev.type == SIO_FRAMER_NONE)
                    abort(); /* no progress */
                mix_event(hash, &ev);
            }
            off += used;
        }
        at += chunk;
    }
    if (rc == SIO_OK)
        rc = sio_framer_finish(f);
    sio_framer_status st = sio_framer_state(f);
    if (rc == SIO_OK && st != SIO_FRAMER_ENDED)
        abort();
    if (rc != SIO_OK && (st == SIO_FRAMER_ENDED ||
                         sio_framer_errmsg(f)[0] == '\0'))
        abort();
    mix(hash, &st, sizeof st);
    sio_framer_destroy(f);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t h1, h2;
    sio_code a = run(data, size, NULL, 0, &h1);
    /* Chunk sizes from the tail of the input, so the fuzzer explores
     * chunkings together with contents. */
    size_t ns = size < 16 ? size : 16;
    sio_code b = run(data, size, data + size - ns, ns, &h2);
    if (a != b || h1 != h2)
        abort();
    return 0;
}
