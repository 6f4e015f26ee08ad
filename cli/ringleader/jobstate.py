"""A job as the CLI reads it at one moment: the TrainingJob, its pods and the events about both.

Everything here is pure: `describe`, `diagnose` and `logs` read a `JobState`, and the tests read ones recorded from
real jobs (`ringleader diagnose NAME --save-state FILE` writes one as JSON).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ringleader_api import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_ROLE, Reason

from . import logmerge

# The operator's events that say a rank's pod is replaced (restarts.replace_rank): one per new attempt.
REPLACEMENT_REASONS = frozenset({
    Reason.RESTARTING, Reason.EVICTED, Reason.NODE_LOST, Reason.POD_DELETED, Reason.STOPPED, Reason.RANK_STALLED,
    Reason.RANK_STRAGGLED, Reason.GANG_RESTART, Reason.IGNORED,
})  # fmt: skip
_POD_IN_MESSAGE = re.compile(r"\(pod ([a-z0-9.-]+)(?: on node [^)]*)?\)")
_OUTPUT_HEAD = re.compile(r"^.*\(pod ([a-z0-9.-]+)\) attempt (\d+) ended; its last lines:$")


@dataclass
class JobState:
    job: dict[str, Any]
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # oldest first

    @property
    def name(self) -> str:
        return str(self.job.get("metadata", {}).get("name", ""))

    def save(self, path: Path) -> None:
        """As JSON, without what no reader needs (managedFields)."""
        path.write_text(json.dumps(_compact(asdict(self)), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> JobState:
        return cls(**json.loads(path.read_text()))

    def ranks(self, only: str | None = None) -> list[str]:
        """The job's ranks (`worker-0`, ..., `ps-0`), from its spec; `only` keeps that one if it exists."""
        spec = self.job.get("spec") or {}
        names = [f"worker-{i}" for i in range(int((spec.get("workers") or {}).get("replicas", 0)))]
        if spec.get("parameterServers"):
            names += [f"ps-{i}" for i in range(int(spec["parameterServers"].get("replicas", 0)))]
        return [r for r in names if only is None or r == only]

    def pod_of(self, rank: str) -> dict[str, Any] | None:
        return next((p for p in self.pods if rank_of_pod(p) == rank), None)

    def attempt_of(self, pod: dict[str, Any]) -> int:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ATTEMPT, "0")
        return int(raw) if str(raw).isdigit() else 0

    def replacements(self, rank: str) -> list[dict[str, Any]]:
        """The operator's events replacing `rank`'s pod, oldest first: the pod a message names first is the one
        replaced (a gang restart's message names the failed rank's pod after it)."""
        pod = f"{self.name}-{rank}"
        return [e for e in self.events if e.get("reason") in REPLACEMENT_REASONS and _subject(e) == pod]

    def last_lines(self, rank: str) -> dict[int, list[logmerge.LogLine]]:
        """The last lines of the rank's earlier attempts that failed, by attempt, as the operator kept them (its
        RankOutput events: the end of each failed pod's log, while the API server keeps the event), each block
        under a line saying what it is."""
        pod = f"{self.name}-{rank}"
        out: dict[int, list[logmerge.LogLine]] = {}
        for event in self.events:
            found = _output(event)
            if found is None or found[0] != pod:
                continue
            _, attempt, lines = found
            when = logmerge.parse_time(event_time(event)) or logmerge.EPOCH
            note = f"--- {rank}: the last lines of attempt {attempt} (its pod is gone; kept by the operator) ---"
            out[attempt] = [logmerge.LogLine(rank, attempt, when, note, marker=True)] + [
                logmerge.LogLine(rank, attempt, when, line) for line in lines
            ]
        return out

    def markers(self, rank: str) -> dict[int, logmerge.LogLine]:
        """A marker before each attempt after the first, up to the rank's current one: why its previous pod was
        replaced (the operator's event, while the API server keeps it), when."""
        pod = self.pod_of(rank)
        current = self.attempt_of(pod) if pod is not None else len(self.replacements(rank))
        events = self.replacements(rank)[-current:] if current else []
        first = current - len(events) + 1  # events expire (an hour by default): the newest are kept
        out: dict[int, logmerge.LogLine] = {}
        for attempt in range(1, current + 1):
            event = events[attempt - first] if attempt >= first else None
            when = logmerge.parse_time(event_time(event)) if event else None
            why = (event.get("message") or "") if event else "an earlier attempt; its event has expired"
            out[attempt] = logmerge.marker(rank, attempt, when or logmerge.EPOCH, why)
        return out


def _compact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if k != "managedFields"}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _subject(event: dict[str, Any]) -> str:
    found = _POD_IN_MESSAGE.search(event.get("message") or "")
    return found.group(1) if found else ""


def _output(event: dict[str, Any]) -> tuple[str, int, list[str]] | None:
    """(pod, attempt, lines) of a RankOutput event (the operator's restarts.output_note); None for another."""
    if event.get("reason") != Reason.RANK_OUTPUT:
        return None
    head, _, rest = (event.get("message") or "").partition("\n")
    m = _OUTPUT_HEAD.match(head)
    return (m.group(1), int(m.group(2)), rest.split("\n")) if m else None


def rank_of_pod(pod: dict[str, Any]) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return f"{labels.get(LABEL_ROLE, '')}-{labels.get(LABEL_INDEX, '')}"


def event_time(event: dict[str, Any]) -> str:
    return str(
        event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )  # fmt: skip


def duration(seconds: float) -> str:
    """`45s`, `3m12s`, `2h05m`."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def age(since: str | None, now: datetime) -> str:
    """`3m12s` from an RFC 3339 time to `now` (`2d03h` past a day); "" when unknown."""
    when = logmerge.parse_time(since or "")
    if when is None:
        return ""
    seconds = max(0, int((now - when).total_seconds()))
    return duration(seconds) if seconds < 86400 else f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
