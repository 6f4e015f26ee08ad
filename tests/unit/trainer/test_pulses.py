"""The coordinator's judge of the members' pulses (coordinator.Pulses): a member whose pulse moved in this group and
then stood still past `silent_after` is silent; one that has not beaten yet (still forming the group) is not; and
the coordinator's watch over a group tells it broken for a silent member, but not for one that left it for good."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest
import torch.distributed as dist
from ringleader_trainer.elastic.coordinator import Coordinator, Pulses
from ringleader_trainer.elastic.store_keys import broken_key, left_key, news_key, pulse_key, tell_lost

MEMBERS = [0, 2, 3]


def looks(beats: list[tuple[float, list[int]]], silent_after: float = 5.0) -> list[list[int]]:
    """What `look` says at each (time, pulse values) in turn, starting from pulses (0, 0, 0)."""
    pulses = Pulses(MEMBERS, [b"0"] * len(MEMBERS), silent_after)
    return [pulses.look([str(v).encode() for v in values], now) for now, values in beats]


@pytest.mark.parametrize(
    ("beats", "said"),
    [
        # Every member beats: nobody silent, however long the group lasts.
        ([(1, [1, 1, 1]), (2, [2, 2, 2]), (9, [9, 9, 9])], [[], [], []]),
        # Rank 2 beat once, then stood still: silent once more than 5 s passed since its last beat (at 1).
        ([(1, [1, 1, 1]), (5, [5, 1, 5]), (6, [6, 1, 6]), (6.5, [7, 1, 7])], [[], [], [], [2]]),
        # Exactly 5 s is not yet more than 5 s.
        ([(1, [1, 1, 1]), (6, [6, 1, 6])], [[], []]),
        # Never beat in this group (still connecting to its peers at scale): not judged, however long.
        ([(1, [1, 0, 1]), (30, [30, 0, 30])], [[], []]),
        # A pulse that moves again in time (a slow beat) resets its clock.
        ([(1, [1, 1, 1]), (5.5, [5, 2, 5]), (10, [10, 2, 10]), (11, [11, 2, 11])], [[], [], [], [2]]),
        # Two stop together: both named, in the members' order.
        ([(1, [1, 1, 1]), (7, [1, 7, 1])], [[], [0, 3]]),
    ],
)
def test_a_member_is_silent_once_its_pulse_stood_still_past_the_limit(
    beats: list[tuple[float, list[int]]], said: list[list[int]]
) -> None:
    assert looks(beats) == said


def test_a_pulse_carried_from_an_earlier_group_counts_only_once_it_moves() -> None:
    """A replacement's rank kept the pulse its predecessor left (the counter is per rank, not per group): the
    value at the group's decision is the baseline, and it is judged only from its first beat in this group."""
    pulses = Pulses([1], [b"40"], 2.0)
    assert pulses.look([b"40"], 10.0) == []
    assert pulses.look([b"41"], 11.0) == []
    assert pulses.look([b"41"], 13.5) == [1]


def watch(left: list[int]) -> tuple[bool, str]:
    """Run the coordinator's watch over a group of MEMBERS whose rank 2 beats once and stops while the others beat
    on; `left` say they left the group for good. What the watch returned, and why the group broke ("" when not)."""
    store: Any = dist.HashStore()  # type: ignore[attr-defined]
    for r in left:
        store.append(left_key("g"), f"{r},")
    coordinator = Coordinator(store, silent_after=1.5)
    beating = threading.Event()

    def beat() -> None:  # from after the watch read its baseline
        beating.wait(0.3)
        store.add(pulse_key(2), 1)
        while not beating.wait(0.2):
            store.add(pulse_key(0), 1)
            store.add(pulse_key(3), 1)

    threading.Thread(target=beat, daemon=True).start()
    threading.Timer(6.0, coordinator.stop.set).start()  # the watch gives up here if nobody is told lost
    try:
        broke = coordinator._watch("g", MEMBERS)
    finally:
        beating.set()
        coordinator.stop.set()
    return broke, store.get(broken_key("g")).decode() if store.check([broken_key("g")]) else ""


def test_the_coordinator_tells_a_group_broken_when_a_members_pulse_stops() -> None:
    broke, why = watch(left=[])
    assert broke and why == "rank 2 silent for 1.5 s", why


def test_a_member_that_left_the_group_for_good_is_not_told_lost() -> None:
    assert watch(left=[2]) == (False, "")


def test_a_member_without_a_pulse_is_never_judged_and_never_holds_the_coordinator_up() -> None:
    """A member that never beats (a trainer from before pulses): the coordinator's reading would wait for a key
    nobody writes; it makes one, which never moves."""
    store: Any = dist.HashStore()  # type: ignore[attr-defined]
    store.set_timeout(datetime.timedelta(seconds=2))  # a read of a missing key would fail after this
    coordinator = Coordinator(store, silent_after=1.5)
    threading.Timer(3.0, coordinator.stop.set).start()
    assert coordinator._watch("g", MEMBERS) is False  # stopped, nobody told lost
    assert not store.check([broken_key("g")])


def test_the_first_reason_a_group_is_told_lost_for_stays() -> None:
    """The members leaving a group the coordinator told lost tell it lost again ("lost"): the coordinator's reason,
    the one its log gives, stays."""
    store: Any = dist.HashStore()  # type: ignore[attr-defined]
    tell_lost(store, "g", "rank 2 silent for 5 s")
    tell_lost(store, "g", "lost")
    assert store.get(broken_key("g")) == b"rank 2 silent for 5 s"
    assert store.get(news_key("g")) == b"lost"
