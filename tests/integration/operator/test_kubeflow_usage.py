"""A Kubeflow user's elastic PyTorchJob (examples/kubeflow/elastic-echo.yaml), moved over with `ringleader
convert`: torchrun's c10d rendezvous survives the loss of one of its pods. Every example of examples/kubeflow/
runs to Succeeded with every rank in the whole world under the chart's operator:
tests/e2e/test_examples_chart.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from ringleader_devcluster.layout import Layout

from tests.support.cluster import kubectl, logs, wait_for
from tests.support.examples import KUBEFLOW, converted
from tests.support.jobs import condition, get, rank_status, wait_condition

pytestmark = pytest.mark.usefixtures("operator")


def apply_converted(
    layout: Layout, kubeconfig: Path, tmp_path: Path, namespace: str, name: str, workers: dict[str, Any] | None = None,
    **env: str,
) -> dict[str, Any]:  # fmt: skip
    """examples/kubeflow/`name` converted (`workers` fields changed, `env` added), applied in `namespace`; returns
    the TrainingJob."""
    docs = converted(KUBEFLOW / name, workers, **env)
    manifest = tmp_path / name
    manifest.write_text(yaml.safe_dump_all(docs))
    kubectl(layout, kubeconfig, "apply", "-n", namespace, "-f", str(manifest))
    return docs[-1]


def test_the_elastic_echo_survives_the_loss_of_a_pod(
    layout: Layout, kubeconfig: Path, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """2 workers meeting through torchrun's c10d rendezvous on worker 0: worker 1's pod is deleted while they echo;
    worker 0's agent restarts its process and meets the replacement, and the job still Succeeds. (maxReplicas 2
    instead of the example's 3: a round of every possible node completes at once, where one of fewer waits torch's
    30 s last call for more, twice in this test.)"""
    job = apply_converted(
        layout, kubeconfig, tmp_path, namespace, "elastic-echo.yaml", {"maxReplicas": 2}, ECHO_TIMES="15"
    )
    name = job["metadata"]["name"]
    assert job["spec"]["torchrun"] == {"rendezvous": "c10d", "maxRestarts": 10}

    def echoing() -> bool:
        try:
            text = logs(core, namespace, f"{name}-worker-0", container="trainer")
        except client.ApiException:  # not made yet, or not started
            return False
        return "world_size 2 sum 2 echo 2" in text

    wait_for("both workers echoing", echoing, timeout=120)
    core.delete_namespaced_pod(f"{name}-worker-1", namespace)
    done = wait_condition(custom, namespace, name, "Succeeded", timeout=240)
    text = logs(core, namespace, f"{name}-worker-0", container="trainer")
    assert text.count("echo 0") >= 2, text  # started over after the loss (torchrun restarted it)
    assert "world_size 2 sum 2 echo 14" in text, text  # and finished with the replacement, the world whole again
    assert (condition(done, "Succeeded") or {}).get("status") == "True"
    assert rank_status(get(custom, namespace, name))["worker-1"]["restarts"] == 1  # the operator replaced it
