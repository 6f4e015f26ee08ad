"""kwok fake nodes made one by one, with the labels and room a test asks for (kwokctl scale makes identical ones):
kwok keeps them Ready and runs their pods as Running without running anything. They carry the dev cluster's fake
taint, so only pods that tolerate it (TOLERATE_FAKE) land there."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client import ApiException
from ringleader_devcluster.controlplane import FAKE_NODE_TAINT

from tests.support.cluster import wait_for
from tests.support.jobs import training_job

TAINT_KEY, TAINT_VALUE = FAKE_NODE_TAINT.split("=")
TOLERATE_FAKE = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def fake_node(name: str, labels: dict[str, str], gpus: int, cpu: str = "32") -> dict[str, Any]:
    room = {"cpu": cpu, "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**labels, "type": "kwok", "kubernetes.io/hostname": name},
            "annotations": {TAINT_KEY: TAINT_VALUE},  # kwok manages nodes annotated so (and no other)
        },
        "spec": {"taints": [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"}]},
        "status": {"allocatable": room, "capacity": room},
    }


def add_fake_nodes(core: client.CoreV1Api, nodes: Iterable[dict[str, Any]]) -> list[str]:
    """Create the nodes and wait until kwok has them Ready with their room; returns their names."""
    names = []
    for body in nodes:
        core.create_node(body)
        names.append(body["metadata"]["name"])

    def ready() -> bool:
        for name in names:
            node = core.read_node(name)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            if conditions.get("Ready") != "True" or not (node.status.allocatable or {}).get("nvidia.com/gpu"):
                return False
        return True

    wait_for(f"{len(names)} fake nodes Ready", ready, timeout=60)
    return names


def remove_fake_nodes(core: client.CoreV1Api, names: Iterable[str]) -> None:
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise


def pool_job(name: str, workers: int, pool: str, gpus: int) -> dict[str, Any]:
    """A TrainingJob of `workers` pods of `gpus` GPUs each on the fake nodes labelled ringleader.dev/pool=`pool`
    (which run nothing: its pods stay Running until deleted)."""
    body = training_job(name, "pass", workers=workers)
    spec = body["spec"]["workers"]
    spec["gpus"] = gpus
    spec["template"]["spec"]["nodeSelector"] = {"ringleader.dev/pool": pool}
    spec["template"]["spec"]["tolerations"] = [TOLERATE_FAKE]
    return body
