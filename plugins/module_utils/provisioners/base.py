"""What the core asks of a provisioner: the interface every provisioner fills in.

A provisioner is the code that makes the backend of an Exporter (a Pod, QEMU
on a lab host, a Corellium device). The pool logic (``pool/``) and the API
layer (``k8s/``) never compare provisioner names: they get the provisioner of
a class from the registry (``provisioners.get``) and read its answers here.
A new provisioner is a module of this package with a subclass of
``Provisioner`` and one line in the registry (docs/provisioner-roles.md).

Pure data and small pure functions: nothing here talks to the API, and the
package imports nothing from ``pool/`` (the pool reads it) or ``k8s/``. A
provisioner renders its own parts of what the core writes (its Pod's
containers, its driver overrides, its instances' names) with the pure code
below it (the QEMU library, ``qemu/``) and its own package's
(``corellium/identity.py``).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

# The run directory of an instance's Pod: an emptyDir its containers share
# (the exporter's lease-end marker, a QEMU's sockets and serial log).
POD_RUN_DIR = "/run/jumpstarter"
# Written in the run directory by a Pod's exporter once its lease has ended
# (``k8s/exporter_config.lease_end_hooks``); while it is there, an exporter
# of that Pod does not register (``k8s/pod.py``'s guard). A reset in place
# removes it once the VM is fresh (``Provisioner.reset_in_pod``).
LEASE_ENDED_MARKER = "lease-ended"
# Written there by the exporter's guard while it waits on that marker with
# no ``jmp run`` left (``k8s/pod.py``), removed before it starts one again:
# a reset in place waits for it, so the VM is never reset under an exporter
# still ending its lease.
EXPORTER_STOPPED_MARKER = "exporter-stopped"
# The images the project builds (scripts/images, from images/*/Containerfile)
# and releases (scripts/release): the exporter (jumpstarter 0.9.0 with the
# collection's VirtualQemu driver) and the QEMU runtime, named as the release
# pushes them, IMAGE_REGISTRY/NAME:IMAGE_VERSION (the collection's version).
# An install that mirrors them elsewhere names its own registry (the
# operator's --image-registry, docs/install.md); a class names its own images
# by digest (``images.<role>.image: ...@sha256:...``, docs/security.md).
IMAGE_REGISTRY = "quay.io/jumpstarter-dev/virtual-exporters"
IMAGE_VERSION = "0.1.0"
# Image role -> the name of the released image that fills it.
RELEASED_IMAGES = {"exporter": "exporter", "runtime": "qemu-runtime"}
# The role of the ``images`` init container's image in ``default_images``: an
# operator-level choice (k8s/pod.py), never a class's or a set's image role.
IMAGE_FETCH_ROLE = "images"


def default_images(registry=IMAGE_REGISTRY, overrides=None):
    """Image role -> the built-in ImageSpec of that role under ``registry``,
    ``IMAGE_FETCH_ROLE`` included; ``overrides`` (role -> image reference,
    empty for none) replace single ones. The fetch image is the exporter's
    unless named."""
    registry = (registry or IMAGE_REGISTRY).rstrip("/")
    overrides = overrides or {}
    images = {}
    for role, name in RELEASED_IMAGES.items():
        image = overrides.get(role) or f"{registry}/{name}:{IMAGE_VERSION}"
        images[role] = {"image": image, "imagePullPolicy": "IfNotPresent"}
    fetch = overrides.get(IMAGE_FETCH_ROLE)
    images[IMAGE_FETCH_ROLE] = {**images["exporter"], **({"image": fetch} if fetch else {})}
    return images


# The built-in image of each image role: what stands in for a role no class or
# set sets, when the operator names no registry of its own.
DEFAULT_IMAGES = {role: spec for role, spec in default_images().items() if role in RELEASED_IMAGES}


@dataclass(frozen=True)
class Field:
    """One node of a parameters schema (``pool/parameters.py`` checks values against it).

    ``type`` is one of: string, integer, boolean, object (known
    ``properties``; unknown keys are warned about), map (free-form object),
    list (of ``items``), quantity (Kubernetes quantity), cpu (integer >= 1 or
    a quantity string), duration (Go duration string).
    """

    type: str
    description: str
    required: bool = False
    default: object = None
    enum: tuple = ()
    properties: dict = field(default_factory=dict)
    items: "Field | None" = None
    minimum: float | None = None
    maximum: float | None = None
    format: str | None = None  # absolute-path, hostname, hostname-port, uuid, image-url


@dataclass
class PodParts:
    """What k8s/pod.py has rendered of one instance's Pod, for the
    provisioner's ``pod_containers`` to complete."""

    # The instance's (and its Exporter's) name.
    name: str
    # The set's template drivers, as the set gives them.
    drivers: list
    # The merged parameters (class, then set).
    parameters: dict
    virtual_target_class: dict
    # Image role -> ImageSpec (the built-in one for a role nobody set).
    images: dict
    # The accelerator the node offers, when known (kvm or tcg).
    accel: str | None
    # The exporter container (``jmp run`` with its config and CA mounts).
    exporter: dict
    # The mount of the run directory (``POD_RUN_DIR``) the containers share.
    run_mount: dict
    # The class's ``scheduling.resources``, or None.
    resources: dict | None
    # (name, ImageSpec, more keys) -> a container under the restricted
    # security context every container of the Pod has.
    container: Callable
    # (files) -> the mounts of those files of the node's image cache alone,
    # each read-only: the core fetches ``files`` (``provisioners.qemu.argv.runtime_files``'
    # form) into it first, in an init container of its own choice of image
    # and user that no class or set reaches, the only one mounting the cache.
    fetch_images: Callable


