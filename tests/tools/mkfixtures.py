#!/usr/bin/python3
"""mkfixtures.py -- the WebDataset format corpus of shardcast's tests.

    mkfixtures.py wds --out DIR

writes a small corpus of shards that exercises every tar flavour and every
WebDataset grouping rule shardcast's reader must follow, and DIR/manifest.json
saying what each shard must yield. The C unit tests (through ctest) and the
Python suites generate it at test time; nothing of it is committed.

It plays the part of the upstream webdataset test shards (../shared/testdata/
wds, which stay an optional conformance layer): the same shapes, written here.

  gnu-gzip.tgz     gzip-compressed GNU tar: 90 samples, keys "10".."99", each
                   {cls: one ASCII digit, png: a 28x28 8-bit grayscale PNG}.
  gnu-dirs.tar     GNU tar: a directory member "compressed/" and keys with
                   directories and a multi-dot extension
                   ("compressed/0001.txt.gz", zcat -> "hello\\n"); nested
                   directories ("a/b/c.png", "a/b/c.seg.json"), an upper-case
                   extension (lowercased), a dot in a directory name, a name
                   longer than 100 bytes (a GNU ././@LongLink 'L' header),
                   top-level "__*__" members and names without a dot (skipped),
                   a "__x__" below a directory (kept).
  pax.tar          POSIX pax: 1000 samples, each one member "<32 hex>.txt.gz"
                   (gzipped text) preceded by its own pax extended header
                   (typeflag 'x', an mtime record), keys in no sorted order.
  pax-names.tar.gz gzip-compressed pax: names only pax can hold (a 'path'
                   record for a long name and for UTF-8 names), spaces in
                   keys, multi-dot extensions, directories, "__key__".

Manifest (manifest.json):
  {"format": "mkfixtures-wds/1", "total_samples": N,
   "shards": [{"file": F, "tar": "gnu"|"pax", "filter": "gzip"|"none",
               "samples": n, "members": m,
               "skipped": [{"member": name, "why": reason}, ...]}, ...],
   "samples": [{"key": K, "shard": F, "index_in_shard": i,
                "fields": [{"name": ext, "member": name, "size": n,
                            "sha256": hex}, ...],     (in member order)
                "hash": content hash (shardcast.sample_hash)}, ...]}
Samples are listed in shard order, then in their order inside the shard.
Field names are the lowercased extensions.

Every field decodes with the Python client's default decoders (cls, txt,
json, valid PNGs, gzip of those; "dat" and "bin" stay bytes), so the decoder
tests can read the whole corpus.

Determinism: the bytes are a pure function of this file (and the zlib
library's output for a given input and level): pseudo-random choices come from
SHAKE-256 over fixed labels, tar members carry fixed mtimes, uid/gid 0 and
empty user/group names, gzip headers mtime 0 and no file name.

Standard library only; run with /usr/bin/python3 (Python >= 3.8).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import sys
import tarfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mkwds import sample_hash  # noqa: E402  (the one content hash definition)

FORMAT = "mkfixtures-wds/1"
MANIFEST = "manifest.json"
MTIME = 1700000000  # every member's mtime (2023-11-14)


def _bytes(label, n):
    """n deterministic bytes for a label."""
    return hashlib.shake_256(("mkfixtures/" + label).encode()).digest(n)


def _u32(label):
    return int.from_bytes(_bytes(label, 4), "little")


def _gzip(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def png_gray(width, height, pixels):
    """A minimal valid PNG: 8-bit grayscale, one IDAT, no filtering."""
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    rows = b"".join(b"\0" + pixels[y * width:(y + 1) * width] for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


WORDS = ("shard sample epoch buffer shuffle order seed stream worker tar key "
         "field index seek feed window cursor replica object store fetch").split()


def text_snippet(label):
    """Plain text of 20 to ~1500 bytes."""
    n = 3 + _u32(label + "/len") % 200
    raw = _bytes(label + "/words", n)
    return (" ".join(WORDS[b % len(WORDS)] for b in raw) + "\n").encode()


class Shard:
    """Members of one shard and the samples they must form."""

    def __init__(self, file, tar, filt):
        self.file, self.tar, self.filter = file, tar, filt
        self.members = []   # (name, bytes or None for a directory, pax headers)
        self.samples = []   # (key, [(field, member name, data)])
        self.skipped = []   # {"member", "why"}

    def dir(self, name):
        self.members.append((name, None, None))
        self.skipped.append({"member": name, "why": "directory"})

    def skip(self, name, data, why):
        self.members.append((name, data, None))
        self.skipped.append({"member": name, "why": why})

    def sample(self, key, fields, pax=None):
        """fields: [(member extension as written, data)]; the field name is
        the extension lowercased. pax: extended header records of every
        member of the sample."""
        entry = []
        for ext, data in fields:
            name = "%s.%s" % (key, ext)
            self.members.append((name, data, pax))
            entry.append((ext.lower(), name, data))
        self.samples.append((key, entry))

    def write(self, path):
        fmt = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}[self.tar]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt, encoding="utf-8") as tf:
            for name, data, pax in self.members:
                ti = tarfile.TarInfo(name)
                ti.mtime = MTIME
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                if data is None:
                    ti.type = tarfile.DIRTYPE
                    ti.mode = 0o755
                    tf.addfile(ti)
                    continue
                ti.type = tarfile.REGTYPE
                ti.mode = 0o644
                ti.size = len(data)
                if pax:
                    ti.pax_headers = dict(pax)
                tf.addfile(ti, io.BytesIO(data))
        raw = buf.getvalue()
        with open(path, "wb") as f:
            f.write(_gzip(raw) if self.filter == "gzip" else raw)


def gnu_gzip():
    sh = Shard("gnu-gzip.tgz", "gnu", "gzip")
    for k in range(10, 100):
        cls = k % 10
        pixels = bytes((b * (cls + 1)) & 0xFF for b in _bytes("png/%d" % k, 28 * 28))
        sh.sample(str(k), [("cls", str(cls).encode()), ("png", png_gray(28, 28, pixels))])
    return sh


LONG_DIR = "long/" + "/".join("directory-%02d-%s" % (i, "x" * 20) for i in range(6))


def gnu_dirs():
    sh = Shard("gnu-dirs.tar", "gnu", "none")
    sh.dir("compressed/")
    for i, text in enumerate([b"hello\n", b"shardcast\n", b"webdataset\n"], 1):
        sh.sample("compressed/%04d" % i, [("txt.gz", _gzip(text))])
    sh.skip("__key__", b"metadata", "top-level __*__ name")
    sh.skip("README", b"no dot in the name", "no dot")
    sh.dir("a/")
    sh.dir("a/b/")
    sh.sample("a/b/c", [("png", png_gray(4, 4, _bytes("abc/png", 16))),
                        ("seg.json", b'{"segments": [1, 2, 3]}'),
                        ("TXT", b"upper-case extension")])
    sh.skip("__index__.json__", b"{}", "top-level __*__ name")
    sh.sample("x.y/z", [("dat", _bytes("xyz/dat", 64)), ("cls", b"3")])
    sh.skip("a/b/noext", b"no dot in the last component", "no dot")
    sh.sample("d/__x__", [("cls", b"5")])
    sh.sample(LONG_DIR + "/k9", [("json", b'{"long": true}'), ("x.seg.json", b"[]")])
    sh.sample("k2", [("cls", b"2"), ("txt", b"")])  # an empty field
    return sh


def pax():
    sh = Shard("pax.tar", "pax", "none")
    for i in range(1000):
        key = _bytes("pax/key/%d" % i, 16).hex()
        mtime = "%d.%07d" % (MTIME + i, _u32("pax/mtime/%d" % i) % 10_000_000)
        sh.sample(key, [("txt.gz", _gzip(text_snippet("pax/%d" % i)))],
                  pax={"mtime": mtime})
    return sh


def pax_names():
    sh = Shard("pax-names.tar.gz", "pax", "gzip")
    sh.dir("données/")
    sh.sample("données/été", [("bin", _bytes("ete/bin", 100)), ("cls", b"1")])
    sh.sample("日本語/キー", [("txt", "テキスト\n".encode())])
    sh.skip("__key__", b"metadata", "top-level __*__ name")
    sh.sample("with space/k 1", [("cls", b"0"),
                                 ("seg.png", png_gray(2, 3, _bytes("space/png", 6)))])
    sh.sample(LONG_DIR + "/" + "n" * 120, [("JSON", b'{"upper": true}'),
                                           ("meta.json.gz", _gzip(b'{"a": 1}'))])
    sh.sample("plain", [("cls", b"9")])
    return sh


def generate(out):
    """Write the corpus into out (replaced atomically); returns the manifest."""
    part = "%s.part-%d" % (out.rstrip("/"), os.getpid())
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    manifest = {"format": FORMAT, "shards": [], "samples": []}
    for sh in (gnu_gzip(), gnu_dirs(), pax(), pax_names()):
        sh.write(os.path.join(part, sh.file))
        manifest["shards"].append({
            "file": sh.file, "tar": sh.tar, "filter": sh.filter,
            "samples": len(sh.samples), "members": len(sh.members),
            "skipped": sh.skipped})
        for i, (key, fields) in enumerate(sh.samples):
            manifest["samples"].append({
                "key": key, "shard": sh.file, "index_in_shard": i,
                "fields": [{"name": n, "member": m, "size": len(d),
                            "sha256": hashlib.sha256(d).hexdigest()}
                           for n, m, d in fields],
                "hash": sample_hash({n: d for n, _, d in fields})})
    manifest["total_samples"] = len(manifest["samples"])
    with open(os.path.join(part, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.replace(part, out)
    return manifest


def main(argv=None):
    ap = argparse.ArgumentParser(description="Generate shardcast's test fixtures.")
    sub = ap.add_subparsers(dest="what", required=True)
    w = sub.add_parser("wds", help="the WebDataset format corpus (+ manifest.json)")
    w.add_argument("--out", required=True, help="output directory (replaced)")
    args = ap.parse_args(argv)
    m = generate(args.out)
    print("mkfixtures: wrote %d shards, %d samples to %s" %
          (len(m["shards"]), m["total_samples"], args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
