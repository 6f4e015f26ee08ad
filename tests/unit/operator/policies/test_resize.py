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
