"""From the objects of one namespace to the inputs and plan of one reconcile.

Pure functions over plain dicts. The operator feeds them from its informer
caches; the ``exporterset_info`` module feeds them from API reads when the
reconcile playbook runs by hand. Both therefore plan the same way.

The controller CA (``controller_ca``) is the one input read on demand: only
a reconcile that is about to make backends needs it, so ``plan_for`` calls
the reader it is given then, and no backend is made without it.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants, provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import config_sync, lifecycle
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (
    adoption,
    backend_refusal,
    lease_safety,
    operator_state,
    policy,
    pool_index,
    rollout,
    selectors,
    set_overrides,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (
    attribute_leases,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.model import Plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import parse_time

# The playbook that re-syncs the config Secrets of a Pod-backed set's running
# instances (token, endpoint, CA, drivers); it notes the time on the set.
# The operator runs it on the pass that sees an instance's inputs change
# (k8s/config_sync.py), at most once per CONFIG_SYNC_MIN_SECONDS, or, where
# it cannot see the inputs (no Secret and ConfigMap caches), when nothing
# else ran the provisioner for CONFIG_SYNC_SECONDS.
CONFIG_SYNC_PLAYBOOK = "playbooks/config_sync.yml"
CONFIG_SYNC_SECONDS = 300
CONFIG_SYNC_MIN_SECONDS = 5
CONFIG_SYNCED_KEY = operator_state.CONFIG_SYNCED_AT


def _labels(obj):
    return obj["metadata"].get("labels") or {}


def observe(exporter_set, namespace_objects, now):
    """Select what concerns ``exporter_set`` among a namespace's objects.

    ``namespace_objects`` maps kind to a list: ``VirtualTargetClass``,
    ``ExporterSet``, ``Exporter``, ``Lease``, ``Pod`` (Pods may be limited to
    those labelled with a set), ``ExporterSetPolicy`` (none when missing),
    and, where the caller sees them, ``Secret`` (metadata is enough) and
    ``ConfigMap``: the inputs of the instances' config (k8s/config_sync.py).
    """
    meta = exporter_set["metadata"]
    name, uid = meta["name"], meta["uid"]
    class_name = (exporter_set.get("spec") or {}).get("virtualTargetClassName", "")
    vclass = next(
        (c for c in namespace_objects["VirtualTargetClass"] if c["metadata"]["name"] == class_name), None
    )
    exporters = namespace_objects["Exporter"]
    owned = _select(exporters, lambda e: k8s_objects.controlled_by(e, uid), uid)
    owned_names = {e["metadata"]["name"] for e in owned}
    # A Pod is the set's when one of its Exporters controls it (owner
    # reference by UID); labels alone are anyone's to copy.
    owned_uids = {e["metadata"]["name"]: e["metadata"].get("uid") for e in owned}
    pods = [
        p
        for p in namespace_objects["Pod"]
        if _labels(p).get(constants.LABEL_EXPORTER_SET) == name
        and k8s_objects.controlled_by(p, owned_uids.get(_labels(p).get(constants.LABEL_EXPORTER)))
    ]
    leases = namespace_objects["Lease"]
    # A set whose template labels are refused makes nothing: a pending lease
    # is never demand for it, or the set it copied would never serve it.
    sets = namespace_objects["ExporterSet"]
    groups = selectors.exporter_groups(exporters)
    consented = _consented_labels(namespace_objects["VirtualTargetClass"])
    serving = [s for s in sets if not selectors.template_label_conflicts(
        s, sets, constants.LABEL_EXPORTER_SET, groups, consented(s))]
    demand, withheld = attribute_leases(serving, leases, exporters, now)
    pending_names = set(demand.get(name, []))
    # The set over its class without credential redirects: what every
    # provisioner entry point gets as merged_parameters and merged_images.
    resolved = set_overrides.resolve(vclass, exporter_set) if vclass is not None else None
    # The set's pool controls, and a PolicyValid=False condition when its
    # policy is invalid or not the only one (pool/policy.py).
    set_policy, policy_condition = policy.policy_for(
        exporter_set, namespace_objects.get(constants.EXPORTER_SET_POLICY.kind) or ())
    lab = provisioners.get(((vclass or {}).get("spec") or {}).get("provisioner")).lab_view(
        exporter_set, vclass, owned, exporters, now, (resolved or {}).get("parameters"))
    # Why its template labels are refused (another set's, or reserved).
    label_conflicts = selectors.template_label_conflicts(exporter_set, sets, constants.LABEL_EXPORTER_SET, groups,
                                                         consented(exporter_set))
    # The Exporters it adopts now and those its selector matches that it may
    # not take (pool/adoption.py); a refused set adopts nothing.
    adopt, not_adopted = [], []
    if vclass is not None and not label_conflicts and not (resolved or {}).get("violations"):
        adopt, not_adopted = adoption.adoption(
            exporter_set, exporters, (vclass.get("spec") or {}).get("provisioner"),
            lease_safety.LeaseView(leases))
    return {
        "set": exporter_set,
        "class": vclass,
        "owned": owned,
        "pods": pods,
        "pending": [lease for lease in leases if lease["metadata"]["name"] in pending_names],
        # The Leases naming one of the set's Exporters: who holds them, and
        # whose lease ended (lease_safety.py).
        "leases": _select(leases, lambda lease: lease_safety.assigned_exporter(lease) in owned_names,
                          pool_index.revision(owned)),
        "taken_names": sorted(e["metadata"]["name"] for e in exporters),
        "refusal": backend_refusal.read(exporter_set),
        "lab": lab,
        "resolved": resolved,
        # The merged parameters' errors, each naming the field: while there
        # are any, no backend is made, reset or re-synced (``held``).
        "parameter_errors": [] if resolved is None else validate_parameters(
            (vclass.get("spec") or {}).get("provisioner"), resolved["parameters"])["errors"],
        "now": now,
        "controller_ca": None,
        "policy": set_policy,
        "policy_condition": policy_condition,
        "label_conflicts": label_conflicts,
        "adopt": adopt,
        "not_adopted": not_adopted,
        # The pending leases it would serve that an Exporter no set controls
        # can serve: not its demand (pool/demand.py).
        "withheld_leases": withheld.get(name, []),
        # The other sets whose selectors overlap its own (reported on both).
        "selector_overlaps": selectors.selector_overlaps(exporter_set, sets, constants.LABEL_EXPORTER_SET),
        # The Secrets and ConfigMaps of the namespace by name, when seen: a
        # re-sync is then due when an input changes (config_sync_due).
        "config_inputs": _config_inputs(namespace_objects),
    }


def _config_inputs(namespace_objects):
    secrets, configmaps = namespace_objects.get("Secret"), namespace_objects.get("ConfigMap")
    if secrets is None or configmaps is None:
        return None
    return {"secrets": {s["metadata"]["name"]: s for s in secrets},
            "configmaps": {c["metadata"]["name"]: c for c in configmaps}}


def _select(objects, keep, *facts):
    """The objects ``keep`` selects; from a cache's snapshot, a snapshot whose
    revision is the cache's with ``facts`` (pool_index.Snapshot)."""
    if isinstance(objects, pool_index.Snapshot):
        return objects.derived(keep, *facts)
    return [obj for obj in objects if keep(obj)]


