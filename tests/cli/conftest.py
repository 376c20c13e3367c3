"""Fixtures of the `shardcast` command's tests: the command binary, the real
`shardcastd` on a free port of 127.0.0.1 (through the integration suite's
helpers), and small datasets made by tests/tools/mkwds.py.

The command is $SHARDCAST_CLI, else $SHARDCAST_BUILD/shardcast, else the
first existing of build/shardcast and build-*/shardcast. A missing binary is
a failure, never a skip.

Run: /usr/bin/python3 -m pytest tests/cli
"""

import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

from shardcast_testlib import (Dataset, Server, find_cli_binary,  # noqa: E402
                               find_server_binary, make_dataset)


@pytest.fixture(scope="session")
def cli():
    b = find_cli_binary()
    if b is None:
        pytest.fail("the shardcast command was not found: build it (cmake into "
                    "build/ or build-*/) or set SHARDCAST_CLI", pytrace=False)
    return b


@pytest.fixture(scope="session")
def cli_workdir():
    d = tempfile.mkdtemp(prefix="shardcast-cli-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def cli_wds(cli_workdir):
    """5 shards x 21 samples = 105 (105 mod 4 = 1 dropped with W = 4)."""
    d = os.path.join(cli_workdir, "wds")
    return Dataset(d, make_dataset(d, shards=5, per_shard=21, size=1500, seed=7))


@pytest.fixture(scope="session")
def cli_server_factory(cli_workdir):
    b = find_server_binary()
    if b is None:
        pytest.fail("shardcastd not found: build it or set SHARDCAST_BIN", pytrace=False)
    servers = []

    def start(source, job="train", extra=()):
        s = Server(b, ["--job", job, "--source", source, "--seed", "3",
                       "--shuffle-buffer", "32", "--interleave", "2"] + list(extra),
                   cli_workdir)
        servers.append(s)
        return s

    yield start
    bad = []
    for s in servers:
        rc = s.stop()
        if rc not in (0, None):
            bad.append("%s: exit %s\n%s" % (" ".join(s.args), rc, s.log()))
    assert not bad, "shardcastd did not exit cleanly:\n" + "\n".join(bad)


@pytest.fixture(scope="session")
def cli_server(cli_server_factory, cli_wds):
    return cli_server_factory(cli_wds.path)
