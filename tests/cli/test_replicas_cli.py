"""The `shardcast` command against a replica set (issue 25): R shardcastd
processes on loopback (--replica J --replicas R, one job), replica J
listening on 127.0.1.J with one port P for all, so that the template
"http://127.0.1.{j}:P" names them as "http://shardcast-{j}...:8080" does in a
cluster.

  * a wrong set-up fails loudly before any sample: two servers that are both
    replica 0 of 2; a replica whose seed differs (the message names the
    setting and each replica's value);
  * a replica SIGKILLed mid-epoch and not restarted: `shardcast bench` with
    9 consumers of 3 replicas still delivers every sample of the epoch once
    (checked against mkwds' manifest, partition "none"), the killed
    replica's consumers continuing on the others from where they were; then
    the replica is started again and serves the next epoch to its own
    consumers, no failover;
  * `shardcast cat` tells each failover on stderr, and its output is the
    same bytes as an uninterrupted run of the same consumer.

Mid-epoch is a state, not a time: the replicas read their shards over HTTP
from a source in this process that serves the first half of each shard and
holds the second half back until the test lets it go. The epoch cannot end
before that, and the consumers have their first samples (the bench progress
line's min_samples, the server's status for `cat`) before the kill.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from shardcast_testlib import (GatedSource, Server, find_server_binary, free_port, host_of,
                               make_dataset)

TIMEOUT = 120            # seconds any one wait may take (a loaded machine)
EXIT_OK, EXIT_USAGE, EXIT_CONFIG = 0, 2, 9
SHARDS, PER_SHARD = 9, 40


def clean_env(extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAST_")
         or k in ("SHARDCAST_CLI", "SHARDCAST_BIN", "SHARDCAST_BUILD")}
    e.update(extra or {})
    return e


def run(cli, *args, env=None):
    return subprocess.run([cli] + list(args), capture_output=True, timeout=TIMEOUT,
                          env=clean_env(env))


def wait_for(what, cond, timeout=TIMEOUT):
    """Poll cond() until it is true; fail naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting for %s" % what)
        time.sleep(0.05)


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None
    except OSError:
        return None, None


class ReplicaSet:
    """R shardcastd of one job: replica j on 127.0.1.j:port."""

    def __init__(self, workdir, source, replicas, extra=(), per_replica=None):
        self.binary = find_server_binary()
        if self.binary is None:
            pytest.fail("shardcastd not found: build it or set SHARDCAST_BIN", pytrace=False)
        self.workdir, self.source, self.R = workdir, source, replicas
        self.extra, self.per_replica = list(extra), per_replica or {}
        self.port = free_port(replicas)
        self.servers = [None] * replicas
        self.killed = []
        for j in range(replicas):
            self.start(j)

    def start(self, j):
        args = ["--listen", host_of(j), "--port", str(self.port), "--job", "train",
                "--source", self.source, "--replica", str(j), "--replicas", str(self.R),
                "--seed", "3"] + self.extra + list(self.per_replica.get(j, ()))
        self.servers[j] = Server(self.binary, args, self.workdir)

    def url(self, j):
        return "http://%s:%d" % (host_of(j), self.port)

    @property
    def urls(self):
        return [self.url(j) for j in range(self.R)]

    @property
    def template(self):
        return "http://127.0.1.{j}:%d" % self.port

    def ready(self, j):
        """The job has its fingerprint on replica j (resolved)."""
        return wait_for("replica %d to resolve the job" % j,
                        lambda: get_json(self.url(j) + "/v1/topology?job=train")[0] == 200)

    def kill(self, j):
        s = self.servers[j]
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(TIMEOUT)
        s._stderr.close()
        self.killed.append(s)
        self.servers[j] = None

    def stop(self):
        bad = []
        for s in self.servers:
            if s is not None:
                rc = s.stop()
                if rc not in (0, None):
                    bad.append("%s: exit %s\n%s" % (" ".join(s.args), rc, s.log()))
        self.servers = [None] * self.R
        return bad


@pytest.fixture
def replica_sets(cli_workdir):
    made = []

    def make(*a, **kw):
        rs = ReplicaSet(cli_workdir, *a, **kw)
        made.append(rs)
        return rs

    yield make
    bad = []
    for rs in made:
        bad += rs.stop()
    assert not bad, "shardcastd did not exit cleanly:\n" + "\n".join(bad)


# --------------------------------------------------------------------------
# A source that holds the second half of every shard back


@pytest.fixture(scope="module")
def wds9(tmp_path_factory):
    """9 shards x 40 samples = 360: 40 per consumer of 9."""
    d = str(tmp_path_factory.mktemp("wds9"))
    return d, make_dataset(d, shards=SHARDS, per_shard=PER_SHARD, size=600, seed=11)


