/*
 * fuzz_shard.c — libFuzzer harness for tar reading + WebDataset grouping.
 *
 * The input is a shard (any compression libarchive detects). Limits are
 * small so that a hostile size field cannot make the harness allocate
 * more than a few MiB: every allocation must follow the named limits.
 *
 * Each input is read twice: by the plain tar reader (the default for an
 * uncompressed shard) and forced through libarchive. Both must give the
 * same groups up to the first error, and both must end in an error or
 * both not: a group good in both has the same key, group number, field
 * names, sizes and bytes; a group bad in both has the same reason (but
 * for the damaged-header reason, given by one reader only). One
 * difference is allowed: next to a header dropped for its checksum,
 * libarchive says nothing of it and both samples around it are bad, while
 * the plain reader may read its name and keep the one whose member it was
 * not (shard.c's damage_owner), reports a sample of one member lost to
 * it, which libarchive does not see at all, and it takes zero blocks
 * inside the data
 * a damaged header's size gives for data where libarchive ends the
 * archive. A group good for libarchive and bad for the plain reader, or
 * any other difference, traps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RESULTS 100000

/* What a reader produced: a digest per group (FNV-1a 64), whether it was
 * bad, and whether the reader stopped at an error. */
typedef struct trail {
    uint64_t h;
    uint64_t results;
    int failed;
    uint64_t *digest; /* MAX_RESULTS of each */
    uint64_t *group;  /* a good sample's index_in_shard */
    unsigned char *bad;
    uint64_t damage;  /* damaged-header events the reader saw */
} trail;

static void mix(trail *t, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        t->h = (t->h ^ b[i]) * 1099511628211ull;
}

static void read_shard(const uint8_t *data, size_t size, int force, trail *t)
{
    sio_stream *st = NULL;
    sio_shard *sh = NULL;
    sio_shard_limits lim = {.member_max = 1u << 20, .sample_max = 4u << 20,
                            .fields_max = 64};
    t->results = 0;
    t->failed = 0;
    t->damage = 0;
    sio_shard_force_libarchive(force);
    if (sio_stream_memory(data, size, &st) != SIO_OK)
        return;
    if (sio_shard_open_stream(NULL, st, "fuzz://input", 0, &lim, &sh, NULL) !=
        SIO_OK) {
        t->failed = 1;
        sio_shard_force_libarchive(0);
        return;
    }
    for (int i = 0; i < MAX_RESULTS; i++) {
        const sio_sample *s = NULL;
        t->h = 1469598103934665603ull;
        sio_code rc = sio_shard_next(sh, &s);
        if (rc == SIO_ERR_SAMPLE) {
            const char *m = sio_shard_errmsg(sh);
            mix(t, m, strlen(m));
            t->digest[t->results] = t->h;
            /* 2: bad for a damaged header in or next to it; 3: a sample
             * of one member lost to one (the plain reader only) */
            t->bad[t->results++] = (unsigned char)sio_shard_bad_kind(sh);
            continue;
        }
        if (rc != SIO_OK) {
            t->failed = 1;
            break;
        }
        if (!s)
            break;
        mix(t, s->key, strlen(s->key) + 1);
        t->group[t->results] = s->index_in_shard;
        size_t total = 0;
        for (size_t f = 0; f < s->nfields; f++) {
            total += s->fields[f].len;
            /* touch every byte so ASan sees any bad pointer */
            volatile unsigned char x = 0;
            for (size_t b = 0; b < s->fields[f].len; b++)
                x ^= s->fields[f].data[b];
            (void)x;
            mix(t, s->fields[f].name, strlen(s->fields[f].name) + 1);
            mix(t, &s->fields[f].len, sizeof s->fields[f].len);
            mix(t, s->fields[f].data, s->fields[f].len);
        }
        if (total != s->bytes || s->bytes > lim.sample_max)
            __builtin_trap();
        t->digest[t->results] = t->h;
        t->bad[t->results++] = 0;
        sio_sample_unref(s);
    }
    t->damage = sio_shard_damage_seen(sh);
    sio_shard_close(sh);
    sio_shard_force_libarchive(0);
}

static int trail_init(trail *t)
{
    t->digest = malloc(MAX_RESULTS * sizeof *t->digest);
    t->group = malloc(MAX_RESULTS * sizeof *t->group);
    t->bad = malloc(MAX_RESULTS);
    return t->digest && t->group && t->bad;
}

/* p without the samples of one member lost to a damaged header (which
 * libarchive does not report), group numbers counted without them; nb[k]:
 * whether p's result next to p's k-th (in the full sequence) is bad, or
 * the shard failed right after it. */
static void drop_lone(const trail *full, trail *p, unsigned char *nb)
{
    uint64_t lone = 0;
    p->results = 0;
    p->failed = full->failed;
    p->damage = full->damage;
    for (uint64_t i = 0; i < full->results; i++) {
        if (full->bad[i] == 3) {
            if (full->damage == 0)
                __builtin_trap(); /* a lost sample without damage */
            lone++;
            continue;
        }
        if (!full->bad[i] && full->group[i] < lone)
            __builtin_trap();
        p->group[p->results] = full->bad[i] ? 0 : full->group[i] - lone;
        nb[p->results] = (i > 0 && full->bad[i - 1]) ||
                         (i + 1 < full->results && full->bad[i + 1]) ||
                         (full->failed && i + 1 == full->results);
        p->digest[p->results] = full->digest[i];
        p->bad[p->results++] = full->bad[i];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static trail full, plain, la;
    static unsigned char *nb;
    if (!nb && (!trail_init(&full) || !trail_init(&plain) ||
                !trail_init(&la) || !(nb = malloc(MAX_RESULTS))))
        return 0;
    read_shard(data, size, 0, &full);
    drop_lone(&full, &plain, nb);
    read_shard(data, size, 1, &la);
    /* The same account, also when both stop at an error; but where
     * libarchive ended the archive at zeros after a damaged header (its
     * last group bad for it, or none read), the plain reader may read on,
     * to more groups or to an error (a truncated tail: then that last
     * group, open when the data ran out, may fail with the shard). */
    if (plain.results != la.results || plain.failed != la.failed) {
        if (la.failed || plain.damage == 0 ||
            (la.results > 0 && la.bad[la.results - 1] != 2) ||
            (plain.results < la.results &&
             !(plain.failed && plain.results + 1 == la.results)))
            __builtin_trap();
    }
    for (uint64_t i = 0; i < la.results && i < plain.results; i++) {
        if (plain.bad[i] && !la.bad[i])
            __builtin_trap(); /* the plain reader lost a good sample */
        if (!plain.bad[i] && la.bad[i] && la.bad[i] != 2)
            __builtin_trap(); /* kept a sample bad for another reason */
        /* Kept next to a damaged header: the sample on its other side, or
         * a sample of one member lost there, took the blame (or the shard
         * failed right after). */
        if (!plain.bad[i] && la.bad[i] && !nb[i])
            __builtin_trap();
        /* Both good: the same sample. Both bad for their own content: the
         * same reason (next to a damaged header, the reason a reader
         * names may be either). */
        if (((!plain.bad[i] && !la.bad[i]) ||
             (plain.bad[i] == 1 && la.bad[i] == 1)) &&
            plain.digest[i] != la.digest[i])
            __builtin_trap();
        if (!plain.bad[i] && !la.bad[i] && plain.group[i] != la.group[i])
            __builtin_trap();
    }
    return 0;
}
