"""Fixtures of the install tests (install_testlib.py says what they are)."""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from install_testlib import PY, REPO, clean_env, run  # puts tests/integration on sys.path
from shardcast_testlib import Dataset, Server, make_dataset  # noqa: E402


@pytest.fixture(scope="session")
def build_dir():
    d = os.environ.get("SHARDCAST_BUILD") or os.path.join(REPO, "build")
    d = os.path.abspath(d)
    cache = os.path.join(d, "CMakeCache.txt")
    if not os.path.isfile(cache):
        pytest.fail("no CMake build at %s: build one (scripts/build.sh) or set "
                    "SHARDCAST_BUILD" % d, pytrace=False)
    with open(cache, encoding="utf-8") as f:
        text = f.read()
    if re.search(r"^SHARDCAST_(SANITIZE|TSAN|FUZZ):BOOL=ON$", text, re.M):
        pytest.skip("%s is a sanitizer/fuzz build: the install tests need a plain one" % d)
    with open(os.path.join(d, "cmake_install.cmake"), encoding="utf-8") as f:
        if "pkgconfig.cmake" not in f.read():
            pytest.fail("%s was configured before the install rules: rebuild it "
                        "(scripts/build.sh %s)" % (d, d), pytrace=False)
    for b in ("shardcastd", "shardcast", "libshardcast_client.a"):
        if not os.path.isfile(os.path.join(d, b)):
            pytest.fail("%s/%s is not built" % (d, b), pytrace=False)
    return d


@pytest.fixture(scope="session")
def workdir():
    d = tempfile.mkdtemp(prefix="shardcast-install-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def prefix(build_dir, workdir):
    """The temporary prefix holding `cmake --install BUILD --prefix`."""
    p = os.path.join(workdir, "prefix")
    run(["cmake", "--install", build_dir, "--prefix", p])
    return p


@pytest.fixture(scope="session")
def pkg_env(prefix):
    for tool in ("pkg-config", "cc"):
        if shutil.which(tool) is None:
            pytest.fail("%s not found (Debian: pkg-config, build-essential)" % tool,
                        pytrace=False)
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.path.join(prefix, "lib", "pkgconfig")
    return env


@pytest.fixture(scope="session")
def venv(workdir):
    """A fresh venv (Debian's python3 -m venv, pip from ensurepip) with the
    Python client pip-installed from clients/python: (python, pip output)."""
    d = os.path.join(workdir, "venv")
    r = subprocess.run([PY, "-m", "venv", d], capture_output=True, text=True,
                       env=clean_env())
    if r.returncode != 0:
        pytest.fail("python3 -m venv failed (Debian: apt install python3-venv):\n"
                    + r.stderr, pytrace=False)
    py = os.path.join(d, "bin", "python")
    out = run([os.path.join(d, "bin", "pip"), "install", "-v",
               os.path.join(REPO, "clients", "python")], cwd=workdir, env=clean_env())
    return py, out.stdout + out.stderr


@pytest.fixture(scope="session")
def dataset(workdir):
    d = os.path.join(workdir, "wds")
    return Dataset(d, make_dataset(d, shards=3, per_shard=10, size=300, seed=5))


@pytest.fixture(scope="session")
def server(prefix, dataset, workdir):
    """The installed shardcastd serving the dataset as job "train"."""
    s = Server(os.path.join(prefix, "bin", "shardcastd"),
               ["--job", "train", "--source", dataset.path], workdir)
    yield s
    rc = s.stop()
    assert rc == 0, "shardcastd exit %s\n%s" % (rc, s.log())
