"""Failure budgets, pure: each class of failure (failures.failure_class) has its own count in status.failures and
its own limit, window, same-error limit and back-off (runPolicy.failureBudgets), so a node's trouble does not use
up the restarts meant for the program's errors.

Defaults are what users expect: the infrastructure's failures are retried (20 an hour: a node lost, an eviction,
a network's timeout); the program's own are retried backoffLimit times over the job's life (3), but the same
exception three times in a row is not retried again; running out of memory is retried 3 times (the next run may
fit, the same input rarely does). A window is fixed: it starts at its first failure and the count starts again
once it has passed.

Budgets count incidents, not pods: failures of ranks that ended within INCIDENT_SECONDS of an incident's first
(a node lost with its 8 ranks, every rank raising the same error at one step) are that incident and count
once, against the limit and the same-error limit alike; so does escalation. A rank failing again is always a new
incident (a crash loop is counted every time).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ringleader_api import Escalation, FailureClass, FailureCount, Reason, RunPolicy

from .observed import format_time, parse_time

# Per class: (limit, windowSeconds, sameErrorLimit) when the job's failureBudgets leaves them unset. UserCode's
# limit is runPolicy.backoffLimit.
DEFAULTS: dict[FailureClass, tuple[int | None, int | None, int | None]] = {
    FailureClass.INFRASTRUCTURE: (20, 3600, None),
    FailureClass.USER_CODE: (None, None, 3),
    FailureClass.RESOURCES: (3, None, None),
}
FIELDS = {
    FailureClass.INFRASTRUCTURE: "infrastructure",
    FailureClass.USER_CODE: "userCode",
    FailureClass.RESOURCES: "resources",
}


@dataclass(frozen=True)
class Budget:
    """One class's budget with the defaults filled in."""

    kind: FailureClass
    limit: int
    window_seconds: int | None
    same_error_limit: int | None
    base_seconds: float
    cap_seconds: float
    from_backoff_limit: bool  # the limit is runPolicy.backoffLimit (how messages and the failure reason name it)

    def describe(self, count: FailureCount) -> str:
        """`UserCode 2 of backoffLimit 3`, `Infrastructure 1 of 20 in 3600 s, failure 2 of one incident`: where a
        count stands."""
        of = f"backoffLimit {self.limit}" if self.from_backoff_limit else str(self.limit)
        within = f" in {self.window_seconds} s" if self.window_seconds else ""
        incident = f", failure {count.incident_failures} of one incident" if count.incident_failures > 1 else ""
        return f"{self.kind.value} {count.in_window} of {of}{within}{incident}"


def budget(policy: RunPolicy, kind: FailureClass) -> Budget:
    """The budget of class `kind` under the run policy."""
    own = policy.failure_budgets.of(kind)
    limit, window, same = DEFAULTS[kind]
    backoff = own.backoff or policy.restart_backoff
    from_backoff_limit = own.limit is None and limit is None
    return Budget(
        kind=kind,
        limit=own.limit if own.limit is not None else limit if limit is not None else policy.backoff_limit,
        window_seconds=own.window_seconds if own.window_seconds is not None else window,
        same_error_limit=own.same_error_limit if own.same_error_limit is not None else same,
        base_seconds=backoff.base_seconds,
        cap_seconds=backoff.cap_seconds,
        from_backoff_limit=from_backoff_limit,
    )


Charged = tuple[FailureCount, str | None, Reason | None]

INCIDENT_SECONDS = 30.0  # failures within this long of an incident's first belong to it (a node lost with 8 ranks)


def same_incident(count: FailureCount | None, ended: datetime, replaced: str | None) -> bool:
    """Whether a failure that ended at `ended` belongs to the latest incident `count` holds: within
    INCIDENT_SECONDS of that incident's first, before or after, and of a rank not replaced since the incident
    began (`replaced`: when the operator last replaced the rank's pod)."""
    if count is None or not count.incident_start:
        return False
    start = parse_time(count.incident_start)
    if abs((ended - start).total_seconds()) >= INCIDENT_SECONDS:
        return False
    return replaced is None or parse_time(replaced) < start


