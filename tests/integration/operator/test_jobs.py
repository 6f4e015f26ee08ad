"""TrainingJobs through the operator on the dev cluster: pods, service and env per strategy, DNS, kubectl wait,
admission and operator-level validation, restarts, garbage collection, operator restarts."""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from ringleader_api import Role
from ringleader_devcluster import controlplane, operatorprocess
from ringleader_devcluster.layout import Layout
from ringleader_operator.names import rank_labels

from tests.support.cluster import kubectl, logs, wait_for
from tests.support.jobs import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    create,
    get,
    pods_of,
    training_job,
    wait_condition,
    wait_rounds,
)

pytestmark = pytest.mark.usefixtures("operator")

SLEEP = "import time; time.sleep(60)"


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


@pytest.mark.parametrize(
    ("spec", "names", "env"),
    [
        ({}, ["s-worker-0", "s-worker-1"], {"RINGLEADER_STRATEGY": "allreduce", "WORLD_SIZE": "2"}),
        (
            {"strategy": "parameter-server", "parameterServer": {"mode": "asynchronous"}},
            ["s-ps-0", "s-ps-1", "s-worker-0", "s-worker-1"],
            {
                "RINGLEADER_STRATEGY": "parameter-server",
                "RINGLEADER_PS_MODE": "asynchronous",
                "RINGLEADER_PS_ADDRS": "s-ps-0.s:29600,s-ps-1.s:29600",
            },
        ),
        (
            {"strategy": "local-sgd", "localSGD": {"period": 4}},
            ["s-worker-0", "s-worker-1"],
            {"RINGLEADER_STRATEGY": "local-sgd", "RINGLEADER_LOCAL_SGD_PERIOD": "4"},
        ),
        (
            {"strategy": "diloco", "diloco": {"period": 40, "outerMomentum": 0.8}},
            ["s-worker-0", "s-worker-1"],
            {
                "RINGLEADER_STRATEGY": "diloco",
                "RINGLEADER_DILOCO_PERIOD": "40",
                "RINGLEADER_DILOCO_OUTER_LR": "0.7",
                "RINGLEADER_DILOCO_OUTER_MOMENTUM": "0.8",
            },
        ),
    ],
    ids=["allreduce", "parameter-server", "local-sgd", "diloco"],
)
def test_each_strategy_gets_its_pods_service_and_env(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    spec: dict[str, Any],
    names: list[str],
    env: dict[str, str],
) -> None:
    create(custom, namespace, training_job("s", SLEEP, **spec))

    def all_pods() -> list[Any]:
        pods = pods_of(core, namespace, "s")
        return pods if len(pods) == len(names) else []

    assert sorted(p.metadata.name for p in wait_for("all rank pods", all_pods)) == names
    svc = core.read_namespaced_service("s", namespace)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses
    worker1 = core.read_namespaced_pod("s-worker-1", namespace)
    assert (worker1.spec.hostname, worker1.spec.subdomain) == ("s-worker-1", "s")
    assert worker1.metadata.owner_references[0].kind == "TrainingJob"
    got = env_of(worker1)
    assert {k: got.get(k) for k in env} == env
    assert (got["RANK"], got["MASTER_ADDR"], got["MASTER_PORT"]) == ("1", "s-worker-0.s", "29500")


RESOLVE = """
import os, socket, sys, time
n = int(os.environ["WORLD_SIZE"])
job = os.environ["RINGLEADER_JOB_NAME"]
names = [os.environ["MASTER_ADDR"]] + [f"{job}-worker-{i}.{job}" for i in range(n)]
deadline = time.monotonic() + 30
while True:
    try:
        print(" ".join(socket.gethostbyname(x) for x in names)); break
    except OSError:
        if time.monotonic() > deadline: sys.exit("names did not resolve")
        time.sleep(0.2)
time.sleep(5)  # like any real rank, stay up while the peers look each other up (finished pods leave DNS)
"""


