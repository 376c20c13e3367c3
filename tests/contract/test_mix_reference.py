"""A mixed epoch of the C library equals the independent Python reference
(docs/order.md "Mixing datasets", contract version 2).

sio_order takes one --mix KIND:VALUE[:r]:SOURCE per source and prints one
line per sample: "<global index> <shard index> <index in shard> <bytes>
<key> <source>". Every source here is a directory; its shard list is the
bytewise sorted listing, as the reference is given it.
"""
import collections
import io
import os
import random
import subprocess
import sys
import tarfile

import pytest

from reference import MixRefused, mix_order, mix_quotas, read_shard, share

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def tool(name):
    for d in [os.environ.get("SHARDCAST_BUILD", ""), os.path.join(ROOT, "build")]:
        p = os.path.join(d, name)
        if d and os.path.exists(p):
            return p
    raise RuntimeError(f"{name} not built: set SHARDCAST_BUILD or build into build/")


# --- datasets -------------------------------------------------------------

def write_source(d, tag, counts, rnd, size=(0, 300), bad=()):
    """A source directory of len(counts) shards, shard j holding counts[j]
    samples (keys "<tag><j>_<i>", fields cls and bin of random sizes);
    (j, i) in `bad` repeats a field, which makes that sample bad. Returns
    the shard paths in listing order."""
    os.makedirs(d, exist_ok=True)
    paths = []
    for j, n in enumerate(counts):
        p = os.path.join(d, f"{tag}-{j:04d}.tar")
        with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(n):
                key = f"{tag}{j:03d}_{i:05d}"
                fields = ["cls", "bin"] + (["bin"] if (j, i) in bad else [])
                for ext in fields:
                    data = rnd.randbytes(rnd.randint(*size)) if size[1] else b""
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        paths.append(p)
    return sorted(paths)


def mkwds(out, shards, per_shard, seed, prefix):
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "mkwds.py"),
                    "--out", out, "--shards", str(shards), "--samples-per-shard",
                    str(per_shard), "--size", "16", "--seed", str(seed),
                    "--prefix", prefix], check=True, capture_output=True)
    return sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".tar"))


# --- the C side -----------------------------------------------------------

def fmt(v):
    return repr(v) if isinstance(v, float) else str(v)


def mix_args(sources, epoch_size=None):
    """sources: (directory, kind, value, with_replacement)."""
    args = []
    for d, kind, value, repl in sources:
        args += ["--mix", f"{kind}:{fmt(value)}{':r' if repl else ''}:{d}"]
    if epoch_size is not None:
        args += ["--epoch-size", str(epoch_size)]
    return args


def sio_mix(sources, epoch_size=None, *opts, check=True):
    """Lines of sio_order as tuples of strings (6 fields); with check=False
    (returncode, lines)."""
    r = subprocess.run([tool("sio_order"), *mix_args(sources, epoch_size),
                        *map(str, opts)], capture_output=True, text=True)
    lines = [tuple(line.split(" ")) for line in r.stdout.splitlines()]
    if not check:
        return r.returncode, lines
    assert r.returncode == 0, r.stderr
    return lines


def ref_mix(sources, paths, epoch_size, seed, epoch, k, b, cap=0):
    """The reference's epoch as the lines sio_order prints; and the quotas."""
    y, quotas = mix_order([(paths[d], kind, value, repl)
                           for d, kind, value, repl in sources],
                          seed, epoch, k, b, cap, epoch_size)
    lines = [(str(i), str(shard), str(smp[3]), str(smp[2]), smp[0], str(s))
             for i, (s, shard, smp) in enumerate(y)]
    return lines, quotas


def per_source(lines, nsources):
    c = collections.Counter(int(x[5]) for x in lines)
    return [c[s] for s in range(nsources)]


# --- 1. random mixtures ---------------------------------------------------

