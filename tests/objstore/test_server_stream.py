"""Whole epochs from object storage through the real server to consumers.

shardcastd reads the dataset from s3rver (listed prefix, and a brace
pattern) or from nginx (HTTP brace pattern), optionally through the fault
proxy injecting SlowDown bursts, resets, truncation and stalls; four
consumers (2 ranks x 2 workers: W = 4) read their shares with the Python
client. The union must be every sample of the manifest exactly once (by
content hash) minus exactly the N mod W dropped by even-drop, the counts
equal, and the delivered order identical to the same epoch from local
files.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from objstore_support import (NSHARDS, SAMPLES_PER_SHARD, REPO, FaultProxy,
                              Rule, clean_env)

sys.path.insert(0, str(REPO / "clients" / "python"))
from shardcast import StreamReader, sample_hash, stream_url  # noqa: E402

WORLD = 4
ARGS = ["--seed", "9", "--shuffle-buffer", "50", "--interleave", "3"]


def server_bin():
    p = os.environ.get("SHARDCAST_BIN") or str(
        Path(os.environ.get("SHARDCAST_BUILD") or REPO / "build") / "shardcastd")
    if not os.access(p, os.X_OK):
        pytest.fail("shardcastd not built at %s (set SHARDCAST_BIN)" % p)
    return p


class Server:
    def __init__(self, source, env):
        self.proc = subprocess.Popen(
            [server_bin(), "--job", "train", "--source", source, "--port", "0",
             *ARGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, start_new_session=True)
        deadline = time.time() + 30
        line = ""
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("listening="):
                break
            if not line and self.proc.poll() is not None:
                break
        if not line.startswith("listening="):
            self.proc.kill()
            pytest.fail("server did not start: %s" % self.proc.stderr.read())
        self.url = "http://" + line.strip().split("=", 1)[1]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read()


def read_epoch(url):
    shares = []
    for c in range(WORLD):
        with StreamReader(stream_url(url, "train", 0, c, WORLD)) as r:
            shares.append([(s["__index__"], s["__key__"], sample_hash(s))
                           for s in r])
    return shares


def check_exactly_once(shares, manifest):
    n = len(manifest["samples"])
    want = {s["hash"] for s in manifest["samples"]}
    got = [h for share in shares for _, _, h in share]
    assert len(got) == len(set(got)), "a sample was delivered twice"
    assert set(got) <= want
    assert len(got) == n - n % WORLD
    assert len({len(s) for s in shares}) == 1, "unequal shares"


@pytest.fixture(scope="module")
def manifest(dataset):
    return json.loads((Path(dataset) / "manifest.json").read_text())


@pytest.fixture(scope="module")
def local_shares(dataset, manifest):
    srv = Server(str(dataset), clean_env())
    try:
        shares = read_epoch(srv.url)
    finally:
        srv.stop()
    check_exactly_once(shares, manifest)
    return shares


def s3env(endpoint):
    return clean_env({"AWS_ACCESS_KEY_ID": "S3RVER",
                      "AWS_SECRET_ACCESS_KEY": "S3RVER",
                      "AWS_REGION": "us-east-1",
                      "AWS_ENDPOINT_URL_S3": endpoint})


@pytest.mark.parametrize("source", [
    "s3://data/train/",
    "s3://data/train/shard-{000000..%06d}.tar" % (NSHARDS - 1)])
def test_s3_epoch_through_server(s3, manifest, local_shares, source):
    srv = Server(source, s3env(s3.endpoint))
    try:
        shares = read_epoch(srv.url)
    finally:
        srv.stop()
    check_exactly_once(shares, manifest)
    assert shares == local_shares


def test_s3_epoch_through_faults(s3, manifest, local_shares):
    rules = [Rule.slowdown(count=4), Rule.reset(after_bytes=30000, count=3),
             Rule.truncate(after_bytes=20000, count=2),
             Rule.stall(seconds=1.5, count=1), Rule.error(503, count=2)]
    with FaultProxy(upstream=s3.endpoint, rules=rules) as proxy:
        env = s3env(proxy.url)
        srv = Server("s3://data/train/", env)
        try:
            shares = read_epoch(srv.url)
        finally:
            log = srv.stop()
        fired = [r["fired"] for r in proxy.rules()]
    check_exactly_once(shares, manifest)
    assert shares == local_shares
    assert "S3RVER" not in log  # no credentials in the server's log
    # every kind of fault was injected as many times as asked
    assert fired == [4, 3, 2, 1, 2], fired


def test_http_epoch_through_server(nginx, manifest, local_shares):
    srv = Server(nginx + "/shard-{000000..%06d}.tar" % (NSHARDS - 1),
                 clean_env())
    try:
        shares = read_epoch(srv.url)
    finally:
        srv.stop()
    check_exactly_once(shares, manifest)
    assert shares == local_shares
