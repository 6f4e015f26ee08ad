"""Training progress from the ranks' Prometheus metrics: worker 0's for `status.progress` and `kubectl get tj`,
every rank's place (its step and exchange stamps) for finding the rank that stopped a stalled job (stalls.py).

The trainer's side of the contract (docs/env-contract.md): every rank serves Prometheus text on
RINGLEADER_METRICS_PORT at /metrics with the gauges below. `parse` and `parse_beat` are pure; `fetch` does one
bounded GET.

The page comes from a user's pod and is read as hostile: no redirects, no cookies, no compression, at most
MAX_BYTES read within SCRAPE_TIMEOUT, only the lines of its gauges parsed (a bounded scan of the rest),
and values that are not finite or not in range dropped. Whatever goes wrong is a ScrapeError, never more.
"""

from __future__ import annotations

import errno
import itertools
import math
from datetime import UTC, datetime

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from ringleader_api import Progress

from .estimates import with_estimates
from .stalls import Beat

STEP = "ringleader_trainer_step"
LOSS = "ringleader_trainer_loss"
SAMPLES_PER_SECOND = "ringleader_trainer_samples_per_second"
LAST_CHECKPOINT_STEP = "ringleader_trainer_last_checkpoint_step"
CHECKPOINT_SECONDS = "ringleader_trainer_checkpoint_seconds"
STEP_SECONDS = "ringleader_trainer_step_seconds"
TOTAL_STEPS = "ringleader_trainer_total_steps"
RANK_STEP = "ringleader_trainer_rank_step"
EXCHANGE_STARTED = "ringleader_trainer_exchange_started_timestamp_seconds"
EXCHANGE_DONE = "ringleader_trainer_exchange_done_timestamp_seconds"
COMPUTE_SECONDS = "ringleader_trainer_compute_seconds"
STEP_TIMESTAMP = "ringleader_trainer_rank_step_timestamp_seconds"
COLLECTIVES_ENTERED = "ringleader_trainer_collectives_entered"  # labelled by process group
COLLECTIVES_COMPLETED = "ringleader_trainer_collectives_completed"
RESUMED_STEP = "ringleader_trainer_resumed_step"
RESUMED_TIMESTAMP = "ringleader_trainer_resumed_timestamp_seconds"
GAUGES = (
    STEP, LOSS, SAMPLES_PER_SECOND, LAST_CHECKPOINT_STEP, CHECKPOINT_SECONDS, STEP_SECONDS, TOTAL_STEPS,
    RANK_STEP, EXCHANGE_STARTED, EXCHANGE_DONE, COMPUTE_SECONDS, STEP_TIMESTAMP, COLLECTIVES_ENTERED,
    COLLECTIVES_COMPLETED, RESUMED_STEP, RESUMED_TIMESTAMP,
)  # fmt: skip
MAX_GROUPS = 16  # process groups read from one page (the trainer shows no more)
MAX_GROUP_NAME = 64
SCRAPE_TIMEOUT = 2.0  # seconds, for the whole request: connecting, headers and body
# Seconds to connect, within SCRAPE_TIMEOUT: a kernel answers a SYN whatever its process does, so a connection not
# made by then says the address cannot be reached (the network), not that the trainer hangs (stalls.judge).
CONNECT_TIMEOUT = 1.5
# Connection errors that say the address was not reached at all (no route), as against refused (the pod answered).
UNREACHABLE_ERRNOS = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ETIMEDOUT})
MAX_BYTES = 256 * 1024  # the trainer's page is about 5 KiB
MAX_LINES = 64  # lines of the gauges parsed at most
CHUNK = 16 * 1024
MAX_STEP = 2**53  # beyond any real run; a larger step is a pod's lie
MAX_TIMESTAMP = 10.0**11  # Unix seconds, the year 5138: a larger stamp is a pod's lie
# What each gauge may hold: values outside are dropped.
IN_RANGE = {
    STEP: lambda v: 0 <= v <= MAX_STEP,
    LOSS: lambda v: abs(v) <= 1e30,
    SAMPLES_PER_SECOND: lambda v: 0 <= v <= 1e12,
    # 0 is what a gauge holds before it is first set: no checkpoint yet, no step timed yet.
    LAST_CHECKPOINT_STEP: lambda v: 0 < v <= MAX_STEP,
    CHECKPOINT_SECONDS: lambda v: 0 < v <= 86400,
    STEP_SECONDS: lambda v: 0 < v <= 86400,
    TOTAL_STEPS: lambda v: 0 < v <= MAX_STEP,
    RANK_STEP: lambda v: 0 <= v <= MAX_STEP,
    EXCHANGE_STARTED: lambda v: 0 < v <= MAX_TIMESTAMP,
    EXCHANGE_DONE: lambda v: 0 < v <= MAX_TIMESTAMP,
    COMPUTE_SECONDS: lambda v: 0 < v <= 86400,
    STEP_TIMESTAMP: lambda v: 0 < v <= MAX_TIMESTAMP,
    COLLECTIVES_ENTERED: lambda v: 0 < v <= MAX_STEP and v == int(v),
    COLLECTIVES_COMPLETED: lambda v: -1 <= v <= MAX_STEP and v == int(v),
    RESUMED_STEP: lambda v: 0 <= v <= MAX_STEP,
    RESUMED_TIMESTAMP: lambda v: 0 < v <= MAX_TIMESTAMP,
}
LABELLED = (COLLECTIVES_ENTERED, COLLECTIVES_COMPLETED)


