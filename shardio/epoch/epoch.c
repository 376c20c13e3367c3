/*
 * epoch.c — the global sample sequence Y of one epoch, from data or from
 * the shard indexes alone.
 *
 * Order (docs/order.md "The order of an epoch"):
 *  1. shard order: sio_permute() of the shard list with the stream
 *     SIO_RNG_SHARDS of (seed, epoch);
 *  2. interleave: K slots take shards in permuted order; samples are taken
 *     round-robin over the slots in slot order; a finished (or failed and
 *     skipped) shard's slot takes the next shard in the permuted order at
 *     once; a slot with no shard left drops out. Bad samples are invisible:
 *     the slot yields its next good sample instead;
 *  3. buffer shuffle with the stream SIO_RNG_BUFFER: while the buffer holds
 *     fewer than B samples (and, with a byte cap, the incoming sample fits),
 *     the sample is appended and nothing is emitted. Otherwise j =
 *     below(count), buf[j] is emitted and the incoming sample takes its
 *     place; then, while a byte cap is exceeded and count > 1, j =
 *     below(count), buf[j] is emitted and buf[count-1] moves into slot j.
 *     At the end: while count > 0, j = below(count), emit buf[j],
 *     buf[j] = buf[count-1].
 * Everything is a function of the data and (seed, epoch, K, B, byte cap);
 * nothing depends on timing.
 *
 * Two modes run the same interleave and buffer code:
 *  - data: shard readers (worker threads) decode samples; the buffer holds
 *    sample references. Readers offer every group they read to the shard
 *    index (cfg.index), which is how indexes get built.
 *  - meta: the slots walk the shard indexes instead of the bytes and the
 *    buffer holds metadata records (shard, group, size) from a recycled
 *    pool. This is the order as a pure function of metadata: PRNG
 *    arithmetic, no bytes.
 * sio_epoch_open_at(P) runs meta up to position P, then switches to data:
 * the slot shards are opened at the groups the slots reached (a ranged
 * read from the group's offset; a compressed shard is re-read from its
 * start and skipped forward), and the metadata records still in the
 * buffer become "virtual" entries, fetched by ranged reads when they are
 * emitted (with the pending entries of the same shard that lie close
 * after it, in the same read), so a seek reads only what its consumers take.
 *
 * Shard failures: a bad sample is invisible (counted). A transient error
 * (SIO_ERR_IO, SIO_ERR_RETRY after the fetch engine's own retries) reopens
 * the shard at the group reached, with backoff, up to
 * EPOCH_SHARD_RETRIES times; then, and for permanent errors (not found,
 * refused, corrupt, changed), on_error=fail fails the epoch and
 * on_error=skip records the decision in the epoch's journal (cfg.journal):
 * the shard ends after the groups read. Every reader of the epoch follows
 * the journal, so the sequence never changes once decided.
 *
 * Threading: one sio_epoch is driven by one thread; its worker threads
 * share ep->mu. The sub-epochs of a mixed epoch have no threads of their
 * own: one pool of the mixed epoch fills all their readers (rpool below).
 * Ownership: the epoch holds references to buffered samples and releases
 * them on close; each sample handed out is a new reference for the
 * caller.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store_int.h"
#include "shardio_index.h"
#include "store/url.h"

/* Sanity limits on the epoch configuration. */
#define EPOCH_INTERLEAVE_MAX 4096u
#define EPOCH_BUFFER_MAX SIO_EPOCH_BUFFER_MAX /* samples */
#define EPOCH_THREADS_MAX 64u
#define EPOCH_REPLICAS_MAX 1024u
#define EPOCH_READAHEAD_SHARDS_MAX 4096u
/* A transient shard failure is retried this many times (backoff doubling
 * from 500 ms up to 30 s: about 10 minutes) before it counts as
 * permanent. */
#define EPOCH_SHARD_RETRIES 24u
#define EPOCH_RETRY_BASE_MS 500u
#define EPOCH_RETRY_MAX_MS 30000u
/* Virtual entries of one shard fetched in one ranged read: at most this
 * many, within this span of the first, and with at most VGATHER_GAP bytes
 * of other groups between two of them (read and dropped). */
#define EPOCH_VGATHER_SPAN (4ull << 20)
#define EPOCH_VGATHER_GAP (64u << 10)
#define EPOCH_VGATHER_MAX 256u

/*
 * Shard readers. Reader j reads shard perm[j] into a bounded queue of
 * samples. Readers exist for the shards in the slots and for the next
 * readahead_shards positions of the permuted order; worker threads (or,
 * when none, the consuming thread itself) fill them. Which reader a slot
 * takes and when is decided only by the consuming side, in logical order,
 * so timing never changes the sequence. In meta mode a reader has no
 * queue: it walks the index from group g.
 *
 * Locking: ep->mu guards every reader's queue and flags, the reader table,
 * the virtual entries and `stop`. Workers read from a shard with mu
 * released; a reader being read has busy = 1 and nobody else touches its
 * sio_shard. One lock, no lock order to keep.
 */
typedef struct reader {
    uint32_t pos;            /* position in the permuted order */
    uint32_t idx;            /* shard list index */
    sio_shard *sh;           /* opened lazily by whoever reads first */
    const sio_sample **q;    /* ring of decoded samples */
    size_t qhead, qlen;
    uint64_t qbytes;
    int busy, done;
    sio_code rc;             /* at done: SIO_OK or why the shard ended */
    char msg[640];
    uint64_t bad_samples;    /* SIO_ERR_SAMPLE seen (skipped) */
    uint64_t bad_first[SIO_LOSS_REFS_MAX]; /* the first ones' groups */
    uint32_t nbad_first;
    char bad_msg[640];       /* first bad sample (for on_error=fail) */
    int opened;
    uint64_t start_group;    /* data: the first group to read */
    uint64_t g;              /* meta: the next group */
    sio_index_entry *ve;     /* meta: the entry of view, when one is open */
    sio_index_view view;     /* meta: its groups, read without its lock */
    int skipped;             /* ended by a journal decision */
    unsigned retries;        /* transient failures so far */
    int placed;              /* opened at an offset of a loaded index ... */
    uint64_t ixgen;          /* ... of this generation (sio_index_info) */
    uint64_t open_group;     /* the group it was last opened at */
    int ixwrong;             /* ended because that index was wrong */
    uint64_t gready;         /* meta: groups of its shard the order's gate
                                let in (asked again when r->g reaches it) */
    sio_index_entry *mix;    /* meta: its shard's entry, once looked up */
    uint64_t mcut, mjgen;    /* meta: the journal's cut for it, as of the
                                journal's generation mjgen ... */
    int mcut_ok;             /* ... once asked */
    uint64_t mstop;          /* meta: the group its shard fails at, as the
                                order's stop hook said (UINT64_MAX: none
                                said yet) */
} reader;

/* A buffer entry of meta mode: a sample known only by its place. */
typedef struct mrec {
    sio_sample pub;          /* shard_index, index_in_shard, bytes,
                                global_index */
    struct mrec *next;       /* free list */
    uint32_t vi;             /* its virtual entry, after the switch */
} mrec;
/* mrec->pub.fields points here: how an mrec is told from a sample. */
static const sio_field mrec_marker[1];
#define IS_MREC(s) ((s)->fields == mrec_marker)
#define MREC_CHUNK 1024u
typedef struct mrec_chunk {
    struct mrec_chunk *next;
    mrec v[MREC_CHUNK];
} mrec_chunk;

/* A sample of the buffer at the seek position, fetched by a ranged read. */
enum { V_PENDING = 0, V_BUSY = 1, V_DONE = 2, V_FAILED = 3 };
typedef struct vent {
    uint32_t shard;
    uint64_t group;
    const sio_sample *real;
    int state;
} vent;

struct sio_epoch {
    sio_io *io;
    const sio_shardlist *list;
    sio_epoch_config cfg;
    uint32_t *perm;
    size_t nshards, next_shard; /* next permuted position for a slot */
    reader **slots;             /* slot s reads slots[s] (NULL: inactive) */
    uint32_t cur, active;
    int started;
    int meta;                   /* slots walk indexes, buffer holds
                                   metadata records */
    sio_index_entry **ixv;      /* entry per shard list index - ixbase,
                                   lazily */
    size_t ixbase;              /* the first shard of a range, else 0 */

    pthread_mutex_t mu;
    pthread_cond_t work;    /* workers: a reader needs filling */
    pthread_cond_t ready;   /* consumer: a reader got a sample or ended */
    /* Live readers: those in slots plus the look-ahead ones, at most
     * K + readahead_shards (positions in [next_shard, ahead_end) are not
     * in a slot yet, and ahead_end <= next_shard + readahead_shards). */
    reader **readers;
    size_t nreaders, rcap;
    size_t ahead_end;       /* readers were made for positions < ahead_end */
    pthread_t *threads;
    uint32_t nthreads;
    /* Reader threads from a pool instead (a mixed epoch's sub-epoch; the
     * pool is not owned). visitors: pool threads inside this epoch;
     * leaving: sio_epoch_close waits for them to go (both under rp->mu). */
    struct rpool *rp;
    uint32_t visitors;
    int leaving;
    int stop;
    /* Waiters, so that signals are only sent to someone waiting: a
     * wake-up per sample would cost more than decoding the sample. */
    uint32_t workers_idle;
    int consumer_waiting;   /* the consuming thread waits on `ready` ... */
    const reader *waiting_for; /* ... for this reader (NULL: for a
                                  virtual entry, or anything) */

    int index_dropped;      /* a loaded index turned out wrong (mu) */
    vent *vents;            /* virtual entries (after a seek), sorted */
    size_t nvents;
    char vmsg[640];         /* why a virtual entry failed */
    sio_code vcode;         /* ... and its code (SIO_ERR_CHANGED: the
                               shard is not what its index describes any
                               more: a reader that comes again reads it
                               as it is now) */

    mrec *free_mrecs;
    mrec_chunk *chunks;

    sio_rng brng;
    const sio_sample **buf; /* shuffle buffer */
    size_t count;
    uint64_t bytes;
    const sio_sample **outq; /* emitted, not yet handed out (FIFO) */
    size_t qhead, qlen;
    int input_done, failed;
    uint64_t emitted;
    sio_epoch_stats st;
    char err[768];

    /* A mixed epoch (cfg.nmix > 0): the sources, each read pass after
     * pass by a sub-epoch (no buffer) over its part of the list; the draw
     * of each next sample's source with stream SIO_RNG_MIX. */
    struct mixsrc *msrc;
    uint32_t nmsrc;
    uint32_t sub_threads;   /* read_threads of the epoch's config */
    struct rpool *pool;     /* the sources' reader threads (owned) */
    sio_rng mrng;

    /* A persistent order's gate (sio_order_set_gate): meta mode takes no
     * group of a shard it has not let in. */
    uint64_t (*gate)(void *ud, uint32_t shard, uint64_t at);
    void *gate_ud;
    /* And its stop hook (sio_order_set_stop): shards whose read failed
     * under on_error=fail, where they fail the order. */
    int (*stop_fn)(void *ud, uint32_t shard, uint64_t *at, sio_code *rc,
                   char *msg, size_t msglen);
    void *stop_ud;
    /* A mixed order's source pass (meta mode): the mixed order. The
     * metadata records its buffer holds (struct mrec: shard, group, size)
     * come from that order's pool (they outlive the pass in its buffer),
     * and its gate, stop hook and entries hook are that order's too
     * (home_of). */
    struct sio_epoch *home;
    /* Losses (sio_journal_loss): the epoch that tells them (a mixed
     * epoch for its source passes, else NULL: ep itself), the losses it
     * told so far, and whether it is in step with the journal's. */
    struct sio_epoch *loss_home;
    uint64_t loss_seq;
    int loss_astray;
    /* Where meta mode finds a shard's groups (sio_order_set_entries):
     * NULL from entry_fn, the index's entry for the shard's URL. */
    sio_index_entry *(*entry_fn)(void *ud, uint32_t shard);
    void *entry_ud;
};

/*
 * The reader pool of a mixed epoch: its threads fill the readers of every
 * source's sub-epoch, so a mix of 256 sources runs at most
 * SIO_MIX_THREADS_MAX threads, not read_threads per source. Which reader
 * a thread fills and when changes nothing in the order: the consuming
 * side decides, as with an epoch's own threads. A thread looks first at
 * the sub-epoch whose consumer waits (`urgent`), then at the one kicked
 * last, then at every member round robin; when no pool thread is idle the
 * consumer reads the shard it waits for itself.
 *
 * Locking: p->mu guards the member list, the kick state, idle, stop and
 * each member's visitors / leaving. A member kicks the pool with its own
 * mu held: the lock order is member mu, then p->mu. A thread never holds
 * p->mu while it takes a member's mu: it counts itself as a visitor of
 * the member under p->mu, drops p->mu and only then locks the member. A
 * member that leaves (sio_epoch_close) waits until it has no visitors.
 */
typedef struct rpool {
    pthread_mutex_t mu;
    pthread_cond_t work;     /* threads: a kick */
    pthread_cond_t left;     /* a leaving member: a visitor went */
    sio_epoch **members;     /* at most cap: one sub-epoch per source */
    uint32_t nmembers, cap;
    uint32_t next;           /* where a round-robin scan starts */
    int pending;             /* kicked since a thread began its scan */
    sio_epoch *urgent;       /* its consumer waits for a reader */
    sio_epoch *hint;         /* kicked last */
    uint32_t idle;           /* threads waiting for a kick */
    pthread_t *threads;
    uint32_t nthreads;
    int stop;
} rpool;

/* Samples a pool thread reads in one member before it looks at the pool
 * again: fewer trips through p->mu; a consumer that waits meanwhile is
 * served by an idle thread or reads itself. */
