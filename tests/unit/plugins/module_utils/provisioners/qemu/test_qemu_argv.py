"""The QEMU command line, option by option, and the disk creation command."""

import json

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    disk_create_argv,
    qemu_argv,
    runtime_files,
)

RUN_DIR = "/run/vt/pool-a-0"
MINIMAL = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "1Gi"}}


def with_(**changes):
    parameters = {**MINIMAL, "resources": dict(MINIMAL["resources"])}
    for key, value in changes.items():
        if key == "resources":
            parameters["resources"].update(value)
        else:
            parameters[key] = value
    return parameters


def option(argv, flag):
    """Values given to ``flag``; every flag in these command lines takes one value."""
    return [argv[i + 1] for i, item in enumerate(argv) if item == flag]


def blockdevs(argv):
    return [argv[index + 1] for index, flag in enumerate(argv) if flag == "-blockdev"]


def only(argv, flag):
    values = option(argv, flag)
    assert len(values) == 1, f"{flag} given {len(values)} times in {argv}"
    return values[0]


def test_minimal_x86_64_command_line_is_complete():
    argv = qemu_argv(MINIMAL, run_dir=RUN_DIR, name="pool-a-0")
    assert argv[0] == "qemu-system-x86_64"
    assert only(argv, "-name") == "pool-a-0"
    assert only(argv, "-machine") == "q35,accel=tcg"
    assert only(argv, "-cpu") == "max"
    assert only(argv, "-smp") == "1"
    assert only(argv, "-m") == "1024"
    assert "-nodefaults" in argv
    assert only(argv, "-display") == "none"
    assert only(argv, "-qmp") == "unix:/run/vt/pool-a-0/qmp.sock,server=on,wait=off"
    assert only(argv, "-chardev") == (
        "socket,id=serial0,path=/run/vt/pool-a-0/serial.sock,server=on,wait=off,"
        "logfile=/run/vt/pool-a-0/serial.log"
    )
    assert only(argv, "-serial") == "chardev:serial0"
    for absent in ("-drive", "-blockdev", "-device", "-kernel", "-initrd", "-append", "-bios"):
        assert absent not in argv


def test_never_asks_qemu_to_exit_on_reboot():
    everything = with_(
        resources={"storage": "1Gi"},
        kernel={"path": "/k"},
        initrd={"path": "/i"},
        firmware={"path": "/f"},
        kvm=True,
    )
    assert "-no-reboot" not in qemu_argv(everything, run_dir=RUN_DIR, name="x", accel="kvm")


def test_trailing_slash_of_run_dir_does_not_double():
    argv = qemu_argv(MINIMAL, run_dir=RUN_DIR + "/", name="x")
    assert only(argv, "-qmp").startswith("unix:/run/vt/pool-a-0/qmp.sock,")


def test_commas_in_the_run_dir_are_escaped_for_qemu_options():
    argv = qemu_argv(with_(resources={"storage": "1Gi"}), run_dir="/run/a,b", name="x")
    assert only(argv, "-qmp") == "unix:/run/a,,b/qmp.sock,server=on,wait=off"
    assert only(argv, "-chardev").startswith("socket,id=serial0,path=/run/a,,b/serial.sock,")
    assert only(argv, "-chardev").endswith(",logfile=/run/a,,b/serial.log")
    assert only(argv, "-blockdev") == "driver=qcow2,node-name=disk0,file.driver=file,file.filename=/run/a,,b/disk.qcow2"


@pytest.mark.parametrize(
    ("parameters", "binary", "machine"),
    [
        ({"arch": "x86_64"}, "qemu-system-x86_64", "q35"),
        ({"arch": "x86_64", "machineType": "pc"}, "qemu-system-x86_64", "pc"),
        ({"arch": "aarch64"}, "qemu-system-aarch64", "virt"),
        ({}, "qemu-system-x86_64", "q35"),
        (
            {"arch": "aarch64", "runtime": {"binary": "/opt/qemu/bin/qemu-system-aarch64"}},
            "/opt/qemu/bin/qemu-system-aarch64",
            "virt",
        ),
    ],
)
def test_binary_and_machine_follow_arch(parameters, binary, machine):
    argv = qemu_argv({**parameters, "resources": {"memory": "1Gi"}}, run_dir=RUN_DIR, name="x")
    assert argv[0] == binary
    assert only(argv, "-machine") == f"{machine},accel=tcg"


def test_unknown_arch_is_rejected_by_name():
    with pytest.raises(ValueError, match="parameters.arch"):
        qemu_argv(with_(arch="riscv64"), run_dir=RUN_DIR, name="x")


@pytest.mark.parametrize(
    ("asks", "host", "accel", "cpu"),
    [
        ({"kvm": True}, "kvm", "kvm", "host"),
        ({"kvm": True}, "tcg", "tcg", "max"),
        ({"kvm": True}, None, "tcg", "max"),
        ({"kvm": False}, "kvm", "tcg", "max"),
        ({}, "kvm", "tcg", "max"),
        ({"kvm": False, "runtime": {"kvm": True}}, "kvm", "kvm", "host"),
        ({"kvm": True, "runtime": {"kvm": False}}, "kvm", "tcg", "max"),
    ],
)
def test_kvm_needs_both_the_parameters_and_the_host(asks, host, accel, cpu):
    argv = qemu_argv(with_(**asks), run_dir=RUN_DIR, name="x", accel=host)
    assert only(argv, "-machine") == f"q35,accel={accel}"
    assert only(argv, "-cpu") == cpu


