"""What a reconcile round reads of its job: the job as this process last saw it (its watch events and the answers
to its own status writes), from the API server only when it has none, a write met a newer version, or the
periodic resync asks for a fresh read; its pods from the pod watch's cache; whether its Service exists from what
this process last read or created; what Kueue says of it. The fresh read of the resync (every FRESH_SECONDS a
job) lists the job's pods and reads its Service from the API server, so what a watch gap leaves behind lasts
that long at most."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from ringleader_api import TrainingJob

from . import kueue
from .builders import InvalidTemplate, validate
from .changelog import PodDelta
from .gang_backends import OWN_GATE, GangBackend, choose, workload_api
from .jobmemory import Jobs, Key
from .kubeapi import KubeApi
from .observed import earlier_job_leftovers
from .podcache import PodCache, digest
from .reading import Reading
from .workloads import Workloads

log = logging.getLogger("ringleader.reconciler")
# How long rounds wait, at the operator's start, for the pod watch's first list before they read their jobs'
# pods from the API server instead (once: after that, none waits): a thousand jobs' first rounds would otherwise
# be a thousand lists.
PODS_LISTED_SECONDS = 60.0


class RoundReader:
    """Reads for rounds. `jobs`: the reconciler's records (shared); `cache`: pods as the pod watch sees them
    (without one, every round lists them); `max_ranks`: the most pods one job may have; `pods_listed`: set by
    the pod watch once it has listed the pods (None: no round waits for it). `backend`: how gangs are admitted
    where the job's pods name no scheduler of their own (the operator's choice at start: `Reconciler.use_backend`)."""

    def __init__(
        self,
        kube: KubeApi,
        jobs: Jobs,
        cache: PodCache | None,
        max_ranks: int,
        pods_listed: asyncio.Event | None,
    ) -> None:
        self.kube, self.jobs, self.cache, self.max_ranks = kube, jobs, cache, max_ranks
        self.pods_listed = pods_listed
        self.backend: GangBackend = OWN_GATE
        self.workloads = Workloads(kube)

    def cached(self) -> PodCache | None:
        """The pod cache once the pod watch has filled it, else None (read from the API server)."""
        return self.cache if self.cache is not None and self.cache.ready else None

    async def first_worker(self, namespace: str, job: str) -> list[dict[str, Any]] | None:
        """The job's worker-0 pods from the pod watch's index of them; None before it has listed them."""
        if (cache := self.cached()) is None or cache.indexes is None:
            return None
        return list(cache.indexes.first_workers.get((namespace, job), ()))

    async def job(self, key: Key, fresh: bool) -> dict[str, Any] | None:
        """The job as last seen, or from the API server (fresh, none seen, or a write met a newer version)."""
        record = self.jobs.get(key)
        if not fresh and record is not None and record.body is not None:
            return record.body
        obj = await self.kube.get_job(*key)
        if obj is not None:
            self.jobs.memory(key).saw(obj)
        return obj

    async def pods(self, namespace: str, name: str, fresh: bool) -> list[dict[str, Any]]:
        """The job's pods (digests): from the cache unless `fresh` or it is not filled yet."""
        return (await self.pods_since(namespace, name, fresh, None))[0]

    async def pods_since(
        self, namespace: str, name: str, fresh: bool, since: tuple[object, int] | None
    ) -> tuple[list[dict[str, Any]], PodDelta | None]:
        """`pods`, and what changed among them since the cache's revision `since` (None where they were read from
        the API server)."""
        if not fresh and (cache := self.cached()) is not None:
            return cache.job_pods_since(namespace, name, time.monotonic(), since)
        return [digest(p) for p in await self.kube.list_pods(namespace, name)], None

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

    async def read(self, job: TrainingJob, fresh: bool, now: str) -> Reading | None:
        """What `plan` decides from (at `now`, RFC 3339); None while pods or a Service of an earlier job of the
        same name are still there (said in the log; the caller looks again later)."""
        namespace, name = job.namespace, job.name
        uid = str(job.metadata.get("uid", ""))
        await self._pods_listed()
        record = self.jobs.memory((namespace, name))
        pods, delta = await self.pods_since(namespace, name, fresh, record.seen.revision)
        service = None
        if fresh or record.service_uid != uid:
            record.service_uid = None
            service = await self.kube.read_service(namespace, name)
        if fresh:  # recorded once both reads succeeded: a failed one leaves the fresh read due
            record.fresh_read_at = time.monotonic()
        clean = record.clean_uid == uid and not fresh  # found free of them before (a fresh round looks again)
        leftovers = [] if clean else earlier_job_leftovers(uid, [*pods, *([service] if service else [])])
        record.clean_uid = None if leftovers else uid
        if leftovers:
            log.info("[%s/%s] waiting for an earlier job of this name to be cleaned up: %s", namespace, name,
                     ", ".join(leftovers))  # fmt: skip
            return None
        if service is not None:
            record.service_uid = uid  # this job's own (not a leftover): later rounds need not read it
        cache = self.cached()
        gone = cache.job_gone(namespace, name, time.monotonic()) if cache is not None else []
        queued = await self.workloads.sync(job, record, pods, now) if self._queued(job) else None
        gang = choose(job, self.backend)
        return Reading(
            job, pods, record.service_uid == uid, self.max_ranks, gone, record.stall, record.stragglers, queued,
            record.seen, gang, gang.verdict(job, record.gang_seen), delta,
        )  # fmt: skip

    async def use_backend(self, backend: str) -> str:
        """Choose how gangs are admitted where a job's pods name no scheduler of their own: "gates" (the
        operator's own), "workload-api" (kube-scheduler's gang scheduling through scheduling.k8s.io/v1alpha2;
        refused where the cluster does not serve it) or "auto" (the Workload API where it is served). Returns the
        one chosen."""
        api = workload_api.WORKLOAD_API
        served = backend != OWN_GATE.name and await self.kube.serves(
            workload_api.GROUP, workload_api.VERSION, *api.serves
        )
        if backend == api.name and not served:
            raise ValueError(
                f"--gang-backend workload-api: the cluster does not serve {workload_api.API_VERSION} Workloads and "
                "PodGroups (Kubernetes 1.36 with the GenericWorkload feature gate and that API enabled)"
            )
        self.backend = api if served else OWN_GATE
        return self.backend.name

    def gang_object_seen(self, namespace: str, job: str, obj: Mapping[str, Any] | None) -> bool:
        """A watch event brought an object a gang backend watches (gang_backends: the Workload API's PodGroup) of
        the job (None: deleted); True when what its scheduler says of it changed (a round is due)."""
        record = self.jobs.memory((namespace, job))
        backend = self.backend
        before = record.gang_seen[1] if record.gang_seen is not None else None
        said = backend.said(obj)
        record.gang_seen = None if obj is None else (str((obj.get("metadata") or {}).get("name", "")), said)
        return bool(said != before)

    def workload_seen(self, namespace: str, job: str, obj: Mapping[str, Any] | None) -> bool:
        """A watch event brought the job's Kueue Workload (None: it was deleted); a round is due."""
        self.jobs.memory((namespace, job)).saw_workload(obj)
        return True

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
