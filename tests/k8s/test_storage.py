"""The storage of the rendered manifests: shardcastd's data volume (state_dir
and the shard cache under it), the cache budget derived from the volume's
size, the pod's ephemeral storage, and the security context with these
writable mounts. The rules are written in k8s/base/storage.yaml:

  cache budget       SHARDCAST_CACHE_BYTES <= 90% of the volume that holds
                     the cache directory (an emptyDir's sizeLimit, a
                     PersistentVolumeClaim's storage request), and state_dir
                     is on that volume too (the other 10% hold its indexes
                     and journals and the file system's overhead);
  ephemeral storage  the container's request = limit = the sizeLimits of
                     the pod's disk-backed emptyDirs + 1Gi (logs).

Checked for every kustomization (base, overlays, examples), and the wiring
is checked too: sizes changed in storage.yaml (and in the scale-out
overlay's storage-patch.yaml) reach every place that uses them."""

import json
import os
import re
import shutil

import pytest

from k8s_testlib import (GIB, K8S, KUSTOMIZATIONS, by_kind, parse_bytes, parse_quantity,
                         render)

BUDGET_NUM, BUDGET_DEN = 9, 10        # cache budget <= 9/10 of the volume
LOG_ALLOWANCE = 1 * GIB               # ephemeral storage beyond the emptyDirs
SERVER = "shardcastd"                 # the server's container name
# A size that Kubernetes and shardcastd read alike: binary suffixes only.
UNAMBIGUOUS = re.compile(r"^[0-9]+(Ki|Mi|Gi|Ti)?$")


def workloads(objects):
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet",
                                                 "Job", "CronJob")]


