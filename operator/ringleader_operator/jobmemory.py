"""What this operator process remembers of a job between rounds: nothing a restart would lose (that is in the
job's status and its pods' annotations), only what saves requests and repeats. One record per job, dropped
when the job goes."""

from __future__ import annotations

from dataclasses import dataclass

Key = tuple[str, str]  # (namespace, name)


@dataclass
class JobMemory:
    phase: str | None = None  # as the last round planned it (the jobs-by-phase gauge)
    waiting_since: str | None = None  # gated pods wait for room: the job's creationTimestamp (queue order)
    service_uid: str | None = None  # the job (by uid) whose Service is known to exist: rounds skip reading it
    fresh_read_at: float | None = None  # monotonic time a round last read pods and Service from the API server
    foreign_pods: tuple[str, ...] = ()  # pods carrying its labels that are not its ranks, as last reported
    scrape_failures: int = 0  # progress scrapes failed in a row
