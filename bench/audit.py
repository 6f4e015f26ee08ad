"""Counting an operator's API requests in the API server's audit log.

The dev cluster's audit policy writes one Metadata-level event per finished request of the audited service
accounts (stage ResponseComplete, or Panic). A benchmark notes the log's size before a run (`offset`) and
counts what was appended after it (`requests`). A watch is counted once, when it ends.
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


def offset(log: Path) -> int:
    """Where the log ends now: count from here."""
    return log.stat().st_size if log.exists() else 0


def requests(log: Path, start: int, user: str) -> Requests:
    """Requests of `user` written to `log` after byte `start`."""
    with log.open("rb") as f:
        f.seek(start)
        return count((raw.decode("utf-8", "replace") for raw in f), user)
