#!/usr/bin/python3
"""Map-style access: GET /v1/jobs/{job}/samples/{i} at random i
(bench/samples.sh).

One shardcastd per run serves the bench dataset of a shape from its local
shard files, or with --source http from nginx (a brace pattern, no shard
cache), the server flags of bench/run.sh otherwise default. A first
request for the last sample has every shard indexed; then, each over the
same random indices:
  - keep-alive: one HTTP/1.1 connection for every request (http.client),
    as a client that keeps its connection does;
  - new connection: a connection per request, as urllib does;
  - map dataset: shardcast.ShardcastMapDataset[i] (the Python client's
    map-style dataset: a connection per sample, frames decoded into a
    dict).
Every answer of the first two is checked against the manifest (the key at
that index and each field's sha256). Reported per tree, shape and way:
requests/s, the median and 99th-percentile latency, and the server's CPU
(utime + stime) per request over the requests alone; and how the server
says it served them (data_plane.sample_plan_streams and
sample_feed_streams).

With --other-build the two trees alternate run by run (A, B, A, B...),
one server each; medians over --runs.

Output: results.json and results.md in --out.
"""
import argparse
import hashlib
import http.client
import io
import json
import os
import random
import statistics
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench_env import Nginx, ensure_dataset  # noqa: E402

REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
FORMAT = 1
WAYS = ("keep-alive", "new connection", "map dataset")


def server_cpu(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def check(manifest, i, body):
    """The tar body of samples/i against the manifest: '' or what is wrong."""
    want = manifest["samples"][i]
    got = {}
    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        for m in t:
            if not m.isfile() or m.name.endswith("__shardcast_end__"):
                continue
            base = m.name.rsplit("/", 1)[-1]
            got[base.split(".", 1)[1]] = t.extractfile(m).read()
            key = base.split(".", 1)[0]
            if key != want["key"]:
                return "key %s, not %s" % (key, want["key"])
    for ext, f in want["fields"].items():
        if ext not in got or hashlib.sha256(got[ext]).hexdigest() != f["sha256"]:
            return "field %s is not the dataset's" % ext
    return ""


def requests(port, job, indices, manifest, keep):
    """(latencies, errors) of GET samples/i for each i: over one connection
    when keep, else a connection each."""
    lat, errors = [], []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60) if keep else None
    for i in indices:
        c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t0 = time.perf_counter()
        c.request("GET", "/v1/jobs/%s/samples/%d?format=tar" % (job, i))
        r = c.getresponse()
        body = r.read()
        lat.append(time.perf_counter() - t0)
        if not keep:
            c.close()
        why = "status %d" % r.status if r.status != 200 else check(manifest, i, body)
        if why:
            errors.append("samples/%d: %s" % (i, why))
    if conn:
        conn.close()
    return lat, errors


def map_dataset(port, job, indices):
    import shardcast
    d = shardcast.ShardcastMapDataset("http://127.0.0.1:%d" % port, job)
    lat = []
    for i in indices:
        t0 = time.perf_counter()
        s = d[i]
        lat.append(time.perf_counter() - t0)
        assert s["__index__"] == i
    return lat


