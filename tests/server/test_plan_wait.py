"""Streams that wait for their epoch's plan or journal (docs/architecture.md "The
plan").

A plan is built on a planner thread. Until it is built, the streams of
its epoch wait with their connections suspended (no HTTP thread held), and
once it is built they are opened again and read their shares from it.

test_streams_that_wait_for_a_plan_are_served_from_it: a dataset indexed
ahead (`shardcast index --state-dir`), a server with one HTTP thread,
WORLD consumers of a new epoch opened at once, every rank of the world,
while /healthz is asked in a loop on other connections. Every stream
must answer 200 and end with its END trailer; together they hold every
sample of the dataset exactly once, with its bytes; the epoch has one
plan, every stream came from it (none from the feed), and at least one
opening waited for it (the first one always does: the build is queued).
/healthz answered every time it was asked. Then the same on a second
epoch, asked with the first epoch's streams done, in both formats.
"""

import http.client
import os
import random
import subprocess
import threading

from plan_testlib import (cli_binary, data_plane, fetch, make_random_dataset,
                          parse_body, require_planes, stream_query)
from server_testlib import get_json, request

SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "9090"))
WORLD = 8


def tag():
    return "[seed=%d]" % SEED


def read_world(srv, job, epoch, fmt):
    """Every rank of the epoch at once; /healthz asked meanwhile."""
    results = [None] * WORLD
    health = []
    done = threading.Event()

    def consumer(r):
        results[r] = fetch(srv, stream_query(job, epoch, r, WORLD, fmt))

    def prober():
        # at least once, however late this thread runs
        while True:
            health.append(request(srv, "/healthz")[0])
            if done.is_set():
                break

    ts = [threading.Thread(target=consumer, args=(r,)) for r in range(WORLD)]
    pt = threading.Thread(target=prober)
    pt.start()
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
        assert not t.is_alive(), "%s a consumer of epoch %d still reads" % (tag(), epoch)
    done.set()
    pt.join(30)
    assert health and all(h == 200 for h in health), "%s /healthz: %s" % (tag(), health[:20])
    got = {}
    for r, (st, _, body, complete, _) in enumerate(results):
        assert st == 200 and complete, "%s epoch %d rank %d: %s %r" % (
            tag(), epoch, r, st, body[:200])
        p = parse_body(fmt, body)
        assert p.outcome == "end", "%s epoch %d rank %d: %s" % (tag(), epoch, r, p.summary())
        for s in p.samples:
            assert s["key"] not in got, "%s epoch %d: %s twice" % (tag(), epoch, s["key"])
            got[s["key"]] = s["fields"]
    return got


def test_streams_that_wait_for_a_plan_are_served_from_it(start, server_binary, tmp_path):
    require_planes(server_binary, "auto")
    rng = random.Random(SEED)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 60), ("gnu", 50), ("pax", 70), ("ustar", 40)], "w")
    state = str(tmp_path / "state")
    subprocess.run([cli_binary(server_binary), "index", ds.path, "--state-dir", state],
                   check=True, capture_output=True, timeout=120)
    srv = start("--job", "t", "--source", ds.path, "--state-dir", state,
                "--data-plane", "auto", "--threads", "1", "--prefetch", "false",
                "--stream-rate-limit", "0", "--rate-limit", "0",
                "--max-new-epochs-per-minute", "0")
    expect = {k: f for k, (_, f) in ds.by_key.items()}
    # even-drop (the default) drops the tail that does not divide evenly
    share = len(expect) // WORLD
    for epoch, fmt in ((3, "frames"), (4, "tar")):
        before = data_plane(get_json(srv, "/v1/jobs/t"))
        got = read_world(srv, "t", epoch, fmt)
        assert len(got) == share * WORLD, "%s epoch %d: %d samples, expected %d" % (
            tag(), epoch, len(got), share * WORLD)
        wrong = [k for k, f in got.items() if expect.get(k) != f]
        assert not wrong, "%s epoch %d: not the dataset's samples: %s" % (tag(), epoch, wrong[:5])
        dp = data_plane(get_json(srv, "/v1/jobs/t"))
        assert dp["plans"] == before["plans"] + 1, "%s epoch %d: %s" % (tag(), epoch, dp)
        assert dp["plan_streams"] == before["plan_streams"] + WORLD, (
            "%s epoch %d: not every stream was served from the plan: %s" % (tag(), epoch, dp))
        assert dp["feed_streams"] == before["feed_streams"], "%s %s" % (tag(), dp)
        assert dp["plan_waits"] >= before["plan_waits"] + 1, (
            "%s epoch %d: no stream opening waited for the plan: %s" % (tag(), epoch, dp))


