"""ShardcastDataset routes each consumer to its replica (scale-out) and
sends the consumer bearer token."""
import http.server
import threading

import pytest

from shardcast import ShardcastDataset, ShardcastHTTPError, Topology
from shardcast_fake import EpochServer, make_samples


def test_consumers_routed_to_replicas():
    samples = make_samples(40)
    a, b = EpochServer({"j": samples}), EpochServer({"j": samples})
    a.replicas = b.replicas = 2
    b.replica = 1
    try:
        topo = Topology([a.url, b.url])
        got = {}
        for c in range(3):  # W = 3 over R = 2
            ds = ShardcastDataset("http://unused", "j", rank=c, world=3,
                                  topology=topo, retries=0)
            got[c] = [s["__index__"] for s in ds]
        # consumer c -> replica c mod 2, local rank c div 2 of the
        # consumers that replica serves (2 on replica 0, 1 on replica 1)
        qa = sorted((q["rank"], q["world"]) for q in a.requests)
        qb = sorted((q["rank"], q["world"]) for q in b.requests)
        assert qa == [("0", "2"), ("1", "2")]
        assert qb == [("0", "1")]
        assert got[0] == [i for i, _, _ in a.share("j", 0, 0, 2)]
        assert got[2] == [i for i, _, _ in a.share("j", 0, 1, 2)]
        assert got[1] == [i for i, _, _ in b.share("j", 0, 0, 1)]
        # a global cursor is the cursor of the consumer's part (elastic
        # resume with replicas, tests/integration/test_replica_failover.py); the home replica is
        # asked without replica=
        ds = ShardcastDataset("http://unused", "j", rank=1, world=3,
                              topology=topo)
        url = ds.stream_url(global_start=10)
        assert url.startswith(b.url) and "global_start=10" in url
        assert "replica=" not in url
    finally:
        a.stop()
        b.stop()


def test_token_is_sent():
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            body = b"error: bad token\n"
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = "http://127.0.0.1:%d" % srv.server_address[1]
        ds = ShardcastDataset(url, "j", rank=0, world=1, token="s3cret",
                              retries=0)
        with pytest.raises(ShardcastHTTPError) as e:
            list(ds)
        assert e.value.status == 401
        # Every request carries the token: the stream's, and the status
        # request of the length hint list() asks for (len(ds)).
        assert seen and set(seen) == {"Bearer s3cret"}
    finally:
        srv.shutdown()
        srv.server_close()
