#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: baremetal_drain
short_description: Mark a lab host drained and find the instances to move off it
version_added: 0.1.0
description:
  - Runs where the operator runs, for C(playbooks/drain_host.yml).
  - Adds the host to the C(virtualtarget.jumpstarter.dev/drained-hosts) annotation of every
    qemu-baremetal VirtualTargetClass of the namespace that lists it in C(parameters.hosts)
    (or only of O(virtual_target_class)). Placement then gives the host no new instance, and
    an instance there whose lease ends is replaced, not reset in place.
  - Disables (C(spec.enabled=false)) the unleased Exporters placed on the host, so no lease
    takes them while they are removed, and returns them per ExporterSet with what the
    C(qemu_baremetal) role's C(remove) entry point needs. Leased Exporters are left alone
    until their lease ends - leased from either side (C(status.leaseRef), or a Lease not
    ended naming it), checked on a fresh read, the disable guarded by the Exporter's
    resourceVersion (lease safety, docs/pool-semantics.md).
  - When that would leave a set with no enabled Exporter, its dormant Exporter (no backend,
    never Online) is created first, so the Jumpstarter controller keeps leases for the set
    waiting instead of ending them.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
options:
  lab_host:
    description: Name of the host, as in the class's C(parameters.hosts[].name).
    type: str
    required: true
  namespace:
    description: Namespace of the classes and ExporterSets.
    type: str
    required: true
  virtual_target_class:
    description: Only this class (default every qemu-baremetal class that lists the host).
    type: str
    default: ""
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.attributes.idempotent
  - jumpstarter.virtual_exporters.kubernetes
"""

EXAMPLES = r"""
- name: Drain lab2
  jumpstarter.virtual_exporters.baremetal_drain:
    lab_host: lab2
    namespace: jumpstarter
  register: drain
"""

RETURN = r"""
classes:
  description: Names of the classes the host is drained in.
  returned: always
  type: list
  elements: str
sets:
  description:
    - Per ExporterSet with Exporters on the host C(exporterset), C(virtual_target_class),
      C(owned_exporters), C(merged_parameters), C(remove) (unleased Exporters, now disabled),
      C(leased) (left until their lease ends) and C(dormant) (the dormant Exporter created
      first, or empty).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants, module_base, provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    AUTH_ARG_SPEC,
    module_api_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import plan, set_overrides
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    pool as baremetal_pool,
)


def _lists_host(parameters, host):
    return any(isinstance(h, dict) and h.get("name") == host for h in (parameters or {}).get("hosts") or ())


ARGUMENT_SPEC = dict(
    lab_host=dict(type="str", required=True),
    namespace=dict(type="str", required=True),
    virtual_target_class=dict(type="str", default=""),
)

ERRORS = (*api_errors.module_errors(), (k8s_apply.ApplyError, None))


def run(module):
    from kubernetes import client

    p = module.params
    host, namespace = p["lab_host"], p["namespace"]
    api = module_api_client(module)
    custom = client.CustomObjectsApi(api)
    classes = [
        c for c in custom.list_namespaced_custom_object(*constants.VIRTUAL_TARGET_CLASS.at(namespace))["items"]
        if provisioners.get((c.get("spec") or {}).get("provisioner")).runs_on_lab_hosts
        and (not p["virtual_target_class"] or c["metadata"]["name"] == p["virtual_target_class"])
        and _lists_host((c.get("spec") or {}).get("parameters"), host)
    ]
    if p["virtual_target_class"] and not classes:
        module.fail_json(msg=f"VirtualTargetClass {namespace}/{p['virtual_target_class']} is not a "
                             f"qemu-baremetal class with host {host!r} in parameters.hosts")
    changed = False
    before, after = {}, {}
    for vclass in classes:
        if host in baremetal_pool.drained_hosts(vclass):
            continue
        changed = True
        key = f"VirtualTargetClass/{vclass['metadata']['name']}"
        before[key] = {"drainedHosts": baremetal_pool.drained_hosts(vclass)}
        after[key] = {"drainedHosts": sorted({*before[key]["drainedHosts"], host})}
        if not module.check_mode:
            k8s_status.patch_annotations(
                api, constants.VIRTUAL_TARGET_CLASS, namespace, vclass["metadata"]["name"],
                {baremetal_pool.DRAINED_HOSTS_ANNOTATION: baremetal_pool.with_drained_host(vclass, host)})
    by_class = {c["metadata"]["name"]: c for c in classes}
    exporters = custom.list_namespaced_custom_object(
        *constants.EXPORTER.at(namespace), label_selector=f"{constants.LABEL_HOST}={host}")["items"]
    sets = []
    for exporter_set in custom.list_namespaced_custom_object(*constants.EXPORTER_SET.at(namespace))["items"]:
        vclass = by_class.get((exporter_set.get("spec") or {}).get("virtualTargetClassName"))
        if vclass is None:
            continue
        owned = [e for e in exporters if k8s_objects.controlled_by(e, exporter_set["metadata"]["uid"])]
        if not owned:
            continue
        # Every Exporter of the set, so the role keeps the instances on other hosts.
        set_exporters = [e for e in custom.list_namespaced_custom_object(
            *constants.EXPORTER.at(namespace),
            label_selector=f"{constants.LABEL_EXPORTER_SET}={exporter_set['metadata']['name']}")["items"]
            if k8s_objects.controlled_by(e, exporter_set["metadata"]["uid"])]
        remove, leased, to_disable = [], [], []
        for exporter in owned:
            name, _, _, enabled, lease, terminating = read_exporter(exporter)
            if terminating:
                continue
            if lease:
                leased.append(name)
                continue
            remove.append(name)
            if enabled:
                to_disable.append(name)
        dormant = []
        if to_disable and not exporter_set["metadata"].get("deletionTimestamp") \
                and plan.needs_dormant_exporter(set_exporters, set(to_disable)):
            provisioner = vclass["spec"]["provisioner"]
            entry = plan.dormant_exporter(exporter_set, provisioner, [e["metadata"]["name"] for e in set_exporters])
            applier = k8s_apply.PlanApplier(api, exporter_set, check_mode=module.check_mode)
            manifest = k8s_objects.exporter_manifest(exporter_set, entry, provisioner)
            if applier.create(manifest):
                dormant.append(entry["name"])
                after[f"Exporter/{entry['name']}"] = manifest
        # Lease safety (lease_safety.py), on a fresh read: disabled only while
        # unleased from both sides, with its resourceVersion as precondition;
        # removed only once seen disabled and unleased. The others wait for
        # their lease to end, as leased ones do.
        safety = k8s_apply.PlanApplier(api, exporter_set, check_mode=module.check_mode)
        for name in list(remove):
            if name in to_disable:
                done = safety.disable(name)
                changed = changed or done
                if done:
                    before[f"Exporter/{name}"] = {"spec": {"enabled": True}}
                    after[f"Exporter/{name}"] = {"spec": {"enabled": False}}
            else:
                done = safety.safe_to_act(name) is not None
            if not done:
                remove.remove(name)
                leased.append(name)
        changed = changed or bool(dormant)
        sets.append({
            "exporterset": exporter_set,
            "virtual_target_class": vclass,
            "owned_exporters": set_exporters,
            "dormant": dormant,
            # The hosts as the class has them: a set never redirects one.
            "merged_parameters": set_overrides.resolve(vclass, exporter_set)["parameters"],
            "remove": sorted(remove),
            "leased": sorted(leased),
        })
    module.exit_json(**with_diff(module, dict(changed=changed, classes=sorted(by_class), sets=sets), before, after))


def main():
    module_base.main(run, ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
