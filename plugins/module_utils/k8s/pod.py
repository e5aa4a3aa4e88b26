"""The Pod and config Secret of one Pod-backed instance.

The core of every such Pod is rendered here: the exporter (``jmp run``)
with its config Secret, the CA bundle and the environment its provisioner
adds, the run directory (an emptyDir) its containers share, the class's
scheduling and the restricted security context of each container. The
provisioner of the class (``provisioners.get``) says the rest: the drivers
it lays over the template's, its Pod's containers around the exporter
(``Provisioner.pod_containers``, given ``PodParts``), the restart policy
and whether the exporter serves one lease.

``qemu.jumpstarter.dev`` makes the exporter a native sidecar and QEMU the
main container (provisioners/qemu_pod.py); ``corellium.jumpstarter.dev``
leaves the exporter alone in its Pod, its API token coming only from an
environment variable that refers to the class's Secret.

Images given by ``url`` are fetched and verified by the ``images`` init
container this module renders when a provisioner asks for them
(``PodParts.fetch_images``): ``image_fetch`` run as a script, in the
operator's own image (``IMAGE_FETCH_IMAGE`` unless the operator names
another, ``default_images``) as a non-root user whatever images the
class or set name, into the node's image cache, a hostPath shared by the
instances on the node; the run directory links to the cached files. Only
that container mounts the cache; every other one that reads the images gets
the instance's own files alone, each mounted read-only at its own path
(``digest_mounts``), so whatever image it runs sees no other digest.

The run directory has a ``sizeLimit`` (``run_size_limit``): the kubelet
evicts a Pod that writes more into it.

Pure: no I/O. The ExporterConfig (with the exporter's token) goes only into
the config Secret.
"""

import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants, provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import exporter_config
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import set_overrides
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    DEFAULT_IMAGES,
    EXPORTER_STOPPED_MARKER,
    IMAGE_FETCH_ROLE,
    LEASE_ENDED_MARKER,
    PodParts,
    named_drivers,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    POD_RUN_DIR as RUN_DIR,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)

CONFIG_DIR = "/etc/jumpstarter/exporters"
CA_DIR = "/etc/jumpstarter/ca"
# The node's image cache (keyed by digest) and where the containers see it.
NODE_IMAGE_CACHE = "/var/lib/jumpstarter-virtual/image-cache"
IMAGE_CACHE_DIR = "/var/cache/jumpstarter-images"
# The ``images`` init container, the one container that mounts the node's image
# cache writable: the operator's own choice of image (no class or set image
# role reaches it), run as this non-root user, with only the fetch script.
IMAGE_FETCH_IMAGE = {"image": DEFAULT_IMAGES["exporter"]["image"], "imagePullPolicy": "IfNotPresent"}
DEFAULT_POD_IMAGES = {**DEFAULT_IMAGES, IMAGE_FETCH_ROLE: IMAGE_FETCH_IMAGE}
IMAGE_FETCH_UID = 1001
# The run directory's sizeLimit when neither the class nor the provisioner says.
RUN_DIR_SIZE_LIMIT = 1 << 30
# The group of the users the project's images run as (images/, scripts/images).
POD_FS_GROUP = 1000

_RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def config_secret_name(exporter_name):
    return f"{exporter_name}-config"


def _owned_meta(name, exporter_set, exporter):
    set_name = exporter_set["metadata"]["name"]
    exporter_name = exporter["metadata"]["name"]
    return {
        "name": name,
        "namespace": exporter["metadata"]["namespace"],
        "labels": {
            constants.LABEL_EXPORTER_SET: set_name,
            constants.LABEL_EXPORTER: exporter_name,
            "app.kubernetes.io/name": "jumpstarter-exporter",
            "app.kubernetes.io/managed-by": "exporterset-operator",
        },
        "ownerReferences": [k8s_objects.controller_reference(exporter)],
    }


def driver_overrides(provisioner, drivers, parameters, instance_name=None):
    """What the provisioner lays over the template's drivers (its ``driver_overrides``).

    ``instance_name`` is the instance the drivers reach, as the provisioner
    names it (``Provisioner.instance_name``).
    """
    return provisioners.get(provisioner).driver_overrides(named_drivers(drivers), parameters, instance_name)


