#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: baremetal_targets
short_description: Work out what each lab host of a qemu-baremetal set must do, and how to reach it
version_added: 0.1.0
description:
  - Runs where the operator runs. Reads the SSH private key and C(known_hosts) from the
    class's C(credentialsSecretRef) Secret (keys C(ssh-privatekey), C(known_hosts)) into
    files only the operator's user can read, for the SSH connections to the hosts.
  - New Exporters get their host when the plan creates them. Exporters that still have
    none (made before that, or by hand) are placed here the same way, on an open host with
    the most free slots, and labelled with it.
  - For O(action=provision), reads each Exporter's token from the credential Secret the
    Jumpstarter controller named in C(status.credential) and renders its ExporterConfig
    (with the controller CA as C(tls.ca) and C(exitOnLeaseEnd));
    Exporters still waiting for the credential are returned in C(waiting), and so are
    those whose credential Secret does not name their UID among its owners (a token
    issued to an earlier Exporter of the same name is never used).
  - The set's dormant Exporter has no instance and is never placed.
  - For O(action=remove) and O(action=reset), an Exporter that a fresh read, made just before
    the hosts act, shows leased from either side or still enabled is left out (lease safety);
    its instance is kept.
  - Returns one entry per host with the names to act on, for M(jumpstarter.virtual_exporters.baremetal_instances).
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
options:
  action:
    description:
      - The provisioner entry point; C(probe) only reads the state of the instances on every
        host (and removes leftovers through C(keep)).
    type: str
    choices: [provision, remove, reset, retain, probe]
    required: true
  ssh_dir:
    description: Where the SSH key and known_hosts of each class are written.
    type: path
    default: ~/.ansible/jumpstarter-baremetal
  controller_tls_ca:
    description:
      - The Jumpstarter controller's CA bundle, base64-encoded PEM, written as C(tls.ca)
        into every ExporterConfig. Empty writes none.
    type: str
    default: ""
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.exporterset.provisioner
  - jumpstarter.virtual_exporters.attributes.idempotent
  - jumpstarter.virtual_exporters.kubernetes
"""

EXAMPLES = r"""
- name: Work out what each lab host must do
  jumpstarter.virtual_exporters.baremetal_targets:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    virtual_target_class: "{{ virtual_target_class }}"
    owned_exporters: "{{ owned_exporters }}"
    exporters: "{{ provisioner_exporters }}"
    parameters: "{{ merged_parameters }}"
    action: provision
  register: targets
  no_log: true
"""

RETURN = r"""
hosts:
  description:
    - Per host of C(parameters.hosts) C(name), C(address), C(port), C(user), C(keep),
      C(control_path) (the SSH ControlPath, keyed by the credential too), C(uids) (the
      Exporter UID of each name acted on) and the names for the action; for provision also
      C(configs) (ExporterConfigs without token).
  returned: always
  type: list
  elements: dict
tokens:
  description: For provision, host name to {Exporter name, its token}. Secret.
  returned: always
  type: dict
ssh:
  description: C(private_key_file) and C(known_hosts_file) for the connections, and
    C(credential), a SHA-256 digest of both that keys SSH multiplexing.
  returned: always
  type: dict
placed:
  description: Exporter name to the host it was placed on in this run.
  returned: always
  type: dict
waiting:
  description: Exporters whose credential does not exist yet, or was issued to another UID.
  returned: always
  type: list
  elements: str
limited:
  description: Why some Exporters could not be placed (no free slot), or empty.
  returned: always
  type: str
