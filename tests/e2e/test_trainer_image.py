"""End to end on the real node: TrainingJobs whose ranks run in the project's trainer image (built from its
Dockerfile with buildah), in a namespace enforcing Pod Security "restricted", one per strategy, to Succeeded;
ranks find each other through cluster DNS, as on any cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster import images, realnode

from tests.support.cluster import logs
from tests.support.jobs import create, pods_of

from .helpers import diagnosis, is_true, trainer_job, wait_finished

pytestmark = pytest.mark.usefixtures("operator")

STEPS = 60


@pytest.mark.parametrize(
    ("strategy", "spec"),
    [
        ("allreduce", {}),
        ("parameter-server", {"parameterServer": {"mode": "synchronous"}}),
        ("local-sgd", {"localSGD": {"period": 5}}),
        ("diloco", {"diloco": {"period": 5, "outerMomentum": 0.5}}),
    ],
    ids=["allreduce", "ps-synchronous", "local-sgd", "diloco"],
)
def test_a_job_in_the_trainer_image_succeeds_on_the_real_node(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str, strategy: str,
    spec: dict[str, Any],
) -> None:  # fmt: skip
    ns = restricted_namespace
    create(custom, ns, trainer_job("img", strategy, "--steps", str(STEPS), **spec))
    job = wait_finished(custom, ns, "img")
    assert is_true(job, "Succeeded"), diagnosis(core, ns, job)
    pods = pods_of(core, ns, "img")
    assert {p.spec.node_name for p in pods} == {realnode.NODE_NAME}
    assert all(p.spec.containers[0].image == images.TRAINER.name for p in pods)
    done = [json.loads(line) for line in logs(core, ns, "img-worker-0", "trainer").splitlines() if '"done"' in line]
    assert done and done[-1]["step"] == STEPS and done[-1]["test_accuracy"] > 0.5, done
