/*
 * fuzz_sigv4.c — libFuzzer harness for SigV4 canonicalisation.
 *
 * Input layout: byte 0's low five bits are the SIO_SIGV4_* flags; the rest
 * is text split into lines: line 1 is the path, line 2 a raw query string
 * ('&'-separated, "name=value" split at the first '='), every further line a
 * header "name:value". A NUL inside a line ends that string early.
 *
 * Besides "no crash, no leak, no UB", it checks invariants and aborts when
 * one breaks: a successful signature has a 64-hex-digit signature; without
 * presigning, the wire path is the canonical URI (S3 rules) plus '?' and the
 * canonical query, and sio_sigv4_wire_path() returns the same string; the
 * secret never appears in any output.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/sigv4.h"

/* Inputs beyond this add nothing but time (the signer's limits are far
 * below). */
#define FUZZ_INPUT_MAX (64u * 1024u)
/* The secret holds control bytes, which no output can carry (the signer
 * refuses them in headers and encodes them elsewhere), so finding it in an
 * output can only mean a leak, whatever the fuzzer puts in the input. */
#define SECRET "\x01" "fuzz-secret" "\x01"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *dupn(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static void check_result(const sio_sigv4_request *req,
                         const sio_sigv4_result *res)
{
    if (strlen(res->signature) != 64 ||
        strspn(res->signature, "0123456789abcdef") != 64)
        abort();
    const char *outs[] = {res->authorization, res->wire_path,
                          res->canonical_request, res->string_to_sign,
                          res->signed_headers};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (outs[i] && strstr(outs[i], SECRET))
            abort();
    for (size_t i = 0; i < res->nheaders; i++)
        if (strstr(res->headers[i], SECRET) || strpbrk(res->headers[i], "\r\n"))
            abort();
    if (req->flags & SIO_SIGV4_PRESIGN)
        return;
    /* Canonical request lines 2 and 3: URI and query. */
    const char *uri = strchr(res->canonical_request, '\n');
    if (!uri)
        abort();
    uri++;
    const char *q = strchr(uri, '\n');
    if (!q)
        abort();
    q++;
    const char *qend = strchr(q, '\n');
    if (!qend)
        abort();
    char *wire = NULL;
    if (sio_sigv4_wire_path(req, &wire, NULL) != SIO_OK ||
        strcmp(wire, res->wire_path) != 0)
        abort();
    free(wire);
    if (!(req->flags & (SIO_SIGV4_PATH_ENCODED | SIO_SIGV4_NORMALIZE_PATH))) {
        size_t ulen = (size_t)(q - 1 - uri), qlen = (size_t)(qend - q);
        const char *w = res->wire_path;
        if (strncmp(w, uri, ulen) != 0)
            abort();
        w += ulen;
        if (qlen == 0 ? *w != '\0'
                      : (*w != '?' || strncmp(w + 1, q, qlen) != 0 ||
                         w[1 + qlen] != '\0'))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sio_sigv4_pair query[SIO_SIGV4_QUERY_MAX + 2];
    sio_sigv4_pair headers[SIO_SIGV4_HEADERS_MAX + 2];
    char *owned[2 * (SIO_SIGV4_QUERY_MAX + SIO_SIGV4_HEADERS_MAX) + 8];
    size_t nowned = 0, nq = 0, nh = 0;
    sio_sigv4_request req;
    sio_sigv4_result res;
    sio_sigv4_creds creds = {"AKIDFUZZ", SECRET, NULL};
    char *path = NULL;

    if (size < 1 || size > FUZZ_INPUT_MAX)
        return 0;
    unsigned flags = data[0] & 0x1fu;
    const uint8_t *p = data + 1, *end = data + size;

    for (int line = 0; p <= end; line++) {
        const uint8_t *e = memchr(p, '\n', (size_t)(end - p));
        if (!e)
            e = end;
        if (line == 0) {
            path = owned[nowned++] = dupn(p, (size_t)(e - p));
        } else if (line == 1) {
            const uint8_t *s = p;
            while (s < e && nq < SIO_SIGV4_QUERY_MAX + 1) {
                const uint8_t *amp = memchr(s, '&', (size_t)(e - s));
                const uint8_t *pe = amp ? amp : e;
                const uint8_t *eq = memchr(s, '=', (size_t)(pe - s));
                query[nq].name = owned[nowned++] =
                    dupn(s, (size_t)((eq ? eq : pe) - s));
                query[nq].value =
                    eq ? (owned[nowned++] = dupn(eq + 1, (size_t)(pe - eq - 1)))
                       : NULL;
                nq++;
                s = pe + 1;
            }
        } else if (nh < SIO_SIGV4_HEADERS_MAX + 1) {
            const uint8_t *colon = memchr(p, ':', (size_t)(e - p));
            headers[nh].name = owned[nowned++] =
                dupn(p, (size_t)((colon ? colon : e) - p));
            headers[nh].value =
                colon ? (owned[nowned++] = dupn(colon + 1, (size_t)(e - colon - 1)))
                      : NULL;
            nh++;
        }
        if (e == end)
            break;
        p = e + 1;
    }

    memset(&req, 0, sizeof req);
    req.method = "GET";
    req.host = "bucket.s3.amazonaws.com";
    req.path = path ? path : "/";
    req.query = query;
    req.nquery = nq;
    req.headers = headers;
    req.nheaders = nh;
    req.region = "us-east-1";
    req.service = "s3";
    req.amz_date = "20240102T030405Z";
    req.expires = 3600;
    req.flags = flags;
    creds.session_token = (flags & 1u) ? "fuzz/token+=" : NULL;

    if (sio_sigv4_sign(&req, &creds, &res, NULL) == SIO_OK) {
        check_result(&req, &res);
        sio_sigv4_result_free(&res);
    } else if (res.authorization || res.wire_path || res.canonical_request ||
               res.nheaders) {
        abort(); /* a failure leaves nothing behind */
    }

    /* The encoder on the raw path bytes, both slash modes. */
    char *enc = NULL;
    if (sio_sigv4_uri_encode(req.path, strlen(req.path), (int)(flags & 2u),
                             3 * strlen(req.path) + 1, &enc, NULL) == SIO_OK) {
        if (strspn(enc, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789-._~%/") != strlen(enc))
            abort();
        free(enc);
    } else {
        abort(); /* 3 bytes per input byte always suffice */
    }

    for (size_t i = 0; i < nowned; i++)
        free(owned[i]);
    return 0;
}
