"""How a job's pods are admitted as a gang (all of them placed, or none), pure: one backend per way of doing it,
behind one protocol, chosen once per round (round_reader.py puts it in the `Reading`).

- `gates` (the default, `own_gate`): the operator itself: every pod is created gated, and the gate is lifted from
  all of them once they fit the cluster's free room together (admission.py weighs it);
- `workload-api` (`workload_api`): kube-scheduler, from the PodGroup of Kubernetes' Workload API;
- a PodGroup scheduler (`volcano`, `coscheduling`, `kai`, over `pod_groups`): the scheduler the pods'
  `schedulerName` names, from its own PodGroup.

A job whose pods name a PodGroup scheduler gets that scheduler; any other job the backend the operator was
started with (`--gang-backend`: `gates`, or `workload-api` where the cluster serves it). Kueue is not a backend:
it admits by quota before any of these (kueue.py), and the gang is then placed by the job's backend.

Adding a backend: a module with an object that satisfies `GangBackend`, and its line in `SCHEDULERS` (named by
the pods' schedulerName) or `CLUSTER_BACKENDS` (chosen for the whole operator). A PodGroup scheduler is a
`pod_groups.PodGroupScheduler` with its resource, its member key and what its PodGroup's spec adds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ringleader_api import TrainingJob

from .. import admission
from ..builders import scheduler_names
from ..round_state import Round
from .coscheduling import COSCHEDULING
from .kai import KAI
from .own_gate import OWN_GATE
from .volcano import VOLCANO
from .workload_api import WORKLOAD_API

__all__ = [
    "CLUSTER_BACKENDS", "OWN_GATE", "SCHEDULERS", "GangBackend", "Resource", "choose", "named_scheduler", "watched",
]  # fmt: skip

Resource = tuple[str, str, str]  # (group, version, plural)


class GangBackend(Protocol):
    """One way of admitting a job's pods as a gang."""

    @property
    def name(self) -> str:
        """As `--gang-backend` or the pods' `schedulerName` names it."""
        ...

    @property
    def description(self) -> str:
        """Who places the gang, in a few words (the operator's log says it at start)."""
        ...

    @property
    def sizes_jobs(self) -> bool:
        """Whether the operator chooses an elastic job's world size from the room it sees (policies/elastic.py):
        only where it places the gang itself."""
        ...

    @property
    def watches(self) -> tuple[Resource, ...]:
        """The objects whose watch events carry what the backend's scheduler said of a job's gang."""
        ...

    def mark(self, pod: dict[str, Any], job: TrainingJob) -> None:
        """Make `pod`, as built (builders.build_pod), a member of the job's gang."""
        ...

    def verdict(self, job: TrainingJob, seen: tuple[str, Any] | None) -> Any:
        """What the round's admission reads of the scheduler's word on the job's gang, from `seen` (the name of
        the object a watch event last showed and `said` of it); None where the backend has no such word."""
        ...

    def said(self, obj: Mapping[str, Any] | None) -> Any:
        """What one of its watched objects says (None: nothing yet, or the object is gone)."""
        ...

    def admit(self, r: Round, cluster: admission.Cluster | None, verdict: Any) -> None:
        """The round's admission, once the pods it creates are marked (`mark`): add the objects the gang needs
        before them (`r.plan.scheduling_objects`), and release the gang or say why it waits (the Admitted
        condition). `cluster`: every node and pod, where the round weighs them; `verdict`: `verdict`'s."""
        ...


SCHEDULERS: dict[str, GangBackend] = {b.name: b for b in (VOLCANO, COSCHEDULING, KAI)}
CLUSTER_BACKENDS: dict[str, GangBackend] = {b.name: b for b in (OWN_GATE, WORKLOAD_API)}


def named_scheduler(job: TrainingJob) -> GangBackend | None:
    """The PodGroup scheduler the job's pods name, if any (builders.validate makes sure all roles name one)."""
    names = scheduler_names(job)
    return SCHEDULERS.get(next(iter(names))) if len(names) == 1 else None


def choose(job: TrainingJob, default: GangBackend = OWN_GATE) -> GangBackend:
    """The backend that admits the job's gang: the PodGroup scheduler its pods name, else `default` (the
    operator's: its own gate, or the Workload API)."""
    return named_scheduler(job) or default


def watched() -> list[Resource]:
    """Every backend's watched objects, each once (the operator watches them where the cluster serves them)."""
    return list(dict.fromkeys(w for b in (*CLUSTER_BACKENDS.values(), *SCHEDULERS.values()) for w in b.watches))
