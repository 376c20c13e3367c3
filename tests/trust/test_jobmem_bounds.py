"""A job's memory and threads are bounded and given back (docs/configuration.md
"What a job costs").

- DELETE gives a job's memory back: a job at the 10^7-shard limit (10^6
  under a sanitizer) held about 1.1 GB after its DELETE, because its shard
  list was one malloc per URL and the freed chunks stayed in malloc's heap.
  Its list is now a few packed blocks and the server returns freed heap
  pages after a job is freed; the RSS goes back to where it was before the
  PUT. The source is a brace pattern of http:// names, which are not probed
  one by one: nothing is fetched.
- A mixed job's sources share one pool of reader threads: a mix of 256
  sources ran a thread (or two) per source, 519 and more. The mixed epoch
  is still exactly-once and its order is the independent reference's
  (tests/contract/reference.py), the same as with threads of its own.
"""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
sys.path.insert(0, os.path.join(HERE, "..", "contract"))

from server_testlib import (FramesStream,  # noqa: E402
                            get_json, make_dataset, request, sanitized,
                            stream_path, wait_for)
from reference import mix_order  # noqa: E402

ADMIN = "jobmem-admin-7d2e"
MIB = 1 << 20
# What the server may keep of a deleted job: allocator caches, nothing
# that grows with the job's shards.
RETURN_SLACK = 50 * MIB
# Threads one mixed epoch may add: its pool (SIO_MIX_THREADS_MAX, 16) and
# its feed's producer; two epochs of a job may be in flight
# (max_epochs 2), plus a margin for the cache and closer threads. A
# thread per source is 256 or more.
MIX_THREADS_SLACK = 2 * (16 + 2) + 8


@pytest.fixture
def server(start):
    env = None
    if sanitized():
        # ASan keeps up to 256 MiB of freed memory in its quarantine and
        # gives pages back only when told to: a smaller quarantine (it still
        # catches a use of what was freed last) and an immediate release
        # let the memory bound hold under ASan too.
        env = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
               ":quarantine_size_mb=16:allocator_release_to_os_interval_ms=0"}
    return start("--admin-token", ADMIN, env=env)


def rss(srv):
    return srv.proc_status("VmRSS") * 1024


def put_job(srv, name, body):
    st, _, data = request(srv, "/v1/jobs/" + name, method="PUT", token=ADMIN,
                          body=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json"})
    assert st in (200, 201), (st, data)


def wait_state(srv, name, want, timeout):
    got = wait_for(lambda: get_json(srv, "/v1/jobs/" + name)["state"] in want,
                   timeout)
    assert got, get_json(srv, "/v1/jobs/" + name)


def test_delete_gives_a_big_jobs_memory_back(server):
    n = 10 ** 6 if sanitized() else 10 ** 7
    digits = len(str(n - 1))
    # 33-byte URLs; port 9 on loopback: nothing is read from it
    source = "http://127.0.0.1:9/s-{%s..%d}.tar" % ("0" * digits, n - 1)
    before = rss(server)
    put_job(server, "big", {"source": source})
    wait_state(server, "big", ("ready",), 120)
    assert get_json(server, "/v1/jobs/big")["shards"] == n
    resolved = rss(server)
    if not sanitized():
        # The packed list: 16 bytes per shard plus its URL (before: 112
        # bytes per shard). The names are packed as they are expanded; the
        # peak adds a pointer per shard while the job's identity is hashed
        # (before: 1.1 GiB at 10^7, one malloc'd string per name twice).
        assert resolved - before < n * 64 + RETURN_SLACK, \
            "resolved: %d MiB over the idle server for %d shards" % (
                (resolved - before) // MIB, n)
        peak = server.proc_status("VmHWM") * 1024
        assert peak - before < n * 80 + RETURN_SLACK, \
            "peak: %d MiB over the idle server for %d shards" % (
                (peak - before) // MIB, n)
    st, _, _ = request(server, "/v1/jobs/big", method="DELETE", token=ADMIN)
    assert st == 204
    assert wait_for(lambda: request(server, "/v1/jobs/big")[0] == 404, 30)
    # The manager frees the job after the DELETE: wait for the memory to
    # come back (a state), then hold it to the bound.
    back = wait_for(lambda: rss(server) <= before + RETURN_SLACK, 60)
    after = rss(server)
    assert back, ("RSS before PUT %d MiB, resolved %d MiB, after DELETE %d MiB"
                  % (before // MIB, resolved // MIB, after // MIB))
    # The server still serves: a small job resolves after the big one went.
    put_job(server, "small", {"source": "http://127.0.0.1:9/t-{0..9}.tar"})
    wait_state(server, "small", ("ready",), 30)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """256 one-shard sources of 4 samples each."""
    d = str(tmp_path_factory.mktemp("jobmem") / "many")
    make_dataset(d, shards=256, per_shard=4, size=64, seed=27, prefix="many")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tar"))


def test_mix_of_256_sources_shares_a_bounded_thread_pool(server, many):
    per = 4
    body = {"seed": 11, "shuffle_buffer": 64, "interleave": 2,
            "sources": [{"name": "s%03d" % i, "source": p, "choose": per}
                        for i, p in enumerate(many)]}
    idle = server.proc_status("Threads")
    put_job(server, "mix256", body)
    wait_state(server, "mix256", ("ready",), 60)
    s = FramesStream(server, stream_path("mix256", 0, 0, 1))
    keys, peak = [], idle
    while True:
        smp = s.next_sample()
        if smp is None:
            break
        keys.append(smp["key"])
        peak = max(peak, server.proc_status("Threads"))
    s.close()
    assert s.outcome == "end", (s.outcome, s.trailer)
    assert peak <= idle + MIX_THREADS_SLACK, \
        "a mix of 256 sources ran %d threads (%d idle)" % (peak, idle)
    # exactly once, in the reference's order
    assert len(keys) == 256 * per and len(set(keys)) == len(keys)
    y, quotas = mix_order([([p], "choose", per, False) for p in many],
                          11, 0, 2, 64)
    assert quotas == [per] * 256
    assert keys == [smp[0] for _, _, smp in y]


def test_mix_threads_are_given_back_with_the_job(server, many):
    """A mixed epoch cut in the middle (its pool threads busy with the
    sources' readers) and its job deleted: every thread of the job ends."""
    body = {"seed": 5, "shuffle_buffer": 16, "interleave": 2,
            "sources": [{"name": "s%03d" % i, "source": p, "choose": 4}
                        for i, p in enumerate(many)]}
    idle = server.proc_status("Threads")
    put_job(server, "cut", body)
    wait_state(server, "cut", ("ready",), 60)
    s = FramesStream(server, stream_path("cut", 0, 0, 1))
    for _ in range(100):
        assert s.next_sample() is not None, (s.outcome, s.trailer)
    busy = server.proc_status("Threads")
    s.close()
    st, _, _ = request(server, "/v1/jobs/cut", method="DELETE", token=ADMIN)
    assert st == 204
    back = wait_for(lambda: server.proc_status("Threads") <= idle, 60)
    assert back, "threads: %d idle, %d while streaming, %d after DELETE" % (
        idle, busy, server.proc_status("Threads"))
