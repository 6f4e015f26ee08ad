"""Each rank's round, table-style: what the restart policy does with the state its pod is in."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.api import RankStatus, Role
from ringleader_operator.failures import Failure, Kind
from ringleader_operator.policies.restarts import count_failure, reconcile_ranks

from ..builders import NOW, TEMPLATE, after, job, names, pod, round_of

W1 = "j-worker-1"


def one_rank(policy: str = "OnFailure", rank: dict[str, Any] | None = None, **spec: Any) -> Any:
    status = {"ranks": {"worker-0": {"podSeen": True}, "worker-1": rank or {}}}
    return job(status=status, workers={"replicas": 2, "restartPolicy": policy, "template": TEMPLATE}, **spec)


RUNNING0 = pod(Role.WORKER, 0, "Running")


@pytest.mark.parametrize(
    ("policy", "rank", "w1", "now", "want"),
    [
        # (restartPolicy, status.ranks[worker-1], worker-1's pod, now) -> (created, deleted, forced, requeue, phase)
        ("OnFailure", {}, None, NOW, ([W1], [], [], None, "")),  # no pod yet: made
        ("OnFailure", {"podSeen": True}, pod(Role.WORKER, 1, "Running"), NOW, ([], [], [], None, "")),
        ("OnFailure", {}, pod(Role.WORKER, 1, "Failed", exit_code=1), NOW, ([], [W1], [], 2, "")),  # restarted
        ("Never", {}, pod(Role.WORKER, 1, "Failed", exit_code=1), NOW, ([], [], [], None, "Failed")),
        ("OnFailure", {"restarts": 1}, pod(Role.WORKER, 1, "Failed", exit_code=1), NOW, ([], [W1], [], None, "")),
        ("OnFailure", {"restarts": 1, "restartAfter": after(2)}, None, NOW, ([], [], [], 2, "")),  # backing off
        ("OnFailure", {"restarts": 1, "restartAfter": after(2)}, None, after(2), ([W1], [], [], None, "")),
        ("OnFailure", {"podSeen": True}, None, NOW, ([], [], [], 2, "")),  # vanished unseen: counted
        ("Never", {"podSeen": True}, pod(Role.WORKER, 1, "Running", deleting=True, deadline=NOW), after(10),
         ([], [], [], 2, "")),  # deleted by someone else: infrastructure; stuck for 10 s of its 30
        ("OnFailure", {}, pod(Role.WORKER, 1, "Running", deleting=True, deadline=NOW), after(30),
         ([], [], [W1], None, "")),  # stuck on a lost node past its grace: removed for good
    ],
    ids=["create", "running", "failed-restarts", "never-fails", "old-attempt", "backoff", "backoff-over",
         "vanished", "deleted-by-others", "stuck"],
)  # fmt: skip
def test_reconcile_ranks(
    policy: str, rank: dict[str, Any], w1: dict[str, Any] | None, now: str, want: tuple[Any, ...]
) -> None:
    r = round_of(one_rank(policy, rank), [RUNNING0, *([w1] if w1 else [])], now=now)
    reconcile_ranks(r)
    got = (names(r.plan.create_pods), r.plan.delete_pods, r.plan.force_delete_pods, r.plan.requeue_after)
    assert got == want[:4]
    assert (r.status.phase or "") == want[4]


def test_a_parameter_server_that_exits_under_always_is_restarted() -> None:
    ps: dict[str, Any] = {"strategy": "parameter-server", "parameterServers": {"replicas": 1, "restartPolicy": "Always",
                                                                "template": TEMPLATE}}  # fmt: skip
    r = round_of(job(**ps), [RUNNING0, pod(Role.WORKER, 1, "Running"), pod(Role.PS, 0, "Succeeded")])
    reconcile_ranks(r)
    assert r.plan.delete_pods == ["j-ps-0"] and r.restarts[Role.PS] == 1


@pytest.mark.parametrize(
    ("limit", "restarts", "failure", "restarted", "reason"),
    [
        (3, 0, Failure(Kind.EXIT, 1), True, "RankRestarting"),
        (3, 3, Failure(Kind.EXIT, 1), False, "BackoffLimitExceeded"),
        (3, 0, Failure(Kind.EVICTED), True, "RankEvicted"),
        (0, 0, Failure(Kind.NODE_LOST), False, "BackoffLimitExceeded"),
    ],
)
def test_count_failure(limit: int, restarts: int, failure: Failure, restarted: bool, reason: str) -> None:
    status = {"replicaStatuses": {"worker": {"restarts": restarts}}}
    r = round_of(job(status=status, runPolicy={"backoffLimit": limit, "restartBackoff": {"baseSeconds": 4}}))
    rank = r.status.ranks.setdefault("worker-1", RankStatus())
    assert count_failure(r, Role.WORKER, 1, rank, W1, failure) is restarted
    assert r.plan.events[-1].reason == reason and r.plan.events[-1].message.startswith(f"worker 1 (pod {W1})")
    if restarted:
        # Back-off 4 s for a rank's first restart, plus the second `now`'s truncation may have cost.
        assert rank.restarts == 1 and rank.restart_after == after(5) and r.plan.requeue_after == 5
        assert r.restarting == [(reason, r.plan.events[-1].message)]
    else:
        assert r.failed and rank.restarts == 0
