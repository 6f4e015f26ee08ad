"""A job whose ranks the scheduler splits over both nodes of the dev cluster: two in the trainer image on the real
node, two as processes on the process node. They find each other by cluster name and exchange gradients over
the one pod network, as ranks spread over the nodes of any cluster do."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster import realnode

from tests.support.cluster import logs
from tests.support.jobs import create, pods_of

from .helpers import diagnosis, is_true, trainer_job, wait_finished

pytestmark = pytest.mark.usefixtures("operator")

PROCESS_NODE = "process-node"
STEPS = 60


def spread_over_both_nodes(job: dict[str, Any]) -> dict[str, Any]:
    """`job` (a trainer_job on the real node) with its workers allowed on the real node and the main process node
    only, spread evenly over the two: the real node's taint tolerated, no node selector, the command set (the
    process node runs it in the project's environment; the image's entry point is the same)."""
    name = job["metadata"]["name"]
    spec = job["spec"]["workers"]["template"]["spec"]
    del spec["nodeSelector"]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In",
                             "values": [realnode.NODE_NAME, PROCESS_NODE]},
                        ]
                    }
                ]
            }
        }
    }  # fmt: skip
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"ringleader.dev/job-name": name}},
        }
    ]
    spec["containers"][0]["command"] = ["python", "-m", "ringleader_trainer"]
    return job


def test_a_job_split_two_and_two_over_the_nodes_rendezvous_and_succeeds(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create(
        custom, namespace, spread_over_both_nodes(trainer_job("split", "allreduce", "--steps", str(STEPS), workers=4))
    )
    job = wait_finished(custom, namespace, "split", timeout=420)
    assert is_true(job, "Succeeded"), diagnosis(core, namespace, job)
    pods = pods_of(core, namespace, "split")
    assert Counter(p.spec.node_name for p in pods) == {realnode.NODE_NAME: 2, PROCESS_NODE: 2}
    done = [
        json.loads(line) for line in logs(core, namespace, "split-worker-0", "trainer").splitlines() if '"done"' in line
    ]
    assert done and done[-1]["step"] == STEPS and done[-1]["test_accuracy"] > 0.5, done
