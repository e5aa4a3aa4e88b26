#!/usr/bin/python
"""Ansible module: one Corellium virtual instance, addressed by name within a project."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: corellium_instance
short_description: Create, power and delete a Corellium virtual instance
version_added: 0.1.0
author: Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
description:
  - Manages one virtual device in Corellium's cloud through its public REST API
    (C(https://<api_host>/api/v1)).
  - The instance is identified by O(name) within O(project); a second run with the
    same arguments changes nothing.
  - Rate limiting (HTTP 429, honouring C(Retry-After)) and server errors are retried with
    exponential backoff; a retried creation never makes a second instance.
  - A request refused for lack of project quota fails with C(corellium_error.kind=QuotaError)
    and the API's message; a rejected token fails with C(corellium_error.kind=AuthError).
options:
  name:
    description: Instance name, unique within O(project).
    type: str
    required: true
  flavor:
    description:
      - Device flavor (model) to create, for example C(kronos) or C(rpi4b).
      - Required when the instance has to be created.
    type: str
  os:
    description:
      - Firmware (OS) version to create the instance with, for example C(1.1.1).
      - Required when the instance has to be created.
    type: str
  osbuild:
    description: Firmware build to create the instance with, for example
      C(Critical Application Monitor (Baremetal)).
    type: str
  state:
    description:
      - V(present) makes sure the instance exists, whatever its power state.
      - V(on) and V(off) make sure it exists and is powered on or off.
      - V(rebooted) reboots it (starts it when it is off); always a change.
      - V(absent) deletes it; an instance already gone is not a change.
    type: str
    choices: [present, absent, "on", "off", rebooted]
    default: present
  wait:
    description:
      - Wait until the instance reaches the requested state (exists and settled,
        on, off, or gone).
      - An instance that is busy (creating, booting, rebooting) is always waited
        for before its power state is changed, because the API refuses changes then.
    type: bool
    default: true
attributes:
  check_mode:
    description: Reports what would change without calling the API's write endpoints.
    support: full
  diff_mode:
    description: Returns the instance before and after.
    support: full
  idempotent:
    description: Every state except V(rebooted) is idempotent.
    support: partial
notes:
  - Pass the token through O(api_token) or the controller's own environment. The task
    keyword C(environment) shows its values in C(-vvv) output, so it is no place for the token.
  - Flavor, OS and build of an existing instance are never changed; a mismatch is a warning.
    Delete and recreate the instance to change them.
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.corellium
  - jumpstarter.virtual_exporters.corellium.waiting
"""

EXAMPLES = r"""
- name: Keep a Kronos instance running
  jumpstarter.virtual_exporters.corellium_instance:
    api_host: app.corellium.com
    api_token: "{{ corellium_token }}"
    project: 778f00af-5e9b-40e6-8e7f-c4f14b632e9c
    name: kronos-pool-0
    flavor: kronos
    os: "1.1.1"
    osbuild: Critical Application Monitor (Baremetal)
    state: "on"

# CORELLIUM_API_HOST and CORELLIUM_API_TOKEN come from the controller's environment.
- name: Power it off but keep it
  jumpstarter.virtual_exporters.corellium_instance:
    project: Default Project
    name: kronos-pool-0
    state: "off"

- name: Delete it
  jumpstarter.virtual_exporters.corellium_instance:
    api_host: app.corellium.com
    api_token: "{{ corellium_token }}"
    project: Default Project
    name: kronos-pool-0
    state: absent
"""

