"""Restart policies on the dev cluster: each policy and exit-code class does what the decision table says,
evictions are retried as infrastructure, and restarts of one rank back off exponentially."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.cluster import wait_for
from tests.support.jobs import condition, create, rank_status, training_job, wait_condition

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
def marker() -> Iterator[Path]:
    """A file the ranks share (pods of the process node see the host's /tmp): what attempts have run."""
    path = Path("/tmp") / f"ringleader-test-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


def failing_once(marker: Path, how: str, then: str = "time.sleep(2)") -> str:
    """Rank 1's first attempt runs `how` (after recording itself); every other attempt and rank runs `then`."""
    return (
        "import os, signal, sys, time\n"
        f"m = '{marker}'\n"
        "if os.environ['RANK'] == '1':\n"
        "    first = not os.path.exists(m)\n"
        "    open(m, 'a').write(f'{time.time()}\\n')\n"
        "    if first:\n"
        f"        {how}\n"
        f"{then}\n"
    )


@pytest.mark.parametrize(
    ("policy", "how", "outcome", "reason"),
    [
        ("OnFailure", "sys.exit(1)", "Succeeded", "RankRestarting"),
        ("Always", "sys.exit(2)", "Succeeded", "RankRestarting"),
        ("ExitCode", "os.kill(os.getpid(), signal.SIGKILL)", "Succeeded", "RankRestarting"),  # 137
        ("ExitCode", "sys.exit(201)", "Succeeded", "RankRestarting"),  # the trainer lost a peer
        ("ExitCode", "sys.exit(3)", "Failed", "RankFailed"),  # the trainer's bad configuration
        ("Never", "sys.exit(1)", "Failed", "RankFailed"),
    ],
    ids=["OnFailure-1", "Always-2", "ExitCode-137", "ExitCode-201", "ExitCode-3", "Never-1"],
)
def test_restart_policy_and_exit_code(
    custom: client.CustomObjectsApi, namespace: str, marker: Path, policy: str, how: str, outcome: str, reason: str
) -> None:
    body = training_job("policy", failing_once(marker, how))
    body["spec"]["workers"]["restartPolicy"] = policy
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "policy", outcome)
    status = job["status"]
    if outcome == "Succeeded":
        assert status["replicaStatuses"]["worker"]["restarts"] == 1
        assert rank_status(job)["worker-1"]["restarts"] == 1
        assert rank_status(job)["worker-1"]["lastReason"] == reason
        assert condition(job, "Restarting")["status"] == "False"  # type: ignore[index]
        assert len(marker.read_text().split()) == 2  # the rank ran twice
    else:
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == reason
        assert "worker 1 (pod policy-worker-1) failed with exit code" in failed["message"]
        assert status["replicaStatuses"]["worker"]["restarts"] == 0


def test_an_evicted_rank_is_retried_as_infrastructure_even_under_never(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, marker: Path
) -> None:
    body = training_job("evicted", failing_once(marker, "time.sleep(120)"))
    body["spec"]["workers"]["restartPolicy"] = "Never"
    create(custom, namespace, body)
    wait_for("rank 1 running its first attempt", marker.exists, timeout=60)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="evicted-worker-1", namespace=namespace))
    core.create_namespaced_pod_eviction("evicted-worker-1", namespace, eviction)
    job = wait_condition(custom, namespace, "evicted", "Succeeded", timeout=120)
    rank = rank_status(job)["worker-1"]
    assert (rank["restarts"], rank["lastReason"]) == (1, "RankEvicted")
    assert "was evicted (EvictionByEvictionAPI)" in rank["lastMessage"]
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=evicted").items
    assert any(e.reason == "RankEvicted" and e.type == "Warning" for e in events)


def test_restarts_of_one_rank_back_off_exponentially(
    custom: client.CustomObjectsApi, namespace: str, marker: Path
) -> None:
    script = (
        "import os, sys, time\n"
        f"m = '{marker}'\n"
        "if os.environ['RANK'] == '1':\n"
        "    n = len(open(m).read().split()) if os.path.exists(m) else 0\n"
        "    open(m, 'a').write(f'{time.time()}\\n')\n"
        "    if n < 2: sys.exit(1)\n"
        "time.sleep(2)\n"
    )
    body = training_job("backoff", script, runPolicy={"restartBackoff": {"baseSeconds": 3, "capSeconds": 60}})
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "backoff", "Succeeded", timeout=120)
    assert rank_status(job)["worker-1"]["restarts"] == 2
    starts = [float(t) for t in marker.read_text().split()]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # The first restart waits at least 3 s, the second at least 6 s (each attempt exits at once).
    assert len(gaps) == 2 and gaps[0] >= 3 and gaps[1] >= 6, gaps
