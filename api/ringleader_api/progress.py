"""What a running job reports of its training: progress read from worker 0's metrics (`Progress`), the work a
failure cost and its recovery (`PendingLoss`), and the share of time spent training (`Goodput`)."""

from __future__ import annotations

from pydantic import Field

from .names import Model


class Progress(Model):
    step: int = 0
    loss: float | None = None
    samples_per_second: float | None = None
    last_checkpoint_step: int | None = Field(None, description="Step of worker 0's newest checkpoint.")
    checkpoint_seconds: float | None = Field(None, description="How long worker 0's last checkpoint took to save.")
    step_seconds: float | None = Field(None, description="Worker 0's mean step time over its last logging interval.")
    total_steps: int | None = Field(None, description="Steps the run takes, as the trainer says.")
    percent: float | None = Field(None, description="step / totalSteps, in percent.")
    eta_seconds: int | None = Field(None, description="The steps left at the last measured step time.")
    resumed_step: int | None = Field(
        None,
        description="The step worker 0's training continued from when it last started, resumed from a checkpoint "
        "or healed from a live peer.",
    )
    resumed_at: str | None = Field(None, description="When worker 0's training last continued (its clock).")
    updated_at: str = ""


class PendingLoss(Model):
    """Ranks replaced while the job ran, the steps that cost not known yet: counted once worker 0 says where its
    training continued from (progress.resumedStep), as the step then less that one; at most `atMost`."""

    step: int = Field(description="Worker 0's step when the ranks were replaced.")
    at_most: int = Field(
        description="The steps since the newest checkpoint then: what is counted if the job ends first."
    )
    resumed_at: str | None = Field(None, description="progress.resumedAt then: a later one is the continuation.")


class Goodput(Model):
    """Where the job's wall time went, from its creation: counted by the rounds that change its phase (and the one
    that ends it), so the parts add up to the time up to `accountedAt`; the time since belongs to the current
    phase. `ratio`: productive over all of it."""

    queued_seconds: int = Field(0, description="Waiting to start: admission, scheduling, pods starting.")
    productive_seconds: int = Field(0, description="Running, training steps not done before.")
    restarting_seconds: int = Field(0, description="A rank down: its back-off, its replacement starting.")
    recomputing_seconds: int = Field(0, description="Running, training again the steps lost since the checkpoint.")
    stalled_seconds: int = Field(0, description="Running without progress, until the stall was found.")
    suspended_seconds: int = Field(0, description="runPolicy.suspend.")
    ratio: float | None = Field(None, description="productiveSeconds over all the seconds counted.")
    steps_lost: int = Field(0, description="Steps trained and lost (not checkpointed) when ranks were replaced.")
    recompute_owed_seconds: int = Field(0, description="Running seconds still to be counted as recomputing.")
    pending_loss: PendingLoss | None = Field(None, description="Steps lost to a replacement, not counted yet.")
    accounted_at: str | None = Field(None, description="The time up to which the seconds above are counted.")
