"""The shard cache through the real server, counted at the store.

A fault proxy in front of nginx (HTTP) or s3rver (S3) counts every request
and body byte the store sends. With a cache at least as large as the
dataset, later epochs and a second job read 0 bytes from the store; a
restart reuses the cache after checking each entry (HEAD, no body); a
changed object is read again, never served stale; a server killed in the
middle of a fill leaves nothing that is served corrupt; with a cache of
half the dataset each epoch, once the subset has settled, reads at most 55% of it (the
stable-subset policy) and the budget is never exceeded. Every epoch is
checked sample by sample against the generator's manifest and against the
order the same job gives from local files.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from objstore_support import (MKWDS, REPO, FaultProxy, Rule, clean_env,
                              serve_nginx)

sys.path.insert(0, str(REPO / "clients" / "python"))
from shardcast import StreamReader, sample_hash, stream_url  # noqa: E402

WORLD = 2
ADMIN = "cache-test-admin"
JOB_ARGS = ["--seed", "5", "--shuffle-buffer", "40", "--interleave", "3"]


def server_bin():
    p = os.environ.get("SHARDCAST_BIN") or str(
        Path(os.environ.get("SHARDCAST_BUILD") or REPO / "build") / "shardcastd")
    if not os.access(p, os.X_OK):
        pytest.fail("shardcastd not built at %s (set SHARDCAST_BIN)" % p)
    return p


class Server:
    def __init__(self, source, args=(), env=None):
        self.proc = subprocess.Popen(
            [server_bin(), "--job", "train", "--source", source, "--port", "0",
             "--admin-token", ADMIN, *JOB_ARGS, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env or clean_env(), start_new_session=True)
        self.err = []
        deadline = time.time() + 30
        line = ""
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("listening=") or (
                    not line and self.proc.poll() is not None):
                break
        if not line.startswith("listening="):
            self.proc.kill()
            pytest.fail("server did not start: %s" % self.proc.stderr.read())
        self.url = "http://" + line.strip().split("=", 1)[1]
        # keep stderr drained (the log) so the server never blocks on it
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.err.append(line)

    def get(self, path):
        req = urllib.request.Request(self.url + path, headers={
            "Authorization": "Bearer " + ADMIN})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()

    def json(self, path):
        return json.loads(self.get(path))

    def put_job(self, name, spec):
        req = urllib.request.Request(
            self.url + "/v1/jobs/" + name, method="PUT",
            data=json.dumps(spec).encode(),
            headers={"Authorization": "Bearer " + ADMIN,
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status in (200, 201), r.status
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.json("/v1/jobs/" + name)["state"] == "ready":
                return
            time.sleep(0.05)
        pytest.fail("job %s not ready" % name)

    def metric(self, name):
        for line in self.get("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._t.join(timeout=5)
        return "".join(self.err)


def read_epoch(url, job, epoch):
    """[(key, content hash)] of the epoch, ranks in order; the ranks read
    at the same time, as a training job's do."""
    shares = [None] * WORLD
    errors = []

    def rank(r):
        try:
            with StreamReader(stream_url(url, job, epoch, r, WORLD)) as rd:
                shares[r] = [(s["__key__"], sample_hash(s)) for s in rd]
        except Exception as e:  # noqa: BLE001 (re-raised below)
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [x for share in shares for x in share]


def make_data(path, shards, seed, size=12000, per_shard=40):
    subprocess.run(["/usr/bin/python3", str(MKWDS), "--out", str(path),
                    "--shards", str(shards), "--samples-per-shard",
                    str(per_shard), "--size", str(size), "--seed", str(seed),
                    "--prefix", "shard"], check=True, stdout=subprocess.PIPE)
    return json.loads((Path(path) / "manifest.json").read_text())


# Shard objects ("<shard>.scidx" index sidecars are asked for only where a
# listing shows them, or with --index-sidecars-probe).
SHARD = r"\.tar$"


def shard_bytes(proxy):
    """Body bytes of shard GETs the store sent."""
    return proxy.bytes_sent(method="GET", path=SHARD)


def shard_gets(proxy):
    return proxy.count(method="GET", path=SHARD)


def brace(base, n):
    return base + "/shard-{000000..%06d}.tar" % (n - 1)


