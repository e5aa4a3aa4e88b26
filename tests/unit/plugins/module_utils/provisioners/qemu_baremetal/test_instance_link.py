"""The short path of a lab-host instance: whatever its namespace and Exporter
name, QEMU's and the exporter's sockets reached through it fit a UNIX
socket's 107 bytes, and no two instances share one; QEMU makes its sockets
there and keeps every file in the instance directory."""

import re

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    QMP_SOCKET,
    SERIAL_LOG,
    SERIAL_SOCKET,
    qemu_argv,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal.hosts import (
    DEFAULT_WORK_DIR,
    instance_dir,
    instance_link,
)
from hypothesis import given
from hypothesis import strategies as st

# What the kernel takes as a UNIX socket's path (sun_path, 108 with its NUL).
SOCKET_PATH_MAX = 107
LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
SUBDOMAIN = st.lists(LABEL, min_size=1, max_size=4).map(".".join).filter(lambda name: len(name) <= 253)
JEP_PARAMETERS = {"hosts": [{"name": "bench-01", "arch": "aarch64", "slots": 2}],
                  "runtime": {"binary": "/usr/bin/qemu-system-aarch64", "kvm": True}}


@given(LABEL, SUBDOMAIN)
def test_the_sockets_fit_whatever_the_names(namespace, exporter):
    link = instance_link(DEFAULT_WORK_DIR, namespace, exporter)
    for socket in (QMP_SOCKET, SERIAL_SOCKET):
        assert len(f"{link}/{socket}".encode()) <= SOCKET_PATH_MAX
    assert link.startswith(f"{DEFAULT_WORK_DIR}/links/") and "/instances/" not in link


@given(st.tuples(LABEL, SUBDOMAIN), st.tuples(LABEL, SUBDOMAIN))
def test_two_instances_never_share_a_link(one, other):
    if one != other:
        assert instance_link(DEFAULT_WORK_DIR, *one) != instance_link(DEFAULT_WORK_DIR, *other)


def test_a_link_is_the_same_for_the_same_instance_and_follows_the_work_dir():
    assert instance_link("/srv/jv/", "lab", "pool-0") == instance_link("/srv/jv", "lab", "pool-0")
    assert re.fullmatch(r"/srv/jv/links/[0-9a-f]{16}", instance_link("/srv/jv", "lab", "pool-0"))


def test_qemu_makes_its_sockets_through_the_link_and_its_files_in_the_instance_directory():
    """JEP-0014's sa8295 set in a namespace of 63 characters: the instance
    directory alone is longer than a socket's path may be."""
    namespace = "n" * 63
    directory = instance_dir(DEFAULT_WORK_DIR, namespace, "qcom-sa8295-hifi-0")
    link = instance_link(DEFAULT_WORK_DIR, namespace, "qcom-sa8295-hifi-0")
    assert len(f"{directory}/{SERIAL_SOCKET}".encode()) > SOCKET_PATH_MAX
    argv = qemu_argv(JEP_PARAMETERS, run_dir=directory, name="qcom-sa8295-hifi-0", socket_dir=link)
    assert argv[argv.index("-qmp") + 1] == f"unix:{link}/{QMP_SOCKET},server=on,wait=off"
    chardev = argv[argv.index("-chardev") + 1]
    assert f"path={link}/{SERIAL_SOCKET}," in chardev and chardev.endswith(f"logfile={directory}/{SERIAL_LOG}")
    assert f"file={directory}/efivars.fd" in " ".join(argv)
    # Without a socket_dir, the sockets are in the run directory (the Pod's).
    plain = qemu_argv(JEP_PARAMETERS, run_dir="/run/jumpstarter", name="x")
    assert plain[plain.index("-qmp") + 1] == f"unix:/run/jumpstarter/{QMP_SOCKET},server=on,wait=off"
