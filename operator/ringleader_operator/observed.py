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
    """What earlier rounds of a job observed of its pods (rankbook.Observations), for `own_ranks` to reuse and keep."""

    job_uid: str  # whose rank each observation judged (a job made again under its name is another)
    kept: dict[str, Kept]  # by pod name
    ranks: dict[str, ObservedPod]  # the job's ranks among them, by name, in the pods' order
    foreign: set[str]  # the names of the others
    revision: tuple[object, int] | None  # the pod index's (podcache.PodDelta) the observations are of; None: unknown
    changed: set[str] | None  # the ranks (by name) whose observation the last call changed; None: it read all
    listed: list[ObservedPod] | None  # the ranks as the last call returned them (read-only)


Kept = tuple[tuple[Any, Any], ObservedPod | None, bool]  # a pod's (uid, resourceVersion), its rank, whether owned


class Delta(Protocol):
    """What changed among the pods since the revision `seen` holds (podcache.PodDelta)."""

    @property
    def source(self) -> object: ...

    @property
    def revision(self) -> int: ...

    @property
    def since(self) -> int | None: ...

    @property
    def changed(self) -> dict[str, dict[str, Any] | None] | None: ...


def own_ranks(
    job: TrainingJob, pods: list[dict[str, Any]], seen: Seen | None = None, delta: Delta | None = None
) -> tuple[list[ObservedPod], list[str]]:
    """The job's ranks among `pods` (the pods carrying its job label), and the names of the others.

    A rank is a pod with valid rank labels whose controller is this job (by UID) and whose name is that rank's
    name. A pod that only carries the labels (made by hand, by another controller) is never counted, restarted
    or deleted: two such pods marked Succeeded must not finish the job. `seen`: what earlier rounds of this job
    observed, reused for pods of the same version (and updated). `delta`: what changed among `pods` since the
    revision `seen` holds, if it can say: then only those pods are looked at."""
    uid = str(job.metadata.get("uid", ""))
    if seen is not None and seen.job_uid == uid and _from_delta(job, uid, seen, delta):
        if seen.changed or seen.listed is None:  # the list as last returned while no rank changed (the same object)
            seen.listed = list(seen.ranks.values())
        return seen.listed, sorted(seen.foreign)
    ranks, foreign = [], []
    kept = seen.kept if seen is not None and seen.job_uid == uid else {}
    now: dict[str, Kept] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        entry = _entry(job, uid, pod, meta, kept)
        now[_name(meta)] = entry
        if (rank := _rank(entry)) is not None:
            ranks.append(rank)
        else:
            foreign.append(_name(meta))
    if seen is not None:
        seen.job_uid, seen.kept, seen.changed, seen.listed = uid, now, None, ranks
        seen.ranks = {r.name: r for r in ranks}
        seen.foreign = set(foreign)
        # A delta next time only where these pods are the index's revision, each name once.
        whole = delta is not None and len(now) == len(pods) and len(seen.ranks) == len(ranks)
        seen.revision = (delta.source, delta.revision) if whole and delta is not None else None
    return ranks, sorted(foreign)


def _name(meta: Mapping[str, Any]) -> str:
    return str(meta.get("name", ""))


def _entry(job: TrainingJob, uid: str, pod: dict[str, Any], meta: dict[str, Any], kept: dict[str, Kept]) -> Kept:
    """The pod's observation: the one kept of this version, else made now."""
    version = (meta.get("uid"), meta.get("resourceVersion"))
    before = kept.get(_name(meta))
    if before is not None and before[0] == version and version[0] and version[1]:
        return before
    return (version, *_observe(job, uid, pod, meta))


def _from_delta(job: TrainingJob, uid: str, seen: Seen, delta: Delta | None) -> bool:
    """Bring `seen` up to date by `delta` alone, where it follows on from the revision `seen` holds; False (nothing
    changed) where it cannot and the caller reads every pod. A pod made again under its name, or one that became or
    ceased to be a rank, is read whole too, as are two or more new ranks: a rank's place among the ranks is its
    place among the pods, which the index alone knows (one pod new to it comes last, as here)."""
    if delta is None or delta.changed is None or seen.revision != (delta.source, delta.since):
        return False
    entries = {
        name: None if pod is None else _entry(job, uid, pod, pod.get("metadata") or {}, seen.kept)
        for name, pod in delta.changed.items()
    }
    new = 0
    for name, entry in entries.items():
        before = seen.kept.get(name)
        if before is not None and entry is not None and _moved(before, entry):
            return False
        new += before is None and entry is not None and _rank(entry) is not None
    if new > 1:  # their order among themselves is the index's, which the delta does not carry
        return False
    changed = set()
    for name, entry in entries.items():
        if entry is None:
            seen.kept.pop(name, None)
            seen.foreign.discard(name)
            if seen.ranks.pop(name, None) is not None:
                changed.add(name)
            continue
        seen.kept[name] = entry
        if (rank := _rank(entry)) is not None:
            if seen.ranks.get(name) is not rank:
                seen.ranks[name] = rank
                changed.add(name)
        else:
            seen.foreign.add(name)
    seen.revision, seen.changed = (delta.source, delta.revision), changed
    return True


def _moved(before: Kept, entry: Kept) -> bool:
    """The pod was made again under its name (another uid), or became or ceased to be a rank."""
    return before[0][0] != entry[0][0] or (_rank(before) is None) != (_rank(entry) is None)


def _rank(entry: Kept) -> ObservedPod | None:
    """The pod's rank where it is one of the job's, else None."""
    return entry[1] if entry[2] else None


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
