"""The replica set, from the server's side (docs/operations.md "Scale-out"): what a
replica says of itself (GET /v1/topology?job=, the identity in both stream
formats), a stream of another replica's part (replica=J: failover), and the
--peers check that makes a second server with the same --replica not ready.

The consumers here are raw HTTP readers (server_testlib.FramesStream) that
do their own failover, so the server's part is tested apart from the
clients (tests/integration/test_replica_failover.py and tests/cli cover those).
"""

import json
import os
import re
import signal
import tarfile
import threading
import time
from collections import Counter

import pytest

from shardcast_testlib import listen_port
from server_testlib import (FramesStream, Nginx, Server, get_json, make_dataset,
                            request, shard_url, stream_path, wait_for)

JOB = "train"


def free_port():
    return listen_port()


def replica_args(ds, j, r, port, peers=None, seed=None, source=None, extra=()):
    a = ["--job", JOB, "--source", source or ds, "--replica", str(j), "--replicas", str(r),
         "--port", str(port), "--shuffle-buffer", "64", "--interleave", "2"]
    if peers:
        a += ["--peers", ",".join(peers), "--peer-interval", "100ms"]
    if seed is not None:
        a += ["--seed", str(seed)]
    return a + list(extra)


@pytest.fixture(scope="module")
def rs_ds(tmp_path_factory):
    """12 shards x 60 samples of ~3 KB (720 samples)."""
    d = str(tmp_path_factory.mktemp("replicas"))
    make_dataset(d, shards=12, per_shard=60, size=3000, seed=25)
    return d


@pytest.fixture(scope="module")
def big_rs_ds(tmp_path_factory):
    """12 shards x 60 samples of ~150 KB (720 samples, ~110 MB): a share of
    a part (1/6 of it) is far more than the socket buffers hold, so a
    replica killed mid-share leaves its consumers mid-share."""
    d = str(tmp_path_factory.mktemp("replicas-big"))
    make_dataset(d, shards=12, per_shard=60, size=150000, seed=26)
    return d


def topology(srv, job=JOB):
    st, _, body = request(srv, "/v1/topology?job=" + job)
    return st, (json.loads(body) if st == 200 else body)


def test_topology_states_what_fixes_the_order(start, rs_ds):
    ports = [free_port(), free_port(), free_port()]
    a = start(*replica_args(rs_ds, 0, 2, ports[0]))
    b = start(*replica_args(rs_ds, 1, 2, ports[1]))
    c = start(*replica_args(rs_ds, 1, 2, ports[2], seed=5))
    ta, tb, tc = (wait_for(lambda s=s: topology(s)[0] == 200 and topology(s)[1], 30)
                  for s in (a, b, c))
    for t, j in ((ta, 0), (tb, 1), (tc, 1)):
        assert (t["replica"], t["replicas"]) == (j, 2)
        assert len(t["instance"]) == 16
        job = t["job"]
        assert job["name"] == JOB and len(job["fingerprint"]) == 32
        assert job["order"]["replicas"] == 2 and job["order"]["nshards"] == 12
        assert t["jobs"] == {JOB: job["fingerprint"]}
    # A set set up right: one fingerprint; another seed: another one, and
    # the order fields say which.
    assert ta["job"]["fingerprint"] == tb["job"]["fingerprint"]
    assert ta["job"]["order"] == tb["job"]["order"]
    assert tc["job"]["fingerprint"] != ta["job"]["fingerprint"]
    diff = {k for k in ta["job"]["order"] if ta["job"]["order"][k] != tc["job"]["order"][k]}
    assert diff == {"seed"}
    assert len({ta["instance"], tb["instance"], tc["instance"]}) == 3
    # The job's status says the same.
    st = get_json(a, "/v1/jobs/" + JOB)
    assert st["replicas"]["fingerprint"] == ta["job"]["fingerprint"]
    assert (st["replicas"]["replica"], st["replicas"]["replicas"]) == (0, 2)
    # Unknown and malformed job names.
    assert request(a, "/v1/topology?job=nope")[0] == 404
    assert request(a, "/v1/topology?job=a/b")[0] == 400
    assert request(a, "/v1/topology?job=")[0] == 400


