"""What the rendered manifests promise: probes, security, resources derived
from the configured buffers, the scale-out wiring, and settings that the
real shardcastd accepts (it is started with the rendered ConfigMap and
environment and must become ready)."""

import json
import os
import re
import secrets
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from k8s_testlib import (KUSTOMIZATIONS, Replica, by_kind, free_port, host_of, memory_bound,
                         memory_limit, parse_bytes, parse_quantity)

# Variables the entrypoint reads, not shardcastd settings.
ENTRYPOINT_VARS = {"SHARDCAST_POD_NAME", "SHARDCAST_DAEMON"}
SERVER_KUSTOMIZATIONS = [k for k in KUSTOMIZATIONS if not k.startswith("examples/")]


def workload(objects):
    w = by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet")
    assert len(w) == 1, [o["kind"] for o in w]
    return w[0]


def container(objects):
    return workload(objects)["spec"]["template"]["spec"]["containers"][0]


def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}


def config_of(objects):
    cms = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("shardcast-config")]
    assert len(cms) == 1
    return json.loads(cms[0]["data"]["shardcast.json"])


@pytest.mark.parametrize("k", SERVER_KUSTOMIZATIONS)
def test_pod_security_and_probes(rendered, k):
    objects = rendered[k][0]
    pod = workload(objects)["spec"]["template"]["spec"]
    c = container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    # The probes' named port is the container's port, which the Service
    # targets.
    port = c["ports"][0]
    assert c["livenessProbe"]["httpGet"]["port"] == port["name"]
    svc = by_kind(objects, "Service", "shardcast")[0]
    assert svc["spec"]["ports"][0]["targetPort"] == port["name"]
    assert env_of(c)["SHARDCAST_PORT"]["value"] == str(port["containerPort"])
    # The Service and the PDB select exactly the workload's pods.
    labels = workload(objects)["spec"]["template"]["metadata"]["labels"]
    for sel in (svc["spec"]["selector"],
                by_kind(objects, "PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"]):
        assert sel.items() <= labels.items()
        assert "app.kubernetes.io/name" in sel
    # The recommended labels, the changing ones outside the selectors.
    for key in ("app.kubernetes.io/instance", "app.kubernetes.io/version",
                "app.kubernetes.io/managed-by"):
        assert key in labels, key
        assert key not in workload(objects)["spec"]["selector"]["matchLabels"], key
    # Secrets are files, not environment variables.
    e = env_of(c)
    assert "SHARDCAST_TOKEN" not in e and "SHARDCAST_ADMIN_TOKEN" not in e
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert os.path.dirname(e["SHARDCAST_TOKEN_FILE"]["value"]) in mounts
    assert "/tmp" in mounts
    # shard indexes and journals live on their own volume
    assert e["SHARDCAST_STATE_DIR"]["value"] in mounts
    # graceful stop: the pod's grace period covers the server's drain
    assert pod["terminationGracePeriodSeconds"] > config_of(objects)["drain_grace"]


def test_metrics_discovery(rendered):
    ann = workload(rendered["base"][0])["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics"
    objects = rendered["overlays/prometheus-operator"][0]
    sm = by_kind(objects, "ServiceMonitor")[0]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["endpoints"][0]["port"] == by_kind(objects, "Service", "shardcast")[0]["spec"]["ports"][0]["name"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= \
        by_kind(objects, "Service", "shardcast")[0]["metadata"]["labels"].items()
    assert "annotations" not in workload(objects)["spec"]["template"]["metadata"] or not any(
        a.startswith("prometheus.io/") for a in workload(objects)["spec"]["template"]["metadata"]["annotations"])


@pytest.mark.parametrize("k", SERVER_KUSTOMIZATIONS)
def test_memory_derived_from_buffers(rendered, k):
    objects = rendered[k][0]
    cfg = config_of(objects)
    res = container(objects)["resources"]
    want = memory_limit(cfg)
    assert parse_quantity(res["limits"]["memory"]) == want, (
        "memory limit %s does not follow the buffers of shardcast.json: the rule "
        "(k8s/base/deployment.yaml) gives bound %d MiB -> limit %dMi"
        % (res["limits"]["memory"], memory_bound(cfg) >> 20, want >> 20))
    assert res["requests"]["memory"] == res["limits"]["memory"]


def test_manifest_comment_matches_rule(rendered):
    """The arithmetic written in deployment.yaml is the rule's result."""
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "..", "k8s", "base", "deployment.yaml")).read()
    cfg = config_of(rendered["base"][0])
    assert re.search(r"= bound\s+%d\s+MiB" % (memory_bound(cfg) >> 20), text)
    assert re.search(r"multiple of 64 MiB\s+%d\s+MiB" % (memory_limit(cfg) >> 20), text)


