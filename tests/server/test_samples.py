"""GET /v1/jobs/{job}/samples/{i} read in place, and GET requests over one
kept-alive connection.

Once the indexes place sample i of the dataset's unshuffled order in a
local plain tar, the request is served from a plan of that one sample: the
plan streams' reader and checks (the file the index describes, the sample
the index describes, the file unchanged until its bytes went out), with
no thread of its own. Otherwise (shards not indexed yet, remote, cached or
compressed shards, zips) the sample is first fetched whole on a sample
thread (which indexes the shards it needs on the way) while the request
waits, and then handed out from the same kind of plan: no request is a
feed's.

test_samples_are_read_in_place_once_indexed: 6 local shards of 12 samples
of 40-160 KB. The last sample's request indexes every shard (its feed);
after it, every sample of the dataset in both formats, and with fields=,
is served in place (data_plane.sample_plan_streams, and no new
sample_streams_fetched), each the shard's own bytes at its index; past
the end is a 404 that names the length, and /metrics counts the streams
by how they were read.

test_a_shard_rewritten_under_samples_requests: the same dataset; a thread
rewrites one shard in place (other bytes of the same size, pwrite) again
and again while two clients ask for that shard's samples. Every answer is
one whole version of its sample, or a retryable error (or a connection
cut inside the sample, when the change was seen after its first bytes
went out); never a sample of two versions. Once the writes stop, every sample of the shard is its last
version, and later requests are read in place again.

test_a_replaced_shard_moves_the_samples_after_it: once every shard is
indexed, shard 0 is replaced (a rename) by a version with three samples
more. Within a second every later sample comes from its new place: the
in-place reads look at the local shards before their sample at most once
a second, and the index of the replaced shard is made again.

test_get_requests_keep_their_connection: /healthz, /v1/jobs/t, /metrics
and /samples/{i} one after another over one HTTP/1.1 connection: the
server answers each without "Connection: close" and the client sends the
next over the same socket.

test_samples_of_every_shard_kind_local_and_over_http: a dataset of plain
tars (ustar, GNU, pax) with bad samples and skipped members, a .tar.gz, a
zip and a shard with no sample, read from its directory and from nginx
(a brace list, no cache) by a fresh server each. The first request is
past the end (a 404 that names the length: the shards are indexed by
the fetch that answers it); then every sample, in a random order, is the
dataset's at its index. Local plain tars are read in place; the .tar.gz,
the zip and every remote shard are fetched. Nothing is read by a feed.

test_a_stop_while_samples_are_fetched: a store whose every shard GET
stalls 1 s (the fault proxy), eight /samples requests waiting for their
fetches: SIGTERM ends the server with status 0 (under the sanitizer
build, with nothing leaked), and the waiting requests are answered.
"""

import http.client
import os
import random
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.faultproxy import FaultProxy  # noqa: E402
from plan_testlib import (fetch, make_random_dataset, parse_body, wait_until,  # noqa: E402
                          wds_model, write_tar)
from server_testlib import Nginx, get_json, request  # noqa: E402
from test_plan_faults import FaultDataset, shard_members  # noqa: E402

SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "4177"))
SHARDS = 6
PER_SHARD = 12
SERVER_ARGS = ["--prefetch", "false", "--stream-rate-limit", "0",
               "--rate-limit", "0", "--max-new-epochs-per-minute", "0"]


def tag():
    return "[seed=%d]" % SEED


def serve(start, ds):
    return start("--job", "t", "--source",
                 os.path.join(ds.path, "f-{000000..%06d}.tar" % (SHARDS - 1)),
                 *SERVER_ARGS)


def dataset_order(ds):
    """[(key, fields)] in the unshuffled order: the shards in list order,
    each shard's good samples in tar order."""
    return [kf for name in sorted(ds.orig.model) for kf in ds.orig.model[name]]


def indexed_server(start, tmp_path, seed):
    """(dataset, its order, a server over it whose every shard is indexed:
    the last sample was asked for)."""
    ds = FaultDataset(str(tmp_path / "d"), seed, shards=SHARDS, per_shard=PER_SHARD)
    seq = dataset_order(ds)
    srv = serve(start, ds)
    st, p, _ = get_sample(srv, len(seq) - 1)
    assert st == 200 and p.outcome == "end", (tag(), p.summary())
    return ds, seq, srv


