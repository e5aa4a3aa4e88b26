"""scripts/release's SBOM (scripts/sbom.py): what dpkg lists as installed,
the files a stack of layers leaves (whiteouts), and an SPDX document whose
identifiers are valid and unique."""

import importlib.util
import re
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

_SPEC = importlib.util.spec_from_file_location("sbom", Path(__file__).resolve().parents[3] / "scripts" / "sbom.py")
sbom = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sbom)

# Debian package names and versions as dpkg allows them (epochs, '+', '~', ':').
deb_names = st.from_regex(r"[a-z0-9][a-z0-9+.-]{0,20}", fullmatch=True)
deb_versions = st.from_regex(r"([0-9]:)?[0-9][A-Za-z0-9.+~-]{0,12}", fullmatch=True)
statuses = st.sampled_from(["install ok installed", "deinstall ok config-files", "install ok unpacked",
                            "hold ok installed", "purge ok not-installed"])
rows = st.lists(st.tuples(deb_names, deb_versions, st.sampled_from(["amd64", "all", "arm64"]), statuses),
                max_size=30)
python_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}", fullmatch=True)
pythons = st.lists(st.tuples(python_names, st.from_regex(r"[0-9]+(\.[0-9]+){0,3}(\.post1|rc1)?", fullmatch=True)),
                   max_size=20, unique=True)


def _status(table):
    return "\n".join(f"Package: {n}\nStatus: {s}\nPriority: optional\nArchitecture: {a}\nVersion: {v}\n"
                     f"Description: a package\n more of its description\n" for n, v, a, s in table)


@given(rows)
def test_only_installed_packages_are_listed(table):
    assert sbom.installed_debs(_status(table)) == sorted(
        {(n, v, a) for n, v, a, s in table if s.endswith(" installed")})


paths = st.lists(st.sampled_from("abc"), min_size=1, max_size=3).map("/".join)
layers = st.lists(st.lists(st.tuples(paths, st.sampled_from(["file", "whiteout", "opaque"]))), max_size=4)


@given(layers)
def test_a_layer_whiteout_hides_only_what_lies_below_it(stack):
    """What apply_layer keeps equals a model: every file of the stack whose
    path no whiteout of a higher layer covers."""
    files = {}
    made = []  # (layer number, path) of each file
    for number, layer in enumerate(stack):
        entries = []
        for path, kind in layer:
            if kind == "file":
                entries.append((f"{sbom.DPKG_STATUS}/{path}", f"{number}".encode()))
                made.append((number, f"{sbom.DPKG_STATUS}/{path}"))
            elif kind == "whiteout":
                head, _, base = f"{sbom.DPKG_STATUS}/{path}".rpartition("/")
                entries.append((f"{head}/.wh.{base}", None))
            else:
                entries.append((f"{sbom.DPKG_STATUS}/{path}/.wh..wh..opq", None))
        sbom.apply_layer(files, entries, keep=lambda path: True)
    expected = {}
    for number, path in made:
        covered = False
        for higher, layer in enumerate(stack):
            if higher <= number:
                continue
            for other, kind in layer:
                target = f"{sbom.DPKG_STATUS}/{other}"
                if kind == "whiteout" and (path == target or path.startswith(target + "/")):
                    covered = True
                if kind == "opaque" and path.startswith(target + "/"):
                    covered = True
        if covered:
            expected.pop(path, None)
        else:
            expected[path] = str(number).encode()
    assert files == expected


@given(rows, pythons)
# Names that differ only in characters an SPDX identifier cannot hold.
@example([("a+b", "1", "amd64", "install ok installed"), ("a-b", "1", "amd64", "install ok installed")],
         [("x_y", "1"), ("x-y", "1")])
def test_every_package_has_a_valid_unique_id_the_image_contains(table, dists):
    debs = sbom.installed_debs(_status(table))
    document = sbom.spdx_document("exporter", "0.1.0", "registry.example/exporter:0.1.0", debs, dists,
                                  "2026-01-01T00:00:00Z")
    ids = [package["SPDXID"] for package in document["packages"]]
    assert all(re.fullmatch(r"SPDXRef-[A-Za-z0-9.-]+", spdx_id) for spdx_id in ids)
    assert len(ids) == len(set(ids)) == 1 + len(debs) + len(dists)
    contained = [rel["relatedSpdxElement"] for rel in document["relationships"]
                 if rel["relationshipType"] == "CONTAINS"]
    assert sorted(contained) == sorted(ids[1:])
    purls = [package["externalRefs"][0]["referenceLocator"] for package in document["packages"][1:]]
    assert purls == [f"pkg:deb/debian/{n}@{v}?arch={a}" for n, v, a in debs] + [
        f"pkg:pypi/{n.lower()}@{v}" for n, v in dists]
