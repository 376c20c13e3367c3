"""A restart of shardcastd under its consumers: every consumer resumes by
itself and together they get their epoch exactly once.

One epoch of a small local dataset is dealt to W = 4 consumers: a PyTorch
DataLoader with 2 workers over ShardcastDataset (consumers 0 and 1) and
two `shardcast cat` processes, the C client library (consumer 2 reading
frames, consumer 3 reading tar). Mid-epoch the server is restarted on the
same port: by SIGTERM (it drains for --drain-grace, then ends the open
streams with the retryable error trailer, exits, and a new server takes the
port), or by SIGKILL (the streams are cut). A small window ties the
consumers together, so the Python consumers' per-sample pause (what is
needed to be mid-epoch at the restart) paces the C consumers too. No
consumer is told about the restart: each resumes within its default retry
budget, and the union of what they delivered is the whole epoch, with no
sample twice and none missing.

Regression: the drain used to end the streams with a final error trailer;
ShardcastDataset raised ShardcastStreamError on it (the DataLoader died)
and `shardcast cat` exited 5, so the restarted server saw no consumer come
back. A SIGKILL was resumed, a clean rolling restart was not.
"""

import os
import http.client
import json
import re
import signal
import subprocess
import tarfile
import threading
import time
from collections import Counter

import pytest

from server_testlib import Dataset, FramesStream, Server, make_dataset, stream_path

torch_data = pytest.importorskip("torch.utils.data")

from shardcast import ShardcastDataset  # noqa: E402

W = 4            # consumers: 2 DataLoader workers + 2 shardcast cat
PER = 150        # samples per consumer
PY_PAUSE = 0.02  # seconds per sample in the DataLoader workers
RESTART_AT = 30  # restart once the DataLoader has delivered this many


@pytest.fixture(scope="module")
def restart_ds(workdir):
    """4 shards x 150 samples of ~100 KB (60 MB): 150 samples, 15 MB per
    consumer, several times what the socket buffers and the clients'
    read-ahead hold, so the paced DataLoader paces everyone."""
    d = os.path.join(workdir, "restart")
    return Dataset(d, make_dataset(d, shards=W, per_shard=PER, size=100000, seed=11))


@pytest.fixture
def cli_binary(server_binary):
    d = os.environ.get("SHARDCAST_BUILD") or os.path.dirname(server_binary)
    b = os.path.join(d, "shardcast")
    if not os.access(b, os.X_OK):
        pytest.fail("the shardcast command is not at %s: build it" % b, pytrace=False)
    return b


def http_get(server, path):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def _paced(sample):
    time.sleep(PY_PAUSE)
    return sample


def _server_args(ds, port, grace, state=None):
    # A window of 16 samples keeps the four consumers within a few samples
    # of each other; --port comes after the harness's "--port 0".
    # The feed's window ties the consumers together (a plan's readers are
    # not paced by each other): on the feed.
    args = ["--port", str(port), "--job", "train", "--source", ds.path, "--seed", "5",
            "--shuffle-buffer", "50", "--window-samples", "16",
            "--drain-grace", str(grace), "--data-plane", "stream"]
    if state:
        # kept across the restart: the restarted server seeks (from the
        # shard indexes) instead of replaying the prefix
        args += ["--state-dir", state]
    return args


class PyConsumers(threading.Thread):
    """The DataLoader (2 workers = consumers 0 and 1 of 4) in a thread."""

    def __init__(self, url, fmt, at, action):
        super().__init__(daemon=True)
        self.keys = []
        self.error = None
        self.at, self.action = at, action  # action() once `at` were delivered
        self.fired = threading.Event()
        self.ds = ShardcastDataset(url, "train", rank=0, world=2, format=fmt, map=_paced)

    def run(self):
        try:
            loader = torch_data.DataLoader(self.ds, num_workers=2, batch_size=None)
            for s in loader:
                self.keys.append(s["__key__"])
                if len(self.keys) == self.at:
                    self.action()
                    self.fired.set()
        except Exception as e:  # reported by the test
            self.error = e


def _tar_keys(path):
    """(keys of the samples in a `shardcast cat` output, clean end?)."""
    keys, end = [], False
    with tarfile.open(path, mode="r|") as tf:
        for ti in tf:
            if ti.name == "__shardcast_end__":
                end = True
            elif "SHARDCAST.key" in ti.pax_headers:
                keys.append(ti.pax_headers["SHARDCAST.key"])
    return keys, end


@pytest.mark.parametrize("how,pyfmt,state", [("sigterm", "frames", False),
                                             ("sigterm", "tar", False),
                                             ("sigkill", "frames", False),
                                             ("sigterm", "frames", True),
                                             ("sigkill", "tar", True)])
