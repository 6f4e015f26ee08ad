"""Copies worker 0's step, loss, throughput, newest checkpoint and its save and step times into status.progress
while a job runs (a kopf timer calls `scrape` every few seconds per running job). The page is read as hostile
(progress.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from . import metrics, progress
from .api import Progress, Role
from .builders import METRICS_PORT, pod_name
from .conditions import Reason
from .jobmemory import JobMemory, Key
from .kubeapi import EventSink, StatusApi
from .observed import utcnow

log = logging.getLogger("ringleader.scraper")
SCRAPE_FAILURES_REPORTED = 3  # progress scrapes failed in a row before an event says why


class ProgressScraper:
    def __init__(
        self,
        api: StatusApi,
        emit: EventSink,
        memory: Callable[[Key], JobMemory | None],
        cached_pods: Callable[[str, str], list[dict[str, Any]] | None],
    ) -> None:
        """`memory(key)`: the job's record, None when the reconciler holds none (the job is gone, or has had
        no round yet: the scrape then does nothing, and never creates a record a deleted job would leave
        behind); `cached_pods(namespace, job)`: the job's pods from the pod cache, None while there is none (then
        worker 0's address is read from the API server)."""
        self.api, self.emit, self.memory, self.cached_pods = api, emit, memory, cached_pods
        self.session: aiohttp.ClientSession | None = None

    async def scrape(self, obj: Mapping[str, Any]) -> None:
        """One scrape of the job `obj`'s worker 0. A page that cannot be read is counted; after
        SCRAPE_FAILURES_REPORTED failures in a row, one Warning event says why, until a scrape succeeds again.
        Status is written only when a value changed."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if self.memory(key) is None or not (ip := await self._worker0_ip(*key)):
            return
        if self.session is None:
            self.session = progress.session()
        try:
            now = await progress.scrape(self.session, ip, METRICS_PORT, utcnow())
        except progress.ScrapeError as e:
            metrics.SCRAPE_FAILURES.inc()
            log.debug("[%s/%s] no progress: %s", *key, e)
            record = self.memory(key)  # looked up again: the job may have gone while the page was read
            if record is not None:
                record.scrape_failures += 1
                if record.scrape_failures == SCRAPE_FAILURES_REPORTED:
                    self.emit(dict(obj), "Warning", Reason.PROGRESS_UNAVAILABLE, f"worker 0's metrics page: {e}")
            return
        if (record := self.memory(key)) is None:
            return
        record.scrape_failures = 0
        last = (obj.get("status") or {}).get("progress")
        old = Progress.model_validate(last) if last else None
        if now is None or (
            old is not None and old.model_copy(update={"updated_at": ""}) == now.model_copy(update={"updated_at": ""})
        ):
            return
        await self.api.patch_status(*key, {"progress": now.model_dump(by_alias=True, mode="json")})

    async def _worker0_ip(self, namespace: str, job: str) -> str | None:
        worker0 = pod_name(job, Role.WORKER, 0)
        pods = self.cached_pods(namespace, job)
        if pods is None:
            return await self.api.pod_ip(namespace, worker0)
        pod = next((p for p in pods if p["metadata"].get("name") == worker0), None)
        ip = ((pod or {}).get("status") or {}).get("podIP")
        return str(ip) if ip else None

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
