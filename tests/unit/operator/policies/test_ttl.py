"""ttlSecondsAfterFinished, table-style: an ended job is deleted once its TTL has run out."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.policies.ttl import expire_after_ttl

from ..builders import NOW, after, job, round_of

ENDED = {"phase": "Succeeded", "completionTime": NOW,
         "conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": NOW}]}  # fmt: skip
NO_TIME = {"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": after(10)}]}


@pytest.mark.parametrize(
    ("ttl", "status", "now", "delete", "requeue"),
    [
        (None, ENDED, after(600), False, None),  # no TTL: kept
        (30, {}, after(40), False, None),  # not ended: nothing to do
        (30, ENDED, after(10), False, 20),  # ended, TTL not yet out: a round then
        (30, ENDED, after(30), True, None),
        (30, NO_TIME, after(20), False, 20),  # the terminal condition's time stands in for completionTime
        (0, ENDED, NOW, True, None),
    ],
)
def test_expire_after_ttl(
    ttl: int | None, status: dict[str, Any], now: str, delete: bool, requeue: float | None
) -> None:
    r = round_of(job(status=status, runPolicy={"ttlSecondsAfterFinished": ttl}), now=now)
    expire_after_ttl(r)
    assert (r.plan.delete_job, r.plan.requeue_after) == (delete, requeue)


def test_a_job_ending_in_this_round_is_not_deleted_yet_but_asks_for_the_round() -> None:
    r = round_of(job(runPolicy={"ttlSecondsAfterFinished": 0}), now=after(5))
    r.fail("RankFailed", "worker 0 failed")
    expire_after_ttl(r)
    assert not r.plan.delete_job and r.plan.requeue_after == 0
