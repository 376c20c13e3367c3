"""Local shard files that change under the feed, and shards replaced
between epochs.

The feed reads a local shard as a stream of reads from one descriptor
(backend_file.c): a file rewritten in place while it is read would give
the bytes before the change and the bytes after it to one sample. Every
read is checked against the file as it was opened (its size and
modification time): a file that moved fails the shard's read as changed,
never a sample made of two versions. A file replaced by a rename between
epochs is indexed again (its index describes another file), so the epochs
after it are planned again.

test_rewrite_in_place_during_first_pass: a dataset of 6 shards of ~8 MB,
a server whose feed holds little ahead (2 MiB window, a shuffle buffer of
8 samples, 2 shards open), one consumer of epoch 0 (the first pass, served
by the feed: --data-plane stream; with the default the first pass is
planned, and tests/server/test_first_pass.py changes files under that). It reads 512 KiB, every shard file is rewritten in place (same
size, other bytes), and it reads to the end. Every sample must be whole:
its fields all of the original file or all of the new one, never a mix.
The shards that were being read when their files changed are skipped,
counted and logged as changed (on_error=skip), so the stream ends with
its END trailer, no key twice.

test_replaced_shard_is_indexed_again: epoch 0 read whole (the shards are
indexed), then shard 0 is replaced by a rename with a version of other
sizes. Epoch 1 must deliver the new version (and every other sample)
exactly once; after it the job knows the new length, and epoch 2 must
come from a plan again (data_plane.plan_streams grows), with the same
samples.

The second test runs with --data-plane auto (the default) only.
"""

import os

from plan_testlib import (RawResponse, data_plane, fetch, parse_body,
                          require_planes, stream_query, wait_indexed,
                          wait_until)
from server_testlib import get_json
from test_plan_faults import FaultDataset

SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "7321"))
SHARDS = 6
PER_SHARD = 80            # of 40-160 KB: ~8 MB a shard, twice the read-ahead
PAUSE_BYTES = 512 << 10
RCVBUF = 32 << 10
SERVER_ARGS = ["--data-plane", "auto", "--prefetch", "false",
               "--window-bytes", "2MiB", "--shuffle-buffer", "8",
               "--shuffle-buffer-bytes", "2MiB", "--interleave", "2",
               "--stream-rate-limit", "0", "--rate-limit", "0",
               "--max-new-epochs-per-minute", "0"]


def tag():
    return "[seed=%d]" % SEED


def whole_samples(ds, parsed, what):
    """Every sample is one version of its key, whole; no key twice."""
    seen, wrong = set(), []
    for smp in parsed.samples:
        k = smp["key"]
        assert k not in seen, "%s %s: key %s twice" % (tag(), what, k)
        seen.add(k)
        if k not in ds.versions:
            wrong.append("%s: unknown key" % k)
        elif smp["fields"] not in ds.versions[k]:
            sizes = {f: len(v) for f, v in smp["fields"].items()}
            wrong.append("%s: fields %s are no version of the sample (a torn "
                         "sample: parts of two versions of its file)" % (k, sizes))
    assert not wrong, "%s %s: %d wrong samples of %d, e.g.\n  %s" % (
        tag(), what, len(wrong), len(parsed.samples), "\n  ".join(wrong[:6]))
    return seen


def read_epoch(srv, job, epoch, fmt="tar"):
    st, _, body, complete, _ = fetch(srv, stream_query(job, epoch, 0, 1, fmt))
    assert st == 200, "%s epoch %d: status %s" % (tag(), epoch, st)
    p = parse_body(fmt, body)
    assert p.outcome == "end" and complete, "%s epoch %d: %s" % (tag(), epoch, p.summary())
    return p


def test_rewrite_in_place_during_first_pass(start, server_binary, tmp_path):
    require_planes(server_binary, "stream")
    ds = FaultDataset(str(tmp_path / "data"), SEED, SHARDS, PER_SHARD)
    args = list(SERVER_ARGS)
    args[args.index("auto")] = "stream"
    srv = start("--job", "t", "--source", ds.path, "--state-dir",
                str(tmp_path / "state"), *args)
    r = RawResponse(srv.host, srv.port, stream_query("t", 0, 0, 1, "tar"), rcvbuf=RCVBUF)
    try:
        assert r.status == 200
        r.read_until(PAUSE_BYTES)
        for s in range(SHARDS):
            ds.rewrite(s)
        r.read_all()
        body, complete = bytes(r.body), r.complete
    finally:
        r.close()
    p = parse_body("tar", body)
    assert p.outcome == "end" and complete, "%s %s" % (tag(), p.summary())
    seen = whole_samples(ds, p, "epoch 0 over files rewritten in place")
    # The shards being read when their files changed cannot have been read
    # whole before (2 open at a time, each 4x what the feed holds ahead):
    # their reads failed as changed, and the shards were skipped.
    wait_until(lambda: get_json(srv, "/v1/jobs/t").get("skipped", {}).get("shards", 0) >= 1,
               60, "a shard counted as skipped")
    assert "changed while it was read" in srv.wait_log("changed while it was read"), tag()
    assert len(seen) < ds.orig.total, "%s every sample arrived" % tag()


def test_replaced_shard_is_indexed_again(start, server_binary, tmp_path):
    require_planes(server_binary, "auto")
    ds = FaultDataset(str(tmp_path / "data"), SEED + 1, SHARDS, PER_SHARD)
    srv = start("--job", "t", "--source", ds.path, "--state-dir",
                str(tmp_path / "state"), *SERVER_ARGS)
    p0 = read_epoch(srv, "t", 0)
    assert {s["key"] for s in p0.samples} == set(ds.orig.by_key)
    wait_indexed(srv, "t", ds.orig.total)

    ds.replace(0, same_size=False)
    # the same keys, other sizes and bytes: each key's newest version
    expect = {k: (v[-1] if ds.shard_of(k) == ds.name(0) else v[0])
              for k, v in ds.versions.items()}

    def check(p, epoch):
        got = {}
        for smp in p.samples:
            assert smp["key"] not in got, "%s epoch %d: %s twice" % (tag(), epoch, smp["key"])
            got[smp["key"]] = smp["fields"]
        missing = set(expect) - set(got)
        extra = set(got) - set(expect)
        assert not missing and not extra, "%s epoch %d: %d missing, %d extra, e.g. %s" % (
            tag(), epoch, len(missing), len(extra), sorted(missing | extra)[:4])
        bad = [k for k in got if got[k] != expect[k]]
        assert not bad, "%s epoch %d: %d samples are not the files' bytes, e.g. %s" % (
            tag(), epoch, len(bad), bad[:4])

    check(read_epoch(srv, "t", 1), 1)
    wait_indexed(srv, "t", len(expect))
    before = data_plane(get_json(srv, "/v1/jobs/t"))["plan_streams"]
    check(read_epoch(srv, "t", 2), 2)
    after = data_plane(get_json(srv, "/v1/jobs/t"))
    assert after["plan_streams"] == before + 1, (
        "%s epoch 2 after the replaced shard was read again is not served "
        "from a plan: %s" % (tag(), after))
