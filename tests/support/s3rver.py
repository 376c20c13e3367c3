"""Run s3rver (npm package s3rver 3.7.1) for tests.

s3rver is a small S3-compatible server. It is started on 127.0.0.1 with a
free port (it binds port 0 itself and reports the port, so there is no race)
and a private temporary data directory, and stopped (process group killed,
directory removed) on exit::

    with S3rver() as s3:
        s3.create_bucket("data")
        s3.upload_dir("data", "/path/to/shards", prefix="train/")
        url = s3.endpoint            # "http://127.0.0.1:PORT"

Credentials are s3rver's built-in S3RVER/S3RVER, region us-east-1,
path-style addressing. Known quirks of s3rver that tests must allow for:
it does not verify SigV4 signatures (only that the access key exists), and
its suffix ranges (``Range: bytes=-N``) are wrong.

Node >= 17 needs ``NODE_OPTIONS=--openssl-legacy-provider`` for s3rver's
continuation tokens (it encrypts them with a legacy cipher); without it any
ListObjectsV2 page after the first fails with 500. This module always sets
it.

The executable is found, in order, at $S3RVER_BIN, at
<repo>/build/node/bin/s3rver (where scripts/s3rver-install.sh puts it), or on
PATH; with ``auto_install=True`` (the default) the install script is run
when none is found.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO / "scripts" / "s3rver-install.sh"
ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"
REGION = "us-east-1"

_install_lock = threading.Lock()


def find_s3rver():
    """Path of the s3rver executable, or None."""
    env = os.environ.get("S3RVER_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    local = REPO / "build" / "node" / "bin" / "s3rver"
    if os.access(local, os.X_OK):
        return str(local)
    return shutil.which("s3rver")


def install_s3rver():
    """Run scripts/s3rver-install.sh (idempotent) and return the executable."""
    with _install_lock:
        out = subprocess.run(["sh", str(INSTALL_SCRIPT)], check=True,
                             stdout=subprocess.PIPE, timeout=600)
    return out.stdout.decode().strip().splitlines()[-1]


def _http_answers(host, port, timeout):
    """True when something speaks HTTP on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: %s:%d\r\nConnection: close"
                      b"\r\n\r\n" % (host.encode(), port))
            return s.recv(5) == b"HTTP/"
    except OSError:
        return False


class S3rver:
    """One s3rver process; a context manager (start on enter, stop on exit).

    Attributes once started: ``host``, ``port``, ``endpoint`` (base URL),
    ``directory`` (its data directory), ``log_path`` (its stdout/stderr).
    """

    def __init__(self, host="127.0.0.1", directory=None, binary=None,
                 auto_install=True, start_timeout=30.0):
        self.host = host
        self.port = None
        self._own_dir = directory is None
        self.directory = directory
        self._binary = binary
        self._auto_install = auto_install
        self._start_timeout = start_timeout
        self._proc = None
        self._tmp = None
        self._client = None
        self.log_path = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def endpoint(self):
        return "http://%s:%d" % (self.host, self.port)

    def start(self):
        binary = self._binary or find_s3rver()
        if binary is None:
            if not self._auto_install:
                raise RuntimeError("s3rver not found: run "
                                   "scripts/s3rver-install.sh or set S3RVER_BIN")
            binary = install_s3rver()
        self._tmp = tempfile.mkdtemp(prefix="s3rver-")
        if self._own_dir:
            self.directory = os.path.join(self._tmp, "data")
            os.makedirs(self.directory)
        self.log_path = os.path.join(self._tmp, "s3rver.log")
        env = dict(os.environ)
        opts = env.get("NODE_OPTIONS", "")
        if "--openssl-legacy-provider" not in opts:
            env["NODE_OPTIONS"] = (opts + " --openssl-legacy-provider").strip()
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [binary, "-d", self.directory, "-a", self.host, "-p", "0"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True)
        try:
            self.port = self._wait_port()
            deadline = time.monotonic() + self._start_timeout
            while not _http_answers(self.host, self.port, 1.0):
                if time.monotonic() > deadline:
                    raise RuntimeError("s3rver does not answer on port %d"
                                       % self.port)
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_port(self):
        """Read the port s3rver chose from its 'listening on' line."""
        marker = "S3rver listening on "
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError("s3rver exited with %s: %s" % (
                    self._proc.returncode, self.log()))
            for line in self.log().splitlines():
                if line.startswith(marker):
                    return int(line[len(marker):].rsplit(":", 1)[1])
            time.sleep(0.05)
        raise RuntimeError("s3rver did not start: %s" % self.log())

    def log(self):
        """What s3rver has written so far (for failure messages)."""
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def stop(self):
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    os.killpg(self._proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(self._proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self._proc.wait(timeout=5)
            self._proc = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._client = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- S3 access ---------------------------------------------------------

    def env(self):
        """Environment variables that point an AWS client (or shardcastd)
        at this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
        }

    def client(self, endpoint=None):
        """A boto3 S3 client for this server (or for endpoint, e.g. a
        FaultProxy in front of it): path-style, SigV4, no retries so that
        tests see every fault."""
        import boto3
        from botocore.config import Config

        cfg = Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                     retries={"max_attempts": 1, "mode": "standard"},
                     connect_timeout=10, read_timeout=60)
        return boto3.session.Session().client(
            "s3", endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            region_name=REGION, config=cfg)

    @property
    def s3(self):
        """A shared client for this server (created on first use)."""
        if self._client is None:
            self._client = self.client()
        return self._client

    def create_bucket(self, bucket):
        self.s3.create_bucket(Bucket=bucket)
        return bucket

    def put_bytes(self, bucket, key, data):
        self.s3.put_object(Bucket=bucket, Key=key, Body=data)
        return key

    def upload_file(self, bucket, path, key=None):
        key = key if key is not None else os.path.basename(path)
        self.s3.upload_file(str(path), bucket, key)
        return key

    def upload_dir(self, bucket, directory, prefix="", workers=8):
        """Upload every regular file under directory (recursively) as
        prefix + its relative path with '/' separators. Returns the keys,
        sorted."""
        from concurrent.futures import ThreadPoolExecutor

        directory = Path(directory)
        items = []
        for p in sorted(directory.rglob("*")):
            if p.is_file():
                items.append((p, prefix + p.relative_to(directory).as_posix()))
        # boto3 clients are thread-safe; s3rver handles parallel PUTs.
        with ThreadPoolExecutor(max_workers=workers) as ex:
            list(ex.map(lambda it: self.s3.upload_file(str(it[0]), bucket,
                                                        it[1]), items))
        return sorted(k for _, k in items)

    def list_keys(self, bucket, prefix=""):
        """Every key under prefix (paginated ListObjectsV2)."""
        keys = []
        pager = self.s3.get_paginator("list_objects_v2")
        for page in pager.paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys
