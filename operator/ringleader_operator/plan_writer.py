"""The writes of a reconcile round, in order: the job's status (conditional on the version the round read), its
events, its Secret, NetworkPolicy and Service, then its pods (deletions, forced removals, gate releases,
creations). Status goes first: it records restart counts before a failed pod is deleted.

What the API server refuses of a pod built from the spec fails the job as an invalid spec, and the job's pods go
with it: no half-created jobs."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from ringleader_api import Goodput, Reason, TrainingJob

from . import admission, metrics, status_writes
from .builders import delete_grace_seconds
from .job_objects import (
    build_coordinator,
    build_coordinator_network_policy,
    build_coordinator_service,
    build_network_policy,
    build_service,
    build_token_secret,
)
from .jobmemory import Jobs
from .kube_errors import RejectedObject
from .kubeapi import EventSink, KubeApi
from .names import coordinator_name
from .observed import foreign_pods_message
from .policies.stall import STALLED_POD_GRACE_SECONDS
from .round_state import Plan

log = logging.getLogger("ringleader.reconciler")


def export_goodput(namespace: str, name: str, goodput: Goodput | None) -> None:
    """The job's goodput series as status.goodput has them (None: the job is gone; its series go)."""
    for cause in metrics.LOST_CAUSES:
        if goodput is None:
            with contextlib.suppress(KeyError):
                metrics.LOST_SECONDS.remove(namespace, name, cause)
        else:
            metrics.LOST_SECONDS.labels(namespace, name, cause).set(getattr(goodput, f"{cause}_seconds"))
    if goodput is None or goodput.ratio is None:
        with contextlib.suppress(KeyError):
            metrics.GOODPUT_RATIO.remove(namespace, name)
    else:
        metrics.GOODPUT_RATIO.labels(namespace, name).set(goodput.ratio)


