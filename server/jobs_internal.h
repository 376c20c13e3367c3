/*
 * jobs_internal.h — the registry's data structures, shared by the two
 * files that implement jobs.h: jobs.c (the registry, feeds, manager and
 * resolver threads) and status.c (status JSON and job metrics, which only
 * read them). Nothing else includes this header.
 *
 * Locking (jobs.h has the lock order): j->mu guards the job table, the
 * release queue, the dead-job list and the stop flag; job->mu guards the
 * fields marked (mu); counters that streams bump on MHD threads are
 * atomics; a job's resources (job_res) are immutable once its list is set,
 * but for the journal table (res->mu).
 */
#ifndef SC_JOBS_INTERNAL_H
#define SC_JOBS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs.h"
#include "shardio_cache.h"
#include "shardio_index.h"
#include "shardio_plan.h"
#include "shardio_wire.h"

/* Throughput is measured over the last THROUGHPUT_SECONDS, sampled every
 * second. */
#define THROUGHPUT_SECONDS 10u
#define RING (THROUGHPUT_SECONDS + 1u)
#define REASON_MAX 512u
/* Epoch journals a job keeps open (the least recently used goes; with a
 * state_dir it is read back when needed again). */
#define JOURNALS_MAX 64u
/* Journal loads queued for the planner threads at once, per job (more
 * new epochs' first streams load theirs on their own thread). */
#define JOURNALS_LOADING_MAX 8u
/* Planner threads (plans are metadata: CPU only, one core each; they also
 * read new epochs' journals from state_dir). */
#define SC_PLANNERS 2u
/* Threads that fetch GET /samples/{i} samples not read in place (they
 * wait for the store: not the planners), started at the first such
 * request; and the fetches queued, running or done and not yet taken by
 * their request, server-wide (beyond: 503, come back). */
#define SC_SAMPLE_FETCHERS 4u
#define SC_SAMPLE_FETCHES_MAX 256u
/* ... and the bytes the fetched samples not taken yet may hold. */
#define SC_SAMPLE_HELD_MAX (256ull << 20)

enum { JOB_RESOLVING = 0, JOB_READY = 1, JOB_FAILED = 2 };

typedef struct fslot {
    uint64_t epoch;
    uint32_t part;        /* the replica whose part of the epoch it reads:
                             the server's own, or another's (failover) */
    sio_feed *feed;
    unsigned streams;     /* bindings on it */
    unsigned pins;        /* planner work queued or running on it */
    uint64_t served;      /* streams ever opened on it */
    uint64_t last_ms;     /* last attach or release */
    int prefetched;       /* opened by prefetch, no stream yet */
    int retired;          /* takes no new stream; closed when streams == 0
                             and pins == 0 */
    sio_journal *journal; /* the epoch's skip decisions (owned by the job) */
    int fresh_journal;    /* its journal was new to this process */
    int unproven;         /* opened for a resume with no journal to prove
                             the sequence (no state_dir, fresh process) */
    uint64_t count;       /* samples of the epoch, UINT64_MAX: unknown */
    uint64_t ix_dropped;  /* the index store's `dropped` when count and
                             plan were computed (a loaded index dropped
                             since makes both stale) */
    sio_epoch_config ec;  /* what fixes its order */
    int partition;        /* the job's policy */
    /* The epoch's plan (--data-plane auto): built once its shards are
     * indexed and local; streams then read their shares from it instead
     * of the feed. */
    sio_plan *plan;       /* (mu) */
    int plan_building;    /* a build is queued or runs on the planner
                             thread, the slot pinned (mu) */
    int plan_tried;       /* a build was tried (mu) */
    int plan_never;       /* the epoch cannot have one (mu) */
    uint64_t plan_tried_ms; /* when (mu) */
    /* A stream found a shard changed under the plan of generation
     * plan_broken (0: none); plan_gen: the generation of the plan the
     * slot has or builds now (from 1), replans: plans made again after
     * one broke (jobs.c slot_plan). */
    _Atomic unsigned plan_broken;
    unsigned plan_gen, replans;
    /* A plan that grows while the epoch's shards are indexed (the first
     * pass): the planner runs its steps; a reader that comes near a
     * parked plan's end asks for the next one (plan_kick). */
    int grow_queued;      /* a step is queued or runs (mu) */
    int restage_queued;   /* a restage is queued (mu) */
    struct sc_jobs *kick_j;
    struct sc_job *kick_job;
    struct fslot *next;
} fslot;

/* The epoch's bad samples: its feed counts those it read past; a plan
 * knows those of the shards it draws from. A plan that broke hands the
 * epoch to its feed, which then counts them again: the larger count.
 * (job mu held, or the slot no longer shared) */
static inline uint64_t slot_samples_skipped(const fslot *s,
                                            uint64_t feed_skipped)
{
    uint64_t p = s->plan ? sio_plan_skipped(s->plan) : 0;
    return p > feed_skipped ? p : feed_skipped;
}

/* The epoch's skipped shards: those its feed skipped, or, for an epoch
 * served from its plan, the shards its journal cut short or skipped (the
 * plan follows the journal; a plan that grew wrote it). (job mu held) */
