"""Gang admission across all jobs: one decision at a time, each seeing the room the decisions before it took.

A round whose job has gated pods (or an elastic job that may grow) plans with the cluster in view (`decide`).
The decisions take turns under one lock; each counts the room earlier ones released and the cluster does not
show yet (claims.py), and the writes follow outside the lock, so a burst of new jobs is not serialized on their
API round trips. The view of the cluster is kept from the watches (the nodes' events, the pod watch's ledger of
room) where the operator watches the whole cluster, and listed from the API server otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import admission
from .claims import Claims, released
from .kubeapi import KubeApi
from .podcache import Key, PodCache, digest
from .round_state import Plan


class ClusterAdmission:
    """The admission lock, the room claimed by released pods, and the view of the cluster that decisions weigh.

    `cache` and `ledger` (the pod watch's room, kept pod by pod) are read once the pod watch has listed the
    pods (`cache.ready`), and only where it watches the whole cluster (`clusterwide`); until then, and in a
    namespaced operator, each decision lists the cluster's pods."""

    def __init__(
        self, kube: KubeApi, cache: PodCache | None, ledger: admission.Ledger | None, clusterwide: bool
    ) -> None:
        self.kube, self.cache, self.ledger, self.clusterwide = kube, cache, ledger, clusterwide
        self.lock = asyncio.Lock()
        self.claims = Claims()
        self.nodes: dict[str, dict[str, Any]] = {}  # every Node's digest, as its last event showed it
        self.rooms: dict[str, admission.NodeRoom] = {}  # what each node offers, as its last event showed

    def node_seen(self, name: str, node: Mapping[str, Any] | None) -> bool:
        """A watch event brought a Node's digest (None: deleted); True when it offers room it did not before (it
        appeared, turned Ready or schedulable, or its allocatable changed): jobs waiting for room look again. A
        heartbeat changes nothing here."""
        if node is None:
            self.nodes.pop(name, None)
            self.rooms.pop(name, None)
            return False
        self.nodes[name] = dict(node)
        room, before = admission.node_room(node), self.rooms.get(name)
        self.rooms[name] = room
        return room.usable and room != before

    def forget(self, job: Key) -> None:
        """The job is gone: its claims go."""
        self.claims.release(job)

    async def decide(self, job: Key, pods: list[dict[str, Any]], decide: Callable[[admission.Cluster], Plan]) -> Plan:
        """`decide` the job's plan with the cluster in view (the room other jobs' admissions claimed counted, the
        job's own left out), under the lock, and claim the pods it releases before the lock goes."""
        async with self.lock:
            p = decide(await self.cluster(exclude=job))
            self.claims.claim(job, released(p, pods), time.monotonic())
        return p

    async def cluster(self, exclude: Key) -> admission.Cluster:
        """Every node and pod as admission weighs them: with the room other jobs' admissions claimed (`exclude`'s
        own claims left out)."""
        now = time.monotonic()
        cache, ledger = self.cache, self.ledger
        if cache is not None and cache.ready and self.clusterwide and ledger is not None:
            # Before the node watch's first event, from the API server (a cluster without nodes costs a list each).
            nodes = list(self.nodes.values()) or await self.kube.nodes()
            # The ledger holds the watched pods; what this process wrote since, and other jobs' claims, go over it.
            index, written = cache.index, cache.newer_written(now)
            assert index is not None
            claimed = self.claims.standing(lambda k: written.get(k) or index.pod(k), now, exclude)
            changes = {**written, **claimed}
            return admission.Cluster(nodes, rooms=lambda without: ledger.view(changes, without))
        cluster = await self.kube.cluster()
        return admission.Cluster(cluster.nodes, self.claims.overlay([digest(p) for p in cluster.pods], now, exclude))
