"""Reconciler.wake_after: one pending wake-up per job, the sooner one stays, and wake-ups asked for while one is
pending are served by its round (pod events of a job share rounds instead of starting one each)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ringleader_operator.reconciler import Reconciler


class CountingReconciler(Reconciler):
    """Records when each round starts instead of talking to an API server."""

    def __init__(self) -> None:
        super().__init__(kube=None, emit=lambda *_: None)  # type: ignore[arg-type]
        self.rounds: list[tuple[str, str, float]] = []

    async def round(self, namespace: str, name: str, fresh: bool) -> None:
        self.rounds.append((namespace, name, asyncio.get_running_loop().time()))


def _run(script: Any) -> CountingReconciler:
    async def main() -> CountingReconciler:
        r = CountingReconciler()
        start = asyncio.get_running_loop().time()
        await script(r)
        await asyncio.sleep(0.3)
        r.rounds = [(ns, name, t - start) for ns, name, t in r.rounds]
        return r

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("asks", "rounds", "at"),
    [
        # seconds asked for, one after another -> rounds of job a, and when the first starts (from, to)
        ([0.05] * 20, 1, (0.04, 0.2)),  # a burst of pod events: one round
        ([0.05, 5.0], 1, (0.04, 0.2)),  # a later wake-up does not postpone a sooner one
        ([5.0, 0.05], 1, (0.04, 0.2)),  # a sooner one replaces a later one
        ([0.0], 1, (0.0, 0.1)),
    ],
    ids=["burst", "later-kept-sooner", "sooner-replaces", "now"],
)
def test_wake_ups_of_one_job_share_a_round(asks: list[float], rounds: int, at: tuple[float, float]) -> None:
    async def script(r: CountingReconciler) -> None:
        for seconds in asks:
            r.wake_after("team", "a", seconds)
            await asyncio.sleep(0)

    r = _run(script)
    assert [name for _, name, _ in r.rounds] == ["a"] * rounds
    assert at[0] <= r.rounds[0][2] <= at[1]
    assert not r.wakeups  # nothing left pending: a later wake-up was cancelled or never made


def test_each_job_gets_its_own_round_and_a_new_event_after_the_round_gets_another() -> None:
    async def script(r: CountingReconciler) -> None:
        for _ in range(5):
            r.wake_after("team", "a", 0.05)
            r.wake_after("team", "b", 0.05)
        await asyncio.sleep(0.15)
        r.wake_after("team", "a", 0.05)

    r = _run(script)
    assert sorted(name for _, name, _ in r.rounds) == ["a", "a", "b"]
