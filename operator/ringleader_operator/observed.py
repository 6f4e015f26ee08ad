"""What a round observes of a job's pods: which are its ranks (and which only carry its labels), each rank
pod's state as the decisions need it, and what an earlier job of the same name left behind. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from ringleader_api import ANNOTATION_ATTEMPT, KIND, MANAGED_BY_RINGLEADER, Role, TrainingJob

from . import evidence
from .admission import gated
from .failures import START_FAILURES, Failure, Kind, classify
from .names import ANNOTATION_WORKERS, pod_name, rank_of


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utcnow() -> str:
    """Now, as status times are written (RFC 3339, whole seconds)."""
    return format_time(datetime.now(UTC))


@dataclass(frozen=True, slots=True)  # slots: a 10,000-rank job's rounds keep one per pod (Observations)
class ObservedPod:
    name: str
    role: Role
    index: int
    phase: str
    ready: bool
    exit_code: int | None
    reason: str  # pod.status.reason, else the failing container's terminated reason
    disruption: str  # the DisruptionTarget condition's reason, when Kubernetes set one
    attempt: int | None  # None for a pod made before attempts were recorded: taken as the current one
    workers: int | None  # the world it was made for; None for a pod made before worlds were recorded
    deletion_deadline: str | None  # metadata.deletionTimestamp: set once the pod is being deleted
    ended: bool = False  # the pod is done (Succeeded/Failed) or a container terminated with a non-zero code
    output: str = ""  # the failed container's termination message: its last lines (FallbackToLogsOnError)
    gated: bool = False  # it carries the gang gate (admission.GATE)
    node: str = ""  # spec.nodeName
    finished_at: str | None = None  # the failed container's finishedAt
    # A container waiting for a reason that says it will not start (failures.START_FAILURES), with the kubelet's
    # message: `ImagePullBackOff: Back-off pulling image "x"`; empty otherwise.
    start_error: str = ""

    @classmethod
    def from_pod(cls, pod: dict[str, Any]) -> ObservedPod | None:
        """None for a pod without valid rank labels (not ours to manage)."""
        meta = pod.get("metadata") or {}
        rank = rank_of(pod)
        if rank is None:
            return None
        role, index = rank
        annotations = meta.get("annotations") or {}
        attempt, workers = _count(annotations, ANNOTATION_ATTEMPT), _count(annotations, ANNOTATION_WORKERS)
        status = pod.get("status") or {}
        exit_code, reason, output, finished_at = _failed_container(status)
        start_error = next(filter(None, map(_start_error, status.get("containerStatuses") or [])), "")
        conditions = status.get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        disruption = next(
            (
                c.get("reason") or ""
                for c in conditions
                if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
            ),
            "",
        )
        return cls(
            name=meta.get("name", ""),
            role=role,
            index=index,
            phase=status.get("phase") or "Pending",
            ready=ready,
            exit_code=exit_code,
            reason=status.get("reason") or reason,
            disruption=disruption,
            attempt=attempt,
            workers=workers,
            deletion_deadline=meta.get("deletionTimestamp"),
            ended=exit_code is not None or status.get("phase") in ("Succeeded", "Failed"),
            output=output,
            gated=gated(pod),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            finished_at=finished_at,
            start_error=start_error,
        )

    @property
    def deleting(self) -> bool:
        return self.deletion_deadline is not None

    def start_failure(self) -> Failure | None:
        """Why the pod's container will not start (failures.START_FAILURES), None while nothing says so."""
        if not self.start_error or self.ended:
            return None
        reason = self.start_error.split(":", 1)[0]
        return Failure(Kind.NOT_STARTED, None, self.start_error, reason=reason, node=self.node)

    def failure(self) -> Failure:
        """Why the pod stopped, where and when, and what it said of it (its termination message)."""
        found = classify(self.exit_code, self.reason, self.disruption)
        said = evidence.read(self.output) if self.output else evidence.Said()
        return dataclasses.replace(found, node=self.node, at=self.finished_at, said=said)


START_MESSAGE_CHARACTERS = 300  # of the kubelet's message on a container that will not start (a pod's word)


def _count(annotations: Mapping[str, Any], key: str) -> int | None:
    """The whole number annotation `key` holds, None when it is absent or not one."""
    try:
        return int(annotations[key])
    except (KeyError, ValueError, TypeError):
        return None


