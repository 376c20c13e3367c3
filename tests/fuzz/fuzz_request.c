/*
 * fuzz_request.c — libFuzzer harness for request-target parsing
 * (server/request.c), the first code that sees a client's bytes.
 *
 * Input: byte 0 picks the method, the rest is the request target (not
 * NUL-terminated, so reads past its end show up under ASan). Besides memory
 * safety it checks the parser's promises: a 200 stream request always has
 * rank < world <= SC_WORLD_MAX, an existing job, a bounded, valid field
 * list and a first sample index Y[global_start + rank + start * world]
 * that fits 64 bits; a job route names a valid job (PUT may name a new
 * one); a failure always comes with a reason and no route.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

static int job_exists(void *ud, const char *name)
{
    (void)ud;
    return strcmp(name, "train-1") == 0;
}

#define JOB "train-1"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "HEAD", "POST", "DELETE",
                                          "PUT", "OPTIONS", "GET", "GET"};
    sc_request req;
    char reason[256];

    if (size < 1)
        return 0;
    const char *method = methods[data[0] & 7];
    /* A heap copy of exactly the target's bytes: no terminator to lean on. */
    size_t len = size - 1;
    char *target = malloc(len ? len : 1);
    if (!target)
        return 0;
    memcpy(target, data + 1, len);

    unsigned st = sc_request_parse(method, target, len, 4096, job_exists,
                                   NULL, &req, reason, sizeof reason);
    if (st == 200) {
        if (req.route == SC_ROUTE_STREAM) {
            if (req.world == 0 || req.world > SC_WORLD_MAX ||
                req.rank >= req.world || strcmp(req.job, JOB) != 0 ||
                req.nfields > SIO_TARW_FILTER_MAX || strcmp(method, "GET") ||
                (req.format != SC_FORMAT_TAR &&
                 req.format != SC_FORMAT_FRAMES) ||
                req.global_start > UINT64_MAX - req.rank ||
                req.start > (UINT64_MAX - req.global_start - req.rank) /
                                req.world)
                abort();
            for (size_t i = 0; i < req.nfields; i++) {
                size_t n = strlen(req.fields[i]);
                if (n == 0 || n > SIO_TARW_FIELD_NAME_MAX)
                    abort();
            }
        } else if (req.route == SC_ROUTE_JOB) {
            size_t n = strlen(req.job);
            if (n == 0 || n > SC_JOB_NAME_MAX ||
                (strcmp(method, "PUT") != 0 && strcmp(req.job, JOB) != 0))
                abort();
        } else if (req.route == SC_ROUTE_TOPOLOGY) {
            if (req.world > SC_WORLD_MAX || strcmp(method, "GET"))
                abort();
        } else if (req.route == SC_ROUTE_NONE || req.route > SC_ROUTE_TOPOLOGY) {
            abort();
        }
    } else {
        if (st != 400 && st != 404 && st != 405 && st != 414)
            abort();
        if (reason[0] == '\0' || req.route != SC_ROUTE_NONE)
            abort();
    }

    /* The decoder on its own, into a small buffer. */
    char out[64];
    long n = sc_pct_decode(target, len, data[0] & 4, out, sizeof out);
    if (n >= 0 && ((size_t)n >= sizeof out || strlen(out) != (size_t)n))
        abort();
    free(target);
    return 0;
}