def random_case(tmp, case):
    rnd = random.Random(7000 + case)
    nsrc = rnd.randint(1, 4)
    sources, paths = [], {}
    empty_at = rnd.randrange(nsrc)
    for s in range(nsrc):
        counts = [rnd.choice([0, 1, 3, 8, 12, 17, 30])
                  for _ in range(rnd.randint(1, 6))]
        if not any(counts) and rnd.random() < 0.6:
            counts[0] = rnd.randint(1, 30)  # (else the source is dry)
        if s == empty_at:
            counts[rnd.randrange(len(counts))] = 0  # a shard with 0 samples
        bad = {(j, rnd.randrange(n)) for j, n in enumerate(counts)
               if n and rnd.random() < 0.15}
        d = os.path.join(tmp, f"src{s}")
        paths[d] = write_source(d, f"s{s}x", counts, rnd, bad=bad)
        kind = rnd.choice(["weight", "weight", "repeat", "choose"])
        value = {"weight": lambda: rnd.choice([1, 0.25, 0.1, 1 / 3, 2.5,
                                               rnd.uniform(0.01, 4)]),
                 "repeat": lambda: rnd.choice([0, 0.5, 1, 1.3, 2, 3.7]),
                 "choose": lambda: rnd.randint(0, 120)}[kind]()
        sources.append((d, kind, value, rnd.random() < 0.4))
    nsamples = [sum(len(read_shard(p)) for p in paths[d]) for d, *_ in sources]
    fixed = sum(mix_quotas([(src[1], src[2])], None, [n])[0]
                for src, n in zip(sources, nsamples) if src[1] != "weight")
    if any(src[1] == "weight" for src in sources):
        epoch_size = fixed + rnd.randint(0, 600)
    else:
        epoch_size = rnd.choice([None, fixed])
    opts = dict(seed=rnd.getrandbits(64), epoch=rnd.randint(0, 5),
                k=rnd.randint(1, 5), b=rnd.choice([1, 2, 7, 50, 1000]),
                cap=rnd.choice([0, 0, 700, 2000, 20000]))
    return sources, paths, epoch_size, opts, rnd


@pytest.mark.parametrize("case", range(32))
def test_random_mixture_matches_reference(tmp_path, case):
    sources, paths, epoch_size, o, rnd = random_case(str(tmp_path), case)
    want, quotas = ref_mix(sources, paths, epoch_size, o["seed"], o["epoch"],
                           o["k"], o["b"], o["cap"])
    got = sio_mix(sources, epoch_size, "--seed", o["seed"], "--epoch",
                  o["epoch"], "--interleave", o["k"], "--buffer", o["b"],
                  "--buffer-bytes", o["cap"], "--threads", rnd.choice([0, 1, 3]),
                  "--readahead", rnd.randint(0, 4))
    assert len(got) == len(want), (quotas, per_source(got, len(sources)))
    for g, w in zip(got, want):
        assert g == w, (g, w)


# --- 2. quotas --------------------------------------------------------------

# name -> shards' sample counts (N_s is their sum; "bad" holds one bad sample)
QUOTA_SOURCES = {"n7": [3, 0, 4], "n5": [5], "n10": [2, 8], "n1": [1],
                 "n0": [0, 0], "bad": [4, 3]}


@pytest.fixture(scope="module")
def quota_dirs(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("quota"))
    rnd = random.Random(11)
    dirs = {}
    for name, counts in QUOTA_SOURCES.items():
        d = os.path.join(base, name)
        write_source(d, name, counts, rnd, size=(1, 20),
                     bad={(1, 1)} if name == "bad" else ())
        dirs[name] = d
    return dirs


def n_good(name):
    return sum(QUOTA_SOURCES[name]) - (name == "bad")