#define POOL_VISIT_STEPS 16

static int pool_kick(rpool *p, sio_epoch *ep, int urgent);

typedef struct mixsrc {
    sio_mix_source def;
    uint64_t left;          /* quota left */
    uint32_t pass;          /* the pass being read */
    uint64_t pass_taken;    /* samples taken from it */
    sio_epoch *sub;         /* its sub-epoch (ep->mu guards the pointer) */
    int dry;                /* a pass gave nothing: the source ended */
    uint64_t taken;         /* samples taken this epoch */
} mixsrc;

const char *sio_epoch_errmsg(const sio_epoch *ep)
{
    return ep->err;
}

int sio_epoch_index_dropped(const sio_epoch *ep)
{
    int d;
    pthread_mutex_lock((pthread_mutex_t *)&ep->mu);
    d = ep->index_dropped;
    pthread_mutex_unlock((pthread_mutex_t *)&ep->mu);
    return d;
}

void sio_epoch_get_stats(const sio_epoch *ep, sio_epoch_stats *st)
{
    *st = ep->st;
}

/* Metadata records ---------------------------------------------------- */

/* The epoch whose pool of metadata records (struct mrec) and order hooks
 * ep uses: a mixed order's for one of its source passes, else ep itself. */
static sio_epoch *home_of(sio_epoch *ep)
{
    return ep->home ? ep->home : ep;
}

static mrec *mrec_new(sio_epoch *ep, uint32_t shard, uint64_t group,
                      uint64_t bytes)
{
    ep = home_of(ep);
    mrec *s = ep->free_mrecs;
    if (!s) {
        mrec_chunk *c = malloc(sizeof *c);
        if (!c)
            return NULL;
        c->next = ep->chunks;
        ep->chunks = c;
        for (unsigned i = 0; i < MREC_CHUNK; i++) {
            c->v[i].next = ep->free_mrecs;
            ep->free_mrecs = &c->v[i];
        }
        s = ep->free_mrecs;
    }
    ep->free_mrecs = s->next;
    memset(&s->pub, 0, sizeof s->pub);
    s->pub.fields = mrec_marker;
    s->pub.shard_index = shard;
    s->pub.index_in_shard = group;
    s->pub.bytes = (size_t)bytes;
    s->pub.global_index = UINT64_MAX;
    s->vi = UINT32_MAX;
    return s;
}

/* Release a buffer/queue entry: recycle an mrec, drop a sample. */
static void ent_drop(sio_epoch *ep, const sio_sample *s)
{
    if (s && IS_MREC(s)) {
        mrec *st = (mrec *)(uintptr_t)s;
        ep = home_of(ep);
        if (st->vi != UINT32_MAX && ep->vents) {
            vent *v = &ep->vents[st->vi];
            sio_sample_unref(v->real);
            v->real = NULL;
        }
        st->next = ep->free_mrecs;
        ep->free_mrecs = st;
        return;
    }
    sio_sample_unref(s);
}

/* Index entries --------------------------------------------------------- */

/* The index entry of shard idx, or NULL without an index (any thread). */
static sio_index_entry *shard_ix(sio_epoch *ep, uint32_t idx)
{
    sio_index_entry *e;
    if (!ep->cfg.index || !ep->ixv)
        return NULL;
    pthread_mutex_lock(&ep->mu);
    e = ep->ixv[idx - ep->ixbase];
    pthread_mutex_unlock(&ep->mu);
    if (e)
        return e;
    e = sio_index_get(ep->cfg.index, ep->io, sio_shardlist_url(ep->list, idx),
                      sio_shardlist_size(ep->list, idx));
    /* Once per epoch and shard: a local file rewritten or replaced since
     * it was indexed is indexed again (its offsets and counts describe
     * another file; the index store counts the drop, so the epochs in
     * flight count their length again). */
    (void)sio_index_refresh(e);
    pthread_mutex_lock(&ep->mu);
    ep->ixv[idx - ep->ixbase] = e;
    pthread_mutex_unlock(&ep->mu);
    return e;
}

/* The index entry of shard idx for a use that relies on its groups (a
 * seek's offsets, counts): the checks that wait for such a use are run
 * first (sio_index_vet), which may leave it empty. */
static sio_index_entry *shard_ixv(sio_epoch *ep, uint32_t idx)
{
    sio_index_entry *e = shard_ix(ep, idx);
    sio_index_vet(e, ep->io, ep->cfg.cache, &ep->cfg.limits);
    return e;
}

static int transient(sio_code rc)
{
    return rc == SIO_ERR_IO || rc == SIO_ERR_RETRY;
}

/* Sleep up to ms unless the epoch stops (mu NOT held). Returns 1 when
 * stopping. */
static int backoff(sio_epoch *ep, unsigned attempt)
{
    uint64_t ms = EPOCH_RETRY_BASE_MS;
    struct timespec ts;
    int stop;
    for (unsigned i = 0; i < attempt && ms < EPOCH_RETRY_MAX_MS; i++)
        ms *= 2;
    if (ms > EPOCH_RETRY_MAX_MS)
        ms = EPOCH_RETRY_MAX_MS;
    sio_deadline_in(&ts, ms);
    pthread_mutex_lock(&ep->mu);
    while (!ep->stop &&
           pthread_cond_timedwait(&ep->work, &ep->mu, &ts) == 0)
        ;
    stop = ep->stop;
    pthread_mutex_unlock(&ep->mu);
    return stop;
}

/*
 * Where to open shard idx to read group g: the group's offset when the
 * index knows it (or the previous group's end), else the nearest known
 * group before it (then read forward), else the start. A compressed shard
 * always starts at 0.
 */
/* The cache view and listed size of shard idx into at. */
static void cache_at(const sio_epoch *ep, uint32_t idx, sio_shard_at *at)
{
    uint64_t size = sio_shardlist_size(ep->list, idx);
    at->cache = ep->cfg.cache;
    at->size_hint = size == UINT64_MAX ? 0 : size;
}

/* *hint_gen: the generation of a loaded (not yet read through) index
 * that gave the offset, UINT64_MAX when none did: a read that goes wrong
 * from such an offset says the index is wrong, not the shard. */
static void place_at(sio_epoch *ep, uint32_t idx, uint64_t g, sio_shard_at *at,
                     uint64_t *hint_gen)
{
    sio_index_entry *e = shard_ix(ep, idx);
    sio_index_info info;
    sio_index_group gr;
    memset(at, 0, sizeof *at);
    at->end = UINT64_MAX;
    at->skip_until = g;
    at->rec = sio_index_recorder(e);
    *hint_gen = UINT64_MAX;
    cache_at(ep, idx, at);
    if (!e || g == 0)
        return;
    sio_index_vet(e, ep->io, ep->cfg.cache, &ep->cfg.limits);
    sio_index_get_info(e, &info);
    if (info.stream_only)
        return;
    if (info.hint)
        *hint_gen = info.gen;
    /* From group g, else the last group indexed before it; and from a
     * good group: a bad one may begin at a damaged tar header (a sample
     * of one member lost with it) or be bad for what lies before it, so
     * a reader started on it would not decide as the index did. Groups
     * in between are read past (skip_until). */
    uint64_t k = g;
    int have = sio_index_group_get(e, k, &gr);
    if (!have) {
        k = info.known < g ? info.known : g;
        while (k > 0 && !(have = sio_index_group_get(e, k - 1, &gr)))
            k--;
        if (!have) {
            *hint_gen = UINT64_MAX;
            return; /* from the shard's start */
        }
        k--;
    }
    while ((gr.flags & SIO_INDEX_GROUP_BAD) && k > 0 &&
           sio_index_group_get(e, k - 1, &gr))
        k--;
    at->offset = gr.offset;
    at->first_group = k;
}

/* A shard index the epoch relied on was dropped: the epoch must be opened
 * again (sio_epoch_index_dropped). mu NOT held. */
static void mark_index_dropped(sio_epoch *ep)
{
    pthread_mutex_lock(&ep->mu);
    ep->index_dropped = 1;
    pthread_mutex_unlock(&ep->mu);
}

/*
 * Shard idx's loaded index (of generation gen, or any when UINT64_MAX)
 * disagreed with a read (why): drop it unless that happened already, and
 * index the shard by reading it, so that the epoch opened again is right.
 * Returns 1 when the index was (or had been) dropped: the epoch must fail
 * with index_dropped set rather than skip the shard. mu NOT held.
 */
static int index_wrong(sio_epoch *ep, uint32_t idx, uint64_t gen,
                       const char *why)
{
    sio_index_entry *e = shard_ix(ep, idx);
    sio_index_info info;
    sio_error er;
    if (!e)
        return 0;
    int dropped = sio_index_reject(e, why);
    sio_index_get_info(e, &info);
    if (!dropped && (gen == UINT64_MAX || info.gen == gen))
        return 0;
    if (!info.complete &&
        sio_index_build(ep->io, sio_shardlist_url(ep->list, idx), idx,
                        &ep->cfg.limits, e, &er) != SIO_OK)
        SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
                "event=index_rebuild_failed shard=%u reason=\"%s\": a seek "
                "replays the epoch instead", idx, er.msg);
    mark_index_dropped(ep);
    return 1;
}

static void reader_free(reader *r)
{
    if (!r)
        return;
    sio_index_view_close(r->ve, &r->view);
    for (size_t i = 0; r->q && i < r->qlen; i++)
        sio_sample_unref(r->q[(r->qhead + i) % SIO_READAHEAD_SAMPLES]);
    sio_shard_close(r->sh);
    free(r->q);
    free(r);
}

/* Has the reader room for one more sample? (mu held) */
static int reader_wants(const sio_epoch *ep, const reader *r)
{
    return !r->done && !r->busy && r->qlen < SIO_READAHEAD_SAMPLES &&
           (r->qlen == 0 || r->qbytes < ep->cfg.readahead_bytes);
}

/* The journal's decision for shard idx at the group about to be read:
 * 1 when the shard ends here. */
static int journal_ends(sio_epoch *ep, uint32_t idx, uint64_t next_group)
{
    uint64_t cut;
    return ep->cfg.journal && sio_journal_count(ep->cfg.journal) &&
           sio_journal_cut(ep->cfg.journal, idx, &cut) && next_group >= cut;
}

/* Open r's shard at r->start_group (mu NOT held). */
static sio_code reader_open(sio_epoch *ep, reader *r, char *msg, size_t len)
{
    sio_shard_at at;
    sio_error e;
    sio_code rc;
    uint64_t gen;
    place_at(ep, r->idx, r->start_group, &at, &gen);
    r->open_group = r->start_group;
    r->placed = gen != UINT64_MAX;
    r->ixgen = gen;
    e.msg[0] = '\0';
    rc = sio_shard_open_at(ep->io, sio_shardlist_url(ep->list, r->idx),
                           r->idx, &ep->cfg.limits, &at, &r->sh, &e);
    if (rc)
        snprintf(msg, len, "%s", e.msg);
    return rc;
}

/* Errors that say nothing about the shard: never a skip decision. */
static int fatal_code(sio_code rc)
{
    return rc == SIO_ERR_CANCELED || rc == SIO_ERR_NOMEM;
}

/* Read one sample into r (busy set by the caller, mu NOT held on entry
 * and exit). Opening the shard happens on the first call. */
