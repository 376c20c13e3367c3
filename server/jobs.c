/*
 * jobs.c — the job registry, the feeds of the epochs in flight, the manager
 * and resolver threads, status JSON and job metrics (contract and lock
 * order in jobs.h).
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
#include "jobs.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "shardio_cache.h"
#include "shardio_index.h"

/* Manager tick: timers (idle feeds, prefetch, throughput) need no finer
 * resolution. */
#define TICK_MS 500u
/* Throughput is measured over the last THROUGHPUT_SECONDS, sampled every
 * second. */
#define THROUGHPUT_SECONDS 10u
#define RING (THROUGHPUT_SECONDS + 1u)
/* Resolution retries back off from 1 s to 60 s. */
#define RESOLVE_BACKOFF_MIN_MS 1000u
#define RESOLVE_BACKOFF_MAX_MS 60000u
#define REASON_MAX 512u
/* Epoch journals a job keeps open (the least recently used goes; with a
 * state_dir it is read back when needed again). */
#define JOURNALS_MAX 64u
/* A server that ends with feeds still closing waits this long for them. */
#define CLOSERS_WAIT_MS 5000u

enum { JOB_RESOLVING = 0, JOB_READY = 1, JOB_FAILED = 2 };

typedef struct fslot {
    uint64_t epoch;
    sio_feed *feed;
    unsigned streams;     /* bindings on it */
    uint64_t served;      /* streams ever opened on it */
    uint64_t last_ms;     /* last attach or release */
    int prefetched;       /* opened by prefetch, no stream yet */
    int retired;          /* takes no new stream; closed when streams == 0 */
    sio_journal *journal; /* the epoch's skip decisions (owned by the job) */
    int fresh_journal;    /* its journal was new to this process */
    int unproven;         /* opened for a resume with no journal to prove
                             the sequence (no state_dir, fresh process) */
    uint64_t count;       /* samples of the epoch, UINT64_MAX: unknown */
    sio_epoch_config ec;  /* what fixes its order */
    int partition;        /* the job's policy */
    struct fslot *next;
} fslot;

typedef struct sc_job sc_job;

/* What a job's feeds read while they run: the shard list and the epoch
 * journals. Feeds may finish closing after their job is freed (a closer
 * thread), so these live until the job and every feed family let go. */
typedef struct job_res {
    atomic_int refs;
    sio_shardlist *list;       /* set once (job mu), then immutable */
    pthread_mutex_t mu;        /* guards the journal table */
    struct {
        uint64_t epoch, used;
        unsigned users;        /* feed families reading it */
        sio_journal *j;
    } journals[JOURNALS_MAX];
    size_t njournals;
    uint64_t clock;
    uint64_t samples;          /* the dataset's good samples once every
                                  shard is indexed (0: not known yet) */
    sio_cache_user *cache;     /* the job's view of the shard cache (NULL:
                                  no cache, or cache=off) */
    /* A mixed job (or one with an epoch_size): its sources as parts of
     * the list with their quotas, set with the list. */
    sio_mix_source *mix;
    uint32_t nmix;
    char (*mix_names)[SC_MIX_NAME_MAX + 1];
    _Atomic uint64_t *mix_sent; /* samples sent, per source */
    /* provenance on the wire (a job with "sources"; NULL otherwise) */
    sio_frames_source *mix_frames;
    const char **mix_name_ptrs;
} job_res;

/* One feed family's hold on the resources and its journal. */
typedef struct res_hold {
    struct job_res *res;
    sio_journal *j;
} res_hold;

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

struct sc_binding {
    sc_stream *s;
    sc_job *job;
    fslot *slot;
    sio_cursor *cur;
    uint64_t epoch;
    uint32_t rank, world;
    int resumed;             /* start or global_start > 0 */
    sio_feed *own_feed;      /* a /samples/{i} request's one-sample feed */
    sc_binding *prev, *next; /* job->bindings */
    sc_binding *reap_next;
};

typedef struct err_entry {
    uint64_t unix_ms;
    char msg[300];
} err_entry;

typedef struct tp_sample {
    uint64_t ms, samples, bytes;
} tp_sample;

struct sc_job {
    sc_jobs *owner;
    atomic_int refs;
    sc_jobspec spec;
    pthread_mutex_t mu;
    int state;                 /* JOB_* (mu) */
    int attempts;              /* resolution attempts (mu) */
    int removed;               /* deleted or replaced (mu) */
    char reason[REASON_MAX];   /* why not ready (mu) */
    uint64_t next_resolve_ms, backoff_ms;
    fslot *slots;              /* live and retired (mu) */
    sc_binding *bindings;      /* (mu) */
    err_entry errors[SC_JOB_ERRORS_MAX];
    size_t nerrors, error_at;  /* (mu) */
    tp_sample ring[RING];
    size_t nring, ring_at;     /* (mu) */
    uint64_t shards_skipped_closed, samples_skipped_closed; /* (mu) */
    sio_feed_seek_stats seeks_closed; /* of closed feeds (mu) */
    sc_stream_counters ctr;
    job_res *res;              /* shard list, journals */
    atomic_uint_fast64_t streams_by_outcome[5];
    atomic_uint_fast64_t streams_opened;
    sc_job *dead_next;
    size_t nfeeds;             /* slots, live and retired (mu) */
    double epoch_tokens;       /* new-epoch bucket (mu) */
    uint64_t epoch_tokens_ms;  /* its last refill (mu); 0: full */
};

