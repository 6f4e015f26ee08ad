"""The operator's own pod watch (podwatch.py): its indexes file, move and drop pods as events say; a relist
replaces a scope's pods and reports what changed in between; the stream lists page by page, watches from the
list's version and then from the last one seen, lists again on 410 Gone, backs off on failures; and the
reconciler's side (Reconciler.pod_seen) gives rounds only to the jobs this replica knows. Against a scripted
fake of the API client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from ringleader_api import LABEL_INDEX, LABEL_JOB, LABEL_ROLE
from ringleader_operator import podwatch, round_reader
from ringleader_operator.podcache import PodCache, PodIndexes
from ringleader_operator.podwatch import Gone, PodWatch, watch_events
from ringleader_operator.ratelimit import ClientBudget
from ringleader_operator.reconciler import Reconciler

from tests.unit.operator.test_reconciler_reads import FakeKube


def pod(name: str, version: int, job: str | None = "j", namespace: str = "ns", **extra: Any) -> dict[str, Any]:
    labels = {} if job is None else {LABEL_JOB: job}
    labels |= extra.pop("labels", {})
    return {
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(version), "labels": labels},
        "spec": {"nodeName": "n1", "volumes": [{"name": "big"}]},
        "status": {"phase": extra.pop("phase", "Running")},
    }


def worker0(version: int, job: str = "j") -> dict[str, Any]:
    return pod(f"{job}-worker-0", version, job, labels={LABEL_ROLE: "worker", LABEL_INDEX: "0"})


def indexes() -> PodIndexes:
    return PodIndexes(LABEL_JOB, LABEL_ROLE, LABEL_INDEX)


def names(pods: Any) -> set[str]:
    return {p["metadata"]["name"] for p in pods}


def test_the_indexes_group_pods_by_job_and_keep_worker_0_apart() -> None:
    ix = indexes()
    for p in (worker0(1), pod("j-worker-1", 2), pod("other", 3, job=None), pod("k-worker-0", 4, "k")):
        ix.apply("ADDED", p)
    assert names(ix.by_job[("ns", "j")]) == {"j-worker-0", "j-worker-1"}
    assert names(ix.by_job[("ns", None)]) == {"other"}
    assert set(ix.first_workers) == {("ns", "j")}
    assert names(ix.first_workers[("ns", "j")]) == {"j-worker-0"}
    ix.apply("MODIFIED", pod("j-worker-1", 5, "k"))  # its label changed: it moves
    assert names(ix.by_job[("ns", "j")]) == {"j-worker-0"}
    assert names(ix.by_job[("ns", "k")]) == {"j-worker-1", "k-worker-0"}
    ix.apply("MODIFIED", pod("j-worker-0", 6))  # no longer worker 0
    assert ("ns", "j") not in ix.first_workers
    ix.apply("DELETED", pod("j-worker-0", 7))
    assert ("ns", "j") not in ix.by_job  # an empty group goes
    assert ix.by_job.pods() == 3


def test_a_relist_replaces_its_scope_and_reports_what_changed() -> None:
    ix = indexes()
    for p in (pod("a", 1), pod("b", 2), pod("c", 3), pod("x", 4, namespace="other")):
        ix.apply("ADDED", p)
    changes = ix.relisted("ns", [pod("a", 1), pod("b", 9), pod("d", 10)])
    assert sorted((kind, p["metadata"]["name"]) for kind, p in changes) == [
        ("ADDED", "d"), ("DELETED", "c"), ("MODIFIED", "b")
    ]  # fmt: skip
    assert names(ix.by_job[("ns", "j")]) == {"a", "b", "d"}
    assert names(ix.by_job[("other", "j")]) == {"x"}  # another namespace's pods are not this list's
    assert [k for k, _ in ix.relisted(None, [])] == ["DELETED"] * 4  # the cluster's list: every pod


def test_the_indexes_hold_digests_not_whole_pods() -> None:
    watch, _ = scripted([listing("1", [pod("a", 1)])])
    run_until_idle(watch)
    (kept,) = watch.indexes.by_job[("ns", "j")]
    assert "volumes" not in kept["spec"] and kept["spec"]["nodeName"] == "n1"


async def lines(*events: dict[str, Any]) -> AsyncIterator[bytes]:
    for e in events:
        yield json.dumps(e).encode() + b"\n"


def test_watch_events_parse_lines_and_raise_on_errors() -> None:
    async def collect(*events: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [e async for e in watch_events(lines(*events))]

    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    assert asyncio.run(collect({"type": "ADDED", "object": pod("a", 1)}, bookmark)) == [
        ("ADDED", pod("a", 1)), ("BOOKMARK", bookmark["object"])
    ]  # fmt: skip
    with pytest.raises(Gone):
        asyncio.run(collect({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}))
    with pytest.raises(ApiException):
        asyncio.run(collect({"type": "ERROR", "object": {"kind": "Status", "code": 500}}))
    with pytest.raises(ApiException):
        asyncio.run(collect({"kind": "no type"}))


class Response:
    """What the watch reads of aiohttp's response: status, read(), content (lines), async with."""

    def __init__(self, status: int = 200, body: dict[str, Any] | None = None, events: list[Any] = ()) -> None:  # type: ignore[assignment]
        self.status, self.body, self.events = status, body, list(events)
        self.reads: list[int] = []  # the sizes content.read was asked for

    async def read(self) -> bytes:
        return json.dumps(self.body).encode()

    @property
    def content(self) -> Content:
        return Content(self)

    async def _lines(self) -> AsyncIterator[bytes]:
        for e in self.events:
            if isinstance(e, Exception):
                raise e
            yield json.dumps(e).encode() + b"\n"

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *_: Any) -> None:
        return None


