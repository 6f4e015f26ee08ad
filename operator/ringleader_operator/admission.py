"""Gang admission, pure: may a job's gated pods be released to the scheduler all at once?

A job's pods are created with the scheduling gate GATE, so the scheduler does not look at them. The gate is
lifted from all of them together, and only when a simulated placement (placement.py) puts every one of them on a
node at the same time: nodes' allocatable minus the requests of the pods bound to them, after the pods already
released but not yet bound (any job's) have taken their places. The scheduler still makes the real placement; a
release is only ever granted when room exists for the whole gang, and the operator grants one job at a time, so
two jobs that fit alone but not together never both hold half their pods.

Here: the gate, the nodes as admission sees them, and the room the cluster's pods take (`Room`, kept pod by pod
in a `Ledger`), over which `Cluster` is what a decision weighs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringleader_api import LABEL_JOB

from .podcache import Group, Key, key
from .quantities import Resources, add, pod_requests

GATE = "ringleader.dev/gang"
# What pods of the cluster reserve, by (uid, resourceVersion): a version's spec never changes, and every gang
# admission weighs every pod of the cluster, whose requests were otherwise parsed again each time. Cleared
# whole when it reaches _MEMO_LIMIT entries (old versions are never asked for again).
_requests_memo: dict[tuple[str, str], Resources] = {}
_MEMO_LIMIT = 100_000


def _pod_reserves(pod: Mapping[str, Any]) -> Resources:
    """pod_requests of a pod object, remembered by its uid and resourceVersion when it has both. The result is
    shared: read it, never change it."""
    meta = pod.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not uid or not version:
        return pod_requests(pod.get("spec") or {})
    key = (str(uid), str(version))
    found = _requests_memo.get(key)
    if found is None:
        if len(_requests_memo) >= _MEMO_LIMIT:
            _requests_memo.clear()
        found = _requests_memo[key] = pod_requests(pod.get("spec") or {})
    return found


@dataclass
class Node:
    name: str
    labels: Mapping[str, str]
    taints: list[Mapping[str, Any]]
    allocatable: Resources
    free: Resources = field(default_factory=dict)


def node_digest(node: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Node admission reads (name, labels, taints, unschedulable, allocatable, Ready), for the
    operator's node index: a Node as served is mostly images, addresses and managedFields."""
    meta, spec, status = (node.get(k) or {} for k in ("metadata", "spec", "status"))
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return {
        "metadata": {"name": meta.get("name", ""), "labels": meta.get("labels") or {}},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {"allocatable": status.get("allocatable") or {}, "conditions": ready},
    }


@dataclass(frozen=True)
class NodeRoom:
    """What a node offers gang admission: whether pods may go to it, and its allocatable resources."""

    usable: bool
    allocatable: tuple[tuple[str, str], ...]


def node_room(node: Mapping[str, Any]) -> NodeRoom:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return NodeRoom(usable(node), tuple(sorted((str(k), str(v)) for k, v in allocatable.items())))


def usable(node: Mapping[str, Any]) -> bool:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return ready and not spec.get("unschedulable")


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def fits_node(spec: Mapping[str, Any], node: Node) -> bool:
    selector = spec.get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    tolerations = spec.get("tolerations") or []
    return all(_tolerates(tolerations, t) for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute"))


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether the pod still carries the gang gate."""
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def gated_names(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The names of the pods that still carry the gang gate."""
    return {str((x.get("metadata") or {}).get("name", "")) for x in pods if gated(x)}


def lift_gate(pod: dict[str, Any]) -> None:
    """Take the gang gate off a pod about to be created (other gates stay; an empty list goes)."""
    spec = pod["spec"]
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)


def _bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _group(pod: Mapping[str, Any]) -> Group:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), (meta.get("labels") or {}).get(LABEL_JOB)


@dataclass(frozen=True, slots=True)
class Part:
    """What one pod takes for admission: the room its requests reserve on the node it is bound to (terminating
    too: the scheduler counts it until it is gone); or, released and not yet bound, a place wherever it would go
    (`spec`); or nothing while it holds the gang gate (`gated`: its job's gang waits). `group`: its job's."""

    group: Group
    node: str | None = None
    reserves: Resources | None = None
    spec: Mapping[str, Any] | None = None
    gated: bool = False


def part(pod: Mapping[str, Any]) -> Part | None:
    """What `pod` takes (None: nothing: finished, held back by someone else's gate, or going before it was bound)."""
    spec = pod.get("spec") or {}
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    if gated(pod):
        return Part(_group(pod), gated=True)
    if _bound(pod):
        return Part(_group(pod), node=str(spec["nodeName"]), reserves=_pod_reserves(pod))
    if spec.get("schedulingGates") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    return Part(_group(pod), spec=spec)


