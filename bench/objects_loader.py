#!/usr/bin/python3
"""One DataLoader run of the small-objects benchmark (bench/objects.py), in
a process of its own. Usage: objects_loader.py SPEC_JSON; prints one JSON
object on stdout.

Every run uses the same DataLoader as bench/loader_run.py: num_workers=W,
batch_size=256, a collate that keeps the samples (a list of dicts of
bytes), pin_memory=False. The main process consumes every batch as a
training loop would and checks the epoch against the manifest (every key
known, none twice, each sample's content hash right, the count what the
partition promises). What differs is the dataset:

  baseline: the loader a torchdata / S3-plugin user writes for a prefix of
      small objects. The main process is handed the sorted key list (listed
      once before the clock starts, as shardcast's server lists before its
      clock). Each worker groups the keys into samples by the WebDataset
      rule (abc.jpg + abc.json = one sample; consecutive keys with the same
      stem), shuffles the samples with the epoch's seed (a full
      permutation: random access needs no shuffle buffer), takes every W-th
      one and GETs its objects one after the other with its own boto3
      client (get_object, path style, endpoint and credentials from the
      environment, botocore's standard retries).
      With "threads": T > 1 (the tuned variant), each worker keeps T GETs in
      flight with a thread pool (one client shared by its threads; boto3
      clients are thread-safe), samples still yielded in order.
  shardcast: shardcast.ShardcastDataset against the server (format=frames),
      consumer = worker id, world = W (bench/loader_run.py's ShardcastStats).

Workers write their counters (samples, GETs, boto3 retries, CPU, VmHWM) to
stats_dir when their share ends.
"""

import json
import os
import random
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch.utils.data as tud  # noqa: E402

from loader_run import (BATCH_SIZE, ShardcastStats, batch_samples,  # noqa: E402
                        content_hash, exactly_once, keep_bytes, load_expected,
                        vm_hwm_kib, wds_split, worker_stats)


def group_samples(keys, prefix):
    """[(sample key, [(ext, object key), ...])] of sorted object keys, by the
    WebDataset rule over the names below prefix (names it skips are
    skipped)."""
    out = []
    for k in keys:
        kx = wds_split(k[len(prefix):])
        if kx is None:
            continue
        stem, ext = kx
        if out and out[-1][0] == stem:
            out[-1][1].append((ext, k))
        else:
            out.append((stem, [(ext, k)]))
    return out


class ObjectsBaseline(tud.IterableDataset):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec

    def _client(self):
        import boto3
        from botocore.config import Config
        threads = self.spec.get("threads", 1)
        return boto3.session.Session().client(
            "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"],
            config=Config(s3={"addressing_style": "path"},
                          retries={"max_attempts": 3, "mode": "standard"},
                          max_pool_connections=max(10, threads)))

    def __iter__(self):
        s = self.spec
        info = tud.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        samples = group_samples(s["keys"], s["prefix"])
        random.Random(s["seed"] * 1000003 + s["epoch"]).shuffle(samples)
        mine = samples[wid::nw]
        client = self._client()
        st = {"gets": 0, "retries": 0, "samples": 0}
        bucket = s["bucket"]

        def fetch(item):
            stem, members = item
            out = {"__key__": stem}
            for ext, key in members:
                r = client.get_object(Bucket=bucket, Key=key)
                out[ext] = r["Body"].read()
                st["retries"] += r["ResponseMetadata"].get("RetryAttempts", 0)
                st["gets"] += 1
            return out

        threads = s.get("threads", 1)
        if threads <= 1:
            for item in mine:
                st["samples"] += 1
                yield fetch(item)
        else:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=threads) as ex:
                # map() submits everything at once; keep at most 2T ahead.
                pending = []
                it = iter(mine)
                for item in it:
                    pending.append(ex.submit(fetch, item))
                    if len(pending) >= 2 * threads:
                        st["samples"] += 1
                        yield pending.pop(0).result()
                for f in pending:
                    st["samples"] += 1
                    yield f.result()
        write_stats(s["stats_dir"], st)


class ShardcastObjects(ShardcastStats):
    def __iter__(self):
        n = 0
        for smp in self.inner:
            n += 1
            yield smp
        write_stats(self.stats_dir, {"samples": n,
                                     "reconnects": self.inner.reconnects})


def write_stats(stats_dir, rec):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    info = tud.get_worker_info()
    rec = dict(rec, pid=os.getpid(), worker=info.id if info else -1,
               hwm_kib=vm_hwm_kib(), cpu_s=ru.ru_utime + ru.ru_stime)
    tmp = os.path.join(stats_dir, "worker-%d.json.part" % os.getpid())
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, tmp[:-len(".part")])


def main():
    spec = json.loads(sys.argv[1])
    workers = spec["workers"]
    expected = load_expected(spec["manifest"])
    if spec["kind"] == "baseline":
        with open(spec["keys_file"]) as f:
            spec["keys"] = json.load(f)
        import boto3  # noqa: F401  (imported before the fork, as a user would)
        ds = ObjectsBaseline(spec)
    else:
        ds = ShardcastObjects(spec)
    loader = tud.DataLoader(ds, num_workers=workers, batch_size=BATCH_SIZE,
                            collate_fn=keep_bytes, pin_memory=False)
    seen = {}
    bad_hash = unknown = samples = payload = 0
    first = None
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        for smp in batch_samples(batch):
            key = smp["__key__"]
            fields = {k: v for k, v in smp.items()
                      if not (k.startswith("__") and k.endswith("__"))}
            samples += 1
            payload += sum(len(v) for v in fields.values())
            seen[key] = seen.get(key, 0) + 1
            want = expected.get(key)
            if want is None:
                unknown += 1
            elif content_hash(fields) != want:
                bad_hash += 1
    elapsed = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    del loader
    total = len(expected)
    # even-drop (the server's default) deals the same count to every
    # consumer and drops the remainder; the baseline delivers everything.
    promised = total - total % workers if spec["kind"] == "shardcast" else total
    verify = exactly_once(seen, samples, unknown, bad_hash, expected,
                          promised)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    wstats = worker_stats(spec["stats_dir"])
    json.dump({"samples": samples, "payload_bytes": payload,
               "elapsed_s": elapsed, "first_batch_s": first,
               "main_epoch_cpu_s": (ru1.ru_utime + ru1.ru_stime)
               - (ru0.ru_utime + ru0.ru_stime),
               "workers_cpu_s": kids.ru_utime + kids.ru_stime,
               "workers": wstats, "verify": verify}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
