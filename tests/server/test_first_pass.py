"""The first pass over a dataset is planned (docs/architecture.md "The
plan"): an epoch whose shards are not indexed yet gets a plan that grows
while a planner thread indexes the shards in the order the interleave
opens them, and its streams read from it, waiting at its end.

test_first_epoch_of_a_fresh_server_comes_from_a_growing_plan: a random
dataset nobody indexed, a fresh server, every rank of epoch 0 at once.
Every stream is served from the plan (none from the feed), the job
counts one grown plan, and each rank's share is, sample for sample and
byte for byte, the share a --data-plane stream server (the feed) gives.
The next epoch is planned from the indexes the first pass made.

test_a_shard_that_fails_in_the_first_pass_is_journaled_like_the_feed:
a shard cut short mid-member and a shard that is not a tar at all, on
both planes: the same samples in the same order, the same END summary
naming the skipped shards.

test_a_first_pass_under_on_error_fail_fails_where_the_feed_fails: a
shard cut short, and in a second dataset a sample with a repeated field,
under on_error=fail: every rank of the planned first pass gets the feed's
samples at the feed's positions, then a non-retryable error trailer; no
stream comes from the feed, in epoch 0 or 1.

test_compressed_shards_with_stage_bytes_0_are_staged: a dataset with a
tar.gz shard and --stage-bytes 0 (deprecated: half the window) is staged
and planned in its first epoch, whole; the same when the gzip shard is
named .tar.

test_files_rewritten_during_a_planned_first_pass: every shard rewritten in
place (same size, other bytes) while the first pass is planned and read;
the consumer resumes after each cut or retryable error as the clients do,
and gets whole samples of one version each, no key twice, and the END
trailer; the plan's stream found the change (plan_failures).

test_s3_shards_are_staged_in_the_cache_and_planned: an s3 source (sizes
listed) with a shard cache that has room: the first pass is planned, each
shard fetched once into the cache by the read that indexes it; the same
shares as the feed's; the next epoch reads nothing from the store. The
same shards as a brace pattern over http (no sizes) are planned too, each
size asked of the store first.

test_a_cache_too_small_stages_the_first_pass_in_memory: a cache smaller
than a shard: the shards are staged in memory and the epoch planned, with
--stage-bytes 0 (deprecated: half the window) too; every sample once.

test_a_server_killed_in_the_first_pass_is_resumed_where_it_was: SIGKILL
mid-way through a planned first pass; a new server on the same state_dir
serves the rest from the position reached, and the two parts are the
feed's share, sample for sample.

test_the_growing_plan_waits_for_its_readers: with --plan-ahead-samples 64
the first pass parks short of the end while its only consumer does not
read, and grows again (the stream's kick) when it reads on.
"""

import os
import random
import sys

from plan_testlib import (data_plane, fetch, keys_fields, make_random_dataset,
                          parse_body, read_world_failing, require_planes,
                          stream_query)
from plan_testlib import read_world as plan_read_world
from server_testlib import get_json, read_when

SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "7171"))
WORLD = 4


def tag():
    return "[seed=%d]" % SEED


def serve(start, ds, plane, *extra):
    return start("--job", "t", "--source", ds.path, "--data-plane", plane,
                 "--prefetch", "false", "--stream-rate-limit", "0",
                 "--rate-limit", "0", "--max-new-epochs-per-minute", "0",
                 *extra)


def read_world(srv, epoch, fmt, world=WORLD):
    return plan_read_world(srv, epoch, world, fmt, what=tag(), timeout=120)


keys_and_fields = keys_fields


