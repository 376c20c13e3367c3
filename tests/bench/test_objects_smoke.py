"""Smoke test of the small-objects benchmark (bench/objects.sh --quick):
300 samples (600 objects) in s3rver, every contender once at W = 2. Proves
that the harness still runs end to end against this tree — the object
store written in place, the curl ceiling, the boto3 loaders, shardcastd on
an ?objects= source with DataLoader consumers, the exactly-once check and
the JSON/Markdown output. It checks that the figures are sane, never the
performance target.

Uses the binaries of $SHARDCAST_BUILD (else build/) as they are: it neither
installs packages nor builds. About 40 s on 2 cores.
"""

import os

import pytest

from smoke_support import run_quick

TIMEOUT = 170


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out, data, results, _ = run_quick("objects.sh", tmp_path_factory,
                                      "objbench", TIMEOUT)
    # the generated objects are removed at the end (no --keep-data)
    assert os.listdir(str(data)) == []
    return out, results


def test_every_contender_ran_and_passed(quick):
    _, r = quick
    names = {x["contender"] for x in r["records"]}
    assert names == {"ceiling-curl", "baseline-boto3", "baseline-boto3-t4",
                     "shardcast-n50", "shardcast-c-n50"}
    for x in r["records"]:
        assert x["ok"], x.get("error")
        assert x["verify"]["ok"], x["verify"]


def test_figures_are_sane(quick):
    _, r = quick
    ds = r["dataset"]
    assert ds["samples"] == 300 and ds["objects"] == 600
    for x in r["records"]:
        assert x["samples_per_s"] > 0 and x["mb_per_s"] > 0
        assert 0 <= x["store_cpu_s"] and x["wall_s"] > 0
        # one GET per object, plus retries
        assert x["requests"]["gets"] >= ds["objects"], x
        if x["family"] in ("shardcast", "shardcast-c"):
            assert x["virtual_shards"] == 6   # 300 samples / ?objects=50
            assert x["cpu"]["server_epoch"] >= 0
    for row in r["rows"]:
        assert row["runs_ok"] == row["runs"] == 1
        assert row["x_ceiling"] > 0


def test_markdown_has_the_table_and_the_verdict(quick):
    out, r = quick
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    assert "| shardcast, ?objects=50 | 2 |" in md
    assert "Target (issue 17)" in md
    assert r["target"]["verdict"].startswith(("MET", "NOT MET"))
