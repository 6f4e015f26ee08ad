"""What one reconcile round read, pure: the input of `reconcile.plan` besides the clock and the cluster.

The I/O layer (reconciler.py) fills a `Reading` from the job's watch events, the pod cache and what it keeps of
the job between rounds; `plan` decides from it alone. A table test builds one by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringleader_api import TrainingJob

from . import kueue
from .builders import DEFAULT_MAX_RANKS
from .gang_backends import GangBackend, choose
from .observed import Delta
from .rankbook import Observations
from .stalls import Stall, Unavailable
from .stragglers import Stragglers


@dataclass(frozen=True)
class Reading:
    """One job as a round read it.

    `pods` carry the job's labels (its ranks are picked from them); `service_exists`: its headless Service (with
    its Secret and NetworkPolicy) exists. A job with more than `max_ranks` pods fails as an invalid spec. `gone`:
    the last states of its pods lately deleted (how each ended). `stalled`: a stall the progress scraper found, to
    act on; `slow`: the stragglers its last reading found. `queued`: what Kueue says of the job's Workload (None:
    Kueue does not queue the job). `seen`: the job's pods as its earlier rounds observed them (reused for pods
    that did not change; the plan is the same without). `gang`: the backend that admits the job's pods as a gang
    (gang_backends.choose), and `gang_verdict` what its scheduler said of this job's (its `verdict`)."""

    job: TrainingJob
    pods: list[dict[str, Any]]
    service_exists: bool
    max_ranks: int = DEFAULT_MAX_RANKS
    gone: list[dict[str, Any]] | None = None
    stalled: Stall | Unavailable | None = None
    slow: Stragglers | None = None
    queued: kueue.QueueState | None = None
    seen: Observations | None = None
    gang: GangBackend | None = None  # None: gang_backends.choose(job), the operator's own gate its default
    gang_verdict: Any = None
    pod_delta: Delta | None = None  # what changed among `pods` since the revision `seen` holds (podcache.PodDelta)

    @property
    def backend(self) -> GangBackend:
        """The backend that admits the job's gang: `gang`, else the one `gang_backends.choose` picks for it."""
        return self.gang or choose(self.job)

    @property
    def sizes_world(self) -> bool:
        """Whether the operator chooses an elastic job's world size from the room it sees: its backend places the
        gang itself and Kueue does not queue the job (both size a job themselves)."""
        return self.queued is None and self.backend.sizes_jobs