static inline uint64_t slot_shards_skipped(const fslot *s,
                                           uint64_t feed_skipped)
{
    uint64_t p = s->plan && s->journal ? sio_journal_count(s->journal) : 0;
    return p > feed_skipped ? p : feed_skipped;
}

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
        uint32_t part;         /* replica part (fslot.part) */
        unsigned users;        /* feed families reading it */
        int fresh;             /* loaded ahead by a planner thread: its
                                  file was new (told to its first user) */
        sio_journal *j;
    } journals[JOURNALS_MAX];
    size_t njournals;
    /* Journals being read from state_dir by a planner thread for a new
     * epoch's first stream (which waits, suspended), and the last load
     * that failed (told to the streams that waited for it). */
    struct {
        uint64_t epoch;
        uint32_t part;
    } jloading[JOURNALS_LOADING_MAX];
    size_t njloading;
    struct {
        uint64_t epoch, ms;
        uint32_t part;
        int set;
        char msg[300];
    } jfail;
    uint64_t clock;
    uint64_t samples_asked_ms; /* the last /samples/{i} (job->mu) */
    /* What fixes the order of the replica set's epochs (set with the
     * list): the fingerprint of the "order" fields (sc_jobs_identity). */
    char fingerprint[SIO_FINGERPRINT_LEN + 1];
    char shards_hash[17];      /* of the resolved shard list */
    char mix_hash[17];         /* of the mixing spec and epoch_size, or
                                  "none" */
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

struct sc_binding {
    sc_stream *s;
    sc_job *job;
    fslot *slot;
    sio_cursor *cur;
    sio_planread *pr;        /* a stream served from the epoch's plan */
    uint64_t epoch;
    uint32_t rank, world;
    uint64_t global_start;   /* the request's elastic resume base */
    int resumed;             /* start or global_start > 0 */
    _Atomic unsigned sample_broken; /* a /samples/{i} plan's shard changed */
    _Atomic int ended;       /* its stream encoded the share's END (set on
                                the stream's thread): the slot may be
                                evicted under it, the END still goes out */
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
    int permanent;             /* JOB_FAILED for good: the source is
                                  wrong, not the store busy; not resolved
                                  again, streams get 422 (mu) */
    uint64_t shards;           /* held against --max-shards: counted at
                                  PUT, the list's length once resolved
                                  (the registry's j->mu) */
    uint64_t next_resolve_ms, backoff_ms;
    int held_back;        /* failed on the shards the other jobs hold:
                             retried at once when a job is deleted */
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
    /* The data plane: plans built, streams served from a plan and from a
     * feed, plan streams ended by a shard that changed under them. */
    atomic_uint_fast64_t plans_built, plans_grown, plan_streams, feed_streams;
    atomic_uint_fast64_t plans_again; /* made again after a shard changed */
    /* GET /samples/{i} streams: read in place, or fetched whole first */
    atomic_uint_fast64_t sample_plan_streams, sample_fetched_streams;
    atomic_uint_fast64_t plan_failures;
    /* Staging of plans let go (mu): their counters, kept (sc_job_stage). */
    sio_plan_stage_stats stage_done;
    /* Streams of another replica's part (replica=J, failover). */
    atomic_uint_fast64_t failover_streams;
    /* Streams whose opening waited for the planner (their connection
     * suspended meanwhile). */
    atomic_uint_fast64_t plan_waits;
    /* Streams cut by the stall check, and the progress it watches (the
     * manager thread's, under mu): the job's samples sent and the
     * server's store bytes when they last moved. */
    atomic_uint_fast64_t streams_stalled;
    uint64_t prog_samples, prog_bytes, prog_ms;
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
    /* The planner threads: build epochs' plans, off the HTTP threads and
     * with no lock that a request takes held; more than one, so that a
     * long build does not hold back another job's. plan_mu is a leaf
     * lock (it may be taken under a job mutex) guarding the queue, the
     * stop flag and the waker; the waker is called under it, so clearing
     * it (sc_jobs_set_plan_waker) waits for a call in progress. */
    pthread_t planner[SC_PLANNERS];
    unsigned nplanners;     /* started */
    pthread_mutex_t plan_mu;
    pthread_cond_t plan_work;
    struct plan_req *plan_head, *plan_tail;
    int plan_stop;
    void (*plan_waker)(void *ud);
    void *plan_waker_ud;
    /* GET /samples/{i} of a sample not read in place: fetched whole on a
     * sample thread (sio_plan_sample_fetch) while its request waits
     * suspended as for a plan build (the waker resumes it), then taken
     * by the request when it opens again. sf_mu is a leaf lock (taken
     * under a job mutex) guarding the list, the threads and the stop. */
    pthread_t sfetcher[SC_SAMPLE_FETCHERS];
    unsigned nsfetchers;    /* started */
    unsigned sf_running;    /* started and not yet ended */
    pthread_mutex_t sf_mu;
    pthread_cond_t sf_work, sf_ended;
    struct sample_fetch *sf_head;
    size_t nsf;
    uint64_t sf_held;       /* bytes of the done fetches' plans */
    int sf_stop;
    /* Epoch-churn bounds (feed_admission): feeds open, live and retired,
     * over every job; and how often each bound refused a new epoch. */
    atomic_size_t nfeeds;
    atomic_uint_fast64_t refused[SC_REFUSED_COUNT];
};

/* The job of that name with a reference taken (sc_job_unref), or NULL. */
sc_job *sc_jobs_get_job(sc_jobs *j, const char *name);
/* Drop a reference; the last one hands the job to the manager. */
void sc_job_unref(sc_job *job);
/* Add a feed's seek counters to a sum. */
void sc_seek_add(sio_feed_seek_stats *a, const sio_feed_seek_stats *b);

/* The job's staging (job->mu held): the plans let go and those of its
 * slots now (bytes: staged now; peak: the most any plan held). */
void sc_job_stage(sc_job *job, sio_plan_stage_stats *out);

#endif /* SC_JOBS_INTERNAL_H */
