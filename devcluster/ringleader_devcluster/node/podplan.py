"""Pure translation of a Pod object into what the process node must do to run it.

Contract: `plan_pod(pod, lookups, ...)` takes the Pod as a plain dict (the API's JSON) and returns a `PodPlan`,
or raises `UnsupportedPod` naming the field the process node cannot honour. Nothing here touches the network,
the file system or the API server: config maps, secrets and service-account tokens come in through `Lookups`,
so the whole translation is table-testable. The containers' environment is built in podenv.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .podenv import (
    Lookups,
    MissingReference,
    PodInputs,
    UnsupportedPod,
    expand_vars,
    field_ref,
    resolve_env,
    resource_ref,
)
from .probe_spec import InvalidProbe, Probe, parse_probe

GPU_RESOURCE = "nvidia.com/gpu"

# Volume sources the node maps to directories. Anything else makes the pod unsupported.
SUPPORTED_VOLUME_SOURCES = (
    "emptyDir",
    "hostPath",
    "persistentVolumeClaim",
    "configMap",
    "secret",
    "projected",
    "downwardAPI",
)


@dataclass(frozen=True)
class VolumeMount:
    """One volume directory bound at `mount_path` inside the container's mount namespace."""

    volume: str
    mount_path: str
    sub_path: str = ""
    read_only: bool = False


@dataclass(frozen=True)
class VolumePlan:
    """Where a volume's directory lives on the host and what files the node writes into it.

    kind is one of: "dir" (emptyDir, PVC: a directory the node owns), "host" (hostPath: the path itself),
    "files" (configMap, secret, projected, downwardAPI: the node writes `files`, path -> bytes).
    `token_audiences` lists (path, audience, expirationSeconds) for projected service-account tokens, which
    the node requests from the API server when it prepares the volume.
    """

    name: str
    kind: str
    host_path: str = ""
    host_path_type: str = ""
    claim: str = ""
    files: Mapping[str, bytes] = field(default_factory=dict)
    token_requests: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    image: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    working_dir: str
    mounts: tuple[VolumeMount, ...]
    run_as_user: int | None
    run_as_group: int | None
    gpus: int
    init: bool = False
    startup: Probe | None = None
    readiness: Probe | None = None
    liveness: Probe | None = None
    logs_on_error: bool = False  # terminationMessagePolicy FallbackToLogsOnError


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    uid: str
    host_network: bool
    hostname: str
    subdomain: str
    restart_policy: str
    grace_seconds: int
    init_containers: tuple[ContainerPlan, ...]
    containers: tuple[ContainerPlan, ...]
    volumes: tuple[VolumePlan, ...]

    @property
    def gpus(self) -> int:
        """GPUs the pod holds: like the kubelet, the max of any init container and the sum of the others."""
        inits = max((c.gpus for c in self.init_containers), default=0)
        return max(inits, sum(c.gpus for c in self.containers))


def _gpus(container: Mapping[str, Any]) -> int:
    res = container.get("resources") or {}
    raw = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0
    try:
        return int(raw)
    except (TypeError, ValueError) as e:
        raise UnsupportedPod("InvalidGPURequest", f"{GPU_RESOURCE}={raw!r} is not a whole number") from e


def _key_items(data: Mapping[str, str], items: list[Mapping[str, Any]] | None, what: str) -> dict[str, bytes]:
    if not items:
        return {k: v.encode() for k, v in data.items()}
    out: dict[str, bytes] = {}
    for item in items:
        if item["key"] not in data:
            raise MissingReference(f"couldn't find key {item['key']} in {what}")
        out[item["path"]] = data[item["key"]].encode()
    return out


def _object_files(
    kind: str, lookups: Lookups, namespace: str, obj_name: str, src: Mapping[str, Any]
) -> dict[str, bytes]:
    """Files of a config map or secret volume source (all keys, or `items`); none when it is optional and
    missing; MissingReference when it is required and missing."""
    data = lookups.data(kind, namespace, obj_name, bool(src.get("optional")))
    return {} if data is None else _key_items(data, src.get("items"), obj_name)