def test_first_epoch_of_a_fresh_server_comes_from_a_growing_plan(start, server_binary,
                                                                tmp_path):
    require_planes(server_binary, "auto", "stream")
    rng = random.Random(SEED)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 70), ("gnu", 40), ("pax", 90), ("ustar", 30),
                              ("empty", 0), ("pax", 55), ("gnu", 65)], "f")
    feed = serve(start, ds, "stream")
    plan = serve(start, ds, "auto", "--interleave", "3", "--shuffle-buffer", "50")
    feed2 = serve(start, ds, "stream", "--interleave", "3", "--shuffle-buffer", "50")
    for fmt in ("frames", "tar"):
        want = read_world(feed if fmt == "frames" else feed2, 0, fmt)
        srv = plan if fmt == "tar" else serve(start, ds, "auto")
        before = data_plane(get_json(srv, "/v1/jobs/t"))
        got = read_world(srv, 0, fmt)
        for r in range(WORLD):
            assert keys_and_fields(got[r]) == keys_and_fields(want[r]), (
                "%s %s rank %d: the planned first pass differs from the feed's "
                "(%d samples against %d)" % (tag(), fmt, r, len(got[r].samples),
                                             len(want[r].samples)))
            assert got[r].summary() == want[r].summary(), (tag(), fmt, r)
        dp = data_plane(get_json(srv, "/v1/jobs/t"))
        assert dp["plans_grown"] == before["plans_grown"] + 1, "%s %s" % (tag(), dp)
        assert dp["plan_streams"] == before["plan_streams"] + WORLD, "%s %s" % (tag(), dp)
        assert dp["feed_streams"] == before["feed_streams"], "%s %s" % (tag(), dp)
    # every key of the dataset once (even-drop keeps all but the tail)
    seen = [k for p in got for k, _ in keys_and_fields(p)]
    assert len(seen) == len(set(seen)), tag()
    assert len(seen) == (ds.total // WORLD) * WORLD, (tag(), len(seen), ds.total)
    # the next epoch is built whole from the indexes the first pass made
    # (epoch 0's plan that grew is counted built by the planner's thread
    # after its last step, which may come after the streams' END)
    before = read_when(lambda: data_plane(get_json(plan, "/v1/jobs/t")),
                       lambda d: d["plans"] >= 1)
    want = read_world(feed2, 1, "frames")
    got = read_world(plan, 1, "frames")
    for r in range(WORLD):
        assert keys_and_fields(got[r]) == keys_and_fields(want[r]), (tag(), r)
    dp = data_plane(get_json(plan, "/v1/jobs/t"))
    assert dp["plans"] == before["plans"] + 1, "%s %s" % (tag(), dp)
    assert dp["plans_grown"] == before["plans_grown"], "%s %s" % (tag(), dp)
    assert dp["feed_streams"] == before["feed_streams"], "%s %s" % (tag(), dp)


def test_a_shard_that_fails_in_the_first_pass_is_journaled_like_the_feed(
        start, server_binary, tmp_path):
    require_planes(server_binary, "auto", "stream")
    rng = random.Random(SEED + 1)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 60), ("pax", 80), ("gnu", 50), ("ustar", 40),
                              ("pax", 45)], "d")
    names = sorted(os.listdir(ds.path))
    # shard 1 cut inside a member (not on a block boundary), shard 3 made
    # of bytes that are no archive at all
    p1 = os.path.join(ds.path, names[1])
    size = os.path.getsize(p1)
    with open(p1, "r+b") as f:
        f.truncate(size // 2 + 100)
    with open(os.path.join(ds.path, names[3]), "wb") as f:
        f.write(bytes(rng.randrange(1, 256) for _ in range(3000)))
    for fmt in ("frames", "tar"):
        feed = serve(start, ds, "stream")
        plan = serve(start, ds, "auto")
        want = read_world(feed, 0, fmt, world=2)
        got = read_world(plan, 0, fmt, world=2)
        for r in range(2):
            assert keys_and_fields(got[r]) == keys_and_fields(want[r]), (
                "%s %s rank %d: %d samples against the feed's %d" % (
                    tag(), fmt, r, len(got[r].samples), len(want[r].samples)))
            assert got[r].summary() == want[r].summary(), (tag(), fmt, r)
        if fmt == "frames":
            skipped = got[0].trailer.get("skipped") or {}
            assert skipped.get("shards") == 2, "%s %s" % (tag(), got[0].trailer)
        dp = data_plane(get_json(plan, "/v1/jobs/t"))
        assert dp["plans_grown"] == 1 and dp["feed_streams"] == 0, "%s %s" % (tag(), dp)


def test_a_first_pass_under_on_error_fail_fails_where_the_feed_fails(
        start, server_binary, tmp_path):
    """on_error=fail: the first pass is planned too. A shard cut short (and,
    in a second dataset, a shard with one sample of a repeated field) fails
    the epoch at the same position of Y as on the feed: every rank gets the
    same samples, then the same error trailer, not retryable; the plan
    served every stream (no feed stream), and the next epoch too."""
    require_planes(server_binary, "auto", "stream")
    from server_testlib import make_dataset
    for case in ("cut", "bad"):
        d = str(tmp_path / case)
        man = make_dataset(d, shards=5, per_shard=60, size=1500, seed=SEED + 5,
                           prefix=case)
        ds = type("DS", (), {"path": d})
        victim = os.path.join(d, man["shards"][2]["file"])
        if case == "cut":
            size = os.path.getsize(victim)
            with open(victim, "r+b") as f:
                f.truncate(size // 2 + 100)  # inside a member's data
        else:
            # the member after the shard's middle one again: its sample
            # has a repeated field (bad)
            import io
            import tarfile
            with tarfile.open(victim) as t:
                ms = [(m, t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]
            k = len(ms) // 2
            tmp = victim + ".new"
            with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as t:
                for i, (m, data) in enumerate(ms):
                    t.addfile(m, io.BytesIO(data))
                    if i == k:
                        t.addfile(m, io.BytesIO(data))
            os.replace(tmp, victim)
        # a small buffer: samples go out before the failure
        args = ("--on-error", "fail", "--shuffle-buffer", "8", "--interleave", "2")
        for fmt in ("frames", "tar"):
            for world in (1, 3):
                feed = serve(start, ds, "stream", *args)
                plan = serve(start, ds, "auto", *args)
                want = read_world_failing(feed, 0, world, fmt, what=tag())
                got = read_world_failing(plan, 0, world, fmt, what=tag())
                what = "%s %s %s world %d" % (tag(), case, fmt, world)
                for r in range(world):
                    wst, _, wp = want[r]
                    gst, _, gp = got[r]
                    assert wst == gst == 200, (what, r, wst, gst)
                    assert wp.outcome == "error", (what, r, wp.summary())
                    assert gp.outcome == "error", (what, r, gp.summary())
                    assert not gp.retryable_error(), (what, r, gp.summary())
                    assert len(gp.samples) > 0, (what, r, gp.summary())
                    assert keys_and_fields(gp) == keys_and_fields(wp), (
                        "%s rank %d: %d samples against the feed's %d" % (
                            what, r, len(gp.samples), len(wp.samples)))
                    assert [s["position"] for s in gp.samples] == \
                        [s["position"] for s in wp.samples], (what, r)
                    # the same failure (a bad sample's own text is the
                    # shard reader's on the feed, the index's on a plan)
                    if case == "cut":
                        assert gp.trailer["reason"] == wp.trailer["reason"], (
                            what, r, gp.trailer, wp.trailer)
                    else:
                        assert gp.trailer["reason"].startswith("bad sample: ") and \
                            wp.trailer["reason"].startswith("bad sample: "), (
                                what, r, gp.trailer, wp.trailer)
                dp = data_plane(get_json(plan, "/v1/jobs/t"))
                assert dp["plans_grown"] == 1 and dp["feed_streams"] == 0, \
                    "%s %s" % (what, dp)
                # the next epoch fails the same way, planned from the indexes
                want = read_world_failing(feed, 1, 1, fmt, what=tag())
                got = read_world_failing(plan, 1, 1, fmt, what=tag())
                assert keys_and_fields(got[0][2]) == keys_and_fields(want[0][2]), what
                assert got[0][2].outcome == want[0][2].outcome == "error", what
                dp = data_plane(get_json(plan, "/v1/jobs/t"))
                assert dp["feed_streams"] == 0, "%s %s" % (what, dp)
                feed.stop()
                plan.stop()


def test_compressed_shards_with_stage_bytes_0_are_staged(start, server_binary, tmp_path):
    """--stage-bytes 0 (deprecated: half the window) kept compressed shards
    on the feed, their indexes holding no byte offsets; they are staged
    decompressed and planned now, every sample once. The same gzip stream
    named .tar too: found by its first bytes, not its name, so one
    request (no resume) still reads the whole epoch."""
    require_planes(server_binary, "auto")
    rng = random.Random(SEED + 2)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 30), ("targz", 30), ("pax", 30)], "z")
    srv = serve(start, ds, "auto", "--stage-bytes", "0")
    got = read_world(srv, 0, "frames", world=1)[0]
    assert sorted(k for k, _ in keys_and_fields(got)) == sorted(ds.by_key), tag()
    dp = data_plane(get_json(srv, "/v1/jobs/t"))
    assert dp["plans_grown"] == 1 and dp["feed_streams"] == 0, "%s %s" % (tag(), dp)
    (gz,) = [n for n in os.listdir(ds.path) if n.endswith(".tar.gz")]
    os.rename(os.path.join(ds.path, gz), os.path.join(ds.path, gz[:-3]))
    srv = serve(start, ds, "auto", "--stage-bytes", "0")
    got = read_world(srv, 0, "tar", world=1)[0]
    assert sorted(k for k, _ in keys_and_fields(got)) == sorted(ds.by_key), tag()
    dp = data_plane(get_json(srv, "/v1/jobs/t"))
    assert dp["plans_grown"] == 1 and dp["feed_streams"] == 0, "%s %s" % (tag(), dp)