static void reader_step(sio_epoch *ep, reader *r)
{
    const sio_sample *s = NULL;
    sio_code rc = SIO_OK;
    char msg[640] = "";
    int skipped = 0, stopped = 0;

    for (;;) {
        if (!r->sh) {
            if (journal_ends(ep, r->idx, r->start_group)) {
                skipped = 1;
                break;
            }
            rc = reader_open(ep, r, msg, sizeof msg);
            r->opened = 1;
        }
        while (rc == SIO_OK) {
            if (journal_ends(ep, r->idx, sio_shard_groups(r->sh))) {
                skipped = 1;
                break;
            }
            rc = sio_shard_next(r->sh, &s);
            if (rc != SIO_ERR_SAMPLE)
                break;
            /* A bad sample: counted; the first one's text is kept. */
            pthread_mutex_lock(&ep->mu);
            if (r->bad_samples++ == 0)
                snprintf(r->bad_msg, sizeof r->bad_msg, "%s",
                         sio_shard_errmsg(r->sh));
            if (r->nbad_first < SIO_LOSS_REFS_MAX)
                r->bad_first[r->nbad_first++] = sio_shard_groups(r->sh) - 1;
            pthread_mutex_unlock(&ep->mu);
            SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
                    "event=sample_bad reason=\"%s\"", sio_shard_errmsg(r->sh));
            rc = SIO_OK;
            if (ep->cfg.on_error == SIO_ON_ERROR_FAIL) {
                rc = SIO_ERR_SAMPLE;
                snprintf(msg, sizeof msg, "%s", r->bad_msg);
                break;
            }
        }
        if (skipped || rc == SIO_OK || rc == SIO_ERR_SAMPLE)
            break;
        if (!msg[0] && r->sh)
            snprintf(msg, sizeof msg, "%s", sio_shard_errmsg(r->sh));
        if (r->sh) {
            r->start_group = sio_shard_groups(r->sh);
            sio_shard_close(r->sh);
            r->sh = NULL;
        }
        /* A transient failure: reopen at the group reached, after a
         * backoff, while retries last (on_error=fail gives up at once). */
        if (!transient(rc) || ep->cfg.on_error != SIO_ON_ERROR_SKIP ||
            r->retries >= EPOCH_SHARD_RETRIES)
            break;
        char shown[512];
        sio_url_redact(sio_shardlist_url(ep->list, r->idx), shown,
                       sizeof shown);
        SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
                "event=shard_retry url=%s group=%" PRIu64
                " attempt=%u reason=\"%s\"",
                shown, r->start_group, r->retries + 1, msg);
        if (backoff(ep, r->retries++)) {
            stopped = 1;
            rc = SIO_ERR_CANCELED;
            break;
        }
        rc = SIO_OK;
        msg[0] = '\0';
    }
    uint64_t reached = r->sh ? sio_shard_groups(r->sh) : r->start_group;
    if (r->placed && !skipped && !stopped && rc != SIO_ERR_SAMPLE &&
        !transient(rc) && !fatal_code(rc)) {
        /* Read from an offset a loaded index gave: a shard that fails
         * there, or a read that made the index drop its groups (another
         * key, a count it does not have), says the index was wrong. The
         * sample is not handed out and nothing is journaled: the epoch
         * fails, to be opened again from the index rebuilt. */
        sio_index_info info;
        sio_index_entry *e = shard_ix(ep, r->idx);
        if (e)
            sio_index_get_info(e, &info);
        /* (a read that failed after groups that agreed blames the
         * shard, not the index) */
        if (e && ((rc != SIO_OK && reached == r->open_group) ||
                  info.gen != r->ixgen)) {
            char why[700];
            snprintf(why, sizeof why, "a read from group %" PRIu64 " went "
                     "wrong: %s", r->open_group,
                     rc != SIO_OK ? msg : "disagreed with the index");
            if (index_wrong(ep, r->idx, r->ixgen, why)) {
                sio_sample_unref(s);
                s = NULL;
                rc = SIO_ERR_CHANGED;
                r->ixwrong = 1;
                snprintf(msg, sizeof msg, "shard %u: its index, loaded from "
                         "a file or sidecar, was wrong and is dropped (%.400s)",
                         r->idx, why);
            }
        }
    }
    if (rc != SIO_OK && rc != SIO_ERR_SAMPLE && !skipped && !stopped &&
        !fatal_code(rc) && !r->ixwrong &&
        ep->cfg.on_error == SIO_ON_ERROR_SKIP && ep->cfg.journal) {
        /* A permanent failure (or retries spent): the decision every reader
         * of this epoch follows. */
        uint64_t d = sio_journal_record(ep->cfg.journal, r->idx, reached, rc,
                                        msg);
        if (d != reached) {
            rc = SIO_ERR_CANCELED; /* fails the epoch whatever on_error */
            snprintf(msg, sizeof msg,
                     "shard %u ended at sample group %" PRIu64 " where the "
                     "epoch's journal says %" PRIu64 ": the sequence cannot "
                     "be reproduced", r->idx, reached, d);
        }
    }
    pthread_mutex_lock(&ep->mu);
    if (skipped || rc != SIO_OK || !s) {
        r->done = 1;
        r->rc = skipped ? SIO_OK : rc;
        r->skipped = skipped;
        snprintf(r->msg, sizeof r->msg, "%s",
                 skipped ? "skipped by the epoch's journal" : msg);
        /* The shard is finished: release its stream and archive now. */
        sio_shard_close(r->sh);
        r->sh = NULL;
    } else {
        r->q[(r->qhead + r->qlen) % SIO_READAHEAD_SAMPLES] = s;
        r->qlen++;
        r->qbytes += s->bytes;
    }
    r->busy = 0;
    /* Wake the consumer only for the reader it waits on: a sample of
     * another shard would only put it back to sleep. */
    if (ep->consumer_waiting && (!ep->waiting_for || ep->waiting_for == r))
        pthread_cond_broadcast(&ep->ready);
    pthread_mutex_unlock(&ep->mu);
}

/* A data reader for position pos from group g (mu held by the caller or
 * single-threaded). */
static reader *reader_new(sio_epoch *ep, size_t pos, uint64_t g, int queue)
{
    reader *r = calloc(1, sizeof *r);
    if (r && queue)
        r->q = malloc(SIO_READAHEAD_SAMPLES * sizeof *r->q);
    if (!r || (queue && !r->q)) {
        free(r);
        return NULL;
    }
    r->pos = (uint32_t)pos;
    r->idx = ep->perm[pos];
    r->start_group = g;
    r->g = g;
    r->mstop = UINT64_MAX;
    return r;
}

/* Create readers up to position `end` (mu held). */
static sio_code ensure_readers(sio_epoch *ep, size_t end)
{
    if (end > ep->nshards)
        end = ep->nshards;
    while (ep->ahead_end < end) {
        reader *r = reader_new(ep, ep->ahead_end, 0, 1);
        if (!r)
            return SIO_ERR_NOMEM;
        ep->readers[ep->nreaders++] = r; /* nreaders < rcap, see above */
        ep->ahead_end++;
    }
    if (ep->workers_idle)
        pthread_cond_broadcast(&ep->work);
    if (ep->rp)
        pool_kick(ep->rp, ep, 0);
    return SIO_OK;
}

/* Virtual entries --------------------------------------------------------- */

/*
 * Fetch virtual entry i and the pending entries of the same shard that lie
 * close after it, in one read (mu held on entry and exit; released while
 * reading).
 */
static void vfetch(sio_epoch *ep, size_t i)
{
    vent *v = ep->vents;
    uint32_t shard = v[i].shard;
    size_t want[EPOCH_VGATHER_MAX];
    size_t nw = 0;
    sio_index_entry *e;
    sio_index_info info;
    sio_index_group g0, gl;
    sio_shard_at at;
    sio_code rc = SIO_OK;
    char msg[640] = "";

    pthread_mutex_unlock(&ep->mu);
    e = shard_ixv(ep, shard);
    pthread_mutex_lock(&ep->mu);
    if (e)
        sio_index_get_info(e, &info);
    if (!e || !sio_index_group_get(e, v[i].group, &g0)) {
        /* An index dropped since the seek was computed: the epoch is
         * opened again from the one rebuilt. */
        if (e && info.gen > 0)
            ep->index_dropped = 1;
        v[i].state = V_FAILED;
        snprintf(ep->vmsg, sizeof ep->vmsg,
                 "shard %u group %" PRIu64 " is not indexed", shard,
                 v[i].group);
        pthread_cond_broadcast(&ep->ready);
        return;
    }
    /* Entries are sorted by (shard, group) after the queued ones; gather
     * forward from i. */
    want[nw++] = i;
    v[i].state = V_BUSY;
    gl = g0;
    for (size_t j = i + 1; j < ep->nvents && nw < EPOCH_VGATHER_MAX; j++) {
        sio_index_group gj;
        if (v[j].shard != shard || v[j].state != V_PENDING ||
            v[j].group <= v[want[nw - 1]].group)
            break;
        if (!sio_index_group_get(e, v[j].group, &gj) ||
            (!info.stream_only &&
             (gj.offset - g0.offset > EPOCH_VGATHER_SPAN ||
              gj.offset - gl.end > EPOCH_VGATHER_GAP)))
            break;
        v[j].state = V_BUSY;
        want[nw++] = j;
        gl = gj;
    }
    pthread_mutex_unlock(&ep->mu);

    unsigned attempt = 0;
    size_t got = 0;
    for (;;) {
        sio_shard *sh = NULL;
        sio_error er;
        memset(&at, 0, sizeof at);
        at.end = UINT64_MAX;
        cache_at(ep, shard, &at);
        if (info.stream_only) {
            at.skip_until = v[want[got]].group;
        } else {
            sio_index_group gs;
            if (!sio_index_group_get(e, v[want[got]].group, &gs)) {
                /* the index was dropped since the gather */
                mark_index_dropped(ep);
                rc = SIO_ERR_CHANGED;
                snprintf(msg, sizeof msg, "shard %u group %" PRIu64
                         " is not indexed any more", shard,
                         v[want[got]].group);
                break;
            }
            at.offset = gs.offset;
            at.end = gl.end;
            at.first_group = v[want[got]].group;
            at.skip_until = at.first_group;
        }
        er.msg[0] = '\0';
        rc = sio_shard_open_at(ep->io, sio_shardlist_url(ep->list, shard),
                               shard, &ep->cfg.limits, &at, &sh, &er);
        if (rc)
            snprintf(msg, sizeof msg, "%s", er.msg);
        while (rc == SIO_OK && got < nw) {
            const sio_sample *s = NULL;
            rc = sio_shard_next(sh, &s);
            if (rc == SIO_ERR_SAMPLE) {
                rc = SIO_OK;
                continue;
            }
            if (rc) {
                snprintf(msg, sizeof msg, "%s", sio_shard_errmsg(sh));
                break;
            }
            if (!s) {
                rc = SIO_ERR_CHANGED;
                snprintf(msg, sizeof msg, "shard %u ended before group %"
                         PRIu64 ": changed since it was indexed", shard,
                         v[want[got]].group);
                break;
            }
            if (s->index_in_shard < v[want[got]].group) {
                sio_sample_unref(s);
                continue;
            }
            sio_index_group gi;
            if (s->index_in_shard != v[want[got]].group ||
                !sio_index_group_get(e, s->index_in_shard, &gi) ||
                gi.keyhash != sio_index_keyhash(s->key, strlen(s->key)) ||
                gi.bytes != s->bytes) {
                sio_sample_unref(s);
                rc = SIO_ERR_CHANGED;
                snprintf(msg, sizeof msg, "shard %u group %" PRIu64
                         " differs from its index%s", shard,
                         v[want[got]].group,
                         info.hint ? " (key or size)"
                                   : ": changed since indexed");
                break;
            }
            pthread_mutex_lock(&ep->mu);
            v[want[got]].real = s;
            v[want[got]].state = V_DONE;
            if (ep->consumer_waiting)
                pthread_cond_broadcast(&ep->ready);
            pthread_mutex_unlock(&ep->mu);
            got++;
        }
        sio_shard_close(sh);
        if (got == nw || !transient(rc) || attempt >= EPOCH_SHARD_RETRIES)
            break;
        if (backoff(ep, attempt++))
            break;
    }
    /* A loaded index the read disagreed with (another key or size, no
     * tar header at its offset, a shard that ends before its group): it
     * is dropped and rebuilt, and the epoch fails to be opened again. */
    if (got < nw && info.hint && rc != SIO_OK && !transient(rc) &&
        !fatal_code(rc) && index_wrong(ep, shard, info.gen, msg)) {
        char m2[sizeof msg];
        snprintf(m2, sizeof m2, "shard %u: its index, loaded from a file or "
                 "sidecar, was wrong and is dropped (%.400s)", shard, msg);
        snprintf(msg, sizeof msg, "%s", m2);
    }
    pthread_mutex_lock(&ep->mu);
    for (size_t k = got; k < nw; k++) {
        v[want[k]].state = V_FAILED;
        if (!ep->vmsg[0]) {
            snprintf(ep->vmsg, sizeof ep->vmsg, "%s",
                     msg[0] ? msg : "stopped");
            ep->vcode = rc;
        }
    }
    pthread_cond_broadcast(&ep->ready);
}

/* The reader a thread should fill next, or NULL (mu held): emptiest
 * queue first, then the earliest position. */
static reader *pick_reader(sio_epoch *ep)
{
    reader *pick = NULL;
    for (size_t i = 0; i < ep->nreaders; i++) {
        reader *r = ep->readers[i];
        if (reader_wants(ep, r) &&
            (!pick || r->qlen < pick->qlen ||
             (r->qlen == pick->qlen && r->pos < pick->pos)))
            pick = r;
    }
    return pick;
}

static void *worker_main(void *arg)
{
    sio_epoch *ep = arg;
    pthread_mutex_lock(&ep->mu);
    for (;;) {
        reader *pick = NULL;
        if (ep->stop)
            break;
        pick = pick_reader(ep);
        if (!pick) {
            ep->workers_idle++;
            pthread_cond_wait(&ep->work, &ep->mu);
            ep->workers_idle--;
            continue;
        }
        pick->busy = 1;
        pthread_mutex_unlock(&ep->mu);
        reader_step(ep, pick);
        pthread_mutex_lock(&ep->mu);
    }
    pthread_mutex_unlock(&ep->mu);
    return NULL;
}

static sio_code start_threads(sio_epoch *ep, sio_error *err)
{
    for (uint32_t i = 0; i < ep->cfg.read_threads; i++) {
        if (pthread_create(&ep->threads[i], NULL, worker_main, ep) != 0)
            return sio_seterr(err, SIO_ERR_NOMEM, "cannot start a thread");
        ep->nthreads++;
    }
    return SIO_OK;
}

/* Reader pool -------------------------------------------------------- */

/* Tell the pool that ep may have a reader to fill (ep->mu held); urgent:
 * ep's consumer waits for one. Returns 1 when a thread was idle. */
static int pool_kick(rpool *p, sio_epoch *ep, int urgent)
{
    int idle;
    pthread_mutex_lock(&p->mu);
    p->pending = 1;
    if (urgent)
        p->urgent = ep;
    else
        p->hint = ep;
    idle = p->idle > 0;
    if (idle)
        pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return idle;
}

/* Fill readers of member m while one wants a sample, up to
 * POOL_VISIT_STEPS samples (no lock held): the one its consumer waits for
 * first, else as an epoch's own thread would pick. Returns 1 when it
 * read. */
static int pool_visit(sio_epoch *m)
{
    int steps = 0;
    for (;;) {
        reader *pick = NULL;
        pthread_mutex_lock(&m->mu);
        if (!m->stop && steps < POOL_VISIT_STEPS) {
            if (m->consumer_waiting && m->waiting_for &&
                reader_wants(m, m->waiting_for))
                pick = (reader *)(uintptr_t)m->waiting_for;
            else
                pick = pick_reader(m);
            if (pick)
                pick->busy = 1;
        }
        pthread_mutex_unlock(&m->mu);
        if (!pick)
            return steps > 0;
        reader_step(m, pick);
        steps++;
    }
}

