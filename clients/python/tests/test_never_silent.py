"""Never silent: every retry streak of the dataset is logged (its first
failure with URL and reason, a line every 10 s, the answer that ends it),
and a server that never answered fails after the short startup budget
instead of the long restart budget."""

import logging
import os
import socket
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from shardcast import ShardcastConnectionError, ShardcastDataset  # noqa: E402
from shardcast.streak import Streak  # noqa: E402
from shardcast_fake import EpochServer, make_samples  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "shardcast" and r.levelno == logging.WARNING]


def test_a_wrong_port_fails_after_the_startup_budget(caplog):
    url = "http://127.0.0.1:%d" % free_port()  # nothing listens there
    ds = ShardcastDataset(url, "j", rank=0, world=1, backoff=0.05, startup_timeout=1.0,
                          verify=False)
    with caplog.at_level(logging.WARNING, logger="shardcast"):
        with pytest.raises(ShardcastConnectionError) as ei:
            next(iter(ds))
    text = str(ei.value)
    assert "startup_timeout = 1.0 s spent on time" in text, text
    assert "no shardcast server has answered this dataset yet" in text and url in text
    lines = warnings_of(caplog)
    # The first failure is told at once, with the URL and the reason.
    assert lines and url in lines[0] and "failed" in lines[0] and "retrying in" in lines[0]


def test_a_server_seen_once_keeps_the_long_budget():
    srv = EpochServer({"j": make_samples(20)})
    try:
        ds = ShardcastDataset(srv.url, "j", rank=0, world=1, backoff=0.01,
                              startup_timeout=0.05, retry_timeout=60, verify=False)
        # cut after 3 samples, then 503 for a while: the server answered
        # (it sent samples), so the 60 s budget applies, not 0.05 s
        srv.cuts = [{"after": 3, "count": 1}, {"kind": "503", "count": 6}]
        got = list(ds)
        assert len(got) == 20
    finally:
        srv.stop()


def test_a_streak_is_told_and_so_is_its_end(caplog):
    srv = EpochServer({"j": make_samples(10)})
    try:
        srv.cuts = [{"kind": "503", "count": 3}]
        ds = ShardcastDataset(srv.url, "j", rank=0, world=1, backoff=0.01, verify=False)
        with caplog.at_level(logging.WARNING, logger="shardcast"):
            got = list(ds)
        assert len(got) == 10
        lines = warnings_of(caplog)
        assert any("failed" in ln and "503" in ln and srv.url in ln for ln in lines), lines
        assert any("answered again after 3 failed attempts" in ln for ln in lines), lines
    finally:
        srv.stop()


def test_a_long_streak_is_told_every_ten_seconds(caplog):
    now = [100.0]
    st = Streak("consumer 0 of 1 of job j", clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="shardcast"):
        for _ in range(25):       # 25 failures, 1 s apart
            st.failed("http://x:1", "connection refused", 1.0)
            now[0] += 1.0
        st.succeeded("http://x:1")
    lines = warnings_of(caplog)
    assert "http://x:1 failed: connection refused" in lines[0]
    still = [ln for ln in lines if "still retrying" in ln]
    assert len(still) == 2  # at 10 s and 20 s
    assert "after 11 attempts in 10 s" in still[0]
    assert "answered again after 25 failed attempts in 25.0 s" in lines[-1]
    assert not st.open
