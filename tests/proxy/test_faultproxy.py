"""Self-tests of tests/support/faultproxy.py (and tests/support/s3rver.py).

Run: /usr/bin/python3 -m pytest -q tests/proxy

Two upstreams: a small stdlib HTTP/1.1 server defined here (fast, exact
control of framing: Content-Length, chunked, Range, header echo), and a real
s3rver for the S3 paths (signed boto3 requests through the proxy, Range GETs,
retries on SlowDown, ListObjectsV2 pagination past 1000 keys).
"""

import hashlib
import http.client
import json
import os
import random
import re
import socket
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.faultproxy import FaultProxy, Rule
from tests.support.s3rver import S3rver

# ---------------------------------------------------------------------------
# A small upstream


def blob(name, size):
    """Deterministic pseudo-random bytes for a name."""
    return random.Random(name).randbytes(size)


BLOBS = {"/blob/big": blob("big", (1 << 20) + 4097),
         "/blob/small": blob("small", 1000),
         "/blob/empty": b""}


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in BLOBS:
            data = BLOBS[path]
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng)
                a, b = m.group(1), m.group(2)
                if a == "":
                    start, end = len(data) - int(b), len(data) - 1
                else:
                    start = int(a)
                    end = int(b) if b else len(data) - 1
                end = min(end, len(data) - 1)
                return self._send(206, data[start:end + 1], [
                    ("Content-Range", "bytes %d-%d/%d" % (start, end,
                                                          len(data)))])
            return self._send(200, data, [("ETag", '"%s"' % hashlib.md5(
                data).hexdigest())])
        if path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(50):
                piece = blob("chunk%d" % i, 1000 + i)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return None
        if path == "/echo":
            return self._echo(b"")
        return self._send(404, b"no such path\n")

    do_HEAD = do_GET

    def _echo(self, body):
        doc = {"method": self.command, "path": self.path,
               "headers": [[k, v] for k, v in self.headers.items()],
               "body_len": len(body),
               "body_sha256": hashlib.sha256(body).hexdigest()}
        return self._send(200, json.dumps(doc).encode(),
                          [("Content-Type", "application/json")])

    def do_PUT(self):
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        return self._echo(body)

    do_POST = do_PUT


@pytest.fixture(scope="module")
def upstream():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def proxy(upstream):
    with FaultProxy(upstream=upstream, seed=7) as p:
        yield p


def conn_for(p, timeout=10):
    return http.client.HTTPConnection("127.0.0.1", p.port, timeout=timeout)


def get(p, path, headers=None, timeout=10):
    c = conn_for(p, timeout)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def raw_get(p, path, timeout=10):
    """GET over a raw socket: (header bytes, body bytes read, exception)."""
    s = socket.create_connection(("127.0.0.1", p.port), timeout=timeout)
    s.sendall(b"GET %s HTTP/1.1\r\nHost: test\r\n\r\n" % path.encode())
    buf = b""
    err = None
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
    except OSError as e:
        err = e
    finally:
        s.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    return head, body, err


def s3_error(body):
    root = ET.fromstring(body)
    assert root.tag == "Error"
    return root.findtext("Code"), root.findtext("Message")


# ---------------------------------------------------------------------------
# Pass-through


def test_get_byte_exact(proxy):
    st, h, body = get(proxy, "/blob/big")
    assert st == 200
    assert body == BLOBS["/blob/big"]
    assert h["Content-Length"] == str(len(body))
    assert proxy.bytes_sent(method="GET", path="^/blob/big$") == len(body)


@pytest.mark.parametrize("rng,lo,hi", [
    ("bytes=0-0", 0, 0),
    ("bytes=100-65636", 100, 65636),
    ("bytes=1000000-", 1000000, (1 << 20) + 4096),
    ("bytes=-4097", (1 << 20), (1 << 20) + 4096),
])
def test_range_get_byte_exact(proxy, rng, lo, hi):
    st, h, body = get(proxy, "/blob/big", {"Range": rng})
    assert st == 206
    assert body == BLOBS["/blob/big"][lo:hi + 1]
    assert h["Content-Range"].startswith("bytes %d-%d/" % (lo, hi))


