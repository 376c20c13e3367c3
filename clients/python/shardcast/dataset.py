"""ShardcastDataset: a PyTorch IterableDataset over a shardcast job.

Each DataLoader worker of each rank is one shardcast consumer: consumer
index c = rank * num_workers + (the consumer its worker serves) out of
W = world * num_workers, and it streams its share of the epoch (the samples
at global positions G0 + c + W*p) over its own HTTP connection. The server
does the shuffling; the order is a pure function of (dataset, seed, epoch),
so the same epoch, rank, world and number of workers give the same samples
in the same order.

Threading: a dataset object is configured in the main process and copied
into each DataLoader worker; each copy iterates in one thread. Progress
(for state_dict()) is recorded in the copy that iterates.

torch is optional: without it ShardcastDataset is a plain iterable that acts
as consumer rank of world (one worker).
"""

import json
import logging
import multiprocessing
import multiprocessing.context
import os
import random
import threading
import time
import urllib.error
import urllib.request
import warnings

from . import batch as _batch
from .decode import make_decoder
from .errors import (ShardcastConnectionError, ShardcastError, ShardcastHTTPError,
                     ShardcastIncompleteError, ShardcastStreamError)
from .frames import FramesReader
from .replicas import candidates, check_stream_ident, verify_replicas
from .state import (global_cursor, loader_positions, make_state, normalize_state,
                    replica_cursors, worker_order)
from .streak import Streak, first_line
from .stream import FORMATS, StreamReader, normalize_fields, stream_url
from .topology import ENV_TEMPLATE, ENV_URLS, Topology

log = logging.getLogger("shardcast")

# (server or replica set, job, epoch) whose losses this process told: a
# warning once per epoch and process, whichever share ends first.
_TOLD = set()
_TOLD_LOCK = threading.Lock()
# How many of the first lost shards and samples a warning names.
_TELL_NAMES = 5
# The key of a sample the server sent as a placeholder (its headers did
# not fit the stream's bounds): no field, at its position.
PLACEHOLDER_KEY = "__shardcast_skipped__"


def _names(names, count):
    """': a, b, c and N more' for a warning (the first _TELL_NAMES)."""
    if not names:
        return ""
    shown = names[:_TELL_NAMES]
    more = count - len(shown)
    return ": " + ", ".join(shown) + (" and %d more" % more if more > 0 else "")

try:  # torch is optional
    import torch.utils.data as _tud
    _Base = _tud.IterableDataset
except ImportError:
    _tud = None
    _Base = object

# HTTP statuses worth another attempt: the server or a proxy in front of it
# is overloaded or restarting. Every other status is final.
RETRY_STATUSES = (502, 503, 504)
# Upper bound of the backoff between two attempts, seconds: short enough
# that a restarted server is found within seconds of listening again. The
# server's own retry advice (retry_after_ms, Retry-After) may ask for more.
MAX_BACKOFF = 5.0
# The retry budget of a streak of failures (no sample in between): attempts
# and seconds. Together they ride out a rolling restart of the server of a
# minute or so (drain, exit, start, resolve the jobs): with the default
# backoff the 30 attempts span about 130 s, the time bound stops at 120 s.
DEFAULT_RETRIES = 30
DEFAULT_RETRY_TIMEOUT = 120.0
# The budget of a streak while no server has ever answered this dataset
# copy (a wrong URL or port, a server that is not there): seconds. A server
# that answered once (a stream, a status, an error) gets the long budget
# above, which rides out its restart.
DEFAULT_STARTUP_TIMEOUT = 10.0
# Seconds a GET /v1/topology of the verification may take (a small answer;
# the dataset's timeout when that is shorter).
VERIFY_TIMEOUT = 10.0
# Seconds the connect and the wait for a stream's response headers may
# take: a process that is stopped or hung still accepts connections (the
# kernel's backlog), so only this wait sees it. The first stream of an
# epoch waits for its plan (seconds at most).
DEFAULT_HEADER_TIMEOUT = 10.0
# Seconds of silence on a frames stream whose server sends heartbeats
# (HEADER heartbeat_ms, one about every second while it has nothing to
# send) after which the server counts as hung: the consumer fails over.
DEFAULT_HEARTBEAT_TIMEOUT = 3.0


def _env_int(name):
    text = os.environ.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError("environment variable %s=%r is not an integer" % (name, text)) from None


# The server's root URL when url= is not given: one name for the shardcast
# CLI, this client and the examples. SHARDCAST_URL is its deprecated alias.
ENV_SERVER = "SHARDCAST_SERVER"
ENV_SERVER_DEPRECATED = ("SHARDCAST_URL",)


def server_from_env(url=None):
    """url, else $SHARDCAST_SERVER, else a deprecated alias (a warning);
    ValueError when none is set."""
    if url:
        return url
    v = os.environ.get(ENV_SERVER)
    if v:
        return v
    for name in ENV_SERVER_DEPRECATED:
        v = os.environ.get(name)
        if v:
            warnings.warn("%s is deprecated: set %s" % (name, ENV_SERVER),
                          DeprecationWarning, stacklevel=3)
            return v
    raise ValueError("no server URL: pass url= or set %s (e.g. http://shardcast:8080), "
                     "or name a replica set with SHARDCAST_URLS or SHARDCAST_URL_TEMPLATE "
                     "+ SHARDCAST_REPLICAS" % ENV_SERVER)


