"""The data plane's byte identity (docs/order.md "The order of an epoch", "Seekable
epochs", "HTTP API (v1)"): a stream served from an epoch's plan (the order
Y computed from the shard indexes, sample bytes read straight from the
shard files) is EXACTLY the response the feed path gives, for every job,
epoch, rank, world, start, global_start, fields filter, format and
partition policy.

Two servers read the same datasets: A with --data-plane stream (every
stream from the epoch's feed), B with --data-plane auto (a plan where the
epoch qualifies), each with its own state dir. The datasets are random
(seeded; plan_testlib's own tar/zip writer): ustar (with names split into
the prefix field), GNU long names, pax paths and records, 1-4 fields of
0 bytes to ~200 KiB, upper-case and multi-dot extensions, bad samples (a
repeated field), skipped members (directories, top-level __*__ names,
names without a dot) and a shard of skipped members only.

- eligible (d1: indexed ahead by `shardcast index`; d2: indexed by reading
  epoch 0 once on each server; d3: a dataset with a zip and a .tar.gz
  shard, staged; a mixed job of two weighted sources and an epoch_size; an
  objects source): B must serve from plans (a staged epoch's streams
  far ahead come from its feed, as designed).

Every partition policy is a job of its own (partition is a job key). For
each job, random combinations (epochs, world 1..5 with every rank, start
and global_start including past the end, fields filters, both formats) are
fetched from A and B at once and the whole bodies (chunked coding decoded)
compared byte for byte, with the status, content type and whether the body
ended properly. A request answered 429/503, or a body ending with a
retryable error trailer (a seek limit), is asked again on both servers.

Seeds: three by default, or SHARDCAST_PLAN_SEED alone; every failure
message names the seed.
Planes: plan_testlib.DATA_PLANES / SHARDCAST_PLAN_TEST_PLANES
(default,default checks the harness against a server without the flag).
"""

import concurrent.futures
import json
import os
import random
import subprocess
import time
import warnings

import pytest

from plan_testlib import (binary_has_data_plane, cli_binary, data_plane, fetch,
                          make_objects_dataset, make_random_dataset, parse_body,
                          plane_args, planes, require_planes, stream_query,
                          wait_indexed, wait_until)
from server_testlib import Server, get_json, read_when, request

# Each seed is a set of datasets, jobs and requests of its own; set
# SHARDCAST_PLAN_SEED to run one seed alone (e.g. the one a failure names).
SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "424242"))
SEEDS = [SEED] if "SHARDCAST_PLAN_SEED" in os.environ else [SEED, SEED + 1, SEED + 2]
_current = {"seed": SEED}
POLICIES = ("even-drop", "even-pad", "none")
EPOCHS = (1, 2, 3)
# combinations (a world with every rank) per job
COMBOS_ELIGIBLE = 30
COMBOS_FALLBACK = 12
RETRY_DEADLINE = 60.0  # seconds a refused/retryable request is asked again

SERVER_ARGS = [
    "--stream-rate-limit", "0", "--rate-limit", "0",
    "--max-new-epochs-per-minute", "0", "--max-epochs", "8",
    "--max-feeds-per-job", "64", "--join-timeout-ms", "300",
    "--rejoin-grace-ms", "300", "--lag-grace-ms", "300", "--drain-grace", "2",
]


def tag():
    return "[seed=%d planes=%s]" % (_current["seed"], ",".join(planes()))


def rand_job(rng, name, source, policy, **extra):
    j = {"name": name, "source": source, "partition": policy,
         "seed": rng.randrange(1 << 40),
         "shuffle_buffer": rng.choice([1, 5, 40, 1000]),
         "interleave": rng.choice([1, 2, 3, 5]),
         "shuffle_buffer_bytes": rng.choice([0, 96 * 1024, 1 << 20, 256 << 20])}
    j.update(extra)
    return j


