/*
 * status.c — what /v1/jobs, /v1/jobs/{job} and /metrics say about the
 * jobs: the status JSON (sc_jobs_status) and the job, fetch, index, cache
 * and sample-pool metrics (sc_jobs_metrics, sc_jobs_limits_metrics), all
 * written through the one Prometheus writer (prom.h). Contract in jobs.h.
 *
 * Threading: called on MHD threads; reads the registry (jobs_internal.h)
 * under j->mu, then each job's job->mu, in the order of jobs.h, and takes
 * snapshots of feeds and caches through their own locks. Nothing here
 * blocks beyond those locks.
 */
#include "jobs_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "prom.h"

/* Status ------------------------------------------------------------------ */

static const char *state_name(int st)
{
    return st == JOB_READY ? "ready" : st == JOB_FAILED ? "failed" : "resolving";
}

static const char *partition_name(int p)
{
    return sio_partition_name((sio_partition)p);
}

static json_t *jint(uint64_t v)
{
    return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/* Samples/s and MB/s over the ring (job->mu held). */
static void throughput(const sc_job *job, double *sps, double *mbps,
                       double *secs)
{
    *sps = *mbps = *secs = 0;
    if (job->nring < 2)
        return;
    const tp_sample *newest = &job->ring[(job->ring_at + RING - 1) % RING];
    const tp_sample *oldest =
        &job->ring[job->nring < RING ? 0 : job->ring_at];
    if (newest->ms <= oldest->ms)
        return;
    *secs = (double)(newest->ms - oldest->ms) / 1000.0;
    *sps = (double)(newest->samples - oldest->samples) / *secs;
    *mbps = (double)(newest->bytes - oldest->bytes) / 1e6 / *secs;
}

typedef struct epoch_counts {
    size_t attached, missing, lagging;
    uint64_t window_samples, window_bytes;
    uint64_t shards_skipped, samples_skipped;
    sio_feed_seek_stats seek;
} epoch_counts;


static uint64_t lag_threshold(const sc_config *cfg)
{
    return cfg->lag_samples ? cfg->lag_samples
                            : (cfg->window_samples + 1u) / 2u;
}

/* One epoch's status object; adds to *cnt (job->mu held). cons has
 * SC_STATUS_CONSUMERS_MAX entries. */
/* A consumer's share length, once the epoch's length is known (null
 * before). */
static json_t *share_length_json(const fslot *s, uint32_t rank,
                                 uint32_t world)
{
    return s->count != UINT64_MAX
               ? jint(sio_share_length(s->count, 0, rank, world,
                                       (sio_partition)s->partition))
               : json_null();
}

static json_t *epoch_json(const sc_config *cfg, sc_job *job, fslot *s,
                          sio_feed_consumer *cons, epoch_counts *cnt,
                          int detail)
{
    sio_feed_stats st;
    size_t n = 0;
    uint64_t thr = lag_threshold(cfg);
    sio_feed_get_stats(s->feed, &st, cons, SC_STATUS_CONSUMERS_MAX, &n);
    size_t listed = n < SC_STATUS_CONSUMERS_MAX ? n : SC_STATUS_CONSUMERS_MAX;
    size_t attached = 0, missing = 0, lagging = 0;
    json_t *jc = detail ? json_array() : NULL;
    json_t *jm = detail ? json_array() : NULL;
    json_t *jl = detail ? json_array() : NULL;

    for (size_t i = 0; i < listed; i++) {
        sio_feed_consumer *c = &cons[i];
        int lag = c->attached && c->lag >= thr;
        attached += c->attached != 0;
        missing += !c->attached;
        lagging += lag;
        if (!detail)
            continue;
        json_t *o = json_pack(
            "{s:I, s:I, s:o, s:o, s:o, s:b, s:b, s:o, s:s, s:b}", "rank",
            (json_int_t)c->rank, "world", (json_int_t)c->world, "position",
            jint(c->position), "next_index", jint(c->next_index), "lag",
            jint(c->lag), "attached", c->attached, "replay", c->replay,
            "idle_ms", jint(c->idle_ms), "state",
            c->attached ? (lag ? "lagging" : "streaming")
                        : c->expected ? "missing" : "disconnected",
            "lagging", lag);
        json_object_set_new(o, "share_length",
                            share_length_json(s, c->rank, c->world));
        json_array_append_new(jc, o);
        /* Missing: expected but never attached, or disconnected and
         * still within its rejoin grace (the window waits for both). */
        if (!c->attached)
            json_array_append_new(
                jm, json_pack("{s:I, s:I, s:o, s:s}", "rank",
                              (json_int_t)c->rank, "world",
                              (json_int_t)c->world, "idle_ms",
                              jint(c->idle_ms), "state",
                              c->expected ? "never-attached"
                                          : "disconnected"));
        if (lag)
            json_array_append_new(
                jl, json_pack("{s:I, s:I, s:o}", "rank", (json_int_t)c->rank,
                              "world", (json_int_t)c->world, "lag",
                              jint(c->lag)));
    }
    /* Streams served from the epoch's plan read no feed: they are
     * attached consumers all the same, listed with the feed's at their
     * positions (no window holds them back: no lag). */
    size_t planned = 0;
    json_t *jp = detail ? json_array() : NULL;
    for (sc_binding *b = job->bindings; b; b = b->next) {
        if (b->slot != s || !b->pr)
            continue;
        planned++;
        if (!jp || planned > SC_STATUS_CONSUMERS_MAX)
            continue;
        json_array_append_new(
            jp, json_pack("{s:I, s:I, s:s}", "rank", (json_int_t)b->rank,
                          "world", (json_int_t)b->world, "state",
                          "streaming"));
        if (listed + planned > SC_STATUS_CONSUMERS_MAX)
            continue;
        uint64_t pos = sio_planread_position_now(b->pr);
        json_array_append_new(
            jc,
            json_pack("{s:I, s:I, s:o, s:n, s:o, s:b, s:b, s:o, s:s, s:b, "
                      "s:o}",
                      "rank", (json_int_t)b->rank, "world",
                      (json_int_t)b->world, "position", jint(pos),
                      "next_index", "lag", jint(0), "attached", 1, "replay",
                      0, "idle_ms", jint(0), "state", "streaming",
                      "lagging", 0, "share_length",
                      share_length_json(s, b->rank, b->world)));
    }
    attached += planned;
    cnt->attached += attached;
    cnt->missing += missing;
    cnt->lagging += lagging;
    cnt->window_samples += st.window_samples;
    cnt->window_bytes += st.window_bytes;
    /* An epoch read ahead (prefetch) that nobody has streamed yet does not
     * count its skips for the job: they are told once it is served, so a
     * bad shard read by the epoch consumed and by the next one read ahead
     * counts once, not twice. The epoch's own entry shows them. */
    if (s->served) {
        cnt->shards_skipped += slot_shards_skipped(s, st.epoch.shards_skipped);
        cnt->samples_skipped +=
            slot_samples_skipped(s, st.epoch.samples_skipped);
    }
    sc_seek_add(&cnt->seek, &st.seek);
    if (!detail)
        return NULL;
    json_t *plan = s->plan ? json_pack("{s:o, s:o, s:f, s:I, s:o, s:b}",
                                       "samples",
                                       jint(sio_plan_count(s->plan)), "bytes",
                                       jint(sio_plan_memory(s->plan)),
                                       "build_ms",
                                       (double)sio_plan_build_ns(s->plan) /
                                           1e6,
                                       "streams", (json_int_t)planned,
                                       "consumers", jp, "complete",
                                       sio_plan_complete(s->plan))
                           : json_null();
    if (!s->plan)
        json_decref(jp);
    if (s->plan) {
        /* An epoch longer than a plan keeps: its window. */
        sio_plan_window w;
        sio_plan_window_stats(s->plan, &w);
        json_object_set_new(
            plan, "window",
            w.windowed
                ? json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                            "keep_samples", jint(w.keep), "held_samples",
                            jint(w.held_items), "released_chunks",
                            jint(w.released_chunks), "refilled_chunks",
                            jint(w.refilled_chunks), "checkpoints",
                            jint(w.checkpoints), "checkpoint_every",
                            jint(w.checkpoint_every), "checkpoint_bytes",
                            jint(w.checkpoint_bytes))
                : json_null());
    }
    json_t *seeks = json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o}", "ready_ms_avg",
        st.seek.ready_count
            ? json_real((double)st.seek.ready_us / 1000.0 /
                        (double)st.seek.ready_count)
            : json_null(),
        "opened",
        jint(st.seek.opened), "shared", jint(st.seek.shared), "refused",
        jint(st.seek.busy), "replays", jint(st.seek.replays), "lag_detaches",
        jint(st.seek.lag_detaches), "active", (json_int_t)st.seek.active,
        "replaying", (json_int_t)st.seek.replaying, "window_bytes",
        jint(st.seek.window_bytes));
    json_t *o = json_pack(
        "{s:o, s:o, s:{s:o, s:o, s:o, s:o, s:o}, s:b, s:b, s:b, s:b, s:I, "
        "s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:b}",
        "epoch", jint(s->epoch), "produced", jint(st.produced), "window",
        "lo", jint(st.window_lo), "samples", jint(st.window_samples), "bytes",
        jint(st.window_bytes), "max_samples", jint(cfg->window_samples),
        "max_bytes", jint(cfg->window_bytes), "ended", st.ended, "failed",
        st.failed, "prefetched", s->prefetched, "retired", s->retired,
        "streams", (json_int_t)s->streams, "samples", jint(st.epoch.samples),
        "bytes", jint(st.epoch.bytes), "shards_done",
        jint(st.epoch.shards_done), "shards_skipped",
        jint(slot_shards_skipped(s, st.epoch.shards_skipped)),
        "samples_skipped",
        jint(slot_samples_skipped(s, st.epoch.samples_skipped)),
        "consumers_total", jint(n + planned),
        "attached", (json_int_t)attached, "missing_count",
        (json_int_t)missing, "lagging_count", (json_int_t)lagging,
        "consumers", jc, "missing", jm, "lagging", jl, "consumers_truncated",
        n > listed || listed + planned > SC_STATUS_CONSUMERS_MAX);
    if (o) {
        /* whose part of the epoch: this server's own, or a failed
         * replica's it covers for (replica=J) */
        json_object_set_new(o, "replica", json_integer((json_int_t)s->part));
        /* The epoch's length: read to its end, the feed knows it (so a
         * client asking right after the epoch that indexed the last shard
         * ended gets it); before, once the manager has counted it from
         * the indexes (which may read them from the store: never here, on
         * an HTTP thread under the job's lock). */
        if (s->count == UINT64_MAX && st.length != UINT64_MAX)
            s->count = st.length;
        /* A plan that grew to its end knows it as well. */
        if (s->count == UINT64_MAX && s->plan && sio_plan_complete(s->plan))
            s->count = sio_plan_count(s->plan);
        json_object_set_new(o, "samples_total", s->count != UINT64_MAX
                                                    ? jint(s->count)
                                                    : json_null());
        json_object_set_new(o, "seeks", seeks);
        json_object_set_new(o, "plan", plan);
        json_object_set_new(o, "journal_skips",
                            jint(sio_journal_count(s->journal)));
    } else {
        json_decref(seeks);
        json_decref(plan);
    }
    return o;
}

