"""What a round does with the stragglers the scraper found (runPolicy.stragglerThreshold, stragglerPolicy)."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan
from ringleader_operator.stragglers import Slow, Stragglers

from ..builders import NOW, conds, job, pod
from .test_stall import PODS, RUNNING_SINCE, running

SLOW = Slow("j-worker-1", Role.WORKER, 1, "n2", 0.31, 0.05)


def found(*ranks: Slow, running_since: str = RUNNING_SINCE) -> Stragglers:
    return Stragglers(running_since, ranks, 2.0, 30)


def decide(status: dict[str, Any], slow: Stragglers | None, pods: list[dict[str, Any]] = PODS, **policy: Any) -> Any:
    run_policy = {"stragglerThreshold": 2.0, "stragglerWindowSeconds": 30, **policy}
    return plan(Reading(job(status=status, runPolicy=run_policy), pods, True, slow=slow), NOW)


@pytest.mark.parametrize(
    ("policy", "rank", "slow", "want"),
    [
        # (runPolicy, status.ranks[worker-1], the reading) -> (Straggler, deleted, worker-1's straggles, phase)
        ({}, {}, found(SLOW), ("True", [], 0, "Running")),  # Report: named only
        ({"stragglerPolicy": "Replace"}, {}, found(SLOW), ("True", ["j-worker-1"], 1, "Restarting")),
        ({"stragglerPolicy": "Replace"}, {"straggles": 1}, found(SLOW), ("True", [], 1, "Running")),  # once
        ({}, {}, found(SLOW, running_since="2026-01-01T00:00:00Z"), (None, [], 0, "Running")),  # an old reading
        ({}, {}, None, (None, [], 0, "Running")),
    ],
    ids=["report", "replace", "replaced-once-already", "old", "none"],
)
def test_stragglers(
    policy: dict[str, Any], rank: dict[str, Any], slow: Stragglers | None, want: tuple[Any, ...]
) -> None:
    status = running()
    status["ranks"]["worker-1"] |= rank
    pods = [PODS[0], pod(Role.WORKER, 1, "Running", attempt=rank.get("straggles", 0))]  # its current attempt
    p = decide(status, slow, pods, **policy)
    got = (conds(p).get("Straggler"), p.delete_pods, p.status.ranks["worker-1"].straggles, p.status.phase)
    assert got == want
    if want[0] == "True":
        assert any(
            e.type == "Warning" and e.message.startswith("worker 1 (pod j-worker-1 on node n2)") for e in p.events
        )


def test_a_replaced_straggler_comes_back_preferring_another_node_and_nothing_is_counted() -> None:
    p = decide(running(), found(SLOW), stragglerPolicy="Replace")
    rank = p.status.ranks["worker-1"]
    assert (rank.attempt, rank.restarts, rank.avoid_node, rank.last_reason) == (1, 0, "n2", "RankStraggled")
    # The pod goes with the trainer's grace (it saves where it stops); gone, its replacement prefers another node.
    going = [PODS[0], pod(Role.WORKER, 1, "Running", deleting=True, deadline=NOW)]
    p2 = plan(Reading(job(status=p.status.model_dump(by_alias=True)), going, True), NOW)
    assert not p2.create_pods and p2.status.ranks["worker-1"].restarts == 0
    p3 = plan(Reading(job(status=p2.status.model_dump(by_alias=True)), [PODS[0]], True), NOW)
    (made,) = p3.create_pods
    preferred = made["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    term = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n2"]}
    assert preferred == [{"weight": 100, "preference": {"matchExpressions": [term]}}]
    assert p3.status.replica_statuses["worker"].restarts == 0


def test_straggler_turns_false_when_a_reading_finds_none() -> None:
    status = running()
    status["conditions"].append({"type": "Straggler", "status": "True", "reason": "RanksStraggling"})
    p = decide(status, found())
    c = next(c for c in p.status.conditions if c.type == "Straggler")
    assert (c.status, c.reason, c.message) == ("False", "NoStragglers", "no rank works 2x its peers' median or more")
    assert "Straggler" not in conds(decide(running(), found()))  # never named: no condition at all
