"""Helpers of the data-plane tests (test_plan_golden.py, test_plan_faults.py).

- Which data plane each server runs (one place: DATA_PLANES below, or the
  environment variable SHARDCAST_PLAN_TEST_PLANES) and whether the binary
  knows the flag.
- A seeded random WebDataset writer of its own (Python's tarfile and
  zipfile; independent of tests/tools/mkfixtures.py and mkwds.py): ustar,
  GNU and pax tar shards, zip and .tar.gz shards, samples of 1-4 fields of
  0 bytes to ~200 KiB, upper-case and multi-dot extensions, bad samples (a
  repeated field), members the WebDataset rule skips; and the model of
  what each shard yields (the rule applied to the members written).
- A raw HTTP/1.1 reader (a plain socket; the chunked transfer coding
  decoded here, a cut body kept up to its last byte), so a response is
  compared byte for byte and a slow consumer reads exactly as fast as the
  test wants.
- Parsers of whole stream bodies in both formats (tar, frames): samples
  (global index, position, shard URL, key, fields), the outcome (end,
  error, cut) and the trailer JSON.

The module name is unique so it cannot clash with helpers of other test
directories.
"""

import io
import json
import os
import random
import socket
import struct
import subprocess
import tarfile
import threading
import time
import zipfile

import pytest

from server_testlib import _FRAME, sample_payload
from shardcast_testlib import wds_split

# -- the data plane of each server -------------------------------------------

# (server A, server B). "stream": --data-plane stream; "auto": --data-plane
# auto; "default": no flag (a binary without the data plane, to validate
# the harness: A vs A). SHARDCAST_PLAN_TEST_PLANES=stream,stream runs A vs A
# with the flag.
DATA_PLANES = ("stream", "auto")


def planes():
    env = os.environ.get("SHARDCAST_PLAN_TEST_PLANES")
    if env:
        a, _, b = env.partition(",")
        return a.strip(), (b or a).strip()
    return DATA_PLANES


def plane_args(plane):
    return [] if plane == "default" else ["--data-plane", plane]


_HELP = {}


def binary_has_data_plane(binary):
    if binary not in _HELP:
        r = subprocess.run([binary, "--help"], capture_output=True, text=True)
        _HELP[binary] = "data-plane" in (r.stdout + r.stderr)
    return _HELP[binary]


def require_planes(binary, *wanted):
    """Fail (never skip) when a plane needs the flag the binary lacks."""
    if any(p != "default" for p in wanted) and not binary_has_data_plane(binary):
        pytest.fail("%s has no --data-plane flag (planes %s): build the data "
                    "plane, or set SHARDCAST_PLAN_TEST_PLANES=default,default to "
                    "check the harness alone" % (binary, ",".join(wanted)),
                    pytrace=False)


def cli_binary(server_binary):
    d = os.environ.get("SHARDCAST_BUILD") or os.path.dirname(server_binary)
    p = os.path.join(d, "shardcast")
    if not os.access(p, os.X_OK):
        pytest.fail("the shardcast command is not built at %s" % p, pytrace=False)
    return p


def data_plane(status):
    """The job's data_plane object, or None (a server without it)."""
    return status.get("data_plane")


# -- the dataset writer -------------------------------------------------------

EXTS = ["jpg", "cls", "json", "txt", "seg.json", "npy", "PNG", "JPG", "Txt",
        "mp4", "txt.gz", "idx"]


def rand_size(rng):
    x = rng.random()
    if x < 0.08:
        return 0
    if x < 0.50:
        return rng.randint(1, 600)
    if x < 0.85:
        return rng.randint(600, 9000)
    if x < 0.97:
        return rng.randint(9000, 40000)
    return rng.randint(40000, 200 * 1024)


def _key(rng, tag, i, style):
    base = "%s/k%05d" % (tag, i)
    if style == "short" or rng.random() < 0.4:
        return base if rng.random() < 0.7 else "%s/sub%d/k%05d" % (tag, i % 3, i)
    if style == "ustar":
        # over 100 bytes: ustar's prefix field (split at a '/')
        return "%s/%s/%s/k%05d" % (tag, "p" * rng.randint(40, 70),
                                   "q" * rng.randint(30, 60), i)
    # GNU long names and pax paths: one component over 100 bytes, ASCII
    # (pax non-ASCII paths go to libarchive), dots in directories.
    return "%s/dir.%d/%s-k%05d" % (tag, i % 4, "L" * rng.randint(100, 180), i)


