"""kopf wiring: every trigger (a job seen for the first time or its spec changed, a job's pod changed, a
periodic timer) runs the same level-based reconcile for the job concerned. Nothing else happens here.

TrainingJobs are watched with an event handler, not kopf's create/update/resume handlers: those keep the
last handled spec in an annotation on the job, a patch per new job and per change of spec (and the watch event
it brings) that a level-based reconcile has no use for; the job's generation tells a change of spec from a
status write. (kopf's finalizer on each job stays: its timers ask for it.) A round that cannot reach the API
server runs again in reconciler.RETRY_SECONDS."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import kopf
from kubernetes_asyncio import client
from ringleader_api import GROUP, LABEL_INDEX, LABEL_JOB, LABEL_ROLE, PLURAL, VERSION

from . import gang_backends, kueue
from .admission import Ledger, node_digest
from .builders import DEFAULT_MAX_RANKS
from .diffbase import NoDiffBaseStorage
from .kube import Kube
from .kube_connection import kopf_session, load_config
from .kube_errors import ApiUnavailable
from .podcache import PodCache, PodIndexes
from .podwatch import PodWatch
from .ratelimit import ClientBudget
from .reconciler import Reconciler
from .round_reader import RoundReader

# The safety resync: heals whatever a missed event left behind. Rounds are otherwise event-driven, and what is
# due at a time (a back-off, the deadline, the TTL, the gang's admission timeout, an elastic growth) asks for its
# own round (Plan.requeue_after), so a job whose pods do not change costs nothing between resyncs. Every 30 s
# (as before) a thousand running jobs cost a round each twice a minute; every 30 minutes, one round of one of
# them every 2 s (controller-runtime's default is 10 hours).
RESYNC_SECONDS = 1800.0
# How long kopf keeps an object's worker after its last event. An idle worker holds that event's whole
# body (managedFields included): at kopf's default of 5 s, a burst of 500 new jobs had about 800 of their 2000
# pods' bodies alive at a time, at 1 s about 150. A later event starts a new worker: a task, not a request.
WORKER_IDLE_SECONDS = 1.0
PEERING_NAME = "ringleader"
PEERING_LIFETIME = 15  # seconds: how soon a killed leader's replica takes over
# TrainingJobs, Kueue's Workloads, the peering object, the Nodes (one cluster-wide watch; counted per namespace, so
# there is room to spare when several namespaces are watched) and what the gang backends watch (the Workload API's
# PodGroups). The cluster counts as one namespace. Pods are watched by the operator's own client (podwatch.py).
WATCHES_PER_NAMESPACE = 4 + len(gang_backends.watched())
# Pauses between retries of a failed API request (watches included): about 10 minutes in all. kopf's default
# gives up after about a minute, and a watch that gives up stops the whole operator, so an API server
# outage of a minute or two (an upgrade, an etcd failover) would take the operator down with it.
API_RETRY_BACKOFFS = (1, 1, 2, 3, 5, 8, 13, 21, *([30] * 18))


def _emit(obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
    kopf.event(kopf.Body(cast(kopf.RawBody, obj)), type=kind, reason=reason, message=message)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # kopf keeps its own bookkeeping in annotations, never in our status.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="ringleader.dev")
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "ringleader-operator"
    settings.posting.reporting_instance = socket.gethostname()
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    settings.networking.error_backoffs = API_RETRY_BACKOFFS
    settings.peering.lifetime = PEERING_LIFETIME
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    ledger = Ledger()
    indexes = PodIndexes(LABEL_JOB, LABEL_ROLE, LABEL_INDEX, also=ledger)
    cache = PodCache(LABEL_JOB, indexes)
    namespaces = list(memo.get("namespaces") or [])
    api = await load_config(watches=max(1, len(namespaces)))
    listed = asyncio.Event()  # the pod watch has listed the pods
    reconciler = memo.reconciler = Reconciler(
        Kube(api, wrote=lambda pod: cache.wrote(pod, time.monotonic()), budget=_budget(memo)),
        _emit,
        cache,
        clusterwide=not namespaces,
        max_ranks=int(memo.get("max_ranks", DEFAULT_MAX_RANKS)),
        operator_pods=memo.get("operator_pods"),
        ledger=ledger,
        pods_listed=listed,
    )

    def on_listed() -> None:  # from now on rounds read pods from the indexes, not the API server
        cache.listed()
        logging.getLogger("ringleader").info("pod watch: %d pods listed", indexes.by_job.pods())

    # started by the first job event (_start_pod_watch)
    memo.pods = PodWatch(
        client.CoreV1Api(api), _budget(memo), namespaces, indexes, reconciler.pod_seen, listed=on_listed, ready=listed
    )
    try:
        chosen = await memo.reconciler.reader.use_backend(str(memo.get("gang_backend", "auto")))
    except ValueError as e:  # the operator stops, saying why
        raise kopf.PermanentError(str(e)) from e
    described = gang_backends.CLUSTER_BACKENDS[chosen].description
    logging.getLogger("ringleader").info("gangs are admitted by %s", described)


@kopf.on.event("", "v1", "nodes")
async def node_event(type: str | None, name: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Every Node's digest is kept for gang admission (listing them from the API server in every decision, under
    the admission lock, was a request and a deserialization of every Node per job in a burst of new jobs). A node
    that offers room it did not (it appeared, turned Ready or schedulable, grew): jobs waiting for room (gangs,
    elastic jobs running smaller than they ask) look again at once rather than at their next retry."""
    reconciler: Reconciler = memo.reconciler
    if name and reconciler.node_seen(name, None if type == "DELETED" else node_digest(body)):
        reconciler.room_freed()


