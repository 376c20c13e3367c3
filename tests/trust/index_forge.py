"""Forged index files for the trust suite (include/shardio_index.h's
format): the dataset, the reference a server that reads no sidecar
serves, and check_everything, shared by test_index_sidecars.py and
test_index_state_files.py (two files, so that pytest's processes run
them side by side).

Index sidecars and state_dir index files are hints, never trusted.

A forged index (fewer groups than the shard has, 500,000 groups for a small
shard, offsets past the end, wrong keys, wrong sizes), as a sidecar next to
a shard or as the server's own file under state_dir, must change nothing a
consumer sees: seeks and resumes at several positions of every rank give
the right continuation, /samples/{i} answers the true i-th sample for every
i, full epochs are exactly-once with the right bytes (all compared with a
server that reads no sidecar), and the rejection is counted in
shardcast_index_rejected_total. A consumer may get one retryable error (a
stream read from a plan built on the forged index) and resumes.

Regression (issue 27): a sidecar listing half of a shard's groups made
samples/777 answer another sample and samples/1599 a 404; 500,000 claimed
groups took RSS from 58 to 405 MiB; forged offsets ended one rank's stream
with 0 of 800 samples.
"""

import functools
import glob
import os
import shutil
import struct
import sys
import tarfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))

from server_testlib import (FramesStream, Server,  # noqa: E402
                            make_dataset, read_share, request)

SHARDS, PER_SHARD, SIZE = 6, 400, 1500
TOTAL = SHARDS * PER_SHARD
WORLD = 2
SEEK_EPOCH, FULL_EPOCH = 3, 5
# Share positions; the first two lie more than 1024 samples past the start
# of the epoch, so a fresh server serves them by seeks, from the forged
# index (later ones may come from the main feed's window).
POSITIONS = (1100, 700, 300, 1)
FORGED = 1  # which shard's index is forged (in list order)


# -- fixtures -----------------------------------------------------------------

# server_binary, workdir and start: tests/server/server_fixtures.py

@pytest.fixture(scope="module")
def dataset(workdir):
    d = os.path.join(workdir, "index-trust-ds")
    make_dataset(d, shards=SHARDS, per_shard=PER_SHARD, size=SIZE, seed=27)
    return d


def shard_files(d):
    return sorted(glob.glob(os.path.join(d, "*.tar")))


def tar_keys(path):
    """The samples of one shard in tar order by the WebDataset rule, from
    Python's tarfile (independent of shardcast)."""
    out = []
    with tarfile.open(path) as t:
        for m in t:
            base = m.name.rsplit("/", 1)[-1]
            if not m.isfile() or "." not in base or base.startswith("."):
                continue
            key = m.name[:len(m.name) - len(base)] + base.split(".", 1)[0]
            if not out or out[-1] != key:
                out.append(key)
    return out


@pytest.fixture(scope="module")
def reference(server_binary, workdir, dataset):
    """What a server that reads no sidecar serves: the unshuffled keys, the
    shares of the seek epoch and of the full epoch for every rank."""
    keys = []
    for p in shard_files(dataset):
        keys += tar_keys(p)
    assert len(keys) == TOTAL
    srv = Server(server_binary, ["--job", "train", "--source", dataset,
                                 "--index-sidecars", "false", "--prefetch",
                                 "false", "--drain-grace", "2"], workdir)
    try:
        shares = {}
        for ep in (SEEK_EPOCH, FULL_EPOCH):
            for r in range(WORLD):
                got, outcome, _ = read_share(srv, "train", ep, r, WORLD)
                assert outcome == "end" and len(got) == TOTAL // WORLD
                shares[ep, r] = got
    finally:
        assert srv.stop() == 0
    return keys, shares


# -- the index file format (include/shardio_index.h), to forge it -------------

# SIO_INDEX_VERSION
INDEX_VERSION = 2
HDR = struct.Struct("<8sIIQQ")
REC = struct.Struct("<cQQQIHH")
U64 = 2**64 - 1


def fnv64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & U64
    return h


def parse_index(b):
    magic, ver, flags, size, mtime = HDR.unpack_from(b, 0)
    assert magic == b"SCIDX\0\1\0" and ver == INDEX_VERSION
    o, groups = HDR.size, []
    while b[o:o + 1] == b"G":
        _, off, end, nbytes, gflags, klen, nf = REC.unpack_from(b, o)
        o += REC.size
        key = b[o:o + klen]
        o += klen
        fields = []
        for _ in range(nf):
            nl = b[o]
            name = b[o + 1:o + 1 + nl]
            (fs,) = struct.unpack_from("<Q", b, o + 1 + nl)
            fields.append([name, fs])
            o += 1 + nl + 8
        groups.append({"offset": off, "end": end, "bytes": nbytes,
                       "flags": gflags, "key": key, "fields": fields})
    assert b[o:o + 1] == b"E"
    return {"flags": flags, "size": size, "mtime": mtime}, groups


def index_record(offset, end, nbytes, flags, key, fields):
    """One group's record in an index file: fields are (name, size)."""
    return (REC.pack(b"G", offset, end, nbytes, flags, len(key), len(fields)) + key +
            b"".join(bytes([len(name)]) + name + struct.pack("<Q", fs)
                     for name, fs in fields))


def write_index(hdr, groups=(), records=None):
    """An index file: the header, the groups (dicts as parse_index gives),
    or records already made by index_record, the trailer and checksum."""
    if records is None:
        records = [index_record(g["offset"], g["end"], g["bytes"], g["flags"],
                                g["key"], g["fields"]) for g in groups]
    out = bytearray(HDR.pack(b"SCIDX\0\1\0", INDEX_VERSION, hdr["flags"], hdr["size"],
                             hdr["mtime"]))
    out += b"".join(records)
    out += b"E" + struct.pack("<Q", len(records))
    out += struct.pack("<Q", fnv64(out))
    return bytes(out)


