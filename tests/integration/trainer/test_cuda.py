"""The trainer on a GPU: what only CUDA tensors show. Every rank here shares one GPU, and NCCL refuses two
ranks of a communicator on one device ("invalid usage"), so NCCL runs at one worker; our ring and the
parameter server, whose bytes cross TCP through host memory, run with several ranks on the one device.
Results are compared with the same run on the CPU (CUDA_VISIBLE_DEVICES="") within float tolerance: GPU
kernels sum in another order. Skipped where no GPU is visible; the CPU tiers cover the same logic there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from ringleader_api import TrainingJob
from ringleader_devcluster.layout import REPO_ROOT
from ringleader_trainer.checkpoints.training import rng_states, set_rng_states
from ringleader_trainer.elastic import healing
from ringleader_trainer.strategies.ring import ring_allreduce

from tests.integration.trainer.test_healing import heals_and_ends_bit_identical
from tests.support.launch import LocalJob, job_spec, launch
from tests.support.ranks import free_port, run_ranks

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device visible: these check the trainer on CUDA tensors"
)

CPU = {"CUDA_VISIBLE_DEVICES": ""}
PLAIN_SGD = ["--momentum", "0", "--weight-decay", "0"]


def ring_on_cuda(rank: int, world: int) -> None:
    gen = torch.Generator().manual_seed(99 + rank)
    for size in (1, 7, 4099, 1 << 20):
        for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
            # Small integers are exact in bfloat16 (8 significant bits), so its sums compare exactly whatever
            # the order of addition.
            exact = dtype in (torch.int64, torch.bfloat16)
            host = (torch.randint(-40, 40, (size,), generator=gen) if exact
                    else torch.randn(size, generator=gen)).to(dtype)  # fmt: skip
            expected = host.clone()
            dist.all_reduce(expected)  # gloo, on the CPU
            t = host.cuda()
            assert ring_allreduce(t, chunk_bytes=1 << 14) is t
            assert t.is_cuda
            torch.testing.assert_close(t.cpu(), expected, msg=f"{size} x {dtype}, rank {rank}")
    m = torch.randn(9, 5, generator=gen).cuda().t()  # non-contiguous, reduced in place
    expected = m.cpu().clone()
    dist.all_reduce(expected)
    ring_allreduce(m)
    torch.testing.assert_close(m.cpu(), expected)


@pytest.mark.parametrize("world", [2, 3])
def test_our_ring_sums_cuda_tensors_in_place(world: int) -> None:
    run_ranks(world, ring_on_cuda)


def run(tmp_path: Path, name: str, strategy: str, workers: int, args: list[str], ps: int = 0,
        env: dict[str, str] | None = None, **spec: Any) -> tuple[LocalJob, dict[str, torch.Tensor]]:  # fmt: skip
    final = tmp_path / f"{name}.pt"
    job = launch(job_spec("gpu", strategy, workers, ps, **spec), [*args, "--save-final", str(final)],
                 tmp_path / name, env_overrides=env)  # fmt: skip
    assert job.wait(timeout=600) == [0] * len(job.ranks), job.logs()
    return job, dict(torch.load(final, weights_only=True))


def on_device(job: LocalJob) -> set[str]:
    """The devices the workers said they train on (their start line)."""
    return {w.stderr.split(", on ", 1)[1].split(",", 1)[0] for w in job.workers if ", on " in w.stderr}


def assert_same_model(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], what: str) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        torch.testing.assert_close(value, b[name], rtol=1e-3, atol=1e-4, msg=f"{what}: {name} differs")


def test_the_gpu_examples_command_trains_on_nccl(tmp_path: Path) -> None:
    """examples/gpu-allreduce.yaml's trainer command, one worker: DDP on the GPU over NCCL."""
    job, _ = run(tmp_path, "gpu", "allreduce", 1, ["--example", "wide-mlp", "--steps", "200", "--log-every", "50"])
    assert on_device(job) == {"cuda:0"}
    losses = [e["loss"] for e in job.workers[0].events() if "loss" in e]
    assert len(losses) == 4 and losses[-1] < losses[0], losses