class Member:
    __slots__ = ("name", "data", "isdir", "pax")

    def __init__(self, name, data=b"", isdir=False, pax=None):
        self.name, self.data, self.isdir, self.pax = name, data, isdir, pax


def gen_members(rng, tag, nsamples, style="short", bad=0.06, skipped=0.10):
    """The members of one shard: nsamples samples with unique keys (some
    bad: a repeated field), with skipped members between samples."""
    out = []
    for i in range(nsamples):
        if rng.random() < skipped:
            kind = rng.randrange(5)
            if kind == 0:
                out.append(Member("%s/d%05d" % (tag, i), isdir=True))
            elif kind == 1:
                out.append(Member("__x%d.y__" % i, rng.randbytes(rng.randint(0, 300))))
            elif kind == 2:
                out.append(Member("__meta__", rng.randbytes(rng.randint(0, 100))))
            elif kind == 3:
                out.append(Member("%s/README%d" % (tag, i), rng.randbytes(50)))
            else:
                out.append(Member("NOEXT%d" % i, b"x" * rng.randint(0, 700)))
        key = _key(rng, tag, i, style)
        nf = rng.randint(1, 4)
        exts, seen = [], set()
        for e in rng.sample(EXTS, len(EXTS)):
            if e.lower() in seen:
                continue
            seen.add(e.lower())
            exts.append(e)
            if len(exts) == nf:
                break
        for e in exts:
            pax = None
            if style == "pax" and rng.random() < 0.3:
                pax = {"comment": "c" * rng.randint(1, 300)}
            out.append(Member(key + "." + e, rng.randbytes(rand_size(rng)), pax=pax))
        if rng.random() < bad:
            # a repeated field (same extension, another case of it, or the
            # first again after the others): the sample is bad
            e = rng.choice(exts)
            e = e.upper() if rng.random() < 0.5 else e
            out.append(Member(key + "." + e, rng.randbytes(rng.randint(0, 900))))
    return out


def _is_meta(name):
    return "/" not in name and len(name) >= 4 and name.startswith("__") and name.endswith("__")


def wds_model(members):
    """The good samples of the members by the WebDataset rule, in order:
    [(key, {field: bytes})]."""
    out = []
    cur_key, cur, cur_bad = None, None, False

    def flush():
        if cur_key is not None and not cur_bad:
            out.append((cur_key, cur))

    for m in members:
        if m.isdir or _is_meta(m.name):
            continue
        kx = wds_split(m.name)
        if kx is None:
            continue
        key, ext = kx
        if key == cur_key:
            if ext in cur:
                cur_bad = True
            else:
                cur[ext] = m.data
            continue
        flush()
        cur_key, cur, cur_bad = key, {ext: m.data}, False
    flush()
    return out


_FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT,
            "pax": tarfile.PAX_FORMAT}


def write_tar(path, members, fmt, gz=False):
    tmp = path + ".tmp"
    mode = "w:gz" if gz else "w"
    with tarfile.open(tmp, mode, format=_FORMATS[fmt]) as tf:
        for m in members:
            ti = tarfile.TarInfo(m.name)
            ti.mtime = 1700000000
            ti.uname = ti.gname = "u"
            if m.isdir:
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                tf.addfile(ti)
                continue
            ti.size = len(m.data)
            ti.mode = 0o644
            if m.pax:
                ti.pax_headers = dict(m.pax)
            tf.addfile(ti, io.BytesIO(m.data))
    os.replace(tmp, path)


def write_zip(path, members, rng):
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w") as zf:
        for m in members:
            if m.isdir:
                zf.writestr(zipfile.ZipInfo(m.name + "/", (2023, 1, 1, 0, 0, 0)), b"")
                continue
            zi = zipfile.ZipInfo(m.name, (2023, 1, 1, 0, 0, 0))
            zi.compress_type = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
            zf.writestr(zi, m.data)
    os.replace(tmp, path)


def member_fits(m, fmt):
    """ustar names must split into prefix (155) and name (100)."""
    if fmt != "ustar":
        return True
    try:
        ti = tarfile.TarInfo(m.name)
        ti.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")
        return True
    except ValueError:
        return False


class GenDataset:
    """A directory of shards written by make_random_dataset: `model` maps
    each shard's file name to its good samples [(key, fields)], `by_key`
    a key to (shard name, fields); `total` the number of good samples."""

    def __init__(self, path, model):
        self.path = path
        self.model = model
        self.by_key = {}
        for shard, samples in model.items():
            for k, f in samples:
                assert k not in self.by_key, "duplicate key %s" % k
                self.by_key[k] = (shard, f)
        self.total = len(self.by_key)

    def shard_paths(self):
        return [os.path.join(self.path, s) for s in sorted(self.model)]