static json_t *fetch_json(sio_io *io)
{
    sio_io_stats f;
    sio_io_get_stats(io, &f);
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:I, s:I}", "requests",
                     jint(f.requests), "retries", jint(f.retries),
                     "throttles", jint(f.throttles), "errors",
                     jint(f.errors), "bytes", jint(f.bytes), "inflight",
                     (json_int_t)f.inflight, "concurrency",
                     (json_int_t)f.concurrency);
}

static const char *list_url_at(const void *ctx, size_t i)
{
    return sio_shardlist_url(ctx, i);
}

/* The job's use of the shard cache: its opens and bytes, and how many of
 * its shards the cache holds (job->mu held; the list is immutable). */
static json_t *job_cache_json(sc_jobs *j, sc_job *job)
{
    sio_cache_user_stats us;
    uint64_t held = 0, held_bytes = 0;
    sio_cache_user_get_stats(job->res->cache, &us);
    if (job->res->cache && job->res->list)
        sio_cache_held(j->cache, list_url_at, job->res->list,
                       sio_shardlist_count(job->res->list), &held,
                       &held_bytes);
    return json_pack("{s:b, s:o, s:o, s:o, s:o, s:o, s:o}", "enabled",
                     job->res->cache != NULL, "entries", jint(held), "bytes",
                     jint(held_bytes), "hits", jint(us.hits), "misses",
                     jint(us.misses), "hit_bytes", jint(us.hit_bytes),
                     "miss_bytes", jint(us.miss_bytes));
}