def check_once(got, manifest):
    """Every sample of the manifest at most once, even-drop's cut only."""
    n = len(manifest["samples"])
    want = {s["hash"] for s in manifest["samples"]}
    hashes = [h for _, h in got]
    assert len(hashes) == len(set(hashes)), "a sample was delivered twice"
    assert set(hashes) <= want, "a sample that is not in the dataset"
    assert len(hashes) == n - n % WORLD


def local_order(data):
    srv = Server(str(data))
    try:
        return read_epoch(srv.url, "train", 0)
    finally:
        srv.stop()


def cache_files(d):
    """(sum of .data sizes, number of .meta files) under a cache dir."""
    total = metas = 0
    for f in Path(d).iterdir():
        if f.name.endswith(".data"):
            total += f.stat().st_size
        elif f.name.endswith(".meta"):
            metas += 1
    return total, metas


@pytest.fixture
def http_store(tmp_path):
    data = tmp_path / "data"
    manifest = make_data(data, 8, seed=21)
    with serve_nginx(data, tmp_path) as base:
        with FaultProxy(base) as proxy:
            yield data, manifest, proxy


def dataset_bytes(data):
    return sum(f.stat().st_size for f in Path(data).glob("*.tar"))


def test_epochs_and_a_second_job_read_nothing_from_the_store(http_store,
                                                             tmp_path):
    data, manifest, proxy = http_store
    total = dataset_bytes(data)
    reference = local_order(data)
    source = brace(proxy.url, 8)
    srv = Server(source, ["--cache-bytes", "1GiB",
                          "--state-dir", str(tmp_path / "state")])
    try:
        proxy.reset_counters()
        e0 = read_epoch(srv.url, "train", 0)
        check_once(e0, manifest)
        assert e0 == reference, "the cache changed the order"
        assert shard_bytes(proxy) == total
        # a whole shard (under part_size) in one request
        assert shard_gets(proxy) == 8
        for epoch in (1, 2):
            proxy.reset_counters()
            got = read_epoch(srv.url, "train", epoch)
            check_once(got, manifest)
            assert shard_bytes(proxy) == 0, epoch
            assert shard_gets(proxy) == 0, epoch
        # A second job on the same source: each entry is checked once
        # (HEAD, no body), nothing is read.
        proxy.reset_counters()
        srv.put_job("second", {"source": source, "seed": 5,
                               "shuffle_buffer": 40, "interleave": 3})
        assert read_epoch(srv.url, "second", 0) == reference
        assert shard_bytes(proxy) == 0
        assert proxy.count(method="HEAD", path=SHARD) == 8
        # cache=off: this job reads the store.
        proxy.reset_counters()
        srv.put_job("direct", {"source": source, "seed": 5,
                               "shuffle_buffer": 40, "interleave": 3,
                               "cache": "off"})
        assert read_epoch(srv.url, "direct", 0) == reference
        # (and some of epoch 1, which the server prefetches)
        assert shard_bytes(proxy) >= total

        st = srv.json("/v1/jobs/train")["cache"]
        assert st["enabled"] is True
        assert st["entries"] == 8 and st["bytes"] == total
        # (an open is a hit when the entry was complete: epoch 1's
        # prefetch may open shards while epoch 0's fills still run)
        assert st["misses"] >= 8 and st["hits"] >= 8
        assert st["hit_bytes"] >= total
        assert srv.json("/v1/jobs/direct")["cache"]["enabled"] is False
        server = srv.json("/v1/jobs")["cache"]
        assert server["entries"] == 8 and server["store_bytes"] == total
        assert server["used_bytes"] == total
        assert srv.metric("shardcast_cache_store_bytes_total") == total
        assert srv.metric("shardcast_cache_entries") == 8
        assert srv.metric("shardcast_cache_budget_bytes") == 1 << 30
    finally:
        srv.stop()


