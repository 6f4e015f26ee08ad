"""The one place that changes a TrainingJob's conditions, with Kubernetes semantics.

- Setting a condition to the type/status/reason/message it already has is a no-op.
- lastTransitionTime moves only when the status flips; a new reason or message alone keeps it.
- Succeeded and Failed are terminal and sticky: once either is True nothing changes any more.
- Running and Restarting exclude each other; a terminal condition turns both False, and Succeeded turns
  Stalled and Straggler False too (Failed leaves them: they may be why).
"""

from __future__ import annotations

from enum import StrEnum

from .api import Condition, ConditionType

TERMINAL = (ConditionType.SUCCEEDED, ConditionType.FAILED)


class Reason(StrEnum):
    """Every reason the operator writes (CamelCase, as Kubernetes reasons are)."""

    CREATED = "JobCreated"
    RUNNING = "JobRunning"
    PENDING = "PodsPending"
    RESTARTING = "RankRestarting"
    STOPPED = "RankStopped"  # asked to stop, it saved a checkpoint where it stopped: recreated, not counted
    EVICTED = "RankEvicted"
    NODE_LOST = "NodeLost"
    POD_DELETED = "PodDeleted"
    SUCCEEDED = "JobSucceeded"
    FAILED = "RankFailed"
    FAILURE_RULE = "FailureRule"  # a role's failure rule with action FailJob matched a rank's ending
    GANG_RESTART = "GangRestart"  # a failure rule's RestartGang: every other rank recreated (not counted)
    IGNORED = "FailureIgnored"  # a failure rule's Ignore: the rank recreated, not counted
    BACKOFF_LIMIT = "BackoffLimitExceeded"
    INVALID_SPEC = "InvalidSpec"
    SUSPENDED = "JobSuspended"
    RESUMED = "JobResumed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    RESIZED = "Resized"
    ADMITTED = "GangAdmitted"
    UNSCHEDULABLE = "Unschedulable"  # the pods could not run together even on the cluster's empty nodes
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # they could, once others free the room
    FOREIGN_PODS = "ForeignPodsIgnored"  # pods carrying the job's labels that it does not own
    PROGRESS_UNAVAILABLE = "ProgressUnavailable"  # worker 0's metrics page could not be read, several times
    PROGRESS_DEADLINE = "ProgressDeadlineExceeded"  # no step for runPolicy.progressDeadlineSeconds: Stalled
    PROGRESS_RESUMED = "ProgressResumed"  # the job got past the step it stalled at
    RANK_STALLED = "RankStalled"  # the rank that stopped first in a stall, replaced (not counted)
    STALL_LIMIT = "StallLimitExceeded"  # one stall more than runPolicy.stallLimit
    STRAGGLERS = "RanksStraggling"  # Straggler=True: ranks working runPolicy.stragglerThreshold x their peers
    NO_STRAGGLERS = "NoStragglers"
    RANK_STRAGGLED = "RankStraggled"  # a straggler replaced (stragglerPolicy Replace; not counted)


def is_true(conditions: list[Condition], kind: ConditionType) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions)


def finished(conditions: list[Condition]) -> bool:
    return any(is_true(conditions, t) for t in TERMINAL)


def _set(conditions: list[Condition], new: Condition) -> list[Condition]:
    out, found = [], False
    for c in conditions:
        if c.type != new.type:
            out.append(c)
            continue
        found = True
        if (c.status, c.reason, c.message) == (new.status, new.reason, new.message):
            out.append(c)
        elif c.status == new.status:
            out.append(
                c.model_copy(
                    update={
                        "reason": new.reason,
                        "message": new.message,
                        "observed_generation": new.observed_generation,
                    }
                )
            )
        else:
            out.append(new)
    if not found:
        out.append(new)
    return out


def set_condition(
    conditions: list[Condition],
    kind: ConditionType,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int,
) -> list[Condition]:
    """Return the conditions with `kind` set; the input list is not modified."""
    if finished(conditions):
        return conditions
    new = Condition(
        type=kind,
        status="True" if status else "False",
        reason=reason,
        message=message,
        last_transition_time=now,
        observed_generation=generation,
    )
    out = _set(conditions, new)
    if not status:
        return out
    if kind == ConditionType.SUCCEEDED:  # it got to its end: no longer stalled, and nothing left to straggle
        excluded: tuple[ConditionType, ...] = (
            ConditionType.RUNNING, ConditionType.RESTARTING, ConditionType.STALLED, ConditionType.STRAGGLER,
        )  # fmt: skip
    elif kind in TERMINAL:
        excluded = (ConditionType.RUNNING, ConditionType.RESTARTING)
    elif kind == ConditionType.RUNNING:
        excluded = (ConditionType.RESTARTING,)
    elif kind == ConditionType.RESTARTING:
        excluded = (ConditionType.RUNNING,)
    else:
        excluded = ()
    for other in excluded:
        if is_true(out, other):
            out = _set(out, new.model_copy(update={"type": other, "status": "False"}))
    return out
