"""Every default names what scripts/release releases: the references the
release command gives (``--references``, the project's registry and the
collection's version) against the images the operator puts into Pods, the
operator image of config/default, of the chart and of the operator_install
role, and the AWX survey's default. No bed, nothing built."""

from __future__ import annotations

import subprocess

import jinja2
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from exporterset_operator.__main__ import parse_args, pod_images
from operator_process import ROOT
from test_helm_chart import helm, kustomize


def released() -> dict[str, str]:
    done = subprocess.run([str(ROOT / "scripts" / "release"), "--references"], capture_output=True, text=True,
                          check=True, timeout=60)
    return dict(line.split() for line in done.stdout.splitlines())


def deployments_images(objects) -> set[tuple[str, str]]:
    """(image, IMAGE_REGISTRY) of every operator container."""
    return {(container["image"], {e["name"]: e.get("value") for e in container["env"]}["IMAGE_REGISTRY"])
            for o in objects if o["kind"] == "Deployment" for container in o["spec"]["template"]["spec"]["containers"]}


def test_the_release_names_its_images_under_the_projects_registry_at_the_collections_version():
    references = released()
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert set(references) == {"exporterset-operator", "exporter", "qemu-runtime"}
    registries = {reference.rsplit("/", 1)[0] for reference in references.values()}
    assert len(registries) == 1
    (registry,) = registries
    assert references == {name: f"{registry}/{name}:{version}" for name in references}


def test_the_pods_images_are_the_released_ones(monkeypatch):
    references = released()
    for name in ("IMAGE_REGISTRY", "RELATED_IMAGE_EXPORTER", "RELATED_IMAGE_QEMU_RUNTIME", "RELATED_IMAGE_IMAGE_FETCH"):
        monkeypatch.delenv(name, raising=False)
    by_role = {"exporter": references["exporter"], "runtime": references["qemu-runtime"],
               "images": references["exporter"]}
    assert {role: spec["image"] for role, spec in pod_images(parse_args([])).items()} == by_role
    assert {role: spec["image"] for role, spec in k8s_pod.DEFAULT_POD_IMAGES.items()} == by_role


def test_the_operator_image_of_every_install_is_the_released_one():
    operator = released()["exporterset-operator"]
    expected = {(operator, operator.rsplit("/", 1)[0])}
    assert deployments_images(kustomize(ROOT / "config" / "default")) == expected
    assert deployments_images(kustomize(ROOT / "config" / "cluster-wide")) == expected
    assert deployments_images(yaml.safe_load_all(helm("-n", "jumpstarter-virtual").stdout)) == expected

    role = ROOT / "roles" / "operator_install"
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(role / "templates"))
    environment.filters.update(bool=bool)
    rendered = environment.get_template("deployment.yml.j2").render(
        yaml.safe_load((role / "defaults" / "main.yml").read_text()))
    assert deployments_images(yaml.safe_load_all(rendered)) == expected

    templates = yaml.safe_load((ROOT / "awx" / "job_templates.yml").read_text())["awx_job_templates"]
    (install,) = [t for t in templates if t["playbook"] == "playbooks/install.yml"]
    answers = {question["variable"]: question["default"] for question in install["survey"]}
    assert (answers["operator_install_registry"], answers["operator_install_image"]) == (expected.pop()[1], "")
