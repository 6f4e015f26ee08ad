"""A process group left after a break is dropped on a thread of its own once the collective's timeout has passed
(rendezvous.retire), not on the training thread: its destructor joins its threads, and one may be held in a send
gloo had queued when the group broke (DDP's `_update_process_group`, dropping the last reference in a heal, stalled
the heal and every peer with it until that send timed out)."""

from __future__ import annotations

import threading
import time

from ringleader_trainer.elastic import rendezvous


class Group:
    """A stand-in for a process group that records where and when it is destroyed."""

    def __init__(self, dropped: list[tuple[str, float]]) -> None:
        self.dropped = dropped

    def __del__(self) -> None:
        self.dropped.append((threading.current_thread().name, time.monotonic()))


def test_a_left_group_is_dropped_on_a_thread_of_its_own_once_the_hold_passed() -> None:
    dropped: list[tuple[str, float]] = []
    start = time.monotonic()
    thread = rendezvous.retire([Group(dropped), Group(dropped)], 0.3)
    assert dropped == []  # the caller holds no reference, and the groups live on
    thread.join(5)
    assert [name for name, _ in dropped] == ["retired-groups"] * 2
    assert all(at - start >= 0.3 for _, at in dropped)


def test_a_group_still_held_elsewhere_outlives_the_hold() -> None:
    dropped: list[tuple[str, float]] = []
    held = Group(dropped)  # as a strategy that has not regrouped yet holds it
    rendezvous.retire([held], 0.05).join(5)
    assert dropped == []
    del held
    assert [name for name, _ in dropped] == [threading.current_thread().name]
