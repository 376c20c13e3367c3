"""Replicas as one service (shardcast.replicas): the verification of
GET /v1/topology?job=NAME on every replica (J clash, settings that differ,
a replica down, 503, older servers), the stream headers' identity (frames
HEADER keys, the tar stream's pax global header), failover to the other
replicas in candidate order, and the elastic resume of every replica's
part, against EpochServer replicas (shardcast_fake.py)."""

import logging
import os
import socket
import sys
import time

import pytest
import torch.utils.data

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import shardcast  # noqa: E402
from shardcast import (ShardcastConfigError, ShardcastDataset,  # noqa: E402
                       ShardcastHTTPError, Topology)
from shardcast.replicas import (candidates, check_answers, verify_replicas,  # noqa: E402
                                Answer)
from shardcast.state import make_state, normalize_state, replica_cursors  # noqa: E402
from shardcast_fake import EpochServer, make_samples  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

N = 97
FORMATS = ["frames", "tar"]
FP = "0123456789abcdef0123456789abcdef"
ORDER = {"contract": 2, "shards": "00112233aabbccdd", "nshards": 5, "seed": 0,
         "interleave": 4, "shuffle_buffer": 1000, "buffer_bytes": 0,
         "partition": "even-drop", "mix": "none", "replicas": 3}


