/*
 * cli_bench.c — `shardcast bench`: N concurrent consumers of one epoch
 * against a server, with a live progress line and a summary (samples/s,
 * MB/s, time to first sample, per-consumer spread), optionally as JSON,
 * and optionally an exactly-once check against a mkwds manifest or a
 * plain list of per-sample hashes ("key sha256" lines).
 *
 * Threading: one thread per consumer, each owning its stream; the main
 * thread prints progress from atomic counters. The --verify tables are
 * built before the threads start and are read-only afterwards, except
 * the per-sample delivery counters, which are atomics.
 * Ownership: main owns every consumer record and the manifest.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Most consumers one bench runs (each is a thread with its own stream). */
#define BENCH_CONSUMERS_MAX 1024u
/* Samples a manifest may describe (bounded so a bad file cannot make the
 * key table huge). */
#define MANIFEST_SAMPLES_MAX 50000000u
/* Largest --verify file read into memory: 50 M lines of a 64-digit hash
 * and a key of ~20 bytes fit (a JSON manifest of that many samples is
 * larger per sample but holds far fewer in practice). */
#define MANIFEST_FILE_MAX (UINT64_C(4) << 30)
/* Problems listed in detail by --verify (the counts are always complete). */
#define VERIFY_SHOWN 10

static const char bench_help_head[] =
    "usage: shardcast bench [OPTIONS]\n"
    "\n"
    "Run N consumers of one epoch at once (ranks FIRST..FIRST+N-1 of\n"
    "--world, default ranks 0..N-1 of N) and report samples/s, MB/s\n"
    "(payload bytes, 10^6), time to first sample and the per-consumer\n"
    "spread (min/median/max samples and MB/s). A progress line is drawn on\n"
    "stderr when it is a terminal, else a plain line every --interval.\n"
    "\n"
    "  -n, --consumers N     concurrent consumers (default 4, at most 1024)\n"
    "  --first-rank R        rank of the first consumer (default 0)\n"
    "  --limit N             stop each consumer after N samples\n"
    "  --verify FILE         check every sample against FILE: content hash,\n"
    "                        and (when the consumers are the whole world and\n"
    "                        run to the end) that together they got every\n"
    "                        sample exactly once (as the partition policy\n"
    "                        allows). FILE is one of\n"
    "                        - a JSON manifest {\"samples\": [{\"key\": K,\n"
    "                          \"hash\": H}, ...]} (other keys ignored), K the\n"
    "                          sample's WebDataset key, H the hex sha256 over\n"
    "                          its fields sorted by name, each as the name\n"
    "                          (UTF-8), a 0 byte, the length as 8 bytes\n"
    "                          little-endian and the data\n"
    "                          (shardcast.sample_hash in Python; the test\n"
    "                          generator tests/tools/mkwds.py writes one);\n"
    "                        - a plain list, one line per sample: the key,\n"
    "                          white space, the hex sha256 of ONE field's\n"
    "                          bytes, the field named by --verify-field\n"
    "                          (e.g. \"cat/0001 9f86d0...\"; blank lines and\n"
    "                          lines starting with # are skipped; the hash is\n"
    "                          the last word, so keys may hold spaces).\n"
    "                        A file starting with '{' is a manifest.\n"
    "  --verify-field NAME   the hashes of --verify are sha256 of field NAME\n"
    "                        (required for a plain list; with a manifest they\n"
    "                        come from samples[].fields[NAME].sha256, which\n"
    "                        mkwds.py writes). A sample without the field is\n"
    "                        a mismatch. --fields may then name NAME\n"
    "  --json                print the summary as JSON on stdout\n"
    "  --interval D          time between plain progress lines (default 5s;\n"
    "                        whole seconds, a bare number is seconds)\n"
    "  --help                this text\n";

