"""Builders compared as whole objects, and the env contract for each strategy."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role, TrainingJob
from ringleader_operator.builders import (
    InvalidTemplate,
    build_pod,
    delete_grace_seconds,
    desired_ranks,
    stop_grace_seconds,
    validate,
)
from ringleader_operator.gang_backends import choose, named_scheduler
from ringleader_operator.gang_backends.pod_groups import PodGroupScheduler
from ringleader_operator.job_objects import (
    build_coordinator,
    build_coordinator_network_policy,
    build_coordinator_service,
    build_network_policy,
    build_service,
    build_token_secret,
)
from ringleader_operator.names import coordinator_name
from ringleader_operator.rank_env import cpu_threads, rank_env, wants_coordinator

from .builders import training_job


def created_pod(job: TrainingJob, role: Role, index: int, **kwargs: Any) -> dict[str, Any]:
    """Rank (role, index)'s pod as a round creates it: built, then marked by the job's gang backend (the
    operator's gate unless the pods name a gang scheduler)."""
    pod = build_pod(job, role, index, **kwargs)
    choose(job).mark(pod, job)
    return pod


UID = "1111-2222"
OWNER = {
    "apiVersion": "ringleader.dev/v1alpha1",
    "kind": "TrainingJob",
    "name": "mnist",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": True,
}


# The job's token, mounted read-only in every rank's trainer container.
TOKEN_VOLUME = {"name": "ringleader-token", "secret": {"secretName": "mnist-token-1111-222", "defaultMode": 0o444}}
TOKEN_MOUNT = {"name": "ringleader-token", "mountPath": "/var/run/ringleader", "readOnly": True}


# What every object the job owns as a whole (its Service, its PodGroup) carries.
JOB_OBJECT_META = {
    "name": "mnist",
    "namespace": "ml",
    "labels": {"ringleader.dev/job-name": "mnist"},
    "ownerReferences": [OWNER],
}


def template(**container: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"team": "ml"}},
        "spec": {
            "containers": [
                {"name": "trainer", "image": "ringleader/trainer:0.1", "command": ["python", "train.py"], **container}
            ]
        },
    }


def job(**spec: Any) -> TrainingJob:
    return training_job(name="mnist", namespace="ml", uid=UID, template=template(), **spec)


def env_of(pod: dict[str, Any], container: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][container]["env"]}


def test_worker_zero_pod_whole_object() -> None:
    pod = created_pod(job(), Role.WORKER, 0)
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "mnist-worker-0",
            "namespace": "ml",
            "labels": {
                "team": "ml",
                "ringleader.dev/job-name": "mnist",
                "ringleader.dev/replica-type": "worker",
                "ringleader.dev/replica-index": "0",
            },
            "annotations": {"ringleader.dev/attempt": "0", "ringleader.dev/workers": "2"},
            "ownerReferences": [OWNER],
        },
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "ringleader/trainer:0.1",
                    "command": ["python", "train.py"],
                    "env": [
                        {"name": "MASTER_ADDR", "value": "mnist-worker-0.mnist"},
                        {"name": "MASTER_PORT", "value": "29500"},
                        {"name": "RINGLEADER_JOB_NAME", "value": "mnist"},
                        {"name": "RINGLEADER_NAMESPACE", "value": "ml"},
                        {"name": "RINGLEADER_ROLE", "value": "worker"},
                        {"name": "RINGLEADER_INDEX", "value": "0"},
                        {"name": "RINGLEADER_STRATEGY", "value": "allreduce"},
                        {"name": "RINGLEADER_NUM_WORKERS", "value": "2"},
                        {"name": "RINGLEADER_NUM_PS", "value": "0"},
                        {"name": "RINGLEADER_GLOBAL_RANK", "value": "0"},
                        {"name": "RINGLEADER_GLOBAL_WORLD_SIZE", "value": "2"},
                        {"name": "RINGLEADER_METRICS_PORT", "value": "9090"},
                        {"name": "RINGLEADER_TOKEN_FILE", "value": "/var/run/ringleader/token"},
                        {"name": "RINGLEADER_ATTEMPT", "value": "0"},
                        {"name": "WORLD_SIZE", "value": "2"},
                        {"name": "RANK", "value": "0"},
                        {"name": "LOCAL_RANK", "value": "0"},
                        {"name": "LOCAL_WORLD_SIZE", "value": "1"},
                        {"name": "GROUP_RANK", "value": "0"},
                        {"name": "RINGLEADER_PROCS_PER_POD", "value": "1"},
                        {"name": "PET_NNODES", "value": "2"},
                        {"name": "PET_NPROC_PER_NODE", "value": "1"},
                        {"name": "PET_NODE_RANK", "value": "0"},
                        {"name": "PET_MASTER_ADDR", "value": "mnist-worker-0.mnist"},
                        {"name": "PET_MASTER_PORT", "value": "29500"},
                        {"name": "OMP_NUM_THREADS", "value": "1"},  # asks for no CPU: one thread per process
                    ],
                    "terminationMessagePolicy": "FallbackToLogsOnError",  # a failed rank's last lines, kept
                    "ports": [
                        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                        {"name": "c10d", "containerPort": 29500, "protocol": "TCP"},
                    ],
                    "volumeMounts": [TOKEN_MOUNT],
                }
            ],
            "volumes": [TOKEN_VOLUME],
            "restartPolicy": "Never",
            "tolerations": [
                {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
                for k in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
            ],
            "hostname": "mnist-worker-0",
            "subdomain": "mnist",
            "schedulingGates": [{"name": "ringleader.dev/gang"}],  # lifted when the whole gang fits
        },
    }


