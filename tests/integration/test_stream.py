"""End-to-end tests of the stream API: the real shardcastd, real tar shards,
the Python client and PyTorch's DataLoader."""

import gzip
import hashlib
import http.client
import json
import re
import os
import subprocess
import sys
import tarfile
from collections import Counter, defaultdict

import pytest
import torch.utils.data

import shardcast
from shardcast import (ShardcastConnectionError, ShardcastDataset, ShardcastHTTPError,
                       ShardcastStreamError)

from shardcast_testlib import (MEMBER_RE, REPO, Dataset, fetch_raw, field_dict, http_request,
                               make_dataset, read_samples, walk_tar_headers, wds_samples)

JOB = "train"


def check_against_manifest(samples, ds, hash_of=shardcast.sample_hash):
    """Every sample is a manifest sample, byte for byte, from its shard.
    hash_of(sample) gives a sample's content hash."""
    for s in samples:
        m = ds.by_key.get(s["__key__"])
        assert m is not None, "unknown key %r" % s["__key__"]
        assert hash_of(s) == m["hash"], "content of %s differs" % s["__key__"]
        assert s["__shard__"].endswith("/" + m["shard"]), (s["__shard__"], m["shard"])


# --- one epoch through DataLoader workers ------------------------------------

def check_epoch_union(by_consumer, ds, W, hash_of=shardcast.sample_hash):
    """The shares of W consumers together: every sample of the manifest
    exactly once, minus the N mod W that even-drop drops, equal counts, and
    each share in order Y[c], Y[c + W], ..."""
    n = ds.total
    assert sorted(by_consumer) == list(range(W))
    counts = {c: len(v) for c, v in by_consumer.items()}
    assert set(counts.values()) == {n // W}, counts
    everything = [s for v in by_consumer.values() for s in v]
    check_against_manifest(everything, ds, hash_of)
    keys = Counter(s["__key__"] for s in everything)
    assert max(keys.values()) == 1, "duplicated samples"
    assert len(set(ds.by_key) - set(keys)) == n % W
    # Even-drop keeps the first n - n mod W positions of the epoch sequence.
    assert sorted(s["__index__"] for s in everything) == list(range(n - n % W))
    for c, share in by_consumer.items():
        assert [s["__position__"] for s in share] == list(range(len(share)))
        assert [s["__index__"] for s in share] == [c + W * p for p in range(len(share))]


def test_dataloader_epoch_two_ranks_two_workers(small_server, small_wds):
    """W = 2 ranks x 2 workers, ranks given explicitly, run in sequence."""
    W = 4
    assert small_wds.total % W != 0, "the fixture must exercise even-drop"
    by_consumer = defaultdict(list)
    for rank in (0, 1):
        ds = ShardcastDataset(small_server.url, JOB, rank=rank, world=2)
        loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None)
        for s in loader:
            c = s["__index__"] % W
            # Consumer c = rank * num_workers + worker_id.
            assert c // 2 == rank, "rank %d received a sample of consumer %d" % (rank, c)
            by_consumer[c].append(s)
    check_epoch_union(by_consumer, small_wds, W)


RANK_SCRIPT = r"""
import json, sys
import torch.distributed as dist
import torch.utils.data
from shardcast import ShardcastDataset, sample_hash
rank, world, port, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + port,
                        rank=rank, world_size=world)
ds = ShardcastDataset(url, "train")       # rank and world from torch.distributed
out = []
for s in torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None):
    out.append({"__key__": s["__key__"], "__index__": s["__index__"],
                "__position__": s["__position__"], "__shard__": s["__shard__"],
                "hash": sample_hash(s)})
dist.barrier()
dist.destroy_process_group()
json.dump(out, sys.stdout)
"""


def test_two_rank_processes_with_torch_distributed(small_server, small_wds, free_port):
    """Two real rank processes (gloo), rank/world found through
    torch.distributed, 2 DataLoader workers each."""
    W = 4
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "clients", "python"), os.environ.get("PYTHONPATH", "")]))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(var, None)
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(r), "2",
                               str(free_port), small_server.url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
             for r in (0, 1)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err.decode()[-4000:]
        outs.append(json.loads(out))
    by_consumer = defaultdict(list)
    for rank, samples in enumerate(outs):
        for s in samples:
            c = s["__index__"] % W
            assert c // 2 == rank
            by_consumer[c].append(s)
    # The content hashes were computed in the rank processes.
    check_epoch_union(by_consumer, small_wds, W, hash_of=lambda s: s["hash"])


