"""The last line a rank writes before it exits non-zero: a JSON record of how it ended, which the operator reads
in its termination message (the container's last log lines: terminationMessagePolicy FallbackToLogsOnError) to
name and class the failure in the job's status without reading the log (operator: evidence.py), and to learn the
step a stopping rank saved. A few hundred bytes, written in one write: well inside the 2 KiB a kubelet keeps.
docs/exit-codes.md."""

from __future__ import annotations

import json
import os
import traceback

from .logs import emit

FRAMES = 3  # the innermost frames: where the error was raised
MESSAGE_CHARACTERS = 300


def record(code: int, error: BaseException | None = None, saved_step: int | None = None) -> str:
    """The record of an exit with `code`: the exception that ended the rank (its type's qualified name, its
    message's first line, its innermost frames as `file:line in function`), or the step it saved before it
    stopped."""
    fields: dict[str, object] = {"event": "exit", "code": int(code)}
    if error is not None:
        kind = type(error)
        module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
        text = str(error).strip()
        fields["exception"] = f"{module}{kind.__qualname__}"
        fields["message"] = (text.splitlines()[0] if text else "")[:MESSAGE_CHARACTERS]
        frames = traceback.extract_tb(error.__traceback__)[-FRAMES:]
        fields["frames"] = [f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in frames]
    if saved_step is not None:
        fields["savedStep"] = int(saved_step)
    return json.dumps(fields)


def write(code: int, error: BaseException | None = None, saved_step: int | None = None) -> None:
    """Write the record as the rank's last line, on stdout with its other JSON events: stderr keeps the one
    line of a human's error message, and the container's log (both streams, in the order written) ends with it."""
    emit(record(code, error, saved_step))
