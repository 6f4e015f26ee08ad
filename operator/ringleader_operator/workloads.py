"""Kueue's Workloads, the I/O side (kueue.py decides): each round of a queued job brings its Workload in line
with the job and says what Kueue's answer means for the job's pods."""

from __future__ import annotations

import logging
from typing import Any

from ringleader_api import ConditionType, TrainingJob

from . import kueue
from .conditions import TERMINAL, finished
from .jobmemory import JobMemory
from .kube_errors import KueueMissing
from .kubeapi import KubeApi

log = logging.getLogger("ringleader.workloads")


class Workloads:
    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube

    async def sync(
        self, job: TrainingJob, record: JobMemory, pods: list[dict[str, Any]], now: str
    ) -> kueue.QueueState | None:
        """The job's Workload brought in line with the job: created, replaced after a change of its pod sets,
        (de)activated with runPolicy.suspend, marked Finished once the job ended, its reservation given back once
        an eviction stopped every pod (`pods`: all the job's pods). Returns what it says for this round's pods
        (None: the job ended)."""
        wl = await self._current(job, record)
        if finished(job.status.conditions):
            if wl is not None and not kueue.finished(wl):
                ended = next(c for c in job.status.conditions if c.type in TERMINAL and c.status == "True")
                status = kueue.finished_status(wl, ended.type == ConditionType.SUCCEEDED, ended.message, now)
                record.saw_workload(await self._write(wl, {"status": status}, status=True))
            return None
        if wl is None or not kueue.matches(wl, job):
            return await self._replace(job, record, wl)
        if kueue.active(wl) != kueue.wants_active(job):
            record.saw_workload(wl := await self._write(wl, {"spec": {"active": kueue.wants_active(job)}}) or wl)
        state = kueue.read(wl)
        if state.evicted is not None and not pods and kueue.has_reservation(wl):
            record.saw_workload(await self._write(wl, {"status": kueue.requeue_status(wl, now)}, status=True))
            log.info(
                "[%s/%s] evicted by Kueue (%s), its pods gone: Workload %s queued again",
                job.namespace, job.name, state.evicted[0], wl["metadata"]["name"],
            )  # fmt: skip
        return await self._placed(wl, state, record) if state.admitted else state

    async def _current(self, job: TrainingJob, record: JobMemory) -> dict[str, Any] | None:
        """The job's Workload as last seen, from the API server when none was seen (or another job's)."""
        wl, name = record.workload, kueue.workload_name(job)
        if not record.workload_known or (wl is not None and wl["metadata"].get("name") != name):
            record.saw_workload(wl := await self.kube.get_workload(job.namespace, name))
        return wl

    async def _replace(self, job: TrainingJob, record: JobMemory, wl: dict[str, Any] | None) -> kueue.QueueState:
        """Create the job's Workload, after deleting `wl` if it describes another shape of the job."""
        name = kueue.workload_name(job)
        if wl is not None:
            log.info("[%s/%s] the job changed its pod sets: replacing Workload %s", job.namespace, job.name, name)
            await self.kube.delete_workload(job.namespace, name, str(wl["metadata"].get("uid", "")))
            record.saw_workload(None)
            record.workload_known = False  # its deletion's event may come after the next round's read
            return kueue.QueueState(False, f"the job changed: its Workload {name} is replaced and queued again")
        try:
            priority, priority_class = await self._priority(job)
            made = await self.kube.create_workload(kueue.build_workload(job, priority, priority_class))
        except (KueueMissing, kueue.PriorityMissing) as e:
            return kueue.QueueState(False, str(e))
        if made is None:  # it exists (made before this process restarted): the next round reads it
            record.workload_known = False
            return kueue.QueueState(False, f"waiting for Workload {name}")
        record.saw_workload(made)
        log.info("[%s/%s] created Workload %s in queue %s", job.namespace, job.name, name, kueue.queue_name(job))
        return kueue.read(made)

    async def _placed(self, wl: dict[str, Any], state: kueue.QueueState, record: JobMemory) -> kueue.QueueState:
        """`state` with the node labels and tolerations of the flavors Kueue assigned, read once per version of
        the Workload."""
        version = str(wl["metadata"].get("resourceVersion", ""))
        if record.placed is not None and record.placed[0] == version:
            placed: kueue.QueueState = record.placed[1]
            return placed
        flavors = {}
        for names in kueue.assigned_flavors(wl).values():
            for flavor in names:
                found = await self.kube.get_cluster_object(kueue.GROUP, kueue.VERSION, "resourceflavors", flavor)
                flavors[flavor] = found or {}
        state = kueue.place(state, wl, flavors)
        record.placed = (version, state)
        return state

    async def _write(self, wl: dict[str, Any], body: dict[str, Any], status: bool = False) -> dict[str, Any] | None:
        """Merge `body` into the Workload as it was read (Conflict if it changed meanwhile: the round runs again)."""
        meta = wl["metadata"]
        return await self.kube.patch_workload(
            meta["namespace"], meta["name"], body, str(meta.get("resourceVersion", "")), status=status
        )

    async def _priority(self, job: TrainingJob) -> tuple[int | None, tuple[str, str] | None]:
        """The Workload's priority and its class, as Kueue's job reconcilers resolve them: the job's
        WorkloadPriorityClass, else its pods' PriorityClass; neither, none. kueue.PriorityMissing when the class
        does not exist."""
        ref = kueue.priority_class(job)
        if ref is None:
            return None, None
        kind, name = ref
        if kind == "WorkloadPriorityClass":
            found = await self.kube.get_cluster_object(kueue.GROUP, kueue.VERSION, "workloadpriorityclasses", name)
        else:
            found = await self.kube.get_cluster_object("scheduling.k8s.io", "v1", "priorityclasses", name)
        if found is None:
            raise kueue.PriorityMissing(f"{kind} {name} does not exist: create it, or change the job's priority")
        return int(found.get("value") or 0), ref
