"""The VirtualTargetClass and ExporterSet examples of JEP-0014, read from the
JEP itself (beside the checkout in ../shared/spec, or JVE_JEP_0014), so the
project is checked against every example exactly as the JEP writes it."""

from __future__ import annotations

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
