"""Parsing rank 0's metrics page into status.progress, and reading it from a pod that may be hostile."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from ringleader_api import Role
from ringleader_operator.names import rank_labels
from ringleader_operator.progress import MAX_BYTES, SCRAPE_TIMEOUT, ScrapeError, parse, parse_beat, scrape, session
from ringleader_operator.scraper import scrape_interval, watches_progress
from ringleader_operator.stalls import Stall

from tests.support.localhttp import served

NOW = "2026-01-01T00:00:00Z"
PAGE = """# HELP ringleader_trainer_step Optimizer steps done.
# TYPE ringleader_trainer_step gauge
ringleader_trainer_step 1200.0
# TYPE ringleader_trainer_loss gauge
ringleader_trainer_loss 0.123456789
# TYPE ringleader_trainer_samples_per_second gauge
ringleader_trainer_samples_per_second 4321.987
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.0
"""


def test_parse_full_page() -> None:
    p = parse(PAGE, NOW)
    assert p is not None
    assert (p.step, p.loss, p.samples_per_second, p.updated_at) == (1200, 0.123457, 4321.99, NOW)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("last_checkpoint_step 500\ncheckpoint_seconds 1.23456\nstep_seconds 0.012345", (500, 1.235, 0.0123)),
        ("last_checkpoint_step 0\ncheckpoint_seconds 0\nstep_seconds 0", (None, None, None)),  # never set
        ("last_checkpoint_step -1\ncheckpoint_seconds 1e9\nstep_seconds NaN", (None, None, None)),  # lies
    ],
    ids=["measured", "not-yet", "out-of-range"],
)
def test_the_checkpoint_and_step_times_are_read(text: str, want: tuple[Any, ...]) -> None:
    page = "ringleader_trainer_step 600\n" + "".join(f"ringleader_trainer_{line}\n" for line in text.splitlines())
    p = parse(page, NOW)
    assert p is not None and (p.last_checkpoint_step, p.checkpoint_seconds, p.step_seconds) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("ringleader_trainer_step 5\n", (5, None, None)),
        ("ringleader_trainer_step 5\nringleader_trainer_loss NaN\n", (5, None, None)),
        ("ringleader_trainer_loss 1.0\n", None),
        ("", None),
        # before the first log line a trainer's gauges read 0: no loss yet, not a loss of 0
        (
            "ringleader_trainer_step 0\nringleader_trainer_loss 0\nringleader_trainer_samples_per_second 0\n",
            (0, None, None),
        ),
    ],
    ids=["step-only", "nan-loss-dropped", "no-step", "empty", "before-the-first-step"],
)
def test_parse_partial_pages(text: str, want: tuple[int, float | None, float | None] | None) -> None:
    p = parse(text, NOW)
    assert (None if p is None else (p.step, p.loss, p.samples_per_second)) == want


def groups_page(*lines: str) -> str:
    return "ringleader_trainer_rank_step 5\n" + "".join(f"{line}\n" for line in lines)


E, C = "ringleader_trainer_collectives_entered", "ringleader_trainer_collectives_completed"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (groups_page(f'{E}{{group="gloo/0"}} 12', f'{C}{{group="gloo/0"}} 11', f'{E}{{group="nccl/3"}} 4',
                     f'{C}{{group="nccl/3"}} -1'), (("gloo/0", 12, 11), ("nccl/3", 4, -1))),
        (groups_page(f'{E}{{group="gloo/0"}} 12'), ()),  # without its completed number: left out
        (groups_page(f'{E}{{group="gloo/0"}} 1.5', f'{C}{{group="gloo/0"}} 1'), ()),  # not a whole number
        (groups_page(f'{E}{{group="gloo/0"}} -4', f'{C}{{group="gloo/0"}} -1'), ()),  # none entered: no place
        (groups_page(f'{E}{{group="{"g" * 65}"}} 3', f'{C}{{group="{"g" * 65}"}} 3'), ()),  # a name too long
        (groups_page(f"{E} 3", f"{C} 3"), ()),  # no group named
        (groups_page(*[f'{x}{{group="g{i:02d}"}} 3' for i in range(30) for x in (E, C)]),
         tuple((f"g{i:02d}", 3, 3) for i in range(16))),  # 16 groups kept (and 64 lines read)
        (f'{E}{{group="gloo/0"}} 3\n{C}{{group="gloo/0"}} 3\n', None),  # no rank gauges: no place at all
    ],
    ids=["two-groups", "half", "fraction", "negative", "long-name", "unlabelled", "too-many", "no-rank-step"],
)  # fmt: skip
def test_the_flight_recorders_numbers_are_read_within_bounds(text: str, want: tuple[Any, ...] | None) -> None:
    beat = parse_beat(text)
    assert (None if beat.step is None else beat.collectives) == want


def test_garbage_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError):
        parse("ringleader_trainer_step {{{ not metrics\n", NOW)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("ringleader_trainer_step +Inf\n", None),
        ("ringleader_trainer_step -3\n", None),
        ("ringleader_trainer_step 1e300\n", None),  # no run takes that many steps: a pod's lie
        ("ringleader_trainer_step 7\nringleader_trainer_loss -Inf\nringleader_trainer_samples_per_second -5\n",
         (7, None, None)),
        ("ringleader_trainer_step 7\nringleader_trainer_samples_per_second 1e40\n", (7, None, None)),
        ("x 1\n" * 20000 + "ringleader_trainer_step 9\n", (9, None, None)),  # other metrics are only scanned
        ("ringleader_trainer_step 1\n" * 10000 + "ringleader_trainer_step 2\n", (1, None, None)),  # 64 lines read
    ],
    ids=["inf-step", "negative-step", "huge-step", "bad-loss-and-rate", "huge-rate", "many-others", "many-steps"],
)  # fmt: skip
def test_values_out_of_range_are_dropped(text: str, want: tuple[int, float | None, float | None] | None) -> None:
    p = parse(text, NOW)
    assert (None if p is None else (p.step, p.loss, p.samples_per_second)) == want


# ---- scrape(): one GET against pages a hostile pod could serve (a real HTTP server on loopback) ----

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serving(**routes: Handler) -> AsyncIterator[int]:
    """An HTTP server on a free loopback port with `routes` (path without the slash -> handler)."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(f"/{path}", handler)
    async with served(app) as port:
        yield port