def dead_url():
    """A loopback URL nothing listens on (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


@pytest.fixture
def replicas():
    """make(R) -> R EpochServers set up as replicas 0..R-1 of R, with the
    same fingerprint and order; all stopped at the end."""
    made = []

    def make(r, fingerprint=FP):
        servers = []
        for j in range(r):
            s = EpochServer({"j": make_samples(N)})
            s.replica, s.replicas = j, r
            s.fingerprint = fingerprint
            s.order = dict(ORDER, replicas=r)
            servers.append(s)
        made.extend(servers)
        return servers

    yield make
    for s in made:
        s.stop()


def topo(servers):
    return Topology([s.url for s in servers])


def part_keys(server, epoch, part):
    return [k for k, _, _ in server.epoch_sequence("j", epoch, part)]


def consumer_keys(server, epoch, c, w, r, start=0, gs=0):
    """Keys consumer c of w gets with r replicas (part c mod r)."""
    lw = (w - c % r + r - 1) // r
    return [s[0] for _, _, s in server.share("j", epoch, c // r, lw, start, gs, c % r)]


def keys(samples):
    return [s["__key__"] for s in samples]


# --- candidate order -------------------------------------------------------

@pytest.mark.parametrize("r", [1, 2, 3, 4, 7])
def test_candidates_are_home_then_every_other_replica(r):
    for home in range(r):
        for lr in range(5):
            c = candidates(home, lr, r)
            assert c[0] == home and sorted(c) == list(range(r))
            if r > 1:
                assert c[1] == (home + 1 + lr % (r - 1)) % r


def test_candidates_spread_a_dead_replicas_consumers():
    # Replica 1 of 3 dies: its local ranks 0, 1, 2, 3 go first to 2, 0, 2, 0.
    assert [candidates(1, lr, 3)[1] for lr in range(4)] == [2, 0, 2, 0]
    with pytest.raises(ValueError):
        candidates(3, 0, 3)


# --- verification ------------------------------------------------------------

def test_verification_passes_and_is_done_once_per_copy(replicas):
    servers = replicas(3)
    ds = ShardcastDataset("http://unused", "j", rank=1, world=3, topology=topo(servers))
    assert keys(ds) == consumer_keys(servers[0], 0, 1, 3, 3)
    assert keys(ds) == consumer_keys(servers[0], 0, 1, 3, 3)  # a second iteration
    for s in servers:
        assert s.topology_requests == [{"job": "j"}]
    assert ds._identity.fingerprint == FP and ds.failovers == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_j_clash_fails_before_any_sample(replicas, fmt):
    a, b = replicas(2)
    b.replica = 0  # both started with --replica 0 --replicas 2
    got = []
    ds = ShardcastDataset("http://unused", "j", rank=3, world=4, format=fmt,
                          topology=topo([a, b]))
    with pytest.raises(ShardcastConfigError) as ei:
        for s in ds:
            got.append(s)
    text = str(ei.value)
    assert "%s and %s both report replica 0 of 2" % (a.url, b.url) in text
    assert "%s reports replica 0 of 2, expected replica 1 of 2" % b.url in text
    assert got == [] and a.requests == [] and b.requests == []
    assert isinstance(ei.value, shardcast.ShardcastProtocolError)  # never retried


def test_settings_that_differ_are_named_with_each_value(replicas):
    a, b, c = replicas(3)
    b.fingerprint = "f" * 32
    b.order = dict(b.order, seed=5, partition="none")
    ds = ShardcastDataset("http://unused", "j", rank=0, world=3, topology=topo([a, b, c]))
    with pytest.raises(ShardcastConfigError) as ei:
        next(iter(ds))
    text = str(ei.value)
    assert "seed: %s=0, %s=5, %s=0" % (a.url, b.url, c.url) in text
    assert "partition: %s=even-drop, %s=none, %s=even-drop" % (a.url, b.url, c.url) in text
    assert "shuffle_buffer" not in text  # the same everywhere
    assert "fingerprint %s at %s" % ("f" * 32, b.url) in text
    assert "(replica 1 of 3)" in text
    assert not any(s.requests for s in (a, b, c))


def test_single_url_must_be_the_only_replica(replicas):
    a, _ = replicas(2)
    with pytest.raises(ShardcastConfigError, match="reports replica 0 of 2, expected replica "
                       "0 of 1 .*give every replica's URL"):
        list(ShardcastDataset(a.url, "j", rank=0, world=1))
    # verify=False streams anyway (part 0 only): the old behaviour
    assert len(list(ShardcastDataset(a.url, "j", rank=0, world=1, verify=False))) > 0


def test_more_urls_than_replicas(replicas):
    a, b = replicas(2)
    extra = replicas(1)[0]
    with pytest.raises(ShardcastConfigError, match="started with --replicas 2, the client "
                       "was given 3 URLs"):
        next(iter(ShardcastDataset("http://unused", "j", rank=0, world=3,
                                   topology=topo([a, b, extra]))))


def test_unreachable_replica_is_skipped_with_a_warning(replicas, caplog):
    a, b = replicas(2)
    down = dead_url()
    caplog.set_level(logging.WARNING, logger="shardcast")
    ds = ShardcastDataset("http://unused", "j", rank=0, world=2, backoff=0.01,
                          topology=Topology([a.url, down]))
    assert keys(ds) == consumer_keys(a, 0, 0, 2, 2)
    assert any("replica 1 (%s) did not answer GET /v1/topology" % down in r.getMessage()
               for r in caplog.records)
    assert ds._identity.skipped[0][:2] == (1, down)


def test_503_is_asked_again_within_the_budget(replicas):
    a, b = replicas(2)
    b.topology_errors = [503, 503]
    ds = ShardcastDataset("http://unused", "j", rank=1, world=2, backoff=0.01,
                          topology=topo([a, b]))
    assert keys(ds) == consumer_keys(a, 0, 1, 2, 2)
    assert len(b.topology_requests) == 3
    b.topology_errors = [503] * 5
    ds = ShardcastDataset("http://unused", "j", rank=1, world=2, backoff=0.01, retries=3,
                          topology=topo([a, b]))
    with pytest.raises(ShardcastHTTPError, match="gave up after 4 attempts") as ei:
        next(iter(ds))
    assert ei.value.status == 503


def test_older_servers_are_checked_for_j_and_r_only(replicas):
    a, b = replicas(2, fingerprint=None)
    a.topology_job = b.topology_job = False   # 400 "unknown parameter job"
    ds = ShardcastDataset("http://unused", "j", rank=1, world=2, topology=topo([a, b]))
    assert keys(ds) == consumer_keys(a, 0, 1, 2, 2)
    assert b.topology_requests == [{"job": "j"}, {}]
    assert ds._identity.fingerprint is None
    b.replicas = 3
    ds = ShardcastDataset("http://unused", "j", rank=1, world=2, topology=topo([a, b]))
    with pytest.raises(ShardcastConfigError, match="replica 1 of 3, expected replica 1 of 2"):
        next(iter(ds))


def test_check_answers_rules():
    urls = ["http://a", "http://b", "http://c"]
    ok = [Answer(k, u, k, 3, FP, ORDER) for k, u in enumerate(urls)]
    ident = check_answers(urls, "j", ok)
    assert ident.fingerprint == FP and ident.order == ORDER
    # A replica without a job object (an older server) is not compared.
    ident = check_answers(urls, "j", ok[:2] + [Answer(2, "http://c", 2, 3, None, None)])
    assert ident.fingerprint == FP
    clash = [ok[0], Answer(1, "http://b", 0, 3, FP, ORDER), Answer(2, "http://c", 0, 3,
                                                                   FP, ORDER)]
    with pytest.raises(ShardcastConfigError,
                       match="http://a, http://b and http://c all report replica 0 of 3"):
        check_answers(urls, "j", clash)
    missing = dict(ORDER)
    del missing["mix"]
    with pytest.raises(ShardcastConfigError, match=r"mix: http://a=none, http://b=\(absent\)"):
        check_answers(urls[:2], "j", [Answer(0, "http://a", 0, 2, FP, ORDER),
                                      Answer(1, "http://b", 1, 2, "e" * 32, missing)])


def test_discover_verify_shares_the_rules(replicas):
    a, b = replicas(2)
    b.replica = 0
    with pytest.raises(ShardcastConfigError, match="both report replica 0 of 2"):
        verify_replicas(topo([a, b]))
    b.replica = 1
    assert verify_replicas(topo([a, b])).fingerprint is None  # no job asked
    assert verify_replicas(topo([a, b]), "j").fingerprint == FP


# --- stream identity -----------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_identity_is_read_and_grouping_unchanged(replicas, fmt):
    """The tar stream starts with a pax global header whose records tarfile
    merges into every member: the samples are grouped as without it."""
    a, b = replicas(2)
    reader = shardcast.open_stream(shardcast.stream_url(b.url, "j", 0, 0, 1, fmt=fmt))
    got = list(reader)
    assert reader.ident == {"fingerprint": FP, "replica": 1, "replicas": 2, "served_by": 1}
    assert keys(got) == part_keys(b, 0, 1)
    assert all(set(s) - {"__key__", "__url__", "__shard__", "__index__", "__position__"}
               == {"cls", "bin", "txt"} for s in got)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("override,what", [
    ({"fingerprint": "d" * 32}, "fingerprint d+, but the replicas verified"),
    ({"replica": 0}, "it serves part 0, the client asked for replica 1's part"),
    ({"replicas": 3}, "it reports 3 replicas, the client has 2")])
def test_stream_header_mismatch_is_a_config_error(replicas, fmt, override, what):
    a, b = replicas(2)
    b.ident_override = override
    ds = ShardcastDataset("http://unused", "j", rank=1, world=2, format=fmt,
                          topology=topo([a, b]))
    got = []
    with pytest.raises(ShardcastConfigError, match=what):
        for s in ds:
            got.append(s)
    assert got == [] and len(b.requests) == 1  # never retried
    # verify=False does not look at it
    ds = ShardcastDataset("http://unused", "j", rank=1, world=2, format=fmt,
                          topology=topo([a, b]), verify=False)
    assert keys(ds) == consumer_keys(a, 0, 1, 2, 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_headers_without_identity_are_accepted(replicas, fmt):
    a, b = replicas(2)
    b.fingerprint = None  # an older server: no keys in its headers, no job object
    ds = ShardcastDataset("http://unused", "j", rank=1, world=2, format=fmt,
                          topology=topo([a, b]))
    assert keys(ds) == consumer_keys(a, 0, 1, 2, 2)


def test_first_fingerprint_seen_is_pinned_when_none_was_verified(replicas):
    a, b = replicas(2)
    a.topology_job = b.topology_job = False  # verification sees no fingerprint
    b.fingerprint = "e" * 32                 # ... and the streams disagree
    a.cuts = [{"after": 3, "count": 1}]      # consumer 0 fails over to b
    ds = ShardcastDataset("http://unused", "j", rank=0, world=2, backoff=0.01,
                          topology=topo([a, b]))
    with pytest.raises(ShardcastConfigError, match="fingerprint e+, but the replicas "
                       "verified %s" % FP):
        list(ds)


# --- failover ------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_failover_mid_stream_is_exactly_once(replicas, fmt, caplog):
    servers = replicas(3)
    caplog.set_level(logging.WARNING, logger="shardcast")
    w = 6
    servers[1].cuts = [{"after": 4, "count": 1}]
    got = {}
    dss = {}
    for c in range(w):
        dss[c] = ShardcastDataset("http://unused", "j", rank=c, world=w, format=fmt,
                                  backoff=0.01, topology=topo(servers))
        got[c] = keys(dss[c])
        assert got[c] == consumer_keys(servers[0], 0, c, w, 3), c
    # consumer 1 (replica 1, local rank 0) went to its first candidate, 2
    assert dss[1].failovers == 1 and dss[1].reconnects == 1
    assert sum(d.failovers for d in dss.values()) == 1
    away = [q for q in servers[2].requests if "replica" in q]
    assert len(away) == 1 and away[0]["replica"] == "1" and away[0]["rank"] == "0" \
        and away[0]["world"] == "2" and int(away[0]["start"]) >= 3
    msgs = [r.getMessage() for r in caplog.records if "continuing consumer" in r.getMessage()]
    assert len(msgs) == 1
    assert "replica 1 (%s) failed" % servers[1].url in msgs[0]
    assert "continuing consumer 1 " in msgs[0] and "from replica 2 (%s)" % servers[2].url \
        in msgs[0] and "at position %s" % away[0]["start"] in msgs[0]


def test_dead_replica_is_covered_quickly_and_home_is_tried_again(replicas):
    servers = replicas(3)
    down = servers[1]
    urls = [s.url for s in servers]
    down.stop()  # connection refused from now on
    t0 = time.monotonic()
    got = {}
    for c in range(6):
        ds = ShardcastDataset("http://unused", "j", rank=c, world=6, topology=Topology(urls))
        got[c] = keys(ds)
        if c % 3 == 1:
            assert ds.failovers == 1
    elapsed = time.monotonic() - t0
    union = sorted(k for ks in got.values() for k in ks)
    expected = sorted(k for c in range(6) for k in consumer_keys(servers[0], 0, c, 6, 3))
    assert union == expected and len(set(union)) == len(union)
    # local ranks 0 and 1 of replica 1 were spread over replicas 2 and 0
    assert [q["replica"] for q in servers[2].requests if "replica" in q] == ["1"]
    assert [q["replica"] for q in servers[0].requests if "replica" in q] == ["1"]
    # two refused connections and a default backoff of 0.25 s: far below
    # the default timeout of 60 s that a silent replica would cost
    assert elapsed < 30, elapsed


def test_retry_budget_counts_attempts_across_replicas(replicas):
    a, b = replicas(2)
    a.cuts = [{"after": 0, "count": 10, "kind": "503"}]
    b.cuts = [{"after": 0, "count": 10, "kind": "503"}]
    ds = ShardcastDataset("http://unused", "j", rank=0, world=2, retries=3, backoff=0.01,
                          topology=topo([a, b]))
    with pytest.raises(ShardcastHTTPError, match="gave up after 4 attempts"):
        list(ds)
    # home, b, home, b: the candidates in turn, home included
    assert len(a.requests) == 2 and len(b.requests) == 2
    assert ds.failovers == 3


def test_server_advice_does_not_delay_the_move_to_another_replica(replicas):
    a, b = replicas(2)
    a.cuts = [{"after": 2, "count": 1, "kind": "error", "retryable": True,
               "retry_after_ms": 60000}]
    t0 = time.monotonic()
    ds = ShardcastDataset("http://unused", "j", rank=0, world=2, topology=topo([a, b]))
    assert keys(ds) == consumer_keys(a, 0, 0, 2, 2)
    assert ds.failovers == 1
    assert time.monotonic() - t0 < 45  # not the 60 s the draining replica asked


def test_a_replica_without_failover_support_is_passed_over(replicas):
    servers = replicas(3)
    servers[2].accept_replica = False   # answers replica= with 400
    servers[1].cuts = [{"after": 1, "count": 1}]
    ds = ShardcastDataset("http://unused", "j", rank=1, world=3, backoff=0.01,
                          topology=topo(servers))
    assert keys(ds) == consumer_keys(servers[0], 0, 1, 3, 3)
    # 1 failed -> 2 refused replica= -> 0 served part 1
    assert ds.failovers == 2
    assert [q.get("replica") for q in servers[0].requests] == ["1"]


def test_a_new_iteration_starts_at_home(replicas):
    a, b = replicas(2)
    a.cuts = [{"after": 1, "count": 1}]
    ds = ShardcastDataset("http://unused", "j", rank=0, world=2, backoff=0.01,
                          topology=topo([a, b]))
    first = keys(ds)
    assert ds.failovers == 1 and len(b.requests) == 1
    ds.set_epoch(1)
    assert keys(ds) == consumer_keys(a, 1, 0, 2, 2)
    assert ds.failovers == 1 and len(b.requests) == 1 and "replica" not in a.requests[-1]
    assert first == consumer_keys(a, 0, 0, 2, 2)


def test_failover_in_dataloader_workers(replicas):
    servers = replicas(2)
    servers[0].cuts = [{"after": 3, "count": 2}]
    ds = ShardcastDataset("http://unused", "j", rank=0, world=1, backoff=0.01,
                          topology=topo(servers))
    got = list(torch.utils.data.DataLoader(ds, num_workers=4, batch_size=None))
    expected = [k for c in range(4) for k in consumer_keys(servers[0], 0, c, 4, 2)]
    assert sorted(keys(got)) == sorted(expected) and len(set(keys(got))) == len(got)
    assert len([q for q in servers[1].requests if q.get("replica") == "0"]) == 2


# --- elastic resume with replicas -----------------------------------------------

def test_replica_cursors():
    # W = 4, R = 2: part 0 has consumers 0, 2; part 1 has 1, 3.
    assert replica_cursors(4, 2, [0, 0], {0: 3, 1: 5, 2: 2, 3: 5}) == [5, 10]
    # W = 5: part 0 is consumers 0, 2, 4 at [1, 1, 0], part 1 is 1, 3 at [1, 0]
    assert replica_cursors(5, 2, [10, 4], [1, 1, 1, 0, 0]) == [10 + 2, 4 + 1]
    with pytest.raises(ValueError, match="replica 1's part"):
        replica_cursors(4, 2, [0, 0], {0: 3, 1: 5, 2: 2, 3: 7})
    with pytest.raises(ValueError, match="missing"):
        replica_cursors(4, 2, [0, 0], {0: 3, 1: 5})


def test_state_form_with_replicas():
    st = make_state("j", 2, 4, 0, {0: 1, 1: 2, 2: 1, 3: 2}, global_starts=[7, 3])
    assert st["replicas"] == 2 and st["global_starts"] == {"0": 7, "1": 3}
    assert st["global_start"] == 7   # an older client refuses it instead of misreading
    n = normalize_state(st)
    assert n["global_starts"] == [7, 3] and n["replicas"] == 2
    one = make_state("j", 2, 4, 5, {0: 1}, global_starts=[5])
    assert "replicas" not in one and "global_starts" not in one and one["global_start"] == 5
    assert normalize_state(one)["replicas"] is None
    for bad, what in [
            (dict(st, global_start=3), "largest"),
            ({k: v for k, v in st.items() if k != "global_starts"}, "go together"),
            (dict(st, global_starts={"0": 7}), "one cursor per replica"),
            (dict(st, global_starts={"0": 7, "2": 3}), "out of 0..1"),
            (dict(st, global_starts={"0": 1 << 63, "1": 3}, global_start=1 << 63), r"2\^63"),
            (dict(st, global_starts={"0": -1, "1": 3}), "non-negative"),
            (dict(st, world=1), "below replicas")]:
        with pytest.raises(ValueError, match=what):
            normalize_state(bad)
    # merge keeps the cursors, and refuses states that disagree on them
    a = make_state("j", 2, 4, 0, {0: 1}, {"consumer": 0, "id": 0, "num_workers": 4},
                   global_starts=[7, 3])
    b = make_state("j", 2, 4, 0, {1: 2}, {"consumer": 1, "id": 1, "num_workers": 4},
                   global_starts=[7, 3])
    m = shardcast.merge_state_dicts([a, b])
    assert m["global_starts"] == {"0": 7, "1": 3} and m["positions"] == {"0": 1, "1": 2}
    with pytest.raises(ValueError, match="different"):
        shardcast.merge_state_dicts([a, make_state("j", 2, 4, 0, {1: 2}, global_starts=[7, 4])])


def test_states_of_another_replica_count_are_refused(replicas):
    a, b = replicas(2)
    ds = ShardcastDataset("http://unused", "j", rank=0, world=3, topology=topo([a, b]))
    with pytest.raises(ValueError, match="taken with 3 replicas"):
        ds.load_state_dict(make_state("j", 0, 3, 0, {0: 1}, global_starts=[0, 0, 0]))
    with pytest.raises(ValueError, match="global cursor .* of one replica"):
        ds.load_state_dict(make_state("j", 0, 3, 4, {0: 1, 1: 1, 2: 1}))
    # a state without per-replica cursors: the same W only
    ds.load_state_dict(make_state("j", 0, 4, 0, {0: 1, 1: 1, 2: 1, 3: 1}))
    with pytest.raises(ValueError, match="does not say how many replicas"):
        ds.consumer()
    one = ShardcastDataset(a.url, "j", rank=0, world=1)
    with pytest.raises(ValueError, match="taken with 2 replicas"):
        one.load_state_dict(make_state("j", 0, 3, 0, {0: 1}, global_starts=[0, 0]))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("new_workers", [3, 4, 6])
def test_elastic_resume_with_replicas(replicas, fmt, new_workers):
    """W = 2 consumers over R = 2 replicas (DataLoader workers of one
    rank), stopped after 7 items; resumed with 3, 4 or 6 workers: every
    part is delivered exactly once (but for the even-drop remainders)."""
    servers = replicas(2)
    t = topo(servers)
    ds = ShardcastDataset("http://unused", "j", rank=0, world=1, format=fmt, epoch=3,
                          topology=t)
    loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None)
    first = []
    for s in loader:
        first.append(s)
        if len(first) == 7:
            break
    del loader
    state = ds.state_dict(consumed=7, num_workers=2)
    assert state["replicas"] == 2 and state["global_starts"] == {"0": 0, "1": 0}
    assert state["positions"] == {"0": 4, "1": 3}
    ds2 = ShardcastDataset("http://unused", "j", rank=0, world=1, format=fmt, topology=t)
    ds2.load_state_dict(state)
    ds2.num_workers = new_workers
    rest = list(torch.utils.data.DataLoader(ds2, num_workers=new_workers, batch_size=None))
    got = keys(first) + keys(rest)
    assert len(set(got)) == len(got), "a sample was delivered twice"
    for j, done in ((0, 4), (1, 3)):
        part = part_keys(servers[0], 3, j)
        lw = (new_workers - j + 1) // 2
        left = (len(part) - done) // lw * lw
        assert sorted(k for k in got if k in set(part)) == sorted(part[:done + left]), j
    # the resumed state of the new run: per-part cursors 4 and 3
    st2 = ds2.state_dict(consumed=0, num_workers=new_workers)
    assert st2["global_starts"] == {"0": 4, "1": 3} and st2["world"] == new_workers
    assert st2["global_start"] == 4


def test_same_world_resume_with_replicas_keeps_the_cursors(replicas):
    servers = replicas(2)
    t = topo(servers)
    st = make_state("j", 0, 4, 0, {0: 2, 1: 3, 2: 1, 3: 3}, global_starts=[5, 2])
    got = {}
    for c in range(4):
        ds = ShardcastDataset("http://unused", "j", rank=c, world=4, topology=t)
        ds.load_state_dict(st)
        assert ds.stream_url().endswith("start=%d&global_start=%d&format=frames"
                                        % (st["positions"][str(c)], [5, 2][c % 2]))
        got[c] = keys(ds)
        own = ds.state_dict()
        assert own["global_starts"] == {"0": 5, "1": 2}
    for c in range(4):
        assert got[c] == consumer_keys(servers[0], 0, c, 4, 2, st["positions"][str(c)],
                                       [5, 2][c % 2])


def test_a_replica_set_alone_names_the_server(monkeypatch):
    """SHARDCAST_URLS (or the template) without SHARDCAST_SERVER or url=:
    the dataset uses the set, its first replica for status."""
    monkeypatch.delenv("SHARDCAST_SERVER", raising=False)
    monkeypatch.delenv("SHARDCAST_URL", raising=False)
    monkeypatch.setenv("SHARDCAST_URLS", "http://a:1,http://b:2")
    ds = ShardcastDataset(job="j", rank=0, world=2)
    assert ds.url == "http://a:1" and ds.topology.urls == ("http://a:1", "http://b:2")
    monkeypatch.delenv("SHARDCAST_URLS")
    monkeypatch.setenv("SHARDCAST_URL_TEMPLATE", "http://shardcast-{j}.h:8080")
    monkeypatch.setenv("SHARDCAST_REPLICAS", "3")
    ds = ShardcastDataset(job="j", rank=0, world=3)
    assert ds.url == "http://shardcast-0.h:8080" and ds.topology.replicas == 3
    monkeypatch.delenv("SHARDCAST_URL_TEMPLATE")
    with pytest.raises(ValueError, match="SHARDCAST_URLS"):
        ShardcastDataset(job="j")
