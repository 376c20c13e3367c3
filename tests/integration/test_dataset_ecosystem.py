"""The Python client as torch, webdataset and Mosaic users expect it,
against the real shardcastd: state_dict() with no arguments through
ShardcastDataLoader (resumed in a new process, exactly once), set_epoch
reaching persistent workers, len() from the server's status, the
map-style ShardcastMapDataset under DistributedSampler, and the
webdataset-style decoders on the generated WebDataset corpus (and on the
upstream webdataset test shards: the conformance layer)."""

import io
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest
import torch.utils.data

import shardcast
from shardcast import ShardcastDataLoader, ShardcastDataset, ShardcastMapDataset

from shardcast_testlib import REPO, field_dict, read_samples, wds_samples

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
JOB = "train"


def keys(samples):
    return [s["__key__"] for s in samples]


# -- state_dict() with no arguments ------------------------------------------

RESUME_CHILD = r"""
import json, sys, torch
import shardcast
url, state_path = sys.argv[1], sys.argv[2]
ds = shardcast.ShardcastDataset(url, "train", rank=0, world=1)
def key_batch(samples):
    return [s["__key__"] for s in samples]
loader = shardcast.ShardcastDataLoader(ds, num_workers=2, batch_size=4,
                                       collate_fn=key_batch)
loader.load_state_dict(torch.load(state_path))
print(json.dumps([k for b in loader for k in b]))
"""


def key_batch(samples):
    return [s["__key__"] for s in samples]


def test_loader_state_dict_round_trip_in_a_new_process(small_server, small_wds, tmp_path):
    ds = ShardcastDataset(small_server.url, JOB, rank=0, world=1)
    loader = ShardcastDataLoader(ds, num_workers=2, batch_size=4, collate_fn=key_batch)
    first = []
    for step, batch in enumerate(loader):
        first += batch
        if step == 10:             # mid-epoch, worker 0 one batch ahead
            state = ds.state_dict()   # no arguments: the loader counted
            assert loader.state_dict() == state
            break
    del loader
    path = str(tmp_path / "state.pt")
    torch.save(state, path)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "clients", "python"))
    out = subprocess.run([sys.executable, "-c", RESUME_CHILD, small_server.url, path],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rest = json.loads(out.stdout)
    both = first + rest
    # Exactly once: the resumed run delivers the rest of the epoch and
    # nothing twice; together they are what an uninterrupted run delivers.
    assert not [k for k, n in Counter(both).items() if n > 1]
    whole = [k for b in torch.utils.data.DataLoader(
        ShardcastDataset(small_server.url, JOB, rank=0, world=1),
        num_workers=2, batch_size=4, collate_fn=key_batch) for k in b]
    assert sorted(both) == sorted(whole)
    assert len(whole) == small_wds.total - small_wds.total % 2


# -- set_epoch with persistent workers ---------------------------------------

def test_set_epoch_reaches_persistent_workers(small_server):
    ds = ShardcastDataset(small_server.url, JOB, rank=0, world=1)
    loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None,
                                         persistent_workers=True)
    orders = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        got = keys(loader)
        # The server's order of this epoch: one consumer reads it whole;
        # two workers in round robin hand out the same sequence (even-drop
        # drops the odd last sample).
        ref, _ = read_samples(small_server, JOB, epoch, 0, 1)
        assert got == keys(ref)[:len(got)] and len(got) >= len(ref) - 1, epoch
        orders.append(got)
    assert orders[0] != orders[1] != orders[2] != orders[0]


# -- len() -------------------------------------------------------------------