def test_scale_out_wiring(rendered):
    objects = rendered["overlays/scale-out"][0]
    assert not by_kind(objects, "Deployment")
    sts = by_kind(objects, "StatefulSet", "shardcast")[0]
    headless = by_kind(objects, "Service", sts["spec"]["serviceName"])[0]
    assert headless["spec"]["clusterIP"] == "None"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()
    assert "app.kubernetes.io/name" in headless["spec"]["selector"]
    e = env_of(container(objects))
    assert e["SHARDCAST_REPLICAS"]["value"] == str(sts["spec"]["replicas"])
    assert sts["spec"]["replicas"] > 1
    assert e["SHARDCAST_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "SHARDCAST_REPLICA" not in e  # from the ordinal, by the entrypoint
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    # The pod template is the base's (env was added, and the data volume
    # became a claim: the ephemeral storage no longer holds it;
    # test_storage.py checks the sizes).
    def but_ephemeral_storage(res):
        return {kind: {n: q for n, q in v.items() if n != "ephemeral-storage"}
                for kind, v in res.items()}

    base_c = container(rendered["base"][0])
    c = container(objects)
    for key in ("image", "args", "securityContext", "livenessProbe", "readinessProbe",
                "volumeMounts"):
        assert c[key] == base_c[key], key
    assert but_ephemeral_storage(c["resources"]) == but_ephemeral_storage(base_c["resources"])


def scale_out_peers(rendered):
    """(StatefulSet, headless Service, SHARDCAST_PEERS) of the scale-out
    overlay."""
    objects = rendered["overlays/scale-out"][0]
    sts = by_kind(objects, "StatefulSet", "shardcast")[0]
    headless = by_kind(objects, "Service", sts["spec"]["serviceName"])[0]
    return sts, headless, env_of(container(objects))["SHARDCAST_PEERS"]["value"]


def test_scale_out_peers_name_every_replica(rendered):
    """SHARDCAST_PEERS is one {j} template over the headless Service's
    per-pod names: expanded for j = 0 .. R-1 it names exactly the
    StatefulSet's pods <name>-j in replica order, at the container's port
    (the names resolve to pod IPs, not to a Service port)."""
    sts, headless, peers = scale_out_peers(rendered)
    assert peers.count("{j}") == 1 and "," not in peers, peers
    assert headless["metadata"]["name"] in peers
    R = sts["spec"]["replicas"]
    port = container(rendered["overlays/scale-out"][0])["ports"][0]["containerPort"]
    for j in range(R):
        u = urllib.parse.urlsplit(peers.replace("{j}", str(j)))
        assert u.scheme == "http" and u.path in ("", "/"), peers
        pod = "%s-%d" % (sts["metadata"]["name"], j)          # StatefulSet pod name
        assert u.hostname == "%s.%s" % (pod, sts["spec"]["serviceName"]), u.hostname
        assert u.port == port
    # The headless Service's port is that port too, selecting the pods.
    assert [p["port"] for p in headless["spec"]["ports"]] == [port]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()


def test_scale_out_headless_service_publishes_not_ready_replicas(rendered):
    """A replica made not ready by a peer conflict keeps its DNS name:
    otherwise its peers would lose sight of it and the conflict would hide
    itself and flap (k8s/README.md, service-headless.yaml)."""
    _, headless, _ = scale_out_peers(rendered)
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    # The base's Service keeps only ready pods.
    svc = by_kind(rendered["overlays/scale-out"][0], "Service", "shardcast")[0]
    assert not svc["spec"].get("publishNotReadyAddresses", False)


def test_example_job_uses_the_scale_out_replicas(rendered):
    """The training Job names the replicas by one template: the same URLs
    the replicas give each other (SHARDCAST_PEERS), and R = the overlay's
    replica count (two kustomizations: kept equal by this test, and at run
    time by the client, which refuses replicas reporting another R). It
    has enough consumers for every replica (W >= R)."""
    sts, _, peers = scale_out_peers(rendered)
    job = by_kind(rendered["examples/training-job"][0], "Job")[0]
    e = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert "SHARDCAST_SERVER" not in e and "SHARDCAST_URL" not in e
    assert "SHARDCAST_URLS" not in e
    template = e["SHARDCAST_URL_TEMPLATE"]["value"]
    R = int(e["SHARDCAST_REPLICAS"]["value"])
    assert R == sts["spec"]["replicas"], (
        "the Job's SHARDCAST_REPLICAS=%d, k8s/overlays/scale-out has replicas.count %d: "
        "change both" % (R, sts["spec"]["replicas"]))
    assert template.count("{j}") == 1
    assert [template.replace("{j}", str(j)) for j in range(R)] == \
        [peers.replace("{j}", str(j)) for j in range(R)]
    world = int(e["WORLD_SIZE"]["value"]) * int(e["SHARDCAST_WORKERS"]["value"])
    assert world >= R
    assert float(e["SHARDCAST_READ_TIMEOUT"]["value"]) > 0


def test_example_job(rendered):
    objects = rendered["examples/training-job"][0]
    job = by_kind(objects, "Job")[0]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    c = spec["template"]["spec"]["containers"][0]
    e = env_of(c)
    assert int(e["WORLD_SIZE"]["value"]) == spec["completions"] == spec["parallelism"]
    assert "job-completion-index" in e["RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert e["SHARDCAST_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "shardcast-tokens"
    cm = by_kind(objects, "ConfigMap")[0]
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "k8s", "examples", "training-job", "train.py")) as f:
        assert cm["data"]["train.py"] == f.read()
    assert c["command"][-1] == "/opt/train/train.py"


