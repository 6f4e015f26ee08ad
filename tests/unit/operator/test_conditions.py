"""Condition transitions, table-style."""

from __future__ import annotations

import pytest
from ringleader_api import Condition, ConditionType
from ringleader_operator.conditions import finished, is_true, set_condition

T = ConditionType


def cond(kind: ConditionType, status: str, reason: str = "R", message: str = "m", at: str = "t0") -> Condition:
    return Condition(type=kind, status=status, reason=reason, message=message, last_transition_time=at)


def by_type(conds: list[Condition]) -> dict[str, tuple[str, str, str]]:
    return {c.type.value: (c.status, c.reason, c.last_transition_time) for c in conds}


@pytest.mark.parametrize(
    ("before", "kind", "status", "reason", "after"),
    [
        ([], T.CREATED, True, "R", {"Created": ("True", "R", "t1")}),
        ([cond(T.RUNNING, "True")], T.RUNNING, True, "R", {"Running": ("True", "R", "t0")}),  # no-op
        ([cond(T.RUNNING, "True")], T.RUNNING, True, "Other", {"Running": ("True", "Other", "t0")}),  # keeps time
        ([cond(T.RUNNING, "False")], T.RUNNING, True, "R", {"Running": ("True", "R", "t1")}),  # flip moves time
        (
            [cond(T.RUNNING, "True")],
            T.RESTARTING,
            True,
            "Restart",
            {"Running": ("False", "Restart", "t1"), "Restarting": ("True", "Restart", "t1")},
        ),
        (
            [cond(T.RESTARTING, "True")],
            T.RUNNING,
            True,
            "Back",
            {"Restarting": ("False", "Back", "t1"), "Running": ("True", "Back", "t1")},
        ),
        (
            [cond(T.RUNNING, "True")],
            T.SUCCEEDED,
            True,
            "Done",
            {"Running": ("False", "Done", "t1"), "Succeeded": ("True", "Done", "t1")},
        ),
        (
            [cond(T.RUNNING, "True"), cond(T.STALLED, "True"), cond(T.STRAGGLER, "True")],
            T.SUCCEEDED,
            True,
            "Done",
            {
                "Running": ("False", "Done", "t1"),
                "Stalled": ("False", "Done", "t1"),
                "Straggler": ("False", "Done", "t1"),
                "Succeeded": ("True", "Done", "t1"),
            },
        ),
        (
            [cond(T.STALLED, "True")],
            T.FAILED,
            True,
            "Stalled",
            {"Stalled": ("True", "R", "t0"), "Failed": ("True", "Stalled", "t1")},
        ),
        ([cond(T.FAILED, "True")], T.RUNNING, True, "R", {"Failed": ("True", "R", "t0")}),  # sticky
        ([cond(T.SUCCEEDED, "True")], T.FAILED, True, "Late", {"Succeeded": ("True", "R", "t0")}),  # sticky
    ],
    ids=[
        "add",
        "same-noop",
        "new-reason-keeps-time",
        "flip",
        "restarting-excludes-running",
        "running-excludes-restarting",
        "terminal-clears-running",
        "succeeded-clears-stalled",
        "failed-keeps-stalled",
        "failed-sticky",
        "succeeded-sticky",
    ],
)
def test_set_condition(
    before: list[Condition], kind: ConditionType, status: bool, reason: str, after: dict[str, tuple[str, str, str]]
) -> None:
    result = set_condition(before, kind, status, reason, "m", "t1", 1)
    assert by_type(result) == after
    assert by_type(before) == by_type(list(before))  # input untouched


def test_finished_and_is_true() -> None:
    conds = [cond(T.CREATED, "True"), cond(T.FAILED, "True")]
    assert finished(conds) and is_true(conds, T.CREATED) and not is_true(conds, T.RUNNING)
    assert not finished([cond(T.SUCCEEDED, "False")])