/* A mixed job's sources: configured and realized proportions (of the
 * samples sent to consumers so far). job->mu held; the mix is immutable. */
static json_t *job_mix_json(sc_job *job)
{
    const job_res *r = job->res;
    uint64_t quota_sum = 0, sent_sum = 0;
    json_t *arr = json_array();
    for (uint32_t i = 0; i < r->nmix; i++) {
        quota_sum += r->mix[i].quota;
        sent_sum += atomic_load(&r->mix_sent[i]);
    }
    for (uint32_t i = 0; arr && i < r->nmix; i++) {
        uint64_t sent = atomic_load(&r->mix_sent[i]);
        json_array_append_new(
            arr, json_pack("{s:s, s:I, s:o, s:o, s:f, s:o, s:f}", "name",
                           r->mix_names[i], "shards",
                           (json_int_t)r->mix[i].count, "quota",
                           jint(r->mix[i].quota), "sampling",
                           r->mix[i].resample
                               ? json_string("with_replacement")
                               : json_string("without_replacement"),
                           "proportion_configured",
                           quota_sum ? (double)r->mix[i].quota /
                                           (double)quota_sum
                                     : 0.0,
                           "samples_sent", jint(sent),
                           "proportion_realized",
                           sent_sum ? (double)sent / (double)sent_sum : 0.0));
    }
    return arr;
}

/* The server's shard cache (null without one). */
static json_t *cache_json(sc_jobs *j)
{
    sio_cache_stats cs;
    if (!j->cache)
        return json_null();
    sio_cache_get_stats(j->cache, &cs);
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o, s:o}",
        "budget_bytes", jint(cs.budget), "used_bytes", jint(cs.used_bytes),
        "data_bytes", jint(cs.data_bytes), "entries", jint(cs.entries),
        "complete", jint(cs.complete), "fills", (json_int_t)cs.fills, "hits",
        jint(cs.hits), "misses", jint(cs.misses), "hit_bytes",
        jint(cs.hit_bytes), "miss_bytes", jint(cs.miss_bytes), "store_bytes",
        jint(cs.store_bytes), "evictions", jint(cs.evictions), "stale",
        jint(cs.stale), "rejected", jint(cs.rejected), "validations",
        jint(cs.validations), "corrupt", jint(cs.corrupt));
}

