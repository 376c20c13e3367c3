#!/usr/bin/python3
"""A throttling S3 front: a token-bucket proxy in front of an S3 server.

It stands in for the two limits a real S3 bucket puts on its readers:

* the request rate of a prefix. Every request (GET, HEAD, LIST, any
  method) takes one token from a bucket that refills at ``rate`` tokens per
  second and holds at most ``burst``. A request that finds no token is
  answered at once, without asking the upstream, ``503 SlowDown`` with
  S3's XML error body (``<Error><Code>SlowDown</Code><Message>Please reduce
  your request rate.</Message>...``) and, as S3, no Retry-After header. A
  refused request takes no token. One bucket serves the whole store (the
  benchmark's dataset lives under one prefix).
* the bandwidth of one connection. With ``conn_bps`` > 0 every client
  connection sends at most that many bytes per second (its own token
  bucket of bytes, burst 1/8 s); 0 (the default) is no cap.

It is tests/support/faultproxy.py's proxy (same forwarding, keep-alive,
counters, control endpoint; its fault rules still work) with the token
bucket in front of the rules, the bandwidth cap in the handler's writes,
bodies streamed in 1 MiB pieces, and a per-second timeline. It counts at
the store: requests by method and by status (200, 206, 503, ...), response
body bytes sent, and per second of the run: accepted requests, 503s and
bytes.

Control (never forwarded nor counted), beside faultproxy's own::

    GET  /__proxy__/throttle     {"rate", "burst", "conn_bps", "tokens"}
    PUT  /__proxy__/throttle     change any of rate, burst, conn_bps (JSON)
    GET  /__proxy__/counters     faultproxy's counters plus "throttle":
                                 {"accepted", "throttled", "timeline":
                                 [[second, accepted, throttled, bytes], ...]}
    DELETE /__proxy__/counters   reset the counters (and the timeline clock)

Stand-alone: ``tbproxy.py UPSTREAM --rate R [--burst B] [--conn-bps X]``
prints its URL (http://127.0.0.1:PORT) on the first line of stdout and
runs until killed. Standard library only; /usr/bin/python3.
"""

import argparse
import json
import os
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))

from support import faultproxy as fp  # noqa: E402

# Response bodies are read from the upstream and written to the client in
# pieces of up to this size (faultproxy's default is 64 KiB).
BODY_CHUNK = 1 << 20


class TokenBucket:
    """rate tokens per second, at most burst; rate <= 0: unlimited."""

    def __init__(self, rate, burst=None):
        self.lock = threading.Lock()
        self.configure(rate, burst)

    def configure(self, rate, burst=None):
        with self.lock:
            self.rate = float(rate)
            self.burst = float(burst if burst is not None else max(1.0, rate))
            if self.rate > 0 and self.burst < 1:
                raise ValueError("burst must be >= 1")
            self.tokens = self.burst
            self.t = time.monotonic()

    def _refill(self, now):
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now

    def take(self):
        """True and one token taken, or False (no token: throttle)."""
        if self.rate <= 0:
            return True
        with self.lock:
            self._refill(time.monotonic())
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return True
            return False

    def level(self):
        with self.lock:
            if self.rate > 0:
                self._refill(time.monotonic())
            return self.tokens


class _Handler(fp._Handler):
    """faultproxy's handler with a per-connection byte rate and the
    throttle control endpoint."""

    def setup(self):
        super().setup()
        self._bw_allow = 0.0
        self._bw_t = time.monotonic()

    def _write(self, data):
        bps = self.proxy.conn_bps
        if bps <= 0 or len(data) < 1024:
            return super()._write(data)
        # A byte bucket per connection, burst 1/8 s of the rate; write in
        # slices of at most that, sleeping for the missing allowance.
        burst = max(16384.0, bps / 8.0)
        view = memoryview(data)
        while len(view):
            now = time.monotonic()
            self._bw_allow = min(burst, self._bw_allow + (now - self._bw_t) * bps)
            self._bw_t = now
            if self._bw_allow < 1.0:
                time.sleep(min(0.25, (1.0 - self._bw_allow) / bps + 0.001))
                continue
            n = int(min(len(view), self._bw_allow))
            super()._write(view[:n])
            self._bw_allow -= n
            view = view[n:]

    def _send_head(self, status, reason, headers):
        # S3 sends no Retry-After with SlowDown; faultproxy adds one.
        if status == 503 and self.proxy.s3_like_503:
            headers = [(k, v) for k, v in headers if k.lower() != "retry-after"]
        return super()._send_head(status, reason, headers)

    def _control(self):
        path = urllib.parse.urlsplit(self.path).path[len(fp.CONTROL_PREFIX):]
        if path != "throttle":
            return super()._control()
        status, body = 200, None
        try:
            raw = self._discard_request_body_bytes()
            if self.command in ("PUT", "POST"):
                doc = json.loads(raw.decode() or "{}")
                self.proxy.configure(**doc)
            body = self.proxy.throttle()
        except (ValueError, TypeError) as e:
            status, body = 400, {"error": str(e)}
        data = json.dumps(body).encode()
        self._send_head(status, self.responses.get(status, ("",))[0], [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data)))])
        if self.command != "HEAD":
            self._write(data)


