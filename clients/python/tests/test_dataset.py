"""ShardcastDataset against EpochServer (shardcast_fake.py), which deals a
synthetic epoch as shardcastd does: DataLoader workers, both formats,
reconnect with resume, state_dict / load_state_dict (per worker, counted in
the main process, elastic), decoders, map=, errors, and use without torch."""

import io
import json
import os
import socket
import subprocess
import sys
from collections import Counter

import pytest
import torch.utils.data

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import shardcast  # noqa: E402
from shardcast import (ShardcastConnectionError, ShardcastDataset,  # noqa: E402
                       ShardcastDecodeError, ShardcastHTTPError, ShardcastIncompleteError)
from shardcast_fake import EpochServer, make_samples  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

N = 103          # 103 mod 2, 3, 4, 6 != 0: even-drop always drops a tail
FORMATS = ["frames", "tar"]


@pytest.fixture(scope="module")
def server():
    srv = EpochServer({"j": make_samples(N), "small": make_samples(12, seed=3)})
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _fresh(server):
    server.cuts = []
    server.requests = []


def keys(samples):
    return [s["__key__"] for s in samples]


def epoch_keys(server, epoch, w, gs=0):
    """Keys the W consumers get together, in global order."""
    seq = server.epoch_sequence("j", epoch)
    n = gs + (N - gs) // w * w
    return [k for k, _, _ in seq[gs:n]]


def drain(it, n=None):
    out = []
    for s in it:
        out.append(s)
        if n is not None and len(out) == n:
            break
    return out


def unbatch(batches):
    """Samples of default-collated dict batches, by key."""
    out = []
    for b in batches:
        out.extend(b["__key__"])
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_dataloader_workers_cover_the_epoch(server, fmt):
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt, epoch=3)
    loader = torch.utils.data.DataLoader(ds, num_workers=3, batch_size=None)
    got = list(loader)
    assert sorted(keys(got)) == sorted(epoch_keys(server, 3, 3))
    # In-order round robin: item i comes from worker i mod 3 = consumer i mod 3.
    assert [s["__index__"] for s in got] == list(range(len(got)))
    want = {k: dict(f) for k, _, f in make_samples(N)}
    for s in got:
        assert {k: v for k, v in s.items() if not k.startswith("__")} == want[s["__key__"]]
    assert {r["format"] for r in server.requests} == {fmt}


@pytest.mark.parametrize("fmt", FORMATS)
def test_reconnect_resumes_without_loss_or_duplicates(server, fmt):
    server.cuts = [{"after": 5, "count": 1}, {"after": 0, "count": 1},
                   {"after": 7, "count": 1}]
    ds = ShardcastDataset(server.url, "j", rank=1, world=2, format=fmt, backoff=0.01)
    got = list(ds)
    want = [s[2][0] for s in server.share("j", 0, 1, 2)]
    assert keys(got) == want
    assert [r.get("start") for r in server.requests] == [None, "5", "5", "12"]
    assert ds.reconnects == 3


def test_retries_are_bounded(server):
    server.cuts = [{"after": 2, "count": 1}, {"after": 0, "count": 3}]
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, retries=3, backoff=0.01)
    got = []
    with pytest.raises(ShardcastIncompleteError, match="gave up after 4 attempts"):
        for s in ds:
            got.append(s)
    assert len(got) == 2 and len(server.requests) == 4
    # Progress resets the count: 4 cuts each after one new sample succeed.
    server.cuts = [{"after": 1, "count": 4}]
    assert len(list(ShardcastDataset(server.url, "j", rank=0, world=1, retries=1,
                                     backoff=0.01))) == N


def test_unknown_job_is_not_retried(server):
    # The replica verification asks GET /v1/topology?job=nope first: its 404
    # is final, and no stream is asked for.
    server.topology_requests = []
    with pytest.raises(ShardcastHTTPError, match="unknown job 'nope'") as ei:
        list(ShardcastDataset(server.url, "nope", rank=0, world=1, backoff=0.01))
    assert ei.value.status == 404 and len(server.requests) == 0
    assert server.topology_requests == [{"job": "nope"}]
    # Without verification the stream's own 404 is final too.
    with pytest.raises(ShardcastHTTPError, match="unknown job 'nope'") as ei:
        list(ShardcastDataset(server.url, "nope", rank=0, world=1, backoff=0.01,
                              verify=False))
    assert ei.value.status == 404 and len(server.requests) == 1


def test_server_down():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ShardcastConnectionError, match=r"127.0.0.1:%d.*after 3 attempts" % port):
        list(ShardcastDataset("http://127.0.0.1:%d" % port, "j", rank=0, world=1,
                              retries=2, backoff=0.01, timeout=5))


