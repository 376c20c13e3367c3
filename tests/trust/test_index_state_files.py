"""state_dir index files are hints, never trusted: the server's own
index file of a shard, forged, changes nothing a consumer sees
(index_forge.py says what is checked), and is replaced by the shard's
true index. The same for sidecars: test_index_sidecars.py.
"""

import hashlib
import os
import shutil

import pytest

from index_forge import (FORGED, KINDS, PER_SHARD, TOTAL, WORLD,  # noqa: F401
                         check_everything, dataset, forge, parse_index,
                         reference, rss_kib, shard_files, variant_dir)
from server_testlib import read_share, read_when, sanitized  # noqa: E402


# -- index files under state_dir ------------------------------------------------

@pytest.mark.parametrize("plane", ["auto", "stream"])
@pytest.mark.parametrize("kind", KINDS)
def test_forged_state_index_file(start, workdir, dataset, reference, kind,
                                 plane):
    d = variant_dir(workdir, dataset, "state-%s-%s" % (kind, plane))
    state = os.path.join(workdir, "state-dir-%s-%s" % (kind, plane))
    shutil.rmtree(state, ignore_errors=True)
    srv = start("--job", "train", "--source", d, "--state-dir", state,
                "--prefetch", "false")
    for r in range(WORLD):  # indexes every shard, persisted
        got, outcome, _ = read_share(srv, "train", 0, r, WORLD)
        assert outcome == "end" and len(got) == TOTAL // WORLD
    assert srv.stop() == 0
    shard = os.path.realpath(shard_files(d)[FORGED])
    path = os.path.join(state, "index",
                        hashlib.sha256(shard.encode()).hexdigest() + ".scidx")
    with open(path, "rb") as f:
        hdr, groups = parse_index(f.read())
    assert len(groups) == PER_SHARD
    with open(path, "wb") as f:
        f.write(forge(kind, hdr, groups))
    srv = start("--job", "train", "--source", d, "--state-dir", state,
                "--prefetch", "false", "--data-plane", plane)
    before = rss_kib(srv)
    check_everything(srv, reference, "state", plane)
    if kind == "huge" and not sanitized():
        grown = rss_kib(srv) - before
        print("huge state index: VmRSS %d -> %d KiB (+%d)"
              % (before, before + grown, grown))
        assert grown < 64 * 1024, grown
    # The forged file was replaced by the shard's true index (written by
    # the read that reached the shard's end, which may come after the
    # stream's END: wait for it).
    def true_index():
        try:
            with open(path, "rb") as f:
                return parse_index(f.read())[1]
        except Exception:  # noqa: BLE001 (removed, or still the forged file)
            return None
    now = read_when(true_index, lambda gs: gs is not None and
                    [g["key"] for g in gs] == [g["key"] for g in groups] and
                    [g["bytes"] for g in gs] == [g["bytes"] for g in groups])
    assert now is not None, "%s: no index file that parses" % path
    assert [g["key"] for g in now] == [g["key"] for g in groups]
    assert [g["bytes"] for g in now] == [g["bytes"] for g in groups]
