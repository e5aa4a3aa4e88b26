"""watches.yaml as the operator reads it: the Ansible Operator SDK's fields,
each honoured or refused by name, and a ``role:`` entry run through a
generated playbook with real ansible-runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from exporterset_operator.controller import Controller
from exporterset_operator.metrics import Metrics
from exporterset_operator.runner import PlaybookRunner
from exporterset_operator.watches import DEFAULT_FINALIZER, SERVED, Role, WatchesError, load_watches

# The checkout: this file is tests/unit/operator/exporterset_operator/ of it.
ROOT = Path(__file__).resolve().parents[4]
GVK = {"group": SERVED[0], "version": SERVED[1], "kind": SERVED[2]}


def load(tmp_path, *entries, root=ROOT):
    path = tmp_path / "watches.yaml"
    path.write_text(yaml.safe_dump(list(entries)))
    return load_watches(path, root=root)


def entry(**fields):
    return {**GVK, "playbook": "playbooks/reconcile.yml", **fields}


def test_the_shipped_file_loads_with_every_field_read():
    watch = load_watches(ROOT / "operator" / "watches.yaml").entry(*SERVED)
    assert watch.runnable() == str(ROOT / "playbooks" / "reconcile.yml")
    assert watch.reconcile_period == 300.0
    assert watch.manage_status and watch.watch_dependent_resources and watch.snake_case_parameters
    assert watch.finalizer.name == DEFAULT_FINALIZER
    # No playbook or role of its own: the finalizer reruns the entry's, with its vars.
    assert watch.finalizer_runnable() == watch.runnable()
    assert watch.finalizer_vars()["exporterset_teardown"] is True
    assert watch.vars["reconcile_plan_options"]["burst"] == 20


@pytest.mark.parametrize("role", [
    "jumpstarter.virtual_exporters.reconcile",  # a collection role
    "reconcile",  # under roles/ of the collection root
    str(ROOT / "roles" / "reconcile"),  # a path
])
def test_a_role_entry_runs_that_role(tmp_path, role):
    raw = {**GVK, "role": role}
    watch = load(tmp_path, raw).entry(*SERVED)
    assert watch.playbook is None
    assert watch.runnable() == Role(str((ROOT / "roles" / "reconcile").resolve()))


def test_a_missing_role_or_playbook_is_named(tmp_path):
    with pytest.raises(WatchesError, match=r"entry 0: role: role 'no-such-role' not found"):
        load(tmp_path, {**GVK, "role": "no-such-role"})
    with pytest.raises(WatchesError, match=r"entry 0: playbook: playbook 'nowhere.yml' not found"):
        load(tmp_path, entry(playbook="nowhere.yml"))
    with pytest.raises(WatchesError, match="exactly one of playbook or role"):
        load(tmp_path, entry(role="reconcile"))
    with pytest.raises(WatchesError, match="exactly one of playbook or role"):
        load(tmp_path, {**GVK})


@pytest.mark.parametrize(("raw", "message"), [
    (entry(reconcilePeriodd="5m"), r"unknown field\(s\) \['reconcilePeriodd'\]"),
    (entry(finalizer={"name": "x", "vars": {"a": 1}, "play": "x"}), r"finalizer: unknown field\(s\) \['play'\]"),
    (entry(finalizer={"vars": {"a": 1}}), r"finalizer\.name: is required"),
    (entry(finalizer={"name": "x"}), "finalizer: needs a playbook, a role or vars"),
    (entry(finalizer={"name": "x", "role": "no-such-role"}), "finalizer.role: role 'no-such-role' not found"),
    (entry(reconcilePeriod="often"), "reconcilePeriod: "),
    (entry(manageStatus="yes"), "manageStatus: must be true or false"),
    (entry(maxRunnerArtifacts=-1), "maxRunnerArtifacts: must be a whole number"),
    (entry(selector={"labels": {"a": "b"}}), "selector: must be a label selector"),
    (entry(vars=["a"]), "vars: must be a mapping"),
    (entry(watchClusterScopedResources=True), "watchClusterScopedResources: only False is supported"),
    (entry(markUnsafe=True), "markUnsafe: only False is supported"),
    (entry(blacklist=[{"group": "", "version": "v1", "kind": "Pod"}]), "blacklist: only"),
    (entry(watchAnnotationsChanges=False), "watchAnnotationsChanges: only True is supported"),
    (entry(kind="Foo"), "group/version/kind virtualtarget.jumpstarter.dev/v1alpha1 Foo is not served"),
    (entry(version=""), "version is required"),
])
def test_anything_else_is_refused_naming_the_field(tmp_path, raw, message):
    with pytest.raises(WatchesError, match=message):
        load(tmp_path, raw)


def test_duplicate_entries_are_refused(tmp_path):
    with pytest.raises(WatchesError, match="entry 1: duplicate group/version/kind"):
        load(tmp_path, entry(), entry())


def test_fields_at_the_values_this_operator_has_are_accepted(tmp_path):
    watch = load(tmp_path, entry(
        watchClusterScopedResources=False, markUnsafe=False, blacklist=[], watchAnnotationsChanges=True,
        reconcilePeriod=0, manageStatus=False, watchDependentResources=False, snakeCaseParameters=False,
        maxRunnerArtifacts=5, selector={"matchLabels": {"tier": "ci"}},
        finalizer={"name": "example.com/cleanup", "role": "reconcile", "vars": {"x": 1}},
    )).entry(*SERVED)
    assert watch.reconcile_period == 0.0
    assert not (watch.manage_status or watch.watch_dependent_resources or watch.snake_case_parameters)
    assert watch.max_runner_artifacts == 5
    assert watch.selector == {"matchLabels": {"tier": "ci"}}
    assert watch.finalizer.name == "example.com/cleanup"
    assert watch.finalizer_runnable() == Role(str((ROOT / "roles" / "reconcile").resolve()))
    assert watch.finalizer_vars() == {"x": 1}


def test_environment_variables_are_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("RECONCILE_PLAYBOOK", "playbooks/reconcile.yml")
    path = tmp_path / "watches.yaml"
    path.write_text(yaml.safe_dump([{**GVK, "playbook": "${RECONCILE_PLAYBOOK}"}]))
    assert load_watches(path, root=ROOT).entry(*SERVED).playbook == str(ROOT / "playbooks" / "reconcile.yml")


ROLE_TASKS = """
- name: Write what arrived
  ansible.builtin.copy:
    dest: "{{ out }}"
    content: "{{ {'name': ansible_operator_meta.name, 'greeting': greeting} | to_json }}"
    mode: "0600"

