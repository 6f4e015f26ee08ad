"""The slice of the kubelet's HTTPS API the API server calls, plus the route pods use to reach the API server.

- `GET /containerLogs/{namespace}/{pod}/{container}` (follow, tailLines, limitBytes, previous) makes
  `kubectl logs` work: the API server proxies to the node's InternalIP and kubeletEndpoint port.
- `GET /healthz`.
- `ApiRelay`: a TCP relay from the bridge gateway to the API server on loopback, so pods reach the
  `kubernetes` service (KUBERNETES_SERVICE_HOST) the way kube-proxy would route it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from aiohttp import web

log = logging.getLogger(__name__)

FOLLOW_POLL = 0.2  # seconds between reads while following a running container's log


@dataclass(frozen=True)
class LogSource:
    """Where a container's log lives and whether it may still grow."""

    path: Path
    running: Callable[[], bool]


LogResolver = Callable[[str, str, str, bool], LogSource | None]


def tail_bytes(data: bytes, lines: int | None, limit: int | None) -> bytes:
    """The last `lines` lines, then at most `limit` bytes from the start of what is left (kubelet order)."""
    if lines is not None:
        parts = data.splitlines(keepends=True)
        data = b"".join(parts[-lines:]) if lines > 0 else b""
    if limit is not None:
        data = data[:limit]
    return data


def _open(path: Path) -> BinaryIO | None:
    try:
        return path.open("rb")
    except FileNotFoundError:
        return None


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError as e:
        raise web.HTTPBadRequest(text=f"{name}: not an integer: {raw!r}") from e


def make_app(resolve: LogResolver) -> web.Application:
    async def container_logs(request: web.Request) -> web.StreamResponse:
        ns, pod, container = request.match_info["ns"], request.match_info["pod"], request.match_info["container"]
        previous = request.query.get("previous") in ("true", "1")
        source = resolve(ns, pod, container, previous)
        if source is None:
            what = "previous terminated container" if previous else "container"
            raise web.HTTPNotFound(text=f'{what} "{container}" in pod "{pod}" not found')
        # The file stays open while following, as `tail -f` keeps it: a pod deleted right after its container
        # ended (the operator replaces a failed rank at once) takes the path away, not what was written to it.
        log_file = _open(source.path)
        try:
            data = log_file.read() if log_file is not None else b""
            limit = _int(request, "limitBytes")
            first = tail_bytes(data, _int(request, "tailLines"), limit)
            follow = request.query.get("follow") in ("true", "1") and not previous
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            await resp.write(first)
            sent = len(first)
            while follow and (limit is None or sent < limit):
                # Whether it still runs is asked before the read: a container that writes its last line and
                # exits between a read and the question would otherwise lose that line.
                ended = not source.running()
                log_file = log_file or _open(source.path)
                chunk = log_file.read() if log_file is not None else b""
                if chunk:
                    if limit is not None:
                        chunk = chunk[: limit - sent]
                    sent += len(chunk)
                    await resp.write(chunk)
                elif ended:
                    break
                else:
                    await asyncio.sleep(FOLLOW_POLL)
        finally:
            if log_file is not None:
                log_file.close()
        await resp.write_eof()
        return resp

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/containerLogs/{ns}/{pod}/{container}", container_logs)
    app.router.add_get("/healthz", healthz)
    return app


async def serve_kubelet_api(resolve: LogResolver, host: str, port: int, cert: Path, key: Path) -> web.AppRunner:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    runner = web.AppRunner(make_app(resolve), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ctx).start()
    return runner


class ApiRelay:
    """Accepts on (host, port) and splices each connection to (target_host, target_port)."""

    def __init__(self, host: str, port: int, target_host: str, target_port: int) -> None:
        self.host, self.port = host, port
        self.target = (target_host, target_port)
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.host, self.port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 10)
        except (OSError, TimeoutError) as e:
            log.warning("api relay: cannot reach %s:%s: %s", *self.target, e)
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        if self.server:
            self.server.close()
            await self.server.wait_closed()