def make_random_dataset(path, seed, plan, tag):
    """plan: list of (kind, nsamples) with kind ustar | gnu | pax | zip |
    targz | empty (a shard of skipped members only). Shard i is
    <tag>-<i:06d>.<ext>; keys start with <tag><i> so they are unique across
    shards and datasets."""
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    model = {}
    for i, (kind, n) in enumerate(plan):
        stag = "%s%d" % (tag, i)
        if kind == "empty":
            members = [Member("%s/dir" % stag, isdir=True),
                       Member("__only.meta__", b"m" * 10),
                       Member("%s/NOEXT" % stag, b"z" * 100)]
            ext, fmt = "tar", "ustar"
        else:
            fmt = {"zip": "pax", "targz": "pax"}.get(kind, kind)
            style = "short" if kind in ("zip", "targz") else kind
            members = [m for m in gen_members(rng, stag, n, style=style)
                       if member_fits(m, fmt)]
            ext = {"zip": "zip", "targz": "tar.gz"}.get(kind, "tar")
        name = "%s-%06d.%s" % (tag, i, ext)
        p = os.path.join(path, name)
        if kind == "zip":
            write_zip(p, members, rng)
        else:
            write_tar(p, members, fmt, gz=(kind == "targz"))
        model[name] = wds_model(members)
    return GenDataset(path, model)


