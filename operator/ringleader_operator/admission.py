"""Gang admission, pure: may a job's gated pods be released to the scheduler all at once?

A job's pods are created with the scheduling gate GATE, so the scheduler does not look at them. The gate is
lifted from all of them together, and only when a simulated placement puts every one of them on a node at
the same time: nodes' allocatable minus the requests of the pods bound to them, after the pods already
released but not yet bound (any job's) have taken their places. Placement is first-fit, biggest pods first
(GPUs, then CPU, then memory), and honours what a scheduler would refuse outright: cordoned or not-Ready
nodes, taints the pod does not tolerate, a nodeSelector that does not match. The scheduler still makes the
real placement; a release is only ever granted when room exists for the whole gang, and the operator grants
one job at a time, so two jobs that fit alone but not together never both hold half their pods.

With a topology (`spec.placement`), the gang is placed within the nodes of one domain of the topology label
(required), or of as few domains as it fits in (preferred), and the verdict names the domain of each pod, which
the pod is then pinned to (a nodeSelector on the label): the scheduler places the pods inside the domains the
simulation chose. Domains are tried tightest first (the least free room that still fits: big domains stay free for
big gangs); a rank replaced in a running job goes where its peers run.

Quantities are parsed here (kubernetes_asyncio has no parser; the synchronous client's would add 126 MB to
the operator image for one function).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from ringleader_api import LABEL_JOB

from .podcache import Group, Key, key

GATE = "ringleader.dev/gang"
GPU = "nvidia.com/gpu"
PODS = "pods"
# Resources compared, in the order a shortage is reported and pods are sorted: scarce accelerators first.
ORDER = (GPU, "cpu", "memory")
_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"),
    "E": Decimal("1e18"), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip

Resources = dict[str, Decimal]
_LONGEST_FIRST = sorted((s for s in _SUFFIXES if s), key=len, reverse=True)  # "Mi" before "M"


MAX_QUANTITY = Decimal(2**63)  # Kubernetes' own limit on a quantity's value


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", "1e3", 4) as a number; ValueError names the bad value: not a
    string or number, not a quantity, not finite, or beyond what Kubernetes can hold."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{str(value)[:40]!r} is not a Kubernetes quantity")
    text = str(value).strip()
    number, suffix = text, ""
    for s in _LONGEST_FIRST:
        if text.endswith(s):
            number, suffix = text[: -len(s)], s
            break
    try:
        parsed = Decimal(number)
        if not parsed.is_finite() or abs(parsed) > MAX_QUANTITY:
            raise InvalidOperation
        return parsed * _SUFFIXES[suffix]
    except InvalidOperation:
        raise ValueError(f"{text[:40]!r} is not a Kubernetes quantity") from None


def format_quantity(value: Decimal) -> str:
    """A quantity as Kubernetes accepts it: whole numbers plain, fractions in milli-units ("1500m")."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"


def add(into: Resources, more: Mapping[str, Decimal], sign: int = 1) -> None:
    """`into` += sign * `more`, per resource."""
    for k, v in more.items():
        into[k] = into.get(k, Decimal(0)) + sign * v


