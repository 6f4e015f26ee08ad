"""What this operator process remembers of a job between rounds: nothing a restart would lose (that is in the
job's status and its pods' annotations), only what saves requests and repeats. One record per job, dropped
when the job goes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ringleader_api import TrainingJob

from .admission import gated
from .podcache import resource_version
from .rankbook import Observations
from .stalls import Clock, Stall, Unavailable
from .stragglers import Slow, Stragglers, Watch

Key = tuple[str, str]  # (namespace, name)
POD_EVENTS_SECONDS = 0.5  # a job's pod events within this window share one round (at least; see below)
# A round reads and plans over a job's pods, so a large job's round costs more (a 10,000-rank job's about 0.03 s
# here, and more to encode a changed status): its pod events share a window of PLAN_SHARE times its last round's
# reading, plan and status encoding (at most MAX_EVENTS_SECONDS; the encoding counts too: about a fifth of a round's
# time in a 5,000-rank start), so the rounds that bound and started pods bring cost the operator at most about
# 1/PLAN_SHARE of a core per job, whatever its size, and each round takes in more events the larger the job: per
# event, a start costs about the same at 1,000 ranks as at 10,000. At 10 (a tenth of a core), a 10,000-rank start's
# rounds ran at the 0.5 s floor for as long as the cluster took to run its pods, and the operator's CPU per pod grew
# with the job; at 40 its counts in status lag by about 1.2 to 2 s at 10,000 ranks, and the window stays at
# POD_EVENTS_SECONDS below about 2,000 (rounds under 12.5 ms). A pod that ends or goes gets a round at once.
PLAN_SHARE = 40.0
MAX_EVENTS_SECONDS = 5.0


@dataclass
class JobMemory:
    phase: str | None = None  # as the last round planned it (the jobs-by-phase gauge)
    waiting_since: str | None = None  # gated pods wait for room: the job's creationTimestamp (queue order)
    service_uid: str | None = None  # the job (by uid) whose Service is known to exist: rounds skip reading it
    # Monotonic time a round last read the job, its pods and Service from the API server, or the record was
    # made: the watch that fills the pod cache was listed before this process saw the job, so the cache is as
    # good as a fresh read then.
    fresh_read_at: float = field(default_factory=time.monotonic)
    foreign_pods: tuple[str, ...] = ()  # pods carrying its labels that are not its ranks, as last reported
    scrape_failures: int = 0  # progress scrapes failed in a row
    page_served: bool = False  # worker 0's page was read at least once by this process
    next_scrape_at: float = 0.0  # monotonic: no scrape before this (failed reads back off: scraper.scrape_backoff)
    # The newest version of the job this process has seen (a watch event or the answer to its own write), its
    # managedFields left out; rounds read it instead of the API server. None: read it there.
    body: dict[str, Any] | None = None
    generation: int | None = None  # the spec's generation the last round was asked for
    # The stall watch (scraper.py, stalls.py): worker 0's step and since when it has not changed; a stall (or
    # that progress cannot be read) found and not yet acted on by a round. Lost with the process: a new one
    # starts the clock again (later, never sooner).
    clock: Clock | None = None
    stall: Stall | Unavailable | None = None
    # The straggler watch: which ranks have been slow since when, when the pages were last read (monotonic), the
    # stragglers last handed to a round (None: none yet, in this process) and those not yet acted on.
    slow_watch: Watch | None = None
    slow_read_at: float = 0.0
    slow_named: tuple[Slow, ...] | None = None
    stragglers: Stragglers | None = None
    # Kueue: the job's Workload as its watch events and this process's writes last showed it (`workload_known`
    # False: not seen yet, read it from the API server), and its placement, read once per version of it.
    workload: dict[str, Any] | None = None
    workload_known: bool = False
    placed: tuple[str, Any] | None = None  # (the Workload's resourceVersion, its kueue.QueueState)
    # What the job's gang backend's scheduler said of its gang (gang_backends: the Workload API's PodGroup): the
    # name of the object its watch events last showed, and what it says (the backend's `said`).
    gang_seen: tuple[str, Any] | None = None
    seen: Observations = field(default_factory=Observations)  # its pods as its rounds observed them
    # The job as the models read it, with the body it was read from (`body` while that is unchanged): a round of a
    # job whose object did not change does not parse its status again (10,000 ranks: about half a steady round).
    # Rounds treat the job as read-only (plan is pure; its property tests plan twice from one job).
    parsed: tuple[dict[str, Any], TrainingJob] | None = None
    # status.ranks as this process last wrote it, or found it grouped as its rounds group it (None: not yet):
    # while the stored ranks are these, a round whose plan left the status as read writes nothing, unserialized.
    ranks_stored: dict[str, Any] | None = None
    # status as this process last wrote it, in JSON (status_json), with the job's resourceVersion that write made:
    # while the job read is that version, a round compares its new status with this instead of encoding the status
    # read again (its ranks grouped anew: about a sixth of a 10,000-rank job's round that wrote status).
    status_written: tuple[str, dict[str, Any]] | None = None
    # status.ranks as parsed (the dict, compared by identity: parse_job keeps it while the entries as written stay)
    # and its encoding (status_json's "ranks"), for rounds that leave the ranks as read (ranks_encoded).
    ranks_json: tuple[dict[str, Any], dict[str, Any]] | None = None
    # The synchronous work of the job's last round, in seconds: reading what it keeps, the plan, encoding and
    # comparing its status (its pod events' grouping window grows with it).
    round_seconds: float = 0.0
    # The job (uid) whose pods were found free of an earlier job's leftovers: later rounds, but fresh ones, need
    # not look again (pods of a deleted job are not made anew).
    clean_uid: str | None = None

    def timing_plan(self, reading: float = 0.0) -> contextlib.AbstractContextManager[None]:
        """Measure a plan (pure, synchronous: nothing else runs meanwhile) into `round_seconds`, plus `reading`
        seconds the round spent before it (the job's parse, its pods' list)."""
        self.round_seconds = reading
        return self.timing_more()

    @contextlib.contextmanager
    def timing_more(self) -> Iterator[None]:
        """Add the synchronous work measured (the round's status encoding, after its plan) to `round_seconds`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.round_seconds += time.perf_counter() - started

    def events_window(self) -> float:
        """How long the job's pod events (bound, started) wait to share one round: POD_EVENTS_SECONDS, longer for
        a job whose rounds take long (PLAN_SHARE times its last round's synchronous work)."""
        return min(MAX_EVENTS_SECONDS, max(POD_EVENTS_SECONDS, PLAN_SHARE * self.round_seconds))

    def any_gated(self, pods: list[dict[str, Any]]) -> bool:
        """Whether any of the job's rank pods carries the gang gate, as the plan just made counted them (its rank
        book), or, without a book, among `pods`."""
        book = self.seen.book
        return book.gated > 0 if book is not None and book.observed is not None else any(gated(x) for x in pods)

    def handled(self, stalled: Stall | Unavailable | None, slow: Stragglers | None) -> None:
        """A round that carried out its plan has acted on the stall and the stragglers it was given (or dropped
        them as old): a newer finding the scraper left meanwhile stays for the next round."""
        if stalled is not None and self.stall is stalled:
            self.stall = None
        if slow is not None and self.stragglers is slow:
            self.stragglers = None

    def saw_workload(self, obj: Mapping[str, Any] | None) -> None:
        """Keep the job's Workload (None: deleted) unless the one kept is a newer version of the same one."""
        kept = self.workload
        if (
            obj is not None
            and kept is not None
            and (kept.get("metadata") or {}).get("uid") == (obj.get("metadata") or {}).get("uid")
            and resource_version(kept) > resource_version(obj)
        ):
            return
        self.workload = None if obj is None else _without_managed_fields(obj)
        self.workload_known = True

    def ranks_encoded(self, ranks: dict[str, Any]) -> dict[str, Any] | None:
        """The encoding of `ranks` (a parsed job's status.ranks) a round made before, if this is that dict."""
        kept = self.ranks_json
        return kept[1] if kept is not None and kept[0] is ranks else None

    def parse(self, obj: dict[str, Any]) -> TrainingJob:
        """The job `obj` as the models read it: read again only when `obj` is another body than the last's
        (pydantic's ValidationError when they cannot), and then its status.ranks only when they differ as written
        (`parse_job`)."""
        if self.parsed is None or self.parsed[0] is not obj:
            self.parsed = (obj, parse_job(obj, self.parsed))
        return self.parsed[1]

    def saw(self, obj: Mapping[str, Any]) -> None:
        """Keep `obj` as the job's body unless the one kept is newer (an event can arrive after the answer to
        the write that made it, or after a later write's)."""
        if self.body is not None and resource_version(self.body) > resource_version(obj):
            return
        self.body = _without_managed_fields(obj)


def parse_job(obj: dict[str, Any], before: tuple[dict[str, Any], TrainingJob] | None) -> TrainingJob:
    """The job `obj` as the models read it; where `before` (a body and its parse) has the same status.ranks as
    written, the parse's ranks are `before`'s (the same dict: rounds treat a parsed job as read-only). A job of
    10,000 ranks writes a few grouped entries that expand to 10,000: most of a starting job's status writes
    change its counts, not those entries, and the next round then reads the entries once, not the ranks."""
    ranks = _written_ranks(obj)
    if not ranks or before is None or ranks != _written_ranks(before[0]):
        return TrainingJob.model_validate(obj)
    job = TrainingJob.model_validate({**obj, "status": {**obj["status"], "ranks": {}}})
    job.status.ranks = before[1].status.ranks
    return job


def _written_ranks(obj: Mapping[str, Any]) -> Any:
    """status.ranks of the body `obj` as written (None when its status is not an object)."""
    status = obj.get("status")
    return status.get("ranks") if isinstance(status, dict) else None


def _without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` without its field bookkeeping (managedFields), which nothing here reads and which is often most of it."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


class Jobs(dict[Key, JobMemory]):
    """The records of every job this process knows, by (namespace, name): one dict shared by the reconciler, its
    reader and its writer."""

    def memory(self, key: Key) -> JobMemory:
        """The job's record, made empty when there is none."""
        return self.setdefault(key, JobMemory())
