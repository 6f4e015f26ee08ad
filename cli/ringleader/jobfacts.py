"""What a `JobState` says, as `diagnose`'s rules read it: the job's conditions, the ranks whose pods or recorded
restarts match, a rank's last line, the operator's events; and how a finding names ranks and counts things."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from ringleader_api import ConditionType, Reason, rank_entries

from .jobstate import JobState, rank_of_pod
from .logmerge import rank_order

MAX_NAMED = 5  # ranks named per finding; more are counted

# The trainer's exit codes (ringleader_trainer.exitcodes, docs/exit-codes.md; a test holds the two together) and
# the kernel's signal exits a rank meets: what each means for a person.
EXIT_CODES: dict[int, tuple[str, str]] = {
    1: ("CRASH", "an uncaught exception in the script or the trainer: the traceback is in the rank's log"),
    2: (
        "BAD_ENVIRONMENT",
        "the environment contract is missing or inconsistent (a launcher that formed another "
        "world, or RANK/WORLD_SIZE set by hand)",
    ),
    3: ("BAD_CONFIG", "the trainer's arguments are invalid (an unknown example, a bad flag)"),
    4: ("CORRUPT_CHECKPOINT", "a checkpoint exists but cannot be loaded, and no older one can"),
    200: ("RENDEZVOUS_TIMEOUT", "the rank could not reach worker 0 (the master) or a parameter server in time"),
    201: ("PEER_LOST", "a collective or parameter-server exchange failed: another rank died or hung"),
    202: ("STOPPED", "asked to stop, it saved its checkpoint (not a failure)"),
    134: ("SIGABRT", "the process aborted (a C++ assertion, e.g. in a collective library)"),
    137: ("SIGKILL", "killed: out of memory (OOMKilled), a failed liveness probe or a kill past the grace period"),
    139: ("SIGSEGV", "a segmentation fault in native code"),
    143: ("SIGTERM", "told to stop, and it exited without saving"),
}


def condition(state: JobState, kind: ConditionType) -> dict[str, Any] | None:
    for c in (state.job.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def true_condition(state: JobState, kind: ConditionType) -> dict[str, Any] | None:
    c = condition(state, kind)
    return c if c is not None and c.get("status") == "True" else None


def ended(state: JobState) -> bool:
    return (
        true_condition(state, ConditionType.SUCCEEDED) is not None
        or true_condition(state, ConditionType.FAILED) is not None
    )


def failed_by_ranks(state: JobState) -> bool:
    failed = true_condition(state, ConditionType.FAILED)
    return failed is not None and failed.get("reason") in (Reason.FAILED, Reason.BACKOFF_LIMIT, Reason.FAILURE_RULE)


def container_statuses(pod: dict[str, Any]) -> Iterable[dict[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def ranks_where(
    state: JobState, terminated: Callable[[dict[str, Any]], bool], message: Callable[[str], bool]
) -> list[str]:
    """Ranks whose pod (now, or last time: lastState) terminated as `terminated` says, or whose recorded restart
    or the job's Failed condition says `message`."""
    ranks: set[str] = set()
    for pod in state.pods:
        for cs in container_statuses(pod):
            for where in ("state", "lastState"):
                if terminated((cs.get(where) or {}).get("terminated") or {}):
                    ranks.add(rank_of_pod(pod))
    for rank, info in rank_entries((state.job.get("status") or {}).get("ranks") or {}).items():
        if message(info.get("lastMessage") or ""):
            ranks.add(rank)
    failed = true_condition(state, ConditionType.FAILED)
    if failed is not None and message(failed.get("message") or ""):
        ranks.update(ranks_named(state, failed.get("message") or ""))
    return sorted(ranks, key=rank_order)


def ranks_named(state: JobState, message: str) -> list[str]:
    return [f"{role}-{i}" for role, i in re.findall(rf"{re.escape(state.name)}-(worker|ps)-(\d+)", message)]


def memory_limit(state: JobState) -> str:
    """The first memory limit of a container of the job's pods, else of its workers' template."""
    template = (((state.job.get("spec") or {}).get("workers") or {}).get("template") or {}).get("spec") or {}
    for spec in [*((pod.get("spec") or {}) for pod in state.pods), template]:
        for c in spec.get("containers") or []:
            limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            if limit:
                return str(limit)
    return ""


# The trainer's exit record (its last line, for the operator: docs/exit-codes.md) is not what a person wrote last.
EXIT_RECORD = '{"event": "exit"'


def last_line(state: JobState, rank: str) -> str:
    """The last line the rank's newest failed attempt wrote (the operator's RankOutput event) before its exit
    record, or ""."""
    kept = state.last_lines(rank)
    if not kept:
        return ""
    lines = [
        line.text for line in kept[max(kept)]
        if not line.marker and line.text.strip() and not line.text.lstrip().startswith(EXIT_RECORD)
    ]  # fmt: skip
    return lines[-1].strip() if lines else ""


def operator_events(state: JobState, reason: str) -> list[dict[str, Any]]:
    return [e for e in state.events if e.get("reason") == reason
            and (e.get("involvedObject") or {}).get("kind") == "TrainingJob"]  # fmt: skip


def names(ranks: list[str]) -> str:
    """`worker-1`, `worker-1, worker-2`, `worker-0, ..., worker-4 and 7 more`."""
    shown = ", ".join(ranks[:MAX_NAMED])
    return f"{shown} and {len(ranks) - MAX_NAMED} more" if len(ranks) > MAX_NAMED else shown


def count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
