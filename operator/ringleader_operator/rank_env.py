"""A rank's environment, pure: the variables of the contract the operator writes into every trainer container
(docs/env-contract.md; what the trainer reads in env.py), torchrun's among them (launchers.py), and the CPU threads
each of a pod's processes gets."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ringleader_api import PipelineSettings, Role, Strategy, TrainingJob

from . import launchers, quantities
from .names import (
    MASTER_PORT,
    METRICS_PORT,
    PS_PORT,
    TOKEN_DIR,
    TOKEN_KEY,
    checkpoint_directory,
    coordinator_name,
    dns_name,
)


def worker_counts(job: TrainingJob) -> range:
    """Every number of worker pods the job may run with: `replicas`, or minReplicas to maxReplicas when elastic."""
    workers = job.spec.workers
    low = min(workers.min_replicas or workers.replicas, workers.replicas)
    high = max(workers.max_replicas or workers.replicas, workers.replicas)
    return range(low, high + 1)


def wants_coordinator(job: TrainingJob) -> bool:
    """Whether the job gets a coordinator (elastic/coordinator.py: the rendezvous store in a pod of its own, which
    no rank's loss takes with it): where its survivors may train on short of a lost rank (minReplicas below
    replicas), so that worker 0's loss stops nobody either. Not under torchrun's own elastic rendezvous (c10d),
    which has its agents' store."""
    return _c10d(job) is None and worker_counts(job).start < job.spec.workers.replicas


def coordinator_address(job: TrainingJob) -> str:
    """`host:port` of the job's coordinator, as its ranks reach it (RINGLEADER_RENDEZVOUS)."""
    return f"{coordinator_name(job)}:{MASTER_PORT}"


def _c10d(job: TrainingJob) -> launchers.C10d | None:
    """torchrun's elastic rendezvous for the job, when spec.torchrun asks for it: as many pods as the job may have."""
    if not job.resized_in_place or job.spec.torchrun is None:
        return None
    counts = worker_counts(job)
    run_id = str(job.metadata.get("uid") or job.name)
    return launchers.C10d(counts.start, counts.stop - 1, run_id, job.spec.torchrun.max_restarts)


