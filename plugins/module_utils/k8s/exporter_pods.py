# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The work of the ``exporter_pods`` module: the Pods and config Secrets of
Pod-backed instances (its documentation says what each state does).

One home for both ways a task runs it: the module's ``main`` hands ``run``
an ``AnsibleModule``, and the action plugin of the same name, on a local
connection, hands it a stand-in that takes the same parameters
(``ARGUMENT_SPEC`` and the connection options), check mode, warnings and
the same two endings (``exit_json``, ``fail_json``), so the work is done in
the task's worker process without starting a module.
"""

import base64
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import (
    constants,
    exporterset_options,
    provisioners,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import writer
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import ClusterModule
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import config_sync, credentials
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes, with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions

# Instances made or removed at once in one run (each is a few API calls).
PARALLEL = 8
# How long a reset in place may take, exec included (the provisioner's own
# command waits for its backend within this).
RESET_EXEC_SECONDS = 180


def _secret_text(secret):
    """A Secret's data as text, key by key (what ``stringData`` wrote)."""
    try:
        return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
    except (ValueError, UnicodeDecodeError):
        return None


def _config_parts(secret):
    """What a diff shows of a config Secret: the digest of its inputs; its
    content holds the exporter's token and is never returned."""
    if secret is None:
        return None
    digest = ((secret.get("metadata") or {}).get("annotations") or {}).get(config_sync.ANNOTATION_CONFIG_INPUTS)
    return {"metadata": {"annotations": {config_sync.ANNOTATION_CONFIG_INPUTS: digest}}}


def _gone(obj):
    """What a diff shows of an object a run deletes, before."""
    return {"metadata": {"uid": obj["metadata"].get("uid")}}


class InstanceError(Exception):
    """An instance that could not be made or removed; the message names it."""