static void *pool_main(void *arg)
{
    rpool *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        int found = 0;
        /* This scan covers every kick so far: another thread that finds
         * nothing may sleep unless a kick comes after this point (a kick
         * seen by every thread would have them all scan again). */
        p->pending = 0;
        /* urgent, hint, then the members from p->next; the member list
         * may change whenever p->mu is dropped */
        for (uint32_t k = 0; k < p->nmembers + 2 && !found && !p->stop;
             k++) {
            sio_epoch *m;
            if (k < 2)
                m = k == 0 ? p->urgent : p->hint;
            else
                m = p->members[(p->next + k - 2) % p->nmembers];
            if (!m)
                continue;
            m->visitors++;
            pthread_mutex_unlock(&p->mu);
            found = pool_visit(m);
            pthread_mutex_lock(&p->mu);
            if (--m->visitors == 0 && m->leaving)
                pthread_cond_broadcast(&p->left);
            if (!found && p->urgent == m)
                p->urgent = NULL;
            if (!found && p->hint == m)
                p->hint = NULL;
            if (found && k >= 2 && p->nmembers)
                p->next = (p->next + k - 1) % p->nmembers;
        }
        if (!found && !p->pending && !p->stop) {
            p->idle++;
            pthread_cond_wait(&p->work, &p->mu);
            p->idle--;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Stop and free a mixed epoch's pool (its members have left). */
static void pool_free(rpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->left);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->members);
    free(p);
}

/* The pool of mixed epoch ep: min(read_threads x sources,
 * max(read_threads, SIO_MIX_THREADS_MAX)) threads; none without
 * read_threads (the consuming thread reads). */
static sio_code pool_start(sio_epoch *ep, sio_error *err)
{
    uint32_t rt = ep->sub_threads;
    uint64_t n = (uint64_t)rt * ep->nmsrc;
    uint32_t most = rt > SIO_MIX_THREADS_MAX ? rt : SIO_MIX_THREADS_MAX;
    rpool *p;
    if (n > most)
        n = most;
    if (n == 0)
        return SIO_OK;
    p = calloc(1, sizeof *p);
    if (!p)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->left, NULL);
    p->cap = ep->nmsrc;
    p->members = calloc(p->cap, sizeof *p->members);
    p->threads = calloc((size_t)n, sizeof *p->threads);
    ep->pool = p;
    if (!p->members || !p->threads)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < (uint32_t)n; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_main, p) != 0)
            return sio_seterr(err, SIO_ERR_NOMEM, "cannot start a thread");
        p->nthreads++;
    }
    return SIO_OK;
}

/* Sub-epoch ep takes its reader threads from p. */
static sio_code pool_join(rpool *p, sio_epoch *ep, sio_error *err)
{
    sio_code rc = SIO_OK;
    pthread_mutex_lock(&p->mu);
    if (p->nmembers == p->cap) { /* one sub-epoch per source at a time */
        rc = sio_seterr(err, SIO_ERR_INVALID, "reader pool full");
    } else {
        p->members[p->nmembers++] = ep;
        ep->rp = p;
        p->pending = 1;
        pthread_cond_broadcast(&p->work);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* ep leaves its pool (ep->stop set): no pool thread is inside it after
 * this. */
static void pool_leave(sio_epoch *ep)
{
    rpool *p = ep->rp;
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->nmembers; i++)
        if (p->members[i] == ep) {
            p->members[i] = p->members[--p->nmembers];
            break;
        }
    if (p->urgent == ep)
        p->urgent = NULL;
    if (p->hint == ep)
        p->hint = NULL;
    ep->leaving = 1;
    while (ep->visitors > 0)
        pthread_cond_wait(&p->left, &p->mu);
    pthread_mutex_unlock(&p->mu);
    ep->rp = NULL;
}

/* Everything but the readers and threads (shared by both opens). */
static sio_code epoch_new(sio_io *io, const sio_shardlist *list,
                          const sio_epoch_config *cfg, sio_epoch **out,
                          sio_error *err)
{
    sio_epoch *ep;
    sio_rng srng;
    size_t total;
    *out = NULL;
    if (!list || !cfg)
        return sio_seterr(err, SIO_ERR_INVALID, "no shard list or config");
    if (cfg->interleave < 1 || cfg->interleave > EPOCH_INTERLEAVE_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "interleave %u not in 1..%u",
                          cfg->interleave, EPOCH_INTERLEAVE_MAX);
    if (cfg->buffer_samples < 1 || cfg->buffer_samples > EPOCH_BUFFER_MAX)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "shuffle buffer %u not in 1..%u",
                          cfg->buffer_samples, EPOCH_BUFFER_MAX);
    if (cfg->replicas > EPOCH_REPLICAS_MAX ||
        (cfg->replicas > 1 && cfg->replica >= cfg->replicas) ||
        (cfg->replicas <= 1 && cfg->replica != 0))
        return sio_seterr(err, SIO_ERR_INVALID,
                          "replica %u of %u: need replica < replicas <= %u",
                          cfg->replica, cfg->replicas, EPOCH_REPLICAS_MAX);
    if (cfg->read_threads > EPOCH_THREADS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "read_threads %u above %u",
                          cfg->read_threads, EPOCH_THREADS_MAX);
    if (cfg->readahead_shards > EPOCH_READAHEAD_SHARDS_MAX)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "readahead_shards %u above %u",
                          cfg->readahead_shards, EPOCH_READAHEAD_SHARDS_MAX);
    total = sio_shardlist_count(list);
    if (cfg->range_count &&
        ((uint64_t)cfg->range_first + cfg->range_count > total))
        return sio_seterr(err, SIO_ERR_INVALID,
                          "shard range %u+%u past the list's %zu",
                          cfg->range_first, cfg->range_count, total);
    if (cfg->nmix) {
        if (cfg->nmix > SIO_MIX_SOURCES_MAX || !cfg->mix)
            return sio_seterr(err, SIO_ERR_INVALID,
                              "mixed epoch: 1..%u sources",
                              SIO_MIX_SOURCES_MAX);
        if (cfg->replicas > 1)
            return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                              "a mixed epoch cannot be split over replicas");
        for (uint32_t i = 0; i < cfg->nmix; i++)
            if (!cfg->mix[i].count ||
                (uint64_t)cfg->mix[i].first + cfg->mix[i].count > total)
                return sio_seterr(err, SIO_ERR_INVALID,
                                  "mixed source %u: shard range %u+%u not "
                                  "in the list's %zu", i, cfg->mix[i].first,
                                  cfg->mix[i].count, total);
    }
    ep = calloc(1, sizeof *ep);
    if (!ep)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&ep->mu, NULL);
    pthread_cond_init(&ep->work, NULL);
    pthread_cond_init(&ep->ready, NULL);
    ep->io = io;
    ep->list = list;
    ep->cfg = *cfg;
    if (!ep->cfg.readahead_bytes)
        ep->cfg.readahead_bytes = SIO_READAHEAD_BYTES_DEFAULT;
    ep->nshards = cfg->nmix ? 0 : cfg->range_count ? cfg->range_count : total;
    if (cfg->nmix) {
        /* The sources read; this epoch only mixes and shuffles. */
        ep->sub_threads = cfg->read_threads;
        ep->cfg.read_threads = 0;
        ep->cfg.mix = NULL;
        ep->msrc = calloc(cfg->nmix, sizeof *ep->msrc);
        if (!ep->msrc) {
            sio_epoch_close(ep);
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        }
        ep->nmsrc = cfg->nmix;
        for (uint32_t i = 0; i < cfg->nmix; i++) {
            ep->msrc[i].def = cfg->mix[i];
            ep->msrc[i].left = cfg->mix[i].quota;
        }
        sio_rng_seed(&ep->mrng, cfg->seed, cfg->epoch, SIO_RNG_MIX);
    }
    /* Readers alive at once: K in slots + the look-ahead window. */
    ep->rcap = (size_t)cfg->interleave + cfg->readahead_shards + 1;
    ep->perm = malloc((ep->nshards ? ep->nshards : 1) * sizeof *ep->perm);
    ep->slots = calloc(cfg->interleave, sizeof *ep->slots);
    ep->readers = calloc(ep->rcap, sizeof *ep->readers);
    ep->buf = malloc(cfg->buffer_samples * sizeof *ep->buf);
    /* The byte-cap eviction emits at most the whole buffer plus one. */
    ep->outq = malloc(((size_t)cfg->buffer_samples + 1) * sizeof *ep->outq);
    ep->threads = calloc(cfg->read_threads ? cfg->read_threads : 1,
                         sizeof *ep->threads);
    /* A range (a mixed source's pass) indexes only its own shards. */
    ep->ixbase = cfg->range_count ? cfg->range_first : 0;
    if (cfg->index)
        ep->ixv = calloc(cfg->range_count ? cfg->range_count
                                          : total ? total : 1,
                         sizeof *ep->ixv);
    if (!ep->perm || !ep->slots || !ep->readers || !ep->buf || !ep->outq ||
        !ep->threads || (cfg->index && !ep->ixv)) {
        sio_epoch_close(ep);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    sio_rng_seed(&srng, cfg->seed, cfg->epoch,
                 cfg->order_stream ? cfg->order_stream : SIO_RNG_SHARDS);
    if (cfg->resample) {
        for (size_t i = 0; i < ep->nshards; i++)
            ep->perm[i] = (uint32_t)sio_rng_below(&srng, ep->nshards);
    } else {
        sio_permute(&srng, ep->perm, ep->nshards);
    }
    if (cfg->range_count)
        for (size_t i = 0; i < ep->nshards; i++)
            ep->perm[i] += cfg->range_first;
    if (cfg->replicas > 1) {
        /* This replica's shards: permuted positions j, j+R, j+2R, ... */
        size_t n = 0;
        for (size_t p = cfg->replica; p < ep->nshards; p += cfg->replicas)
            ep->perm[n++] = ep->perm[p];
        ep->nshards = n;
    }
    sio_rng_seed(&ep->brng, cfg->seed, cfg->epoch,
                 SIO_RNG_BUFFER + 256ull * cfg->replica);
    *out = ep;
    return SIO_OK;
}

sio_code sio_epoch_open(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, sio_epoch **out,
                        sio_error *err)
{
    return sio_epoch_open_at(io, list, cfg, 0, out, err);
}

uint64_t sio_epoch_emitted(const sio_epoch *ep)
{
    return ep->emitted;
}

void sio_epoch_cancel(sio_epoch *ep)
{
    if (!ep)
        return;
    pthread_mutex_lock(&ep->mu);
    ep->stop = 1;
    pthread_cond_broadcast(&ep->work);
    pthread_cond_broadcast(&ep->ready);
    for (uint32_t i = 0; i < ep->nmsrc; i++)
        sio_epoch_cancel(ep->msrc[i].sub);
    pthread_mutex_unlock(&ep->mu);
}

uint64_t sio_epoch_source_samples(const sio_epoch *ep, uint32_t s)
{
    return ep && s < ep->nmsrc ? ep->msrc[s].taken : 0;
}

void sio_epoch_close(sio_epoch *ep)
{
    if (!ep)
        return;
    pthread_mutex_lock(&ep->mu);
    ep->stop = 1;
    pthread_cond_broadcast(&ep->work);
    pthread_mutex_unlock(&ep->mu);
    pool_leave(ep);
    for (uint32_t i = 0; i < ep->nthreads; i++)
        pthread_join(ep->threads[i], NULL);
    for (uint32_t i = 0; i < ep->nmsrc; i++)
        sio_epoch_close(ep->msrc[i].sub);
    pool_free(ep->pool);
    free(ep->msrc);
    for (size_t i = 0; ep->readers && i < ep->nreaders; i++)
        reader_free(ep->readers[i]);
    if (ep->meta)
        for (uint32_t s = 0; ep->slots && s < ep->cfg.interleave; s++)
            reader_free(ep->slots[s]);
    for (size_t i = 0; ep->buf && i < ep->count; i++)
        ent_drop(ep, ep->buf[i]);
    for (size_t i = 0; ep->outq && i < ep->qlen; i++)
        ent_drop(ep, ep->outq[(ep->qhead + i) %
                              ((size_t)ep->cfg.buffer_samples + 1)]);
    for (size_t i = 0; i < ep->nvents; i++)
        sio_sample_unref(ep->vents[i].real);
    while (ep->chunks) {
        mrec_chunk *c = ep->chunks;
        ep->chunks = c->next;
        free(c);
    }
    pthread_cond_destroy(&ep->ready);
    pthread_cond_destroy(&ep->work);
    pthread_mutex_destroy(&ep->mu);
    free(ep->vents);
    free(ep->ixv);
    free(ep->threads);
    free(ep->outq);
    free(ep->buf);
    free(ep->readers);
    free(ep->slots);
    free(ep->perm);
    free(ep);
}

/* A shard ended with an error. Skip or fail per on_error. */
static sio_code shard_failed(sio_epoch *ep, sio_code rc, const char *url,
                             const char *why)
{
    char shown[512];
    sio_url_redact(url, shown, sizeof shown);
    if (ep->cfg.on_error == SIO_ON_ERROR_FAIL) {
        snprintf(ep->err, sizeof ep->err, "shard failed url=%.300s code=%s: %.400s",
                 shown, sio_strerror(rc), why);
        ep->failed = 1;
        return rc;
    }
    ep->st.shards_skipped++;
    SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
            "event=shard_skipped url=%s code=%s reason=\"%s\"", shown,
            sio_strerror(rc), why);
    return SIO_OK;
}