def get_sample(srv, i, fmt="frames", fields=None):
    path = "/v1/jobs/t/samples/%d?format=%s" % (i, fmt)
    if fields:
        path += "&fields=" + ",".join(fields)
    st, _, body, complete, headers = fetch(srv, path)
    p = parse_body(fmt, body) if st == 200 else None
    if st != 200:
        # An answer before the stream: only a 503 that says when to come
        # back is a retryable one (a fetch that found the shard changed).
        p = parse_body(fmt, b"")
        p.outcome = "http %d%s" % (st, " retry" if "retry-after" in headers else "")
    return st, p, complete


def sample_planes(srv):
    dp = get_json(srv, "/v1/jobs/t")["data_plane"]
    return dp["sample_streams_in_place"], dp["sample_streams_fetched"]


def test_samples_are_read_in_place_once_indexed(start, tmp_path):
    ds = FaultDataset(str(tmp_path / "d"), SEED, shards=SHARDS, per_shard=PER_SHARD)
    seq = dataset_order(ds)
    srv = serve(start, ds)

    # The last sample: fetched on a sample thread, which indexes every
    # shard on the way.
    st, p, _ = get_sample(srv, len(seq) - 1)
    assert st == 200 and p.outcome == "end" and len(p.samples) == 1, (tag(), p.summary())
    assert p.samples[0]["key"] == seq[-1][0]
    plan0, feed0 = sample_planes(srv)
    assert feed0 >= 1, (tag(), plan0, feed0)

    asked = 0
    for i, (key, fields) in enumerate(seq):
        for fmt in ("frames", "tar"):
            st, p, complete = get_sample(srv, i, fmt)
            asked += 1
            assert st == 200 and complete and p.outcome == "end", (tag(), i, fmt, p.summary())
            assert len(p.samples) == 1, (tag(), i, fmt, p.summary())
            got = p.samples[0]
            assert got["key"] == key, (tag(), i, fmt, got["key"], key)
            assert got["fields"] == fields, "%s samples/%d (%s): not the shard's bytes" % (
                tag(), i, fmt)
            if fmt == "frames":
                assert got["index"] == i, (tag(), i, got["index"])
    # fields=: the named field only.
    rng = random.Random(SEED)
    for i in rng.sample(range(len(seq)), 8):
        st, p, _ = get_sample(srv, i, "frames", ["json"])
        asked += 1
        assert st == 200 and p.outcome == "end" and len(p.samples) == 1, (tag(), i, p.summary())
        assert p.samples[0]["fields"] == {"json": seq[i][1]["json"]}, (tag(), i)

    plan1, feed1 = sample_planes(srv)
    assert feed1 == feed0, "%s samples read by a feed once every shard was indexed: %d" % (
        tag(), feed1 - feed0)
    assert plan1 - plan0 == asked, (tag(), plan0, plan1, asked)

    st, _, body = request(srv, "/v1/jobs/t/samples/%d" % len(seq))
    assert st == 404 and b"past the dataset's %d samples" % len(seq) in body, (st, body)

    st, _, text = request(srv, "/metrics")
    assert st == 200
    line = 'shardcast_sample_streams_total{shardcast_job="t",read="in_place"} %d' % plan1
    assert line.encode() in text, (line, [x for x in text.splitlines() if b"sample_streams" in x])


