"""Every rendered object of every kustomization validates against the
Kubernetes API schemas (kubernetes-models: JSON Schema from the OpenAPI
spec, plus a TypeScript pass that rejects unknown fields), and the
validator does reject broken objects (so a pass means something)."""

import copy
import json
import os
import subprocess

from k8s_testlib import KUSTOMIZATIONS


def run_validator(node_validator, objects, tmpdir):
    path = os.path.join(tmpdir, "objects-%d.json" % id(objects))
    with open(path, "w") as f:
        json.dump(objects, f)
    proc = subprocess.run(node_validator + [path], capture_output=True, text=True, timeout=180)
    assert proc.stdout, "validate.js printed nothing:\n" + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_every_rendered_object_is_valid(rendered, node_validator, tmp_path):
    objects, origin = [], []
    for k in KUSTOMIZATIONS:
        for o in rendered[k][0]:
            objects.append(o)
            origin.append(k)
    rc, report = run_validator(node_validator, objects, str(tmp_path))
    bad = ["%s: %s/%s %s: %s" % (origin[o["index"]] if o["index"] >= 0 else "-",
                                 o.get("apiVersion"), o.get("kind"), o.get("name"), o["errors"])
           for o in report["objects"] if o["errors"]]
    assert rc == 0 and not bad, "invalid objects:\n" + "\n".join(bad)
    kinds = {(o["apiVersion"], o["kind"]) for o in objects}
    # What the issue asks of the base and the overlays is all there.
    for want in [("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("v1", "Service"),
                 ("v1", "ConfigMap"), ("v1", "ServiceAccount"),
                 ("networking.k8s.io/v1", "NetworkPolicy"),
                 ("policy/v1", "PodDisruptionBudget"), ("batch/v1", "Job"),
                 ("monitoring.coreos.com/v1", "ServiceMonitor")]:
        assert want in kinds, "no %s/%s rendered" % want


def _deployment(rendered):
    return next(o for o in rendered["base"][0] if o["kind"] == "Deployment")


def test_validator_rejects_broken_objects(rendered, node_validator, tmp_path):
    base = _deployment(rendered)
    broken = []
    # 1. a misspelt field deep in the pod template (only the strict pass
    #    sees it: the JSON Schemas allow unknown fields)
    o = copy.deepcopy(base)
    o["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {"path": "/x"}
    broken.append(("typo", o))
    # 2. a wrong type
    o = copy.deepcopy(base)
    o["spec"]["replicas"] = "3"
    broken.append(("type", o))
    # 3. a required field missing (a container without a name)
    o = copy.deepcopy(base)
    del o["spec"]["template"]["spec"]["containers"][0]["name"]
    broken.append(("required", o))
    # 4. a kind no schema describes
    o = copy.deepcopy(base)
    o["kind"] = "Deploymnt"
    broken.append(("kind", o))
    rc, report = run_validator(node_validator, [b for _, b in broken], str(tmp_path))
    assert rc == 1
    for (what, _), entry in zip(broken, report["objects"]):
        assert entry["errors"], "validator accepted the %s error" % what
    typo_errors = " ".join(report["objects"][0]["errors"])
    assert "httpGett" in typo_errors, typo_errors
    assert any(e.startswith("schema:") for e in report["objects"][1]["errors"])
    assert report["unsupported"] == ["apps/v1/Deploymnt"]
