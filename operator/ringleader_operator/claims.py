"""Room that gang admission has granted and the cluster does not show yet, pure.

Admission decides one job at a time, and each decision must count the room the decisions before it took. It
holds its lock only while it decides: the pods a decision releases (created without the gate, or about to have
it lifted) are recorded here as claims, and the writes go out after the lock is released, so a burst of new
jobs is not serialized on their API round trips. A claim stands in for its pod in every later admission of other
jobs until the view of the cluster shows a newer version of that pod (the created pod, or the released one) or
CLAIM_SECONDS have passed (a write that failed: its room comes back then), or its job is gone. A job's own claims
are left out of its own decisions: a round that runs again after a failed write weighs those pods again as part of
its gang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import admission
from .podcache import Key, digest, key, resource_version
from .round_state import Plan

CLAIM_SECONDS = 60.0
Pod = dict[str, Any]


@dataclass(frozen=True)
class Claim:
    at: float
    job: Key  # (namespace, job name)
    pod: Pod  # the pod as released: its digest without the gang gate


@dataclass
class Claims:
    by_pod: dict[Key, Claim] = field(default_factory=dict)

    def claim(self, job: Key, pods: Iterable[Mapping[str, Any]], now: float) -> None:
        """Record `pods` (digests, as released) as taking room for `job` from `now`."""
        for pod in pods:
            self.by_pod[key(pod)] = Claim(now, job, dict(pod))

    def release(self, job: Key) -> None:
        """The job is gone: its claims go with it (its pods may have come and gone before any later admission saw
        them, and their room would otherwise stay taken for CLAIM_SECONDS)."""
        for k in [k for k, c in self.by_pod.items() if c.job == job]:
            del self.by_pod[k]

    def overlay(self, pods: Iterable[Pod], now: float, exclude: Key | None = None) -> list[Pod]:
        """`pods` (every pod of the cluster as last seen) with the claims of jobs other than `exclude` in place
        of the versions they were claimed over, or added where the pod does not show yet (see `standing`)."""
        out = {key(p): p for p in pods}
        return list((out | self.standing(out.get, now, exclude)).values())

    def standing(self, seen: Callable[[Key], Pod | None], now: float, exclude: Key | None = None) -> dict[Key, Pod]:
        """The claims of jobs other than `exclude` that stand over the pods as `seen` (the version each shows, or
        None). Claims the view has caught up with (a newer resourceVersion) or older than CLAIM_SECONDS are
        dropped for good."""
        out: dict[Key, Pod] = {}
        for k, c in list(self.by_pod.items()):
            have = seen(k)
            if now - c.at > CLAIM_SECONDS or (have is not None and resource_version(have) > resource_version(c.pod)):
                del self.by_pod[k]
            elif c.job != exclude:
                out[k] = c.pod
        return out


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
