/*
 * test_jobs.c — the job registry (server/jobs.c, status.c) without HTTP:
 * jobs added from specs (created, unchanged, replaced, the --max-jobs
 * bound), bad specs and sources refused, streams begun, opened and read to
 * their end through the binding, requests refused before any feed is
 * opened (unknown job, world above the window), a job deleted under a
 * stream, and the status JSON and metrics counting all of it.
 */
#include <pthread.h>
#include <jansson.h>
#include <microhttpd.h>
#include <unistd.h>

#include "check.h"
#include "jobs.h"
#include "prom.h"
#include "shardio.h"
#include "shardio_wire.h"
#include "stream.h"
#include "tarutil.h"

#define SHARDS 2
#define PER_SHARD 10
#define SAMPLES (SHARDS * PER_SHARD)
/* How long the test waits for the jobs' threads (a bound on waiting, not
 * a timed assertion). */
#define WAIT_MS 60000u

static char dir[] = "/tmp/shardcast-jobs-XXXXXX";
static sc_config cfg;
static sio_io *io;
static sc_jobs *jobs;

#define ARGV(...) ((char *const[]){"shardcastd", __VA_ARGS__})

static unsigned put(const char *name, const char *json, char *reason,
                    size_t len)
{
    sc_jobspec spec;
    if (sc_jobspec_parse(json, strlen(json), name, &spec, reason, len) != 0)
        return 400;
    unsigned st = sc_jobs_put(jobs, &spec, reason, len);
    sc_jobspec_free(&spec);
    return st;
}

/* The status of one job as JSON (NULL when it does not exist). */
static json_t *status(const char *name)
{
    int missing = 0;
    char *text = sc_jobs_status(jobs, name, &missing);
    if (!text)
        return NULL;
    json_t *o = json_loads(text, 0, NULL);
    free(text);
    return o;
}

static uint64_t total(json_t *st, const char *key)
{
    return (uint64_t)json_integer_value(
        json_object_get(json_object_get(st, "totals"), key));
}

static sc_request stream_req(const char *job, uint64_t epoch, uint32_t rank,
                             uint32_t world)
{
    sc_request r;
    memset(&r, 0, sizeof r);
    r.route = SC_ROUTE_STREAM;
    snprintf(r.job, sizeof r.job, "%s", job);
    r.epoch = epoch;
    r.rank = rank;
    r.world = world;
    r.format = SC_FORMAT_FRAMES;
    return r;
}

/* Begin, create and open a stream as http.c does. Returns the status;
 * on 200 *s and *b are set. */
/* The planner's waker, as the HTTP front has one: builds ended. */
static pthread_mutex_t plan_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t plan_cv = PTHREAD_COND_INITIALIZER;
static unsigned long plan_gen;

static void plan_woken(void *ud)
{
    (void)ud;
    pthread_mutex_lock(&plan_mu);
    plan_gen++;
    pthread_cond_broadcast(&plan_cv);
    pthread_mutex_unlock(&plan_mu);
}

static unsigned open_stream_once(const sc_request *r, sc_stream **s,
                                 sc_binding **b, char *reason, size_t len);

/* Open a stream as the HTTP front does: while its epoch's plan is being
 * built (SC_JOBS_PLAN_PENDING) wait for a build to end and open it again. */
static unsigned open_stream(const sc_request *r, sc_stream **s,
                            sc_binding **b, char *reason, size_t len)
{
    for (;;) {
        pthread_mutex_lock(&plan_mu);
        unsigned long gen = plan_gen;
        pthread_mutex_unlock(&plan_mu);
        unsigned st = open_stream_once(r, s, b, reason, len);
        if (st != SC_JOBS_PLAN_PENDING)
            return st;
        pthread_mutex_lock(&plan_mu);
        while (plan_gen == gen)
            pthread_cond_wait(&plan_cv, &plan_mu);
        pthread_mutex_unlock(&plan_mu);
    }
}

static unsigned open_stream_once(const sc_request *r, sc_stream **s,
                                 sc_binding **b, char *reason, size_t len)
{
    sc_stream_params p;
    static sc_stream_fields f;
    unsigned ra = 0;
    sio_error err = {SIO_OK, ""};
    *s = NULL;
    *b = NULL;
    unsigned st = sc_jobs_stream_begin(jobs, r, &p, &f, b, &ra, reason, len);
    if (st != 200)
        return st;
    CHECK_STR(p.job, r->job);
    CHECK(p.counters != NULL);
    CHECK_EQ_U64(p.rank, r->rank);
    CHECK_EQ_U64(p.world, r->world);
    p.id = "unit";
    if (sc_stream_create(&p, s, &err) != SIO_OK) {
        sc_jobs_stream_abort(jobs, *b);
        *b = NULL;
        return 500;
    }
    st = sc_jobs_open_stream(jobs, *b, r, *s, &ra, reason, len);
    if (st != 200) {
        sc_stream_destroy(*s);
        *s = NULL;
        *b = NULL;
    }
    return st;
}

