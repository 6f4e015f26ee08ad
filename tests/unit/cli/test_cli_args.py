"""The CLI's arguments and exit codes, without a cluster: parsing, --dry-run's YAML, one-line errors, and the
commands that need a cluster failing cleanly without one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ringleader.cli import main, parse
from ringleader_api import TrainingJob


def test_submit_options_and_the_scripts_own_arguments_after_the_double_dash() -> None:
    args = parse([
        "-n", "team", "submit", "train.py", "--workers", "4", "--strategy", "parameter-server", "--ps", "2",
        "--ps-mode", "bounded-staleness", "--gpus", "1", "--env", "A=1", "--env", "B=x=y", "--watch",
        "--", "--steps", "100", "--lr", "0.1",
    ])  # fmt: skip
    assert (args.namespace, args.command, args.script) == ("team", "submit", "train.py")
    assert (args.workers, args.strategy, args.parameter_servers, args.ps_mode, args.gpus) == (
        4, "parameter-server", 2, "bounded-staleness", 1,
    )  # fmt: skip
    assert args.env == ["A=1", "B=x=y"] and args.watch
    assert args.args == ["--steps", "100", "--lr", "0.1"]


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["logs", "j", "--since", "5m"], "since", 300),
        (["logs", "j", "--since", "2h"], "since", 7200),
        (["logs", "j", "--since", "45"], "since", 45),
        (["logs", "j", "-f", "--rank", "worker-1"], "rank", "worker-1"),
        (["watch", "j", "--timeout", "1d"], "timeout", 86400),
        (["scale", "j", "6"], "workers", 6),
        (["diagnose", "--from-state", "s.json"], "from_state", "s.json"),
        (["submit", "t.py", "--deadline", "12h"], "deadline", 43200),
        (["submit", "t.py", "--toleration", "a:NoSchedule", "--toleration", "b"], "toleration", ["a:NoSchedule", "b"]),
    ],
)
def test_durations_and_options(argv: list[str], field: str, value: object) -> None:
    assert getattr(parse(argv), field) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["submit", "t.py", "--workers", "0"], "'0': at least 1"),
        (["submit", "t.py", "--gpus", "-1"], "'-1': not negative"),
        (["submit", "t.py", "--strategy", "gossip"], "invalid choice: 'gossip'"),
        (["logs", "j", "--since", "5 minutes"], "'5 minutes': a duration like 30s, 5m, 2h"),
        (["scale", "j", "many"], "'many': not a whole number"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["logs", "j", "--", "x"], "arguments after -- are the script's: only for submit"),
    ],
)
def test_bad_arguments_exit_2_naming_the_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_dry_run_prints_the_configmap_and_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train_custom.py"
    script.write_text("print(1)\n")
    assert main(["-n", "team", "submit", str(script), "--name", "demo", "--workers", "3", "--dry-run", "--", "-x"]) == 0
    configmap, job = list(yaml.safe_load_all(capsys.readouterr().out))
    assert configmap["kind"] == "ConfigMap" and configmap["data"] == {"train_custom.py": "print(1)\n"}
    parsed = TrainingJob.model_validate(job)
    assert (parsed.name, parsed.namespace, parsed.spec.workers.replicas) == ("demo", "team", 3)
    assert parsed.spec.workers.template["spec"]["containers"][0]["command"][-1] == "-x"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["submit", "missing.py", "--dry-run"], 2, "ringleader: error: missing.py: no such script file"),
        (
            ["submit", "{script}", "--env", "NOEQUALS", "--dry-run"],
            2,
            "ringleader: error: --env 'NOEQUALS': NAME=VALUE",
        ),
        (
            ["submit", "{script}", "--node-selector", "pool", "--dry-run"],
            2,
            "ringleader: error: --node-selector 'pool'",
        ),
        (["diagnose"], 2, "ringleader: error: diagnose needs a job's NAME"),
        (["diagnose", "--from-state", "nope.json"], 2, "ringleader: error: --from-state nope.json: no such file"),
        (["--kubeconfig", "{missing}", "list"], 3, "ringleader: error: no usable kubeconfig"),
    ],
)
def test_errors_are_one_line_with_an_exit_code(
    argv: list[str], code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: no service account to fall back to
    argv = [a.format(script=script, missing=tmp_path / "no-kubeconfig") for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert err.count("\n") == 1
