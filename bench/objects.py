#!/usr/bin/python3
"""The small-objects benchmark: shardcast's object-set sources against the
loader a PyTorch user writes for a prefix of small objects, and against
parallel curl of the same objects (the store's ceiling). See bench/README.md
("Small objects") for what is measured and how.

    bench/objects.sh                 full run (~30-40 min on 2 cores)
    bench/objects.sh --quick         tiny set, W = 2, one run (the smoke test)

Contenders (each cell: one epoch over the whole set, fresh processes):
  ceiling-curl       one `curl --parallel --parallel-max P` over every object
                     URL, SigV4-signed, to /dev/null (P = --curl-parallel)
  baseline-boto3     W DataLoader workers, each GETting its share of samples
                     object by object with its own boto3 client
                     (bench/objects_loader.py)
  baseline-boto3-tT  the same with T GETs in flight per worker (a thread pool)
  shardcast-nN       one shardcastd with source s3://bench/train/?objects=N,
                     W DataLoader workers with ShardcastDataset (frames)
  shardcast-c-nN     the same server read by `shardcast bench -n W` (C
                     consumer threads), for the first N only

Cells alternate: every repetition runs every (contender, W) once, in an
order rotated between repetitions. Medians over the runs that passed the
exactly-once check. Output: results.json and results.md in --out (default
bench/results/objects-<date>/). `bench/objects.py --report results.json`
recomputes the table of a results.json and writes its results.md again.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from bench_proc import communicate_rusage, kill_tree, wait_rusage  # noqa: E402
from objects_data import BUCKET, Dataset, Store  # noqa: E402

PY = "/usr/bin/python3"
JOB = "objs"
SEED = 7
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def _tail(path, n=2000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class RunError(Exception):
    pass


# -- CPU accounting --------------------------------------------------------------

def proc_cpu_s(pid):
    """utime + stime of a live pid (s), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_s():
    """CPU seconds the whole machine has been busy (all cores, every
    process: /proc/stat minus idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])
    return (total - v[3] - v[4]) / CLK_TCK


def self_cpu_s():
    t = os.times()
    return t.user + t.system


class Meter:
    """CPU of the store and of the whole machine over one cell: what our
    processes did not use of the machine's busy time is other people's
    work (the machine is shared), reported as `other_cores`."""

    def __init__(self, store_pid):
        self.store_pid = store_pid

    def start(self):
        self.t0 = time.monotonic()
        self.busy0 = machine_busy_s()
        self.store0 = proc_cpu_s(self.store_pid)
        self.self0 = self_cpu_s()
        self.load0 = os.getloadavg()[0]
        return self

    def stop(self, ours_cpu_s):
        wall = time.monotonic() - self.t0
        store = proc_cpu_s(self.store_pid) - self.store0
        busy = machine_busy_s() - self.busy0
        mine = ours_cpu_s + (self_cpu_s() - self.self0)
        return {"wall_s": wall, "store_cpu_s": store,
                "store_cores": store / wall if wall else None,
                "machine_busy_cores": busy / wall if wall else None,
                "other_cores": max(0.0, busy - store - mine) / wall if wall else None,
                "loadavg_1m_before": self.load0}


# -- shardcastd --------------------------------------------------------------------

def metrics(url):
    """{name{labels}: value} of the server's /metrics."""
    out = {}
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
    return out


S3 = '{backend="s3"}'
FETCH_COUNTERS = ("requests", "retries", "errors", "throttles")


def fetch_counts(m):
    return {k: m.get("shardcast_fetch_%s_total%s" % (k, S3), 0.0)
            for k in FETCH_COUNTERS}


