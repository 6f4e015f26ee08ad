"""Where a gang would go, pure: the simulated placement gang admission decides by (admission.py).

Placement is first-fit, biggest pods first (GPUs, then CPU, then memory), on nodes' allocatable minus what the
pods bound to them and those released but not yet bound take, and honours what a scheduler would refuse
outright: cordoned or not-Ready nodes, taints the pod does not tolerate, a nodeSelector that does not match.
With a topology (`spec.placement`), the gang is placed within the nodes of one domain of the topology label
(required), or of as few domains as it fits in (preferred), and the verdict names the domain of each pod. Domains
are tried tightest first (the least free room that still fits: big domains stay free for big gangs); a rank
replaced in a running job goes where its peers run."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .admission import Node, Room, fits_node, usable
from .quantities import ORDER, PODS, Resources, add, parse_quantity, pod_requests


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
        if not usable(n):
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
    return fits_node(spec, node) and all(node.free.get(k, Decimal(0)) >= v for k, v in req.items() if v)


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
    eligible = [n for n in nodes if any(fits_node(s, n) for s in specs)]
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
