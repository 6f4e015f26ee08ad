"""The rescue of a rank stuck in a broken group (elastic/rescue.py): the grace it gets, when it counts as stuck,
and that it recovers in place only when still stuck after the grace (test_group_watch: a watch calls it)."""

from __future__ import annotations

import threading
import time

import pytest
from ringleader_trainer.elastic import recovery, rescue
from ringleader_trainer.metrics import RankPlace


@pytest.mark.parametrize(
    ("compute", "seconds"),
    [(0.0, 10.0), (0.01, 10.0), (3.0, 10.0), (4.0, 12.0), (60.0, 180.0)],
)
def test_the_grace_is_ten_seconds_or_three_steps_of_compute(compute: float, seconds: float) -> None:
    assert rescue.grace(compute) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("started", "shut_at", "expected"),
    [
        (0.0, 100.0, False),  # in no exchange (computing, or between steps)
        (99.0, 100.0, True),  # in one entered before the connections were shut down
        (100.0, 100.0, False),  # entered at that moment: it fails on the shut connections
        (101.0, 100.0, False),  # entered since: it fails at once
    ],
)
def test_a_rank_is_stuck_only_in_an_exchange_entered_before_the_break(
    started: float, shut_at: float, expected: bool
) -> None:
    assert rescue.stuck(started, shut_at) is expected


@pytest.fixture
def recovered(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The recoveries asked for, (reason, limit), instead of a new process; a 0.3 s grace."""
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(recovery, "reexec", lambda reason, limit: calls.append((reason, limit)))
    monkeypatch.setattr(rescue, "RESCUE_SECONDS", 0.3)
    return calls


@pytest.mark.parametrize(
    ("entered", "leaves_after", "timeout", "recovers"),
    [
        (-5.0, None, 300.0, True),  # in an exchange from before the break, still there after the grace
        (-5.0, 0.1, 300.0, False),  # it left the group within the grace (its exchange failed: it heals)
        (None, None, 300.0, False),  # in no exchange: computing, its next exchange fails at once
        (+0.1, None, 300.0, False),  # in an exchange entered since the break
        (-5.0, None, 0.3, False),  # the collective's timeout ends it no later than the grace would
    ],
)
def test_a_rank_recovers_only_when_still_stuck_after_the_grace(
    recovered: list[tuple[str, int]], entered: float | None, leaves_after: float | None, timeout: float, recovers: bool
) -> None:
    place, left, shut_at = RankPlace(), threading.Event(), time.time()
    place.started = 0.0 if entered is None else shut_at + entered
    if leaves_after is not None:
        threading.Timer(leaves_after, left.set).start()
    rescue.Rescue(place, timeout, lambda: 7, role="worker", index=1)(shut_at, left)
    assert [limit for _, limit in recovered] == ([7] if recovers else [])
    if recovers:
        assert recovered[0][0].startswith("stuck 5 s in an exchange"), recovered
