"""Apply one reconcile round for a job: read what exists, plan (pure), write what changed.

Rounds for the same job never overlap: triggers that arrive during a round (the timer, spec updates) collapse
into one more round after it (`workqueue.WorkQueue`). Pod events that only say a pod was bound or started do
not start a round each: a job's such events within POD_EVENTS_SECONDS share one (pods of a large job change
phase one after another, and each round costs reads and a status write). A pod that ends or is being deleted
gets a round at once.

Reads: the job as this process last saw it (its watch events and the answers to its own status writes, see
`job_seen`), from the API server only when it has none or a write met a newer version; its pods from kopf's
index; whether its Service exists from what this process last read or created. The periodic resync reads the
job, its pods and Service from the API server every FRESH_SECONDS, so what a watch gap leaves behind lasts
that long at most.

Order of writes: status first (it records restart counts before a failed pod is deleted), then the
Service, deletions and creations. The status write is conditional on the job's resourceVersion as read at
the start of the round, so a round that decided on an outdated reading (another writer, a second operator
replica during a leader hand-over) writes nothing and runs again. A rank waiting out its restart back-off
gets a round when the wait ends; the periodic resync covers an operator restart in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from ringleader_api import (
    LABEL_JOB,
    MANAGED_BY_RINGLEADER,
    ConditionType,
    Goodput,
    JobPhase,
    Reason,
    TrainingJob,
    TrainingJobStatus,
)  # fmt: skip

from . import admission, kueue, metrics, workload_api
from .builders import DEFAULT_MAX_RANKS, InvalidTemplate, delete_grace_seconds, validate
from .claims import Claims
from .conditions import set_condition
from .job_objects import build_network_policy, build_service, build_token_secret
from .jobmemory import JobMemory, Key
from .kube import ApiUnavailable, Conflict, RejectedObject
from .kubeapi import EventSink, KubeApi
from .observed import earlier_job_leftovers, foreign_pods_message, utcnow
from .podcache import PodCache, digest
from .policies import elastic
from .policies.stall import STALLED_POD_GRACE_SECONDS
from .reconcile import plan
from .round_state import Plan
from .scraper import ProgressScraper, loss_pending, scrape_interval, watches_progress
from .stalls import Stall, Unavailable
from .stragglers import Stragglers
from .workloads import Workloads
from .workqueue import WorkQueue

log = logging.getLogger("ringleader.reconciler")
LEFTOVERS_RETRY_SECONDS = 2.0  # the garbage collector removes a deleted job's pods within seconds
NUDGE_SECONDS = 0.2  # after room is freed, waiting jobs look again this soon
POD_EVENTS_SECONDS = 0.5  # a job's pod events within this window share one round (at least; see below)
# A round reads and plans over a job's pods, so a large job's round costs more (a 10,000-rank job's about 0.03 s
# here, and more to encode a changed status): its pod events share a window of PLAN_SHARE times its last round's
# reading, plan and status encoding (at most MAX_EVENTS_SECONDS; the encoding counts too: about a fifth of a round's
# time in a 5,000-rank start), so the rounds that bound and started pods bring cost the operator at most about
# 1/PLAN_SHARE of a core per job, whatever its size, and each round takes in more events the larger the job: per
# event, a start costs about the same at 1,000 ranks as at 10,000. At 10 (a tenth of a core), a 10,000-rank start's
# rounds ran at the 0.5 s floor for as long as the cluster took to run its pods, and the operator's CPU per pod grew
# with the job; at 40 its counts in status lag by about 1.2 to 2 s at 10,000 ranks, and the window stays at
# POD_EVENTS_SECONDS below about 2,000 (rounds under 12.5 ms). A pod that ends or goes gets a round at once.
PLAN_SHARE = 40.0
MAX_EVENTS_SECONDS = 5.0
# How often the resync reads a job's pods and Service from the API server rather than the cache. Each such
# read lists the job's pods; with hundreds of jobs, every 30 s was a steady load for nothing in the common case.
FRESH_SECONDS = 300.0
RETRY_SECONDS = 5.0  # a round that could not reach the API server runs again this much later
# How long rounds wait, at the operator's start, for the pod watch's first list before they read their jobs'
# pods from the API server instead (once: after that, none waits): a thousand jobs' first rounds would otherwise
# be a thousand lists.
PODS_LISTED_SECONDS = 60.0
# Rounds in progress at once, all jobs together. Each holds its job, pods and plan and the requests it has in
# flight; a burst of 500 new jobs had 500 at once, for no more throughput (decisions take turns under the
# admission lock and requests share one client budget).
ROUNDS_AT_ONCE = 32
# Progress scrapes in flight at once (each bounded by progress.SCRAPE_TIMEOUT): a thousand running jobs' scrapes
# fall due about 200 a second.
SCRAPES_AT_ONCE = 64
RUNNING_PHASES = (JobPhase.RUNNING, JobPhase.RESTARTING)


def released(p: Plan, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods a round's plan hands to the scheduler, as they will look: those it creates without the gang gate,
    and those it lifts the gate from (digests)."""
    out = [digest(x) for x in p.create_pods if not admission.gated(x)]
    for pod in pods:
        if (name := (pod.get("metadata") or {}).get("name")) in p.ungate_pods:
            ungated = {**pod, "spec": dict(pod.get("spec") or {})}
            admission.lift_gate(ungated)
            if name in p.pin_pods:
                ungated["spec"]["nodeSelector"] = {**(ungated["spec"].get("nodeSelector") or {}), **p.pin_pods[name]}
            out.append(ungated)
    return out


