"""The collection as its users get it: the tarball of a release
(``scripts/release collection``, which runs ``ansible-galaxy collection
build`` on the files git holds), installed from that file into a fresh
collections path with ``ansible-galaxy collection install``, and a playbook
and ``ansible-doc`` that find it there and nowhere else."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from operator_process import ROOT

BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"


def _isolated_env(collections_path: Path) -> dict:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("ANSIBLE_") and key != "PYTHONPATH"}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections_path), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(tarball, collections path) with the built collection installed."""
    work = tmp_path_factory.mktemp("galaxy")
    run = subprocess.run([str(ROOT / "scripts" / "release"), "--allow-dirty", "--output", str(work / "dist"),
                          "collection"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    tarball = work / "dist" / f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
    assert run.stdout == f"collection {tarball}\n"
    collections = work / "collections"
    # Galaxy is out of reach: kubernetes.core comes from the ansible package.
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--no-deps", "-p",
                    str(collections), str(tarball)], check=True, capture_output=True,
                   env=_isolated_env(collections))
    return tarball, collections


def test_tarball_holds_the_collection_and_leaves_out_the_ignored(installed):
    tarball, _ = installed
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile("MANIFEST.json"))
    assert manifest["collection_info"]["namespace"] == GALAXY["namespace"]
    assert manifest["collection_info"]["version"] == GALAXY["version"]
    assert manifest["collection_info"]["dependencies"] == GALAXY["dependencies"]
    for required in ("meta/runtime.yml", "meta/execution-environment.yml", "requirements.txt",
                     "bindep.txt", "playbooks/reconcile.yml", "roles/reconcile/tasks/main.yml",
                     "plugins/modules/exporterset_info.py", "config/crd/exportersets.yaml"):
        assert required in names, required
    for ignored in GALAXY["build_ignore"]:
        prefix = ignored.rstrip("*")
        assert not any(name == prefix or name.startswith(prefix + "/") for name in names), ignored


def test_playbook_uses_the_installed_collection(installed, tmp_path):
    _, collections = installed
    env = _isolated_env(collections)
    listing = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "list", FQCN,
                              "--format", "json"], env=env, check=True, capture_output=True,
                             text=True)
    assert list(json.loads(listing.stdout)) == [str(collections / "ansible_collections")]

    playbook = tmp_path / "use.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [
            {"name": "Merge and validate parameters as a class and set would",
             "ansible.builtin.set_fact": {
                 "merged": "{{ {'resources': {'cpu': 1, 'memory': '256Mi'}, 'arch': 'x86_64'}"
                           " | jumpstarter.virtual_exporters.deep_merge("
                           "{'resources': {'memory': '1Gi'}}) }}",
             }},
            {"name": "Validate the merge",
             "ansible.builtin.set_fact": {
                 "verdict": "{{ merged | jumpstarter.virtual_exporters"
                            ".validate_parameters('qemu.jumpstarter.dev') }}",
             }},
            {"name": "Report", "ansible.builtin.debug": {"var": "merged"}},
            {"name": "Report", "ansible.builtin.debug": {"var": "verdict"}},
        ],
    }]))
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)],
                         env={**env, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    merged = tasks[2]["hosts"]["localhost"]["merged"]
    verdict = tasks[3]["hosts"]["localhost"]["verdict"]
    assert merged == {"resources": {"cpu": 1, "memory": "1Gi"}, "arch": "x86_64"}
    assert verdict["errors"] == []


def test_ansible_doc_reads_the_installed_modules(installed):
    _, collections = installed
    env = _isolated_env(collections)
    listed = subprocess.run([str(BIN / "ansible-doc"), "-t", "module", "-l", FQCN, "--json"],
                            env=env, check=True, capture_output=True, text=True)
    modules = sorted(json.loads(listed.stdout))
    shipped = sorted(f"{FQCN}.{p.stem}" for p in (ROOT / "plugins" / "modules").glob("*.py"))
    assert modules == shipped
    doc = subprocess.run([str(BIN / "ansible-doc"), "--json", f"{FQCN}.exporterset_info"],
                         env=env, check=True, capture_output=True, text=True)
    entry = json.loads(doc.stdout)[f"{FQCN}.exporterset_info"]
    assert str(collections) in entry["doc"]["filename"]


# Options every module of an action group shares, so module_defaults for the
# group apply to each of them.
GROUP_OPTIONS = {"kubernetes": {"kubeconfig"},
                 "corellium": {"api_host", "api_token", "ca_path", "project", "validate_certs"}}


def test_action_groups_list_every_module_that_shares_their_options(installed):
    _, collections = installed
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert set(runtime["action_groups"]) == set(GROUP_OPTIONS)
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
    docs = json.loads(subprocess.run(
        [str(BIN / "ansible-doc"), "--json", *(f"{FQCN}.{name}" for name in modules)],
        env=_isolated_env(collections), check=True, capture_output=True, text=True).stdout)
    options = {name: set(docs[f"{FQCN}.{name}"]["doc"]["options"]) for name in modules}
    for group, shared in GROUP_OPTIONS.items():
        members = [entry for entry in runtime["action_groups"][group] if isinstance(entry, str)]
        assert sorted(members) == sorted(name for name in modules if shared <= options[name]), group


def test_module_defaults_reach_a_group_member(installed, tmp_path):
    """A group's module_defaults reach its modules in the installed collection:
    exporterset_info takes the kubeconfig from the group's defaults."""
    _, collections = installed
    # A cluster nobody listens on: only this kubeconfig names that address.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
        "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "nobody", "user": {"token": "none"}}],
        "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "nobody"}}],
    }))
    playbook = tmp_path / "defaults.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "module_defaults": {f"group/{FQCN}.kubernetes": {"kubeconfig": str(kubeconfig)}},
        "tasks": [{"name": "Read a set", f"{FQCN}.exporterset_info": {"name": "pool", "namespace": "default"},
                   "ignore_errors": True, "register": "observed"},
                  {"name": "Report", "ansible.builtin.debug": {"var": "observed"}}],
    }]))
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)],
                         env={**_isolated_env(collections), "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
                              "KUBECONFIG": str(tmp_path / "absent")},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    observed = json.loads(run.stdout)["plays"][0]["tasks"][1]["hosts"]["localhost"]["observed"]
    assert observed["failed"] and "127.0.0.1" in observed["msg"] and "9" in observed["msg"], observed["msg"]
