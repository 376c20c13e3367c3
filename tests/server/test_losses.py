"""Every loss is told (docs/http-api.md "The END summary").

A sample the epoch loses is in no share's order, so no consumer sees it
go missing; the END summary tells each consumer what the epoch lost up to
its share's last item, and the Python client warns once per epoch.

The dataset has one loss of every kind the data can make: two bad samples
(a repeated field), a sample whose member header is damaged (checksum), a
sample over --max-sample-bytes, a shard truncated on
a block boundary, a shard whose first header is damaged (unreadable) and
a shard that goes away after the job listed it.

test_every_loss_reaches_every_share: three ranks of epochs 0, 1 and 2 on
both data planes (the feed reads epoch 0 and indexes it; the plan serves
epochs 1 and 2), frames and tar: every share's END tells 2 shards and 4
samples, names them (shards by URL, samples by shard URL and number in
the shard);
the samples delivered are exactly the others, once.

test_both_planes_tell_the_same_bytes: epoch 1 in a world of 4 from a
server on each plane: the same objects, share by share.

test_a_share_is_told_what_was_lost_before_its_last_item: without a
shuffle buffer, in a world of one sample per share: a share is told the
losses the order found before its last item, not those found after.

test_a_consumer_resuming_at_its_end_after_a_restart_is_told: a share
resumed at its end on a restarted server is told the same losses.

test_a_store_404_mid_epoch_is_told: a shard removed from the store (nginx)
after the job listed it: the epoch loses it, and the END and the client
say so.

test_the_python_client_warns_once_per_epoch: ShardcastDataset logs one
warning per epoch and process, with the counts and the first names.

test_a_mixed_epoch_tells_the_same_on_both_planes: a mixed job's shares
are told the same losses by the feed and by the plan.

test_a_repeat_quota_counts_a_lossy_source_as_its_epochs_read_it: a
repeat quota over the lossy dataset: the job is ready (a shard that fails
counts up to where it fails), every kept sample comes `repeat` times, and
each pass's losses are told.
test_every_replica_tells_a_part_the_same: two replicas of one service
tell a part's shares the same, whichever serves them; the parts' losses
add up to the dataset's.

test_the_c_client_warns_once_per_epoch: shardcast cat (the C library's
default) writes one warning line on stderr, tar and frames alike.
"""

import io
import json
import logging
import os
import random
import subprocess
import tarfile

import pytest

import shardcast
from plan_testlib import (cli_binary, fetch, parse_body, read_world, require_planes,
                          stream_query)
from server_testlib import Nginx, get_json, request, shard_url, wait_for

SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "4242"))
SHARDS = 6          # t-000000 .. t-000005, and t-000006 (MISSING)
PER_SHARD = 30
SAMPLE_MAX = 64 << 10
BAD = {(1, 3), (1, 17)}       # (shard, sample): a repeated .cls
BIG = {(2, 8)}                # over SAMPLE_MAX
TRUNC = (3, 20)               # shard 3 cut after sample 20's .bin
DAMAGED = (5, 12)             # the .cls header's checksum broken
CORRUPT = 4                   # its first header damaged
MISSING = 6                   # listed, then removed before the epoch


def write_shard(path, s, rng):
    """A USTAR shard: its bytes and, per sample, its key, fields and the
    end of its .bin member."""
    buf = io.BytesIO()
    samples = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(PER_SHARD):
            key = "l%d/%06d" % (s, i)
            size = 3 * SAMPLE_MAX if (s, i) in BIG else rng.randrange(100, 2000)
            fields = {"bin": rng.randbytes(size), "cls": b"%d" % rng.randrange(10)}
            members = [("bin", fields["bin"]), ("cls", fields["cls"])]
            if (s, i) in BAD:
                members.append(("cls", b"again"))
            ends, starts = {}, {}
            for ext, data in members:
                ti = tarfile.TarInfo("%s.%s" % (key, ext))
                ti.size = len(data)
                ti.mtime = 0
                starts.setdefault(ext, buf.tell())
                tf.addfile(ti, io.BytesIO(data))
                ends.setdefault(ext, buf.tell())
            samples.append({"key": key, "fields": fields, "ends": ends,
                            "starts": starts})
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return data, samples