W20 = 2.0 ** 20
QUOTA_CASES = [
    # (id, [(source, kind, value, with_replacement)], epoch_size, quotas)
    # largest remainders, ties to the lower s
    ("tie-halves", [("n5", "weight", 0.25, 0), ("n5", "weight", 0.5, 0),
                    ("n5", "weight", 0.25, 0)], 2, [1, 1, 0]),
    ("tie-equal", [("n5", "weight", 1, 0)] * 3, 10, [4, 3, 3]),
    ("tie-equal-2", [("n5", "weight", 1, 0)] * 3, 11, [4, 4, 3]),
    ("tie-one", [("n1", "weight", 2, 0)] * 4, 1, [1, 0, 0, 0]),
    ("thirds", [("n7", "weight", 1 / 3, 0)] * 3, 100, [34, 33, 33]),
    ("tenths", [("n7", "weight", 0.1, 0), ("n5", "weight", 0.2, 0),
                ("n10", "weight", 0.3, 1), ("n1", "weight", 0.4, 1)], 7,
     [1, 1, 2, 3]),
    # w' = floor(w * 2^32 + 0.5) is 858993459 and 2576980378, remainders
    # 1717986918 and 1717986919: the second wins by one (from w itself, in
    # doubles or exactly, the first's remainder is not smaller: [1, 1])
    ("w-rounding", [("n7", "weight", 0.2, 0), ("n5", "weight", 0.6, 0)], 2,
     [0, 2]),
    # bounds of weights: 2^20 beside 2^-20 leaves the tiny one nothing
    ("weight-max-min", [("n7", "weight", W20, 0), ("n5", "weight", 2.0 ** -20, 1)],
     1000, [1000, 0]),
    ("weight-min-only", [("n5", "weight", 2.0 ** -20, 0)], 5, [5]),
    ("weight-min-1-3", [("n5", "weight", 2.0 ** -20, 0),
                        ("n7", "weight", 3 * 2.0 ** -20, 0)], 4, [1, 3]),
    ("weight-min-max-many", [("n5", "weight", 2.0 ** -20, 0)] * 3
     + [("n1", "weight", W20, 1)], 2 ** 14, [0, 0, 0, 2 ** 14]),
    # repeat: floor(r * N_s + 0.5) in doubles
    ("repeat-half-7", [("n7", "repeat", 0.5, 0)], None, [4]),
    ("repeat-half-5", [("n5", "repeat", 0.5, 0)], None, [3]),
    ("repeat-1.5-5", [("n5", "repeat", 1.5, 0)], None, [8]),
    # r * N_s is k + 0.5 in doubles, just below it exactly (or in long double)
    ("repeat-0.7-5", [("n5", "repeat", 0.7, 0)], None, [4]),
    ("repeat-0.3-5", [("n5", "repeat", 0.3, 0)], None, [2]),
    ("repeat-1.15-10", [("n10", "repeat", 1.15, 1)], None, [12]),
    ("repeat-0.35-10", [("n10", "repeat", 0.35, 0), ("n7", "repeat", 0.5, 1)],
     8, [4, 4]),
    ("repeat-zero", [("n7", "repeat", 0, 0), ("n5", "choose", 3, 0)], None, [0, 3]),
    ("repeat-max-empty", [("n0", "repeat", W20, 0), ("n1", "repeat", 1, 0)],
     None, [0, 1]),
    ("repeat-bad", [("bad", "repeat", 1, 0)], None, [6]),
    ("repeat-bad-2.5", [("bad", "repeat", 2.5, 1)], None, [15]),
    # epoch_size equal to the fixed quotas: the weights share nothing
    ("fixed-eq-weights", [("n5", "choose", 5, 0), ("n7", "repeat", 1, 0),
                          ("n10", "weight", 1, 0)], 12, [5, 7, 0]),
    ("fixed-eq", [("n5", "choose", 5, 0), ("n7", "repeat", 2, 1)], 19, [5, 14]),
    ("fixed-plus-weights", [("n5", "choose", 5, 1), ("n7", "weight", 0.5, 0),
                            ("n10", "repeat", 1, 0), ("n1", "weight", 1.5, 1)],
     40, [5, 6, 10, 19]),
    ("choose-zero", [("n5", "choose", 0, 0), ("n7", "choose", 9, 0)], 9, [0, 9]),
]

