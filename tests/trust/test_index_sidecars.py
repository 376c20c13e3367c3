"""Index sidecars are hints, never trusted: a forged sidecar next to a
shard changes nothing a consumer sees (index_forge.py says what is
checked). The same for state_dir index files: test_index_state_files.py.
"""

import os
import subprocess

import pytest

from index_forge import (FORGED, KINDS, PER_SHARD, check_everything,  # noqa: F401
                         dataset, forge, parse_index, reference, rss_kib,
                         shard_files, variant_dir)
from server_testlib import sanitized  # noqa: E402


# -- sidecars -----------------------------------------------------------------

@pytest.mark.parametrize("plane", ["auto", "stream"])
@pytest.mark.parametrize("kind", KINDS)
def test_forged_sidecar(start, server_binary, workdir, dataset, reference, kind,
                        plane):
    d = variant_dir(workdir, dataset, "side-%s-%s" % (kind, plane))
    cli = os.path.join(os.path.dirname(server_binary), "shardcast")
    out = subprocess.run([cli, "index", "--sidecar", d], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    side = shard_files(d)[FORGED] + ".scidx"
    with open(side, "rb") as f:
        hdr, groups = parse_index(f.read())
    assert len(groups) == PER_SHARD
    with open(side, "wb") as f:
        f.write(forge(kind, hdr, groups))
    srv = start("--job", "train", "--source", d, "--prefetch", "false",
                "--data-plane", plane)
    before = rss_kib(srv)
    check_everything(srv, reference, "sidecar", plane)
    if kind == "huge" and not sanitized():
        # 500,000 groups for a 0.7 MiB shard were adopted: +347 MiB, kept.
        # Now refused from the trailer's count; what stays is the server's
        # working set for the reads above.
        grown = rss_kib(srv) - before
        print("huge sidecar: VmRSS %d -> %d KiB (+%d)"
              % (before, before + grown, grown))
        assert grown < 64 * 1024, grown
