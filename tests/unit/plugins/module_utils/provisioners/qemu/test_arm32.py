"""32-bit arm guests: qemu-system-arm's virt machine with a cortex-a15 under
TCG, booting the kernel or firmware the parameters give (no UEFI for arm is
installed where QEMU runs), and every other arch refused naming the ones
there are."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    guest_arch,
    qemu_argv,
    uefi_firmware,
    uefi_vars_argv,
)
from hypothesis import given
from hypothesis import strategies as st

RUN_DIR = "/run/jumpstarter"
PROVISIONERS = ("qemu.jumpstarter.dev", "qemu-baremetal.jumpstarter.dev")
ARM_BOOTS_NOTHING = "parameters.kernel: an arm guest needs a kernel or firmware"


def option(argv, flag):
    return [argv[i + 1] for i, item in enumerate(argv) if item == flag]


def errors_of(provisioner, parameters):
    if provisioner == "qemu-baremetal.jumpstarter.dev":
        parameters = {"hosts": [{"name": "bench-01", "slots": 1}], **parameters}
    return validate_parameters(provisioner, parameters)["errors"]


def test_an_arm_guest_runs_qemu_system_arm_on_virt_with_a_cortex_a15():
    argv = qemu_argv({"arch": "arm", "kernel": {"path": "/images/zImage"}}, run_dir=RUN_DIR, name="armv7-0")
    assert argv[0] == "qemu-system-arm"
    assert option(argv, "-machine") == ["virt,accel=tcg"]
    assert option(argv, "-cpu") == ["cortex-a15"]
    assert option(argv, "-kernel") == ["/images/zImage"]
    assert option(argv, "-append") == ["console=ttyAMA0"]
    assert "-drive" not in argv and "-bios" not in argv


def test_under_kvm_the_host_cpu_and_a_cpu_model_of_the_class_wins():
    parameters = {"arch": "arm", "kvm": True, "kernel": {"path": "/k"}}
    assert option(qemu_argv(parameters, run_dir=RUN_DIR, name="x", accel="kvm"), "-cpu") == ["host"]
    assert option(qemu_argv({**parameters, "cpuModel": "cortex-a7"}, run_dir=RUN_DIR, name="x"),
                  "-cpu") == ["cortex-a7"]


def test_virt_without_an_arch_stays_aarch64_and_arm_hosts_make_an_arm_guest():
    assert guest_arch({"machineType": "virt"}) == "aarch64"
    assert guest_arch({"hosts": [{"name": "pi-1", "arch": "arm"}, {"name": "pi-2", "arch": "arm"}]}) == "arm"


@pytest.mark.parametrize("provisioner", PROVISIONERS)
@pytest.mark.parametrize("boot", [{"kernel": {"path": "/images/zImage"}}, {"firmware": {"path": "/images/u-boot.bin"}},
                                  {"kernel": {"url": "https://images.test/zImage", "digest": "sha256:" + "c" * 64}}])
def test_an_arm_guest_given_a_kernel_or_firmware_is_valid(provisioner, boot):
    assert errors_of(provisioner, {"arch": "arm", "machineType": "virt", **boot}) == []


@pytest.mark.parametrize("provisioner", PROVISIONERS)
def test_an_arm_guest_with_nothing_to_boot_is_refused_naming_the_field(provisioner):
    (error,) = errors_of(provisioner, {"arch": "arm"})
    assert error.startswith(ARM_BOOTS_NOTHING)


@pytest.mark.parametrize("provisioner", PROVISIONERS)
def test_arm_takes_the_virt_machine_only(provisioner):
    assert errors_of(provisioner, {"arch": "arm", "machineType": "q35", "kernel": {"path": "/k"}}) == [
        "parameters.machineType: 'q35' does not fit arch arm (use virt)"]


@pytest.mark.parametrize("provisioner", PROVISIONERS)
def test_another_arch_is_refused_with_the_supported_list(provisioner):
    assert errors_of(provisioner, {"arch": "riscv64", "kernel": {"path": "/k"}}) == [
        "parameters.arch: 'riscv64' is not one of x86_64, aarch64, arm"]


BOOT = st.fixed_dictionaries({}, optional={
    "kernel": st.just({"path": "/images/zImage"}),
    "firmware": st.just({"path": "/images/u-boot.bin"}),
    "initrd": st.just({"path": "/images/initrd"}),
    "machineType": st.just("virt"),
    "kvm": st.booleans(),
})


@given(BOOT, st.sampled_from(PROVISIONERS))
def test_an_arm_guest_is_refused_exactly_when_it_has_nothing_to_boot(parameters, provisioner):
    parameters = {"arch": "arm", **parameters}
    refused = [e for e in errors_of(provisioner, parameters) if e.startswith(ARM_BOOTS_NOTHING)]
    assert bool(refused) == ("kernel" not in parameters and "firmware" not in parameters)
    # Never the aarch64 UEFI: its code does not run on a 32-bit cpu.
    assert uefi_firmware(parameters) is None and uefi_vars_argv(parameters, RUN_DIR) is None
    assert not any("pflash" in arg for arg in qemu_argv(parameters, run_dir=RUN_DIR, name="x"))
