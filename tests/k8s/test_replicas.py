"""Scale-out on loopback: R shardcastd processes configured as R replicas
(started through the image's entrypoint exactly as the StatefulSet starts
them: SHARDCAST_POD_NAME=shardcast-J, SHARDCAST_REPLICAS=R), consumers
mapped to replicas by shardcast.topology.

Replica J listens on 127.0.1.J:PORT, so one URL template
"http://127.0.1.{j}:PORT" names them all, as
"http://shardcast-{j}.shardcast-headless:8080" does in a cluster.

What is shown, for R = 1, 2, 3 and W = 5 consumers:
  * partition "none": the union of all streams is every sample of the
    dataset exactly once (content hashes against mkwds' manifest);
  * partition "even-drop": no sample twice, and only the remainders are
    dropped: at most (local world - 1) samples per replica, every
    consumer of a replica getting the same count;
  * the same epoch from freshly started replicas is the same sequence for
    every consumer (order stable across runs);
  * a replica killed mid-epoch and started again serves the same part: its
    consumers resume from their position and the epoch is still exactly
    once and in the same order.
"""

import collections
import os
import threading
import time

import pytest

import shardcast
from k8s_testlib import Replica, free_port, host_of
from shardcast.topology import Topology, local_world
from shardcast_testlib import make_dataset

TOKEN = "k8s-test-consumer-token"
HEADERS = {"Authorization": "Bearer " + TOKEN}
WORLD = 5
SHARDS, PER_SHARD = 12, 17          # 204 samples: 204 mod 5 = 4
READ_TIMEOUT = 60.0
RESUME_DEADLINE = 30.0              # seconds a cut consumer keeps retrying


@pytest.fixture(scope="module")
def dataset(k8s_workdir):
    d = os.path.join(k8s_workdir, "replicas-ds")
    return d, make_dataset(d, shards=SHARDS, per_shard=PER_SHARD, size=700, seed=3)


