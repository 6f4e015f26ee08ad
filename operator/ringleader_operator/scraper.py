"""While a job runs (the reconciler calls `scrape` every SCRAPE_SECONDS per running job): copy worker 0's step,
loss, throughput, newest checkpoint and its save and step times into status.progress; watch for a stall
(runPolicy.progressDeadlineSeconds): once the job's step has not advanced for the deadline, read every rank's
page, name the rank that stopped first (stalls.py) and hand the stall to the job's next round, which acts on
it; and with runPolicy.stragglerThreshold, read every rank's page a few times a window (at most
RANK_PAGES_PER_SECOND for the job) and hand the stragglers to a round when they change (stragglers.py). Pages
are read as hostile (progress.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from pydantic import ValidationError
from ringleader_api import ConditionType, Progress, Reason, Role, RunPolicy

from . import metrics, progress, stalls, stragglers
from .jobmemory import JobMemory, Key
from .kubeapi import EventSink, StatusApi
from .names import METRICS_PORT, rank_of
from .observed import parse_time, utcnow

log = logging.getLogger("ringleader.scraper")
SCRAPE_SECONDS = 5.0  # how often a running job's worker 0 is read into status.progress
PENDING_LOSS_SCRAPE_SECONDS = 1.0  # how often while a replacement's cost waits for worker 0's page (a few reads)
# The most scrapes a second over all running jobs that watch for neither stalls nor stragglers: past
# SCRAPES_PER_SECOND * SCRAPE_SECONDS such jobs (100), each is read less often. Every scrape that sees a new
# step writes the job's status, so a thousand jobs read every 5 s were 200 status writes a second to the API
# server; read within the budget, every 50 s.
SCRAPES_PER_SECOND = 20.0
SCRAPE_FAILURES_REPORTED = 3  # progress scrapes failed in a row before an event says why
# A page that cannot be read is tried again later and later (10 s, 20 s, 40 s, then every minute) rather than at
# every tick: a thousand jobs whose trainers serve no page (kwok's fake pods, a script without metrics) would
# otherwise cost a connection attempt each every 5 s.
SCRAPE_BACKOFF_MAX_SECONDS = 60.0
# A job whose worker 0 has not served a page once since this operator started (a script without metrics, a
# trainer that never came up) and whose policy watches neither stalls nor stragglers goes on doubling to ten
# minutes: at a minute, a thousand such jobs were most of an idle operator's CPU. Its first page then shows up
# to ten minutes late; a page once served brings the reads back to the job's interval.
SCRAPE_UNSERVED_MAX_SECONDS = 600.0
RANK_READS_AT_ONCE = 64  # rank pages read at once when a job stalls (each bounded by progress.SCRAPE_TIMEOUT)
RANK_PAGES_PER_SECOND = 50.0  # the most rank pages a second the straggler watch reads for one job

Pods = Callable[[str, str], Awaitable[list[dict[str, Any]]]]
FirstWorker = Callable[[str, str], Awaitable[list[dict[str, Any]] | None]]


# A trainer serves its page only once it has imported torch and built its model: tens of seconds on a busy node.
# Until worker 0 has run this long, a failed read is tried again at the next tick (no back-off), so a short job's
# progress is seen while it runs.
SCRAPE_GRACE_SECONDS = 60.0


def scrape_interval(running_jobs: int, watched: bool, loss_pending: bool = False) -> float:
    """Seconds between two scrapes of a running job when `running_jobs` jobs run: PENDING_LOSS_SCRAPE_SECONDS
    while the cost of a replacement waits for worker 0's page to say where it continued from (`loss_pending`:
    a job that ends before that read counts the most it can be); SCRAPE_SECONDS for a job whose run policy
    watches for stalls or stragglers (`watched`: those need timely reads), else as often as SCRAPES_PER_SECOND
    shared by every running job allows, and never more often than SCRAPE_SECONDS."""
    if loss_pending:
        return PENDING_LOSS_SCRAPE_SECONDS
    if watched:
        return SCRAPE_SECONDS
    return max(SCRAPE_SECONDS, running_jobs / SCRAPES_PER_SECOND)


def loss_pending(obj: Mapping[str, Any]) -> bool:
    """Whether the job `obj`'s status holds a replacement's cost not counted yet (goodput.pendingLoss)."""
    return _pending_loss(obj) is not None


def _pending_loss(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return ((obj.get("status") or {}).get("goodput") or {}).get("pendingLoss")


def watches_progress(obj: Mapping[str, Any]) -> bool:
    """Whether the job `obj`'s run policy watches its progress (a stall deadline, a straggler threshold)."""
    policy = (obj.get("spec") or {}).get("runPolicy") or {}
    return policy.get("progressDeadlineSeconds") is not None or policy.get("stragglerThreshold") is not None


