"""Every spec the API server admits gets a status: for any TrainingJob the CRD's schema lets through, the plan
either plans or fails the job with InvalidSpec naming a field; it never raises (which would leave the job in
an exception loop). Property test with hypothesis: extreme integers at the bounds, odd quantities, unicode,
templates of any shape; two rounds each (the second with the pods gated and a node to admit them to)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from ringleader_api import MAX_GPUS, MAX_KEEP, MAX_REPLICAS, MAX_SECONDS, MAX_STEPS, TrainingJob
from ringleader_operator.admission import Cluster
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

# Derandomized, so every run draws the same specs: 10,000 of them (set SPEC_EXAMPLES for a deeper search; `make
# soak` runs 100,000).
EXAMPLES = int(os.environ.get("SPEC_EXAMPLES", "10000"))
MAX_RANKS = 12  # the operator's cap in this test: jobs stay small enough to plan fast, and the cap is hit
NOW = "2026-01-01T00:00:00Z"
NODES = [
    {
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
]

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_any = st.recursive(
    json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


def bounded(low: int, high: int) -> st.SearchStrategy[int]:
    """Integers from low to high, the bounds and their neighbours often (where arithmetic overflows)."""
    return st.one_of(st.integers(low, min(high, low + 8)), st.sampled_from([low, high]), st.integers(low, high))


def rarely(value: Any, otherwise: Any, one_in: int = 12) -> st.SearchStrategy[Any]:
    """`otherwise` mostly, `value` about once in `one_in` draws. (A list with the rare choice in its middle:
    hypothesis favours the first and last choices of sampled_from and one_of.)"""
    half = [False] * (one_in // 2)
    return st.sampled_from([*half, True, *half]).flatmap(lambda rare: value if rare else otherwise)


def spec_strategy(garbage: bool) -> st.SearchStrategy[dict[str, Any]]:
    """TrainingJob specs within the CRD's bounds, with extreme integers, odd quantities and unicode; with
    `garbage`, any part of a template is sometimes any JSON at all (the CRD keeps templates free-form)."""

    def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return rarely(json_any, strategy) if garbage else strategy

    quantity = rarely(
        st.one_of(st.sampled_from(["-1", "abc", "", "1e400", "NaN", "Infinity", "sNaN", "9" * 30 + "Ei", "1Ei"]),
                  st.integers(-10, 2**70), st.floats(), json_any),
        st.sampled_from(["1", "500m", "2Gi", "1e3", "0", "0.000000001", "1.5", " 2 ", 3, 0.5]),
        one_in=8,
    )  # fmt: skip
    words = st.sampled_from(["python", "-m", "ringleader_trainer", "torchrun", "--nnodes", "2", "1:4", "--standalone",
                             "--nproc-per-node", "4", "--node-rank", "0", "train.py", "-c", "--rdzv-endpoint",
                             "localhost:1", "exec", "env", "A=1", "sh"]) | st.text(max_size=6)  # fmt: skip
    env_names = st.sampled_from(["NCCL_DEBUG", "RANK", "MASTER_ADDR", "PET_NPROC_PER_NODE", "PET_NNODES", "X"])
    env_var = st.fixed_dictionaries(
        {"name": maybe(env_names | st.text(max_size=6))}, optional={"value": maybe(st.text(max_size=6))}
    )
    env = st.lists(maybe(env_var), max_size=3)
    resources = st.fixed_dictionaries(
        {},
        optional={
            "limits": maybe(
                st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity, max_size=3)
            ),
            "requests": maybe(st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity, max_size=2)),
        },
    )
    container = st.fixed_dictionaries(
        {"name": maybe(rarely(st.text(max_size=4), st.sampled_from(["trainer", "side", "log"])))},
        optional={
            "image": maybe(st.text(max_size=5)),
            "command": maybe(st.lists(words, max_size=6)),
            "args": maybe(st.lists(words, max_size=3)),
            "env": maybe(env),
            "resources": maybe(resources),
            "ports": maybe(st.lists(st.fixed_dictionaries({"containerPort": maybe(bounded(1, 65535))}), max_size=2)),
            "volumeMounts": maybe(st.lists(st.fixed_dictionaries({"name": st.text(max_size=4),
                                                                   "mountPath": maybe(st.text(max_size=6))}),
                                           max_size=2)),
        },
    )  # fmt: skip
    pod_spec = st.fixed_dictionaries(
        {"containers": maybe(rarely(st.just([]), st.lists(container, min_size=1, max_size=3,
                                                          unique_by=lambda c: repr(c.get("name")))))},
        optional={
            "schedulerName": maybe(st.sampled_from(["", "volcano", "scheduler-plugins-scheduler", "other"])),
            "priorityClassName": maybe(st.text(max_size=5)),
            "tolerations": maybe(st.lists(st.fixed_dictionaries({"key": maybe(st.text(max_size=5))},
                                                                optional={"effect": maybe(st.text(max_size=5))}),
                                          max_size=2)),
            "nodeSelector": maybe(st.dictionaries(st.text(max_size=5), maybe(st.text(max_size=5)), max_size=2)),
            "volumes": maybe(st.lists(st.fixed_dictionaries({"name": maybe(st.text(max_size=4))}), max_size=2)),
            "schedulingGates": maybe(st.lists(st.fixed_dictionaries({"name": maybe(st.text(max_size=4))}), max_size=2)),
            "overhead": maybe(st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity, max_size=2)),
        },
    )  # fmt: skip
    template = maybe(
        st.fixed_dictionaries(
            {"spec": maybe(pod_spec)},
            optional={"metadata": maybe(st.fixed_dictionaries({}, optional={
                "labels": maybe(st.dictionaries(st.text(max_size=5), maybe(st.text(max_size=5)), max_size=2)),
                "annotations": maybe(st.dictionaries(st.text(max_size=5), maybe(st.text(max_size=5)), max_size=2)),
            }))},
        )
    )  # fmt: skip
    replicas = rarely(st.sampled_from([MAX_RANKS, MAX_RANKS + 1, MAX_REPLICAS]), st.integers(1, 4), one_in=16)
    replica_spec = st.fixed_dictionaries(
        {"replicas": replicas, "template": template},
        optional={
            "minReplicas": rarely(st.just(MAX_REPLICAS), st.integers(1, 4), one_in=16),
            "maxReplicas": rarely(st.sampled_from([MAX_RANKS + 1, MAX_REPLICAS]), st.integers(1, 6), one_in=16),
            "gpus": bounded(0, MAX_GPUS),
            "restartPolicy": st.sampled_from(["Never", "OnFailure", "Always", "ExitCode"]),
        },
    )
    seconds = bounded(0, MAX_SECONDS)
    spec = st.fixed_dictionaries(
        {"workers": replica_spec},
        optional={
            "strategy": st.sampled_from(["allreduce", "parameter-server", "local-sgd", "diloco"]),
            "parameterServer": st.fixed_dictionaries(
                {"mode": st.sampled_from(["synchronous", "asynchronous", "bounded-staleness"])},
                optional={"maxStaleness": bounded(1, MAX_STEPS)},
            ),
            "localSGD": st.fixed_dictionaries({"period": bounded(1, MAX_STEPS)}),
            "diloco": st.fixed_dictionaries({}, optional={
                "period": bounded(1, MAX_STEPS),
                "outerLearningRate": st.floats(0, 20),
                "outerMomentum": st.floats(-1, 2),
            }),
            "parameterServers": replica_spec,
            "checkpoint": st.fixed_dictionaries({}, optional={
                "intervalSteps": bounded(1, MAX_STEPS), "keep": bounded(1, MAX_KEEP),
                "claimName": st.text(max_size=6), "directory": st.text(max_size=12),
            }),
            "runPolicy": st.fixed_dictionaries({}, optional={
                "backoffLimit": bounded(0, MAX_STEPS),
                "restartBackoff": st.fixed_dictionaries({}, optional={
                    "baseSeconds": st.floats(0, MAX_SECONDS) | seconds,
                    "capSeconds": st.floats(0, MAX_SECONDS) | seconds,
                }),
                "activeDeadlineSeconds": bounded(1, MAX_SECONDS), "ttlSecondsAfterFinished": seconds,
                "schedulingTimeoutSeconds": bounded(1, MAX_SECONDS), "suspend": st.booleans(),
                "cleanPodPolicy": st.sampled_from(["None", "Running", "All"]),
                "priorityClassName": st.text(max_size=6),
            }),
        },
    )  # fmt: skip
    return spec


def pending_gated(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod the plan made, as served back while it waits for admission."""
    return {
        **pod,
        "metadata": {**pod["metadata"], "uid": f"uid-{pod['metadata']['name']}"},
        "status": {"phase": "Pending"},
    }


