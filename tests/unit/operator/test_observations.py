"""A round reuses what earlier rounds observed of pods that did not change (observed.Observations): its plan is
the one it makes without, whatever the pods do between rounds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from ringleader_api import Role
from ringleader_operator.observed import own_ranks
from ringleader_operator.rankbook import Observations
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from .builders import NOW, TEMPLATE, job, pod

PHASES = ["Pending", "Running", "Succeeded", "Failed"]


def versioned(index: int, phase: str, exit_code: int | None, version: int, uid: str = "u") -> dict[str, Any]:
    p = pod(Role.WORKER, index, phase, exit_code=exit_code)
    p["metadata"] |= {"uid": f"pod-{index}", "resourceVersion": str(version)}
    p["metadata"]["ownerReferences"] = [{"kind": "TrainingJob", "name": "j", "uid": uid, "controller": True}]
    return p


states = st.lists(
    st.lists(st.tuples(st.sampled_from(PHASES), st.sampled_from([None, 1, 137])), min_size=3, max_size=3),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(states)
def test_a_plan_with_earlier_observations_is_the_plan_without(rounds: list[list[tuple[str, int | None]]]) -> None:
    seen, status, version = Observations(), None, 0
    last: dict[int, tuple[tuple[str, int | None], int]] = {}  # pod -> (its state, its version)
    for states_now in rounds:
        pods = []
        for i, state in enumerate(states_now):
            if i not in last or last[i][0] != state:  # a pod that changed has a new version; the others keep theirs
                version += 1
                last[i] = (state, version)
            phase, code = state
            pods.append(versioned(i, phase, code if phase == "Failed" else None, last[i][1]))
        j = job(status=status, workers={"replicas": 3, "template": TEMPLATE})
        with_seen, without = plan(Reading(j, pods, True, seen=seen), NOW), plan(Reading(j, pods, True), NOW)
        assert with_seen == without
        status = without.status.model_dump(by_alias=True)


def test_observations_of_another_job_of_the_same_name_are_not_reused() -> None:
    seen = Observations()
    pods = [versioned(0, "Running", None, 1, uid="old")]
    assert own_ranks(job(workers={"replicas": 1, "template": TEMPLATE}), pods, seen) == ([], ["j-worker-0"])
    renamed = job(workers={"replicas": 1, "template": TEMPLATE})
    renamed.metadata["uid"] = "old"  # the job the pod belongs to
    ranks, foreign = own_ranks(renamed, pods, seen)
    assert [r.name for r in ranks] == ["j-worker-0"] and foreign == []
