"""The server's API around the streams: status JSON, missing consumers,
jobs from a config file and through PUT/DELETE, auth, secrets, readiness,
rate limits, bad requests, metrics (checked by promtool), topology and
settings."""

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

from server_testlib import (FramesStream, get_json, make_dataset, read_share, request,
                            stream_path, wait_for)

ADMIN = "adm1n-7f3c9d0e1b"
CONSUMER = "c0nsumer-58a2e4"


def test_status_json_shape(start, small_ds):
    # The feed's window fields are asserted: the first pass on the feed.
    srv = start("--job", "train", "--source", small_ds.path, "--seed", "2",
                "--data-plane", "stream")
    samples, outcome, trailer = read_share(srv, "train", 0, 0, 1)
    assert outcome == "end" and trailer["samples"] == small_ds.total == len(samples)
    jobs = get_json(srv, "/v1/jobs")
    assert [j["name"] for j in jobs["jobs"]] == ["train"]
    assert set(jobs["fetch"]) >= {"requests", "retries", "throttles", "errors"}
    st = get_json(srv, "/v1/jobs/train")
    assert st["state"] == "ready" and st["shards"] == 5
    assert st["settings"]["seed"] == 2 and st["settings"]["partition"] == "even-drop"
    assert st["totals"]["samples_sent"] == small_ds.total
    assert st["totals"]["streams_opened"] == 1
    assert set(st["throughput"]) == {"samples_per_s", "mb_per_s", "window_s"}
    assert set(st["fetch"]) >= {"requests", "retries", "throttles", "errors", "bytes"}
    assert st["skipped"] == {"shards": 0, "samples": 0}
    assert st["errors"] == []
    e0 = [e for e in st["epochs"] if e["epoch"] == 0]
    assert len(e0) == 1
    e = e0[0]
    assert e["ended"] and not e["failed"] and e["produced"] == small_ds.total
    assert set(e["window"]) == {"lo", "samples", "bytes", "max_samples", "max_bytes"}
    for key in ("consumers", "missing", "lagging", "missing_count", "lagging_count",
                "attached", "shards_done"):
        assert key in e
    # Epoch 0 was read to its end: epoch 1 is prefetched.
    assert wait_for(lambda: any(x["epoch"] == 1 and x["prefetched"]
                                for x in get_json(srv, "/v1/jobs/train")["epochs"]), 60), \
        get_json(srv, "/v1/jobs/train")["epochs"]
    st, _, body = request(srv, "/v1/jobs/nope")
    assert st == 404


def test_missing_and_lagging_consumers_are_visible(start, medium_ds):
    # Missing and lagging consumers are the feed's (its window): on the feed.
    srv = start("--job", "train", "--source", medium_ds.path, "--window-samples", "64",
                "--join-timeout-ms", "60000", "--data-plane", "stream")
    # Rank 0 of 3 reads a little and stops reading; ranks 1 and 2 never come.
    s = FramesStream(srv, stream_path("train", 0, 0, 3))
    got = s.read_all(limit=5)
    assert len(got) == 5

    def epoch0():
        st = get_json(srv, "/v1/jobs/train")
        return [e for e in st["epochs"] if e["epoch"] == 0][0], st

    e, st = epoch0()
    missing = sorted((m["rank"], m["world"]) for m in e["missing"])
    assert missing == [(1, 3), (2, 3)]
    assert e["missing_count"] == 2 and st["consumers_missing"] == 2
    states = {c["rank"]: c["state"] for c in e["consumers"]}
    assert states[1] == states[2] == "missing"
    assert states[0] in ("streaming", "lagging")
    assert {m["state"] for m in e["missing"]} == {"never-attached"}
    st_, _, metrics = request(srv, "/metrics")
    assert 'shardcast_consumers_missing{shardcast_job="train"} 2' in metrics.decode()
    s.close()
    # Rank 0 went away: within its rejoin grace it is missing too, and
    # status tells a disconnected consumer from one that never came.
    deadline = time.time() + 60
    while True:
        e, st = epoch0()
        states = {c["rank"]: c["state"] for c in e["consumers"]}
        if states.get(0) == "disconnected" or time.time() > deadline:
            break
        time.sleep(0.1)
    assert states[0] == "disconnected"
    assert {m["rank"]: m["state"] for m in e["missing"]} == {
        0: "disconnected", 1: "never-attached", 2: "never-attached"}


