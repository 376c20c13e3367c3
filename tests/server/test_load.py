"""The load test: 1,000 concurrent streaming consumers (tests/tools/
sc_loadgen.c: one epoll loop, frames format) read one epoch from one server
on loopback. All complete, every sample of the manifest arrives exactly
once (minus the even-drop remainder), and the server's peak RSS stays under
a bound derived from its configured buffers. The figures are printed (run
pytest with -s to see them) and written to $SHARDCAST_LOAD_REPORT if set."""

import json
import os
import subprocess
from collections import Counter

from server_testlib import Dataset, make_dataset, sanitized

CONSUMERS = 1000
WINDOW_BYTES = 64 << 20
SHUFFLE_BUFFER = 1000
CONNECTION_MEMORY = 64 << 10


def test_thousand_consumers(start, loadgen_binary, workdir):
    d = os.path.join(workdir, "load")
    ds = Dataset(d, make_dataset(d, shards=64, per_shard=1000, size=4000, seed=21))
    srv = start("--job", "load", "--source", d, "--seed", "11", "--log-level", "warn",
                "--window-bytes", str(WINDOW_BYTES), "--shuffle-buffer", str(SHUFFLE_BUFFER),
                "--connection-memory", str(CONNECTION_MEMORY), "--threads", "2",
                "--prefetch", "false",
                # 1,000 consumers from one loopback address: the per-address
                # bounds are for shared clusters, not this test.
                "--max-connections-per-ip", "0", "--stream-rate-limit", "0")
    cpu0 = srv.cpu_seconds()
    dump = os.path.join(workdir, "load-dump.txt")
    p = subprocess.run([loadgen_binary, "--port", str(srv.port), "--job", "load",
                        "--world", str(CONSUMERS), "--timeout", "60", "--dump", dump],
                       capture_output=True, timeout=90)
    summary = json.loads(p.stdout)
    assert p.returncode == 0, (summary, p.stderr.decode()[-2000:], srv.log())
    cpu = srv.cpu_seconds() - cpu0
    hwm_kb = srv.proc_status("VmHWM")
    assert summary["completed"] == CONSUMERS and summary["problems"] == []

    # Exactly once against the manifest.
    n = ds.total
    expect = n - n % CONSUMERS
    seen = Counter()
    with open(dump) as f:
        rows = [line.split() for line in f]
    assert len(rows) == expect == summary["samples"]
    for rank, index, position, key, h in rows:
        assert int(index) % CONSUMERS == int(rank)
        assert int(index) // CONSUMERS == int(position)
        m = ds.by_key[key]
        assert h == m["hash"], key
        seen[key] += 1
    assert max(seen.values()) == 1 and len(seen) == expect
    assert sorted(int(r[1]) for r in rows) == list(range(expect))

    # Peak RSS: the feed window, the shuffle buffer (B samples of at most
    # 1.5 x 4000 bytes of payload plus the small fields), the read-ahead of
    # the open shards (2 threads; K + 1 shards of at most 4 MiB each), every
    # connection's MHD pool, and 64 MiB for the process itself (code,
    # allocator arenas, thread stacks touched).
    readahead = (4 + 1 + 2) * (4 << 20)
    bound = (WINDOW_BYTES + SHUFFLE_BUFFER * 8000 + readahead +
             CONSUMERS * (CONNECTION_MEMORY + 16 * 1024) + (64 << 20))
    if not sanitized():
        assert hwm_kb * 1024 < bound, (hwm_kb, bound)
    figures = {"consumers": CONSUMERS, "samples": summary["samples"],
               "seconds": summary["seconds"], "samples_per_s": summary["samples_per_s"],
               "mb_per_s": summary["mb_per_s"], "payload_mb": summary["payload_bytes"] / 1e6,
               "server_peak_rss_mb": hwm_kb / 1024, "rss_bound_mb": bound / 2**20,
               "server_cpu_s": round(cpu, 2)}
    print("\nload test figures:", json.dumps(figures))
    out = os.environ.get("SHARDCAST_LOAD_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(figures, f, indent=1)
