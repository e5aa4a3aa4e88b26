"""The AWX execution environment: ``ansible-builder create`` makes a build
context from execution-environment.yml and the collection's tarball (no image
is built here), ansible-builder's own introspection finds the collection's
dependencies through meta/execution-environment.yml, requirements.txt covers
every third-party import of the collection's modules and plugins with a
range (operator/requirements.in those of the operator), and the EE itself
is pinned: its Python packages (execution-environment.lock, each inside the
collection's range), the base image by digest, every collection to the
version the tests run with, this collection from the tarball
``ansible-galaxy collection build`` makes."""

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bindep.depends import Depends
from collection_tree import copy_collection
from operator_process import ROOT
from packaging.specifiers import SpecifierSet
from requirement_files import normal, pins, ranges

BIN = Path(sys.executable).parent
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
META_EE = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
# The collection's ranges, the EE's pins, the operator image's pins.
DECLARED = ranges(ROOT / "requirements.txt")
EE_PINS = pins(ROOT / "execution-environment.lock")
IMAGE_PINS = pins(ROOT / "operator" / "requirements.in")


GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
TARBALL = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A clean copy of the project with the tarball ``ansible-galaxy
    collection build`` makes beside execution-environment.yml, as the
    definition's header says to build it."""
    project = copy_collection(tmp_path_factory.mktemp("ee") / "project")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(project), str(project)],
                   check=True, capture_output=True, text=True)
    assert (project / TARBALL).is_file()
    return project


@pytest.fixture(scope="module")
def context(built):
    directory = built.parent / "context"
    subprocess.run([str(BIN / "ansible-builder"), "create", "-f", str(built / "execution-environment.yml"),
                    "-c", str(directory), "--output-filename", "Containerfile"],
                   check=True, capture_output=True, text=True)
    return directory


def test_definition_uses_the_collection_files():
    assert EE["version"] == 3
    assert META_EE["dependencies"]["python"] == "requirements.txt"
    assert EE["dependencies"]["python"] == "execution-environment.lock"
    assert EE["dependencies"]["system"] == META_EE["dependencies"]["system"] == "bindep.txt"


def test_build_context_holds_the_dependencies(context):
    build = context / "_build"
    assert (build / "requirements.txt").read_text() == (ROOT / "execution-environment.lock").read_text()
    assert (build / "bindep.txt").read_text() == (ROOT / "bindep.txt").read_text()
    collections = {entry["name"] for entry in yaml.safe_load((build / "requirements.yml").read_text())["collections"]}
    assert set(GALAXY["dependencies"]) <= collections
    assert f"collections/{TARBALL}" in collections


