"""Smoke test of the steady-state benchmark (bench/steady.sh --quick): one
long-running shardcastd per shape and variant reads several epochs in
turn, every epoch exactly once, and the per-epoch server figures (CPU per
sample, page faults) reach the JSON and Markdown output. It checks that the
figures are sane, never a performance target.

Uses the binaries of $SHARDCAST_BUILD (else build/) as they are: it neither
installs packages nor builds. Takes about 20 s on 2 cores.
"""

import os

import pytest

from smoke_support import run_quick

TIMEOUT = 240


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out, _, results, _ = run_quick("steady.sh", tmp_path_factory, "steady",
                                   TIMEOUT)
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    return results, md


def test_every_shape_and_variant_ran_every_epoch(quick):
    results, _ = quick
    assert results["format"] == "shardcast-steady/1"
    rows = {(r["shape"], r["workers"], r["variant"])
            for r in results["rows"]}
    assert len(rows) == 2 * len(results["workers"]) * 2
    assert {v for _, _, v in rows} == {"default", "no-decay"}
    assert {w for _, w, _ in rows} == set(results["workers"])
    for row in results["rows"]:
        assert row["exactly_once"], row
        assert len(row["servers"]) == results["repeat"]
        for epochs in row["servers"]:
            assert [e["epoch"] for e in epochs] == list(range(
                results["epochs"]))
            # Every epoch of one server delivers the same samples.
            assert len({e["samples"] for e in epochs}) == 1
            for e in epochs:
                assert e["exactly_once"]
                assert e["samples"] > 0 and e["payload_bytes"] > 0
                assert e["samples_per_s"] > 0
                assert e["server_cpu_s"] >= 0 and e["minor_fault_mib"] >= 0


def test_markdown_table_has_every_row(quick):
    results, md = quick
    assert "| shape | W | variant | samples/s |" in md
    for row in results["rows"]:
        assert "| %s | %d | %s |" % (row["shape"], row["workers"],
                                     row["variant"]) in md
