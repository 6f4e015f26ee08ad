"""The API server's refusals as the one-line errors the CLI and SDK give (`api_error`)."""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

from kubernetes.client.exceptions import ApiException

from .errors import InvalidSpec, NotFound, RingleaderError


def api_error(e: ApiException, what: str, namespace: str = "") -> RingleaderError:
    """The API server's refusal as one line: 404 names the object, 422 the fields."""
    body: dict[str, Any] = {}
    with suppress(ValueError):
        body = json.loads(e.body or "{}")
    message = body.get("message") or e.reason or f"HTTP {e.status}"
    if e.status == 404:
        where = f" in namespace {namespace!r}" if namespace else ""
        return NotFound(f"{what} not found{where}")
    if e.status == 422:
        causes = (body.get("details") or {}).get("causes") or []
        fields = "; ".join(cause(c) for c in causes)
        return InvalidSpec(f"{what} is invalid: {fields or first_line(message)}")
    if e.status == 409:
        return RingleaderError(f"{what} already exists: choose another --name")
    if e.status in (401, 403):
        return RingleaderError(f"{what}: {first_line(message)}")
    return RingleaderError(f"{what}: HTTP {e.status}: {first_line(message)}")


def cause(cause: dict[str, Any]) -> str:
    """One refused field: `spec.workers.replicas: Invalid value: 0: ...` (a rule on the whole object has none)."""
    field, message = cause.get("field") or "", first_line(cause.get("message") or "")
    message = message.removeprefix('Invalid value: "object": ')
    return f"{field}: {message}" if field and field != "<nil>" else message


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""