def test_dataset_set_epoch_changes_order_not_content(small_server, small_wds):
    ds = ShardcastDataset(small_server.url, JOB, rank=0, world=1)
    first = list(ds)
    ds.set_epoch(1)
    second = list(ds)
    assert len(first) == len(second) == small_wds.total
    assert [s["__key__"] for s in first] != [s["__key__"] for s in second]
    assert sorted(shardcast.sample_hash(s) for s in first) == \
        sorted(shardcast.sample_hash(s) for s in second) == \
        sorted(m["hash"] for m in small_wds.manifest["samples"])


# --- the raw tar format --------------------------------------------------------

def test_python_tarfile_reads_raw_stream(small_server, small_wds):
    rank, world = 1, 3
    resp = shardcast.open_raw(shardcast.stream_url(small_server.url, JOB, 0, rank, world))
    assert resp.getheader("Content-Type").startswith("application/x-tar")
    assert resp.getheader("Transfer-Encoding", "").lower() == "chunked"
    members = []
    with tarfile.open(fileobj=resp, mode="r|") as tf:
        for ti in tf:
            data = tf.extractfile(ti).read() if ti.isreg() else None
            members.append((ti, data))
        # The stream's identity: a pax global header tarfile keeps for the
        # archive (and merges into every member's pax_headers).
        ident = dict(tf.pax_headers)
    assert resp.read().strip(b"\0") == b""  # only padding may follow; no cut
    assert set(ident) == {"SHARDCAST.job", "SHARDCAST.epoch", "SHARDCAST.fingerprint",
                          "SHARDCAST.replica", "SHARDCAST.replicas", "SHARDCAST.served_by"}
    assert ident["SHARDCAST.job"] == JOB and ident["SHARDCAST.epoch"] == "0"
    assert re.fullmatch(r"[0-9a-f]{32}", ident["SHARDCAST.fingerprint"])
    assert (ident["SHARDCAST.replica"], ident["SHARDCAST.replicas"],
            ident["SHARDCAST.served_by"]) == ("0", "1", "0")
    resp.close()

    last, trailer_bytes = members[-1]
    assert last.name == shardcast.END_MEMBER
    trailer = json.loads(trailer_bytes)
    share = small_wds.total // world
    assert trailer == {"status": "ok", "epoch": 0, "rank": rank, "world": world,
                       "start": 0, "samples": share, "position": share}

    samples = []
    for ti, data in members[:-1]:
        assert ti.isreg()
        assert ti.mode == 0o644 and ti.uid == 0 and ti.gid == 0 and ti.mtime == 0
        assert ti.uname == "" and ti.gname == ""
        m = MEMBER_RE.match(ti.name)
        assert m, ti.name
        g, rest = int(m.group(1)), m.group(2)
        pax = ti.pax_headers
        if "SHARDCAST.key" in pax:
            key = pax["SHARDCAST.key"]
            assert int(pax["SHARDCAST.index"]) == g
            assert int(pax["SHARDCAST.position"]) == len(samples)
            assert pax["SHARDCAST.shard"].endswith("/" + small_wds.by_key[key]["shard"])
            assert rest.startswith(key + ".")
            samples.append({"__key__": key, "__index__": g})
        else:
            assert samples and g == samples[-1]["__index__"], "member outside a sample"
            assert not any(k.startswith("SHARDCAST.") for k in pax if k not in ident)
        cur = samples[-1]
        ext = rest[len(cur["__key__"]) + 1:]
        assert ext not in cur
        cur[ext] = data
    assert len(samples) == share
    assert [s["__index__"] for s in samples] == [rank + world * p for p in range(share)]
    for s in samples:
        assert shardcast.sample_hash(s) == small_wds.by_key[s["__key__"]]["hash"]


