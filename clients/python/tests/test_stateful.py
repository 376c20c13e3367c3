"""The dataset's resume state under the protocols of the checkpointing
libraries, against EpochServer:

* torchdata's StatefulDataLoader (not installable here: no torchdata in
  Debian 12). MiniStatefulDataLoader below does to the dataset what it does,
  in real DataLoader worker processes: a dataset that has state_dict and
  load_state_dict is Stateful; in each worker the saved dataset state is
  loaded BEFORE iter(dataset) is called, the state is taken right after
  iter() (the worker's initial state) and after every batch the worker
  fetches (batch_size next() calls), it travels to the main process with
  that batch, and the main process keeps, per worker, the state of the
  last batch it handed out, not of the batches prefetched behind it. Its
  state_dict() is those per-worker states; a new loader hands each worker
  its own. With num_workers=0 the main process does the same with one
  dataset.
* checkpoint formats: the state has string keys at every depth and only
  ints and strs as values, so JSON keeps it unchanged and checkpointers
  that flatten nested dicts into string paths (torch.distributed.checkpoint)
  can store it. torch.distributed.checkpoint itself is not tested: Debian's
  torch 1.13 has no torch.distributed.checkpoint, and its prototype
  (torch.distributed._shard.checkpoint) does not import on Python 3.11.
  States with int keys in "positions", as older versions wrote, still load.
"""

import json
import os
import sys
import typing
from collections import Counter

import pytest
import torch.utils.data

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import shardcast  # noqa: E402
from shardcast import ShardcastDataset  # noqa: E402
from shardcast_fake import EpochServer, make_samples  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

N = 103
JOB = "j"


@pytest.fixture(scope="module")
def server():
    srv = EpochServer({JOB: make_samples(N)})
    yield srv
    srv.stop()


def epoch_shares(server, epoch, w):
    """Each consumer's keys in delivery order (the uninterrupted run)."""
    return {c: [s[2][0] for s in server.share(JOB, epoch, c, w)] for c in range(w)}


# -- the StatefulDataLoader protocol -----------------------------------------

@typing.runtime_checkable
class Stateful(typing.Protocol):
    """torchdata.stateful_dataloader.Stateful: what the loader checks with
    isinstance() before calling state_dict / load_state_dict."""

    def state_dict(self) -> typing.Dict[str, typing.Any]:
        ...

    def load_state_dict(self, state_dict: typing.Dict[str, typing.Any]) -> None:
        ...


def _try_serialize(obj):
    return obj.state_dict() if isinstance(obj, Stateful) else None


def _try_deserialize(obj, state):
    if isinstance(obj, Stateful):
        obj.load_state_dict(state)
    return obj


def _worker_state(worker_id, dataset, dataset_iter, ended):
    # For an iterable dataset the iterator's state is recorded, and the
    # dataset's own state when the iterator is another object.
    return {"worker_id": worker_id,
            "fetcher_state": {"dataset_iter_state": _try_serialize(dataset_iter),
                              "fetcher_ended": ended},
            "dataset_state": (_try_serialize(dataset) if dataset_iter is not dataset
                              else None)}


def _fetch(it, batch_size):
    """The iterable fetcher with auto-collation: up to batch_size next()
    calls; (batch, ended)."""
    batch = []
    for _ in range(batch_size):
        try:
            batch.append(next(it))
        except StopIteration:
            return batch, True
    return batch, False


