"""status.progress.lastCheckpointStep from what stopping ranks leave behind.

A rank told to stop (a suspend, an eviction, a resize, a straggler's replacement, a peer's stop) writes the
checkpoint of the step it stops at and exits 202 with an exit record naming that step as its last line
(`savedStep`, evidence.py). Its metrics page, where the scraper reads the newest checkpoint, is gone with it, so
the round reads the step from the pod's termination message: status.progress then says the step the job saved
and stopped at (the steps lost to a later failure are counted from it, policies/goodput.py).
"""

from __future__ import annotations

from ringleader_api import Progress

from .. import evidence
from ..failures import STOPPED_EXIT_CODE
from ..observed import ObservedPod
from ..round_state import Round


def note_saves(r: Round) -> None:
    """Raise status.progress's lastCheckpointStep (and its step, if behind) to the newest step a rank that
    stopped this round saved; the round then writes status.progress (the scraper cannot)."""
    saved = [s for p in _stopped(r) if (s := evidence.read(p.output).saved_step) is not None]
    if not saved:
        return
    step = max(saved)
    progress = r.status.progress or Progress(step=step, updated_at=r.now)
    if progress.last_checkpoint_step is not None and progress.last_checkpoint_step >= step:
        return
    r.status.progress = progress.model_copy(
        update={"last_checkpoint_step": step, "step": max(progress.step, step), "updated_at": r.now}
    )
    r.plan.writes_progress = True


def _stopped(r: Round) -> list[ObservedPod]:
    """The rank pods that ended by a clean stop with something to say, among those that changed since the last
    round (all of them when the rank book does not say which) and those lately deleted."""
    if (book := r.synced()) is not None:
        looked = [p for rank in r.changed for p in book.by_rank.get(rank, ())]
    else:
        looked = list(r.observed)
    return [p for p in [*looked, *r.gone.values()] if p.exit_code == STOPPED_EXIT_CODE and p.output]
