"""What is derived from a set's template drivers costs time linear in their
number: one set of thousands of drivers must not hold the GIL for every
tenant. Counted in lines of the collection's code run (sys.settrace), not in
wall time, so the ratio of 2n to n entries is the same on a busy machine."""

import sys
from pathlib import Path

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import set_overrides
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import qemu
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import named_drivers
from hypothesis import given
from hypothesis import strategies as st

PACKAGE = str(Path(qemu.__file__).parents[2])
QEMU = "jumpstarter_driver_qemu.driver.Qemu"
SERIAL = qemu.QEMU_SERIAL_DRIVER_TYPE


def lines_run(function, *args):
    """How many lines of plugins/module_utils ``function(*args)`` runs."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(PACKAGE) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        function(*args)
    finally:
        sys.settrace(previous)
    return count


def growth(make, function, n=300):
    """Lines run for 2n entries over lines run for n (about 2 when linear, 4 when quadratic)."""
    return lines_run(function, make(2 * n)) / lines_run(function, make(n))


def same_type(n):
    return [{"type": QEMU} for _ in range(n)]


def beside_given_names(n):
    # Names the template gives that the derived ones must step over.
    return [{"name": f"qemu_{index * 2}", "type": QEMU} for index in range(1, n // 2)] + same_type(n)


def serial_without_qemu(n):
    return [{"type": SERIAL} for _ in range(n)]


def test_deriving_names_is_linear_in_the_entries_of_one_type():
    assert growth(same_type, named_drivers) < 2.5
    assert growth(beside_given_names, named_drivers) < 2.5


def test_the_companions_of_a_template_without_qemu_are_resolved_in_one_pass():
    """Serial entries without a QEMU driver (the seed's shape) are allowed and
    each becomes a ref to the console of the one QEMU driver added for them:
    the policy and the overrides stay linear in the entries."""
    vclass = {"metadata": {"name": "qemu", "namespace": "ns"},
              "spec": {"provisioner": "qemu-baremetal.jumpstarter.dev", "parameters": {}}}

    def violations(drivers):
        exporter_set = {"metadata": {"name": "pool", "namespace": "ns"},
                        "spec": {"template": {"spec": {"drivers": drivers}}}}
        return set_overrides.resolve(vclass, exporter_set)

    assert growth(serial_without_qemu, violations) < 2.5
    assert violations(serial_without_qemu(3))["violations"] == []
    assert growth(serial_without_qemu, lambda drivers: qemu.qemu_driver_overrides(drivers, "/r")) < 2.5
    overrides = qemu.qemu_driver_overrides(serial_without_qemu(3), "/r")
    assert [overrides[name] for name in ("qemuserial", "qemuserial_2", "qemuserial_3")] == [
        {"ref": "qemu.console"}] * 3


def first_free_names(drivers):
    """The rule named_drivers documents, written the plain way: each derived
    name is the first of base, base_2, base_3... not taken before it."""
    taken = {d["name"] for d in drivers if isinstance(d.get("name"), str)}
    named = []
    for driver in drivers:
        if driver.get("name") is not None:
            named.append(driver)
            continue
        base = driver["type"].rsplit(".", 1)[-1].lower()
        name, suffix = base, 1
        while name in taken:
            suffix += 1
            name = f"{base}_{suffix}"
        taken.add(name)
        named.append({**driver, "name": name})
    return named


TYPES = st.sampled_from(["a.Qemu", "b.Qemu_2", "c.Tcp", "d.qemu"])
ENTRIES = st.one_of(
    st.builds(lambda kind: {"type": kind}, TYPES),
    st.builds(lambda name, kind: {"name": name, "type": kind},
              st.sampled_from(["qemu", "qemu_2", "qemu_3", "qemu_2_2", "tcp_2", "x"]), TYPES),
)


@given(st.lists(ENTRIES, max_size=12))
def test_derived_names_are_the_first_free_ones(drivers):
    assert named_drivers(drivers) == first_free_names(drivers)
