#!/usr/bin/python3
"""Latency of other requests while an epoch's plan is being built.

An epoch served from its plan has its plan computed from the shard indexes
when its first stream arrives (or ahead, by prefetch). This benchmark
measures what that costs everyone else: while the plan of a new epoch of a
large dataset (default 32 shards x 100,000 samples = 3.2 million) is
made, three probes, each every 10 ms on a fresh connection, time

  healthz  GET /healthz
  metrics  GET /metrics
  stream   opening a stream of another job at an epoch whose plan exists
           (time to the response headers; the stream is then closed)

and the request that asked for the new epoch is timed to its response
headers (its wait for the plan). Reported per server: the build time
(event=plan_built), the worst and the 99th-percentile latency of each
probe, medians over --runs rounds. Servers given with --build NAME=DIR are
measured alternately in one run (the same dataset, the same indexes).

The large dataset has samples of one empty member (`NNNNNNNNN.cls`, 512
bytes of tar each: 1.6 GB for 3.2 million), made once under --data and
indexed with `shardcast index --state-dir`. Only metadata matters here:
the plan never reads a payload byte.

  bench/plan_latency.py --build new=build --build main=/tmp/main/build \\
      --out bench/results/plan-latency
"""

import argparse
import datetime
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def tar_header(name, size=0):
    """A ustar header for a regular file (bytes, 512)."""
    h = bytearray(512)
    n = name.encode()
    h[0:len(n)] = n
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def make_dataset(path, shards, per_shard):
    """shards tars of per_shard samples with one empty member each."""
    stamp = os.path.join(path, ".complete-%d-%d" % (shards, per_shard))
    if os.path.exists(stamp):
        return
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    for s in range(shards):
        with open(os.path.join(path, "big-%05d.tar" % s), "wb") as f:
            buf = []
            for i in range(per_shard):
                buf.append(tar_header("%09d.cls" % (s * per_shard + i)))
                if len(buf) == 4096:
                    f.write(b"".join(buf))
                    buf = []
            buf.append(bytes(1024))
            f.write(b"".join(buf))
    open(stamp, "w").close()


