"""The VirtualTargetClass and ExporterSet examples of JEP-0014, read from the
JEP itself (beside the checkout in ../shared/spec, or JVE_JEP_0014), so the
project is checked against every example exactly as the JEP writes it."""

from __future__ import annotations

import copy
import hashlib
import os
import re
from pathlib import Path

import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent
JEP_0014 = Path(
    os.environ.get("JVE_JEP_0014")
    or PROJECT_ROOT.parent / "shared/spec/upstream-JEP-0014-virtual-scalable-exporters.md"
)
KINDS = ("VirtualTargetClass", "ExporterSet")
_YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)


def jep_examples(path: Path = JEP_0014) -> list[dict]:
    """Every class and set in the JEP's YAML blocks, in order; each object
    gets ``_example`` (kind/name#n, n counting repeats of the same name)."""
    if not path.is_file():
        # A plain clone has no JEP beside it: the example tests report
        # themselves skipped through require_jep().
        return []
    found, seen = [], {}
    for block in _YAML_BLOCK.findall(path.read_text()):
        for document in yaml.safe_load_all(block):
            if isinstance(document, dict) and document.get("kind") in KINDS:
                key = f"{document['kind']}/{document['metadata']['name']}"
                seen[key] = seen.get(key, 0) + 1
                document["_example"] = f"{key}#{seen[key]}"
                found.append(document)
    return found


def class_for(examples: list[dict], exporter_set: dict) -> dict | None:
    """The class the set names, as the nearest earlier example gives it."""
    name = exporter_set["spec"]["virtualTargetClassName"]
    earlier = examples[: examples.index(exporter_set)]
    return next((e for e in reversed(earlier)
                 if e["kind"] == "VirtualTargetClass" and e["metadata"]["name"] == name), None)


def require_jep(path: Path = JEP_0014) -> None:
    """Skips the calling test, naming the path, when the JEP is not beside
    the checkout (a plain clone); where it is, the examples must be found."""
    import pytest

    if not path.is_file():
        pytest.skip(f"JEP-0014 not beside the checkout: {path} (set JVE_JEP_0014)")


# The seed revision of JEP-0014 is flattened to one line, so its YAML cannot
# be read as YAML: tests/data/jep-0014-seed holds each block that has a class
# or set, line breaks and indentation put back (see its README). Where the JEP
# is beside the checkout, every such block must have its copy, equal once
# flattened (seed_blocks_match); the examples are always read from the copies.
SEED_JEP_0014 = Path(
    os.environ.get("JVE_JEP_0014_SEED")
    or PROJECT_ROOT.parent / "shared/spec/seed-000-JEP-0014-virtual-scalable-exporters.txt"
)
SEED_COPIES = PROJECT_ROOT / "tests/data/jep-0014-seed"
# The one change a user makes to a seed example: its apiVersion.
SEED_API_VERSION = "jumpstarter.dev/v1alpha1"
API_VERSION = "virtualtarget.jumpstarter.dev/v1alpha1"
_FLAT_YAML_BLOCK = re.compile(r"```ya?ml (.*?)```", re.S)
_HOLDS_EXAMPLE = re.compile(r"apiVersion: \S+ kind: (VirtualTargetClass|ExporterSet)\b")


def flatten(text: str) -> str:
    return " ".join(text.split())


def seed_blocks(path: Path = SEED_JEP_0014) -> dict[int, str] | None:
    """The seed JEP's YAML blocks that hold a class or set, flattened, by
    their place among its YAML blocks; None when the JEP is not beside the
    checkout."""
    if not path.is_file():
        return None
    blocks = [flatten(block) for block in _FLAT_YAML_BLOCK.findall(path.read_text())]
    return {index: block for index, block in enumerate(blocks) if _HOLDS_EXAMPLE.search(block)}


def seed_copies() -> dict[int, str]:
    """The copies in tests/data/jep-0014-seed, by block index."""
    return {int(path.name.split("-", 1)[0]): path.read_text() for path in sorted(SEED_COPIES.glob("*.yaml"))}


def seed_examples() -> list[dict]:
    """Every class and set of the seed JEP, as it writes them (from the
    copies); ``_example`` is ``seed#<block>:<kind>/<name>``."""
    found = []
    for index, text in seed_copies().items():
        for document in yaml.safe_load_all(text):
            if isinstance(document, dict) and document.get("kind") in KINDS:
                document["_example"] = f"seed#{index:02d}:{document['kind']}/{document['metadata']['name']}"
                found.append(document)
    return found


def with_our_api_version(example: dict) -> dict:
    """The example as a user of this project writes it: only ``apiVersion``
    changed (and the test's own ``_example`` key left out)."""
    changed = {key: value for key, value in example.items() if key != "_example"}
    assert changed["apiVersion"] == SEED_API_VERSION, example["_example"]
    changed["apiVersion"] = API_VERSION
    return changed


# The JEP's digests are placeholders (``sha256:abc...``), refused as written
# (at admission and by validation): a user gives the image's real one.
REAL_DIGEST = "sha256:" + hashlib.sha256(b"JEP-0014 example image").hexdigest()
_REAL = re.compile(r"^sha256:[0-9a-f]{64}$")


def with_real_digests(example: dict) -> dict:
    """A copy of the example whose placeholder digests (anywhere under its
    spec) are ``REAL_DIGEST``."""
    changed = copy.deepcopy(example)

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "digest" and isinstance(value, str) and not _REAL.match(value):
                    node[key] = REAL_DIGEST
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(changed.get("spec"))
    return changed
