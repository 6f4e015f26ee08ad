"""Pod templates made to run on the real node: its label and taint, one of the images built here, and what Pod
Security "restricted" asks of a pod (non-root, RuntimeDefault seccomp, no privilege escalation, no capabilities,
a read-only root filesystem with an emptyDir at /tmp). Pure: `make demo`, the end-to-end tests and the
benchmarks take a template written for any cluster through here."""

from __future__ import annotations

import copy
from typing import Any

from .realnode import LABEL, TAINT

TOLERATION = {"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
TMP = "tmp"


def on_real_node(template: dict[str, Any], image: str | None = None) -> dict[str, Any]:
    """A copy of `template` (a pod template: {"spec": ...}) that lands on the real node and passes Pod Security
    "restricted"; with `image`, every container runs that image, pulled on each start (a dev tag is pushed
    again after each change). Settings the template already has are kept."""
    out = copy.deepcopy(template)
    spec = out.setdefault("spec", {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), LABEL: "true"}
    spec["tolerations"] = [*(spec.get("tolerations") or []), TOLERATION]
    spec["securityContext"] = {**RESTRICTED_POD, **(spec.get("securityContext") or {})}
    for container in spec.get("containers") or []:
        if image:
            container["image"] = image
            container["imagePullPolicy"] = "Always"
        container["securityContext"] = {**RESTRICTED_CONTAINER, **(container.get("securityContext") or {})}
    return with_empty_dir(out, TMP, "/tmp")  # torch and Python write scratch files there


def with_empty_dir(template: dict[str, Any], name: str, path: str) -> dict[str, Any]:
    """`template` (changed in place, and returned) with an emptyDir volume `name` mounted at `path` in every
    container that mounts nothing there yet: writable scratch space under a read-only root filesystem."""
    spec = template.setdefault("spec", {})
    for container in spec.get("containers") or []:
        mounts = container.setdefault("volumeMounts", [])
        if not any(m.get("mountPath") == path for m in mounts):
            mounts.append({"name": name, "mountPath": path})
    if not any(v.get("name") == name for v in spec.get("volumes") or []):
        spec["volumes"] = [*(spec.get("volumes") or []), {"name": name, "emptyDir": {}}]
    return template
