#!/usr/bin/python3
"""One simulated training node of the throttled-store benchmark: a torch
DataLoader with M worker processes, reading epoch after epoch when the
harness says so. Started by throttle.py, N of them per job.

Usage: node_run.py SPEC_JSON

Protocol (line based): the node builds its dataset and DataLoader, prints
``ready``, then for each line ``go EPOCH`` on stdin runs that epoch and
prints one JSON line with its figures; ``quit`` (or EOF) ends it. The
harness sends ``go`` to every node of a run at the same moment, so an
epoch's time is from that moment to the last node's last sample.

Modes (spec "mode"):

  baseline: what a PyTorch user writes by hand against S3, as
      bench/loader_run.py's baseline-s3: every DataLoader worker builds a
      boto3 client (endpoint and credentials from the environment,
      path-style, retries as spec "retry_mode"/"max_attempts"), lists the
      prefix itself (ListObjectsV2, paginated), shuffles the shard list
      with the epoch's seed, takes every W-th shard (worker
      node * M + id of W = N * M), streams each with get_object into
      tarfile (stream mode), groups members into samples by the WebDataset
      rule and shuffles them through its own buffer. A call that boto3
      gives up on raises, and the node fails, as a training job would.
      Retries are counted from botocore's ResponseMetadata.RetryAttempts
      of every call (and of the error of a call given up).
  shardcast: shardcast.ShardcastDataset(server, job, rank=node,
      world=N, format=frames), so DataLoader worker w of node n is
      consumer n * M + w of N * M and together the nodes read the epoch
      once.

The main process consumes every batch as a training loop would and checks
each sample's content hash against the manifest; it writes the keys it
received to stats_dir/keys-<job>-e<epoch>-n<node>.txt so the harness can
check exactly-once across nodes. Workers write their counters to
stats_dir/w-<job>-e<epoch>-n<node>-<id>.json when their share ends.
"""

import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench"))

import torch.utils.data as tud  # noqa: E402

from loader_run import content_hash, keep_bytes, tar_samples  # noqa: E402

SHARD_EXTS = (".tar", ".tar.gz", ".tgz", ".tar.zst")


def _write_stats(spec, epoch, rec):
    info = tud.get_worker_info()
    wid = info.id if info else 0
    name = "w-%s-e%d-n%d-%d.json" % (spec["job"], epoch, spec["node"], wid)
    path = os.path.join(spec["stats_dir"], name)
    with open(path + ".part", "w") as f:
        json.dump(rec, f)
    os.replace(path + ".part", path)


class _Epoch:
    """The epoch a dataset copy streams, shared with forked workers."""

    def __init__(self):
        import multiprocessing
        self.v = multiprocessing.RawValue("q", 0)