struct sc_jobs {
    const sc_config *cfg;
    sio_io *io;
    sio_index *index;        /* shard indexes of every job */
    sio_cache *cache;        /* the shard cache (NULL: none) */
    _Atomic uint32_t seeks;  /* seek feeds open in the server */
    pthread_mutex_t mu;
    pthread_cond_t work;     /* manager: something queued, or stop */
    pthread_cond_t resolve;  /* resolver: a job to resolve, or stop */
    pthread_cond_t resolved; /* sc_jobs_wait_resolved */
    sc_job **jobs;           /* cfg->max_jobs entries */
    size_t njobs;
    sc_binding *reap;        /* released, not yet freed */
    pthread_cond_t drained;  /* a binding was freed */
    atomic_size_t nbindings; /* bound and not yet freed (atomic: bumped
                                under a job mutex) */
    sc_job *dead;
    int stop;
    int running;             /* jobs threads not yet exited (mu) */
    pthread_t manager, resolver;
    int manager_ok, resolver_ok;
    /* Epoch-churn bounds (feed_admission): feeds open, live and retired,
     * over every job; and how often each bound refused a new epoch. */
    atomic_size_t nfeeds;
    atomic_uint_fast64_t refused[SC_REFUSED_COUNT];
};

/* How long sc_jobs_destroy waits for its threads: a resolution or a feed
 * close may be stuck in object-store retries far longer. */
#define SHUTDOWN_WAIT_MS 5000u

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

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
static void job_unref(sc_job *job)
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
static void seek_add(sio_feed_seek_stats *a, const sio_feed_seek_stats *b)
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
        job->shards_skipped_closed += st.epoch.shards_skipped;
        st.seek.active = st.seek.replaying = 0;
        st.seek.window_bytes = 0;
        seek_add(&job->seeks_closed, &st.seek);
        job->samples_skipped_closed += st.epoch.samples_skipped;
        pthread_mutex_unlock(&job->mu);
    }
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

static sc_job *get_job(sc_jobs *j, const char *name)
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
    char src[256];

    job = job_new(j, spec);
    if (!job) {
        fail(reason, reason_len, "out of memory");
        return 503;
    }
    pthread_mutex_lock(&j->mu);
    size_t i = find_job(j, spec->name);
    if (i != SIZE_MAX && sc_jobspec_equal(&j->jobs[i]->spec, spec)) {
        pthread_mutex_unlock(&j->mu);
        job_free(job); /* never shared: no feed, nothing to join */
        fail(reason, reason_len, "unchanged");
        return 200;
    }
    if (i == SIZE_MAX && j->njobs >= j->cfg->max_jobs) {
        pthread_mutex_unlock(&j->mu);
        job_free(job);
        fail(reason, reason_len, "job limit reached (--max-jobs %u)",
             j->cfg->max_jobs);
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
        job_unref(old);
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
    }
    pthread_mutex_unlock(&j->mu);
    if (!job) {
        fail(reason, reason_len, "unknown job");
        return 404;
    }
    job_remove(job, "job deleted");
    job_unref(job);
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

/* Good samples of shards [first, first + count) of list, indexing those
 * not indexed yet (a repeat quota needs the count before the epoch). */
static sio_code count_part(sc_jobs *j, sc_job *job, const sio_shardlist *list,
                           uint32_t first, uint32_t count, uint64_t *n,
                           sio_error *err)
{
    sio_epoch_config ec;
    sio_shard_limits lim = {0};
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
        sio_index_get_info(e, &info);
        if (info.complete)
            continue;
        pthread_mutex_lock(&job->mu);
        snprintf(job->reason, sizeof job->reason,
                 "indexing a source with a repeat quota (%u of %u shards)",
                 k, count);
        pthread_mutex_unlock(&job->mu);
        sio_code rc = sio_index_build(j->io, u, idx, &lim, e, err);
        if (rc)
            return rc;
    }
    memset(&ec, 0, sizeof ec);
    ec.interleave = 1;
    ec.buffer_samples = 1;
    ec.index = j->index;
    ec.range_first = first;
    ec.range_count = count;
    if (sio_epoch_count(j->io, list, &ec, n) != SIO_OK)
        return jerr(err, SIO_ERR_IO, "no sample count for a source");
    return SIO_OK;
}

/* Resolve a job's source, or each of its sources into one list with the
 * quotas of a mixed epoch (an epoch_size alone makes one source). */
static sio_code resolve_job(sc_jobs *j, sc_job *job, sio_shardlist **out,
                            job_mix *mix, sio_error *err)
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
        return sio_shardlist_resolve(j->io, sp->source, out, err);
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
        rc = sio_shardlist_resolve(j->io, ms[i].source, &parts[i], err);
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
        first += mix->src[i].count;
        if (first > UINT32_MAX) { /* the concatenation refuses sooner */
            rc = jerr(err, SIO_ERR_LIMIT, "too many shards");
            goto out;
        }
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

