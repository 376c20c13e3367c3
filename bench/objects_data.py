"""The small-objects benchmark's dataset and store (bench/objects.py).

Dataset: S samples, each two objects in one folder, WebDataset style:
  <prefix>s000000.jpg   payload bytes, size jittered within [size/2, 3*size/2]
  <prefix>s000000.json  {"cls": c, "i": i, "key": "s000000"} (~40 bytes)
Payload bytes and sizes are a pure function of (seed, sample number):
random.Random(seed * 1000003 + i). The manifest (manifest.json beside the
store) has, per sample, its key and content hash (sha256 over its fields
sorted by name: name, NUL, 8-byte little-endian length, data; the same hash
as tests/tools/mkwds.py and bench/loader_run.py), in the shape
bench/loader_run.py's load_expected() reads.

The objects are written straight into s3rver's on-disk store (its
FilesystemStore layout: <key>._S3rver_object, <key>._S3rver_object.md5 with
the hex MD5, <key>._S3rver_metadata.json), as tests/objstore/test_objects.py
does: 20k PUTs would take minutes, this takes seconds. A directory under
the store root is a bucket to s3rver.

The store: s3rver (npm s3rver 3.7.1, found as tests/support/s3rver.py finds
it) on 127.0.0.1, --silent (its per-request log lines would cost the one
node thread time that every contender pays alike, and they are not needed:
each contender counts its own requests).
"""

import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))

BUCKET = "bench"
ACCESS_KEY = SECRET_KEY = "S3RVER"   # s3rver's built-in local test account
REGION = "us-east-1"
FORMAT = "objbench/1"


def content_hash(fields):
    h = hashlib.sha256()
    for name in sorted(fields):
        data = fields[name]
        h.update(name.encode("utf-8"))
        h.update(b"\0")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def make_sample(seed, i, size):
    rng = random.Random(seed * 1000003 + i)
    key = "s%06d" % i
    n = rng.randint(size // 2, size * 3 // 2)
    jpg = rng.randbytes(n)
    meta = json.dumps({"cls": rng.randrange(10), "i": i, "key": key},
                      sort_keys=True).encode()
    return key, {"jpg": jpg, "json": meta}


def put_direct(root, bucket, key, data):
    """One object in s3rver's FilesystemStore layout."""
    path = os.path.join(root, bucket, key)
    with open(path + "._S3rver_object", "wb") as f:
        f.write(data)
    with open(path + "._S3rver_object.md5", "w") as f:
        f.write(hashlib.md5(data).hexdigest())
    with open(path + "._S3rver_metadata.json", "w") as f:
        f.write('{"content-type": "binary/octet-stream"}')


class Dataset:
    """A generated object set: `root` is s3rver's data directory, the
    objects are under s3://BUCKET/<prefix>."""

    def __init__(self, data_dir, samples, size, seed):
        self.samples = samples
        self.size = size
        self.seed = seed
        self.name = "objs-%d-%d-s%d" % (samples, size, seed)
        self.dir = os.path.join(data_dir, self.name)
        self.root = os.path.join(self.dir, "s3rver")
        self.prefix = "train/"
        self.manifest_path = os.path.join(self.dir, "manifest.json")
        self.info = None

    def objects(self):
        return 2 * self.samples

    def keys(self):
        """Every object key, sorted (what a listing returns)."""
        out = []
        for i in range(self.samples):
            k = self.prefix + "s%06d" % i
            out += [k + ".jpg", k + ".json"]
        return out

    def ensure(self, log):
        done = os.path.join(self.dir, "done.json")
        want = {"format": FORMAT, "samples": self.samples, "size": self.size,
                "seed": self.seed}
        try:
            with open(done) as f:
                info = json.load(f)
            if all(info.get(k) == v for k, v in want.items()):
                self.info = info
                return self
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(os.path.join(self.root, BUCKET, self.prefix))
        t0 = time.monotonic()
        log("generating %d samples (%d objects) of ~%d B in %s"
            % (self.samples, self.objects(), self.size, self.dir))
        manifest = []
        payload = obj_bytes = 0
        for i in range(self.samples):
            key, fields = make_sample(self.seed, i, self.size)
            for ext, data in fields.items():
                put_direct(self.root, BUCKET, self.prefix + key + "." + ext, data)
                obj_bytes += len(data)
            payload += sum(len(v) for v in fields.values())
            manifest.append({"key": key, "hash": content_hash(fields)})
        with open(self.manifest_path, "w") as f:
            json.dump({"format": FORMAT, "samples": manifest}, f)
        info = dict(want, objects=self.objects(), payload_bytes=payload,
                    object_bytes=obj_bytes,
                    generate_s=round(time.monotonic() - t0, 1))
        with open(done, "w") as f:
            json.dump(info, f)
        self.info = info
        log("generated in %.1f s (%.0f MB)" % (info["generate_s"], obj_bytes / 1e6))
        return self


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Connection: close\r\n\r\n")
            return s.recv(5) == b"HTTP/"
    except OSError:
        return False


class Store:
    """s3rver serving a Dataset's directory on 127.0.0.1 (silent)."""

    def __init__(self, ds, logdir):
        self.ds = ds
        self.logdir = logdir
        self.proc = None
        self.port = None

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        from support.s3rver import find_s3rver, install_s3rver
        binary = find_s3rver() or install_s3rver()
        env = dict(os.environ)
        opts = env.get("NODE_OPTIONS", "")
        if "--openssl-legacy-provider" not in opts:
            env["NODE_OPTIONS"] = (opts + " --openssl-legacy-provider").strip()
        self.port = _free_port()
        self._log = open(os.path.join(self.logdir, "s3rver.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, "-d", self.ds.root, "-a", "127.0.0.1", "-p", str(self.port),
             "--silent"], stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 30
        while not _http_answers(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("s3rver did not start (see %s)"
                                   % os.path.join(self.logdir, "s3rver.log"))
            time.sleep(0.05)
        return self

    def pid(self):
        """The node process (s3rver.js runs in the process started)."""
        return self.proc.pid

    def env(self):
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ENDPOINT_URL_S3": self.endpoint,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None
