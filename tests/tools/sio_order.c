/*
 * sio_order.c — print an epoch's order, or one consumer's share of it.
 *
 *   sio_order SOURCE [--seed N] [--epoch N] [--interleave K]
 *             [--buffer B] [--buffer-bytes N] [--rank R --world W]
 *             [--partition P] [--start S] [--on-error skip|fail]
 *             [--threads T] [--readahead N] [--readahead-bytes N]
 *             [--replica J --replicas R] [--global-start G]
 *   sio_order --mix KIND:VALUE[:r]:SOURCE ... [--epoch-size N] [options]
 *
 * One line per sample: "<global index> <shard index> <index in shard>
 * <bytes> <key>", and " <source>" for a mixed epoch. A mixed epoch (docs/order.md
 * "Mixing datasets") takes one --mix per source: KIND weight, repeat or
 * choose, its VALUE, ":r" for shards drawn with replacement, then the
 * source (the rest of the argument). Used by the contract tests, which
 * compare it with an independent Python implementation of the order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardio.h"
#include "shardio_index.h"

#define MIX_MAX 64

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
    const char *mixsrc[MIX_MAX];
    sio_mix_spec spec[MIX_MAX];
    sio_mix_source msrc[MIX_MAX];
    sio_shardlist *parts[MIX_MAX] = {0};
    uint64_t counts[MIX_MAX], quotas[MIX_MAX], epoch_size = 0;
    size_t nmix = 0;
    sio_index *ix = NULL;
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
        else if (!strcmp(a, "--epoch-size"))
            epoch_size = num(v);
        else if (!strcmp(a, "--mix")) {
            char kind[16];
            const char *p = strchr(v, ':'), *q;
            if (nmix == MIX_MAX || !p || (size_t)(p - v) >= sizeof kind) {
                fprintf(stderr, "bad --mix %s\n", v);
                return 2;
            }
            memcpy(kind, v, (size_t)(p - v));
            kind[p - v] = 0;
            q = strchr(p + 1, ':');
            if (!q) {
                fprintf(stderr, "bad --mix %s\n", v);
                return 2;
            }
            memset(&spec[nmix], 0, sizeof spec[nmix]);
            memset(&msrc[nmix], 0, sizeof msrc[nmix]);
            if (!strcmp(kind, "weight"))
                spec[nmix].kind = SIO_MIX_WEIGHT;
            else if (!strcmp(kind, "repeat"))
                spec[nmix].kind = SIO_MIX_REPEAT;
            else if (!strcmp(kind, "choose"))
                spec[nmix].kind = SIO_MIX_CHOOSE;
            else {
                fprintf(stderr, "bad kind %s\n", kind);
                return 2;
            }
            spec[nmix].value = strtod(p + 1, NULL);
            spec[nmix].choose = strtoull(p + 1, NULL, 10);
            if (!strncmp(q, ":r:", 3)) {
                msrc[nmix].resample = 1;
                q += 2;
            }
            mixsrc[nmix++] = q + 1;
        } else if (!strcmp(a, "--global-start"))
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
    if (!source && !nmix) {
        fprintf(stderr, "usage: sio_order SOURCE [options]\n");
        return 2;
    }
    if (sio_io_create(NULL, &io, &e) != SIO_OK) {
        fprintf(stderr, "error: %s\n", e.msg);
        goto out;
    }
    if (nmix) {
        /* One list of the sources' shards; the quotas, with the counts
         * that repeat needs from indexes built here. */
        sio_index_config ic = {0};
        uint32_t first = 0;
        if (sio_index_open(&ic, &ix, &e) != SIO_OK)
            goto fail;
        for (size_t i = 0; i < nmix; i++) {
            if (sio_shardlist_resolve(io, mixsrc[i], &parts[i], &e) != SIO_OK)
                goto fail;
            msrc[i].first = first;
            msrc[i].count = (uint32_t)sio_shardlist_count(parts[i]);
            first += msrc[i].count;
        }
        if (sio_shardlist_concat((const sio_shardlist *const *)parts, nmix,
                                 &list, &e) != SIO_OK)
            goto fail;
        cfg.index = ix;
        for (size_t i = 0; i < nmix; i++) {
            sio_epoch_config cc = cfg;
            counts[i] = UINT64_MAX;
            if (spec[i].kind != SIO_MIX_REPEAT)
                continue;
            cc.range_first = msrc[i].first;
            cc.range_count = msrc[i].count;
            for (uint32_t k = 0; k < msrc[i].count; k++) {
                uint32_t idx = msrc[i].first + k;
                const char *u = sio_shardlist_url(list, idx);
                sio_index_entry *en = sio_index_get(ix, io, u, UINT64_MAX);
                sio_index_info info;
                sio_index_get_info(en, &info);
                if (!info.complete &&
                    sio_index_build(io, u, idx, &cfg.limits, en, &e) != SIO_OK)
                    goto fail;
            }
            if (sio_epoch_count(io, list, &cc, &counts[i]) != SIO_OK) {
                fprintf(stderr, "error: no count for source %zu\n", i);
                goto out;
            }
        }
        if (sio_mix_quotas(spec, nmix, epoch_size, counts, quotas, &e) !=
            SIO_OK)
            goto fail;
        for (size_t i = 0; i < nmix; i++)
            msrc[i].quota = quotas[i];
        cfg.mix = msrc;
        cfg.nmix = (uint32_t)nmix;
    } else if (sio_shardlist_resolve(io, source, &list, &e) != SIO_OK) {
        goto fail;
    }
    if (sio_epoch_open(io, list, &cfg, &ep, &e) != SIO_OK)
        goto fail;
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
        if (nmix)
            printf("%" PRIu64 " %u %" PRIu64 " %zu %s %u\n", s->global_index,
                   s->shard_index, s->index_in_shard, s->bytes, s->key,
                   s->source);
        else
            printf("%" PRIu64 " %u %" PRIu64 " %zu %s\n", s->global_index,
                   s->shard_index, s->index_in_shard, s->bytes, s->key);
        sio_sample_unref(s);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", e.msg);
out:
    sio_consumer_close(c);
    sio_epoch_close(ep);
    sio_shardlist_free(list);
    for (size_t i = 0; i < nmix; i++)
        sio_shardlist_free(parts[i]);
    sio_index_close(ix);
    sio_io_destroy(io);
    return rc;
}