/* Read a stream to its end as MHD would; returns the reader's last value
 * and the SAMPLE frames decoded in *samples, the ERROR reason in why. */
static ssize_t read_all(sc_stream *s, size_t *samples, char *why, size_t len)
{
    char buf[4096];
    sio_framer *f = NULL;
    ssize_t n;
    *samples = 0;
    why[0] = '\0';
    CHECK(sio_framer_create(NULL, &f, NULL) == SIO_OK);
    for (;;) {
        n = sc_stream_reader(s, 0, buf, sizeof buf);
        if (n < 0)
            break;
        if (n == 0) {
            usleep(1000);
            continue;
        }
        size_t off = 0;
        while (off < (size_t)n) {
            size_t used = 0;
            sio_frame_event ev;
            if (sio_framer_feed(f, buf + off, (size_t)n - off, &used, &ev) !=
                SIO_OK)
                break;
            off += used;
            if (ev.type == SIO_FRAMER_SAMPLE)
                (*samples)++;
            if (ev.type == SIO_FRAMER_ERROR)
                snprintf(why, len, "%s", ev.reason);
        }
    }
    sio_framer_destroy(f);
    return n;
}

/* The request completed: the binding goes to the manager. */
static void release(sc_stream *s, sc_binding *b, int ok)
{
    sc_stream_gone(s, ok);
    sc_jobs_release(jobs, b);
}

/* ... and the manager freed it (the last stream bound). */
static void finish(sc_stream *s, sc_binding *b, int ok)
{
    release(s, b, ok);
    CHECK_EQ_U64(sc_jobs_wait_streams(jobs, WAIT_MS), 0);
}

static void test_put(void)
{
    char reason[512], spec[700];
    snprintf(spec, sizeof spec, "{\"source\": \"%s\", \"seed\": 1}", dir);
    CHECK_EQ_U64(put("train", spec, reason, sizeof reason), 201);
    CHECK_STR(reason, "created");
    CHECK_EQ_U64(put("train", spec, reason, sizeof reason), 200);
    CHECK_STR(reason, "unchanged");
    snprintf(spec, sizeof spec, "{\"source\": \"%s\", \"seed\": 2}", dir);
    CHECK_EQ_U64(put("train", spec, reason, sizeof reason), 200);
    CHECK_STR(reason, "replaced");
    CHECK(sc_jobs_exists(jobs, "train"));
    CHECK(!sc_jobs_exists(jobs, "nope"));

    /* Specs the parser refuses never reach the registry. */
    CHECK_EQ_U64(put("train", "{\"source\": \"/x\", \"partition\": \"bogus\"}",
                     reason, sizeof reason),
                 400);
    CHECK_EQ_U64(put("train", "{\"bogus\": 1}", reason, sizeof reason), 400);
    CHECK_EQ_U64(put("train", "{\"name\": \"other\", \"source\": \"/x\"}",
                     reason, sizeof reason),
                 400);
    CHECK_EQ_U64(put("train", "not json", reason, sizeof reason), 400);

    /* A source that does not resolve: the job exists, is not ready, and
     * says why. */
    CHECK_EQ_U64(put("missing", "{\"source\": \"/nonexistent/shards\"}",
                     reason, sizeof reason),
                 201);
    sc_jobs_wait_resolved(jobs, WAIT_MS);
    CHECK(!sc_jobs_ready(jobs, reason, sizeof reason));
    CHECK(strstr(reason, "missing") != NULL);
    json_t *st = status("missing");
    CHECK(st != NULL);
    CHECK(strcmp(json_string_value(json_object_get(st, "state")), "ready") !=
          0);
    json_decref(st);

    /* --max-jobs 3: a third job fits, a fourth does not. */
    snprintf(spec, sizeof spec, "{\"source\": \"%s\"}", dir);
    CHECK_EQ_U64(put("third", spec, reason, sizeof reason), 201);
    CHECK_EQ_U64(put("fourth", spec, reason, sizeof reason), 409);
    CHECK(!sc_jobs_exists(jobs, "fourth"));
    CHECK_EQ_U64(sc_jobs_delete(jobs, "third", reason, sizeof reason), 204);
    CHECK_EQ_U64(sc_jobs_delete(jobs, "missing", reason, sizeof reason), 204);
    CHECK_EQ_U64(sc_jobs_delete(jobs, "missing", reason, sizeof reason), 404);
    sc_jobs_wait_resolved(jobs, WAIT_MS);
    CHECK(sc_jobs_ready(jobs, reason, sizeof reason));
}

