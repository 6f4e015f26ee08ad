"""What `ringleader submit` creates, pure: the ConfigMap and the TrainingJob per option, names, and the one-line
refusals of bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from ringleader import submission
from ringleader.errors import UsageError
from ringleader.submission import SCRIPT_DIR, Submission, build, from_files, job_name, owner_reference
from ringleader_api import LABEL_JOB, PSMode, Strategy, TrainingJob

SCRIPT = "print('hello')\n"


def trainer(job: dict[str, Any], role: str = "workers") -> dict[str, Any]:
    container: dict[str, Any] = job["spec"][role]["template"]["spec"]["containers"][0]
    return container


def test_the_default_submission_runs_the_script_from_its_configmap() -> None:
    configmap, job = build(Submission("train.py", SCRIPT, args=("--steps", "50")), "train-abcde")
    assert configmap["metadata"]["name"] == "train-abcde-script"
    assert configmap["metadata"]["labels"] == {LABEL_JOB: "train-abcde"}
    assert configmap["data"] == {"train.py": SCRIPT}
    parsed = TrainingJob.model_validate(job)  # what the operator reads
    assert parsed.spec.strategy == Strategy.ALLREDUCE and parsed.spec.workers.replicas == 2
    assert parsed.spec.parameter_servers is None
    c = trainer(job)
    assert c["command"] == ["python", "-u", f"{SCRIPT_DIR}/train.py", "--steps", "50"]
    assert c["volumeMounts"] == [{"name": "ringleader-script", "mountPath": SCRIPT_DIR, "readOnly": True}]
    pod = job["spec"]["workers"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "ringleader-script", "configMap": {"name": "train-abcde-script"}}]
    # Pod Security "restricted", as the examples
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize(
    ("options", "check"),
    [
        ({"workers": 4, "gpus": 2}, lambda j: j.spec.workers.replicas == 4 and j.spec.workers.gpus == 2),
        ({"strategy": Strategy.PARAMETER_SERVER},
         lambda j: j.spec.parameter_servers.replicas == 1 and j.spec.parameter_server.mode == PSMode.SYNCHRONOUS),
        ({"strategy": Strategy.PARAMETER_SERVER, "parameter_servers": 3, "ps_mode": PSMode.ASYNCHRONOUS},
         lambda j: j.spec.parameter_servers.replicas == 3 and j.spec.parameter_server.mode == PSMode.ASYNCHRONOUS),
        ({"strategy": Strategy.LOCAL_SGD}, lambda j: j.spec.strategy == Strategy.LOCAL_SGD),
        ({"backoff_limit": 0}, lambda j: j.spec.run_policy.backoff_limit == 0),
        ({"checkpoint_every": 50}, lambda j: j.spec.checkpoint.interval_steps == 50 and j.spec.checkpoint.claim_name
         is None),
        ({"checkpoint_claim": "ckpts"}, lambda j: (j.spec.checkpoint.interval_steps, j.spec.checkpoint.claim_name) ==
         (100, "ckpts")),
        ({"deadline_seconds": 7200, "priority_class": "high"},
         lambda j: (j.spec.run_policy.active_deadline_seconds, j.spec.run_policy.priority_class_name)
         == (7200, "high")),
        ({"node_selector": {"cloud.example.com/pool": "a100"}},
         lambda j: j.spec.workers.template["spec"]["nodeSelector"] == {"cloud.example.com/pool": "a100"}),
        ({"image": "example.com/me/trainer:1"},
         lambda j: j.spec.workers.template["spec"]["containers"][0]["image"] == "example.com/me/trainer:1"),
    ],
)  # fmt: skip
def test_options_land_in_the_spec(options: dict[str, Any], check: Any) -> None:
    _, job = build(Submission("train.py", SCRIPT, **options), "j")
    assert check(TrainingJob.model_validate(job))


def test_parameter_servers_run_the_same_script() -> None:
    _, job = build(Submission("train.py", SCRIPT, strategy=Strategy.PARAMETER_SERVER), "j")
    assert trainer(job, "parameterServers")["command"] == trainer(job)["command"]


def test_resources_and_env() -> None:
    sub = Submission("train.py", SCRIPT, cpu="500m", memory="2Gi", env={"BATCH": "64"})
    c = trainer(build(sub, "j")[1])
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
    assert c["env"] == [{"name": "BATCH", "value": "64"}]


def test_requirements_are_installed_first_and_arguments_stay_arguments(tmp_path: Path) -> None:
    """The arguments reach the script as they were given, shell characters included: run the pod's command with
    `pip` and `python` replaced by stand-ins that print what they got."""
    configmap, job = build(Submission("t.py", SCRIPT, args=("a b", "$HOME;", "'q'"), requirements="numpy\n"), "j")
    assert configmap["data"]["requirements.txt"] == "numpy\n"
    command = trainer(job)["command"]
    assert command[:2] == ["sh", "-c"]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pip").write_text('#!/bin/sh\necho pip "$@"\n')
    (fake / "python").write_text('#!/bin/sh\nfor a in "$@"; do echo "arg[$a]"; done\necho "PYTHONPATH=$PYTHONPATH"\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    run = ["/bin/sh", *command[1:]]  # PATH holds only the stand-ins
    out = subprocess.run(run, env={"PATH": str(fake)}, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("pip install") and f"-r {SCRIPT_DIR}/requirements.txt" in lines[0]
    assert lines[1:] == [
        "arg[-u]", f"arg[{SCRIPT_DIR}/t.py]", "arg[a b]", "arg[$HOME;]", "arg['q']",
        f"PYTHONPATH={submission.DEPS_DIR}",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("script_name", "name", "suffix", "expected"),
    [
        ("train_custom.py", None, "x7k2p", "train-custom-x7k2p"),
        ("My Script!.py", None, "aaaaa", "my-script-aaaaa"),
        ("___.py", None, "aaaaa", "job-aaaaa"),
        ("a" * 80 + ".py", None, "aaaaa", "a" * 40 + "-aaaaa"),
        ("train.py", "mine", None, "mine"),
    ],
)
def test_job_names(script_name: str, name: str | None, suffix: str | None, expected: str) -> None:
    assert job_name(script_name, name, suffix) == expected


def test_two_submissions_of_one_script_get_two_names() -> None:
    assert job_name("train.py", None) != job_name("train.py", None)


@pytest.mark.parametrize(
    ("sub", "message"),
    [
        (Submission("train.sh", SCRIPT), "train.sh: the script is a Python file (.py)"),
        (Submission("big.py", "x" * 1_000_001), "big.py: 1000007 bytes with its requirements, over a ConfigMap's"),
        (Submission("t.py", SCRIPT, cpu="lots"), "--cpu 'lots': not a Kubernetes quantity"),
        (Submission("t.py", SCRIPT, memory="2 GB"), "--memory '2 GB': not a Kubernetes quantity"),
        (
            Submission("t.py", SCRIPT, parameter_servers=2),
            "--ps: parameter servers are for --strategy parameter-server",
        ),
        (Submission("t.py", SCRIPT, env={"1BAD": "x"}), "--env 1BAD: not a variable name"),
        (Submission("t.py", SCRIPT, workers=0), "spec.workers.replicas: Input should be greater than or equal to 1"),
        (Submission("t.py", SCRIPT, gpus=500), "spec.workers.gpus: Input should be less than or equal to 128"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(sub: Submission, message: str) -> None:
    with pytest.raises(UsageError) as e:
        build(sub, "j")
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_a_bad_name_is_refused() -> None:
    with pytest.raises(UsageError, match="--name 'Bad_Name': a job name is lowercase"):
        job_name("t.py", "Bad_Name")


def test_files_are_read_and_missing_ones_named(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    sub = from_files(script, "ns", workers=3, strategy="local-sgd")
    assert (sub.script_name, sub.script, sub.namespace, sub.workers, sub.strategy) == (
        "train.py", SCRIPT, "ns", 3, Strategy.LOCAL_SGD,
    )  # fmt: skip
    with pytest.raises(UsageError, match=r"nope\.py: no such script file"):
        from_files(tmp_path / "nope.py", "ns")
    with pytest.raises(UsageError, match=r"reqs\.txt: no such requirements file"):
        from_files(script, "ns", requirements=tmp_path / "reqs.txt")
    with pytest.raises(UsageError, match="'ring-of-fire' is not a valid Strategy"):
        from_files(script, "ns", strategy="ring-of-fire")


def test_the_configmap_is_owned_by_the_job_it_was_made_for() -> None:
    ref = owner_reference({"metadata": {"name": "j", "uid": "1234"}})
    assert ref == {"apiVersion": "ringleader.dev/v1alpha1", "kind": "TrainingJob", "name": "j", "uid": "1234",
                   "controller": False}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nvidia.com/gpu:NoSchedule", {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
        ("dedicated=ml:NoExecute", {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}),
        ("spot", {"key": "spot", "operator": "Exists"}),  # every effect
        ("spot=", {"key": "spot", "operator": "Equal", "value": ""}),
    ],
)
def test_tolerations_as_kubectl_taint_writes_taints(text: str, expected: dict[str, str]) -> None:
    _, job = build(Submission("t.py", SCRIPT, tolerations=(text,)), "j")
    assert job["spec"]["workers"]["template"]["spec"]["tolerations"] == [expected]


@pytest.mark.parametrize(
    ("sub", "message"),
    [
        (Submission("t.py", SCRIPT, tolerations=("gpu:Sometimes",)), "--toleration 'gpu:Sometimes': KEY[=VALUE]"),
        (Submission("t.py", SCRIPT, tolerations=("bad key",)), "--toleration 'bad key': KEY[=VALUE]"),
        (Submission("t.py", SCRIPT, node_selector={"a b": "x"}), "--node-selector a b: not a label key"),
    ],
)
def test_bad_placement_is_refused(sub: Submission, message: str) -> None:
    with pytest.raises(UsageError) as e:
        build(sub, "j")
    assert str(e.value).startswith(message)