def make_ds(d, seed, gone=False):
    """The dataset; returns (samples the epoch keeps: key -> fields, the
    lost shards' names, the lost samples as (name, number)). gone: the
    caller removes shard MISSING once the job listed it."""
    rng = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    keep, lost_samples = {}, set()
    for s in range(SHARDS + 1):
        name = "t-%06d.tar" % s
        data, samples = write_shard(os.path.join(d, name), s, rng)
        if s == TRUNC[0]:
            with open(os.path.join(d, name), "wb") as f:
                f.write(data[:samples[TRUNC[1]]["ends"]["bin"]])
        if s == CORRUPT:
            with open(os.path.join(d, name), "r+b") as f:
                f.write(b"\xff" * 512)
        if s == DAMAGED[0]:
            # a byte of the header's mtime field: its checksum fails, the
            # member is lost with the header and its sample is bad
            with open(os.path.join(d, name), "r+b") as f:
                f.seek(samples[DAMAGED[1]]["starts"]["cls"] + 136)
                f.write(b"7")
        for i, smp in enumerate(samples):
            if (s, i) in BAD or (s, i) in BIG or (s, i) == DAMAGED:
                lost_samples.add((name, i))
                continue
            if s == CORRUPT or (gone and s == MISSING) or \
                    (s == TRUNC[0] and i >= TRUNC[1]):
                continue
            keep[smp["key"]] = smp["fields"]
    lost_shards = {"t-%06d.tar" % s
                   for s in (TRUNC[0], CORRUPT) + ((MISSING,) if gone else ())}
    return keep, lost_shards, lost_samples


def check_told(sk, lost_shards, lost_samples, what):
    """An END summary's "skipped" tells every loss: counts and names."""
    assert isinstance(sk, dict), (what, sk)
    assert sk.get("shards") == len(lost_shards), (what, sk)
    assert sk.get("samples") == len(lost_samples), (what, sk)
    assert "partial" not in sk, (what, sk)
    assert {os.path.basename(u) for u in sk["shard_urls"]} == lost_shards, (what, sk)
    refs = {(os.path.basename(r["url"]), r["sample"]) for r in sk["sample_refs"]}
    assert refs == lost_samples, (what, sk)


def serve(start, source, plane, *extra, remove=None):
    """A server of job t; remove: a file taken away once the job listed
    it (a shard the store loses)."""
    srv = start("--job", "t", "--source", source, "--data-plane", plane,
                "--on-error", "skip", "--max-sample-bytes", str(SAMPLE_MAX),
                "--shuffle-buffer", "64", "--prefetch", "false",
                "--stream-rate-limit", "0", "--rate-limit", "0",
                "--max-new-epochs-per-minute", "0", *extra)
    if remove:
        assert wait_for(lambda: get_json(srv, "/v1/jobs/t")["state"] == "ready", 60)
        if os.path.exists(remove):
            os.unlink(remove)
    return srv


def lossy_and_clean(tmp_path, seed, nclean, first):
    """The lossy dataset (make_ds) and a clean one of nclean shards (shard
    numbers from first on, for their keys): their paths and make_ds's
    result."""
    lossy = str(tmp_path / "lossy")
    made = make_ds(lossy, seed)
    clean = tmp_path / "clean"
    clean.mkdir()
    rng = random.Random(seed + 1)
    for s in range(nclean):
        write_shard(str(clean / ("c-%06d.tar" % s)), s + first, rng)
    return lossy, clean, made


def serve_mixed(start, plane, spec):
    """A server with job m of spec (PUT as the admin): the server and the
    job's status once it is ready or failed."""
    srv = start("--admin-token", "adm", "--data-plane", plane,
                "--max-sample-bytes", str(SAMPLE_MAX), "--prefetch", "false",
                "--stream-rate-limit", "0", "--rate-limit", "0",
                "--max-new-epochs-per-minute", "0")
    st, _, body = request(srv, "/v1/jobs/m", method="PUT", token="adm",
                          body=json.dumps(spec).encode(),
                          headers={"Content-Type": "application/json"})
    assert st in (200, 201), body
    wait_for(lambda: get_json(srv, "/v1/jobs/m")["state"] in ("ready", "failed"), 60)
    return srv, get_json(srv, "/v1/jobs/m")


def missing_path(d):
    return os.path.join(d, "t-%06d.tar" % MISSING)


