"""What status.progress says beyond what worker 0 reports: percent done, the time left, and the last step once
the job is done. Pure."""

from __future__ import annotations

import math

from ringleader_api import Progress


def with_estimates(p: Progress) -> Progress:
    """`p` with `percent` and `etaSeconds` filled in from its step, total steps and step time (None where one is
    missing): the remaining steps at the last measured pace."""
    if not p.total_steps:
        return p.model_copy(update={"percent": None, "eta_seconds": None})
    step = min(p.step, p.total_steps)
    percent = round(100.0 * step / p.total_steps, 1)
    eta = None if p.step_seconds is None else math.ceil((p.total_steps - step) * p.step_seconds)
    return p.model_copy(update={"percent": percent, "eta_seconds": eta})


def finished(p: Progress) -> Progress:
    """The progress of a job whose workers all succeeded: every step taken (the last scrape may be from
    seconds before the end), nothing left to wait for."""
    if not p.total_steps:
        return p
    return with_estimates(p.model_copy(update={"step": p.total_steps}))
