"""qmp_control through real ansible-playbook runs against a running QEMU guest."""

import asyncio

import pytest
from ansible_play import run_tasks
from qemu.qmp import QMPClient
from qemu_vm import GUEST_BANNER, SerialConsole, running_vm

pytestmark = pytest.mark.slow

MODULE = "jumpstarter.virtual_exporters.qmp_control"


def qmp_task(socket, command, **extra):
    return {MODULE: {"socket": socket, "command": command, "timeout": 20}, **extra}


def query_status(socket):
    async def query():
        client = QMPClient("test")
        await client.connect(socket)
        try:
            return await client.execute("query-status")
        finally:
            await client.disconnect()

    return asyncio.run(query())


def summary(result):
    return (result["changed"], result["before"], result["status"], result["running"])


def test_commands_are_idempotent_and_reach_qemu_and_a_missing_socket_is_absent(tmp_path):
    with running_vm(tmp_path / "vm", name="qmp-module") as vm:
        socket = vm.qmp_socket
        serial = SerialConsole(vm.serial_socket)
        serial.read_until(GUEST_BANNER)

        pause = run_tasks(tmp_path, [
            qmp_task(socket, "status"),
            qmp_task(socket, "stop", check_mode=True),
            qmp_task(socket, "stop"),
            qmp_task(socket, "stop"),
        ])
        assert [summary(result) for result in pause] == [
            (False, "running", "running", True),
            (True, "running", "running", True),
            (True, "running", "paused", False),
            (False, "paused", "paused", False),
        ]
        assert query_status(socket)["status"] == "paused"

        resume = run_tasks(tmp_path, [
            qmp_task(socket, "cont", check_mode=True),
            qmp_task(socket, "cont"),
            qmp_task(socket, "cont"),
            qmp_task(socket, "reset", diff=True),
        ])
        assert [summary(result) for result in resume] == [
            (True, "paused", "paused", False),
            (True, "paused", "running", True),
            (False, "running", "running", True),
            (True, "running", "running", True),
        ]
        assert resume[3]["diff"] == {"before": {"status": "running"},
                                     "after": {"status": "running"}}
        # The reset rebooted the guest: its init runs again.
        serial.read_until(GUEST_BANNER)
        assert query_status(socket)["status"] == "running"
        assert vm.process.poll() is None
        serial.close()

        # The same run (an ansible-playbook run costs seconds) asks a socket
        # whose directory does not exist: quit is a no-op, stop fails.
        missing = str(tmp_path / "nothing" / "qmp.sock")
        stop_qemu = run_tasks(tmp_path, [
            qmp_task(socket, "quit", check_mode=True),
            qmp_task(socket, "quit"),
            qmp_task(socket, "quit"),
            qmp_task(socket, "status", ignore_errors=True),
            qmp_task(missing, "quit"),
            qmp_task(missing, "stop", ignore_errors=True),
        ])
        assert [summary(result) for result in stop_qemu[:3]] == [
            (True, "running", "running", True),
            (True, "running", "absent", False),
            (False, "absent", "absent", False),
        ]
        assert stop_qemu[3]["failed"] is True
        assert f"no QMP server on {socket}" in stop_qemu[3]["msg"]
        assert vm.process.wait(timeout=10) == 0
        assert summary(stop_qemu[4]) == (False, "absent", "absent", False)
        assert stop_qemu[5]["failed"] is True and "no QMP server" in stop_qemu[5]["msg"]
