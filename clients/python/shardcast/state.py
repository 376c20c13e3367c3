"""Resume state of a ShardcastDataset: what it is and how it is computed.

A state records, for one epoch of one job, how far each consumer's share
has been delivered:

    {"shardcast_state": 1, "job": str, "epoch": E,
     "world": W,                 # consumers of the run (ranks x workers)
     "global_start": G0,         # global cursor the run's shares start from
     "positions": {"c": p, ...}, # consumer c (decimal string) has delivered
                                 # positions 0..p-1
     "worker": {"consumer": c, "id": i, "num_workers": K}}   # worker form only

Consumer c of W with global cursor G0 receives the samples Y[G0 + c + W*p],
p = 0, 1, ... of the epoch's global sequence Y, so position p of consumer
c is exactly one sample, and a state is exactly the set of samples delivered.

Two ways to resume from a state:
  * same W: every consumer c reconnects with start=positions[c]
    (and the same global_start): exactly the samples not yet delivered, the
    same ones as the uninterrupted run would have delivered;
  * another W (elastic): the delivered set must be a prefix Y[G0 .. G) of
    the global sequence; the new run then starts every consumer at 0 with
    global_start=G. This holds exactly when the positions, in consumer
    order, are P+1 for consumers 0..j-1 and P for consumers j..W-1, and
    then G = G0 + P*W + j (see global_cursor()). Any other state cannot be
    resumed with a different W without delivering a sample twice or losing
    one, and is refused with ValueError.

With R > 1 replicas (shardcast.topology) consumer c of W streams part
J = c mod R of the epoch, Y_J (the part replica J serves), as local rank
c div R of the LW_J(W) consumers of part J, from that part's own global
cursor G_J. The state then carries the cursor of every part (keys added
to the form above; a state of one replica has neither):

     "replicas": R,
     "global_starts": {"0": G_0, ..., "R-1": G_{R-1}},
     "global_start": max(G_J)    # a client that predates global_starts
                                 # refuses a non-zero global cursor with
                                 # several replicas instead of misreading it

and an elastic resume is the rule above applied to each part on its own:
the positions of part J's consumers (c = J, J + R, J + 2R, ... in local
rank order) must be a prefix Y_J[G_J .. G'_J) of the part, and the new
run's consumers of part J start at 0 with global_start=G'_J
(replica_cursors()). A state cannot be resumed with another R: the parts
themselves change with R.

Only plain data is stored: dicts with string keys at every depth, ints and
strs. A state therefore goes through torch.save, pickle, json (unchanged:
json.loads(json.dumps(s)) == s) and checkpointers that flatten nested
dicts into string paths, as torch.distributed.checkpoint does. States
written before the keys of "positions" were strings (int keys) are still
accepted; normalize_state() gives the internal form with int keys.
"""

STATE_VERSION = 1
# The largest global cursor the server accepts (2^63 - 1).
GLOBAL_START_MAX = (1 << 63) - 1
# The most replicas a state may name (shardcastd's bound on --replicas).
MAX_REPLICAS = 65536


def _nonneg_int(name, v):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            if isinstance(v, str) and v.strip().isdigit():
                v = int(v)
            else:
                raise ValueError
        except ValueError:
            raise ValueError("shardcast state: %s must be a non-negative int, not %r"
                             % (name, v)) from None
    if v < 0:
        raise ValueError("shardcast state: %s must be non-negative, not %d" % (name, v))
    return v


def make_state(job, epoch, world, global_start, positions, worker=None,
               global_starts=None):
    """A state dict (see the module doc) from its parts; positions maps
    consumer indices (ints, or their decimal strings) to positions, and is
    stored with string keys. global_starts: the global cursor of each of
    R > 1 replicas' parts (a list); global_start is then their maximum.
    None, or a list of one: the one-replica form."""
    if global_starts is not None and len(global_starts) > 1:
        global_start = max(global_starts)
    st = {"shardcast_state": STATE_VERSION, "job": job, "epoch": epoch, "world": world,
          "global_start": global_start}
    if global_starts is not None and len(global_starts) > 1:
        st["replicas"] = len(global_starts)
        st["global_starts"] = {str(j): g for j, g in enumerate(global_starts)}
    st["positions"] = {str(int(c)): p for c, p in positions.items()}
    if worker is not None:
        st["worker"] = dict(worker)
    return st


def _int_positions(positions):
    """{consumer: position} with int keys, from string or int keys."""
    return {_nonneg_int("consumer index", c): p for c, p in positions.items()}


