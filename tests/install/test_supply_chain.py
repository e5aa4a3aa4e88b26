"""What the operator image is built from is pinned: the base image by digest,
every Python package by version and hash (requirements.lock, installed with
``pip --require-hashes``), and each provisioner Deployment runs under a
service account of its own. The collection itself declares ranges
(requirements.txt), which every pinned environment satisfies: the image's
lock, the execution environment's and the tests'. tests/install/test_operator_image.py
runs install.sh for real; these read the files it and the Containerfile use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from operator_process import ROOT
from requirement_files import normal, pins, ranges

DIGEST_REFERENCE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
# What the operator image runs, not the collection's modules: never in requirements.txt.
OPERATOR_ONLY = {"ansible", "ansible-core", "ansible-runner", "prometheus-client"}
# Each pins every package of requirements.txt inside its range.
PINNED_ENVIRONMENTS = ("requirements.lock", "requirements-test.txt", "execution-environment.lock")


def _locked() -> dict[str, tuple[str, list[str]]]:
    """{name: (version, hashes)} of requirements.lock; continuation lines joined."""
    text = (ROOT / "requirements.lock").read_text().replace("\\\n", " ")
    entries = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*$", line)
        assert match, f"requirements.lock: not an exact pin with hashes: {line[:120]}"
        entries[normal(match[1])] = (match[2], re.findall(r"sha256:([0-9a-f]{64})", match[3]))
    return entries


def test_the_lock_holds_every_pin_at_its_version_each_with_hashes():
    locked = _locked()
    pinned = pins(ROOT / "operator" / "requirements.in")
    assert OPERATOR_ONLY <= set(pinned)
    for name, version in pinned.items():
        assert name in locked, f"{name} of operator/requirements.in is not in requirements.lock"
        assert locked[name][0] == version, f"{name}: operator/requirements.in {version}, lock {locked[name][0]}"
    assert all(hashes for _, hashes in locked.values())
    # What builds the operator package in the image is locked too.
    assert "setuptools" in locked


def test_the_collection_declares_ranges_and_nothing_only_the_operator_runs():
    declared = ranges(ROOT / "requirements.txt")
    assert declared
    for name, specifier in declared.items():
        operators = {spec.operator for spec in specifier}
        assert operators == {">=", "<"}, f"requirements.txt: {name}{specifier} is not a range >=LOW,<HIGH"
        assert name not in OPERATOR_ONLY, f"requirements.txt: {name} is the operator image's, not the collection's"


@pytest.mark.parametrize("environment", PINNED_ENVIRONMENTS)
def test_every_range_is_satisfied_by_each_pinned_environment(environment):
    pinned = {name: version for name, (version, _) in _locked().items()} if environment == "requirements.lock" \
        else pins(ROOT / environment)
    for name, specifier in ranges(ROOT / "requirements.txt").items():
        assert name in pinned, f"{name} of requirements.txt is not pinned in {environment}"
        assert pinned[name] in specifier, f"{environment}: {name}=={pinned[name]} is outside {specifier}"


def test_the_test_environment_is_exact_and_runs_the_image_versions():
    lines = [line.strip() for line in (ROOT / "requirements-test.txt").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[^\s]+", line) for line in lines), (
        [line for line in lines if "==" not in line])
    tests = pins(ROOT / "requirements-test.txt")
    for name, version in pins(ROOT / "operator" / "requirements.in").items():
        assert tests.get(name) == version, f"{name}: requirements-test.txt {tests.get(name)}, image {version}"


def test_install_sh_installs_only_hashed_packages():
    script = (ROOT / "operator" / "install.sh").read_text()
    installs = [line.strip() for line in script.splitlines()
                if re.match(r"^\s*pip\s", line) and not line.strip().startswith("#")]
    assert installs[0] == 'pip --require-hashes -r "$src/requirements.lock"'
    # The rest is this checkout's own package: no dependency and no build backend fetched.
    for line in installs[1:]:
        assert "--no-deps" in line and "--no-build-isolation" in line, line
    assert "requirements.txt" not in "\n".join(installs)


def test_the_base_image_is_pinned_by_digest():
    containerfile = (ROOT / "operator" / "Containerfile").read_text()
    froms = [line.split()[1] for line in containerfile.splitlines() if line.startswith("FROM ")]
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", containerfile, re.MULTILINE))
    assert froms
    for reference in froms:
        resolved = args.get(reference.strip("${}"), reference)
        assert DIGEST_REFERENCE.match(resolved), f"FROM {reference} ({resolved}) is not pinned by digest"
        assert ":latest" not in resolved


def _manager_objects() -> list[dict]:
    kustomization = yaml.safe_load((ROOT / "config" / "manager" / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"]
            for doc in yaml.safe_load_all((ROOT / "config" / "manager" / name).read_text()) if doc]


def _subjects(path: Path) -> set[str]:
    (binding,) = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return {subject["name"] for subject in binding["subjects"] if subject["kind"] == "ServiceAccount"}


def test_each_provisioner_deployment_has_an_account_of_its_own_with_the_roles_it_needs():
    accounts = [d["spec"]["template"]["spec"]["serviceAccountName"] for d in _manager_objects()
                if d["kind"] == "Deployment"]
    assert len(accounts) == 3 and len(set(accounts)) == 3
    defined = {doc["metadata"]["name"] for doc in yaml.safe_load_all((ROOT / "config" / "rbac" /
                                                                     "service_account.yaml").read_text()) if doc}
    assert defined == set(accounts)
    for binding in ("role_binding.yaml", "leader_election_role_binding.yaml"):
        assert _subjects(ROOT / "config" / "rbac" / binding) == set(accounts), binding
    # A pool binding per account, to that provisioner's own pool role.
    pool = sorted((ROOT / "config" / "rbac" / "pool").glob("role_binding_*.yaml"))
    assert [_subjects(path) for path in pool] == [{account} for account in sorted(accounts)]
