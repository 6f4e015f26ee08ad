"""One setup at a time across the test processes: make integration runs the tests in two pytest-xdist workers,
and each runs the session and module fixtures that start what all tests share (the dev cluster, the operator,
Kueue, images in the registry or the real node's containerd). Those setups are idempotent one after the other,
not at the same time: two workers would both find no operator running and start two."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager

from ringleader_devcluster.layout import Layout


@contextmanager
def one_at_a_time(layout: Layout) -> Iterator[None]:
    """Held while a fixture sets up something shared; other processes wait for it (an flock on a file in the dev
    cluster's state folder, released by the kernel when a holder dies). Not re-entrant within one process."""
    layout.state.mkdir(parents=True, exist_ok=True)
    with open(layout.state / "test-setup.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
