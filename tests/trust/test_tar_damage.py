"""A tar header that fails its checksum inside a shard (issue: damaged
headers count): the sample that lost the member it began is a bad sample,
skipped and counted under on_error=skip, fatal under on_error=fail, never
delivered without that member. Where the damaged header's name cannot be
believed, both samples around it are bad. Every path: the epoch's feed,
its plan (indexed local shards), seeks and samples/{i}."""

import hashlib
import io
import json
import os
import tarfile

import pytest

from server_testlib import (FramesStream, get_json, read_share, request, stream_path,
                            wait_for)

SHARDS, PER_SHARD = 3, 20
# Which header of shard 1 is damaged (sample, member), where, and the
# samples that are bad then. In the "lone" cases that sample has one
# member only (its .bin).
DAMAGES = {
    # the first member's (.bin) mtime: its name says it is 7's, and 6 has
    # its .bin: only 7 is bad
    "first": (7, "bin", 140, 0x5A, {(1, 7)}),
    # the last member's (.cls): 7 has no .cls yet, so 7 lost it (and 8
    # has one, so it was not 8's)
    "last": (7, "cls", 140, 0x5A, {(1, 7)}),
    # the .bin's key turned into 6's: 6 has a .bin already, so the name is
    # not believed and the damage lies between 6 and 7: both are bad
    "name": (7, "bin", 5, ord("7") ^ ord("6"), {(1, 6), (1, 7)}),
    # a sample of one member: 6 and 8 have their .bin, so it was 7's own
    # and only 7 is lost (counted); in the second group (the index check
    # reads the first group up to the third) and in the last
    "lone": (7, "bin", 140, 0x5A, {(1, 7)}),
    "lone-second": (1, "bin", 140, 0x5A, {(1, 1)}),
    "lone-last": (PER_SHARD - 1, "bin", 140, 0x5A, {(1, PER_SHARD - 1)}),
}


def payload(s, i):
    return hashlib.sha256(b"%d/%d" % (s, i)).digest() * 100  # 3200 bytes


def make_shards(root, lone=None):
    os.makedirs(root, exist_ok=True)
    want = {}
    for s in range(SHARDS):
        path = os.path.join(root, "s%d.tar" % s)
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(PER_SHARD):
                key = "s%d_%03d" % (s, i)
                fields = [("bin", payload(s, i)), ("cls", b"%d" % i)]
                if (s, i) == lone:
                    fields = fields[:1]
                for ext, data in fields:
                    ti = tarfile.TarInfo("%s.%s" % (key, ext))
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))
                want[key] = (s, i)
    return want


def damage(root, how):
    i, ext, at, x, _ = DAMAGES[how]
    path = os.path.join(root, "s1.tar")
    with tarfile.open(path) as t:
        m = t.getmember("s1_%03d.%s" % (i, ext))
    with open(path, "r+b") as f:
        f.seek(m.offset + at)  # the checksum fails
        b = f.read(1)
        f.seek(m.offset + at)
        f.write(bytes([b[0] ^ x]))


def expected_hash(s, i):
    # server_testlib.content_hash over the two fields
    from server_testlib import content_hash
    return content_hash({"bin": payload(s, i), "cls": b"%d" % i})


def check_samples(samples, want, bad):
    keys = [x["key"] for x in samples]
    assert len(keys) == len(set(keys)), "a sample twice"
    good = {k for k, si in want.items() if si not in bad}
    assert set(keys) == good, (sorted(set(keys) ^ good))
    for x in samples:
        assert x["hash"] == expected_hash(*want[x["key"]]), x["key"]


@pytest.fixture(scope="module", params=sorted(DAMAGES))
def damaged_dir(workdir, request):
    root = os.path.join(workdir, "tar-damage-" + request.param)
    lone = (1, DAMAGES[request.param][0]) if request.param.startswith("lone") else None
    want = make_shards(root, lone)
    damage(root, request.param)
    return root, want, DAMAGES[request.param][4], request.param


