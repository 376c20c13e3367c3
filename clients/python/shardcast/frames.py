"""Reading the `frames` wire format (format=frames, version 1).

The format, all integers little-endian:

    stream  = b"SCF1" frame*
    frame   = u8 type, u8 flags (0), u16 reserved (0), u32 payload length L,
              L payload bytes
    0x01 HEADER  (first frame, exactly once) UTF-8 JSON {"version": 1, "job",
                 "epoch", "rank", "world", "start", "global_start",
                 "partition", "fields"}; a server with replica
                 fingerprints adds "fingerprint", "replica" (the part
                 served), "replicas" and "served_by"
    0x02 SHARD   u32 shard index, shard URL (rest of the payload, UTF-8);
                 sent before the first SAMPLE that refers to the shard
    0x03 SAMPLE  u64 global index, u64 position in the share, u32 shard
                 index, u16 key length, u16 field count, key bytes, then per
                 field: u16 name length, u32 data length, name, data
    0x04 END     JSON {"status": "ok", "epoch", "rank", "world", "start",
                 "samples", "position"}: the last frame of a complete share;
                 the HTTP body then ends normally
    0x05 ERROR   JSON {"status": "error", "reason", "retryable",
                 "retry_after_ms"}: the last frame of a failed share; the
                 connection is then closed. retryable: come back after
                 retry_after_ms and resume (see stream.error_from_trailer)
    types >= 0x80 are extensions a reader skips; other unknown types are
    errors. A body that ends without END or ERROR is a cut stream.

The reader is built for throughput: the body (chunked framing decoded by
stream._RawBody) is received with recv_into into one reused bytearray,
frames are parsed in place through a memoryview, and the only copies are
the `bytes` objects handed to the caller (one per field). The buffer is
compacted only when a frame does not fit in what is left of it, and grown
(up to max_frame) only for a frame larger than it. There is no per-byte
Python loop.

Two decoders sit behind the same reader and pass the same tests: the pure
Python one below, and the optional C accelerator shardcast._frames (a
CPython extension over libshardio's sio_framer, the C client's decoder; see
_accel.py), used when it is built and found. The C decoder makes a run of
samples per call; the checks against the request and the END/tail checks
stay here for both. One FramesReader owns one HTTP connection and is used
by one thread.
"""

import json
import os
import struct
import urllib.parse

from .errors import (ShardcastError, ShardcastIncompleteError, ShardcastProtocolError,
                     ShardcastStreamError)
from . import _accel
from .replicas import ident_from_header
from .stream import FRAMES_CONTENT_TYPE, _RawBody, error_from_trailer, open_raw

MAGIC = b"SCF1"
VERSION = 1

HEADER = 0x01
SHARD = 0x02
SAMPLE = 0x03
END = 0x04
ERROR = 0x05
# Frame types from this value up are extensions: skipped, never an error.
EXTENSION_MIN = 0x80
# KEEPALIVE (an extension frame, no payload): a server that announces
# heartbeat_ms in HEADER sends one at least that often while it has
# nothing else to send. Its bytes reset the reader's silence bound.
KEEPALIVE = 0x80
# Largest heartbeat_ms taken from a HEADER (SIO_FRAMES_HEARTBEAT_MAX_MS).
MAX_HEARTBEAT_MS = 600000

# Largest payload length a reader accepts (the format's limit, 2^31 - 1): a
# corrupt length can never make the reader buffer more than this.
MAX_FRAME = (1 << 31) - 1
# HEADER, END and ERROR are small JSON objects.
MAX_JSON_FRAME = 64 * 1024
# Distinct shards one stream may announce: bounds the shard-URL table even
# against a server that announces shards without end.
MAX_SHARDS = 1 << 22
# Size of the receive buffer: large reads keep the per-call Python overhead
# small next to the bytes moved.
READ_SIZE = 1 << 20
# Samples the C decoder makes per call before handing them out.
C_BATCH = 64
DECODERS = ("auto", "python", "c")


def accelerator():
    """The C accelerator module (shardcast._frames), or None when it is not
    built, not found or turned off with SHARDCAST_ACCEL=0 (SHARDCAST_ACCEL=1
    makes readers with decoder="auto" require it)."""
    return _accel.load()