def read_resuming(srv, job, epoch, fmt, first_chunk=None, tries=30):
    """One consumer's whole share (rank 0 of 1), read as a client does:
    after a cut or a retryable error it opens the stream again at the
    position reached. first_chunk(): called once after the first 512 KiB."""
    from plan_testlib import RawResponse
    samples, start = [], 0
    for _ in range(tries):
        r = RawResponse(srv.host, srv.port, stream_query(job, epoch, 0, 1, fmt, start=start),
                        rcvbuf=32 << 10)
        try:
            assert r.status == 200, "%s status %s" % (tag(), r.status)
            if first_chunk:
                r.read_until(512 << 10)
                first_chunk()
                first_chunk = None
            r.read_all()
            body, complete = bytes(r.body), r.complete
        finally:
            r.close()
        p = parse_body(fmt, body)
        samples += p.samples
        start += len(p.samples)
        if p.outcome == "end" and complete:
            return samples, p
        assert p.outcome == "cut" or p.retryable_error(), "%s %s" % (tag(), p.summary())
    raise AssertionError("%s no END after %d tries" % (tag(), tries))


def test_files_rewritten_during_a_planned_first_pass(start, server_binary, tmp_path):
    """The first pass over files rewritten in place while the plan grows
    and is read (same size, other bytes): a consumer that resumes after
    each cut or retryable error gets whole samples only, each of one
    version of its file, no key twice, and the END trailer."""
    require_planes(server_binary, "auto")
    from test_feed_changes import SERVER_ARGS, whole_samples
    from test_plan_faults import FaultDataset
    ds = FaultDataset(str(tmp_path / "data"), SEED + 3, 6, 80)
    srv = start("--job", "t", "--source", ds.path, "--state-dir",
                str(tmp_path / "state"), *SERVER_ARGS)

    def rewrite_all():
        for s in range(6):
            ds.rewrite(s)

    samples, last = read_resuming(srv, "t", 0, "tar", first_chunk=rewrite_all)

    class P:
        pass
    p = P()
    p.samples = samples
    seen = whole_samples(ds, p, "a planned first pass over files rewritten in place")
    assert seen, tag()
    # (a stream's failure is counted when the server releases it, after
    # the client read its trailer)
    dp = read_when(lambda: data_plane(get_json(srv, "/v1/jobs/t")),
                   lambda d: d["plans_grown"] >= 1 and d["plan_failures"] >= 1)
    # the plan's stream found the change and the rest came from the feed
    assert dp["plans_grown"] >= 1 and dp["plan_failures"] >= 1, "%s %s" % (tag(), dp)


