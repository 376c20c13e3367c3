"""Client-side tests of the shardcast package against an in-process fake
server that speaks the stream wire format (complete, server-error, cut,
malformed and refused streams). The real server is covered by
tests/integration/."""

import http.server
import io
import json
import os
import socket
import sys
import tarfile
import threading

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import shardcast  # noqa: E402
from shardcast import (ShardcastConnectionError, ShardcastDataset,  # noqa: E402
                       ShardcastHTTPError, ShardcastIncompleteError,
                       ShardcastProtocolError, ShardcastStreamError, StreamReader)

SAMPLES = [
    ("sample000007", "file:///d/a.tar", {"cls": b"3", "jpg": b"\xff\xd8xx\xff\xd9"}),
    ("dir.x/0001", "file:///d/b.tar", {"txt.gz": b"\x1f\x8b..."}),
    ("sample000002", "file:///d/a.tar", {"cls": b"1", "json": b"{}"}),
]


def _member(tf, name, data, pax=None):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = 0o644
    if pax:
        ti.pax_headers = pax
    tf.addfile(ti, io.BytesIO(data))


def build_stream(samples, *, end=True, error=None, first_index=0, trailer=None):
    """Bytes of a stream body as the server sends it (without chunking)."""
    buf = io.BytesIO()
    tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT)
    for pos, (key, shard, fields) in enumerate(samples):
        g = first_index + 5 * pos
        for j, (ext, data) in enumerate(fields.items()):
            pax = None
            if j == 0:
                pax = {"SHARDCAST.key": key, "SHARDCAST.shard": shard,
                       "SHARDCAST.index": str(g), "SHARDCAST.position": str(pos)}
            _member(tf, "%012d/%s.%s" % (g, key, ext), data, pax)
    if error is not None:
        _member(tf, "__shardcast_error__",
                json.dumps({"status": "error", "reason": error}).encode())
        tf.fileobj.write(b"")  # no end blocks: the connection just closes
        return buf.getvalue()
    if end:
        t = trailer or {"status": "ok", "epoch": 0, "rank": 0, "world": 1, "start": 0,
                        "samples": len(samples), "position": len(samples)}
        _member(tf, "__shardcast_end__", json.dumps(t).encode())
        tf.close()  # writes the two zero blocks (and record padding)
    return buf.getvalue()


class FakeServer:
    """Serves canned responses by path; `routes[path] = (kind, payload)`."""

    def __init__(self):
        self.routes = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.split("?")[0] == "/v1/topology":
                    # One replica, a server without fingerprints.
                    outer.routes.setdefault("/v1/topology", (
                        "json", (200, '{"replica": 0, "replicas": 1}')))
                kind, payload = outer.routes.get(self.path.split("?")[0],
                                                 ("status", (404, "error: unknown path\n")))
                outer.last_query = self.path.partition("?")[2]
                if kind in ("status", "json"):
                    code, text = payload
                    body = text.encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-tar")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                data, terminate = payload
                self.close_connection = True
                try:
                    for i in range(0, len(data), 1000):
                        part = data[i:i + 1000]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    if terminate:
                        self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    if not terminate:
                        self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # the client may hang up first once it has seen an error

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stream(self, job, data, terminate=True, epoch=0):
        self.routes["/v1/jobs/%s/epochs/%d/stream" % (job, epoch)] = ("tar", (data, terminate))

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    srv = FakeServer()
    yield srv
    srv.stop()


def _url(srv, job="j", rank=0, world=1, **kw):
    return shardcast.stream_url(srv.url, job, 0, rank, world, **kw)


def test_complete_stream(fake):
    fake.stream("j", build_stream(SAMPLES))
    with StreamReader(_url(fake)) as r:
        got = list(r)
        assert r.trailer["samples"] == 3
    assert [s["__key__"] for s in got] == [k for k, _, _ in SAMPLES]
    assert [s["__index__"] for s in got] == [0, 5, 10]
    assert [s["__position__"] for s in got] == [0, 1, 2]
    assert got[1]["__shard__"] == "file:///d/b.tar"
    for s, (_, _, fields) in zip(got, SAMPLES):
        assert {k: v for k, v in s.items() if not k.startswith("__")} == fields
        assert shardcast.sample_hash(s) == shardcast.sample_hash(fields)


def test_empty_share_is_complete(fake):
    fake.stream("j", build_stream([]))
    with StreamReader(_url(fake)) as r:
        assert list(r) == []
        assert r.trailer["status"] == "ok"


def test_server_error_member_names_reason(fake):
    fake.stream("j", build_stream(SAMPLES[:2], error="shard file:///d/b.tar: truncated"),
                terminate=False)
    got = []
    with pytest.raises(ShardcastStreamError, match="truncated") as ei:
        for s in StreamReader(_url(fake)):
            got.append(s)
    assert ei.value.reason == "shard file:///d/b.tar: truncated"
    assert [s["__key__"] for s in got] == [SAMPLES[0][0]]