def test_a_journal_that_cannot_be_read_answers_503(start, server_binary, tmp_path):
    """A new epoch's journal is read from state_dir on a planner thread
    while its first stream waits. When it cannot be read (here a directory
    stands where its file goes), the streams that waited, and the next
    ones, get 503 with the reason, and the job's other epochs serve on."""
    rng = random.Random(SEED + 1)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 20), ("gnu", 20)], "j")
    state = str(tmp_path / "state")
    srv = start("--job", "t", "--source", ds.path, "--state-dir", state,
                "--prefetch", "false", "--stream-rate-limit", "0",
                "--rate-limit", "0", "--max-new-epochs-per-minute", "0")
    st, _, body, complete, _ = fetch(srv, stream_query("t", 0, 0, 1, "frames"))
    assert st == 200 and complete, (tag(), st, body[:200])
    jdir = os.path.join(state, "journal")
    (sub,) = [d for d in os.listdir(jdir) if d.startswith("t-")]
    os.mkdir(os.path.join(jdir, sub, "3"))
    for _ in range(3):
        st, _, body, _, hdrs = fetch(srv, stream_query("t", 3, 0, 1, "frames"))
        assert st == 503 and b"cannot open epoch 3" in body, (tag(), st, body[:300])
        assert "retry-after" in hdrs, (tag(), hdrs)
    st, _, body, complete, _ = fetch(srv, stream_query("t", 2, 0, 1, "tar"))
    assert st == 200 and complete, (tag(), st, body[:200])
    got = {s["key"] for s in parse_body("tar", body).samples}
    assert got == set(ds.by_key), "%s epoch 2: %d of %d samples" % (tag(), len(got), ds.total)


def test_status_asked_while_plan_streams_end(start, server_binary, tmp_path):
    """The job's status lists the plan's streams at their positions, read
    from each stream's reader. Streams that end (whole shares, and
    connections closed early) while the status is asked in a loop on other
    connections: every stream and every status answers, the server stays
    up (under the sanitizers a reader freed under the status is fatal),
    and the epoch's counts add up."""
    require_planes(server_binary, "auto")
    rng = random.Random(SEED + 2)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 40), ("gnu", 40)], "s")
    state = str(tmp_path / "state")
    subprocess.run([cli_binary(server_binary), "index", ds.path, "--state-dir", state],
                   check=True, capture_output=True, timeout=120)
    srv = start("--job", "t", "--source", ds.path, "--state-dir", state,
                "--data-plane", "auto", "--prefetch", "false",
                "--stream-rate-limit", "0", "--rate-limit", "0",
                "--max-new-epochs-per-minute", "0")
    rounds, world = 150, 4
    done = threading.Event()
    answers, failures = [], []

    def prober():
        while not done.is_set() or not answers:
            try:
                answers.append(request(srv, "/v1/jobs/t")[0])
            except OSError as e:
                failures.append(repr(e))
                return

    def consumer(r):
        for i in range(rounds):
            q = stream_query("t", 1, r, world, "frames")
            try:
                if i % 2:
                    # closed after the first bytes: the stream ends early
                    c = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
                    c.request("GET", q)
                    resp = c.getresponse()
                    st = resp.status
                    resp.read(1)
                    c.close()
                else:
                    st, _, body, complete, _ = fetch(srv, q)
                    if complete and parse_body("frames", body).outcome != "end":
                        st = -1
                if st != 200:
                    failures.append("rank %d round %d: %s" % (r, i, st))
            except OSError as e:
                failures.append("rank %d round %d: %r" % (r, i, e))

    pt = threading.Thread(target=prober)
    pt.start()
    ts = [threading.Thread(target=consumer, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
        assert not t.is_alive(), "%s a consumer still reads" % tag()
    done.set()
    pt.join(60)
    assert not failures, "%s %s" % (tag(), failures[:5])
    assert answers and all(a == 200 for a in answers), "%s status: %s" % (tag(), answers[:20])
    assert srv.alive(), "%s the server died:\n%s" % (tag(), srv.log())
    dp = data_plane(get_json(srv, "/v1/jobs/t"))
    assert dp["plan_streams"] >= rounds * world, "%s %s" % (tag(), dp)
