"""The supervisor behind `python -m ringleader_trainer`: it forks each training process, forks a fresh one
when the last asks to recover, passes signals on, reaps what its training processes leave orphaned, and leaves
no child behind when it is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from ringleader_trainer.exitcodes import ExitCode

from tests.support.cluster import wait_for

# A training process stand-in: records its pid and RINGLEADER_RECOVERIES, then does what `behaviour` says.
PROGRAM = textwrap.dedent(
    """
    import os, signal, sys, time
    from ringleader_trainer.elastic import recovery
    from ringleader_trainer.exitcodes import exit_now

    behaviour, record = sys.argv[1], sys.argv[2]

    def main() -> int:
        with open(record, "a") as f:
            f.write(f"{os.getpid()} {os.getppid()} {recovery.recoveries()}\\n")
        if behaviour == "recover-twice" and recovery.recoveries() < 2:
            recovery.reexec("peer lost", limit=10)
        if behaviour == "recover-past-limit":
            recovery.reexec("peer lost", limit=1)
            return 201
        if behaviour == "crash":
            raise ValueError("boom")
        if behaviour == "exit-message":
            sys.exit("bad flag")
        if behaviour == "graceful":  # notes the SIGTERM, then dies of it
            def on_term(signum, frame):
                with open(record + ".term", "w") as f:
                    f.write(str(os.getpid()))
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            signal.signal(signal.SIGTERM, on_term)
        if behaviour == "orphan":  # leaves a grandchild that outlives its parent, then ends
            middle = os.fork()
            if middle == 0:
                grandchild = os.fork()
                if grandchild == 0:
                    time.sleep(5)
                    os._exit(0)
                with open(record + ".orphan", "w") as f:
                    f.write(str(grandchild))
                os._exit(0)
            os.waitpid(middle, 0)
        if behaviour in ("sleep", "graceful", "orphan"):
            time.sleep(60)
        return 0

    exit_now(recovery.supervise(main))
    """
)


def start(tmp_path: Path, behaviour: str) -> tuple[subprocess.Popen[str], Path]:
    record = tmp_path / "children"
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, behaviour, str(record)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "RINGLEADER_RECOVERIES": "0"},
    )  # fmt: skip
    return proc, record


def children(record: Path) -> list[tuple[int, int, int]]:
    """(pid, parent pid, recoveries) of each training process so far."""
    if not record.exists():
        return []
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in record.read_text().splitlines())]


def wait_for_child(proc: subprocess.Popen[str], record: Path) -> int:
    def started() -> list[tuple[int, int, int]]:
        assert proc.poll() is None, proc.communicate()  # a supervisor that ended fails now, not at the deadline
        return children(record)

    return wait_for("the supervisor's first child", started, every=0.05)[0][0]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_each_recovery_is_a_fresh_child_of_the_same_supervisor(tmp_path: Path) -> None:
    proc, record = start(tmp_path, "recover-twice")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    runs = children(record)
    assert [r[2] for r in runs] == [0, 1, 2]  # the count reaches each new child
    assert len({r[0] for r in runs}) == 3 and {r[1] for r in runs} == {proc.pid}  # new pids, one parent
    assert out.count('"event": "recover"') == 2


def test_past_the_limit_the_child_s_exit_code_is_the_supervisor_s(tmp_path: Path) -> None:
    proc, record = start(tmp_path, "recover-past-limit")
    proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.PEER_LOST
    assert [r[2] for r in children(record)] == [0, 1]


def test_an_uncaught_error_exits_1_with_its_traceback(tmp_path: Path) -> None:
    proc, _ = start(tmp_path, "crash")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "ValueError: boom" in err and "Traceback" in err


def test_sys_exit_with_a_message_prints_it_and_exits_1(tmp_path: Path) -> None:
    proc, _ = start(tmp_path, "exit-message")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.strip().endswith("bad flag")


def test_sigterm_reaches_the_child_and_the_supervisor_dies_of_it_too(tmp_path: Path) -> None:
    proc, record = start(tmp_path, "graceful")
    child = wait_for_child(proc, record)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM  # what the container runtime reports as 143
    assert (tmp_path / "children.term").read_text() == str(child)  # the child got it, not a SIGKILL
    assert not alive(child)


def test_a_sigkilled_child_makes_the_supervisor_die_of_sigkill(tmp_path: Path) -> None:
    """What the OOM killer does in a container: it kills the biggest process, the training child. The
    supervisor must end as SIGKILL (137, retried under ExitCode), not with an error of its own (1, which
    fails the job); as a container's PID 1 it exits 137 (tested on the real node, tests/e2e)."""
    proc, record = start(tmp_path, "sleep")
    child = wait_for_child(proc, record)
    os.kill(child, signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err


def test_a_sigkilled_supervisor_leaves_no_child_behind(tmp_path: Path) -> None:
    proc, record = start(tmp_path, "sleep")
    child = wait_for_child(proc, record)
    proc.kill()
    proc.wait(timeout=30)
    wait_for(f"child {child} to die with its supervisor", lambda: not alive(child), timeout=10, every=0.05)


def _parent_of(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def test_orphans_of_a_training_process_come_to_the_supervisor_and_are_reaped(tmp_path: Path) -> None:
    proc, record = start(tmp_path, "orphan")
    try:
        wait_for_child(proc, record)
        orphan_file = tmp_path / "children.orphan"
        written = wait_for(
            "the orphan's pid", lambda: orphan_file.read_text() if orphan_file.exists() else "", every=0.05
        )
        orphan = int(written)
        wait_for("the orphan adopted by the supervisor", lambda: _parent_of(orphan) == proc.pid, timeout=5, every=0.05)
        # It ends 5 s after it was born; a zombie keeps its /proc entry until its parent reaps it.
        wait_for("the ended orphan reaped", lambda: not Path(f"/proc/{orphan}").exists(), timeout=20, every=0.1)
        assert proc.poll() is None  # the training process runs on
    finally:
        proc.kill()
        proc.wait(timeout=30)
