"""Names and rules shared by both sides of qemu-baremetal: the operator's side
(which instance goes where, what to tell the plan) and the lab host's side
(the ``baremetal_instances`` module).

Pure: no I/O.
"""

import hashlib

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import qemu

DEFAULT_WORK_DIR = "/var/lib/jumpstarter-virtual"
DEFAULT_PREFIX = "/opt/jumpstarter-exporter"
DEFAULT_SSH_USER = "jumpstarter"
DEFAULT_SSH_PORT = 22
INSTANCES_DIR = "instances"
# Short names of the instance directories (``instance_link``).
LINKS_DIR = "links"
# Keys of the class's credentialsSecretRef Secret.
SECRET_PRIVATE_KEY = "ssh-privatekey"
SECRET_KNOWN_HOSTS = "known_hosts"
EXPORTER_CONFIG_FILE = "exporter.yaml"
# Services of one instance, and how long their supervisor waits before
# restarting them ("no": never; a VM that exits has lost its state).
SERVICE_RESTART_DELAY = {"vm": "no", "exporter": "2"}


def instance_id(namespace, exporter):
    """Directory and unit instance name of one Exporter's instance on a host.

    Namespaces and Exporter names are DNS labels, so the dot is unambiguous.
    """
    return f"{namespace}.{exporter}"


def instance_dir(work_dir, namespace, exporter):
    return f"{work_dir.rstrip('/')}/{INSTANCES_DIR}/{instance_id(namespace, exporter)}"


def instance_link(work_dir, namespace, exporter):
    """A short path to the instance directory, a link the service user makes:
    QEMU's and the exporter's UNIX sockets are reached through it, since a
    socket's path holds at most 107 bytes and ``<namespace>.<exporter>``
    alone may take 317."""
    digest = hashlib.sha256(instance_id(namespace, exporter).encode()).hexdigest()[:LINK_DIGITS]
    return f"{work_dir.rstrip('/')}/{LINKS_DIR}/{digest}"


# Hex digits of a link's name: 64 bits, no two instances of a host share one.
LINK_DIGITS = 16


def host_of(exporter):
    return (exporter["metadata"].get("labels") or {}).get(constants.LABEL_HOST)


def driver_overrides(drivers, parameters, run_dir):
    """The QEMU drivers of the template drive the VM the host runs in
    ``run_dir``; a TcpNetwork without a host is left out (the guest has no
    NIC to forward to; the set names it under FieldsIgnored)."""
    overrides = qemu.qemu_driver_overrides(drivers, run_dir)
    overrides.update({name: None for _, name in qemu.hostless_tcp_networks(drivers)})
    return overrides


def credential_digest(private_key, known_hosts):
    """A digest of one class's SSH credential: its key and the host keys it trusts (bytes)."""
    digest = hashlib.sha256(b"jumpstarter-baremetal-credential\0")
    for part in (private_key, known_hosts):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


# Hex digits of a multiplexing socket's name (as long as ssh's own %C).
CONTROL_PATH_DIGITS = 40


def control_path(credential, connection):
    """The SSH ControlPath of one connection made with one credential.

    ssh reuses a master for every connection with the same ControlPath,
    without checking its key or known_hosts again: the path is keyed by the
    credential (``credential_digest``) as well as by address, port and user,
    so a run never rides a master another class's credential opened.
    ``%(directory)s`` is Ansible's control_path_dir.
    """
    if not credential:
        raise ValueError("a ControlPath needs the credential's digest")
    text = "\0".join(str(part) for part in (
        credential, connection["address"], connection["port"], connection["user"]))
    return "%(directory)s/" + hashlib.sha256(text.encode()).hexdigest()[:CONTROL_PATH_DIGITS]


def host_connection(host, credential=None):
    """Address, port and user of one ``parameters.hosts[]`` entry, defaults applied;
    with ``credential`` (``credential_digest``), the ControlPath of connections made with it."""
    connection = {
        "name": host["name"],
        "address": host.get("address") or host["name"],
        "port": int(host.get("port") or DEFAULT_SSH_PORT),
        "user": host.get("user") or DEFAULT_SSH_USER,
    }
    if credential:
        connection["control_path"] = control_path(credential, connection)
    return connection


def host_actions(hosts, exporters, action, names, credential=None):
    """What each host must do for one entry point.

    ``exporters`` are the set's Exporters (placed ones carry the host label);
    ``names`` are the Exporters the entry point acts on. Every host gets
    ``keep``: the set's Exporters placed on it, so that instances of this set
    left on a host that was unreachable while their Exporter went away are
    removed once it answers again. ``retain`` prunes nothing (``keep`` None):
    it keeps what it stops. ``uids`` names the UID of each Exporter acted
    on: the host acts only on an instance made for that very Exporter.
    ``credential``: see ``host_connection``.
    """
    plan = {h["name"]: {**host_connection(h, credential), "keep": [], action: [], "uids": {}}
            for h in hosts or ()}
    wanted = set(names or ())
    for exporter in exporters or ():
        name = exporter["metadata"]["name"]
        host = host_of(exporter)
        if host not in plan:
            continue
        leaving = exporter["metadata"].get("deletionTimestamp") or (
            action == "remove" and name in wanted)
        if not leaving:
            plan[host]["keep"].append(name)
        if name in wanted:
            plan[host][action].append(name)
            plan[host]["uids"][name] = exporter["metadata"].get("uid") or ""
    if action == "retain":
        for entry in plan.values():
            entry["keep"] = None
    return [plan[h["name"]] for h in hosts or ()]
