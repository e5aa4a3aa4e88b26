"""Fetch a guest image given by ``url`` and verify its ``digest`` before boot.

One home for both QEMU provisioners: ``baremetal_instances`` imports it on
the lab host, and the ``images`` init container of a ``qemu.jumpstarter.dev``
Pod runs this same file as a script (``python3 -c <this file> ...``). It
therefore uses the standard library only and imports nothing from the
collection.

Images land in a cache keyed by digest (``<cache>/sha256/<hex>``), shared by
every instance on the host or node. A download goes to a temporary name in
the cache directory, is hashed while it is written, and is renamed into place
only when its digest is the expected one, so the cache never holds an
unverified file. An exclusive ``flock`` per digest makes concurrent
instances wait for one download instead of making their own.

``url`` forms:

- ``http://...`` and ``https://...``: the file itself;
- ``oci://registry/repository:tag`` or ``oci://registry/repository@sha256:...``
  (and the same without ``oci://``, the form JEP-0014's examples use): an OCI
  artifact. The manifest is read per the OCI distribution spec and the layer
  whose digest is the expected one is fetched (a manifest of one layer gives
  that layer, whose content is then checked). Registries that ask for a
  bearer token get an anonymous one. ``plainHTTP: true`` on the image talks
  to the registry over plain HTTP; the digest still guards the content.
"""

import argparse
import errno
import fcntl
import hashlib
import inspect
import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

CACHE_DIR_NAME = "image-cache"
DIGEST_ALGORITHM = "sha256"
DEFAULT_TIMEOUT = 60.0
CHUNK = 1 << 20

REASON_DIGEST_MISMATCH = "ImageDigestMismatch"
REASON_UNAVAILABLE = "ImageUnavailable"
REASON_INVALID = "ImageInvalid"
REASONS = frozenset({REASON_DIGEST_MISMATCH, REASON_UNAVAILABLE, REASON_INVALID})
# Retrying does not help: the pool reports ReplicaFailure at the first one.
UNRECOVERABLE_REASONS = frozenset({REASON_DIGEST_MISMATCH, REASON_INVALID})

OCI_MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_OCI_REFERENCE = re.compile(
    r"^(?P<registry>[^/]+)/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?(?:@(?P<digest>[a-z0-9]+:[0-9a-fA-F]+))?$"
)


class ImageError(Exception):
    """An image that cannot be used; ``reason`` is a condition reason."""

    def __init__(self, reason, message, url=None, expected=None, got=None):
        super().__init__(message)
        self.reason = reason
        self.url = url
        self.expected = expected
        self.got = got

    def as_dict(self):
        return {"reason": self.reason, "message": str(self), "url": self.url,
                "expected": self.expected, "got": self.got}


def check_digest(digest, url, field="digest"):
    """The digest as ``sha256:<64 lowercase hex>``, or ImageError naming the field."""
    if not isinstance(digest, str) or not _DIGEST.match(digest.strip().lower()):
        shown = "missing" if not digest else f"{digest!r} is not sha256:<64 hex digits>"
        raise ImageError(REASON_INVALID,
                         f"{field} of {url}: {shown}; an image given by url needs its sha256 digest",
                         url=url, expected=digest)
    return digest.strip().lower()


def cache_path(cache_dir, digest):
    algorithm, hex_digest = digest.split(":", 1)
    return os.path.join(cache_dir, algorithm, hex_digest)


def is_oci(url):
    """True for an OCI reference (``oci://`` or no scheme at all)."""
    return url.startswith("oci://") or "://" not in url


def parse_oci_reference(url):
    """(registry, repository, reference) of an OCI reference."""
    text = url[len("oci://"):] if url.startswith("oci://") else url
    match = _OCI_REFERENCE.match(text)
    if not match:
        raise ImageError(REASON_INVALID, f"{url}: not an OCI reference (registry/repository:tag)",
                         url=url)
    reference = match.group("digest") or match.group("tag") or "latest"
    return match.group("registry"), match.group("repository"), reference


def fetch(url, digest, cache_dir, plain_http=False, timeout=DEFAULT_TIMEOUT):
    """Path of the verified image in the cache; downloads it when it is not there.

    Returns ``(path, downloaded)``. Raises ImageError (digest mismatch,
    unreachable url, invalid reference or digest), naming the url.
    """
    digest = check_digest(digest, url)
    target = cache_path(cache_dir, digest)
    if os.path.isfile(target):
        return target, False
    directory = os.path.dirname(target)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    with open(target + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Another instance may have fetched it while this one waited.
        if os.path.isfile(target):
            return target, False
        _download(url, digest, target, plain_http, timeout)
    return target, True


def _download(url, digest, target, plain_http, timeout):
    descriptor, partial = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.",
                                           suffix=".part", dir=os.path.dirname(target))
    try:
        with os.fdopen(descriptor, "wb") as out:
            if is_oci(url):
                got = _download_oci(url, digest, out, plain_http, timeout)
            else:
                got = _download_http(url, out, timeout)
            out.flush()
            os.fsync(out.fileno())
        if got != digest:
            raise ImageError(REASON_DIGEST_MISMATCH,
                             f"{url}: digest mismatch: expected {digest}, got {got}",
                             url=url, expected=digest, got=got)
        os.chmod(partial, 0o444)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _copy(response, out):
    hasher = hashlib.sha256()
    while True:
        chunk = response.read(CHUNK)
        if not chunk:
            break
        hasher.update(chunk)
        out.write(chunk)
    return f"{DIGEST_ALGORITHM}:{hasher.hexdigest()}"


