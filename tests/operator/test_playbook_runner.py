"""The operator's ansible-runner wrapper, with real ansible-runner runs."""

import hashlib
import json
import os
import sys
from pathlib import Path

from operator_process import ROOT

sys.path.insert(0, str(ROOT / "operator"))

import pytest  # noqa: E402
from exporterset_operator.runner import PlaybookRunner  # noqa: E402

OPENED = []


@pytest.fixture(autouse=True)
def _close_runners():
    # Each runner's fork server ends with the runner.
    yield
    while OPENED:
        OPENED.pop().close()

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Check what arrived
      ansible.builtin.assert:
        that: big | length == expected
"""


def runner(tmp_path, max_artifacts=3):
    (tmp_path / "check.yml").write_text(PLAYBOOK)
    OPENED.append(PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts"), max_artifacts=max_artifacts))
    return OPENED[-1]


def test_extra_vars_larger_than_a_command_line_arrive_whole(tmp_path):
    # A pool of a few dozen Exporters with their Pods is far past the
    # kernel's 128 KiB limit for one command line argument.
    big = [{"name": f"pool-{i}", "padding": "x" * 200} for i in range(2000)]
    result = runner(tmp_path).run("check.yml", ("ns", "pool"), {"big": big, "expected": 2000})
    assert result.ok, result.message


def test_a_failed_task_is_reported_by_name(tmp_path):
    result = runner(tmp_path).run("check.yml", ("ns", "pool"), {"big": [], "expected": 1})
    assert not result.ok
    assert "Check what arrived" in result.message


def test_artifacts_are_bounded_across_sets_and_go_with_their_set(tmp_path):
    run = runner(tmp_path, max_artifacts=3)

    def sets_with_artifacts():
        return sorted(p.name.split("_")[1] for p in (tmp_path / "artifacts").iterdir())

    for name in ("a", "a.b", "c"):
        assert run.run("check.yml", ("ns", name), {"big": [], "expected": 0}).ok
    run.forget(("ns", "a"))
    # "a.b" shares a prefix with "a" but is another set: it stays.
    assert sets_with_artifacts() == ["a.b", "c"]
    for name in ("d", "e"):
        assert run.run("check.yml", ("ns", name), {"big": [], "expected": 0}).ok
    # The bound is over all sets together: the oldest run goes, whatever its set.
    assert sets_with_artifacts() == ["c", "d", "e"]


HOSTILE_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Copy the values, as the roles take observed values into facts
      ansible.builtin.set_fact:
        copied: "{{ hostile }}"
    - name: Types as they came
      ansible.builtin.assert:
        that:
          - hostile.digits is string
          - hostile.number == 3
          - hostile.flag is sameas true
          - hostile.nothing is none
    - name: Render every value into a file
      ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: "{{ copied | to_json }}\\n{{ hostile.pipe }}\\n{{ lookup('ansible.builtin.template', 'render.j2') }}"
"""


def test_values_from_the_api_are_data_never_templates(tmp_path):
    """Template syntax in any string the operator hands to a run (a set's
    annotation, a parameter, an Exporter's status) is kept as it was:
    rendered into a file, copied into a fact, through a template lookup, and
    nothing it names runs."""
    touched = tmp_path / "touched"
    pipe = f"{{{{ lookup('pipe', 'touch {touched}') }}}}"
    block = f"{{% set x = lookup('pipe', 'touch {touched}') %}}x"
    hostile = {
        "pipe": pipe,
        "block": block,
        "math": "{{ 7*7 }}",
        "digits": "123",
        "number": 3,
        "flag": True,
        "nothing": None,
        "nested": {"{{ 7*7 }}": [pipe, {"deeper": block}]},
    }
    (tmp_path / "hostile.yml").write_text(HOSTILE_PLAYBOOK)
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "render.j2").write_text("{{ hostile.math }} {{ hostile.block }}")
    out = tmp_path / "out"
    result = runner(tmp_path).run("hostile.yml", ("ns", "pool"), {"hostile": hostile, "out": str(out)})
    assert result.ok, result.message
    assert not touched.exists()
    copied, rendered_pipe, rendered_template = out.read_text().split("\n")
    assert json.loads(copied) == hostile
    assert rendered_pipe == pipe
    assert rendered_template == f"{{{{ 7*7 }}}} {block}"


def test_a_key_reserved_by_ansibles_loader_is_refused_naming_its_field(tmp_path):
    """``__ansible_unsafe``, ``__ansible_vault`` and ``__ansible_type`` are
    read by ansible-core's JSON loader; a value from the API that carries one
    is refused before anything runs, with the field named."""
    run = runner(tmp_path)
    result = run.run("check.yml", ("ns", "pool"), {
        "big": [{"status": {"note": {"__ansible_vault": "x"}}}], "expected": 1})
    assert not result.ok
    assert "big[0].status.note.__ansible_vault" in result.message, result.message
    assert run.artifact_count() == 0


ENV_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: The run has the operator's environment
      ansible.builtin.assert:
        that:
          - lookup('ansible.builtin.env', 'JVE_OPERATOR_SECRET') | hash('sha256') == operator_hash
          - lookup('ansible.builtin.env', 'JVE_RUN_SECRET') | hash('sha256') == run_hash
"""


def test_artifacts_do_not_record_the_environment(tmp_path, monkeypatch):
    """The operator's environment (a token in it, say) and the run's own
    variables reach ansible-playbook, and no artifact file records them."""
    operator_secret, run_secret = os.urandom(16).hex(), os.urandom(16).hex()
    monkeypatch.setenv("JVE_OPERATOR_SECRET", operator_secret)
    (tmp_path / "env.yml").write_text(ENV_PLAYBOOK)
    run = PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts"), env={"JVE_RUN_SECRET": run_secret})
    OPENED.append(run)
    result = run.run("env.yml", ("ns", "pool"), {
        "operator_hash": hashlib.sha256(operator_secret.encode()).hexdigest(),
        "run_hash": hashlib.sha256(run_secret.encode()).hexdigest()})
    assert result.ok, result.message
    files = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    assert any(p.name == "command" for p in files)
    for path in files:
        text = path.read_bytes()
        assert operator_secret.encode() not in text and run_secret.encode() not in text, path
    recorded = json.loads((Path(result.artifact_dir) / "command").read_text())
    assert recorded["command"][0].endswith("ansible-playbook") and "env" not in recorded
