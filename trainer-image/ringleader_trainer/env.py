"""The trainer's side of the environment contract (docs/env-contract.md): read and check what the operator
wrote into the pod, once, at start-up.

`from_env(os.environ)` returns a `RankEnv` or raises `EnvError` whose message is one line naming the
variable and what is wrong with it, so a bad pod fails at once with a clear reason instead of hanging in
rendezvous.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from ringleader_trainer.exitcodes import ExitCode, TrainerError


class Role(StrEnum):
    WORKER = "worker"
    PS = "ps"


class StrategyName(StrEnum):
    ALLREDUCE = "allreduce"
    PARAMETER_SERVER = "parameter-server"
    LOCAL_SGD = "local-sgd"
    DILOCO = "diloco"
    SHARDED = "sharded"
    PIPELINE = "pipeline"


class PSMode(StrEnum):
    SYNCHRONOUS = "synchronous"
    ASYNCHRONOUS = "asynchronous"
    BOUNDED_STALENESS = "bounded-staleness"


# Every variable the trainer reads. The operator writes exactly these (a test holds both sides to it).
READS = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "RINGLEADER_PROCS_PER_POD",
        "RINGLEADER_JOB_NAME",
        "RINGLEADER_NAMESPACE",
        "RINGLEADER_ROLE",
        "RINGLEADER_INDEX",
        "RINGLEADER_STRATEGY",
        "RINGLEADER_NUM_WORKERS",
        "RINGLEADER_NUM_PS",
        "RINGLEADER_GLOBAL_RANK",
        "RINGLEADER_GLOBAL_WORLD_SIZE",
        "RINGLEADER_METRICS_PORT",
        "RINGLEADER_PS_MODE",
        "RINGLEADER_PS_MAX_STALENESS",
        "RINGLEADER_PS_PORT",
        "RINGLEADER_PS_ADDRS",
        "RINGLEADER_PS_BACKUP",
        "RINGLEADER_LOCAL_SGD_PERIOD",
        "RINGLEADER_DILOCO_PERIOD",
        "RINGLEADER_DILOCO_OUTER_LR",
        "RINGLEADER_DILOCO_OUTER_MOMENTUM",
        "RINGLEADER_MIN_WORKERS",
        "RINGLEADER_SHARDED_STAGE",
        "RINGLEADER_SHARDED_REPLICAS",
        "RINGLEADER_PIPELINE_STAGES",
        "RINGLEADER_PIPELINE_MICRO_BATCHES",
        "RINGLEADER_CHECKPOINT_DIR",
        "RINGLEADER_CHECKPOINT_INTERVAL",
        "RINGLEADER_CHECKPOINT_KEEP",
        "RINGLEADER_TOKEN_FILE",
        "RINGLEADER_ATTEMPT",
        "RINGLEADER_RENDEZVOUS",
    }
)
COORDINATOR_ENV = "RINGLEADER_RENDEZVOUS"  # where the job's coordinator is (elastic/coordinator.py), when it has one


class EnvError(TrainerError, ValueError):
    """The pod's environment breaks the contract; the message names the variable."""

    exit_code = ExitCode.BAD_ENVIRONMENT


# Set by a launcher for each process it starts in a pod of several ranks: torchrun's children carry its run id,
# the trainer's supervisor marks its own.
LOCAL_LAUNCH_ENV = "RINGLEADER_LOCAL_LAUNCH"
LAUNCHED_BY = ("TORCHELASTIC_RUN_ID", LOCAL_LAUNCH_ENV)


@dataclass(frozen=True)
class WorkerRank:
    """A worker's place in torchrun's terms (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK: the
    pod's index); parameter servers have none."""

    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    pod: int = 0


@dataclass(frozen=True)
class ParameterServers:
    """Strategy parameter-server: the shards' addresses (one per shard, `host:port`) and how they sync."""

    addrs: tuple[str, ...]
    mode: PSMode
    max_staleness: int | None  # required for bounded-staleness
    port: int  # the port every shard listens on
    backup: bool = False  # each shard's state kept on the next shard (ps_backup); needs two or more shards


@dataclass(frozen=True)
class Pipeline:
    """Strategy pipeline: the model in `stages` parts, each batch in `micro_batches`; workers / stages replicas."""

    stages: int
    micro_batches: int


