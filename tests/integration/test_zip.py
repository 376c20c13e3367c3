"""Zip shards end to end: the real shardcastd over directories of .zip
shards written by Python's zipfile in each layout it writes (stored,
deflated, bzip2, lzma, to an unseekable stream so that every size is in a
data descriptor, zip64 entries, more than 65535 entries), next to a tar.
What a stream delivers is checked sample by sample against the zips as
Python's zipfile reads them (through the central directory), by the
WebDataset rule. Zips that cannot be streamed (an encrypted entry, a stored
entry whose data descriptor has no signature) fail their shard with a
message naming the problem, under on_error=skip and on_error=fail; with
staging (the default) every epoch is planned, each zip staged as the tar
of its samples. A
deflate bomb (4 GiB of zeros with its size declared, 1 GiB with its size
only in a descriptor) is a bad sample under max-field-bytes and does not
raise the server's memory.

The zips are made here; the unit test tests/unit/tar/test_zip.c covers the
byte-level variants (flags, fake sizes, truncation, seeks).
"""

import io
import os
import random
import shutil
import struct
import subprocess
import tarfile
import zipfile
import zlib
from collections import Counter

import pytest

import shardcast
from shardcast import ShardcastHTTPError, ShardcastStreamError

from shardcast_testlib import (field_dict, http_request, read_samples, wds_samples,
                               wds_split)

JOB = "z"


class Unseekable(io.RawIOBase):
    """A write-only stream zipfile cannot seek back in: it then writes
    every entry with general purpose bit 3 and a data descriptor."""

    def __init__(self, f):
        self.f = f

    def writable(self):
        return True

    def write(self, b):
        return self.f.write(b)


def sample_members(prefix, n, rng):
    """Members of n samples with 1-3 fields, plus things the rule skips."""
    out = []
    for i in range(n):
        key = "%s/%05d" % (prefix, i)
        if rng.random() < 0.1:
            out.append(("%s/dir%d/" % (prefix, i), None))
        if rng.random() < 0.1:
            out.append(("%s/README%d" % (prefix, i), b"no extension"))
        out.append((key + ".jpg", rng.randbytes(rng.randrange(1, 5000))))
        if rng.random() < 0.7:
            out.append((key + ".json", b'{"i": %d}' % i))
        if rng.random() < 0.3:
            out.append((key + ".Seg.PNG", bytes(rng.randrange(0, 20000))))
    return out


def write_zip(path, members, *, compression=zipfile.ZIP_STORED, unseekable=False,
              force_zip64=False):
    with open(path, "wb") as f:
        target = Unseekable(f) if unseekable else f
        with zipfile.ZipFile(target, "w", compression=compression) as z:
            for name, data in members:
                if data is None:
                    z.writestr(zipfile.ZipInfo(name), b"")
                    continue
                info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
                info.compress_type = compression
                with z.open(info, "w", force_zip64=force_zip64) as w:
                    w.write(data)


def zip_samples(path):
    """[(key, {ext: bytes})] of a zip by the WebDataset rule, read by
    Python's zipfile (central directory, not the stream)."""
    samples = []
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            name = info.filename
            if "/" not in name and len(name) >= 4 and name.startswith("__") \
                    and name.endswith("__"):
                continue
            kx = wds_split(name)
            if kx is None:
                continue
            key, ext = kx
            data = z.read(info)
            if samples and samples[-1][0] == key:
                assert ext not in samples[-1][1]
                samples[-1][1][ext] = data
            else:
                samples.append((key, {ext: data}))
    return samples


def write_tar(path, members):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name.rstrip("/"))
            if data is None:
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))