def _scrape_from(**routes: Handler) -> tuple[Any, float]:
    """Scrape /metrics of a server with `routes` once: the result (or the ScrapeError) and the time taken."""

    async def main() -> tuple[Any, float]:
        async with serving(**routes) as port:
            client = session()
            t0 = time.monotonic()
            try:
                result: Any = await scrape(client, "127.0.0.1", port, NOW)
            except ScrapeError as e:
                result = e
            took = time.monotonic() - t0
            await client.close()
            return result, took

    return asyncio.run(main())


async def _page(_: web.Request) -> web.StreamResponse:
    return web.Response(text=PAGE)


async def _huge_streamed(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()  # chunked: no length announced
    await resp.prepare(request)
    lines = b"x_total 1\n" * 10000
    for _ in range(1000):  # 100 MB, if anyone read it all
        await resp.write(lines)
    return resp


async def _huge_announced(_: web.Request) -> web.StreamResponse:
    return web.Response(body=b"x 1\n" * (MAX_BYTES // 4 + 1))


async def _drip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(b"ringleader_trainer_step 5\n")
    for _ in range(100):  # a byte every 0.1 s: never done
        await asyncio.sleep(0.1)
        await resp.write(b"#")
    return resp


async def _gzip_bomb(_: web.Request) -> web.StreamResponse:
    bomb = gzip.compress(b"ringleader_trainer_step 5\n" + b"x 1\n" * 5_000_000)  # 20 MB in about 20 KB
    return web.Response(body=bomb, headers={"Content-Encoding": "gzip"})


async def _garbage(_: web.Request) -> web.StreamResponse:
    return web.Response(body=bytes(range(256)) * 100)


async def _redirect(_: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/elsewhere")


async def _with_cookie(_: web.Request) -> web.StreamResponse:
    resp = web.Response(text=PAGE)
    resp.set_cookie("session", "from-one-pod")
    return resp


def test_a_normal_page_is_read() -> None:
    result, _ = _scrape_from(metrics=_page)
    assert (result.step, result.loss) == (1200, 0.123457)


@pytest.mark.parametrize(
    ("handler", "error"),
    [
        (_huge_streamed, "larger than 256 KiB"),
        (_huge_announced, "larger than 256 KiB"),
        (_drip, "no whole page within 2 s"),
    ],
    ids=["huge-chunked", "huge-announced", "slow-drip"],
)
def test_a_hostile_page_is_a_scrape_error_within_the_timeout(handler: Handler, error: str) -> None:
    result, took = _scrape_from(metrics=handler)
    assert isinstance(result, ScrapeError) and error in str(result), result
    assert took < SCRAPE_TIMEOUT + 1.0


def test_a_compressed_page_is_not_inflated() -> None:
    # Inflated, it would be 20 MB (a ScrapeError for its size); read as sent, it is 20 KB of binary: no progress.
    result, _ = _scrape_from(metrics=_gzip_bomb)
    assert result is None


def test_garbage_bytes_are_no_progress_and_no_crash() -> None:
    result, _ = _scrape_from(metrics=_garbage)
    assert result is None or isinstance(result, ScrapeError)


def test_a_redirect_is_not_followed() -> None:
    followed: list[str] = []

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        followed.append(request.path)
        return web.Response(text=PAGE)

    result, _ = _scrape_from(metrics=_redirect, elsewhere=elsewhere)
    assert isinstance(result, ScrapeError) and "HTTP 302" in str(result)
    assert followed == []


def test_a_pods_cookie_is_not_kept_for_the_next_scrape() -> None:
    async def main() -> int:
        async with serving(metrics=_with_cookie) as port:
            client = session()
            await scrape(client, "127.0.0.1", port, NOW)
            kept = len(client.cookie_jar)
            await client.close()
            return kept

    assert asyncio.run(main()) == 0


@contextlib.contextmanager
def _listener(backlog_full: bool) -> Iterator[int]:
    """A loopback port that listens and never accepts. With `backlog_full`, its accept queue is filled first, so
    the kernel drops the next SYN, as a network that cuts a pod off does; else a connection is made and no byte
    ever comes, as from a trainer wedged in native code."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        fillers = []
        if backlog_full:
            for _ in range(2):  # backlog 0 queues one connection; the second makes sure the queue is full
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", port))
                fillers.append(c)
            time.sleep(0.2)
        try:
            yield port
        finally:
            for c in fillers:
                c.close()


@contextlib.contextmanager
def _closed_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield port  # bound once, closed: nothing listens there


@pytest.mark.parametrize(
    ("target", "unreachable", "hung", "says"),
    [
        (lambda: _listener(backlog_full=True), True, False, "no connection within"),
        (lambda: _listener(backlog_full=False), False, True, "no whole page within"),
        (_closed_port, False, False, "Connect call failed"),
    ],
    ids=["syn-dropped", "wedged-trainer", "refused"],
)
def test_a_page_whose_address_was_never_reached_is_told_from_a_pod_that_answered(
    target: Callable[[], contextlib.AbstractContextManager[int]], unreachable: bool, hung: bool, says: str
) -> None:
    """The stall watch acts only on what tells of a hang (stalls.judge): a connection never made says the network
    failed, a refused one that nothing listens there (a script that serves no page); only a connection taken and
    no page sent says the trainer hangs."""

    async def main(port: int) -> ScrapeError:
        client = session()
        try:
            await scrape(client, "127.0.0.1", port, NOW)
        except ScrapeError as e:
            return e
        finally:
            await client.close()
        raise AssertionError("a page was read")

    with target() as port:
        t0 = time.monotonic()
        error = asyncio.run(main(port))
        assert time.monotonic() - t0 < SCRAPE_TIMEOUT + 1.0
    assert (error.unreachable, error.hung, says in str(error)) == (unreachable, hung, True), error


def pods_at(ips: dict[str, tuple[Role, int]]) -> Callable[[str, str], Awaitable[list[dict[str, Any]]]]:
    """The job's pods as the reconciler hands them to the scraper: running rank pods at these addresses."""

    async def pods(_namespace: str, job: str) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": f"{job}-{role.value}-{index}", "labels": rank_labels(job, role, index)},
                "spec": {"nodeName": f"node-{index}"},
                "status": {"phase": "Running", "podIP": ip},
            }
            for ip, (role, index) in ips.items()
        ]

    return pods


def test_failed_scrapes_are_counted_and_reported_once_per_streak(monkeypatch: pytest.MonkeyPatch) -> None:
    from ringleader_operator import scraper as scraper_module
    from ringleader_operator.jobmemory import JobMemory, Key
    from ringleader_operator.scraper import SCRAPE_FAILURES_REPORTED, ProgressScraper

    serve = {"ok": False}
    patched: list[dict[str, Any]] = []
    events: list[tuple[str, str]] = []

    async def page(_: web.Request) -> web.StreamResponse:
        return web.Response(text=PAGE) if serve["ok"] else web.Response(status=500)

    class Kube:
        async def patch_status(
            self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
        ) -> None:
            patched.append(status)

    job = {"metadata": {"namespace": "ns", "name": "j"}, "status": {}}

    async def main() -> None:
        async with serving(metrics=page) as port:
            monkeypatch.setattr(scraper_module, "METRICS_PORT", port)
            jobs: dict[Key, JobMemory] = {("ns", "j"): JobMemory()}  # the reconciler's records
            r = ProgressScraper(
                Kube(),
                lambda _o, _k, reason, message: events.append((reason, message)),
                jobs.get,
                pods_at({"127.0.0.1": (Role.WORKER, 0)}),
            )
            gone = {"metadata": {"namespace": "ns", "name": "deleted"}, "status": {}}
            await r.scrape(gone)  # a job the reconciler forgot: no read, no record left behind
            assert list(jobs) == [("ns", "j")] and not events
            record = jobs[("ns", "j")]

            async def scrape_when_due() -> None:
                record.next_scrape_at = 0.0  # as if the back-off's time had passed
                await r.scrape(job)

            await r.scrape(job)
            await r.scrape(job)  # the next tick: tried again
            assert record.scrape_failures == 2
            await r.scrape(job)  # at once after a second failure: backing off, not tried
            assert record.scrape_failures == 2 and record.next_scrape_at - time.monotonic() > 9
            for _ in range(SCRAPE_FAILURES_REPORTED):
                await scrape_when_due()
            assert len(events) == 1 and not patched and record.scrape_failures == 5
            # never served, no stall or straggler policy: past the minute (80 s after the fifth failure)
            assert record.next_scrape_at - time.monotonic() > 70
            serve["ok"] = True
            await scrape_when_due()
            assert patched and patched[-1]["progress"]["step"] == 1200 and record.next_scrape_at == 0
            serve["ok"] = False
            for _ in range(SCRAPE_FAILURES_REPORTED + 2):
                await scrape_when_due()
            assert record.scrape_failures == 5 and record.next_scrape_at - time.monotonic() <= 60  # served once
            await r.close()

    asyncio.run(main())
    assert [reason for reason, _ in events] == ["ProgressUnavailable"] * 2
    assert events[0][1].startswith("worker 0's metrics page: http://127.0.0.1:") and events[0][1].endswith("HTTP 500")


def test_total_steps_give_percent_and_eta() -> None:
    page = "ringleader_trainer_step 150\nringleader_trainer_total_steps 600\nringleader_trainer_step_seconds 0.2\n"
    p = parse(page, NOW)
    assert p is not None and (p.total_steps, p.percent, p.eta_seconds) == (600, 25.0, 90)
    p = parse("ringleader_trainer_step 150\nringleader_trainer_total_steps 0\n", NOW)  # never set
    assert p is not None and (p.total_steps, p.percent, p.eta_seconds) == (None, None, None)


def test_a_job_without_progress_for_its_deadline_is_found_stalled_naming_the_rank_that_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three ranks on three loopback addresses: worker 0 and 2 wait in an exchange, worker 1 is outside one.
    The first scrape starts the clock; after the deadline (1 s) a scrape reads every rank and leaves the stall
    naming worker 1 for a round (woken), once: the next scrapes do not read the ranks again while it waits."""
    from ringleader_operator import scraper as scraper_module
    from ringleader_operator.jobmemory import JobMemory, Key
    from ringleader_operator.scraper import ProgressScraper

    now = time.time()
    pages = {
        "127.0.0.1": f"ringleader_trainer_step 40\nringleader_trainer_rank_step 57\n"
        f"ringleader_trainer_exchange_started_timestamp_seconds {now - 1}\n"
        f"ringleader_trainer_rank_step_timestamp_seconds {now - 1.5}\n",  # a step since the job turned Running
        "127.0.0.2": f"ringleader_trainer_rank_step 57\nringleader_trainer_exchange_done_timestamp_seconds {now - 2}\n",
        "127.0.0.3": f"ringleader_trainer_rank_step 57\n"
        f"ringleader_trainer_exchange_started_timestamp_seconds {now - 1}\n",
    }
    reads: list[str] = []

    async def page(request: web.Request) -> web.StreamResponse:
        host = request.host.rsplit(":", 1)[0]
        reads.append(host)
        return web.Response(text=pages[host])

    class Kube:
        async def patch_status(
            self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
        ) -> None:
            pass

    running = utc(now - 60)
    job = {
        "metadata": {"namespace": "ns", "name": "j"},
        "spec": {"runPolicy": {"progressDeadlineSeconds": 1}},
        "status": {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": running}]},
    }
    woken: list[Key] = []

    async def main() -> JobMemory:
        async with serving(metrics=page) as port:
            app_runner_extra = []
            for ip in ("127.0.0.2", "127.0.0.3"):  # the same app on the other ranks' addresses, same port
                app = web.Application()
                app.router.add_get("/metrics", page)
                runner = web.AppRunner(app)
                await runner.setup()
                await web.TCPSite(runner, ip, port).start()
                app_runner_extra.append(runner)
            monkeypatch.setattr(scraper_module, "METRICS_PORT", port)
            jobs: dict[Key, JobMemory] = {("ns", "j"): JobMemory()}
            ranks = {"127.0.0.1": (Role.WORKER, 0), "127.0.0.2": (Role.WORKER, 1), "127.0.0.3": (Role.WORKER, 2)}
            r = ProgressScraper(Kube(), lambda *_: None, jobs.get, pods_at(ranks), woken.append)
            await r.scrape(job)  # starts the clock at step 57
            assert jobs[("ns", "j")].stall is None and reads == ["127.0.0.1"]
            await asyncio.sleep(1.1)
            await r.scrape(job)  # overdue: every rank read
            await r.scrape(job)  # the stall waits for its round: no second reading
            await r.close()
            for runner in app_runner_extra:
                await runner.cleanup()
            return jobs[("ns", "j")]

    record = asyncio.run(main())
    assert sorted(reads) == ["127.0.0.1"] * 4 + ["127.0.0.2", "127.0.0.3"]  # 3 scrapes, 1 read of every rank
    assert woken == [("ns", "j")]
    assert isinstance(record.stall, Stall) and record.stall.step == 57 and record.stall.culprit is not None
    assert record.stall.culprit.pod == "j-worker-1" and record.stall.culprit.node == "node-1"
    assert record.stall.describe().startswith("no progress for 1 s at step 57: worker 1 (pod j-worker-1 on node")


def utc(unix: float) -> str:
    """A status time (RFC 3339, whole seconds) for Unix time `unix`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


REFUSED, UNREACHED, HUNG = "refused", "unreached", "hung"


@pytest.mark.parametrize(
    ("first", "then", "found"),
    [
        # (worker 0's first read: a step after the turn to Running, or an error) -> (every rank at the look)
        #   -> what is handed to a round
        (UNREACHED, [UNREACHED] * 3, "Unavailable: none of the 3 ranks' metrics pages could be reached"),
        (REFUSED, [REFUSED] * 3, "Unavailable: worker 0's step could not be read"),
        (REFUSED, [REFUSED, UNREACHED, 57], "Unavailable: worker 0's step could not be read"),
        (57, [UNREACHED] * 3, "Unavailable: none of the 3 ranks' metrics pages could be reached"),
        (57, [REFUSED] * 3, "Unavailable: none of the 3 ranks' metrics pages could be read"),
        (57, [57, HUNG, 57], "Stall: worker 1 (pod j-worker-1 on node node-1) did not answer"),
        (57, [57, REFUSED, 56], "Stall: worker 2 (pod j-worker-2 on node node-2) stopped first: at step 56"),
    ],
    ids=["network-down", "pageless-script", "pageless-worker-0", "network-broke", "pages-gone", "stopped-rank",
         "refused-rank-not-named"],
)  # fmt: skip
def test_only_a_page_that_tells_makes_a_stall(
    monkeypatch: pytest.MonkeyPatch, first: int | str, then: list[int | str], found: str
) -> None:
    """Past the deadline, every rank's page is read: a rank that took the connection and sent nothing (stopped,
    wedged) is named, one that refused or could not be reached is not (it says nothing of a hang); when nothing
    tells, or worker 0's step was never read, what is handed to a round is Unavailable (Stalled Unknown), never
    a stall (a healthy job is not killed for what the operator cannot see)."""
    from ringleader_operator import progress as progress_module
    from ringleader_operator.jobmemory import JobMemory, Key
    from ringleader_operator.scraper import ProgressScraper

    ranks = {f"10.9.0.{i}": (Role.WORKER, i) for i in range(3)}
    now = time.time()
    looks: dict[str, list[int | str]] = {"phase": [first, REFUSED, REFUSED]}

    async def fetch(_client: object, host: str, port: int) -> str:
        said = looks["phase"][ranks[host][1]]
        url = f"http://{host}:{port}/metrics"
        if said == REFUSED:
            raise ScrapeError(f"{url}: Connect call failed: refused")
        if said == UNREACHED:
            raise ScrapeError(f"{url}: no connection within 1.5 s", unreachable=True)
        if said == HUNG:
            raise ScrapeError(f"{url}: no whole page within 2 s", hung=True)
        return (f"ringleader_trainer_step {said}\nringleader_trainer_rank_step {said}\n"
                f"ringleader_trainer_rank_step_timestamp_seconds {now - 1}\n")  # fmt: skip

    monkeypatch.setattr(progress_module, "fetch", fetch)
    job = {
        "metadata": {"namespace": "ns", "name": "j"},
        "spec": {"runPolicy": {"progressDeadlineSeconds": 1}},
        "status": {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": utc(now - 60)}]},
    }
    woken: list[Key] = []

    async def patch_status(*_args: Any, **_kwargs: Any) -> None:
        pass

    async def main() -> JobMemory:
        jobs: dict[Key, JobMemory] = {("ns", "j"): JobMemory()}
        kube = type("Kube", (), {"patch_status": staticmethod(patch_status)})()
        r = ProgressScraper(kube, lambda *_: None, jobs.get, pods_at(ranks), woken.append)
        await r.scrape(job)  # starts the clock
        started = jobs[("ns", "j")].clock
        looks["phase"] = then
        jobs[("ns", "j")].next_scrape_at = 0.0
        await asyncio.sleep(1.1)
        await r.scrape(job)  # overdue: every rank read
        record = jobs[("ns", "j")]
        assert started is not None and record.clock is not None and record.clock.since > started.since
        return record

    record = asyncio.run(main())
    assert woken == [("ns", "j")]
    kind, says = found.split(": ", 1)
    assert type(record.stall).__name__ == kind
    told = record.stall.describe() if isinstance(record.stall, Stall) else getattr(record.stall, "message", "")
    assert says in told, told


def test_start_up_is_not_a_stall_until_its_own_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 0 serves its page at step 0 and has made no step since the job turned Running: the progress
    deadline (1 s) passes untouched; the start-up deadline (2 s) makes it a stall before its first step. Once a
    step is seen, the progress deadline counts."""
    from ringleader_operator import progress as progress_module
    from ringleader_operator.jobmemory import JobMemory, Key
    from ringleader_operator.scraper import ProgressScraper

    ranks = {"10.9.0.0": (Role.WORKER, 0)}
    page = {"text": "ringleader_trainer_rank_step 0\n"}

    async def fetch(_client: object, host: str, port: int) -> str:
        return page["text"]

    monkeypatch.setattr(progress_module, "fetch", fetch)
    policy = {"progressDeadlineSeconds": 1, "startupDeadlineSeconds": 2}
    job = {
        "metadata": {"namespace": "ns", "name": "j"},
        "spec": {"runPolicy": policy},
        "status": {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": utc(time.time())}]},
    }

    async def patch_status(*_args: Any, **_kwargs: Any) -> None:
        pass

    async def main() -> None:
        jobs: dict[Key, JobMemory] = {("ns", "j"): JobMemory()}
        kube = type("Kube", (), {"patch_status": staticmethod(patch_status)})()
        r = ProgressScraper(kube, lambda *_: None, jobs.get, pods_at(ranks), lambda _key: None)
        record = jobs[("ns", "j")]
        await r.scrape(job)
        await asyncio.sleep(1.2)
        await r.scrape(job)
        assert record.stall is None  # past the progress deadline, within start-up
        await asyncio.sleep(1.0)
        await r.scrape(job)
        assert isinstance(record.stall, Stall) and not record.stall.started
        assert record.stall.describe().startswith("no first step in 2 s since the job turned Running (still at step 0)")
        record.stall, record.clock = None, None
        await r.scrape(job)  # the clock again: step 0, start-up
        page["text"] = "ringleader_trainer_rank_step 1\n"
        await r.scrape(job)  # the first step: the progress deadline counts from here
        await asyncio.sleep(1.1)
        await r.scrape(job)
        assert isinstance(record.stall, Stall) and record.stall.started and record.stall.step == 1

    asyncio.run(main())


def test_a_scrape_reads_worker_0_from_its_index_and_lists_no_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the index of worker-0 pods the scrape of a job that watches for neither stalls nor stragglers looks
    at that one pod: the job's other pods (10,000 of them, say) are never listed."""
    from ringleader_operator import scraper as scraper_module
    from ringleader_operator.jobmemory import JobMemory, Key
    from ringleader_operator.scraper import ProgressScraper

    patched: list[dict[str, Any]] = []
    listed: list[tuple[str, str]] = []

    async def page(_: web.Request) -> web.StreamResponse:
        return web.Response(text=PAGE)

    class Kube:
        async def patch_status(
            self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
        ) -> None:
            patched.append(status)

    async def every_pod(namespace: str, job: str) -> list[dict[str, Any]]:
        listed.append((namespace, job))
        return []

    first = pods_at({"127.0.0.1": (Role.WORKER, 0)})

    async def main() -> None:
        async with serving(metrics=page) as port:
            monkeypatch.setattr(scraper_module, "METRICS_PORT", port)
            jobs: dict[Key, JobMemory] = {("ns", "j"): JobMemory()}
            r = ProgressScraper(Kube(), lambda *_: None, jobs.get, every_pod, first_worker=first)
            await r.scrape({"metadata": {"namespace": "ns", "name": "j"}, "status": {}})
            await r.close()

    asyncio.run(main())
    assert patched and patched[-1]["progress"]["step"] == 1200 and listed == []


@pytest.mark.parametrize(
    ("failures", "running_for", "patient", "seconds"),
    [(1, None, False, 0), (2, None, False, 10), (3, None, False, 20), (4, None, False, 40), (5, None, False, 60),
     (30, None, False, 60), (30, 600, False, 60), (5, 59, False, 0), (5, 61, False, 10), (12, 90, False, 30),
     # a page never served, no policy that needs timely reads: on doubling to ten minutes
     (1, None, True, 0), (5, 59, True, 0), (7, None, True, 320), (8, None, True, 600), (10_000, 3600, True, 600),
     # the grace's failures (one a tick) do not count: the doubling starts from 10 s when it ends
     (12, 61, True, 10), (13, 71, True, 11), (14, 82, True, 22), (16, 300, True, 240)],
)  # fmt: skip
def test_failed_reads_back_off_once_worker_0_has_run_a_minute_to_ten_if_its_page_never_came(
    failures: int, running_for: float | None, patient: bool, seconds: float
) -> None:
    """A trainer still importing torch serves no page yet: while worker 0 is young every tick tries again; once it
    has run past the grace, the wait doubles from 10 s with its age, whatever failed during the grace."""
    from ringleader_operator.scraper import scrape_backoff

    assert scrape_backoff(failures, running_for, patient) == seconds


@pytest.mark.parametrize(
    ("status", "running_for"),
    [
        ({"startTime": "2026-01-01T00:00:00Z"}, 100.0),
        ({"startTime": "2026-01-01T00:00:00Z",
          "containerStatuses": [{"state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}}}]}, 40.0),
        ({"containerStatuses": [{"state": {"waiting": {}}}]}, None),
        ({"startTime": "not a time"}, None),
        ({}, None),
    ],
)  # fmt: skip
def test_worker_0_has_run_since_its_container_started(status: dict[str, Any], running_for: float | None) -> None:
    from ringleader_operator.scraper import _running_for

    now = datetime(2026, 1, 1, 0, 1, 40, tzinfo=UTC).timestamp()
    assert _running_for({"status": status}, now) == running_for


@pytest.mark.parametrize(
    ("running", "watched", "every"),
    [(1, False, 5.0), (100, False, 5.0), (1000, False, 50.0), (1000, True, 5.0), (0, False, 5.0)],
)
def test_the_scrape_interval_shares_a_budget_among_running_jobs_except_watched_ones(
    running: int, watched: bool, every: float
) -> None:
    assert scrape_interval(running, watched) == every
    assert scrape_interval(running, watched, loss_pending=True) == 1.0  # a replacement's cost waits for the page


@pytest.mark.parametrize(
    ("policy", "watched"),
    [
        ({}, False),
        ({"progressDeadlineSeconds": 60}, True),
        ({"stragglerThreshold": 2}, True),
        ({"backoffLimit": 3}, False),
    ],
)
def test_a_job_watches_its_progress_when_its_run_policy_asks_for_stalls_or_stragglers(
    policy: dict[str, Any], watched: bool
) -> None:
    assert watches_progress({"spec": {"runPolicy": policy}}) is watched
    assert watches_progress({}) is False
