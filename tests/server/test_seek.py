"""Seekable epochs through the real server: every position of an epoch is
reachable without re-reading its prefix (shard indexes, seek feeds, the
lag policy, the even-pad tail, /samples/{i}), hostile indexes get a 400,
and the object store serves little for a resume and for reconnects.

The store-side tests serve the shards with nginx (its access log counts
the bytes it sent) and put a fault-injecting proxy between the consumers
and shardcastd."""
import glob
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))

from faultproxy import FaultProxy, Rule  # noqa: E402
from server_testlib import (Nginx, shard_url)  # noqa: E402
from server_testlib import (FramesStream, get_json, make_dataset, read_share,  # noqa: E402
                            read_when, request, sanitized, stream_path, wait_for)

MIB = 1 << 20


def key_hash_of_tar(path):
    """The good samples of one shard in tar order: (key, content hash) by
    the WebDataset rule, from Python's tarfile (independent of shardcast)."""
    out = []
    cur_key, fields = None, {}
    with tarfile.open(path) as t:
        for m in t:
            if not m.isfile():
                continue
            base = m.name.rsplit("/", 1)[-1]
            if "." not in base or base.startswith("."):
                continue
            key = m.name[:len(m.name) - len(base)] + base.split(".", 1)[0]
            ext = base.split(".", 1)[1].lower()
            if key != cur_key:
                if cur_key is not None:
                    out.append(cur_key)
                cur_key, fields = key, {}
            fields[ext] = t.extractfile(m).read()
    if cur_key is not None:
        out.append(cur_key)
    return out


# -- hostile indexes --------------------------------------------------------

OVERFLOW = [
    "/v1/jobs/train/epochs/0/stream?rank=0&world=2&global_start=18446744073709551615",
    "/v1/jobs/train/epochs/0/stream?rank=0&world=3&start=6148914691236517205",
    "/v1/jobs/train/epochs/0/stream?rank=65535&world=65536&start=70368744177664",
    "/v1/jobs/train/epochs/0/stream?rank=0&world=1&global_start=4611686018427387905",
    "/v1/jobs/train/epochs/0/stream?rank=0&world=2&format=tar&global_start=18446744073709551615",
    "/v1/jobs/train/samples/18446744073709551615",
    "/v1/jobs/train/samples/-1",
]


def test_overflowing_indexes_are_400(start, small_ds):
    srv = start("--job", "train", "--source", small_ds.path)
    healthy = FramesStream(srv, stream_path("train", 0, 0, 1))
    first = healthy.next_sample()
    for path in OVERFLOW:
        st, _, body = request(srv, path)
        assert st == 400, (path, st, body)
        assert body.startswith(b"error: ")
    rest = healthy.read_all()
    healthy.close()
    assert first is not None and len(rest) + 1 == small_ds.total
    assert healthy.outcome == "end"
    assert srv.alive()


# -- the even-pad tail and late ranks ---------------------------------------

