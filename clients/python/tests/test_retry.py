"""Retry advice and the retry budget: the error trailer's retryable /
retry_after_ms fields in both readers, Retry-After on a 503, and
ShardcastDataset resuming across a draining server (a retryable trailer,
then 503s) exactly once, honouring the advice, within its budget of
attempts and time, against EpochServer (shardcast_fake.py)."""

import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from shardcast import (FramesReader, ShardcastDataset, ShardcastHTTPError,  # noqa: E402
                       ShardcastProtocolError, ShardcastStreamError, StreamReader,
                       stream_url)
from shardcast_fake import EpochServer, make_samples  # noqa: E402

N = 40
FORMATS = ["frames", "tar"]
READERS = {"frames": FramesReader, "tar": StreamReader}


@pytest.fixture(scope="module")
def server():
    srv = EpochServer({"j": make_samples(N)})
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _fresh(server):
    server.cuts = []
    server.requests = []


def read_until_error(server, fmt):
    got = []
    url = stream_url(server.url, "j", 0, 0, 1, fmt=fmt)
    with pytest.raises((ShardcastStreamError, ShardcastProtocolError)) as ei:
        for s in READERS[fmt](url):
            got.append(s)
    return got, ei.value


@pytest.mark.parametrize("fmt", FORMATS)
def test_readers_expose_retry_advice(server, fmt):
    server.cuts = [{"after": 3, "count": 1, "kind": "error", "retryable": True,
                    "retry_after_ms": 1500}]
    got, e = read_until_error(server, fmt)
    assert isinstance(e, ShardcastStreamError)
    assert e.reason == "server shutting down"
    assert e.retryable is True and e.retry_after == 1.5
    assert "(retryable)" in str(e)
    # tar: a sample is complete only once the next member is in view, and
    # the one before the trailer is not handed out (it will be resent).
    assert len(got) == (3 if fmt == "frames" else 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_final_and_legacy_trailers_are_not_retryable(server, fmt):
    for retryable in (False, None):  # None: a server that predates the key
        server.cuts = [{"after": 1, "count": 1, "kind": "error", "reason": "corrupt tar",
                        "retryable": retryable, "retry_after_ms": 100}]
        _, e = read_until_error(server, fmt)
        assert isinstance(e, ShardcastStreamError)
        assert e.reason == "corrupt tar" and e.retryable is False
        assert e.retry_after is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_retry_advice_is_checked_and_bounded(server, fmt):
    server.cuts = [{"after": 0, "count": 1, "kind": "error", "retryable": "yes"}]
    _, e = read_until_error(server, fmt)
    assert isinstance(e, ShardcastProtocolError) and "retryable" in str(e)
    server.cuts = [{"after": 0, "count": 1, "kind": "error", "retryable": True,
                    "retry_after_ms": -5}]
    _, e = read_until_error(server, fmt)
    assert isinstance(e, ShardcastProtocolError) and "retry_after_ms" in str(e)
    server.cuts = [{"after": 0, "count": 1, "kind": "error", "retryable": True,
                    "retry_after_ms": 10 ** 12}]
    _, e = read_until_error(server, fmt)
    assert e.retryable and e.retry_after == 600.0


def test_503_carries_retry_after(server):
    server.cuts = [{"count": 1, "kind": "503", "retry_after": 7}]
    with pytest.raises(ShardcastHTTPError) as ei:
        list(FramesReader(stream_url(server.url, "j", 0, 0, 1, fmt="frames")))
    assert ei.value.status == 503 and ei.value.retry_after == 7.0


@pytest.mark.parametrize("fmt", FORMATS)
def test_dataset_resumes_across_a_drain_exactly_once(server, fmt):
    """A rolling restart as a consumer sees it: the stream ends with the
    drain's retryable trailer (come back in 300 ms), the restarting server
    answers 503 with Retry-After: 1, then streams the rest."""
    server.cuts = [{"after": 7, "count": 1, "kind": "error", "retryable": True,
                    "retry_after_ms": 300},
                   {"count": 1, "kind": "503", "retry_after": 1}]
    ds = ShardcastDataset(server.url, "j", rank=1, world=2, format=fmt, backoff=0.01)
    t0 = time.monotonic()
    got = list(ds)
    took = time.monotonic() - t0
    want = [s[2][0] for s in server.share("j", 0, 1, 2)]
    assert [s["__key__"] for s in got] == want
    resumed = "7" if fmt == "frames" else "6"
    assert [r.get("start") for r in server.requests] == [None, resumed, resumed]
    assert ds.reconnects == 2
    assert took >= 1.3  # the advice (0.3 s + 1 s), not the 0.01 s backoff


@pytest.mark.parametrize("fmt", FORMATS)
def test_final_server_error_is_not_retried(server, fmt):
    server.cuts = [{"after": 2, "count": 1, "kind": "error", "reason": "corrupt tar",
                    "retryable": False}]
    with pytest.raises(ShardcastStreamError, match="corrupt tar") as ei:
        list(ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt, backoff=0.01))
    assert len(server.requests) == 1 and ei.value.retryable is False


def test_budget_of_attempts(server):
    server.cuts = [{"after": 0, "count": 10, "kind": "error", "retryable": True,
                    "retry_after_ms": 10}]
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, retries=3, backoff=0.01)
    with pytest.raises(ShardcastStreamError, match="gave up after 4 attempts") as ei:
        list(ds)
    e = ei.value
    assert e.reason == "server shutting down" and e.retryable and e.attempts == 4
    assert "spent on attempts" in str(e)
    assert len(server.requests) == 4


def test_budget_of_time(server):
    """The advice (200 ms) is honoured, and an attempt that would start
    after retry_timeout is not made."""
    server.cuts = [{"after": 0, "count": 100, "kind": "error", "retryable": True,
                    "retry_after_ms": 200}]
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, retries=100, backoff=0.01,
                          retry_timeout=0.7)
    t0 = time.monotonic()
    with pytest.raises(ShardcastStreamError, match="spent on time") as ei:
        list(ds)
    took = time.monotonic() - t0
    assert took < 0.7 + 0.3
    # At least 200 ms between attempts: at most 4 attempts fit in 0.7 s.
    assert 2 <= ei.value.attempts <= 4 and len(server.requests) == ei.value.attempts


def test_progress_restarts_the_budget(server):
    """Five drains, each after a few new samples: every one is a new
    streak, so retries=1 rides out all of them."""
    server.cuts = [{"after": 2, "count": 5, "kind": "error", "retryable": True,
                    "retry_after_ms": 0}]
    ds = ShardcastDataset(server.url, "j", rank=0, world=1, retries=1, backoff=0.01)
    got = list(ds)
    assert [s["__key__"] for s in got] == [s[2][0] for s in server.share("j", 0, 0, 1)]
    assert ds.reconnects == 5


def test_budget_settings_are_checked():
    with pytest.raises(ValueError, match="retry_timeout"):
        ShardcastDataset("http://127.0.0.1:1", "j", retry_timeout=0)
    ds = ShardcastDataset("http://127.0.0.1:1", "j")
    assert ds.retries == 30 and ds.retry_timeout == 120.0
