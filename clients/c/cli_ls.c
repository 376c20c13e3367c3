/*
 * cli_ls.c — `shardcast ls SOURCE`: the shard list a source resolves to
 * (libshardio's sio_shardlist_resolve, so local, http(s) and s3 sources
 * with the library's S3 settings from the environment), with sizes, and
 * with --count the number of samples of each shard (each shard is read
 * once, streaming, holding one sample at a time). The list is exactly
 * what a job with that source serves: a directory or prefix contributes
 * its shard names only; --all shows every object of the listings, marking
 * the ones a job would not read (the source is resolved both ways and the
 * served list, a subsequence of the full one, picks the shards).
 *
 * Threading: main thread only; the sio_io's fetch engine runs its own
 * threads. Ownership: everything is freed before returning.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardio.h"

static const char ls_help[] =
    "usage: shardcast ls [--count] [--all] [--json] [-v] SOURCE\n"
    "\n"
    "List the shards SOURCE resolves to, in dataset order, with their sizes\n"
    "in bytes (\"-\" when the store does not say): exactly the shards a job\n"
    "with this --source serves. SOURCE is what a job's --source takes: a\n"
    "directory, a path or brace pattern, an http(s) URL pattern,\n"
    "s3://bucket/prefix/ or s3://bucket/name-{000..099}.tar; several specs\n"
    "are separated by \"::\". From a directory or prefix only shard names\n"
    "are taken: .tar, .tar.gz, .tgz, .tar.zst, .zip (any case); other files\n"
    "(manifests, .scidx index sidecars, READMEs) are not listed. S3 settings\n"
    "come from the environment (AWS_REGION, AWS_ENDPOINT_URL_S3,\n"
    "AWS_PROFILE, ...).\n"
    "\n"
    "  --count   also read every shard and count its samples\n"
    "  --all     list every object of a directory or prefix, with a KIND\n"
    "            column: \"shard\", or \"other\" for what a job skips\n"
    "  --json    print JSON instead of a table\n"
    "  -v        log the library's messages to stderr\n"
    "  --help    this text\n";

static void log_stderr(void *ud, int level, const char *msg)
{
    (void)ud;
    fprintf(stderr, "shardcast ls: level=%d %s\n", level, msg);
}

static int exit_for_sio(sio_code c)
{
    switch (c) {
    case SIO_ERR_NOTFOUND: return CLI_EXIT_NOTFOUND;
    case SIO_ERR_INVALID:
    case SIO_ERR_UNSUPPORTED: return CLI_EXIT_USAGE;
    case SIO_ERR_AUTH: return CLI_EXIT_AUTH;
    default: return CLI_EXIT_FAIL;
    }
}

/* Count the samples of shard i; -1 with a message on failure. */
static int count_shard(sio_io *io, const sio_shardlist *l, size_t i,
                       uint64_t *samples, uint64_t *bad, sio_code *code)
{
    sio_shard *sh = NULL;
    sio_error err = {SIO_OK, ""};
    int ret = 0;
    const char *url = sio_shardlist_url(l, i);

    *samples = 0;
    *bad = 0;
    sio_code rc = sio_shard_open(io, url, (uint32_t)i, NULL, &sh, &err);
    if (rc != SIO_OK) {
        fprintf(stderr, "shardcast ls: %s: %s\n", url, err.msg);
        *code = rc;
        ret = -1;
        goto out;
    }
    for (;;) {
        const sio_sample *s = NULL;
        rc = sio_shard_next(sh, &s);
        if (rc == SIO_ERR_SAMPLE) {
            (*bad)++;
            continue;
        }
        if (rc != SIO_OK) {
            fprintf(stderr, "shardcast ls: %s: %s\n", url,
                    sio_shard_errmsg(sh));
            *code = rc;
            ret = -1;
            goto out;
        }
        if (!s)
            break;
        (*samples)++;
        sio_sample_unref(s);
    }
out:
    sio_shard_close(sh);
    return ret;
}