@pytest.fixture(scope="module")
def pad_ds(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pad"))
    make_dataset(d, shards=8, per_shard=1000, size=300, seed=5)
    return d


def test_even_pad_8000_w3_ranks_one_after_another(start, pad_ds, workdir):
    """N = 8000, W = 3: each rank gets ceil(8000/3) = 2667; the last share
    repeats Y[0]. The ranks read one after the other through a window far
    smaller than the epoch, so ranks 1 and 2 and the tail are seeks."""
    state = os.path.join(workdir, "pad-state")
    # The feed's seeks: on the feed.
    srv = start("--job", "train", "--source", pad_ds, "--partition", "even-pad",
                "--window-samples", "256", "--state-dir", state,
                "--join-timeout-ms", "200", "--lag-grace-ms", "200",
                "--data-plane", "stream")
    y, outcome, _ = read_share(srv, "train", 0, 0, 1)  # Y itself (epoch 0)
    assert outcome == "end" and len(y) == 8000
    shares = []
    for r in range(3):
        got, outcome, trailer = read_share(srv, "train", 0, r, 3)
        assert outcome == "end", trailer
        shares.append(got)
    assert [len(s) for s in shares] == [2667, 2667, 2667]
    for r in range(3):
        want = [y[i if i < 8000 else i % 8000]["key"] for i in range(r, 8001, 3)]
        assert [s["key"] for s in shares[r]] == want
    keys = set(s["key"] for sh in shares for s in sh)
    assert keys == set(s["key"] for s in y)
    def epoch0():
        st = get_json(srv, "/v1/jobs/train")
        return [e for e in st["epochs"] if e["epoch"] == 0][0]
    # the exact length is known once every shard is indexed (status
    # refreshes it every second)
    assert wait_for(lambda: epoch0()["samples_total"] == 8000, 60), epoch0()
    ep = epoch0()
    assert ep["seeks"]["opened"] >= 1 and ep["seeks"]["replays"] == 0


@pytest.fixture(scope="module")
def lag_ds(tmp_path_factory):
    """8000 samples of ~6 KB: a share (16 MB) is more than socket buffers
    hold, so a consumer that stops reading stops its cursor."""
    d = str(tmp_path_factory.mktemp("lag"))
    make_dataset(d, shards=8, per_shard=1000, size=6000, seed=6)
    return d


def test_even_pad_concurrent_ranks_with_a_stalled_one(start, lag_ds, workdir):
    """Three ranks at once; rank 2 stops reading for a while. The others do
    not wait for it beyond the lag grace; all three end with equal counts."""
    # The feed's lag detaches: on the feed.
    srv = start("--job", "train", "--source", lag_ds, "--partition", "even-pad",
                "--window-samples", "256", "--lag-grace-ms", "300",
                "--state-dir", os.path.join(workdir, "pad-state2"),
                "--data-plane", "stream")
    results = [None] * 3
    timing = {}

    def run(r):
        s = FramesStream(srv, stream_path("train", 1, r, 3))
        out = []
        t0 = time.monotonic()
        while True:
            smp = s.next_sample()
            if smp is None:
                break
            out.append(smp["key"])
            if r == 2 and len(out) == 100:
                time.sleep(6)  # stalled, attached
        timing[r] = time.monotonic() - t0
        results[r] = (out, s.outcome)
        s.close()

    th = [threading.Thread(target=run, args=(r,)) for r in range(3)]
    for t in th:
        t.start()
    for t in th:
        t.join(120)
    assert all(res and res[1] == "end" for res in results), results
    assert [len(res[0]) for res in results] == [2667] * 3
    # ranks 0 and 1 were not held for the 6 s stall of rank 2
    assert timing[0] < 5 and timing[1] < 5, timing
    st = get_json(srv, "/v1/jobs/train")
    ep = [e for e in st["epochs"] if e["epoch"] == 1][0]
    assert ep["seeks"]["lag_detaches"] >= 1


# -- /samples/{i} ------------------------------------------------------------

def test_samples_endpoint_is_the_unshuffled_order(start, small_ds, workdir):
    srv = start("--job", "train", "--source", small_ds.path,
                "--state-dir", os.path.join(workdir, "samples-state"))
    keys = []
    for p in sorted(glob.glob(os.path.join(small_ds.path, "*.tar"))):
        keys += key_hash_of_tar(p)
    assert len(keys) == small_ds.total
    for i in (0, 1, 39, 40, len(keys) - 1):
        s = FramesStream(srv, "/v1/jobs/train/samples/%d?format=frames" % i)
        got = s.read_all()
        s.close()
        assert s.outcome == "end" and len(got) == 1, (i, s.trailer)
        assert got[0]["key"] == keys[i] and got[0]["index"] == i
        st, _, body = request(srv, "/v1/jobs/train/samples/%d" % i)
        assert st == 200
        names = [m.name for m in tarfile.open(fileobj=__import__("io").BytesIO(body))]
        assert names[-1] == "__shardcast_end__"
        assert all(n.startswith("%012d/" % i) for n in names[:-1])
    # Past the end: once every shard is indexed (it is, after the reads
    # above) a 404 naming the dataset's length.
    st, _, body = request(srv, "/v1/jobs/train/samples/%d" % len(keys))
    assert st == 404 and b"past the dataset's %d samples" % len(keys) in body
    st, _, _ = request(srv, "/v1/jobs/nope/samples/0")
    assert st == 404


@pytest.fixture(scope="module")
def big_ds(tmp_path_factory):
    """About 1 GB: 40 shards x 250 samples of ~100 KB."""
    d = str(tmp_path_factory.mktemp("big"))
    make_dataset(d, shards=40, per_shard=250, size=100000, seed=9)
    return d


def dataset_bytes(d):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(d, "*.tar")))


