"""A CRD installed after the operator started gets served although discovery lags its events and kopf's rescans
of a group overlap: `late_crds.OrderedRescans` runs a group's rescans in order and rescans again once it is quiet.
The seam in kopf it wraps is checked here, so an upgrade of kopf that moves it fails a test, not a cluster."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Collection
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import scanning
from kopf._cogs.structs import references
from kopf._core.reactor import observation
from ringleader_operator import (
    handlers,  # noqa: F401  (registers the operator's handlers)
    kueue,
    late_crds,
)

QUICK = (0.01, 0.01, 0.01)


def crd_event(group: str = kueue.GROUP, kind: str | None = "MODIFIED") -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": f"workloads.{group}"}, "spec": {"group": group}}}


class Recorder:
    """A stand-in for kopf's rescan: records when each call began and ended; the first calls take `pauses`."""

    def __init__(self, pauses: tuple[float, ...] = (), fail: int = 0) -> None:
        self.log: list[tuple[str, int]] = []
        self.pauses, self.fail, self.calls = list(pauses), fail, 0

    async def __call__(self, *, raw_event: dict[str, Any], **kw: Any) -> None:
        self.calls += 1
        call = self.calls
        self.log.append(("begin", call))
        await asyncio.sleep(self.pauses.pop(0) if self.pauses else 0)
        self.log.append(("end", call))
        if self.fail:
            self.fail -= 1
            raise OSError("the API server is away")


async def settled(rescans: late_crds.OrderedRescans) -> None:
    while rescans.trails:
        await asyncio.gather(*rescans.trails)


def test_one_groups_rescans_never_overlap_a_slow_early_one_ends_before_a_later_one_begins() -> None:
    async def run() -> list[tuple[str, int]]:
        recorder = Recorder(pauses=(0.05, 0.0))
        rescans = late_crds.OrderedRescans(recorder, settle=())
        await asyncio.gather(rescans(raw_event=crd_event()), rescans(raw_event=crd_event()))
        return recorder.log

    assert asyncio.run(run()) == [("begin", 1), ("end", 1), ("begin", 2), ("end", 2)]


def test_another_groups_rescan_does_not_wait() -> None:
    async def run() -> list[tuple[str, int]]:
        recorder = Recorder(pauses=(0.05, 0.0))
        rescans = late_crds.OrderedRescans(recorder, settle=())
        await asyncio.gather(rescans(raw_event=crd_event("a.example")), rescans(raw_event=crd_event("b.example")))
        return recorder.log

    assert asyncio.run(run()) == [("begin", 1), ("begin", 2), ("end", 2), ("end", 1)]


@pytest.mark.parametrize(
    ("events", "calls"),
    [(1, 1 + len(QUICK)), (3, 3 + len(QUICK))],
    ids=["one-event-then-its-trail", "a-burst-trails-once"],
)
def test_a_group_is_rescanned_again_after_its_last_event_once_per_pause(events: int, calls: int) -> None:
    async def run() -> int:
        recorder = Recorder()
        rescans = late_crds.OrderedRescans(recorder, settle=QUICK)
        for _ in range(events):
            await rescans(raw_event=crd_event())
        await settled(rescans)
        return recorder.calls

    assert asyncio.run(run()) == calls


def test_the_initial_listing_passes_through_with_no_trail() -> None:
    async def run() -> tuple[int, int]:
        recorder = Recorder()
        rescans = late_crds.OrderedRescans(recorder, settle=QUICK)
        await rescans(raw_event=crd_event(kind=None))
        return recorder.calls, len(rescans.trails)

    assert asyncio.run(run()) == (1, 0)


def test_a_failed_trailing_rescan_is_logged_and_the_next_pause_tries_again(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> int:
        recorder = Recorder()
        rescans = late_crds.OrderedRescans(recorder, settle=QUICK)
        await rescans(raw_event=crd_event())
        recorder.fail = 1
        await settled(rescans)
        return recorder.calls

    assert asyncio.run(run()) == 1 + len(QUICK)
    assert "rescanning the API group kueue.x-k8s.io for new custom resources failed: the API server is away" in (
        caplog.text
    )


def workloads(version: str = kueue.VERSION) -> references.Resource:
    return references.Resource(
        kueue.GROUP, version, kueue.WORKLOADS, kind="Workload", namespaced=True,
        verbs=frozenset({"list", "watch", "get", "patch", "create"}),
    )  # fmt: skip


def test_with_kopfs_own_rescan_workloads_served_late_by_discovery_come_to_be_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What happened when Kueue was installed beside a running operator: the scan of Workloads' last CRD event
    found no Workloads yet (discovery lagged); the trailing rescan finds them, and kopf watches them."""
    answers: list[Collection[references.Resource]] = [set(), {workloads()}]

    async def scan(**_: Any) -> Collection[references.Resource]:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    monkeypatch.setattr(scanning, "scan_resources", scan)  # observation calls it through the module

    async def run() -> set[references.Resource]:
        insights = references.Insights()
        rescans = late_crds.OrderedRescans(observation.process_discovered_resource_event, settle=QUICK)
        await rescans(
            raw_event=crd_event(),
            settings=kopf.OperatorSettings(),
            registry=kopf.get_default_registry(),
            insights=insights,
        )
        after_event = set(insights.watched_resources)
        await settled(rescans)
        assert workloads() not in after_event
        return insights.watched_resources

    assert workloads() in asyncio.run(run())


def test_install_wraps_the_function_kopfs_resource_observer_calls_once(monkeypatch: pytest.MonkeyPatch) -> None:
    original = observation.process_discovered_resource_event
    monkeypatch.setattr(observation, "process_discovered_resource_event", original)
    assert "raw_event" in inspect.signature(original).parameters
    # the observer looks the name up as it starts its CRD watch, so a wrap put in place before kopf.run is used
    assert "functools.partial(process_discovered_resource_event," in inspect.getsource(observation.resource_observer)
    late_crds.install()
    late_crds.install()
    wrapped = observation.process_discovered_resource_event
    assert isinstance(wrapped, late_crds.OrderedRescans)
    assert wrapped.rescan is original