def test_s3_shards_are_staged_in_the_cache_and_planned(start, server_binary, tmp_path):
    """An s3 source (its listing gives every shard's size) with a shard
    cache that has room for them: the first pass is planned too, each shard
    fetched once, into the cache, by the read that indexes it, and read by
    the streams from its cache entry; the same shares as the feed's; the
    next epoch is built whole and reads nothing from the store. The same
    source as a brace pattern over http (no sizes) is planned too: each
    step asks its shard's size of the store (a HEAD) first."""
    require_planes(server_binary, "auto", "stream")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from support.s3rver import S3rver
    from server_testlib import Nginx
    rng = random.Random(SEED + 4)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 60), ("pax", 70), ("gnu", 40), ("ustar", 50),
                              ("pax", 30)], "h")
    names = sorted(os.listdir(ds.path))
    with S3rver() as s3:
        s3.create_bucket("firstpass")
        s3.upload_dir("firstpass", ds.path, prefix="d/")
        env = dict(s3.env())
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        common = ("--job", "t", "--source", "s3://firstpass/d/", "--prefetch", "false",
                  "--stream-rate-limit", "0", "--rate-limit", "0",
                  "--max-new-epochs-per-minute", "0")
        feed = start(*common, "--data-plane", "stream", env=env)
        want = read_world(feed, 0, "frames")
        plan = start(*common, "--data-plane", "auto", "--cache-bytes", "256MiB", env=env)
        got = read_world(plan, 0, "frames")
        for r in range(WORLD):
            assert keys_and_fields(got[r]) == keys_and_fields(want[r]), (tag(), r)
            assert got[r].summary() == want[r].summary(), (tag(), r)
        dp = data_plane(get_json(plan, "/v1/jobs/t"))
        assert dp["plans_grown"] == 1 and dp["feed_streams"] == 0, "%s %s" % (tag(), dp)
        assert dp["plan_streams"] == WORLD, "%s %s" % (tag(), dp)
        tar_bytes = sum(os.path.getsize(os.path.join(ds.path, n)) for n in names)
        # every shard fetched once, into the cache, by the step that
        # indexed it (an entry is complete once its fill has synced it,
        # which may come after the streams read its last bytes)
        st = read_when(lambda: get_json(plan, "/v1/jobs")["cache"],
                       lambda c: c["store_bytes"] == tar_bytes and c["complete"] == len(names))
        assert st["store_bytes"] == tar_bytes and st["complete"] == len(names), (tag(), st)
        want1 = read_world(feed, 1, "tar")
        got1 = read_world(plan, 1, "tar")
        for r in range(WORLD):
            assert keys_and_fields(got1[r]) == keys_and_fields(want1[r]), (tag(), r)
        st1 = get_json(plan, "/v1/jobs")["cache"]
        assert st1["store_bytes"] == tar_bytes, (tag(), st1)
        # (epoch 0's plan that grew is counted by the planner's thread)
        dp1 = read_when(lambda: data_plane(get_json(plan, "/v1/jobs/t")),
                        lambda d: d["plans"] == 2)
        assert dp1["plans"] == 2 and dp1["feed_streams"] == 0, "%s %s" % (tag(), dp1)
    ng = Nginx(ds.path, str(tmp_path))
    try:
        src = "http://127.0.0.1:%d/h-{000000..%06d}.tar" % (ng.port, len(names) - 1)
        srv = start("--job", "t", "--source", src, "--data-plane", "auto",
                    "--cache-bytes", "256MiB", "--prefetch", "false",
                    "--stream-rate-limit", "0", "--rate-limit", "0",
                    "--max-new-epochs-per-minute", "0")
        got = read_world(srv, 0, "frames")
        for r in range(WORLD):
            assert keys_and_fields(got[r]) == keys_and_fields(want[r]), (tag(), r)
        dp = data_plane(get_json(srv, "/v1/jobs/t"))
        assert dp["plans_grown"] == 1 and dp["feed_streams"] == 0, "%s %s" % (tag(), dp)
        st = read_when(lambda: get_json(srv, "/v1/jobs")["cache"],
                       lambda c: c["store_bytes"] == tar_bytes and c["complete"] == len(names))
        assert st["store_bytes"] == tar_bytes and st["complete"] == len(names), (tag(), st)
    finally:
        ng.stop()