def test_rank_dns_names_resolve_and_kubectl_wait_returns_on_succeeded(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    body = training_job("dns", RESOLVE, workers=3)
    body["spec"]["workers"]["restartPolicy"] = "Never"  # a resolution failure shows at once, not as retries
    create(custom, namespace, body)
    res = kubectl(
        layout, kubeconfig, "-n", namespace, "wait", "--for=condition=Succeeded", "tj/dns", "--timeout=90s",
        timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, (res.stderr, get(custom, namespace, "dns").get("status"))
    ips = {p.metadata.name: p.status.pod_ip for p in pods_of(core, namespace, "dns")}
    expected = " ".join([ips["dns-worker-0"]] + [ips[f"dns-worker-{i}"] for i in range(3)])
    for i in range(3):
        assert logs(core, namespace, f"dns-worker-{i}", container="trainer").strip() == expected
    job = get(custom, namespace, "dns")
    assert job["status"]["phase"] == "Succeeded" and job["status"]["completionTime"]
    assert job["status"]["replicaStatuses"]["worker"]["succeeded"] == 3
    reasons = {e.reason for e in core.list_namespaced_event(namespace).items if e.involved_object.kind == "TrainingJob"}
    assert {"JobCreated", "JobSucceeded"} <= reasons


def test_the_api_server_rejects_an_invalid_spec_naming_the_field(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    body = training_job("bad", SLEEP, strategy="parameter-server")
    body["spec"]["parameterServers"]["replicas"] = 0
    with pytest.raises(ApiException) as err:
        create(custom, namespace, body)
    assert err.value.status == 422 and "spec.parameterServers.replicas" in err.value.body
    body = training_job("bad", SLEEP, parameterServer={"mode": "synchronous"})
    with pytest.raises(ApiException) as err:
        create(custom, namespace, body)
    assert "spec.parameterServer is only allowed when spec.strategy is parameter-server" in err.value.body


def _changed(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`body` with the value at `path` (dotted, from the object's top) set; `name` sets metadata.name."""
    node = body
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return body


PS = {"strategy": "parameter-server", "parameterServer": {"mode": "synchronous"}}
PS_BACKUP = {"strategy": "parameter-server", "parameterServer": {"mode": "synchronous", "backup": True}}


@pytest.mark.parametrize(
    ("spec", "path", "value", "named"),
    [
        ({}, "metadata.name", "1abc", "metadata.name must be a DNS-1035 label"),
        ({}, "metadata.name", "a" * 60, "metadata.name is too long: '<name>-worker-<index>' must fit 63"),
        ({}, "spec.localSGD", {"period": 4}, "spec.localSGD is only allowed when spec.strategy is local-sgd"),
        ({}, "spec.sharded", {"stage": 2}, "spec.sharded is only allowed when spec.strategy is sharded"),
        ({}, "spec.diloco", {"period": 4}, "spec.diloco is only allowed when spec.strategy is diloco"),
        ({"strategy": "diloco"}, "spec.diloco", {"outerMomentum": 1}, "spec.diloco.outerMomentum in body should be"),
        ({"strategy": "diloco"}, "spec.diloco", {"outerLearningRate": 0}, "spec.diloco.outerLearningRate in body"),
        ({"strategy": "sharded"}, "spec.sharded", {"stage": 4}, "spec.sharded.stage in body should be less than"),
        ({"strategy": "pipeline"}, "spec.pipeline", {"stages": 3}, "spec.pipeline.stages must divide the worker ranks"),
        ({"strategy": "sharded"}, "spec.sharded", {"replicas": 3}, "spec.sharded.replicas must divide the worker"),
        ({"strategy": "sharded"}, "spec.sharded", {"stage": 1, "replicas": 2}, "and needs stage 2 or 3"),
        ({}, "spec.workers", {"replicas": 2, "gpus": 1, "procsPerPod": 2},
         "spec.workers.procsPerPod must equal spec.workers.gpus when"),
        (PS, "spec.parameterServer.maxStaleness", 2, "spec.parameterServer.maxStaleness is only allowed when"),
        (PS_BACKUP, "spec.parameterServers.replicas", 1, "spec.parameterServer.backup needs two or more parameter"),
        ({}, "spec.checkpoint", {"claimName": ""}, "spec.checkpoint.claimName must not be empty"),
        ({}, "spec.workers.minReplicas", 3, "spec.workers.replicas must be at least spec.workers.minReplicas"),
        ({}, "spec.workers.maxReplicas", 1, "spec.workers.replicas must be at most spec.workers.maxReplicas"),
        (PS, "spec.workers.maxReplicas", 4, "spec.workers.minReplicas and maxReplicas (elastic resize) are for"),
        ({}, "spec.workers.replicas", 100001, "spec.workers.replicas in body should be less than or equal to 100000"),
        ({}, "spec.workers.gpus", 129, "spec.workers.gpus in body should be less than or equal to 128"),
        ({}, "spec.runPolicy", {"activeDeadlineSeconds": 10**12}, "spec.runPolicy.activeDeadlineSeconds in body"),
        ({}, "spec.runPolicy", {"ttlSecondsAfterFinished": 10**10}, "spec.runPolicy.ttlSecondsAfterFinished in body"),
        ({}, "spec.runPolicy", {"restartBackoff": {"capSeconds": 1e10}}, "spec.runPolicy.restartBackoff.capSeconds"),
        ({}, "spec.checkpoint", {"keep": 1001}, "spec.checkpoint.keep in body should be less than or equal to 1000"),
    ],
    ids=["dns-1035", "name-length", "local-sgd-on-allreduce", "sharded-on-allreduce", "diloco-on-allreduce",
         "momentum-below-one", "outer-lr-positive", "stage-bound", "stages-divide",
         "replica-groups-divide", "replica-groups-need-fsdp",
         "procs-vs-gpus", "staleness-without-bounded", "backup-on-one-shard", "empty-claim",
         "below-min", "above-max", "elastic-ps", "replicas-bound", "gpus-bound", "deadline-bound", "ttl-bound",
         "backoff-bound", "keep-bound"],
)  # fmt: skip
def test_each_schema_rule_and_bound_is_enforced_by_the_api_server_naming_the_field(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], path: str, value: Any, named: str
) -> None:
    body = _changed(training_job("ok", SLEEP, **copy.deepcopy(spec)), path, value)
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, dry_run="All")
    assert err.value.status == 422 and named in json.loads(err.value.body)["message"], err.value.body


@pytest.mark.parametrize(
    ("spec", "path", "value", "named"),
    [
        ({}, "spec.strategy", "local-sgd", "spec.strategy is immutable"),
        ({}, "spec.workers.template", {"spec": {"containers": [{"name": "trainer", "image": "other"}]}},
         "spec.workers.template is immutable"),
        ({}, "spec.workers.replicas", 3, "spec.workers.replicas is immutable unless the job is elastic"),
        (PS, "spec.parameterServers.replicas", 3, "spec.parameterServers.replicas is immutable"),
    ],
    ids=["strategy", "template", "replicas", "ps-replicas"],
)  # fmt: skip
def test_what_is_immutable_is_refused_on_update_naming_the_field(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], path: str, value: Any, named: str
) -> None:
    body = training_job("frozen", SLEEP, runPolicy={"suspend": True}, **copy.deepcopy(spec))  # suspended: no pods
    create(custom, namespace, body)
    patch = _changed({}, path, value)
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "frozen", patch)
    assert err.value.status == 422 and named in json.loads(err.value.body)["message"], err.value.body


@pytest.mark.parametrize(
    ("container", "field"),
    [
        (None, "spec.workers.template.spec.containers must name at least one container"),
        ({"env": [{"name": "RANK", "value": "0"}]}, "spec.workers.template.spec.containers[0].env sets RANK"),
    ],
    ids=["no-container", "sets-rank"],
)
def test_a_template_the_schema_cannot_check_fails_with_invalid_spec_and_creates_nothing(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, container: dict[str, Any] | None,
    field: str,
) -> None:  # fmt: skip
    body = training_job("bad", SLEEP)
    containers = body["spec"]["workers"]["template"]["spec"]["containers"]
    if container is None:
        containers.clear()
    else:
        containers[0] |= container
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "bad", "Failed")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec"
    assert failed["message"].startswith(field), failed["message"]
    assert pods_of(core, namespace, "bad") == []