def share_length(n, global_start, consumer, world, partition):
    """Samples consumer `consumer` of `world` receives of an epoch of n
    samples from global_start, under the job's partition policy (the
    server's sio_share_length)."""
    m = max(0, n - global_start)
    if partition == "even-pad":
        return m // world + (m % world != 0)
    if partition == "none":
        return m // world + (consumer < m % world)
    return m // world  # even-drop, the server's default


def job_status(url, job, token=None, timeout=30):
    """GET /v1/jobs/{job}: the job's status JSON."""
    req = urllib.request.Request("%s/v1/jobs/%s" % (url.rstrip("/"), job))
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace").strip()
        raise ShardcastHTTPError("GET %s: HTTP %d %s" % (req.full_url, e.code, body),
                                 status=e.code, reason=body or e.reason,
                                 url=req.full_url) from None
    except OSError as e:
        raise ShardcastConnectionError("GET %s: %s" % (req.full_url, e)) from None


class _SharedEpoch:
    """The epoch set in the main process, readable by DataLoader workers
    that were started earlier (persistent_workers=True): one int in shared
    memory. It crosses into a worker when the worker process is created
    (fork or spawn); any other copy (pickle, deepcopy) is detached and
    keeps the epoch it had."""

    def __init__(self, epoch):
        self._v = multiprocessing.RawValue("q", epoch)

    def get(self, default):
        return self._v.value if self._v is not None else default

    def set(self, epoch):
        if self._v is not None:
            self._v.value = epoch

    def __getstate__(self):
        if multiprocessing.context.get_spawning_popen() is None:
            return {"_v": None}
        return {"_v": self._v}


def _distributed_rank_world():
    """(rank, world) from an initialised torch.distributed, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _worker_info():
    """(worker id, number of workers) inside a DataLoader worker, else None."""
    if _tud is None:
        return None
    info = _tud.get_worker_info()
    if info is None:
        return None
    return info.id, info.num_workers


def _retryable(err):
    if isinstance(err, (ShardcastIncompleteError, ShardcastConnectionError)):
        return True
    if isinstance(err, ShardcastStreamError):
        return err.retryable
    return isinstance(err, ShardcastHTTPError) and err.status in RETRY_STATUSES


def _no_failover(err):
    """A replica that predates failover refused replica= (HTTP 400
    "unknown parameter replica"): the consumer tries its next candidate."""
    return isinstance(err, ShardcastHTTPError) and err.status == 400 and \
        "unknown parameter replica" in (err.reason or "")


def _retry_after(err):
    """The server's advice on when to come back (seconds), or None."""
    return getattr(err, "retry_after", None)


