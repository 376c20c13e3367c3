#!/usr/bin/env python3
"""train.py -- example training loop over a shardcast job, one rank.

Run by k8s/examples/training-job (one pod per rank) and by
tests/k8s/test_example_job.py on loopback. It uses the client library as a
training job would: ShardcastDataset (the rank's DataLoader workers are its
consumers, routed to replicas; cut streams, 503s and a server restart are
retried and resumed by the dataset itself) and ShardcastDataLoader, whose
state_dict() is the resume point saved with the model's checkpoint.
Environment:

  SHARDCAST_URL_TEMPLATE  scale-out: the replicas' URLs with {j}, e.g.
                          http://shardcast-{j}.shardcast-headless:8080,
  SHARDCAST_REPLICAS      with R, their number (the Job sets both); or
  SHARDCAST_URLS          the R URLs in replica order, comma-separated
  SHARDCAST_SERVER        without those: the one shardcast server
                          (http://shardcast:8080); SHARDCAST_URL is read
                          too (older name)
  SHARDCAST_JOB           the job name
  SHARDCAST_TOKEN         consumer bearer token (empty: none)
  SHARDCAST_EPOCHS        epochs to run (default 1)
  SHARDCAST_WORKERS       DataLoader workers per rank (default 2)
  SHARDCAST_READ_TIMEOUT  seconds without a byte before a stream counts as
                          dead and the consumer fails over to another
                          replica (default 60: the dataset's timeout=)
  SHARDCAST_CHECKPOINT    optional file: the loader's state_dict() and the
                          epoch are saved there every SHARDCAST_CHECKPOINT_EVERY
                          steps (default 100) and at the end of each epoch;
                          a run that finds it resumes from it
  SHARDCAST_STOP_AFTER    optional: stop (as if preempted) after this many
                          steps of this run, after saving a checkpoint
  RANK, WORLD_SIZE        this rank and the number of ranks
  SHARDCAST_REPORT        optional file: JSON {"rank", "world", "workers",
                          "epochs": {E: [content hash of every sample this
                          rank saw, in order]}} (used by the tests; a resumed
                          run appends to the report it finds)

Consumer c = RANK * workers + worker_id of W = WORLD_SIZE * workers
streams from replica c mod R as local rank c div R (shardcast.topology);
when that replica stops answering, the dataset continues the consumer's
part from another replica at its position (exactly once), and the next
epoch starts at replica c mod R again. Before its first stream each
worker checks that every replica reports its own J, R and one job
fingerprint, and refuses a wrong set. The replica's part of an epoch is a
pure function of (dataset, seed, epoch, replica, replicas), so a resumed
run continues the same sequence.
"""

import json
import os
import sys
import time

import torch

import shardcast
from shardcast.topology import Topology


def env_int(name, default):
    text = os.environ.get(name, "")
    return int(text) if text else default


def keep_label_and_hash(sample):
    """What the example keeps of a sample (a real loop decodes images here,
    e.g. decode="pil"): the class and the content hash for the report."""
    cls = sample.get("cls")
    return {"label": int(cls) if cls is not None else -1,
            "hash": shardcast.sample_hash(sample)}


def save(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)  # never a torn checkpoint


def main():
    # The replicas: SHARDCAST_URLS, or SHARDCAST_URL_TEMPLATE with
    # SHARDCAST_REPLICAS, else the one server SHARDCAST_SERVER.
    server = os.environ.get("SHARDCAST_SERVER") or os.environ.get("SHARDCAST_URL") or None
    if server is None and not (os.environ.get("SHARDCAST_URLS")
                               or os.environ.get("SHARDCAST_URL_TEMPLATE")):
        sys.exit("train.py: set SHARDCAST_URL_TEMPLATE and SHARDCAST_REPLICAS, "
                 "SHARDCAST_URLS, or SHARDCAST_SERVER")
    topology = Topology.from_env(server, os.environ)
    job = os.environ["SHARDCAST_JOB"]
    token = os.environ.get("SHARDCAST_TOKEN") or None
    epochs = env_int("SHARDCAST_EPOCHS", 1)
    workers = env_int("SHARDCAST_WORKERS", 2)
    timeout = float(os.environ.get("SHARDCAST_READ_TIMEOUT") or 60)
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    report_path = os.environ.get("SHARDCAST_REPORT") or None
    ckpt_path = os.environ.get("SHARDCAST_CHECKPOINT") or None
    ckpt_every = env_int("SHARDCAST_CHECKPOINT_EVERY", 100)
    stop_after = env_int("SHARDCAST_STOP_AFTER", 0)

    print("rank %d/%d: %d replica(s) %s, %d worker(s)"
          % (rank, world, topology.replicas, ",".join(topology.urls), workers), flush=True)

    # verify=True (the default): each worker's first iteration asks every
    # replica's GET /v1/topology?job= and refuses a set that is not one
    # service (a wrong SHARDCAST_REPLICAS, a replica with other settings).
    dataset = shardcast.ShardcastDataset(server or topology.urls[0], job, rank=rank,
                                         world=world, token=token, topology=topology,
                                         timeout=timeout, map=keep_label_and_hash)
    loader = shardcast.ShardcastDataLoader(dataset, batch_size=None, num_workers=workers)

    report = {"rank": rank, "world": world, "workers": workers, "epochs": {}}
    if report_path and os.path.exists(report_path):
        with open(report_path) as f:
            report = json.load(f)
    first_epoch, resume = 0, None
    if ckpt_path and os.path.exists(ckpt_path):
        with open(ckpt_path) as f:
            ckpt = json.load(f)
        first_epoch, resume = ckpt["epoch"], ckpt["loader"]
        print("rank %d: resuming epoch %d from the checkpoint" % (rank, first_epoch),
              flush=True)

    steps = 0
    for epoch in range(first_epoch, epochs):
        dataset.set_epoch(epoch)
        if resume is not None:
            loader.load_state_dict(resume)  # the rest of the epoch, exactly once
            resume = None
        seen = report["epochs"].setdefault(str(epoch), [])
        label_sum = 0
        t0 = time.monotonic()
        for item in loader:
            # The training step of a real job goes here.
            label_sum += int(torch.tensor(item["label"]))
            seen.append(item["hash"])
            steps += 1
            preempted = stop_after and steps >= stop_after
            if ckpt_path and (steps % ckpt_every == 0 or preempted):
                save(ckpt_path, {"epoch": epoch, "loader": loader.state_dict()})
                if report_path:
                    save(report_path, report)
            if preempted:
                print("rank %d: stopping after %d steps (checkpoint saved)" % (rank, steps),
                      flush=True)
                return 0
        print("rank %d epoch %d: %d samples in %.1f s (label sum %d)"
              % (rank, epoch, len(seen), time.monotonic() - t0, label_sum), flush=True)
        if ckpt_path:
            save(ckpt_path, {"epoch": epoch + 1, "loader": None})
    if report_path:
        save(report_path, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