@dataclass(frozen=True)
class DiLoCo:
    """Strategy diloco: inner steps between syncs, and the outer SGD's learning rate and Nesterov momentum."""

    period: int
    outer_lr: float
    outer_momentum: float


@dataclass(frozen=True)
class Checkpoints:
    directory: str
    interval: int
    keep: int


@dataclass(frozen=True)
class RankEnv:
    """Everything a rank reads from its pod's environment; the optional sections are present exactly when the
    role or strategy has them (`worker` for workers, `ps` under parameter-server, `local_sgd_period` under
    local-sgd, `diloco` under diloco, `sharded_stage` under sharded, `pipeline` under pipeline, `checkpoints` when
    the job checkpoints)."""

    job: str
    namespace: str
    role: Role
    index: int
    strategy: StrategyName
    num_workers: int
    num_ps: int
    global_rank: int
    global_world_size: int
    master_addr: str
    master_port: int
    metrics_port: int
    token_file: str = ""  # the job's token, for the parameter server's and the ring's handshakes (transport/auth.py)
    worker: WorkerRank | None = None
    ps: ParameterServers | None = None
    local_sgd_period: int | None = None
    diloco: DiLoCo | None = None
    sharded_stage: int | None = None  # 1-3, under sharded
    sharded_replicas: int = 1  # under sharded (stages 2-3): replica groups of the shards (HSDP)
    pipeline: Pipeline | None = None
    checkpoints: Checkpoints | None = None
    attempt: int = 0  # the pod's place in its rank's history: 0 for the first pod, one more for each replacement
    # The fewest worker ranks the job trains with while a lost one is replaced (spec.workers.minReplicas); None:
    # all of them (the survivors wait for the replacement).
    min_workers: int | None = None
    # Where the job's coordinator serves the rendezvous store ("host:port" as (host, port)); None: worker 0 hosts it
    # on MASTER_PORT (elastic/rendezvous.py).
    rendezvous: tuple[str, int] | None = None

    @property
    def store_address(self) -> tuple[str, int]:
        """Where the job's rendezvous store is: its coordinator's address, else worker 0's MASTER_ADDR:MASTER_PORT."""
        return self.rendezvous or (self.master_addr, self.master_port)

    @property
    def local_rank(self) -> int:
        """The GPU this rank uses on its node: a worker's LOCAL_RANK; 0 for a shard."""
        return self.worker.local_rank if self.worker else 0