/* Give slot s the reader of the next permuted position (or none). */
static sio_code fill_slot(sio_epoch *ep, uint32_t s)
{
    sio_code rc = SIO_OK;
    ep->slots[s] = NULL;
    if (ep->next_shard >= ep->nshards)
        return SIO_OK;
    size_t pos = ep->next_shard++;
    if (ep->meta) {
        ep->slots[s] = reader_new(ep, pos, 0, 0);
        return ep->slots[s] ? SIO_OK : SIO_ERR_NOMEM;
    }
    pthread_mutex_lock(&ep->mu);
    rc = ensure_readers(ep, pos + 1 + ep->cfg.readahead_shards);
    for (size_t i = 0; rc == SIO_OK && i < ep->nreaders; i++)
        if (ep->readers[i]->pos == pos)
            ep->slots[s] = ep->readers[i];
    pthread_mutex_unlock(&ep->mu);
    return rc;
}

/* The next sample of slot s's shard: *out, or NULL when the shard ended
 * (then *rc_out and msg say how). Waits for a worker, or reads itself. */
static void slot_take(sio_epoch *ep, reader *r, const sio_sample **out,
                      sio_code *rc_out, char *msg, size_t msglen)
{
    *out = NULL;
    pthread_mutex_lock(&ep->mu);
    while (r->qlen == 0 && !r->done && !ep->stop) {
        /* Without threads, or when every pool thread is busy elsewhere,
         * the shard waited for is read here. */
        if (!r->busy && ep->nthreads == 0 &&
            (!ep->rp || !pool_kick(ep->rp, ep, 1))) {
            r->busy = 1;
            pthread_mutex_unlock(&ep->mu);
            reader_step(ep, r);
            pthread_mutex_lock(&ep->mu);
            if (ep->rp) /* its queue may want more */
                pool_kick(ep->rp, ep, 0);
            continue;
        }
        if (!r->busy && ep->workers_idle) /* a worker must look at it */
            pthread_cond_signal(&ep->work);
        ep->consumer_waiting = 1;
        ep->waiting_for = r;
        pthread_cond_wait(&ep->ready, &ep->mu);
        ep->consumer_waiting = 0;
        ep->waiting_for = NULL;
    }
    if (r->qlen > 0) {
        int was_full = !r->busy && !reader_wants(ep, r);
        *out = r->q[r->qhead];
        r->qhead = (r->qhead + 1) % SIO_READAHEAD_SAMPLES;
        r->qlen--;
        r->qbytes -= (*out)->bytes;
        if (was_full && ep->workers_idle) /* room again */
            pthread_cond_signal(&ep->work);
        else if (was_full && ep->rp)
            pool_kick(ep->rp, ep, 0);
    } else if (!r->done) {
        *rc_out = SIO_ERR_CANCELED;
        snprintf(msg, msglen, "canceled");
    } else {
        *rc_out = r->rc;
        snprintf(msg, msglen, "%s", r->msg);
    }
    pthread_mutex_unlock(&ep->mu);
}

/* Does the order's gate keep r from its next group (asked again only
 * when r reached what it let in before)? */
static int gate_shut(sio_epoch *ep, reader *r)
{
    const sio_epoch *h = home_of(ep);
    if (!h->gate || r->g < r->gready)
        return 0;
    r->gready = h->gate(h->gate_ud, r->idx, r->g);
    return r->g >= r->gready;
}

/* Does r's shard fail where r is (the order's stop hook: a read of it
 * failed there under on_error=fail)? Asked before each group until the
 * hook names the group (then only once r reaches it); 1 with *rc_out and
 * msg set as the read's failure. */
static int meta_stopped(sio_epoch *ep, reader *r, sio_code *rc_out,
                        char *msg, size_t msglen)
{
    uint64_t at = UINT64_MAX;
    sio_code rc = SIO_OK;
    const sio_epoch *h = home_of(ep);
    if (!h->stop_fn)
        return 0;
    if (r->g < r->mstop && r->mstop != UINT64_MAX)
        return 0;
    if (!h->stop_fn(h->stop_ud, r->idx, &at, &rc, msg, msglen))
        return 0;
    r->mstop = at;
    if (r->g < at)
        return 0;
    *rc_out = rc ? rc : SIO_ERR_IO;
    return 1;
}

/* Meta mode: the next good group of r's shard from the index, as an mrec.
 * SIO_ERR_AGAIN when the index does not know it (yet). */
static sio_code meta_take(sio_epoch *ep, reader *r, const sio_sample **out,
                          sio_code *rc_out, char *msg, size_t msglen)
{
    uint64_t cut = UINT64_MAX;
    *out = NULL;
    /* The gate first: a shard not made ready is not looked at (its index
     * not loaded: the step that readies it knows its size). */
    if (gate_shut(ep, r))
        return meta_stopped(ep, r, rc_out, msg, msglen) ? SIO_OK
                                                        : SIO_ERR_AGAIN;
    if (meta_stopped(ep, r, rc_out, msg, msglen))
        return SIO_OK;
    /* The entry and the cut are looked up once per shard (an entry of
     * the epoch never changes; the cut is asked again when the journal
     * took a decision since): no lock per group. */
    sio_index_entry *e = r->mix;
    if (!e) {
        const sio_epoch *h = home_of(ep);
        if (h->entry_fn)
            e = h->entry_fn(h->entry_ud, r->idx);
        if (!e)
            e = shard_ixv(ep, r->idx);
        if (!e)
            return SIO_ERR_AGAIN;
        r->mix = e;
    }
    if (ep->cfg.journal) {
        uint64_t jg = sio_journal_generation(ep->cfg.journal);
        if (!r->mcut_ok || jg != r->mjgen) {
            if (!sio_journal_cut(ep->cfg.journal, r->idx, &r->mcut))
                r->mcut = UINT64_MAX;
            r->mjgen = jg;
            r->mcut_ok = 1;
        }
        cut = r->mcut;
    }
    /* A complete index is read through a view (no lock per group) while
     * it stays the entry's; otherwise group by group. */
    if (!r->ve && sio_index_view_open(e, &r->view))
        r->ve = e;
    if (r->ve && (r->ve != e || !sio_index_view_current(e, &r->view))) {
        sio_index_view_close(r->ve, &r->view);
        r->ve = NULL;
    }
    for (;;) {
        sio_index_group g;
        if (r->g >= cut) {
            r->skipped = 1;
            *rc_out = SIO_OK;
            return SIO_OK;
        }
        if (r->g >= r->mstop && meta_stopped(ep, r, rc_out, msg, msglen))
            return SIO_OK;
        /* Groups past those the gate let in (a shard still arriving):
         * asked again, else later. */
        if (gate_shut(ep, r))
            return meta_stopped(ep, r, rc_out, msg, msglen) ? SIO_OK
                                                            : SIO_ERR_AGAIN;
        if (r->ve && r->g < r->view.n) {
            g = r->view.g[r->g];
        } else if (r->ve) {
            *rc_out = SIO_OK; /* the end of the shard (complete) */
            return SIO_OK;
        } else if (!sio_index_group_get(e, r->g, &g)) {
            sio_index_info info;
            sio_index_get_info(e, &info);
            if (info.complete && r->g >= info.known) {
                *rc_out = SIO_OK; /* the end of the shard */
                return SIO_OK;
            }
            return meta_stopped(ep, r, rc_out, msg, msglen) ? SIO_OK
                                                            : SIO_ERR_AGAIN;
        }
        if (g.flags & SIO_INDEX_GROUP_BAD) {
            if (r->nbad_first < SIO_LOSS_REFS_MAX)
                r->bad_first[r->nbad_first++] = r->g;
            r->g++;
            r->bad_samples++;
            if (ep->cfg.on_error == SIO_ON_ERROR_FAIL) {
                *rc_out = SIO_ERR_SAMPLE;
                snprintf(msg, msglen, "bad sample in shard %u group %" PRIu64,
                         r->idx, r->g - 1);
                return SIO_OK;
            }
            continue;
        }
        mrec *s = mrec_new(ep, r->idx, r->g, g.bytes);
        if (!s)
            return SIO_ERR_NOMEM;
        r->g++;
        *out = &s->pub;
        return SIO_OK;
    }
}

static sio_code epoch_open(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *cfg, uint64_t pos,
                           rpool *pool, sio_epoch **out, sio_error *err);

/* The configuration of pass k of mixed source i: the version-1
 * interleave (no buffer) over the source's part of the list, its order
 * drawn with stream SIO_RNG_PASS(i, k). */
static void pass_config(const sio_epoch *ep, uint32_t i, uint32_t k,
                        sio_epoch_config *c)
{
    *c = ep->cfg;
    c->nmix = 0;
    c->mix = NULL;
    c->buffer_samples = 1;
    c->buffer_bytes = 0;
    c->replica = c->replicas = 0;
    c->read_threads = ep->pool ? 0 : ep->sub_threads;
    c->range_first = ep->msrc[i].def.first;
    c->range_count = ep->msrc[i].def.count;
    c->resample = ep->msrc[i].def.resample;
    c->order_stream = SIO_RNG_PASS(i, k);
}

static sio_code epoch_new(sio_io *io, const sio_shardlist *list,
                          const sio_epoch_config *cfg, sio_epoch **out,
                          sio_error *err);
static sio_code advance(sio_epoch *ep);
static const sio_sample *outq_pop(sio_epoch *ep);

/* A pass of a mixed order's source (meta mode): an order of its own over
 * the source's shards, whose entries and hooks are the mixed order's
 * (home_of). */
static sio_code meta_sub_open(sio_epoch *ep, const sio_epoch_config *c,
                              sio_epoch **out, sio_error *err)
{
    sio_epoch_config sc = *c;
    sc.read_threads = 0;
    sio_code rc = epoch_new(ep->io, ep->list, &sc, out, err);
    if (rc)
        return rc;
    sio_epoch *sub = *out;
    sub->meta = 1;
    sub->home = home_of(ep);
    return SIO_OK;
}

/* The next entry of a meta pass (a sample known by its place): *out,
 * NULL at its end; SIO_ERR_AGAIN while its shards are not ready (its
 * state stays where it is). */
static sio_code meta_sub_next(sio_epoch *sub, const sio_sample **out)
{
    *out = NULL;
    if (sub->failed)
        return SIO_ERR_IO;
    sio_code rc = advance(sub);
    if (rc)
        return rc;
    if (sub->qlen > 0)
        *out = outq_pop(sub);
    return SIO_OK;
}

/* The next sample of mixed source i's sequence of passes: *out, or NULL
 * when a pass gave nothing (the source is dry). */
static sio_code source_take(sio_epoch *ep, uint32_t i,
                            const sio_sample **out)
{
    mixsrc *m = &ep->msrc[i];
    sio_error e;
    sio_code rc;
    *out = NULL;
    for (;;) {
        if (!m->sub) {
            sio_epoch_config c;
            sio_epoch *sub = NULL;
            if (m->pass >= SIO_MIX_PASSES_MAX) {
                snprintf(ep->err, sizeof ep->err,
                         "mixed source %u: more than %u passes in one epoch",
                         i, SIO_MIX_PASSES_MAX);
                ep->failed = 1;
                return SIO_ERR_LIMIT;
            }
            pass_config(ep, i, m->pass, &c);
            e.msg[0] = '\0';
            if (ep->meta)
                rc = meta_sub_open(ep, &c, &sub, &e);
            else
                rc = epoch_open(ep->io, ep->list, &c, 0, ep->pool, &sub, &e);
            if (rc) {
                snprintf(ep->err, sizeof ep->err, "mixed source %u: %s", i,
                         e.msg);
                ep->failed = 1;
                return rc;
            }
            sub->loss_home = ep;
            pthread_mutex_lock(&ep->mu);
            m->sub = sub;
            if (ep->stop)
                sio_epoch_cancel(sub);
            pthread_mutex_unlock(&ep->mu);
            m->pass_taken = 0;
        }
        rc = ep->meta ? meta_sub_next(m->sub, out)
                      : sio_epoch_next(m->sub, out);
        if (rc == SIO_ERR_AGAIN && ep->meta)
            return rc; /* the pass waits for its shards: asked again */
        if (rc) {
            snprintf(ep->err, sizeof ep->err, "%s", sio_epoch_errmsg(m->sub));
            ep->failed = 1;
            if (sio_epoch_index_dropped(m->sub)) {
                /* the feed opens the mixed epoch again */
                mark_index_dropped(ep);
            }
            return rc;
        }
        if (*out) {
            m->pass_taken++;
            return SIO_OK;
        }
        /* The pass ended: its counters join the epoch's. */
        sio_epoch_stats st;
        sio_epoch_get_stats(m->sub, &st);
        ep->st.shards_done += st.shards_done;
        ep->st.shards_skipped += st.shards_skipped;
        ep->st.samples_skipped += st.samples_skipped;
        pthread_mutex_lock(&ep->mu);
        sio_epoch *done = m->sub;
        m->sub = NULL;
        pthread_mutex_unlock(&ep->mu);
        sio_epoch_close(done);
        if (m->pass_taken == 0) {
            m->dry = 1;
            return SIO_OK;
        }
        m->pass++;
    }
}

/* Next sample of a mixed epoch's input: draw its source by the quotas
 * left (below(sum), the first source whose running sum passes the draw),
 * take that source's next sample. A dry source's quota is dropped and
 * the draw repeated. */
