"""The AWX execution environment: ``ansible-builder create`` makes a build
context from execution-environment.yml (no image is built here), ansible-
builder's own introspection finds the collection's dependencies through
meta/execution-environment.yml, and requirements.txt covers every third-party
import of the collection and the operator."""

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bindep.depends import Depends
from collection_tree import copy_collection

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
META_EE = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())


def _pins(path):
    """{normalized name: version} of the exact pins in a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", line.strip())
        if match:
            pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


REQUIREMENTS = _pins(ROOT / "requirements.txt")


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ee") / "context"
    subprocess.run([str(BIN / "ansible-builder"), "create", "-f", str(ROOT / "execution-environment.yml"),
                    "-c", str(directory), "--output-filename", "Containerfile"],
                   check=True, capture_output=True, text=True)
    return directory


def test_definition_uses_the_collection_files():
    assert EE["version"] == 3
    assert EE["dependencies"]["python"] == META_EE["dependencies"]["python"] == "requirements.txt"
    assert EE["dependencies"]["system"] == META_EE["dependencies"]["system"] == "bindep.txt"


def test_build_context_holds_the_dependencies(context):
    build = context / "_build"
    assert (build / "requirements.txt").read_text() == (ROOT / "requirements.txt").read_text()
    assert (build / "bindep.txt").read_text() == (ROOT / "bindep.txt").read_text()
    collections = {entry["name"] for entry in yaml.safe_load((build / "requirements.yml").read_text())["collections"]}
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert set(galaxy["dependencies"]) <= collections
    assert any("virtual-exporters" in name for name in collections)


def test_containerfile_installs_the_pinned_ansible(context):
    containerfile = (context / "Containerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{EE["images"]["base_image"]["name"]}"' in containerfile
    refs = re.search(r'ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile)[1].split()
    # The EE runs the same ansible-core and ansible-runner as the operator and the tests.
    assert sorted(refs) == sorted(f"{name}=={REQUIREMENTS[name]}" for name in ("ansible-core", "ansible-runner"))
    assert "introspect" in containerfile and "assemble" in containerfile


def test_introspection_finds_the_collection_dependencies(context, tmp_path):
    """What the builder stage computes once the collection is installed."""
    copy_collection(tmp_path / "collections" / "ansible_collections" / "jumpstarter" / "virtual_exporters")
    pip_out, bindep_out = tmp_path / "pip.txt", tmp_path / "bindep.txt"
    subprocess.run([sys.executable, str(context / "_build" / "scripts" / "introspect.py"), "introspect",
                    "--write-pip", str(pip_out), "--write-bindep", str(bindep_out), str(tmp_path / "collections")],
                   check=True, capture_output=True, text=True)
    found = _pins(pip_out)
    assert found.items() <= REQUIREMENTS.items()
    containerfile = (context / "Containerfile").read_text()
    installed_by_builder = {
        re.sub(r"[=<>].*", "", word).lower()
        for line in containerfile.splitlines() if "pip install" in line or "ANSIBLE_INSTALL_REFS=" in line
        for word in re.findall(r"[A-Za-z][A-Za-z0-9_.-]*(?:==[0-9.]+)?", line.split("install", 1)[-1])
    }
    # The ansible package only carries collections, which the EE gets from
    # its Galaxy requirements instead.
    left_out = set(REQUIREMENTS) - set(found) - {"ansible"}
    assert left_out <= installed_by_builder, left_out - installed_by_builder
    assert "openssh-clients" in bindep_out.read_text()


@pytest.mark.parametrize("platform, package", [("platform:rpm", "openssh-clients"),
                                               ("platform:dpkg", "openssh-client")])
def test_bindep_names_the_ssh_client_per_platform(platform, package):
    depends = Depends((ROOT / "bindep.txt").read_text())
    names = [rule[0] for rule in depends.active_rules([platform])]
    assert package in names


def _third_party_imports():
    stdlib = set(sys.stdlib_module_names)
    names = set()
    for path in [*(ROOT / "plugins").rglob("*.py"), *(ROOT / "operator" / "exporterset_operator").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return sorted(names - stdlib - {"ansible", "ansible_collections", "exporterset_operator", "__future__"})


@pytest.mark.parametrize("module", _third_party_imports())
def test_requirements_cover_every_import(module):
    distributions = importlib.metadata.packages_distributions().get(module, [])
    assert distributions, f"{module} is imported but no installed distribution provides it"
    assert any(re.sub(r"[-_.]+", "-", name).lower() in REQUIREMENTS for name in distributions), (
        f"{module} (from {distributions}) is missing from requirements.txt")