def _downward_files(inputs: PodInputs, items: list[Mapping[str, Any]]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    pod = inputs.pod
    meta = pod.get("metadata") or {}
    for item in items:
        if "fieldRef" in item:
            path = item["fieldRef"]["fieldPath"]
            if path in ("metadata.labels", "metadata.annotations"):
                values = meta.get(path.split(".")[1]) or {}
                text = "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
            else:
                text = field_ref(inputs, path)
        else:
            ref = item["resourceFieldRef"]
            container = next(c for c in pod["spec"]["containers"] if c["name"] == ref.get("containerName"))
            text = resource_ref(container, ref["resource"])
        out[item["path"]] = text.encode()
    return out


def plan_volume(inputs: PodInputs, volume: Mapping[str, Any]) -> VolumePlan:
    """How one volume becomes a directory. Raises UnsupportedPod for sources the node cannot map."""
    name = volume["name"]
    sources = [k for k in volume if k != "name"]
    if len(sources) != 1 or sources[0] not in SUPPORTED_VOLUME_SOURCES:
        raise UnsupportedPod(
            "UnsupportedVolume",
            f"volume {name!r}: source {sources[0] if sources else 'none'!r} is not supported by the process "
            f"node (supported: {', '.join(SUPPORTED_VOLUME_SOURCES)})",
        )
    kind = sources[0]
    src = volume[kind] or {}
    if kind == "emptyDir":
        return VolumePlan(name=name, kind="dir")
    if kind == "hostPath":
        return VolumePlan(name=name, kind="host", host_path=src["path"], host_path_type=src.get("type", ""))
    if kind == "persistentVolumeClaim":
        return VolumePlan(name=name, kind="dir", claim=src["claimName"])
    if kind == "projected":  # the service-account volume every pod gets from the ServiceAccount admission plugin
        return _projected(inputs, name, src)
    files = _files(inputs, {kind: src})
    assert files is not None  # the supported sources left all have files
    return VolumePlan(name=name, kind="files", files=files)


def _files(inputs: PodInputs, source: Mapping[str, Any]) -> dict[str, bytes] | None:
    """The files of a configMap, secret or downwardAPI source (a volume's or a projected part); None for
    any other source."""
    namespace, lookups = inputs.namespace, inputs.lookups
    if (src := source.get("configMap")) is not None:
        return _object_files("configmap", lookups, namespace, src["name"], src)
    if (src := source.get("secret")) is not None:
        return _object_files("secret", lookups, namespace, src.get("secretName") or src["name"], src)
    if (src := source.get("downwardAPI")) is not None:
        return _downward_files(inputs, src.get("items") or [])
    return None


def _projected(inputs: PodInputs, name: str, src: Mapping[str, Any]) -> VolumePlan:
    files: dict[str, bytes] = {}
    tokens: list[tuple[str, str, int]] = []
    for part in src.get("sources") or []:
        if "serviceAccountToken" in part:
            t = part["serviceAccountToken"]
            tokens.append((t["path"], t.get("audience", ""), int(t.get("expirationSeconds", 3607))))
        elif (more := _files(inputs, part)) is not None:
            files.update(more)
        else:
            raise UnsupportedPod("UnsupportedVolume", f"volume {name!r}: projected source {sorted(part)} not supported")
    return VolumePlan(name=name, kind="files", files=files, token_requests=tuple(tokens))


def _container_plan(
    inputs: PodInputs, container: Mapping[str, Any], volume_names: set[str], init: bool
) -> ContainerPlan:
    name = container["name"]
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if not command:
        # The image is recorded, never pulled, so its ENTRYPOINT is unknown to us.
        raise UnsupportedPod(
            "ContainerCannotRun",
            f"container {name!r}: the process node cannot read image {container.get('image')!r}'s entrypoint;"
            " set spec.containers[].command",
        )
    env = resolve_env(inputs, container)
    argv = tuple(expand_vars(a, env) for a in command + args)
    mounts = _mounts(name, container, volume_names)
    try:
        probes = {k: parse_probe(container.get(f"{k}Probe"), container) for k in ("startup", "readiness", "liveness")}
    except InvalidProbe as e:
        raise UnsupportedPod("InvalidProbe", str(e)) from e
    psc = (inputs.pod.get("spec") or {}).get("securityContext") or {}
    csc = container.get("securityContext") or {}
    run_as_user = csc.get("runAsUser", psc.get("runAsUser"))
    run_as_group = csc.get("runAsGroup", psc.get("runAsGroup"))
    return ContainerPlan(
        name=name,
        image=str(container.get("image", "")),
        argv=argv,
        env=env,
        working_dir=container.get("workingDir", ""),
        mounts=mounts,
        run_as_user=run_as_user,
        run_as_group=run_as_group,
        gpus=_gpus(container),
        init=init,
        # Init containers are never probed (the API server rejects probes on them).
        startup=None if init else probes["startup"],
        readiness=None if init else probes["readiness"],
        liveness=None if init else probes["liveness"],
        logs_on_error=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
    )


def _mounts(name: str, container: Mapping[str, Any], volume_names: set[str]) -> tuple[VolumeMount, ...]:
    """The container's volume mounts; UnsupportedPod for one of a volume the pod does not have."""
    mounts = []
    for m in container.get("volumeMounts") or []:
        if m["name"] not in volume_names:
            raise UnsupportedPod(
                "InvalidVolumeMount", f"container {name!r}: volumeMount of unknown volume {m['name']!r}"
            )
        mounts.append(
            VolumeMount(
                volume=m["name"],
                mount_path=m["mountPath"],
                sub_path=m.get("subPath", ""),
                read_only=bool(m.get("readOnly")),
            )
        )
    return tuple(mounts)


def plan_pod(
    pod: Mapping[str, Any],
    lookups: Lookups,
    base_env: Mapping[str, str],
    pod_ip: str,
    host_ip: str,
) -> PodPlan:
    """Translate a bound Pod into a PodPlan.

    Raises UnsupportedPod for features the process node cannot run (the pod then fails with that reason)
    and MissingReference while a referenced config map or secret is missing (the pod waits and retries).
    """
    meta, spec = pod["metadata"], pod["spec"]
    if spec.get("ephemeralContainers"):
        raise UnsupportedPod("UnsupportedFeature", "ephemeral containers are not supported by the process node")
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            raise UnsupportedPod(
                "UnsupportedFeature", f"init container {c['name']!r}: sidecar containers are not supported"
            )
    inputs = PodInputs(pod, lookups, base_env, pod_ip, host_ip)
    volumes = tuple(plan_volume(inputs, v) for v in spec.get("volumes") or [])
    names = {v.name for v in volumes}
    inits = tuple(_container_plan(inputs, c, names, init=True) for c in spec.get("initContainers") or [])
    containers = tuple(_container_plan(inputs, c, names, init=False) for c in spec["containers"])
    grace = spec.get("terminationGracePeriodSeconds")
    return PodPlan(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        host_network=bool(spec.get("hostNetwork")),
        hostname=spec.get("hostname") or meta["name"],
        subdomain=spec.get("subdomain", ""),
        restart_policy=spec.get("restartPolicy", "Always"),
        grace_seconds=30 if grace is None else int(grace),
        init_containers=inits,
        containers=containers,
        volumes=volumes,
    )
