"""Helpers of the Kubernetes tests (tests/k8s): rendering the kustomizations
with `kubectl kustomize`, the memory budget rule of the manifests, and
shardcastd replicas started through the image's entrypoint on loopback.
The module name is unique so it cannot clash with other test helpers."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from fractions import Fraction

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
K8S = os.path.join(REPO, "k8s")
ENTRYPOINT = os.path.join(K8S, "image", "entrypoint.sh")
for p in (os.path.join(REPO, "clients", "python"), os.path.join(REPO, "tests", "integration")):
    if p not in sys.path:
        sys.path.insert(0, p)

from shardcast_testlib import free_port, host_of, read_log, wait_log_text  # noqa: E402,F401

# Every kustomization that must render (base, overlays, examples).
KUSTOMIZATIONS = ["base", "overlays/scale-out", "overlays/prometheus-operator",
                  "overlays/s3-compatible", "examples/training-job"]

MIB = 1 << 20
KIB = 1 << 10

STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 90.0      # seconds for a clean exit after SIGTERM: a bound on
                         # waiting for the exit (the drain's default grace is 30 s)


def render(kustomization, root=K8S):
    """The objects `kubectl kustomize k8s/<kustomization>` renders, and the
    YAML text; `root` is another copy of k8s/."""
    proc = subprocess.run(["kubectl", "kustomize", os.path.join(root, kustomization)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError("kubectl kustomize k8s/%s failed:\n%s" % (kustomization, proc.stderr))
    return [d for d in yaml.safe_load_all(proc.stdout) if d], proc.stdout


def by_kind(objects, kind, name=None):
    out = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return out


def parse_bytes(v):
    """A byte count as shardcastd reads it (libshardio's sio_parse_units):
    an integer, or a string with an optional binary suffix, any case
    (B, K/KB/KiB/Ki, M..., G..., T...)."""
    if isinstance(v, int):
        return v
    text = str(v).strip().lower()
    digits = len(text) - len(text.lstrip("0123456789"))
    n, suf = int(text[:digits]), text[digits:]
    mult = {"": 1, "b": 1}
    for i, p in enumerate("kmgt"):
        for s in (p, p + "b", p + "ib", p + "i"):
            mult[s] = 1 << (10 * (i + 1))
    return n * mult[suf]


GIB = 1 << 30

# Kubernetes resource.Quantity suffixes: binary (Ki = 2^10 ...) and decimal
# SI (k = 10^3, M = 10^6, G = 10^9 ...). "G" is 10^9 bytes to Kubernetes and
# 2^30 to shardcastd (parse_bytes), so the two are parsed apart.
_QUANTITY = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_QUANTITY_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
                    "Ei": 2 ** 60, "n": Fraction(1, 10 ** 9), "u": Fraction(1, 10 ** 6),
                    "m": Fraction(1, 1000), "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
                    "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18, None: 1}


def parse_quantity(q):
    """A Kubernetes quantity (resource.Quantity: "20Gi", "21474836480",
    "20G", "1.5Ti", "2e9") as a whole number of bytes, rounded up as
    Kubernetes rounds a quantity's value."""
    m = _QUANTITY.match(str(q))
    if not m:
        raise ValueError("not a Kubernetes quantity: %r" % (q,))
    sign, num, suf = m.groups()
    if suf and suf[0] in "eE" and suf not in _QUANTITY_SUFFIX:
        mult = Fraction(10) ** int(suf[1:])
    else:
        mult = _QUANTITY_SUFFIX[suf]
    v = Fraction(num) * mult
    if sign == "-":
        v = -v
    return math.ceil(v)


# The memory rule of the manifests (documented in k8s/base/deployment.yaml
# and k8s/README.md). Constants: shardcastd's base RSS, the read buffer of
# each open shard, libshardio's default read-ahead bytes per shard reader,
# the per-epoch slack of tests/contract/test_memory.py, and the server
# defaults of the settings a config file may leave out.
BASE_RSS = 16 * MIB
READ_BUFFER = 256 * KIB
READAHEAD_BYTES = 4 * MIB
EPOCH_SLACK = 16 * MIB
DEFAULTS = {"max_epochs": 2, "window_bytes": 256 * MIB, "max_connections": 4096,
            "connection_memory": 64 * KIB, "stage_bytes": 256 * MIB}
JOB_DEFAULTS = {"shuffle_buffer_bytes": 256 * MIB, "shuffle_buffer": 1000,
                "interleave": 4, "read_threads": 2}
ROUND = 64 * MIB
# Staging (docs/architecture.md "Memory", plain tars): per epoch the steps'
# budget and as much for streams behind, each slot's fetch ahead of the
# order (stage_bytes / (2 x interleave), within 1 and 16 MiB) and what of
# it waits to be punched (1 MiB), the buffer's samples (their payload, and
# a page at each end and their tar headers: 12 KiB each), what waits to
# be punched of the shards the buffer spans (8 MiB) and what is kept behind
# the cut for clients that resume (stage_bytes / 2 at most); once per server
# the spares (stage_bytes).
STAGE_AHEAD_MIN, STAGE_AHEAD_MAX = 1 * MIB, 16 * MIB
STAGE_SAMPLE_OVERHEAD = 12 * KIB
STAGE_THIN_TOTAL = 8 * MIB


def stage_epoch_bytes(stage_bytes, job):
    """Staged bytes of one epoch of job (a dict with JOB_DEFAULTS' keys)."""
    ahead = min(STAGE_AHEAD_MAX, max(STAGE_AHEAD_MIN, stage_bytes // (2 * job["interleave"])))
    return (2 * stage_bytes + stage_bytes // 2 + job["interleave"] * (ahead + MIB) +
            job["shuffle_buffer_bytes"] + job["shuffle_buffer"] * STAGE_SAMPLE_OVERHEAD +
            STAGE_THIN_TOTAL)


def memory_bound(config):
    """Upper bound of shardcastd's RSS for a config file (dict)."""
    srv = dict(DEFAULTS)
    for k in srv:
        if k in config:
            srv[k] = parse_bytes(config[k]) if k.endswith(("bytes", "memory")) else int(config[k])
    # (stage_bytes 0, deprecated, stands for half the window, 16 MiB at least)
    stage = srv["stage_bytes"] or max(srv["window_bytes"] // 2, 16 * MIB)
    per_jobs = 0
    for job in config["jobs"]:
        j = dict(JOB_DEFAULTS)
        for k in j:
            if k in job:
                j[k] = parse_bytes(job[k]) if k.endswith("bytes") else int(job[k])
        epoch = (j["shuffle_buffer_bytes"] + srv["window_bytes"] +
                 (j["interleave"] + j["read_threads"]) * (READAHEAD_BYTES + READ_BUFFER) +
                 EPOCH_SLACK + stage_epoch_bytes(stage, j))
        per_jobs += srv["max_epochs"] * epoch
    return (BASE_RSS + per_jobs + srv["max_connections"] * srv["connection_memory"] +
            stage)


def memory_limit(config):
    """The limit the manifests must carry: bound x 1.1 rounded up to 64 MiB."""
    b = memory_bound(config) * 11 // 10
    return -(-b // ROUND) * ROUND


def server_binary():
    """$SHARDCAST_BIN, else build/shardcastd, else a build-*/shardcastd."""
    from shardcast_testlib import find_server_binary
    return find_server_binary()


class Replica:
    """One shardcastd started through k8s/image/entrypoint.sh as pod
    `pod` of a StatefulSet of `replicas` (SHARDCAST_POD_NAME and
    SHARDCAST_REPLICAS, as the scale-out overlay sets them)."""

    def __init__(self, binary, pod, replicas, host, port, args, workdir, extra_env=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAST_")}
        env.update({"SHARDCAST_DAEMON": binary, "SHARDCAST_POD_NAME": pod,
                    "SHARDCAST_REPLICAS": str(replicas), "SHARDCAST_LISTEN": host,
                    "SHARDCAST_PORT": str(port)})
        env.update(extra_env or {})
        self.args = ["/bin/sh", ENTRYPOINT] + list(args)
        self.stderr_path = os.path.join(workdir, "%s-%d.stderr" % (pod, id(self)))
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(self.args, env=env, stdout=subprocess.PIPE,
                                     stderr=self._stderr, stdin=subprocess.DEVNULL)
        result = []
        t = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()),
                             daemon=True)
        t.start()
        t.join(STARTUP_TIMEOUT)
        line = result[0].decode("utf-8", "replace") if result else ""
        if not line.startswith("listening="):
            self.stop()
            raise RuntimeError("replica %s did not start: %r\n%s" % (pod, line, self.log()))
        self.host, self.port = host, port
        self.url = "http://%s:%d" % (host, port)
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def log(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-8000:]

    def wait_log(self, *needles, timeout=60):
        """The whole log once every needle is in it (see wait_log_text)."""
        return wait_log_text(lambda: read_log(self.stderr_path), self.proc.poll,
                             needles, timeout)

    def get_json(self, path, headers=None, timeout=10):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def kill(self):
        """SIGKILL: a replica that dies without draining (a node failure)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode
