"""config/prometheus/rules.yaml and config/dashboards/pool.json read only
what the operator exports: every series their expressions name, with every
label they group or match by, is in the exposition of the operator's own
metrics (exporterset_operator/metrics.py) after it has observed a set. No
bed, no process."""

import json
import re
import subprocess

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from exporterset_operator.metrics import Metrics
from operator_process import ROOT
from prometheus_client.parser import text_string_to_metric_families
from testbed import BIN_DIR

CONFIG = ROOT / "config"
METRIC = re.compile(r"\bjumpstarter_exporterset_\w+")
GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")


def _observed_metrics():
    """{series name: its label names} of an operator that has served one
    sized set: a lease served warm, one cold, a cold start, idle time."""
    metrics = Metrics(started=0)
    now = 1_800_000_000.0

    def stamp(seconds):
        from datetime import UTC, datetime
        return datetime.fromtimestamp(now + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    exporters = [{"metadata": {"name": name, "uid": name, "creationTimestamp": stamp(created),
                               "annotations": {c.ANNOTATION_FIRST_READY: stamp(created + 20)}}}
                 for name, created in (("warm-0", -600), ("cold-0", -60))]
    leases = [{"metadata": {"name": name, "uid": name, "creationTimestamp": stamp(created)},
               "spec": {}, "status": {"exporterRef": {"name": holder}, "beginTime": stamp(begin)}}
              for name, holder, created, begin in (("a", "warm-0", -100, -99), ("b", "cold-0", -50, -40))]
    status = {"replicas": 2, "leasedReplicas": 1, "sizing": {"buffer": 1}}
    observed = {"owned": exporters, "leases": leases, "set": {"spec": {"minAvailableReplicas": 0}},
                "policy": {"leaseWait": {"percentile": 95, "target": "5s"}}}
    metrics.observe_set("lab", "rpi4", status, 1)
    for at in (now, now + 30):
        metrics.observe_service("lab", "rpi4", c.PROVISIONER_QEMU, observed, status, at)
    metrics.reconcile_duration.labels("fastpath").observe(0.01)
    for counter, label in ((metrics.reconciles, "fastpath"), (metrics.playbook_runs, "successful")):
        counter.labels(label).inc()
    for counter in (metrics.scale_ups, metrics.scale_downs, metrics.failures):
        counter.labels("lab", "rpi4").inc()
    metrics.fast_path_hits.inc()
    series = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


SERIES = _observed_metrics()


def _rules():
    (document,) = [doc for doc in yaml.safe_load_all((CONFIG / "prometheus" / "rules.yaml").read_text()) if doc]
    assert document["kind"] == "PrometheusRule"
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def _dashboard_expressions():
    dashboard = json.loads((CONFIG / "dashboards" / "pool.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


EXPRESSIONS = [(rule["alert"], rule["expr"]) for rule in _rules()] + [
    (f"dashboard {index}", expr) for index, expr in enumerate(_dashboard_expressions())]


@pytest.mark.parametrize("where, expr", EXPRESSIONS, ids=[where for where, _ in EXPRESSIONS])
def test_an_expression_reads_only_series_and_labels_the_operator_exports(where, expr):
    used = set(METRIC.findall(expr))
    assert used and used <= set(SERIES), used - set(SERIES)
    grouped = {label.strip() for labels in GROUPING.findall(expr) for label in labels.split(",") if label.strip()}
    grouped.discard("le")   # the histogram's bucket
    for name in used:
        # The scrape adds its target's pod, and its namespace to a series
        # without one of its own (config/prometheus/monitor.yaml, honorLabels).
        allowed = SERIES[name] | {"pod"} | ({"namespace"} if "namespace" not in SERIES[name] else set())
        assert grouped <= allowed, (name, grouped - allowed)


def test_the_service_series_are_per_set_without_lease_or_exporter_names():
    for name in ("jumpstarter_exporterset_lease_wait_seconds_bucket",
                 "jumpstarter_exporterset_instance_time_to_ready_seconds_count",
                 "jumpstarter_exporterset_idle_instance_seconds_total",
                 "jumpstarter_exporterset_leases_over_target_total"):
        assert SERIES[name] - {"le", "served"} == {"namespace", "exporterset", "provisioner"}


def test_every_alert_says_how_long_how_bad_and_what_it_means():
    rules = _rules()
    assert {rule["alert"] for rule in rules} == {"ExporterSetLeaseWaitOverTarget", "ExporterSetPoolExhausted"}
    for rule in rules:
        assert re.fullmatch(r"\d+m", rule["for"]) and rule["labels"]["severity"] in ("warning", "critical")
        assert {"summary", "description"} <= set(rule["annotations"])
    assert "rules.yaml" in yaml.safe_load((CONFIG / "prometheus" / "kustomization.yaml").read_text())["resources"]


def promtool():
    binary = BIN_DIR / "promtool"
    if not binary.exists():
        subprocess.run([str(ROOT / "scripts" / "testbed-build")], check=True, timeout=1800)
    return binary


def _series(name, values, **labels):
    """An input series of promtool's rule tests, labelled as the operator
    labels ``name`` (a label it does not give is an error here)."""
    assert set(labels) <= SERIES[name], (name, set(labels) - SERIES[name])
    text = ", ".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def test_promtool_accepts_the_rules_and_they_fire_on_what_the_operator_exports(tmp_path):
    """promtool (Debian's prometheus package) checks the rules and runs them
    over series labelled as the operator's exposition labels them: one set
    whose leases wait too long, one exhausted, one healthy, one without a
    target."""
    rules = tmp_path / "rules.yaml"
    (document,) = [doc for doc in yaml.safe_load_all((CONFIG / "prometheus" / "rules.yaml").read_text()) if doc]
    rules.write_text(yaml.safe_dump(document["spec"]))
    checked = subprocess.run([str(promtool()), "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    prefix = "jumpstarter_exporterset_"
    late, healthy, untargeted = ({"namespace": "lab", "exporterset": name} for name in ("late", "ok", "free"))
    service = {"provisioner": c.PROVISIONER_QEMU}
    series = [
        # 10 leases a minute each; "late" has 1 a minute over its p95 target
        # (10% against the 5% allowed), "ok" none, "free" has no target.
        *(_series(prefix + "lease_wait_seconds_count", "0+10x60", **labels, **service, served="warm")
          for labels in (late, healthy, untargeted)),
        _series(prefix + "leases_over_target_total", "0+1x60", **late, **service),
        _series(prefix + "leases_over_target_total", "0+0x60", **healthy, **service),
        *(_series(prefix + "lease_wait_target_percentile", "95x60", **labels) for labels in (late, healthy)),
        # "late" has leases waiting with nothing available; "ok" has some available.
        _series(prefix + "pending_demand", "2x60", **late),
        _series(prefix + "available_replicas", "0x60", **late),
        _series(prefix + "pending_demand", "1x60", **healthy),
        _series(prefix + "available_replicas", "2x60", **healthy),
    ]
    rule = {r["alert"]: r for r in document["spec"]["groups"][0]["rules"]}

    def fired(name, value):
        """The alert of ``name`` for "late", its annotations rendered."""
        annotations = {key: text.replace("{{ $labels.namespace }}", "lab").replace(
            "{{ $labels.exporterset }}", "late").replace("{{ $value | humanizePercentage }}", value).replace(
            "{{ $value }}", value) for key, text in rule[name]["annotations"].items()}
        return [{"exp_labels": {**late, "severity": "warning"}, "exp_annotations": annotations}]

    alerts = [
        {"eval_time": "50m", "alertname": "ExporterSetLeaseWaitOverTarget",
         "exp_alerts": fired("ExporterSetLeaseWaitOverTarget", "10%")},
        {"eval_time": "12m", "alertname": "ExporterSetLeaseWaitOverTarget", "exp_alerts": []},
        {"eval_time": "15m", "alertname": "ExporterSetPoolExhausted",
         "exp_alerts": fired("ExporterSetPoolExhausted", "2")},
        {"eval_time": "5m", "alertname": "ExporterSetPoolExhausted", "exp_alerts": []},
    ]
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m",
                                     "tests": [{"interval": "1m", "input_series": series,
                                                "alert_rule_test": alerts}]}))
    run = subprocess.run([str(promtool()), "test", "rules", str(tests)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