def test_cpu_model_from_parameters_wins():
    argv = qemu_argv(with_(cpuModel="Skylake-Client", kvm=True), run_dir=RUN_DIR, name="x",
                     accel="kvm")
    assert only(argv, "-cpu") == "Skylake-Client"


@pytest.mark.parametrize(
    ("cpu", "smp"), [(1, "1"), (4, "4"), ("2", "2"), ("1500m", "2"), ("100m", "1")]
)
def test_smp_is_whole_vcpus_rounded_up(cpu, smp):
    argv = qemu_argv(with_(resources={"cpu": cpu}), run_dir=RUN_DIR, name="x")
    assert only(argv, "-smp") == smp


def test_smp_defaults_to_one():
    argv = qemu_argv({"resources": {"memory": "1Gi"}}, run_dir=RUN_DIR, name="x")
    assert only(argv, "-smp") == "1"


@pytest.mark.parametrize(
    ("memory", "mib"),
    [
        ("1Gi", "1024"),
        ("512Mi", "512"),
        ("8Gi", "8192"),
        # Decimal units: 1e9 bytes is 953.67 MiB, 1e8 is 95.37 MiB; never less
        # than asked for.
        ("1G", "954"),
        ("100M", "96"),
        (268435456, "256"),
    ],
)
def test_memory_is_mib_rounded_up(memory, mib):
    argv = qemu_argv(with_(resources={"memory": memory}), run_dir=RUN_DIR, name="x")
    assert only(argv, "-m") == mib


def test_memory_defaults_to_1gi():
    assert only(qemu_argv({"resources": {"cpu": 1}}, run_dir=RUN_DIR, name="x"), "-m") == "1024"


@pytest.mark.parametrize(
    "changes",
    [
        {"resources": {"storage": "10Gi"}},
        {"disk": {"path": "/images/base.qcow2"}},
        {"disk": {"url": "https://images.example.com/base.qcow2"}},
    ],
)
def test_disk_is_the_instance_overlay_whenever_there_is_one(changes):
    argv = qemu_argv(with_(**changes), run_dir=RUN_DIR, name="x")
    disk = blockdevs(argv)[-1]
    assert disk.startswith(
        "driver=qcow2,node-name=disk0,file.driver=file,file.filename=/run/vt/pool-a-0/disk.qcow2")
    # The flasher writes into the node while the device is attached.
    assert only(argv, "-device") == "virtio-blk-pci,drive=disk0,share-rw=on"


def test_a_blank_disk_has_no_base_node():
    argv = qemu_argv(with_(resources={"storage": "10Gi"}), run_dir=RUN_DIR, name="x")
    assert only(argv, "-blockdev") == (
        "driver=qcow2,node-name=disk0,file.driver=file,file.filename=/run/vt/pool-a-0/disk.qcow2")


@pytest.mark.parametrize(
    ("disk", "base"),
    [
        ({"path": "/images/a,b.qcow2"}, {"driver": "qcow2", "backing": None,
                                         "file": {"driver": "file", "filename": "/images/a,b.qcow2"}}),
        ({"url": "https://example.com/b", "format": "raw"},
         {"driver": "raw", "file": {"driver": "file", "filename": "/run/vt/pool-a-0/disk.base"}}),
    ],
)
def test_the_base_is_a_node_of_its_own_opened_without_a_backing_file(disk, base):
    argv = qemu_argv(with_(disk=disk), run_dir=RUN_DIR, name="x")
    nodes = blockdevs(argv)
    assert len(nodes) == 2
    assert json.loads(nodes[0]) == {"node-name": "disk0-base", "read-only": True, **base}
    assert nodes[1] == ("driver=qcow2,node-name=disk0,file.driver=file,"
                            "file.filename=/run/vt/pool-a-0/disk.qcow2,backing=disk0-base")


def test_direct_kernel_boot_with_initrd_and_arguments():
    parameters = with_(
        kernel={"path": "/boot/vmlinuz"},
        initrd={"path": "/boot/initrd.img"},
        kernelArgs="console=ttyS0 root=/dev/vda rw",
    )
    argv = qemu_argv(parameters, run_dir=RUN_DIR, name="x")
    assert only(argv, "-kernel") == "/boot/vmlinuz"
    assert only(argv, "-initrd") == "/boot/initrd.img"
    assert only(argv, "-append") == "console=ttyS0 root=/dev/vda rw"


@pytest.mark.parametrize(("arch", "console"), [("x86_64", "ttyS0"), ("aarch64", "ttyAMA0")])
def test_kernel_without_arguments_gets_the_serial_console(arch, console):
    argv = qemu_argv(with_(arch=arch, kernel={"path": "/k"}), run_dir=RUN_DIR, name="x")
    assert only(argv, "-append") == f"console={console}"
    assert "-initrd" not in argv