def test_s3_listing_and_memory_cache(s3, dataset):
    """A listed S3 prefix (sizes from the listing, the validator from the
    fill) with the cache in memory (no state dir)."""
    manifest = json.loads((Path(dataset) / "manifest.json").read_text())
    total = dataset_bytes(dataset)
    with FaultProxy(s3.endpoint) as proxy:
        env = clean_env({"AWS_ACCESS_KEY_ID": "S3RVER",
                         "AWS_SECRET_ACCESS_KEY": "S3RVER",
                         "AWS_REGION": "us-east-1",
                         "AWS_ENDPOINT_URL_S3": proxy.url})
        srv = Server("s3://data/train/", ["--cache-bytes", "512MiB"], env)
        try:
            proxy.reset_counters()
            e0 = read_epoch(srv.url, "train", 0)
            check_once(e0, manifest)
            assert shard_bytes(proxy) >= total
            proxy.reset_counters()
            assert read_epoch(srv.url, "train", 1) != e0
            assert shard_gets(proxy) == 0
            assert proxy.count(method="HEAD", path=SHARD) == 0
            proxy.reset_counters()
            srv.put_job("second", {"source": "s3://data/train/", "seed": 5,
                                   "shuffle_buffer": 40, "interleave": 3})
            assert read_epoch(srv.url, "second", 0) == e0
            # no shard GET; every entry checked by a HEAD
            assert shard_gets(proxy) == 0
            assert proxy.count(method="HEAD", path=SHARD) == \
                len(manifest["shards"])
        finally:
            srv.stop()


def test_restart_reuses_the_cache_and_a_changed_object_is_read_again(
        http_store, tmp_path):
    data, manifest, proxy = http_store
    state = tmp_path / "state"
    source = brace(proxy.url, 8)
    args = ["--cache-bytes", "1GiB", "--state-dir", str(state)]
    srv = Server(source, args)
    try:
        before = read_epoch(srv.url, "train", 0)
    finally:
        srv.stop()
    check_once(before, manifest)

    # Shard 3 is replaced by other content while the server is down.
    other = make_data(tmp_path / "other", 8, seed=99)
    time.sleep(1.1)  # a new Last-Modified second, so the ETag changes
    shutil.copy(tmp_path / "other" / "shard-000003.tar",
                data / "shard-000003.tar")
    new3 = {s["hash"] for s in other["samples"]
            if s["shard"] == "shard-000003.tar"}
    old3 = {s["hash"] for s in manifest["samples"]
            if s["shard"] == "shard-000003.tar"}

    srv = Server(source, args)
    try:
        proxy.reset_counters()
        after = read_epoch(srv.url, "train", 0)
        hashes = {h for _, h in after}
        assert not hashes & old3, "a changed shard was served from the cache"
        assert len(new3 & hashes) >= len(new3) - (WORLD - 1)
        # only the changed shard came from the store; the others were
        # checked (one HEAD each) and read from the cache
        assert shard_bytes(proxy) == \
            (data / "shard-000003.tar").stat().st_size
        assert proxy.count(method="HEAD", path=SHARD) == 8
        server = srv.json("/v1/jobs")["cache"]
        assert server["stale"] >= 1

        # While it runs: shard 5 changes; a new job sees the new bytes.
        time.sleep(1.1)
        shutil.copy(tmp_path / "other" / "shard-000005.tar",
                    data / "shard-000005.tar")
        new5 = {s["hash"] for s in other["samples"]
                if s["shard"] == "shard-000005.tar"}
        srv.put_job("later", {"source": source, "seed": 5,
                              "shuffle_buffer": 40, "interleave": 3})
        got = {h for _, h in read_epoch(srv.url, "later", 0)}
        old5 = {s["hash"] for s in manifest["samples"]
                if s["shard"] == "shard-000005.tar"}
        assert not got & old5
        assert len(got & new5) >= len(new5) - (WORLD - 1)  # even-drop
    finally:
        srv.stop()


