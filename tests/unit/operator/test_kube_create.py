"""Pods are created without the client's per-call work (kube.Kube._post, kube._json): against a local HTTP server
answering as the API server does (and refusing a request without the client's credentials or a JSON body), a
created pod reaches the overlay as the JSON sent back, an existing one is no error, a refused one is
RejectedObject with the server's message, and an answer that is no JSON object is ApiUnavailable."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from ringleader_operator.kube import ApiUnavailable, Kube, RejectedObject

from tests.support.localhttp import served


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}  # fmt: skip


async def answer(request: web.Request) -> web.Response:
    if request.headers.get("Authorization") != "Bearer t0ken" or request.content_type != "application/json":
        return web.json_response({"kind": "Status", "message": "Unauthorized", "code": 401}, status=401)
    body = await request.json()
    name = body["metadata"]["name"]
    if name.startswith("exists"):
        return web.json_response({"kind": "Status", "reason": "AlreadyExists", "code": 409}, status=409)
    if name.startswith("bad"):
        return web.json_response({"kind": "Status", "message": "spec.containers[0].image: Required value"}, status=422)
    if name.startswith("garbage"):
        return web.Response(status=201, text="<html>proxy</html>")
    made = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}", "resourceVersion": "7"}}
    return web.json_response(made, status=201)


def create(names: list[str]) -> tuple[int | Exception, list[dict[str, Any]]]:
    wrote: list[dict[str, Any]] = []

    async def main() -> int | Exception:
        app = web.Application()
        app.router.add_post("/api/v1/namespaces/{ns}/pods", answer)
        async with served(app) as port:
            configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
            configuration.api_key = {"BearerToken": "t0ken"}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
            api = client.ApiClient(configuration)
            try:
                return await Kube(api, wrote=wrote.append).create_pods([pod(n) for n in names])
            except (RejectedObject, ApiUnavailable) as e:
                return e
            finally:
                await api.close()

    return asyncio.run(main()), wrote


def test_created_pods_reach_the_overlay_as_the_json_answered_and_existing_ones_are_no_error() -> None:
    created, wrote = create(["a", "b", "exists-c"])
    assert created == 2
    assert sorted(p["metadata"]["uid"] for p in wrote) == ["uid-a", "uid-b"]
    assert all(isinstance(p, dict) and json.dumps(p) for p in wrote)  # plain JSON, no client model


@pytest.mark.parametrize(
    ("names", "error", "says"),
    [
        (["a", "bad-b"], RejectedObject, "creating pod bad-b: spec.containers[0].image: Required value"),
        (["garbage-a"], ApiUnavailable, "creating pod garbage-a: 502 the answer is no JSON object"),
    ],
)
def test_a_refused_or_unreadable_answer_is_a_domain_error(names: list[str], error: type, says: str) -> None:
    result, wrote = create(names)
    assert isinstance(result, error) and str(result).startswith(says), result
    assert [p["metadata"]["name"] for p in wrote] == [n for n in names if n == "a"]  # the good one still made


def test_the_body_arrives_as_built_with_the_clients_credentials() -> None:
    created, wrote = create(["a"])
    assert created == 1
    sent = pod("a")
    assert wrote[0] == {**sent, "metadata": {**sent["metadata"], "uid": "uid-a", "resourceVersion": "7"}}
