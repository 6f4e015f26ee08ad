"""What names the TrainingJob API: its group, version and kind, the labels and annotations on the objects a job owns,
the environment variables of the contract, the bounds every field respects, and the models' base."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
)
from pydantic.alias_generators import to_camel

GROUP = "ringleader.dev"

VERSION = "v1alpha1"

KIND = "TrainingJob"

PLURAL = "trainingjobs"

SINGULAR = "trainingjob"

SHORT_NAMES = ["tj"]

API_VERSION = f"{GROUP}/{VERSION}"

# What every pod of a job carries (`kubectl get pods -l ringleader.dev/job-name=NAME`): the job, the rank's role
# and index, and the rank's attempt (0 for its first pod; its pods keep one name, `<job>-<role>-<index>`).
LABEL_JOB = "ringleader.dev/job-name"

LABEL_ROLE = "ringleader.dev/replica-type"

LABEL_INDEX = "ringleader.dev/replica-index"

ANNOTATION_ATTEMPT = "ringleader.dev/attempt"

# spec.managedBy: the controller that acts on a job. Ringleader's operator acts only on jobs without the field or
# with its own name; any other (MultiKueue's, on a manager cluster) is left alone.
MANAGED_BY_RINGLEADER = "ringleader.dev/operator"

MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"

# The variables of the environment contract the operator writes into the trainer container, but the strategies'
# settings' (`strategies.STRATEGY_ENV`); both together are `CONTRACT_ENV` (docs/env-contract.md; a unit test holds
# it to rank_env and to what the trainer reads). A template that sets one is refused: RANK=0 on every worker would
# hang the rendezvous. torchrun's PET_* have their own check (the operator's launchers.split_world): a template
# may raise PET_NPROC_PER_NODE.
RANK_ENV = frozenset(
    {
        "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "RINGLEADER_PROCS_PER_POD",
        "RINGLEADER_JOB_NAME", "RINGLEADER_NAMESPACE", "RINGLEADER_ROLE", "RINGLEADER_INDEX", "RINGLEADER_STRATEGY",
        "RINGLEADER_NUM_WORKERS", "RINGLEADER_NUM_PS", "RINGLEADER_GLOBAL_RANK", "RINGLEADER_GLOBAL_WORLD_SIZE",
        "RINGLEADER_METRICS_PORT", "RINGLEADER_MIN_WORKERS", "RINGLEADER_CHECKPOINT_DIR",
        "RINGLEADER_CHECKPOINT_INTERVAL", "RINGLEADER_CHECKPOINT_KEEP", "RINGLEADER_TOKEN_FILE", "RINGLEADER_ATTEMPT",
        "RINGLEADER_RENDEZVOUS",
    }
)  # fmt: skip

# Longest name a pod, its hostname (a DNS label) and the job's Service may have.
DNS_LABEL_MAX = 63


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=False)


# Upper bounds of the API (the CRD's `maximum`s): what no real job needs and what keeps the operator's arithmetic
# in range (a deadline of 10^12 s overflowed datetime in every round). The operator's own cap on ranks per job
# is lower (--max-replicas-per-job).
MAX_REPLICAS = 100_000

MAX_GPUS = 128  # per pod

MAX_SECONDS = 10**9  # about 31 years

MAX_GRACE_SECONDS = 86400  # a pod's grace period: a day

MAX_STEPS = 10**9  # step counts, intervals, restart budgets

MAX_KEEP = 1000  # checkpoints kept

MAX_RANK_ENTRIES = 64  # status.ranks keeps at most this many entries of ranks replaced and running again
