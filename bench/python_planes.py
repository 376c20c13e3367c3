#!/usr/bin/python3
"""The Python readers on both data planes (a steady-state check of the
issue "Serve at line rate": the Python readers no slower on the plan than
on the feed).

For each W and each plane (feed = --data-plane stream, plan = auto), one
shardcastd reads the bench dataset of a shape from nginx with the shards
in the shard cache (memory); `shardcast bench` reads epoch 0 (it fills the
cache and indexes the shards), then the DataLoader of bench/loader_run.py
(the `shardcast` contender of bench/run.sh: ShardcastDataset, frames, W
workers, batches of 256, every sample verified against the manifest)
reads epochs 1..E. Servers alternate feed, plan, feed, plan...; the
figure is the median samples/s over epochs 2..E, then over the rounds.

  bench/python_planes.sh [--workers 1,4] [--epochs 4] [--rounds 2]
                         [--shape images|tokens] [--quick] [--out DIR]

Needs what bench/run.sh needs (bench/python_planes.sh installs it through
bench/prepare.sh: nginx, python3-torch, the build). --quick: the tiny
dataset of the shape, W = 2, 2 epochs, one round (the smoke test). Output:
results.json and results.md in --out.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import bench_contenders as bc  # noqa: E402
from bench_env import REPO, Nginx, ensure_dataset  # noqa: E402
from steady import CACHE, Ctx  # noqa: E402

PLANES = [("feed", CACHE + ["--data-plane", "stream"]),
          ("plan", CACHE + ["--data-plane", "auto"])]


def loader_epoch(ctx, srv, ds, workers, epoch):
    """One DataLoader epoch through loader_run.py: samples/s, verified."""
    stats = tempfile.mkdtemp(prefix="stats-", dir=ctx.workdir)
    spec = {"kind": "shardcast", "server": srv.url, "job": bc.JOB,
            "format": "frames", "workers": workers,
            "manifest": ds.manifest_path, "stats_dir": stats,
            "seed": bc.SEED, "epoch": epoch, "shuffle_buffer": 0}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "clients", "python")
    env["SHARDCAST_BUILD"] = ctx.build
    env["OMP_NUM_THREADS"] = "1"
    env["HOME"] = stats
    p = subprocess.run([sys.executable, os.path.join(HERE, "loader_run.py"),
                        json.dumps(spec)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env, timeout=ctx.timeout)
    if p.returncode != 0:
        raise bc.ContenderError("loader exit %d: %s" % (
            p.returncode, p.stderr.decode()[-1500:]))
    res = json.loads(p.stdout.decode().strip().splitlines()[-1])
    if not res["verify"].get("ok"):
        raise bc.ContenderError("epoch %d not exactly once: %s" % (
            epoch, res["verify"]))
    return res["samples"] / res["elapsed_s"]


def one_server(ctx, cli, ds, workers, extra, epochs, log):
    ctx.server_flags = ["--shuffle-buffer", str(bench.SHUFFLE_BUFFER),
                        "--shuffle-buffer-bytes", bench.SERVER_BUFFER_BYTES
                        ] + extra
    srv = bc.Server(ctx, bc.server_source(ctx, ds, "http"))
    try:
        args = cli.command(srv.url, bc.JOB, 0, workers, ds.manifest_path,
                           "frames")
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=ctx.timeout)
        rates = []
        for e in range(1, epochs + 1):
            rates.append(loader_epoch(ctx, srv, ds, workers, e))
            log("  epoch %d: %.0f samples/s" % (e, rates[-1]))
        # Which plane served the streams (the job's status).
        with urllib.request.urlopen(srv.url + "/v1/jobs/" + bc.JOB,
                                    timeout=30) as r:
            plane = json.loads(r.read().decode()).get("data_plane")
    finally:
        srv.stop()
    return rates[1:] or rates, plane


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=None,
                    help="dataset cache (default: BUILD/bench-data)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny dataset, W = 2, 2 epochs, one round")
    ap.add_argument("--command", default="bench/python_planes.sh")
    ap.add_argument("--workers", default="1,4")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shape", default="images",
                    choices=[s.name for s in bench.full_shapes()])
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results",
                                                  "planes-python"))
    args = ap.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",") if w]
    shapes = bench.quick_shapes() if args.quick else bench.full_shapes()
    if args.quick:
        workers, args.epochs, args.rounds = [2], 2, 1
    shape = [s for s in shapes if s.name == args.shape][0]
    cli, why = bench.CliBench.detect(args.build)
    if not cli:
        sys.exit("python_planes: %s" % why)
    data = args.data or os.path.join(args.build, "bench-data")
    workdir = tempfile.mkdtemp(prefix="shardcast-pyplanes-")
    ctx = Ctx(args.build, workdir)
    ctx.build = args.build
    ctx.nginx = Nginx(os.path.join(data, "datasets"), workdir)
    log = bench.log
    rows = []
    try:
        ctx.nginx.start()
        ds = ensure_dataset(data, shape, log)
        for w in workers:
            per = {name: [] for name, _ in PLANES}
            planes = {name: [] for name, _ in PLANES}
            for r in range(args.rounds):
                for name, extra in PLANES:
                    log("%s, W = %d, %s, round %d" % (shape.name, w, name,
                                                       r + 1))
                    rates, plane = one_server(ctx, cli, ds, w, extra,
                                              args.epochs, log)
                    per[name].append(statistics.median(rates))
                    planes[name].append(plane)
            feed = statistics.median(per["feed"])
            plan = statistics.median(per["plan"])
            rows.append({"shape": shape.label, "workers": w,
                         "feed_samples_per_s": feed,
                         "plan_samples_per_s": plan,
                         "plan_over_feed": plan / feed,
                         "rounds": per, "data_plane": planes})
    finally:
        if ctx.nginx.proc is not None:
            ctx.nginx.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    tree = bench.tree_state()
    doc = {"format": "shardcast-planes-python/1", "command": args.command,
           "tree": tree["commit"][:7], "epochs": args.epochs,
           "rounds": args.rounds, "rows": rows}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["# Python readers on both data planes", "",
             "Command: `%s`; tree %s; medians over epochs 2..%d, then over "
             "%d rounds." % (doc["command"], doc["tree"], args.epochs,
                             args.rounds), "",
             "| shape | W | feed samples/s | plan samples/s | plan / feed |",
             "|---|--:|--:|--:|--:|"]
    for r in rows:
        lines.append("| %s | %d | %.0f | %.0f | %.2f |" % (
            r["shape"], r["workers"], r["feed_samples_per_s"],
            r["plan_samples_per_s"], r["plan_over_feed"]))
    md = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
