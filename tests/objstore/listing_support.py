"""Helpers of the listing tests (test_listing.py) and of bench/listing.py.

- ``write_s3rver_objects``: create objects in s3rver's data directory
  directly, in the layout s3rver 3.7.1's filesystem store uses (one file
  ``<key>._S3rver_object`` per object with its MD5 beside it in
  ``<key>._S3rver_object.md5``; metadata files are optional). 100k keys
  take seconds this way instead of many minutes of PUTs. A key is a path
  under the bucket's directory, so keys must be valid file names per
  '/'-separated part (no empty parts, no "." or "..").
- ``MemListServer``: an in-memory ListObjectsV2 server (standard library only)
  answering prefix, delimiter, max-keys, start-after, continuation tokens
  and EncodingType=url over a key set sorted bytewise as S3 sorts it, fast
  enough for 100k keys (a page is a bisect and 1000 lines of XML). It
  checks no signature. test_listing.py checks that it answers like s3rver
  on the queries the listing makes.
- ``run_list``: run ``sio_epoch_dump --list`` or ``shardcast ls --all`` on a
  source with the listing knobs, return the URLs and the wall time.
"""

import bisect
import hashlib
import json
import os
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def build_dir():
    return Path(os.environ.get("SHARDCAST_BUILD") or REPO / "build")


# s3rver ----------------------------------------------------------------------

def write_s3rver_objects(directory, bucket, keys, body=b"x"):
    """Create every key of keys with content body in s3rver's data
    directory (the bucket must exist: create_bucket first)."""
    md5 = hashlib.md5(body).hexdigest().encode()
    made = set()
    root = os.path.join(directory, bucket)
    for k in keys:
        parts = k.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError("key %r cannot be stored by s3rver" % k)
        d = os.path.join(root, *parts[:-1])
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        base = os.path.join(d, parts[-1] + "._S3rver_object")
        with open(base, "wb") as f:
            f.write(body)
        with open(base + ".md5", "wb") as f:
            f.write(md5)


# An in-memory ListObjectsV2 server ----------------------------------------

def _url_encode(b):
    """EncodingType=url as S3 writes it: every byte but unreserved ones as
    %XX."""
    return urllib.parse.quote_from_bytes(b, safe=b"-._~")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "memlist"
    sys_version = ""

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        mem = self.server.mem
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        with mem.lock:
            mem.requests += 1
            if "start-after" in q and "continuation-token" not in q:
                mem.start_after_requests += 1
        if q.get("list-type") != ["2"]:
            self._send(400, b"<Error><Code>InvalidArgument</Code></Error>")
            return
        try:
            body = mem.page(q)
        except ValueError:
            self._send(400, b"<Error><Code>InvalidArgument</Code>"
                            b"<Message>The continuation token provided is "
                            b"incorrect</Message></Error>")
            return
        self._send(200, body)

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # clients (the fault proxy) cut connections on purpose


class MemListServer:
    """ListObjectsV2 over keys (str), as one bucket; a context manager.
    Attributes: ``url`` (endpoint), ``requests``, ``start_after_requests``."""

    def __init__(self, keys, size=1):
        self.keys = sorted({k.encode() for k in keys})
        self.size = size
        self.lock = threading.Lock()
        self.requests = 0
        self.start_after_requests = 0
        self._server = None
        self._thread = None

    def __enter__(self):
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.mem = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        return False

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    def page(self, q):
        """The ListBucketResult document for query q (parse_qs form)."""
        prefix = q.get("prefix", [""])[0].encode()
        delim = q.get("delimiter", [""])[0].encode()
        max_keys = min(int(q.get("max-keys", ["1000"])[0]), 1000)
        token = q.get("continuation-token", [None])[0]
        keys = self.keys
        if token is not None:
            # "k" + hex: after that key; "p" + hex: after every key under
            # that CommonPrefix.
            kind, last = token[:1], bytes.fromhex(token[1:])
            if kind == "k":
                i = bisect.bisect_right(keys, last)
            elif kind == "p":
                i = bisect.bisect_left(keys, last[:-1] + bytes([last[-1] + 1]))
            else:
                raise ValueError(token)
        elif q.get("start-after", [""])[0]:
            i = bisect.bisect_right(keys, q["start-after"][0].encode())
        else:
            i = 0
        i = max(i, bisect.bisect_left(keys, prefix))
        contents, prefixes = [], []
        last, truncated, n = None, False, 0
        while i < len(keys) and keys[i].startswith(prefix):
            k = keys[i]
            if n == max_keys:
                truncated = True
                break
            d = k.find(delim, len(prefix)) if delim else -1
            if d >= 0:
                cp = k[:d + len(delim)]
                prefixes.append(cp)
                last = b"p" + cp
                i = bisect.bisect_left(keys, cp[:-1] + bytes([cp[-1] + 1]))
            else:
                contents.append(k)
                last = b"k" + k
                i += 1
            n += 1
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n'
               '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/'
               '2006-03-01/"><Name>b</Name><Prefix>%s</Prefix>'
               '<KeyCount>%d</KeyCount><MaxKeys>%d</MaxKeys>'
               '<EncodingType>url</EncodingType><IsTruncated>%s</IsTruncated>'
               % (_url_encode(prefix), n, max_keys,
                  "true" if truncated else "false")]
        if truncated:
            out.append("<NextContinuationToken>%s%s</NextContinuationToken>"
                       % (last[:1].decode(), last[1:].hex()))
        for k in contents:
            out.append("<Contents><Key>%s</Key><Size>%d</Size>"
                       "<StorageClass>STANDARD</StorageClass></Contents>"
                       % (_url_encode(k), self.size))
        for p in prefixes:
            out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>"
                       % _url_encode(p))
        out.append("</ListBucketResult>")
        return "".join(out).encode()


# Running a listing ------------------------------------------------------------

def s3env(endpoint, workers=None, split=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and not k.startswith("SHARDCAST_S3_")}
    env.update({"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY":
                "S3RVER", "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL_S3": endpoint,
                "AWS_EC2_METADATA_DISABLED": "true",
                "HOME": "/tmp/shardcast-objstore-nohome"})
    if workers is not None:
        env["SHARDCAST_S3_LIST_WORKERS"] = str(workers)
    if split is not None:
        env["SHARDCAST_S3_LIST_SPLIT"] = "1" if split else "0"
    return env


def run_list(source, endpoint, all_objects=False, workers=None, split=None,
             extra=(), timeout=900):
    """List source; returns (urls in the order printed, seconds, stderr).
    all_objects: `shardcast ls --all --json` (every object; it lists the
    source twice, so not for timing); else `sio_epoch_dump --list` (shard
    names only)."""
    env = s3env(endpoint, workers, split)
    if all_objects:
        cmd = [str(build_dir() / "shardcast"), "ls", "--all", "--json",
               *map(str, extra), source]
    else:
        cmd = [str(build_dir() / "sio_epoch_dump"), "--list",
               *map(str, extra), source]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (cmd, p.returncode,
                                                     p.stderr.decode()))
    if all_objects:
        urls = [o["url"] for o in json.loads(p.stdout.decode())["objects"]]
    else:
        urls = [line.split("\t")[1] for line in p.stdout.decode().splitlines()]
    return urls, dt, p.stderr.decode()
