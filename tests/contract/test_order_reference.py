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


@pytest.mark.parametrize("case", range(8))
def test_random_cursors_and_elastic_resume(tmp_path, case):
    """Property: for random datasets, seeds, K, B and W, the shares are
    exactly once, equal in size (even policies), and a run stopped at a
    global cursor and resumed with another W delivers exactly the rest of Y,
    in the same order."""
    rnd = random.Random(5000 + case)
    make_dataset(str(tmp_path), rnd, rnd.randint(1, 7))
    seed, k, b = rnd.getrandbits(32), rnd.randint(1, 4), rnd.choice([1, 9, 64])
    base = ("--seed", seed, "--interleave", k, "--buffer", b,
            "--threads", rnd.choice([0, 2]))
    full = run_order(str(tmp_path), *base)
    n = len(full)
    w1, w2 = rnd.randint(1, 6), rnd.randint(1, 6)
    # the first run stops after p samples of every share: cursor G = p * W1
    p = rnd.randint(0, max(n // w1, 1))
    g = min(p * w1, n)
    rest = []
    for rank in range(w2):
        got = run_order(str(tmp_path), *base, "--rank", rank, "--world", w2,
                        "--partition", "none", "--global-start", g)
        assert [int(x[0]) for x in got] == share(n, rank, w2, "none", 0, g)
        rest += [int(x[0]) for x in got]
        # a random cursor inside the resumed share continues identically
        if got:
            s = rnd.randint(0, len(got))
            again = run_order(str(tmp_path), *base, "--rank", rank, "--world",
                              w2, "--partition", "none", "--global-start", g,
                              "--start", s)
            assert again == got[s:]
    assert sorted(rest) == list(range(g, n))


@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_partition_the_epoch(tmp_path, replicas):
    """Scale-out: replica j of R reads the shards at permuted positions
    p mod R == j; the parts are disjoint, cover every sample once, and each
    equals the reference."""
    rnd = random.Random(replicas)
    paths = make_dataset(str(tmp_path), rnd, 7)
    keys = []
    for j in range(replicas):
        want = epoch_order(paths, 3, 2, 2, 20, 0, j, replicas)
        got = run_order(str(tmp_path), "--seed", 3, "--epoch", 2,
                        "--interleave", 2, "--buffer", 20, "--replica", j,
                        "--replicas", replicas)
        assert [(g[1], g[4]) for g in got] == [(str(s), m[0]) for s, m in want]
        keys += [g[4] for g in got]
    single = run_order(str(tmp_path), "--seed", 3, "--epoch", 2)
    assert sorted(keys) == sorted(g[4] for g in single)