def one_server(build, ds, manifest, indices, workdir, nginx=None):
    proc, port, log = bench.start_job_server(build, ds, workdir,
                                             nginx.url if nginx else None)
    out = {}
    try:
        n = manifest["total_samples"]
        _, errors = requests(port, "j", [n - 1], manifest, False)  # indexes every shard
        for way in WAYS:
            c0 = server_cpu(proc.pid)
            t0 = time.perf_counter()
            if way == "map dataset":
                lat, errs = map_dataset(port, "j", indices), []
            else:
                lat, errs = requests(port, "j", indices, manifest, way == "keep-alive")
            wall = time.perf_counter() - t0
            cpu = server_cpu(proc.pid) - c0
            errors += errs
            lat.sort()
            out[way] = {"per_s": len(indices) / wall,
                        "p50_ms": 1e3 * lat[len(lat) // 2],
                        "p99_ms": 1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                        "server_us": 1e6 * cpu / len(indices)}
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/v1/jobs/j")
        dp = json.loads(c.getresponse().read())["data_plane"]
        c.close()
        out["plan"] = dp.get("sample_streams_in_place", dp.get("sample_plan_streams"))
        out["feed"] = dp.get("sample_streams_fetched", dp.get("sample_feed_streams"))
        out["errors"] = errors[:5]
        out["ok"] = not errors
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    return out


def markdown(doc):
    out = bench.md_head(
        "Map-style access, GET /samples/{i} (bench/samples.sh)", doc,
        "%d random indices per way, %s shards, every shard indexed first; "
        "%d runs per tree, alternating; medians" % (
            doc["requests"], doc["source"], doc["runs"])) + [
           "| shape | tree | way | requests/s | p50 ms | p99 ms | server µs/request | "
           "in place / other streams | checked |",
           "|---|---|---|--:|--:|--:|--:|---|---|"]
    for r in doc["rows"]:
        out.append("| %s | %s | %s | %.0f | %.2f | %.2f | %.0f | %s / %s | %s |" % (
            r["shape"], r["tree"], r["way"], r["per_s"], r["p50_ms"], r["p99_ms"],
            r["server_us"], r["plan"], r["feed"], "yes" if r["ok"] else "NO"))
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    bench.tree_args(ap, REPO, "samples", "the tiny datasets, one run, 200 requests")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--source", choices=("local", "http"), default="local",
                    help="the shards' files, or nginx serving them")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.requests = 1, 200
    shapes, data, builds = bench.tree_setup(args)
    workdir = tempfile.mkdtemp(prefix="shardcast-samples-")
    nginx = Nginx(os.path.join(data, "datasets"), workdir).start() \
        if args.source == "http" else None
    rows = []
    try:
        rows = run_shapes(args, shapes, data, builds, workdir, nginx)
    finally:
        if nginx:
            nginx.stop()
    bench.finish(args, FORMAT, {"runs": args.runs, "requests": args.requests,
                                "source": args.source, "rows": rows}, markdown)
    bad = [r for r in rows if not r["ok"]]
    for r in bad:
        sys.stderr.write("wrong answers (%s, %s): %s\n" % (r["shape"], r["tree"], r))
    return 1 if bad else 0


def run_shapes(args, shapes, data, builds, workdir, nginx):
    rows = []
    for shape in shapes:
        ds = ensure_dataset(data, shape, bench.log)
        with open(os.path.join(ds.path, "manifest.json")) as f:
            manifest = json.load(f)
        rng = random.Random(7)
        indices = [rng.randrange(manifest["total_samples"]) for _ in range(args.requests)]
        runs = {name: [] for name, _ in builds}
        for i in range(args.runs):
            for name, b in builds:
                r = one_server(b, ds, manifest, indices, workdir, nginx)
                bench.log("%s %s run %d: %s" % (shape.name, name, i, ", ".join(
                    "%s %.0f/s" % (w, r[w]["per_s"]) for w in WAYS)))
                runs[name].append(r)
        for name, b in builds:
            rs = runs[name]
            for way in WAYS:
                med = statistics.median
                rows.append({"shape": shape.name, "tree": "%s (%s)" % (name, b), "way": way,
                             "per_s": med(r[way]["per_s"] for r in rs),
                             "p50_ms": med(r[way]["p50_ms"] for r in rs),
                             "p99_ms": med(r[way]["p99_ms"] for r in rs),
                             "server_us": med(r[way]["server_us"] for r in rs),
                             "plan": rs[-1]["plan"], "feed": rs[-1]["feed"],
                             "ok": all(r["ok"] for r in rs),
                             "runs": [r[way] for r in rs]})
    return rows


if __name__ == "__main__":
    sys.exit(main())
