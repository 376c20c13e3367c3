/*
 * fuzz_s3xml.c — libFuzzer harness for the S3 / STS XML parsers
 * (shardio/store/s3xml.c). Every input goes through the listing, error-document
 * and STS parsers; the properties checked are: no crash, no leak, no
 * undefined behaviour, and on success the page obeys the documented limits
 * (keys non-empty and at most SIO_S3XML_KEY_MAX bytes, entry count bounded,
 * error outputs NUL-terminated within their buffers).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/s3xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *xml = (const char *)data;
    sio_s3_list_page page;
    sio_s3_sts_creds creds;
    sio_error err;
    char code[32], msg[64];

    if (sio_s3xml_parse_list(xml, size, &page, &err) == SIO_OK) {
        if (page.n + page.nprefixes > SIO_S3XML_KEYS_MAX)
            abort();
        for (size_t i = 0; i < page.n; i++) {
            size_t l = strlen(page.keys[i]);
            if (l == 0 || l > SIO_S3XML_KEY_MAX)
                abort();
        }
        for (size_t i = 0; i < page.nprefixes; i++) {
            size_t l = strlen(page.prefixes[i]);
            if (l == 0 || l > SIO_S3XML_KEY_MAX)
                abort();
        }
        if (page.next_token && strlen(page.next_token) > SIO_S3XML_TOKEN_MAX)
            abort();
    } else if (page.keys || page.n || page.prefixes || page.next_token) {
        abort(); /* a failed parse leaves the page zeroed */
    }
    sio_s3_list_page_free(&page);

    if (sio_s3xml_parse_error(xml, size, code, sizeof code, msg, sizeof msg) ==
        SIO_OK) {
        if (memchr(code, '\0', sizeof code) == NULL || code[0] == '\0' ||
            memchr(msg, '\0', sizeof msg) == NULL)
            abort();
    }

    if (sio_s3xml_parse_sts(xml, size, &creds, &err) == SIO_OK) {
        if (!creds.access_key_id || !creds.secret_access_key ||
            !creds.session_token || !creds.expiration)
            abort();
    }
    sio_s3_sts_creds_free(&creds);

    /* The timestamp parser also sees raw bytes (NUL-terminated copy). */
    if (size <= 64) {
        char ts[65];
        int64_t t;
        memcpy(ts, data, size);
        ts[size] = '\0';
        (void)sio_s3xml_parse_iso8601(ts, &t);
    }
    return 0;
}
