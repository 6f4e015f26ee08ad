"""`ringleader convert`, table-style: the project's own PyTorchJob manifests (examples/kubeflow/, one per shape the
training-operator documents: Master + Worker, Worker only, nprocPerNode, elasticPolicy, runPolicy) become the
TrainingJobs that run the same thing, valid for the operator; every field without an equivalent is named in a
warning or a one-line error; the command's exit codes and output."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from ringleader.cli import main
from ringleader.convert import ConversionError, convert, convert_documents
from ringleader_api import TrainingJob
from ringleader_operator.builders import validate

REPO_ROOT = Path(__file__).resolve().parents[3]
KUBEFLOW = REPO_ROOT / "examples" / "kubeflow"
UNLIMITED = "spec.runPolicy.backoffLimit: unset: Kubeflow restarts without a limit; Ringleader allows 3 restarts"


def load(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((KUBEFLOW / name).read_text()) if d and d["kind"] == "PyTorchJob"]
    return dict(doc)


@pytest.mark.parametrize(
    ("name", "workers", "run_policy", "warnings"),
    [
        ("allreduce-master-worker.yaml", {"replicas": 2, "restartPolicy": "OnFailure"}, {"cleanPodPolicy": "None"},
         [UNLIMITED]),
        ("sendrecv-workers.yaml", {"replicas": 3, "restartPolicy": "OnFailure"}, {"cleanPodPolicy": "None"},
         [UNLIMITED]),
        ("allreduce-nproc.yaml", {"replicas": 2, "restartPolicy": "OnFailure", "procsPerPod": 2},
         {"cleanPodPolicy": "None"}, [UNLIMITED]),
        ("elastic-echo.yaml", {"replicas": 2, "restartPolicy": "OnFailure", "minReplicas": 1, "maxReplicas": 3},
         {"cleanPodPolicy": "None"}, [UNLIMITED]),
        ("run-policy.yaml", {"replicas": 3, "restartPolicy": "ExitCode"},
         {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 3600, "backoffLimit": 2,
          "schedulingTimeoutSeconds": 120}, []),
    ],
    ids=["master-worker", "worker-only", "nproc-per-node", "elastic", "run-policy"],
)  # fmt: skip
def test_each_shape_becomes_the_training_job_that_runs_the_same_thing(
    name: str, workers: dict[str, Any], run_policy: dict[str, Any], warnings: list[str]
) -> None:
    source = load(name)
    job, said = convert(source)
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == (
        "ringleader.dev/v1alpha1", "TrainingJob", source["metadata"]["name"],
    )  # fmt: skip
    got = {k: v for k, v in job["spec"]["workers"].items() if k != "template"}
    assert got == workers
    assert job["spec"]["runPolicy"] == run_policy
    elastic = "elasticPolicy" in source["spec"]  # Kubeflow's elastic mode: torchrun's c10d rendezvous
    assert job["spec"].get("torchrun") == ({"rendezvous": "c10d", "maxRestarts": 10} if elastic else None)
    assert said == [f"PyTorchJob {source['metadata']['name']}: {w}" for w in warnings]
    # The pod template as written (the Master's is the Workers'), its container renamed for the operator.
    specs = source["spec"]["pytorchReplicaSpecs"]
    template = copy.deepcopy((specs.get("Worker") or specs["Master"])["template"])
    template["spec"]["containers"][0]["name"] = "trainer"
    assert job["spec"]["workers"]["template"] == template
    validate(TrainingJob.model_validate(job))  # the operator would make its pods (no split world, no contract var)


def base(**spec: Any) -> dict[str, Any]:
    """A Worker-only PyTorchJob of 2 pods whose spec has `spec`'s fields too."""
    pod = {"spec": {"containers": [{"name": "pytorch", "image": "i", "command": ["torchrun", "t.py"]}]}}
    body = {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": pod}}, **spec}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"}, "spec": body}


def gpus(job: dict[str, Any], n: int) -> dict[str, Any]:
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": n}
    }
    return job


def with_master(job: dict[str, Any], **changes: Any) -> dict[str, Any]:
    master = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"]["Worker"]) | {"replicas": 1} | changes
    job["spec"]["pytorchReplicaSpecs"]["Master"] = master
    return job


def differing_master() -> dict[str, Any]:
    job = with_master(base())
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = "other"
    return job