def provisioner_of(observed):
    return ((observed["class"] or {}).get("spec") or {}).get("provisioner")


def plan_for(exporter_set, observed, options=None, read_controller_ca=None, surveys=None):
    """The scale plan; reads the controller CA (once) when backends are to be made.

    ``read_controller_ca`` is a callable returning
    ``controller_ca.read_controller_ca``'s result; its result is kept in
    ``observed["controller_ca"]``, which ``unprovisioned`` and
    ``playbook_variables`` read. Without a reader no backend is made.
    ``surveys``: the caller's ``pool_index.SurveyCache`` (the operator's), if any.
    """
    plan = _plan(exporter_set, observed, options, surveys)
    if read_controller_ca is not None and _makes_backends(observed, plan):
        observed["controller_ca"] = read_controller_ca()
        plan = _plan(exporter_set, observed, options, surveys)
    return plan


def _makes_backends(observed, plan):
    """Whether the reconcile starts exporters: new instances, fresh Pods in
    place, or running ones whose config is to be re-synced."""
    if paused(observed):
        return False
    resets_pods = plan.get("recycle") and provisioners.get(provisioner_of(observed)).resets_with_fresh_pod
    return bool(resets_pods or _credentialed_without_backend(observed) or config_sync_due(observed))


def running_exporters(observed):
    """The enabled Exporters of a Pod-backed set whose own Pod exists and
    that were made from the set's current template: the instances whose
    config a run re-syncs (``exporter_pods`` ``synced``). One made from an
    earlier template is the rollout's (pool/rollout.py): restarting it here
    would take it out of the pool beside those the rollout takes, past its
    ``maxUnavailable``, and start it on what its template no longer says."""
    if not provisioners.get(provisioner_of(observed)).has_pods:
        return []
    current = _template_hash(observed)
    uids = {e["metadata"]["name"]: e["metadata"].get("uid") for e in observed["owned"]}
    with_pods = {
        _labels(p).get(constants.LABEL_EXPORTER) for p in observed["pods"]
        if not p["metadata"].get("deletionTimestamp")
        and k8s_objects.controlled_by(p, uids.get(_labels(p).get(constants.LABEL_EXPORTER)))
    }
    return sorted(
        e["metadata"]["name"] for e in observed["owned"]
        if e["metadata"]["name"] in with_pods and not e["metadata"].get("deletionTimestamp")
        and constants.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {})
        and (e.get("spec") or {}).get("enabled", True)
        and not rollout.outdated(e["metadata"].get("annotations"), current)
    )


