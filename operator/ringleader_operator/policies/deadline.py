"""runPolicy.activeDeadlineSeconds: how long a job may run, counted from its start time."""

from __future__ import annotations

from datetime import timedelta

from ringleader_api import Reason

from ..observed import parse_time
from ..round_state import Round
from .cleanup import clean_pods, stop_running_pods


def start_clock(r: Round) -> None:
    """The job's start time is the first round that found it neither ended nor suspended."""
    r.status.start_time = r.status.start_time or r.now


def past_deadline(r: Round) -> bool:
    """Fail the job and stop its pods once its deadline has passed (True), else ask for a round then."""
    seconds = r.job.spec.run_policy.active_deadline_seconds
    if seconds is None or r.status.start_time is None:
        return False
    deadline = parse_time(r.status.start_time) + timedelta(seconds=seconds)
    if r.at < deadline:
        r.wake_at(deadline)
        return False
    r.fail(Reason.DEADLINE_EXCEEDED, f"the job ran longer than runPolicy.activeDeadlineSeconds ({seconds} s)")
    stop_running_pods(r)
    clean_pods(r)
    return True
