/*
 * test_stream.c — one consumer stream (server/stream.c) without MHD:
 * sc_stream_reader driven by hand with a cursor of a small in-memory epoch
 * (a feed over generated shards). Checks the encoded bytes (frames decoded
 * with sio_framer, tar read back with libarchive), the END summary, the
 * field filter, the error trailer of a cut (final and retryable) and of a
 * failed epoch, and the outcomes (ok, cut, error, client gone) with their
 * counters.
 */
#include <archive.h>
#include <archive_entry.h>
#include <microhttpd.h>
#include <unistd.h>

#include "check.h"
#include "shardio.h"
#include "shardio_wire.h"
#include "stream.h"
#include "tarutil.h"

#define SHARDS 3
#define PER_SHARD 7
#define SAMPLES (SHARDS * PER_SHARD)

static sio_io *io;
static sio_shardlist *list;
static char dir[] = "/tmp/shardcast-stream-XXXXXX";

/* The stream's body and how its reader ended. */
typedef struct body {
    unsigned char *data;
    size_t len, cap;
    ssize_t last; /* the reader's last return: END_OF_STREAM or
                     END_WITH_ERROR */
} body;

/* Call the reader as MHD would, in chunks of `chunk` bytes, until it ends
 * or `stop_after` bytes were read (0: no bound). 0 means nothing is ready
 * yet: wait for the feed's producer and call again. */
static void read_stream(sc_stream *s, size_t chunk, size_t stop_after,
                        body *b)
{
    memset(b, 0, sizeof *b);
    for (;;) {
        if (b->len + chunk > b->cap) {
            b->cap = (b->len + chunk) * 2;
            b->data = realloc(b->data, b->cap);
        }
        ssize_t n = sc_stream_reader(s, b->len, (char *)b->data + b->len,
                                     chunk);
        if (n < 0) {
            b->last = n;
            return;
        }
        if (n == 0) {
            usleep(1000);
            continue;
        }
        b->len += (size_t)n;
        if (stop_after && b->len >= stop_after)
            return;
    }
}

typedef struct setup {
    sio_feed *feed;
    sio_cursor *cur;
    sc_stream *s;
    sc_stream_counters ctr;
} setup;

static sio_epoch_config ecfg = {.seed = 5, .epoch = 2, .interleave = 2,
                                .buffer_samples = 8};

/* A feed over list, a stream of rank/world with that format and filter,
 * and its cursor. */
static void open_stream(setup *st, const sio_shardlist *l, uint32_t rank,
                        uint32_t world, sc_format format,
                        const char *const *fields, size_t nfields)
{
    sio_feed_config fc = {.window_samples = 64, .join_timeout_ms = 1};
    sio_error err = {SIO_OK, ""};
    memset(st, 0, sizeof *st);
    CHECK(sio_feed_open(io, l, &ecfg, &fc, &st->feed, &err) == SIO_OK);
    sc_stream_params p = {.job = "unit-job",
                          .epoch = ecfg.epoch,
                          .rank = rank,
                          .world = world,
                          .partition = SIO_PARTITION_EVEN_DROP,
                          .format = format,
                          .fields = fields,
                          .nfields = nfields,
                          .id = "req-1",
                          .counters = &st->ctr};
    CHECK(sc_stream_create(&p, &st->s, &err) == SIO_OK);
    sio_cursor_config cc = {.rank = rank,
                            .world = world,
                            .policy = SIO_PARTITION_EVEN_DROP,
                            .notify = sc_stream_notify,
                            .userdata = st->s};
    CHECK(sio_feed_attach(st->feed, &cc, &st->cur, &err) == SIO_OK);
    sc_stream_set_cursor(st->s, st->cur);
}

static void close_stream(setup *st)
{
    sio_cursor_close(st->cur);
    sc_stream_destroy(st->s);
    sio_feed_close(st->feed);
}

/* What a frames body holds. */
typedef struct decoded {
    int header;
    char job[64];
    uint64_t epoch;
    uint32_t rank, world;
    size_t samples;
    uint64_t positions_ok; /* positions were 0, 1, 2, ... */
    size_t fields_seen;    /* fields over all samples */
    int only_txt;          /* every field named "txt" */
    int ended, failed;
    sio_tarw_summary summary;
    char reason[256];
    int retryable;
    uint32_t retry_after_ms;
    sio_code finish;
} decoded;

