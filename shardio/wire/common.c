/*
 * common.c — the pieces both wire encoders share (wire/common.h): the
 * counting sink, the field filter and the end summary's JSON. The tar
 * encoder (wire/tarwrite.c) and the frames encoder (wire/frames.c) both
 * use them, so the two formats send the same fields and the same summary.
 *
 * Threading: pure functions on the caller's structs.
 */
#include "wire/common.h"

#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/core_int.h"

sio_code sio_wire_emit(sio_wire_sink *k, const void *data, size_t len)
{
    sio_code rc = SIO_OK;
    if (len == 0)
        goto out;
    rc = k->fn(k->userdata, data, len);
    if (rc != SIO_OK)
        goto out;
    k->bytes += len;
out:
    return rc;
}

sio_code sio_wire_emit_field(sio_wire_sink *k, const sio_sample *s,
                             size_t i)
{
    const sio_field *f = &s->fields[i];
    if (!k->ext || k->ext[i].fd < 0)
        return sio_wire_emit(k, f->data, f->len);
    if (f->len == 0)
        return SIO_OK;
    sio_code rc = k->extent_fn(k->userdata, &k->ext[i], f->len);
    if (rc == SIO_OK)
        k->bytes += f->len;
    return rc;
}

sio_code sio_wire_filter_set(sio_wire_filter *f, const char *const *fields,
                             size_t nfields, const char *who, sio_error *err)
{
    for (size_t i = 0; i < nfields; i++) {
        size_t n = fields[i] ? strlen(fields[i]) : 0;
        if (n == 0 || n > SIO_TARW_FIELD_NAME_MAX)
            return sio_seterr(err, SIO_ERR_INVALID,
                              "%s: field name %zu is empty or too long", who,
                              i);
        memcpy(f->names[i], fields[i], n + 1);
    }
    f->n = nfields;
    return SIO_OK;
}

int sio_wire_filter_keeps(const sio_wire_filter *f, const char *name)
{
    if (f->n == 0)
        return 1;
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0)
            return 1;
    return 0;
}

size_t sio_wire_summary_json(const sio_tarw_summary *sum, const char *skipped,
                             char buf[SIO_WIRE_SUMMARY_MAX])
{
    if (skipped && strlen(skipped) > SIO_WIRE_SKIPPED_MAX)
        skipped = NULL;
    int n = snprintf(buf, SIO_WIRE_SUMMARY_MAX,
                     "{\"status\":\"ok\",\"epoch\":%" PRIu64 ",\"rank\":%" PRIu32
                     ",\"world\":%" PRIu32 ",\"start\":%" PRIu64
                     ",\"samples\":%" PRIu64 ",\"position\":%" PRIu64 "%s%s}",
                     sum->epoch, sum->rank, sum->world, sum->start,
                     sum->samples, sum->position, skipped ? ",\"skipped\":" : "",
                     skipped ? skipped : "");
    return n > 0 && (size_t)n < SIO_WIRE_SUMMARY_MAX ? (size_t)n : 0;
}

void sio_wenc_set_skipped(sio_wenc *e, const char *json)
{
    e->skipped = json;
}

/* ------------------------------------------------------------------ */
/* The encoder interface                                                */

sio_code sio_wenc_sample(sio_wenc *e, const sio_sample *s, uint64_t position)
{
    return e->ops->sample(e, s, position);
}

void sio_wenc_set_extent_sink(sio_wenc *e, sio_wenc_extent_fn fn)
{
    e->out.extent_fn = fn;
}

sio_code sio_wenc_sample_ext(sio_wenc *e, const sio_sample *s,
                             const sio_extent *ext, uint64_t position)
{
    if (ext && !e->out.extent_fn)
        return SIO_ERR_INVALID;
    e->out.ext = ext;
    sio_code rc = e->ops->sample(e, s, position);
    e->out.ext = NULL;
    return rc;
}

sio_code sio_wenc_end(sio_wenc *e, const sio_tarw_summary *sum)
{
    return e->ops->end(e, sum);
}

sio_code sio_wenc_error(sio_wenc *e, const char *reason, int retryable,
                        uint32_t retry_after_ms)
{
    char *text = NULL;
    sio_code rc =
        sio_wire_error_json(reason, retryable, retry_after_ms, &text);
    if (rc == SIO_OK)
        rc = e->ops->error(e, text);
    free(text);
    return rc;
}

void sio_wenc_set_sources(sio_wenc *e, const char *const *names, size_t n)
{
    if (e->ops->set_sources)
        e->ops->set_sources(e, names, n);
}

sio_code sio_wenc_keepalive(sio_wenc *e)
{
    return e->ops->keepalive ? e->ops->keepalive(e) : SIO_ERR_UNSUPPORTED;
}

uint64_t sio_wenc_bytes(const sio_wenc *e)
{
    return e->out.bytes;
}

void sio_wenc_destroy(sio_wenc *e)
{
    if (e)
        e->ops->free(e);
}