REFUSED_CASES = [
    ("weights-no-epoch-size", [("n5", "weight", 1, 0)], None),
    ("sum-plus-1", [("n5", "choose", 5, 0), ("n7", "repeat", 1, 0)], 13),
    ("sum-minus-1", [("n5", "choose", 5, 0), ("n7", "repeat", 1, 0)], 11),
    ("repeat-sum-plus-1", [("n7", "repeat", 0.5, 0)], 5),
    ("weight-below-min", [("n5", "weight", 2.0 ** -21, 0)], 10),
    ("weight-just-below-min", [("n5", "weight", 2.0 ** -20 * (1 - 2.0 ** -53), 0),
                               ("n7", "weight", 1, 0)], 10),
    ("weight-above-max", [("n5", "weight", W20 * (1 + 2.0 ** -52), 0)], 10),
    ("weight-zero", [("n5", "weight", 0.0, 0), ("n7", "weight", 1, 0)], 10),
    ("weight-negative", [("n5", "weight", -1.0, 0), ("n7", "weight", 2, 0)], 10),
    ("weight-inf", [("n5", "weight", float("inf"), 0)], 10),
    ("weight-nan", [("n5", "weight", float("nan"), 0)], 10),
    ("repeat-negative", [("n5", "repeat", -0.5, 0)], None),
    ("repeat-above-max", [("n0", "repeat", W20 * (1 + 2.0 ** -52), 0)], None),
    ("repeat-inf", [("n0", "repeat", float("inf"), 0)], None),
    ("repeat-nan", [("n5", "repeat", float("nan"), 0)], None),
    # not spelled out by docs/order.md: fixed quotas larger than epoch_size
    ("fixed-over-epoch-size", [("n5", "choose", 10, 0), ("n7", "weight", 1, 0)], 5),
]


def quota_sources(dirs, spec):
    return [(dirs[name], kind, value, bool(repl)) for name, kind, value, repl in spec]


@pytest.mark.parametrize("spec,epoch_size,want", [c[1:] for c in QUOTA_CASES],
                         ids=[c[0] for c in QUOTA_CASES])
def test_quotas(quota_dirs, spec, epoch_size, want):
    quotas = mix_quotas([(kind, value) for _, kind, value, _ in spec], epoch_size,
                        [n_good(name) for name, *_ in spec])
    if want is not None:
        assert quotas == want
    got = sio_mix(quota_sources(quota_dirs, spec), epoch_size, "--seed", 3,
                  "--interleave", 2, "--buffer", 5)
    # no source here runs dry (n0 only ever has quota 0)
    assert per_source(got, len(spec)) == quotas
    assert [int(x[0]) for x in got] == list(range(sum(quotas)))


def test_quota_rounding_cases_are_sharp():
    """The rounding cases above sit where IEEE doubles and exact arithmetic
    part, so a quota computed another way (exactly, in long double, from
    w / sum(w) instead of w') shows."""
    from fractions import Fraction
    for r, n in [(0.7, 5), (0.3, 5), (1.15, 10), (0.35, 10)]:
        exact = int(Fraction(r) * n + Fraction(1, 2))
        assert mix_quotas([("repeat", r)], None, [n]) == [exact + 1], (r, n)
    for w in ([Fraction(0.2), Fraction(0.6)], [0.2, 0.6]):
        shares = [2 * x / sum(w) for x in w]
        assert shares[0] - int(shares[0]) >= shares[1] - int(shares[1])


@pytest.mark.parametrize("spec,epoch_size", [c[1:] for c in REFUSED_CASES],
                         ids=[c[0] for c in REFUSED_CASES])
def test_refused(quota_dirs, spec, epoch_size):
    with pytest.raises(MixRefused):
        mix_quotas([(kind, value) for _, kind, value, _ in spec], epoch_size,
                   [n_good(name) for name, *_ in spec])
    rc, lines = sio_mix(quota_sources(quota_dirs, spec), epoch_size, check=False)
    assert rc == 1 and not lines  # refused by the library (2: bad arguments)