def test_lagging_consumer_is_marked(start, medium_ds):
    # The feed's lag: on the feed.
    srv = start("--job", "train", "--source", medium_ds.path, "--window-samples", "64",
                "--lag-samples", "32", "--data-plane", "stream")
    fast = FramesStream(srv, stream_path("train", 0, 0, 2))
    slow = FramesStream(srv, stream_path("train", 0, 1, 2))
    slow.read_all(limit=1)
    # Rank 0 reads all it can: the window fills up to rank 1's place + 64,
    # then rank 0 waits for rank 1, which does not read.
    def drain():
        try:
            fast.read_all()
        except Exception:  # noqa: BLE001
            pass  # the test closes the connection under the reader

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def lagging():
        e = [e for e in get_json(srv, "/v1/jobs/train")["epochs"] if e["epoch"] == 0][0]
        return e if [(c["rank"], c["world"]) for c in e["lagging"]] == [(1, 2)] else None

    # Rank 0 catches up with the window (it is then waiting, not lagging).
    e = wait_for(lagging, 60)
    assert e, "rank 1 alone must be marked lagging"
    states = {c["rank"]: c["state"] for c in e["consumers"]}
    assert states == {0: "streaming", 1: "lagging"}
    fast.close()
    reader.join(10)
    slow.close()


def test_jobs_from_config_file_and_api(start, small_ds, workdir):
    other = os.path.join(workdir, "cfg-other")
    ds2 = make_dataset(other, shards=2, per_shard=10, size=500, seed=9, prefix="o")
    cfg = os.path.join(workdir, "shardcast-config.json")
    with open(cfg, "w") as f:
        json.dump({"max_epochs": 3, "jobs": [
            {"name": "a", "source": small_ds.path, "seed": 1, "shuffle_buffer": 50},
            {"name": "b", "source": other, "partition": "none", "fields": ["cls"]},
        ]}, f)
    srv = start("--config", cfg, env={"SHARDCAST_ADMIN_TOKEN": ADMIN})
    a, oa, _ = read_share(srv, "a", 0, 0, 1)
    b, ob, _ = read_share(srv, "b", 0, 0, 1)
    assert oa == ob == "end" and len(a) == small_ds.total and len(b) == 20
    assert get_json(srv, "/v1/jobs/b")["settings"]["fields"] == "cls"
    assert get_json(srv, "/v1/settings", token=ADMIN)["max-epochs"] == 3

    auth = {"token": ADMIN}
    spec = json.dumps({"source": other, "seed": 5, "interleave": 2})
    st, _, body = request(srv, "/v1/jobs/c", "PUT", body=spec, **auth)
    assert st == 201, body
    # A job put through the API resolves its source in the background
    # (streams meanwhile get 503 with Retry-After): wait until it is ready.
    assert wait_for(lambda: get_json(srv, "/v1/jobs/c")["state"] == "ready", 60)
    c1, oc, _ = read_share(srv, "c", 0, 0, 1)
    assert oc == "end" and len(c1) == 20
    st, _, body = request(srv, "/v1/jobs/c", "PUT", body=spec, **auth)
    assert st == 200 and json.loads(body)["result"] == "unchanged"
    st, _, body = request(srv, "/v1/jobs/c", "PUT",
                          body=json.dumps({"source": other, "seed": 6}), **auth)
    assert st == 200 and json.loads(body)["result"] == "replaced"
    assert get_json(srv, "/v1/jobs/c")["settings"]["seed"] == 6
    assert wait_for(lambda: get_json(srv, "/v1/jobs/c")["state"] == "ready", 60)
    c2, _, _ = read_share(srv, "c", 0, 0, 1)
    assert sorted(x["key"] for x in c2) == sorted(x["key"] for x in c1)
    assert [x["key"] for x in c2] != [x["key"] for x in c1], "the seed must change the order"

    bad = [
        (b"{", 400, "invalid JSON"),
        (b'{"source": "/x", "sed": 1}', 400, 'unknown key "sed"'),
        (b'{"source": "/x", "interleave": 0}', 400, "interleave"),
        (b'{"source": "/x", "partition": "random"}', 400, "partition"),
        (b'{"name": "zz", "source": "/x"}', 400, "differs"),
        (b'{"seed": 1}', 400, 'missing "source"'),
        (b" " * (200 * 1024), 413, "larger than"),
    ]
    for body, status, needle in bad:
        st, _, got = request(srv, "/v1/jobs/c", "PUT", body=body, **auth)
        assert st == status and needle in got.decode(), (body[:40], st, got)
    st, _, got = request(srv, "/v1/jobs/bad%20name", "PUT", body=spec, **auth)
    assert st == 400
    st, _, _ = request(srv, "/v1/jobs/c", "DELETE", **auth)
    assert st == 204
    st, _, _ = request(srv, stream_path("c", 0, 0, 1))
    assert st == 404
    st, _, _ = request(srv, "/v1/jobs/c", "DELETE", **auth)
    assert st == 404
    # A job with a missing source is created, fails for good and says why:
    # its streams get a non-retryable 422 (tests/trust/test_spec_bounds.py).
    st, _, _ = request(srv, "/v1/jobs/d", "PUT", body=json.dumps(
        {"source": os.path.join(workdir, "no-such-dir")}), **auth)
    assert st == 201
    assert wait_for(lambda: get_json(srv, "/v1/jobs/d")["state"] == "failed", 60), \
        get_json(srv, "/v1/jobs/d")
    st, hdrs, body = request(srv, stream_path("d", 0, 0, 1))
    assert st == 422 and "no-such-dir" in body.decode() and "retry-after" not in hdrs
    assert srv.alive()