RETURN = r"""
instance:
  description: The instance after the task; only C(name) and C(state=absent) when it does not exist.
  returned: always
  type: dict
  contains:
    id:
      description: Instance id (UUID); missing when check mode predicts a creation.
      type: str
      sample: 7f4f241c-821f-4219-905f-c3b50b0db5dd
    name:
      description: Instance name.
      type: str
      sample: kronos-pool-0
    project:
      description: Project id.
      type: str
      sample: 778f00af-5e9b-40e6-8e7f-c4f14b632e9c
    flavor:
      description: Device flavor.
      type: str
      sample: kronos
    os:
      description: Firmware version.
      type: str
      sample: 1.1.1
    state:
      description: API state (on, off, creating, booting, rebooting, deleting, paused, error)
        or absent.
      type: str
      sample: "on"
corellium_error:
  description: On failure of an API call, what kind of failure it was.
  returned: failed
  type: dict
  contains:
    kind:
      description: AuthError, QuotaError, NotFoundError, ConflictError, RetryBudgetExhausted,
        StateTimeout, InstanceFailed or CorelliumError.
      type: str
    message:
      description: The API's error text.
      type: str
    status:
      description: HTTP status, when there was a response.
      type: int
    error_id:
      description: The API's errorID, when it sent one.
      type: str
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.ansible_compat import diff_mode  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (  # noqa: E402
    client as corellium_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (  # noqa: E402
    steps as corellium_steps,
)

ABSENT = corellium_client.ABSENT

# Where each requested state leaves the instance's power state; None: as it is.
POWER_TARGET = {"present": None, "on": "on", "off": "off", "rebooted": "on"}


def summarize(instance: dict | None, name: str) -> dict:
    if instance is None:
        return {"name": name, "state": ABSENT}
    return {key: instance.get(key) for key in ("id", "name", "project", "flavor", "os", "state")}


class InstanceManager:
    """Moves one named instance towards the requested state, honouring check mode."""

    def __init__(self, module, client: corellium_client.CorelliumClient):
        self.module = module
        self.client = client
        self.params = module.params
        self.check_mode = module.check_mode
        self.steps = corellium_steps.InstanceSteps(
            client, module.check_mode, self.params["wait_timeout"], self.params["poll_interval"])

    def run(self) -> dict:
        project = self.client.get_project(self.params["project"])
        if project is None:
            self.module.fail_json(msg=f"Corellium project {self.params['project']!r} not found")
        name = self.params["name"]
        instance = self.client.find_instance(project["id"], name)
        before = summarize(instance, name)
        instance = self.steps.released(instance)
        if self.params["state"] == "absent":
            self.steps.delete(instance, self.params["wait"])
            after = summarize(None, name)
        else:
            after = self.ensure(instance, project["id"], name)
        return {"changed": self.steps.changed, "instance": after,
                "diff": {"before": before, "after": after}}

    def ensure(self, instance: dict | None, project_id: str, name: str) -> dict:
        target = POWER_TARGET[self.params["state"]]
        if instance is None:
            instance = self.steps.create(project_id, name, self.params["flavor"], self.params["os"],
                                         self.params["osbuild"])
            if self.check_mode:
                return summarize(instance, name)
            instance = self.client.get_instance(instance["id"]) or instance
            # A new instance boots by itself: on and rebooted need nothing more.
            if target == "off":
                instance, _ = self.steps.power(instance, target)
        else:
            self.warn_on_drift(instance)
            if target is not None:
                instance, _ = self.steps.power(instance, target, reboot=self.params["state"] == "rebooted")
        if self.params["wait"] and not self.check_mode:
            wanted = [target] if target else corellium_steps.SETTLED_STATES
            instance = self.steps.wait_for(instance["id"], wanted)
        return summarize(instance, name)

    def warn_on_drift(self, instance: dict) -> None:
        for option in ("flavor", "os"):
            wanted = self.params[option]
            if wanted and instance.get(option) and instance.get(option) != wanted:
                self.module.warn(f"instance {instance.get('name')!r} has {option} "
                                 f"{instance.get(option)!r}, not {wanted!r}; it is left as it is")


ERRORS = corellium_client.MODULE_ERRORS
ARGUMENT_SPEC = {
    **corellium_steps.connection_argument_spec(),
    "name": {"type": "str", "required": True},
    "flavor": {"type": "str"},
    "os": {"type": "str"},
    "osbuild": {"type": "str"},
    "state": {"type": "str", "default": "present",
              "choices": ["present", "absent", "on", "off", "rebooted"]},
    "wait": {"type": "bool", "default": True},
    **corellium_steps.waiting_argument_spec(),
}


def run(module) -> None:
    result = InstanceManager(module, corellium_steps.client_from_params(module.params)).run()
    if not diff_mode(module):
        result.pop("diff")
    module.exit_json(**result)


def main() -> None:
    module_base.main(run, ARGUMENT_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
