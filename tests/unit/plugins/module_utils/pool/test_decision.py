"""pool/decision.py: a pool pass decided from what it observed (``decide``)
and done in its one order (``execute``). Properties over every observation,
and over real plans of random pools (scale_plan, parted as the operator
parts them): nothing leased is touched, the floor holds, a paused set asks
nothing of its backends, the outcome waits for them."""

import copy

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import decision
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pool_builders import NOW, exporter, exporter_set, target_class

FINALIZER = decision.FINALIZER
SUCCESSFUL = {"type": "Successful", "status": "True", "observedGeneration": 3}


@st.composite
def sets(draw):
    the_set = exporter_set(status={"conditions": [SUCCESSFUL]} if draw(st.booleans()) else None)
    if draw(st.booleans()):
        the_set["metadata"]["finalizers"] = [FINALIZER]
    if draw(st.booleans()):
        the_set["metadata"]["deletionTimestamp"] = NOW
    return the_set


@st.composite
def observations(draw):
    plan = {"changed": draw(st.booleans())}
    if draw(st.booleans()):
        plan["paused"] = True
    requeue = draw(st.none() | st.floats(0.5, 600))
    if requeue is not None:
        plan["requeue_after"] = requeue
    return decision.Observation(
        draw(sets()), has_class=draw(st.booleans()), expectations_met=draw(st.booleans()), plan=plan,
        pool_plan={"changed": draw(st.booleans()), "create": [{"name": "rpi4-0"}]},
        backends_needed=draw(st.booleans()), busy=draw(st.booleans()), failed=draw(st.booleans()),
        sync_wait=draw(st.none() | st.floats(0.1, 30)),
        teardown=draw(st.sampled_from([None, None, "delete", "detach"])),
        teardown_left=tuple(draw(st.lists(st.sampled_from(["rpi4-0", "rpi4-1", "rpi4-0-pod"]), unique=True))),
        teardown_waits_for=draw(st.sampled_from([{}, {"rpi4-0": ["lease-a"]}])))


OPTIONS = st.builds(decision.Options, finalizer=st.sampled_from([FINALIZER, None, "", "other/finalizer"]),
                    manage_status=st.booleans(), may_write_finalizer=st.booleans(), records=st.booleans())


@given(observations(), OPTIONS)
def test_a_pass_is_what_its_observation_says(observation, options):
    kept = copy.deepcopy(observation)
    decided = decision.decide(observation, options)
    assert observation == kept and decision.decide(observation, options) == decided
    the_set = observation.exporter_set
    if the_set["metadata"].get("deletionTimestamp"):
        check_teardown(observation, options, decided)
        return
    assert decided.records is options.records and decided.teardown is None
    # The finalizer: only where the account may, on a living set whose class
    # exists and that lacks it.
    wants = (options.may_write_finalizer and bool(options.finalizer) and observation.has_class
             and not the_set["metadata"].get("deletionTimestamp")
             and options.finalizer not in (the_set["metadata"].get("finalizers") or []))
    assert decided.finalizer == (options.finalizer if wants else None)
    assert decided.path in decision.PATHS
    if not observation.expectations_met:
        # The last writes not seen: nothing written, nothing asked, a look again soon.
        assert decided == decision.Pass(finalizer=decided.finalizer, requeue_after=decision.EXPECTATIONS_REQUEUE,
                                        path="waiting", records=options.records)
        return
    paused = bool(observation.plan.get("paused"))
    assert decided.paused is paused
    if paused:
        assert decided.backends != decision.SUBMIT and not decided.outcome
    if observation.busy:
        assert decided.backends is None
    if decided.backends == decision.SUBMIT:
        assert observation.backends_needed and not decided.outcome
    if decided.outcome:
        assert options.manage_status and not (observation.busy or observation.failed or observation.backends_needed)
        assert not (the_set.get("status") or {}).get("conditions")
        assert decided.pool_writes.write_outcome
    # Pool writes: the pool part of the plan, as it is, when it changes
    # something or carries the outcome; never the backends' part.
    assert (decided.pool_writes is not None) == bool(observation.pool_plan["changed"] or decided.outcome)
    if decided.pool_writes is not None:
        assert decided.pool_writes.plan is observation.pool_plan and decided.path == "inprocess"
        if decided.pool_writes.write_outcome:
            assert options.manage_status and not observation.busy and not observation.failed
    waits = [w for w in (observation.plan.get("requeue_after"), observation.sync_wait) if w]
    assert decided.requeue_after == (min(waits) if observation.sync_wait else observation.plan.get("requeue_after"))


def check_teardown(observation, options, decided):
    """A deleted set: never planned as a living one; nothing unless it
    carries the operator's finalizer; then the finalizer goes once nothing
    is left, else its backends are released unless only leased Exporters
    remain, never before the last pass's writes are seen."""
    assert decided.pool_writes is None and decided.finalizer is None and not decided.outcome
    ours = bool(options.finalizer) and options.finalizer in observation.exporter_set["metadata"].get("finalizers", [])
    if not (observation.teardown and ours):
        assert decided == decision.Pass(path="skipped")
    elif not observation.teardown_left:
        assert decided == decision.Pass(release_finalizer=options.finalizer, backends=decision.CLEAR,
                                        records=options.records, path="teardown")
    elif not observation.expectations_met:
        assert decided == decision.Pass(requeue_after=decision.EXPECTATIONS_REQUEUE, path="waiting",
                                        records=options.records)
    elif observation.teardown_waits_for:
        assert decided == decision.Pass(wait_for_leases=observation.teardown_waits_for, records=options.records,
                                        path="teardown")
    else:
        # Its backends released, then (finish) its Exporters and finalizer.
        assert decided == decision.Pass(backends=decision.SUBMIT, teardown=observation.teardown,
                                        records=options.records, path="teardown")