def _unavailable(url, error):
    if isinstance(error, urllib.error.HTTPError):
        detail = f"HTTP {error.code} {error.reason}"
    elif isinstance(error, urllib.error.URLError):
        detail = str(error.reason)
    else:
        detail = str(error) or type(error).__name__
    return ImageError(REASON_UNAVAILABLE, f"{url}: cannot be fetched: {detail}", url=url)


def _download_http(url, out, timeout):
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout) as response:
            return _copy(response, out)
    except (urllib.error.URLError, OSError, ValueError) as error:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise
        raise _unavailable(url, error) from None


class _Registry:
    """Anonymous pulls per the OCI distribution spec, with bearer tokens when asked."""

    def __init__(self, url, registry, repository, plain_http, timeout):
        self.url = url
        self.base = f"{'http' if plain_http else 'https'}://{registry}/v2/{repository}"
        self.timeout = timeout
        self.token = None

    def open(self, path, accept=None):
        for attempt in range(2):
            headers = {"Accept": ", ".join(accept)} if accept else {}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            request = urllib.request.Request(f"{self.base}/{path}", headers=headers)
            try:
                return urllib.request.urlopen(request, timeout=self.timeout)
            except urllib.error.HTTPError as error:
                challenge = error.headers.get("WWW-Authenticate", "")
                if error.code != 401 or attempt or not challenge.lower().startswith("bearer "):
                    raise
                self.token = self._anonymous_token(challenge)
        raise AssertionError("unreachable")

    def _anonymous_token(self, challenge):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.pop("realm", None)
        if not realm:
            raise ImageError(REASON_UNAVAILABLE, f"{self.url}: registry asks for a token without realm",
                             url=self.url)
        query = urllib.parse.urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
        with urllib.request.urlopen(f"{realm}?{query}" if query else realm,
                                    timeout=self.timeout) as response:
            answer = json.load(response)
        return answer.get("token") or answer.get("access_token")


def _download_oci(url, digest, out, plain_http, timeout):
    registry_host, repository, reference = parse_oci_reference(url)
    registry = _Registry(url, registry_host, repository, plain_http, timeout)
    try:
        with registry.open(f"manifests/{reference}", accept=OCI_MANIFEST_TYPES) as response:
            manifest = json.load(response)
        layers = manifest.get("layers") or []
        layer = next((entry for entry in layers if entry.get("digest") == digest), None)
        if layer is None and len(layers) == 1:
            layer = layers[0]
        if layer is None:
            found = ", ".join(entry.get("digest", "?") for entry in layers) or "none"
            raise ImageError(REASON_DIGEST_MISMATCH,
                             f"{url}: digest mismatch: expected {digest}, got layers {found}",
                             url=url, expected=digest, got=found)
        with registry.open(f"blobs/{layer['digest']}") as response:
            return _copy(response, out)
    except (urllib.error.URLError, OSError, ValueError) as error:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise
        raise _unavailable(url, error) from None


def fetch_all(files, cache_dir, timeout=DEFAULT_TIMEOUT):
    """Fetches ``qemu_argv.runtime_files`` entries and links each ``dest`` to its cache file.

    Returns the names of the images that were downloaded (not found in the cache).
    """
    downloaded = []
    for entry in files:
        path, fresh = fetch(entry["url"], entry.get("digest"), cache_dir,
                            plain_http=bool(entry.get("plain_http")), timeout=timeout)
        if fresh:
            downloaded.append(entry["name"])
        link(path, entry["dest"])
    return downloaded


def link(path, dest):
    """``dest`` becomes a symbolic link to ``path`` (replaced atomically)."""
    if os.path.islink(dest) and os.readlink(dest) == path:
        return
    temporary = f"{dest}.link"
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(path, temporary)
    os.replace(temporary, dest)


def script_source():
    """This file's text, for ``python3 -c`` in a container that lacks the collection."""
    return inspect.getsource(sys.modules[__name__])


def main(argv=None):
    parser = argparse.ArgumentParser(description="Fetch and verify guest images into a cache.")
    parser.add_argument("--cache", required=True, help="cache directory (keyed by digest)")
    parser.add_argument("--files", required=True,
                        help="JSON list of {name, url, digest, dest, plain_http}")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    options = parser.parse_args(argv)
    try:
        downloaded = fetch_all(json.loads(options.files), options.cache, timeout=options.timeout)
    except ImageError as error:
        # Kubernetes keeps the last lines of a failed container as its message.
        print(f"{error.reason}: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"downloaded": downloaded}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
