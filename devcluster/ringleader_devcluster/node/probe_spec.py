"""Container probes as declared: `parse_probe` reads a container's startup, readiness or liveness probe
(exec, httpGet or tcpSocket) with named ports resolved and Kubernetes' defaults applied. Pure; `probes.check`
runs one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Probe:
    kind: str  # exec | http | tcp
    command: tuple[str, ...] = ()
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    host: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


class InvalidProbe(ValueError):
    pass


def _port(value: Any, container: Mapping[str, Any]) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    for p in container.get("ports") or []:
        if p.get("name") == value:
            return int(p["containerPort"])
    raise InvalidProbe(f"probe port {value!r} names no port of container {container.get('name')!r}")


def parse_probe(spec: Mapping[str, Any] | None, container: Mapping[str, Any]) -> Probe | None:
    """A container's probe definition with Kubernetes defaults (period 10s, timeout 1s, thresholds 1/3)."""
    if not spec:
        return None
    timing = Probe(
        kind="",
        initial_delay=float(spec.get("initialDelaySeconds", 0)),
        period=float(spec.get("periodSeconds", 10)),
        timeout=float(spec.get("timeoutSeconds", 1)),
        success_threshold=int(spec.get("successThreshold", 1)),
        failure_threshold=int(spec.get("failureThreshold", 3)),
    )
    if "exec" in spec:
        return replace(timing, kind="exec", command=tuple(spec["exec"].get("command") or []))
    if "httpGet" in spec:
        h = spec["httpGet"]
        return replace(
            timing,
            kind="http",
            port=_port(h["port"], container),
            path=h.get("path", "/"),
            scheme=h.get("scheme", "HTTP"),
            host=h.get("host", ""),
            headers={x["name"]: x["value"] for x in h.get("httpHeaders") or []},
        )
    if "tcpSocket" in spec:
        t = spec["tcpSocket"]
        return replace(timing, kind="tcp", port=_port(t["port"], container), host=t.get("host", ""))
    raise InvalidProbe(f"probe of container {container.get('name')!r} has no exec, httpGet or tcpSocket handler")