def test_consumers_resume_across_a_restart(server_binary, cli_binary, workdir, restart_ds,
                                           how, pyfmt, state, tmp_path):
    grace = 1 if how == "sigterm" else 30
    sd = str(tmp_path / "state") if state else None
    servers = [Server(server_binary, _server_args(restart_ds, 0, grace, sd), workdir)]
    url, port = servers[0].url, servers[0].port
    cats = []
    try:
        # The C consumers first: starting processes while the DataLoader
        # forks its workers from another thread can hold this thread up.
        for rank, fmt in ((2, "frames"), (3, "tar")):
            out = tmp_path / ("cat-%d.tar" % rank)
            err = open(tmp_path / ("cat-%d.err" % rank), "wb")
            p = subprocess.Popen([cli_binary, "cat", "--server", url, "--job", "train",
                                  "--rank", str(rank), "--world", str(W), "--format", fmt,
                                  "-o", str(out)], stdout=subprocess.DEVNULL, stderr=err)
            cats.append((p, out, err))
        # The DataLoader's thread stops the server as soon as it has
        # delivered RESTART_AT samples, whatever this thread is doing.
        old = servers[0]
        sig = signal.SIGTERM if how == "sigterm" else signal.SIGKILL
        py = PyConsumers(url, pyfmt, RESTART_AT, lambda: old.proc.send_signal(sig))
        t0 = time.monotonic()
        py.start()
        assert py.fired.wait(40), ("no progress before the restart", py.error, old.log())
        waited = time.monotonic() - t0
        rc = old.proc.wait(30)
        assert rc == (0 if how == "sigterm" else -signal.SIGKILL), old.log()
        if how == "sigterm":
            # The drain cut the streams with the retryable trailer.
            assert "event=drain" in old.log()
        # Mid-epoch: at the restart the C consumers, paced by the shared
        # window, had not finished either.
        assert all(p.poll() is None for p, _, _ in cats), (waited, old.log())
        servers.append(Server(server_binary, _server_args(restart_ds, port, grace, sd),
                              workdir))
        assert servers[-1].port == port

        py.join(60)
        assert not py.is_alive(), "the DataLoader did not finish"
        assert py.error is None, repr(py.error)
        cat_keys = []
        for p, out, err in cats:
            assert p.wait(60) == 0, (out, open(err.name, "rb").read()[-2000:])
            err.close()
            keys, end = _tar_keys(out)
            assert end, out
            cat_keys += keys
            # The C client resumed by itself (and said so).
            assert b"reconnects=0 " not in open(err.name, "rb").read()
        if state:
            # With the state_dir kept, the restarted server found the
            # shard indexes: whatever its consumers needed from behind was
            # a seek, never a replay of the epoch from its start.
            st = json.loads(http_get(servers[-1], "/v1/jobs/train"))
            for ep in st["epochs"]:
                assert ep["seeks"]["replays"] == 0, ep
    finally:
        for p, _, err in cats:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
        for s in servers:
            s.stop()

    everything = py.keys + cat_keys
    dup = [k for k, n in Counter(everything).items() if n > 1]
    assert not dup, "delivered twice: %s" % dup[:10]
    assert set(everything) == set(restart_ds.by_key), \
        "missing: %s" % sorted(set(restart_ds.by_key) - set(everything))[:10]
    assert len(py.keys) == 2 * PER and len(cat_keys) == 2 * PER
    # The restarted server saw all four consumers come back mid-share.
    resumed = re.findall(r"event=request .* world=%d start=[1-9]" % W,
                         servers[-1].log(full=True))
    assert len(resumed) >= W, servers[-1].log()


def test_drain_trailer_asks_to_come_back(server_binary, workdir, medium_ds):
    """The wire form of the drain's cut, read raw: retryable, with advice.
    (26 MB of samples: more than the socket buffers hold, so the stream is
    still running when the drain cuts it.)"""
    srv = Server(server_binary, _server_args(medium_ds, 0, 0), workdir)
    try:
        s = FramesStream(srv, stream_path("train", 0, 0, 1))
        got = s.read_all(limit=5)
        srv.proc.send_signal(signal.SIGTERM)
        got += s.read_all()
        s.close()
        assert s.outcome == "error", s.outcome
        assert s.trailer == {"status": "error", "reason": "server shutting down",
                             "retryable": True, "retry_after_ms": 2000}
        assert [x["position"] for x in got] == list(range(len(got)))
        assert srv.proc.wait(30) == 0
    finally:
        srv.stop()