def read_frames(srv, path):
    s = FramesStream(srv, path)
    try:
        assert s.status == 200, s.error_body
        return s.read_all(), s.outcome, s.header
    finally:
        s.close()


def read_tar_ident(srv, path):
    st, _, body = request(srv, path)
    assert st == 200, body
    import io
    with tarfile.open(fileobj=io.BytesIO(body), mode="r|") as tf:
        keys = [ti.pax_headers["SHARDCAST.key"] for ti in tf
                if "SHARDCAST.key" in ti.pax_headers]
        return keys, dict(tf.pax_headers)


def test_any_replica_serves_any_part(start, rs_ds):
    """replica=J: the same samples in the same order as replica J itself
    serves, and the header says whose part it is and who served it."""
    a = start(*replica_args(rs_ds, 0, 3, free_port()))
    b = start(*replica_args(rs_ds, 1, 3, free_port()))
    fp = wait_for(lambda: topology(a)[0] == 200 and topology(a)[1]["job"]["fingerprint"], 30)
    for epoch in (0, 1):
        for rank, world in ((0, 2), (1, 2)):
            own, o1, h1 = read_frames(b, stream_path(JOB, epoch, rank, world))
            path = stream_path(JOB, epoch, rank, world) + "&replica=1"
            other, o2, h2 = read_frames(a, path)
            assert o1 == o2 == "end"
            assert len(own) > 50
            assert other == own
            assert (h1["replica"], h1["replicas"], h1["served_by"]) == (1, 3, 1)
            assert (h2["replica"], h2["replicas"], h2["served_by"]) == (1, 3, 0)
            assert h1["fingerprint"] == h2["fingerprint"] == fp
        # From the middle of a share (a consumer that failed over).
        own, _, _ = read_frames(b, stream_path(JOB, epoch, 0, 2))
        mid, outcome, h = read_frames(
            a, stream_path(JOB, epoch, 0, 2, start=17) + "&replica=1")
        assert outcome == "end" and mid == own[17:] and h["start"] == 17
    # The tar stream says the same in its pax global header.
    keys_b, id_b = read_tar_ident(b, stream_path(JOB, 0, 0, 2, fmt="tar"))
    keys_a, id_a = read_tar_ident(a, stream_path(JOB, 0, 0, 2, fmt="tar") + "&replica=1")
    assert keys_a == keys_b and len(keys_a) > 50
    assert id_b["SHARDCAST.fingerprint"] == id_a["SHARDCAST.fingerprint"] == fp
    assert (id_a["SHARDCAST.replica"], id_a["SHARDCAST.served_by"]) == ("1", "0")
    assert (id_b["SHARDCAST.replica"], id_b["SHARDCAST.served_by"]) == ("1", "1")
    # The parts of the three replicas are disjoint.
    parts = [read_frames(a, stream_path(JOB, 0, 0, 1) + "&replica=%d" % j)[0]
             for j in range(3)]
    keys = [s["key"] for p in parts for s in p]
    assert len(keys) == len(set(keys)) == 720
    # Counted as failover streams, in status and metrics.
    st = get_json(a, "/v1/jobs/" + JOB)
    assert st["replicas"]["failover_streams"] >= 8
    _, _, m = request(a, "/metrics")
    assert b'shardcast_failover_streams_total{shardcast_job="train"}' in m
    assert "event=failover_stream" in a.wait_log("event=failover_stream")


def test_replica_parameter_is_bounded(start, rs_ds):
    a = start(*replica_args(rs_ds, 0, 2, free_port()))
    single = start("--job", JOB, "--source", rs_ds)
    wait_for(lambda: topology(a)[0] == 200, 30)
    base = stream_path(JOB, 0, 0, 1)
    for srv, q, why in ((a, "&replica=2", b"not a replica of this set"),
                        (single, "&replica=1", b"not a replica of this set"),
                        (a, "&replica=-1", b"replica must be an integer"),
                        (a, "&replica=1x", b"replica must be an integer"),
                        (a, "&replica=99999999999", b"replica must be an integer"),
                        (a, "&replica=0&replica=1", b"duplicated parameter replica")):
        st, _, body = request(srv, base + q)
        assert st == 400 and why in body, (q, st, body)
    # replica=0 on a single server is its own part.
    st, _, _ = request(single, base + "&replica=0")
    assert st == 200