class Provisioner:
    """One provisioner: its parameters, what a set may change of its class, and
    the facts the core needs to plan, apply and render its instances.

    A subclass sets the class attributes it needs; the defaults describe a
    provisioner whose backends are neither Pods nor lab hosts, that the set's
    policy constrains only by its driver types.
    """

    # The ``spec.provisioner`` string of its classes.
    name = ""
    # The role that makes its backends (roles/reconcile/vars/main.yml maps the
    # name to it for the reconcile playbook).
    role = ""
    # The schema of the merged ``parameters`` (a ``Field`` of type object).
    schema = None
    # Functions ``(parameters, errors)`` that check several fields together;
    # each appends messages naming the field and skips values of a wrong type.
    cross_field_rules = ()

    # --- Backends ---------------------------------------------------------
    # Its instance is a Pod with a config Secret, both owned by the Exporter.
    has_pods = False
    # The Pod is all of the instance: the applier deletes it with the
    # Exporter; otherwise the role removes the backend before the Exporter goes.
    removed_with_exporter = False
    # An InPlaceReuse recycle starts a fresh Pod, so it makes a backend.
    resets_with_fresh_pod = False
    # Its backends run on the class's lab hosts (``lab_view``).
    runs_on_lab_hosts = False
    # The playbook that probes its hosts when their last report is old.
    probe_playbook = None

    # --- Rendering (k8s/pod.py asks these, and ``pod_containers``) --------
    # The Pod's restartPolicy: "Never" for a Pod that ends with its backend
    # (the set reports the instance's failure and replaces it).
    pod_restart_policy = "Always"
    # Sockets in the run directory (``POD_RUN_DIR``) that the backend's
    # container makes and the exporter waits for before it registers.
    exporter_waits_for = ()
    # Its exporter serves one lease whatever the set's recycle strategy (an
    # in-place reset is a fresh Pod or ``reset_in_pod``): its config ends it
    # with the lease.
    serves_one_lease = False
    # ``(container, argv)`` that resets the instance in its running Pod (run
    # there through the API's exec); exit code 0 when it did. None: a reset
    # in place is a fresh Pod.
    reset_in_pod = None

    # --- What a set may change of its class (pool/set_overrides.py) -------
    # Parameter paths that receive or direct a class credential: {path: why}.
    credential_parameters = {}
    # Image roles whose container receives a class credential: {role: why}.
    credential_images = {}
    # Image roles a set may choose only among the class's own and those the
    # class's annotation lists: {role: why}.
    class_images = {}
    # Why the lab hosts are the class's (each gets its SSH key), or None.
    credential_hosts = None
    # Parameter paths naming a file, program or directory where the instance
    # runs: set by the class only. {path: why}
    path_parameters = {}
    # The driver types a set may use when the class names none.
    default_driver_types = ()
    # What to write instead of a driver type that no driver package provides
    # (one the JEP's examples name, say): {type: hint}, said at the end of
    # the refusal of that type.
    driver_type_hints = {}
    # The parameters a set may not raise above the class's value or the
    # ceiling the class names: {parameter path: (what a missing value means,
    # the schema's default; None: nothing, so any value raises it),
    # the class annotation's key that names the ceiling}. Empty: no ceilings.
    resource_ceilings = {}
    # The class's own value is the ceiling unless it names a higher one.
    ceiling_by_default = False

    # --- Checks and failures the core reads (pool/) ----------------------
    # The value formats its schema uses beyond the core's (``Field.format``):
    # {format: check}, a check giving what is wrong with a string, or None.
    value_formats = {}
    # The reasons an instance of its fails with that no retry mends: the set
    # reports ReplicaFailure at the first one (the registry's union).
    unrecoverable_reasons = frozenset()

    def lab_view(self, exporter_set, virtual_target_class, owned, exporters, now, parameters=None):
        """What the set's lab hosts last reported of its instances, their
        slots and placement (``qemu_baremetal/pool.py``'s ``LabView``), from
        the set's ``owned`` Exporters and the namespace's ``exporters``; the
        set over its class's ``parameters`` when resolved already. None for a
        provisioner whose backends the API shows."""
        return None

    def exporter_env(self, class_spec, parameters):
        """Environment of the exporter container beyond the CA bundle's."""
        return []

    def run_dir_bytes(self, parameters, virtual_target_class):
        """The most its backend writes into the Pod's run directory, in bytes
        (the emptyDir's ``sizeLimit``, k8s/pod.py), or None for the default."""
        return None

    def instance_name(self, exporter):
        """The name of the instance ``exporter`` stands for, as its drivers
        reach it (``driver_overrides``' ``instance_name``): the Exporter's."""
        return exporter["metadata"]["name"]

    def driver_overrides(self, drivers, parameters, instance_name):
        """What the provisioner lays over the named template drivers ``drivers``
        (``named_drivers``) in the config Secret of its Pod: ``{entry name:
        override}`` (``k8s/exporter_config.render_exporter_config`` says how
        an override is laid)."""
        return {}

    def pod_containers(self, pod):
        """``(init containers, containers)`` of the instance's Pod, from
        ``pod`` (``PodParts``). The default: the exporter is the Pod's one
        container, with the class's resources."""
        if pod.resources:
            pod.exporter["resources"] = pod.resources
        return [], [pod.exporter]

    def allowed_driver_violations(self, drivers):
        """``{index: refusal}`` of the template's entries that only the rest
        of the template explains (a driver that needs another one), each a
        message naming the field. ``drivers`` is the template's list as the
        set gives it (not yet named). ``pool/set_overrides`` asks once per
        template (so a rule over the whole list is read once, not once per
        entry), keeps the refusals of entries whose type the class allows and
        says nothing else of such an entry's type."""
        return {}

    def template_parameters(self, drivers):
        """What the set's template drivers (as the set gives them) say of the
        parameters: ``(parameters, warnings, errors)``. ``pool/set_overrides``
        lays the parameters under the set's own, under the same policy; each
        message names the field. The default: nothing."""
        return {}, [], []

    def template_violations(self, drivers):
        """What the provisioner refuses in the set's template drivers (not yet
        named), as messages naming the field; ``pool/set_overrides`` adds
        them to the set's violations."""
        return []


