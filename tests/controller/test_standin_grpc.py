"""The stand-in's gRPC services with the real ``jmp`` 0.9.0: a ``jmp run``
exporter registers over TLS with the stand-in's private CA, a ``jmp shell``
client leases it, dials it through the router and calls a driver, and what
the real controller refuses is refused (a deleted Exporter's token, a config
without the CA).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
from jumpstarter_standin import JS, LEASE_ENDED_LABEL, condition_true, wait_for, wait_gone
from jumpstarter_standin.grpc_services import GrpcStandIn, go_duration, parse_label_selector

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

BIN = Path(sys.executable).parent
JMP = shutil.which("jmp", path=str(BIN)) or shutil.which("jmp")
BOARD = {"board": "grpc-mock"}


@pytest.fixture
def grpc_standin(standin) -> GrpcStandIn:
    """The gRPC services the ``standin`` fixture serves the namespace with."""
    assert standin.controller.endpoint == standin.grpc.endpoint
    return standin.grpc


@pytest.fixture
def jmp_env(tmp_path):
    """A private HOME and config dirs for ``jmp``, the venv's tools first on PATH."""
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("JMP_", "JUMPSTARTER_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
               JMP_CLIENT_CONFIG_HOME=str(home / ".config" / "jumpstarter"), PYTHONUNBUFFERED="1")
    return env


class Processes:
    """``jmp run`` processes of a test, stopped (by their pid) at its end."""

    def __init__(self, directory: Path, env: dict):
        self.directory = directory
        self.env = env
        self.started: list[tuple[subprocess.Popen, Path]] = []

    def run_exporter(self, config: Path, name: str) -> tuple[subprocess.Popen, Path]:
        log = self.directory / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(  # noqa: S603
                [JMP, "run", "--exporter-config", str(config)], env=self.env, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started.append((process, log))
        return process, log

    def output_of_refused_run(self, config: Path, name: str, what: str) -> str:
        """The output of a ``jmp run`` that is refused and must give up
        within 120 s (``what`` names the run, as in "with a stale token")."""
        process, log = self.run_exporter(config, name)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"jmp run {what} kept running:\n{log.read_text()[-4000:]}")
        return log.read_text()

    def stop(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process, _ in self.started:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@pytest.fixture
def processes(tmp_path, jmp_env):
    started = Processes(tmp_path, jmp_env)
    try:
        yield started
    finally:
        started.stop()


def make_exporter(standin, name, labels=None):
    body = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": name, "namespace": standin.namespace, "labels": labels or dict(BOARD)},
            "spec": {}}
    return standin.custom.create_namespaced_custom_object(*JS, standin.namespace, "exporters", body)


def make_client(standin, name):
    body = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Client",
            "metadata": {"name": name, "namespace": standin.namespace}, "spec": {}}
    return standin.custom.create_namespaced_custom_object(*JS, standin.namespace, "clients", body)


def registered_online(standin, name, process, log):
    def ready():
        assert process.poll() is None, f"jmp run exited with {process.returncode}:\n{log.read_text()[-4000:]}"
        exporter = standin.exporter(name)
        return (condition_true(exporter, "Registered") and condition_true(exporter, "Online")
                and exporter.get("status", {}).get("devices") and exporter)
    return wait_for(ready, timeout=120, interval=0.5, message=f"{name} Registered and Online")


