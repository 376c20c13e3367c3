"""Smoke test of bench/python_planes.sh --quick: the Python readers
(ShardcastDataset in a DataLoader) read the tiny images set from a server
on each data plane (--data-plane stream, then auto), every epoch verified
exactly once by bench/loader_run.py, and the figures reach the JSON and
Markdown output. It checks that the figures are sane, never a
performance target.

Uses the binaries of $SHARDCAST_BUILD (else build/) as they are: it neither
installs packages nor builds. Takes about 30 s on 2 cores.
"""

import os

import pytest

from smoke_support import run_quick

TIMEOUT = 300


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out, _, results, log = run_quick("python_planes.sh", tmp_path_factory,
                                     "planes-python", TIMEOUT)
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    return results, md, log


def test_both_planes_read_every_epoch(quick):
    results, _, log = quick
    assert results["format"] == "shardcast-planes-python/1"
    assert results["command"].startswith("bench/python_planes.sh")
    assert [r["workers"] for r in results["rows"]] == [2]
    row = results["rows"][0]
    assert set(row["rounds"]) == {"feed", "plan"}
    for plane in ("feed", "plan"):
        assert len(row["rounds"][plane]) == results["rounds"] == 1
        assert row[plane + "_samples_per_s"] > 0
    assert row["plan_over_feed"] == pytest.approx(
        row["plan_samples_per_s"] / row["feed_samples_per_s"])
    # the plan server served epochs 1-2 from plans, the feed server none
    plan = row["data_plane"]["plan"][0]
    feed = row["data_plane"]["feed"][0]
    assert plan["mode"] == "auto" and plan["plan_streams"] >= 2 * 2, plan
    assert feed["mode"] == "stream" and feed["plan_streams"] == 0, feed
    # every epoch of both servers was read and logged
    assert log.count("epoch 1:") == 2 and log.count("epoch 2:") == 2


def test_markdown_table_has_the_row(quick):
    results, md, _ = quick
    assert "| shape | W | feed samples/s | plan samples/s | plan / feed |" in md
    row = results["rows"][0]
    assert "| %s | 2 |" % row["shape"] in md
