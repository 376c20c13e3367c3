"""shardcast.topology: the consumer -> replica rule, URL templates,
environment and discovery (GET /v1/topology, here from small local HTTP
servers that answer as a replica would, including wrong answers)."""

import http.server
import json
import threading

import pytest

from shardcast.errors import ShardcastConnectionError, ShardcastHTTPError, ShardcastProtocolError
from shardcast.topology import (Route, Topology, expand_template, local_world, replica_of,
                                route)


@pytest.mark.parametrize("replicas", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("world", [8, 9, 13, 64])
def test_rule_partitions_consumers(replicas, world):
    seen = {}
    for c in range(world):
        j, lr, lw = route(c, world, replicas)
        assert j == replica_of(c, replicas) == c % replicas
        assert lr == c // replicas
        assert lw == local_world(j, world, replicas) == len([x for x in range(world)
                                                             if x % replicas == j])
        assert 0 <= lr < lw
        seen.setdefault(j, set()).add(lr)
    # Each replica's consumers are exactly local ranks 0 .. local_world-1.
    assert sorted(seen) == list(range(replicas))
    for j, ranks in seen.items():
        assert ranks == set(range(local_world(j, world, replicas)))


def test_rule_refuses_fewer_consumers_than_replicas():
    with pytest.raises(ValueError, match="every replica needs at least one consumer"):
        route(0, 2, 3)
    with pytest.raises(ValueError):
        route(4, 4, 2)       # consumer out of range
    with pytest.raises(ValueError):
        route(True, 4, 2)    # bools are not ints
    assert local_world(2, 2, 3) == 0


def test_template_and_explicit_urls():
    t = Topology.from_template("http://shardcast-{j}.shardcast-headless:8080", 3)
    assert t.urls == ("http://shardcast-0.shardcast-headless:8080",
                      "http://shardcast-1.shardcast-headless:8080",
                      "http://shardcast-2.shardcast-headless:8080")
    assert t.route(7, 8) == Route("http://shardcast-1.shardcast-headless:8080", 1, 2, 3)
    assert Topology(["http://a:1/", "http://b:1"]).urls == ("http://a:1", "http://b:1")
    for bad in ("http://x:1", "http://{j}{j}:1"):   # no / two placeholders
        with pytest.raises(ValueError, match="exactly once"):
            expand_template(bad, 2)
    with pytest.raises(ValueError, match="not an http"):
        Topology.from_template("ftp://{j}", 2)
    with pytest.raises(ValueError):
        Topology(["http://a:1", "http://a:1"])
    with pytest.raises(ValueError):
        Topology("http://a:1")
    with pytest.raises(ValueError):
        Topology(["http://a:1?x=1"])


def test_from_env():
    assert Topology.from_env("http://svc:8080", {}).urls == ("http://svc:8080",)
    env = {"SHARDCAST_URL_TEMPLATE": "http://s-{j}.h:8080", "SHARDCAST_REPLICAS": "2"}
    assert Topology.from_env("http://svc:8080", env).urls == ("http://s-0.h:8080",
                                                              "http://s-1.h:8080")
    assert Topology.from_env("x", {"SHARDCAST_URLS": "http://a:1, http://b:2"}).replicas == 2
    with pytest.raises(ValueError, match="SHARDCAST_REPLICAS"):
        Topology.from_env("x", {"SHARDCAST_URL_TEMPLATE": "http://s-{j}:1"})
    with pytest.raises(ValueError, match="not both"):
        Topology.from_env("x", {"SHARDCAST_URLS": "http://a:1",
                                "SHARDCAST_URL_TEMPLATE": "http://s-{j}:1"})


class FakeReplicas:
    """R tiny HTTP servers on 127.0.1.j answering GET /v1/topology with
    answers[j] (a dict, or (status, body bytes))."""

    def __init__(self, answers):
        from k8s_testlib import free_port, host_of
        self.port = free_port(len(answers))
        self.template = "http://127.0.1.{j}:%d" % self.port
        self.servers = []
        for j, answer in enumerate(answers):
            class H(http.server.BaseHTTPRequestHandler):
                reply = answer

                def do_GET(self):
                    self.server.auth = self.headers.get("Authorization")
                    status, body = (self.reply if isinstance(self.reply, tuple)
                                    else (200, json.dumps(self.reply).encode()))
                    self.send_response(status if self.path == "/v1/topology" else 404)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

                def log_message(self, *a):
                    pass

            s = http.server.ThreadingHTTPServer((host_of(j), self.port), H)
            s.auth = None
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True).start()
            self.servers.append(s)

    def url(self, j):
        return self.template.replace("{j}", str(j))

    def close(self):
        for s in self.servers:
            s.shutdown()
            s.server_close()


@pytest.fixture
def fake():
    made = []

    def make(answers):
        f = FakeReplicas(answers)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def test_discover_with_template_and_verify(fake):
    f = fake([{"replica": j, "replicas": 3, "rule": "..."} for j in range(3)])
    t = Topology.discover(f.url(1), template=f.template, verify=True,
                          headers={"Authorization": "Bearer tok"})
    assert t.urls == tuple(f.url(j) for j in range(3))
    assert all(s.auth == "Bearer tok" for s in f.servers)


def test_discover_single_replica_and_missing_template(fake):
    f = fake([{"replica": 0, "replicas": 1}])
    assert Topology.discover(f.url(0)).urls == (f.url(0),)
    g = fake([{"replica": 0, "replicas": 2}, {"replica": 1, "replicas": 2}])
    with pytest.raises(ShardcastProtocolError, match="URL template"):
        Topology.discover(g.url(0))


def test_discover_catches_misconfigured_replicas(fake):
    # replica 1 was started with another --replicas (StatefulSet scaled
    # without its setting)
    f = fake([{"replica": 0, "replicas": 2}, {"replica": 1, "replicas": 3}])
    Topology.discover(f.url(0), template=f.template)  # not asked without verify
    with pytest.raises(ShardcastProtocolError, match="expected replica 1 of 2"):
        Topology.discover(f.url(0), template=f.template, verify=True)
    # a replica that answers as another J than its name says
    g = fake([{"replica": 1, "replicas": 2}, {"replica": 1, "replicas": 2}])
    with pytest.raises(ShardcastProtocolError, match="template names it replica 0"):
        Topology.discover(g.url(0), template=g.template)


@pytest.mark.parametrize("answer,err", [
    ((401, b"error: unauthorized\n"), ShardcastHTTPError),
    ((200, b"not json"), ShardcastProtocolError),
    ((200, b"[1, 2]"), ShardcastProtocolError),
    ((200, b'{"replica": "0", "replicas": 1}'), ShardcastProtocolError),
    ((200, b'{"replica": 2, "replicas": 2}'), ShardcastProtocolError),
    ((200, b'{"replica": 0, "replicas": true}'), ShardcastProtocolError),
    ((200, b" " * (70 * 1024)), ShardcastProtocolError)])
def test_discover_rejects_bad_answers(fake, answer, err):
    f = fake([answer])
    with pytest.raises(err):
        Topology.discover(f.url(0))


def test_discover_connection_error():
    from k8s_testlib import free_port, host_of
    port = free_port(1)  # nothing listens there
    with pytest.raises(ShardcastConnectionError):
        Topology.discover("http://%s:%d" % (host_of(0), port), timeout=5)