def _failed_container(status: Mapping[str, Any]) -> tuple[int | None, str, str, str | None]:
    """The first container that ended with a non-zero code: (its exit code, reason, message, finishedAt), or
    (None, "", "", None)."""
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            finished = term.get("finishedAt") if isinstance(term.get("finishedAt"), str) else None
            return int(term["exitCode"]), term.get("reason") or "", str(term.get("message") or ""), finished
    return None, "", "", None


def _start_error(container_status: Mapping[str, Any]) -> str:
    """`reason: message` of a container waiting for a reason that says it will not start, else empty."""
    waiting = (container_status.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason")
    if reason not in START_FAILURES:
        return ""
    message = " ".join(str(waiting.get("message") or "").split())[:START_MESSAGE_CHARACTERS]
    return f"{reason}: {message}" if message else str(reason)


FOREIGN_PODS_NAMED = 5  # pods named in the event about foreign pods; the rest are counted


class Seen(Protocol):
    """What earlier rounds of a job observed of its pods (rankbook.Observations), for `own_ranks` to reuse."""

    job_uid: str  # whose rank each observation judged (a job made again under its name is another)
    kept: dict[tuple[Any, Any], tuple[ObservedPod | None, bool]]  # by (uid, resourceVersion)


def own_ranks(
    job: TrainingJob, pods: list[dict[str, Any]], seen: Seen | None = None
) -> tuple[list[ObservedPod], list[str]]:
    """The job's ranks among `pods` (the pods carrying its job label), and the names of the others.

    A rank is a pod with valid rank labels whose controller is this job (by UID) and whose name is that rank's
    name. A pod that only carries the labels (made by hand, by another controller) is never counted, restarted
    or deleted: two such pods marked Succeeded must not finish the job. `seen`: what earlier rounds of this job
    observed, reused for pods of the same version (and updated)."""
    uid = str(job.metadata.get("uid", ""))
    ranks, foreign = [], []
    kept = seen.kept if seen is not None and seen.job_uid == uid else {}
    now: dict[tuple[Any, Any], tuple[ObservedPod | None, bool]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        version = (meta.get("uid"), meta.get("resourceVersion")) if meta.get("resourceVersion") else None
        found = kept.get(version) if version is not None and version[0] else None
        if found is None:
            found = _observe(job, uid, pod, meta)
        if version is not None and version[0]:
            now[version] = found
        rank, owned = found
        if rank is not None and owned:
            ranks.append(rank)
        else:
            foreign.append(str(meta.get("name", "")))
    if seen is not None:
        seen.job_uid, seen.kept = uid, now
    return ranks, sorted(foreign)


def _observe(job: TrainingJob, uid: str, pod: dict[str, Any], meta: dict[str, Any]) -> tuple[ObservedPod | None, bool]:
    """The pod as a rank, and whether it is one of `job`'s (controlled by it, named as its rank)."""
    rank = ObservedPod.from_pod(pod)
    controlled = any(
        o.get("controller") and o.get("kind") == KIND and o.get("uid") == uid for o in meta.get("ownerReferences") or []
    )
    return rank, rank is not None and controlled and rank.name == pod_name(job.name, rank.role, rank.index)


def foreign_pods_message(names: list[str]) -> str:
    """The Warning event's message for pods carrying a job's labels that are not its ranks (a few named)."""
    shown = ", ".join(names[:FOREIGN_PODS_NAMED])
    more = f" and {len(names) - FOREIGN_PODS_NAMED} more" if len(names) > FOREIGN_PODS_NAMED else ""
    return (
        f"{len(names)} pods carry this job's labels but are not its ranks (not controlled by it, or not named as "
        f"one); ignored: {shown}{more}"
    )


def earlier_job_leftovers(job_uid: str, objects: list[dict[str, Any]]) -> list[str]:
    """Names of the pods and Service among `objects` that a deleted TrainingJob of the same name still owns.

    Deleting a job leaves its pods and Service to the garbage collector, which removes them shortly after;
    a job created again under the same name meanwhile would take the old, finished pods for its own (and be
    Succeeded at once) and find every name it creates taken. Its round waits until these are gone."""
    out = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == KIND]
        if owners and all(o.get("uid") != job_uid for o in owners):
            out.append(str(meta.get("name", "")))
    return out


def managed_elsewhere(obj: Mapping[str, Any]) -> bool:
    """Whether the job's spec.managedBy names another controller (read from the raw object: such a job's spec is
    that controller's to check)."""
    managed_by = (obj.get("spec") or {}).get("managedBy")
    return managed_by not in (None, "", MANAGED_BY_RINGLEADER)
