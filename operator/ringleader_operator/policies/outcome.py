"""The job's outcome and phase as its ranks stand: Created once; then Succeeded, Restarting, Running or
Pending (Failed is decided where a failure is seen: restarts, deadline, gang, an invalid spec)."""

from __future__ import annotations

from ringleader_api import ConditionType, JobPhase, Reason, Role

from ..estimates import finished
from ..round_state import Round
from .cleanup import clean_pods

NOTES_NAMED = 5  # restarts of one round the Restarting condition's message names (the rest are counted)


def note_created(r: Round) -> None:
    if not any(c.type == ConditionType.CREATED for c in r.status.conditions):
        r.set_condition(ConditionType.CREATED, True, Reason.CREATED, f"TrainingJob {r.job.name} is created")


def conclude(r: Round) -> None:
    """Succeeded once every worker's pod has succeeded (parameter servers are then cleaned up); Restarting
    while this round restarts ranks; Running once every rank runs (or is done); else Pending."""
    st, workers = r.status, r.job.spec.workers.replicas
    if all(_has(r, (Role.WORKER, i), ("Succeeded",)) for i in range(workers)):
        r.set_condition(ConditionType.SUCCEEDED, True, Reason.SUCCEEDED, f"all {workers} workers succeeded")
        st.phase = JobPhase.SUCCEEDED
        st.completion_time = r.now
        if st.progress is not None:  # the last scrape came seconds before the end: the final step is the total
            st.progress = finished(st.progress)
            r.plan.writes_progress = True
        clean_pods(r)
    elif r.restarting:
        note = "; ".join(note for _, note in r.restarting[:NOTES_NAMED])
        if len(r.restarting) > NOTES_NAMED:  # many ranks failed at once: each has its event, the message stays short
            note += f"; and {len(r.restarting) - NOTES_NAMED} more ranks restarting"
        r.set_condition(ConditionType.RESTARTING, True, r.restarting[0][0], note)
        st.phase = JobPhase.RESTARTING
    elif _all_up(r):
        r.set_condition(ConditionType.RUNNING, True, Reason.RUNNING, "all ranks are running")
        st.phase = JobPhase.RUNNING
    elif st.phase not in (JobPhase.RUNNING, JobPhase.RESTARTING):
        st.phase = JobPhase.PENDING


def _all_up(r: Round) -> bool:
    """Every desired rank has a pod, not being deleted, that runs or is done (counted by the rank book when it
    holds the round's pods)."""
    if (book := r.synced()) is not None:
        return not book.down(r.desired)
    return all(_has(r, rank, ("Running", "Succeeded")) for rank in r.desired)


def _has(r: Round, rank: tuple[Role, int], phases: tuple[str, ...]) -> bool:
    """The rank has a pod, not being deleted, in one of `phases`."""
    return any(p.phase in phases and not p.deleting for p in r.by_rank.get(rank, []))
