"""The collection on every ansible-core release it supports
(tests/sanity/ansible-cores.txt, meta/runtime.yml's requires_ansible):
the unit tests of plugins/ that reach ansible-core and ``ansible-test
sanity``, each in the release's own environment
(scripts/bootstrap-ansible-cores). The test environment's own release runs
them in tests/unit and tests/collection/test_lint.py.

The unit tests that reach ansible-core are those that import it, directly or
through the collection's modules that do, or run its commands
(``reaching_ansible_core``); the others test plain Python, the same on every
release, and the whole of tests/unit/plugins takes minutes."""

import ast
import os
import re
import subprocess
from pathlib import Path

import ansible
import pytest
import yaml
from operator_process import ROOT
from test_lint import sanity

CORES_FILE = ROOT / "tests" / "sanity" / "ansible-cores.txt"
UNIT = ROOT / "tests" / "unit" / "plugins"
COLLECTION = "ansible_collections.jumpstarter.virtual_exporters"
COMMANDS = ("ansible-playbook", "ansible-doc", "ansible-galaxy")


def supported():
    """``(release, python)`` of each line of ``CORES_FILE``."""
    lines = (line.split() for line in CORES_FILE.read_text().splitlines())
    return [(fields[0], fields[1]) for fields in lines if fields and not fields[0].startswith("#")]


def _imports(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _core(name):
    return name == "ansible" or name.startswith("ansible.")


def reaching_ansible_core():
    """The unit test files of plugins/ that import ansible-core, directly or
    through a module of the collection that does (at any depth), or run one
    of its ``COMMANDS``."""
    modules = {}
    for path in (ROOT / "plugins").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join((COLLECTION,) + parts[:-1 if parts[-1] == "__init__" else None])] = _imports(path)
    reaching = {name for name, imported in modules.items() if any(map(_core, imported))}
    while True:
        more = {name for name, imported in modules.items() if name not in reaching and imported & reaching}
        if not more:
            break
        reaching |= more
    return sorted(str(path.relative_to(ROOT)) for path in UNIT.rglob("test_*.py")
                  if any(map(_core, _imports(path))) or _imports(path) & reaching
                  or any(command in path.read_text() for command in COMMANDS))


def minor(release):
    return tuple(int(part) for part in release.split(".")[:2])


OTHERS = [release for release, _ in supported() if release != ansible.__version__]


@pytest.fixture(scope="module")
def environments():
    """``{release: venv}`` of the releases besides this environment's own."""
    done = subprocess.run([str(ROOT / "scripts" / "bootstrap-ansible-cores")], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    found = {}
    for line in done.stdout.split():
        venv = Path(line)
        found[venv.name] = venv
    assert sorted(found) == sorted(OTHERS), done.stdout
    return found


def test_the_stated_range_is_the_tested_one():
    """requires_ansible takes in every tested release's minor and no other:
    from the first to the minor after the last."""
    releases = sorted((release for release, _ in supported()), key=minor)
    assert ansible.__version__ in releases, "the test environment's ansible-core is not a supported one"
    first, last = minor(releases[0]), minor(releases[-1])
    assert len({minor(r) for r in releases}) == last[1] - first[1] + 1, "a minor of the range is not tested"
    requires = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"]
    assert requires == f">={first[0]}.{first[1]}.0,<{last[0]}.{last[1] + 1}.0"
    for release in releases:
        assert (ROOT / "tests" / "sanity" / f"ignore-{release.rsplit('.', 1)[0]}.txt").is_file(), release


def _python_version(venv):
    return next(Path(venv, "lib").glob("python3.*")).name.removeprefix("python")


def test_the_unit_tests_reaching_ansible_core_are_found():
    found = reaching_ansible_core()
    assert {"tests/unit/plugins/module_utils/test_ansible_compat.py",  # imports it
            "tests/unit/plugins/action/test_exporter_pods_action.py",  # through the action plugin
            "tests/unit/plugins/module_utils/provisioners/corellium/test_corellium_client.py",  # through module_utils
            "tests/unit/plugins/action/test_exporterset_apply_action.py",  # runs ansible-playbook
            } <= set(found)
    assert "tests/unit/plugins/module_utils/pool/test_plan.py" not in found


@pytest.mark.slow
@pytest.mark.parametrize("release", OTHERS)
def test_unit_tests_of_plugins(environments, release):
    venv = environments[release]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # tests/conftest.py is the beds'; the unit tests need none of it.
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", *reaching_ansible_core(), "-q",
                           "-p", "no:cacheprovider", "--confcutdir", "tests/unit", "-o", "pythonpath=tests/unit tests"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout), done.stdout[-2000:]
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", "import ansible; print(ansible.__version__)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert ran == release


@pytest.mark.slow
@pytest.mark.parametrize("release", OTHERS)
def test_sanity(environments, release, tmp_path):
    venv = environments[release]
    python = _python_version(venv)
    rc, errors = sanity(tmp_path, bin_dir=venv / "bin", python=python,
                        package=venv / "lib" / f"python{python}" / "site-packages" / "ansible_test")
    assert rc == 0, errors
