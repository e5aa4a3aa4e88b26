"""Whether a running instance's config Secret was written from the inputs it
would be written from now.

A Pod-backed instance's config Secret holds its ExporterConfig: the token
from the credential Secret, the endpoint from the Exporter's status, the
controller CA and the drivers. Whoever writes it (``exporter_pods``, on
``present`` and ``synced``) notes on it, in ``ANNOTATION_CONFIG_INPUTS``, a
digest of those inputs; the operator computes the same digest from its
caches on every pass (``stale_instances``, asked by ``k8s/observe.py``)
and re-syncs the set only when one differs. The token itself never enters
the digest or the operator's cache: it stands there as the identity and
resourceVersion of the Secret it is read from, which the operator sees in
a cache of Secrets' metadata. A new token, endpoint, CA or driver list
therefore changes the digest; nothing else does.

Pure: no I/O.
"""

import hashlib
import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import controller_ca, credentials
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import lease_safety

ANNOTATION_CONFIG_INPUTS = constants.GROUP + "/config-inputs"
# Digests already computed, by the versions of what they were computed from
# (the operator computes the same ones on every pass of an unchanged pool).
_DIGESTS = {}
_DIGESTS_KEPT = 4096


def credential_version(secret):
    """What stands for the token in the digest: the credential Secret's UID
    and resourceVersion (a rotated token is a new resourceVersion)."""
    meta = (secret or {}).get("metadata") or {}
    return f"{meta.get('uid') or ''}/{meta.get('resourceVersion') or ''}"


def inputs_digest(exporter_set, exporter, provisioner, parameters, credential_secret, tls_ca,
                  parameters_key=None):
    """The digest of the config ``exporter``'s instance gets from these inputs.

    The same arguments as ``k8s_pod.config_secret``, except that the token is
    given as the Secret it comes from (its metadata is enough).
    ``parameters_key``: ``parameters_key(parameters)``, when the caller has it.
    """
    key = _versions_key(exporter_set, exporter, provisioner, parameters_key or parameters_key_of(parameters),
                        credential_secret, tls_ca)
    if key is not None and key in _DIGESTS:
        return _DIGESTS[key]
    token = "credential " + credential_version(credential_secret)
    rendered = k8s_pod.config_secret(exporter_set, exporter, provisioner, parameters, token, tls_ca)
    digest = hashlib.sha256(json.dumps(rendered["stringData"], sort_keys=True).encode()).hexdigest()
    if key is not None:
        if len(_DIGESTS) >= _DIGESTS_KEPT:
            _DIGESTS.clear()
        _DIGESTS[key] = digest
    return digest


def parameters_key_of(parameters):
    """The set's parameters over its class's, as a key (the set's version
    alone does not follow a change of the class)."""
    return hashlib.sha256(json.dumps(parameters, sort_keys=True, default=str).encode()).hexdigest()


def _versions_key(exporter_set, exporter, provisioner, parameters_key, credential_secret, tls_ca):
    """A key that changes with any input, or None when an object has no
    resourceVersion (built by hand: not cached)."""
    versions = [((obj or {}).get("metadata") or {}).get("resourceVersion")
                for obj in (exporter_set, exporter, credential_secret)]
    if not all(versions):
        return None
    uids = [((obj or {}).get("metadata") or {}).get("uid") for obj in (exporter_set, exporter, credential_secret)]
    return (*versions, *uids, provisioner, parameters_key, tls_ca)


def recorded_digest(config_secret):
    return ((config_secret.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_CONFIG_INPUTS)


def controller_tls_ca(virtual_target_class, namespace, configmaps):
    """The controller CA (base64) from a cache of the namespace's ConfigMaps
    (by name), as ``controller_ca.read_controller_ca`` would read it; empty
    when it is unavailable."""
    name, key = controller_ca.configmap_reference(virtual_target_class)
    found = controller_ca.controller_ca(configmaps.get(name), namespace, name, key)
    return found["tls_ca"] if found["available"] else ""


def stale_instances(exporter_set, virtual_target_class, owned, running, leases, parameters, secrets, configmaps):
    """The running instances whose config Secret notes other inputs than now's.

    ``running``: the names of the running instances (``observe.running_exporters``);
    ``secrets``: the namespace's Secrets by name (metadata is enough);
    ``configmaps``: its ConfigMaps by name. Left out, as a re-sync would
    leave them: an instance a lease holds (from either side of ``leases``;
    re-synced once the lease ends), one whose config Secret or credential
    is not its own or is missing (the run that makes its Pod writes it), and
    all of them while the controller CA is unavailable (nothing is written
    without it).
    """
    namespace = exporter_set["metadata"]["namespace"]
    tls_ca = controller_tls_ca(virtual_target_class, namespace, configmaps)
    if not tls_ca or not running:
        return []
    provisioner = (virtual_target_class.get("spec") or {}).get("provisioner")
    view = lease_safety.LeaseView(leases)
    parameters_key = parameters_key_of(parameters)
    stale = []
    wanted = set(running)
    for exporter in owned:
        name = exporter["metadata"]["name"]
        if name not in wanted or view.holders(exporter):
            continue
        uid = exporter["metadata"].get("uid")
        config = secrets.get(k8s_pod.config_secret_name(name))
        if config is None or not k8s_objects.controlled_by(config, uid):
            continue
        if not ((exporter.get("status") or {}).get("credential") or {}).get("name"):
            continue
        credential = secrets.get(credentials.credential_secret_name(exporter))
        if credential is None or not credentials.issued_to(credential, exporter):
            continue
        digest = inputs_digest(exporter_set, exporter, provisioner, parameters, credential, tls_ca,
                               parameters_key=parameters_key)
        if recorded_digest(config) != digest:
            stale.append(name)
    return sorted(stale)
