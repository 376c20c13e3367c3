/*
 * cli_index.c — `shardcast index SOURCE`: build the shard indexes of a
 * source ahead of time (libshardio's shard index, include/shardio_index.h),
 * into a directory a server uses as its state_dir (--state-dir DIR), and
 * for local shards optionally as sidecar files "<shard>.scidx" that any
 * server reads (--sidecar). Each shard is read once, streaming, holding
 * one sample at a time; shards whose index already exists and still
 * matches are skipped.
 *
 * Threading: main thread only; the sio_io's fetch engine runs its own
 * threads. Ownership: everything is freed before returning.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardio.h"
#include "shardio_index.h"

static const char index_help[] =
    "usage: shardcast index [--state-dir DIR] [--sidecar] [-v] SOURCE\n"
    "\n"
    "Build the shard indexes of SOURCE (what a job's --source takes) so that\n"
    "a server seeks into any epoch without reading its prefix first.\n"
    "\n"
    "  --state-dir DIR  write the indexes where `shardcastd --state-dir DIR`\n"
    "                   finds them (DIR/index/)\n"
    "  --sidecar        also write \"<shard>.scidx\" next to each local shard\n"
    "                   (servers read sidecars with --index-sidecars, the\n"
    "                   default)\n"
    "  -v               log the library's messages to stderr\n"
    "  --help           this text\n"
    "\n"
    "Without --state-dir the indexes go to a temporary directory, which is\n"
    "useful only with --sidecar. Prints one line per shard: samples, bad\n"
    "samples, and whether the index was built or already there.\n";

static void log_stderr(void *ud, int level, const char *msg)
{
    (void)ud;
    fprintf(stderr, "shardcast index: level=%d %s\n", level, msg);
}

/* Copy file src to dst through dst.tmp + rename (never a torn sidecar). */
static int copy_file(const char *src, const char *dst)
{
    char tmp[4200];
    char buf[65536];
    size_t n;
    int ok = 1;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", dst) >= (int)sizeof tmp)
        return -1;
    FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    if (!in || !out) {
        if (in)
            fclose(in);
        return -1;
    }
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            ok = 0;
    fclose(in);
    if (fclose(out) != 0)
        ok = 0;
    if (!ok || rename(tmp, dst) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

/* A local path for url, or NULL. */
static const char *local_path(const char *url)
{
    if (strncmp(url, "file://", 7) == 0)
        return url + 7;
    return strstr(url, "://") ? NULL : url;
}

int cli_index(int argc, char **argv)
{
    static const struct option opts[] = {
        {"state-dir", required_argument, 0, 's'},
        {"sidecar", no_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *state = NULL;
    int sidecar = 0, verbose = 0, c, ret = CLI_EXIT_OK;
    char tmpdir[] = "/tmp/shardcast-index-XXXXXX";
    char dir[4096];
    int made_tmp = 0;
    sio_io *io = NULL;
    sio_shardlist *l = NULL;
    sio_index *ix = NULL;
    sio_error err = {SIO_OK, ""};

    optind = 1;
    while ((c = getopt_long(argc, argv, "v", opts, NULL)) != -1) {
        switch (c) {
        case 's': state = optarg; break;
        case 'c': sidecar = 1; break;
        case 'v': verbose = 1; break;
        case 'h': fputs(index_help, stdout); return CLI_EXIT_OK;
        default: fputs(index_help, stderr); return CLI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fputs(index_help, stderr);
        return CLI_EXIT_USAGE;
    }
    if (!state && !sidecar) {
        fprintf(stderr, "shardcast index: give --state-dir DIR, --sidecar, "
                "or both\n");
        return CLI_EXIT_USAGE;
    }
    if (!state) {
        if (!mkdtemp(tmpdir)) {
            fprintf(stderr, "shardcast index: %s\n", strerror(errno));
            return CLI_EXIT_FAIL;
        }
        made_tmp = 1;
        state = tmpdir;
    }
    snprintf(dir, sizeof dir, "%s/index", state);

    sio_io_config ioc = {0};
    if (verbose) {
        ioc.log.fn = log_stderr;
        ioc.log.level = SIO_LOG_DEBUG;
    }
    sio_index_config icfg = {.dir = dir, .sidecars = 0, .log = ioc.log};
    if (sio_io_create(&ioc, &io, &err) != SIO_OK ||
        sio_shardlist_resolve(io, argv[optind], &l, &err) != SIO_OK ||
        sio_index_open(&icfg, &ix, &err) != SIO_OK) {
        fprintf(stderr, "shardcast index: %s\n", err.msg);
        ret = err.code == SIO_ERR_NOTFOUND ? CLI_EXIT_NOTFOUND : CLI_EXIT_FAIL;
        goto out;
    }
    for (size_t i = 0; i < sio_shardlist_count(l); i++) {
        const char *url = sio_shardlist_url(l, i);
        sio_index_entry *e = sio_index_get(ix, io, url,
                                           sio_shardlist_size(l, i));
        sio_index_info info;
        const char *what = "present";
        char shown[512];
        sio_url_redact(url, shown, sizeof shown);
        if (!e) {
            fprintf(stderr, "shardcast index: out of memory\n");
            ret = CLI_EXIT_FAIL;
            break;
        }
        /* A file already there is checked before it is called present
         * (and copied as a sidecar). */
        sio_index_vet(e, io, NULL, NULL);
        sio_index_get_info(e, &info);
        if (!info.complete) {
            sio_code rc = sio_index_build(io, url, (uint32_t)i, NULL, e, &err);
            if (rc) {
                fprintf(stderr, "shardcast index: %s: %s\n", shown, err.msg);
                ret = CLI_EXIT_FAIL;
                continue;
            }
            sio_index_get_info(e, &info);
            what = "built";
        }
        if (sidecar) {
            const char *p = local_path(url), *src = sio_index_entry_path(e);
            char side[4200];
            if (!p) {
                fprintf(stderr, "shardcast index: %s: --sidecar writes next "
                        "to local shards only\n", shown);
                ret = CLI_EXIT_USAGE;
            } else if (!src ||
                       snprintf(side, sizeof side, "%s%s", p,
                                SIO_INDEX_SUFFIX) >= (int)sizeof side ||
                       copy_file(src, side) != 0) {
                fprintf(stderr, "shardcast index: %s: cannot write the "
                        "sidecar\n", shown);
                ret = CLI_EXIT_FAIL;
            }
        }
        printf("%s\t%" PRIu64 " samples\t%" PRIu64 " bad\t%s%s\n", shown,
               info.good, info.known - info.good, what,
               info.stream_only ? "\tstream-only (compressed)" : "");
    }
out:
    sio_index_close(ix);
    sio_shardlist_free(l);
    sio_io_destroy(io);
    if (made_tmp) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "shardcast index: cannot remove %s\n", tmpdir);
    }
    return ret;
}
