"""Topology-aware gang admission on the dev cluster: four racks of kwok fake nodes (two nodes of 4 GPUs each),
labelled topology.kubernetes.io/rack. spec.placement Required puts a gang in one rack or keeps it waiting, saying
what each rack is short of; Preferred spreads it over the fewest racks; under the Workload API, kube-scheduler's
topology constraint keeps it in one rack."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster import operatorprocess

from tests.support.cluster import wait_for
from tests.support.fakenodes import add_fake_nodes, fake_node, pool_job, remove_fake_nodes
from tests.support.jobs import condition, create, get, pods_of, wait_condition

# Serial: it restarts the operator with another gang backend.
pytestmark = [pytest.mark.usefixtures("operator"), pytest.mark.serial]

RACK = "topology.kubernetes.io/rack"


@pytest.fixture(scope="module")
def racks(core: client.CoreV1Api) -> Iterator[str]:
    """Four racks r0..r3 of two 4-GPU fake nodes; returns the label value only these nodes carry."""
    pool = f"topo-{uuid.uuid4().hex[:6]}"
    nodes = [fake_node(f"{pool}-r{r}-n{i}", {RACK: f"r{r}", "ringleader.dev/pool": pool}, 4) for r in range(4)
             for i in range(2)]  # fmt: skip
    names = add_fake_nodes(core, nodes)
    yield pool
    remove_fake_nodes(core, names)


def gang(name: str, workers: int, pool: str, mode: str | None) -> dict[str, Any]:
    """`workers` pods of 4 GPUs on the pool's fake nodes."""
    body = pool_job(name, workers, pool, 4)
    if mode:
        body["spec"]["placement"] = {"topologyKey": RACK, "mode": mode}
    return body


def racks_of(core: client.CoreV1Api, ns: str, job: str, count: int) -> list[str]:
    """The rack of each of the job's pods, once all `count` are bound."""

    def bound() -> list[str] | None:
        pods = pods_of(core, ns, job)
        nodes = [p.spec.node_name for p in pods if p.spec.node_name]
        return nodes if len(nodes) == count else None

    nodes = wait_for(f"{job}'s {count} pods bound", bound, timeout=60)
    return sorted(core.read_node(n).metadata.labels[RACK] for n in nodes)


def test_required_keeps_a_gang_in_one_rack_or_keeps_it_waiting_saying_what_each_rack_is_short_of(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, racks: str
) -> None:
    create(custom, namespace, gang("pair", 2, racks, "Required"))
    assert len(set(racks_of(core, namespace, "pair", 2))) == 1
    admitted = condition(wait_condition(custom, namespace, "pair", "Admitted"), "Admitted") or {}
    assert f"in 1 {RACK} domain" in admitted["message"]

    create(custom, namespace, gang("trio", 3, racks, "Required"))  # 12 GPUs, a rack has 8
    wait_condition(custom, namespace, "trio", "Admitted", timeout=30, status="False")
    shorts = [f"{RACK}=r{r}: needs 12 nvidia.com/gpu, 8 allocatable" for r in range(4)]

    def says_each_rack() -> dict[str, Any] | None:
        # Polled: a fake node of a busy machine can miss a lease renewal and count as not Ready for a moment (its
        # rack then shows 4 allocatable); it turning Ready again gives the waiting gang a round that says it anew.
        c = condition(get(custom, namespace, "trio"), "Admitted") or {}
        return c if all(short in c.get("message", "") for short in shorts) else None

    waiting = wait_for("trio's Admitted False naming what each of the 4 racks is short of", says_each_rack, 60)
    assert waiting["status"] == "False" and waiting["reason"] == "Unschedulable"
    assert all(not p.spec.node_name for p in pods_of(core, namespace, "trio"))


def test_preferred_spreads_a_gang_over_the_fewest_racks(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, racks: str
) -> None:
    create(custom, namespace, gang("trio", 3, racks, "Preferred"))
    placed = racks_of(core, namespace, "trio", 3)
    assert len(set(placed)) == 2, placed  # 12 GPUs: two racks of 8, never three


def test_under_the_workload_api_a_required_placement_is_kube_schedulers_topology_constraint(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, racks: str
) -> None:
    operatorprocess.operator_up(gang_backend="workload-api")
    try:
        create(custom, namespace, gang("pair", 2, racks, "Required"))
        assert len(set(racks_of(core, namespace, "pair", 2))) == 1
        group = custom.get_namespaced_custom_object("scheduling.k8s.io", "v1alpha2", namespace, "podgroups", "pair-2")
        assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    finally:
        operatorprocess.operator_up(gang_backend="gates")
