"""The process node's agent rides out a dropped connection to the API server (aiohttp's errors are no OSError):
the node's heartbeat goes on and a pod's status patch is retried, as the operator's I/O layer does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from ringleader_devcluster.node import agent as agent_module
from ringleader_devcluster.node.agent import Agent
from ringleader_devcluster.node.nodeapi import NodeApi
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
    coord = type("Coord", (), {"patch_namespaced_lease": lease})()
    node.api = NodeApi(
        core=type("Core", (), {"patch_node_status": Flaky([])})(), coord=coord, discovery=None, api_client=None
    )
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
    core = type("Core", (), {"patch_namespaced_pod_status": patch})()
    worker.node = type("Node", (), {"api": NodeApi(core=core, coord=None, discovery=None, api_client=None)})()
    worker.pod = {"metadata": {"name": "p", "namespace": "ns"}}
    worker.key, worker.gone, worker.gone_quiet, worker.published = "ns/p", False, False, None
    worker.publishing = False
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


class Failing:
    """A client whose every method raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, _name: str) -> Any:
        async def call(*_: Any, **__: Any) -> Any:
            raise self.error

        return call


def _api_error(status: int, message: str = "") -> Exception:
    from kubernetes_asyncio.client import ApiException

    e = ApiException(status=status, reason={403: "Forbidden", 404: "Not Found", 409: "Conflict"}[status])
    e.body = json.dumps({"kind": "Status", "message": message})
    error: Exception = e
    return error


@pytest.mark.parametrize(
    ("call", "error", "outcome"),
    [
        ("config_map", _api_error(404), None),
        ("secret", _api_error(404), None),
        ("register", _api_error(409), False),
        ("config_map", _api_error(403, "cannot get configmaps"), (403, "Forbidden: cannot get configmaps")),
        ("secret", aiohttp.ServerDisconnectedError(), (None, "ServerDisconnectedError")),
        ("status", ConnectionResetError("reset"), (None, "ConnectionResetError: reset")),
        ("status", _api_error(404), (404, "Not Found")),
        ("register", _api_error(403, "nodes is forbidden"), (403, "Forbidden: nodes is forbidden")),
        ("remove", TimeoutError(), (None, "TimeoutError")),
    ],
)
def test_one_error_mapping_for_every_call(call: str, error: Exception, outcome: Any) -> None:
    """Absent objects read as None and an existing node as False; every other failure is one NodeApiError whose
    status is the HTTP status (None when the call failed on the way) and whose text names the call."""
    from ringleader_devcluster.node.nodeapi import NodeApiError

    api = NodeApi(core=Failing(error), coord=Failing(error), discovery=None, api_client=None)
    calls = {
        "config_map": lambda: api.config_map_data("ns", "cm"),
        "secret": lambda: api.secret_data("ns", "s"),
        "register": lambda: api.register_node({}),
        "status": lambda: api.patch_pod_status("ns", "p", {}),
        "remove": lambda: api.remove_pod("ns", "p", "uid"),
    }
    if not isinstance(outcome, tuple):
        assert asyncio.run(calls[call]()) is outcome
        return
    with pytest.raises(NodeApiError) as raised:
        asyncio.run(calls[call]())
    status, text = outcome
    assert raised.value.status == status
    assert text in str(raised.value)
    assert str(raised.value).startswith(f"{raised.value.call}: ") and raised.value.call


def test_a_pod_is_removed_only_after_its_final_status_is_published() -> None:
    """A kubelet removes a terminated pod's object once its final status (exit codes) is out: a status patch
    still on its way when the pod stops must not lose to the removal, or the pod's controller sees a deletion
    without exit codes (an eviction that saved and exited cleanly would be counted as a failure)."""
    worker = PodWorker.__new__(PodWorker)
    sent: list[str] = []

    async def slow_patch(name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        await asyncio.sleep(0.2)  # a loaded API server
        sent.append(body["status"]["phase"])

    core = type("Core", (), {"patch_namespaced_pod_status": staticmethod(slow_patch)})()
    worker.node = type("Node", (), {"api": NodeApi(core=core, coord=None, discovery=None, api_client=None)})()
    worker.pod = {"metadata": {"name": "p", "namespace": "ns"}}
    worker.key, worker.gone, worker.gone_quiet, worker.published = "ns/p", False, False, None
    worker.publishing = False
    phase = ["Running"]
    worker.status = lambda at: {"phase": phase[0], "conditions": []}  # type: ignore[method-assign]

    async def main() -> None:
        worker.dirty = asyncio.Event()
        worker.dirty.set()
        task = asyncio.create_task(worker._publish_loop())
        await asyncio.sleep(0.05)  # the Running patch is in flight
        phase[0] = "Failed"
        worker._mark()
        await worker.flush_status(within=5)
        sent.append("removed")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert sent == ["Running", "Failed", "removed"]
