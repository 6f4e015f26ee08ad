"""A pod worker's status: recomputed from the container records and patched to the API server only when it
changed (transition times aside); retried on failure, dropped once the pod is gone."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from .nodeapi import NodeApiError
from .pod_state import PodWorkerState, log
from .podstatus import PodView, build_status, pod_phase
from .runtime import now

FLUSH_SECONDS = 10.0  # the longest a pod's removal waits for its final status to be published


def _is_terminal(phase: str) -> bool:
    return phase in ("Succeeded", "Failed")


class StatusPublishing(PodWorkerState):
    def _current_phase(self) -> str:
        if _is_terminal(self.phase):
            return self.phase
        return pod_phase(self._policy(), list(self.init.values()), list(self.containers.values()))

    def status(self, at: datetime) -> dict[str, Any]:
        old = (self.pod.get("status") or {}).get("conditions") or []
        view = PodView(
            phase=self._current_phase(),
            pod_ip=self.pod_ip,
            host_ip=self.node.host_ip,
            start_time=self.start_time,
            sandbox_ready=self.sandbox_ready,
            reason=self.reason,
            message=self.message,
        )
        return build_status(view, list(self.init.values()), list(self.containers.values()), old, at)

    async def _publish_loop(self) -> None:
        while True:
            await self.dirty.wait()
            self.dirty.clear()
            if self.gone or self.gone_quiet:
                continue
            status = self.status(now())
            if _same_status(status, self.published):
                continue
            meta = self.pod["metadata"]
            self.publishing = True
            try:
                await self.node.api.patch_pod_status(meta["namespace"], meta["name"], {**_NULLABLE, **status})
                self.published = status
                # Keep our conditions' transition times until the watch delivers the object back.
                self.pod.setdefault("status", {})["conditions"] = status["conditions"]
            except NodeApiError as e:
                if e.not_found:
                    self.gone = True
                    continue
                log.warning("[%s] %s; retrying", self.key, e)
                self._mark()
                await asyncio.sleep(0.5)
            finally:
                self.publishing = False

    async def flush_status(self, within: float = FLUSH_SECONDS) -> None:
        """Wait until the status as it is now has been published (or the pod is gone, or `within` seconds passed), as a
        kubelet's status manager does before the object of a terminated pod is removed: whoever watches the pod
        (its controller) sees how its containers ended in the final status, not a deletion without exit codes."""
        deadline = asyncio.get_running_loop().time() + within
        while (self.dirty.is_set() or self.publishing) and not (self.gone or self.gone_quiet):
            if asyncio.get_running_loop().time() >= deadline:
                log.warning("[%s] final status not published within %.0f s; removing the pod", self.key, within)
                return
            await asyncio.sleep(0.02)


# Keys we own in the merge patch: absent means "clear it", so each goes out as null unless set.


# Keys we own in the merge patch: absent means "clear it", so each goes out as null unless set.
_NULLABLE: dict[str, Any] = {
    "reason": None,
    "message": None,
    "initContainerStatuses": None,
    "podIP": None,
    "podIPs": None,
}


def _strip_times(status: dict[str, Any]) -> dict[str, Any]:
    return {**status, "conditions": [{**c, "lastTransitionTime": None} for c in status.get("conditions", [])]}


def _same_status(a: dict[str, Any], b: dict[str, Any] | None) -> bool:
    return b is not None and _strip_times(a) == _strip_times(b)
