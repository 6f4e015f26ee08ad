"""One pod's life on the process node, from the scheduler's bind to the object's removal.

prepare (config refs, IP, GPUs, sandbox, volumes) -> init containers one by one -> regular containers
supervised under restartPolicy with CrashLoopBackOff -> terminal phase (resources released) -> on deletion:
SIGTERM, grace period, SIGKILL, sandbox removed, object deleted with grace 0 as the kubelet does.
Status is recomputed from the container records and patched only when it changed.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from .network import delete_sandbox, write_hosts
from .nodeapi import NodeApiError
from .pod_prepare import Preparation
from .pod_state import GPUPool, NodeContext, log
from .pod_status import StatusPublishing, _is_terminal
from .pod_supervise import Supervision
from .podstatus import ContainerRecord, pod_phase
from .runtime import now

__all__ = ["GPUPool", "NodeContext", "PodWorker", "remove_stale_pod_dirs"]


class PodWorker(Preparation, Supervision, StatusPublishing):
    """One pod's worker: preparation (pod_prepare), supervision (pod_supervise), status (pod_status)."""

    def __init__(self, node: NodeContext, pod: dict[str, Any]) -> None:
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.key = f"{meta['namespace']}/{meta['name']}"
        self.dir = node.pods_dir / f"{meta['namespace']}_{meta['name']}_{self.uid}"
        self.plan = None
        self.init = {}
        self.containers = {}
        self.procs = {}
        self.pod_ip = ""
        self.netns = None
        self.sandbox_ready = False
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.start_time = now()
        self.stopping = asyncio.Event()
        self.gone = False
        self.gone_quiet = False  # never publish status (the pod's status is final already)
        self.dirty = asyncio.Event()
        self.publishing = False
        self.published = None
        spec_containers = pod["spec"]["containers"]
        for c in pod["spec"].get("initContainers") or []:
            self.init[c["name"]] = ContainerRecord(
                name=c["name"], image=c.get("image", ""), init=True, waiting_reason="PodInitializing"
            )
        for c in spec_containers:
            self.containers[c["name"]] = ContainerRecord(
                name=c["name"],
                image=c.get("image", ""),
                waiting_reason="PodInitializing" if self.init else "ContainerCreating",
            )
        self.task = asyncio.create_task(self.run(), name=f"pod {self.key}")

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.stopping.set()

    def vanished(self) -> None:
        """The object is gone (force-deleted): stop at once, nothing left to report to."""
        self.gone = True
        self.stopping.set()

    def refresh_hosts(self) -> None:
        if self.netns and self.plan:
            write_hosts(self.netns, self._hosts())

    def is_running(self, container: str) -> bool:
        p = self.procs.get(container)
        return p is not None and p.running

    async def run(self) -> None:
        publisher = asyncio.create_task(self._publish_loop())
        try:
            if _is_terminal((self.pod.get("status") or {}).get("phase") or ""):
                # Finished before this worker existed (an earlier agent ran it): its status is final, so only
                # the deletion is left to carry out.
                self.gone_quiet = True
                await self.stopping.wait()
                await self._finish()
                return
            try:
                if not self._lost_by_restart() and await self._prepare() and await self._run_init():
                    await self._run_containers()
                if not self.stopping.is_set() and not _is_terminal(self.phase):
                    self.phase = pod_phase(self._policy(), list(self.init.values()), list(self.containers.values()))
                    self._mark()
            except Exception as e:  # a bug here must fail the pod visibly, not re-run it on the next relist
                log.exception("[%s] pod worker crashed", self.key)
                self._fail("NodeAgentError", f"process node error: {e}")
            await self._teardown()
            log.info("[%s] %s; resources released", self.key, self.phase if not self.stopping.is_set() else "stopped")
            await self.stopping.wait()
            await self._finish()
            log.info("[%s] removed", self.key)
        finally:
            publisher.cancel()

    def _lost_by_restart(self) -> bool:
        """A pod that already ran under an earlier agent process lost its processes when that agent died, like
        containers on a rebooted node: under restartPolicy Never that fails the pod; otherwise its containers
        start again with restartCount raised by one. Returns whether the pod failed."""
        previous = {s["name"]: s for s in (self.pod.get("status") or {}).get("containerStatuses") or []}
        ran = any(set(s.get("state") or {}) & {"running", "terminated"} for s in previous.values())
        if not ran:
            return False
        if self._policy() == "Never":
            self._fail("NodeRestarted", "the process node restarted while this pod ran; its processes were lost")
            return True
        for name, record in self.containers.items():
            count = int((previous.get(name) or {}).get("restartCount", 0)) + 1
            self.containers[name] = replace(record, restart_count=count)
        return False

    async def _teardown(self) -> None:
        """Stop every process, remove the sandbox, give back the IP and GPUs."""
        await asyncio.gather(*(p.stop(0 if self.gone else self._grace()) for p in self.procs.values()))
        if self.netns:
            await delete_sandbox(self.netns)
        if self.pod_ip:
            self.node.pool.release(self.pod_ip)
        self.node.gpus.release(self.uid)
        self.sandbox_ready = False
        self._mark()
        await self.flush_status()  # the final state (exit codes) reaches the API server before the object goes

    async def _finish(self) -> None:
        """The pod is being deleted and nothing of it runs any more: remove the object (grace 0)."""
        if not self.gone:
            meta = self.pod["metadata"]
            try:
                await self.node.api.remove_pod(meta["namespace"], meta["name"], self.uid)
            except NodeApiError as e:  # gone or replaced (404, 409): done; else the next list brings it back
                if e.status not in (404, 409):
                    log.warning("[%s] final delete failed: %s", self.key, e)
        shutil.rmtree(self.dir, ignore_errors=True)


def remove_stale_pod_dirs(pods_dir: Path, keep: set[str]) -> None:
    """Drop directories of pods this node no longer knows (left by a previous run of the agent)."""
    if not pods_dir.exists():
        return
    for d in pods_dir.iterdir():
        if d.name.rsplit("_", 1)[-1] not in keep:
            shutil.rmtree(d, ignore_errors=True)
