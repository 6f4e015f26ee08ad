"""Restart policies on the dev cluster: each policy and exit-code class does what the decision table says,
evictions are retried as infrastructure, and restarts of one rank back off exponentially. Each failure is named
and classed (the exception a script or the trainer raised, in the condition and status.lastFailure), each class
has its own budget (a node's trouble does not use up backoffLimit), and the same exception three times in a row
is not retried."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_operator.observed import parse_time

from tests.support.cluster import wait_for
from tests.support.jobs import (
    condition,
    create,
    digits_job,
    get,
    live_pods,
    rank_status,
    training_job,
    wait_condition,
)

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
        assert "worker 1 (pod policy-worker-1 on node process-node) failed with exit code" in failed["message"]
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


RAISES = "import os, time\nif os.environ['RANK'] == '1':\n    raise ValueError('bad shape (3, 4)')\ntime.sleep(30)\n"


def test_each_failure_is_named_and_classed_and_the_same_exception_thrice_is_not_retried(
    custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    """A script's ValueError (its traceback, under Never), the trainer's own configuration error (its exit record,
    under ExitCode), and a ValueError every attempt (backoffLimit 10): each Failed condition names the rank, its
    node, the class and the exception; status.lastFailure holds the same; the third identical exception ends the
    job though backoffLimit would allow more."""
    never = training_job("raises", RAISES, workers=2)
    never["spec"]["workers"]["restartPolicy"] = "Never"
    create(custom, namespace, never)
    config = digits_job("config", 1, 0, tmp_path / "ckpt")
    config["spec"]["workers"]["restartPolicy"] = "ExitCode"
    create(custom, namespace, config)
    thrice = training_job("thrice", RAISES, workers=2, runPolicy={"backoffLimit": 10})
    create(custom, namespace, thrice)

    seen = {}
    for name in ("raises", "config", "thrice"):
        job = wait_condition(custom, namespace, name, "Failed", timeout=180)
        seen[name] = (time.time(), job)
    job = seen["raises"][1]
    failed = condition(job, "Failed") or {}
    assert failed["reason"] == "RankFailed", failed
    assert failed["message"].startswith(
        "worker 1 (pod raises-worker-1 on node process-node) failed with exit code 1, class UserCode: "
        "ValueError: bad shape (3, 4) (<string>:3 in <module>)"
    ), failed
    last = job["status"]["lastFailure"]
    assert (last["class"], last["rank"], last["pod"], last["node"], last["exitCode"]) == (
        "UserCode",
        "worker-1",
        "raises-worker-1",
        "process-node",
        1,
    )
    assert last["evidence"] == "ValueError: bad shape (3, 4) (<string>:3 in <module>)"
    # The figure: from the rank's end (its container's finishedAt) to its class in status, at most this.
    print(f"failure to class in status: <= {seen['raises'][0] - parse_time(last['time']).timestamp():.1f} s")

    failed = condition(seen["config"][1], "Failed") or {}
    assert failed["reason"] == "RankFailed" and (
        "class UserCode: ringleader_trainer.examples.train.ConfigError: --steps must be at least 1" in failed["message"]
    ), failed

    job = seen["thrice"][1]
    failed = condition(job, "Failed") or {}
    assert failed["reason"] == "FailureBudgetExceeded", failed
    assert failed["message"].endswith(
        "ValueError: bad shape (3, 4) (<string>:3 in <module>); the same error 3 times in a row "
        "(failureBudgets.userCode.sameErrorLimit 3)"
    ), failed
    assert job["status"]["failures"]["UserCode"]["total"] == 3 and rank_status(job)["worker-1"]["restarts"] == 2


def test_a_nodes_trouble_does_not_use_up_the_budget_meant_for_code(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    """backoffLimit 1, and worker 1's pod force-deleted twice (as when its node is lost): both are the
    infrastructure's, counted in its own budget, and the job, whose code never failed, succeeds."""
    create(custom, namespace, training_job("lost", "import time\ntime.sleep(25)\n", runPolicy={"backoffLimit": 1}))

    def running(attempt: str) -> Callable[[], bool]:
        def check() -> bool:
            pods = {p.metadata.name: p for p in live_pods(core, namespace, "lost")}
            pod = pods.get("lost-worker-1")
            return (
                pod is not None and pod.status.phase == "Running"
                and pod.metadata.annotations.get("ringleader.dev/attempt") == attempt
            )  # fmt: skip

        return check

    for attempt in ("0", "1"):
        wait_for(f"worker 1's attempt {attempt} running", running(attempt), timeout=90)
        core.delete_namespaced_pod("lost-worker-1", namespace, grace_period_seconds=0)
    job = wait_condition(custom, namespace, "lost", "Succeeded", timeout=180)
    failures = job["status"]["failures"]
    assert failures["Infrastructure"]["total"] == 2 and "UserCode" not in failures, failures
    assert rank_status(job)["worker-1"]["restarts"] == 2
    assert get(custom, namespace, "lost")["status"]["lastFailure"]["class"] == "Infrastructure"


def test_escalation_restarts_the_rank_then_the_gang_then_fails_the_job(
    custom: client.CustomObjectsApi, namespace: str, marker: Path
) -> None:
    """runPolicy.escalation {rankRestarts 1, gangRestarts 1}: worker 1 fails every attempt. Its first failure
    restarts it alone, its second every rank (worker 0 recreated, not counted), its third fails the job."""
    script = (
        "import os, sys, time\n"
        f"if os.environ['RANK'] == '1':\n"
        f"    open('{marker}', 'a').write(f'{{time.time()}}\\n')\n"
        "    sys.exit(1)\n"
        "time.sleep(60)\n"
    )
    policy = {"backoffLimit": 10, "escalation": {"rankRestarts": 1, "gangRestarts": 1, "windowSeconds": 600}}
    create(custom, namespace, training_job("ladder", script, runPolicy=policy))
    job = wait_condition(custom, namespace, "ladder", "Failed", timeout=120)
    failed = condition(job, "Failed") or {}
    assert failed["reason"] == "EscalationExhausted", failed
    assert failed["message"].endswith("failure 3 in 600 s, past runPolicy.escalation's 2 restarts (rank and gang)")
    ranks = rank_status(job)
    assert (ranks["worker-1"]["restarts"], ranks["worker-0"]["uncounted"]) == (2, 1), ranks
    assert len(marker.read_text().split()) == 3  # worker 1 ran three times
    assert job["status"]["escalation"]["inWindow"] == 3
