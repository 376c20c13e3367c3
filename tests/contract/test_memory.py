"""Bounded memory: the epoch engine's peak RSS follows the configured
buffers, not the dataset size or the number of epochs.

The dataset (about 240 MB, 2400 samples of ~100 KB) is many times larger
than every buffer. Peak RSS (VmHWM) must stay within

    base + buffer_bytes + window_bytes
         + (interleave + readahead) * (readahead_bytes + 256 KiB read buffer)
         + SLACK

where base is the peak RSS of the same program with every buffer at its
minimum (code, libraries, one sample in flight), measured here, and SLACK
(16 MiB) covers decompressor state, allocator slack and the few samples
each stage may hold beyond its byte cap (one per stage). docs/architecture.md "Memory"
documents the same formula.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIB = 1 << 20
SLACK = 16 * MIB


def tool(name):
    for d in [os.environ.get("SHARDCAST_BUILD", ""), os.path.join(ROOT, "build")]:
        p = os.path.join(d, name)
        if d and os.path.exists(p):
            return p
    raise RuntimeError(f"{name} not built: set SHARDCAST_BUILD or build into build/")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("memds")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "mkwds.py"),
                    "--out", str(out), "--shards", "24", "--samples-per-shard", "100",
                    "--size", "100000", "--seed", "3", "--prefix", "m"],
                   check=True, capture_output=True)
    return str(out)


def run(src, **kw):
    args = [tool("sio_epochs"), src]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    out = subprocess.run(args, check=True, capture_output=True, text=True,
                         env=env).stdout
    return json.loads(out)


def sanitized():
    # ASan/TSan builds carry shadow memory: RSS bounds do not apply.
    return "asan" in os.environ.get("SHARDCAST_BUILD", "") or \
           "tsan" in os.environ.get("SHARDCAST_BUILD", "")


def test_rss_follows_buffers_not_data(dataset):
    if sanitized():
        pytest.fail("run the memory test against a non-sanitizer build")
    total = sum(os.path.getsize(os.path.join(dataset, f))
                for f in os.listdir(dataset) if f.endswith(".tar"))
    base = run(dataset, epochs=1, world=1, buffer=1, window=1, window_bytes=1,
               readahead_bytes=1, interleave=1, readahead=0, threads=0)
    for cfg in [
        dict(buffer=200, buffer_bytes=8 * MIB, window=256, window_bytes=8 * MIB,
             readahead_bytes=2 * MIB, interleave=4, readahead=2, threads=2),
        dict(buffer=1000, buffer_bytes=48 * MIB, window=2000,
             window_bytes=24 * MIB, readahead_bytes=4 * MIB, interleave=8,
             readahead=4, threads=2),
    ]:
        configured = (cfg["buffer_bytes"] + cfg["window_bytes"] +
                      (cfg["interleave"] + cfg["readahead"]) *
                      (cfg["readahead_bytes"] + 256 * 1024))
        one = run(dataset, epochs=1, world=4, **cfg)
        many = run(dataset, epochs=4, world=4, **cfg)
        # every epoch delivered the whole (even-drop) dataset
        assert one["samples_per_epoch"] == many["samples_per_epoch"] == 2400
        assert many["samples"] == 4 * 2400
        bound = base["vmhwm_kb"] * 1024 + configured + SLACK
        for r in (one, many):
            assert r["vmhwm_kb"] * 1024 <= bound, (r, bound)
        # far below the data streamed, and no growth with more epochs. (The
        # second configuration allows 123 MiB of buffers, more than 1/8 of
        # the 914 MiB streamed: "bytes / 8" asked the engine to leave its
        # own buffers unused and failed about one run in three even before
        # the window kept history for reconnects; 1/6 still says "far
        # below", and the formula bound above is the contract.)
        assert many["vmhwm_kb"] * 1024 < many["bytes"] / 6
        assert many["vmhwm_kb"] <= one["vmhwm_kb"] * 1.25 + 8 * 1024
    assert total > 200 * MIB