@pytest.fixture
def gated(wds9):
    g = GatedSource(wds9[0])
    yield g
    g.close()


def source_of(g):
    return "%s/train-{000000..%06d}.tar" % (g.url, SHARDS - 1)


# Settings of the failover tests: every sample exactly once over the set,
# a small shuffle buffer (samples flow from the first halves), shards read
# slowly are not a stall of the source.
FAILOVER_ARGS = ["--partition", "none", "--shuffle-buffer", "8", "--interleave", "2",
                 "--fetch-stall-timeout-ms", "300s"]


# --------------------------------------------------------------------------
# A wrong set-up


def test_two_replicas_claiming_one_place_fail_loudly(cli, cli_wds, replica_sets):
    rs = replica_sets(cli_wds.path, 2, per_replica={1: ["--replica", "0"]})
    for j in range(2):
        rs.ready(j)
    a, b = rs.urls
    base = ["--urls", "%s,%s" % (a, b), "--job", "train"]
    p = run(cli, "cat", *base, "--rank", "0", "--world", "2")
    err = p.stderr.decode()
    assert p.returncode == EXIT_CONFIG, (p.returncode, err)
    assert p.stdout == b"", "a sample was written"
    assert "%s and %s both report replica 0 of 2" % (a, b) in err, err
    assert "%s = replica 1 of 2 (reports 0 of 2)" % b in err, err
    # bench checks once, before any consumer starts
    p = run(cli, "bench", *base, "-n", "2")
    err = p.stderr.decode()
    assert p.returncode == EXIT_CONFIG, (p.returncode, err)
    assert err.count("both report replica 0 of 2") == 1, err
    assert b"samples" not in p.stdout


def test_a_replica_with_another_seed_fails_naming_the_setting(cli, cli_wds, replica_sets):
    rs = replica_sets(cli_wds.path, 2, per_replica={1: ["--seed", "4"]})
    for j in range(2):
        rs.ready(j)
    a, b = rs.urls
    env = {"SHARDCAST_URLS": "%s,%s" % (a, b)}
    p = run(cli, "cat", "--job", "train", "--rank", "1", "--world", "3", env=env)
    err = p.stderr.decode()
    assert p.returncode == EXIT_CONFIG, (p.returncode, err)
    assert p.stdout == b""
    assert "disagree on the order of job train" in err, err
    assert "seed: 3 at %s, 4 at %s" % (a, b) in err, err
    assert "%s = replica 0 of 2" % a in err and "%s = replica 1 of 2" % b in err
    # --no-verify skips the check (the stream itself is replica 1's part)
    p = run(cli, "cat", "--job", "train", "--rank", "1", "--world", "3", "--no-verify",
            "-o", os.devnull, env=env)
    assert p.returncode == EXIT_OK, p.stderr


def test_replica_set_usage_errors(cli, cli_wds, replica_sets):
    rs = replica_sets(cli_wds.path, 2)
    a, b = rs.urls
    p = run(cli, "cat", "--urls", "%s,%s" % (a, b), "--job", "train", "--world", "1")
    assert p.returncode == EXIT_USAGE and b"every replica needs a consumer" in p.stderr
    p = run(cli, "cat", "--urls", a, "--server", b, "--job", "train")
    assert p.returncode == EXIT_USAGE and b"not both" in p.stderr
    p = run(cli, "cat", "--urls", "3", "--job", "train")
    assert p.returncode == EXIT_USAGE and b"not an http(s)://" in p.stderr
    p = run(cli, "cat", "--urls", "%s,%s" % (a, a), "--job", "train", "--world", "2")
    assert p.returncode == EXIT_USAGE and b"given twice" in p.stderr
    p = run(cli, "cat", "--job", "train", env={"SHARDCAST_URL_TEMPLATE": rs.template})
    assert p.returncode == EXIT_USAGE and b"SHARDCAST_REPLICAS" in p.stderr
    p = run(cli, "cat", "--job", "train", env={"SHARDCAST_URL_TEMPLATE": rs.template,
                                             "SHARDCAST_URLS": a})
    assert p.returncode == EXIT_USAGE and b"not both" in p.stderr
    # The right set through the template: consumer 1 of 2 is replica 1's.
    rs.ready(0)
    rs.ready(1)
    p = run(cli, "cat", "--job", "train", "--rank", "1", "--world", "2", "-o", os.devnull,
            env={"SHARDCAST_URL_TEMPLATE": rs.template, "SHARDCAST_REPLICAS": "2"})
    assert p.returncode == EXIT_OK, p.stderr
    assert b"failovers=0 status=ok" in p.stderr
    for cmd in ("cat", "bench"):
        text = run(cli, cmd, "--help").stdout.decode()
        assert "--urls URL,URL" in text and "--no-verify" in text
    assert "  9  the replica set is set up wrongly" in run(cli, "--help").stdout.decode()


