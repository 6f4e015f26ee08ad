"""Custom resources whose CRDs are installed after the operator started (Kueue's Workloads) get served: kopf's
own rescans, made reliable.

kopf serves a resource whose CRD appears later by rescanning the resource's API group (the API server's
discovery) on each watch event of a CRD of that group. Two things made that miss Kueue's Workloads when Kueue
was installed beside a running operator, so every queued job stayed Queued until the operator restarted:

- Discovery lags the CRD's events. Kueue's CRDs are applied together, workloads.kueue.x-k8s.io last; the scan
  its Established event made found every Kueue resource but Workloads, and no event came after it.
- Each CRD's events run in a worker of their own, so a group's scans overlap, and a scan that began earlier
  but ended later overwrote a newer one.

`OrderedRescans` runs a group's rescans one at a time, in the order of their events, and rescans the group
again SETTLE_S after its last CRD event (each new event restarts that count). It wraps the function kopf's
resource observer calls per CRD event (kopf 1.45, pinned; a unit test checks the seam is still there), and is
put in place by `install` before kopf runs. A CRD event is rare: the cost is a few discovery GETs each.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kopf._core.reactor import observation

log = logging.getLogger(__name__)

SETTLE_S = (1.0, 5.0, 30.0)  # seconds after a group's last CRD event to rescan it again, each counted from the last

Rescan = Callable[..., Awaitable[None]]  # kopf's process_discovered_resource_event(raw_event=..., **kw)


class OrderedRescans:
    """Called as kopf calls its per-CRD-event rescan (`rescan`): one group's rescans never overlap, and each
    group is rescanned again after SETTLE_S of quiet."""

    def __init__(self, rescan: Rescan, settle: tuple[float, ...] = SETTLE_S) -> None:
        self.rescan, self.settle = rescan, settle
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.events: defaultdict[str, int] = defaultdict(int)  # CRD events per group: a newer one ends older trails
        self.trails: set[asyncio.Task[None]] = set()

    async def __call__(self, *, raw_event: Mapping[str, Any], **kw: Any) -> None:
        group = _group(raw_event)
        if raw_event.get("type") is None or group is None:  # the initial listing: kopf ignores it too
            await self.rescan(raw_event=raw_event, **kw)
            return
        self.events[group] += 1
        mine = self.events[group]
        async with self.locks[group]:
            await self.rescan(raw_event=raw_event, **kw)
        task = asyncio.create_task(self._trail(group, mine, raw_event, kw), name=f"rescan {group}")
        self.trails.add(task)
        task.add_done_callback(self.trails.discard)

    async def _trail(self, group: str, event: int, raw_event: Mapping[str, Any], kw: Mapping[str, Any]) -> None:
        for pause in self.settle:
            await asyncio.sleep(pause)
            if self.events[group] != event:  # a newer event rescanned, and trails on its own
                return
            try:
                async with self.locks[group]:
                    await self.rescan(raw_event=raw_event, **kw)
            except Exception as e:  # the API server away: the next pause tries again
                log.warning("rescanning the API group %s for new custom resources failed: %s", group, e)


def _group(raw_event: Mapping[str, Any]) -> str | None:
    group = ((raw_event.get("object") or {}).get("spec") or {}).get("group")
    return group if isinstance(group, str) else None


def install() -> None:
    """Wrap kopf's per-CRD-event rescan, once (before kopf.run: its resource observer looks the name up when it
    starts its CRD watch)."""
    current = observation.process_discovered_resource_event
    if not isinstance(current, OrderedRescans):
        observation.process_discovered_resource_event = OrderedRescans(current)
