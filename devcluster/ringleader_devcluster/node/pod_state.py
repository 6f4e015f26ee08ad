"""What a pod worker's parts share (node/podworker.py puts them together): the node's context, the pod's
records, and the few operations every part uses (set a container's record, fail the pod, mark the status for
publishing)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from .hostsfile import Endpoint
from .network import Bridge, IPPool
from .nodeapi import NodeApi
from .podplan import ContainerPlan, PodPlan, VolumePlan
from .podstatus import ContainerRecord, State
from .runtime import ContainerProcess

log = logging.getLogger("ringleader_devcluster.node.podworker")

RETRY_PREPARE = 2.0  # seconds between attempts while a config map or secret is missing


@dataclass
class GPUPool:
    """GPU indices of one node, handed out per pod the way a device plugin would."""

    count: int
    held: dict[str, list[int]] = field(default_factory=dict)

    def allocate(self, uid: str, n: int) -> list[int] | None:
        if uid in self.held:
            return self.held[uid]
        busy = {i for ids in self.held.values() for i in ids}
        free = [i for i in range(self.count) if i not in busy]
        if n > len(free):
            return None
        self.held[uid] = free[:n]
        return self.held[uid]

    def release(self, uid: str) -> None:
        self.held.pop(uid, None)

    @property
    def free(self) -> int:
        return self.count - sum(len(ids) for ids in self.held.values())


@dataclass
class NodeContext:
    """What every pod worker of one node shares."""

    name: str
    api: NodeApi
    bridge: Bridge
    pool: IPPool
    gpus: GPUPool
    pods_dir: Path
    volumes_dir: Path  # PVC-like directories, kept across pods
    base_env: dict[str, str]
    endpoints: Callable[[], Iterable[Endpoint]]
    backoff_base: float
    backoff_cap: float

    @property
    def host_ip(self) -> str:
        return self.bridge.gateway


class PodWorkerState:
    """The attributes PodWorker.__init__ sets, and the operations on them every part uses."""

    node: NodeContext
    pod: dict[str, Any]
    uid: str
    key: str
    dir: Path
    plan: PodPlan | None
    init: dict[str, ContainerRecord]
    containers: dict[str, ContainerRecord]
    procs: dict[str, ContainerProcess]
    pod_ip: str
    netns: str | None
    sandbox_ready: bool
    phase: str
    reason: str
    message: str
    start_time: datetime
    stopping: asyncio.Event
    gone: bool
    gone_quiet: bool  # never publish status (the pod's status is final already)
    dirty: asyncio.Event
    publishing: bool  # a status patch is on its way to the API server
    published: dict[str, Any] | None

    def container_dir(self, name: str) -> Path:
        return self.dir / "containers" / name

    def _policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    def _grace(self) -> float:
        meta_grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if meta_grace is not None:
            return float(meta_grace)
        return float(self.plan.grace_seconds if self.plan else 30)

    def _records(self, c: ContainerPlan) -> dict[str, ContainerRecord]:
        return self.init if c.init else self.containers

    def _set(self, c: ContainerPlan, record: ContainerRecord) -> None:
        self._records(c)[c.name] = record
        self._mark()

    def _set_ready(self, c: ContainerPlan, ready: bool) -> None:
        record = self._records(c)[c.name]
        if record.state == State.RUNNING and record.ready != ready:
            self._set(c, replace(record, ready=ready))

    def _fail(self, reason: str, message: str) -> bool:
        log.info("[%s] failed: %s: %s", self.key, reason, message)
        self.phase, self.reason, self.message = "Failed", reason, message
        for name, r in self.containers.items():
            self.containers[name] = r.waiting(reason, message)
        self._mark()
        return False

    def _all_waiting(self, reason: str, message: str) -> None:
        for name, r in self.containers.items():
            self.containers[name] = r.waiting(reason, message)
        self._mark()

    def _mark(self) -> None:
        self.dirty.set()

    def _volume_dir(self, v: VolumePlan) -> Path:
        if v.kind == "host":
            return Path(v.host_path)
        if v.claim:
            return self.node.volumes_dir / str(self.pod["metadata"]["namespace"]) / v.claim
        return self.dir / "volumes" / v.name
