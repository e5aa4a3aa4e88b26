"""Fetch a guest image given by ``url`` and verify its ``digest`` before boot.

One home for both QEMU provisioners: ``baremetal_instances`` imports it on
the lab host, and the ``images`` init container of a ``qemu.jumpstarter.dev``
Pod runs this same file as a script (``python3 -c <this file> ...``). It
therefore uses the standard library only and imports nothing from the
collection at module level (``class_max_bytes``, which only the operator
calls, reads a quantity with the top-level ``quantity``).

Images land in a cache keyed by digest (``<cache>/sha256/<hex>``), shared by
every instance on the host or node. A download goes to a temporary name in
the cache directory, is hashed while it is written, and is renamed into place
only when its digest is the expected one, so the cache never holds an
unverified file. An exclusive ``flock`` per digest makes concurrent
instances wait for one download instead of making their own. A cache hit is
hashed again on every use: a cached file that is not a regular file or whose
content no longer has its digest is removed and fetched afresh.
``prune_cache`` keeps the cache within a quota, removing the least recently
used digests no instance is fetching or starting with (``mark_used``).

A url comes from a tenant (an ExporterSet may set it), so only these schemes
are fetched, and a redirect may only lead to ``http`` or ``https`` on the
url's own host or one of ``hosts`` (the class's image hosts,
``set_overrides.image_hosts``: what the url itself could have named); a
registry's token ``realm`` must be ``https`` on the registry's own host. ``check_url`` is the rule,
used by parameter validation (the set is refused, naming the field) and again
here before any request. A download stops, and its partial file is removed,
once it passes ``max_bytes`` (``DEFAULT_MAX_BYTES``, or the class's
``ANNOTATION_MAX_SIZE``).

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
import stat
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

CACHE_DIR_NAME = "image-cache"
DIGEST_ALGORITHM = "sha256"
DEFAULT_TIMEOUT = 60.0
CHUNK = 1 << 20
# The largest image fetched unless the class says otherwise: a disk image of
# a few GiB fits, a download that would fill the host's or node's disk does not.
DEFAULT_MAX_BYTES = 16 << 30
# A VirtualTargetClass annotation (admins own classes; a set cannot write it):
# the largest image fetched for the class, a quantity such as 40Gi.
ANNOTATION_MAX_SIZE = "virtualtarget.jumpstarter.dev/image-max-size"
URL_SCHEMES = ("http", "https", "oci")
REDIRECT_SCHEMES = ("http", "https")
REALM_SCHEMES = ("https",)

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
    """An image that cannot be used; ``reason`` is a condition reason.

    The message reaches the set's status, so it says nothing of what the url
    answered (status code, size, content digest) beyond what the tenant gave:
    a url may name any address the node or host reaches. ``got`` and ``detail``
    say it, for the host's instance directory and the admin's logs only.
    """

    def __init__(self, reason, message, url=None, expected=None, got=None, detail=None):
        super().__init__(message)
        self.reason = reason
        self.url = url
        self.expected = expected
        self.got = got
        self.detail = detail

    def as_dict(self):
        return {"reason": self.reason, "message": str(self), "url": self.url,
                "expected": self.expected, "got": self.got, "detail": self.detail}


def check_digest(digest, url, field="digest"):
    """The digest as ``sha256:<64 lowercase hex>``, or ImageError naming the field."""
    if not isinstance(digest, str) or not _DIGEST.match(digest.strip().lower()):
        shown = "missing" if not digest else f"{digest!r} is not sha256:<64 hex digits>"
        raise ImageError(REASON_INVALID,
                         f"{field} of {url}: {shown}; an image given by url needs its sha256 digest",
                         url=url, expected=digest)
    return digest.strip().lower()


def url_problem(url):
    """What is wrong with an image url, or None: only ``http``, ``https`` and
    ``oci`` (or an OCI reference without scheme) are fetched."""
    if not isinstance(url, str) or not url.strip():
        return "an image url must be a non-empty string"
    scheme, sep, rest = url.partition("://")
    if not sep:
        if ":" in url.split("/", 1)[0] and not re.match(r"^[^/:]+:\d+/", url):
            # "file:/etc/passwd", "data:..." and the like: a scheme without //.
            return (f"{url!r} is not an http, https or oci url "
                    f"(allowed: {', '.join(URL_SCHEMES)}, or registry/repository:tag)")
        return None
    if scheme.lower() not in URL_SCHEMES:
        return (f"scheme {scheme!r} of {url!r} is not allowed "
                f"(allowed: {', '.join(URL_SCHEMES)}, or registry/repository:tag)")
    if not rest or rest.startswith("/"):
        return f"{url!r} names no host"
    return None


def check_url(url, field="url"):
    """The url, or ImageError (``ImageInvalid``) naming the field when its scheme is not allowed."""
    problem = url_problem(url)
    if problem:
        raise ImageError(REASON_INVALID, f"{field}: {problem}", url=url)
    return url


def class_max_bytes(virtual_target_class):
    """The largest image fetched for a class: its ``ANNOTATION_MAX_SIZE`` or the default.

    Raises ValueError naming the annotation when its value is not a positive quantity.
    """
    return class_bytes(virtual_target_class, ANNOTATION_MAX_SIZE, DEFAULT_MAX_BYTES)


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


def fetch(url, digest, cache_dir, plain_http=False, timeout=DEFAULT_TIMEOUT, field="url",
          max_bytes=DEFAULT_MAX_BYTES, hosts=()):
    """Path of the verified image in the cache; downloads it when it is not there.

    A redirect is followed only to the url's own host or one of ``hosts``
    (lowercased hosts, no port: ``set_overrides.image_hosts`` of the class).

    Returns ``(path, downloaded)``. Raises ImageError (digest mismatch,
    unreachable url, invalid url, reference or digest, too large), naming the
    url. A cached file is hashed again first; one that does not match (or is
    not a regular file) is removed and fetched again.
    """
    check_url(url, field)
    digest = check_digest(digest, url)
    target = cache_path(cache_dir, digest)
    if _cached(target, digest):
        return target, False
    directory = os.path.dirname(target)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        lock = open(target + ".lock", "a")
    except PermissionError as error:
        # The node's cache must belong to the fetch container's user (docs/images.md).
        raise ImageError(REASON_UNAVAILABLE, f"{url}: the image cache {cache_dir} is not writable "
                                             f"by uid {os.getuid()}: {error.strerror}", url=url) from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Another instance may have fetched it while this one waited.
        if _cached(target, digest):
            return target, False
        if os.path.lexists(target):
            os.unlink(target)
        _download(url, digest, target, plain_http, timeout, max_bytes, hosts)
    return target, True


def file_digest(path):
    """``sha256:<hex>`` of a regular file, read without following a symbolic link;
    None when ``path`` is missing or not a regular file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        hasher = hashlib.sha256()
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            hasher.update(chunk)
    return f"{DIGEST_ALGORITHM}:{hasher.hexdigest()}"