static json_t *job_json(sc_jobs *j, sc_job *job, sio_feed_consumer *cons,
                        int detail)
{
    char src[SC_SOURCE_MAX + 16];
    epoch_counts cnt;
    double sps, mbps, secs;
    json_t *epochs = json_array();

    memset(&cnt, 0, sizeof cnt);
    pthread_mutex_lock(&job->mu);
    for (fslot *s = job->slots; s; s = s->next) {
        if (s->retired && !detail)
            continue;
        json_t *e = epoch_json(j->cfg, job, s, cons, &cnt, detail);
        json_array_append_new(epochs, e ? e : jint(s->epoch));
    }
    throughput(job, &sps, &mbps, &secs);
    sc_redact_source(job->spec.source, src, sizeof src);
    json_t *settings = json_pack(
        "{s:o, s:I, s:o, s:I, s:s, s:s, s:I, s:o, s:b}", "seed",
        jint(job->spec.seed), "shuffle_buffer",
        (json_int_t)job->spec.shuffle_buffer, "shuffle_buffer_bytes",
        jint(job->spec.buffer_bytes), "interleave",
        (json_int_t)job->spec.interleave, "partition",
        partition_name(job->spec.partition), "on_error",
        job->spec.on_error == SIO_ON_ERROR_FAIL ? "fail" : "skip",
        "read_threads", (json_int_t)job->spec.read_threads, "fields",
        job->spec.fields ? json_string(job->spec.fields) : json_null(),
        "cache", job->spec.cache);
    if (settings) {
        json_object_set_new(settings, "epoch_size", jint(job->spec.epoch_size));
        if (job->spec.sources)
            json_object_set_new(settings, "sources",
                                json_loads(job->spec.sources, 0, NULL));
    }
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:I, s:I, s:I, s:{s:f, s:f, "
        "s:f}, s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}, s:{s:o, s:o}}",
        "name", job->spec.name, "state", state_name(job->state), "reason",
        job->reason, "source", src, "shards",
        job->res->list ? jint(sio_shardlist_count(job->res->list))
                       : json_null(),
        "settings", settings, "epochs", epochs, "consumers_attached",
        (json_int_t)cnt.attached, "consumers_missing",
        (json_int_t)cnt.missing, "consumers_lagging",
        (json_int_t)cnt.lagging, "throughput", "samples_per_s", sps,
        "mb_per_s", mbps, "window_s", secs, "totals", "samples_sent",
        jint(atomic_load(&job->ctr.samples)), "bytes_sent",
        jint(atomic_load(&job->ctr.bytes)), "streams_opened",
        jint(atomic_load(&job->streams_opened)), "streams_ok",
        jint(atomic_load(&job->streams_by_outcome[SC_STREAM_OK])),
        "streams_failed",
        jint(atomic_load(&job->streams_by_outcome[SC_STREAM_ERROR])),
        "streams_cut",
        jint(atomic_load(&job->streams_by_outcome[SC_STREAM_CUT])),
        "streams_client_gone",
        jint(atomic_load(&job->streams_by_outcome[SC_STREAM_CLIENT_GONE])),
        "streams_stalled", jint(atomic_load(&job->streams_stalled)),
        "skipped", "shards",
        jint(job->shards_skipped_closed + cnt.shards_skipped), "samples",
        jint(job->samples_skipped_closed + cnt.samples_skipped));
    /* A failed job: retried (transient) or failed for good (permanent:
     * its streams answer 422 until a PUT). */
    if (o && job->state == JOB_FAILED)
        json_object_set_new(o, "failure", json_string(job->permanent
                                                          ? "permanent"
                                                          : "transient"));
    if (o && detail) {
        json_t *errs = json_array();
        for (size_t i = 0; i < job->nerrors; i++) {
            size_t k = (job->error_at + SC_JOB_ERRORS_MAX - job->nerrors + i) %
                       SC_JOB_ERRORS_MAX;
            json_array_append_new(
                errs, json_pack("{s:o, s:s}", "unix_ms",
                                jint(job->errors[k].unix_ms), "message",
                                job->errors[k].msg));
        }
        json_object_set_new(o, "errors", errs);
        json_object_set_new(o, "fetch", fetch_json(j->io));
        json_object_set_new(
            o, "lag_threshold_samples", jint(lag_threshold(j->cfg)));
    }
    if (o)
        json_object_set_new(o, "cache", job_cache_json(j, job));
    if (o) {
        sio_plan_stage_stats st;
        sc_job_stage(job, &st);
        json_object_set_new(
            o, "staging",
            json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
                      "s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o, "
                      "s:o}",
                      "budget_bytes", jint(sc_config_stage_bytes(j->cfg)),
                      "bytes", jint(st.bytes), "peak_bytes", jint(st.peak),
                      "largest_shard_bytes", jint(st.max_shard), "shards",
                      jint(st.staged), "fetched_bytes",
                      jint(st.fetched_bytes), "restages", jint(st.restages),
                      "restages_ranged", jint(st.ranged),
                      "shards_deferred", jint(st.deferred),
                      "restages_evicted", jint(st.evicted),
                      "restage_windows_moved", jint(st.windows_moved),
                      "restage_windows_continued",
                      jint(st.windows_continued),
                      "revived", jint(st.revived),
                      "released", jint(st.released), "detaches",
                      jint(st.detaches), "refused", jint(st.refused),
                      "shards_held", jint(st.held), "waiting_for_room",
                      st.blocked, "spare_bytes", jint(st.spare),
                      "thinned_bytes", jint(st.thinned_bytes),
                      "thin_passes", jint(st.thin_passes)));
    }
    if (o)
        json_object_set_new(
            o, "data_plane",
            json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                      "mode",
                      j->cfg->data_plane == SC_DATA_PLANE_AUTO ? "auto"
                                                               : "stream",
                      "plans", jint(atomic_load(&job->plans_built)),
                      "plans_grown", jint(atomic_load(&job->plans_grown)),
                      "plans_again", jint(atomic_load(&job->plans_again)),
                      "plan_streams", jint(atomic_load(&job->plan_streams)),
                      "feed_streams", jint(atomic_load(&job->feed_streams)),
                      "plan_failures",
                      jint(atomic_load(&job->plan_failures)),
                      "plan_waits", jint(atomic_load(&job->plan_waits)),
                      "sample_streams_in_place",
                      jint(atomic_load(&job->sample_plan_streams)),
                      "sample_streams_fetched",
                      jint(atomic_load(&job->sample_fetched_streams))));
    if (o) {
        /* The replica set: this server's part, and what fixes the order
         * (GET /v1/topology?job= has the fields). */
        uint32_t R = j->cfg->replicas > 1 ? j->cfg->replicas : 1;
        json_object_set_new(
            o, "replicas",
            json_pack("{s:I, s:I, s:o, s:o}", "replica",
                      (json_int_t)(R > 1 ? j->cfg->replica : 0), "replicas",
                      (json_int_t)R, "fingerprint",
                      job->state == JOB_READY
                          ? json_string(job->res->fingerprint)
                          : json_null(),
                      "failover_streams",
                      jint(atomic_load(&job->failover_streams))));
    }
    if (o && job->res->nmix)
        json_object_set_new(o, "mix", job_mix_json(job));
    pthread_mutex_unlock(&job->mu);
    return o;
}

