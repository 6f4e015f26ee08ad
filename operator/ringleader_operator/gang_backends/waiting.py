"""A gang that waits to be placed, pure: what every backend that can say so writes of it."""

from __future__ import annotations

from datetime import timedelta

from ringleader_api import ConditionType

from ..observed import parse_time
from ..round_state import Event, Round

# A gang that waits is looked at again this often (and at once when a job of this operator frees room).
ADMISSION_RETRY_SECONDS = 5.0


def wait(r: Round, reason: str, message: str) -> None:
    """The gang waits to be placed: say why (once per reason), and fail the job once
    runPolicy.schedulingTimeoutSeconds has run out since it began waiting."""
    before = next((c for c in r.status.conditions if c.type == ConditionType.ADMITTED), None)
    r.set_condition(ConditionType.ADMITTED, False, reason, message)
    if before is None or (before.status, before.reason) != ("False", reason):
        r.plan.events.append(Event("Warning", reason, message))
    admitted = next(c for c in r.status.conditions if c.type == ConditionType.ADMITTED)
    since = parse_time(admitted.last_transition_time or r.now)
    timeout = r.job.spec.run_policy.scheduling_timeout_seconds
    if timeout is not None and r.at >= since + timedelta(seconds=timeout):
        r.fail(
            reason,
            f"the pods found no room to run together within runPolicy.schedulingTimeoutSeconds ({timeout} s): "
            + message,
        )
        return
    retry = r.after(ADMISSION_RETRY_SECONDS)
    r.wake_at(retry if timeout is None else min(retry, since + timedelta(seconds=timeout)))
