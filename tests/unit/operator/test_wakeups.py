"""The reconcile work queue's add_after (Reconciler.wake_after): one pending wake-up per job, the sooner one
stays, and wake-ups asked for while one is pending are served by its run (pod events of a job share rounds
instead of starting one each). On an event loop with a virtual clock: timers fire at exactly their time, and
no test waits in real time."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from ringleader_operator.workqueue import WorkQueue

T = TypeVar("T")


class CountingQueue(WorkQueue[tuple[str, str]]):
    """Records when each run starts; no work is done."""

    def __init__(self) -> None:
        super().__init__(self._record, on_error=lambda key, e: None)
        self.rounds: list[tuple[str, str, float]] = []

    async def _record(self, key: tuple[str, str], fresh: bool) -> bool:
        self.rounds.append((*key, asyncio.get_running_loop().time()))
        return False

    def wake_after(self, namespace: str, name: str, seconds: float) -> None:
        self.add_after((namespace, name), seconds)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing else is ready to run. It relies on
    asyncio's own scheduler (`_ready`, `_scheduled`, `_run_once`, unchanged since Python 3.4)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now

    def _run_once(self) -> None:
        ready, scheduled = self._ready, self._scheduled  # type: ignore[attr-defined]
        live = [h.when() for h in scheduled if not h.cancelled()]  # a cancelled timer is never waited for
        if not ready and live:
            self.now = max(self.now, min(live))
        super()._run_once()  # type: ignore[misc]


def _on_virtual_clock(main: Callable[[], Awaitable[T]]) -> T:
    """`main()` run to its end on a fresh VirtualClockLoop."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def _run(script: Any) -> CountingQueue:
    async def main() -> CountingQueue:
        r = CountingQueue()
        await script(r)
        await asyncio.sleep(10)  # virtual: lets every pending wake-up fire
        return r

    return _on_virtual_clock(main)


@pytest.mark.parametrize(
    ("asks", "rounds", "at"),
    [
        # seconds asked for, one after another -> rounds of job a, and when the first starts
        ([0.05] * 20, 1, 0.05),  # a burst of pod events: one round
        ([0.05, 5.0], 1, 0.05),  # a later wake-up does not postpone a sooner one
        ([5.0, 0.05], 1, 0.05),  # a sooner one replaces a later one
        ([0.0], 1, 0.0),
    ],
    ids=["burst", "later-kept-sooner", "sooner-replaces", "now"],
)
def test_wake_ups_of_one_job_share_a_round(asks: list[float], rounds: int, at: float) -> None:
    async def script(r: CountingQueue) -> None:
        for seconds in asks:
            r.wake_after("team", "a", seconds)
            await asyncio.sleep(0)

    r = _run(script)
    assert [name for _, name, _ in r.rounds] == ["a"] * rounds
    assert r.rounds[0][2] == at
    assert not r.timers  # nothing left pending: a later wake-up was cancelled or never made


def test_each_job_gets_its_own_round_and_a_new_event_after_the_round_gets_another() -> None:
    async def script(r: CountingQueue) -> None:
        for _ in range(5):
            r.wake_after("team", "a", 0.05)
            r.wake_after("team", "b", 0.05)
        await asyncio.sleep(0.15)
        r.wake_after("team", "a", 0.05)

    r = _run(script)
    assert sorted((name, t) for _, name, t in r.rounds) == [("a", 0.05), ("a", 0.2), ("b", 0.05)]


def test_at_most_concurrency_keys_are_processed_at_once_and_the_rest_take_turns_in_order() -> None:
    running: list[str] = []
    most = 0
    order: list[str] = []

    async def work(key: str, fresh: bool) -> bool:
        nonlocal most
        running.append(key)
        most = max(most, len(running))
        await asyncio.sleep(1.0)
        running.remove(key)
        order.append(key)
        return False

    async def main() -> None:
        q: WorkQueue[str] = WorkQueue(work, on_error=lambda key, e: None, concurrency=3)
        await asyncio.gather(*(q.run(k) for k in "abcdefg"))
        assert loop.time() == 3.0  # three turns of one virtual second: 3 + 3 + 1 keys

    loop = VirtualClockLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert most == 3 and order == list("abcdefg")