def normalize_state(state):
    """A checked copy of a state dict in the internal form: "positions"
    with int keys (given as decimal strings, or as ints by older
    versions), ints throughout; raises ValueError naming what is wrong.
    Not a state to save: make_state() / state_dict() give that form."""
    if not isinstance(state, dict):
        raise ValueError("shardcast state must be a dict, not %s" % type(state).__name__)
    if state.get("shardcast_state") != STATE_VERSION:
        raise ValueError("not a shardcast state of version %d: %r"
                         % (STATE_VERSION, state.get("shardcast_state")))
    job = state.get("job")
    if not isinstance(job, str) or not job:
        raise ValueError("shardcast state: job must be a non-empty string")
    epoch = _nonneg_int("epoch", state.get("epoch"))
    world = _nonneg_int("world", state.get("world"))
    if world < 1:
        raise ValueError("shardcast state: world must be >= 1")
    replicas, starts = _replica_starts(state, world)
    gs = _nonneg_int("global_start", state.get("global_start",
                                                max(starts) if starts else 0))
    if starts is not None and gs != max(starts):
        raise ValueError("shardcast state: global_start %d is not the largest of "
                         "global_starts %s" % (gs, starts))
    raw = state.get("positions")
    if not isinstance(raw, dict):
        raise ValueError("shardcast state: positions must be a dict {consumer: position}")
    positions = {}
    for c, p in raw.items():
        c = _nonneg_int("consumer index", c)
        if c in positions:  # e.g. 3 and "3", or "3" and "03"
            raise ValueError("shardcast state: consumer %d is given twice" % c)
        if c >= world:
            raise ValueError("shardcast state: consumer %d is not below world %d" % (c, world))
        positions[c] = _nonneg_int("position of consumer %d" % c, p)
    worker = state.get("worker")
    if worker is not None:
        if not isinstance(worker, dict):
            raise ValueError("shardcast state: worker must be a dict")
        worker = {k: _nonneg_int("worker." + k, worker.get(k))
                  for k in ("consumer", "id", "num_workers")}
        if worker["consumer"] not in positions:
            raise ValueError("shardcast state: the worker's consumer has no position")
    st = {"shardcast_state": STATE_VERSION, "job": job, "epoch": epoch, "world": world,
          "global_start": gs, "replicas": replicas, "global_starts": starts,
          "positions": positions}
    if worker is not None:
        st["worker"] = worker
    return st


def _replica_starts(state, world):
    """(R, [G_0 .. G_{R-1}]) of a state with several replicas' cursors,
    (None, None) for the one-replica form; checked and bounded."""
    r, raw = state.get("replicas"), state.get("global_starts")
    if r is None and raw is None:
        return None, None
    if r is None or raw is None:
        raise ValueError("shardcast state: replicas and global_starts go together")
    r = _nonneg_int("replicas", r)
    if not 1 <= r <= MAX_REPLICAS:
        raise ValueError("shardcast state: replicas must be within 1..%d, not %d"
                         % (MAX_REPLICAS, r))
    if world < r:
        raise ValueError("shardcast state: world %d is below replicas %d (a replica "
                         "without consumers)" % (world, r))
    if not isinstance(raw, dict) or len(raw) != r:
        raise ValueError("shardcast state: global_starts must be a dict with one "
                         "cursor per replica 0..%d" % (r - 1))
    starts = [None] * r
    for j, g in raw.items():
        j = _nonneg_int("replica in global_starts", j)
        if j >= r or starts[j] is not None:
            raise ValueError("shardcast state: global_starts has replica %d twice or "
                             "out of 0..%d" % (j, r - 1))
        g = _nonneg_int("global_starts[%d]" % j, g)
        if g > GLOBAL_START_MAX:
            raise ValueError("shardcast state: global_starts[%d] = %d is above 2^63 - 1"
                             % (j, g))
        starts[j] = g
    return r, starts


def worker_order(starts):
    """The consumers (indices into starts) served by DataLoader workers 0, 1,
    ... of one rank, given the positions its K consumers start from.

    Consumers that start further ahead have fewer samples left, so they go
    last: then the consumers' remaining counts never increase in worker
    order, the DataLoader's in-order round robin over the workers runs out
    on a suffix of the workers first, and the number of items it has
    yielded determines each worker's progress exactly (loader_positions()).
    Fresh epochs (all starts equal) use the identity order."""
    return sorted(range(len(starts)), key=lambda i: (starts[i], i))


