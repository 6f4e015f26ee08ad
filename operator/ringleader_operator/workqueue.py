"""A small work queue for reconcile rounds, after client-go's workqueue: one key is never processed twice at
once, triggers that arrive while it is processed collapse into one more run after it, and a delayed add
belongs to the queue (one pending timer per key; the sooner one stays).

It knows nothing of Kubernetes: `process(key, fresh)` is the work, and returns True to be run again at once
(a write that met a newer version of the object). `fresh` is sticky until a run takes it: a run asked for with
fresh=True reads from the API server, not a cache. At most `concurrency` keys are processed at once (client-go
controllers' workers): the others wait their turn in the order they asked, holding nothing yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
log = logging.getLogger("ringleader.workqueue")


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    again: bool = False
    fresh: bool = False


class WorkQueue(Generic[K]):
    def __init__(
        self,
        process: Callable[[K, bool], Awaitable[bool]],
        on_error: Callable[[K, Exception], None],
        concurrency: int = 1_000_000,
    ) -> None:
        """`on_error(key, exc)` hears of a run started by a timer that raised (no caller to raise it to); runs
        started by `run` raise to their caller. `concurrency`: how many keys are processed at once."""
        self.process, self.on_error = process, on_error
        self.turns = asyncio.Semaphore(concurrency)
        self.slots: dict[K, _Slot] = {}
        self.timers: dict[K, asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self, key: K, fresh: bool = False) -> None:
        """Process `key` now, or once more after the run in progress (which then returns only after it)."""
        slot = self.slots.setdefault(key, _Slot())
        slot.fresh = slot.fresh or fresh
        if slot.lock.locked():
            slot.again = True
            return
        async with slot.lock:
            while True:
                async with self.turns:
                    # Cleared once the turn comes: a trigger that arrived while waiting for it is served by this
                    # run, which has not begun, and needs no run after it.
                    slot.again = False
                    fresh, slot.fresh = slot.fresh, False
                    if await self.process(key, fresh):
                        slot.again = True
                if not slot.again:
                    break
        if not slot.again:
            self.slots.pop(key, None)

    def add_after(self, key: K, seconds: float) -> None:
        """Process `key` in `seconds`, or sooner: one pending timer per key, the sooner one stays. A run
        serves every add asked for before it began, so a run sooner than asked for costs at most one more."""
        loop = asyncio.get_running_loop()
        if (pending := self.timers.get(key)) is not None:
            if pending.when() <= loop.time() + seconds:
                return
            self.timers.pop(key).cancel()

        def fire() -> None:
            self.timers.pop(key, None)
            task = asyncio.ensure_future(self._timed(key))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        self.timers[key] = loop.call_later(max(0.0, seconds), fire)

    def cancel(self, key: K) -> None:
        """Drop `key`'s pending timer, if any (a run in progress goes on)."""
        if (pending := self.timers.pop(key, None)) is not None:
            pending.cancel()

    async def _timed(self, key: K) -> None:
        try:
            await self.run(key)
        except Exception as e:  # a timer has no caller: report it; the periodic resync tries again
            self.on_error(key, e)

    def close(self) -> None:
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
