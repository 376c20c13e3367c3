"""A fault-injecting HTTP/1.1 reverse proxy for object-store tests.

FaultProxy listens on 127.0.0.1 (a free port) in front of one upstream
(s3rver, nginx, any HTTP server) and forwards every request unchanged:
method, path and query, every end-to-end header (Host, Authorization, Range,
x-amz-* ... so SigV4 signatures stay valid) and the request body; responses
are streamed back with their status and headers. Client connections are
kept alive as HTTP/1.1 allows; each client connection has its own upstream
connection, reused while the upstream keeps it open.

Rules inject faults. Each request is checked against the rules in order; the
first rule whose filters match *and* which fires decides the fault:

=============  ===========================================================
fault          effect
=============  ===========================================================
``status``     answer ``status`` (500, 502, 503, 504, ...) without asking
               the upstream; 500/503 carry an S3 XML error body
``slowdown``   ``503 SlowDown`` with S3's XML error body
``notfound``   ``404 NoSuchKey`` with S3's XML error body
``reset``      forward, send ``after_bytes`` bytes of the body, then reset
               the connection (TCP RST); ``after_bytes=-1``: reset before
               any response byte
``truncate``   forward, send ``after_bytes`` bytes of the body although the
               headers announce more, then close (FIN)
``stall``      forward, send ``after_bytes`` bytes, pause ``seconds``, then
               send the rest
=============  ===========================================================

Filters: ``method`` (exact, case-insensitive), ``path`` (regex searched in
the path without the query), ``query`` (regex searched in the query string).
Firing: ``skip`` lets the first N matching requests through, ``count`` caps
how many times the rule fires (None: no cap), ``probability`` fires with
that chance from the proxy's seeded RNG (``seed``), so a run is repeatable
when requests arrive in a repeatable order.

Rules are set in the constructor, at run time from Python (set_rules,
add_rule, clear_rules) or over HTTP on the proxy itself, for non-Python
drivers (these requests are never forwarded nor counted)::

    GET    /__proxy__/rules      the rules, JSON list (with "fired" counts)
    PUT    /__proxy__/rules      replace the rules (JSON list of objects)
    POST   /__proxy__/rules      append rules (JSON object or list)
    DELETE /__proxy__/rules      remove every rule
    GET    /__proxy__/counters   counters, JSON (see counters())
    DELETE /__proxy__/counters   reset the counters

Counters count every proxied request by method, path and final status, with
the response body bytes the client was sent (counters(), count(),
bytes_sent()); the benchmarks use them to count object-store requests.

Usage::

    with FaultProxy(upstream="http://127.0.0.1:9000",
                    rules=[Rule.slowdown(count=2)]) as p:
        endpoint = p.url
        ...
        assert p.count(method="GET") == 3

Standard library only; runs under /usr/bin/python3.
"""

import http.client
import json
import random
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape as xml_escape

__all__ = ["FaultProxy", "Rule"]

CONTROL_PREFIX = "/__proxy__/"

# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own business on each
# side; Expect is answered by the proxy (100-continue) and not forwarded.
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade",
    "expect",
}

# Request bodies up to this size are buffered so that a request can be
# replayed on a fresh upstream connection when a kept-alive one turns out to
# be closed; larger bodies are streamed and not retried.
REPLAY_BODY_MAX = 16 << 20

CHUNK = 64 << 10

FAULTS = ("status", "slowdown", "notfound", "reset", "truncate", "stall")