char *sc_jobs_status(sc_jobs *j, const char *name, int *missing)
{
    char *text = NULL;
    json_t *root = NULL;
    sio_feed_consumer *cons = malloc(SC_STATUS_CONSUMERS_MAX * sizeof *cons);

    *missing = 0;
    if (!cons)
        return NULL;
    if (name) {
        sc_job *job = sc_jobs_get_job(j, name);
        if (!job) {
            *missing = 1;
            goto out;
        }
        root = job_json(j, job, cons, 1);
        sc_job_unref(job);
    } else {
        json_t *list = json_array();
        pthread_mutex_lock(&j->mu);
        for (size_t i = 0; i < j->njobs; i++)
            json_array_append_new(list, job_json(j, j->jobs[i], cons, 0));
        pthread_mutex_unlock(&j->mu);
        root = json_pack("{s:o, s:o, s:o}", "jobs", list, "fetch",
                         fetch_json(j->io), "cache", cache_json(j));
    }
    if (root)
        text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
out:
    json_decref(root);
    free(cons);
    return text;
}

/* Metrics ---------------------------------------------------------------- */

typedef struct job_metrics {
    char name[SC_JOB_NAME_MAX + 1];
    int ready;
    uint64_t samples, bytes, opened, by_outcome[5];
    uint64_t sample_plan_streams, sample_fetched_streams;
    uint64_t plans, plans_grown, plans_again, plan_streams, feed_streams,
        plan_failures, plan_waits;
    uint64_t failover_streams, streams_stalled;
    uint64_t epochs, streams;
    epoch_counts cnt;
    uint64_t shards_skipped, samples_skipped;
    sio_plan_stage_stats stage;
} job_metrics;

/* The per-source series of mixed jobs: samples sent (what 0) or the
 * proportions (what 1). The registry's lock keeps the jobs (and their
 * immutable mixes) alive; counters are atomics. */