def _joined(c: FailureCount) -> FailureCount:
    """The count after one more failure of its latest incident: counted in the total only."""
    return c.model_copy(update={"total": c.total + 1, "incident_failures": c.incident_failures + 1})


def _window(count: FailureCount, window: int | None, now: datetime) -> tuple[int, str | None]:
    """The count in the current window and when it began: (0, None) once the window has passed."""
    start = count.window_start
    if window is not None and start and (now - parse_time(start)).total_seconds() >= window:
        return 0, None
    return count.in_window, start


class Step(StrEnum):
    """How far a failure escalates (runPolicy.escalation)."""

    RANK = "rank"
    GANG = "gang"
    FAIL = "fail"


def escalate(
    count: FailureCount | None, policy: Escalation, now: datetime, ended: datetime, joins: bool = False
) -> tuple[FailureCount, Step, str]:
    """The escalation window's count after one more counted failure (ended at `ended`; `joins`: of the latest
    incident, same_incident), how far that failure escalates, and why (empty for the rank alone): within
    windowSeconds, the first rankRestarts incidents restart the rank, the next gangRestarts the gang, and the
    one after fails the job. A failure joining an incident restarts its rank alone: the incident's first
    decided the rest."""
    c = count or FailureCount()
    if joins:
        return _joined(c), Step.RANK, ""
    in_window, start = _window(c, policy.window_seconds, now)
    n = in_window + 1
    after = FailureCount(
        total=c.total + 1, in_window=n, window_start=start or format_time(now), incident_start=format_time(ended),
        incident_failures=1,
    )  # fmt: skip
    within = f"failure {n} in {policy.window_seconds} s"
    if n <= policy.rank_restarts:
        return after, Step.RANK, ""
    if n <= policy.rank_restarts + policy.gang_restarts:
        return after, Step.GANG, f"{within}, past runPolicy.escalation.rankRestarts {policy.rank_restarts}"
    most = policy.rank_restarts + policy.gang_restarts
    return after, Step.FAIL, f"{within}, past runPolicy.escalation's {most} restarts (rank and gang)"


def charge(
    count: FailureCount | None, budget: Budget, error: str, now: datetime, ended: datetime, joins: bool = False
) -> Charged:
    """The class's count after one more failure (`error`: its exception, empty when it said none; `ended`: when
    it ended; `joins`: it belongs to the latest incident, same_incident), and, when that failure is one too
    many, why and the job's failure reason (None, None: it is restarted). The incident that would take the
    window's count past the limit is one too many (BackoffLimitExceeded when the limit is backoffLimit, else
    FailureBudgetExceeded); so is the sameErrorLimit-th in a row with the same error. A failure joining an
    incident is never one too many: its incident was counted."""
    c = count or FailureCount()
    if joins:
        return _joined(c), None, None
    in_window, start = _window(c, budget.window_seconds, now)
    same = (c.same_errors + 1 if error == c.last_error else 1) if error else 0
    after = FailureCount(
        total=c.total + 1, in_window=in_window + 1, window_start=start or format_time(now), last_error=error,
        same_errors=same, incident_start=format_time(ended), incident_failures=1,
    )  # fmt: skip
    field = f"failureBudgets.{FIELDS[budget.kind]}"
    if budget.same_error_limit is not None and same >= budget.same_error_limit:
        why = f"the same error {same} times in a row ({field}.sameErrorLimit {budget.same_error_limit})"
        return after, why, Reason.FAILURE_BUDGET
    if in_window >= budget.limit:
        if budget.from_backoff_limit:
            return after, f"backoffLimit {budget.limit} reached", Reason.BACKOFF_LIMIT
        within = f" in {budget.window_seconds} s" if budget.window_seconds else ""
        why = f"{in_window + 1} {budget.kind.value} failures{within}, {field}.limit {budget.limit}"
        return after, why, Reason.FAILURE_BUDGET
    return after, None, None
