#!/usr/bin/python3
"""Throughput of one consumer's stream as the Python client reads it, in each
wire format, next to the raw transfer of the same stream by curl.

Methods, each run --runs times (medians reported):
  python-frames   shardcast.FramesReader over format=frames (parsed samples)
  python-tar      shardcast.StreamReader over format=tar (parsed samples)
  curl-frames     curl -o /dev/null of the format=frames stream (no parsing)
  curl-tar        curl -o /dev/null of the format=tar stream
Samples/s of a curl row uses the sample count of the same format's Python
read (the same stream). MB/s counts HTTP body bytes (10^6 bytes).

Against a running server:
    /usr/bin/python3 bench/client_formats.py --url http://127.0.0.1:8080 --job train
Or let the script start shardcastd on a free loopback port over a dataset
(made by tests/tools/mkwds.py when --make-dataset is given):
    /usr/bin/python3 bench/client_formats.py --server build/shardcastd \\
        --make-dataset /tmp/bench-wds --runs 5 --json /tmp/client_formats.json

This is a benchmark, not a test: it asserts nothing beyond every stream
completing. A format the server does not serve is reported as such.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import shardcast  # noqa: E402

METHODS = ("python-frames", "python-tar", "curl-frames", "curl-tar")


def start_server(binary, source, job, extra):
    args = [binary, "--listen", "127.0.0.1", "--port", "0", "--job", job,
            "--source", source] + extra
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    line = proc.stdout.readline().decode("utf-8", "replace").strip()
    if not line.startswith("listening="):
        proc.kill()
        proc.wait()
        raise SystemExit("shardcastd did not start: %r" % line)
    host, _, port = line[len("listening="):].rpartition(":")
    return proc, "http://%s:%s" % (host.strip("[]"), port)


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def python_read(url, fmt, timeout):
    cls = shardcast.FramesReader if fmt == "frames" else shardcast.StreamReader
    t0 = time.perf_counter()
    n = 0
    with cls(url, timeout=timeout) as r:
        for _ in r:
            n += 1
        nbytes = r.bytes_read
    return n, nbytes, time.perf_counter() - t0


def curl_read(curl, url, timeout):
    out = subprocess.run([curl, "-sS", "--fail", "-o", "/dev/null", "--max-time",
                          str(timeout), "-w", "%{size_download} %{time_total}", url],
                         capture_output=True, text=True, timeout=timeout + 10)
    if out.returncode != 0:
        raise RuntimeError("curl exit %d: %s" % (out.returncode, out.stderr.strip()))
    size, secs = out.stdout.split()
    return int(size), float(secs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="root URL of a running shardcastd")
    ap.add_argument("--server", help="shardcastd binary to start instead of --url")
    ap.add_argument("--source", help="dataset for --server")
    ap.add_argument("--make-dataset", metavar="DIR",
                    help="write a dataset with mkwds.py into DIR and use it as --source")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--samples-per-shard", type=int, default=500)
    ap.add_argument("--sample-size", type=int, default=20000)
    ap.add_argument("--job", default="train")
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--curl", default=shutil.which("curl") or "curl")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if bool(args.url) == bool(args.server):
        ap.error("give exactly one of --url and --server")

    proc = None
    url = args.url
    if args.server:
        source = args.source
        if args.make_dataset:
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "mkwds.py"),
                            "--out", args.make_dataset, "--shards", str(args.shards),
                            "--samples-per-shard", str(args.samples_per_shard),
                            "--size", str(args.sample_size)], check=True,
                           stdout=subprocess.DEVNULL)
            source = args.make_dataset
        if not source:
            ap.error("--server needs --source or --make-dataset")
        proc, url = start_server(args.server, source, args.job, [])
    try:
        results = run(args, url)
    finally:
        if proc is not None:
            stop_server(proc)
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"url": url, "job": args.job, "epoch": args.epoch, "rank": args.rank,
                       "world": args.world, "runs": args.runs, "results": results}, f,
                      indent=2)
        print("wrote %s" % args.json)
    return 0


def run(args, url):
    results = {}
    samples = {}
    for fmt in ("frames", "tar"):
        surl = shardcast.stream_url(url, args.job, args.epoch, args.rank, args.world, fmt=fmt)
        py = {"samples": [], "bytes": [], "seconds": []}
        cu = {"bytes": [], "seconds": []}
        err = None
        for _ in range(args.runs):
            try:
                n, nbytes, secs = python_read(surl, fmt, args.timeout)
                py["samples"].append(n)
                py["bytes"].append(nbytes)
                py["seconds"].append(secs)
                size, csecs = curl_read(args.curl, surl, args.timeout)
                cu["bytes"].append(size)
                cu["seconds"].append(csecs)
            except (shardcast.ShardcastError, RuntimeError, subprocess.TimeoutExpired) as e:
                err = str(e)
                break
        if err is not None:
            results["python-" + fmt] = results["curl-" + fmt] = {"error": err}
            continue
        samples[fmt] = statistics.median(py["samples"])
        results["python-" + fmt] = summarize(py["samples"], py["bytes"], py["seconds"])
        results["curl-" + fmt] = summarize([samples[fmt]] * len(cu["bytes"]), cu["bytes"],
                                           cu["seconds"])
    return results


def summarize(samples, nbytes, seconds):
    sps = [n / s for n, s in zip(samples, seconds)]
    mbs = [b / s / 1e6 for b, s in zip(nbytes, seconds)]
    return {"samples": int(statistics.median(samples)), "bytes": int(statistics.median(nbytes)),
            "seconds_median": statistics.median(seconds),
            "samples_per_s_median": statistics.median(sps),
            "mb_per_s_median": statistics.median(mbs),
            "runs": [{"samples": n, "bytes": b, "seconds": s}
                     for n, b, s in zip(samples, nbytes, seconds)]}


def print_table(results):
    print("%-14s %9s %12s %10s %12s %10s" % ("method", "samples", "body MB", "seconds",
                                             "samples/s", "MB/s"))
    for m in METHODS:
        r = results.get(m)
        if r is None:
            continue
        if "error" in r:
            print("%-14s  unavailable: %s" % (m, r["error"][:100]))
            continue
        print("%-14s %9d %12.1f %10.3f %12.0f %10.1f" % (
            m, r["samples"], r["bytes"] / 1e6, r["seconds_median"],
            r["samples_per_s_median"], r["mb_per_s_median"]))


if __name__ == "__main__":
    sys.exit(main())
