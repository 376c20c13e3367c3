"""What the benchmark smoke tests share: run one bench/*.sh in its quick
mode against the binaries of $SHARDCAST_BUILD (else build/), as they are
(no packages installed, nothing built), into fresh output and data
folders, and read the results.json it wrote."""

import json
import os
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def build_dir():
    return os.environ.get("SHARDCAST_BUILD") or os.path.join(REPO, "build")


def run_quick(script, tmp_path_factory, name, timeout, extra=()):
    """bench/<script> --quick [extra] into temporary --out and --data
    folders; returns (out folder, data folder, results.json, output)."""
    build = build_dir()
    if not os.access(os.path.join(build, "shardcastd"), os.X_OK):
        pytest.fail("shardcastd is not built in %s (run scripts/build.sh or set "
                    "SHARDCAST_BUILD)" % build, pytrace=False)
    out = tmp_path_factory.mktemp(name + "-quick")
    data = tmp_path_factory.mktemp(name + "-data")
    p = subprocess.run(["bash", os.path.join(REPO, "bench", script), "--quick",
                        "--skip-deps", "--skip-build", *extra,
                        "--build", build, "--out", str(out), "--data", str(data)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    log = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, "bench/%s --quick failed (%d):\n%s" % (
        script, p.returncode, log[-6000:])
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    return out, data, results, log