def _export_goodput(namespace: str, name: str, goodput: Goodput | None) -> None:
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


def status_json(status: TrainingJobStatus, with_progress: bool = False) -> dict[str, Any]:
    """Status as a reconcile round writes it: everything but `progress`, which the scraper writes while the job
    runs, so neither can overwrite the other's newer value with a stale copy (merge patches leave absent keys
    alone); `with_progress` for the round that finishes the job (its final step, which no scrape can see)."""
    return status.model_dump(
        by_alias=True, mode="json", exclude_none=True, exclude=None if with_progress else {"progress"}
    )


def ranks_patch(stored: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """status.ranks as a merge patch that turns the `stored` entries into `new` ones. A merge patch keeps what it
    does not name, and the entries leave out fields at their defaults (or none), so each stored field a kept entry
    leaves out is removed by null (the API server then puts back the CRD's default), and so is each entry that
    is gone (its ranks are grouped under another key now)."""
    patch: dict[str, Any] = dict(new)
    for key, old in stored.items():
        entry = new.get(key)
        if entry is None:
            patch[key] = None
        elif isinstance(old, Mapping) and isinstance(entry, Mapping):
            patch[key] = with_removals(old, entry)
    return patch


def with_removals(stored: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """`new` as a merge patch over `stored`: each key `stored` has and `new` leaves out removed by null."""
    return {**dict.fromkeys(stored.keys() - new.keys()), **new}


def dropped_keys(stored: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The top-level status keys the API server holds that the new status leaves out (a start time a suspended
    job clears, a field an older operator wrote), but not `progress`, the scraper's. Top level only: every field
    of it that the CRD defaults has a default in the model too, so it is never left out, while nested entries
    leave out what the API server fills in again (ranks_patch removes those by null, but they are no change)."""
    return [key for key in stored if key not in new and key != "progress"]


def managed_elsewhere(obj: Mapping[str, Any]) -> bool:
    """Whether the job's spec.managedBy names another controller (read from the raw object: such a job's spec is
    that controller's to check)."""
    managed_by = (obj.get("spec") or {}).get("managedBy")
    return managed_by not in (None, "", MANAGED_BY_RINGLEADER)


def _invalid_spec(status: TrainingJobStatus, generation: int, message: str) -> dict[str, Any]:
    """`status` turned Failed with reason InvalidSpec, as the JSON a reconcile round writes."""
    failed = status.model_copy(deep=True)
    failed.conditions = set_condition(
        failed.conditions, ConditionType.FAILED, True, Reason.INVALID_SPEC, message, utcnow(), generation
    )
    failed.phase = JobPhase.FAILED
    return status_json(failed)


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
    ) -> None:
        """`cache`: pods as the pod watch sees them (without one, every round lists them); `clusterwide`: the
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
        self.jobs: dict[Key, JobMemory] = {}
        self.phase_counts: Counter[str] = Counter()  # jobs by the phase their last round planned
        for name in metrics.KNOWN_PHASES:
            metrics.JOBS.labels(phase=name).set(0)
        self.queue: WorkQueue[Key] = WorkQueue(self._process, self._timer_failed, ROUNDS_AT_ONCE)
        self.admission_lock = asyncio.Lock()
        self.claims = Claims()
        self.nodes: Mapping[Any, Iterable[dict[str, Any]]] | None = None  # kopf's node index, once attached
        self.node_rooms: dict[str, admission.NodeRoom] = {}  # what each node offers, as its last event showed
        self.workloads = Workloads(kube)
        # Gangs through the cluster's Workload API instead of the operator's gate (decided at start: `use_backend`).
        self.workload_api = False
        self.scraper = ProgressScraper(
            kube, emit, self.jobs.get, lambda namespace, job: self._pods(namespace, job, False), self._wake_now,
            self._first_worker,
        )  # fmt: skip
        # every job's worker-0 pods (the pod watch's first_workers index), once it has listed them
        self.first_workers: Mapping[Any, Iterable[dict[str, Any]]] | None = None
        # what every pod the pod watch keeps takes of the nodes, once it has listed them (gang admission reads it)
        self.ledger: admission.Ledger | None = None
        # Each running job's next scrape: one timer per job on the event loop, no kopf timer (whose every tick
        # went through kopf's handler machinery, for every running job every 5 s).
        self.scrapes: WorkQueue[Key] = WorkQueue(self._scrape, self._scrape_failed, SCRAPES_AT_ONCE)
        self.running: set[Key] = set()  # jobs whose status says they run: their number paces the scrapes
        self.pods_listed: asyncio.Event | None = None  # set by the pod watch once its indexes hold every pod

    def memory(self, key: Key) -> JobMemory:
        return self.jobs.setdefault(key, JobMemory())

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
        if _running(record.body):
            self.running.add(key)
            # The sooner timer stays: one pending, or sooner while a replacement's cost waits for worker 0's page.
            self.scrapes.add_after(key, scrape_interval(0, True, loss_pending(obj)))
        else:
            self.running.discard(key)
            self.scrapes.cancel(key)
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
        a job whose rounds take long (see PLAN_SHARE)."""
        record = self.jobs.get((namespace, name))
        spent = record.round_seconds if record is not None else 0.0
        return min(MAX_EVENTS_SECONDS, max(POD_EVENTS_SECONDS, PLAN_SHARE * spent))

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
        for name, change in ((before, -1), (after, 1)):
            if name is not None:
                self.phase_counts[name] += change
                metrics.JOBS.labels(phase=name).set(self.phase_counts[name])

    def _forget(self, key: Key) -> None:
        """The job is gone (or going): drop what this process remembers of it, and its metrics' series."""
        self.scrapes.cancel(key)
        self.running.discard(key)
        self._record_phase(key, None)
        self.claims.release(key)
        if self.jobs.pop(key, None) is not None:
            _export_goodput(*key, None)

    # ---- reads ---------------------------------------------------------------------------------------
    def _cached(self) -> PodCache | None:
        """The pod cache once the pod watch has filled it, else None (read from the API server)."""
        return self.cache if self.cache is not None and self.cache.ready else None

    async def _first_worker(self, namespace: str, job: str) -> list[dict[str, Any]] | None:
        """The job's worker-0 pods from the pod watch's index of them; None before it has listed them."""
        if self.first_workers is None or self._cached() is None:
            return None
        return list(self.first_workers.get((namespace, job), ()))

    def _cached_pods(self, namespace: str, job: str) -> list[dict[str, Any]] | None:
        cache = self._cached()
        return None if cache is None else cache.job_pods(namespace, job, time.monotonic())

    async def _job(self, key: Key, fresh: bool) -> dict[str, Any] | None:
        """The job as last seen, or from the API server (fresh, none seen, or a write met a newer version)."""
        record = self.jobs.get(key)
        if not fresh and record is not None and record.body is not None:
            return record.body
        obj = await self.kube.get_job(*key)
        if obj is not None:
            self.memory(key).saw(obj)
        return obj

    async def _pods_listed(self) -> None:
        """At start: wait up to PODS_LISTED_SECONDS for the pod watch's first list. Once that has run out, no
        round waits again (the list may never come): they read pods from the API server until it does."""
        if self.pods_listed is None or self.pods_listed.is_set():
            return
        try:
            await asyncio.wait_for(self.pods_listed.wait(), PODS_LISTED_SECONDS)
        except TimeoutError:
            if self.pods_listed is not None:  # said once, by the first round to give up
                log.warning("the pod watch has not listed the pods after %.0f s: rounds read them from the API "
                            "server until it has", PODS_LISTED_SECONDS)  # fmt: skip
            self.pods_listed = None

    async def _pods(self, namespace: str, name: str, fresh: bool) -> list[dict[str, Any]]:
        if not fresh and (pods := self._cached_pods(namespace, name)) is not None:
            return pods
        return [digest(p) for p in await self.kube.list_pods(namespace, name)]

    async def _cluster(self, exclude: Key) -> admission.Cluster:
        """Every node and pod as admission weighs them: with the room other jobs' admissions claimed (`exclude`'s
        own claims left out)."""
        now = time.monotonic()
        if (cache := self._cached()) is not None and self.clusterwide and self.ledger is not None:
            if self.nodes is not None:
                nodes = [n for store in self.nodes.values() for n in store]
            else:
                nodes = await self.kube.nodes()
            # The ledger holds the watched pods; what this process wrote since, and other jobs' claims, go over it.
            index, written, ledger = cache.index, cache.newer_written(now), self.ledger
            assert index is not None
            claimed = self.claims.standing(lambda k: written.get(k) or index.pod(k), now, exclude)
            changes = {**written, **claimed}
            return admission.Cluster(nodes, rooms=lambda without: ledger.view(changes, without))
        cluster = await self.kube.cluster()
        return admission.Cluster(cluster.nodes, self.claims.overlay([digest(p) for p in cluster.pods], now, exclude))

    async def _round(self, namespace: str, name: str, fresh: bool) -> None:
        key, started = (namespace, name), time.perf_counter()
        obj = await self._job(key, fresh)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._forget(key)
            return  # deleted: garbage collection removes what it owned
        if managed_elsewhere(obj):
            self._forget(key)
            return  # spec.managedBy names another controller (MultiKueue): its pods and status are not ours
        job = await self._parse(obj)
        if job is None:
            return
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        await self._pods_listed()
        pods = await self._pods(namespace, name, fresh)
        service = None
        record = self.memory(key)
        if fresh or record.service_uid != uid:
            record.service_uid = None
            service = await self.kube.read_service(namespace, name)
        if fresh:  # recorded once both reads succeeded: a failed one leaves the fresh read due
            record.fresh_read_at = time.monotonic()
        clean = record.clean_uid == uid and not fresh  # found free of them before (a fresh round looks again)
        leftovers = [] if clean else earlier_job_leftovers(uid, [*pods, *([service] if service else [])])
        record.clean_uid = None if leftovers else uid
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
            record.service_uid = uid  # this job's own (not a leftover): later rounds need not read it
        service_exists = record.service_uid == uid
        now = utcnow()
        gone = cache.job_gone(namespace, name, time.monotonic()) if (cache := self._cached()) is not None else []
        stalled, slow = record.stall, record.stragglers
        queued = await self.workloads.sync(job, record, pods, now) if self._queued(job) else None
        gang = self._workload_gang(job, record)
        # A job running smaller than it asks for (policies/elastic.py) weighs the cluster in each round, to grow.
        growing = queued is None and gang is None and elastic.below_replicas(job)
        decide = functools.partial(
            plan, job, pods, service_exists, now, max_ranks=self.max_ranks, gone=gone, stalled=stalled, slow=slow,
            queued=queued, workload_gang=gang, seen=record.seen,
        )  # fmt: skip
        reading = time.perf_counter() - started  # synchronous but for reads that went to the API server
        if not growing:
            with record.timing_plan(reading):
                p = decide(cluster=None)
            if not _gated(record, pods) and not any(admission.gated(x) for x in p.create_pods):
                await self._apply(job, obj, p)
                self._handled(key, stalled, slow)
                return
        # Gang admission: the round decides with the cluster in view (a plan is pure: planning again costs no
        # request). One decision at a time across all jobs, each counting the room the previous ones claimed (their
        # released pods count as placed), so two jobs never both take the same room. The lock covers the decision
        # only: what it releases is claimed before the lock goes, and the writes follow outside it.
        async with self.admission_lock:
            cluster = await self._cluster(exclude=key)
            with record.timing_plan(reading):
                p = decide(cluster=cluster)
            self.claims.claim(key, released(p, pods), time.monotonic())
        await self._apply(job, obj, p)
        self._handled(key, stalled, slow)

    async def use_backend(self, backend: str) -> str:
        """Choose how gangs are admitted: "gates" (the operator's own), "workload-api" (kube-scheduler's gang
        scheduling through scheduling.k8s.io/v1alpha2; refused where the cluster does not serve it) or "auto" (the
        Workload API where it is served). Returns the one chosen."""
        served = backend != "gates" and await self.kube.serves(
            workload_api.GROUP, workload_api.VERSION, "workloads", "podgroups"
        )
        if backend == "workload-api" and not served:
            raise ValueError(
                f"--gang-backend workload-api: the cluster does not serve {workload_api.API_VERSION} Workloads and "
                "PodGroups (Kubernetes 1.36 with the GenericWorkload feature gate and that API enabled)"
            )
        self.workload_api = served
        return "workload-api" if served else "gates"

    def _workload_gang(self, job: TrainingJob, record: JobMemory) -> workload_api.Gang | None:
        """The job's gang under the Workload API: what kube-scheduler said of its current PodGroup (None: the
        operator's own gate admits gangs)."""
        if not self.workload_api:
            return None
        group = record.pod_group
        return workload_api.Gang(group[1] if group is not None and group[0] == workload_api.group_name(job) else None)

    def pod_group_seen(self, namespace: str, job: str, obj: Mapping[str, Any] | None) -> bool:
        """A watch event brought a PodGroup of the job (None: deleted); True when what kube-scheduler says of it
        changed (a round is due)."""
        record = self.memory((namespace, job))
        before = record.pod_group[1] if record.pod_group is not None else None
        said = workload_api.reading(obj)
        record.pod_group = None if obj is None else (str((obj.get("metadata") or {}).get("name", "")), said)
        return said != before

    def _queued(self, job: TrainingJob) -> bool:
        """Whether the job waits on Kueue: it names a queue and its spec can make pods (an invalid one fails in
        `plan`, with no Workload made for it)."""
        if kueue.queue_name(job) is None:
            return False
        try:
            validate(job, self.max_ranks)
        except InvalidTemplate:
            return False
        return True

    def workload_seen(self, namespace: str, job: str, obj: Mapping[str, Any] | None) -> bool:
        """A watch event brought the job's Kueue Workload (None: it was deleted); a round is due."""
        self.memory((namespace, job)).saw_workload(obj)
        return True

    async def _parse(self, obj: dict[str, Any]) -> TrainingJob | None:
        """The job as the models read it; None (and the job failed with InvalidSpec) when they cannot."""
        try:
            return TrainingJob.model_validate(obj)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = f"{where}: {first['msg']}"
            # The spec cannot even be parsed; keep what of the old status still parses.
            try:
                old = TrainingJobStatus.model_validate(obj.get("status") or {})
            except ValidationError:
                old = TrainingJobStatus()
            meta = obj.get("metadata") or {}
            generation = int(meta.get("generation", 0))
            await self.kube.patch_status(meta["namespace"], meta["name"], _invalid_spec(old, generation, message))
            self.emit(obj, "Warning", Reason.INVALID_SPEC, message)
            return None

    def _handled(self, key: Key, stalled: Stall | Unavailable | None, slow: Stragglers | None) -> None:
        """A round that carried out its plan has acted on the stall and the stragglers it was given (or dropped
        them as old): a newer finding the scraper left meanwhile stays for the next round."""
        if (record := self.jobs.get(key)) is None:
            return
        if stalled is not None and record.stall is stalled:
            record.stall = None
        if slow is not None and record.stragglers is slow:
            record.stragglers = None

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
        await self._write_status(job, obj, p)
        _export_goodput(namespace, name, p.status.goodput)
        self._report(job, obj, p)
        if p.create_service:
            await self._create_job_objects(job)
        if p.requeue_after is not None:
            self.wake_after(namespace, name, p.requeue_after)
        await self._apply_pods(job, obj, p)

    async def _write_status(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """Write the planned status if it changed, conditional on the resourceVersion the round read.

        A status the plan left as it was read (compared as models: their rank entries shared, so at the cost of the
        entries that differ) is not serialized at all while status.ranks is stored as this process last wrote or
        found it (ranks grouped as now: an older operator's per-rank keys are written again, grouped)."""
        record = self.jobs.get((job.namespace, job.name))
        stored_status = obj.get("status") or {}
        stored = stored_status.get("ranks") or {}
        unchanged = p.status == job.status and not p.writes_progress
        if unchanged and record is not None and record.ranks_stored is not None and record.ranks_stored == stored:
            return
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with record.timing_more() if record is not None else contextlib.nullcontext():
            new_status = status_json(p.status, with_progress=p.writes_progress)
            grouped = new_status.get("ranks", {})
            gone = stored.keys() - grouped.keys()
            dropped = dropped_keys(stored_status, new_status)
            changed = gone or dropped or new_status != _status_read(record, job, version, p.writes_progress)
        if changed:
            whole = dict(new_status)
            new_status["ranks"] = ranks_patch(stored, grouped)
            new_status |= dict.fromkeys(dropped)  # removed by null: a merge patch keeps what it does not name
            if isinstance(kept := stored_status.get("goodput"), Mapping) and "goodput" in new_status:
                new_status["goodput"] = with_removals(kept, new_status["goodput"])  # a settled pendingLoss
            written = await self.kube.patch_status(job.namespace, job.name, new_status, resource_version=version)
            if written is not None and record is not None:
                record.saw(written)  # the next round reads it, not the version its watch event replaces
                record.ranks_stored = ((written.get("status") or {}).get("ranks")) or {}
                written_version = str((written.get("metadata") or {}).get("resourceVersion"))
                # a status written with its progress is not what a round without it encodes: no memo of it
                record.status_written = None if p.writes_progress else (written_version, whole)
        elif record is not None and stored == grouped:
            record.ranks_stored = stored

    def _report(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
        """The plan's events, the foreign-pods warning (once per set of pods, not every round), the restarts."""
        key = (job.namespace, job.name)
        for kind, reason, message in p.events:
            self.emit(obj, kind, reason, message)
        record = self.memory(key)
        if tuple(p.foreign_pods) != record.foreign_pods:
            record.foreign_pods = tuple(p.foreign_pods)
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
        self.memory((job.namespace, job.name)).service_uid = str(job.metadata.get("uid", ""))

    async def _apply_pods(self, job: TrainingJob, obj: dict[str, Any], p: Plan) -> None:
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
        try:
            for scheduling_object in p.scheduling_objects:
                await self.kube.create_scheduling_object(scheduling_object)
            created = await self.kube.create_pods(p.create_pods)
        except RejectedObject as e:
            await self._reject(job, obj, str(e))
            return
        metrics.PODS_CREATED.inc(created)
        if created:
            gated = sum(admission.gated(x) for x in p.create_pods)
            log.info("[%s/%s] created %d pods (%d gated)", namespace, name, created, gated)
            # A round at once, with no pod event needed (the cache holds our creates): it records the new pods'
            # ranks as seen before anything can happen to them (an eviction in their first second is then counted
            # as the rank's failure, not mistaken for a pod that never was), and it releases pods created gated
            # but not weighed (a rank still waited out its back-off).
            self.wake_after(namespace, name, 0.0)

    def _note_waiting(self, job: TrainingJob, waiting: bool) -> None:
        self.memory((job.namespace, job.name)).waiting_since = (
            str(job.metadata.get("creationTimestamp", "")) if waiting else None
        )

    def node_seen(self, name: str, node: Mapping[str, Any] | None) -> bool:
        """A watch event brought a Node (None: deleted); True when it offers room it did not before (it appeared,
        turned Ready or schedulable, or its allocatable changed): jobs waiting for room look again. A heartbeat
        changes nothing here."""
        if node is None:
            self.node_rooms.pop(name, None)
            return False
        room, before = admission.node_room(node), self.node_rooms.get(name)
        self.node_rooms[name] = room
        return room.usable and room != before

    def room_freed(self) -> None:
        """Room may have been freed: give every job waiting for admission a round now, oldest first (they
        queue for the admission lock in this order)."""
        waiting = sorted((m.waiting_since, k) for k, m in self.jobs.items() if m.waiting_since is not None)
        for i, (_, key) in enumerate(waiting):
            self.wake_after(*key, NUDGE_SECONDS + i * 0.01)

    async def _scrape(self, key: Key, fresh: bool) -> bool:
        """The scrape of a running job that fell due (copy worker 0's step, loss and throughput into
        status.progress; the stall and straggler watches), then its next one: scraper.scrape_interval on, or
        when its failed reads' back-off ends. Nothing for a job that is gone or no longer runs (job_seen
        schedules it again when it does)."""
        record = self.jobs.get(key)
        if record is None or (record.body is not None and not _running(record.body)):
            return False
        try:
            if record.body is not None:
                with contextlib.suppress(ApiUnavailable):  # the next scrape tries again
                    await self.scraper.scrape(record.body)
        finally:
            if (record := self.jobs.get(key)) is not None and (record.body is None or _running(record.body)):
                body = record.body
                every = scrape_interval(
                    len(self.running), body is None or watches_progress(body), body is not None and loss_pending(body)
                )
                self.scrapes.add_after(key, max(every, record.next_scrape_at - time.monotonic()))
        return False

    def _scrape_failed(self, key: Key, e: Exception) -> None:
        """A scrape raised what it should not have: said (the job's next scrape is already scheduled)."""
        log.error("[%s/%s] progress scrape failed", *key, exc_info=e)

    async def close(self) -> None:
        self.scrapes.close()
        self.queue.close()
        await self.scraper.close()
        await self.kube.close()

    async def _reject(self, job: TrainingJob, obj: dict[str, Any], message: str) -> None:
        """The API server refused a pod built from the spec: fail the job, and leave no half-created pods."""
        generation = int(job.metadata.get("generation", 0))
        await self.kube.patch_status(job.namespace, job.name, _invalid_spec(job.status, generation, message))
        pods = await self.kube.list_pods(job.namespace, job.name)
        await self.kube.delete_pods(job.namespace, [p["metadata"]["name"] for p in pods])
        self.emit(obj, "Warning", Reason.INVALID_SPEC, message)


def _status_read(
    record: JobMemory | None, job: TrainingJob, version: str | None, with_progress: bool
) -> dict[str, Any]:
    """status_json of the status the round read: what this process wrote, while the job read is the version that
    write made (`JobMemory.status_written`), else encoded from the job."""
    written = record.status_written if record is not None and not with_progress else None
    if written is not None and version is not None and written[0] == version:
        return written[1]
    return status_json(job.status, with_progress=with_progress)


def _gated(record: JobMemory, pods: list[dict[str, Any]]) -> bool:
    """Whether any of the job's rank pods carries the gang gate, as the plan just made counted them (its rank
    book), or, without a book, among `pods`."""
    book = record.seen.book
    return book.gated > 0 if book is not None and book.observed is not None else any(admission.gated(x) for x in pods)


def _running(obj: Mapping[str, Any] | None) -> bool:
    """Whether the job `obj` runs as its status says (its progress is scraped)."""
    return obj is not None and (obj.get("status") or {}).get("phase") in RUNNING_PHASES
