"""Stalls, pure: the clock that says a job has not advanced, and which rank stopped first, from the ranks' pages."""

from __future__ import annotations

import pytest
from ringleader_api import Role
from ringleader_operator.progress import parse_beat
from ringleader_operator.stalls import Beat, Clock, RankBeat, Stall, find_culprit, overdue, tick, unobserved

NOW = 1_000_000.0
W, PS = Role.WORKER, Role.PS


def rank(role: Role, index: int, step: int | None, waiting: float | None = None, done: float | None = None,
         error: str = "") -> RankBeat:  # fmt: skip
    """A rank's page: at `step`, waiting in an exchange since `waiting` seconds ago (None: in none), its last
    exchange done `done` seconds ago."""
    beat = Beat(step, None if waiting is None else NOW - waiting, None if done is None else NOW - done)
    return RankBeat(f"j-{role.value}-{index}", role, index, f"node-{index}", beat, error)


@pytest.mark.parametrize(
    ("beats", "named", "says"),
    [
        # A worker hung before its collective: the others wait in it since they finished their forward pass.
        ([rank(W, 0, 57, 60, 61), rank(W, 1, 57, 60, 61), rank(W, 2, 57, None, 61), rank(W, 3, 57, 60, 61)],
         "j-worker-2", "worker 2 (pod j-worker-2 on node node-2) stopped first: at step 57, outside any exchange, "
                       "its last completed 61 s ago, while 3 of 4 ranks wait in one"),
        # A page that does not answer names its rank, whatever the others say.
        ([rank(W, 0, 57, 60, 61), rank(W, 1, None, error="no whole page within 2 s"), rank(W, 2, 57, None, 61)],
         "j-worker-1", "worker 1 (pod j-worker-1 on node node-1) did not answer for its metrics page: "
                       "no whole page within 2 s"),
        # Asynchronous PS: the hung worker falls behind, the others go on (none waits).
        ([rank(W, 0, 900, None, 0), rank(W, 1, 412, None, 300), rank(W, 2, 901, None, 0), rank(PS, 0, 412, 0.1, 0.1)],
         "j-worker-1", "worker 1 (pod j-worker-1 on node node-1) stopped first: at step 412, outside any exchange, "
                       "its last completed 300 s ago, while 1 of 4 ranks wait in one, 2 ranks are past it"),
        # Two outside an exchange at the same step: the one whose last exchange is older stopped first.
        ([rank(W, 0, 10, None, 5), rank(W, 1, 10, None, 50), rank(W, 2, 10, 40, 50)], "j-worker-1", "worker 1"),
        # Every rank waits (a communication hang): the last to enter it is named, the others had waited for it.
        ([rank(W, 0, 80, 120, 121), rank(W, 1, 80, 30, 121), rank(W, 2, 80, 119, 121)],
         "j-worker-1", "every rank at step 80, the furthest behind, waits in an exchange (a communication hang?); "
                       "worker 1 (pod j-worker-1 on node node-1) entered it last, 30 s ago"),
        # A parameter-server shard stuck applying an update: the workers wait in their push.
        ([rank(W, 0, 33, 90, 91), rank(W, 1, 33, 90, 91), rank(PS, 0, 33, None, 90)], "j-ps-0", "parameter server 0"),
        # A script without the strategy API exports no rank gauges: nobody can be named.
        ([rank(W, 0, None), rank(W, 1, None)], None, ""),
        ([], None, ""),
    ],
    ids=["hung-before-collective", "silent-page", "behind", "older-exchange", "all-waiting", "shard", "no-gauges",
         "no-pods"],
)  # fmt: skip
def test_find_culprit(beats: list[RankBeat], named: str | None, says: str) -> None:
    found = find_culprit(beats, NOW)
    assert (found.pod if found else None) == named
    if found is not None:
        assert found.message.startswith(says)


def test_the_named_rank_carries_its_node() -> None:
    found = find_culprit([rank(W, 0, 5, 10, 11), rank(W, 1, 5, None, 11)], NOW)
    assert found is not None and (found.role, found.index, found.node) == (W, 1, "node-1")


def test_clock_runs_from_the_last_advance_and_restarts_when_the_job_turns_running_again() -> None:
    c = tick(None, 10, "t1", now=0.0)
    assert c == Clock(10, 0.0, "t1")
    assert tick(c, 10, "t1", now=50.0) is c  # no advance: the clock keeps its start
    assert tick(c, None, "t1", now=50.0) is c  # nothing read: neither
    assert tick(c, 11, "t1", now=50.0) == Clock(11, 50.0, "t1")  # advanced
    assert tick(c, 10, "t2", now=50.0) == Clock(10, 50.0, "t2")  # Running anew (a recovery, a resume)
    assert tick(c, 10, None, now=50.0) is None  # not Running: stopped
    assert not overdue(c, 60, now=59.9) and overdue(c, 60, now=60.0)
    assert not overdue(c, None, now=1e9) and not overdue(None, 60, now=1e9)


def test_a_stall_describes_itself_in_one_line() -> None:
    culprit = find_culprit([rank(W, 0, 5, 10, 11), rank(W, 1, 5, None, 11)], NOW)
    stall = Stall(5, 63.4, "t1", culprit, 2)
    assert stall.describe().startswith("no progress for 63 s at step 5: worker 1 (pod j-worker-1 on node node-1)")
    assert Stall(None, 61, "t1", None, 0).describe() == (
        "no progress for 61 s before its first step; no rank said where it is (0 pages read)"
    )


def test_a_page_without_rank_gauges_has_no_place_and_a_stamp_of_0_means_none() -> None:
    assert parse_beat("ringleader_trainer_step 5\n") == Beat()
    page = (
        "ringleader_trainer_rank_step 7\n"
        "ringleader_trainer_exchange_started_timestamp_seconds 0\n"
        "ringleader_trainer_exchange_done_timestamp_seconds 1.7e9\n"
    )
    assert parse_beat(page) == Beat(7, None, 1.7e9)
    lie = "ringleader_trainer_rank_step -3\nringleader_trainer_exchange_started_timestamp_seconds 1e300\n"
    assert parse_beat(lie) == Beat()


def _unreached(index: int) -> RankBeat:
    return RankBeat(f"j-worker-{index}", W, index, "node-0", error="no connection within 1.5 s", unreachable=True)


@pytest.mark.parametrize(
    ("beats", "says_nothing"),
    [
        ([_unreached(0), _unreached(1)], True),
        ([_unreached(0), rank(W, 1, None, error="Connect call failed: refused")], False),
        ([_unreached(0), rank(W, 1, 57, None, 3)], False),
        ([rank(W, 0, None, error="no whole page within 2 s")], False),
        ([], False),
    ],
    ids=["none-reached", "one-refused", "one-served", "wedged", "no-pods"],
)
def test_a_stall_says_nothing_of_the_job_only_when_no_rank_was_reached(
    beats: list[RankBeat], says_nothing: bool
) -> None:
    assert unobserved(beats) is says_nothing
