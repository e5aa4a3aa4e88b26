"""The virtual QEMU driver is found the way Jumpstarter finds drivers: its
entry points, as the real ``jmp driver list`` lists them and loads them."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import jumpstarter_driver_virtual_qemu.driver as driver

JMP = Path(sys.executable).parent / "jmp"
CLASSES = {"VirtualQemu": driver.VirtualQemu, "VirtualQemuPower": driver.VirtualQemuPower,
           "VirtualQemuFlasher": driver.VirtualQemuFlasher}


def test_jmp_driver_list_shows_the_virtual_qemu_drivers():
    listed = subprocess.run([str(JMP), "driver", "list"], capture_output=True, text=True, timeout=60,
                            check=True).stdout
    rows = {line.split()[0]: line.split()[1] for line in listed.splitlines()[1:] if line.strip()}
    for name, cls in CLASSES.items():
        assert rows.get(name) == f"{cls.__module__}.{cls.__qualname__}", listed


def test_each_entry_point_loads_its_driver_class():
    found = {point.name: point.load() for point in entry_points(group="jumpstarter.drivers")
             if point.name in CLASSES}
    assert found == CLASSES
