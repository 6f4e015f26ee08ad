"""Reconcile rounds for every job: read what exists (round_reader.py), plan (pure: reconcile.py), write what
changed (plan_writer.py); gang admission across jobs in turn (cluster_admission.py).

Rounds for the same job never overlap: triggers that arrive during a round (the timer, spec updates) collapse
into one more round after it (`workqueue.WorkQueue`). Pod events that only say a pod was bound or started do
not start a round each: a job's such events within POD_EVENTS_SECONDS share one (pods of a large job change
phase one after another, and each round costs reads and a status write). A pod that ends or is being deleted
gets a round at once.

The status write is conditional on the job's resourceVersion as read at the start of the round, so a round
that decided on an outdated reading (another writer, a second operator replica during a leader hand-over)
writes nothing and runs again. A rank waiting out its restart back-off gets a round when the wait ends; the
periodic resync (every FRESH_SECONDS a fresh read of the job, its pods and Service) covers an operator restart
in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from ringleader_api import (
    LABEL_JOB,
    JobPhase,
    TrainingJob,
)  # fmt: skip

from . import admission, metrics
from .builders import DEFAULT_MAX_RANKS
from .cluster_admission import ClusterAdmission
from .jobmemory import POD_EVENTS_SECONDS, JobMemory, Jobs, Key
from .kube_errors import ApiUnavailable, Conflict
from .kubeapi import EventSink, KubeApi
from .observed import managed_elsewhere, utcnow
from .plan_writer import PlanWriter, export_goodput
from .podcache import PodCache
from .policies import elastic
from .reconcile import plan
from .round_reader import RoundReader
from .round_state import Plan
from .scrape_schedule import ScrapeSchedule
from .scraper import ProgressScraper
from .workqueue import WorkQueue

log = logging.getLogger("ringleader.reconciler")
LEFTOVERS_RETRY_SECONDS = 2.0  # the garbage collector removes a deleted job's pods within seconds
NUDGE_SECONDS = 0.2  # after room is freed, waiting jobs look again this soon
# How often the resync reads a job's pods and Service from the API server rather than the cache. Each such
# read lists the job's pods; with hundreds of jobs, every 30 s was a steady load for nothing in the common case.
FRESH_SECONDS = 300.0
RETRY_SECONDS = 5.0  # a round that could not reach the API server runs again this much later
# Rounds in progress at once, all jobs together. Each holds its job, pods and plan and the requests it has in
# flight; a burst of 500 new jobs had 500 at once, for no more throughput (decisions take turns under the
# admission lock and requests share one client budget).
ROUNDS_AT_ONCE = 32


class Reconciler:
    """Rounds for every job, through one work queue: read (the job from the API server, its pods from the
    cache), plan (pure), write what changed. Also the progress scraper's owner: both share one memory record
    per job."""

    def __init__(
        self,
        kube: KubeApi,
        emit: EventSink,
        cache: PodCache | None = None,
        clusterwide: bool = False,
        max_ranks: int = DEFAULT_MAX_RANKS,
        operator_pods: tuple[str, dict[str, str]] | None = None,
        ledger: admission.Ledger | None = None,
        pods_listed: asyncio.Event | None = None,
    ) -> None:
        """`cache`: pods as the pod watch sees them (without one, every round lists them); `clusterwide`: the
        cache holds every pod of the cluster, so gang admission weighs it instead of listing all pods;
        `max_ranks`: the most pods one job may have (more fails it as an invalid spec); `operator_pods`: (the
        operator's namespace, its pods' labels) to give every job a NetworkPolicy admitting only its own pods
        and, to the metrics port, the operator's (None: no policies); `ledger`: the room the pod watch's pods take
        (gang admission reads it once the watch has listed them); `pods_listed`: set by the pod watch once it has
        (rounds at start wait for it; None: none waits)."""
        self.kube = kube
        self.cache = cache
        self.emit = emit
        self.jobs = Jobs()
        self.phases = metrics.PhaseGauge()
        self.queue: WorkQueue[Key] = WorkQueue(self._process, self._timer_failed, ROUNDS_AT_ONCE)
        self.admission = ClusterAdmission(kube, cache, ledger, clusterwide)
        self.reader = RoundReader(kube, self.jobs, cache, max_ranks, pods_listed)
        scraper = ProgressScraper(
            kube, emit, self.jobs.get, lambda namespace, job: self.reader.pods(namespace, job, False), self._wake_now,
            self.reader.first_worker,
        )  # fmt: skip
        self.scrapes = ScrapeSchedule(scraper, self.jobs.get)
        self.writer = PlanWriter(kube, emit, self.jobs, operator_pods, self.wake_after)

    def memory(self, key: Key) -> JobMemory:
        return self.jobs.memory(key)

    # ---- the queue's side ---------------------------------------------------------------------------
    async def trigger(self, namespace: str, name: str, fresh: bool = False) -> None:
        """Reconcile the job now, or once more after the round that is running. `fresh`: read its pods from the
        API server rather than the cache (the periodic resync does, to heal what a watch gap left behind)."""
        await self.queue.run((namespace, name), fresh)

    def wake_after(self, namespace: str, name: str, seconds: float) -> None:
        """Reconcile the job in `seconds`, or sooner (one pending wake-up per job, the sooner one stays)."""
        self.queue.add_after((namespace, name), seconds)

    def _wake_now(self, key: Key) -> None:
        self.queue.add_after(key, 0.0)

    def job_seen(self, obj: Mapping[str, Any]) -> bool:
        """A watch event brought the job `obj` (not a deletion): keep it for rounds to read, and say whether it
        needs a round: the first sight of it in this process, or a new generation of its spec. A change of its
        status alone (this operator's own writes, the progress scraper's) needs none."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        record = self.memory(key)
        kept = (record.body or {}).get("metadata") or {}
        if record.body is not None and kept.get("uid") != meta.get("uid"):
            record.generation = None  # a new job of the same name (its predecessor's deletion went unseen)
        record.saw(obj)
        self.scrapes.job_seen(key, record.body or obj)  # the newer of the two
        generation = int(meta.get("generation") or 0)
        if record.generation is not None and generation <= record.generation:
            return False
        record.generation = generation
        return True

    def pod_seen(self, kind: str, pod: Mapping[str, Any]) -> None:
        """The pod watch (podwatch.py) saw `pod` (a digest) added, modified or deleted. A pod that ends or is
        being deleted gets its job a round at once: the round must see it while it still exists to tell why it
        went (an eviction, a lost node, an exit code). Other changes (pods being bound, starting) are grouped: a
        job's events within its window (POD_EVENTS_SECONDS, longer for a large job) share one round. Only jobs
        this replica's job watch has shown it get rounds."""
        meta = pod.get("metadata") or {}
        ended = kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if ended:
            self.room_freed()  # jobs waiting for gang admission look again
        if kind == "DELETED" and self.cache is not None:
            self.cache.deleted(pod, time.monotonic())  # how it ended, for the round it wakes
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        key = (str(meta.get("namespace", "")), str(job or ""))
        if not job or key not in self.jobs:
            return
        if ended or meta.get("deletionTimestamp"):
            self._wake_now(key)
        else:
            self.wake_after(*key, self.pod_events_window(*key))

    def job_gone(self, namespace: str, name: str) -> None:
        """A watch event says the job was deleted."""
        self._forget((namespace, name))

    async def _process(self, key: Key, fresh: bool) -> bool:
        """One round; True to run again at once (its status write met a newer version of the job, which that
        round then reads from the API server)."""
        try:
            await self.round(*key, fresh)
        except Conflict as e:
            log.debug("[%s/%s] %s; reconciling again", *key, e)
            if (record := self.jobs.get(key)) is not None:
                record.body = None
            return True
        return False

    def _timer_failed(self, key: Key, e: Exception) -> None:
        """A round started by a wake-up failed (no caller to raise it to)."""
        if isinstance(e, ApiUnavailable):
            self.retry(key, e)
        else:  # no handler of kopf's reports it for us; the resync tries again
            log.error("[%s/%s] reconcile round failed", *key, exc_info=e)

    def retry(self, key: Key, e: ApiUnavailable) -> None:
        """A round could not reach the API server: it runs again in RETRY_SECONDS."""
        log.warning("[%s/%s] %s; trying again in %.0f s", *key, e, RETRY_SECONDS)
        self.wake_after(*key, RETRY_SECONDS)

    async def round(self, namespace: str, name: str, fresh: bool) -> None:
        started = time.monotonic()
        try:
            await self._round(namespace, name, fresh)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    def pod_events_window(self, namespace: str, name: str) -> float:
        """How long the job's pod events (bound, started) wait to share one round: POD_EVENTS_SECONDS, longer for
        a job whose rounds take long (jobmemory.PLAN_SHARE)."""
        record = self.jobs.get((namespace, name))
        return record.events_window() if record is not None else POD_EVENTS_SECONDS

    def fresh_due(self, namespace: str, name: str) -> bool:
        """Whether the job's next resync round should read it, its pods and Service from the API server (every
        FRESH_SECONDS after this process first saw the job or last read them so), not from what it has kept."""
        return time.monotonic() - self.memory((namespace, name)).fresh_read_at >= FRESH_SECONDS

    def _record_phase(self, key: Key, phase: str | None) -> None:
        """Keep the jobs-by-phase gauge in step with what the last rounds saw (None: the job is gone). Counts
        move by the one job's change: a round costs the same with ten jobs or ten thousand."""
        record = self.memory(key) if phase is not None else self.jobs.get(key)
        before = record.phase if record is not None else None
        after = None if phase is None else (phase or JobPhase.PENDING)
        if before == after:
            return
        if record is not None and after is not None:
            record.phase = after
        self.phases.move(before, after)

    def _forget(self, key: Key) -> None:
        """The job is gone (or going): drop what this process remembers of it, and its metrics' series."""
        self.scrapes.forget(key)
        self._record_phase(key, None)
        self.admission.forget(key)
        if self.jobs.pop(key, None) is not None:
            export_goodput(*key, None)

    async def _round(self, namespace: str, name: str, fresh: bool) -> None:
        """Read, decide, apply."""
        key, started = (namespace, name), time.perf_counter()
        obj = await self.reader.job(key, fresh)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._forget(key)
            return  # deleted: garbage collection removes what it owned
        if managed_elsewhere(obj):
            self._forget(key)
            return  # spec.managedBy names another controller (MultiKueue): its pods and status are not ours
        job = await self._parse(key, obj)
        if job is None:
            return
        now = utcnow()
        reading = await self.reader.read(job, fresh, now)
        if reading is None:  # an earlier job's leftovers: the garbage collector removes them within seconds
            self.wake_after(namespace, name, LEFTOVERS_RETRY_SECONDS)
            return
        record = self.memory(key)
        read_seconds = time.perf_counter() - started  # synchronous but for reads that went to the API server

        def decide(cluster: admission.Cluster | None) -> Plan:
            with record.timing_plan(read_seconds):
                return plan(reading, now, cluster)

        # A job running smaller than it asks for (policies/elastic.py) weighs the cluster in each round, to grow.
        growing = reading.sizes_world and elastic.below_replicas(job)
        p = None if growing else decide(None)
        if p is None or record.any_gated(reading.pods) or any(admission.gated(x) for x in p.create_pods):
            # Gang admission: the round decides again with the cluster in view (a plan is pure: planning again
            # costs no request), in turn with every other job's (cluster_admission.py).
            p = await self.admission.decide(key, reading.pods, decide)
        await self._apply(job, obj, p)
        if (kept := self.jobs.get(key)) is not None:  # the job may have gone meanwhile
            kept.handled(reading.stalled, reading.slow)

    async def _parse(self, key: Key, obj: dict[str, Any]) -> TrainingJob | None:
        """The job as the models read it (JobMemory.parse); None (and the job failed with InvalidSpec) when they
        cannot."""
        try:
            return self.memory(key).parse(obj)
        except ValidationError as e:
            await self.writer.unparsable(obj, e)
            return None

    async def _apply(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """Carry out a round's plan: status, events, the job's objects, pods."""
        namespace, name = job.namespace, job.name
        self._note_waiting(job, p.waiting_for_room)
        if p.delete_job:
            log.info("[%s/%s] ttlSecondsAfterFinished has run out: deleting the job", namespace, name)
            await self.kube.delete_job(namespace, name, str(job.metadata.get("uid", "")))
            self._forget((namespace, name))
            return
        self._record_phase((namespace, name), p.status.phase)
        if p.requeue_after is not None:
            self.wake_after(namespace, name, p.requeue_after)
        await self.writer.apply(job, obj, p)

    def _note_waiting(self, job: TrainingJob, waiting: bool) -> None:
        self.memory((job.namespace, job.name)).waiting_since = (
            str(job.metadata.get("creationTimestamp", "")) if waiting else None
        )

    def node_seen(self, name: str, node: Mapping[str, Any] | None) -> bool:
        """A watch event brought a Node's digest (None: deleted); True when jobs waiting for room look again."""
        return self.admission.node_seen(name, node)

    def room_freed(self) -> None:
        """Room may have been freed: give every job waiting for admission a round now, oldest first (they
        queue for the admission lock in this order)."""
        waiting = sorted((m.waiting_since, k) for k, m in self.jobs.items() if m.waiting_since is not None)
        for i, (_, key) in enumerate(waiting):
            self.wake_after(*key, NUDGE_SECONDS + i * 0.01)

    async def close(self) -> None:
        self.queue.close()
        await self.scrapes.aclose()
        await self.kube.close()