static sio_code mix_next(sio_epoch *ep, const sio_sample **out)
{
    *out = NULL;
    for (;;) {
        uint64_t total = 0;
        for (uint32_t i = 0; i < ep->nmsrc; i++)
            total += ep->msrc[i].left;
        if (total == 0)
            return SIO_OK;
        sio_rng before = ep->mrng;
        uint64_t x = sio_rng_below(&ep->mrng, total);
        uint32_t i = 0;
        while (x >= ep->msrc[i].left) {
            x -= ep->msrc[i].left;
            i++;
        }
        const sio_sample *smp = NULL;
        sio_code rc = source_take(ep, i, &smp);
        if (rc == SIO_ERR_AGAIN && ep->meta) {
            /* The draw is made again when the source's shard is ready. */
            ep->mrng = before;
            return rc;
        }
        if (rc)
            return rc;
        if (!smp) {
            SIO_LOG(&ep->cfg.log, SIO_LOG_WARN,
                    "event=mix_source_dry source=%u quota_left=%" PRIu64, i,
                    ep->msrc[i].left);
            ep->msrc[i].left = 0;
            continue;
        }
        ep->msrc[i].left--;
        ep->msrc[i].taken++;
        ((sio_sample *)(uintptr_t)smp)->source = i;
        *out = smp;
        return SIO_OK;
    }
}

/* Tell the journal what the shard of r lost as the interleave ends it:
 * its bad samples and, when lost (skipped or cut short), the shard. A
 * mixed epoch's source pass tells it as the mixed epoch, at its place. */
static void loss_tell(sio_epoch *ep, const reader *r, int lost)
{
    sio_epoch *h = ep->loss_home ? ep->loss_home : ep;
    if (!h->cfg.journal || (!lost && r->bad_samples == 0))
        return;
    if (!sio_journal_loss(h->cfg.journal, h->loss_seq, h->emitted, r->idx,
                          lost, r->bad_samples, r->bad_first,
                          r->nbad_first))
        h->loss_astray = 1;
    h->loss_seq++;
}

/* Next sample of the interleaved sequence, or NULL when all are done. */
static sio_code interleave_next(sio_epoch *ep, const sio_sample **out)
{
    sio_code rc;
    *out = NULL;
    if (ep->nmsrc)
        return mix_next(ep, out);
    if (!ep->started) {
        ep->started = 1;
        for (uint32_t i = 0; i < ep->cfg.interleave; i++) {
            rc = fill_slot(ep, i);
            if (rc)
                return rc;
        }
        ep->active = 0;
        for (uint32_t i = 0; i < ep->cfg.interleave; i++)
            ep->active += ep->slots[i] != NULL;
    }
    while (ep->active > 0) {
        uint32_t s = ep->cur;
        if (!ep->slots[s]) {
            ep->cur = (ep->cur + 1) % ep->cfg.interleave;
            continue;
        }
        for (;;) {
            reader *r = ep->slots[s];
            const sio_sample *smp = NULL;
            sio_code end_rc = SIO_OK;
            char why[640];
            if (ep->meta) {
                rc = meta_take(ep, r, &smp, &end_rc, why, sizeof why);
                if (rc)
                    return rc; /* the slot stays where it is */
            } else {
                slot_take(ep, r, &smp, &end_rc, why, sizeof why);
            }
            if (smp) {
                ep->cur = (s + 1) % ep->cfg.interleave;
                *out = smp;
                return SIO_OK;
            }
            /* The shard ended: account for it in logical order. */
            ep->st.samples_skipped += r->bad_samples;
            if (end_rc == SIO_ERR_SAMPLE) {
                snprintf(ep->err, sizeof ep->err, "bad sample: %s", why);
                ep->failed = 1;
                return end_rc;
            }
            if (fatal_code(end_rc) || r->ixwrong) {
                snprintf(ep->err, sizeof ep->err, "%s", why);
                ep->failed = 1;
                return end_rc;
            }
            /* (an epoch that fails above tells nothing: the one opened
             * again tells its losses in their order) */
            loss_tell(ep, r, end_rc != SIO_OK || r->skipped);
            if (end_rc != SIO_OK) {
                rc = shard_failed(ep, end_rc,
                                  sio_shardlist_url(ep->list, r->idx), why);
                if (rc)
                    return rc;
            } else if (r->skipped) {
                ep->st.shards_skipped++;
            } else {
                ep->st.shards_done++;
            }
            if (!ep->meta) {
                pthread_mutex_lock(&ep->mu);
                for (size_t i = 0; i < ep->nreaders; i++)
                    if (ep->readers[i] == r) {
                        ep->readers[i] = ep->readers[--ep->nreaders];
                        break;
                    }
                pthread_mutex_unlock(&ep->mu);
            }
            reader_free(r);
            rc = fill_slot(ep, s);
            if (rc)
                return rc;
            if (!ep->slots[s]) {
                ep->active--;
                ep->cur = (s + 1) % ep->cfg.interleave;
                break;
            }
        }
    }
    return SIO_OK;
}

static void emit(sio_epoch *ep, const sio_sample *s)
{
    size_t cap = (size_t)ep->cfg.buffer_samples + 1;
    ((sio_sample *)(uintptr_t)s)->global_index = ep->emitted++;
    ep->outq[(ep->qhead + ep->qlen) % cap] = s;
    ep->qlen++;
}

/* Feed one incoming sample to the buffer (step 3). */
static void buffer_push(sio_epoch *ep, const sio_sample *x)
{
    uint64_t cap = ep->cfg.buffer_bytes;
    if (ep->count == 0 ||
        (ep->count < ep->cfg.buffer_samples &&
         (cap == 0 || ep->bytes + x->bytes <= cap))) {
        ep->buf[ep->count++] = x;
        ep->bytes += x->bytes;
        return;
    }
    size_t j = (size_t)sio_rng_below(&ep->brng, ep->count);
    const sio_sample *o = ep->buf[j];
    ep->buf[j] = x;
    ep->bytes = ep->bytes - o->bytes + x->bytes;
    emit(ep, o);
    while (cap && ep->bytes > cap && ep->count > 1) {
        j = (size_t)sio_rng_below(&ep->brng, ep->count);
        o = ep->buf[j];
        ep->buf[j] = ep->buf[--ep->count];
        ep->bytes -= o->bytes;
        emit(ep, o);
    }
}

/* Emit at least one more entry into outq, or note the end (0 returned
 * with outq empty). */
static sio_code advance_in(sio_epoch *ep)
{
    while (ep->qlen == 0) {
        if (!ep->input_done) {
            const sio_sample *x;
            sio_code rc = interleave_next(ep, &x);
            if (rc)
                return rc;
            if (x) {
                buffer_push(ep, x);
                continue;
            }
            ep->input_done = 1;
        }
        if (ep->count == 0)
            return SIO_OK; /* end of the epoch */
        size_t j = (size_t)sio_rng_below(&ep->brng, ep->count);
        const sio_sample *o = ep->buf[j];
        ep->buf[j] = ep->buf[--ep->count];
        ep->bytes -= o->bytes;
        emit(ep, o);
    }
    return SIO_OK;
}

static sio_code advance(sio_epoch *ep)
{
    sio_code rc = advance_in(ep);
    /* Every loss found before what was emitted is told (a source pass
     * of a mixed epoch: the mixed epoch vouches for its own). */
    if (rc == SIO_OK && ep->cfg.journal && !ep->loss_home &&
        !ep->loss_astray)
        sio_journal_loss_reach(ep->cfg.journal,
                               ep->input_done ? UINT64_MAX : ep->emitted);
    return rc;
}

static const sio_sample *outq_pop(sio_epoch *ep)
{
    size_t cap = (size_t)ep->cfg.buffer_samples + 1;
    const sio_sample *s = ep->outq[ep->qhead];
    ep->qhead = (ep->qhead + 1) % cap;
    ep->qlen--;
    return s;
}

/* The real sample behind an emitted mrec (data mode after a seek). */
static sio_code materialize(sio_epoch *ep, mrec *st, const sio_sample **out)
{
    vent *v;
    sio_code rc = SIO_OK;
    pthread_mutex_lock(&ep->mu);
    v = &ep->vents[st->vi];
    for (;;) {
        if (v->state == V_DONE || v->state == V_FAILED)
            break;
        if (ep->stop) {
            v->state = V_FAILED;
            snprintf(ep->vmsg, sizeof ep->vmsg, "canceled");
            break;
        }
        if (v->state == V_PENDING) {
            vfetch(ep, st->vi);
            continue;
        }
        ep->consumer_waiting = 1;
        pthread_cond_wait(&ep->ready, &ep->mu);
        ep->consumer_waiting = 0;
    }
    if (v->state == V_DONE) {
        *out = v->real;
        v->real = NULL;
        ((sio_sample *)(uintptr_t)*out)->global_index = st->pub.global_index;
        ((sio_sample *)(uintptr_t)*out)->source = st->pub.source;
    } else {
        snprintf(ep->err, sizeof ep->err, "seek: %s", ep->vmsg);
        /* A shard found changed under the seek (a local file rewritten,
         * a group that is not its index's any more) is told as such: the
         * consumer comes again and reads it as it is then. */
        rc = ep->vcode == SIO_ERR_CHANGED ? SIO_ERR_CHANGED : SIO_ERR_IO;
    }
    pthread_mutex_unlock(&ep->mu);
    st->vi = UINT32_MAX;
    ent_drop(ep, &st->pub);
    return rc;
}

sio_code sio_epoch_next(sio_epoch *ep, const sio_sample **out)
{
    *out = NULL;
    if (ep->failed)
        return SIO_ERR_IO;
    sio_code rc = advance(ep);
    if (rc)
        return rc;
    if (ep->qlen == 0)
        return SIO_OK;
    const sio_sample *s = outq_pop(ep);
    if (IS_MREC(s)) {
        rc = materialize(ep, (mrec *)(uintptr_t)s, &s);
        if (rc) {
            ep->failed = 1;
            return rc;
        }
    }
    ep->st.samples++;
    ep->st.bytes += s->bytes;
    *out = s;
    return SIO_OK;
}

/* Order of virtual entries: queued ones first (in queue order), then the
 * buffer's by (shard, group) so that one shard's are read together. */
static int vent_cmp(const void *a, const void *b)
{
    const vent *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return x->group < y->group ? -1 : x->group > y->group;
}

/* Turn the metadata records of a seek into virtual entries and start
 * data mode. */
static sio_code switch_to_data(sio_epoch *ep, sio_error *err)
{
    size_t cap = (size_t)ep->cfg.buffer_samples + 1, n = 0, nq = ep->qlen;
    ep->nvents = ep->count + ep->qlen;
    ep->vents = calloc(ep->nvents ? ep->nvents : 1, sizeof *ep->vents);
    if (!ep->vents)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ep->qlen; i++) {
        const sio_sample *s = ep->outq[(ep->qhead + i) % cap];
        ep->vents[n].shard = s->shard_index;
        ep->vents[n++].group = s->index_in_shard;
    }
    for (size_t i = 0; i < ep->count; i++) {
        ep->vents[n].shard = ep->buf[i]->shard_index;
        ep->vents[n++].group = ep->buf[i]->index_in_shard;
    }
    if (ep->nvents > nq)
        qsort(ep->vents + nq, ep->nvents - nq, sizeof *ep->vents, vent_cmp);
    /* Point each mrec at its entry: queued ones by position, buffered
     * ones by binary search in the sorted part. */
    for (size_t i = 0; i < ep->qlen; i++)
        ((mrec *)(uintptr_t)ep->outq[(ep->qhead + i) % cap])->vi = (uint32_t)i;
    for (size_t i = 0; i < ep->count; i++) {
        vent key = {.shard = ep->buf[i]->shard_index,
                    .group = ep->buf[i]->index_in_shard};
        vent *hit = bsearch(&key, ep->vents + nq, ep->nvents - nq,
                            sizeof *ep->vents, vent_cmp);
        ((mrec *)(uintptr_t)ep->buf[i])->vi = (uint32_t)(hit - ep->vents);
    }
    /* The slots' shards continue from the groups they reached. */
    ep->meta = 0;
    for (uint32_t s = 0; s < ep->cfg.interleave; s++) {
        reader *r = ep->slots[s];
        if (!r)
            continue;
        r->q = malloc(SIO_READAHEAD_SAMPLES * sizeof *r->q);
        if (!r->q)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        r->start_group = r->g;
        ep->readers[ep->nreaders++] = r;
    }
    ep->ahead_end = ep->next_shard;
    pthread_mutex_lock(&ep->mu);
    sio_code rc = ensure_readers(ep, ep->next_shard + ep->cfg.readahead_shards);
    pthread_mutex_unlock(&ep->mu);
    if (rc)
        return sio_seterr(err, rc, "out of memory");
    return SIO_OK;
}

/* Run meta mode until P entries were emitted; drop those below P. */
static sio_code meta_run(sio_epoch *ep, uint64_t pos, sio_error *err)
{
    while (ep->emitted < pos) {
        while (ep->qlen > 0)
            ent_drop(ep, outq_pop(ep));
        sio_code rc = advance(ep);
        if (rc == SIO_ERR_AGAIN)
            return sio_seterr(err, SIO_ERR_AGAIN,
                              "position %" PRIu64 " is not reachable from "
                              "the shard indexes yet (indexed up to %" PRIu64
                              ")", pos, ep->emitted);
        if (rc)
            return sio_seterr(err, rc, "%s", ep->err);
        if (ep->qlen == 0)
            break; /* the epoch ends before pos */
    }
    while (ep->qlen > 0 && ep->outq[ep->qhead]->global_index < pos)
        ent_drop(ep, outq_pop(ep));
    return SIO_OK;
}

/* sio_epoch_open_at; a sub-epoch of a mixed epoch takes its reader
 * threads from pool (NULL: its own, cfg->read_threads of them). */
