"""The documented examples run as written: an unmodified torchrun-style DDP script under allreduce, and the
strategy-API script under every strategy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ringleader_api import TrainingJob
from ringleader_devcluster.layout import REPO_ROOT
from ringleader_trainer.examples.train import EXAMPLES as BUILT_IN

from tests.support.launch import job_spec, launch

EXAMPLES = REPO_ROOT / "examples"


def test_plain_ddp_script_runs_unchanged_under_allreduce(tmp_path: Path) -> None:
    job = launch(job_spec("ddp", "allreduce", 2), [], tmp_path, script=EXAMPLES / "plain_ddp.py")
    assert job.wait(180) == [0, 0], job.logs()
    assert all("replicas identical" in r.stdout for r in job.workers)


@pytest.mark.parametrize(
    ("strategy", "ps", "spec"),
    [
        ("allreduce", 0, {}),
        ("parameter-server", 1, {"parameterServer": {"mode": "asynchronous"}}),
        ("local-sgd", 0, {"localSGD": {"period": 5}}),
        ("diloco", 0, {"diloco": {"period": 5, "outerMomentum": 0.5}}),
    ],
    ids=["allreduce", "parameter-server", "local-sgd", "diloco"],
)
def test_strategy_api_example_learns_under_every_strategy(
    tmp_path: Path, strategy: str, ps: int, spec: dict[str, Any]
) -> None:
    job = launch(job_spec("custom", strategy, 2, ps, **spec), ["--steps", "200"], tmp_path,
                 script=EXAMPLES / "train_custom.py", env_overrides={"PYTHONUNBUFFERED": "1"})  # fmt: skip
    assert job.wait(300) == [0] * len(job.ranks), job.logs()
    losses = [e["loss"] for e in job.workers[0].events() if "loss" in e]
    # The target's variance is sum(linspace(-1, 1, 8)^2) ~ 3.4: an untrained model's loss is about that. Per-batch
    # losses are noisy (asynchronous PS applies stale gradients in arrival order), so judge the mean of the last three.
    assert len(losses) == 10 and sum(losses[-3:]) / 3 < 0.2, losses


def training_jobs(path: Path) -> list[dict[str, Any]]:
    """The TrainingJob documents of an example file (some carry a ConfigMap or a volume beside the job)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "TrainingJob"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_jobs_are_valid_training_jobs(path: Path) -> None:
    bodies = training_jobs(path)
    assert len(bodies) == 1, f"{path.name}: one TrainingJob per example"
    body = bodies[0]
    job = TrainingJob.model_validate(body)
    for role in ("workers", "parameterServers"):
        template = (body["spec"].get(role) or {}).get("template")
        if template:  # the command names a built-in example that exists
            command = template["spec"]["containers"][0]["command"]
            if "--example" in command:
                assert command[command.index("--example") + 1] in BUILT_IN
    assert job.name and job.spec.workers.replicas >= 1


def test_the_torchrun_example_carries_the_plain_ddp_script_unchanged() -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / "torchrun-script.yaml").read_text()))
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    assert config_map["data"]["plain_ddp.py"] == (EXAMPLES / "plain_ddp.py").read_text()
