"""runPolicy.suspend: a suspended job has no pods; resuming creates them again."""

from __future__ import annotations

from ringleader_api import ConditionType, JobPhase, Reason

from ..conditions import is_true
from ..round_state import Event, Round


def suspend(r: Round) -> bool:
    """Suspend the job if its spec says so (every pod deleted, the deadline clock stopped); True if it did."""
    if not r.job.spec.run_policy.suspend:
        return False
    r.plan.delete_pods = [p.name for p in r.observed if not p.deleting]
    for rank in r.status.ranks.values():  # the operator deletes these pods: their going is no failure
        rank.pod_seen = False
    r.set_condition(ConditionType.SUSPENDED, True, Reason.SUSPENDED, "the job is suspended; its pods are deleted")
    r.set_condition(ConditionType.RUNNING, False, Reason.SUSPENDED, "the job is suspended")
    r.status.phase = JobPhase.SUSPENDED
    # As for a batch Job: the start time (and with it the activeDeadlineSeconds clock) begins again on resume.
    r.status.start_time = None
    return True


def resume(r: Round) -> None:
    """A job that was suspended and no longer is: say so (its pods are created by the rounds that follow)."""
    if is_true(r.status.conditions, ConditionType.SUSPENDED):
        r.set_condition(ConditionType.SUSPENDED, False, Reason.RESUMED, "the job is resumed")
        r.plan.events.append(Event("Normal", Reason.RESUMED, "the job is resumed: its pods are created again"))