def help_env_names(shardcastd):
    out = subprocess.run([shardcastd, "--help"], capture_output=True, text=True, timeout=30)
    names = set(re.findall(r"env (SHARDCAST_[A-Z0-9_]+)", out.stdout + out.stderr))
    assert len(names) > 10, out.stdout
    return names


@pytest.mark.parametrize("k", SERVER_KUSTOMIZATIONS)
def test_env_names_are_server_settings(rendered, shardcastd, k):
    known = help_env_names(shardcastd) | ENTRYPOINT_VARS
    c = container(rendered[k][0])
    unknown = [n for n in env_of(c) if n.startswith("SHARDCAST_") and n not in known]
    assert not unknown, "not shardcastd settings: %s" % unknown


@pytest.mark.parametrize("k", ["base", "overlays/scale-out"])
def test_server_accepts_rendered_config(rendered, shardcastd, k, k8s_workdir, tmp_path):
    """Start the real shardcastd (through the entrypoint) with the rendered
    ConfigMap (source pointed at a local dataset), the rendered environment
    (paths mapped into a temporary directory) and tokens made as the
    README's `kubectl create secret` command makes them, under the keys the
    pod reads: it must start, answer /healthz and /readyz, and report its
    topology."""
    from shardcast_testlib import make_dataset
    objects = rendered[k][0]
    ds = os.path.join(k8s_workdir, "render-ds")
    if not os.path.isdir(ds):
        make_dataset(ds, shards=3, per_shard=5, size=200, seed=1)
    cfg = config_of(objects)
    for job in cfg["jobs"]:
        job["source"] = ds
    cfg_path = tmp_path / "shardcast.json"
    cfg_path.write_text(json.dumps(cfg))
    c = container(objects)
    # The Secret is the user's (never rendered): the keys are the files the
    # pod is told to read from the mounted Secret.
    secret = {os.path.basename(env_of(c)[v]["value"]): secrets.token_hex(32)
              for v in ("SHARDCAST_TOKEN_FILE", "SHARDCAST_ADMIN_TOKEN_FILE")}
    assert sorted(secret) == ["admin-token", "token"]
    env = {}
    for name, e in env_of(c).items():
        if "value" in e:
            env[name] = e["value"]
    # The pod's writable volumes (state_dir and the cache under it) map
    # into the test's directory, never onto this machine's own paths.
    writable = [m["mountPath"] for m in c["volumeMounts"]
                if not m.get("readOnly", False) and m["mountPath"] != "/tmp"]
    assert env["SHARDCAST_STATE_DIR"] in writable
    for name, value in env.items():
        if any(value == mp or value.startswith(mp + "/") for mp in writable):
            env[name] = str(tmp_path / "volumes") + value
    state_dir = env["SHARDCAST_STATE_DIR"]
    os.makedirs(state_dir)
    token_dir = tmp_path / "secrets"
    token_dir.mkdir()
    for key, val in secret.items():
        (token_dir / key).write_text(val)
    env["SHARDCAST_TOKEN_FILE"] = str(token_dir / os.path.basename(env["SHARDCAST_TOKEN_FILE"]))
    env["SHARDCAST_ADMIN_TOKEN_FILE"] = str(
        token_dir / os.path.basename(env["SHARDCAST_ADMIN_TOKEN_FILE"]))
    replicas = int(env.pop("SHARDCAST_REPLICAS", "1"))
    env.pop("SHARDCAST_LISTEN"), env.pop("SHARDCAST_PORT")
    args = [a if a != "/etc/shardcast/shardcast.json" else str(cfg_path) for a in c["args"]]
    port = free_port(1)
    pod = Replica(shardcastd, "shardcast-%d" % (replicas - 1), replicas, host_of(0), port,
                  args, k8s_workdir, extra_env=env)
    try:
        for path in ("/healthz", "/readyz"):
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen(pod.url + path, timeout=5) as r:
                        assert r.status == 200
                        break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        doc = pod.get_json("/v1/topology",
                           headers={"Authorization": "Bearer " + secret["token"]})
        assert (doc["replica"], doc["replicas"]) == (replicas - 1, replicas)
        with urllib.request.urlopen(pod.url + "/metrics", timeout=5) as r:
            assert b"# TYPE" in r.read()
        # The shard cache runs with the rendered budget (its series are
        # among those shown to token holders).
        req = urllib.request.Request(pod.url + "/metrics",
                                     headers={"Authorization": "Bearer " + secret["token"]})
        with urllib.request.urlopen(req, timeout=5) as r:
            metrics = r.read().decode()
        budget = re.search(r"(?m)^shardcast_cache_budget_bytes ([0-9]+)$", metrics)
        assert budget, "no shardcast_cache_budget_bytes in /metrics"
        assert int(budget.group(1)) == parse_bytes(env["SHARDCAST_CACHE_BYTES"]), budget.group(0)
    finally:
        assert pod.stop() == 0, pod.log()
    # state_dir was used where the volume is: the journals are there, and
    # the cache in its default directory under it.
    assert os.path.isdir(os.path.join(state_dir, "journal")), os.listdir(state_dir)
    assert os.path.isdir(os.path.join(state_dir, "cache")), os.listdir(state_dir)
    assert secret["token"] not in pod.log() and secret["admin-token"] not in pod.log()