def test_config_helpers_speak_the_real_formats():
    assert go_duration(__import__("datetime").timedelta(minutes=30)) == "30m0s"
    assert parse_label_selector("a=b,c!=d") == {
        "matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["d"]}]}


def test_jmp_run_registers_and_jmp_shell_leases_dials_and_releases(standin, grpc_standin, processes, jmp_env,
                                                                  tmp_path):
    make_exporter(standin, "mock-1")
    make_client(standin, "alice")
    config = grpc_standin.write_exporter_config(tmp_path / "exporter.yaml", "mock-1")
    process, log = processes.run_exporter(config, "mock-1")

    exporter = registered_online(standin, "mock-1", process, log)
    assert exporter["status"]["endpoint"] == grpc_standin.endpoint
    assert exporter["status"]["exporterStatus"] == "Available"
    assert exporter["status"]["lastSeen"]
    assert [d for d in exporter["status"]["devices"] if d.get("labels", {}).get("jumpstarter.dev/name") == "power"]
    wait_for(lambda: standin.core.read_namespaced_secret("alice-client", standin.namespace), message="client secret")
    wait_for(lambda: (standin.custom.get_namespaced_custom_object(*JS, standin.namespace, "clients", "alice")
                      .get("status") or {}).get("endpoint") == grpc_standin.endpoint, message="client endpoint")

    client_config = grpc_standin.write_client_config(tmp_path / "client.yaml", "alice")
    shell = subprocess.run(  # noqa: S603
        [JMP, "shell", "--client-config", str(client_config), "--selector", "board=grpc-mock",
         "--duration", "10m", "--", "j", "power", "on"],
        env=jmp_env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert shell.returncode == 0, f"jmp shell failed:\n{shell.stdout}\n{shell.stderr}\nexporter log:\n" \
                                  f"{log.read_text()[-6000:]}"

    leases = [x for x in standin.leases() if x["spec"]["clientRef"]["name"] == "alice"]
    assert len(leases) == 1, leases
    lease = leases[0]
    assert lease["spec"]["selector"] == {"matchLabels": BOARD}
    assert lease["spec"]["duration"] == "10m0s"
    assert lease["status"].get("exporterRef") == {"name": "mock-1"} or lease["status"]["ended"]
    ended = wait_for(lambda: (x := standin.lease(lease["metadata"]["name"]))["status"].get("ended") and x,
                     timeout=30, message="lease ended after jmp shell")
    assert ended["spec"]["release"] is True
    ready = next(c for c in ended["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Released")
    assert ended["status"]["beginTime"], "the lease was assigned before it ended"
    wait_for(lambda: standin.lease(lease["metadata"]["name"])["metadata"].get("labels", {}).get(LEASE_ENDED_LABEL),
             message="lease-ended label")
    # The exporter is free again and reports Available.
    wait_for(lambda: not (e := standin.exporter("mock-1"))["status"].get("leaseRef")
             and e["status"].get("exporterStatus") == "Available", timeout=60, message="exporter free again")
    assert process.poll() is None, log.read_text()[-4000:]
    assert "Handling new connection request on lease" in log.read_text()


def test_token_of_a_deleted_exporter_is_refused_at_register(standin, grpc_standin, processes, tmp_path):
    first = make_exporter(standin, "reborn")
    stale = grpc_standin.credential_token("exporter", "reborn")
    standin.custom.delete_namespaced_custom_object(*JS, standin.namespace, "exporters", "reborn")
    wait_gone(lambda: standin.exporter("reborn"), message="old Exporter gone")
    second = make_exporter(standin, "reborn")
    assert second["metadata"]["uid"] != first["metadata"]["uid"]

    config = grpc_standin.write_exporter_config(tmp_path / "stale.yaml", "reborn", token=stale)
    # jmp run gives up after five rapid failures of its child (exit status 0).
    output = processes.output_of_refused_run(config, "reborn", "with a stale token")
    assert output.count("StatusCode.PERMISSION_DENIED") >= 5, output[-4000:]
    assert "permission denied for exporter" in output
    exporter = standin.exporter("reborn")
    assert not condition_true(exporter, "Registered")
    assert not (exporter.get("status") or {}).get("devices")
    assert not condition_true(exporter, "Online")


def test_without_the_ca_tls_fails(standin, grpc_standin, processes, tmp_path):
    make_exporter(standin, "no-ca")
    config = grpc_standin.write_exporter_config(tmp_path / "no-ca.yaml", "no-ca", with_ca=False)
    output = processes.output_of_refused_run(config, "no-ca", "without tls.ca")
    assert "StatusCode.UNAVAILABLE" in output and "CERTIFICATE_VERIFY_FAILED" in output, output[-4000:]
    assert "Registering exporter with controller" in output
    assert not condition_true(standin.exporter("no-ca"), "Registered")

    # The same call with the CA gets through TLS and to the token check.
    make_client(standin, "bob")
    token = grpc_standin.credential_token("client", "bob")
    metadata = (("authorization", f"Bearer {token}"), ("jumpstarter-kind", "Client"),
                ("jumpstarter-namespace", standin.namespace), ("jumpstarter-name", "bob"))
    request = client_pb2.ListExportersRequest(parent=f"namespaces/{standin.namespace}")
    with grpc.secure_channel(grpc_standin.endpoint, grpc.ssl_channel_credentials()) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            client_pb2_grpc.ClientServiceStub(channel).ListExporters(request, metadata=metadata, timeout=20)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    credentials = grpc.ssl_channel_credentials(root_certificates=grpc_standin.ca_pem.encode())
    with grpc.secure_channel(grpc_standin.endpoint, credentials) as channel:
        stub = client_pb2_grpc.ClientServiceStub(channel)
        listed = stub.ListExporters(request, metadata=metadata, timeout=20)
        assert [e.name for e in listed.exporters] == [f"namespaces/{standin.namespace}/exporters/no-ca"]
        with pytest.raises(grpc.RpcError) as unsigned:
            stub.ListExporters(request, metadata=(("authorization", "Bearer not.a.token"), *metadata[1:]),
                               timeout=20)
        assert unsigned.value.code() == grpc.StatusCode.UNKNOWN
        assert "failed to authenticate token" in unsigned.value.details()
