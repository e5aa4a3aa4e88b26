"""Power, flash and serial console of a provisioned QEMU virtual target.

The VM is not started by this driver: the provisioner runs QEMU with the
class's parameters (the Pod's runtime container, or the ``vm`` service on a
lab host) and keeps running it for the whole life of the instance. The
driver reaches it through the instance's run directory:

- ``qmp.sock``: QMP. Power off is ``stop`` then ``system_reset`` (the VM
  waits at its reset vector, QEMU state ``prelaunch``); power on is
  ``cont`` (after a ``system_reset`` when the guest stopped by itself, e.g.
  panicked), so every power on is a fresh boot of the same hardware.
- block node ``disk0``: the instance's writable disk. Flashing writes the
  image to a file in the run directory, padded with zeros to the disk's
  size, and has QEMU copy it onto the disk with a ``blockdev-backup`` job;
  QEMU, which has the disk open, does all the writing. Only while off.
- ``serial.sock`` and ``serial.log``: the console. Output is read from the
  log QEMU writes of everything the first serial port sends (so a console
  opened after power on still shows the boot from its start), input goes
  to the socket.

QEMU answers one QMP client at a time, so each call opens its own session
and closes it, as the provisioner's health checks do.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import ObjectStream
from anyio.streams.file import FileReadStream, FileWriteStream
from jumpstarter.driver import Driver, FlasherInterface, export, exportstream
from jumpstarter.streams.encoding import AutoDecompressIterator
from jumpstarter_driver_composite.driver import CompositeInterface
from jumpstarter_driver_power.driver import PowerInterface
from qemu.qmp import ConnectError, QMPClient

# QMP sessions come and go with every call; their INFO lines are noise.
logging.getLogger("qemu.qmp").setLevel(logging.WARNING)

# States after which the guest does not run again without a reset.
_STOPPED_FOR_GOOD = ("guest-panicked", "internal-error", "shutdown", "io-error", "watchdog")
_FLASH_NODE = "jumpstarter-flash"
_DUMP_NODE = "jumpstarter-dump"
_POLL_SECONDS = 0.05
_CHUNK = 65536


class PoweredOn(RuntimeError):
    """The VM runs, and the operation needs it off."""


@dataclass(kw_only=True)
class VirtualQemu(CompositeInterface, Driver):
    """A QEMU VM run by the provisioner; children ``power``, ``flasher``, ``console``."""

    # The instance's run directory (the provisioner writes it).
    run_dir: str
    qmp_socket: str = "qmp.sock"
    serial_socket: str = "serial.sock"
    serial_log: str = "serial.log"
    # QEMU block node of the instance's writable disk.
    disk_node: str = "disk0"
    # Seconds one QMP session may take to open (QEMU answers one client at a time).
    qmp_timeout: float = 30.0
    # Seconds a flash or dump copy may take inside QEMU.
    flash_timeout: float = 30 * 60.0

    # Offset of serial.log where the latest power on began (None: none seen).
    boot_offset: int | None = field(default=None, init=False)

    def __post_init__(self):
        super().__post_init__()
        self.children["power"] = VirtualQemuPower(parent=self)
        self.children["flasher"] = VirtualQemuFlasher(parent=self)
        self.children["console"] = VirtualQemuConsole(parent=self)

    def path(self, name: str) -> Path:
        return Path(self.run_dir) / name

    @asynccontextmanager
    async def qmp(self) -> AsyncGenerator[QMPClient, None]:
        client = QMPClient(f"virtual-qemu:{Path(self.run_dir).name}")
        where = self.path(self.qmp_socket)
        try:
            with anyio.fail_after(self.qmp_timeout):
                await client.connect(str(where))
        except ConnectError as error:
            raise RuntimeError(f"the VM's QMP does not answer on {where}: {error.exc}") from None
        except TimeoutError:
            raise RuntimeError(f"the VM's QMP on {where} did not answer within {self.qmp_timeout}s") from None
        try:
            yield client
        finally:
            with suppress(EOFError):
                await client.disconnect()

    async def status(self, qmp: QMPClient) -> dict:
        return await qmp.execute("query-status")

    async def require_off(self, qmp: QMPClient, action: str) -> None:
        status = await self.status(qmp)
        if status["running"]:
            raise PoweredOn(f"cannot {action} while the target is powered on: power it off first "
                            "(j <driver> power off)")

    async def disk_size(self, qmp: QMPClient) -> int:
        for node in await qmp.execute("query-named-block-nodes", {"flat": True}):
            if node.get("node-name") == self.disk_node:
                return int(node["image"]["virtual-size"])
        raise RuntimeError(f"the VM has no disk (block node {self.disk_node!r}); the class gives it "
                           "none (parameters.resources.storage or parameters.disk)")

    def log_size(self) -> int:
        try:
            return self.path(self.serial_log).stat().st_size
        except FileNotFoundError:
            return 0

    async def backup(self, qmp: QMPClient, *, source: str, target: str, job: str) -> None:
        """Copy block node ``source`` onto ``target`` inside QEMU and wait for the copy to end."""
        await qmp.execute("blockdev-backup", {"job-id": job, "device": source, "target": target,
                                              "sync": "full", "auto-dismiss": False})
        with anyio.fail_after(self.flash_timeout):
            while True:
                state = next((j for j in await qmp.execute("query-jobs") if j["id"] == job), None)
                if state is None:
                    raise RuntimeError(f"QEMU lost the copy job {job}")
                if state["status"] == "concluded":
                    await qmp.execute("job-dismiss", {"id": job})
                    if state.get("error"):
                        raise RuntimeError(f"copying {source} onto {target} failed: {state['error']}")
                    return
                await anyio.sleep(_POLL_SECONDS)

    async def with_file_node(self, qmp: QMPClient, node: str, path: Path, read_only: bool, action):
        await qmp.execute("blockdev-add", {"driver": "raw", "node-name": node, "read-only": read_only,
                                           "file": {"driver": "file", "filename": str(path)}})
        try:
            await action()
        finally:
            await qmp.execute("blockdev-del", {"node-name": node})


@dataclass(kw_only=True)
class VirtualQemuPower(PowerInterface, Driver):
    parent: VirtualQemu

    @export
    async def on(self) -> None:
        """Start the guest from its reset vector (nothing to do when it runs)."""
        async with self.parent.qmp() as qmp:
            status = await self.parent.status(qmp)
            if status["running"]:
                self.logger.info("already on")
                return
            self.parent.boot_offset = self.parent.log_size()
            if status["status"] in _STOPPED_FOR_GOOD:
                await qmp.execute("system_reset")
            await qmp.execute("cont")
            self.logger.info("powered on")

    @export
    async def off(self) -> None:
        """Stop the guest and reset the machine, which then waits for power on."""
        async with self.parent.qmp() as qmp:
            status = await self.parent.status(qmp)
            if status["status"] == "prelaunch":
                self.logger.info("already off")
                return
            if status["running"]:
                await qmp.execute("stop")
            await qmp.execute("system_reset")
            # QEMU acts on the reset request in its main loop; off is done
            # once the machine reports it waits at its reset vector.
            with anyio.fail_after(self.parent.qmp_timeout):
                while (await self.parent.status(qmp))["status"] != "prelaunch":
                    await anyio.sleep(_POLL_SECONDS)
            self.logger.info("powered off")

    @export
    async def read(self) -> AsyncGenerator:
        raise NotImplementedError("a virtual target has no power meter")


@dataclass(kw_only=True)
class VirtualQemuFlasher(FlasherInterface, Driver):
    parent: VirtualQemu

    def _check_partition(self, partition: str | None) -> None:
        if partition not in (None, "root", "disk"):
            raise ValueError(f"unknown partition {partition!r}: the target has one disk (root)")

    @export
    async def flash(self, source, partition: str | None = None):
        """Write an image (raw; gzip, xz, bz2 or zstd compressed) to the disk, from its first byte.

        The rest of the disk is zeroed. Only while the target is off.
        """
        self._check_partition(partition)
        async with self.parent.qmp() as qmp:
            await self.parent.require_off(qmp, "flash")
            size = await self.parent.disk_size(qmp)
        image = self.parent.path("flash.img")
        try:
            written = 0
            async with await FileWriteStream.from_path(image) as out:
                async with self.resource(source) as resource:
                    async for chunk in AutoDecompressIterator(source=resource):
                        written += len(chunk)
                        if written > size:
                            raise ValueError(f"the image is larger than the target's disk ({size} bytes, "
                                             "parameters.resources.storage of its class)")
                        await out.send(chunk)
            # QEMU may run as another user (the Pod's runtime container).
            os.chmod(image, 0o644)
            os.truncate(image, size)
            async with self.parent.qmp() as qmp:
                await self.parent.require_off(qmp, "flash")

                async def copy():
                    await self.parent.backup(qmp, source=_FLASH_NODE, target=self.parent.disk_node,
                                             job=_FLASH_NODE)

                await self.parent.with_file_node(qmp, _FLASH_NODE, image, True, copy)
            self.logger.info("flashed %d bytes", written)
        finally:
            image.unlink(missing_ok=True)

    @export
    async def dump(self, target, partition: str | None = None):
        """Read the whole disk as a raw image. Only while the target is off."""
        self._check_partition(partition)
        image = self.parent.path("dump.img")
        try:
            async with self.parent.qmp() as qmp:
                await self.parent.require_off(qmp, "dump")
                size = await self.parent.disk_size(qmp)
                with open(image, "wb") as handle:
                    handle.truncate(size)
                os.chmod(image, 0o666)

                async def copy():
                    await self.parent.backup(qmp, source=self.parent.disk_node, target=_DUMP_NODE,
                                             job=_DUMP_NODE)

                await self.parent.with_file_node(qmp, _DUMP_NODE, image, False, copy)
            async with await FileReadStream.from_path(image) as stream:
                async with self.resource(target) as resource:
                    async for chunk in stream:
                        await resource.send(chunk)
        finally:
            image.unlink(missing_ok=True)


@dataclass(kw_only=True)
class ConsoleStream(ObjectStream[bytes]):
    """Guest output from the serial log (from ``offset`` on), input to the serial socket."""

    log: Path
    offset: int
    serial: socket.socket

    def _drain(self) -> None:
        # QEMU also sends the output to the socket; it is read from the log,
        # and what the socket holds is dropped so that QEMU never blocks.
        with suppress(BlockingIOError, InterruptedError):
            while self.serial.recv(_CHUNK, socket.MSG_DONTWAIT):
                pass

    def _read(self) -> bytes:
        try:
            size = self.log.stat().st_size
        except FileNotFoundError:
            return b""
        if size < self.offset:
            # A new QEMU of the instance started a new log.
            self.offset = 0
        if size == self.offset:
            return b""
        with open(self.log, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(_CHUNK)
        self.offset += len(data)
        return data

    async def receive(self) -> bytes:
        while True:
            self._drain()
            data = self._read()
            if data:
                return data
            await anyio.sleep(_POLL_SECONDS)

    async def send(self, item: bytes) -> None:
        await anyio.to_thread.run_sync(self.serial.sendall, item)

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        self.serial.close()


@dataclass(kw_only=True)
class VirtualQemuConsole(Driver):
    parent: VirtualQemu

    @classmethod
    def client(cls) -> str:
        return "jumpstarter_driver_pyserial.client.PySerialClient"

    @exportstream
    @asynccontextmanager
    async def connect(self):
        """The first serial port, from the latest power on through this driver (else from now)."""
        log_size = self.parent.log_size()
        boot = self.parent.boot_offset
        offset = boot if boot is not None and boot <= log_size else log_size
        serial = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await anyio.to_thread.run_sync(serial.connect, str(self.parent.path(self.parent.serial_socket)))
        except OSError as error:
            serial.close()
            raise RuntimeError(f"the VM's serial port does not answer on "
                               f"{self.parent.path(self.parent.serial_socket)}: {error}") from None
        async with ConsoleStream(log=self.parent.path(self.parent.serial_log), offset=offset,
                                 serial=serial) as stream:
            yield stream
