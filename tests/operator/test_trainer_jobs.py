"""The real trainer through the operator on the dev cluster: one job per strategy runs the digits example to
Succeeded, and status.progress shows the step rising while it runs."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.devcluster.helpers import wait_for

from .helpers import condition, create, get, training_job

pytestmark = pytest.mark.usefixtures("operator")

# Worker 0 sleeps 50 ms a step so the run outlasts a few of the operator's 5-second progress scrapes.
TRAINER = ["-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "300", "--log-every", "10",
           "--straggler", "0:0.05", "--timeout", "60", "--rendezvous-timeout", "120"]  # fmt: skip


def trainer_job(name: str, **spec: Any) -> dict[str, Any]:
    body = training_job(name, "", **spec)
    for role in ("workers", "parameterServers"):
        if role in body["spec"]:
            body["spec"][role]["template"]["spec"]["containers"][0]["command"] = ["python", "-u", *TRAINER]
    return body


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"strategy": "parameter-server", "parameterServer": {"mode": "bounded-staleness", "maxStaleness": 2}},
        {"strategy": "local-sgd", "localSGD": {"period": 4}},
    ],
    ids=["allreduce", "parameter-server", "local-sgd"],
)
def test_each_strategy_trains_to_succeeded_with_rising_progress(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    create(custom, namespace, trainer_job("digits", **spec))
    steps: list[int] = []

    def finished() -> dict[str, Any] | None:
        job = get(custom, namespace, "digits")
        step = ((job.get("status") or {}).get("progress") or {}).get("step")
        if step is not None and (not steps or step != steps[-1]):
            steps.append(step)
        done = [c for c in ("Succeeded", "Failed") if (cond := condition(job, c)) and cond["status"] == "True"]
        return job if done else None

    job = wait_for("the digits job to finish", finished, timeout=300)
    assert condition(job, "Succeeded"), (condition(job, "Failed"), (job.get("status") or {}).get("ranks"))
    assert len(steps) >= 2 and steps == sorted(steps) and steps[0] < steps[-1], steps