class PodManager(ClusterModule):
    def __init__(self, module):
        super().__init__(module)
        self.namespace = self.p["exporterset"]["metadata"]["namespace"]
        self.provisioner = (self.p["virtual_target_class"].get("spec") or {}).get("provisioner", "")
        self.by_name = {e["metadata"]["name"]: e for e in self.p["owned_exporters"]}
        self.result = {"created": [], "deleted": [], "waiting": [], "resynced": [], "noted": [], "reset": []}
        self.changes = Changes()
        self.writer = writer.Writer(self.api_client, check_mode=module.check_mode, changes=self.changes)
        try:
            self.granted = permissions.Permissions.from_denied(self.p["denied_permissions"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))

    def _api_error(self, what, exc):
        raise InstanceError(f"{what}: {api_errors.answer(exc)}")

    def _write(self, what, verb, *args, ok=(), **kwargs):
        """One write (``verb`` of the writer); an outcome neither written
        nor in ``ok``, or an error, fails as ``what``."""
        try:
            outcome = getattr(self.writer, verb)(*args, **kwargs)
        except writer.WriteError as exc:
            self._api_error(what, exc)
        if not outcome.written and outcome.status not in ok:
            self._api_error(what, outcome.error)
        return outcome

    def _read(self, kind, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.core.read(kind, self.namespace, name, missing_ok=True)
        except ApiException as exc:
            self._api_error(f"reading {self.namespace}/{name}", exc)

    def _credential(self, exporter):
        """``(token, credential Secret)``; both None while there is no token."""
        from kubernetes.client.rest import ApiException

        try:
            return credentials.read_credential(self.api_client, exporter)
        except ApiException as exc:
            self._api_error(f"reading the credential of {self.namespace}/{exporter['metadata']['name']}", exc)

    def _config_secret(self, exporter, token, credential):
        """The instance's config Secret, noting the digest of its inputs."""
        secret = k8s_pod.config_secret(
            self.p["exporterset"], exporter, self.provisioner, self.p["parameters"], token,
            self.p["controller_tls_ca"],
        )
        digest = config_sync.inputs_digest(self.p["exporterset"], exporter, self.provisioner,
                                           self.p["parameters"], credential, self.p["controller_tls_ca"])
        secret["metadata"].setdefault("annotations", {})[config_sync.ANNOTATION_CONFIG_INPUTS] = digest
        return secret

    def present(self, name):
        exporter = self.by_name.get(name)
        if exporter is None:
            raise InstanceError(f"Exporter {self.namespace}/{name} is not among owned_exporters")
        pod = self._read("Pod", name)
        if pod is not None:
            if not k8s_objects.controlled_by(pod, exporter["metadata"].get("uid")):
                # Not this Exporter's: a Pod the pool made for an earlier Exporter
                # of the same name (with its token) goes; this one waits. A Pod
                # no Exporter of this name controls is not the pool's, whatever
                # its labels say: it is left alone and this one waits.
                if self._made_for_namesake(pod, name):
                    self._delete_foreign_pod(pod)
                self.result["waiting"].append(name)
            return
        token, credential = self._credential(exporter)
        if token is None:
            self.result["waiting"].append(name)
            return
        secret = self._config_secret(exporter, token, credential)
        accel = "kvm" if self.p["parameters"].get("kvm") else None
        pod = k8s_pod.instance_pod(
            self.p["exporterset"], self.p["virtual_target_class"], exporter, self.provisioner,
            self.p["parameters"], self.p["images"], accel=accel, default_images=self.p["default_images"],
        )
        existing = self._read("Secret", secret["metadata"]["name"])
        if self._someone_elses(existing, name):
            return
        self.result["created"].append(name)
        what = f"creating the instance of {self.namespace}/{name}"
        parts = (_config_parts(existing), _config_parts(secret))
        # A 409 (made or changed meanwhile): the next run looks again.
        if existing is None:
            outcome = self._write(what, "create", "Secret", self.namespace, secret, record=parts, ok=(writer.EXISTS,))
        else:
            outcome = self._write(what, "replace", "Secret", self.namespace, secret["metadata"]["name"], secret,
                                  record=parts, ok=(writer.CONFLICT,))
        if outcome.written:
            self._write(what, "create", "Pod", self.namespace, pod, ok=(writer.EXISTS,))

    def synced(self, name):
        """Re-sync the config of the running instance of Exporter ``name``."""
        exporter = self.by_name.get(name)
        if exporter is None:
            raise InstanceError(f"Exporter {self.namespace}/{name} is not among owned_exporters")
        if not self.p["controller_tls_ca"]:
            return
        pod = self._read("Pod", name)
        if pod is None or pod["metadata"].get("deletionTimestamp") or not k8s_objects.controlled_by(
                pod, exporter["metadata"].get("uid")):
            return  # nothing of its own runs: the run that makes its Pod writes the config
        token, credential = self._credential(exporter)
        if token is None:
            return
        secret = self._config_secret(exporter, token, credential)
        existing = self._read("Secret", secret["metadata"]["name"])
        if self._someone_elses(existing, name):
            return
        if existing is not None and _secret_text(existing) == secret["stringData"]:
            self._note_inputs(name, existing, secret)
            return
        # Just before acting, on fresh reads: a leased exporter keeps the
        # config it runs with until its lease ends. The restart follows the
        # reset's protocol (disabled first, then seen unleased).
        # Run only when not in check mode; what it changes is recorded below.
        def restart():
            what = f"re-syncing the config of {self.namespace}/{name}"
            if existing is None:
                outcome = self._write(what, "create", "Secret", self.namespace, secret, record=None,
                                      ok=(writer.EXISTS, writer.GONE))
            else:
                secret["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                outcome = self._write(what, "replace", "Secret", self.namespace, secret["metadata"]["name"], secret,
                                      record=None, ok=(writer.CONFLICT, writer.GONE))
            if outcome.written:
                self._write(what, "delete", "Pod", self.namespace, name, uid=pod["metadata"]["uid"],
                            grace_period_seconds=0, record=None, ok=(writer.CONFLICT, writer.GONE))

        try:
            why = k8s_apply.restart_unleased(self.api_client, self.p["exporterset"], name,
                                             exporter["metadata"].get("uid"), restart,
                                             check_mode=self.module.check_mode)
        except k8s_apply.ApplyError as exc:
            raise InstanceError(str(exc)) from exc
        self.result["waiting" if why else "resynced"].append(name)
        if not why:
            self.changes.record(f"Secret/{secret['metadata']['name']}", _config_parts(existing),
                                _config_parts(secret))
            self.changes.record(f"Pod/{name}", _gone(pod), None)

    def _note_inputs(self, name, existing, secret):
        """An equal config Secret noting an older digest gets the new one (its
        content, and so the exporter, untouched: no lease matters)."""
        digest = config_sync.recorded_digest(secret)
        if config_sync.recorded_digest(existing) == digest:
            return
        self.result["noted"].append(name)
        # The Secret as read (its resourceVersion the precondition), the digest added.
        body = dict(existing, metadata=dict(existing["metadata"]))
        body["metadata"]["annotations"] = {**(existing["metadata"].get("annotations") or {}),
                                           config_sync.ANNOTATION_CONFIG_INPUTS: digest}
        self._write(f"noting the config inputs of {self.namespace}/{name}", "replace", "Secret", self.namespace,
                    body["metadata"]["name"], body, record=(_config_parts(existing), _config_parts(secret)),
                    ok=(writer.CONFLICT, writer.GONE))

    def _someone_elses(self, secret, name):
        """Whether ``secret`` (read by the name of Exporter ``name``'s config)
        is someone else's: never overwritten with the token; the Exporter
        waits."""
        if secret is None or self._made_for_namesake(secret, name):
            return False
        self.result["waiting"].append(name)
        return True

    @staticmethod
    def _made_for_namesake(obj, name):
        """Whether an Exporter called ``name`` (this one or an earlier one) controls ``obj``."""
        return k8s_objects.controller_of(obj, constants.EXPORTER.kind) == name

    def _delete_foreign_pod(self, pod):
        meta = pod["metadata"]
        self.result["deleted"].append(meta["name"])
        self._write(f"deleting {self.namespace}/{meta['name']}", "delete", "Pod", self.namespace, meta["name"],
                    uid=meta["uid"], grace_period_seconds=0, record=(_gone(pod), None),
                    ok=(writer.CONFLICT, writer.GONE))

    def reset(self, name):
        """Reset the instance of Exporter ``name`` in its running Pod, or
        remove its Pod and config Secret for a fresh one."""
        exporter = self.by_name.get(name)
        if exporter is None:
            raise InstanceError(f"Exporter {self.namespace}/{name} is not among owned_exporters")
        in_pod = provisioners.get(self.provisioner).reset_in_pod
        if in_pod is None or not self.granted.on("exec-reset"):
            self.absent(name)  # a fresh Pod is this provisioner's reset, or the one the account allows
            return
        pod = self._read("Pod", name)
        phase = ((pod or {}).get("status") or {}).get("phase")
        if pod is None or not k8s_objects.controlled_by(pod, exporter["metadata"].get("uid")):
            why = "it has no Pod of its own"
        elif pod["metadata"].get("deletionTimestamp"):
            why = "its Pod is being deleted"
        elif phase != "Running":
            why = f"its Pod is {phase or 'not running'}"
        else:
            # Lease safety, on a fresh read just before the reset (k8s/apply.py).
            if k8s_apply.backend_held(self.api_client, self.p["exporterset"], name) is not None:
                self.result["waiting"].append(name)
                return
            if self.module.check_mode:
                self._reset_done(name)
                return
            container, command = in_pod
            code, output = self.core.exec(self.namespace, name, container, command, RESET_EXEC_SECONDS)
            if code == 0:
                self._reset_done(name)
                return
            said = " ".join(output.split())[-300:] or "no output"
            why = f"its reset in the Pod failed (exit code {code}: {said})"
        self.module.warn(f"{self.namespace}/{name}: not reset in its running Pod, {why}; a fresh Pod replaces it")
        self.absent(name)

    def _reset_done(self, name):
        self.result["reset"].append(name)
        self.changes.record(f"Pod/{name}", {"instance": "as it ran"}, {"instance": "reset in place"})

    def absent(self, name):
        # Lease safety, on a fresh read just before the instance goes
        # (k8s/apply.py): a lease taken since the plan keeps it.
        if k8s_apply.backend_held(self.api_client, self.p["exporterset"], name) is not None:
            self.result["waiting"].append(name)
            return
        removed = False
        # Without Secret deletion the config Secret stays: rewritten for the
        # next Pod, or gone with its Exporter by garbage collection.
        kept = () if self.granted.on("secret-delete") else ("Secret",)
        for kind, object_name in (("Pod", name), ("Secret", k8s_pod.config_secret_name(name))):
            if kind in kept:
                continue
            found = self._read(kind, object_name)
            # Only what an Exporter of this name controls is the pool's to delete;
            # the precondition keeps a namesake made since the read.
            if found is None or not self._made_for_namesake(found, name):
                continue
            removed = True
            self._write(f"deleting {self.namespace}/{object_name}", "delete", kind, self.namespace, object_name,
                        uid=found["metadata"]["uid"], grace_period_seconds=0, record=(_gone(found), None),
                        ok=(writer.CONFLICT, writer.GONE))
        if removed:
            self.result["deleted"].append(name)


ARGUMENT_SPEC = dict(
    **exporterset_options.PROVISIONER,
    images=dict(type="dict", default={}),
    default_images=dict(type="dict", default={}, options={
        role: dict(type="dict", options=dict(
            image=dict(type="str", required=True),
            imagePullPolicy=dict(type="str", choices=["Always", "IfNotPresent", "Never"], default="IfNotPresent"),
        )) for role in ("exporter", "runtime", "images")}),
    controller_tls_ca=dict(type="str", default=""),
    state=dict(type="str", choices=["present", "absent", "synced", "reset"], default="present"),
    **exporterset_options.DENIED,
)

# An instance's failure (InstanceError) is failed in ``run``, with what was done.
ERRORS = api_errors.module_errors()


def run(module):
    """Do what ``module.params`` ask and end with ``module.exit_json`` or
    ``module.fail_json``. ``module`` is built from ``ARGUMENT_SPEC`` and the
    connection options (``k8s_client.AUTH_ARG_SPEC``)."""
    manager = PodManager(module)
    act = {"present": manager.present, "absent": manager.absent, "synced": manager.synced,
           "reset": manager.reset}[module.params["state"]]
    names = module.params["exporters"]
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(names)))) as pool:
            for future in [pool.submit(act, name) for name in names]:
                future.result()
    except InstanceError as exc:
        module.fail_json(msg=str(exc), **{k: sorted(v) for k, v in manager.result.items()})
    finally:
        manager.api_client.close()
    result = {key: sorted(value) for key, value in manager.result.items()}
    module.exit_json(**with_diff(module, dict(
        changed=bool(result["created"] or result["deleted"] or result["resynced"] or result["noted"]
                     or result["reset"]),
        **result), manager.changes.before, manager.changes.after))