def test_deleting_a_job_cuts_its_streams(start, medium_ds):
    srv = start("--job", "train", "--source", medium_ds.path, "--window-samples", "32",
                "--admin-token", ADMIN)
    s = FramesStream(srv, stream_path("train", 0, 0, 2))
    s.read_all(limit=3)
    st, _, _ = request(srv, "/v1/jobs/train", "DELETE", token=ADMIN)
    assert st == 204
    s.read_all()
    assert s.outcome == "error" and s.trailer["reason"] == "job deleted"
    s.close()


def test_auth(start, small_ds):
    srv = start("--job", "train", "--source", small_ds.path,
                env={"SHARDCAST_TOKEN": CONSUMER, "SHARDCAST_ADMIN_TOKEN": ADMIN})
    path = stream_path("train", 0, 0, 1)
    for token in (None, "wrong", CONSUMER + "x", CONSUMER[:-1]):
        st, hdrs, body = request(srv, path, token=token)
        assert st == 401, (token, st)
        assert hdrs.get("www-authenticate", "").startswith("Bearer")
        st, _, _ = request(srv, "/v1/jobs", token=token)
        assert st == 401
    st, _, _ = request(srv, path, headers={"Authorization": "Basic " + CONSUMER})
    assert st == 401
    samples, outcome, _ = read_share(srv, "train", 0, 0, 1, token=CONSUMER)
    assert outcome == "end" and len(samples) == small_ds.total
    assert request(srv, "/v1/jobs", token=CONSUMER)[0] == 200
    assert request(srv, "/v1/jobs", token=ADMIN)[0] == 200
    # Consumer token on admin calls: 403; no token: 401.
    for method, p, body in (("PUT", "/v1/jobs/x", b'{"source": "/x"}'),
                            ("DELETE", "/v1/jobs/train", None),
                            ("GET", "/v1/settings", None)):
        assert request(srv, p, method, token=CONSUMER, body=body)[0] == 403
        assert request(srv, p, method, body=body)[0] == 401
    assert request(srv, "/v1/settings", token=ADMIN)[0] == 200
    # Probes and metrics need no token.
    for p in ("/healthz", "/readyz", "/metrics"):
        assert request(srv, p)[0] == 200


def test_admin_api_off_without_admin_token(start, small_ds):
    srv = start("--job", "train", "--source", small_ds.path)
    st, _, body = request(srv, "/v1/jobs/x", "PUT", body=b'{"source": "/x"}', token="any")
    assert st == 403 and "admin API is off" in body.decode()


class _NotFound(http.server.BaseHTTPRequestHandler):
    """An object store where nothing exists: a source on it fails fast."""

    def do_HEAD(self):
        self.send_response(404)
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, *args):
        pass


def test_secrets_never_in_logs_or_status(start, small_ds, workdir):
    store = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=store.serve_forever, daemon=True).start()
    port = store.server_address[1]
    tf = os.path.join(workdir, "admin.token")
    with open(tf, "w") as f:
        f.write(ADMIN + "\n")
    pw = "hunter2pw"
    cfg = os.path.join(workdir, "secret-config.json")
    with open(cfg, "w") as f:
        json.dump({"jobs": [{"name": "s", "source":
                             "http://user:%s@127.0.0.1:%d/x.tar" % (pw, port)}]}, f)
    srv = start("--job", "train", "--source", small_ds.path, "--admin-token-file", tf,
                "--config", cfg, "--log-level", "debug", env={"SHARDCAST_TOKEN": CONSUMER})
    try:
        read_share(srv, "train", 0, 0, 1, token=CONSUMER)
        request(srv, "/v1/jobs", token="wrong-" + CONSUMER)
        request(srv, "/v1/settings", token=CONSUMER)
        request(srv, "/v1/jobs/s2", "PUT", token=ADMIN, body=json.dumps(
            {"source": "http://user:%s@127.0.0.1:%d/y.tar" % (pw, port)}))
        # Both jobs fail on the resolver's thread: wait for each one's error.
        for job in ("s2", "s"):
            assert wait_for(lambda job=job: get_json(srv, "/v1/jobs/" + job,
                                                     token=CONSUMER)["errors"], 60), \
                get_json(srv, "/v1/jobs/" + job, token=CONSUMER)
        texts = [get_json_text(srv, p) for p in ("/v1/jobs", "/v1/jobs/s", "/v1/jobs/s2",
                                                 "/v1/jobs/train", "/v1/settings",
                                                 "/metrics", "/readyz")]
        assert srv.stop() == 0
    finally:
        store.shutdown()
    texts.append(srv.log(full=True))
    assert "127.0.0.1:%d" % port in texts[-1]  # the URL is logged, masked
    for t in texts:
        for secret in (ADMIN, CONSUMER, pw):
            assert secret not in t
    status = json.loads(texts[1])
    assert "***@" in status["source"] and "***@" in status["errors"][0]["message"]


def get_json_text(srv, path):
    st, _, body = request(srv, path, token=ADMIN)
    return body.decode()


def test_readyz_transitions(start, workdir):
    later = os.path.join(workdir, "appears-later")
    cfg = os.path.join(workdir, "ready-config.json")
    with open(cfg, "w") as f:
        json.dump({"jobs": [{"name": "late", "source": later}]}, f)
    srv = start("--config", cfg, "--admin-token", ADMIN)
    st, _, body = request(srv, "/readyz")
    assert st == 503 and "job late" in body.decode()
    assert request(srv, "/healthz")[0] == 200
    make_dataset(later, shards=2, per_shard=5, size=300, seed=1)
    # A missing source fails the job for good: a PUT (the same spec too)
    # resolves it again.
    st, _, _ = request(srv, "/v1/jobs/late", "PUT", token=ADMIN,
                       body=json.dumps({"source": later}))
    assert st == 200
    assert wait_for(lambda: request(srv, "/readyz")[0] == 200, 60), srv.log()
    # A new job that cannot resolve makes the server unready again ...
    request(srv, "/v1/jobs/gone", "PUT", token=ADMIN,
            body=json.dumps({"source": os.path.join(workdir, "never")}))
    assert wait_for(lambda: request(srv, "/readyz")[0] == 503, 60), request(srv, "/readyz")
    # ... until it is deleted.
    request(srv, "/v1/jobs/gone", "DELETE", token=ADMIN)
    assert request(srv, "/readyz")[0] == 200


def test_rate_limit(start, small_ds):
    srv = start("--job", "train", "--source", small_ds.path, "--rate-limit", "2",
                "--rate-burst", "5")
    codes = [request(srv, "/healthz") for _ in range(12)]
    limited = [c for c in codes if c[0] == 429]
    assert limited and sum(1 for c in codes if c[0] == 200) <= 6
    assert all(int(c[1]["retry-after"]) >= 1 for c in limited)
    # Streams are not rate limited.
    for _ in range(3):
        _, outcome, _ = read_share(srv, "train", 0, 0, 1)
        assert outcome == "end"
    time.sleep(1.2)
    assert request(srv, "/healthz")[0] == 200
    m = wait_for(lambda: request(srv, "/metrics"), 3)
    assert m[0] in (200, 429)