class Server:
    """One shardcastd for one cell, on a source of objects."""

    def __init__(self, ctx, per_shard, extra=()):
        self.workdir = tempfile.mkdtemp(prefix="srv-", dir=ctx.workdir)
        self.errpath = os.path.join(self.workdir, "stderr.log")
        self.source = "s3://%s/%s?objects=%d" % (BUCKET, ctx.ds.prefix, per_shard)
        self.args = [ctx.server_bin, "--listen", "127.0.0.1", "--port", "0",
                     "--job", JOB, "--source", self.source, "--seed", str(SEED),
                     "--log-level", "info", "--prefetch", "false"] + list(extra)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(ctx.store.env())
        env["HOME"] = self.workdir
        self._err = open(self.errpath, "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                     stderr=self._err, stdin=subprocess.DEVNULL,
                                     env=env)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("listening="):
            self.stop()
            raise RunError("shardcastd did not start: %r %s"
                           % (line, _tail(self.errpath)))
        self.url = "http://" + line.split("=", 1)[1].strip()
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        deadline = time.monotonic() + ctx.timeout
        while True:
            with urllib.request.urlopen(self.url + "/v1/jobs/" + JOB, timeout=30) as r:
                st = json.load(r)
            if st["state"] == "ready":
                break
            if st["state"] == "failed" or time.monotonic() > deadline:
                self.stop()
                raise RunError("job not ready: %s" % st.get("reason"))
            time.sleep(0.2)
        self.ready_s = time.monotonic() - t0
        self.shards = st["shards"]

    def stop(self):
        if self.proc.poll() is None and self.proc.returncode is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        rc, ru = wait_rusage(self.proc, timeout=40)
        self._err.close()
        return rc, ru

    def log_events(self):
        """Warnings and errors the server logged (request lines aside)."""
        out = []
        try:
            with open(self.errpath, errors="replace") as f:
                for line in f:
                    if "level=warn" in line or "level=error" in line:
                        out.append(line.strip()[:300])
        except OSError:
            pass
        return out


class InflightPoller:
    """Samples shardcast_fetch_inflight (requests in flight at the store)
    every 0.5 s during a cell."""

    def __init__(self, url):
        self.url = url
        self.values = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(0.5):
            try:
                m = metrics(self.url)
            except Exception:  # noqa: BLE001 (a missed sample is fine)
                continue
            self.values.append(sum(v for k, v in m.items()
                                   if k.startswith("shardcast_fetch_inflight")))

    def stop(self):
        self._stop.set()
        self._t.join(5)
        v = self.values
        return {"mean": statistics.mean(v) if v else None,
                "max": max(v) if v else None, "polls": len(v)}


# -- the contenders -------------------------------------------------------------------

class Ceiling:
    family = "ceiling"

    def __init__(self, parallel):
        self.parallel = parallel
        self.name = "ceiling-curl"
        self.label = "ceiling: curl --parallel-max %d" % parallel
        self.per_w = False

    def run(self, ctx, workers, rep):
        cfg = os.path.join(ctx.workdir, "curl.cfg")
        if not os.path.exists(cfg):
            with open(cfg, "w") as f:
                for k in ctx.keys:
                    f.write('url = "%s/%s/%s"\noutput = "/dev/null"\n'
                            % (ctx.store.endpoint, BUCKET, k))
        args = [ctx.curl, "-sS", "--fail", "--no-progress-meter", "--parallel",
                "--parallel-max", str(self.parallel),
                "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER",
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                "-w", "%{size_download}\\n", "-K", cfg]
        meter = Meter(ctx.store.pid()).start()
        t0 = time.perf_counter()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        rc, ru, out, err = communicate_rusage(p, ctx.timeout)
        elapsed = time.perf_counter() - t0
        m = meter.stop(ru["cpu_s"])
        if ru["killed"]:
            raise RunError("timeout after %.0f s" % ctx.timeout)
        if rc != 0:
            raise RunError("curl exit %d: %s" % (rc, err.decode()[-300:]))
        sizes = [int(x) for x in out.split()]
        ok = len(sizes) == len(ctx.keys) and sum(sizes) == ctx.ds.info["object_bytes"]
        return dict(m, samples=ctx.ds.samples, objects=len(sizes),
                    payload_bytes=sum(sizes), elapsed_s=elapsed, ttfs_s=None,
                    cpu={"curl": ru["cpu_s"]}, requests={"gets": len(sizes)},
                    verify={"ok": ok, "method": "objects and bytes == the set's"})


def run_loader(ctx, spec, workers, extra_env=None):
    stats_dir = tempfile.mkdtemp(prefix="stats-", dir=ctx.workdir)
    spec = dict(spec, workers=workers, manifest=ctx.ds.manifest_path,
                stats_dir=stats_dir, seed=SEED, epoch=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = stats_dir
    env["PYTHONPATH"] = os.path.join(REPO, "clients", "python")
    env["SHARDCAST_BUILD"] = ctx.build
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra_env or {})
    errpath = os.path.join(stats_dir, "stderr.log")
    with open(errpath, "wb") as err:
        p = subprocess.Popen([PY, os.path.join(HERE, "objects_loader.py"),
                              json.dumps(spec)], stdout=subprocess.PIPE,
                             stderr=err, stdin=subprocess.DEVNULL, env=env)
        rc, ru, out, _ = communicate_rusage(
            p, ctx.timeout, on_timeout=lambda q: kill_tree([q.pid]))
    if ru["killed"]:
        raise RunError("timeout after %.0f s" % ctx.timeout)
    if rc != 0:
        raise RunError("loader exit %d: %s" % (rc, _tail(errpath, 1500)))
    res = json.loads(out.decode().strip().splitlines()[-1])
    res["loader_cpu_s"] = ru["cpu_s"]  # main + workers, whole lifetimes
    return res


