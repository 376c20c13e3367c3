"""The C epoch order equals the independent Python reference (contract)."""
import io
import os
import random
import subprocess
import tarfile

import pytest

from reference import epoch_order, share, Rng, permute

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool(name):
    for d in [os.environ.get("SHARDCAST_BUILD", ""), os.path.join(ROOT, "build")]:
        p = os.path.join(d, name)
        if d and os.path.exists(p):
            return p
    raise RuntimeError(f"{name} not built: set SHARDCAST_BUILD or build into build/")


def make_dataset(tmp, rnd, nshards, compress=False):
    paths = []
    for s in range(nshards):
        p = os.path.join(tmp, f"shard-{s:04d}.tar" + (".gz" if compress else ""))
        with tarfile.open(p, "w:gz" if compress else "w") as tf:
            for i in range(rnd.randint(0, 40)):  # empty shards happen
                key = f"s{s:04d}_{i:05d}"
                for ext in ("cls", "bin"):
                    data = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 300)))
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        paths.append(p)
    return paths


def run_order(src, *args):
    out = subprocess.run([tool("sio_order"), src, *map(str, args)], check=True,
                         capture_output=True, text=True).stdout
    return [tuple(line.split(" ", 4)) for line in out.splitlines()]


def test_rng_reference_vectors():
    # xoshiro256** from state {1,2,3,4}: first output is rotl(2*5,7)*9.
    r = Rng(0, 0, 0)
    r.s = [1, 2, 3, 4]
    assert r.next() == 11520
    assert r.next() == 0
    # Fisher-Yates gives a permutation.
    p = permute(Rng(7, 3, 1), 1000)
    assert sorted(p) == list(range(1000))


@pytest.mark.parametrize("case", range(12))
def test_epoch_matches_reference(tmp_path, case):
    rnd = random.Random(1000 + case)
    paths = make_dataset(str(tmp_path), rnd, rnd.randint(1, 9), compress=case % 3 == 0)
    seed, epoch = rnd.getrandbits(64), rnd.randint(0, 5)
    k, b = rnd.randint(1, 5), rnd.choice([1, 2, 7, 50, 1000])
    cap = rnd.choice([0, 0, 2000, 20000])
    want = epoch_order(paths, seed, epoch, k, b, cap)
    threads = [0, 1, 3, 16][case % 4]
    got = run_order(str(tmp_path), "--seed", seed, "--epoch", epoch,
                    "--interleave", k, "--buffer", b, "--buffer-bytes", cap,
                    "--threads", threads, "--readahead", case % 5,
                    "--readahead-bytes", [0, 1, 500][case % 3])
    assert len(got) == len(want)
    for i, (g, (shard, smp)) in enumerate(zip(got, want)):
        assert g == (str(i), str(shard), str(smp[3]), str(smp[2]), smp[0]), i
    # Exactly once: every sample of every shard appears once.
    total = sum(1 for _ in got)
    keys = {g[4] for g in got}
    assert len(keys) == total


@pytest.mark.parametrize("policy", ["even-drop", "even-pad", "none"])
@pytest.mark.parametrize("world", [1, 3, 4, 7])
def test_partition_matches_reference(tmp_path, policy, world):
    rnd = random.Random(world * 31 + len(policy))
    make_dataset(str(tmp_path), rnd, 5)
    full = run_order(str(tmp_path), "--seed", 5, "--interleave", 3,
                     "--buffer", 40)
    n = len(full)
    union = []
    counts = []
    for rank in range(world):
        got = run_order(str(tmp_path), "--seed", 5, "--interleave", 3,
                        "--buffer", 40, "--rank", rank, "--world", world,
                        "--partition", policy)
        want = share(n, rank, world, policy)
        assert [int(g[0]) for g in got] == want
        assert [g[4] for g in got] == [full[i][4] for i in want]
        counts.append(len(got))
        union += [int(g[0]) for g in got]
        # Resume from a cursor inside the share continues identically.
        if len(want) > 2:
            start = len(want) // 2
            rest = run_order(str(tmp_path), "--seed", 5, "--interleave", 3,
                             "--buffer", 40, "--rank", rank, "--world", world,
                             "--partition", policy, "--start", start)
            assert rest == got[start:]
    if policy == "even-drop":
        assert len(set(counts)) == 1
        assert sorted(union) == list(range(n // world * world))
    elif policy == "even-pad":
        assert len(set(counts)) == 1
        assert set(union) == set(range(n))
    else:
        assert sorted(union) == list(range(n))
