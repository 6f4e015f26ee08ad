"""Strategy pipeline: how the model is cut into stages, and that GPipe over the stages computes what the unsplit
model does (the gradients of one batch; the parameters after K steps, with and without data-parallel
replicas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from ringleader_api import Role
from ringleader_operator.rank_env import rank_env
from ringleader_trainer.env import from_env as read_env
from ringleader_trainer.examples import models
from ringleader_trainer.strategies.pipeline import PipelineStrategy, split_stages
from ringleader_trainer.strategy import Options
from torch import nn

from tests.support.launch import job_spec, launch
from tests.support.ranks import run_ranks


@pytest.mark.parametrize(
    ("sizes", "stages", "runs"),
    [
        ([10, 0, 10, 0, 10], 1, [(0, 5)]),
        ([10, 0, 10, 0, 10], 3, [(0, 2), (2, 4), (4, 5)]),  # a module without parameters goes with the one before
        ([8320, 0, 16512, 0, 1290], 2, [(0, 2), (2, 5)]),  # the digits MLP: the cut nearest half the parameters
        ([1, 1, 1, 1, 1, 1, 1, 1], 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
        ([100, 1, 1, 1], 2, [(0, 1), (1, 4)]),  # one heavy module: its own stage
        ([1, 1, 1, 100], 2, [(0, 3), (3, 4)]),
        ([5, 5], 2, [(0, 1), (1, 2)]),
    ],
)
def test_stages_are_consecutive_runs_of_about_equal_parameters(
    sizes: list[int], stages: int, runs: list[tuple[int, int]]
) -> None:
    assert [(r.start, r.stop) for r in split_stages(sizes, stages)] == runs


@pytest.mark.parametrize(("sizes", "stages"), [([10, 0, 0], 2), ([10, 10], 3), ([0, 0], 1), ([1], 0)])
def test_too_few_modules_with_parameters_is_an_error(sizes: list[int], stages: int) -> None:
    with pytest.raises(ValueError, match=f"cannot make {stages} pipeline stages"):
        split_stages(sizes, stages)


def stage_gradients(rank: int, world: int, micro_batches: int, out: str) -> None:
    """One GPipe step of the digits MLP on this rank's stage; rank 0 also computes the unsplit model's
    gradients on the same batch, and every stage's gradients go to rank 0 to compare (plain tensors)."""
    job = job_spec("p", "pipeline", world, pipeline={"microBatches": micro_batches})
    env = rank_env(job, Role.WORKER, rank) | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    strategy = PipelineStrategy(read_env(env), Options())
    torch.manual_seed(0)
    whole = models.digits_mlp()
    torch.manual_seed(0)
    stage = strategy.distributed_model(models.digits_mlp())
    x, y = torch.randn(16, 64, generator=torch.Generator().manual_seed(1)), torch.arange(16) % 10
    loss = strategy.forward_backward(stage, x, y, nn.CrossEntropyLoss())
    grads = {n: p.grad for n, p in stage.named_parameters() if p.grad is not None}
    if rank:
        for g in grads.values():
            dist.send(g.contiguous(), dst=0)
        return
    expected = nn.CrossEntropyLoss()(whole(x), y)
    expected.backward()
    want = {n: p.grad for n, p in whole.named_parameters() if p.grad is not None}
    got = dict(grads)
    for other, layout in enumerate(strategy._layout[1:], start=1):
        for name, shape, dtype in layout:
            got[name] = torch.empty(shape, dtype=dtype)
            dist.recv(got[name], src=other)
    assert got.keys() == want.keys()
    for name, grad in want.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-5, atol=1e-7, msg=f"{name} differs")
    assert abs(loss - float(expected)) < 1e-6
    Path(out).write_text("compared")


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 4), (3, 8), (2, 1)], ids=["S2-M4", "S3-M8", "S2-M1"])
def test_gpipe_gives_the_unsplit_models_gradients_on_the_same_batch(
    tmp_path: Path, stages: int, micro_batches: int
) -> None:
    out = tmp_path / "done"
    run_ranks(stages, stage_gradients, micro_batches, str(out))
    assert out.read_text() == "compared"  # rank 0 reached the comparison


def test_two_pipelines_train_as_two_allreduce_workers_do(tmp_path: Path) -> None:
    """2 stages x 2 pipelines step as two allreduce workers (one pipeline's gradients against the unsplit
    model's, 2 and 3 stages: above)."""
    args = ["--example", "digits-mlp", "--steps", "25", "--log-every", "5"]
    runs: dict[str, tuple[str, int, dict[str, Any]]] = {
        "two-workers": ("allreduce", 2, {}),
        "2-stages-x-2": ("pipeline", 4, {"pipeline": {"stages": 2, "microBatches": 8}}),
    }
    final = {}
    for name, (strategy, workers, spec) in runs.items():
        job = launch(job_spec("p", strategy, workers, **spec), [*args, "--save-final", str(tmp_path / f"{name}.pt")],
                     tmp_path / name)  # fmt: skip
        assert job.wait(300) == [0] * workers, job.logs()
        final[name] = torch.load(tmp_path / f"{name}.pt", weights_only=True)
    for single, piped in (("two-workers", "2-stages-x-2"),):
        assert final[single].keys() == final[piped].keys()
        for name in final[single]:
            torch.testing.assert_close(final[piped][name], final[single][name], rtol=1e-5, atol=1e-6,
                                       msg=f"{piped}: {name} differs")  # fmt: skip
