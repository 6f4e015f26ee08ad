"""Who a job's objects are, pure: the names, labels, ports, volumes and owner reference every object the
operator makes for a job carries, and how a pod names its rank. Everything that builds or reads the job's objects
agrees through these (builders.py builds the pods, rank_env.py their environment)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringleader_api import API_VERSION, DNS_LABEL_MAX, KIND, LABEL_INDEX, LABEL_JOB, LABEL_ROLE, Role, TrainingJob

ANNOTATION_WORKERS = "ringleader.dev/workers"  # the worker count (world) this pod was made for

TRAINER_CONTAINER = "trainer"
MASTER_PORT = 29500  # torch.distributed rendezvous (c10d TCPStore) on worker 0
PS_PORT = 29600  # parameter-server shards listen here
METRICS_PORT = 9090  # every rank serves Prometheus metrics here (worker 0's: the job's progress)
DEFAULT_CHECKPOINT_DIR = "/checkpoints"
CHECKPOINT_VOLUME = "ringleader-checkpoints"
# The job's token (docs/env-contract.md): a Secret the operator creates per job, mounted read-only in every rank's
# trainer container; the parameter server's and the ring's handshakes prove it (trainer: auth.py).
TOKEN_VOLUME = "ringleader-token"
TOKEN_DIR = "/var/run/ringleader"
TOKEN_KEY = "token"
GPU_RESOURCE = "nvidia.com/gpu"
# Kubernetes keeps a pod bound to an unreachable or not-ready node for 300 s before evicting it; a training job
# stands still all that time, so ranks leave a lost node sooner (a template's own tolerations win).
NODE_LOSS_TOLERATION_SECONDS = 30
NODE_LOSS_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def rank_key(role: Role, index: int) -> str:
    """`worker-1`, `ps-0`: the rank's key in status.ranks and the end of its pod's name."""
    return f"{role.value}-{index}"


def rank_of_key(key: str) -> tuple[Role, int]:
    """`worker-1` -> (Role.WORKER, 1): rank_key's inverse."""
    role, _, index = key.rpartition("-")
    return Role(role), int(index)


def pod_name(job: str, role: Role, index: int) -> str:
    return f"{job}-{rank_key(role, index)}"


def job_labels(job: str) -> dict[str, str]:
    return {LABEL_JOB: job}


def rank_labels(job: str, role: Role, index: int) -> dict[str, str]:
    return {LABEL_JOB: job, LABEL_ROLE: role.value, LABEL_INDEX: str(index)}


def rank_of(pod: Mapping[str, Any]) -> tuple[Role, int] | None:
    """(role, index) from the labels `rank_labels` gives a pod; None when they are missing or not valid."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        return Role(labels.get(LABEL_ROLE, "")), int(labels.get(LABEL_INDEX, ""))
    except ValueError:
        return None


def owner_reference(job: TrainingJob) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": job.metadata.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def checkpoint_directory(job: TrainingJob) -> str:
    """Where the ranks keep checkpoints: `spec.checkpoint.directory` as given, else a directory of this job
    object's own under /checkpoints (`<namespace>/<name>/<uid>`), so a new job of the same name, or another job
    on the same volume, never resumes from checkpoints that are not its own. To continue from an earlier job's
    checkpoints, give its directory."""
    checkpoint = job.spec.checkpoint
    if checkpoint is not None and checkpoint.directory:
        return checkpoint.directory
    return f"{DEFAULT_CHECKPOINT_DIR}/{job.namespace}/{job.name}/{job.metadata.get('uid', '')}".rstrip("/")


# The grace period of a job's pods when it checkpoints (api.CheckpointSpec.stop_grace_period_seconds): on SIGTERM
# every rank finishes its step, agrees on one more with the others and saves (the trainer's lossless stop).


def uid_suffixed(job: TrainingJob, what: str) -> str:
    """`<job>-<what>-<uid prefix>`: the uid keeps a new job of the same name off a leftover of the last one."""
    uid = str(job.metadata.get("uid", ""))[:8]
    return f"{job.name}-{what}-{uid}" if uid else f"{job.name}-{what}"


def token_secret_name(job: TrainingJob) -> str:
    return uid_suffixed(job, "token")


# The label of the job's coordinator's pod (its value: the job's name). Not the job's label: the coordinator is none
# of its ranks, and a pod carrying the job's label that is not a rank is reported as foreign.
COORDINATOR_LABEL = "ringleader.dev/coordinator-of"


def coordinator_name(job: TrainingJob) -> str:
    """The job's coordinator's Deployment and headless Service, `<job>-coordinator-<uid prefix>`, the job's name cut
    so that it fits a DNS label (the API server admits names whose pods' names fit, which may be longer)."""
    suffix = uid_suffixed(job, "coordinator")[len(job.name) :]
    return job.name[: DNS_LABEL_MAX - len(suffix)] + suffix


def dns_name(job: str, role: Role, index: int) -> str:
    """The rank's stable name `<pod>.<service>`, resolvable from any pod of the job's namespace."""
    return f"{pod_name(job, role, index)}.{job}"
