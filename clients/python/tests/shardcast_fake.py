"""Test-only pieces for the Python client's tests: an encoder of the frames
wire format written from its specification (version 1, see
shardcast/frames.py), and EpochServer, an in-process HTTP server that deals
a synthetic epoch to consumers the way shardcastd does (even-drop
partition, start=, global_start=, fields=, format=tar|frames) and can cut
connections on purpose. It is a reference for the client, not a copy of the
server: the real server is exercised by tests/integration."""

import http.server
import io
import json
import random
import socket
import struct
import tarfile
import threading
import time
import urllib.parse

FRAME = struct.Struct("<BBHI")
MAGIC = b"SCF1"


def frame(ftype, payload, flags=0, reserved=0):
    return FRAME.pack(ftype, flags, reserved, len(payload)) + payload


def json_frame(ftype, obj):
    return frame(ftype, json.dumps(obj).encode())


def header_frame(job="j", epoch=0, rank=0, world=1, start=0, global_start=0,
                 partition="even-drop", fields=None, version=1, ident=None):
    """ident: the identity keys (fingerprint, replica, replicas, served_by)
    added to the HEADER, as a server with replica fingerprints sends."""
    h = {"version": version, "job": job, "epoch": epoch, "rank": rank,
         "world": world, "start": start, "global_start": global_start,
         "partition": partition, "fields": fields}
    h.update(ident or {})
    return json_frame(1, h)


def tar_ident_header(ident, job="j", epoch=0):
    """The pax global header a server with replica fingerprints sends
    first in a tar stream (no end blocks)."""
    buf = io.BytesIO()
    recs = {"SHARDCAST.job": job, "SHARDCAST.epoch": str(epoch)}
    recs.update({"SHARDCAST." + k: str(v) for k, v in ident.items()})
    tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=recs)
    tf.fileobj.flush()
    return buf.getvalue()


def shard_frame(idx, url):
    return frame(2, struct.pack("<I", idx) + url.encode())


def sample_frame(index, position, shard, key, fields):
    """fields: list of (name, bytes) in shard order."""
    kb = key.encode()
    parts = [struct.pack("<QQIHH", index, position, shard, len(kb), len(fields)), kb]
    for name, data in fields:
        nb = name.encode()
        parts.append(struct.pack("<HI", len(nb), len(data)))
        parts.append(nb)
        parts.append(data)
    return frame(3, b"".join(parts))


def end_frame(samples, position, epoch=0, rank=0, world=1, start=0):
    return json_frame(4, {"status": "ok", "epoch": epoch, "rank": rank, "world": world,
                          "start": start, "samples": samples, "position": position})


def error_trailer(reason, retryable=None, retry_after_ms=None):
    """The error trailer's JSON object (both formats); retryable None
    leaves the key out, as a server that predates it did."""
    t = {"status": "error", "reason": reason}
    if retryable is not None:
        t["retryable"] = retryable
    if retry_after_ms is not None:
        t["retry_after_ms"] = retry_after_ms
    return t


def error_frame(reason, retryable=None, retry_after_ms=None):
    return json_frame(5, error_trailer(reason, retryable, retry_after_ms))


def error_member(trailer):
    """The tar format's "__shardcast_error__" member (no end blocks)."""
    buf = io.BytesIO()
    tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT)
    data = json.dumps(trailer).encode()
    ti = tarfile.TarInfo("__shardcast_error__")
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()  # tf is not closed: no end blocks


