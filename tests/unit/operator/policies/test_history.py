"""status.ranks stays short: ranks replaced alike share an entry, and past MAX_RANK_ENTRIES the least recently
replaced settled ranks are forgotten (counted in ranksForgotten), never a rank whose replacement is under way."""

from __future__ import annotations

import json
from typing import Any

from ringleader_api import MAX_RANK_ENTRIES, Role
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from ..builders import NOW, TEMPLATE, job, pod


def replaced(i: int, seen: bool = True) -> dict[str, Any]:
    """Worker i, restarted once at its own second (oldest first), running again when `seen`."""
    when = f"2025-12-31T23:{i // 60:02d}:{i % 60:02d}Z"
    return {"restarts": 1, "podSeen": seen, "lastReason": "RankFailed", "lastReplaced": when}


def running(n: int) -> list[dict[str, Any]]:
    return [pod(Role.WORKER, i, "Running") for i in range(n)]


def test_past_the_limit_the_least_recently_replaced_settled_ranks_are_forgotten() -> None:
    n = MAX_RANK_ENTRIES + 36
    status = {"ranks": {f"worker-{i}": replaced(i) for i in range(n)}}
    p = plan(Reading(job(status=status, workers={"replicas": n, "template": TEMPLATE}), running(n), True), NOW)
    kept = {k for k, v in p.status.ranks.items() if v.restarts}
    assert kept == {f"worker-{i}" for i in range(36, n)} and p.status.ranks_forgotten == 36
    assert all(v.pod_seen for v in p.status.ranks.values())  # forgotten ranks are plain running ranks
    written = p.status.model_dump(by_alias=True, mode="json", exclude_none=True)["ranks"]
    assert len(written) == MAX_RANK_ENTRIES + 1  # the kept histories and one entry for every plain rank


def test_a_rank_whose_replacement_is_under_way_is_never_forgotten() -> None:
    n = MAX_RANK_ENTRIES + 10
    status = {"ranks": {f"worker-{i}": replaced(i, seen=i >= 10) for i in range(n)}}  # 0-9: not seen running yet
    p = plan(Reading(job(status=status, workers={"replicas": n, "template": TEMPLATE}), running(n), True), NOW)
    # Seen now (this round watched their new pods run): settled from the next round on, not in this one.
    assert all(p.status.ranks[f"worker-{i}"].restarts == 1 for i in range(10))
    assert p.status.ranks_forgotten == 10 and sum(v.restarts for v in p.status.ranks.values()) == MAX_RANK_ENTRIES


def test_within_the_limit_nothing_is_forgotten() -> None:
    status = {"ranks": {f"worker-{i}": replaced(i) for i in range(MAX_RANK_ENTRIES)}}
    j = job(status=status, workers={"replicas": MAX_RANK_ENTRIES, "template": TEMPLATE})
    p = plan(Reading(j, running(MAX_RANK_ENTRIES), True), NOW)
    assert p.status.ranks_forgotten == 0 and all(v.restarts == 1 for v in p.status.ranks.values())


def test_a_gang_restart_of_2000_workers_writes_a_few_entries() -> None:
    n = 2000
    gang = {"action": "RestartGang", "onExitCodes": {"operator": "In", "values": [201]}}
    workers = {"replicas": n, "template": TEMPLATE, "failureRules": [gang]}
    status = {"ranks": {f"worker-0-{n - 1}": {"podSeen": True}}}
    pods = running(n)
    pods[7] = pod(Role.WORKER, 7, "Failed", exit_code=201)
    p = plan(Reading(job(status=status, workers=workers), pods, True), NOW)
    assert len(p.delete_pods) == n
    written = p.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert sorted(written["ranks"]) == ["worker-0-6,8-1999", "worker-7"], written["ranks"]
    assert len(json.dumps(written)) < 5_000


def test_a_job_of_10000_workers_is_admitted_by_the_api_and_the_operators_cap() -> None:
    """Issue 19's maxima and the operator's default cap (--max-replicas-per-job) both admit 10,000 ranks: the
    first round creates every pod, and its status (every rank without a pod yet) writes no rank entry."""
    n = 10_000
    p = plan(Reading(job(workers={"replicas": n, "template": TEMPLATE}), [], True), NOW)
    assert len(p.create_pods) == n and all(c.type.value != "Failed" for c in p.status.conditions)
    assert p.status.model_dump(by_alias=True, mode="json", exclude_none=True)["ranks"] == {}