def test_a_shard_rewritten_under_samples_requests(start, tmp_path):
    ds, seq, srv = indexed_server(start, tmp_path, SEED + 1)

    shard = 2
    first = shard * PER_SHARD
    indexes = range(first, first + PER_SHARD)
    stop = threading.Event()
    rewrites = [0]
    problems = []
    answers = {"whole": 0, "retryable": 0, "cut": 0}
    lock = threading.Lock()

    def writer():
        # Enough rewrites that requests meet a file mid-write, bounded so
        # that the test ends on a loaded machine too.
        while not stop.is_set() and rewrites[0] < 40:
            ds.rewrite(shard)
            rewrites[0] += 1

    def reader(seed):
        rng = random.Random(seed)
        while not stop.is_set():
            i = rng.choice(indexes)
            st, p, complete = get_sample(srv, i)
            with lock:
                if st == 503 and p.outcome.endswith(" retry"):
                    answers["retryable"] += 1
                elif st != 200:
                    problems.append("samples/%d: status %d" % (i, st))
                elif p.outcome == "end" and len(p.samples) == 1:
                    smp = p.samples[0]
                    if smp["key"] != seq[i][0]:
                        problems.append("samples/%d: key %s, not %s" % (i, smp["key"], seq[i][0]))
                    elif smp["fields"] not in ds.versions[smp["key"]]:
                        sizes = {f: len(v) for f, v in smp["fields"].items()}
                        problems.append("samples/%d: fields %s are no version of %s "
                                        "(a torn sample)" % (i, sizes, smp["key"]))
                    else:
                        answers["whole"] += 1
                elif p.retryable_error() and not p.samples:
                    answers["retryable"] += 1
                elif p.outcome == "cut" and not complete and not p.samples:
                    # The change was seen after the sample's first bytes
                    # went out: no trailer can follow inside a sample, so
                    # the connection is cut (clients retry).
                    answers["cut"] += 1
                else:
                    problems.append("samples/%d: %s" % (i, p.summary()))

    w = threading.Thread(target=writer, daemon=True)
    rs = [threading.Thread(target=reader, args=(SEED + k,), daemon=True) for k in range(2)]
    for t in rs:
        t.start()
    w.start()
    w.join(300)
    stop.set()
    for t in rs:
        t.join(120)
    assert not w.is_alive() and not any(t.is_alive() for t in rs), tag()
    assert not problems, "%s %d rewrites, %s; %d problems, e.g.\n  %s" % (
        tag(), rewrites[0], answers, len(problems), "\n  ".join(problems[:6]))
    assert answers["whole"] > 0, (tag(), answers)

    # The writes stopped: the shard's last version, every sample; and once
    # a request indexed it again, the next ones are read in place.
    last = {k: v[-1] for k, v in ds.versions.items()}
    for i in indexes:
        def whole(i=i):
            st, p, _ = get_sample(srv, i)
            if st == 200 and p.outcome == "end" and len(p.samples) == 1:
                return p.samples[0]
            assert (st == 200 and p.retryable_error()) or (
                st == 503 and p.outcome.endswith(" retry")), (tag(), i, st, p.summary())
            return None
        smp = wait_until(whole, 60, "samples/%d after the rewrites" % i)
        assert smp["fields"] == last[seq[i][0]], "%s samples/%d: not the last version" % (tag(), i)
    plan0, feed0 = sample_planes(srv)
    for i in indexes:
        st, p, _ = get_sample(srv, i)
        assert st == 200 and p.outcome == "end" and p.samples[0]["fields"] == last[seq[i][0]]
    plan1, feed1 = sample_planes(srv)
    assert feed1 == feed0 and plan1 - plan0 == PER_SHARD, (tag(), plan0, plan1, feed0, feed1)


def test_get_requests_keep_their_connection(start, tmp_path):
    ds = FaultDataset(str(tmp_path / "d"), SEED + 2, shards=SHARDS, per_shard=PER_SHARD)
    seq = dataset_order(ds)
    srv = serve(start, ds)
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    try:
        sock = None
        paths = ["/healthz", "/v1/jobs/t", "/v1/jobs/t/samples/%d" % (len(seq) - 1),
                 "/metrics", "/v1/jobs/t/samples/3?format=frames", "/healthz"]
        for path in paths:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, (path, resp.status, body[:200])
            assert (resp.getheader("Connection") or "").lower() != "close", path
            assert conn.sock is not None, "%s: the server closed the connection" % path
            if sock is None:
                sock = conn.sock
            assert conn.sock is sock, "%s: a new connection" % path
    finally:
        conn.close()


