"""Mixed jobs through the real server (docs/order.md "Mixing datasets"): sources
with weights, repeat and choose, with and without replacement, and an
epoch_size; the order the server streams equals the library's (sio_order
--mix), every sample names its source in all three readers (frames in
Python and C, tar), per-source status and metrics, exactly-once per share
across W consumers, resume landing on the same sequence, the config file
and the admin API, a job with only an epoch_size, and bad specs refused."""

import collections
import json
import os
import subprocess
import sys

import pytest

from server_testlib import (REPO, get_json, make_dataset, read_when, request,
                            stream_path, wait_for)

sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from shardcast import FramesReader, StreamReader, stream_url  # noqa: E402

ADMIN = "mix-admin-3c1f"


def sio_order_bin(server_binary):
    d = os.environ.get("SHARDCAST_BUILD") or os.path.dirname(server_binary)
    p = os.path.join(d, "sio_order")
    if not os.access(p, os.X_OK):
        pytest.fail("sio_order not built at %s" % p)
    return p


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    out = {}
    for name, shards, per, seed in (("web", 4, 30, 1), ("code", 3, 20, 2),
                                    ("books", 2, 25, 3)):
        d = str(root / name)
        out[name] = (d, make_dataset(d, shards=shards, per_shard=per, size=300,
                                     seed=seed, prefix=name))
    return out


def spec(sources, epoch_size=400):
    return {"seed": 9, "shuffle_buffer": 50, "interleave": 2,
            "epoch_size": epoch_size,
            "sources": [
                {"name": "web", "source": sources["web"][0], "weight": 0.6},
                {"name": "code", "source": sources["code"][0], "weight": 0.3,
                 "sampling": "with_replacement"},
                {"name": "books", "source": sources["books"][0], "choose": 40}]}


def library_order(server_binary, sources, epoch=0):
    """[(key, source name)] of the epoch from the library's tool."""
    out = subprocess.run(
        [sio_order_bin(server_binary),
         "--mix", "weight:0.6:" + sources["web"][0],
         "--mix", "weight:0.3:r:" + sources["code"][0],
         "--mix", "choose:40:" + sources["books"][0],
         "--epoch-size", "400", "--seed", "9", "--buffer", "50",
         "--interleave", "2", "--epoch", str(epoch)],
        check=True, capture_output=True, text=True).stdout
    names = ["web", "code", "books"]
    return [(ln.split()[4], names[int(ln.split()[5])]) for ln in out.splitlines()]