def test_headers_and_query_forwarded(proxy):
    hdrs = {"Authorization": "AWS4-HMAC-SHA256 Credential=EXAMPLE/20240101/"
                             "us-east-1/s3/aws4_request, Signature=abc",
            "Range": "bytes=1-2", "X-Amz-Date": "20240101T000000Z",
            "X-Custom": "a, b", "Host": "bucket.example:1234"}
    st, _, body = get(proxy, "/echo?list-type=2&prefix=a%2Fb", hdrs)
    assert st == 200
    doc = json.loads(body)
    got = {k.lower(): v for k, v in doc["headers"]}
    for k, v in hdrs.items():
        assert got[k.lower()] == v  # Host too: SigV4 signs it
    assert doc["path"] == "/echo?list-type=2&prefix=a%2Fb"
    assert "connection" not in got or got["connection"] != "close"


def test_head_and_empty(proxy):
    c = conn_for(proxy)
    c.request("HEAD", "/blob/big")
    r = c.getresponse()
    assert r.status == 200 and r.read() == b""
    assert r.getheader("Content-Length") == str(len(BLOBS["/blob/big"]))
    c.request("GET", "/blob/empty")  # same connection after a HEAD
    r = c.getresponse()
    assert r.status == 200 and r.read() == b""
    c.close()


def test_keepalive_across_requests_and_faults(proxy):
    proxy.add_rule(Rule.slowdown(count=1, path="^/blob/small$"))
    c = conn_for(proxy)
    socks = set()
    statuses = []
    for _ in range(5):
        c.request("GET", "/blob/small")
        r = c.getresponse()
        body = r.read()
        statuses.append(r.status)
        socks.add(id(c.sock))
        if r.status == 200:
            assert body == BLOBS["/blob/small"]
    c.close()
    assert statuses == [503, 200, 200, 200, 200]
    assert len(socks) == 1  # one client connection served all five


def test_chunked_upstream(proxy):
    st, h, body = get(proxy, "/chunked")
    expect = b"".join(blob("chunk%d" % i, 1000 + i) for i in range(50))
    assert st == 200 and body == expect
    assert h.get("Transfer-Encoding") == "chunked"


def test_request_bodies_forwarded(proxy):
    data = os.urandom(300000)
    c = conn_for(proxy)
    c.request("PUT", "/echo", body=data,
              headers={"Content-Type": "application/octet-stream"})
    doc = json.loads(c.getresponse().read())
    assert doc["body_len"] == len(data)
    assert doc["body_sha256"] == hashlib.sha256(data).hexdigest()
    # Chunked request body, same connection.
    c.request("PUT", "/echo", body=iter([data[:1000], data[1000:]]),
              encode_chunked=True)
    doc = json.loads(c.getresponse().read())
    assert doc["body_sha256"] == hashlib.sha256(data).hexdigest()
    c.close()
    assert proxy.counters()["bytes_received"] == 2 * len(data)


def test_upstream_down_is_502():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with FaultProxy(upstream="http://127.0.0.1:%d" % port) as p:
        st, _, _ = get(p, "/x")
        assert st == 502
        assert p.count(status=502) == 1


# ---------------------------------------------------------------------------
# Faults


def test_slowdown_next_n(proxy):
    proxy.set_rules([Rule.slowdown(count=2)])
    results = [get(proxy, "/blob/small") for _ in range(3)]
    for st, h, body in results[:2]:
        assert st == 503
        assert h["Content-Type"] == "application/xml"
        assert s3_error(body) == ("SlowDown",
                                  "Please reduce your request rate.")
    assert results[2][0] == 200 and results[2][2] == BLOBS["/blob/small"]
    assert proxy.rules()[0]["fired"] == 2
    assert proxy.counters()["faults"] == {"slowdown": 2}


