"""One bounded poll for everything that waits on a condition: the dev cluster's start, the benchmarks, the
tests. Every wait has a deadline and a name, so a timeout says what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """`what` did not happen within the timeout; the message names it and the last value seen."""


def wait_until(what: str, check: Callable[[], T | None], timeout: float, every: float = 0.2) -> T:
    """Call `check` until it returns something truthy (returned), at least once and every `every` seconds;
    WaitTimeout naming `what` after `timeout` seconds. An exception from `check` ends the wait (raise one for a
    condition that can never come true, such as a process that died)."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(every)