def ready(srv):
    return request(srv, "/readyz")


def test_two_servers_with_one_replica_number_are_not_ready(start, rs_ds):
    """The first repro of the issue, from the servers' side: two servers
    both started as --replica 0 --replicas 2 see each other through
    --peers, log it and report not ready; once one runs as replica 1 both
    are ready again."""
    pa, pb = free_port(), free_port()
    peers = ["http://127.0.0.1:%d" % pa, "http://127.0.0.1:%d" % pb]
    a = start(*replica_args(rs_ds, 0, 2, pa, peers))
    b = start(*replica_args(rs_ds, 0, 2, pb, peers))
    for srv in (a, b):
        st = wait_for(lambda srv=srv: ready(srv)[0] == 503 and ready(srv), 30)
        assert st, srv.log()
        assert b"replica conflict" in st[2] and b"also serves replica 0 of 2" in st[2]
        log = srv.wait_log("event=peer_state", "state=conflict")
        assert "event=peer_state" in log and "state=conflict" in log, log[-3000:]
        _, _, m = request(srv, "/metrics")
        assert re.search(rb'shardcast_peers\{state="conflict"\} [12]\n', m), m
        # The topology's peer states are the peer checker's: wait for them.
        assert wait_for(lambda srv=srv: "conflict" in
                        [p["state"] for p in topology(srv)[1]["peers"]], 60), \
            topology(srv)
    # b is where --peers says replica 1 answers: it sees itself there.
    assert wait_for(lambda: [p["state"] for p in topology(b)[1]["peers"]] ==
                    ["conflict", "conflict"], 60), topology(b)
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(30) == 0
    b2 = start(*replica_args(rs_ds, 1, 2, pb, peers))
    for srv in (a, b2):
        assert wait_for(lambda srv=srv: ready(srv)[0] == 200, 30), srv.log()
    # Ready (no conflict) comes before the next round of peer checks has
    # seen replica 0: wait for the states themselves.
    assert wait_for(lambda: [p["state"] for p in topology(b2)[1]["peers"]] ==
                    ["ok", "self"], 60), topology(b2)


def test_peers_that_disagree_are_reported(start, rs_ds):
    """Another seed on one replica: a mismatch in /v1/topology and the log,
    the servers stay ready (a rolling update passes through this; the
    clients refuse such a set)."""
    pa, pb = free_port(), free_port()
    peers = ["http://127.0.0.1:%d" % pa, "http://127.0.0.1:%d" % pb]
    a = start(*replica_args(rs_ds, 0, 2, pa, peers))
    start(*replica_args(rs_ds, 1, 2, pb, peers, seed=5))

    def mismatch():
        t = topology(a)[1]
        return t["peers"][1]["state"] == "mismatch" and t["peers"][1]
    p = wait_for(mismatch, 30)
    assert p, topology(a)[1]
    assert "job train: fingerprint" in p["detail"]
    assert ready(a)[0] == 200
    assert "state=mismatch" in a.wait_log("state=mismatch")


def test_peers_setting_is_checked(server_binary, workdir, rs_ds):
    import subprocess
    for peers, why in (("http://a:1", "lists 1 URLs for --replicas 2"),
                       ("http://a:1,http://b:1,http://c:1", "more than --replicas 2"),
                       ("http://a:1,http://a:1", "names http://a:1 twice"),
                       ("ftp://a:1,http://b:1", "not an http(s)://host[:port] URL"),
                       ("http://a:{j}?x=1", "not an http(s)://host[:port] URL"),
                       ("http://a-{j}:1,http://b:1", "not both")):
        p = subprocess.run([server_binary, "--job", JOB, "--source", rs_ds, "--replica", "0",
                            "--replicas", "2", "--peers", peers, "--port", "0"],
                           capture_output=True, timeout=30)
        assert p.returncode != 0 and why.encode() in p.stderr, (peers, p.stderr)


