"""Resizing, table-style: a changed worker count re-forms the world; ranks the job lost go."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.policies.resize import drop_unwanted_ranks, reform_resized_world

from ..builders import TEMPLATE, job, pod, round_of


def world_pod(index: int, workers: int | None, **kw: Any) -> dict[str, Any]:
    p = pod(Role.WORKER, index, "Running", **kw)
    if workers is not None:
        p["metadata"]["annotations"]["ringleader.dev/workers"] = str(workers)
    return p


@pytest.mark.parametrize(
    ("replicas", "pods", "reformed"),
    [
        (2, [world_pod(0, 2), world_pod(1, 2)], []),  # the same world
        (2, [world_pod(0, None), world_pod(1, None)], []),  # made before worlds were recorded: taken as current
        (3, [world_pod(0, 2), world_pod(1, 2)], ["j-worker-0", "j-worker-1"]),
        (1, [world_pod(0, 2), world_pod(1, 2)], ["j-worker-0", "j-worker-1"]),
        (3, [world_pod(0, 2), world_pod(1, 2, deleting=True)], ["j-worker-0"]),  # one already going
    ],
    ids=["same", "unrecorded", "up", "down", "one-going"],
)
def test_reform_resized_world(replicas: int, pods: list[dict[str, Any]], reformed: list[str]) -> None:
    r = round_of(job(workers={"replicas": replicas, "template": TEMPLATE}), pods)
    reform_resized_world(r)
    assert r.plan.delete_pods == reformed
    assert (r.status.phase == "Restarting") is bool(reformed)
    assert [e.reason for e in r.plan.events] == (["Resized"] if reformed else [])
    # The policies after this one see the reformed pods as going.
    assert sorted(p.name for p in r.observed if p.deleting) == sorted(
        {*reformed, *(x["metadata"]["name"] for x in pods if "deletionTimestamp" in x["metadata"])}
    )


def test_drop_unwanted_ranks_deletes_their_pods_and_forgets_them() -> None:
    status = {"ranks": {"worker-0": {"restarts": 1}, "worker-2": {"restarts": 3}, "ps-0": {}}}
    pods = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 2, "Running"), pod(Role.WORKER, 3, "Running",
            deleting=True)]  # fmt: skip
    r = round_of(job(status=status), pods)
    drop_unwanted_ranks(r)
    assert r.plan.delete_pods == ["j-worker-2"]  # worker-3 goes already
    assert sorted(r.status.ranks) == ["worker-0"] and r.status.ranks["worker-0"].restarts == 1


@pytest.mark.parametrize(
    ("rendezvous", "old", "new", "deleted", "created"),
    [
        ("c10d", 2, 3, [], [2]),
        ("c10d", 3, 2, [2], []),
        ("static", 2, 3, [0, 1], [2]),  # re-formed: every worker goes (the new rank's pod is made gated at once)
    ],
)
def test_a_c10d_job_is_resized_in_place(
    rendezvous: str, old: int, new: int, deleted: list[int], created: list[int]
) -> None:
    """torchrun's agents meet again by themselves: a resize adds or removes pods, the others stay (their pods carry
    no world size) and nothing restarts on the operator's side; a static world is re-formed."""
    from ringleader_api import ConditionType
    from ringleader_operator.admission import Cluster
    from ringleader_operator.builders import build_pod
    from ringleader_operator.reading import Reading
    from ringleader_operator.reconcile import plan

    from ..builders import gpu_node

    elastic = {"minReplicas": 1, "maxReplicas": 4, "template": TEMPLATE}
    spec = {"torchrun": {"rendezvous": rendezvous}}
    before = job(workers={**elastic, "replicas": old}, **spec)
    pods = []
    for i in range(old):  # as the operator made them, running
        made = build_pod(before, Role.WORKER, i)
        made["metadata"]["ownerReferences"][0]["uid"] = "u"
        made["spec"].pop("schedulingGates", None)  # released and bound long ago
        made["spec"]["nodeName"] = "n1"
        pods.append({**made, "status": pod(Role.WORKER, i, "Running")["status"]})
    running = plan(Reading(before, pods, True), "2026-01-01T00:00:00Z")
    status = running.status.model_dump(by_alias=True)
    p = plan(
        Reading(job(status, workers={**elastic, "replicas": new}, **spec), pods, True),
        "2026-01-01T00:00:05Z",
        Cluster([gpu_node(8)], pods),
    )
    restarting = any(c.type == ConditionType.RESTARTING and c.status == "True" for c in p.status.conditions)
    assert sorted(p.delete_pods) == [f"j-worker-{i}" for i in deleted]
    assert restarting is (rendezvous == "static")
    assert [x["metadata"]["name"] for x in p.create_pods] == [f"j-worker-{i}" for i in created]
