/*
 * fuzz_tarkey.c — libFuzzer harness for the tar member-name rule
 * (sio_tar_key_sanitize) and the tar encoder on a hostile key.
 *
 * Checks: the sanitised key is non-empty, does not start with '/', has no
 * empty, "." or ".." component, and holds no control byte or '\\'. The
 * encoder accepts the key (as a C string: up to its first NUL) and writes
 * a member whose name has the same properties after "<G>/".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardio_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *n, size_t len)
{
    if (len == 0 || n[0] == '/')
        abort();
    for (size_t i = 0; i < len;) {
        const char *slash = memchr(n + i, '/', len - i);
        size_t end = slash ? (size_t)(slash - n) : len;
        size_t cl = end - i;
        if (cl == 0 || (cl == 1 && n[i] == '.') ||
            (cl == 2 && n[i] == '.' && n[i + 1] == '.'))
            abort();
        for (size_t k = i; k < end; k++) {
            unsigned char c = (unsigned char)n[k];
            if (c < 0x20 || c == 0x7f || c == '\\')
                abort();
        }
        if (!slash)
            break;
        i = end + 1;
        if (i == len)
            abort(); /* a trailing '/' is an empty component */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sio_wbuf b;
    sio_wbuf_init(&b, 1u << 20);
    if (sio_tar_key_sanitize((const char *)data, size, &b) == SIO_OK) {
        if (memchr(b.data, '\0', b.len))
            abort();
        check_name((const char *)b.data, b.len);
    }
    sio_wbuf_free(&b);

    /* Through the encoder: the key as a C string, one field. */
    char *key = malloc(size + 1);
    if (!key)
        return 0;
    memcpy(key, data, size);
    key[size] = '\0';
    if (key[0]) {
        sio_field f = {"jpg", (const unsigned char *)"x", 1};
        sio_sample s = {key, "http://u:p@h/s.tar?sig=x", 0, 0, 7, 1, &f, 1, 0};
        sio_wbuf out;
        sio_wenc *w = NULL;
        sio_wbuf_init(&out, 4u << 20);
        if (sio_tarw_create(NULL, 0, sio_wbuf_append, &out, &w, NULL) ==
            SIO_OK) {
            if (sio_wenc_sample(w, &s, 0) == SIO_OK) {
                /* The shard URL went out redacted. */
                static const char want[] =
                    "SHARDCAST.shard=http://***@h/s.tar?sig=***\n";
                if (!memmem(out.data, out.len, want, sizeof want - 1))
                    abort();
            }
            sio_wenc_destroy(w);
        }
        sio_wbuf_free(&out);
    }
    free(key);
    return 0;
}
