"""Heartbeats (docs/http-api.md "Frames"): a frames stream that has nothing
to send carries a KEEPALIVE frame (type 0x80, no payload) about every
second, announced in its HEADER as heartbeat_ms, so a client tells a slow
store from a hung server in seconds; a stream stuck on the server's side
still ends, with a retryable error.

test_a_stream_waiting_on_a_stalled_store_carries_heartbeats: the store
stalls a shard's body for 8 s (more than twice the client's default
heartbeat_timeout of 3 s). A raw frames reader sees the HEADER announce
heartbeat_ms and KEEPALIVE frames while it waits, and the whole share; the
Python client with its defaults reads the same epoch through the same
stall with no reconnect and no failover.

test_tar_streams_have_no_heartbeat: a tar stream's bytes are the tar
format's alone.

test_a_stream_stuck_on_the_server_ends_with_a_retryable_error: with
--stream-stall-timeout 2 s and a store that sends nothing for 30 s, the
waiting stream ends with a retryable error naming the setting (and its
heartbeats did not hide it); the job counts it.
"""

import contextlib
import http.client
import io
import json
import os
import struct
import sys
import tarfile

from server_testlib import Nginx, get_json, make_dataset, shard_url, stream_path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.faultproxy import FaultProxy, Rule  # noqa: E402

_FRAME = struct.Struct("<BBHI")


def raw_frames(srv, path, timeout=60):
    """Every frame of a frames stream: [(type, payload)], until END/ERROR
    or the end of the body."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=timeout)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200, (resp.status, resp.read())
    assert resp.read(4) == b"SCF1"
    out = []
    try:
        while True:
            head = resp.read(8)
            if len(head) < 8:
                break
            t, _, _, n = _FRAME.unpack(head)
            payload = resp.read(n) if n else b""
            out.append((t, payload))
            if t in (0x04, 0x05):
                break
    finally:
        conn.close()
    return out


@contextlib.contextmanager
def stalled_store(start, tmp_path, shards, per_shard, seed, stall, path, *extra):
    """A dataset served by nginx through the fault proxy, whose first GET
    matching `path` is held back `stall` seconds; yields (server reading
    it, the proxy)."""
    d = str(tmp_path / "ds")
    make_dataset(d, shards=shards, per_shard=per_shard, size=2000, seed=seed)
    ng = Nginx(d, str(tmp_path))
    try:
        with FaultProxy(upstream="http://127.0.0.1:%d" % ng.port,
                        rules=[Rule.stall(stall, after_bytes=0, path=path, method="GET",
                                          count=1)]) as px:
            src = shard_url(ng, d).replace("http://127.0.0.1:%d" % ng.port, px.url)
            srv = start("--job", "t", "--source", src, "--prefetch", "false",
                        "--stream-rate-limit", "0", "--rate-limit", "0", *extra)
            try:
                yield srv, px
            finally:
                px.clear_rules()
    finally:
        ng.stop()


def test_a_stream_waiting_on_a_stalled_store_carries_heartbeats(start, tmp_path):
    with stalled_store(start, tmp_path, 3, 20, 41, 8, r"-000001\.tar") as (srv, px):
        frames = raw_frames(srv, stream_path("t", 0, 0, 1))
        types = [t for t, _ in frames]
        head = json.loads(frames[0][1])
        assert frames[0][0] == 0x01 and head["heartbeat_ms"] == 1000, head
        assert types[-1] == 0x04, frames[-1]
        assert types.count(0x03) == 60
        # The 8 s stall of shard 1 was bridged by heartbeats.
        assert types.count(0x80) >= 2, types.count(0x80)
        assert all(p == b"" for t, p in frames if t == 0x80)

        # The Python client with its defaults, through the same stall.
        import shardcast
        px.add_rule(Rule.stall(8, after_bytes=0, path=r"-000002\.tar", method="GET",
                               count=1))
        ds = shardcast.ShardcastDataset("http://%s:%d" % (srv.host, srv.port), "t",
                                        rank=0, world=1, epoch=1)
        keys = [s["__key__"] for s in ds]
        assert len(keys) == 60 and len(set(keys)) == 60
        assert ds.reconnects == 0 and ds.failovers == 0, (ds.reconnects, ds.failovers)
        st = get_json(srv, "/v1/jobs/t")
        assert st["totals"]["streams_stalled"] == 0


def test_tar_streams_have_no_heartbeat(start, tmp_path):
    with stalled_store(start, tmp_path, 2, 10, 42, 4, r"-000001\.tar") as (srv, _):
        conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
        conn.request("GET", stream_path("t", 0, 0, 1, fmt="tar"))
        body = conn.getresponse().read()
        conn.close()
        names = [m.name for m in tarfile.open(fileobj=io.BytesIO(body))]
        assert names[-1] == "__shardcast_end__"
        assert len([n for n in names if n.endswith(".cls")]) == 20


def test_a_stream_stuck_on_the_server_ends_with_a_retryable_error(start, tmp_path):
    with stalled_store(start, tmp_path, 1, 20, 43, 30, r"\.tar",
                       "--stream-stall-timeout", "2s") as (srv, _):
        frames = raw_frames(srv, stream_path("t", 0, 0, 1))
        assert frames[-1][0] == 0x05, frames[-1]
        err = json.loads(frames[-1][1])
        assert err["retryable"] is True, err
        assert "--stream-stall-timeout" in err["reason"], err
        assert [t for t, _ in frames].count(0x80) >= 1
        st = get_json(srv, "/v1/jobs/t")
        assert st["totals"]["streams_stalled"] >= 1
        assert "event=stream_stalled" in srv.wait_log("event=stream_stalled")