def _template_hash(observed):
    """The hash of what the set's new instances are made from
    (``rollout.template_hash``), None without a class; computed once per
    observation (``running_exporters`` is asked several times a pass)."""
    if "template_hash" not in observed:
        resolved = observed.get("resolved")
        observed["template_hash"] = rollout.template_hash(
            observed["class"], observed["set"], resolved["parameters"],
            resolved["images"]) if resolved and observed.get("class") else None
    return observed["template_hash"]


def config_sync_due(observed, exporter_set=None):
    """Whether the running instances' config is to be re-synced now: always
    on a run by hand (``observed["sync_config"]``, set by
    ``exporterset_info``); where the inputs are seen (``config_inputs``),
    once an unleased running instance's config Secret notes other inputs
    than now's (``stale_configs``) and the last sync is
    CONFIG_SYNC_MIN_SECONDS old; elsewhere once the set's last sync
    (``CONFIG_SYNCED_KEY`` of its operator state, else its creation) is
    CONFIG_SYNC_SECONDS old."""
    if paused(observed) or held(observed) or not running_exporters(observed):
        return False
    if observed.get("sync_config"):
        return True
    if observed.get("config_inputs") is not None:
        return bool(stale_configs(observed)) and _since_sync(observed, exporter_set) >= CONFIG_SYNC_MIN_SECONDS
    return _since_sync(observed, exporter_set) >= CONFIG_SYNC_SECONDS


def exporters_to_resync(observed, exporter_set=None):
    """The running instances whose config a run re-syncs: none unless a
    re-sync is due (``config_sync_due``), so a run that makes or removes
    backends starts no module for it; then those whose config Secret notes
    other inputs than now's where the inputs are seen (``stale_configs``),
    else (a run by hand, no inputs seen) every running one."""
    if not config_sync_due(observed, exporter_set):
        return []
    if observed.get("config_inputs") is not None and not observed.get("sync_config"):
        return stale_configs(observed)
    return running_exporters(observed)


def config_sync_wait(observed, exporter_set=None):
    """Seconds until a re-sync that is wanted but held back by
    CONFIG_SYNC_MIN_SECONDS may run (the set is looked at again then), or None."""
    if (paused(observed) or held(observed) or observed.get("config_inputs") is None
            or not stale_configs(observed)):
        return None
    wait = CONFIG_SYNC_MIN_SECONDS - _since_sync(observed, exporter_set)
    return wait if wait > 0 else None


def stale_configs(observed):
    """The running, unleased instances whose config Secret notes other inputs
    than now's (k8s/config_sync.py); empty when the inputs are not seen.
    Computed once per observation."""
    inputs = observed.get("config_inputs")
    if inputs is None or observed["class"] is None:
        return []
    if "stale_configs" not in observed:
        observed["stale_configs"] = config_sync.stale_instances(
            observed["set"], observed["class"], observed["owned"], running_exporters(observed),
            observed.get("leases") or [], (observed.get("resolved") or {}).get("parameters") or {},
            inputs["secrets"], inputs["configmaps"])
    return observed["stale_configs"]