def test_service_whole_object() -> None:
    assert build_service(job()) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": JOB_OBJECT_META,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"ringleader.dev/job-name": "mnist"},
            "ports": [{"name": "c10d", "port": 29500, "targetPort": 29500, "protocol": "TCP"}],
        },
    }


PS_JOB = {
    "strategy": "parameter-server",
    "parameterServer": {"mode": "bounded-staleness", "maxStaleness": 4},
    "parameterServers": {"replicas": 2, "template": template()},
}
PS_BACKUP_JOB = PS_JOB | {"parameterServer": {"mode": "synchronous", "backup": True}}


@pytest.mark.parametrize(
    ("spec", "role", "index", "expected", "absent"),
    [
        (
            {},
            Role.WORKER,
            1,
            {"RANK": "1", "WORLD_SIZE": "2", "RINGLEADER_STRATEGY": "allreduce"},
            [
                "RINGLEADER_PS_ADDRS",
                "RINGLEADER_LOCAL_SGD_PERIOD",
                "RINGLEADER_DILOCO_PERIOD",
                "RINGLEADER_SHARDED_STAGE",
                "RINGLEADER_CHECKPOINT_DIR",
            ],
        ),
        (
            PS_JOB,
            Role.WORKER,
            1,
            {
                "RANK": "1",
                "WORLD_SIZE": "2",
                "RINGLEADER_PS_MODE": "bounded-staleness",
                "RINGLEADER_PS_MAX_STALENESS": "4",
                "RINGLEADER_PS_ADDRS": "mnist-ps-0.mnist:29600,mnist-ps-1.mnist:29600",
                "RINGLEADER_NUM_PS": "2",
                "RINGLEADER_GLOBAL_RANK": "1",
                "RINGLEADER_GLOBAL_WORLD_SIZE": "4",
            },
            ["RINGLEADER_PS_BACKUP"],
        ),
        (
            PS_BACKUP_JOB,
            Role.PS,
            0,
            {"RINGLEADER_PS_MODE": "synchronous", "RINGLEADER_PS_BACKUP": "1"},
            ["RINGLEADER_PS_MAX_STALENESS"],
        ),
        (
            PS_JOB,
            Role.PS,
            1,
            {
                "RINGLEADER_ROLE": "ps",
                "RINGLEADER_INDEX": "1",
                "RINGLEADER_GLOBAL_RANK": "3",
                "RINGLEADER_PS_PORT": "29600",
                "MASTER_ADDR": "mnist-worker-0.mnist",
            },
            ["RANK", "WORLD_SIZE"],
        ),
        (
            {"strategy": "local-sgd", "localSGD": {"period": 16}},
            Role.WORKER,
            0,
            {"RINGLEADER_LOCAL_SGD_PERIOD": "16"},
            ["RINGLEADER_PS_MODE"],
        ),
        ({"strategy": "local-sgd"}, Role.WORKER, 0, {"RINGLEADER_LOCAL_SGD_PERIOD": "8"}, []),
        (
            {"strategy": "diloco", "diloco": {"period": 50, "outerLearningRate": 0.5}},
            Role.WORKER,
            1,
            {
                "RINGLEADER_DILOCO_PERIOD": "50",
                "RINGLEADER_DILOCO_OUTER_LR": "0.5",
                "RINGLEADER_DILOCO_OUTER_MOMENTUM": "0.9",
            },
            ["RINGLEADER_LOCAL_SGD_PERIOD"],
        ),
        (
            {"strategy": "diloco"},
            Role.WORKER,
            0,
            {
                "RINGLEADER_DILOCO_PERIOD": "100",
                "RINGLEADER_DILOCO_OUTER_LR": "0.7",
                "RINGLEADER_DILOCO_OUTER_MOMENTUM": "0.9",
            },
            [],
        ),
        (
            {"strategy": "sharded", "sharded": {"stage": 1}},
            Role.WORKER,
            1,
            {"RINGLEADER_SHARDED_STAGE": "1"},
            ["RINGLEADER_LOCAL_SGD_PERIOD"],
        ),
        ({"strategy": "sharded"}, Role.WORKER, 0, {"RINGLEADER_SHARDED_STAGE": "3"}, ["RINGLEADER_SHARDED_REPLICAS"]),
        (
            {"strategy": "sharded", "sharded": {"replicas": 2}, "workers": {"replicas": 4}},
            Role.WORKER,
            3,
            {"RINGLEADER_SHARDED_STAGE": "3", "RINGLEADER_SHARDED_REPLICAS": "2"},
            [],
        ),
        (
            {"strategy": "pipeline", "pipeline": {"stages": 2, "microBatches": 8}},
            Role.WORKER,
            1,
            {"RINGLEADER_PIPELINE_STAGES": "2", "RINGLEADER_PIPELINE_MICRO_BATCHES": "8"},
            ["RINGLEADER_SHARDED_STAGE"],
        ),
        (
            {"strategy": "pipeline"},
            Role.WORKER,
            0,
            {"RINGLEADER_PIPELINE_STAGES": "2", "RINGLEADER_PIPELINE_MICRO_BATCHES": "4"},
            [],
        ),
        (
            {"checkpoint": {"intervalSteps": 50, "claimName": "ckpt"}},
            Role.WORKER,
            0,
            {
                "RINGLEADER_CHECKPOINT_DIR": f"/checkpoints/ml/mnist/{UID}",
                "RINGLEADER_CHECKPOINT_INTERVAL": "50",
                "RINGLEADER_CHECKPOINT_KEEP": "3",
            },
            [],
        ),
        (
            {"checkpoint": {"directory": "/data/run-7", "keep": 5}},
            Role.PS,
            0,
            {"RINGLEADER_CHECKPOINT_DIR": "/data/run-7", "RINGLEADER_CHECKPOINT_KEEP": "5"},
            [],
        ),
    ],
    ids=[
        "allreduce",
        "ps-worker",
        "ps-backup",
        "ps-shard",
        "local-sgd",
        "local-sgd-default",
        "diloco",
        "diloco-default",
        "sharded",
        "sharded-default",
        "sharded-replica-groups",
        "pipeline",
        "pipeline-default",
        "checkpoint",
        "checkpoint-dir",
    ],
)
def test_env_contract(
    spec: dict[str, Any], role: Role, index: int, expected: dict[str, str], absent: list[str]
) -> None:
    env = rank_env(job(**spec), role, index)
    assert {k: env.get(k) for k in expected} == expected
    assert [k for k in absent if k in env] == []


