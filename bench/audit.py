"""Counting an operator's API requests in the API server's audit log.

The dev cluster's audit policy writes one Metadata-level event per finished request of the audited service
accounts (stage ResponseComplete, or Panic). A benchmark notes the log's size before a run (`offset`) and
counts what was appended after it (`requests`). A watch is counted once, when it ends. The API server rotates
the log at 100 MB (renaming it `audit-<time>.log` beside the new one): a run during which that happened is
counted from its offset in the rotated file on, and from the start of the new one (a 500-job burst once read as
0 requests when the offset pointed past the end of the new file).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Requests:
    """One user's requests: the total, per verb and per "verb resource" (subresources as resource/sub)."""

    total: int = 0
    by_verb: Counter[str] = field(default_factory=Counter)
    by_call: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {"total": self.total, "by_verb": dict(self.by_verb), "by_call": dict(self.by_call.most_common())}


def count(lines: Iterable[str], user: str) -> Requests:
    """Requests of `user` among audit log lines (JSON events). Lines that are not complete JSON events (a
    line being written while the log is read) are skipped."""
    out = Requests()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("user", {}).get("username") != user or event.get("stage") not in ("ResponseComplete", "Panic"):
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", "?"))
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        out.total += 1
        out.by_verb[event.get("verb", "?")] += 1
        out.by_call[f"{event.get('verb', '?')} {resource}"] += 1
    return out


@dataclass(frozen=True)
class Mark:
    """Where the log ended when a run began: its file (by inode) and size."""

    inode: int
    size: int


def offset(log: Path) -> Mark:
    """Where the log ends now: count from here."""
    if not log.exists():
        return Mark(0, 0)
    st = log.stat()
    return Mark(st.st_ino, st.st_size)


def _lines(path: Path, start: int) -> Iterable[str]:
    with path.open("rb") as f:
        f.seek(start)
        yield from (raw.decode("utf-8", "replace") for raw in f)


def requests(log: Path, start: Mark, user: str) -> Requests:
    """Requests of `user` written to `log` since `start`, across a rotation of the log."""
    if log.exists() and log.stat().st_ino == start.inode:
        return count(_lines(log, start.size), user)
    # Rotated since: the rest of the file the mark was taken in, then the new log from its start.
    rotated = [p for p in log.parent.glob(f"{log.stem}-*{log.suffix}") if p.stat().st_ino == start.inode]
    parts = [_lines(p, start.size) for p in rotated] + ([_lines(log, 0)] if log.exists() else [])
    return count((line for part in parts for line in part), user)
