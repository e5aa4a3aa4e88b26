#!/usr/bin/python
"""Ansible module: read a Corellium project's instances and quota."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: corellium_info
short_description: List a Corellium project's instances and its quota
version_added: 0.1.0
author: Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
description:
  - Reads one project through Corellium's public REST API (C(https://<api_host>/api/v1))
    and returns its instances (optionally only those whose name starts with a prefix)
    with the project's instance quota and usage.
  - Read only; the same retry, authentication and quota behaviour as
    M(jumpstarter.virtual_exporters.corellium_instance).
options:
  name_prefix:
    description: Only instances whose name starts with this, for example one pool's prefix.
    type: str
attributes:
  check_mode:
    description: Read only; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
  idempotent:
    description: Read only.
    support: full
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.corellium
"""

EXAMPLES = r"""
- name: Instances of the kronos pool
  jumpstarter.virtual_exporters.corellium_info:
    api_host: app.corellium.com
    api_token: "{{ corellium_token }}"
    project: Default Project
    name_prefix: kronos-pool-
  register: corellium
"""

RETURN = r"""
project:
  description: The project with its instance quota and usage.
  returned: always
  type: dict
  contains:
    id:
      description: Project id.
      type: str
    name:
      description: Project name.
      type: str
    instance_quota:
      description: How many instances the project may hold; null when the API does not say.
      type: int
    instances_used:
      description: How many instances the project holds now, as the API counts them.
      type: int
instances:
  description: The matching instances, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Instance id.
      type: str
    name:
      description: Instance name.
      type: str
    flavor:
      description: Device flavor.
      type: str
    os:
      description: Firmware version.
      type: str
    state:
      description: API state.
      type: str
corellium_error:
  description: On failure of an API call, what kind of failure it was (see corellium_instance).
  returned: failed
  type: dict
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (  # noqa: E402
    client as corellium_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (  # noqa: E402
    steps as corellium_steps,
)

INSTANCE_FIELDS = ("id", "name", "project", "flavor", "os", "state")


ERRORS = corellium_client.MODULE_ERRORS
ARGUMENT_SPEC = {
    **corellium_steps.connection_argument_spec(),
    "name_prefix": {"type": "str"},
}


def run(module) -> None:
    params = module.params
    client = corellium_steps.client_from_params(params)
    project = client.get_project(params["project"])
    if project is None:
        module.fail_json(msg=f"Corellium project {params['project']!r} not found")
    prefix = params["name_prefix"] or ""
    instances = sorted(
        ({field: instance.get(field) for field in INSTANCE_FIELDS}
         for instance in client.list_instances(project=project["id"])
         if (instance.get("name") or "").startswith(prefix)),
        key=lambda instance: instance["name"] or "",
    )
    module.exit_json(
        changed=False,
        project={
            "id": project["id"],
            "name": project.get("name"),
            "instance_quota": (project.get("quotas") or {}).get("instances"),
            "instances_used": (project.get("quotasUsed") or {}).get("instances"),
        },
        instances=instances,
    )


def main() -> None:
    module_base.main(run, ARGUMENT_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
