"""The merged log, pure: ranks merged by time, a rank's own order kept, markers between attempts (also for attempts
whose lines are gone), the trainer's JSON lines rendered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ringleader.logmerge import EPOCH, LogLine, marker, merge, parse_lines, parse_time, rank_stream, render

T0 = datetime(2026, 11, 26, 5, 0, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def texts(lines: list[LogLine]) -> list[str]:
    return [f"{line.rank}:{line.text}" for line in lines]


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2026-11-26T05:00:01.123456789Z", T0 + timedelta(seconds=1.123456)),  # the kubelet's nanoseconds
        ("2026-11-26T05:00:01Z", T0 + timedelta(seconds=1)),
        ("2026-11-26T06:00:01+01:00", T0 + timedelta(seconds=1)),
        ("not-a-time", None),
        ("", None),
    ],
)
def test_times_as_the_kubelet_writes_them(stamp: str, expected: datetime | None) -> None:
    assert parse_time(stamp) == expected


def test_a_line_without_a_stamp_takes_the_previous_time() -> None:
    lines = parse_lines("worker-0", 0, f"{at(1)} first\ncontinued without a stamp\n{at(2)} second")
    assert [(line.time, line.text) for line in lines] == [
        (T0 + timedelta(seconds=1), "first"),
        (T0 + timedelta(seconds=1), "continued without a stamp"),
        (T0 + timedelta(seconds=2), "second"),
    ]


def test_ranks_are_merged_by_time_and_ties_keep_the_rank_order() -> None:
    w0 = parse_lines("worker-0", 0, f"{at(1)} a\n{at(3)} c\n{at(5)} e")
    w1 = parse_lines("worker-1", 0, f"{at(2)} b\n{at(3)} c1\n{at(4)} d")
    merged = list(merge([w0, w1]))
    assert texts(merged) == ["worker-0:a", "worker-1:b", "worker-0:c", "worker-1:c1", "worker-1:d", "worker-0:e"]


def test_a_marker_stands_between_two_attempts_even_when_its_clock_reads_earlier() -> None:
    first = parse_lines("worker-1", 0, f"{at(1)} starting\n{at(10)} Traceback: boom")
    second = parse_lines("worker-1", 1, f"{at(12)} starting again\n{at(13)} step 1")
    # The restart's event is stamped (whole seconds) before the first attempt's last line.
    markers = {1: marker("worker-1", 1, T0 + timedelta(seconds=9), "exited with code 1")}
    stream = rank_stream([first, second], markers)
    assert [line.text for line in stream] == [
        "starting", "Traceback: boom", "--- worker-1: attempt 1 starts (exited with code 1) ---",
        "starting again", "step 1",
    ]  # fmt: skip
    assert [line.time for line in stream] == sorted(line.time for line in stream)
    other = parse_lines("worker-0", 0, f"{at(9.5)} worker 0 waits")
    merged = texts(list(merge([stream, other])))
    assert merged.index("worker-0:worker 0 waits") < merged.index("worker-1:Traceback: boom")
    assert merged.index("worker-1:Traceback: boom") < merged.index(
        "worker-1:--- worker-1: attempt 1 starts (exited with code 1) ---"
    )


def test_markers_of_attempts_whose_lines_are_gone_come_first_in_order() -> None:
    current = parse_lines("worker-1", 2, f"{at(20)} third attempt")
    markers = {
        1: marker("worker-1", 1, T0 + timedelta(seconds=5), "exit 1"),
        2: marker("worker-1", 2, T0 + timedelta(seconds=15), "exit 1 again"),
    }
    assert [line.text for line in rank_stream([current], markers)] == [
        "--- worker-1: attempt 1 starts (exit 1) ---", "--- worker-1: attempt 2 starts (exit 1 again) ---",
        "third attempt",
    ]  # fmt: skip


def test_a_rank_with_no_lines_yet_still_shows_its_markers() -> None:
    markers = {1: marker("ps-0", 1, EPOCH, "")}
    assert [line.text for line in rank_stream([[]], markers)] == ["--- ps-0: attempt 1 starts ---"]


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            '{"ts": 1.5, "role": "worker", "index": 0, "strategy": "allreduce", "step": 20, "loss": 0.123456789}',
            "strategy=allreduce step=20 loss=0.123457",
        ),
        ('{"ts": 1.5, "role": "worker", "index": 1, "event": "resume", "step": 100}', "resume: step=100"),
        ('{"ts": 1.5, "event": "recover", "reason": "peer lost"}', 'recover: reason="peer lost"'),
        ('{"ts": 1.5, "event": "done"}', "done"),
        ('{"no_ts": 1}', '{"no_ts": 1}'),  # not the trainer's: as it is
        ("{not json", "{not json"),
        ("plain text", "plain text"),
        ("[1, 2]", "[1, 2]"),
    ],
)
def test_the_trainers_json_lines_are_rendered(line: str, shown: str) -> None:
    assert render(line) == shown


def test_the_last_lines_of_a_gone_attempt_come_before_its_successors_marker() -> None:
    """logs after the fact: attempt 0's pod is gone, its last lines kept by the operator's RankOutput event."""
    from ringleader.jobstate import JobState

    job = {"metadata": {"name": "rs"}, "spec": {"workers": {"replicas": 2}}}
    events = [
        {"reason": "RankOutput", "lastTimestamp": at(10), "message":
            "worker 1 (pod rs-worker-1) attempt 0 ended; its last lines:\nstarting\nValueError: bad lr"},
        {"reason": "RankRestarting", "lastTimestamp": at(10), "message":
            "worker 1 (pod rs-worker-1) failed with exit code 1; restarting it in 1 s"},
    ]  # fmt: skip
    pod = {
        "metadata": {
            "name": "rs-worker-1",
            "annotations": {"ringleader.dev/attempt": "1"},
            "labels": {"ringleader.dev/replica-type": "worker", "ringleader.dev/replica-index": "1"},
        }
    }
    state = JobState(job, [pod], events)
    current = parse_lines("worker-1", 1, f"{at(12)} starting again")
    stream = rank_stream([*state.last_lines("worker-1").values(), current], state.markers("worker-1"))
    assert [line.text for line in stream] == [
        "--- worker-1: the last lines of attempt 0 (its pod is gone; kept by the operator) ---",
        "starting", "ValueError: bad lr",
        "--- worker-1: attempt 1 starts (worker 1 (pod rs-worker-1) failed with exit code 1; restarting it in 1 s) ---",
        "starting again",
    ]  # fmt: skip
    assert state.last_lines("worker-0") == {}


def test_a_gang_restart_marks_each_rank_once() -> None:
    """Worker 1 failed; the gang restart's event for worker 0 names worker 1's pod after its own: each rank's
    marker is its own event."""
    from ringleader.jobstate import JobState

    job = {"metadata": {"name": "g"}, "spec": {"workers": {"replicas": 2}}}
    events = [
        {"reason": "RankRestarting", "lastTimestamp": at(5), "message": "worker 1 (pod g-worker-1) failed with exit "
         "code 1; spec.workers.failureRules[0] (RestartGang) matched; restarting it, and every other rank with it"},
        {"reason": "GangRestart", "lastTimestamp": at(5), "message": "worker 0 (pod g-worker-0) restarts with its "
         "gang: worker 1 (pod g-worker-1) failed with exit code 1"},
    ]  # fmt: skip

    def pod(index: int) -> dict[str, object]:
        return {"metadata": {"name": f"g-worker-{index}", "annotations": {"ringleader.dev/attempt": "1"}, "labels": {
            "ringleader.dev/replica-type": "worker", "ringleader.dev/replica-index": str(index)}}}  # fmt: skip

    state = JobState(job, [pod(0), pod(1)], events)
    assert [e["reason"] for e in state.replacements("worker-1")] == ["RankRestarting"]
    assert [e["reason"] for e in state.replacements("worker-0")] == ["GangRestart"]
    assert "restarts with its gang" in state.markers("worker-0")[1].text