S3_ERRORS = {
    400: ("BadRequest", "Bad Request"),
    403: ("AccessDenied", "Access Denied"),
    404: ("NoSuchKey", "The specified key does not exist."),
    500: ("InternalError", "We encountered an internal error. "
                           "Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}


class Rule:
    """One fault rule. Build with the class methods or Rule(fault=...);
    Rule.from_dict / to_dict give the JSON form used by /__proxy__/rules
    (same field names)."""

    FIELDS = ("fault", "status", "method", "path", "query", "count", "skip",
              "probability", "after_bytes", "seconds", "code", "message")

    def __init__(self, fault, status=None, method=None, path=None, query=None,
                 count=None, skip=0, probability=1.0, after_bytes=0,
                 seconds=0.0, code=None, message=None):
        if fault not in FAULTS:
            raise ValueError("unknown fault %r (one of %s)" % (fault, FAULTS))
        if fault == "status":
            if status is None or not 100 <= int(status) <= 599:
                raise ValueError("fault 'status' needs status 100..599")
            status = int(status)
        elif fault == "slowdown":
            status = 503
        elif fault == "notfound":
            status = 404
        if count is not None and int(count) < 0:
            raise ValueError("count must be >= 0")
        if not 0.0 <= float(probability) <= 1.0:
            raise ValueError("probability must be within [0, 1]")
        if int(skip) < 0:
            raise ValueError("skip must be >= 0")
        if int(after_bytes) < -1 or (fault != "reset" and int(after_bytes) < 0):
            raise ValueError("after_bytes must be >= 0 (-1 only for reset)")
        if float(seconds) < 0:
            raise ValueError("seconds must be >= 0")
        self.fault = fault
        self.status = status
        self.method = method.upper() if method else None
        self.path = path
        self.query = query
        self._path_re = re.compile(path) if path else None
        self._query_re = re.compile(query) if query else None
        self.count = None if count is None else int(count)
        self.skip = int(skip)
        self.probability = float(probability)
        self.after_bytes = int(after_bytes)
        self.seconds = float(seconds)
        self.code = code
        self.message = message
        self.matched = 0  # requests that passed the filters
        self.fired = 0    # faults injected

    # Convenience constructors -------------------------------------------

    @classmethod
    def slowdown(cls, count=None, probability=1.0, **filters):
        return cls("slowdown", count=count, probability=probability, **filters)

    @classmethod
    def error(cls, status, count=None, probability=1.0, **filters):
        return cls("status", status=status, count=count,
                   probability=probability, **filters)

    @classmethod
    def notfound(cls, path, **kw):
        return cls("notfound", path=path, **kw)

    @classmethod
    def reset(cls, after_bytes=0, count=None, **kw):
        return cls("reset", after_bytes=after_bytes, count=count, **kw)

    @classmethod
    def truncate(cls, after_bytes=0, count=None, **kw):
        return cls("truncate", after_bytes=after_bytes, count=count, **kw)

    @classmethod
    def stall(cls, seconds, after_bytes=0, count=None, **kw):
        return cls("stall", seconds=seconds, after_bytes=after_bytes,
                   count=count, **kw)

    @classmethod
    def from_dict(cls, d):
        if isinstance(d, Rule):
            return d
        if not isinstance(d, dict):
            raise ValueError("a rule is a JSON object")
        unknown = set(d) - set(cls.FIELDS) - {"fired", "matched"}
        if unknown:
            raise ValueError("unknown rule fields: %s" % sorted(unknown))
        if "fault" not in d:
            raise ValueError("a rule needs 'fault'")
        return cls(**{k: v for k, v in d.items() if k in cls.FIELDS})

    def to_dict(self):
        d = {k: getattr(self, k) for k in self.FIELDS}
        d["matched"] = self.matched
        d["fired"] = self.fired
        return d

    def __repr__(self):
        return "Rule(%s)" % ", ".join(
            "%s=%r" % (k, v) for k, v in self.to_dict().items()
            if v not in (None, 0, 0.0) or k == "fault")

    # Matching (called under the proxy's lock) ---------------------------

    def _filters_match(self, method, path, query):
        if self.method and method.upper() != self.method:
            return False
        if self._path_re and not self._path_re.search(path):
            return False
        if self._query_re and not self._query_re.search(query):
            return False
        return True

    def _fires(self, rng):
        self.matched += 1
        if self.matched <= self.skip:
            return False
        if self.count is not None and self.fired >= self.count:
            return False
        if self.probability < 1.0 and rng.random() >= self.probability:
            return False
        self.fired += 1
        return True


class _Counters:
    """Per (method, path, status) request and byte counts. Thread-safe via
    the proxy's lock."""

    def __init__(self):
        self.entries = {}
        self.faults = {}
        self.bytes_in = 0

    def add(self, method, path, status, nbytes, nbytes_in, fault):
        e = self.entries.setdefault((method, path, status),
                                    {"requests": 0, "bytes": 0})
        e["requests"] += 1
        e["bytes"] += nbytes
        self.bytes_in += nbytes_in
        if fault:
            self.faults[fault] = self.faults.get(fault, 0) + 1

    def snapshot(self):
        by_method, by_status, by_path = {}, {}, {}
        total = nbytes = 0
        entries = []
        for (m, p, s), e in sorted(self.entries.items(),
                                   key=lambda kv: (kv[0][1], kv[0][0],
                                                   kv[0][2])):
            entries.append({"method": m, "path": p, "status": s,
                            "requests": e["requests"], "bytes": e["bytes"]})
            total += e["requests"]
            nbytes += e["bytes"]
            by_method[m] = by_method.get(m, 0) + e["requests"]
            by_status[str(s)] = by_status.get(str(s), 0) + e["requests"]
            bp = by_path.setdefault(p, {"requests": 0, "bytes": 0})
            bp["requests"] += e["requests"]
            bp["bytes"] += e["bytes"]
            bp[m] = bp.get(m, 0) + e["requests"]
        return {"requests": total, "bytes_sent": nbytes,
                "bytes_received": self.bytes_in, "by_method": by_method,
                "by_status": by_status, "by_path": by_path,
                "faults": dict(self.faults), "entries": entries}


class _ClientGone(Exception):
    """The client connection is unusable (closed, reset, or by a fault)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faultproxy"
    sys_version = ""

    # Set by FaultProxy on the server object: server.proxy.

    def setup(self):
        super().setup()
        self.proxy = self.server.proxy
        self.upstream = None  # http.client.HTTPConnection, per client conn
        self.proxy._track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        self._drop_upstream()
        self.proxy._track(self.connection, False)

    def log_message(self, fmt, *args):
        # Quiet: tests read counters, not logs.
        pass

    # Every method goes through one function.
    def do_GET(self):
        self._proxy_request()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    # -- helpers -------------------------------------------------------------

    def _drop_upstream(self):
        if self.upstream is not None:
            try:
                self.upstream.close()
            except OSError:
                pass
            self.upstream = None

    def _write(self, data):
        try:
            self.wfile.write(data)
        except OSError as e:
            raise _ClientGone() from e

    def _send_head(self, status, reason, headers):
        lines = ["HTTP/1.1 %d %s\r\n" % (status, reason or "")]
        for k, v in headers:
            lines.append("%s: %s\r\n" % (k, v))
        lines.append("\r\n")
        self._write("".join(lines).encode("latin-1"))

    def _read_request_body(self):
        """The request body as bytes (<= REPLAY_BODY_MAX) or an iterator of
        chunks, plus its length when known (None when chunked)."""
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            return self._iter_chunked_request(), None
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0:
            raise ValueError("negative Content-Length")
        if n <= REPLAY_BODY_MAX:
            data = self.rfile.read(n)
            if len(data) != n:
                raise _ClientGone()
            return data, n

        def it(left=n):
            while left:
                b = self.rfile.read(min(CHUNK, left))
                if not b:
                    raise _ClientGone()
                left -= len(b)
                yield b
        return it(), n

    def _iter_chunked_request(self):
        while True:
            line = self.rfile.readline(1024)
            if not line:
                raise _ClientGone()
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    t = self.rfile.readline(8192)
                    if t in (b"\r\n", b"\n", b""):
                        return
            data = self.rfile.read(size)
            self.rfile.readline(16)
            if len(data) != size:
                raise _ClientGone()
            yield data

    def _discard_request_body(self):
        """Read and drop the request body; returns its length."""
        return len(self._discard_request_body_bytes())

    def _abort(self, rst):
        """Close the client connection: with RST when rst, else with FIN."""
        self.close_connection = True
        try:
            if rst:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
            else:
                self.connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        # The socket only really closes once the file objects are closed.
        for f in (self.wfile, self.rfile):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.connection.close()
        except OSError:
            pass

    # -- the control endpoint ---------------------------------------------

    def _control(self):
        path = urllib.parse.urlsplit(self.path).path[len(CONTROL_PREFIX):]
        status, body = 200, None
        try:
            raw = self._discard_request_body_bytes()
            if path == "rules" and self.command == "GET":
                body = self.proxy.rules()
            elif path == "rules" and self.command in ("PUT", "POST"):
                doc = json.loads(raw.decode() or "[]")
                rules = doc if isinstance(doc, list) else [doc]
                if self.command == "PUT":
                    self.proxy.set_rules(rules)
                else:
                    for r in rules:
                        self.proxy.add_rule(r)
                body = self.proxy.rules()
            elif path == "rules" and self.command == "DELETE":
                self.proxy.clear_rules()
                body = []
            elif path == "counters" and self.command == "GET":
                body = self.proxy.counters()
            elif path == "counters" and self.command == "DELETE":
                self.proxy.reset_counters()
                body = {}
            elif path == "health":
                body = {"ok": True, "upstream": self.proxy.upstream}
            else:
                status, body = 404, {"error": "no such control endpoint"}
        except (ValueError, TypeError, re.error) as e:
            status, body = 400, {"error": str(e)}
        data = json.dumps(body).encode()
        self._send_head(status, self.responses.get(status, ("",))[0], [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
        ] + ([("Connection", "close")] if self.close_connection else []))
        if self.command != "HEAD":
            self._write(data)

    def _discard_request_body_bytes(self):
        body, _ = self._read_request_body()
        if isinstance(body, bytes):
            return body
        return b"".join(body)

    # -- proxying ------------------------------------------------------------

    def _proxy_request(self):
        split = urllib.parse.urlsplit(self.path)
        path, query = split.path, split.query
        if path.startswith(CONTROL_PREFIX):
            try:
                self._control()
            except _ClientGone:
                self.close_connection = True
            return
        rule = self.proxy._pick_rule(self.command, path, query)
        acct = _Account(self.proxy, self.command, path,
                        rule.fault if rule else None)
        try:
            if rule and rule.fault in ("status", "slowdown", "notfound"):
                acct.received = self._discard_request_body()
                self._send_error(rule, path, acct)
            else:
                self._forward(rule, acct)
        except _ClientGone:
            self.close_connection = True
        except ValueError:
            # Malformed request framing (bad chunk size, Content-Length):
            # nothing sensible can follow on this connection.
            self._drop_upstream()
            self._abort(rst=False)
        finally:
            acct.commit()

    def _send_error(self, rule, path, acct):
        status = rule.status
        code, message = S3_ERRORS.get(status, (None, None))
        code = rule.code or code
        message = rule.message or message
        reason = self.responses.get(status, ("Error",))[0]
        rid = self.proxy._request_id()
        if code:
            body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s'
                    '</Code><Message>%s</Message><Resource>%s</Resource>'
                    '<RequestId>%s</RequestId></Error>' % (
                        xml_escape(code), xml_escape(message or ""),
                        xml_escape(path), rid)).encode()
            ctype = "application/xml"
        else:
            # Gateways (502, 504) answer with their own text, not S3 XML.
            body = ("%d %s\n" % (status, reason)).encode()
            ctype = "text/plain"
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))),
                   ("x-amz-request-id", rid)]
        if status == 503:
            headers.append(("Retry-After", "1"))
        if self.close_connection:
            headers.append(("Connection", "close"))
        acct.status = status
        if self.command == "HEAD":
            acct.commit()
            self._send_head(status, reason, headers)
            return
        self._send_head(status, reason, headers)
        acct.sent = len(body)
        acct.commit()
        self._write(body)

    def _upstream_request(self, body, body_len):
        """Send the request upstream and return the response. A kept-alive
        upstream connection that turns out closed is replaced once when the
        body can be replayed."""
        # Content-Length is re-sent from what was actually read.
        headers = [(k, v) for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"]
        chunked = body_len is None
        had_length = self.headers.get("Content-Length") is not None
        for attempt in (0, 1):
            fresh = self.upstream is None
            if fresh:
                self.upstream = self.proxy._connect_upstream()
            conn = self.upstream
            try:
                conn.putrequest(self.command, self.path, skip_host=True,
                                skip_accept_encoding=True)
                for k, v in headers:
                    conn.putheader(k, v)
                if chunked:
                    conn.putheader("Transfer-Encoding", "chunked")
                elif had_length or self.command in ("PUT", "POST", "PATCH"):
                    conn.putheader("Content-Length", str(body_len))
                conn.endheaders()
                if isinstance(body, bytes):
                    if body:
                        conn.send(body)
                else:
                    for b in body:
                        conn.send(b"%x\r\n%s\r\n" % (len(b), b) if chunked
                                  else b)
                    if chunked:
                        conn.send(b"0\r\n\r\n")
                return conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError, http.client.BadStatusLine):
                self._drop_upstream()
                if fresh or attempt or not isinstance(body, bytes):
                    raise
        raise AssertionError("unreachable")

    def _forward(self, rule, acct):
        """Forward upstream and stream the answer, applying a body fault.
        The request is accounted (acct.commit) before the client can have
        its whole answer, so counters read after a response are current."""
        body, body_len = self._read_request_body()
        if isinstance(body, bytes):
            acct.received = len(body)
        else:
            body = self._counted(body, acct)
        try:
            resp = self._upstream_request(body, body_len)
        except (OSError, http.client.HTTPException) as e:
            self._drop_upstream()
            self._bad_gateway(e, acct)
            return
        acct.status = resp.status
        if rule and rule.fault == "reset" and rule.after_bytes < 0:
            self._drop_upstream()
            acct.status = 0  # the client saw no status
            acct.commit()
            self._abort(rst=True)
            return

        headers = [(k, v) for k, v in resp.getheaders()
                   if k.lower() not in HOP_BY_HOP]
        no_body = (self.command == "HEAD" or resp.status in (204, 304)
                   or 100 <= resp.status < 200)
        length = resp.getheader("Content-Length")
        chunked_out = not no_body and length is None
        if chunked_out and self.request_version == "HTTP/1.0":
            # An HTTP/1.0 client cannot read chunks: the end of the body is
            # the end of the connection.
            chunked_out = False
            self.close_connection = True
        if chunked_out:
            headers.append(("Transfer-Encoding", "chunked"))
        if self.close_connection:
            headers.append(("Connection", "close"))
        if no_body:
            # Consume the (empty) response so that the upstream connection
            # can take the next request.
            try:
                resp.read()
            except (OSError, http.client.HTTPException):
                self._drop_upstream()
            acct.commit()
            self._send_head(resp.status, resp.reason, headers)
            if resp.will_close:
                self._drop_upstream()
            return
        self._send_head(resp.status, resp.reason, headers)

        cut = rule.fault in ("reset", "truncate") if rule else False
        limit = rule.after_bytes if rule and rule.fault in (
            "reset", "truncate", "stall") else None
        expect = int(length) if length is not None and length.isdigit() \
            else None
        try:
            while True:
                want = CHUNK
                if limit is not None and acct.sent < limit:
                    want = min(CHUNK, limit - acct.sent)
                if limit is not None and acct.sent >= limit:
                    if cut:
                        self._drop_upstream()
                        acct.commit()
                        self._abort(rst=rule.fault == "reset")
                        return
                    # stall: pause once, then stream the rest.
                    self.proxy._stop.wait(rule.seconds)
                    limit = None
                    continue
                try:
                    data = resp.read1(want)
                except (OSError, http.client.HTTPException):
                    # The upstream broke mid-body: pass the break on.
                    self._drop_upstream()
                    acct.commit()
                    self._abort(rst=True)
                    return
                if not data:
                    break
                last = (expect is not None and not cut and limit is None
                        and acct.sent + len(data) >= expect)
                acct.sent += len(data)
                if last:
                    acct.commit()
                if chunked_out:
                    self._write(b"%x\r\n" % len(data) + data + b"\r\n")
                else:
                    self._write(data)
            if limit is not None and not cut:
                # The body ended before the stall point; stall at the end.
                self.proxy._stop.wait(rule.seconds)
            acct.commit()
            if cut:
                # The body was shorter than after_bytes: it went out whole,
                # and the connection is still cut as the rule says.
                self._drop_upstream()
                self._abort(rst=rule.fault == "reset")
                return
            if chunked_out:
                self._write(b"0\r\n\r\n")
        except _ClientGone:
            self._drop_upstream()
            raise
        if resp.will_close or not resp.isclosed():
            self._drop_upstream()
        if not chunked_out and expect is None:
            # Body delimited by the upstream closing: do the same.
            self.close_connection = True

    @staticmethod
    def _counted(chunks, acct):
        """Pass a streamed request body on, counting its bytes."""
        for b in chunks:
            acct.received += len(b)
            yield b

    def _bad_gateway(self, exc, acct):
        body = ("502 Bad Gateway: upstream %s: %s\n" % (
            self.proxy.upstream, type(exc).__name__)).encode()
        self.close_connection = True
        acct.status = 502
        acct.sent = 0 if self.command == "HEAD" else len(body)
        acct.commit()
        self._send_head(502, "Bad Gateway", [
            ("Content-Type", "text/plain"), ("Content-Length", str(len(body))),
            ("Connection", "close")])
        if self.command != "HEAD":
            self._write(body)


class _Account:
    """The counters entry of one proxied request, committed once: before the
    last byte of the answer is written (so a client that has its answer
    sees it counted) or when the request ends otherwise."""

    __slots__ = ("proxy", "method", "path", "fault", "status", "sent",
                 "received", "done")

    def __init__(self, proxy, method, path, fault):
        self.proxy = proxy
        self.method = method
        self.path = path
        self.fault = fault
        self.status = 0
        self.sent = 0
        self.received = 0
        self.done = False

    def commit(self):
        if not self.done:
            self.done = True
            self.proxy._count(self.method, self.path, self.status, self.sent,
                              self.received, self.fault)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A reset or cut closes the handler's files on purpose and clients
        # drop connections the proxy is still writing to; anything else is
        # a fault of the proxy and is printed.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ValueError, socket.timeout)):
            return
        super().handle_error(request, client_address)


class FaultProxy:
    """The proxy; a context manager that starts on enter and stops on exit.

    upstream: base URL "http://host:port" (http only).
    rules: list of Rule or dicts (see Rule.FIELDS).
    seed: seed of the RNG behind ``probability`` rules.
    timeout: socket timeout towards the upstream, seconds.
    """

    def __init__(self, upstream, rules=None, seed=0, host="127.0.0.1",
                 port=0, timeout=60.0):
        u = urllib.parse.urlsplit(upstream)
        if u.scheme != "http" or not u.hostname:
            raise ValueError("upstream must be http://host:port")
        self.upstream = upstream.rstrip("/")
        self._up_host = u.hostname
        self._up_port = u.port or 80
        self._timeout = timeout
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._rules = []
        self._counters = _Counters()
        self._stop = threading.Event()
        self._conns = set()
        self._rid = 0
        self._host = host
        self._port = port
        self._server = None
        self._thread = None
        self.set_rules(rules or [])

    # -- lifecycle -----------------------------------------------------------

    def start(self):
        self._stop.clear()
        self._server = _Server((self._host, self._port), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="faultproxy", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is None:
            return
        self._stop.set()  # releases stalls
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:  # wake handlers blocked on idle keep-alive reads
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)
        self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def port(self):
        return self._server.server_address[1]

    @property
    def url(self):
        """Base URL of the proxy, e.g. http://127.0.0.1:PORT."""
        return "http://%s:%d" % (self._host, self.port)

    # -- rules ---------------------------------------------------------------

    def set_rules(self, rules):
        """Replace every rule (list of Rule or dict)."""
        parsed = [Rule.from_dict(r) for r in rules]
        with self._lock:
            self._rules = parsed

    def add_rule(self, rule):
        """Append a rule (Rule or dict); returns the Rule."""
        r = Rule.from_dict(rule)
        with self._lock:
            self._rules.append(r)
        return r

    def clear_rules(self):
        with self._lock:
            self._rules = []

    def rules(self):
        """The rules as dicts, with how often each matched and fired."""
        with self._lock:
            return [r.to_dict() for r in self._rules]

    def _pick_rule(self, method, path, query):
        with self._lock:
            for r in self._rules:
                if r._filters_match(method, path, query) and r._fires(self._rng):
                    return r
        return None

    # -- counters ------------------------------------------------------------

    def _count(self, method, path, status, sent, received, fault):
        with self._lock:
            self._counters.add(method, path, status, sent, received, fault)

    def counters(self):
        """A snapshot: {"requests", "bytes_sent", "bytes_received",
        "by_method": {GET: n}, "by_status": {"200": n},
        "by_path": {path: {"requests", "bytes", GET: n, ...}},
        "faults": {fault: n}, "entries": [{method, path, status, requests,
        bytes}]}. Paths exclude the query; status 0 means no response was
        sent (reset before headers, client gone)."""
        with self._lock:
            return self._counters.snapshot()

    def count(self, method=None, path=None, status=None):
        """Requests matching every given filter (path: regex search)."""
        return self._sum("requests", method, path, status)

    def bytes_sent(self, method=None, path=None, status=None):
        """Response body bytes sent for requests matching the filters."""
        return self._sum("bytes", method, path, status)

    def _sum(self, field, method, path, status):
        rx = re.compile(path) if path else None
        total = 0
        with self._lock:
            for (m, p, s), e in self._counters.entries.items():
                if method and m != method.upper():
                    continue
                if rx and not rx.search(p):
                    continue
                if status is not None and s != status:
                    continue
                total += e[field]
        return total

    def reset_counters(self):
        with self._lock:
            self._counters = _Counters()

    # -- internals used by the handler -------------------------------------

    def _connect_upstream(self):
        return http.client.HTTPConnection(self._up_host, self._up_port,
                                          timeout=self._timeout)

    def _request_id(self):
        with self._lock:
            self._rid += 1
            return "FAULTPROXY%08d" % self._rid

    def _track(self, sock, add):
        with self._lock:
            if add:
                self._conns.add(sock)
            else:
                self._conns.discard(sock)


if __name__ == "__main__":
    # Stand-alone use: python3 faultproxy.py http://127.0.0.1:9000 [rules.json]
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: faultproxy.py UPSTREAM_URL [RULES_JSON_FILE]")
    initial = []
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            initial = json.load(f)
    with FaultProxy(sys.argv[1], rules=initial) as proxy:
        print(proxy.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