def test_resume_at_90_percent_of_an_indexed_epoch(start, big_ds, workdir):
    if sanitized():
        pytest.skip("timing and byte counts of a 1 GB dataset: release build only")
    ng = Nginx(big_ds, workdir)
    try:
        total = dataset_bytes(big_ds)
        state = os.path.join(workdir, "resume-state")
        src = shard_url(ng, big_ds)
        args = ("--job", "train", "--source", src, "--state-dir", state,
                "--prefetch", "false")
        srv = start(*args)
        y, outcome, _ = read_share(srv, "train", 3, 0, 1)  # indexes built
        assert outcome == "end"
        n = len(y)
        assert n == 10000
        srv.stop()
        # A fresh server with the same state: resume W=1 at 90 %.
        before = ng.bytes_sent()
        srv = start(*args)
        p = n * 9 // 10
        t0 = time.monotonic()
        s = FramesStream(srv, stream_path("train", 3, 0, 1, start=p))
        first = s.next_sample()
        dt = time.monotonic() - t0
        assert first is not None and first["index"] == p
        assert first["key"] == y[p]["key"] and first["hash"] == y[p]["hash"]
        s.close()
        time.sleep(1.0)  # transfers cut by the close are logged
        read = ng.bytes_sent() - before
        print("resume at 90%%: first sample after %.3f s, store sent %.1f MB "
              "of %.1f MB (%.2f %%)" % (dt, read / 1e6, total / 1e6, 100.0 * read / total))
        assert dt < 1.0
        # no shard the epoch passed before p is fetched for it: the store
        # sends what the rest of the epoch (10 %) needs, whose fetches
        # start with the first sample's, and the part of each shard's
        # items a fetch again takes beside them
        assert read < 0.15 * total
        # ... and the rest of the epoch from there is exactly Y[p:]
        rest, outcome, _ = read_share(srv, "train", 3, 0, 1, start=p)
        assert outcome == "end"
        assert [r["key"] for r in rest] == [r["key"] for r in y[p:]]
        assert [r["hash"] for r in rest] == [r["hash"] for r in y[p:]]
        read = ng.bytes_sent() - before
        print("resume at 90%% read to the end: store sent %.1f MB (%.2f %%)" % (
            read / 1e6, 100.0 * read / total))
        assert read < 0.15 * total
    finally:
        ng.stop()


def test_reconnects_through_a_resetting_proxy(start, big_ds, workdir):
    """Four consumers through a proxy that resets every stream after a few
    thousand samples' worth of bytes; each resumes from what it received.
    Exactly-once holds and the store serves at most 1.05 x the dataset."""
    if sanitized():
        pytest.skip("byte counts of a 1 GB dataset: release build only")
    ng = Nginx(big_ds, workdir)
    try:
        total = dataset_bytes(big_ds)
        srv = start("--job", "train", "--source", shard_url(ng, big_ds),
                    "--state-dir", os.path.join(workdir, "reconnect-state"),
                    "--prefetch", "false")
        y, outcome, _ = read_share(srv, "train", 5, 0, 1)
        assert outcome == "end"
        before = ng.bytes_sent()
        W = 4
        upstream = "http://%s:%d" % (srv.host, srv.port)
        # about every 1,000 samples of ~100 KB (each stream, each time)
        with FaultProxy(upstream=upstream,
                        rules=[Rule.reset(after_bytes=100 * MIB, path="/stream")]) as px:
            class Via:
                host = "127.0.0.1"
                port = int(px.url.rsplit(":", 1)[1])

            got = [[] for _ in range(W)]
            errors = []

            def run(r):
                tries = 0
                while tries < 50:
                    tries += 1
                    s = FramesStream(Via, stream_path("train", 6, r, W, start=len(got[r])))
                    if s.status != 200:
                        s.close()
                        time.sleep(0.5)
                        continue
                    while True:
                        smp = s.next_sample()
                        if smp is None:
                            break
                        got[r].append((smp["key"], smp["hash"]))
                    s.close()
                    if s.outcome == "end":
                        return
                errors.append("rank %d did not finish" % r)

            th = [threading.Thread(target=run, args=(r,)) for r in range(W)]
            for t in th:
                t.start()
            for t in th:
                t.join(300)
            resets = px.counters()
        time.sleep(1.0)
        store = ng.bytes_sent() - before
        assert not errors, errors
        # epoch 6 read once more from the start: the reference order
        y6, outcome, _ = read_share(srv, "train", 6, 0, 1)
        for r in range(W):
            want = [(y6[i]["key"], y6[i]["hash"]) for i in range(r, len(y6) - len(y6) % W, W)]
            assert got[r] == want, "rank %d" % r
        print("reconnects: store sent %.1f MB for an epoch of %.1f MB (%.3f x), "
              "proxy %s" % (store / 1e6, total / 1e6, store / total, json.dumps(resets)[:300]))
        assert store <= 1.05 * total
    finally:
        ng.stop()


