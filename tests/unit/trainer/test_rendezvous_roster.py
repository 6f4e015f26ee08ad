"""Who a group's host (worker 0, or the job's coordinator) names as its members (rendezvous.decide), over an
in-process store: every rank once each has come, each counted once however many of its processes came (a lost
rank's process that came before it ended, and its replacement), and with a quorum (the host's own, or the one the
ranks that came ask for) those there once it is met and nobody more came for a while, or at once when those that
came are the last group but one member, and nobody else."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch.distributed as dist
from ringleader_trainer.elastic import rendezvous
from ringleader_trainer.elastic.store_keys import arrivals_key, candidates_key, quorum_key, world_key

WORLD = 4


def decide(
    came: list[int],
    quorum: int | None,
    wait: float = 0.3,
    last: list[int] | None = None,
    asked: int | None = None,
    settle: float = rendezvous.QUORUM_SETTLE_SECONDS,
    world: int | None = WORLD,
) -> list[int]:
    store: Any = dist.HashStore()  # type: ignore[attr-defined]
    if asked is not None:
        store.set(quorum_key("g1"), str(asked))  # as a rank coming with a quorum does (Rendezvous._enrol)
    store.set(world_key("g1"), str(WORLD))  # as every rank coming does
    for rank in came:
        store.append(candidates_key("g1"), f"{rank},")
        store.add(arrivals_key("g1"), 1)  # as Rendezvous._enrol does
    return rendezvous.decide(store, "g1", world, quorum, last or [], time.monotonic() + wait, settle=settle)


@pytest.mark.parametrize(
    ("came", "quorum", "members"),
    [
        ([0, 1, 2, 3], None, [0, 1, 2, 3]),
        ([0, 2, 1, 3], 2, [0, 1, 2, 3]),  # everyone came: the quorum does not wait
        ([0, 1, 2, 2, 3], None, [0, 1, 2, 3]),  # rank 2's lost process and its replacement: one member
        ([0, 1, 2], 2, [0, 1, 2]),  # a quorum met, nobody more within the settling time
        ([0, 1, 2, 2], 3, [0, 1, 2]),
        ([0, 1, 7, 3, 2], None, [0, 1, 2, 3]),  # a rank outside the job is no member
    ],
)
def test_members_are_the_distinct_ranks_that_came(came: list[int], quorum: int | None, members: list[int]) -> None:
    assert decide(came, quorum, wait=5.0) == members


@pytest.mark.parametrize(
    ("came", "quorum"),
    [
        ([0, 1, 2, 2], None),  # four processes came, but rank 3 did not: no group without it
        ([0, 1, 1, 1], None),
        ([0, 0, 1], 3),  # short of the quorum in distinct ranks
    ],
)
def test_without_every_rank_or_a_quorum_no_group_forms(came: list[int], quorum: int | None) -> None:
    with pytest.raises(TimeoutError, match=r"of 4 ranks came"):
        decide(came, quorum)


def test_the_quorum_waits_the_settling_time_after_the_last_rank_came() -> None:
    started = time.monotonic()
    assert decide([0, 1], 2, wait=5.0) == [0, 1]
    assert time.monotonic() - started >= rendezvous.QUORUM_SETTLE_SECONDS


@pytest.mark.parametrize(
    ("last", "came", "quorum", "members", "settles"),
    [
        ([0, 1, 2, 3], [0, 1, 2], 2, [0, 1, 2], False),  # one member lost: the survivors form at once
        ([0, 1, 2, 3], [0, 2, 3], 3, [0, 2, 3], False),
        ([0, 1, 2, 3], [0, 1], 2, [0, 1], True),  # two lost: anyone else may still come
        ([0, 1, 2], [0, 1], 2, [0, 1], False),  # a group short of one lost another
        ([0, 1], [0, 2], 2, [0, 2], True),  # a replacement to take in: member 1 may be on its way
        ([], [0, 1, 2], 2, [0, 1, 2], True),  # a first group: nobody is known to be lost
    ],
)
def test_the_survivors_of_one_lost_member_form_without_the_settling_time(
    last: list[int], came: list[int], quorum: int, members: list[int], settles: bool
) -> None:
    started = time.monotonic()
    assert decide(came, quorum, wait=5.0, last=last) == members
    assert (time.monotonic() - started >= rendezvous.QUORUM_SETTLE_SECONDS) is settles


@pytest.mark.parametrize(
    ("came", "own", "asked", "members"),
    [
        ([1, 2, 3], None, 3, [1, 2, 3]),  # the coordinator: no quorum of its own, the survivors ask for one
        ([0, 1], 2, None, [0, 1]),  # worker 0's own
    ],
)
def test_a_host_without_a_quorum_of_its_own_takes_the_one_the_ranks_ask_for(
    came: list[int], own: int | None, asked: int | None, members: list[int]
) -> None:
    assert decide(came, own, wait=5.0, last=[0, 1, 2, 3], asked=asked) == members


def test_without_a_quorum_asked_the_host_waits_for_every_rank() -> None:
    with pytest.raises(TimeoutError, match=r"3 of 4 ranks came"):
        decide([1, 2, 3], None, last=[0, 1, 2, 3])


def test_a_longer_settling_time_waits_for_ranks_still_coming() -> None:
    """The coordinator's first group after it replaced a lost one settles longer (coordinator.FIRST_SETTLE_SECONDS):
    with a quorum met, the group still waits that long after the last rank came."""
    started = time.monotonic()
    assert decide([0, 2], None, wait=5.0, asked=2, settle=1.5) == [0, 2]
    assert time.monotonic() - started >= 1.5


def test_a_host_without_a_world_of_its_own_takes_the_one_the_ranks_say() -> None:
    """The coordinator knows no number of ranks: it waits for as many as the ranks coming say the job has (a
    resized job's pods say their new number)."""
    assert decide([0, 1, 2, 3], None, wait=5.0, world=None) == [0, 1, 2, 3]
