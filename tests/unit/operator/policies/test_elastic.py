"""Auto-elastic admission through `plan`, table-style: an elastic job (4 workers of 2 GPUs asked, minReplicas 2)
starts at the most workers that fit, grows when room appears (after its grow delay, when it checkpoints and no
other gang waits), shrinks when a rank's replacement finds no room, follows kubectl scale; the size search itself
against a linear scan."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator import admission, placement
from ringleader_operator.admission import GATE, Cluster, Room
from ringleader_operator.names import rank_labels
from ringleader_operator.placement import Topology, largest_fitting
from ringleader_operator.policies import elastic
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from tests.unit.operator.test_admission import gang_pod, held, node, running

from ..builders import NOW, TEMPLATE, after, job, names, round_of

TWO = [node("n1", gpus=4), node("n2", gpus=4)]
CHECKPOINT = {"checkpoint": {"directory": "/ckpt", "intervalSteps": 20}}


def elastic_job(status: dict[str, Any] | None = None, replicas: int = 4, **spec: Any) -> Any:
    workers = {"replicas": replicas, "minReplicas": 2, "gpus": 2, "template": TEMPLATE}
    return job(status=status, workers=workers, **{**CHECKPOINT, **spec})


def mine(index: int, world: int, on: str | None, phase: str = "Running") -> dict[str, Any]:
    """Worker `index` of the job's world of `world` workers: on node `on`, or gated (None)."""
    spec: dict[str, Any] = gang_pod(2)
    if on is None:
        spec["schedulingGates"] = [{"name": GATE}]
    else:
        spec["nodeName"] = on
    meta = {
        "name": f"j-worker-{index}",
        "namespace": "ns",
        "labels": rank_labels("j", Role.WORKER, index),
        "annotations": {"ringleader.dev/attempt": "0", "ringleader.dev/workers": str(world)},
        "ownerReferences": [{"kind": "TrainingJob", "name": "j", "uid": "u", "controller": True}],
    }
    ready = [{"type": "Ready", "status": str(phase == "Running")}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": ready}}


def sized(
    workers: int, requested: int = 4, reason: str = "StartedSmaller", conditions: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """A status whose elastic part says the job runs at `workers` since NOW."""
    elastic = {"workers": workers, "requested": requested, "reason": reason, "lastResizeTime": NOW}
    return {"elastic": elastic, "conditions": conditions or []}


WAITING = [{"type": "Admitted", "status": "False", "reason": "WaitingForCapacity",
            "message": "needs 2 nvidia.com/gpu, 0 free", "lastTransitionTime": NOW}]  # fmt: skip
ADMITTED = [{"type": "Admitted", "status": "True", "reason": "GangAdmitted", "message": "", "lastTransitionTime": NOW}]
THREE_RUNNING = [mine(0, 3, "n1"), mine(1, 3, "n1"), mine(2, 3, "n2")]
# n2 is lost (gone from the cluster) and n3 has room for one worker: worker 3's replacement waits beside its peers.
AFTER_LOSS = [node("n1", gpus=4), node("n3", gpus=2)]
FOUR_ONE_WAITING = [mine(0, 4, "n1"), mine(1, 4, "n1"), mine(2, 4, "n3"), mine(3, 4, None, phase="Pending")]
LOST_WAITING = sized(4, reason="Requested", conditions=WAITING)  # gang admission found worker 3 no room
LOST_ADMITTED = sized(4, reason="Requested", conditions=ADMITTED)


@pytest.mark.parametrize(
    ("status", "spec", "pods", "nodes", "others", "now", "want"),
    [
        # -> (workers, reason, pods created, pods deleted)
        # 6 of 8 GPUs free: 3 workers now rather than 4 later.
        ({}, {}, [], TWO, [running(2, "n1")], NOW, (3, "StartedSmaller", 3, 0)),
        ({}, {}, [], TWO, [], NOW, (4, "Requested", 4, 0)),
        # Not even minReplicas fits: it waits at the size asked (gated), gang admission saying what is short.
        ({}, {}, [], TWO, [running(4, "n1"), running(2, "n2")], NOW, (4, "Requested", 4, 0)),
        # Running at 3; room for 4: it grows once the grow delay (60 s) has passed since it started small.
        (sized(3), {}, THREE_RUNNING, TWO, [], after(59), (3, "StartedSmaller", 0, 0)),
        # (the new rank's pod is made at once, gated: it runs only with the whole new world)
        (sized(3), {}, THREE_RUNNING, TWO, [], after(60), (4, "Grown", 1, 3)),
        # A gang of another job waits for room: it is served first.
        (sized(3), {}, THREE_RUNNING, TWO, [held(2)], after(60), (3, "StartedSmaller", 0, 0)),
        # No checkpoint: growing would throw the training away.
        (sized(3), {"checkpoint": None}, THREE_RUNNING, TWO, [], after(60), (3, "StartedSmaller", 0, 0)),
        # No room for a 4th worker: it stays.
        (sized(3), {}, THREE_RUNNING, TWO, [running(2, "n2")], after(60), (3, "StartedSmaller", 0, 0)),
        # Finishing (a worker succeeded): its world stays.
        (sized(3), {}, [*THREE_RUNNING[:2], mine(2, 3, "n2", "Succeeded")], TWO, [], after(60),
         (3, "StartedSmaller", 0, 0)),
        # kubectl scale 3 -> 4 with room: at once, no grow delay.
        (sized(3, requested=3, reason="Requested"), {}, THREE_RUNNING, TWO, [], NOW, (4, "Requested", 1, 3)),
        # A lost node: worker 3's replacement found no room (the round before): 3 workers instead of waiting.
        (LOST_WAITING, {}, FOUR_ONE_WAITING, AFTER_LOSS, [], NOW, (3, "Shrunk", 0, 4)),
        # Not yet weighed by gang admission: it is first.
        (LOST_ADMITTED, {}, FOUR_ONE_WAITING, AFTER_LOSS, [], NOW, (4, "Requested", 0, 0)),
    ],
    ids=["starts-smaller", "starts-whole", "nothing-fits", "grow-delay", "grows", "another-gang-waits",
         "no-checkpoint", "no-room", "finishing", "scaled-up", "shrinks", "replacement-not-weighed-yet"],
)  # fmt: skip
def test_the_world_size(
    status: dict[str, Any], spec: dict[str, Any], pods: list[dict[str, Any]], nodes: list[dict[str, Any]],
    others: list[dict[str, Any]], now: str, want: tuple[Any, ...],
) -> None:  # fmt: skip
    p = plan(Reading(elastic_job(status, **spec), pods, True), now, Cluster(nodes, [*pods, *others]))
    assert p.status.elastic is not None
    got = (p.status.elastic.workers, p.status.elastic.reason.value, len(p.create_pods), len(p.delete_pods))
    assert got == want
    assert all(x["metadata"]["annotations"]["ringleader.dev/workers"] == str(want[0]) for x in p.create_pods)


def test_a_job_that_starts_smaller_says_why_and_looks_for_room() -> None:
    p = plan(Reading(elastic_job(), [], True), NOW, Cluster(TWO, [running(2, "n1")]))
    assert p.status.elastic is not None
    assert p.status.elastic.message == (
        "3 of 4 workers: 4 do not fit (needs 8 nvidia.com/gpu, 6 free); grows when room appears"
    )
    assert p.status.elastic.last_resize_time == NOW
    assert names(p.create_pods) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert not any(admission.gated(x) for x in p.create_pods)  # they fit: created released
    assert p.status.workers == "0/3 of 4" and p.status.world_size == 3
    # Woken when room is freed, and when the grow delay has run out (60 s after the start).
    assert p.waiting_for_room and p.requeue_after == 30


def test_growing_re_forms_the_world_saying_why() -> None:
    p = plan(Reading(elastic_job(sized(3)), THREE_RUNNING, True), after(60), Cluster(TWO, THREE_RUNNING))
    (event,) = [e for e in p.events if e.reason == "Resized"]
    assert event.message == (
        "workers 3 -> 4 (3 -> 4 of 4 workers: room appeared): every worker restarts at the new world size and "
        "resumes from the latest checkpoint"
    )
    assert p.status.phase == "Restarting" and p.status.elastic is not None
    assert p.status.elastic.last_resize_time == after(60) and p.status.workers == "0/4"
    # The grow delay wakes it while it runs smaller: the round at 59 s asks for one at 60 s.
    early = plan(Reading(elastic_job(sized(3)), THREE_RUNNING, True), after(59), Cluster(TWO, THREE_RUNNING))
    assert early.requeue_after == 1 and early.waiting_for_room


def test_a_shrink_names_the_waiting_ranks_and_what_they_lacked() -> None:
    p = plan(Reading(elastic_job(LOST_WAITING), FOUR_ONE_WAITING, True), NOW, Cluster(AFTER_LOSS, FOUR_ONE_WAITING))
    assert p.status.elastic is not None and p.status.elastic.message == (
        "4 -> 3 of 4 workers: 1 of its ranks found no room beside the running ones (needs 2 nvidia.com/gpu, 0 free); "
        "grows when room appears"
    )
    assert sorted(p.delete_pods) == [f"j-worker-{i}" for i in range(4)]


def test_waiting_pods_of_a_larger_size_are_made_again_smaller_without_a_restart() -> None:
    """A job waiting gated at 4 (nothing fitted) starts at 3 once 3 fit: its gated pods go, nothing restarts."""
    gated = [mine(i, 4, None, phase="Pending") for i in range(4)]
    status = {"elastic": {"workers": 4, "requested": 4, "reason": "Requested"}, "conditions": WAITING}
    p = plan(Reading(elastic_job(status), gated, True), NOW, Cluster(TWO, [*gated, running(2, "n1")]))
    assert p.status.elastic is not None and p.status.elastic.workers == 3
    assert sorted(p.delete_pods) == [f"j-worker-{i}" for i in range(4)] and p.status.phase != "Restarting"
    (event,) = [e for e in p.events if e.reason == "Resized"]
    assert "the waiting pods are made again at the new size" in event.message


def test_kubectl_scale_below_the_size_running_takes_effect_without_the_cluster() -> None:
    p = plan(Reading(elastic_job(sized(4, reason="Requested"), replicas=3), THREE_RUNNING[:0], True), NOW)
    assert p.status.elastic is not None
    assert (p.status.elastic.workers, p.status.elastic.requested, p.status.elastic.reason.value) == (3, 3, "Requested")


def test_kubectl_scale_down_to_the_size_running_makes_it_the_size_asked_for() -> None:
    p = plan(Reading(elastic_job(sized(3), replicas=3), THREE_RUNNING, True), after(5))
    assert p.status.elastic is not None and p.delete_pods == []
    assert (p.status.elastic.workers, p.status.elastic.reason.value) == (3, "Requested")
    assert (p.status.elastic.message, p.status.elastic.last_resize_time) == (
        "3 workers, as spec.workers.replicas asks",
        NOW,
    )
    assert p.status.workers == "3/3" and not p.waiting_for_room


def test_without_a_cluster_the_size_stays() -> None:
    p = plan(Reading(elastic_job(sized(3)), THREE_RUNNING, True), after(600))
    assert p.status.elastic is not None and p.status.elastic.workers == 3 and p.delete_pods == []
    assert p.status.workers == "3/3 of 4"


def test_placement_bounds_the_size_to_what_one_domain_holds() -> None:
    racks = [node("a", gpus=4, labels={"rack": "r1"}), node("b", gpus=4, labels={"rack": "r2"})]
    p = plan(Reading(elastic_job(placement={"topologyKey": "rack"}), [], True), NOW, Cluster(racks, []))
    assert p.status.elastic is not None and p.status.elastic.workers == 2
    assert {x["spec"]["nodeSelector"]["rack"] for x in p.create_pods} in ({"r1"}, {"r2"})


@pytest.mark.parametrize(
    "own_gates",
    [False, True],
    ids=["queue-or-workload-api", "own-gates"],
)
def test_only_the_operators_own_gang_admission_sizes_a_job(own_gates: bool) -> None:
    j = elastic_job()
    r = round_of(j)
    elastic.size_world(r, j, Cluster(TWO, [running(2, "n1")]), own_gates)
    assert (r.status.elastic is not None, r.job.spec.workers.replicas) == ((True, 3) if own_gates else (False, 4))


def test_a_job_that_is_not_elastic_has_no_elastic_status() -> None:
    j = job(workers={"replicas": 4, "gpus": 2, "template": TEMPLATE})
    p = plan(Reading(j, [], True), NOW, Cluster(TWO, [running(2, "n1")]))
    assert p.status.elastic is None and len(p.create_pods) == 4 and all(admission.gated(x) for x in p.create_pods)


@pytest.mark.parametrize("free", [0, 1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize(
    "topology", [None, Topology("rack", True), Topology("rack", False)], ids=["none", "required", "preferred"]
)
def test_the_largest_fitting_size_is_what_a_linear_scan_finds(free: int, topology: Topology | None) -> None:
    nodes = [node(f"n{i}", gpus=4, labels={"rack": f"r{i % 3}"}) for i in range(6)]
    taken = [running(4, f"n{i}") for i in range(6 - (free + 3) // 4)] if free < 24 else []

    def gang(n: int) -> list[dict[str, Any]]:
        return [gang_pod(1)] * n

    room = Room.of(taken)
    linear = max((n for n in range(1, 25) if placement.admit(gang(n), nodes, room, topology).fits), default=None)
    assert largest_fitting(gang, range(1, 25), nodes, room, topology) == linear