@dataclass(frozen=True)
class Room:
    """What the cluster's pods take, summed: per node, the requests of the pods bound to it; the specs of the
    pods released but not yet bound (their room is spoken for wherever they would go); and per job, how many of
    its pods hold the gang gate."""

    bound: Mapping[str, Resources]
    waiting: Mapping[Key, Mapping[str, Any]]
    gated: Mapping[Group, int]

    @classmethod
    def of(cls, pods: Iterable[Mapping[str, Any]]) -> Room:
        """The room `pods` (every pod of the cluster, as API objects or digests) take. A pod without a name (one
        built, not read) is told apart by its place in `pods`."""
        ledger = Ledger()
        for i, pod in enumerate(pods):
            k = key(pod)
            ledger.put(k if k[1] else (k[0], f"#{i}"), pod)
        return ledger.view()

    def gangs_waiting_besides(self, group: Group) -> bool:
        """Whether a job other than `group` has pods held by the gang gate."""
        return any(n for g, n in self.gated.items() if g != group)


class Ledger:
    """Room kept up to date pod by pod (the pod watch's events): `view` hands admission the sums without a pass
    over the cluster's pods, which a new job's admission otherwise made once per round, so that a thousand jobs
    starting together cost a thousand passes over every pod. Sums are exact (Decimal): a ledger kept through
    any order of events equals `Room.of` the pods it was told of."""

    def __init__(self) -> None:
        self.parts: dict[Key, Part] = {}
        self.groups: dict[Group, set[Key]] = {}
        self.bound: dict[str, Resources] = {}  # each node's sum is replaced, never changed: views share them
        self.waiting: dict[Key, Mapping[str, Any]] = {}
        self.gated: Counter[Group] = Counter()

    def put(self, k: Key, pod: Mapping[str, Any]) -> None:
        """Pod `k` is now `pod`."""
        self._set(k, part(pod))

    def remove(self, k: Key) -> None:
        """Pod `k` is gone."""
        self._set(k, None)

    def _set(self, k: Key, new: Part | None) -> None:
        old = self.parts.pop(k, None)
        if old is not None:
            _count(self.bound, self.waiting, self.gated, k, old, -1)
            keys = self.groups[old.group]
            keys.discard(k)
            if not keys:
                del self.groups[old.group]
        if new is not None:
            self.parts[k] = new
            _count(self.bound, self.waiting, self.gated, k, new, 1)
            self.groups.setdefault(new.group, set()).add(k)

    def view(self, changes: Mapping[Key, Mapping[str, Any] | None] | None = None, without: Group | None = None) -> Room:
        """The room as it stands with `changes` (pods in other versions than the ledger was told of; None: gone)
        and without the pods of job `without`: costs the nodes, the waiting pods and the pods named, not the
        cluster's pods."""
        bound, waiting, gated = dict(self.bound), dict(self.waiting), Counter(self.gated)
        other: dict[Key, Part | None] = {k: None if pod is None else part(pod) for k, pod in (changes or {}).items()}
        if without is not None:  # its kept pods (unless changed) and its changed ones
            other |= {k: None for k in self.groups.get(without, ()) if k not in other}
            other |= {k: None for k, p in other.items() if p is not None and p.group == without}
        for k, new in other.items():
            old = self.parts.get(k)
            if old is not None:
                _count(bound, waiting, gated, k, old, -1)
            if new is not None:
                _count(bound, waiting, gated, k, new, 1)
        return Room(bound, waiting, +gated)


def _count(
    bound: dict[str, Resources],
    waiting: dict[Key, Mapping[str, Any]],
    gated: Counter[Group],
    k: Key,
    p: Part,
    sign: int,
) -> None:
    """Add (sign 1) or take away (-1) what part `p` of pod `k` takes."""
    if p.node is not None and p.reserves is not None:
        total = dict(bound.get(p.node, {}))
        add(total, p.reserves, sign)
        total = {r: v for r, v in total.items() if v}
        if total:
            bound[p.node] = total
        else:
            bound.pop(p.node, None)
    elif p.spec is not None:
        if sign > 0:
            waiting[k] = p.spec
        else:
            waiting.pop(k, None)
    elif p.gated:
        gated[p.group] += sign
        if gated[p.group] <= 0:
            del gated[p.group]


@dataclass(frozen=True)
class Cluster:
    """What admission looks at: every Node, and what every pod in every namespace takes: from `pods` (API objects
    or digests), or, when the operator keeps a `Ledger`, from `rooms` (the room without a job's pods, or all)."""

    nodes: list[dict[str, Any]]
    pods: Sequence[Mapping[str, Any]] = ()
    rooms: Callable[[Group | None], Room] | None = None

    def room(self, without: Group | None = None) -> Room:
        """What the pods take, those of job `without` left out."""
        if self.rooms is not None:
            return self.rooms(without)
        return Room.of(p for p in self.pods if without is None or _group(p) != without)
