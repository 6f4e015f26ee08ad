"""The one bounded poll (ringleader_devcluster.waiting): the value once truthy, a timeout that names what never
happened and the last value seen, and an exception from the check ending the wait at once."""

from __future__ import annotations

import itertools

import pytest
from ringleader_devcluster.waiting import WaitTimeout, wait_until


def test_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "", "ready"])
    assert wait_until("ready", lambda: next(values), timeout=5, every=0) == "ready"


def test_a_timeout_names_what_and_the_last_value() -> None:
    calls = itertools.count()
    with pytest.raises(WaitTimeout, match=r"timed out after 0s waiting for the thing \(last: \[\]\)"):
        wait_until("the thing", lambda: [] if next(calls) >= 0 else None, timeout=0.05, every=0.01)
    assert next(calls) >= 2  # looked more than once before giving up


def test_a_check_that_raises_ends_the_wait() -> None:
    def dead() -> None:
        raise RuntimeError("the daemon exited")

    with pytest.raises(RuntimeError, match="the daemon exited"):
        wait_until("the daemon", dead, timeout=60)
