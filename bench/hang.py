#!/usr/bin/env python3
"""bench/hang.py — how long a hung replica stalls training, and whether a
slow store looks like one (docs/operations.md "Scale-out").

1. stopped: R = 3 replicas over local shards, 3 ranks x 2 DataLoader
   workers with the Python client's defaults. Every consumer delivers 2
   samples, then replica 1 gets SIGSTOP and stays stopped. Reported: the
   longest pause of the consumers it served (the heartbeat timeout plus
   the failover), exactly once, per run and the median (--repeat).
2. slow store: R = 2 replicas reading their shards from nginx through the
   fault proxy, which holds every GET of one shard back for --stall
   seconds (30 by default); one rank x 2 workers read the epoch with the
   defaults. Reported: the failovers and reconnects (target: none), the
   epoch's time, exactly once.

Usage: /usr/bin/python3 bench/hang.py [--build build] [--repeat 3]
       [--stall 30] [--out FILE.md]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

from replica_testlib import read_epoch, start_replicas  # noqa: E402
from shardcast import Topology  # noqa: E402
from shardcast_testlib import Dataset, make_dataset  # noqa: E402
from server_testlib import Nginx  # noqa: E402
from support.faultproxy import FaultProxy, Rule  # noqa: E402

JOB = "train"


def job_args(src):
    return ["--job", JOB, "--source", src, "--seed", "3", "--partition", "none",
            "--shuffle-buffer", "64", "--interleave", "2"]


def exactly_once(got, wds):
    keys = [i["key"] for v in got.values() for i in v]
    return len(keys) == len(set(keys)) and sorted(keys) == sorted(wds.by_key)


def stopped_run(binary, workdir, wds):
    reps = start_replicas(binary, workdir, 3, job_args(wds.path))
    try:
        for rep in reps:
            rep.wait_ready(JOB)
        topo = Topology([r.url for r in reps])

        got, resumed = read_epoch(topo, JOB, 3, 2, 0, pause=reps[1].freeze)
        movers = [(r, w) for r in range(3) for w in range(2) if (2 * r + w) % 3 == 1]
        stall = max(nxt["t"] - prev["t"] for c in movers
                    for prev, nxt in zip(got[c], got[c][1:]) if prev["t"] >= resumed)
        return stall, exactly_once(got, wds)
    finally:
        reps[1].thaw()
        for rep in reps:
            rep.stop()


def slow_store_run(binary, workdir, wds, stall):
    ng = Nginx(wds.path, workdir)
    try:
        names = sorted(n for n in os.listdir(wds.path) if n.endswith(".tar"))
        with FaultProxy(upstream="http://127.0.0.1:%d" % ng.port,
                        rules=[Rule.stall(stall, after_bytes=0, method="GET",
                                          path=names[1].replace(".", r"\."))]) as px:
            lo, hi = names[0].rsplit("-", 1)[1][:-4], names[-1].rsplit("-", 1)[1][:-4]
            src = "%s/%s-{%s..%s}.tar" % (px.url, names[0].rsplit("-", 1)[0], lo, hi)
            reps = start_replicas(binary, workdir, 2, job_args(src) + ["--prefetch", "false"])
            try:
                for rep in reps:
                    rep.wait_ready(JOB)
                topo = Topology([r.url for r in reps])
                t0 = time.monotonic()
                got, _ = read_epoch(topo, JOB, 1, 2, 0)
                took = time.monotonic() - t0
                fo = sum(rep.failover_streams(JOB) for rep in reps)
                opened = sum(rep.metric("shardcast_streams_opened_total", shardcast_job=JOB)
                             for rep in reps)
                return took, fo, opened, exactly_once(got, wds)
            finally:
                for rep in reps:
                    rep.stop()
    finally:
        ng.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stall", type=float, default=30.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    binary = os.path.join(os.path.abspath(a.build), "shardcastd")
    with tempfile.TemporaryDirectory(prefix="shardcast-hang-") as wd:
        d = os.path.join(wd, "ds")
        wds = Dataset(d, make_dataset(d, shards=12, per_shard=90, size=96 * 1024, seed=22))
        lines = ["# A hung replica and a slow store", "",
                 "Tree %s; %s; Python client defaults (heartbeat_timeout 3 s, "
                 "header_timeout 10 s)." % (
                     os.popen("git -C %s rev-parse --short HEAD" % ROOT).read().strip(),
                     time.strftime("%Y-%m-%d %H:%M")), ""]
        stalls = []
        lines += ["## Replica 1 of 3 SIGSTOPped mid-epoch (3 ranks x 2 workers)", "",
                  "| run | longest pause of its consumers (s) | exactly once |", "|--:|--:|---|"]
        for k in range(a.repeat):
            s, ok = stopped_run(binary, wd, wds)
            stalls.append(s)
            lines.append("| %d | %.2f | %s |" % (k + 1, s, "yes" if ok else "NO"))
            print(lines[-1], flush=True)
        lines += ["", "Median: %.2f s (target: under 5 s)." % statistics.median(stalls), ""]
        took, fo, opened, ok = slow_store_run(binary, wd, wds, a.stall)
        lines += ["## A shard's body held back %.0f s by the store (R = 2, 1 rank x 2 workers)"
                  % a.stall, "",
                  "| epoch time (s) | failover streams | streams opened | exactly once |",
                  "|--:|--:|--:|---|",
                  "| %.1f | %d | %d | %s |" % (took, fo, opened, "yes" if ok else "NO"), "",
                  "Streams opened equal to the consumers (2) means no reconnect."]
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
