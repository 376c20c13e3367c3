#!/usr/bin/env python3
"""Soak benchmark of the hardening bounds (not part of the test suite).

Runs one shardcastd on loopback:
  warm:   16 consumers (tests/tools/sc_loadgen, frames) read epoch 0 (page
          cache; not reported);
  quiet:  they read epoch 1;
  noisy:  they read epoch 2 while
            - --idle idle connections are held open (spread over
              127.0.0.2..127.0.0.9, so each address stays under the
              per-address limit; the header timeout closes them and they are
              reopened at once),
            - a loop opens new epochs (3, 4, ..., and every tenth one far
              ahead) from 127.0.1.1,
            - random hostile requests arrive from 127.0.2.1 (unknown
              parameters, huge epochs and starts, bad tokens, unknown jobs,
              slowloris headers, oversized targets).
It reports, for each run, exactly-once (every sample of the manifest once,
minus the even-drop remainder), samples/s and MB/s; for the noisy run the
server's peak RSS (VmHWM) and peak thread count, and the bound counters of
/metrics. Output: a JSON object on stdout.

Usage: bench/soak.sh [--idle 1000] [--shards 32] [--per-shard 1000] [--size 8000]
"""

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORLD = 16


def status_field(pid, name):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0


def loadgen(build, port, epoch, dump):
    p = subprocess.run([os.path.join(build, "sc_loadgen"), "--port", str(port), "--job",
                        "soak", "--world", str(WORLD), "--epoch", str(epoch), "--timeout",
                        "600", "--dump", dump], capture_output=True, timeout=900)
    summary = json.loads(p.stdout)
    summary["exit"] = p.returncode
    return summary


def exactly_once(dump, manifest):
    total = manifest["total_samples"]
    expect = total - total % WORLD
    keys = Counter()
    with open(dump) as f:
        for line in f:
            keys[line.split()[3]] += 1
    return len(keys) == expect and (not keys or max(keys.values()) == 1)


def connect(src, port):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def idle_holder(port, n, stop, counts):
    """Hold n idle connections over 8 source addresses; reopen closed ones."""
    conns = []
    while not stop.is_set():
        conns = [c for c in conns if c.fileno() >= 0]
        while len(conns) < n and not stop.is_set():
            src = "127.0.0.%d" % (2 + len(conns) % 8)
            try:
                conns.append(connect(src, port))
                counts["idle_opened"] += 1
            except OSError:
                counts["idle_refused"] += 1
                break
        for c in list(conns):
            c.setblocking(False)
            try:
                if c.recv(1) == b"":
                    c.close()
                    conns.remove(c)
            except BlockingIOError:
                pass
            except OSError:
                c.close()
                conns.remove(c)
        counts["idle_peak"] = max(counts["idle_peak"], len(conns))
        time.sleep(0.2)
    for c in conns:
        c.close()


def get(port, path, src, token=None, timeout=5):
    s = connect(src, port)
    try:
        s.settimeout(timeout)
        h = "Authorization: Bearer %s\r\n" % token if token else ""
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n"
                   % (path, h)).encode())
        head = s.recv(64)
        m = re.match(rb"HTTP/1.1 (\d+)", head)
        return int(m.group(1)) if m else 0
    except OSError:
        return 0
    finally:
        s.close()


def epoch_opener(port, stop, counts, first):
    """New epochs one after the other from `first` (within
    --max-epochs-ahead, so the feed and per-minute bounds are what bite),
    with a far-ahead one every tenth request."""
    e = first
    while not stop.is_set():
        far = counts["epoch_requests"] % 10 == 9
        st = get(port, "/v1/jobs/soak/epochs/%d/stream?rank=0&world=1&start=999999999"
                 % (e + 1000 if far else e), "127.0.1.1")
        counts["epoch_requests"] += 1
        counts["epochs_%d" % st] += 1
        if not far:
            e += 1
        time.sleep(0.05)


