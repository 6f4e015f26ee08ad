"""Stalls, pure: the clock that says a job has not advanced, and which rank stopped first, from the ranks' pages."""

from __future__ import annotations

import dataclasses

import pytest
from ringleader_api import Role
from ringleader_operator.progress import parse_beat
from ringleader_operator.stalls import Beat, Clock, RankBeat, Stall, Unavailable, find_culprit, judge, overdue, tick

NOW = 1_000_000.0
W, PS = Role.WORKER, Role.PS


def rank(role: Role, index: int, step: int | None, waiting: float | None = None, done: float | None = None,
         error: str = "", hung: bool = False, unreachable: bool = False) -> RankBeat:  # fmt: skip
    """A rank's page: at `step`, waiting in an exchange since `waiting` seconds ago (None: in none), its last
    exchange done `done` seconds ago; or the `error` reading it (`hung`: the connection was taken, no page came;
    `unreachable`: no connection was made)."""
    beat = Beat(step, None if waiting is None else NOW - waiting, None if done is None else NOW - done)
    return RankBeat(f"j-{role.value}-{index}", role, index, f"node-{index}", beat, error, unreachable, hung)


@pytest.mark.parametrize(
    ("beats", "named", "says"),
    [
        # A worker hung before its collective: the others wait in it since they finished their forward pass.
        ([rank(W, 0, 57, 60, 61), rank(W, 1, 57, 60, 61), rank(W, 2, 57, None, 61), rank(W, 3, 57, 60, 61)],
         "j-worker-2", "worker 2 (pod j-worker-2 on node node-2) stopped first: at step 57, outside any exchange, "
                       "its last completed 61 s ago, while 3 of 4 ranks wait in one"),
        # A page that does not answer names its rank, whatever the others say.
        ([rank(W, 0, 57, 60, 61), rank(W, 1, None, error="no whole page within 2 s", hung=True),
          rank(W, 2, 57, None, 61)],
         "j-worker-1", "worker 1 (pod j-worker-1 on node node-1) did not answer for its metrics page: "
                       "no whole page within 2 s"),
        # A page refused (nothing listens: a rank that serves none) or never reached tells nothing of a hang.
        ([rank(W, 0, 57, 60, 61), rank(W, 1, None, error="refused"), rank(W, 2, 57, None, 61),
          rank(W, 3, None, error="no connection within 1.5 s", unreachable=True)],
         "j-worker-2", "worker 2 (pod j-worker-2 on node node-2) stopped first: at step 57"),
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
    ids=["hung-before-collective", "silent-page", "refused-and-unreached", "behind", "older-exchange", "all-waiting",
         "shard", "no-gauges", "no-pods"],
)  # fmt: skip
def test_find_culprit(beats: list[RankBeat], named: str | None, says: str) -> None:
    found = find_culprit(beats, NOW)
    assert (found.pod if found else None) == named
    if found is not None:
        assert found.message.startswith(says)


def recorded(b: RankBeat, *groups: tuple[str, int, int]) -> RankBeat:
    """`b` with the flight recorder's numbers per process group (group, last entered, last completed)."""
    return dataclasses.replace(b, beat=dataclasses.replace(b.beat, collectives=groups))


@pytest.mark.parametrize(
    ("beats", "named", "says"),
    [
        # Every rank waits at step 80 (the steps cannot tell); the recorder says worker 2 never entered #901.
        ([recorded(rank(W, 0, 80, 120, 121), ("gloo/0", 901, 900)),
          recorded(rank(W, 1, 80, 30, 121), ("gloo/0", 901, 900)),
          recorded(rank(W, 2, 80, 119, 121), ("gloo/0", 900, 900))],
         "j-worker-2", "worker 2 (pod j-worker-2 on node node-2) at step 80 holds up a collective: torch's flight "
                       "recorder says it never entered collective 901 of process group gloo/0, which 2 of the 3 "
                       "members read entered and wait in (its last: 900)"),
        # The recorder agrees with the steps: the account says both.
        ([recorded(rank(W, 0, 57, 60, 61), ("gloo/0", 40, 39)), recorded(rank(W, 1, 57, None, 61), ("gloo/0", 39, 39))],
         "j-worker-1", "worker 1 (pod j-worker-1 on node node-1) stopped first: at step 57, outside any exchange, "
                       "its last completed 61 s ago, while 1 of 2 ranks wait in one; torch's flight recorder says it "
                       "never entered collective 40"),
        # Two groups: the member furthest behind in its group is named, whatever the other group says.
        ([recorded(rank(W, 0, 9, 5, 6), ("gloo/0", 50, 49), ("gloo/1", 10, 10)),
          recorded(rank(W, 1, 9, 5, 6), ("gloo/0", 50, 49), ("gloo/1", 9, 9)),
          recorded(rank(W, 2, 9, 5, 6), ("gloo/0", 47, 47))],
         "j-worker-2", "worker 2 (pod j-worker-2 on node node-2) at step 9 holds up a collective: torch's flight "
                       "recorder says it never entered collective 50 of process group gloo/0"),
        # Every member at the same number: the recorder tells nothing, the steps decide.
        ([recorded(rank(W, 0, 80, 120, 121), ("gloo/0", 7, 6)), recorded(rank(W, 1, 80, 30, 121), ("gloo/0", 7, 6))],
         "j-worker-1", "every rank at step 80, the furthest behind, waits in an exchange (a communication hang?); "
                       "worker 1 (pod j-worker-1 on node node-1) entered it last, 30 s ago"),
        # A page that does not answer still comes first: its rank can show no numbers.
        ([recorded(rank(W, 0, 80, 120, 121), ("gloo/0", 7, 6)), rank(W, 1, None, error="no page", hung=True),
          recorded(rank(W, 2, 80, 120, 121), ("gloo/0", 6, 6))],
         "j-worker-1", "worker 1 (pod j-worker-1 on node node-1) did not answer"),
    ],
    ids=["all-waiting", "agrees", "two-groups", "level", "silent-first"],
)  # fmt: skip
def test_the_flight_recorder_names_the_rank_a_collective_waits_on(beats: list[RankBeat], named: str, says: str) -> None:
    found = find_culprit(beats, NOW)
    assert found is not None and found.pod == named
    assert found.message.startswith(says), found.message


def test_the_named_rank_carries_its_node() -> None:
    found = find_culprit([rank(W, 0, 5, 10, 11), rank(W, 1, 5, None, 11)], NOW)
    assert found is not None and (found.role, found.index, found.node) == (W, 1, "node-1")


def test_clock_runs_from_the_last_advance_and_restarts_when_the_job_turns_running_again() -> None:
    c = tick(None, 10, "t1", now=0.0, stepped_at=1005.0, running_at=1000.0)  # a step since the turn to Running
    assert c == Clock(10, 0.0, "t1", started=True)
    assert tick(c, 10, "t1", now=50.0) is c  # no advance: the clock keeps its start
    assert tick(c, None, "t1", now=50.0) is c  # nothing read: neither
    assert tick(c, 11, "t1", now=50.0) == Clock(11, 50.0, "t1", started=True)  # advanced
    assert tick(c, 10, "t2", now=50.0) == Clock(10, 50.0, "t2")  # Running anew (a recovery, a resume): start-up
    assert tick(c, 10, None, now=50.0) is None  # not Running: stopped
    assert not overdue(c, 60, 600, now=59.9) and overdue(c, 60, 600, now=60.0)
    assert not overdue(c, None, 600, now=1e9) and not overdue(None, 60, 600, now=1e9)


def test_start_up_has_its_own_deadline_and_ends_at_the_first_step() -> None:
    # Running at t=0; worker 0's first page: step 120 (a checkpoint loaded), its last step before the turn.
    c = tick(None, None, "t1", now=0.0, running_at=1000.0)
    assert c == Clock(None, 0.0, "t1")
    c = tick(c, 120, "t1", now=5.0, stepped_at=990.0, running_at=1000.0)
    assert c == Clock(120, 0.0, "t1")  # served, not started: start-up counts from the turn to Running
    assert not overdue(c, 60, 600, now=599.0) and overdue(c, 60, 600, now=600.0)
    assert tick(c, 121, "t1", now=700.0) == Clock(121, 700.0, "t1", started=True)  # the first step
    # A page never served is looked at once at the progress deadline (to say so), then at start-up's.
    unserved = Clock(None, 0.0, "t1")
    assert overdue(unserved, 60, 600, now=60.0)
    looked = Clock(None, 60.0, "t1", looked=True)
    assert not overdue(looked, 60, 600, now=659.0) and overdue(looked, 60, 600, now=660.0)


def test_a_stall_describes_itself_in_one_line() -> None:
    culprit = find_culprit([rank(W, 0, 5, 10, 11), rank(W, 1, 5, None, 11)], NOW)
    stall = Stall(5, 63.4, "t1", culprit, 2)
    assert stall.describe().startswith("no progress for 63 s at step 5: worker 1 (pod j-worker-1 on node node-1)")
    assert Stall(None, 61, "t1", None, 0).describe() == (
        "no progress for 61 s before its first step; no rank said where it is (0 pages read)"
    )
    assert (
        Stall(0, 600, "t1", culprit, 2, started=False)
        .describe()
        .startswith("no first step in 600 s since the job turned Running (still at step 0): worker 1 (pod j-worker-1")
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
    return rank(W, index, None, error="no connection within 1.5 s", unreachable=True)


def _refused(index: int) -> RankBeat:
    return rank(W, index, None, error="Connect call failed: refused")


SERVED = Clock(57, 0.0, "t1", started=True)
UNSERVED = Clock(None, 0.0, "t1")


@pytest.mark.parametrize(
    ("clock", "beats", "found"),
    [
        (SERVED, [_unreached(0), _unreached(1)], "none of the 2 ranks' metrics pages could be reached from the "
                                                 "operator (no connection within 1.5 s): the network"),
        (SERVED, [_refused(0), _refused(1)], "none of the 2 ranks' metrics pages could be read"),
        (SERVED, [_unreached(0), _refused(1)], "none of the 2 ranks' metrics pages could be read"),
        (UNSERVED, [_refused(0), _refused(1)], "worker 0's step could not be read (Connect call failed: refused)"),
        (UNSERVED, [_refused(0), rank(W, 1, 57, None, 3)], "worker 0's step could not be read"),
        (UNSERVED, [rank(W, 0, None), rank(W, 1, None)], "worker 0's step could not be read (no page has "),
        (SERVED, [], "no rank pod is running"),
        (SERVED, [_unreached(0), rank(W, 1, 57, None, 3)], "stall: j-worker-1"),
        (SERVED, [rank(W, 0, None, error="no whole page within 2 s", hung=True)], "stall: j-worker-0"),
        (SERVED, [rank(W, 0, None), rank(W, 1, None)], "stall: none named"),  # a page without rank gauges
    ],
    ids=["network-down", "pages-gone", "unreached-and-refused", "pageless", "pageless-worker-0", "no-step",
         "no-pods", "one-served", "wedged", "no-gauges"],
)  # fmt: skip
def test_only_what_tells_of_a_hang_makes_a_stall(clock: Clock, beats: list[RankBeat], found: str) -> None:
    judged = judge(clock, beats, NOW, 61.0)
    if found.startswith("stall: "):
        assert isinstance(judged, Stall) and judged.step == 57 and judged.ranks_read == len(beats)
        named = judged.culprit.pod if judged.culprit is not None else "none named"
        assert named == found.removeprefix("stall: ")
    else:
        assert isinstance(judged, Unavailable) and judged.running_since == "t1"
        assert found in judged.message and judged.message.endswith(
            "runPolicy.progressDeadlineSeconds is not acted on until one can be read"
        ), judged.message
