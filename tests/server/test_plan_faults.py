"""Shard files that change under the data plane's plan.

An epoch served from its plan reads every sample's bytes from the shard
files while it streams. When a file is truncated, rewritten (same size,
other bytes), replaced (a new file renamed over it) or deleted meanwhile,
a stream must never deliver bytes that are not the dataset's: it ends
with the error trailer marked retryable, data_plane.plan_failures counts
it, and the epoch's later streams come from a plan made again
(data_plane.plans_again; the changed files are indexed again when the
order comes to them), or from its feed once a plan was made again
three times.

Each test: a local dataset (plain tar, 90 shards: more than a plan reader
keeps at hand, so readers open shards after the change), a server with --data-plane auto and
a state dir, epoch 0 read once (the shards get indexed), then WORLD
consumers of epoch 1 over sockets with small receive buffers. Ranks
0..WORLD-2 read a first part of their shares and stop; the files change
(or, all-under-load, change one after another while they read on); the
last rank opens its stream only after the change (its reader opens every
shard after it); everyone reads on (paced) to the end. The shares (~9 MB)
are well beyond what the server has in flight for a stopped consumer (its
socket send buffer, up to 4 MiB), so most of every share is read after
the change.

Every sample received is compared with the ORIGINAL dataset (key ->
fields, computed before any change); every stream must end with the END
trailer or a retryable error trailer (or a cut connection inside a
sample: no format can carry a trailer there; that sample is not
checked), at least one must have hit the error, and plan_failures must
count exactly those. Then each consumer resumes at the position it
reached (start=, as the clients do; a retryable trailer is followed
again) and one more consumer reads the whole epoch: they must end
normally and come from a plan made again (the feed only once three
were); samples of untouched shards must be the original bytes (all of
them, for the whole-epoch read), samples of changed shards the original
or the new version of their file (the new plan reads the files as they
are now).

The last test does the same with an http source (nginx) read through the
shard cache (--cache-bytes): the cache entry files under state_dir/cache
change instead of the shards (the store keeps the originals). It is
skipped, with the reason printed, when the server builds no plan for
cached shards.

A failure names the seed (SHARDCAST_PLAN_SEED) and, for a wrong sample,
whether its bytes are those of the changed file.
"""

import os
import random
import re
import sys
import threading
import time

import pytest

from plan_testlib import (GenDataset, Member, RawResponse, data_plane, fetch,
                          parse_body, planes, require_planes, stream_query,
                          wait_indexed, wait_until, wds_model, write_tar)
from server_testlib import get_json

HERE = os.path.dirname(os.path.abspath(__file__))

SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "5150"))
WORLD = 4
LATE = 1                  # ranks that open their stream after the change
# 90 shards of 4 samples of ~100 KB (~36 MB): more shards than a plan
# reader keeps at hand (SIO_PLANREAD_FILES, 64), so readers open shards
# after the change; a share (~9 MB) well beyond what the server has
# in flight for a paused consumer (its socket send buffer, up to 4 MiB).
SHARDS = 90
PER_SHARD = 4
PAUSE_BYTES = 256 << 10   # each consumer reads this much, then the files change
RCVBUF = 32 << 10         # consumers' socket receive buffer
SERVER_ARGS = ["--join-timeout-ms", "300", "--rejoin-grace-ms", "300",
               "--lag-grace-ms", "300", "--stream-rate-limit", "0",
               "--rate-limit", "0", "--max-new-epochs-per-minute", "0"]


def tag(extra=""):
    return "[seed=%d%s]" % (SEED, extra)


# -- the dataset and its versions ---------------------------------------------

def shard_members(rng, s, sizes=None, per_shard=PER_SHARD):
    """Shard s: per_shard samples f<s>/k<i> of a large .bin and a small
    .json (sizes: the .bin sizes to keep, for a same-size version)."""
    out, kept = [], []
    for i in range(per_shard):
        key = "f%d/k%04d" % (s, i)
        n = sizes[i] if sizes else rng.randint(40000, 160000)
        kept.append(n)
        out.append(Member(key + ".bin", rng.randbytes(n)))
        meta = b'{"i": %d, "v": "%s"}' % (i, rng.randbytes(6).hex().encode())
        out.append(Member(key + ".json", meta))
    return out, kept


