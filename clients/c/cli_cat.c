/*
 * cli_cat.c — `shardcast cat`: one consumer's share of an epoch written as
 * a tar stream (the format=tar wire format, written by libshardio's own
 * encoder) to stdout or a file.
 *
 * Whatever format is requested, the stream is decoded by the client
 * library (which checks it and resumes it after a broken connection) and
 * re-encoded, so the output is the same tar whether the server sent tar or
 * frames, and whether or not the connection broke on the way. The output
 * ends with the end member on success; on failure it ends with the error
 * member and no end-of-archive blocks, so no tar reader takes it for a
 * complete share.
 *
 * Threading: main thread only. Ownership: the per-sample scratch (NUL-
 * terminated copies of key, shard URL and field names; payloads are not
 * copied) lives for the whole run, bounded by SCRATCH_MAX.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardio_wire.h"

/* Bound of the per-sample name scratch: key and URL (<= 64 KiB each on
 * the wire) plus up to SIO_FIELDS_MAX_DEFAULT names of <= 64 KiB would be
 * far more than real samples carry; names beyond this are a LIMIT error. */
#define SCRATCH_MAX (16u << 20)

static const char cat_help_head[] =
    "usage: shardcast cat [OPTIONS] [URL]\n"
    "\n"
    "Write one consumer's share of an epoch as tar (what Python's tarfile\n"
    "and webdataset read) to stdout or -o FILE. URL is a stream URL\n"
    "(http://HOST:PORT/v1/jobs/JOB/epochs/E/stream?rank=R&world=W...), or\n"
    "the stream is given by --server/--job/--epoch/--rank/--world/--start.\n"
    "The share is requested as tar by default; --format frames requests\n"
    "frames and converts them. A broken connection is resumed from the\n"
    "position reached. Success ends the output with the __shardcast_end__\n"
    "member; a failure ends it with __shardcast_error__ and no end blocks.\n"
    "The output starts with the stream's identity (a pax global header with\n"
    "SHARDCAST.job, .epoch, .fingerprint, .replica, .replicas, .served_by)\n"
    "when the server states one. With a replica set (--urls), each\n"
    "failover is told on stderr: \"replica J (URL) failed: WHY; continuing\n"
    "consumer C at position P from replica K (URL)\".\n"
    "\n"
    "  -o, --output FILE     write here instead of stdout\n"
    "  -q, --quiet           no summary line on stderr\n"
    "  --help                this text\n";

/* A failover, told on stderr (the library prints nothing). */
static void on_failover(void *ud, const scc_failover *f)
{
    const cli_conn *cc = ud;
    fprintf(stderr, "shardcast cat: replica %u (%s) failed: %s; continuing "
            "consumer %u at position %llu from replica %u (%s)\n", f->from,
            f->from_url, f->reason, cc->rank,
            (unsigned long long)f->position, f->to, f->to_url);
}

/* The stream's identity as the tar stream's global header (the server's
 * own first member, when it stated one). */
static sio_code write_ident(sio_wenc *w, const scc_stream *s)
{
    const scc_ident *id = scc_stream_ident(s);
    sio_stream_ident si;
    sio_error err;
    size_t fl = id ? strlen(id->fingerprint) : 0;
    if (fl == 0 || fl > SIO_FINGERPRINT_LEN)
        return SIO_OK;
    memset(&si, 0, sizeof si);
    snprintf(si.job, sizeof si.job, "%s", id->job);
    si.epoch = id->epoch;
    memcpy(si.fingerprint, id->fingerprint, fl + 1);
    si.replica = id->replica;
    si.replicas = id->replicas;
    si.served_by = id->served_by;
    return sio_tarw_write_ident(w, &si, &err);
}

static sio_code file_sink(void *ud, const void *data, size_t len)
{
    FILE *f = ud;
    return fwrite(data, 1, len, f) == len ? SIO_OK : SIO_ERR_IO;
}

/* NUL-terminated copy of n bytes at p appended to b; offset in *off. */
static sio_code scratch_put(sio_wbuf *b, const char *p, size_t n, size_t *off)
{
    sio_code rc;
    *off = b->len;
    rc = sio_wbuf_append(b, p, n);
    if (rc == SIO_OK)
        rc = sio_wbuf_append(b, "", 1);
    return rc;
}

/* Build a libshardio sample view of an scc_sample (payloads by pointer). */
static sio_code to_sio(const scc_sample *in, sio_wbuf *b, sio_field *fields,
                       sio_sample *out)
{
    sio_code rc;
    size_t key_off, url_off, name_off[SIO_FIELDS_MAX_DEFAULT];

    if (in->nfields > SIO_FIELDS_MAX_DEFAULT)
        return SIO_ERR_LIMIT;
    b->len = 0;
    rc = scratch_put(b, in->key, in->key_len, &key_off);
    if (rc == SIO_OK)
        rc = scratch_put(b, in->shard_url, in->shard_url_len, &url_off);
    for (size_t i = 0; rc == SIO_OK && i < in->nfields; i++)
        rc = scratch_put(b, in->fields[i].name, in->fields[i].name_len,
                         &name_off[i]);
    if (rc != SIO_OK)
        return rc;
    /* Offsets become pointers only now: the buffer may have moved. */
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < in->nfields; i++) {
        fields[i].name = (const char *)b->data + name_off[i];
        fields[i].data = in->fields[i].data;
        fields[i].len = in->fields[i].len;
    }
    out->key = (const char *)b->data + key_off;
    out->shard_url = (const char *)b->data + url_off;
    out->shard_index = in->shard_index;
    out->global_index = in->global_index;
    out->nfields = in->nfields;
    out->fields = fields;
    out->bytes = (size_t)in->bytes;
    return SIO_OK;
}