def _container_requests(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    # A resource with a limit and no request is requested at its limit (the API server defaults it so).
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: parse_quantity(v) for k, v in merged.items()}


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for a pod: its containers' requests, or the largest init container's
    where that is more, plus the pod overhead and one pod slot."""
    total: Resources = {}
    for c in spec.get("containers") or []:
        add(total, _container_requests(c))
    for c in spec.get("initContainers") or []:
        for k, v in _container_requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    add(total, {k: parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    total[PODS] = total.get(PODS, Decimal(0)) + 1
    return total


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
    return NodeRoom(_usable(node), tuple(sorted((str(k), str(v)) for k, v in allocatable.items())))


def _usable(node: Mapping[str, Any]) -> bool:
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


def _fits_node(spec: Mapping[str, Any], node: Node) -> bool:
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


@dataclass(frozen=True)
class Verdict:
    fits: bool
    never: bool = False  # it could not fit even on empty nodes
    message: str = ""
    domains: tuple[str, ...] = ()  # with a topology: the domain of each gang pod, in the gang's order


@dataclass(frozen=True)
class Topology:
    """Where a gang may go: the nodes' label `key` names their domain; `required`: all in one domain, else as few
    as it fits in; `anchor`: nodes the job's running pods are on (their domains come first, and under `required`
    are the only choice)."""

    key: str
    required: bool
    anchor: frozenset[str] = frozenset()


DOMAINS_NAMED = 8  # a waiting gang's message names what this many domains are short of, and counts the rest


def _nodes(nodes: Iterable[Mapping[str, Any]]) -> list[Node]:
    out = []
    for n in nodes:
        if not _usable(n):
            continue
        meta, status = n.get("metadata") or {}, n.get("status") or {}
        allocatable = {k: parse_quantity(v) for k, v in (status.get("allocatable") or {}).items()}
        out.append(Node(meta.get("name", ""), meta.get("labels") or {}, (n.get("spec") or {}).get("taints") or [],
                        allocatable, dict(allocatable)))  # fmt: skip
    return out


def _copy(nodes: list[Node]) -> list[Node]:
    """The nodes with their free room copied (the room placements take from)."""
    return [Node(n.name, n.labels, n.taints, n.allocatable, dict(n.free)) for n in nodes]


def _sort_key(req: Resources) -> tuple[Decimal, ...]:
    return tuple(-req.get(k, Decimal(0)) for k in ORDER)


def _assign(specs: Sequence[Mapping[str, Any]], nodes: list[Node]) -> list[Node | None]:
    """First-fit, biggest first; takes the room on `nodes`. The node of each pod (None: none had room), in the
    order of `specs`. Pods alike (the same requests, nodeSelector and tolerations: a gang's workers) resume the
    search where the previous one of them was placed: the nodes before it had no room for such a pod, and room
    only shrinks here, so a gang of n like pods costs n + nodes checks, not n x nodes."""
    out: list[Node | None] = [None] * len(specs)
    requests = [pod_requests(s) for s in specs]
    resume: dict[Hashable, int] = {}
    for i in sorted(range(len(specs)), key=lambda i: _sort_key(requests[i])):
        req, spec = requests[i], specs[i]
        alike = _alike(spec, req)
        found = next((j for j in range(resume.get(alike, 0), len(nodes)) if _has_room(spec, req, nodes[j])), None)
        resume[alike] = len(nodes) if found is None else found
        if found is not None:
            add(nodes[found].free, req, -1)
            out[i] = nodes[found]
    return out


def _has_room(spec: Mapping[str, Any], req: Resources, node: Node) -> bool:
    return _fits_node(spec, node) and all(node.free.get(k, Decimal(0)) >= v for k, v in req.items() if v)


def _alike(spec: Mapping[str, Any], req: Resources) -> Hashable:
    """What decides where a pod may go: pods with the same key fit the same nodes. A template of an odd shape
    (a toleration holding a list: the API server keeps the pod template as written) is keyed by its JSON."""
    selector = spec.get("nodeSelector") or {}
    tolerations = spec.get("tolerations") or []
    try:
        key = (
            tuple(sorted(req.items())),
            tuple(sorted(selector.items())),
            tuple(tuple(sorted(t.items())) for t in tolerations),
        )
        hash(key)
    except (AttributeError, TypeError):
        return json.dumps([selector, tolerations, sorted(req.items())], sort_keys=True, default=str)
    return key


def _place(specs: Sequence[Mapping[str, Any]], nodes: list[Node]) -> bool:
    """First-fit, biggest first; takes the room on `nodes`. True when every pod found a node."""
    return all(n is not None for n in _assign(specs, nodes))


def _amount(value: Decimal, resource: str) -> str:
    if resource == "cpu":
        return f"{value.normalize():f}"
    if resource == "memory":
        return f"{value / 2**30:.1f}Gi"
    return f"{value.normalize():f}"


def _shortage(specs: Sequence[Mapping[str, Any]], nodes: list[Node], room: str) -> str:
    """The first resource (GPUs first) the gang needs more of than the eligible nodes have `room` ("free" or
    "allocatable"), as "needs 16 nvidia.com/gpu, 8 allocatable"; else a message about fragmentation."""
    need: Resources = {}
    for s in specs:
        add(need, pod_requests(s))
    eligible = [n for n in nodes if any(_fits_node(s, n) for s in specs)]
    if not eligible:
        return f"no Ready, schedulable node matches the pods' nodeSelector and tolerations ({len(nodes)} nodes)"
    for resource in (*ORDER, *sorted(set(need) - set(ORDER) - {PODS}), PODS):
        wanted = need.get(resource, Decimal(0))
        have = sum(
            ((n.free if room == "free" else n.allocatable).get(resource, Decimal(0)) for n in eligible), Decimal(0)
        )
        if wanted > have:
            return f"needs {_amount(wanted, resource)} {resource}, {_amount(have, resource)} {room}"
    return f"the {len(specs)} pods do not fit together on the {room} room of {len(eligible)} node(s)"


def admit(
    gang: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    room: Room,
    topology: Topology | None = None,
) -> Verdict:
    """May the pods `gang` (their specs) be released together, given every Node and the `room` the cluster's pods
    take? That may count the gang's own pods: gated ones take nothing, as do finished ones and unbound ones being
    deleted; bound ones take their node's room until they are gone (terminating too). `topology`: within which
    domains (the verdict then names each pod's)."""
    usable = _nodes(nodes)
    if topology is not None:
        return _admit_in_domains(list(gang), usable, _taken(usable, room), topology)
    empty = _copy(usable)
    if not _place(list(gang), empty):
        return Verdict(False, never=True, message=_shortage(list(gang), _copy(usable), "allocatable"))
    before = _taken(usable, room)
    if _place(list(gang), _copy(before)):
        return Verdict(True)
    return Verdict(False, message=_shortage(list(gang), before, "free"))


def largest_fitting(
    gang_of: Callable[[int], Sequence[Mapping[str, Any]]],
    sizes: range,
    nodes: Sequence[Mapping[str, Any]],
    room: Room,
    topology: Topology | None = None,
) -> int | None:
    """The largest n in `sizes` (ascending, step 1) whose gang `gang_of(n)` fits the cluster's free room at once,
    as `admit` weighs it; None when not even the smallest does. Found by bisection (a few simulations, not one per
    size): a gang of n like pods that fits still fits with a pod fewer."""
    usable = _nodes(nodes)
    free = _taken(usable, room)

    def fits(n: int) -> bool:
        gang = list(gang_of(n))
        if topology is not None:
            return _admit_in_domains(gang, usable, free, topology).fits
        return _place(gang, _copy(free))

    low, high = sizes.start, sizes.stop - 1
    if high < low or not fits(low):
        return None
    while low < high:  # low fits; the answer is in [low, high]
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _taken(usable: list[Node], room: Room) -> list[Node]:
    """The nodes' free room once the cluster's pods have theirs: bound pods on their nodes, released ones not yet
    bound wherever they would go (in the order of their names, so that the answer does not depend on the order
    the pods were seen in)."""
    free = _copy(usable)
    for node in free:
        if (taken := room.bound.get(node.name)) is not None:
            add(node.free, taken, -1)
    _place([spec for _, spec in sorted(room.waiting.items())], free)
    return free


def _by_domain(nodes: list[Node], key: str) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for n in nodes:
        if key in n.labels:
            out.setdefault(n.labels[key], []).append(n)
    return out


def _free(nodes: list[Node]) -> tuple[Decimal, ...]:
    """A domain's free room, scarce resources first (for ordering domains)."""
    return tuple(sum((n.free.get(k, Decimal(0)) for n in nodes), Decimal(0)) for k in ORDER)


def _candidates(room: dict[str, list[Node]], topology: Topology) -> list[list[str]]:
    """The sets of domains to try, in order: the running pods' domains first; then single domains, tightest
    first; under `preferred`, then the k roomiest domains for k = 2, 3, ..."""
    anchor = sorted({d for d, nodes in room.items() if any(n.name in topology.anchor for n in nodes)})
    if topology.required and anchor:  # its peers' domain (several only if the placement came after they ran)
        return [[d] for d in anchor]
    tightest = sorted(room, key=lambda d: (_free(room[d]), d))
    out = ([anchor] if anchor else []) + [[d] for d in tightest]
    if not topology.required:
        roomiest = sorted(room, key=lambda d: (tuple(-x for x in _free(room[d])), d))
        out += [sorted({*anchor, *roomiest[:k]}) for k in range(2, len(room) + 1)]
    return out


def _admit_in_domains(gang: list[Mapping[str, Any]], usable: list[Node], room: list[Node], t: Topology) -> Verdict:
    empty, free = _by_domain(usable, t.key), _by_domain(room, t.key)
    if not empty:
        return Verdict(False, never=True, message=f"no Ready, schedulable node has the label {t.key}")
    for domains in _candidates(free, t):
        nodes = _copy([n for d in domains for n in free[d]])
        placed = _assign(gang, nodes)
        if all(n is not None for n in placed):
            return Verdict(True, domains=tuple(n.labels[t.key] for n in placed if n is not None))
    if not t.required:
        never = not _place(gang, _copy(usable))
        shown = _copy(usable) if never else _copy(room)
        return Verdict(False, never=never, message=_shortage(gang, shown, "allocatable" if never else "free"))
    never = not any(_place(gang, _copy(nodes)) for nodes in empty.values())
    rooms = empty if never else free
    allowed = sorted(rooms) if not t.anchor else sorted({n.labels[t.key] for n in usable if n.name in t.anchor})
    parts = [f"{t.key}={d}: {_shortage(gang, rooms.get(d, []), 'allocatable' if never else 'free')}" for d in allowed]
    more = f"; and {len(parts) - DOMAINS_NAMED} more domains" if len(parts) > DOMAINS_NAMED else ""
    where = "where its running pods are" if t.anchor else "in any one domain"
    return Verdict(False, never=never, message=f"does not fit {where}: " + "; ".join(parts[:DOMAINS_NAMED]) + more)
