"""The trainer's side of the environment contract (docs/env-contract.md): read and check what the operator
wrote into the pod, once, at start-up.

`from_env(os.environ)` returns a `RankEnv` or raises `EnvError` whose message is one line naming the
variable and what is wrong with it, so a bad pod fails at once with a clear reason instead of hanging in
rendezvous.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ringleader_trainer.exitcodes import ExitCode, TrainerError

STRATEGIES = ("allreduce", "parameter-server", "local-sgd")
PS_MODES = ("synchronous", "asynchronous", "bounded-staleness")
ROLES = ("worker", "ps")

# Every variable the trainer reads. The operator writes exactly these (a test holds both sides to it).
READS = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
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
        "RINGLEADER_LOCAL_SGD_PERIOD",
        "RINGLEADER_CHECKPOINT_DIR",
        "RINGLEADER_CHECKPOINT_INTERVAL",
        "RINGLEADER_CHECKPOINT_KEEP",
        "RINGLEADER_TOKEN_FILE",
    }
)


class EnvError(TrainerError, ValueError):
    """The pod's environment breaks the contract; the message names the variable."""

    exit_code = ExitCode.BAD_ENVIRONMENT


@dataclass(frozen=True)
class RankEnv:
    job: str
    namespace: str
    role: str
    index: int
    strategy: str
    num_workers: int
    num_ps: int
    global_rank: int
    global_world_size: int
    master_addr: str
    master_port: int
    metrics_port: int
    rank: int | None = None  # workers only (torchrun's RANK)
    world_size: int | None = None
    local_rank: int = 0
    ps_mode: str | None = None
    ps_max_staleness: int | None = None
    ps_port: int | None = None
    ps_addrs: tuple[str, ...] = field(default_factory=tuple)
    local_sgd_period: int | None = None
    checkpoint_dir: str | None = None
    checkpoint_interval: int | None = None
    checkpoint_keep: int | None = None
    token_file: str = ""  # the job's token, for the parameter server's and the ring's handshakes (auth.py)


def _get(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if value is None or value == "":
        raise EnvError(f"{name} is not set")
    return value


def _int(env: Mapping[str, str], name: str, minimum: int = 0, required: bool = True) -> int | None:
    if not required and not env.get(name):
        return None
    raw = _get(env, name)
    try:
        value = int(raw)
    except ValueError as e:
        raise EnvError(f"{name}={raw!r} is not an integer") from e
    if value < minimum:
        raise EnvError(f"{name}={value} must be at least {minimum}")
    return value


def _choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    value = _get(env, name)
    if value not in allowed:
        raise EnvError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


def _req(value: int | None) -> int:
    assert value is not None  # _int with required=True never returns None
    return value


def from_env(env: Mapping[str, str]) -> RankEnv:
    """Parse and cross-check the contract. Raises EnvError (one line) on the first problem."""
    role = _choice(env, "RINGLEADER_ROLE", ROLES)
    strategy = _choice(env, "RINGLEADER_STRATEGY", STRATEGIES)
    num_workers = _req(_int(env, "RINGLEADER_NUM_WORKERS", 1))
    num_ps = _req(_int(env, "RINGLEADER_NUM_PS", 0))
    index = _req(_int(env, "RINGLEADER_INDEX", 0))
    limit = num_workers if role == "worker" else num_ps
    if index >= limit:
        raise EnvError(f"RINGLEADER_INDEX={index} is out of range for {limit} {role} replicas")
    out: dict[str, object] = {
        "job": _get(env, "RINGLEADER_JOB_NAME"),
        "namespace": _get(env, "RINGLEADER_NAMESPACE"),
        "role": role,
        "index": index,
        "strategy": strategy,
        "num_workers": num_workers,
        "num_ps": num_ps,
        "global_rank": _req(_int(env, "RINGLEADER_GLOBAL_RANK", 0)),
        "global_world_size": _req(_int(env, "RINGLEADER_GLOBAL_WORLD_SIZE", 1)),
        "master_addr": _get(env, "MASTER_ADDR"),
        "master_port": _req(_int(env, "MASTER_PORT", 1)),
        "metrics_port": _req(_int(env, "RINGLEADER_METRICS_PORT", 1)),
        "token_file": env.get("RINGLEADER_TOKEN_FILE", ""),
    }
    if out["global_world_size"] != num_workers + num_ps:
        raise EnvError(
            f"RINGLEADER_GLOBAL_WORLD_SIZE={out['global_world_size']} is not "
            f"RINGLEADER_NUM_WORKERS + RINGLEADER_NUM_PS = {num_workers + num_ps}"
        )
    if role == "worker":
        rank, world = _req(_int(env, "RANK", 0)), _req(_int(env, "WORLD_SIZE", 1))
        if rank >= world:
            raise EnvError(f"RANK={rank} must be less than WORLD_SIZE={world}")
        if world != num_workers:
            raise EnvError(
                f"WORLD_SIZE={world} is not the job's {num_workers} workers (RINGLEADER_NUM_WORKERS): a launcher "
                "formed a world of its own (torchrun --standalone or --nnodes?); run the trainer without one"
            )
        if rank != index:
            # One training process per pod: a launcher that starts several (torchrun --nproc-per-node) renumbers them.
            raise EnvError(
                f"RANK={rank} is not this worker's index RINGLEADER_INDEX={index}: a launcher renumbered the ranks "
                "(torchrun --nproc-per-node?); run the trainer without one"
            )
        out |= {"rank": rank, "world_size": world, "local_rank": _req(_int(env, "LOCAL_RANK", 0))}
    if strategy == "parameter-server":
        if num_ps < 1:
            raise EnvError("RINGLEADER_NUM_PS must be at least 1 for strategy parameter-server")
        addrs = tuple(a for a in _get(env, "RINGLEADER_PS_ADDRS").split(",") if a)
        if len(addrs) != num_ps:
            raise EnvError(f"RINGLEADER_PS_ADDRS lists {len(addrs)} addresses for RINGLEADER_NUM_PS={num_ps}")
        mode = _choice(env, "RINGLEADER_PS_MODE", PS_MODES)
        staleness = _int(env, "RINGLEADER_PS_MAX_STALENESS", 1, required=mode == "bounded-staleness")
        out |= {
            "ps_mode": mode,
            "ps_max_staleness": staleness,
            "ps_addrs": addrs,
            "ps_port": _int(env, "RINGLEADER_PS_PORT", 1),
        }
    if strategy == "local-sgd":
        out["local_sgd_period"] = _int(env, "RINGLEADER_LOCAL_SGD_PERIOD", 1)
    if env.get("RINGLEADER_CHECKPOINT_DIR"):
        out |= {
            "checkpoint_dir": env["RINGLEADER_CHECKPOINT_DIR"],
            "checkpoint_interval": _int(env, "RINGLEADER_CHECKPOINT_INTERVAL", 1),
            "checkpoint_keep": _int(env, "RINGLEADER_CHECKPOINT_KEEP", 1),
        }
    return RankEnv(**out)  # type: ignore[arg-type]
