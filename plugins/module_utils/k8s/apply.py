"""Applies the Kubernetes side of a scale plan: Exporter CRs, annotations,
the set's status and Events.

Shared by the ``exporterset_apply`` module (from a playbook) and the operator
(in process), so both make the same writes in the same order: the dormant
Exporter the plan creates and the Exporters it re-enables (before anything
could leave the selector with no enabled Exporter), then deletes and
disables, then creates, then the dormant Exporters the plan removes, then
annotation patches, then the status.

Exporters are deleted so that the Jumpstarter controller's Leases survive:
the controller makes every assigned Lease owned by its Exporter, so the
delete orphans dependents (``propagationPolicy: Orphan``) and then deletes
the objects the pool's side made for the Exporter by name: the instance Pod,
its config Secret and the credential Secret, each only when it names the
Exporter's UID as owner.

Lease safety (lease_safety.py), on a fresh read just before each write: an
Exporter is disabled only while no lease holds it from either side (its
status.leaseRef, a non-ended Lease naming it), with its resourceVersion as
precondition; it is deleted only when it is also seen disabled, with its UID
and resourceVersion as preconditions. An Exporter that fails the check, or a
write that fails its precondition (409), is left alone (``held``, with a
Normal ``ExporterHeld`` Event naming why); the next plan looks again. Nothing
is ever forced.

A new Exporter is not created while a credential Secret of its name is in
the way (``credentials``): the name counts as taken for this reconcile.
"""

from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants, provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core as k8s_core
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import writer
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import credentials, lifecycle
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import adoption, lease_safety
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions as pool_permissions

# The ``retiring`` annotation of an Exporter disabled for its set's deletion.
RETIRING_TEARDOWN = "Teardown"


class ApplyError(Exception):
    """A write the API server refused; the message names the object."""


def backend_held(api_client, exporterset, name):
    """Why the backend (instance) of Exporter ``name`` must not be removed or
    reset now, or None when it may; read afresh, for the module that acts to
    call just before it acts, not from a plan or a confirmation made seconds
    earlier.

    Held while the Exporter of that name is leased from either side (a lease
    made with ``allowDisabled`` lands on a disabled Exporter), or still
    enabled (the controller may lease it any moment). A gone or terminating
    unleased Exporter's backend may go.
    """
    applier = PlanApplier(api_client, exporterset, check_mode=True)
    current = applier._read_exporter(name)
    if current is None:
        return None
    holders = lease_safety.LeaseView(applier._active_leases()).holders(current)
    if holders:
        return f"leased by {', '.join(holders)}"
    _, _, _, enabled, _, terminating = lease_safety.read_exporter(current)
    if enabled and not terminating:
        return "still enabled"
    return None


def restart_unleased(api_client, exporterset, name, uid, restart, check_mode=False):
    """Restart the backend of Exporter ``name`` (UID ``uid``) as a reset in
    place is made (lease_safety.py): the Exporter is disabled while unleased
    from both sides, with its resourceVersion as precondition and marked
    ``retiring: InPlaceReuse``; only once a fresh read sees it disabled and
    unleased from both sides does ``restart()`` run; then it is enabled
    again as it was. An Exporter someone else disabled stays disabled.

    Returns None once restarted, else why not (nothing restarted). A lease
    given in the window before the disable lands keeps it disabled and
    marked: the planner resets it in place once that lease ends, as it does
    if this process dies before the re-enable.
    """
    applier = PlanApplier(api_client, exporterset, check_mode=check_mode)
    current = applier._read_exporter(name)
    if current is None or current["metadata"].get("uid") != uid:
        return "gone"
    _, _, _, enabled, _, _ = lease_safety.read_exporter(current)
    if enabled:
        # The disable reads the Leases first: a leased Exporter is left as it is.
        if not applier.disable(name, {constants.ANNOTATION_RETIRING: constants.RECYCLE_IN_PLACE_REUSE}):
            return applier.held_why.get(name, "gone")
        if check_mode:
            return None  # nothing was disabled, so nothing more to read
    current = applier.safe_to_act(name, uid)
    if current is None:
        return applier.held_why.get(name, "gone")
    if check_mode:
        return None
    restart()
    if not enabled:
        return None
    body = {"spec": {"enabled": True}, "metadata": {"annotations": {constants.ANNOTATION_RETIRING: None}}}
    # Changed since (409) or gone (404): still marked, so the next plan
    # resets it in place and enables it.
    applier._write_exporter(f"enabling Exporter {applier.namespace}/{name} again", "patch", name, body,
                            resource_version=current["metadata"]["resourceVersion"], record=None)
    return None