names = st.sampled_from(["j", "a" * 40]) | st.text(max_size=20)


def check_plan(spec: dict[str, Any], name: str) -> None:
    """Two rounds of the plan for a job with `spec`: each plans, or fails the job with InvalidSpec naming a
    field; neither raises."""
    body = {"metadata": {"name": name, "namespace": "ns", "uid": "u", "generation": 1}, "spec": spec}
    try:
        job = TrainingJob.model_validate(body)
    except ValidationError as e:
        event(f"refused by the schema: {'.'.join(map(str, e.errors()[0]['loc']))}")
        return  # the API server refuses it: the CRD is generated from these models
    first = plan(Reading(job, [], True, max_ranks=MAX_RANKS), NOW)
    failed = [c for c in first.status.conditions if c.type == "Failed" and c.status == "True"]
    if failed:
        event(f"InvalidSpec: {failed[0].message.split(':')[0]}")
        assert failed[0].reason == "InvalidSpec" and failed[0].message.startswith("spec."), failed[0]
        assert not first.create_pods
        return
    event(f"planned {len(first.create_pods)} pods")
    assert len(first.create_pods) <= MAX_RANKS
    again = TrainingJob.model_validate({**body, "status": first.status.model_dump(by_alias=True, mode="json")})
    pods = [pending_gated(p) for p in first.create_pods]
    plan(Reading(again, pods, True, max_ranks=MAX_RANKS), NOW, Cluster(NODES, pods))


SETTINGS = settings(
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@settings(SETTINGS, max_examples=EXAMPLES)
@given(spec=spec_strategy(garbage=False), name=names)
def test_every_spec_within_the_bounds_plans_or_fails_as_invalid(spec: dict[str, Any], name: str) -> None:
    check_plan(spec, name)


def odd_tolerations(replicas: int, tolerations: list[Any]) -> dict[str, Any]:
    """A template whose tolerations have an odd shape (the API server keeps a pod template as written)."""
    template = {"spec": {"containers": [{"name": "trainer"}], "tolerations": tolerations}}
    return {"workers": {"replicas": replicas, "template": template}}


@settings(SETTINGS, max_examples=EXAMPLES // 2)
@given(spec=spec_strategy(garbage=True), name=names)
@example(spec=odd_tolerations(1, [{"": []}]), name="j")  # once unhashable in gang admission's grouping
@example(spec=odd_tolerations(2, ["not-a-mapping"]), name="j")
@example(spec=odd_tolerations(2, [{"key": {"nested": 1}}]), name="j")
def test_a_template_of_any_shape_plans_or_fails_as_invalid(spec: dict[str, Any], name: str) -> None:
    check_plan(spec, name)
