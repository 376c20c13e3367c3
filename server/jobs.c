/*
 * jobs.c — the job registry, the feeds of the epochs in flight, the manager
 * and resolver threads (contract and lock order in jobs.h; the data
 * structures in jobs_internal.h, which status.c reads for the status JSON
 * and the job metrics).
 *
 * Threading: j->mu guards the job table, the release queue, the dead-job
 * list and the stop flag; job->mu guards a job's state, shard list, feed
 * slots, bindings, error ring and throughput ring. Counters that streams
 * bump on MHD threads are atomics.
 * Ownership: the registry holds one reference on each listed job; every
 * binding holds one on its job. The last reference puts the job on the
 * dead list, which the manager frees (closing feeds joins threads, which
 * must not happen on an HTTP thread). A slot (one epoch's feed) belongs to
 * its job; bindings point at it, and it is closed only once no binding
 * does.
 */
#include "jobs_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <openssl/evp.h>

#include "log.h"

/* Manager tick: timers (idle feeds, prefetch, throughput) need no finer
 * resolution. */
#define TICK_MS 500u
/* The refusal of a job that failed for good (422, never retried by the
 * clients): its name and why. */
#define SC_JOB_FAILED_FMT                                                  \
    "job %s failed and will not be retried: %s (not retryable; PUT the "   \
    "job again once its source is fixed)"
/* Resolution retries back off from 1 s to 60 s. */
#define RESOLVE_BACKOFF_MIN_MS 1000u
#define RESOLVE_BACKOFF_MAX_MS 60000u
/* A server that ends with feeds still closing waits this long for them. */
#define CLOSERS_WAIT_MS 5000u

/* Give the pages of freed memory back to the system. A resolution (a
 * brace pattern's names, listings) and a freed job leave many small
 * chunks free inside malloc's heaps, which glibc returns by itself only
 * from the top of a heap (a job's shard list is a few large blocks,
 * returned when freed). Manager and resolver threads only: it walks every
 * arena under its lock. */
