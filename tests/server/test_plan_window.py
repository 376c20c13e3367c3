"""An epoch longer than a plan keeps is planned with a window
(docs/architecture.md "The data plane"): with --plan-keep-samples 1 and
--plan-ahead-samples 500 a plan holds about 9,000 of the epoch's 24,000
items; chunks behind the readers are let go and made again from the
order's checkpoints for a reader that comes back to them.

test_a_long_epoch_is_planned_with_a_window: epoch 0 (the first pass) and
epoch 1 (every shard indexed: too long for a whole plan) of two ranks
are served from windowed plans, never from the feed, and each rank's
share is, sample for sample, the share a --data-plane stream server (the
feed) gives. The plan let chunks go and held no more than its window.
Then a consumer reads rank 0's share of epoch 1 again from the start,
and another resumes rank 1 at 90% of its share: the chunks they need are
made again, and both get the feed's samples.

test_a_long_mixed_epoch_is_planned_with_a_window: the same for a mixed
job (two sources of 12 shards, weights 0.5 / 0.5, one drawn with
replacement, an epoch_size of 24,000): a mixed order's checkpoints hold
each source's open pass, so its chunks are made again too.
"""

import io
import json
import os
import random
import tarfile

from plan_testlib import (data_plane, fetch, keys_fields, parse_body,
                          stream_query)
from plan_testlib import read_world as plan_read_world
from server_testlib import get_json, request, wait_for

SHARDS = 24
PER_SHARD = 1000
WORLD = 2


def make_small_dataset(path, seed):
    """SHARDS shards of PER_SHARD samples of two small members each."""
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    for s in range(SHARDS):
        with tarfile.open(os.path.join(path, "w-%06d.tar" % s), "w",
                          format=tarfile.USTAR_FORMAT) as tf:
            for g in range(PER_SHARD):
                key = "w%02d/%06d" % (s, g)
                for ext, data in (("cls", b"%d" % rng.randrange(1000)),
                                  ("txt", os.urandom(rng.randrange(1, 200)))):
                    ti = tarfile.TarInfo("%s.%s" % (key, ext))
                    ti.size = len(data)
                    ti.mtime = 0
                    tf.addfile(ti, io.BytesIO(data))
    return path


def serve(start, path, plane, *extra):
    return start("--job", "t", "--source", path, "--data-plane", plane,
                 "--prefetch", "false", "--stream-rate-limit", "0",
                 "--rate-limit", "0", "--max-new-epochs-per-minute", "0",
                 *extra)


def read_world(srv, epoch, world=WORLD):
    return [keys_fields(p) for p in plan_read_world(srv, epoch, world,
                                                     timeout=300)]


def keys_of(resp, epoch, rank):
    st, _, body, complete, _ = resp
    assert st == 200 and complete, "epoch %d rank %d: %s %r" % (
        epoch, rank, st, body[:300])
    p = parse_body("frames", body)
    assert p.outcome == "end", "epoch %d rank %d: %s" % (epoch, rank,
                                                         p.summary())
    return [(s["key"], s["fields"]) for s in p.samples]


def window_of(srv, epoch):
    st = get_json(srv, "/v1/jobs/t")
    for e in st.get("epochs", []):
        if isinstance(e, dict) and e.get("epoch") == epoch and e.get("plan"):
            return e["plan"].get("window")
    return None