def _wait_for_length(ds, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ds.samples_total(refresh=True) is not None:
            return
        time.sleep(0.3)   # the server's status refreshes each second
    pytest.fail("samples_total never appeared in the job status")


@pytest.mark.parametrize("workers,batch", [(0, None), (2, None), (2, 5)])
def test_len_equals_samples_delivered(small_server, small_wds, workers, batch):
    ds = ShardcastDataset(small_server.url, JOB, rank=0, world=1, epoch=2)
    list(ShardcastDataset(small_server.url, JOB, rank=0, world=1, epoch=2))
    _wait_for_length(ds)
    assert ds.samples_total() == small_wds.total
    loader = ShardcastDataLoader(ds, num_workers=workers, batch_size=batch,
                                 collate_fn=key_batch if batch else None)
    n = len(loader)
    got = list(loader)
    assert n == len(got)
    if batch is None:
        assert len(ds) == len(got)


def test_len_of_a_rank(small_server, small_wds):
    total = 0
    for rank in range(3):
        ds = ShardcastDataset(small_server.url, JOB, rank=rank, world=3, epoch=2)
        _wait_for_length(ds)
        n = len(ds)
        assert n == len(list(ds)) == small_wds.total // 3
        total += n
    assert total == small_wds.total - small_wds.total % 3


# -- the map-style dataset ---------------------------------------------------

def test_map_dataset_under_distributed_sampler_covers_the_dataset_once(small_server,
                                                                       small_wds):
    mds = ShardcastMapDataset(small_server.url, JOB)
    n = len(mds)
    assert n == small_wds.total
    seen = []
    for rank in range(2):
        sampler = torch.utils.data.distributed.DistributedSampler(
            mds, num_replicas=2, rank=rank, shuffle=True, seed=3)
        sampler.set_epoch(1)
        loader = torch.utils.data.DataLoader(mds, sampler=sampler, num_workers=2,
                                             batch_size=None)
        for s in loader:
            m = small_wds.by_key[s["__key__"]]
            assert shardcast.sample_hash(field_dict(s)) == m["hash"]
            assert s["__url__"].endswith("/" + m["shard"])
            seen.append(s["__index__"])
    # DistributedSampler pads the odd total with one repeated index.
    pad = sampler.total_size - n
    c = Counter(seen)
    assert set(c) == set(range(n)) and sum(c.values()) == n + pad
    assert sum(v - 1 for v in c.values()) == pad
    with pytest.raises(IndexError):
        mds[n]
    assert mds[-1]["__index__"] == n - 1


def test_map_dataset_keeps_one_connection(small_server, small_wds):
    """ShardcastMapDataset asks for every sample over one kept connection;
    a request that fails (past the end: a 404) closes it and the next one
    connects again."""
    mds = ShardcastMapDataset(small_server.url, JOB)
    n = len(mds)
    first = mds[0]
    sock = mds._conn.sock
    assert sock is not None
    for i in range(1, min(n, 25)):
        s = mds[i]
        assert s["__index__"] == i
        m = small_wds.by_key[s["__key__"]]
        assert shardcast.sample_hash(field_dict(s)) == m["hash"]
        assert mds._conn.sock is sock, "sample %d: a new connection" % i
    with pytest.raises(IndexError):
        mds[n]
    assert mds[0]["__key__"] == first["__key__"]
    assert mds._conn.sock is not None and mds._conn.sock is not sock
    mds.close()


def test_map_dataset_reconnects_when_the_server_closed_its_idle_connection(
        start_server, small_wds):
    """The server closes a kept connection that stays idle past its header
    timeout (1 s here); the next sample is asked again on a new one, with
    no error."""
    import select
    srv = start_server(small_wds.path, job="train", extra=["--header-timeout", "1"])
    mds = ShardcastMapDataset(srv.url, JOB)
    assert mds[3]["__index__"] == 3
    sock = mds._conn.sock

    def closed_by_server():
        r, _, _ = select.select([sock], [], [], 0.05)
        return bool(r) and sock.recv(1, socket.MSG_PEEK) == b""
    deadline = time.monotonic() + 60
    while not closed_by_server():
        assert time.monotonic() < deadline, "the server kept the idle connection"
    s = mds[5]
    assert s["__index__"] == 5
    assert small_wds.by_key[s["__key__"]]["hash"] == shardcast.sample_hash(field_dict(s))
    assert mds._conn.sock is not sock
    mds.close()


# -- decoders on the WebDataset format corpora ----------------------------------

def check_decoders(start_server, d, images):
    """The webdataset-style decoders over every sample of the shards in d,
    and to_tuple over `images`, a shard of 90 samples {cls, png}. Returns
    the samples decoded with PIL by key and the number of images."""
    import numpy
    import PIL.Image
    expected = {}
    for f in sorted(os.listdir(d)):
        if f.endswith((".tar", ".tgz", ".tar.gz")):
            for key, fields in wds_samples(os.path.join(d, f)):
                expected[key] = fields
    srv = start_server(d, job="wds", seed=1)
    by = {}
    for mode in ("pil", "rgb8", "torchrgb"):
        ds = ShardcastDataset(srv.url, "wds", rank=0, world=1, decode=mode)
        by[mode] = {s["__key__"]: s for s in ds}
    assert set(by["pil"]) == set(expected)
    n_img = 0
    for key, raw in expected.items():
        for name, data in raw.items():
            if name.rpartition(".")[2] != "png":
                continue
            n_img += 1
            want = numpy.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))
            assert isinstance(by["pil"][key][name], PIL.Image.Image)
            assert numpy.array_equal(numpy.asarray(by["pil"][key][name].convert("RGB")),
                                     want)
            rgb8 = by["rgb8"][key][name]
            assert rgb8.dtype == numpy.uint8 and numpy.array_equal(rgb8, want)
            t = by["torchrgb"][key][name]
            assert t.dtype == torch.float32 and tuple(t.shape) == (3,) + want.shape[:2]
            assert torch.allclose(t, torch.from_numpy(want.copy()).permute(2, 0, 1).float()
                                  / 255)
        if "cls" in raw:
            assert by["pil"][key]["cls"] == int(raw["cls"].decode())
    # .gz fields: gunzipped, then decoded by the inner extension.
    assert by["pil"]["compressed/0001"]["txt.gz"] == "hello\n"
    # to_tuple, as webdataset's .to_tuple("png;jpg", "cls").
    # (The tar format leaves out samples with none of the fields; frames
    # sends them without fields.)
    srv = start_server(os.path.join(d, images), job="images", seed=1)
    ds = ShardcastDataset(srv.url, "images", rank=0, world=1, fields="png,cls",
                          format="tar", decode="rgb8",
                          map=shardcast.to_tuple("png;jpg", "cls"))
    tuples = list(ds)
    assert len(tuples) == 90
    assert all(isinstance(a, numpy.ndarray) and isinstance(b, int) for a, b in tuples)
    return by["pil"], n_img