class FaultDataset:
    """shards shards of per_shard samples (test_feed_changes.py uses fewer,
    larger shards)."""

    def __init__(self, path, seed, shards=SHARDS, per_shard=PER_SHARD):
        self.path = path
        self.rng = random.Random(seed)
        self.per_shard = per_shard
        os.makedirs(path, exist_ok=True)
        self.sizes = {}
        model = {}
        for s in range(shards):
            members, self.sizes[s] = shard_members(self.rng, s, per_shard=per_shard)
            write_tar(self.file(s), members, "ustar")
            model[self.name(s)] = wds_model(members)
        self.orig = GenDataset(path, model)
        # key -> the versions of its fields a stream may deliver after the
        # change (the original always)
        self.versions = {k: [f] for k, (_, f) in self.orig.by_key.items()}
        self.changed = set()   # shard names

    def name(self, s):
        return "f-%06d.tar" % s

    def file(self, s):
        return os.path.join(self.path, self.name(s))

    def shard_of(self, key):
        return self.orig.by_key[key][0]

    def _new_version(self, s, same_size, tmp=None):
        """A new version of shard s written to tmp (default: next to the
        shard); its samples become allowed versions after the change."""
        members, _ = shard_members(self.rng, s, self.sizes[s] if same_size else None,
                                   per_shard=self.per_shard)
        tmp = tmp or self.file(s) + ".new"
        write_tar(tmp, members, "ustar")
        for k, f in wds_model(members):
            self.versions[k].append(f)
        return tmp

    # The changes. Each leaves the file in its final state at once.
    def truncate(self, s):
        self.changed.add(self.name(s))
        os.truncate(self.file(s), os.path.getsize(self.file(s)) // 2)

    def rewrite(self, s):
        """Other bytes of the same size, written into the same file."""
        self.changed.add(self.name(s))
        tmp = self._new_version(s, same_size=True)
        with open(tmp, "rb") as f:
            data = f.read()
        os.unlink(tmp)
        assert len(data) == os.path.getsize(self.file(s)), "not the same size"
        fd = os.open(self.file(s), os.O_WRONLY)
        try:
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace(self, s, same_size=True):
        """A new file renamed over the shard."""
        self.changed.add(self.name(s))
        tmp = self._new_version(s, same_size=same_size)
        os.replace(tmp, self.file(s))

    def delete(self, s):
        self.changed.add(self.name(s))
        os.unlink(self.file(s))


# -- consumers ----------------------------------------------------------------

class Consumer(threading.Thread):
    """Rank r's share of the epoch over one socket: PAUSE_BYTES, then it
    waits for `go`, then reads the rest (paced)."""

    def __init__(self, srv, job, epoch, rank, world, fmt, go):
        super().__init__(daemon=True)
        self.srv, self.job, self.epoch = srv, job, epoch
        self.rank, self.world, self.fmt, self.go = rank, world, fmt, go
        self.paused = threading.Event()
        self.done = threading.Event()
        self.nbytes = 0
        self.body = b""
        self.complete = False
        self.status = None
        self.error = None

    def run(self):
        try:
            r = RawResponse(self.srv.host, self.srv.port,
                            stream_query(self.job, self.epoch, self.rank, self.world, self.fmt),
                            rcvbuf=RCVBUF)
            self.status = r.status
            try:
                r.read_until(PAUSE_BYTES)
                self.nbytes = len(r.body)
                self.paused.set()
                self.go.wait(120)
                while r.read_some(16 << 10):
                    self.nbytes = len(r.body)
                    time.sleep(0.001)  # pacing: a consumer slower than the server
                self.nbytes = len(r.body)
                self.body = bytes(r.body)
                self.complete = r.complete
            finally:
                r.close()
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e
        finally:
            self.paused.set()
            self.done.set()


def check_samples(ds, parsed, what, allow_new):
    """Every sample is one of its key's allowed versions: the original,
    or (allow_new: after the change) a version its shard's file had."""
    wrong = []
    for smp in parsed.samples:
        k = smp["key"]
        if k not in ds.versions:
            wrong.append("%s: unknown key" % k)
            continue
        allowed = ds.versions[k] if allow_new else ds.versions[k][:1]
        if smp["fields"] not in allowed:
            sizes = {f: len(v) for f, v in smp["fields"].items()}
            wrong.append("%s (shard %s%s): fields %s are not the %s bytes%s" % (
                k, ds.shard_of(k), ", changed" if ds.shard_of(k) in ds.changed else "",
                sizes, "dataset's" if allow_new else "original",
                " (they are the changed file's)" if smp["fields"] in ds.versions[k][1:]
                else ""))
    assert not wrong, "%s %s: %d wrong samples of %d, e.g.\n  %s" % (
        tag(), what, len(wrong), len(parsed.samples), "\n  ".join(wrong[:6]))


def settle_cut(ds, parsed, complete, what):
    """A stream that ends without a trailer: allowed only inside a sample
    (the server cannot put a trailer in the middle of a sample, so a
    sample whose first bytes went out before the change was seen ends
    with a cut connection; the clients retry it). The last sample, which
    may be incomplete, is dropped from the parse (a resume reads it again).
    Returns True for such a cut, False for a stream with a trailer."""
    if parsed.outcome != "cut":
        assert parsed.problem is None, "%s %s: %s" % (tag(), what, parsed.summary())
        return False
    assert not complete, "%s %s: a body without a trailer ended properly" % (tag(), what)
    mid_sample = parsed.problem is not None  # a frame, header or member cut
    if not mid_sample and parsed.samples:
        # tar: cut between two members of one sample
        last = parsed.samples[-1]
        orig = ds.versions.get(last["key"], [{}])[0]
        mid_sample = set(last["fields"]) < set(orig)
    assert mid_sample, (
        "%s %s: the stream ends at a sample boundary without a trailer: %s"
        % (tag(), what, parsed.summary()))
    if parsed.samples and (parsed.problem is None or not parsed.problem.startswith("frame")):
        parsed.samples.pop()  # tar: the sample being written when it was cut
    return True


def check_positions(parsed, start, what):
    got = [s["position"] for s in parsed.samples]
    assert got == list(range(start, start + len(got))), (
        "%s %s: positions %s... do not run on from %d" % (tag(), what, got[:5], start))


def dp_of(srv, job):
    dp = data_plane(get_json(srv, "/v1/jobs/" + job))
    assert dp is not None, "%s the server's job status has no data_plane" % tag()
    return dp


def run_faults(srv, ds, job, change, fmt_of_rank=lambda r: ("frames", "tar")[r % 2],
               skip_without_plan=None):
    """The scenario of the module docstring on a running server whose
    shards were indexed. Ranks 0..WORLD-LATE-1 open their streams and read
    PAUSE_BYTES; change(ds, consumers, go) changes the files (it may set
    `go` itself, to change them while those read on); then the LATE ranks
    open theirs (their readers open every shard after the change) and read
    PAUSE_BYTES, and everyone reads to the end. Returns a report dict."""
    go = threading.Event()
    n_early = WORLD - LATE
    # Counts before epoch 1 (the first pass that indexed the shards may
    # have been planned itself).
    base = dp_of(srv, job)
    cons = [Consumer(srv, job, 1, r, WORLD, fmt_of_rank(r), go) for r in range(WORLD)]

    def paused(group, what):
        wait_until(lambda: all(c.paused.is_set() for c in group), 120, what)
        for c in group:
            assert c.error is None, "%s rank %d: %r" % (tag(), c.rank, c.error)
            assert c.status == 200, "%s rank %d: status %s" % (tag(), c.rank, c.status)

    try:
        for c in cons[:n_early]:
            c.start()
        paused(cons[:n_early], "the first %d bytes of ranks 0..%d" % (PAUSE_BYTES, n_early - 1))
        dp0 = dp_of(srv, job)
        if dp0["plan_streams"] - base["plan_streams"] < n_early and skip_without_plan:
            go.set()
            skip_without_plan(dp0)
        assert dp0["plan_streams"] - base["plan_streams"] == n_early and dp0["plans"] >= 1, (
            "%s epoch 1's streams are not plan streams: %s" % (tag(), dp0))
        change(ds, cons[:n_early], go)
        dpc = dp_of(srv, job)
        feed_before, again_before = dpc["feed_streams"], dpc["plans_again"]
        for c in cons[n_early:]:
            c.start()
        paused(cons[n_early:], "the first bytes of the late ranks")
        # A late rank that came after an early stream had found the change
        # is served by a plan made again (or the feed), which reads the
        # files as they are now (the changed files' bytes are then what
        # the dataset holds).
        dpl = dp_of(srv, job)
        late_on_feed = (dpl["feed_streams"] > feed_before or
                        dpl["plans_again"] > again_before)
        go.set()
        for c in cons:
            c.join(180)
            assert c.done.is_set(), "%s rank %d still reading" % (tag(), c.rank)
            assert c.error is None, "%s rank %d: %r" % (tag(), c.rank, c.error)
    finally:
        go.set()

    # -- while the files changed: only original bytes, a clean end or a
    # retryable trailer
    reached, failed = {}, 0
    outcomes = []
    for c in cons:
        p = parse_body(c.fmt, c.body)
        what = "rank %d (%s) while the files changed" % (c.rank, c.fmt)
        cut = settle_cut(ds, p, c.complete, what)
        check_positions(p, 0, what)
        check_samples(ds, p, what,
                      allow_new=late_on_feed and c.rank >= n_early)
        if cut:
            failed += 1
        elif p.outcome == "end":
            assert c.complete, "%s %s: END trailer, then a cut body" % (tag(), what)
        else:
            assert p.retryable_error(), (
                "%s %s: neither the END trailer nor a retryable error: %s"
                % (tag(), what, p.summary()))
            failed += 1
        reached[c.rank] = len(p.samples)
        outcomes.append("%d:%s/%d" % (c.rank, p.outcome, len(p.samples)))
    assert failed >= 1, "%s no stream hit the changed files: %s" % (tag(), outcomes)
    dp1 = wait_until(lambda: (lambda d: d if d["plan_failures"] - base["plan_failures"] ==
                              failed else None)(
        dp_of(srv, job)), 30, "plan_failures == %d" % failed)
    # the late ranks' streams came from the plan, or from the feed when an
    # early stream had found the change already
    assert n_early <= dp1["plan_streams"] - base["plan_streams"] <= WORLD, (tag(), dp1)

    # -- afterwards: a plan made again serves the resumes and a new
    # consumer (the feed, once three were made again)
    post_streams = 0
    for c in cons:
        pos, tries = reached[c.rank], 0
        while True:
            tries += 1
            st, _, body, complete, _ = fetch(srv, stream_query(job, 1, c.rank, WORLD, c.fmt,
                                                                start=pos))
            post_streams += 1
            what = "rank %d resumed at %d (try %d)" % (c.rank, pos, tries)
            assert st == 200, "%s %s: status %s %r" % (tag(), what, st, body[:300])
            p = parse_body(c.fmt, body)
            cut = settle_cut(ds, p, complete, what)
            check_positions(p, pos, what)
            check_samples(ds, p, what, allow_new=True)
            if p.outcome == "end" and complete:
                break
            assert (cut or p.retryable_error()) and tries < 4, (
                "%s %s: %s" % (tag(), what, p.summary()))
            pos += len(p.samples)
    st, _, body, complete, _ = fetch(srv, stream_query(job, 1, 0, 1, "frames"))
    post_streams += 1
    p = parse_body("frames", body)
    what = "a new consumer of the whole epoch"
    assert st == 200 and complete and p.outcome == "end", (tag(), what, st, p.summary())
    check_samples(ds, p, what, allow_new=True)
    untouched = [s for s in p.samples if ds.shard_of(s["key"]) not in ds.changed]
    n_untouched = sum(len(v) for k, v in ds.orig.model.items() if k not in ds.changed)
    assert len(untouched) == n_untouched, (
        "%s %s: %d samples of the untouched shards, not %d" % (
            tag(), what, len(untouched), n_untouched))
    dp2 = wait_until(lambda: (lambda d: d if d["feed_streams"] + d["plan_streams"] >=
                              dp1["feed_streams"] + dp1["plan_streams"] + post_streams
                              else None)(dp_of(srv, job)),
                     30, "the data plane to count the %d later streams" % post_streams)
    assert dp2["plans_again"] - base["plans_again"] >= 1, (
        "%s no plan was made again after one failed: %s -> %s" % (tag(), dp1, dp2))
    assert dp2["plan_streams"] > dp1["plan_streams"], (
        "%s no stream after the plan failed was served from a plan made again: "
        "%s -> %s" % (tag(), dp1, dp2))
    report = {"outcomes": outcomes, "dp_before": dp0, "dp_failed": dp1, "dp_after": dp2,
              "post_streams": post_streams}
    print("%s %s" % (tag(), report))
    return report


def wait_progress(cons, more, timeout=120):
    """Until each consumer has read `more` bytes beyond where it is now,
    or ended."""
    marks = {c.rank: c.nbytes + more for c in cons}
    wait_until(lambda: all(c.done.is_set() or c.nbytes >= marks[c.rank] for c in cons),
               timeout, "the consumers to read on")


# -- local files --------------------------------------------------------------

def auto_only(server_binary):
    b = planes()[1]
    require_planes(server_binary, b)
    if b != "auto":
        pytest.skip("these checks are the plan path's; server B runs --data-plane %s "
                    "(SHARDCAST_PLAN_TEST_PLANES)" % b)


def indexed_server(start, tmp_path, ds, source=None, extra=()):
    srv = start("--job", "t", "--source", source or ds.path, "--data-plane", "auto",
                "--state-dir", str(tmp_path / "state"), *SERVER_ARGS, *extra)
    st, _, body, complete, _ = fetch(srv, stream_query("t", 0, 0, 1, "frames"))
    p = parse_body("frames", body)
    assert st == 200 and complete and p.outcome == "end", (tag(), st, p.summary())
    check_samples(ds, p, "epoch 0", allow_new=False)
    assert len(p.samples) == ds.orig.total, (tag(), len(p.samples), ds.orig.total)
    wait_indexed(srv, "t", ds.orig.total)
    return srv


CHANGES = {
    # one change while every consumer is paused
    "truncate": lambda ds, cons, go: ds.truncate(2),
    "rewrite": lambda ds, cons, go: ds.rewrite(3),
    "replace": lambda ds, cons, go: ds.replace(4, same_size=True),
    "delete": lambda ds, cons, go: ds.delete(5),
}


def _all_under_load(ds, cons, go):
    """Truncate one shard, rewrite another and replace a third while the
    consumers read."""
    go.set()
    ds.truncate(1)
    wait_progress(cons, 256 << 10)
    ds.rewrite(4)
    wait_progress(cons, 256 << 10)
    ds.replace(6, same_size=False)


CHANGES["all-under-load"] = _all_under_load


@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_local_shards_change_under_plan_streams(start, server_binary, tmp_path, kind):
    auto_only(server_binary)
    ds = FaultDataset(str(tmp_path / "data"), SEED + sorted(CHANGES).index(kind))
    srv = indexed_server(start, tmp_path, ds)
    run_faults(srv, ds, "t", CHANGES[kind])


# -- the shard cache ----------------------------------------------------------

def _cache_entries(cache_dir):
    """shard name -> its cache .data path, for complete entries."""
    out = {}
    if not os.path.isdir(cache_dir):
        return out
    for fn in os.listdir(cache_dir):
        if not fn.endswith(".meta"):
            continue
        with open(os.path.join(cache_dir, fn)) as f:
            text = f.read()
        m = re.search(r"^url (\S+)$", text, re.M)
        if m and re.search(r"^complete 1$", text, re.M):
            out[m.group(1).rsplit("/", 1)[-1]] = os.path.join(cache_dir, fn[:-5] + ".data")
    return out


class CachedShards:
    """The changes of FaultDataset applied to the cache entries' files
    (the store keeps the original shards; what the feed serves from a
    changed entry afterwards is not checked beyond the untouched shards)."""

    def __init__(self, ds, entries):
        self.ds, self.entries = ds, entries

    def path(self, s):
        return self.entries[self.ds.name(s)]

    def truncate(self, s):
        self.ds.changed.add(self.ds.name(s))
        os.truncate(self.path(s), os.path.getsize(self.path(s)) // 2)

    def rewrite(self, s):
        self.ds.changed.add(self.ds.name(s))
        tmp = self.ds._new_version(s, True, self.path(s) + ".new")
        with open(tmp, "rb") as f:
            data = f.read()
        os.unlink(tmp)
        assert len(data) == os.path.getsize(self.path(s))
        fd = os.open(self.path(s), os.O_WRONLY)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)

    def replace(self, s):
        self.ds.changed.add(self.ds.name(s))
        os.replace(self.ds._new_version(s, True, self.path(s) + ".new"), self.path(s))


def test_cache_entries_change_under_plan_streams(start, server_binary, tmp_path):
    auto_only(server_binary)
    sys.path.insert(0, os.path.join(HERE, "..", "objstore"))
    from objstore_support import serve_nginx  # noqa: E402

    ds = FaultDataset(str(tmp_path / "data"), SEED + 99)
    with serve_nginx(ds.path, tmp_path) as base:
        source = base + "/f-{000000..%06d}.tar" % (SHARDS - 1)
        srv = indexed_server(start, tmp_path, ds, source=source,
                             extra=("--cache-bytes", "1GiB"))
        cache_dir = str(tmp_path / "state" / "cache")
        entries = wait_until(lambda: (lambda e: e if len(e) == SHARDS else None)(
            _cache_entries(cache_dir)), 60, "%d complete cache entries" % SHARDS)
        cached = CachedShards(ds, entries)

        def skip_without_plan(dp):
            reason = ("the data plane built no plan for shards read through the "
                      "shard cache (data_plane %s): the plan serves local files "
                      "only in this build" % dp)
            print("%s SKIP: %s" % (tag(), reason))
            pytest.skip(reason)

        def change(_ds, cons, go):
            cached.rewrite(3)
            cached.truncate(5)
            go.set()
            wait_progress(cons, 256 << 10)
            cached.replace(6)

        run_faults(srv, ds, "t", change, skip_without_plan=skip_without_plan)
        srv.stop()
