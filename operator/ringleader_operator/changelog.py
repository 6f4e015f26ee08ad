"""What changed in each group of an index (podcache.Grouped: a job's pods), by name, pure: a reader that knows a
group's revision asks which names changed since, and reads the group whole where the log cannot say."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

CHANGE_LOG = 1024  # changes a group remembers: a reader further behind than that reads the group whole


@dataclass(frozen=True)
class PodDelta:
    """A group's pods at its revision `revision` of index `source`, against an earlier revision `since` of it:
    each pod that changed in between by name, its digest now (None: gone from the group). `changed` is None when
    the index cannot say (no `since`, or further back than it remembers): the reader looks at every pod."""

    source: object
    revision: int
    since: int | None = None
    changed: dict[str, dict[str, Any] | None] | None = None


class ChangeLog:
    """Per group, its last CHANGE_LOG changes (the log's clock, a name), newest last. A group's revision is the clock
    of its newest change: clocks grow over every group, so a group made again never repeats one."""

    def __init__(self) -> None:
        self._clock = 0
        self._changes: dict[Any, deque[tuple[int, str]]] = {}
        self._floor: dict[Any, int] = {}  # the clock before the group's oldest remembered change

    def changed(self, group: Any, name: str) -> None:
        self._clock += 1
        changes = self._changes.get(group)
        if changes is None:  # a new group: nothing before now is remembered
            changes = self._changes[group] = deque(maxlen=CHANGE_LOG)
            self._floor[group] = self._clock - 1
        elif len(changes) == CHANGE_LOG:
            self._floor[group] = changes[0][0]  # the oldest is forgotten now
        changes.append((self._clock, name))

    def forget(self, group: Any) -> None:
        """The group is gone (no pods): a reader of it reads it whole when it comes again."""
        self._changes.pop(group, None)
        self._floor.pop(group, None)

    def since(self, group: Any, since: int | None) -> tuple[int, set[str] | None] | None:
        """The group's revision and the names changed after revision `since` (None: it cannot say); None when the
        group has no changes remembered (gone, or never seen)."""
        changes = self._changes.get(group)
        if not changes:
            return None
        revision = changes[-1][0]
        if since is None or since < self._floor[group] or since > revision:
            return revision, None
        names: set[str] = set()
        for at, name in reversed(changes):
            if at <= since:
                break
            names.add(name)
        return revision, names