class Content:
    """aiohttp's response.content: its lines, or up to n bytes of the body (the sizes asked are recorded)."""

    def __init__(self, response: Response) -> None:
        self.response = response

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.response._lines()

    async def read(self, n: int = -1) -> bytes:
        self.response.reads.append(n)
        body = await self.response.read()
        return body if n < 0 else body[:n]


def listing(version: str, pods: list[dict[str, Any]], token: str = "") -> Response:
    return Response(body={"metadata": {"resourceVersion": version, "continue": token}, "items": pods})


class ScriptedCore:
    """Answers each list or watch request with the next scripted response; records the requests."""

    def __init__(self, script: list[Response]) -> None:
        self.script, self.requests = script, list[dict[str, Any]]()

    async def list_pod_for_all_namespaces(self, **kw: Any) -> Response:
        self.requests.append(kw)
        if not self.script:
            raise asyncio.CancelledError  # the script is done: end the test's stream
        return self.script.pop(0)


def scripted(script: list[Response]) -> tuple[PodWatch, ScriptedCore]:
    seen: list[tuple[str, str]] = []
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    core = ScriptedCore(script)
    told = lambda kind, p: seen.append((kind, p["metadata"]["name"]))  # noqa: E731
    listed: list[int] = []
    watch = PodWatch(
        core, ClientBudget(qps=0), [], indexes(), told, sleep, lambda: listed.append(watch.indexes.by_job.pods())
    )
    watch.seen_log, watch.pauses, watch.listed_log = seen, pauses, listed  # type: ignore[attr-defined]
    return watch, core


def run_until_idle(watch: PodWatch) -> None:
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(watch.stream(None))


def test_an_error_answer_is_read_only_as_far_as_its_message_goes() -> None:
    """A list answered with an error of any size: at most ERROR_BYTES of it are read, into the exception."""
    huge = Response(status=500, body={"message": "x" * 10_000_000})
    watch, _ = scripted([huge])
    with pytest.raises(ApiException) as err:
        asyncio.run(watch._get(None, "list", {}))
    assert err.value.status == 500 and len(err.value.reason or "") == podwatch.ERROR_BYTES
    assert huge.reads == [podwatch.ERROR_BYTES]


def test_the_stream_lists_watches_relists_on_gone_and_backs_off_on_failures() -> None:
    a, b = pod("a", 1), pod("b", 2)
    watch, core = scripted([
        listing("10", [a], token="page2"), listing("11", [b]),
        Response(events=[{"type": "ADDED", "object": pod("c", 12)}, {"type": "MODIFIED", "object": pod("a", 13)},
                         {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "14"}}}]),
        Response(events=[{"type": "DELETED", "object": pod("b", 15)},
                         {"type": "ERROR", "object": {"kind": "Status", "code": 410}}]),
        listing("20", [pod("a", 13), pod("d", 19)]),  # c went and d came while no watch ran
        Response(status=500, body={"message": "etcd down"}),
        Response(events=[]),  # ended at once: counted as a failure too
        Response(events=[{"type": "ADDED", "object": pod("e", 21)}]),
    ])  # fmt: skip
    run_until_idle(watch)
    assert watch.ready.is_set()
    assert watch.listed_log == [2]  # type: ignore[attr-defined]  # once, after both pages, not again on a relist
    assert [r.get("_continue") for r in core.requests[:2]] == [None, "page2"]
    versions = [r.get("resource_version") for r in core.requests if r.get("watch")]
    assert versions == ["11", "14", "20", "20", "20", "21"]  # from the list, then from the last event or bookmark
    assert watch.seen_log == [  # type: ignore[attr-defined]
        ("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b"),  # the first list told nothing (every job reads it)
        ("DELETED", "c"), ("ADDED", "d"),  # the relist after 410 Gone: what changed meanwhile
        ("ADDED", "e"),
    ]  # fmt: skip
    assert names(watch.indexes.by_job[("ns", "j")]) == {"a", "d", "e"}
    assert watch.pauses == [1, 1]  # type: ignore[attr-defined]


