#!/usr/bin/python
"""Ansible module: the Corellium instances of a pool, many names in one run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: corellium_instances
short_description: Create, power off, recreate or delete many Corellium instances at once
version_added: 0.1.0
author: Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
description:
  - Brings every instance named in O(names) within O(project) to O(state) in one module
    run, with one listing of the project's instances, so a reconcile pays one Python start
    for all of its instances.
  - Instances are identified by name; a second run with the same arguments changes nothing
    (except O(state=recreated), which always makes fresh instances).
  - With O(owned_exporters) given, O(names) are Exporter names and each Exporter's instance
    is named after it and a digest of its namespace and UID, so sets in other namespaces
    sharing the project, and earlier Exporters of the same name, never find, reset or delete
    each other's instances.
  - Rate limiting (HTTP 429, honouring C(Retry-After)) and server errors are retried with
    exponential backoff by the shared client; a retried creation never makes a second instance.
  - With O(exporterset) given and O(state=present), a rejected token or an exhausted quota
    does not fail the task. The names that could not be made are returned in RV(waiting), the
    refusal in RV(refusal), and RV(set_changes) holds the annotation and Event that record it on
    the set (pass it to M(jumpstarter.virtual_exporters.exporterset_apply) as its plan). The
    pool then waits, doubling the wait on each refusal in a row, before it asks again.
options:
  api_token:
    description:
      - Corellium API token, sent as a Bearer token. Never logged or returned.
      - Defaults to the E(CORELLIUM_API_TOKEN) environment variable. An empty token is
        treated as a rejected one.
    type: str
    required: true
  ca_data:
    description: PEM certificate authorities to trust in addition to the system ones,
      as text (for example the content of the class's C(caBundleConfigMapRef) ConfigMap).
    type: str
  names:
    description:
      - Instance names, unique within O(project); with O(owned_exporters), the names of the
        Exporters whose instances are meant.
    type: list
    elements: str
    required: true
  owned_exporters:
    description:
      - The set's Exporters. Each of O(names) must be one of them; its instance is called
        C(<exporter name, cut to 47 characters>-<16 hex digits of sha256 over namespace and UID>).
      - The return values stay keyed by Exporter name; RV(devices) maps them to instance names.
    type: list
    elements: dict
  flavor:
    description: Device flavor of instances to create, for example C(kronos).
      Required when an instance has to be created.
    type: str
  os:
    description: Firmware (OS) version of instances to create. Required when an instance has
      to be created.
    type: str
  osbuild:
    description: Firmware build of instances to create.
    type: str
  state:
    description:
      - V(present) creates the instances that do not exist; existing ones are left in whatever
        power state they are.
      - V(off) powers existing instances off; missing ones are not created.
      - V(recreated) deletes each existing instance, waits until its name is free, and creates
        it afresh (a new device with a new disk).
      - V(absent) deletes the instances; those already gone are not a change.
    type: str
    choices: [present, absent, "off", recreated]
    default: present
  wait:
    description:
      - Wait until each instance reached O(state) (on after a creation, off, or gone).
      - An instance that is being deleted is always waited for before its name is used again,
        and a busy one (creating, booting) before it is powered off, whatever O(wait) says.
    type: bool
    default: false
  exporterset:
    description:
      - The ExporterSet the instances belong to. With it, refusals are reported for the set
        (see RV(set_changes)) instead of failing the task.
    type: dict
  virtual_target_class:
    description: The set's VirtualTargetClass, named with its Secret in refusal messages.
    type: dict
attributes:
  check_mode:
    description: Reports what would change without calling the API's write endpoints.
    support: full
  diff_mode:
    support: full
    description: Returns each named instance before and after (or as it would be, in check mode).
  idempotent:
    description: Every state except V(recreated) is idempotent.
    support: partial
notes:
  - Pass the token through O(api_token) or the controller's own environment; the task keyword
    C(environment) shows its values in C(-vvv) output.
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.corellium
  - jumpstarter.virtual_exporters.corellium.waiting
"""

EXAMPLES = r"""
- name: Make the Corellium instances of new pool members
  jumpstarter.virtual_exporters.corellium_instances:
    api_host: "{{ merged_parameters.api.host }}"
    api_token: "{{ corellium_api_token }}"
    project: "{{ merged_parameters.api.projectId }}"
    flavor: "{{ merged_parameters.device.flavor }}"
    os: "{{ merged_parameters.device.os }}"
    names: "{{ provisioner_exporters }}"
    owned_exporters: "{{ owned_exporters }}"
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    virtual_target_class: "{{ virtual_target_class }}"
  register: made

- name: Delete two instances and wait until they are gone
  jumpstarter.virtual_exporters.corellium_instances:
    api_host: app.corellium.com
    api_token: "{{ corellium_token }}"
    project: Default Project
    names: [kronos-pool-3, kronos-pool-4]
    state: absent
    wait: true
"""