def read_checked(srv, epoch, world, fmt, keep, lost_shards, lost_samples, what):
    """Every share of a world: samples once, exactly those kept; each
    END tells every loss. Returns the shares' "skipped" objects."""
    got, told = {}, []
    for r, p in enumerate(read_world(srv, epoch, world, fmt=fmt, what=what)):
        for smp in p.samples:
            assert smp["key"] not in got, (what, "twice", smp["key"])
            got[smp["key"]] = smp["fields"]
        sk = (p.trailer or {}).get("skipped")
        check_told(sk, lost_shards, lost_samples, "%s rank %d" % (what, r))
        told.append(sk)
    # even-drop: at most world - 1 samples of the epoch are dropped
    assert set(got) <= set(keep), (what, sorted(set(got) - set(keep))[:5])
    assert len(keep) - len(got) < world, (what, len(keep), len(got))
    for k, fields in got.items():
        assert fields == keep[k], (what, k)
    return told


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_every_loss_reaches_every_share(start, server_binary, tmp_path, plane):
    require_planes(server_binary, plane)
    d = str(tmp_path / "ds")
    keep, lost_shards, lost_samples = make_ds(d, SEED)
    srv = serve(start, d, plane, "--state-dir", str(tmp_path / "state"))
    told = {}
    for epoch in (0, 1, 2):
        for fmt in ("frames", "tar"):
            e = epoch if fmt == "frames" else epoch + 3
            told[(epoch, fmt)] = read_checked(
                srv, e, 3, fmt, keep, lost_shards, lost_samples,
                "%s epoch %d %s" % (plane, e, fmt))
    st = get_json(srv, "/v1/jobs/t")
    if plane == "auto":
        # the later epochs came from the plan
        assert st["data_plane"]["plan_streams"] >= 3, st["data_plane"]
    assert srv.stop() == 0


def test_both_planes_tell_the_same_bytes(start, server_binary, tmp_path):
    """Epoch 1 of a server on each plane, the shares of a world of 4:
    the same END "skipped" object, share by share."""
    require_planes(server_binary, "stream", "auto")
    d = str(tmp_path / "ds")
    keep, lost_shards, lost_samples = make_ds(d, SEED + 1)
    told = []
    for plane in ("stream", "auto"):
        srv = serve(start, d, plane)
        read_checked(srv, 0, 1, "frames", keep, lost_shards, lost_samples, plane)
        told.append(read_checked(srv, 1, 4, "frames", keep, lost_shards,
                                 lost_samples, plane + " epoch 1"))
        if plane == "auto":
            st = get_json(srv, "/v1/jobs/t")
            assert st["data_plane"]["plan_streams"] >= 4, st["data_plane"]
        assert srv.stop() == 0
    assert told[0] == told[1]


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_a_share_is_told_what_was_lost_before_its_last_item(
        start, server_binary, tmp_path, plane):
    """No shuffle buffer and one slot: the epoch is the shards one after
    the other. A world of 2 of a two-shard dataset whose second shard (in
    the epoch's order) has a bad sample, and a world so large that some
    shares end before the order reaches it: those are not told it, the
    others are; the count never depends on the plane."""
    require_planes(server_binary, plane)
    d = tmp_path / "two"
    d.mkdir()
    rng = random.Random(SEED + 2)
    for s in range(2):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(10):
                for ext in ("bin", "cls") + (("cls",) if i == 5 else ()):
                    data = rng.randbytes(50)
                    ti = tarfile.TarInfo("s%d/%03d.%s" % (s, i, ext))
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        (d / ("u-%06d.tar" % s)).write_bytes(buf.getvalue())
    srv = start("--job", "t", "--source", str(d), "--data-plane", plane,
                "--on-error", "skip", "--shuffle-buffer", "1", "--interleave", "1",
                "--prefetch", "false", "--stream-rate-limit", "0",
                "--rate-limit", "0", "--max-new-epochs-per-minute", "0")
    for epoch in (0, 1):
        # world 1: the share ends at the epoch's end: both bad samples
        (p,) = read_world(srv, epoch, 1, what="world 1")
        assert len(p.samples) == 18
        sk = p.trailer["skipped"]
        assert sk["samples"] == 2 and sk["shards"] == 0, sk
        # With no buffer, input k is emitted when input k + 1 comes in. The
        # first shard of the order ends (its bad sample found) when the
        # interleave looks for input 9, after Y[0..7] went out; the second
        # at the input's end, after Y[0..16]. In a world of 18 share r is
        # Y[r] alone: shares 0-7 are told nothing, 8-16 one bad sample,
        # 17 both.
        shares = read_world(srv, epoch + 2, 18, what="world 18")
        counts = [(p.trailer.get("skipped") or {}).get("samples", 0) for p in shares]
        assert counts == [0] * 8 + [1] * 9 + [2], counts
    assert srv.stop() == 0


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_a_store_404_mid_epoch_is_told(start, server_binary, tmp_path, plane):
    """A shard that the job listed and the store no longer has (404): the
    epoch loses it and every share is told."""
    require_planes(server_binary, plane)
    # the same with local files: one removed after the listing
    d = str(tmp_path / "local")
    keep, lost_shards, lost_samples = make_ds(d, SEED + 5, gone=True)
    srv = serve(start, d, plane, remove=missing_path(d))
    for epoch in (0, 1):
        told = read_checked(srv, epoch, 2, "frames", keep, lost_shards,
                            lost_samples, "%s local epoch %d" % (plane, epoch))
        assert told[0] == told[1]
    assert srv.stop() == 0
    d = str(tmp_path / "remote")
    rng = random.Random(SEED + 3)
    # over HTTP: nginx answers 404
    keep = {}
    os.makedirs(d)
    for s in range(4):
        _, samples = write_shard(os.path.join(d, "r-%06d.tar" % s), s + 10, rng)
        if s != 2:
            keep.update({smp["key"]: smp["fields"] for smp in samples})
    ng = Nginx(d, str(tmp_path))
    try:
        srv = serve(start, shard_url(ng, d), plane)
        assert wait_for(lambda: get_json(srv, "/v1/jobs/t")["state"] == "ready", 60)
        os.unlink(os.path.join(d, "r-000002.tar"))
        read_checked(srv, 0, 2, "frames", keep, {"r-000002.tar"}, set(), plane + " 404")
        assert srv.stop() == 0
    finally:
        ng.stop()


