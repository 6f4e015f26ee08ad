"""The operator's client-side budget for requests to the API server, shared by its own calls (kube.py) and kopf's
(watches, patches, events, peering): a token bucket like client-go's (`--kube-api-qps`, `--kube-api-burst`).
`qps` tokens come a second and at most `burst` are saved up; every request takes one, or waits for its turn.

Why a client budget at all: an operator that sends as fast as it can turns a burst of jobs into a burst of
requests that API Priority and Fairness then queues or rejects (429) for every client of its priority level;
a budget keeps the operator's share bounded and predictable, and makes its throughput comparable with other
controllers run at the same settings (bench/control_plane_bench.py). `qps` 0 switches it off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp

from . import metrics

# Kueue's shipped manager configuration (clientConnection qps 50, burst 100); Kubeflow's training-operator ships
# 20 and 30. Provisional: the control-plane benchmark at matched budgets (bench/control_plane_bench.py) decides.
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100


@dataclass
class TokenBucket:
    """The bucket's arithmetic, pure: `reserve(now)` takes one token and returns how many seconds its taker waits
    for it (0 when one was saved up). Tokens may go below zero: each taker then waits behind those before it, so
    requests go in the order they asked (first come, first served, no lock)."""

    qps: float
    burst: int
    tokens: float = field(init=False)
    last: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.qps <= 0 or self.burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1 (got qps {self.qps}, burst {self.burst})")
        self.tokens = float(self.burst)

    def reserve(self, now: float) -> float:
        if self.last is not None and now > self.last:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now if self.last is None else max(self.last, now)
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.qps


class ClientBudget:
    """One process's budget: `acquire()` before every request. `qps` <= 0: no limit."""

    def __init__(
        self,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.bucket = TokenBucket(qps, burst) if qps > 0 else None
        self.clock, self.sleep = clock, sleep

    def __str__(self) -> str:
        return "unlimited" if self.bucket is None else f"{self.bucket.qps:g} qps, burst {self.bucket.burst}"

    async def acquire(self) -> None:
        if self.bucket is None:
            return
        wait = self.bucket.reserve(self.clock())
        if wait > 0:
            metrics.CLIENT_WAIT_SECONDS.inc(wait)
            await self.sleep(wait)

    def trace_config(self) -> aiohttp.TraceConfig:
        """An aiohttp hook taking a token before each request of a session (kopf's, which has no hook of its
        own): aiohttp awaits it before the request is sent."""

        async def on_request_start(_session: aiohttp.ClientSession, _ctx: SimpleNamespace, params: Any) -> None:
            metrics.API_REQUESTS.labels("kopf", request_call(params.method, params.url.path, params.url.query)).inc()
            await self.acquire()

        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(on_request_start)
        return trace


def request_call(method: str, path: str, query: Mapping[str, str]) -> str:
    """A request as the request metric names it: its method and resource (`PATCH trainingjobs/status`, `GET pods
    watch`), never an object's name or namespace (a label per object would grow without bound)."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] if rest else "discovery"
    if len(rest) > 2:
        resource += "/" + rest[2]
    watch = " watch" if query.get("watch") in ("true", "1") else ""
    return f"{method} {resource}{watch}"
