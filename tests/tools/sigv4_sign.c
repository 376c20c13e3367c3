/*
 * sigv4_sign — sign one request description with libshardio's SigV4 signer
 * (the botocore cross-check in tests/sigv4/ drives it).
 *
 * Reads one JSON object on stdin:
 *   {"method": "GET", "host": "bucket.s3.amazonaws.com", "path": "/raw key",
 *    "query": [["prefix", "a b"], ["fetch-owner", null]],
 *    "headers": [["Range", "bytes=0-9"]],
 *    "payload_hash": null | "<hex sha256>",
 *    "region": "us-east-1", "service": "s3", "amz_date": "20240102T030405Z",
 *    "access_key": "...", "secret_key": "...", "session_token": null | "...",
 *    "mode": "s3" | "generic" (default "s3"),
 *    "token_after": false, "presign": false, "expires": 3600}
 * and prints one JSON object on stdout:
 *   {"authorization": "...", "wire_path": "/...?...",
 *    "headers": ["X-Amz-Date: ...", ...], "signed_headers": "...",
 *    "signature": "...", "canonical_request": "...", "string_to_sign": "..."}
 * On bad input it prints the error to stderr and exits 2 (1 for a signer
 * error). The input is a test fixture: it never holds real credentials.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "store/sigv4.h"

/* Largest request description read from stdin. */
#define INPUT_MAX (1u << 20)

/* Fill pairs from an array of [name, value] arrays; -1 on bad shape. */
static int get_pairs(json_t *arr, sio_sigv4_pair *out, size_t max, size_t *n)
{
    size_t i;
    json_t *it;
    *n = 0;
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > max)
        return -1;
    json_array_foreach(arr, i, it) {
        json_t *name = json_array_get(it, 0), *value = json_array_get(it, 1);
        if (!json_is_array(it) || json_array_size(it) != 2 ||
            !json_is_string(name) || !(json_is_string(value) || json_is_null(value)))
            return -1;
        out[i].name = json_string_value(name);
        out[i].value = json_is_null(value) ? NULL : json_string_value(value);
    }
    *n = json_array_size(arr);
    return 0;
}

static const char *str_or_null(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

int main(void)
{
    static char input[INPUT_MAX + 1];
    static sio_sigv4_pair query[SIO_SIGV4_QUERY_MAX + 1];
    static sio_sigv4_pair headers[SIO_SIGV4_HEADERS_MAX + 1];
    size_t len = fread(input, 1, sizeof input, stdin);
    json_error_t jerr;
    json_t *in = NULL, *out = NULL, *hdrs = NULL;
    sio_sigv4_request req;
    sio_sigv4_creds creds;
    sio_sigv4_result res;
    sio_error err = {0};
    int status = 2;
    char *text = NULL;

    memset(&res, 0, sizeof res);
    if (len > INPUT_MAX) {
        fprintf(stderr, "sigv4_sign: input longer than %u bytes\n", INPUT_MAX);
        goto out;
    }
    in = json_loadb(input, len, 0, &jerr);
    if (!json_is_object(in)) {
        fprintf(stderr, "sigv4_sign: bad JSON: %s\n", jerr.text);
        goto out;
    }
    memset(&req, 0, sizeof req);
    req.method = str_or_null(in, "method");
    req.host = str_or_null(in, "host");
    req.path = str_or_null(in, "path");
    req.payload_hash = str_or_null(in, "payload_hash");
    req.region = str_or_null(in, "region");
    req.service = str_or_null(in, "service");
    req.amz_date = str_or_null(in, "amz_date");
    if (get_pairs(json_object_get(in, "query"), query, SIO_SIGV4_QUERY_MAX + 1,
                  &req.nquery) ||
        get_pairs(json_object_get(in, "headers"), headers,
                  SIO_SIGV4_HEADERS_MAX + 1, &req.nheaders)) {
        fprintf(stderr, "sigv4_sign: query/headers must be [[name, value]]\n");
        goto out;
    }
    req.query = query;
    req.headers = headers;
    const char *mode = str_or_null(in, "mode");
    if (mode && strcmp(mode, "generic") == 0) {
        req.flags = SIO_SIGV4_GENERIC;
    } else if (mode && strcmp(mode, "s3") != 0) {
        fprintf(stderr, "sigv4_sign: mode must be s3 or generic\n");
        goto out;
    }
    if (json_is_true(json_object_get(in, "token_after")))
        req.flags |= SIO_SIGV4_TOKEN_AFTER;
    if (json_is_true(json_object_get(in, "presign"))) {
        req.flags |= SIO_SIGV4_PRESIGN;
        json_int_t e = json_integer_value(json_object_get(in, "expires"));
        req.expires = (e > 0 && e <= (json_int_t)UINT32_MAX) ? (uint32_t)e : 0;
    }
    creds.access_key = str_or_null(in, "access_key");
    creds.secret_key = str_or_null(in, "secret_key");
    creds.session_token = str_or_null(in, "session_token");

    if (sio_sigv4_sign(&req, &creds, &res, &err) != SIO_OK) {
        fprintf(stderr, "sigv4_sign: %s\n", err.msg);
        status = 1;
        goto out;
    }
    hdrs = json_array();
    for (size_t i = 0; i < res.nheaders; i++)
        json_array_append_new(hdrs, json_string(res.headers[i]));
    out = json_pack("{s:s?, s:s, s:O, s:s, s:s, s:s, s:s}",
                    "authorization", res.authorization,
                    "wire_path", res.wire_path,
                    "headers", hdrs,
                    "signed_headers", res.signed_headers,
                    "signature", res.signature,
                    "canonical_request", res.canonical_request,
                    "string_to_sign", res.string_to_sign);
    text = out ? json_dumps(out, JSON_COMPACT) : NULL;
    if (!text) {
        fprintf(stderr, "sigv4_sign: cannot format the output\n");
        status = 1;
        goto out;
    }
    printf("%s\n", text);
    status = 0;
out:
    free(text);
    json_decref(out);
    json_decref(hdrs);
    json_decref(in);
    sio_sigv4_result_free(&res);
    return status;
}
