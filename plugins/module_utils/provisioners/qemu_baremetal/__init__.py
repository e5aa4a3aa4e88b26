"""``qemu-baremetal.jumpstarter.dev``: QEMU and ``jmp run`` as services on
the class's lab hosts, reached over SSH (hosts.py, placement.py, pool.py
here; roles/qemu_baremetal).

The class's hosts are the allowlist of where its SSH key goes; a set may pick
among them and ask for no more resources or slots than the class gives.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import (
    qemu,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Field,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv

RECONNECT_TIMEOUT_BOUNDS = (1.0, 3600.0)

_HOST = Field(
    "object",
    "A lab server that runs instances.",
    properties={
        "name": Field("string", "DNS name or IP of the host; unique.", required=True,
                      format="hostname"),
        "address": Field("string", "What SSH connects to.", default="the host name",
                         format="hostname"),
        "port": Field("integer", "SSH port.", default=22, minimum=1, maximum=65535),
        "user": Field("string", "SSH user.", default="jumpstarter"),
        "arch": Field("string", "Host architecture.", enum=tuple(qemu_argv.MACHINE_TYPES_BY_ARCH)),
        "slots": Field("integer", "Concurrent instances on this host. An ExporterSet may not "
                       "give more than the class (or the class's max.slots ceiling).",
                       required=True, minimum=1),
    },
)

PROPERTIES = dict(
    qemu.QEMU_PROPERTIES,
    hosts=Field("list", "Lab servers; at least one.", required=True, items=_HOST),
    runtime=Field(
        "object",
        "QEMU on the hosts.",
        properties={
            "binary": Field("string", "Absolute path of qemu-system-*." + qemu.CLASS_ONLY,
                            format="absolute-path"),
            "kvm": Field("boolean", "Use KVM on the hosts."),
        },
    ),
    board=Field("map", "Free-form board profile passed to the runtime."),
    reconnectTimeout=Field(
        "duration",
        "How long an instance may stay offline before it is replaced (1s..1h).",
        default="5m",
        minimum=RECONNECT_TIMEOUT_BOUNDS[0],
        maximum=RECONNECT_TIMEOUT_BOUNDS[1],
    ),
    workDir=Field(
        "string",
        "Directory on the hosts for instance state." + qemu.CLASS_ONLY,
        default="/var/lib/jumpstarter-virtual",
        format="absolute-path",
    ),
)


def _host_names_unique(parameters, errors):
    hosts = parameters.get("hosts")
    seen = set()
    for index, host in enumerate(hosts if isinstance(hosts, list) else ()):
        name = host.get("name") if isinstance(host, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            errors.append(f"{qemu.ROOT}.hosts[{index}].name: duplicate host {name!r}")
        seen.add(name)


class QemuBaremetal(qemu.QemuProvisioner):
    name = constants.PROVISIONER_QEMU_BAREMETAL
    role = "jumpstarter.virtual_exporters.qemu_baremetal"
    schema = Field("object", "qemu-baremetal.jumpstarter.dev parameters.", properties=PROPERTIES)
    cross_field_rules = qemu.QEMU_RULES + (_host_names_unique,)

    def template_parameters(self, drivers):
        parameters, warnings, errors = super().template_parameters(drivers)
        # baremetal.driver_overrides leaves these out of the exporter's config.
        warnings += [f"spec.template.spec.drivers[{index}]: a TcpNetwork without config.host is left out of "
                     "the exporter: it reaches the guest through QEMU's forward, and a lab-host guest has no "
                     "NIC (give config.host to reach another machine)"
                     for index, _ in qemu.hostless_tcp_networks(drivers)]
        return parameters, warnings, errors

    runs_on_lab_hosts = True
    probe_playbook = "playbooks/baremetal_probe.yml"

    def lab_view(self, exporter_set, virtual_target_class, owned, exporters, now, parameters=None):
        # Its hosts' code reads the pool's Exporter state: it stands above
        # the pool, which imports this module, so it is imported when asked.
        from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
            pool as lab_pool,
        )

        placed = [e for e in exporters if (e["metadata"].get("labels") or {}).get(constants.LABEL_HOST)]
        return lab_pool.LabView(exporter_set, virtual_target_class, owned, placed, now, parameters=parameters)

    credential_hosts = "it is reached with the class's SSH key and receives the exporters' tokens"
    ceiling_by_default = True
