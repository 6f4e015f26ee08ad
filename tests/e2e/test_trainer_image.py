"""End to end on the real node: TrainingJobs whose ranks run in the project's trainer image (built from its
Dockerfile with buildah), in a namespace enforcing Pod Security "restricted", one per strategy, to Succeeded;
ranks find each other through cluster DNS, as on any cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster import images, realnode
from ringleader_devcluster.layout import Layout

from tests.devcluster.helpers import logs, wait_for
from tests.operator.helpers import GROUP, VERSION, condition, create, get, pods_of

pytestmark = pytest.mark.usefixtures("operator")

STEPS = "60"


@pytest.fixture(scope="module", autouse=True)
def trainer_image(layout: Layout, kubeconfig: Path) -> None:
    """Built (again only when its inputs change) and pushed to the dev cluster's registry, which the node pulls
    from."""
    images.publish(layout, images.TRAINER)


@pytest.fixture
def restricted_namespace(core: client.CoreV1Api, namespace: str) -> str:
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    return namespace


def real_node_template(*args: str) -> dict[str, Any]:
    """A rank in the trainer image on the real node, meeting Pod Security "restricted" (read-only root: the
    trainer writes only to /tmp, an emptyDir)."""
    return {
        "spec": {
            "nodeSelector": {realnode.LABEL: "true"},
            "tolerations": [{"key": realnode.TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "trainer",
                    "image": images.TRAINER.name,
                    "imagePullPolicy": "Always",  # the newest push of a mutable tag
                    "args": list(args),  # the image's entry point is `python -m ringleader_trainer`
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        }
    }


def trainer_job(name: str, strategy: str, **spec: Any) -> dict[str, Any]:
    template = real_node_template("--example", "digits-mlp", "--steps", STEPS, "--log-every", "20")
    body: dict[str, Any] = {"strategy": strategy, "workers": {"replicas": 2, "template": template}, **spec}
    if strategy == "parameter-server":
        body["parameterServers"] = {"replicas": 1, "template": template}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name}, "spec": body}


def is_true(job: dict[str, Any], kind: str) -> bool:
    return (condition(job, kind) or {}).get("status") == "True"


def succeeded(job: dict[str, Any]) -> bool:
    return is_true(job, "Succeeded")


def finished(job: dict[str, Any]) -> dict[str, Any] | None:
    return job if succeeded(job) or is_true(job, "Failed") else None


@pytest.mark.parametrize(
    ("strategy", "spec"),
    [
        ("allreduce", {}),
        ("parameter-server", {"parameterServer": {"mode": "synchronous"}}),
        ("local-sgd", {"localSGD": {"period": 5}}),
    ],
    ids=["allreduce", "ps-synchronous", "local-sgd"],
)
def test_a_job_in_the_trainer_image_succeeds_on_the_real_node(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str, strategy: str,
    spec: dict[str, Any],
) -> None:  # fmt: skip
    ns = restricted_namespace
    create(custom, ns, trainer_job("img", strategy, **spec))
    job = wait_for("the job to finish", lambda: finished(get(custom, ns, "img")), timeout=300)
    assert succeeded(job), f"{job.get('status')}\n{logs(core, ns, 'img-worker-0', 'trainer')}"
    pods = pods_of(core, ns, "img")
    assert {p.spec.node_name for p in pods} == {realnode.NODE_NAME}
    assert all(p.spec.containers[0].image == images.TRAINER.name for p in pods)
    done = [json.loads(line) for line in logs(core, ns, "img-worker-0", "trainer").splitlines() if '"done"' in line]
    assert done and done[-1]["step"] == int(STEPS) and done[-1]["test_accuracy"] > 0.5, done
