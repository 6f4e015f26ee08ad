"""What the reconciler and the progress scraper ask of the Kubernetes API: the operations, as Protocols that
`kube.Kube` implements and the tests' fakes satisfy. Errors are `kube.KubeError`s (Conflict, RejectedObject,
ApiUnavailable), each carrying the HTTP status."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .admission import Cluster


class StatusApi(Protocol):
    """What the progress scraper needs: a status patch (answering the job as written, None when it is gone)."""

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any] | None: ...


class KubeApi(StatusApi, Protocol):
    """Everything a reconcile round reads and writes."""

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def list_pods(self, namespace: str, job: str) -> list[dict[str, Any]]: ...

    async def read_service(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create_if_absent(self, body: dict[str, Any]) -> None: ...

    async def create_pods(self, pods: list[dict[str, Any]]) -> int: ...

    async def delete_pods(self, namespace: str, names: list[str], grace_seconds: int | None = None) -> None: ...

    async def ungate_pods(
        self, namespace: str, names: list[str], pins: dict[str, dict[str, str]] | None = None
    ) -> None: ...

    async def create_scheduling_object(self, body: dict[str, Any]) -> None: ...

    async def delete_deployment(self, namespace: str, name: str) -> None: ...
    async def delete_job(self, namespace: str, name: str, uid: str) -> None: ...

    async def nodes(self) -> list[dict[str, Any]]: ...

    async def cluster(self) -> Cluster: ...

    async def serves(self, group: str, version: str, *plurals: str) -> bool: ...

    async def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create_workload(self, body: dict[str, Any]) -> dict[str, Any] | None: ...

    async def delete_workload(self, namespace: str, name: str, uid: str) -> None: ...

    async def patch_workload(
        self, namespace: str, name: str, body: dict[str, Any], resource_version: str, status: bool = False
    ) -> dict[str, Any] | None: ...

    async def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None: ...

    async def close(self) -> None: ...


# Emits a Kubernetes Event about an object: (the object, type Normal|Warning, reason, message).
EventSink = Callable[[dict[str, Any], str, str, str], None]