static void *resolver_main(void *arg)
{
    sc_jobs *j = arg;
    pthread_mutex_lock(&j->mu);
    while (!j->stop) {
        uint64_t now = now_ms(), next = now + 5000u;
        sc_job *todo = NULL;
        for (size_t i = 0; i < j->njobs; i++) {
            sc_job *job = j->jobs[i];
            pthread_mutex_lock(&job->mu);
            if (job->state != JOB_READY) {
                if (job->next_resolve_ms <= now && !todo) {
                    todo = job;
                    job_ref(job);
                } else if (job->next_resolve_ms < next) {
                    next = job->next_resolve_ms;
                }
            }
            pthread_mutex_unlock(&job->mu);
        }
        if (!todo) {
            struct timespec ts;
            deadline_in(&ts, next > now ? next - now : 1);
            pthread_cond_timedwait(&j->resolve, &j->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&j->mu);

        /* Listing a bucket may take a while: no lock is held. spec.source
         * is immutable for the job's life. */
        sio_shardlist *list = NULL;
        sio_error err = {SIO_OK, ""};
        char src[256], msg[600];
        job_mix mix;
        memset(&mix, 0, sizeof mix);
        sio_code rc = resolve_job(j, todo, &list, &mix, &err);
        if (rc == SIO_OK && sio_shardlist_count(list) == 0) {
            rc = SIO_ERR_NOTFOUND;
            snprintf(err.msg, sizeof err.msg, "the source has no shards");
        }
        sc_redact_source(todo->spec.source, src, sizeof src);
        pthread_mutex_lock(&todo->mu);
        todo->attempts++;
        if (rc == SIO_OK) {
            todo->res->list = list;
            list = NULL;
            todo->res->mix = mix.src;
            todo->res->nmix = mix.n;
            todo->res->mix_names = mix.names;
            todo->res->mix_sent = mix.sent;
            todo->res->mix_frames = mix.frames;
            todo->res->mix_name_ptrs = mix.name_ptrs;
            memset(&mix, 0, sizeof mix);
            todo->state = JOB_READY;
            todo->reason[0] = '\0';
            SC_LOG(SIO_LOG_INFO, "event=job_ready job=%s shards=%zu",
                   todo->spec.name, sio_shardlist_count(todo->res->list));
        } else {
            todo->state = JOB_FAILED;
            snprintf(msg, sizeof msg, "cannot resolve the source: %s",
                     err.msg[0] ? err.msg : sio_strerror(rc));
            sc_redact_source(msg, todo->reason, sizeof todo->reason);
            job_error(todo, msg);
            todo->next_resolve_ms = now_ms() + todo->backoff_ms;
            todo->backoff_ms = todo->backoff_ms * 2 > RESOLVE_BACKOFF_MAX_MS
                                   ? RESOLVE_BACKOFF_MAX_MS
                                   : todo->backoff_ms * 2;
            SC_LOG(SIO_LOG_WARN,
                   "event=job_source_failed job=%s source=\"%s\" code=%d "
                   "retry_ms=%" PRIu64,
                   todo->spec.name, src, (int)rc,
                   todo->next_resolve_ms - now_ms());
        }
        pthread_mutex_unlock(&todo->mu);
        sio_shardlist_free(list);
        job_mix_free(&mix);
        job_unref(todo);
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

/* The journal of (job, epoch), held for one more feed family: open, or
 * opened now. With a state_dir it lives in state_dir/journal/<job>-<hash
 * of what fixes the order>/<epoch>, so a redefined job starts afresh; a
 * journal no feed reads may be closed to make room (it is read back from
 * the file when needed again; without a state_dir its decisions are
 * forgotten, see slot->unproven). */
static sio_journal *job_journal(sc_jobs *j, sc_job *job, uint64_t epoch,
                                int *fresh, sio_error *err)
{
    job_res *r = job->res;
    sio_journal *jr = NULL;
    *fresh = 0;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->njournals; i++)
        if (r->journals[i].epoch == epoch) {
            r->journals[i].used = ++r->clock;
            r->journals[i].users++;
            jr = r->journals[i].j;
            goto out;
        }
    if (r->njournals == JOURNALS_MAX) {
        size_t victim = SIZE_MAX;
        for (size_t i = 0; i < r->njournals; i++)
            if (r->journals[i].users == 0 &&
                (victim == SIZE_MAX ||
                 r->journals[i].used < r->journals[victim].used))
                victim = i;
        if (victim == SIZE_MAX) {
            snprintf(err->msg, sizeof err->msg,
                     "more than %u epochs of one job in use", JOURNALS_MAX);
            goto out;
        }
        sio_journal_close(r->journals[victim].j);
        r->journals[victim] = r->journals[--r->njournals];
    }
    char path[4096], *pp = NULL;
    if (j->cfg->state_dir) {
        const sc_jobspec *sp = &job->spec;
        char key[1200];
        uint64_t h = 0xcbf29ce484222325ull;
        snprintf(key, sizeof key, "%s|%" PRIu64 "|%u|%u|%" PRIu64 "|%d|%u|%u",
                 sp->source, sp->seed, sp->interleave, sp->shuffle_buffer,
                 sp->buffer_bytes, sp->on_error, j->cfg->replica,
                 j->cfg->replicas);
        for (const char *c = key; *c; c++)
            h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        snprintf(path, sizeof path, "%s/journal/%s-%016" PRIx64,
                 j->cfg->state_dir, sp->name, h);
        mkdir(path, 0755);
        size_t l = strlen(path);
        snprintf(path + l, sizeof path - l, "/%" PRIu64, epoch);
        pp = path;
        struct stat st;
        *fresh = stat(path, &st) != 0;
    } else {
        *fresh = 1;
    }
    if (sio_journal_open(pp, &jr, err) != SIO_OK) {
        jr = NULL;
        goto out;
    }
    r->journals[r->njournals].epoch = epoch;
    r->journals[r->njournals].used = ++r->clock;
    r->journals[r->njournals].users = 1;
    r->journals[r->njournals++].j = jr;
out:
    pthread_mutex_unlock(&r->mu);
    return jr;
}

static sio_code slot_open(sc_jobs *j, sc_job *job, uint64_t epoch,
                          int prefetch, fslot **out, sio_error *err)
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
    ec.replica = cfg->replicas > 1 ? cfg->replica : 0;
    ec.replicas = cfg->replicas > 1 ? cfg->replicas : 0;
    /* Inside the memory formula: a larger sample is a bad one (skipped
     * and counted under on_error=skip). */
    ec.limits.sample_max = sc_config_sample_max(cfg);
    ec.limits.member_max = sc_config_field_max(cfg);
    ec.index = j->index;
    ec.cache = job->res->cache;
    ec.mix = job->res->mix;
    ec.nmix = job->res->nmix;
    int fresh = 0;
    ec.journal = s->journal = job_journal(j, job, epoch, &fresh, err);
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
    s->last_ms = now_ms();
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
        uint64_t now = now_ms();
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

static size_t live_slots(const sc_job *job)
{
    size_t n = 0;
    for (const fslot *s = job->slots; s; s = s->next)
        n += !s->retired;
    return n;
}

static fslot *live_slot(sc_job *job, uint64_t epoch)
{
    for (fslot *s = job->slots; s; s = s->next)
        if (!s->retired && s->epoch == epoch)
            return s;
    return NULL;
}

/* Make room for one more epoch: retire a live slot without streams,
 * preferring one whose epoch has ended, then the least recently used. */
static int evict_one(sc_job *job)
{
    fslot *best = NULL;
    int best_ended = 0;
    for (fslot *s = job->slots; s; s = s->next) {
        if (s->retired || s->streams)
            continue;
        sio_feed_stats st;
        size_t held = 0;
        sio_feed_get_stats(s->feed, &st, NULL, 0, &held);
        int ended = st.ended;
        /* The prefetched next epoch is in use until it is read, and so is
         * an epoch whose consumers are detached within their rejoin grace
         * or expected (held counts them, without a walk). */
        if ((s->prefetched && !ended && !st.failed) || (held > 0 && !ended))
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

/* GET /v1/jobs/{job}/samples/{i}: a feed of that one sample, owned by the
 * binding (job->mu held). Returns the HTTP status. */
/* The dataset's sample count if every shard's index is in memory and
 * complete, else 0 (job->mu held; reads no file). Cached once known. */
static uint64_t dataset_samples(sc_jobs *j, sc_job *job)
{
    const sio_shardlist *l = job->res->list;
    uint64_t total = 0;
    if (job->res->samples || !l)
        return job->res->samples;
    for (size_t i = 0; i < sio_shardlist_count(l); i++) {
        sio_index_entry *e = sio_index_peek(j->index, sio_shardlist_url(l, i));
        sio_index_info info;
        if (!e)
            return 0;
        sio_index_get_info(e, &info);
        if (!info.complete)
            return 0;
        total += info.good;
    }
    job->res->samples = total;
    return total;
}

static unsigned open_sample(sc_jobs *j, sc_job *job, const sc_request *req,
                            sc_stream *s, sc_binding *b, sio_error *err,
                            unsigned *retry_after)
{
    uint64_t n = dataset_samples(j, job);
    if (n && req->global_start >= n) {
        snprintf(err->msg, sizeof err->msg,
                 "sample %" PRIu64 " is past the dataset's %" PRIu64
                 " samples", req->global_start, n);
        return 404;
    }
    sio_epoch_config ec;
    sio_feed_config fc;
    sio_cursor_config cc;
    res_hold *hold = malloc(sizeof *hold);
    sio_code rc;
    if (!hold) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return 503;
    }
    memset(&ec, 0, sizeof ec);
    ec.interleave = 1;
    ec.buffer_samples = 1;
    ec.index = j->index;
    ec.cache = job->res->cache;
    ec.limits = (sio_shard_limits){0};
    ec.log.fn = sc_log_sio;
    ec.log.level = sc_log_level();
    memset(&fc, 0, sizeof fc);
    hold->res = job->res;
    hold->j = NULL;
    fc.released = slot_released;
    fc.released_userdata = hold;
    atomic_fetch_add(&job->res->refs, 1);
    rc = sio_feed_open_sample(j->io, job->res->list, &ec, req->global_start,
                              &fc, &b->own_feed, err);
    if (rc) {
        slot_released(hold);
        *retry_after = 2;
        return rc == SIO_ERR_INVALID ? 400 : 503;
    }
    memset(&cc, 0, sizeof cc);
    cc.rank = 0;
    cc.world = 1;
    cc.policy = SIO_PARTITION_NONE;
    cc.global_start = req->global_start;
    cc.notify = sc_stream_notify;
    cc.userdata = s;
    rc = sio_feed_attach(b->own_feed, &cc, &b->cur, err);
    if (rc) {
        sio_feed_close(b->own_feed);
        b->own_feed = NULL;
        return rc == SIO_ERR_INVALID ? 400 : 503;
    }
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
    sc_job *job = get_job(j, req->job);
    if (!job) {
        fail(reason, reason_len, "unknown job");
        return 404;
    }
    sc_binding *b = calloc(1, sizeof *b);
    if (!b) {
        fail(reason, reason_len, "out of memory");
        job_unref(job);
        return 503;
    }
    pthread_mutex_lock(&job->mu);
    if (job->removed) {
        fail(reason, reason_len, "unknown job");
        status = 404;
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
    job_unref(job);
    return status;
}

void sc_jobs_stream_abort(sc_jobs *j, sc_binding *b)
{
    (void)j;
    if (!b)
        return;
    job_unref(b->job);
    free(b);
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
    slot = live_slot(job, req->epoch);
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
        if (!status)
            status = feed_admission(j, job, req->epoch, retry_after, reason,
                                    reason_len);
        if (status)
            goto out;
        status = 500;
        if (live_slots(job) >= j->cfg->max_epochs && !evict_one(job)) {
            char list[200] = "";
            size_t o = 0;
            for (fslot *x = job->slots; x && o + 24 < sizeof list; x = x->next)
                if (!x->retired)
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
        rc = slot_open(j, job, req->epoch, 0, &slot, &err);
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
    slot->streams++;
    slot->served++;
    slot->prefetched = 0;
    slot->last_ms = now_ms();
    b->slot = slot;
bound:
    sc_stream_set_cursor(s, b->cur);
    b->s = s;
    b->epoch = req->epoch;
    b->rank = req->rank;
    b->world = req->world;
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

    /* Closing the cursor stops its notifications (it may close a private
     * replay, which joins a thread): no lock held. */
    sio_cursor_close(b->cur);
    sio_feed_close(b->own_feed);
    sc_stream_get_stats(b->s, &st);
    pthread_mutex_lock(&job->mu);
    if (b->slot) {
        b->slot->streams--;
        b->slot->last_ms = now_ms();
    }
    if (b->prev)
        b->prev->next = b->next;
    else
        job->bindings = b->next;
    if (b->next)
        b->next->prev = b->prev;
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
    job_unref(job);
}

/* Timers of one job: throughput, retirement, prefetch; closes the slots
 * that are retired and unused. */
static void job_tick(sc_jobs *j, sc_job *job, uint64_t now, int sample_tp)
{
    const sc_config *cfg = j->cfg;
    fslot *closing = NULL;

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
    }
    for (fslot *s = job->slots; s; s = s->next) {
        if (s->retired)
            continue;
        /* The epoch's exact length, once every shard is indexed. */
        if (sample_tp && s->count == UINT64_MAX && job->res->list)
            sio_epoch_count(j->io, job->res->list, &s->ec, &s->count);
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
        sio_feed_stats st;
        sio_feed_get_stats(s->feed, &st, NULL, 0, NULL);
        if (s->streams == 0 &&
            (st.failed || now - s->last_ms >= cfg->feed_idle_ms)) {
            s->retired = 1;
            continue;
        }
        if (cfg->prefetch && !job->removed && st.ended && !st.failed &&
            s->served > 0 && s->epoch < UINT64_MAX &&
            !live_slot(job, s->epoch + 1) &&
            live_slots(job) < cfg->max_epochs &&
            job->nfeeds < cfg->max_feeds_job &&
            atomic_load(&j->nfeeds) < cfg->max_feeds) {
            fslot *n = NULL;
            sio_error err = {SIO_OK, ""};
            if (slot_open(j, job, s->epoch + 1, 1, &n, &err) == SIO_OK) {
                n->prefetched = 1;
                SC_LOG(SIO_LOG_DEBUG, "event=prefetch job=%s epoch=%" PRIu64,
                       job->spec.name, n->epoch);
            }
        }
    }
    for (fslot **pp = &job->slots; *pp;) {
        fslot *s = *pp;
        if (s->retired && s->streams == 0) {
            *pp = s->next;
            s->next = closing;
            closing = s;
            continue;
        }
        pp = &s->next;
    }
    pthread_mutex_unlock(&job->mu);
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
        while (j->dead) {
            sc_job *job = j->dead;
            j->dead = job->dead_next;
            pthread_mutex_unlock(&j->mu);
            job_free(job);
            pthread_mutex_lock(&j->mu);
        }
        if (j->stop)
            continue;
        uint64_t now = now_ms();
        size_t n = 0;
        if (snap)
            for (size_t i = 0; i < j->njobs; i++) {
                snap[n] = j->jobs[i];
                job_ref(snap[n++]);
            }
        pthread_mutex_unlock(&j->mu);
        int tp = now - last_tp >= 1000u;
        if (tp)
            last_tp = now;
        for (size_t i = 0; i < n; i++) {
            job_tick(j, snap[i], now, tp);
            job_unref(snap[i]);
        }
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
    pthread_condattr_destroy(&ca);
    atomic_init(&j->nbindings, 0);
    j->running = 2; /* before the threads exist: they decrement it */
    j->manager_ok = pthread_create(&j->manager, NULL, manager_main, j) == 0;
    if (!j->manager_ok)
        j->running--;
    j->resolver_ok =
        j->manager_ok &&
        pthread_create(&j->resolver, NULL, resolver_main, j) == 0;
    if (!j->resolver_ok)
        j->running--;
    if (!j->resolver_ok) {
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
        job_unref(jobs[i]);
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
    free(j->jobs);
    free(j);
    return 0;
}

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
static json_t *epoch_json(const sc_config *cfg, fslot *s,
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
        /* The consumer's share, once the epoch's length is known. */
        json_object_set_new(
            o, "share_length",
            s->count != UINT64_MAX
                ? jint(sio_share_length(s->count, 0, c->rank, c->world,
                                        (sio_partition)s->partition))
                : json_null());
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
    cnt->attached += attached;
    cnt->missing += missing;
    cnt->lagging += lagging;
    cnt->window_samples += st.window_samples;
    cnt->window_bytes += st.window_bytes;
    cnt->shards_skipped += st.epoch.shards_skipped;
    cnt->samples_skipped += st.epoch.samples_skipped;
    seek_add(&cnt->seek, &st.seek);
    if (!detail)
        return NULL;
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
        jint(st.epoch.shards_skipped), "samples_skipped",
        jint(st.epoch.samples_skipped), "consumers_total", jint(n),
        "attached", (json_int_t)attached, "missing_count",
        (json_int_t)missing, "lagging_count", (json_int_t)lagging,
        "consumers", jc, "missing", jm, "lagging", jl, "consumers_truncated",
        n > listed);
    if (o) {
        json_object_set_new(o, "samples_total", s->count != UINT64_MAX
                                                    ? jint(s->count)
                                                    : json_null());
        json_object_set_new(o, "seeks", seeks);
        json_object_set_new(o, "journal_skips",
                            jint(sio_journal_count(s->journal)));
    } else {
        json_decref(seeks);
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
        "s:o, s:o}",
        "budget_bytes", jint(cs.budget), "used_bytes", jint(cs.used_bytes),
        "data_bytes", jint(cs.data_bytes), "entries", jint(cs.entries),
        "complete", jint(cs.complete), "fills", (json_int_t)cs.fills, "hits",
        jint(cs.hits), "misses", jint(cs.misses), "hit_bytes",
        jint(cs.hit_bytes), "miss_bytes", jint(cs.miss_bytes), "store_bytes",
        jint(cs.store_bytes), "evictions", jint(cs.evictions), "stale",
        jint(cs.stale), "rejected", jint(cs.rejected), "validations",
        jint(cs.validations));
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
        json_t *e = epoch_json(j->cfg, s, cons, &cnt, detail);
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
        "s:f}, s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o}, s:{s:o, s:o}}",
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
        "skipped", "shards",
        jint(job->shards_skipped_closed + cnt.shards_skipped), "samples",
        jint(job->samples_skipped_closed + cnt.samples_skipped));
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
        sc_job *job = get_job(j, name);
        if (!job) {
            *missing = 1;
            goto out;
        }
        root = job_json(j, job, cons, 1);
        job_unref(job);
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

/* One whole exposition line (never cut). */
#define put(out, ...) sio_wbuf_printf((out), __VA_ARGS__)

typedef struct job_metrics {
    char name[SC_JOB_NAME_MAX + 1];
    int ready;
    uint64_t samples, bytes, opened, by_outcome[5];
    uint64_t epochs, streams;
    epoch_counts cnt;
    uint64_t shards_skipped, samples_skipped;
} job_metrics;

/* The per-source series of mixed jobs: samples sent (what 0) or the
 * proportions (what 1). */
static sio_code mix_metrics(sc_jobs *j, sio_wbuf *out, int what)
{
    sio_code rc = SIO_OK;
    pthread_mutex_lock(&j->mu);
    for (size_t k = 0; rc == SIO_OK && k < j->njobs; k++) {
        sc_job *job = j->jobs[k];
        pthread_mutex_lock(&job->mu);
        const job_res *r = job->res;
        uint64_t qsum = 0, ssum = 0;
        for (uint32_t i = 0; i < r->nmix; i++) {
            qsum += r->mix[i].quota;
            ssum += atomic_load(&r->mix_sent[i]);
        }
        for (uint32_t i = 0; rc == SIO_OK && i < r->nmix; i++) {
            uint64_t sent = atomic_load(&r->mix_sent[i]);
            if (what == 0)
                rc = put(out,
                         "shardcast_mix_samples_sent_total{shardcast_job="
                         "\"%s\",source=\"%s\"} %" PRIu64 "\n",
                         job->spec.name, r->mix_names[i], sent);
            else
                rc = put(out,
                         "shardcast_mix_proportion{shardcast_job=\"%s\","
                         "source=\"%s\",kind=\"configured\"} %.6f\n"
                         "shardcast_mix_proportion{shardcast_job=\"%s\","
                         "source=\"%s\",kind=\"realized\"} %.6f\n",
                         job->spec.name, r->mix_names[i],
                         qsum ? (double)r->mix[i].quota / (double)qsum : 0.0,
                         job->spec.name, r->mix_names[i],
                         ssum ? (double)sent / (double)ssum : 0.0);
        }
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

sio_code sc_jobs_metrics(sc_jobs *j, sio_wbuf *out)
{
    sio_code rc = SIO_OK;
    size_t n = 0;
    sio_feed_consumer *cons = malloc(SC_STATUS_CONSUMERS_MAX * sizeof *cons);
    job_metrics *m = calloc(j->cfg->max_jobs, sizeof *m);

    if (!cons || !m) {
        rc = SIO_ERR_NOMEM;
        goto out;
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
        for (int k = 0; k < 5; k++)
            x->by_outcome[k] = atomic_load(&job->streams_by_outcome[k]);
        for (fslot *s = job->slots; s; s = s->next) {
            x->streams += s->streams;
            if (s->retired)
                continue;
            x->epochs++;
            epoch_json(j->cfg, s, cons, &x->cnt, 0);
        }
        x->shards_skipped = job->shards_skipped_closed + x->cnt.shards_skipped;
        seek_add(&x->cnt.seek, &job->seeks_closed);
        x->samples_skipped =
            job->samples_skipped_closed + x->cnt.samples_skipped;
        pthread_mutex_unlock(&job->mu);
    }
    pthread_mutex_unlock(&j->mu);

#define FAMILY(name, type, help)                                           \
    do {                                                                   \
        if ((rc = put(out, "# HELP " name " " help "\n# TYPE " name        \
                           " " type "\n")))                                \
            goto out;                                                      \
    } while (0)
#define EACH(metric, expr)                                                 \
    do {                                                                   \
        for (size_t i = 0; i < n; i++)                                     \
            if ((rc = put(out, metric "{shardcast_job=\"%s\"} %" PRIu64     \
                               "\n",                                       \
                          m[i].name, (uint64_t)(expr))))                   \
                goto out;                                                  \
    } while (0)

    FAMILY("shardcast_job_ready", "gauge",
           "1 when the job's source is resolved and it serves streams.");
    EACH("shardcast_job_ready", m[i].ready);
    FAMILY("shardcast_samples_sent_total", "counter",
           "Samples sent to consumers.");
    EACH("shardcast_samples_sent_total", m[i].samples);
    FAMILY("shardcast_bytes_sent_total", "counter",
           "Bytes of stream bodies sent to consumers.");
    EACH("shardcast_bytes_sent_total", m[i].bytes);
    FAMILY("shardcast_streams_opened_total", "counter",
           "Streams opened (each a cursor of a shared epoch).");
    EACH("shardcast_streams_opened_total", m[i].opened);
    FAMILY("shardcast_streams_closed_total", "counter",
           "Streams closed, by outcome.");
    for (size_t i = 0; i < n; i++)
        for (int k = SC_STREAM_OK; k <= SC_STREAM_CLIENT_GONE; k++)
            if ((rc = put(out,
                          "shardcast_streams_closed_total{shardcast_job=\"%s\","
                          "outcome=\"%s\"} %" PRIu64 "\n",
                          m[i].name,
                          sc_stream_outcome_name((sc_stream_outcome)k),
                          m[i].by_outcome[k])))
                goto out;
    FAMILY("shardcast_streams_active", "gauge",
           "Streams bound to an epoch of the job.");
    EACH("shardcast_streams_active", m[i].streams);
    FAMILY("shardcast_epochs_in_flight", "gauge",
           "Epochs with an open feed.");
    EACH("shardcast_epochs_in_flight", m[i].epochs);
    FAMILY("shardcast_consumers_attached", "gauge",
           "Consumers attached to an epoch in flight.");
    EACH("shardcast_consumers_attached", m[i].cnt.attached);
    FAMILY("shardcast_consumers_missing", "gauge",
           "Consumers expected by an epoch (rank of a world seen, or "
           "disconnected within the rejoin grace) but not attached.");
    EACH("shardcast_consumers_missing", m[i].cnt.missing);
    FAMILY("shardcast_consumers_lagging", "gauge",
           "Attached consumers at least the lag threshold behind.");
    EACH("shardcast_consumers_lagging", m[i].cnt.lagging);
    FAMILY("shardcast_window_samples", "gauge",
           "Samples held in the feed windows of the job.");
    EACH("shardcast_window_samples", m[i].cnt.window_samples);
    FAMILY("shardcast_window_bytes", "gauge",
           "Payload bytes held in the feed windows of the job.");
    EACH("shardcast_window_bytes", m[i].cnt.window_bytes);
    FAMILY("shardcast_shards_skipped_total", "counter",
           "Shards skipped as missing or corrupt (on_error=skip).");
    EACH("shardcast_shards_skipped_total", m[i].shards_skipped);
    FAMILY("shardcast_samples_skipped_total", "counter",
           "Samples skipped as bad.");
    EACH("shardcast_samples_skipped_total", m[i].samples_skipped);
    FAMILY("shardcast_seeks_total", "counter",
           "Seek feeds opened (reconnects, late ranks, laggards, padding).");
    EACH("shardcast_seeks_total", m[i].cnt.seek.opened);
    FAMILY("shardcast_seeks_shared_total", "counter",
           "Consumers that joined a seek feed already open.");
    EACH("shardcast_seeks_shared_total", m[i].cnt.seek.shared);
    FAMILY("shardcast_seeks_refused_total", "counter",
           "Seeks refused at the seek limits (503, Retry-After).");
    EACH("shardcast_seeks_refused_total", m[i].cnt.seek.busy);
    FAMILY("shardcast_seek_replays_total", "counter",
           "Seeks that replayed the epoch from its start (shards not "
           "indexed far enough).");
    EACH("shardcast_seek_replays_total", m[i].cnt.seek.replays);
    FAMILY("shardcast_lag_detaches_total", "counter",
           "Times a full window slid past a consumer that held it back.");
    EACH("shardcast_lag_detaches_total", m[i].cnt.seek.lag_detaches);
    FAMILY("shardcast_seeks_active", "gauge", "Seek feeds open now.");
    EACH("shardcast_seeks_active", m[i].cnt.seek.active);
    /* Mixed jobs, per source. The job registry's lock keeps the jobs
     * (and their immutable mixes) alive; counters are atomics. */
    FAMILY("shardcast_mix_samples_sent_total", "counter",
           "Samples of a mixed job sent to consumers, by source.");
    if ((rc = mix_metrics(j, out, 0)))
        goto out;
    FAMILY("shardcast_mix_proportion", "gauge",
           "A mixed job's share of each source: configured (its quota over "
           "the epoch's) and realized (its samples sent over all sent).");
    if ((rc = mix_metrics(j, out, 1)))
        goto out;
    FAMILY("shardcast_seek_ready_seconds", "histogram",
           "Time from opening a seek feed to its first sample.");
    for (size_t i = 0; i < n; i++) {
        char lab[SC_JOB_NAME_MAX + 32];
        snprintf(lab, sizeof lab, "shardcast_job=\"%s\"", m[i].name);
        if ((rc = sio_hist_write(out, "shardcast_seek_ready_seconds", lab,
                                 &sio_hist_latency, &m[i].cnt.seek.ready)))
            goto out;
    }

    /* Unlabelled series: one family, one line. */
#define SCALAR(metric, type, help, value)                                  \
    do {                                                                   \
        FAMILY(metric, type, help);                                        \
        if ((rc = put(out, metric " %" PRIu64 "\n", (uint64_t)(value))))   \
            goto out;                                                      \
    } while (0)
    sio_index_stats ix;
    sio_index_get_stats(j->index, &ix);
    FAMILY("shardcast_index_shards", "gauge",
           "Shards with an index, complete or being built.");
    if ((rc = put(out,
                  "shardcast_index_shards{state=\"complete\"} %" PRIu64
                  "\nshardcast_index_shards{state=\"partial\"} %" PRIu64 "\n",
                  ix.complete, ix.entries - ix.complete)))
        goto out;
    SCALAR("shardcast_index_loaded_total", "counter",
           "Shard indexes read from state_dir or sidecars.", ix.loaded);
    SCALAR("shardcast_index_built_total", "counter",
           "Shard indexes completed by streaming the shard.", ix.built);
    SCALAR("shardcast_index_invalid_total", "counter",
           "Index files refused as stale or corrupt.", ix.invalid);
    /* By backend (and latency by operation): metrics.c. */
    if ((rc = sc_metrics_write_store(j->io, out)))
        goto out;
    if (j->cache) {
        sio_cache_stats cs;
        sio_cache_get_stats(j->cache, &cs);
        FAMILY("shardcast_cache_requests_total", "counter",
               "Shard opens through the cache: hit (the entry was complete "
               "and valid) or miss.");
        if ((rc = put(out,
                      "shardcast_cache_requests_total{result=\"hit\"} %"
                      PRIu64 "\nshardcast_cache_requests_total{result="
                      "\"miss\"} %" PRIu64 "\n", cs.hits, cs.misses)))
            goto out;
        FAMILY("shardcast_cache_bytes_total", "counter",
               "Bytes delivered to shard readers, by the result of their "
               "open.");
        if ((rc = put(out,
                      "shardcast_cache_bytes_total{result=\"hit\"} %" PRIu64
                      "\nshardcast_cache_bytes_total{result=\"miss\"} %"
                      PRIu64 "\n", cs.hit_bytes, cs.miss_bytes)))
            goto out;
        SCALAR("shardcast_cache_store_bytes_total", "counter",
               "Object bytes read from the store into the cache.",
               cs.store_bytes);
        SCALAR("shardcast_cache_evictions_total", "counter",
               "Entries evicted to make room.", cs.evictions);
        SCALAR("shardcast_cache_evicted_bytes_total", "counter",
               "Object bytes of the evicted entries.", cs.evicted_bytes);
        SCALAR("shardcast_cache_stale_total", "counter",
               "Entries dropped because the object changed in the store.",
               cs.stale);
        SCALAR("shardcast_cache_rejected_total", "counter",
               "Misses not admitted (the policy, or every fill busy): read "
               "straight from the store.", cs.rejected);
        SCALAR("shardcast_cache_validations_total", "counter",
               "HEAD requests made to check an entry against the store.",
               cs.validations);
        SCALAR("shardcast_cache_errors_total", "counter",
               "Cache storage failures (the entry is dropped, readers go to "
               "the store).", cs.write_errors);
        FAMILY("shardcast_cache_fills_total", "counter",
               "Background fills by how they ended.");
        if ((rc = put(out,
                      "shardcast_cache_fills_total{result=\"done\"} %" PRIu64
                      "\nshardcast_cache_fills_total{result=\"failed\"} %"
                      PRIu64 "\n", cs.fills_done, cs.fills_failed)))
            goto out;
        SCALAR("shardcast_cache_fills_active", "gauge",
               "Fills running now.", cs.fills);
        SCALAR("shardcast_cache_entries", "gauge",
               "Entries held, complete or partial.", cs.entries);
        SCALAR("shardcast_cache_used_bytes", "gauge",
               "Bytes charged against the budget.", cs.used_bytes);
        SCALAR("shardcast_cache_budget_bytes", "gauge",
               "The cache budget.", cs.budget);
    }
    sio_pool_stats ps;
    sio_pool_get_stats(&ps);
    SCALAR("shardcast_sample_pool_idle_bytes", "gauge",
           "Sample memory idle in the pool and resident.", ps.idle_bytes);
    SCALAR("shardcast_sample_pool_mapped_bytes", "gauge",
           "Address space of the sample pool's slabs (the peak of sample "
           "memory in use).", ps.mapped_bytes);
    FAMILY("shardcast_sample_pool_blocks_total", "counter",
           "Sample memory blocks by what happened: reused from the pool, "
           "fresh from a slab or malloc, released (pages given back).");
    if ((rc = put(out,
                  "shardcast_sample_pool_blocks_total{event=\"reused\"} %"
                  PRIu64 "\nshardcast_sample_pool_blocks_total{event="
                  "\"fresh\"} %" PRIu64 "\nshardcast_sample_pool_blocks_"
                  "total{event=\"released\"} %" PRIu64 "\n",
                  ps.reused, ps.fresh, ps.released)))
        goto out;
#undef SCALAR
#undef FAMILY
#undef EACH
out:
    free(cons);
    free(m);
    return rc;
}

sio_code sc_jobs_limits_metrics(sc_jobs *j, sio_wbuf *out)
{
    static const char *const names[SC_REFUSED_COUNT] = {
        "epoch_ahead", "feeds_per_job", "feeds_per_server", "epoch_rate",
        "world"};
    sio_code rc = put(out,
                      "# HELP shardcast_feeds_open Feeds open, live and "
                      "retired, over every job.\n# TYPE shardcast_feeds_open "
                      "gauge\nshardcast_feeds_open %zu\n"
                      "# HELP shardcast_epochs_refused_total New epochs "
                      "refused by a bound, by bound.\n"
                      "# TYPE shardcast_epochs_refused_total counter\n",
                      atomic_load(&j->nfeeds));
    for (int i = 0; rc == SIO_OK && i < SC_REFUSED_COUNT; i++)
        rc = put(out, "shardcast_epochs_refused_total{bound=\"%s\"} %" PRIu64
                      "\n", names[i], (uint64_t)atomic_load(&j->refused[i]));
    return rc;
}