class Baseline:
    family = "baseline"

    def __init__(self, threads=1):
        self.threads = threads
        self.name = "baseline-boto3" + ("-t%d" % threads if threads > 1 else "")
        self.label = ("hand-written loader (boto3%s)"
                      % (", %d GETs in flight per worker" % threads
                         if threads > 1 else ""))
        self.per_w = True

    def run(self, ctx, workers, rep):
        spec = {"kind": "baseline", "keys_file": ctx.keys_file,
                "prefix": ctx.ds.prefix, "bucket": BUCKET, "threads": self.threads}
        meter = Meter(ctx.store.pid()).start()
        res = run_loader(ctx, spec, workers, ctx.store.env())
        m = meter.stop(res["loader_cpu_s"])
        gets = sum(w.get("gets", 0) for w in res["workers"])
        retries = sum(w.get("retries", 0) for w in res["workers"])
        return dict(m, samples=res["samples"], payload_bytes=res["payload_bytes"],
                    elapsed_s=res["elapsed_s"], ttfs_s=res["first_batch_s"],
                    cpu={"loader": res["loader_cpu_s"],
                         "workers": res["workers_cpu_s"],
                         "loader_main_epoch": res["main_epoch_cpu_s"]},
                    requests={"gets": gets, "retries": retries},
                    verify=res["verify"])