def test_raw_stream_headers_are_strict_ustar(small_server, small_wds):
    data = fetch_raw(small_server, JOB, 0, 0, 2)
    headers = walk_tar_headers(data)
    kinds = Counter(t for t, _, _ in headers)
    assert set(kinds) == {b"0", b"x", b"g"}
    # The stream's identity, first and once: a pax global header.
    assert headers[0][0] == b"g" and kinds[b"g"] == 1
    # One pax header per sample (long names would add more; these are short).
    assert kinds[b"x"] == small_wds.total // 2
    assert headers[-1][1] == shardcast.END_MEMBER
    # Nothing but the two end blocks after the last member's data.
    assert len(data) % 512 == 0


# --- determinism --------------------------------------------------------------

def test_same_request_is_byte_identical(small_server):
    a = fetch_raw(small_server, JOB, 3, 0, 2)
    b = fetch_raw(small_server, JOB, 3, 0, 2)
    assert len(a) > 100_000
    assert a == b


def _key_order(server, epoch, world=1):
    samples, _ = read_samples(server, JOB, epoch, 0, world)
    return [s["__key__"] for s in samples]


def test_epoch_and_seed_change_the_order(start_server, small_server, small_wds):
    e0 = _key_order(small_server, 0)
    e1 = _key_order(small_server, 1)
    assert e0 != e1
    assert sorted(e0) == sorted(e1) == sorted(small_wds.by_key)
    other_seed = start_server(small_wds.path, job=JOB, seed=6,
                              extra=["--shuffle-buffer", "64", "--interleave", "3"])
    s0 = _key_order(other_seed, 0)
    assert s0 != e0
    assert sorted(s0) == sorted(e0)
    # Same seed on a second server process: the same order.
    same_seed = start_server(small_wds.path, job=JOB, seed=5,
                             extra=["--shuffle-buffer", "64", "--interleave", "3"])
    assert _key_order(same_seed, 0) == e0


def test_resume_from_start_position(small_server):
    full, t_full = read_samples(small_server, JOB, 2, 1, 3)
    tail, t_tail = read_samples(small_server, JOB, 2, 1, 3, start=10)
    assert [(s["__index__"], shardcast.sample_hash(s)) for s in tail] == \
        [(s["__index__"], shardcast.sample_hash(s)) for s in full[10:]]
    assert [s["__position__"] for s in tail] == list(range(10, len(full)))
    assert t_tail["start"] == 10 and t_tail["samples"] == len(full) - 10
    assert t_tail["position"] == t_full["position"] == len(full)


def test_compressed_shards_give_the_same_epoch(start_server, workdir):
    orders = {}
    for comp in ("none", "gz", "zst"):
        d = os.path.join(workdir, "comp-" + comp)
        ds = Dataset(d, make_dataset(d, shards=3, per_shard=20, size=500, seed=3,
                                     compress=comp, prefix="c"))
        srv = start_server(d, job="c", seed=9)
        samples, trailer = read_samples(srv, "c", 0, 0, 1)
        check_against_manifest(samples, ds)
        assert trailer["samples"] == 60
        orders[comp] = [(s["__key__"], shardcast.sample_hash(s)) for s in samples]
    assert orders["none"] == orders["gz"] == orders["zst"]


def test_fields_filter(small_server, small_wds):
    only_cls, _ = read_samples(small_server, JOB, 0, 0, 1, fields=["cls"])
    assert len(only_cls) == small_wds.total
    for s in only_cls:
        assert set(field_dict(s)) == {"cls"}
        want = small_wds.by_key[s["__key__"]]["fields"]["cls"]["sha256"]
        assert hashlib.sha256(s["cls"]).hexdigest() == want
    # Samples without a jpg send nothing but still count in positions.
    jpg, trailer = read_samples(small_server, JOB, 0, 0, 1, fields="jpg,cls")
    with_jpg = {k for k, m in small_wds.by_key.items() if "jpg" in m["fields"]}
    assert 0 < len(with_jpg) < small_wds.total
    assert {s["__key__"] for s in jpg} == set(small_wds.by_key)
    for s in jpg:
        assert set(field_dict(s)) == ({"jpg", "cls"} if s["__key__"] in with_jpg else {"cls"})
        assert s["__position__"] == s["__index__"]
    assert trailer["position"] == small_wds.total
    only_jpg, trailer = read_samples(small_server, JOB, 0, 0, 1, fields=["jpg"])
    assert {s["__key__"] for s in only_jpg} == with_jpg
    assert trailer["position"] == small_wds.total


