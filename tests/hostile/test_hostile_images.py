"""A tenant's images, as an attacker would write them: a url that reads a
local file or talks FTP, a registry whose token realm is a local file, a
download that never ends, a tampered or swapped file in the shared cache, and
a set that names its own image for the container that writes that cache.
A redirect, of a file or of a registry's blob, to a host the url could not
have named itself. Each is refused with its reason and no side effect: no
request made, no file read or sent, nothing left in the cache, nothing booted.

Real parts: a local HTTP server (``image_servers.ImageServer``), plain
sockets for the FTP and registry sides, the fetch code run as the Pod's init
container runs it (``python3 -c``), and the operator on the bed.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import socket
import threading

import image_servers
import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from image_servers import ImageServer, instance_pod, run_images_container, sha256
from jumpstarter_standin import wait_for
from kubernetes import client
from lab_beds import Bed
from labhosts import GUEST
from pool_helpers import QEMU_PARAMETERS, condition, get_set, make_class, make_set, settle_pool

LOCAL = "127.0.0.1"
IMAGE = os.urandom(64 * 1024)


@pytest.fixture
def server(tmp_path):
    served = ImageServer(tmp_path / "served", address=LOCAL)
    yield served
    served.close()


class Listener:
    """A TCP port that counts the connections made to it (an FTP server's place)."""

    def __init__(self, address=LOCAL):
        self.sock = socket.socket()
        self.sock.bind((address, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.sock.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            # What an FTP server says first, so a client would carry on.
            conn.sendall(b"220 ready\r\n")
            conn.close()

    def close(self):
        self.running = False
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def ftp():
    listener = Listener()
    yield listener
    listener.close()


class HostileHTTP:
    """An HTTP server whose answers a test writes: ``routes[path] = (status, headers, body)``.

    ``requests`` records (path, Authorization header) of each request;
    ``body`` may be a generator for a response without a length.
    """

    def __init__(self, address=LOCAL):
        self.routes = {}
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                server.requests.append((self.path.split("?")[0], self.headers.get("Authorization")))
                status, headers, body = server.routes.get(self.path.split("?")[0], (404, {}, b""))
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for chunk in ([body] if isinstance(body, bytes) else body):
                        self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.host = f"{address}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hostile():
    served = HostileHTTP()
    yield served
    served.close()


def cache_files(cache):
    return sorted(os.path.relpath(os.path.join(root, name), cache)
                  for root, _, names in os.walk(cache) for name in names if not name.endswith(".lock"))


# -- urls --------------------------------------------------------------------

def test_a_file_url_is_refused_naming_the_field_and_the_file_is_not_read(tmp_path):
    secret = tmp_path / "exporter.yaml"
    secret.write_bytes(b"token: exporter-secret\n")
    cache = tmp_path / "cache"
    with pytest.raises(image_fetch.ImageError) as raised:
        # The tenant even knows the file's digest: the cache would take it.
        image_fetch.fetch(f"file://{secret}", sha256(secret), str(cache), field="parameters.disk.url")
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert str(raised.value).startswith("parameters.disk.url: scheme 'file'")
    assert not cache.exists() or cache_files(cache) == []


def test_an_ftp_url_is_refused_before_any_connection(ftp, tmp_path):
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(f"ftp://{LOCAL}:{ftp.port}/disk.img", "sha256:" + "0" * 64, str(tmp_path / "cache"),
                          field="parameters.kernel.url")
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert str(raised.value).startswith("parameters.kernel.url: scheme 'ftp'")
    assert ftp.connections == 0


@pytest.mark.parametrize("scheme", ["ftp", "file"])
def test_a_redirect_to_another_scheme_is_not_followed(scheme, hostile, ftp, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"not for the tenant")
    target = f"ftp://{LOCAL}:{ftp.port}/disk.img" if scheme == "ftp" else f"file://{secret}"
    hostile.routes["/disk.img"] = (302, {"Location": target}, b"")
    cache = tmp_path / "cache"
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(f"http://{hostile.host}/disk.img", sha256(secret), str(cache))
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert "redirected to" in str(raised.value)
    assert ftp.connections == 0
    assert cache_files(cache) == []


def test_a_file_realm_is_refused_and_its_token_never_reaches_the_registry(hostile, tmp_path):
    token = tmp_path / "token.json"
    token.write_text(json.dumps({"token": "node-local-secret"}))
    challenge = f'Bearer realm="file://{token}",service="registry",scope="repository:guest:pull"'
    hostile.routes["/v2/guest/manifests/1"] = (401, {"WWW-Authenticate": challenge}, b"")
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(f"oci://{hostile.host}/guest:1", "sha256:" + "1" * 64, str(tmp_path / "cache"),
                          plain_http=True)
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert "token realm" in str(raised.value) and "https" in str(raised.value)
    # One unauthenticated manifest request, then nothing: no token read, none sent.
    assert hostile.requests == [("/v2/guest/manifests/1", None)]


@pytest.mark.parametrize("realm", [
    "https://127.0.0.2:{port}/token",
    # A user part naming the registry's host, the host elsewhere.
    "https://{local}@127.0.0.2:{port}/token",
    "https://{local}:443@127.0.0.2:{port}/token",
    "HTTPS://127.0.0.2:{port}/token",
    # The registry's host after a user part naming the other: that part made
    # http.client fail with an error of its own, no ImageError.
    "https://127.0.0.2:{port}@{local}/token",
])
def test_a_realm_on_another_host_is_refused_before_any_connection_to_it(realm, hostile, tmp_path):
    elsewhere = Listener("127.0.0.2")
    try:
        challenge = (f'Bearer realm="{realm.format(port=elsewhere.port, local=LOCAL)}",service="registry",'
                     'scope="repository:guest:pull"')
        hostile.routes["/v2/guest/manifests/1"] = (401, {"WWW-Authenticate": challenge}, b"")
        with pytest.raises(image_fetch.ImageError) as raised:
            image_fetch.fetch(f"oci://{hostile.host}/guest:1", "sha256:" + "1" * 64,
                              str(tmp_path / "cache"), plain_http=True)
        assert raised.value.reason == image_fetch.REASON_INVALID
        assert f"is not on the registry's host {LOCAL}" in str(raised.value) or \
            str(raised.value).endswith("has a user part")
        assert elsewhere.connections == 0
        assert hostile.requests == [("/v2/guest/manifests/1", None)]
    finally:
        elsewhere.close()


# -- redirects to other hosts ------------------------------------------------

# Another host of the machine's loopback: an internal address the url's host
# (127.0.0.1, which the class allows) points the fetch at.
ELSEWHERE = "127.0.0.2"


@pytest.fixture
def elsewhere(tmp_path):
    served = ImageServer(tmp_path / "elsewhere", address=ELSEWHERE)
    yield served
    served.close()


@pytest.mark.parametrize("location", [
    "http://{elsewhere}/guest/disk.img",
    "HTTP://{elsewhere}/guest/disk.img",
    "//{elsewhere}/guest/disk.img",
    # A user part naming the url's own host, the host elsewhere.
    "http://{local}@{elsewhere}/guest/disk.img",
    "http://{local}:80@{elsewhere}/guest/disk.img",
])
@pytest.mark.parametrize("hosts", [(), ("images.example", "127.0.0.3")])
def test_a_redirect_to_a_host_the_url_may_not_name_is_refused_before_any_connection(
        location, hosts, hostile, elsewhere, tmp_path):
    _, digest = elsewhere.add("guest/disk.img", IMAGE)
    target = location.format(elsewhere=elsewhere.url.removeprefix("http://"), local=LOCAL)
    hostile.routes["/disk.img"] = (302, {"Location": target}, b"")
    url = f"http://{hostile.host}/disk.img"
    cache = tmp_path / "cache"
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(url, digest, str(cache), field="parameters.disk.url", hosts=hosts)
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert str(raised.value).startswith(f"{url}: redirected to a host it may not name")
    assert ELSEWHERE not in str(raised.value)  # where it pointed: the detail only
    assert elsewhere.connections == 0
    assert cache_files(cache) == []


def test_a_redirect_to_the_urls_own_host_or_a_listed_one_is_followed(hostile, elsewhere, server, tmp_path):
    _, digest = elsewhere.add("guest/disk.img", IMAGE)
    server.add("guest/disk.img", IMAGE)
    hostile.routes["/own.img"] = (302, {"Location": f"{server.url}/guest/disk.img"}, b"")
    hostile.routes["/listed.img"] = (307, {"Location": f"{elsewhere.url}/guest/disk.img"}, b"")
    # Another port of the url's host is its host: hosts are compared without port.
    path, downloaded = image_fetch.fetch(f"http://{hostile.host}/own.img", digest, str(tmp_path / "a"))
    assert downloaded and open(path, "rb").read() == IMAGE
    assert server.gets["/guest/disk.img"] == 1
    path, downloaded = image_fetch.fetch(f"http://{hostile.host}/listed.img", digest, str(tmp_path / "b"),
                                         hosts=[ELSEWHERE.upper()])
    assert downloaded and open(path, "rb").read() == IMAGE
    assert elsewhere.gets["/guest/disk.img"] == 1


def registry_redirecting_its_blob(hostile, location):
    """``hostile`` as a registry of ``guest:1``, one layer, whose blob it redirects to ``location``."""
    digest = image_fetch.DIGEST_ALGORITHM + ":" + hashlib.sha256(IMAGE).hexdigest()
    manifest = {"schemaVersion": 2, "mediaType": image_fetch.OCI_MANIFEST_TYPES[0],
                "layers": [{"mediaType": "application/octet-stream", "digest": digest, "size": len(IMAGE)}]}
    hostile.routes["/v2/guest/manifests/1"] = (
        200, {"Content-Type": image_fetch.OCI_MANIFEST_TYPES[0]}, json.dumps(manifest).encode())
    hostile.routes[f"/v2/guest/blobs/{digest}"] = (307, {"Location": location}, b"")
    return digest


def test_a_registrys_blob_redirect_reaches_only_a_listed_storage_host(hostile, elsewhere, tmp_path):
    elsewhere.add("storage/blob", IMAGE)
    digest = registry_redirecting_its_blob(hostile, f"{elsewhere.url}/storage/blob")
    url = f"oci://{hostile.host}/guest:1"
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(url, digest, str(tmp_path / "cache"), plain_http=True)
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert str(raised.value).startswith(f"{url}: redirected to a host it may not name")
    assert elsewhere.connections == 0
    assert cache_files(tmp_path / "cache") == []
    # The class lists the registry's storage host: the blob comes from there.
    path, downloaded = image_fetch.fetch(url, digest, str(tmp_path / "cache"), plain_http=True,
                                         hosts=[ELSEWHERE])
    assert downloaded and open(path, "rb").read() == IMAGE
    assert elsewhere.gets["/storage/blob"] == 1


def image_hosts_class(*hosts):
    annotations = {"virtualtarget.jumpstarter.dev/set-overridable": "image-hosts=" + "|".join(hosts)} \
        if hosts else {}
    return {"metadata": {"annotations": annotations}, "spec": {"provisioner": "qemu.jumpstarter.dev"}}


def test_the_pod_fetch_follows_a_redirect_only_to_the_classs_image_hosts(hostile, elsewhere, tmp_path):
    _, digest = elsewhere.add("guest/vmlinuz", IMAGE)
    hostile.routes["/vmlinuz"] = (302, {"Location": f"{elsewhere.url}/guest/vmlinuz"}, b"")
    url = f"http://{hostile.host}/vmlinuz"
    parameters = {"kernel": {"url": url, "digest": digest}}
    done = run_images_container(fetch_container(image_hosts_class(), parameters),
                                tmp_path / "node-cache", tmp_path / "run")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"ImageInvalid: {url}: redirected to a host it may not name"), done.stderr
    assert elsewhere.connections == 0
    assert cache_files(tmp_path / "node-cache") == []
    # The class lists the host (set_overrides.image_hosts reaches the container).
    done = run_images_container(fetch_container(image_hosts_class("images.example", ELSEWHERE), parameters),
                                tmp_path / "node-cache", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"downloaded": ["kernel"]}
    assert (tmp_path / "run" / "kernel").read_bytes() == IMAGE
    assert elsewhere.gets["/guest/vmlinuz"] == 1



# -- size --------------------------------------------------------------------

def endless():
    chunk = b"\0" * 65536
    while True:
        yield chunk


@pytest.mark.parametrize("announced", [True, False])
def test_an_oversize_download_is_stopped_and_its_partial_file_removed(announced, hostile, server, tmp_path):
    cache = tmp_path / "cache"
    if announced:
        url, digest = server.add("guest/huge.img", os.urandom(3 << 20))
    else:
        # No Content-Length and no end: only counting the bytes stops it.
        hostile.routes["/huge.img"] = (200, {}, endless())
        url, digest = f"http://{hostile.host}/huge.img", "sha256:" + "2" * 64
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(url, digest, str(cache), max_bytes=1 << 20, timeout=20)
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert "larger than the image size limit of 1048576 bytes" in str(raised.value)
    # An announced length stops it before the body is read; otherwise counting does.
    assert raised.value.detail == ("it announces 3145728 bytes" if announced else "the download went past it")
    assert "3145728" not in str(raised.value)
    assert image_fetch.ANNOTATION_MAX_SIZE in str(raised.value)
    assert cache_files(cache) == []


def test_the_pod_fetch_stops_at_the_class_limit(server, tmp_path):
    url, digest = server.add("guest/disk.img", os.urandom(3 << 20))
    vclass = {"metadata": {"annotations": {image_fetch.ANNOTATION_MAX_SIZE: "1Mi"}}, "spec": {}}
    done = run_images_container(fetch_container(vclass, {"disk": {"url": url, "digest": digest}}),
                               tmp_path / "node-cache", tmp_path / "run")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(f"ImageInvalid: {url}: larger than the image size limit")
    assert cache_files(tmp_path / "node-cache") == []


# -- the cache ---------------------------------------------------------------

def test_a_tampered_cache_file_is_fetched_again_before_use(server, tmp_path):
    url, digest = server.add("guest/vmlinuz", IMAGE)
    cache = tmp_path / "cache"
    path, downloaded = image_fetch.fetch(url, digest, str(cache))
    assert downloaded
    os.chmod(path, 0o644)
    with open(path, "r+b") as cached:
        cached.write(b"\x90" * 16)  # another tenant's instance, or a stray write
    again, downloaded = image_fetch.fetch(url, digest, str(cache))
    assert (again, downloaded) == (path, True)
    assert open(path, "rb").read() == IMAGE
    assert server.gets["/guest/vmlinuz"] == 2
    # Untouched, it is used as it is.
    assert image_fetch.fetch(url, digest, str(cache)) == (path, False)
    assert server.gets["/guest/vmlinuz"] == 2


def test_a_cache_entry_swapped_for_a_link_is_not_followed(server, tmp_path):
    url, digest = server.add("guest/vmlinuz", IMAGE)
    secret = tmp_path / "secret"
    secret.write_bytes(IMAGE)  # even with the right content, a link is not a cached file
    cache = tmp_path / "cache"
    path = image_fetch.cache_path(str(cache), digest)
    os.makedirs(os.path.dirname(path))
    os.symlink(secret, path)
    got, downloaded = image_fetch.fetch(url, digest, str(cache))
    assert (got, downloaded) == (path, True)
    assert not os.path.islink(path) and open(path, "rb").read() == IMAGE
    assert server.gets["/guest/vmlinuz"] == 1


def test_the_pod_fetch_reverifies_a_node_cache_hit(server, tmp_path):
    url, digest = server.add("guest/disk.img", IMAGE)
    container = fetch_container({"spec": {}}, {"disk": {"url": url, "digest": digest, "format": "raw"}})
    cache, run_dir = tmp_path / "node-cache", tmp_path / "run"
    assert run_images_container(container, cache, run_dir).returncode == 0
    cached = image_fetch.cache_path(str(cache), digest)
    os.chmod(cached, 0o644)
    with open(cached, "wb") as out:
        out.write(b"a backdoored disk")
    done = run_images_container(container, cache, run_dir)  # the next Pod on the node
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"downloaded": ["disk"]}
    assert (run_dir / "disk.base").read_bytes() == IMAGE
    assert server.gets["/guest/disk.img"] == 2


# -- the init container --------------------------------------------------------

def fetch_container(vclass, parameters, images=None):
    pod = instance_pod({"resources": {"memory": "128Mi"}, **parameters}, vclass, images)
    return next(c for c in pod["spec"]["initContainers"] if c["name"] == "images")


def test_a_set_that_names_a_file_url_is_refused_and_one_naming_its_own_image_gets_the_pinned_fetcher(
        api, namespace, standin, operator, server, ftp, tmp_path):
    """On the bed: the operator refuses a set's file:// and ftp:// urls
    (Degraded, InvalidParameters, an Event naming the field; no Pod, no
    connection), and a set that names its own exporter image gets it for its
    exporter only: the init container that writes the node cache runs the
    operator's image as a non-root user."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    url, digest = server.add("guest/vmlinuz", IMAGE)
    make_class(custom, namespace, parameters={**QEMU_PARAMETERS, "kernel": {"url": url, "digest": digest}})
    make_set(custom, namespace, name="thief", board="thief", minAvailableReplicas=1,
             parameters={"kernel": {"url": "file:///etc/shadow", "digest": digest},
                         "initrd": {"url": f"ftp://{LOCAL}:{ftp.port}/initrd", "digest": digest}})
    attacker = {"image": "attacker.example/shell:latest", "imagePullPolicy": "Always"}
    make_set(custom, namespace, minAvailableReplicas=1, images={"exporter": attacker})
    operator()

    def degraded():
        cond = condition(get_set(custom, namespace, "thief"), "Degraded")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(degraded, message="thief Degraded")
    assert cond["reason"] == "InvalidParameters"
    assert "parameters.kernel.url: scheme 'file'" in cond["message"]
    assert "parameters.initrd.url: scheme 'ftp'" in cond["message"]
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "InvalidParameters" and e.involved_object.name == "thief"],
                      message="InvalidParameters event")
    assert "parameters.kernel.url" in events[0].message

    settle_pool(standin, 1, custom, namespace)
    pods = [api.sanitize_for_serialization(p) for p in standin.pods()]
    assert [p["metadata"]["labels"]["virtualtarget.jumpstarter.dev/exporterset"] for p in pods] == ["pool"]
    spec = pods[0]["spec"]
    exporter = next(c for c in spec["initContainers"] if c["name"] == "exporter")
    assert exporter["image"] == attacker["image"]
    images = next(c for c in spec["initContainers"] if c["name"] == "images")
    assert images["image"] == k8s_pod.IMAGE_FETCH_IMAGE["image"] != attacker["image"]
    assert images["securityContext"]["runAsNonRoot"] is True
    assert images["securityContext"]["runAsUser"] == k8s_pod.IMAGE_FETCH_UID
    assert images["securityContext"]["allowPrivilegeEscalation"] is False
    assert images["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert ftp.connections == 0
    assert server.gets["/guest/vmlinuz"] == 0  # kwok runs no container; the operator fetches nothing


# -- on a lab host ----------------------------------------------------------------

def test_a_lab_host_follows_a_redirect_only_to_the_classs_image_hosts(testbed, namespace, standin, lab_hosts,
                                                                      tmp_path):
    """The class's kernel url on this machine redirects to the lab host's own
    link address, where a second server counts connections: refused on the
    lab host (ImageInvalid, no connection, nothing cached) until the class
    lists that host, and then fetched from it through baremetal_targets,
    the role and baremetal_instances."""
    host = "lab1"
    shutil.rmtree(lab_hosts.work_dir(host) / "image-cache", ignore_errors=True)
    prefix, last = lab_hosts.hosts[host].rsplit(".", 1)
    # This machine's side of the host's link: an address of the lab's network.
    link = f"{prefix}.{int(last) - 1}"
    redirecting = HostileHTTP(image_servers.ADDRESS)
    elsewhere = ImageServer(tmp_path / "elsewhere", address=link)
    try:
        kernel_there, kernel_digest = elsewhere.add("guest/vmlinuz", GUEST / "vmlinuz")
        redirecting.routes["/vmlinuz"] = (302, {"Location": kernel_there}, b"")
        # A wrong initramfs: the second instance stops after its kernel, booting nothing.
        redirecting.routes["/initramfs"] = (200, {}, b"not the initramfs")
        kernel_url = f"http://{redirecting.host}/vmlinuz"
        bed = Bed(testbed, namespace, standin, lab_hosts, tmp_path)
        parameters = lab_hosts.parameters({host: 2})
        parameters.update(kernel={"url": kernel_url, "digest": kernel_digest},
                          initrd={"url": f"http://{redirecting.host}/initramfs",
                                  "digest": sha256(GUEST / "initramfs.cpio.gz")})
        bed.vclass["spec"]["parameters"] = parameters
        bed.create_exporters(["pool-0", "pool-1"])
        cache = lab_hosts.work_dir(host) / "image-cache" / "sha256"

        results, _ = bed.run("provision", ["pool-0"])
        state = results[host]["instances"]["pool-0"]
        assert (state["phase"], state["reason"]) == ("Failed", "ImageInvalid"), state
        assert state["message"].startswith(f"{kernel_url}: redirected to a host it may not name"), state
        assert elsewhere.connections == 0
        assert not cache.exists() or kernel_digest.split(":")[1] not in {p.name for p in cache.iterdir()}

        bed.vclass["metadata"]["annotations"] = {
            "virtualtarget.jumpstarter.dev/set-overridable": f"image-hosts={link}"}
        results, _ = bed.run("provision", ["pool-1"])
        state = results[host]["instances"]["pool-1"]
        assert (state["phase"], state["reason"]) == ("Failed", "ImageDigestMismatch"), state
        assert elsewhere.gets["/guest/vmlinuz"] == 1
        assert kernel_digest.split(":")[1] in {p.name for p in cache.iterdir()}
        bed.run("remove", ["pool-0", "pool-1"])
    finally:
        redirecting.close()
        elsewhere.close()