def test_initrd_and_arguments_without_kernel_are_not_passed():
    argv = qemu_argv(with_(initrd={"path": "/i"}, kernelArgs="quiet"), run_dir=RUN_DIR, name="x")
    assert "-initrd" not in argv and "-append" not in argv


def test_images_given_by_url_are_read_from_the_run_dir():
    parameters = with_(
        firmware={"url": "oci://registry.example.com/fw:1", "digest": "sha256:ab", "plainHTTP": True},
        kernel={"url": "https://example.com/vmlinuz"},
        initrd={"path": "/local/initrd"},
    )
    argv = qemu_argv(parameters, run_dir=RUN_DIR, name="x")
    assert only(argv, "-bios") == "/run/vt/pool-a-0/firmware"
    assert only(argv, "-kernel") == "/run/vt/pool-a-0/kernel"
    assert only(argv, "-initrd") == "/local/initrd"
    assert runtime_files(parameters, RUN_DIR) == [
        {"name": "firmware", "url": "oci://registry.example.com/fw:1", "digest": "sha256:ab",
         "dest": "/run/vt/pool-a-0/firmware", "plain_http": True, "format": None},
        {"name": "kernel", "url": "https://example.com/vmlinuz", "digest": None,
         "dest": "/run/vt/pool-a-0/kernel", "plain_http": False, "format": None},
    ]


@pytest.mark.parametrize(("disk", "image_format"), [({}, "qcow2"), ({"format": "raw"}, "raw")])
def test_a_disk_fetched_by_url_is_checked_as_the_format_qemu_opens_it_as(disk, image_format):
    parameters = with_(disk={"url": "https://example.com/base", "digest": "sha256:ab", **disk})
    assert runtime_files(parameters, RUN_DIR) == [
        {"name": "disk", "url": "https://example.com/base", "digest": "sha256:ab",
         "dest": "/run/vt/pool-a-0/disk.base", "plain_http": False, "format": image_format},
    ]


def test_firmware_by_path_is_used_in_place():
    argv = qemu_argv(with_(firmware={"path": "/usr/share/AAVMF/AAVMF_CODE.fd"}, arch="aarch64"),
                     run_dir=RUN_DIR, name="x")
    assert only(argv, "-bios") == "/usr/share/AAVMF/AAVMF_CODE.fd"
    assert runtime_files(with_(firmware={"path": "/f"}), RUN_DIR) == []


def test_no_disk_creation_without_storage_or_disk():
    assert disk_create_argv(MINIMAL, RUN_DIR) is None


def test_blank_disk_of_the_storage_size():
    assert disk_create_argv(with_(resources={"storage": "10Gi"}), RUN_DIR) == [
        "qemu-img", "create", "-q", "-f", "qcow2", "/run/vt/pool-a-0/disk.qcow2", "10737418240",
    ]


def test_overlay_on_base_image_with_storage_size():
    parameters = with_(resources={"storage": "20G"}, disk={"path": "/images/base.raw",
                                                          "format": "raw"})
    assert disk_create_argv(parameters, RUN_DIR) == [
        "qemu-img", "create", "-q", "-f", "qcow2", "-b", "/images/base.raw", "-F", "raw",
        "/run/vt/pool-a-0/disk.qcow2", "20000000000",
    ]


def test_overlay_on_fetched_base_image_keeps_its_size():
    parameters = with_(disk={"url": "https://images.example.com/base.qcow2"})
    assert disk_create_argv(parameters, RUN_DIR) == [
        "qemu-img", "create", "-q", "-f", "qcow2", "-b", "/run/vt/pool-a-0/disk.base",
        "-F", "qcow2", "/run/vt/pool-a-0/disk.qcow2",
    ]


def test_no_forwards_no_nic():
    """Without forwards the guest has no NIC (``-nodefaults`` adds none): the bare-metal command line."""
    argv = qemu_argv(MINIMAL, run_dir=RUN_DIR, name="pool-a-0")
    assert "-netdev" not in argv and not any("virtio-net" in item for item in argv)
    assert qemu_argv(MINIMAL, run_dir=RUN_DIR, name="pool-a-0", port_forwards={}) == argv


def test_forwards_give_an_isolated_user_mode_nic_listening_on_loopback():
    argv = qemu_argv(MINIMAL, run_dir=RUN_DIR, name="pool-a-0", port_forwards={22001: 8080, 22000: 22})
    assert only(argv, "-netdev") == ("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:22000-:22,"
                                     "hostfwd=tcp:127.0.0.1:22001-:8080")
    assert "virtio-net-pci,netdev=net0,romfile=" in option(argv, "-device")


@pytest.mark.parametrize("forwards", [{22000: 0}, {22000: 70000}, {"22000": 22}, {22000: True}, {0: 22}])
def test_bad_forward_ports_are_refused(forwards):
    with pytest.raises(ValueError, match=r"port_forwards\[.*a TCP port is an integer from 1 to 65535"):
        qemu_argv(MINIMAL, run_dir=RUN_DIR, name="pool-a-0", port_forwards=forwards)
