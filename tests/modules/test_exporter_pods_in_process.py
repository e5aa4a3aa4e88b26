"""exporter_pods on the bed both ways a task runs it: in the task's worker
process (a local task, as the operator's runs are) and as the module (the
same task with ``environment:``), in one ansible-playbook run. Check mode
reports the instance it would make and makes nothing, the same both ways;
a reset that cannot be made in a running Pod says why in a warning of the
task's result. The adapter's own cases (arguments, errors,
secrets) are unit tests: tests/unit/plugins/action/test_exporter_pods_action.py."""

from __future__ import annotations

import base64

from ansible_play import run_tasks
from kubernetes import client
from kubernetes.client.rest import ApiException
from pool_helpers import give_credential, make_class, make_owned_exporter, make_set

FQCN = "jumpstarter.virtual_exporters.exporter_pods"
EXPORTERS = ("jumpstarter.dev", "v1alpha1")
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n").decode()
NO_POD = "not reset in its running Pod, it has no Pod of its own; a fresh Pod replaces it"


def _exists(read, *args):
    try:
        read(*args)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def test_check_mode_and_warnings_in_process_as_in_the_module(testbed, namespace, tmp_path):
    with testbed.api_client() as api:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        vclass = make_class(custom, namespace)
        the_set = make_set(custom, namespace)
        exporter = give_credential(api, namespace, make_owned_exporter(custom, namespace, the_set))

        args = {"exporterset": the_set, "virtual_target_class": vclass, "owned_exporters": [exporter],
                "exporters": ["pool-0"], "parameters": vclass["spec"]["parameters"], "controller_tls_ca": CA}
        module = {"environment": {"JVE_AS_MODULE": "1"}}
        tasks = [{FQCN: args, "check_mode": True}, {FQCN: args, "check_mode": True, **module},
                 {FQCN: {**args, "state": "reset"}}]
        checked, checked_module, reset = run_tasks(tmp_path, tasks)

        for result in (checked, checked_module):
            assert not result.get("failed") and result["changed"] and result["created"] == ["pool-0"], result
        # Check mode made nothing, either way.
        assert not _exists(core.read_namespaced_pod, "pool-0", namespace)
        assert not _exists(core.read_namespaced_secret, "pool-0-config", namespace)
        keys = ("changed", "created", "deleted", "waiting", "resynced", "noted", "reset")
        assert {k: checked[k] for k in keys} == {k: checked_module[k] for k in keys}
        # The warning is said in one of the work's threads.
        assert not reset.get("failed") and not reset["changed"] and reset["deleted"] == [], reset
        assert f"{namespace}/pool-0: {NO_POD}" in reset.get("warnings", []), reset