def config_secret(exporter_set, exporter, provisioner, parameters, token, tls_ca):
    """The Secret holding the instance's ExporterConfig (and so its token).

    ``tls_ca`` is the controller CA, base64 (``controller_ca``).
    """
    name = exporter["metadata"]["name"]
    drivers = ((exporter_set["spec"].get("template") or {}).get("spec") or {}).get("drivers") or []
    own = provisioners.get(provisioner)
    instance_name = own.instance_name(exporter)
    exits = exporter_config.exits_on_lease_end(exporter_set)
    rendered = exporter_config.render_exporter_config(
        name,
        exporter["metadata"]["namespace"],
        drivers,
        endpoint=(exporter.get("status") or {}).get("endpoint", ""),
        token=token,
        driver_overrides=driver_overrides(provisioner, drivers, parameters, instance_name=instance_name),
        tls_ca=tls_ca,
        exit_on_lease_end=exits,
        # An instance reset in place by a fresh Pod serves one lease whatever
        # the strategy (``serves_one_lease``).
        hooks=exporter_config.lease_end_hooks(RUN_DIR)
        if exits or own.serves_one_lease else None,
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _owned_meta(config_secret_name(name), exporter_set, exporter),
        # JSON is YAML, and the standard library writes it.
        "stringData": {f"{name}.yaml": json.dumps(rendered, indent=2, sort_keys=True)},
    }


# The exporter container's command: ``jmp run`` under a guard. While the
# marker its afterLease hook writes into the run directory (an emptyDir that
# outlives the container) is there, the exporter of this Pod has seen its
# lease end and does not register: ``jmp run`` ends with that lease, and the
# guard waits, as does a container the kubelet starts again (a native
# sidecar always restarts), so the used VM is never offered to a second
# lessee, however late the operator is. The marker goes only with a reset of
# the VM in this Pod (``Provisioner.reset_in_pod``); then ``jmp run`` starts
# again on the fresh VM. Without a reset it stays until the Pod ends. While
# it waits so, with no ``jmp run`` left, it notes that it has stopped
# (``EXPORTER_STOPPED_MARKER``), which a reset waits for.
# Before ``jmp run`` it waits for the sockets the provisioner names
# (``exporter_waits_for``: QEMU's QMP socket), so an exporter that registers
# has a backend to drive: the native sidecar starts before the backend's
# container does. SIGTERM is passed on to ``jmp run``, which unregisters.
_EXPORTER_GUARD = (
    "child=; trap '[ -n \"$child\" ] && kill -TERM $child 2>/dev/null && wait $child; exit 0' TERM INT; "
    "while :; do "
    "if [ -e \"{marker}\" ]; then "
    'echo "the lease of this instance has ended: not serving again until its VM is reset"; '
    "touch \"{stopped}\"; fi; "
    "while [ -e \"{marker}\" ]; do sleep 0.5 & child=$!; wait $child; done; "
    "rm -f \"{stopped}\"; "
    "for socket in {sockets}; do while [ ! -S \"$socket\" ]; do sleep 0.2 & child=$!; wait $child; done; done; "
    '"$@" & child=$!; wait $child; code=$?; child=; '
    "[ -e \"{marker}\" ] || exit $code; "
    "done"
)


def exporter_command(name, waits_for=()):
    """The exporter container's command (``sh -c`` guard, then ``jmp run``);
    ``waits_for`` names the sockets in the run directory to wait for."""
    marker = f"{RUN_DIR}/{LEASE_ENDED_MARKER}"
    stopped = f"{RUN_DIR}/{EXPORTER_STOPPED_MARKER}"
    sockets = " ".join(f'"{RUN_DIR}/{socket}"' for socket in waits_for)
    return ["/bin/sh", "-c", _EXPORTER_GUARD.format(marker=marker, stopped=stopped, sockets=sockets), "exporter",
            "jmp", "run", "--exporter-config", f"{CONFIG_DIR}/{name}.yaml"]


def _container(name, image, extra):
    container = {
        "name": name,
        "image": image.get("image"),
        "imagePullPolicy": image.get("imagePullPolicy", "IfNotPresent"),
        "securityContext": dict(_RESTRICTED),
    }
    container.update(extra)
    return container


