"""The Node object's status as a kubelet reports it, pure: capacity, conditions, addresses, node info."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from typing import Any

KUBELET_VERSION = "v1.36.3-ringleader"  # the version of the control plane it joins (versions.env)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: datetime) -> str:
    """A MicroTime, as a Lease's renewTime takes it."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(
    *, cpu: str, memory: str, pods: int, gpus: int, address: str, port: int, now: datetime, since: datetime
) -> dict[str, Any]:
    """The Node's status as a kubelet reports it: capacity, Ready and pressure conditions, addresses
    (InternalIP only, so the API server dials the kubelet endpoint by IP), and the kubelet's port."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)

    def cond(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": _ts(now),
            "lastTransitionTime": _ts(since),
        }

    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": [
            cond("MemoryPressure", False, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", False, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", True, "KubeletReady", "Ringleader process node is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": address}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine()),
            "bootID": "",
            "containerRuntimeVersion": "process://ringleader",
            "kernelVersion": platform.release(),
            "kubeProxyVersion": "",
            "kubeletVersion": KUBELET_VERSION,
            "machineID": "",
            "operatingSystem": "linux",
            "osImage": "Ringleader process node",
            "systemUUID": "",
        },
    }