/* Wait (up to WAIT_MS) until at most n streams are bound; 1 when so. */
static int streams_at_most(size_t n)
{
    for (uint32_t waited = 0; waited < WAIT_MS; waited += 10) {
        if (sc_jobs_wait_streams(jobs, 0) <= n)
            return 1;
        usleep(10000);
    }
    return sc_jobs_wait_streams(jobs, 0) <= n;
}

/* Epoch 0 of "train" is listed with no stream on it, and read to its end
 * (its feed ended, or its plan is complete): waited for, up to WAIT_MS. */
static int epoch0_state(void)
{
    json_t *st = status("train");
    int seen = 0, ok = 1;
    json_t *epochs = st ? json_object_get(st, "epochs") : NULL;
    for (size_t i = 0; i < json_array_size(epochs); i++) {
        json_t *e = json_array_get(epochs, i);
        if (json_integer_value(json_object_get(e, "epoch")) != 0)
            continue;
        seen = 1;
        json_t *plan = json_object_get(e, "plan");
        if (json_integer_value(json_object_get(e, "streams")) != 0 ||
            !(json_is_true(json_object_get(e, "ended")) ||
              (json_is_object(plan) &&
               json_is_true(json_object_get(plan, "complete")))))
            ok = 0;
    }
    json_decref(st);
    return seen && ok;
}

static int epoch0_read_out(void)
{
    for (uint32_t waited = 0; waited < WAIT_MS; waited += 10) {
        if (epoch0_state())
            return 1;
        usleep(10000);
    }
    return epoch0_state();
}

static void test_streams(void)
{
    char reason[512], why[256];
    sc_stream *s;
    sc_binding *b;
    size_t n;

    /* Refused before anything is opened. */
    sc_request r = stream_req("nope", 0, 0, 1);
    CHECK_EQ_U64(open_stream(&r, &s, &b, reason, sizeof reason), 404);
    CHECK_STR(reason, "unknown job");
    r = stream_req("train", 0, 0, 100); /* above --window-samples 64 */
    CHECK_EQ_U64(open_stream(&r, &s, &b, reason, sizeof reason), 400);
    CHECK(strstr(reason, "above the window") != NULL);
    CHECK(s == NULL && b == NULL);

    /* Two ranks of epoch 0 share one epoch (its plan, which grows while
     * the shards are indexed, or its feed); each gets its half. */
    sc_request r0 = stream_req("train", 0, 0, 2);
    sc_request r1 = stream_req("train", 0, 1, 2);
    sc_stream *s1;
    sc_binding *b1;
    CHECK_EQ_U64(open_stream(&r0, &s, &b, reason, sizeof reason), 200);
    CHECK_EQ_U64(open_stream(&r1, &s1, &b1, reason, sizeof reason), 200);
    if (!s || !s1) {
        fprintf(stderr, "cannot open the streams: %s\n", reason);
        exit(1);
    }
    CHECK(read_all(s, &n, why, sizeof why) ==
          MHD_CONTENT_READER_END_OF_STREAM);
    CHECK_EQ_U64(n, SAMPLES / 2);
    CHECK(read_all(s1, &n, why, sizeof why) ==
          MHD_CONTENT_READER_END_OF_STREAM);
    CHECK_EQ_U64(n, SAMPLES / 2);
    release(s, b, 1);
    /* The manager reaps a released binding on its own thread: the count
     * falls to the one stream still open. */
    CHECK_EQ_U64(streams_at_most(1), 1);
    finish(s1, b1, 1);

    json_t *st = status("train");
    CHECK(st != NULL);
    CHECK_EQ_U64(total(st, "samples_sent"), SAMPLES);
    CHECK_EQ_U64(total(st, "streams_opened"), 2);
    CHECK_EQ_U64(total(st, "streams_ok"), 2);
    CHECK_EQ_U64(total(st, "streams_client_gone"), 0);
    json_decref(st);
    /* Epoch 0 is in flight (and, read to its end, maybe the prefetched
     * epoch 1), with no stream left on it (planner work that still holds
     * the slot is not a stream), and read to its end: by its feed, or its
     * plan grew to the end (the last grow step may still be running). */
    CHECK(epoch0_read_out());

    /* One sample by index. */
    sc_request rs;
    memset(&rs, 0, sizeof rs);
    rs.route = SC_ROUTE_SAMPLE;
    snprintf(rs.job, sizeof rs.job, "train");
    rs.global_start = 3;
    rs.world = 1;
    rs.format = SC_FORMAT_FRAMES;
    CHECK_EQ_U64(open_stream(&rs, &s, &b, reason, sizeof reason), 200);
    CHECK(read_all(s, &n, why, sizeof why) ==
          MHD_CONTENT_READER_END_OF_STREAM);
    CHECK_EQ_U64(n, 1);
    finish(s, b, 1);

    /* A client that leaves early. */
    r = stream_req("train", 1, 0, 1);
    CHECK_EQ_U64(open_stream(&r, &s, &b, reason, sizeof reason), 200);
    finish(s, b, 0);
    st = status("train");
    CHECK_EQ_U64(total(st, "streams_opened"), 4);
    CHECK_EQ_U64(total(st, "streams_ok"), 3);
    CHECK_EQ_U64(total(st, "streams_client_gone"), 1);
    json_decref(st);

    /* The list of jobs. */
    int missing = 0;
    char *text = sc_jobs_status(jobs, NULL, &missing);
    json_t *all = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    CHECK(all != NULL);
    CHECK_EQ_U64(json_array_size(json_object_get(all, "jobs")), 1);
    CHECK_STR(json_string_value(json_object_get(
                  json_array_get(json_object_get(all, "jobs"), 0), "name")),
              "train");
    json_decref(all);
    CHECK(sc_jobs_status(jobs, "nope", &missing) == NULL);
    CHECK(missing == 1);
}

