"""Helpers of test_replica_failover.py: shardcastd processes started as replicas J
of R (--replica J --replicas R) on loopback, each of which can be killed
(SIGKILL) and started again on the same port, their job status and
metrics, and a summary of the samples a consumer delivered (made in the
DataLoader worker, so that only keys and hashes cross to the main
process)."""

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request

from shardcast_testlib import (STARTUP_TIMEOUT, STOP_TIMEOUT,  # puts the client on the path
                               read_log, wait_log_text)

import shardcast  # noqa: E402

# How long a replica started again may take to bind its old port (the port
# is free once the killed process is gone; the wait is for that state).
REBIND_DEADLINE = 30.0


class Replica:
    """One shardcastd as replica `j` of `r`, on 127.0.0.1:port (0: a free
    port, kept for restarts). `args` are the job and server options."""

    def __init__(self, binary, j, r, args, workdir, port=0):
        self.binary, self.j, self.r = binary, j, r
        self.args_base = list(args)
        self.workdir = workdir
        self.port = port
        self.proc = None
        self.killed = False
        self.runs = 0
        self.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def command(self):
        return [self.binary, "--listen", "127.0.0.1", "--port", str(self.port),
                "--replica", str(self.j), "--replicas", str(self.r)] + self.args_base

    def start(self):
        """Start the process (again); returns once it listens. A restart
        on the old port tries again while the port is still held."""
        deadline = time.monotonic() + REBIND_DEADLINE
        while True:
            line = self._spawn()
            if line.startswith("listening="):
                break
            rc = self.proc.wait(STOP_TIMEOUT)
            if self.port == 0 or time.monotonic() > deadline or \
                    "in use" not in self.log():
                raise RuntimeError("replica %d did not start (exit %s): %r\ncommand: %s\n%s"
                                   % (self.j, rc, line, " ".join(self.command()), self.log()))
            # wait for the port to be released: the old process is gone,
            # only the kernel may still hold it briefly
            time.sleep(0.1)
        self.port = int(line.strip().rpartition(":")[2])
        self.killed = False
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def _spawn(self):
        self.runs += 1
        self.stderr_path = os.path.join(self.workdir, "replica-%d-%d-%d.stderr"
                                        % (self.j, id(self), self.runs))
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL)
        got = []
        t = threading.Thread(target=lambda: got.append(self.proc.stdout.readline()),
                             daemon=True)
        t.start()
        t.join(STARTUP_TIMEOUT)
        return got[0].decode("utf-8", "replace") if got else ""

    def log(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-8000:]

    def wait_log(self, *needles, timeout=60):
        """The whole log once every needle is in it (see wait_log_text)."""
        return wait_log_text(lambda: read_log(self.stderr_path), self.proc.poll,
                             needles, timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL, as a node failure: no drain, connections cut."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.killed = True

    def freeze(self):
        """SIGSTOP, as a hung node: its sockets stay open and the kernel
        still accepts connections into its backlog; nothing answers."""
        if self.alive():
            self.proc.send_signal(signal.SIGSTOP)

    def thaw(self):
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        """SIGTERM and wait; the exit status (None when it was killed)."""
        if self.killed and not self.alive():
            return None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def get_json(self, path, timeout=30):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def job_status(self, job):
        return self.get_json("/v1/jobs/%s" % job)

    def wait_ready(self, job, deadline=60.0):
        """Wait until the job answers GET /v1/topology?job= with 200 (its
        shard list resolved): the state the clients' verification needs."""
        end = time.monotonic() + deadline
        while True:
            try:
                j, r, doc = shardcast.topology.fetch_topology(self.url, job=job)
                if "job" in doc:
                    return doc["job"]
            except shardcast.ShardcastHTTPError as e:
                if e.status != 503 or time.monotonic() > end:
                    raise
            time.sleep(0.05)

    def failover_streams(self, job):
        """Streams this replica served of another replica's part."""
        return int(self.job_status(job)["replicas"]["failover_streams"])

    def metric(self, name, **labels):
        """The value of one Prometheus sample of GET /metrics (0 if absent)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            mname, _, lab = key.partition("{")
            if mname != name:
                continue
            got = ",".join(sorted(p for p in lab.rstrip("}").split(",") if p))
            if got == want:
                return float(value)
        return 0.0


def start_replicas(binary, workdir, r, args, js=None, registry=None):
    """R replicas of --replicas R; the k-th started as --replica js[k]
    (default k). args: a list of options, or a function k -> options."""
    out = []
    for k, j in enumerate(js if js is not None else range(r)):
        rep = Replica(binary, j, r, args(k) if callable(args) else args, workdir)
        out.append(rep)
        if registry is not None:
            registry.append(rep)
    return out


def read_epoch(topo, job, ranks, workers, epoch, pause=None, map=None):
    """Each of `ranks` ranks reads epoch `epoch` through a DataLoader of
    `workers` workers (ShardcastDataset with topo and the client's
    defaults, map= summarize unless given), in a thread of its own.
    pause(), when given, is called once every rank has delivered 2 samples
    of each worker, before they go on. Returns ({(rank, worker): [item,
    ...]}, the time they went on after the pause, or None)."""
    import torch.utils.data
    got = {(r, w): [] for r in range(ranks) for w in range(workers)}
    mid = threading.Barrier(ranks + 1)
    go = threading.Event()
    errors = []

    def consume(r):
        try:
            ds = shardcast.ShardcastDataset(topo.urls[0], job, rank=r, world=ranks,
                                            epoch=epoch, topology=topo,
                                            map=map or summarize)
            it = iter(torch.utils.data.DataLoader(ds, num_workers=workers,
                                                  batch_size=None))
            for n, item in enumerate(it):
                got[(r, item["worker"])].append(item)
                if pause is not None and n + 1 == 2 * workers:
                    mid.wait()
                    go.wait()
            if pause is not None and not go.is_set():
                raise AssertionError("rank %d finished before the pause" % r)
        except BaseException as e:  # noqa: B902 - reported by the caller
            errors.append((r, e))
            mid.abort()

    threads = [threading.Thread(target=consume, args=(r,), daemon=True)
               for r in range(ranks)]
    for t in threads:
        t.start()
    resumed = None
    if pause is not None:
        mid.wait(timeout=300)
        pause()
        resumed = time.monotonic()
        go.set()
    for t in threads:
        t.join(600)
        assert not t.is_alive(), "a consumer did not finish"
    assert not errors, errors
    return got, resumed


def summarize(sample):
    """map= of the consumers: what the test needs of a sample (its key, its
    content hash, the DataLoader worker, when it was delivered), so that
    the DataLoader does not move the payloads to the main process."""
    import torch.utils.data
    info = torch.utils.data.get_worker_info()
    return {"key": sample["__key__"], "hash": shardcast.sample_hash(
        {k: v for k, v in sample.items() if not (k.startswith("__") and k.endswith("__"))}),
        "worker": info.id if info is not None else 0, "t": time.monotonic()}