def test_containerfile_installs_the_pinned_ansible(context):
    containerfile = (context / "Containerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{EE["images"]["base_image"]["name"]}"' in containerfile
    refs = re.search(r'ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile)[1].split()
    # The EE runs the same ansible-core and ansible-runner as the operator and the tests.
    assert sorted(refs) == sorted(f"{name}=={IMAGE_PINS[name]}" for name in ("ansible-core", "ansible-runner"))
    assert "introspect" in containerfile and "assemble" in containerfile


def test_introspection_merges_the_collection_ranges_with_the_ee_pins(context, tmp_path):
    """What the builder stage computes once the collection is installed, with
    the EE's own file as the Containerfile passes it (--user-pip): the
    collection's ranges as declared, each narrowed to the EE's pin, which
    lies inside it."""
    copy_collection(tmp_path / "collections" / "ansible_collections" / "jumpstarter" / "virtual_exporters")
    pip_out, bindep_out = tmp_path / "pip.txt", tmp_path / "bindep.txt"
    build = context / "_build"
    subprocess.run([sys.executable, str(build / "scripts" / "introspect.py"), "introspect",
                    "--user-pip", str(build / "requirements.txt"), "--user-bindep", str(build / "bindep.txt"),
                    "--write-pip", str(pip_out), "--write-bindep", str(bindep_out), str(tmp_path / "collections")],
                   check=True, capture_output=True, text=True)
    merged: dict[str, list[tuple[SpecifierSet, str]]] = {}
    for line in pip_out.read_text().splitlines():
        requirement, origin = line.split("  # from collection ")
        name = normal(re.match(r"[A-Za-z0-9_.-]+", requirement)[0])
        merged.setdefault(name, []).append((SpecifierSet(requirement[len(name):].strip()), origin))
    ours = {name: specs for name, entries in merged.items()
            for specs, origin in entries if origin == "jumpstarter.virtual_exporters"}
    assert ours == DECLARED
    for name in DECLARED:
        assert name in EE_PINS, f"{name} of requirements.txt is not pinned in execution-environment.lock"
        together = SpecifierSet(",".join(str(specs) for specs, _ in merged[name]))
        assert list(together.filter([EE_PINS[name]])) == [EE_PINS[name]], (name, together)
    assert "openssh-clients" in bindep_out.read_text()


@pytest.mark.parametrize("platform, package", [("platform:rpm", "openssh-clients"),
                                               ("platform:dpkg", "openssh-client")])
def test_bindep_names_the_ssh_client_per_platform(platform, package):
    depends = Depends((ROOT / "bindep.txt").read_text())
    names = [rule[0] for rule in depends.active_rules([platform])]
    assert package in names


def _third_party_imports(*sources):
    stdlib = set(sys.stdlib_module_names)
    names = set()
    for path in [path for source in sources for path in (ROOT / source).rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return sorted(names - stdlib - {"ansible", "ansible_collections", "exporterset_operator", "__future__"})


def _distributions(module):
    distributions = importlib.metadata.packages_distributions().get(module, [])
    assert distributions, f"{module} is imported but no installed distribution provides it"
    return {normal(name) for name in distributions}


COLLECTION_IMPORTS = _third_party_imports("plugins")


@pytest.mark.parametrize("module", COLLECTION_IMPORTS)
def test_the_collection_ranges_cover_every_import_of_its_plugins(module):
    assert _distributions(module) & set(DECLARED), f"{module} is missing from requirements.txt"


@pytest.mark.parametrize("module", _third_party_imports("plugins", "operator/exporterset_operator"))
def test_the_image_pins_cover_every_import_of_the_collection_and_operator(module):
    assert _distributions(module) & set(IMAGE_PINS), f"{module} is missing from operator/requirements.in"


def test_the_collection_declares_only_what_its_plugins_import():
    imported = set().union(*(_distributions(module) for module in COLLECTION_IMPORTS))
    assert set(DECLARED) <= imported, set(DECLARED) - imported


# --- pins --------------------------------------------------------------------

def _used_collections():
    """Collections whose plugins the playbooks, roles and plugins name (by FQCN)."""
    names = set()
    for path in [*(ROOT / "roles").rglob("*.y*ml"), *(ROOT / "playbooks").rglob("*.y*ml"),
                 *(ROOT / "roles").rglob("*.j2"), *(ROOT / "plugins").rglob("*.py")]:
        names.update(re.findall(r"\b([a-z_]+\.[a-z_]+)\.[a-z_]+[:(']", path.read_text()))
    return {name for name in names if name not in ("ansible.builtin", "jumpstarter.virtual_exporters")
            and _installed_manifest(name)}


def _installed_manifest(name):
    """MANIFEST.json of the collection the tests run with, or None."""
    import ansible_collections

    for root in ansible_collections.__path__:
        manifest = Path(root) / name.replace(".", "/") / "MANIFEST.json"
        if manifest.is_file():
            return manifest
    return None


def _installed_version(name):
    return json.loads(_installed_manifest(name).read_text())["collection_info"]["version"]


def test_every_collection_is_pinned_to_the_version_the_tests_use():
    entries = EE["dependencies"]["galaxy"]["collections"]
    pinned = {e["name"]: e["version"] for e in entries if e.get("type", "galaxy") == "galaxy"}
    used = _used_collections()
    assert used, "no collection found in the playbooks and roles"
    assert used | set(GALAXY["dependencies"]) <= set(pinned), used | set(GALAXY["dependencies"]) - set(pinned)
    for name, version in pinned.items():
        assert re.fullmatch(r"==\d+\.\d+\.\d+", version), f"{name} {version} is not an exact pin"
        assert version == f"=={_installed_version(name)}", (name, version, _installed_version(name))
        minimum = re.fullmatch(r">=(\S+)", GALAXY["dependencies"].get(name, ">=0"))[1]
        assert tuple(map(int, version[2:].split("."))) >= tuple(map(int, minimum.split("."))), name
    assert not [e for e in entries if e.get("type") in ("git", "url", "dir")], "no collection from git or a URL"


def test_base_image_is_pinned_by_digest():
    assert re.fullmatch(r"[a-z0-9.-]+(/[a-z0-9._-]+)+:[\w.-]+@sha256:[0-9a-f]{64}", EE["images"]["base_image"]["name"])


def test_the_collection_is_installed_from_its_tarball(built, context, tmp_path):
    """The build context holds the very tarball ``ansible-galaxy collection
    build`` made, and the galaxy stage's command (from the Containerfile's
    working directory, /build = _build) installs it."""
    build = context / "_build"
    assert (build / "collections" / TARBALL).read_bytes() == (built / TARBALL).read_bytes()
    containerfile = (context / "Containerfile").read_text()
    assert "COPY _build /build" in containerfile and "WORKDIR /build" in containerfile
    assert "collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    entries = yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    files = [e for e in entries if e.get("type") == "file"]
    assert files == [{"name": f"collections/{TARBALL}", "type": "file"}]
    # Galaxy is out of reach here: the pinned collections are the ones the
    # tests run with; the tarball entry is installed as the EE build does.
    (build / "tarball-only.yml").write_text(yaml.safe_dump({"collections": files}))
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_") and key != "PYTHONPATH"}
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--no-deps", "-r", "tarball-only.yml",
                    "--collections-path", str(tmp_path)], cwd=build, env=env, check=True, capture_output=True,
                   text=True)
    manifest = json.loads((tmp_path / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
                           / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == (
        GALAXY["namespace"], GALAXY["name"], GALAXY["version"])