static void decode_frames(const body *b, decoded *d)
{
    sio_framer *f = NULL;
    size_t off = 0;
    memset(d, 0, sizeof *d);
    d->positions_ok = 1;
    d->only_txt = 1;
    CHECK(sio_framer_create(NULL, &f, NULL) == SIO_OK);
    while (off < b->len) {
        size_t used = 0;
        sio_frame_event ev;
        sio_code rc = sio_framer_feed(f, b->data + off, b->len - off, &used,
                                      &ev);
        CHECK(rc == SIO_OK);
        if (rc != SIO_OK)
            break;
        off += used;
        switch (ev.type) {
        case SIO_FRAMER_HEADER:
            d->header = 1;
            snprintf(d->job, sizeof d->job, "%s", ev.header.job);
            d->epoch = ev.header.epoch;
            d->rank = ev.header.rank;
            d->world = ev.header.world;
            break;
        case SIO_FRAMER_SAMPLE:
            if (ev.position != d->samples)
                d->positions_ok = 0;
            d->samples++;
            d->fields_seen += ev.nsample_fields;
            for (size_t i = 0; i < ev.nsample_fields; i++)
                if (ev.sample_fields[i].name_len != 3 ||
                    memcmp(ev.sample_fields[i].name, "txt", 3) != 0)
                    d->only_txt = 0;
            break;
        case SIO_FRAMER_END:
            d->ended = 1;
            d->summary = ev.summary;
            break;
        case SIO_FRAMER_ERROR:
            d->failed = 1;
            snprintf(d->reason, sizeof d->reason, "%s", ev.reason);
            d->retryable = ev.retryable;
            d->retry_after_ms = ev.retry_after_ms;
            break;
        default:
            break;
        }
    }
    d->finish = sio_framer_finish(f);
    sio_framer_destroy(f);
}

/* The share of rank/world from a private consumer (the oracle). */
static size_t share_length(uint32_t rank, uint32_t world)
{
    sio_epoch *ep = NULL;
    sio_consumer *c = NULL;
    size_t n = 0;
    CHECK(sio_epoch_open(io, list, &ecfg, &ep, NULL) == SIO_OK);
    CHECK(sio_consumer_open_at(ep, rank, world, SIO_PARTITION_EVEN_DROP, 0, 0,
                               &c, NULL) == SIO_OK);
    for (;;) {
        const sio_sample *s = NULL;
        CHECK(sio_consumer_next(c, &s) == SIO_OK);
        if (!s)
            break;
        n++;
        sio_sample_unref(s);
    }
    sio_consumer_close(c);
    return n;
}

/* A whole frames share: HEADER, dense SAMPLEs, END with the summary. */
static void test_frames_end(void)
{
    setup st;
    body b;
    decoded d;
    sc_stream_stats ss;
    size_t want = share_length(1, 3);
    CHECK(want > 0);
    open_stream(&st, list, 1, 3, SC_FORMAT_FRAMES, NULL, 0);
    read_stream(st.s, 700, 0, &b);
    CHECK(b.last == MHD_CONTENT_READER_END_OF_STREAM);
    decode_frames(&b, &d);
    CHECK(d.header);
    CHECK_STR(d.job, "unit-job");
    CHECK_EQ_U64(d.epoch, ecfg.epoch);
    CHECK_EQ_U64(d.rank, 1);
    CHECK_EQ_U64(d.world, 3);
    CHECK_EQ_U64(d.samples, want);
    CHECK(d.positions_ok);
    CHECK_EQ_U64(d.fields_seen, 2 * want); /* .txt and .bin */
    CHECK(d.ended && !d.failed);
    CHECK_EQ_U64(d.summary.samples, want);
    CHECK_EQ_U64(d.summary.rank, 1);
    CHECK(d.finish == SIO_OK);
    sc_stream_gone(st.s, 1);
    sc_stream_get_stats(st.s, &ss);
    CHECK(ss.outcome == SC_STREAM_OK);
    CHECK_STR(sc_stream_outcome_name(ss.outcome), "ok");
    CHECK_EQ_U64(ss.samples, want);
    CHECK_EQ_U64(ss.position, want);
    CHECK_EQ_U64(ss.bytes_out, b.len);
    CHECK_EQ_U64(atomic_load(&st.ctr.samples), want);
    CHECK_EQ_U64(atomic_load(&st.ctr.bytes), b.len);
    CHECK_STR(sc_stream_error(st.s), "");
    CHECK_STR(sc_stream_id(st.s), "req-1");
    close_stream(&st);
    free(b.data);
}

/* A tar share with a field filter: one member per kept field, named
 * "<global index>/<key>.<ext>", then the end member. */
