/*
 * fuzz_request.c — libFuzzer harness for request-target parsing
 * (server/request.c), the first code that sees a client's bytes.
 *
 * Input: byte 0 picks the method, the rest is the request target (not
 * NUL-terminated, so reads past its end show up under ASan). Besides memory
 * safety it checks the parser's promises: a 200 stream request always has
 * rank < world <= SC_WORLD_MAX, an existing job, a bounded, valid field
 * list and a first sample index Y[global_start + rank + start * world]
 * within SIO_POSITION_MAX; a job route names a valid job (PUT may name a
 * new one); a failure always comes with a reason and no route.
 *
 * A stream or sample request that parses is then attached to a real feed
 * (libshardio's partition arithmetic, window and seeks, over a small
 * dataset written once at start-up, with shard indexes) and takes a few
 * samples: every index a parsed request can reach must be safe there too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/tarutil.h"
#include "request.h"
#include "shardio.h"
#include "shardio_index.h"

/* The feed every parsed stream request attaches to (made once). */
static sio_io *fz_io;
static sio_shardlist *fz_list;
static sio_index *fz_index;
static sio_feed *fz_feed[3]; /* one per partition policy */
static char fz_dir[] = "/tmp/shardcast-fuzzreq-XXXXXX";

/* At exit: close the feeds and remove the dataset. */
static void feed_fini(void)
{
    char cmd[128];
    for (int p = 0; p < 3; p++)
        sio_feed_close(fz_feed[p]);
    sio_index_close(fz_index);
    sio_shardlist_free(fz_list);
    sio_io_destroy(fz_io);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_request: cannot remove %s\n", fz_dir);
}

static int feed_init(void)
{
    static int done;
    char *dir = fz_dir;
    if (done)
        return fz_feed[0] != NULL;
    done = 1;
    if (!mkdtemp(fz_dir))
        return 0;
    atexit(feed_fini);
    for (int s = 0; s < 3; s++) {
        tar_member m[20];
        char names[20][32], path[128];
        for (int i = 0; i < 20; i++) {
            snprintf(names[i], sizeof names[i], "s%d_%02d.bin", s, i);
            m[i].name = names[i];
            m[i].data = "0123456789abcdef";
            m[i].len = (size_t)(1 + i % 16);
        }
        snprintf(path, sizeof path, "%s/shard-%d.tar", dir, s);
        if (write_tar(path, m, 20, "none", "pax") != 0)
            return 0;
    }
    sio_index_config ic = {0};
    if (sio_io_create(NULL, &fz_io, NULL) != SIO_OK ||
        sio_shardlist_resolve(fz_io, dir, &fz_list, NULL) != SIO_OK ||
        sio_index_open(&ic, &fz_index, NULL) != SIO_OK)
        return 0;
    for (int p = 0; p < 3; p++) {
        sio_epoch_config ec = {.seed = 1, .epoch = 2, .interleave = 2,
                               .buffer_samples = 5, .read_threads = 1,
                               .index = fz_index};
        sio_feed_config fc = {.window_samples = 8, .join_timeout_ms = 1,
                              .rejoin_grace_ms = 1, .max_seeks = 2,
                              .lag_grace_ms = 5};
        if (sio_feed_open(fz_io, fz_list, &ec, &fc, &fz_feed[p], NULL) !=
            SIO_OK)
            return 0;
    }
    return 1;
}

/* Attach a parsed request's cursor and take up to three samples. */
static void drive_feed(const sc_request *req, sio_partition policy)
{
    sio_cursor *c = NULL;
    sio_cursor_config cc = {.rank = req->rank, .world = req->world,
                            .policy = policy, .start = req->start,
                            .global_start = req->global_start};
    if (!feed_init())
        return;
    if (sio_feed_attach(fz_feed[policy], &cc, &c, NULL) != SIO_OK)
        return;
    for (int i = 0; i < 3; i++) {
        const sio_sample *s = NULL;
        if (sio_cursor_next_wait(c, &s) != SIO_OK || !s)
            break;
        uint64_t want;
        if (sio_share_index(req->global_start, req->rank, req->world,
                            req->start + (uint64_t)i, &want) != 0)
            abort();
        /* even-pad tails repeat earlier indices; others are exact */
        if (policy != SIO_PARTITION_EVEN_PAD && s->global_index != want)
            abort();
        sio_sample_unref(s);
    }
    sio_cursor_close(c);
}

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
                req.global_start > SIO_POSITION_MAX - req.rank ||
                req.start > (SIO_POSITION_MAX - req.global_start - req.rank) /
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
        } else if (req.route == SC_ROUTE_SAMPLE) {
            if (req.world != 1 || req.rank != 0 ||
                req.global_start > SIO_POSITION_MAX || strcmp(method, "GET"))
                abort();
        } else if (req.route == SC_ROUTE_NONE || req.route > SC_ROUTE_SAMPLE) {
            abort();
        }
        if (req.route == SC_ROUTE_STREAM || req.route == SC_ROUTE_SAMPLE)
            drive_feed(&req, req.route == SC_ROUTE_SAMPLE
                                 ? SIO_PARTITION_NONE
                                 : (sio_partition)((data[0] >> 6) % 3));
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
