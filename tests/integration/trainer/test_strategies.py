"""The trainer as plain processes on this machine, every rank with the environment the operator writes:
strategies agree where they should, converge, bound staleness, resume exactly, and fail with the documented
exit codes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.examples import models
from ringleader_trainer.exitcodes import ExitCode

from tests.support.launch import LocalJob, job_spec, launch

PS_SYNC = {"parameterServer": {"mode": "synchronous"}}
# The paper's outer momentum (0.9) diverges here: 8 inner steps of SGD with momentum 0.9 at lr 0.1 (BENCHMARKS.md).
DILOCO = {"diloco": {"period": 8, "outerLearningRate": 0.7, "outerMomentum": 0.5}}


def run(tmp_path: Path, strategy: str, workers: int, args: list[str], ps: int = 0, **spec: Any) -> LocalJob:
    job = launch(job_spec("t", strategy, workers, ps, **spec), ["--example", "digits-mlp", *args], tmp_path / "logs")
    codes = job.wait(timeout=600)
    assert codes == [0] * len(job.ranks), job.logs()
    return job


def final_params(path: Path) -> dict[str, torch.Tensor]:
    return dict(torch.load(path, weights_only=True))


def test_synchronous_ps_our_ring_and_each_zero_stage_equal_allreduce_sgd_after_k_steps(tmp_path: Path) -> None:
    args = ["--steps", "25", "--log-every", "5", "--momentum", "0", "--weight-decay", "0"]  # plain SGD
    run(tmp_path / "ar", "allreduce", 3, [*args, "--save-final", str(tmp_path / "ar.pt")])
    run(tmp_path / "ring", "allreduce", 3, [*args, "--allreduce", "ring", "--save-final", str(tmp_path / "ring.pt")])
    run(tmp_path / "ps", "parameter-server", 3, [*args, "--save-final", str(tmp_path / "ps.pt")], ps=2, **PS_SYNC)
    for stage in (1, 3):  # stage 2 is stage 3 keeping each layer gathered from forward to backward
        run(tmp_path / f"zero{stage}", "sharded", 3, [*args, "--save-final", str(tmp_path / f"zero{stage}.pt")],
            sharded={"stage": stage})  # fmt: skip
    ar = final_params(tmp_path / "ar.pt")
    torch.manual_seed(0)  # the example's seed: the model every rank started from
    initial = models.digits_mlp().state_dict()
    assert all(not torch.allclose(initial[n], ar[n]) for n in ar)  # 25 steps moved every tensor
    # Sharded: the same sums in another order (reduce-scatter), so equal to float32 rounding, not bit for bit.
    for other in ("ring", "ps", "zero1", "zero3"):
        params = final_params(tmp_path / f"{other}.pt")
        assert params.keys() == ar.keys()
        for name in ar:
            torch.testing.assert_close(params[name], ar[name], rtol=1e-5, atol=1e-6, msg=f"{other}: {name} differs")


def test_diloco_with_an_outer_learning_rate_of_one_and_no_momentum_is_local_sgd(tmp_path: Path) -> None:
    """The outer step from the anchor along the averaged change (anchor - mean(anchor - p)) is the average of the
    workers' parameters: equal to local SGD's to float32 rounding, over 25 steps (5 syncs)."""
    args = ["--steps", "25", "--log-every", "5"]
    run(tmp_path / "lsgd", "local-sgd", 3, [*args, "--save-final", str(tmp_path / "lsgd.pt")], localSGD={"period": 5})
    plain = {"period": 5, "outerLearningRate": 1.0, "outerMomentum": 0.0}
    run(tmp_path / "diloco", "diloco", 3, [*args, "--save-final", str(tmp_path / "diloco.pt")], diloco=plain)
    nesterov = plain | {"outerLearningRate": 0.7, "outerMomentum": 0.5}
    run(tmp_path / "outer", "diloco", 3, [*args, "--save-final", str(tmp_path / "outer.pt")], diloco=nesterov)
    lsgd, diloco, outer = (final_params(tmp_path / f"{n}.pt") for n in ("lsgd", "diloco", "outer"))
    for name in lsgd:
        torch.testing.assert_close(diloco[name], lsgd[name], rtol=1e-5, atol=1e-6, msg=f"{name} differs")
    assert any(not torch.allclose(outer[n], lsgd[n]) for n in lsgd)  # the outer settings do reach the trainer


def staleness_run(tmp_path: Path, mode: str) -> list[dict[str, Any]]:
    spec = {"parameterServer": {"mode": mode} | ({"maxStaleness": 2} if mode == "bounded-staleness" else {})}
    # Worker 2 sleeps 30 ms every step: the others would run far ahead of it without the bound.
    job = run(tmp_path / mode, "parameter-server", 3, ["--steps", "60", "--straggler", "2:0.03"], ps=2, **spec)
    return [e for s in job.servers for e in s.events("done")]


def test_bounded_staleness_keeps_every_worker_within_max_staleness_of_the_slowest(tmp_path: Path) -> None:
    bounded = staleness_run(tmp_path, "bounded-staleness")
    assert len(bounded) == 2
    for shard in bounded:
        assert shard["max_lead_on_release"] <= 2  # never more than maxStaleness steps ahead
        assert shard["waits"] > 0  # and the bound did hold fast workers back
    unbounded = staleness_run(tmp_path, "asynchronous")
    assert max(s["max_lead_on_release"] for s in unbounded) > 2  # without it they run ahead


@pytest.mark.parametrize(
    ("strategy", "spec", "ps", "threshold"),
    [
        ("allreduce", {}, 0, 0.97),
        ("parameter-server", PS_SYNC, 2, 0.97),
        ("parameter-server", {"parameterServer": {"mode": "asynchronous"}}, 2, 0.95),
        ("local-sgd", {"localSGD": {"period": 8}}, 0, 0.96),
        ("diloco", DILOCO, 0, 0.96),
        ("sharded", {"sharded": {"stage": 3}}, 0, 0.97),
        ("pipeline", {"pipeline": {"stages": 2}}, 0, 0.97),  # two pipelines of two stages
    ],
    ids=["allreduce", "ps-synchronous", "ps-asynchronous", "local-sgd", "diloco", "sharded-zero3", "pipeline-2x2"],
)
def test_digits_convergence_with_four_workers(
    tmp_path: Path, strategy: str, spec: dict[str, Any], ps: int, threshold: float
) -> None:
    job = run(tmp_path, strategy, 4, ["--log-every", "100"], ps=ps, **spec)
    done = [w.events("done")[0] for w in job.workers]
    steps = 600  # the example's default
    assert all(d["step"] == steps for d in done)
    assert done[0]["test_accuracy"] >= threshold, done[0]
    rounds = {d["rounds"] for d in done}
    assert rounds == ({steps // 8} if strategy in ("local-sgd", "diloco") else {steps})  # communication rounds


# Checkpoints of three layouts: a parameter server's shards and workers, one sharded state written by every
# rank, a file per pipeline stage. Allreduce and local SGD save one replicated model: their resume from a
# checkpoint is test_stopping's (a SIGTERM stop, then a bit-identical run), their resume after a kill the chaos
# run's and test_recovery's.
@pytest.mark.parametrize(
    ("strategy", "spec", "ps"),
    [
        ("parameter-server", PS_SYNC, 1),
        ("sharded", {"sharded": {"stage": 3}}, 0),
        ("pipeline", {}, 0),
    ],
    ids=["ps-synchronous", "sharded-zero3", "pipeline"],
)
def test_killed_run_resumes_from_its_checkpoint_and_ends_where_an_uninterrupted_run_does(
    tmp_path: Path, strategy: str, spec: dict[str, Any], ps: int
) -> None:
    # Worker 0 sleeps 40 ms a step so the kill lands between checkpoints 40 and 60; it changes no numbers.
    args = ["--steps", "70", "--log-every", "10", "--straggler", "0:0.04"]

    def start(name: str, directory: Path) -> tuple[LocalJob, Path]:
        final = tmp_path / name / "final.pt"
        checkpoint = {"checkpoint": {"directory": str(directory), "intervalSteps": 20, "keep": 2}}
        job = job_spec("t", strategy, 2, ps, **spec, **checkpoint)
        return launch(job, ["--example", "digits-mlp", *args, "--save-final", str(final)], tmp_path / name), final

    whole, whole_final = start("whole", tmp_path / "whole-ckpt")
    assert whole.wait(600) == [0] * len(whole.ranks), whole.logs()

    directory = tmp_path / "ckpt"
    first, final = start("killed", directory)
    expected = ckpt.expected_files(2, ps)
    deadline = time.monotonic() + 300
    while 40 not in ckpt.complete_steps(directory, expected):
        assert time.monotonic() < deadline and all(r.proc.poll() is None for r in first.ranks), first.logs()
        time.sleep(0.02)
    first.kill()
    assert not any(r.events("done") for r in first.ranks) and not final.exists()

    again, final = start("again", directory)
    assert again.wait(600) == [0] * len(again.ranks), again.logs()
    resumed = {e["step"] for r in again.ranks for e in r.events("resume")}
    assert resumed == {40}
    assert ckpt.complete_steps(directory, expected)[:2] == [70, 60]  # the final checkpoint
    assert len(ckpt.steps(directory)) <= 3  # keep=2, pruned by worker 0 when it saves (so one may lag)
    a, b = final_params(whole_final), final_params(final)
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after resuming"


def test_a_sharded_checkpoint_resumes_at_another_world_size(tmp_path: Path) -> None:
    # Stage 3 through the trainer; each stage's model and optimizer state read back at another world size
    # exactly: test_sharded_checkpoint.py.
    stage, old, new = 3, 2, 3
    directory = tmp_path / "ckpt"

    def start(name: str, workers: int, steps: int) -> LocalJob:
        args = ["--steps", str(steps), "--log-every", "10", "--save-final", str(tmp_path / f"{name}.pt")]
        return run(tmp_path / name, "sharded", workers, args, sharded={"stage": stage},
                   checkpoint={"directory": str(directory), "intervalSteps": 10})  # fmt: skip

    start("before", old, 30)
    # The other world reads the shards back: with no steps left, it ends with exactly the model it read.
    after = start("after", new, 30)
    assert [e["step"] for w in after.workers for e in w.events("resume")] == [30] * new
    before, read = final_params(tmp_path / "before.pt"), final_params(tmp_path / "after.pt")
    assert all(torch.equal(before[name], read[name]) for name in before)
    more = start("more", new, 40)  # and trains on from there
    assert [e["step"] for w in more.workers for e in w.events("done")] == [40] * new


def run_one(tmp_path: Path, args: list[str], env: dict[str, str] | None = None, strategy: str = "allreduce",
            workers: int = 1, **spec: Any) -> tuple[int, str]:  # fmt: skip
    job = launch(job_spec("bad", strategy, workers, **spec), args, tmp_path, env_overrides=env, only={("worker", 0)})
    (code,) = job.wait(120)
    return code, job.ranks[0].stderr


EXAMPLE = ["--example", "digits-mlp", "--steps", "5"]


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (EXAMPLE, {"RINGLEADER_ROLE": ""}, ExitCode.BAD_ENVIRONMENT, "RINGLEADER_ROLE is not set"),
        (EXAMPLE, {"RANK": "3"}, ExitCode.BAD_ENVIRONMENT, "RANK=3 must be less than WORLD_SIZE=1"),
        (EXAMPLE, {"RINGLEADER_STRATEGY": "parameter-server"}, ExitCode.BAD_ENVIRONMENT, "RINGLEADER_NUM_PS must be"),
        (["--example", "resnet-9000"], {}, ExitCode.BAD_CONFIG, "--example 'resnet-9000' is not one of digits-mlp"),
        ([*EXAMPLE, "--steps", "0"], {}, ExitCode.BAD_CONFIG, "--steps must be at least 1"),
        ([*EXAMPLE, "--allreduce", "tree"], {}, ExitCode.BAD_CONFIG, "invalid choice: 'tree'"),
        (
            [*EXAMPLE, "--allreduce", "ring"],
            {"RINGLEADER_TOKEN_FILE": ""},
            ExitCode.BAD_ENVIRONMENT,
            "RINGLEADER_TOKEN_FILE is not set: the parameter server and the ring authenticate",
        ),
    ],
    ids=[
        "missing-role",
        "rank-out-of-range",
        "ps-without-shards",
        "unknown-example",
        "zero-steps",
        "bad-choice",
        "ring-without-token",
    ],
)
def test_bad_input_exits_with_a_one_line_error_and_its_code(
    tmp_path: Path, args: list[str], env: dict[str, str], code: ExitCode, message: str
) -> None:
    exit_code, stderr = run_one(tmp_path, args, env)
    assert exit_code == code
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and f"exit {int(code)}" in lines[0], stderr


def test_unreachable_master_is_a_retryable_rendezvous_timeout(tmp_path: Path) -> None:
    # Worker 1 of 2 alone: worker 0, which hosts the rendezvous, never comes up.
    job = launch(job_spec("lonely", "allreduce", 2), [*EXAMPLE, "--rendezvous-timeout", "3"], tmp_path,
                 only={("worker", 1)})  # fmt: skip
    t0 = time.monotonic()
    (code,) = job.wait(60)
    assert code == ExitCode.RENDEZVOUS_TIMEOUT, job.logs()
    assert time.monotonic() - t0 < 30 and "rendezvous with 127.0.0.1" in job.ranks[0].stderr


def test_an_unloadable_checkpoint_is_a_permanent_failure(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    (ckpt.step_dir(directory, 20)).mkdir(parents=True)
    (ckpt.step_dir(directory, 20) / "worker-0.pt").write_bytes(b"not a checkpoint")
    code, stderr = run_one(tmp_path, EXAMPLE, checkpoint={"directory": str(directory), "intervalSteps": 10})
    assert code == ExitCode.CORRUPT_CHECKPOINT and "worker-0.pt cannot be loaded" in stderr, stderr


@pytest.mark.parametrize(
    ("victim", "spec", "ps", "extra"),
    [(("worker", 1), {}, 0, []), (("worker", 1), {}, 0, ["--allreduce", "ring"]), (("ps", 0), PS_SYNC, 1, [])],
    ids=["worker", "worker-ring", "ps"],
)
def test_a_lost_peer_ends_the_others_with_a_retryable_code(
    tmp_path: Path, victim: tuple[str, int], spec: dict[str, Any], ps: int, extra: list[str]
) -> None:
    strategy = "parameter-server" if ps else "allreduce"
    job = launch(job_spec("lost", strategy, 2, ps, **spec),
                 [*EXAMPLE, "--steps", "100000", "--log-every", "5", "--timeout", "20",
                  "--max-recoveries", "0", *extra], tmp_path)  # fmt: skip
    deadline = time.monotonic() + 120
    while not job.workers[0].events():
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.1)
    target = next(r for r in job.ranks if (r.role, r.index) == victim)
    target.proc.kill()
    survivors = [r for r in job.ranks if r is not target]
    codes = [r.proc.wait(60) for r in survivors]
    assert codes == [ExitCode.PEER_LOST] * len(survivors), job.logs()
