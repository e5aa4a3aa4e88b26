"""Names shared by the pool logic, the provisioners and the operator.

Every label, annotation, condition type and reason that more than one part
of the collection reads or writes is spelled here once, and so is where
each kind lives in the API (group, version, plural). Who owns an object is
decided by its controller owner reference, read in one place:
``pool/ownership.py`` (``controller_ref``); the set label is an index for
label selectors, never proof of ownership.
"""

from typing import NamedTuple

GROUP = "virtualtarget.jumpstarter.dev"
JUMPSTARTER_GROUP = "jumpstarter.dev"


class GVR(NamedTuple):
    """Where a kind lives in the API.

    ``*gvr.at(namespace)`` are the leading arguments of the kubernetes
    client's namespaced custom object calls: group, version, namespace, plural.
    """

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    def at(self, namespace):
        return self.group, self.version, namespace, self.plural


EXPORTER_SET = GVR(GROUP, "v1alpha1", "exportersets", "ExporterSet")
VIRTUAL_TARGET_CLASS = GVR(GROUP, "v1alpha1", "virtualtargetclasses", "VirtualTargetClass")
EXPORTER_SET_POLICY = GVR(GROUP, "v1alpha1", "exportersetpolicies", "ExporterSetPolicy")
EXPORTER = GVR(JUMPSTARTER_GROUP, "v1alpha1", "exporters", "Exporter")
LEASE = GVR(JUMPSTARTER_GROUP, "v1alpha1", "leases", "Lease")
POD = GVR("", "v1", "pods", "Pod")
SECRET = GVR("", "v1", "secrets", "Secret")

PROVISIONER_QEMU = "qemu.jumpstarter.dev"
PROVISIONER_QEMU_BAREMETAL = "qemu-baremetal.jumpstarter.dev"
PROVISIONER_CORELLIUM = "corellium.jumpstarter.dev"
# What each provisioner is and does (whether its instances are Pods, ...) is
# its own word: plugins/module_utils/provisioners/, asked by name.

# Exporter label: the ExporterSet that owns the Exporter.
LABEL_EXPORTER_SET = GROUP + "/exporterset"
# Pod and Secret label: the Exporter the object belongs to.
LABEL_EXPORTER = GROUP + "/exporter"
# Exporter label: the lab host a qemu-baremetal instance runs on.
LABEL_HOST = GROUP + "/host"

# What the operator decides from about a set (the scale-down cooldown's clock,
# the failure streak, a backend's refusal, the lab hosts' report, the last
# config re-sync) is kept in its status, never in its annotations:
# pool/operator_state.py.

# Exporter annotation: name of the lease the Exporter was last seen holding
# (bookkeeping for people; a lease's end is read from the Lease objects).
ANNOTATION_LEASED_BY = GROUP + "/leased-by"
# Exporter annotation: RFC3339 time the Exporter was first seen ready. Tells a
# never-started instance (startup timeout) from one that went offline later.
ANNOTATION_FIRST_READY = GROUP + "/first-ready"
# Exporter annotation: present while the pool itself disabled the Exporter for
# scale-down. Exporters disabled by someone else are never touched.
ANNOTATION_SCALE_DOWN = GROUP + "/scale-down"
# Exporter annotation: present while the pool disabled the Exporter to remove
# or reset it (lease_safety.py); the value is why: Recycle, Failed,
# StartupTimeout (it is deleted) or InPlaceReuse (its instance is reset and
# it is enabled again). Never re-enabled for scale-up.
ANNOTATION_RETIRING = GROUP + "/retiring"
# Exporter annotation: "<endTime> <creationTimestamp> <lease>" of the last
# ended Lease after which an InPlaceReuse Exporter was reset.
ANNOTATION_REUSED_AFTER = GROUP + "/reused-after"
# Exporter annotation, written with every disable the pool makes: the
# resourceVersion of the Lease list it read just before, in which no Lease
# held the Exporter. A Lease assigned after that revision and before the
# disable landed is the controller's window (docs/pool-semantics.md, lease
# safety). Removed when the Exporter is enabled again.
ANNOTATION_LEASES_CHECKED_AT = GROUP + "/leases-checked-at"
# Exporter annotation: the set's dormant Exporter. It has no backend and is
# never Online; it exists only while the set has no other enabled Exporter, so
# that the Jumpstarter controller keeps a lease for the set waiting
# (Pending/Offline) instead of ending it at once as unsatisfiable.
ANNOTATION_DORMANT = GROUP + "/dormant"
# Exporter annotations written at creation time.
ANNOTATION_SET_GENERATION = GROUP + "/exporterset-generation"
ANNOTATION_PROVISIONER = GROUP + "/provisioner"
# Exporter annotation written at creation time: the hash of what its instance
# is made from (pool/rollout.py); an Exporter whose hash differs from its
# set's current one is outdated and rolled by the set's rollout strategy.
ANNOTATION_TEMPLATE_HASH = GROUP + "/template-hash"

