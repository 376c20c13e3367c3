"""Helpers shared by the integration tests (no fixtures; those are in
conftest.py): the server process wrapper, the dataset generator wrapper, raw
HTTP requests, a strict walk over raw tar bytes, and the WebDataset grouping
rule used to compute what a shard must yield. The module name is unique so
it cannot clash with helpers of other test directories."""

import glob
import http.client
import http.server
import json
import os
import re
import random
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if os.path.join(REPO, "clients", "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "clients", "python"))
MKWDS = os.path.join(REPO, "tests", "tools", "mkwds.py")
MKFIXTURES = os.path.join(REPO, "tests", "tools", "mkfixtures.py")

import shardcast  # noqa: E402

MEMBER_RE = re.compile(r"^(\d{12})/(.+)$")

STARTUP_TIMEOUT = 30.0   # seconds for the `listening=` line
STOP_TIMEOUT = 90.0      # seconds for a clean exit after SIGTERM: a bound on
                         # waiting for the exit (the drain's default grace is 30 s)


def find_server_binary():
    env = os.environ.get("SHARDCAST_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    candidates = [os.path.join(REPO, "build", "shardcastd")]
    candidates += sorted(glob.glob(os.path.join(REPO, "build-*", "shardcastd")))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def find_cli_binary(server=None):
    """The shardcast command: $SHARDCAST_CLI, else next to
    $SHARDCAST_BUILD, else next to `server` (a shardcastd path), else
    build/ or build-*/; None when there is none."""
    env = os.environ.get("SHARDCAST_CLI")
    if env:
        return env if os.access(env, os.X_OK) else None
    cands = []
    if os.environ.get("SHARDCAST_BUILD"):
        cands.append(os.path.join(os.environ["SHARDCAST_BUILD"], "shardcast"))
    if server:
        cands.append(os.path.join(os.path.dirname(server), "shardcast"))
    cands.append(os.path.join(REPO, "build", "shardcast"))
    cands += sorted(glob.glob(os.path.join(REPO, "build-*", "shardcast")))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def shared_dir():
    d = os.environ.get("SHARED_DIR") or os.path.join(REPO, "..", "shared")
    return os.path.abspath(d)


def upstream_corpus(name):
    """$SHARED_DIR/testdata/<name>, the upstream corpus of a conformance
    test. When it is absent the test is skipped with the reason, or fails
    when SHARDCAST_CONFORMANCE=require (scripts/test.sh sets it when the
    corpora are present, so they cannot silently drop out)."""
    d = os.path.join(shared_dir(), "testdata", name)
    if os.path.isdir(d):
        return d
    msg = ("upstream corpus not found at %s (set SHARED_DIR): conformance test "
           "not run" % d)
    if os.environ.get("SHARDCAST_CONFORMANCE") == "require":
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)



def wait_for(pred, timeout, interval=0.1):
    """Poll pred() until true or timeout (tests only); returns its last value."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(interval)


def wait_log_text(read, exited, needles, timeout=60):
    """read() once every needle is in it, once the process has exited
    (exited() is not None: its log is complete) or after timeout seconds.
    A server writes its log lines from a logging thread, after the event
    that made them: a test that saw the event (a skipped sample, a peer's
    state) waits for the line instead of reading the file at once. The
    caller's asserts on the text say what is missing."""
    def ready():
        text = read()
        done = exited() is not None or all(n in text for n in needles)
        return text if done else None
    return wait_for(ready, timeout) or read()


def read_log(path):
    """A process's whole stderr file, as text."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")

class Server:
    """One running shardcastd. `url` is its root URL; `log()` its stderr.
    `env` adds environment variables (e.g. SHARDCAST_TOKEN) to the
    process's environment."""

    def __init__(self, binary, args, workdir, env=None):
        self.args = [binary, "--listen", "127.0.0.1", "--port", "0"] + list(args)
        self.stderr_path = os.path.join(workdir, "shardcastd-%d.stderr" % id(self))
        self._stderr = open(self.stderr_path, "wb")
        penv = dict(os.environ)
        if env:
            penv.update(env)
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                     stderr=self._stderr, stdin=subprocess.DEVNULL,
                                     env=penv)
        self.addr = None
        line = self._read_listening_line()
        if not line.startswith("listening="):
            self.stop()
            raise RuntimeError("shardcastd did not start (%s): first stdout line %r\n"
                               "command: %s\nstderr:\n%s"
                               % (self._status(), line, " ".join(self.args), self.log()))
        self.addr = line[len("listening="):].strip()
        host, _, port = self.addr.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.url = "http://%s:%d" % (self.host, self.port)
        # Keep draining stdout so the server never blocks on a full pipe.
        self._drain = threading.Thread(target=self.proc.stdout.read, daemon=True)
        self._drain.start()

    def _read_listening_line(self):
        result = []

        def reader():
            result.append(self.proc.stdout.readline().decode("utf-8", "replace"))

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        t.join(STARTUP_TIMEOUT)
        if not result:
            self.stop()
            raise RuntimeError("shardcastd printed no listening= line within %.0f s\n"
                               "command: %s\nstderr:\n%s"
                               % (STARTUP_TIMEOUT, " ".join(self.args), self.log()))
        return result[0]

    def _status(self):
        rc = self.proc.poll()
        return "running" if rc is None else "exit status %d" % rc

    def alive(self):
        return self.proc.poll() is None

    def log(self, full=False):
        with open(self.stderr_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        return text if full else text[-8000:]

    def wait_log(self, *needles, timeout=60):
        """The whole log once every needle is in it (see wait_log_text)."""
        return wait_log_text(lambda: self.log(full=True), self.proc.poll, needles, timeout)

    @property
    def pid(self):
        return self.proc.pid

    def proc_status(self, key):
        """A /proc/<pid>/status value in kB (e.g. "VmHWM", "VmRSS")."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise KeyError(key)

    def cpu_seconds(self):
        """User + system CPU seconds used so far."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        """SIGTERM and wait; returns the exit status (kills after a timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode


def make_dataset(out, *, shards, per_shard, size, seed=0, compress="none", prefix="train"):
    """Run mkwds.py and return its manifest."""
    subprocess.run([sys.executable, MKWDS, "--out", out, "--shards", str(shards),
                    "--samples-per-shard", str(per_shard), "--size", str(size),
                    "--seed", str(seed), "--compress", compress, "--prefix", prefix],
                   check=True, capture_output=True)
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def make_fixture_corpus(out):
    """Run mkfixtures.py wds (the WebDataset format corpus) and return its
    manifest."""
    subprocess.run([sys.executable, MKFIXTURES, "wds", "--out", out],
                   check=True, capture_output=True)
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


class Dataset:
    def __init__(self, path, manifest):
        self.path = path
        self.manifest = manifest
        self.by_key = {s["key"]: s for s in manifest["samples"]}
        self.total = manifest["total_samples"]


def http_request(server, path, method="GET", timeout=30):
    """(status, headers dict lowercased, body bytes) of one request."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, body
    finally:
        conn.close()


def fetch_raw(server, job, epoch, rank, world, **kw):
    """The complete body of a stream as bytes (raises if it is cut)."""
    resp = shardcast.open_raw(shardcast.stream_url(server.url, job, epoch, rank, world, **kw))
    try:
        return resp.read()
    finally:
        resp.close()


def read_samples(server, job, epoch, rank, world, **kw):
    """(samples, trailer) of one stream read with the client."""
    with shardcast.StreamReader(
            shardcast.stream_url(server.url, job, epoch, rank, world, **kw)) as r:
        samples = list(r)
        return samples, r.trailer


def walk_tar_headers(data):
    """Check every header block of raw tar bytes; return the list of
    (typeflag, name field, size). Stops at the first zero block and asserts
    that a second zero block follows it."""
    out = []
    off = 0
    while True:
        hdr = data[off:off + 512]
        assert len(hdr) == 512, "tar data ends inside a header at %d" % off
        if hdr == b"\0" * 512:
            assert data[off + 512:off + 1024] == b"\0" * 512, "missing second end block"
            return out
        assert hdr[257:265] == b"ustar\x0000", "bad magic/version at %d: %r" % (off, hdr[257:265])
        # The checksum covers the header with its own field read as spaces.
        chk = int(hdr[148:156].strip(b"\0 "), 8)
        assert chk == sum(hdr[:148]) + 8 * 32 + sum(hdr[156:]), "bad checksum at %d" % off
        raw_size = hdr[124:136]
        if raw_size[0] & 0x80:
            size = int.from_bytes(raw_size[1:], "big")
        else:
            size = int(raw_size.strip(b"\0 ") or b"0", 8)
        typeflag = hdr[156:157]
        name = hdr[0:100].split(b"\0")[0].decode()
        prefix = hdr[345:500].split(b"\0")[0].decode()
        out.append((typeflag, prefix + "/" + name if prefix else name, size))
        off += 512 + (size + 511) // 512 * 512


def wds_split(name):
    """WebDataset key/extension of a member name, or None (no sample)."""
    head, _, last = name.rpartition("/")
    if "." not in last:
        return None
    base, _, ext = last.partition(".")
    if not base or not ext:
        return None
    return (head + "/" + base if head else base), ext.lower()


def wds_samples(path):
    """The samples of a shard by the WebDataset rule: a list of
    (key, {ext: bytes}) in shard order (Python's tarfile reads gzip too).
    Top-level names of the form __*__ are metadata ("__key__",
    "__a.b__"); "__meta__.json" is not such a name and is a sample."""
    samples = []
    with tarfile.open(path, "r:*") as tf:
        for ti in tf:
            if not ti.isreg():
                continue
            name = ti.name
            if "/" not in name and len(name) >= 4 and name.startswith("__") \
                    and name.endswith("__"):
                continue
            kx = wds_split(name)
            if kx is None:
                continue
            key, ext = kx
            data = tf.extractfile(ti).read()
            if samples and samples[-1][0] == key:
                assert ext not in samples[-1][1], "repeated field in fixture"
                samples[-1][1][ext] = data
            else:
                samples.append((key, {ext: data}))
    return samples


def field_dict(sample):
    return {k: v for k, v in sample.items() if not (k.startswith("__") and k.endswith("__"))}


def host_of(j):
    """Loopback address of replica j (127.0.1.j): one URL template
    "http://127.0.1.{j}:PORT" names every replica."""
    return "127.0.1.%d" % j


def listen_port(hosts=("127.0.0.1",)):
    """A port free on every one of hosts a moment ago, for a server the
    test starts on it later. It is taken below the kernel's ephemeral range
    (ip_local_port_range), so no outgoing connection of this machine (a
    client, nginx, the proxy) can take it meanwhile as its source port, as a
    port the kernel handed out for bind(0) can be."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = max(2048, min(low, 65536))
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(1024, top)
        try:
            for h in hosts:
                with socket.socket() as s:
                    s.bind((h, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on %s" % (", ".join(hosts),))


def free_port(replicas):
    """A port free on 127.0.1.0 .. 127.0.1.(R-1) a moment ago."""
    return listen_port(tuple(host_of(j) for j in range(replicas)))


# --------------------------------------------------------------------------
# An HTTP source that holds the second half of every shard back


class GatedSource:
    """The files of `root` over HTTP (GET/HEAD, Range), each shard's bytes
    from the middle on held back until open() is called."""

    def __init__(self, root):
        self.root = root
        self.gate = threading.Event()
        self.held = 0  # GETs that have waited at the gate
        self._mu = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                outer.serve(self, False)

            def do_GET(self):
                outer.serve(self, True)

        class Srv(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a killed replica's connections break: expected

        self.httpd = Srv(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, h, body):
        path = os.path.join(self.root, os.path.basename(h.path.split("?")[0]))
        if not os.path.isfile(path):
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        with open(path, "rb") as f:
            data = f.read()
        n = len(data)
        a, b = 0, n - 1
        m = re.match(r"bytes=(\d+)-(\d*)$", h.headers.get("Range") or "")
        if m:
            a = int(m.group(1))
            b = min(int(m.group(2)) if m.group(2) else n - 1, n - 1)
            h.send_response(206)
            h.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, n))
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(b - a + 1))
        h.send_header("ETag", '"%d-%d"' % (n, int(os.path.getmtime(path))))
        h.end_headers()
        if not body:
            return
        half = n // 2
        if a < half:
            h.wfile.write(data[a:min(b + 1, half)])
            h.wfile.flush()
        if b >= half:
            if not self.gate.is_set():
                with self._mu:
                    self.held += 1
            self.gate.wait()
            h.wfile.write(data[max(a, half):b + 1])

    def open(self):
        self.gate.set()

    def hold(self):
        """Hold back the second halves again (open() lets them go)."""
        self.gate.clear()

    def close(self):
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()
