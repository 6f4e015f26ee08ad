"""Stragglers, pure: which ranks work much slower than their peers, and which stay so for the window."""

from __future__ import annotations

import pytest
from ringleader_api import Role
from ringleader_operator.stalls import Beat, RankBeat
from ringleader_operator.stragglers import Slow, Stragglers, Watch, confirm, find_slow, read_every

W, PS = Role.WORKER, Role.PS


def rank(role: Role, index: int, compute: float | None) -> RankBeat:
    return RankBeat(f"j-{role.value}-{index}", role, index, f"node-{index}", Beat(10, None, None, compute))


@pytest.mark.parametrize(
    ("beats", "slow"),
    [
        ([rank(W, 0, 0.05), rank(W, 1, 0.05), rank(W, 2, 0.31)], [("j-worker-2", 6.2)]),
        ([rank(W, 0, 0.05), rank(W, 1, 0.09)], []),  # 1.8x: under the threshold
        ([rank(W, 0, 0.05), rank(W, 1, 0.2)], [("j-worker-1", 4.0)]),  # two ranks: each against the other
        ([rank(W, 0, 0.3), rank(W, 1, 0.3), rank(W, 2, 0.3)], []),  # all slow alike: nobody is behind
        # Roles are judged apart: shards apply updates in far less time than workers compute.
        ([rank(W, 0, 0.05), rank(W, 1, 0.05), rank(PS, 0, 0.001), rank(PS, 1, 0.01)], [("j-ps-1", 10.0)]),
        ([rank(W, 0, 0.05), rank(W, 1, None), rank(W, 2, 0.5)], [("j-worker-2", 10.0)]),  # one untimed: not judged
        ([rank(W, 0, 0.05)], []),  # alone in its role
        (
            [rank(W, 0, 0.05), rank(W, 1, 0.5), rank(W, 2, 0.3), rank(W, 3, 0.05)],
            [("j-worker-1", 10.0), ("j-worker-2", 6.0)],
        ),
    ],
    ids=["one-slow", "under", "pair", "uniform", "per-role", "untimed", "alone", "slowest-first"],
)
def test_find_slow(beats: list[RankBeat], slow: list[tuple[str, float]]) -> None:
    assert [(s.pod, round(s.factor, 1)) for s in find_slow(beats, 2.0)] == slow


def test_a_straggler_is_named_once_it_stayed_slow_for_the_window() -> None:
    slow = find_slow([rank(W, 0, 0.05), rank(W, 1, 0.05), rank(W, 2, 0.31)], 2.0)
    watch, named = confirm(None, slow, "t1", now=100.0, window=30)
    assert watch == Watch("t1", {"j-worker-2": 100.0}) and named == []
    watch, named = confirm(watch, slow, "t1", now=129.0, window=30)
    assert named == []
    watch, named = confirm(watch, slow, "t1", now=130.0, window=30)
    assert [s.pod for s in named] == ["j-worker-2"]
    # A reading without it starts it over; so does the job turning Running anew.
    assert confirm(watch, [], "t1", now=131.0, window=30) == (Watch("t1", {}), [])
    assert confirm(watch, slow, "t2", now=131.0, window=30) == (Watch("t2", {"j-worker-2": 131.0}), [])


def test_stragglers_describe_themselves_naming_a_bounded_number() -> None:
    one = Slow("j-worker-2", W, 2, "node-2", 0.31, 0.05)
    assert Stragglers("t1", (one,), 2.0, 30).describe() == (
        "worker 2 (pod j-worker-2 on node node-2) works 6.2x its peers' median (0.31 s a step against 0.05 s), "
        "for 30 s or more"
    )
    many = tuple(Slow(f"j-worker-{i}", W, i, "", 1.0, 0.1) for i in range(8))
    text = Stragglers("t1", many, 2.0, 30).describe()
    assert text.count("works 10.0x") == 5 and text.endswith("; and 3 more, for 30 s or more")
    assert Stragglers("t1", (), 2.0, 30).describe() == "no rank works 2x its peers' median or more"


def test_reading_often_enough_for_the_window_but_never_more_than_the_page_budget() -> None:
    assert read_every(60, 8, 50) == 20
    assert read_every(60, 10_000, 50) == 200