def test_a_pod_the_api_server_refuses_fails_the_job_and_leaves_no_pods(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    body = training_job("refused", SLEEP, workers=3)
    body["spec"]["workers"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "refused", "Failed")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec"
    assert "imagePullPolicy" in failed["message"] and "Sometimes" in failed["message"]
    wait_for("no pods", lambda: not pods_of(core, namespace, "refused"), timeout=30)


def test_never_policy_failure_names_the_rank_and_exit_code(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    script = "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(3)\ntime.sleep(60)"
    body = training_job("never", script)
    body["spec"]["workers"]["restartPolicy"] = "Never"
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "never", "Failed")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "RankFailed"
    assert failed["message"] == (
        "worker 1 (pod never-worker-1 on node process-node) failed with exit code 3, class UserCode: exit code 3"
    )
    # cleanPodPolicy Running (the default): the surviving rank is stopped.
    wait_for(
        "running rank cleaned up",
        lambda: all(
            p.status.phase != "Running" or p.metadata.deletion_timestamp for p in pods_of(core, namespace, "never")
        ),
    )


def test_on_failure_restarts_the_failed_rank_and_the_job_succeeds(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    marker = Path("/tmp") / f"ringleader-test-{uuid.uuid4().hex}"
    script = (
        "import os, sys, time\n"
        f"m = '{marker}'\n"
        "if os.environ['RANK'] == '1' and not os.path.exists(m):\n"
        "    open(m, 'w').close(); sys.exit(1)\n"
        "time.sleep(2)\n"
    )
    create(custom, namespace, training_job("flaky", script))
    try:
        job = wait_condition(custom, namespace, "flaky", "Succeeded")
    finally:
        marker.unlink(missing_ok=True)
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 1
    restarting = condition(job, "Restarting")
    assert restarting is not None and restarting["status"] == "False"
    assert (
        "worker 1 (pod flaky-worker-1 on node process-node) failed with exit code 1" in restarting["message"]
        or restarting["reason"]
    )


def test_deleting_the_job_deletes_its_pods(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create(custom, namespace, training_job("gc", SLEEP))
    wait_for("pods", lambda: len(pods_of(core, namespace, "gc")) == 2)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gc")
    wait_for("pods garbage-collected", lambda: not pods_of(core, namespace, "gc"), timeout=60)


@pytest.mark.serial  # it stops the controller-manager every test uses
def test_a_job_created_again_under_the_same_name_runs_its_own_pods(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, layout: Layout
) -> None:
    create(custom, namespace, training_job("again", "print('first')"))
    wait_condition(custom, namespace, "again", "Succeeded")
    first = {p.metadata.uid for p in pods_of(core, namespace, "again")}
    # With the garbage collector (in the controller-manager) down, the first job's finished pods outlive it, as
    # they do for a moment whenever a job is deleted and created again at once.
    controlplane.stop_component("kube-controller-manager")
    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "again")
        wait_for("the first job gone", lambda: not custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL)["items"] or None)  # fmt: skip
        body = training_job("again", "import sys; sys.exit(3)")
        body["spec"]["workers"]["restartPolicy"] = "Never"
        create(custom, namespace, body)
        wait_rounds(3)  # rounds of the new job while the old pods are still there (it retries every 2 s)
        job = get(custom, namespace, "again")
        assert not condition(job, "Succeeded"), job.get("status")  # it did not take the old pods for its own
        assert {p.metadata.uid for p in pods_of(core, namespace, "again")} == first
    finally:
        controlplane.start_control_plane(layout)
    job = wait_condition(custom, namespace, "again", "Failed", timeout=90)
    assert not condition(job, "Succeeded")
    assert not first & {p.metadata.uid for p in pods_of(core, namespace, "again")}


def test_pods_that_only_carry_the_jobs_labels_are_never_taken_for_its_ranks(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    """Two pods made by hand under the ranks' names and labels, finished Succeeded, do not finish the job: it
    neither adopts nor deletes them, says so in an event, and runs its own ranks once they are gone."""
    body = training_job("stray", "print('my own rank')")
    template = body["spec"]["workers"]["template"]
    for i in range(2):
        labels = rank_labels("stray", Role.WORKER, i)
        spec = {**template["spec"], "restartPolicy": "Never"}
        spec["containers"] = [{**spec["containers"][0], "command": ["python", "-c", "print('not a rank')"]}]
        core.create_namespaced_pod(
            namespace, {"metadata": {"name": f"stray-worker-{i}", "labels": labels}, "spec": spec}
        )
    wait_for("the hand-made pods Succeeded", lambda: [
        p.status.phase for p in pods_of(core, namespace, "stray")] == ["Succeeded"] * 2, timeout=60)  # fmt: skip
    create(custom, namespace, body)

    def ignored() -> list[str]:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=stray").items
        return [e.message for e in events if e.reason == "ForeignPodsIgnored"]

    message = wait_for("the event about the hand-made pods", ignored, timeout=30)[0]
    assert message.endswith("ignored: stray-worker-0, stray-worker-1"), message
    time.sleep(3)  # more rounds: the job still waits for its own ranks
    job = get(custom, namespace, "stray")
    assert not condition(job, "Succeeded") and (job.get("status") or {}).get("phase") != "Succeeded", job
    assert len(ignored()) == 1  # once, not every round
    assert all(not p.metadata.owner_references for p in pods_of(core, namespace, "stray"))  # nor adopted
    for i in range(2):
        core.delete_namespaced_pod(f"stray-worker-{i}", namespace, grace_period_seconds=0)
    wait_condition(custom, namespace, "stray", "Succeeded", timeout=90)
    assert all(p.metadata.owner_references for p in pods_of(core, namespace, "stray"))
    assert "my own rank" in logs(core, namespace, "stray-worker-0", container="trainer")


@pytest.mark.serial  # it restarts the operator every test uses
def test_restarting_the_operator_mid_job_creates_no_duplicate_pod(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create(custom, namespace, training_job("steady", "import time; time.sleep(8)", workers=4))
    wait_condition(custom, namespace, "steady", "Running")
    before = {p.metadata.name: p.metadata.uid for p in pods_of(core, namespace, "steady")}
    operatorprocess.operator_down()
    operatorprocess.operator_up()
    job = wait_condition(custom, namespace, "steady", "Succeeded", timeout=60)
    after = {p.metadata.name: p.metadata.uid for p in pods_of(core, namespace, "steady")}
    assert after == before and len(before) == 4
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0


FAKE_TRAINER = """
import os, time
from prometheus_client import Gauge, start_http_server
step = Gauge("ringleader_trainer_step", "steps")
loss = Gauge("ringleader_trainer_loss", "loss")
sps = Gauge("ringleader_trainer_samples_per_second", "throughput")
if os.environ["RANK"] == "0":
    start_http_server(int(os.environ["RINGLEADER_METRICS_PORT"]))
for i in range(1, 31):
    step.set(i * 10); loss.set(2.0 / i); sps.set(100.0 + i)
    time.sleep(0.5)
"""


def test_status_progress_follows_rank_zero_metrics(
    custom: client.CustomObjectsApi, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    create(custom, namespace, training_job("prog", FAKE_TRAINER))
    steps: list[int] = []

    def two_steps() -> bool:
        progress = get(custom, namespace, "prog").get("status", {}).get("progress")
        if progress and (not steps or progress["step"] != steps[-1]):
            steps.append(progress["step"])
        return len(steps) >= 2

    wait_for("status.progress.step to move", two_steps, timeout=40)
    assert steps[1] > steps[0] > 0
    job = get(custom, namespace, "prog")
    assert 0 < job["status"]["progress"]["loss"] <= 2.0 and job["status"]["progress"]["samplesPerSecond"] > 100
    row = kubectl(layout, kubeconfig, "-n", namespace, "get", "tj", "prog", "--no-headers").stdout.split()
    assert row[1] == "allreduce" and row[3] == "Running" and int(row[4]) >= steps[1]
    wait_condition(custom, namespace, "prog", "Succeeded", timeout=60)