int cli_cat(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        CLI_CONN_OPTIONS,
        {0, 0, 0, 0}};
    cli_conn cc;
    const char *outpath = NULL;
    int quiet = 0, c, ret = CLI_EXIT_OK;
    FILE *out = stdout;
    scc_stream *s = NULL;
    sio_wenc *w = NULL;
    sio_error err;
    sio_wbuf scratch;
    sio_field *fields = NULL;
    scc_options o;
    uint64_t nsamples = 0, payload = 0;

    cli_conn_init(&cc);
    cc.format = SCC_FORMAT_TAR;
    sio_wbuf_init(&scratch, SCRATCH_MAX);
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': outpath = optarg; break;
        case 'q': quiet = 1; break;
        case 'h':
            fputs(cat_help_head, stdout);
            fputs(cli_conn_help, stdout);
            ret = CLI_EXIT_OK;
            goto out;
        default: {
            int r = cli_conn_option(&cc, c, optarg, "cat");
            if (r == 1)
                continue;
            if (r == 0)
                fprintf(stderr, "%s%s", cat_help_head, cli_conn_help);
            ret = CLI_EXIT_USAGE;
            goto out;
        }
        }
    }
    const char *url = NULL;
    if (optind == argc - 1)
        url = argv[optind];
    else if (optind != argc) {
        fprintf(stderr, "shardcast cat: one URL at most\n");
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    if (cli_conn_finish(&cc, "cat", url == NULL) != 0) {
        ret = CLI_EXIT_USAGE;
        goto out;
    }
    cli_conn_options(&cc, &o);
    o.url = url;
    o.on_failover = on_failover;
    o.on_failover_ud = &cc;

    fields = calloc(SIO_FIELDS_MAX_DEFAULT, sizeof *fields);
    if (!fields) {
        ret = CLI_EXIT_FAIL;
        goto out;
    }
    scc_code rc = scc_stream_open(&o, &s);
    if (rc != SCC_OK) {
        fprintf(stderr, "shardcast cat: %s\n",
                s ? scc_stream_errmsg(s) : scc_strerror(rc));
        ret = cli_exit_for(rc);
        goto out;
    }
    uint64_t first_pos = scc_stream_position(s);
    if (outpath) {
        out = fopen(outpath, "wb");
        if (!out) {
            fprintf(stderr, "shardcast cat: cannot create %s: %s\n", outpath,
                    strerror(errno));
            out = stdout;
            ret = CLI_EXIT_FAIL;
            goto out;
        }
    }
    setvbuf(out, NULL, _IOFBF, 1u << 20);
    if (sio_tarw_create(NULL, 0, file_sink, out, &w, &err) != SIO_OK) {
        fprintf(stderr, "shardcast cat: %s\n", err.msg);
        ret = CLI_EXIT_FAIL;
        goto out;
    }
    int ident_done = 0;
    for (;;) {
        const scc_sample *smp = NULL;
        rc = scc_stream_next(s, &smp);
        if (rc == SCC_OK && !ident_done) {
            ident_done = 1;
            sio_code wc = write_ident(w, s);
            if (wc != SIO_OK) {
                fprintf(stderr, "shardcast cat: writing the stream's "
                        "identity: %s\n", wc == SIO_ERR_IO ? strerror(errno)
                                                          : sio_strerror(wc));
                ret = CLI_EXIT_FAIL;
                break;
            }
        }
        if (rc != SCC_OK) {
            fprintf(stderr, "shardcast cat: %s\n", scc_stream_errmsg(s));
            ret = cli_exit_for(rc);
            sio_wenc_error(w, scc_stream_errmsg(s), 0, 0);
            break;
        }
        if (!smp) {
            const scc_summary *sum = scc_stream_summary(s);
            sio_tarw_summary ts = {sum->epoch, sum->rank, sum->world,
                                   first_pos, sum->position - first_pos,
                                   sum->position};
            if (sio_wenc_end(w, &ts) != SIO_OK) {
                fprintf(stderr, "shardcast cat: write failed: %s\n",
                        strerror(errno));
                ret = CLI_EXIT_FAIL;
            }
            break;
        }
        sio_sample ss;
        sio_code sc = to_sio(smp, &scratch, fields, &ss);
        if (sc == SIO_OK)
            sc = sio_wenc_sample(w, &ss, smp->position);
        if (sc != SIO_OK) {
            fprintf(stderr, "shardcast cat: sample %llu: %s\n",
                    (unsigned long long)smp->global_index,
                    sc == SIO_ERR_IO ? strerror(errno) : sio_strerror(sc));
            ret = CLI_EXIT_FAIL;
            if (sc != SIO_ERR_IO)
                sio_wenc_error(w, sio_strerror(sc), 0, 0);
            break;
        }
        nsamples++;
        payload += smp->bytes;
    }
    if (fflush(out) != 0 && ret == CLI_EXIT_OK) {
        fprintf(stderr, "shardcast cat: write failed: %s\n", strerror(errno));
        ret = CLI_EXIT_FAIL;
    }
    if (!quiet)
        fprintf(stderr,
                "shardcast cat: samples=%llu payload_bytes=%llu "
                "position=%llu reconnects=%u failovers=%u status=%s\n",
                (unsigned long long)nsamples, (unsigned long long)payload,
                (unsigned long long)scc_stream_position(s),
                scc_stream_reconnects(s), scc_stream_failovers(s),
                ret == CLI_EXIT_OK ? "ok" : "error");
out:
    sio_wenc_destroy(w);
    scc_stream_close(s);
    if (out != stdout && fclose(out) != 0 && ret == CLI_EXIT_OK)
        ret = CLI_EXIT_FAIL;
    free(fields);
    sio_wbuf_free(&scratch);
    cli_conn_free(&cc);
    return ret;
}
