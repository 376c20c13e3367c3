#!/usr/bin/python3
"""One Python consumer run of the benchmark: a torch DataLoader over one
epoch, timed and verified, in a process of its own (so its memory and CPU
are its own). Started by bench.py; one JSON object on stdout.

Every Python contender uses exactly the same DataLoader configuration:
num_workers=W, batch_size=256, a collate function that keeps the samples
as they are (a list of dicts of bytes), pin_memory=False, persistent
workers off, default prefetch. What differs is the dataset:

  baseline-http / baseline-s3: what a PyTorch user writes by hand. Each
      worker takes every W-th shard of the epoch's shard order (a seeded
      shuffle of the shard list), streams it with urllib (HTTP) or boto3
      get_object (S3) into tarfile's stream mode, groups members into
      samples by the WebDataset key rule, and shuffles them through its own
      buffer of `shuffle_buffer` samples (fill, then each new sample
      replaces a random buffered one which is emitted; drain shuffled).
  shardcast: shardcast.ShardcastDataset against the server, one consumer
      per worker (consumer = worker id, world = W), in the requested wire
      format ("tar" or "frames"), with the frames decoder asked for
      ("decoder": "python" or "c"; default: the C one when built).
  shardcast "mode": "batched" / "tensor": the dataset collates batches of
      256 itself (batch_size=256, and tensors=True for "tensor": each field
      one uint8 tensor in shared memory per batch) and the DataLoader runs
      with batch_size=None, so it does not collate again.
  ceiling (dataloader-ceiling): the same DataLoader, collate and main loop
      fed from samples already in memory: the main process reads every
      sample of the local shards before the clock starts, the forked
      workers inherit them and each yields every W-th one. No I/O and no
      parsing: the most any loader can reach through that DataLoader.

The main process consumes every batch like a training loop would and
checks the epoch against the dataset's manifest: every sample key known,
none twice, each sample's content hash (sha256 over its fields sorted by
name: name, NUL, 8-byte little-endian length, data) equal to the
manifest's, and the number of samples equal to what the partition promises.
The same check runs for every contender, so its cost is the same for all.

Workers report their own peak RSS (VmHWM) and CPU when their iterator ends
(a JSON file per worker in --stats-dir); the main process adds its own and
the CPU of its reaped children (RUSAGE_CHILDREN).

Usage: loader_run.py SPEC_JSON  (see bench.py's PythonContender for keys)
"""

import hashlib
import io
import json
import os
import random
import resource
import sys
import tarfile
import time
import urllib.request

import torch.utils.data as tud

BATCH_SIZE = 256
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def exactly_once(seen, samples, unknown, bad_hash, expected, promised):
    """The exactly-once verdict of one run: seen maps each key delivered to
    its count; the partition promised `promised` of the `expected` keys
    (the rest may be missing, never duplicated)."""
    total = len(expected)
    dupes = sum(c - 1 for c in seen.values() if c > 1)
    missing = sum(1 for k in expected if k not in seen)
    return {"samples": samples, "expected": promised, "unique": len(seen),
            "duplicates": dupes, "unknown": unknown, "bad_hash": bad_hash,
            "missing": missing,
            "ok": (samples == promised and dupes == 0 and unknown == 0
                   and bad_hash == 0 and missing == total - promised)}


def worker_stats(stats_dir):
    """The JSON files the DataLoader workers left in stats_dir, by name."""
    out = []
    for name in sorted(os.listdir(stats_dir)):
        if name.endswith(".json"):
            with open(os.path.join(stats_dir, name)) as f:
                out.append(json.load(f))
    return out

def content_hash(fields):
    """mkwds/shardcast content hash of {name: bytes} (dunder keys are
    metadata and must not be passed)."""
    h = hashlib.sha256()
    for name in sorted(fields):
        data = fields[name]
        h.update(name.encode("utf-8"))
        h.update(b"\0")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def keep_bytes(batch):
    """Collate that keeps the samples (dicts of bytes) as a list."""
    return batch