def _since_sync(observed, exporter_set=None):
    """Seconds since the set's config was last re-synced (else since its
    creation): 0 without either time, infinite when it is unreadable."""
    exporter_set = exporter_set or observed.get("set") or {}
    since = (operator_state.get(exporter_set, CONFIG_SYNCED_KEY)
             or (exporter_set.get("metadata") or {}).get("creationTimestamp"))
    if not since:
        return 0.0
    try:
        return (parse_time(observed["now"]) - parse_time(since)).total_seconds()
    except (TypeError, ValueError):
        return float("inf")


def _plan(exporter_set, observed, options, surveys=None):
    options = dict(options or {})
    options["taken_names"] = observed["taken_names"]
    options["controller_ca"] = observed.get("controller_ca")
    options["policy"] = observed.get("policy") or policy.normalize(None)
    options["label_conflicts"] = observed.get("label_conflicts") or ()
    if options["policy"]["paused"]:
        return policy.apply_to_plan(
            scale_plan(exporter_set, observed["class"], observed["owned"], observed["pending"], observed["now"],
                       options=options),
            exporter_set, observed.get("policy_condition"), observed["now"])
    lab = observed.get("lab")
    instances = k8s_objects.instances_from_pods(observed["pods"])
    if lab is not None:
        instances = lab.instances()
        options["capacity"] = lab.capacity()
    refusal = observed.get("refusal")
    options["capacity"] = backend_refusal.capacity(refusal, observed["now"], options.get("capacity"))
    plan = scale_plan(
        exporter_set,
        observed["class"],
        observed["owned"],
        observed["pending"],
        observed["now"],
        instances=instances,
        options=options,
        leases=observed.get("leases"),
        surveys=surveys,
    )
    if lab is not None:
        lab.complete_plan(plan)
    plan = backend_refusal.apply_to_plan(plan, exporter_set, refusal, observed["now"])
    plan = adoption.apply_to_plan(plan, exporter_set, observed.get("adopt") or [],
                                  observed.get("selector_overlaps") or [], observed.get("not_adopted") or [],
                                  observed["now"], mismatch=adoption.selector_mismatch(exporter_set),
                                  withheld=observed.get("withheld_leases") or [])
    return policy.apply_to_plan(plan, exporter_set, observed.get("policy_condition"), observed["now"])


def split_plan(plan, exporter_set, provisioner, acting=()):
    """The pool's part of ``plan`` and the backends' part (``Plan.split``), as dicts.

    The pool's part is written at once; the backends' part (None when there
    is none) goes to the reconcile playbook. Exporters in ``acting`` (a
    backend run is at work on them) are left out of the pool's part. A
    provisioner whose instance is its Pod and config Secret has them deleted
    with the Exporter (k8s_apply.PlanApplier.delete); any other provisioner's
    instance is removed by its role before its Exporter goes.
    """
    removed_with_exporter = provisioners.get(provisioner).removed_with_exporter
    pool, backend = Plan.from_dict(plan, exporter_set).split(removed_with_exporter, acting)
    return pool.to_dict(), backend.to_dict() if backend is not None else None


def unprovisioned(observed):
    """Exporters whose backend does not exist yet but can be made now.

    Nothing is made until the controller CA was read and is available (the
    plan reports it Degraded otherwise).
    """
    if not (observed.get("controller_ca") or {}).get("available") or paused(observed):
        return []
    return _credentialed_without_backend(observed)


def paused(observed):
    """Whether the set's ExporterSetPolicy pauses it: no backend is made,
    reset, removed or probed, and its plan acts on nothing."""
    return bool((observed.get("policy") or {}).get("paused"))


def _consented_labels(classes):
    """``set -> (key, value) labels`` its class lets it share with Exporters no
    set controls (set_overrides.shared_labels), each class read once."""
    by_name = {c["metadata"]["name"]: c for c in classes or ()}
    read = {}

    def consented(exporter_set):
        name = (exporter_set.get("spec") or {}).get("virtualTargetClassName", "")
        if name not in read:
            read[name] = set_overrides.shared_labels(by_name.get(name))
        return read[name]

    return consented