RETURN = r"""
devices:
  description: The Corellium instance name of each of O(names).
  returned: always
  type: dict
  sample: {"pool-0": "pool-0-1f0c2b7a9d3e4c55"}
instances:
  description: Each named instance after the task (C(state=absent) when it does not exist).
  returned: always
  type: dict
  sample: {"pool-0": {"id": "7f4f241c-821f-4219-905f-c3b50b0db5dd", "state": "creating"}}
created:
  description: Names whose instance was created (or recreated).
  returned: always
  type: list
  elements: str
deleted:
  description: Names whose instance was deleted.
  returned: always
  type: list
  elements: str
powered_off:
  description: Names whose instance was powered off.
  returned: always
  type: list
  elements: str
present:
  description: Names that have an instance after the task.
  returned: always
  type: list
  elements: str
waiting:
  description: Names whose instance could not be made because the API refused.
  returned: always
  type: list
  elements: str
refusal:
  description: Why the API refused to make instances; null when it did not.
  returned: always
  type: dict
  contains:
    reason:
      description: C(CredentialsRejected) or C(QuotaExceeded).
      type: str
    message:
      description: What users read; for quota, the API's own message.
      type: str
set_changes:
  description: Plan fragment (C(set_state), C(events)) that records or clears the refusal
    on the set; empty when nothing is to change or O(exporterset) was not given.
  returned: always
  type: dict
"""