@pytest.mark.parametrize(
    ("source", "error"),
    [
        (differing_master(), "spec.pytorchReplicaSpecs.Master.template.spec.containers[pytorch].image: differs from "
                             "the Workers' template"),
        (with_master(base(), restartPolicy="Never"), "spec.pytorchReplicaSpecs.Master.restartPolicy: 'Never' differs "
                                                    "from the Workers' 'OnFailure'"),
        (with_master(base(), replicas=2), "spec.pytorchReplicaSpecs.Master.replicas: 2: a PyTorchJob has one Master"),
        (base(elasticPolicy={"standalone": True}), "spec.elasticPolicy.standalone: true starts a world of one node"),
        (with_master(base(elasticPolicy={"minReplicas": 1})), "spec.elasticPolicy: elastic with a Master"),
        (base(nprocPerNode="cpu"), "spec.nprocPerNode: cpu (a process per CPU of the node)"),
        (base(nprocPerNode="gpu"), "spec.nprocPerNode: gpu: the pods ask for no nvidia.com/gpu"),
        (gpus(base(nprocPerNode="4"), 8), "spec.nprocPerNode: 4 with 8 GPUs per pod"),
        (base(nprocPerNode="many"), "spec.nprocPerNode: 'many': a number of processes, gpu or auto"),
        ({**base(), "spec": {"pytorchReplicaSpecs": {"Chief": {}}}}, "spec.pytorchReplicaSpecs.Chief: unknown replica"),
        ({**base(), "spec": {"pytorchReplicaSpecs": {}}}, "spec.pytorchReplicaSpecs: needs a Master or a Worker"),
        ({**base(), "metadata": {"generateName": "p-"}}, "metadata.name: missing"),
        (base(runPolicy={"cleanPodPolicy": "Sometimes"}), "spec.runPolicy.cleanPodPolicy: 'Sometimes'"),
        (base(elasticPolicy={"minReplicas": 3, "maxReplicas": 1}), "replicas 2 are outside minReplicas-maxReplicas"),
        (base(runPolicy={"backoffLimit": -1}), "(as a TrainingJob) spec.runPolicy.backoffLimit"),
    ],
    ids=["templates-differ", "restart-policies-differ", "two-masters", "standalone", "elastic-master", "nproc-cpu",
         "nproc-gpu-without-gpus", "nproc-not-gpus", "nproc-nonsense", "unknown-replica-type", "no-replicas",
         "no-name", "clean-pod-policy", "elastic-bounds", "invalid-as-a-training-job"],
)  # fmt: skip
def test_what_would_change_what_runs_is_a_one_line_error_naming_the_field(source: dict[str, Any], error: str) -> None:
    with pytest.raises(ConversionError) as e:
        convert(source)
    assert error in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("PyTorchJob")