class ScrapeError(Exception):
    """A page that could not be read. `unreachable`: no connection was made to the address at all (connecting
    timed out, no route): what the operator's network says, not what the pod does. `hung`: a connection was
    made (the pod's kernel answered) but no whole page came in time: what a trainer wedged in native code, or
    stopped, does. Neither: the pod refused (nothing listens there) or served something other than a page."""

    def __init__(self, message: str, *, unreachable: bool = False, hung: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.hung = hung


def parse(text: str, now: str) -> Progress | None:
    """Progress from a metrics page, or None when it has no step gauge."""
    return progress_of(values(text), now)


def parse_beat(text: str) -> Beat:
    return beat_of(*read_page(text))


def values(text: str) -> dict[str, float]:
    """The unlabelled gauges' values on a metrics page (read_page)."""
    return read_page(text)[0]


def read_page(text: str) -> tuple[dict[str, float], tuple[tuple[str, int, int], ...]]:
    """The unlabelled gauges' values on a metrics page, and the process groups' places (group, the last
    collective entered, the last seen complete; at most MAX_GROUPS, names of at most MAX_GROUP_NAME characters,
    a group without both numbers left out). Only the lines that start with the gauges' names are parsed (at
    most MAX_LINES); NaN, infinities and values out of range are dropped."""
    wanted = itertools.islice((line for line in text.splitlines() if line.startswith(GAUGES)), MAX_LINES)
    out: dict[str, float] = {}
    groups: dict[str, dict[str, int]] = {}
    try:
        for family in text_string_to_metric_families("\n".join(wanted) + "\n"):
            for sample in family.samples:
                check = IN_RANGE.get(sample.name)
                if check is None or not math.isfinite(sample.value) or not check(sample.value):
                    continue
                if sample.name not in LABELLED:
                    out[sample.name] = sample.value
                elif 0 < len(group := sample.labels.get("group", "")) <= MAX_GROUP_NAME and (
                    group in groups or len(groups) < MAX_GROUPS
                ):
                    groups.setdefault(group, {})[sample.name] = int(sample.value)
    except (ValueError, TypeError, IndexError) as e:  # what prometheus_client's parser raises on bad text
        raise ScrapeError(f"unparsable metrics: {str(e)[:200]}") from e
    placed = tuple(
        (group, g[COLLECTIVES_ENTERED], g[COLLECTIVES_COMPLETED])
        for group, g in sorted(groups.items())
        if COLLECTIVES_ENTERED in g and COLLECTIVES_COMPLETED in g
    )
    return out, placed


def beat_of(values: dict[str, float], collectives: tuple[tuple[str, int, int], ...] = ()) -> Beat:
    """Where a rank is, from its page's gauges and process groups' places (read_page); none without its step."""
    if RANK_STEP not in values:
        return Beat()
    return Beat(
        int(values[RANK_STEP]),
        values.get(EXCHANGE_STARTED),
        values.get(EXCHANGE_DONE),
        values.get(COMPUTE_SECONDS),
        values.get(STEP_TIMESTAMP),
        collectives,
    )


def progress_of(values: dict[str, float], now: str) -> Progress | None:
    """The progress a page's gauges say, None without a step. At step 0 (before the trainer's first log line)
    its loss and throughput gauges still read their initial 0: shown as none yet, not as a loss of 0."""
    if STEP not in values:
        return None
    started = values[STEP] > 0
    return with_estimates(
        Progress(
            step=int(values[STEP]),
            loss=round(values[LOSS], 6) if LOSS in values and started else None,
            samples_per_second=round(values[SAMPLES_PER_SECOND], 2)
            if SAMPLES_PER_SECOND in values and started
            else None,
            last_checkpoint_step=int(values[LAST_CHECKPOINT_STEP]) if LAST_CHECKPOINT_STEP in values else None,
            checkpoint_seconds=round(values[CHECKPOINT_SECONDS], 3) if CHECKPOINT_SECONDS in values else None,
            step_seconds=round(values[STEP_SECONDS], 4) if STEP_SECONDS in values else None,
            total_steps=int(values[TOTAL_STEPS]) if TOTAL_STEPS in values else None,
            # Both or neither: where worker 0's training last continued from, and when (a later one is news).
            resumed_step=int(values[RESUMED_STEP]) if RESUMED_TIMESTAMP in values and RESUMED_STEP in values else None,
            resumed_at=_rfc3339(values[RESUMED_TIMESTAMP])
            if RESUMED_TIMESTAMP in values and RESUMED_STEP in values
            else None,
            updated_at=now,
        )
    )


def _rfc3339(unix: float) -> str:
    """A Unix time as RFC 3339 in milliseconds: two continuations within a second are still two."""
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session() -> aiohttp.ClientSession:
    """The session scrapes go through: no cookie jar (a pod's cookies must not reach another pod) and no
    decompression (a small compressed body must not become a large one in the operator's memory)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)


async def scrape(client: aiohttp.ClientSession, host: str, port: int, now: str) -> Progress | None:
    """Progress from one GET of worker 0's metrics page (`fetch`); ScrapeError for a page that does not parse."""
    return parse(await fetch(client, host, port), now)


async def fetch(client: aiohttp.ClientSession, host: str, port: int) -> str:
    """One GET of a rank's metrics page: ScrapeError for a redirect or any other status than 200, a body over
    MAX_BYTES, or a request not done within SCRAPE_TIMEOUT."""
    url = f"http://{host}:{port}/metrics"
    body = bytearray()
    try:
        async with client.get(
            url,
            allow_redirects=False,
            headers={"Accept-Encoding": "identity"},
            timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT, sock_connect=CONNECT_TIMEOUT),
        ) as resp:
            if resp.status != 200:
                raise ScrapeError(f"{url}: HTTP {resp.status}")
            if (resp.content_length or 0) > MAX_BYTES:
                raise ScrapeError(f"{url}: the page is larger than {MAX_BYTES // 1024} KiB")
            async for chunk in resp.content.iter_chunked(CHUNK):
                body += chunk
                if len(body) > MAX_BYTES:
                    raise ScrapeError(f"{url}: the page is larger than {MAX_BYTES // 1024} KiB")
    except aiohttp.ConnectionTimeoutError as e:  # before TimeoutError, which it also is
        raise ScrapeError(f"{url}: no connection within {CONNECT_TIMEOUT:g} s", unreachable=True) from e
    except TimeoutError as e:
        raise ScrapeError(f"{url}: no whole page within {SCRAPE_TIMEOUT:.0f} s", hung=True) from e
    except aiohttp.ClientConnectorError as e:
        unreachable = e.errno in UNREACHABLE_ERRNOS
        raise ScrapeError(f"{url}: {str(e)[:200] or type(e).__name__}", unreachable=unreachable) from e
    except aiohttp.ClientError as e:
        raise ScrapeError(f"{url}: {str(e)[:200] or type(e).__name__}") from e
    return body.decode("utf-8", errors="replace")
