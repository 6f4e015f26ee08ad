"""The process node's one client of the API server: every call its agent and pod workers make, each with a
timeout, each failure raised as one error type.

A call fails in one of two ways: the API server answered with an HTTP error (`NodeApiError.status` holds it), or
the call failed on the way (connection refused, reset or closed, timed out: `status` is None). The callers
decide per status (404: the object is gone; 409: someone else changed it); on None they retry, as the operator's
I/O layer (ringleader_operator.kube) counts those as the API being unavailable.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

API_TIMEOUT = 10  # seconds, every call
LIST_TIMEOUT = API_TIMEOUT * 3  # a list of every pod or endpoint slice may be long
# aiohttp's ServerDisconnectedError and payload errors are no OSError.
NETWORK_ERRORS = (OSError, TimeoutError, aiohttp.ClientError)
MERGE_PATCH = "application/merge-patch+json"

T = TypeVar("T")


class NodeApiError(Exception):
    """A failed call: `status` is the HTTP status, None when the call failed before an answer came."""

    def __init__(self, call: str, status: int | None, reason: str, message: str = "") -> None:
        self.call, self.status, self.reason, self.message = call, status, reason, message
        detail = f"{reason}: {message}" if message else reason
        super().__init__(f"{call}: {detail}")

    @property
    def not_found(self) -> bool:
        return self.status == 404


def _api_message(e: ApiException) -> str:
    """The `message` of the API server's Status body (bounded), or the start of the body."""
    try:
        return str(json.loads(e.body).get("message", ""))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(e.body)[:200]


async def _call(what: str, call: Awaitable[T]) -> T:
    """Await `call`, raising NodeApiError for any failure of the API server or of the way to it."""
    try:
        return await call
    except ApiException as e:
        raise NodeApiError(what, e.status, str(e.reason), _api_message(e)) from e
    except NETWORK_ERRORS as e:
        raise NodeApiError(what, None, type(e).__name__, str(e)) from e


async def _unless_absent(what: str, call: Awaitable[T]) -> T | None:
    """`_call`, with None for an object that does not exist (404)."""
    try:
        return await _call(what, call)
    except NodeApiError as e:
        if e.not_found:
            return None
        raise


def _decoded(data: dict[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (data or {}).items()}


@dataclass
class NodeApi:
    """The calls, on the clients of one ApiClient (fakes may stand in for each in tests)."""

    core: Any  # client.CoreV1Api
    coord: Any  # client.CoordinationV1Api
    discovery: Any  # client.DiscoveryV1Api
    api_client: Any  # client.ApiClient

    @classmethod
    def of(cls, api_client: client.ApiClient) -> NodeApi:
        return cls(
            client.CoreV1Api(api_client),
            client.CoordinationV1Api(api_client),
            client.DiscoveryV1Api(api_client),
            api_client,
        )

    # ---- what a pod refers to ----------------------------------------------------------------------------
    async def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The config map's data; None when it does not exist."""
        read = self.core.read_namespaced_config_map(name, namespace, _request_timeout=API_TIMEOUT)
        cm = await _unless_absent(f"reading config map {name}", read)
        return None if cm is None else dict(cm.data or {})

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The secret's data, decoded; None when it does not exist."""
        read = self.core.read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT)
        secret = await _unless_absent(f"reading secret {name}", read)
        return None if secret is None else _decoded(secret.data)

    async def service_account_token(self, namespace: str, account: str, body: dict[str, Any]) -> str:
        resp = await _call(
            f"requesting a token of service account {account}",
            self.core.create_namespaced_service_account_token(account, namespace, body, _request_timeout=API_TIMEOUT),
        )
        return str(resp.status.token)

    # ---- pods --------------------------------------------------------------------------------------------
    async def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await _call(
            "patching the pod's status",
            self.core.patch_namespaced_pod_status(
                name, namespace, {"status": status}, _request_timeout=API_TIMEOUT, _content_type=MERGE_PATCH
            ),
        )

    async def remove_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete this pod's object now (grace 0), as a kubelet does once nothing of it runs."""
        await _call(
            "deleting the pod",
            self.core.delete_namespaced_pod(
                name,
                namespace,
                # With a body the API server reads DeleteOptions from it, not from query parameters.
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                _request_timeout=API_TIMEOUT,
            ),
        )

    # ---- the node ----------------------------------------------------------------------------------------
    async def register_node(self, body: dict[str, Any]) -> bool:
        """Create the Node; False when it exists already."""
        try:
            await _call("registering the node", self.core.create_node(body, _request_timeout=API_TIMEOUT))
        except NodeApiError as e:
            if e.status == 409:
                return False
            raise
        return True

    async def patch_node_status(self, name: str, status: dict[str, Any]) -> None:
        await _call(
            "patching the node's status",
            self.core.patch_node_status(name, {"status": status}, _request_timeout=API_TIMEOUT),
        )

    async def renew_lease(self, name: str, spec: dict[str, Any]) -> None:
        """Patch the node's lease in kube-node-lease, creating it (owned by the Node) when missing."""
        namespace = "kube-node-lease"
        try:
            await _call(
                "renewing the node's lease",
                self.coord.patch_namespaced_lease(name, namespace, {"spec": spec}, _request_timeout=API_TIMEOUT),
            )
            return
        except NodeApiError as e:
            if not e.not_found:
                raise
        node = await _call("reading the node", self.core.read_node(name, _request_timeout=API_TIMEOUT))
        owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}
        meta = {"name": name, "ownerReferences": [owner]}
        body = {"metadata": meta, "spec": {**spec, "acquireTime": spec["renewTime"]}}
        await _call(
            "creating the node's lease",
            self.coord.create_namespaced_lease(namespace, body, _request_timeout=API_TIMEOUT),
        )

    # ---- lists and watches -------------------------------------------------------------------------------
    def pod_lister(self) -> Callable[..., Awaitable[Any]]:
        lister: Callable[..., Awaitable[Any]] = self.core.list_pod_for_all_namespaces
        return lister

    def slice_lister(self) -> Callable[..., Awaitable[Any]]:
        lister: Callable[..., Awaitable[Any]] = self.discovery.list_endpoint_slice_for_all_namespaces
        return lister

    def plain(self, obj: Any) -> dict[str, Any]:
        """A listed or watched object as the dict the API server sent."""
        plain: dict[str, Any] = self.api_client.sanitize_for_serialization(obj)
        return plain

    async def close(self) -> None:
        await self.api_client.close()
