"""Every rank's log lines as one stream, built without I/O: `ringleader logs` and `Client.logs`.

Each rank's lines come in its own order (attempt by attempt, as the kubelet stamped them); the ranks are merged by
time. A marker stands between two attempts of a rank, before the later one's first line, whatever the clocks
say: within a rank the order is the rank's own. The trainer's JSON lines (`{"ts": ..., "step": ...}`) are shown as
`step=120 loss=0.0312 ...` unless kept raw.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_RANKS = 64  # ranks one `logs` reads (or follows) unless told otherwise: a 10,000-rank job's are not read whole
HIDDEN_FIELDS = ("ts", "role", "index")  # the prefix says which rank and the line's time is the kubelet's


@dataclass(frozen=True)
class LogLine:
    """One line a rank wrote (`marker` False), or the note between two of its attempts (`marker` True)."""

    rank: str  # worker-1, ps-0
    attempt: int
    time: datetime
    text: str
    marker: bool = False


def parse_time(stamp: str) -> datetime | None:
    """An RFC 3339 time as the kubelet and the API server write it (nanoseconds cut to microseconds)."""
    stamp = stamp.strip()
    if not stamp:
        return None
    if stamp.endswith("Z"):
        stamp = stamp[:-1] + "+00:00"
    main, _, zone = stamp.partition("+")
    if "." in main:
        head, frac = main.split(".", 1)
        main = f"{head}.{frac[:6]}"
    try:
        parsed = datetime.fromisoformat(f"{main}+{zone}" if zone else main)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_lines(rank: str, attempt: int, text: str) -> list[LogLine]:
    """A pod's log read with timestamps (`<RFC 3339> <line>` per line) as LogLines. A line without a stamp takes
    the previous line's time (the kubelet splits none, but a truncated read may start mid-line)."""
    lines: list[LogLine] = []
    last = EPOCH
    for raw in text.splitlines():
        stamp, _, rest = raw.partition(" ")
        when = parse_time(stamp)
        if when is None:
            when, rest = last, raw
        last = when
        lines.append(LogLine(rank, attempt, when, rest))
    return lines


def marker(rank: str, attempt: int, when: datetime, why: str) -> LogLine:
    """The note before attempt `attempt` of `rank` (`why`: the reason its previous pod was replaced)."""
    because = f" ({why})" if why else ""
    return LogLine(rank, attempt, when, f"--- {rank}: attempt {attempt} starts{because} ---", marker=True)


def rank_stream(attempts: Sequence[Sequence[LogLine]], markers: dict[int, LogLine]) -> list[LogLine]:
    """One rank's lines, attempt by attempt in the order given, with `markers[k]` before the first line of the first
    attempt numbered k or more (so the markers of attempts whose lines are gone still come first, in order), and
    the markers of attempts with no lines yet at the end. Times are made non-decreasing within the rank (a marker
    timed by an event may read earlier than the previous attempt's last line): the rank's order survives `merge`."""
    pending = sorted(markers.items())
    out: list[LogLine] = []

    def put(line: LogLine) -> None:
        last = out[-1].time if out else EPOCH
        out.append(line if line.time >= last else LogLine(line.rank, line.attempt, last, line.text, line.marker))

    for lines in attempts:
        while lines and pending and pending[0][0] <= lines[0].attempt:
            put(pending.pop(0)[1])
        for line in lines:
            put(line)
    for _, line in pending:
        put(line)
    return out


def merge(streams: Iterable[Sequence[LogLine]]) -> Iterator[LogLine]:
    """The ranks' streams (each in its own order, as `rank_stream` makes them) merged by time; lines at the same
    time keep the order of `streams`."""
    keyed = ([((line.time, i, n), line) for n, line in enumerate(s)] for i, s in enumerate(streams))
    for _, line in heapq.merge(*keyed, key=lambda item: item[0]):
        yield line


def render(text: str) -> str:
    """A trainer JSON line as `event: key=value ...` or `key=value ...`; any other line as it is."""
    if not text.startswith("{"):
        return text
    try:
        fields = json.loads(text)
    except ValueError:
        return text
    if not isinstance(fields, dict) or "ts" not in fields:
        return text
    shown = {k: v for k, v in fields.items() if k not in HIDDEN_FIELDS}
    event = shown.pop("event", None)
    pairs = " ".join(f"{k}={_value(v)}" for k, v in shown.items())
    if event is None:
        return pairs
    return f"{event}: {pairs}" if pairs else str(event)


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, str) and (" " in v or not v):
        return json.dumps(v)
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def rank_order(rank: str) -> tuple[int, int]:
    """Workers before parameter servers, then by index: worker-0, worker-1, ..., ps-0."""
    role, _, index = rank.rpartition("-")
    return (0 if role == "worker" else 1, int(index) if index.isdigit() else 0)
