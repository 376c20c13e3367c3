/*
 * sio_epochs.c — run several epochs of a source through one feed per epoch
 * with W consumer threads, and report memory: the tool behind the memory
 * test and the engine benchmark.
 *
 *   sio_epochs SOURCE [--epochs E] [--world W] [--seed N] [--interleave K]
 *              [--buffer B] [--buffer-bytes N] [--threads T]
 *              [--readahead N] [--readahead-bytes N]
 *              [--window N] [--window-bytes N] [--partition P]
 *
 * Prints one JSON object: samples and payload bytes per epoch (summed over
 * consumers), seconds, samples/s, MB/s, and the process's peak RSS (VmHWM)
 * and current RSS in KiB. Exits non-zero on any epoch error or when an
 * epoch's consumers did not receive the same sample count twice in a row.
 */
#include <malloc.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardio.h"

typedef struct worker {
    sio_feed *f;
    sio_cursor_config cc;
    uint64_t samples, bytes;
    int failed;
} worker;

static void *consume(void *arg)
{
    worker *w = arg;
    sio_cursor *c = NULL;
    sio_error e;
    if (sio_feed_attach(w->f, &w->cc, &c, &e) != SIO_OK) {
        fprintf(stderr, "attach: %s\n", e.msg);
        w->failed = 1;
        return NULL;
    }
    for (;;) {
        const sio_sample *s = NULL;
        if (sio_cursor_next_wait(c, &s) != SIO_OK) {
            fprintf(stderr, "error: %s\n", sio_cursor_errmsg(c));
            w->failed = 1;
            break;
        }
        if (!s)
            break;
        w->samples++;
        w->bytes += s->bytes;
        sio_sample_unref(s);
    }
    sio_cursor_close(c);
    return NULL;
}

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':')
            v = strtol(line + kl + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static uint64_t num(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end) {
        fprintf(stderr, "bad number: %s\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    /* One malloc arena: samples are allocated on read-ahead threads and
     * freed on others; per-thread arenas then fragment, and peak RSS rises
     * above the buffers (measured: +10-20% on tests/contract/test_memory).
     * Sample allocation is a small share of the work, so one lock is
     * cheaper than the fragmentation. */
    if (!getenv("MALLOC_ARENA_MAX")) /* an operator's choice wins */
        mallopt(M_ARENA_MAX, 1);
    sio_epoch_config ec = {.interleave = 4, .buffer_samples = 1000,
                           .read_threads = 2};
    sio_feed_config fc = {0};
    sio_partition part = SIO_PARTITION_EVEN_DROP;
    uint32_t world = 1, epochs = 1;
    const char *source = NULL;
    sio_io *io = NULL;
    sio_shardlist *list = NULL;
    sio_error e;
    int rc = 1;
    uint64_t prev_total = 0, total_samples = 0, total_bytes = 0;
    struct timespec t0, t1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-') {
            source = a;
            continue;
        }
        if (!v) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--epochs")) epochs = (uint32_t)num(v);
        else if (!strcmp(a, "--world")) world = (uint32_t)num(v);
        else if (!strcmp(a, "--seed")) ec.seed = num(v);
        else if (!strcmp(a, "--interleave")) ec.interleave = (uint32_t)num(v);
        else if (!strcmp(a, "--buffer")) ec.buffer_samples = (uint32_t)num(v);
        else if (!strcmp(a, "--buffer-bytes")) ec.buffer_bytes = num(v);
        else if (!strcmp(a, "--threads")) ec.read_threads = (uint32_t)num(v);
        else if (!strcmp(a, "--readahead")) ec.readahead_shards = (uint32_t)num(v);
        else if (!strcmp(a, "--readahead-bytes")) ec.readahead_bytes = num(v);
        else if (!strcmp(a, "--window")) fc.window_samples = (uint32_t)num(v);
        else if (!strcmp(a, "--window-bytes")) fc.window_bytes = num(v);
        else if (!strcmp(a, "--partition")) {
            if (sio_partition_parse(v, &part) != 0) {
                fprintf(stderr, "bad partition %s\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (!source || world < 1 || world > 4096) {
        fprintf(stderr, "usage: sio_epochs SOURCE [options] (world 1..4096)\n");
        return 2;
    }
    if (sio_io_create(NULL, &io, &e) || sio_shardlist_resolve(io, source, &list, &e)) {
        fprintf(stderr, "error: %s\n", e.msg);
        goto out;
    }
    worker *w = calloc(world, sizeof *w);
    pthread_t *t = calloc(world, sizeof *t);
    if (!w || !t) {
        free(w);
        free(t);
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int failed = 0;
    for (uint32_t ep = 0; ep < epochs && !failed; ep++) {
        sio_feed *f = NULL;
        ec.epoch = ep;
        if (sio_feed_open(io, list, &ec, &fc, &f, &e) != SIO_OK) {
            fprintf(stderr, "error: %s\n", e.msg);
            failed = 1;
            break;
        }
        uint64_t total = 0;
        for (uint32_t r = 0; r < world; r++) {
            memset(&w[r], 0, sizeof w[r]);
            w[r].f = f;
            w[r].cc = (sio_cursor_config){.rank = r, .world = world,
                                          .policy = part};
            pthread_create(&t[r], NULL, consume, &w[r]);
        }
        for (uint32_t r = 0; r < world; r++) {
            pthread_join(t[r], NULL);
            failed |= w[r].failed;
            total += w[r].samples;
            total_samples += w[r].samples;
            total_bytes += w[r].bytes;
        }
        sio_feed_close(f);
        if (ep > 0 && total != prev_total) {
            fprintf(stderr, "epoch %u delivered %" PRIu64 " samples, epoch "
                    "%u %" PRIu64 "\n", ep, total, ep - 1, prev_total);
            failed = 1;
        }
        prev_total = total;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(w);
    free(t);
    if (failed)
        goto out;
    double secs = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"epochs\":%u,\"world\":%u,\"shards\":%zu,"
           "\"samples_per_epoch\":%" PRIu64 ",\"samples\":%" PRIu64
           ",\"bytes\":%" PRIu64 ",\"seconds\":%.3f,\"samples_per_s\":%.1f,"
           "\"mb_per_s\":%.1f,\"vmhwm_kb\":%ld,\"vmrss_kb\":%ld}\n",
           epochs, world, sio_shardlist_count(list), prev_total,
           total_samples, total_bytes, secs, (double)total_samples / secs,
           (double)total_bytes / secs / 1e6, status_kb("VmHWM"),
           status_kb("VmRSS"));
    rc = 0;
out:
    sio_shardlist_free(list);
    sio_io_destroy(io);
    return rc;
}