def ready(srv, job):
    assert wait_for(lambda: get_json(srv, "/v1/jobs/" + job)["state"] == "ready", 60), srv.log()


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_damaged_header_is_a_counted_bad_sample(start, damaged_dir, workdir, plane):
    root, want, BAD, how = damaged_dir
    state = os.path.join(root + "-state-" + plane)
    srv = start("--job", "d", "--source", root, "--on-error", "skip", "--shuffle-buffer", "16",
                "--state-dir", state, "--data-plane", plane,
                # an odd count of good samples: no rank's share is cut even
                "--partition", "none")
    ready(srv, "d")
    # Epoch 0 (the feed reads and indexes the shards), then epoch 1 (the
    # plan, when the data plane may use it), two ranks each.
    for epoch in (0, 1):
        got = []
        for rank in range(2):
            samples, outcome, trailer = read_share(srv, "d", epoch, rank, 2)
            assert outcome == "end", (outcome, trailer, srv.log())
            got += samples
        check_samples(got, want, BAD)
    st = get_json(srv, "/v1/jobs/d")
    # counted once per epoch served, by the feed and by the plan alike
    assert st["skipped"]["samples"] == 2 * len(BAD), st["skipped"]
    if plane == "auto":
        assert st["data_plane"]["plan_streams"] >= 2, st["data_plane"]
    log = srv.wait_log("damaged tar header")
    assert "damaged tar header" in log, log[-3000:]
    # samples/{i}: the dataset's good samples in shard and tar order.
    dataset = sorted(k for k, si in want.items() if si not in BAD)
    for i in list(range(0, len(dataset), 5)) + [len(dataset) - 1]:
        st_, _, body = request(srv, "/v1/jobs/d/samples/%d" % i)
        assert st_ == 200, body[:300]
        assert dataset[i].encode() in body, (i, dataset[i])
    st_, _, body = request(srv, "/v1/jobs/d/samples/%d" % len(dataset))
    assert st_ == 404 and b"%d samples" % len(dataset) in body, body[:300]
    order, outcome, _ = read_share(srv, "d", 1, 0, 1)
    assert outcome == "end" and len(order) == len(want) - len(BAD)
    # A seek into the middle continues with the same samples.
    tail, outcome, _ = read_share(srv, "d", 1, 0, 1, start=len(order) // 2)
    assert outcome == "end"
    assert [x["key"] for x in tail] == [x["key"] for x in order[len(order) // 2:]]
    # Restarted on the same state_dir: the indexes are loaded and checked
    # against the shard (first and last groups), and agree with it.
    srv.stop()
    srv = start("--job", "d", "--source", root, "--on-error", "skip", "--shuffle-buffer", "16",
                "--state-dir", state, "--data-plane", plane, "--partition", "none")
    ready(srv, "d")
    again, outcome, _ = read_share(srv, "d", 1, 0, 1)
    assert outcome == "end"
    assert [x["key"] for x in again] == [x["key"] for x in order]
    # A seek to every position where a lost sample sits between groups:
    # the reader is placed at a good group, never at the damaged header.
    starts = range(len(order)) if how.startswith("lone") else [len(order) // 3]
    for start in starts:
        tail, outcome, _ = read_share(srv, "d", 1, 0, 1, start=start)
        assert outcome == "end", (start, outcome)
        assert [x["key"] for x in tail] == [x["key"] for x in order[start:]], start
    _, _, m = request(srv, "/metrics")
    assert b"shardcast_index_rejected_total{" not in m or \
        all(line.endswith(b" 0") for line in m.splitlines()
            if line.startswith(b"shardcast_index_rejected_total{")), \
        [line for line in m.splitlines() if b"index_rejected" in line]


def test_damaged_header_is_fatal_under_on_error_fail(start, damaged_dir):
    root, want, BAD, _ = damaged_dir
    srv = start("--job", "f", "--source", root, "--on-error", "fail",
                "--shuffle-buffer", "1")
    ready(srv, "f")
    s = FramesStream(srv, stream_path("f", 0, 0, 1))
    try:
        samples = s.read_all()
    finally:
        s.close()
    assert s.outcome == "error", (s.outcome, s.trailer)
    assert "damaged tar header" in json.dumps(s.trailer) or \
        "bad sample" in json.dumps(s.trailer), s.trailer
    # what came before the error is whole and right
    for x in samples:
        assert (want[x["key"]]) not in BAD
        assert x["hash"] == expected_hash(*want[x["key"]])