def make_objects_dataset(path, seed, nsamples, tag="ob"):
    """A directory tree of small objects (docs/operations.md "Datasets of small
    objects"): <path>/<tag>/<group>/<i>.<ext> plus a README the rule
    skips. Returns {key relative to path: fields}."""
    rng = random.Random(seed)
    samples = {}
    for i in range(nsamples):
        key = "%s/g%d/o%05d" % (tag, i % 4, i)
        fields = {}
        for e in rng.sample(["jpg", "json", "cls"], rng.randint(1, 3)):
            fields[e] = rng.randbytes(rand_size(rng) // 4)
        for e, data in fields.items():
            p = os.path.join(path, key + "." + e)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
        samples[key] = fields
    with open(os.path.join(path, "README"), "wb") as f:
        f.write(b"objects\n")
    return samples


# -- raw HTTP -----------------------------------------------------------------

class RawResponse:
    """One GET over its own socket, HTTP/1.1 with Connection: close. The
    body is decoded here (chunked or by Content-Length); `complete` is
    whether it ended properly (the chunked terminator, or the whole
    Content-Length); a cut body keeps every byte received."""

    def __init__(self, host, port, path, token=None, rcvbuf=None, timeout=120):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        req = "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n" % (path, host, port)
        if token:
            req += "Authorization: Bearer %s\r\n" % token
        self.sock.sendall((req + "\r\n").encode())
        self.raw = bytearray()
        self.eof = False
        self.body = bytearray()
        self.complete = False
        self._pos = 0          # next undecoded byte of raw (body part)
        self._chunk_left = 0   # data bytes left in the current chunk
        self._state = "size"   # size | data | crlf | trailer | done
        while b"\r\n\r\n" not in self.raw:
            if not self._recv(65536):
                raise ConnectionError("connection closed before the headers: %r"
                                      % bytes(self.raw[:200]))
        head, _, _ = bytes(self.raw).partition(b"\r\n\r\n")
        self._pos = len(head) + 4
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.length = None if self.chunked else int(self.headers.get("content-length", "-1"))
        self._decode()

    def _recv(self, n):
        if self.eof:
            return 0
        try:
            d = self.sock.recv(n)
        except ConnectionResetError:
            d = b""
        if not d:
            self.eof = True
            return 0
        self.raw += d
        return len(d)

    def _decode(self):
        raw = self.raw
        if not self.chunked:
            self.body += raw[self._pos:]
            self._pos = len(raw)
            if self.length >= 0 and len(self.body) >= self.length:
                self.complete = len(self.body) == self.length
                self._state = "done"
            return
        try:
            self._decode_chunks(raw)
        finally:
            # keep raw small: drop what has been decoded
            del raw[:self._pos]
            self._pos = 0

    def _decode_chunks(self, raw):
        while self._state != "done":
            if self._state == "size":
                i = raw.find(b"\r\n", self._pos)
                if i < 0:
                    return
                n = int(bytes(raw[self._pos:i]).split(b";")[0], 16)
                self._pos = i + 2
                if n == 0:
                    self._state = "trailer"
                else:
                    self._chunk_left = n
                    self._state = "data"
            elif self._state == "data":
                take = min(self._chunk_left, len(raw) - self._pos)
                if take == 0:
                    return
                self.body += raw[self._pos:self._pos + take]
                self._pos += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._state = "crlf"
            elif self._state == "crlf":
                if len(raw) - self._pos < 2:
                    return
                assert raw[self._pos:self._pos + 2] == b"\r\n", "bad chunk end"
                self._pos += 2
                self._state = "size"
            elif self._state == "trailer":
                i = raw.find(b"\r\n", self._pos)
                if i < 0:
                    return
                line = raw[self._pos:i]
                self._pos = i + 2
                if not line:
                    self._state = "done"
                    self.complete = True

    def read_some(self, n=65536):
        """Read up to n more bytes from the socket; False at the end."""
        if self._state == "done" or self.eof:
            return False
        got = self._recv(n)
        self._decode()
        if self._state == "done":
            return False
        return got > 0

    def read_until(self, nbytes):
        while len(self.body) < nbytes and self.read_some():
            pass

    def read_all(self):
        while self.read_some(1 << 20):
            pass
        if self._state != "done":
            self._decode()
        return bytes(self.body)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def fetch(server, path, token=None, timeout=120):
    """(status, content type, body bytes, complete) of one GET."""
    r = RawResponse(server.host, server.port, path, token=token, timeout=timeout)
    try:
        body = r.read_all()
        return r.status, r.headers.get("content-type", ""), body, r.complete, r.headers
    finally:
        r.close()


# -- stream bodies ------------------------------------------------------------

class Parsed:
    def __init__(self):
        self.samples = []     # dicts: index, position, shard (URL), key, fields
        self.outcome = "cut"  # end | error | cut
        self.trailer = None
        self.header = None
        self.problem = None   # what did not parse

    def retryable_error(self):
        return self.outcome == "error" and bool(self.trailer and self.trailer.get("retryable"))

    def summary(self):
        return "%d samples, outcome %s, trailer %s%s" % (
            len(self.samples), self.outcome, json.dumps(self.trailer),
            ", problem: " + self.problem if self.problem else "")




def parse_frames(body):
    p = Parsed()
    if body[:4] != b"SCF1":
        p.problem = "no SCF1 magic"
        return p
    o = 4
    shards = {}
    while o + 8 <= len(body):
        t, flags, res, length = _FRAME.unpack_from(body, o)
        if o + 8 + length > len(body):
            p.problem = "frame cut at %d" % o
            return p
        pl = bytes(body[o + 8:o + 8 + length])
        o += 8 + length
        if t == 0x01:
            p.header = json.loads(pl)
        elif t == 0x02:
            (idx,) = struct.unpack_from("<I", pl, 0)
            shards[idx] = pl[4:].decode("utf-8", "replace")
        elif t == 0x03:
            index, position, shard, key, fields, _ = sample_payload(pl)
            p.samples.append({"index": index, "position": position,
                              "shard": shards.get(shard, "#%d" % shard),
                              "key": key, "fields": fields})
        elif t == 0x04:
            p.trailer, p.outcome = json.loads(pl), "end"
            break
        elif t == 0x05:
            p.trailer, p.outcome = json.loads(pl), "error"
            break
    if p.outcome == "cut" and o != len(body) and p.problem is None:
        p.problem = "frame cut at %d" % o
    return p


def _pax_records(data):
    out = {}
    o = 0
    while o < len(data):
        sp = data.index(b" ", o)
        n = int(data[o:sp])
        rec = data[sp + 1:o + n - 1]
        k, _, v = rec.partition(b"=")
        out[k.decode()] = v.decode("utf-8", "replace")
        o += n
    return out


def parse_tar(body):
    """A shardcast tar stream: members <G>/<key>.<ext>; the first member of
    a sample has pax records SHARDCAST.key / .shard / .index / .position."""
    p = Parsed()
    o = 0
    pax = None
    cur = None
    n = len(body)
    while True:
        if o + 512 > n:
            if o != n:
                p.problem = "cut inside a header at %d" % o
            return p
        hdr = bytes(body[o:o + 512])
        if hdr == b"\0" * 512:
            if p.outcome != "end":
                p.problem = "end blocks without __shardcast_end__"
            return p
        name = hdr[0:100].split(b"\0")[0].decode("utf-8", "replace")
        prefix = hdr[345:500].split(b"\0")[0].decode("utf-8", "replace")
        if prefix:
            name = prefix + "/" + name
        raw = hdr[124:136]
        if raw[0] & 0x80:
            size = int.from_bytes(raw[1:], "big")
        else:
            size = int(raw.strip(b"\0 ") or b"0", 8)
        tf = hdr[156:157]
        data = bytes(body[o + 512:o + 512 + size])
        if len(data) < size:
            p.problem = "cut inside member %s" % name
            return p
        o += 512 + (size + 511) // 512 * 512
        if tf == b"x":
            pax = _pax_records(data)
            continue
        if tf == b"g":
            # the stream's identity (fingerprint, replica): its header
            if p.samples or p.header is not None:
                p.problem = "a global header after the stream began"
                return p
            p.header = _pax_records(data)
            continue
        if pax and "path" in pax:
            name = pax["path"]
        recs, pax = pax or {}, None
        if name == "__shardcast_end__":
            p.trailer, p.outcome = json.loads(data), "end"
            continue
        if name == "__shardcast_error__":
            p.trailer, p.outcome = json.loads(data), "error"
            return p
        g, _, rest = name.partition("/")
        if "SHARDCAST.key" in recs:
            cur = {"index": int(recs.get("SHARDCAST.index", g)),
                   "position": int(recs.get("SHARDCAST.position", -1)),
                   "shard": recs.get("SHARDCAST.shard"),
                   "key": recs["SHARDCAST.key"], "fields": {}, "_g": g}
            p.samples.append(cur)
        if cur is None or cur["_g"] != g:
            p.problem = "member %s outside a sample" % name
            return p
        last = rest.rsplit("/", 1)[-1]
        cur["fields"][last.partition(".")[2]] = data


def parse_body(fmt, body):
    return parse_frames(body) if fmt == "frames" else parse_tar(body)


def stream_query(job, epoch, rank, world, fmt, start=None, global_start=None,
                 fields=None):
    q = "rank=%d&world=%d&format=%s" % (rank, world, fmt)
    if start is not None:
        q += "&start=%d" % start
    if global_start is not None:
        q += "&global_start=%d" % global_start
    if fields is not None:
        q += "&fields=" + ",".join(fields)
    return "/v1/jobs/%s/epochs/%d/stream?%s" % (job, epoch, q)


def read_world_failing(srv, epoch, world, fmt="frames", job="t", what="",
                       timeout=180):
    """Every rank of a world read at once to the end of its body, which
    may be an error trailer: (status, complete, parsed body or the raw
    body when the status is not 200) in rank order."""
    out = [None] * world

    def one(r):
        st, _, body, complete, _ = fetch(srv, stream_query(job, epoch, r, world, fmt))
        out[r] = (st, complete, parse_body(fmt, body) if st == 200 else body)

    ts = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
        assert not t.is_alive(), "%s epoch %d: a consumer still reads" % (
            what, epoch)
    return out


def read_world(srv, epoch, world, fmt="frames", job="t", what="",
               timeout=180):
    """Every rank of a world read at once, each stream to its END: the
    parsed bodies in rank order. what names the case in failures."""
    out = []
    for r, (st, complete, p) in enumerate(read_world_failing(
            srv, epoch, world, fmt, job, what, timeout)):
        assert st == 200 and complete, "%s epoch %d rank %d: %s %s" % (
            what, epoch, r, st, p.summary() if st == 200 else repr(p[-400:]))
        assert p.outcome == "end", "%s epoch %d rank %d: %s" % (
            what, epoch, r, p.summary())
        out.append(p)
    return out


def keys_fields(p):
    """A parsed body's samples as (key, fields) pairs."""
    return [(s["key"], s["fields"]) for s in p.samples]


def wait_until(pred, timeout, what, interval=0.05):
    """Poll pred() until it returns a true value; fail naming `what`."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def wait_indexed(server, job, total, timeout=60):
    """Until the job's status knows an epoch's exact length (docs/operations.md: once
    every shard is indexed; status refreshes it every second): from then
    on an epoch opened can be planned."""
    import http.client

    def known():
        conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
        try:
            conn.request("GET", "/v1/jobs/" + job)
            st = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        return any(e.get("samples_total") == total for e in st.get("epochs", []))

    wait_until(known, timeout, "job %s's shards to be indexed (samples_total %d)"
               % (job, total), interval=0.1)
