"""The scale-out overlay's peers check on loopback: R shardcastd replicas
started through the image's entrypoint as the StatefulSet starts them,
with the rendered SHARDCAST_PEERS template mapped from the headless
Service's names (shardcast-{j}.shardcast-headless:8080) to loopback
addresses (127.0.1.{j}:PORT), as cluster DNS maps them to the pods.

  * all R replicas see each other (/v1/topology "peers": self and ok) and
    are ready;
  * a replica that dies is "down" to the others, who stay ready;
  * a server that answers at replica 2's name as replica 1 (a wrong
    SHARDCAST_REPLICA) makes itself and replica 1 not ready
    (/readyz 503 "replica conflict: ..."; event=peer_state state=conflict
    in the log), while replica 0 reports it as a mismatch and stays
    ready;
  * replaced by a right replica 2, the set is ready again.
"""

import json
import os
import time
import urllib.error
import urllib.request

import pytest

from k8s_testlib import Replica, by_kind, free_port, host_of
from shardcast_testlib import make_dataset

TOKEN = "k8s-peers-token"
HEADERS = {"Authorization": "Bearer " + TOKEN}
PEER_INTERVAL_MS = 200
DEADLINE = 20.0


def rendered_peers(rendered):
    """(R, SHARDCAST_PEERS, StatefulSet name, headless Service name, port)
    of the rendered scale-out overlay."""
    objects = rendered["overlays/scale-out"][0]
    sts = by_kind(objects, "StatefulSet", "shardcast")[0]
    c = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    return (sts["spec"]["replicas"], env["SHARDCAST_PEERS"]["value"], sts["metadata"]["name"],
            sts["spec"]["serviceName"], c["ports"][0]["containerPort"])


def readyz(pod):
    """(status, body) of GET /readyz, with the token (the reason shown)."""
    req = urllib.request.Request(pod.url + "/readyz", headers=HEADERS)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def peer_states(pod):
    return [p["state"] for p in pod.get_json("/v1/topology", headers=HEADERS)["peers"]]


def wait_for(what, check):
    deadline = time.monotonic() + DEADLINE
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.05)


@pytest.fixture
def peer_set(rendered, shardcastd, k8s_workdir):
    R, peers, sts, svc, port = rendered_peers(rendered)
    name = "%s-{j}.%s:%d" % (sts, svc, port)
    assert peers == "http://" + name, peers   # test_render.py checks it in detail
    ds = os.path.join(k8s_workdir, "peers-ds")
    if not os.path.isdir(ds):
        make_dataset(ds, shards=4, per_shard=5, size=200, seed=2)
    cfg = os.path.join(k8s_workdir, "peers.json")
    with open(cfg, "w") as f:
        json.dump({"jobs": [{"name": "train", "source": ds, "seed": 1}]}, f)
    lport = free_port(R)
    env = {"SHARDCAST_TOKEN": TOKEN, "SHARDCAST_PEER_INTERVAL": str(PEER_INTERVAL_MS),
           # cluster DNS -> loopback: shardcast-J.shardcast-headless:8080 is
           # 127.0.1.J:PORT
           "SHARDCAST_PEERS": peers.replace(name, "127.0.1.{j}:%d" % lport)}

    def start(j, pod=None, **extra):
        return Replica(shardcastd, pod or "%s-%d" % (sts, j), R, host_of(j), lport,
                       ["--config", cfg], k8s_workdir, extra_env=dict(env, **extra))

    pods = [start(j) for j in range(R)]
    yield pods, start
    for p in pods:
        p.stop()


def test_peers_check_through_the_rendered_template(peer_set):
    pods, start = peer_set
    R = len(pods)
    assert R >= 3, "the test needs replicas 0, 1 and 2"
    want = [["self" if k == j else "ok" for k in range(R)] for j in range(R)]
    wait_for("every replica to see its peers",
             lambda: [peer_states(p) for p in pods] == want)
    assert all(readyz(p) == (200, "ready\n") for p in pods)

    # Replica 2 dies: "down" to the others, who stay ready.
    pods[2].kill()
    pods[2].stop()
    wait_for("replica 2 down", lambda: peer_states(pods[0])[2] == "down"
             and peer_states(pods[1])[2] == "down")
    assert readyz(pods[0])[0] == 200 and readyz(pods[1])[0] == 200

    # A server answering at replica 2's name as replica 1.
    pods[2] = start(2, SHARDCAST_REPLICA="1")
    for j in (1, 2):
        status, body = wait_for("replica %d not ready" % j,
                                lambda: (lambda r: r if r[0] == 503 else None)(readyz(pods[j])))
        assert "replica conflict" in body, body
    assert readyz(pods[0])[0] == 200
    wait_for("replica 0 to report a mismatch at peer 2",
             lambda: peer_states(pods[0])[2] == "mismatch")
    assert peer_states(pods[1])[2] == "conflict"
    for j in (1, 2):
        log = pods[j].wait_log("event=peer_state", "state=conflict")
        assert "event=peer_state" in log and "state=conflict" in log, log

    # Replaced by the right replica 2: the set is ready again.
    pods[2].stop()
    pods[2] = start(2)
    wait_for("every replica ready again",
             lambda: all(readyz(p)[0] == 200 for p in pods)
             and [peer_states(p) for p in pods] == want)