def pod_spec(w):
    if w["kind"] == "CronJob":
        return w["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return w["spec"]["template"]["spec"]


def server_workloads(objects):
    """The workloads running shardcastd: (workload, pod spec, container)."""
    out = []
    for w in workloads(objects):
        pod = pod_spec(w)
        for c in pod["containers"]:
            if c["name"] == SERVER:
                out.append((w, pod, c))
    return out


def config_of(objects):
    cms = [o for o in by_kind(objects, "ConfigMap")
           if o["metadata"]["name"].startswith("shardcast-config")]
    assert len(cms) == 1
    return json.loads(cms[0]["data"]["shardcast.json"])


def env_value(c, name):
    for e in c.get("env", []):
        if e["name"] == name:
            assert "value" in e, "%s must be a literal value in the manifest" % name
            return e["value"]
    return None


def setting(c, config, name):
    """A server setting as shardcastd resolves it: the environment over the
    config file (the command line is only --config here)."""
    assert not any(a.startswith("--" + name.replace("_", "-")) for a in c.get("args", [])), name
    v = env_value(c, "SHARDCAST_" + name.upper())
    return v if v is not None else config.get(name)


def mount_of(c, path):
    """The container's volumeMount whose mountPath holds `path` (the
    longest such)."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (
                best is None or len(mp) > len(best["mountPath"].rstrip("/"))):
            best = m
    return best


def volume_size(w, pod, name):
    """(kind, bytes) of the volume `name` of a workload's pods: an emptyDir
    (its sizeLimit) or a StatefulSet's volumeClaimTemplate (its storage
    request). A claim template takes precedence over a pod volume of the
    same name, as in the StatefulSet controller."""
    for t in w["spec"].get("volumeClaimTemplates", []) if w["kind"] == "StatefulSet" else []:
        if t["metadata"]["name"] == name:
            spec = t["spec"]
            assert spec["accessModes"] == ["ReadWriteOnce"], spec["accessModes"]
            return "claim", parse_quantity(spec["resources"]["requests"]["storage"])
    vols = [v for v in pod.get("volumes", []) if v["name"] == name]
    assert len(vols) == 1, "no volume %s" % name
    v = vols[0]
    assert "emptyDir" in v, "volume %s is neither an emptyDir nor a claim: %s" % (name, v)
    ed = v["emptyDir"] or {}
    assert ed.get("medium", "") == "", "the cache must be on disk, not in memory: %s" % v
    assert "sizeLimit" in ed, "emptyDir %s has no sizeLimit" % name
    return "emptyDir", parse_quantity(ed["sizeLimit"])


def cache_layout(w, pod, c, config):
    """budget bytes, its text, the cache dir, state_dir, and the volume
    (name, kind, bytes) holding the cache, as the rendered manifests set
    them up."""
    text = setting(c, config, "cache_bytes")
    assert text is not None, "%s %s sets no cache budget" % (w["kind"], w["metadata"]["name"])
    state_dir = setting(c, config, "state_dir")
    assert state_dir, "no state_dir: the cache would be held in memory"
    cache_dir = setting(c, config, "cache_dir") or state_dir.rstrip("/") + "/cache"
    m = mount_of(c, cache_dir)
    assert m is not None, "the cache directory %s is on the read-only root" % cache_dir
    assert not m.get("readOnly", False), m
    assert mount_of(c, state_dir) == m, "state_dir and the cache must share the data volume"
    kind, size = volume_size(w, pod, m["name"])
    return parse_bytes(text), str(text), cache_dir, state_dir, (m["name"], kind, size)


def ephemeral_rule(pod):
    """Ephemeral storage the pod needs: its disk-backed emptyDirs'
    sizeLimits + the log allowance."""
    total = LOG_ALLOWANCE
    for v in pod.get("volumes", []):
        if "emptyDir" in v and (v["emptyDir"] or {}).get("medium", "") != "Memory":
            assert "sizeLimit" in (v["emptyDir"] or {}), \
                "emptyDir %s has no sizeLimit: it could fill the node's disk" % v["name"]
            total += parse_quantity(v["emptyDir"]["sizeLimit"])
    return total


def fmt(n):
    for unit, m in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n % m == 0:
            return "%d%s" % (n // m, unit)
    return str(n)


@pytest.mark.parametrize("k", KUSTOMIZATIONS)
def test_cache_budget_is_derived_from_the_volume(rendered, k):
    """In every kustomization, every shardcastd's cache budget is at most
    90% of the volume holding its cache directory and state_dir."""
    check_budget(k, rendered[k][0])


def check_budget(k, objects):
    servers = server_workloads(objects)
    if k.startswith("examples/"):
        # The examples run training pods, no shardcastd: nothing to size.
        assert not servers and workloads(objects), k
        return
    assert len(servers) == 1, k
    config = config_of(objects)
    for w, pod, c in servers:
        budget, text, cache_dir, state_dir, (vol, kind, size) = cache_layout(w, pod, c, config)
        assert budget > 0, "%s: the cache is off (cache_bytes %s)" % (k, text)
        assert UNAMBIGUOUS.match(text), (
            "%s: cache_bytes %r: write it in Ki/Mi/Gi/Ti (\"G\" is 10^9 bytes to Kubernetes, "
            "2^30 to shardcastd)" % (k, text))
        assert budget * BUDGET_DEN <= size * BUDGET_NUM, (
            "%s: cache budget %s is more than 90%% of the %s %s (%s): at most %s "
            "(k8s/base/storage.yaml)" % (k, text, kind, vol, fmt(size),
                                         fmt(size * BUDGET_NUM // BUDGET_DEN)))
        # The environment overrides the config file: a cache_bytes in
        # shardcast.json would be silently ignored.
        if env_value(c, "SHARDCAST_CACHE_BYTES") is not None:
            assert "cache_bytes" not in config, \
                "%s: shardcast.json's cache_bytes is overridden by SHARDCAST_CACHE_BYTES" % k


@pytest.mark.parametrize("k", KUSTOMIZATIONS)
def test_ephemeral_storage_covers_the_emptydirs(rendered, k):
    """The server's ephemeral-storage request (what the scheduler reserves
    on the node) and limit are its disk-backed emptyDirs' sizeLimits + 1Gi,
    so a full cache neither overcommits the node's disk nor gets the pod
    evicted."""
    check_ephemeral(k, rendered[k][0])


def check_ephemeral(k, objects):
    for w, pod, c in server_workloads(objects):
        want = ephemeral_rule(pod)
        res = c["resources"]
        for kind in ("requests", "limits"):
            got = res[kind].get("ephemeral-storage")
            assert got is not None and parse_quantity(got) == want, (
                "%s: %s.ephemeral-storage %s; the rule (k8s/base/storage.yaml) gives %s"
                % (k, kind, got, fmt(want)))


def test_base_keeps_the_cache_in_an_emptydir(rendered):
    w, pod, c = server_workloads(rendered["base"][0])[0]
    _, _, _, _, (vol, kind, size) = cache_layout(w, pod, c, config_of(rendered["base"][0]))
    assert w["kind"] == "Deployment" and kind == "emptyDir"
    assert "volumeClaimTemplates" not in w["spec"]


def test_scale_out_keeps_the_cache_on_a_claim(rendered):
    """Each replica's state_dir and cache are on its own claim (kept across
    restarts and rescheduling); no emptyDir of the same name is left."""
    objects = rendered["overlays/scale-out"][0]
    w, pod, c = server_workloads(objects)[0]
    assert w["kind"] == "StatefulSet"
    _, _, _, _, (vol, kind, size) = cache_layout(w, pod, c, config_of(objects))
    assert kind == "claim"
    assert vol not in {v["name"] for v in pod["volumes"]}
    # Every claim template is mounted (the API requires it).
    mounts = {m["name"] for m in c["volumeMounts"]}
    assert {t["metadata"]["name"] for t in w["spec"]["volumeClaimTemplates"]} <= mounts
    # Scaling down deletes the removed replicas' claims; deleting the
    # StatefulSet (to change its claim templates) keeps them.
    assert w["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenScaled": "Delete", "whenDeleted": "Retain"}
    # No disk-backed emptyDir left: the ephemeral storage is the logs'.
    assert parse_quantity(c["resources"]["requests"]["ephemeral-storage"]) == LOG_ALLOWANCE


@pytest.mark.parametrize("k", [k for k in KUSTOMIZATIONS if not k.startswith("examples/")])
def test_writable_mounts_keep_the_root_read_only(rendered, k):
    """The cache makes the data volume writable, and nothing else: the root
    file system stays read-only, every writable mount is a bounded volume
    (an emptyDir with a sizeLimit or a claim), the config and tokens stay
    read-only, and the volumes are writable by the pod's group, not by
    running as root."""
    for w, pod, c in server_workloads(rendered[k][0]):
        sc, psc = c["securityContext"], pod["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False and sc.get("privileged") is False
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
        assert psc["fsGroup"] == psc["runAsGroup"]
        # The group is set on the volume once, not on every cached shard
        # at every start.
        assert psc["fsGroupChangePolicy"] == "OnRootMismatch"
        writable = [m for m in c["volumeMounts"] if not m.get("readOnly", False)]
        assert {m["mountPath"] for m in writable} == {"/tmp", setting(
            c, config_of(rendered[k][0]), "state_dir")}, writable
        for m in writable:
            if m["mountPath"] != "/tmp":
                volume_size(w, pod, m["name"])  # an emptyDir with a sizeLimit, or a claim
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["tmp"]["emptyDir"]["medium"] == "Memory" and vols["tmp"]["emptyDir"]["sizeLimit"]
        assert not any("hostPath" in v for v in pod["volumes"])
        for m in c["volumeMounts"]:
            if m["name"] in ("config", "tokens"):
                assert m.get("readOnly") is True, m


def storage_values(path):
    """data-volume, cache-bytes and ephemeral-storage of a storage.yaml or
    storage-patch.yaml."""
    import yaml
    with open(path) as f:
        data = yaml.safe_load(f)["data"]
    return data["data-volume"], data["cache-bytes"], data["ephemeral-storage"]


def test_storage_yaml_comment_states_the_values():
    """The shipped values written in storage.yaml's comment are its data."""
    path = os.path.join(K8S, "base", "storage.yaml")
    vol, budget, eph = storage_values(path)
    text = open(path).read()
    pct = parse_bytes(budget) * 100 // parse_quantity(vol)
    assert re.search(r"Shipped: an? %s volume, an? %s cache \(%d%%\), %s of ephemeral storage"
                     % (vol, budget, pct, eph), text), (vol, budget, pct, eph)