static void test_tar_filter(void)
{
    static const char *const fields[] = {"txt"};
    setup st;
    body b;
    size_t want = share_length(0, 1);
    open_stream(&st, list, 0, 1, SC_FORMAT_TAR, fields, 1);
    read_stream(st.s, 512, 0, &b);
    CHECK(b.last == MHD_CONTENT_READER_END_OF_STREAM);
    CHECK(b.len % SIO_TAR_BLOCK == 0);

    struct archive *a = archive_read_new();
    struct archive_entry *e;
    size_t txt = 0, other = 0, end = 0, after_end = 0;
    char summary[512] = "";
    archive_read_support_format_tar(a);
    CHECK(archive_read_open_memory(a, b.data, b.len) == ARCHIVE_OK);
    while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
        const char *name = archive_entry_pathname(e);
        size_t n = strlen(name);
        if (end)
            after_end++;
        if (strcmp(name, SIO_TARW_END_NAME) == 0) {
            end++;
            la_ssize_t r = archive_read_data(a, summary, sizeof summary - 1);
            if (r > 0)
                summary[r] = '\0';
        } else if (n > 4 && strcmp(name + n - 4, ".txt") == 0 &&
                   strchr(name, '/')) {
            txt++;
        } else {
            other++;
        }
    }
    archive_read_free(a);
    CHECK_EQ_U64(txt, want);
    CHECK_EQ_U64(other, 0);
    CHECK_EQ_U64(end, 1);
    CHECK_EQ_U64(after_end, 0);
    char expect[64];
    snprintf(expect, sizeof expect, "\"samples\":%zu", want);
    CHECK(strstr(summary, expect) != NULL);
    sc_stream_stats ss;
    sc_stream_gone(st.s, 1);
    sc_stream_get_stats(st.s, &ss);
    CHECK(ss.outcome == SC_STREAM_OK);
    CHECK_EQ_U64(ss.samples, want);
    close_stream(&st);
    free(b.data);
}

/* A cut before the first byte: HEADER, then the ERROR trailer with the
 * reason, not retryable; the reader ends with an error (no chunked end). */
static void test_cut(int retry)
{
    setup st;
    body b;
    decoded d;
    sc_stream_stats ss;
    open_stream(&st, list, 0, 2, SC_FORMAT_FRAMES, NULL, 0);
    if (retry)
        sc_stream_cut_retry(st.s, "server shutting down", 2000);
    else
        sc_stream_cut(st.s, "job deleted");
    /* The first cut wins. */
    sc_stream_cut(st.s, "second reason");
    read_stream(st.s, 4096, 0, &b);
    CHECK(b.last == MHD_CONTENT_READER_END_WITH_ERROR);
    decode_frames(&b, &d);
    CHECK(d.header);
    CHECK(d.failed && !d.ended);
    CHECK_STR(d.reason, retry ? "server shutting down" : "job deleted");
    CHECK_EQ_U64(d.retryable, retry ? 1 : 0);
    CHECK_EQ_U64(d.retry_after_ms, retry ? 2000 : 0);
    CHECK(d.finish == SIO_ERR_IO);
    sc_stream_gone(st.s, 0);
    sc_stream_get_stats(st.s, &ss);
    CHECK(ss.outcome == SC_STREAM_CUT);
    CHECK_STR(sc_stream_outcome_name(ss.outcome), "cut");
    close_stream(&st);
    free(b.data);
}

/* The client leaves in the middle: the outcome is client_gone, the
 * samples counted are those encoded. */
static void test_client_gone(void)
{
    setup st;
    body b;
    sc_stream_stats ss;
    open_stream(&st, list, 0, 1, SC_FORMAT_FRAMES, NULL, 0);
    read_stream(st.s, 300, 600, &b);
    CHECK(b.last == 0);
    sc_stream_gone(st.s, 0);
    sc_stream_get_stats(st.s, &ss);
    CHECK(ss.outcome == SC_STREAM_CLIENT_GONE);
    CHECK_STR(sc_stream_outcome_name(ss.outcome), "client_gone");
    CHECK(ss.samples >= 1 && ss.samples < SAMPLES);
    CHECK_EQ_U64(ss.bytes_out, b.len);
    /* A notify after the request completed is harmless. */
    sc_stream_notify(st.s);
    close_stream(&st);
    free(b.data);
}

/* The whole response was produced but MHD did not finish sending it: not
 * a delivered end. */
static void test_end_not_delivered(void)
{
    setup st;
    body b;
    sc_stream_stats ss;
    open_stream(&st, list, 0, 1, SC_FORMAT_TAR, NULL, 0);
    read_stream(st.s, 1024, 0, &b);
    CHECK(b.last == MHD_CONTENT_READER_END_OF_STREAM);
    sc_stream_gone(st.s, 0);
    sc_stream_get_stats(st.s, &ss);
    CHECK(ss.outcome == SC_STREAM_CLIENT_GONE);
    close_stream(&st);
    free(b.data);
}

/* An epoch that fails (a shard that is not a tar, on_error=fail): the
 * stream ends with the ERROR trailer naming the failure. */
static void test_epoch_error(void)
{
    char bad[600], good[600];
    setup st;
    body b;
    decoded d;
    sc_stream_stats ss;
    sio_shardlist *l = NULL;
    snprintf(good, sizeof good, "%s/shard-0.tar", dir);
    snprintf(bad, sizeof bad, "%s/broken/bad.tar", dir);
    FILE *f = fopen(bad, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    for (int i = 0; i < 4096; i++)
        fputc('x', f);
    fclose(f);
    const char *urls[] = {bad, good};
    CHECK(sio_shardlist_from_urls(urls, 2, &l, NULL) == SIO_OK);
    sio_on_error saved = ecfg.on_error;
    ecfg.on_error = SIO_ON_ERROR_FAIL;
    open_stream(&st, l, 0, 1, SC_FORMAT_FRAMES, NULL, 0);
    read_stream(st.s, 4096, 0, &b);
    ecfg.on_error = saved;
    CHECK(b.last == MHD_CONTENT_READER_END_WITH_ERROR);
    decode_frames(&b, &d);
    CHECK(d.failed && !d.ended);
    CHECK(d.reason[0] != '\0');
    CHECK_EQ_U64(d.retryable, 0);
    sc_stream_gone(st.s, 0);
    sc_stream_get_stats(st.s, &ss);
    CHECK(ss.outcome == SC_STREAM_ERROR);
    CHECK_STR(sc_stream_error(st.s), d.reason);
    close_stream(&st);
    sio_shardlist_free(l);
    free(b.data);
}

/* Bad parameters are refused at creation: a field name out of bounds, too
 * many fields, no job name (frames). */
static void test_create_refuses(void)
{
    static const char *const bad_fields[] = {""};
    static const char *const ok_fields[] = {"txt"};
    sc_stream *s = NULL;
    sio_error err = {SIO_OK, ""};
    sc_stream_params p = {.job = "j", .world = 1,
                          .format = SC_FORMAT_FRAMES,
                          .fields = bad_fields, .nfields = 1};
    CHECK(sc_stream_create(&p, &s, &err) == SIO_ERR_INVALID);
    CHECK(s == NULL);
    p.format = SC_FORMAT_TAR;
    CHECK(sc_stream_create(&p, &s, &err) == SIO_ERR_INVALID);
    p.fields = ok_fields;
    p.nfields = SIO_TARW_FILTER_MAX + 1;
    CHECK(sc_stream_create(&p, &s, &err) == SIO_ERR_INVALID);
    p.nfields = 1;
    p.job = "";
    p.format = SC_FORMAT_FRAMES;
    CHECK(sc_stream_create(&p, &s, &err) == SIO_ERR_INVALID);
    CHECK(s == NULL);
    p.job = "j";
    CHECK(sc_stream_create(&p, &s, &err) == SIO_OK);
    CHECK(s != NULL);
    sc_stream_destroy(s);
    sc_stream_destroy(NULL);
}

int main(void)
{
    char p[600];
    CHECK(mkdtemp(dir) != NULL);
    for (int s = 0; s < SHARDS; s++) {
        static char names[2 * PER_SHARD][32];
        tar_member m[2 * PER_SHARD];
        for (int i = 0; i < PER_SHARD; i++) {
            snprintf(names[2 * i], 32, "s%d_%02d.txt", s, i);
            snprintf(names[2 * i + 1], 32, "s%d_%02d.bin", s, i);
            m[2 * i] = (tar_member){names[2 * i], "some text", 0};
            m[2 * i + 1] = (tar_member){names[2 * i + 1],
                                        "binary-binary-binary", 5 + i};
        }
        snprintf(p, sizeof p, "%s/shard-%d.tar", dir, s);
        CHECK(write_tar(p, m, 2 * PER_SHARD, "none", "pax") == 0);
    }
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_shardlist_resolve(io, dir, &list, NULL) == SIO_OK);
    CHECK_EQ_U64(sio_shardlist_count(list), SHARDS);
    snprintf(p, sizeof p, "%s/broken", dir);
    CHECK(mkdir(p, 0700) == 0);

    test_frames_end();
    test_tar_filter();
    test_cut(0);
    test_cut(1);
    test_client_gone();
    test_end_not_delivered();
    test_epoch_error();
    test_create_refuses();

    sio_shardlist_free(list);
    sio_io_destroy(io);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