def test_samples_of_every_shard_kind_local_and_over_http(start, tmp_path):
    rng = random.Random(SEED + 3)
    ds = make_random_dataset(str(tmp_path / "ds"), rng.randrange(1 << 30),
                             [("ustar", 30), ("gnu", 20), ("targz", 25), ("zip", 20),
                              ("empty", 0), ("pax", 25)], "m")
    names = sorted(ds.model)
    seq = [kf for name in names for kf in ds.model[name]]
    plain = {n for n in names if n.endswith(".tar")}
    in_place = sum(len(ds.model[n]) for n in plain)
    ng = Nginx(ds.path, str(tmp_path))
    try:
        for where, source in (("local", ds.path),
                              ("http", "http://127.0.0.1:%d/{%s}" % (ng.port, ",".join(names)))):
            srv = start("--job", "t", "--source", source, *SERVER_ARGS)
            what = "%s %s" % (tag(), where)
            st, _, body = request(srv, "/v1/jobs/t/samples/%d" % (1 << 40))
            assert st == 404 and b"past the dataset's %d samples" % len(seq) in body, (
                what, st, body[:300])
            order = list(range(len(seq)))
            rng.shuffle(order)
            for i in order:
                fmt = "tar" if i % 3 == 0 else "frames"
                st, p, complete = get_sample(srv, i, fmt)
                assert st == 200 and complete and p.outcome == "end", (what, i, fmt, p.summary())
                assert len(p.samples) == 1, (what, i, p.summary())
                assert p.samples[0]["key"] == seq[i][0], (what, i, p.samples[0]["key"], seq[i][0])
                assert p.samples[0]["fields"] == seq[i][1], "%s samples/%d (%s): not the " \
                    "shard's bytes" % (what, i, fmt)
            placed, fetched = sample_planes(srv)
            assert placed + fetched == len(seq), (what, placed, fetched, len(seq))
            if where == "local":
                assert placed == in_place, (what, placed, fetched, in_place)
            else:
                assert placed == 0, (what, placed, fetched)
            dp = get_json(srv, "/v1/jobs/t")["data_plane"]
            assert dp["feed_streams"] == 0, (what, dp)
            srv.stop()
    finally:
        ng.stop()


def test_a_stop_while_samples_are_fetched(start, tmp_path):
    ds = FaultDataset(str(tmp_path / "d"), SEED + 4, shards=SHARDS, per_shard=PER_SHARD)
    ng = Nginx(ds.path, str(tmp_path))
    try:
        names = sorted(os.listdir(ds.path))
        rules = [{"fault": "stall", "seconds": 1.0, "path": r"\.tar$"}]
        with FaultProxy("http://127.0.0.1:%d" % ng.port, rules=rules) as proxy:
            srv = start("--job", "t", "--source",
                        "%s/{%s}" % (proxy.url, ",".join(names)), *SERVER_ARGS)
            answers = []

            def ask(i):
                try:
                    st, p, _ = get_sample(srv, i)
                    answers.append(st)
                except (OSError, http.client.HTTPException) as e:
                    answers.append(repr(e))
            ts = [threading.Thread(target=ask, args=(k * 7,), daemon=True) for k in range(8)]
            for t in ts:
                t.start()
            wait_until(lambda: proxy.rules()[0]["matched"] >= 1, 60,
                       "the store asked for a shard")
            rc = srv.stop()
            for t in ts:
                t.join(60)
            assert rc == 0, (tag(), rc, srv.log()[-3000:])
            assert len(answers) == 8 and not any(t.is_alive() for t in ts), (tag(), answers)
    finally:
        ng.stop()


def test_a_replaced_shard_moves_the_samples_after_it(start, tmp_path):
    ds, seq, srv = indexed_server(start, tmp_path, SEED + 5)
    probe = 3 * PER_SHARD + 2  # in shard 3
    st, p, _ = get_sample(srv, probe)
    assert p.samples[0]["key"] == seq[probe][0], tag()

    members, _ = shard_members(random.Random(SEED + 6), 0, per_shard=PER_SHARD + 3)
    tmp = ds.file(0) + ".new"
    write_tar(tmp, members, "ustar")
    os.replace(tmp, ds.file(0))
    new = list(wds_model(members)) + seq[PER_SHARD:]

    def moved():
        st, p, _ = get_sample(srv, probe)
        return st == 200 and p.outcome == "end" and \
            p.samples[0]["key"] == new[probe][0] and p.samples[0]
    smp = wait_until(moved, 60, "samples/%d from its new place" % probe)
    assert smp["fields"] == new[probe][1], tag()
    for i in range(len(new)):
        st, p, _ = get_sample(srv, i)
        assert st == 200 and p.outcome == "end", (tag(), i, p.summary())
        assert p.samples[0]["key"] == new[i][0], (tag(), i, p.samples[0]["key"], new[i][0])
        assert p.samples[0]["fields"] == new[i][1], (tag(), i)
    st, _, body = request(srv, "/v1/jobs/t/samples/%d" % len(new))
    assert st == 404 and b"past the dataset's %d samples" % len(new) in body, (st, body[:200])
