"""Pods are created without the client's per-call work (kube.Kube._post, kube._json): against a local HTTP server
answering as the API server does (and refusing a request without the client's credentials or a JSON body), a
created pod reaches the overlay as the JSON sent back, an existing one is no error, a refused one is
RejectedObject with the server's message, and an answer that is no JSON object is ApiUnavailable.

Gate releases and deletes (kube.each) likewise: every pod is attempted, at most CREATE_CONCURRENCY at a time,
and the first failure is raised after the others went through (a released pod reaches the overlay)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from ringleader_operator.kube import CREATE_CONCURRENCY, Kube
from ringleader_operator.kube_errors import ApiUnavailable, RejectedObject

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


class Pods:
    """The API server's pod endpoints for releases and deletes: `fail-*` answers 503, `gone-*` 404; it counts
    the requests in flight at once."""

    def __init__(self) -> None:
        self.flight = self.most = 0
        self.patched: list[tuple[str, Any, str]] = []  # name, body, content type
        self.deleted: list[str] = []

    async def _answer(self, name: str) -> web.Response | None:
        self.flight += 1
        self.most = max(self.most, self.flight)
        await asyncio.sleep(0.01)
        self.flight -= 1
        if name.startswith("fail"):
            return web.json_response({"kind": "Status", "message": "etcdserver: request timed out"}, status=503)
        if name.startswith("gone"):
            return web.json_response({"kind": "Status", "reason": "NotFound", "code": 404}, status=404)
        return None

    async def patch(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.patched.append((name, await request.json(), request.content_type))
        refused = await self._answer(name)
        return refused or web.json_response({**pod(name), "spec": {"containers": [], "nodeName": ""}})

    async def delete(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.deleted.append(name)
        return await self._answer(name) or web.json_response(pod(name))


def run(act: Any, pods: Pods | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """`act(kube)` against the local API server; its result or the domain error it raised, and what reached
    the overlay."""
    wrote: list[dict[str, Any]] = []
    pods = pods or Pods()

    async def main() -> Any:
        app = web.Application()
        app.router.add_post("/api/v1/namespaces/{ns}/pods", answer)
        app.router.add_patch("/api/v1/namespaces/{ns}/pods/{name}", pods.patch)
        app.router.add_delete("/api/v1/namespaces/{ns}/pods/{name}", pods.delete)
        async with served(app) as port:
            configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
            configuration.api_key = {"BearerToken": "t0ken"}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
            api = client.ApiClient(configuration)
            try:
                return await act(Kube(api, wrote=wrote.append))
            except (RejectedObject, ApiUnavailable) as e:
                return e
            finally:
                await api.close()

    return asyncio.run(main()), wrote


def create(names: list[str]) -> tuple[int | Exception, list[dict[str, Any]]]:
    return run(lambda kube: kube.create_pods([pod(n) for n in names]))


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


def test_a_failed_release_is_raised_after_every_other_went_through_and_reached_the_overlay() -> None:
    pods = Pods()
    names = ["a", "fail-b", "gone-c", *(f"p{i}" for i in range(100))]
    result, wrote = run(lambda kube: kube.ungate_pods("ns", names, {"a": {"zone": "z1"}}), pods)
    assert isinstance(result, ApiUnavailable) and str(result).startswith("releasing pod fail-b to the scheduler: 503")
    assert sorted(name for name, _, _ in pods.patched) == sorted(names)  # every release attempted
    assert sorted(p["metadata"]["name"] for p in wrote) == sorted(n for n in names if n[:4] not in ("fail", "gone"))
    assert all(isinstance(p, dict) and json.dumps(p) for p in wrote)  # plain JSON, no client model
    assert 1 < pods.most <= CREATE_CONCURRENCY  # concurrent, bounded
    bodies = {name: (body, kind) for name, body, kind in pods.patched}
    gate = {"schedulingGates": [{"$patch": "delete", "name": "ringleader.dev/gang"}]}
    assert bodies["a"] == ({"spec": {**gate, "nodeSelector": {"zone": "z1"}}}, "application/strategic-merge-patch+json")
    assert "nodeSelector" not in bodies["p0"][0]["spec"]


def test_deletes_are_bounded_and_a_failed_one_is_raised_after_the_others() -> None:
    pods = Pods()
    names = ["fail-a", "gone-b", *(f"p{i}" for i in range(100))]
    result, _ = run(lambda kube: kube.delete_pods("ns", names, grace_seconds=0), pods)
    assert isinstance(result, ApiUnavailable) and str(result).startswith("deleting pod fail-a: 503")
    assert sorted(pods.deleted) == sorted(names) and 1 < pods.most <= CREATE_CONCURRENCY
    assert run(lambda kube: kube.delete_pods("ns", ["gone-x", "y"]), Pods())[0] is None
