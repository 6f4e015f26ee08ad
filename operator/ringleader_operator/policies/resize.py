"""A job whose worker count changed (kubectl scale, an elastic resize) re-forms its whole world; ranks it no
longer has are deleted."""

from __future__ import annotations

from dataclasses import replace

from ringleader_api import ConditionType, JobPhase, Reason, Role

from .. import admission
from ..names import rank_key
from ..round_state import Event, Round


def reform_resized_world(r: Round) -> None:
    """Every worker of an older world size goes, not counted as a failure, and the new world starts together
    from the latest checkpoint (the trainer reads its size from the env). From here on those pods count as
    going in `r.observed`, as they will be once the deletions land."""
    workers = r.job.spec.workers.replicas
    if (book := r.synced()) is not None and book.worlds.keys() <= {None, workers}:
        return  # every worker staying joined this world (the rank book counts them by world)
    current = [p for p in r.observed if p.role == Role.WORKER and not p.deleting]
    old_world = sorted({p.workers for p in current if p.workers not in (None, workers)})
    if not old_world:
        return
    r.plan.delete_pods += [p.name for p in current]
    for p in current:
        r.change_rank(rank_key(p.role, p.index), pod_seen=False)
    why = f" ({r.resize_why})" if r.resize_why else ""
    gated = admission.gated_names(r.pods)
    if all(p.name in gated for p in current):  # none of them was ever placed: nothing restarts
        message = f"workers {old_world[-1]} -> {workers}{why}: the waiting pods are made again at the new size"
    else:
        message = (
            f"workers {old_world[-1]} -> {workers}{why}: every worker restarts at the new world size and resumes "
            "from the latest checkpoint"
        )
        r.set_condition(ConditionType.RESTARTING, True, Reason.RESIZED, message)
        r.status.phase = JobPhase.RESTARTING
    r.plan.events.append(Event("Normal", Reason.RESIZED, message))
    r.observed = [replace(p, deletion_deadline=r.now) if p in current else p for p in r.observed]


def drop_unwanted_ranks(r: Round) -> None:
    """Pods of ranks the job no longer has (scaled down) are deleted, and the ranks leave the status. In a steady
    round (Round.steady) only the ranks whose pods changed and those the last round found unwanted can have such
    pods, and status.ranks is as that round left it, without such ranks."""
    if (book := r.steady()) is not None:
        look = [rank for rank in r.changed | book.unwanted if not r.wanted(rank)]
        r.unwanted = {rank for rank in look if rank in book.by_rank}
        r.plan.delete_pods += sorted(p.name for rank in look for p in book.by_rank.get(rank, ()) if not p.deleting)
        return
    wanted = set(r.desired)
    unwanted = [p for p in r.observed if (p.role, p.index) not in wanted]
    r.unwanted = {(p.role, p.index) for p in unwanted}
    r.plan.delete_pods += sorted(p.name for p in unwanted if not p.deleting)  # in one order, however found
    keys = {rank_key(role, index) for role, index in r.desired}
    for key in [k for k in r.status.ranks if k not in keys]:
        del r.status.ranks[key]