def test_a_server_killed_mid_fill_leaves_nothing_corrupt(tmp_path):
    data = tmp_path / "data"
    manifest = make_data(data, 6, seed=33, size=60000)
    reference = local_order(data)
    state = tmp_path / "state"
    with serve_nginx(data, tmp_path) as base:
        # Shard 2's body stalls part-way: the server is killed while its
        # fill has written some bytes and not others.
        rules = [Rule.stall(seconds=30, after_bytes=700000, count=1,
                            method="GET", path="/shard-000002.tar")]
        with FaultProxy(base, rules=rules) as proxy:
            source = brace(proxy.url, 6)
            srv = Server(source, ["--cache-bytes", "1GiB",
                                  "--state-dir", str(state)])
            t = threading.Thread(
                target=lambda: _swallow(read_epoch, srv.url, "train", 0),
                daemon=True)
            t.start()
            deadline = time.time() + 30
            while time.time() < deadline and proxy.rules()[0]["fired"] < 1:
                time.sleep(0.05)
            assert proxy.rules()[0]["fired"] == 1
            time.sleep(0.5)
            srv.stop(signal.SIGKILL)
            t.join(timeout=30)
        cache = state / "cache"
        on_disk, metas = cache_files(cache)
        assert on_disk > 0
        # A complete entry torn as a crash of the machine could leave it
        # (its data shorter than its metadata says) is refused too.
        torn = None
        for m in cache.glob("*.meta"):
            text = m.read_text()
            if "complete 1" in text:
                torn = m.with_suffix(".data")
                break
        if torn is not None:
            os.truncate(torn, torn.stat().st_size // 2)

        with FaultProxy(base) as proxy:
            srv = Server(brace(proxy.url, 6),
                         ["--cache-bytes", "1GiB", "--state-dir", str(state)])
            try:
                got = read_epoch(srv.url, "train", 0)
                again = read_epoch(srv.url, "train", 1)
            finally:
                log = srv.stop()
        check_once(got, manifest)
        check_once(again, manifest)
        assert got == reference
        assert "event=cache_loaded" in log


def _swallow(fn, *a):
    try:
        fn(*a)
    except Exception:
        pass


def test_half_the_dataset_cached_keeps_a_stable_half(tmp_path):
    data = tmp_path / "data"
    manifest = make_data(data, 20, seed=44, size=8000)
    total = dataset_bytes(data)
    budget = total // 2
    state = tmp_path / "state"
    with serve_nginx(data, tmp_path) as base:
        with FaultProxy(base) as proxy:
            # No prefetch: each epoch's reads are counted in its own window.
            # One shard open at a time (no read-ahead, K = 1): an entry in
            # use is never evicted, so with shards read side by side which
            # half ends up cached after epoch 0 depended on the machine's
            # load (epoch 1 read 55-60% on a busy machine, then converged);
            # read one by one, the stable half is the cached one at once.
            srv = Server(brace(proxy.url, 20),
                         ["--cache-bytes", str(budget), "--prefetch", "false",
                          "--read-threads", "0", "--interleave", "1",
                          "--state-dir", str(state)])
            try:
                per_epoch, sidecar_gets, heads, evicted = [], [], [], []
                settled = None  # the first epoch after 0 that evicted nothing
                epoch = 0
                # Entries in use or filling cannot be evicted, so which
                # half epoch 0 leaves depends a little on the machine's
                # load and the subset may take a few epochs to settle:
                # read until an epoch evicts nothing, then one more.
                while epoch < 10 and (settled is None or epoch <= settled + 1):
                    before = srv.json("/v1/jobs")["cache"]["evictions"]
                    proxy.reset_counters()
                    check_once(read_epoch(srv.url, "train", epoch), manifest)
                    per_epoch.append(shard_bytes(proxy))
                    sidecar_gets.append(proxy.count(method="GET",
                                                    path=r"\.scidx$"))
                    heads.append(proxy.count(method="HEAD", path=SHARD))
                    server = srv.json("/v1/jobs")["cache"]
                    evicted.append(server["evictions"] - before)
                    assert server["used_bytes"] <= budget
                    assert cache_files(state / "cache")[0] <= budget
                    if settled is None and epoch > 0 and evicted[-1] == 0:
                        settled = epoch
                    epoch += 1
                st = srv.json("/v1/jobs/train")["cache"]
            finally:
                srv.stop()
    print("per epoch:", per_epoch, "evicted:", evicted, "HEADs:", heads)
    assert settled is not None, (per_epoch, evicted)
    assert per_epoch[0] == total
    # a brace pattern, no listing: the store is not asked for sidecars
    # (--index-sidecars-probe would)
    assert sidecar_gets == [0] * len(per_epoch), sidecar_gets
    # What a HEAD told the job is kept: once the subset has settled, an
    # epoch asks the store nothing about the shards the cache cannot take
    # (it asked about each one every epoch before).
    assert heads[settled + 1] == 0, heads
    largest = max(f.stat().st_size for f in Path(data).glob("*.tar"))
    for b in per_epoch[1:]:
        # a swap of an entry that was in use costs one more shard
        assert b <= 0.55 * total + largest, (per_epoch, total)
        assert b >= 0.40 * total, (per_epoch, total)
    # The same shards stay: once the subset has settled, epochs read the
    # same amount, about half.
    assert per_epoch[settled] == per_epoch[settled + 1], per_epoch
    assert per_epoch[settled + 1] <= 0.55 * total, (per_epoch, total)
    assert evicted[settled + 1] == 0, evicted
    assert st["entries"] >= 8


def test_fills_through_store_faults(s3, dataset, tmp_path):
    """SlowDown bursts, resets, truncated bodies, stalls and 503s while the
    cache fills: every sample intact, and the next epoch reads nothing."""
    manifest = json.loads((Path(dataset) / "manifest.json").read_text())
    rules = [Rule.slowdown(count=4), Rule.reset(after_bytes=30000, count=3),
             Rule.truncate(after_bytes=20000, count=2),
             Rule.stall(seconds=1.5, count=1), Rule.error(503, count=2)]
    with FaultProxy(upstream=s3.endpoint, rules=rules) as proxy:
        env = clean_env({"AWS_ACCESS_KEY_ID": "S3RVER",
                         "AWS_SECRET_ACCESS_KEY": "S3RVER",
                         "AWS_REGION": "us-east-1",
                         "AWS_ENDPOINT_URL_S3": proxy.url})
        srv = Server("s3://data/train/", ["--cache-bytes", "512MiB",
                                          "--state-dir",
                                          str(tmp_path / "state")], env)
        try:
            e0 = read_epoch(srv.url, "train", 0)
            check_once(e0, manifest)
            fired = [r["fired"] for r in proxy.rules()]
            proxy.reset_counters()
            check_once(read_epoch(srv.url, "train", 1), manifest)
            assert shard_bytes(proxy) == 0
            server = srv.json("/v1/jobs")["cache"]
            assert server["entries"] == len(manifest["shards"])
        finally:
            srv.stop()
    assert fired == [4, 3, 2, 1, 2], fired


def test_a_staged_first_pass_fills_the_subset_the_cache_keeps(s3, dataset,
                                                              tmp_path):
    """A cache of half the dataset and a first pass staged from a listing
    (sizes known): the first pass fills the cache with the objects its
    stable-subset policy keeps (the rest is staged in memory), so no later
    epoch evicts anything, and each reads the same half from the store."""
    manifest = json.loads((Path(dataset) / "manifest.json").read_text())
    total = dataset_bytes(Path(dataset))
    budget = total // 2
    with FaultProxy(upstream=s3.endpoint) as proxy:
        env = clean_env({"AWS_ACCESS_KEY_ID": "S3RVER",
                         "AWS_SECRET_ACCESS_KEY": "S3RVER",
                         "AWS_REGION": "us-east-1",
                         "AWS_ENDPOINT_URL_S3": proxy.url})
        srv = Server("s3://data/train/", ["--cache-bytes", str(budget),
                                          "--prefetch", "false",
                                          "--state-dir",
                                          str(tmp_path / "state")], env)
        try:
            per_epoch, evictions, planned = [], [], []
            for epoch in range(3):
                proxy.reset_counters()
                check_once(read_epoch(srv.url, "train", epoch), manifest)
                per_epoch.append(shard_bytes(proxy))
                cache = srv.json("/v1/jobs")["cache"]
                assert cache["used_bytes"] <= budget, cache
                evictions.append(cache["evictions"])
                planned.append(srv.json("/v1/jobs/train")["data_plane"]["plan_streams"])
        finally:
            srv.stop()
    # the first pass was the staged plan's (both ranks)
    assert planned[0] == WORLD, planned
    assert per_epoch[0] == total, per_epoch
    assert evictions == [0, 0, 0], (evictions, per_epoch)
    assert per_epoch[1] == per_epoch[2], per_epoch
    assert 0.45 * total <= per_epoch[1] <= 0.55 * total, (per_epoch, total)
