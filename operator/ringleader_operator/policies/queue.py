"""Kueue (kueue.py): a queued job runs only while its Workload is admitted, on the flavors Kueue assigned."""

from __future__ import annotations

from ringleader_api import ConditionType, JobPhase, Reason

from .. import kueue
from ..conditions import condition, is_true
from ..names import rank_of
from ..round_state import Event, Round
from .suspend import stop_every_pod


def hold(r: Round, state: kueue.QueueState | None) -> bool:
    """Hold the job back while Kueue has not admitted it (or evicted it): no pods, phase Queued, Suspended=True
    saying what it waits for. True if it did. `state`: None for a job Kueue does not queue."""
    if state is None:
        return False
    was = condition(r.old.conditions, ConditionType.SUSPENDED)
    held_before = was is not None and was.status == "True" and was.reason in (Reason.QUEUED, Reason.QUEUE_EVICTED)
    if state.admitted:
        if held_before:
            r.set_condition(ConditionType.SUSPENDED, False, Reason.QUEUE_ADMITTED, state.message)
            r.plan.events.append(Event("Normal", Reason.QUEUE_ADMITTED, state.message))
        return False
    stop_every_pod(r)
    reason = Reason.QUEUE_EVICTED if state.evicted is not None else Reason.QUEUED
    r.set_condition(ConditionType.SUSPENDED, True, reason, state.message)  # an event when it changes
    if is_true(r.status.conditions, ConditionType.RUNNING):
        r.set_condition(ConditionType.RUNNING, False, reason, "the job is not admitted by Kueue")
    r.status.phase = JobPhase.QUEUED
    return True


def place(r: Round, state: kueue.QueueState | None) -> None:
    """The pods this round creates go where Kueue's flavors say."""
    if state is None or not state.placement:
        return
    for pod in r.plan.create_pods:
        rank = rank_of(pod)
        if rank is not None:
            kueue.apply_placement(pod, rank[0], state)