def digest_mounts(files):
    """The node cache's files of ``files`` (``provisioners.qemu.argv.runtime_files``' form)
    alone, each mounted read-only at its own path in the cache directory: the
    ``subPath`` of one file, ``sha256/<hex>``, where the run directory's links
    point. One mount per digest; a digest that is not ``sha256:<64 hex>`` gets
    none (the ``images`` container refuses it, so nothing after it starts)."""
    mounts = {}
    for digest in image_fetch.entry_digests(files):
        sub_path = image_fetch.cache_path("", digest)
        mounts[sub_path] = {"name": "image-cache", "mountPath": f"{IMAGE_CACHE_DIR}/{sub_path}",
                            "subPath": sub_path, "readOnly": True}
    return [mounts[sub_path] for sub_path in sorted(mounts)]


def run_size_limit(scheduling, provisioner, parameters, vclass):
    """The run emptyDir's ``sizeLimit``: the class's ``ephemeral-storage``
    limit in ``scheduling.resources`` as written, else what the provisioner
    says its backend writes there (``Provisioner.run_dir_bytes``), else
    ``RUN_DIR_SIZE_LIMIT``."""
    limits = ((scheduling.get("resources") or {}).get("limits") or {})
    if limits.get("ephemeral-storage"):
        return limits["ephemeral-storage"]
    size = provisioners.get(provisioner).run_dir_bytes(parameters, vclass)
    size = RUN_DIR_SIZE_LIMIT if size is None else size
    for suffix, shift in (("Gi", 30), ("Mi", 20)):
        if size % (1 << shift) == 0:
            return f"{size >> shift}{suffix}"
    return str(size)


def both_node_affinities(first, second):
    """One NodeAffinity asking what each of two asks.

    A Node must match a required term of each: the terms are crossed, each
    pair becoming one term with both's expressions and fields. Preferred
    terms are all kept, each with its weight. Other keys: the second's win.
    """
    if not first:
        return second
    if not second:
        return first
    merged = {**first, **second}
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    terms = [((first.get(required) or {}).get("nodeSelectorTerms") or []),
             ((second.get(required) or {}).get("nodeSelectorTerms") or [])]
    if terms[0] and terms[1]:
        crossed = []
        for one in terms[0]:
            for other in terms[1]:
                term = {}
                for key in ("matchExpressions", "matchFields"):
                    values = list(one.get(key) or []) + list(other.get(key) or [])
                    if values:
                        term[key] = values
                crossed.append(term)
        merged[required] = {**first[required], **second[required], "nodeSelectorTerms": crossed}
    elif terms[0]:
        merged[required] = first[required]
    preferred = "preferredDuringSchedulingIgnoredDuringExecution"
    if first.get(preferred) or second.get(preferred):
        merged[preferred] = list(first.get(preferred) or []) + list(second.get(preferred) or [])
    return merged


