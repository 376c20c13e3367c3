"""An independent implementation of shardcast's epoch order, in Python.

This is the determinism contract of docs/order.md "The order of an epoch", written
a second time from its text so the C library can be checked against it:
SplitMix64 seeding, xoshiro256**, rejection sampling, Fisher-Yates, the
K-way interleave, the buffer shuffle with its byte cap, and the partition
policies. Reading uses Python's tarfile and the WebDataset grouping rule.

Mixing (docs/order.md "Mixing datasets", contract version 2) is written the same
way from its text: mix_quotas (step 2), source_passes (step 3) and
mix_order (steps 1, 4 and 5).
"""
import math
import re
import tarfile

M64 = (1 << 64) - 1
STREAM_SHARDS = 1
STREAM_BUFFER = 2
STREAM_MIX = 3


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Rng:
    """xoshiro256** seeded from (seed, epoch, stream) through SplitMix64."""

    def __init__(self, seed, epoch, stream):
        x = (seed ^ ((0x9E3779B97F4A7C15 * (epoch + 1)) & M64)
             ^ ((0xD1B54A32D192ED03 * stream) & M64)) & M64
        self.s = []
        for _ in range(4):
            x, out = splitmix64(x)
            self.s.append(out)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        # below(1) is 0 without a draw (the C library agrees). docs/order.md step 1
        # read literally would draw once; observable with a byte cap, when
        # the buffer holds one sample and the next one does not fit.
        if n <= 1:
            return 0
        threshold = ((1 << 64) - n) % n
        while True:
            x = self.next()
            if x >= threshold:
                return x % n


def permute(rng, n):
    a = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        a[i], a[j] = a[j], a[i]
    return a


KEY_RE = re.compile(r"^((?:.*/|)[^./][^.]*)[.](.*)$", re.S)


def split_key(name):
    base = name.rsplit("/", 1)[-1]
    if "." not in base or base.startswith("."):
        return None
    dirpart = name[: len(name) - len(base)]
    key, ext = base.split(".", 1)
    return dirpart + key, ext


def read_shard(path):
    """Samples of one shard: list of (key, {ext: bytes}, bytes, index)."""
    out = []
    cur_key, fields, bad = None, {}, False
    groups = 0

    def close():
        nonlocal groups
        if cur_key is None:
            return
        idx = groups
        groups += 1
        if not bad:
            out.append((cur_key, dict(fields),
                        sum(len(v) for v in fields.values()), idx))

    with tarfile.open(path, "r:*") as tf:
        for m in tf:
            if not m.isreg():
                continue
            name = m.name
            if "/" not in name and len(name) >= 4 and name.startswith("__") \
                    and name.endswith("__"):
                continue
            kv = split_key(name)
            if kv is None:
                continue
            key, ext = kv
            ext = ext.lower()
            if key != cur_key:
                close()
                cur_key, fields, bad = key, {}, False
            if ext in fields:
                bad = True
                continue
            fields[ext] = tf.extractfile(m).read()
    close()
    return out


def interleave(order, shards, k):
    """Step 4: K slots over the shard indices of `order`, round-robin in slot
    order; a slot whose shard ends takes the next shard of the order at once,
    a slot with nothing left drops out. Yields (shard index, sample)."""
    nxt = 0
    slots = []
    for _ in range(k):
        if nxt < len(order):
            slots.append([order[nxt], 0])
            nxt += 1
        else:
            slots.append(None)
    cur = 0
    while any(s is not None for s in slots):
        s = cur
        cur = (cur + 1) % k
        while slots[s] is not None:
            idx, pos = slots[s]
            if pos < len(shards[idx]):
                slots[s][1] += 1
                yield idx, shards[idx][pos]
                break
            if nxt < len(order):
                slots[s] = [order[nxt], 0]
                nxt += 1
            else:
                slots[s] = None


