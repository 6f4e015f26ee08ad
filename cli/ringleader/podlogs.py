"""A job's logs as `Client.logs` reads them (`JobLogs`): each rank's pod log, read at once or followed across the
rank's restarts, merged by time with the last lines the operator kept of attempts whose pods are gone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.exceptions import ApiException
from ringleader_api import JobPhase

from . import logmerge
from .apierrors import api_error
from .errors import NotFound, RingleaderError
from .jobstate import JobState, rank_of_pod

if TYPE_CHECKING:
    from .client import Client

FINAL = (JobPhase.SUCCEEDED, JobPhase.FAILED)
LOG_LIMIT_BYTES = 8 * 1024 * 1024  # read of one pod's log: the kubelet stops there (--tail, --since: the newest)
TOTAL_LOG_BYTES = 256 * 1024 * 1024  # what one `logs` call reads at most, shared by the ranks it reads
READERS = 8  # pods whose logs are read at once


class JobLogs:
    """The logs of one `client`'s jobs: its API connection, namespace and request timeout."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def lines(
        self, name: str, rank: str | None, follow: bool, since_seconds: int | None, tail: int | None, max_ranks: int
    ) -> Iterator[logmerge.LogLine]:
        """What `Client.logs` yields (its contract)."""
        state = self.client.state(name)
        ranks = state.ranks(rank)
        if rank is not None and not ranks:
            raise NotFound(f"trainingjob {name!r} has no rank {rank!r} (ranks look like worker-0, ps-0)")
        if len(ranks) > max_ranks:
            note = f"[ringleader] {name} has {len(ranks)} ranks: the first {max_ranks} are shown (--rank, --max-ranks)"
            yield logmerge.LogLine("", 0, logmerge.EPOCH, note, marker=True)
            ranks = ranks[:max_ranks]
        if follow:
            yield from self._follow(name, ranks, since_seconds, tail)
            return
        budget = min(LOG_LIMIT_BYTES, TOTAL_LOG_BYTES // max(1, len(ranks)))
        pods = {rank_of_pod(p): p for p in state.pods}

        def read(r: str) -> list[logmerge.LogLine]:
            pod = pods.get(r)
            if pod is None:
                return []
            return logmerge.parse_lines(r, state.attempt_of(pod), self._read_log(pod, since_seconds, tail, budget))

        with ThreadPoolExecutor(READERS) as pool:
            current = dict(zip(ranks, pool.map(read, ranks), strict=True))
        streams = []
        for r in ranks:
            now = current[r][0].attempt if current[r] else None
            streams.append(logmerge.rank_stream([*_kept_lines(state, r, now), current[r]], state.markers(r)))
        yield from logmerge.merge(streams)

    def _pod_log(self, pod: dict[str, Any], since_seconds: int | None, tail: int | None, **options: Any) -> Any:
        """The trainer container's log with each line's time, from `since_seconds` ago or its last `tail` lines."""
        extra = {k: v for k, v in (("since_seconds", since_seconds), ("tail_lines", tail)) if v is not None}
        return self.client.core.read_namespaced_pod_log(
            pod["metadata"]["name"], self.client.namespace, container=_trainer_container(pod), timestamps=True,
            **extra, **options,
        )  # fmt: skip

    def _read_log(self, pod: dict[str, Any], since_seconds: int | None, tail: int | None, limit: int) -> str:
        try:
            text = self._pod_log(pod, since_seconds, tail, limit_bytes=limit, _request_timeout=self.client.timeout)
        except ApiException as e:
            if e.status in (400, 404):  # not started yet (ContainerCreating), or gone since the listing
                return ""
            raise api_error(e, f"log of pod {pod['metadata']['name']!r}") from None
        return str(text)

    def _follow(
        self, name: str, ranks: list[str], since_seconds: int | None, tail: int | None
    ) -> Iterator[logmerge.LogLine]:
        """One thread per rank streams its pod's log, and its next pod's after a restart (by uid), until the job
        ends; lines are yielded as they arrive."""
        out: Queue[logmerge.LogLine | None] = Queue(maxsize=10_000)
        stop = threading.Event()
        threads = [
            threading.Thread(target=self._follow_rank, args=(name, r, out, stop, since_seconds, tail), daemon=True)
            for r in ranks
        ]
        for t in threads:
            t.start()
        running = len(threads)
        try:
            while running:
                try:
                    line = out.get(timeout=1.0)
                except Empty:
                    continue
                if line is None:
                    running -= 1
                else:
                    yield line
        finally:
            stop.set()

    def _follow_rank(
        self, name: str, rank: str, out: Queue[logmerge.LogLine | None], stop: threading.Event,
        since_seconds: int | None, tail: int | None,
    ) -> None:  # fmt: skip
        """Stream `rank`'s pod, then each pod that replaces it (a new uid, announced by its marker), until the job
        has ended and the rank's pod is done. Reads one pod and the job per second while waiting."""
        seen: set[str] = set()
        pod_name = f"{name}-{rank}"
        try:
            while not stop.is_set():
                pod = self.client.read_pod(pod_name)
                if pod is not None and pod["metadata"]["uid"] not in seen and _started(pod):
                    state = self.client.state(name)
                    attempt = state.attempt_of(pod)
                    if seen:  # a restart while following: the marker, with the operator's event when it has one
                        why = state.markers(rank).get(attempt)
                        out.put(why or logmerge.marker(rank, attempt, datetime.now(UTC), ""))
                    else:  # attempts that ended before following began, as `logs` without --follow shows them
                        markers = {k: m for k, m in state.markers(rank).items() if k <= attempt}
                        for line in logmerge.rank_stream(_kept_lines(state, rank, attempt), markers):
                            out.put(line)
                    seen.add(pod["metadata"]["uid"])
                    self._stream(pod, rank, attempt, out, stop, since_seconds if len(seen) == 1 else None, tail)
                    tail = None
                    continue
                if self.client.get(name).status.phase in FINAL and (pod is None or not _running(pod)):
                    return
                stop.wait(1.0)
        except RingleaderError as e:
            out.put(logmerge.LogLine(rank, 0, datetime.now(UTC), f"[ringleader] stopped following: {e}", marker=True))
        finally:
            out.put(None)

    def _stream(
        self, pod: dict[str, Any], rank: str, attempt: int, out: Queue[logmerge.LogLine | None],
        stop: threading.Event, since_seconds: int | None, tail: int | None,
    ) -> None:  # fmt: skip
        try:
            response = self._pod_log(
                pod,
                since_seconds,
                tail,
                follow=True,
                _preload_content=False,
                _request_timeout=(self.client.timeout, 300),
            )
        except ApiException:
            return
        pending = b""
        try:
            for chunk in response.stream(64 * 1024):
                if stop.is_set():
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > 1024 * 1024:  # one line of a megabyte: shown in pieces rather than held
                    lines, pending = [*lines, pending], b""
                for raw in lines:
                    for line in logmerge.parse_lines(rank, attempt, raw.decode(errors="replace")):
                        out.put(line)
        except (urllib3.exceptions.HTTPError, OSError):
            pass  # the stream broke or idled 300 s: the caller looks at the rank again
        finally:
            response.release_conn()


def _trainer_container(pod: dict[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    names = [c.get("name") for c in containers]
    return "trainer" if "trainer" in names else str(names[0])


def _kept_lines(state: JobState, rank: str, before: int | None) -> list[list[logmerge.LogLine]]:
    """The last lines the operator kept of `rank`'s attempts numbered below `before` (all when None), oldest first."""
    return [lines for attempt, lines in sorted(state.last_lines(rank).items()) if before is None or attempt < before]


def _started(pod: dict[str, Any]) -> bool:
    """The trainer container has run (its log can be read)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == _trainer_container(pod) and ((cs.get("state") or {}).keys() & {"running", "terminated"}):
            return True
    return False


def _running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Pending", "Running")
