"""The operator's own list-and-watch of pods, in place of kopf's: pods are most of what the operator hears of
(every pod of a 10,000-rank job changes state several times while it starts), and kopf treats each pod event
as it treats a job's: it recalls (and keeps until the pod is deleted) a memory record per pod, wraps the body
in its views, builds three loggers, runs its index functions and matches its handlers. py-spy put kopf's
per-event workers at a third of the operator's CPU in a 2,000-pod start. Here a pod event is decoded, reduced
to its digest (podcache.digest), filed in two indexes and handed to one callback.

One stream per scope (the cluster, or each watched namespace): a paginated list, then a watch from the list's
resourceVersion with bookmarks, renewed when the API server ends it (TIMEOUT_SECONDS) from the last version
seen. A watch the API server answers with 410 Gone (the version is too old to resume from) lists again: the
indexes take the new list, and the callback hears of what changed in between (pods gone as deletions, pods
changed as modifications), so no round misses a pod's end. Failures (the API server down, a refused request,
a line too long) are retried after ERROR_BACKOFFS, forever, with a warning: a watch that gives up would leave
the operator blind without stopping it.

It starts with the first job event a replica handles (handlers._start_pod_watch), so a standby of a leader
election, which kopf shows no job, watches no pods; and the callback (Reconciler.pod_seen) acts only for jobs
the replica's job watch has shown it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, Callable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from . import metrics
from .podcache import Pod, PodIndexes, digest, key
from .ratelimit import ClientBudget

log = logging.getLogger(__name__)

PAGE = 500  # pods per page of a list: a page of big pods stays a few MB
TIMEOUT_SECONDS = 300  # how long the API server keeps a watch open (it then ends it; we renew it)
CLIENT_TIMEOUT = 330  # seconds a list page or a watch may take in all, on our side
ERROR_BACKOFFS = (1, 1, 2, 3, 5, 8, 13, 21, 30)  # seconds before each retry after a failure; the last repeats
GONE = 410
ERROR_BYTES = 500  # of an error answer's body, read into the exception (the rest is never read)
QUICK_END_SECONDS = 1.0  # a watch ended this soon with no event counts as a failure (no loop of requests)

PodSeen = Callable[[str, Pod], None]  # (ADDED, MODIFIED or DELETED; the pod's digest)


class Gone(Exception):
    """The API server can no longer resume the watch from the version asked (410): list again."""


async def watch_events(lines: AsyncIterable[bytes]) -> AsyncIterable[tuple[str, dict[str, Any]]]:
    """The (type, object) of each line of a watch stream; raises Gone on a 410 and ApiException on another
    ERROR event; bookmarks come through as ("BOOKMARK", object) for their resourceVersion."""
    async for line in lines:
        if not line.strip():
            continue
        event = orjson.loads(line)  # a few times faster than json's, on most of what the operator decodes
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(kind, str) or not isinstance(obj, dict):
            raise ApiException(status=502, reason=f"a watch event with no type or object: {line[:100]!r}")
        if kind == "ERROR":
            if obj.get("code") == GONE:
                raise Gone(obj.get("message", ""))
            raise ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("message", "")))
        yield kind, obj


class PodWatch:
    """Lists and watches the pods of `namespaces` (empty: the whole cluster) into `indexes`, telling `seen` of
    every change after the first list. Once every scope has been listed, `listed` is called and `ready` set."""

    def __init__(
        self,
        core: client.CoreV1Api,
        budget: ClientBudget,
        namespaces: list[str],
        indexes: PodIndexes,
        seen: PodSeen,
        sleep: Callable[[float], Any] = asyncio.sleep,
        listed: Callable[[], None] = lambda: None,
        ready: asyncio.Event | None = None,
    ) -> None:
        self.core = core
        self.budget, self.indexes, self.seen, self.sleep, self.listed_all = budget, indexes, seen, sleep, listed
        self.scopes: list[str | None] = list(namespaces) or [None]
        self.listed: set[str | None] = set()
        self.ready = ready if ready is not None else asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the streams in a task of their own, once: later calls do nothing. The task inherits the caller's
        context."""
        if self.task is None:
            self.task = asyncio.create_task(self.run(), name="pod watch")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def run(self) -> None:
        """One stream per scope, until cancelled."""
        await asyncio.gather(*(self.stream(scope) for scope in self.scopes))

    async def stream(self, namespace: str | None) -> None:
        failures = 0
        version: str | None = None
        where = namespace or "the cluster"
        while True:
            try:
                if version is None:
                    version = await self._list(namespace)
                    failures = 0
                began = time.monotonic()
                version, events = await self._watch(namespace, version)
                if events == 0 and time.monotonic() - began < QUICK_END_SECONDS:
                    raise ApiException(status=0, reason="the API server ended the watch at once")
                failures = 0
            except Gone:
                log.info("the pod watch of %s must list again (its version is too old)", where)
                version = None
            except Exception as e:  # an unforeseen one too: the watch must not end
                pause = ERROR_BACKOFFS[min(failures, len(ERROR_BACKOFFS) - 1)]
                failures += 1
                expected = isinstance(e, ApiException | OSError | TimeoutError | aiohttp.ClientError | ValueError)
                log.warning("the pod watch of %s failed (%s); trying again in %s s", where, _reason(e), pause,
                            exc_info=None if expected else e)  # fmt: skip
                await self.sleep(pause)

    async def _list(self, namespace: str | None) -> str:
        """List the scope's pods, page by page, into the indexes; returns the list's resourceVersion."""
        pods: list[Pod] = []
        token: str | None = None
        while True:
            kw: dict[str, Any] = {"limit": PAGE, "_preload_content": False, "_request_timeout": CLIENT_TIMEOUT}
            if token:
                kw["_continue"] = token
            page = await self._get(namespace, "listing pods", kw)
            async with page:
                body = orjson.loads(await page.read())
            pods.extend(digest(p) for p in body.get("items") or [])
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        first = namespace not in self.listed
        changes = self.indexes.relisted(namespace, pods)
        self.listed.add(namespace)
        if len(self.listed) == len(self.scopes) and not self.ready.is_set():
            self.listed_all()
            self.ready.set()
        if not first:  # the first list is every pod at start: each job's first round reads them anyway
            for kind, pod in changes:
                self._tell(kind, pod)
        return str(meta.get("resourceVersion") or "")

    async def _watch(self, namespace: str | None, version: str) -> tuple[str, int]:
        """Watch from `version` until the API server ends the stream; returns the last version seen and how many
        events (bookmarks included) came."""
        kw: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "resource_version": version,
            "timeout_seconds": TIMEOUT_SECONDS,
            "_preload_content": False,
            "_request_timeout": CLIENT_TIMEOUT,
        }
        stream = await self._get(namespace, "pods watch", kw)
        events = 0
        async with stream:
            async for kind, obj in watch_events(stream.content):
                events += 1
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind == "BOOKMARK":
                    continue
                pod = digest(obj)
                self.indexes.apply(kind, pod)
                self._tell(kind, pod)
        return version, events

    def _tell(self, kind: str, pod: Pod) -> None:
        """Hand one change to the callback; a failure there is logged, never the end of the watch."""
        try:
            self.seen(kind, pod)
        except Exception:
            log.exception("handling the pod event %s %s/%s failed", kind, *key(pod))

    async def _get(self, namespace: str | None, what: str, kw: dict[str, Any]) -> aiohttp.ClientResponse:
        await self.budget.acquire()
        metrics.API_REQUESTS.labels("operator", what).inc()
        if namespace is None:
            response = await self.core.list_pod_for_all_namespaces(**kw)
        else:
            response = await self.core.list_namespaced_pod(namespace, **kw)
        if not 200 <= response.status <= 299:
            async with response:  # a bounded read: an answer of any size costs at most ERROR_BYTES
                text = (await response.content.read(ERROR_BYTES)).decode("utf-8", errors="replace")
            raise ApiException(status=response.status, reason=text)
        return response  # type: ignore[no-any-return]


def _reason(e: Exception) -> str:
    if isinstance(e, ApiException):
        return f"{e.status} {e.reason}"
    return str(e) or type(e).__name__
