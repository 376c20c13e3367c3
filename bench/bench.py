#!/usr/bin/python3
"""shardcast's benchmark harness (issue 7). Run it through bench/run.sh,
which installs what is missing and builds first.

One session: generate the datasets (tests/tools/mkwds.py), start nginx and
s3rver (+ counting proxy), detect what the tree can do, then for each
repetition, each shape and each W run every available contender in turn
(the order rotates between repetitions, so slow drift of the machine hits
every contender alike). Every run records samples/s, payload MB/s, time to
first sample, peak RSS and CPU seconds of every process, object-store
requests/bytes during the epoch and the store's own CPU, and (for every
Python and C consumer run) the exactly-once check against the manifest.
Writes results.json, results.md and results.png into --out.

Figures, precisely:
  samples/s, MB/s  samples delivered / wall time of the epoch, payload (field
                   bytes, no tar headers) MB (10^6 B) / the same wall time; the
                   wall time runs from the first request (iter(DataLoader),
                   process spawn for curl) to the last sample. The server is
                   started and has resolved its source before the clock
                   starts.
  ttfs             time to the first batch of 256 in the training loop for
                   DataLoader contenders; what `shardcast bench` reports for
                   C; time to first byte for curl.
  peak RSS         per process: wait4's ru_maxrss for processes the harness
                   starts, VmHWM self-reported by DataLoader workers.
  CPU seconds      user + system of every process of the contender (server
                   included), not the store's; the store's is `store_cpu_s`.
  store requests   nginx access-log lines / counting-proxy counters during
                   the run (GETs, all requests, response bytes).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_contenders as bc  # noqa: E402
import bench_proc  # noqa: E402
import bench_report  # noqa: E402
from bench_env import PY, REPO, Nginx, S3Store, Shape, ensure_dataset  # noqa: E402

FORMAT = "shardcast-bench/1"
SHUFFLE_BUFFER = 10000
# Byte cap of the server's shuffle buffer: above 10,000 of the largest
# ~100 KiB-shape samples (150 KiB each), so the sample count is what binds.
SERVER_BUFFER_BYTES = "2GiB"
FULL_WORKERS = (1, 4, 16, 64)
QUICK_WORKERS = (2,)


def tree_args(ap, repo, name, quick_help):
    """The options of a bench that runs one or two trees' servers
    alternating (bench/late_world.py, bench/samples.py): --build,
    --other-build, --data, --shapes, --runs, --quick, --out
    (bench/results/NAME) and --command (bench/NAME.sh)."""
    ap.add_argument("--build", default=os.path.join(repo, "build"))
    ap.add_argument("--other-build", default=None,
                    help="a second tree's build, alternated with --build")
    ap.add_argument("--data", default=None,
                    help="dataset cache (default: BUILD/bench-data)")
    ap.add_argument("--shapes", default="images,tokens")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--out", default=os.path.join(repo, "bench", "results", name))
    ap.add_argument("--command", default="bench/%s.sh" % name.replace("-", "_"))


def tree_setup(args):
    """(shapes, data directory, [(name, build)]) of tree_args' options."""
    shapes = [s for s in (quick_shapes() if args.quick else full_shapes())
              if s.name in args.shapes.split(",")]
    data = args.data or os.path.join(args.build, "bench-data")
    builds = [("A", os.path.abspath(args.build))]
    if args.other_build:
        builds.append(("B", os.path.abspath(args.other_build)))
    return shapes, data, builds


def run_trees(args, prefix, one, summary, row):
    """tree_args' runs over nginx serving the bench datasets: per shape,
    the trees' servers alternate run by run (A, B, A, B...). one(build,
    nginx, ds, workdir, shape) -> a run's dict, logged with summary(run);
    row(runs, dataset_bytes) -> a tree's medians. Returns the rows, each
    with its shape, tree and runs."""
    from bench_env import Nginx, ensure_dataset
    shapes, data, builds = tree_setup(args)
    workdir = tempfile.mkdtemp(prefix=prefix)
    nginx = Nginx(os.path.join(data, "datasets"), workdir).start()
    rows = []
    try:
        for shape in shapes:
            ds = ensure_dataset(data, shape, log)
            dataset_bytes = sum(os.path.getsize(os.path.join(ds.path, f))
                                for f in os.listdir(ds.path) if f.endswith(".tar"))
            runs = {name: [] for name, _ in builds}
            for i in range(args.runs):
                for name, b in builds:
                    r = one(b, nginx, ds, workdir, shape)
                    log("%s %s run %d: %s" % (shape.name, name, i, summary(r)))
                    runs[name].append(r)
            for name, b in builds:
                d = {"shape": shape.name, "tree": "%s (%s)" % (name, b)}
                d.update(row(runs[name], dataset_bytes))
                d["runs"] = runs[name]
                rows.append(d)
    finally:
        nginx.stop()
    return rows


