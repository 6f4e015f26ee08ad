"""How the I/O layer (kube.Kube._call) turns a failed request into the domain errors its callers handle."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, ApiException
from ringleader_operator.kube import Kube
from ringleader_operator.kube_errors import ApiUnavailable, Conflict, RejectedObject


def _api(status: int) -> ApiException:
    return ApiException(status=status, reason="x")


@pytest.mark.parametrize(
    ("raised", "absent", "want"),
    [
        (_api(404), 404, None),  # a read of something gone: a normal outcome
        (_api(409), 409, None),  # a create of something there: a normal outcome
        (_api(409), None, Conflict),  # a write on an outdated read
        (_api(422), None, RejectedObject),
        (_api(403), None, RejectedObject),
        (_api(404), None, ApiUnavailable),
        (_api(500), None, ApiUnavailable),
        (_api(429), None, ApiUnavailable),
        (TimeoutError(), None, ApiUnavailable),
        (ConnectionResetError(), None, ApiUnavailable),
        (aiohttp.ServerDisconnectedError(), None, ApiUnavailable),  # a pooled connection the server closed
        (aiohttp.ClientPayloadError("cut"), None, ApiUnavailable),
    ],
)
def test_a_failed_request_becomes_a_domain_error(raised: Exception, absent: int | None, want: type | None) -> None:
    async def call() -> Any:
        raise raised

    async def run() -> Any:
        async with ApiClient() as api:
            return await Kube(api)._call("reading a thing", call(), absent=absent)

    if want is None:
        assert asyncio.run(run()) is None
    else:
        with pytest.raises(want, match="reading a thing"):
            asyncio.run(run())