class PlanWriter:
    """Carries out rounds' plans. `jobs`: the reconciler's records (shared: what a write returns is kept there
    for the next round); `operator_pods`: (the operator's namespace, its pods' labels) to give every job a
    NetworkPolicy admitting only its own pods and, to the metrics port, the operator's (None: no policies);
    `wake(namespace, name, seconds)`: a round for the job that soon."""

    def __init__(
        self,
        kube: KubeApi,
        emit: EventSink,
        jobs: Jobs,
        operator_pods: tuple[str, dict[str, str]] | None,
        wake: Callable[[str, str, float], None],
    ) -> None:
        self.kube, self.emit, self.jobs, self.operator_pods, self.wake = kube, emit, jobs, operator_pods, wake

    async def apply(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """Status, events, the job's objects, pods: all of `p` but deleting the job."""
        await self.write_status(job, obj, p)
        export_goodput(job.namespace, job.name, p.status.goodput)
        self.report(job, obj, p)
        if p.create_service:
            await self.create_job_objects(job)
        if p.end_coordinator:  # the job ended: its coordinator's pod has nothing left to do
            await self.kube.delete_deployment(job.namespace, coordinator_name(job))
        await self.apply_pods(job, obj, p)

    async def write_status(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """Write the planned status if it changed, conditional on the resourceVersion the round read.

        A status the plan left as it was read (compared as models: their rank entries shared, so at the cost of the
        entries that differ) is not serialized at all while status.ranks is stored as this process last wrote or
        found it (ranks grouped as now: an older operator's per-rank keys are written again, grouped)."""
        record = self.jobs.get((job.namespace, job.name))
        stored_status = obj.get("status") or {}
        stored = stored_status.get("ranks") or {}
        unchanged = status_writes.same_status(p.status, job.status, p.ranks_as_read) and not p.writes_progress
        if unchanged and record is not None and record.ranks_stored is not None and record.ranks_stored == stored:
            return
        version = (obj.get("metadata") or {}).get("resourceVersion")
        written = record.status_written if record is not None else None
        read_ranks = record.ranks_encoded(job.status.ranks) if record is not None else None
        with record.timing_more() if record is not None else contextlib.nullcontext():
            new_ranks = read_ranks if p.ranks_as_read else None
            new_status = status_writes.status_json(p.status, with_progress=p.writes_progress, ranks=new_ranks)
            patch = status_writes.status_patch(
                stored_status,
                new_status,
                lambda: status_writes.status_read(written, job.status, version, p.writes_progress, read_ranks),
            )
        if record is not None and p.ranks_as_read:
            record.ranks_json = (job.status.ranks, new_status.get("ranks", {}))
        if patch is not None:
            written_object = await self.kube.patch_status(job.namespace, job.name, patch, resource_version=version)
            if written_object is not None and record is not None:
                record.saw(written_object)  # the next round reads it, not the version its watch event replaces
                record.ranks_stored = ((written_object.get("status") or {}).get("ranks")) or {}
                written_version = str((written_object.get("metadata") or {}).get("resourceVersion"))
                # a status written with its progress is not what a round without it encodes: no memo of it
                record.status_written = None if p.writes_progress else (written_version, new_status)
        elif record is not None and stored == new_status.get("ranks", {}):
            record.ranks_stored = stored

    def report(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """The plan's events, the foreign-pods warning (once per set of pods, not every round), the restarts."""
        key = (job.namespace, job.name)
        for kind, reason, message in p.events:
            self.emit(obj, kind, reason, message)
        record = self.jobs.memory(key)
        if tuple(p.foreign_pods) != record.foreign_pods:
            record.foreign_pods = tuple(p.foreign_pods)
            if p.foreign_pods:
                self.emit(obj, "Warning", Reason.FOREIGN_PODS, foreign_pods_message(p.foreign_pods))
        metrics.RESTARTS.inc(
            sum(r.restarts for r in p.status.replica_statuses.values())
            - sum(r.restarts for r in job.status.replica_statuses.values())
        )

    async def create_job_objects(self, job: TrainingJob) -> None:
        """The token Secret, the NetworkPolicy (when configured) and then the Service: a job whose Service
        exists has the other two."""
        await self.kube.create_if_absent(build_token_secret(job, secrets.token_hex(32)))
        if self.operator_pods is not None:
            await self.kube.create_if_absent(build_network_policy(job, *self.operator_pods))
        await self.kube.create_if_absent(build_service(job))
        self.jobs.memory((job.namespace, job.name)).service_uid = str(job.metadata.get("uid", ""))

    async def create_coordinator(self, job: TrainingJob) -> None:
        """The job's coordinator: its NetworkPolicy (when configured), its Service, its Deployment; those that exist
        are left as they are."""
        if self.operator_pods is not None:
            await self.kube.create_if_absent(build_coordinator_network_policy(job))
        await self.kube.create_if_absent(build_coordinator_service(job))
        await self.kube.create_if_absent(build_coordinator(job))

    async def apply_pods(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """Deletions, forced removals, gate releases, then creations (a refused pod fails the job)."""
        namespace, name = job.namespace, job.name
        if p.delete_pods:  # a rank told to stop saves first (suspend, resize): give it the time that takes
            await self.kube.delete_pods(namespace, p.delete_pods, grace_seconds=delete_grace_seconds(job))
        if p.kill_pods:
            log.warning("[%s/%s] replacing the pods of a stall: %s", namespace, name, ", ".join(p.kill_pods))
            await self.kube.delete_pods(namespace, p.kill_pods, grace_seconds=STALLED_POD_GRACE_SECONDS)
        if p.force_delete_pods:
            log.warning(
                "[%s/%s] removing pods stuck on a lost node: %s", namespace, name, ", ".join(p.force_delete_pods)
            )
            await self.kube.delete_pods(namespace, p.force_delete_pods, grace_seconds=0)
        if p.ungate_pods:
            await self.kube.ungate_pods(namespace, p.ungate_pods, p.pin_pods)
            log.info(
                "[%s/%s] gang admitted: %d gated pods released to the scheduler", namespace, name, len(p.ungate_pods)
            )
        if not p.create_pods:
            return
        if p.ensure_coordinator:  # before the pods that name it (it may have been lost, or the job resized to need it)
            await self.create_coordinator(job)
        try:
            for scheduling_object in p.scheduling_objects:
                await self.kube.create_scheduling_object(scheduling_object)
            created = await self.kube.create_pods(p.create_pods)
        except RejectedObject as e:
            await self.reject(job, obj, str(e))
            return
        metrics.PODS_CREATED.inc(created)
        if created:
            gated = sum(admission.gated(x) for x in p.create_pods)
            log.info("[%s/%s] created %d pods (%d gated)", namespace, name, created, gated)
            # A round at once, with no pod event needed (the cache holds our creates): it records the new pods'
            # ranks as seen before anything can happen to them (an eviction in their first second is then counted
            # as the rank's failure, not mistaken for a pod that never was), and it releases pods created gated
            # but not weighed (a rank still waited out its back-off).
            self.wake(namespace, name, 0.0)

    async def unparsable(self, obj: dict[str, Any], error: ValidationError) -> None:
        """The job `obj` cannot even be parsed: fail it with InvalidSpec naming the first field at fault, keeping
        what of its old status still parses."""
        message, status = status_writes.unparsable_status(obj, error)
        meta = obj.get("metadata") or {}
        await self.kube.patch_status(meta["namespace"], meta["name"], status)
        self.emit(obj, "Warning", Reason.INVALID_SPEC, message)

    async def reject(self, job: TrainingJob, obj: dict[str, Any], message: str) -> None:
        """The API server refused a pod built from the spec: fail the job, and leave no half-created pods."""
        generation = int(job.metadata.get("generation", 0))
        await self.kube.patch_status(
            job.namespace, job.name, status_writes.invalid_spec_status(job.status, generation, message)
        )
        pods = await self.kube.list_pods(job.namespace, job.name)
        await self.kube.delete_pods(job.namespace, [p["metadata"]["name"] for p in pods])
        self.emit(obj, "Warning", Reason.INVALID_SPEC, message)
