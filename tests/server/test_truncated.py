"""Truncated archives are truncated (docs/architecture.md "Shard formats").

A tar's bytes end in its end-of-archive blocks. A shard whose bytes end
without them, at a size the file system says is whole, was cut (an
interrupted upload, a partial copy) or written without them: the sample
being read there may have lost members, so it is not delivered; the
samples before it are, and the shard is skipped, logged and told to the
client as a shard cut inside a member is.

test_a_shard_cut_at_a_block_boundary_is_truncated: one shard of four
(50 samples of .bin, .cls and .json each) cut in five ways: on the block
boundary after a sample's .bin (its .cls and .json gone), just after the
last member's data (no end blocks at all), exactly at a sample's first
header, inside a member's data (as before), and a gzip of a tar without
end blocks. On both data planes, frames and tar, epochs 0 and 1: the
samples before the cut sample arrive whole and no other, never a sample
without one of its fields; the END summary and the status count the shard
skipped; the log names the reason. A tar that ends in one zero block is
whole.

test_under_on_error_fail_a_truncated_shard_fails_the_stream: the same cut
fails the stream with the reason.

test_a_zip_cut_short_is_told: a zip cut in the middle is skipped and told.

test_an_index_file_of_the_previous_format_is_read_again: a state_dir index
file of version 1 (which held such a shard's last group as whole) is not
used: the shard is read again and the epoch loses the cut sample.
"""

import gzip
import io
import os
import random
import struct
import tarfile
import zipfile

import pytest

from plan_testlib import read_world, read_world_failing, require_planes
from server_testlib import Nginx, get_json, shard_url

SEED = int(os.environ.get("SHARDCAST_PLAN_SEED", "7171"))
SHARDS = 4
PER_SHARD = 50
EXTS = ("bin", "cls", "json")


def write_shard(path, s, rng):
    """A USTAR shard of PER_SHARD samples: the bytes, and per sample its
    key, fields and the offsets of its first header and of each member's
    padded end."""
    buf = io.BytesIO()
    samples = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(PER_SHARD):
            key = "t%d/%06d" % (s, i)
            fields = {"bin": rng.randbytes(rng.randrange(100, 3000)),
                      "cls": b"%d" % rng.randrange(10),
                      "json": b'{"i": %d}' % i}
            first = buf.tell()
            ends = {}
            for ext in EXTS:
                ti = tarfile.TarInfo("%s.%s" % (key, ext))
                ti.size = len(fields[ext])
                ti.mtime = 0
                tf.addfile(ti, io.BytesIO(fields[ext]))
                ends[ext] = buf.tell()
            samples.append({"key": key, "fields": fields, "first": first,
                            "ends": ends})
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return data, samples


def make_ds(path, seed):
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    shards = []
    for s in range(SHARDS):
        p = os.path.join(path, "t-%06d.tar" % s)
        data, samples = write_shard(p, s, rng)
        shards.append({"path": p, "data": data, "samples": samples})
    return shards


def serve(start, path, plane, *extra):
    return start("--job", "t", "--source", path, "--data-plane", plane,
                 "--prefetch", "false", "--stream-rate-limit", "0",
                 "--rate-limit", "0", "--max-new-epochs-per-minute", "0",
                 *extra)


def cut_cases(victim):
    """(name, bytes of the cut shard, index of its first sample lost)."""
    smp = victim["samples"]
    data = victim["data"]
    k = PER_SHARD // 2
    last_end = smp[-1]["ends"]["json"]
    return [
        # the block boundary after sample k's .bin: its .cls and .json gone
        ("after a .bin", data[:smp[k]["ends"]["bin"]], k),
        # the members all there, the end blocks not
        ("no end blocks", data[:last_end], PER_SHARD - 1),
        # exactly at sample k's first header: sample k-1 may have had more
        ("at a header", data[:smp[k]["first"]], k - 1),
        # inside sample k's .json data (the case that was told before)
        ("inside a member", data[:smp[k]["ends"]["cls"] + 512 + 3], k),
    ]


def expected(shards, victim_i, lost_from):
    want = {}
    for i, sh in enumerate(shards):
        for j, smp in enumerate(sh["samples"]):
            if i == victim_i and j >= lost_from:
                continue
            want[smp["key"]] = smp["fields"]
    return want