def named_drivers(drivers):
    """The template's drivers, each with a ``name``: the one place names are derived.

    JEP-0014's examples list drivers by ``type`` alone. An entry without a
    name (or with a null one) gets the last dot-separated segment of its
    ``type`` (or ``ref``), lowercased: ``...driver.QemuPower`` is exported as
    ``qemupower``. Names the template gives are kept and reserved first; a
    derived name taken already gets ``_2``, ``_3``... in the list's order.
    So the same list always yields the same names. Entries that are not
    mappings are returned as they are (``k8s/exporter_config``'s
    ``render_exporter_config`` refuses them by index). The input is not
    changed. A provisioner's ``driver_overrides`` is keyed by these names.
    """
    drivers = list(drivers or [])
    taken = {driver["name"] for driver in drivers
             if isinstance(driver, dict) and isinstance(driver.get("name"), str)}
    # The last suffix tried per base: the next entry of that base goes on
    # from there, so n entries of one type cost n tries, not n*n/2.
    tried = {}
    named = []
    for driver in drivers:
        if not isinstance(driver, dict) or driver.get("name") is not None:
            named.append(driver)
            continue
        source = driver.get("type") or driver.get("ref")
        base = (source.rsplit(".", 1)[-1].lower() if isinstance(source, str) else "") or "driver"
        suffix = tried.get(base, 1)
        name = base if suffix == 1 else f"{base}_{suffix}"
        while name in taken:
            suffix += 1
            name = f"{base}_{suffix}"
        tried[base] = suffix
        taken.add(name)
        named.append({**driver, "name": name})
    return named
