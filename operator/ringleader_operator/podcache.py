"""What the operator knows of pods without asking the API server: the in-memory indexes of pods (`PodIndexes`,
filled and kept current by the operator's own pod watch, podwatch.py), overlaid with the pods the operator
itself wrote and the watch has not delivered yet. Both hold each pod's digest: the few fields the operator reads.

A read from here may be a moment behind the API server; the reconcile is built for that (each pod carries the
attempt it was made for, creates of an existing pod count as done, deletes of a gone one too). The overlay
keeps the operator from acting twice on its own writes: a pod it just released from the gang gate is not
weighed as still gated, a pod it just created is not created again. An overlay entry goes once the watch has
delivered that version or a newer one, or after OVERLAY_SECONDS. The periodic resync reads pods from the API
server instead, so whatever a watch gap left behind in the index is corrected within one resync period.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol

import orjson
from ringleader_api import GROUP

from .changelog import ChangeLog, PodDelta
from .failures import START_FAILURES

OVERLAY_SECONDS = 60.0
GONE_SECONDS = 60.0  # how long the last state of a deleted pod is kept for the rounds after its deletion
Key = tuple[str, str]
Pod = dict[str, Any]
Group = tuple[str, str | None]  # (namespace, the value of a label or None)


# What of a pod the operator reads (reconcile.ObservedPod, reconcile.earlier_job_leftovers, admission, progress).
META_KEYS = ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp", "ownerReferences")
OWN_ANNOTATIONS = f"{GROUP}/"
SPEC_KEYS = ("nodeName", "schedulingGates", "schedulingGroup", "nodeSelector", "tolerations", "overhead")
STATUS_KEYS = ("phase", "reason", "podIP", "startTime")


def _pick(obj: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: obj[k] for k in keys if k in obj}


OUTPUT_CHARACTERS = 1000  # of a failed container's termination message (its last lines), the end kept


def _container_end(container_status: Mapping[str, Any]) -> dict[str, Any]:
    """A container status with only its name and, once it ended, its exit code, reason, end time and the end of
    its message; or, while it waits for a reason that says it will not start (an image not pulled), that reason
    and the start of its message."""
    term = (container_status.get("state") or {}).get("terminated")
    state = {"terminated": _pick(term, ("exitCode", "reason", "finishedAt"))} if term else {}
    if term and term.get("message"):
        state["terminated"]["message"] = str(term["message"])[-OUTPUT_CHARACTERS:]
    waiting = (container_status.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in START_FAILURES:
        state["waiting"] = {
            "reason": waiting["reason"],
            "message": str(waiting.get("message") or "")[:OUTPUT_CHARACTERS],
        }
    return {"name": container_status.get("name"), "state": state}


def digest(pod: Mapping[str, Any]) -> Pod:
    """The parts of `pod` the operator reads, and nothing else: a pod as the API serves it is mostly volumes,
    env, container details and managedFields, and the cache holds one of these for every pod it watches.
    Every pod the reconciler weighs passes through here, from the cache and from fresh reads alike, so a
    field left out is missing from both (tests/unit/operator/test_podcache.py checks that decisions made on
    digests equal those made on whole pods)."""
    meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    out_meta = _pick(meta, META_KEYS)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(OWN_ANNOTATIONS)}
    if annotations:
        out_meta["annotations"] = annotations
    out_spec = _pick(spec, SPEC_KEYS)
    for kind in ("containers", "initContainers"):
        if kind in spec:
            out_spec[kind] = [{"name": c.get("name"), "resources": c.get("resources") or {}} for c in spec[kind]]
    out_status = _pick(status, STATUS_KEYS)
    if "conditions" in status:
        out_status["conditions"] = [_pick(c, ("type", "status", "reason")) for c in status["conditions"]]
    if "containerStatuses" in status:  # only how a container ended is read
        out_status["containerStatuses"] = [_container_end(cs) for cs in status["containerStatuses"]]
    for part, keys in ((out_meta, SHARED_META), (out_spec, SHARED_SPEC), (out_status, SHARED_STATUS)):
        for k in keys:
            if k in part:
                part[k] = shared(part[k])
    return {"metadata": out_meta, "spec": out_spec, "status": out_status}


# The parts of a digest that most pods have alike (a job's pods share their owner, tolerations, containers and,
# once running, their conditions): one object serves them all. A digest held 6 KB of copies of them per pod.
SHARED_META = ("ownerReferences", "annotations")
SHARED_SPEC = ("nodeSelector", "tolerations", "containers", "initContainers", "schedulingGates", "overhead")
SHARED_STATUS = ("conditions", "containerStatuses")
SHARED_LIMIT = 4096  # distinct parts kept to share; past it the table starts again (what is shared stays so)
SHARED_BYTES = 512  # a part longer than this as JSON is kept as it is: rarely alike (a termination message)


class Shared:
    """Hands out one object for equal JSON parts (by their serialization). Digests share what it returns:
    nothing may change a digest, or a part of one, in place."""

    def __init__(self, limit: int = SHARED_LIMIT) -> None:
        self.limit = limit
        self.parts: dict[bytes, Any] = {}

    def __call__(self, value: Any) -> Any:
        k = orjson.dumps(value)
        if len(k) > SHARED_BYTES:
            return value
        have = self.parts.get(k)
        if have is None:
            if len(self.parts) >= self.limit:
                self.parts.clear()
            self.parts[k] = have = value
        return have


shared = Shared()


def key(pod: Mapping[str, Any]) -> Key:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def resource_version(obj: Mapping[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd's revision; 0 when it is not one)."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


Written = dict[Key, tuple[float, Pod]]  # (namespace, name) -> (when, the pod as the write returned it)


def overlay(indexed: Iterable[Pod], groups: Iterable[Written], now: float) -> list[Pod]:
    """The indexed pods with the newer written versions (of `groups`) in their place and written pods the index
    lacks added. Written entries the index has caught up with, or older than OVERLAY_SECONDS, are dropped. With
    nothing written, the indexed pods as they are (a running job's rounds: no dict of its 10,000 pods each)."""
    groups = [written for written in groups if written]
    if not groups:
        return list(indexed)
    out = {key(p): p for p in indexed}
    for written in groups:
        out |= _unseen(written, out.get, now)
    return list(out.values())


def _unseen(written: Written, seen: Callable[[Key], Pod | None], now: float) -> dict[Key, Pod]:
    """The entries of `written` newer than the version `seen` shows (None: none), as written. Entries it has caught
    up with (the watch delivered them, or something newer), or older than OVERLAY_SECONDS, are dropped."""
    out: dict[Key, Pod] = {}
    for k, (at, pod) in list(written.items()):
        have = seen(k)
        if now - at > OVERLAY_SECONDS or (have is not None and resource_version(have) >= resource_version(pod)):
            del written[k]
        else:
            out[k] = pod
    return out


class PodCache:
    """The pod watch's index (key: (namespace, job label or None)) plus the operator's own recent writes, kept under
    the same keys so that reading one job's pods looks only at that job's writes."""

    def __init__(self, label: str, indexes: PodIndexes | None = None) -> None:
        """`indexes`: the pod watch's, read once it has listed the pods (`listed`)."""
        self.label, self.indexes = label, indexes
        self.index: Grouped | None = None  # the pods by job: attached once the pod watch has listed the pods
        self.written: dict[tuple[str, str | None], Written] = {}
        # (namespace, job) -> pod name -> its last state, and the order they came in (to expire them)
        self.gone: dict[tuple[str, str], dict[str, Pod]] = {}
        self._gone_order: deque[tuple[float, tuple[str, str], str]] = deque()

    @property
    def ready(self) -> bool:
        return self.index is not None

    def listed(self) -> None:
        """The pod watch has listed every pod: rounds read the job's pods from its index from now on."""
        assert self.indexes is not None
        self.index = self.indexes.by_job

    def wrote(self, pod: Mapping[str, Any], now: float) -> None:
        """Remember a pod as a write returned it (create, patch)."""
        k = key(pod)
        if k[1]:
            job = ((pod.get("metadata") or {}).get("labels") or {}).get(self.label)
            self.written.setdefault((k[0], job), {})[k] = (now, digest(pod))

    def deleted(self, pod: Mapping[str, Any], now: float) -> None:
        """Keep the last state of a job's pod the watch saw deleted, for GONE_SECONDS: a pod's final status
        (how its program ended) can arrive just before its deletion, after the round it woke had looked. What this
        process wrote of it goes: a pod written and deleted before any read compared the two would otherwise
        stand, a phantom taking room in every admission, until OVERLAY_SECONDS passed."""
        self._expire(now)
        (namespace, name), job = key(pod), ((pod.get("metadata") or {}).get("labels") or {}).get(self.label)
        written = self.written.get((namespace, job))
        if written is not None:
            written.pop((namespace, name), None)
        if name and job:
            self.gone.setdefault((namespace, job), {})[name] = digest(pod)
            self._gone_order.append((now, (namespace, job), name))

    def job_gone(self, namespace: str, job: str, now: float) -> list[Pod]:
        """The last states of the job's pods deleted within GONE_SECONDS."""
        self._expire(now)
        return list(self.gone.get((namespace, job), {}).values())

    def _expire(self, now: float) -> None:
        """Drop what was deleted more than GONE_SECONDS ago: each entry once, in the order they came."""
        while self._gone_order and now - self._gone_order[0][0] > GONE_SECONDS:
            _, group, name = self._gone_order.popleft()
            pods = self.gone.get(group, {})
            pods.pop(name, None)
            if not pods:
                self.gone.pop(group, None)

    def job_pods(self, namespace: str, job: str, now: float) -> list[Pod]:
        assert self.index is not None
        group = (namespace, job)
        out = overlay(self.index.get(group, ()), [self.written.get(group, {})], now)
        if not self.written.get(group, True):
            del self.written[group]
        return out

    def job_pods_since(
        self, namespace: str, job: str, now: float, since: tuple[object, int] | None
    ) -> tuple[list[Pod], PodDelta | None]:
        """`job_pods`, and what changed among them since revision `since` of the index (source, revision), as
        PodDelta; None when the pods are not the index's alone (this process wrote some the watch has not
        delivered) or there are none."""
        pods = self.job_pods(namespace, job, now)
        assert self.index is not None
        if (namespace, job) in self.written:
            return pods, None
        return pods, self.index.delta((namespace, job), since[1] if since and since[0] is self.index else None)

    def newer_written(self, now: float) -> dict[Key, Pod]:
        """Every pod this process wrote that the index has not caught up with, as written (what the ledger of room
        is to count in place of the indexed version). Entries the index has caught up with, or older than
        OVERLAY_SECONDS, are dropped (`_unseen`, as by `overlay`)."""
        assert self.index is not None
        out: dict[Key, Pod] = {}
        for group, written in list(self.written.items()):
            out |= _unseen(written, self.index.pod, now)
            if not written:
                del self.written[group]
        return out


class Grouped(Mapping[Group, Collection[Pod]]):
    """Pod digests grouped by (namespace, the value of `label`): the groups podcache.PodCache and the progress
    scraper read. `accept` picks the pods kept (all by default).

    Each group has a revision, the index's count of changes when it last changed, and remembers its last
    CHANGE_LOG changes by pod name (`delta`): a job's round looks at the pods that changed since its last."""

    def __init__(self, label: str, accept: Callable[[Mapping[str, str]], bool] = lambda _: True) -> None:
        self.label, self.accept = label, accept
        self._groups: dict[Group, dict[str, Pod]] = {}
        self._where: dict[Key, Group] = {}  # each kept pod's group: a pod whose label changed moves
        self._log = ChangeLog()  # each group's recent changes by pod name

    def __getitem__(self, group: Group) -> Collection[Pod]:
        return self._groups[group].values()

    def __iter__(self) -> Iterator[Group]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def pods(self) -> int:
        return len(self._where)

    def put(self, pod: Pod) -> None:
        """Keep `pod` (a digest) in its group, or drop it if it is no longer accepted."""
        k = key(pod)
        labels = pod["metadata"].get("labels") or {}
        if not self.accept(labels):
            self.remove(k)
            return
        group = (k[0], labels.get(self.label))
        if self._where.get(k, group) != group:
            self.remove(k)
        self._groups.setdefault(group, {})[k[1]] = pod
        self._where[k] = group
        self._log.changed(group, k[1])

    def remove(self, k: Key) -> None:
        group = self._where.pop(k, None)
        if group is not None:
            pods = self._groups[group]
            pods.pop(k[1], None)
            self._log.changed(group, k[1])
            if not pods:
                del self._groups[group]
                self._log.forget(group)

    def delta(self, group: Group, since: int | None) -> PodDelta | None:
        """The group's revision and, when `since` is one of its revisions still remembered, the pods changed
        after it (changelog.ChangeLog); None when the group has no pods."""
        found = self._log.since(group, since)
        if found is None:
            return None
        revision, names = found
        if names is None:
            return PodDelta(self, revision)
        pods = self._groups[group]
        return PodDelta(self, revision, since, {name: pods.get(name) for name in names})

    def keys_in(self, namespace: str | None) -> list[Key]:
        """The kept pods of `namespace` (None: all)."""
        return [k for k in self._where if namespace is None or k[0] == namespace]

    def pod(self, k: Key) -> Pod | None:
        """The kept digest of pod `k`, if any."""
        group = self._where.get(k)
        return None if group is None else self._groups[group][k[1]]


class Keeper(Protocol):
    """Something else kept pod by pod from the same events (admission.Ledger)."""

    def put(self, k: Key, pod: Pod) -> None: ...

    def remove(self, k: Key) -> None: ...


class PodIndexes:
    """The indexes one watch keeps: every pod by (namespace, job label), the worker-0 pods the same way, and
    whatever `also` keeps from the same events."""

    def __init__(self, job_label: str, role_label: str, index_label: str, also: Keeper | None = None) -> None:
        self.by_job = Grouped(job_label)
        self.first_workers = Grouped(
            job_label, lambda lb: lb.get(role_label) == "worker" and lb.get(index_label) == "0"
        )
        self.also = also

    def apply(self, kind: str, pod: Pod) -> None:
        k = key(pod)
        if kind == "DELETED":
            self.by_job.remove(k)
            self.first_workers.remove(k)
            if self.also is not None:
                self.also.remove(k)
        else:
            self.by_job.put(pod)
            self.first_workers.put(pod)
            if self.also is not None:
                self.also.put(k, pod)

    def relisted(self, namespace: str | None, listed: list[Pod]) -> list[tuple[str, Pod]]:
        """Take a new list of `namespace`'s pods (None: the cluster's) in place of what was kept; returns what
        changed as events: (DELETED, last digest) for pods gone, (ADDED or MODIFIED, digest) for pods new or
        of another resourceVersion."""
        fresh = {key(p): p for p in listed}
        events: list[tuple[str, Pod]] = []
        for k in self.by_job.keys_in(namespace):  # by_job keeps every pod: its digests are the last seen
            last = self.by_job.pod(k)
            if k not in fresh and last is not None:
                events.append(("DELETED", last))
        for k, pod in fresh.items():
            before = self.by_job.pod(k)
            if before is None:
                events.append(("ADDED", pod))
            elif before["metadata"].get("resourceVersion") != pod["metadata"].get("resourceVersion"):
                events.append(("MODIFIED", pod))
        for kind, pod in events:
            self.apply(kind, pod)
        return events
