"""Streams under stress: reconnect with a cursor, elastic resume with
global_start, a slow consumer pacing the epoch with flat memory, epochs in
flight, and the SIGTERM drain."""

import os
import signal
import socket
import threading
import time

import pytest

from server_testlib import (FramesStream, get_json, read_share, request, sanitized,
                            stream_path, wait_for)


def manifest_check(samples, ds):
    """Every sample is a manifest sample, byte for byte."""
    for s in samples:
        m = ds.by_key.get(s["key"])
        assert m is not None, s["key"]
        assert s["hash"] == m["hash"], s["key"]


def test_reconnect_with_cursor_is_exactly_once(start, medium_ds):
    # The ranks are read one after the other: after the join timeout rank 0
    # no longer waits for rank 1, which then reads its share from a replay.
    srv = start("--job", "train", "--source", medium_ds.path, "--seed", "7",
                "--window-samples", "256", "--join-timeout-ms", "500")
    W = 2
    shares = {}
    for rank in range(W):
        got, pos = [], 0
        for cut_after in (10, 137, 3, None):
            s = FramesStream(srv, stream_path("train", 0, rank, W, start=pos))
            part = s.read_all(limit=cut_after)
            if cut_after is None:
                assert s.outcome == "end", (s.outcome, s.trailer)
                assert s.trailer["position"] == pos + len(part)
            s.close()  # drops the connection mid-stream
            assert [x["position"] for x in part] == list(range(pos, pos + len(part)))
            got += part
            pos += len(part)
        shares[rank] = got
    n = medium_ds.total
    assert all(len(v) == n // W for v in shares.values())
    everything = shares[0] + shares[1]
    manifest_check(everything, medium_ds)
    assert len({x["key"] for x in everything}) == len(everything) == n - n % W
    assert sorted(x["index"] for x in everything) == list(range(n - n % W))
    # Same bytes as an uninterrupted read of the same share.
    ref, outcome, _ = read_share(srv, "train", 0, 1, W)
    assert outcome == "end" and [x["hash"] for x in ref] == [x["hash"] for x in shares[1]]
    st = get_json(srv, "/v1/jobs/train")
    assert st["totals"]["streams_client_gone"] >= 3 or st["totals"]["streams_opened"] >= 8


def test_elastic_resume_with_global_start(start, medium_ds):
    srv = start("--job", "train", "--source", medium_ds.path, "--seed", "3")
    # Two consumers read 100 samples each: Y[0..199] are consumed ...
    first = []
    for rank in range(2):
        s = FramesStream(srv, stream_path("train", 0, rank, 2))
        first += s.read_all(limit=100)
        s.close()
    assert sorted(x["index"] for x in first) == list(range(200))
    # ... then three consumers resume the epoch from the global cursor 200.
    rest = []
    for rank in range(3):
        got, outcome, trailer = read_share(srv, "train", 0, rank, 3, global_start=200)
        assert outcome == "end", trailer
        assert [x["index"] for x in got] == [200 + rank + 3 * k for k in range(len(got))]
        rest += got
    everything = first + rest
    manifest_check(everything, medium_ds)
    n = medium_ds.total
    assert len({x["key"] for x in everything}) == len(everything)
    assert len(everything) == 200 + (n - 200) // 3 * 3


def test_slow_consumer_paces_the_epoch_with_flat_memory(start, medium_ds):
    window = 64
    # The feed's window paces the epoch: on the feed.
    srv = start("--job", "train", "--source", medium_ds.path, "--window-samples",
                str(window), "--shuffle-buffer", "100", "--prefetch", "false",
                "--data-plane", "stream")
    W = 2
    share = medium_ds.total // W
    fast = FramesStream(srv, stream_path("train", 0, 0, W))
    slow = FramesStream(srv, stream_path("train", 0, 1, W))
    fast_got, slow_got, gaps, rss = [], [], [], []
    done = threading.Event()

    def run_fast():
        while True:
            s = fast.next_sample()
            if s is None:
                break
            fast_got.append(s)
        done.set()

    t = threading.Thread(target=run_fast, daemon=True)
    t.start()
    for i in range(400):
        s = slow.next_sample()
        assert s is not None
        slow_got.append(s)
        time.sleep(0.003)
        if i % 25 == 0:
            # Server side, the cursors stay within one window of each other
            # (what the slow client has not read yet sits in its socket
            # buffers, so its client-side count trails further).
            e = [e for e in get_json(srv, "/v1/jobs/train")["epochs"] if e["epoch"] == 0][0]
            pos = {c["rank"]: c["position"] for c in e["consumers"]}
            gaps.append(pos[0] - pos[1])
            rss.append(srv.proc_status("VmRSS"))
    assert not done.is_set() and len(fast_got) < share, \
        "the fast consumer finished while the slow one lagged"
    assert max(gaps) <= window // W + 1, gaps
    # Memory stays flat while the slow consumer holds the epoch back (from
    # the third sample on: the window and the buffers fill first).
    if not sanitized():
        assert max(rss[2:]) - min(rss[2:]) < 16 * 1024, rss
    while True:
        s = slow.next_sample()
        if s is None:
            break
        slow_got.append(s)
    t.join(30)
    assert fast.outcome == slow.outcome == "end"
    everything = fast_got + slow_got
    manifest_check(everything, medium_ds)
    assert len({x["key"] for x in everything}) == len(everything) == share * W
    fast.close()
    slow.close()


def test_epochs_in_flight_are_bounded(start, medium_ds):
    # The feed's window holds epoch 0's stream open: on the feed.
    srv = start("--job", "train", "--source", medium_ds.path, "--max-epochs", "1",
                "--prefetch", "false", "--window-samples", "32",
                "--rejoin-grace-ms", "1500", "--data-plane", "stream")
    held = FramesStream(srv, stream_path("train", 0, 0, 1))
    held.read_all(limit=2)
    st, hdrs, body = request(srv, stream_path("train", 1, 0, 1))
    assert st == 503 and "epochs in flight" in body.decode() and "retry-after" in hdrs
    held.close()
    # While the consumer of epoch 0 may still come back (its rejoin grace),
    # the epoch is kept: it is not evicted for another.
    time.sleep(0.3)
    st, _, body = request(srv, stream_path("train", 1, 0, 1))
    assert st == 503 and "epochs in flight" in body.decode()
    # Once the stream of epoch 0 is gone for good (its grace ran out) its
    # feed can be replaced.
    assert wait_for(lambda: request(srv, "/v1/jobs/train")[0] == 200 and
                    get_json(srv, "/v1/jobs/train")["epochs"][0]["streams"] == 0, 60), \
        get_json(srv, "/v1/jobs/train")["epochs"]

    def epoch1():
        got, outcome, _ = read_share(srv, "train", 1, 0, 1)
        return got if outcome == "end" else None
    got = wait_for(epoch1, 60, interval=0.3)
    assert got is not None and len(got) == medium_ds.total


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_a_consumer_reading_epochs_back_to_back_is_not_refused(start, medium_ds, plane):
    """--max-epochs 1: a consumer that read an epoch's END opens the next
    epoch at once, before the server has seen the request complete. Its
    finished stream does not hold the epoch: never a 503."""
    srv = start("--job", "train", "--source", medium_ds.path, "--max-epochs", "1",
                "--prefetch", "false", "--data-plane", plane)
    for epoch in range(8):
        s = FramesStream(srv, stream_path("train", epoch, 0, 1))
        try:
            assert s.status == 200, (epoch, s.status, s.error_body)
            got = s.read_all()
            assert s.outcome == "end", (epoch, s.outcome, s.trailer)
            assert len(got) == medium_ds.total, (epoch, len(got))
        finally:
            s.close()


def test_sigterm_drains_then_cuts(start, medium_ds):
    # The feed's window keeps both streams open past the signal: on the feed.
    srv = start("--job", "train", "--source", medium_ds.path, "--window-samples", "64",
                "--drain-grace", "2", "--data-plane", "stream")
    quick = FramesStream(srv, stream_path("train", 0, 0, 2))
    slow = FramesStream(srv, stream_path("train", 0, 1, 2))
    quick.read_all(limit=3)
    slow.read_all(limit=3)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    # New connections are refused at once.
    assert wait_for(lambda: not _can_connect(srv), 2)
    # Both keep streaming during the grace period; then they are cut with
    # the error trailer.
    outcomes = {}

    def drain(name, s, delay):
        while s.next_sample() is not None:
            time.sleep(delay)
        outcomes[name] = (s.outcome, s.trailer, time.monotonic() - t0)

    th = [threading.Thread(target=drain, args=("quick", quick, 0.001)),
          threading.Thread(target=drain, args=("slow", slow, 0.01))]
    for t in th:
        t.start()
    for t in th:
        t.join(30)
    assert srv.proc.wait(30) == 0, srv.log()
    for name, (outcome, trailer, when) in outcomes.items():
        assert outcome == "error", (name, outcome, trailer)
        # Retryable: consumers come back to the restarted server and resume
        # (tests/server/test_restart.py).
        assert trailer == {"status": "error", "reason": "server shutting down",
                           "retryable": True, "retry_after_ms": 2000}
        assert 1.5 < when < 12, (name, when)
    assert "event=drain" in srv.log()


def test_sigterm_lets_short_streams_finish(start, small_ds):
    srv = start("--job", "train", "--source", small_ds.path, "--drain-grace", "10")
    s = FramesStream(srv, stream_path("train", 0, 0, 1))
    s.read_all(limit=1)
    srv.proc.send_signal(signal.SIGTERM)
    rest = s.read_all()
    assert s.outcome == "end" and len(rest) == small_ds.total - 1
    assert srv.proc.wait(15) == 0


def _can_connect(srv):
    try:
        with socket.create_connection((srv.host, srv.port), timeout=1):
            return True
    except OSError:
        return False