# --- the WebDataset format corpora ---------------------------------------------

def serve_corpus(start_server, d, job):
    """Serve the shards of d and read one epoch: every sample the WebDataset
    rule (wds_samples) finds in them arrives once, byte for byte, from its
    shard, and nothing else. Returns ({key: sample}, {key: (shard, hash)})."""
    shards = sorted(f for f in os.listdir(d)
                    if f.endswith((".tar", ".tgz", ".tar.gz", ".tar.zst")))
    expected = {}
    for f in shards:
        for key, fields in wds_samples(os.path.join(d, f)):
            assert key not in expected
            expected[key] = (f, shardcast.sample_hash(fields))
    srv = start_server(d, job=job, seed=1)
    samples, trailer = read_samples(srv, job, 0, 0, 1)
    assert trailer["samples"] == len(samples) == len(expected)
    got = {s["__key__"]: s for s in samples}
    assert set(got) == set(expected)
    assert not any("PaxHeader" in k or "@LongLink" in k for k in got)
    for key, s in got.items():
        shard, h = expected[key]
        assert s["__shard__"].endswith("/" + shard)
        assert shardcast.sample_hash(s) == h, key
    return got, expected


def test_generated_webdataset_shards(start_server, generated_wds):
    got, expected = serve_corpus(start_server, generated_wds.path, "gen")
    # The manifest (what the generator meant to write) agrees with the rule.
    m = generated_wds.manifest
    assert {s["key"]: (s["shard"], s["hash"]) for s in m["samples"]} == expected
    assert len(got) == m["total_samples"] == 8 + 90 + 1000 + 5
    fmt = {s["file"]: (s["tar"], s["filter"]) for s in m["shards"]}
    assert set(fmt.values()) == {("gnu", "gzip"), ("gnu", "none"), ("pax", "none"),
                                 ("pax", "gzip")}
    # Directories in keys, multi-dot and upper-case extensions.
    assert set(field_dict(got["compressed/0001"])) == {"txt.gz"}
    assert gzip.decompress(got["compressed/0001"]["txt.gz"]) == b"hello\n"
    assert set(field_dict(got["a/b/c"])) == {"png", "seg.json", "txt"}
    assert set(field_dict(got["x.y/z"])) == {"dat", "cls"}
    assert set(field_dict(got["10"])) == {"cls", "png"}
    long_keys = [k for k in got if len(k) > 100]
    assert len(long_keys) == 2  # a GNU ././@LongLink name and a pax path record
    assert {"json", "x.seg.json"} in [set(field_dict(got[k])) for k in long_keys]
    assert "données/été" in got and "日本語/キー" in got and "with space/k 1" in got
    # Top-level __*__ names are skipped; "__x__" below a directory is a key.
    assert "d/__x__" in got
    assert not any(k.startswith("__") for k in got)
    assert got["k2"]["txt"] == b""


@pytest.mark.conformance
def test_upstream_webdataset_shards(start_server, upstream_wds):
    got, expected = serve_corpus(start_server, upstream_wds, "wds")
    assert len(expected) == 90 + 3 + 1000  # the README's counts
    assert set(field_dict(got["compressed/0001"])) == {"txt.gz"}
    assert gzip.decompress(got["compressed/0001"]["txt.gz"]) == b"hello\n"
    assert set(field_dict(got["10"])) == {"cls", "png"}


# --- bad requests and failures ----------------------------------------------------

BAD_REQUESTS = [
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=2&world=2", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=0", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=65537", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=x&world=2", 400),
    ("GET", "/v1/jobs/train/epochs/abc/stream?rank=0&world=1", 400),
    ("GET", "/v1/jobs/train/epochs/-1/stream?rank=0&world=1", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=1&start=x", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=1&format=zip", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=1&fields=jpg,,cls", 400),
    ("GET", "/v1/jobs/nope/epochs/0/stream?rank=0&world=1", 404),
    ("GET", "/v1/no/such/path", 404),
    ("POST", "/v1/jobs/train/epochs/0/stream?rank=0&world=1", 405),
]


