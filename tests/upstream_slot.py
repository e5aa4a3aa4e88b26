"""The objects upstream's Jumpstarter operator creates for one exporter-set
controller (docs/install.md; the slot as /work/shared/docs/UPSTREAM-OPERATOR.md
describes it): ServiceAccount, Role, RoleBinding and Deployment, written
from that description, for a test to run our image in the slot unchanged."""

from __future__ import annotations

import re

# The Role's rules, row by row as the slot gives them; nothing else.
SLOT_RULES = (
    ("virtualtarget.jumpstarter.dev", ("exportersets",), ("get", "list", "watch")),
    ("virtualtarget.jumpstarter.dev", ("exportersets/status", "exportersets/scale"), ("get", "update", "patch")),
    ("virtualtarget.jumpstarter.dev", ("exportersets/finalizers",), ("update",)),
    ("virtualtarget.jumpstarter.dev", ("virtualtargetclasses",), ("get", "list", "watch")),
    ("jumpstarter.dev", ("exporters",), ("get", "list", "watch", "create", "update", "patch", "delete")),
    ("jumpstarter.dev", ("leases",), ("get", "list", "watch")),
    ("", ("pods",), ("get", "list", "watch", "create", "update", "patch", "delete")),
    ("", ("events",), ("create", "patch")),
    ("", ("secrets",), ("get", "list", "watch", "create", "update", "patch")),
    ("", ("configmaps",), ("get", "list", "watch")),
    ("coordination.k8s.io", ("leases",), ("get", "list", "watch", "create", "update", "patch", "delete")),
)


def slot_name(provisioner: str) -> str:
    """``<s>``: lowercased, ``.`` as ``-``, only ``[a-z0-9-]``, ``-`` trimmed."""
    return re.sub(r"[^a-z0-9-]", "", provisioner.lower().replace(".", "-")).strip("-")


def granted() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every grant of the slot's Role."""
    return {(group, resource, verb) for group, resources, verbs in SLOT_RULES
            for resource in resources for verb in verbs}


def slot_objects(jumpstarter: str, namespace: str, provisioner: str, image: str,
                 image_pull_policy: str = "IfNotPresent") -> dict[str, dict]:
    """ServiceAccount, Role, RoleBinding and Deployment of ``provisioner``'s
    controller for the Jumpstarter resource ``jumpstarter`` in ``namespace``."""
    s = slot_name(provisioner)
    name = f"{jumpstarter}-exporterset-{s}"
    labels = {"app": "exporterset-controller", "component": "exporterset-controller",
              "provisioner": s, "controller": jumpstarter}
    meta = lambda n, **extra: {"name": n, "namespace": namespace, "labels": {**labels, **extra}}  # noqa: E731
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": meta(name, **{"app.kubernetes.io/managed-by": "jumpstarter-operator"})}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(f"{name}-role"),
            "rules": [{"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
                      for group, resources, verbs in SLOT_RULES]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": meta(f"{name}-rolebinding"),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-role"},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}
    probe = lambda path, delay, period: {  # noqa: E731
        "httpGet": {"path": path, "port": 8081}, "initialDelaySeconds": delay, "periodSeconds": period,
        "timeoutSeconds": 1, "failureThreshold": 3}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "manager",
                        "image": image,
                        "imagePullPolicy": image_pull_policy,
                        "command": ["/exporter-set-controller"],
                        "args": [f"--provisioner={provisioner}", "--leader-elect",
                                 "--health-probe-bind-address=:8081", "--metrics-bind-address=0"],
                        "env": [{"name": "NAMESPACE",
                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                        "ports": [{"name": "health", "containerPort": 8081}],
                        "livenessProbe": probe("/healthz", 15, 20),
                        "readinessProbe": probe("/readyz", 5, 10),
                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                      "limits": {"cpu": "500m", "memory": "512Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}},
                    }],
                },
            },
        },
    }
    return {"ServiceAccount": account, "Role": role, "RoleBinding": binding, "Deployment": deployment}