def make_small(path):
    os.makedirs(path, exist_ok=True)
    for s in range(4):
        with open(os.path.join(path, "small-%02d.tar" % s), "wb") as f:
            for i in range(100):
                data = b"x" * 1000
                f.write(tar_header("s%02d%04d.bin" % (s, i), len(data)))
                f.write(data + bytes(-len(data) % 512))
            f.write(bytes(1024))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, headers_only=False, timeout=60):
    """(status, seconds to the response headers, body or None)."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        dt = time.perf_counter() - t0
        body = None if headers_only else r.read()
        return r.status, dt, body
    finally:
        c.close()


class Server:
    @staticmethod
    def config(work, big, small):
        path = os.path.join(work, "jobs.json")
        with open(path, "w") as f:
            json.dump({"jobs": [{"name": "big", "source": big},
                                {"name": "small", "source": small}]}, f)
        return path

    def __init__(self, build, state, big, small, log):
        work = os.path.dirname(log)
        self.port = free_port()
        self.log = open(log, "w")
        self.logpath = log
        self.p = subprocess.Popen(
            [os.path.join(build, "shardcastd"), "--listen", "127.0.0.1",
             "--port", str(self.port), "--state-dir", state,
             "--config", self.config(work, big, small),
             "--prefetch", "false", "--log-level", "info",
             # the probes come from one address, 300 requests a second
             "--rate-limit", "0", "--stream-rate-limit", "0"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if get(self.port, "/readyz", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server not ready")

    def stop(self):
        self.p.terminate()
        self.p.wait(30)
        self.log.close()

    def build_ms(self, epoch):
        pat = re.compile(r"event=plan_built job=big epoch=%d .*build_ms=([0-9.]+)"
                         % epoch)
        with open(self.logpath) as f:
            for line in f:
                m = pat.search(line)
                if m:
                    return float(m.group(1))
        return None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def one_round(build, state, big, small, logdir, epoch):
    srv = Server(build, state, big, small, os.path.join(logdir, "server.log"))
    try:
        port = srv.port
        # The other job's epoch 0 is planned first (its probe opens a
        # stream of an epoch whose plan exists).
        st, _, body = get(port, "/v1/jobs/small/epochs/0/stream?rank=0&world=1")
        assert st == 200, st
        lat = {"healthz": [], "metrics": [], "stream": []}
        errors = {}
        stop = threading.Event()

        def probe(name, path, headers_only):
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    s, dt, _ = get(port, path, headers_only)
                    if s == 200:
                        lat[name].append(dt)
                    else:
                        errors[name] = errors.get(name, 0) + 1
                except OSError:
                    pass
                rest = 0.010 - (time.perf_counter() - t)
                if rest > 0:
                    time.sleep(rest)

        threads = [
            threading.Thread(target=probe, args=("healthz", "/healthz", False)),
            threading.Thread(target=probe, args=("metrics", "/metrics", False)),
            threading.Thread(target=probe, args=(
                "stream", "/v1/jobs/small/epochs/0/stream?rank=0&world=1"
                "&start=50", True)),
        ]
        for t in threads:
            t.start()
        time.sleep(0.3)
        st, wait, _ = get(port, "/v1/jobs/big/epochs/%d/stream?rank=0&world=1"
                          % epoch, headers_only=True, timeout=120)
        time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join()
        status = json.loads(get(port, "/v1/jobs/big")[2])
        dp = status.get("data_plane", {})
        res = {"open_status": st, "plan_wait_s": wait,
               "build_ms": srv.build_ms(epoch), "plans": dp.get("plans"),
               "plan_streams": dp.get("plan_streams"),
               "plan_waits": dp.get("plan_waits"), "errors": errors}
        for k, v in lat.items():
            res[k] = {"n": len(v), "max_ms": max(v) * 1e3 if v else None,
                      "p99_ms": pct(v, 0.99) * 1e3 if v else None,
                      "median_ms": statistics.median(v) * 1e3 if v else None}
        return res
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", default=[],
                    help="NAME=DIR of a build with shardcastd (repeatable; "
                    "default new=build)")
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--samples-per-shard", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(REPO, "build", "bench-data",
                                                   "plan-latency"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    builds = [b.split("=", 1) for b in (a.build or ["new=build"])]
    big = os.path.join(a.data, "big")
    small = os.path.join(a.data, "small")
    t = time.time()
    make_dataset(big, a.shards, a.samples_per_shard)
    make_small(small)
    print("dataset ready in %.0f s" % (time.time() - t), flush=True)
    work = tempfile.mkdtemp(prefix="plan-latency-")
    state = os.path.join(work, "state")
    t = time.time()
    subprocess.run([os.path.join(builds[0][1], "shardcast"), "index",
                    "--state-dir", state, big], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([os.path.join(builds[0][1], "shardcast"), "index",
                    "--state-dir", state, small], check=True,
                   stdout=subprocess.DEVNULL)
    print("indexed in %.0f s" % (time.time() - t), flush=True)
    results = {name: [] for name, _ in builds}
    for r in range(a.runs):
        order = builds if r % 2 == 0 else builds[::-1]
        for name, d in order:
            # A fresh epoch each round: nothing planned ahead.
            res = one_round(d, state, big, small, work, epoch=1 + r)
            results[name].append(res)
            print(name, json.dumps(res), flush=True)
    summary = {}
    for name, rs in results.items():
        s = {"build_ms": statistics.median([x["build_ms"] or 0 for x in rs]),
             "plan_wait_s": statistics.median([x["plan_wait_s"] for x in rs])}
        for k in ("healthz", "metrics", "stream"):
            s[k + "_max_ms"] = statistics.median(
                [x[k]["max_ms"] or 0 for x in rs])
            s[k + "_p99_ms"] = statistics.median(
                [x[k]["p99_ms"] or 0 for x in rs])
        summary[name] = s
    lines = ["# Latency while a plan of %d samples is built" %
             (a.shards * a.samples_per_shard), "",
             "%s, %d CPUs, medians of %d rounds, builds alternated." %
             (datetime.date.today().isoformat(), os.cpu_count(), a.runs), "",
             "| server | build ms | new epoch's wait s | healthz max / p99 ms "
             "| metrics max / p99 ms | other job's stream open max / p99 ms |",
             "|---|--:|--:|--:|--:|--:|"]
    for name, s in summary.items():
        lines.append("| %s | %.0f | %.2f | %.1f / %.1f | %.1f / %.1f | "
                     "%.1f / %.1f |" % (
                         name, s["build_ms"], s["plan_wait_s"],
                         s["healthz_max_ms"], s["healthz_p99_ms"],
                         s["metrics_max_ms"], s["metrics_p99_ms"],
                         s["stream_max_ms"], s["stream_p99_ms"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump({"runs": results, "summary": summary}, f, indent=1)
        with open(os.path.join(a.out, "results.md"), "w") as f:
            f.write(text)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