@pytest.mark.parametrize("method,path,status", BAD_REQUESTS)
def test_bad_request_gets_one_line_error(small_server, method, path, status):
    got, headers, body = http_request(small_server, path, method)
    assert got == status, (got, body)
    assert headers.get("content-type", "").startswith("text/plain")
    text = body.decode()
    assert text.startswith("error: ") and text.endswith("\n")
    assert text.count("\n") == 1 and len(text.strip()) > len("error: ")
    # The server still serves afterwards.
    ok, _, _ = http_request(small_server, "/v1/jobs/train/epochs/0/stream?rank=0&world=64")
    assert ok == 200
    assert small_server.alive(), small_server.log()


def test_client_reports_unknown_job(small_server):
    with pytest.raises(ShardcastHTTPError) as ei:
        list(ShardcastDataset(small_server.url, "nope", rank=0, world=1))
    assert ei.value.status == 404 and ei.value.reason
    assert ei.value.reason in str(ei.value) and "404" in str(ei.value)
    # Through DataLoader workers the same exception type reaches the caller.
    loader = torch.utils.data.DataLoader(
        ShardcastDataset(small_server.url, "nope", rank=0, world=1),
        num_workers=2, batch_size=None)
    err = first_error(loader)
    assert isinstance(err, ShardcastHTTPError) and "404" in str(err), repr(err)


def first_error(loader):
    """The exception that iterating `loader` raises, or None. The traceback
    is dropped before returning: it would keep the DataLoader iterator in a
    reference cycle, and an iterator reclaimed later by the cycle collector
    waits 2 x 5 s for its already-finalised worker queues."""
    it = iter(loader)
    try:
        for _ in it:
            pass
    except Exception as e:  # noqa: BLE001 - the caller checks the type
        e.__traceback__ = None
        return e
    return None


def test_client_reports_server_down(start_server, small_wds):
    srv = start_server(small_wds.path, job=JOB)
    url = srv.url
    assert srv.stop() == 0, srv.log()
    with pytest.raises(ShardcastConnectionError, match="127.0.0.1:%d" % srv.port):
        list(ShardcastDataset(url, JOB, rank=0, world=1, timeout=5))