def held(observed):
    """Why no backend of the set is made, reset in place or re-synced now:
    its refusals (``set_overrides``), its refused template labels and its
    merged parameters' errors, each a message naming the field; empty when
    there are none. Removing a backend is not held (the plan resets none of
    an invalid set either: pool/plan.py)."""
    return [*((observed.get("resolved") or {}).get("violations") or ()),
            *(observed.get("label_conflicts") or ()), *(observed.get("parameter_errors") or ())]


def _credentialed_without_backend(observed):
    """Exporters that have their credential and no backend yet.

    A backend needs the exporter credential that the Jumpstarter controller
    creates; until ``status.credential`` names it there is nothing to do, and
    the Exporter's own status update brings the set back for another look.
    While the backend's refusal holds, nothing can be made: the plan requeues
    the set for the moment it may be asked again. Lab hosts say themselves
    what runs on them (``Provisioner.lab_view``). The dormant Exporter never has a
    backend. A set that is ``held`` (refused by its class, its template
    labels refused, or its merged parameters invalid) gets no backend at all.
    """
    if held(observed):
        return []
    if observed.get("lab") is not None:
        return observed["lab"].unprovisioned()
    if not provisioners.get(provisioner_of(observed)).has_pods:
        return []
    if backend_refusal.holds(observed.get("refusal"), observed["now"]):
        return []
    # A Pod counts only for the Exporter whose UID owns it: one left by an
    # earlier Exporter of the same name is replaced (exporter_pods).
    uids = {e["metadata"]["name"]: e["metadata"].get("uid") for e in observed["owned"]}
    with_pods = {
        _labels(p).get(constants.LABEL_EXPORTER) for p in observed["pods"]
        if k8s_objects.controlled_by(p, uids.get(_labels(p).get(constants.LABEL_EXPORTER)))
    }
    return sorted(
        e["metadata"]["name"]
        for e in observed["owned"]
        if e["metadata"]["name"] not in with_pods
        and not e["metadata"].get("deletionTimestamp")
        and constants.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {})
        and e.get("spec", {}).get("enabled", True)
        and ((e.get("status") or {}).get("credential") or {}).get("name")
    )


def probe_playbook(observed):
    """The playbook that probes the set's backends when they are due, else None.

    A provisioner whose hosts report on themselves has them probed by a
    playbook of its own when their last report is old (the reconcile
    playbook runs only when there is work).
    """
    lab = observed.get("lab")
    if lab is not None and not paused(observed) and lab.probe_due():
        return provisioners.get(provisioner_of(observed)).probe_playbook
    if config_sync_due(observed):
        return CONFIG_SYNC_PLAYBOOK
    return None


def playbook_variables(exporter_set, observed, plan, teardown=False):
    """The Ansible Operator SDK's variables for the set, plus what was observed."""
    vclass = observed["class"] or {}
    resolved = observed.get("resolved") or set_overrides.resolve(vclass, exporter_set)
    meta = exporter_set["metadata"]
    spec = exporter_set.get("spec") or {}
    variables = k8s_objects.snake_case_spec(spec)
    variables.update(
        {
            "_virtualtarget_jumpstarter_dev_exporterset": exporter_set,
            "ansible_operator_meta": {"name": meta["name"], "namespace": meta["namespace"]},
            "virtual_target_class": vclass,
            "owned_exporters": observed["owned"],
            "owned_pods": observed["pods"],
            "exporterset_plan": plan,
            "exporterset_teardown": teardown,
            # How a teardown releases the set's instances (the class's reclaimPolicy).
            "exporterset_reclaim": lifecycle.reclaim(observed["class"]),
            "unprovisioned_exporters": unprovisioned(observed),
            "exporters_with_backends": [
                e["metadata"]["name"] for e in observed["owned"]
                if constants.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {})
            ],
            "controller_tls_ca": (observed.get("controller_ca") or {}).get("tls_ca", ""),
            # Pod-backed instances whose config this run re-syncs (exporter_pods synced).
            "running_exporters": exporters_to_resync(observed, exporter_set),
            "config_synced_key": CONFIG_SYNCED_KEY,
            "merged_parameters": resolved["parameters"],
            "merged_images": resolved["images"],
            # The role that makes the class's backends ('' for no provisioner the
            # collection knows): the registry's, so it is named in one place.
            "provisioner_role": provisioners.get(provisioner_of(observed)).role,
        }
    )
    return variables
