"""runPolicy.suspend: a suspended job has no pods; resuming creates them again."""

from __future__ import annotations

from ringleader_api import ConditionType, JobPhase, Reason

from ..conditions import is_true
from ..round_state import Event, Round


def suspend(r: Round) -> bool:
    """Suspend the job if its spec says so (every pod deleted, the deadline clock stopped); True if it did."""
    if not r.job.spec.run_policy.suspend:
        return False
    stop_every_pod(r)
    r.set_condition(ConditionType.SUSPENDED, True, Reason.SUSPENDED, "the job is suspended; its pods are deleted")
    r.set_condition(ConditionType.RUNNING, False, Reason.SUSPENDED, "the job is suspended")
    r.status.phase = JobPhase.SUSPENDED
    return True


def stop_every_pod(r: Round) -> None:
    """Delete every pod of the job as a stop, not a failure (each rank saves where it stops), and stop the clock:
    as for a batch Job, the start time (and with it activeDeadlineSeconds) begins again when it runs again."""
    r.plan.delete_pods = [p.name for p in r.observed if not p.deleting]
    for key, rank in r.status.ranks.items():  # the operator deletes these pods: their going is no failure
        if rank.pod_seen:
            r.change_rank(key, pod_seen=False)
    r.status.start_time = None


def resume(r: Round) -> None:
    """A job that was suspended and no longer is: say so (its pods are created by the rounds that follow)."""
    if is_true(r.status.conditions, ConditionType.SUSPENDED):
        r.set_condition(ConditionType.SUSPENDED, False, Reason.RESUMED, "the job is resumed")
        r.plan.events.append(Event("Normal", Reason.RESUMED, "the job is resumed: its pods are created again"))
