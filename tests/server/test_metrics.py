"""/metrics beyond the counters: the histograms (HTTP request duration,
time to first sample, object-store latency by backend and operation, seek
ready time), the object-store counters by backend and the standard
process_* metrics. Every exposition is checked with `promtool check
metrics`; every histogram series must be cumulative and monotone, end
with le="+Inf" equal to its _count, and the histograms must move when
requests, streams, store reads and seeks happen."""

import os
import re
import shutil
import subprocess
import time

import pytest

from server_testlib import read_share, request, wait_for

TOKEN = "metrics-token"
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{family: {"type": t, "samples": [(name, labels dict, value)]}}."""
    fams, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, t = line.split(" ", 3)
            types[name] = t
            fams.setdefault(name, {"type": t, "samples": []})
            continue
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, "unparsable line %r" % line
        name, labels = m.group(1), dict(_LABEL.findall(m.group(3) or ""))
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and types.get(base) == "histogram":
                fam = base
        assert fam in fams, "series %s before its # TYPE" % name
        fams[fam]["samples"].append((name, labels, float(m.group(4))))
    return fams


def histograms(fams):
    """{(family, frozenset(labels without le)): {"buckets": [(le, v)], "sum",
    "count"}} of every histogram family."""
    out = {}
    for fam, f in fams.items():
        if f["type"] != "histogram":
            continue
        for name, labels, v in f["samples"]:
            key = (fam, frozenset((k, x) for k, x in labels.items() if k != "le"))
            h = out.setdefault(key, {"buckets": [], "sum": None, "count": None})
            if name == fam + "_bucket":
                h["buckets"].append((labels["le"], v))
            elif name == fam + "_sum":
                h["sum"] = v
            elif name == fam + "_count":
                h["count"] = v
    return out


def check_histograms(fams):
    hs = histograms(fams)
    for (fam, labels), h in hs.items():
        where = "%s%s" % (fam, dict(labels))
        les = [le for le, _ in h["buckets"]]
        assert les and les[-1] == "+Inf", where
        bounds = [float(le) for le in les[:-1]]
        assert bounds == sorted(set(bounds)), where
        vals = [v for _, v in h["buckets"]]
        assert all(a <= b for a, b in zip(vals, vals[1:])), (where, vals)
        assert h["count"] == vals[-1], where
        assert h["sum"] is not None and h["sum"] >= 0, where
        assert h["count"] == 0 or h["sum"] > 0 or bounds[0] > 0, where
        assert all(float(v).is_integer() for v in vals), where
    return hs


def count(hs, fam, **labels):
    h = hs.get((fam, frozenset(labels.items())))
    return 0 if h is None else h["count"]


def value(fams, name, **labels):
    fam = fams.get(name)
    if fam is None:
        return None
    for n, l, v in fam["samples"]:
        if n == name and l == labels:
            return v
    return None


def scrape(srv, token=None):
    st, hdrs, body = request(srv, "/metrics", token=token)
    assert st == 200 and hdrs["content-type"].startswith("text/plain; version=0.0.4")
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's prometheus package "
                    "(scripts/deps.sh)", pytrace=False)
    p = subprocess.run([promtool, "check", "metrics"], input=body,
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    fams = parse(body.decode())
    return fams, check_histograms(fams)


def test_metrics_histograms_move(start, small_ds):
    # A small window: a resume far behind it needs a seek (the feed's: on
    # the feed).
    srv = start("--job", "train", "--source", small_ds.path,
                "--window-samples", "16", "--prefetch", "false",
                "--data-plane", "stream")
    f0, h0 = scrape(srv)
    D, F = "shardcast_http_request_duration_seconds", "shardcast_stream_first_sample_seconds"
    L, S = "shardcast_fetch_latency_seconds", "shardcast_seek_ready_seconds"
    for fam in (D, F, L, S):
        assert f0[fam]["type"] == "histogram"
    assert count(h0, D, route="healthz", method="GET") == 0

    assert request(srv, "/healthz")[0] == 200
    assert request(srv, "/healthz", method="HEAD")[0] == 200
    assert request(srv, "/v1/nothing")[0] == 404
    whole, outcome, _ = read_share(srv, "train", 0, 0, 1)
    assert outcome == "end" and len(whole) == small_ds.total
    # the window (16 samples) is far past position 20: a seek feed
    rest, outcome, _ = read_share(srv, "train", 0, 0, 1, start=20)
    assert outcome == "end" and len(rest) == small_ds.total - 20
    st, _, body = request(srv, "/v1/jobs/train/samples/3?format=frames")
    assert st == 200

    # A request is counted when MHD reports it complete, which may come a
    # moment after the client has read the whole answer; a stream's reads
    # of the store end when the server releases it.
    def moved():
        f, h = scrape(srv)
        ok = (count(h, D, route="stream", method="GET") >= 2 and
              count(h, D, route="sample", method="GET") >= 1 and
              count(h, D, route="healthz", method="GET") >= 1 and
              count(h, D, route="healthz", method="HEAD") >= 1 and
              count(h, D, route="other", method="GET") >= 1 and
              value(f, "shardcast_fetch_inflight", backend="file") == 0)
        return (f, h) if ok else None
    got = wait_for(moved, 60)
    assert got, "the requests were not counted"
    f1, h1 = got
    # HTTP requests, by route and method (a stream counts when it ends).
    assert count(h1, D, route="healthz", method="GET") == 1
    assert count(h1, D, route="healthz", method="HEAD") == 1
    assert count(h1, D, route="other", method="GET") == 1
    assert count(h1, D, route="stream", method="GET") == 2
    assert count(h1, D, route="metrics", method="GET") >= 1
    # Time to first sample: both streams and the sample.
    assert count(h1, F, route="stream") == 2
    assert count(h1, F, route="sample") == 1
    # Local shards: the file backend's opens and listing.
    assert count(h1, L, backend="file", op="get") > count(h0, L, backend="file", op="get")
    assert count(h1, L, backend="file", op="list") >= 1
    assert value(f1, "shardcast_fetch_bytes_total", backend="file") > 0
    assert value(f1, "shardcast_fetch_requests_total", backend="file") >= 5
    for b in ("http", "s3"):
        assert value(f1, "shardcast_fetch_requests_total", backend=b) == 0
        assert count(h1, L, backend=b, op="get") == 0
    assert value(f1, "shardcast_fetch_inflight", backend="file") == 0
    # The unlabelled series of earlier versions are gone.
    assert value(f1, "shardcast_fetch_requests_total") is None
    # The seek: per job.
    assert count(h1, S, shardcast_job="train") >= count(h0, S, shardcast_job="train") + 1
    # Durations are sane: the first sample comes before the stream ends.
    d = h1[(D, frozenset({"route": "stream", "method": "GET"}.items()))]
    fs = h1[(F, frozenset({"route": "stream"}.items()))]
    assert 0 < fs["sum"] <= d["sum"] < 60
    # A further epoch moves the store histogram again.
    read_share(srv, "train", 1, 0, 1)
    f2, h2 = scrape(srv)
    assert count(h2, L, backend="file", op="get") > count(h1, L, backend="file", op="get")
    assert count(h2, F, route="stream") == 3


def _limits_max_open_files(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return line.split()[3]
    return None


def test_metrics_process_sane(start, small_ds):
    before = time.time()
    srv = start("--job", "train", "--source", small_ds.path)
    f1, _ = scrape(srv)
    for name, t in (("process_cpu_seconds_total", "counter"),
                    ("process_resident_memory_bytes", "gauge"),
                    ("process_virtual_memory_bytes", "gauge"),
                    ("process_open_fds", "gauge"),
                    ("process_max_fds", "gauge"),
                    ("process_start_time_seconds", "gauge")):
        assert f1[name]["type"] == t, name
        assert value(f1, name) is not None, name
    start_t = value(f1, "process_start_time_seconds")
    # clock ticks (1/100 s) and boot time rounding: within a few seconds
    assert before - 5 <= start_t <= time.time() + 1
    rss = value(f1, "process_resident_memory_bytes")
    vsz = value(f1, "process_virtual_memory_bytes")
    assert 1 << 20 < rss <= vsz
    # the same figure as the older shardcast_resident_memory_bytes, roughly
    assert abs(rss - value(f1, "shardcast_resident_memory_bytes")) < 64 << 20
    fds = value(f1, "process_open_fds")
    nfd = len(os.listdir("/proc/%d/fd" % srv.pid))
    assert 3 <= fds and abs(fds - nfd) <= 8, (fds, nfd)
    lim = _limits_max_open_files(srv.pid)
    assert value(f1, "process_max_fds") == (float(lim) if lim != "unlimited"
                                            else float(2 ** 63 - 1))
    assert fds <= value(f1, "process_max_fds")
    cpu1 = value(f1, "process_cpu_seconds_total")
    read_share(srv, "train", 0, 0, 1)
    f2, _ = scrape(srv)
    assert 0 <= cpu1 <= value(f2, "process_cpu_seconds_total") < 600
    assert value(f2, "process_start_time_seconds") == start_t


def test_metrics_public_and_detail(start, small_ds):
    """Server-wide histograms and process_* are public; object-store and
    per-job series (seek ready time) only with the consumer token, as
    before."""
    srv = start("--job", "train", "--source", small_ds.path, "--token", TOKEN)
    read_share(srv, "train", 0, 0, 1, token=TOKEN)
    fams, hs = scrape(srv)
    text = "\n".join(fams)
    assert "shardcast_http_request_duration_seconds" in fams
    assert "shardcast_stream_first_sample_seconds" in fams
    assert "process_open_fds" in fams
    assert "shardcast_fetch_latency_seconds" not in text
    assert "shardcast_seek_ready_seconds" not in text
    assert not any("shardcast_job" in dict(k[1]) for k in hs)
    fams, hs = scrape(srv, token=TOKEN)
    assert fams["shardcast_fetch_latency_seconds"]["type"] == "histogram"
    assert count(hs, "shardcast_fetch_latency_seconds", backend="file", op="get") > 0
    assert fams["shardcast_seek_ready_seconds"]["type"] == "histogram"
    assert value(fams, "shardcast_fetch_requests_total", backend="file") > 0