def test_a_trigger_while_waiting_for_a_turn_is_served_by_that_run() -> None:
    """A key waiting for its turn has not begun: triggers meanwhile are served by the run to come, not by one
    more after it."""
    runs: list[str] = []

    async def work(key: str, fresh: bool) -> bool:
        runs.append(key)
        await asyncio.sleep(1.0)
        return False

    async def main() -> None:
        q: WorkQueue[str] = WorkQueue(work, on_error=lambda key, e: None, concurrency=1)
        first, second = asyncio.ensure_future(q.run("a")), asyncio.ensure_future(q.run("b"))
        await asyncio.sleep(0.5)  # a runs; b waits for its turn
        await q.run("b")  # collapses into b's coming run
        await asyncio.gather(first, second)

    loop = VirtualClockLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert runs == ["a", "b"]


def _node(ready: bool = True, gpus: str = "8", unschedulable: bool = False, beat: str = "") -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": str(ready), "lastHeartbeatTime": beat}]
    spec = {"unschedulable": True} if unschedulable else {}
    status = {"allocatable": {"nvidia.com/gpu": gpus}, "conditions": conditions}
    return {"metadata": {"name": "n"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("events", "wakes"),
    [
        ([_node()], [True]),  # a node appears
        ([_node(), _node(beat="later")], [True, False]),  # a heartbeat frees nothing
        ([_node(ready=False), _node()], [False, True]),  # it turns Ready
        ([_node(unschedulable=True), _node()], [False, True]),  # uncordoned
        ([_node(), _node(gpus="16")], [True, True]),  # its allocatable changed
        ([_node(), None, _node()], [True, False, True]),  # deleted, and back
    ],
    ids=["appears", "heartbeat", "ready", "uncordoned", "grows", "deleted-and-back"],
)
def test_a_node_that_offers_new_room_wakes_the_jobs_waiting_for_room(
    events: list[dict[str, Any] | None], wakes: list[bool]
) -> None:
    from ringleader_operator.admission import node_digest
    from ringleader_operator.cluster_admission import ClusterAdmission

    admission = ClusterAdmission(None, None, None, clusterwide=True)  # type: ignore[arg-type]  # no decision here
    got = [admission.node_seen("n", None if e is None else node_digest(e)) for e in events]
    assert got == wakes


class RecordingScraper:
    """Stands in for the reconciler's ProgressScraper: records when each scrape runs; with `back_off`, the first
    scrape's read fails and leaves that many seconds of back-off on the job's record, and the next one's
    succeeds (as ProgressScraper does: its back-off ends). With `writes`, every scrape writes the job's status
    (worker 0's step moved), whose watch event arrives a moment after the scrape."""

    def __init__(self, reconciler: Any, back_off: float = 0.0, writes: bool = False) -> None:
        self.reconciler, self.back_off, self.writes, self.at = reconciler, back_off, writes, list[float]()
        self.by_job: dict[str, list[float]] = {}

    async def scrape(self, obj: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        self.at.append(loop.time())
        self.by_job.setdefault(obj["metadata"]["name"], []).append(self.at[-1])
        record = self.reconciler.jobs[("ns", obj["metadata"]["name"])]
        first = len(self.by_job[obj["metadata"]["name"]]) == 1
        record.next_scrape_at = time.monotonic() + self.back_off if first else 0.0
        if self.writes:
            written = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(next(VERSIONS))}}
            loop.call_later(0.05, self.reconciler.job_seen, written)

    async def close(self) -> None:
        pass


VERSIONS = itertools.count(10**6)  # resourceVersions of the status writes RecordingScraper makes: newer than any _job


def _job(
    phase: str, version: int, name: str = "j", policy: dict[str, Any] | None = None, **status: Any
) -> dict[str, Any]:
    meta = {"namespace": "ns", "name": name, "uid": f"u-{name}", "generation": 1, "resourceVersion": str(version)}
    return {"metadata": meta, "spec": {"runPolicy": policy or {}}, "status": {"phase": phase, **status}}