class Shardcast:
    family = "shardcast"

    def __init__(self, per_shard):
        self.per_shard = per_shard
        self.name = "shardcast-n%d" % per_shard
        self.label = "shardcast, ?objects=%d" % per_shard
        self.per_w = True

    def consume(self, ctx, srv, workers):
        spec = {"kind": "shardcast", "server": srv.url, "job": JOB,
                "format": "frames"}
        return run_loader(ctx, spec, workers)

    def run(self, ctx, workers, rep, perf_out=None):
        srv = Server(ctx, self.per_shard, ctx.server_flags)
        try:
            before = fetch_counts(metrics(srv.url))
            cpu0 = proc_cpu_s(srv.proc.pid)
            perf = None
            if perf_out:
                perf = subprocess.Popen(["perf", "record", "-g", "-q", "-o",
                                         perf_out, "-p", str(srv.proc.pid)],
                                        stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                time.sleep(0.5)
            poll = InflightPoller(srv.url)
            meter = Meter(ctx.store.pid()).start()
            res = self.consume(ctx, srv, workers)
            srv_cpu = proc_cpu_s(srv.proc.pid) - cpu0
            m = meter.stop(res["loader_cpu_s"] + srv_cpu)
            inflight = poll.stop()
            if perf:
                perf.send_signal(signal.SIGINT)
                perf.wait(60)
            after = fetch_counts(metrics(srv.url))
        except BaseException:
            srv.stop()
            raise
        rc, ru = srv.stop()
        if rc != 0:
            raise RunError("shardcastd exit %d: %s" % (rc, _tail(srv.errpath)))
        req = {k: after[k] - before[k] for k in FETCH_COUNTERS}
        req["gets"] = req.pop("requests")
        reconnects = sum(w.get("reconnects", 0) for w in res["workers"])
        return dict(m, samples=res["samples"], payload_bytes=res["payload_bytes"],
                    elapsed_s=res["elapsed_s"], ttfs_s=res["first_batch_s"],
                    cpu={"server_epoch": srv_cpu, "server_total": ru["cpu_s"],
                         "loader": res["loader_cpu_s"],
                         "workers": res["workers_cpu_s"],
                         "loader_main_epoch": res["main_epoch_cpu_s"]},
                    requests=req, inflight=inflight, reconnects=reconnects,
                    server_ready_s=srv.ready_s, virtual_shards=srv.shards,
                    server_warnings=srv.log_events()[-20:],
                    verify=res["verify"])


class ShardcastC(Shardcast):
    """The same server read by `shardcast bench` (W consumer threads in one
    C process, --verify against the manifest): what the server delivers
    when the consumers cost next to no CPU."""

    family = "shardcast-c"

    def __init__(self, per_shard):
        super().__init__(per_shard)
        self.name = "shardcast-c-n%d" % per_shard
        self.label = "shardcast, ?objects=%d, C consumers" % per_shard

    def consume(self, ctx, srv, workers):
        args = [os.path.join(ctx.build, "shardcast"), "bench", "--server",
                srv.url, "--job", JOB, "-n", str(workers), "--format", "frames",
                "--verify", ctx.ds.manifest_path, "--json"]
        t0 = time.perf_counter()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        rc, ru, out, err = communicate_rusage(p, ctx.timeout)
        wall = time.perf_counter() - t0
        if ru["killed"]:
            raise RunError("timeout after %.0f s" % ctx.timeout)
        if rc != 0:
            raise RunError("shardcast bench exit %d: %s" % (rc, err.decode()[-800:]))
        b = json.loads(out.decode())
        return {"samples": b["samples"], "payload_bytes": b["bytes"],
                "elapsed_s": b["seconds"], "first_batch_s": b["ttfs_s"]["min"],
                "loader_cpu_s": ru["cpu_s"], "workers_cpu_s": ru["cpu_s"],
                "main_epoch_cpu_s": None, "wall_s": wall,
                "workers": [{"reconnects": b.get("reconnects", 0)}],
                "verify": b["verify"]}


# -- the harness ------------------------------------------------------------------------

class Ctx:
    pass


def list_keys(store, prefix):
    """A boto3 paginated listing of the prefix (what a user's loader does
    once before it starts): (keys, seconds)."""
    import boto3
    from botocore.config import Config
    env = store.env()
    c = boto3.session.Session().client(
        "s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
        config=Config(s3={"addressing_style": "path"}))
    t0 = time.monotonic()
    keys = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                             Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys, time.monotonic() - t0


def measure(ctx, cont, workers, rep, **kw):
    rec = {"contender": cont.name, "family": cont.family, "workers": workers,
           "rep": rep}
    t0 = time.monotonic()
    try:
        rec.update(cont.run(ctx, workers, rep, **kw))
        rec["ok"] = bool(rec["verify"]["ok"])
        if not rec["ok"]:
            rec["error"] = "exactly-once check failed: %s" % rec["verify"]
    except RunError as e:
        rec["ok"] = False
        rec["error"] = str(e)[-3000:]
    rec["cell_s"] = time.monotonic() - t0
    if rec["ok"]:
        rec["samples_per_s"] = rec["samples"] / rec["elapsed_s"]
        rec["mb_per_s"] = rec["payload_bytes"] / rec["elapsed_s"] / 1e6
    log("%-22s W=%-3s rep %d: %s" % (
        cont.name, workers if cont.per_w else "-", rep,
        "%.0f samples/s, %.1f MB/s, store %.2f cores, others %.2f cores"
        % (rec["samples_per_s"], rec["mb_per_s"], rec["store_cores"],
           rec["other_cores"]) if rec["ok"] else "FAILED: " + rec["error"][-500:]))
    return rec


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def client_cpu_s(r):
    """CPU of everything on the reading side of a cell: shardcastd during
    the epoch plus its consumers, the boto3 loader, or curl."""
    c = r["cpu"]
    return (c.get("server_epoch") or 0.0) + c.get("loader", c.get("curl", 0.0))


def summarize(records, contenders, workers):
    """Rows of the table: medians per (contender, W) over the runs that
    passed, ratios of medians, and the paired ratio (the median over
    repetitions of this cell's samples/s over the baseline's in the same
    repetition at the same W: the two ran minutes apart, so slow drifts of
    the machine's load cancel better)."""
    rows = []
    ceil = med([r["samples_per_s"] for r in records
                if r["contender"] == "ceiling-curl" and r["ok"]])
    for c in contenders:
        for w in (workers if c["per_w"] else [None]):
            rs = [r for r in records if r["contender"] == c["name"]
                  and r["rep"] >= 0 and (w is None or r["workers"] == w)]
            ok = [r for r in rs if r["ok"]]
            row = {"contender": c["name"], "label": c["label"],
                   "family": c["family"], "workers": w, "runs": len(rs),
                   "runs_ok": len(ok)}
            if ok:
                def m(f):
                    return med([f(r) for r in ok])
                row.update({
                    "samples_per_s": m(lambda r: r["samples_per_s"]),
                    "mb_per_s": m(lambda r: r["mb_per_s"]),
                    "samples_per_s_all": [round(r["samples_per_s"], 1) for r in ok],
                    "ttfs_s": m(lambda r: r.get("ttfs_s")),
                    "store_cores": m(lambda r: r["store_cores"]),
                    "other_cores": m(lambda r: r["other_cores"]),
                    "loadavg_1m": m(lambda r: r["loadavg_1m_before"]),
                    "gets": m(lambda r: r["requests"].get("gets")),
                    "retries": m(lambda r: r["requests"].get("retries")),
                    "server_cpu_s": m(lambda r: r["cpu"].get("server_epoch")),
                    "consumer_cpu_s": m(lambda r: r["cpu"].get("loader",
                                                               r["cpu"].get("curl"))),
                    "store_cpu_s": m(lambda r: r["store_cpu_s"]),
                    "store_ms_per_sample": m(lambda r: 1e3 * r["store_cpu_s"]
                                             / r["samples"]),
                    "client_ms_per_sample": m(lambda r: 1e3 * client_cpu_s(r)
                                              / r["samples"]),
                    "samples_per_store_cpu_s": m(lambda r: r["samples"]
                                                 / r["store_cpu_s"]
                                                 if r["store_cpu_s"] else None),
                    "inflight_mean": m(lambda r: (r.get("inflight") or {}).get("mean")),
                })
                if w is not None:
                    pairs = []
                    for r in ok:
                        b = next((x for x in records if x["ok"]
                                  and x["contender"] == "baseline-boto3"
                                  and x["workers"] == w and x["rep"] == r["rep"]),
                                 None)
                        if b:
                            pairs.append(r["samples_per_s"] / b["samples_per_s"])
                    row["x_baseline_paired"] = med(pairs)
                    row["x_baseline_paired_all"] = [round(x, 2) for x in pairs]
            rows.append(row)
    for row in rows:
        if row.get("samples_per_s") is None:
            continue
        base = next((r for r in rows if r["contender"] == "baseline-boto3"
                     and r["workers"] == row["workers"]
                     and r.get("samples_per_s")), None)
        row["x_baseline"] = (row["samples_per_s"] / base["samples_per_s"]
                             if base and row["workers"] is not None else None)
        row["x_ceiling"] = row["samples_per_s"] / ceil if ceil else None
    return rows


def fmt(v, spec="%.0f"):
    return "–" if v is None else spec % v


def markdown(results):
    r = results
    ds = r["dataset"]
    lines = ["# Small objects: shardcast object-set sources vs. a hand-written "
             "boto3 loader vs. parallel curl", "",
             "- command: `%s`" % r["command"],
             "- tree: %s %s" % (r["tree"]["commit"][:12], r["tree"]["subject"][:80]),
             "- date: %s; took %.0f s" % (r["date"], r["took_s"]),
             "- dataset: %d samples = %d objects under s3://%s/%s (a .jpg of "
             "%d-%d B, mean %.0f KiB, and a ~45 B .json each), %.0f MB; s3rver "
             "%s on 127.0.0.1, --silent"
             % (ds["samples"], ds["objects"], BUCKET, ds["prefix"], ds["size"] // 2,
                ds["size"] * 3 // 2, ds["object_bytes"] / ds["samples"] / 1024,
                ds["object_bytes"] / 1e6, r["versions"].get("s3rver", "?")),
             "- listing the prefix before the clock: boto3 paginated %.1f s; "
             "shardcastd start to ready (listing, grouping) median %s s"
             % (r["listing_s"], fmt(r.get("server_ready_s_median"), "%.1f")),
             "- machine: %s cores, %s; load average (1 min) %s at the start, "
             "%s at the end; `other cores` below is the CPU other people's "
             "work used during each cell (machine busy time minus ours and "
             "the store's)"
             % (r["machine"]["nproc"], r["machine"]["cpu_model"],
                " ".join("%.1f" % x for x in r["machine"]["loadavg_start"]),
                " ".join("%.1f" % x for x in r["machine"].get("loadavg_end", []))),
             "- runs: %d per cell, alternating; medians over runs that passed "
             "the exactly-once check" % r["runs"], "",
             "| contender | W | runs ok | samples/s | MB/s | × loader | × loader, "
             "paired | × ceiling | TTFS s | store cores | other cores "
             "| store CPU ms/sample | reader CPU ms/sample | server CPU s "
             "| consumer CPU s | GETs | retries | in flight |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:"
             "|--:|--:|"]
    for row in r["rows"]:
        lines.append("| %s | %s | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s "
                     "| %s | %s | %s | %s | %s | %s | %s |" % (
                         row["label"], row["workers"] or "–", row["runs_ok"],
                         row["runs"], fmt(row.get("samples_per_s")),
                         fmt(row.get("mb_per_s"), "%.1f"),
                         fmt(row.get("x_baseline"), "%.2f"),
                         fmt(row.get("x_baseline_paired"), "%.2f"),
                         fmt(row.get("x_ceiling"), "%.2f"),
                         fmt(row.get("ttfs_s"), "%.1f"),
                         fmt(row.get("store_cores"), "%.2f"),
                         fmt(row.get("other_cores"), "%.2f"),
                         fmt(row.get("store_ms_per_sample"), "%.2f"),
                         fmt(row.get("client_ms_per_sample"), "%.2f"),
                         fmt(row.get("server_cpu_s"), "%.1f"),
                         fmt(row.get("consumer_cpu_s"), "%.1f"),
                         fmt(row.get("gets")), fmt(row.get("retries")),
                         fmt(row.get("inflight_mean"), "%.1f")))
    lines += ["", "Columns: samples/s and MB/s (payload, 10^6 B) over the "
              "epoch's wall time, medians; × loader divides by "
              "`baseline-boto3` at the same W; × loader, paired: the median "
              "over repetitions of the ratio to the baseline's run of the "
              "same repetition; × ceiling divides by the curl "
              "ceiling; TTFS: first batch of 256 (first sample for the C "
              "consumers); store cores: s3rver's CPU "
              "seconds / wall time; store CPU ms/sample: s3rver's CPU per "
              "sample (two GETs); reader CPU ms/sample: everything on the "
              "reading side per sample (shardcastd during the epoch plus its "
              "consumers, the boto3 loader, or curl); server CPU: shardcastd "
              "during the epoch; "
              "consumer CPU: the DataLoader process and its workers (whole "
              "lifetimes, torch import included) or curl; GETs and retries "
              "as counted by the contender itself (shardcastd's "
              "shardcast_fetch_*_total, the workers' boto3 calls and "
              "RetryAttempts, curl's transfers); in flight: mean of "
              "shardcast_fetch_inflight polled every 0.5 s.", ""]
    lines += ["Every run, in the order of the repetitions: samples/s (cores "
              "other people's work used during it). The machine is shared, "
              "and its load moves within minutes: compare cells of similar "
              "load, or the paired ratios.", "",
              "| contender | W | " + " | ".join("rep %d" % i for i in range(r["runs"]))
              + " |", "|---|--:|" + "--:|" * r["runs"]]
    for row in r["rows"]:
        cells = []
        for i in range(r["runs"]):
            x = next((x for x in r["records"] if x["contender"] == row["contender"]
                      and x["workers"] == row["workers"] and x["rep"] == i), None)
            cells.append("–" if x is None else "failed" if not x["ok"] else
                         "%.0f (%.2f)" % (x["samples_per_s"], x["other_cores"]))
        lines.append("| %s | %s | %s |" % (row["label"], row["workers"] or "–",
                                           " | ".join(cells)))
    lines.append("")
    target = r.get("target")
    if target:
        lines.append("Target (issue 17): shardcast >= 3x the hand-written "
                     "loader's samples/s. " + target["verdict"])
        lines.append("")
    fails = [x for x in r["records"] if not x["ok"]]
    if fails:
        lines.append("Failed runs:")
        for x in fails:
            lines.append("- %s W=%s rep %d: %s" % (x["contender"], x["workers"],
                                                   x["rep"], x["error"][:400]))
        lines.append("")
    warns = sorted({w for x in r["records"] for w in x.get("server_warnings", [])})
    if warns:
        lines.append("shardcastd warnings (%d distinct lines), first 10:" % len(warns))
        lines += ["    " + w for w in warns[:10]]
        lines.append("")
    if r.get("profile"):
        lines.append("Profile: `%s`." % r["profile"])
    return "\n".join(lines) + "\n"


def verdict(rows, workers):
    parts, met = [], True
    for w in workers:
        base = next((x for x in rows if x["contender"] == "baseline-boto3"
                     and x["workers"] == w), None)
        best = max((x for x in rows if x["family"] == "shardcast"
                    and x["workers"] == w and x.get("samples_per_s")),
                   key=lambda x: x["samples_per_s"], default=None)
        if not base or not best or not base.get("samples_per_s"):
            met = False
            parts.append("W=%d: not measured" % w)
            continue
        x = best["samples_per_s"] / base["samples_per_s"]
        met = met and x >= 3.0
        parts.append("W=%d: best shardcast with Python consumers (%s) %.2fx "
                     "the loader (paired %.2fx), %.2fx the ceiling; the "
                     "ceiling is %.2fx the loader"
                     % (w, best["contender"], x,
                        best.get("x_baseline_paired") or 0,
                        best.get("x_ceiling") or 0,
                        1 / base["x_ceiling"] if base.get("x_ceiling") else 0))
    return {"met": met, "verdict": ("MET" if met else "NOT MET") + " — "
            + "; ".join(parts)}


def profile(ctx, out_dir, per_shard, workers):
    """perf record -g on shardcastd during one more cell; perf report as
    text. Returns the file name or None."""
    if not shutil.which("perf"):
        log("perf not installed: no profile")
        return None
    data = os.path.join(ctx.workdir, "perf.data")
    rec = measure(ctx, Shardcast(per_shard), workers, -1, perf_out=data)
    name = "profile-shardcastd-n%d-w%d.txt" % (per_shard, workers)
    with open(os.path.join(out_dir, name), "w") as f:
        f.write("# shardcastd under `perf record -g`, ?objects=%d, W = %d: %s\n\n"
                % (per_shard, workers,
                   "%.0f samples/s, server CPU %.1f s during the epoch of %.1f s"
                   % (rec["samples_per_s"], rec["cpu"]["server_epoch"],
                      rec["elapsed_s"]) if rec["ok"] else rec.get("error")))
        f.flush()
        for sort, extra in (("dso", ["-g", "none"]),
                            ("symbol", ["-g", "none", "--percent-limit", "0.5"]),
                            ("symbol", ["-g", "caller,2,callee,function,percent",
                                        "--percent-limit", "4"])):
            f.write("## perf report --no-children --sort %s %s\n\n"
                    % (sort, " ".join(extra)))
            f.flush()
            subprocess.run(["perf", "report", "-i", data, "--no-children",
                            "--stdio", "--sort", sort] + extra,
                           stdout=f, stderr=subprocess.DEVNULL, timeout=600)
            f.write("\n")
    if os.path.exists(data):
        os.unlink(data)
    return name, rec


def tree_state():
    def git(*a):
        return subprocess.run(["git", "-C", REPO] + list(a), capture_output=True,
                               text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"),
            "subject": git("log", "-1", "--format=%s")}


def machine():
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True,
                                   text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model,
            "loadavg_start": list(os.getloadavg()),
            "python": platform.python_version(), "kernel": platform.release()}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="300 samples of ~8 KiB, W = 2, ?objects=50, one run")
    ap.add_argument("--samples", type=int, default=10000,
                    help="samples (two objects each; default 10000)")
    ap.add_argument("--size", type=int, default=100 * 1024,
                    help="mean .jpg size in bytes (jitter [size/2, 3size/2])")
    ap.add_argument("--workers", default="4,16")
    ap.add_argument("--per-shard", default="100,1000",
                    help="shardcast's ?objects=N values")
    ap.add_argument("--threads", type=int, default=8,
                    help="GETs in flight per worker of baseline-boto3-tT "
                         "(0: no such contender)")
    ap.add_argument("--curl-parallel", type=int, default=64)
    ap.add_argument("--contenders",
                    default="ceiling,baseline,threads,shardcast,shardcast-c")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds per cell")
    ap.add_argument("--server-flags", default="",
                    help="extra shardcastd flags for every shardcast cell")
    ap.add_argument("--profile", choices=("on", "off"), default=None,
                    help="perf on shardcastd during one more cell (default on, "
                         "off for --quick)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(REPO, "build", "bench-data"))
    ap.add_argument("--keep-data", action="store_true",
                    help="keep the generated objects (default: removed at the end)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--command", default=None)
    a = ap.parse_args(argv)
    if a.quick:
        a.samples, a.size, a.workers = 300, 8192, "2"
        a.per_shard, a.runs, a.threads = "50", 1, 4
        a.curl_parallel = 16
    a.workers = [int(x) for x in a.workers.split(",")]
    a.per_shard = [int(x) for x in a.per_shard.split(",")]
    a.contenders = set(a.contenders.split(","))
    if a.profile is None:
        a.profile = "off" if a.quick else "on"
    return a


def rerender(path):
    """Recompute the table and verdict of a results.json and write it back
    with its results.md."""
    with open(path) as f:
        results = json.load(f)
    results["rows"] = summarize(results["records"], results["contenders"],
                                results["workers"])
    if results.get("target") is not None:
        results["target"] = verdict(results["rows"], results["workers"])
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(os.path.dirname(path), "results.md"), "w") as f:
        f.write(markdown(results))
    sys.stdout.write(markdown(results))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--report"]:
        return rerender(argv[1])
    args = parse_args(argv)
    t_start = time.monotonic()
    date = datetime.date.today().isoformat()
    out_dir = args.out or os.path.join(REPO, "bench", "results", "objects-" + date)
    os.makedirs(out_dir, exist_ok=True)
    ctx = Ctx()
    ctx.workdir = tempfile.mkdtemp(prefix="objbench-")
    ctx.timeout = args.timeout
    ctx.build = args.build
    ctx.server_bin = os.path.join(args.build, "shardcastd")
    ctx.server_flags = args.server_flags.split()
    ctx.curl = shutil.which("curl")
    if not os.access(ctx.server_bin, os.X_OK):
        sys.exit("shardcastd is not built in %s" % args.build)
    mach = machine()
    ds = Dataset(args.data, args.samples, args.size, SEED).ensure(log)
    ctx.ds = ds
    store = Store(ds, ctx.workdir).start()
    ctx.store = store
    contenders = []
    if "ceiling" in args.contenders:
        contenders.append(Ceiling(args.curl_parallel))
    if "baseline" in args.contenders:
        contenders.append(Baseline())
    if "threads" in args.contenders and args.threads > 1:
        contenders.append(Baseline(args.threads))
    if "shardcast" in args.contenders:
        contenders += [Shardcast(n) for n in args.per_shard]
    if "shardcast-c" in args.contenders:
        contenders.append(ShardcastC(args.per_shard[0]))
    records = []
    prof = None
    try:
        keys, listing_s = list_keys(store, ds.prefix)
        if keys != ds.keys():
            raise SystemExit("the store lists %d keys, the set has %d"
                             % (len(keys), ds.objects()))
        log("listed %d keys in %.1f s (boto3)" % (len(keys), listing_s))
        ctx.keys = keys
        ctx.keys_file = os.path.join(ctx.workdir, "keys.json")
        with open(ctx.keys_file, "w") as f:
            json.dump(keys, f)
        cells = [(c, w) for c in contenders for w in (args.workers if c.per_w
                                                        else [None])]
        for rep in range(args.runs):
            k = rep % len(cells)
            for c, w in cells[k:] + cells[:k]:
                records.append(measure(ctx, c, w, rep))
        if args.profile == "on" and "shardcast" in args.contenders:
            prof = profile(ctx, out_dir, args.per_shard[0], args.workers[0])
    finally:
        store.stop()
    meta = [{"name": c.name, "label": c.label, "family": c.family,
             "per_w": c.per_w} for c in contenders]
    rows = summarize(records, meta, args.workers)
    s3rver_version = ""
    try:
        from support.s3rver import find_s3rver
        b = find_s3rver()
        if b:
            s3rver_version = subprocess.run(
                [b, "--version"], capture_output=True, text=True,
                env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
            ).stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    mach["loadavg_end"] = list(os.getloadavg())
    results = {
        "format": "objbench-results/1", "date": date,
        "command": args.command or " ".join(["bench/objects.py"] + argv),
        "tree": tree_state(), "machine": mach,
        "versions": {"s3rver": s3rver_version},
        "dataset": dict(ds.info, prefix=ds.prefix, name=ds.name),
        "listing_s": listing_s,
        "server_ready_s_median": med([r.get("server_ready_s") for r in records]),
        "runs": args.runs, "workers": args.workers, "per_shard": args.per_shard,
        "contenders": meta, "rows": rows, "records": records,
        "target": verdict(rows, args.workers) if "baseline" in args.contenders
        and "shardcast" in args.contenders else None,
        "profile": prof[0] if prof else None,
        "profile_run": prof[1] if prof else None,
        "took_s": time.monotonic() - t_start,
    }
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown(results))
    log("results in %s" % out_dir)
    sys.stdout.write(markdown(results))
    shutil.rmtree(ctx.workdir, ignore_errors=True)
    if not args.keep_data:
        shutil.rmtree(ds.dir, ignore_errors=True)
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
