"""Helpers of the server test suite (tests/server): a strict frames reader
over raw HTTP (independent of the Python client, so a test controls exactly
how fast and how far a stream is read), authenticated requests, and the
content hash of shardcast.sample_hash. The module name is unique so it
cannot clash with helpers of other test directories."""

import glob
import hashlib
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from shardcast_testlib import (REPO, Dataset, Server, find_server_binary,  # noqa: E402,F401
                               make_dataset, shared_dir, wait_for)


def read_when(read, ok, timeout=60):
    """read() once ok() holds for its value, or its last value after
    timeout seconds: for what the server reaches on its own threads (a
    counter of the status JSON, the cache), so that the caller's asserts
    on the value it returns see that state, or say what was there
    (docs/development.md "Tests wait for states")."""
    last = []

    def done():
        last[:] = [read()]
        return ok(last[0])
    wait_for(done, timeout)
    return last[0]

_FRAME = struct.Struct("<BBHI")
_SAMPLE = struct.Struct("<QQIHH")
_FIELD = struct.Struct("<HI")
MAX_FRAME = 64 << 20


def sample_payload(p):
    """A SAMPLE frame's payload: (index, position, shard index, key,
    {field: bytes}, bytes it took)."""
    index, position, shard, klen, nf = _SAMPLE.unpack_from(p, 0)
    o = _SAMPLE.size
    key = p[o:o + klen].decode()
    o += klen
    fields = {}
    for _ in range(nf):
        nl, dl = _FIELD.unpack_from(p, o)
        o += _FIELD.size
        name = p[o:o + nl].decode()
        o += nl
        fields[name] = p[o:o + dl]
        o += dl
    return index, position, shard, key, fields, o


def sanitized():
    """Is the server a sanitizer build? Its memory use then says nothing
    about shardcast's bounds (shadow memory, quarantine), so the memory
    assertions are left out; everything else is checked."""
    b = (os.environ.get("SHARDCAST_BUILD", "") + " " +
         os.environ.get("SHARDCAST_BIN", "")).lower()
    return "asan" in b or "tsan" in b or "sanitize" in b


def content_hash(fields):
    """shardcast.sample_hash over {name: bytes}."""
    h = hashlib.sha256()
    for name in sorted(fields):
        data = fields[name]
        h.update(name.encode())
        h.update(b"\0")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def request(server, path, method="GET", token=None, body=None, headers=None, timeout=30):
    """(status, headers dict lowercased, body bytes) of one request."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def get_json(server, path, token=None):
    st, _, body = request(server, path, token=token)
    assert st == 200, (st, body)
    return json.loads(body)


def stream_path(job, epoch, rank, world, start=None, global_start=None, fmt="frames"):
    q = "rank=%d&world=%d&format=%s" % (rank, world, fmt)
    if start is not None:
        q += "&start=%d" % start
    if global_start is not None:
        q += "&global_start=%d" % global_start
    return "/v1/jobs/%s/epochs/%d/stream?%s" % (job, epoch, q)


class FramesStream:
    """One frames stream over its own connection. Iterate with next_sample();
    `outcome` becomes "end", "error" or "cut"; `trailer` holds the END or
    ERROR JSON. Samples are dicts: index, position, key, hash."""

    def __init__(self, server, path, token=None, timeout=60):
        self.conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
        h = {"Authorization": "Bearer " + token} if token else {}
        self.conn.request("GET", path, headers=h)
        self.sock = self.conn.sock  # getresponse() may hand it to resp
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.outcome = None
        self.trailer = None
        self.header = None
        if self.status != 200:
            self.error_body = self.resp.read()
            self.outcome = "http"
            return
        assert self.resp.getheader("Content-Type") == "application/x-shardcast-frames"
        magic = self._read(4)
        assert magic == b"SCF1", magic

    def _read(self, n):
        out = b""
        while len(out) < n:
            try:
                piece = self.resp.read(n - len(out))
            except http.client.IncompleteRead as e:
                piece = e.partial
                out += piece
                raise EOFError("cut")
            if not piece:
                raise EOFError("cut")
            out += piece
        return out

    def _frame(self):
        head = self._read(8)
        t, flags, res, length = _FRAME.unpack(head)
        assert flags == 0 and res == 0
        assert length <= MAX_FRAME
        return t, self._read(length) if length else b""

    def next_sample(self):
        """The next sample, or None at the end (outcome set)."""
        if self.outcome:
            return None
        while True:
            try:
                t, p = self._frame()
            except (EOFError, ConnectionError, OSError):
                self.outcome = "cut"
                return None
            if t == 0x01:
                assert self.header is None, "two HEADER frames"
                self.header = json.loads(p)
            elif t == 0x02:
                pass
            elif t == 0x03:
                index, position, _, key, fields, o = sample_payload(p)
                assert o == len(p), "SAMPLE frame length mismatch"
                return {"index": index, "position": position, "key": key,
                        "hash": content_hash(fields), "bytes": sum(map(len, fields.values()))}
            elif t == 0x04:
                self.trailer = json.loads(p)
                self.outcome = "end"
                return None
            elif t == 0x05:
                self.trailer = json.loads(p)
                self.outcome = "error"
                return None
            else:
                assert t >= 0x80, "unknown frame type %d" % t

    def read_all(self, limit=None):
        out = []
        while limit is None or len(out) < limit:
            s = self.next_sample()
            if s is None:
                break
            out.append(s)
        return out

    def close(self):
        """Drop the connection now (the response holds the socket too); a
        thread blocked reading this stream wakes up with a cut."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.resp.close()
        finally:
            self.conn.close()