BAD = [
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=2&world=2", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=1&global_start=-1", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=1&format=zip", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=1&start=%zz", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=1&fields=a,a", 400),
    ("GET", "/v1/jobs/train/epochs/0/stream?rank=0&world=65537", 400),  # > max world
    ("GET", "/v1/jobs/train/epochs/x/stream?rank=0&world=1", 400),
    ("GET", "/v1/jobs/tr%00ain/epochs/0/stream?rank=0&world=1", 404),
    ("GET", "/v1/jobs/train/epochs/0/stream/extra", 404),
    ("GET", "/v1/nothing", 404),
    ("POST", "/v1/jobs/train", 405),
    ("DELETE", "/healthz", 405),
]


def test_bad_requests_then_healthy(start, small_ds):
    srv = start("--job", "train", "--source", small_ds.path, "--max-url", "512",
                "--window-samples", "4096")
    for method, path, status in BAD:
        st, hdrs, body = request(srv, path, method)
        assert st == status, (method, path, st, body)
        assert body.decode().startswith("error: ")
        if st == 405:
            assert "allow" in hdrs
    assert request(srv, "/healthz?" + "x" * 600)[0] == 414
    # Oversized headers: MHD answers 431 (or cuts the connection).
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 +
                  b"\r\n\r\n")
        try:
            reply = s.recv(200)
        except ConnectionResetError:
            reply = b""
        assert reply == b"" or reply.split(b" ")[1] in (b"431", b"400", b"413")
    # Garbage on the wire: an error answer, a closed connection, or no
    # answer at all (MHD waits for a request line it can use).
    with socket.create_connection((srv.host, srv.port), timeout=2) as s:
        s.sendall(b"\x00\x01\x02 NOT HTTP\r\n\r\n")
        try:
            reply = s.recv(200)
        except (socket.timeout, ConnectionResetError):
            reply = b""
        assert reply == b"" or reply.startswith(b"HTTP/1.1 4")
    samples, outcome, _ = read_share(srv, "train", 0, 0, 1)
    assert outcome == "end" and len(samples) == small_ds.total
    # A world wider than the window is served (even-drop: an empty share
    # here); it no longer lifts the window's caps.
    st, _, body = request(srv, "/v1/jobs/train/epochs/0/stream?rank=65535&world=65536")
    assert st == 200 and b"__shardcast_end__" in body
    assert srv.alive()


def test_metrics_pass_promtool(start, small_ds):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's prometheus package "
                    "(scripts/deps.sh)", pytrace=False)
    srv = start("--job", "train", "--source", small_ds.path)
    read_share(srv, "train", 0, 0, 2)
    read_share(srv, "train", 0, 1, 2)
    request(srv, "/v1/nothing")
    st, hdrs, body = request(srv, "/metrics")
    assert st == 200 and hdrs["content-type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    p = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    assert 'shardcast_samples_sent_total{shardcast_job="train"} %d' % (small_ds.total // 2 * 2) in text
    assert 'shardcast_streams_closed_total{shardcast_job="train",outcome="ok"} 2' in text or \
        'shardcast_streams_opened_total{shardcast_job="train"} 2' in text
    assert 'shardcast_http_requests_total{route="other",code="404"} 1' in text
    for family in ("shardcast_fetch_retries_total", "shardcast_fetch_throttles_total",
                   "shardcast_shards_skipped_total", "shardcast_consumers_lagging",
                   "shardcast_epochs_in_flight", "shardcast_resident_memory_bytes"):
        assert "# TYPE " + family in text
    assert "rank=" not in text  # no per-consumer labels


def test_topology_and_replica_setting(start, small_ds):
    srv = start("--job", "train", "--source", small_ds.path, "--replica", "1",
                "--replicas", "3")
    t = get_json(srv, "/v1/topology?world=10")
    assert t["replica"] == 1 and t["replicas"] == 3
    assert t["local_world"] == 3  # consumers 1, 4, 7
    assert "c mod R" in t["rule"]
    # Replica 1 of 3 serves only its part of the epoch.
    samples, outcome, _ = read_share(srv, "train", 0, 0, 1)
    assert outcome == "end" and 0 < len(samples) < small_ds.total
