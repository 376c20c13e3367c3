"""The benchmark's environment: datasets, the object stores and the request
counters.

* Datasets: tests/tools/mkwds.py (deterministic shards + manifest.json with
  every sample's key and content hash), cached under the data directory by
  shape and size, regenerated only when their parameters change.
* HTTP store: Debian's nginx on 127.0.0.1 serving the dataset directories
  (sendfile, keep-alive). It counts its own requests: every request is one
  line of a dedicated access log ("METHOD URI STATUS BYTES"), and a run's
  requests are the lines appended during it. Counting at the store costs
  nginx one small write per request; a counting proxy in front of nginx
  would cap the very throughput the ceiling measures.
* S3 store: s3rver (tests/support/s3rver.py) with the same shards in bucket
  "bench", behind tests/support/faultproxy.py run as a separate process with
  no rules: a counting proxy whose /__proxy__/counters give GETs and bytes.
  s3rver keeps its data directory under the data directory, so shards are
  uploaded once and reused by later runs.

Everything listens on 127.0.0.1 only. Each started process is stopped by
stop() (the Env is a context manager). Single-threaded use.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MKWDS = os.path.join(REPO, "tests", "tools", "mkwds.py")
PY = "/usr/bin/python3"
BUCKET = "bench"
S3_ACCESS_KEY = "S3RVER"   # s3rver's built-in local test account
S3_SECRET_KEY = "S3RVER"
S3_REGION = "us-east-1"

sys.path.insert(0, os.path.join(REPO, "tests"))


class Shape:
    """One dataset shape: name, shard count, samples per shard, payload
    size (mkwds --size: jittered within [size/2, 3*size/2])."""

    def __init__(self, name, shards, per_shard, size, seed, label):
        self.name = name
        self.shards = shards
        self.per_shard = per_shard
        self.size = size
        self.seed = seed
        self.label = label

    def key(self):
        return "%s-%dx%d-%d-s%d" % (self.name, self.shards, self.per_shard,
                                    self.size, self.seed)

    def to_dict(self):
        return {"name": self.name, "label": self.label, "shards": self.shards,
                "samples_per_shard": self.per_shard, "size": self.size,
                "seed": self.seed}


class Dataset:
    """A generated dataset: its directory, files and manifest figures."""

    def __init__(self, shape, path):
        self.shape = shape
        self.path = path
        self.manifest_path = os.path.join(path, "manifest.json")
        with open(self.manifest_path) as f:
            m = json.load(f)
        self.files = [s["file"] for s in m["shards"]]
        self.total_samples = m["total_samples"]
        self.tar_bytes = sum(s["bytes"] for s in m["shards"])
        sizes = [sum(fv["size"] for fv in s["fields"].values())
                 for s in m["samples"]]
        self.payload_bytes = sum(sizes)
        self.sample_sizes_desc = sorted(sizes, reverse=True)
        # The S3 prefix: one per dataset so shapes never collide.
        self.s3_prefix = shape.key() + "/"

    def largest_samples_bytes(self, n):
        """Payload bytes of the n largest samples: what a buffer of n
        samples can hold at most."""
        return sum(self.sample_sizes_desc[:n])

    def to_dict(self):
        return {"shape": self.shape.to_dict(), "samples": self.total_samples,
                "tar_bytes": self.tar_bytes,
                "payload_bytes": self.payload_bytes,
                "mean_sample_bytes": self.payload_bytes / self.total_samples,
                "path": self.path}


def ensure_dataset(data_root, shape, log):
    """Generate shape's dataset under data_root unless an identical one is
    there (same parameters, complete manifest); return the Dataset."""
    path = os.path.join(data_root, "datasets", shape.key())
    stamp = os.path.join(path, ".complete")
    if not os.path.exists(stamp):
        if os.path.isdir(path):
            shutil.rmtree(path)
        log("generating dataset %s (%d shards x %d samples, ~%d B payload)"
            % (shape.key(), shape.shards, shape.per_shard, shape.size))
        t0 = time.monotonic()
        subprocess.run([PY, MKWDS, "--out", path, "--shards", str(shape.shards),
                        "--samples-per-shard", str(shape.per_shard),
                        "--size", str(shape.size), "--seed", str(shape.seed),
                        "--prefix", shape.name], check=True,
                       stdout=subprocess.DEVNULL)
        with open(stamp, "w") as f:
            f.write("ok\n")
        log("dataset %s ready in %.1f s" % (shape.key(), time.monotonic() - t0))
    return Dataset(shape, path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port, proc, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("%s exited with %s" % (what, proc.returncode))
            if time.monotonic() > deadline:
                raise RuntimeError("%s does not listen on %d" % (what, port))
            time.sleep(0.05)


def _stop_group(proc, timeout=10.0):
    """SIGTERM the process group of a child started with
    start_new_session=True, then SIGKILL after timeout."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout)