static sio_code epoch_open(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *cfg, uint64_t pos,
                           rpool *pool, sio_epoch **out, sio_error *err)
{
    sio_epoch *ep = NULL;
    sio_code rc;
    *out = NULL;
    if (pos > 0 && cfg->nmix)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "a mixed epoch is replayed to a position");
    if (pos > 0 && !cfg->index)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED,
                          "a seek needs shard indexes");
    rc = epoch_new(io, list, cfg, &ep, err);
    if (rc)
        return rc;
    if (pos > 0) {
        ep->meta = 1;
        rc = meta_run(ep, pos, err);
        if (rc == SIO_OK)
            rc = switch_to_data(ep, err);
        if (rc)
            goto out;
    } else {
        pthread_mutex_lock(&ep->mu);
        rc = ensure_readers(ep, (size_t)cfg->interleave +
                                    cfg->readahead_shards);
        pthread_mutex_unlock(&ep->mu);
        if (rc) {
            sio_seterr(err, rc, "out of memory");
            goto out;
        }
    }
    if (pool)
        rc = pool_join(pool, ep, err);
    else if (ep->nmsrc)
        rc = pool_start(ep, err);
    else
        rc = start_threads(ep, err);
    if (rc)
        goto out;
    /* Stats count what this epoch hands out, from pos on. */
    memset(&ep->st, 0, sizeof ep->st);
    *out = ep;
    ep = NULL;
out:
    sio_epoch_close(ep);
    return rc;
}

sio_code sio_epoch_open_at(sio_io *io, const sio_shardlist *list,
                           const sio_epoch_config *cfg, uint64_t pos,
                           sio_epoch **out, sio_error *err)
{
    return epoch_open(io, list, cfg, pos, NULL, out, err);
}

/* sio_epoch_order's array, filled through the callback form. */
static sio_code order_store(void *ud, uint64_t i, const sio_order_item *it)
{
    sio_order_item *items = ud;
    items[i] = *it;
    return SIO_OK;
}

sio_code sio_epoch_order(sio_io *io, const sio_shardlist *list,
                         const sio_epoch_config *cfg, uint64_t from,
                         sio_order_item *items, size_t max, size_t *n,
                         sio_error *err)
{
    return sio_epoch_order_each(io, list, cfg, from, max, order_store, items,
                                n, err);
}

/* A persistent order over metadata: a meta-mode epoch that keeps its
 * state (slots, buffer, PRNG) between calls, so that Y is produced as far
 * as the indexes reach and continued when they reach further. */
struct sio_order {
    sio_epoch *ep;
    int done;
    int failed;     /* the order returned a code of its own (not AGAIN) */
};

/* An order over cfg at position 0, nothing taken yet. */
static sio_code order_new(sio_io *io, const sio_shardlist *list,
                          const sio_epoch_config *cfg, sio_order **out,
                          sio_error *err)
{
    sio_epoch_config c = *cfg;
    sio_code rc;
    *out = NULL;
    if (!cfg->index)
        return sio_seterr(err, SIO_ERR_UNSUPPORTED, "no shard indexes");
    sio_order *o = calloc(1, sizeof *o);
    if (!o)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    c.read_threads = 0;
    rc = epoch_new(io, list, &c, &o->ep, err);
    if (rc) {
        free(o);
        return rc;
    }
    o->ep->meta = 1;
    *out = o;
    return SIO_OK;
}

sio_code sio_order_open(sio_io *io, const sio_shardlist *list,
                        const sio_epoch_config *cfg, uint64_t from,
                        sio_order **out, sio_error *err)
{
    sio_order *o = NULL;
    sio_code rc = order_new(io, list, cfg, &o, err);
    if (rc)
        return rc;
    rc = meta_run(o->ep, from, err);
    if (rc) {
        sio_order_close(o);
        return rc;
    }
    *out = o;
    return SIO_OK;
}

sio_code sio_order_next(sio_order *o, size_t max, sio_order_fn fn, void *ud,
                        size_t *n, sio_error *err)
{
    sio_epoch *ep = o->ep;
    sio_code rc = SIO_OK;
    *n = 0;
    while (*n < max && !o->done) {
        if (ep->qlen == 0) {
            rc = advance(ep);
            if (rc == SIO_ERR_AGAIN)
                return sio_seterr(err, rc, "order known up to %" PRIu64,
                                  ep->emitted);
            if (rc) {
                o->failed = 1;
                return sio_seterr(err, rc, "%s", ep->err);
            }
            if (ep->qlen == 0) {
                o->done = 1;
                break;
            }
        }
        const sio_sample *s = outq_pop(ep);
        sio_order_item it = {s->shard_index, s->index_in_shard, s->source};
        ent_drop(ep, s);
        rc = fn(ud, *n, &it);
        if (rc)
            return rc;
        (*n)++;
    }
    return SIO_OK;
}

void sio_order_set_gate(sio_order *o,
                        uint64_t (*fn)(void *ud, uint32_t shard,
                                       uint64_t at),
                        void *ud)
{
    o->ep->gate = fn;
    o->ep->gate_ud = ud;
}

void sio_order_set_stop(sio_order *o,
                        int (*fn)(void *ud, uint32_t shard, uint64_t *at,
                                  sio_code *rc, char *msg, size_t msglen),
                        void *ud)
{
    o->ep->stop_fn = fn;
    o->ep->stop_ud = ud;
}

void sio_order_set_entries(sio_order *o,
                           sio_index_entry *(*fn)(void *ud, uint32_t shard),
                           void *ud)
{
    o->ep->entry_fn = fn;
    o->ep->entry_ud = ud;
}

int sio_order_failed(const sio_order *o)
{
    return o->failed;
}

int sio_order_done(const sio_order *o)
{
    return o->done;
}

size_t sio_order_slot_count(const sio_order *o)
{
    const sio_epoch *ep = o->ep;
    size_t n = 0;
    if (!ep->nmsrc)
        return ep->cfg.interleave;
    for (uint32_t i = 0; i < ep->nmsrc; i++)
        if (ep->msrc[i].sub && !ep->msrc[i].dry)
            n += ep->msrc[i].sub->cfg.interleave;
    return n;
}

size_t sio_order_shards_ahead(const sio_order *o, uint32_t *shards,
                              size_t max)
{
    const sio_epoch *ep = o->ep;
    size_t n = 0;
    if (ep->nmsrc) {
        /* A mixed order: the slots of every source's open pass first
         * (as many entries as sio_order_slot_count says), then the next
         * shards of each pass in turn. */
        for (uint32_t i = 0; i < ep->nmsrc; i++) {
            const sio_epoch *sub = ep->msrc[i].sub;
            if (!sub || ep->msrc[i].dry)
                continue;
            for (uint32_t s = 0; s < sub->cfg.interleave && n < max; s++)
                shards[n++] = sub->started && sub->slots[s]
                                  ? sub->slots[s]->idx
                                  : UINT32_MAX;
        }
        for (size_t k = 0; n < max; k++) {
            int any = 0;
            for (uint32_t i = 0; i < ep->nmsrc && n < max; i++) {
                const sio_epoch *sub = ep->msrc[i].sub;
                if (!sub || ep->msrc[i].dry || sub->next_shard + k >= sub->nshards)
                    continue;
                shards[n++] = sub->perm[sub->next_shard + k];
                any = 1;
            }
            if (!any)
                break;
        }
        return n;
    }
    if (ep->started)
        for (uint32_t s = 0; s < ep->cfg.interleave && n < max; s++)
            if (ep->slots[s])
                shards[n++] = ep->slots[s]->idx;
    for (size_t p = ep->next_shard; p < ep->nshards && n < max; p++)
        shards[n++] = ep->perm[p];
    return n;
}

void sio_order_close(sio_order *o)
{
    if (!o)
        return;
    sio_epoch_close(o->ep);
    free(o);
}

uint64_t sio_order_pos(const sio_order *o)
{
    return o->ep->emitted - o->ep->qlen;
}

/*
 * Checkpoints. A meta-mode order's state is its slots (the permuted
 * position of each slot's shard, the group it reached, its bad samples
 * so far), the buffer's and the output queue's metadata records, the
 * buffer's PRNG and the counters; the rest is derived again: the
 * permutation from the config, index entries and views looked up
 * lazily, the gate asked again.
 * One allocation: the header, then interleave slots, then the entries of
 * the buffer (in buffer order) followed by those of the output queue (in
 * queue order; entry i of the queue is Y[emitted - qlen + i]).
 */
typedef struct ckpt_slot {
    uint64_t g;             /* the next group */
    uint64_t bad_samples;
    uint64_t bad_first[SIO_LOSS_REFS_MAX];
    uint32_t nbad_first;
    uint32_t pos, idx;      /* permuted position, shard list index */
    uint8_t present;        /* the slot holds a shard */
    uint8_t skipped;
} ckpt_slot;

typedef struct ckpt_ent {
    uint64_t group, bytes;
    uint32_t shard, source;
} ckpt_ent;

/* A mixed order's source: its quota state and its open pass (a
 * checkpoint of that pass's own order, or none). */
typedef struct ckpt_mix {
    sio_mix_source def;
    uint64_t left, pass_taken, taken;
    uint32_t pass;
    int dry;
    struct sio_order_ckpt *sub;
} ckpt_mix;

struct sio_order_ckpt {
    /* What the sequence depends on in the order's config and list. */
    uint64_t seed, epoch, buffer_bytes, order_stream;
    uint32_t interleave, buffer_samples, replica, replicas;
    uint32_t range_first, range_count;
    int resample;
    sio_on_error on_error;
    uint64_t total;         /* shards in the list */
    uint64_t nshards;       /* positions of the permuted order */
    /* The state. */
    uint64_t pos;           /* sio_order_pos */
    sio_rng brng;
    uint64_t emitted, bytes, next_shard;
    uint64_t loss_seq;      /* losses told (sio_journal_loss) */
    uint32_t cur, active;
    int started, input_done, done;
    sio_epoch_stats st;
    uint64_t count, qlen;   /* entries of the buffer, of the queue */
    size_t size;            /* bytes of the allocation (and its
                               sources' checkpoints) */
    ckpt_slot *slots;
    ckpt_ent *ents;
    /* A mixed order: the draw's PRNG and each source's state. */
    uint32_t nmix;
    sio_rng mrng;
    ckpt_mix *mix;
};

static ckpt_ent ckpt_ent_of(const sio_sample *s)
{
    return (ckpt_ent){.group = s->index_in_shard, .bytes = s->bytes,
                      .shard = s->shard_index, .source = s->source};
}

/* The state of ep (an order's epoch, or a pass of a mixed one) at
 * position pos; done: the order ended. NULL when out of memory or when it
 * failed. */
static sio_order_ckpt *ckpt_save_ep(const sio_epoch *ep, int done,
                                    uint64_t pos)
{
    const sio_epoch_config *f = &ep->cfg;
    size_t cap = (size_t)f->buffer_samples + 1, n = ep->count + ep->qlen;
    size_t size = sizeof(sio_order_ckpt) + f->interleave * sizeof(ckpt_slot) +
                  n * sizeof(ckpt_ent) + ep->nmsrc * sizeof(ckpt_mix);
    if (ep->failed)
        return NULL;
    sio_order_ckpt *c = calloc(1, size);
    if (!c)
        return NULL;
    c->slots = (ckpt_slot *)(void *)(c + 1);
    c->ents = (ckpt_ent *)(void *)(c->slots + f->interleave);
    c->mix = (ckpt_mix *)(void *)(c->ents + n);
    c->size = size;
    c->nmix = ep->nmsrc;
    c->mrng = ep->mrng;
    for (uint32_t i = 0; i < ep->nmsrc; i++) {
        const mixsrc *m = &ep->msrc[i];
        ckpt_mix *cm = &c->mix[i];
        cm->def = m->def;
        cm->left = m->left;
        cm->pass_taken = m->pass_taken;
        cm->taken = m->taken;
        cm->pass = m->pass;
        cm->dry = m->dry;
        if (m->sub) {
            cm->sub = ckpt_save_ep(m->sub, 0,
                                   m->sub->emitted - m->sub->qlen);
            if (!cm->sub) {
                sio_order_ckpt_free(c);
                return NULL;
            }
            c->size += cm->sub->size;
        }
    }
    c->seed = f->seed;
    c->epoch = f->epoch;
    c->buffer_bytes = f->buffer_bytes;
    c->order_stream = f->order_stream;
    c->interleave = f->interleave;
    c->buffer_samples = f->buffer_samples;
    c->replica = f->replica;
    c->replicas = f->replicas;
    c->range_first = f->range_first;
    c->range_count = f->range_count;
    c->resample = f->resample;
    c->on_error = f->on_error;
    c->total = sio_shardlist_count(ep->list);
    c->nshards = ep->nshards;
    c->pos = pos;
    c->brng = ep->brng;
    c->emitted = ep->emitted;
    c->loss_seq = ep->loss_seq;
    c->bytes = ep->bytes;
    c->next_shard = ep->next_shard;
    c->cur = ep->cur;
    c->active = ep->active;
    c->started = ep->started;
    c->input_done = ep->input_done;
    c->done = done;
    c->st = ep->st;
    c->count = ep->count;
    c->qlen = ep->qlen;
    for (uint32_t s = 0; s < f->interleave; s++) {
        const reader *r = ep->slots[s];
        if (!r)
            continue;
        c->slots[s] = (ckpt_slot){.g = r->g, .bad_samples = r->bad_samples,
                                  .nbad_first = r->nbad_first,
                                  .pos = r->pos, .idx = r->idx, .present = 1,
                                  .skipped = (uint8_t)r->skipped};
        memcpy(c->slots[s].bad_first, r->bad_first, sizeof r->bad_first);
    }
    for (size_t i = 0; i < ep->count; i++)
        c->ents[i] = ckpt_ent_of(ep->buf[i]);
    for (size_t i = 0; i < ep->qlen; i++)
        c->ents[ep->count + i] =
            ckpt_ent_of(ep->outq[(ep->qhead + i) % cap]);
    return c;
}

