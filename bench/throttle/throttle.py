#!/usr/bin/python3
"""The throttled-store benchmark (issue 14, part 5). Run it through
bench/throttle.sh, which installs what is missing and builds first.

An S3 store that throttles: s3rver (tests/support/s3rver.py) behind
bench/throttle/tbproxy.py, a token-bucket proxy that answers 503 SlowDown
above R requests/s (burst B) and counts every request, status and byte at
the store. Against it, N simulated nodes x M DataLoader workers (separate
processes, bench/throttle/node_run.py) read one dataset:

  baseline          every worker lists the prefix and reads its share of
                    the shards itself with boto3 get_object + tarfile
  shardcast         one shardcastd reads s3://bench/<dataset>/ through the
                    proxy and serves the N x M workers (consumers of one
                    job), no cache
  shardcast-cache   the same with --cache-bytes >= the dataset
  shardcast-cache50 the same with a cache of half the dataset

Workloads:

  epochs   one job, N x M workers, epochs 0..E-1 one after the other (the
           harness starts each epoch on every node at once)
  jobs     J jobs on the same dataset at the same time, each with its own
           nodes x workers (baseline: J independent loaders; shardcast: J
           jobs of one server, different seeds)

Each run starts a fresh shardcastd (and so an empty cache) and resets the
proxy's counters and bucket. Per epoch it records the epoch's wall time,
samples/s, the store's requests (by method and status), 503s and body bytes
(from the proxy, between epoch boundaries), the clients' retries (boto3's
RetryAttempts; shardcast's fetch retries and throttles from its /metrics,
its cache counters and the job status' "cache" object), and checks
exactly-once across the nodes against the manifest. Contenders alternate
(the order rotates each round); tables show medians over the runs.

Writes results.json and results.md into --out (default
bench/results/throttle-<date>/, or build/throttle-quick/<date>/ with
--quick).
"""

import argparse
import datetime
import json
import os
import queue
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
BENCH = os.path.dirname(HERE)
sys.path.insert(0, BENCH)

import bench_env  # noqa: E402
from bench_env import BUCKET, PY, REPO, Shape, ensure_dataset  # noqa: E402

FORMAT = "shardcast-throttle-bench/1"
SEED = 7
BATCH_SIZE = 32
SHUFFLE_BUFFER = 1000          # shardcast's buffer; the baseline's W buffers
                               # hold the same number of samples in total
CONTENDERS = ("baseline", "shardcast", "shardcast-cache", "shardcast-cache50")
WORKLOADS = ("epochs", "jobs", "rates")


