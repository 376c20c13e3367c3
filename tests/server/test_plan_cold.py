"""Cold reads of planned streams go to the warm threads
(docs/architecture.md "The data plane").

test_samples_not_in_the_page_cache_are_read_off_the_http_threads: a
dataset of small (2 KiB) and large (96 KiB) samples whose files are
evicted from the page cache (posix_fadvise DONTNEED, checked with
RWF_NOWAIT) before a planned epoch is read by two ranks. Each rank's
share is, sample for sample, the feed's (a --data-plane stream server),
and shardcast_plan_cold_reads_total counts the samples whose bytes the
warm threads read (the serving threads asked with RWF_NOWAIT and did not
wait for the disk).

test_cache_entries_not_in_the_page_cache_are_read_off_the_http_threads:
the same shards over HTTP (nginx) with a shard cache: epoch 0 fills the
cache, its files are evicted, and the planned epoch 1 read from the
cache entries gets the feed's shares, its cold reads counted.
"""

import io
import os
import random
import tarfile

import pytest

from plan_testlib import keys_fields
from plan_testlib import read_world as plan_read_world
from server_testlib import Nginx, get_json, request, wait_for

SHARDS = 6
PER_SHARD = 40
WORLD = 2


def make_dataset(path, seed):
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    files = []
    for s in range(SHARDS):
        p = os.path.join(path, "c-%06d.tar" % s)
        with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as tf:
            for g in range(PER_SHARD):
                key = "c%02d/%05d" % (s, g)
                size = 96 * 1024 if rng.random() < 0.5 else 2048
                for ext, data in (("bin", rng.randbytes(size)),
                                  ("cls", b"%d" % rng.randrange(10))):
                    ti = tarfile.TarInfo("%s.%s" % (key, ext))
                    ti.size = len(data)
                    ti.mtime = 0
                    tf.addfile(ti, io.BytesIO(data))
        files.append(p)
    return files


def evict(files):
    """Drop the files' pages from the page cache; True when a read that
    must not wait finds the first page gone."""
    gone = bool(files)
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            try:
                os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
                gone = False
            except BlockingIOError:
                pass
        finally:
            os.close(fd)
    return gone


def serve(start, source, plane, *extra):
    return start("--job", "t", "--source", source, "--data-plane", plane,
                 "--prefetch", "false", "--stream-rate-limit", "0",
                 "--rate-limit", "0", "--max-new-epochs-per-minute", "0",
                 *extra)


def require_nowait():
    if not hasattr(os, "RWF_NOWAIT"):
        pytest.skip("this Python has no os.RWF_NOWAIT to check eviction")


def read_world(srv, epoch, world=WORLD):
    return [keys_fields(p) for p in plan_read_world(srv, epoch, world,
                                                     timeout=300)]


def metric(srv, name):
    st, _, body = request(srv, "/metrics")
    assert st == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("%s not exported" % name)


def test_samples_not_in_the_page_cache_are_read_off_the_http_threads(
        start, tmp_path):
    require_nowait()
    files = make_dataset(str(tmp_path / "ds"), 99)
    path = os.path.dirname(files[0])
    feed = serve(start, path, "stream")
    want = read_world(feed, 1)
    srv = serve(start, path, "auto")
    read_world(srv, 0)  # the first pass indexes the shards
    before = metric(srv, "shardcast_plan_cold_reads_total")
    assert wait_for(lambda: evict(files), 60), \
        "the page cache kept the files after DONTNEED"
    got = read_world(srv, 1)
    for r in range(WORLD):
        assert got[r] == want[r], "rank %d differs from the feed's share" % r
    cold = metric(srv, "shardcast_plan_cold_reads_total") - before
    assert cold > 0, "no cold read went to the warm threads"
    assert metric(srv, "shardcast_plan_cold_read_bytes_total") > 0


def test_cache_entries_not_in_the_page_cache_are_read_off_the_http_threads(
        start, tmp_path):
    require_nowait()
    files = make_dataset(str(tmp_path / "ds"), 98)
    path = os.path.dirname(files[0])
    ng = Nginx(path, str(tmp_path))
    try:
        src = "http://127.0.0.1:%d/c-{000000..%06d}.tar" % (ng.port,
                                                            SHARDS - 1)
        cache = str(tmp_path / "cache")
        want = read_world(serve(start, src, "stream"), 1)
        srv = serve(start, src, "auto", "--cache-bytes", "1GiB",
                    "--cache-dir", cache)
        read_world(srv, 0)  # fills the cache
        # Every entry complete (its fill synced, which may come after the
        # streams' END) before its pages are dropped: a fill still writing
        # puts them back. Eviction itself is waited for (a reader of the
        # server's may still touch a file once).
        assert wait_for(lambda: get_json(srv, "/v1/jobs")["cache"]["complete"] == SHARDS,
                        60), get_json(srv, "/v1/jobs")["cache"]
        before = metric(srv, "shardcast_plan_cold_reads_total")
        entries = [os.path.join(d, f) for d, _, fs in os.walk(cache)
                   for f in fs if os.path.getsize(os.path.join(d, f)) > 65536]
        assert wait_for(lambda: evict(entries), 60), "the page cache kept the cache files"
        got = read_world(srv, 1)
        for r in range(WORLD):
            assert got[r] == want[r], "rank %d differs from the feed's" % r
        assert metric(srv, "shardcast_plan_cold_reads_total") > before, (
            "no cold read of a cache entry went to the warm threads")
    finally:
        ng.stop()
