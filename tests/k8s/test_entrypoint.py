"""k8s/image/entrypoint.sh: the replica number of a StatefulSet pod from
its ordinal, and clear refusals of anything else (exit status 2 before
shardcastd starts)."""

import os
import subprocess
import sys

import pytest

from k8s_testlib import ENTRYPOINT

# A stand-in daemon that prints what it was started with.
SHOW = ("import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
        "'replica': os.environ.get('SHARDCAST_REPLICA')}))")


def run(env, args=(), tmp_path=None):
    daemon = tmp_path / "fake-shardcastd"
    daemon.write_text("#!%s\n%s\n" % (sys.executable, SHOW))
    daemon.chmod(0o755)
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SHARDCAST_DAEMON": str(daemon)}
    full.update(env)
    return subprocess.run(["/bin/sh", ENTRYPOINT] + list(args), env=full, capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("pod,replicas,want", [
    ("shardcast-0", "3", "0"), ("shardcast-2", "3", "2"),
    ("my-data-server-11", "12", "11"), ("a-b-c-7", "8", "7")])
def test_ordinal_becomes_replica(tmp_path, pod, replicas, want):
    import json
    p = run({"SHARDCAST_POD_NAME": pod, "SHARDCAST_REPLICAS": replicas},
            ["--config", "/etc/shardcast/shardcast.json"], tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out == {"argv": ["--config", "/etc/shardcast/shardcast.json"], "replica": want}


def test_single_replica_needs_no_ordinal(tmp_path):
    import json
    p = run({"SHARDCAST_POD_NAME": "shardcast-7c9f8d-xk2p"}, [], tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["replica"] is None


def test_explicit_replica_is_kept(tmp_path):
    """SHARDCAST_REPLICA from the downward API (pod-index label) wins."""
    import json
    p = run({"SHARDCAST_POD_NAME": "whatever", "SHARDCAST_REPLICAS": "4",
             "SHARDCAST_REPLICA": "3"}, [], tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["replica"] == "3"


@pytest.mark.parametrize("pod,replicas,msg", [
    ("shardcast-3", "3", "scale the StatefulSet and SHARDCAST_REPLICAS together"),
    ("shardcast", "2", "no '-<ordinal>' suffix"),
    ("shardcast-01", "3", "does not end in a StatefulSet ordinal"),
    ("shardcast-x1", "3", "does not end in a StatefulSet ordinal"),
    ("shardcast-1234567890", "3", "does not end in a StatefulSet ordinal"),
    ("shardcast-1", "0", "is not a replica count"),
    ("shardcast-1", "three", "is not a replica count"),
    ("shardcast-1", "-2", "is not a replica count")])
def test_bad_settings_refused(tmp_path, pod, replicas, msg):
    p = run({"SHARDCAST_POD_NAME": pod, "SHARDCAST_REPLICAS": replicas}, [], tmp_path)
    assert p.returncode == 2
    assert p.stdout == ""  # the daemon never started
    assert msg in p.stderr, p.stderr


def test_host_name_is_the_fallback(tmp_path):
    """Without SHARDCAST_POD_NAME the host name (the pod name in
    Kubernetes) is used: here it has no ordinal, so R > 1 is refused
    naming it."""
    host = os.uname().nodename
    p = run({"SHARDCAST_REPLICAS": "2"}, [], tmp_path)
    if host.rsplit("-", 1)[-1].isdigit() and int(host.rsplit("-", 1)[-1]) < 2:
        assert p.returncode == 0
    else:
        assert p.returncode == 2 and host in p.stderr, p.stderr