from datetime import UTC, datetime  # noqa: E402

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import with_diff  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import backend_refusal  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import (  # noqa: E402
    corellium as corellium_provisioner,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (  # noqa: E402
    client as corellium_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import identity  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (  # noqa: E402
    steps as corellium_steps,
)

ABSENT = corellium_client.ABSENT


def summarize(instance: dict | None) -> dict:
    if instance is None:
        return {"state": ABSENT}
    return {key: instance.get(key) for key in ("id", "flavor", "os", "state")}


class PoolInstances:
    """Moves each named instance towards the requested state, honouring check mode."""

    def __init__(self, module, client: corellium_client.CorelliumClient | None):
        self.module = module
        self.client = client
        self.params = module.params
        self.check_mode = module.check_mode
        self.result = {"devices": {}, "instances": {}, "created": [], "deleted": [], "powered_off": [],
                       "present": [], "waiting": [], "refusal": None, "set_changes": {}}
        # The named instances before and after (--diff), by their device name.
        self.before, self.after = {}, {}
        self.steps = corellium_steps.InstanceSteps(
            client, module.check_mode, self.params["wait_timeout"], self.params["poll_interval"])

    # -- helpers -------------------------------------------------------------

    def describe_refusal(self, error: corellium_client.CorelliumError) -> dict:
        """The refusal as the set shows it: a reason and a message users can act on."""
        if isinstance(error, corellium_client.QuotaError):
            return {"reason": backend_refusal.REASON_QUOTA_EXCEEDED, "message": error.message}
        vclass = self.params["virtual_target_class"] or {}
        meta = vclass.get("metadata") or {}
        secret = ((vclass.get("spec") or {}).get("credentialsSecretRef") or {}).get("name") or "?"
        return {
            "reason": backend_refusal.REASON_CREDENTIALS_REJECTED,
            "message": f"Corellium API {self.params['api_host']} rejected the token of "
                       f"VirtualTargetClass {meta.get('name', '?')} (Secret "
                       f"{meta.get('namespace', '?')}/{secret}, key "
                       f"{corellium_provisioner.CREDENTIALS_KEY}): {error.message}",
        }

    # -- run -------------------------------------------------------------------

    def device_names(self, names: list[str]) -> dict:
        """{name: Corellium instance name}; Exporter-derived with ``owned_exporters``."""
        owned = self.params["owned_exporters"]
        if owned is None:
            return {name: name for name in names}
        by_name = {(e.get("metadata") or {}).get("name"): e for e in owned}
        foreign = [name for name in names if name not in by_name]
        if foreign:
            self.module.fail_json(msg=f"names: {', '.join(foreign)} not among owned_exporters; "
                                      "only the set's own Exporters have instances")
        try:
            return {name: identity.exporter_instance_name(by_name[name]) for name in names}
        except ValueError as error:
            self.module.fail_json(msg=f"owned_exporters: {error}")

    def run(self) -> dict:
        names = list(dict.fromkeys(self.params["names"]))
        self.result["devices"] = self.device_names(names)
        reports_refusals = self.params["exporterset"] is not None and self.params["state"] in (
            "present", "recreated")
        try:
            if self.client is None:
                raise corellium_client.AuthError("the API token is empty")
            self.apply(names)
        except (corellium_client.AuthError, corellium_client.QuotaError) as error:
            if self.params["virtual_target_class"] is None:
                raise
            refusal = self.describe_refusal(error)
            if not reports_refusals:
                self.module.fail_json(msg=refusal["message"], corellium_error=error.as_dict(),
                                      **self.result)
            self.result["refusal"] = refusal
            done = set(self.result["present"])
            self.result["waiting"] = [name for name in names if name not in done]
        exporter_set = self.params["exporterset"]
        if exporter_set is not None:
            refusal = self.result["refusal"]
            if refusal is not None:
                self.result["set_changes"] = backend_refusal.record(
                    exporter_set, refusal["reason"], refusal["message"], datetime.now(UTC))
            elif self.params["state"] in ("present", "recreated"):
                self.result["set_changes"] = backend_refusal.cleared(exporter_set)
        changed = bool(self.result["created"] or self.result["deleted"]
                       or self.result["powered_off"] or self.result["set_changes"])
        return with_diff(self.module, {"changed": changed, **self.result}, self.before, self.after)

    def apply(self, names: list[str]) -> None:
        project = self.client.get_project(self.params["project"])
        if project is None:
            self.module.fail_json(msg=f"Corellium project {self.params['project']!r} not found")
        devices = self.result["devices"]
        wanted = set(devices.values())
        existing = {}
        for instance in self.client.list_instances(project=project["id"]):
            device = instance.get("name")
            if device not in wanted:
                continue
            if device in existing:
                self.module.fail_json(msg=f"several instances are named {device!r} in project "
                                          f"{project['id']}")
            existing[device] = instance
        state = self.params["state"]
        for name in names:
            instance = existing.get(devices[name])
            self.before[f"Instance/{devices[name]}"] = summarize(instance)
            if state == "absent":
                instance = self.delete(name, instance, wait=self.params["wait"])
            elif state == "off":
                instance = self.power_off(name, instance)
            else:
                if state == "recreated" and instance is not None:
                    instance = self.delete(name, instance, wait=True)
                instance = self.ensure(project["id"], name, devices[name], instance)
            self.result["instances"][name] = self.after[f"Instance/{devices[name]}"] = summarize(instance)
            if instance is not None:
                self.result["present"].append(name)

    # -- states ----------------------------------------------------------------

    def delete(self, name: str, instance: dict | None, wait: bool) -> dict | None:
        if self.steps.delete(instance, wait):
            self.result["deleted"].append(name)
        return None

    def ensure(self, project_id: str, name: str, device: str, instance: dict | None) -> dict | None:
        instance = self.steps.released(instance)
        if instance is not None:
            return instance
        created = self.steps.create(project_id, device, self.params["flavor"], self.params["os"],
                                    self.params["osbuild"])
        self.result["created"].append(name)
        if self.check_mode:
            return created
        if self.params["wait"]:
            return self.steps.wait_for(created["id"], ["on"])
        return self.client.get_instance(created["id"]) or created

    def power_off(self, name: str, instance: dict | None) -> dict | None:
        if instance is None:
            return None
        instance, changed = self.steps.power(instance, "off")
        if not changed:
            return instance
        self.result["powered_off"].append(name)
        if self.params["wait"] and not self.check_mode:
            return self.steps.wait_for(instance["id"], ["off"])
        return instance


ERRORS = corellium_client.MODULE_ERRORS
ARGUMENT_SPEC = {
    **corellium_steps.connection_argument_spec(ca_data=True),
    "names": {"type": "list", "elements": "str", "required": True},
    "owned_exporters": {"type": "list", "elements": "dict"},
    "flavor": {"type": "str"},
    "os": {"type": "str"},
    "osbuild": {"type": "str"},
    "state": {"type": "str", "default": "present",
              "choices": ["present", "absent", "off", "recreated"]},
    "wait": {"type": "bool", "default": False},
    **corellium_steps.waiting_argument_spec(),
    "exporterset": {"type": "dict"},
    "virtual_target_class": {"type": "dict"},
}


def run(module) -> None:
    params = module.params
    client = None
    token = (params["api_token"] or "").strip()
    if token:
        client = corellium_steps.client_from_params({**params, "api_token": token})
    result = PoolInstances(module, client).run()
    module.exit_json(**result)


def main() -> None:
    module_base.main(run, ARGUMENT_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
