"""Run policies on the dev cluster: suspend and resume continue from the checkpoint,
activeDeadlineSeconds fails a running job and stops its pods, ttlSecondsAfterFinished deletes a finished job,
cleanPodPolicy on failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_trainer.checkpoints import store as ckpt

from tests.support.cluster import logs, wait_for
from tests.support.jobs import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    create,
    digits_job,
    get,
    live_pods,
    pods_of,
    trainer_events,
    training_job,
    wait_condition,
)

pytestmark = pytest.mark.usefixtures("operator")

SLEEP = "import time; time.sleep(120)"


def patch_spec(custom: client.CustomObjectsApi, ns: str, name: str, spec: dict[str, Any]) -> None:
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": spec})


def suspended(custom: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    """The job when its phase is Suspended."""
    job = get(custom, ns, name)
    return job if (job.get("status") or {}).get("phase") == "Suspended" else None


def events_of(core: client.CoreV1Api, ns: str, name: str) -> list[str]:
    items = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [e.reason for e in items]


def worker0_step(core: client.CoreV1Api, ns: str, job: str) -> int:
    """The newest step worker 0 logged (0 before it logs one, or while it has no pod)."""
    try:
        text = logs(core, ns, f"{job}-worker-0", container="trainer")
    except client.ApiException:
        return 0
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    return max((e["step"] for e in lines if "step" in e and "event" not in e), default=0)


def test_a_job_created_suspended_waits_then_resumes_exactly_where_it_was_suspended(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    directory = tmp_path / "ckpt"
    # A job created suspended waits, with no pods, until something (a person, a queue) resumes it.
    body = digits_job("susp", 2, 160, directory, runPolicy={"suspend": True})
    body["spec"]["checkpoint"]["intervalSteps"] = 100  # a suspend before step 100 has no interval's checkpoint
    del body["spec"]["workers"]["template"]["spec"]["terminationGracePeriodSeconds"]  # the operator's, then
    create(custom, namespace, body)
    job = wait_for("phase Suspended", lambda: suspended(custom, namespace, "susp"), timeout=30)
    assert (condition(job, "Suspended") or {}).get("status") == "True" and "startTime" not in job["status"]
    assert pods_of(core, namespace, "susp") == []

    patch_spec(custom, namespace, "susp", {"runPolicy": {"suspend": False}})  # admitted
    wait_for("worker 0 past step 40", lambda: worker0_step(core, namespace, "susp") >= 40, timeout=180)
    grace = {p.metadata.name: p.spec.termination_grace_period_seconds for p in pods_of(core, namespace, "susp")}
    assert set(grace.values()) == {60}, grace  # the stop's grace, before any save was measured
    patch_spec(custom, namespace, "susp", {"runPolicy": {"suspend": True}})
    job = wait_for(
        "suspended with no pods",
        lambda: None if pods_of(core, namespace, "susp") else suspended(custom, namespace, "susp"),
        timeout=90,
    )
    (saved,) = ckpt.complete_steps(directory, ckpt.expected_files(2, 0))  # the stop's, no interval's
    assert 40 <= saved < 100, saved

    def saved_in_status() -> int | None:  # from the stopping ranks' exit records: their pages are gone
        return ((get(custom, namespace, "susp").get("status") or {}).get("progress") or {}).get("lastCheckpointStep")

    assert wait_for("the stop's save in status", lambda: saved_in_status() == saved, timeout=30)
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0
    assert "startTime" not in job["status"]  # cleared once it ran: removed, not left stored by a merge patch

    patch_spec(custom, namespace, "susp", {"runPolicy": {"suspend": False}})
    job = wait_condition(custom, namespace, "susp", "Succeeded", timeout=240)
    resumed = trainer_events(core, namespace, "susp-worker-0", "resume")
    assert [e["step"] for e in resumed] == [saved]  # exactly where it stopped: no step lost
    assert (condition(job, "Suspended") or {}).get("reason") == "JobResumed"
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0  # suspending is no failure
    progress = job["status"]["progress"]
    assert (progress["step"], progress["totalSteps"], progress["percent"]) == (160, 160, 100.0)  # the final step
    reasons = events_of(core, namespace, "susp")
    assert "JobSuspended" in reasons and "JobResumed" in reasons


def test_active_deadline_fails_a_running_job_and_stops_its_pods(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    body = training_job("late", SLEEP, runPolicy={"activeDeadlineSeconds": 8, "cleanPodPolicy": "None"})
    create(custom, namespace, body)
    wait_for(
        "running", lambda: (get(custom, namespace, "late").get("status") or {}).get("phase") == "Running", timeout=60
    )
    job = wait_condition(custom, namespace, "late", "Failed", timeout=60)
    failed = condition(job, "Failed") or {}
    assert failed["reason"] == "DeadlineExceeded" and "activeDeadlineSeconds (8 s)" in failed["message"]
    # Stopped even under cleanPodPolicy None: a job past its deadline holds nothing.
    wait_for("no running pods", lambda: not live_pods(core, namespace, "late"), timeout=60)
    assert "DeadlineExceeded" in events_of(core, namespace, "late")


@pytest.mark.parametrize("script", ["import sys; sys.exit(0)", "import sys; sys.exit(3)"], ids=["succeeded", "failed"])
def test_ttl_after_finished_deletes_the_job_and_its_pods(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, script: str
) -> None:
    body = training_job("brief", script, runPolicy={"ttlSecondsAfterFinished": 5, "cleanPodPolicy": "None"})
    body["spec"]["workers"]["restartPolicy"] = "Never"
    create(custom, namespace, body)
    kind = "Succeeded" if "exit(0)" in script else "Failed"
    job = wait_condition(custom, namespace, "brief", kind, timeout=60)
    assert job["status"]["completionTime"]
    assert pods_of(core, namespace, "brief")  # cleanPodPolicy None keeps them until the TTL

    def gone() -> bool:
        try:
            get(custom, namespace, "brief")
        except client.ApiException as e:
            return bool(e.status == 404)
        return False

    wait_for("the job deleted after its TTL", gone, timeout=60)
    wait_for("its pods collected", lambda: not pods_of(core, namespace, "brief"), timeout=60)


@pytest.mark.parametrize(("policy", "left"), [("Running", ["keep-worker-0"]), ("All", [])], ids=["running", "all"])
def test_clean_pod_policy_on_failure(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, policy: str, left: list[str]
) -> None:
    script = "import os, sys, time\nif os.environ['RANK'] == '0': sys.exit(3)\ntime.sleep(120)"
    body = training_job("keep", script, runPolicy={"cleanPodPolicy": policy})
    body["spec"]["workers"]["restartPolicy"] = "Never"
    create(custom, namespace, body)
    wait_condition(custom, namespace, "keep", "Failed", timeout=60)
    # Running: the rank still running is stopped, the failed one kept for its logs; All: both go.
    wait_for(f"pods left: {left}", lambda: sorted(p.metadata.name for p in live_pods(core, namespace, "keep")) == left,
             timeout=60)  # fmt: skip