int cli_ls(int argc, char **argv)
{
    static const struct option opts[] = {
        {"count", no_argument, 0, 'c'},
        {"all", no_argument, 0, 'a'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int count = 0, all = 0, json = 0, verbose = 0, c, ret = CLI_EXIT_OK;
    sio_io *io = NULL;
    sio_shardlist *l = NULL, *served = NULL;
    sio_error err = {SIO_OK, ""};
    sio_io_config cfg;
    json_t *jarr = NULL;

    optind = 1;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': count = 1; break;
        case 'a': all = 1; break;
        case 'j': json = 1; break;
        case 'v': verbose = 1; break;
        case 'h': fputs(ls_help, stdout); return CLI_EXIT_OK;
        default: fputs(ls_help, stderr); return CLI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fputs(ls_help, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *source = argv[optind];

    memset(&cfg, 0, sizeof cfg);
    if (verbose) {
        cfg.log.fn = log_stderr;
        cfg.log.level = SIO_LOG_INFO;
    }
    sio_code rc = sio_io_create(&cfg, &io, &err);
    if (rc == SIO_OK)
        rc = sio_shardlist_resolve_ex(io, source,
                                      all ? SIO_RESOLVE_ALL_OBJECTS : 0, &l,
                                      &err);
    if (rc == SIO_OK && all) {
        /* What a job reads; none at all is not an error here. */
        rc = sio_shardlist_resolve(io, source, &served, &err);
        if (rc == SIO_ERR_NOTFOUND && sio_shardlist_count(l) > 0)
            rc = SIO_OK;
    }
    if (rc != SIO_OK) {
        fprintf(stderr, "shardcast ls: %s\n", err.msg);
        ret = exit_for_sio(rc);
        goto out;
    }

    size_t n = sio_shardlist_count(l), shards = 0, next_served = 0;
    uint64_t total_size = 0, total_samples = 0, total_bad = 0;
    int size_known = 1;
    const char *kind_head = all ? "KIND   " : "";
    if (json)
        jarr = json_array();
    else if (count)
        printf("%14s %10s  %s%s\n", "SIZE", "SAMPLES", kind_head, "URL");
    else
        printf("%14s  %s%s\n", "SIZE", kind_head, "URL");
    for (size_t i = 0; i < n; i++) {
        const char *url = sio_shardlist_url(l, i);
        uint64_t size = sio_shardlist_size(l, i);
        uint64_t samples = 0, bad = 0;
        char sz[32], cnt[32];
        /* Without --all every entry is a shard. With --all an entry is
         * one when it is the next of the served list (which keeps the
         * full list's order); the others are shown but neither read nor
         * totalled. */
        int shard = !all;
        if (all && next_served < sio_shardlist_count(served) &&
            strcmp(sio_shardlist_url(served, next_served), url) == 0) {
            shard = 1;
            next_served++;
        }
        const char *kind = !all ? "" : shard ? "shard  " : "other  ";
        snprintf(sz, sizeof sz, size == UINT64_MAX ? "-" : "%" PRIu64, size);
        if (!shard) {
            if (json) {
                json_t *o = json_pack("{s:s, s:b}", "url", url, "shard", 0);
                json_object_set_new(o, "size",
                                    size == UINT64_MAX
                                        ? json_null()
                                        : json_integer((json_int_t)size));
                json_array_append_new(jarr, o);
            } else if (count) {
                printf("%14s %10s  %s%s\n", sz, "-", kind, url);
            } else {
                printf("%14s  %s%s\n", sz, kind, url);
            }
            continue;
        }
        shards++;
        if (size == UINT64_MAX)
            size_known = 0;
        else
            total_size += size;
        if (count) {
            sio_code sc = SIO_OK;
            if (count_shard(io, l, i, &samples, &bad, &sc) != 0) {
                if (ret == CLI_EXIT_OK)
                    ret = exit_for_sio(sc);
                continue;
            }
            total_samples += samples;
            total_bad += bad;
        }
        if (json) {
            json_t *o = json_pack("{s:s}", "url", url);
            if (all)
                json_object_set_new(o, "shard", json_true());
            json_object_set_new(o, "size", size == UINT64_MAX
                                               ? json_null()
                                               : json_integer((json_int_t)size));
            if (count)
                json_object_set_new(o, "samples",
                                    json_integer((json_int_t)samples));
            json_array_append_new(jarr, o);
        } else if (count) {
            snprintf(cnt, sizeof cnt, "%" PRIu64, samples);
            printf("%14s %10s  %s%s\n", sz, cnt, kind, url);
        } else {
            printf("%14s  %s%s\n", sz, kind, url);
        }
    }
    if (json) {
        /* With --all the list holds other objects too: "objects". */
        json_t *root = json_pack("{s:o, s:I}", all ? "objects" : "shards",
                                 jarr, "count", (json_int_t)shards);
        jarr = NULL;
        if (all)
            json_object_set_new(root, "other_objects",
                                json_integer((json_int_t)(n - shards)));
        json_object_set_new(root, "total_size",
                            size_known ? json_integer((json_int_t)total_size)
                                       : json_null());
        if (count) {
            json_object_set_new(root, "total_samples",
                                json_integer((json_int_t)total_samples));
            json_object_set_new(root, "bad_samples",
                                json_integer((json_int_t)total_bad));
        }
        char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        if (text)
            puts(text);
        free(text);
        json_decref(root);
    } else {
        char hb[32];
        cli_human_bytes((double)total_size, hb, sizeof hb);
        printf("%zu shard%s, %s%s", shards, shards == 1 ? "" : "s",
               size_known ? "" : "at least ", hb);
        if (count)
            printf(", %" PRIu64 " samples", total_samples);
        if (count && total_bad)
            printf(" (%" PRIu64 " bad samples skipped)", total_bad);
        if (all)
            printf("; %zu other object%s, not read by a job", n - shards,
                   n - shards == 1 ? "" : "s");
        printf("\n");
    }
    if (fflush(stdout) != 0 && ret == CLI_EXIT_OK)
        ret = CLI_EXIT_FAIL;
out:
    json_decref(jarr);
    sio_shardlist_free(l);
    sio_shardlist_free(served);
    sio_io_destroy(io);
    return ret;
}