static void heap_give_back(void)
{
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

static void res_unref(job_res *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    for (size_t i = 0; i < r->njournals; i++)
        sio_journal_close(r->journals[i].j);
    sio_shardlist_free(r->list);
    free(r->mix);
    free(r->mix_names);
    free((void *)r->mix_sent);
    free(r->mix_frames);
    free(r->mix_name_ptrs);
    sio_cache_user_destroy(r->cache);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* How long sc_jobs_destroy waits for its threads: a resolution or a feed
 * close may be stuck in object-store retries far longer. */
#define SHUTDOWN_WAIT_MS 5000u

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void deadline_in(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000u);
    ts->tv_nsec += (long)(ms % 1000u) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int fail(char *reason, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *reason, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (len) {
        va_start(ap, fmt);
        vsnprintf(reason, len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Remember an error for status; URL userinfo is masked (job->mu held). */
static void job_error(sc_job *job, const char *msg)
{
    err_entry *e = &job->errors[job->error_at];
    e->unix_ms = unix_ms();
    sc_redact_source(msg, e->msg, sizeof e->msg);
    job->error_at = (job->error_at + 1) % SC_JOB_ERRORS_MAX;
    if (job->nerrors < SC_JOB_ERRORS_MAX)
        job->nerrors++;
}

static void job_ref(sc_job *job)
{
    atomic_fetch_add(&job->refs, 1);
}

/* The last reference hands the job to the manager (closing its feeds
 * blocks, and this may run on an HTTP thread). */
void sc_job_unref(sc_job *job)
{
    if (atomic_fetch_sub(&job->refs, 1) != 1)
        return;
    sc_jobs *j = job->owner;
    pthread_mutex_lock(&j->mu);
    job->dead_next = j->dead;
    j->dead = job;
    pthread_cond_signal(&j->work);
    pthread_mutex_unlock(&j->mu);
}

/* Add a feed's seek counters to a sum. */
void sc_seek_add(sio_feed_seek_stats *a, const sio_feed_seek_stats *b)
{
    a->opened += b->opened;
    a->shared += b->shared;
    a->busy += b->busy;
    a->replays += b->replays;
    a->lag_detaches += b->lag_detaches;
    a->active += b->active;
    a->replaying += b->replaying;
    a->window_bytes += b->window_bytes;
    a->ready_us += b->ready_us;
    a->ready_count += b->ready_count;
    sio_hist_snap_add(&a->ready, &b->ready);
}

static void stage_add(sio_plan_stage_stats *a, const sio_plan_stage_stats *b,
                      int live)
{
    if (!b->staging)
        return;
    a->staging = 1;
    a->budget = b->budget;
    if (live) { /* what a plan holds now */
        a->bytes += b->bytes;
        a->held += b->held;
        a->blocked |= b->blocked;
        a->spare = b->spare;
    }
    if (b->peak > a->peak)
        a->peak = b->peak;
    if (b->max_shard > a->max_shard)
        a->max_shard = b->max_shard;
    a->staged += b->staged;
    a->fetched_bytes += b->fetched_bytes;
    a->restages += b->restages;
    a->ranged += b->ranged;
    a->revived += b->revived;
    a->released += b->released;
    a->detaches += b->detaches;
    a->refused += b->refused;
    a->deferred += b->deferred;
    a->evicted += b->evicted;
    a->windows_moved += b->windows_moved;
    a->windows_continued += b->windows_continued;
    a->thinned_bytes += b->thinned_bytes;
    a->thin_passes += b->thin_passes;
}

void sc_job_stage(sc_job *job, sio_plan_stage_stats *out)
{
    *out = job->stage_done;
    for (fslot *s = job->slots; s; s = s->next) {
        if (!s->plan)
            continue;
        sio_plan_stage_stats st;
        sio_plan_get_stage_stats(s->plan, &st);
        stage_add(out, &st, 1);
    }
}

/* The slot lets go of its plan (job->mu held, or the slot no longer
 * shared): a growing one stops where it is, its readers fail at its end
 * with reason and resume from the feed. */
static void slot_drop_plan(fslot *s, const char *reason)
{
    if (!s->plan)
        return;
    if (s->kick_job) { /* its staging's counters stay the job's */
        sio_plan_stage_stats st;
        sio_plan_get_stage_stats(s->plan, &st);
        stage_add(&s->kick_job->stage_done, &st, 0);
    }
    /* (both nothing for a plan built whole or grown to its end) */
    sio_plan_set_kick(s->plan, NULL, NULL);
    sio_plan_set_restage(s->plan, NULL, NULL);
    sio_plan_abandon(s->plan, reason);
    sio_plan_unref(s->plan); /* its streams hold their references */
    s->plan = NULL;
}

static void slot_close(sc_job *job, fslot *s)
{
    pthread_mutex_lock(&job->mu);
    job->nfeeds--;
    pthread_mutex_unlock(&job->mu);
    atomic_fetch_sub(&job->owner->nfeeds, 1);
    if (s->feed) {
        sio_feed_stats st;
        sio_feed_get_stats(s->feed, &st, NULL, 0, NULL);
        sio_feed_close(s->feed);
        pthread_mutex_lock(&job->mu);
        if (s->served) { /* read ahead and never streamed: not counted */
            job->shards_skipped_closed +=
                slot_shards_skipped(s, st.epoch.shards_skipped);
            job->samples_skipped_closed +=
                slot_samples_skipped(s, st.epoch.samples_skipped);
        }
        st.seek.active = st.seek.replaying = 0;
        st.seek.window_bytes = 0;
        sc_seek_add(&job->seeks_closed, &st.seek);
        pthread_mutex_unlock(&job->mu);
    }
    slot_drop_plan(s, "the epoch was closed");
    free(s);
}

/* Manager thread only, no lock held. */
static void job_free(sc_job *job)
{
    fslot *s = job->slots;
    job->slots = NULL;
    while (s) {
        fslot *n = s->next;
        slot_close(job, s);
        s = n;
    }
    res_unref(job->res);
    sc_jobspec_free(&job->spec);
    pthread_mutex_destroy(&job->mu);
    free(job);
}

static sc_job *job_new(sc_jobs *j, const sc_jobspec *spec)
{
    sc_job *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    if (sc_jobspec_copy(&job->spec, spec) != 0) {
        free(job);
        return NULL;
    }
    job->res = calloc(1, sizeof *job->res);
    if (!job->res) {
        sc_jobspec_free(&job->spec);
        free(job);
        return NULL;
    }
    if (j->cache && spec->cache &&
        sio_cache_user_create(j->cache, &job->res->cache) != SIO_OK) {
        free(job->res);
        sc_jobspec_free(&job->spec);
        free(job);
        return NULL;
    }
    atomic_init(&job->res->refs, 1);
    pthread_mutex_init(&job->res->mu, NULL);
    job->owner = j;
    atomic_init(&job->refs, 1);
    pthread_mutex_init(&job->mu, NULL);
    job->state = JOB_RESOLVING;
    snprintf(job->reason, sizeof job->reason, "resolving the source");
    job->backoff_ms = RESOLVE_BACKOFF_MIN_MS;
    return job;
}

/* A job by name (j->mu held). */
static size_t find_job(sc_jobs *j, const char *name)
{
    for (size_t i = 0; i < j->njobs; i++)
        if (strcmp(j->jobs[i]->spec.name, name) == 0)
            return i;
    return SIZE_MAX;
}

sc_job *sc_jobs_get_job(sc_jobs *j, const char *name)
{
    sc_job *job = NULL;
    pthread_mutex_lock(&j->mu);
    size_t i = find_job(j, name);
    if (i != SIZE_MAX) {
        job = j->jobs[i];
        job_ref(job);
    }
    pthread_mutex_unlock(&j->mu);
    return job;
}

/* Take a job out of service: cut its streams, retire its feeds. The
 * caller drops the registry's reference afterwards. */
static void job_remove(sc_job *job, const char *why)
{
    pthread_mutex_lock(&job->mu);
    job->removed = 1;
    for (sc_binding *b = job->bindings; b; b = b->next)
        sc_stream_cut(b->s, why);
    for (fslot *s = job->slots; s; s = s->next)
        s->retired = 1;
    pthread_mutex_unlock(&job->mu);
}

int sc_jobs_exists(void *jobs, const char *name)
{
    sc_jobs *j = jobs;
    pthread_mutex_lock(&j->mu);
    int found = find_job(j, name) != SIZE_MAX;
    pthread_mutex_unlock(&j->mu);
    return found;
}

unsigned sc_jobs_put(sc_jobs *j, const sc_jobspec *spec, char *reason,
                     size_t reason_len)
{
    sc_job *old = NULL, *job;
    unsigned status;
    uint64_t shards, held = 0;
    char src[256];

    if (j->cfg->replicas > 1 && (spec->sources || spec->epoch_size)) {
        fail(reason, reason_len, SC_MIX_REPLICAS_REASON, j->cfg->replicas);
        return 400;
    }
    /* What no resolution could change is refused now, before anything is
     * allocated for the job. */
    if (sc_jobspec_check(spec, j->cfg, &shards, reason, reason_len) != 0)
        return 422;
    job = job_new(j, spec);
    if (!job) {
        fail(reason, reason_len, "out of memory");
        return 503;
    }
    job->shards = shards;
    pthread_mutex_lock(&j->mu);
    size_t i = find_job(j, spec->name);
    if (i != SIZE_MAX && sc_jobspec_equal(&j->jobs[i]->spec, spec)) {
        /* The same spec again re-resolves a job that failed for good
         * (its source may be fixed now); any other stays as it is. */
        sc_job *cur = j->jobs[i];
        pthread_mutex_lock(&cur->mu);
        int failed = cur->permanent;
        pthread_mutex_unlock(&cur->mu);
        if (!failed) {
            pthread_mutex_unlock(&j->mu);
            job_free(job); /* never shared: no feed, nothing to join */
            fail(reason, reason_len, "unchanged");
            return 200;
        }
    }
    if (i == SIZE_MAX && j->njobs >= j->cfg->max_jobs) {
        pthread_mutex_unlock(&j->mu);
        job_free(job);
        fail(reason, reason_len, "job limit reached (--max-jobs %u)",
             j->cfg->max_jobs);
        return 409;
    }
    for (size_t k = 0; k < j->njobs; k++)
        if (k != i)
            held += j->jobs[k]->shards;
    if (held + shards > j->cfg->max_shards) {
        pthread_mutex_unlock(&j->mu);
        job_free(job);
        fail(reason, reason_len,
             "the server's shards are spent: the job names %" PRIu64
             ", the other jobs hold %" PRIu64 " of --max-shards %" PRIu64,
             shards, held, j->cfg->max_shards);
        return 409;
    }
    if (i != SIZE_MAX) {
        old = j->jobs[i];
        j->jobs[i] = job;
        status = 200;
    } else {
        j->jobs[j->njobs++] = job;
        status = 201;
    }
    pthread_cond_signal(&j->resolve);
    pthread_mutex_unlock(&j->mu);
    if (old) {
        job_remove(old, "job redefined");
        sc_job_unref(old);
    }
    sc_redact_source(spec->source, src, sizeof src);
    SC_LOG(SIO_LOG_INFO, "event=job_%s job=%s source=\"%s\"",
           status == 201 ? "added" : "replaced", spec->name, src);
    fail(reason, reason_len, "%s", status == 201 ? "created" : "replaced");
    return status;
}

unsigned sc_jobs_delete(sc_jobs *j, const char *name, char *reason,
                        size_t reason_len)
{
    sc_job *job = NULL;
    pthread_mutex_lock(&j->mu);
    size_t i = find_job(j, name);
    if (i != SIZE_MAX) {
        job = j->jobs[i];
        j->jobs[i] = j->jobs[--j->njobs];
        /* Jobs held back by the shards the other jobs hold: try them now,
         * not after their backoff. */
        for (size_t k = 0; k < j->njobs; k++) {
            sc_job *o = j->jobs[k];
            pthread_mutex_lock(&o->mu);
            if (o->held_back && o->state != JOB_READY) {
                o->next_resolve_ms = 0;
                o->backoff_ms = RESOLVE_BACKOFF_MIN_MS;
            }
            pthread_mutex_unlock(&o->mu);
        }
        pthread_cond_signal(&j->resolve);
    }
    pthread_mutex_unlock(&j->mu);
    if (!job) {
        fail(reason, reason_len, "unknown job");
        return 404;
    }
    job_remove(job, "job deleted");
    sc_job_unref(job);
    SC_LOG(SIO_LOG_INFO, "event=job_deleted job=%s", name);
    return 204;
}

/* Resolver ----------------------------------------------------------- */

/* Set err to code and a message; returns code. */
static sio_code jerr(sio_error *err, sio_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sio_code jerr(sio_error *err, sio_code code, const char *fmt, ...)
{
    va_list ap;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

/* A mixed job's sources while they are resolved. */
typedef struct job_mix {
    sio_mix_source *src;
    uint32_t n;
    char (*names)[SC_MIX_NAME_MAX + 1];
    _Atomic uint64_t *sent;
    sio_frames_source *frames;
    const char **name_ptrs;
} job_mix;

static void job_mix_free(job_mix *m)
{
    free(m->src);
    free(m->names);
    free((void *)m->sent);
    free(m->frames);
    free(m->name_ptrs);
    memset(m, 0, sizeof *m);
}

/* Attempts at indexing a shard for a count before a transient failure
 * (the store's) is taken as where the shard ends, as an epoch's reader
 * takes it after its own retries; the pause doubles from the first. */
#define COUNT_ATTEMPTS 3
#define COUNT_RETRY_MS 250u

/* Good samples of shards [first, first + count) of list, indexing those
 * not indexed yet (a repeat quota needs the count before the epoch).
 * Under on_error=skip a shard that cannot be read to its end counts the
 * good samples before where it failed: where an epoch's reader finds it
 * ends (sio_index_build_to's reached), so the quota is what the epoch's
 * passes over the source deliver; under on_error=fail the job fails. */
static sio_code count_part(sc_jobs *j, sc_job *job, const sio_shardlist *list,
                           uint32_t first, uint32_t count, uint64_t *n,
                           sio_error *err)
{
    sio_shard_limits lim = {0};
    sio_logger lg = {sc_log_sio, NULL, sc_log_level()};
    int skip = job->spec.on_error != SIO_ON_ERROR_FAIL;
    uint64_t total = 0;
    lim.sample_max = sc_config_sample_max(j->cfg);
    lim.member_max = sc_config_field_max(j->cfg);
    for (uint32_t k = 0; k < count; k++) {
        uint32_t idx = first + k;
        const char *u = sio_shardlist_url(list, idx);
        sio_index_entry *e = sio_index_get(j->index, j->io, u,
                                           sio_shardlist_size(list, idx));
        sio_index_info info;
        if (!e)
            return jerr(err, SIO_ERR_NOMEM, "out of memory");
        sio_index_vet(e, j->io, NULL, &lim); /* the count relies on it */
        sio_index_get_info(e, &info);
        if (!info.complete) {
            pthread_mutex_lock(&job->mu);
            snprintf(job->reason, sizeof job->reason,
                     "indexing a source with a repeat quota (%u of %u shards)",
                     k, count);
            pthread_mutex_unlock(&job->mu);
        }
        uint64_t reached = 0;
        sio_code rc = SIO_OK;
        for (unsigned a = 0; !info.complete && a < COUNT_ATTEMPTS; a++) {
            if (a > 0) {
                unsigned ms = COUNT_RETRY_MS << (a - 1);
                struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
                nanosleep(&ts, NULL);
            }
            rc = sio_index_build_to(j->io, u, idx, &lim, e, NULL, &lg,
                                    &reached, err);
            sio_index_get_info(e, &info);
            if (rc != SIO_ERR_IO && rc != SIO_ERR_RETRY)
                break;
        }
        if (rc == SIO_OK && info.complete) {
            total += info.good;
            continue;
        }
        if (rc == SIO_OK)
            rc = jerr(err, SIO_ERR_IO, "shard %" PRIu32 " has no end", idx);
        if (!skip || rc == SIO_ERR_NOMEM || rc == SIO_ERR_CANCELED)
            return rc;
        uint64_t good = 0, bad = 0;
        char shown[512], why[sizeof err->msg];
        sio_index_tally(e, reached, &good, &bad);
        total += good;
        sc_redact_source(u, shown, sizeof shown);
        sc_redact_source(err->msg, why, sizeof why);
        SC_LOG(SIO_LOG_WARN,
               "event=count_shard_cut job=%s url=%s groups=%" PRIu64
               " good=%" PRIu64 " reason=\"%s\" what=\"a repeat quota counts "
               "the samples before where the shard fails (on_error=skip)\"",
               job->spec.name, shown, reached, good, why);
        err->code = SIO_OK;
        err->msg[0] = '\0';
    }
    *n = total;
    return SIO_OK;
}

/* Resolve a job's source, or each of its sources into one list with the
 * quotas of a mixed epoch (an epoch_size alone makes one source), of at
 * most max shards (max >= 1) in all: patterns are counted before they are
 * expanded and listings stop there. */
static sio_code resolve_job(sc_jobs *j, sc_job *job, size_t max,
                            sio_shardlist **out, job_mix *mix,
                            sio_error *err)
{
    const sc_jobspec *sp = &job->spec;
    sc_mixsrc *ms = NULL;
    size_t n = 0;
    sio_shardlist **parts = NULL;
    sio_mix_spec *specs = NULL;
    uint64_t *counts = NULL, *quotas = NULL;
    char msg[300];
    sio_code rc = SIO_OK;

    *out = NULL;
    if (!sp->sources && !sp->epoch_size)
        return sio_shardlist_resolve_max(j->io, sp->source, 0, max, out,
                                         err);
    if (sp->sources) {
        if (sc_mix_parse(sp->sources, &ms, &n, msg, sizeof msg) != 0)
            return jerr(err, SIO_ERR_INVALID, "%s", msg);
    } else {
        /* epoch_size over one source: a mix of one, by weight */
        ms = calloc(1, sizeof *ms);
        if (!ms || !(ms->source = strdup(sp->source))) {
            free(ms);
            return jerr(err, SIO_ERR_NOMEM, "out of memory");
        }
        snprintf(ms->name, sizeof ms->name, "%.*s", (int)SC_MIX_NAME_MAX,
                 sp->name);
        ms->kind = SIO_MIX_WEIGHT;
        ms->value = 1;
        n = 1;
    }
    parts = calloc(n, sizeof *parts);
    specs = calloc(n, sizeof *specs);
    counts = calloc(n, sizeof *counts);
    quotas = calloc(n, sizeof *quotas);
    mix->src = calloc(n, sizeof *mix->src);
    mix->names = calloc(n, sizeof *mix->names);
    mix->sent = calloc(n, sizeof *mix->sent);
    if (!parts || !specs || !counts || !quotas || !mix->src || !mix->names ||
        !mix->sent) {
        rc = jerr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    mix->n = (uint32_t)n;
    uint64_t first = 0;
    for (size_t i = 0; i < n; i++) {
        if (first >= max)
            rc = jerr(err, SIO_ERR_LIMIT, "too many shards (max %zu)", max);
        else
            rc = sio_shardlist_resolve_max(j->io, ms[i].source, 0,
                                           max - (size_t)first, &parts[i],
                                           err);
        if (rc == SIO_OK && sio_shardlist_count(parts[i]) == 0)
            rc = jerr(err, SIO_ERR_NOTFOUND, "no shards");
        if (rc) {
            char m2[sizeof err->msg];
            snprintf(m2, sizeof m2, "source \"%s\": %s", ms[i].name,
                     err->msg);
            snprintf(err->msg, sizeof err->msg, "%s", m2);
            goto out;
        }
        mix->src[i].first = (uint32_t)first;
        mix->src[i].count = (uint32_t)sio_shardlist_count(parts[i]);
        mix->src[i].resample = ms[i].resample;
        first += mix->src[i].count; /* <= max <= SIO_SHARDS_MAX */
        snprintf(mix->names[i], sizeof mix->names[i], "%s", ms[i].name);
        specs[i].kind = (sio_mix_kind)ms[i].kind;
        specs[i].value = ms[i].value;
        specs[i].choose = ms[i].choose;
        counts[i] = UINT64_MAX;
    }
    rc = sio_shardlist_concat((const sio_shardlist *const *)parts, n, out,
                              err);
    if (rc)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (specs[i].kind == SIO_MIX_REPEAT) {
            rc = count_part(j, job, *out, mix->src[i].first,
                            mix->src[i].count, &counts[i], err);
            if (rc)
                goto out;
        }
    rc = sio_mix_quotas(specs, n, sp->epoch_size, counts, quotas, err);
    if (rc)
        goto out;
    for (size_t i = 0; i < n; i++)
        mix->src[i].quota = quotas[i];
    if (sp->sources) {
        /* provenance: each sample's source on the wire */
        mix->frames = calloc(n, sizeof *mix->frames);
        mix->name_ptrs = calloc(n, sizeof *mix->name_ptrs);
        if (!mix->frames || !mix->name_ptrs) {
            rc = jerr(err, SIO_ERR_NOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            mix->name_ptrs[i] = mix->names[i];
            mix->frames[i].name = mix->names[i];
            mix->frames[i].first = mix->src[i].first;
            mix->frames[i].count = mix->src[i].count;
        }
    }
out:
    for (size_t i = 0; parts && i < n; i++)
        sio_shardlist_free(parts[i]);
    free(parts);
    free(specs);
    free(counts);
    free(quotas);
    sc_mix_free(ms, n);
    if (rc) {
        sio_shardlist_free(*out);
        *out = NULL;
        job_mix_free(mix);
    }
    return rc;
}

/* Hex of the first n/2 bytes of the SHA-256 of the pieces given (each
 * followed by a NUL when sep). */
static void sha_hex(const char *const *piece, size_t npieces, int sep,
                    char *out, size_t n)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1;
    for (size_t i = 0; ok && i < npieces; i++)
        ok = EVP_DigestUpdate(c, piece[i], strlen(piece[i]) + (sep ? 1 : 0)) ==
             1;
    ok = ok && EVP_DigestFinal_ex(c, md, &mdlen) == 1;
    EVP_MD_CTX_free(c);
    if (!ok) /* never seen: the digest is a software one */
        memset(md, 0, sizeof md), mdlen = 32;
    for (size_t i = 0; i < n / 2 && i < mdlen; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* The order fields of a resolved job (job->mu held, list set), and its
 * fingerprint over their canonical text. */
static void job_identity(sc_jobs *j, const sc_job *job, sc_job_identity *id)
{
    const sc_jobspec *sp = &job->spec;
    const job_res *r = job->res;
    memset(id, 0, sizeof *id);
    id->contract = r->nmix ? 2 : 1;
    memcpy(id->shards, r->shards_hash, sizeof id->shards);
    id->nshards = sio_shardlist_count(r->list);
    id->seed = sp->seed;
    id->interleave = sp->interleave;
    id->shuffle_buffer = sp->shuffle_buffer;
    id->buffer_bytes = sp->buffer_bytes;
    id->partition = sio_partition_name((sio_partition)sp->partition);
    id->on_error = sp->on_error == SIO_ON_ERROR_FAIL ? "fail" : "skip";
    memcpy(id->mix, r->mix_hash, sizeof id->mix);
    id->epoch_size = sp->epoch_size;
    id->sample_max = sc_config_sample_max(j->cfg);
    id->field_max = sc_config_field_max(j->cfg);
    id->replicas = j->cfg->replicas > 1 ? j->cfg->replicas : 1;
    char text[1024];
    snprintf(
        text, sizeof text,
        "shardcast-order\ncontract=%d\nshards=%s\nnshards=%" PRIu64
        "\nseed=%" PRIu64 "\ninterleave=%" PRIu32 "\nshuffle_buffer=%" PRIu32
        "\nbuffer_bytes=%" PRIu64 "\npartition=%s\non_error=%s\nmix=%s\n"
        "epoch_size=%" PRIu64 "\nsample_max=%" PRIu64 "\nfield_max=%" PRIu64
        "\nreplicas=%" PRIu32 "\n",
        id->contract, id->shards, id->nshards, id->seed, id->interleave,
        id->shuffle_buffer, id->buffer_bytes, id->partition, id->on_error,
        id->mix, id->epoch_size, id->sample_max, id->field_max, id->replicas);
    const char *one[1] = {text};
    sha_hex(one, 1, 0, id->fingerprint, SIO_FINGERPRINT_LEN);
}

/* Hash the list and the mix of a job that just resolved (job->mu held),
 * and set its fingerprint. */
static void job_set_identity(sc_jobs *j, sc_job *job)
{
    job_res *r = job->res;
    const sc_jobspec *sp = &job->spec;
    size_t ns = sio_shardlist_count(r->list);
    const char **urls = malloc((ns ? ns : 1) * sizeof *urls);
    if (urls) {
        for (size_t i = 0; i < ns; i++)
            urls[i] = sio_shardlist_url(r->list, i);
        sha_hex(urls, ns, 1, r->shards_hash, 16);
        free(urls);
    } else {
        /* out of memory: a hash no list has, so the set disagrees loudly */
        snprintf(r->shards_hash, sizeof r->shards_hash, "unhashed");
    }
    if (sp->sources || sp->epoch_size) {
        char head[64];
        snprintf(head, sizeof head, "epoch_size=%" PRIu64 "\n",
                 sp->epoch_size);
        const char *parts[2] = {head, sp->sources ? sp->sources : ""};
        sha_hex(parts, 2, 0, r->mix_hash, 16);
    } else {
        snprintf(r->mix_hash, sizeof r->mix_hash, "none");
    }
    sc_job_identity id;
    job_identity(j, job, &id);
    memcpy(r->fingerprint, id.fingerprint, sizeof r->fingerprint);
}

unsigned sc_jobs_identity(sc_jobs *j, const char *name, sc_job_identity *out,
                          char *reason, size_t reason_len)
{
    unsigned status = 200;
    sc_job *job = sc_jobs_get_job(j, name);
    if (!job) {
        fail(reason, reason_len, "unknown job");
        return 404;
    }
    pthread_mutex_lock(&job->mu);
    if (job->removed) {
        fail(reason, reason_len, "unknown job");
        status = 404;
    } else if (job->state != JOB_READY && job->permanent) {
        fail(reason, reason_len, SC_JOB_FAILED_FMT, job->spec.name,
             job->reason);
        status = 422;
    } else if (job->state != JOB_READY) {
        fail(reason, reason_len, "job %s is not ready: %s", job->spec.name,
             job->reason[0] ? job->reason : "resolving its source");
        status = 503;
    } else {
        job_identity(j, job, out);
    }
    pthread_mutex_unlock(&job->mu);
    sc_job_unref(job);
    return status;
}

json_t *sc_jobs_fingerprints(sc_jobs *j)
{
    json_t *o = json_object();
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; o && i < j->njobs; i++) {
        sc_job *job = j->jobs[i];
        pthread_mutex_lock(&job->mu);
        if (job->state == JOB_READY && !job->removed)
            json_object_set_new(o, job->spec.name,
                                json_string(job->res->fingerprint));
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return o ? o : json_object();
}

/* Failures another attempt cannot change: the source is wrong (missing,
 * empty, refused by the store, over a bound, malformed), not the store
 * unreachable or busy. The job stays failed, its streams answer 422, and
 * only a PUT of the job (the same spec too) resolves it again. */
static int resolve_permanent(sio_code rc)
{
    return rc == SIO_ERR_NOTFOUND || rc == SIO_ERR_INVALID ||
           rc == SIO_ERR_LIMIT || rc == SIO_ERR_UNSUPPORTED ||
           rc == SIO_ERR_AUTH || rc == SIO_ERR_FORMAT;
}

/* Shards of --max-shards the jobs other than job leave (j->mu held). */
static uint64_t shards_left(sc_jobs *j, const sc_job *job)
{
    uint64_t held = 0;
    for (size_t k = 0; k < j->njobs; k++)
        if (j->jobs[k] != job)
            held += j->jobs[k]->shards;
    return held < j->cfg->max_shards ? j->cfg->max_shards - held : 0;
}

static void *resolver_main(void *arg)
{
    sc_jobs *j = arg;
    pthread_mutex_lock(&j->mu);
    while (!j->stop) {
        uint64_t now = sio_now_ms(), next = now + 5000u;
        sc_job *due = NULL;
        for (size_t i = 0; i < j->njobs; i++) {
            sc_job *job = j->jobs[i];
            pthread_mutex_lock(&job->mu);
            if (job->state != JOB_READY && !job->permanent) {
                if (job->next_resolve_ms <= now && !due) {
                    due = job;
                    job_ref(job);
                } else if (job->next_resolve_ms < next) {
                    next = job->next_resolve_ms;
                }
            }
            pthread_mutex_unlock(&job->mu);
        }
        if (!due) {
            struct timespec ts;
            deadline_in(&ts, next > now ? next - now : 1);
            pthread_cond_timedwait(&j->resolve, &j->mu, &ts);
            continue;
        }
        /* The job's bound: its own, and what the other jobs leave of the
         * server's (a listing counts only now). */
        uint64_t left = shards_left(j, due);
        /* a bound set by the other jobs may lift when they go: not
         * permanent */
        int others = left < j->cfg->max_job_shards;
        size_t max = others ? (size_t)left : j->cfg->max_job_shards;
        pthread_mutex_unlock(&j->mu);

        /* Listing a bucket may take a while: no lock is held. spec.source
         * is immutable for the job's life. */
        sio_shardlist *list = NULL;
        sio_error err = {SIO_OK, ""};
        char src[256], msg[600];
        job_mix mix;
        memset(&mix, 0, sizeof mix);
        sio_code rc = max ? resolve_job(j, due, max, &list, &mix, &err)
                          : jerr(&err, SIO_ERR_LIMIT,
                                 "the other jobs hold all of --max-shards");
        if (rc == SIO_OK && sio_shardlist_count(list) == 0) {
            rc = SIO_ERR_NOTFOUND;
            snprintf(err.msg, sizeof err.msg, "the source has no shards");
        }
        if (rc == SIO_OK) {
            /* Held now; other jobs may have taken shards meanwhile. */
            pthread_mutex_lock(&j->mu);
            left = shards_left(j, due);
            if (sio_shardlist_count(list) > left) {
                others = 1;
                rc = jerr(&err, SIO_ERR_LIMIT,
                          "the source has %zu shards, the other jobs leave "
                          "%" PRIu64 " of --max-shards %" PRIu64,
                          sio_shardlist_count(list), left,
                          j->cfg->max_shards);
            } else {
                due->shards = sio_shardlist_count(list);
            }
            pthread_mutex_unlock(&j->mu);
        }
        if (rc == SIO_ERR_LIMIT) {
            /* (what else a source can exceed, its specs' length and
             * counts, its PUT refused) */
            size_t l = strlen(err.msg);
            if (others)
                snprintf(err.msg + l, sizeof err.msg - l,
                         " (--max-shards %" PRIu64 ": the other jobs hold "
                         "the rest; retried)", j->cfg->max_shards);
            else
                snprintf(err.msg + l, sizeof err.msg - l,
                         " (--max-job-shards %" PRIu32 ")",
                         j->cfg->max_job_shards);
        }
        sc_redact_source(due->spec.source, src, sizeof src);
        pthread_mutex_lock(&due->mu);
        due->attempts++;
        if (rc == SIO_OK) {
            due->res->list = list;
            list = NULL;
            due->res->mix = mix.src;
            due->res->nmix = mix.n;
            due->res->mix_names = mix.names;
            due->res->mix_sent = mix.sent;
            due->res->mix_frames = mix.frames;
            due->res->mix_name_ptrs = mix.name_ptrs;
            memset(&mix, 0, sizeof mix);
            job_set_identity(j, due);
            due->state = JOB_READY;
            due->reason[0] = '\0';
            SC_LOG(SIO_LOG_INFO,
                   "event=job_ready job=%s shards=%zu fingerprint=%s "
                   "replica=%" PRIu32 " replicas=%" PRIu32,
                   due->spec.name, sio_shardlist_count(due->res->list),
                   due->res->fingerprint, j->cfg->replica,
                   j->cfg->replicas > 1 ? j->cfg->replicas : 1);
        } else {
            due->state = JOB_FAILED;
            due->held_back = rc == SIO_ERR_LIMIT && others;
            due->permanent = resolve_permanent(rc) && !due->held_back;
            snprintf(msg, sizeof msg, "cannot resolve the source: %s",
                     err.msg[0] ? err.msg : sio_strerror(rc));
            sc_redact_source(msg, due->reason, sizeof due->reason);
            job_error(due, msg);
            due->next_resolve_ms =
                due->permanent ? UINT64_MAX : sio_now_ms() + due->backoff_ms;
            due->backoff_ms = due->backoff_ms * 2 > RESOLVE_BACKOFF_MAX_MS
                                   ? RESOLVE_BACKOFF_MAX_MS
                                   : due->backoff_ms * 2;
            char q[REASON_MAX + 16];
            SC_LOG(SIO_LOG_WARN,
                   "event=job_source_failed job=%s source=\"%s\" code=%d "
                   "permanent=%d reason=%s retry_ms=%" PRIu64,
                   due->spec.name, src, (int)rc, due->permanent,
                   sc_log_quote(q, sizeof q, due->reason, strlen(due->reason)),
                   due->permanent ? 0 : due->next_resolve_ms - sio_now_ms());
        }
        pthread_mutex_unlock(&due->mu);
        sio_shardlist_free(list);
        job_mix_free(&mix);
        sc_job_unref(due);
        if (rc == SIO_OK)
            heap_give_back(); /* what the listing took and left */
        pthread_mutex_lock(&j->mu);
        pthread_cond_broadcast(&j->resolved);
    }
    j->running--;
    pthread_cond_broadcast(&j->drained);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

void sc_jobs_wait_resolved(sc_jobs *j, uint32_t timeout_ms)
{
    struct timespec ts;
    deadline_in(&ts, timeout_ms);
    pthread_mutex_lock(&j->mu);
    for (;;) {
        int pending = 0;
        for (size_t i = 0; i < j->njobs; i++) {
            pthread_mutex_lock(&j->jobs[i]->mu);
            pending |= j->jobs[i]->attempts == 0;
            pthread_mutex_unlock(&j->jobs[i]->mu);
        }
        if (!pending ||
            pthread_cond_timedwait(&j->resolved, &j->mu, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(&j->mu);
}

int sc_jobs_ready(sc_jobs *j, char *reason, size_t reason_len)
{
    int ready = 1;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->njobs && ready; i++) {
        sc_job *job = j->jobs[i];
        pthread_mutex_lock(&job->mu);
        if (job->state != JOB_READY) {
            ready = 0;
            fail(reason, reason_len, "job %s: %s", job->spec.name,
                 job->reason);
        }
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return ready;
}

/* Feeds --------------------------------------------------------------- */

/* A feed family is gone (maybe on a closer thread): its job may go. */
static void slot_released(void *ud)
{
    res_hold *h = ud;
    pthread_mutex_lock(&h->res->mu);
    for (size_t i = 0; i < h->res->njournals; i++)
        if (h->res->journals[i].j == h->j)
            h->res->journals[i].users--;
    pthread_mutex_unlock(&h->res->mu);
    res_unref(h->res);
    free(h);
}

/* Where (job, epoch, part)'s journal lives under state_dir (the directory
 * is made); 0 without a state_dir. With a state_dir it lives in
 * state_dir/journal/<job>-<hash of what fixes the order>/<epoch>, so a
 * redefined job starts afresh. */
static int journal_path(sc_jobs *j, const sc_job *job, uint64_t epoch,
                        uint32_t part, char *path, size_t cap)
{
    if (!j->cfg->state_dir)
        return 0;
    const sc_jobspec *sp = &job->spec;
    char key[1200];
    uint64_t h = 0xcbf29ce484222325ull;
    snprintf(key, sizeof key, "%s|%" PRIu64 "|%u|%u|%" PRIu64 "|%d|%u|%u",
             sp->source, sp->seed, sp->interleave, sp->shuffle_buffer,
             sp->buffer_bytes, sp->on_error, part, j->cfg->replicas);
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    snprintf(path, cap, "%s/journal/%s-%016" PRIx64, j->cfg->state_dir,
             sp->name, h);
    mkdir(path, 0755);
    size_t l = strlen(path);
    snprintf(path + l, cap - l, "/%" PRIu64, epoch);
    return 1;
}

/* Open (job, epoch, part)'s journal: its file under state_dir (*fresh: the
 * file was not there yet), or one in memory without a state_dir (fresh).
 * Disk I/O: on a planner thread, or the manager's prefetch. */
static sio_code journal_open_file(sc_jobs *j, const sc_job *job,
                                  uint64_t epoch, uint32_t part, int *fresh,
                                  sio_journal **out, sio_error *err)
{
    char path[4096], *pp = NULL;
    *fresh = 1;
    if (journal_path(j, job, epoch, part, path, sizeof path)) {
        struct stat st;
        pp = path;
        *fresh = stat(path, &st) != 0;
    }
    const sio_shardlist *l = job->res->list;
    return sio_journal_open(pp, l ? sio_shardlist_count(l) : 0, out, err);
}

/* The table's entry of (epoch, part), or -1 (r->mu held). */
static ssize_t journal_find(job_res *r, uint64_t epoch, uint32_t part)
{
    for (size_t i = 0; i < r->njournals; i++)
        if (r->journals[i].epoch == epoch && r->journals[i].part == part)
            return (ssize_t)i;
    return -1;
}

/* Room for one more journal (r->mu held): the least recently used one no
 * feed reads is closed (it is read back from its file when needed again).
 * 0 when every one is in use. */
static int journal_room(job_res *r)
{
    if (r->njournals < JOURNALS_MAX)
        return 1;
    size_t victim = SIZE_MAX;
    for (size_t i = 0; i < r->njournals; i++)
        if (r->journals[i].users == 0 &&
            (victim == SIZE_MAX ||
             r->journals[i].used < r->journals[victim].used))
            victim = i;
    if (victim == SIZE_MAX)
        return 0;
    sio_journal_close(r->journals[victim].j);
    r->journals[victim] = r->journals[--r->njournals];
    return 1;
}

/* Add an open journal to the table (r->mu held, room made). */
static void journal_add_entry(job_res *r, uint64_t epoch, uint32_t part,
                              sio_journal *jr, unsigned users, int fresh)
{
    r->journals[r->njournals].epoch = epoch;
    r->journals[r->njournals].part = part;
    r->journals[r->njournals].used = ++r->clock;
    r->journals[r->njournals].users = users;
    r->journals[r->njournals].fresh = fresh;
    r->journals[r->njournals++].j = jr;
}

/* The journal of (job, epoch), held for one more feed family: open (or
 * loaded ahead by a planner thread), or opened now. A journal no feed
 * reads may be closed to make room (without a state_dir its decisions are
 * then forgotten, see slot->unproven). */
static sio_journal *job_journal(sc_jobs *j, sc_job *job, uint64_t epoch,
                                uint32_t part, int *fresh, sio_error *err)
{
    job_res *r = job->res;
    sio_journal *jr = NULL;
    *fresh = 0;
    pthread_mutex_lock(&r->mu);
    ssize_t at = journal_find(r, epoch, part);
    if (at >= 0) {
        r->journals[at].used = ++r->clock;
        r->journals[at].users++;
        *fresh = r->journals[at].fresh;
        r->journals[at].fresh = 0;
        jr = r->journals[at].j;
        goto out;
    }
    if (!journal_room(r)) {
        snprintf(err->msg, sizeof err->msg,
                 "more than %u epochs of one job in use", JOURNALS_MAX);
        goto out;
    }
    if (journal_open_file(j, job, epoch, part, fresh, &jr, err) != SIO_OK) {
        jr = NULL;
        goto out;
    }
    journal_add_entry(r, epoch, part, jr, 1, 0);
out:
    pthread_mutex_unlock(&r->mu);
    return jr;
}

/* A planner thread reads (job, epoch, part)'s journal from state_dir with
 * no lock held, and adds it to the table unused: the new epoch's first
 * stream, which waited, then finds it there (job_journal). A failure is
 * kept for the streams that waited. */
static void journal_preload(sc_jobs *j, sc_job *job, uint64_t epoch,
                            uint32_t part, int stopping)
{
    job_res *r = job->res;
    sio_journal *jr = NULL, *drop = NULL;
    sio_error err = {SIO_OK, ""};
    int fresh = 0;
    int ok = !stopping && journal_open_file(j, job, epoch, part, &fresh, &jr,
                                            &err) == SIO_OK;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->njloading; i++)
        if (r->jloading[i].epoch == epoch && r->jloading[i].part == part) {
            r->jloading[i] = r->jloading[--r->njloading];
            break;
        }
    if (ok && journal_find(r, epoch, part) >= 0) {
        drop = jr; /* opened meanwhile on another path */
    } else if (ok && journal_room(r)) {
        journal_add_entry(r, epoch, part, jr, 0, fresh);
    } else if (!stopping) {
        if (ok) {
            drop = jr;
            snprintf(err.msg, sizeof err.msg,
                     "more than %u epochs of one job in use", JOURNALS_MAX);
        }
        r->jfail.epoch = epoch;
        r->jfail.part = part;
        r->jfail.ms = sio_now_ms();
        r->jfail.set = 1;
        snprintf(r->jfail.msg, sizeof r->jfail.msg, "%s", err.msg);
    }
    pthread_mutex_unlock(&r->mu);
    sio_journal_close(drop);
}

static sio_code slot_open(sc_jobs *j, sc_job *job, uint64_t epoch,
                          uint32_t part, int prefetch, fslot **out,
                          sio_error *err)
{
    const sc_config *cfg = j->cfg;
    sio_epoch_config ec;
    sio_feed_config fc;
    fslot *s = calloc(1, sizeof *s);

    *out = NULL;
    if (!s) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return SIO_ERR_NOMEM;
    }
    s->plan_gen = 1;
    memset(&ec, 0, sizeof ec);
    ec.seed = job->spec.seed;
    ec.epoch = epoch;
    ec.interleave = job->spec.interleave;
    ec.buffer_samples = job->spec.shuffle_buffer;
    ec.buffer_bytes = job->spec.buffer_bytes;
    ec.on_error = (sio_on_error)job->spec.on_error;
    ec.log.fn = sc_log_sio;
    ec.log.level = sc_log_level();
    ec.read_threads = job->spec.read_threads;
    ec.replica = cfg->replicas > 1 ? part : 0;
    ec.replicas = cfg->replicas > 1 ? cfg->replicas : 0;
    /* Inside the memory formula: a larger sample is a bad one (skipped
     * and counted under on_error=skip). */
    ec.limits.sample_max = sc_config_sample_max(cfg);
    ec.limits.member_max = sc_config_field_max(cfg);
    ec.index = j->index;
    ec.cache = job->res->cache;
    ec.mix = job->res->mix;
    ec.nmix = job->res->nmix;
    ec.stage_bytes = sc_config_stage_bytes(cfg);
    int fresh = 0;
    ec.journal = s->journal = job_journal(j, job, epoch, part, &fresh, err);
    if (!ec.journal) {
        free(s);
        return SIO_ERR_IO;
    }
    /* Without a state_dir, an epoch whose first stream in this process is
     * a resume (set by sc_jobs_open_stream) may have been served before a
     * restart with decisions this journal does not know: resumed streams
     * on it fail clearly if a shard gets skipped (job_tick). */
    s->unproven = 0;
    s->fresh_journal = fresh;
    s->count = UINT64_MAX;
    if (j->index) {
        sio_index_stats ist;
        sio_index_get_stats(j->index, &ist);
        s->ix_dropped = ist.dropped;
    }
    s->ec = ec;
    s->partition = job->spec.partition;
    memset(&fc, 0, sizeof fc);
    fc.window_samples = cfg->window_samples;
    fc.window_bytes = cfg->window_bytes;
    fc.join_timeout_ms = cfg->join_timeout_ms;
    fc.rejoin_grace_ms = cfg->rejoin_grace_ms;
    fc.lazy = !prefetch;
    fc.lag_policy = (sio_feed_lag)cfg->lag_policy;
    fc.lag_grace_ms = cfg->lag_grace_ms;
    fc.max_seeks = cfg->max_seeks;
    fc.seek_budget = &j->seeks;
    fc.seek_budget_max = cfg->max_seeks_total;
    res_hold *hold = malloc(sizeof *hold);
    if (!hold) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        free(s);
        return SIO_ERR_NOMEM;
    }
    hold->res = job->res;
    hold->j = s->journal;
    fc.released = slot_released;
    fc.released_userdata = hold;
    atomic_fetch_add(&job->res->refs, 1); /* until the family is gone */
    sio_code rc = sio_feed_open(j->io, job->res->list, &ec, &fc, &s->feed,
                                err);
    if (rc) {
        slot_released(hold);
        free(s);
        return rc;
    }
    s->epoch = epoch;
    s->part = part;
    s->last_ms = sio_now_ms();
    s->next = job->slots;
    job->slots = s;
    job->nfeeds++;
    atomic_fetch_add(&j->nfeeds, 1);
    *out = s;
    return SIO_OK;
}

/*
 * May job (mu held) open a feed for `epoch`? The epoch-churn bounds, checked
 * before anything is allocated: epochs far ahead of the newest one in flight
 * (409), feeds of the job and of the server, live and retired (429), and new
 * epochs per minute (429). Returns 0, or the status with a reason and
 * *retry_after; the refusal is counted. The caller charges the bucket
 * (epoch_tokens -= 1) when it does open the feed.
 */
static unsigned feed_admission(sc_jobs *j, sc_job *job, uint64_t epoch,
                               unsigned *retry_after,
                               char *reason, size_t reason_len)
{
    const sc_config *cfg = j->cfg;
    uint64_t newest = 0;
    int any = 0;

    for (const fslot *x = job->slots; x; x = x->next)
        if (!x->retired && (!any || x->epoch > newest)) {
            newest = x->epoch;
            any = 1;
        }
    if (cfg->max_epochs_ahead && any && epoch > newest &&
        epoch - newest > cfg->max_epochs_ahead) {
        atomic_fetch_add(&j->refused[SC_REFUSED_EPOCH_AHEAD], 1);
        fail(reason, reason_len,
             "epoch %" PRIu64 " is more than %u epochs ahead of epoch %" PRIu64
             " in flight (--max-epochs-ahead)", epoch, cfg->max_epochs_ahead,
             newest);
        return 409;
    }
    if (job->nfeeds >= cfg->max_feeds_job) {
        atomic_fetch_add(&j->refused[SC_REFUSED_FEEDS_JOB], 1);
        fail(reason, reason_len,
             "job has %zu feeds open, live and retired (--max-feeds-per-job "
             "%u): retry when one closes", job->nfeeds, cfg->max_feeds_job);
        *retry_after = 5;
        return 429;
    }
    if (atomic_load(&j->nfeeds) >= cfg->max_feeds) {
        atomic_fetch_add(&j->refused[SC_REFUSED_FEEDS_SERVER], 1);
        fail(reason, reason_len,
             "server has %u feeds open (--max-feeds): retry later",
             cfg->max_feeds);
        *retry_after = 5;
        return 429;
    }
    if (cfg->max_new_epochs_min) {
        uint64_t now = sio_now_ms();
        double cap = cfg->max_new_epochs_min;
        if (job->epoch_tokens_ms == 0) {
            job->epoch_tokens = cap;
        } else {
            job->epoch_tokens += (double)(now - job->epoch_tokens_ms) * cap /
                                 60000.0;
            if (job->epoch_tokens > cap)
                job->epoch_tokens = cap;
        }
        job->epoch_tokens_ms = now ? now : 1;
        if (job->epoch_tokens < 1.0) {
            atomic_fetch_add(&j->refused[SC_REFUSED_EPOCH_RATE], 1);
            double wait_s = (1.0 - job->epoch_tokens) * 60.0 / cap;
            *retry_after = (unsigned)wait_s + 1;
            fail(reason, reason_len,
                 "job opened %u new epochs in the last minute "
                 "(--max-new-epochs-per-minute): retry in %u s",
                 cfg->max_new_epochs_min, *retry_after);
            return 429;
        }
    }
    return 0;
}

/* The checks sio_feed_attach makes that depend on the request alone, made
 * before a feed is opened for it (a bad request opens nothing). */
static unsigned check_world(sc_jobs *j, const sc_request *req, char *reason,
                            size_t reason_len)
{
    if (req->world < 1 || req->rank >= req->world) {
        fail(reason, reason_len, "rank must be less than world");
        return 400;
    }
    if (req->world > j->cfg->window_samples) {
        atomic_fetch_add(&j->refused[SC_REFUSED_WORLD], 1);
        fail(reason, reason_len, "world %u above the window of %u samples",
             req->world, j->cfg->window_samples);
        return 400;
    }
    return 0;
}

/* Live slots of one part of the epochs: --max-epochs bounds each part a
 * server serves (its own, and each part it covers for a replica that
 * failed); the feed bounds (--max-feeds-per-job, --max-feeds) bound them
 * all together. */
static size_t live_slots(const sc_job *job, uint32_t part)
{
    size_t n = 0;
    for (const fslot *s = job->slots; s; s = s->next)
        n += !s->retired && s->part == part;
    return n;
}

static fslot *live_slot(sc_job *job, uint64_t epoch, uint32_t part)
{
    for (fslot *s = job->slots; s; s = s->next)
        if (!s->retired && s->epoch == epoch && s->part == part)
            return s;
    return NULL;
}

/* Make room for one more epoch: retire a live slot without streams,
 * preferring one whose epoch has ended, then the least recently used. */
/* Whether a stream on the slot has not yet encoded its END (job->mu
 * held). A consumer that read its share's END may open the next epoch
 * before its request completed: its finished stream does not hold the
 * slot it read. */
static int slot_reading(const sc_job *job, const fslot *s)
{
    unsigned ended = 0;
    if (s->streams == 0)
        return 0;
    for (const sc_binding *b = job->bindings; b; b = b->next)
        if (b->slot == s && atomic_load(&b->ended))
            ended++;
    return ended < s->streams;
}

static int evict_one(sc_job *job, uint32_t part)
{
    fslot *best = NULL;
    int best_ended = 0;
    for (fslot *s = job->slots; s; s = s->next) {
        if (s->retired || s->pins || s->part != part || slot_reading(job, s))
            continue;
        sio_feed_stats st;
        size_t held = 0;
        sio_feed_get_stats(s->feed, &st, NULL, 0, &held);
        int ended = st.ended;
        /* The prefetched next epoch is in use until it is read, and so is
         * an epoch whose consumers are detached within their rejoin grace
         * or expected (held counts them, without a walk). */
        /* A prefetched plan holds no read-ahead worth keeping. */
        if ((s->prefetched && !ended && !st.failed && !s->plan) ||
            (held > 0 && !ended))
            continue;
        if (!best || (ended && !best_ended) ||
            (ended == best_ended && s->last_ms < best->last_ms)) {
            best = s;
            best_ended = ended;
        }
    }
    if (!best)
        return 0;
    best->retired = 1;
    return 1;
}

/* A local shard replaced under a running server moves the samples after
 * it in the dataset's order. A /samples/{i} read in place looks at its
 * own shard's file; the manager looks at every local shard of a job once
 * a second (a stat each, off the serving threads) while /samples/{i}
 * requests came within this long; a fetch looks at all of them. */
#define SAMPLES_LOOK_WINDOW_MS 60000u

/* A GET /samples/{i} whose sample is not read in place: fetched whole on
 * a sample thread into a plan of that one sample. Linked on j->sf_head
 * (j->sf_mu) from the request that asked until the request, opened again
 * once the fetch ended, takes it (or SAMPLE_KEEP_MS after it ended: a
 * client that went away). The job is referenced. */
#define SAMPLE_KEEP_MS 30000u
enum { SF_QUEUED, SF_RUNNING, SF_DONE };
typedef struct sample_fetch {
    sc_job *job;
    uint64_t i;
    int state;
    uint64_t start_us;  /* when its read began (SF_RUNNING, SF_DONE) */
    sio_code rc;
    sio_error err;
    sio_plan *plan;
    uint64_t done_ms;
    uint64_t held;      /* bytes of its plan, counted in j->sf_held */
    struct sample_fetch *next;
} sample_fetch;

static void sample_fetch_free(sample_fetch *f)
{
    sio_plan_unref(f->plan);
    sc_job_unref(f->job);
    free(f);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The epoch config a /samples/{i} reads with: the dataset's order. */
static void sample_config(sc_jobs *j, const sc_job *job, sio_epoch_config *ec)
{
    memset(ec, 0, sizeof *ec);
    ec->interleave = 1;
    ec->buffer_samples = 1;
    ec->index = j->index;
    ec->cache = job->res->cache;
    ec->limits = (sio_shard_limits){0};
    ec->log.fn = sc_log_sio;
    ec->log.level = sc_log_level();
}

/* A sample thread: one fetch at a time, no lock held while it reads;
 * after each, the waker resumes the requests that wait. */
static void *sample_fetcher_main(void *arg)
{
    sc_jobs *j = arg;
    pthread_mutex_lock(&j->sf_mu);
    for (;;) {
        /* The oldest queued (the list is newest first). */
        sample_fetch *f = NULL;
        for (sample_fetch *x = j->sf_head; x && !j->sf_stop; x = x->next)
            if (x->state == SF_QUEUED)
                f = x;
        if (j->sf_stop)
            break;
        if (!f) {
            pthread_cond_wait(&j->sf_work, &j->sf_mu);
            continue;
        }
        f->state = SF_RUNNING;
        f->start_us = now_us();
        pthread_mutex_unlock(&j->sf_mu);
        sio_epoch_config ec;
        sample_config(j, f->job, &ec);
        sio_error err = {SIO_OK, ""};
        sio_plan *plan = NULL;
        sio_code rc = sio_plan_sample_fetch(j->io, f->job->res->list, &ec,
                                            f->i, &plan, &err);
        pthread_mutex_lock(&j->sf_mu);
        f->rc = rc;
        f->err = err;
        f->plan = plan;
        f->held = plan ? sio_plan_memory(plan) : 0;
        j->sf_held += f->held;
        f->state = SF_DONE;
        f->done_ms = sio_now_ms();
        pthread_mutex_unlock(&j->sf_mu);
        pthread_mutex_lock(&j->plan_mu);
        if (j->plan_waker)
            j->plan_waker(j->plan_waker_ud);
        pthread_mutex_unlock(&j->plan_mu);
        pthread_mutex_lock(&j->sf_mu);
    }
    j->sf_running--;
    pthread_cond_broadcast(&j->sf_ended);
    pthread_mutex_unlock(&j->sf_mu);
    return NULL;
}

/* The fetch of (job, i) a request that came at arrival_us may wait for
 * or take (j->sf_mu held): one queued, or one whose read began after the
 * request came (an earlier read may hold bytes the shard no longer has
 * when the request came). A done one is unlinked and returned with
 * *taken set, for the caller to use and free; one queued or running is
 * left linked. NULL: none (the caller queues one). */
static sample_fetch *sample_fetch_find(sc_jobs *j, sc_job *job, uint64_t i,
                                       uint64_t arrival_us, int *taken)
{
    *taken = 0;
    for (sample_fetch **pp = &j->sf_head; *pp; pp = &(*pp)->next) {
        sample_fetch *x = *pp;
        if (x->job != job || x->i != i ||
            (x->state != SF_QUEUED && x->start_us < arrival_us))
            continue;
        if (x->state == SF_DONE) {
            *pp = x->next;
            j->nsf--;
            j->sf_held -= x->held;
            *taken = 1;
        }
        return x;
    }
    return NULL;
}

/* Fetches that ended and that nobody came for within SAMPLE_KEEP_MS (a
 * client that went away), or all of them that ended (all): let go (the
 * manager, no lock held: a job reference may be the last). */
static void sample_fetches_expire(sc_jobs *j, int all)
{
    uint64_t now = sio_now_ms();
    sample_fetch *drop = NULL;
    pthread_mutex_lock(&j->sf_mu);
    for (sample_fetch **pp = &j->sf_head; *pp;) {
        sample_fetch *x = *pp;
        if (x->state == SF_DONE &&
            (all || now - x->done_ms >= SAMPLE_KEEP_MS || x->job->removed)) {
            *pp = x->next;
            j->nsf--;
            j->sf_held -= x->held;
            x->next = drop;
            drop = x;
            continue;
        }
        pp = &x->next;
    }
    pthread_mutex_unlock(&j->sf_mu);
    while (drop) {
        sample_fetch *x = drop;
        drop = x->next;
        sample_fetch_free(x);
    }
}

/* GET /v1/jobs/{job}/samples/{i} (job->mu held): a plan of that one
 * sample, read in place where the indexes put it in a local plain tar;
 * else fetched whole first on a sample thread (SC_JOBS_PLAN_PENDING: the
 * request waits, and is opened again once the fetch ended). Owned by the
 * binding. Returns the HTTP status. */
static unsigned open_sample(sc_jobs *j, sc_job *job, const sc_request *req,
                            sc_stream *s, sc_binding *b, sio_error *err,
                            unsigned *retry_after)
{
    sio_epoch_config ec;
    sample_config(j, job, &ec);
    sio_plan *plan = NULL;
    sio_code rc;
    int fetched = 0, taken = 0;
    /* A request opened again once its fetch ended takes what it fetched
     * (the fetch may have indexed the shards meanwhile). */
    pthread_mutex_lock(&j->sf_mu);
    sample_fetch *f = sample_fetch_find(j, job, req->global_start,
                                        req->arrival_us, &taken);
    pthread_mutex_unlock(&j->sf_mu);
    if (taken) {
        rc = SIO_ERR_AGAIN;
    } else {
        job->res->samples_asked_ms = sio_now_ms();
        rc = sio_plan_sample(j->io, job->res->list, &ec, req->global_start,
                             &plan, err);
    }
    /* Not indexed in memory yet, not read in place, or past the end as the
     * indexes in memory count (the fetch counts again, looking at every
     * shard: it answers the 404). */
    if (rc == SIO_ERR_AGAIN || rc == SIO_ERR_UNSUPPORTED ||
        (rc == SIO_ERR_NOTFOUND && !taken)) {
        int start = 0;
        unsigned status = SC_JOBS_PLAN_PENDING;
        pthread_mutex_lock(&j->sf_mu);
        if (!taken)
            f = sample_fetch_find(j, job, req->global_start,
                                  req->arrival_us, &taken);
        if (!f && (j->sf_stop || j->nsf >= SC_SAMPLE_FETCHES_MAX ||
                   j->sf_held >= SC_SAMPLE_HELD_MAX)) {
            snprintf(err->msg, sizeof err->msg, "%s",
                     j->sf_stop ? "server shutting down"
                                : "too many samples being fetched: come "
                                  "back shortly");
            *retry_after = 1;
            status = 503;
        } else if (!f && (f = calloc(1, sizeof *f)) != NULL) {
            f->job = job;
            atomic_fetch_add(&job->refs, 1);
            f->i = req->global_start;
            f->state = SF_QUEUED;
            f->next = j->sf_head;
            j->sf_head = f;
            j->nsf++;
            start = j->nsfetchers < SC_SAMPLE_FETCHERS;
            pthread_cond_signal(&j->sf_work);
        } else if (!f) {
            snprintf(err->msg, sizeof err->msg, "out of memory");
            status = 503;
        }
        /* A thread more while fewer than SC_SAMPLE_FETCHERS run. */
        if (start && pthread_create(&j->sfetcher[j->nsfetchers], NULL,
                                    sample_fetcher_main, j) == 0) {
            j->nsfetchers++;
            j->sf_running++;
        }
        sample_fetch *gone = NULL;
        if (j->nsfetchers == 0 && f && !taken) {
            /* No thread could start: the request is told, not left, and
             * its fetch goes. */
            for (sample_fetch **pp = &j->sf_head; *pp; pp = &(*pp)->next)
                if (*pp == f) {
                    *pp = f->next;
                    j->nsf--;
                    gone = f;
                    break;
                }
            snprintf(err->msg, sizeof err->msg, "cannot start a sample "
                     "thread");
            *retry_after = 2;
            status = 503;
        }
        pthread_mutex_unlock(&j->sf_mu);
        if (gone)
            sample_fetch_free(gone); /* (the caller holds the job too) */
        if (!taken)
            return status;
        rc = f->rc;
        plan = f->plan;
        f->plan = NULL;
        if (rc)
            *err = f->err;
        /* (its job reference is not the last: the binding holds one) */
        sample_fetch_free(f);
        fetched = 1;
    }
    if (rc == SIO_ERR_NOTFOUND)
        return 404;
    if (rc == SIO_ERR_INVALID)
        return 400;
    if (rc) {
        *retry_after = rc == SIO_ERR_NOMEM ? 2 : 1;
        return 503;
    }
    sio_planread_config pc;
    memset(&pc, 0, sizeof pc);
    pc.rank = 0;
    pc.world = 1;
    pc.policy = SIO_PARTITION_NONE;
    pc.limits = ec.limits;
    pc.cache = job->res->cache;
    pc.index = j->index;
    rc = sio_planread_open(j->io, job->res->list, plan, &pc, &b->pr, err);
    sio_plan_unref(plan); /* the reader holds it */
    if (rc) {
        *retry_after = 2;
        return rc == SIO_ERR_INVALID ? 400 : 503;
    }
    sc_stream_set_planread(s, b->pr, &b->sample_broken, 1);
    atomic_fetch_add(fetched ? &job->sample_fetched_streams
                             : &job->sample_plan_streams, 1);
    return 200;
}

unsigned sc_jobs_stream_begin(sc_jobs *j, const sc_request *req,
                              sc_stream_params *p, sc_stream_fields *f,
                              sc_binding **binding, unsigned *retry_after,
                              char *reason, size_t reason_len)
{
    size_t nfields = 0;
    unsigned status;

    *binding = NULL;
    *retry_after = 0;
    sc_job *job = sc_jobs_get_job(j, req->job);
    if (!job) {
        fail(reason, reason_len, "unknown job");
        return 404;
    }
    sc_binding *b = calloc(1, sizeof *b);
    if (!b) {
        fail(reason, reason_len, "out of memory");
        sc_job_unref(job);
        return 503;
    }
    pthread_mutex_lock(&job->mu);
    if (job->removed) {
        fail(reason, reason_len, "unknown job");
        status = 404;
        goto fail;
    }
    if (job->state != JOB_READY && job->permanent) {
        fail(reason, reason_len, SC_JOB_FAILED_FMT, job->spec.name,
             job->reason);
        status = 422;
        goto fail;
    }
    if (job->state != JOB_READY) {
        fail(reason, reason_len, "job %s is not ready: %s", job->spec.name,
             job->reason);
        status = 503;
        *retry_after = 5;
        goto fail;
    }
    /* The request's fields=, else the job's default filter. */
    if (req->has_fields) {
        for (size_t i = 0; i < req->nfields; i++)
            f->ptrs[i] = req->fields[i];
        nfields = req->nfields;
    } else if (job->spec.fields &&
               sc_fields_split(job->spec.fields, f->names, &nfields) == 0) {
        for (size_t i = 0; i < nfields; i++)
            f->ptrs[i] = f->names[i];
    }
    memset(p, 0, sizeof *p);
    p->job = job->spec.name;
    p->epoch = req->epoch;
    p->rank = req->rank;
    p->world = req->world;
    p->start = req->start;
    p->global_start = req->global_start;
    p->partition = req->route == SC_ROUTE_SAMPLE
                       ? SIO_PARTITION_NONE
                       : (sio_partition)job->spec.partition;
    p->format = req->format;
    {
        uint32_t nparts = j->cfg->replicas > 1 ? j->cfg->replicas : 1;
        uint32_t own = j->cfg->replicas > 1 ? j->cfg->replica : 0;
        if (req->route != SC_ROUTE_SAMPLE && req->has_replica &&
            req->replica >= nparts) {
            fail(reason, reason_len,
                 "replica=%" PRIu32 " is not a replica of this set "
                 "(--replicas %" PRIu32 ": 0..%" PRIu32 ")",
                 req->replica, nparts, nparts - 1);
            status = 400;
            goto fail;
        }
        p->fingerprint = job->res->fingerprint;
        p->replica = req->has_replica ? req->replica : own;
        p->replicas = nparts;
        p->served_by = own;
    }
    p->fields = f->ptrs;
    p->nfields = nfields;
    p->counters = &job->ctr;
    /* The mix is set with the shard list, before the job is ready, and
     * immutable after. */
    p->sources = job->res->mix_frames;
    p->source_names = (const char *const *)job->res->mix_name_ptrs;
    p->nsources = job->res->mix_frames ? job->res->nmix : 0;
    p->source_sent = job->res->mix_sent;
    pthread_mutex_unlock(&job->mu);
    b->job = job; /* the binding keeps the job reference */
    *binding = b;
    return 200;
fail:
    pthread_mutex_unlock(&job->mu);
    free(b);
    sc_job_unref(job);
    return status;
}

void sc_jobs_stream_abort(sc_jobs *j, sc_binding *b)
{
    (void)j;
    if (!b)
        return;
    sc_job_unref(b->job);
    free(b);
}

/* A failed plan build is tried again after this long (the indexes may
 * complete meanwhile: the first pass of an epoch builds them). */
#define PLAN_RETRY_MS 1000u
/* Plans of one epoch made again after a shard changed under one: beyond
 * that (a file rewritten again and again), the epoch's feed. */
#define REPLANS_MAX 3u

/* Did a stream find a shard changed under the plan the slot has or
 * builds now (an earlier plan's streams mark theirs)? */
static int slot_broken(fslot *s)
{
    return atomic_load(&s->plan_broken) == s->plan_gen;
}
/* A journal that failed to load is told to the streams of its epoch for
 * this long; the next one after asks for a load again. */
#define JOURNAL_FAIL_MS 1000u

/* Work asked of the planner threads, the job referenced: a plan's build
 * (slot pinned by slot->pins and marked plan_building until it ends),
 * or a new epoch's journal read from state_dir (slot NULL). */
typedef struct plan_req {
    sc_job *job;
    fslot *slot;
    sio_plan *grow;   /* a step of this growing plan (referenced) */
    sio_plan *restage; /* shards of this plan fetched again (referenced) */
    uint64_t epoch;   /* a journal's */
    uint32_t part;
    struct plan_req *next;
} plan_req;

/* Queue r (its job referenced here). 0 when the planner cannot take it
 * (stopping); r is then the caller's. */
static int planner_queue(sc_jobs *j, plan_req *r)
{
    pthread_mutex_lock(&j->plan_mu);
    if (j->plan_stop || !j->nplanners) {
        pthread_mutex_unlock(&j->plan_mu);
        return 0;
    }
    job_ref(r->job);
    r->next = NULL;
    if (j->plan_tail)
        j->plan_tail->next = r;
    else
        j->plan_head = r;
    j->plan_tail = r;
    pthread_cond_signal(&j->plan_work);
    pthread_mutex_unlock(&j->plan_mu);
    return 1;
}

/* Queue the build of slot's plan (job->mu held). 0 when the planner
 * cannot take it (no memory, stopping): the epoch streams from its feed. */
static int plan_enqueue(sc_jobs *j, sc_job *job, fslot *slot)
{
    plan_req *r = calloc(1, sizeof *r);
    if (!r)
        return 0;
    r->job = job;
    r->slot = slot;
    if (!planner_queue(j, r)) {
        free(r);
        return 0;
    }
    slot->pins++; /* pinned until the build ended */
    slot->plan_building = 1;
    return 1;
}

/* Before a new epoch's slot is opened on a stream's thread (job->mu
 * held): is its journal in the table, or can it be read there? 0 when the
 * slot may be opened now (the journal is open, there is no state_dir, or
 * the planner cannot take a load: out of memory, stopping; it is then read
 * on this thread as before); SC_JOBS_PLAN_PENDING while a planner thread
 * reads it from state_dir, or while JOURNALS_LOADING_MAX other loads of
 * the job are queued (the stream waits, suspended, and is opened again
 * when one ends); 503 when that read just failed. */
static unsigned journal_ready(sc_jobs *j, sc_job *job, uint64_t epoch,
                              uint32_t part, char *reason, size_t reason_len,
                              unsigned *retry_after)
{
    job_res *r = job->res;
    unsigned st = 0;
    if (!j->cfg->state_dir)
        return 0;
    pthread_mutex_lock(&r->mu);
    if (journal_find(r, epoch, part) >= 0)
        goto out;
    for (size_t i = 0; i < r->njloading; i++)
        if (r->jloading[i].epoch == epoch && r->jloading[i].part == part) {
            st = SC_JOBS_PLAN_PENDING;
            goto out;
        }
    if (r->jfail.set && r->jfail.epoch == epoch && r->jfail.part == part &&
        sio_now_ms() - r->jfail.ms < JOURNAL_FAIL_MS) {
        fail(reason, reason_len, "cannot open epoch %" PRIu64 ": %s", epoch,
             r->jfail.msg);
        *retry_after = 2;
        st = 503;
        goto out;
    }
    if (r->njloading == JOURNALS_LOADING_MAX) {
        st = SC_JOBS_PLAN_PENDING;
        goto out;
    }
    plan_req *q = calloc(1, sizeof *q);
    if (!q)
        goto out;
    q->job = job;
    q->epoch = epoch;
    q->part = part;
    if (!planner_queue(j, q)) {
        free(q);
        goto out;
    }
    r->jloading[r->njloading].epoch = epoch;
    r->jloading[r->njloading++].part = part;
    st = SC_JOBS_PLAN_PENDING;
out:
    pthread_mutex_unlock(&r->mu);
    return st;
}

/* Slot's plan is complete (built whole, or grown to its end): counted and
 * logged (job->mu held). */
static void plan_built(sc_job *job, const fslot *slot, const sio_plan *p,
                       int grown)
{
    atomic_fetch_add(&job->plans_built, 1);
    SC_LOG(SIO_LOG_INFO,
           "event=plan_built job=%s epoch=%" PRIu64 " samples=%" PRIu64
           " bytes=%zu build_ms=%.1f%s",
           job->spec.name, slot->epoch, sio_plan_count(p),
           sio_plan_memory(p), (double)sio_plan_build_ns(p) / 1e6,
           grown ? " grown=1" : "");
}

/* Queue the next step of slot's growing plan (job->mu held): the slot
 * pinned and the plan referenced until it ran. Nothing when one is queued
 * already or the planner stops (the plan then stays where it is). */
static void grow_enqueue(sc_jobs *j, sc_job *job, fslot *slot)
{
    if (slot->grow_queued || !slot->plan || sio_plan_complete(slot->plan) ||
        sio_plan_failed(slot->plan, NULL, 0))
        return;
    plan_req *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->job = job;
    r->slot = slot;
    r->grow = slot->plan;
    sio_plan_ref(r->grow);
    if (!planner_queue(j, r)) {
        sio_plan_unref(r->grow);
        free(r);
        return;
    }
    slot->pins++;
    slot->grow_queued = 1;
}

/* A reader came near the end of a parked growing plan (its thread, no
 * lock held; the reader's binding pins the slot and the job). */
static void plan_kick(void *ud)
{
    fslot *slot = ud;
    sc_job *job = slot->kick_job;
    pthread_mutex_lock(&job->mu);
    if (!job->removed)
        grow_enqueue(slot->kick_j, job, slot);
    pthread_mutex_unlock(&job->mu);
}

/* A reader needs a staged shard fetched again (its thread, no lock held;
 * the reader's binding pins the slot and the job): queued for a planner
 * unless one is queued already (it takes every shard asked by then). */
static void plan_restage_kick(void *ud)
{
    fslot *slot = ud;
    sc_job *job = slot->kick_job;
    sc_jobs *j = slot->kick_j;
    pthread_mutex_lock(&job->mu);
    if (!job->removed && slot->plan && !slot->restage_queued) {
        plan_req *r = calloc(1, sizeof *r);
        if (r) {
            r->job = job;
            r->slot = slot;
            r->restage = slot->plan;
            sio_plan_ref(r->restage);
            if (planner_queue(j, r)) {
                slot->pins++;
                slot->restage_queued = 1;
            } else {
                sio_plan_unref(r->restage);
                free(r);
            }
        }
    }
    pthread_mutex_unlock(&job->mu);
}

/* A restage ran (no lock held). */
static void restage_run(sc_jobs *j, plan_req *r, int stopping)
{
    sc_job *job = r->job;
    fslot *slot = r->slot;
    pthread_mutex_lock(&job->mu);
    slot->restage_queued = 0; /* asked from now on: another run */
    pthread_mutex_unlock(&job->mu);
    if (!stopping)
        sio_plan_restage(r->restage);
    pthread_mutex_lock(&job->mu);
    slot->pins--;
    slot->last_ms = sio_now_ms();
    pthread_mutex_unlock(&job->mu);
    sio_plan_unref(r->restage);
    sc_job_unref(job);
    free(r);
}

/* After a step of a growing plan (no lock held): queued again while
 * there is more to do, else the pin and the references go. */
static void grow_after(sc_jobs *j, plan_req *r, sio_code rc, int stopping)
{
    sc_job *job = r->job;
    fslot *slot = r->slot;
    sio_plan *p = r->grow;
    pthread_mutex_lock(&job->mu);
    int mine = slot->plan == p && !job->removed;
    /* Parked, and kicked before this: the kick found the step still
     * queued and did nothing; the next step goes now. */
    if (rc == SIO_ERR_BUSY && !sio_plan_parked(p))
        rc = SIO_ERR_AGAIN;
    if (rc == SIO_ERR_AGAIN && mine && !stopping) {
        pthread_mutex_unlock(&job->mu);
        if (planner_queue(j, r)) {
            sc_job_unref(job); /* planner_queue took another */
            return;
        }
        pthread_mutex_lock(&job->mu);
    }
    slot->grow_queued = 0;
    slot->pins--;
    slot->last_ms = sio_now_ms();
    /* The step of a plan dropped since (made again after a shard
     * changed): the slot's plan now is another, whose own steps could not
     * be queued while this one was. */
    if (!mine && !stopping && !job->removed)
        grow_enqueue(j, job, slot);
    char why[700];
    if (mine && sio_plan_complete(p)) {
        sio_plan_set_kick(p, NULL, NULL);
        plan_built(job, slot, p, 1);
    } else if (mine && sio_plan_failed(p, why, sizeof why) &&
               sio_plan_fatal(p)) {
        /* The epoch fails there (on_error=fail): its readers end with
         * the failure, as on its feed. */
        SC_LOG(SIO_LOG_WARN,
               "event=epoch_failed job=%s epoch=%" PRIu64 " samples=%" PRIu64
               " reason=\"%s\"", job->spec.name, slot->epoch,
               sio_plan_count(p), why);
    } else if (mine && sio_plan_failed(p, why, sizeof why)) {
        /* Its readers fail at its end and resume from the feed. */
        SC_LOG(SIO_LOG_WARN,
               "event=plan_stopped job=%s epoch=%" PRIu64 " samples=%" PRIu64
               " reason=\"%s\"", job->spec.name, slot->epoch,
               sio_plan_count(p), why);
    }
    pthread_mutex_unlock(&job->mu);
    sio_plan_unref(p);
    sc_job_unref(job);
    free(r);
}

/* The end of a build (no lock held): its result goes to the slot, the pin
 * and the job reference are dropped. p NULL with rc SIO_OK: not built
 * (the planner stops). */
static void plan_finish(sc_jobs *j, plan_req *r, sio_code rc, sio_plan *p,
                        const sio_error *err)
{
    sc_job *job = r->job;
    fslot *slot = r->slot;
    pthread_mutex_lock(&job->mu);
    slot->pins--;
    slot->last_ms = sio_now_ms();
    slot->plan_building = 0;
    slot->plan_tried = 1;
    slot->plan_tried_ms = sio_now_ms();
    /* Indexes dropped until now (a plan made again drops the changed
     * shard's as it starts) are the new plan's to index again, not a
     * reason to drop it (slot_indexes_checked). */
    if (rc == SIO_OK && p && slot->replans && j->index) {
        sio_index_stats ist;
        sio_index_get_stats(j->index, &ist);
        slot->ix_dropped = ist.dropped;
    }
    if (rc == SIO_OK && p && !sio_plan_complete(p) && !slot_broken(slot) &&
        !job->removed) {
        /* The first pass: a plan that grows as the shards are indexed. */
        slot->plan = p;
        slot->kick_j = j;
        slot->kick_job = job;
        sio_plan_set_ahead(p, j->cfg->plan_ahead_samples);
        sio_plan_stage_config sc = {
            .join_ms = j->cfg->join_timeout_ms,
            .rejoin_ms = j->cfg->rejoin_grace_ms,
            .lag_grace_ms = j->cfg->lag_grace_ms,
            .lag_samples = j->cfg->lag_samples,
            .lag_wait = j->cfg->lag_policy == SIO_FEED_LAG_WAIT};
        sio_plan_set_stage(p, &sc);
        sio_plan_set_restage(p, plan_restage_kick, slot);
        sio_plan_set_kick(p, plan_kick, slot);
        atomic_fetch_add(&job->plans_grown, 1);
        SC_LOG(SIO_LOG_INFO,
               "event=plan_growing job=%s epoch=%" PRIu64
               " reason=\"%s\"", job->spec.name, slot->epoch, err->msg);
        grow_enqueue(j, job, slot);
    } else if (rc == SIO_OK && p && !slot_broken(slot) && !job->removed) {
        slot->plan = p;
        plan_built(job, slot, p, 0);
    } else {
        sio_plan_unref(p);
        /* Compressed or remote shards, an epoch under
         * on_error=fail too long for a whole plan: this epoch streams,
         * nothing to try again. */
        if (rc == SIO_ERR_UNSUPPORTED || rc == SIO_ERR_LIMIT)
            slot->plan_never = 1;
        SC_LOG(SIO_LOG_DEBUG,
               "event=plan_unavailable job=%s epoch=%" PRIu64
               " reason=\"%s\"", job->spec.name, slot->epoch,
               rc          ? err->msg
               : !p        ? "server stopping"
               : job->removed ? "the job was removed"
                              : "a shard changed");
    }
    pthread_mutex_unlock(&job->mu);
    sc_job_unref(job);
    free(r);
}

/* A planner thread: one build at a time, with no lock held while it
 * runs; after each, the waker resumes the streams that wait. On stop the
 * queue is given back unbuilt. */
static void *planner_main(void *arg)
{
    sc_jobs *j = arg;
    pthread_mutex_lock(&j->plan_mu);
    for (;;) {
        while (!j->plan_head && !j->plan_stop)
            pthread_cond_wait(&j->plan_work, &j->plan_mu);
        plan_req *r = j->plan_head;
        if (!r)
            break; /* stopping, nothing queued */
        j->plan_head = r->next;
        if (!j->plan_head)
            j->plan_tail = NULL;
        int stopping = j->plan_stop;
        pthread_mutex_unlock(&j->plan_mu);
        if (!r->slot) {
            journal_preload(j, r->job, r->epoch, r->part, stopping);
            sc_job_unref(r->job);
            free(r);
        } else if (r->restage) {
            restage_run(j, r, stopping);
        } else if (r->grow) {
            sio_error err = {SIO_OK, ""};
            sio_code rc = stopping ? SIO_OK : sio_plan_grow(r->grow, &err);
            grow_after(j, r, rc, stopping);
        } else {
            sio_error err = {SIO_OK, ""};
            sio_plan *p = NULL;
            sio_code rc = SIO_OK;
            if (!stopping)
                rc = sio_plan_build(j->io, r->job->res->list, &r->slot->ec,
                                    j->cfg->plan_keep_samples, &p, &err);
            /* Shards not indexed yet (the first pass), an epoch longer
             * than a plan keeps, or a local file changed or gone since it
             * was indexed: a plan that grows as the shards are indexed
             * and as its readers come, within its window (a file gone is
             * met where the order opens it, as the feed meets it). */
            if ((rc == SIO_ERR_AGAIN || rc == SIO_ERR_LIMIT ||
                 rc == SIO_ERR_CHANGED) && !stopping) {
                sio_error why = err;
                int indexed = rc == SIO_ERR_LIMIT;
                rc = sio_plan_start(j->io, r->job->res->list, &r->slot->ec,
                                    j->cfg->plan_keep_samples, &p, &err);
                if (rc == SIO_OK)
                    err = why;
                else if (rc == SIO_ERR_UNSUPPORTED && !indexed)
                    rc = SIO_ERR_AGAIN; /* the feed, and a build later */
            }
            plan_finish(j, r, rc, p, &err);
        }
        pthread_mutex_lock(&j->plan_mu);
        if (j->plan_waker)
            j->plan_waker(j->plan_waker_ud);
    }
    pthread_mutex_unlock(&j->plan_mu);
    return NULL;
}

void sc_jobs_set_plan_waker(sc_jobs *j, void (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&j->plan_mu);
    j->plan_waker = fn;
    j->plan_waker_ud = fn ? ud : NULL;
    pthread_mutex_unlock(&j->plan_mu);
}

/* The epoch's plan when it has one (job->mu held). NULL: the epoch
 * streams from its feed, or, with *pending set, its plan is being built
 * (a build is queued here when there is none yet and it may be). */
static sio_plan *slot_plan(sc_jobs *j, sc_job *job, fslot *slot,
                           int *pending)
{
    *pending = 0;
    if (j->cfg->data_plane != SC_DATA_PLANE_AUTO)
        return NULL;
    if (slot->plan_building) {
        *pending = 1;
        return NULL;
    }
    if (slot_broken(slot)) {
        /* An epoch read in place has its plan made again (the shard that
         * changed is indexed again when the order comes to it, and a
         * stream resuming at its position waits for the order there), at
         * most REPLANS_MAX times; one that stages shards, from its feed
         * (a new plan would stage every shard before the position
         * first). */
        int again = slot->plan && !sio_plan_stages(slot->plan) &&
                    slot->replans < REPLANS_MAX && !job->removed;
        slot_drop_plan(slot, "a stream found a shard changed under the "
                             "epoch's plan");
        if (!again) {
            slot->plan_never = 1;
            return NULL;
        }
        slot->replans++;
        slot->plan_gen++;
        atomic_fetch_add(&job->plans_again, 1);
        slot->plan_tried = 0;
        SC_LOG(SIO_LOG_INFO, "event=plan_again job=%s epoch=%" PRIu64
               " times=%u reason=\"a shard changed under its plan\"",
               job->spec.name, slot->epoch, slot->replans);
    }
    uint64_t now = sio_now_ms();
    if (!slot->plan && !job->removed && !slot->plan_never &&
        (!slot->plan_tried || now - slot->plan_tried_ms >= PLAN_RETRY_MS) &&
        plan_enqueue(j, job, slot)) {
        *pending = 1;
        return NULL;
    }
    return slot->plan;
}

/* Serve the stream from the epoch's plan when it has one (job->mu held):
 * 1 when bound to the plan, 0 when the feed is to serve it,
 * SC_JOBS_PLAN_PENDING while the plan is being built, or an HTTP status
 * with *reason (a share the feed would refuse too). */
static unsigned plan_stream(sc_jobs *j, sc_job *job, fslot *slot,
                            const sc_request *req, sc_stream *s,
                            sc_binding *b, char *reason, size_t reason_len)
{
    int pending = 0;
    sio_plan *plan = slot_plan(j, job, slot, &pending);
    if (pending && !job->removed) {
        atomic_fetch_add(&job->plan_waits, 1);
        return SC_JOBS_PLAN_PENDING;
    }
    if (!plan || job->removed)
        return 0;
    /* A world the staging could never follow (no ranks, too many): the
     * feed's, which refuses it. */
    if (sio_plan_stage_other_world(plan, req->world))
        return 0;
    uint64_t t0 = 0;
    if (sio_share_index(req->global_start, req->rank, req->world,
                        req->start, &t0) != 0)
        t0 = UINT64_MAX;
    /* A stream far ahead of what an indexed epoch's staging has made (a
     * resume): its feed, which seeks, where the staging would fetch every
     * shard before its position first. */
    if (t0 != UINT64_MAX && sio_plan_stage_far(plan, t0))
        return 0;
    sio_planread_config pc;
    sio_error err = {SIO_OK, ""};
    memset(&pc, 0, sizeof pc);
    pc.rank = req->rank;
    pc.world = req->world;
    pc.policy = (sio_partition)job->spec.partition;
    pc.start = req->start;
    pc.global_start = req->global_start;
    pc.limits = slot->ec.limits;
    pc.cache = job->res->cache;
    pc.index = j->index;
    sio_code rc = sio_planread_open(j->io, job->res->list, plan, &pc, &b->pr,
                                    &err);
    if (rc) {
        sc_redact_source(err.msg, reason, reason_len);
        return rc == SIO_ERR_INVALID ? 400 : 503;
    }
    sc_stream_set_planread(s, b->pr, &slot->plan_broken, slot->plan_gen);
    atomic_fetch_add(&job->plan_streams, 1);
    return 1;
}

/* The bytes of a shard URL an END summary names (redacted). */
#define SKIPPED_URL_MAX 400u

/* The END summary's "skipped" (sc_stream_skipped_fn) of a stream bound to
 * an epoch: what the epoch lost up to the share's last item (the
 * journal's losses, sio_journal_losses): shards skipped or cut short and
 * single bad samples, their counts and the first SIO_LOSS_REFS_MAX of
 * each (shard URLs redacted; samples by shard URL and number in the
 * shard); nothing when nothing was lost. A loss that comes from the data
 * is found at the same place of the order by every reader of the epoch,
 * on either data plane and on every replica, so every share that reaches
 * it tells the same. */
static int share_losses(sc_binding *b, uint64_t position, int late, char *buf,
                        size_t len)
{
    fslot *slot = b->slot;
    sio_losses_info li;
    buf[0] = '\0';
    if (!slot || !slot->journal)
        return 1;
    /* The share's last item (an empty share: the whole epoch). */
    uint64_t last = UINT64_MAX;
    if (position > 0 &&
        sio_share_index(b->global_start, b->rank, b->world, position - 1,
                        &last) != 0)
        last = UINT64_MAX;
    int known = sio_journal_losses(slot->journal, last, &li);
    if (!known && !late)
        return 0;
    if (!known)
        SC_LOG(SIO_LOG_WARN,
               "event=losses_partial job=%s epoch=%" PRIu64 " rank=%" PRIu32
               " world=%" PRIu32 " reason=\"no reader of the epoch reached "
               "the share's end in time: the END tells the losses known\"",
               b->job->spec.name, b->epoch, b->rank, b->world);
    if (li.shards == 0 && li.samples == 0 && known)
        return 1;
    const sio_shardlist *l = b->job->res->list;
    size_t total = sio_shardlist_count(l);
    json_t *urls = json_array(), *refs = json_array();
    for (size_t i = 0; urls && i < li.nshard_refs; i++) {
        char red[SKIPPED_URL_MAX];
        if (li.shard_refs[i] >= total)
            continue;
        sc_redact_source(sio_shardlist_url(l, li.shard_refs[i]), red,
                         sizeof red);
        json_array_append_new(urls, json_string(red));
    }
    for (size_t i = 0; refs && i < li.nsample_refs; i++) {
        char red[SKIPPED_URL_MAX];
        if (li.sample_refs[i].shard >= total)
            continue;
        sc_redact_source(sio_shardlist_url(l, li.sample_refs[i].shard), red,
                         sizeof red);
        json_array_append_new(refs,
                              json_pack("{s:s, s:I}", "url", red, "sample",
                                        (json_int_t)li.sample_refs[i].sample));
    }
    json_t *o = json_pack("{s:I, s:o, s:I, s:o}", "shards",
                          (json_int_t)li.shards, "shard_urls",
                          urls ? urls : json_array(), "samples",
                          (json_int_t)li.samples, "sample_refs",
                          refs ? refs : json_array());
    if (o && !known)
        json_object_set_new(o, "partial", json_true());
    /* Names that escape to more than fits are left out, the last of the
     * longer list first (the counts stay exact). */
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_t *ua = o ? json_object_get(o, "shard_urls") : NULL;
    json_t *ra = o ? json_object_get(o, "sample_refs") : NULL;
    while (text && strlen(text) >= len &&
           json_array_size(ua) + json_array_size(ra) > 0) {
        free(text);
        json_t *from = json_array_size(ua) >= json_array_size(ra) ? ua : ra;
        json_array_remove(from, json_array_size(from) - 1);
        text = json_dumps(o, JSON_COMPACT);
    }
    if (text && strlen(text) < len)
        memcpy(buf, text, strlen(text) + 1);
    free(text);
    json_decref(o);
    return 1;
}

/* The stream's END waits for this; once it returns 1 the END is encoded
 * and the stream holds its slot no longer (evict_one). */
static int binding_skipped(void *ud, uint64_t position, int late, char *buf,
                           size_t len)
{
    sc_binding *b = ud;
    int done = share_losses(b, position, late, buf, len);
    if (done)
        atomic_store(&b->ended, 1);
    return done;
}

unsigned sc_jobs_open_stream(sc_jobs *j, sc_binding *b, const sc_request *req,
                             sc_stream *s, unsigned *retry_after,
                             char *reason, size_t reason_len)
{
    sio_error err = {SIO_OK, ""};
    sc_job *job = b->job;
    fslot *slot;
    unsigned status = 500;
    sio_code rc;

    *retry_after = 0;
    pthread_mutex_lock(&job->mu);
    if (job->removed) {
        fail(reason, reason_len, "unknown job");
        status = 404;
        goto out;
    }
    if (req->route == SC_ROUTE_SAMPLE) {
        status = open_sample(j, job, req, s, b, &err, retry_after);
        if (status != 200) {
            sc_redact_source(err.msg, reason, reason_len);
            goto out;
        }
        goto bound;
    }
    /* The part of the epoch asked for: this server's own, or, with
     * replica=J, replica J's (any replica serves any part). */
    uint32_t nparts = j->cfg->replicas > 1 ? j->cfg->replicas : 1;
    uint32_t own = j->cfg->replicas > 1 ? j->cfg->replica : 0;
    uint32_t part = req->has_replica ? req->replica : own;
    if (part >= nparts) {
        fail(reason, reason_len,
             "replica=%" PRIu32 " is not a replica of this set (--replicas "
             "%" PRIu32 ": 0..%" PRIu32 ")", part, nparts, nparts - 1);
        status = 400;
        goto out;
    }
    slot = live_slot(job, req->epoch, part);
    if (slot) {
        sio_feed_stats st;
        sio_feed_get_stats(slot->feed, &st, NULL, 0, NULL);
        if (st.failed) {
            /* A failed epoch is read afresh for new streams (the store may
             * be back); streams still on the old feed end with its error. */
            slot->retired = 1;
            slot = NULL;
        }
    }
    if (!slot) {
        status = check_world(j, req, reason, reason_len);
        /* The epoch's journal is read from state_dir on a planner thread,
         * not here (this thread serves other connections, and the server's
         * and the job's locks are held): the stream waits for it. Nothing
         * was counted against the epoch bounds yet. */
        if (!status)
            status = journal_ready(j, job, req->epoch, part, reason,
                                   reason_len, retry_after);
        if (!status)
            status = feed_admission(j, job, req->epoch, retry_after, reason,
                                    reason_len);
        if (status)
            goto out;
        status = 500;
        if (live_slots(job, part) >= j->cfg->max_epochs &&
            !evict_one(job, part)) {
            char list[200] = "";
            size_t o = 0;
            for (fslot *x = job->slots; x && o + 24 < sizeof list; x = x->next)
                if (!x->retired && x->part == part)
                    o += (size_t)snprintf(list + o, sizeof list - o, "%s%" PRIu64,
                                          o ? ", " : "", x->epoch);
            fail(reason, reason_len,
                 "job %s has %u epochs in flight (%s), all with consumers "
                 "attached (--max-epochs %u): retry when one ends",
                 job->spec.name, j->cfg->max_epochs, list,
                 j->cfg->max_epochs);
            status = 503;
            *retry_after = 5;
            goto out;
        }
        if (j->cfg->max_new_epochs_min)
            job->epoch_tokens -= 1.0; /* checked by feed_admission */
        rc = slot_open(j, job, req->epoch, part, 0, &slot, &err);
        if (rc == SIO_OK && !j->cfg->state_dir && slot->fresh_journal &&
            (req->start > 0 || req->global_start > 0))
            slot->unproven = 1;
        if (rc) {
            char msg[700];
            snprintf(msg, sizeof msg, "cannot open epoch %" PRIu64 ": %s",
                     req->epoch, err.msg);
            job_error(job, msg);
            sc_redact_source(msg, reason, reason_len);
            status = rc == SIO_ERR_INVALID ? 400 : 503;
            goto out;
        }
    }
    status = plan_stream(j, job, slot, req, s, b, reason, reason_len);
    if (status > 1) /* an error, or SC_JOBS_PLAN_PENDING */
        goto out;
    if (job->removed) {
        fail(reason, reason_len, "unknown job");
        status = 404;
        goto out;
    }
    if (status == 1)
        goto attached;
    sio_cursor_config cc;
    memset(&cc, 0, sizeof cc);
    cc.rank = req->rank;
    cc.world = req->world;
    cc.policy = (sio_partition)job->spec.partition;
    cc.start = req->start;
    cc.global_start = req->global_start;
    cc.notify = sc_stream_notify;
    cc.userdata = s;
    rc = sio_feed_attach(slot->feed, &cc, &b->cur, &err);
    if (rc) {
        sc_redact_source(err.msg, reason, reason_len);
        status = rc == SIO_ERR_INVALID ? 400 : 503;
        if (rc == SIO_ERR_BUSY)
            *retry_after = 2;
        goto out;
    }
    atomic_fetch_add(&job->feed_streams, 1);
attached:
    if (part != own) {
        atomic_fetch_add(&job->failover_streams, 1);
        SC_LOG(SIO_LOG_INFO,
               "event=failover_stream job=%s epoch=%" PRIu64
               " replica=%" PRIu32 " served_by=%" PRIu32 " rank=%" PRIu32
               " world=%" PRIu32 " start=%" PRIu64,
               job->spec.name, req->epoch, part, own, req->rank, req->world,
               req->start);
    }
    slot->streams++;
    slot->served++;
    slot->prefetched = 0;
    slot->last_ms = sio_now_ms();
    b->slot = slot;
    sc_stream_set_skipped(s, binding_skipped, b);
bound:
    sc_stream_set_cursor(s, b->cur);
    b->s = s;
    b->epoch = req->epoch;
    b->rank = req->rank;
    b->world = req->world;
    b->global_start = req->global_start;
    b->resumed = req->start > 0 || req->global_start > 0;
    b->next = job->bindings;
    if (job->bindings)
        job->bindings->prev = b;
    job->bindings = b;
    atomic_fetch_add(&job->streams_opened, 1);
    atomic_fetch_add(&j->nbindings, 1);
    pthread_mutex_unlock(&job->mu);
    return 200; /* the binding keeps the job reference */
out:
    pthread_mutex_unlock(&job->mu);
    sc_jobs_stream_abort(j, b);
    return status;
}


void sc_jobs_release(sc_jobs *j, sc_binding *b)
{
    pthread_mutex_lock(&j->mu);
    b->reap_next = j->reap;
    j->reap = b;
    pthread_cond_signal(&j->work);
    pthread_mutex_unlock(&j->mu);
}

void sc_jobs_cut_all(sc_jobs *j, const char *reason, uint32_t retry_after_ms)
{
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->njobs; i++) {
        sc_job *job = j->jobs[i];
        pthread_mutex_lock(&job->mu);
        for (sc_binding *b = job->bindings; b; b = b->next)
            sc_stream_cut_retry(b->s, reason, retry_after_ms);
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_unlock(&j->mu);
}

size_t sc_jobs_wait_streams(sc_jobs *j, uint32_t timeout_ms)
{
    struct timespec ts;
    deadline_in(&ts, timeout_ms);
    pthread_mutex_lock(&j->mu);
    while (atomic_load(&j->nbindings) > 0 &&
           pthread_cond_timedwait(&j->drained, &j->mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&j->mu);
    return atomic_load(&j->nbindings);
}

/* Manager ------------------------------------------------------------- */

/* Close a released binding's cursor, count and log it, free it. */
static void reap_one(sc_jobs *j, sc_binding *b)
{
    sc_job *job = b->job;
    sc_stream_stats st;

    /* The status lists the job's bindings, and a plan stream's position
     * from its reader, under job->mu: the reader leaves the binding under
     * that lock before it is closed. */
    pthread_mutex_lock(&job->mu);
    sio_planread *pr = b->pr;
    b->pr = NULL;
    pthread_mutex_unlock(&job->mu);
    /* Closing the cursor stops its notifications (it may close a private
     * replay, which joins a thread): no lock held. */
    sio_cursor_close(b->cur);
    sio_planread_close(pr);
    sc_stream_get_stats(b->s, &st);
    pthread_mutex_lock(&job->mu);
    if (b->slot) {
        b->slot->streams--;
        b->slot->last_ms = sio_now_ms();
    }
    if (b->prev)
        b->prev->next = b->next;
    else
        job->bindings = b->next;
    if (b->next)
        b->next->prev = b->prev;
    if (st.plan_failed)
        atomic_fetch_add(&job->plan_failures, 1);
    if (st.outcome == SC_STREAM_ERROR) {
        char msg[400];
        snprintf(msg, sizeof msg, "epoch %" PRIu64 " rank %" PRIu32
                 " of %" PRIu32 ": %s", b->epoch, b->rank, b->world,
                 sc_stream_error(b->s));
        job_error(job, msg);
    }
    pthread_mutex_unlock(&job->mu);
    if ((unsigned)st.outcome < 5)
        atomic_fetch_add(&job->streams_by_outcome[st.outcome], 1);
    SC_LOG(SIO_LOG_DEBUG,
           "event=stream_released id=%s job=%s epoch=%" PRIu64
           " rank=%" PRIu32 " world=%" PRIu32 " samples=%" PRIu64
           " position=%" PRIu64 " outcome=%s",
           sc_stream_id(b->s), job->spec.name, b->epoch, b->rank, b->world,
           st.samples, st.position, sc_stream_outcome_name(st.outcome));
    sc_stream_destroy(b->s);
    free(b);
    pthread_mutex_lock(&j->mu);
    atomic_fetch_sub(&j->nbindings, 1);
    pthread_cond_broadcast(&j->drained);
    pthread_mutex_unlock(&j->mu);
    sc_job_unref(job);
}

/* Can the epoch after slot s's take a plan now (job->mu held; reads
 * index files at most, no shard byte)? */
static int plan_next_possible(sc_jobs *j, sc_job *job, const fslot *s)
{
    if (j->cfg->data_plane != SC_DATA_PLANE_AUTO || job->res->nmix ||
        !job->res->list)
        return 0;
    sio_epoch_config ec = s->ec;
    sio_error err = {SIO_OK, ""};
    ec.epoch = s->epoch + 1;
    ec.journal = NULL;
    sio_code rc = sio_plan_possible(j->io, job->res->list, &ec, &err);
    /* Remote shards staged for every epoch: the next epoch's plan stages
     * its first shards ahead, where a feed opened ahead would read the
     * store a second time for nothing. */
    return rc == SIO_OK || (rc == SIO_ERR_AGAIN && ec.stage_bytes);
}

/* A loaded shard index was dropped since s's length or plan was computed
 * (a read disagreed with it): both may be wrong. The length is counted
 * again from the indexes rebuilt; the epoch streams from its feed from
 * then on. (The server's index counts drops of every job's shards, so a
 * drop for one job re-counts the others' epochs too: a rare event, and
 * only a cost.) job->mu held. */
static void slot_indexes_checked(sc_jobs *j, fslot *s)
{
    sio_index_stats ist;
    if (!j->index)
        return;
    sio_index_get_stats(j->index, &ist);
    if (ist.dropped == s->ix_dropped)
        return;
    s->ix_dropped = ist.dropped;
    s->count = UINT64_MAX;
    if (s->plan || s->plan_building)
        atomic_store(&s->plan_broken, s->plan_gen);
}

/* Timers of one job: throughput, retirement, prefetch; closes the slots
 * that are retired and unused. */
/* Streams stuck on the server's side (job->mu held, once a second): a
 * stream that has waited --stream-stall-timeout for its next sample while
 * the job sent no sample and the server read nothing from the store ends
 * with a retryable error. Its heartbeats told the consumer the server was
 * alive; this tells it the server is not getting anywhere (a store hung
 * past its own timeouts, a disk that does not answer), so it comes back
 * or goes to another replica. */
static void stall_check(sc_jobs *j, sc_job *job, uint64_t now)
{
    uint64_t limit = (uint64_t)j->cfg->stream_stall_timeout * 1000u;
    uint64_t sent = atomic_load(&job->ctr.samples);
    sio_io_stats ios;
    sio_io_get_stats(j->io, &ios);
    if (!job->prog_ms || sent != job->prog_samples ||
        ios.bytes != job->prog_bytes) {
        job->prog_samples = sent;
        job->prog_bytes = ios.bytes;
        job->prog_ms = now;
        return;
    }
    if (!limit || now - job->prog_ms < limit)
        return;
    for (sc_binding *b = job->bindings; b; b = b->next) {
        uint64_t w = b->s ? sc_stream_waiting_ms(b->s, now) : 0;
        if (w < limit)
            continue;
        char why[300];
        snprintf(why, sizeof why,
                 "no sample for %" PRIu64 " s and the job made no progress "
                 "meanwhile (--stream-stall-timeout %" PRIu32 " s): the "
                 "server is stuck (a store or disk that does not answer); "
                 "come back or read from another replica",
                 w / 1000u, j->cfg->stream_stall_timeout);
        SC_LOG(SIO_LOG_WARN,
               "event=stream_stalled job=%s epoch=%" PRIu64 " rank=%" PRIu32
               " world=%" PRIu32 " waited_ms=%" PRIu64,
               job->spec.name, b->epoch, b->rank, b->world, w);
        atomic_fetch_add(&job->streams_stalled, 1);
        sc_stream_cut_retry(b->s, why, 1000);
    }
}

static void job_tick(sc_jobs *j, sc_job *job, uint64_t now, int sample_tp)
{
    const sc_config *cfg = j->cfg;
    fslot *closing = NULL;
    fslot *to_plan = NULL; /* a prefetched epoch whose plan is built */
    fslot *to_count = NULL; /* an epoch whose length is counted */
    int look = 0; /* the local shards' files, for /samples/{i} */

    pthread_mutex_lock(&job->mu);
    if (sample_tp) {
        tp_sample *t = &job->ring[job->ring_at];
        t->ms = now;
        t->samples = atomic_load(&job->ctr.samples);
        t->bytes = atomic_load(&job->ctr.bytes);
        job->ring_at = (job->ring_at + 1) % RING;
        if (job->nring < RING)
            job->nring++;
        /* Once a second, give every waiting stream back to MHD's event
         * loop: a suspended connection is not polled, so a consumer that
         * went away while its stream waited (for a slow peer, a missing
         * rank) would otherwise hold its cursor, and the window, until
         * data came. Resumed with nothing to send, the stream suspends
         * again; a closed socket ends the request and frees the cursor. */
        for (sc_binding *b = job->bindings; b; b = b->next)
            sc_stream_notify(b->s);
        stall_check(j, job, now);
        look = job->res->list && job->res->samples_asked_ms &&
               now - job->res->samples_asked_ms < SAMPLES_LOOK_WINDOW_MS;
    }
    for (fslot *s = job->slots; s; s = s->next) {
        if (s->retired)
            continue;
        slot_indexes_checked(j, s);
        /* A shard skipped in an epoch this server cannot prove it served
         * the same way before a restart (no state_dir): resumed streams
         * get a clear error instead of a shifted sequence. */
        if (s->unproven && sio_journal_count(s->journal) > 0) {
            for (sc_binding *b = job->bindings; b; b = b->next)
                if (b->slot == s && b->resumed)
                    sc_stream_cut(b->s,
                                  "a shard was skipped in this epoch and "
                                  "without --state-dir the sequence served "
                                  "before the restart cannot be proven: "
                                  "restart the epoch, or set --state-dir");
            s->unproven = 0;
        }
        /* A growing plan parked while its staging waits for room: its
         * lag rules are looked at again each tick (a rank past
         * --lag-grace-ms is detached and its shards let go). */
        if (s->plan && sio_plan_parked(s->plan) &&
            sio_plan_stage_blocked(s->plan))
            grow_enqueue(j, job, s);
        sio_feed_stats st;
        sio_feed_get_stats(s->feed, &st, NULL, 0, NULL);
        if (s->streams == 0 && s->pins == 0 &&
            (st.failed || now - s->last_ms >= cfg->feed_idle_ms)) {
            s->retired = 1;
            continue;
        }
        /* The epoch's exact length, once every shard is indexed: counted
         * below with the lock released (the count may check a shard
         * index against the store), one epoch a tick. A slot not retired
         * is not closed this tick, and only this thread closes slots. */
        if (sample_tp && s->count == UINT64_MAX && job->res->list &&
            !to_count)
            to_count = s;
        /* The next epoch is opened ahead once this one has been read, or,
         * for an epoch served from its plan (its feed reads nothing), at
         * once: its plan then, when it can have one, else its feed's
         * window. A plan that still grows first: its steps are reading
         * the shards, and the next epoch's plan is built from the indexes
         * they write (a feed opened ahead now would read them twice). */
        /* Only this server's own part: the consumers of another
         * replica's part return to it at their next epoch. */
        uint32_t own = cfg->replicas > 1 ? cfg->replica : 0;
        if (cfg->prefetch && !job->removed &&
            (st.ended || (s->plan && sio_plan_complete(s->plan))) &&
            !st.failed && s->served > 0 && s->epoch < UINT64_MAX &&
            s->part == own && !live_slot(job, s->epoch + 1, own) &&
            live_slots(job, own) < cfg->max_epochs &&
            job->nfeeds < cfg->max_feeds_job &&
            atomic_load(&j->nfeeds) < cfg->max_feeds) {
            fslot *n = NULL;
            sio_error err = {SIO_OK, ""};
            int planned = plan_next_possible(j, job, s);
            if (slot_open(j, job, s->epoch + 1, own, !planned, &n, &err) ==
                SIO_OK) {
                n->prefetched = 1;
                if (planned && !to_plan) {
                    to_plan = n;
                    n->pins++; /* pinned until its plan is built */
                }
                SC_LOG(SIO_LOG_DEBUG,
                       "event=prefetch job=%s epoch=%" PRIu64 " what=%s",
                       job->spec.name, n->epoch, planned ? "plan" : "feed");
            }
        }
    }
    for (fslot **pp = &job->slots; *pp;) {
        fslot *s = *pp;
        if (s->retired && s->streams == 0 && s->pins == 0) {
            *pp = s->next;
            s->next = closing;
            closing = s;
            continue;
        }
        pp = &s->next;
    }
    if (to_plan) {
        /* Queued for the planner, which pins the slot while it builds. */
        int pending = 0;
        (void)slot_plan(j, job, to_plan, &pending);
        to_plan->pins--;
        to_plan->last_ms = sio_now_ms();
    }
    if (to_count) {
        uint64_t n = UINT64_MAX;
        pthread_mutex_unlock(&job->mu);
        sio_epoch_count(j->io, job->res->list, &to_count->ec, &n);
        pthread_mutex_lock(&job->mu);
        /* An index dropped meanwhile is seen at the next tick, which
         * counts again (slot_indexes_checked). */
        if (to_count->count == UINT64_MAX)
            to_count->count = n;
    }
    pthread_mutex_unlock(&job->mu);
    /* (the list is immutable once set; the job is referenced) */
    const sio_shardlist *l = look ? job->res->list : NULL;
    for (size_t i = 0; l && i < sio_shardlist_count(l); i++)
        (void)sio_index_refresh(sio_index_peek(j->index,
                                               sio_shardlist_url(l, i)));
    while (closing) {
        fslot *n = closing->next;
        slot_close(job, closing);
        closing = n;
    }
}

static void *manager_main(void *arg)
{
    sc_jobs *j = arg;
    uint64_t last_tp = 0;
    sc_job **snap = calloc(j->cfg->max_jobs, sizeof *snap);

    pthread_mutex_lock(&j->mu);
    while (!j->stop || j->reap || j->dead) {
        while (j->reap) {
            sc_binding *b = j->reap;
            j->reap = b->reap_next;
            pthread_mutex_unlock(&j->mu);
            reap_one(j, b);
            pthread_mutex_lock(&j->mu);
        }
        if (j->dead) {
            while (j->dead) {
                sc_job *job = j->dead;
                j->dead = job->dead_next;
                pthread_mutex_unlock(&j->mu);
                job_free(job);
                pthread_mutex_lock(&j->mu);
            }
            pthread_mutex_unlock(&j->mu);
            heap_give_back();
            pthread_mutex_lock(&j->mu);
        }
        if (j->stop)
            continue;
        uint64_t now = sio_now_ms();
        size_t n = 0;
        if (snap)
            for (size_t i = 0; i < j->njobs; i++) {
                snap[n] = j->jobs[i];
                job_ref(snap[n++]);
            }
        pthread_mutex_unlock(&j->mu);
        int tp = now - last_tp >= 1000u;
        if (tp) {
            last_tp = now;
            sio_pool_tick(); /* idle sample memory decays while idle too */
        }
        for (size_t i = 0; i < n; i++) {
            job_tick(j, snap[i], now, tp);
            sc_job_unref(snap[i]);
        }
        if (tp)
            sample_fetches_expire(j, 0);
        pthread_mutex_lock(&j->mu);
        if (j->reap || j->dead || j->stop)
            continue;
        struct timespec ts;
        deadline_in(&ts, TICK_MS);
        pthread_cond_timedwait(&j->work, &j->mu, &ts);
    }
    j->running--;
    pthread_cond_broadcast(&j->drained);
    pthread_mutex_unlock(&j->mu);
    free(snap);
    return NULL;
}

sio_code sc_jobs_create(const sc_config *cfg, sio_io *io, sc_jobs **out,
                        char *msg, size_t msg_len)
{
    sc_jobs *j = calloc(1, sizeof *j);
    pthread_condattr_t ca;

    *out = NULL;
    if (!j || !(j->jobs = calloc(cfg->max_jobs, sizeof *j->jobs))) {
        free(j);
        fail(msg, msg_len, "out of memory");
        return SIO_ERR_NOMEM;
    }
    j->cfg = cfg;
    j->io = io;
    {
        /* The shard indexes: state_dir/index, or memory only. */
        char dir[4096];
        sio_index_config ic = {0};
        sio_error e;
        ic.sidecars = cfg->index_sidecars;
        ic.probe_sidecars = cfg->index_sidecars_probe;
        ic.log.fn = sc_log_sio;
        ic.log.level = sc_log_level();
        if (cfg->state_dir) {
            snprintf(dir, sizeof dir, "%s/index", cfg->state_dir);
            ic.dir = dir; /* created with its parents */
        }
        if (sio_index_open(&ic, &j->index, &e) != SIO_OK) {
            free(j->jobs);
            free(j);
            fail(msg, msg_len, "state_dir: %s", e.msg);
            return SIO_ERR_IO;
        }
        if (cfg->state_dir) {
            snprintf(dir, sizeof dir, "%s/journal", cfg->state_dir);
            if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
                fail(msg, msg_len, "state_dir: cannot create %s: %s", dir,
                     strerror(errno));
                sio_index_close(j->index);
                free(j->jobs);
                free(j);
                return SIO_ERR_IO;
            }
        }
        if (cfg->cache_bytes) {
            /* The shard cache: cache_dir, state_dir/cache, or memory. */
            sio_cache_config cc = {0};
            cc.budget = cfg->cache_bytes;
            cc.idle_s = cfg->cache_idle;
            cc.log.fn = sc_log_sio;
            cc.log.level = sc_log_level();
            if (cfg->cache_dir) {
                cc.dir = cfg->cache_dir;
            } else if (cfg->state_dir) {
                snprintf(dir, sizeof dir, "%s/cache", cfg->state_dir);
                cc.dir = dir;
            }
            if (sio_cache_create(&cc, &j->cache, &e) != SIO_OK) {
                fail(msg, msg_len, "cache: %s", e.msg);
                sio_index_close(j->index);
                free(j->jobs);
                free(j);
                return SIO_ERR_IO;
            }
            SC_LOG(SIO_LOG_INFO,
                   "event=cache_open where=%s budget=%" PRIu64,
                   cc.dir ? cc.dir : "memory", cfg->cache_bytes);
        }
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->work, &ca);
    pthread_cond_init(&j->resolve, &ca);
    pthread_cond_init(&j->resolved, &ca);
    pthread_cond_init(&j->drained, &ca);
    pthread_cond_init(&j->sf_ended, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&j->plan_mu, NULL);
    pthread_cond_init(&j->plan_work, NULL);
    pthread_mutex_init(&j->sf_mu, NULL);
    pthread_cond_init(&j->sf_work, NULL);
    atomic_init(&j->nbindings, 0);
    /* The planners first: a job's first stream may queue a build. Not in
     * `running`: they are stopped and joined before the other two. */
    while (j->nplanners < SC_PLANNERS &&
           pthread_create(&j->planner[j->nplanners], NULL, planner_main,
                          j) == 0)
        j->nplanners++;
    j->running = 2; /* before the threads exist: they decrement it */
    j->manager_ok = pthread_create(&j->manager, NULL, manager_main, j) == 0;
    if (!j->manager_ok)
        j->running--;
    j->resolver_ok =
        j->manager_ok &&
        pthread_create(&j->resolver, NULL, resolver_main, j) == 0;
    if (!j->resolver_ok)
        j->running--;
    if (!j->resolver_ok || j->nplanners < SC_PLANNERS) {
        sc_jobs_destroy(j);
        fail(msg, msg_len, "cannot start the jobs threads");
        return SIO_ERR_NOMEM;
    }
    *out = j;
    return SIO_OK;
}

int sc_jobs_destroy(sc_jobs *j)
{
    struct timespec ts;
    if (!j)
        return 0;
    /* Drop the registry's references: the jobs go to the dead list. */
    pthread_mutex_lock(&j->mu);
    size_t n = j->njobs;
    sc_job **jobs = j->jobs;
    j->njobs = 0;
    pthread_mutex_unlock(&j->mu);
    for (size_t i = 0; i < n; i++) {
        job_remove(jobs[i], "server shutting down");
        sc_job_unref(jobs[i]);
    }
    /* The planners end the builds they run (metadata only: bounded by
     * the epoch's length) and give the queue back, before the manager
     * stops: the job references they drop may be the last. */
    pthread_mutex_lock(&j->plan_mu);
    j->plan_stop = 1;
    pthread_cond_broadcast(&j->plan_work);
    pthread_mutex_unlock(&j->plan_mu);
    while (j->nplanners > 0)
        pthread_join(j->planner[--j->nplanners], NULL);
    /* The sample threads end the fetches they run (a read from the
     * store: bounded by its timeouts, waited for as long as the others
     * below), and what they fetched is let go. */
    pthread_mutex_lock(&j->sf_mu);
    j->sf_stop = 1;
    pthread_cond_broadcast(&j->sf_work);
    deadline_in(&ts, SHUTDOWN_WAIT_MS);
    while (j->sf_running > 0 &&
           pthread_cond_timedwait(&j->sf_ended, &j->sf_mu, &ts) == 0)
        ;
    int sf_stuck = j->sf_running > 0;
    sample_fetch *sf = j->sf_head;
    j->sf_head = NULL;
    j->nsf = 0;
    pthread_mutex_unlock(&j->sf_mu);
    if (sf_stuck) {
        SC_LOG(SIO_LOG_WARN, "event=jobs_shutdown_incomplete "
               "sample_threads=%u", j->sf_running);
        return -1;
    }
    while (j->nsfetchers > 0)
        pthread_join(j->sfetcher[--j->nsfetchers], NULL);
    while (sf) {
        sample_fetch *x = sf;
        sf = x->next;
        sample_fetch_free(x);
    }
    pthread_mutex_lock(&j->mu);
    j->stop = 1;
    pthread_cond_broadcast(&j->work);
    pthread_cond_broadcast(&j->resolve);
    deadline_in(&ts, SHUTDOWN_WAIT_MS);
    while (j->running > 0 &&
           pthread_cond_timedwait(&j->drained, &j->mu, &ts) == 0)
        ;
    int stuck = j->running > 0;
    pthread_mutex_unlock(&j->mu);
    if (stuck) {
        /* A thread is inside object-store I/O that outlives the wait: the
         * registry stays allocated for it and the caller exits. */
        SC_LOG(SIO_LOG_WARN, "event=jobs_shutdown_incomplete threads=%d",
               j->running);
        return -1;
    }
    if (j->resolver_ok)
        pthread_join(j->resolver, NULL);
    if (j->manager_ok)
        pthread_join(j->manager, NULL);
    /* The last reference to a job (or a binding to reap) may have gone
     * after the manager ended: the resolver's, when it finished listing a
     * job removed meanwhile (a PUT just before the signal). Every thread
     * that queues them is joined: they are freed here. */
    while (j->reap) {
        sc_binding *b = j->reap;
        j->reap = b->reap_next;
        reap_one(j, b);
    }
    while (j->dead) {
        sc_job *job = j->dead;
        j->dead = job->dead_next;
        job_free(job);
    }
    /* Feeds still closing (a producer inside object-store I/O) use the
     * jobs' lists, journals and the indexes. */
    for (unsigned w = 0; sio_io_busy(j->io) > 0 && w < CLOSERS_WAIT_MS / 10;
         w++)
        usleep(10000);
    if (sio_io_busy(j->io) > 0) {
        SC_LOG(SIO_LOG_WARN, "event=jobs_shutdown_incomplete closers=%d",
               sio_io_busy(j->io));
        return -1;
    }
    /* After every job (their views are gone), before the io. */
    if (sio_cache_destroy(j->cache) != 0)
        return -1;
    sio_index_close(j->index);
    /* Without a manager thread (start-up failure) nothing is queued. */
    pthread_cond_destroy(&j->drained);
    pthread_cond_destroy(&j->resolved);
    pthread_cond_destroy(&j->resolve);
    pthread_cond_destroy(&j->work);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->plan_work);
    pthread_mutex_destroy(&j->plan_mu);
    pthread_cond_destroy(&j->sf_work);
    pthread_cond_destroy(&j->sf_ended);
    pthread_mutex_destroy(&j->sf_mu);
    free(j->jobs);
    free(j);
    return 0;
}