# -- the journal: an epoch's sequence never changes once served -------------

def test_skipped_shards_stay_skipped_across_a_restart(start, workdir):
    """A shard that is corrupt while epoch 0 is served is skipped after the
    samples read before the damage. Repaired and the server killed and
    restarted with the same state_dir, epoch 0 is the same sequence (the
    journal), while a new epoch reads the repaired shard in full."""
    d = os.path.join(workdir, "journal-ds")
    make_dataset(d, shards=4, per_shard=200, size=2000, seed=8)
    shards = sorted(glob.glob(os.path.join(d, "*.tar")))
    victim = shards[2]
    good = open(victim, "rb").read()
    with open(victim, "wb") as f:
        f.write(good[:len(good) // 2 + 700])  # cut inside a member: corrupt
    state = os.path.join(workdir, "journal-state")
    args = ("--job", "train", "--source", d, "--state-dir", state,
            "--prefetch", "false", "--on-error", "skip")
    srv = start(*args)
    y0, outcome, _ = read_share(srv, "train", 0, 0, 1)
    assert outcome == "end" and 600 < len(y0) < 800
    ep = [e for e in get_json(srv, "/v1/jobs/train")["epochs"] if e["epoch"] == 0][0]
    assert ep["journal_skips"] == 1
    with open(victim, "wb") as f:
        f.write(good)  # repaired
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(10)
    srv.stop()
    srv.proc.returncode = 0  # killed on purpose: the fixture checks exits
    srv = start(*args)
    again, outcome, _ = read_share(srv, "train", 0, 0, 1)
    assert outcome == "end"
    assert [s["key"] for s in again] == [s["key"] for s in y0]
    # a resume from the middle follows the same journal
    mid, outcome, _ = read_share(srv, "train", 0, 0, 1, start=len(y0) // 2)
    assert [s["key"] for s in mid] == [s["key"] for s in y0[len(y0) // 2:]]
    fresh, outcome, _ = read_share(srv, "train", 1, 0, 1)
    assert outcome == "end" and len(fresh) == 800


def test_sidecars_from_shardcast_index(start, server_binary, workdir):
    """`shardcast index --sidecar` writes <shard>.scidx next to local
    shards; a server with no state_dir reads them: the epoch's length is
    known before anything is streamed, and a resume far into the epoch is
    a seek, not a replay."""
    d = os.path.join(workdir, "sidecar-ds")
    make_dataset(d, shards=6, per_shard=300, size=1500, seed=12)
    cli = os.path.join(os.path.dirname(server_binary), "shardcast")
    state = os.path.join(workdir, "sidecar-cli-state")
    out = subprocess.run([cli, "index", "--sidecar", "--state-dir", state, d],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("built") == 6 and "300 samples" in out.stdout
    assert len(glob.glob(os.path.join(d, "*.tar.scidx"))) == 6
    # The feed's seek (the plan, which takes such an epoch by default, has
    # its own test below).
    srv = start("--job", "train", "--source", d, "--prefetch", "false",
                "--data-plane", "stream")
    # nothing streamed yet, the shard list has no .scidx names in it
    st = get_json(srv, "/v1/jobs/train")
    assert st["shards"] == 6
    got, outcome, _ = read_share(srv, "train", 4, 0, 1, start=1500)
    assert outcome == "end" and len(got) == 300
    ep = [e for e in get_json(srv, "/v1/jobs/train")["epochs"] if e["epoch"] == 4][0]
    assert ep["seeks"]["opened"] == 1 and ep["seeks"]["replays"] == 0
    # (a sidecar the seek did not need is read when the manager's tick
    # counts the epoch's length: wait for the count)
    def loaded():
        st, _, body = request(srv, "/metrics")
        return [l for l in body.decode().splitlines()
                if l.startswith("shardcast_index_loaded_total")]
    got = read_when(loaded, lambda ls: ls and int(ls[0].split()[-1]) == 6)
    assert got and int(got[0].split()[-1]) == 6, got



def test_sidecars_make_a_resumed_epoch_a_plan(start, server_binary, workdir):
    """With the default data plane, the same sidecars make the epoch a
    plan: a resume far into it reads only its own samples from the files,
    no seek and no replay, and they are the feed's samples."""
    d = os.path.join(workdir, "sidecar-plan-ds")
    make_dataset(d, shards=6, per_shard=300, size=1500, seed=12)
    cli = os.path.join(os.path.dirname(server_binary), "shardcast")
    out = subprocess.run([cli, "index", "--sidecar", d],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    srv = start("--job", "train", "--source", d, "--prefetch", "false")
    got, outcome, _ = read_share(srv, "train", 4, 0, 1, start=1500)
    assert outcome == "end" and len(got) == 300
    st = get_json(srv, "/v1/jobs/train")
    ep = [e for e in st["epochs"] if e["epoch"] == 4][0]
    assert ep["seeks"]["opened"] == 0 and ep["seeks"]["replays"] == 0
    assert st["data_plane"]["plans"] == 1
    assert st["data_plane"]["plan_streams"] == 1
    assert st["data_plane"]["feed_streams"] == 0
    ref = start("--job", "train", "--source", d, "--prefetch", "false",
                "--data-plane", "stream")
    want, outcome, _ = read_share(ref, "train", 4, 0, 1, start=1500)
    assert outcome == "end" and got == want

def test_unprovable_resume_without_state_dir(start, workdir):
    """Without a state_dir, a server that starts an epoch with a resumed
    stream cannot know what was skipped before its restart: when a shard
    gets skipped, resumed streams end with a clear error instead of a
    possibly shifted sequence. A stream from the start is not affected."""
    d = os.path.join(workdir, "unproven-ds")
    # ~24 MB: more than socket buffers hold, so the stream is still being
    # served when the skip happens
    make_dataset(d, shards=4, per_shard=300, size=20000, seed=13)
    victim = sorted(glob.glob(os.path.join(d, "*.tar")))[1]
    good = open(victim, "rb").read()
    with open(victim, "wb") as f:
        f.write(good[:len(good) // 3 + 700])
    srv = start("--job", "train", "--source", d, "--prefetch", "false",
                "--on-error", "skip", "--window-samples", "64")
    s = FramesStream(srv, stream_path("train", 0, 0, 1, start=10))
    n = 0
    while s.next_sample() is not None:
        n += 1
        time.sleep(0.005)  # slow enough to be bound when the skip happens
    s.close()
    assert s.outcome == "error", (n, s.trailer)
    assert "state-dir" in s.trailer["reason"] and s.trailer.get("retryable") is False
    # from the start: the skip is this server's own decision, no error
    got, outcome, _ = read_share(srv, "train", 1, 0, 1)
    assert outcome == "end" and 800 < len(got) < 1200


def test_an_index_is_found_however_the_source_is_spelled(start, server_binary, workdir):
    """`shardcast index shards` from the dataset's parent directory (a
    relative path) and a server given the absolute path, then the
    file:// spelling: one index file per shard, found by both; nothing is
    indexed twice."""
    parent = os.path.join(workdir, "spelling")
    d = os.path.join(parent, "shards")
    make_dataset(d, shards=3, per_shard=50, size=800, seed=31)
    cli = os.path.join(os.path.dirname(server_binary), "shardcast")
    state = os.path.join(workdir, "spelling-state")
    out = subprocess.run([cli, "index", "--state-dir", state, "shards"], cwd=parent,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    files = sorted(glob.glob(os.path.join(state, "index", "*")))
    assert len(files) == 3, files
    for source in (d, "file://" + d, os.path.join(d, ".", "..", "shards")):
        srv = start("--job", "train", "--source", source, "--state-dir", state)
        assert wait_for(lambda: get_json(srv, "/v1/jobs/train")["state"] == "ready", 30)
        got, outcome, _ = read_share(srv, "train", 0, 0, 1)
        assert outcome == "end" and len(got) == 150
        _, _, body = request(srv, "/metrics")
        m = {ln.split()[0]: float(ln.split()[-1]) for ln in body.decode().splitlines()
             if ln.startswith("shardcast_index_") and not ln.startswith("#")}
        assert m.get("shardcast_index_built_total", 0) == 0, (source, m)
        assert m.get("shardcast_index_loaded_total", 0) == 3, (source, m)
        srv.proc.terminate()
        srv.proc.wait(30)
    assert sorted(glob.glob(os.path.join(state, "index", "*"))) == files
