"""The operator's client budget (ratelimit.py): the token bucket's arithmetic, table-style, and the budget taken
by both paths to the API server, the operator's own calls (kube.Kube) and kopf's session
(kube_connection.kopf_session)."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from aiohttp import web
from kubernetes_asyncio import client
from ringleader_operator.kube import Kube
from ringleader_operator.kube_connection import kopf_session
from ringleader_operator.ratelimit import ClientBudget, TokenBucket, request_call

from tests.support.localhttp import served


@pytest.mark.parametrize(
    ("qps", "burst", "times", "waits"),
    [
        # A burst is served at once, then one request every 1/qps seconds, in the order they asked.
        (10, 3, [0, 0, 0, 0, 0], [0, 0, 0, 0.1, 0.2]),
        # Tokens come back at qps while idle...
        (10, 3, [0, 0, 0, 0.05, 0.05], [0, 0, 0, 0.05, 0.15]),
        # ...but never more than burst of them.
        (10, 2, [0, 0, 100, 100, 100], [0, 0, 0, 0, 0.1]),
        (1, 1, [0, 0, 0], [0, 1, 2]),
        # A clock read late (an earlier time after a later one) takes no tokens back.
        (10, 1, [1.0, 0.5], [0, 0.1]),
    ],
)
def test_the_bucket_serves_a_burst_then_one_request_per_token(
    qps: float, burst: int, times: list[float], waits: list[float]
) -> None:
    bucket = TokenBucket(qps, burst)
    assert [round(bucket.reserve(t), 9) for t in times] == waits


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 5), (5, 0)])
def test_a_bucket_without_tokens_is_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        TokenBucket(qps, burst)


class Waits:
    """A sleep that records how long it was asked to wait, and a clock that stands still."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.asked.append(round(seconds, 9))

    def budget(self, qps: float, burst: int) -> ClientBudget:
        return ClientBudget(qps, burst, clock=lambda: 0.0, sleep=self.sleep)


def test_no_qps_means_no_limit() -> None:
    waits = Waits()
    budget = waits.budget(0, 1)

    async def main() -> None:
        for _ in range(100):
            await budget.acquire()

    asyncio.run(main())
    assert waits.asked == [] and str(budget) == "unlimited"


def test_the_operators_own_calls_take_their_tokens() -> None:
    waits = Waits()

    async def answer() -> str:
        return "ok"

    async def main() -> list[str | None]:
        kube = Kube(client.ApiClient(), budget=waits.budget(4, 2))
        try:
            return [await kube._call("reading", answer()) for _ in range(4)]
        finally:
            await kube.close()

    assert asyncio.run(main()) == ["ok"] * 4
    assert waits.asked == [0.25, 0.5]


def test_kopfs_requests_take_their_tokens_from_the_same_budget() -> None:
    waits = Waits()
    budget = waits.budget(10, 1)
    info = kopf.ConnectionInfo(server="http://127.0.0.1", scheme="Bearer", token="t0ken")

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="{}")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/", ok)
        async with served(app) as port:
            session = kopf_session(info, watches=1, budget=budget).aiohttp_session
            try:
                for _ in range(3):
                    async with session.get(f"http://127.0.0.1:{port}/") as response:
                        assert response.status == 200
                await budget.acquire()  # the operator's own next call waits behind kopf's
            finally:
                await session.close()

    asyncio.run(main())
    assert waits.asked == [0.1, 0.2, 0.3]


@pytest.mark.parametrize(
    ("method", "path", "query", "call"),
    [
        ("GET", "/api/v1/pods", {"watch": "true"}, "GET pods watch"),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "1"}, "GET pods watch"),
        ("PATCH", "/apis/ringleader.dev/v1alpha1/namespaces/ns/trainingjobs/j/status", {}, "PATCH trainingjobs/status"),
        ("POST", "/api/v1/namespaces/ns/events", {}, "POST events"),
        ("PATCH", "/apis/kopf.dev/v1/clusterkopfpeerings/ringleader", {}, "PATCH clusterkopfpeerings"),
        ("GET", "/api/v1/namespaces/ns", {}, "GET namespaces"),
        ("GET", "/apis/ringleader.dev/v1alpha1", {}, "GET discovery"),
    ],
)
def test_a_request_is_named_by_method_and_resource_never_by_object(
    method: str, path: str, query: dict[str, str], call: str
) -> None:
    assert request_call(method, path, query) == call
