"""Helpers of the install tests; conftest.py has their fixtures: an existing CMake build installed into a
temporary prefix (`cmake --install BUILD --prefix TMP`), the Python client
installed with pip into a fresh venv (offline: PIP_NO_INDEX, no pip
configuration), and the installed shardcastd serving a small dataset.

The build is $SHARDCAST_BUILD, else <repo>/build; it must be configured
from the current CMakeLists.txt (it has the install rules) and not be a
sanitizer build (the installed static libraries would need the sanitizer
runtime in every program linking them: such a build skips them). A missing
tool is a failure, never a skip. Everything is made under one temporary folder, removed at the end.

`cmake --install` writes install_manifest.txt and pkgconfig/*.pc (the .pc
files are written at install time, for the prefix installed into) into the
build folder; nothing else there changes.

Run: SHARDCAST_BUILD=<build> /usr/bin/python3 -m pytest tests/install
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

PY = "/usr/bin/python3"


def project_version():
    """project(VERSION) of CMakeLists.txt: shardcast's one version."""
    with open(os.path.join(REPO, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"^project\(shardcast VERSION (\d+\.\d+\.\d+)\b", f.read(), re.M)
    assert m, "CMakeLists.txt has no project(shardcast VERSION x.y.z)"
    return m.group(1)


def clean_env(**extra):
    """The environment of an installed program: no SHARDCAST_BUILD, no
    PYTHONPATH, no pip settings of this machine (a pip index, find-links);
    pip may not reach any index."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SHARDCAST_", "PIP_", "PYTHON"))}
    env.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    r = subprocess.run(cmd, **kw)
    assert r.returncode == 0, "%s: exit %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(cmd), r.returncode, r.stdout[-4000:], r.stderr[-4000:])
    return r