def read_share(server, job, epoch, rank, world, **kw):
    token = kw.pop("token", None)
    s = FramesStream(server, stream_path(job, epoch, rank, world, **kw), token=token)
    try:
        samples = s.read_all()
        return samples, s.outcome, s.trailer
    finally:
        s.close()


# -- the store's side: nginx counts what it serves --------------------------

class Nginx:
    def __init__(self, root, workdir):
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(exe):
            pytest.fail("nginx not installed (apt-get install nginx-light)")
        self.dir = os.path.join(workdir, "nginx-%d" % os.getpid())
        os.makedirs(self.dir, exist_ok=True)
        self.log = os.path.join(self.dir, "access.log")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""
daemon off;
worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log;
user root;
events { worker_connections 256; }
http {
  log_format bytes '$body_bytes_sent $status $request_uri';
  access_log %(log)s bytes;
  client_body_temp_path %(d)s/tmp;
  proxy_temp_path %(d)s/tmp;
  fastcgi_temp_path %(d)s/tmp;
  uwsgi_temp_path %(d)s/tmp;
  scgi_temp_path %(d)s/tmp;
  sendfile on;
  server {
    listen 127.0.0.1:%(port)d;
    root %(root)s;
  }
}
""" % {"d": self.dir, "log": self.log, "port": self.port, "root": root})
        self.proc = subprocess.Popen([exe, "-c", conf, "-p", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ok = wait_for(lambda: self._up(), 10)
        assert ok, "nginx did not start"

    def _up(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def bytes_sent(self, suffix=".tar"):
        total = 0
        try:
            with open(self.log) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3 and parts[2].split("?")[0].endswith(suffix):
                        total += int(parts[0])
        except FileNotFoundError:
            pass
        return total

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def shard_url(ng, d):
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.tar")))
    first, last = names[0], names[-1]
    # mkwds names shards <prefix>-NNNNNN.tar
    prefix = first.rsplit("-", 1)[0]
    lo = first.rsplit("-", 1)[1][:-4]
    hi = last.rsplit("-", 1)[1][:-4]
    return "http://127.0.0.1:%d/%s-{%s..%s}.tar" % (ng.port, prefix, lo, hi)