class Nginx:
    """nginx on 127.0.0.1 serving root_dir; counts requests in its log.
    With upstream (a URL), a relay instead: proxy_pass to it, buffering
    on, no cache."""

    def __init__(self, root_dir, workdir, upstream=None):
        self.root_dir = root_dir
        self.upstream = upstream
        self.workdir = os.path.join(workdir, "relay" if upstream else "nginx")
        self.proc = None
        self.port = None
        self.log_path = os.path.join(self.workdir, "requests.log")

    def start(self):
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.access(exe, os.X_OK):
            raise RuntimeError("nginx is not installed (apt-get install nginx-light)")
        os.makedirs(self.workdir, exist_ok=True)
        self.port = free_port()
        tmp = {k: os.path.join(self.workdir, k)
               for k in ("body", "proxy", "fcgi", "uwsgi", "scgi")}
        # As root, nginx's workers would drop to "nobody", which may not
        # read the data directory.
        user = "user root;\n" if os.geteuid() == 0 else ""
        if self.upstream:
            server = ("upstream store { server %s; keepalive 64; }\n"
                      "  server { listen 127.0.0.1:%d; location / { "
                      "proxy_pass http://store; proxy_http_version 1.1; "
                      "proxy_set_header Connection \"\"; "
                      "proxy_buffering on; } }"
                      % (self.upstream.replace("http://", ""), self.port))
        else:
            server = "server { listen 127.0.0.1:%d; root %s; }" % (
                self.port, self.root_dir)
        conf = os.path.join(self.workdir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(user + """daemon off;
worker_processes auto;
pid %(wd)s/nginx.pid;
error_log %(wd)s/error.log;
events { worker_connections 4096; }
http {
  log_format bench '$request_method $uri $status $body_bytes_sent';
  %(access)s
  client_body_temp_path %(body)s;
  proxy_temp_path %(proxy)s;
  fastcgi_temp_path %(fcgi)s;
  uwsgi_temp_path %(uwsgi)s;
  scgi_temp_path %(scgi)s;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  keepalive_timeout 120s;
  %(server)s
}
""" % dict(wd=self.workdir, server=server,
                access=("access_log off;" if self.upstream else
                        "access_log %s bench;" % self.log_path), **tmp))
        self.proc = subprocess.Popen([exe, "-c", conf, "-p", self.workdir],
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        _wait_port(self.port, self.proc, "nginx")
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def pids(self):
        """nginx's master and worker pids (their CPU is the store's)."""
        from bench_proc import descendants
        return sorted(descendants([self.proc.pid])) if self.proc else []

    def log_offset(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def count_since(self, offset):
        """Requests logged after byte offset: {"requests", "gets",
        "bytes", "by_status"}. nginx writes a line when a request ends, so
        read this once the client side has finished."""
        out = {"requests": 0, "gets": 0, "bytes": 0, "by_status": {}}
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            for line in f:
                parts = line.split()
                if len(parts) != 4:
                    continue
                method, _uri, status, nbytes = parts
                out["requests"] += 1
                if method == b"GET":
                    out["gets"] += 1
                out["bytes"] += int(nbytes)
                st = status.decode()
                out["by_status"][st] = out["by_status"].get(st, 0) + 1
        return out

    def stop(self):
        _stop_group(self.proc)
        self.proc = None


class S3Store:
    """s3rver with the datasets in bucket BUCKET, behind a counting
    faultproxy process. `endpoint` is the proxy's URL: every S3 client of
    the benchmark goes through it."""

    def __init__(self, data_root, workdir):
        self.directory = os.path.join(data_root, "s3rver")
        self.workdir = workdir
        self.s3 = None
        self.proxy = None
        self.endpoint = None
        self._proxy_log = None

    def start(self):
        from support.s3rver import S3rver
        os.makedirs(self.directory, exist_ok=True)
        self.s3 = S3rver(directory=self.directory).start()
        self._proxy_log = open(os.path.join(self.workdir, "faultproxy.log"), "wb")
        self.proxy = subprocess.Popen(
            [PY, os.path.join(REPO, "tests", "support", "faultproxy.py"),
             self.s3.endpoint], stdout=subprocess.PIPE, stderr=self._proxy_log,
            stdin=subprocess.DEVNULL, start_new_session=True)
        line = self.proxy.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise RuntimeError("faultproxy did not start: %r" % line)
        self.endpoint = line
        return self

    def upload(self, ds, log):
        """Put ds's shards under s3://BUCKET/<ds.s3_prefix> unless every one
        is there with its size; returns the keys in shard order."""
        client = self.s3.s3  # direct to s3rver: uploads are not counted
        try:
            client.create_bucket(Bucket=BUCKET)
        except Exception as e:  # already there from a previous run
            if "BucketAlreadyOwnedByYou" not in str(e) and \
                    "BucketAlreadyExists" not in str(e):
                raise
        have = {}
        pager = client.get_paginator("list_objects_v2")
        for page in pager.paginate(Bucket=BUCKET, Prefix=ds.s3_prefix):
            for o in page.get("Contents", []):
                have[o["Key"]] = o["Size"]
        keys = [ds.s3_prefix + f for f in ds.files]
        todo = [k for f, k in zip(ds.files, keys)
                if have.get(k) != os.path.getsize(os.path.join(ds.path, f))]
        if todo:
            log("uploading %d shards of %s to s3rver" % (len(todo), ds.shape.key()))
            t0 = time.monotonic()
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=8) as ex:
                list(ex.map(lambda k: client.upload_file(
                    os.path.join(ds.path, k[len(ds.s3_prefix):]), BUCKET, k),
                    todo))
            log("upload done in %.1f s" % (time.monotonic() - t0))
        return keys

    def env(self):
        """AWS settings pointing a client at the counting proxy; no other
        credential source is consulted (HOME is replaced, IMDS is off)."""
        return {"AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
                "AWS_REGION": S3_REGION, "AWS_DEFAULT_REGION": S3_REGION,
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ENDPOINT_URL_S3": self.endpoint,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def counters(self):
        with urllib.request.urlopen(self.endpoint + "/__proxy__/counters",
                                    timeout=30) as r:
            return json.load(r)

    def reset_counters(self):
        req = urllib.request.Request(self.endpoint + "/__proxy__/counters",
                                     method="DELETE")
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()

    def count(self):
        """The proxy's counters in the shape of Nginx.count_since."""
        c = self.counters()
        return {"requests": c["requests"], "gets": c["by_method"].get("GET", 0),
                "bytes": c["bytes_sent"], "by_status": c["by_status"],
                "by_method": c["by_method"]}

    def pids(self):
        from bench_proc import descendants
        roots = []
        if self.s3 is not None and self.s3._proc is not None:
            roots.append(self.s3._proc.pid)
        if self.proxy is not None:
            roots.append(self.proxy.pid)
        return sorted(descendants(roots))

    def stop(self):
        _stop_group(self.proxy)
        self.proxy = None
        if self._proxy_log is not None:
            self._proxy_log.close()
            self._proxy_log = None
        if self.s3 is not None:
            # s3rver.stop() removes only its temporary dir; the data
            # directory we gave it stays for the next run.
            self.s3.stop()
            self.s3 = None

