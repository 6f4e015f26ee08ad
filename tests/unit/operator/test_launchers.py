"""torchrun's side of the contract: the PET_* table, torch's own parser reading it, and the split-world refusal."""

from __future__ import annotations

from typing import Any

import pytest
import torch.distributed.run as torchrun
from ringleader_api import Role, TrainingJob
from ringleader_operator.builders import InvalidTemplate, build_pod, desired_ranks, validate
from ringleader_operator.launchers import OPTIONS, TORCHRUN_ENV, split_world
from ringleader_operator.rank_env import rank_env, worker_counts

from .builders import training_job

WHERE = "spec.workers.template.spec.containers[0]"


TORCHRUN = {"spec": {"containers": [{"name": "trainer", "image": "ringleader/trainer:0.1",
                                     "command": ["torchrun", "train.py"]}]}}  # fmt: skip


def job(workers: dict[str, Any] | None = None, **spec: Any) -> TrainingJob:
    return training_job(name="mnist", namespace="ml", uid="u1", template=TORCHRUN, workers=workers, **spec)


def test_the_option_table_is_torchruns() -> None:
    """Which of torchrun's options take a value decides where its script starts: the table must be torch's."""
    ours = {names: takes_value for names, takes_value in OPTIONS.items()}
    theirs = {tuple(a.option_strings): a.nargs != 0 for a in torchrun.get_args_parser()._actions if a.option_strings}
    assert ours == theirs


JOBS = {
    "plain-3": job({"replicas": 3}),
    "elastic-2-of-1to4": job({"replicas": 2, "minReplicas": 1, "maxReplicas": 4}),
    "parameter-server": job(
        strategy="parameter-server",
        parameterServers={"replicas": 2, "template": {"spec": {"containers": [{"name": "trainer"}]}}},
    ),
}
RANKS = [(name, role, i) for name, j in JOBS.items() for role, i in desired_ranks(j)]


@pytest.mark.parametrize(("name", "role", "index"), RANKS, ids=[f"{n}-{r.value}-{i}" for n, r, i in RANKS])
def test_pet_variables_per_rank(name: str, role: Role, index: int) -> None:
    j = JOBS[name]
    env = rank_env(j, role, index)
    if role == Role.PS:  # shards run Ringleader's server, never torchrun
        assert not TORCHRUN_ENV & set(env)
        return
    assert {k: env[k] for k in sorted(TORCHRUN_ENV) if k in env} == {
        "PET_MASTER_ADDR": "mnist-worker-0.mnist",
        "PET_MASTER_PORT": "29500",
        "PET_NNODES": str(j.spec.workers.replicas),  # the current world; a resize re-forms it with new pods
        "PET_NODE_RANK": str(index),
        "PET_NPROC_PER_NODE": "1",
    }


