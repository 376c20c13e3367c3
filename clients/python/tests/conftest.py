"""Both frames decoders run the same tests: every test of this directory
runs once with the pure-Python reader (SHARDCAST_ACCEL=0) and once with the
C accelerator (SHARDCAST_ACCEL=1: readers fail without it). DataLoader
workers and child processes inherit the choice through the environment.
Without a built accelerator the "c" runs are skipped, unless
SHARDCAST_REQUIRE_ACCEL=1 (scripts/test.sh), which makes them fail."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from shardcast import frames  # noqa: E402


@pytest.fixture(params=["python", "c"], autouse=True)
def decoder(request, monkeypatch):
    if request.param == "c":
        monkeypatch.delenv("SHARDCAST_ACCEL", raising=False)
        if frames.accelerator() is None and os.environ.get("SHARDCAST_REQUIRE_ACCEL") != "1":
            pytest.skip("the C frames decoder is not built (cmake with python3-dev)")
        monkeypatch.setenv("SHARDCAST_ACCEL", "1")
    else:
        monkeypatch.setenv("SHARDCAST_ACCEL", "0")
    return request.param