class ShardcastDataset(_Base):
    """Stream one epoch of a shardcast job per iteration.

    url      the server's root URL, e.g. "http://shardcast:8080"
    job      the job name
    rank, world
             this process's rank and the number of ranks; when omitted they
             come from torch.distributed (if initialised), else from the
             environment variables RANK / WORLD_SIZE, else 0 / 1
    fields   only these extensions are sent (list or "jpg,cls"); None: all
    format   "frames" (default: compact, fast to parse) or "tar"
    decode   False (fields stay bytes), True (the built-in decoders of
             shardcast.default_decoders(): cls/txt/json/npy/images) or a
             dict {extension: callable(bytes) or None} used as given
    map      a callable applied to each (decoded) sample; what it returns
             is what the iteration yields
    timeout  seconds any single socket operation may take: the upper bound
             of the two below, and the wait for more data on a stream
             without heartbeats (format="tar", or a server that sends
             none); a stalled stream counts as broken. Default 60
    header_timeout
             seconds the connect and the wait for a stream's response
             headers may take (and each request of the replica check);
             a stopped or hung server still accepts the connection, so
             this is where it is seen. Default 10
    heartbeat_timeout
             seconds without a byte on a frames stream whose server sends
             heartbeats (it says so in the stream's HEADER, and sends a
             KEEPALIVE frame about every second while it has nothing
             else to send, e.g. while the store is slow): the server or
             its host is hung, and the stream fails as broken (the next
             replica takes over). At least twice the server's interval.
             None: timeout applies. Default 3
    retries  how many attempts in a row (no sample in between) a failure
             worth retrying gets: a broken or refused connection, a stalled
             stream, HTTP 502/503/504, and an error trailer the server
             marks retryable (it drains for a restart). Each attempt
             reconnects with start = the position reached, so no sample is
             lost or delivered twice; the count restarts whenever a sample
             arrives. 0: fail at the first failure. Default 30
    retry_timeout
             seconds such a streak may take from its first failure; an
             attempt that could not start within it is not made. None: no
             time bound. Default 120, which with retries=30 rides out a
             rolling restart of the server of a minute or so
    startup_timeout
             the retry_timeout while no server has answered this dataset
             copy yet (connection refused, unknown host, timeouts): a
             wrong URL or port fails after this many seconds instead of
             retry_timeout. Default 10. Every streak is logged (the
             "shardcast" logger, WARNING): its first failure with the URL
             and the reason, a line every 10 s while it lasts, and the
             answer that ends it
    backoff  seconds before the first retry; doubled on each further one
             (with +-25% jitter, at most MAX_BACKOFF = 5 s); never shorter
             than the server's advice (retry_after_ms in the error trailer,
             Retry-After on a 503), plus up to 25% jitter
    epoch    the epoch to stream; change it with set_epoch() before each
             epoch (with persistent_workers=True the workers keep the value
             they were started with)
    batch_size
             batched mode: each item is a collated batch of up to this many
             samples (shardcast.batch.collate: a dict of lists; the last
             batch of a share may be shorter); use the DataLoader with
             batch_size=None. None (default): one sample per item
    tensors  tensor mode: fields that are bytes become torch.uint8 tensors
             (with batch_size: one shardcast.Ragged per field and batch, in
             shared memory inside a DataLoader worker, so the DataLoader
             hands it to the main process without pickling the bytes)
    topology the replicas (shardcast.Topology; default: SHARDCAST_URLS, or
             SHARDCAST_URL_TEMPLATE with SHARDCAST_REPLICAS, else url alone)
    verify   True (default): before its first stream each copy of the
             dataset (each DataLoader worker's) asks every replica
             GET /v1/topology?job=NAME once and checks that they are one
             service: urls[k] is replica k of len(urls), and the job's
             fingerprint (its seed, shard list, shuffle and partition
             settings, ...) is the same on all; every stream's header must
             then name that fingerprint and the part asked for. A replica
             that does not answer is skipped with a warning (logger
             "shardcast"); a 503 (job still resolving) is asked again
             within the retry budget. Anything else raises
             ShardcastConfigError naming the replicas (URL, J, R) and the
             settings that differ with each replica's value; it is never
             retried. False: no check

    Replicas and failover (R = len(topology.urls) > 1): consumer c of W
    streams part J = c mod R of the epoch from replica J (its home) as
    local rank c div R. When that stream fails in a way worth retrying,
    the next attempt goes to the next of its candidate replicas
    (shardcast.replicas.candidates: the others in an order that spreads a
    dead replica's consumers over the rest, then home again), asking for
    part J (replica=J) from the position reached: still exactly once. Each
    switch is logged as a warning (the replica that failed, the one taking
    over, the position) and counted in `failovers` (in the copy that
    iterates, like `reconnects`). How long it takes: a refused or reset
    connection (a dead process, a replica restarting) is seen at once and
    the other replica is asked after the first backoff (0.25 s by
    default, the server's retry advice applies only to itself); a replica
    that stops answering without closing its connections (a hung or
    stopped process, a lost node) is seen after `heartbeat_timeout`
    seconds of silence on a frames stream (`timeout` on a tar stream),
    and before a stream starts after `header_timeout`, as is a connect to
    an unreachable host. A replica found hung or unreachable is
    remembered for the rest of the epoch: this copy does not ask it again
    while another candidate is left. Every new iteration (epoch) starts
    at home again (unless home was found dead in that epoch). The retry budget counts the attempts of
    a streak across replicas: with R live replicas a failed one is left
    after one attempt, and `retries` bounds the attempts over all of them.

    Yields dicts {"__key__", "__shard__", "__index__", "__position__",
    "<ext>": bytes or decoded value, ...} (or what map returns); raises a
    ShardcastError subclass naming the server's reason on any failure, and
    never ends quietly on a cut stream. When the retry budget is spent the
    last failure is raised (its status / reason / retryable attributes
    kept) with "gave up after N attempts in T s" added to its message and
    the attempts in its `attempts` attribute.
    """

    def __init__(self, url=None, job=None, *, rank=None, world=None, fields=None, format="frames",
                 decode=False, map=None, timeout=60, retries=DEFAULT_RETRIES,
                 retry_timeout=DEFAULT_RETRY_TIMEOUT, backoff=0.25, epoch=0,
                 topology=None, token=None, batch_size=None, tensors=False, verify=True,
                 startup_timeout=DEFAULT_STARTUP_TIMEOUT,
                 header_timeout=DEFAULT_HEADER_TIMEOUT,
                 heartbeat_timeout=DEFAULT_HEARTBEAT_TIMEOUT):
        super().__init__()
        if url is None and topology is None and not os.environ.get(ENV_SERVER) and (
                os.environ.get(ENV_URLS) or os.environ.get(ENV_TEMPLATE)):
            # Only a replica set is named: its first replica is the server
            # asked for status.
            topology = Topology.from_env(None, os.environ)
            url = topology.urls[0]
        url = server_from_env(url)
        if not isinstance(job, str) or not job:
            raise ValueError("job must be a non-empty string")
        if (rank is None) != (world is None):
            raise ValueError("give both rank and world, or neither")
        if world is not None:
            _check_rank_world(rank, world)
        if format not in FORMATS:
            raise ValueError("format must be one of %s, not %r" % (FORMATS, format))
        if map is not None and not callable(map):
            raise TypeError("map must be callable")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError("retries must be a non-negative int")
        if backoff < 0 or timeout is None or timeout <= 0:
            raise ValueError("timeout must be > 0 and backoff >= 0")
        if retry_timeout is not None and not retry_timeout > 0:
            raise ValueError("retry_timeout must be > 0 seconds, or None")
        if header_timeout is None or not header_timeout > 0:
            raise ValueError("header_timeout must be > 0 seconds")
        if heartbeat_timeout is not None and not heartbeat_timeout > 0:
            raise ValueError("heartbeat_timeout must be > 0 seconds, or None")
        if batch_size is not None and (not isinstance(batch_size, int)
                                       or isinstance(batch_size, bool) or batch_size < 1):
            raise ValueError("batch_size must be a positive int or None")
        if tensors:
            import torch  # noqa: F401  (tensor mode needs torch; fail here, not in a worker)
        self.batch_size = batch_size
        self.tensors = bool(tensors)
        self.url = url
        # Scale-out: consumer c of W is served by replica c mod R (see
        # topology.py); one replica unless SHARDCAST_URLS or
        # SHARDCAST_URL_TEMPLATE + SHARDCAST_REPLICAS say otherwise.
        self.topology = topology if topology is not None else \
            Topology.from_env(url, os.environ)
        # Bearer token for a server started with a consumer token.
        self.token = token if token is not None else os.environ.get("SHARDCAST_TOKEN")
        self.job = job
        self.rank = rank
        self.world = world
        self.fields = normalize_fields(fields) if fields is not None else None
        self.format = format
        self.decode = decode
        self._decoder = make_decoder(decode)
        self.map = map
        self.timeout = timeout
        self.header_timeout = header_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self._dead = (None, set())  # (epoch, replicas found hung or unreachable in it)
        self.retries = retries
        self.retry_timeout = retry_timeout
        if startup_timeout is not None and not startup_timeout > 0:
            raise ValueError("startup_timeout must be > 0 seconds, or None")
        self.startup_timeout = startup_timeout
        self._seen = False       # a server answered this copy once
        self.backoff = backoff
        self.epoch = 0
        self._resume = None      # normalized state loaded by load_state_dict
        self._progress = None    # (consumer, world, global_start, position) of this copy
        self._items = None       # items yielded by this copy's current iteration
        self.reconnects = 0      # connections re-opened after a break (this copy)
        self.failovers = 0       # of those, the ones that switched replica (this copy)
        self.verify = bool(verify)
        self._identity = None    # shardcast.replicas.Identity once verified (this copy)
        self._fingerprint = None  # the fingerprint streams must name (verified or first seen)
        self._shared_epoch = None  # set_epoch's value, seen by persistent workers
        self._loader = None      # the ShardcastDataLoader iterating this dataset
        self._status_cache = None  # (samples_total, partition) once known
        self.set_epoch(epoch)
        self._shared_epoch = _SharedEpoch(self.epoch)

    # -- configuration ---------------------------------------------------

    def set_epoch(self, epoch):
        """Select the epoch the next iteration streams. A resume state loaded
        for another epoch is dropped (a new epoch starts at its beginning).
        DataLoader workers that already run (persistent_workers=True) see
        the new epoch at their next iteration."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError("epoch must be a non-negative int, not %r" % (epoch,))
        if self._shared_epoch is not None:
            self._shared_epoch.set(epoch)
        self._select_epoch(epoch)

    def _select_epoch(self, epoch):
        if epoch != self.epoch:
            self._progress = None
            self._items = None
            if self._resume is not None and self._resume["epoch"] != epoch:
                self._resume = None
        self.epoch = epoch

    def rank_world(self):
        """(rank, world) of this process, as described in the class doc."""
        if self.world is not None:
            return self.rank, self.world
        rw = _distributed_rank_world()
        if rw is None:
            rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
            if (rank is None) != (world is None):
                raise ValueError("set both RANK and WORLD_SIZE, or neither")
            rw = (rank, world) if world is not None else (0, 1)
        _check_rank_world(*rw)
        return rw

    def _plan(self, worker=None):
        """(consumer, W, start, global_start) this process streams.
        worker: (id, num_workers) of the DataLoader worker, or None."""
        rank, world = self.rank_world()
        wid, k = worker if worker is not None else (0, 1)
        big_w = world * k
        st = self._resume
        if st is None or st["epoch"] != self.epoch:
            return rank * k + wid, big_w, 0, 0
        wk = st.get("worker")
        if wk is not None:
            # A state saved by one DataLoader worker (StatefulDataLoader hands
            # each worker the state it saved): serve the same consumer.
            if worker is None or wk["id"] != wid or wk["num_workers"] != k \
                    or st["world"] != big_w:
                raise ValueError(
                    "this state was saved by DataLoader worker %d of %d (consumer %d of %d) "
                    "and can only be loaded into that worker of the same topology; merge "
                    "the workers' states with shardcast.merge_state_dicts to load them in "
                    "the main process or to resume with another number of consumers"
                    % (wk["id"], wk["num_workers"], wk["consumer"], st["world"]))
            c = wk["consumer"]
            gss = self._replica_starts(big_w)
            return c, big_w, st["positions"][c], gss[c % len(gss)]
        gss = self._replica_starts(big_w)
        if st["world"] != big_w:
            # Elastic: what each part delivered must be a prefix of it.
            c = rank * k + wid
            return c, big_w, 0, gss[c % len(gss)]
        starts = self._starts(st, rank, k)
        c = rank * k + worker_order(starts)[wid]
        return c, big_w, starts[c - rank * k], gss[c % len(gss)]

    def _replica_starts(self, big_w):
        """[G_0 .. G_{R-1}]: the global cursor each replica's part is dealt
        from in this epoch's iteration with big_w consumers (one entry with
        one replica): 0 without a resume state; the state's cursors with
        the same number of consumers; with another (elastic), per part the
        cursor after what the state's consumers of that part delivered
        (shardcast.state.replica_cursors)."""
        r = self.topology.replicas
        st = self._resume
        if st is None or st["epoch"] != self.epoch:
            return [0] * r
        starts = st["global_starts"] or [st["global_start"]] * r
        if st["world"] == big_w:
            return list(starts)
        if r == 1:
            return [global_cursor(st["world"], starts[0], st["positions"])]
        if st["global_starts"] is None:
            raise ValueError(
                "this resume state does not say how many replicas it was taken with (a "
                "state of one replica, or of a client that predates per-replica cursors): "
                "with %d replicas it can only be resumed with the same number of "
                "consumers (%d), not %d" % (r, st["world"], big_w))
        return replica_cursors(st["world"], r, starts, st["positions"])

    @staticmethod
    def _starts(st, rank, k):
        base = rank * k
        try:
            return [st["positions"][base + i] for i in range(k)]
        except KeyError as e:
            raise ValueError("the resume state has no position for consumer %s of this "
                             "rank (positions known: %s)"
                             % (e.args[0], sorted(st["positions"])[:16])) from None

    def consumer(self):
        """(consumer index, number of consumers) of the calling process:
        rank * num_workers + the consumer its worker serves, of
        world * num_workers."""
        c, w, _, _ = self._plan(_worker_info())
        return c, w

    def stream_url(self, start=None, global_start=None):
        """The stream URL this process's iteration would fetch."""
        c, w, s, g = self._plan(_worker_info())
        s = s if start is None else start
        g = g if global_start is None else global_start
        return self._url(c, w, s, g)

    def _url(self, c, w, start, gs, via=None):
        """The stream URL of consumer c of w (its part J = c mod R, from
        position start, part cursor gs), asked of replica `via` (None or J:
        its home; another: with replica=J)."""
        r = self.topology.route(c, w)
        away = via is not None and via != r.replica
        base = self.topology.urls[via] if away else r.url
        return stream_url(base, self.job, self.epoch, r.local_rank, r.local_world,
                          fields=self.fields, fmt=self.format, start=start or None,
                          global_start=gs or None, replica=r.replica if away else None)

    # -- iteration -------------------------------------------------------

    def __iter__(self):
        worker = _worker_info()
        if self._shared_epoch is not None:
            # A persistent worker: take the epoch the main process set since.
            self._select_epoch(self._shared_epoch.get(self.epoch))
        c, w, start, gs = self._plan(worker)
        self._progress = (c, w, gs, start)
        self._items = 0
        items = self._iterate(c, w, start, gs)
        if self.batch_size is not None:
            return self._deliver_batches(items, c, w, gs)
        return self._deliver(items, c, w, gs)

    # Progress is recorded when an item is handed out, before the caller
    # has it: a sample waiting in a partial batch is not delivered yet.

    def _deliver(self, items, c, w, gs):
        tensors = self.tensors
        for pos, item in items:
            self._progress = (c, w, gs, pos + 1)
            self._items += 1
            if tensors and type(item) is dict:
                item = _batch.tensor_fields(item)
            yield item

    def _deliver_batches(self, items, c, w, gs):
        b, tensors, collate = self.batch_size, self.tensors, _batch.collate
        cur, pos = [], None
        for pos, item in items:
            cur.append(item)
            if len(cur) == b:
                out = collate(cur, tensors)
                cur = []
                self._progress = (c, w, gs, pos + 1)
                self._items += 1
                yield out
        if cur:
            out = collate(cur, tensors)
            self._progress = (c, w, gs, pos + 1)
            self._items += 1
            yield out

    def _headers(self):
        return {"Authorization": "Bearer " + self.token} if self.token else None

    def _verify_replicas(self):
        """Check once per copy that the replicas are one service (see the
        class doc: verify); raises ShardcastConfigError."""
        if not self.verify or self._identity is not None:
            return
        ident = verify_replicas(self.topology, self.job,
                                timeout=min(self.timeout, VERIFY_TIMEOUT,
                                            self.header_timeout),
                                headers=self._headers(), retries=self.retries,
                                retry_timeout=self.retry_timeout, backoff=self.backoff)
        self._identity = ident
        if ident.answers:
            self._seen = True
        if ident.fingerprint is not None:
            self._fingerprint = ident.fingerprint

    def _ident_checker(self, url, part, via):
        """The readers' check_ident for a stream of part `part` asked of
        replica `via`: the header must name the verified fingerprint (the
        first one seen when no replica stated one) and that part."""
        if not self.verify:
            return None
        replicas = self.topology.replicas

        def check(ident):
            if ident is None:
                return  # a server that predates fingerprints
            check_stream_ident(ident, url=url, fingerprint=self._fingerprint, part=part,
                               replicas=replicas, served=via)
            if self._fingerprint is None:
                self._fingerprint = ident["fingerprint"]
        return check

    def _open(self, c, w, start, gs, via=None):
        url = self._url(c, w, start, gs, via)
        part = c % self.topology.replicas
        check = self._ident_checker(url, part, part if via is None else via)
        if self.format == "frames":
            return FramesReader(url, timeout=self.timeout, headers=self._headers(),
                                check_ident=check, header_timeout=self.header_timeout,
                                heartbeat_timeout=self.heartbeat_timeout)
        return StreamReader(url, timeout=self.timeout, headers=self._headers(),
                            check_ident=check, header_timeout=self.header_timeout)

    def _dead_set(self):
        """The replicas this copy found hung or unreachable in this epoch."""
        if self._dead[0] != self.epoch:
            self._dead = (self.epoch, set())
        return self._dead[1]

    def _iterate(self, c, w, start, gs):
        self._verify_replicas()
        route = self.topology.route(c, w)
        home = route.replica
        # Home first, then the other replicas (failover), round robin.
        cands = candidates(home, route.local_rank, self.topology.replicas)
        dead = self._dead_set()

        def live_from(i):
            # The first candidate from i on not found dead this epoch (all
            # dead: i itself, they may be back).
            for k in range(len(cands)):
                if cands[(i + k) % len(cands)] not in dead:
                    return (i + k) % len(cands)
            return i % len(cands)
        at = live_from(0)
        position = start
        failures = 0         # failed attempts since the last sample
        streak_start = None  # time.monotonic() of the streak's first failure
        streak = Streak("consumer %d of %d of job %s, epoch %d" % (c, w, self.job, self.epoch))
        decoder, fn = self._decoder, self.map
        placeholders = 0     # samples of this share sent as placeholders
        while True:
            via = cands[at]
            nxt = cands[live_from(at + 1)]
            reader = self._open(c, w, position, gs, via)
            try:
                for sample in reader:
                    # (position of the sample, item); _deliver records the
                    # progress when the item is handed out.
                    p = sample["__position__"]
                    position = p + 1
                    if sample.get("__key__") == PLACEHOLDER_KEY:
                        placeholders += 1
                    if failures:
                        streak.succeeded(self.topology.urls[via]
                                         if self.topology.replicas > 1 else self.url)
                    self._seen = True
                    failures = 0
                    streak_start = None
                    if decoder is not None:
                        sample = decoder(sample)
                    yield p, (fn(sample) if fn is not None else sample)
                if failures:
                    streak.succeeded(self.topology.urls[via]
                                     if self.topology.replicas > 1 else self.url)
                self._tell_skips(reader.trailer, c, w, placeholders)
                return
            except ShardcastError as e:
                if not (_retryable(e) or (via != home and _no_failover(e))):
                    raise
                if not isinstance(e, ShardcastConnectionError):
                    self._seen = True  # a server answered (a status, a trailer, a cut body)
                if self.topology.replicas > 1 and (
                        isinstance(e, ShardcastConnectionError) or getattr(e, "hung", False)):
                    dead.add(via)  # not asked again this epoch while others are left
                    nxt = cands[live_from(at + 1)]
                now = time.monotonic()
                if streak_start is None:
                    streak_start = now
                failures += 1
                # The server's advice is about itself: it does not delay
                # the move to another replica.
                delay = self._retry_delay(failures, _retry_after(e) if nxt == via else None)
                # Until a server has answered this copy, a wrong URL or
                # port must not look like a restart to ride out.
                limit, which = self.retry_timeout, "retry_timeout"
                if not self._seen and self.startup_timeout is not None and \
                        (limit is None or self.startup_timeout < limit):
                    limit, which = self.startup_timeout, "startup_timeout"
                spent = None
                if failures > self.retries:
                    spent = "attempts"
                elif limit is not None and now + delay - streak_start > limit:
                    spent = "time"
                if spent is not None:
                    if self.retries:
                        hint = ("; no shardcast server has answered this dataset yet: check "
                                "the URL and port (%s)" % ", ".join(self.topology.urls)
                                if not self._seen else "")
                        e.args = ("%s (gave up after %d attempts in %.1f s at position "
                                  "%d: retry budget of %d attempts / %s = %s s spent on %s%s)"
                                  % (e.args[0] if e.args else e, failures,
                                     now - streak_start, position, self.retries, which,
                                     limit, spent, hint),) + e.args[1:]
                    e.attempts = failures
                    raise
                e.__traceback__ = None
                why = first_line(e)
                streak.failed(self.topology.urls[via] if self.topology.replicas > 1
                              else self.url, why, delay,
                              "attempt %d of %d, %s %s s" % (failures, self.retries, which,
                                                              limit), told=nxt != via)
            finally:
                reader.close()
            self.reconnects += 1
            if nxt != via:
                self.failovers += 1
                log.warning("shardcast: replica %d (%s) failed: %s; continuing consumer %d "
                            "(replica %d's part, local rank %d of %d) at position %d from "
                            "replica %d (%s)", via, self.topology.urls[via], why, c, home,
                            route.local_rank, route.local_world, position, nxt,
                            self.topology.urls[nxt])
            at = cands.index(nxt)
            time.sleep(delay)

    def _tell_skips(self, trailer, c, w, placeholders=0):
        """Warn (the shardcast logger) once per epoch and process when the
        epoch lost samples, as the END summary says (shards skipped or cut
        short, single bad samples: counts and the first URLs and sample
        references), and when this share held placeholders."""
        sk = trailer.get("skipped") if isinstance(trailer, dict) else None
        if not isinstance(sk, dict):
            sk = {}
        shards, samples = sk.get("shards") or 0, sk.get("samples") or 0
        if not isinstance(shards, int) or shards < 0:
            shards = 0
        if not isinstance(samples, int) or samples < 0:
            samples = 0
        if shards == 0 and samples == 0 and not placeholders:
            return
        where = self.url if self.topology is None or self.topology.replicas <= 1 \
            else tuple(self.topology.urls)
        with _TOLD_LOCK:
            if (where, self.job, self.epoch) in _TOLD:
                return
            _TOLD.add((where, self.job, self.epoch))
        lost = []
        if shards:
            urls = [u for u in sk.get("shard_urls") or [] if isinstance(u, str)]
            lost.append("%d shard(s) skipped or cut short%s" % (
                shards, _names(urls, shards)))
        if samples:
            refs = ["%s sample %s" % (r.get("url"), r.get("sample"))
                    for r in sk.get("sample_refs") or []
                    if isinstance(r, dict) and isinstance(r.get("url"), str)]
            lost.append("%d bad sample(s) skipped%s" % (samples, _names(refs, samples)))
        if placeholders:
            lost.append("%d sample(s) sent as placeholders without fields (key %s: "
                        "their headers exceed the server's stream bounds)" % (
                            placeholders, PLACEHOLDER_KEY))
        log.warning("shardcast: epoch %d of job %s lost %s%s (told once per epoch; "
                    "as of the end of consumer %d of %d's share)",
                    self.epoch, self.job, "; ".join(lost),
                    " (partial: the server did not know all yet)" if sk.get("partial") else "",
                    c, w)

    def _retry_delay(self, failures, advice):
        """Seconds to wait before attempt `failures` + 1: the jittered
        doubling backoff, or the server's advice (seconds) plus up to 25%
        jitter when that is longer, so that the consumers of a restarted
        server do not all come back in the same instant."""
        delay = min(MAX_BACKOFF, self.backoff * (2 ** (failures - 1)))
        delay *= random.uniform(0.75, 1.25)
        if advice is not None and advice > delay:
            delay = advice * random.uniform(1.0, 1.25)
        return delay

    # -- resume state ------------------------------------------------------

    def state_dict(self, consumed=None, *, loader=None, num_workers=None, batch_size=None):
        """The resume state of the current epoch (see shardcast.state).

        In a DataLoader worker, or in the process that iterates the dataset
        itself (a plain loop, or num_workers=0 without arguments): the exact
        position this copy's consumer has delivered. This is what torchdata's
        StatefulDataLoader records per worker.

        In the main process of a DataLoader with workers: pass consumed, the
        number of items (batches, or samples with batch_size=None) the
        training loop has taken from the DataLoader since its iteration
        began, and the loader (or num_workers and batch_size). The positions
        of every consumer of every rank follow from the DataLoader's in-order
        round robin over its workers (shardcast.state.loader_positions); the
        other ranks are assumed to have consumed the same count, as ranks of
        a data-parallel job do in lockstep.
        """
        worker = _worker_info()
        if worker is not None:
            if self._progress is not None:
                c, w, gs, pos = self._progress
            else:  # this worker has not iterated yet: its plan, nothing consumed
                c, w, pos, gs = self._plan(worker)
            gss = self._replica_starts(w)
            return make_state(self.job, self.epoch, w, gs, {c: pos},
                              {"consumer": c, "id": worker[0], "num_workers": worker[1]},
                              global_starts=gss if len(gss) > 1 else None)
        if consumed is None and loader is None and num_workers is None \
                and self._loader is not None and self._loader() is not None:
            # Iterated through a ShardcastDataLoader: it counted the items
            # the training loop took.
            loader = self._loader()
            consumed = loader.consumed
        if loader is not None:
            num_workers, batch_size = loader.num_workers, loader.batch_size
        if self.batch_size is not None:
            # Batched mode: each item the DataLoader yields holds
            # self.batch_size samples (times the loader's own batch size).
            batch_size = self.batch_size * (batch_size or 1)
        own = None
        if consumed is None:
            if self._items is None or num_workers:
                raise ValueError(
                    "state_dict() in the main process of a DataLoader with workers: iterate "
                    "through shardcast.ShardcastDataLoader (it counts what the training "
                    "loop took), or pass consumed= (items the training loop took from the "
                    "DataLoader) and loader= (or num_workers= and batch_size=)")
            # This process iterated the dataset itself: one consumer; its
            # own position is known exactly.
            consumed, num_workers = self._items, 0
            batch_size = self.batch_size
            own = self._progress
        if not isinstance(consumed, int) or isinstance(consumed, bool) or consumed < 0:
            raise ValueError("consumed must be a non-negative int, not %r" % (consumed,))
        rank, world = self.rank_world()
        k = max(1, num_workers or 0)
        positions = {}
        gss = self._replica_starts(world * k)
        for r in range(world):
            starts = self._plan_start_for(r, k)
            for i, p in enumerate(loader_positions(starts, consumed, num_workers or 0,
                                                   batch_size)):
                positions[r * k + i] = p
        if own is not None:
            positions[own[0]] = own[3]
        return make_state(self.job, self.epoch, world * k, gss[0], positions,
                          global_starts=gss if len(gss) > 1 else None)

    def _plan_start_for(self, rank, k):
        """The start positions of rank's k consumers in consumer order for
        the current epoch and resume state (their global starts:
        _replica_starts)."""
        st = self._resume
        if st is None or st["epoch"] != self.epoch or st["world"] != self.rank_world()[1] * k:
            return [0] * k
        if st.get("worker") is not None:
            raise ValueError("a worker's state cannot be extended in the main process; "
                             "merge the workers' states with shardcast.merge_state_dicts")
        return self._starts(st, rank, k)

    def load_state_dict(self, state):
        """Resume from a state_dict(): selects its epoch, and the next
        iteration of that epoch delivers exactly the samples the state had
        not delivered yet. Raises ValueError for a state of another job or a
        malformed one; a state that cannot serve the current number of
        consumers is refused when the iteration (or consumer()) starts."""
        st = normalize_state(state)
        if st["job"] != self.job:
            raise ValueError("the state is of job %r, this dataset streams %r"
                             % (st["job"], self.job))
        r = self.topology.replicas
        if st["replicas"] is not None and st["replicas"] != r:
            raise ValueError(
                "the state was taken with %d replicas, this dataset streams from %d: each "
                "replica's part of an epoch depends on the number of replicas, so the "
                "state cannot be resumed with another one" % (st["replicas"], r))
        if st["replicas"] is None and r > 1 and st["global_start"]:
            raise ValueError(
                "the state has a global cursor (global_start=%d) of one replica's epoch; "
                "it cannot be resumed with %d replicas" % (st["global_start"], r))
        self._resume = None
        self.set_epoch(st["epoch"])
        self._resume = st
        self._progress = None
        self._items = None

    # -- length ------------------------------------------------------------

    def samples_total(self, refresh=False):
        """The number of samples of an epoch (the dataset's length), from the
        server's status once every shard is indexed (samples_total of an
        epoch the server has started); None while it is not known yet.
        With several replicas: the sum of their parts (each replica's
        status knows its own part)."""
        parts = [self._part_total(j, refresh) for j in range(self.topology.replicas)]
        if any(n is None for n, _ in parts):
            return None
        return sum(n for n, _ in parts)

    def _part_total(self, j, refresh=False):
        """(samples of replica j's part of the epoch, partition policy) from
        that replica's status, or (None, None) while it does not know it
        (one replica: the server's whole epoch)."""
        cache = self._status_cache if isinstance(self._status_cache, dict) else {}
        if j not in cache or refresh:
            several = self.topology.replicas > 1
            url = self.topology.urls[j] if several else self.url
            st = job_status(url, self.job, self.token, self.timeout)
            part = (st.get("settings") or {}).get("partition", "even-drop")
            # A replica's status lists its own part's epochs and, after a
            # failover, the parts it covers for others ("replica": J).
            eps = [e for e in st.get("epochs") or [] if isinstance(e, dict)
                   and e.get("samples_total") is not None
                   and (not several or e.get("replica", j) == j)]
            # Every epoch is a permutation of the same samples: the current
            # epoch's count, else any epoch's.
            mine = [e for e in eps if e.get("epoch") == self.epoch] or eps
            if not mine:
                return None, None
            cache[j] = (int(mine[0]["samples_total"]), part)
            self._status_cache = cache
        return cache[j]

    def __len__(self):
        """Items this process's next iteration yields (samples, or batches
        with batch_size): the shares of its consumers (the worker's own one
        inside a DataLoader worker; in the main process the rank's
        num_workers consumers, num_workers taken from the ShardcastDataLoader
        iterating it, else the num_workers attribute, else 1), minus what a
        loaded resume state already delivered. With several replicas each
        consumer's share is of its replica's part (at its local rank and
        world). TypeError while the server does not know the epoch's length
        yet (no shard indexed fully, or the epoch not started): len() then
        fails as for an iterable without a length."""
        worker = _worker_info()
        if worker is not None:
            plans = [self._plan(worker)]
        else:
            ld = self._loader() if self._loader is not None else None
            k = max(1, ld.num_workers if ld is not None else
                    (getattr(self, "num_workers", None) or 1))
            plans = [self._plan((i, k)) for i in range(k)]
        total = 0
        for c, w, start, gs in plans:
            try:
                r = self.topology.route(c, w)
            except ValueError as e:
                # e.g. fewer consumers than replicas: the main process of a
                # DataLoader whose num_workers it cannot see
                raise TypeError("the length of job %r is not known here: %s"
                                % (self.job, e)) from e
            try:
                n, part = self._part_total(r.replica)
            except ShardcastError as e:
                # list(ds) asks len() for a hint and passes only TypeError.
                raise TypeError("the length of job %r is not known: %s" % (self.job, e)) from e
            if n is None:
                raise TypeError("the length of epoch %d of job %r is not known yet: the "
                                "server knows it once every shard is indexed (status "
                                "samples_total)" % (self.epoch, self.job))
            left = max(0, share_length(n, gs, r.local_rank, r.local_world, part) - start)
            total += -(-left // self.batch_size) if self.batch_size else left
        return total

    def __getstate__(self):
        d = self.__dict__.copy()
        d["_loader"] = None  # a weak reference to the main process's loader
        return d

    def __repr__(self):
        return "ShardcastDataset(url=%r, job=%r, epoch=%d, format=%r%s%s)" % (
            self.url, self.job, self.epoch, self.format,
            ", batch_size=%d" % self.batch_size if self.batch_size else "",
            ", tensors=True" if self.tensors else "")


def _check_rank_world(rank, world):
    for name, v in (("rank", rank), ("world", world)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError("%s must be an int, not %r" % (name, v))
    if world < 1 or not 0 <= rank < world:
        raise ValueError("need 0 <= rank < world, got rank=%d world=%d" % (rank, world))
