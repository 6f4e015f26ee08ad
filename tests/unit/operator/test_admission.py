"""Gang admission decisions, table-style: quantities, pod requests, and whether a gang fits the cluster."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
from ringleader_operator import placement, quantities
from ringleader_operator.admission import GATE, Room, node_digest
from ringleader_operator.placement import admit
from ringleader_operator.quantities import format_quantity, parse_quantity, pod_requests


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", "0.5"), ("2", "2"), ("1.5", "1.5"), ("2Gi", str(2 * 2**30)), ("1k", "1000"), ("1e3", "1000"),
     ("100M", "100000000"), (4, "4"), ("128974848", "128974848"), ("129e6", "129000000"), ("123Mi", str(123 * 2**20))],
)  # fmt: skip
def test_parse_quantity(text: str | int, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "abc", "1.5.5", "2Gb"])
def test_parse_quantity_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("value", "text"), [("2", "2"), ("0.5", "500m"), ("1.25", "1250m"), (str(2**30), "1073741824")]
)
def test_format_quantity(value: str, text: str) -> None:
    assert format_quantity(Decimal(value)) == text


def container(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": "c", "image": "i", "resources": resources}


def test_pod_requests_sum_containers_take_the_largest_init_container_and_default_requests_to_limits() -> None:
    spec = {
        "containers": [container({"cpu": "1"}, {"nvidia.com/gpu": 2}), container({"cpu": "500m", "memory": "1Gi"})],
        "initContainers": [container({"cpu": "4"}), container({"memory": "512Mi"})],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {
        "cpu": Decimal("4.1"),  # init 4 > containers 1.5; plus overhead
        "memory": Decimal(2**30),
        "nvidia.com/gpu": Decimal(2),
        "pods": Decimal(1),
    }


def node(name: str, gpus: int = 8, cpu: str = "32", ready: bool = True, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if extra.get("unschedulable"):
        spec["unschedulable"] = True
    if extra.get("taints"):
        spec["taints"] = extra["taints"]
    return {
        "metadata": {"name": name, "labels": extra.get("labels") or {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": str(ready)}],
        },
    }


def gang_pod(gpus: int, **spec: Any) -> dict[str, Any]:
    return {"containers": [container(limits={"nvidia.com/gpu": gpus})], **spec}


def running(gpus: int, on: str, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {"metadata": meta, "spec": {**gang_pod(gpus), "nodeName": on}, "status": {"phase": phase}}


def released(gpus: int) -> dict[str, Any]:
    """A pod some job has released to the scheduler, not yet bound to a node."""
    return {"metadata": {}, "spec": gang_pod(gpus), "status": {"phase": "Pending"}}


def held(gpus: int) -> dict[str, Any]:
    return {"metadata": {}, "spec": {**gang_pod(gpus), "schedulingGates": [{"name": GATE}]}, "status": {}}


EIGHT = [node("n1")]
TWO_NODES = [node("n1", gpus=4), node("n2", gpus=4)]


@pytest.mark.parametrize(
    ("gang", "nodes", "pods", "fits", "never", "message"),
    [
        ([gang_pod(4)] * 4, EIGHT, [], False, True, "needs 16 nvidia.com/gpu, 8 allocatable"),
        ([gang_pod(3)] * 2, EIGHT, [], True, False, ""),
        # Two 6-GPU jobs on 8 GPUs: the second waits for the first's room, whether bound or only released.
        ([gang_pod(3)] * 2, EIGHT, [running(3, "n1"), running(3, "n1")], False, False,
         "needs 6 nvidia.com/gpu, 2 free"),
        ([gang_pod(3)] * 2, EIGHT, [released(3), released(3)], False, False, "needs 6 nvidia.com/gpu, 2 free"),
        # Finished pods hold nothing; terminating pods still do until they are gone; gated pods do not yet.
        ([gang_pod(3)] * 2, EIGHT, [running(3, "n1", "Succeeded"), running(3, "n1", "Failed")], True, False, ""),
        ([gang_pod(3)] * 2, EIGHT, [running(6, "n1", deletionTimestamp="2026-01-01T00:00:00Z")], False, False,
         "needs 6 nvidia.com/gpu, 2 free"),
        ([gang_pod(3)] * 2, EIGHT, [held(8)], True, False, ""),
        # Room per node counts, not the sum: 3+3 GPUs do not fit 2 and 4 free GPUs, though 6 are free.
        ([gang_pod(3)] * 2, TWO_NODES, [running(2, "n1")], False, False,
         "the 2 pods do not fit together on the free room of 2 node(s)"),
        ([gang_pod(4)] * 2, TWO_NODES, [], True, False, ""),
        ([gang_pod(5)], TWO_NODES, [], False, True,
         "the 1 pods do not fit together on the allocatable room of 2 node(s)"),
        # Nodes the scheduler would not use: not Ready, cordoned, tainted, or not selected.
        ([gang_pod(1)], [node("n1", ready=False)], [], False, True, "no Ready, schedulable node"),
        ([gang_pod(1)], [node("n1", unschedulable=True)], [], False, True, "no Ready, schedulable node"),
        ([gang_pod(1)], [node("n1", taints=[{"key": "gpu", "effect": "NoSchedule"}])], [], False, True,
         "matches the pods' nodeSelector and tolerations"),
        ([gang_pod(1, tolerations=[{"key": "gpu", "operator": "Exists"}])],
         [node("n1", taints=[{"key": "gpu", "effect": "NoSchedule"}])], [], True, False, ""),
        ([gang_pod(1, nodeSelector={"pool": "a100"})], [node("n1"), node("n2", labels={"pool": "a100"})], [],
         True, False, ""),
        ([gang_pod(1, nodeSelector={"pool": "h100"})], [node("n1")], [], False, True, "nodeSelector"),
        # CPU counts too, after GPUs.
        ([{"containers": [container({"cpu": "20"})]}] * 2, [node("n1", cpu="32")], [], False, True,
         "needs 40 cpu, 32 allocatable"),
    ],
    ids=["16-on-8", "6-on-8", "second-6-bound", "second-6-released", "finished-free", "terminating-holds",
         "gated-hold-nothing", "fragmented", "4+4-on-two-4s", "5-on-4s", "not-ready", "cordoned", "tainted",
         "tolerated", "selected", "not-selected", "cpu"],
)  # fmt: skip
def test_admit(
    gang: list[dict[str, Any]], nodes: list[dict[str, Any]], pods: list[dict[str, Any]], fits: bool, never: bool,
    message: str,
) -> None:  # fmt: skip
    verdict = admit(gang, nodes, Room.of(pods))
    assert (verdict.fits, verdict.never) == (fits, never)
    assert message in verdict.message and bool(verdict.message) != fits


def test_decisions_on_node_digests_equal_those_on_whole_nodes() -> None:
    """The node index holds admission.node_digest of each Node: every decision must come out the same."""
    taint = [{"key": "gpu", "effect": "NoSchedule"}]
    whole = [node("n1", 8, labels={"pool": "a"}, taints=taint), node("n2", 4, unschedulable=True),
             node("n3", 4, ready=False), node("n4", 2)]  # fmt: skip
    whole[0]["metadata"]["managedFields"] = [{"manager": "kubelet"}] * 20
    whole[0]["status"]["images"] = [{"names": ["x"]}] * 50
    whole[0]["status"]["conditions"].insert(0, {"type": "MemoryPressure", "status": "False"})
    digests = [node_digest(n) for n in whole]
    assert "images" not in digests[0]["status"] and "managedFields" not in digests[0]["metadata"]
    tolerating = {"tolerations": [{"key": "gpu", "operator": "Exists"}], "nodeSelector": {"pool": "a"}}
    others = [running(2, "n4"), released(1)]
    for gpus in (1, 2, 6, 8, 9):
        for extra in ({}, tolerating):
            gang = [gang_pod(gpus, **extra)]
            assert admit(gang, digests, Room.of(others)) == admit(gang, whole, Room.of(others))


def test_a_pods_requests_are_remembered_by_version_and_a_new_version_is_weighed_anew() -> None:
    """Admission remembers what a bound pod reserves by (uid, resourceVersion): a new version of the pod (an
    in-place resize) is weighed by its own requests, not the remembered ones."""
    nodes = [node("a", gpus=8)]
    before = running(6, "a", uid="u1", resourceVersion="10")
    assert admit([gang_pod(2)], nodes, Room.of([before])).fits
    assert admit([gang_pod(2)], nodes, Room.of([before])).fits  # remembered: the same answer
    resized = running(7, "a", uid="u1", resourceVersion="11")
    assert not admit([gang_pod(2)], nodes, Room.of([resized])).fits
    same_version_elsewhere = running(7, "a", uid="u2", resourceVersion="10")  # versions are per object
    assert not admit([gang_pod(2)], nodes, Room.of([same_version_elsewhere])).fits


def _first_fit(specs: list[dict[str, Any]], nodes: list[Any]) -> list[str | None]:
    """First-fit, biggest first, by the book: every pod looks at every node from the first."""
    out: list[str | None] = [None] * len(specs)
    order = sorted(range(len(specs)), key=lambda i: placement._sort_key(pod_requests(specs[i])))
    for i in order:
        req = pod_requests(specs[i])
        for n in nodes:
            if placement._has_room(specs[i], req, n):
                quantities.add(n.free, req, -1)
                out[i] = n.name
                break
    return out


@pytest.mark.parametrize("seed", range(20))
def test_placing_pods_alike_from_where_the_last_went_places_them_as_first_fit_does(seed: int) -> None:
    """The search of a pod like the one placed before it resumes at that one's node: the same placement as a
    first-fit that looks at every node for every pod, on random pods of a few kinds and random node room."""
    rng = random.Random(seed)
    kinds = [gang_pod(g) for g in (1, 2, 4)] + [gang_pod(1, nodeSelector={"zone": "a"})]
    specs = [rng.choice(kinds) for _ in range(rng.randint(1, 40))]
    raw = [node(f"n{i}", gpus=rng.choice([0, 1, 2, 3, 4, 8]), labels={"zone": rng.choice("ab")}) for i in range(12)]
    placed = [n.name if n else None for n in placement._assign(specs, placement._nodes(raw))]
    assert placed == _first_fit(specs, placement._nodes(raw))
