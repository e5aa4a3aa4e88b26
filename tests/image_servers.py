"""Where the image fetch tests get their images from: a real HTTP server that
counts the requests per path, and a real OCI registry (the distribution
project's, ``scripts/oci-registry``) whose access log counts the blob pulls.
Images are pushed to it with a real client (``oras``).

Both listen on 10.213.0.1 by default, where the lab hosts reach this
machine (scripts/labhosts, which puts that address on the loopback); tests
without lab hosts pass ``address="127.0.0.1"``.

``instance_pod`` renders an instance's Pod as the operator does, and
``run_images_container`` runs the command of its ``images`` init container
for real here, its mounts mapped to local directories.
"""

from __future__ import annotations

import collections
import hashlib
import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import oras.client
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from jumpstarter_standin import wait_for

ROOT = Path(__file__).resolve().parents[1]
ADDRESS = "10.213.0.1"


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def free_port(address: str = ADDRESS) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


class ImageServer:
    """http.server over a directory; ``gets[path]`` counts the GETs of each
    path, ``connections`` the connections accepted, a request or not."""

    def __init__(self, directory: Path, address: str = ADDRESS):
        self.directory = Path(directory)
        self.gets = collections.Counter()
        self.connections = 0
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(server.directory), **kwargs)

            def setup(self):
                with server.lock:
                    server.connections += 1
                super().setup()

            def do_GET(self):
                with server.lock:
                    server.gets[self.path] += 1
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, name: str, content: bytes | Path) -> tuple[str, str]:
        """Serves ``content`` at /name; returns (url, digest)."""
        target = self.directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(Path(content).read_bytes() if isinstance(content, Path) else content)
        return f"{self.url}/{name}", sha256(target)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Registry:
    """The distribution registry serving over plain HTTP on ``address``."""

    def __init__(self, directory: Path, address: str = ADDRESS):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.host = f"{address}:{free_port(address)}"
        self.log = (self.directory / "registry.log").open("w")
        self.process = subprocess.Popen(
            [str(ROOT / "scripts" / "oci-registry"), "serve", str(self.directory), self.host],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._answers, timeout=60, interval=0.2, message=f"registry on {self.host}")
        self.client = oras.client.OrasClient(hostname=self.host, insecure=True)

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError((self.directory / "registry.log").read_text())
        try:
            socket.create_connection(tuple(self.host.rsplit(":", 1)), timeout=1).close()
            return True
        except OSError:
            return False

    def push(self, reference: str, path: Path) -> str:
        """Pushes ``path`` as a one-layer artifact at ``host/reference``; returns the oci:// url."""
        target = f"{self.host}/{reference}"
        response = self.client.push(target=target, files=[str(path)],
                                    disable_path_validation=True, quiet=True)
        assert response.status_code in (200, 201), response.text
        return f"oci://{target}"

    def blob_gets(self, digest: str) -> int:
        """Blob downloads of ``digest`` the registry answered, from its access log."""
        self.log.flush()
        text = (self.directory / "registry.log").read_text()
        return sum(1 for line in text.splitlines()
                   if '"GET /v2/' in line and f"/blobs/{digest} " in line and '" 200 ' in line)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def instance_pod(parameters: dict, vclass: dict | None = None, images: dict | None = None) -> dict:
    """The Pod of the Exporter pool-0 of the set lab/pool (class ``vclass``,
    none by default) for the instance ``parameters``."""
    exporter_set = {"metadata": {"name": "pool", "namespace": "lab", "uid": "u"},
                    "spec": {"template": {"spec": {"drivers": []}}}}
    exporter = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
                "metadata": {"name": "pool-0", "namespace": "lab", "uid": "e"}}
    return k8s_pod.instance_pod(exporter_set, vclass or {"spec": {}}, exporter, "qemu.jumpstarter.dev",
                                parameters, images)


def run_images_container(container: dict, cache: Path, run_dir: Path) -> subprocess.CompletedProcess:
    """The ``images`` init container's command for real, with this Python,
    the node cache at ``cache`` and the Pod's run directory at ``run_dir``."""
    run_dir.mkdir(exist_ok=True)
    argv = list(container["command"])
    assert argv[:2] == ["python3", "-c"]
    argv[0] = sys.executable
    argv[argv.index("--cache") + 1] = str(cache)
    files = json.loads(argv[argv.index("--files") + 1])
    for entry in files:
        entry["dest"] = entry["dest"].replace(k8s_pod.RUN_DIR, str(run_dir))
    argv[argv.index("--files") + 1] = json.dumps(files)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