class _WorkerLoop(torch.utils.data.IterableDataset):
    """Runs in each DataLoader worker what StatefulDataLoader's worker loop
    runs there; yields ("init", worker, state) once, then ("batch",
    worker, samples, state) per fetched batch, then ("end", worker,
    state) when the worker's dataset is exhausted."""

    def __init__(self, dataset, batch_size, worker_states):
        self.dataset, self.batch_size, self.worker_states = dataset, batch_size, worker_states

    def __iter__(self):
        wid = torch.utils.data.get_worker_info().id
        ds = self.dataset
        saved = (self.worker_states or {}).get(wid)
        if saved is None:
            it = iter(ds)
            yield ("init", wid, _worker_state(wid, ds, it, False))
        else:
            # The order the loader restores in: the dataset's state, then
            # iter(), then the iterator's state.
            if saved["dataset_state"] is not None:
                ds = _try_deserialize(ds, saved["dataset_state"])
            it = iter(ds)
            if saved["fetcher_state"]["dataset_iter_state"] is not None:
                it = _try_deserialize(it, saved["fetcher_state"]["dataset_iter_state"])
            yield ("init", wid, saved)
        while True:
            batch, ended = _fetch(it, self.batch_size)
            state = _worker_state(wid, ds, it, ended)
            if batch:
                yield ("batch", wid, batch, state)
            if ended:
                yield ("end", wid, state)
                return


def _identity(x):
    return x


class MiniStatefulDataLoader:
    """The parts of torchdata's StatefulDataLoader that touch the dataset
    (see the module doc); in-order, prefetching workers."""

    def __init__(self, dataset, num_workers, batch_size):
        self.dataset, self.num_workers, self.batch_size = dataset, num_workers, batch_size
        self._load = None          # state handed to the next iteration
        self._snapshots = {}       # worker id -> state of its last batch handed out
        self._main_state = None    # num_workers=0: the dataset's state
        self._yielded = 0

    def __iter__(self):
        self._yielded = 0
        if self.num_workers == 0:
            yield from self._single_process()
            return
        saved = None
        if self._load is not None:
            saved = {int(k.split("_")[1]): v
                     for k, v in self._load["_snapshot"]["_worker_snapshots"].items()}
        self._load = None
        self._snapshots = {}
        inner = torch.utils.data.DataLoader(
            _WorkerLoop(self.dataset, self.batch_size, saved), num_workers=self.num_workers,
            batch_size=None, collate_fn=_identity, prefetch_factor=2)
        for msg in inner:
            kind, wid = msg[0], msg[1]
            if kind == "batch":
                self._snapshots[wid] = msg[3]
                self._yielded += 1
                yield msg[2]
            else:
                self._snapshots[wid] = msg[2]

    def _single_process(self):
        ds = self.dataset
        if self._load is not None and self._load["_dataset_state"] is not None:
            ds = _try_deserialize(ds, self._load["_dataset_state"])
        self._load = None
        it = iter(ds)
        self._main_state = _try_serialize(ds)
        while True:
            batch, ended = _fetch(it, self.batch_size)
            self._main_state = _try_serialize(ds)
            if batch:
                self._yielded += 1
                yield batch
            if ended:
                return

    def state_dict(self):
        if self.num_workers == 0:
            return {"_num_yielded": self._yielded, "_dataset_state": self._main_state}
        return {"_snapshot": {"_main_snapshot": {"_num_yielded": self._yielded},
                              "_worker_snapshots": {"worker_%d" % w: s for w, s in
                                                    sorted(self._snapshots.items())}}}

    def load_state_dict(self, state):
        self._load = state


def _take(loader, n):
    out = []
    if n == 0:
        return out
    for batch in loader:
        out.append(batch)
        if len(out) == n:
            break
    return out


def _checkpoint(state):
    """What a training checkpoint does to the loader's state: JSON."""
    return json.loads(json.dumps({"step": 1, "dataloader": state}))["dataloader"]


def _check_exactly_once(server, epoch, w, batches):
    """Every consumer's samples, in delivery order, are its share's prefix
    in order (nothing twice, nothing skipped), and all together are the
    whole epoch (even-drop: the tail N mod W is not served)."""
    by_consumer = {}
    for b in batches:
        for s in b:
            by_consumer.setdefault(s["__index__"] % w, []).append(s["__key__"])
    shares = epoch_shares(server, epoch, w)
    for c, got in by_consumer.items():
        assert got == shares[c][:len(got)], c
    everything = [k for b in batches for k in (s["__key__"] for s in b)]
    assert Counter(everything) == Counter(k for share in shares.values() for k in share)


