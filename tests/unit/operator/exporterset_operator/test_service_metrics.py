"""metrics.py's lease waits, time to ready and idle instances: what one
process observes of a set, each Lease once, and gone with the set."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import parse_time
from exporterset_operator.metrics import Metrics
from pool_builders import NOW, at, exporter, lease

T0 = parse_time(NOW).timestamp()
QEMU = c.PROVISIONER_QEMU


def begun(name, on, created, begin):
    obj = lease(name, assigned=on, created=created)
    obj["metadata"]["uid"] = name
    obj["status"]["beginTime"] = at(begin)
    return obj


def observed(leases, target="5s"):
    exporters = [exporter("warm-0", created=-3600), exporter("cold-0", created=-100)]
    return {"owned": exporters, "leases": leases, "set": {"spec": {"minAvailableReplicas": 1}},
            "policy": {"leaseWait": {"target": target}} if target else {}}


def value(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels) or 0.0


SET = {"namespace": "lab", "exporterset": "rpi4", "provisioner": QEMU}


def test_each_wait_is_observed_once_by_who_served_it_and_the_late_ones_are_counted():
    metrics = Metrics(started=T0 - 600)
    leases = [begun("a", "warm-0", created=-300, begin=-299), begun("b", "cold-0", created=-90, begin=-38)]
    status = {"replicas": 2, "leasedReplicas": 2}
    for now in (T0, T0 + 5, T0 + 10):
        metrics.observe_service("lab", "rpi4", QEMU, observed(leases), status, now)
    assert value(metrics, "jumpstarter_exporterset_lease_wait_seconds_count", **SET, served="warm") == 1
    assert value(metrics, "jumpstarter_exporterset_lease_wait_seconds_sum", **SET, served="cold") == 52
    assert value(metrics, "jumpstarter_exporterset_leases_over_target_total", **SET) == 1
    assert value(metrics, "jumpstarter_exporterset_instance_time_to_ready_seconds_count", **SET) == 1
    assert value(metrics, "jumpstarter_exporterset_lease_wait_target_seconds", namespace="lab",
                 exporterset="rpi4") == 5
    assert value(metrics, "jumpstarter_exporterset_warm_buffer", namespace="lab", exporterset="rpi4") == 1


def test_a_restarted_process_observes_nothing_from_before_it_started_and_idle_time_from_its_first_look():
    # A process (or a standby that now leads) counts from its first reconcile on.
    metrics = Metrics()
    leases = [begun("a", "warm-0", created=-300, begin=-299)]
    metrics.observe_service("lab", "rpi4", QEMU, observed(leases), {"replicas": 3, "leasedReplicas": 1}, T0)
    metrics.observe_service("lab", "rpi4", QEMU, observed(leases), {"replicas": 3, "leasedReplicas": 1}, T0 + 30)
    assert value(metrics, "jumpstarter_exporterset_lease_wait_seconds_count", **SET, served="warm") == 0
    assert value(metrics, "jumpstarter_exporterset_idle_instance_seconds_total", **SET) == 60


def test_a_deleted_set_leaves_no_series_and_one_without_a_target_has_no_target_series():
    metrics = Metrics(started=0)
    metrics.observe_service("lab", "rpi4", QEMU, observed([begun("a", "warm-0", -300, -299)], target=None),
                            {"replicas": 1, "leasedReplicas": 1}, T0)
    exposition = metrics.exposition().decode()
    assert "lease_wait_target_seconds{" not in exposition and 'exporterset="rpi4"' in exposition
    metrics.forget_set("lab", "rpi4")
    assert 'exporterset="rpi4"' not in metrics.exposition().decode()


def test_a_reconcile_observes_the_sets_lease_waits_from_its_caches(monkeypatch):
    from exporterset_operator import set_reconciler
    from exporterset_operator.reconciler import Reconciler
    from pool_builders import exporter_set, target_class
    from test_operator_reconcilers import caches

    the_set = exporter_set(min_available=0)
    the_set["metadata"]["finalizers"] = [set_reconciler.FINALIZER]
    held = exporter("pool-0", lease="l1", created=-3600)
    stores = caches([the_set], [target_class()], [held])
    stores["Lease"].put(begun("l1", "pool-0", created=-120, begin=-100))
    monkeypatch.setattr(set_reconciler.reconcile_pass, "keep_finalizer", lambda *args, **kwargs: None)
    metrics = Metrics(started=0)
    reconciler = Reconciler(stores, None, None, metrics, {QEMU}, clock=lambda: parse_time(NOW))
    reconciler._apply_in_process = lambda *args, **kwargs: {"created": [], "deleted": []}
    reconciler.reconcile(("lab", "rpi4"))
    assert value(metrics, "jumpstarter_exporterset_lease_wait_seconds_sum", **SET, served="warm") == 20