@pytest.fixture(scope="module")
def config_file(dataset, k8s_workdir):
    """Two jobs over the same shards: exactly-once ("none") and "even-drop"."""
    import json
    common = {"source": dataset[0], "seed": 9, "shuffle_buffer": 40, "interleave": 3,
              "read_threads": 2}
    cfg = {"jobs": [dict(common, name="exact", partition="none"),
                    dict(common, name="drop", partition="even-drop")]}
    path = os.path.join(k8s_workdir, "replicas.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


class Cluster:
    """R replicas of one StatefulSet on loopback."""

    def __init__(self, binary, replicas, config, workdir):
        self.binary, self.replicas, self.config, self.workdir = binary, replicas, config, workdir
        self.port = free_port(replicas)
        self.template = "http://127.0.1.{j}:%d" % self.port
        self.pods = [None] * replicas
        try:
            for j in range(replicas):
                self.start(j)
        except Exception:
            self.stop()
            raise

    def start(self, j):
        self.pods[j] = Replica(self.binary, "shardcast-%d" % j, self.replicas, host_of(j),
                               self.port, ["--config", self.config], self.workdir,
                               extra_env={"SHARDCAST_TOKEN": TOKEN})

    def stop(self):
        codes = [p.stop() for p in self.pods if p is not None]
        self.pods = [None] * self.replicas
        return codes


@pytest.fixture
def cluster(shardcastd, config_file, k8s_workdir):
    made = []

    def make(replicas):
        c = Cluster(shardcastd, replicas, config_file, k8s_workdir)
        made.append(c)
        return c

    yield make
    for c in made:
        for code in c.stop():
            assert code == 0, "a replica did not stop cleanly"


def read_share(route, job, epoch, *, pause=0.0, progress=None):
    """Hashes of one consumer's share, resuming a cut stream with start=."""
    got, deadline = [], None
    while True:
        url = shardcast.stream_url(route.url, job, epoch, route.local_rank, route.local_world,
                                   start=len(got) if got else None)
        try:
            with shardcast.StreamReader(url, timeout=READ_TIMEOUT, headers=HEADERS) as r:
                for s in r:
                    got.append(shardcast.sample_hash(s))
                    if progress is not None:
                        progress[0] = len(got)
                    if pause:
                        time.sleep(pause)
            return got
        except (shardcast.ShardcastConnectionError, shardcast.ShardcastIncompleteError):
            deadline = deadline or time.monotonic() + RESUME_DEADLINE
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_epoch(topology, job, epoch, world=WORLD, pause=None, progress=None):
    """{consumer: [hashes]} with every consumer reading concurrently, as
    DataLoader workers do."""
    out, errors = {}, []

    def run(c):
        try:
            p = pause(c) if pause else 0.0
            out[c] = read_share(topology.route(c, world), job, epoch, pause=p,
                                progress=progress[c] if progress else None)
        except Exception as e:  # reported below, with the consumer
            errors.append("consumer %d: %r" % (c, e))

    threads = [threading.Thread(target=run, args=(c,)) for c in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(READ_TIMEOUT * 2)
    assert not any(t.is_alive() for t in threads), "a consumer hung"
    assert not errors, errors
    return out


def check_topology(cl):
    topo = Topology.discover(cl.pods[0].url, template=cl.template, verify=True,
                             headers=HEADERS)
    assert topo.replicas == cl.replicas
    assert list(topo.urls) == [p.url for p in cl.pods]
    for j, p in enumerate(cl.pods):
        doc = p.get_json("/v1/topology", headers=HEADERS)
        assert (doc["replica"], doc["replicas"]) == (j, cl.replicas)
    return topo


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_exactly_once_and_stable_order(cluster, dataset, replicas):
    manifest = dataset[1]
    want = collections.Counter(s["hash"] for s in manifest["samples"])
    assert sum(want.values()) == SHARDS * PER_SHARD

    cl = cluster(replicas)
    topo = check_topology(cl)
    exact = read_epoch(topo, "exact", 0)
    drop = read_epoch(topo, "drop", 0)
    other_epoch = read_epoch(topo, "exact", 1)
    cl.stop()

    # partition none: every sample exactly once
    got = collections.Counter(h for seq in exact.values() for h in seq)
    assert got == want, "union of %d streams differs from the dataset: missing %d, extra %d" % (
        WORLD, sum((want - got).values()), sum((got - want).values()))
    assert collections.Counter(h for s in other_epoch.values() for h in s) == want
    assert [other_epoch[c] for c in range(WORLD)] != [exact[c] for c in range(WORLD)]

    # even-drop: no duplicate, at most (local world - 1) dropped per replica
    got = collections.Counter(h for seq in drop.values() for h in seq)
    assert max(got.values()) == 1 and not got - want
    allowed = sum(local_world(j, WORLD, replicas) - 1 for j in range(replicas))
    dropped = sum(want.values()) - sum(got.values())
    assert 0 <= dropped <= allowed, (dropped, allowed)
    for j in range(replicas):
        counts = {len(drop[c]) for c in range(WORLD) if c % replicas == j}
        assert len(counts) == 1, "consumers of replica %d got %s samples" % (j, counts)
    # Each replica's drop is its own remainder: the drop stream is the
    # exact stream cut to the equal count.
    for c in range(WORLD):
        assert drop[c] == exact[c][:len(drop[c])]

    # Order stable: fresh replicas, same sequences for every consumer.
    cl2 = cluster(replicas)
    topo2 = check_topology(cl2)
    assert read_epoch(topo2, "exact", 0) == exact
    assert read_epoch(topo2, "drop", 0) == drop


def test_replica_restart_resumes_exactly_once(cluster, dataset):
    replicas, world = 2, 4
    cl = cluster(replicas)
    topo = check_topology(cl)
    reference = read_epoch(topo, "exact", 0, world=world)

    # Replica 1's consumers read slowly; kill it once they are under way,
    # then start it again under the same pod name.
    progress = {c: [0] for c in range(world)}
    result = {}

    def reader():
        result["epoch"] = read_epoch(topo, "exact", 0, world=world,
                                     pause=lambda c: 0.02 if c % replicas == 1 else 0.0,
                                     progress=progress)

    t = threading.Thread(target=reader)
    t.start()
    deadline = time.monotonic() + 30
    while min(progress[1][0], progress[3][0]) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    at_kill = (progress[1][0], progress[3][0])
    cl.pods[1].kill()
    cl.pods[1]._stderr.close()
    time.sleep(0.5)
    cl.start(1)
    t.join(READ_TIMEOUT * 3)
    assert not t.is_alive(), "consumers did not finish after the restart"
    assert 5 <= min(at_kill) and max(at_kill) < len(reference[1]), at_kill
    assert result["epoch"] == reference
