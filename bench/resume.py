#!/usr/bin/python3
"""A resume far into an epoch over the HTTP store (bench/resume.sh).

A training job restarted from a checkpoint: both ranks of world 2 open
an epoch at 90% of their shares at once. One shardcastd per case reads
the bench dataset of a shape from nginx (a brace pattern over http, no
shard cache, the server flags of bench/run.sh). The cases:

- tar: plain tar shards; one server reads epoch 0 whole, then takes the
  resume of epoch 1 (the sizes of the shards are known to it).
- tar-restart: plain tar shards; a server with --state-dir reads epoch 2
  whole (every shard's index persisted) and stops; a new server on the
  same state_dir takes the resume of epoch 2 as its first streams (no
  size of a shard is known to it: the brace pattern lists none).
- targz: the same shards gzipped (made once beside the dataset); one
  server reads epoch 0 whole, then takes the resume of epoch 1.
- targz-restart: the gzipped shards as tar-restart.

Each resume is `shardcast bench --world 2 -n 2 --start P --verify` (every
sample checked against the manifest). Reported per case and tree: the
time to the first sample (the slower rank's), the resume's wall time to
the end of both shares, the bytes nginx sent for it against the rest of
the epoch's share of the dataset (10% of it), and which data plane
served the streams.

With --other-build the two trees alternate run by run (A, B, A, B...);
the medians of both come from one run. Output: results.json and
results.md in --out.
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench_env import Dataset, Nginx, ensure_dataset  # noqa: E402
from late_world import store_bytes  # noqa: E402

REPO = os.path.dirname(HERE)
FORMAT = 1
CASES = ("tar", "tar-restart", "targz", "targz-restart")


def gz_dataset(ds):
    """The dataset's shards gzipped (level 1), beside it, once: a Dataset
    whose files end in .tar.gz (the manifest is the same samples')."""
    path = ds.path.rstrip("/") + "-gz"
    stamp = os.path.join(path, ".complete")
    if not os.path.exists(stamp):
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.makedirs(path)
        for f in sorted(os.listdir(ds.path)):
            src = os.path.join(ds.path, f)
            if f.endswith(".tar"):
                with open(src, "rb") as i, gzip.open(os.path.join(path, f + ".gz"),
                                                     "wb", compresslevel=1) as o:
                    shutil.copyfileobj(i, o, 1 << 20)
            elif f == "manifest.json":
                shutil.copy(src, path)
        with open(stamp, "w") as f:
            f.write("ok\n")
    return Dataset(ds.shape, path)


def cli(build, url, epoch, world, manifest, start=None):
    """`shardcast bench` of every rank of world at once: its JSON summary
    and the wall time."""
    cmd = [os.path.join(build, "shardcast"), "bench", "--server", url, "--job", "j",
           "--epoch", str(epoch), "--world", str(world), "-n", str(world),
           "--verify", manifest, "--json"]
    if start is not None:
        cmd += ["--start", str(start)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError("shardcast bench exit %d: %s" % (p.returncode,
                                                             p.stderr.decode()[-1500:]))
    return json.loads(p.stdout), wall


def status(url):
    with urllib.request.urlopen(url + "/v1/jobs/j", timeout=30) as f:
        return json.load(f)


def one_case(build, nginx, ds, case, workdir, buffer, stage_bytes=None):
    gz = case.startswith("targz")
    ext = ".tar.gz" if gz else ".tar"
    restart = case.endswith("restart")
    state = tempfile.mkdtemp(prefix="state-", dir=workdir)
    extra = ("--shuffle-buffer", str(buffer))
    if stage_bytes:
        extra += ("--stage-bytes", stage_bytes)
    if restart:
        extra += ("--state-dir", state)
    manifest = os.path.join(ds.path, "manifest.json")
    epoch = 2 if restart else 1
    proc, port, log = bench.start_job_server(build, ds, workdir, nginx.url, ext, extra)
    try:
        url = "http://127.0.0.1:%d" % port
        cli(build, url, epoch if restart else 0, 1, manifest)
        if restart:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
            proc, port, log = bench.start_job_server(build, ds, workdir, nginx.url, ext,
                                                     extra)
            url = "http://127.0.0.1:%d" % port
        share = ds.total_samples // 2
        start = share * 9 // 10
        time.sleep(0.5)  # nginx logs a request once it is done
        sent0 = store_bytes(nginx)
        r, wall = cli(build, url, epoch, 2, manifest, start)
        time.sleep(0.5)
        st = status(url)
        dp, sg = st.get("data_plane") or {}, st.get("staging") or {}
        return {"first_sample_s": (r.get("ttfs_s") or {}).get("max"),
                "wall_s": wall, "samples": r.get("samples"),
                "verify_ok": bool((r.get("verify") or {}).get("ok", True)) and
                not r.get("failed"),
                "store_bytes": store_bytes(nginx) - sent0,
                "feed_streams": dp.get("feed_streams"),
                "plan_streams": dp.get("plan_streams"),
                "shards_deferred": sg.get("shards_deferred"),
                "restages": sg.get("restages"), "summary": r}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        shutil.rmtree(state, ignore_errors=True)


def markdown(doc):
    out = bench.md_head(
        "A resume at 90% of an epoch over the HTTP store (bench/resume.sh)", doc,
        "runs: %d per tree, alternating; medians; shuffle buffer %d; --stage-bytes %s" % (
            doc["runs"], doc["shuffle_buffer"], doc.get("stage_bytes") or "default")) + [
           "| shape | case | tree | first sample s | resume wall s | store bytes / "
           "the rest's | feed streams | plan streams | shards deferred | verified |",
           "|---|---|---|--:|--:|--:|--:|--:|--:|---|"]
    for r in doc["rows"]:
        out.append("| %s | %s | %s | %.3f | %.2f | %.2f | %s | %s | %s | %s |" % (
            r["shape"], r["case"], r["tree"], r["first"], r["wall"], r["bytes_x"],
            r["feed_streams"], r["plan_streams"], r["deferred"],
            "yes" if r["verify_ok"] else "NO"))
    out += ["", "Every run (resume wall s):", ""]
    for r in doc["rows"]:
        out.append("- %s %s %s: %s" % (r["shape"], r["case"], r["tree"], ", ".join(
            "%.2f" % x["wall_s"] for x in r["runs"])))
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    bench.tree_args(ap, REPO, "resume", "the tiny datasets, one run")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--shuffle-buffer", type=int, default=1000,
                    help="the job's shuffle buffer (default 1000, the server's "
                    "default; bench/run.sh's 10,000 holds more than the images "
                    "epoch, so no shard is behind a resume at 90%%)")
    ap.add_argument("--stage-bytes", default=None,
                    help="the server's --stage-bytes (default: its own); below a "
                    "shard's size, a gzipped shard is larger than the budget")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs = 1
    shapes, data, builds = bench.tree_setup(args)
    workdir = tempfile.mkdtemp(prefix="shardcast-resume-")
    rows = []
    nginx = None
    try:
        sets = []
        for shape in shapes:
            ds = ensure_dataset(data, shape, bench.log)
            sets.append((shape, ds, gz_dataset(ds)))
        nginx = Nginx(os.path.join(data, "datasets"), workdir).start()
        for shape, ds, gds in sets:
            for case in args.cases.split(","):
                d = gds if case.startswith("targz") else ds
                rest = sum(os.path.getsize(os.path.join(d.path, f))
                           for f in os.listdir(d.path) if ".tar" in f) / 10.0
                runs = {name: [] for name, _ in builds}
                for i in range(args.runs):
                    for name, b in builds:
                        r = one_case(b, nginx, d, case, workdir, args.shuffle_buffer,
                                     args.stage_bytes)
                        bench.log("%s %s %s run %d: first %.3f s, wall %.2f s, store %.2fx "
                                  "the rest, feed %s, plan %s" % (
                                      shape.name, case, name, i, r["first_sample_s"] or -1,
                                      r["wall_s"], r["store_bytes"] / rest,
                                      r["feed_streams"], r["plan_streams"]))
                        runs[name].append(r)
                for name, b in builds:
                    rs = runs[name]
                    med = statistics.median
                    rows.append({
                        "shape": shape.name, "case": case, "tree": "%s (%s)" % (name, b),
                        "first": med((r["first_sample_s"] or 0) for r in rs),
                        "wall": med(r["wall_s"] for r in rs),
                        "bytes_x": med(r["store_bytes"] / rest for r in rs),
                        "feed_streams": med(r["feed_streams"] or 0 for r in rs),
                        "plan_streams": med(r["plan_streams"] or 0 for r in rs),
                        "deferred": med(r["shards_deferred"] or 0 for r in rs),
                        "verify_ok": all(r["verify_ok"] for r in rs),
                        "runs": rs})
    finally:
        if nginx:
            nginx.stop()
    bench.finish(args, FORMAT, {"runs": args.runs, "rows": rows,
                                "shuffle_buffer": args.shuffle_buffer,
                                "stage_bytes": args.stage_bytes}, markdown)
    return 0 if all(r["verify_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
