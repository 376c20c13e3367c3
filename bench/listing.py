#!/usr/bin/env python3
"""Listing time of one flat S3 prefix: serial pages against key ranges
listed in parallel (backend_s3.c, SHARDCAST_S3_LIST_SPLIT=0 vs 1).

Stores, all on 127.0.0.1:
- "mem": tests/objstore/listing_support.MemListServer, an in-memory
  ListObjectsV2 server, behind tests/support/faultproxy.py with every
  listing page delayed by --latency-ms (S3 answers a LIST page in about
  20-50 ms; the delay is what parallel listing hides);
- "s3rver" (with --s3rver): s3rver 3.7.1 with the keys written straight
  into its data directory; its pages cost its single thread 1-2 s each
  at 100k keys, so it measures s3rver more than the listing.

Every run is `sio_epoch_dump --list s3://b/flat/` (keys flat/img-NNNNNNN.tar)
and must return exactly the sorted key set. Prints a table (and --json).

    bench/listing.py                         # 100k keys, 0/25/50 ms, 3 runs
    bench/listing.py --s3rver --runs 1       # and s3rver (~10 minutes)
    bench/listing.py --keys 20000 --latency-ms 25 --workers 1,2,4,8,16

Needs the build (--build, default build/, or $SHARDCAST_BUILD).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "objstore"))

from support.faultproxy import FaultProxy, Rule  # noqa: E402
from support.s3rver import S3rver  # noqa: E402
import listing_support as ls  # noqa: E402


def listing(endpoint, bucket, want, split, workers, timeout):
    got, secs, err = ls.run_list("s3://%s/flat/" % bucket, endpoint,
                                 split=split, workers=workers,
                                 extra=("-v",), timeout=timeout)
    if got != want:
        raise SystemExit("wrong listing: %d keys, %d wanted (split=%s)"
                         % (len(got), len(want), split))
    pages = splits = None
    for line in err.splitlines():
        if "event=s3_listed" in line:
            kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
            pages, splits = int(kv["pages"]), int(kv["splits"])
    return secs, pages, splits


def measure(label, endpoint, bucket, want, args, rows, proxy=None):
    for workers in args.workers:
        for split in (False, True):
            if not split and workers != args.workers[0]:
                continue  # serial is one thread's work whatever the count
            times, pages, splits = [], None, None
            for _ in range(args.runs):
                if proxy:
                    proxy.reset_counters()
                secs, pages, splits = listing(endpoint, bucket, want, split,
                                              workers, args.timeout)
                times.append(secs)
            row = {"store": label, "keys": len(want),
                   "mode": "ranges" if split else "serial",
                   "workers": workers if split else 1,
                   "runs": args.runs, "median_s": statistics.median(times),
                   "min_s": min(times), "max_s": max(times),
                   "pages": pages, "splits": splits}
            rows.append(row)
            print("%-22s %-7s workers=%-3s median %7.2f s  (min %.2f max "
                  "%.2f)  pages %s  splits %s" % (
                      label, row["mode"], row["workers"], row["median_s"],
                      row["min_s"], row["max_s"], pages, splits), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--latency-ms", default="0,25,50",
                    help="per-page delays through the fault proxy (in-memory server)")
    ap.add_argument("--workers", default="8",
                    help="SHARDCAST_S3_LIST_WORKERS values for the ranges")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--s3rver", action="store_true",
                    help="also list s3rver (slow: minutes per listing)")
    ap.add_argument("--s3rver-latency-ms", default="",
                    help="also s3rver behind the proxy with these delays")
    ap.add_argument("--build", default=os.environ.get("SHARDCAST_BUILD") or
                    str(REPO / "build"))
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    args.workers = [int(w) for w in args.workers.split(",") if w]
    os.environ["SHARDCAST_BUILD"] = args.build
    keys = ["flat/img-%07d.tar" % i for i in range(args.keys)]
    rows = []
    print("listing %d keys under one prefix; %s, %d cores, load %s" % (
        len(keys), platform.platform(), os.cpu_count(),
        " ".join("%.1f" % x for x in os.getloadavg())), flush=True)

    with ls.MemListServer(keys) as mem:
        want = ["s3://b/" + k for k in keys]
        for ms in [int(x) for x in args.latency_ms.split(",") if x]:
            rules = [Rule.stall(seconds=ms / 1000.0, after_bytes=0,
                                query="list-type")] if ms else []
            with FaultProxy(upstream=mem.url, rules=rules) as proxy:
                measure("mem+proxy %d ms/page" % ms, proxy.url, "b", want,
                        args, rows, proxy)

    if args.s3rver or args.s3rver_latency_ms:
        with S3rver() as srv:
            srv.create_bucket("data")
            t0 = time.monotonic()
            ls.write_s3rver_objects(srv.directory, "data", keys)
            print("s3rver: %d keys written in %.1f s" % (
                len(keys), time.monotonic() - t0), flush=True)
            want = ["s3://data/" + k for k in keys]
            if args.s3rver:
                measure("s3rver", srv.endpoint, "data", want, args, rows)
            for ms in [int(x) for x in args.s3rver_latency_ms.split(",")
                       if x]:
                rules = [Rule.stall(seconds=ms / 1000.0, after_bytes=0,
                                    query="list-type")]
                with FaultProxy(upstream=srv.endpoint, rules=rules) as proxy:
                    measure("s3rver+proxy %d ms/page" % ms, proxy.url,
                            "data", want, args, rows, proxy)

    print()
    print("| store | mode | workers | median s | pages | speed-up |")
    print("| --- | --- | --- | --- | --- | --- |")
    serial = {}
    for r in rows:
        if r["mode"] == "serial":
            serial[r["store"]] = r["median_s"]
        base = serial.get(r["store"])
        print("| %s | %s | %d | %.2f | %s | %s |" % (
            r["store"], r["mode"], r["workers"], r["median_s"], r["pages"],
            "%.1fx" % (base / r["median_s"]) if base else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "load": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