def test_the_dataset_is_stateful(server):
    ds = ShardcastDataset(server.url, JOB, rank=0, world=1)
    assert isinstance(ds, Stateful)


@pytest.mark.parametrize("workers, batch, stop", [
    (3, 4, 7),     # mid-round: workers 0 and 1 have one batch more than worker 2
    (3, 4, 1),     # workers 1 and 2 at their initial states (taken after iter())
    (3, 4, 25),    # worker 0 has finished its share (34 = 8 x 4 + 2), the others not
    (3, 4, 27),    # every worker has finished
    (2, 5, 11),
    (4, 1, 13),
])
def test_stateful_dataloader_resume_mid_epoch(server, workers, batch, stop):
    epoch = 5
    loader = MiniStatefulDataLoader(ShardcastDataset(server.url, JOB, rank=0, world=1,
                                                     epoch=epoch), workers, batch)
    first = _take(loader, stop)
    state = _checkpoint(loader.state_dict())
    snaps = state["_snapshot"]["_worker_snapshots"]
    assert sorted(snaps) == ["worker_%d" % w for w in range(workers)]
    for w, snap in enumerate(snaps[k] for k in sorted(snaps)):
        ds_state = snap["dataset_state"]
        assert ds_state["worker"] == {"consumer": w, "id": w, "num_workers": workers}
        assert list(ds_state["positions"]) == [str(w)]
    # a new process: a new dataset and loader, the state loaded
    loader2 = MiniStatefulDataLoader(ShardcastDataset(server.url, JOB, rank=0, world=1),
                                     workers, batch)
    loader2.load_state_dict(state)
    rest = list(loader2)
    _check_exactly_once(server, epoch, workers, first + rest)
    # ... and the resumed loader's own state at its end is the end of every share
    final = loader2.state_dict()["_snapshot"]["_worker_snapshots"]
    share = N // workers
    for w in range(workers):
        assert final["worker_%d" % w]["dataset_state"]["positions"] == {str(w): share}


def test_stateful_dataloader_resume_twice(server):
    """Checkpoint, resume, checkpoint again part-way, resume again."""
    epoch = 6

    def new_loader(state=None):
        ld = MiniStatefulDataLoader(ShardcastDataset(server.url, JOB, rank=0, world=1,
                                                     epoch=epoch), 3, 3)
        if state is not None:
            ld.load_state_dict(state)
        return ld

    loader = new_loader()
    got = _take(loader, 5)
    loader = new_loader(_checkpoint(loader.state_dict()))
    got += _take(loader, 8)
    loader = new_loader(_checkpoint(loader.state_dict()))
    got += list(loader)
    _check_exactly_once(server, epoch, 3, got)