# What a pass reports (roles/reconcile/tasks/pass.yml); a task result of
# the same shape is not a report.
- name: A result that is no report
  ansible.builtin.set_fact:
    created: [not-this]
- name: Report
  ansible.builtin.set_stats:
    aggregate: false
    data:
      exporterset_pass: {created: ["{{ ansible_operator_meta.name }}-4"], deleted: []}
"""


def test_a_role_runs_from_a_generated_playbook_with_its_vars(tmp_path):
    role = tmp_path / "roles" / "greeter"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(ROLE_TASKS)
    (tmp_path / "operator").mkdir()
    watch = load(tmp_path, {**GVK, "role": "greeter", "vars": {"greeting": "hello"}}, root=tmp_path).entry(*SERVED)
    out = tmp_path / "out.json"
    with PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts")) as runner:
        result = runner.run(watch.runnable(), ("ns", "pool"), {
            **watch.vars, "out": str(out), "ansible_operator_meta": {"name": "pool", "namespace": "ns"}})
    assert result.ok, result.message
    assert json.loads(out.read_text()) == {"name": "pool", "greeting": "hello"}
    # The pass's report is the run's set_stats data, read back.
    assert result.report == {"created": ["pool-4"], "deleted": []}


def test_watch_dependent_resources_false_ignores_the_sets_own_objects():
    owned = {"metadata": {
        "namespace": "ns", "name": "pool-0", "labels": {"virtualtarget.jumpstarter.dev/exporterset": "pool"},
        "ownerReferences": [{"kind": "ExporterSet", "name": "pool", "controller": True}]}}
    for watching, expected in ((True, [("ns", "pool")]), (False, [])):
        controller = Controller(None, lambda caches: None, Metrics(), workers=1,
                                watch_dependent_resources=watching)
        assert list(controller._map_exporter(owned, None)) == expected
        assert list(controller._map_labelled(owned, None)) == expected


def test_reconcile_period_zero_starts_no_periodic_reconcile():
    controller = Controller(None, lambda caches: None, Metrics(), workers=0, resync_period=0)
    controller.start_workers()
    try:
        # No resync thread: only the backend lane's threads run.
        assert [t.name for t in controller._threads if not t.name.startswith("backend-")] == []
        assert any(t.name.startswith("backend-") for t in controller._threads)
    finally:
        controller.stop()
