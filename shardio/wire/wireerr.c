/*
 * wireerr.c — the error trailer's JSON, shared by both wire formats (the
 * "__shardcast_error__" tar member and the ERROR frame; contract in
 * include/shardio_wire.h): the encoder used by sio_wenc_error (both
 * formats), and the parser used by the frames decoder and the tar
 * reader (wire/tarread.c). One home, so the two formats cannot drift
 * apart.
 *
 * Threading: pure functions on caller memory; safe from any thread.
 * Ownership: sio_wire_error_json hands back a malloc'd string the caller
 * frees; sio_wire_error_parse fills the caller's struct and keeps nothing.
 */
#include "shardio_wire.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"

sio_code sio_wire_error_json(const char *reason, int retryable,
                             uint32_t retry_after_ms, char **out)
{
    sio_code rc = SIO_OK;
    char buf[SIO_WIRE_REASON_MAX + 1];
    json_t *obj = NULL, *str = NULL;

    *out = NULL;
    /* Every URL in the reason in its redacted form (the trailer reaches
     * every consumer); cut to SIO_WIRE_REASON_MAX. */
    sio_redact_text(reason ? reason : "", buf, sizeof buf);
    size_t n = strlen(buf);
    str = json_stringn(buf, n);
    if (!str) {
        /* Not valid UTF-8 (or cut inside a character): keep ASCII only. */
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)buf[i] >= 0x80)
                buf[i] = '?';
        str = json_stringn(buf, n);
    }
    obj = json_object();
    if (!str || !obj ||
        json_object_set_new(obj, "status", json_string("error")) != 0 ||
        json_object_set(obj, "reason", str) != 0 ||
        json_object_set_new(obj, "retryable", json_boolean(retryable)) != 0) {
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    if (retryable) {
        if (retry_after_ms > SIO_RETRY_AFTER_MAX_MS)
            retry_after_ms = SIO_RETRY_AFTER_MAX_MS;
        if (json_object_set_new(obj, "retry_after_ms",
                                json_integer((json_int_t)retry_after_ms)) !=
            0) {
            rc = SIO_ERR_NOMEM;
            goto out;
        }
    }
    *out = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!*out)
        rc = SIO_ERR_NOMEM;
out:
    json_decref(str);
    json_decref(obj);
    return rc;
}

sio_code sio_wire_error_parse(const void *json, size_t len,
                              sio_wire_error *out, sio_error *err)
{
    sio_code rc = SIO_OK;
    json_error_t jerr;
    json_t *obj = NULL;

    memset(out, 0, sizeof *out);
    if (len > SIO_FRAMES_JSON_MAX) {
        rc = sio_seterr(err, SIO_ERR_LIMIT, "error trailer of %zu bytes", len);
        goto out;
    }
    obj = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(obj)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "error trailer is not a JSON "
                        "object");
        goto out;
    }
    const char *status = json_string_value(json_object_get(obj, "status"));
    json_t *r = json_object_get(obj, "reason");
    if (!status || strcmp(status, "error") != 0 || !json_is_string(r)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "error trailer lacks status "
                        "error or a reason");
        goto out;
    }
    /* The reason is shown to people: keep what precedes a NUL, cut to the
     * bound every encoder applies. */
    const char *text = json_string_value(r);
    size_t n = strlen(text);
    if (n > SIO_WIRE_REASON_MAX)
        n = SIO_WIRE_REASON_MAX;
    memcpy(out->reason, text, n);
    out->reason[n] = '\0';

    /* Absent "retryable" is a trailer from a server that predates it: the
     * share failed, as such a server meant. */
    json_t *ry = json_object_get(obj, "retryable");
    if (ry && !json_is_boolean(ry)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "error trailer: retryable is "
                        "not a boolean");
        goto out;
    }
    out->retryable = ry && json_is_true(ry);
    json_t *ra = json_object_get(obj, "retry_after_ms");
    if (ra && (!json_is_integer(ra) || json_integer_value(ra) < 0)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "error trailer: retry_after_ms "
                        "is not a non-negative integer");
        goto out;
    }
    if (out->retryable && ra) {
        json_int_t v = json_integer_value(ra);
        out->retry_after_ms = v > (json_int_t)SIO_RETRY_AFTER_MAX_MS
                                  ? SIO_RETRY_AFTER_MAX_MS
                                  : (uint32_t)v;
    }
out:
    json_decref(obj);
    return rc;
}
