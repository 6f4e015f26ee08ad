"""The process node's agent rides out a dropped connection to the API server (aiohttp's errors are no OSError):
the node's heartbeat goes on and a pod's status patch is retried, as the operator's I/O layer does."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from ringleader_devcluster.node import agent as agent_module
from ringleader_devcluster.node.agent import Agent
from ringleader_devcluster.node.podworker import PodWorker

DROPPED = [aiohttp.ServerDisconnectedError(), aiohttp.ClientPayloadError("cut"), ConnectionResetError(), TimeoutError()]


class Flaky:
    """An API whose calls fail with each of `errors` in turn, then succeed."""

    def __init__(self, errors: list[Exception], calls_awaited: int = 1) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.calls_awaited = calls_awaited
        self.enough = asyncio.Event()  # set at the `calls_awaited`-th call

    async def __call__(self, *_: Any, **__: Any) -> None:
        self.calls += 1
        if self.calls >= self.calls_awaited:
            self.enough.set()
        if self.errors:
            raise self.errors.pop(0)


@pytest.mark.parametrize("error", DROPPED, ids=lambda e: type(e).__name__)
def test_the_heartbeat_goes_on_after_a_dropped_connection(error: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_module, "HEARTBEAT_EVERY", 0.0)
    node = Agent.__new__(Agent)
    lease = Flaky([error, error], calls_awaited=4)
    node.coord = type("Coord", (), {"patch_namespaced_lease": lease})()
    node.core = type("Core", (), {"patch_node_status": Flaky([])})()
    node._status = lambda: {}  # type: ignore[method-assign]

    async def main() -> None:
        node.stop = asyncio.Event()
        task = asyncio.create_task(node.heartbeat("n"))
        await asyncio.wait([task, asyncio.create_task(lease.enough.wait())], timeout=10, return_when="FIRST_COMPLETED")
        node.stop.set()
        await task  # ended by stop, not by the error

    asyncio.run(main())
    assert lease.calls >= 4


@pytest.mark.parametrize("error", DROPPED, ids=lambda e: type(e).__name__)
def test_a_status_patch_is_retried_after_a_dropped_connection(error: Exception) -> None:
    worker = PodWorker.__new__(PodWorker)
    patch = Flaky([error], calls_awaited=2)
    worker.node = type("Node", (), {"api": type("Api", (), {"patch_namespaced_pod_status": patch})()})()
    worker.pod = {"metadata": {"name": "p", "namespace": "ns"}}
    worker.key, worker.gone, worker.gone_quiet, worker.published = "ns/p", False, False, None
    worker.status = lambda at: {"phase": "Running", "conditions": []}  # type: ignore[method-assign]

    async def main() -> None:
        worker.dirty = asyncio.Event()
        worker.dirty.set()
        task = asyncio.create_task(worker._publish_loop())
        await asyncio.wait([task, asyncio.create_task(patch.enough.wait())], timeout=10, return_when="FIRST_COMPLETED")
        await asyncio.sleep(0)  # the successful call's caller records what it published
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert patch.calls == 2 and worker.published == {"phase": "Running", "conditions": []}
