"""scripts/release as a user runs it: the three images pushed to the real
OCI registry the image fetch tests run (Debian's docker-registry, plain
HTTP on loopback), read back from it (manifest, digest, OCI labels), each
the cached build of scripts/images relabelled (the same layers), with its
SBOM; tests/collection/test_collection_build.py installs the release's tarball."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tarfile
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from image_servers import Registry
from operator_process import ROOT
from requirement_files import pins

GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
VERSION = GALAXY["version"]
IMAGES = {"exporterset-operator": "operator", "exporter": "exporter", "qemu-runtime": "qemu-runtime"}
MANIFEST = "application/vnd.oci.image.manifest.v1+json"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """(registry, {name: (reference, digest, sbom)}, output directory, revision)."""
    work = tmp_path_factory.mktemp("release")
    registry = Registry(work / "registry", address="127.0.0.1")
    try:
        run = subprocess.run([str(ROOT / "scripts" / "release"), "--allow-dirty", "--plain-http",
                              "--registry", f"{registry.host}/jve", "--output", str(work / "dist"),
                              *IMAGES.values()], capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        lines = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()}
        assert (work / "dist" / "release.txt").read_text() == run.stdout
        images = {}
        for name, (pushed, sbom) in lines.items():
            reference, digest = pushed.split("@")
            images[name] = (reference, digest, Path(sbom))
        revision = re.search(r"version \S+, revision ([0-9a-f]{40})$", run.stderr, re.MULTILINE)[1]
        yield registry, images, work / "dist", revision
    finally:
        registry.close()


def _get(registry, path, accept=None):
    request = urllib.request.Request(f"http://{registry.host}/v2/{path}", headers={"Accept": accept or "*/*"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read(), response.headers


def _archive_layers(item):
    """The layer digests of scripts/images's cached archive of ``item``."""
    listed = subprocess.run([str(ROOT / "scripts" / "images"), "list"], check=True, capture_output=True,
                            text=True).stdout
    archive = {Path(path).stem: path for _, path in (line.split() for line in listed.splitlines())}[item]
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        blob = index["manifests"][0]["digest"].replace(":", "/")
        manifest = json.load(tar.extractfile(f"blobs/{blob}"))
    return [layer["digest"] for layer in manifest["layers"]]


def test_every_image_is_pushed_with_its_digest_labels_and_the_cached_layers(released):
    registry, images, _, _ = released
    assert set(images) == set(IMAGES)
    revision = released[3]
    # The checkout's HEAD when the release ran (it may have moved on since).
    subprocess.run(["git", "merge-base", "--is-ancestor", revision, "HEAD"], cwd=ROOT, check=True)
    for name, (reference, digest, _) in images.items():
        assert reference == f"{registry.host}/jve/{name}:{VERSION}"
        body, headers = _get(registry, f"jve/{name}/manifests/{VERSION}", MANIFEST)
        assert headers["Docker-Content-Digest"] == digest == "sha256:" + hashlib.sha256(body).hexdigest()
        manifest = json.loads(body)
        assert manifest["mediaType"] == MANIFEST
        # The same manifest by digest: what a user pins.
        assert _get(registry, f"jve/{name}/manifests/{digest}", MANIFEST)[0] == body
        config = json.loads(_get(registry, f"jve/{name}/blobs/{manifest['config']['digest']}")[0])
        labels = config["config"]["Labels"]
        prefix = "org.opencontainers.image."
        assert {key: value for key, value in labels.items() if key.startswith(prefix)
                and key != prefix + "created"} == {
            prefix + "version": VERSION, prefix + "revision": revision,
            prefix + "source": GALAXY["repository"], prefix + "title": name,
            prefix + "licenses": GALAXY["license"][0]}
        assert datetime.strptime(labels[prefix + "created"], "%Y-%m-%dT%H:%M:%SZ")
        # Relabelled, not rebuilt: the layers of scripts/images's build.
        assert [layer["digest"] for layer in manifest["layers"]] == _archive_layers(IMAGES[name])


def _sbom_packages(path: Path) -> dict[str, set[str]]:
    document = json.loads(path.read_text())
    assert document["spdxVersion"] == "SPDX-2.3" and document["dataLicense"] == "CC0-1.0"
    found: dict[str, set[str]] = {}
    for package in document["packages"][1:]:
        (purl,) = [ref["referenceLocator"] for ref in package["externalRefs"]]
        kind = re.match(r"pkg:(\w+)/", purl)[1]
        found.setdefault(kind, set()).add(f"{package['name'].lower()}=={package['versionInfo']}")
    contained = {rel["relatedSpdxElement"] for rel in document["relationships"]
                 if rel["relationshipType"] == "CONTAINS"}
    assert contained == {package["SPDXID"] for package in document["packages"][1:]}
    return found


def _deb_version(package: str) -> str:
    policy = subprocess.run(["apt-cache", "policy", package], check=True, capture_output=True, text=True).stdout
    return re.search(r"Candidate: (\S+)", policy)[1]


def test_each_sbom_lists_the_image_debian_and_python_packages(released):
    _, images, _, _ = released
    operator = _sbom_packages(images["exporterset-operator"][2])
    locked = pins(ROOT / "operator" / "requirements.in")
    assert {f"{name.lower()}=={version}" for name, version in locked.items()} <= {
        re.sub(r"[-_.]+", "-", entry.split("==")[0]) + "==" + entry.split("==")[1] for entry in operator["pypi"]}
    assert f"python3=={_deb_version('python3')}" in operator["deb"]
    exporter = _sbom_packages(images["exporter"][2])
    assert "jumpstarter-cli==0.9.0" in exporter["pypi"]
    assert any(entry.startswith("jumpstarter-driver-virtual-qemu==") for entry in exporter["pypi"])
    runtime = _sbom_packages(images["qemu-runtime"][2])
    assert f"qemu-system-x86=={_deb_version('qemu-system-x86')}" in runtime["deb"]
    assert "pypi" not in runtime


def test_a_version_that_is_no_oci_tag_is_refused_before_anything_is_built(tmp_path):
    run = subprocess.run([str(ROOT / "scripts" / "release"), "--version", "1.0/evil", "--output", str(tmp_path),
                          "collection"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "version '1.0/evil' is not an OCI tag" in run.stderr
    assert not list(tmp_path.iterdir())