typedef struct manifest {
    json_t *root;                /* a JSON manifest, or NULL */
    char *text;                  /* the file's bytes (a plain list's keys
                                    point into it, NUL-terminated) */
    const char *field;           /* --verify-field (lowercased), or NULL:
                                    the whole-sample content hash */
    int plain;                   /* a plain list */
    size_t n;
    const char **keys;           /* views into root or text */
    unsigned char (*hash)[32];
    size_t *table;               /* open addressing: index + 1, 0 empty */
    size_t cap;
    _Atomic uint32_t *seen;      /* deliveries per sample */
} manifest;

typedef struct consumer {
    uint32_t rank;
    const scc_options *base;
    manifest *mf;
    uint64_t limit;
    uint64_t t0_ns;
    _Atomic uint64_t samples, bytes;
    _Atomic int done;
    uint64_t ttfs_ns, end_ns; /* UINT64_MAX: no sample */
    uint64_t wire_bytes;
    uint32_t reconnects;
    scc_code rc;
    char err[512];
    char partition[16];
    uint64_t unknown, mismatched;
    char problems[VERIFY_SHOWN][160];
    size_t nproblems;
    int complete; /* reached the clean end */
} consumer;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* Index of key in the manifest, or -1. */
static long mf_find(const manifest *m, const char *key, size_t len)
{
    size_t i = (size_t)fnv(key, len) & (m->cap - 1);
    while (m->table[i]) {
        size_t idx = m->table[i] - 1;
        if (strlen(m->keys[idx]) == len && memcmp(m->keys[idx], key, len) == 0)
            return (long)idx;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void mf_free(manifest *m)
{
    json_decref(m->root);
    free(m->text);
    free(m->keys);
    free(m->hash);
    free(m->table);
    free((void *)m->seen);
    memset(m, 0, sizeof *m);
}

/* Parse 64 hex digits into out; -1 when malformed. */
static int parse_hash(const char *hx, size_t len, unsigned char out[32])
{
    if (len != 64)
        return -1;
    for (size_t k = 0; k < 32; k++) {
        int hi = hexval(hx[2 * k]), lo = hexval(hx[2 * k + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[k] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

/* Add sample i (key, hash text) to the tables; -1 with a message. */
static int mf_add(manifest *m, size_t i, const char *key, const char *hx,
                  size_t hxlen, const char *path, const char *where)
{
    if (parse_hash(hx, hxlen, m->hash[i]) != 0) {
        fprintf(stderr, "shardcast bench: %s: %s: bad hash (64 hex "
                "digits)\n", path, where);
        return -1;
    }
    if (mf_find(m, key, strlen(key)) >= 0) {
        fprintf(stderr, "shardcast bench: %s: key %s twice\n", path, key);
        return -1;
    }
    m->keys[i] = key;
    size_t h = (size_t)fnv(key, strlen(key)) & (m->cap - 1);
    while (m->table[h])
        h = (h + 1) & (m->cap - 1);
    m->table[h] = i + 1;
    return 0;
}

static int mf_alloc(manifest *m, const char *path)
{
    if (m->n > MANIFEST_SAMPLES_MAX) {
        fprintf(stderr, "shardcast bench: %s: more than %u samples\n", path,
                MANIFEST_SAMPLES_MAX);
        return -1;
    }
    m->cap = 16;
    while (m->cap < 2 * m->n)
        m->cap *= 2;
    m->keys = calloc(m->n ? m->n : 1, sizeof *m->keys);
    m->hash = calloc(m->n ? m->n : 1, sizeof *m->hash);
    m->table = calloc(m->cap, sizeof *m->table);
    m->seen = calloc(m->n ? m->n : 1, sizeof *m->seen);
    if (!m->keys || !m->hash || !m->table || !m->seen) {
        fprintf(stderr, "shardcast bench: out of memory for the manifest\n");
        return -1;
    }
    return 0;
}

/* The whole file into m->text (NUL-terminated); -1 with a message. */
static int mf_read(manifest *m, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 16, n = 0;
    if (!f) {
        fprintf(stderr, "shardcast bench: cannot open %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    m->text = malloc(cap + 1);
    while (m->text) {
        n += fread(m->text + n, 1, cap - n, f);
        if (n < cap)
            break;
        if ((uint64_t)cap * 2 > MANIFEST_FILE_MAX) {
            fprintf(stderr, "shardcast bench: %s: larger than %" PRIu64
                    " bytes\n", path, MANIFEST_FILE_MAX);
            fclose(f);
            return -1;
        }
        char *t = realloc(m->text, cap * 2 + 1);
        if (!t)
            break;
        m->text = t;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!m->text || bad) {
        fprintf(stderr, "shardcast bench: cannot read %s: %s\n", path,
                m->text ? "read error" : "out of memory");
        return -1;
    }
    m->text[n] = '\0';
    *len = n;
    return 0;
}

/* A plain list: "key<white space>hash" lines. Keys become NUL-terminated
 * views into m->text. */
static int mf_load_list(manifest *m, const char *path, size_t len)
{
    char *p, *end = m->text + len;
    m->n = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t i = 0, lineno = 0;
        if (pass == 1 && mf_alloc(m, path) != 0)
            return -1;
        for (p = m->text; p < end;) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            char *le = nl ? nl : end, *next = nl ? nl + 1 : end;
            lineno++;
            /* trim (also a CR before the newline) */
            while (p < le && isspace((unsigned char)*p))
                p++;
            while (le > p && isspace((unsigned char)le[-1]))
                le--;
            if (p == le || *p == '#') {
                p = next;
                continue;
            }
            if (memchr(p, '\0', (size_t)(le - p))) {
                fprintf(stderr, "shardcast bench: %s: line %zu holds a NUL "
                        "byte\n", path, lineno);
                return -1;
            }
            char *h = le;
            while (h > p && !isspace((unsigned char)h[-1]))
                h--;
            char *ke = h;
            while (ke > p && isspace((unsigned char)ke[-1]))
                ke--;
            if (ke == p) {
                fprintf(stderr, "shardcast bench: %s: line %zu: expected "
                        "\"KEY SHA256\"\n", path, lineno);
                return -1;
            }
            if (pass == 1) {
                char where[48];
                snprintf(where, sizeof where, "line %zu", lineno);
                *ke = '\0';
                if (mf_add(m, i, p, h, (size_t)(le - h), path, where) != 0)
                    return -1;
            }
            i++;
            if (pass == 0 && i > MANIFEST_SAMPLES_MAX)
                break;
            p = next;
        }
        m->n = i;
    }
    return 0;
}

static int mf_load(manifest *m, const char *path, const char *field)
{
    json_error_t jerr;
    size_t len = 0;
    memset(m, 0, sizeof *m);
    m->field = field;
    if (mf_read(m, path, &len) != 0)
        goto fail;
    const char *q = m->text;
    while (isspace((unsigned char)*q))
        q++;
    if (*q != '{') {
        m->plain = 1;
        if (!field) {
            fprintf(stderr, "shardcast bench: %s is a plain list (not a JSON "
                    "manifest): give --verify-field NAME, the field its "
                    "hashes are of\n", path);
            goto fail;
        }
        if (mf_load_list(m, path, len) != 0)
            goto fail;
        return 0;
    }
    m->root = json_loadb(m->text, len, 0, &jerr);
    json_t *samples = json_object_get(m->root, "samples");
    if (!json_is_array(samples)) {
        fprintf(stderr, "shardcast bench: %s: not a mkwds manifest (%s)\n",
                path, m->root ? "no samples list" : jerr.text);
        goto fail;
    }
    m->n = json_array_size(samples);
    if (mf_alloc(m, path) != 0)
        goto fail;
    for (size_t i = 0; i < m->n; i++) {
        json_t *s = json_array_get(samples, i);
        const char *key = json_string_value(json_object_get(s, "key"));
        json_t *hv = field ? json_object_get(
                                 json_object_get(json_object_get(s, "fields"),
                                                 field),
                                 "sha256")
                           : json_object_get(s, "hash");
        const char *hx = json_string_value(hv);
        char where[64];
        if (!key || !hx) {
            fprintf(stderr, "shardcast bench: %s: sample %zu lacks key or "
                    "%s%s%s\n", path, i, field ? "fields." : "hash",
                    field ? field : "", field ? ".sha256" : "");
            goto fail;
        }
        snprintf(where, sizeof where, "sample %zu", i);
        if (mf_add(m, i, key, hx, strlen(hx), path, where) != 0)
            goto fail;
    }
    return 0;
fail:
    mf_free(m);
    return -1;
}

static void problem(consumer *c, const char *what, const scc_sample *s)
{
    if (c->nproblems < VERIFY_SHOWN)
        snprintf(c->problems[c->nproblems++], sizeof c->problems[0],
                 "key %.*s (index %llu): %s",
                 (int)(s->key_len > 80 ? 80 : s->key_len), s->key,
                 (unsigned long long)s->global_index, what);
}

static void check_sample(consumer *c, const scc_sample *s)
{
    unsigned char h[32];
    const char *field = c->mf->field;
    long idx = mf_find(c->mf, s->key, s->key_len);
    if (idx < 0) {
        c->unknown++;
        problem(c, "not in the manifest", s);
        return;
    }
    if (field) {
        const scc_field *f = scc_sample_field(s, field);
        char what[96];
        if (!f) {
            c->mismatched++;
            snprintf(what, sizeof what, "has no field %s", field);
            problem(c, what, s);
        } else if (EVP_Digest(f->data, f->len, h, NULL, EVP_sha256(),
                              NULL) != 1 ||
                   memcmp(h, c->mf->hash[idx], 32) != 0) {
            c->mismatched++;
            snprintf(what, sizeof what, "sha256 of field %s differs", field);
            problem(c, what, s);
        }
    } else if (scc_sample_hash(s, h) != SCC_OK ||
               memcmp(h, c->mf->hash[idx], 32) != 0) {
        c->mismatched++;
        problem(c, "content hash differs", s);
    }
    atomic_fetch_add(&c->mf->seen[idx], 1);
}

static void *consumer_main(void *arg)
{
    consumer *c = arg;
    scc_stream *s = NULL;
    scc_options o = *c->base;
    o.rank = c->rank;

    c->ttfs_ns = UINT64_MAX;
    c->rc = scc_stream_open(&o, &s);
    while (c->rc == SCC_OK) {
        const scc_sample *smp = NULL;
        c->rc = scc_stream_next(s, &smp);
        if (c->rc != SCC_OK)
            break;
        if (!smp) {
            c->complete = 1;
            break;
        }
        if (c->ttfs_ns == UINT64_MAX)
            c->ttfs_ns = now_ns() - c->t0_ns;
        if (c->mf)
            check_sample(c, smp);
        atomic_fetch_add(&c->bytes, smp->bytes);
        if (atomic_fetch_add(&c->samples, 1) + 1 == c->limit)
            break;
    }
    if (c->rc != SCC_OK)
        snprintf(c->err, sizeof c->err, "%s",
                 s ? scc_stream_errmsg(s) : scc_strerror(c->rc));
    if (s) {
        const char *p = scc_stream_partition(s);
        snprintf(c->partition, sizeof c->partition, "%s", p ? p : "");
        c->wire_bytes = scc_stream_bytes(s);
        c->reconnects = scc_stream_reconnects(s);
    }
    scc_stream_close(s);
    c->end_ns = now_ns() - c->t0_ns;
    atomic_store(&c->done, 1);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* min/median/max of v[0..n) (sorted in place); zeros when n == 0. */
static void spread(double *v, size_t n, double out[3])
{
    if (n == 0) {
        out[0] = out[1] = out[2] = 0;
        return;
    }
    qsort(v, n, sizeof *v, cmp_double);
    out[0] = v[0];
    out[1] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    out[2] = v[n - 1];
}

static json_t *spread_json(const double s[3])
{
    return json_pack("{s:f, s:f, s:f}", "min", s[0], "median", s[1], "max",
                     s[2]);
}

int cli_bench(int argc, char **argv)
{
    enum { OPT_FIRST = OPT_CONN_END + 1, OPT_LIMIT, OPT_VERIFY, OPT_JSON,
           OPT_INTERVAL, OPT_VERIFY_FIELD };
    static const struct option opts[] = {
        {"consumers", required_argument, 0, 'n'},
        {"first-rank", required_argument, 0, OPT_FIRST},
        {"limit", required_argument, 0, OPT_LIMIT},
        {"verify", required_argument, 0, OPT_VERIFY},
        {"verify-field", required_argument, 0, OPT_VERIFY_FIELD},
        {"json", no_argument, 0, OPT_JSON},
        {"interval", required_argument, 0, OPT_INTERVAL},
        {"help", no_argument, 0, 'h'},
        CLI_CONN_OPTIONS,
        {0, 0, 0, 0}};
    cli_conn cc;
    int c, ret = CLI_EXIT_OK, json = 0, world_given = 0;
    uint64_t n = 4, first = 0, limit = 0, interval = 5;
    const char *verify = NULL;
    char verify_field[SCC_FIELD_NAME_MAX + 1] = "";
    manifest mf;
    consumer *cs = NULL;
    pthread_t *th = NULL;
    size_t started = 0;
    double *tmp = NULL;

    memset(&mf, 0, sizeof mf);
    cli_conn_init(&cc);
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'n':
            bad = cli_parse_u64(optarg, BENCH_CONSUMERS_MAX, &n) != 0 || !n;
            break;
        case OPT_FIRST:
            bad = cli_parse_u64(optarg, UINT32_MAX - 1, &first) != 0;
            break;
        case OPT_LIMIT:
            bad = cli_parse_u64(optarg, UINT64_MAX - 1, &limit) != 0 || !limit;
            break;
        case OPT_VERIFY: verify = optarg; break;
        case OPT_VERIFY_FIELD: {
            /* Field names are the lowercased extensions (WebDataset). */
            size_t fl = strlen(optarg);
            bad = fl == 0 || fl > SCC_FIELD_NAME_MAX || strchr(optarg, ',');
            for (size_t i = 0; !bad && i <= fl; i++)
                verify_field[i] = (char)tolower((unsigned char)optarg[i]);
            break;
        }
        case OPT_JSON: json = 1; break;
        case OPT_INTERVAL:
            bad = cli_parse_units(optarg, SIO_UNIT_SECS, 3600, &interval) != 0 ||
                  !interval;
            break;
        case 'h':
            fputs(bench_help_head, stdout);
            fputs(cli_conn_help, stdout);
            goto out;
        default: {
            if (c == OPT_WORLD)
                world_given = 1;
            int r = cli_conn_option(&cc, c, optarg, "bench");
            if (r == 1)
                continue;
            if (r == 0)
                fprintf(stderr, "%s%s", bench_help_head, cli_conn_help);
            ret = CLI_EXIT_USAGE;
            goto out;
        }
        }
        if (bad) {
            fprintf(stderr, "shardcast bench: bad value for option: %s\n",
                    optarg);
            ret = CLI_EXIT_USAGE;
            goto out;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "shardcast bench: unexpected argument %s\n",
                argv[optind]);
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    if (!world_given)
        cc.world = (uint32_t)(first + n);
    if (first + n > cc.world) {
        fprintf(stderr, "shardcast bench: ranks %" PRIu64 "..%" PRIu64
                " do not fit --world %u\n", first, first + n - 1, cc.world);
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    if (cli_conn_finish(&cc, "bench", 1) != 0) {
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    if (verify_field[0] && !verify) {
        fprintf(stderr, "shardcast bench: --verify-field needs --verify\n");
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    if (verify && cc.nfields) {
        int has = 0;
        for (size_t i = 0; i < cc.nfields; i++)
            has |= strcasecmp(cc.fields[i], verify_field) == 0;
        if (!verify_field[0] || !has) {
            fprintf(stderr, "shardcast bench: --verify needs %s: %s\n",
                    verify_field[0] ? "the --verify-field among --fields"
                                    : "every field (the content hash "
                                      "covers them all)",
                    verify_field[0] ? "add it" : "drop --fields");
            ret = CLI_EXIT_USAGE;
            goto out;
        }
    }
    if (verify && mf_load(&mf, verify,
                          verify_field[0] ? verify_field : NULL) != 0) {
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    scc_options base;
    cli_conn_options(&cc, &base);

    cs = calloc(n, sizeof *cs);
    th = calloc(n, sizeof *th);
    tmp = calloc(n, sizeof *tmp);
    if (!cs || !th || !tmp) {
        ret = CLI_EXIT_FAIL;
        goto out;
    }
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        cs[i].rank = (uint32_t)(first + i);
        cs[i].base = &base;
        cs[i].mf = verify ? &mf : NULL;
        cs[i].limit = limit;
        cs[i].t0_ns = t0;
        if (pthread_create(&th[i], NULL, consumer_main, &cs[i]) != 0) {
            fprintf(stderr, "shardcast bench: cannot start thread %zu\n", i);
            ret = CLI_EXIT_FAIL;
            break;
        }
        started++;
    }

    /* Progress until every consumer is done. */
    int tty = isatty(STDERR_FILENO);
    uint64_t last_print = t0;
    for (;;) {
        size_t ndone = 0;
        uint64_t ts = 0, tb = 0;
        for (size_t i = 0; i < started; i++) {
            ndone += atomic_load(&cs[i].done) != 0;
            ts += atomic_load(&cs[i].samples);
            tb += atomic_load(&cs[i].bytes);
        }
        uint64_t now = now_ns();
        double el = (double)(now - t0) / 1e9;
        if (ndone == started)
            break;
        if (tty) {
            fprintf(stderr, "\r\033[Kbench: %.1fs %" PRIu64 " samples %.0f "
                    "samples/s %.1f MB/s %zu/%zu running", el, ts,
                    el > 0 ? (double)ts / el : 0.0,
                    el > 0 ? (double)tb / 1e6 / el : 0.0, started - ndone,
                    started);
        } else if (now - last_print >= interval * 1000000000ull) {
            fprintf(stderr, "bench: elapsed_s=%.1f samples=%" PRIu64
                    " samples_per_s=%.0f mb_per_s=%.1f running=%zu\n", el, ts,
                    el > 0 ? (double)ts / el : 0.0,
                    el > 0 ? (double)tb / 1e6 / el : 0.0, started - ndone);
            last_print = now;
        }
        struct timespec d = {0, 200 * 1000000L};
        nanosleep(&d, NULL);
    }
    if (tty)
        fprintf(stderr, "\r\033[K");
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    /* Elapsed time: until the last consumer ended, as each recorded it
     * (the progress loop above only polls every 200 ms). */
    uint64_t wall_ns = 0;
    for (size_t i = 0; i < started; i++)
        if (cs[i].end_ns > wall_ns)
            wall_ns = cs[i].end_ns;
    if (wall_ns == 0)
        wall_ns = now_ns() - t0;
    if (started < n)
        goto out;

    /* Summary. */
    uint64_t total = 0, bytes = 0, wire = 0, reconnects = 0;
    size_t failed = 0, complete = 0;
    int worst = CLI_EXIT_OK;
    double ttfs[3], sps[3], mbps[3];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        total += cs[i].samples;
        bytes += cs[i].bytes;
        wire += cs[i].wire_bytes;
        reconnects += cs[i].reconnects;
        complete += cs[i].complete;
        if (cs[i].rc != SCC_OK) {
            failed++;
            if (worst == CLI_EXIT_OK)
                worst = cli_exit_for(cs[i].rc);
        }
        if (cs[i].ttfs_ns != UINT64_MAX)
            tmp[k++] = (double)cs[i].ttfs_ns / 1e9;
    }
    spread(tmp, k, ttfs);
    for (size_t i = 0; i < n; i++)
        tmp[i] = (double)cs[i].samples;
    spread(tmp, n, sps);
    for (size_t i = 0; i < n; i++) {
        double secs = (double)cs[i].end_ns / 1e9;
        tmp[i] = secs > 0 ? (double)cs[i].bytes / 1e6 / secs : 0.0;
    }
    spread(tmp, n, mbps);
    double wall = (double)wall_ns / 1e9;

    /* Exactly-once check. */
    json_t *jv = json_null();
    int verify_ok = 1;
    char vmsg[256] = "";
    if (verify) {
        uint64_t unknown = 0, mismatched = 0, missing = 0, dup = 0;
        for (size_t i = 0; i < n; i++) {
            unknown += cs[i].unknown;
            mismatched += cs[i].mismatched;
        }
        for (size_t i = 0; i < mf.n; i++) {
            uint32_t s = atomic_load(&mf.seen[i]);
            if (s == 0)
                missing++;
            else
                dup += s - 1;
        }
        int union_checked = complete == n && first == 0 && n == cc.world &&
                            cc.start == 0 && cc.global_start == 0 &&
                            !limit && (cc.nfields == 0 || mf.field);
        const char *part = cs[0].partition;
        uint64_t rem = mf.n % cc.world;
        uint64_t want_missing = 0, want_dup = 0;
        if (strcmp(part, "even-pad") == 0)
            want_dup = rem ? cc.world - rem : 0;
        else if (strcmp(part, "none") == 0)
            want_missing = 0;
        else /* even-drop, and tar (which does not say): the default */
            want_missing = rem;
        verify_ok = unknown == 0 && mismatched == 0;
        if (union_checked)
            verify_ok = verify_ok && missing == want_missing &&
                        dup == want_dup;
        else
            verify_ok = verify_ok && dup == 0;
        snprintf(vmsg, sizeof vmsg,
                 "%s: %" PRIu64 " unknown, %" PRIu64 " hash mismatches, %"
                 PRIu64 " missing (expected %" PRIu64 "), %" PRIu64
                 " duplicates (expected %" PRIu64 ")%s",
                 verify_ok ? "ok" : "FAILED", unknown, mismatched, missing,
                 union_checked ? want_missing : missing, dup,
                 union_checked ? want_dup : 0,
                 union_checked ? "" : "; union not checked (not the whole "
                                      "world run to the end)");
        json_t *probs = json_array();
        for (size_t i = 0; i < n; i++)
            for (size_t p = 0; p < cs[i].nproblems; p++)
                json_array_append_new(probs, json_string(cs[i].problems[p]));
        jv = json_pack("{s:b, s:s, s:o, s:b, s:I, s:I, s:I, s:I, s:I, s:I, "
                       "s:s, s:o}",
                       "ok", verify_ok, "format",
                       mf.plain ? "list" : "manifest", "field",
                       mf.field ? json_string(mf.field) : json_null(),
                       "union_checked", union_checked,
                       "manifest_samples", (json_int_t)mf.n, "unknown",
                       (json_int_t)unknown, "hash_mismatches",
                       (json_int_t)mismatched, "missing", (json_int_t)missing,
                       "duplicates", (json_int_t)dup, "expected_missing",
                       (json_int_t)want_missing, "partition",
                       part[0] ? part : "unknown", "problems", probs);
    }

    if (json) {
        json_t *detail = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *d = json_pack(
                "{s:I, s:I, s:I, s:f, s:I, s:s, s:b}", "rank",
                (json_int_t)cs[i].rank, "samples", (json_int_t)cs[i].samples,
                "bytes", (json_int_t)cs[i].bytes, "seconds",
                (double)cs[i].end_ns / 1e9, "reconnects",
                (json_int_t)cs[i].reconnects, "status",
                cs[i].rc == SCC_OK ? "ok" : scc_strerror(cs[i].rc),
                "complete", cs[i].complete);
            json_object_set_new(d, "ttfs_s",
                                cs[i].ttfs_ns == UINT64_MAX
                                    ? json_null()
                                    : json_real((double)cs[i].ttfs_ns / 1e9));
            if (cs[i].rc != SCC_OK)
                json_object_set_new(d, "error", json_string(cs[i].err));
            json_array_append_new(detail, d);
        }
        json_t *root = json_pack(
            "{s:I, s:I, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:o, s:{s:o, "
            "s:o}, s:I, s:I, s:o, s:o}",
            "consumers", (json_int_t)n, "world", (json_int_t)cc.world,
            "format", cc.format == SCC_FORMAT_TAR ? "tar" : "frames",
            "samples", (json_int_t)total, "bytes", (json_int_t)bytes,
            "wire_bytes", (json_int_t)wire, "seconds", wall,
            "samples_per_s", wall > 0 ? (double)total / wall : 0.0,
            "mb_per_s", wall > 0 ? (double)bytes / 1e6 / wall : 0.0,
            "ttfs_s", spread_json(ttfs), "per_consumer", "samples",
            spread_json(sps), "mb_per_s", spread_json(mbps), "reconnects",
            (json_int_t)reconnects, "failed", (json_int_t)failed, "verify",
            jv, "consumers_detail", detail);
        char *text = root ? json_dumps(root, JSON_INDENT(1) |
                                                 JSON_PRESERVE_ORDER)
                          : NULL;
        if (text)
            puts(text);
        free(text);
        json_decref(root);
    } else {
        char hb[32];
        cli_human_bytes((double)bytes, hb, sizeof hb);
        printf("consumers        %" PRIu64 " (ranks %" PRIu64 "..%" PRIu64
               " of %u), format %s\n", n, first, first + n - 1, cc.world,
               cc.format == SCC_FORMAT_TAR ? "tar" : "frames");
        printf("samples          %" PRIu64 " (%s payload) in %.2f s\n", total,
               hb, wall);
        printf("throughput       %.1f samples/s, %.2f MB/s\n",
               wall > 0 ? (double)total / wall : 0.0,
               wall > 0 ? (double)bytes / 1e6 / wall : 0.0);
        printf("first sample     min %.3f s, median %.3f s, max %.3f s\n",
               ttfs[0], ttfs[1], ttfs[2]);
        printf("per consumer     samples min %.0f / median %.0f / max %.0f;"
               " MB/s min %.2f / median %.2f / max %.2f\n", sps[0], sps[1],
               sps[2], mbps[0], mbps[1], mbps[2]);
        printf("reconnects       %" PRIu64 "\n", reconnects);
        printf("failed           %zu\n", failed);
        if (verify) {
            printf("verify           %s\n", vmsg);
            for (size_t i = 0; i < n; i++)
                for (size_t p = 0; p < cs[i].nproblems; p++)
                    printf("  rank %u: %s\n", cs[i].rank, cs[i].problems[p]);
        }
        json_decref(jv);
    }
    for (size_t i = 0; i < n; i++)
        if (cs[i].rc != SCC_OK)
            fprintf(stderr, "shardcast bench: rank %u: %s\n", cs[i].rank,
                    cs[i].err);
    if (worst != CLI_EXIT_OK)
        ret = worst;
    else if (!verify_ok)
        ret = CLI_EXIT_VERIFY;
out:
    if (fflush(stdout) != 0 && ret == CLI_EXIT_OK)
        ret = CLI_EXIT_FAIL;
    free(cs);
    free(th);
    free(tmp);
    mf_free(&mf);
    cli_conn_free(&cc);
    return ret;
}
