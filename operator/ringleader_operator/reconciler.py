"""Apply one reconcile round for a job: read what exists, plan (pure), write what changed.

Rounds for the same job never overlap: triggers that arrive during a round (the timer, spec updates) collapse
into one more round after it. Pod events that only say a pod was bound or started do not start a round each:
a job's such events within POD_EVENTS_SECONDS share one (pods of a large job change phase one after another,
and each round costs reads and a status write). A pod that ends or is being deleted gets a round at once.

Reads: the job from the API server; its pods from kopf's index; whether its Service exists from what this
process last read or created. The periodic resync reads pods and Service from the API server every
FRESH_SECONDS, so what a watch gap leaves behind lasts that long at most.

Order of writes: status first (it records restart counts before a failed pod is deleted), then the
Service, deletions and creations. The status write is conditional on the job's resourceVersion as read at
the start of the round, so a round that decided on an outdated reading (another writer, a second operator
replica during a leader hand-over) writes nothing and runs again. A rank waiting out its restart back-off
gets a round when the wait ends; the periodic resync covers an operator restart in between.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from pydantic import ValidationError

from . import admission, metrics, progress
from .api import ConditionType, JobPhase, Progress, Role, TrainingJob, TrainingJobStatus
from .builders import DEFAULT_MAX_RANKS, METRICS_PORT, pod_name
from .conditions import Reason, set_condition
from .job_objects import build_network_policy, build_service, build_token_secret
from .kube import ApiUnavailable, Conflict, Kube, RejectedObject
from .observed import earlier_job_leftovers, foreign_pods_message, format_time
from .podcache import PodCache, digest
from .reconcile import plan
from .round_state import Plan

log = logging.getLogger("ringleader.reconciler")
LEFTOVERS_RETRY_SECONDS = 2.0  # the garbage collector removes a deleted job's pods within seconds
NUDGE_SECONDS = 0.2  # after room is freed, waiting jobs look again this soon
POD_EVENTS_SECONDS = 0.5  # a job's pod events within this window share one round
# How often the resync reads a job's pods and Service from the API server rather than the cache. Each such
# read lists the job's pods; with hundreds of jobs, every 30 s was a steady load for nothing in the common case.
FRESH_SECONDS = 300.0
SCRAPE_FAILURES_REPORTED = 3  # progress scrapes failed in a row before an event says why

EventSink = Callable[[dict[str, Any], str, str, str], None]


def utcnow() -> str:
    return format_time(datetime.now(UTC))


def status_json(status: TrainingJobStatus) -> dict[str, Any]:
    """Status as a reconcile round writes it: everything but `progress`, which only the scraper writes, so
    neither can overwrite the other's newer value with a stale copy (merge patches leave absent keys alone)."""
    return status.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"progress"})


