"""activeDeadlineSeconds, table-style."""

from __future__ import annotations

import pytest
from ringleader_api import Role
from ringleader_operator.policies.deadline import past_deadline, start_clock

from ..builders import NOW, after, job, pod, round_of

PODS = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Succeeded")]


@pytest.mark.parametrize(
    ("deadline", "policy", "now", "failed", "requeue", "deleted"),
    [
        (None, "None", after(3000), False, None, []),
        (60, "None", after(59), False, 1, []),
        (60, "None", after(60), True, None, ["j-worker-0"]),  # stopped whatever cleanPodPolicy says
        (60, "All", after(61), True, None, ["j-worker-0", "j-worker-1"]),
    ],
)
def test_past_deadline(
    deadline: int | None, policy: str, now: str, failed: bool, requeue: float | None, deleted: list[str]
) -> None:
    spec = {"activeDeadlineSeconds": deadline, "cleanPodPolicy": policy}
    r = round_of(job(status={"startTime": NOW}, runPolicy=spec), PODS, now=now)
    assert past_deadline(r) is failed
    assert (r.failed, r.plan.requeue_after, sorted(r.plan.delete_pods)) == (failed, requeue, deleted)
    if failed:
        assert r.plan.events[-1].reason == "DeadlineExceeded" and f"({deadline} s)" in r.plan.events[-1].message


@pytest.mark.parametrize(("start", "want"), [(None, after(5)), (NOW, NOW)])
def test_start_clock_keeps_the_first_start(start: str | None, want: str) -> None:
    r = round_of(job(status={"startTime": start} if start else {}), now=after(5))
    start_clock(r)
    assert r.status.start_time == want
