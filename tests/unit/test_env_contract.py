"""The operator writes exactly what the trainer reads, the trainer understands it, and the docs list it."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import ringleader_api as api
from ringleader_api import CONTRACT_ENV, Role, TrainingJob
from ringleader_operator.builders import desired_ranks
from ringleader_operator.launchers import TORCHRUN_ENV
from ringleader_operator.rank_env import rank_env
from ringleader_trainer import env as trainer_env
from ringleader_trainer.env import READS, EnvError, from_env

from tests.unit.operator.builders import training_job

DOC = Path(__file__).resolve().parents[2] / "docs" / "env-contract.md"
TEMPLATE = {"spec": {"containers": [{"name": "trainer", "command": ["python", "train.py"]}]}}


def job(**spec: Any) -> TrainingJob:
    return training_job(
        name="mnist", namespace="ml", uid="0d5c", template=TEMPLATE, **({"workers": {"replicas": 3}} | spec)
    )


PS = {
    "strategy": "parameter-server",
    "parameterServer": {"mode": "bounded-staleness", "maxStaleness": 2, "backup": True},
    "parameterServers": {"replicas": 2, "template": TEMPLATE},
}
JOBS = {
    "allreduce": job(checkpoint={"claimName": "ckpt"}),
    "parameter-server": job(**PS),
    "local-sgd": job(strategy="local-sgd", localSGD={"period": 4}),
    "diloco": job(strategy="diloco", diloco={"period": 6, "outerLearningRate": 0.25, "outerMomentum": 0}),
    "sharded": job(strategy="sharded", sharded={"stage": 2, "replicas": 3}),
    "pipeline": job(strategy="pipeline", pipeline={"microBatches": 8}),
}
RANKS = [(name, role, i) for name, j in JOBS.items() for role, i in desired_ranks(j)]


@pytest.mark.parametrize(("name", "role", "index"), RANKS, ids=[f"{n}-{r.value}-{i}" for n, r, i in RANKS])
def test_trainer_understands_every_rank_the_operator_writes(name: str, role: Role, index: int) -> None:
    j = JOBS[name]
    env = from_env(rank_env(j, role, index))
    assert (env.role, env.index, env.strategy, env.job, env.namespace) == (role.value, index, name, "mnist", "ml")
    assert env.master_addr == "mnist-worker-0.mnist" and env.master_port == 29500
    if role == Role.WORKER:
        assert env.worker is not None and (env.worker.rank, env.worker.world_size, env.global_rank) == (index, 3, index)
    else:
        assert env.worker is None and env.global_rank == 3 + index
    assert (env.ps is not None) is (name == "parameter-server")
    if env.ps is not None:
        assert env.ps.addrs == ("mnist-ps-0.mnist:29600", "mnist-ps-1.mnist:29600") and env.ps.port == 29600
        assert (env.ps.mode, env.ps.max_staleness) == ("bounded-staleness", 2)
    assert env.local_sgd_period == (4 if name == "local-sgd" else None)
    assert env.diloco == (trainer_env.DiLoCo(period=6, outer_lr=0.25, outer_momentum=0.0) if name == "diloco" else None)
    assert env.sharded_stage == (2 if name == "sharded" else None)
    assert env.sharded_replicas == (3 if name == "sharded" else 1)
    assert env.pipeline == (trainer_env.Pipeline(stages=3, micro_batches=8) if name == "pipeline" else None)
    assert (env.checkpoints is not None) is (name == "allreduce")
    if env.checkpoints is not None:
        assert (env.checkpoints.directory, env.checkpoints.interval, env.checkpoints.keep) == (
            "/checkpoints/ml/mnist/0d5c",
            100,
            3,
        )


@pytest.mark.parametrize(
    ("operator", "trainer"),
    [(api.Role, trainer_env.Role), (api.Strategy, trainer_env.StrategyName), (api.PSMode, trainer_env.PSMode)],
    ids=["role", "strategy", "ps-mode"],
)
def test_the_trainer_names_roles_strategies_and_modes_as_the_operator_does(
    operator: type[StrEnum], trainer: type[StrEnum]
) -> None:
    assert [m.value for m in operator] == [m.value for m in trainer]


SHORT = job(workers={"replicas": 3, "minReplicas": 2})  # trains short of a lost rank: it has a coordinator


def test_a_job_training_short_finds_its_coordinator_and_no_other_job_has_one() -> None:
    for i in range(3):
        env = from_env(rank_env(SHORT, Role.WORKER, i))
        assert (env.rendezvous, env.min_workers) == (("mnist-coordinator-0d5c", 29500), 2)
    c10d = job(workers={"replicas": 2, "minReplicas": 1}, torchrun={"rendezvous": "c10d"})  # torchrun's own store
    for j in [*JOBS.values(), c10d]:
        assert all("RINGLEADER_RENDEZVOUS" not in rank_env(j, role, i) for role, i in desired_ranks(j))


def test_the_operator_writes_exactly_what_the_trainer_and_torchrun_read() -> None:
    c10d = job(workers={"replicas": 2, "minReplicas": 1}, torchrun={"rendezvous": "c10d"})  # torchrun's elastic
    written = {key for name, role, i in RANKS for key in rank_env(JOBS[name], role, i)}
    written |= {key for role, i in desired_ranks(c10d) for key in rank_env(c10d, role, i)}
    written |= {key for role, i in desired_ranks(SHORT) for key in rank_env(SHORT, role, i)}
    assert written == READS | TORCHRUN_ENV and not READS & TORCHRUN_ENV
    assert CONTRACT_ENV == READS  # what a template may not set


def test_the_docs_list_exactly_the_contract() -> None:
    """The first table lists every variable once; the launcher tables below it add none of their own."""
    rows = re.findall(r"^\| `([A-Z_]+)` \| [a-z]", DOC.read_text(), flags=re.MULTILINE)
    assert set(rows) == READS | TORCHRUN_ENV and len(rows) == len(set(rows))


def test_each_process_of_a_pod_of_several_ranks_is_its_own_rank() -> None:
    """2 pods x 2 processes: what the operator writes for pod 1, as the supervisor (or torchrun) passes it on
    to its second process."""
    two = job(workers={"replicas": 2, "procsPerPod": 2})
    pod = rank_env(two, Role.WORKER, 1)
    assert (pod["WORLD_SIZE"], pod["RANK"], pod["LOCAL_WORLD_SIZE"], pod["GROUP_RANK"]) == ("4", "2", "2", "1")
    assert (pod["PET_NNODES"], pod["PET_NPROC_PER_NODE"], pod["PET_NODE_RANK"]) == ("2", "2", "1")
    env = from_env(pod | {"RANK": "3", "LOCAL_RANK": "1", "RINGLEADER_LOCAL_LAUNCH": "1"})
    assert env.worker == trainer_env.WorkerRank(rank=3, world_size=4, local_rank=1, local_world_size=2, pod=1)
    assert (env.index, env.global_rank, env.global_world_size, env.num_workers) == (3, 3, 4, 4)
    assert env.metrics_port == int(pod["RINGLEADER_METRICS_PORT"]) + 1


GOOD = rank_env(JOBS["parameter-server"], Role.WORKER, 1)


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"RANK": "3"}, "RANK=3 must be less than WORLD_SIZE=3"),
        ({"RANK": "x"}, "RANK='x' is not an integer"),
        ({"RINGLEADER_PS_ADDRS": "mnist-ps-0.mnist:29600"}, "RINGLEADER_PS_ADDRS lists 1 addresses"),
        ({"RINGLEADER_STRATEGY": "gossip"}, "RINGLEADER_STRATEGY='gossip' is not one of"),
        ({"RINGLEADER_INDEX": "7"}, "RINGLEADER_INDEX=7 is out of range"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR is not set"),
        ({"RINGLEADER_PS_MAX_STALENESS": None}, "RINGLEADER_PS_MAX_STALENESS is not set"),
        ({"RINGLEADER_PS_BACKUP": "yes"}, "RINGLEADER_PS_BACKUP='yes' must be 1 (with two or more shards) or unset"),
        ({"RINGLEADER_GLOBAL_WORLD_SIZE": "4"}, "RINGLEADER_GLOBAL_WORLD_SIZE=4 is not"),
        # what torchrun --standalone gives the trainer in worker 1's pod: a world of its own
        ({"WORLD_SIZE": "1", "RANK": "0"}, "WORLD_SIZE=1 is not the job's 3 worker ranks"),
        # what torchrun --nproc-per-node 3 gives one of its processes in worker 1's pod
        ({"RANK": "2"}, "RANK=2 is not rank 1, LOCAL_RANK=0 of worker pod 1"),
        # a pod of 2 ranks whose command starts one process, not a launcher
        (
            {
                "RINGLEADER_PROCS_PER_POD": "2",
                "RINGLEADER_NUM_WORKERS": "6",
                "WORLD_SIZE": "6",
                "RINGLEADER_GLOBAL_WORLD_SIZE": "8",
            },
            "RINGLEADER_PROCS_PER_POD=2: this pod runs 2 ranks, and nothing",
        ),
        (
            {
                "RINGLEADER_PROCS_PER_POD": "2",
                "RINGLEADER_NUM_WORKERS": "6",
                "WORLD_SIZE": "6",
                "RINGLEADER_GLOBAL_WORLD_SIZE": "8",
                "RINGLEADER_LOCAL_LAUNCH": "1",
                "LOCAL_RANK": "2",
            },
            "LOCAL_RANK=2 must be less than RINGLEADER_PROCS_PER_POD=2",
        ),
        ({"RINGLEADER_SHARDED_REPLICAS": "5"}, "RINGLEADER_SHARDED_REPLICAS=5 does not divide the"),
    ],
    ids=str.split(
        "rank-too-big rank-not-int ps-addrs strategy index master staleness ps-backup world standalone-world "
        "renumbered unlaunched local-rank sharded-replicas"
    ),
)
def test_bad_environments_fail_with_one_line_naming_the_variable(change: dict[str, str | None], names: str) -> None:
    merged: dict[str, str | None] = {**GOOD, **change}
    env = {k: v for k, v in merged.items() if v is not None}
    with pytest.raises(EnvError) as err:
        from_env(env)
    assert names in str(err.value) and "\n" not in str(err.value)