def forge(kind, hdr, groups):
    """The forged groups of one shard's index (hdr: its header)."""
    g = [dict(x, fields=[list(f) for f in x["fields"]]) for x in groups]
    if kind == "half":
        g = g[:len(g) // 2]
        g[-1]["end"] = U64
    elif kind == "huge":
        return huge_index(hdr["size"])
    elif kind == "past_end":
        g[-1]["offset"] = hdr["size"] + 4096
        g[-2]["end"] = g[-1]["offset"]
    elif kind == "wrong_keys":
        for x in g[5:-5:7]:
            x["key"] = x["key"][:-1] + (b"x" if x["key"][-1:] != b"x" else b"y")
    elif kind == "wrong_sizes":
        for x in g[3:-3:11]:
            x["bytes"] -= 10
            max(x["fields"], key=lambda f: f[1])[1] -= 10
    else:
        raise AssertionError(kind)
    return write_index(hdr, g)


@functools.lru_cache(maxsize=2)
def huge_index(size):
    """A well-formed index of 500,000 groups (30 MB) for a shard of `size`
    bytes (no mtime: the file is the same for every copy of the shard)."""
    n = 500000
    fields = [(b"bin", 1)]
    return write_index({"flags": 0, "size": size, "mtime": 0}, records=[
        index_record(i * 512, (i + 1) * 512 if i + 1 < n else U64, 1, 0,
                     b"k%07d" % i, fields) for i in range(n)])


KINDS = ["half", "huge", "past_end", "wrong_keys", "wrong_sizes"]


# -- helpers ------------------------------------------------------------------

def metric(srv, name):
    st, _, body = request(srv, "/metrics")
    assert st == 200
    total = 0
    for line in body.decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.split()[-1])
    return total


def read_resuming(srv, epoch, rank, start):
    """A consumer that resumes after a retryable error, as the clients do;
    (samples, retryable errors seen)."""
    got, errors = [], 0
    while True:
        s, outcome, trailer = read_share(srv, "train", epoch, rank, WORLD,
                                         start=start + len(got))
        got += s
        if outcome == "end":
            return got, errors
        assert outcome == "error" and trailer.get("retryable"), (outcome, trailer)
        errors += 1
        assert errors <= 1, trailer


def check_everything(srv, reference, source, plane):
    keys, shares = reference
    # Seeks and resumes first, while the forged index is all the server
    # has for the shard: the right continuation for every rank.
    errors = 0
    for r in range(WORLD):
        want = shares[SEEK_EPOCH, r]
        for k in POSITIONS:
            got, e = read_resuming(srv, SEEK_EPOCH, r, k)
            errors += e
            assert [(s["key"], s["hash"]) for s in got] == \
                [(s["key"], s["hash"]) for s in want[k:]], (r, k)
    # Through the feed a wrong index is dropped and the seek reopened
    # where it was: no error at all. A plan built on it fails the stream
    # once (retryable), drops it, and the epoch goes on from a plan made
    # again, which indexes the shard anew.
    assert errors <= (1 if plane == "auto" else 0)
    # /samples/{i}: the true i-th sample for every i of the forged shard,
    # and for a spread of the others (see sample_indices), and the end.
    for i in sample_indices():
        s = FramesStream(srv, "/v1/jobs/train/samples/%d?format=frames" % i)
        got = s.read_all()
        s.close()
        assert s.outcome == "end" and len(got) == 1, (i, s.trailer)
        assert got[0]["key"] == keys[i] and got[0]["index"] == i, i
    st, _, body = request(srv, "/v1/jobs/train/samples/%d" % TOTAL)
    assert st == 404 and b"past the dataset's %d samples" % TOTAL in body
    # A full epoch: exactly once, the right bytes.
    seen = []
    for r in range(WORLD):
        got, _ = read_resuming(srv, FULL_EPOCH, r, 0)
        assert [(s["key"], s["hash"]) for s in got] == \
            [(s["key"], s["hash"]) for s in shares[FULL_EPOCH, r]]
        seen += [s["key"] for s in got]
    assert sorted(seen) == sorted(keys)
    # Counted, with the log line.
    assert metric(srv, 'shardcast_index_rejected_total{source="%s"}'
                  % source) >= 1
    log = srv.wait_log("event=index_rejected")
    assert "event=index_rejected" in log
    print("%s: %d retryable errors; %s" % (source, errors, "; ".join(
        l.split("event=index_rejected", 1)[1][:200]
        for l in log.splitlines() if "event=index_rejected" in l)))


def sample_indices():
    """The i of /samples/{i} that check_everything asks for: every sample
    of the forged shard, the first and the last of every other shard, and
    every SPREAD-th sample between them (a forged index that moved the
    samples after its shard, by fewer or more groups than it has, moves
    every one of them). Asking for all 2,400 took 2-8 s a test."""
    want = set(range(FORGED * PER_SHARD, (FORGED + 1) * PER_SHARD))
    for s in range(SHARDS):
        want.update((s * PER_SHARD, (s + 1) * PER_SHARD - 1))
    want.update(range(0, TOTAL, SPREAD))
    return sorted(want)


SPREAD = 7


def variant_dir(workdir, dataset, name):
    d = os.path.join(workdir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for p in shard_files(dataset):
        shutil.copy(p, d)
    return d


def rss_kib(srv):
    return srv.proc_status("VmRSS")


