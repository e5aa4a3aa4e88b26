"""The operator's ansible-runner wrapper, with real ansible-runner runs."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from exporterset_operator.runner import PlaybookRunner  # noqa: E402

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
    return PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts"), max_artifacts=max_artifacts)


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
