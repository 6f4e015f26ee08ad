"""Container probes as the kubelet runs them: startup, readiness and liveness, by exec, httpGet or tcpSocket.

`parse_probe` is pure (named ports resolved, Kubernetes defaults applied); `check` runs one attempt with the
probe's timeout. HTTP and TCP probes go from the node to the pod's IP, as on a real node; exec probes run the
command inside the pod's network namespace with the container's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp


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


async def check(probe: Probe, pod_ip: str, netns: str | None, env: Mapping[str, str]) -> bool:
    """One attempt; True on success. Never raises for a failing target, and never outlives the timeout."""
    host = probe.host or pod_ip or "127.0.0.1"
    try:
        if probe.kind == "tcp":
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, probe.port), probe.timeout)
            writer.close()
            return True
        if probe.kind == "http":
            url = f"{probe.scheme.lower()}://{host}:{probe.port}{probe.path}"
            timeout = aiohttp.ClientTimeout(total=probe.timeout)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(url, headers=dict(probe.headers), ssl=False) as resp,
            ):
                return 200 <= resp.status < 400
        argv = [*(["ip", "netns", "exec", netns] if netns else []), *probe.command]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return await asyncio.wait_for(proc.wait(), probe.timeout) == 0
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return False
    except (OSError, TimeoutError, aiohttp.ClientError):
        return False
