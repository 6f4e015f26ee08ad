"""Who serves whom when a group re-forms after a loss (`elastic.healing`): each rank reports the step of its live state
and, under local SGD, whether it keeps its predecessor's state; the plan names the step the group continues
from and each receiver's source, or refuses (Unhealable) where no live rank can serve a receiver."""

from __future__ import annotations

import pytest
from ringleader_trainer.elastic.healing import (
    NO_STATE,
    UNSERVABLE,
    Plan,
    Report,
    Unhealable,
    newest_serves,
    successor_serves,
)

N = NO_STATE


def reports(*steps: int, holds: bool = True) -> list[Report]:
    return [Report(s, holds and s >= 0) for s in steps]


@pytest.mark.parametrize(
    ("steps", "plan"),
    [
        ((N, N, N), None),  # the job's first start (or every rank started again): the checkpoint decides
        ((30, N, 30), Plan(30, {1: 0})),  # a replacement, served by the first holder
        ((N, 30, 30), Plan(30, {0: 1})),  # worker 0 replaced: it hosts the store and receives
        ((30, 31, N), Plan(31, {0: 1, 2: 1})),  # a survivor behind (its exchange failed where a peer's completed)
        ((30, N, N, 30), Plan(30, {1: 0, 2: 3})),  # the holders take the receivers in turn
        ((7, 7, 7), Plan(7, {})),  # everyone survived (a rank lost and back before anyone noticed)
    ],
)
def test_the_newest_state_serves_every_rank_short_of_it(steps: tuple[int, ...], plan: Plan | None) -> None:
    assert newest_serves(reports(*steps)) == plan


# Pipeline: 2 stages x 2 replicas; worker i holds stage i % 2.
@pytest.mark.parametrize(
    ("steps", "plan"),
    [
        ((30, N, 30, 30), Plan(30, {1: 3})),  # stage 1's replacement, served by stage 1's replica
        ((N, 30, 30, 30), Plan(30, {0: 2})),  # worker 0 (the store's host) by worker 2
        ((N, N, 30, 30), Plan(30, {0: 2, 1: 3})),  # a whole pipeline lost: the other serves both stages
        ((30, 30, 29, 30), Plan(30, {2: 0})),  # a survivor behind, served by its stage's holder
    ],
)
def test_a_pipeline_stage_is_served_by_a_replica_of_the_same_stage(steps: tuple[int, ...], plan: Plan) -> None:
    assert newest_serves(reports(*steps), parts=2) == plan


P = True  # the step after a report's is pending: averaged, not applied (Strategy.commit_step)


# The commit over every worker that ends a pipeline's step: a peer at the newest step completed it, so every
# stage's averaging had completed and a rank one step short with that step pending applies it and serves.
@pytest.mark.parametrize(
    ("given", "plan"),
    [
        ([Report(31), Report(N), Report(30, pending=P), Report(30, pending=P)], Plan(31, {1: 3}, frozenset({2, 3}))),
        ([Report(N), Report(31), Report(31), Report(30, pending=P)], Plan(31, {0: 2}, frozenset({3}))),
        # nobody completed the commit: the pending step is done again by everyone (its gradients dropped)
        ([Report(30, pending=P), Report(N), Report(30, pending=P), Report(30)], Plan(30, {1: 3})),
    ],
)
def test_a_rank_whose_commit_failed_where_a_peer_stepped_applies_its_pending_step(
    given: list[Report], plan: Plan
) -> None:
    assert newest_serves(given, parts=2) == plan


@pytest.mark.parametrize(
    "steps",
    [
        (30, N, 30, N),  # both replicas of stage 1 lost
        (31, 30, N, 30),  # stage 0 completed a step no survivor of stage 1 holds, even pending (no commit)
    ],
)
def test_a_stage_with_no_replica_at_the_newest_step_is_refused(steps: tuple[int, ...]) -> None:
    with pytest.raises(Unhealable, match="part 1 of the state"):
        newest_serves(reports(*steps), parts=2)


@pytest.mark.parametrize(
    ("steps", "plan"),
    [
        ((N, N, N), None),
        ((24, N, 24), Plan(24, {1: 2})),  # worker 1's state as of the sync lives on in worker 2
        ((N, 24, 24), Plan(24, {0: 1})),
        ((24, 24, N), Plan(24, {2: 0})),  # the last worker's successor is worker 0
        ((N, 24, N, 24), Plan(24, {0: 1, 2: 3})),  # two lost, each with its successor alive
    ],
)
def test_each_replacement_is_served_by_its_successor(steps: tuple[int, ...], plan: Plan | None) -> None:
    assert successor_serves(reports(*steps)) == plan


@pytest.mark.parametrize(
    ("given", "why"),
    [
        (reports(24, N, N), "held by rank 2, lost too"),  # a rank and its successor lost together
        (reports(24, 32, N), "different syncs"),  # one survivor completed a sync the other did not
        ([Report(24, True), Report(UNSERVABLE), Report(N)], "between two syncs"),
        ([Report(24, True), Report(N), Report(24, False)], "held by rank 2"),  # a replacement since the sync
    ],
)
def test_a_replacement_no_successor_can_serve_is_refused(given: list[Report], why: str) -> None:
    with pytest.raises(Unhealable, match=why):
        successor_serves(given)


B = Report(30, behind=True)  # at step 30, whose sync's average failed here


@pytest.mark.parametrize(
    ("given", "plan"),
    [
        ([Report(30), Report(N), Report(30)], Plan(30, {1: 0})),  # a replacement taken in: any live rank serves
        ([B, Report(30), Report(N)], Plan(30, {0: 1, 2: 1})),  # a peer completed the average: it serves
        ([B, B, Report(N)], Plan(30, {2: 0})),  # nobody completed it: they average again, the newcomer too
        ([Report(N), Report(N)], None),
    ],
)
def test_training_short_any_live_rank_at_the_groups_step_serves(given: list[Report], plan: Plan | None) -> None:
    assert newest_serves(given) == plan


def test_training_short_a_rank_left_behind_takes_the_newest_state() -> None:
    """A peer went on past the sync whose average failed here, or the group trained on without this rank: it
    takes the newest state, and its script's steps until then are void (Strategy.void_steps)."""
    assert newest_serves([B, Report(33), Report(N)]) == Plan(33, {0: 1, 2: 1})