# -- tokens: never a placeholder ----------------------------------------------

@pytest.mark.parametrize("k", KUSTOMIZATIONS)
def test_no_placeholder_secret_is_rendered(rendered, k):
    """`kubectl apply -k` of any kustomization must not deploy a Secret
    with placeholder values (it used to carry replace-me tokens): the
    tokens and S3 keys are Secrets the user creates."""
    objects, text = rendered[k]
    assert "replace-me" not in text
    assert not by_kind(objects, "Secret"), [o["metadata"]["name"]
                                            for o in by_kind(objects, "Secret")]


@pytest.mark.parametrize("k", SERVER_KUSTOMIZATIONS)
def test_pod_mounts_the_user_created_secret(rendered, k):
    pod = workload(rendered[k][0])["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["tokens"]["secret"]["secretName"] == "shardcast-tokens"
    # not optional: without the Secret the pod waits instead of running
    # without tokens
    assert not vols["tokens"]["secret"].get("optional", False)


def test_readme_says_how_to_create_the_secrets():
    here = os.path.dirname(os.path.abspath(__file__))
    k8s = os.path.join(here, "..", "..", "k8s")
    text = open(os.path.join(k8s, "README.md")).read()
    base = open(os.path.join(k8s, "base", "kustomization.yaml")).read()
    for doc in (text, base):
        assert "kubectl create secret generic shardcast-tokens" in doc
        assert "--from-literal=token=" in doc and "--from-literal=admin-token=" in doc
    assert "kubectl create secret generic shardcast-s3" in text


# -- NetworkPolicy ------------------------------------------------------------

def selector_matches(sel, labels):
    """A Kubernetes label selector (matchLabels, matchExpressions) applied
    to a label set; an empty selector matches everything."""
    for key, val in (sel.get("matchLabels") or {}).items():
        if labels.get(key) != val:
            return False
    for e in sel.get("matchExpressions") or []:
        op, key, vals = e["operator"], e["key"], e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def admitted(policy, pod_labels, ns_labels, same_namespace, port):
    """Does the policy's ingress admit a pod (its labels, its namespace's
    labels) to `port` (a container port name)?"""
    for rule in policy["spec"].get("ingress", []):
        ports = rule.get("ports")
        if ports and not any(p.get("port") == port for p in ports):
            continue
        for peer in rule.get("from", []):
            ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
            if ns_sel is None and not same_namespace:
                continue
            if ns_sel is not None and not selector_matches(ns_sel, ns_labels):
                continue
            if pod_sel is not None and not selector_matches(pod_sel, pod_labels):
                continue
            if ns_sel is None and pod_sel is None:
                continue  # an ipBlock peer: not a pod of the cluster
            return True
    return False


CLIENT_LABEL = {"shardcast.io/client": "true"}
MONITORING_NS = {"kubernetes.io/metadata.name": "monitoring"}
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}


