"""kopf's HTTP session as the login handler makes it (kube_connection.kopf_session): kopf's credentials,
a bounded pool."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from kubernetes_asyncio import client
from ringleader_operator.kube_connection import KOPF_REQUESTS, environment_proxies, ignore_environment, kopf_session
from ringleader_operator.ratelimit import ClientBudget


@pytest.mark.parametrize("watches", [4, 12])
def test_the_session_carries_the_credentials_and_room_for_every_watch(watches: int) -> None:
    info = kopf.ConnectionInfo(server="https://127.0.0.1:6443", scheme="Bearer", token="t0ken",
                               default_namespace="team-a", insecure=True, priority=7)  # fmt: skip

    async def make() -> tuple[kopf.AiohttpSession, int | None]:
        made = kopf_session(info, watches=watches, budget=ClientBudget())
        connector = made.aiohttp_session.connector
        limit = None if connector is None else connector.limit
        await made.aiohttp_session.close()
        return made, limit

    made, limit = asyncio.run(make())
    assert limit == watches + KOPF_REQUESTS
    assert made.server == info.server and made.default_namespace == "team-a" and made.priority == 7
    assert made.aiohttp_session.headers["Authorization"] == "Bearer t0ken"


@pytest.mark.parametrize(
    ("env", "trusted"),
    [({}, False), ({"HOME": "/root", "NO_PROXY": "10.0.0.1"}, False), ({"HTTPS_PROXY": "http://proxy:3128"}, True),
     ({"http_proxy": "http://proxy:3128"}, True), ({"NETRC": "/etc/netrc"}, True), ({"HTTPS_PROXY": ""}, False)],
)  # fmt: skip
def test_the_environment_is_consulted_only_when_it_names_a_proxy(env: dict[str, str], trusted: bool) -> None:
    assert environment_proxies(env) is trusted


def test_ignoring_the_environment_keeps_the_connection_pool() -> None:
    async def swap() -> tuple[bool, bool, bool]:
        api = client.ApiClient(client.Configuration())
        before = api.rest_client.pool_manager
        pool = before.connector
        await ignore_environment(api)
        after = api.rest_client.pool_manager
        result = (before.trust_env and not after.trust_env, after.connector is pool, before.closed and not after.closed)
        await api.close()
        return result

    assert asyncio.run(swap()) == (True, True, True)