def test_the_strategy_api_example_trains_on_the_gpu(tmp_path: Path) -> None:
    """examples/train_custom.py as users copy it, its workers on the GPU (under the parameter server: two
    workers can share the device)."""
    job = launch(job_spec("custom", "parameter-server", 2, 1, parameterServer={"mode": "asynchronous"}),
                 ["--steps", "200"], tmp_path, script=REPO_ROOT / "examples" / "train_custom.py",
                 env_overrides={"PYTHONUNBUFFERED": "1"})  # fmt: skip
    assert job.wait(300) == [0, 0, 0], job.logs()
    assert on_device(job) == {"cuda:0"}
    losses = [e["loss"] for e in job.workers[0].events() if "loss" in e]
    assert len(losses) == 10 and sum(losses[-3:]) / 3 < 0.2, losses  # as on the CPU (test_examples.py)


@pytest.mark.parametrize(
    ("strategy", "ps", "spec", "extra"),
    [
        ("parameter-server", 1, {"parameterServer": {"mode": "synchronous"}}, []),
        ("local-sgd", 0, {"localSGD": {"period": 4}}, ["--allreduce", "ring"]),
    ],
    ids=["ps-synchronous", "local-sgd-ring"],
)
def test_several_workers_on_the_gpu_end_where_the_cpu_does(
    tmp_path: Path, strategy: str, ps: int, spec: dict[str, Any], extra: list[str]
) -> None:
    args = ["--example", "digits-mlp", "--steps", "24", "--log-every", "8", *PLAIN_SGD, *extra]
    gpu_job, gpu = run(tmp_path, "gpu", strategy, 2, args, ps, **spec)
    cpu_job, cpu = run(tmp_path, "cpu", strategy, 2, args, ps, env=CPU, **spec)
    assert on_device(gpu_job) == {"cuda:0"} and on_device(cpu_job) == {"cpu"}
    assert_same_model(gpu, cpu, f"{strategy} on cuda vs cpu")


@pytest.mark.parametrize(
    ("strategy", "spec"),
    [
        ("sharded", {"sharded": {"stage": 3}}),
        ("sharded", {"sharded": {"stage": 1}}),
        ("pipeline", {"pipeline": {"stages": 1, "microBatches": 4}}),
    ],
    ids=["sharded-zero3", "sharded-zero1", "pipeline-one-stage"],
)
def test_one_worker_of_sharded_and_pipeline_ends_on_the_gpu_where_the_cpu_does(
    tmp_path: Path, strategy: str, spec: dict[str, Any]
) -> None:
    """FSDP2 and ZeroRedundancyOptimizer over NCCL, GPipe's schedule on CUDA tensors: one worker (two ranks
    cannot share the one GPU under NCCL); the CPU tiers run them with several."""
    args = ["--example", "digits-mlp", "--steps", "24", "--log-every", "8", *PLAIN_SGD]
    gpu_job, gpu = run(tmp_path, "gpu", strategy, 1, args, **spec)
    cpu_job, cpu = run(tmp_path, "cpu", strategy, 1, args, env=CPU, **spec)
    assert on_device(gpu_job) == {"cuda:0"} and on_device(cpu_job) == {"cpu"}
    assert_same_model(gpu, cpu, f"{strategy} on cuda vs cpu")
    peak = gpu_job.workers[0].events("done")[0]["memory_peak_bytes"]
    assert 0 < peak < 1 << 30  # the CUDA allocator's peak, reported in the done line


def test_a_checkpoint_moves_between_gpu_and_cpu_ranks(tmp_path: Path) -> None:
    """Written on the GPU, resumed on a CPU-only rank, written there, resumed on the GPU: ends where an
    uninterrupted GPU run does."""
    directory = tmp_path / "ckpt"
    spec: dict[str, Any] = {"checkpoint": {"directory": str(directory), "intervalSteps": 10, "keep": 3}}
    args = ["--example", "digits-mlp", "--log-every", "10", *PLAIN_SGD]
    legs = [("gpu-1", 20, None, "cuda:0", None), ("cpu-2", 30, CPU, "cpu", 20), ("gpu-3", 40, None, "cuda:0", 30)]
    for name, steps, env, device, resumed in legs:
        job, model = run(tmp_path, name, "allreduce", 1, [*args, "--steps", str(steps)], env=env, **spec)
        assert on_device(job) == {device}
        assert [e["step"] for e in job.workers[0].events("resume")] == ([resumed] if resumed else []), job.logs()
    _, whole = run(tmp_path, "whole", "allreduce", 1, [*args, "--steps", "40"])
    assert_same_model(model, whole, "resumed across devices vs uninterrupted")