class Recorder:
    def __init__(self):
        self.calls = []

    def add_finalizer(self, name):
        self.calls.append(("finalizer", name))

    def write_pool(self, plan, write_outcome):
        self.calls.append(("pool", write_outcome))
        return {"written": plan}

    def submit(self):
        self.calls.append(("backends", "submit"))

    def clear_failure(self):
        self.calls.append(("backends", "clear"))

    def wait_for_leases(self, leased):
        self.calls.append(("wait", tuple(leased)))

    def release_finalizer(self, name):
        self.calls.append(("release", name))

    def write_backends(self):
        self.calls.append(("after-backends",))

    def record(self, error):
        self.calls.append(("record", error))


@given(observations(), OPTIONS)
def test_a_pass_is_done_in_its_one_order_and_only_what_it_says(observation, options):
    decided = decision.decide(observation, options)
    recorder = Recorder()
    applied = decision.execute(decided, recorder, recorder)
    # The finalizer, the pool writes, then the backends: a backend is
    # removed only after the pool part (its Exporter disabled, a new one
    # made) is written.
    expected = [("finalizer", decided.finalizer)] if decided.finalizer else []
    if decided.pool_writes is not None:
        expected.append(("pool", decided.pool_writes.write_outcome))
        assert applied == {"written": decided.pool_writes.plan}
    else:
        assert applied is None
    expected += [("wait", tuple(decided.wait_for_leases))] if decided.wait_for_leases else []
    expected += [("release", decided.release_finalizer)] if decided.release_finalizer else []
    expected += [("backends", decided.backends)] if decided.backends else []
    assert recorder.calls == expected


@given(observations(), OPTIONS, st.none() | st.text(min_size=1, max_size=20))
def test_a_pass_is_finished_after_its_backends_and_records_only_where_it_records(observation, options, error):
    decided = decision.decide(observation, options)
    recorder = Recorder()
    decision.finish(decided, recorder, error)
    # What waited for the backends is written only when they did not fail;
    # the outcome (and the class's and policies' status) last, by a pass
    # that records them; a deleted set that is not the operator's is not.
    expected = [("after-backends",)] if error is None else []
    expected += [("record", error)] if options.records and decided.path != "skipped" else []
    assert recorder.calls == expected


@st.composite
def pools(draw):
    """A set (floor, warm buffer, ceiling, maybe paused) and its Exporters:
    ready or not, enabled or not, leased or not."""
    min_replicas = draw(st.integers(0, 4))
    the_set = exporter_set(min_replicas=min_replicas, max_replicas=draw(st.sampled_from([0, 6])),
                           min_available=draw(st.integers(0, 3)), cooldown="0s")
    exporters = [exporter(f"rpi4-{i}", ready=draw(st.booleans()), enabled=draw(st.booleans()),
                          lease=f"lease-{i}" if draw(st.booleans()) else None,
                          annotations={c.ANNOTATION_SCALE_DOWN: "2026-11-21T07:00:00Z"} if draw(st.booleans())
                          else None)
                 for i in range(draw(st.integers(0, 7)))]
    paused = draw(st.booleans())
    return the_set, exporters, paused


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(pools(), st.booleans(), st.booleans())
def test_on_real_plans_nothing_leased_is_touched_and_the_floor_holds(pool, busy, failed):
    the_set, exporters, paused = pool
    options = {"policy": {"paused": True}} if paused else None
    plan = scale_plan(the_set, target_class(), exporters, [], NOW, options=options)
    pool_plan, backend_plan = k8s_observe.split_plan(plan, the_set, c.PROVISIONER_QEMU)
    needed = bool(backend_plan) and not paused
    observation = decision.Observation(the_set, has_class=True, plan=plan, pool_plan=pool_plan,
                                       backends_needed=needed, busy=busy, failed=failed)
    decided = decision.decide(observation)
    leased = {e["metadata"]["name"] for e in exporters if (e.get("status") or {}).get("leaseRef")}
    writes = decided.pool_writes.plan if decided.pool_writes is not None else {}
    removed = set(writes.get("disable") or []) | {d["name"] for d in writes.get("delete") or []}
    assert not removed & leased
    # Scale-down never takes the pool below its floor (a failed one is
    # replaced whatever the floor).
    scaled_down = [d for d in writes.get("delete") or [] if d.get("reason") == c.DELETE_SCALE_DOWN]
    assert len(exporters) - len(scaled_down) >= min(len(exporters), the_set["spec"]["minReplicas"])
    if paused:
        assert decided.backends != decision.SUBMIT and not removed and not writes.get("create")
