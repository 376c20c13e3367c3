/*
 * sio_epoch_dump — run one epoch with libshardio alone (no server) and
 * print one line per sample, so tests can compare runs byte for byte:
 *
 *   <global index> TAB <shard url> TAB <key> TAB <content sha256>
 *
 * The content hash is the one of tests/tools/mkwds.py and the Python
 * client: sha256 over the fields sorted by name, each as name, NUL, its
 * length as 8 bytes little-endian, its bytes.
 *
 * Usage: sio_epoch_dump [options] SOURCE
 *   --seed N --epoch N --interleave K --buffer B --on-error skip|fail
 *   --part-size BYTES --parts N --retries N --retry-base-ms MS
 *   --retry-max-ms MS --stall-ms MS --connect-ms MS --inflight N
 *   --region R --endpoint URL --path-style | --virtual-hosted --anonymous
 *   --list (print the shard list only: index TAB url TAB size)
 *   --stats (counters on stderr at the end)  -v (library log on stderr)
 * The AWS_* environment is read by the library as usual.
 * Exit status: 0 the epoch ended, 1 it failed (message on stderr), 2 usage.
 */
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardio.h"

static void log_stderr(void *ud, int level, const char *msg)
{
    (void)ud;
    fprintf(stderr, "log level=%d %s\n", level, msg);
}

static int cmp_field(const void *a, const void *b)
{
    const sio_field *x = *(const sio_field *const *)a;
    const sio_field *y = *(const sio_field *const *)b;
    return strcmp(x->name, y->name);
}

static int sample_hash(const sio_sample *s, char hex[65])
{
    const sio_field **v = malloc((s->nfields ? s->nfields : 1) * sizeof *v);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char dig[32];
    unsigned int dl = 0;
    int rc = -1;
    if (!v || !md)
        goto out;
    for (size_t i = 0; i < s->nfields; i++)
        v[i] = &s->fields[i];
    qsort(v, s->nfields, sizeof *v, cmp_field);
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    for (size_t i = 0; i < s->nfields; i++) {
        unsigned char le[8];
        uint64_t n = v[i]->len;
        for (int k = 0; k < 8; k++)
            le[k] = (unsigned char)(n >> (8 * k));
        EVP_DigestUpdate(md, v[i]->name, strlen(v[i]->name) + 1);
        EVP_DigestUpdate(md, le, 8);
        EVP_DigestUpdate(md, v[i]->data, v[i]->len);
    }
    EVP_DigestFinal_ex(md, dig, &dl);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", dig[i]);
    rc = 0;
out:
    EVP_MD_CTX_free(md);
    free(v);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: sio_epoch_dump [options] SOURCE (see the source "
                    "file's header)\n");
    return 2;
}

static int num(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    *out = strtoull(s, &end, 10);
    return *end ? -1 : 0;
}

