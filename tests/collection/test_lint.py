"""Lint and sanity as the README's test command runs them: ruff for the
Python, ansible-lint with the production profile (.ansible-lint), the
changelog fragments, and ``ansible-test sanity`` for the collection from a
path ``ansible_collections/jumpstarter/virtual_exporters``."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import ansible_test
import pytest
from collection_tree import copy_collection
from operator_process import ROOT

BIN = Path(sys.executable).parent
CACHE_DIR = Path(os.environ.get("CACHE_DIR") or Path.home() / ".cache" / "jumpstarter-virtual-exporters")
# ansible-test keeps its sanity virtual environments under ~/.ansible/test;
# a home of its own under the cache keeps them between runs and off the
# user's home.
ANSIBLE_TEST_HOME = CACHE_DIR / "ansible-test-home"
# pylint: slow and overlapping ruff; pep8: ruff is the project's style
# checker (pyproject.toml); pslint and shellcheck: no PowerShell, and the
# shell scripts are outside the collection's plugins.
SKIPPED_SANITY_TESTS = ("pylint", "pep8", "pslint", "shellcheck")


def _run(argv, **kwargs):
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kwargs)
    return completed.returncode, completed.stdout + completed.stderr


def test_ruff():
    rc, output = _run([str(BIN / "ruff"), "check", "--no-cache", str(ROOT)])
    assert rc == 0, output[-6000:]


def test_ansible_lint_production_profile():
    env = {**os.environ, "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1"}
    rc, output = _run([str(BIN / "ansible-lint"), "--nocolor"], cwd=ROOT, env=env)
    assert rc == 0, output[-8000:]
    assert "Profile 'production' was required, and it passed" in output


def test_changelog_fragments():
    rc, output = _run([str(BIN / "antsibull-changelog"), "lint"], cwd=ROOT)
    assert rc == 0 and output.strip() == "", output


def _seed_pip_bootstrap(package=Path(ansible_test.__file__).parent):
    """ansible-test (its package directory ``package``) downloads a
    get-pip.py for its virtual environments from a host outside the package
    registries; its cache gets ours instead."""
    source = package / "_internal" / "python_requirements.py"
    versions = re.findall(r"pip='([0-9.]+)'", source.read_text())
    assert len(versions) == 1, f"cannot tell ansible-test's pip version from {source}"
    cache = ANSIBLE_TEST_HOME / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "tests" / "sanity" / "pip_bootstrap.py",
                    cache / f"get_pip_{versions[0].replace('.', '_')}.py")


def sanity(tmp_path, bin_dir=BIN, python="3.11", package=Path(ansible_test.__file__).parent):
    """``ansible-test sanity`` of a copy of the collection, by the
    ansible-test of ``bin_dir`` (its package directory ``package``) on
    ``python``: its exit code and its errors."""
    _seed_pip_bootstrap(package)
    collection = copy_collection(tmp_path / "ansible_collections" / "jumpstarter" / "virtual_exporters")
    env = {**os.environ, "HOME": str(ANSIBLE_TEST_HOME), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    skips = [arg for name in SKIPPED_SANITY_TESTS for arg in ("--skip-test", name)]
    rc, output = _run([str(Path(bin_dir) / "ansible-test"), "sanity", "--local", "--python", python, "--color", "no",
                       *skips], cwd=collection, env=env)
    return rc, "\n".join(line for line in output.splitlines() if line.startswith(("ERROR", "FATAL")))[-8000:]


@pytest.mark.slow
def test_ansible_test_sanity(tmp_path):
    rc, errors = sanity(tmp_path)
    assert rc == 0, errors