def test_user_settings_are_kept_and_only_missing_env_added() -> None:
    t = template(
        env=[{"name": "PET_NPROC_PER_NODE", "value": "4"}, {"name": "NCCL_DEBUG", "value": "INFO"}],
        resources={"limits": {"nvidia.com/gpu": 4, "memory": "8Gi"}},
    )
    t["spec"]["tolerations"] = [
        {"key": "gpu", "operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},  # stay forever
    ]
    t["spec"]["nodeSelector"] = {"pool": "a100"}
    t["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    j = job(workers={"replicas": 1, "gpus": 2, "template": t})
    pod = created_pod(j, Role.WORKER, 0)
    env = env_of(pod)
    assert env["PET_NPROC_PER_NODE"] == "4" and env["NCCL_DEBUG"] == "INFO" and env["WORLD_SIZE"] == "1"
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 4, "memory": "8Gi"}  # the user's own limit wins
    not_ready = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    assert pod["spec"]["tolerations"] == [*t["spec"]["tolerations"], not_ready | {"tolerationSeconds": 30}]
    assert pod["spec"]["nodeSelector"] == {"pool": "a100"}
    assert pod["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}, TOKEN_VOLUME]
    assert j.spec.workers.template["spec"]["containers"][0]["env"][0] == {"name": "PET_NPROC_PER_NODE", "value": "4"}
    assert len(j.spec.workers.template["spec"]["containers"][0]["env"]) == 2  # the job's template is untouched


@pytest.mark.parametrize(
    ("resources", "processes", "threads"),
    [
        ({}, 1, "1"),  # no CPU asked for: torchrun's one thread, not one per core of the node
        ({"requests": {"cpu": "4"}}, 1, "4"),
        ({"requests": {"cpu": "4"}, "limits": {"cpu": "8"}}, 2, "4"),  # the limit, shared by the pod's processes
        ({"limits": {"cpu": "3"}}, 2, "1"),  # rounded down
        ({"limits": {"cpu": "500m"}}, 1, "1"),  # at least one
        ({"requests": {"cpu": 6}}, 3, "2"),  # a number, as YAML gives it
        ({"limits": {"memory": "1Gi"}}, 1, "1"),
        ({"requests": {"cpu": "lots"}}, 1, "1"),  # validate refuses it; the pod built for a status still has one
    ],
)
def test_cpu_threads_share_the_containers_cpu_among_its_processes(
    resources: dict[str, Any], processes: int, threads: str
) -> None:
    assert cpu_threads({"name": "trainer", "resources": resources}, processes) == threads


def test_omp_num_threads_follows_the_pods_processes_and_a_templates_own_value_stands() -> None:
    sharing = job(workers={"replicas": 1, "procsPerPod": 2, "template": template(resources={"limits": {"cpu": "8"}})})
    assert env_of(created_pod(sharing, Role.WORKER, 0))["OMP_NUM_THREADS"] == "4"
    own = job(workers={"replicas": 1, "template": template(env=[{"name": "OMP_NUM_THREADS", "value": "16"}])})
    env = created_pod(own, Role.WORKER, 0)["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "OMP_NUM_THREADS"] == ["16"]


def test_gpus_become_the_trainer_containers_limit_and_trainer_is_found_by_name() -> None:
    t = template()
    t["spec"]["containers"].insert(0, {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]})
    pod = created_pod(job(workers={"replicas": 1, "gpus": 2, "template": t}), Role.WORKER, 0)
    sidecar, trainer = pod["spec"]["containers"]
    assert trainer["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert "env" not in sidecar and "resources" not in sidecar


@pytest.mark.parametrize(
    ("checkpoint", "mount", "directory"),
    [
        ({"claimName": "ckpt", "directory": "/ckpt"}, "/ckpt", "/ckpt"),
        # The claim's root is mounted; each job keeps its checkpoints in a directory of its own on it.
        ({"claimName": "ckpt"}, "/checkpoints", f"/checkpoints/ml/mnist/{UID}"),
    ],
    ids=["directory", "default"],
)
def test_checkpoint_claim_is_mounted(checkpoint: dict[str, Any], mount: str, directory: str) -> None:
    pod = created_pod(job(checkpoint=checkpoint), Role.WORKER, 1)
    assert pod["spec"]["volumes"] == [
        TOKEN_VOLUME,
        {"name": "ringleader-checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}},
    ]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [TOKEN_MOUNT, {"name": "ringleader-checkpoints", "mountPath": mount}]
    assert env_of(pod)["RINGLEADER_CHECKPOINT_DIR"] == directory


def test_token_secret_whole_object() -> None:
    """Owned by the job (deleted with it), immutable, named with the uid's start (a new job of the same name
    never mounts a leftover); every rank mounts it."""
    assert build_token_secret(job(), "t" * 64) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {**JOB_OBJECT_META, "name": "mnist-token-1111-222"},
        "type": "Opaque",
        "immutable": True,
        "stringData": {"token": "t" * 64},
    }
    ps = created_pod(job(**PS_JOB), Role.PS, 1)
    assert TOKEN_VOLUME in ps["spec"]["volumes"] and TOKEN_MOUNT in ps["spec"]["containers"][0]["volumeMounts"]


def test_network_policy_admits_the_jobs_own_pods_and_the_operator_to_the_metrics_port() -> None:
    labels = {"app.kubernetes.io/name": "ringleader", "app.kubernetes.io/instance": "rl"}
    job_pods = {"matchLabels": {"ringleader.dev/job-name": "mnist"}}
    assert build_network_policy(job(), "ringleader-system", labels) == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {**JOB_OBJECT_META, "name": "mnist-ranks-1111-222"},
        "spec": {
            "podSelector": job_pods,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": job_pods}]},
                {
                    "from": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ringleader-system"}},
                            "podSelector": {"matchLabels": labels},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": 9090}],
                },
            ],
        },
    }


@pytest.mark.parametrize(
    ("workers", "extra", "wanted"),
    [
        ({"replicas": 3, "minReplicas": 2}, {}, True),
        ({"replicas": 3, "minReplicas": 3}, {}, False),  # never short of a rank
        ({"replicas": 3}, {}, False),
        ({"replicas": 2, "minReplicas": 1}, {"torchrun": {"rendezvous": "c10d"}}, False),  # torchrun's agents' store
    ],
)
def test_a_job_has_a_coordinator_where_its_survivors_may_train_on(
    workers: dict[str, Any], extra: dict[str, Any], wanted: bool
) -> None:
    j = training_job(name="mnist", namespace="ml", uid=UID, template=template(), workers=workers, **extra)
    assert wants_coordinator(j) is wanted


def test_the_coordinator_runs_the_workers_image_where_they_may_run_and_only_the_job_reaches_it() -> None:
    tmpl = template()
    tmpl["spec"] |= {"nodeSelector": {"pool": "cpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                     "schedulerName": "volcano", "securityContext": {"runAsNonRoot": True}}  # fmt: skip
    j = training_job(name="mnist", namespace="ml", uid=UID, template=tmpl, workers={"replicas": 3, "minReplicas": 2})
    name, labels = "mnist-coordinator-1111-222", {"ringleader.dev/coordinator-of": "mnist"}
    deployment = build_coordinator(j)
    assert deployment["metadata"] == {**JOB_OBJECT_META, "name": name}
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["selector"] == {"matchLabels": labels}
    pod = deployment["spec"]["template"]
    assert pod["metadata"] == {"labels": labels}  # not the job's label: no rank, no foreign pod
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"pool": "cpu"} and spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert spec["securityContext"] == {"runAsNonRoot": True} and "schedulerName" not in spec  # no gang's
    [container] = spec["containers"]
    trainer = tmpl["spec"]["containers"][0]
    assert container["image"] == trainer["image"]
    assert container["command"] == ["python", "-u", "-m", "ringleader_trainer.elastic.coordinator"]
    assert container["env"] == [{"name": "RINGLEADER_RENDEZVOUS", "value": f"{name}:29500"}]
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert env_of(created_pod(j, Role.WORKER, 2))["RINGLEADER_RENDEZVOUS"] == f"{name}:29500"  # where ranks look
    service = build_coordinator_service(j)
    assert service["metadata"]["name"] == name and service["spec"]["selector"] == labels
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    policy = build_coordinator_network_policy(j)
    assert policy["spec"]["podSelector"] == {"matchLabels": labels}
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"ringleader.dev/job-name": "mnist"}}}],
         "ports": [{"protocol": "TCP", "port": 29500}]},
    ]  # fmt: skip


