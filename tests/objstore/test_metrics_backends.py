"""Object-store metrics by backend: a server reading from nginx (http) and
from s3rver (s3, a listed prefix) counts its requests, bytes and request
latency under backend="http" / backend="s3", with the operation (get,
list) on the latency histogram; the exposition passes `promtool check
metrics` and the histograms are cumulative."""
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from objstore_support import NSHARDS, REPO, clean_env

_SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', re.M)


def server_bin():
    p = os.environ.get("SHARDCAST_BIN") or str(
        Path(os.environ.get("SHARDCAST_BUILD") or REPO / "build") / "shardcastd")
    if not os.access(p, os.X_OK):
        pytest.fail("shardcastd not built at %s (set SHARDCAST_BIN)" % p)
    return p


def serve(source, env):
    proc = subprocess.Popen([server_bin(), "--job", "train", "--source", source,
                             "--port", "0", "--prefetch", "false",
                             "--log-level", "warn"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    deadline = time.time() + 30
    line = ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("listening=") or (not line and proc.poll() is not None):
            break
    if not line.startswith("listening="):
        proc.kill()
        pytest.fail("server did not start: %s" % proc.stderr.read())
    return proc, "http://" + line.strip().split("=", 1)[1]


def stop(proc):
    """SIGTERM; the server must drain and exit 0 (also under the
    sanitizers, which report through the exit status)."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    err = proc.stderr.read()
    assert proc.returncode == 0, err[-4000:]


def get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


def scrape(url):
    body = get(url + "/metrics")
    p = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"],
                       input=body, capture_output=True, timeout=30)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    series = {}
    for name, labels, v in _SERIES.findall(body.decode()):
        series[(name, labels)] = float(v)
    return series


def check_cumulative(series, fam, labels):
    vals = [(k[1], v) for k, v in series.items()
            if k[0] == fam + "_bucket" and k[1].startswith(labels + ",le=")]
    assert vals and vals[-1][0].endswith('le="+Inf"'), (fam, labels)
    assert all(a[1] <= b[1] for a, b in zip(vals, vals[1:])), vals
    assert series[(fam + "_count", labels)] == vals[-1][1]
    return vals[-1][1]


def read_epoch(url):
    body = get(url + "/v1/jobs/train/epochs/0/stream?rank=0&world=1")
    assert b"__shardcast_end__" in body
    return body


def s3env(endpoint):
    return clean_env({"AWS_ACCESS_KEY_ID": "S3RVER",
                      "AWS_SECRET_ACCESS_KEY": "S3RVER",
                      "AWS_REGION": "us-east-1",
                      "AWS_ENDPOINT_URL_S3": endpoint})


def test_metrics_http_backend(nginx):
    proc, url = serve(nginx + "/shard-{000000..%06d}.tar" % (NSHARDS - 1), clean_env())
    try:
        read_epoch(url)
        m = scrape(url)
    finally:
        stop(proc)
    L = "shardcast_fetch_latency_seconds"
    assert m[("shardcast_fetch_requests_total", 'backend="http"')] >= NSHARDS
    assert m[("shardcast_fetch_requests_total", 'backend="s3"')] == 0
    assert m[("shardcast_fetch_bytes_total", 'backend="http"')] > 0
    assert m[("shardcast_fetch_inflight", 'backend="http"')] >= 0
    assert check_cumulative(m, L, 'backend="http",op="get"') >= NSHARDS
    assert m[(L + "_sum", 'backend="http",op="get"')] > 0
    assert (L + "_count", 'backend="s3",op="get"') not in m


def test_metrics_s3_backend(s3):
    proc, url = serve("s3://data/train/", s3env(s3.endpoint))
    try:
        read_epoch(url)
        # A request is counted when it completes, which may come after the
        # last sample reached its consumer: wait for the counts (with
        # sidecars asked for only where the listing shows them, there is
        # no margin of 404s any more).
        # The latency histogram is filled as each request ends too: wait
        # for every count asserted below.
        lat = "shardcast_fetch_latency_seconds_count"
        deadline = time.monotonic() + 60
        while True:
            m = scrape(url)
            if (m.get(("shardcast_fetch_requests_total", 'backend="s3"'), 0) >= NSHARDS + 1
                    and m.get((lat, 'backend="s3",op="get"'), 0) >= NSHARDS
                    and m.get((lat, 'backend="s3",op="list"'), 0) >= 1) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        stop(proc)
    L = "shardcast_fetch_latency_seconds"
    assert m[("shardcast_fetch_requests_total", 'backend="s3"')] >= NSHARDS + 1
    assert m[("shardcast_fetch_requests_total", 'backend="http"')] == 0
    assert m[("shardcast_fetch_bytes_total", 'backend="s3"')] > 0
    assert check_cumulative(m, L, 'backend="s3",op="list"') >= 1
    assert check_cumulative(m, L, 'backend="s3",op="get"') >= NSHARDS
    assert (L + "_count", 'backend="http",op="get"') not in m