def buffer_shuffle(inputs, rng, b, cap=0, size=lambda x: x[1][2]):
    """Step 5: the buffer shuffle of the sequence `inputs` with `rng`, B
    samples and a byte cap (0: none); size(x) is a sample's bytes. Returns
    the emitted order Y."""
    buf, nbytes, y = [], 0, []
    for x in inputs:
        xb = size(x)
        if not buf or (len(buf) < b and (cap == 0 or nbytes + xb <= cap)):
            buf.append(x)
            nbytes += xb
            continue
        j = rng.below(len(buf))
        y.append(buf[j])
        nbytes += xb - size(buf[j])
        buf[j] = x
        while cap and nbytes > cap and len(buf) > 1:
            j = rng.below(len(buf))
            o = buf[j]
            buf[j] = buf[-1]
            buf.pop()
            nbytes -= size(o)
            y.append(o)
    while buf:
        j = rng.below(len(buf))
        o = buf[j]
        buf[j] = buf[-1]
        buf.pop()
        y.append(o)
    return y


def epoch_order(paths, seed, epoch, k, b, cap=0, replica=0, replicas=1):
    """The global sequence Y (of one replica's part when replicas > 1):
    list of (shard index, sample tuple)."""
    shards = [read_shard(p) for p in paths]
    perm = permute(Rng(seed, epoch, STREAM_SHARDS), len(paths))
    if replicas > 1:
        perm = perm[replica::replicas]
    rng = Rng(seed, epoch, STREAM_BUFFER + 256 * replica)
    return buffer_shuffle(interleave(perm, shards, k), rng, b, cap)