def test_replicas_refused(quota_dirs):
    """Scale-out replicas do not serve mixed jobs."""
    spec = [("n5", "weight", 1, 0), ("n7", "weight", 1, 1)]
    for j in range(2):
        rc, lines = sio_mix(quota_sources(quota_dirs, spec), 10, "--replica", j,
                            "--replicas", 2, check=False)
        assert rc == 1 and not lines


# Exact integer shares at a large epoch_size: the heavy weight sits on a
# dry source (its quota is dropped at its first draw), so the output is the
# light source's quota. Computing floor(R * w'_s / W') and the remainders in
# doubles, or from w instead of w', gives one more in the last three cases.
LARGE_CASES = [
    # epoch_size, light weight, heavy weight, light quota
    (2 ** 53, 2.0 ** -20, 2.0 ** 20, 8192),
    (5816274881983738, 2.5e-06, 777777.0, 18694),
    (6423856455024975, 2.5e-06, 1000000.0, 16059),
    (5992659164202808, 2.5e-06, 777777.0, 19261),
]


@pytest.mark.parametrize("epoch_size,light,heavy,quota", LARGE_CASES)
def test_quotas_exact_at_large_epoch_size(quota_dirs, epoch_size, light, heavy,
                                          quota):
    spec = [("n7", "weight", light, 0), ("n0", "weight", heavy, 0)]
    quotas = mix_quotas([("weight", light), ("weight", heavy)], epoch_size, [7, 0])
    assert quotas == [quota, epoch_size - quota]
    got = sio_mix(quota_sources(quota_dirs, spec), epoch_size, "--buffer", 1)
    assert per_source(got, 2) == [quota, 0]


# --- 3. 100k samples: proportions and passes --------------------------------

@pytest.fixture(scope="module")
def big(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("big"))
    rnd = random.Random(5)
    layout = {"a": [1000] * 8, "b": [1500] * 7 + [0, 1500], "c": [250] * 8,
              "d": [700, 0, 1300]}
    paths = {}
    for tag, counts in layout.items():
        d = os.path.join(base, tag)
        paths[d] = write_source(d, tag, counts, rnd, size=(16, 16))
    return paths


def test_100k_proportions_and_passes(big):
    d = sorted(big)
    # a: 8000 samples, w/o replacement, 0.55 of the rest: 6 passes and more
    # b: 12000 samples, w/o replacement, < one pass
    # c: 2000 samples, with replacement
    # d: 2000 samples, repeat 2.5 w/o replacement (fixed 5000)
    sources = [(d[0], "weight", 0.55, False), (d[1], "weight", 0.1, False),
               (d[2], "weight", 0.35, True), (d[3], "repeat", 2.5, False)]
    n = 100_000
    weights = [0.55, 0.1, 0.35]
    want, quotas = ref_mix(sources, big, n, 99, 4, 4, 2000, 1 << 16)
    got = sio_mix(sources, n, "--seed", 99, "--epoch", 4, "--interleave", 4,
                  "--buffer", 2000, "--buffer-bytes", 1 << 16)
    assert got == want
    assert len(got) == n
    counts = per_source(got, 4)
    assert counts == quotas
    assert quotas[3] == 5000
    rest = n - quotas[3]
    for s, w in enumerate(weights):
        assert abs(counts[s] / rest - w / sum(weights)) < 0.01 * w / sum(weights)
    ranges, firsts, first = [], [], 0
    for dd, *_ in sources:
        ranges.append(range(first, first + len(big[dd])))
        firsts.append(first)
        first += len(big[dd])
    seen = [collections.Counter() for _ in sources]
    for x in got:
        s, shard = int(x[5]), int(x[1])
        assert shard in ranges[s]
        seen[s][(shard, int(x[2]))] += 1
    for s, (dd, kind, value, repl) in enumerate(sources):
        shard_counts = [sum(1 for _ in read_shard(p)) for p in big[dd]]
        # a shard is always read from its start: within a shard, a sample is
        # delivered at most as often as the one before it
        for j, m in enumerate(shard_counts):
            c = [seen[s][(firsts[s] + j, i)] for i in range(m)]
            assert all(c[i] >= c[i + 1] for i in range(m - 1)), (s, j)
        if repl:
            continue
        total = sum(shard_counts)
        m, r = divmod(quotas[s], total)
        per_sample = [seen[s][(firsts[s] + j, i)]
                      for j, cnt in enumerate(shard_counts) for i in range(cnt)]
        assert set(per_sample) <= {m, m + 1}, s
        assert sum(1 for c in per_sample if c == m + 1) == r, s
    assert max(seen[1].values()) == 1  # b: quota < N_b, no duplicates
    assert quotas[1] < 12000