def test_a_cache_too_small_stages_the_first_pass_in_memory(start, server_binary, tmp_path,
                                                           workdir):
    """The same http source with a shard cache smaller than one shard: no
    shard can be filled into the cache, so each is staged in memory and
    the epoch is planned, every sample once. With --stage-bytes 0 as well
    (deprecated: half the window) the same."""
    require_planes(server_binary, "auto")
    from server_testlib import Nginx
    rng = random.Random(SEED + 5)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 60), ("pax", 70), ("gnu", 40)], "s")
    ng = Nginx(ds.path, workdir)
    try:
        names = sorted(os.listdir(ds.path))
        src = "http://127.0.0.1:%d/s-{000000..%06d}.tar" % (ng.port, len(names) - 1)
        for extra, planned in (((), True), (("--stage-bytes", "0"), True)):
            srv = start("--job", "t", "--source", src, "--data-plane", "auto",
                        "--cache-bytes", "64KiB", "--prefetch", "false",
                        "--stream-rate-limit", "0", "--rate-limit", "0",
                        "--max-new-epochs-per-minute", "0", *extra)
            samples, last = read_resuming(srv, "t", 0, "frames")
            keys = [s["key"] for s in samples]
            assert len(keys) == len(set(keys)) == ds.total, (tag(), len(keys), ds.total)
            assert {s["key"]: s["fields"] for s in samples} == {
                k: f for k, (_, f) in ds.by_key.items()}, tag()
            dp = data_plane(get_json(srv, "/v1/jobs/t"))
            if planned:
                assert dp["plans_grown"] == 1 and dp["feed_streams"] == 0, (tag(), dp)
                st = get_json(srv, "/v1/jobs/t")["staging"]
                assert st["shards"] == len(names), (tag(), st)
            else:
                assert dp["plans_grown"] == 0 and dp["feed_streams"] >= 1, (tag(), dp)
            srv.stop()
    finally:
        ng.stop()


