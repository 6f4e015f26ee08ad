"""An aiohttp application served on a free loopback port, for unit tests that need a real HTTP peer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[int]:
    """Serve `app` on 127.0.0.1 at a free port (yielded) until the block ends."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
