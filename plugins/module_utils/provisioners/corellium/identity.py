"""Which Corellium instance belongs to which Exporter.

One Corellium project may serve classes in several namespaces, and Exporter
names repeat across namespaces (every set called ``pool`` has a ``pool-0``).
An instance is therefore named after its Exporter *and* a digest of the
Exporter's namespace and UID: a set finds, resets and deletes only instances
whose name it derives from one of its own Exporters, and an instance made for
an earlier Exporter of the same name is never taken for the new one's.

The Exporter name in front is for people reading the project's device list;
the digest alone decides. Names stay within ``MAX_NAME_LENGTH`` characters
whatever the Exporter is called.

Pure: the standard library only (the modules, the provisioner and the tests
share it).
"""

import hashlib

# Hex digits of the digest: 64 bits, so no two Exporters meet by chance, and
# no tenant can pick a UID to meet another's.
DIGEST_LENGTH = 16
# Readable part (the Exporter name, cut) + "-" + digest.
MAX_NAME_LENGTH = 64
_PREFIX_LENGTH = MAX_NAME_LENGTH - DIGEST_LENGTH - 1


def digest(namespace, uid):
    """The stable id of one Exporter: its namespace and UID, hashed."""
    if not namespace or not uid:
        raise ValueError("a Corellium instance name needs the Exporter's namespace and UID")
    text = f"jumpstarter-corellium-instance\0{namespace}\0{uid}"
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LENGTH]


def instance_name(namespace, exporter_name, uid):
    """The Corellium instance name of the Exporter ``namespace/exporter_name`` with ``uid``."""
    prefix = (exporter_name or "")[:_PREFIX_LENGTH].rstrip("-.")
    return f"{prefix}-{digest(namespace, uid)}" if prefix else digest(namespace, uid)


def exporter_instance_name(exporter):
    """``instance_name`` for an Exporter object; ValueError names what it lacks."""
    meta = exporter.get("metadata") or {}
    name = meta.get("name") or "?"
    if not meta.get("namespace") or not meta.get("uid"):
        raise ValueError(f"Exporter {name}: metadata.namespace and metadata.uid are needed "
                         "to name its Corellium instance")
    return instance_name(meta["namespace"], meta["name"], meta["uid"])