@pytest.fixture(scope="module")
def zip_dataset(workdir):
    """A directory of zip shards in every layout (and one tar) with the
    samples each must yield: {key: (shard file, content hash)}."""
    d = os.path.join(workdir, "zips")
    os.makedirs(d)
    rng = random.Random(17)
    layouts = [
        ("a-stored.zip", dict(compression=zipfile.ZIP_STORED)),
        ("b-deflated.zip", dict(compression=zipfile.ZIP_DEFLATED)),
        ("c-bzip2.zip", dict(compression=zipfile.ZIP_BZIP2)),
        ("d-lzma.zip", dict(compression=zipfile.ZIP_LZMA)),
        ("e-stream-stored.zip", dict(compression=zipfile.ZIP_STORED, unseekable=True)),
        ("f-stream-deflated.zip", dict(compression=zipfile.ZIP_DEFLATED, unseekable=True)),
        ("g-zip64.zip", dict(compression=zipfile.ZIP_DEFLATED, force_zip64=True)),
        ("h-zip64-stream.ZIP", dict(compression=zipfile.ZIP_STORED, unseekable=True,
                                    force_zip64=True)),
    ]
    expect = {}
    for i, (name, kw) in enumerate(layouts):
        members = sample_members("s%d" % i, 40, rng)
        members.append(("__meta__", b"metadata, skipped"))
        members.append(("s%d/caf\u00e9 \u00fc.txt" % i, b"a UTF-8 name"))
        path = os.path.join(d, name)
        write_zip(path, members, **kw)
        for key, fields in zip_samples(path):
            assert key not in expect
            expect[key] = (name, shardcast.sample_hash(fields))
    # A tar next to them, and files the listing must not take.
    tmembers = sample_members("t", 30, rng)
    write_tar(os.path.join(d, "j-plain.tar"), tmembers)
    for key, fields in wds_samples(os.path.join(d, "j-plain.tar")):
        expect[key] = ("j-plain.tar", shardcast.sample_hash(fields))
    with open(os.path.join(d, "notes.zipx"), "wb") as f:
        f.write(b"not a shard")
    return d, expect


def check_exactly(samples, expect):
    keys = Counter(s["__key__"] for s in samples)
    assert max(keys.values()) == 1, "duplicated samples"
    assert set(keys) == set(expect), (
        "missing %s, unexpected %s" % (sorted(set(expect) - set(keys))[:5],
                                       sorted(set(keys) - set(expect))[:5]))
    for s in samples:
        shard, h = expect[s["__key__"]]
        assert shardcast.sample_hash(field_dict(s)) == h, "content of %s" % s["__key__"]
        assert s["__shard__"].endswith("/" + shard)


def planned_only(srv):
    """Every stream of the job came from a plan (the zips staged as the
    tar of their samples), none from the feed."""
    import json
    st, _, body = http_request(srv, "/v1/jobs/" + JOB)
    assert st == 200
    dp = json.loads(body)["data_plane"]
    assert dp["feed_streams"] == 0 and dp["plan_streams"] > 0, dp


def test_zip_layouts_exactly_once(start_server, zip_dataset):
    d, expect = zip_dataset
    srv = start_server(d, job=JOB, seed=3, extra=["--on-error", "fail"])
    samples, trailer = read_samples(srv, JOB, 0, 0, 1)
    assert trailer["status"] == "ok"
    check_exactly(samples, expect)
    # The same epoch again: the same order (zip or tar, the order is a
    # function of the data and the seed).
    again, _ = read_samples(srv, JOB, 0, 0, 1)
    assert [s["__key__"] for s in again] == [s["__key__"] for s in samples]
    # Two consumers share it exactly once.
    halves = [read_samples(srv, JOB, 1, r, 2)[0] for r in range(2)]
    both = halves[0] + halves[1]
    assert len(both) == len(expect) - len(expect) % 2
    check_exactly(both, {k: expect[k] for k in {s["__key__"] for s in both}})
    planned_only(srv)
    assert srv.alive(), srv.log()