class _Server(fp._Server):
    request_queue_size = 512


class ThrottleProxy(fp.FaultProxy):
    """FaultProxy with a request token bucket and a per-connection byte
    rate. rate: requests/s (0: no limit); burst: bucket size (default:
    rate, at least 1); conn_bps: bytes/s per client connection (0: no cap).
    """

    def __init__(self, upstream, rate=0.0, burst=None, conn_bps=0,
                 s3_like_503=True, **kw):
        super().__init__(upstream, **kw)
        self.bucket = TokenBucket(rate, burst)
        self.conn_bps = float(conn_bps)
        self.s3_like_503 = s3_like_503
        self._slowdown = fp.Rule.slowdown()
        self._tl_lock = threading.Lock()
        self._reset_timeline()

    def configure(self, rate=None, burst=None, conn_bps=None):
        if rate is not None or burst is not None:
            self.bucket.configure(self.bucket.rate if rate is None else rate,
                                  burst if burst is not None else
                                  (None if rate is not None else self.bucket.burst))
        if conn_bps is not None:
            if float(conn_bps) < 0:
                raise ValueError("conn_bps must be >= 0")
            self.conn_bps = float(conn_bps)

    def throttle(self):
        return {"rate": self.bucket.rate, "burst": self.bucket.burst,
                "conn_bps": self.conn_bps, "tokens": self.bucket.level()}

    def start(self):
        self._stop.clear()
        self._server = _Server((self._host, self._port), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="tbproxy", daemon=True)
        self._thread.start()
        return self

    # -- the bucket in front of the rules ------------------------------------

    def _pick_rule(self, method, path, query):
        if not self.bucket.take():
            return self._slowdown
        return super()._pick_rule(method, path, query)

    # -- counters and timeline -----------------------------------------------

    def _reset_timeline(self):
        with self._tl_lock:
            self._t0 = time.monotonic()
            self._timeline = {}
            self._accepted = 0
            self._throttled = 0

    def _count(self, method, path, status, sent, received, fault):
        super()._count(method, path, status, sent, received, fault)
        sec = int(time.monotonic() - self._t0)
        throttled = fault == "slowdown"
        with self._tl_lock:
            e = self._timeline.setdefault(sec, [0, 0, 0])
            if throttled:
                e[1] += 1
                self._throttled += 1
            else:
                e[0] += 1
                self._accepted += 1
            e[2] += sent

    def counters(self):
        c = super().counters()
        with self._tl_lock:
            c["throttle"] = {
                "accepted": self._accepted, "throttled": self._throttled,
                "since_s": time.monotonic() - self._t0,
                "timeline": [[s] + v for s, v in sorted(self._timeline.items())]}
        c["throttle"].update(self.throttle())
        return c

    def reset_counters(self):
        super().reset_counters()
        self._reset_timeline()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("upstream", help="http://host:port of the S3 server")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="requests per second (0: no limit)")
    ap.add_argument("--burst", type=float, default=None,
                    help="bucket size (default: the rate, at least 1)")
    ap.add_argument("--conn-bps", type=float, default=0.0,
                    help="bytes per second per client connection (0: no cap)")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args(argv)
    fp.CHUNK = BODY_CHUNK
    # Many threads streaming: switch the GIL less often than every 5 ms
    # would not help latency; keep the default, but avoid the stack cost
    # of 8 MiB per thread.
    threading.stack_size(512 << 10)
    with ThrottleProxy(a.upstream, rate=a.rate, burst=a.burst,
                       conn_bps=a.conn_bps, port=a.port) as p:
        print(p.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