def check_epoch(srv, epoch, fmt, want, victim_url, case):
    got = read_world(srv, epoch, 1, fmt=fmt, what=case)
    seen = {}
    for r, p in enumerate(got):
        assert p.outcome == "end", (case, r, p.summary())
        for smp in p.samples:
            assert smp["key"] not in seen, (case, "twice", smp["key"])
            seen[smp["key"]] = smp["fields"]
        if fmt == "frames":
            sk = (p.trailer or {}).get("skipped") or {}
            assert sk.get("shards") == 1, (case, r, p.trailer)
            assert any(u.endswith(os.path.basename(victim_url))
                       for u in sk.get("shard_urls", [])), (case, p.trailer)
    missing = sorted(set(want) - set(seen))
    extra = sorted(set(seen) - set(want))
    assert not missing and not extra, (case, epoch, fmt, missing[:5], extra[:5])
    for key, fields in seen.items():
        assert fields == want[key], (case, epoch, fmt, key, sorted(fields))


@pytest.mark.parametrize("plane", ["auto", "stream"])
def test_a_shard_cut_at_a_block_boundary_is_truncated(start, server_binary,
                                                       tmp_path, plane):
    require_planes(server_binary, plane)
    base = make_ds(str(tmp_path / "orig"), SEED)
    victim_i = 1
    cases = cut_cases(base[victim_i])
    # a gzip of the tar without end blocks: the compressed path
    cases.append(("gzip, no end blocks",
                  base[victim_i]["data"][:base[victim_i]["samples"][-1]["ends"]["json"]],
                  PER_SHARD - 1))
    for n, (case, cut, lost_from) in enumerate(cases):
        d = tmp_path / ("cut%d" % n)
        d.mkdir()
        for i, sh in enumerate(base):
            name = os.path.basename(sh["path"])
            data = sh["data"]
            if i == victim_i:
                data = cut
                if case.startswith("gzip"):
                    name = name[:-4] + ".tar.gz"
                    data = gzip.compress(cut)
                victim_url = name
            with open(d / name, "wb") as f:
                f.write(data)
        want = expected(base, victim_i, lost_from)
        srv = serve(start, str(d), plane)
        for epoch in (0, 1):
            for fmt in ("frames", "tar"):
                check_epoch(srv, epoch if fmt == "frames" else epoch + 2, fmt,
                            want, victim_url, "%s %s" % (plane, case))
        st = get_json(srv, "/v1/jobs/t")
        assert st["skipped"]["shards"] >= 1, (case, st["skipped"])
        # log lines come from the server's logging thread: wait for them
        want = ("truncated tar archive" if case == "inside a member"
                else "ends without its end-of-archive blocks")
        log = srv.wait_log(want)
        assert want in log, (case, log[-3000:])
        assert srv.stop() == 0


@pytest.mark.parametrize("plane", ["auto", "stream"])
def test_a_remote_shard_cut_at_a_block_boundary_is_truncated(
        start, server_binary, tmp_path, plane):
    """The same over HTTP (nginx, no cache: staged in memory on the plan),
    the shard's size as the store gives it."""
    require_planes(server_binary, plane)
    d = str(tmp_path / "remote")
    base = make_ds(d, SEED + 5)
    victim = base[2]
    case, cut, lost_from = cut_cases(victim)[0]
    with open(victim["path"], "wb") as f:
        f.write(cut)
    ng = Nginx(d, str(tmp_path))
    try:
        srv = serve(start, shard_url(ng, d), plane)
        want = expected(base, 2, lost_from)
        for epoch in (0, 1):
            check_epoch(srv, epoch, "frames", want, victim["path"],
                        "remote %s %s" % (plane, case))
        want = "ends without its end-of-archive blocks"
        assert want in srv.wait_log(want)
        assert srv.stop() == 0
    finally:
        ng.stop()


def test_a_tar_that_ends_in_one_zero_block_is_whole(start, tmp_path):
    base = make_ds(str(tmp_path / "one"), SEED + 1)
    sh = base[2]
    end = sh["samples"][-1]["ends"]["json"]
    with open(sh["path"], "wb") as f:
        f.write(sh["data"][:end] + b"\0" * 512)
    want = expected(base, 2, PER_SHARD)
    srv = serve(start, str(tmp_path / "one"), "auto")
    got = read_world(srv, 0, 1)
    seen = {s["key"]: s["fields"] for p in got for s in p.samples}
    assert seen == want
    assert all(not (p.trailer or {}).get("skipped") for p in got), got[0].trailer
    assert get_json(srv, "/v1/jobs/t")["skipped"]["shards"] == 0