def put_job(srv, name, body):
    st, _, data = request(srv, "/v1/jobs/" + name, method="PUT", token=ADMIN,
                          body=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json"})
    return st, data


def ready(srv, name):
    return wait_for(lambda: get_json(srv, "/v1/jobs/" + name)["state"] == "ready", 30)


def read(srv, job, epoch, rank, world, fmt="frames", decoder="python", **kw):
    url = stream_url(srv.url, job, epoch, rank, world, fmt=fmt, **kw)
    if fmt == "frames":
        r = FramesReader(url, decoder=decoder)
    else:
        r = StreamReader(url)
    with r:
        return [(s["__key__"], s.get("__source__")) for s in r]


def test_mixed_epoch_equals_the_library_in_every_reader(start, server_binary,
                                                       sources):
    srv = start("--admin-token", ADMIN)
    st, data = put_job(srv, "mix", spec(sources))
    assert st in (200, 201), data
    assert ready(srv, "mix")
    want = library_order(server_binary, sources)
    assert len(want) == 400
    assert read(srv, "mix", 0, 0, 1) == want
    assert read(srv, "mix", 0, 0, 1, fmt="tar") == want
    have_c = True
    try:
        got_c = read(srv, "mix", 0, 0, 1, decoder="c")
    except Exception as e:  # noqa: BLE001
        have_c = "not available" not in str(e)
        if have_c:
            raise
    if have_c:
        assert got_c == want
    counts = collections.Counter(s for _, s in want)
    assert counts == {"web": 240, "code": 120, "books": 40}
    # keys of a source come from that source's shards
    keys = {n: {s["key"] for s in m["samples"]} for n, (_, m) in sources.items()}
    assert all(k in keys[s] for k, s in want)
    # books is downsampled without replacement: no repeats
    books = [k for k, s in want if s == "books"]
    assert len(books) == len(set(books)) == 40
    # the next epoch is another order of the same quotas
    e1 = read(srv, "mix", 1, 0, 1)
    assert e1 != want and collections.Counter(s for _, s in e1) == counts
    assert e1 == library_order(server_binary, sources, epoch=1)

    reads = 4 if have_c else 3  # epoch 0 by frames, tar (and C); epoch 1
    # (the plan that grew is counted built by the planner's thread after
    # its last step, which may come after the streams' END)
    status = read_when(lambda: get_json(srv, "/v1/jobs/mix"),
                       lambda st: st["data_plane"]["plans"] == 2)
    # every stream of a mixed job was served from its epoch's plan: the
    # first pass from a plan that grew, epoch 1 from one built whole
    dp = status["data_plane"]
    assert dp["feed_streams"] == 0 and dp["plans_grown"] == 1, dp
    assert dp["plans"] == 2 and dp["plan_streams"] == reads, dp
    mix = {m["name"]: m for m in status["mix"]}
    assert mix["web"]["quota"] == 240 and mix["code"]["quota"] == 120
    assert mix["books"]["quota"] == 40
    assert mix["code"]["sampling"] == "with_replacement"
    assert abs(mix["web"]["proportion_configured"] - 0.6) < 1e-9
    sent = sum(m["samples_sent"] for m in mix.values())
    assert sent == 400 * reads
    assert abs(mix["web"]["proportion_realized"] - 0.6) < 1e-9
    assert status["settings"]["epoch_size"] == 400
    assert [s["name"] for s in status["settings"]["sources"]] == [
        "web", "code", "books"]
    st, _, body = request(srv, "/metrics")
    text = body.decode()
    assert ('shardcast_mix_samples_sent_total{shardcast_job="mix",'
            'source="web"}') in text
    assert ('shardcast_mix_proportion{shardcast_job="mix",source="books",'
            'kind="configured"} 0.100000') in text


def test_shares_are_exactly_once_and_resume_lands_on_the_same_sequence(
        start, server_binary, sources):
    srv = start("--admin-token", ADMIN)
    put_job(srv, "mix", spec(sources))
    assert ready(srv, "mix")
    want = library_order(server_binary, sources)
    world = 3
    shares = [read(srv, "mix", 0, r, world) for r in range(world)]
    n = len(want) - len(want) % world
    for r in range(world):
        assert shares[r] == [want[i] for i in range(r, n, world)]
    # a consumer resuming at position 17 of its share (a replay of the
    # mixed epoch) gets the same rest
    again = read(srv, "mix", 0, 1, world, start=17)
    assert again == shares[1][17:]


def test_a_mixed_job_is_planned_with_the_feeds_bytes(start, server_binary, sources):
    """The same mixed job on both data planes (--data-plane stream: the
    feed): every rank of a world of 3, epochs 0 and 1, frames and tar, gets
    the same samples with the same bytes and sources; a resume in the
    middle of a share is planned too (a mixed epoch's feed replays it)."""
    sys.path.insert(0, os.path.dirname(__file__))
    from plan_testlib import fetch, parse_body, stream_query
    servers = {}
    for plane in ("stream", "auto"):
        srv = start("--admin-token", ADMIN, "--data-plane", plane)
        put_job(srv, "mix", spec(sources))
        assert ready(srv, "mix")
        servers[plane] = srv

    def body(srv, epoch, rank, fmt, start_at=None):
        st, _, data, complete, _ = fetch(
            srv, stream_query("mix", epoch, rank, 3, fmt, start=start_at))
        assert st == 200 and complete, (st, data[-300:])
        p = parse_body(fmt, data)
        assert p.outcome == "end", p.summary()
        return [(x["key"], x["fields"], x.get("position")) for x in p.samples], p.trailer

    for epoch in (0, 1):
        for fmt in ("frames", "tar"):
            for rank in range(3):
                want = body(servers["stream"], epoch, rank, fmt)
                got = body(servers["auto"], epoch, rank, fmt)
                assert got == want, (epoch, fmt, rank, len(got[0]), len(want[0]))
    # sources as the Python reader names them
    assert read(servers["auto"], "mix", 1, 2, 3) == read(servers["stream"], "mix", 1, 2, 3)
    got = body(servers["auto"], 1, 1, "frames", start_at=29)
    want = body(servers["stream"], 1, 1, "frames", start_at=29)
    assert got == want
    dp = read_when(lambda: get_json(servers["auto"], "/v1/jobs/mix")["data_plane"],
                   lambda d: d["plans"] == 2)
    assert dp["feed_streams"] == 0 and dp["plans"] == 2, dp


def test_config_file_repeat_and_epoch_size_only(start, server_binary, sources,
                                                tmp_path):
    cfg = {"jobs": [
        {"name": "rep", "seed": 4, "shuffle_buffer": 10,
         "sources": [{"name": "web", "source": sources["web"][0], "repeat": 1.5},
                     {"name": "books", "source": sources["books"][0],
                      "repeat": 0.5}]},
        {"name": "fixed", "source": sources["code"][0], "epoch_size": 100,
         "seed": 4, "shuffle_buffer": 10}]}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    srv = start("--config", str(path))
    assert ready(srv, "rep") and ready(srv, "fixed")
    got = read(srv, "rep", 0, 0, 1)
    counts = collections.Counter(s for _, s in got)
    assert counts == {"web": 180, "books": 25}  # 1.5 * 120, 0.5 * 50
    web = collections.Counter(k for k, s in got if s == "web")
    assert set(web.values()) <= {1, 2} and len(web) == 120
    # an epoch_size alone: 100 samples of a 60-sample source, no provenance
    fixed = read(srv, "fixed", 0, 0, 1)
    assert len(fixed) == 100
    assert all(s is None for _, s in fixed)
    c = collections.Counter(k for k, _ in fixed)
    assert len(c) == 60 and set(c.values()) <= {1, 2}


@pytest.mark.parametrize("bad, reason", [
    ({"sources": []}, "sources"),
    ({"sources": [{"name": "a", "source": "/x", "weight": 1, "choose": 3}],
      "epoch_size": 5}, "at most one"),
    ({"sources": [{"name": "a", "source": "/x", "weight": 0}],
      "epoch_size": 5}, "weight"),
    ({"sources": [{"name": "a", "source": "/x"}, {"name": "a", "source": "/y"}]},
     "twice"),
    ({"sources": [{"name": "a b", "source": "/x"}]}, "name"),
    ({"sources": [{"name": "a", "source": "/x", "sampling": "sometimes"}]},
     "sampling"),
    ({"sources": [{"name": "a", "source": "/x", "colour": 1}]}, "unknown key"),
    ({"source": "/x", "sources": [{"name": "a", "source": "/x"}]}, "both"),
])
def test_bad_mix_specs_are_refused(start, bad, reason):
    srv = start("--admin-token", ADMIN)
    st, data = put_job(srv, "bad", bad)
    assert st == 400, (st, data)
    assert reason in data.decode(), data


def test_weights_without_epoch_size_fail_the_job_clearly(start, sources):
    srv = start("--admin-token", ADMIN)
    st, _ = put_job(srv, "w", {"sources": [
        {"name": "web", "source": sources["web"][0], "weight": 1}]})
    assert st in (200, 201)
    st_json = wait_for(lambda: get_json(srv, "/v1/jobs/w")
                       if get_json(srv, "/v1/jobs/w")["state"] == "failed"
                       else None, 30)
    assert st_json and "epoch_size" in st_json["reason"]


def test_an_unmixed_job_names_no_source(start, sources):
    """Version 1 streams are unchanged: no "sources" in the frames HEADER,
    no SHARDCAST.source pax record, no __source__."""
    import io
    import tarfile
    srv = start("--job", "plain", "--source", sources["web"][0], "--seed", "3")
    url = stream_url(srv.url, "plain", 0, 0, 1, fmt="frames")
    with FramesReader(url, decoder="python") as r:
        got = list(r)
        assert "sources" not in r.header
    assert got and all("__source__" not in s for s in got)
    st, _, body = request(srv, stream_path("plain", 0, 0, 1, fmt="tar"))
    assert st == 200
    with tarfile.open(fileobj=io.BytesIO(body)) as tf:
        for m in tf:
            assert "SHARDCAST.source" not in m.pax_headers