def tree_main(argv, doc, repo, name, prefix, one, summary, row, fmt, markdown):
    """main() of a bench that runs trees alternating (bench/thin.py,
    bench/late_world.py): tree_args' options (doc's first line the
    description), run_trees(one, summary, row), finish; the exit status 0
    when every row read every sample exactly once."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    tree_args(ap, repo, name, "the tiny datasets, one run")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs = 1
    rows = run_trees(args, prefix, one, summary, row)
    finish(args, fmt, {"runs": args.runs, "rows": rows}, markdown)
    return 0 if all(r["exactly_once"] for r in rows) else 1


def start_job_server(build, ds, workdir, base=None, ext=".tar", extra=()):
    """One shardcastd serving job "j" over the shards of dataset ds (its
    files named *ext, or under base, an http URL): the bench/run.sh
    server flags, no prefetch, no rate limits, then extra. Returns
    (process, port, log file)."""
    from bench_env import _wait_port, free_port
    names = sorted(f for f in os.listdir(ds.path) if f.endswith(ext))
    prefix = names[0].rsplit("-", 1)[0]
    root = "%s/%s" % (base, os.path.basename(ds.path)) if base else ds.path
    source = "%s/%s-{%06d..%06d}%s" % (root, prefix, 0, len(names) - 1, ext)
    port = free_port()
    log = open(os.path.join(workdir, "server.log"), "w")
    proc = subprocess.Popen(
        [os.path.join(build, "shardcastd"), "--listen", "127.0.0.1", "--port", str(port),
         "--job", "j", "--source", source, "--prefetch", "false",
         "--shuffle-buffer", str(SHUFFLE_BUFFER),
         "--shuffle-buffer-bytes", SERVER_BUFFER_BYTES,
         "--stream-rate-limit", "0", "--rate-limit", "0",
         "--max-new-epochs-per-minute", "0"] + list(extra),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, "shardcastd")
    except BaseException:
        proc.kill()
        proc.wait()
        log.close()
        raise
    return proc, port, log


def full_shapes():
    """The two shapes of a full run, sized so that every contender at every
    W, three times, fits in about 15 minutes on a 2-core machine."""
    return [Shape("images", 64, 128, 102400, 1, "~100 KiB samples (images)"),
            Shape("tokens", 64, 400, 1024, 2, "~1 KiB samples (tokens)")]


def quick_shapes():
    return [Shape("images", 8, 8, 102400, 1, "~100 KiB samples (images)"),
            Shape("tokens", 8, 100, 1024, 2, "~1 KiB samples (tokens)")]


def log(msg):
    sys.stderr.write("[bench %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# -- capabilities -------------------------------------------------------------

class CliBench:
    """Adapter for `shardcast bench` (clients/c). The command line is built
    from the options its --help lists, so small renames do not break it;
    without --json and --verify it is reported as not available."""

    def __init__(self, binary, help_text):
        self.binary = binary
        self.help = help_text

    def has(self, opt):
        return opt in self.help

    @classmethod
    def detect(cls, build):
        b = os.path.join(build, "shardcast")
        if not os.access(b, os.X_OK):
            return None, "build/shardcast is not built (clients/c)"
        try:
            p = subprocess.run([b, "bench", "--help"], capture_output=True,
                               timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, "shardcast bench --help failed: %s" % e
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        if p.returncode != 0 or "--json" not in text or "--verify" not in text:
            return None, ("shardcast bench lacks --json/--verify (exit %d)"
                          % p.returncode)
        return cls(b, text), ""

    def command(self, url, job, epoch, workers, manifest, fmt):
        """`shardcast bench --server URL --job J --epoch E --world W -n W
        [--format F] --json --verify MANIFEST`: all W ranks, one process."""
        args = [self.binary, "bench", "--server", url, "--job", job,
                "--epoch", str(epoch), "--world", str(workers),
                "--consumers", str(workers)]
        if fmt and self.has("--format"):
            args += ["--format", fmt]
        return args + ["--json", "--verify", manifest]

    @staticmethod
    def parse(out, wall):
        """Figures from the --json summary: samples, bytes (payload),
        seconds, ttfs_s {min, median, max} (the earliest consumer's first
        sample is the run's), verify {ok, ...}."""
        start = out.find("{")
        try:
            data = json.loads(out[start:]) if start >= 0 else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or "samples" not in data:
            raise bc.ContenderError("shardcast bench --json gave no summary: %r"
                                    % out[:300])
        ttfs = data.get("ttfs_s")
        if isinstance(ttfs, dict):
            ttfs = ttfs.get("min")
        ver = data.get("verify")
        if isinstance(ver, dict):
            # The same keys as loader_run.py's check, plus the CLI's own.
            verify = dict(ver)
            verify["ok"] = bool(ver.get("ok")) and bool(ver.get("union_checked"))
            verify["samples"] = int(data["samples"])
            verify["expected"] = int(ver.get("manifest_samples", 0)) - int(
                ver.get("expected_missing", 0))
            verify["bad_hash"] = int(ver.get("hash_mismatches", 0))
            verify["duplicates"] = int(ver.get("duplicates", 0))
            verify["unknown"] = int(ver.get("unknown", 0))
        else:
            verify = {"ok": False, "note": "no verify result in --json output"}
        if data.get("failed"):
            verify["ok"] = False
            verify["failed_consumers"] = data["failed"]
        return {"samples": int(data["samples"]),
                "payload_bytes": int(data.get("bytes", 0)),
                "wire_bytes": data.get("wire_bytes"),
                "elapsed_s": float(data.get("seconds") or wall),
                "ttfs_s": float(ttfs) if ttfs is not None else None,
                "ttfs_kind": "first sample of any consumer",
                "format": data.get("format"),
                "verify": verify,
                "per_consumer": {"samples": data.get("per_consumer", {}).get(
                    "samples"), "mb_per_s": data.get("per_consumer", {}).get(
                    "mb_per_s")}}


_PROBE = """
import inspect, json, sys
sys.path.insert(0, sys.argv[1])
import shardcast
p = inspect.signature(shardcast.ShardcastDataset.__init__).parameters
print(json.dumps({"format_kw": "format" in p,
                  "modes": "batch_size" in p and "tensors" in p}))
"""


def detect_python_formats():
    """(formats, reasons, has_format_kw) of the in-tree Python client,
    probed in a child process so that the harness itself stays small (it
    does not import torch)."""
    p = subprocess.run([PY, "-c", _PROBE, os.path.join(REPO, "clients", "python")],
                       capture_output=True, timeout=120)
    if p.returncode != 0:
        why = "import shardcast failed: %s" % p.stderr.decode()[-300:]
        return set(), {"tar": why, "frames": why}, False
    probe = json.loads(p.stdout.decode().strip().splitlines()[-1])
    detect_python_formats.modes = bool(probe.get("modes"))
    if probe["format_kw"]:
        return {"tar", "frames"}, {}, True
    return {"tar"}, {"frames": "ShardcastDataset has no format= option "
                               "(tar only)"}, False


def detect_server_formats(server_bin, dataset_dir, workdir):
    """Which of tar/frames a server started on local files answers with
    200 and the right Content-Type."""
    want = {"tar": "application/x-tar",
            "frames": "application/x-shardcast-frames"}
    ok, why = set(), {}
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        err = open(os.path.join(d, "stderr"), "wb")
        p = subprocess.Popen([server_bin, "--listen", "127.0.0.1", "--port", "0",
                              "--job", bc.JOB, "--source", dataset_dir,
                              "--log-level", "warn"],
                             stdout=subprocess.PIPE, stderr=err,
                             stdin=subprocess.DEVNULL)
        try:
            line = p.stdout.readline().decode()
            if not line.startswith("listening="):
                return ok, {f: "server did not start" for f in want}
            base = "http://" + line.split("=", 1)[1].strip()
            for fmt, ctype in want.items():
                url = "%s/v1/jobs/%s/epochs/0/stream?rank=0&world=1&format=%s" % (
                    base, bc.JOB, fmt)
                try:
                    with urllib.request.urlopen(url, timeout=30) as r:
                        got = r.headers.get("Content-Type", "").split(";")[0]
                        r.read(64)
                        if got == ctype:
                            ok.add(fmt)
                        else:
                            why[fmt] = "Content-Type %r" % got
                except urllib.error.HTTPError as e:
                    why[fmt] = "HTTP %d: %s" % (e.code, e.read(200).decode(
                        "utf-8", "replace").strip())
                except OSError as e:
                    why[fmt] = str(e)
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            err.close()
    return ok, why


def server_help_flags(server_bin):
    try:
        out = subprocess.run([server_bin, "--help"], capture_output=True,
                             timeout=20)
        return (out.stdout + out.stderr).decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_description():
    def cmd(args):
        try:
            return subprocess.run(args, capture_output=True, timeout=20,
                                  text=True).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    lscpu = cmd(["lscpu"])
    model = ""
    for line in lscpu.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    versions = {
        "python": platform.python_version(),
        "kernel": platform.release(),
        "nginx": cmd(["sh", "-c", "nginx -v 2>&1"]),
        "curl": cmd(["curl", "--version"]).splitlines()[0:1],
        "gcc": cmd(["gcc", "--version"]).splitlines()[0:1],
    }
    try:
        import torch
        versions["torch"] = torch.__version__
    except ImportError:
        versions["torch"] = None
    return {"nproc": cmd(["nproc"]), "free_g": cmd(["free", "-g"]),
            "loadavg_start": list(os.getloadavg()),
            "lscpu": lscpu, "cpu_model": model, "versions": versions}


def tree_state():
    def git(*args):
        try:
            return subprocess.run(["git", "-C", REPO] + list(args),
                                  capture_output=True, text=True,
                                  timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"commit": git("rev-parse", "HEAD"),
            "subject": git("log", "-1", "--format=%s"),
            "uncommitted": [l[3:] for l in git("status", "--porcelain").splitlines()
                            if not l[3:].startswith("bench/")]}


def results_header(fmt, command):
    """What a results.json of bench/steady.py or late_world.py starts with:
    its format, the command, the date, the tree (marked when it has
    uncommitted changes outside bench/) and the machine."""
    tree = tree_state()
    mach = machine_description()
    return {"format": fmt, "command": command,
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "tree": tree["commit"][:7] + (" + uncommitted changes"
                                          if tree["uncommitted"] else ""),
            "machine": "%s CPUs, %s" % (mach["nproc"], mach["cpu_model"])}


def md_head(title, doc, runs_line):
    """The first lines of a results.md: the title, the command, the date,
    tree and machine (results_header's), and a line on the runs."""
    return ["# " + title, "", "- command: `%s`" % doc["command"],
            "- date: %s; tree %s; %s" % (doc["date"], doc["tree"], doc["machine"]),
            "- " + runs_line, ""]


def finish(args, fmt, fields, markdown):
    """The results of a bench: results_header(fmt) with fields, written
    to args.out as results.json and (markdown(doc)) results.md, which is
    printed too. Returns the doc."""
    doc = results_header(fmt, args.command)
    doc.update(fields)
    md = markdown(doc)
    write_results(args.out, doc, md)
    sys.stdout.write(md)
    return doc


def write_results(out, doc, md):
    """results.json (doc) and results.md (md) into out."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)


# -- the run context -----------------------------------------------------------

class Ctx:
    """What contenders need: stores, binaries, limits, process tracking."""

    def __init__(self, args, workdir):
        self.workdir = workdir
        self.timeout = args.timeout
        self.rss_limit_kib = int(args.rss_limit_gib * 1024 * 1024)
        self.shuffle_buffer = SHUFFLE_BUFFER
        self.build = args.build
        sb = os.path.join(args.build, "shardcastd")
        self.server_bin = sb if os.access(sb, os.X_OK) else None
        self.server_flags = ["--shuffle-buffer", str(SHUFFLE_BUFFER),
                             "--shuffle-buffer-bytes", SERVER_BUFFER_BYTES] + \
            args.server_flags.split()
        self.curl = shutil.which("curl")
        self.nginx = None
        self.s3 = None
        self.python_formats, self.python_formats_reason = set(), {}
        self.python_format_kw = False
        self.python_modes = False
        self.server_formats, self.server_formats_reason = set(), {}
        self.cli_bench, self.cli_bench_reason = None, "not detected"
        self._lock = threading.Lock()
        self._pids = []
        self._abort = None

    def track(self, pid):
        with self._lock:
            self._pids.append(pid)

    def tracked(self):
        with self._lock:
            return list(self._pids)

    def aborted(self):
        return self._abort

    def begin(self):
        with self._lock:
            self._pids = []
        self._abort = None

    def over_limit(self, total_kib):
        self._abort = ("aborted: the contender's processes held %.1f GiB "
                       "(PSS; limit %.1f GiB)" % (total_kib / 1048576,
                                             self.rss_limit_kib / 1048576))
        bench_proc.kill_tree(self.tracked())


def store_for(ctx, source):
    return ctx.nginx if source == "http" else ctx.s3


def store_cpu(ctx, source):
    total = 0.0
    for pid in store_for(ctx, source).pids():
        c = bench_proc.cpu_seconds(pid)
        total += c or 0.0
    return total


def measure(ctx, contender, ds, workers, rep):
    """One run of one contender; returns the run record."""
    rec = {"contender": contender.name, "shape": ds.shape.name,
           "workers": workers, "run": rep, "status": "ok",
           # Other work on the machine shows here: the benchmark does not
           # own the machine, so the record says how busy it was.
           "loadavg_1m_before": os.getloadavg()[0]}
    ctx.begin()
    store = store_for(ctx, contender.source)
    if contender.source == "http":
        mark = store.log_offset()
    else:
        store.reset_counters()
    cpu0 = store_cpu(ctx, contender.source)
    sampler = bench_proc.Sampler(ctx.tracked, ctx.rss_limit_kib,
                                 ctx.over_limit).start()
    t0 = time.monotonic()
    try:
        res = contender.run(ctx, ds, workers, rep)
    except bc.ContenderError as e:
        res = None
        msg = str(e)
        rec["status"] = ("aborted" if msg.startswith("aborted")
                         else "timeout" if msg.startswith("timeout") else "failed")
        rec["reason"] = msg[:4000]
    except subprocess.TimeoutExpired:
        res = None
        rec["status"] = "timeout"
        rec["reason"] = "timeout after %.0f s" % ctx.timeout
    finally:
        sampler.stop()
        bench_proc.kill_tree(ctx.tracked())
    rec["wall_s"] = time.monotonic() - t0
    time.sleep(0.05)  # nginx logs a request as it finishes
    rec["store"] = (store.count_since(mark) if contender.source == "http"
                    else store.count())
    rec["store"]["cpu_s"] = store_cpu(ctx, contender.source) - cpu0
    rec["sampler_max_total_rss_kib"] = sampler.max_total_rss_kib
    rec["sampler_max_total_pss_kib"] = sampler.max_total_pss_kib
    if res is None:
        return rec
    rec.update(res)
    el = res["elapsed_s"]
    rec["samples_per_s"] = res["samples"] / el if el > 0 else None
    # After the first batch: start-up (worker spawn, buffer fill) excluded.
    t1 = res.get("ttfs_s")
    if t1 is not None and el - t1 > 0 and res["samples"] > 256:
        rec["steady_samples_per_s"] = (res["samples"] - 256) / (el - t1)
    pb = res.get("payload_bytes")
    rec["mb_per_s"] = pb / el / 1e6 if (pb is not None and el > 0) else None
    procs = res["processes"]
    for p in procs:  # sampled peaks for processes with no exact figure
        if p.get("hwm_kib") is None and p.get("pid") in sampler.peaks:
            p["hwm_kib"] = sampler.peaks[p["pid"]]["hwm_kib"]
            p["hwm_source"] = "sampled"
    cpu = sum(p["cpu_s"] for p in procs if p["role"] != "loader-worker")
    if "workers_cpu_s" in res:
        cpu += res["workers_cpu_s"]
    else:
        cpu += sum(p["cpu_s"] for p in procs if p["role"] == "loader-worker")
    rec["cpu_s"] = cpu
    # Where the CPU went, by role (for the analysis).
    rec["cpu_by_role"] = {}
    for p in procs:
        if p["role"] == "loader-worker":
            continue
        rec["cpu_by_role"][p["role"]] = rec["cpu_by_role"].get(p["role"], 0.0) \
            + p["cpu_s"]
        for k in ("epoch_cpu_s", "verify_s"):
            if k in p:
                rec["cpu_by_role"]["loader-main-" + k] = p[k]
    if "workers_cpu_s" in res:
        rec["cpu_by_role"]["loader-workers"] = res["workers_cpu_s"]
    rec["cpu_us_per_sample"] = cpu / res["samples"] * 1e6 if res["samples"] else None
    srv = [p["hwm_kib"] for p in procs if p["role"] == "shardcastd"
           and p.get("hwm_kib") is not None]
    clients = [p["hwm_kib"] for p in procs if p["role"] != "shardcastd"
               and p.get("hwm_kib") is not None]
    rec["rss"] = {"server_kib": srv[0] if srv else None,
                  "client_max_kib": max(clients) if clients else None,
                  "client_sum_kib": sum(clients) if clients else None,
                  "processes": len(procs)}
    if not res["verify"].get("ok"):
        rec["status"] = "failed"
        rec["reason"] = "exactly-once check failed: %s" % json.dumps(res["verify"])
    return rec


def figure(rec):
    if rec["status"] != "ok":
        return "%s: %s" % (rec["status"], rec.get("reason", "")[:200])
    return ("%8.0f samples/s %7.1f MB/s ttfs %6.2fs cpu %6.1fs srv-rss %s GETs %d"
            % (rec["samples_per_s"], rec["mb_per_s"] or 0, rec["ttfs_s"] or -1,
               rec["cpu_s"],
               "%.0fM" % (rec["rss"]["server_kib"] / 1024)
               if rec["rss"]["server_kib"] else "-", rec["store"]["gets"]))


# -- main --------------------------------------------------------------------------

PROFILE_WORKERS = 4


def profile_server(ctx, ds, out_dir):
    """`perf record -g` on shardcastd while `shardcast bench` takes one
    epoch from it with PROFILE_WORKERS consumers (the shardcast-c contender's
    setup: HTTP source from nginx, frames), then `perf report` as text into
    out_dir/profile-<shape>.txt. Returns the file name, or a reason."""
    perf = shutil.which("perf")
    if not perf:
        return None, "perf is not installed (linux-perf)"
    if not ctx.server_bin or not ctx.cli_bench:
        return None, "shardcastd or shardcast bench not available"
    data = os.path.join(ctx.workdir, "perf-%s.data" % ds.shape.name)

    def body(srv):
        rec = subprocess.Popen([perf, "record", "-g", "-q", "-o", data, "-p",
                                str(srv.proc.pid)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        fmt = "frames" if "frames" in ctx.server_formats else "tar"
        args = ctx.cli_bench.command(srv.url, bc.JOB, bc.EPOCH, PROFILE_WORKERS,
                                     ds.manifest_path, fmt)
        t0 = time.perf_counter()
        out = subprocess.run(args, capture_output=True, timeout=ctx.timeout)
        wall = time.perf_counter() - t0
        rec.send_signal(2)
        rec.wait(timeout=60)
        if out.returncode != 0:
            raise bc.ContenderError("shardcast bench exit %d" % out.returncode)
        res = ctx.cli_bench.parse(out.stdout.decode(), wall)
        res["processes"] = []
        return res

    try:
        res = bc._server_pass(ctx, ds, "http", PROFILE_WORKERS, body)
    except (bc.ContenderError, subprocess.SubprocessError, OSError) as e:
        return None, "profile run failed: %s" % str(e)[:300]
    name = "profile-%s.txt" % ds.shape.name
    srv_cpu = res["processes"][0]["cpu_s"] if res["processes"] else None
    with open(os.path.join(out_dir, name), "w") as f:
        f.write("# shardcastd under `perf record -g`, %s: %d consumers "
                "(shardcast bench, frames, HTTP source from nginx)\n"
                "# %d samples in %.2f s (%.0f samples/s); server CPU %.2f s"
                " (%.1f us/sample)\n\n"
                % (ds.shape.name, PROFILE_WORKERS, res["samples"],
                   res["elapsed_s"], res["samples"] / res["elapsed_s"],
                   srv_cpu or 0.0,
                   (srv_cpu or 0.0) / max(1, res["samples"]) * 1e6))
        f.flush()
        for sort, extra in (("dso", ["-g", "none"]),
                            ("symbol", ["-g", "none", "--percent-limit", "0.3"]),
                            ("symbol", ["-g", "caller,2,callee,function,percent",
                                        "--percent-limit", "3"])):
            f.write("## perf report --no-children --sort %s %s\n\n"
                    % (sort, " ".join(extra)))
            f.flush()
            subprocess.run([perf, "report", "-i", data, "--no-children",
                            "--stdio", "--sort", sort] + extra,
                           stdout=f, stderr=subprocess.DEVNULL, timeout=600)
            f.write("\n")
    os.unlink(data)
    return name, ""


def parse_args(argv):
    ap = argparse.ArgumentParser(description="shardcast benchmark (issue 7)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny datasets, W = 2, one run (the smoke test)")
    ap.add_argument("--runs", type=int, default=None,
                    help="repetitions (default 3, quick 1)")
    ap.add_argument("--workers", default=None,
                    help="comma-separated W values (default 1,4,16,64)")
    ap.add_argument("--shapes", default=None, help="images,tokens")
    ap.add_argument("--contenders", default=None,
                    help="comma-separated contender names (default: all)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(REPO, "build", "bench-data"),
                    help="datasets and s3rver's data (cached between runs)")
    ap.add_argument("--out", default=None,
                    help="result directory (default bench/results/<date>)")
    ap.add_argument("--latest", action="store_true",
                    help="also copy the results to bench/results/latest "
                         "(default for a full run without --out)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds one run may take (default 180, quick 60)")
    ap.add_argument("--rss-limit-gib", type=float, default=14.0,
                    help="stop a run whose processes hold more than this")
    ap.add_argument("--server-flags", default="",
                    help="extra shardcastd flags, space-separated (experiments;"
                         " recorded in the results)")
    ap.add_argument("--profile", choices=("on", "off"), default=None,
                    help="after the runs, profile shardcastd with perf for "
                         "each shape (default: on for a full run)")
    ap.add_argument("--command", default=None,
                    help="the command line to record (set by run.sh)")
    a = ap.parse_args(argv)
    a.runs = a.runs or (1 if a.quick else 3)
    a.timeout = a.timeout or (60.0 if a.quick else 180.0)
    a.workers = tuple(int(x) for x in a.workers.split(",")) if a.workers else (
        QUICK_WORKERS if a.quick else FULL_WORKERS)
    return a


def main(argv=None):
    args = parse_args(argv)
    started = datetime.datetime.now()
    date = started.strftime("%Y-%m-%d")
    if args.out is None:
        if args.quick:
            args.out = os.path.join(REPO, "build", "bench-quick", date)
        else:
            args.out = os.path.join(HERE, "results", date)
            args.latest = True
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.data, exist_ok=True)
    shapes = quick_shapes() if args.quick else full_shapes()
    if args.shapes:
        names = args.shapes.split(",")
        shapes = [s for s in shapes if s.name in names]
    contenders = bc.all_contenders()
    if args.contenders:
        names = args.contenders.split(",")
        unknown = set(names) - {c.name for c in contenders}
        if unknown:
            sys.exit("unknown contenders: %s" % ", ".join(sorted(unknown)))
        contenders = [c for c in contenders if c.name in names]

    workdir = tempfile.mkdtemp(prefix="shardcast-bench-")
    ctx = Ctx(args, workdir)
    results = {"format": FORMAT, "mode": "quick" if args.quick else "full",
               "started": started.isoformat(timespec="seconds"),
               "command": args.command or " ".join(["bench/bench.py"] + (argv or sys.argv[1:])),
               "machine": machine_description(), "tree": tree_state(),
               "config": {"runs": args.runs, "workers": list(args.workers),
                          "shuffle_buffer": SHUFFLE_BUFFER, "batch_size": 256,
                          "collate": "keep bytes (list of dicts)",
                          "pin_memory": False,
                          "server_flags": ctx.server_flags,
                          "timeout_s": args.timeout,
                          "rss_limit_gib": args.rss_limit_gib,
                          "build": args.build},
               "datasets": {}, "contenders": [], "runs": []}
    try:
        datasets = {}
        for s in shapes:
            datasets[s.name] = ensure_dataset(args.data, s, log)
            d = datasets[s.name].to_dict()
            d["largest_buffer_bytes"] = datasets[s.name].largest_samples_bytes(
                SHUFFLE_BUFFER)
            results["datasets"][s.name] = d
        need_s3 = any(c.source == "s3" for c in contenders)
        ctx.nginx = Nginx(os.path.join(args.data, "datasets"), workdir).start()
        log("nginx on %s" % ctx.nginx.url)
        if need_s3:
            ctx.s3 = S3Store(args.data, workdir).start()
            log("s3rver on %s behind counting proxy %s"
                % (ctx.s3.s3.endpoint, ctx.s3.endpoint))
            for ds in datasets.values():
                ctx.s3.upload(ds, log)
        # Capabilities of this tree.
        (ctx.python_formats, ctx.python_formats_reason,
         ctx.python_format_kw) = detect_python_formats()
        ctx.python_modes = getattr(detect_python_formats, "modes", False)
        if ctx.server_bin:
            first = next(iter(datasets.values()))
            ctx.server_formats, ctx.server_formats_reason = detect_server_formats(
                ctx.server_bin, first.path, workdir)
            help_text = server_help_flags(ctx.server_bin)
            results["config"]["server_help"] = help_text
            if "--prefetch" in help_text:
                # Reading epoch 1 ahead would add its GETs, CPU and memory to
                # the measured epoch 0.
                ctx.server_flags += ["--prefetch", "false"]
            results["config"]["server_flags"] = ctx.server_flags
        ctx.cli_bench, ctx.cli_bench_reason = CliBench.detect(args.build)
        if ctx.cli_bench is None:
            ctx.cli_bench_reason = ctx.cli_bench_reason or "not available"
        results["capabilities"] = {
            "server": bool(ctx.server_bin),
            "server_formats": sorted(ctx.server_formats),
            "server_formats_reason": ctx.server_formats_reason,
            "python_formats": sorted(ctx.python_formats),
            "python_formats_reason": ctx.python_formats_reason,
            "cli_bench": ctx.cli_bench is not None,
            "cli_bench_reason": ctx.cli_bench_reason}
        runnable = []
        for c in contenders:
            ok, why = c.available(ctx)
            d = c.to_dict()
            d.update({"available": ok, "reason": why})
            if ok and getattr(c, "fmt", None):
                d["format"] = c.fmt
            results["contenders"].append(d)
            log("contender %-24s %s" % (c.name, "available" if ok
                                        else "not available: " + why))
            if ok:
                runnable.append(c)
        # Cells that failed by timeout or memory are not retried, and
        # neither are larger W of the same contender and shape.
        given_up = {}
        for rep in range(args.runs):
            order = runnable[rep % len(runnable):] + runnable[:rep % len(runnable)] \
                if runnable else []
            for s in shapes:
                ds = datasets[s.name]
                for w in args.workers:
                    for c in order:
                        key = (c.name, s.name)
                        if key in given_up and w >= given_up[key][0]:
                            rec = {"contender": c.name, "shape": s.name,
                                   "workers": w, "run": rep, "status": "skipped",
                                   "reason": "not run: W=%d %s" % given_up[key]}
                        else:
                            rec = measure(ctx, c, ds, w, rep)
                            if rec["status"] in ("timeout", "aborted"):
                                given_up.setdefault(key, (w, rec["status"]))
                        results["runs"].append(rec)
                        log("run %d %-7s W=%-3d %-24s %s" % (rep, s.name, w, c.name,
                                                              figure(rec)))
        if (args.profile or ("off" if args.quick else "on")) == "on":
            results["profiles"] = {}
            for s in shapes:
                name, why = profile_server(ctx, datasets[s.name], args.out)
                results["profiles"][s.name] = name or ("not made: " + why)
                log("profile %-7s %s" % (s.name, name or why))
    finally:
        if ctx.nginx:
            ctx.nginx.stop()
        if ctx.s3:
            ctx.s3.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    finished = datetime.datetime.now()
    results["finished"] = finished.isoformat(timespec="seconds")
    results["duration_s"] = (finished - started).total_seconds()
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    bench_report.summarize(results)
    bench_report.write_all(results, args.out)
    log("results in %s" % args.out)
    if args.latest:
        latest = os.path.join(HERE, "results", "latest")
        if os.path.abspath(latest) != os.path.abspath(args.out):
            shutil.rmtree(latest, ignore_errors=True)
            shutil.copytree(args.out, latest)
            log("copied to %s" % latest)
    failed = [r for r in results["runs"] if r["status"] == "failed"]
    return 1 if failed and args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
