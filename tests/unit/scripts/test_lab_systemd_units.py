"""The lab-host helper's systemd path, as far as it runs without systemd as
the host's init (the test lab hosts are network namespaces of this machine,
whose process 1 is not systemd): the two unit templates lab_bootstrap
installs, rendered by Ansible's own template module, instantiated for the
names the helper hands ``systemctl`` (``unit``), and checked by the real
``systemd-analyze verify`` (Debian's systemd): the unit loads, its
``ExecStart`` is the helper's ``run`` of that instance and service, and the
helper refuses, before anything else, a name systemd would refuse."""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "lab_bootstrap"
HELPER = ROLE / "files" / "jumpstarter-instance"
TEMPLATES = ("jumpstarter-vm@.service", "jumpstarter-exporter@.service")
ANALYZE = shutil.which("systemd-analyze")


# The helper's functions, read from its file (it is a script, not a module).
helper = types.SimpleNamespace(**runpy.run_path(str(HELPER)))


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    """The templates rendered by ``ansible.builtin.template`` (as the role's
    task does) into a unit directory, with the helper at its prefix."""
    base = tmp_path_factory.mktemp("systemd")
    prefix, unit_dir = base / "prefix", base / "units"
    (prefix / "bin").mkdir(parents=True)
    unit_dir.mkdir()
    shutil.copy(HELPER, prefix / "bin" / "jumpstarter-instance")
    os.chmod(prefix / "bin" / "jumpstarter-instance", 0o755)
    tasks = "".join(f"""
    - ansible.builtin.template:
        src: {ROLE}/templates/{name}.j2
        dest: {unit_dir}/{name}
        mode: "0644"
""" for name in TEMPLATES)
    (base / "render.yml").write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: {sys.executable}
    lab_bootstrap_prefix: {prefix}
  tasks:{tasks}""")
    playbook = Path(sys.executable).with_name("ansible-playbook")
    rendered = subprocess.run([str(playbook), "-i", "localhost,", str(base / "render.yml")],
                              capture_output=True, text=True, cwd=base)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    return prefix, unit_dir


def verify(unit_dir, name):
    """``systemd-analyze verify`` of the instance ``name`` of its template."""
    template = name.split("@", 1)[0] + "@.service"
    link = unit_dir / name
    if not link.is_symlink():
        link.symlink_to(template)
    return subprocess.run([ANALYZE, "verify", "--man=no", str(link)], capture_output=True, text=True)


LONGEST = "n" * 63 + "." + "e" * (helper.UNIT_NAME_MAX - len(helper.unit("exporter", "")) - 64)


@pytest.mark.parametrize("instance", ["team-a.pool-0", "lab.qcom-sa8295-hifi-1", "a.b.c", LONGEST])
@pytest.mark.parametrize("service", ["vm", "exporter"])
def test_each_unit_the_helper_starts_loads_and_runs_the_helper_for_its_instance(units, instance, service):
    assert ANALYZE, "systemd-analyze (Debian's systemd package) is part of the test bed"
    prefix, unit_dir = units
    assert helper.check_instance(instance) == instance
    name = helper.startable_unit(service, instance)
    checked = verify(unit_dir, name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # %i is the instance as the helper named it: its run of that service.
    text = (unit_dir / (name.split("@", 1)[0] + "@.service")).read_text()
    (exec_start,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert exec_start == f"ExecStart={prefix}/bin/jumpstarter-instance run %i {service}"
    assert helper.SERVICES and service in helper.SERVICES


def test_a_unit_whose_helper_is_missing_does_not_verify(units, tmp_path):
    """What ``verify`` finds: the same unit with its ExecStart elsewhere fails."""
    _, unit_dir = units
    moved = tmp_path / "units"
    shutil.copytree(unit_dir, moved, symlinks=True)
    template = moved / "jumpstarter-vm@.service"
    template.write_text(template.read_text().replace(str(units[0]), "/nonexistent"))
    checked = verify(moved, helper.unit("vm", "team-a.pool-0"))
    assert checked.returncode != 0 and "/nonexistent/bin/jumpstarter-instance" in checked.stderr


def test_an_instance_name_systemd_would_refuse_is_refused_before_anything_is_started(units):
    _, unit_dir = units
    instance = LONGEST + "x"
    assert helper.check_instance(instance) == instance  # a name of a namespace and an Exporter
    with pytest.raises(helper.Refused, match=f"over systemd's {helper.UNIT_NAME_MAX}"):
        helper.startable_unit("exporter", instance)
    # systemd-analyze agrees: the unit cannot even be named.
    checked = subprocess.run([shutil.which("systemd-escape"), "--template=jumpstarter-exporter@.service",
                              instance], capture_output=True, text=True)
    assert checked.returncode != 0
