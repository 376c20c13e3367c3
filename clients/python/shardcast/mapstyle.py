"""ShardcastMapDataset: map-style access to a shardcast job's samples.

Index i is sample i of the dataset's unshuffled order (the shard list in
order, each shard's good samples in tar order), fetched with
GET /v1/jobs/{job}/samples/{i}?format=frames: one request per sample, so
any sampler works (torch's DistributedSampler, RandomSampler, a subset).
The server finds the sample through its shard indexes (indexing shards
first where needed); no epoch or consumer is involved, and nothing is
shuffled by the server.

The length: the server answers 404 "sample i is past the dataset's N
samples" for an index past the end (a server before this version, before
every shard was indexed, ended a one-sample stream with an error trailer
with the same text instead: both are read). One
probe far past any real dataset therefore gives N; it is asked once per
object and cached. If the answer does not name N (another server
version), N is found by an exponential then a binary search over probes.

Connections: each object keeps one HTTP connection for its requests (a
server that keeps connections alive answers them all on one socket), in
the process that opened it: a DataLoader worker forked or spawned from it
opens its own. A request that fails closes it; the next one connects
again.

Threading: one object per thread or DataLoader worker; no state besides
the cached length and that connection.
"""

import re
import urllib.parse

from .dataset import DEFAULT_HEADER_TIMEOUT, DEFAULT_HEARTBEAT_TIMEOUT
from .decode import make_decoder
from .errors import ShardcastError, ShardcastHTTPError, ShardcastStreamError
from .frames import FramesReader
from .stream import connection_for, normalize_fields

# Probed once for the length: far past any dataset (2^40 samples), well
# inside the server's bound on indexes.
PROBE_INDEX = 1 << 40
_PAST_END = re.compile(r"past the dataset's (\d+) samples")


class ShardcastMapDataset:
    """dataset[i] -> sample dict of sample i of the job's dataset.

    url      the server's root URL; None: $SHARDCAST_SERVER
    job      the job name (its source is the dataset)
    fields, decode, map, timeout, header_timeout, heartbeat_timeout, token
             as for ShardcastDataset (decode=True, "pil", "rgb8", ...;
             map=shardcast.to_tuple("jpg", "cls"); a hung server is seen
             after heartbeat_timeout, 3 s, of silence, or header_timeout,
             10 s, before the answer)
    length   the dataset's length when the caller knows it (skips the probe)

    Samples are dicts {"__key__", "__url__", "__shard__", "__index__" (= i),
    "<ext>": ...}. An index past the end raises IndexError; other failures
    a ShardcastError subclass. Works as a torch map-style Dataset (it has
    __getitem__ and __len__), for instance under DistributedSampler.
    """

    def __init__(self, url=None, job=None, *, fields=None, decode=False, map=None,
                 timeout=60, token=None, length=None,
                 header_timeout=DEFAULT_HEADER_TIMEOUT,
                 heartbeat_timeout=DEFAULT_HEARTBEAT_TIMEOUT):
        import os
        from .dataset import server_from_env
        self.url = server_from_env(url).rstrip("/")
        if not isinstance(job, str) or not job:
            raise ValueError("job must be a non-empty string")
        if map is not None and not callable(map):
            raise TypeError("map must be callable")
        self.job = job
        self.fields = normalize_fields(fields) if fields is not None else None
        self.decode = decode
        self._decoder = make_decoder(decode)
        self.map = map
        self.timeout = timeout
        self.header_timeout = header_timeout
        self.heartbeat_timeout = heartbeat_timeout  # None: timeout applies
        self.token = token if token is not None else os.environ.get("SHARDCAST_TOKEN")
        self._length = length
        self._conn = None
        self._conn_pid = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_conn"] = None  # a worker's own
        state["_conn_pid"] = None
        return state

    def _connection(self):
        """This process's kept connection to the server."""
        import os
        if self._conn is None or self._conn_pid != os.getpid():
            # (a forked worker leaves its parent's socket alone)
            self._conn = connection_for(self.url, self.timeout)
            self._conn_pid = os.getpid()
        return self._conn

    def close(self):
        """Close the kept connection (a later request opens a new one)."""
        import os
        if self._conn is not None and self._conn_pid == os.getpid():
            self._conn.close()
        self._conn = None

    def _sample_url(self, i):
        q = [("format", "frames")]
        if self.fields:
            q.append(("fields", ",".join(self.fields)))
        return "%s/v1/jobs/%s/samples/%d?%s" % (
            self.url, urllib.parse.quote(self.job, safe=""), i, urllib.parse.urlencode(q))

    def _fetch(self, i):
        """The sample dict of index i, or the int N (or -1 when unnamed)
        when i is past the end."""
        headers = {"Authorization": "Bearer " + self.token} if self.token else None
        try:
            with FramesReader(self._sample_url(i), timeout=self.timeout,
                              headers=headers, header_timeout=self.header_timeout,
                              heartbeat_timeout=self.heartbeat_timeout,
                              connection=self._connection()) as r:
                got = list(r)
        except (ShardcastHTTPError, ShardcastStreamError) as e:
            text = "%s %s" % (getattr(e, "reason", "") or "", e.args[0] if e.args else "")
            if (isinstance(e, ShardcastHTTPError) and e.status == 404
                    and "past the dataset" in text) or \
                    (isinstance(e, ShardcastStreamError) and "past the dataset" in text):
                m = _PAST_END.search(text)
                return int(m.group(1)) if m else -1
            raise
        if len(got) != 1:
            raise ShardcastError("GET %s: %d samples, expected one"
                                 % (self._sample_url(i), len(got)))
        return got[0]

    def __len__(self):
        if self._length is None:
            self._length = self._find_length()
        return self._length

    def _find_length(self):
        r = self._fetch(PROBE_INDEX)
        if isinstance(r, int) and r >= 0:
            return r
        if not isinstance(r, int):
            raise ShardcastError("the dataset has more than %d samples" % PROBE_INDEX)
        # The answer did not name N: exponential, then binary search.
        if isinstance(self._fetch(0), int):
            return 0
        lo, hi = 0, 1          # lo exists
        while not isinstance(self._fetch(hi), int):
            lo, hi = hi, hi * 2
        while hi - lo > 1:     # lo exists, hi is past the end
            mid = (lo + hi) // 2
            if isinstance(self._fetch(mid), int):
                hi = mid
            else:
                lo = mid
        return hi

    def __getitem__(self, i):
        if not isinstance(i, int) or isinstance(i, bool):
            try:
                i = i.__index__()
            except AttributeError:
                raise TypeError("index must be an int, not %r" % (i,)) from None
        if i < 0:
            i += len(self)
            if i < 0:
                raise IndexError("index out of range")
        r = self._fetch(i)
        if isinstance(r, int):
            if r >= 0 and self._length is None:
                self._length = r
            raise IndexError("sample %d is past the dataset's end" % i)
        if self._decoder is not None:
            r = self._decoder(r)
        return self.map(r) if self.map is not None else r

    def __repr__(self):
        return "ShardcastMapDataset(url=%r, job=%r)" % (self.url, self.job)