@pytest.mark.parametrize("index", [0, 1, 2])
def test_torchrun_with_no_options_forms_the_jobs_world(monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    """torch's own parser, reading only the pod's environment, makes the launch config of this job's world."""
    for key, value in rank_env(JOBS["plain-3"], Role.WORKER, index).items():
        monkeypatch.setenv(key, value)
    config, _, args = torchrun.config_from_args(torchrun.get_args_parser().parse_args(["train.py", "--lr", "1"]))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (3, 3, 1)
    assert (config.rdzv_backend, config.rdzv_endpoint) == ("static", "mnist-worker-0.mnist:29500")
    assert config.rdzv_configs["rank"] == index
    assert args[-3:] == ["train.py", "--lr", "1"]  # the script and its own arguments, untouched


C10D = job({"replicas": 2, "minReplicas": 1, "maxReplicas": 4}, torchrun={"rendezvous": "c10d", "maxRestarts": 5})


@pytest.mark.parametrize("index", [0, 1])
def test_a_c10d_job_gets_torchruns_elastic_rendezvous_hosted_by_worker_0(index: int) -> None:
    env = rank_env(C10D, Role.WORKER, index)
    assert {k: env[k] for k in sorted(TORCHRUN_ENV) if k in env} == {
        "PET_MAX_RESTARTS": "5",
        "PET_NNODES": "1:4",  # every size the job may have: a resize adds or removes pods, the others stay
        "PET_NPROC_PER_NODE": "1",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_CONF": f"is_host={'true' if index == 0 else 'false'}",
        "PET_RDZV_ENDPOINT": "mnist-worker-0.mnist:29400",
        "PET_RDZV_ID": "u1",  # the job's UID: a new job of the same name never meets an old one's agents
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",  # a store per round: rank 0 may move to another pod
    }


@pytest.mark.parametrize("index", [0, 1])
def test_torchrun_with_no_options_joins_the_jobs_elastic_rendezvous(
    monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    for key, value in rank_env(C10D, Role.WORKER, index).items():
        monkeypatch.setenv(key, value)
    config, _, _ = torchrun.config_from_args(torchrun.get_args_parser().parse_args(["train.py"]))
    assert (config.min_nodes, config.max_nodes, config.max_restarts) == (1, 4, 5)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.run_id) == ("c10d", "mnist-worker-0.mnist:29400", "u1")
    assert config.rdzv_configs["is_host"] == ("true" if index == 0 else "false")


def test_the_pods_of_a_c10d_job_serve_any_size() -> None:
    """No world is recorded on them: a resize keeps them (resize.py re-forms only pods of another world)."""
    assert "ringleader.dev/workers" not in build_pod(C10D, Role.WORKER, 1)["metadata"]["annotations"]
    assert build_pod(JOBS["plain-3"], Role.WORKER, 1)["metadata"]["annotations"]["ringleader.dev/workers"] == "3"


def container(command: list[str], args: list[str] | None = None, **env: str) -> dict[str, Any]:
    return {"command": command, "args": args or [], "env": [{"name": k, "value": v} for k, v in env.items()]}


SPLITS = [
    # (id, container, worker pod counts, None or (field, option) named in the refusal)
    ("no-options", container(["torchrun", "train.py"]), range(3, 4), None),
    ("standalone", container(["torchrun", "--standalone", "train.py"]), range(3, 4), ("command", "--standalone")),
    ("standalone-in-args", container(["torchrun"], ["--standalone", "t.py"]), range(3, 4), ("args", "--standalone")),
    ("abbreviated", container(["torchrun"], ["--stand", "t.py"]), range(3, 4), ("args", "--standalone")),
    ("scripts-own-flag", container(["torchrun", "train.py", "--standalone"]), range(3, 4), None),
    ("after-valued-option", container(["torchrun", "--tee", "3", "t.py", "--standalone"]), range(3, 4), None),
    ("standalone-one-pod", container(["torchrun", "--standalone", "train.py"]), range(1, 2), None),
    ("nnodes-1", container(["torchrun", "--nnodes", "1", "train.py"]), range(3, 4), ("command", "--nnodes 1")),
    ("nnodes-equal", container(["torchrun", "--nnodes=3", "train.py"]), range(3, 4), None),
    ("nnodes-range-covers", container(["torchrun", "--nnodes=1:4", "t.py"]), range(2, 5), None),
    ("nnodes-range-short", container(["torchrun", "--nnodes=2:3", "t.py"]), range(2, 5), ("command", "--nnodes 2:3")),
    ("nnodes-expanded", container(["torchrun", "--nnodes=$(WORLD)", "t.py"]), range(3, 4), None),
    ("nproc-per-node", container(["torchrun", "--nproc-per-node=4", "train.py"]), range(3, 4), None),
    ("fixed-node-rank", container(["torchrun", "--node_rank=0", "t.py"]), range(3, 4), ("command", "--node-rank 0")),
    ("node-rank-expanded", container(["torchrun", "--node_rank=$(RANK)", "t.py"]), range(3, 4), None),
    (
        "python-m-localhost",
        container(["python", "-u", "-m", "torch.distributed.run", "--master_addr=localhost", "t.py"]),
        range(3, 4),
        ("command", "--master-addr localhost"),
    ),
    ("master-named", container(["torchrun", "--master-addr=$(MASTER_ADDR)", "t.py"]), range(3, 4), None),
    (
        "launch-module",
        container(["python3", "-m", "torch.distributed.launch", "--use_env", "--standalone", "t.py"]),
        range(3, 4),
        ("command", "--standalone"),
    ),
    ("python-script", container(["python", "train.py", "--standalone"]), range(3, 4), None),
    (
        "rdzv-loopback-v6",
        container(["torchrun", "--rdzv-endpoint=[::1]:29400", "t.py"]),
        range(3, 4),
        ("command", "--rdzv-endpoint [::1]:29400"),
    ),
    (
        "shell-chain",
        container(["sh", "-c", "pip install x && exec torchrun --rdzv-endpoint=127.0.0.1:29400 t.py"]),
        range(3, 4),
        ("command", "--rdzv-endpoint 127.0.0.1:29400"),
    ),
    (
        "shell-lines-args",
        container(["bash"], ["-lc", "cd /w\nFOO=1 torchrun --nnodes 1 t.py --nnodes 3"]),
        range(3, 4),
        ("args", "--nnodes 1"),
    ),
    ("shell-unbalanced", container(["sh", "-c", "torchrun --standalone 't.py"]), range(3, 4), None),
    ("env-standalone", container(["torchrun", "t.py"], PET_STANDALONE="1"), range(3, 4), ("env[0]", "--standalone")),
    ("env-nnodes", container(["torchrun", "t.py"], PET_NNODES="2"), range(3, 4), ("env[0] PET_NNODES", "--nnodes 2")),
    ("env-nnodes-equal", container(["torchrun", "t.py"], PET_NNODES="3"), range(3, 4), None),
]


@pytest.mark.parametrize(("spec", "worlds", "named"), [s[1:] for s in SPLITS], ids=[s[0] for s in SPLITS])
def test_split_world(spec: dict[str, Any], worlds: range, named: tuple[str, str] | None) -> None:
    split = split_world(spec, worlds, WHERE)
    if named is None:
        assert split is None
        return
    assert split is not None
    field, option = named
    message = str(split)
    assert message.startswith(f"{WHERE}.{field}") and f"torchrun's {option} " in message and "\n" not in message


@pytest.mark.parametrize(
    ("workers", "counts"),
    [({"replicas": 3}, range(3, 4)), ({"replicas": 2, "minReplicas": 1, "maxReplicas": 4}, range(1, 5))],
    ids=["plain", "elastic"],
)
def test_worker_counts(workers: dict[str, Any], counts: range) -> None:
    assert worker_counts(job(workers)) == counts


def test_validate_refuses_a_split_world_naming_the_option() -> None:
    bad = job({"replicas": 2})
    bad.spec.workers.template["spec"]["containers"][0]["command"] = ["torchrun", "--standalone", "train.py"]
    with pytest.raises(InvalidTemplate, match=r"containers\[0\]\.command: torchrun's --standalone forms a world"):
        validate(bad)
    validate(job({"replicas": 2}))  # the same job without the option is fine
