"""charts/jumpstarter-virtual-exporters renders what config/default builds:
``helm template`` (helm built by scripts/testbed-build) against ``kubectl
kustomize``, object for object (order-insensitive; the namespace kustomize
writes on cluster-scoped objects, which the API server drops, left out, and
a container's env by name: a strategic merge patch moves what it patches to
the front, and no value here refers to another), with
the chart's defaults and with values beside the overlay that says the same
(namespace, registry, tag or digest, fewer provisioners). No bed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from operator_process import ROOT
from testbed import BIN_DIR

CHART = ROOT / "charts" / "jumpstarter-virtual-exporters"
CONFIG = ROOT / "config"
OPERATOR = "quay.io/jumpstarter-dev/virtual-exporters/exporterset-operator"
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
PROVISIONERS = ("qemu.jumpstarter.dev", "qemu-baremetal.jumpstarter.dev", "corellium.jumpstarter.dev")


def helm_binary() -> Path:
    helm = BIN_DIR / "helm"
    if not helm.exists():
        subprocess.run([str(ROOT / "scripts" / "testbed-build")], check=True, timeout=1800)
    return helm


def helm(*arguments: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(helm_binary()), "template", "jve", str(CHART), *arguments],
                          capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def objects(text: str) -> list[dict]:
    found = []
    for document in yaml.safe_load_all(text):
        if not document:
            continue
        if document["kind"] in CLUSTER_SCOPED:
            document["metadata"].pop("namespace", None)
        for container in ((document.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", []):
            container["env"] = sorted(container.get("env", []), key=lambda variable: variable["name"])
        found.append(document)
    return sorted(found, key=lambda o: (o["apiVersion"], o["kind"], o["metadata"].get("namespace", ""),
                                        o["metadata"]["name"]))


def kustomize(directory: Path) -> list[dict]:
    built = subprocess.run([str(BIN_DIR / "kubectl"), "kustomize", str(directory)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return objects(built.stdout)


def assert_same(chart: list[dict], built: list[dict]) -> None:
    def key(o):
        return o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]
    assert [key(o) for o in chart] == [key(o) for o in built]
    for rendered, expected in zip(chart, built, strict=True):
        assert rendered == expected, key(rendered)


def test_the_charts_defaults_render_config_default():
    built = kustomize(CONFIG / "default")
    assert_same(objects(helm("-n", "jumpstarter-virtual", "--set", "namespace.create=true").stdout), built)
    # Without namespace.create (helm install --create-namespace) the Namespace alone is left out.
    assert_same(objects(helm("-n", "jumpstarter-virtual").stdout), [o for o in built if o["kind"] != "Namespace"])


@pytest.mark.parametrize("pinned", [{"newTag": "dev"}, {"digest": "sha256:" + "d" * 64}], ids=["tag", "digest"])
def test_values_render_what_an_overlay_of_config_default_says(tmp_path, pinned):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    gone = [p for p in PROVISIONERS if p != "qemu.jumpstarter.dev"]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "lab",
        "resources": [os.path.relpath(CONFIG / "default", overlay)],
        "images": [{"name": OPERATOR, "newName": "mirror.example.com/jve/exporterset-operator", **pinned}],
        "patches": [
            *({"patch": yaml.safe_dump({"$patch": "delete", "apiVersion": "apps/v1", "kind": "Deployment",
                                        "metadata": {"name": "exporterset-operator-" + p.split(".")[0],
                                                     "namespace": "jumpstarter-virtual"}})} for p in gone),
            {"target": {"kind": "Deployment"},
             "patch": yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "any"},
                                      "spec": {"template": {"spec": {"containers": [{
                                          "name": "operator", "imagePullPolicy": "Always",
                                          "env": [{"name": "IMAGE_REGISTRY", "value": "mirror.example.com/jve"}],
                                      }]}}}})},
        ],
    }))
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "namespace": {"name": "lab", "create": True},
        "image": {"registry": "mirror.example.com/jve/", "pullPolicy": "Always",
                  **({"tag": pinned["newTag"]} if "newTag" in pinned else {"digest": pinned["digest"]})},
        "provisioners": ["qemu.jumpstarter.dev"],
    }))
    assert_same(objects(helm("-n", "elsewhere", "-f", str(values)).stdout), kustomize(overlay))


def test_a_provisioner_no_deployment_serves_is_refused_with_those_that_are():
    done = helm("--set", "provisioners={qemu.jumpstarter.dev,nope.example.com}", check=False)
    assert done.returncode != 0
    assert "provisioners: no Deployment serves nope.example.com (config/manager serves " in done.stderr
    for provisioner in PROVISIONERS:
        assert provisioner in done.stderr.rsplit("config/manager serves", 1)[1]