class Pair:
    """Servers A and B on the same config, each with its own state dir."""

    def __init__(self, binary, root, config, prepare=None):
        self.binary = binary
        self.servers = []
        self.planes = planes()
        try:
            for name, plane in zip("AB", self.planes):
                state = os.path.join(root, "state-" + name)
                os.makedirs(state, exist_ok=True)
                if prepare:
                    prepare(state)
                self.servers.append(Server(binary, ["--config", config, "--state-dir",
                                                    state] + SERVER_ARGS + plane_args(plane),
                                           root))
        except BaseException:
            for s in self.servers:
                s.stop()
            raise
        self.a, self.b = self.servers
        self.pool = concurrent.futures.ThreadPoolExecutor(2)

    def stop(self):
        self.pool.shutdown()
        bad = []
        for s in self.servers:
            rc = s.stop()
            if rc not in (0, None):
                bad.append("%s: exit %s\n%s" % (" ".join(s.args), rc, s.log()))
        return bad

    def status(self, job):
        return get_json(self.a, "/v1/jobs/" + job), get_json(self.b, "/v1/jobs/" + job)


def fetch_settled(server, path, fmt):
    """A response that is not a refusal to come back later: retried on
    429/503 and on a retryable error trailer, within RETRY_DEADLINE."""
    end = time.monotonic() + RETRY_DEADLINE
    while True:
        st, ct, body, complete, hdrs = fetch(server, path)
        retry = st in (429, 503)
        if st == 200 and not complete:
            retry = parse_body(fmt, body).retryable_error()
        if not retry or time.monotonic() > end:
            return st, ct, body, complete
        time.sleep(min(0.2, float(hdrs.get("retry-after", "0.2") or 0.2)))


