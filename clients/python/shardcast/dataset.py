"""ShardcastDataset: a PyTorch IterableDataset over a shardcast job.

Each DataLoader worker of each rank is one shardcast consumer: consumer
index c = rank * num_workers + worker_id out of W = world * num_workers, and
it streams its share of the epoch (the samples at global positions i with
i mod W == c) over its own HTTP connection. The server does the shuffling;
the order is a pure function of (dataset, seed, epoch), so the same epoch,
rank, world and number of workers give the same samples in the same order.

torch is optional: without it ShardcastDataset is a plain iterable that acts
as consumer rank of world (one worker).
"""

import os

from .stream import StreamReader, normalize_fields, stream_url

try:  # torch is optional
    import torch.utils.data as _tud
    _Base = _tud.IterableDataset
except ImportError:  # pragma: no cover - exercised only without torch
    _tud = None
    _Base = object


def _env_int(name):
    text = os.environ.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError("environment variable %s=%r is not an integer" % (name, text)) from None


def _distributed_rank_world():
    """(rank, world) from an initialised torch.distributed, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class ShardcastDataset(_Base):
    """Stream one epoch of a shardcast job per iteration.

    url      the server's root URL, e.g. "http://shardcast:8080"
    job      the job name
    rank, world
             this process's rank and the number of ranks; when omitted they
             come from torch.distributed (if initialised), else from the
             environment variables RANK / WORLD_SIZE, else 0 / 1
    fields   only these extensions are sent (list or "jpg,cls"); None: all
    timeout  seconds any single socket operation may take
    epoch    the epoch to stream; change it with set_epoch() before each
             epoch (with persistent_workers=True the workers keep the value
             they were started with)

    Yields dicts {"__key__", "__shard__", "__index__", "__position__",
    "<ext>": bytes, ...}; raises a ShardcastError subclass, naming the
    server's reason, on any failure, and never ends quietly on a cut stream.
    """

    def __init__(self, url, job, *, rank=None, world=None, fields=None, timeout=60,
                 epoch=0):
        super().__init__()
        if not isinstance(job, str) or not job:
            raise ValueError("job must be a non-empty string")
        if (rank is None) != (world is None):
            raise ValueError("give both rank and world, or neither")
        if world is not None:
            _check_rank_world(rank, world)
        self.url = url
        self.job = job
        self.rank = rank
        self.world = world
        self.fields = normalize_fields(fields) if fields is not None else None
        self.timeout = timeout
        self.set_epoch(epoch)

    def set_epoch(self, epoch):
        """Select the epoch the next iteration streams."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError("epoch must be a non-negative int, not %r" % (epoch,))
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

    def consumer(self):
        """(consumer index, number of consumers) of the calling process:
        rank * num_workers + worker_id of world * num_workers."""
        rank, world = self.rank_world()
        worker_id, num_workers = 0, 1
        if _tud is not None:
            info = _tud.get_worker_info()
            if info is not None:
                worker_id, num_workers = info.id, info.num_workers
        return rank * num_workers + worker_id, world * num_workers

    def stream_url(self):
        """The stream URL this process's iteration would fetch."""
        c, w = self.consumer()
        return stream_url(self.url, self.job, self.epoch, c, w, fields=self.fields)

    def __iter__(self):
        reader = StreamReader(self.stream_url(), timeout=self.timeout)
        return iter(reader)

    def __repr__(self):
        return "ShardcastDataset(url=%r, job=%r, epoch=%d)" % (self.url, self.job, self.epoch)


def _check_rank_world(rank, world):
    for name, v in (("rank", rank), ("world", world)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError("%s must be an int, not %r" % (name, v))
    if world < 1 or not 0 <= rank < world:
        raise ValueError("need 0 <= rank < world, got rank=%d world=%d" % (rank, world))