def test_cut_streams_then_healthy_request(small_server):
    reference = fetch_raw(small_server, JOB, 4, 0, 1)
    for nbytes in (0, 1, 4096, 50_000, len(reference) // 2):
        resp = shardcast.open_raw(shardcast.stream_url(small_server.url, JOB, 4, 0, 1))
        if nbytes:
            assert len(resp.read(nbytes)) == nbytes
        resp.close()  # drops the connection mid-stream
    # Several abandoned connections at once, left open while a full read runs.
    dangling = [shardcast.open_raw(shardcast.stream_url(small_server.url, JOB, 4, r, 3))
                for r in range(3)]
    assert fetch_raw(small_server, JOB, 4, 0, 1) == reference
    for d in dangling:
        d.close()
    # The client stopping early (break) closes its connection, too.
    with shardcast.StreamReader(shardcast.stream_url(small_server.url, JOB, 4, 0, 1)) as r:
        for i, _ in enumerate(r):
            if i == 3:
                break
    assert fetch_raw(small_server, JOB, 4, 0, 1) == reference
    assert small_server.alive(), small_server.log()


def _corrupt_dataset(workdir, name):
    d = os.path.join(workdir, name)
    ds = Dataset(d, make_dataset(d, shards=3, per_shard=20, size=2000, seed=4, prefix="k"))
    bad = os.path.join(d, ds.manifest["shards"][1]["file"])
    size = os.path.getsize(bad)
    with open(bad, "r+b") as f:
        f.truncate(size // 2 + 100)  # cut inside a member's data
    return ds, ds.manifest["shards"][1]["file"]


def test_corrupt_shard_on_error_fail_is_reported(start_server, workdir):
    ds, bad = _corrupt_dataset(workdir, "corrupt-fail")
    srv = start_server(ds.path, job="k", extra=["--on-error", "fail", "--interleave", "1",
                                                "--shuffle-buffer", "1"])
    with pytest.raises((ShardcastStreamError, ShardcastHTTPError)) as ei:
        list(ShardcastDataset(srv.url, "k", rank=0, world=1))
    assert ei.value.reason, "the server's reason must reach the caller"
    # The raw bytes never carry the end member, whatever arrived.
    try:
        resp = shardcast.open_raw(shardcast.stream_url(srv.url, "k", 0, 0, 1))
    except ShardcastHTTPError as e:
        assert e.status >= 500
    else:
        try:
            data = resp.read()
        except http.client.IncompleteRead as e:
            data = e.partial
        resp.close()
        assert shardcast.END_MEMBER.encode() not in data
        assert shardcast.ERROR_MEMBER.encode() in data
    assert srv.alive(), srv.log()


def test_corrupt_shard_on_error_skip_completes(start_server, workdir, caplog):
    ds, bad = _corrupt_dataset(workdir, "corrupt-skip")
    srv = start_server(ds.path, job="k", extra=["--on-error", "skip"])
    samples, trailer = read_samples(srv, "k", 0, 0, 1)
    assert trailer["status"] == "ok"
    check_against_manifest(samples, ds)
    got = {s["__key__"] for s in samples}
    intact = {m["key"] for m in ds.manifest["samples"] if m["shard"] != bad}
    assert intact <= got
    assert len(got) == len(samples) < ds.total
    # The skip reaches the consumer: the END summary of both formats names
    # the shard (redacted URL) and the counts.
    for reader in (shardcast.FramesReader, shardcast.StreamReader):
        with reader(shardcast.stream_url(srv.url, "k", 0, 0, 1,
                                         fmt="frames" if reader is shardcast.FramesReader
                                         else "tar")) as r:
            list(r)
            trailer = r.trailer
        sk = trailer["skipped"]
        assert sk["shards"] == 1 and len(sk["shard_urls"]) == 1, trailer
        assert sk["shard_urls"][0].endswith("/" + bad), sk
        assert set(sk) == {"shards", "shard_urls", "samples", "sample_refs"}, sk
        assert sk["samples"] == 0 and sk["sample_refs"] == [], sk
    # The dataset tells it (a warning on the shardcast logger).
    import logging
    with caplog.at_level(logging.WARNING, logger="shardcast"):
        list(ShardcastDataset(srv.url, "k", rank=0, world=1))
    told = [r.getMessage() for r in caplog.records if "lost 1 shard(s) skipped or cut short" in r.getMessage()]
    assert told and bad in told[0], [r.getMessage() for r in caplog.records]
    # The job's status counts the skip once: the next epoch, read ahead
    # (prefetch) and not streamed yet, skipped the shard too, but only its
    # own entry says so.
    import time
    deadline = time.monotonic() + 60
    while True:
        st = shardcast.dataset.job_status(srv.url, "k")
        eps = {e["epoch"]: e for e in st["epochs"]}
        if 1 in eps and eps[1]["shards_skipped"] == 1:
            break
        assert time.monotonic() < deadline, st["epochs"]
        time.sleep(0.05)
    assert eps[0]["shards_skipped"] == 1 and eps[1]["prefetched"]
    assert st["skipped"]["shards"] == 1, st["skipped"]



def test_length_is_known_as_soon_as_the_indexing_epoch_ends(start_server, workdir):
    """The epoch that indexed the last shard has ended: len() answers at
    once (it used to raise TypeError until the server's next tick)."""
    d = os.path.join(workdir, "len-at-once")
    ds_ = Dataset(d, make_dataset(d, shards=4, per_shard=25, size=500, seed=8))
    srv = start_server(ds_.path, job="n")
    ds = ShardcastDataset(srv.url, "n", rank=0, world=1)
    assert len(list(ds)) == ds_.total
    assert len(ShardcastDataset(srv.url, "n", rank=0, world=1)) == ds_.total
