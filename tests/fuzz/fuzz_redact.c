/*
 * fuzz_redact.c — libFuzzer harness for URL redaction (sio_url_redact) and
 * free-text redaction (sio_redact_text).
 *
 * Checks, besides memory safety: the output is NUL-terminated within its
 * buffer; in every http(s) URL of the output, the authority holds no '@'
 * except the "***@" mask, and every query parameter the credential list
 * names has the value "***" (or none). The input is split at its first NUL
 * byte: before it the text, after it nothing (a C string).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Check one redacted http(s) URL starting at u (ends at a stop byte, as
 * sio_redact_text delimits URLs; text: found in free text). */
static void check_url(const char *u, int text)
{
    const char *auth = strstr(u, "://") + 3;
    size_t alen = strcspn(auth, "/?# \t\r\n\"'<>`\\");
    const char *stop = auth + strcspn(auth, " \t\r\n\"'<>`\\");
    (void)text;
    const char *at = memchr(auth, '@', alen);
    if (at && !(at - auth == 3 && memcmp(auth, "***", 3) == 0))
        abort();
    const char *p = auth + alen;
    const char *hash = memchr(p, '#', (size_t)(stop - p));
    if (hash)
        stop = hash;
    const char *q = memchr(p, '?', (size_t)(stop - p));
    if (!q)
        return;
    for (const char *k = q + 1; k < stop;) {
        const char *amp = memchr(k, '&', (size_t)(stop - k));
        const char *e = amp ? amp : stop;
        const char *eq = memchr(k, '=', (size_t)(e - k));
        if (eq && sio_url_param_is_credential(k, (size_t)(eq - k))) {
            size_t vl = (size_t)(e - eq - 1);
            if (!(vl == 0 || (vl == 3 && memcmp(eq + 1, "***", 3) == 0)))
                abort();
        }
        k = e + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size + 1);
    char out[SIO_URL_MAX + 128];
    if (!in)
        return 0;
    memcpy(in, data, size);
    in[size] = '\0';

    sio_url_redact(in, out, sizeof out);
    if (!memchr(out, '\0', sizeof out))
        abort();
    if (strncasecmp(out, "http://", 7) == 0 ||
        strncasecmp(out, "https://", 8) == 0)
        check_url(out, 0);

    sio_redact_text(in, out, sizeof out);
    if (!memchr(out, '\0', sizeof out))
        abort();
    /* Only complete outputs can be checked URL by URL (a cut one may end
     * inside a mask), and only before any s3:// URL (its key is raw text
     * that may look like anything, up to the next white space). */
    char *s3 = strcasestr(out, "s3://");
    if (s3)
        *s3 = '\0';
    if (strlen(out) + 1 < sizeof out)
        for (const char *p = out; (p = strstr(p, "://")) != NULL; p += 3) {
            const char *s = p;
            while (s > out && ((s[-1] >= 'a' && s[-1] <= 'z') ||
                               (s[-1] >= 'A' && s[-1] <= 'Z')))
                s--;
            if ((p - s == 4 && strncasecmp(s, "http", 4) == 0) ||
                (p - s == 5 && strncasecmp(s, "https", 5) == 0))
                check_url(s, 1);
        }
    sio_redact_text(in, out, 7); /* truncation */
    if (strlen(out) > 6)
        abort();
    free(in);
    return 0;
}
