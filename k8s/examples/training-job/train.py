#!/usr/bin/env python3
"""train.py -- example training loop over a shardcast job, one rank.

Run by k8s/examples/training-job (one pod per rank) and by
tests/k8s/test_example_job.py on loopback. Environment:

  SHARDCAST_URL           a shardcast server or Service (http://shardcast:8080)
  SHARDCAST_URL_TEMPLATE  scale-out: the replicas' URLs with {j}, e.g.
                          http://shardcast-{j}.shardcast-headless:8080
                          (empty: a single replica)
  SHARDCAST_JOB           the job name
  SHARDCAST_TOKEN         consumer bearer token (empty: none)
  SHARDCAST_EPOCHS        epochs to run (default 1)
  SHARDCAST_WORKERS       DataLoader workers per rank (default 2)
  RANK, WORLD_SIZE        this rank and the number of ranks
  SHARDCAST_REPORT        optional file: JSON {"rank", "world", "workers",
                          "epochs": {E: [content hash of every sample this
                          rank saw, in order]}} (used by the tests)

Consumer c = RANK * workers + worker_id of W = WORLD_SIZE * workers
streams from replica c mod R as local rank c div R (shardcast.topology).
A cut stream (a replica restarting, a network fault) is resumed from the
number of samples already received (start=), so nothing is lost or
repeated: the replica's part of the epoch is a pure function of
(dataset, seed, epoch, replica, replicas).
"""

import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import shardcast
from shardcast.topology import Topology

# Attempts to resume one consumer's stream after it was cut, and the
# longest pause between two (seconds): together about two minutes, enough
# for a replica pod to be rescheduled and pass its readiness probe.
RESUME_ATTEMPTS = 8
RESUME_PAUSE_MAX = 30.0
RETRYABLE = (shardcast.ShardcastConnectionError, shardcast.ShardcastIncompleteError)


def env_int(name, default):
    text = os.environ.get(name, "")
    return int(text) if text else default


def stream_share(route, job, epoch, headers, timeout=60.0):
    """The samples of one consumer's share, resuming a cut stream from the
    position reached. HTTP 503 (a replica starting or draining) is retried
    too; any other error is raised."""
    done, failures = 0, 0
    while True:
        url = shardcast.stream_url(route.url, job, epoch, route.local_rank, route.local_world,
                                   start=done if done else None)
        try:
            with shardcast.StreamReader(url, timeout=timeout, headers=headers) as reader:
                for sample in reader:
                    done += 1
                    failures = 0
                    yield sample
            return
        except shardcast.ShardcastHTTPError as e:
            if e.status != 503:
                raise
            err = e
        except RETRYABLE as e:
            err = e
        failures += 1
        if failures > RESUME_ATTEMPTS:
            raise err
        pause = min(RESUME_PAUSE_MAX, 0.25 * 2 ** failures)
        print("consumer %d/%d of replica %d: %s; resuming at %d in %.1f s"
              % (route.local_rank, route.local_world, route.replica, err, done, pause),
              file=sys.stderr, flush=True)
        time.sleep(pause)


class ShardcastShare(IterableDataset):
    """This rank's DataLoader workers, each one shardcast consumer."""

    def __init__(self, topology, job, rank, world, token):
        super().__init__()
        self.topology, self.job, self.rank, self.world = topology, job, rank, world
        self.headers = {"Authorization": "Bearer " + token} if token else None
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        route = self.topology.route(self.rank * workers + worker, self.world * workers)
        for sample in stream_share(route, self.job, self.epoch, self.headers):
            # A real loop decodes images here; the example keeps the class
            # and the content hash (for the report).
            cls = sample.get("cls")
            yield {"label": int(cls) if cls is not None else -1,
                   "hash": shardcast.sample_hash(sample)}


def main():
    url = os.environ["SHARDCAST_URL"]
    template = os.environ.get("SHARDCAST_URL_TEMPLATE") or None
    job = os.environ["SHARDCAST_JOB"]
    token = os.environ.get("SHARDCAST_TOKEN") or None
    epochs = env_int("SHARDCAST_EPOCHS", 1)
    workers = env_int("SHARDCAST_WORKERS", 2)
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    report_path = os.environ.get("SHARDCAST_REPORT") or None

    headers = {"Authorization": "Bearer " + token} if token else None
    topology = Topology.discover(url, template=template, verify=True, headers=headers)
    print("rank %d/%d: %d replica(s) %s, %d worker(s)"
          % (rank, world, topology.replicas, ",".join(topology.urls), workers), flush=True)

    dataset = ShardcastShare(topology, job, rank, world, token)
    report = {"rank": rank, "world": world, "workers": workers, "epochs": {}}
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=None, num_workers=workers)
        seen, label_sum = [], 0
        t0 = time.monotonic()
        for item in loader:
            # The training step of a real job goes here.
            label_sum += int(torch.tensor(item["label"]))
            seen.append(item["hash"])
        report["epochs"][str(epoch)] = seen
        print("rank %d epoch %d: %d samples in %.1f s (label sum %d)"
              % (rank, epoch, len(seen), time.monotonic() - t0, label_sum), flush=True)
    if report_path:
        with open(report_path, "w") as f:
            json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