@pytest.mark.parametrize(
    ("source", "field", "value", "warning"),
    [
        (gpus(base(nprocPerNode="gpu"), 4), "workers", {"gpus": 4, "procsPerPod": 4}, None),
        (gpus(base(), 2), "workers", {"gpus": 2, "procsPerPod": 2}, None),
        (base(nprocPerNode="auto"), "workers", {}, "spec.nprocPerNode: auto on pods without GPUs"),
        (base(elasticPolicy={"minReplicas": 1, "nProcPerNode": 3}), "workers", {"minReplicas": 1, "procsPerPod": 3},
         None),
        (base(elasticPolicy={"minReplicas": 1, "rdzvId": "x", "rdzvConf": [{"key": "k", "value": "v"}]}), "workers",
         {"minReplicas": 1}, "spec.elasticPolicy.rdzvConf: the operator sets the rendezvous (worker 0's agent"),
        (base(elasticPolicy={"minReplicas": 1, "rdzvBackend": "etcd"}), "spec", {"torchrun": {"rendezvous": "c10d"}},
         "spec.elasticPolicy.rdzvBackend: etcd: Ringleader's elastic rendezvous is c10d"),
        (base(elasticPolicy={"maxReplicas": 4, "metrics": [{"type": "Resource"}]}), "workers", {"maxReplicas": 4},
         "spec.elasticPolicy.metrics: no HorizontalPodAutoscaler is made"),
        (base(runPolicy={"schedulingPolicy": {"priorityClass": "high", "minAvailable": 1}}), "runPolicy",
         {"priorityClassName": "high"}, "spec.runPolicy.schedulingPolicy.minAvailable: 1: Ringleader places every"),
        (base(runPolicy={"schedulingPolicy": {"minResources": {"cpu": "4"}}}), "runPolicy", {},
         "spec.runPolicy.schedulingPolicy.minResources: computed from the pods' requests"),
        (base(runPolicy={"schedulingPolicy": {"queue": "q"}}), "runPolicy", {},
         "spec.runPolicy.schedulingPolicy.queue: q: a Volcano queue, and the pods are not scheduled by Volcano"),
        (base(runPolicy={"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue"}), "spec",
         {"managedBy": "kueue.x-k8s.io/multikueue"}, None),
        (base(runPolicy={"managedBy": "kubeflow.org/training-operator"}), "spec", {}, None),
        (base(runPolicy={"unknownKnob": 1}), "runPolicy", {}, "spec.runPolicy.unknownKnob: has no TrainingJob"),
        (base(somethingNew=True), "spec", {}, "spec.somethingNew: has no TrainingJob equivalent; dropped"),
        ({**base(), "metadata": {"name": "p", "uid": "u", "resourceVersion": "9", "finalizers": ["f"]}}, "metadata",
         {"name": "p"}, None),
        ({**base(), "metadata": {"name": "p", "generateName": "p-"}}, "metadata", {"name": "p"},
         "metadata.generateName: not carried"),
    ],
    ids=["nproc-gpu", "gpus-set-procs", "nproc-auto-cpu", "deprecated-nproc", "rendezvous-settings", "etcd",
         "hpa-metrics", "priority-and-min-available", "min-resources", "queue-not-volcano", "suspend-and-multikueue",
         "kubeflows-own-managed-by", "unknown-run-policy-field", "unknown-spec-field", "server-metadata",
         "other-metadata"],
)  # fmt: skip
def test_fields_are_carried_or_named(
    source: dict[str, Any], field: str, value: dict[str, Any], warning: str | None
) -> None:
    job, said = convert(source)
    part = {"workers": job["spec"]["workers"], "runPolicy": job["spec"].get("runPolicy", {}), "spec": job["spec"],
            "metadata": job["metadata"]}[field]  # fmt: skip
    assert {k: part.get(k) for k in value} == value
    if field == "spec" and not value:
        assert "managedBy" not in job["spec"]
    others = [w for w in said if "backoffLimit: unset" not in w]
    assert [w for w in others if warning and warning in w] if warning else others == []
    TrainingJob.model_validate(job)


def test_a_volcano_queue_goes_where_volcanos_pod_group_reads_it() -> None:
    source = base(runPolicy={"schedulingPolicy": {"queue": "research"}})
    source["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "volcano"
    job, said = convert(source)
    assert job["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": "research"}
    assert not [w for w in said if "queue" in w]


def test_a_variable_of_the_contract_in_the_template_is_dropped_saying_so() -> None:
    source = base()
    container = source["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "MASTER_PORT", "value": "23456"}, {"name": "LR", "value": "0.1"}]
    job, said = convert(source)
    assert job["spec"]["workers"]["template"]["spec"]["containers"][0]["env"] == [{"name": "LR", "value": "0.1"}]
    assert any("containers[trainer].env.MASTER_PORT: the operator sets it for each rank; dropped" in w for w in said)
    validate(TrainingJob.model_validate(job))


def test_other_documents_pass_through_and_a_file_without_a_pytorchjob_is_refused() -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"a": "b"}}
    out = convert_documents([configmap, None, base()])
    assert [d["kind"] for d in out.documents] == ["ConfigMap", "TrainingJob"] and out.documents[0] == configmap
    with pytest.raises(ConversionError, match=r"no kubeflow\.org/v1 PyTorchJob in the input"):
        convert_documents([configmap])
    with pytest.raises(ConversionError, match=r"document 1: apiVersion 'kubeflow\.org/v2'"):
        convert_documents([{**base(), "apiVersion": "kubeflow.org/v2"}])


def test_the_command_prints_yaml_and_warnings_and_exits_2_on_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["convert", str(KUBEFLOW / "elastic-echo.yaml")]) == 0
    out, err = capsys.readouterr()
    (job,) = yaml.safe_load_all(out)
    assert job["kind"] == "TrainingJob" and job["spec"]["workers"]["maxReplicas"] == 3
    assert err.count("ringleader: warning: PyTorchJob kf-elastic-echo: ") == 1  # backoffLimit: all else carried
    assert job["spec"]["torchrun"] == {"rendezvous": "c10d", "maxRestarts": 10}
    target = tmp_path / "tj.yaml"
    assert main(["convert", str(KUBEFLOW / "run-policy.yaml"), "-o", str(target)]) == 0
    assert "&" not in target.read_text() and yaml.safe_load(target.read_text())["spec"]["workers"]["replicas"] == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(base(elasticPolicy={"standalone": True})))
    assert main(["convert", str(bad)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert main(["convert", str(tmp_path / "missing.yaml")]) == 2