def make_samples(n, shards=5, seed=1):
    """n synthetic samples (key, shard URL, [(ext, bytes)]) with fields of
    varied sizes; keys are unique."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        shard = "file:///data/s-%02d.tar" % (i % shards)
        fields = [("cls", str(i % 10).encode()),
                  ("bin", bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))),
                  ("txt", ("sample %d" % i).encode())]
        out.append(("k%05d" % i, shard, fields))
    return out


class EpochServer:
    """Serves GET /v1/jobs/{job}/epochs/{E}/stream for the jobs in `jobs`
    ({name: samples}). Epoch E's global sequence is the job's samples
    shuffled by random.Random(E); consumer c of W with global_start G and
    start s gets positions p = s .. (N - G) // W - 1, sample Y[G + c + W*p].

    Replicas: `replica` J of `replicas` R (default 0 of 1). With R > 1 the
    server deals part J of the epoch, Y_J = Y[J::R] (the fake's stand-in
    for the server's part rule; every EpochServer over the same jobs agrees
    on it); a stream request with replica=K deals part K (failover;
    `accept_replica` False answers it 400 "unknown parameter replica" as a
    server that predates failover does). GET /v1/topology[?job=NAME]
    answers {"replica": J, "replicas": R}, with a "job" object
    {"name", "fingerprint", "order"} when `fingerprint` is set (`order`:
    the order object, default {"seed": 0, "replicas": R}); an unknown job
    is 404. `topology_errors`: statuses answered (in order, one each) to
    topology requests before the real answer, e.g. [503, 503];
    `topology_requests` records their queries; `topology_job` False
    answers ?job= with 400 "unknown parameter job" (an older server). With `fingerprint` set,
    every stream states its identity (frames HEADER keys; tar pax global
    header), `ident_override` (a dict) replacing any of its keys.

    cuts: a list of dicts {"after": n, "count": k} consumed in order: a
    matching stream request sends n samples, then half of the next
    sample's bytes, then the connection is reset. With "kind": "error" it
    sends n samples, then the error trailer (keys "reason", "retryable",
    "retry_after_ms" as in error_trailer()) and closes the connection, as
    a draining shardcastd does; with "kind": "503" the request is answered
    503 (header Retry-After: the dict's "retry_after", if any).
    requests: the parsed query of every stream request (for assertions)."""

    def __init__(self, jobs):
        self.jobs = jobs
        self.cuts = []
        self.requests = []
        self.replica, self.replicas = 0, 1
        self.accept_replica = True
        self.fingerprint = None
        self.order = None
        self.ident_override = {}
        self.topology_errors = []
        self.topology_requests = []
        self.topology_job = True
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer._handle(self)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def epoch_sequence(self, job, epoch, part=None):
        """The epoch's sequence; with several replicas part `part` of it
        (None: this server's own)."""
        seq = list(self.jobs[job])
        random.Random(epoch).shuffle(seq)
        if self.replicas > 1:
            seq = seq[(self.replica if part is None else part)::self.replicas]
        return seq

    def share(self, job, epoch, c, w, start=0, global_start=0, part=None):
        """[(global index, position, sample)] of one consumer."""
        seq = self.epoch_sequence(job, epoch, part)
        n = max(0, (len(seq) - global_start) // w)
        return [(global_start + c + w * p, p, seq[global_start + c + w * p])
                for p in range(start, n)]

    @staticmethod
    def _error(h, code, reason, retry_after=None):
        body = ("error: %s\n" % reason).encode()
        h.send_response(code)
        if retry_after is not None:
            h.send_header("Retry-After", str(retry_after))
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _topology(self, h, query):
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        with self.lock:
            self.topology_requests.append(q)
            err = self.topology_errors.pop(0) if self.topology_errors else None
        if err is not None:
            return self._error(h, err, "job 'x' is resolving", 0 if err == 503 else None)
        if "job" in q and not self.topology_job:
            return self._error(h, 400, "unknown parameter job")
        doc = {"replica": self.replica, "replicas": self.replicas, "rule": "fake"}
        job = q.get("job")
        if job is not None:
            if job not in self.jobs:
                return self._error(h, 404, "unknown job '%s'" % job)
            if self.fingerprint is not None:
                doc["job"] = {"name": job, "fingerprint": self.fingerprint,
                              "order": self.order if self.order is not None else
                              {"seed": 0, "replicas": self.replicas}}
        body = json.dumps(doc).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def ident(self, part):
        """The identity a stream of part `part` states (None: none)."""
        if self.fingerprint is None:
            return None
        i = {"fingerprint": self.fingerprint, "replica": part, "replicas": self.replicas,
             "served_by": self.replica}
        i.update(self.ident_override)
        return i

    def _handle(self, h):
        parts = urllib.parse.urlsplit(h.path)
        if parts.path == "/v1/topology":
            return self._topology(h, parts.query)
        seg = parts.path.split("/")
        if len(seg) != 7 or seg[1:3] != ["v1", "jobs"] or seg[4] != "epochs" \
                or seg[6] != "stream":
            return self._error(h, 404, "no such endpoint")
        job = urllib.parse.unquote(seg[3])
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(parts.query).items()}
        with self.lock:
            self.requests.append(dict(q, job=job))
            cut = None
            if self.cuts:
                cut = self.cuts[0]
                cut["count"] -= 1
                if cut["count"] <= 0:
                    self.cuts.pop(0)
        if job not in self.jobs:
            return self._error(h, 404, "unknown job '%s'" % job)
        if cut is not None and cut.get("kind") == "503":
            return self._error(h, 503, "server shutting down", cut.get("retry_after"))
        try:
            epoch = int(seg[5])
            c, w = int(q["rank"]), int(q["world"])
            start = int(q.get("start", 0))
            gs = int(q.get("global_start", 0))
            part = int(q.get("replica", self.replica))
        except (KeyError, ValueError):
            return self._error(h, 400, "bad parameters")
        if "replica" in q and not self.accept_replica:
            return self._error(h, 400, "unknown parameter replica")
        if not 0 <= c < w:
            return self._error(h, 400, "rank must be below world")
        if not 0 <= part < self.replicas:
            return self._error(h, 400, "replica must be below replicas")
        fmt = q.get("format", "tar")
        fields = q["fields"].split(",") if "fields" in q else None
        share = self.share(job, epoch, c, w, start, gs, part)
        ident = self.ident(part)
        if fmt == "frames":
            pieces = self._frames(job, epoch, c, w, start, gs, fields, share, ident)
            ctype = "application/x-shardcast-frames"
        elif fmt == "tar":
            pieces = self._tar(epoch, c, w, start, fields, share, ident, job)
            ctype = "application/x-tar"
        else:
            return self._error(h, 400, "unknown format")
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.close_connection = True
        try:
            for i, data in enumerate(pieces):
                if cut is not None and cut.get("kind") == "error" and i == cut["after"] + 1:
                    t = error_trailer(cut.get("reason", "server shutting down"),
                                      cut.get("retryable"), cut.get("retry_after_ms"))
                    data = json_frame(5, t) if fmt == "frames" else error_member(t)
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    h.wfile.flush()
                    h.connection.close()
                    return
                if cut is not None and i == cut["after"] + 1:  # pieces[0] is the preamble
                    data = data[:max(1, len(data) // 2)]
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    h.wfile.flush()
                    time.sleep(0.01)
                    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                            struct.pack("ii", 1, 0))
                    h.connection.close()
                    return
                if data:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except OSError:
            pass  # the client hung up

    @staticmethod
    def _keep(fields, wanted):
        return [(n, d) for n, d in fields if wanted is None or n in wanted]

    def _frames(self, job, epoch, c, w, start, gs, wanted, share, ident=None):
        """Pieces: [magic + HEADER, one per sample (SHARD + SAMPLE), END]."""
        pieces = [MAGIC + header_frame(job, epoch, c, w, start, gs, "even-drop", wanted,
                                       ident=ident)]
        shard_ids = {}
        for g, p, (key, url, fields) in share:
            data = b""
            if url not in shard_ids:
                shard_ids[url] = len(shard_ids)
                data += shard_frame(shard_ids[url], url)
            data += sample_frame(g, p, shard_ids[url], key, self._keep(fields, wanted))
            pieces.append(data)
        pieces.append(end_frame(len(share), start + len(share), epoch, c, w, start))
        return pieces

    def _tar(self, epoch, c, w, start, wanted, share, ident=None, job="j"):
        """Pieces: [the identity's pax global header or b"", one per sample,
        end member + end blocks] of the tar format (samples without kept
        fields send nothing)."""
        pieces = [tar_ident_header(ident, job, epoch) if ident else b""]
        sent = 0
        for g, p, (key, url, fields) in share:
            buf = io.BytesIO()
            tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT)
            kept = self._keep(fields, wanted)
            for j, (ext, data) in enumerate(kept):
                ti = tarfile.TarInfo("%012d/%s.%s" % (g, key, ext))
                ti.size = len(data)
                if j == 0:
                    ti.pax_headers = {"SHARDCAST.key": key, "SHARDCAST.shard": url,
                                      "SHARDCAST.index": str(g),
                                      "SHARDCAST.position": str(p)}
                tf.addfile(ti, io.BytesIO(data))
            sent += 1 if kept else 0
            pieces.append(buf.getvalue())  # no end blocks: tf is not closed
        buf = io.BytesIO()
        tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT)
        t = json.dumps({"status": "ok", "epoch": epoch, "rank": c, "world": w, "start": start,
                        "samples": sent, "position": start + len(share)}).encode()
        ti = tarfile.TarInfo("__shardcast_end__")
        ti.size = len(t)
        tf.addfile(ti, io.BytesIO(t))
        tf.close()
        pieces.append(buf.getvalue())
        return pieces


class RawServer:
    """Serves one canned body for every GET: set `body`, `ctype` and
    `terminate` (False: reset the connection instead of ending the chunked
    body). For malformed-stream tests."""

    def __init__(self):
        self.body = b""
        self.ctype = "application/x-shardcast-frames"
        self.terminate = True
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", outer.ctype)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.close_connection = True
                data = outer.body
                try:
                    for i in range(0, len(data), 777):
                        part = data[i:i + 777]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    if outer.terminate:
                        self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    if not outer.terminate:
                        self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stream_url(self, **q):
        q.setdefault("rank", 0)
        q.setdefault("world", 1)
        q.setdefault("format", "frames")
        return "%s/v1/jobs/j/epochs/0/stream?%s" % (self.url, urllib.parse.urlencode(q))

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