image_cache_quota:
  description:
    - Bytes each lab host's image cache may hold after a run's fetches
      (O(jumpstarter.virtual_exporters.baremetal_instances#module:image_cache_quota)); the class's
      annotation C(virtualtarget.jumpstarter.dev/image-cache-quota), else 64 GiB.
  returned: always
  type: int
image_max_size:
  description:
    - Bytes an image a lab host fetches by url may have
      (O(jumpstarter.virtual_exporters.baremetal_instances#module:image_max_size)); the class's
      annotation C(virtualtarget.jumpstarter.dev/image-max-size), else 16 GiB, as for the node cache.
  returned: always
  type: int
image_hosts:
  description:
    - The hosts a lab host's image fetch may follow a redirect to besides the url's own
      (O(jumpstarter.virtual_exporters.baremetal_instances#module:image_hosts)), those of the
      class's own urls and its C(image-hosts) entry, as for the node cache.
  returned: always
  type: list
  elements: str
"""

import base64
import copy
import os
from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import (
    constants,
    exporterset_options,
    module_base,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import writer
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    AUTH_ARG_SPEC,
    ClusterModule,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import credentials, exporter_config
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes, with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import set_overrides
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    hosts as baremetal,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    pool as baremetal_pool,
)


class Targets(ClusterModule):
    def __init__(self, module):
        super().__init__(module)
        self.api = self.api_client
        self.namespace = self.p["exporterset"]["metadata"]["namespace"]
        self.changed = False
        self.changes = Changes()
        self.writer = writer.Writer(self.api_client, check_mode=module.check_mode, changes=self.changes)

    def _secret(self, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.core.read("Secret", self.namespace, name).get("data") or {}
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_errors.ApiError(f"reading Secret {self.namespace}/{name}", exc) from exc

    def ssh_files(self):
        ref = (self.p["virtual_target_class"].get("spec") or {}).get("credentialsSecretRef") or {}
        if not ref.get("name"):
            self.module.fail_json(msg="spec.credentialsSecretRef: qemu-baremetal needs the SSH key Secret")
        data = self._secret(ref["name"])
        missing = [k for k in (baremetal.SECRET_PRIVATE_KEY, baremetal.SECRET_KNOWN_HOSTS)
                   if not (data or {}).get(k)]
        if missing:
            self.module.fail_json(msg=f"Secret {self.namespace}/{ref['name']}: missing {', '.join(missing)}")
        directory = os.path.join(self.p["ssh_dir"], self.namespace, ref["name"])  # type path: expanded
        files = {"private_key_file": os.path.join(directory, "id"),
                 "known_hosts_file": os.path.join(directory, "known_hosts"),
                 # Keys the SSH multiplexing of this credential (hosts.control_path).
                 "credential": baremetal.credential_digest(
                     base64.b64decode(data[baremetal.SECRET_PRIVATE_KEY]),
                     base64.b64decode(data[baremetal.SECRET_KNOWN_HOSTS]))}
        if not self.module.check_mode:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            for key, path in ((baremetal.SECRET_PRIVATE_KEY, files["private_key_file"]),
                              (baremetal.SECRET_KNOWN_HOSTS, files["known_hosts_file"])):
                content = base64.b64decode(data[key])
                if not content.endswith(b"\n"):
                    content += b"\n"
                descriptor = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(content)
                os.replace(path + ".new", path)
        return files

    def place(self, exporters):
        """Labels Exporters that have no host yet with one; returns ({name: host}, why not all)."""
        unplaced = sorted(e["metadata"]["name"] for e in exporters
                          if baremetal.host_of(e) is None and not e["metadata"].get("deletionTimestamp")
                          and constants.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {}))
        if not unplaced:
            return {}, ""
        lab = baremetal_pool.LabView(
            self.p["exporterset"], self.p["virtual_target_class"], exporters,
            [e for e in exporters if baremetal.host_of(e) is not None], datetime.now(UTC))
        placed = lab.place(unplaced)
        limited = sorted(set(unplaced) - set(placed))
        for exporter in exporters:
            host = placed.get(exporter["metadata"]["name"])
            if host is None:
                continue
            body = {"metadata": {"labels": {constants.LABEL_HOST: host}}}
            outcome = self.writer.patch(constants.EXPORTER, self.namespace, exporter["metadata"]["name"], body,
                                        current=exporter)
            if not outcome.written:
                raise outcome.error
            exporter["metadata"].setdefault("labels", {})[constants.LABEL_HOST] = host
            self.changed = True
        return placed, (f"no free slot for {', '.join(limited)}: {lab.capacity()['message']}"
                        if limited else "")

    def token(self, exporter):
        from kubernetes.client.rest import ApiException

        try:
            return credentials.read_token(self.api, exporter)
        except ApiException as exc:
            raise api_errors.ApiError(
                f"reading the credential of {self.namespace}/{exporter['metadata']['name']}", exc) from exc

    def configs(self, host_entry, by_name, waiting):
        parameters = self.p["parameters"]
        work_dir = parameters.get("workDir") or baremetal.DEFAULT_WORK_DIR
        drivers = ((self.p["exporterset"]["spec"].get("template") or {}).get("spec") or {}).get("drivers") or []
        configs, tokens, uids, ready = {}, {}, {}, []
        for name in host_entry["provision"]:
            exporter = by_name[name]
            token = self.token(exporter)
            if token is None:
                waiting.append(name)
                continue
            # The exporter reaches the instance's sockets through its short link.
            run_dir = baremetal.instance_link(work_dir, self.namespace, name)
            config = exporter_config.render_exporter_config(
                name, self.namespace, drivers,
                endpoint=(exporter.get("status") or {}).get("endpoint", ""), token=None,
                driver_overrides=baremetal.driver_overrides(drivers, parameters, run_dir),
                tls_ca=self.p["controller_tls_ca"],
                exit_on_lease_end=exporter_config.exits_on_lease_end(self.p["exporterset"]))
            del config["token"]
            configs[name] = config
            tokens[name] = token
            uids[name] = exporter["metadata"].get("uid", "")
            ready.append(name)
        host_entry.update(provision=ready, configs=configs, tokens=tokens, uids=uids)


ARGUMENT_SPEC = dict(
    **exporterset_options.PROVISIONER,
    action=dict(type="str", required=True, choices=["provision", "remove", "reset", "retain", "probe"]),
    ssh_dir=dict(type="path", default="~/.ansible/jumpstarter-baremetal"),
    controller_tls_ca=dict(type="str", default=""),
)

# The class's image options that do not parse are a ValueError.
ERRORS = (*api_errors.module_errors(), ((k8s_apply.ApplyError, ValueError), None))


def run(module):
    targets = Targets(module)
    p = module.params
    cache_quota = image_fetch.class_cache_quota(p["virtual_target_class"])
    max_size = image_fetch.class_max_bytes(p["virtual_target_class"])
    image_hosts = sorted(set_overrides.image_hosts(p["virtual_target_class"]))
    if p["action"] in ("remove", "reset"):
        # Lease safety, on a fresh read just before the hosts act (k8s/apply.py):
        # an Exporter leased since the plan keeps its instance (and is kept).
        p["exporters"] = [name for name in p["exporters"]
                          if k8s_apply.backend_held(targets.api_client, p["exporterset"], name) is None]
    hosts = p["parameters"].get("hosts") or []
    exporters = copy.deepcopy(p["owned_exporters"])
    by_name = {e["metadata"]["name"]: e for e in exporters}
    ssh = targets.ssh_files()
    placed, limited = ({}, "")
    if p["action"] == "provision":
        placed, limited = targets.place(exporters)
    entries = baremetal.host_actions(hosts, exporters, p["action"], p["exporters"], credential=ssh["credential"])
    waiting = []
    tokens = {}
    if p["action"] == "provision":
        for entry in entries:
            targets.configs(entry, by_name, waiting)
            tokens[entry["name"]] = entry.pop("tokens")
    module.exit_json(**with_diff(module, dict(
        changed=targets.changed, hosts=entries, tokens=tokens, ssh=ssh, placed=placed, waiting=sorted(waiting),
        limited=limited, image_cache_quota=cache_quota, image_max_size=max_size,
        image_hosts=image_hosts), targets.changes.before,
        targets.changes.after))


def main():
    module_base.main(run, ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