# --- resume ---------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_plain_iteration_resume(server, fmt):
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt, epoch=1)
    first = drain(ds, 40)
    state = ds.state_dict()
    assert state["positions"] == {"0": 40} and state["epoch"] == 1
    assert json.loads(json.dumps(state)) == state   # JSON keeps it as it is
    ds2 = ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt)
    ds2.load_state_dict(state)
    assert ds2.epoch == 1
    rest = list(ds2)
    assert keys(first) + keys(rest) == epoch_keys(server, 1, 1)
    ds2.set_epoch(2)  # another epoch drops the resume state
    assert ds2.stream_url().endswith("epochs/2/stream?rank=0&world=1&format=%s" % fmt)


class _StatefulWorkers(torch.utils.data.IterableDataset):
    """What torchdata's StatefulDataLoader does with a dataset that has
    state_dict/load_state_dict: in each worker, load the state that worker
    saved before iterating, and take dataset.state_dict() after each item."""

    def __init__(self, ds, states=None):
        self.ds, self.states = ds, states

    def __iter__(self):
        wid = torch.utils.data.get_worker_info().id
        if self.states is not None:
            self.ds.load_state_dict(self.states[wid])
        for s in self.ds:
            yield {"key": s["__key__"], "worker": wid, "state": self.ds.state_dict()}


def test_stateful_dataloader_pattern(server):
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, epoch=4)
    loader = torch.utils.data.DataLoader(_StatefulWorkers(ds), num_workers=3,
                                         batch_size=None)
    first, latest = [], {}
    for item in loader:
        first.append(item["key"])
        latest[item["worker"]] = item["state"]
        if len(first) == 20:
            break
    assert sorted(latest) == [0, 1, 2]
    assert {st["worker"]["consumer"] for st in latest.values()} == {0, 1, 2}
    loader2 = torch.utils.data.DataLoader(_StatefulWorkers(
        ShardcastDataset(server.url, "j", rank=0, world=1), latest), num_workers=3,
        batch_size=None)
    rest = [item["key"] for item in loader2]
    assert Counter(first + rest) == Counter(epoch_keys(server, 4, 3))
    # The workers' states merged give the global cursor for an elastic resume.
    merged = shardcast.merge_state_dicts(latest.values())
    assert shardcast.global_cursor(3, 0, merged["positions"]) == 20
    # A worker's own state is refused in the main process.
    with pytest.raises(ValueError, match="DataLoader worker"):
        d = ShardcastDataset(server.url, "j", rank=0, world=1)
        d.load_state_dict(latest[1])
        list(d)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workers, batch, consumed", [
    (3, None, 31),     # mid-round, one sample per item
    (3, 4, 7),         # mid-round, batched
    (2, 5, 20),        # the final round of short batches (share 51 = 10 x 5 + 1)
    (2, 5, 21),
    (0, 4, 9),         # the main process iterates
])
def test_main_process_state_from_count(server, fmt, workers, batch, consumed):
    def loader_for(ds):
        return torch.utils.data.DataLoader(ds, num_workers=workers, batch_size=batch)

    ds = ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt, epoch=5)
    loader = loader_for(ds)
    first = []
    for i, b in enumerate(loader):
        first.extend(b["__key__"] if batch else [b["__key__"]])
        if i + 1 == consumed:
            break
    state = ds.state_dict(consumed=consumed, loader=loader)
    ds2 = ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt)
    ds2.load_state_dict(state)
    loader2 = loader_for(ds2)
    rest, n2 = [], 0
    for b in loader2:
        rest.extend(b["__key__"] if batch else [b["__key__"]])
        n2 += 1
        if n2 == 3:  # checkpoint again inside the resumed run
            break
    # (When the resumed run ended first, the state says every share is done.)
    state2 = ds2.state_dict(consumed=n2, loader=loader2)
    ds3 = ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt)
    ds3.load_state_dict(state2)
    rest += unbatch(loader_for(ds3)) if batch else keys(loader_for(ds3))
    assert Counter(first + rest) == Counter(epoch_keys(server, 5, max(1, workers)))