class PlanApplier:
    def __init__(self, api_client, exporterset, check_mode=False, write_outcome=True, permissions=None):
        from kubernetes import client

        self.check = check_mode
        # What the caller may not do (pool/permissions.py): without Secret
        # deletion an Exporter's Secrets go with it by garbage collection.
        self.delete_secrets = (permissions or pool_permissions.ALL_GRANTED).on("secret-delete")
        self.write_outcome = write_outcome
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = k8s_core.CoreApi(api_client)
        self.set = exporterset
        self.namespace = self.set["metadata"]["namespace"]
        # Exporter name -> the resourceVersion our last write of it left.
        self.versions = {}
        # The resourceVersion of the last Lease list read (_active_leases).
        self.leases_read_at = None
        self.result = {"created": [], "deleted": [], "patched": [], "blocked": [], "held": [],
                       "conflicts": 0, "status_changed": False, "events": 0}
        # name -> why, for the ExporterHeld Events.
        self.held_why = {}
        # name -> the leases holding it, of a teardown (confirm_teardown).
        self.leased = {}
        # Exporters the plan meant to adopt and this pass did not (adopt).
        self.not_adopted = set()
        # What was (or, in check mode, would be) written, for --diff; ``seen``
        # the Exporters as last read (a caller may add its own copies).
        self.writer = writer.Writer(api_client, check_mode=check_mode, changes=Changes())
        self.seen = {}

    @property
    def changes(self):
        """What the writes recorded; a caller may give its own (the writer records there)."""
        return self.writer.changes

    @changes.setter
    def changes(self, changes):
        self.writer.changes = changes

    def _patched(self, name, written):
        """Keep the resourceVersion an Exporter write left (``versions``)."""
        version = ((written or {}).get("metadata") or {}).get("resourceVersion") if isinstance(written, dict) else None
        if version:
            self.versions[name] = version

    def _fail(self, what, exc):
        raise ApplyError(f"{what}: {getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}".strip()) from exc

    def _write_exporter(self, what, verb, *args, **kwargs):
        """One write of an Exporter (``verb`` of the writer); an error fails as ``what``."""
        try:
            return getattr(self.writer, verb)(constants.EXPORTER, self.namespace, *args, **kwargs)
        except writer.WriteError as exc:
            self._fail(what, exc)

    def _read_exporter(self, name):
        from kubernetes.client.rest import ApiException

        try:
            current = self.custom.get_namespaced_custom_object(*constants.EXPORTER.at(self.namespace), name)
        except ApiException as exc:
            if exc.status != 404:
                self._fail(f"reading Exporter {self.namespace}/{name}", exc)
            return None
        self.seen[name] = current
        return current

    def _active_leases(self):
        """The Leases that may hold an Exporter, read now (ended ones carry a label)."""
        from kubernetes.client.rest import ApiException

        try:
            listed = self.custom.list_namespaced_custom_object(
                *constants.LEASE.at(self.namespace),
                label_selector=lease_safety.ACTIVE_LEASES_SELECTOR)
            self.leases_read_at = (listed.get("metadata") or {}).get("resourceVersion")
            return listed["items"]
        except ApiException as exc:
            self._fail(f"listing the Leases of namespace {self.namespace}", exc)

    def _hold(self, name, why, conflict=False):
        if name not in self.result["held"]:
            self.result["held"].append(name)
        self.held_why[name] = why
        if conflict:
            self.result["conflicts"] += 1

    def safe_to_act(self, name, uid=None, require_disabled=True):
        """A fresh read of Exporter ``name`` when lease safety lets it be acted on, else None (held)."""
        current = self._read_exporter(name)
        if current is not None and uid and current["metadata"].get("uid") != uid:
            self._hold(name, f"replaced by a new Exporter (UID {current['metadata'].get('uid')})")
            return None
        why = lease_safety.untouchable(current, self._active_leases() if current else (),
                                       require_disabled=require_disabled)
        if why is not None:
            if current is not None:
                self._hold(name, why)
            return None
        return current

    def confirm(self, plan):
        """The plan with only the deletes and resets lease safety allows now.

        For the provisioner roles, which remove or reset backends before
        ``apply_plan`` deletes Exporters: a backend is touched only when its
        Exporter is seen disabled and unleased from both sides.
        """
        confirmed = dict(plan)
        dropped = set()
        for key in ("delete", "recycle"):
            entries = []
            for entry in plan.get(key) or []:
                if self.safe_to_act(entry["name"], entry.get("uid")) is not None:
                    entries.append(entry)
                elif self._read_exporter(entry["name"]) is None and key == "delete":
                    entries.append(entry)  # already gone: its backend may remain
                else:
                    dropped.add(entry["name"])
            confirmed[key] = entries
        if dropped:
            # What the plan meant to write with a reset or delete that is not
            # done (the retiring mark cleared, reused-after) is not written
            # either: the Exporter stays marked, and a later plan acts on it.
            confirmed["exporter_annotations"] = {
                name: notes for name, notes in (plan.get("exporter_annotations") or {}).items()
                if name not in dropped}
            confirmed["events"] = [event for event in plan.get("events") or []
                                   if event.get("exporter") not in dropped]
        return confirmed

    def disable(self, name, annotations=None):
        """Disable an unleased Exporter (with its annotations), guarded by its resourceVersion."""
        current = self.safe_to_act(name, require_disabled=False)
        if current is None:
            return False
        body = {"spec": {"enabled": False},
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}}
        annotations = dict(annotations or {})
        if self.leases_read_at:
            # The Lease list that showed it unleased (its revision), for the record.
            annotations[constants.ANNOTATION_LEASES_CHECKED_AT] = self.leases_read_at
        if annotations:
            body["metadata"]["annotations"] = annotations
        outcome = self._write_exporter(f"disabling Exporter {self.namespace}/{name}", "patch", name, body,
                                       current=current)
        if outcome.status == writer.CONFLICT:
            self._hold(name, "changed since it was read (409 Conflict)", conflict=True)
            return False
        if outcome.status == writer.GONE:
            return False
        self._patched(name, outcome.obj)
        if name not in self.result["patched"]:
            self.result["patched"].append(name)
        return True

    def _owned_objects(self, exporter, provisioner):
        """The Pod, config Secret and credential Secret that belong to this very Exporter.

        Read before the Exporter is deleted: orphaning strips the owner
        references that tell them apart from a namesake's.
        """
        from kubernetes.client.rest import ApiException

        name = exporter["metadata"]["name"]
        uid = exporter["metadata"]["uid"]
        owned = []
        try:
            secret = credentials.read_secret(self.api_client, self.namespace,
                                             credentials.credential_secret_name(exporter))
            if secret is not None and credentials.issued_to(secret, exporter):
                owned.append(("Secret", secret))
            if provisioners.get(provisioner).has_pods:
                for kind, object_name in (("Pod", name), ("Secret", k8s_pod.config_secret_name(name))):
                    found = self.core.read(kind, self.namespace, object_name, missing_ok=True)
                    if found is not None and k8s_objects.controlled_by(found, uid):
                        owned.append((kind, found))
        except ApiException as exc:
            self._fail(f"reading what belongs to Exporter {self.namespace}/{name}", exc)
        return owned

    def _delete_owned(self, kind, obj):
        meta = obj["metadata"]
        try:
            # A 409 is a namesake made since the read; a 404 gone already.
            self.writer.delete(kind, self.namespace, meta["name"], uid=meta["uid"],
                               grace_period_seconds=0 if kind == "Pod" else None)
        except writer.WriteError as exc:
            self._fail(f"deleting {kind} {self.namespace}/{meta['name']}", exc)

    def delete(self, name, uid=None, provisioner="", unleased_only=True, require_disabled=True):
        """Delete one Exporter without its Leases, then what belongs to it.

        ``uid`` is the Exporter the plan meant; a namesake is left alone, and
        so is an Exporter that lease safety keeps (leased from either side,
        or, with ``require_disabled``, still enabled), unless
        ``unleased_only`` is off, as when the whole set goes. Returns whether
        the Exporter is gone or going.
        """
        current = self._read_exporter(name)
        if current is None:
            self.result["deleted"].append(name)
            return True
        meta = current["metadata"]
        if uid and meta.get("uid") != uid:
            self._hold(name, f"replaced by a new Exporter (UID {meta.get('uid')})")
            return False
        if unleased_only:
            why = lease_safety.untouchable(current, self._active_leases(), require_disabled=require_disabled)
            if why is not None:
                self._hold(name, why)
                return False
        owned = self._owned_objects(current, provisioner)
        if not self.delete_secrets:
            # Its dependents go by garbage collection (the Leases it owns too),
            # its Pod at once.
            owned = [(kind, obj) for kind, obj in owned if kind != "Secret"]
        outcome = self._write_exporter(
            f"deleting Exporter {self.namespace}/{name}", "delete", name, uid=meta["uid"],
            resource_version=meta["resourceVersion"],
            propagation_policy="Orphan" if self.delete_secrets else "Background")
        if outcome.status == writer.CONFLICT:
            # Changed since it was read: the next plan looks again.
            self._hold(name, "changed since it was read (409 Conflict)", conflict=True)
            return False
        for kind, obj in owned:
            self._delete_owned(kind, obj)
        self.result["deleted"].append(name)
        return True

    def patch(self, name, body):
        outcome = self._write_exporter(f"patching Exporter {self.namespace}/{name}", "patch", name, body,
                                       current=self.seen.get(name))
        if outcome.status == writer.GONE:
            return
        if outcome.status == writer.CONFLICT:
            self._fail(f"patching Exporter {self.namespace}/{name}", outcome.error)
        self._patched(name, outcome.obj)
        if name not in self.result["patched"]:
            self.result["patched"].append(name)

    def create(self, manifest):
        """Create one Exporter; returns whether it was created."""
        from kubernetes.client.rest import ApiException

        name = manifest["metadata"]["name"]
        try:
            stale = credentials.blocking_secret(self.api_client, self.namespace, name)
            if stale is not None:
                # The controller would hand the new Exporter this Secret's token,
                # issued to another UID. The name waits until the Secret is gone.
                self.result["blocked"].append(name)
                # Without Secret deletion the garbage collector removes one
                # whose Exporter is gone.
                if not self.check and self.delete_secrets and not credentials.live_exporter_owns(
                        self.api_client, self.namespace, stale):
                    credentials.delete_secret(self.api_client, self.namespace, stale)
                return False
        except ApiException as exc:
            self._fail(f"checking the credential Secret of Exporter {self.namespace}/{name}", exc)
        outcome = self._write_exporter(f"creating Exporter {self.namespace}/{name}", "create", manifest)
        if outcome.status == writer.EXISTS:
            # The name was taken since the plan was made (a stale read); the
            # next plan sees it and picks another name.
            return False
        if outcome.status == writer.GONE:
            self._fail(f"creating Exporter {self.namespace}/{name}", outcome.error)
        self.result["created"].append(name)
        return True

    def adopt(self, entry, provisioner):
        """Adopt one Exporter the plan found without a controller owner
        (pool/adoption.py), on a fresh read under the same rule, with its UID
        and resourceVersion as preconditions; returns whether it was adopted.
        One taken meanwhile (by another set, leased, changed) is left alone
        quietly: the next plan looks again."""
        name = entry["name"]
        current = self._read_exporter(name)
        why = "gone"
        if current is not None:
            why = adoption.why_not_adoptable(
                self.set, current, provisioner,
                lease_safety.LeaseView(self._active_leases()).holders(current))
            if entry.get("uid") and current["metadata"].get("uid") != entry["uid"]:
                why = "replaced by a new Exporter"
        if why is not None:
            self.not_adopted.add(name)
            return False
        body = adoption.adoption_patch(self.set, current)
        outcome = self._write_exporter(f"adopting Exporter {self.namespace}/{name}", "patch", name, body,
                                       current=current)
        if not outcome.written:
            self.not_adopted.add(name)
            return False
        self._patched(name, outcome.obj)
        if name not in self.result["patched"]:
            self.result["patched"].append(name)
        return True

    def apply_plan(self, plan, provisioner):
        # Adoptions first: a pass that adopts creates nothing (adoption.py).
        for entry in plan.get("adopt") or []:
            self.adopt(entry, provisioner)
        # While the set has no other enabled Exporter, the dormant one comes
        # first; without it nothing that takes an enabled Exporter away is done.
        dormant_ready = all(
            [self.create(k8s_objects.exporter_manifest(self.set, entry, provisioner))
             for entry in plan.get("create_dormant") or []]
        )
        exporter_annotations = plan.get("exporter_annotations") or {}
        enabled_again = {constants.ANNOTATION_LEASES_CHECKED_AT: None}
        for name in plan.get("enable") or []:
            self.patch(name, {"spec": {"enabled": True}, "metadata": {"annotations": enabled_again}})
        # Reset in place (the provisioner role did it, only for what
        # ``confirm`` allowed): enabled again, with its bookkeeping.
        written = set()
        for entry in plan.get("recycle") or []:
            # Leased now (an allowDisabled lease given to it since the plan):
            # its reset was most likely held (backend_held), so it is neither
            # enabled nor marked reset; it stays retiring and a plan resets it
            # once the lease ends.
            if self.safe_to_act(entry["name"], entry.get("uid")) is None:
                continue
            self.patch(entry["name"], {"spec": {"enabled": True},
                                       "metadata": {"annotations": {
                                           **enabled_again, **(exporter_annotations.get(entry["name"]) or {})}}})
            written.add(entry["name"])
        removing = [entry["name"] for entry in plan.get("delete") or []] + list(plan.get("disable") or [])
        gone = set()
        if dormant_ready:
            for entry in plan.get("delete") or []:
                if self.delete(entry["name"], entry.get("uid"), provisioner):
                    gone.add(entry["name"])
            for name in plan.get("disable") or []:
                # The disable carries the annotations that say why (scale-down,
                # retiring), so it is never seen disabled without them.
                self.disable(name, exporter_annotations.get(name))
                written.add(name)
        else:
            for name in removing:
                self._hold(name, "the set's dormant Exporter could not be created first")
        for entry in plan.get("create") or []:
            self.create(k8s_objects.exporter_manifest(self.set, entry, provisioner))
        for entry in plan.get("delete_dormant") or []:
            # Never Online, so never leased; still checked on a fresh read.
            self.delete(entry["name"], entry.get("uid"), require_disabled=False)
        held = set(self.result["held"])
        for name, annotations in sorted(exporter_annotations.items()):
            if name not in gone and name not in held and name not in written and annotations:
                self.patch(name, {"metadata": {"annotations": annotations}})
        self.write_set(plan)

    def held_events(self):
        """One Normal ExporterHeld Event per Exporter left alone, naming why."""
        return [{"type": "Normal", "reason": "ExporterHeld", "exporter": name,
                 "message": f"{name}: left alone, {why}; the next plan looks again"}
                for name, why in sorted(self.held_why.items())]

    def write_set(self, plan):
        meta = self.set["metadata"]
        # The operator state (pool/operator_state.py) is written with the
        # status, through the status subresource, never as annotations.
        state = plan.get("set_state") or {}
        status = plan.get("status")
        if status:
            outcome = None
            if self.write_outcome:
                outcome = lifecycle.outcome(self.set)
            if self.check:
                desired = k8s_status.desired_status(status, self.set.get("status"), outcome, state)
                self.result["status_changed"] = k8s_status.status_differs(self.set.get("status"), desired)
            else:
                self.result["status_changed"], desired = k8s_status.write_status(
                    self.api_client, self.namespace, meta["name"], status, outcome=outcome, state=state
                )
            if self.result["status_changed"]:
                self.changes.record(f"{constants.EXPORTER_SET.kind}/{meta['name']}",
                                    {"status": self.set.get("status")}, {"status": desired})
        elif state:
            self.result["status_changed"] = k8s_status.write_state(
                self.api_client, self.namespace, meta["name"], state, check_mode=self.check)
        # An Event about an Exporter this pass was held from tells of an
        # action that did not happen; the next plan that acts writes it once.
        held = set(self.held_why) | self.not_adopted
        events = [event for event in plan.get("events") or []
                  if event.get("exporter") not in held] + self.held_events()
        if events and not self.check:
            self.result["events"] = k8s_status.emit_events(self.api_client, self.set, events)

    def confirm_teardown(self, mode, owned):
        """The names of the owned Exporters whose backends a teardown may
        release now (``mode`` ``delete``), each on a fresh read: seen disabled
        and unleased from both sides, or gone, or dormant (no backend).

        The rest wait, as a plan's removals do (lease_safety.py): a leased
        Exporter (disabled or not: an ``allowDisabled`` lease lands on a
        disabled one) is held until its leases end (``leased``); an enabled
        unleased one is disabled now, guarded like any disable, and released
        by a later pass that sees it disabled and still unleased. With
        ``detach`` nothing is destroyed: every backend is retained, so all
        are named.
        """
        names = []
        for exporter in owned:
            meta = exporter["metadata"]
            name = meta["name"]
            if meta.get("deletionTimestamp"):
                continue
            if mode != "delete" or constants.ANNOTATION_DORMANT in (meta.get("annotations") or {}):
                names.append(name)
                continue
            current = self._read_exporter(name)
            if current is None:
                names.append(name)  # already gone: its backend may remain
                continue
            if meta.get("uid") and current["metadata"].get("uid") != meta["uid"]:
                self._hold(name, f"replaced by a new Exporter (UID {current['metadata'].get('uid')})")
                continue
            leases = self._active_leases()
            holders = lease_safety.LeaseView(leases).holders(current)
            if holders:
                self.leased[name] = holders
                self._hold(name, f"leased by {', '.join(holders)}; the set's deletion waits for the lease to end")
                continue
            why = lease_safety.untouchable(current, leases, require_disabled=True)
            if why == "still enabled":
                if self.disable(name, {constants.ANNOTATION_RETIRING: RETIRING_TEARDOWN}):
                    self._hold(name, "disabled for the set's deletion; removed once seen disabled and unleased")
                continue
            if why is not None:
                self._hold(name, why)
                continue
            names.append(name)
        return names

    def teardown(self, mode, owned, provisioner="", only=None):
        """Delete the owned Exporters (``mode`` ``delete``), or detach them (``detach``).

        A delete is lease-safe as any other: each Exporter is deleted only on
        a fresh read that shows it disabled and unleased from both sides
        (``confirm_teardown``); ``only`` names those whose backends were
        released (the confirmed ones); the others are held, and the set keeps
        its finalizer. Without ``only`` the confirmation is made here.
        Detaching destroys nothing and is done at once. A dormant Exporter has
        nothing to keep and is deleted either way, once unleased.
        """
        uid = self.set["metadata"]["uid"]
        if only is None:
            only = self.confirm_teardown(mode, owned)
        only = set(only or ())
        for exporter in owned:
            meta = exporter["metadata"]
            dormant = constants.ANNOTATION_DORMANT in (meta.get("annotations") or {})
            if mode == "delete" or dormant:
                if meta.get("deletionTimestamp"):
                    continue
                if meta["name"] not in only:
                    if meta["name"] not in self.held_why:
                        self._hold(meta["name"], "its backend was not released by this pass")
                    continue
                self.delete(meta["name"], meta.get("uid"), provisioner, require_disabled=not dormant)
            else:
                remaining = [ref for ref in meta.get("ownerReferences") or [] if ref.get("uid") != uid]
                self.patch(meta["name"], {"metadata": {"ownerReferences": remaining or None}})
        if mode == "delete":
            lifecycle.write_waiting_for_leases(self.api_client, self.set, self.leased,
                                               datetime.now(UTC), check_mode=self.check)

    def changed(self):
        r = self.result
        return bool(
            r["created"] or r["deleted"] or r["patched"] or r["status_changed"] or r["events"]
        )