HOSTILE = [
    "/v1/jobs/soak/epochs/0/stream?rank=0&world=1&globalstart=1",
    "/v1/jobs/soak/epochs/18446744073709551615/stream?rank=0&world=1&format=tar",
    "/v1/jobs/soak/epochs/0/stream?rank=0&world=1&start=9223372036854775808",
    "/v1/jobs/nosuch/epochs/0/stream?rank=0&world=1",
    "/v1/jobs/soak/epochs/0/stream?rank=5&world=2",
    "/v1/jobs/soak/epochs/0/stream?rank=0&world=65536",
    "/v1/jobs/%2e%2e/epochs/0/stream?rank=0&world=1",
    "/v1/settings", "/metrics", "/readyz", "/v1/jobs/soak",
    "/" + "a" * 5000,
]


def hostile(port, stop, counts):
    rnd = random.Random(7)
    while not stop.is_set():
        if rnd.random() < 0.1:
            try:  # slowloris: half a header, then leave it
                s = connect("127.0.2.1", port)
                s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")
                counts["slowloris"] += 1
                threading.Timer(15, s.close).start()
            except OSError:
                counts["slowloris_refused"] += 1
            continue
        st = get(port, rnd.choice(HOSTILE), "127.0.2.1",
                 token=rnd.choice([None, "wrong-token"]))
        counts["hostile_%d" % st] += 1
        time.sleep(0.01)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--per-shard", type=int, default=1000)
    ap.add_argument("--size", type=int, default=8000)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="shardcast-soak-") as d:
        data = os.path.join(d, "data")
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "tools", "mkwds.py"),
                        "--out", data, "--shards", str(args.shards), "--samples-per-shard",
                        str(args.per_shard), "--size", str(args.size), "--seed", "5"],
                       check=True, capture_output=True)
        with open(os.path.join(data, "manifest.json")) as f:
            manifest = json.load(f)
        err = open(os.path.join(d, "server.log"), "wb")
        srv = subprocess.Popen([os.path.join(args.build, "shardcastd"), "--listen",
                                "127.0.0.1", "--port", "0", "--job", "soak", "--source", data,
                                "--window-samples", "4096", "--max-connections", "4096",
                                "--log-level", "warn", "--prefetch", "false"],
                               stdout=subprocess.PIPE, stderr=err)
        port = int(srv.stdout.readline().decode().strip().rpartition(":")[2])
        out = {"dataset": {"samples": manifest["total_samples"], "size": args.size},
               "idle_connections": args.idle}
        try:
            loadgen(args.build, port, 0, os.path.join(d, "warm.txt"))  # page cache
            out["quiet"] = loadgen(args.build, port, 1, os.path.join(d, "q.txt"))
            out["quiet"]["exactly_once"] = exactly_once(os.path.join(d, "q.txt"), manifest)
            stop = threading.Event()
            counts = Counter(idle_peak=0)
            ths = [threading.Thread(target=idle_holder, args=(port, args.idle, stop, counts)),
                   threading.Thread(target=epoch_opener, args=(port, stop, counts, 3)),
                   threading.Thread(target=hostile, args=(port, stop, counts))]
            for t in ths:
                t.start()
            peak = {"rss_kb": 0, "threads": 0}

            def sample():
                while not stop.is_set():
                    peak["threads"] = max(peak["threads"], status_field(srv.pid, "Threads"))
                    time.sleep(0.2)
            st = threading.Thread(target=sample)
            st.start()
            time.sleep(3)  # let the idle connections and the noise build up
            out["noisy"] = loadgen(args.build, port, 2, os.path.join(d, "n.txt"))
            out["noisy"]["exactly_once"] = exactly_once(os.path.join(d, "n.txt"), manifest)
            stop.set()
            for t in ths + [st]:
                t.join(30)
            peak["rss_kb"] = status_field(srv.pid, "VmHWM")
            out["server_peak"] = peak
            out["noise"] = dict(counts)
            m = subprocess.run(["curl", "-s", "http://127.0.0.1:%d/metrics" % port],
                               capture_output=True).stdout.decode()
            out["bounds"] = {k: v for k, v in re.findall(
                r"^(shardcast_(?:epochs_refused|connections_refused|requests_timed_out|"
                r"stream_opens_rate_limited|rate_limited|log_dropped)[^ ]*) (\d+)$", m, re.M)}
            q, n = out["quiet"]["samples_per_s"], out["noisy"]["samples_per_s"]
            out["noisy_vs_quiet"] = round(n / q, 3) if q else None
        finally:
            srv.terminate()
            srv.wait(60)
        json.dump(out, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
