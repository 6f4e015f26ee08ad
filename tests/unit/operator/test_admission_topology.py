"""Topology-aware gang admission (spec.placement), table-style on a 4-rack layout: two nodes of 4 GPUs per rack.
Required: one rack or wait, saying what each rack is short of; preferred: the fewest racks; a replaced rank goes
where its peers run."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.admission import Room
from ringleader_operator.placement import Topology, admit

from tests.unit.operator.test_admission import gang_pod, node, running

RACK = "topology.kubernetes.io/rack"
# r1 and r2 have two nodes of 4 GPUs, r3 two of 2 GPUs, r4 one of 4; a node without the label takes nothing.
LAYOUT = [
    *(node(f"{r}-n{i}", gpus=g, labels={RACK: r}) for r, g, count in (("r1", 4, 2), ("r2", 4, 2), ("r3", 2, 2),
                                                                      ("r4", 4, 1)) for i in range(count)),
    node("unlabelled", gpus=8),
]  # fmt: skip
REQUIRED, PREFERRED = Topology(RACK, True), Topology(RACK, False)


def racks(domains: tuple[str, ...]) -> set[str]:
    return set(domains)


@pytest.mark.parametrize(
    ("gang", "pods", "topology", "placed"),
    [
        # Two 2-GPU pods: the tightest rack that holds them (r4: 4 GPUs, as r3, and less CPU), r1/r2 left whole.
        ([gang_pod(2)] * 2, [], REQUIRED, ["r4", "r4"]),
        # r4 full: a 4-GPU pod cannot go to r3, the tightest left (4 GPUs, but 2 a node): r1.
        ([gang_pod(4)], [running(4, "r4-n0")], REQUIRED, ["r1"]),
        # 8 GPUs: r1 (tightest of the racks holding 8; r4 holds 4).
        ([gang_pod(4)] * 2, [], REQUIRED, ["r1", "r1"]),
        # r1 busy: r2.
        ([gang_pod(4)] * 2, [running(4, "r1-n0")], REQUIRED, ["r2", "r2"]),
        # 12 GPUs preferred: the two roomiest racks (8 + 4 or 8 + 8), never the unlabelled node.
        ([gang_pod(4)] * 3, [], PREFERRED, None),
        # Fits one rack: preferred takes one too.
        ([gang_pod(4)] * 2, [], PREFERRED, ["r1", "r1"]),
    ],
)
def test_the_gang_goes_to_the_fewest_and_tightest_domains(
    gang: list[dict[str, Any]], pods: list[dict[str, Any]], topology: Topology, placed: list[str] | None
) -> None:
    verdict = admit(gang, LAYOUT, Room.of(pods), topology)
    assert verdict.fits and len(verdict.domains) == len(gang)
    if placed is not None:
        assert list(verdict.domains) == placed
    else:
        assert len(racks(verdict.domains)) == 2 and racks(verdict.domains) <= {"r1", "r2", "r4"}


def test_a_gang_no_single_domain_can_hold_never_runs_under_required_and_says_what_each_domain_is_short_of() -> None:
    verdict = admit([gang_pod(4)] * 3, LAYOUT, Room.of([]), REQUIRED)
    assert not verdict.fits and verdict.never
    assert verdict.message == (
        f"does not fit in any one domain: {RACK}=r1: needs 12 nvidia.com/gpu, 8 allocatable; "
        f"{RACK}=r2: needs 12 nvidia.com/gpu, 8 allocatable; {RACK}=r3: needs 12 nvidia.com/gpu, 4 allocatable; "
        f"{RACK}=r4: needs 12 nvidia.com/gpu, 4 allocatable"
    )
    # Without a topology the cluster holds it (36 GPUs): the constraint is what refuses it.
    assert admit([gang_pod(4)] * 3, LAYOUT, Room.of([])).fits


def test_a_gang_that_fits_a_domain_once_others_leave_waits_saying_what_is_free() -> None:
    busy = [running(4, f"{r}-n{i}") for r in ("r1", "r2") for i in range(2)]
    verdict = admit([gang_pod(4)] * 2, LAYOUT, Room.of(busy), REQUIRED)
    assert not verdict.fits and not verdict.never
    assert f"{RACK}=r1: needs 8 nvidia.com/gpu, 0 free" in verdict.message
    assert f"{RACK}=r4: needs 8 nvidia.com/gpu, 4 free" in verdict.message


def test_a_replaced_rank_goes_where_its_peers_run() -> None:
    peers = [running(4, "r2-n0")]
    verdict = admit([gang_pod(4)], LAYOUT, Room.of(peers), Topology(RACK, True, frozenset({"r2-n0"})))
    assert verdict.domains == ("r2",)
    full = [running(4, "r2-n0"), running(4, "r2-n1")]
    waiting = admit([gang_pod(4)], LAYOUT, Room.of(full), Topology(RACK, True, frozenset({"r2-n0"})))
    assert not waiting.fits and waiting.message.startswith("does not fit where its running pods are")
    # Preferred: with its peers if there is room, else anywhere near.
    assert admit([gang_pod(4)], LAYOUT, Room.of(full), Topology(RACK, False, frozenset({"r2-n0"}))).fits


def test_no_node_with_the_label_is_said_plainly() -> None:
    verdict = admit([gang_pod(1)], [node("n1")], Room.of([]), Topology("example.com/block", True))
    assert (
        not verdict.fits
        and verdict.never
        and verdict.message == "no Ready, schedulable node has the label example.com/block"
    )


def test_many_domains_are_counted_not_all_named() -> None:
    many = [node(f"n{i}", gpus=1, labels={RACK: f"r{i:02d}"}) for i in range(20)]
    verdict = admit([gang_pod(1)] * 2, many, Room.of([]), REQUIRED)
    assert not verdict.fits and verdict.message.endswith("; and 12 more domains")
    assert verdict.message.count(f"{RACK}=") == 8


def test_peers_already_in_two_domains_under_required_take_a_replacement_in_either() -> None:
    """A placement added to a job whose pods were already spread: a replaced rank may go to any of their domains
    (not wait for ever for one that holds them all)."""
    peers = [running(4, "r1-n0"), running(4, "r1-n1"), running(4, "r2-n0")]
    verdict = admit([gang_pod(4)], LAYOUT, Room.of(peers), Topology(RACK, True, frozenset({"r1-n0", "r2-n0"})))
    assert verdict.fits and verdict.domains == ("r2",)  # r1 is full
