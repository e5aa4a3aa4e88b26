"""An SPDX 2.3 JSON SBOM of an image, for scripts/release: the Debian
packages dpkg records as installed in its root filesystem and the Python
distributions of its environments (site-packages of a venv or /usr/local).

    python3 scripts/sbom.py LAYOUT TAG IMAGE VERSION REFERENCE > NAME.spdx.json

LAYOUT is an OCI image layout holding TAG. Only dpkg's status file and the
distributions' METADATA are read from the layers, each layer's whiteouts
applied to the ones below it, so the image is never unpacked. Standard
library only: it runs with the machine's python3."""

from __future__ import annotations

import email.parser
import fnmatch
import hashlib
import json
import os
import posixpath
import re
import sys
import tarfile
import time
from pathlib import Path

DPKG_STATUS = "var/lib/dpkg/status"
# Where an image keeps its Python environments (Debian's own modules, in
# dist-packages, are dpkg's and listed as Debian packages).
METADATA_PATTERNS = ("opt/*/lib/python3*/site-packages/*.dist-info/METADATA",
                     "usr/local/lib/python3*/site-packages/*.dist-info/METADATA")


def wanted(path: str) -> bool:
    return path == DPKG_STATUS or any(fnmatch.fnmatchcase(path, pattern) for pattern in METADATA_PATTERNS)


def apply_layer(files: dict[str, bytes], layer: list[tuple[str, bytes | None]], keep=wanted) -> None:
    """One layer's (path, content) entries over ``files``, the wanted files
    of the layers below: a whiteout ``.wh.NAME`` (content None) removes NAME
    and all under it, ``.wh..wh..opq`` everything under its directory, both
    from the layers below only (OCI image spec, layer changesets). Of the
    other entries, those ``keep`` takes are added."""
    for path, _ in layer:
        directory, base = posixpath.split(path)
        if base == ".wh..wh..opq":
            prefix = directory + "/" if directory else ""
            for known in [known for known in files if known.startswith(prefix)]:
                del files[known]
        elif base.startswith(".wh."):
            gone = posixpath.join(directory, base[len(".wh."):])
            for known in [known for known in files if known == gone or known.startswith(gone + "/")]:
                del files[known]
    for path, content in layer:
        if content is not None and keep(path):
            files[path] = content


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / digest.replace(":", "/", 1)


def image_files(layout: Path, tag: str) -> dict[str, bytes]:
    """The wanted files of the image ``tag`` of the OCI layout, as its root filesystem holds them."""
    index = json.loads((layout / "index.json").read_text())
    (descriptor,) = [entry for entry in index["manifests"]
                     if entry.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    manifest = json.loads(_blob(layout, descriptor["digest"]).read_text())
    files: dict[str, bytes] = {}
    for layer in manifest["layers"]:
        entries = []
        with tarfile.open(_blob(layout, layer["digest"]), "r:*") as archive:
            for member in archive:
                path = posixpath.normpath(member.name.lstrip("/")).removeprefix("./")
                base = posixpath.basename(path)
                if base.startswith(".wh."):
                    entries.append((path, None))
                elif member.isfile() and wanted(path):
                    entries.append((path, archive.extractfile(member).read()))
        apply_layer(files, entries)
    return files


def installed_debs(status: str) -> list[tuple[str, str, str]]:
    """(name, version, architecture) of each package dpkg's status file says is installed."""
    debs = set()
    for paragraph in re.split(r"\n\s*\n", status):
        fields = dict(re.findall(r"^([A-Za-z-]+): *(.*)$", paragraph, re.MULTILINE))
        if fields.get("Status", "").split()[-1:] == ["installed"] and "Package" in fields:
            debs.add((fields["Package"], fields.get("Version", ""), fields.get("Architecture", "")))
    return sorted(debs)


def python_distributions(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """(name, version) of each distribution whose METADATA the image holds."""
    found = set()
    parser = email.parser.BytesHeaderParser()
    for path, content in files.items():
        if path != DPKG_STATUS:
            metadata = parser.parsebytes(content)
            if metadata["Name"] and metadata["Version"]:
                found.add((metadata["Name"], metadata["Version"]))
    return sorted(found)


def _spdx_id(kind: str, number: int, name: str, version: str) -> str:
    # SPDX identifiers allow letters, digits, '.' and '-': the number keeps
    # apart the names that differ only in other characters (a+b, a_b).
    return f"SPDXRef-{kind}-{number}-" + re.sub(r"[^A-Za-z0-9.-]", "-", f"{name}-{version}")


def spdx_document(image: str, version: str, reference: str, debs, pythons, created: str) -> dict:
    """The SPDX document: the image, which CONTAINS each package."""
    packages = [{
        "SPDXID": "SPDXRef-Image", "name": image, "versionInfo": version,
        "downloadLocation": "NOASSERTION", "filesAnalyzed": False, "primaryPackagePurpose": "CONTAINER",
        "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                          "referenceLocator": f"pkg:oci/{image}@{version}?repository_url={reference}"}],
    }]
    for number, (name, deb_version, arch) in enumerate(debs):
        packages.append({
            "SPDXID": _spdx_id("deb", number, f"{name}-{arch}", deb_version),
            "name": name, "versionInfo": deb_version,
            "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": f"pkg:deb/debian/{name}@{deb_version}?arch={arch}"}],
        })
    for number, (name, py_version) in enumerate(pythons):
        packages.append({
            "SPDXID": _spdx_id("pypi", number, name, py_version), "name": name, "versionInfo": py_version,
            "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": f"pkg:pypi/{name.lower()}@{py_version}"}],
        })
    contents = json.dumps([packages[1:]], sort_keys=True).encode()
    return {
        "spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{image}-{version}",
        "documentNamespace": f"https://spdx.org/spdxdocs/{image}-{version}-{hashlib.sha256(contents).hexdigest()[:16]}",
        "creationInfo": {"created": created, "creators": ["Tool: jumpstarter.virtual_exporters-scripts/release"]},
        "packages": packages,
        "relationships": [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                           "relatedSpdxElement": "SPDXRef-Image"}]
        + [{"spdxElementId": "SPDXRef-Image", "relationshipType": "CONTAINS",
            "relatedSpdxElement": package["SPDXID"]} for package in packages[1:]],
    }


def main(argv: list[str]) -> int:
    layout, tag, image, version, reference = argv
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    files = image_files(Path(layout), tag)
    document = spdx_document(image, version, reference,
                             installed_debs(files.get(DPKG_STATUS, b"").decode("utf-8", "replace")),
                             python_distributions(files), created)
    json.dump(document, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
