"""Damaged shard-cache entries are never served (docs/operations.md, "The
shard cache": Integrity).

Shards over HTTP (nginx) read through the shard cache under
state_dir/cache. Epoch 0 fills the cache. Then bytes are flipped in the
entries' files: 64 bytes inside a sample's payload (a large sample, read by
the plan as an extent, and a 1 KiB one, read whole), a tar header, and a
block's sum in the .sums file. Each damage is followed by an epoch, on the
streaming path (--data-plane stream) and on the plan path (--data-plane
auto, whose epochs are planned once every shard is a complete, checked
cache entry), in the frames and tar encodings, and by GET samples/{i}.
Every sample received must be the original shard's bytes, exactly once
(a retryable trailer or a cut connection is followed by a resume at the
position reached, as the clients do); the corrupt counter must go up, the
entry be read again from the store (store bytes and fills up), and a later
epoch be served from the cache again (no store bytes). The same with the
damage done while the server is stopped, then restarted.
"""

import os
import random
import sys
import tarfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "objstore"))

from objstore_support import serve_nginx  # noqa: E402
from plan_testlib import (Member, fetch, parse_body, require_planes,  # noqa: E402
                          stream_query, wait_until, wds_model, write_tar)
from server_testlib import get_json, read_when  # noqa: E402

SHARDS = 6
PER_SHARD = 8
SMALL_SHARD = 5  # its samples are ~1 KiB: the plan reads them whole
# No prefetch: an epoch's shards are read while it streams, after the
# damage that precedes it (a prefetched epoch would hold its samples).
SERVER_ARGS = ["--prefetch", "false", "--join-timeout-ms", "300", "--rejoin-grace-ms", "300",
               "--lag-grace-ms", "300", "--stream-rate-limit", "0",
               "--rate-limit", "0", "--max-new-epochs-per-minute", "0"]


def name(s):
    return "c-%06d.tar" % s


class Data:
    """SHARDS tar shards: samples c<s>/k<i> with a .bin (40-70 KB, or ~1
    KiB in SMALL_SHARD) and a .cls."""

    def __init__(self, root):
        rng = random.Random(2727)
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.by_key, self.order = {}, []
        for s in range(SHARDS):
            members = []
            for i in range(PER_SHARD):
                n = rng.randint(900, 1100) if s == SMALL_SHARD else rng.randint(40000, 70000)
                key = "c%d/k%03d" % (s, i)
                members.append(Member(key + ".bin", rng.randbytes(n)))
                members.append(Member(key + ".cls", b"%d" % i))
            write_tar(os.path.join(root, name(s)), members, "ustar")
            for k, f in wds_model(members):
                self.by_key[k] = f
                self.order.append(k)

    def member(self, s, i, ext="bin"):
        with tarfile.open(os.path.join(self.root, name(s))) as t:
            return t.getmember("c%d/k%03d.%s" % (s, i, ext))


def entry_files(cache_dir):
    """shard name -> (data path, sums path) of its complete entries."""
    out = {}
    for fn in os.listdir(cache_dir):
        if not fn.endswith(".meta"):
            continue
        with open(os.path.join(cache_dir, fn)) as f:
            text = f.read()
        lines = dict(ln.split(" ", 1) for ln in text.splitlines()[1:] if " " in ln)
        if lines.get("complete") == "1":
            base = os.path.join(cache_dir, fn[:-5])
            out[lines["url"].rsplit("/", 1)[-1]] = (base + ".data", base + ".sums")
    return out


def flip(path, off, n):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(n)
        f.seek(off)
        f.write(bytes(x ^ 0x5A for x in b))


def cache(srv):
    return get_json(srv, "/v1/jobs")["cache"]


def wait_complete(srv):
    """Until every shard is a complete entry and no fill runs."""
    return wait_until(lambda: (lambda c: c if c["complete"] == SHARDS and c["fills"] == 0
                               else None)(cache(srv)), 60,
                      "%d complete cache entries" % SHARDS)


def read_epoch(srv, data, epoch, fmt):
    """Every sample of the epoch (one consumer), resuming after a retryable
    trailer or a cut as the clients do; checked against the original
    shards, exactly once. Returns the streams it took."""
    got, start, streams = [], 0, 0
    while True:
        streams += 1
        assert streams <= 20, "epoch %d: no end after %d streams" % (epoch, streams)
        st, _, body, complete, _ = fetch(srv, stream_query("t", epoch, 0, 1, fmt, start=start))
        assert st == 200, (epoch, st, body[:300])
        p = parse_body(fmt, body)
        if p.outcome == "cut" and p.samples:
            p.samples.pop()  # perhaps cut inside: read again by the resume
        else:
            assert p.problem is None, (epoch, fmt, p.summary())
        for smp in p.samples:
            assert smp["position"] == start, (epoch, fmt, smp["position"], start)
            assert smp["fields"] == data.by_key.get(smp["key"]), (
                "epoch %d (%s): sample %s is not the shard's bytes (fields %s)"
                % (epoch, fmt, smp["key"], {k: len(v) for k, v in smp["fields"].items()}))
            got.append(smp["key"])
            start += 1
        if p.outcome == "end":
            break
        assert p.outcome == "cut" or p.retryable_error(), (epoch, fmt, p.summary())
    assert sorted(got) == sorted(data.order), "epoch %d: not every sample exactly once" % epoch
    return streams


