"""The default UEFI of an aarch64 virt guest: two flash devices, the code
read-only and the variables the instance's own copy."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    UEFI_FIRMWARE,
    UEFI_VARS,
    guest_arch,
    qemu_argv,
    uefi_firmware,
    uefi_vars_argv,
)
from hypothesis import given
from hypothesis import strategies as st

RUN_DIR = "/run/jumpstarter"
AAVMF_CODE = "/usr/share/AAVMF/AAVMF_CODE.fd"
AAVMF_VARS = "/usr/share/AAVMF/AAVMF_VARS.fd"


def pflash(argv):
    return [argv[i + 1] for i, item in enumerate(argv) if item == "-drive" and "if=pflash" in argv[i + 1]]


def test_an_aarch64_virt_guest_without_firmware_or_kernel_boots_aavmf():
    argv = qemu_argv({"arch": "aarch64"}, run_dir=RUN_DIR, name="rpi4-0")
    assert argv[0] == "qemu-system-aarch64"
    assert pflash(argv) == [
        f"if=pflash,format=raw,unit=0,readonly=on,file={AAVMF_CODE}",
        f"if=pflash,format=raw,unit=1,file={RUN_DIR}/{UEFI_VARS}",
    ]
    assert "-bios" not in argv and "-kernel" not in argv
    assert uefi_vars_argv({"arch": "aarch64"}, RUN_DIR) == [
        "qemu-img", "convert", "-q", "-f", "raw", "-O", "raw", AAVMF_VARS, f"{RUN_DIR}/{UEFI_VARS}"]


@pytest.mark.parametrize("parameters", [
    {"machineType": "virt"},
    {"hosts": [{"name": "bench-01", "arch": "aarch64", "slots": 2}, {"name": "bench-02", "arch": "aarch64"}]},
    {"arch": "aarch64", "machineType": "virt", "runtime": {"binary": "/usr/bin/qemu-system-aarch64", "kvm": True}},
])
def test_the_arch_inferred_from_the_machine_or_the_hosts_gets_uefi_too(parameters):
    """JEP-0014's rpi4 (machineType: virt) and sa8295 (aarch64 hosts and a
    runtime binary) examples name no arch and no firmware."""
    assert uefi_firmware(parameters) == {"code": AAVMF_CODE, "vars": AAVMF_VARS}
    assert len(pflash(qemu_argv(parameters, run_dir=RUN_DIR, name="x"))) == 2


def test_a_kernel_is_booted_directly_without_firmware():
    parameters = {"arch": "aarch64", "kernel": {"path": "/images/Image"}, "initrd": {"path": "/images/initrd"}}
    argv = qemu_argv(parameters, run_dir=RUN_DIR, name="x")
    assert pflash(argv) == [] and "-bios" not in argv
    assert argv[argv.index("-kernel") + 1] == "/images/Image"
    assert argv[argv.index("-append") + 1] == "console=ttyAMA0"
    assert uefi_vars_argv(parameters, RUN_DIR) is None


@pytest.mark.parametrize("firmware, path", [({"path": "/images/QEMU_EFI.fd"}, "/images/QEMU_EFI.fd"),
                                            ({"url": "https://images.test/efi.fd", "digest": "sha256:" + "a" * 64},
                                             f"{RUN_DIR}/firmware")])
def test_firmware_of_the_class_replaces_the_default(firmware, path):
    argv = qemu_argv({"arch": "aarch64", "firmware": firmware}, run_dir=RUN_DIR, name="x")
    assert pflash(argv) == [] and argv[argv.index("-bios") + 1] == path
    assert uefi_vars_argv({"arch": "aarch64", "firmware": firmware}, RUN_DIR) is None


def test_commas_in_the_run_dir_are_escaped_in_the_vars_drive():
    argv = qemu_argv({"arch": "aarch64"}, run_dir="/run/a,b", name="x")
    assert pflash(argv)[1] == f"if=pflash,format=raw,unit=1,file=/run/a,,b/{UEFI_VARS}"
    # qemu-img takes the path as a whole argument.
    assert uefi_vars_argv({"arch": "aarch64"}, "/run/a,b")[-1] == f"/run/a,b/{UEFI_VARS}"


IMAGE = st.one_of(st.none(), st.just({"path": "/images/file"}),
                  st.just({"url": "https://images.test/file", "digest": "sha256:" + "b" * 64}))


@st.composite
def qemu_parameters(draw):
    parameters = {}
    for key, values in (("arch", ("x86_64", "aarch64", "arm")), ("machineType", ("virt", "q35", "pc"))):
        value = draw(st.one_of(st.none(), st.sampled_from(values)))
        if value is not None:
            parameters[key] = value
    if draw(st.booleans()):
        parameters["hosts"] = [{"name": f"h{i}", "arch": arch}
                               for i, arch in enumerate(draw(st.lists(st.sampled_from(("x86_64", "aarch64", "arm")),
                                                                      min_size=1, max_size=3)))]
    for key in ("firmware", "kernel", "initrd"):
        image = draw(IMAGE)
        if image is not None:
            parameters[key] = image
    return parameters


@given(qemu_parameters(), st.sampled_from(["/run/jumpstarter", "/var/lib/jumpstarter-virtual/instances/ns.x-0"]))
def test_uefi_exactly_for_an_aarch64_virt_guest_given_no_firmware_and_no_kernel(parameters, run_dir):
    """Whatever the parameters combine: the flash devices, the vars copy and
    -bios/-kernel never meet, and the copy QEMU boots is the one made."""
    arch = guest_arch(parameters)
    machine = parameters.get("machineType") or {"x86_64": "q35", "aarch64": "virt", "arm": "virt"}[arch]
    wanted = (arch == "aarch64" and machine == "virt"
              and "firmware" not in parameters and "kernel" not in parameters)
    argv = qemu_argv(parameters, run_dir=run_dir, name="x")
    drives = pflash(argv)
    copy = uefi_vars_argv(parameters, run_dir)
    assert bool(drives) == wanted == (copy is not None)
    if wanted:
        code, variables = drives
        assert code.endswith(f"readonly=on,file={UEFI_FIRMWARE['aarch64']['code']}")
        assert variables == f"if=pflash,format=raw,unit=1,file={copy[-1]}"
        assert copy[-2] == UEFI_FIRMWARE["aarch64"]["vars"] and "readonly" not in variables
        assert "-bios" not in argv and "-kernel" not in argv


@pytest.mark.parametrize("accel, cpu", [("tcg", "cortex-a57"), (None, "cortex-a57"), ("kvm", "host")])
def test_aarch64_under_tcg_emulates_a_cortex_a57(accel, cpu):
    """TCG's aarch64 "max" emulates pointer authentication, which slows a
    boot several times over; KVM passes the host CPU through."""
    parameters = {"arch": "aarch64", "kvm": True}
    argv = qemu_argv(parameters, run_dir=RUN_DIR, name="x", accel=accel)
    assert argv[argv.index("-cpu") + 1] == cpu
    parameters["cpuModel"] = "cortex-a72"
    assert "cortex-a72" in qemu_argv(parameters, run_dir=RUN_DIR, name="x", accel=accel)
