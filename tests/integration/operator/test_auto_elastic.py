"""Auto-elastic admission on the dev cluster, with kwok fake nodes of 4 GPUs added and removed: an elastic job
of 4 workers of 2 GPUs (minReplicas 2) starts with the 2 that fit one node instead of waiting, grows to 4 when a
second node joins, and shrinks back to 2 instead of waiting when that node is drained and removed (as a cluster
autoscaler's scale-down does). kwok runs nothing: the pods stay Running, the world's size is what is checked."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from tests.support.cluster import SHARES_FAKE_NODES, wait_for
from tests.support.fakenodes import add_fake_nodes, fake_node, pool_job, remove_fake_nodes
from tests.support.jobs import create, get, pods_of

pytestmark = [pytest.mark.usefixtures("operator"), SHARES_FAKE_NODES]

POOL = "ringleader.dev/pool"


def elastic(status: dict[str, Any]) -> tuple[int, str] | None:
    e = status.get("elastic")
    return None if e is None else (e["workers"], e["reason"])


def world(core: client.CoreV1Api, ns: str, job: str, size: int) -> dict[str, str] | None:
    """pod -> node of the job's `size` workers of a world of `size`, once all are bound and none other is left."""
    pods = [p for p in pods_of(core, ns, job) if not p.metadata.deletion_timestamp]
    sizes = {(p.metadata.annotations or {}).get("ringleader.dev/workers") for p in pods}
    bound = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
    return bound if len(bound) == len(pods) == size and sizes == {str(size)} else None


def resized(core: client.CoreV1Api, ns: str, job: str) -> list[str]:
    items = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={job}").items
    return [e.message for e in items if e.reason == "Resized"]


def test_an_elastic_job_starts_with_what_fits_grows_when_a_node_joins_and_shrinks_when_it_goes(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    pool = f"elastic-{uuid.uuid4().hex[:6]}"
    nodes = add_fake_nodes(core, [fake_node(f"{pool}-n0", {POOL: pool}, 4)])
    try:
        body = pool_job("grow", 4, pool, 2)
        body["spec"]["workers"]["minReplicas"] = 2
        body["spec"]["checkpoint"] = {"intervalSteps": 20}  # growing resumes from a checkpoint: only then
        body["spec"]["runPolicy"] = {"elasticGrowAfterSeconds": 0}
        create(custom, namespace, body)

        # 8 GPUs asked, 4 in the pool: 2 workers now, saying why.
        wait_for("2 workers bound", lambda: world(core, namespace, "grow", 2), timeout=60)
        status = get(custom, namespace, "grow")["status"]
        assert elastic(status) == (2, "StartedSmaller")
        assert status["elastic"]["message"] == (
            "2 of 4 workers: 4 do not fit (needs 8 nvidia.com/gpu, 4 allocatable); grows when room appears"
        )
        assert status["workers"].endswith("/2 of 4")

        # A second node joins: the world grows to 4 (its node event wakes the job; no retry period waited out).
        nodes += add_fake_nodes(core, [fake_node(f"{pool}-n1", {POOL: pool}, 4)])
        placed = wait_for("4 workers bound", lambda: world(core, namespace, "grow", 4), timeout=25)
        assert set(placed.values()) == set(nodes)
        status = get(custom, namespace, "grow")["status"]
        assert elastic(status) == (4, "Grown") and status["elastic"]["message"] == "2 -> 4 of 4 workers: room appeared"

        # The node is drained (its pods evicted) and removed: the evicted ranks' replacements find no room, and the
        # world shrinks to what the remaining node holds instead of waiting.
        core.patch_node(nodes[1], {"spec": {"unschedulable": True}})
        for name in [n for n, on in placed.items() if on == nodes[1]]:
            eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
            core.create_namespaced_pod_eviction(name, namespace, eviction)
        remove_fake_nodes(core, nodes[1:])
        nodes = nodes[:1]
        wait_for("2 workers bound", lambda: world(core, namespace, "grow", 2), timeout=60)
        status = get(custom, namespace, "grow")["status"]
        assert elastic(status) == (2, "Shrunk")
        assert status["elastic"]["message"].startswith("4 -> 2 of 4 workers: 2 of its ranks found no room beside")
        assert status["phase"] != "Failed"
        # Each resize says why in the job's events.
        wait_for("the resizes' events", lambda: len(resized(core, namespace, "grow")) >= 2, timeout=20)
        said = resized(core, namespace, "grow")
        assert any("(2 -> 4 of 4 workers: room appeared): every worker restarts" in m for m in said), said
        assert any("(4 -> 2 of 4 workers: 2 of its ranks found no room" in m for m in said), said
    finally:
        remove_fake_nodes(core, nodes)
