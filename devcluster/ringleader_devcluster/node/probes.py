"""Container probes as the kubelet runs them: startup, readiness and liveness, by exec, httpGet or tcpSocket.

`probe_spec.parse_probe` reads them (pure); `check` runs one attempt with the probe's timeout. HTTP and TCP
probes go from the node to the pod's IP, as on a real node; exec probes run the command inside the pod's
network namespace with the container's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import aiohttp

from .probe_spec import Probe


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
