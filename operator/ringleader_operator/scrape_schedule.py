"""When each running job's progress is scraped: one timer per job on the event loop, started and stopped by the
job's watch events (no kopf timer, whose every tick went through kopf's handler machinery, for every running job
every 5 s), paced by how many jobs run (scraper.scrape_interval) and by a job's failed reads' back-off."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ringleader_api import JobPhase

from .jobmemory import JobMemory, Key
from .kube_errors import ApiUnavailable
from .scraper import ProgressScraper, loss_pending, scrape_interval, watches_progress
from .workqueue import WorkQueue

log = logging.getLogger("ringleader.scraper")
# Progress scrapes in flight at once (each bounded by progress.SCRAPE_TIMEOUT): a thousand running jobs' scrapes
# fall due about 200 a second.
SCRAPES_AT_ONCE = 64
RUNNING_PHASES = (JobPhase.RUNNING, JobPhase.RESTARTING)


def running(obj: Mapping[str, Any] | None) -> bool:
    """Whether the job `obj` runs as its status says (its progress is scraped)."""
    return obj is not None and (obj.get("status") or {}).get("phase") in RUNNING_PHASES


class ScrapeSchedule:
    """Each running job's next scrape by `scraper`. `memory(key)`: the job's record (None: gone), whose body is
    the job as last seen."""

    def __init__(self, scraper: ProgressScraper, memory: Callable[[Key], JobMemory | None]) -> None:
        self.scraper, self.memory = scraper, memory
        self.queue: WorkQueue[Key] = WorkQueue(self._scrape, self._failed, SCRAPES_AT_ONCE)
        # Jobs whose status says they run, each with a scrape pending or under way: their number paces the scrapes.
        self.running: set[Key] = set()

    def job_seen(self, key: Key, obj: Mapping[str, Any]) -> None:
        """The job as a watch event showed it: scraped soon once it runs (within SCRAPE_SECONDS, or sooner while
        a replacement's cost waits for worker 0's page), not at all once it does not. Later events of a running
        job leave its schedule as it is, but for a replacement's cost newly waiting: a status write (the
        scraper's own, whenever worker 0's step moved) brought the next scrape forward to SCRAPE_SECONDS, so at a
        thousand running jobs each was read every 5 s and written as often, whatever SCRAPES_PER_SECOND said."""
        if not running(obj):
            self.forget(key)
            return
        pending = loss_pending(obj)
        if key not in self.running or pending:
            self.queue.add_after(key, scrape_interval(0, True, pending))
        self.running.add(key)

    def forget(self, key: Key) -> None:
        """No more scrapes of the job (it stopped running, or is gone)."""
        self.running.discard(key)
        self.queue.cancel(key)

    async def _scrape(self, key: Key, _fresh: bool) -> bool:
        """The scrape of a running job that fell due (copy worker 0's step, loss and throughput into
        status.progress; the stall and straggler watches), then its next one: scraper.scrape_interval on, or
        when its failed reads' back-off ends. Nothing for a job that is gone or no longer runs (job_seen
        schedules it again when it does)."""
        record = self.memory(key)
        try:
            if record is not None and record.body is not None and running(record.body):
                with contextlib.suppress(ApiUnavailable):  # the next scrape tries again
                    await self.scraper.scrape(record.body)
        finally:
            if (record := self.memory(key)) is not None and (record.body is None or running(record.body)):
                body = record.body
                every = scrape_interval(
                    len(self.running), body is None or watches_progress(body), body is not None and loss_pending(body)
                )
                self.queue.add_after(key, max(every, record.next_scrape_at - time.monotonic()))
            else:  # no scrape pending: the event that shows it running again schedules one
                self.running.discard(key)
        return False

    def _failed(self, key: Key, e: Exception) -> None:
        """A scrape raised what it should not have: said (the job's next scrape is already scheduled)."""
        log.error("[%s/%s] progress scrape failed", *key, exc_info=e)

    def close(self) -> None:
        """Cancel every pending scrape (the scraper's session is closed by `aclose`)."""
        self.queue.close()

    async def aclose(self) -> None:
        self.close()
        await self.scraper.close()