def test_probability_is_seeded(upstream):
    def pattern(seed):
        with FaultProxy(upstream=upstream, seed=seed,
                        rules=[Rule.slowdown(probability=0.5)]) as p:
            return [get(p, "/blob/small")[0] for _ in range(40)]
    a, b, c = pattern(11), pattern(11), pattern(12)
    assert a == b
    assert a != c
    assert set(a) == {200, 503}
    assert 8 <= a.count(503) <= 32


@pytest.mark.parametrize("status", [500, 502, 504])
def test_error_status(proxy, status):
    proxy.set_rules([Rule.error(status, count=1)])
    st, h, body = get(proxy, "/blob/small")
    assert st == status
    if status == 500:
        assert s3_error(body)[0] == "InternalError"
    else:
        assert body.startswith(b"%d " % status)
    assert get(proxy, "/blob/small")[0] == 200
    assert proxy.count(status=status) == 1


def test_reset_after_k_bytes(proxy):
    proxy.set_rules([Rule.reset(after_bytes=5000, count=1)])
    head, body, err = raw_get(proxy, "/blob/big")
    assert head.startswith(b"HTTP/1.1 200")
    assert isinstance(err, ConnectionResetError)
    assert body == BLOBS["/blob/big"][:5000]
    # The next request is served normally.
    assert get(proxy, "/blob/big")[2] == BLOBS["/blob/big"]
    assert proxy.counters()["faults"] == {"reset": 1}


def test_reset_before_headers(proxy):
    proxy.set_rules([Rule.reset(after_bytes=-1, count=1)])
    head, body, err = raw_get(proxy, "/blob/small")
    assert head == b"" and body == b""
    assert isinstance(err, ConnectionResetError)


def test_truncated_body(proxy):
    proxy.set_rules([Rule.truncate(after_bytes=12345, path="big")])
    c = conn_for(proxy)
    c.request("GET", "/blob/big")
    r = c.getresponse()
    assert r.getheader("Content-Length") == str(len(BLOBS["/blob/big"]))
    with pytest.raises(http.client.IncompleteRead) as ei:
        r.read()
    assert ei.value.partial == BLOBS["/blob/big"][:12345]
    c.close()
    # Truncation of a Range response counts from the range's first byte.
    c = conn_for(proxy)
    c.request("GET", "/blob/big", headers={"Range": "bytes=100-"})
    r = c.getresponse()
    assert r.status == 206
    with pytest.raises(http.client.IncompleteRead) as ei:
        r.read()
    assert ei.value.partial == BLOBS["/blob/big"][100:100 + 12345]
    c.close()
    assert proxy.bytes_sent(path="big") == 2 * 12345


def test_stall_mid_body(proxy):
    proxy.set_rules([Rule.stall(seconds=1.0, after_bytes=1000, count=1)])
    t0 = time.monotonic()
    st, _, body = get(proxy, "/blob/big")
    elapsed = time.monotonic() - t0
    assert st == 200 and body == BLOBS["/blob/big"]
    assert 1.0 <= elapsed < 5.0
    # A client with a shorter read timeout sees the stall as a timeout,
    # after the first bytes arrived.
    proxy.set_rules([Rule.stall(seconds=2.0, after_bytes=1000, count=1)])
    c = conn_for(proxy, timeout=0.3)
    c.request("GET", "/blob/big")
    r = c.getresponse()
    assert r.read(1000) == BLOBS["/blob/big"][:1000]
    with pytest.raises(socket.timeout):
        r.read(1)
    c.close()


def test_notfound_for_pattern(proxy):
    proxy.set_rules([Rule.notfound(path=r"/blob/sm")])
    st, _, body = get(proxy, "/blob/small")
    assert st == 404
    code, _ = s3_error(body)
    assert code == "NoSuchKey"
    assert ET.fromstring(body).findtext("Resource") == "/blob/small"
    assert get(proxy, "/blob/big")[0] == 200


