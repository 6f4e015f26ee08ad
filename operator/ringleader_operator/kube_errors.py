"""What a call to the API server can fail with, as the operator's rounds tell the cases apart: retry later
(`ApiUnavailable`), read again and decide again (`Conflict`), or fail the job (`RejectedObject`, `KueueMissing`)."""

from __future__ import annotations

import json

from kubernetes_asyncio.client import ApiException


class KubeError(Exception):
    """An API call failed. `status`: the HTTP status the API server answered, None when no answer came (the
    network, a timeout)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ApiUnavailable(KubeError):
    """A request failed in a way worth retrying (network, 5xx, 429, timeouts)."""


class Conflict(KubeError):
    """A write based on an outdated read: read again and decide again."""


class RejectedObject(KubeError):
    """The API server refused an object as invalid or forbidden; retrying the same object cannot help."""


class KueueMissing(KubeError):
    """A job asks for a Kueue queue, and the cluster does not serve Kueue's API."""


def _message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body).get("message") or e.reason)
    except (TypeError, ValueError):
        return str(e.reason)


def wrapped(e: Exception, what: str) -> KubeError:
    """The domain error for a call (`what`) that failed with `e`: a 409 is a Conflict, a 400, 403 or 422 the
    object's fault, anything else (no answer, 5xx, 429) worth retrying."""
    if not isinstance(e, ApiException):
        return ApiUnavailable(f"{what}: {e}")
    if e.status == 409:
        return Conflict(f"{what}: {_message(e)}", e.status)
    if e.status in (400, 403, 422):
        return RejectedObject(f"{what}: {_message(e)}", e.status)
    return ApiUnavailable(f"{what}: {e.status} {_message(e)}", e.status)