@pytest.mark.parametrize("k", SERVER_KUSTOMIZATIONS)
def test_network_policy_admits_only_training_pods_and_prometheus(rendered, k):
    objects = rendered[k][0]
    pols = by_kind(objects, "NetworkPolicy")
    assert len(pols) == 1, pols
    pol = pols[0]
    pod_labels = workload(objects)["spec"]["template"]["metadata"]["labels"]
    assert selector_matches(pol["spec"]["podSelector"], pod_labels)
    assert "app.kubernetes.io/name" in pol["spec"]["podSelector"]["matchLabels"]
    # Ingress is restricted; egress is left open (the object store).
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    port = container(objects)["ports"][0]["name"]
    other_ns = {"kubernetes.io/metadata.name": "elsewhere"}
    # Training pods of the namespace, by the documented label.
    assert admitted(pol, dict(CLIENT_LABEL, app="trainer"), other_ns, True, port)
    # Prometheus, by namespace and pod label.
    assert admitted(pol, PROMETHEUS, MONITORING_NS, False, port)
    # Scale-out: the replicas reach each other (the peers check asks every
    # replica's GET /v1/topology); one server has no peers.
    assert admitted(pol, pod_labels, other_ns, True, port) == (k == "overlays/scale-out")
    assert not admitted(pol, pod_labels, other_ns, False, port)
    # Nobody else: unlabelled pods, other components of shardcast, a
    # labelled pod of another namespace, Prometheus-looking pods outside
    # monitoring, any pod of the monitoring namespace, other ports.
    assert not admitted(pol, {"app": "trainer"}, other_ns, True, port)
    assert not admitted(pol, dict(pod_labels, **{"app.kubernetes.io/component": "cli"}),
                        other_ns, True, port)
    assert not admitted(pol, {"app.kubernetes.io/component": "server"}, other_ns, True, port)
    assert not admitted(pol, dict(CLIENT_LABEL, **{"shardcast.io/client": "false"}),
                        other_ns, True, port)
    assert not admitted(pol, CLIENT_LABEL, other_ns, False, port)
    assert not admitted(pol, PROMETHEUS, other_ns, False, port)
    assert not admitted(pol, PROMETHEUS, other_ns, True, port)
    assert not admitted(pol, {"app": "grafana"}, MONITORING_NS, False, port)
    assert not admitted(pol, CLIENT_LABEL, other_ns, True, "admin")


def test_example_job_is_admitted(rendered):
    pol = by_kind(rendered["base"][0], "NetworkPolicy")[0]
    job = by_kind(rendered["examples/training-job"][0], "Job")[0]
    labels = job["spec"]["template"]["metadata"]["labels"]
    port = container(rendered["base"][0])["ports"][0]["name"]
    assert admitted(pol, labels, {}, True, port)


def test_network_policy_is_documented():
    here = os.path.dirname(os.path.abspath(__file__))
    k8s = os.path.join(here, "..", "..", "k8s")
    for doc in ("README.md", os.path.join("base", "networkpolicy.yaml")):
        text = open(os.path.join(k8s, doc)).read()
        assert 'shardcast.io/client: "true"' in text, doc
        assert "monitoring" in text and "app.kubernetes.io/name: prometheus" in text, doc


# -- scale-out placement --------------------------------------------------------

def test_scale_out_replicas_prefer_separate_nodes(rendered):
    """The replicas exist for more NICs than one: each is steered to its
    own node (spread and anti-affinity by host name), as a preference so a
    small cluster still runs all of them."""
    sts = by_kind(rendered["overlays/scale-out"][0], "StatefulSet", "shardcast")[0]
    pod = sts["spec"]["template"]["spec"]
    own = sts["spec"]["template"]["metadata"]["labels"]
    spread = pod["topologySpreadConstraints"]
    host = [c for c in spread if c["topologyKey"] == "kubernetes.io/hostname"]
    assert len(host) == 1
    assert host[0]["maxSkew"] == 1 and host[0]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert selector_matches(host[0]["labelSelector"], own)
    anti = pod["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    pref = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert len(pref) == 1 and pref[0]["weight"] == 100
    term = pref[0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert selector_matches(term["labelSelector"], own)
    # ... and only shardcast's server pods repel each other.
    assert not selector_matches(term["labelSelector"], {"app": "trainer"})
    # The single-replica base has no such rule.
    base = workload(rendered["base"][0])["spec"]["template"]["spec"]
    assert "affinity" not in base and "topologySpreadConstraints" not in base