# --- 4. exactly once across W consumers ---------------------------------------

@pytest.mark.parametrize("world", [2, 3, 5])
def test_consumers_exactly_once(tmp_path, world):
    rnd = random.Random(300 + world)
    paths = {}
    for s, counts in enumerate([[9, 0, 14], [6, 6], [20, 3, 0, 5]]):
        d = os.path.join(str(tmp_path), f"c{s}")
        paths[d] = write_source(d, f"c{s}", counts, rnd)
    d = sorted(paths)
    sources = [(d[0], "weight", 0.5, False), (d[1], "choose", 17, True),
               (d[2], "weight", 0.5, True)]
    base = ("--seed", 21, "--epoch", 2, "--interleave", 3, "--buffer", 16)
    full = sio_mix(sources, 101, *base)
    want, _ = ref_mix(sources, paths, 101, 21, 2, 3, 16)
    assert full == want
    n = len(full)
    union = []
    for rank in range(world):
        got = sio_mix(sources, 101, *base, "--rank", rank, "--world", world,
                      "--partition", "even-drop")
        idx = share(n, rank, world, "even-drop")
        assert [int(x[0]) for x in got] == idx
        assert got == [full[i] for i in idx]
        union += idx
        # a resume replays the epoch and lands on the same sequence
        start = len(got) // 2
        again = sio_mix(sources, 101, *base, "--rank", rank, "--world", world,
                        "--partition", "even-drop", "--start", start)
        assert again == got[start:]
    assert sorted(union) == list(range(n // world * world))
    # elastic resume from a global cursor with another number of consumers
    g = n // 3
    rest = []
    for rank in range(world + 1):
        got = sio_mix(sources, 101, *base, "--rank", rank, "--world", world + 1,
                      "--partition", "none", "--global-start", g)
        idx = share(n, rank, world + 1, "none", 0, g)
        assert got == [full[i] for i in idx]
        rest += idx
    assert sorted(rest) == list(range(g, n))


# --- 5. dry sources --------------------------------------------------------------

def test_dry_source_drops_its_quota(tmp_path):
    rnd = random.Random(41)
    paths = {}
    for name, counts in [("a", [10, 4]), ("dry", [0, 0, 0]), ("c", [6])]:
        d = os.path.join(str(tmp_path), name)
        paths[d] = write_source(d, name, counts, rnd)
    a, c, dry = sorted(paths)
    alone = [(a, "weight", 0.7, False), (c, "choose", 20, True)]
    for repl in (False, True):
        sources = [(a, "weight", 0.7, False), (dry, "weight", 0.3, repl),
                   (c, "choose", 20, True)]
        want, quotas = ref_mix(sources, paths, 300, 8, 0, 2, 30)
        assert quotas == [196, 84, 20]
        got = sio_mix(sources, 300, "--seed", 8, "--interleave", 2, "--buffer", 30)
        assert got == want
        assert per_source(got, 3) == [196, 0, 20]
        # the others are unaffected: their own samples come as without the
        # dry source at those quotas
        _, q2 = ref_mix(alone, paths, 216, 8, 0, 2, 30)
        assert q2 == [196, 20]
    # a dry source with choose, and a mixture where only it is left at the end
    sources = [(dry, "choose", 50, False), (c, "repeat", 3, False)]
    got = sio_mix(sources, None, "--seed", 1, "--buffer", 4)
    want, quotas = ref_mix(sources, paths, None, 1, 0, 4, 4)
    assert quotas == [50, 18] and got == want
    assert per_source(got, 2) == [0, 18]


def test_pass_with_no_sample_ends_a_source(tmp_path):
    """With replacement, a pass can draw only empty shards although the
    source has samples: that pass yields nothing and ends the source."""
    rnd = random.Random(43)
    paths = {}
    for name, counts in [("e", [0, 0, 3]), ("f", [5, 5])]:
        d = os.path.join(str(tmp_path), name)
        paths[d] = write_source(d, name, counts, rnd)
    e, f = sorted(paths)
    sources = [(e, "choose", 40, True), (f, "weight", 1, False)]
    hits = 0
    for seed in range(40):
        want, quotas = ref_mix(sources, paths, 100, seed, 0, 2, 8)
        realized = per_source(want, 2)
        if realized[0] == quotas[0]:
            continue
        assert realized[1] == quotas[1] == 60
        got = sio_mix(sources, 100, "--seed", seed, "--interleave", 2, "--buffer", 8)
        assert got == want, seed
        hits += 1
        if hits == 3:
            break
    assert hits == 3


# --- 6. golden --------------------------------------------------------------------

# The first 20 lines of one fixed mixed epoch of fixed mkwds datasets (keys,
# sizes and contents are pure functions of mkwds' arguments): g 3 shards x 7
# samples weight 0.6, h 2 x 4 weight 0.4 with replacement, i 2 x 3 choose 9;
# epoch_size 60, seed 7, epoch 1, K 2, B 8. Computed by the reference, equal
# to C; a change to either shows here.
GOLDEN = [
    # global index, shard index, index in shard, bytes, key, source
    ('0', '6', '0', '67', 'sample000003', '2'),
    ('1', '1', '2', '75', 'sample000009', '0'),
    ('2', '1', '1', '76', 'sample000008', '0'),
    ('3', '0', '0', '77', 'sample000000', '0'),
    ('4', '0', '4', '77', 'sample000004', '0'),
    ('5', '0', '2', '77', 'sample000002', '0'),
    ('6', '0', '1', '70', 'sample000001', '0'),
    ('7', '5', '0', '82', 'sample000000', '2'),
    ('8', '1', '4', '77', 'sample000011', '0'),
    ('9', '1', '3', '73', 'sample000010', '0'),
    ('10', '4', '1', '79', 'sample000005', '1'),
    ('11', '6', '1', '66', 'sample000004', '2'),
    ('12', '0', '6', '76', 'sample000006', '0'),
    ('13', '4', '0', '72', 'sample000004', '1'),
    ('14', '1', '5', '77', 'sample000012', '0'),
    ('15', '3', '0', '81', 'sample000000', '1'),
    ('16', '3', '1', '74', 'sample000001', '1'),
    ('17', '2', '1', '73', 'sample000015', '0'),
    ('18', '5', '1', '74', 'sample000001', '2'),
    ('19', '3', '2', '68', 'sample000002', '1'),
]


def test_golden(tmp_path):
    paths = {}
    for name, shards, per_shard, seed in [("g", 3, 7, 1), ("h", 2, 4, 2),
                                          ("i", 2, 3, 3)]:
        d = os.path.join(str(tmp_path), name)
        paths[d] = mkwds(d, shards, per_shard, seed, name)
    g, h, i = sorted(paths)
    sources = [(g, "weight", 0.6, False), (h, "weight", 0.4, True),
               (i, "choose", 9, False)]
    want, quotas = ref_mix(sources, paths, 60, 7, 1, 2, 8)
    assert quotas == [31, 20, 9]
    assert want[:len(GOLDEN)] == GOLDEN
    got = sio_mix(sources, 60, "--seed", 7, "--epoch", 1, "--interleave", 2,
                  "--buffer", 8)
    assert got == want
    assert per_source(got, 3) == quotas
