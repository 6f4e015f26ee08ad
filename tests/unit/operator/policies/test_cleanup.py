"""cleanPodPolicy, table-style: which pods of an ended job go."""

from __future__ import annotations

import pytest
from ringleader_api import Role
from ringleader_operator.policies.cleanup import clean_pods, stop_running_pods

from ..builders import job, pod, round_of

PODS = [
    pod(Role.WORKER, 0, "Succeeded"),
    pod(Role.WORKER, 1, "Running"),
    pod(Role.WORKER, 2, "Pending"),
    pod(Role.WORKER, 3, "Failed", exit_code=1),
    pod(Role.WORKER, 4, "Running", deleting=True),
]


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("Running", ["j-worker-1", "j-worker-2"]),
        ("All", ["j-worker-0", "j-worker-1", "j-worker-2", "j-worker-3"]),  # never one already going
        ("None", []),
    ],
)
def test_clean_pods_follows_the_policy(policy: str, deleted: list[str]) -> None:
    r = round_of(job(workers={"replicas": 5, "template": {"spec": {"containers": [{"name": "t"}]}}},
                     runPolicy={"cleanPodPolicy": policy}), PODS)  # fmt: skip
    clean_pods(r)
    assert r.plan.delete_pods == deleted


def test_clean_pods_names_no_pod_twice() -> None:
    r = round_of(job(runPolicy={"cleanPodPolicy": "All"}), PODS[:2])
    r.plan.delete_pods = ["j-worker-1"]
    clean_pods(r)
    assert r.plan.delete_pods == ["j-worker-1", "j-worker-0"]


@pytest.mark.parametrize("policy", ["None", "Running", "All"])
def test_stop_running_pods_ignores_the_policy(policy: str) -> None:
    r = round_of(job(runPolicy={"cleanPodPolicy": policy}), PODS)
    stop_running_pods(r)
    assert r.plan.delete_pods == ["j-worker-1", "j-worker-2"]
