/*
 * plan_window.c — an epoch of N samples (default 10^8) planned with a
 * window, over a synthetic index (metadata only: empty shard files whose
 * groups are offered to the index). Prints the index's memory per sample,
 * the time a fresh plan takes to reach a reader at 90% of the epoch, what
 * the plan holds then, and the time to make a chunk let go again (a
 * resume behind the window). Built and run by bench/plan_window.sh.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plan/plan_int.h"
#include "shardio.h"
#include "shardio_index.h"
#include "shardio_plan.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            v = strtoull(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static void nokick(void *ud)
{
    (void)ud;
}

int main(int argc, char **argv)
{
    uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000000ull;
    uint64_t per = 10000;
    size_t nsh = (size_t)((total + per - 1) / per);
    uint32_t buffer = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 10000;
    char dir[] = "/tmp/shardcast-planwin-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char **urls = calloc(nsh, sizeof *urls);
    for (size_t i = 0; i < nsh; i++) {
        urls[i] = malloc(128);
        snprintf(urls[i], 128, "%s/s-%06zu.tar", dir, i);
        int fd = open(urls[i], O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd >= 0)
            close(fd);
    }
    sio_io *io = NULL;
    sio_shardlist *l = NULL;
    sio_index *ix = NULL;
    sio_journal *jr = NULL;
    sio_index_config icfg = {0};
    sio_error e;
    if (sio_io_create(NULL, &io, NULL) ||
        sio_shardlist_from_urls((const char *const *)urls, nsh, &l, NULL) ||
        sio_index_open(&icfg, &ix, NULL) ||
        sio_journal_open(NULL, nsh, &jr, NULL))
        return 1;
    uint64_t r0 = rss_kib();
    double t0 = now();
    for (size_t i = 0; i < nsh; i++) {
        sio_index_entry *x = sio_index_get(ix, io, urls[i], UINT64_MAX);
        uint64_t n = i + 1 == nsh ? total - per * (nsh - 1) : per;
        for (uint64_t g = 0; g < n; g++) {
            sio_index_group grp = {g * 1536, (g + 1) * 1536, 1000, 0,
                                   (uint32_t)(g * 2654435761u)};
            char key[32];
            int kl = snprintf(key, sizeof key, "%06zu/%06" PRIu64, i, g);
            sio_index_field f = {"bin", 1000};
            sio_index_offer(x, g, &grp, key, (size_t)kl, &f, 1, 0);
        }
        sio_index_finish(x, n);
    }
    double t1 = now();
    uint64_t r1 = rss_kib();
    printf("samples: %" PRIu64 " in %zu shards, shuffle buffer %u, "
           "interleave 4\n", total, nsh, buffer);
    printf("index: %.1f s to fill, %.1f bytes of memory per sample "
           "(RSS)\n", t1 - t0, (double)(r1 - r0) * 1024.0 / (double)total);

    sio_epoch_config c = {0};
    c.seed = 1;
    c.epoch = 0;
    c.interleave = 4;
    c.buffer_samples = buffer;
    c.index = ix;
    c.journal = jr;
    sio_plan *whole = NULL;
    sio_code rc = sio_plan_build(io, l, &c, 16777216, &whole, &e);
    printf("a whole plan at the default keep (16,777,216): %s\n",
           rc == SIO_ERR_LIMIT ? "refused (SIO_ERR_LIMIT): windowed instead"
                               : "built");
    sio_plan_unref(whole);

    /* Three fresh plans, each with one reader at 90%: the median. */
    sio_plan *p = NULL;
    double runs[3];
    uint64_t at = total / 10 * 9;
    plan_waiter w = {.fn = nokick};
    plan_mark m;
    sio_plan_item it;
    int got = 0;
    for (int k = 0; k < 3; k++) {
        if (p) {
            plan_mark_unlink(p, &m);
            sio_plan_unref(p);
            p = NULL;
        }
        double t2 = now();
        if (sio_plan_start(io, l, &c, 16777216, &p, &e) != SIO_OK) {
            fprintf(stderr, "start: %s\n", e.msg);
            return 1;
        }
        sio_plan_set_kick(p, nokick, NULL);
        sio_plan_set_restage(p, nokick, NULL);
        plan_mark_link(p, &m, at);
        while (sio_plan_count(p) <= at && !sio_plan_complete(p)) {
            plan_wait_for(p, &w, at);
            rc = sio_plan_grow(p, &e);
            if (rc != SIO_OK && rc != SIO_ERR_AGAIN && rc != SIO_ERR_BUSY)
                break;
            if (rc == SIO_OK && !sio_plan_complete(p))
                break;
        }
        plan_unwait(p, &w);
        got = sio_plan_item_get(p, at, &it);
        runs[k] = now() - t2;
    }
    double a = runs[0], b = runs[1], cc = runs[2];
    double med = a > b ? (b > cc ? b : (a > cc ? cc : a))
                       : (a > cc ? a : (b > cc ? cc : b));
    sio_plan_window win;
    sio_plan_window_stats(p, &win);
    printf("a fresh plan to a reader at 90%% (Y[%" PRIu64 "]): %.2f s "
           "median of %.2f, %.2f, %.2f (%.1f ns a sample), item %s\n", at,
           med, runs[0], runs[1], runs[2], med * 1e9 / (double)at,
           got ? "read" : "MISSING");
    printf("held then: %" PRIu64 " items (%.1f MiB), plan memory %.1f MiB, "
           "%" PRIu64 " checkpoints every %" PRIu64 " items (%.1f MiB), "
           "%" PRIu64 " chunks let go\n", win.held_items,
           (double)win.held_items * sizeof(sio_plan_item) / 1048576.0,
           (double)sio_plan_memory(p) / 1048576.0, win.checkpoints,
           win.checkpoint_every, (double)win.checkpoint_bytes / 1048576.0,
           win.released_chunks);
    /* A reader comes back to the middle (let go): made again. */
    uint64_t back = total / 2 + 12345;
    plan_mark_move(&m, back);
    double t4 = now();
    char why[300];
    int wr = plan_refill_wait(p, &w, back, why, sizeof why);
    if (wr == 1)
        sio_plan_restage(p);
    plan_unwait(p, &w);
    got = sio_plan_item_get(p, back, &it);
    double t5 = now();
    printf("a resume behind the window (Y[%" PRIu64 "], %s): %.3f s to its "
           "item (%s)\n", back, wr == 1 ? "let go" : "held", t5 - t4,
           got ? "read" : "MISSING");
    plan_mark_unlink(p, &m);
    sio_plan_unref(p);
    sio_journal_close(jr);
    sio_index_close(ix);
    sio_shardlist_free(l);
    sio_io_destroy(io);
    for (size_t i = 0; i < nsh; i++) {
        unlink(urls[i]);
        free(urls[i]);
    }
    free(urls);
    rmdir(dir);
    return 0;
}
