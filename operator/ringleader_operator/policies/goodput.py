"""status.goodput: where the job's wall time went, from its creation to its end.

The time since `accountedAt` belongs to the phase the job has been in since; the round that changes the phase
(or ends the job) counts it into that phase's part and moves `accountedAt` to now, so rounds that change
nothing write nothing, and the parts add up to the time from creation to `accountedAt` (to completionTime,
once ended; status times are whole seconds, so exactly). Pending and Queued count as queued, Restarting as restarting,
Suspended as suspended. Running time is split: first the seconds of a stall found in it (the deadline it went
without progress), then the seconds owed to recomputation (the steps lost when ranks were replaced, at the
last measured step time), the rest productive.

Steps are lost when a rank is replaced while the job runs, except when it stopped with its checkpoint (a clean
stop, or a straggler replaced in a job that checkpoints). How many is measured where the trainer says where its
training continued from (progress.resumedStep, with resumedAt: from a live peer's state, or the newest checkpoint):
worker 0's step when the ranks were replaced, less that step, counted once worker 0's page shows a later
continuation (goodput.pendingLoss until then; if the job ends first, the most it can be). Without it, worker 0's
step less its newest checkpoint's, as status.progress last said, or a stopping rank's exit record (without
checkpoints, every step).
"""

from __future__ import annotations

from ringleader_api import Goodput, JobPhase, PendingLoss, Progress

from ..failures import Failure, Kind
from ..observed import parse_time
from ..round_state import Round

ENDED = (JobPhase.SUCCEEDED, JobPhase.FAILED)


def note_lost_work(r: Round, failure: Failure) -> None:
    """A rank is replaced for `failure`: the steps since where training continues from are lost, unless it saved
    where it stopped. Noted once per round, and only while the job was Running (a second rank lost during the
    same recovery loses nothing more): measured later where the trainer says where it continued from (pending),
    else counted now as the steps since the newest checkpoint."""
    lossless = failure.kind == Kind.STOPPED or (failure.kind == Kind.STRAGGLED and r.job.spec.checkpoint is not None)
    progress = r.status.progress  # as read, or with the step a stop saved this round (policies/saves.py)
    if lossless or r.old.phase != JobPhase.RUNNING or progress is None:
        return
    saved = (progress.last_checkpoint_step or 0) if r.job.spec.checkpoint is not None else 0
    at_most = max(0, progress.step - saved)
    if progress.resumed_step is None:
        r.lost_steps = max(r.lost_steps, at_most)
    elif r.pending_loss is None:
        r.pending_loss = PendingLoss(step=progress.step, at_most=at_most, resumed_at=progress.resumed_at)


def settled(pending: PendingLoss, progress: Progress | None, ended: bool) -> int | None:
    """The steps a pending loss cost once worker 0 shows a later continuation (the step then less where it
    continued from; nothing lost when it continued past it), the most it can be if the job ended first, else
    None: not known yet."""
    if progress is not None and progress.resumed_step is not None and progress.resumed_at != pending.resumed_at:
        return max(0, pending.step - progress.resumed_step)
    return pending.at_most if ended else None


def account(r: Round) -> None:
    """At the end of every round: count the time since accountedAt when the phase changes or the job ends."""
    before, after = r.old.phase, r.status.phase
    if before in ENDED:
        return
    g = (r.status.goodput or Goodput()).model_copy()
    if g.accounted_at is None:
        g.accounted_at = str(r.job.metadata.get("creationTimestamp") or r.now)
    pending = g.pending_loss or r.pending_loss
    if pending is not None and (lost := settled(pending, r.status.progress, after in ENDED)) is not None:
        r.lost_steps, pending = max(r.lost_steps, lost), None
    if before == after and not r.lost_steps and pending == g.pending_loss and r.status.goodput is not None:
        return
    g.pending_loss = pending
    seconds = max(0, int((r.at - parse_time(g.accounted_at)).total_seconds()))
    if before == JobPhase.RUNNING:
        stalled = min(seconds, round(r.stalled_seconds))
        recomputing = min(seconds - stalled, g.recompute_owed_seconds)
        g.stalled_seconds += stalled
        g.recomputing_seconds += recomputing
        g.recompute_owed_seconds -= recomputing
        g.productive_seconds += seconds - stalled - recomputing
    elif before == JobPhase.RESTARTING:
        g.restarting_seconds += seconds
    elif before == JobPhase.SUSPENDED:
        g.suspended_seconds += seconds
    else:  # new, Pending, Queued (waiting for room, for the scheduler or for Kueue)
        g.queued_seconds += seconds
    if r.lost_steps:  # owed by the Running time from now on (the steps are trained again after the recovery)
        g.steps_lost += r.lost_steps
        step_seconds = r.old.progress.step_seconds if r.old.progress else None
        g.recompute_owed_seconds += round(r.lost_steps * (step_seconds or 0.0))
    g.accounted_at = r.now
    total = sum(
        (g.queued_seconds, g.productive_seconds, g.restarting_seconds, g.recomputing_seconds, g.stalled_seconds,
         g.suspended_seconds)
    )  # fmt: skip
    g.ratio = round(g.productive_seconds / total, 4) if total else None
    r.status.goodput = g