def rank_env(job: TrainingJob, role: Role, index: int, attempt: int = 0) -> dict[str, str]:
    """The environment contract for one rank, in a stable order (see docs/env-contract.md)."""
    spec = job.spec
    procs = spec.workers.procs_per_pod
    workers = spec.workers.replicas * procs  # worker ranks: procsPerPod in each worker pod
    ps = spec.parameter_servers.replicas if spec.parameter_servers else 0
    global_rank = index * procs if role == Role.WORKER else workers + index  # a worker pod's first rank
    env = {
        "MASTER_ADDR": dns_name(job.name, Role.WORKER, 0),
        "MASTER_PORT": str(MASTER_PORT),
        "RINGLEADER_JOB_NAME": job.name,
        "RINGLEADER_NAMESPACE": job.namespace,
        "RINGLEADER_ROLE": role.value,
        "RINGLEADER_INDEX": str(index),
        "RINGLEADER_STRATEGY": spec.strategy.value,
        "RINGLEADER_NUM_WORKERS": str(workers),
        "RINGLEADER_NUM_PS": str(ps),
        "RINGLEADER_GLOBAL_RANK": str(global_rank),
        "RINGLEADER_GLOBAL_WORLD_SIZE": str(workers + ps),
        "RINGLEADER_METRICS_PORT": str(METRICS_PORT),
        "RINGLEADER_TOKEN_FILE": f"{TOKEN_DIR}/{TOKEN_KEY}",
        "RINGLEADER_ATTEMPT": str(attempt),
    }
    if role == Role.WORKER:
        # What torchrun gives its children: an unmodified init_process_group(init_method="env://") script works.
        # With procsPerPod > 1 the pod's launcher (the trainer's supervisor, or torchrun) gives each of its
        # processes its own RANK and LOCAL_RANK; these are its first process's.
        env |= {"WORLD_SIZE": str(workers), "RANK": str(global_rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(procs),
                "GROUP_RANK": str(index), "RINGLEADER_PROCS_PER_POD": str(procs)}  # fmt: skip
        # torchrun's own options: `torchrun script.py` with no options forms this same world.
        env |= launchers.torchrun_env(spec.workers.replicas, index, env["MASTER_ADDR"], MASTER_PORT, procs, _c10d(job))
    env |= _strategy_env(job, workers, ps)
    if role == Role.WORKER and (low := worker_counts(job).start) < spec.workers.replicas:
        env["RINGLEADER_MIN_WORKERS"] = str(low * procs)  # the survivors may train on while a rank is replaced
    if wants_coordinator(job):
        env["RINGLEADER_RENDEZVOUS"] = coordinator_address(job)
    if spec.checkpoint is not None:
        env["RINGLEADER_CHECKPOINT_DIR"] = checkpoint_directory(job)
        env["RINGLEADER_CHECKPOINT_INTERVAL"] = str(spec.checkpoint.interval_steps)
        env["RINGLEADER_CHECKPOINT_KEEP"] = str(spec.checkpoint.keep)
    return env


def _strategy_env(job: TrainingJob, workers: int, ps: int) -> dict[str, str]:
    """The variables of the job's strategy's settings (each with the default the trainer assumes when the field is
    absent): `workers` worker ranks and `ps` shards. A strategy whose settings map to variables one to one
    declares them in its settings model (`StrategySettings.settings_env`) and needs nothing here."""
    spec, env = job.spec, {}
    if spec.strategy == Strategy.PARAMETER_SERVER:
        settings = spec.parameter_server
        env["RINGLEADER_PS_MODE"] = settings.mode.value if settings else "synchronous"
        if settings and settings.max_staleness is not None:
            env["RINGLEADER_PS_MAX_STALENESS"] = str(settings.max_staleness)
        if settings and settings.backup:
            env["RINGLEADER_PS_BACKUP"] = "1"
        env["RINGLEADER_PS_PORT"] = str(PS_PORT)
        env["RINGLEADER_PS_ADDRS"] = ",".join(f"{dns_name(job.name, Role.PS, i)}:{PS_PORT}" for i in range(ps))
    elif spec.strategy == Strategy.SHARDED:
        env["RINGLEADER_SHARDED_STAGE"] = str(spec.sharded.stage if spec.sharded else 3)
        if spec.sharded and spec.sharded.replicas > 1:
            env["RINGLEADER_SHARDED_REPLICAS"] = str(spec.sharded.replicas)
    elif spec.strategy == Strategy.PIPELINE:
        pipeline = spec.pipeline or PipelineSettings()
        env["RINGLEADER_PIPELINE_STAGES"] = str(pipeline.stages or workers)
        env["RINGLEADER_PIPELINE_MICRO_BATCHES"] = str(pipeline.micro_batches)
    return env | spec.settings_env()  # settings that name their variables (local SGD's, DiLoCo's)


def cpu_threads(container: Mapping[str, Any], processes: int) -> str:
    """OMP_NUM_THREADS for each of a trainer container's `processes`: its CPU limit (else its request) shared
    among them, rounded down, at least 1; 1 when it asks for no CPU. Unset, torch starts a thread per core of
    the node, whatever the pod's share of it: four ranks of a small model on a two-core node then ran their steps
    ten times slower (bench/omp_threads_bench.py). torchrun sets 1 for more than one process; a template that
    sets OMP_NUM_THREADS keeps its own."""
    resources = container.get("resources") or {}
    cpu = (resources.get("limits") or {}).get("cpu") or (resources.get("requests") or {}).get("cpu")
    try:
        cores = quantities.parse_quantity(cpu) if cpu is not None else Decimal(0)
    except ValueError:  # validate refuses the template first; a pod is still built for a status
        cores = Decimal(0)
    return str(max(1, int(cores / max(1, processes))))