def test_filters_method_query_skip(proxy):
    proxy.set_rules([
        Rule.error(500, method="HEAD"),
        Rule.slowdown(query=r"(^|&)list-type=2", skip=1, count=1),
    ])
    c = conn_for(proxy)
    c.request("HEAD", "/blob/small")
    assert c.getresponse().status == 500
    c.close()
    assert get(proxy, "/echo?list-type=2")[0] == 200   # skipped
    assert get(proxy, "/echo?list-type=2")[0] == 503   # fires
    assert get(proxy, "/echo?list-type=2")[0] == 200   # count reached
    assert get(proxy, "/echo")[0] == 200
    rules = proxy.rules()
    assert rules[1]["matched"] == 3 and rules[1]["fired"] == 1


def test_rule_validation():
    with pytest.raises(ValueError):
        Rule("explode")
    with pytest.raises(ValueError):
        Rule("status")
    with pytest.raises(ValueError):
        Rule.slowdown(probability=1.5)
    with pytest.raises(ValueError):
        Rule.from_dict({"fault": "reset", "bogus": 1})


# ---------------------------------------------------------------------------
# Counters and the control endpoint


def test_counters(proxy):
    get(proxy, "/blob/small")
    get(proxy, "/blob/small", {"Range": "bytes=0-9"})
    get(proxy, "/blob/big?x=1")
    c = conn_for(proxy)
    c.request("HEAD", "/blob/big")
    c.getresponse().read()
    c.close()
    get(proxy, "/nope")
    snap = proxy.counters()
    assert snap["requests"] == 5
    assert snap["by_method"] == {"GET": 4, "HEAD": 1}
    assert snap["by_status"] == {"200": 3, "206": 1, "404": 1}
    assert snap["by_path"]["/blob/small"]["GET"] == 2
    assert snap["by_path"]["/blob/small"]["bytes"] == 1010
    assert snap["by_path"]["/blob/big"] == {
        "requests": 2, "bytes": len(BLOBS["/blob/big"]), "GET": 1, "HEAD": 1}
    assert proxy.count(method="GET", path="^/blob/") == 3
    assert proxy.count(status=206) == 1
    assert proxy.bytes_sent() == snap["bytes_sent"]
    proxy.reset_counters()
    assert proxy.counters()["requests"] == 0


