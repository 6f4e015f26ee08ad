"""The thin Kubernetes I/O layer of the operator (kubernetes_asyncio). No decisions are made here.

Creates are idempotent (409 Conflict counts as success) and run concurrently with a bound; every call has a
timeout. Low-level failures are wrapped in domain errors: `RejectedObject` when the API server refuses an
object as invalid (the job's spec is at fault), `ApiUnavailable` for everything that is worth retrying.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException, rest
from ringleader_api import GROUP, LABEL_JOB, PLURAL, VERSION

from . import kueue, metrics
from .admission import GATE, Cluster
from .kube_errors import ApiUnavailable, KubeError, KueueMissing, RejectedObject, wrapped
from .ratelimit import ClientBudget

API_TIMEOUT = 15  # seconds, every request
CREATE_CONCURRENCY = 32
T = TypeVar("T")


async def _json(call: Awaitable[Any]) -> dict[str, Any]:
    """The answer of a call made with `_preload_content=False`, as the JSON the API server sent: no model built
    and turned back into a dict (py-spy found the client's model code in about a tenth of the samples of a
    2,000-pod start, those creations among them). An error status raises ApiException, as the client does for a
    call that builds models."""
    response = await call
    try:
        data = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        e = ApiException(http_resp=rest.RESTResponse(response, data))
        e.body = data.decode("utf-8", errors="replace")
        raise e
    try:
        body = orjson.loads(data)  # a few times faster than json's: every pod the operator creates comes back
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ApiException(status=502, reason=f"the answer is no JSON object: {data[:100]!r}")
    return body


async def each(items: Sequence[T], act: Callable[[T], Awaitable[None]]) -> None:
    """`act` on every item, CREATE_CONCURRENCY at a time; every item is attempted, then the first KubeError is
    raised, RejectedObject before the others. Workers take the items in turn: a task per item held 10,000 tasks
    at once for a large job's round, each with its frame, for nothing; and a gather of such tasks gave up at the
    first failure while the rest went on unrecorded."""
    errors: list[KubeError] = []
    todo = iter(items)

    async def worker() -> None:
        for item in todo:
            try:
                await act(item)
            except KubeError as e:
                errors.append(e)

    await asyncio.gather(*(worker() for _ in range(min(CREATE_CONCURRENCY, len(items)))))
    if errors:
        raise next((e for e in errors if isinstance(e, RejectedObject)), errors[0])


class Kube:
    def __init__(
        self,
        api: client.ApiClient,
        wrote: Callable[[dict[str, Any]], None] | None = None,
        budget: ClientBudget | None = None,
    ) -> None:
        """`wrote` is told of every pod a create or patch returned (the pod cache's overlay); every call takes
        its token from `budget` (none: no limit)."""
        self.api = api
        self.wrote = wrote
        self.budget = budget or ClientBudget(qps=0)
        self.core = client.CoreV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    async def _call(self, what: str, call: Awaitable[T], absent: int | None = None) -> T | None:
        """Await one API call with domain errors; None when it answers `absent` (404 on reads, 409 on
        creates), which the caller treats as a normal outcome."""
        try:
            await self.budget.acquire()
        except BaseException:  # cancelled while waiting its turn: the request was never sent
            if inspect.iscoroutine(call):
                call.close()
            raise
        # Labelled by what it does, without the object ("creating pod", "updating status"): a bounded label.
        metrics.API_REQUESTS.labels("operator", " ".join(w.split("/")[0] for w in what.split()[:2])).inc()
        try:
            return await call
        except ApiException as e:
            if absent is not None and e.status == absent:
                return None
            raise wrapped(e, what) from e
        except (OSError, TimeoutError, aiohttp.ClientError) as e:
            # aiohttp's ServerDisconnectedError (a pooled connection the API server closed) and payload errors
            # are no OSError; unwrapped, they reached kopf as a handler's crash and waited out its 60 s back-off.
            raise wrapped(e, what) from e

    async def close(self) -> None:
        await self.api.close()

    async def _post(self, path: str, body: Mapping[str, Any]) -> aiohttp.ClientResponse:
        """POST `body` as JSON to the API server's `path` through the client's own session, host, default
        headers, proxy and credentials (a token refreshed as the client refreshes it); the answer unread, as the
        client's calls with `_preload_content=False` return it. The client's generated methods walk the body
        (sanitize_for_serialization) and encode it with json's pure-Python encoder: a tenth of the operator's CPU
        while a 5,000-pod job started (py-spy). orjson encodes it in one C call."""
        api, rest_client = self.api, self.api.rest_client
        headers = {**api.default_headers, "Content-Type": "application/json", "Accept": "application/json"}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        extra: dict[str, Any] = {}
        if rest_client.proxy:
            extra["proxy"] = rest_client.proxy
        if rest_client.proxy_headers:
            extra["proxy_headers"] = rest_client.proxy_headers
        if rest_client.server_hostname:
            extra["server_hostname"] = rest_client.server_hostname
        session: aiohttp.ClientSession = rest_client.pool_manager
        return await session.request(
            "POST", api.configuration.host + path, data=orjson.dumps(body), headers=headers,
            timeout=aiohttp.ClientTimeout(total=API_TIMEOUT), **extra,
        )  # fmt: skip

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = await self._call(
            f"reading TrainingJob {namespace}/{name}",
            self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=API_TIMEOUT
            ),
            absent=404,
        )
        return None if obj is None else dict(obj)

    async def list_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        pods = await self._call(
            f"listing pods of {namespace}/{job}",
            self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB}={job}", _request_timeout=API_TIMEOUT),
        )
        return [self.api.sanitize_for_serialization(p) for p in pods.items] if pods else []

    async def read_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        svc = await self._call(
            f"reading service {namespace}/{name}",
            self.core.read_namespaced_service(name, namespace, _request_timeout=API_TIMEOUT),
            absent=404,
        )
        return None if svc is None else dict(self.api.sanitize_for_serialization(svc))

    async def create_if_absent(self, body: dict[str, Any]) -> None:
        """Create one of the objects a job owns besides its pods (its Service, token Secret, NetworkPolicy, its
        coordinator's Deployment); one that exists already is left as it is (the operator may only create Secrets,
        never read them)."""
        meta, kind = body["metadata"], body["kind"]
        create = {
            "Service": self.core.create_namespaced_service,
            "Secret": self.core.create_namespaced_secret,
            "NetworkPolicy": self.networking.create_namespaced_network_policy,
            "Deployment": self.apps.create_namespaced_deployment,
        }[kind]
        await self._call(
            f"creating {kind} {meta['name']}", create(meta["namespace"], body, _request_timeout=API_TIMEOUT), absent=409
        )

    async def create_pods(self, pods: list[dict[str, Any]]) -> int:
        """Create all pods concurrently (bounded). Returns how many were new. Raises the first failure after
        every create has been attempted, RejectedObject before ApiUnavailable."""
        created = 0

        async def create(pod: dict[str, Any]) -> None:
            nonlocal created
            meta = pod["metadata"]
            call = self._post(f"/api/v1/namespaces/{quote(meta['namespace'], safe='')}/pods", pod)
            made = await self._call(f"creating pod {meta['name']}", _json(call), absent=409)
            if made is not None:
                created += 1
                if self.wrote is not None:
                    self.wrote(made)

        await each(pods, create)
        return created

    async def delete_pods(self, namespace: str, names: list[str], grace_seconds: int | None = None) -> None:
        """Delete the pods (gone already is fine); `grace_seconds=0` removes them without waiting for a kubelet.
        Concurrently (bounded); raises the first failure after every delete has been attempted."""

        async def delete(name: str) -> None:
            await self._call(
                f"deleting pod {name}",
                self.core.delete_namespaced_pod(
                    name, namespace, grace_period_seconds=grace_seconds, _request_timeout=API_TIMEOUT
                ),
                absent=404,
            )

        await each(names, delete)

    async def nodes(self) -> list[dict[str, Any]]:
        nodes = await self._call("listing nodes", self.core.list_node(_request_timeout=API_TIMEOUT))
        return [self.api.sanitize_for_serialization(n) for n in nodes.items] if nodes else []

    async def cluster(self) -> Cluster:
        """Every Node and every pod not yet finished, cluster-wide: what gang admission weighs."""
        nodes = await self.nodes()
        pods = await self._call(
            "listing pods of all namespaces",
            self.core.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed", _request_timeout=API_TIMEOUT
            ),
        )
        return Cluster(nodes, [self.api.sanitize_for_serialization(p) for p in pods.items] if pods else [])

    async def ungate_pods(
        self, namespace: str, names: list[str], pins: dict[str, dict[str, str]] | None = None
    ) -> None:
        """Remove the gang gate from the pods (other gates stay); a pod gone meanwhile is fine. `pins`: labels
        added to a pod's nodeSelector in the same write (allowed while a pod is gated: a topology domain).
        Concurrently (bounded); every released pod reaches the overlay, and the first failure is raised after
        every release has been attempted (one timed-out patch does not leave the others unrecorded)."""
        pins = pins or {}

        async def release(name: str) -> None:
            spec: dict[str, Any] = {"schedulingGates": [{"$patch": "delete", "name": GATE}]}
            if name in pins:
                spec["nodeSelector"] = pins[name]
            call = self.core.patch_namespaced_pod(
                name, namespace, {"spec": spec}, _request_timeout=API_TIMEOUT, _preload_content=False,
                _content_type="application/strategic-merge-patch+json",
            )  # fmt: skip
            made = await self._call(f"releasing pod {name} to the scheduler", _json(call), absent=404)
            if made is not None and self.wrote is not None:
                self.wrote(made)

        await each(names, release)

    async def _create_if_served(self, body: dict[str, Any], missing: KubeError) -> dict[str, Any] | None:
        """Create a namespaced object of an API the cluster may not serve (its plural: the kind's, lower case, plus
        "s"); None when one of that name exists already, `missing` raised when the API is not served (404)."""
        meta, kind = body["metadata"], body["kind"]
        group, version = body["apiVersion"].split("/")
        try:
            made = await self._call(
                f"creating {kind} {meta['name']}",
                self.custom.create_namespaced_custom_object(
                    group, version, meta["namespace"], f"{kind.lower()}s", body, _request_timeout=API_TIMEOUT
                ),
                absent=409,
            )
        except ApiUnavailable as e:
            if e.status == 404:
                raise missing from e
            raise
        return None if made is None else dict(made)

    async def create_scheduling_object(self, body: dict[str, Any]) -> None:
        """Create a gang scheduler's PodGroup, or the Workload API's Workload or PodGroup (there already is fine).
        RejectedObject when the cluster does not serve that API (the scheduler is not installed)."""
        missing = RejectedObject(
            f"the job's gang needs {body['kind']}s ({body['apiVersion']}), which this cluster does not serve: "
            "install that scheduler, or use the default scheduler (Ringleader's own gang admission)"
        )
        await self._create_if_served(body, missing)

    async def delete_deployment(self, namespace: str, name: str) -> None:
        """Delete a job's coordinator's Deployment (its pod with it, in the background); gone already is fine."""
        await self._call(
            f"deleting Deployment {namespace}/{name}",
            self.apps.delete_namespaced_deployment(
                name, namespace, body=client.V1DeleteOptions(propagation_policy="Background"),
                _request_timeout=API_TIMEOUT,
            ),
            absent=404,
        )  # fmt: skip

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Delete the TrainingJob with this uid (not a newer one of the same name); its pods and Service go
        with it (background propagation). Gone already is fine."""
        await self._call(
            f"deleting TrainingJob {namespace}/{name}",
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name,
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid),
                                            propagation_policy="Background"),
                _request_timeout=API_TIMEOUT,
            ),
            absent=404,
        )  # fmt: skip

    async def serves(self, group: str, version: str, *plurals: str) -> bool:
        """Whether the API server serves every one of `plurals` in group/version (API discovery)."""
        found = await self._call(
            f"discovering {group}/{version}",
            self.custom.get_api_resources(group, version, _request_timeout=API_TIMEOUT),
            absent=404,
        )
        served = {r.name for r in (found.resources or [])} if found is not None else set()
        return set(plurals) <= served

    async def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Kueue Workload, None when it does not exist (or Kueue is not installed)."""
        obj = await self._call(
            f"reading Workload {namespace}/{name}",
            self.custom.get_namespaced_custom_object(
                kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, _request_timeout=API_TIMEOUT
            ),
            absent=404,
        )
        return None if obj is None else dict(obj)

    async def create_workload(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create a job's Workload; None when one of that name exists already. KueueMissing when the cluster does
        not serve Kueue's Workload API."""
        missing = KueueMissing(
            f"the cluster does not serve Kueue's Workload API ({kueue.API_VERSION}): install Kueue, or remove the "
            f"job's label {kueue.QUEUE_LABEL}"
        )
        return await self._create_if_served(body, missing)

    async def delete_workload(self, namespace: str, name: str, uid: str) -> None:
        """Delete the Workload with this uid (gone already is fine)."""
        await self._call(
            f"deleting Workload {namespace}/{name}",
            self.custom.delete_namespaced_custom_object(
                kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name,
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                _request_timeout=API_TIMEOUT,
            ),
            absent=404,
        )  # fmt: skip

    async def patch_workload(
        self, namespace: str, name: str, body: dict[str, Any], resource_version: str, status: bool = False
    ) -> dict[str, Any] | None:
        """Merge `body` into the Workload (its status subresource with `status`) if it has not changed since
        `resource_version` (else Conflict); the Workload as written, None when it is gone."""
        patch = {**body, "metadata": {"resourceVersion": resource_version}}
        call = (
            self.custom.patch_namespaced_custom_object_status if status else self.custom.patch_namespaced_custom_object
        )
        written = await self._call(
            f"updating Workload {namespace}/{name}",
            call(
                kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, patch,
                _request_timeout=API_TIMEOUT, _content_type="application/merge-patch+json",
            ),
            absent=404,
        )  # fmt: skip
        return dict(written) if isinstance(written, dict) else None

    async def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        """A cluster-scoped object (a ResourceFlavor, a priority class); None when it does not exist."""
        obj = await self._call(
            f"reading {plural}/{name}",
            self.custom.get_cluster_custom_object(group, version, plural, name, _request_timeout=API_TIMEOUT),
            absent=404,
        )
        return None if obj is None else dict(obj)

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any] | None:
        """Merge `status` into the job's; returns the job as written (None: it is gone). With `resource_version`
        the write happens only if the job has not changed since it was read (else Conflict): a decision made on
        an old reading is never written."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        written = await self._call(
            f"updating status of {namespace}/{name}",
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body,
                _request_timeout=API_TIMEOUT,
                _content_type="application/merge-patch+json",
            ),
            absent=404,
        )
        return dict(written) if isinstance(written, dict) else None