# -- failover: a replica killed mid-epoch -------------------------------------

def _consume(servers, home, world_local, rank, epoch, got, stalls, errors, gate):
    """One consumer: its share of part `home` from servers[home], then from
    the others in turn (replica=home) at the position it reached whenever
    a stream breaks."""
    pos, attempt, last = 0, 0, None
    order = [home] + [(home + 1 + (rank + i) % (len(servers) - 1)) % len(servers)
                      for i in range(len(servers) - 1)]
    while attempt < 60:
        srv = servers[order[attempt % len(order)]]
        attempt += 1
        try:
            s = FramesStream(srv, stream_path(JOB, epoch, rank, world_local, start=pos)
                             + "&replica=%d" % home, timeout=30)
        except OSError:
            time.sleep(0.1)
            continue
        if s.status != 200:
            s.close()
            time.sleep(0.2)
            continue
        while True:
            smp = s.next_sample()
            if s.header is not None and s.header["replica"] != home:
                errors.append("part %d asked, %r served" % (home, s.header))
                s.close()
                return
            if smp is None:
                break
            now = time.monotonic()
            if last is not None:
                stalls.append(now - last)
            last = now
            assert smp["position"] == pos
            got.append((smp["index"], smp["key"], smp["hash"]))
            pos += 1
            gate(len(got))
        s.close()
        if s.outcome == "end":
            return
    errors.append("consumer %d of part %d did not finish" % (rank, home))


def _failover_run(servers, ports, epoch, kill, W_local=2):
    R = len(ports)
    for s in servers:
        assert wait_for(lambda s=s: topology(s)[0] == 200, 60), s.log()
    got = {(j, r): [] for j in range(R) for r in range(W_local)}
    stalls = {k: [] for k in got}
    errors = []
    progressed = threading.Event()
    counts = Counter()
    lock = threading.Lock()
    holds = threading.Event()

    def gate_for(key):
        def gate(n):
            with lock:
                counts[key] = n
                if len(counts) == len(got) and min(counts.values()) >= 20:
                    progressed.set()
            if key[0] == kill and n >= 20:
                # the doomed part's consumers wait (mid-epoch) for the kill
                holds.wait(60)
        return gate

    def consume(*a):
        try:
            _consume(*a)
        except Exception as e:  # reported by the test, not lost in a thread
            errors.append("consumer %r: %r" % (a[1:4], e))
            progressed.set()

    threads = [threading.Thread(target=consume,
                                args=(servers, j, W_local, r, epoch, got[(j, r)],
                                      stalls[(j, r)], errors, gate_for((j, r))))
               for (j, r) in got]
    for t in threads:
        t.start()
    assert progressed.wait(120), ("no progress", dict(counts))
    assert not errors, errors
    servers[kill].proc.send_signal(signal.SIGKILL)
    servers[kill].proc.wait(30)
    holds.set()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    return servers, got, stalls


def _check_exactly_once(start, got, ref_args, epoch, W_local, total):
    """Each consumer got exactly its share of its part (as a fresh replica
    of that part serves it), and all of them together every sample once."""
    for j, a in enumerate(ref_args):
        ref = start(*a)
        assert wait_for(lambda: topology(ref)[0] == 200, 60)
        for r in range(W_local):
            want, outcome, _ = read_frames(ref, stream_path(JOB, epoch, r, W_local))
            assert outcome == "end"
            assert got[(j, r)] == [(s["index"], s["key"], s["hash"]) for s in want], (j, r)
        ref.proc.send_signal(signal.SIGTERM)
        ref.proc.wait(30)
    keys = [k for v in got.values() for _, k, _ in v]
    dup = [k for k, n in Counter(keys).items() if n > 1]
    assert not dup, dup[:10]
    # even-drop: each part drops at most (its local world - 1) samples
    assert total - len(ref_args) * (W_local - 1) <= len(keys) <= total