def test_a_long_epoch_is_planned_with_a_window(start, tmp_path):
    path = make_small_dataset(str(tmp_path / "ds"), 4242)
    total = SHARDS * PER_SHARD
    feed = serve(start, path, "stream")
    srv = serve(start, path, "auto", "--plan-keep-samples", "1",
                "--plan-ahead-samples", "500", "--max-epochs", "4")
    for epoch in (0, 1):
        want = read_world(feed, epoch)
        before = data_plane(get_json(srv, "/v1/jobs/t"))
        got = read_world(srv, epoch)
        after = data_plane(get_json(srv, "/v1/jobs/t"))
        assert sum(len(g) for g in got) == total
        for r in range(WORLD):
            assert got[r] == want[r], (
                "epoch %d rank %d: the windowed plan's share differs from "
                "the feed's (%d samples against %d)" % (
                    epoch, r, len(got[r]), len(want[r])))
        assert after["feed_streams"] == before["feed_streams"], after
        assert after["plan_streams"] == before["plan_streams"] + WORLD, after
        w = window_of(srv, epoch)
        assert w is not None, get_json(srv, "/v1/jobs/t")
        assert w["released_chunks"] > 0, w
        assert w["checkpoints"] >= 2, w
        # held: the window (the ahead bound and two chunks of 4,096),
        # rounded to chunks, and the chunk being written
        assert w["held_samples"] <= 5 * 4096, w
        if epoch == 1:
            want1 = want
    check_rereads(srv, want1)


def check_rereads(srv, want1):
    """Rank 0 of epoch 1 again from the start (its chunks were let go)
    and rank 1 resumed at 90% of its share: the shares of want1, the
    window's chunks refilled."""
    again = keys_of(fetch(srv, stream_query("t", 1, 0, WORLD, "frames")), 1, 0)
    assert again == want1[0]
    at = len(want1[1]) * 9 // 10
    tail = keys_of(fetch(srv, stream_query("t", 1, 1, WORLD, "frames",
                                           start=at)), 1, 1)
    assert tail == want1[1][at:]
    w = window_of(srv, 1)
    assert w["refilled_chunks"] > 0, w


ADMIN = "window-admin-5d2e"


def put_mixed(srv, d1, d2):
    spec = {"seed": 11, "shuffle_buffer": 300, "interleave": 3,
            "epoch_size": SHARDS * PER_SHARD,
            "sources": [{"name": "a", "source": d1, "weight": 0.5},
                        {"name": "b", "source": d2, "weight": 0.5,
                         "sampling": "with_replacement"}]}
    st, _, data = request(srv, "/v1/jobs/t", method="PUT", token=ADMIN,
                          body=json.dumps(spec).encode(),
                          headers={"Content-Type": "application/json"})
    assert st in (200, 201), data
    assert wait_for(lambda: get_json(srv, "/v1/jobs/t")["state"] == "ready", 60)


def test_a_long_mixed_epoch_is_planned_with_a_window(start, tmp_path):
    path = make_small_dataset(str(tmp_path / "ds"), 4343)
    d1, d2 = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(d1)
    os.makedirs(d2)
    for s in range(SHARDS):
        name = "w-%06d.tar" % s
        os.rename(os.path.join(path, name),
                  os.path.join(d1 if s < SHARDS // 2 else d2, name))
    common = ("--admin-token", ADMIN, "--prefetch", "false",
              "--stream-rate-limit", "0", "--rate-limit", "0",
              "--max-new-epochs-per-minute", "0")
    feed = start(*common, "--data-plane", "stream")
    srv = start(*common, "--data-plane", "auto", "--plan-keep-samples", "1",
                "--plan-ahead-samples", "500", "--max-epochs", "4")
    put_mixed(feed, d1, d2)
    put_mixed(srv, d1, d2)
    for epoch in (0, 1):
        want = read_world(feed, epoch)
        got = read_world(srv, epoch)
        assert sum(len(g) for g in got) == SHARDS * PER_SHARD
        for r in range(WORLD):
            assert got[r] == want[r], (
                "epoch %d rank %d: the windowed mixed plan's share differs "
                "from the feed's (%d samples against %d)" % (
                    epoch, r, len(got[r]), len(want[r])))
        w = window_of(srv, epoch)
        assert w is not None and w["released_chunks"] > 0, w
        assert w["checkpoints"] >= 2 and w["held_samples"] <= 5 * 4096, w
        if epoch == 1:
            want1 = want
    dp = data_plane(get_json(srv, "/v1/jobs/t"))
    assert dp["feed_streams"] == 0 and dp["plans_grown"] >= 1, dp
    check_rereads(srv, want1)
    assert data_plane(get_json(srv, "/v1/jobs/t"))["feed_streams"] == 0
