"""The Workload I/O of a queued job's round (workloads.py) against a recording fake of the API: what is created,
replaced, (de)activated, finished and requeued, and what is read how often. The real Kueue's side is
tests/integration/operator/test_kueue.py."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from ringleader_operator import kueue
from ringleader_operator.jobmemory import JobMemory
from ringleader_operator.kube_errors import KueueMissing
from ringleader_operator.workloads import Workloads

from tests.unit.operator.builders import NOW, training_job

ADMITTED = {
    "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
    "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "worker", "flavors": {"cpu": "spot"}}]},
}
EVICTED = {**ADMITTED, "conditions": [*ADMITTED["conditions"], {"type": "Evicted", "status": "True",
                                                                  "reason": "Preempted", "message": "m"}]}  # fmt: skip


class FakeKube:
    def __init__(self, served: bool = True, classes: dict[str, int] | None = None) -> None:
        self.served = served
        self.classes = classes or {}
        self.workloads: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.version = 1

    def _stamp(self, wl: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        wl["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(wl)

    async def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("get_workload")
        return copy.deepcopy(self.workloads.get(name))

    async def create_workload(self, body: dict[str, Any]) -> dict[str, Any] | None:
        self.calls.append("create_workload")
        if not self.served:
            raise KueueMissing("the cluster does not serve Kueue's Workload API")
        name = body["metadata"]["name"]
        if name in self.workloads:
            return None
        body = copy.deepcopy(body)
        body["metadata"]["uid"] = f"wl-{self.version}"
        self.workloads[name] = body
        return self._stamp(body)

    async def delete_workload(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append("delete_workload")
        self.workloads.pop(name, None)

    async def patch_workload(
        self, namespace: str, name: str, body: dict[str, Any], resource_version: str, status: bool = False
    ) -> dict[str, Any] | None:
        self.calls.append("patch_workload_status" if status else "patch_workload")
        wl = self.workloads[name]
        assert wl["metadata"]["resourceVersion"] == resource_version  # written on what the round read
        for key, value in body.items():
            wl[key] = {**(wl.get(key) or {}), **value}
        return self._stamp(wl)

    async def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        self.calls.append(f"get_{plural}")
        if plural == "resourceflavors":
            return {"spec": {"nodeLabels": {"pool": name}}}
        return {"value": self.classes[name]} if name in self.classes else None

    def kueue_says(self, name: str, status: dict[str, Any]) -> None:
        """Kueue writes the Workload's status."""
        self._stamp(self.workloads[name])
        self.workloads[name]["status"] = copy.deepcopy(status)


def queued_job(replicas: int = 2, status: dict[str, Any] | None = None, **spec: Any) -> Any:
    job = training_job(workers={"replicas": replicas}, status=status, **spec)
    job.metadata["labels"] = {kueue.QUEUE_LABEL: "team-a", kueue.PRIORITY_LABEL: "high"}
    return job


def sync(kube: FakeKube, job: Any, record: JobMemory, pods: list[dict[str, Any]] | None = None) -> Any:
    return asyncio.run(Workloads(kube).sync(job, record, pods or [], NOW))  # type: ignore[arg-type]


def test_a_queued_job_gets_one_workload_with_its_priority_and_waits() -> None:
    kube, record = FakeKube(classes={"high": 1000}), JobMemory()
    state = sync(kube, queued_job(), record)
    assert not state.admitted and "waiting in Kueue's queue team-a" in state.message
    (wl,) = kube.workloads.values()
    assert wl["spec"]["priority"] == 1000 and wl["spec"]["priorityClassRef"]["name"] == "high"
    kube.calls.clear()
    assert not sync(kube, queued_job(), record).admitted  # the next round reads what it kept: no request
    assert kube.calls == []


def test_admitted_it_is_placed_on_the_flavors_read_once_per_version_of_the_workload() -> None:
    kube, record = FakeKube(classes={"high": 1}), JobMemory()
    sync(kube, queued_job(), record)
    (name,) = kube.workloads
    kube.kueue_says(name, ADMITTED)
    record.saw_workload(kube.workloads[name])  # its watch event
    state = sync(kube, queued_job(), record)
    assert state.admitted and state.placement == {"worker": ({"pool": "spot"}, [])}
    kube.calls.clear()
    assert sync(kube, queued_job(), record) == state and kube.calls == []


def test_a_job_that_changed_its_pod_sets_gets_a_new_workload_queued_again() -> None:
    kube, record = FakeKube(classes={"high": 1}), JobMemory()
    sync(kube, queued_job(2), record)
    (name,) = kube.workloads
    kube.kueue_says(name, ADMITTED)
    record.saw_workload(kube.workloads[name])
    state = sync(kube, queued_job(3), record)
    assert not state.admitted and "replaced" in state.message and kube.workloads == {}
    state = sync(kube, queued_job(3), record)
    assert [s["count"] for s in kube.workloads[name]["spec"]["podSets"]] == [3] and not state.admitted


def test_an_evicted_workload_gives_its_quota_back_only_once_the_pods_are_gone() -> None:
    kube, record = FakeKube(classes={"high": 1}), JobMemory()
    sync(kube, queued_job(), record)
    (name,) = kube.workloads
    kube.kueue_says(name, EVICTED)
    record.saw_workload(kube.workloads[name])
    state = sync(kube, queued_job(), record, pods=[{"metadata": {"name": "j-worker-0"}}])
    assert state.evicted == ("Preempted", "m") and "patch_workload_status" not in kube.calls
    sync(kube, queued_job(), record, pods=[])
    assert kube.calls.count("patch_workload_status") == 1
    wl = kube.workloads[name]
    assert wl["status"]["admission"] is None
    assert {c["type"]: c["status"] for c in wl["status"]["conditions"]}["Requeued"] == "True"
    sync(kube, queued_job(), record, pods=[])  # given back already: not again
    assert kube.calls.count("patch_workload_status") == 1


def test_suspending_deactivates_the_workload_and_resuming_activates_it() -> None:
    kube, record = FakeKube(classes={"high": 1}), JobMemory()
    sync(kube, queued_job(), record)
    (name,) = kube.workloads
    sync(kube, queued_job(runPolicy={"suspend": True}), record)
    assert kube.workloads[name]["spec"]["active"] is False
    sync(kube, queued_job(), record)
    assert kube.workloads[name]["spec"]["active"] is True


def test_a_finished_job_finishes_its_workload_once() -> None:
    kube, record = FakeKube(classes={"high": 1}), JobMemory()
    sync(kube, queued_job(), record)
    (name,) = kube.workloads
    done = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "JobSucceeded", "message": "ok"}]}
    assert sync(kube, queued_job(status=done), record) is None
    finished = {c["type"]: c for c in kube.workloads[name]["status"]["conditions"]}["Finished"]
    assert (finished["status"], finished["reason"], finished["message"]) == ("True", "Succeeded", "ok")
    sync(kube, queued_job(status=done), record)
    assert kube.calls.count("patch_workload_status") == 1


def test_without_kueue_or_with_an_unknown_priority_class_the_job_waits_saying_why() -> None:
    state = sync(FakeKube(served=False, classes={"high": 1}), queued_job(), JobMemory())
    assert not state.admitted and "does not serve Kueue's Workload API" in state.message
    kube = FakeKube()
    state = sync(kube, queued_job(), JobMemory())
    assert not state.admitted and state.message.startswith("WorkloadPriorityClass high does not exist")
    assert kube.workloads == {}
