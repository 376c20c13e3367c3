"""Fixtures of the server suites (tests/server, tests/trust): the real
shardcastd on free loopback ports, datasets made by tests/tools/mkwds.py,
and the sc_loadgen helper. Each suite's conftest.py imports them.

Binaries: $SHARDCAST_BIN for the server (else build/ or build-*/ under the
repository), $SHARDCAST_BUILD/sc_loadgen (else next to the server binary)
for the load generator. A missing binary fails the test with a message; it
never skips.

Run: /usr/bin/python3 -m pytest tests/server
"""

import os
import tempfile

import pytest

from server_testlib import Dataset, Server, find_server_binary, make_dataset


@pytest.fixture(scope="session")
def server_binary():
    b = find_server_binary()
    if b is None:
        pytest.fail("shardcastd not found: build it (scripts/build.sh, or cmake into "
                    "build-*/) or set SHARDCAST_BIN", pytrace=False)
    return b


@pytest.fixture(scope="session")
def loadgen_binary(server_binary):
    d = os.environ.get("SHARDCAST_BUILD") or os.path.dirname(server_binary)
    b = os.path.join(d, "sc_loadgen")
    if not os.access(b, os.X_OK):
        pytest.fail("sc_loadgen not found at %s: build the tests/tools targets" % b,
                    pytrace=False)
    return b


@pytest.fixture(scope="session")
def workdir():
    with tempfile.TemporaryDirectory(prefix="shardcast-srv-") as d:
        yield d


@pytest.fixture
def start(server_binary, workdir):
    """start(*args, env=None) -> Server; every server is stopped at the end
    of the test and must have exited 0 (or been stopped by the test).
    Unless a test sets --drain-grace, streams left open get 2 s after the
    final SIGTERM (a stream suspended for a consumer that has gone away is
    only noticed when it is resumed: by data, or by the drain's cut)."""
    servers = []

    def run(*args, env=None):
        args = list(args)
        if "--drain-grace" not in args:
            args += ["--drain-grace", "2"]
        s = Server(server_binary, args, workdir, env=env)
        servers.append(s)
        return s

    yield run
    bad = []
    for s in servers:
        rc = s.stop()
        if rc not in (0, None):
            bad.append("%s: exit %s\n%s" % (" ".join(s.args), rc, s.log()))
    assert not bad, "shardcastd did not exit cleanly:\n" + "\n".join(bad)


@pytest.fixture(scope="session")
def small_ds(workdir):
    """5 shards x 40 samples of ~2 KB (200 samples)."""
    d = os.path.join(workdir, "small")
    return Dataset(d, make_dataset(d, shards=5, per_shard=40, size=2000, seed=3))


@pytest.fixture(scope="session")
def medium_ds(workdir):
    """8 shards x 400 samples of ~8 KB (3200 samples, ~26 MB)."""
    d = os.path.join(workdir, "medium")
    return Dataset(d, make_dataset(d, shards=8, per_shard=400, size=8000, seed=4))