def rendered_sizes(objects):
    w, pod, c = server_workloads(objects)[0]
    budget, text, _, _, (vol, kind, size) = cache_layout(w, pod, c, config_of(objects))
    return size, text, c["resources"]["requests"]["ephemeral-storage"], \
        c["resources"]["limits"]["ephemeral-storage"]


def copy_k8s(tmp_path):
    k8s = tmp_path / "k8s"
    shutil.copytree(K8S, str(k8s), ignore=shutil.ignore_patterns("node_modules"))
    return k8s


def rewrite(k8s, rel, **values):
    """Set keys of the ConfigMap data in k8s/<rel> (data_volume= ...)."""
    p = k8s / rel
    text = p.read_text()
    for key, val in values.items():
        text, n = re.subn(r"(?m)^(  %s: ).*$" % key.replace("_", "-"), r"\g<1>" + val, text)
        assert n == 1, (rel, key)
    p.write_text(text)


@pytest.mark.parametrize("rel,k,values,complaint", [
    ("base/storage.yaml", "base", {"cache_bytes": "19Gi"}, "more than 90% of the emptyDir"),
    ("base/storage.yaml", "overlays/s3-compatible", {"data_volume": "19Gi"},
     "more than 90% of the emptyDir"),
    ("base/storage.yaml", "base", {"cache_bytes": "18G"}, "write it in Ki/Mi/Gi/Ti"),
    ("base/storage.yaml", "base", {"cache_bytes": "0"}, "the cache is off"),
    ("overlays/scale-out/storage-patch.yaml", "overlays/scale-out",
     {"data_volume": "10Gi"}, "more than 90% of the claim"),
    ("base/storage.yaml", "base", {"ephemeral_storage": "20Gi"}, "the rule"),
    ("overlays/scale-out/storage-patch.yaml", "overlays/scale-out",
     {"ephemeral_storage": "21Gi"}, "the rule"),
])
def test_the_checks_reject_wrong_sizes(tmp_path, rel, k, values, complaint):
    """The checks above do fail on sizes that break the rules (so their
    passing means something)."""
    k8s = copy_k8s(tmp_path)
    rewrite(k8s, rel, **values)
    objects = render(k, root=str(k8s))[0]
    with pytest.raises(AssertionError, match=re.escape(complaint)):
        check_budget(k, objects)
        check_ephemeral(k, objects)


def test_sizes_are_written_once(tmp_path):
    """The sizes in storage.yaml (and the scale-out overlay's
    storage-patch.yaml) are the only ones to edit: changed there, they reach
    the volume, the budget and the resources of every kustomization built
    on them."""
    k8s = copy_k8s(tmp_path)
    rewrite(k8s, "base/storage.yaml", data_volume="64Gi", cache_bytes="57Gi",
            ephemeral_storage="65Gi")
    rewrite(k8s, "overlays/scale-out/storage-patch.yaml", data_volume="500Gi",
            cache_bytes="450Gi", ephemeral_storage="1Gi")
    for k in KUSTOMIZATIONS:
        if k.startswith("examples/"):
            continue
        objects = render(k, root=str(k8s))[0]
        size, budget, req, lim = rendered_sizes(objects)
        if k == "overlays/scale-out":
            assert (size, budget, req, lim) == (500 * GIB, "450Gi", "1Gi", "1Gi"), k
        else:
            assert (size, budget, req, lim) == (64 * GIB, "57Gi", "65Gi", "65Gi"), k
