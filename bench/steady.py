#!/usr/bin/python3
"""The steady state of a long-running server (bench/steady.sh).

bench/run.sh starts a fresh shardcastd for every run and reads one epoch:
every sample lands in memory the process never touched, so its figures
include the page faults of first use. A deployed server reads epoch after
epoch. This benchmark keeps one shardcastd per (shape, variant) and reads
epochs 0 .. E-1 in turn with `shardcast bench` (W C consumers in one
process, frames, --verify against the manifest; nginx on 127.0.0.1 as the
source, the server flags of bench/run.sh). Per epoch it records samples/s,
payload MB/s, the server's CPU (utime + stime from /proc) as µs per sample
and core-seconds per GB delivered, and its minor page faults (MiB of 4 KiB
pages). The reported figure of a server is the median over epochs 2 .. E-1
(epochs 0 and 1 fill the sample pool: two epochs' windows are held while
the third starts).

The loopback ceiling (W parallel `curl` processes over the shards from the
same nginx, as in bench/run.sh) runs before every round of servers, so the
"× ceiling" ratios come from one run. With --source http there is a second
ceiling, the relay: the same curl processes through a second nginx that
proxies the store (proxy_pass, buffering on, no cache): on loopback the
server receives every byte and sends it again, and so does the relay
("× relay").

Variants, alternated server by server (A, B, A, B, ...; medians over the
repetitions), in two sets (--variants):
  decay (the default set): the server as configured by bench/run.sh
  default   the server's defaults (sample-pool-decay-ms 10 s)
  no-decay  --sample-pool-decay-ms 0: sample memory released above
            sample-pool-idle gives its pages back at once (what every
            server did before the decay)
  planes: both keep the shards in the shard cache (in memory), so every
  epoch after the first reads no byte from nginx
  feed      --data-plane stream: every stream reads the epoch's shared feed
            (one producer, one window)
  plan      --data-plane auto (the default): from epoch 1 on, the epoch's
            plan is computed from the indexes and every stream reads its
            share from the cached shards itself

Output: results.json and results.md in --out.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import bench_contenders as bc  # noqa: E402
from bench_env import REPO, Nginx, ensure_dataset  # noqa: E402
from bench_proc import _stat_fields  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
CLK_TCK = os.sysconf("SC_CLK_TCK")
CACHE = ["--cache-bytes", str(4 << 30)]
VARIANT_SETS = {
    "decay": [("default", []),
              ("no-decay", ["--sample-pool-decay-ms", "0"])],
    "planes": [("feed", CACHE + ["--data-plane", "stream"]),
               ("plan", CACHE + ["--data-plane", "auto"])],
    # The first pass with no index: the feed, against the plan that grows
    # while the shards are indexed (--source local: epoch 0 of local
    # shards; the later epochs are planned in both; --source http: every
    # epoch, the plan's shards staged in memory).
    "first": [("feed", ["--data-plane", "stream"]),
              ("plan", ["--data-plane", "auto", "--stage-bytes", "1GiB",
                        "--stage-indexed", "true"])],
}
# Where the servers read the shards: nginx (http) or the files (local).
SOURCE = "http"
VARIANTS = VARIANT_SETS["decay"]
# The per-epoch figures a server's median is taken of.
FIGURES = ("samples_per_s", "mb_per_s", "server_us_per_sample",
           "server_core_s_per_gb", "minor_fault_mib")
FORMAT = "shardcast-steady/1"


def proc_counters(pid):
    """(cpu seconds, minor faults) of a live pid."""
    f = _stat_fields(pid)
    if f is None:
        raise bc.ContenderError("shardcastd %d is gone" % pid)
    # After the name: state(0) ... minflt(7) ... utime(11) stime(12).
    return (int(f[11]) + int(f[12])) / CLK_TCK, int(f[7])


class Ctx:
    """The little of bench.Ctx that bench_contenders.Server needs."""

    def __init__(self, build, workdir):
        self.workdir = workdir
        self.server_bin = os.path.join(build, "shardcastd")
        self.server_flags = []  # set per server by run_server
        self.nginx = None
        self.curl = shutil.which("curl")
        self.relay = None
        self.timeout = 600

    def track(self, pid):
        pass

    def aborted(self):
        return None


def run_server(ctx, cli, ds, workers, epochs, extra, log):
    """One server, epochs 0 .. epochs-1; returns the per-epoch records."""
    ctx.server_flags = ["--shuffle-buffer", str(bench.SHUFFLE_BUFFER),
                        "--shuffle-buffer-bytes", bench.SERVER_BUFFER_BYTES
                        ] + extra
    if SOURCE == "local":
        source = "%s/%s-{%06d..%06d}.tar" % (ds.path, ds.shape.name, 0,
                                              len(ds.files) - 1)
    else:
        source = bc.server_source(ctx, ds, "http")
    srv = bc.Server(ctx, source)
    out = []
    try:
        for e in range(epochs):
            args = cli.command(srv.url, bc.JOB, e, workers, ds.manifest_path,
                               "frames")
            cpu0, flt0 = proc_counters(srv.proc.pid)
            t0 = time.perf_counter()
            p = subprocess.run(args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=ctx.timeout)
            wall = time.perf_counter() - t0
            cpu1, flt1 = proc_counters(srv.proc.pid)
            if p.returncode != 0:
                raise bc.ContenderError("shardcast bench exit %d: %s\n%s" % (
                    p.returncode, p.stderr.decode()[-1500:],
                    srv.log_tail()[-1500:]))
            res = cli.parse(p.stdout.decode(), wall)
            n, b = res["samples"], res["payload_bytes"]
            rec = {"epoch": e, "samples": n, "payload_bytes": b,
                   "seconds": res["elapsed_s"],
                   "samples_per_s": n / res["elapsed_s"],
                   "mb_per_s": b / res["elapsed_s"] / 1e6,
                   "server_cpu_s": cpu1 - cpu0,
                   "server_us_per_sample": (cpu1 - cpu0) / n * 1e6,
                   "server_core_s_per_gb": (cpu1 - cpu0) / (b / 1e9),
                   "minor_fault_mib": (flt1 - flt0) * PAGE / 1048576,
                   "exactly_once": bool(res["verify"].get("ok"))}
            log("  epoch %d: %.0f samples/s, server %.2f µs/sample, "
                "%.0f MiB faulted, exactly-once %s" % (
                    e, rec["samples_per_s"], rec["server_us_per_sample"],
                    rec["minor_fault_mib"], rec["exactly_once"]))
            out.append(rec)
    finally:
        rc, _ = srv.stop()
    if rc != 0:
        raise bc.ContenderError("shardcastd exit %d:\n%s" % (rc,
                                                             srv.log_tail()))
    return out


def curl_ceiling(ctx, ds, workers, via=None):
    """samples/s of W curl processes from the store, or through via."""
    store = ctx.nginx
    if via is not None:
        ctx.nginx = via
    try:
        r = bc.CurlCeiling("http").run(ctx, ds, workers, "")
    finally:
        ctx.nginx = store
    return r["samples"] / r["elapsed_s"]


def measure_shape(ctx, cli, ds, workers, args, log):
    """Every variant of one shape at W = workers: args.repeat rounds of
    (curl ceiling, one server per variant); a row per variant."""
    shape = ds.shape
    per = {name: [] for name, _ in VARIANTS}
    ceiling, relayed = [], []
    for rep in range(args.repeat):
        if ctx.curl:
            ceiling.append(curl_ceiling(ctx, ds, workers))
            log("%s, W = %d, curl ceiling: %.0f samples/s" % (
                shape.name, workers, ceiling[-1]))
            if ctx.relay is not None:
                relayed.append(curl_ceiling(ctx, ds, workers, ctx.relay))
                log("%s, W = %d, curl through the relay: %.0f samples/s" % (
                    shape.name, workers, relayed[-1]))
        for name, extra in VARIANTS:
            log("%s, W = %d, %s, server %d/%d" % (shape.name, workers, name,
                                                  rep + 1, args.repeat))
            per[name].append(run_server(ctx, cli, ds, workers, args.epochs,
                                        extra, log))
    rows = []
    for name, _ in VARIANTS:
        sums = [summarize(e) for e in per[name]]
        med = {k: statistics.median(s[k] for s in sums) for k in FIGURES}
        med["first_epoch_us_per_sample"] = statistics.median(
            s["first_epoch"]["server_us_per_sample"] for s in sums)
        med["first_epoch_samples_per_s"] = statistics.median(
            s["first_epoch"]["samples_per_s"] for s in sums)
        med["ceiling_samples_per_s"] = (statistics.median(ceiling)
                                        if ceiling else None)
        med["relay_samples_per_s"] = (statistics.median(relayed)
                                      if relayed else None)
        rows.append({"shape": shape.label, "workers": workers,
                     "variant": name, "median": med,
                     "exactly_once": all(s["exactly_once"] for s in sums),
                     "servers": per[name]})
    return rows


def summarize(epochs):
    steady = [r for r in epochs if r["epoch"] >= 2] or epochs
    s = {k: statistics.median(r[k] for r in steady) for k in FIGURES}
    s["first_epoch"] = {k: epochs[0][k] for k in FIGURES}
    s["exactly_once"] = all(r["exactly_once"] for r in epochs)
    return s


def markdown(doc):
    lines = ["# Steady state of a long-running server", "",
             "Command: `%s`  " % doc["command"],
             "Date: %s; tree %s; %s" % (doc["date"], doc["tree"],
                                        doc["machine"]), "",
             "One shardcastd per row reads epochs 0..%d from nginx with "
             "`shardcast bench` (W consumers, frames, --verify); the ceiling "
             "is W parallel curl processes; figures are the "
             "median over epochs 2..%d of each server, then the median over "
             "%d servers per variant. Server CPU from /proc (utime + stime); "
             "page faults are the server's minor faults per epoch." % (
                 doc["epochs"] - 1, doc["epochs"] - 1,
                 doc["repeat"]), "",
             "Shards read by the servers: %s." % (
                 "the files on local disk (the ceiling still fetches them "
                 "from nginx)" if doc.get("source") == "local"
                 else "from nginx"), "",
             "| shape | W | variant | samples/s | MB/s | × ceiling | "
             "× relay | server µs/sample | server core-s/GB | "
             "faulted MiB/epoch | epoch 0 µs/sample | epoch 0 samples/s | "
             "epoch 0 × ceiling | epoch 0 × relay | exactly-once |",
             "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for row in doc["rows"]:
        m = row["median"]
        c = m.get("ceiling_samples_per_s")
        ratio = "%.2f (%.0f)" % (m["samples_per_s"] / c, c) if c else "–"
        f0 = m.get("first_epoch_samples_per_s")
        r0 = "%.2f" % (f0 / c) if c and f0 else "–"
        rl = m.get("relay_samples_per_s")
        rr = "%.2f (%.0f)" % (m["samples_per_s"] / rl, rl) if rl else "–"
        rr0 = "%.2f" % (f0 / rl) if rl and f0 else "–"
        lines.append("| %s | %d | %s | %.0f | %.0f | %s | %s | %.2f | %.2f "
                     "| %.0f | %.2f | %s | %s | %s | %s |"
                     % (row["shape"], row["workers"], row["variant"],
                        m["samples_per_s"],
                        m["mb_per_s"], ratio, rr, m["server_us_per_sample"],
                        m["server_core_s_per_gb"], m["minor_fault_mib"],
                        m["first_epoch_us_per_sample"],
                        "%.0f" % f0 if f0 else "–", r0, rr0,
                        "yes" if row["exactly_once"] else "NO"))
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=None,
                    help="dataset cache (default: BUILD/bench-data)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results",
                                                  "steady"))
    ap.add_argument("--workers", default="1,4",
                    help="consumer counts, comma-separated (default 1,4)")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="tiny datasets, 3 epochs, one server per variant")
    ap.add_argument("--command", default="bench/steady.sh")
    ap.add_argument("--variants", default="decay",
                    choices=sorted(VARIANT_SETS),
                    help="decay: default vs --sample-pool-decay-ms 0; "
                         "planes: --data-plane stream vs auto, shards "
                         "in the cache; first: stream vs auto, no cache "
                         "(the first pass)")
    ap.add_argument("--source", default="http", choices=("http", "local"),
                    help="where the servers read the shards (the ceiling "
                         "always reads nginx)")
    args = ap.parse_args(argv)
    global VARIANTS, SOURCE
    VARIANTS = VARIANT_SETS[args.variants]
    SOURCE = args.source
    try:
        args.workers = [int(w) for w in args.workers.split(",") if w]
    except ValueError:
        sys.exit("steady: --workers takes numbers, e.g. 1,4")
    if args.quick:
        args.epochs, args.repeat = 3, 1
    shapes = bench.quick_shapes() if args.quick else bench.full_shapes()
    data = args.data or os.path.join(args.build, "bench-data")
    cli, why = bench.CliBench.detect(args.build)
    if not cli:
        sys.exit("steady: %s" % why)
    log = bench.log
    workdir = tempfile.mkdtemp(prefix="shardcast-steady-")
    ctx = Ctx(args.build, workdir)
    ctx.nginx = Nginx(os.path.join(data, "datasets"), workdir)
    rows = []
    try:
        ctx.nginx.start()
        if args.source == "http":
            ctx.relay = Nginx(None, workdir, upstream=ctx.nginx.url).start()
        for shape in shapes:
            ds = ensure_dataset(data, shape, log)
            for w in args.workers:
                rows += measure_shape(ctx, cli, ds, w, args, log)
    finally:
        if ctx.relay is not None:
            ctx.relay.stop()
        if ctx.nginx.proc is not None:
            ctx.nginx.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    doc = bench.results_header(FORMAT, args.command)
    doc.update({"workers": args.workers, "epochs": args.epochs,
                "source": args.source, "repeat": args.repeat, "rows": rows})
    md = markdown(doc)
    bench.write_results(args.out, doc, md)
    sys.stdout.write(md)
    return 0 if all(r["exactly_once"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
