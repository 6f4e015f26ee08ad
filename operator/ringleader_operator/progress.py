"""Training progress from rank 0's Prometheus metrics, for `status.progress` and `kubectl get tj`.

The trainer's side of the contract (docs/env-contract.md): worker 0 serves Prometheus text on
RINGLEADER_METRICS_PORT at /metrics with the gauges below. `parse` is pure; `scrape` does one bounded GET.
"""

from __future__ import annotations

import math

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .api import Progress

STEP = "ringleader_trainer_step"
LOSS = "ringleader_trainer_loss"
SAMPLES_PER_SECOND = "ringleader_trainer_samples_per_second"
SCRAPE_TIMEOUT = 2.0  # seconds


class ScrapeError(Exception):
    pass


def parse(text: str, now: str) -> Progress | None:
    """Progress from a metrics page, or None when it has no step gauge. NaN and infinities are dropped."""
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in (STEP, LOSS, SAMPLES_PER_SECOND) and math.isfinite(sample.value):
                    values[sample.name] = sample.value
    except ValueError as e:
        raise ScrapeError(f"unparsable metrics: {e}") from e
    if STEP not in values:
        return None
    return Progress(
        step=int(values[STEP]),
        loss=round(values[LOSS], 6) if LOSS in values else None,
        samples_per_second=round(values[SAMPLES_PER_SECOND], 2) if SAMPLES_PER_SECOND in values else None,
        updated_at=now,
    )


async def scrape(session: aiohttp.ClientSession, host: str, port: int, now: str) -> Progress | None:
    url = f"http://{host}:{port}/metrics"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT)) as resp:
            if resp.status != 200:
                raise ScrapeError(f"{url}: HTTP {resp.status}")
            return parse(await resp.text(), now)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise ScrapeError(f"{url}: {e or type(e).__name__}") from e