# A qcow2 image is data only without a backing file and without an external
# data file: QEMU opens either by the path written in the header.
QCOW2_MAGIC = b"QFI\xfb"
QCOW2_VERSIONS = (2, 3)
QCOW2_V2_HEADER_LENGTH = 72
_QCOW2_INCOMPATIBLE_DATA_FILE = 1 << 2
# dirty, corrupt, external data file, compression type, extended L2 entries
_QCOW2_INCOMPATIBLE_KNOWN = (1 << 5) - 1
_QCOW2_EXTENSION_END = 0
_QCOW2_EXTENSION_DATA_FILE = 0x44415441
# Header extensions live in the first cluster; at most this much is read.
_QCOW2_HEADER_READ = 64 << 10
FETCHED_FORMATS = ("qcow2", "raw")


def standalone_problem(path, image_format):
    """Why QEMU would read more than ``path`` when it opens it as ``image_format``, or None.

    None (raw, or no format: a kernel, initrd or firmware) is data whatever it
    holds. A qcow2 image must be one, with no backing file and no external
    data file. Any other format is refused.
    """
    if image_format in (None, "raw"):
        return None
    if image_format not in FETCHED_FORMATS:
        return f"format {image_format!r} is not used for a fetched image (only {', '.join(FETCHED_FORMATS)})"
    with open(path, "rb") as handle:
        header = handle.read(_QCOW2_HEADER_READ)
    if len(header) < QCOW2_V2_HEADER_LENGTH or header[:4] != QCOW2_MAGIC:
        return "not a qcow2 image"
    version = int.from_bytes(header[4:8], "big")
    if version not in QCOW2_VERSIONS:
        return f"qcow2 version {version} is not supported (only {', '.join(map(str, QCOW2_VERSIONS))})"
    if int.from_bytes(header[8:16], "big") or int.from_bytes(header[16:20], "big"):
        return "the qcow2 image names a backing file; an image must be standalone"
    header_length = QCOW2_V2_HEADER_LENGTH
    if version == 3:
        if len(header) < 104:
            return "the qcow2 header is truncated"
        incompatible = int.from_bytes(header[72:80], "big")
        if incompatible & _QCOW2_INCOMPATIBLE_DATA_FILE:
            return "the qcow2 image uses an external data file; an image must be standalone"
        if incompatible & ~_QCOW2_INCOMPATIBLE_KNOWN:
            return f"the qcow2 image has unknown incompatible features ({incompatible:#x})"
        header_length = int.from_bytes(header[100:104], "big")
    offset = header_length
    while offset + 8 <= len(header):
        kind = int.from_bytes(header[offset:offset + 4], "big")
        length = int.from_bytes(header[offset + 4:offset + 8], "big")
        if kind == _QCOW2_EXTENSION_END:
            return None
        if kind == _QCOW2_EXTENSION_DATA_FILE:
            return "the qcow2 image names an external data file; an image must be standalone"
        offset += 8 + (length + 7) // 8 * 8
    return "the qcow2 header extensions do not end within the first cluster"


