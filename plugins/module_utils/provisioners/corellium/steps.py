"""The steps that move a named Corellium instance, written once.

``corellium_instance`` (one instance, any power state) and
``corellium_instances`` (a pool's instances, many names in one run) both
drive instances through these steps, so a name being released, a busy
instance, a creation and a deletion are handled the same way by both. Every
step honours check mode: it says what would change and calls nothing that
writes.
"""

from __future__ import annotations

from ansible.module_utils.basic import env_fallback
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (
    client as corellium_client,
)

ABSENT = corellium_client.ABSENT
# States an instance rests in; anything else it leaves by itself.
SETTLED_STATES = ("on", "off", "paused")


def connection_argument_spec(ca_data=False):
    """The options that reach the API and name the project, as every Corellium module spells them."""
    spec = {
        "api_host": {"type": "str", "required": True,
                     "fallback": (env_fallback, ["CORELLIUM_API_HOST"])},
        "api_token": {"type": "str", "required": True, "no_log": True,
                      "fallback": (env_fallback, ["CORELLIUM_API_TOKEN"])},
        "project": {"type": "str", "required": True},
        "ca_path": {"type": "path"},
        "validate_certs": {"type": "bool", "default": True},
    }
    if ca_data:
        spec["ca_data"] = {"type": "str"}
    return spec


def waiting_argument_spec():
    """How long the modules that change instances wait for one, and how often they look."""
    return {
        "wait_timeout": {"type": "int", "default": 600},
        "poll_interval": {"type": "float", "default": 5},
    }


def client_from_params(params):
    """The client for a module's connection options."""
    return corellium_client.CorelliumClient(
        params["api_host"], params["api_token"], ca_path=params["ca_path"],
        ca_data=params.get("ca_data"), validate_certs=params["validate_certs"],
    )


class InstanceSteps:
    """Each step takes the instance as last read (None: there is none) and
    returns it as it is after the step; ``changed`` says whether any step
    changed (or, in check mode, would change) something."""

    def __init__(self, client, check_mode, wait_timeout, poll_interval):
        self.client = client
        self.check_mode = check_mode
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.changed = False

    def wait_for(self, instance_id, states):
        return self.client.wait_for_state(instance_id, states, self.wait_timeout, self.poll_interval)

    def released(self, instance):
        """None for an instance being deleted, once it is gone (not waited for in
        check mode): a creation next to the dying one would make a second
        instance of that name."""
        if instance is not None and instance.get("state") == "deleting":
            if not self.check_mode:
                self.wait_for(instance["id"], [ABSENT])
            return None
        return instance

    def create(self, project_id, name, flavor, os, osbuild=None):
        """A new instance (as predicted in check mode); fails naming the missing options."""
        missing = [option for option, value in (("flavor", flavor), ("os", os)) if not value]
        if missing:
            raise ValueError(f"instance {name!r} does not exist; creating it needs {' and '.join(missing)}")
        self.changed = True
        if self.check_mode:
            return {"name": name, "project": project_id, "flavor": flavor, "os": os, "state": "creating"}
        created = self.client.create_instance(project_id, name, flavor, os, osbuild)
        return {**created, "name": created.get("name") or name}

    def delete(self, instance, wait):
        """Delete it (an instance already being deleted is only waited for); True when this run deleted it."""
        if instance is None:
            return False
        deleted = False
        if instance.get("state") != "deleting":
            if self.check_mode:
                self.changed = True
                return True
            deleted = self.client.delete_instance(instance["id"])
            self.changed = self.changed or deleted
        if wait and not self.check_mode:
            self.wait_for(instance["id"], [ABSENT])
        return deleted

    def power(self, instance, target, reboot=False):
        """Bring it to power state ``target`` (``reboot``: even when it is already on).

        A busy instance is waited for first, as the API refuses changes then.
        Returns (instance, whether this step changed it).
        """
        if instance.get("state") == target and not reboot:
            return instance, False
        if instance.get("state") in corellium_client.TRANSITIONAL_STATES and not self.check_mode:
            instance = self.wait_for(instance["id"], SETTLED_STATES)
            if instance.get("state") == target and not reboot:
                return instance, False
        self.changed = True
        if self.check_mode:
            return {**instance, "state": target}, True
        if reboot and instance.get("state") == "on":
            self.client.reboot(instance["id"])
        else:
            self.client.set_state(instance["id"], target)
        return self.client.get_instance(instance["id"]) or instance, True
