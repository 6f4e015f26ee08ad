"""kopf's HTTP session as the login handler makes it (kube.kopf_session): kopf's credentials, a bounded pool."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from ringleader_operator.kube import KOPF_REQUESTS, kopf_session
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