def instance_pod(exporter_set, vclass, exporter, provisioner, parameters, images, accel=None,
                 default_images=None):
    """The Pod of one instance.

    ``default_images`` (image role -> ImageSpec, ``base.default_images``'
    form) are the operator's: what runs in a role nobody set, and the image
    of the ``images`` init container; a role it leaves out keeps the built-in.
    """
    name = exporter["metadata"]["name"]
    drivers = ((exporter_set["spec"].get("template") or {}).get("spec") or {}).get("drivers") or []
    class_spec = vclass.get("spec") or {}
    scheduling = class_spec.get("scheduling") or {}
    # An ImageSpec is taken whole (JEP-0014 "Image Overrides"); the built-in
    # default only stands in for a role nobody set.
    defaults = {**DEFAULT_POD_IMAGES, **{role: spec for role, spec in (default_images or {}).items()
                                         if role in DEFAULT_POD_IMAGES and spec}}
    fetch_image = defaults.pop(IMAGE_FETCH_ROLE)
    images = {role: (images or {}).get(role) or default for role, default in defaults.items()}
    run_mount = {"name": "run", "mountPath": RUN_DIR}
    exporter_mounts = [run_mount, {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    volumes = [
        {"name": "run", "emptyDir": {"sizeLimit": run_size_limit(scheduling, provisioner, parameters, vclass)}},
        {"name": "config", "secret": {"secretName": config_secret_name(name), "defaultMode": 0o400}},
    ]
    exporter_env = []
    ca_ref = class_spec.get("caBundleConfigMapRef")
    if ca_ref:
        key = ca_ref.get("key") or "ca-bundle.crt"
        volumes.append(
            {"name": "ca-bundle", "configMap": {"name": ca_ref["name"], "items": [{"key": key, "path": key}]}}
        )
        exporter_mounts.append({"name": "ca-bundle", "mountPath": CA_DIR, "readOnly": True})
        exporter_env.append({"name": "SSL_CERT_FILE", "value": f"{CA_DIR}/{key}"})
    own = provisioners.get(provisioner)
    exporter_env.extend(own.exporter_env(class_spec, parameters))
    exporter_container = _container(
        "exporter",
        images["exporter"],
        {
            "command": exporter_command(name, own.exporter_waits_for),
            "volumeMounts": exporter_mounts,
            "env": exporter_env,
        },
    )
    init_containers = []

    def fetch_images(files):
        """The ``images`` init container fetches ``files`` into the node's
        image cache, the one container that mounts it; what reads them gets
        those files alone (``digest_mounts``)."""
        volumes.append({"name": "image-cache", "hostPath": {"path": NODE_IMAGE_CACHE, "type": "DirectoryOrCreate"}})
        cache_mount = {"name": "image-cache", "mountPath": IMAGE_CACHE_DIR}
        fetch_argv = ["python3", "-c", image_fetch.script_source(), "--cache", IMAGE_CACHE_DIR,
                      "--files", json.dumps(files, sort_keys=True),
                      "--max-bytes", str(image_fetch.class_max_bytes(vclass)),
                      "--hosts", json.dumps(sorted(set_overrides.image_hosts(vclass))),
                      "--quota-bytes", str(image_fetch.class_cache_quota(vclass))]
        fetch_container = _container(
            "images",
            fetch_image,
            {
                "command": fetch_argv,
                "volumeMounts": [run_mount, cache_mount],
                # Its last words (url, expected digest) become the Pod's message.
                "terminationMessagePolicy": "FallbackToLogsOnError",
            },
        )
        fetch_container["securityContext"].update(
            {"runAsNonRoot": True, "runAsUser": IMAGE_FETCH_UID, "runAsGroup": IMAGE_FETCH_UID})
        init_containers.append(fetch_container)
        return digest_mounts(files)

    parts = PodParts(
        name=name, drivers=drivers, parameters=parameters, virtual_target_class=vclass, images=images,
        accel=accel, exporter=exporter_container, run_mount=run_mount, resources=scheduling.get("resources"),
        container=_container, fetch_images=fetch_images)
    own_init_containers, containers = own.pod_containers(parts)
    init_containers += own_init_containers

    spec = {
        # A Pod whose backend ends (a QEMU crashed, killed, OOM) is not
        # started again on the used disk when the provisioner says Never: the
        # Pod ends, Failed (or Succeeded), so the set reports the instance's
        # failure and replaces it. An exporter sidecar is still restarted
        # while the Pod runs (restartPolicy Always of its own).
        "restartPolicy": own.pod_restart_policy,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # The images' users (exporter and QEMU) are in this group: the
        # kubelet gives the config Secret's files (mode 0400, root's) and the
        # run directory to it, so the exporter can read its config and both
        # containers share the sockets.
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": POD_FS_GROUP},
        "initContainers": init_containers,
        "containers": containers,
        "volumes": volumes,
    }
    for field in ("nodeSelector", "tolerations", "affinity"):
        if scheduling.get(field):
            spec[field] = scheduling[field]
    if scheduling.get("nodeAffinity"):
        # JEP-0014's spelling: the same as affinity.nodeAffinity, both holding
        # when both are given. The class's objects are not changed.
        spec["affinity"] = {**(spec.get("affinity") or {}), "nodeAffinity": both_node_affinities(
            (scheduling.get("affinity") or {}).get("nodeAffinity"), scheduling["nodeAffinity"])}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _owned_meta(name, exporter_set, exporter), "spec": spec}