@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_the_gpu_examples_trainer_under_torchrun_ends_where_python_m_does(tmp_path: Path, rendezvous: str) -> None:
    """`torchrun -m ringleader_trainer ...` with no options: the PET_* variables the operator writes (static, or
    c10d's elastic rendezvous hosted by worker 0) form the world, torchrun's child trains on the GPU over NCCL and
    ends where `python -m ringleader_trainer` does (same seed, same device)."""
    args = ["--example", "digits-mlp", "--steps", "24", "--log-every", "8", *PLAIN_SGD]
    spec: dict[str, Any] = {"strategy": "allreduce", "workers": {"replicas": 1}}
    if rendezvous == "c10d":
        spec |= {"workers": {"replicas": 1, "minReplicas": 1, "maxReplicas": 2}, "torchrun": {"rendezvous": "c10d"}}
    job = TrainingJob.model_validate({"metadata": {"name": "gpu", "namespace": "local"}, "spec": spec})
    final = tmp_path / "torchrun.pt"
    port = str(free_port())
    env = {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": port, "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}"}
    launched = launch(job, ["-m", "ringleader_trainer", *args, "--save-final", str(final)], tmp_path / "torchrun",
                      env_overrides=env, module="torch.distributed.run")  # fmt: skip
    assert launched.wait(timeout=600) == [0], launched.logs()
    env_seen = launched.workers[0].env
    assert env_seen.get("PET_RDZV_BACKEND", "static") == ("c10d" if rendezvous == "c10d" else "static")
    assert on_device(launched) == {"cuda:0"}, launched.logs()
    _, plain = run(tmp_path, "plain", "allreduce", 1, args)
    assert_same_model(dict(torch.load(final, weights_only=True)), plain, f"torchrun ({rendezvous}) vs python -m")


def test_a_workers_state_carries_its_gpus_rng_and_a_cpu_rank_leaves_it_alone() -> None:
    """What a checkpoint holds and a live peer sends (`rng_states`) includes the GPU's generator: dropout on the
    GPU draws from it, so a replacement without it would draw other masks than the rank it replaces. It crosses
    the heal's encoding (read with weights_only) intact; a CPU rank given it ignores it."""
    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    torch.cuda.manual_seed(5)
    saved = healing.decode(healing.encode({"rng": rng_states(gpu)}), 1)["rng"]
    drawn = torch.rand(8, device=gpu)
    torch.cuda.manual_seed(6)
    set_rng_states(saved, gpu)
    assert torch.equal(torch.rand(8, device=gpu), drawn)
    torch.cuda.manual_seed(6)
    untouched = torch.cuda.get_rng_state(gpu)
    set_rng_states(saved, cpu)
    assert torch.equal(torch.cuda.get_rng_state(gpu), untouched)
    assert "cuda" not in rng_states(cpu)


@pytest.mark.parametrize("victim", [1, 0], ids=["worker-1", "worker-0-hosting-the-store"])
def test_a_killed_local_sgd_worker_heals_on_the_gpu_and_the_run_ends_bit_identical(tmp_path: Path, victim: int) -> None:
    """test_healing's case on CUDA tensors: 3 local-SGD workers on the GPU, averaging over our ring (NCCL
    refuses several ranks on one device). The killed worker's replacement receives its state as of the last sync
    from its successor (moved through host memory over gloo) and ends bit-identical to an uninterrupted run."""
    heals_and_ends_bit_identical(tmp_path, "local-sgd", victim, extra=["--allreduce", "ring"])
