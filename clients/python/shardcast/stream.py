"""Reading one consumer's stream from a shardcast server.

Wire format (the `tar` format of GET /v1/jobs/{job}/epochs/{epoch}/stream):
a ustar stream in which sample number G (its global index in the epoch)
is sent as members "<G as 12 digits>/<key>.<ext>", the first of them
preceded by a pax header with SHARDCAST.key / .shard / .index / .position.
A complete share ends with a member "__shardcast_end__" (JSON trailer), two
zero blocks and the chunked terminator. An error after the 200 status is a
member "__shardcast_error__" (JSON with a reason) followed by a closed
connection. Before streaming, errors are 4xx/5xx with a body
"error: <reason>\\n".

The error trailer (both formats) is {"status": "error", "reason": ...,
"retryable": bool, "retry_after_ms": N}: retryable means the server asks
the consumer to come back after N ms and resume where it stopped (a drain
before a restart); a trailer without "retryable" (an older server) is
final. error_from_trailer() turns it into a ShardcastStreamError.

The `frames` format is read by shardcast/frames.py; stream_url() and
open_raw() here serve both formats. This module only uses the standard
library (http.client, tarfile). One StreamReader owns one HTTP connection
and is used by one thread.
"""

import http.client
import json
import socket
import tarfile
import urllib.parse

from . import __version__
from .errors import (ShardcastConnectionError, ShardcastError, ShardcastHTTPError,
                     ShardcastIncompleteError, ShardcastProtocolError,
                     ShardcastStreamError)
from .replicas import ident_from_pax

END_MEMBER = "__shardcast_end__"
ERROR_MEMBER = "__shardcast_error__"

# Largest tar member the reader accepts by default; matches the server's
# default per-member limit (libshardio SIO_MEMBER_MAX_DEFAULT, 1 GiB), so a
# corrupt size field cannot make the client allocate without bound.
DEFAULT_MAX_MEMBER = 1 << 30
# The trailer and error members are small JSON objects.
MAX_TRAILER = 64 * 1024
# How much of an error body is read to find the `error:` line.
MAX_ERROR_BODY = 4096
# Bytes the server may send after the tar end blocks (zero padding only).
MAX_TAIL = 1 << 20
# Width of the global-index directory in member names.
INDEX_DIGITS = 12
# The longest retry advice honoured, seconds (libshardio's
# SIO_RETRY_AFTER_MAX_MS): a corrupt or hostile value must not park a
# consumer.
MAX_RETRY_AFTER = 600.0

# Wire formats of the stream endpoint and their Content-Types.
TAR_CONTENT_TYPE = "application/x-tar"
FRAMES_CONTENT_TYPE = "application/x-shardcast-frames"
FORMATS = ("frames", "tar")


