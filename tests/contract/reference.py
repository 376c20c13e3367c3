"""An independent implementation of shardcast's epoch order, in Python.

This is the determinism contract of README "The order of an epoch", written
a second time from its text so the C library can be checked against it:
SplitMix64 seeding, xoshiro256**, rejection sampling, Fisher-Yates, the
K-way interleave, the buffer shuffle with its byte cap, and the partition
policies. Reading uses Python's tarfile and the WebDataset grouping rule.
"""
import re
import tarfile

M64 = (1 << 64) - 1
STREAM_SHARDS = 1
STREAM_BUFFER = 2


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


def epoch_order(paths, seed, epoch, k, b, cap=0, replica=0, replicas=1):
    """The global sequence Y (of one replica's part when replicas > 1):
    list of (shard index, sample tuple)."""
    shards = [read_shard(p) for p in paths]
    perm = permute(Rng(seed, epoch, STREAM_SHARDS), len(paths))
    if replicas > 1:
        perm = perm[replica::replicas]
    nxt = 0
    slots = []
    for _ in range(k):
        if nxt < len(perm):
            slots.append([perm[nxt], 0])
            nxt += 1
        else:
            slots.append(None)

    def interleave():
        nonlocal nxt
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
                if nxt < len(perm):
                    slots[s] = [perm[nxt], 0]
                    nxt += 1
                else:
                    slots[s] = None

    rng = Rng(seed, epoch, STREAM_BUFFER + 256 * replica)
    buf, nbytes, y = [], 0, []
    for x in interleave():
        xb = x[1][2]
        if not buf or (len(buf) < b and (cap == 0 or nbytes + xb <= cap)):
            buf.append(x)
            nbytes += xb
            continue
        j = rng.below(len(buf))
        y.append(buf[j])
        nbytes += xb - buf[j][1][2]
        buf[j] = x
        while cap and nbytes > cap and len(buf) > 1:
            j = rng.below(len(buf))
            o = buf[j]
            buf[j] = buf[-1]
            buf.pop()
            nbytes -= o[1][2]
            y.append(o)
    while buf:
        j = rng.below(len(buf))
        o = buf[j]
        buf[j] = buf[-1]
        buf.pop()
        y.append(o)
    return y


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
