"""Reading the project's requirement files: exact pins (``name==version``)
and ranges (``name>=low,<high``), names normalized as pip compares them."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lines(path: Path) -> list[str]:
    text = path.read_text().replace("\\\n", " ")
    return [line.split(" #")[0].strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith(("#", "-"))]


def pins(path: Path) -> dict[str, str]:
    """{name: version} of the exact pins of ``path`` (hashes after a pin are ignored)."""
    found = {}
    for line in _lines(path):
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", line)
        if match:
            found[normal(match[1])] = match[2]
    return found


def ranges(path: Path) -> dict[str, SpecifierSet]:
    """{name: specifier set} of every requirement of ``path``."""
    found = {}
    for line in _lines(path):
        requirement = Requirement(line)
        found[normal(requirement.name)] = requirement.specifier
    return found