int main(int argc, char **argv)
{
    sio_io_config ic;
    sio_epoch_config ec;
    sio_io *io = NULL;
    sio_shardlist *list = NULL;
    sio_epoch *ep = NULL;
    sio_error err;
    const char *source = NULL;
    int stats = 0, list_only = 0, status = 1;
    uint64_t v;

    memset(&ic, 0, sizeof ic);
    memset(&ec, 0, sizeof ec);
    ec.interleave = 4;
    ec.buffer_samples = 1;
    ec.on_error = SIO_ON_ERROR_FAIL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NUMOPT(name, field)                                               \
        if (strcmp(a, name) == 0) {                                       \
            if (num(val, &v))                                             \
                return usage();                                           \
            field = v;                                                    \
            i++;                                                          \
            continue;                                                     \
        }
        NUMOPT("--seed", ec.seed)
        NUMOPT("--epoch", ec.epoch)
        NUMOPT("--interleave", ec.interleave)
        NUMOPT("--buffer", ec.buffer_samples)
        NUMOPT("--part-size", ic.fetch.part_size)
        NUMOPT("--parts", ic.fetch.parts_per_stream)
        NUMOPT("--retries", ic.fetch.max_retries)
        NUMOPT("--retry-base-ms", ic.fetch.retry_base_ms)
        NUMOPT("--retry-max-ms", ic.fetch.retry_max_ms)
        NUMOPT("--stall-ms", ic.fetch.stall_timeout_ms)
        NUMOPT("--connect-ms", ic.fetch.connect_timeout_ms)
        NUMOPT("--inflight", ic.fetch.max_inflight)
#undef NUMOPT
        if (strcmp(a, "--on-error") == 0 && val) {
            if (strcmp(val, "skip") == 0)
                ec.on_error = SIO_ON_ERROR_SKIP;
            else if (strcmp(val, "fail") == 0)
                ec.on_error = SIO_ON_ERROR_FAIL;
            else
                return usage();
            i++;
        } else if (strcmp(a, "--region") == 0 && val) {
            ic.s3_region = val;
            i++;
        } else if (strcmp(a, "--endpoint") == 0 && val) {
            ic.s3_endpoint = val;
            i++;
        } else if (strcmp(a, "--path-style") == 0) {
            ic.s3_addressing = SIO_S3_ADDRESSING_PATH;
        } else if (strcmp(a, "--virtual-hosted") == 0) {
            ic.s3_addressing = SIO_S3_ADDRESSING_VIRTUAL;
        } else if (strcmp(a, "--anonymous") == 0) {
            ic.s3_anonymous = 1;
        } else if (strcmp(a, "--stats") == 0) {
            stats = 1;
        } else if (strcmp(a, "--list") == 0) {
            list_only = 1;
        } else if (strcmp(a, "-v") == 0) {
            ic.log.fn = log_stderr;
            ic.log.level = SIO_LOG_INFO;
        } else if (a[0] == '-' || source) {
            return usage();
        } else {
            source = a;
        }
    }
    if (!source)
        return usage();
    ec.log = ic.log;
    if (sio_io_create(&ic, &io, &err) != SIO_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto out;
    }
    if (sio_shardlist_resolve(io, source, &list, &err) != SIO_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto out;
    }
    if (list_only) {
        for (size_t i = 0; i < sio_shardlist_count(list); i++) {
            uint64_t sz = sio_shardlist_size(list, i);
            if (sz == UINT64_MAX)
                printf("%zu\t%s\t-\n", i, sio_shardlist_url(list, i));
            else
                printf("%zu\t%s\t%" PRIu64 "\n", i, sio_shardlist_url(list, i),
                       sz);
        }
        status = 0;
        goto out;
    }
    if (sio_epoch_open(io, list, &ec, &ep, &err) != SIO_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto out;
    }
    for (;;) {
        const sio_sample *s = NULL;
        char hex[65];
        sio_code rc = sio_epoch_next(ep, &s);
        if (rc != SIO_OK) {
            fprintf(stderr, "error: %s: %s\n", sio_strerror(rc),
                    sio_epoch_errmsg(ep));
            goto out;
        }
        if (!s)
            break;
        if (sample_hash(s, hex) != 0) {
            sio_sample_unref(s);
            fprintf(stderr, "error: out of memory\n");
            goto out;
        }
        printf("%" PRIu64 "\t%s\t%s\t%s\n", s->global_index, s->shard_url,
               s->key, hex);
        sio_sample_unref(s);
    }
    status = 0;
out:
    if (ep) {
        sio_epoch_stats es;
        sio_epoch_get_stats(ep, &es);
        fprintf(stderr, "epoch samples=%" PRIu64 " shards_done=%" PRIu64
                " shards_skipped=%" PRIu64 " samples_skipped=%" PRIu64 "\n",
                es.samples, es.shards_done, es.shards_skipped,
                es.samples_skipped);
    }
    if (stats && io) {
        sio_io_stats st;
        sio_io_get_stats(io, &st);
        fprintf(stderr, "io requests=%" PRIu64 " retries=%" PRIu64
                " throttles=%" PRIu64 " errors=%" PRIu64 " bytes=%" PRIu64
                " latency_us_sum=%" PRIu64 " latency_count=%" PRIu64
                " concurrency=%u\n",
                st.requests, st.retries, st.throttles, st.errors, st.bytes,
                st.latency_us_sum, st.latency_count, st.concurrency);
    }
    fflush(stdout);
    sio_epoch_close(ep);
    sio_shardlist_free(list);
    sio_io_destroy(io);
    return status;
}