def _invalid_spec(status: TrainingJobStatus, generation: int, message: str) -> dict[str, Any]:
    """`status` turned Failed with reason InvalidSpec, as the JSON a reconcile round writes."""
    failed = status.model_copy(deep=True)
    failed.conditions = set_condition(
        failed.conditions, ConditionType.FAILED, True, Reason.INVALID_SPEC, message, utcnow(), generation
    )
    failed.phase = JobPhase.FAILED
    return status_json(failed)


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    again: bool = False
    fresh: bool = False  # the next round reads pods from the API server, not the cache


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        emit: EventSink,
        cache: PodCache | None = None,
        clusterwide: bool = False,
        max_ranks: int = DEFAULT_MAX_RANKS,
        operator_pods: tuple[str, dict[str, str]] | None = None,
    ) -> None:
        """`cache`: pods as kopf's watch sees them (without one, every round lists them); `clusterwide`: the
        cache holds every pod of the cluster, so gang admission weighs it instead of listing all pods;
        `max_ranks`: the most pods one job may have (more fails it as an invalid spec); `operator_pods`: (the
        operator's namespace, its pods' labels) to give every job a NetworkPolicy admitting only its own pods
        and, to the metrics port, the operator's (None: no policies)."""
        self.kube = kube
        self.max_ranks = max_ranks
        self.operator_pods = operator_pods
        self.cache = cache
        self.clusterwide = clusterwide
        self.emit = emit
        self.slots: dict[tuple[str, str], _Slot] = {}
        self.phases: dict[tuple[str, str], str] = {}
        self.session: aiohttp.ClientSession | None = None
        self.wakeups: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.admission_lock = asyncio.Lock()
        self.waiting: dict[tuple[str, str], str] = {}  # jobs whose pods wait for room -> their creation time
        # Jobs whose Service exists (read or created by a round) -> the job's uid; later rounds skip reading it.
        self.services: dict[tuple[str, str], str] = {}
        self.fresh_reads: dict[tuple[str, str], float] = {}  # job -> when a round last read it fresh
        # job -> the pods carrying its labels that are not its ranks, as last reported in an event
        self.foreign: dict[tuple[str, str], tuple[str, ...]] = {}
        self.scrape_failures: dict[tuple[str, str], int] = {}  # job -> progress scrapes failed in a row

    def _record_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Keep the jobs-by-phase gauge in step with what the last rounds saw."""
        if phase is None:
            self.phases.pop(key, None)
        else:
            self.phases[key] = phase or "Pending"
        for name in {*self.phases.values(), *metrics.KNOWN_PHASES}:
            metrics.JOBS.labels(phase=name).set(sum(p == name for p in self.phases.values()))

    async def trigger(self, namespace: str, name: str, fresh: bool = False) -> None:
        """Reconcile the job now, or once more after the round that is running. `fresh`: read its pods from the
        API server rather than the cache (the periodic resync does, to heal what a watch gap left behind)."""
        slot = self.slots.setdefault((namespace, name), _Slot())
        slot.fresh = slot.fresh or fresh
        if slot.lock.locked():
            slot.again = True
            return
        async with slot.lock:
            while True:
                slot.again = False
                fresh, slot.fresh = slot.fresh, False
                try:
                    await self.round(namespace, name, fresh)
                except Conflict as e:
                    log.debug("[%s/%s] %s; reconciling again", namespace, name, e)
                    slot.again = True
                if not slot.again:
                    break
        if not slot.again:
            self.slots.pop((namespace, name), None)

    async def round(self, namespace: str, name: str, fresh: bool) -> None:
        started = time.monotonic()
        try:
            await self._round(namespace, name, fresh)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    def wake_after(self, namespace: str, name: str, seconds: float) -> None:
        """Reconcile the job in `seconds`, or sooner: one pending wake-up per job, the sooner one stays. A
        round plans from everything it reads, so every wake-up asked for meanwhile is served by it, and a
        round sooner than asked for costs at most one more request for the job."""
        key = (namespace, name)
        loop = asyncio.get_running_loop()
        if (pending := self.wakeups.get(key)) is not None:
            if pending.when() <= loop.time() + seconds:
                return
            self.wakeups.pop(key).cancel()

        def fire() -> None:
            self.wakeups.pop(key, None)
            task = asyncio.ensure_future(self._woken(namespace, name))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        self.wakeups[key] = loop.call_later(max(0.0, seconds), fire)

    async def _woken(self, namespace: str, name: str) -> None:
        try:
            await self.trigger(namespace, name)
        except ApiUnavailable as e:  # the periodic resync tries again
            log.warning("[%s/%s] %s", namespace, name, e)
        except Exception:  # no handler of kopf's reports it for us; the resync tries again
            log.exception("[%s/%s] reconcile round failed", namespace, name)

    def fresh_due(self, namespace: str, name: str) -> bool:
        """Whether the job's next resync round should read its pods and Service from the API server (at most
        every FRESH_SECONDS), not from what this process has cached."""
        last = self.fresh_reads.get((namespace, name))
        return last is None or time.monotonic() - last >= FRESH_SECONDS

    def _forget(self, key: tuple[str, str]) -> None:
        """The job is gone (or going): drop what this process remembers of it."""
        self._record_phase(key, None)
        self.waiting.pop(key, None)
        self.services.pop(key, None)
        self.fresh_reads.pop(key, None)
        self.foreign.pop(key, None)
        self.scrape_failures.pop(key, None)

    def _cached(self) -> PodCache | None:
        """The pod cache once kopf has filled it, else None (read from the API server)."""
        return self.cache if self.cache is not None and self.cache.ready else None

    async def _pods(self, namespace: str, name: str, fresh: bool) -> list[dict[str, Any]]:
        if (cache := self._cached()) is not None and not fresh:
            return cache.job_pods(namespace, name, time.monotonic())
        return [digest(p) for p in await self.kube.list_pods(namespace, name)]

    async def _cluster(self) -> admission.Cluster:
        if (cache := self._cached()) is not None and self.clusterwide:
            return admission.Cluster(await self.kube.nodes(), cache.all_pods(time.monotonic()))
        cluster = await self.kube.cluster()
        return admission.Cluster(cluster.nodes, [digest(p) for p in cluster.pods])

    async def _round(self, namespace: str, name: str, fresh: bool) -> None:
        key = (namespace, name)
        obj = await self.kube.get_job(namespace, name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._forget(key)
            return  # deleted: garbage collection removes what it owned
        try:
            job = TrainingJob.model_validate(obj)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = f"{where}: {first['msg']}"
            # The spec cannot even be parsed; keep what of the old status still parses.
            try:
                old = TrainingJobStatus.model_validate(obj.get("status") or {})
            except ValidationError:
                old = TrainingJobStatus()
            generation = int((obj.get("metadata") or {}).get("generation", 0))
            await self.kube.patch_status(namespace, name, _invalid_spec(old, generation, message))
            self.emit(obj, "Warning", Reason.INVALID_SPEC, message)
            return
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        pods = await self._pods(namespace, name, fresh)
        service = None
        if fresh or self.services.get(key) != uid:
            self.services.pop(key, None)
            service = await self.kube.read_service(namespace, name)
        if fresh:  # recorded once both reads succeeded: a failed one leaves the fresh read due
            self.fresh_reads[key] = time.monotonic()
        leftovers = earlier_job_leftovers(uid, [*pods, *([service] if service else [])])
        if leftovers:
            log.info(
                "[%s/%s] waiting for an earlier job of this name to be cleaned up: %s",
                namespace,
                name,
                ", ".join(leftovers),
            )
            self.wake_after(namespace, name, LEFTOVERS_RETRY_SECONDS)
            return
        if service is not None:
            self.services[key] = uid  # this job's own (not a leftover): later rounds need not read it
        service_exists = self.services.get(key) == uid
        if any(admission.gated(x) for x in pods):
            # One admission at a time across all jobs: each decides on room the previous ones have already
            # claimed (their released pods count as placed), so two jobs never both take the same room.
            async with self.admission_lock:
                await self._decide(job, obj, pods, service_exists, await self._cluster())
        else:
            await self._decide(job, obj, pods, service_exists, None)

    async def _decide(
        self,
        job: TrainingJob,
        obj: dict[str, Any],
        pods: list[dict[str, Any]],
        service_exists: bool,
        cluster: admission.Cluster | None,
    ) -> None:
        namespace, name = job.namespace, job.name
        p = plan(job, pods, service_exists, utcnow(), cluster, self.max_ranks)
        self._note_waiting(job, p.waiting_for_room)
        if p.delete_job:
            log.info("[%s/%s] ttlSecondsAfterFinished has run out: deleting the job", namespace, name)
            await self.kube.delete_job(namespace, name, str(job.metadata.get("uid", "")))
            self._forget((namespace, name))
            return
        self._record_phase((namespace, name), p.status.phase)
        await self._write_status(job, obj, p)
        self._report(job, obj, p)
        if p.create_service:
            await self._create_job_objects(job)
        if p.requeue_after is not None:
            self.wake_after(namespace, name, p.requeue_after)
        await self._apply_pods(job, obj, p)

    async def _write_status(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """Write the planned status if it changed, conditional on the resourceVersion the round read."""
        new_status = status_json(p.status)
        gone = set(job.status.ranks) - set(p.status.ranks)
        if gone:  # a merge patch keeps keys it does not name: ranks the job no longer has are removed by null
            new_status.setdefault("ranks", {}).update(dict.fromkeys(gone))
        if new_status != status_json(job.status):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            await self.kube.patch_status(job.namespace, job.name, new_status, resource_version=version)

    def _report(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """The plan's events, the foreign-pods warning (once per set of pods, not every round), the restarts."""
        key = (job.namespace, job.name)
        for kind, reason, message in p.events:
            self.emit(obj, kind, reason, message)
        if tuple(p.foreign_pods) != self.foreign.get(key, ()):
            self.foreign[key] = tuple(p.foreign_pods)
            if p.foreign_pods:
                self.emit(obj, "Warning", Reason.FOREIGN_PODS, foreign_pods_message(p.foreign_pods))
        metrics.RESTARTS.inc(
            sum(r.restarts for r in p.status.replica_statuses.values())
            - sum(r.restarts for r in job.status.replica_statuses.values())
        )

    async def _create_job_objects(self, job: TrainingJob) -> None:
        """The token Secret, the NetworkPolicy (when configured) and then the Service: a job whose Service
        exists has the other two."""
        await self.kube.create_if_absent(build_token_secret(job, secrets.token_hex(32)))
        if self.operator_pods is not None:
            await self.kube.create_if_absent(build_network_policy(job, *self.operator_pods))
        await self.kube.create_if_absent(build_service(job))
        self.services[(job.namespace, job.name)] = str(job.metadata.get("uid", ""))

    async def _apply_pods(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """Deletions, forced removals, gate releases, then creations (a refused pod fails the job)."""
        namespace, name = job.namespace, job.name
        if p.delete_pods:
            await self.kube.delete_pods(namespace, p.delete_pods)
        if p.force_delete_pods:
            log.warning(
                "[%s/%s] removing pods stuck on a lost node: %s", namespace, name, ", ".join(p.force_delete_pods)
            )
            await self.kube.delete_pods(namespace, p.force_delete_pods, grace_seconds=0)
        if p.ungate_pods:
            await self.kube.ungate_pods(namespace, p.ungate_pods)
            log.info("[%s/%s] gang admitted: %s released to the scheduler", namespace, name, ", ".join(p.ungate_pods))
        if not p.create_pods:
            return
        try:
            if p.pod_group is not None:
                await self.kube.create_pod_group(p.pod_group)
            created = await self.kube.create_pods(p.create_pods)
        except RejectedObject as e:
            await self._reject(job, obj, str(e))
            return
        metrics.PODS_CREATED.inc(created)
        if created:
            log.info("[%s/%s] created %d pods", namespace, name, created)
        if any(admission.gated(x) for x in p.create_pods):
            # The round that can release them needs no pod event: the cache already holds our creates.
            self.wake_after(namespace, name, 0.0)

    def _note_waiting(self, job: TrainingJob, waiting: bool) -> None:
        key = (job.namespace, job.name)
        if waiting:
            self.waiting[key] = str(job.metadata.get("creationTimestamp", ""))
        else:
            self.waiting.pop(key, None)

    def room_freed(self) -> None:
        """Room may have been freed: give every job waiting for admission a round now, oldest first (they
        queue for the admission lock in this order)."""
        for i, key in enumerate(sorted(self.waiting, key=lambda k: (self.waiting[k], k))):
            self.wake_after(*key, NUDGE_SECONDS + i * 0.01)

    async def scrape_progress(self, obj: Mapping[str, Any]) -> None:
        """Copy worker 0's step, loss and throughput into status.progress (called while the job `obj` runs).
        A page that cannot be read is counted; after SCRAPE_FAILURES_REPORTED failures in a row, one Warning
        event says why, until a scrape succeeds again."""
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        last = (obj.get("status") or {}).get("progress")
        ip = await self._pod_ip(namespace, name)
        if not ip:
            return
        if self.session is None:
            self.session = progress.session()
        key = (namespace, name)
        try:
            now = await progress.scrape(self.session, ip, METRICS_PORT, utcnow())
        except progress.ScrapeError as e:
            metrics.SCRAPE_FAILURES.inc()
            self.scrape_failures[key] = failures = self.scrape_failures.get(key, 0) + 1
            log.debug("[%s/%s] no progress: %s", namespace, name, e)
            if failures == SCRAPE_FAILURES_REPORTED:
                self.emit(dict(obj), "Warning", Reason.PROGRESS_UNAVAILABLE, f"worker 0's metrics page: {e}")
            return
        self.scrape_failures.pop(key, None)
        old = Progress.model_validate(last) if last else None
        if now is None or (
            old is not None
            and (old.step, old.loss, old.samples_per_second) == (now.step, now.loss, now.samples_per_second)
        ):
            return
        await self.kube.patch_status(namespace, name, {"progress": now.model_dump(by_alias=True, mode="json")})

    async def _pod_ip(self, namespace: str, job: str) -> str | None:
        """Worker 0's address, from the cache when there is one."""
        worker0 = pod_name(job, Role.WORKER, 0)
        if (cache := self._cached()) is None:
            return await self.kube.pod_ip(namespace, worker0)
        pod = next((p for p in cache.job_pods(namespace, job, time.monotonic())
                    if p["metadata"].get("name") == worker0), None)  # fmt: skip
        ip = ((pod or {}).get("status") or {}).get("podIP")
        return str(ip) if ip else None

    async def close(self) -> None:
        for handle in self.wakeups.values():
            handle.cancel()
        if self.session is not None:
            await self.session.close()
        await self.kube.api.close()

    async def _reject(self, job: TrainingJob, obj: dict[str, Any], message: str) -> None:
        """The API server refused a pod built from the spec: fail the job, and leave no half-created pods."""
        generation = int(job.metadata.get("generation", 0))
        await self.kube.patch_status(job.namespace, job.name, _invalid_spec(job.status, generation, message))
        pods = await self.kube.list_pods(job.namespace, job.name)
        await self.kube.delete_pods(job.namespace, [p["metadata"]["name"] for p in pods])
        self.emit(obj, "Warning", Reason.INVALID_SPEC, message)
