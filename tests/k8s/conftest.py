"""Fixtures of the Kubernetes tests: the rendered kustomizations (once per
session), the shardcastd binary, the npm validator, a work directory.

Nothing is built or installed here: shardcastd is $SHARDCAST_BIN, else
build/shardcastd or build-*/shardcastd; the validator's node_modules come
from tests/k8s/install.sh (scripts/test.sh runs it). A missing tool or
artifact fails with a message saying how to get it; nothing is skipped.

Run: /usr/bin/python3 -m pytest tests/k8s
"""

import os
import shutil
import tempfile

import pytest

from k8s_testlib import HERE, KUSTOMIZATIONS, render, server_binary


@pytest.fixture(scope="session")
def rendered():
    """{kustomization: (objects, yaml text)} for every kustomization."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl not found (it renders the kustomizations: "
                    "install the kubectl client)", pytrace=False)
    return {k: render(k) for k in KUSTOMIZATIONS}


@pytest.fixture(scope="session")
def shardcastd():
    b = server_binary()
    if b is None:
        pytest.fail("shardcastd not found: build it (cmake into build/ or build-*/) "
                    "or set SHARDCAST_BIN", pytrace=False)
    return b


@pytest.fixture(scope="session")
def node_validator():
    """The command prefix that runs validate.js."""
    if shutil.which("node") is None:
        pytest.fail("node not found (apt-get install nodejs)", pytrace=False)
    for mod in ("kubernetes-models", "@kubernetes-models/prometheus-operator", "typescript"):
        if not os.path.isdir(os.path.join(HERE, "node_modules", mod)):
            pytest.fail("tests/k8s/node_modules/%s missing: run tests/k8s/install.sh" % mod,
                        pytrace=False)
    return ["node", os.path.join(HERE, "validate.js")]


@pytest.fixture(scope="session")
def k8s_workdir():
    with tempfile.TemporaryDirectory(prefix="shardcast-k8s-") as d:
        yield d