static void mix_metrics(sc_jobs *j, sc_prom *p, int what)
{
    pthread_mutex_lock(&j->mu);
    for (size_t k = 0; k < j->njobs; k++) {
        sc_job *job = j->jobs[k];
        pthread_mutex_lock(&job->mu);
        const job_res *r = job->res;
        uint64_t qsum = 0, ssum = 0;
        for (uint32_t i = 0; i < r->nmix; i++) {
            qsum += r->mix[i].quota;
            ssum += atomic_load(&r->mix_sent[i]);
        }
        for (uint32_t i = 0; i < r->nmix; i++) {
            uint64_t sent = atomic_load(&r->mix_sent[i]);
            if (what == 0) {
                sc_prom_u64(p, "shardcast_mix_samples_sent_total",
                            SC_PROM_LABELS({"shardcast_job", job->spec.name},
                                           {"source", r->mix_names[i]}),
                            sent);
                continue;
            }
            sc_prom_f64(p, "shardcast_mix_proportion",
                        SC_PROM_LABELS({"shardcast_job", job->spec.name},
                                       {"source", r->mix_names[i]},
                                       {"kind", "configured"}),
                        qsum ? (double)r->mix[i].quota / (double)qsum : 0.0,
                        6);
            sc_prom_f64(p, "shardcast_mix_proportion",
                        SC_PROM_LABELS({"shardcast_job", job->spec.name},
                                       {"source", r->mix_names[i]},
                                       {"kind", "realized"}),
                        ssum ? (double)sent / (double)ssum : 0.0, 6);
        }
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_unlock(&j->mu);
}

/* A family with one unlabelled series. */
static void scalar(sc_prom *p, const char *name, const char *type,
                   const char *help, uint64_t v)
{
    sc_prom_family(p, name, type, help);
    sc_prom_u64(p, name, SC_PROM_NOLABELS, v);
}

/* A family with one series per value of one label. */
static void by_label(sc_prom *p, const char *name, const char *type,
                     const char *help, const char *label,
                     const char *const *values, const uint64_t *v, size_t n)
{
    sc_prom_family(p, name, type, help);
    for (size_t i = 0; i < n; i++)
        sc_prom_u64(p, name, SC_PROM_LABELS({label, values[i]}), v[i]);
}

/* A per-job family: one series per job, expr (of m[i]) its value. */
#define PER_JOB(p, m, n, metric, type, help, expr)                         \
    do {                                                                   \
        sc_prom_family((p), metric, type, help);                           \
        for (size_t i = 0; i < (n); i++)                                   \
            sc_prom_u64((p), metric,                                       \
                        SC_PROM_LABELS({"shardcast_job", (m)[i].name}),    \
                        (uint64_t)(expr));                                 \
    } while (0)

static void cache_metrics(sc_jobs *j, sc_prom *p)
{
    static const char *const hit_miss[] = {"hit", "miss"};
    static const char *const done_failed[] = {"done", "failed"};
    sio_cache_stats cs;
    if (!j->cache)
        return;
    sio_cache_get_stats(j->cache, &cs);
    by_label(p, "shardcast_cache_requests_total", "counter",
             "Shard opens through the cache: hit (the entry was complete "
             "and valid) or miss.",
             "result", hit_miss, (const uint64_t[]){cs.hits, cs.misses}, 2);
    by_label(p, "shardcast_cache_bytes_total", "counter",
             "Bytes delivered to shard readers, by the result of their "
             "open.",
             "result", hit_miss,
             (const uint64_t[]){cs.hit_bytes, cs.miss_bytes}, 2);
    scalar(p, "shardcast_cache_store_bytes_total", "counter",
           "Object bytes read from the store into the cache.",
           cs.store_bytes);
    scalar(p, "shardcast_cache_evictions_total", "counter",
           "Entries evicted to make room.", cs.evictions);
    scalar(p, "shardcast_cache_evicted_bytes_total", "counter",
           "Object bytes of the evicted entries.", cs.evicted_bytes);
    scalar(p, "shardcast_cache_stale_total", "counter",
           "Entries dropped because the object changed in the store.",
           cs.stale);
    scalar(p, "shardcast_cache_rejected_total", "counter",
           "Misses not admitted (the policy, or every fill busy): read "
           "straight from the store.", cs.rejected);
    scalar(p, "shardcast_cache_validations_total", "counter",
           "HEAD requests made to check an entry against the store.",
           cs.validations);
    scalar(p, "shardcast_cache_corrupt_total", "counter",
           "Reads of cache entry bytes that failed their block checksum "
           "(the entry is dropped and read again from the store).",
           cs.corrupt);
    scalar(p, "shardcast_cache_errors_total", "counter",
           "Cache storage failures (the entry is dropped, readers go to "
           "the store).", cs.write_errors);
    by_label(p, "shardcast_cache_fills_total", "counter",
             "Background fills by how they ended.", "result", done_failed,
             (const uint64_t[]){cs.fills_done, cs.fills_failed}, 2);
    scalar(p, "shardcast_cache_fills_active", "gauge", "Fills running now.",
           cs.fills);
    scalar(p, "shardcast_cache_entries", "gauge",
           "Entries held, complete or partial.", cs.entries);
    scalar(p, "shardcast_cache_used_bytes", "gauge",
           "Bytes charged against the budget.", cs.used_bytes);
    scalar(p, "shardcast_cache_budget_bytes", "gauge", "The cache budget.",
           cs.budget);
}

sio_code sc_jobs_metrics(sc_jobs *j, sc_prom *p)
{
    size_t n = 0;
    sio_feed_consumer *cons = malloc(SC_STATUS_CONSUMERS_MAX * sizeof *cons);
    job_metrics *m = calloc(j->cfg->max_jobs, sizeof *m);

    if (!cons || !m) {
        free(cons);
        free(m);
        if (p->rc == SIO_OK)
            p->rc = SIO_ERR_NOMEM;
        return p->rc;
    }
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->njobs; i++, n++) {
        sc_job *job = j->jobs[i];
        job_metrics *x = &m[n];
        pthread_mutex_lock(&job->mu);
        snprintf(x->name, sizeof x->name, "%s", job->spec.name);
        x->ready = job->state == JOB_READY;
        x->samples = atomic_load(&job->ctr.samples);
        x->bytes = atomic_load(&job->ctr.bytes);
        x->opened = atomic_load(&job->streams_opened);
        x->plans = atomic_load(&job->plans_built);
        x->plans_grown = atomic_load(&job->plans_grown);
        x->plans_again = atomic_load(&job->plans_again);
        sc_job_stage(job, &x->stage);
        x->plan_waits = atomic_load(&job->plan_waits);
        x->plan_streams = atomic_load(&job->plan_streams);
        x->feed_streams = atomic_load(&job->feed_streams);
        x->sample_plan_streams = atomic_load(&job->sample_plan_streams);
        x->sample_fetched_streams = atomic_load(&job->sample_fetched_streams);
        x->plan_failures = atomic_load(&job->plan_failures);
        x->failover_streams = atomic_load(&job->failover_streams);
        x->streams_stalled = atomic_load(&job->streams_stalled);
        for (int k = 0; k < 5; k++)
            x->by_outcome[k] = atomic_load(&job->streams_by_outcome[k]);
        for (fslot *s = job->slots; s; s = s->next) {
            x->streams += s->streams;
            if (s->retired)
                continue;
            x->epochs++;
            epoch_json(j->cfg, job, s, cons, &x->cnt, 0);
        }
        x->shards_skipped = job->shards_skipped_closed + x->cnt.shards_skipped;
        sc_seek_add(&x->cnt.seek, &job->seeks_closed);
        x->samples_skipped =
            job->samples_skipped_closed + x->cnt.samples_skipped;
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_unlock(&j->mu);

    PER_JOB(p, m, n, "shardcast_job_ready", "gauge",
            "1 when the job's source is resolved and it serves streams.",
            m[i].ready);
    PER_JOB(p, m, n, "shardcast_samples_sent_total", "counter",
            "Samples sent to consumers.", m[i].samples);
    PER_JOB(p, m, n, "shardcast_bytes_sent_total", "counter",
            "Bytes of stream bodies sent to consumers.", m[i].bytes);
    PER_JOB(p, m, n, "shardcast_streams_opened_total", "counter",
            "Streams opened (each a cursor of a shared epoch).",
            m[i].opened);
    sc_prom_family(p, "shardcast_streams_closed_total", "counter",
                   "Streams closed, by outcome.");
    for (size_t i = 0; i < n; i++)
        for (int k = SC_STREAM_OK; k <= SC_STREAM_CLIENT_GONE; k++)
            sc_prom_u64(p, "shardcast_streams_closed_total",
                        SC_PROM_LABELS({"shardcast_job", m[i].name},
                                       {"outcome",
                                        sc_stream_outcome_name(
                                            (sc_stream_outcome)k)}),
                        m[i].by_outcome[k]);
    sc_prom_family(p, "shardcast_data_plane_streams_total", "counter",
                   "Streams opened, by the plane that served them: plan "
                   "(read from the epoch's plan) or feed.");
    for (size_t i = 0; i < n; i++) {
        sc_prom_u64(p, "shardcast_data_plane_streams_total",
                    SC_PROM_LABELS({"shardcast_job", m[i].name},
                                   {"plane", "plan"}),
                    m[i].plan_streams);
        sc_prom_u64(p, "shardcast_data_plane_streams_total",
                    SC_PROM_LABELS({"shardcast_job", m[i].name},
                                   {"plane", "feed"}),
                    m[i].feed_streams);
    }
    sc_prom_family(p, "shardcast_sample_streams_total", "counter",
                   "GET /samples/{i} streams, by how the sample was read: "
                   "in_place (from a local plain tar where the indexes put "
                   "it) or fetched (read whole first on a sample thread: "
                   "shards not indexed yet, remote, cached or compressed "
                   "ones).");
    for (size_t i = 0; i < n; i++) {
        sc_prom_u64(p, "shardcast_sample_streams_total",
                    SC_PROM_LABELS({"shardcast_job", m[i].name},
                                   {"read", "in_place"}),
                    m[i].sample_plan_streams);
        sc_prom_u64(p, "shardcast_sample_streams_total",
                    SC_PROM_LABELS({"shardcast_job", m[i].name},
                                   {"read", "fetched"}),
                    m[i].sample_fetched_streams);
    }
    PER_JOB(p, m, n, "shardcast_failover_streams_total", "counter",
            "Streams this server served of another replica's part of an "
            "epoch (replica=J: that replica failed its consumers).",
            m[i].failover_streams);
    PER_JOB(p, m, n, "shardcast_plans_built_total", "counter",
            "Epoch plans built from the shard indexes.", m[i].plans);
    PER_JOB(p, m, n, "shardcast_plans_grown_total", "counter",
            "Epoch plans started before their shards were indexed (the "
            "first pass), grown as the shards were read.", m[i].plans_grown);
    PER_JOB(p, m, n, "shardcast_plans_again_total", "counter",
            "Epoch plans made again after a stream found a shard changed "
            "under the epoch's plan (epochs read in place).",
            m[i].plans_again);
    PER_JOB(p, m, n, "shardcast_stage_bytes", "gauge",
            "Bytes of remote shards held in memory for planned epochs "
            "(staging: neither local nor in the shard cache).",
            m[i].stage.bytes);
    PER_JOB(p, m, n, "shardcast_stage_fetched_bytes_total", "counter",
            "Bytes fetched from the store into staging.",
            m[i].stage.fetched_bytes);
    PER_JOB(p, m, n, "shardcast_stage_restages_total", "counter",
            "Staged shards fetched again for streams behind the others.",
            m[i].stage.restages);
    PER_JOB(p, m, n, "shardcast_stage_restages_ranged_total", "counter",
            "Of those, fetched as the byte ranges of the items still to be "
            "read (not the whole shard).", m[i].stage.ranged);
    PER_JOB(p, m, n, "shardcast_stage_restage_windows_moved_total",
            "counter",
            "Windows of shards fetched again that moved to where a stream "
            "reads, written afresh into the same memory.",
            m[i].stage.windows_moved);
    PER_JOB(p, m, n, "shardcast_stage_restage_windows_continued_total",
            "counter",
            "Windows of a compressed shard or a zip larger than the "
            "staging budget made on from where the last window's source "
            "stopped, not from the object's start.",
            m[i].stage.windows_continued);
    PER_JOB(p, m, n, "shardcast_stage_thinned_bytes_total", "counter",
            "Pages of staged shards given back while the shard was still "
            "read: its items every stream had passed.",
            m[i].stage.thinned_bytes);
    PER_JOB(p, m, n, "shardcast_stage_shards_deferred_total", "counter",
            "Staged shards no step fetched: every stream was far past them "
            "(a resume far into an epoch); streams that reach their items "
            "have those fetched.", m[i].stage.deferred);
    PER_JOB(p, m, n, "shardcast_stage_detaches_total", "counter",
            "Consumer ranks the staging stopped keeping shards for (late, "
            "lagging or gone past the grace).", m[i].stage.detaches);
    PER_JOB(p, m, n, "shardcast_streams_stalled_total", "counter",
            "Streams ended with a retryable error because they waited "
            "--stream-stall-timeout for a sample while the job made no "
            "progress.", m[i].streams_stalled);
    PER_JOB(p, m, n, "shardcast_plan_waits_total", "counter",
            "Stream openings that waited, suspended, for their epoch's plan "
            "to be built on a planner thread.", m[i].plan_waits);
    PER_JOB(p, m, n, "shardcast_plan_failures_total", "counter",
            "Plan streams ended because a shard file changed, shrank or "
            "vanished under the plan (the epoch then streams from its feed).",
            m[i].plan_failures);
    PER_JOB(p, m, n, "shardcast_streams_active", "gauge",
            "Streams bound to an epoch of the job.", m[i].streams);
    PER_JOB(p, m, n, "shardcast_epochs_in_flight", "gauge",
            "Epochs with an open feed.", m[i].epochs);
    PER_JOB(p, m, n, "shardcast_consumers_attached", "gauge",
            "Consumers attached to an epoch in flight.", m[i].cnt.attached);
    PER_JOB(p, m, n, "shardcast_consumers_missing", "gauge",
            "Consumers expected by an epoch (rank of a world seen, or "
            "disconnected within the rejoin grace) but not attached.",
            m[i].cnt.missing);
    PER_JOB(p, m, n, "shardcast_consumers_lagging", "gauge",
            "Attached consumers at least the lag threshold behind.",
            m[i].cnt.lagging);
    PER_JOB(p, m, n, "shardcast_window_samples", "gauge",
            "Samples held in the feed windows of the job.",
            m[i].cnt.window_samples);
    PER_JOB(p, m, n, "shardcast_window_bytes", "gauge",
            "Payload bytes held in the feed windows of the job.",
            m[i].cnt.window_bytes);
    PER_JOB(p, m, n, "shardcast_shards_skipped_total", "counter",
            "Shards skipped as missing or corrupt (on_error=skip).",
            m[i].shards_skipped);
    PER_JOB(p, m, n, "shardcast_samples_skipped_total", "counter",
            "Samples skipped as bad.", m[i].samples_skipped);
    PER_JOB(p, m, n, "shardcast_seeks_total", "counter",
            "Seek feeds opened (reconnects, late ranks, laggards, padding).",
            m[i].cnt.seek.opened);
    PER_JOB(p, m, n, "shardcast_seeks_shared_total", "counter",
            "Consumers that joined a seek feed already open.",
            m[i].cnt.seek.shared);
    PER_JOB(p, m, n, "shardcast_seeks_refused_total", "counter",
            "Seeks refused at the seek limits (503, Retry-After).",
            m[i].cnt.seek.busy);
    PER_JOB(p, m, n, "shardcast_seek_replays_total", "counter",
            "Seeks that replayed the epoch from its start (shards not "
            "indexed far enough).",
            m[i].cnt.seek.replays);
    PER_JOB(p, m, n, "shardcast_lag_detaches_total", "counter",
            "Times a full window slid past a consumer that held it back.",
            m[i].cnt.seek.lag_detaches);
    PER_JOB(p, m, n, "shardcast_seeks_active", "gauge",
            "Seek feeds open now.", m[i].cnt.seek.active);
    sc_prom_family(p, "shardcast_mix_samples_sent_total", "counter",
                   "Samples of a mixed job sent to consumers, by source.");
    mix_metrics(j, p, 0);
    sc_prom_family(p, "shardcast_mix_proportion", "gauge",
                   "A mixed job's share of each source: configured (its "
                   "quota over the epoch's) and realized (its samples sent "
                   "over all sent).");
    mix_metrics(j, p, 1);
    sc_prom_family(p, "shardcast_seek_ready_seconds", "histogram",
                   "Time from opening a seek feed to its first sample.");
    for (size_t i = 0; i < n; i++)
        sc_prom_hist(p, "shardcast_seek_ready_seconds",
                     SC_PROM_LABELS({"shardcast_job", m[i].name}),
                     &sio_hist_latency, &m[i].cnt.seek.ready);

    static const char *const index_states[] = {"complete", "partial"};
    sio_index_stats ix;
    sio_index_get_stats(j->index, &ix);
    by_label(p, "shardcast_index_shards", "gauge",
             "Shards with an index, complete or being built.", "state",
             index_states,
             (const uint64_t[]){ix.complete, ix.entries - ix.complete}, 2);
    scalar(p, "shardcast_index_loaded_total", "counter",
           "Shard indexes read from state_dir or sidecars.", ix.loaded);
    scalar(p, "shardcast_index_built_total", "counter",
           "Shard indexes completed by streaming the shard.", ix.built);
    scalar(p, "shardcast_index_invalid_total", "counter",
           "Index files refused as stale or corrupt.", ix.invalid);
    static const char *const index_sources[] = {"sidecar", "state"};
    by_label(p, "shardcast_index_rejected_total", "counter",
             "Index sidecars and state_dir index files not adopted as "
             "implausible for their shard, or dropped after a read "
             "disagreed with them.", "source", index_sources,
             (const uint64_t[]){ix.rejected_sidecar, ix.rejected_state}, 2);
    /* By backend (and latency by operation): metrics.c. */
    sc_metrics_write_store(j->io, p);
    cache_metrics(j, p);

    uint64_t cold_reads = 0, cold_bytes = 0;
    sio_plan_cold_stats(&cold_reads, &cold_bytes);
    scalar(p, "shardcast_plan_cold_reads_total", "counter",
           "Samples of planned streams whose bytes were not in the page "
           "cache: read by the warm threads, not by the thread serving the "
           "stream (and its other connections).", cold_reads);
    scalar(p, "shardcast_plan_cold_read_bytes_total", "counter",
           "Bytes read by the warm threads for planned streams.",
           cold_bytes);

    static const char *const pool_events[] = {"reused", "fresh", "released"};
    sio_pool_stats ps;
    sio_pool_get_stats(&ps);
    scalar(p, "shardcast_sample_pool_idle_bytes", "gauge",
           "Sample memory idle in the pool and resident.", ps.idle_bytes);
    scalar(p, "shardcast_sample_pool_mapped_bytes", "gauge",
           "Address space of the sample pool's slabs (the peak of sample "
           "memory in use).", ps.mapped_bytes);
    by_label(p, "shardcast_sample_pool_blocks_total", "counter",
             "Sample memory blocks by what happened: reused from the pool, "
             "fresh from a slab or malloc, released (pages given back).",
             "event", pool_events,
             (const uint64_t[]){ps.reused, ps.fresh, ps.released}, 3);
    free(cons);
    free(m);
    return p->rc;
}
#undef PER_JOB

sio_code sc_jobs_limits_metrics(sc_jobs *j, sc_prom *p)
{
    static const char *const names[SC_REFUSED_COUNT] = {
        "epoch_ahead", "feeds_per_job", "feeds_per_server", "epoch_rate",
        "world"};
    uint64_t refused[SC_REFUSED_COUNT];
    for (int i = 0; i < SC_REFUSED_COUNT; i++)
        refused[i] = atomic_load(&j->refused[i]);
    scalar(p, "shardcast_feeds_open", "gauge",
           "Feeds open, live and retired, over every job.",
           atomic_load(&j->nfeeds));
    by_label(p, "shardcast_epochs_refused_total", "counter",
             "New epochs refused by a bound, by bound.", "bound", names,
             refused, SC_REFUSED_COUNT);
    return p->rc;
}