def check_standalone(path, image_format, url, field="url"):
    """ImageError (``ImageInvalid``) naming the field when ``standalone_problem`` finds one."""
    problem = standalone_problem(path, image_format)
    if problem:
        raise ImageError(REASON_INVALID, f"{field} {url}: {problem}", url=url)


def _cached(target, digest):
    """True when the cache holds ``digest`` as a regular file whose content still has it."""
    return os.path.lexists(target) and file_digest(target) == digest


def _download(url, digest, target, plain_http, timeout, max_bytes=DEFAULT_MAX_BYTES, hosts=()):
    descriptor, partial = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.",
                                           suffix=".part", dir=os.path.dirname(target))
    try:
        with os.fdopen(descriptor, "wb") as out:
            if is_oci(url):
                got = _download_oci(url, digest, out, plain_http, timeout, max_bytes, hosts)
            else:
                got = _download_http(url, out, timeout, max_bytes, hosts)
            out.flush()
            os.fsync(out.fileno())
        if got != digest:
            raise ImageError(REASON_DIGEST_MISMATCH,
                             f"{url}: digest mismatch: its content does not have the digest {digest}",
                             url=url, expected=digest, got=got, detail=f"got {got}")
        os.chmod(partial, 0o444)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _copy(response, out, url, max_bytes):
    """Hashes and writes the response; ImageError as soon as it passes ``max_bytes``."""
    length = response.headers.get("Content-Length") if response.headers else None
    if length and length.isdigit() and int(length) > max_bytes:
        raise _too_large(url, max_bytes, f"it announces {int(length)} bytes")
    hasher = hashlib.sha256()
    written = 0
    while True:
        chunk = response.read(min(CHUNK, max_bytes + 1 - written))
        if not chunk:
            break
        written += len(chunk)
        if written > max_bytes:
            raise _too_large(url, max_bytes, "the download went past it")
        hasher.update(chunk)
        out.write(chunk)
    return f"{DIGEST_ALGORITHM}:{hasher.hexdigest()}"


def _too_large(url, max_bytes, how):
    return ImageError(REASON_INVALID, f"{url}: larger than the image size limit of {max_bytes} bytes; "
                                      f"the class sets it ({ANNOTATION_MAX_SIZE})", url=url, detail=how)


# An authority that is one host and nothing else (set_overrides' own rule for
# the hosts an image url names): no user part, no percent sign, no backslash.
_AUTHORITY = re.compile(r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
                        r"(?::(?P<port>[0-9]{1,5}))?$")