def scrape_backoff(failures: int, running_for: float | None = None, patient: bool = False) -> float:
    """Seconds until the next try after `failures` failed reads in a row of a worker 0 that has run for
    `running_for` seconds (None: not known): none after the first (the next tick) or while it has run less than
    SCRAPE_GRACE_SECONDS, then doubling from 10 s up to SCRAPE_BACKOFF_MAX_SECONDS, or up to
    SCRAPE_UNSERVED_MAX_SECONDS if `patient` (a page never served, no policy that needs timely reads). Where its
    age is known the doubling starts when the grace ends, as long a wait as the time since (the failures of the
    grace, one a tick, do not count: a trainer that took just over the grace to serve its page on a busy node
    waited the ten-minute cap at once, and showed no progress for that long)."""
    if failures <= 1 or (running_for is not None and running_for < SCRAPE_GRACE_SECONDS):
        return 0.0
    cap = SCRAPE_UNSERVED_MAX_SECONDS if patient else SCRAPE_BACKOFF_MAX_SECONDS
    if running_for is not None:
        return min(cap, max(10.0, running_for - SCRAPE_GRACE_SECONDS))
    return min(cap, 5.0 * 2.0 ** min(failures - 1, 16))


class ProgressScraper:
    def __init__(
        self,
        api: StatusApi,
        emit: EventSink,
        memory: Callable[[Key], JobMemory | None],
        pods: Pods,
        wake: Callable[[Key], None] = lambda key: None,
        first_worker: FirstWorker | None = None,
    ) -> None:
        """`memory(key)`: the job's record, None when the reconciler holds none (the job is gone, or has had
        no round yet: the scrape then does nothing, and never creates a record a deleted job would leave
        behind); `pods(namespace, job)`: the job's pods (from the pod cache, else the API server); `wake(key)`:
        give the job a round soon (a stall to act on, or progress past one); `first_worker(namespace, job)`:
        the pods of the job's worker 0 alone (an index of them: a scrape of a 10,000-rank job then looks at one
        pod, not all), None where there is no such index (the pods are searched)."""
        self.api, self.emit, self.memory, self.pods, self.wake = api, emit, memory, pods, wake
        self.first_worker = first_worker
        self.session: aiohttp.ClientSession | None = None

    async def scrape(self, obj: Mapping[str, Any]) -> None:
        """One scrape of the job `obj`'s worker 0. A page that cannot be read is counted; after
        SCRAPE_FAILURES_REPORTED failures in a row, one Warning event says why, until a scrape succeeds again.
        Status is written only when a value changed. Then the stall watch (`_watch_stall`)."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if (record := self.memory(key)) is None or time.monotonic() < record.next_scrape_at:
            return
        page = await self._read_worker0(obj, key)
        if (record := self.memory(key)) is None:  # looked up again: the job may have gone while the page was read
            return
        if page is not None:
            record.scrape_failures, record.next_scrape_at, record.page_served = 0, 0.0, True
            await self._write_progress(obj, key, progress.progress_of(page, utcnow()))
        policy = _policy(obj)
        if policy is None:
            return
        await self._watch_stall(obj, key, record, page, policy)
        if (record := self.memory(key)) is not None:
            await self._watch_stragglers(obj, key, record, policy)

    async def _read_worker0(self, obj: Mapping[str, Any], key: Key) -> dict[str, float] | None:
        """Worker 0's gauges, or None (no address yet, or the page could not be read: counted, reported)."""
        found = await self.first_worker(*key) if self.first_worker is not None else None
        candidates = found if found is not None else await self.pods(*key)
        worker0 = next((p for p in candidates if rank_of(p) == (Role.WORKER, 0) and _ip(p)), None)
        if worker0 is None:
            return None
        try:
            return progress.values(await progress.fetch(self._session(), _ip(worker0), METRICS_PORT))
        except progress.ScrapeError as e:
            metrics.SCRAPE_FAILURES.inc()
            log.debug("[%s/%s] no progress: %s", *key, e)
            record = self.memory(key)
            if record is not None:
                record.scrape_failures += 1
                patient = not record.page_served and not watches_progress(obj)
                waited = scrape_backoff(record.scrape_failures, _running_for(worker0, time.time()), patient)
                record.next_scrape_at = time.monotonic() + waited
                if record.scrape_failures == SCRAPE_FAILURES_REPORTED:
                    self.emit(dict(obj), "Warning", Reason.PROGRESS_UNAVAILABLE, f"worker 0's metrics page: {e}")
            return None

    async def _write_progress(self, obj: Mapping[str, Any], key: Key, now: Progress | None) -> None:
        status = obj.get("status") or {}
        last = status.get("progress")
        old = Progress.model_validate(last) if last else None
        if now is None or (
            old is not None and old.model_copy(update={"updated_at": ""}) == now.model_copy(update={"updated_at": ""})
        ):
            return
        await self.api.patch_status(*key, {"progress": now.model_dump(by_alias=True, mode="json")})
        stalled_at = status.get("lastStallStep")
        pending = _pending_loss(obj)
        if pending is not None and now.resumed_at is not None and now.resumed_at != pending.get("resumedAt"):
            self.wake(key)  # worker 0 continued: its round counts what the replacement cost
        elif _condition_true(status, ConditionType.STALLED) and now.step > (
            stalled_at if stalled_at is not None else -1
        ):
            self.wake(key)  # past the stall: its round turns Stalled False
        elif _condition(status, ConditionType.STALLED) == "Unknown":
            self.wake(key)  # progress is read again: its round turns Stalled False

    async def _watch_stall(
        self,
        obj: Mapping[str, Any],
        key: Key,
        record: JobMemory,
        page: dict[str, float] | None,
        policy: RunPolicy,
    ) -> None:
        """Advance the job's stall clock with worker 0's step (read at every step: `rank_step`; else the
        progress step) and the time of its last step; once it is overdue, read every rank and leave what they
        say (a stall, or that progress cannot be read) for a round."""
        deadline = policy.progress_deadline_seconds
        step = stepped_at = None
        if page is not None:
            beat = progress.beat_of(page)
            step, stepped_at = beat.step, beat.stepped_at
            if step is None and progress.STEP in page:
                step = int(page[progress.STEP])
        running = _running_since(obj.get("status") or {})
        now = time.monotonic()
        record.clock = stalls.tick(record.clock, step, running, now, stepped_at, _unix(running))
        clock = record.clock
        startup = max(policy.startup_deadline_seconds or stalls.STARTUP_DEADLINE_SECONDS, deadline or 0)
        if clock is None or record.stall is not None or not stalls.overdue(clock, deadline, startup, now):
            return
        beats = await self._read_ranks(await self.pods(*key))
        if (found := self.memory(key)) is None:
            return
        record = found
        # The next look, or stall, is another deadline away.
        record.clock = dataclasses.replace(clock, since=now, looked=True)
        record.stall = stalls.judge(clock, beats, time.time(), now - clock.since)
        if isinstance(record.stall, stalls.Stall):
            log.warning("[%s/%s] stalled: %s", *key, record.stall.describe())
        else:
            log.warning("[%s/%s] progress unavailable: %s", *key, record.stall.message)
        self.wake(key)

    async def _watch_stragglers(self, obj: Mapping[str, Any], key: Key, record: JobMemory, policy: RunPolicy) -> None:
        """Every few readings' worth of the window (stragglers.read_every), read every rank's page; hand the
        stragglers to a round when they differ from those last handed (and the first time in this process)."""
        threshold, window = policy.straggler_threshold, float(policy.straggler_window_seconds)
        running = _running_since(obj.get("status") or {})
        now = time.monotonic()
        if threshold is None or running is None:
            record.slow_watch = None
            return
        pods = await self.pods(*key)  # only for a job that watches for stragglers
        if now - record.slow_read_at < stragglers.read_every(window, len(pods), RANK_PAGES_PER_SECOND):
            return
        record.slow_read_at = now
        slow = stragglers.find_slow(await self._read_ranks(pods), threshold)
        if (found := self.memory(key)) is None:
            return
        record = found
        record.slow_watch, named = stragglers.confirm(record.slow_watch, slow, running, time.monotonic(), window)
        if tuple(named) != record.slow_named:
            record.slow_named = tuple(named)
            record.stragglers = stragglers.Stragglers(running, tuple(named), threshold, window)
            self.wake(key)

    async def _read_ranks(self, pods: list[dict[str, Any]]) -> list[stalls.RankBeat]:
        """Every running rank pod's page, RANK_READS_AT_ONCE at a time."""
        gate = asyncio.Semaphore(RANK_READS_AT_ONCE)

        async def read(pod: dict[str, Any], role: Role, index: int) -> stalls.RankBeat:
            name = str(pod["metadata"].get("name", ""))
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            async with gate:
                try:
                    text = await progress.fetch(self._session(), _ip(pod), METRICS_PORT)
                    return stalls.RankBeat(name, role, index, node, progress.parse_beat(text))
                except progress.ScrapeError as e:
                    return stalls.RankBeat(
                        name, role, index, node, error=str(e), unreachable=e.unreachable, hung=e.hung
                    )

        reads = []
        for pod in pods:
            rank = rank_of(pod)
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            if rank is not None and status.get("phase") == "Running" and _ip(pod) and not meta.get("deletionTimestamp"):
                reads.append(read(pod, *rank))
        return list(await asyncio.gather(*reads))

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = progress.session()
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def _ip(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def _running_for(pod: Mapping[str, Any], now: float) -> float | None:
    """Seconds since the pod's trainer container started (else the pod), None when its status says neither."""
    status = pod.get("status") or {}
    started = next(
        (
            c["state"]["running"].get("startedAt")
            for c in status.get("containerStatuses") or []
            if isinstance((c.get("state") or {}).get("running"), dict)
        ),
        None,
    ) or status.get("startTime")
    try:
        return now - parse_time(started).timestamp() if isinstance(started, str) else None
    except ValueError:
        return None


def _unix(stamp: str | None) -> float | None:
    """A status time (RFC 3339) in Unix seconds, None when absent or unreadable."""
    try:
        return parse_time(stamp).timestamp() if stamp else None
    except ValueError:
        return None


def _condition(status: Mapping[str, Any], kind: ConditionType) -> str | None:
    """The status (True, False, Unknown) of the condition `kind`, None when it is not there."""
    return next((str(c.get("status")) for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _condition_true(status: Mapping[str, Any], kind: ConditionType) -> bool:
    return _condition(status, kind) == "True"


def _running_since(status: Mapping[str, Any]) -> str | None:
    """The Running condition's lastTransitionTime while it is True (and the job has not ended), else None."""
    if _condition_true(status, ConditionType.SUCCEEDED) or _condition_true(status, ConditionType.FAILED):
        return None
    for c in status.get("conditions") or []:
        if c.get("type") == ConditionType.RUNNING and c.get("status") == "True":
            return str(c.get("lastTransitionTime") or "")
    return None


def _policy(obj: Mapping[str, Any]) -> RunPolicy | None:
    """The job's runPolicy, None when it does not parse (its round reports that)."""
    try:
        return RunPolicy.model_validate((obj.get("spec") or {}).get("runPolicy") or {})
    except ValidationError:
        return None
