"""Two operator replicas elect a leader through kopf peering: exactly one acts, and when the leader is killed
(SIGKILL: no goodbye) the other takes over and runs the next job."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import operatorprocess
from ringleader_devcluster.layout import Layout

from tests.support.cluster import wait_for
from tests.support.jobs import create, training_job, wait_condition

# Serial: it kills the operator every test uses.
pytestmark = [pytest.mark.usefixtures("operator"), pytest.mark.serial]


@pytest.fixture
def second_replica(layout: Layout, tmp_path: Path) -> Iterator[Path]:
    """Another replica of the operator from this checkout; yields its log file."""
    log = tmp_path / "replica-b.log"
    env = {**os.environ, "KUBECONFIG": str(layout.kubeconfig)}
    argv = [sys.executable, "-m", "ringleader_operator", "--metrics-port", "18082", "--health-port", "18083"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        yield log
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        operatorprocess.operator_up()  # the dev cluster's own replica again, for the tests that follow


def peers(custom: client.CustomObjectsApi) -> dict[str, object]:
    obj = custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", "ringleader")
    return dict(obj.get("status") or {})


def created_pods_for(log: Path, namespace: str, job: str) -> bool:
    return f"[{namespace}/{job}] created" in log.read_text()


def test_one_replica_acts_and_a_killed_leader_is_taken_over(
    custom: client.CustomObjectsApi, namespace: str, layout: Layout, second_replica: Path
) -> None:
    leader_log = layout.operator_dir / "operator.log"
    # Both replicas keep their keep-alives in the peering object; the younger one starts paused and stays so.
    wait_for("two replicas in the peering", lambda: len(peers(custom)) == 2, timeout=60)

    create(custom, namespace, training_job("first", "import time; time.sleep(1)"))
    wait_condition(custom, namespace, "first", "Succeeded")
    assert created_pods_for(leader_log, namespace, "first")
    assert not created_pods_for(second_replica, namespace, "first"), second_replica.read_text()[-2000:]

    pid = operatorprocess.operator_pid()
    assert pid is not None
    operatorprocess.kill_operator(pid)
    # Its keep-alive expires after the peering lifetime (15 s); then the standby resumes.
    wait_for("the standby to take over", lambda: "Resuming operations" in second_replica.read_text(), timeout=90)
    assert len(peers(custom)) == 1  # the dead leader's entry is cleaned up
    create(custom, namespace, training_job("second", "import time; time.sleep(1)"))
    wait_condition(custom, namespace, "second", "Succeeded")
    assert created_pods_for(second_replica, namespace, "second")