@pytest.mark.parametrize(
    ("events", "back_off", "scraped_at"),
    [
        # running from 0, a status write at 7 (no extra scrape), done at 17, running again at 30, gone at 41
        ([(0, "Running"), (7, "Running"), (17, "Succeeded"), (30, "Restarting"), (41, None)], 0, [5, 10, 15, 35, 40]),
        # the first read fails and backs off 30 s: the next scrape is due when the back-off ends, not every 5 s
        ([(0, "Running"), (48, None)], 30, [5, 35, 40, 45]),
        ([(0, "Pending"), (3, "Created"), (50, None)], 0, []),  # never running: never scraped
    ],
    ids=["running-stopped-again-gone", "back-off", "never-running"],
)
def test_each_running_job_is_scraped_every_scrape_seconds_while_it_runs_and_never_after(
    events: list[tuple[float, str | None]], back_off: float, scraped_at: list[float]
) -> None:
    """The reconciler's own scrape timers (one per running job on the event loop, started and stopped by the
    job's watch events): what kopf's per-job progress timer did, without a kopf handler call per tick."""
    from ringleader_operator.reconciler import Reconciler

    async def main() -> list[float]:
        reconciler = Reconciler(None, lambda *a: None)  # type: ignore[arg-type]  # no round runs here
        scraper = reconciler.scrapes.scraper = RecordingScraper(reconciler, back_off)  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        for version, (at, phase) in enumerate(events):
            await asyncio.sleep(at - loop.time())
            if phase is None:
                reconciler.job_gone("ns", "j")
            else:
                reconciler.job_seen(_job(phase, version + 1))
        await asyncio.sleep(60)  # virtual: any scrape still due would run
        reconciler.scrapes.close()
        return scraper.at

    assert [round(t) for t in _on_virtual_clock(main)] == scraped_at


def test_many_running_jobs_share_the_scrape_budget_and_a_watched_job_keeps_its_pace() -> None:
    """400 running jobs at scraper.SCRAPES_PER_SECOND: each read every 20 s after its first read; a job with a
    stall deadline still every SCRAPE_SECONDS."""
    from ringleader_operator.reconciler import Reconciler
    from ringleader_operator.scraper import SCRAPE_SECONDS, SCRAPES_PER_SECOND

    async def main() -> dict[str, list[float]]:
        reconciler = Reconciler(None, lambda *a: None)  # type: ignore[arg-type]  # no round runs here
        scraper = reconciler.scrapes.scraper = RecordingScraper(reconciler)  # type: ignore[assignment]
        reconciler.job_seen(_job("Running", 1, "watched", {"progressDeadlineSeconds": 600}))
        for i in range(399):
            reconciler.job_seen(_job("Running", 1, f"j{i}"))
        await asyncio.sleep(50)  # virtual
        reconciler.scrapes.close()
        return scraper.by_job

    got = _on_virtual_clock(main)
    every = 400 / SCRAPES_PER_SECOND
    assert every > SCRAPE_SECONDS
    assert [round(t) for t in got["j7"]] == [5, 5 + every, 5 + 2 * every]
    assert [round(t) for t in got["watched"]] == list(range(5, 51, 5))


def test_a_scrapes_own_status_write_leaves_the_next_scrape_where_the_budget_put_it() -> None:
    """400 running jobs whose every scrape writes status: each write's watch event leaves the job's next read
    where SCRAPES_PER_SECOND put it (every 20 s), not SCRAPE_SECONDS after the write (the events brought it
    forward: every job read, and written, every 5 s); a replacement's cost newly waiting for worker 0's page
    still brings it forward (PENDING_LOSS_SCRAPE_SECONDS), and once counted the budget's pace comes back."""
    from ringleader_operator.reconciler import Reconciler
    from ringleader_operator.scraper import PENDING_LOSS_SCRAPE_SECONDS, SCRAPES_PER_SECOND

    async def main() -> dict[str, list[float]]:
        reconciler = Reconciler(None, lambda *a: None)  # type: ignore[arg-type]  # no round runs here
        scraper = reconciler.scrapes.scraper = RecordingScraper(reconciler, writes=True)  # type: ignore[assignment]
        for i in range(400):
            reconciler.job_seen(_job("Running", 1, f"j{i}"))
        await asyncio.sleep(30)  # virtual
        reconciler.job_seen(_job("Running", next(VERSIONS), "j7", goodput={"pendingLoss": {"at": "a round"}}))
        await asyncio.sleep(0.5)
        reconciler.job_seen(_job("Running", next(VERSIONS), "j7", goodput={}))  # the round counted it
        await asyncio.sleep(24.5)
        reconciler.scrapes.close()
        return scraper.by_job

    got = _on_virtual_clock(main)
    every = 400 / SCRAPES_PER_SECOND
    assert [round(t) for t in got["j8"]] == [5, 5 + every, 5 + 2 * every]
    assert [round(t) for t in got["j7"]] == [5, 5 + every, 30 + PENDING_LOSS_SCRAPE_SECONDS, 31 + every]