def test_a_server_killed_in_the_first_pass_is_resumed_where_it_was(server_binary, tmp_path,
                                                                    workdir):
    """SIGKILL while the first pass is planned and read; a new server on
    the same state_dir: the consumer resumes at the position it reached
    (start=) and gets the rest, and together the two parts are the feed's
    share of epoch 0, sample for sample."""
    require_planes(server_binary, "auto", "stream")
    from plan_testlib import RawResponse
    from server_testlib import Server
    rng = random.Random(SEED + 6)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 90), ("pax", 80), ("gnu", 70), ("ustar", 60)], "k")
    state = str(tmp_path / "state")
    common = ["--job", "t", "--source", ds.path, "--prefetch", "false",
              "--stream-rate-limit", "0", "--rate-limit", "0",
              "--max-new-epochs-per-minute", "0", "--interleave", "2",
              "--shuffle-buffer", "40"]
    ref = Server(server_binary, common + ["--data-plane", "stream"], workdir)
    try:
        st, _, body, complete, _ = fetch(ref, stream_query("t", 0, 0, 1, "frames"))
        want = keys_and_fields(parse_body("frames", body))
    finally:
        ref.stop()
    srv = Server(server_binary, common + ["--state-dir", state], workdir)
    port = srv.port
    try:
        r = RawResponse(srv.host, srv.port, stream_query("t", 0, 0, 1, "frames"),
                        rcvbuf=32 << 10)
        assert r.status == 200
        r.read_until(256 << 10)
        first = parse_body("frames", bytes(r.body))
        dp = data_plane(get_json(srv, "/v1/jobs/t"))
        assert dp["plans_grown"] == 1 and dp["plan_streams"] == 1, "%s %s" % (tag(), dp)
        srv.proc.kill()
        srv.proc.wait(30)
        r.close()
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    got = keys_and_fields(first)
    assert 0 < len(got) < len(want), (tag(), len(got), len(want))
    srv2 = Server(server_binary, common + ["--state-dir", state, "--port", str(port)],
                  workdir)
    try:
        st, _, body, complete, _ = fetch(
            srv2, stream_query("t", 0, 0, 1, "frames", start=len(got)))
        rest = parse_body("frames", body)
        assert st == 200 and complete and rest.outcome == "end", (tag(), rest.summary())
        assert got + keys_and_fields(rest) == want, (
            "%s %d + %d samples, the feed's share has %d" % (
                tag(), len(got), len(rest.samples), len(want)))
        dp = data_plane(get_json(srv2, "/v1/jobs/t"))
        assert dp["plan_streams"] == 1 and dp["feed_streams"] == 0, "%s %s" % (tag(), dp)
    finally:
        rc = srv2.stop()
        assert rc in (0, None), srv2.log()