def test_stateful_dataloader_in_the_main_process(server):
    """num_workers=0: the loader keeps the dataset's own state (one
    consumer, this process) and loads it before iter()."""
    epoch = 7
    loader = MiniStatefulDataLoader(ShardcastDataset(server.url, JOB, rank=0, world=1,
                                                     epoch=epoch), 0, 4)
    first = _take(loader, 6)
    state = _checkpoint(loader.state_dict())
    assert state["_dataset_state"]["positions"] == {"0": 24}
    assert "worker" not in state["_dataset_state"]
    loader2 = MiniStatefulDataLoader(ShardcastDataset(server.url, JOB, rank=0, world=1), 0, 4)
    loader2.load_state_dict(state)
    rest = list(loader2)
    _check_exactly_once(server, epoch, 1, first + rest)
    assert len(first + rest) == -(-N // 4)


def test_worker_states_merge_for_an_elastic_resume(server):
    """The per-worker states of a checkpoint merged (shardcast.merge_state_
    dicts) resume the same epoch with another number of workers, when the
    items taken are a whole number of rounds."""
    epoch = 8
    loader = MiniStatefulDataLoader(ShardcastDataset(server.url, JOB, rank=0, world=1,
                                                     epoch=epoch), 3, 2)
    first = _take(loader, 6)          # two rounds of three workers
    snaps = _checkpoint(loader.state_dict())["_snapshot"]["_worker_snapshots"]
    merged = shardcast.merge_state_dicts(s["dataset_state"] for s in snaps.values())
    assert merged["positions"] == {"0": 4, "1": 4, "2": 4}
    ds = ShardcastDataset(server.url, JOB, rank=0, world=1)
    ds.load_state_dict(_checkpoint(merged))
    rest = list(torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None))
    keys = [s["__key__"] for b in first for s in b] + [s["__key__"] for s in rest]
    seq = [s[0] for s in server.epoch_sequence(JOB, epoch)]
    assert Counter(keys) == Counter(seq[:12] + seq[12:12 + (N - 12) // 2 * 2])


# -- the state's shape: string keys, JSON, old int keys -----------------------

def _walk(obj, path="state"):
    """Every (path, dict key) and (path, leaf) of a nested state."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield "key", path, k
            yield from _walk(v, "%s.%s" % (path, k))
    else:
        yield "leaf", path, obj


def _states(server):
    """States of every form the dataset produces."""
    out = {}
    ds = ShardcastDataset(server.url, JOB, rank=0, world=1, epoch=2)
    it = iter(ds)
    for _ in range(5):
        next(it)
    out["plain iteration"] = ds.state_dict()
    loader = MiniStatefulDataLoader(ShardcastDataset(server.url, JOB, rank=0, world=1,
                                                     epoch=2), 2, 3)
    _take(loader, 3)
    snaps = loader.state_dict()["_snapshot"]["_worker_snapshots"]
    out["worker"] = snaps["worker_1"]["dataset_state"]
    out["merged"] = shardcast.merge_state_dicts(s["dataset_state"] for s in snaps.values())
    ds = ShardcastDataset(server.url, JOB, rank=1, world=2, epoch=2)
    out["main process, counted"] = ds.state_dict(consumed=5, num_workers=3, batch_size=2)
    return out


def test_states_have_string_keys_and_plain_values(server):
    for name, st in _states(server).items():
        for kind, path, v in _walk(st):
            if kind == "key":
                assert isinstance(v, str), (name, path, v)
            else:
                assert type(v) in (int, str), (name, path, v)
        assert json.loads(json.dumps(st)) == st, name
    st = _states(server)["main process, counted"]
    assert st["positions"] == {"0": 4, "1": 4, "2": 2, "3": 4, "4": 4, "5": 2}


def _old_form(state):
    """A state as versions before string keys wrote it."""
    old = dict(state)
    old["positions"] = {int(c): p for c, p in state["positions"].items()}
    return old


def test_old_int_key_states_still_load(server):
    epoch = 9
    ds = ShardcastDataset(server.url, JOB, rank=0, world=1, epoch=epoch)
    loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None)
    first = []
    for s in loader:
        first.append(s["__key__"])
        if len(first) == 10:
            break
    new = ds.state_dict(consumed=10, loader=loader)
    assert new["positions"] == {"0": 5, "1": 5}
    rests = []
    for st in (new, _old_form(new)):
        ds2 = ShardcastDataset(server.url, JOB, rank=0, world=1)
        ds2.load_state_dict(st)
        rests.append([s["__key__"] for s in torch.utils.data.DataLoader(
            ds2, num_workers=2, batch_size=None)])
    assert rests[0] == rests[1]
    shares = epoch_shares(server, epoch, 2)
    assert Counter(first + rests[0]) == Counter(shares[0] + shares[1])
    # the helpers take either form
    assert shardcast.global_cursor(2, 0, new["positions"]) == 10
    assert shardcast.global_cursor(2, 0, _old_form(new)["positions"]) == 10
    merged = shardcast.merge_state_dicts([new, _old_form(new)])
    assert merged["positions"] == {"0": 5, "1": 5}
    # one consumer given twice (as 0 and "0", or "0" and "00") is refused
    for positions in ({0: 5, "0": 5}, {"0": 5, "00": 5}):
        bad = dict(new, positions=positions)
        with pytest.raises(ValueError, match="given twice"):
            ShardcastDataset(server.url, JOB, rank=0, world=1).load_state_dict(bad)