def test_the_coordinators_name_fits_a_dns_label_for_the_longest_job_name() -> None:
    long = "a" * 54  # '<name>-worker-2' fits 63 characters, '<name>-coordinator-<uid>' would not
    j = training_job(name=long, namespace="ml", uid=UID, template=template(), workers={"replicas": 3})
    assert coordinator_name(j) == "a" * 42 + "-coordinator-1111-222" and len(coordinator_name(j)) == 63


def test_desired_ranks_parameter_servers_first() -> None:
    assert desired_ranks(job(**PS_JOB)) == [(Role.PS, 0), (Role.PS, 1), (Role.WORKER, 0), (Role.WORKER, 1)]
    assert build_service(job(**PS_JOB))["spec"]["ports"][1] == {
        "name": "ps",
        "port": 29600,
        "targetPort": 29600,
        "protocol": "TCP",
    }


@pytest.mark.parametrize(
    ("tmpl", "message"),
    [
        ({}, "spec.workers.template.spec.containers must name at least one container"),
        ({"spec": {"containers": [{"image": "x"}]}}, "every container needs a name"),
        ({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}, "container names must be unique"),
        (
            {"spec": {"containers": [{"name": "a"}], "volumes": [{"name": "ringleader-token", "emptyDir": {}}]}},
            r"spec.workers.template.spec.volumes: the name ringleader-token is the operator's",
        ),
    ],
    ids=["no-containers", "unnamed", "duplicate", "token-volume"],
)
def test_invalid_templates_name_the_field(tmpl: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidTemplate, match=message):
        validate(job(workers={"replicas": 1, "template": tmpl}))