# Bytes the reader reads after END looking for unexpected data.
MAX_TAIL = 1 << 16

_FRAME = struct.Struct("<BBHI")          # type, flags, reserved, length
_SAMPLE = struct.Struct("<QQIHH")        # index, position, shard, key len, fields
_FIELD = struct.Struct("<HI")            # name length, data length
_U32 = struct.Struct("<I")
_FRAME_SIZE = _FRAME.size
_SAMPLE_SIZE = _SAMPLE.size
_FIELD_SIZE = _FIELD.size

_NAMES = {HEADER: "HEADER", SHARD: "SHARD", SAMPLE: "SAMPLE", END: "END", ERROR: "ERROR"}


class FramesReader:
    """Iterate over the samples of one stream URL requested with
    format=frames (see stream_url(..., fmt="frames")).

    Each sample is a dict {"__key__": original key, "__url__": shard URL,
    "__shard__": the same (an alias kept for one release),
    "__index__": global index (int), "__position__": position in the share
    (int), "__source__": a mixed job's source name (only for mixed jobs),
    "<ext>": bytes, ...} with the fields in shard order. Iteration
    raises ShardcastHTTPError, ShardcastConnectionError,
    ShardcastStreamError (an ERROR frame: the server's reason),
    ShardcastIncompleteError (the body ended or broke before END) or
    ShardcastProtocolError (malformed frames); it ends normally only after
    END was read, checked against what arrived, and the body ended cleanly.

    Attributes: header (the HEADER JSON, once read), trailer (the END JSON,
    after a complete iteration), samples_received, position (the position
    after the last sample received: where a resumed request would start),
    bytes_read (body bytes, once the iteration has ended).
    Iterable once; close() (or the context manager) drops the connection.

    decoder: "auto" (the C accelerator when available, else Python),
    "python" or "c" (ShardcastError when the accelerator is not available);
    `accelerated` says which one the reader uses.

    The stream's identity (HEADER keys fingerprint / replica / replicas /
    served_by, see shardcast.replicas) is in `ident` once the HEADER is
    read, None from a server that sends none; check_ident(ident) is called
    with it (also with None) before any sample is handed out, and may
    raise.
    """

    def __init__(self, url, *, timeout=60.0, headers=None, max_frame=MAX_FRAME,
                 read_size=READ_SIZE, decoder="auto", check_ident=None,
                 header_timeout=None, heartbeat_timeout=None, connection=None):
        if not 0 < max_frame <= MAX_FRAME:
            raise ValueError("max_frame must be within 1..%d" % MAX_FRAME)
        if decoder not in DECODERS:
            raise ValueError("decoder must be one of %s, not %r" % (DECODERS, decoder))
        if decoder == "auto" and os.environ.get("SHARDCAST_ACCEL", "") == "1":
            decoder = "c"
        self._c = accelerator() if decoder != "python" else None
        if decoder == "c" and self._c is None:
            raise ShardcastError("the C frames decoder (shardcast._frames) is not "
                                 "available: build it with CMake (python3-dev)")
        self.accelerated = self._c is not None
        self.url = url
        self._conn = connection  # kept by the caller (stream.connection_for)
        self.timeout = timeout
        self.header_timeout = header_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.heartbeat_ms = None  # what the HEADER announced
        self._body = None
        self._peeked_heartbeat = None
        self.headers = headers
        self.max_frame = max_frame
        self.read_size = read_size
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        self._expect = {}
        for name in ("rank", "world", "start", "global_start"):
            if name in q:
                try:
                    self._expect[name] = int(q[name][-1])
                except ValueError:
                    pass  # the server will reject the request itself
        self.header = None
        self.ident = None
        self.check_ident = check_ident
        self._peeked_ident = None
        self._sources = None
        self.trailer = None
        self.samples_received = 0
        self.bytes_read = 0  # body bytes read, once the iteration has ended
        self.position = self._expect.get("start", 0)
        self._resp = None
        self._used = False

    def close(self):
        """Close the connection (idempotent). A connection the caller keeps
        (connection=) stays open for its next request when the body was
        read to its clean end; otherwise it is closed too."""
        if self._resp is not None:
            self._resp.close()
            self._resp = None
            if self._conn is not None and not (
                    self._body is not None and self._body.done and
                    self._body.failure is None):
                self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        if self._used:
            raise ShardcastError("a FramesReader can be iterated only once")
        self._used = True
        return self._samples()

    # -- errors --------------------------------------------------------------

    def _bad(self, what):
        return ShardcastProtocolError("stream %s: %s" % (self.url, what))

    def _cut(self, body, what):
        if body.failure is not None:
            return body.failure
        return ShardcastIncompleteError(
            "stream %s ended after %d bytes %s without an END frame: the share is "
            "incomplete" % (self.url, body.nread, what))

    # -- parsing -------------------------------------------------------------

    def _samples(self):
        try:
            self._resp = open_raw(self.url, timeout=self.timeout, headers=self.headers,
                                  content_type=FRAMES_CONTENT_TYPE,
                                  header_timeout=self.header_timeout, conn=self._conn)
            body = self._body = _RawBody(self._resp, self.url)
            try:
                if self._c is not None:
                    yield from self._parse_c(body)
                else:
                    yield from self._parse(body)
            finally:
                self.bytes_read = body.nread
        finally:
            self.close()

    def _json(self, buf, p, end, ftype):
        if end - p > MAX_JSON_FRAME:
            raise self._bad("%s frame of %d bytes is over the limit of %d"
                            % (_NAMES[ftype], end - p, MAX_JSON_FRAME))
        try:
            obj = json.loads(bytes(buf[p:end]).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise self._bad("%s frame is not JSON: %r" % (_NAMES[ftype], bytes(buf[p:end][:200]))) \
                from e
        if not isinstance(obj, dict):
            raise self._bad("%s frame is not a JSON object" % _NAMES[ftype])
        return obj

    def _check_header(self, h):
        sources = h.get("sources")
        if sources is not None:
            # A mixed job: a sample's source is the one whose part of the
            # shard list holds its shard index.
            try:
                self._sources = [(int(x["first"]), int(x["count"]), str(x["name"]))
                                 for x in sources]
            except (TypeError, KeyError, ValueError) as e:
                raise self._bad("HEADER has bad sources %r" % (sources,)) from e
        if h.get("version") != VERSION:
            raise self._bad("unsupported frames version %r (this client reads %d)"
                            % (h.get("version"), VERSION))
        for name, want in self._expect.items():
            got = h.get(name)
            if got is not None and got != want:
                raise self._bad("HEADER says %s=%r, the request asked for %r"
                                % (name, got, want))
        start = h.get("start", self.position)
        if not isinstance(start, int) or start < 0:
            raise self._bad("HEADER has a bad start %r" % (start,))
        self.position = start
        hb = h.get("heartbeat_ms", self._peeked_heartbeat)
        if isinstance(hb, int) and not isinstance(hb, bool) and 0 < hb <= MAX_HEARTBEAT_MS:
            self.heartbeat_ms = hb
            if self.heartbeat_timeout is not None and self._body is not None:
                # A few heartbeats missed: the server is hung. Never less
                # than two of its intervals, never more than timeout.
                self._body.set_silence(min(self.timeout,
                                           max(self.heartbeat_timeout, 2.0 * hb / 1000.0)))
        self.ident = ident_from_header(h)
        if self.ident is None:
            # The C decoder's HEADER (an accelerator built before these
            # keys) may lack them: take them from the HEADER's own JSON.
            self.ident = self._peeked_ident
        if self.check_ident is not None:
            self.check_ident(self.ident)

    def _check_end(self, t):
        if t.get("status") != "ok":
            reason = str(t.get("reason", t.get("status")))
            raise ShardcastStreamError("stream %s ended with status %r: %s"
                                       % (self.url, t.get("status"), reason), reason=reason)
        if t.get("samples") != self.samples_received:
            raise self._bad("END says %r samples, received %d"
                            % (t.get("samples"), self.samples_received))
        if t.get("position") != self.position:
            raise self._bad("END says position %r, the samples received end at %d"
                            % (t.get("position"), self.position))

    def _parse(self, body):
        cap = max(self.read_size, 64)
        buf = bytearray(cap)
        mv = memoryview(buf)
        pos = 0              # start of the first unparsed byte in buf
        fill = 0             # end of the bytes received into buf
        need = len(MAGIC)    # bytes that must be buffered from pos to go on
        seen_magic = False
        shards = {}          # shard index -> URL
        max_frame = self.max_frame
        unpack_frame = _FRAME.unpack_from
        while True:
            # Receive until `need` bytes are buffered from pos. The unparsed
            # bytes move to the front only when the frame would not fit in
            # the rest of the buffer; a larger buffer is made only for a
            # frame larger than the whole buffer.
            if fill - pos < need:
                if cap - pos < need:
                    n = fill - pos
                    if need > cap:
                        cap = max(need, min(cap * 2, max_frame + _FRAME_SIZE))
                        nbuf = bytearray(cap)
                        nbuf[:n] = mv[pos:fill]
                        mv.release()
                        buf, mv = nbuf, memoryview(nbuf)
                    else:
                        mv[:n] = mv[pos:fill]
                    pos, fill = 0, n
                while fill - pos < need:
                    got = body.readinto(mv[fill:])
                    if not got:
                        if self.header is None:
                            raise self._cut(body, "before the HEADER frame")
                        raise self._cut(body, "(%d samples)" % self.samples_received)
                    fill += got
            if not seen_magic:
                if bytes(mv[pos:pos + 4]) != MAGIC:
                    raise self._bad("does not start with the frames magic %r (got %r)"
                                    % (MAGIC, bytes(mv[pos:pos + 4])))
                seen_magic = True
                pos += 4
                need = _FRAME_SIZE
                continue
            ftype, flags, reserved, length = unpack_frame(buf, pos)
            if length > max_frame:
                raise self._bad("frame of type 0x%02x has length %d, over the limit of %d"
                                % (ftype, length, max_frame))
            if fill - pos < _FRAME_SIZE + length:
                need = _FRAME_SIZE + length
                continue
            p = pos + _FRAME_SIZE
            end = p + length
            pos = end
            need = _FRAME_SIZE
            if ftype >= EXTENSION_MIN:
                continue
            if flags or reserved:
                raise self._bad("frame of type 0x%02x has flags %d / reserved %d (want 0)"
                                % (ftype, flags, reserved))
            if ftype == SAMPLE:
                if self.header is None:
                    raise self._bad("SAMPLE frame before the HEADER frame")
                sample = self._sample(buf, mv, p, end, shards)
                self.samples_received += 1
                self.position += 1
                yield sample
            elif ftype == SHARD:
                if length < 4:
                    raise self._bad("SHARD frame of %d bytes" % length)
                (idx,) = _U32.unpack_from(buf, p)
                if idx not in shards and len(shards) >= MAX_SHARDS:
                    raise self._bad("more than %d shards announced" % MAX_SHARDS)
                try:
                    shards[idx] = str(mv[p + 4:end], "utf-8")
                except UnicodeDecodeError as e:
                    raise self._bad("SHARD %d URL is not UTF-8" % idx) from e
            elif ftype == HEADER:
                if self.header is not None:
                    raise self._bad("a second HEADER frame")
                h = self._json(buf, p, end, ftype)
                self._check_header(h)
                self.header = h
            elif ftype == END:
                if self.header is None:
                    raise self._bad("END frame before the HEADER frame")
                t = self._json(buf, p, end, ftype)
                self.trailer = t
                self._check_end(t)
                self._check_tail(body, fill - pos, mv)
                return
            elif ftype == ERROR:
                info = self._json(buf, p, end, ftype)
                raise error_from_trailer(self.url, info, self._bad)
            else:
                raise self._bad("unknown frame type 0x%02x" % ftype)
            if self.header is None:
                raise self._bad("the first frame is not a HEADER frame")

    def _parse_c(self, body):
        """The same stream decoded by the C accelerator: it receives into one
        reused buffer and hands every byte to the decoder, which keeps a
        frame cut by the end of the buffer itself."""
        framer = self._c.Framer(self.max_frame)
        feed = framer.feed
        frames_error = self._c.FramesError
        # The magic and HEADER frame, read ahead, go to the decoder first;
        # then the body is received into one reused buffer.
        head = self._peek_header(body)
        big = bytearray(max(self.read_size, 64))
        big_mv = memoryview(big)
        while True:
            if head:
                buf, n, head = head, len(head), None
                mv = memoryview(buf)
            else:
                buf, mv = big, big_mv
                n = body.readinto(mv)
            if not n:
                if self.header is None:
                    raise self._cut(body, "before the HEADER frame")
                raise self._cut(body, "(%d samples)" % self.samples_received)
            p = 0
            while p < n:
                try:
                    used, samples, event, value = feed(buf, p, n, C_BATCH)
                except frames_error as e:
                    raise self._bad(str(e)) from None
                p += used
                if samples:
                    if self.header is None:  # the decoder checks this itself
                        raise self._bad("SAMPLE frame before the HEADER frame")
                    for sample in samples:
                        self.samples_received += 1
                        self.position += 1
                        yield sample
                if event is None:
                    continue
                if event == "header":
                    self._check_header(value)
                    self.header = value
                elif event == "end":
                    self.trailer = value
                    self._check_end(value)
                    self._check_tail(body, n - p, mv)
                    return
                else:
                    raise error_from_trailer(self.url, value, self._bad)

    def _peek_header(self, body):
        """For the C decoder: read the magic and the HEADER frame (only
        those bytes), keep the identity keys of its JSON (see _check_header)
        and return the bytes read, which the decoder is then fed first."""
        head = bytearray()
        need = len(MAGIC) + _FRAME_SIZE
        while len(head) < need:
            chunk = bytearray(need - len(head))
            got = body.readinto(memoryview(chunk))
            if not got:
                return head
            head += chunk[:got]
            if len(head) == len(MAGIC) + _FRAME_SIZE == need:
                if bytes(head[:len(MAGIC)]) != MAGIC:
                    return head
                ftype, _, _, length = _FRAME.unpack_from(head, len(MAGIC))
                if ftype != HEADER or length > MAX_JSON_FRAME:
                    return head
                need += length
        try:
            h = json.loads(bytes(head[len(MAGIC) + _FRAME_SIZE:]).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return head  # the decoder reports it
        if isinstance(h, dict):
            self._peeked_ident = ident_from_header(h)
            self._peeked_heartbeat = h.get("heartbeat_ms")
        return head

    def _sample(self, buf, mv, p, end, shards):
        if end - p < _SAMPLE_SIZE:
            raise self._bad("SAMPLE frame of %d bytes" % (end - p))
        index, position, shard, klen, nfields = _SAMPLE.unpack_from(buf, p)
        if position != self.position:
            raise self._bad("SAMPLE at position %d, expected %d" % (position, self.position))
        url = shards.get(shard)
        if url is None:
            raise self._bad("SAMPLE refers to shard %d before its SHARD frame" % shard)
        o = p + _SAMPLE_SIZE
        if o + klen > end:
            raise self._bad("SAMPLE key runs past the frame")
        unpack_field = _FIELD.unpack_from
        try:
            key = str(mv[o:o + klen], "utf-8")
        except UnicodeDecodeError as e:
            raise self._bad("SAMPLE key is not UTF-8") from e
        o += klen
        sample = {"__key__": key, "__url__": url, "__shard__": url, "__index__": index,
                  "__position__": position}
        if self._sources:
            for first, count, name in self._sources:
                if first <= shard < first + count:
                    sample["__source__"] = name
                    break
        for _ in range(nfields):
            if o + _FIELD_SIZE > end:
                raise self._bad("SAMPLE %r: field header runs past the frame" % key)
            nlen, dlen = unpack_field(buf, o)
            o += _FIELD_SIZE
            d = o + nlen
            o = d + dlen
            if o > end:
                raise self._bad("SAMPLE %r: field runs past the frame" % key)
            try:
                name = str(mv[d - nlen:d], "utf-8")
            except UnicodeDecodeError as e:
                raise self._bad("SAMPLE %r: field name is not UTF-8" % key) from e
            if not name or name in sample:
                raise self._bad("SAMPLE %r: empty or repeated field %r" % (key, name))
            sample[name] = bytes(mv[d:o])
        if o != end:
            raise self._bad("SAMPLE %r: %d bytes after the last field" % (key, end - o))
        return sample

    def _check_tail(self, body, buffered, mv):
        """After END the body must end: anything more means the END frame
        itself may belong to a broken response."""
        extra = buffered or body.readinto(mv[:MAX_TAIL])
        if extra:
            raise self._bad("%d bytes after the END frame" % extra)
