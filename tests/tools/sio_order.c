/*
 * sio_order.c — print an epoch's order, or one consumer's share of it.
 *
 *   sio_order SOURCE [--seed N] [--epoch N] [--interleave K]
 *             [--buffer B] [--buffer-bytes N] [--rank R --world W]
 *             [--partition P] [--start S] [--on-error skip|fail]
 *             [--threads T] [--readahead N] [--readahead-bytes N]
 *             [--replica J --replicas R] [--global-start G]
 *
 * One line per sample: "<global index> <shard index> <index in shard>
 * <bytes> <key>". Used by the contract tests, which compare it with an
 * independent Python implementation of the order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardio.h"

static uint64_t num(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0') {
        fprintf(stderr, "bad number: %s\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    sio_epoch_config cfg = {.interleave = 4, .buffer_samples = 1000};
    uint32_t rank = 0, world = 0;
    uint64_t start = 0, gstart = 0;
    sio_partition part = SIO_PARTITION_EVEN_DROP;
    const char *source = NULL;
    sio_io *io = NULL;
    sio_shardlist *list = NULL;
    sio_epoch *ep = NULL;
    sio_consumer *c = NULL;
    sio_error e;
    int rc = 1;

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
        if (!strcmp(a, "--seed"))
            cfg.seed = num(v);
        else if (!strcmp(a, "--epoch"))
            cfg.epoch = num(v);
        else if (!strcmp(a, "--interleave"))
            cfg.interleave = (uint32_t)num(v);
        else if (!strcmp(a, "--buffer"))
            cfg.buffer_samples = (uint32_t)num(v);
        else if (!strcmp(a, "--buffer-bytes"))
            cfg.buffer_bytes = num(v);
        else if (!strcmp(a, "--threads"))
            cfg.read_threads = (uint32_t)num(v);
        else if (!strcmp(a, "--readahead"))
            cfg.readahead_shards = (uint32_t)num(v);
        else if (!strcmp(a, "--readahead-bytes"))
            cfg.readahead_bytes = num(v);
        else if (!strcmp(a, "--replica"))
            cfg.replica = (uint32_t)num(v);
        else if (!strcmp(a, "--replicas"))
            cfg.replicas = (uint32_t)num(v);
        else if (!strcmp(a, "--global-start"))
            gstart = num(v);
        else if (!strcmp(a, "--rank"))
            rank = (uint32_t)num(v);
        else if (!strcmp(a, "--world"))
            world = (uint32_t)num(v);
        else if (!strcmp(a, "--start"))
            start = num(v);
        else if (!strcmp(a, "--partition")) {
            if (sio_partition_parse(v, &part) != 0) {
                fprintf(stderr, "bad partition %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--on-error"))
            cfg.on_error = !strcmp(v, "fail") ? SIO_ON_ERROR_FAIL
                                              : SIO_ON_ERROR_SKIP;
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (!source) {
        fprintf(stderr, "usage: sio_order SOURCE [options]\n");
        return 2;
    }
    if (sio_io_create(NULL, &io, &e) != SIO_OK ||
        sio_shardlist_resolve(io, source, &list, &e) != SIO_OK ||
        sio_epoch_open(io, list, &cfg, &ep, &e) != SIO_OK) {
        fprintf(stderr, "error: %s\n", e.msg);
        goto out;
    }
    if (world) {
        if (sio_consumer_open_at(ep, rank, world, part, gstart, start, &c,
                                 &e) != SIO_OK) {
            ep = NULL;
            fprintf(stderr, "error: %s\n", e.msg);
            goto out;
        }
        ep = NULL;
    }
    for (;;) {
        const sio_sample *s;
        sio_code r = c ? sio_consumer_next(c, &s) : sio_epoch_next(ep, &s);
        if (r != SIO_OK) {
            fprintf(stderr, "error: %s\n",
                    c ? sio_consumer_errmsg(c) : sio_epoch_errmsg(ep));
            goto out;
        }
        if (!s)
            break;
        printf("%" PRIu64 " %u %" PRIu64 " %zu %s\n", s->global_index,
               s->shard_index, s->index_in_shard, s->bytes, s->key);
        sio_sample_unref(s);
    }
    rc = 0;
out:
    sio_consumer_close(c);
    sio_epoch_close(ep);
    sio_shardlist_free(list);
    sio_io_destroy(io);
    return rc;
}