def _start_pod_watch(memo: kopf.Memo) -> None:
    """Start the pod watch (podwatch.py) once, from the first job event this replica handles. Not at startup:
    kopf shows a standby of a leader election no job, so a standby watches no pods (as kopf's own watches
    pause there); and the watch's task then inherits a handler's context, where kopf keeps what `kopf.event`
    needs, so rounds it wakes can post events (from startup's context they raised LookupError)."""
    pods: PodWatch = memo.pods  # the same object in every handler's memo (kopf gives each object a shallow copy
    pods.start()  # of the operator's: a flag set on one object's copy would start a watch per job)


@kopf.on.login()
async def login(memo: kopf.Memo, **kwargs: Any) -> kopf.AiohttpSession | None:
    info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    if info is None:
        return None
    return kopf_session(info, watches=int(memo.get("watches", WATCHES_PER_NAMESPACE)), budget=_budget(memo))


def _budget(memo: kopf.Memo) -> ClientBudget:
    """The process's one client budget (main.py sets it from --kube-api-qps/--kube-api-burst)."""
    if not isinstance(memo.get("budget"), ClientBudget):
        memo.budget = ClientBudget()
    budget: ClientBudget = memo.budget
    return budget


async def _reconcile(memo: kopf.Memo, namespace: str | None, name: str | None, fresh: bool = False) -> None:
    if not namespace or not name:
        return
    reconciler: Reconciler = memo.reconciler
    try:
        await reconciler.trigger(namespace, name, fresh)
    except ApiUnavailable as e:
        reconciler.retry((namespace, name), e)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def job_event(
    type: str | None, body: kopf.Body, namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any
) -> None:
    """Every watch event of a TrainingJob (type None: listed at start). The reconciler keeps the job as the
    event shows it; a round runs when the job is new to this process or its spec changed."""
    if not namespace or not name:
        return
    _start_pod_watch(memo)
    reconciler: Reconciler = memo.reconciler
    if type == "DELETED":
        reconciler.job_gone(namespace, name)
    elif reconciler.job_seen(dict(body)):
        await _reconcile(memo, namespace, name)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
async def resync(namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any) -> None:
    fresh = bool(namespace and name and memo.reconciler.fresh_due(namespace, name))
    await _reconcile(memo, namespace, name, fresh=fresh)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    pods: PodWatch | None = memo.get("pods")
    if pods is not None:
        await pods.stop()
    await memo.reconciler.close()


@kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, labels={LABEL_JOB: kopf.PRESENT})
async def workload_event(
    type: str | None, labels: Mapping[str, str], namespace: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    """A Kueue Workload of a job changed (Kueue admitted or evicted it, or the operator's own write): the job
    keeps it and gets a round. kopf watches Workloads only where Kueue's CRD is installed."""
    await _job_object_event(RoundReader.workload_seen, type, labels, namespace, body, memo)


async def gang_object_event(
    type: str | None, labels: Mapping[str, str], namespace: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    """An object a gang backend watches changed (the Workload API's PodGroup of a job): when its scheduler said
    something new of the gang, the job gets a round, whose Admitted condition repeats it. kopf watches each only
    where the cluster serves it."""
    await _job_object_event(RoundReader.gang_object_seen, type, labels, namespace, body, memo)


for _group, _version, _plural in gang_backends.watched():  # each backend's own watches
    kopf.on.event(_group, _version, _plural, labels={LABEL_JOB: kopf.PRESENT})(gang_object_event)


async def _job_object_event(
    seen: Callable[[RoundReader, str, str, Mapping[str, Any] | None], bool],
    type: str | None,
    labels: Mapping[str, str],
    namespace: str | None,
    body: kopf.Body,
    memo: kopf.Memo,
) -> None:
    """An object of a job's (labelled with it) changed: the reconciler keeps it (`seen`), and the job gets a round
    when `seen` says one is due."""
    job = labels.get(LABEL_JOB)
    if not namespace or not job:
        return
    if seen(memo.reconciler.reader, namespace, job, None if type == "DELETED" else dict(body)):
        await _reconcile(memo, namespace, job)