class BaselineS3(tud.IterableDataset):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.epoch = _Epoch()

    def _client(self):
        import boto3
        from botocore.config import Config
        s = self.spec
        return boto3.session.Session().client(
            "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"],
            config=Config(s3={"addressing_style": "path"},
                          retries={"max_attempts": s["max_attempts"],
                                   "mode": s["retry_mode"]}))

    def __iter__(self):
        from botocore.exceptions import ClientError
        s = self.spec
        epoch = self.epoch.v.value
        info = tud.get_worker_info()
        wid, m = (info.id, info.num_workers) if info else (0, 1)
        world = s["nodes"] * m
        me = s["node"] * m + wid
        st = {"requests": 0, "retries": 0, "lists": 0, "gets": 0,
              "samples": 0, "gave_up": 0}

        def call(fn, **kw):
            st["requests"] += 1
            try:
                r = fn(**kw)
            except ClientError as e:
                st["retries"] += e.response.get("ResponseMetadata", {}).get(
                    "RetryAttempts", 0)
                st["gave_up"] += 1
                _write_stats(s, epoch, st)
                raise
            st["retries"] += r["ResponseMetadata"].get("RetryAttempts", 0)
            return r

        client = self._client()
        keys, token = [], None
        while True:
            kw = {"Bucket": s["bucket"], "Prefix": s["prefix"]}
            if token:
                kw["ContinuationToken"] = token
            page = call(client.list_objects_v2, **kw)
            st["lists"] += 1
            keys += [o["Key"] for o in page.get("Contents", [])
                     if o["Key"].endswith(SHARD_EXTS)]
            if not page.get("IsTruncated"):
                break
            token = page["NextContinuationToken"]
        keys.sort()
        rng0 = s["seed"] * 1000003 + epoch
        random.Random(rng0).shuffle(keys)
        mine = keys[me::world]
        rng = random.Random(rng0 * 65537 + me)
        cap = s["shuffle_buffer"]
        buf = []
        for key in mine:
            body = call(client.get_object, Bucket=s["bucket"], Key=key)["Body"]
            st["gets"] += 1
            try:
                for smp in tar_samples(body):
                    if len(buf) < cap:
                        buf.append(smp)
                        continue
                    i = rng.randrange(len(buf))
                    out, buf[i] = buf[i], smp
                    st["samples"] += 1
                    yield out
            finally:
                body.close()
        rng.shuffle(buf)
        for smp in buf:
            st["samples"] += 1
            yield smp
        _write_stats(s, epoch, st)


class Shardcast(tud.IterableDataset):
    def __init__(self, spec):
        super().__init__()
        sys.path.insert(0, os.path.join(REPO, "clients", "python"))
        import shardcast
        self.spec = spec
        self.inner = shardcast.ShardcastDataset(
            spec["server"], spec["job"], rank=spec["node"],
            world=spec["nodes"], format="frames", timeout=120,
            retry_timeout=600)
        self._epoch = 0

    def __iter__(self):
        n = 0
        for smp in self.inner:
            n += 1
            yield smp
        _write_stats(self.spec, self._epoch,
                     {"samples": n, "reconnects": self.inner.reconnects})

    def set_epoch(self, e):
        self._epoch = e
        self.inner.set_epoch(e)


def main():
    spec = json.loads(sys.argv[1])
    with open(spec["manifest"]) as f:
        expected = {x["key"]: x["hash"] for x in json.load(f)["samples"]}
    if spec["mode"] == "baseline":
        import boto3  # noqa: F401  (imported before the fork, as a user would)
        ds = BaselineS3(spec)
    else:
        ds = Shardcast(spec)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        epoch = int(cmd[1])
        t_go = time.monotonic()
        if spec["mode"] == "baseline":
            ds.epoch.v.value = epoch
        else:
            ds.set_epoch(epoch)
        loader = tud.DataLoader(ds, num_workers=spec["workers"],
                                batch_size=spec["batch_size"],
                                collate_fn=keep_bytes, pin_memory=False)
        keys = []
        bad = 0
        payload = 0
        first = None
        err = None
        try:
            for batch in loader:
                if first is None:
                    first = time.monotonic()
                for smp in batch:
                    fields = {k: v for k, v in smp.items()
                              if not (k.startswith("__") and k.endswith("__"))}
                    payload += sum(len(v) for v in fields.values())
                    keys.append(smp["__key__"])
                    if expected.get(smp["__key__"]) != content_hash(fields):
                        bad += 1
        except Exception as e:  # the run failed; report it
            err = "%s: %s" % (type(e).__name__, str(e)[-2000:])
        t_end = time.monotonic()
        del loader
        kpath = os.path.join(spec["stats_dir"], "keys-%s-e%d-n%d.txt"
                             % (spec["job"], epoch, spec["node"]))
        with open(kpath, "w") as f:
            f.write("\n".join(keys))
        print(json.dumps({"epoch": epoch, "node": spec["node"],
                          "t_go": t_go, "t_first": first, "t_end": t_end,
                          "samples": len(keys), "payload_bytes": payload,
                          "bad_hash": bad, "error": err}), flush=True)
        if err:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
