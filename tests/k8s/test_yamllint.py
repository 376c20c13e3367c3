"""yamllint passes on the manifests as written (k8s/) and on what every
kustomization renders, with the repository's k8s/.yamllint."""

import os
import shutil
import subprocess

import pytest

from k8s_testlib import K8S, KUSTOMIZATIONS

CONFIG = os.path.join(K8S, ".yamllint")


@pytest.fixture(scope="module")
def yamllint():
    exe = shutil.which("yamllint")
    if exe is None:
        pytest.fail("yamllint not found (apt-get install yamllint; scripts/deps.sh "
                    "installs it)", pytrace=False)
    return exe


def test_sources_pass_yamllint(yamllint):
    proc = subprocess.run([yamllint, "-f", "parsable", "-c", CONFIG, K8S],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # yamllint found the files (a wrong path would lint nothing).
    listed = subprocess.run([yamllint, "--list-files", "-c", CONFIG, K8S],
                            capture_output=True, text=True, timeout=60).stdout.split()
    assert len([f for f in listed if f.endswith(".yaml")]) >= 15, listed


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_rendered_output_passes_yamllint(yamllint, rendered, kustomization, tmp_path):
    path = tmp_path / "rendered.yaml"
    path.write_text(rendered[kustomization][1])
    proc = subprocess.run([yamllint, "-f", "parsable", "-c", CONFIG, str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
