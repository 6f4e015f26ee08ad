"""A rank's life in a real container: the kernel's OOM killer and the job's status, a rank killed inside its
container and replaced, `kubectl logs` and `kubectl exec` on a rank."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader import Client
from ringleader.diagnose import Finding
from ringleader.logmerge import EPOCH
from ringleader_devcluster.layout import Layout

from tests.support.cluster import kubectl, logs, wait_for
from tests.support.diagnosis import diagnose_job
from tests.support.jobs import condition, create, pods_of

from .helpers import KILL_TRAINING_PROCESS, diagnosis, is_true, trainer_job, wait_finished

pytestmark = pytest.mark.usefixtures("operator")


def said_event(core: client.CoreV1Api, ns: str, job: str, match: Callable[[Any], bool]) -> None:
    """Wait for an Event about the job that `match`es: the operator posts its events in the background, a moment
    after the status write that a test saw."""

    def found() -> bool:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={job}").items
        return any(match(e) for e in events)

    wait_for(f"the event about {job}", found, timeout=20)


def test_a_rank_whose_image_cannot_be_pulled_is_named_and_counted_against_the_infrastructures_budget(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str
) -> None:
    """The real node's kubelet cannot pull the rank's image (the dev registry has no such name): once it has
    tried again (ImagePullBackOff) the rank is counted as the infrastructure's and made again; past the class's
    budget the job fails naming the image, instead of waiting for ever."""
    ns = restricted_namespace
    body = trainer_job("nopull", "allreduce", "--steps", "20", workers=1,
                       runPolicy={"failureBudgets": {"infrastructure": {"limit": 1}}})  # fmt: skip
    container = body["spec"]["workers"]["template"]["spec"]["containers"][0]
    missing = container["image"].rsplit("/", 1)[0] + "/no-such-image:dev"  # the same registry
    container["image"] = missing
    create(custom, ns, body)
    job = wait_finished(custom, ns, "nopull", timeout=240)
    failed = condition(job, "Failed") or {}
    assert failed.get("reason") == "FailureBudgetExceeded", diagnosis(core, ns, job)
    assert "worker 0 (pod nopull-worker-0 on node " in failed["message"], failed
    assert "could not start its container (ImagePullBackOff: " in failed["message"], failed
    assert missing in failed["message"] and "class Infrastructure" in failed["message"], failed
    counted = job["status"]["failures"]["Infrastructure"]
    assert (counted["total"], counted["inWindow"]) == (2, 2), counted  # the first made again, the second too many
    assert job["status"]["lastFailure"]["class"] == "Infrastructure" and "UserCode" not in job["status"]["failures"]
    said_event(core, ns, "nopull", lambda e: e.reason == "RankNotStarted" and missing in (e.message or ""))


def test_a_rank_over_its_memory_limit_is_oom_killed_and_a_rule_fails_the_job_at_once(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str, kubeconfig: Path
) -> None:
    ns = restricted_namespace
    # 64 MiB does not hold torch's import: the kernel kills the rank. Under ExitCode 137 is retried, but the
    # role's rule `OOMKilled -> FailJob` comes first: the job fails at the first kill, nothing restarted.
    body = trainer_job("oom", "allreduce", "--steps", "20", workers=1, memory="64Mi", runPolicy={"backoffLimit": 3})
    body["spec"]["workers"]["restartPolicy"] = "ExitCode"
    body["spec"]["workers"]["failureRules"] = [{"action": "FailJob", "onReasons": ["OOMKilled"]}]
    create(custom, ns, body)
    job = wait_finished(custom, ns, "oom", timeout=180)
    failed = condition(job, "Failed") or {}
    assert is_true(job, "Failed") and failed.get("reason") == "FailureRule", diagnosis(core, ns, job)
    assert (
        "exit code 137 (OOMKilled), class Resources: OOMKilled: out of memory at the container's limit; "
        "spec.workers.failureRules[0] (FailJob) matched"
    ) in failed["message"], failed
    assert job["status"]["lastFailure"]["class"] == "Resources"
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0
    said_event(core, ns, "oom", lambda e: "(OOMKilled)" in (e.message or "") and e.reason == "FailureRule")
    said = diagnose_job(kubeconfig, ns, "oom", record_as="oom-killed")  # `ringleader diagnose oom`
    oom = next((f for f in said.findings if f.rule == "oom-killed"), None)
    assert oom is not None and oom.what.startswith("worker-0 was killed for using more memory"), said.text()
    assert "its memory limit is 64Mi" in oom.detail, said.text()


def test_a_rank_killed_inside_its_container_is_replaced_and_logs_and_exec_work(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str, layout: Layout,
    kubeconfig: Path,
) -> None:  # fmt: skip
    ns = restricted_namespace
    body = trainer_job("kill", "allreduce", "--steps", "300", "--straggler", "0:0.05", workers=3)
    body["spec"]["workers"]["restartPolicy"] = "ExitCode"
    create(custom, ns, body)

    def stepping() -> bool:
        try:
            out = kubectl(layout, kubeconfig, "logs", "-n", ns, "kill-worker-1", "-c", "trainer", check=False).stdout
        except AssertionError:
            return False
        return any(json.loads(line).get("step", 0) >= 40 for line in out.splitlines() if line.startswith("{"))

    wait_for("worker 1 past step 40 (kubectl logs)", stepping, timeout=120)
    victim = next(p for p in pods_of(core, ns, "kill") if p.metadata.name == "kill-worker-1")
    out = kubectl(layout, kubeconfig, "exec", "-n", ns, "kill-worker-1", "-c", "trainer", "--",
                  "python", "-c", KILL_TRAINING_PROCESS).stdout  # fmt: skip
    assert out.startswith("killed [") and out.strip() != "killed []", out
    wait_for(
        "a new pod for worker 1",
        lambda: any(p.metadata.name == "kill-worker-1" and p.metadata.uid != victim.metadata.uid
                    for p in pods_of(core, ns, "kill")),
        timeout=60,
    )  # fmt: skip
    job = wait_finished(custom, ns, "kill", timeout=300)
    assert is_true(job, "Succeeded"), diagnosis(core, ns, job)
    restarts = {role: s.get("restarts", 0) for role, s in job["status"]["replicaStatuses"].items()}
    assert sum(restarts.values()) == 1, restarts
    assert '"event": "heal"' in logs(core, ns, "kill-worker-0", "trainer")  # it healed worker 1's replacement
    # the supervisor, the container's PID 1, ended as its SIGKILLed training process did: 137, retried
    said_event(core, ns, "kill", lambda e: e.reason == "RankRestarting" and "exit code 137" in (e.message or ""))
    # `ringleader logs kill`: the kubelet stamps every line, so the ranks' lines interleave by time (not rank after
    # rank); worker 1's killed attempt left its last lines (RankOutput) and a marker before its second attempt.
    merged = list(Client(ns, str(kubeconfig)).logs("kill"))
    assert all(line.time > EPOCH for line in merged if not line.marker)
    switches = sum(1 for a, b in pairwise(merged) if a.rank != b.rank)
    assert switches > 2 * 3, switches  # 3 ranks one after another would switch twice
    w1 = [line for line in merged if line.rank == "worker-1"]
    texts = [line.text for line in w1]
    kept = texts.index("--- worker-1: the last lines of attempt 0 (its pod is gone; kept by the operator) ---")
    second = next(i for i, t in enumerate(texts) if t.startswith("--- worker-1: attempt 1 starts (worker 1 "))
    assert kept < second and "exit code 137" in texts[second], texts[second]
    assert {line.attempt for line in w1[second + 1 :]} == {1} and len(w1) > second + 3


def test_an_image_that_cannot_be_pulled_and_a_volume_that_cannot_mount_are_diagnosed(
    custom: client.CustomObjectsApi, restricted_namespace: str, kubeconfig: Path
) -> None:
    """On the real node's kubelet: a tag the registry does not have (ErrImagePull, ImagePullBackOff), and a
    ConfigMap volume whose ConfigMap does not exist (FailedMount warnings): `ringleader diagnose` names the rank,
    the image and what to check for the one, the pod's warning for the other."""
    ns = restricted_namespace
    pull = trainer_job("pull", "allreduce", workers=1)
    container = pull["spec"]["workers"]["template"]["spec"]["containers"][0]
    container["image"] = container["image"].rsplit(":", 1)[0] + ":no-such-tag"
    mount = trainer_job("mount", "allreduce", workers=1)
    pod = mount["spec"]["workers"]["template"]["spec"]
    pod["volumes"] = [{"name": "script", "configMap": {"name": "not-made"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "script", "mountPath": "/scripts"}]
    for body in (pull, mount):
        create(custom, ns, body)

    def found(name: str, rule: str) -> Finding | None:
        said = diagnose_job(kubeconfig, ns, name, record_as={"pull": "image-pull", "mount": "failed-mount"}[name])
        return next((f for f in said.findings if f.rule == rule), None)

    image = wait_for("the pull failure in diagnose", lambda: found("pull", "image-pull"), timeout=120, every=2)
    assert image.what.startswith("worker-0 cannot pull image ") and image.what.endswith(":no-such-tag"), image
    assert image.detail.startswith(("ErrImagePull", "ImagePullBackOff")), image
    warning = wait_for("the mount failure in diagnose", lambda: found("mount", "pod-warning"), timeout=120, every=2)
    assert warning.what == "mount-worker-0: FailedMount" and '"not-made" not found' in warning.detail, warning
