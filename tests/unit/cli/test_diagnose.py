"""Every diagnose rule on job states recorded from real jobs (tests/unit/cli/states/, made by the dev-cluster tests
with RINGLEADER_RECORD_STATES=DIR: tests/integration/cli/test_diagnose.py, the node-loss test, and on the real
node the OOM and image-pull tests), and the exit-code table held to the trainer's."""

from __future__ import annotations

from pathlib import Path

import pytest
from ringleader.diagnose import RULES, diagnose
from ringleader.jobfacts import EXIT_CODES
from ringleader.jobstate import JobState
from ringleader_trainer.exitcodes import ExitCode

STATES = Path(__file__).parent / "states"

# state file -> (headline, [(rule, severity, a phrase of what it says), ...] in order: nothing else is found)
EXPECTED: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "exit-code-3": ("exit-code-3: Failed (RankFailed)", [
        ("exit-3", "error", "worker-1 exited with code 3 (BAD_CONFIG)"),
        ("failure-class", "error", "worker-1 failed first on node process-node at 2026-11-28T23:48:02Z: UserCode"),
    ]),
    "rendezvous-timeout": ("rendezvous-timeout: Failed (RankFailed)", [
        ("exit-200", "error", "worker-1's last line: ringleader-trainer: error: rendezvous with rendezvous-timeout-w"),
        ("failure-class", "error", "Infrastructure the rendezvous timed out: ringleader_trainer.rendezvous."
                                   "RendezvousError: rendezvous with rendezvous-timeout-w"),
    ]),
    "backoff-limit": ("backoff-limit: Failed (BackoffLimitExceeded)", [
        ("exit-1", "error", "worker-0's last line: no luck"),
        ("failure-class", "error", "ringleader logs backoff-limit --rank worker-0"),
        ("backoff-limit", "error", "used up its restarts"),
    ]),
    "invalid-spec": ("invalid-spec: Failed (InvalidSpec)", [
        ("invalid-spec", "error", "env sets RANK"),
    ]),
    "unschedulable": ("unschedulable: Pending", [
        ("unschedulable", "error", "needs 10000 cpu"),
    ]),
    "stalled": ("stalled: Failed (ProgressDeadlineExceeded)", [
        ("stalled", "error", "ringleader logs stalled --rank worker-1"),
    ]),
    "straggler": ("straggler: Running", [
        ("straggler", "warning", "worker 1 (pod straggler-worker-1"),
    ]),
    "deadline": ("deadline: Failed (DeadlineExceeded)", [
        ("deadline", "error", "activeDeadlineSeconds (3 s)"),
    ]),
    "evicted": ("evicted: Running", [
        ("failure-class", "warning", "Infrastructure was evicted (EvictionByEvictionAPI) not the program's doing"),
        ("evicted", "warning", "was evicted (EvictionByEvictionAPI)"),
    ]),
    "progress-unavailable": ("progress-unavailable: Running", [
        ("progress-unavailable", "warning", "worker 0's step could not be read"),
    ]),
    "suspended": ("suspended: Suspended", [
        ("suspended", "info", "ringleader resume suspended"),
    ]),
    "succeeded": ("succeeded: Succeeded (JobSucceeded)", [
        ("succeeded", "info", "the job succeeded"),
    ]),
    "node-lost": ("lost: Succeeded (JobSucceeded)", [
        ("node-lost", "warning", "2 ranks lost with their node"),
    ]),
    "oom-killed": ("oom: Failed (FailureRule)", [
        ("oom-killed", "error", "its memory limit is 64Mi"),
        ("failure-rule", "error", "spec.workers.failureRules[0] (FailJob) matched"),
    ]),
    "image-pull": ("pull: Pending", [
        ("image-pull", "error", ":no-such-tag"),
    ]),
    "failed-mount": ("mount: Pending", [
        ("pod-warning", "warning", "mount-worker-0: FailedMount"),
    ]),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_recorded_job_is_diagnosed(name: str) -> None:
    headline, expected = EXPECTED[name]
    found = diagnose(JobState.load(STATES / f"{name}.json"))
    text = found.text()
    assert found.headline == headline, text
    assert [(f.rule, f.severity) for f in found.findings] == [(r, s) for r, s, _ in expected], text
    for (_, _, phrase), finding in zip(expected, found.findings, strict=True):
        assert phrase in f"{finding.what} {finding.detail} {finding.next}", text


def test_every_rule_is_met_by_some_recorded_job() -> None:
    """No rule goes untried: each finds something in at least one recorded state."""
    fired: set[str] = set()
    for path in STATES.glob("*.json"):
        state = JobState.load(path)
        for rule in RULES:
            if rule(state):
                fired.add(rule.__name__)
    assert {r.__name__ for r in RULES} - fired == set()


def test_the_exit_codes_are_the_trainers() -> None:
    for code in ExitCode:
        if code != ExitCode.OK:
            assert EXIT_CODES[code.value][0] == code.name, code
    signals = {134: "SIGABRT", 137: "SIGKILL", 139: "SIGSEGV", 143: "SIGTERM"}
    assert {c: EXIT_CODES[c][0] for c in signals} == signals
    assert set(EXIT_CODES) == {c.value for c in ExitCode if c != ExitCode.OK} | set(signals)
