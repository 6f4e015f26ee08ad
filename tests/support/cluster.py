"""Small builders and waits shared by the dev-cluster integration tests. Every wait has a deadline."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from ringleader_devcluster import realnode
from ringleader_devcluster.layout import Layout
from ringleader_devcluster.waiting import WaitTimeout, wait_until

T = TypeVar("T")

PROCESS_NODE_SELECTOR = {"ringleader.dev/process-node": "true"}

# Tests whose assertions count the process node's free GPUs ("needs 6 nvidia.com/gpu, 2 free") run one after
# another on one xdist worker (make integration runs the tests two at a time, --dist loadgroup).
COUNTS_GPUS = pytest.mark.xdist_group("process-node-gpus")
# Likewise tests that add kwok fake nodes and wait for every one of them gone again (`type=kwok`).
SHARES_FAKE_NODES = pytest.mark.xdist_group("kwok-fake-nodes")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60.0, every: float = 0.2) -> T:
    """Poll `fn` until it returns something truthy; fail the test naming `what` after `timeout` seconds."""
    try:
        return wait_until(what, fn, timeout, every)
    except WaitTimeout as e:
        raise AssertionError(str(e)) from None


def python_pod(
    name: str,
    script: str,
    *,
    restart_policy: str = "Never",
    env: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod whose one container `main` runs `python -c script` on the process node."""
    container: dict[str, Any] = {"name": "main", "image": "python:3.11", "command": ["python", "-u", "-c", script]}
    if env:
        container["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": restart_policy,
            "nodeSelector": PROCESS_NODE_SELECTOR,
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            **spec,
        },
    }


def busybox_pod(name: str, script: str, *, memory: str | None = None, restart_policy: str = "Never") -> dict[str, Any]:
    """A pod whose container `main` runs `sh -c script` in the busybox image on the real node."""
    container: dict[str, Any] = {
        "name": "main",
        "image": realnode.BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",  # imported, never pulled
        "command": ["sh", "-c", script],
    }
    if memory:
        container["resources"] = {"limits": {"memory": memory}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart_policy,
            "nodeSelector": {realnode.LABEL: "true"},
            "tolerations": [{"key": realnode.TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "containers": [container],
        },
    }


def pod_phase(core: client.CoreV1Api, ns: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, ns).status.phase)


def wait_phase(core: client.CoreV1Api, ns: str, name: str, phases: set[str], timeout: float = 60.0) -> Any:
    """Wait until the pod's phase is one of `phases`; return the pod."""

    def check() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in phases else None

    return wait_for(f"pod {ns}/{name} to reach {sorted(phases)}", check, timeout)


def gone(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def logs(core: client.CoreV1Api, ns: str, name: str, container: str = "main", **kw: Any) -> str:
    return str(core.read_namespaced_pod_log(name, ns, container=container, **kw))


def kubectl(
    layout: Layout, kubeconfig: Path, *args: str, timeout: float = 30, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the dev cluster's kubectl against `kubeconfig`, exactly as a user would; output captured as text."""
    command = [str(layout.binary("kubectl")), "--kubeconfig", str(kubeconfig), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=check)