def test_two_ranks_count_and_elastic_resume(server):
    """2 ranks x 2 workers stop after 6 batches of 3 (a multiple of the
    workers: every consumer at position 9); resume with 3 ranks x 1 worker
    through global_start = 9 * 4 = 36."""
    first, states = [], []
    for rank in (0, 1):
        ds = ShardcastDataset(server.url, "j", rank=rank, world=2, epoch=6)
        loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=3)
        for i, b in enumerate(loader):
            first.extend(b["__key__"])
            if i + 1 == 6:
                break
        states.append(ds.state_dict(consumed=6, loader=loader))
    assert states[0] == states[1]
    assert states[0]["positions"] == {"0": 9, "1": 9, "2": 9, "3": 9}
    rest = []
    for rank in range(3):
        ds = ShardcastDataset(server.url, "j", rank=rank, world=3)
        ds.load_state_dict(states[0])
        rest += keys(ds)
    assert all(r.get("global_start") == "36" for r in server.requests[-3:])
    seq = [k for k, _, _ in server.epoch_sequence("j", 6)]
    assert Counter(first + rest) == Counter(seq[:36] + seq[36:36 + (N - 36) // 3 * 3])
    # Lockstep but uneven (consumed 5 of 2 workers: positions 3,3,2,2 per
    # rank pattern across ranks): not a prefix, so elastic resume is refused.
    ds = ShardcastDataset(server.url, "j", rank=0, world=2, epoch=6)
    st = ds.state_dict(consumed=5, num_workers=2, batch_size=None)
    assert st["positions"] == {"0": 3, "1": 2, "2": 3, "3": 2}
    ds3 = ShardcastDataset(server.url, "j", rank=0, world=3)
    ds3.load_state_dict(st)
    with pytest.raises(ValueError, match="not a prefix"):
        list(ds3)


def test_state_rules():
    assert shardcast.loader_positions([0, 0, 0], 7, 3, 2) == [6, 4, 4]
    # Consumers that start ahead are served by the last workers.
    assert shardcast.loader_positions([5, 4, 4], 2, 3, None) == [5, 5, 5]
    assert shardcast.global_cursor(4, 10, [3, 3, 2, 2]) == 10 + 2 * 4 + 2
    assert shardcast.global_cursor(4, 0, {0: 2, 1: 2, 2: 2, 3: 2}) == 8
    for bad in ([2, 3, 3, 3], [4, 2, 2, 2], [3, 2, 3, 2]):
        with pytest.raises(ValueError, match="not a prefix"):
            shardcast.global_cursor(4, 0, bad)
    with pytest.raises(ValueError, match="missing"):
        shardcast.global_cursor(2, 0, {0: 1})
    ds = ShardcastDataset("http://h:1", "j", rank=0, world=1)
    with pytest.raises(ValueError, match="consumed="):
        ds.state_dict()
    with pytest.raises(ValueError, match="job 'x'"):
        ds.load_state_dict({"shardcast_state": 1, "job": "x", "epoch": 0, "world": 1,
                            "global_start": 0, "positions": {}})
    with pytest.raises(ValueError, match="not a shardcast state"):
        ds.load_state_dict({"epoch": 1})


# --- decoders, map ---------------------------------------------------------

def test_decoders_and_map(server):
    import numpy
    import PIL.Image
    img = io.BytesIO()
    PIL.Image.new("RGB", (4, 3), (255, 0, 0)).save(img, "PNG")
    arr = io.BytesIO()
    numpy.save(arr, numpy.arange(6, dtype=numpy.int16).reshape(2, 3))
    fields = [("cls", b" 7\n"), ("txt", "h\u00e9".encode()), ("json", b'{"a": [1]}'),
              ("seg.png", img.getvalue()), ("npy", arr.getvalue()), ("bin", b"\0\1")]
    srv = EpochServer({"d": [("k0", "file:///x.tar", fields)]})
    try:
        (s,) = list(ShardcastDataset(srv.url, "d", rank=0, world=1, decode=True))
        assert s["cls"] == 7 and s["txt"] == "h\u00e9" and s["json"] == {"a": [1]}
        assert isinstance(s["seg.png"], PIL.Image.Image) and s["seg.png"].size == (4, 3)
        assert s["npy"].tolist() == [[0, 1, 2], [3, 4, 5]] and s["bin"] == b"\0\1"
        (t,) = list(ShardcastDataset(srv.url, "d", rank=0, world=1,
                                     decode={"cls": int, "seg.png": None},
                                     map=lambda x: (x["__key__"], x["cls"], x["seg.png"])))
        assert t == ("k0", 7, img.getvalue())
        bad = ShardcastDataset(srv.url, "d", rank=0, world=1, decode={"txt": int})
        with pytest.raises(ShardcastDecodeError, match="field 'txt' of sample 'k0'"):
            list(bad)
    finally:
        srv.stop()


NO_TORCH = r"""
import json
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, Block())
sys.path.insert(0, sys.argv[2])
import shardcast
from shardcast import ShardcastDataset
assert "torch" not in sys.modules
ds = ShardcastDataset(sys.argv[1], "small", rank=1, world=2, decode=True)
assert type(ds).__mro__[1] is object
got = [(s["__key__"], s["cls"]) for s in ds]
st = ds.state_dict()
print(len(got), json.dumps(st["positions"], sort_keys=True), st["world"])
"""


def test_works_without_torch(server):
    r = subprocess.run([sys.executable, "-c", NO_TORCH, server.url, os.path.join(HERE, "..")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # Other ranks are taken to be in lockstep with this one.
    assert r.stdout.split() == ["6", '{"0":', "6,", '"1":', "6}", "2"]


# --- batched and tensor modes ------------------------------------------------

def batch_samples(b):
    """The samples of one batch of the batched or tensor mode, fields as
    bytes."""
    out = []
    for i, key in enumerate(b["__key__"]):
        s = {"__key__": key}
        for k, v in b.items():
            if k.startswith("__"):
                continue
            if isinstance(v, shardcast.Ragged):
                s[k] = v.tobytes(i)
            elif v[i] is not None:
                s[k] = v[i]
        out.append(s)
    return out


@pytest.mark.parametrize("tensors", [False, True])
def test_batched_modes_cover_the_epoch(server, tensors):
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, epoch=3, batch_size=8,
                          tensors=tensors)
    loader = torch.utils.data.DataLoader(ds, num_workers=3, batch_size=None)
    batches = list(loader)
    got = [s for b in batches for s in batch_samples(b)]
    assert sorted(keys(got)) == sorted(epoch_keys(server, 3, 3))
    # Share 34 = 4 x 8 + 2: every worker ends with a short batch.
    assert sorted(len(b["__key__"]) for b in batches) == [2] * 3 + [8] * 12
    want = {k: dict(f) for k, _, f in make_samples(N)}
    for s in got:
        assert {k: v for k, v in s.items() if k != "__key__"} == want[s["__key__"]]
    if tensors:
        r = next(v for k, v in batches[0].items() if not k.startswith("__"))
        assert isinstance(r, shardcast.Ragged) and r.data.dtype == torch.uint8
        assert len(r) == len(batches[0]["__key__"])


def test_tensor_mode_per_sample(server):
    ds = ShardcastDataset(server.url, "small", rank=0, world=1, tensors=True)
    want = {k: dict(f) for k, _, f in make_samples(12, seed=3)}
    got = list(torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None))
    assert len(got) == 12
    for s in got:
        fields = {k: v for k, v in s.items() if not k.startswith("__")}
        assert all(v.dtype == torch.uint8 for v in fields.values())
        assert {k: v.numpy().tobytes() for k, v in fields.items()} == want[s["__key__"]]


@pytest.mark.parametrize("tensors", [False, True])
@pytest.mark.parametrize("workers, consumed", [(3, 4), (2, 5), (0, 3)])
def test_batched_modes_resume_from_count(server, tensors, workers, consumed):
    """Main-process state after `consumed` batches of the dataset's own
    batching (DataLoader batch_size=None), resumed twice: exactly once."""
    def loader_for(ds):
        return torch.utils.data.DataLoader(ds, num_workers=workers, batch_size=None)

    def dataset():
        return ShardcastDataset(server.url, "j", rank=0, world=1, batch_size=4,
                                tensors=tensors)

    ds = dataset()
    ds.set_epoch(5)
    loader = loader_for(ds)
    first = []
    for i, b in enumerate(loader):
        first += b["__key__"]
        if i + 1 == consumed:
            break
    state = ds.state_dict(consumed=consumed, loader=loader)
    ds2 = dataset()
    ds2.load_state_dict(state)
    loader2 = loader_for(ds2)
    rest, n2 = [], 0
    for b in loader2:
        rest += b["__key__"]
        n2 += 1
        if n2 == 2:
            break
    state2 = ds2.state_dict(consumed=n2, loader=loader2)
    ds3 = dataset()
    ds3.load_state_dict(state2)
    rest += [k for b in loader_for(ds3) for k in b["__key__"]]
    assert Counter(first + rest) == Counter(epoch_keys(server, 5, max(1, workers)))


def test_batched_mode_worker_state_and_reconnect(server):
    """Plain iteration with cuts: a partial batch survives a reconnect, and
    the state after each batch covers exactly the samples handed out."""
    server.cuts = [{"after": 5, "count": 1}, {"after": 2, "count": 1}]  # at 5 and 7
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, epoch=2, batch_size=4,
                          backoff=0.01)
    first = []
    for b in ds:
        first += b["__key__"]
        if len(first) == 12:
            break
    state = ds.state_dict()
    assert state["positions"] == {"0": 12} and ds.reconnects == 2
    ds2 = ShardcastDataset(server.url, "j", rank=0, world=1, batch_size=4)
    ds2.load_state_dict(state)
    rest = [k for b in ds2 for k in b["__key__"]]
    assert first + rest == epoch_keys(server, 2, 1)