def test_the_growing_plan_waits_for_its_readers(start, server_binary, tmp_path):
    """--plan-ahead-samples 64: the first pass decides at most that far
    ahead of its furthest stream, then waits for the streams. A consumer
    that stops reading holds the plan short of the epoch's end (what its
    socket buffers hold aside); once it reads on, the plan grows again
    (the stream asks for the next step when it comes near the end) and the
    consumer gets the whole epoch, every sample once."""
    require_planes(server_binary, "auto")
    from plan_testlib import RawResponse, wait_until
    from test_plan_faults import FaultDataset
    ds = FaultDataset(str(tmp_path / "data"), SEED + 7, 12, 60)  # 720 x ~100 KB
    srv = start("--job", "t", "--source", ds.path, "--plan-ahead-samples", "64",
                "--interleave", "2", "--shuffle-buffer", "8", "--prefetch", "false",
                "--stream-rate-limit", "0", "--rate-limit", "0",
                "--max-new-epochs-per-minute", "0")

    def epoch0():
        st = get_json(srv, "/v1/jobs/t")
        return [e for e in st["epochs"] if e["epoch"] == 0][0]

    r = RawResponse(srv.host, srv.port, stream_query("t", 0, 0, 1, "frames"),
                    rcvbuf=32 << 10)
    try:
        assert r.status == 200
        r.read_until(64 << 10)
        # the plan exists and has parked: its steps stop short of the end
        # while the consumer does not read (the socket buffers hold a few
        # MiB: tens of samples of ~100 KB, far fewer than 720)
        e = wait_until(lambda: (lambda x: x if x.get("plan") else None)(epoch0()), 30,
                       "the epoch's plan")
        assert not e["plan"]["complete"] and e["plan"]["samples"] < ds.orig.total, (
            tag(), e["plan"])
        r.read_all()
        p = parse_body("frames", bytes(r.body))
    finally:
        r.close()
    keys = [s["key"] for s in p.samples]
    assert p.outcome == "end" and len(keys) == len(set(keys)) == ds.orig.total, (
        tag(), p.summary())
    e = epoch0()
    assert e["plan"]["complete"] and e["plan"]["samples"] == ds.orig.total, (tag(), e["plan"])
