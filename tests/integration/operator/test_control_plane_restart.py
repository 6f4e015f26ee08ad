"""The API server or etcd crashes and comes back while a job runs: the operator (the same process) recovers
its watches and keeps reconciling: the running job finishes, a rank that fails after the restart is
replaced, and a job created after the restart is picked up."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import controlplane, operatorprocess

from tests.support.cluster import wait_for
from tests.support.jobs import condition, create, get, pods_of, rank_status, training_job, wait_condition

# Serial: it restarts the control plane every test uses.
pytestmark = [pytest.mark.usefixtures("operator"), pytest.mark.serial]

# Both ranks wait for the flag file the test creates once the control plane is back; then worker 1's first
# attempt exits as if SIGTERMed (143, retried under ExitCode) and its replacement and worker 0 finish.
FAIL_ONCE = """
import os, pathlib, sys, time
flag = pathlib.Path(sys.argv[1])
deadline = time.monotonic() + 300
while not flag.exists() and time.monotonic() < deadline:
    time.sleep(0.2)
if os.environ["RINGLEADER_INDEX"] == "1" and not (flag.parent / "restarted").exists():
    (flag.parent / "restarted").touch()
    sys.exit(143)
"""


@pytest.mark.parametrize(
    ("component", "down_seconds"),
    # 70 s is longer than kopf's own retries last (about a minute): the operator must ride it out.
    [("kube-apiserver", 70), ("etcd", 5)],
)
def test_the_operator_keeps_reconciling_after_a_control_plane_restart(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path,
    component: str, down_seconds: float,
) -> None:  # fmt: skip
    operator_pid = operatorprocess.operator_pid()
    flag = tmp_path / "go"
    body = training_job("during", FAIL_ONCE)
    body["spec"]["workers"]["template"]["spec"]["containers"][0]["command"] += [str(flag)]
    body["spec"]["workers"]["restartPolicy"] = "ExitCode"
    create(custom, namespace, body)
    wait_for(
        "both ranks running",
        lambda: len([p for p in pods_of(core, namespace, "during") if p.status.phase == "Running"]) == 2 or None,
        timeout=60,
    )

    controlplane.restart_component(component, down_seconds)
    flag.touch()  # worker 1 now fails (SIGTERM's exit code): a pod event the operator must see and act on

    job = wait_condition(custom, namespace, "during", "Succeeded", timeout=120)
    assert rank_status(job)["worker-1"]["restarts"] == 1
    assert rank_status(job)["worker-1"]["lastExitCode"] == 143

    after = training_job("after", "print('hello')")
    create(custom, namespace, after)
    wait_condition(custom, namespace, "after", "Succeeded", timeout=90)
    assert not condition(get(custom, namespace, "after"), "Failed")
    assert operatorprocess.operator_pid() == operator_pid  # the same process recovered; nothing restarted it
