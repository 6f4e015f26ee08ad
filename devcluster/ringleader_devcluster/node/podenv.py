"""Pure: a container's environment as a kubelet builds it (the node's variables, `envFrom`, `env` with
`$(VAR)` references, `valueFrom` field, resource, config map and secret references), and the errors planning a
pod raises. Config maps and secrets come in through `Lookups`; nothing here does I/O."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class UnsupportedPod(Exception):
    """The pod asks for something a process node cannot do; `reason` is a CamelCase status reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class MissingReference(Exception):
    """A config map, secret or key the pod refers to does not exist (yet): the kubelet keeps the pod
    waiting with reason CreateContainerConfigError and retries, and so do we."""


@dataclass(frozen=True)
class Lookups:
    """Reads the node needs while planning. Each returns None when the object does not exist."""

    config_map: Callable[[str, str], Mapping[str, str] | None]
    secret: Callable[[str, str], Mapping[str, str] | None]  # values already base64-decoded

    def data(self, kind: str, namespace: str, name: str, optional: bool) -> Mapping[str, str] | None:
        """The data of config map (`kind` "configmap") or secret `name`: None when it does not exist and the
        reference is optional, MissingReference when it does not exist and is required."""
        obj = (self.config_map if kind == "configmap" else self.secret)(namespace, name)
        if obj is None and not optional:
            raise MissingReference(f'{kind} "{name}" not found')
        return obj


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined references are replaced, undefined ones kept verbatim,
    `$$` escapes to a single `$` (so `$$(VAR)` yields the literal `$(VAR)`)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR_REF.sub(sub, text)


@dataclass(frozen=True)
class PodInputs:
    """What planning one pod reads: the pod (the API's JSON), the objects it refers to, the variables the node
    gives every container, and the pod's and the node's addresses."""

    pod: Mapping[str, Any]
    lookups: Lookups
    base_env: Mapping[str, str]
    pod_ip: str
    host_ip: str

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"]["namespace"])


def field_ref(inputs: PodInputs, path: str) -> str:
    """A fieldRef's value (downward API), as the kubelet fills it in."""
    pod, pod_ip, host_ip = inputs.pod, inputs.pod_ip, inputs.host_ip
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path])
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise UnsupportedPod("UnsupportedFieldRef", f"fieldRef {path!r} is not supported by the process node")


def resource_ref(container: Mapping[str, Any], resource: str) -> str:
    """resourceFieldRef as the raw quantity string (divisors are not applied; "0" when unset)."""
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    kind, _, name = resource.partition(".")
    value = (limits if kind == "limits" else requests).get(name)
    if value is None and kind == "requests":
        value = limits.get(name)
    return "0" if value is None else str(value)


def _lookup_key(kind: str, lookups: Lookups, namespace: str, ref: Mapping[str, Any]) -> str | None:
    optional = bool(ref.get("optional"))
    obj = lookups.data(kind, namespace, ref["name"], optional)
    if obj is None:
        return None
    if ref["key"] not in obj:
        if optional:
            return None
        raise MissingReference(f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
    return obj[ref["key"]]


def resolve_env(inputs: PodInputs, container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment in Kubernetes order: the node's `base_env` (e.g. PATH and
    KUBERNETES_SERVICE_HOST), then `envFrom` sources, then `env` entries, each able to reference earlier
    ones through `$(VAR)`."""
    env: dict[str, str] = dict(inputs.base_env)
    for source in container.get("envFrom") or []:
        env.update(_env_from(source, inputs.lookups, inputs.namespace))
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item or "valueFrom" not in item:
            env[name] = expand_vars(str(item.get("value", "")), env)
        elif (value := _value_from(inputs, container, item)) is not None:
            env[name] = value
    return env


def _env_from(source: Mapping[str, Any], lookups: Lookups, namespace: str) -> dict[str, str]:
    """The variables one `envFrom` entry brings (its ConfigMap's or Secret's keys, prefixed)."""
    prefix, out = source.get("prefix", ""), {}
    for kind, field_name in (("configmap", "configMapRef"), ("secret", "secretRef")):
        ref = source.get(field_name)
        if ref and (obj := lookups.data(kind, namespace, ref["name"], bool(ref.get("optional")))) is not None:
            out.update({prefix + key: val for key, val in obj.items()})
    return out


def _value_from(inputs: PodInputs, container: Mapping[str, Any], item: Mapping[str, Any]) -> str | None:
    """One `env` entry's `valueFrom`; None for an optional reference that is missing."""
    src, namespace, lookups = item["valueFrom"], inputs.namespace, inputs.lookups
    if "fieldRef" in src:
        return field_ref(inputs, src["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in src:
        ref = src["resourceFieldRef"]
        target = container
        if ref.get("containerName"):
            containers = inputs.pod["spec"]["containers"]
            target = next((c for c in containers if c["name"] == ref["containerName"]), container)
        return resource_ref(target, ref["resource"])
    if "configMapKeyRef" in src:
        return _lookup_key("configmap", lookups, namespace, src["configMapKeyRef"])
    if "secretKeyRef" in src:
        return _lookup_key("secret", lookups, namespace, src["secretKeyRef"])
    raise UnsupportedPod("UnsupportedEnvSource", f"env {item['name']}: unsupported valueFrom {sorted(src)}")