sio_order_ckpt *sio_order_save(const sio_order *o)
{
    if (o->failed)
        return NULL;
    return ckpt_save_ep(o->ep, o->done, sio_order_pos(o));
}

uint64_t sio_order_ckpt_pos(const sio_order_ckpt *c)
{
    return c->pos;
}

size_t sio_order_ckpt_bytes(const sio_order_ckpt *c)
{
    return c->size;
}

void sio_order_ckpt_free(sio_order_ckpt *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->nmix; i++)
        sio_order_ckpt_free(c->mix[i].sub);
    free(c);
}

static uint32_t ckpt_replicas(uint32_t r)
{
    return r > 1 ? r : 1;
}

static uint64_t ckpt_stream(uint64_t s)
{
    return s ? s : SIO_RNG_SHARDS;
}

/* Is c a checkpoint of an order over ep's config and list? */
static sio_code ckpt_fits(const sio_epoch *ep, const sio_order_ckpt *c,
                          sio_error *err)
{
    const sio_epoch_config *f = &ep->cfg;
    const char *what = NULL;
    if (c->interleave != f->interleave)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "checkpoint of interleave %u, the config has %u",
                          c->interleave, f->interleave);
    if (c->buffer_samples != f->buffer_samples ||
        c->buffer_bytes != f->buffer_bytes)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "checkpoint of a shuffle buffer of %u samples and "
                          "%" PRIu64 " bytes, the config has %u and %" PRIu64,
                          c->buffer_samples, c->buffer_bytes,
                          f->buffer_samples, f->buffer_bytes);
    if (c->seed != f->seed || c->epoch != f->epoch)
        what = "seed or epoch";
    else if (c->on_error != f->on_error)
        what = "on_error";
    else if (c->replica != f->replica ||
             ckpt_replicas(c->replicas) != ckpt_replicas(f->replicas))
        what = "replica";
    else if (c->range_first != f->range_first ||
             c->range_count != f->range_count)
        what = "shard range";
    else if (ckpt_stream(c->order_stream) != ckpt_stream(f->order_stream) ||
             !c->resample != !f->resample)
        what = "shard order (order_stream, resample)";
    else if (c->total != sio_shardlist_count(ep->list) ||
             c->nshards != ep->nshards)
        what = "shard count";
    else if (c->nmix != ep->nmsrc)
        what = "mixed sources";
    for (uint32_t i = 0; !what && i < c->nmix; i++) {
        const sio_mix_source *a = &c->mix[i].def, *b = &ep->msrc[i].def;
        if (a->first != b->first || a->count != b->count ||
            a->quota != b->quota || !a->resample != !b->resample)
            what = "mixed sources";
    }
    if (what)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "checkpoint of another order: its %s differs", what);
    return SIO_OK;
}

static sio_code ckpt_bad(sio_error *err, const char *why)
{
    return sio_seterr(err, SIO_ERR_INVALID, "checkpoint not valid: %s", why);
}

/* Check c's state against ep (a fresh order over a config c fits). */
static sio_code ckpt_check(const sio_epoch *ep, const sio_order_ckpt *c,
                           sio_error *err)
{
    const sio_epoch_config *f = &ep->cfg;
    uint64_t lo = f->range_count ? f->range_first : 0;
    uint64_t hi = f->range_count ? lo + f->range_count : c->total;
    uint64_t bytes = 0;
    uint32_t present = 0;
    if (c->next_shard > ep->nshards || c->cur >= f->interleave)
        return ckpt_bad(err, "slot state out of range");
    for (uint32_t s = 0; s < f->interleave; s++) {
        const ckpt_slot *cs = &c->slots[s];
        if (!cs->present)
            continue;
        present++;
        if (cs->pos >= c->next_shard || ep->perm[cs->pos] != cs->idx)
            return ckpt_bad(err, "a slot's shard is not in the permuted "
                                 "order");
    }
    if (c->started ? present != c->active
                   : present || c->active || c->next_shard || c->cur)
        return ckpt_bad(err, "active slots do not match the slots");
    if (c->count > f->buffer_samples ||
        c->qlen > (uint64_t)f->buffer_samples + 1 || c->qlen > c->emitted ||
        c->pos != c->emitted - c->qlen)
        return ckpt_bad(err, "buffer state out of range");
    for (uint64_t i = 0; i < c->count + c->qlen; i++) {
        if (c->ents[i].shard < lo || c->ents[i].shard >= hi)
            return ckpt_bad(err, "an entry's shard is not in the list");
        if (i < c->count)
            bytes += c->ents[i].bytes;
    }
    if (bytes != c->bytes)
        return ckpt_bad(err, "buffer bytes do not match its entries");
    if ((c->input_done && c->active) ||
        (c->done && (!c->input_done || c->count || c->qlen)))
        return ckpt_bad(err, "an end that does not match the state");
    return SIO_OK;
}

static void pass_config(const sio_epoch *ep, uint32_t i, uint32_t k,
                        sio_epoch_config *c);
static sio_code meta_sub_open(sio_epoch *ep, const sio_epoch_config *c,
                              sio_epoch **out, sio_error *err);
static sio_code ckpt_restore_ep(sio_epoch *ep, const sio_order_ckpt *c,
                                sio_error *err);

/* A mixed order's sources from c (ep fresh, c fits it): each open pass
 * opened again and put in its saved state. */
static sio_code ckpt_restore_mix(sio_epoch *ep, const sio_order_ckpt *c,
                                 sio_error *err)
{
    ep->mrng = c->mrng;
    for (uint32_t i = 0; i < c->nmix; i++) {
        const ckpt_mix *cm = &c->mix[i];
        mixsrc *m = &ep->msrc[i];
        if (cm->left > cm->def.quota || cm->taken > cm->def.quota ||
            cm->pass >= SIO_MIX_PASSES_MAX)
            return ckpt_bad(err, "a mixed source's state out of range");
        m->left = cm->left;
        m->pass_taken = cm->pass_taken;
        m->taken = cm->taken;
        m->pass = cm->pass;
        m->dry = cm->dry;
        if (!cm->sub)
            continue;
        sio_epoch_config pc;
        sio_epoch *sub = NULL;
        pass_config(ep, i, cm->pass, &pc);
        sio_code rc = meta_sub_open(ep, &pc, &sub, err);
        if (rc)
            return rc;
        m->sub = sub; /* closed with ep from here on */
        sub->loss_home = ep;
        rc = ckpt_fits(sub, cm->sub, err);
        if (rc == SIO_OK)
            rc = ckpt_check(sub, cm->sub, err);
        if (rc == SIO_OK)
            rc = ckpt_restore_ep(sub, cm->sub, err);
        if (rc)
            return rc;
    }
    return SIO_OK;
}

/* Put c's state into ep, a fresh epoch (order or pass) it fits. */
static sio_code ckpt_restore_ep(sio_epoch *ep, const sio_order_ckpt *c,
                                sio_error *err)
{
    for (uint32_t s = 0; s < c->interleave; s++) {
        const ckpt_slot *cs = &c->slots[s];
        if (!cs->present)
            continue;
        reader *r = reader_new(ep, cs->pos, cs->g, 0);
        if (!r)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        r->bad_samples = cs->bad_samples;
        r->nbad_first = cs->nbad_first <= SIO_LOSS_REFS_MAX
                            ? cs->nbad_first
                            : SIO_LOSS_REFS_MAX;
        memcpy(r->bad_first, cs->bad_first, sizeof r->bad_first);
        r->skipped = cs->skipped;
        ep->slots[s] = r;
    }
    for (uint64_t i = 0; i < c->count + c->qlen; i++) {
        const ckpt_ent *ce = &c->ents[i];
        mrec *st = mrec_new(ep, ce->shard, ce->group, ce->bytes);
        if (!st)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        if (ep->nmsrc && ce->source >= ep->nmsrc)
            return ckpt_bad(err, "an entry's source is not the order's");
        st->pub.source = ce->source;
        if (i < c->count) {
            ep->buf[ep->count++] = &st->pub;
        } else {
            st->pub.global_index = c->emitted - c->qlen + (i - c->count);
            ep->outq[ep->qlen++] = &st->pub;
        }
    }
    ep->qhead = 0;
    ep->bytes = c->bytes;
    ep->brng = c->brng;
    ep->emitted = c->emitted;
    ep->loss_seq = c->loss_seq;
    /* Losses told before the checkpoint that the journal does not hold
     * (a journal opened anew): this order tells the later ones, but does
     * not vouch for what came before. */
    if (ep->cfg.journal && sio_journal_loss_count(ep->cfg.journal) <
                               c->loss_seq)
        ep->loss_astray = 1;
    ep->next_shard = (size_t)c->next_shard;
    ep->cur = c->cur;
    ep->active = c->active;
    ep->started = c->started;
    ep->input_done = c->input_done;
    ep->st = c->st;
    return ep->nmsrc ? ckpt_restore_mix(ep, c, err) : SIO_OK;
}

/* Put c's state into o, a fresh order it fits. */
static sio_code ckpt_restore(sio_order *o, const sio_order_ckpt *c,
                             sio_error *err)
{
    sio_code rc = ckpt_restore_ep(o->ep, c, err);
    if (rc == SIO_OK)
        o->done = c->done;
    return rc;
}

sio_code sio_order_open_ckpt(sio_io *io, const sio_shardlist *list,
                             const sio_epoch_config *cfg,
                             const sio_order_ckpt *c, sio_order **out,
                             sio_error *err)
{
    sio_order *o = NULL;
    sio_code rc;
    *out = NULL;
    if (!c)
        return sio_seterr(err, SIO_ERR_INVALID, "no checkpoint");
    rc = order_new(io, list, cfg, &o, err);
    if (rc)
        return rc;
    rc = ckpt_fits(o->ep, c, err);
    if (rc == SIO_OK)
        rc = ckpt_check(o->ep, c, err);
    if (rc == SIO_OK)
        rc = ckpt_restore(o, c, err);
    if (rc) {
        sio_order_close(o);
        return rc;
    }
    *out = o;
    return SIO_OK;
}

sio_code sio_epoch_order_each(sio_io *io, const sio_shardlist *list,
                              const sio_epoch_config *cfg, uint64_t from,
                              size_t max, sio_order_fn fn, void *ud,
                              size_t *n, sio_error *err)
{
    sio_order *o = NULL;
    *n = 0;
    sio_code rc = sio_order_open(io, list, cfg, from, &o, err);
    if (rc)
        return rc;
    rc = sio_order_next(o, max, fn, ud, n, err);
    sio_order_close(o);
    return rc;
}

/* Good samples of shard idx by its complete index, after the journal's
 * cut: SIO_OK, or SIO_ERR_AGAIN while the index is not complete. */
static sio_code shard_good(sio_epoch *ep, uint32_t idx, uint64_t *good)
{
    sio_index_entry *e = shard_ixv(ep, idx);
    sio_index_info info;
    uint64_t cut;
    *good = 0;
    if (!e)
        return SIO_ERR_AGAIN;
    sio_index_get_info(e, &info);
    if (!info.complete)
        return SIO_ERR_AGAIN;
    if (ep->cfg.journal && sio_journal_cut(ep->cfg.journal, idx, &cut) &&
        cut < info.known) {
        uint64_t bad;
        sio_index_tally(e, cut, good, &bad);
    } else {
        *good = info.good;
    }
    return SIO_OK;
}

/* Samples mixed source i gives: its quota, unless a pass gives nothing
 * (every pass of a permuted source holds the same shards; a resampled
 * one's passes are drawn here as the epoch draws them). */
static sio_code source_count(sio_epoch *ep, uint32_t i, uint64_t *count)
{
    const sio_mix_source *m = &ep->msrc[i].def;
    uint64_t taken = 0;
    sio_code rc = SIO_OK;
    *count = 0;
    if (m->quota == 0)
        return SIO_OK;
    if (!m->resample) {
        uint64_t n = 0, g;
        for (uint32_t k = 0; k < m->count && rc == SIO_OK; k++) {
            rc = shard_good(ep, m->first + k, &g);
            n += g;
        }
        if (rc == SIO_OK)
            *count = n ? m->quota : 0;
        return rc;
    }
    for (uint32_t pass = 0; taken < m->quota; pass++) {
        sio_rng r;
        uint64_t n = 0, g;
        if (pass >= SIO_MIX_PASSES_MAX)
            return SIO_ERR_LIMIT;
        sio_rng_seed(&r, ep->cfg.seed, ep->cfg.epoch, SIO_RNG_PASS(i, pass));
        for (uint32_t k = 0; k < m->count; k++) {
            rc = shard_good(ep, m->first +
                                    (uint32_t)sio_rng_below(&r, m->count),
                            &g);
            if (rc)
                return rc;
            n += g;
        }
        if (n == 0)
            break; /* dry */
        taken += n;
    }
    *count = taken < m->quota ? taken : m->quota;
    return SIO_OK;
}

sio_code sio_epoch_count(sio_io *io, const sio_shardlist *list,
                         const sio_epoch_config *cfg, uint64_t *count)
{
    sio_epoch *ep = NULL;
    sio_code rc;
    uint64_t total = 0, good;
    *count = UINT64_MAX;
    if (!cfg->index)
        return SIO_ERR_UNSUPPORTED;
    rc = epoch_new(io, list, cfg, &ep, NULL);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < ep->nmsrc && rc == SIO_OK; i++) {
        rc = source_count(ep, i, &good);
        total += good;
    }
    for (size_t p = 0; p < ep->nshards && rc == SIO_OK; p++) {
        rc = shard_good(ep, ep->perm[p], &good);
        total += good;
    }
    sio_epoch_close(ep);
    if (rc == SIO_OK)
        *count = total;
    return rc;
}
