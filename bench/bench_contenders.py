"""The benchmark's contenders, one small adapter each.

A contender has a `name`, the `source` it reads ("http": nginx, "s3":
s3rver behind the counting proxy), a `family` ("ceiling", "baseline",
"shardcast-py", "shardcast-c") and two methods:

  available(ctx) -> (bool, reason)
      whether this tree and machine can run it (e.g. `build/shardcast`
      exists, the server answers format=frames); a missing capability is
      reported as "not available: <reason>", never as a failure;
  run(ctx, ds, workers, tag) -> dict
      one epoch with `workers` consumers; returns the raw figures (see
      bench.py for the record) or raises ContenderError.

Processes a contender starts are its own children; it reaps them with
wait4 (exact peak RSS and CPU) and registers their pids with ctx.track()
so the harness's watchdog can see and, if needed, stop them.
"""

import json
import os
import signal
import subprocess
import tempfile
import threading
import time

from bench_proc import communicate_rusage, kill_tree, read_status, wait_rusage
from bench_env import BUCKET, PY, REPO

JOB = "bench"
SEED = 7
EPOCH = 0
SERVER_START_TIMEOUT = 60.0


class ContenderError(Exception):
    """A run failed; the message says why (with the tail of any log)."""


def _tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# -- shardcastd --------------------------------------------------------------

class Server:
    """One shardcastd for one run: started fresh so that its peak RSS and
    CPU belong to that run alone."""

    def __init__(self, ctx, source, env=None):
        self.ctx = ctx
        self.workdir = tempfile.mkdtemp(prefix="srv-", dir=ctx.workdir)
        self.stderr_path = os.path.join(self.workdir, "stderr.log")
        args = [ctx.server_bin, "--listen", "127.0.0.1", "--port", "0",
                "--job", JOB, "--source", source, "--seed", str(SEED),
                "--log-level", "warn"] + ctx.server_flags
        self.args = args
        penv = dict(os.environ)
        for k in list(penv):
            if k.startswith("AWS_"):
                del penv[k]
        penv["HOME"] = self.workdir  # no ~/.aws of the machine
        penv["AWS_EC2_METADATA_DISABLED"] = "true"
        penv.update(env or {})
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=self._err, stdin=subprocess.DEVNULL,
                                     env=penv)
        ctx.track(self.proc.pid)
        line = self._listening_line()
        if not line.startswith("listening="):
            self.stop()
            raise ContenderError("shardcastd did not start: %r\n%s"
                                 % (line, _tail(self.stderr_path)))
        addr = line[len("listening="):].strip()
        self.url = "http://" + addr
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def _listening_line(self):
        out = []
        t = threading.Thread(target=lambda: out.append(
            self.proc.stdout.readline().decode("utf-8", "replace")), daemon=True)
        t.start()
        t.join(SERVER_START_TIMEOUT)
        return out[0] if out else ""

    def stop(self):
        """SIGTERM, reap; returns (exit code, rusage dict). The rusage's
        "hwm_kib" is the server's VmHWM read just before the signal (wait4's
        ru_maxrss would include the harness's RSS at fork time)."""
        st = read_status(self.proc.pid) if self.proc.returncode is None else None
        self.hwm_kib = st.get("VmHWM") if st else None
        if self.proc.poll() is None and self.proc.returncode is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        rc, ru = wait_rusage(self.proc, timeout=20)
        self._err.close()
        ru["hwm_kib"] = self.hwm_kib
        return rc, ru

    def log_tail(self):
        return _tail(self.stderr_path)


def server_source(ctx, ds, source):
    if source == "http":
        n = len(ds.files) - 1
        width = 6
        return "%s/%s/%s-{%0*d..%0*d}.tar" % (ctx.nginx.url, ds.shape.key(),
                                               ds.shape.name, width, 0, width, n)
    return "s3://%s/%s" % (BUCKET, ds.s3_prefix)


# -- contenders -----------------------------------------------------------------

class Contender:
    name = "?"
    source = "http"
    family = "?"
    label = "?"
    description = ""

    def available(self, ctx):
        return True, ""

    def to_dict(self):
        return {"name": self.name, "source": self.source, "family": self.family,
                "label": self.label, "description": self.description}


class CurlCeiling(Contender):
    """W parallel curl processes, each fetching every W-th shard over one
    kept-alive connection to /dev/null: the store's raw throughput."""

    family = "ceiling"

    def __init__(self, source):
        self.source = source
        self.name = "ceiling-curl" if source == "http" else "ceiling-curl-s3"
        self.label = ("nginx ceiling (curl)" if source == "http"
                      else "s3rver ceiling (curl, SigV4)")
        self.description = (
            "W parallel `curl` processes, each downloading every W-th shard "
            "to /dev/null over one kept-alive connection"
            + (" from nginx" if source == "http" else
               " from s3rver through the counting proxy, signed with "
               "curl --aws-sigv4"))

    def available(self, ctx):
        if not ctx.curl:
            return False, "curl is not installed"
        return True, ""

    def run(self, ctx, ds, workers, tag):
        if self.source == "http":
            urls = ["%s/%s/%s" % (ctx.nginx.url, ds.shape.key(), f) for f in ds.files]
            auth = []
        else:
            urls = ["%s/%s/%s%s" % (ctx.s3.endpoint, BUCKET, ds.s3_prefix, f)
                    for f in ds.files]
            auth = ["--aws-sigv4", "aws:amz:us-east-1:s3",
                    "--user", "S3RVER:S3RVER",
                    # S3 requires the payload hash header; curl signs it.
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        procs = []
        t0 = time.perf_counter()
        for w in range(workers):
            mine = urls[w::workers]
            if not mine:
                continue
            args = [ctx.curl, "-sS", "--fail", "-w",
                    "%{time_starttransfer} %{size_download}\\n"] + auth
            for u in mine:
                args += ["-o", "/dev/null", u]
            p = subprocess.Popen(args, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            ctx.track(p.pid)
            procs.append(p)
        outs, usages, errors = [], [], []
        deadline = time.monotonic() + ctx.timeout
        for p in procs:
            rc, ru, out, err = communicate_rusage(
                p, max(1.0, deadline - time.monotonic()))
            outs.append(out.decode())
            usages.append(ru)
            if ru["killed"]:
                errors.append("timeout after %.0f s" % ctx.timeout)
            elif rc != 0:
                errors.append("curl exit %d: %s" % (rc, err.decode()[-300:]))
        elapsed = time.perf_counter() - t0
        if ctx.aborted():
            raise ContenderError(ctx.aborted())
        if errors:
            raise ContenderError("; ".join(errors[:3]))
        nbytes, firsts = 0, []
        for out in outs:
            lines = out.split()
            for i in range(0, len(lines), 2):
                nbytes += int(lines[i + 1])
            if lines:
                firsts.append(float(lines[0]))
        if nbytes != ds.tar_bytes:
            raise ContenderError("curl fetched %d bytes, the shards have %d"
                                 % (nbytes, ds.tar_bytes))
        return {
            "samples": ds.total_samples, "payload_bytes": ds.payload_bytes,
            "wire_bytes": nbytes, "elapsed_s": elapsed,
            "ttfs_s": min(firsts) if firsts else None,
            "ttfs_kind": "first byte",
            # Peak RSS of curl is sampled (see bench_proc): wait4's
            # ru_maxrss would include the harness's own RSS at fork.
            "processes": [{"role": "curl", "pid": p.pid, "hwm_kib": None,
                           "cpu_s": u["cpu_s"]} for p, u in zip(procs, usages)],
            "verify": {"ok": True, "method": "bytes == sum of shard sizes"},
        }


class PythonContender(Contender):
    """A DataLoader run in loader_run.py (see its docstring)."""

    def _spec(self, ctx, ds, workers, stats_dir):
        raise NotImplementedError

    def _env(self, ctx):
        return {}

    def _run_loader(self, ctx, ds, workers, extra_roots=()):
        stats_dir = tempfile.mkdtemp(prefix="stats-", dir=ctx.workdir)
        spec = self._spec(ctx, ds, workers, stats_dir)
        spec.update({"workers": workers, "manifest": ds.manifest_path,
                     "stats_dir": stats_dir, "seed": SEED, "epoch": EPOCH,
                     "shuffle_buffer": spec.get("shuffle_buffer", 0)})
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["HOME"] = stats_dir
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        env["PYTHONPATH"] = os.path.join(REPO, "clients", "python")
        # Where the Python client finds its C accelerator (build/python/).
        env["SHARDCAST_BUILD"] = ctx.build
        # One thread per process for torch's own pools: W workers already
        # share 2 cores.
        env["OMP_NUM_THREADS"] = "1"
        env.update(self._env(ctx))
        errpath = os.path.join(stats_dir, "stderr.log")
        with open(errpath, "wb") as err:
            p = subprocess.Popen([PY, os.path.join(REPO, "bench", "loader_run.py"),
                                  json.dumps(spec)], stdout=subprocess.PIPE,
                                 stderr=err, stdin=subprocess.DEVNULL, env=env)
            ctx.track(p.pid)
            rc, ru, out, _ = communicate_rusage(
                p, ctx.timeout, on_timeout=lambda q: kill_tree([q.pid]))
        if ru["killed"]:
            raise ContenderError("timeout after %.0f s" % ctx.timeout)
        if ctx.aborted():
            raise ContenderError(ctx.aborted())
        if rc != 0:
            raise ContenderError("loader exit %d: %s" % (rc, _tail(errpath, 1500)))
        res = json.loads(out.decode().strip().splitlines()[-1])
        procs = [{"role": "loader-main", "pid": p.pid,
                  "hwm_kib": res["main"]["hwm_kib"], "cpu_s": ru["cpu_s"],
                  "epoch_cpu_s": res["main"]["epoch_cpu_s"],
                  "verify_s": res["main"]["verify_s"]}]
        procs += [{"role": "loader-worker", "hwm_kib": w["hwm_kib"],
                   "cpu_s": w["cpu_s"]} for w in res["workers"]]
        # The workers' exact total CPU (incl. start-up and shutdown) is the
        # main process's RUSAGE_CHILDREN; their self-reports are per process.
        workers_cpu = res["children_cpu_s"]
        return {
            "samples": res["samples"], "payload_bytes": res["payload_bytes"],
            "elapsed_s": res["elapsed_s"], "ttfs_s": res["first_batch_s"],
            "ttfs_kind": "first batch of 256",
            "processes": procs, "workers_cpu_s": workers_cpu,
            "verify": res["verify"],
        }


class Baseline(PythonContender):
    family = "baseline"

    def __init__(self, source):
        self.source = source
        self.name = "baseline-" + source
        tool = "urllib" if source == "http" else "boto3"
        self.label = "baseline (%s + tarfile)" % tool
        self.description = (
            "DataLoader workers each streaming every W-th shard with %s and "
            "tarfile (stream mode), per-worker shuffle buffer of "
            "10000/W samples" % ("urllib.request" if source == "http"
                                 else "boto3 get_object"))

    def available(self, ctx):
        if self.source == "s3":
            try:
                import boto3  # noqa: F401
            except ImportError:
                return False, "boto3 is not installed (python3-boto3)"
        return True, ""

    def _spec(self, ctx, ds, workers, stats_dir):
        if self.source == "http":
            shards = ["%s/%s/%s" % (ctx.nginx.url, ds.shape.key(), f)
                      for f in ds.files]
        else:
            shards = [ds.s3_prefix + f for f in ds.files]
        # Same total buffer as shardcast's one buffer: W buffers of B/W.
        return {"kind": "baseline", "source": self.source, "shards": shards,
                "bucket": BUCKET,
                "shuffle_buffer": max(1, ctx.shuffle_buffer // workers)}

    def _env(self, ctx):
        return ctx.s3.env() if self.source == "s3" else {}

    def run(self, ctx, ds, workers, tag):
        return self._run_loader(ctx, ds, workers)


def _server_pass(ctx, ds, source, workers, body):
    """Start a server on `source`, run body(server) -> result dict, stop the
    server and merge its figures into the result."""
    env = ctx.s3.env() if source == "s3" else None
    srv = Server(ctx, server_source(ctx, ds, source), env=env)
    try:
        res = body(srv)
    except BaseException:
        srv.stop()
        raise
    rc, ru = srv.stop()
    if rc != 0:
        raise ContenderError("shardcastd exit %d after the run:\n%s"
                             % (rc, srv.log_tail()))
    res["processes"].insert(0, {"role": "shardcastd", "pid": srv.proc.pid,
                                "hwm_kib": ru["hwm_kib"], "cpu_s": ru["cpu_s"]})
    return res


class DataLoaderCeiling(PythonContender):
    """The same DataLoader, collate and main loop over samples already in
    memory (loader_run.py's InMemory). Its shards are read from the store
    (nginx, as the HTTP baseline reads them) before the clock starts. Its
    family is not "ceiling": that one is the machine's I/O ceiling (curl),
    the reference of x_ceiling; this is the loader's."""

    family = "loader-ceiling"
    name = "dataloader-ceiling"
    label = "DataLoader ceiling (samples in memory)"
    description = ("the same DataLoader (W workers, batch 256, keep-bytes "
                   "collate) and main loop, fed from samples read into memory "
                   "before the clock starts: no I/O, no parsing")

    def _spec(self, ctx, ds, workers, stats_dir):
        return {"kind": "ceiling",
                "shards": ["%s/%s/%s" % (ctx.nginx.url, ds.shape.key(), f)
                           for f in ds.files]}

    def run(self, ctx, ds, workers, tag):
        return self._run_loader(ctx, ds, workers)


# Variants of the frames contender: (name suffix, label, spec keys).
PY_VARIANTS = {
    "": ("", {}),
    "purepy": (", pure-Python decoder", {"decoder": "python"}),
    "batched": (", batched mode", {"mode": "batched"}),
    "tensor": (", tensor mode", {"mode": "tensor"}),
}


class ShardcastPython(PythonContender):
    family = "shardcast-py"

    def __init__(self, fmt, source="http", variant=""):
        # fmt "best": frames when both ends speak it, else tar (resolved by
        # available()); used for the S3 source to keep the run short.
        self.fmt = fmt
        self.want = fmt
        self.source = source
        self.variant = variant
        extra, self.extra_spec = PY_VARIANTS[variant]
        self.name = "shardcast-py-%s%s%s" % (fmt, "-" + variant if variant else "",
                                             "" if source == "http" else "-s3")
        self.label = "shardcast, Python %s%s%s" % (fmt, extra, "" if source == "http"
                                                   else " (S3 source)")
        self.description = (
            "shardcastd reading the %s source, W DataLoader workers as W "
            "consumers with shardcast.ShardcastDataset, format=%s%s"
            % ("nginx HTTP" if source == "http" else "s3rver S3",
               fmt if fmt != "best" else "frames if available, else tar",
               {"": " (C frames decoder when built)",
                "purepy": ", pure-Python frames decoder",
                "batched": ", batch_size=256 in the dataset, DataLoader "
                           "batch_size=None",
                "tensor": ", batch_size=256 and tensors=True in the dataset "
                          "(one shared-memory uint8 tensor per field and "
                          "batch), DataLoader batch_size=None"}[variant]))

    def available(self, ctx):
        if not ctx.server_bin:
            return False, "shardcastd is not built"
        if self.variant and not ctx.python_modes:
            return False, "the Python client has no batch_size=/tensors= options"
        if self.want == "best":
            self.fmt = "tar"
            if "frames" in ctx.python_formats and "frames" in ctx.server_formats:
                self.fmt = "frames"
        if self.fmt not in ctx.python_formats:
            return False, ctx.python_formats_reason.get(
                self.fmt, "the Python client has no %s reader" % self.fmt)
        if self.fmt not in ctx.server_formats:
            return False, "the server does not answer format=%s (%s)" % (
                self.fmt, ctx.server_formats_reason.get(self.fmt, "?"))
        return True, ""

    def _spec(self, ctx, ds, workers, stats_dir):
        spec = {"kind": "shardcast", "server": self._url, "job": JOB,
                "format": self.fmt if ctx.python_format_kw else None}
        spec.update(self.extra_spec)
        return spec

    def run(self, ctx, ds, workers, tag):
        def body(srv):
            self._url = srv.url
            res = self._run_loader(ctx, ds, workers)
            res["format"] = self.fmt
            return res
        return _server_pass(ctx, ds, self.source, workers, body)


class ShardcastC(Contender):
    """`shardcast bench`: W concurrent consumers in one C process."""

    family = "shardcast-c"

    def __init__(self):
        self.name = "shardcast-c"
        self.label = "shardcast, C (`shardcast bench`)"
        self.description = ("shardcastd reading nginx, `shardcast bench` with "
                            "W concurrent consumers, --verify against the "
                            "manifest")

    def available(self, ctx):
        if not ctx.server_bin:
            return False, "shardcastd is not built"
        if not ctx.cli_bench:
            return False, ctx.cli_bench_reason
        return True, ""

    def run(self, ctx, ds, workers, tag):
        def body(srv):
            fmt = "frames" if "frames" in ctx.server_formats else "tar"
            args = ctx.cli_bench.command(srv.url, JOB, EPOCH, workers,
                                         ds.manifest_path, fmt)
            errpath = os.path.join(srv.workdir, "bench.stderr")
            with open(errpath, "wb") as err:
                t0 = time.perf_counter()
                p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err,
                                     stdin=subprocess.DEVNULL)
                ctx.track(p.pid)
                rc, ru, out, _ = communicate_rusage(p, ctx.timeout)
                wall = time.perf_counter() - t0
            if ru["killed"]:
                raise ContenderError("timeout after %.0f s" % ctx.timeout)
            if ctx.aborted():
                raise ContenderError(ctx.aborted())
            if rc != 0:
                raise ContenderError(
                    "shardcast bench exit %d: %s\nstdout: %s\nserver: %s"
                    % (rc, _tail(errpath, 1500),
                       out[-800:].decode("utf-8", "replace"),
                       srv.log_tail()[-1500:]))
            res = ctx.cli_bench.parse(out.decode(), wall)
            res["processes"] = [{"role": "shardcast-bench", "pid": p.pid,
                                 "hwm_kib": None, "cpu_s": ru["cpu_s"]}]
            return res
        return _server_pass(ctx, ds, "http", workers, body)


def all_contenders():
    """Every contender, in the default order of a round."""
    return [CurlCeiling("http"), DataLoaderCeiling(), Baseline("http"),
            ShardcastPython("tar"), ShardcastPython("frames"),
            ShardcastPython("frames", variant="purepy"),
            ShardcastPython("frames", variant="batched"),
            ShardcastPython("frames", variant="tensor"), ShardcastC(),
            CurlCeiling("s3"),
            Baseline("s3"), ShardcastPython("best", "s3")]