def test_failover_after_sigkill_exactly_once(start, server_binary, workdir, big_rs_ds):
    """R = 3, two consumers per part; replica 1 is SIGKILLed while its
    consumers are mid-epoch and not restarted: they finish from the other
    replicas, exactly once, and the longest gap between two samples of any
    consumer is printed."""
    ports = [free_port() for _ in range(3)]
    servers = [Server(server_binary, replica_args(big_rs_ds, j, 3, ports[j]), workdir)
               for j in range(3)]
    try:
        t0 = time.monotonic()
        _, got, stalls = _failover_run(servers, ports, 0, kill=1)
        worst = max(max(v) if v else 0 for k, v in stalls.items() if k[0] == 1)
        print("failover: longest stall of a consumer of the killed replica %.3f s "
              "(run %.1f s)" % (worst, time.monotonic() - t0))
        failovers = sum(get_json(s, "/v1/jobs/" + JOB)["replicas"]["failover_streams"]
                        for j, s in enumerate(servers) if j != 1)
        assert failovers >= 2
    finally:
        for s in servers:
            s.stop()
    # The reference: a fresh server for each part, the same settings.
    _check_exactly_once(start, got, [replica_args(big_rs_ds, j, 3, free_port()) for j in range(3)],
                        0, 2, 720)


def test_failover_through_a_faulty_store(start, server_binary, big_rs_ds, workdir):
    """The same with the shards read over HTTP through the fault proxy
    (5xx and resets on the store side of every replica)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "support"))
    from faultproxy import FaultProxy, Rule
    ng = Nginx(big_rs_ds, workdir)
    try:
        upstream = "http://127.0.0.1:%d" % ng.port
        with FaultProxy(upstream=upstream, seed=7,
                        rules=[Rule.error(503, probability=0.15, path=r"\.tar$"),
                               Rule.reset(after_bytes=40000, probability=0.3,
                                          path=r"\.tar$")]) as px:
            src = shard_url(ng, big_rs_ds).replace(upstream, px.url)
            ports = [free_port() for _ in range(3)]
            servers = [Server(server_binary,
                              replica_args(big_rs_ds, j, 3, ports[j], source=src,
                                           extra=["--fetch-retries", "30",
                                                  "--fetch-retry-max-ms", "200"]),
                              workdir) for j in range(3)]
            try:
                _, got, stalls = _failover_run(servers, ports, 2, kill=2)
                worst = max(max(v) if v else 0 for k, v in stalls.items() if k[0] == 2)
                faults = px.counters()
                print("failover through a faulty store: longest stall %.3f s, proxy %s"
                      % (worst, json.dumps(faults)[:300]))
                assert sum(r["fired"] for r in px.rules()) > 0
            finally:
                for s in servers:
                    s.stop()
        _check_exactly_once(start, got, [replica_args(big_rs_ds, j, 3, free_port())
                                         for j in range(3)], 2, 2, 720)
    finally:
        ng.stop()


def test_mixed_jobs_are_refused_on_a_replica_set(server_binary, start, rs_ds):
    """A mixed job's epoch is one sequence drawn from every source: a set
    of R > 1 replicas refuses it at start (config) and at PUT (400), with
    the reason; docs/operations.md "Scale-out" says the same."""
    import subprocess
    p = subprocess.run([server_binary, "--job", "m", "--source", rs_ds, "--epoch-size", "100",
                        "--replica", "1", "--replicas", "2", "--port", "0"],
                       capture_output=True, timeout=30)
    assert p.returncode != 0
    assert b"a mixed job (\"sources\" or \"epoch_size\") cannot be split over --replicas 2" \
        in p.stderr
    srv = start("--admin-token", "adm-token-1", "--replica", "1", "--replicas", "2",
                "--port", str(free_port()))
    body = json.dumps({"sources": [{"name": "a", "source": rs_ds, "weight": 1}]}).encode()
    st, _, out = request(srv, "/v1/jobs/m", method="PUT", token="adm-token-1", body=body)
    assert st == 400 and b"cannot be split over --replicas 2" in out, (st, out)
    st, _, out = request(srv, "/v1/jobs/p", method="PUT", token="adm-token-1",
                         body=json.dumps({"source": rs_ds}).encode())
    assert st == 201, out