def test_control_endpoint(proxy):
    base = proxy.url + "/__proxy__/"

    def call(method, path, doc=None):
        data = json.dumps(doc).encode() if doc is not None else None
        req = urllib.request.Request(base + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    rules = call("PUT", "rules", [{"fault": "slowdown", "count": 1},
                                  {"fault": "notfound", "path": "^/gone/"}])
    assert [r["fault"] for r in rules] == ["slowdown", "notfound"]
    assert get(proxy, "/blob/small")[0] == 503
    assert get(proxy, "/gone/x")[0] == 404
    call("POST", "rules", {"fault": "status", "status": 504, "count": 1,
                           "method": "GET", "path": "small"})
    assert get(proxy, "/blob/small")[0] == 504
    assert len(call("GET", "rules")) == 3
    counters = call("GET", "counters")
    assert counters["requests"] == 3  # control calls are not counted
    assert counters["faults"] == {"slowdown": 1, "notfound": 1, "status": 1}
    call("DELETE", "rules")
    call("DELETE", "counters")
    assert proxy.rules() == [] and proxy.counters()["requests"] == 0
    with pytest.raises(urllib.error.HTTPError) as ei:
        call("PUT", "rules", [{"fault": "nope"}])
    assert ei.value.code == 400


# ---------------------------------------------------------------------------
# Against s3rver


@pytest.fixture(scope="module")
def s3():
    with S3rver() as srv:
        srv.create_bucket("data")
        yield srv


def test_s3_get_and_range_through_proxy(s3, tmp_path):
    payload = os.urandom(3 * 1024 * 1024 + 17)
    src = tmp_path / "shards" / "train"
    src.mkdir(parents=True)
    (src / "shard-000000.tar").write_bytes(payload)
    (src / "shard-000001.tar").write_bytes(payload[:1000])
    keys = s3.upload_dir("data", tmp_path / "shards", prefix="p/")
    assert keys == ["p/train/shard-000000.tar", "p/train/shard-000001.tar"]
    with FaultProxy(upstream=s3.endpoint) as p:
        cli = s3.client(endpoint=p.url)  # signed requests, Host preserved
        got = cli.get_object(Bucket="data", Key=keys[0])["Body"].read()
        assert got == payload
        r = cli.get_object(Bucket="data", Key=keys[0],
                           Range="bytes=1048576-2097151")
        assert r["Body"].read() == payload[1048576:2097152]
        assert r["ContentRange"] == "bytes 1048576-2097151/%d" % len(payload)
        head = cli.head_object(Bucket="data", Key=keys[1])
        assert head["ContentLength"] == 1000
        assert p.count(method="GET", path="^/data/p/train/") == 2
        assert p.count(method="HEAD") == 1
        assert p.bytes_sent(method="GET") == len(payload) + 1048576


def test_s3_slowdown_is_retried_by_boto3(s3):
    s3.put_bytes("data", "retry/obj", b"hello")
    import boto3
    from botocore.config import Config
    with FaultProxy(upstream=s3.endpoint,
                    rules=[Rule.slowdown(count=2, method="GET")]) as p:
        cli = boto3.session.Session().client(
            "s3", endpoint_url=p.url, aws_access_key_id="S3RVER",
            aws_secret_access_key="S3RVER", region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"},
                          retries={"max_attempts": 5, "mode": "standard"}))
        r = cli.get_object(Bucket="data", Key="retry/obj")
        assert r["Body"].read() == b"hello"
        assert r["ResponseMetadata"]["RetryAttempts"] == 2
        assert p.count(method="GET") == 3
        assert p.count(method="GET", status=503) == 2


def test_s3_notfound_fault(s3):
    s3.put_bytes("data", "nf/present", b"x")
    from botocore.exceptions import ClientError
    with FaultProxy(upstream=s3.endpoint,
                    rules=[Rule.notfound(path="^/data/nf/")]) as p:
        with pytest.raises(ClientError) as ei:
            s3.client(endpoint=p.url).get_object(Bucket="data",
                                                 Key="nf/present")
        assert ei.value.response["Error"]["Code"] == "NoSuchKey"


def test_s3_list_paginates_past_1000(s3):
    """s3rver's continuation tokens need NODE_OPTIONS=--openssl-legacy-
    provider on this Node; without it the second page is a 500."""
    n = 1100
    from concurrent.futures import ThreadPoolExecutor
    keys = ["many/%05d.tar" % i for i in range(n)]
    with ThreadPoolExecutor(max_workers=16) as ex:
        list(ex.map(lambda k: s3.s3.put_object(Bucket="data", Key=k,
                                               Body=b"."), keys))
    first = s3.s3.list_objects_v2(Bucket="data", Prefix="many/")
    assert first["IsTruncated"] is True
    assert first["KeyCount"] == 1000
    token = first["NextContinuationToken"]
    second = s3.s3.list_objects_v2(Bucket="data", Prefix="many/",
                                   ContinuationToken=token)
    assert second["IsTruncated"] is False
    assert [o["Key"] for o in first["Contents"] + second["Contents"]] == keys
    # Through the proxy: the paginator makes exactly two list requests.
    with FaultProxy(upstream=s3.endpoint) as p:
        cli = s3.client(endpoint=p.url)
        got = []
        for page in cli.get_paginator("list_objects_v2").paginate(
                Bucket="data", Prefix="many/"):
            got.extend(o["Key"] for o in page["Contents"])
        assert got == keys
        assert p.count(method="GET", path="^/data/?$") == 2