def check_sample(srv, data, i, fmt="frames"):
    st, _, body, _, _ = fetch(srv, "/v1/jobs/t/samples/%d?format=%s" % (i, fmt))
    p = parse_body(fmt, body)
    assert st == 200 and p.outcome == "end" and len(p.samples) == 1, (i, st, p.summary())
    assert p.samples[0]["key"] == data.order[i]
    assert p.samples[0]["fields"] == data.by_key[data.order[i]], "samples/%d: wrong bytes" % i


def damages(data, files):
    """The damages, each (what, apply()), applied to the entries' files."""
    def payload(s, i):
        m = data.member(s, i)
        return lambda: flip(files[name(s)][0], m.offset_data + 100, 64)

    def header(s, i):
        m = data.member(s, i)
        return lambda: flip(files[name(s)][0], m.offset + 100, 8)  # mode, uid

    def sums(s, i):
        m = data.member(s, i)
        blk = (m.offset_data + 5000) // 4096
        return lambda: flip(files[name(s)][1], 32 + 4 * blk + 1, 1)

    return [("payload", payload(1, 3)), ("tar header", header(2, 5)),
            ("sums", sums(3, 2)), ("small payload", payload(SMALL_SHARD, 4))]


def start_server(start, srv_dir, base, plane):
    return start("--job", "t", "--source", base + "/c-{000000..%06d}.tar" % (SHARDS - 1),
                 "--data-plane", plane, "--state-dir", srv_dir, "--cache-bytes", "1GiB",
                 *SERVER_ARGS)


def sample_index(data, s, i):
    return data.order.index("c%d/k%03d" % (s, i))


@pytest.mark.parametrize("plane", ["stream", "auto"])
def test_damaged_entries_never_served(start, server_binary, tmp_path, plane):
    require_planes(server_binary, plane)

    data = Data(str(tmp_path / "data"))
    state = str(tmp_path / "state")
    with serve_nginx(data.root, tmp_path) as base:
        srv = start_server(start, state, base, plane)
        read_epoch(srv, data, 0, "frames")
        wait_complete(srv)
        files = entry_files(os.path.join(state, "cache"))
        epoch = 1
        for what, apply in damages(data, files):
            c0 = cache(srv)
            apply()
            for fmt in ("frames", "tar"):
                read_epoch(srv, data, epoch, fmt)
                epoch += 1
            c1 = wait_complete(srv)
            assert c1["corrupt"] > c0["corrupt"], (what, c0, c1)
            assert c1["store_bytes"] > c0["store_bytes"], (what, "not read again", c0, c1)
            files = entry_files(os.path.join(state, "cache"))
            # Served from the cache again.
            read_epoch(srv, data, epoch, "frames")
            epoch += 1
            c2 = cache(srv)
            assert c2["store_bytes"] == c1["store_bytes"], (what, c1, c2)
            assert c2["corrupt"] == c1["corrupt"], (what, c1, c2)
        if plane == "auto":
            # (a stream's failure is counted when the server releases it,
            # after the client read its trailer)
            dp = read_when(lambda: get_json(srv, "/v1/jobs/t")["data_plane"],
                           lambda d: d["plan_streams"] > 0 and d["plan_failures"] > 0)
            assert dp["plan_streams"] > 0 and dp["plan_failures"] > 0, dp

        # samples/{i} over a damaged entry.
        c0 = cache(srv)
        flip(files[name(4)][0], data.member(4, 6).offset_data + 10, 64)
        for i in range(PER_SHARD):
            check_sample(srv, data, sample_index(data, 4, i))
        check_sample(srv, data, sample_index(data, 4, 6), "tar")
        assert cache(srv)["corrupt"] > c0["corrupt"]
        srv.stop()


def test_damaged_while_stopped(start, server_binary, tmp_path):
    require_planes(server_binary, "auto")

    data = Data(str(tmp_path / "data"))
    state = str(tmp_path / "state")
    with serve_nginx(data.root, tmp_path) as base:
        srv = start_server(start, state, base, "auto")
        read_epoch(srv, data, 0, "frames")
        c0 = wait_complete(srv)
        srv.stop()
        files = entry_files(os.path.join(state, "cache"))
        for _, apply in damages(data, files):
            apply()
        # A sums file whose header does not check out: removed at start.
        flip(files[name(4)][1], 20, 1)

        srv = start_server(start, state, base, "auto")
        c1 = cache(srv)
        assert c1["entries"] == SHARDS - 1, c1  # the other damage is found when read
        read_epoch(srv, data, 1, "frames")
        read_epoch(srv, data, 2, "tar")
        c2 = wait_complete(srv)
        assert c2["corrupt"] >= 4, c2
        assert c2["store_bytes"] > 0 and c2["store_bytes"] < 2 * c0["store_bytes"], (c0, c2)
        read_epoch(srv, data, 3, "frames")
        c3 = cache(srv)
        assert c3["store_bytes"] == c2["store_bytes"] and c3["corrupt"] == c2["corrupt"], (c2, c3)
        for i in range(len(data.order)):
            check_sample(srv, data, i)
        assert cache(srv)["corrupt"] == c2["corrupt"]
        srv.stop()
