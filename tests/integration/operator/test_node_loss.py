"""A process node stopped (its agent and every process of its pods killed at once, as when a machine loses
power): the controller-manager's node lifecycle marks it unreachable and evicts its pods, the operator
replaces them on another node (counting node loss, under restartPolicy Never too), and the job resumes
from its newest checkpoint and succeeds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster import processnode
from ringleader_trainer.checkpoints import store as ckpt

from tests.support.cluster import logs, wait_for
from tests.support.diagnosis import diagnose_job
from tests.support.jobs import condition, create, finished, get, pods_of, rank_status, training_job

# Serial: its spare node, where other tests' pods may land, is powered off.
pytestmark = [pytest.mark.usefixtures("operator"), pytest.mark.serial]

SPARE = "spare-node"
SPARE_INDEX = 8  # pod CIDR 198.18.9.0/24, clear of the main agent's nodes
UNREACHABLE = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


@pytest.fixture
def spare_node(kubeconfig: Path) -> Iterator[str]:
    processnode.add_node(SPARE, SPARE_INDEX)
    try:
        yield SPARE
    finally:
        processnode.remove_node(SPARE)


def set_unschedulable(core: client.CoreV1Api, nodes: list[str], value: bool) -> None:
    for name in nodes:
        core.patch_node(name, {"spec": {"unschedulable": value}})


def test_pods_of_a_stopped_node_are_replaced_on_another_node(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path, spare_node: str,
    kubeconfig: Path,
) -> None:  # fmt: skip
    directory = tmp_path / "ckpt"
    command = ["python", "-u", "-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "300",
               "--log-every", "20", "--straggler", "0:0.05", "--timeout", "60"]  # fmt: skip
    body = training_job("lost", "")
    template: dict[str, Any] = body["spec"]["workers"]["template"]
    template["spec"]["containers"][0]["command"] = command
    # Evicted 5 s after the node is found unreachable (the operator's default is 30 s).
    template["spec"]["tolerations"] = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5} for key in UNREACHABLE
    ]
    body["spec"]["workers"]["restartPolicy"] = "Never"  # node loss is not the program's failure: still retried
    body["spec"]["checkpoint"] = {"directory": str(directory), "intervalSteps": 20}

    # Every rank starts on the spare node: the others are cordoned until the pods are placed.
    others = [
        n.metadata.name
        for n in core.list_node(label_selector="ringleader.dev/process-node=true").items
        if n.metadata.name != spare_node and not n.spec.unschedulable
    ]
    set_unschedulable(core, others, True)
    try:
        create(custom, namespace, body)
        placed = wait_for(
            "both ranks running on the spare node",
            lambda: (
                pods
                if len(pods := [p for p in pods_of(core, namespace, "lost") if p.status.phase == "Running"]) == 2
                else None
            ),
            timeout=90,
        )
    finally:
        set_unschedulable(core, others, False)
    assert {p.spec.node_name for p in placed} == {spare_node}
    before = {p.metadata.name: p.metadata.uid for p in placed}
    wait_for(
        "checkpoint 20 of both ranks",
        lambda: 20 in ckpt.complete_steps(directory, ckpt.expected_files(2, 0)),
        timeout=120,
    )

    processnode.power_off_node(spare_node)

    def ended() -> dict[str, Any] | None:
        job = get(custom, namespace, "lost")
        return job if finished(job) else None

    job = wait_for("the job to finish after losing its node", ended, timeout=300, every=1)
    assert condition(job, "Succeeded"), job.get("status")
    ranks = rank_status(job)
    assert {k: (r["restarts"], r["lastReason"]) for k, r in ranks.items()} == {
        "worker-0": (1, "NodeLost"),
        "worker-1": (1, "NodeLost"),
    }
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 2
    infra = job["status"]["failures"]["Infrastructure"]  # one incident: the node, with its two ranks
    assert (infra["total"], infra["inWindow"], infra["incidentFailures"]) == (2, 1, 2), infra
    after = pods_of(core, namespace, "lost")
    assert {p.metadata.name for p in after} == set(before)
    assert all(p.metadata.uid != before[p.metadata.name] and p.spec.node_name != spare_node for p in after)
    assert not core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={spare_node}").items
    reasons = {e.reason for e in core.list_namespaced_event(namespace).items if e.involved_object.name == "lost"}
    assert "NodeLost" in reasons, reasons
    said = diagnose_job(kubeconfig, namespace, "lost", record_as="node-lost")  # `ringleader diagnose lost`
    assert said.headline == "lost: Succeeded (JobSucceeded)", said.text()
    assert [f.rule for f in said.findings] == ["failure-class", "node-lost"], said.text()
    named, lost = said.findings
    assert named.what.startswith("worker-") and f"on node {spare_node} " in named.what, said.text()
    assert named.what.endswith(": Infrastructure") and "was lost with its node" in named.detail, said.text()
    assert lost.what == "2 ranks lost with their node", said.text()
    last = job["status"]["lastFailure"]  # the first of the two, both of one incident
    assert (last["class"], last["node"]) == ("Infrastructure", spare_node), last
    # The replacements resumed from a checkpoint (not from step 0) and still reach the trainer's accuracy.
    text = logs(core, namespace, "lost-worker-0", container="trainer")
    events = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    resumed = [e["step"] for e in events if e.get("event") == "resume"]
    done = [e for e in events if e.get("event") == "done"]
    assert resumed and resumed[0] >= 20, resumed
    assert done and done[-1]["test_accuracy"] >= 0.97, done
