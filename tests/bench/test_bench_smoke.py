"""Smoke test of the benchmark (bench/run.sh --quick): proves that the
harness still runs end to end against this tree — datasets, nginx, s3rver
with the counting proxy, every contender (or a stated reason why it is not
available), the exactly-once check, the JSON/Markdown/PNG output. It checks
that the figures are sane, never performance targets.

Uses the binaries of $SHARDCAST_BUILD (else build/) as they are: it neither
installs packages nor builds. Takes about 30 s on 2 cores.
"""

import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TIMEOUT = 170  # seconds for the whole quick run (it takes ~35 s)

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_contenders  # noqa: E402
from smoke_support import run_quick  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    # One shape: every contender starts its own processes (torch's import
    # is most of a Python contender's 3 s), and the second shape doubled
    # that without reaching any other code of the harness.
    out, _, results, log = run_quick("run.sh", tmp_path_factory, "bench",
                                     TIMEOUT, extra=("--shapes", "tokens"))
    return out, results, log


def test_every_contender_is_listed(quick):
    _, results, _ = quick
    names = {c.name for c in bench_contenders.all_contenders()}
    listed = {c["name"] for c in results["contenders"]}
    assert listed == names
    for c in results["contenders"]:
        # Either it ran, or the JSON says plainly why not.
        assert c["available"] or c["reason"], c


def test_available_contenders_ran_every_cell(quick):
    _, results, log = quick
    runnable = [c["name"] for c in results["contenders"] if c["available"]]
    # The baseline, the ceiling and the tar client exist in every tree.
    for must in ("ceiling-curl", "baseline-http", "baseline-s3",
                 "shardcast-py-tar", "ceiling-curl-s3"):
        assert must in runnable, (must, results["contenders"])
    cells = {(r["contender"], r["shape"], r["workers"]): r for r in results["runs"]}
    for name in runnable:
        for shape in results["datasets"]:
            for w in results["config"]["workers"]:
                r = cells.get((name, shape, w))
                assert r is not None, (name, shape, w)
                assert r["status"] == "ok", "%s %s W=%d: %s\n%s" % (
                    name, shape, w, r.get("reason"), log[-3000:])


def test_figures_are_sane(quick):
    _, results, _ = quick
    for r in results["runs"]:
        if r["status"] != "ok":
            continue
        ds = results["datasets"][r["shape"]]
        assert r["samples"] > 0
        assert r["samples"] <= ds["samples"]
        assert 0 < r["elapsed_s"] < 120
        assert r["samples_per_s"] > 0 and r["mb_per_s"] > 0
        assert r["ttfs_s"] is not None and 0 <= r["ttfs_s"] <= r["elapsed_s"]
        assert r["cpu_s"] >= 0
        # Every shard was read from the store at least once.
        assert r["store"]["gets"] >= ds["shape"]["shards"], r["store"]
        assert r["store"]["bytes"] >= ds["tar_bytes"], r["store"]
        fam = r["contender"].split("-")[0]
        if fam in ("baseline", "shardcast"):
            # Consumer processes report a real peak RSS (MiB range, not 0).
            assert r["rss"]["client_max_kib"] > 1024, r["rss"]
        if r["contender"].startswith("shardcast"):
            assert r["rss"]["server_kib"] > 1024, r["rss"]


def test_exactly_once_on_every_shardcast_run(quick):
    _, results, _ = quick
    checked = 0
    for r in results["runs"]:
        if not r["contender"].startswith(("shardcast", "baseline")):
            continue
        v = r.get("verify")
        assert v is not None and v["ok"], r
        total = results["datasets"][r["shape"]]["samples"]
        assert v["duplicates"] == 0 and v["bad_hash"] == 0 and v["unknown"] == 0
        assert v["samples"] == v["expected"] <= total
        checked += 1
    assert checked > 0


def test_summary_ratios_and_outputs(quick):
    out, results, _ = quick
    summary = {(e["contender"], e["shape"], e["workers"]): e
               for e in results["summary"]}
    for (name, shape, w), e in summary.items():
        if e["runs_ok"] and e["family"] == "ceiling":
            assert e["x_ceiling"] == pytest.approx(1.0)
        if e["runs_ok"] and name.startswith("baseline"):
            assert e["x_baseline"] == pytest.approx(1.0)
    assert results["targets"], "no target verdicts"
    md = open(os.path.join(out, "results.md")).read()
    assert "| contender | W | samples/s" in md
    for name in ("ceiling-curl", "baseline-http", "shardcast-py-tar"):
        assert "| %s |" % name in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        # The plot is benchmark-only (bench/deps.sh); the JSON says so.
        assert "matplotlib" in results["plot_error"]
    else:
        with open(os.path.join(out, "results.png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