def vm_hwm_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def write_worker_stats(stats_dir, samples):
    """Called by a worker when its iterator is exhausted."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    info = tud.get_worker_info()
    rec = {"pid": os.getpid(), "worker": info.id if info else -1,
           "hwm_kib": vm_hwm_kib(), "cpu_s": ru.ru_utime + ru.ru_stime,
           "samples": samples}
    tmp = os.path.join(stats_dir, "worker-%d.json.part" % os.getpid())
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, tmp[:-len(".part")])


# -- the hand-written baseline ------------------------------------------------

def wds_split(name):
    """(key, ext) of a tar member by the WebDataset rule, or None."""
    head, _, last = name.rpartition("/")
    base, dot, ext = last.partition(".")
    if not dot or not base or not ext:
        return None
    return (head + "/" + base if head else base), ext.lower()


def tar_samples(fileobj):
    """Samples of one tar stream: dicts {"__key__": key, ext: bytes}."""
    cur = None
    with tarfile.open(fileobj=fileobj, mode="r|") as tf:
        for ti in tf:
            if not ti.isreg():
                continue
            kx = wds_split(ti.name)
            if kx is None:
                continue
            key, ext = kx
            data = tf.extractfile(ti).read()
            if cur is not None and cur["__key__"] != key:
                yield cur
                cur = None
            if cur is None:
                cur = {"__key__": key}
            cur[ext] = data
    if cur is not None:
        yield cur


class BaselineDataset(tud.IterableDataset):
    """Each worker streams its own shards and shuffles in its own buffer."""

    def __init__(self, spec):
        super().__init__()
        self.kind = spec["source"]          # "http" | "s3"
        self.urls = spec["shards"]          # URLs (http) or keys (s3)
        self.bucket = spec.get("bucket")
        self.buffer = spec["shuffle_buffer"]
        self.seed = spec["seed"]
        self.epoch = spec["epoch"]
        self.stats_dir = spec["stats_dir"]

    def _open(self, client, shard):
        if self.kind == "http":
            import urllib.request
            return urllib.request.urlopen(shard, timeout=60)
        return client.get_object(Bucket=self.bucket, Key=shard)["Body"]

    def _client(self):
        if self.kind != "s3":
            return None
        import boto3
        from botocore.config import Config
        # Endpoint and credentials come from the environment, as in a job.
        return boto3.session.Session().client(
            "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"],
            config=Config(s3={"addressing_style": "path"},
                          retries={"max_attempts": 3, "mode": "standard"}))

    def __iter__(self):
        info = tud.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        shards = list(self.urls)
        random.Random(self.seed * 1000003 + self.epoch).shuffle(shards)
        mine = shards[wid::nw]
        rng = random.Random((self.seed * 1000003 + self.epoch) * 65537 + wid)
        client = self._client()
        buf = []
        n = 0
        for shard in mine:
            body = self._open(client, shard)
            try:
                for s in tar_samples(body):
                    if len(buf) < self.buffer:
                        buf.append(s)
                        continue
                    i = rng.randrange(len(buf))
                    out, buf[i] = buf[i], s
                    n += 1
                    yield out
            finally:
                body.close()
        rng.shuffle(buf)
        for s in buf:
            n += 1
            yield s
        write_worker_stats(self.stats_dir, n)


# -- shardcast ------------------------------------------------------------------

class ShardcastStats(tud.IterableDataset):
    """ShardcastDataset plus the worker's stats file at the end."""

    def __init__(self, spec):
        super().__init__()
        sys.path.insert(0, os.path.join(REPO, "clients", "python"))
        import shardcast
        kw = {"epoch": spec["epoch"], "rank": 0, "world": 1, "timeout": 120}
        if spec.get("format"):
            kw["format"] = spec["format"]
        if spec.get("decoder"):
            os.environ["SHARDCAST_ACCEL"] = "0" if spec["decoder"] == "python" else "1"
        if spec.get("mode") in ("batched", "tensor"):
            kw["batch_size"] = BATCH_SIZE
            kw["tensors"] = spec["mode"] == "tensor"
        self.inner = shardcast.ShardcastDataset(spec["server"], spec["job"], **kw)
        self.stats_dir = spec["stats_dir"]

    def __iter__(self):
        n = 0
        batched = self.inner.batch_size is not None
        for s in self.inner:
            n += len(s["__key__"]) if batched else 1
            yield s
        write_worker_stats(self.stats_dir, n)


