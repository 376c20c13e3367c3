"""The Python client's ShardcastDataset against the real shardcastd, in both
wire formats: a torch DataLoader with workers, resume mid-epoch from
state_dict (same topology and elastic), reconnect after the connection is
reset by a proxy, and the errors for a server that is down or a job that
does not exist."""

import io
from collections import Counter

import pytest
import torch.utils.data

import shardcast
from shardcast import ShardcastConnectionError, ShardcastDataset, ShardcastHTTPError

from pyclient_support import FaultProxy, Rule, frames_supported, keys_of, reference_shares
from shardcast_testlib import field_dict

JOB = "train"
FORMATS = ["frames", "tar"]

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture
def server(small_server, request):
    """small_server, checked to speak the format the test is parametrized with."""
    fmt = request.node.callspec.params.get("fmt")
    if fmt == "frames":
        ok, why = frames_supported(small_server)
        if not ok:
            pytest.fail("shardcastd does not serve format=frames: %s" % why, pytrace=False)
    return small_server


def check_content(samples, wds):
    for s in samples:
        m = wds.by_key[s["__key__"]]
        assert shardcast.sample_hash(field_dict(s)) == m["hash"], s["__key__"]
        assert s["__shard__"].endswith("/" + m["shard"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_dataloader_with_workers(server, small_wds, fmt):
    ds = ShardcastDataset(server.url, JOB, rank=0, world=1, format=fmt, epoch=1)
    loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None)
    got = list(loader)
    ref = reference_shares(server, JOB, 1, 2)
    # In-order round robin over the two workers: consumer 0, 1, 0, 1, ...
    want = [s for pair in zip(ref[0], ref[1]) for s in pair]
    assert keys_of(got) == keys_of(want)
    assert [s["__index__"] for s in got] == list(range(len(got)))
    check_content(got, small_wds)


@pytest.mark.parametrize("fmt", FORMATS)
def test_resume_mid_epoch_from_state_dict(server, small_wds, fmt):
    """Batches of 5 from 2 workers; checkpoint after 9 batches (worker 0 one
    batch ahead); a new loader resumes with exactly the remaining samples."""
    def loader_for(ds):
        # collate_fn=list: mkwds samples differ in their fields.
        return torch.utils.data.DataLoader(ds, num_workers=2, batch_size=5, collate_fn=list)

    ds = ShardcastDataset(server.url, JOB, rank=0, world=1, format=fmt, epoch=2)
    loader = loader_for(ds)
    first = []
    for i, batch in enumerate(loader):
        first += keys_of(batch)
        if i + 1 == 9:
            break
    state = ds.state_dict(consumed=9, loader=loader)
    assert state["positions"] == {"0": 25, "1": 20}
    ds2 = ShardcastDataset(server.url, JOB, rank=0, world=1, format=fmt)
    ds2.load_state_dict(_roundtrip(state))
    rest = [k for batch in loader_for(ds2) for k in keys_of(batch)]
    ref = reference_shares(server, JOB, 2, 2)
    assert Counter(first + rest) == Counter(keys_of(ref[0] + ref[1]))
    assert len(first + rest) == small_wds.total // 2 * 2


def _roundtrip(state):
    """The state after torch.save / torch.load inside a checkpoint dict."""
    buf = io.BytesIO()
    torch.save({"step": 9, "loader": state}, buf)
    buf.seek(0)
    return torch.load(buf)["loader"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_elastic_resume_with_other_worker_count(server, small_wds, fmt):
    """3 workers stop after 12 samples (every consumer at position 4: the
    global cursor is 12); 2 workers continue from global_start=12."""
    ds = ShardcastDataset(server.url, JOB, rank=0, world=1, format=fmt, epoch=3)
    loader = torch.utils.data.DataLoader(ds, num_workers=3, batch_size=None)
    first = []
    for s in loader:
        first.append(s)
        if len(first) == 12:
            break
    state = ds.state_dict(consumed=12, loader=loader)
    assert shardcast.global_cursor(state["world"], 0, state["positions"]) == 12
    ds2 = ShardcastDataset(server.url, JOB, rank=0, world=1, format=fmt)
    ds2.load_state_dict(state)
    rest = list(torch.utils.data.DataLoader(ds2, num_workers=2, batch_size=None))
    got = first + rest
    assert [s["__index__"] for s in first] == list(range(12))
    # Y[12 ..] dealt to 2 consumers with even-drop: 12 + (N - 12) // 2 * 2 in all.
    n = small_wds.total
    assert sorted(s["__index__"] for s in got) == list(range(12 + (n - 12) // 2 * 2))
    assert len(set(keys_of(got))) == len(got), "a sample was delivered twice"
    check_content(got, small_wds)


@pytest.mark.parametrize("fmt", FORMATS)
def test_reconnect_after_reset(server, small_wds, fmt):
    """A proxy resets the first two stream connections mid-body; the dataset
    reconnects with start = the position reached and delivers the share
    exactly once."""
    rules = [Rule.reset(after_bytes=9000, count=1, path="/stream$"),
             Rule.reset(after_bytes=20000, count=1, path="/stream$")]
    with FaultProxy(upstream=server.url, rules=rules) as proxy:
        ds = ShardcastDataset(proxy.url, JOB, rank=0, world=1, format=fmt, epoch=4,
                              backoff=0.05)
        got = list(ds)
        assert [r["fired"] for r in proxy.rules()] == [1, 1]
    assert ds.reconnects == 2
    assert keys_of(got) == keys_of(reference_shares(server, JOB, 4, 1)[0])
    check_content(got, small_wds)


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_job(server, fmt):
    ds = ShardcastDataset(server.url, "no-such-job", rank=0, world=1, format=fmt)
    with pytest.raises(ShardcastHTTPError) as ei:
        list(ds)
    assert ei.value.status == 404 and "unknown job" in ei.value.reason


@pytest.mark.parametrize("fmt", FORMATS)
def test_server_down(start_server, small_wds, fmt):
    srv = start_server(small_wds.path, job=JOB)
    assert srv.stop() == 0, srv.log()
    ds = ShardcastDataset(srv.url, JOB, rank=0, world=1, format=fmt, timeout=5, retries=2,
                          backoff=0.05)
    with pytest.raises(ShardcastConnectionError,
                       match=r"127\.0\.0\.1:%d.*gave up after 3 attempts" % srv.port):
        list(ds)
