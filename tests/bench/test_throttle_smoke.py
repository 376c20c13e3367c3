"""Smoke test of the throttled-store benchmark (bench/throttle.sh --quick):
the token-bucket proxy throttles as S3 does, and the harness still runs end
to end against this tree — dataset, s3rver behind the proxy, every
contender on every workload (or a stated reason why it is not available),
the exactly-once check across nodes, the store's counters, the JSON and
Markdown output. It checks that the figures are sane, never a performance
target.

Uses the binaries of $SHARDCAST_BUILD (else build/) as they are: it neither
installs packages nor builds.
"""

import http.client
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TIMEOUT = 240  # seconds for the whole quick run
CONTENDERS = ("baseline", "shardcast", "shardcast-cache")

sys.path.insert(0, os.path.join(REPO, "bench", "throttle"))
import tbproxy  # noqa: E402
from smoke_support import run_quick  # noqa: E402


# -- the proxy alone -----------------------------------------------------------

class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b"x" * 300000

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


@pytest.fixture
def upstream():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_proxy_answers_slowdown_above_the_rate(upstream):
    # 2 tokens, refilled at 1/s: of 12 back-to-back requests on one
    # kept-alive connection, at most 2 + what refills meanwhile get through.
    with tbproxy.ThrottleProxy(upstream, rate=1, burst=2) as p:
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        statuses = []
        for i in range(12):
            conn.request("GET", "/bucket/key-%d.tar" % i)
            r = conn.getresponse()
            body = r.read()
            statuses.append(r.status)
            if r.status == 503:
                assert b"<Code>SlowDown</Code>" in body
                assert b"<Message>Please reduce your request rate.</Message>" in body
                assert r.getheader("Retry-After") is None  # S3 sends none
                assert r.getheader("Content-Type") == "application/xml"
            else:
                assert r.status == 200 and len(body) == len(_Upstream.body)
        conn.close()
        ok = statuses.count(200)
        assert 2 <= ok <= 4, statuses
        c = p.counters()
        assert c["by_status"].get("503", 0) == 12 - ok
        assert c["by_method"]["GET"] == 12
        assert c["bytes_sent"] >= ok * len(_Upstream.body)
        assert c["throttle"]["accepted"] == ok
        assert c["throttle"]["throttled"] == 12 - ok
        assert sum(t[1] for t in c["throttle"]["timeline"]) == ok
        # Rate 0: no limit; counters reset.
        p.configure(rate=0)
        p.reset_counters()
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        for i in range(20):
            conn.request("GET", "/bucket/k")
            r = conn.getresponse()
            r.read()
            assert r.status == 200
        conn.close()
        assert p.counters()["by_status"] == {"200": 20}


def test_proxy_caps_bytes_per_connection(upstream):
    import time
    with tbproxy.ThrottleProxy(upstream, conn_bps=1_000_000) as p:
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        t0 = time.monotonic()
        conn.request("GET", "/bucket/big")
        body = conn.getresponse().read()
        took = time.monotonic() - t0
        conn.close()
    assert len(body) == len(_Upstream.body)
    # 300 kB at 1 MB/s with a burst of 1/8 s: not faster than ~0.15 s.
    assert took > 0.1, took


# -- the whole quick run ---------------------------------------------------------

@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    # The 50% cache runs the same code as the full one: left out for time.
    out, _, results, log = run_quick("throttle.sh", tmp_path_factory,
                                     "throttle", TIMEOUT,
                                     ("--contenders", ",".join(CONTENDERS)))
    return out, results, log


def test_every_contender_is_listed_or_explained(quick):
    _, results, _ = quick
    assert set(results["available"]) == set(CONTENDERS)
    for name, a in results["available"].items():
        assert a["ok"] or a["reason"], (name, a)
    assert results["available"]["baseline"]["ok"]
    assert results["available"]["shardcast"]["ok"]


def test_every_available_contender_ran_every_workload(quick):
    _, results, log = quick
    cfg = results["config"]
    ran = {}
    for r in results["runs"]:
        ran.setdefault((r["workload"], r["contender"]), []).append(r)
        assert r["ok"], "%s %s: %s\n%s" % (r["workload"], r["contender"],
                                           r["error"], log[-3000:])
    for name, a in results["available"].items():
        if not a["ok"]:
            continue
        for wl in ("epochs", "jobs"):
            assert (wl, name) in ran, (wl, name)
    assert len(ran[("epochs", "baseline")][0]["epochs"]) == cfg["epochs"]
    rates = {r["rate"] for r in results["runs"] if r["workload"] == "rates"}
    assert rates == set(cfg["sweep"])


def test_exactly_once_across_nodes(quick):
    _, results, _ = quick
    total = results["dataset"]["samples"]
    checked = 0
    for r in results["runs"]:
        for ep in r["epochs"]:
            assert set(ep["jobs"]) == set(r["jobs"])
            for job, j in ep["jobs"].items():
                v = j["verify"]
                assert v["ok"], (r["workload"], r["contender"], job, v)
                assert v["duplicates"] == 0 and v["unknown"] == 0
                assert v["bad_hash"] == 0
                assert v["samples"] == v["expected"] <= total
                assert j["clients"]["workers"] == r["nodes"] * r["workers"]
                checked += 1
    assert checked > 0


def test_store_counters_are_sane(quick):
    _, results, _ = quick
    ds = results["dataset"]
    for r in results["runs"]:
        for ep in r["epochs"]:
            st = ep["store"]
            assert st["requests"] == sum(st["by_status"].values())
            assert st["throttled"] == st["by_status"].get("503", 0)
            assert st["bytes"] >= st["shard_bytes"] >= 0
            njobs = len(r["jobs"])
            if not r["contender"].startswith("shardcast-cache"):
                # Without a cache every job reads every shard every epoch.
                assert st["shard_bytes"] >= njobs * ds["tar_bytes"], (r["contender"], st)
            if r["contender"] == "baseline":
                # Every worker lists the prefix, then GETs its shards.
                workers = r["nodes"] * r["workers"] * njobs
                assert st["by_status"].get("200", 0) >= workers + \
                    njobs * ds["shape"]["shards"], st
                retries = sum(j["clients"]["retries"] for j in ep["jobs"].values())
                assert retries == st["throttled"], (retries, st)
            else:
                srv = ep["server"]
                throttles = sum(v for k, v in srv.items()
                                if k.startswith("shardcast_fetch_throttles_total"))
                assert throttles == st["throttled"], (srv, st)
        assert r["timeline"] is not None


def test_report(quick):
    out, results, _ = quick
    md = open(os.path.join(out, "results.md")).read()
    assert "## One epoch, " in md
    assert "## %d concurrent jobs" % results["config"]["jobs"] in md
    assert "## Targets (issue 14)" in md
    assert "| baseline (boto3 + tarfile in every worker) |" in md
    assert results["summary"]["targets"]