@pytest.mark.parametrize("cut", [1, 700, 1536, 2560, -1024, -1])
def test_cut_stream_is_never_complete(fake, cut):
    full = build_stream(SAMPLES)
    fake.stream("j", full[:cut], terminate=False)
    with pytest.raises(ShardcastIncompleteError):
        list(StreamReader(_url(fake)))


def test_stream_without_end_member_is_incomplete(fake):
    # A well-formed tar (with end blocks and chunked terminator) that lacks
    # the end member must still be reported as incomplete.
    data = build_stream(SAMPLES, end=False)
    data += b"\0" * 1024
    fake.stream("j", data, terminate=True)
    with pytest.raises(ShardcastIncompleteError, match="__shardcast_end__"):
        list(StreamReader(_url(fake)))


def test_trailer_count_mismatch(fake):
    fake.stream("j", build_stream(SAMPLES, trailer={"status": "ok", "samples": 7}))
    with pytest.raises(ShardcastProtocolError, match="7 samples"):
        list(StreamReader(_url(fake)))


def test_fields_filter_in_url_and_count_check_relaxed(fake):
    fake.stream("j", build_stream(SAMPLES[:1], trailer={"status": "ok", "samples": 2}))
    got = list(StreamReader(_url(fake, fields=["jpg", "cls"])))
    assert fake.last_query.endswith("fields=jpg,cls")
    assert len(got) == 1


def test_member_not_matching_sample_is_protocol_error(fake):
    buf = io.BytesIO()
    tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT)
    _member(tf, "000000000000/a.cls", b"1", {"SHARDCAST.key": "a", "SHARDCAST.index": "0"})
    _member(tf, "000000000001/b.cls", b"2")  # no pax header: not a new sample
    tf.close()
    fake.stream("j", buf.getvalue())
    with pytest.raises(ShardcastProtocolError, match="does not belong"):
        list(StreamReader(_url(fake)))


def test_http_error_reason(fake):
    fake.routes["/v1/jobs/nope/epochs/0/stream"] = ("status", (404, "error: unknown job 'nope'\n"))
    with pytest.raises(ShardcastHTTPError, match="unknown job 'nope'") as ei:
        list(StreamReader(_url(fake, job="nope")))
    assert ei.value.status == 404
    assert ei.value.reason == "unknown job 'nope'"


def test_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ShardcastConnectionError, match="127.0.0.1:%d" % port):
        list(StreamReader("http://127.0.0.1:%d/v1/jobs/j/epochs/0/stream?rank=0&world=1"
                          % port, timeout=5))


def test_stream_url_quoting_and_validation():
    u = shardcast.stream_url("http://h:1/base/", "a b/c", 3, 1, 4, start=9, fields="jpg,cls")
    assert u == ("http://h:1/base/v1/jobs/a%20b%2Fc/epochs/3/stream"
                 "?rank=1&world=4&start=9&fields=jpg,cls")
    for bad in [dict(rank=4, world=4), dict(rank=0, world=0), dict(rank=-1, world=2)]:
        with pytest.raises(ValueError):
            shardcast.stream_url("http://h", "j", 0, **bad)
    with pytest.raises(ValueError):
        shardcast.stream_url("http://h", "j", 0, 0, 1, fields=["a,b"])


def test_dataset_consumer_from_env(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = ShardcastDataset("http://h:1", "train", epoch=4)
    assert ds.consumer() == (2, 3)
    assert "epochs/4/stream?rank=2&world=3" in ds.stream_url()
    ds.set_epoch(5)
    assert "epochs/5/" in ds.stream_url()
    assert ShardcastDataset("http://h:1", "t", rank=1, world=2).consumer() == (1, 2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert ShardcastDataset("http://h:1", "t").consumer() == (0, 1)
    monkeypatch.setenv("RANK", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="RANK"):
        ShardcastDataset("http://h:1", "t").consumer()
    with pytest.raises(ValueError):
        ShardcastDataset("http://h:1", "t", rank=2, world=2)
    with pytest.raises(ValueError):
        ShardcastDataset("http://h:1", "t", rank=0)


def test_dataset_iterates(fake):
    fake.stream("j", build_stream(SAMPLES))
    got = list(ShardcastDataset(fake.url, "j", rank=0, world=1, format="tar"))
    assert [s["__key__"] for s in got] == [k for k, _, _ in SAMPLES]


def test_sample_hash_golden():
    # Pins the content hash definition shared with tests/tools/mkwds.py.
    s = {"__key__": "k", "cls": b"7", "bin": b"\x00\x01"}
    assert shardcast.sample_hash(s) == shardcast.sample_hash({"bin": b"\x00\x01", "cls": b"7"})
    import hashlib
    ref = hashlib.sha256(b"bin\0" + (2).to_bytes(8, "little") + b"\x00\x01"
                         + b"cls\0" + (1).to_bytes(8, "little") + b"7").hexdigest()
    assert shardcast.sample_hash(s) == ref
    assert ref == "896becb66ace07fed908b69a1871f5a60e949042d01a9949e5408e6d36beab86"