@pytest.mark.parametrize("on_error", ["skip", "fail"])
def test_a_local_shard_gone_after_the_listing_is_planned(start, server_binary, tmp_path,
                                                          on_error):
    """A local shard removed after the job listed it: the epoch is the
    plan's (it was the feed's, from its start: the plan asked each local
    shard's first bytes and could not open that one). The plan meets the
    shard where the order opens it, as the feed did: under on_error=skip
    both planes give every share the same samples and the same END;
    under on_error=fail both end every share with the same error where
    the order reaches the shard."""
    require_planes(server_binary, "stream", "auto")
    d = str(tmp_path / "ds")
    os.makedirs(d)
    rng = random.Random(SEED + 6)
    for s in range(5):
        write_shard(os.path.join(d, "g-%06d.tar" % s), s + 20, rng)
    gone = os.path.join(d, "g-000002.tar")
    got = {}
    for plane in ("stream", "auto"):
        srv = serve(start, os.path.join(d, "g-{000000..000004}.tar"), plane,
                    "--on-error", on_error)
        assert wait_for(lambda: get_json(srv, "/v1/jobs/t")["state"] == "ready", 60)
        os.rename(gone, gone + ".away")
        shares = []
        for r in range(2):
            st, _, body, _, _ = fetch(srv, stream_query("t", 0, r, 2, "frames"))
            assert st == 200, (plane, r, st)
            p = parse_body("frames", body)
            trailer = dict(p.trailer or {})
            trailer.pop("elapsed_ms", None)
            shares.append(([(x["key"], x["fields"]) for x in p.samples], p.outcome,
                           trailer))
        got[plane] = shares
        dp = get_json(srv, "/v1/jobs/t")["data_plane"]
        if plane == "auto":
            assert dp["plan_streams"] == 2 and dp["feed_streams"] == 0, dp
        assert srv.stop() == 0
        os.rename(gone + ".away", gone)
    for r in range(2):
        assert got["auto"][r] == got["stream"][r], (on_error, r, got["auto"][r][1:],
                                                    got["stream"][r][1:])
        want = "end" if on_error == "skip" else "error"
        assert got["auto"][r][1] == want, (on_error, r, got["auto"][r][1:])
        if on_error == "skip":
            assert got["auto"][r][2]["skipped"]["shard_urls"] == [gone], got["auto"][r][2]
        else:
            assert "g-000002.tar" in got["auto"][r][2]["reason"], got["auto"][r][2]