# --------------------------------------------------------------------------
# A replica killed mid-epoch


class Bench:
    """`shardcast bench` running, its stderr lines collected as they come."""

    def __init__(self, cli, args, env):
        self.proc = subprocess.Popen([cli, "bench"] + args, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=clean_env(env))
        self.lines = []
        self.out = []
        self._t = [threading.Thread(target=self._read_err, daemon=True),
                   threading.Thread(target=lambda: self.out.append(self.proc.stdout.read()),
                                    daemon=True)]
        for t in self._t:
            t.start()

    def _read_err(self):
        for line in self.proc.stderr:
            self.lines.append(line.decode("utf-8", "replace"))

    def min_samples(self):
        """min_samples of the last progress line (0 before one)."""
        for line in reversed(self.lines):
            m = re.search(r"running=(\d+) min_samples=(\d+)", line)
            if m:
                return int(m.group(2))
        return 0

    def finish(self):
        try:
            self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("bench did not finish:\n" + "".join(self.lines[-50:]))
        for t in self._t:
            t.join(TIMEOUT)
        return self.proc.returncode, b"".join(self.out), "".join(self.lines)


def test_a_replica_killed_mid_epoch_and_restarted(cli, wds9, gated, replica_sets):
    manifest = os.path.join(wds9[0], "manifest.json")
    rs = replica_sets(source_of(gated), 3, extra=FAILOVER_ARGS)
    for j in range(3):
        rs.ready(j)
    env = {"SHARDCAST_URL_TEMPLATE": rs.template, "SHARDCAST_REPLICAS": "3"}
    args = ["--job", "train", "-n", "9", "--interval", "1", "--json", "--verify", manifest]

    b = Bench(cli, args + ["--epoch", "0"], env)
    # Mid-epoch: every consumer has samples, the second halves held back.
    wait_for("every consumer's first samples", lambda: b.min_samples() >= 1)
    killed = 1
    rs.kill(killed)
    gated.open()
    rc, out, err = b.finish()
    assert rc == EXIT_OK, (rc, out[-3000:], err[-3000:])
    doc = json.loads(out)
    v = doc["verify"]
    assert v["ok"] and v["union_checked"], v
    assert v["missing"] == 0 and v["duplicates"] == 0 and v["unknown"] == 0, v
    assert doc["samples"] == SHARDS * PER_SHARD
    detail = {d["rank"]: d for d in doc["consumers_detail"]}
    for c in range(9):
        assert detail[c]["complete"], detail[c]
        if c % 3 == killed:
            assert detail[c]["failovers"] >= 1, detail[c]
        else:
            assert detail[c]["failovers"] == 0, detail[c]
    told = re.findall(r"shardcast bench: replica 1 \(%s\) failed: .*; continuing consumer "
                      r"(\d+) at position (\d+) from replica (\d) \((\S+)\)" %
                      re.escape(rs.url(killed)), err)
    assert sorted({int(t[0]) for t in told}) == [1, 4, 7], err
    for c, pos, to, url in told:
        assert int(to) != killed and url == rs.url(int(to))
        assert int(pos) >= 1  # each had samples before the kill
    print("\nfailovers %d; max stall %.3f s (longest gap between two samples of a "
          "consumer, the held-back source included); from a replica's failure to "
          "the next sample: %.3f s" % (doc["failovers"], doc["max_stall_s"],
                                       doc["max_failover_stall_s"]))

    # The replica back, the next epoch: its consumers are its own again.
    rs.start(killed)
    rs.ready(killed)
    b = Bench(cli, args + ["--epoch", "1"], env)
    rc, out, err = b.finish()
    assert rc == EXIT_OK, (rc, out[-3000:], err[-3000:])
    doc = json.loads(out)
    assert doc["verify"]["ok"] and doc["verify"]["missing"] == 0, doc["verify"]
    assert doc["failovers"] == 0 and "failed:" not in err, err
    assert all(d["failovers"] == 0 and d["replica"] == d["rank"] % 3
               for d in doc["consumers_detail"])


