"""Failure budgets, pure: each class of failure (failures.failure_class) has its own count in status.failures and
its own limit, window, same-error limit and back-off (runPolicy.failureBudgets), so a node's trouble does not use
up the restarts meant for the program's errors.

Defaults are what users expect: the infrastructure's failures are retried (20 an hour: a node lost, an eviction,
a network's timeout); the program's own are retried backoffLimit times over the job's life (3), but the same
exception three times in a row is not retried again; running out of memory is retried 3 times (the next run may
fit, the same input rarely does). A window is fixed: it starts at its first failure and the count starts again
once it has passed.
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

    def describe(self, count: int) -> str:
        """`UserCode 2 of backoffLimit 3`, `Infrastructure 1 of 20 in 3600 s`: where a count stands."""
        of = f"backoffLimit {self.limit}" if self.from_backoff_limit else str(self.limit)
        within = f" in {self.window_seconds} s" if self.window_seconds else ""
        return f"{self.kind.value} {count} of {of}{within}"


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


def escalate(count: FailureCount | None, policy: Escalation, now: datetime) -> tuple[FailureCount, Step, str]:
    """The escalation window's count after one more counted failure, how far that failure escalates, and why
    (empty for the rank alone): within windowSeconds, the first rankRestarts restart the rank, the next
    gangRestarts the gang, and the one after fails the job."""
    c = count or FailureCount()
    in_window, start = _window(c, policy.window_seconds, now)
    n = in_window + 1
    after = FailureCount(total=c.total + 1, in_window=n, window_start=start or format_time(now))
    within = f"failure {n} in {policy.window_seconds} s"
    if n <= policy.rank_restarts:
        return after, Step.RANK, ""
    if n <= policy.rank_restarts + policy.gang_restarts:
        return after, Step.GANG, f"{within}, past runPolicy.escalation.rankRestarts {policy.rank_restarts}"
    most = policy.rank_restarts + policy.gang_restarts
    return after, Step.FAIL, f"{within}, past runPolicy.escalation's {most} restarts (rank and gang)"


def charge(count: FailureCount | None, budget: Budget, error: str, now: datetime) -> Charged:
    """The class's count after one more failure (`error`: its exception, empty when it said none), and, when that
    failure is one too many, why and the job's failure reason (None, None: it is restarted). The failure that
    would take the window's count past the limit is one too many (BackoffLimitExceeded when the limit is
    backoffLimit, else FailureBudgetExceeded); so is the sameErrorLimit-th in a row with the same error."""
    c = count or FailureCount()
    in_window, start = _window(c, budget.window_seconds, now)
    same = (c.same_errors + 1 if error == c.last_error else 1) if error else 0
    after = FailureCount(
        total=c.total + 1, in_window=in_window + 1, window_start=start or format_time(now), last_error=error,
        same_errors=same,
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