def test_the_python_client_warns_once_per_epoch(start, tmp_path, caplog):
    d = str(tmp_path / "ds")
    keep, lost_shards, lost_samples = make_ds(d, SEED + 4, gone=True)
    source = os.path.join(d, "t-{000000..%06d}.tar" % MISSING)
    srv = serve(start, source, "auto", remove=missing_path(d))
    caplog.set_level(logging.WARNING, logger="shardcast")
    for epoch in (0, 1):
        for rank in (0, 1):
            ds = shardcast.ShardcastDataset(srv.url, "t", rank=rank, world=2, epoch=epoch)
            n = sum(1 for _ in ds)
            assert n == len(keep) // 2
    told = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert len(told) == 2, told  # one per epoch, not one per share
    for epoch, msg in zip((0, 1), told):
        assert ("epoch %d of job t lost" % epoch) in msg, msg
        assert "%d shard(s) skipped or cut short" % len(lost_shards) in msg, msg
        assert "%d bad sample(s) skipped" % len(lost_samples) in msg, msg
        for name in lost_shards:
            assert name in msg, (name, msg)
        for name, i in lost_samples:
            assert "%s sample %d" % (name, i) in msg, msg
    assert srv.stop() == 0


def test_the_c_client_warns_once_per_epoch(start, server_binary, tmp_path):
    """shardcast cat (the C client library's default): one warning line on
    stderr per epoch and process, with the counts and the first names."""
    cli = cli_binary(server_binary)
    d = str(tmp_path / "ds")
    keep, lost_shards, lost_samples = make_ds(d, SEED + 6)
    srv = serve(start, d, "auto")
    for fmt in ("tar", "frames"):
        r = subprocess.run([cli, "cat", "-o", os.devnull, "--format", fmt,
                            "--server", srv.url, "--job", "t", "--epoch", "0",
                            "--rank", "0", "--world", "1"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        told = [ln for ln in r.stderr.splitlines() if "lost" in ln]
        assert len(told) == 1, r.stderr
        msg = told[0]
        assert ("epoch 0 of job t lost %d shard(s) (skipped or cut short) and %d "
                "bad sample(s)" % (len(lost_shards), len(lost_samples))) in msg, msg
        for name in lost_shards:
            assert name in msg, (name, msg)
        for name, i in lost_samples:
            assert "%s sample %d" % (name, i) in msg, msg
    assert srv.stop() == 0


def test_a_mixed_epoch_tells_the_same_on_both_planes(start, server_binary, tmp_path):
    """A mix of the lossy dataset and a clean one: the source passes find
    the losses as they read (a pass that meets its quota before a shard's
    end never finds what that shard lost); both planes tell each share of
    a world of 3 the same, in epochs 0 and 1."""
    require_planes(server_binary, "stream", "auto")
    lossy, clean, _ = lossy_and_clean(tmp_path, SEED + 7, 3, 20)
    spec = {"seed": 3, "shuffle_buffer": 32, "interleave": 2, "on_error": "skip",
            "epoch_size": 300,
            "sources": [{"name": "lossy", "source": lossy, "weight": 0.7},
                        {"name": "clean", "source": str(clean), "weight": 0.3}]}
    told = {}
    for plane in ("stream", "auto"):
        srv, job = serve_mixed(start, plane, spec)
        assert job["state"] == "ready", job
        for epoch in (0, 1):
            told[(plane, epoch)] = [(p.trailer or {}).get("skipped") for p in
                                    read_world(srv, epoch, 3, job="m", what=plane)]
        if plane == "auto":
            assert get_json(srv, "/v1/jobs/m")["data_plane"]["plan_streams"] >= 3
        assert srv.stop() == 0
    for epoch in (0, 1):
        assert told[("stream", epoch)] == told[("auto", epoch)], epoch
        for sk in told[("auto", epoch)]:
            # 210 samples of the lossy source's 137 a pass: its first pass
            # is read to its end, and every loss of it found
            assert sk and sk["shards"] >= 2 and sk["samples"] >= 3, sk


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_a_repeat_quota_counts_a_lossy_source_as_its_epochs_read_it(
        start, server_binary, tmp_path, plane):
    """A repeat quota needs the source's sample count before the epoch:
    under on_error=skip a shard that cannot be read to its end counts the
    samples before where it fails, as the epoch's readers find them, and
    the job is ready. Every kept sample comes exactly `repeat` times and
    the END tells the losses, once per pass that found them."""
    require_planes(server_binary, plane)
    lossy, clean, (keep, lost_shards, lost_samples) = lossy_and_clean(
        tmp_path, SEED + 11, 2, 30)
    spec = {"seed": 5, "shuffle_buffer": 32, "interleave": 2, "on_error": "skip",
            "sources": [{"name": "lossy", "source": lossy, "repeat": 2},
                        {"name": "clean", "source": str(clean), "repeat": 1}]}
    srv, job = serve_mixed(start, plane, spec)
    assert job["state"] == "ready", job
    for epoch in (0, 1):
        got = {}
        for r, p in enumerate(read_world(srv, epoch, 2, job="m",
                                         what="%s epoch %d" % (plane, epoch))):
            for smp in p.samples:
                got.setdefault(smp["key"], []).append(smp["fields"])
            # each of the source's two passes finds and counts the losses
            sk = (p.trailer or {}).get("skipped")
            what = "%s epoch %d rank %d" % (plane, epoch, r)
            assert sk and "partial" not in sk, (what, sk)
            assert sk["shards"] == 2 * len(lost_shards), (what, sk)
            assert sk["samples"] == 2 * len(lost_samples), (what, sk)
            assert sorted(os.path.basename(u) for u in sk["shard_urls"]) == \
                sorted(2 * list(lost_shards)), (what, sk)
            assert sorted((os.path.basename(x["url"]), x["sample"])
                          for x in sk["sample_refs"]) == \
                sorted(2 * list(lost_samples)), (what, sk)
        lossy_got = {k: v for k, v in got.items() if k in keep}
        assert set(lossy_got) == set(keep), (plane, epoch, len(lossy_got), len(keep))
        for k, v in lossy_got.items():
            assert v == [keep[k]] * 2, (plane, epoch, k, len(v))
        others = set(got) - set(keep)
        assert len(others) == 2 * PER_SHARD and \
            all(len(got[k]) == 1 for k in others), (plane, epoch, len(others))
    assert srv.stop() == 0


def test_every_replica_tells_a_part_the_same(start, tmp_path):
    """Two replicas of one service (--replicas 2): part J's shares read
    from its home replica and from the other one (a failover stream) are
    told the same; the parts' losses add up to the dataset's."""
    d = str(tmp_path / "ds")
    keep, lost_shards, lost_samples = make_ds(d, SEED + 9)
    reps = [serve(start, d, "auto", "--replica", str(j), "--replicas", "2")
            for j in range(2)]
    shards = samples = 0
    for epoch in (0, 1):
        for part in (0, 1):
            told = []
            for via in reps:
                for rank in (0, 1):
                    r = shardcast.FramesReader(shardcast.stream_url(
                        via.url, "t", epoch, rank, 2, fmt="frames", replica=part))
                    with r:
                        n = sum(1 for _ in r)
                        assert n > 0
                        told.append(r.trailer.get("skipped"))
            assert all(sk == told[0] for sk in told), (epoch, part, told)
            if epoch == 0:
                sk = told[0] or {"shards": 0, "samples": 0}
                shards += sk["shards"]
                samples += sk["samples"]
    assert (shards, samples) == (len(lost_shards), len(lost_samples))
    for srv in reps:
        assert srv.stop() == 0


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_a_consumer_resuming_at_its_end_after_a_restart_is_told(
        start, server_binary, tmp_path, plane):
    """A consumer whose connection broke just before its END comes back to
    a restarted server at its share's end: the new server's readers of
    the epoch find the losses again, and the END tells the same (not
    "partial")."""
    require_planes(server_binary, plane)
    d = str(tmp_path / "ds")
    keep, lost_shards, lost_samples = make_ds(d, SEED + 10)
    state = str(tmp_path / "state")
    srv = serve(start, d, plane, "--state-dir", state)
    before = read_checked(srv, 1, 2, "frames", keep, lost_shards, lost_samples,
                          plane + " before")
    ends = [p.trailer["position"] for p in read_world(srv, 1, 2)]
    assert srv.stop() == 0
    srv = serve(start, d, plane, "--state-dir", state)
    for rank in (0, 1):
        r = shardcast.FramesReader(shardcast.stream_url(
            srv.url, "t", 1, rank, 2, fmt="frames", start=ends[rank]))
        with r:
            assert list(r) == []
            assert r.trailer["skipped"] == before[rank], (rank, r.trailer)
    assert srv.stop() == 0