def first_diff(x, y):
    n = min(len(x), len(y))
    for i in range(0, n, 4096):
        if x[i:i + 4096] != y[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if x[j] != y[j]:
                    return j
    return n


def compare(pair, path, fmt):
    """None if A and B answered the same bytes, else a description."""
    fa = pair.pool.submit(fetch_settled, pair.a, path, fmt)
    fb = pair.pool.submit(fetch_settled, pair.b, path, fmt)
    ra, rb = fa.result(), fb.result()
    if ra == rb:
        return None, ra
    sa, sb = ra[0], rb[0]
    msg = "%s %s: A %s %s %d bytes complete=%s / B %s %s %d bytes complete=%s" % (
        tag(), path, sa, ra[1], len(ra[2]), ra[3], sb, rb[1], len(rb[2]), rb[3])
    if sa == sb == 200:
        msg += "; first difference at byte %d" % first_diff(ra[2], rb[2])
        msg += "\n   A: " + parse_body(fmt, ra[2]).summary()[:400]
        msg += "\n   B: " + parse_body(fmt, rb[2]).summary()[:400]
    else:
        msg += "\n   A: %r\n   B: %r" % (ra[2][:300], rb[2][:300])
    return msg, ra


def random_requests(rng, job, n_total, epochs, count, field_names):
    """count combinations: [(path, fmt)] with every rank of each world."""
    out = []
    for _ in range(count):
        epoch = rng.choice(epochs)
        world = rng.randint(1, 5)
        fmt = rng.choice(["tar", "frames"])
        fields = None
        r = rng.random()
        if r < 0.35:
            fields = rng.sample(field_names, rng.randint(1, min(3, len(field_names))))
            if rng.random() < 0.2:
                fields.append("nosuchfield")
        share = -(-n_total // world)
        mode = rng.choice(["plain", "start", "start", "global", "global", "past", "both"])
        gs = None
        if mode in ("global", "both"):
            gs = rng.randint(0, n_total + world + 1)
        if mode == "past":
            gs = n_total + rng.randint(0, 3 * world) if rng.random() < 0.5 else None
        for rank in range(world):
            start = None
            if mode in ("start", "both"):
                start = rng.randint(0, share + 2)
            elif mode == "past" and gs is None:
                start = share + rng.randint(0, 4)
            out.append((stream_query(job, epoch, rank, world, fmt, start=start,
                                     global_start=gs, fields=fields), fmt))
    return out


def run_requests(pair, reqs, mismatches, stats):
    for path, fmt in reqs:
        msg, r = compare(pair, path, fmt)
        stats["requests"] += 1
        stats["status_%d" % r[0]] = stats.get("status_%d" % r[0], 0) + 1
        if msg:
            mismatches.append(msg)
        elif r[0] == 200:
            # the same bytes, and a whole share: not two equal failures
            p = parse_body(fmt, r[2])
            stats["bytes"] += len(r[2])
            stats["samples"] += len(p.samples)
            if p.outcome != "end" or not r[3] or p.problem:
                mismatches.append("%s %s: both ended badly: %s" % (tag(), path, p.summary()))


def model_check(body, fmt, expected, what):
    """A whole epoch read as one consumer holds exactly the expected
    samples (key -> fields): the generator and the parsers agree with the
    server before anything is compared."""
    p = parse_body(fmt, body)
    assert p.outcome == "end", "%s %s: %s" % (tag(), what, p.summary())
    got = {s["key"]: s["fields"] for s in p.samples}
    assert len(got) == len(p.samples), "%s %s: a key twice" % (tag(), what)
    assert got.keys() == expected.keys(), (
        "%s %s: keys differ: missing %s, extra %s" % (
            tag(), what, sorted(expected.keys() - got.keys())[:5],
            sorted(got.keys() - expected.keys())[:5]))
    wrong = [k for k in got if got[k] != expected[k]]
    assert not wrong, "%s %s: wrong content of %s" % (tag(), what, wrong[:5])


# -- datasets, jobs and the two servers ---------------------------------------

@pytest.fixture(scope="module", params=SEEDS, ids=lambda x: "seed%d" % x)
def golden(request, server_binary, tmp_path_factory):
    a_plane, b_plane = planes()
    require_planes(server_binary, a_plane, b_plane)
    seed = _current["seed"] = request.param
    root = str(tmp_path_factory.mktemp("plan-golden"))
    rng = random.Random(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile: duplicate names (bad samples)
        d1 = make_random_dataset(os.path.join(root, "d1"), rng.randrange(1 << 30),
                                 [("ustar", 40), ("gnu", 30), ("pax", 35), ("empty", 0),
                                  ("ustar", 25), ("pax", 20)], "a")
        d2 = make_random_dataset(os.path.join(root, "d2"), rng.randrange(1 << 30),
                                 [("pax", 30), ("gnu", 35), ("ustar", 30), ("gnu", 15)],
                                 "b")
        d3 = make_random_dataset(os.path.join(root, "d3"), rng.randrange(1 << 30),
                                 [("ustar", 25), ("zip", 25), ("gnu", 25), ("targz", 25),
                                  ("pax", 15)], "c")
    objdir = os.path.join(root, "objects")
    os.makedirs(objdir)
    objects = make_objects_dataset(objdir, rng.randrange(1 << 30), 60)
    obj_source = objdir + "/?objects=16"
    mix_size = rng.randint(180, 420)

    jobs = []
    for pol in POLICIES:
        p = pol.replace("even-", "")
        jobs.append(rand_job(rng, "d1-" + p, d1.path, pol))
        jobs.append(rand_job(rng, "d2-" + p, d2.path, pol))
        jobs.append(rand_job(rng, "d3-" + p, d3.path, pol))
        jobs.append(rand_job(rng, "mix-" + p, None, pol, epoch_size=mix_size, sources=[
            {"name": "one", "source": d1.path, "weight": 0.65},
            {"name": "two", "source": d2.path, "weight": 0.35}]))
        jobs[-1].pop("source")
    # a job-level default fields list, and the objects source
    jobs.append(rand_job(rng, "d2-fields", d2.path, "even-drop", fields=["txt", "jpg", "cls"]))
    jobs.append(rand_job(rng, "obj-drop", obj_source, "even-drop"))
    config = os.path.join(root, "config.json")
    with open(config, "w") as f:
        json.dump({"jobs": jobs}, f, indent=1)

    cli = cli_binary(server_binary)

    def prepare(state):
        # d1 is indexed ahead of time, into each server's state dir
        subprocess.run([cli, "index", d1.path, "--state-dir", state], check=True,
                       capture_output=True, timeout=120)

    pair = Pair(server_binary, root, config, prepare=prepare)
    ctx = {"pair": pair, "d1": d1, "d2": d2, "d3": d3, "objects": objects,
           "mix_size": mix_size, "jobs": {j["name"]: j for j in jobs}, "rng": rng,
           "b_auto": b_plane == "auto" and binary_has_data_plane(server_binary),
           "a_plane": a_plane}
    try:
        for job in ctx["jobs"]:
            for s in pair.servers:
                assert wait_ready(s, job), "%s job %s not ready: %s" % (tag(), job, s.log())
        yield ctx
    finally:
        bad = pair.stop()
    assert not bad, "shardcastd did not exit cleanly:\n" + "\n".join(bad)


def wait_ready(server, job, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if get_json(server, "/v1/jobs/" + job)["state"] == "ready":
            return True
        time.sleep(0.05)
    return False


def field_names(ds_or_samples):
    names = set()
    for fields in ds_or_samples:
        names.update(fields)
    return sorted(names)


def epoch0_both(ctx, job, expected):
    """Epoch 0 read whole by one consumer on A and B (this indexes the
    shards): the same bytes, and exactly the expected samples."""
    pair = ctx["pair"]
    msg, r = compare(pair, stream_query(job, 0, 0, 1, "frames"), "frames")
    assert msg is None, msg
    assert r[0] == 200, "%s %s epoch 0: %s %r" % (tag(), job, r[0], r[2][:300])
    model_check(r[2], "frames", expected, "%s epoch 0" % job)
    for s in pair.servers:
        wait_indexed(s, job, len(expected))


def check_plane_stats(ctx, jobs, want_plans, feed_allowed=None):
    """A never plans; B plans the eligible jobs and not the others.
    feed_allowed: job -> the streams B may have served from a feed (those
    read before the shards were indexed); every other stream of those jobs
    must have come from a plan."""
    pair = ctx["pair"]
    report = {}
    for job in jobs:
        sa, sb = pair.status(job)
        da, db = data_plane(sa), data_plane(sb)
        report[job] = {"A": da, "B": db}
        if ctx["a_plane"] == "stream":
            assert da is not None, "%s %s: no data_plane in A's status" % (tag(), job)
            assert da["plan_streams"] == 0 and da["plans"] == 0, (tag(), job, da)
        if not ctx["b_auto"]:
            continue
        assert db is not None, "%s %s: no data_plane in B's status" % (tag(), job)
        if want_plans:
            assert db["plans"] > 0 and db["plan_streams"] > 0, (
                "%s %s: B served no stream from a plan: %s" % (tag(), job, db))
        else:
            assert db["plan_streams"] == 0 and db["plans"] == 0, (
                "%s %s: B used a plan for an ineligible epoch: %s" % (tag(), job, db))
        assert db["plan_failures"] == 0, (tag(), job, db)
        # The metrics say the same as the status. (A plan is built on the
        # server's threads, for an epoch read ahead too: status and
        # metrics are read again until no plan came between the two.)
        def lines(d):
            return ['shardcast_data_plane_streams_total{shardcast_job="%s",plane="%s"} %d'
                    % (job, plane, d[key])
                    for plane, key in (("plan", "plan_streams"), ("feed", "feed_streams"))] + \
                ['shardcast_plans_built_total{shardcast_job="%s"} %d' % (job, d["plans"])]

        def both():
            d = data_plane(get_json(pair.b, "/v1/jobs/" + job))
            st, _, body = request(pair.b, "/metrics")
            assert st == 200
            return d, body.decode()
        d, text = read_when(both, lambda dt: all(ln in dt[1] for ln in lines(dt[0])))
        for line in lines(d):
            assert line in text, "%s %s: no %r in B's metrics (status: %s)" % (
                tag(), job, line, d)
        if feed_allowed is not None and job in feed_allowed:
            assert db["feed_streams"] <= feed_allowed[job], (
                "%s %s: B served %d streams from the feed after every shard was "
                "indexed: %s" % (tag(), job, db["feed_streams"] - feed_allowed[job], db))
    print("%s data_plane: %s" % (tag(), json.dumps(report, sort_keys=True)))
    return report


def run_jobs(ctx, jobs, n_total, epochs, combos, names):
    pair, rng = ctx["pair"], ctx["rng"]
    mismatches, stats = [], {"requests": 0, "bytes": 0, "samples": 0}
    t0 = time.monotonic()
    for job in jobs:
        reqs = random_requests(rng, job, n_total, epochs, combos, names)
        run_requests(pair, reqs, mismatches, stats)
    print("%s %s: %s in %.1f s" % (tag(), ",".join(jobs), stats, time.monotonic() - t0))
    assert not mismatches, "%d of %d responses differ:\n%s" % (
        len(mismatches), stats["requests"], "\n".join(mismatches[:8]))
    assert stats.get("status_200", 0) > stats["requests"] // 2, (tag(), stats)
    assert stats["samples"] > stats["requests"], (tag(), stats)


# -- the tests ----------------------------------------------------------------

def expected_of(ds):
    return {k: f for k, (_, f) in ds.by_key.items()}


def test_eligible_datasets_are_byte_identical(golden):
    """d1 (indexed by `shardcast index`: epoch 0 too can be a plan) and d2
    (indexed by one read of epoch 0 on each server)."""
    d1, d2 = golden["d1"], golden["d2"]
    epoch0_both(golden, "d2-drop", expected_of(d2))
    jobs1 = ["d1-drop", "d1-pad", "d1-none"]
    run_jobs(golden, jobs1, d1.total, (0,) + EPOCHS, COMBOS_ELIGIBLE,
             field_names(f for _, f in d1.by_key.values()))
    jobs2 = ["d2-drop", "d2-pad", "d2-none", "d2-fields"]
    run_jobs(golden, jobs2, d2.total, EPOCHS, COMBOS_ELIGIBLE,
             field_names(f for _, f in d2.by_key.values()))
    # d1, read whole, is the dataset (after the comparisons, so its epoch 0
    # could be planned on B before anything read it)
    msg, r = compare(golden["pair"], stream_query("d1-none", 3, 0, 1, "tar"), "tar")
    assert msg is None, msg
    model_check(r[2], "tar", expected_of(d1), "d1-none epoch 3")
    # d2 was indexed by the one read of d2-drop's epoch 0: every later
    # stream of d2's jobs is a plan stream
    check_plane_stats(golden, jobs1 + jobs2, want_plans=True,
                      feed_allowed={"d2-drop": 1, "d2-pad": 0, "d2-none": 0,
                                    "d2-fields": 0})


def test_zip_and_targz_shards_are_planned_and_match(golden):
    """A dataset with a zip and a .tar.gz shard: staged (the gzip
    decompressed, the zip as the tar of its samples) and planned, with the
    feed's bytes."""
    d3 = golden["d3"]
    epoch0_both(golden, "d3-drop", expected_of(d3))
    jobs = ["d3-drop", "d3-pad", "d3-none"]
    run_jobs(golden, jobs, d3.total, EPOCHS, COMBOS_FALLBACK,
             field_names(f for _, f in d3.by_key.values()))
    check_plane_stats(golden, jobs, want_plans=True)


def test_mixed_job_is_planned_and_matches(golden):
    jobs = ["mix-drop", "mix-pad", "mix-none"]
    d1, d2 = golden["d1"], golden["d2"]
    names = field_names(list(f for _, f in d1.by_key.values()) +
                        list(f for _, f in d2.by_key.values()))
    run_jobs(golden, jobs, golden["mix_size"], EPOCHS, COMBOS_FALLBACK, names)
    check_plane_stats(golden, jobs, want_plans=True)


def test_objects_source_is_planned_and_matches(golden):
    """Virtual shards of small objects: staged in memory (the tar their
    objects make) and planned, with the feed's bytes."""
    objects = golden["objects"]
    epoch0_both(golden, "obj-drop", objects)
    run_jobs(golden, ["obj-drop"], len(objects), EPOCHS, COMBOS_FALLBACK,
             field_names(objects.values()))
    check_plane_stats(golden, ["obj-drop"], want_plans=True)


@pytest.mark.parametrize("how", ["cli-state-dir", "cli-sidecar", "restart"])
def test_indexes_on_disk_make_the_first_epoch_a_plan(start, server_binary, tmp_path, how):
    """Indexes that are on disk when the server starts (docs/operations.md "Seekable
    epochs": `shardcast index --state-dir`, `--sidecar` files next to the
    shards, a restarted server's state dir) count as indexed: the very
    first stream of an epoch is served from a plan, not from a feed that
    reads the shards once more; and it is the feed's bytes."""
    b_plane = planes()[1]
    require_planes(server_binary, "stream", b_plane)
    _current["seed"] = SEED
    if b_plane != "auto":
        pytest.skip("B runs --data-plane %s (SHARDCAST_PLAN_TEST_PLANES)" % b_plane)
    rng = random.Random(SEED + 17)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 20), ("gnu", 20), ("pax", 20)], "e")
    cli = cli_binary(server_binary)
    state = str(tmp_path / "state")
    args = ["--state-dir", state]
    if how == "cli-state-dir":
        subprocess.run([cli, "index", ds.path, "--state-dir", state], check=True,
                       capture_output=True, timeout=120)
    elif how == "cli-sidecar":
        subprocess.run([cli, "index", ds.path, "--state-dir", str(tmp_path / "cli"),
                        "--sidecar"], check=True, capture_output=True, timeout=120)
        args = []  # the sidecars alone (--index-sidecars is on by default)
    else:
        first = start("--job", "t", "--source", ds.path, "--data-plane", "auto", *args)
        st, _, body, complete, _ = fetch(first, stream_query("t", 0, 0, 1, "frames"))
        assert st == 200 and complete, (tag(), st, body[:300])
        model_check(body, "frames", expected_of(ds), "first server's epoch 0")
        wait_indexed(first, "t", ds.total)
        # persisted (written and renamed) before the restart
        wait_until(lambda: len([f for f in os.listdir(os.path.join(state, "index"))
                                if f.endswith(".scidx")]) == 3, 30, "3 index files")
        assert first.stop() == 0
    ref = start("--job", "t", "--source", ds.path, "--data-plane", "stream")
    srv = start("--job", "t", "--source", ds.path, "--data-plane", "auto", *args)
    for path, fmt in ((stream_query("t", 4, 1, 2, "tar"), "tar"),
                      (stream_query("t", 4, 0, 2, "frames", start=3), "frames")):
        ra, rb = fetch(ref, path), fetch(srv, path)
        assert ra[:4] == rb[:4], "%s %s: %s" % (tag(), path, first_diff(ra[2], rb[2]))
    dp = data_plane(get_json(srv, "/v1/jobs/t"))
    assert dp is not None, tag()
    # (the next epoch's plan may be built ahead: plans >= 1)
    assert dp["plans"] >= 1 and dp["plan_streams"] == 2 and dp["feed_streams"] == 0, (
        "%s indexes on disk (%s) did not make the first epoch a plan: %s"
        % (tag(), how, dp))
