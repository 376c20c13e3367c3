"""The example training Job's script (k8s/examples/training-job/train.py)
run for real on loopback: 2 ranks x 2 DataLoader workers (W = 4) against
2 replicas started as the scale-out StatefulSet starts them, with the
consumer token, the replicas named as the Job names them: one URL template
(SHARDCAST_URL_TEMPLATE) and SHARDCAST_REPLICAS. Together the ranks see
every sample of the epoch exactly once, and the same sequence when run
again, also with a replica down (its consumers fail over to the other)."""

import collections
import json
import os
import subprocess
import sys
import time

import pytest

from k8s_testlib import K8S, REPO, Replica, free_port, host_of
from shardcast_testlib import make_dataset

TRAIN = os.path.join(K8S, "examples", "training-job", "train.py")
TOKEN = "example-job-token"
# Where train.py finds the servers: the test sets the Job's pair only.
SERVER_VARS = {"SHARDCAST_SERVER", "SHARDCAST_URL", "SHARDCAST_URLS", "SHARDCAST_URL_TEMPLATE",
               "SHARDCAST_REPLICAS"}


@pytest.fixture(scope="module")
def replicas(shardcastd, k8s_workdir):
    ds = os.path.join(k8s_workdir, "example-ds")
    manifest = make_dataset(ds, shards=8, per_shard=9, size=300, seed=5)
    cfg = os.path.join(k8s_workdir, "example.json")
    with open(cfg, "w") as f:
        json.dump({"jobs": [{"name": "train", "source": ds, "seed": 4, "shuffle_buffer": 30,
                             "partition": "none"}]}, f)
    port = free_port(2)
    pods = [Replica(shardcastd, "shardcast-%d" % j, 2, host_of(j), port, ["--config", cfg],
                    k8s_workdir, extra_env={"SHARDCAST_TOKEN": TOKEN}) for j in range(2)]
    yield pods, "http://127.0.1.{j}:%d" % port, manifest, (shardcastd, cfg, port, k8s_workdir)
    for p in pods:
        assert p.stop() == 0, p.log()


def run_ranks(replicas, tmp_path, tag, extra=None):
    pods, template = replicas[0], replicas[1]
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if k not in SERVER_VARS}
        env.update({"SHARDCAST_URL_TEMPLATE": template, "SHARDCAST_REPLICAS": str(len(pods)),
                    "SHARDCAST_JOB": "train", "SHARDCAST_TOKEN": TOKEN,
                    "SHARDCAST_EPOCHS": "1", "SHARDCAST_WORKERS": "2", "RANK": str(rank),
                    "WORLD_SIZE": "2",
                    "SHARDCAST_REPORT": str(tmp_path / ("%s-%d.json" % (tag, rank))),
                    "PYTHONPATH": os.path.join(REPO, "clients", "python")})
        for k, v in (extra or {}).items():
            env[k] = v % {"rank": rank}
        procs.append(subprocess.Popen([sys.executable, TRAIN], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    reports = []
    for rank, p in enumerate(procs):
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, "rank %d failed:\n%s\n%s" % (rank, out, err)
        assert "2 replica(s)" in out, out
        with open(tmp_path / ("%s-%d.json" % (tag, rank))) as f:
            reports.append(json.load(f))
    return reports


def test_training_job_script_reads_every_sample_once(replicas, tmp_path):
    manifest = replicas[2]
    first = run_ranks(replicas, tmp_path, "a")
    seen = collections.Counter(h for r in first for h in r["epochs"]["0"])
    assert seen == collections.Counter(s["hash"] for s in manifest["samples"])
    second = run_ranks(replicas, tmp_path, "b")
    # DataLoader interleaves its workers' samples in a fixed order, so
    # each rank's sequence is reproducible.
    assert [r["epochs"] for r in second] == [r["epochs"] for r in first]


def test_training_job_resumes_from_its_checkpoint(replicas, tmp_path):
    """Preempted after 10 steps per rank (the loader's state_dict saved in
    the checkpoint), then run again: each rank continues where it stopped;
    together the two runs are the uninterrupted run's sequences exactly."""
    whole = run_ranks(replicas, tmp_path, "whole")
    ckpt = {"SHARDCAST_CHECKPOINT": str(tmp_path / "ckpt-%(rank)d.json"),
            "SHARDCAST_CHECKPOINT_EVERY": "4"}
    cut = run_ranks(replicas, tmp_path, "cut", dict(ckpt, SHARDCAST_STOP_AFTER="10"))
    assert all(len(r["epochs"]["0"]) == 10 for r in cut)
    resumed = run_ranks(replicas, tmp_path, "cut", ckpt)  # same report files
    assert [r["epochs"] for r in resumed] == [r["epochs"] for r in whole]


def test_training_job_goes_on_with_a_replica_down(replicas, tmp_path):
    """Replica 1 killed (its process gone): the ranks' consumers of replica 1
    find its port refused and stream its part from replica 0 (the first
    iteration's check skips the replica that does not answer). Still
    every sample once, each rank the same sequence as with both up; then
    the replica is started again under its pod name."""
    pods = replicas[0]
    binary, cfg, port, workdir = replicas[3]
    whole = run_ranks(replicas, tmp_path, "up")
    pods[1].kill()
    try:
        t0 = time.monotonic()
        down = run_ranks(replicas, tmp_path, "down")
        took = time.monotonic() - t0
    finally:
        pods[1].stop()
        pods[1] = Replica(binary, "shardcast-1", 2, host_of(1), port, ["--config", cfg],
                          workdir, extra_env={"SHARDCAST_TOKEN": TOKEN})
    assert [r["epochs"] for r in down] == [r["epochs"] for r in whole]
    print("example job with replica 1 down: %.1f s" % took)