class InMemory(tud.IterableDataset):
    """dataloader-ceiling: samples already in memory (read before the fork)."""

    def __init__(self, spec):
        super().__init__()
        self.samples = []
        for url in spec["shards"]:
            with urllib.request.urlopen(url, timeout=120) as f:
                self.samples.extend(tar_samples(io.BytesIO(f.read())))
        self.stats_dir = spec["stats_dir"]

    def __iter__(self):
        info = tud.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        n = 0
        for s in self.samples[wid::nw]:
            n += 1
            yield s
        write_worker_stats(self.stats_dir, n)


def batch_samples(batch):
    """The samples of one item of the DataLoader: a list of sample dicts
    (its own collate), or a batch collated by ShardcastDataset (a dict of
    lists; tensor mode: a shardcast.Ragged per field, read as memoryviews
    into its shared-memory tensor, no copy)."""
    if isinstance(batch, list):
        return batch
    cols = {}
    for k, v in batch.items():
        cols[k] = v.memoryviews() if hasattr(v, "memoryviews") else v
    names = list(cols)
    # None marks a field the sample does not have (the batch holds the
    # union of its samples' fields).
    return [{k: v for k, v in zip(names, row) if v is not None}
            for row in zip(*cols.values())]


# -- the run ------------------------------------------------------------------

def load_expected(manifest_path):
    with open(manifest_path) as f:
        m = json.load(f)
    return {s["key"]: s["hash"] for s in m["samples"]}


def main():
    spec = json.loads(sys.argv[1])
    workers = spec["workers"]
    expected = load_expected(spec["manifest"])
    batched = spec.get("mode") in ("batched", "tensor")
    if spec["kind"] == "baseline":
        ds = BaselineDataset(spec)
    elif spec["kind"] == "ceiling":
        ds = InMemory(spec)
    else:
        ds = ShardcastStats(spec)
    if spec["kind"] == "baseline" and spec["source"] == "s3":
        import boto3  # noqa: F401  (imported before the fork, as a user would)
    if batched:
        loader = tud.DataLoader(ds, num_workers=workers, batch_size=None,
                                pin_memory=False)
    else:
        loader = tud.DataLoader(ds, num_workers=workers, batch_size=BATCH_SIZE,
                                collate_fn=keep_bytes, pin_memory=False)
    seen = {}
    bad_hash = unknown = 0
    samples = payload = 0
    first = None
    verify_s = 0.0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        tv = time.perf_counter()
        for s in batch_samples(batch):
            key = s["__key__"]
            fields = {k: v for k, v in s.items()
                      if not (k.startswith("__") and k.endswith("__"))}
            samples += 1
            payload += sum(len(v) for v in fields.values())
            seen[key] = seen.get(key, 0) + 1
            want = expected.get(key)
            if want is None:
                unknown += 1
            elif content_hash(fields) != want:
                bad_hash += 1
        verify_s += time.perf_counter() - tv
    elapsed = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    del loader  # workers are joined by now (the iterator was exhausted)
    total = len(expected)
    # even-drop (the server's default) deals the same count to everyone and
    # drops the remainder; the baseline delivers everything.
    promised = total - total % workers if spec["kind"] == "shardcast" else total
    verify = exactly_once(seen, samples, unknown, bad_hash, expected,
                          promised)
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    wstats = worker_stats(spec["stats_dir"])
    json.dump({"samples": samples, "payload_bytes": payload,
               "elapsed_s": elapsed, "first_batch_s": first,
               "main": {"hwm_kib": vm_hwm_kib(),
                        "cpu_s": me.ru_utime + me.ru_stime,
                        # CPU of the main process during the epoch alone
                        # (without interpreter/torch start-up and manifest
                        # loading), and the part of the epoch's wall time
                        # spent in the exactly-once check.
                        "epoch_cpu_s": (ru1.ru_utime + ru1.ru_stime)
                        - (ru0.ru_utime + ru0.ru_stime),
                        "verify_s": verify_s},
               "children_cpu_s": kids.ru_utime + kids.ru_stime,
               "workers": wstats, "verify": verify}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