def url_host(url):
    """The lowercased host an image url names (http, https, oci:// or a
    scheme-less OCI reference), or None when it names none or its authority
    is more than a host and a port: ``set_overrides.url_host``, which the
    fetch cannot import (tests check that the two agree)."""
    if not isinstance(url, str):
        return None
    _, sep, rest = url.strip().partition("://")
    authority, slash, _ = (rest if sep else url.strip()).partition("/")
    match = _AUTHORITY.match(authority) if sep or slash else None
    return match.group("host").lower() if match else None


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows redirects to ``http`` and ``https`` only (urllib would also
    follow ``ftp``), and only to a host in ``hosts``, before any connection
    to the host redirected to."""

    def __init__(self, url, hosts):
        super().__init__()
        self.url = url
        self.hosts = hosts

    def http_error_302(self, req, fp, code, msg, headers):
        newurl = urllib.parse.urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in REDIRECT_SCHEMES:
            fp.close()
            raise ImageError(REASON_INVALID, f"{self.url}: redirected to {newurl!r}, whose scheme "
                                             f"is not allowed (allowed: {', '.join(REDIRECT_SCHEMES)})",
                             url=self.url)
        if url_host(newurl) not in self.hosts:
            fp.close()
            # Where it pointed is the server's answer: the admin's logs only.
            raise ImageError(REASON_INVALID, f"{self.url}: redirected to a host it may not name "
                                             f"(its own and the class's image hosts: "
                                             f"{', '.join(sorted(self.hosts))})",
                             url=self.url, detail=f"redirected to {newurl}")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _opener(url, hosts=()):
    """Only http and https handlers (no file:, ftp: or data: opener exists to be
    reached), following redirects to the hosts ``url`` may reach."""
    allowed = frozenset({url_host(url), *(str(host).lower() for host in hosts or ())} - {None})
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.HTTPHandler(),
                    urllib.request.HTTPSHandler(), urllib.request.HTTPDefaultErrorHandler(),
                    _RedirectHandler(url, allowed), urllib.request.HTTPErrorProcessor(),
                    urllib.request.UnknownHandler()):
        opener.add_handler(handler)
    return opener


def _unavailable(url, error):
    if isinstance(error, urllib.error.HTTPError):
        detail = f"HTTP {error.code} {error.reason}"
    elif isinstance(error, urllib.error.URLError):
        detail = str(error.reason)
    else:
        detail = str(error) or type(error).__name__
    return ImageError(REASON_UNAVAILABLE, f"{url}: cannot be fetched", url=url, detail=detail)


def _download_http(url, out, timeout, max_bytes=DEFAULT_MAX_BYTES, hosts=()):
    try:
        with _opener(url, hosts).open(urllib.request.Request(url), timeout=timeout) as response:
            return _copy(response, out, url, max_bytes)
    except (urllib.error.URLError, OSError, ValueError) as error:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise
        raise _unavailable(url, error) from None


class _Registry:
    """Anonymous pulls per the OCI distribution spec, with bearer tokens when asked."""

    def __init__(self, url, registry, repository, plain_http, timeout, hosts=()):
        self.url = url
        # A registry may redirect a blob to its storage: a host the class lists.
        self.opener = _opener(url, hosts)
        self.base = f"{'http' if plain_http else 'https'}://{registry}/v2/{repository}"
        self.hostname = urllib.parse.urlsplit(self.base).hostname
        self.timeout = timeout
        self.token = None

    def open(self, path, accept=None):
        for attempt in range(2):
            headers = {"Accept": ", ".join(accept)} if accept else {}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            request = urllib.request.Request(f"{self.base}/{path}", headers=headers)
            try:
                return self.opener.open(request, timeout=self.timeout)
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
        parts = urllib.parse.urlsplit(realm)
        if parts.scheme.lower() not in REALM_SCHEMES or not parts.netloc:
            # The registry is the tenant's choice; a file: or http: realm would
            # read a local file or send the request in the clear.
            raise ImageError(REASON_INVALID, f"{self.url}: the registry's token realm {realm!r} "
                                             "is not an https url", url=self.url)
        if "@" in parts.netloc:
            # What stands before the "@" is no part of the host urllib dials,
            # and http.client then fails on it: neither is the registry's.
            raise ImageError(REASON_INVALID, f"{self.url}: the registry's token realm {realm!r} "
                                             "has a user part", url=self.url)
        if parts.hostname != self.hostname:
            # Nor may it send the request to any other address the node or host reaches.
            raise ImageError(REASON_INVALID, f"{self.url}: the registry's token realm {realm!r} "
                                             f"is not on the registry's host {self.hostname}", url=self.url)
        query = urllib.parse.urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
        with self.opener.open(urllib.request.Request(f"{realm}?{query}" if query else realm),
                              timeout=self.timeout) as response:
            answer = json.loads(response.read(1 << 20))
        return answer.get("token") or answer.get("access_token")


def _download_oci(url, digest, out, plain_http, timeout, max_bytes=DEFAULT_MAX_BYTES, hosts=()):
    registry_host, repository, reference = parse_oci_reference(url)
    registry = _Registry(url, registry_host, repository, plain_http, timeout, hosts)
    try:
        with registry.open(f"manifests/{reference}", accept=OCI_MANIFEST_TYPES) as response:
            manifest = json.loads(response.read(1 << 20))
        layers = manifest.get("layers") or []
        layer = next((entry for entry in layers if entry.get("digest") == digest), None)
        if layer is None and len(layers) == 1:
            layer = layers[0]
        if layer is None:
            found = ", ".join(entry.get("digest", "?") for entry in layers) or "none"
            raise ImageError(REASON_DIGEST_MISMATCH,
                             f"{url}: digest mismatch: no layer of its manifest has the digest {digest}",
                             url=url, expected=digest, got=found, detail=f"layers {found}")
        with registry.open(f"blobs/{layer['digest']}") as response:
            return _copy(response, out, url, max_bytes)
    except (urllib.error.URLError, OSError, ValueError) as error:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise
        raise _unavailable(url, error) from None


def fetch_all(files, cache_dir, timeout=DEFAULT_TIMEOUT, max_bytes=DEFAULT_MAX_BYTES, hosts=()):
    """Fetches ``qemu_argv.runtime_files`` entries and links each ``dest`` to its cache file.

    ``hosts`` are the class's image hosts, where a redirect may lead (``fetch``).

    An entry's ``format`` (the disk's) is checked with ``check_standalone`` on
    every use, before it is linked: a cache hit too.

    Returns the names of the images that were downloaded (not found in the cache,
    or found altered there).
    """
    downloaded = []
    for entry in files:
        path, fresh = fetch(entry["url"], entry.get("digest"), cache_dir,
                            plain_http=bool(entry.get("plain_http")), timeout=timeout,
                            field=f"parameters.{entry['name']}.url", max_bytes=max_bytes,
                            hosts=hosts)
        check_standalone(path, entry.get("format"), entry["url"],
                         field=f"parameters.{entry['name']}.url")
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
                        help="JSON list of {name, url, digest, dest, plain_http, format}")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                        help="largest image fetched; a larger download is stopped and removed")
    parser.add_argument("--hosts", default="[]",
                        help="JSON list of the class's image hosts, where a redirect may lead "
                             "besides the url's own host")
    parser.add_argument("--quota-bytes", type=int, default=DEFAULT_CACHE_QUOTA_BYTES,
                        help="most the cache holds; past it, unused digests go, least recently used first")
    options = parser.parse_args(argv)
    files = json.loads(options.files)
    own = entry_digests(files)
    mark_used(options.cache, own)
    try:
        downloaded = fetch_all(files, options.cache, timeout=options.timeout,
                               max_bytes=options.max_bytes, hosts=json.loads(options.hosts))
    except ImageError as error:
        # Kubernetes keeps the last lines of a failed container as its message.
        print(f"{error.reason}: {error}", file=sys.stderr)
        return 1
    result = {"downloaded": downloaded}
    pruned = prune_cache(options.cache, options.quota_bytes, keep=own)
    if pruned:
        result["pruned"] = pruned
    print(json.dumps(result))
    return 0


# -- keeping the cache within its quota ---------------------------------------

# A VirtualTargetClass annotation: how much the image cache of a node may hold
# once one of the class's Pods has fetched its images (a quantity such as
# 100Gi); past it the least recently used digests no instance is fetching or
# starting with are removed.
ANNOTATION_CACHE_QUOTA = "virtualtarget.jumpstarter.dev/image-cache-quota"
DEFAULT_CACHE_QUOTA_BYTES = 64 << 30
# A digest used this recently is kept whatever the quota: an instance's
# containers get its files some time after its check (the kubelet mounts them
# as each container starts, and an image pull may come first).
PRUNE_MIN_IDLE_SECONDS = 3600
_CACHE_ENTRY = re.compile(r"^(?P<hex>[0-9a-f]{64})$")
# What ``_download`` writes before the rename, left behind by a fetch that was killed.
_PARTIAL_ENTRY = re.compile(r"^\.(?P<hex>[0-9a-f]{64})\..*\.part$")


def class_bytes(virtual_target_class, annotation, default):
    """A size the class's ``annotation`` names, in bytes, or ``default`` without it.

    Raises ValueError naming the annotation when its value is not a positive quantity.
    """
    annotations = (((virtual_target_class or {}).get("metadata") or {}).get("annotations") or {})
    text = annotations.get(annotation)
    if text is None or text == "":
        return default
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import (
        parse_quantity,
    )
    try:
        value = int(parse_quantity(text))
    except (ValueError, TypeError):
        value = 0
    if value <= 0:
        raise ValueError(f"VirtualTargetClass annotation {annotation}: {text!r} "
                         "is not a positive quantity such as 40Gi")
    return value


def class_cache_quota(virtual_target_class):
    """The image cache's quota for a class's Pods: its ``ANNOTATION_CACHE_QUOTA`` or the default."""
    return class_bytes(virtual_target_class, ANNOTATION_CACHE_QUOTA, DEFAULT_CACHE_QUOTA_BYTES)


def entry_digests(files):
    """The valid digests of ``runtime_files`` entries, each once (``fetch`` refuses the others)."""
    digests = []
    for entry in files:
        try:
            digest = check_digest(entry.get("digest"), entry.get("url"))
        except ImageError:
            continue
        if digest not in digests:
            digests.append(digest)
    return digests


def linked_digests(instances_dir, cache_dir, names):
    """The digests the instance directories under ``instances_dir`` link to.

    A lab-host instance reads its images through links at ``names`` of its
    directory (``qemu_argv.FETCHED_IMAGE_NAMES``) into ``cache_dir``; only
    links there naming a cache entry count, so an instance can keep at most
    ``len(names)`` digests. Directories that cannot be read are skipped.
    """
    directory = os.path.normpath(os.path.join(cache_dir, DIGEST_ALGORITHM))
    digests = set()
    try:
        instances = os.listdir(instances_dir)
    except OSError:
        return digests
    for instance in instances:
        for name in names:
            try:
                target = os.readlink(os.path.join(instances_dir, instance, name))
            except OSError:
                continue
            match = _CACHE_ENTRY.match(os.path.basename(target))
            if match and os.path.normpath(os.path.dirname(target)) == directory:
                digests.add(f"{DIGEST_ALGORITHM}:{match.group('hex')}")
    return digests


def mark_used(cache_dir, digests, now=None):
    """Notes each cached digest of ``digests`` as used now (its file's mtime).

    Done under a shared lock of the digest, before the digest is checked: a
    prune that has not removed it by then finds it used and keeps it. A digest
    not in the cache is left out (its fetch downloads it).
    """
    for digest in digests:
        target = cache_path(cache_dir, digest)
        try:
            with open(target + ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_SH)
                if os.path.isfile(target) and not os.path.islink(target):
                    os.utime(target, None if now is None else (now, now))
        except OSError:
            continue


def prune_cache(cache_dir, quota_bytes, keep=(), min_idle_seconds=PRUNE_MIN_IDLE_SECONDS, now=None):
    """Removes unused files of the cache, least recently used first, until it holds ``quota_bytes`` at most.

    Returns the names removed (``sha256/<hex>``, or a partial download's name),
    in that order. Kept whatever the quota: the digests in ``keep`` (the
    caller's own), any used (``mark_used``) or downloaded in the last
    ``min_idle_seconds``, and any whose lock is held (a download or a use
    under way). A running instance does not need its files' names: a Pod's
    containers mount the files themselves (``k8s/pod.py``); on a lab host,
    pass the digests its instances link to in ``keep``. Nothing here fails the
    caller: a file that cannot be removed is left.
    """
    now = time.time() if now is None else now
    directory = os.path.join(cache_dir, DIGEST_ALGORITHM)
    kept = {digest.split(":", 1)[1] for digest in keep}
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    entries = []
    for name in names:
        match = _CACHE_ENTRY.match(name) or _PARTIAL_ENTRY.match(name)
        if not match:
            continue
        try:
            info = os.lstat(os.path.join(directory, name))
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            continue
        entries.append((info.st_mtime_ns, name, match.group("hex"), info.st_size))
    total = sum(size for _, _, _, size in entries)
    removed = []
    for mtime_ns, name, hex_digest, size in sorted(entries):
        if total <= quota_bytes:
            break
        if (name == hex_digest and hex_digest in kept) or now - mtime_ns / 1e9 < min_idle_seconds:
            continue
        if _remove_unused(directory, name, hex_digest, mtime_ns):
            total -= size
            removed.append(f"{DIGEST_ALGORITHM}/{name}")
    return removed


def _remove_unused(directory, name, hex_digest, mtime_ns):
    """Removes ``name`` unless its digest's lock is held or it was used since it was listed."""
    try:
        lock = open(os.path.join(directory, hex_digest + ".lock"), "a")
    except OSError:
        return False
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.lstat(os.path.join(directory, name)).st_mtime_ns != mtime_ns:
                return False
            os.unlink(os.path.join(directory, name))
        except OSError:
            return False
    return True


if __name__ == "__main__":
    sys.exit(main())