@pytest.mark.parametrize("name", ["RANK", "MASTER_ADDR", "WORLD_SIZE", "RINGLEADER_INDEX", "RINGLEADER_PS_ADDRS"])
def test_a_template_that_sets_a_contract_variable_is_refused_naming_it(name: str) -> None:
    sidecar = {"name": "logger", "image": "x", "env": [{"name": name, "value": "0"}]}  # not the trainer: allowed
    t = template(env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": name, "value": "0"}])
    t["spec"]["containers"].append(sidecar)
    for role in ("workers", "parameterServers"):
        spec = {**PS_JOB, role: {"replicas": 2, "template": t}}
        where = "spec.workers" if role == "workers" else "spec.parameterServers"
        with pytest.raises(InvalidTemplate, match=rf"^{where}.template.spec.containers\[0\].env sets {name}, "):
            validate(job(**spec))
    t["spec"]["containers"][0]["env"] = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    validate(job(**{**PS_JOB, "workers": {"replicas": 2, "template": t}}))


def scheduled_by(name: str, **container: Any) -> dict[str, Any]:
    t = template(**container)
    t["spec"]["schedulerName"] = name
    return t


GANG_REQUESTS = {"resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}}


@pytest.mark.parametrize(
    ("scheduler", "spec_extra", "member"),
    [
        (
            "volcano",
            {"priorityClassName": "train-high", "queue": "research"},
            ("annotations", "scheduling.k8s.io/group-name"),
        ),
        ("scheduler-plugins-scheduler", {"scheduleTimeoutSeconds": 600}, ("labels", "scheduling.x-k8s.io/pod-group")),
    ],
    ids=["volcano", "coscheduling"],
)
def test_gang_scheduler_pod_group_whole_object(
    scheduler: str, spec_extra: dict[str, Any], member: tuple[str, str]
) -> None:
    j = TrainingJob.model_validate(
        {
            "metadata": {
                "name": "mnist",
                "namespace": "ml",
                "uid": UID,
                "annotations": {"scheduling.volcano.sh/queue-name": "research"},
            },
            "spec": {
                "strategy": "parameter-server",
                "workers": {"replicas": 3, "gpus": 2, "template": scheduled_by(scheduler, **GANG_REQUESTS)},
                "parameterServers": {"replicas": 1, "template": scheduled_by(scheduler, **GANG_REQUESTS)},
                "runPolicy": {"priorityClassName": "train-high", "schedulingTimeoutSeconds": 600},
            },
        }
    )
    backend = named_scheduler(j)
    assert isinstance(backend, PodGroupScheduler)
    group = backend.pod_group(j)
    api = "scheduling.volcano.sh/v1beta1" if scheduler == "volcano" else "scheduling.x-k8s.io/v1alpha1"
    assert group == {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": JOB_OBJECT_META,
        # Every rank at once, with the requests of all 4 pods summed (GPUs from the workers' limits).
        "spec": {
            "minMember": 4,
            "minResources": {"cpu": "6", "memory": str(8 * 2**30), "nvidia.com/gpu": "6"},
            **spec_extra,
        },
    }
    pod = created_pod(j, Role.WORKER, 2)
    where, key = member
    assert pod["metadata"][where][key] == "mnist" and "schedulingGates" not in pod["spec"]
    assert pod["spec"]["priorityClassName"] == "train-high" and pod["spec"]["schedulerName"] == scheduler


def test_default_scheduler_pods_are_gated_and_have_no_pod_group() -> None:
    j = job(runPolicy={"priorityClassName": "p"})
    assert named_scheduler(j) is None
    pod = created_pod(j, Role.WORKER, 0)
    assert pod["spec"]["schedulingGates"] == [{"name": "ringleader.dev/gang"}]
    assert pod["spec"]["priorityClassName"] == "p"
    # A template's own priority class and other gates are kept.
    own = template()
    own["spec"] |= {"priorityClassName": "mine", "schedulingGates": [{"name": "example.com/quota"}]}
    pod = created_pod(
        job(workers={"replicas": 1, "template": own}, runPolicy={"priorityClassName": "p"}), Role.WORKER, 0
    )
    assert pod["spec"]["priorityClassName"] == "mine"
    assert pod["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, {"name": "ringleader.dev/gang"}]


def test_roles_must_agree_on_the_scheduler() -> None:
    body = {
        "strategy": "parameter-server",
        "workers": {"replicas": 1, "template": scheduled_by("volcano")},
        "parameterServers": {"replicas": 1, "template": template()},
    }
    with pytest.raises(InvalidTemplate, match=r"schedulerName must equal the workers'.*'' and 'volcano'"):
        validate(job(**body))


@pytest.mark.parametrize(
    ("checkpoint", "progress", "want"),
    [
        (None, None, None),  # nothing to save: Kubernetes' default stands
        ({}, None, 60),  # nothing measured yet
        ({}, {"checkpointSeconds": 2.0, "stepSeconds": 0.5}, 30),  # 3 x (2 + 1) + 10 = 19: at least 30
        ({}, {"checkpointSeconds": 40.0, "stepSeconds": 2.0}, 142),  # 3 x (40 + 4) + 10
        ({}, {"checkpointSeconds": 40.0}, 130),  # no step time yet
        ({"stopGracePeriodSeconds": 300}, {"checkpointSeconds": 40.0}, 300),  # the spec's
    ],
)
def test_the_stop_grace_period_fits_the_measured_save(
    checkpoint: dict[str, Any] | None, progress: dict[str, Any] | None, want: int | None
) -> None:
    spec: dict[str, Any] = {} if checkpoint is None else {"checkpoint": {"intervalSteps": 100, **checkpoint}}
    job = training_job(status={"progress": progress} if progress else None, **spec)
    assert stop_grace_seconds(job) == want
    assert created_pod(job, Role.WORKER, 0)["spec"].get("terminationGracePeriodSeconds") == want
    assert delete_grace_seconds(job) == want


def test_a_templates_own_grace_period_stands() -> None:
    template = {"spec": {"terminationGracePeriodSeconds": 7, "containers": [{"name": "trainer", "image": "t"}]}}
    job = training_job(template=template, checkpoint={"intervalSteps": 100})
    assert created_pod(job, Role.WORKER, 1)["spec"]["terminationGracePeriodSeconds"] == 7
    assert delete_grace_seconds(job) is None  # the operator's deletions leave each pod its own


def test_a_templates_own_termination_message_policy_is_kept() -> None:
    j = training_job(name="mnist", namespace="ml", uid=UID, template=template(terminationMessagePolicy="File"))
    assert created_pod(j, Role.WORKER, 1)["spec"]["containers"][0]["terminationMessagePolicy"] == "File"


def test_pods_of_a_job_share_the_env_entries_alike_and_keep_their_own_lists() -> None:
    first, second = (created_pod(job(workers={"replicas": 4}), Role.WORKER, i) for i in (1, 2))
    a, b = (p["spec"]["containers"][0]["env"] for p in (first, second))
    alike = [x for x, y in zip(a, b, strict=True) if x == y]
    assert alike and all(any(x is y for y in b) for x in alike)  # one object per entry alike
    assert {e["name"] for e in a if e not in b} >= {"RINGLEADER_INDEX", "RANK"}  # each rank's own values
    assert a is not b and first["spec"]["tolerations"] is not second["spec"]["tolerations"]