def stream_url(base_url, job, epoch, rank, world, *, start=None, fields=None,
               fmt=None, global_start=None, replica=None):
    """Build the URL of consumer `rank` of `world` for one epoch of a job.

    base_url is the server's root (e.g. "http://127.0.0.1:8080", possibly
    with a path prefix); job is URL-quoted; fields is a list of extensions
    or a comma-separated string; start is a resume position in the share;
    fmt is "tar" or "frames" (None: the server's default, tar);
    global_start is the global cursor an elastic resume deals from (the
    share of consumer rank is then Y[global_start + rank + world * p]);
    replica asks the server at base_url for replica J's part of the epoch
    (failover: rank and world are then the local rank and world within
    part J, as replica J itself would serve them).
    """
    for name, v in (("epoch", epoch), ("rank", rank), ("world", world)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError("%s must be a non-negative int, not %r" % (name, v))
    if world < 1 or rank >= world:
        raise ValueError("need 0 <= rank < world, got rank=%d world=%d" % (rank, world))
    query = [("rank", str(rank)), ("world", str(world))]
    if start is not None:
        if not isinstance(start, int) or start < 0:
            raise ValueError("start must be a non-negative int, not %r" % (start,))
        query.append(("start", str(start)))
    if global_start is not None:
        if not isinstance(global_start, int) or isinstance(global_start, bool) \
                or global_start < 0:
            raise ValueError("global_start must be a non-negative int, not %r"
                             % (global_start,))
        query.append(("global_start", str(global_start)))
    if replica is not None:
        if not isinstance(replica, int) or isinstance(replica, bool) or replica < 0:
            raise ValueError("replica must be a non-negative int, not %r" % (replica,))
        query.append(("replica", str(replica)))
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError("format must be one of %s, not %r" % (FORMATS, fmt))
        query.append(("format", fmt))
    if fields is not None:
        query.append(("fields", ",".join(normalize_fields(fields))))
    return "%s/v1/jobs/%s/epochs/%d/stream?%s" % (
        base_url.rstrip("/"), urllib.parse.quote(job, safe=""), epoch,
        urllib.parse.urlencode(query, safe=","))


def normalize_fields(fields):
    """A list of field names from a list/tuple or a comma-separated string."""
    if isinstance(fields, str):
        fields = fields.split(",")
    out = [f.strip() for f in fields]
    if not out or any(not f or "," in f for f in out):
        raise ValueError("fields must be non-empty names without commas: %r" % (fields,))
    return out


def _error_line(body):
    """The reason from an `error: <reason>` body (else the body's first
    line, shortened, as some proxy may have answered), or None."""
    text = body.decode("utf-8", "replace").strip()
    first = text.splitlines()[0] if text else ""
    if first.startswith("error:"):
        return first[len("error:"):].strip()
    return first[:200] or None


def _retry_after_header(value):
    """Seconds of a Retry-After header in delay-seconds form, else None
    (an HTTP-date is ignored: the client's own backoff applies)."""
    if value is None:
        return None
    value = value.strip()
    if not value.isdigit():
        return None
    return min(float(int(value)), MAX_RETRY_AFTER)


def error_from_trailer(url, info, bad):
    """The ShardcastStreamError of an error trailer (a dict). bad(text)
    builds the ShardcastProtocolError raised for malformed retry fields."""
    reason = str(info.get("reason", "unspecified error"))
    retryable = info.get("retryable", False)
    if not isinstance(retryable, bool):
        raise bad("error trailer: retryable is not a boolean: %r" % (retryable,))
    after = info.get("retry_after_ms")
    if after is not None and (not isinstance(after, int) or isinstance(after, bool)
                              or after < 0):
        raise bad("error trailer: retry_after_ms is not a non-negative integer: %r"
                  % (after,))
    retry_after = min(after / 1000.0, MAX_RETRY_AFTER) \
        if retryable and after is not None else None
    return ShardcastStreamError(
        "shardcast server aborted stream %s: %s%s"
        % (url, reason, " (retryable)" if retryable else ""),
        reason=reason, retryable=retryable, retry_after=retry_after)


def connection_for(url, timeout=60.0):
    """A new HTTP(S) connection to the server of url (nothing is sent yet),
    for open_raw(..., conn=) to keep between requests."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "http":
        conn_cls = http.client.HTTPConnection
    elif parts.scheme == "https":
        conn_cls = http.client.HTTPSConnection
    else:
        raise ValueError("unsupported URL scheme %r in %s" % (parts.scheme, url))
    if not parts.hostname:
        raise ValueError("no host in URL %s" % url)
    return conn_cls(parts.hostname, parts.port, timeout=timeout)


def open_raw(url, *, timeout=60.0, headers=None, content_type=TAR_CONTENT_TYPE,
             header_timeout=None, conn=None):
    """GET a stream URL and return the http.client.HTTPResponse positioned
    at the start of the body (for the tar format e.g. for
    tarfile.open(fileobj=r, mode="r|")).

    Raises ShardcastConnectionError when the server cannot be reached and
    ShardcastHTTPError (with the server's reason) on any status but 200.
    The caller closes the response (closing it closes the connection).
    timeout bounds each socket operation, not the whole stream;
    header_timeout (seconds, None: timeout) bounds the connect and the wait
    for the response headers (a process that is stopped or hung still
    accepts connections into the kernel's backlog, so only this wait sees
    it), each at most timeout.
    content_type is the Content-Type the body must have (TAR_CONTENT_TYPE
    or FRAMES_CONTENT_TYPE); any other raises ShardcastProtocolError.
    conn (connection_for(url)) is a connection to keep: the request goes
    over it, on the socket of its last request when the server kept that
    one alive (a socket the server closed meanwhile is replaced once),
    and on a failure it is closed (its next request connects again). The
    caller then reads the whole body before the next request on it.
    """
    parts = urllib.parse.urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    hdrs = {"Accept": content_type,
            "User-Agent": "shardcast-python/%s" % __version__}
    if headers:
        hdrs.update(headers)
    first = timeout if header_timeout is None else min(timeout, header_timeout)
    if conn is None:
        conn = connection_for(url, first)
    else:
        conn.timeout = first
        if conn.sock is not None:
            try:
                conn.sock.settimeout(first)
            except OSError:
                conn.close()
    sock = None
    try:
        for attempt in (0, 1):
            reused = conn.sock is not None
            try:
                conn.request("GET", path, headers=hdrs)
                sock = conn.sock
                resp = conn.getresponse()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError):
                # A kept socket the server closed while it was idle: the
                # request again, on a new connection (a GET, once).
                conn.close()
                if not reused or attempt:
                    raise
    except socket.timeout as e:
        conn.close()
        raise ShardcastConnectionError(
            "shardcast server at %s did not %s within %.1f s (header_timeout): the "
            "server or its host is hung or unreachable"
            % (parts.netloc, "answer" if sock is not None else "accept the connection",
               first)) from e
    except (OSError, http.client.HTTPException) as e:
        conn.close()
        raise ShardcastConnectionError(
            "cannot reach shardcast server at %s: %s" % (parts.netloc, e)) from e
    if sock is not None and first != timeout:
        try:
            sock.settimeout(timeout)  # the body: each read within timeout
        except OSError:
            pass
    resp.shardcast_sock = sock
    if resp.status != 200:
        try:
            body = resp.read(MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            body = b""
        finally:
            resp.close()
            conn.close()
        reason = _error_line(body) or resp.reason
        raise ShardcastHTTPError("shardcast server answered HTTP %d for %s: %s"
                                 % (resp.status, url, reason),
                                 status=resp.status, reason=reason, url=url,
                                 retry_after=_retry_after_header(
                                     resp.getheader("Retry-After")))
    ctype = resp.getheader("Content-Type", "")
    if ctype.split(";")[0].strip() != content_type:
        resp.close()
        conn.close()
        raise ShardcastProtocolError("%s: expected Content-Type %s, got %r"
                                     % (url, content_type, ctype))
    # The response holds its own reference to the socket; closing the
    # response closes the connection.
    return resp


class _BodyReader:
    """File-like view of an HTTP body for tarfile's stream mode.

    read(n) returns what is available (up to n bytes) instead of waiting for
    exactly n, so the bytes of a final error member are not lost when the
    server closes the connection right after them. Transport failures
    (a cut chunked body, reset, timeout) are remembered in `failure` and
    raised as ShardcastIncompleteError; tarfile passes them through.
    """

    def __init__(self, resp, url):
        self.resp = resp
        self.url = url
        self.failure = None
        self.nread = 0

    def read(self, n=-1):
        if self.failure is not None:
            raise self.failure
        try:
            data = self.resp.read1(n if n is not None and n >= 0 else 65536)
        except http.client.IncompleteRead as e:
            self.failure = ShardcastIncompleteError(
                "stream %s was cut after %d bytes (connection closed mid-body)"
                % (self.url, self.nread + len(e.partial)))
            raise self.failure from e
        except socket.timeout as e:
            self.failure = ShardcastIncompleteError(
                "stream %s timed out after %d bytes" % (self.url, self.nread))
            raise self.failure from e
        except (OSError, http.client.HTTPException) as e:
            self.failure = ShardcastIncompleteError(
                "stream %s broke after %d bytes: %s" % (self.url, self.nread, e))
            raise self.failure from e
        self.nread += len(data)
        return data


# Longest chunk-size line (hex size, extensions, CRLF) and trailer line of a
# chunked body the raw reader accepts.
MAX_CHUNK_LINE = 4096
# Trailer lines after the last chunk the raw reader reads before it gives up.
MAX_TRAILER_LINES = 64


class _RawBody:
    """The body of an HTTP response read with readinto() into the caller's
    buffer: the chunked framing is decoded here, and chunk data goes from
    the socket straight into that buffer (io.BufferedReader.readinto1 does
    one recv_into for large requests), with no bytes object per read.

    readinto(mv) returns the bytes stored (> 0), or 0 at the clean end of
    the body; like _BodyReader.read it returns what is available instead of
    waiting for len(mv) bytes. Failures are remembered in `failure` and
    raised as ShardcastIncompleteError. Takes over the response's file: the
    response itself must not be read from afterwards.
    """

    def __init__(self, resp, url):
        self.fp = resp.fp
        self.url = url
        self.chunked = resp.chunked
        self.left = None if self.chunked else resp.length  # None: until close
        self.chunk_left = 0
        self.crlf = False   # the CRLF after a chunk's data is still to come
        self.done = False
        self.failure = None
        self.nread = 0
        self.sock = getattr(resp, "shardcast_sock", None)
        self.silence = None  # the heartbeat bound set by the frames reader

    def set_silence(self, seconds):
        """A frames stream whose server sends heartbeats: this many seconds
        without a byte means the server is hung (the socket's timeout)."""
        if self.sock is None:
            return
        try:
            self.sock.settimeout(seconds)
        except OSError:
            return
        self.silence = seconds

    def _fail(self, what, cause=None):
        self.failure = ShardcastIncompleteError(
            "stream %s %s after %d bytes" % (self.url, what, self.nread))
        if cause is not None:
            raise self.failure from cause
        raise self.failure

    def _line(self):
        line = self.fp.readline(MAX_CHUNK_LINE + 1)
        if not line.endswith(b"\n"):
            if len(line) > MAX_CHUNK_LINE:
                raise ShardcastProtocolError("stream %s: chunk line over %d bytes"
                                             % (self.url, MAX_CHUNK_LINE))
            self._fail("was cut (connection closed mid-body)")
        return line

    def readinto(self, mv):
        if self.failure is not None:
            raise self.failure
        if self.done or not len(mv):
            return 0
        try:
            n = self._chunked_into(mv) if self.chunked else self._plain_into(mv)
        except socket.timeout as e:
            if self.silence is not None:
                self.failure = ShardcastIncompleteError(
                    "stream %s: no byte and no heartbeat for %.1f s after %d bytes "
                    "(heartbeat_timeout): the server or its host is hung"
                    % (self.url, self.silence, self.nread))
                self.failure.hung = True
                raise self.failure from e
            self._fail("timed out", e)
        except (OSError, http.client.HTTPException) as e:
            self.failure = ShardcastIncompleteError(
                "stream %s broke after %d bytes: %s" % (self.url, self.nread, e))
            raise self.failure from e
        self.nread += n
        return n

    def _plain_into(self, mv):
        if self.left is not None:
            if self.left == 0:
                self.done = True
                return 0
            if len(mv) > self.left:
                mv = mv[:self.left]
        n = self.fp.readinto1(mv)
        if not n:
            if self.left:
                self._fail("was cut (connection closed mid-body)")
            self.done = True
            return 0
        if self.left is not None:
            self.left -= n
        return n

    def _chunked_into(self, mv):
        if self.chunk_left == 0:
            if self.crlf:
                if self._line() not in (b"\r\n", b"\n"):
                    raise ShardcastProtocolError("stream %s: bad chunk end" % self.url)
                self.crlf = False
            line = self._line()
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ShardcastProtocolError("stream %s: bad chunk size line %r"
                                             % (self.url, line[:64])) from None
            if size < 0:
                raise ShardcastProtocolError("stream %s: bad chunk size" % self.url)
            if size == 0:
                for _ in range(MAX_TRAILER_LINES):
                    if self._line() in (b"\r\n", b"\n"):
                        self.done = True
                        return 0
                raise ShardcastProtocolError("stream %s: too many trailer lines" % self.url)
            self.chunk_left = size
        if len(mv) > self.chunk_left:
            mv = mv[:self.chunk_left]
        n = self.fp.readinto1(mv)
        if not n:
            self._fail("was cut (connection closed mid-body)")
        self.chunk_left -= n
        if self.chunk_left == 0:
            self.crlf = True
        return n


class StreamReader:
    """Iterate over the samples of one stream URL (see stream_url()).

    Each sample is a dict {"__key__": original key, "__url__": shard URL,
    "__shard__": the same (an alias kept for one release),
    "__index__": global index (int), "__position__": position in the share
    (int), "<ext>": bytes, ...}. Iteration raises ShardcastHTTPError,
    ShardcastConnectionError, ShardcastStreamError (server-side error with
    its reason), ShardcastIncompleteError (no end member: cut stream) or
    ShardcastProtocolError; it ends normally only after the end member was
    seen and checked. After a complete iteration `trailer` holds the end
    member's JSON.

    A StreamReader is iterable once; use it as a context manager (or call
    close()) to release the connection when stopping early.

    The stream's identity (a pax global header first in the stream with
    the records SHARDCAST.fingerprint / .replica / .replicas / .served_by,
    see shardcast.replicas) is in `ident` once the first member is read
    ({"fingerprint", "replica", "replicas", "served_by"}, or None from a
    server that sends none); check_ident(ident) is called with it (also
    with None) before any sample is handed out, and may raise.
    """

    def __init__(self, url, *, timeout=60.0, headers=None, expect_all_fields=None,
                 max_member=DEFAULT_MAX_MEMBER, check_ident=None, header_timeout=None):
        self.url = url
        self.timeout = timeout
        self.header_timeout = header_timeout  # tar streams have no heartbeat
        self.headers = headers
        self.max_member = max_member
        # With no fields= filter every sample sends members, so the trailer's
        # sample count must equal what was received.
        if expect_all_fields is None:
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
            expect_all_fields = "fields" not in q
        self.expect_all_fields = expect_all_fields
        self.trailer = None
        self.samples_received = 0
        self.ident = None
        self.check_ident = check_ident
        self._resp = None
        self._body = None
        self._used = False

    @property
    def bytes_read(self):
        """Body bytes read so far."""
        return self._body.nread if self._body is not None else 0

    def close(self):
        """Close the connection (idempotent)."""
        if self._resp is not None:
            self._resp.close()
            self._resp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        if self._used:
            raise ShardcastError("a StreamReader can be iterated only once")
        self._used = True
        return self._samples()

    def _samples(self):
        try:
            self._resp = open_raw(self.url, timeout=self.timeout, headers=self.headers,
                                  header_timeout=self.header_timeout)
            body = _BodyReader(self._resp, self.url)
            self._body = body
            try:
                yield from self._parse(body)
            except tarfile.TarError as e:
                # A transport failure underneath wins: it is the real cause.
                if body.failure is not None:
                    raise body.failure from e
                raise ShardcastIncompleteError("stream %s: bad or truncated tar data "
                                               "after %d bytes: %s"
                                               % (self.url, body.nread, e)) from e
        finally:
            self.close()

    def _read_member(self, tf, ti, limit):
        if ti.size > limit:
            raise ShardcastProtocolError("stream %s: member %r has %d bytes, over the "
                                         "limit of %d" % (self.url, ti.name, ti.size, limit))
        f = tf.extractfile(ti)
        data = f.read() if f is not None else b""
        if len(data) != ti.size:
            raise ShardcastIncompleteError("stream %s: member %r cut short (%d of %d bytes)"
                                           % (self.url, ti.name, len(data), ti.size))
        return data

    def _parse(self, body):
        tf = tarfile.open(fileobj=body, mode="r|")
        cur = None      # the sample being assembled
        prefix = None   # "<G>/<key>." of the current sample
        first = True
        while True:
            ti = tf.next()
            # tarfile keeps every TarInfo it returns; drop them so memory
            # stays flat over an epoch of millions of members.
            tf.members = []
            if first:
                # tarfile consumed the pax global header (if any) before
                # the first member; its records are in tf.pax_headers (and
                # merged into every member's pax_headers, where only
                # SHARDCAST.key starts a sample: the grouping is unchanged).
                first = False
                self.ident = ident_from_pax(tf.pax_headers)
                if self.check_ident is not None:
                    self.check_ident(self.ident)
            if ti is None:
                if body.failure is not None:
                    raise body.failure
                raise ShardcastIncompleteError(
                    "stream %s ended after %d bytes without %s: the share is incomplete"
                    % (self.url, body.nread, END_MEMBER))
            name = ti.name
            if name == ERROR_MEMBER:
                info = self._json_member(tf, ti)
                raise error_from_trailer(
                    self.url, info,
                    lambda what: ShardcastProtocolError("stream %s: %s" % (self.url, what)))
            if name == END_MEMBER:
                self.trailer = self._json_member(tf, ti)
                if cur is not None:
                    self.samples_received += 1
                self._check_trailer()
                self._check_tail(tf, body)
                if cur is not None:
                    yield cur
                return
            if not ti.isreg():
                raise ShardcastProtocolError("stream %s: unexpected member %r of type %r"
                                             % (self.url, name, ti.type))
            pax = ti.pax_headers
            if "SHARDCAST.key" in pax:
                nxt, nprefix = self._new_sample(name, pax)
                if cur is not None:
                    self.samples_received += 1
                    yield cur
                cur, prefix = nxt, nprefix
            elif cur is None or not name.startswith(prefix):
                raise ShardcastProtocolError("stream %s: member %r does not belong to "
                                             "the current sample" % (self.url, name))
            ext = name[len(prefix):]
            if not ext or ext in cur:
                raise ShardcastProtocolError("stream %s: bad or repeated field in %r"
                                             % (self.url, name))
            cur[ext] = self._read_member(tf, ti, self.max_member)

    def _new_sample(self, name, pax):
        key = pax["SHARDCAST.key"]
        try:
            index = int(pax["SHARDCAST.index"])
            position = int(pax.get("SHARDCAST.position", "-1"))
        except (KeyError, ValueError) as e:
            raise ShardcastProtocolError("stream %s: bad SHARDCAST pax records on %r: %s"
                                         % (self.url, name, e)) from e
        prefix = "%0*d/%s." % (INDEX_DIGITS, index, key)
        if not key or not name.startswith(prefix):
            raise ShardcastProtocolError("stream %s: member %r does not match its "
                                         "SHARDCAST.key %r / index %d"
                                         % (self.url, name, key, index))
        shard = pax.get("SHARDCAST.shard", "")
        sample = {"__key__": key, "__url__": shard, "__shard__": shard, "__index__": index}
        if position >= 0:
            sample["__position__"] = position
        if "SHARDCAST.source" in pax:  # a mixed job's source
            sample["__source__"] = pax["SHARDCAST.source"]
        return sample, prefix

    def _json_member(self, tf, ti):
        data = self._read_member(tf, ti, MAX_TRAILER)
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ShardcastProtocolError("stream %s: %s is not JSON: %r"
                                         % (self.url, ti.name, data[:200])) from e
        if not isinstance(obj, dict):
            raise ShardcastProtocolError("stream %s: %s is not a JSON object"
                                         % (self.url, ti.name))
        return obj

    def _check_trailer(self):
        t = self.trailer
        if t.get("status") != "ok":
            raise ShardcastStreamError("stream %s ended with status %r: %s"
                                       % (self.url, t.get("status"), t.get("reason", "")),
                                       reason=str(t.get("reason", t.get("status"))))
        if self.expect_all_fields and t.get("samples") != self.samples_received:
            raise ShardcastProtocolError("stream %s: trailer says %r samples, received %d"
                                         % (self.url, t.get("samples"),
                                            self.samples_received))

    def _check_tail(self, tf, body):
        """After the end member: the tar must end and the body finish cleanly,
        otherwise the trailer itself may have come from a broken response."""
        if tf.next() is not None:
            raise ShardcastProtocolError("stream %s: members after %s"
                                         % (self.url, END_MEMBER))
        tail = 0
        while True:
            chunk = body.read(65536)
            if not chunk:
                break
            tail += len(chunk)
            if tail > MAX_TAIL or chunk.count(0) != len(chunk):
                raise ShardcastProtocolError("stream %s: unexpected data after the "
                                             "end of the tar stream" % self.url)


def iter_stream(url, **kwargs):
    """Yield the samples of one stream URL (see StreamReader)."""
    with StreamReader(url, **kwargs) as reader:
        yield from reader