def test_a_stopped_replica_is_left_on_its_heartbeats(cli, wds9, gated, replica_sets):
    """Replica 1 SIGSTOPped mid-epoch while every consumer waits for the
    source's held-back halves (the live replicas' streams send heartbeats
    meanwhile): its consumers see the silence after the heartbeat timeout
    (3 s by default, where the idle timeout of 60 s was the bound) and move
    on; no consumer of a live replica fails over; exactly once."""
    manifest = os.path.join(wds9[0], "manifest.json")
    rs = replica_sets(source_of(gated), 3, extra=FAILOVER_ARGS)
    for j in range(3):
        rs.ready(j)
    env = {"SHARDCAST_URL_TEMPLATE": rs.template, "SHARDCAST_REPLICAS": "3"}
    args = ["--job", "train", "-n", "9", "--interval", "1", "--json", "--verify", manifest,
            "--epoch", "0"]
    b = Bench(cli, args, env)
    wait_for("every consumer's first samples", lambda: b.min_samples() >= 1)
    stopped = rs.servers[1]
    stopped.proc.send_signal(signal.SIGSTOP)
    try:
        # The halves held back until the stopped replica's consumers left
        # it: they wait on it with nothing coming, the others on heartbeats.
        wait_for("the stopped replica's consumers to fail over",
                 lambda: len(re.findall(r"replica 1 \(\S+\) failed: ", "".join(b.lines))) >= 3)
        gated.open()
        rc, out, err = b.finish()
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
    assert rc == EXIT_OK, (rc, out[-3000:], err[-3000:])
    doc = json.loads(out)
    v = doc["verify"]
    assert v["ok"] and v["missing"] == 0 and v["duplicates"] == 0, v
    detail = {d["rank"]: d for d in doc["consumers_detail"]}
    for c in range(9):
        assert detail[c]["complete"], detail[c]
        assert (detail[c]["failovers"] >= 1) == (c % 3 == 1), detail[c]
    assert "no byte and no heartbeat" in err or "header timeout" in err, err[-3000:]
    print("\nstopped replica: failovers %d; from its failure to the next sample: %.3f s"
          % (doc["failovers"], doc["max_failover_stall_s"]))


# Bytes a client must have received before its replica is killed: the
# response head and more than one whole sample of wds9 (600-byte fields,
# each a tar member of a 512-byte header and its padded data).
RECEIVED_BEFORE_KILL = 16384


def received_from(host, port):
    """The most bytes any TCP connection of this machine to host:port has
    received (the kernel's tcpi_bytes_received, from `ss -ti`)."""
    p = subprocess.run(["ss", "-tinH", "state", "established", "dst",
                        "%s:%d" % (host, port)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    return max((int(n) for n in re.findall(r"bytes_received:(\d+)", p.stdout)),
               default=0)


def test_cat_tells_the_failover_and_writes_the_same_share(cli, wds9, gated, replica_sets,
                                                         tmp_path):
    rs = replica_sets(source_of(gated), 2, extra=FAILOVER_ARGS)
    for j in range(2):
        rs.ready(j)
    out = tmp_path / "failover.tar"
    args = ["--urls", ",".join(rs.urls), "--job", "train", "--rank", "0", "--world",
            "2", "--epoch", "0"]
    p = subprocess.Popen([cli, "cat"] + args + ["-o", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=clean_env())
    try:
        # Consumer 0 of 2 is replica 0's only one: wait until replica 0
        # sent it samples (the rest of its shards held back), then kill it.
        # Replica 0 counts a sample sent once it is queued: it may still be
        # in the server's buffers when the server is killed, and the client
        # would resume at 0. So wait on the client's socket: what its
        # kernel received is read even after the server is gone.
        wait_for("consumer 0 to receive replica 0's first samples",
                 lambda: received_from(host_of(0), rs.port) >= RECEIVED_BEFORE_KILL)
        rs.kill(0)
        gated.open()
        _, err = p.communicate(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = err.decode()
    assert p.returncode == EXIT_OK, err
    m = re.search(r"shardcast cat: replica 0 \((\S+)\) failed: (.+); continuing consumer 0 "
                  r"at position (\d+) from replica 1 \((\S+)\)\n", err)
    assert m, err
    assert m.group(1) == rs.url(0) and m.group(4) == rs.url(1)
    assert int(m.group(3)) >= 1
    assert "failovers=1 status=ok" in err

    # The same consumer, uninterrupted (replica 0 back): the same bytes.
    rs.start(0)
    rs.ready(0)
    ref = tmp_path / "ref.tar"
    p2 = run(cli, "cat", *args, "-o", str(ref))
    assert p2.returncode == EXIT_OK and b"failovers=0" in p2.stderr, p2.stderr
    assert out.read_bytes() == ref.read_bytes()
    assert len(out.read_bytes()) > 0