def test_decoders_on_generated_shards(start_server, generated_wds):
    got, n_img = check_decoders(start_server, generated_wds.path, "gnu-gzip.tgz")
    assert n_img == 90 + 2  # and a/b/c.png, "with space/k 1.seg.png"
    # Multi-dot names decode by their last extension, .gz by the inner one.
    assert got["a/b/c"]["seg.json"] == {"segments": [1, 2, 3]}
    assert got["a/b/c"]["txt"] == "upper-case extension"
    assert got["with space/k 1"]["seg.png"].size == (2, 3)
    long_key = next(k for k in got if len(k) > 100 and "meta.json.gz" in got[k])
    assert got[long_key]["meta.json.gz"] == {"a": 1}
    assert got[long_key]["json"] == {"upper": True}
    assert isinstance(got["x.y/z"]["dat"], bytes)  # no decoder: bytes


@pytest.mark.conformance
def test_decoders_on_upstream_shards(start_server, upstream_wds):
    _, n_img = check_decoders(start_server, upstream_wds, "sample.tgz")
    assert n_img == 90


def test_json_and_npy_decoders():
    import numpy
    buf = io.BytesIO()
    numpy.save(buf, numpy.arange(6, dtype=numpy.int16).reshape(2, 3))
    dec = shardcast.Decoder(shardcast.default_decoders())
    s = dec({"__key__": "k", "json": b'{"a": [1, 2]}', "npy": buf.getvalue(),
             "cls": b" 7\n"})
    assert s["json"] == {"a": [1, 2]} and s["cls"] == 7
    assert s["npy"].dtype == numpy.int16 and s["npy"].tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(shardcast.ShardcastDecodeError):
        shardcast.to_tuple("jpg")({"__key__": "k", "png": b""})
