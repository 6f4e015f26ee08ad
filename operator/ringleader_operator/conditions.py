"""The one place that changes a TrainingJob's conditions, with Kubernetes semantics.

- Setting a condition to the type/status/reason/message it already has is a no-op.
- lastTransitionTime moves only when the status flips; a new reason or message alone keeps it.
- Succeeded and Failed are terminal and sticky: once either is True nothing changes any more.
- Running and Restarting exclude each other; a terminal condition turns both False, and Succeeded turns
  Stalled and Straggler False too (Failed leaves them: they may be why).
- A status is True, False or Unknown (None: what the operator cannot tell, e.g. Stalled while no progress page
  can be read); only True excludes others.
"""

from __future__ import annotations

from ringleader_api import Condition, ConditionType

TERMINAL = (ConditionType.SUCCEEDED, ConditionType.FAILED)


def condition(conditions: list[Condition], kind: ConditionType) -> Condition | None:
    return next((c for c in conditions if c.type == kind), None)


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
    status: bool | None,
    reason: str,
    message: str,
    now: str,
    generation: int,
) -> list[Condition]:
    """Return the conditions with `kind` set (`status` None: Unknown); the input list is not modified."""
    if finished(conditions):
        return conditions
    new = Condition(
        type=kind,
        status="Unknown" if status is None else "True" if status else "False",
        reason=reason,
        message=message,
        last_transition_time=now,
        observed_generation=generation,
    )
    out = _set(conditions, new)
    if status is not True:
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
        if (c := condition(out, other)) is not None and c.status != "False":
            out = _set(out, new.model_copy(update={"type": other, "status": "False"}))
    return out
