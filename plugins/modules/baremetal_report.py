#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: baremetal_report
short_description: Record what the lab hosts of a qemu-baremetal set reported, on the set
version_added: 0.1.0
description:
  - Runs where the operator runs, after M(jumpstarter.virtual_exporters.baremetal_instances)
    ran on every host of the set.
  - Writes the host report into the ExporterSet's status (C(status.operatorState.hostReport),
    through the status subresource, which a set's author cannot write). Every reconcile reads
    it back for the state of the instances, the free slots and the hosts that stopped
    answering (and since when).
  - A host that answered replaces its entry; one that did not keeps its last entry and the
    time it was first missed.
  - A set that no longer exists is left alone.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
attributes:
  idempotent:
    support: full
    description: A second run with the same input reports no change.
    details: >-
      Every run records what the probe saw; recording an observation reports no change
      (see C(hosts_changed) for whether a host's entry moved).
options:
  results:
    description:
      - Per host name C(unreachable) and C(instances) (the
        M(jumpstarter.virtual_exporters.baremetal_instances) result), as the C(qemu_baremetal)
        role collects them in C(qemu_baremetal_instances).
    type: dict
    required: true
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.exporterset
  - jumpstarter.virtual_exporters.kubernetes
"""

EXAMPLES = r"""
- name: Record the host report on the set
  jumpstarter.virtual_exporters.baremetal_report:
    namespace: "{{ ansible_operator_meta.namespace }}"
    exporterset: "{{ ansible_operator_meta.name }}"
    results: "{{ qemu_baremetal_instances }}"
"""

RETURN = r"""
report:
  description: The report as written (C(probedAt), C(hosts)).
  returned: always
  type: dict
hosts_changed:
  description: Whether a host's reachability or instances differ from the previous report.
  returned: always
  type: bool
written:
  description: Whether the set existed and the report was written.
  returned: always
  type: bool
"""

from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import (
    constants,
    exporterset_options,
    module_base,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    AUTH_ARG_SPEC,
    module_api_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    pool as baremetal_pool,
)

ARGUMENT_SPEC = dict(
    **exporterset_options.SET_NAME,
    results=dict(type="dict", required=True),
)

ERRORS = api_errors.module_errors()


def run(module):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    p = module.params
    api = module_api_client(module)
    try:
        exporter_set = client.CustomObjectsApi(api).get_namespaced_custom_object(
            *constants.EXPORTER_SET.at(p["namespace"]), p["exporterset"])
    except ApiException as exc:
        if exc.status == 404:
            module.exit_json(changed=False, written=False, report={})
        raise api_errors.ApiError(f"reading ExporterSet {p['namespace']}/{p['exporterset']}", exc) from exc
    previous = baremetal_pool.read_report(exporter_set)
    report = baremetal_pool.next_report(previous, p["results"], datetime.now(UTC))
    if not module.check_mode:
        k8s_status.write_state(api, p["namespace"], p["exporterset"],
                               {baremetal_pool.REPORT_KEY: baremetal_pool.encode_report(report)},
                               given=exporter_set)
    # Recording an observation changes nothing on the hosts or in the pool;
    # like an _info module it reports no change. hosts_changed says whether
    # what was observed moved.
    result = dict(changed=False, hosts_changed=baremetal_pool.report_changed(previous, report),
                  written=not module.check_mode, report=report)
    key = f"ExporterSet/{p['exporterset']}"
    module.exit_json(**with_diff(module, result, {key: {"hostReport": previous}}, {key: {"hostReport": report}}))


def main():
    module_base.main(run, ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