def _get(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if value is None or value == "":
        raise EnvError(f"{name} is not set")
    return value


def _int(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    raw = _get(env, name)
    try:
        value = int(raw)
    except ValueError as e:
        raise EnvError(f"{name}={raw!r} is not an integer") from e
    if value < minimum:
        raise EnvError(f"{name}={value} must be at least {minimum}")
    return value


def _float(env: Mapping[str, str], name: str, low: float, high: float) -> float:
    """A finite number in [low, high]."""
    raw = _get(env, name)
    try:
        value = float(raw)
    except ValueError as e:
        raise EnvError(f"{name}={raw!r} is not a number") from e
    if not low <= value <= high:  # NaN fails both
        raise EnvError(f"{name}={raw} must be between {low} and {high}")
    return value


E = TypeVar("E", bound=StrEnum)


def _choice(env: Mapping[str, str], name: str, allowed: type[E]) -> E:
    value = _get(env, name)
    try:
        return allowed(value)
    except ValueError:
        raise EnvError(f"{name}={value!r} is not one of {', '.join(allowed)}") from None


def from_env(env: Mapping[str, str]) -> RankEnv:
    """Parse and cross-check the contract. Raises EnvError (one line) on the first problem."""
    role = _choice(env, "RINGLEADER_ROLE", Role)
    strategy = _choice(env, "RINGLEADER_STRATEGY", StrategyName)
    num_workers = _int(env, "RINGLEADER_NUM_WORKERS", 1)
    num_ps = _int(env, "RINGLEADER_NUM_PS", 0)
    index = _int(env, "RINGLEADER_INDEX", 0)  # the pod's index in its role
    procs = _int(env, "RINGLEADER_PROCS_PER_POD", 1) if env.get("RINGLEADER_PROCS_PER_POD") else 1
    limit = num_workers // procs if role == Role.WORKER else num_ps
    if index >= limit:
        raise EnvError(f"RINGLEADER_INDEX={index} is out of range for {limit} {role} pods")
    worker = _worker(env, index, num_workers, procs) if role == Role.WORKER else None
    global_world_size = _int(env, "RINGLEADER_GLOBAL_WORLD_SIZE", 1)
    if global_world_size != num_workers + num_ps:
        raise EnvError(
            f"RINGLEADER_GLOBAL_WORLD_SIZE={global_world_size} is not "
            f"RINGLEADER_NUM_WORKERS + RINGLEADER_NUM_PS = {num_workers + num_ps}"
        )
    return RankEnv(
        job=_get(env, "RINGLEADER_JOB_NAME"),
        namespace=_get(env, "RINGLEADER_NAMESPACE"),
        role=role,
        index=worker.rank if worker else index,
        strategy=strategy,
        num_workers=num_workers,
        num_ps=num_ps,
        # Workers come first in the global order: a worker's global rank is its rank (the operator writes its
        # pod's first).
        global_rank=worker.rank if worker else _int(env, "RINGLEADER_GLOBAL_RANK", 0),
        global_world_size=global_world_size,
        master_addr=_get(env, "MASTER_ADDR"),
        master_port=_int(env, "MASTER_PORT", 1),
        # Each process of a pod serves its own page, on the pod's port plus its local rank.
        metrics_port=_int(env, "RINGLEADER_METRICS_PORT", 1) + (worker.local_rank if worker else 0),
        token_file=env.get("RINGLEADER_TOKEN_FILE", ""),
        worker=worker,
        ps=_parameter_servers(env, num_ps) if strategy == StrategyName.PARAMETER_SERVER else None,
        local_sgd_period=_int(env, "RINGLEADER_LOCAL_SGD_PERIOD", 1) if strategy == StrategyName.LOCAL_SGD else None,
        diloco=_diloco(env) if strategy == StrategyName.DILOCO else None,
        sharded_stage=_sharded_stage(env) if strategy == StrategyName.SHARDED else None,
        sharded_replicas=_sharded_replicas(env, num_workers) if env.get("RINGLEADER_SHARDED_REPLICAS") else 1,
        pipeline=_pipeline(env, num_workers) if strategy == StrategyName.PIPELINE else None,
        checkpoints=_checkpoints(env) if env.get("RINGLEADER_CHECKPOINT_DIR") else None,
        attempt=_int(env, "RINGLEADER_ATTEMPT", 0) if env.get("RINGLEADER_ATTEMPT") else 0,
        min_workers=_min_workers(env, num_workers) if env.get("RINGLEADER_MIN_WORKERS") else None,
        rendezvous=address(env, COORDINATOR_ENV) if env.get(COORDINATOR_ENV) else None,
    )


def address(env: Mapping[str, str], name: str) -> tuple[str, int]:
    """A "host:port" variable as (host, port)."""
    host, _, port = _get(env, name).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EnvError(f"{name}={env[name]!r} is not host:port")
    return host, int(port)


def _min_workers(env: Mapping[str, str], num_workers: int) -> int:
    low = _int(env, "RINGLEADER_MIN_WORKERS", 1)
    if low > num_workers:
        raise EnvError(f"RINGLEADER_MIN_WORKERS={low} is more than the job's {num_workers} worker ranks")
    return low


def _worker(env: Mapping[str, str], pod: int, num_workers: int, procs: int) -> WorkerRank:
    rank, world = _int(env, "RANK", 0), _int(env, "WORLD_SIZE", 1)
    local = _int(env, "LOCAL_RANK", 0)
    if rank >= world:
        raise EnvError(f"RANK={rank} must be less than WORLD_SIZE={world}")
    if world != num_workers:
        raise EnvError(
            f"WORLD_SIZE={world} is not the job's {num_workers} worker ranks (RINGLEADER_NUM_WORKERS): a launcher "
            "formed a world of its own (torchrun --standalone or --nnodes?); run the trainer without one"
        )
    if procs > 1 and not any(env.get(name) for name in LAUNCHED_BY):
        raise EnvError(
            f"RINGLEADER_PROCS_PER_POD={procs}: this pod runs {procs} ranks, and nothing started them; run "
            "`python -m ringleader_trainer` or `torchrun`, which start one process per rank"
        )
    if local >= procs:
        raise EnvError(f"LOCAL_RANK={local} must be less than RINGLEADER_PROCS_PER_POD={procs}")
    if rank != pod * procs + local:
        # A launcher that starts more processes than the pod's (torchrun --nproc-per-node) renumbers them.
        raise EnvError(
            f"RANK={rank} is not rank {pod * procs + local}, LOCAL_RANK={local} of worker pod {pod} "
            f"(RINGLEADER_INDEX) with {procs} per pod: a launcher renumbered the ranks "
            "(torchrun --nproc-per-node?); set spec.workers.procsPerPod instead"
        )
    return WorkerRank(rank, world, local, procs, pod)


def _parameter_servers(env: Mapping[str, str], num_ps: int) -> ParameterServers:
    if num_ps < 1:
        raise EnvError("RINGLEADER_NUM_PS must be at least 1 for strategy parameter-server")
    addrs = tuple(a for a in _get(env, "RINGLEADER_PS_ADDRS").split(",") if a)
    if len(addrs) != num_ps:
        raise EnvError(f"RINGLEADER_PS_ADDRS lists {len(addrs)} addresses for RINGLEADER_NUM_PS={num_ps}")
    mode = _choice(env, "RINGLEADER_PS_MODE", PSMode)
    bounded = mode == PSMode.BOUNDED_STALENESS  # required then; read (and checked) whenever it is set
    staleness = (
        _int(env, "RINGLEADER_PS_MAX_STALENESS", 1) if bounded or env.get("RINGLEADER_PS_MAX_STALENESS") else None
    )
    backup = env.get("RINGLEADER_PS_BACKUP", "") not in ("", "0")
    if backup and (env["RINGLEADER_PS_BACKUP"] != "1" or num_ps < 2):
        raise EnvError(
            f"RINGLEADER_PS_BACKUP={env['RINGLEADER_PS_BACKUP']!r} must be 1 (with two or more shards) or unset"
        )
    return ParameterServers(addrs, mode, staleness, _int(env, "RINGLEADER_PS_PORT", 1), backup)


def _sharded_stage(env: Mapping[str, str]) -> int:
    stage = _int(env, "RINGLEADER_SHARDED_STAGE", 1)
    if stage > 3:
        raise EnvError(f"RINGLEADER_SHARDED_STAGE={stage} is not a ZeRO stage (1, 2 or 3)")
    return stage


def _sharded_replicas(env: Mapping[str, str], num_workers: int) -> int:
    replicas = _int(env, "RINGLEADER_SHARDED_REPLICAS", 1)
    if num_workers % replicas:
        raise EnvError(f"RINGLEADER_SHARDED_REPLICAS={replicas} does not divide the {num_workers} worker ranks")
    return replicas


def _pipeline(env: Mapping[str, str], num_workers: int) -> Pipeline:
    stages = _int(env, "RINGLEADER_PIPELINE_STAGES", 1)
    if num_workers % stages:
        raise EnvError(f"RINGLEADER_PIPELINE_STAGES={stages} does not divide RINGLEADER_NUM_WORKERS={num_workers}")
    return Pipeline(stages, _int(env, "RINGLEADER_PIPELINE_MICRO_BATCHES", 1))


def _diloco(env: Mapping[str, str]) -> DiLoCo:
    return DiLoCo(
        _int(env, "RINGLEADER_DILOCO_PERIOD", 1),
        _float(env, "RINGLEADER_DILOCO_OUTER_LR", 0.0, 10.0),
        _float(env, "RINGLEADER_DILOCO_OUTER_MOMENTUM", 0.0, 0.999999),
    )


def _checkpoints(env: Mapping[str, str]) -> Checkpoints:
    return Checkpoints(
        env["RINGLEADER_CHECKPOINT_DIR"],
        _int(env, "RINGLEADER_CHECKPOINT_INTERVAL", 1),
        _int(env, "RINGLEADER_CHECKPOINT_KEEP", 1),
    )