def loader_positions(starts, consumed, num_workers, batch_size):
    """Positions reached by the K consumers of one rank after the training
    loop took `consumed` items from a DataLoader over them.

    starts: the K consumers' start positions, in consumer order; workers
    serve them in worker_order(starts). num_workers: the DataLoader's
    (0 counts as one: the main process iterates). batch_size: samples per
    item (None: 1). The in-order DataLoader hands out items round robin,
    worker 0, 1, ..., K-1, 0, ...; worker w's k-th item holds its samples
    k*B .. k*B + B - 1. Returns the positions in consumer order.

    Exact when the consumers' shares have equal length (the even-drop and
    even-pad partitions), whatever the starts; a position past the end of
    a share (after a short last batch) means that share is complete."""
    k = max(1, num_workers)
    b = batch_size or 1
    if len(starts) != k:
        raise ValueError("need one start per worker (%d), got %d" % (k, len(starts)))
    if consumed < 0:
        raise ValueError("consumed must be >= 0, not %d" % consumed)
    out = list(starts)
    for w, c in enumerate(worker_order(starts)):
        items = (consumed - w + k - 1) // k if consumed > w else 0
        out[c] = starts[c] + items * b
    return out


def global_cursor(world, global_start, positions):
    """The global cursor G such that the samples delivered by consumers
    0..world-1 at these positions are exactly Y[global_start .. G).

    positions: a dict {consumer: position} (keys ints or decimal strings,
    as in a state) or a list, for every consumer. Raises ValueError when a
    consumer is missing, or when the delivered set is not a prefix of the
    global sequence (see the module doc)."""
    if isinstance(positions, dict):
        positions = _int_positions(positions)
        missing = [c for c in range(world) if c not in positions]
        if missing:
            raise ValueError(
                "a resume with a different number of consumers needs the positions of "
                "all %d consumers; missing %s (merge the states of every rank and worker "
                "with shardcast.merge_state_dicts)" % (world, missing[:8]))
        positions = [positions[c] for c in range(world)]
    if len(positions) != world:
        raise ValueError("need %d positions, got %d" % (world, len(positions)))
    low = min(positions)
    ahead = sum(1 for p in positions if p == low + 1)
    if any(p not in (low, low + 1) for p in positions) or \
            any(p != low + 1 for p in positions[:ahead]):
        raise ValueError(
            "cannot resume with a different number of consumers from positions %s: the "
            "samples delivered are not a prefix of the epoch (that needs positions P+1 for "
            "consumers 0..j-1 and P for the rest). Resume with the same number of ranks "
            "and workers, or checkpoint when the number of items consumed is a multiple "
            "of num_workers (batch_size=None: any count works with one rank)"
            % (positions[:16],))
    return global_start + low * world + ahead


def _local_world(j, world, replicas):
    return (world - j + replicas - 1) // replicas if j < world else 0


def replica_cursors(world, replicas, global_starts, positions):
    """[G'_0 .. G'_{R-1}]: for each replica J, the global cursor of part J
    such that what J's consumers (c = J + R*l, local rank l of
    LW_J(world)) delivered at these positions is exactly Y_J[G_J .. G'_J),
    G_J = global_starts[J]. positions: a dict {consumer: position} for
    every consumer, or a list. Raises ValueError when a consumer is
    missing, a replica has no consumer, or a part's delivered set is not a
    prefix of it (see global_cursor)."""
    if isinstance(positions, dict):
        positions = _int_positions(positions)
    else:
        positions = dict(enumerate(positions))
    missing = [c for c in range(world) if c not in positions]
    if missing:
        raise ValueError(
            "a resume with a different number of consumers needs the positions of all %d "
            "consumers; missing %s (merge the states of every rank and worker with "
            "shardcast.merge_state_dicts)" % (world, missing[:8]))
    if len(global_starts) != replicas or world < replicas:
        raise ValueError("need one global start per replica (%d) and world %d >= replicas"
                         % (replicas, world))
    out = []
    for j in range(replicas):
        lw = _local_world(j, world, replicas)
        local = [positions[j + replicas * l] for l in range(lw)]
        try:
            out.append(global_cursor(lw, global_starts[j], local))
        except ValueError as e:
            raise ValueError("replica %d's part (consumers %s): %s"
                             % (j, list(range(j, world, replicas))[:8], e)) from None
    return out


def merge_state_dicts(states):
    """One state with the positions of every consumer, from the states of
    the workers (StatefulDataLoader's per-worker dataset states) or ranks of
    one run. All must be of the same job, epoch, world and global_start;
    the result is in main-process form (no "worker" entry)."""
    states = [normalize_state(s) for s in states]
    if not states:
        raise ValueError("no states to merge")
    first = states[0]
    positions = {}
    for s in states:
        for k in ("job", "epoch", "world", "global_start", "replicas", "global_starts"):
            if s[k] != first[k]:
                raise ValueError("cannot merge states with different %s (%r, %r)"
                                 % (k, first[k], s[k]))
        for c, p in s["positions"].items():
            if positions.get(c, p) != p:
                raise ValueError("states disagree on consumer %d (%d, %d)"
                                 % (c, positions[c], p))
            positions[c] = p
    return make_state(first["job"], first["epoch"], first["world"], first["global_start"],
                      positions, global_starts=first["global_starts"])