def share(n, rank, world, policy, start=0, gstart=0):
    """Global indices of consumer `rank`'s share of an epoch of n samples,
    dealing Y[gstart:] (elastic resume from a global cursor)."""
    if gstart:
        return [gstart + i for i in share(max(n - gstart, 0), rank, world,
                                          policy, start)]
    if policy == "even-drop":
        limit = n // world * world
        idx = list(range(rank, limit, world))
    elif policy == "none":
        idx = list(range(rank, n, world))
    elif policy == "even-pad":
        padded = -(-n // world) * world if n else 0
        idx = [i % n for i in range(rank, padded, world)]
    else:
        raise ValueError(policy)
    return idx[start:]


# --- Mixing datasets (contract version 2) ---------------------------------

MIX_MAX_SOURCES = 256
WEIGHT_MIN, WEIGHT_MAX = 2.0 ** -20, 2.0 ** 20
REPEAT_MIN, REPEAT_MAX = 0.0, 2.0 ** 20


class MixRefused(ValueError):
    """A mixed job the contract does not allow."""


def _fraction_in(v, lo, hi):
    return isinstance(v, (int, float)) and not isinstance(v, bool) \
        and lo <= v <= hi  # NaN fails both comparisons


def mix_quotas(specs, epoch_size, counts):
    """Step 2: the quota of every source.

    specs: one (kind, value) per source, kind "weight", "repeat", "choose"
    or None (repeat 1); epoch_size: an int, or None when the job has none;
    counts: N_s, the good samples of each source (read for repeat only).
    Returns the list of quotas; raises MixRefused for what is not allowed.
    """
    if not specs:
        raise MixRefused("no sources")
    if len(specs) > MIX_MAX_SOURCES:
        raise MixRefused("more than %d sources" % MIX_MAX_SOURCES)
    quotas = [None] * len(specs)
    weighted = []
    for s, (kind, value) in enumerate(specs):
        if kind is None:
            kind, value = "repeat", 1
        if kind == "choose":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise MixRefused("choose %r" % (value,))
            quotas[s] = value
        elif kind == "repeat":
            if not _fraction_in(value, REPEAT_MIN, REPEAT_MAX):
                raise MixRefused("repeat %r out of [0, 2^20]" % (value,))
            # IEEE double: r * N_s rounded, + 0.5 rounded, then floor.
            quotas[s] = math.floor(float(value) * float(counts[s]) + 0.5)
        elif kind == "weight":
            if not _fraction_in(value, WEIGHT_MIN, WEIGHT_MAX):
                raise MixRefused("weight %r out of [2^-20, 2^20]" % (value,))
            weighted.append((s, math.floor(float(value) * 4294967296.0 + 0.5)))
        else:
            raise MixRefused("kind %r" % (kind,))
    fixed = sum(q for q in quotas if q is not None)
    if not weighted:
        if epoch_size is not None and epoch_size != fixed:
            raise MixRefused("epoch_size %d != sum of the quotas %d"
                             % (epoch_size, fixed))
        return quotas
    if epoch_size is None:
        raise MixRefused("weights need epoch_size")
    r = epoch_size - fixed
    if r < 0:
        # Not spelled out by docs/order.md: the fixed quotas exceed epoch_size,
        # so no share of it is left for the weights.
        raise MixRefused("fixed quotas %d exceed epoch_size %d"
                         % (fixed, epoch_size))
    total = sum(w for _, w in weighted)
    rems = []
    for s, w in weighted:
        quotas[s] = r * w // total
        rems.append((r * w % total, s))
    extra = r - sum(quotas[s] for s, _ in weighted)
    # largest remainders first, ties to the lower s
    for _, s in sorted(rems, key=lambda t: (-t[0], t[1]))[:extra]:
        quotas[s] += 1
    return quotas


def source_passes(s, first, n, with_replacement, shards, seed, epoch, k):
    """Step 3: the samples of source s (owning shard indices
    [first, first + n)), pass after pass; pass p interleaves (K slots, no
    buffer) the order drawn with the PRNG of (seed, epoch, stream
    (s + 1) * 2^32 + p). Yields (shard index, sample); returns (the source
    is dry) after the first pass that yields nothing."""
    p = 0
    while True:
        rng = Rng(seed, epoch, ((s + 1) << 32) + p)
        if with_replacement:
            order = [first + rng.below(n) for _ in range(n)]
        else:
            order = [first + i for i in permute(rng, n)]
        yielded = False
        for x in interleave(order, shards, k):
            yielded = True
            yield x
        if not yielded:
            return
        p += 1


def mix_order(sources, seed, epoch, k, b, cap=0, epoch_size=None):
    """A mixed epoch. sources: one (paths, kind, value, with_replacement)
    per source, in the order written (paths: the source's shard list).
    Returns (Y, quotas): Y is the global sequence as a list of
    (source, shard index, sample tuple), quotas as mix_quotas gives them."""
    paths, firsts = [], []
    for src in sources:
        firsts.append(len(paths))
        paths += list(src[0])
    cache = {}
    shards = []
    for p in paths:
        if p not in cache:
            cache[p] = read_shard(p)
        shards.append(cache[p])
    counts = [sum(len(shards[i]) for i in range(f, f + len(src[0])))
              for f, src in zip(firsts, sources)]
    quotas = mix_quotas([(src[1], src[2]) for src in sources], epoch_size,
                        counts)
    gens = [source_passes(s, firsts[s], len(src[0]), src[3], shards, seed,
                          epoch, k)
            for s, src in enumerate(sources)]

    def mixed():
        left = list(quotas)
        total = sum(left)
        rng = Rng(seed, epoch, STREAM_MIX)
        while total > 0:
            x = rng.below(total)
            s, run = 0, left[0]
            while run <= x:
                s += 1
                run += left[s]
            nx = next(gens[s], None)
            if nx is None:  # dry: the rest of its quota is dropped, draw again
                total -= left[s]
                left[s] = 0
                continue
            left[s] -= 1
            total -= 1
            yield s, nx[0], nx[1]

    y = buffer_shuffle(mixed(), Rng(seed, epoch, STREAM_BUFFER), b, cap,
                       size=lambda x: x[2][2])
    return y, quotas