def log(msg):
    sys.stderr.write("[throttle %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


# -- the store -------------------------------------------------------------

class ThrottledStore(bench_env.S3Store):
    """bench_env's s3rver store with tbproxy.py in front instead of the
    plain counting proxy."""

    def __init__(self, data_root, workdir, rate, burst, conn_bps):
        super().__init__(data_root, workdir)
        self.rate, self.burst, self.conn_bps = rate, burst, conn_bps

    def start(self):
        from support.s3rver import S3rver
        os.makedirs(self.directory, exist_ok=True)
        self.s3 = S3rver(directory=self.directory).start()
        self._proxy_log = open(os.path.join(self.workdir, "tbproxy.log"), "wb")
        args = [PY, os.path.join(HERE, "tbproxy.py"), self.s3.endpoint,
                "--rate", str(self.rate), "--conn-bps", str(self.conn_bps)]
        if self.burst is not None:
            args += ["--burst", str(self.burst)]
        self.proxy = subprocess.Popen(args, stdout=subprocess.PIPE,
                                      stderr=self._proxy_log,
                                      stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        line = self.proxy.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise RuntimeError("tbproxy did not start: %r" % line)
        self.endpoint = line
        return self

    def rearm(self, rate=None, burst=None):
        """Counters to zero, the bucket full: the state a run starts in
        (at rate/burst if given, else the session's)."""
        if rate is None:
            rate, burst = self.rate, self.burst
        elif burst is None:
            burst = rate
        req = urllib.request.Request(
            self.endpoint + "/__proxy__/throttle", method="PUT",
            data=json.dumps({"rate": rate, "burst": burst,
                             "conn_bps": self.conn_bps}).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        self.reset_counters()


def _shard_bytes(c):
    """Body bytes of 200/206 answers to GETs of shards (not listings,
    error bodies or sidecars), from the per-request entries."""
    return sum(e["bytes"] for e in c["entries"]
               if e["method"] == "GET" and e["status"] in (200, 206)
               and e["path"].endswith(".tar"))


def store_delta(a, b):
    """What the store saw between two counter snapshots."""
    def sub(x, y):
        keys = set(x) | set(y)
        return {k: y.get(k, 0) - x.get(k, 0) for k in sorted(keys)
                if y.get(k, 0) - x.get(k, 0)}
    return {"requests": b["requests"] - a["requests"],
            "bytes": b["bytes_sent"] - a["bytes_sent"],
            "by_method": sub(a["by_method"], b["by_method"]),
            "by_status": sub(a["by_status"], b["by_status"]),
            "throttled": b["by_status"].get("503", 0) - a["by_status"].get("503", 0),
            "shard_bytes": _shard_bytes(b) - _shard_bytes(a)}


# -- shardcastd --------------------------------------------------------------

class Server:
    """One shardcastd for one run, serving `jobs` from a config file."""

    def __init__(self, ctx, jobs, cache_bytes, workdir):
        self.workdir = workdir
        self.stderr_path = os.path.join(workdir, "shardcastd.log")
        conf = os.path.join(workdir, "shardcastd.json")
        with open(conf, "w") as f:
            json.dump({"jobs": jobs}, f)
        args = [ctx.server_bin, "--config", conf, "--listen", "127.0.0.1",
                "--port", "0", "--log-level", "warn", "--prefetch", "false"]
        args += ctx.args.server_flags.split()
        if cache_bytes:
            args += ["--cache-bytes", str(cache_bytes),
                     "--cache-dir", os.path.join(workdir, "cache")]
        self.args = args
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["HOME"] = workdir  # no ~/.aws of the machine
        env.update(ctx.store.env())
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=self._err, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        out = []
        t = threading.Thread(target=lambda: out.append(
            self.proc.stdout.readline().decode("utf-8", "replace")), daemon=True)
        t.start()
        t.join(60)
        line = out[0] if out else ""
        if not line.startswith("listening="):
            self.stop()
            raise RunError("shardcastd did not start: %r\n%s"
                           % (line, self.log_tail()))
        self.url = "http://" + line[len("listening="):].strip()
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self._wait_ready()

    def _wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=10) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RunError("shardcastd not ready: %s" % self.log_tail())

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read().decode("utf-8", "replace")

    def metrics(self):
        """shardcast_fetch_* (backend s3) and shardcast_cache_* series,
        {"name{labels}": value}, without histogram buckets."""
        out = {}
        for line in self.get("/metrics").splitlines():
            if line.startswith("#") or "_bucket{" in line:
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if not (name.startswith("shardcast_cache_") or
                    (name.startswith("shardcast_fetch_") and
                     'backend="s3"' in line)):
                continue
            key, _, val = line.rpartition(" ")
            try:
                out[key] = float(val)
            except ValueError:
                pass
        return out

    def job_status(self, job):
        try:
            return json.loads(self.get("/v1/jobs/" + job))
        except (OSError, ValueError):
            return None

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        self._err.close()
        return self.proc.returncode

    def log_tail(self, n=3000):
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


def metrics_delta(a, b):
    keys = set(a) | set(b)
    out = {}
    for k in sorted(keys):
        d = b.get(k, 0.0) - a.get(k, 0.0)
        # Gauges (entries, used bytes) are reported as their value at the end.
        if k.startswith(("shardcast_cache_entries", "shardcast_cache_used_bytes",
                         "shardcast_fetch_inflight")):
            out[k] = b.get(k, 0.0)
        elif d:
            out[k] = d
    return out


def msum(m, prefix, **labels):
    """Sum of the series of family `prefix` whose labels include `labels`."""
    tot = 0.0
    for k, v in m.items():
        name = k.split("{", 1)[0]
        if name != prefix:
            continue
        if all('%s="%s"' % (lk, lv) in k for lk, lv in labels.items()):
            tot += v
    return tot


# -- nodes -------------------------------------------------------------------

class RunError(Exception):
    pass


class Node:
    """One node_run.py process (a DataLoader with M workers)."""

    def __init__(self, spec, env, logpath):
        self.spec = spec
        self._err = open(logpath, "wb")
        self.logpath = logpath
        self.proc = subprocess.Popen(
            [PY, os.path.join(HERE, "node_run.py"), json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
            env=env, start_new_session=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        for line in self.proc.stdout:
            self.lines.put(line.decode("utf-8", "replace").strip())
        self.lines.put(None)

    def expect(self, deadline):
        """The next line, or RunError at EOF / deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunError("timeout")
        try:
            line = self.lines.get(timeout=left)
        except queue.Empty:
            raise RunError("timeout: node %s/%d said nothing"
                           % (self.spec["job"], self.spec["node"]))
        if line is None:
            raise RunError("node %s/%d exited (%s): %s" % (
                self.spec["job"], self.spec["node"], self.proc.poll(),
                self.err_tail()))
        return line

    def send(self, line):
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def err_tail(self, n=2000):
        try:
            with open(self.logpath, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def quit(self):
        """Ask the node to end (stop() waits for it)."""
        try:
            self.send("quit")
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def stop(self):
        self.quit()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        else:
            try:  # forked DataLoader workers left behind, if any
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._err.close()


def node_env(ctx, stats_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = stats_dir
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["PYTHONPATH"] = os.path.join(REPO, "clients", "python")
    env["SHARDCAST_BUILD"] = ctx.build
    env["OMP_NUM_THREADS"] = "1"
    env.update(ctx.store.env())
    return env


def check_once(stats_dir, job, epoch, nodes, expected_keys, promised):
    """Exactly-once across the nodes of one job's epoch."""
    seen = {}
    for n in range(nodes):
        path = os.path.join(stats_dir, "keys-%s-e%d-n%d.txt" % (job, epoch, n))
        try:
            with open(path) as f:
                for k in f.read().split("\n"):
                    if k:
                        seen[k] = seen.get(k, 0) + 1
        except OSError:
            pass
    samples = sum(seen.values())
    dupes = sum(c - 1 for c in seen.values() if c > 1)
    unknown = sum(1 for k in seen if k not in expected_keys)
    missing = len(expected_keys) - (len(seen) - unknown)
    ok = (samples == promised and dupes == 0 and unknown == 0
          and missing == len(expected_keys) - promised)
    return {"samples": samples, "expected": promised, "unique": len(seen),
            "duplicates": dupes, "unknown": unknown, "missing": missing,
            "ok": ok}


def worker_stats(stats_dir, job, epoch):
    out = {"retries": 0, "requests": 0, "gave_up": 0, "reconnects": 0,
           "workers": 0}
    prefix = "w-%s-e%d-" % (job, epoch)
    for name in os.listdir(stats_dir):
        if name.startswith(prefix) and name.endswith(".json"):
            with open(os.path.join(stats_dir, name)) as f:
                w = json.load(f)
            out["workers"] += 1
            for k in ("retries", "requests", "gave_up", "reconnects"):
                out[k] += w.get(k, 0)
    return out


# -- one run -----------------------------------------------------------------

def cache_bytes_for(ctx, contender):
    if contender == "shardcast-cache":
        # At least the dataset, with room for per-entry overhead.
        return int(ctx.ds.tar_bytes * 1.25) + (16 << 20)
    if contender == "shardcast-cache50":
        return ctx.ds.tar_bytes // 2
    return 0


def run_one(ctx, contender, workload, rnd, rate=None):
    """One run of contender on workload (at store rate `rate` for the
    rates workload); returns its record."""
    a = ctx.args
    if workload == "epochs":
        jobs = [("job0", SEED)]
        nodes, workers, epochs = a.nodes, a.workers, a.epochs
    elif workload == "rates":
        jobs = [("job0", SEED)]
        nodes, workers, epochs = a.nodes, a.workers, 1
    else:
        jobs = [("job%d" % j, SEED + j) for j in range(a.jobs)]
        nodes, workers, epochs = a.job_nodes, a.job_workers, 1
    world = nodes * workers
    workdir = tempfile.mkdtemp(prefix="%s-%s-r%d-" % (workload, contender, rnd),
                               dir=ctx.workdir)
    stats_dir = os.path.join(workdir, "stats")
    os.makedirs(stats_dir)
    rec = {"contender": contender, "workload": workload, "round": rnd,
           "nodes": nodes, "workers": workers, "jobs": [j for j, _ in jobs],
           "rate": a.rate if rate is None else rate,
           "burst": a.burst if rate is None else rate,
           "epochs": [], "ok": False, "error": None,
           "loadavg_1m": os.getloadavg()[0]}
    ctx.store.rearm(rate)
    t_run = time.monotonic()
    srv = None
    all_nodes = []
    snap0 = None
    try:
        snap0 = ctx.store.counters()
        base_spec = {"workers": workers, "nodes": nodes,
                     "manifest": ctx.ds.manifest_path, "stats_dir": stats_dir,
                     "batch_size": BATCH_SIZE}
        if contender == "baseline":
            base_spec.update({"mode": "baseline", "bucket": BUCKET,
                              "prefix": ctx.ds.s3_prefix,
                              "shuffle_buffer": max(1, SHUFFLE_BUFFER // world),
                              "retry_mode": a.retry_mode,
                              "max_attempts": a.max_attempts})
        else:
            cb = cache_bytes_for(ctx, contender)
            rec["cache_bytes"] = cb
            specs = [{"name": j, "source": "s3://%s/%s" % (BUCKET, ctx.ds.s3_prefix),
                      "seed": s, "shuffle_buffer": SHUFFLE_BUFFER} for j, s in jobs]
            t0 = time.monotonic()
            srv = Server(ctx, specs, cb, workdir)
            rec["server_start_s"] = time.monotonic() - t0
            base_spec.update({"mode": "shardcast", "server": srv.url})
        env = node_env(ctx, stats_dir)
        by_job = {}
        for job, seed in jobs:
            for n in range(nodes):
                spec = dict(base_spec, job=job, node=n, seed=seed)
                nd = Node(spec, env, os.path.join(workdir, "node-%s-%d.log"
                                                  % (job, n)))
                by_job.setdefault(job, []).append(nd)
                all_nodes.append(nd)
        deadline = time.monotonic() + a.timeout
        for nd in all_nodes:
            line = nd.expect(deadline)
            if line != "ready":
                raise RunError("node said %r" % line)
        rec["nodes_ready_s"] = time.monotonic() - t_run
        snap = ctx.store.counters()
        # The server's counters of the first epoch include its start-up
        # (the listing), as the store's do.
        m_prev = {}
        rec["startup_store"] = store_delta(snap0, snap)
        for e in range(epochs):
            t_go = time.monotonic()
            for nd in all_nodes:
                nd.send("go %d" % e)
            reports = [json.loads(nd.expect(deadline)) for nd in all_nodes]
            t_done = time.monotonic()
            snap2 = ctx.store.counters()
            m_now = srv.metrics() if srv else {}
            ep = {"epoch": e, "wall_s": t_done - t_go, "jobs": {}}
            # The store's figures of the first epoch include what happened
            # before it (the workers' start-up, the server's listing).
            ep["store"] = store_delta(snap0 if e == 0 else snap, snap2)
            ep["server"] = metrics_delta(m_prev, m_now)
            errors = [r["error"] for r in reports if r.get("error")]
            for job, nds in by_job.items():
                rs = [reports[all_nodes.index(nd)] for nd in nds]
                end = max(r["t_end"] for r in rs)
                firsts = [r["t_first"] for r in rs if r["t_first"]]
                promised = len(ctx.expected)
                if contender != "baseline":
                    promised -= promised % world
                jr = {"epoch_s": end - t_go,
                      "ttfs_s": (min(firsts) - t_go) if firsts else None,
                      "samples": sum(r["samples"] for r in rs),
                      "payload_bytes": sum(r["payload_bytes"] for r in rs),
                      "bad_hash": sum(r["bad_hash"] for r in rs),
                      "clients": worker_stats(stats_dir, job, e),
                      "verify": check_once(stats_dir, job, e, nodes,
                                           ctx.expected, promised)}
                jr["verify"]["bad_hash"] = jr["bad_hash"]
                jr["verify"]["ok"] = jr["verify"]["ok"] and jr["bad_hash"] == 0
                jr["samples_per_s"] = jr["samples"] / jr["epoch_s"]
                if srv:
                    st = srv.job_status(job)
                    if st is not None and isinstance(st.get("cache"), dict):
                        jr["cache_status"] = st["cache"]
                ep["jobs"][job] = jr
            rec["epochs"].append(ep)
            log("  %s %s r%d%s epoch %d: %.1f s, store %d req (%d x 503), %.0f MB%s"
                % (workload, contender, rnd,
                   " R=%g" % rec["rate"] if workload == "rates" else "",
                   e, ep["wall_s"],
                   ep["store"]["requests"], ep["store"]["throttled"],
                   ep["store"]["bytes"] / 1e6,
                   "" if all(j["verify"]["ok"] for j in ep["jobs"].values())
                   else " VERIFY FAILED"))
            if errors:
                raise RunError("; ".join(errors)[:3000])
            snap, m_prev = snap2, m_now
        rec["ok"] = all(j["verify"]["ok"] for ep in rec["epochs"]
                        for j in ep["jobs"].values())
        if not rec["ok"]:
            rec["error"] = "exactly-once check failed"
    except RunError as e:
        rec["error"] = str(e)
        log("  %s %s r%d FAILED: %s" % (workload, contender, rnd, str(e)[:500]))
    finally:
        t_stop = time.monotonic()
        for nd in all_nodes:  # all at once: each takes a moment to exit
            nd.quit()
        for nd in all_nodes:
            nd.stop()
        if srv is not None:
            rc = srv.stop()
            rec["server_exit"] = rc
            if rc not in (0, None) and rec["ok"]:
                rec["ok"] = False
                rec["error"] = "shardcastd exit %s: %s" % (rc, srv.log_tail())
            rec["server_log_tail"] = srv.log_tail(1500)
        final = ctx.store.counters()
        rec["store_total"] = store_delta(snap0, final) if snap0 else None
        rec["timeline"] = final.get("throttle", {}).get("timeline")
        rec["stop_s"] = time.monotonic() - t_stop
        rec["run_s"] = time.monotonic() - t_run
        if not ctx.args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return rec


# -- the session -------------------------------------------------------------

def tree_state():
    """The commit measured, and files changed from it (results excluded)."""
    def git(*args):
        try:
            return subprocess.run(["git", "-C", REPO] + list(args),
                                  capture_output=True, text=True,
                                  timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""
    changed = [l[3:] for l in git("status", "--porcelain").splitlines()
               if len(l) > 3 and not l[3:].startswith("bench/results/")]
    return {"commit": git("rev-parse", "HEAD").strip(),
            "subject": git("log", "-1", "--format=%s").strip(),
            "uncommitted": changed}


class Ctx:
    pass


def server_help(server_bin):
    try:
        p = subprocess.run([server_bin, "--help"], capture_output=True, timeout=20)
        return (p.stdout + p.stderr).decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def availability(ctx, contender):
    if contender == "baseline":
        try:
            import boto3  # noqa: F401
        except ImportError:
            return False, "boto3 is not installed (python3-boto3)"
        return True, ""
    if not ctx.server_bin:
        return False, "shardcastd is not built in %s" % ctx.build
    if contender.startswith("shardcast-cache") and "--cache-bytes" not in ctx.help:
        return False, ("this shardcastd has no --cache-bytes (the shard cache "
                       "is not in this tree yet)")
    return True, ""


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="shardcast's throttled-store benchmark (issue 14)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny dataset, 2 x 2 workers, one round (the smoke test)")
    ap.add_argument("--runs", type=int, default=None, help="rounds (default 3)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--nodes", type=int, default=None, help="N (default 4)")
    ap.add_argument("--workers", type=int, default=None,
                    help="M DataLoader workers per node (default 8)")
    ap.add_argument("--epochs", type=int, default=None, help="default 3")
    ap.add_argument("--jobs", type=int, default=2,
                    help="concurrent jobs of the jobs workload")
    ap.add_argument("--job-nodes", type=int, default=None,
                    help="nodes per job in the jobs workload (default 2)")
    ap.add_argument("--job-workers", type=int, default=None,
                    help="workers per node in the jobs workload (default 8)")
    ap.add_argument("--rate", type=float, default=None,
                    help="store requests/s before 503 SlowDown")
    ap.add_argument("--burst", type=float, default=None,
                    help="token bucket size (default: the rate)")
    ap.add_argument("--sweep", default=None,
                    help="store rates of the rates workload, req/s, 0: no "
                         "limit (default 0,100,50,20,10)")
    ap.add_argument("--sweep-contenders", default=None,
                    help="contenders of the rates workload (default "
                         "baseline,shardcast,shardcast-cache; --quick: "
                         "shardcast)")
    ap.add_argument("--conn-bps", type=float, default=0,
                    help="bytes/s per store connection (0: no cap)")
    ap.add_argument("--shards", type=int, default=None)
    ap.add_argument("--per-shard", type=int, default=None)
    ap.add_argument("--size", type=int, default=None,
                    help="mean payload bytes per sample")
    ap.add_argument("--retry-mode", default="standard",
                    help="the baseline's botocore retry mode")
    ap.add_argument("--max-attempts", type=int, default=10,
                    help="the baseline's botocore max_attempts")
    ap.add_argument("--server-flags", default="",
                    help="more shardcastd flags for every shardcast run, e.g. "
                         "'--index-sidecars false'")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(REPO, "build", "throttle-data"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per run (default 900; --quick 120)")
    ap.add_argument("--keep", action="store_true",
                    help="keep each run's directory (logs, cache) under --out")
    ap.add_argument("--command", default=None,
                    help="the command line to record (set by throttle.sh)")
    a = ap.parse_args(argv)
    q = a.quick
    dflt = {"runs": 1 if q else 3, "nodes": 1 if q else 4,
            "workers": 4 if q else 8, "epochs": 2 if q else 3,
            "job_nodes": 1 if q else 2, "job_workers": 2 if q else 8,
            "rate": 30.0 if q else 20.0,
            "sweep": "10" if q else "0,100,50,20,10",
            "sweep_contenders": "shardcast" if q else
            "baseline,shardcast,shardcast-cache",
            "shards": 16 if q else 100, "per_shard": 16 if q else 40,
            "size": 16384 if q else 102400, "timeout": 120.0 if q else 900.0}
    for k, v in dflt.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.burst is None:
        a.burst = a.rate
    return a


def main(argv=None):
    a = parse_args(argv)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d")
    if a.out is None:
        a.out = (os.path.join(REPO, "build", "throttle-quick", stamp) if a.quick
                 else os.path.join(REPO, "bench", "results", "throttle-" + stamp))
    os.makedirs(a.out, exist_ok=True)
    contenders = [c for c in a.contenders.split(",") if c]
    workloads = [w for w in a.workloads.split(",") if w]
    for c in contenders:
        if c not in CONTENDERS:
            sys.exit("unknown contender %r (one of %s)" % (c, ", ".join(CONTENDERS)))
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit("unknown workload %r (one of %s)" % (w, ", ".join(WORKLOADS)))
    ctx = Ctx()
    ctx.args = a
    ctx.build = a.build
    sb = os.path.join(a.build, "shardcastd")
    ctx.server_bin = sb if os.access(sb, os.X_OK) else None
    ctx.help = server_help(sb) if ctx.server_bin else ""
    ctx.workdir = tempfile.mkdtemp(prefix="work-", dir=a.out) if a.keep \
        else tempfile.mkdtemp(prefix="shardcast-throttle-")
    shape = Shape("images", a.shards, a.per_shard, a.size, 3,
                  "~%d KiB samples" % (a.size // 1024))
    from bench import machine_description
    machine = machine_description()  # the load average at the start
    t_session = time.monotonic()
    ctx.ds = ensure_dataset(a.data, shape, log)
    with open(ctx.ds.manifest_path) as f:
        ctx.expected = {s["key"] for s in json.load(f)["samples"]}
    ctx.store = ThrottledStore(a.data, ctx.workdir, a.rate, a.burst, a.conn_bps)
    avail = {c: availability(ctx, c) for c in contenders}
    for c, (ok, why) in avail.items():
        if not ok:
            log("%s: not available: %s" % (c, why))
    runs = []
    try:
        ctx.store.start()
        ctx.store.upload(ctx.ds, log)
        log("store %s: %.0f req/s (burst %.0f), %s per connection; dataset "
            "%d shards, %d samples, %.0f MB" % (
                ctx.store.endpoint, a.rate, a.burst,
                "%.0f MB/s" % (a.conn_bps / 1e6) if a.conn_bps else "no cap",
                len(ctx.ds.files), ctx.ds.total_samples, ctx.ds.tar_bytes / 1e6))
        runnable = [c for c in contenders if avail[c][0]]
        sweep = [float(x) for x in a.sweep.split(",") if x]
        sweep_runnable = [c for c in runnable if c in a.sweep_contenders.split(",")]
        for rnd in range(a.runs):
            for w in workloads:
                cs = sweep_runnable if w == "rates" else runnable
                order = cs[rnd % len(cs):] + cs[:rnd % len(cs)] if cs else []
                for rate in (sweep if w == "rates" else [None]):
                    for c in order:
                        log("round %d/%d: %s%s, %s" % (
                            rnd + 1, a.runs, w,
                            "" if rate is None else " R=%g" % rate, c))
                        runs.append(run_one(ctx, c, w, rnd, rate))
    finally:
        ctx.store.stop()
        if not a.keep:
            shutil.rmtree(ctx.workdir, ignore_errors=True)
    machine["loadavg_end"] = list(os.getloadavg())
    results = {
        "format": FORMAT, "date": stamp,
        "command": a.command or "bench/throttle/throttle.py " + " ".join(argv or sys.argv[1:]),
        "session_s": time.monotonic() - t_session,
        "config": {"rate": a.rate, "burst": a.burst, "conn_bps": a.conn_bps,
                   "sweep": [float(x) for x in a.sweep.split(",") if x],
                   "nodes": a.nodes, "workers": a.workers, "epochs": a.epochs,
                   "jobs": a.jobs, "job_nodes": a.job_nodes,
                   "job_workers": a.job_workers, "runs": a.runs,
                   "batch_size": BATCH_SIZE, "shuffle_buffer": SHUFFLE_BUFFER,
                   "seed": SEED, "baseline_retry_mode": a.retry_mode,
                   "baseline_max_attempts": a.max_attempts,
                   "server_flags": a.server_flags,
                   "quick": a.quick},
        "dataset": ctx.ds.to_dict(),
        "available": {c: {"ok": ok, "reason": why} for c, (ok, why) in avail.items()},
        "machine": machine, "tree": tree_state(),
        "runs": runs,
    }
    import throttle_report
    results["summary"] = throttle_report.summarize(results)
    md = throttle_report.render(results)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)
    log("results in %s (%.0f s)" % (a.out, time.monotonic() - t_session))
    failed = [r for r in runs if not r["ok"]]
    return 1 if failed and a.quick else 0


if __name__ == "__main__":
    sys.exit(main())