# VirtualTargetClass annotation: the ConfigMap holding the CA of the
# Jumpstarter controller's endpoint, as "name" or "name/key", in the set's
# namespace (an annotation because the upstream CRD prunes unknown spec fields).
ANNOTATION_CONTROLLER_CA_CONFIGMAP = GROUP + "/controller-ca-configmap"
# VirtualTargetClass annotation: what its sets may change beyond the default
# policy (set_overrides.py), "field=value|value; field=value": further values
# of class-only fields, the driver types allowed, resource ceilings (max.*).
ANNOTATION_SET_OVERRIDABLE = GROUP + "/set-overridable"
# Where the Jumpstarter controller publishes its CA unless a class says otherwise.
DEFAULT_CONTROLLER_CA_CONFIGMAP = "jumpstarter-service-ca-cert"
DEFAULT_CONTROLLER_CA_KEY = "ca.crt"
# The Jumpstarter controller names an Exporter's credential Secret
# "<exporter>-exporter" unless status.credential says otherwise.
CREDENTIAL_SECRET_SUFFIX = "-exporter"

BINDING_IMMEDIATE = "Immediate"
BINDING_WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
RECYCLE_EXIT_AND_REPLACE = "ExitAndReplace"
RECYCLE_IN_PLACE_REUSE = "InPlaceReuse"

CONDITION_AVAILABLE = "Available"
CONDITION_PROGRESSING = "Progressing"
CONDITION_DEGRADED = "Degraded"
CONDITION_SCALING_LIMITED = "ScalingLimited"
# JEP-0014's health condition of a set, derived from the others (pool/status.py).
CONDITION_SET_HEALTHY = "SetHealthy"
REASON_HEALTHY = "Healthy"
# True while Exporters made from an earlier template remain (pool/rollout.py).
CONDITION_ROLLING_OUT = "RollingOut"
REASON_UP_TO_DATE = "UpToDate"
REASON_ROLLOUT_OFF = "RolloutOff"

REASON_CLASS_NOT_FOUND = "ClassNotFound"
REASON_INVALID_PARAMETERS = "InvalidParameters"
REASON_CREDENTIAL_REDIRECT = "CredentialRedirect"
REASON_REPLICA_FAILURE = "ReplicaFailure"
REASON_MAX_REPLICAS_REACHED = "MaxReplicasReached"
REASON_NO_FREE_SLOTS = "NoFreeSlots"
REASON_CREDENTIALS_REJECTED = "CredentialsRejected"
REASON_QUOTA_EXCEEDED = "QuotaExceeded"
REASON_CONTROLLER_CA_UNAVAILABLE = "ControllerCAUnavailable"

DELETE_SCALE_DOWN = "ScaleDown"
DELETE_FAILED = "Failed"
DELETE_STARTUP_TIMEOUT = "StartupTimeout"
DELETE_RECYCLE = "Recycle"
# An idle outdated Exporter replaced by a Proactive rollout.
DELETE_ROLLOUT = "Rollout"

INSTANCE_PENDING = "Pending"
INSTANCE_RUNNING = "Running"
INSTANCE_FAILED = "Failed"
INSTANCE_UNKNOWN = "Unknown"

# ExporterSet condition: True while the set's VirtualTargetClass is being
# deleted (it stays, held by class_status.FINALIZER, until its last set goes).
CONDITION_CLASS_TERMINATING = "ClassTerminating"
REASON_CLASS_TERMINATING = "ClassDeleting"
REASON_UNKNOWN_PROVISIONER = "UnknownProvisioner"

# ExporterSet conditions of its ExporterSetPolicy (pool/policy.py).
CONDITION_POLICY_VALID = "PolicyValid"
REASON_POLICY_VALID = "Valid"
REASON_INVALID_POLICY = "InvalidPolicy"
REASON_CONFLICTING_POLICIES = "ConflictingPolicies"
CONDITION_PAUSED = "Paused"
REASON_PAUSED = "Paused"
REASON_RESUMED = "Resumed"