static void test_metrics(void)
{
    sio_wbuf b;
    sc_prom p;
    char line[128];
    sio_wbuf_init(&b, 4u << 20);
    sc_prom_init(&p, &b);
    CHECK(sc_jobs_limits_metrics(jobs, &p) == SIO_OK);
    CHECK(sc_jobs_metrics(jobs, &p) == SIO_OK);
    CHECK(sio_wbuf_append(&b, "", 1) == SIO_OK);
    const char *text = (const char *)b.data;
    snprintf(line, sizeof line,
             "\nshardcast_samples_sent_total{shardcast_job=\"train\"} %u\n",
             SAMPLES + 1);
    CHECK(strstr(text, line) != NULL);
    CHECK(strstr(text, "\nshardcast_streams_opened_total{shardcast_job="
                       "\"train\"} 4\n") != NULL);
    CHECK(strstr(text, "\nshardcast_streams_closed_total{shardcast_job="
                       "\"train\",outcome=\"client_gone\"} 1\n") != NULL);
    CHECK(strstr(text, "\nshardcast_epochs_refused_total{bound=\"world\"} 1\n") !=
          NULL);
    CHECK(strstr(text, "# TYPE shardcast_job_ready gauge\n"
                       "shardcast_job_ready{shardcast_job=\"train\"} 1\n") !=
          NULL);
    sio_wbuf_free(&b);
}

/* Deleting a job cuts its streams with the error trailer. */
static void test_delete_cuts(void)
{
    char reason[512], why[256];
    sc_stream *s;
    sc_binding *b;
    size_t n;
    sc_request r = stream_req("train", 0, 0, 1);
    CHECK_EQ_U64(open_stream(&r, &s, &b, reason, sizeof reason), 200);
    CHECK_EQ_U64(sc_jobs_delete(jobs, "train", reason, sizeof reason), 204);
    CHECK(!sc_jobs_exists(jobs, "train"));
    CHECK(read_all(s, &n, why, sizeof why) ==
          MHD_CONTENT_READER_END_WITH_ERROR);
    CHECK(strstr(why, "deleted") != NULL);
    sc_stream_stats ss;
    sc_stream_get_stats(s, &ss);
    CHECK(ss.outcome == SC_STREAM_CUT);
    finish(s, b, 0);
    r = stream_req("train", 0, 0, 1);
    CHECK_EQ_U64(open_stream(&r, &s, &b, reason, sizeof reason), 404);
}

int main(void)
{
    char p[600], msg[512];
    CHECK(mkdtemp(dir) != NULL);
    for (int s = 0; s < SHARDS; s++) {
        static char names[PER_SHARD][32];
        tar_member m[PER_SHARD];
        for (int i = 0; i < PER_SHARD; i++) {
            snprintf(names[i], 32, "s%d_%02d.txt", s, i);
            m[i] = (tar_member){names[i], "sample text", 0};
        }
        snprintf(p, sizeof p, "%s/shard-%d.tar", dir, s);
        CHECK(write_tar(p, m, PER_SHARD, "none", "pax") == 0);
    }
    char *const *argv = ARGV("--job", "unused", "--source", dir,
                             "--window-samples", "64", "--max-jobs", "3");
    CHECK(sc_settings_load(&cfg, 9, argv, stdout, msg, sizeof msg) ==
          SC_SETTINGS_OK);
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sc_jobs_create(&cfg, io, &jobs, msg, sizeof msg) == SIO_OK);
    sc_jobs_set_plan_waker(jobs, plan_woken, NULL);

    test_put();
    test_streams();
    test_metrics();
    test_delete_cuts();

    CHECK(sc_jobs_destroy(jobs) == 0);
    sio_io_destroy(io);
    sc_settings_free(&cfg);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