def test_zip_more_than_65535_entries(start_server, workdir):
    """70000 entries: zipfile writes a zip64 end of central directory,
    which the streaming reader never needs."""
    d = os.path.join(workdir, "zips-many")
    os.makedirs(d)
    path = os.path.join(d, "many.zip")
    many = [("m/%06d.f%d" % (i // 10, i % 10), b"%d" % i) for i in range(70000)]
    write_zip(path, many)
    with open(path, "rb") as f:
        assert b"PK\x06\x06" in f.read()  # zip64 end record
    expect = {k: ("many.zip", shardcast.sample_hash(f)) for k, f in zip_samples(path)}
    assert len(expect) == 7000
    srv = start_server(d, job=JOB, extra=["--on-error", "fail"])
    samples, trailer = read_samples(srv, JOB, 0, 0, 1)
    assert trailer["status"] == "ok"
    check_exactly(samples, expect)


def test_zip_resume_in_the_middle(start_server, zip_dataset, workdir):
    """start=P on a restarted server (indexes from its state_dir): a zip
    is indexed stream-only, re-read from its start and skipped forward."""
    d, expect = zip_dataset
    state = os.path.join(workdir, "zip-state")
    args = ["--on-error", "fail", "--state-dir", state, "--interleave", "3",
            "--shuffle-buffer", "50"]
    srv = start_server(d, job=JOB, seed=9, extra=args)
    whole, _ = read_samples(srv, JOB, 0, 0, 1)
    assert srv.stop() == 0
    srv2 = start_server(d, job=JOB, seed=9, extra=args)
    for p in (1, len(whole) // 3, len(whole) - 7):
        tail, trailer = read_samples(srv2, JOB, 0, 0, 1, start=p)
        assert trailer["status"] == "ok"
        assert [s["__key__"] for s in tail] == [s["__key__"] for s in whole[p:]]
        assert [shardcast.sample_hash(field_dict(s)) for s in tail] == \
            [shardcast.sample_hash(field_dict(s)) for s in whole[p:]]


# --- zips that cannot be streamed --------------------------------------------

def _good_zip(path, prefix):
    members = [("%s/%03d.txt" % (prefix, i), b"good %d" % i) for i in range(20)]
    write_zip(path, members, compression=zipfile.ZIP_DEFLATED)
    return {k for k, _ in zip_samples(path)}


def _encrypted_zip(path, tmp):
    """A zip whose second entry is encrypted (traditional PKWARE): made by
    Info-ZIP's `zip -e` when installed, else by setting the flag bit."""
    first = os.path.join(tmp, "enc-000.txt")
    second = os.path.join(tmp, "enc-001.txt")
    with open(first, "wb") as f:
        f.write(b"plain")
    with open(second, "wb") as f:
        f.write(b"secret")
    if shutil.which("zip"):
        subprocess.run(["zip", "-q", "-X", path, os.path.basename(first)], cwd=tmp,
                       check=True)
        subprocess.run(["zip", "-q", "-X", "-e", "-P", "pw", path,
                        os.path.basename(second)], cwd=tmp, check=True)
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("enc-000.txt", b"plain")
            z.writestr("enc-001.txt", b"secret")
        data = bytearray(open(path, "rb").read())
        at = data.find(b"PK\x03\x04", 1)
        data[at + 6] |= 1
        open(path, "wb").write(bytes(data))
    with zipfile.ZipFile(path) as z:
        assert z.getinfo("enc-001.txt").flag_bits & 1
    return {"enc-000"}


def _nosig_zip(path):
    """Stored entries whose sizes are only in data descriptors without the
    optional PK\\x07\\x08 signature (the zip format allows it)."""
    out = b""
    for i, data in enumerate([b"first" * 10, b"second" * 300, b"third"]):
        name = ("nosig-%03d.bin" % i).encode()
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 8, 0, 0, 0x21, 0, 0, 0,
                           len(name), 0) + name + data
        out += struct.pack("<III", zlib.crc32(data), len(data), len(data))
    out += b"PK\x05\x06" + b"\0" * 18
    with open(path, "wb") as f:
        f.write(out)


@pytest.fixture(scope="module")
def refused_dataset(workdir):
    d = os.path.join(workdir, "zips-refused")
    tmp = os.path.join(workdir, "zips-refused-src")
    os.makedirs(d)
    os.makedirs(tmp)
    good = _good_zip(os.path.join(d, "a-good.zip"), "a")
    good |= _good_zip(os.path.join(d, "d-good.zip"), "d")
    before = _encrypted_zip(os.path.join(d, "b-encrypted.zip"), tmp)
    _nosig_zip(os.path.join(d, "c-nosig.zip"))
    return d, good, before


def test_unstreamable_zips_skipped_with_reason(start_server, refused_dataset):
    d, good, before = refused_dataset
    srv = start_server(d, job=JOB, extra=["--on-error", "skip"])
    samples, trailer = read_samples(srv, JOB, 0, 0, 1)
    assert trailer["status"] == "ok"
    got = {s["__key__"] for s in samples}
    # Every sample of the good zips; of the refused ones only what comes
    # before the entry that cannot be read (the encrypted zip's first
    # sample; nothing of the other, whose first entry has no signature).
    assert got == good | before
    log = srv.wait_log("event=shard_skipped", "zip entry enc-001.txt:", "zip entry nosig-000.bin:")
    assert "event=shard_skipped" in log
    assert ("zip entry enc-001.txt: encrypted: encrypted zip entries cannot be "
            "read (no passphrase)") in log, log
    assert "zip entry nosig-000.bin:" in log and \
        "stored entry whose size is only in a data descriptor" in log, log
    planned_only(srv)
    assert srv.alive(), srv.log()


def test_unstreamable_zip_fails_the_epoch(start_server, refused_dataset, workdir):
    _, _, _ = refused_dataset
    d = os.path.join(workdir, "zips-refused-fail")
    os.makedirs(d)
    _encrypted_zip(os.path.join(d, "enc.zip"), os.path.join(workdir, "zips-refused-src"))
    srv = start_server(d, job=JOB, extra=["--on-error", "fail"])
    with pytest.raises((ShardcastStreamError, ShardcastHTTPError)) as ei:
        read_samples(srv, JOB, 0, 0, 1)
    assert "encrypted zip entries cannot be read" in str(ei.value.reason), ei.value.reason
    assert srv.alive(), srv.log()


# --- bounds --------------------------------------------------------------------

def _zeros_deflate(mib, crc=True):
    """Raw deflate of mib MiB of zeros, made of one full-flushed chunk
    repeated (about 1 KiB per MiB), and the CRC of the data (0 when not
    asked: an entry skipped by its size is never checked)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    check = 0
    zero = b"\0" * (1 << 20)
    for _ in range(mib if crc else 0):
        check = zlib.crc32(zero, check)
    return chunk * mib + tail, check


def _bomb_zip(path):
    def lh(name, flag, crc, cs, us, extra=b""):
        n = name.encode()
        return struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, flag, 8, 0, 0x21, crc, cs, us,
                           len(n), len(extra)) + n + extra

    def plain(name, data):
        return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, zlib.crc32(data),
                           len(data), len(data), len(name), 0) + name.encode() + data

    big, big_crc = _zeros_deflate(4096, crc=False)  # 4 GiB, size declared (zip64)
    mid, mid_crc = _zeros_deflate(1024)  # 1 GiB, size in a descriptor
    out = plain("k0.txt", b"before")
    out += lh("k1.bin", 0, big_crc, 0xFFFFFFFF, 0xFFFFFFFF,
              struct.pack("<HHQQ", 1, 16, 4096 << 20, len(big))) + big
    out += plain("k2.txt", b"between")
    out += lh("k3.bin", 8, 0, 0, 0, struct.pack("<HHQQ", 1, 16, 0, 0)) + mid
    out += b"PK\x07\x08" + struct.pack("<IQQ", mid_crc, len(mid), 1024 << 20)
    out += plain("k4.txt", b"after")
    out += b"PK\x05\x06" + b"\0" * 18
    with open(path, "wb") as f:
        f.write(out)
    return len(out)


def test_zip_bomb_is_a_bad_sample(start_server, workdir):
    d = os.path.join(workdir, "zips-bomb")
    os.makedirs(d)
    size = _bomb_zip(os.path.join(d, "bomb.zip"))
    assert size < 8 << 20
    srv = start_server(d, job=JOB, extra=["--on-error", "skip",
                                          "--max-field-bytes", "1Mi",
                                          "--max-sample-bytes", "2Mi"])
    samples, trailer = read_samples(srv, JOB, 0, 0, 1)
    assert trailer["status"] == "ok"
    assert sorted(s["__key__"] for s in samples) == ["k0", "k2", "k4"]
    hwm_mib = srv.proc_status("VmHWM") / 1024
    assert hwm_mib < 256, "server peak RSS %.0f MiB after 5 GiB of bombs" % hwm_mib
    assert srv.alive(), srv.log()
