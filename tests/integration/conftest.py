"""Fixtures of shardcast's integration tests: the real `shardcastd` binary on
a free port of 127.0.0.1, datasets made by tests/tools/mkwds.py, the
WebDataset format corpus made by tests/tools/mkfixtures.py, and the
upstream WebDataset shards of the shared test data.

Nothing is built here. The server binary is $SHARDCAST_BIN, else the first
existing of build/shardcastd and build-*/shardcastd under the repository
root. The shared test data is $SHARED_DIR, else ../shared beside the repo;
the tests that read it are marked `conformance` and are skipped when it is
absent (scripts/test.sh runs them as the conformance layer).

Run: /usr/bin/python3 -m pytest tests/integration
"""

import os
import tempfile

import pytest

from shardcast_testlib import (Dataset, listen_port, Server, find_server_binary, make_dataset,
                               make_fixture_corpus, upstream_corpus)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "conformance: reads the upstream corpora of ../shared/testdata "
        "(the conformance layer); skipped when they are absent")


@pytest.fixture(scope="session")
def server_binary():
    b = find_server_binary()
    if b is None:
        pytest.fail("shardcastd not found: build it (scripts/build.sh, or cmake into "
                    "build-*/) or set SHARDCAST_BIN", pytrace=False)
    return b


@pytest.fixture(scope="session")
def workdir():
    with tempfile.TemporaryDirectory(prefix="shardcast-it-") as d:
        yield d


@pytest.fixture(scope="session")
def start_server(server_binary, workdir):
    """start_server(source, job="train", seed=0, extra=[...]) -> Server.
    Every server started is stopped at the end of the session; a test that
    expects a server to stay healthy checks server.alive(). Unless extra
    sets --drain-grace, streams left open get 2 s after the final SIGTERM
    (the default is 30 s)."""
    servers = []

    def start(source, *, job="train", seed=0, extra=()):
        args = ["--job", job, "--source", source, "--seed", str(seed)] + list(extra)
        if "--drain-grace" not in args:
            args += ["--drain-grace", "2"]
        s = Server(server_binary, args, workdir)
        servers.append(s)
        return s

    yield start
    crashed = []
    for s in servers:
        rc = s.stop()
        # SIGTERM must stop the daemon cleanly (exit 0).
        if rc not in (0, None):
            crashed.append("%s: exit %s\n%s" % (" ".join(s.args), rc, s.log()))
    assert not crashed, "shardcastd did not exit cleanly:\n" + "\n".join(crashed)


@pytest.fixture
def free_port():
    """A TCP port of 127.0.0.1 that was free a moment ago (below the
    ephemeral range: shardcast_testlib.listen_port)."""
    return listen_port()


@pytest.fixture(scope="session")
def small_wds(workdir):
    """7 shards x 31 samples (217, so 217 mod 4 = 1 is dropped with W = 4)."""
    d = os.path.join(workdir, "small")
    return Dataset(d, make_dataset(d, shards=7, per_shard=31, size=3000, seed=11))


@pytest.fixture(scope="session")
def small_server(start_server, small_wds):
    return start_server(small_wds.path, job="train", seed=5,
                        extra=["--shuffle-buffer", "64", "--interleave", "3"])


@pytest.fixture(scope="session")
def generated_wds(workdir):
    """The WebDataset format corpus of tests/tools/mkfixtures.py (GNU, pax
    and gzip tars, directory keys, multi-dot extensions, long and UTF-8
    names, __*__ members) and its manifest."""
    d = os.path.join(workdir, "fixtures-wds")
    return Dataset(d, make_fixture_corpus(d))


@pytest.fixture(scope="session")
def upstream_wds():
    """The upstream webdataset test shards (tests marked conformance)."""
    return upstream_corpus("wds")