@pytest.mark.parametrize("plane", ["auto", "stream"])
def test_under_on_error_fail_a_truncated_shard_fails_the_stream(
        start, server_binary, tmp_path, plane):
    require_planes(server_binary, plane)
    d = str(tmp_path / "fail")
    base = make_ds(d, SEED + 2)
    sh = base[0]
    with open(sh["path"], "wb") as f:
        f.write(sh["data"][:sh["samples"][-1]["ends"]["json"]])
    srv = serve(start, d, plane, "--on-error", "fail")
    out = read_world_failing(srv, 0, 1)
    st, complete, p = out[0]
    assert st == 200, out
    assert p.outcome == "error", p.summary()
    assert "ends without its end-of-archive blocks" in p.trailer["reason"], p.trailer
    assert not p.retryable_error(), p.summary()
    got = {s["key"] for s in p.samples}
    assert not any(k.startswith("t0/") and int(k[3:]) >= PER_SHARD - 1 for k in got)


def test_a_zip_cut_short_is_told(start, tmp_path):
    d = str(tmp_path / "zip")
    base = make_ds(d, SEED + 3)
    sh = base[3]
    zb = io.BytesIO()
    with zipfile.ZipFile(zb, "w", zipfile.ZIP_STORED) as z:
        for smp in sh["samples"]:
            for ext in EXTS:
                z.writestr("%s.%s" % (smp["key"], ext), smp["fields"][ext])
    zdata = zb.getvalue()
    os.unlink(sh["path"])
    name = os.path.join(d, "t-000003.zip")
    with open(name, "wb") as f:
        f.write(zdata[:len(zdata) // 2])
    srv = serve(start, d, "auto")
    got = read_world(srv, 0, 1)
    for p in got:
        sk = (p.trailer or {}).get("skipped") or {}
        assert sk.get("shards") == 1, p.trailer
    seen = {s["key"]: s["fields"] for p in got for s in p.samples}
    for smp in sh["samples"]:
        if smp["key"] in seen:
            assert seen[smp["key"]] == smp["fields"], smp["key"]
    assert len([k for k in seen if k.startswith("t3/")]) < PER_SHARD


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_an_index_file_of_the_previous_format_is_read_again(start, tmp_path):
    """A version 1 index file that holds the cut shard's last group as
    good (what a server before this format wrote) is not adopted."""
    d = str(tmp_path / "ds")
    base = make_ds(d, SEED + 4)
    state = str(tmp_path / "state")
    srv = serve(start, d, "auto", "--state-dir", state)
    got = read_world(srv, 0, 1)
    assert len(got[0].samples) == SHARDS * PER_SHARD
    assert srv.stop() == 0
    files = []
    for root, _, names in os.walk(state):
        files += [os.path.join(root, n) for n in names if n.endswith(".scidx")]
    assert len(files) == SHARDS, files
    # Cut shard 0's end blocks off (its mtime kept), and forge every index
    # file back to version 1; shard 0's with the size it has now: what a
    # server of version 1 wrote for it, taking its last group for whole.
    sh = base[0]
    cut = sh["data"][:sh["samples"][-1]["ends"]["json"]]
    st0 = os.stat(sh["path"])
    with open(sh["path"], "wb") as f:
        f.write(cut)
    os.utime(sh["path"], ns=(st0.st_atime_ns, st0.st_mtime_ns))
    forged = 0
    for p in files:
        b = bytearray(open(p, "rb").read())
        assert b[:8] == b"SCIDX\0\1\0" and struct.unpack_from("<I", b, 8)[0] == 2
        struct.pack_into("<I", b, 8, 1)
        if sh["samples"][0]["key"].encode() in b:
            struct.pack_into("<Q", b, 16, len(cut))
            forged += 1
        struct.pack_into("<Q", b, len(b) - 8, fnv1a64(bytes(b[:-8])))
        with open(p, "wb") as f:
            f.write(b)
    assert forged == 1
    srv = serve(start, d, "auto", "--state-dir", state)
    got = read_world(srv, 1, 1)
    keys = {s["key"] for s in got[0].samples}
    assert len(keys) == SHARDS * PER_SHARD - 1, len(keys)
    assert sh["samples"][-1]["key"] not in keys
    assert (got[0].trailer.get("skipped") or {}).get("shards") == 1, got[0].trailer
    assert "index version 1 unknown" in srv.wait_log("index version 1 unknown")
