"""A failed image build is one line naming the Dockerfile, the step and why; the steps show as they start; the
tool runner hands lines over as they come and kills a tool that outlives its time."""

from __future__ import annotations

import sys
import time

import pytest
from ringleader_devcluster.buildlog import BuildLog
from ringleader_devcluster.tools import RealNodeError, run_lines

# What buildah 1.28 printed for these Dockerfiles (stdout and stderr together), and the line a user gets.
FAILED_RUN = """\
STEP 1/4: FROM localhost/ringleader/python:3.11-bookworm
STEP 2/4: RUN echo hello
hello
--> f38f341a4f0
STEP 3/4: RUN echo about to fail >&2; exit 3
about to fail
subprocess exited with status 3
subprocess exited with status 3
Error: building at STEP "RUN echo about to fail >&2; exit 3": exit status 3
"""
FAILED_PIP = "\n".join(
    [
        "STEP 1/12: FROM localhost/ringleader/python:3.11-bookworm",
        "STEP 2/12: ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu",
        "STEP 3/12: COPY requirements/trainer.txt requirements/trainer.txt",
        "--> 0a1b2c3d4e5",
        "STEP 4/12: RUN python -m venv /opt/venv     && /opt/venv/bin/pip install --no-cache-dir "
        '--disable-pip-version-check         --index-url "${TORCH_INDEX_URL}" -r requirements/trainer.txt',
        "Looking in indexes: https://download.pytorch.org/whl/cpu, https://pypi.org/simple",
        "ERROR: Could not find a version that satisfies the requirement torch==9.9.9 (from versions: none)",
        "ERROR: No matching distribution found for torch==9.9.9",
        "subprocess exited with status 1",
        'Error: building at STEP "RUN python -m venv /opt/venv ...": exit status 1',
    ]
)
FAILED_COPY = (
    "STEP 1/3: FROM localhost/ringleader/python:3.11-bookworm\n"
    "STEP 2/3: COPY missing/ missing/\n"
    'Error: building at STEP "COPY missing/ missing/": checking on sources under "/src": copier: stat: '
    '"/missing": no such file or directory\n'
)
BAD_DOCKERFILE = """\
Error: parsing "Dockerfile": dockerfile parse error on line 2: unknown instruction: RNU
"""


@pytest.mark.parametrize(
    ("output", "want"),
    [
        (FAILED_RUN, "building Dockerfile failed at STEP 3/4 `RUN echo about to fail >&2; exit 3` (exit status 3): "
                     "about to fail"),
        (FAILED_PIP, "building Dockerfile failed at STEP 4/12 `RUN python -m venv /opt/venv && /opt/venv/bin/pip "
                     "install --no-cache-dir ...` (exit status 1): ERROR: No matching "
                     "distribution found for torch==9.9.9"),
        (FAILED_COPY, 'building Dockerfile failed at STEP 2/3 `COPY missing/ missing/`: Error: building at STEP '
                      '"COPY missing/ missing/": checking on sources under "/src": copier: stat: "/missing": no such '
                      "file or directory"),
        (BAD_DOCKERFILE, 'building Dockerfile failed: Error: parsing "Dockerfile": dockerfile parse error on line 2: '
                         "unknown instruction: RNU"),
        ("", "building Dockerfile failed: exit code 125"),
    ],
    ids=["run", "pip", "copy", "parse", "silent"],
)  # fmt: skip
def test_a_failed_build_names_its_step_and_the_steps_last_line(output: str, want: str) -> None:
    log = BuildLog("Dockerfile")
    started = [line for line in output.splitlines() if log.feed(line)]
    assert started == [x for x in output.splitlines() if x.startswith("STEP ")]
    assert log.failure(125 if not output else 1) == want
    assert "\n" not in log.failure(1)


def test_tool_output_comes_line_by_line_with_the_exit_code() -> None:
    seen: list[tuple[float, str]] = []
    script = "import sys, time; print('one', flush=True); time.sleep(0.5); print('two', file=sys.stderr); sys.exit(4)"
    t0 = time.monotonic()
    code = run_lines([sys.executable, "-c", script], "a tool", lambda line: seen.append((time.monotonic(), line)), 30)
    assert code == 4 and [line for _, line in seen] == ["one", "two"]
    assert seen[0][0] - t0 < seen[1][0] - t0 - 0.3  # the first line arrived before the tool slept


def test_a_tool_past_its_time_is_killed_and_named() -> None:
    t0 = time.monotonic()
    with pytest.raises(RealNodeError, match=r"^a slow tool: python\S* did not finish within 1s$"):
        run_lines([sys.executable, "-c", "import time; time.sleep(60)"], "a slow tool", lambda _: None, 1)
    assert time.monotonic() - t0 < 30
    with pytest.raises(RealNodeError, match="no-such-tool not found"):
        run_lines(["no-such-tool"], "a missing tool", lambda _: None, 1)
