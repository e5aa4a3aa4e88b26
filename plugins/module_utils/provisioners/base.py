"""What the core asks of a provisioner: the interface every provisioner fills in.

A provisioner is the code that makes the backend of an Exporter (a Pod, QEMU
on a lab host, a Corellium device). The pool logic (``pool/``) and the API
layer (``k8s/``) never compare provisioner names: they get the provisioner of
a class from the registry (``provisioners.get``) and read its answers here.
A new provisioner is a module of this package with a subclass of
``Provisioner`` and one line in the registry (docs/provisioner-roles.md).

Pure data and small pure functions: nothing here talks to the API, and the
package imports nothing from ``pool/`` (the pool reads it).
"""

from dataclasses import dataclass, field


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
    # Its backends run on the class's lab hosts (baremetal/pool.py's LabView).
    runs_on_lab_hosts = False
    # The playbook that probes its hosts when their last report is old.
    probe_playbook = None

    # --- Rendering (k8s/pod.py, k8s/exporter_config.py) ------------------
    # The Pod runs QEMU beside the exporter (the runtime container), ends
    # with it (restartPolicy Never) and serves one lease whatever the strategy.
    runs_qemu_in_pod = False
    # Its driver entries of a QEMU type become the instance's VirtualQemu driver.
    renders_qemu_drivers = False
    # Its instance is named after the Exporter's name, namespace and UID
    # (corellium/identity.py), not the Exporter's name alone.
    instance_named_by_identity = False

    # --- What a set may change of its class (pool/set_overrides.py) -------
    # Parameter paths that receive or direct a class credential: {path: why}.
    credential_parameters = {}
    # Image roles whose container receives a class credential: {role: why}.
    credential_images = {}
    # Why the lab hosts are the class's (each gets its SSH key), or None.
    credential_hosts = None
    # Parameter paths naming a file, program or directory where the instance
    # runs: set by the class only. {path: why}
    path_parameters = {}
    # The driver types a set may use when the class names none.
    default_driver_types = ()
    # Resource ceilings apply (resources.cpu, memory, storage).
    has_resource_ceilings = False
    # The class's own value is the ceiling unless it names a higher one.
    ceiling_by_default = False
    # A TcpNetwork without a host is forwarded to the guest in the Pod, so it
    # must name a guest port (k8s/exporter_config.guest_network_violations).
    forwards_guest_ports = False

    def exporter_env(self, class_spec, parameters):
        """Environment of the exporter container beyond the CA bundle's."""
        return []

    def driver_overrides(self, drivers, parameters, instance_name):
        """What the provisioner lays over the named template drivers ``drivers``
        (``{entry name: override}``), beyond the QEMU driver's rendering."""
        return {}