def test_a_failing_callback_does_not_end_the_watch() -> None:
    watch, _ = scripted([listing("1", []), Response(events=[{"type": "ADDED", "object": pod("a", 2)},
                                                           {"type": "ADDED", "object": pod("b", 3)}])])  # fmt: skip
    told: list[str] = []

    def seen(kind: str, p: dict[str, Any]) -> None:
        told.append(p["metadata"]["name"])
        raise RuntimeError("a bug")

    watch.seen = seen
    run_until_idle(watch)
    assert told == ["a", "b"]


def reconciler_with_wakes() -> tuple[Reconciler, list[tuple[tuple[str, str], float]]]:
    r = Reconciler(FakeKube(service_exists=True), emit=lambda *_: None, cache=PodCache(LABEL_JOB))
    wakes: list[tuple[tuple[str, str], float]] = []
    r.queue.add_after = lambda key, seconds: wakes.append((key, seconds))  # type: ignore[method-assign]
    return r, wakes


@pytest.mark.parametrize(
    ("kind", "phase", "deleting", "wake"),
    [("MODIFIED", "Running", False, 0.5), ("MODIFIED", "Failed", False, 0.0), ("MODIFIED", "Succeeded", False, 0.0),
     ("MODIFIED", "Running", True, 0.0), ("DELETED", "Running", False, 0.0), ("ADDED", "Pending", False, 0.5)],
)  # fmt: skip
def test_a_known_jobs_pod_event_wakes_it_now_or_within_its_window(
    kind: str, phase: str, deleting: bool, wake: float
) -> None:
    r, wakes = reconciler_with_wakes()
    r.memory(("ns", "j"))
    p = pod("j-worker-1", 5, phase=phase)
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    r.pod_seen(kind, p)
    assert wakes == [(("ns", "j"), wake)]
    assert bool(r.cache and r.cache.gone) is (kind == "DELETED")  # its last state kept for the round


def test_a_pod_of_a_job_this_replica_does_not_know_gets_no_round() -> None:
    """Its pods are indexed, and nothing else: a job this replica's job watch has not shown it is not its own
    (another controller's, or one a demoted leader no longer sees)."""
    r, wakes = reconciler_with_wakes()
    r.pod_seen("MODIFIED", pod("j-worker-1", 5, phase="Failed"))
    r.pod_seen("ADDED", pod("other", 6, job=None))
    assert wakes == []


def test_the_watch_starts_once_however_many_jobs_ask() -> None:
    """Every job event asks (handlers._start_pod_watch); one stream runs, and stop ends it."""

    async def scenario() -> tuple[int, bool]:
        watch, core = scripted([listing("1", []), *[Response(events=[{"type": "ADDED", "object": pod("a", 2)}])] * 50])
        for _ in range(3):
            watch.start()
        first = watch.task
        await watch.ready.wait()
        watch.start()
        assert watch.task is first
        await watch.stop()
        return sum(1 for r in core.requests if not r.get("watch")), first is not None and first.cancelled()

    lists, cancelled = asyncio.run(scenario())
    assert lists == 1 and cancelled


def test_rounds_wait_for_the_first_pod_list_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round at start waits for the pod watch's first list; if it never comes (the list refused), the round
    reads from the API server after PODS_LISTED_SECONDS and later rounds do not wait again."""
    monkeypatch.setattr(round_reader, "PODS_LISTED_SECONDS", 0.2)

    async def scenario() -> list[float]:
        kube = FakeKube(service_exists=True)
        r = Reconciler(kube, emit=lambda *_: None, cache=PodCache(LABEL_JOB), pods_listed=asyncio.Event())  # never set
        took = []
        for _ in range(2):
            began = time.monotonic()
            await r.round("ns", "j", False)
            took.append(time.monotonic() - began)
        assert "list_pods" in kube.calls  # read from the API server, the cache never filled
        r.queue.close()
        return took

    first, second = asyncio.run(scenario())
    assert first >= 0.2 and second < 0.2
