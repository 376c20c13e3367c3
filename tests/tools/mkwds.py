#!/usr/bin/python3
"""mkwds.py -- a deterministic WebDataset shard generator for shardcast's tests.

Writes PREFIX-000000.tar ... PREFIX-<N-1>.tar (or .tar.gz / .tar.zst) and a
manifest.json describing every sample, so tests can check that a shardcast
epoch delivers each sample exactly once and byte for byte.

Determinism: the output is a pure function of the arguments (and, for zst,
of the installed `zstd` version). All pseudo-random choices (payload bytes,
size jitter, class, payload kind) come from SHAKE-256 over a fixed label,
the seed and the sample number, so they do not depend on Python's `random`
module or on the Python version. Tar members carry mtime 0, uid/gid 0, empty
user/group names and mode 0644; gzip headers carry mtime 0 and no file name.

Samples: global sample number g = shard * M + i, key "sample%06d" % g (wider
when needed), three fields written in name order:
  cls   ASCII decimal class 0..9, no newline
  jpg   a JPEG-like payload (SOI/APP0 marker ... EOI marker), or
  bin   raw bytes -- which of the two is chosen per sample
  json  {"cls": c, "index": g, "key": key, "shard": shard number}
The jpg/bin payload is --size bytes, jittered deterministically to within
[size/2, size*3/2].

Content hash (identical to shardcast.sample_hash in clients/python): sha256
over the sample's fields sorted by name, each fed as
    name (UTF-8) + b"\\0" + len(data) as 8-byte little-endian + data.

Manifest (manifest.json):
  {"format": "mkwds/1", "seed": S, "prefix": P, "compress": C, "size": B,
   "samples_per_shard": M, "total_samples": N*M,
   "shards": [{"file": "P-000000.tar", "samples": M, "bytes": n}, ...],
   "samples": [{"key": ..., "shard": file name, "shard_index": s,
                "index_in_shard": i, "hash": hex sha256 (content hash),
                "fields": {"cls": {"size": n, "sha256": hex}, ...}}, ...]}

Standard library only; run with /usr/bin/python3 (any Python >= 3.8).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

MANIFEST = "manifest.json"
FORMAT = "mkwds/1"

# Upper bounds that keep a typo from filling the disk.
MAX_SHARDS = 1_000_000
MAX_SAMPLES_PER_SHARD = 10_000_000
MAX_SIZE = 1 << 30


def sample_hash(sample):
    """Content hash of a sample: sha256 over its fields sorted by name.

    `sample` maps field names to bytes; names of the form "__x__" are
    metadata and are left out. Each field is fed as name (UTF-8) + b"\\0" +
    8-byte little-endian length + data. Returns the hex digest.
    """
    h = hashlib.sha256()
    for name in sorted(k for k in sample if not (k.startswith("__") and k.endswith("__"))):
        data = sample[name]
        h.update(name.encode("utf-8"))
        h.update(b"\0")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _stream(seed, label, g, n):
    """n deterministic bytes for (seed, label, sample number g)."""
    return hashlib.shake_256(("mkwds/%d/%s/%d" % (seed, label, g)).encode()).digest(n)


def _u64(seed, label, g):
    return int.from_bytes(_stream(seed, label, g, 8), "little")


def make_sample(seed, g, shard_index, size, key_width=6):
    """The fields of sample number g as an ordered {name: bytes} dict."""
    key = "sample%0*d" % (key_width, g)
    lo = max(1, size // 2)
    hi = max(lo, size + size // 2)
    n = lo + _u64(seed, "size", g) % (hi - lo + 1)
    cls = _u64(seed, "cls", g) % 10
    body = _stream(seed, "payload", g, n)
    if _u64(seed, "kind", g) % 2 == 0:
        kind = "jpg"
        # SOI + APP0 "JFIF" at the front and EOI at the end, like a JPEG file;
        # the bytes between are random. Keep the total length at n.
        head = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"
        if n >= len(head) + 2:
            body = head + body[len(head):n - 2] + b"\xff\xd9"
    else:
        kind = "bin"
    meta = json.dumps({"cls": cls, "index": g, "key": key, "shard": shard_index},
                      sort_keys=True).encode()
    fields = {"cls": str(cls).encode(), kind: body, "json": meta}
    return key, dict(sorted(fields.items()))


def _tarinfo(name, size):
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mode = 0o644
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


def _write_tar(fileobj, samples):
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for key, fields in samples:
            for ext, data in fields.items():
                tf.addfile(_tarinfo("%s.%s" % (key, ext), len(data)), io.BytesIO(data))


def write_shard(path, samples, compress):
    """Write one shard atomically (temp file + rename)."""
    tmp = path + ".part"
    if compress == "none":
        with open(tmp, "wb") as f:
            _write_tar(f, samples)
    elif compress == "gz":
        with open(tmp, "wb") as f:
            # No file name and mtime 0 in the gzip header: reproducible bytes.
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
                _write_tar(gz, samples)
    elif compress == "zst":
        raw = tmp + ".tar"
        with open(raw, "wb") as f:
            _write_tar(f, samples)
        try:
            subprocess.run(["zstd", "-q", "-f", "--no-progress", raw, "-o", tmp],
                           check=True)
        finally:
            os.unlink(raw)
    else:
        raise ValueError("unknown compression %r" % compress)
    os.replace(tmp, path)


def generate(out, shards, per_shard, size, seed, compress, prefix):
    """Generate the dataset; returns the manifest dict (also written to out)."""
    os.makedirs(out, exist_ok=True)
    suffix = {"none": ".tar", "gz": ".tar.gz", "zst": ".tar.zst"}[compress]
    key_width = max(6, len(str(shards * per_shard - 1)))
    manifest = {
        "format": FORMAT, "seed": seed, "prefix": prefix, "compress": compress,
        "size": size, "samples_per_shard": per_shard,
        "total_samples": shards * per_shard, "shards": [], "samples": [],
    }
    for s in range(shards):
        fname = "%s-%06d%s" % (prefix, s, suffix)
        samples = []
        for i in range(per_shard):
            g = s * per_shard + i
            key, fields = make_sample(seed, g, s, size, key_width)
            samples.append((key, fields))
            manifest["samples"].append({
                "key": key, "shard": fname, "shard_index": s, "index_in_shard": i,
                "hash": sample_hash(fields),
                "fields": {k: {"size": len(v), "sha256": hashlib.sha256(v).hexdigest()}
                           for k, v in fields.items()},
            })
        path = os.path.join(out, fname)
        write_shard(path, samples, compress)
        manifest["shards"].append({"file": fname, "samples": per_shard,
                                   "bytes": os.path.getsize(path)})
    tmp = os.path.join(out, MANIFEST + ".part")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(out, MANIFEST))
    return manifest


def _bounded(lo, hi):
    def parse(text):
        v = int(text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError("must be in [%d, %d]" % (lo, hi))
        return v
    return parse


def main(argv=None):
    ap = argparse.ArgumentParser(description="Generate a deterministic WebDataset "
                                 "(tar shards + manifest.json).")
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--shards", type=_bounded(1, MAX_SHARDS), default=4)
    ap.add_argument("--samples-per-shard", type=_bounded(1, MAX_SAMPLES_PER_SHARD),
                    default=100)
    ap.add_argument("--size", type=_bounded(1, MAX_SIZE), default=10000,
                    help="payload bytes per sample (jittered to [size/2, 3*size/2])")
    ap.add_argument("--seed", type=_bounded(0, (1 << 64) - 1), default=0)
    ap.add_argument("--compress", choices=("none", "gz", "zst"), default="none")
    ap.add_argument("--prefix", default="train",
                    help="shard file name prefix (no '/')")
    args = ap.parse_args(argv)
    if not args.prefix or "/" in args.prefix:
        ap.error("--prefix must be a non-empty name without '/'")
    if args.compress == "zst" and shutil.which("zstd") is None:
        ap.error("--compress zst needs the `zstd` command")
    m = generate(args.out, args.shards, args.samples_per_shard, args.size,
                 args.seed, args.compress, args.prefix)
    print("mkwds: wrote %d shards, %d samples to %s" %
          (len(m["shards"]), m["total_samples"], args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
