"""What a failed rank's termination message says of its end, pure. The message is the container's last log lines
(terminationMessagePolicy FallbackToLogsOnError, which the operator sets on the trainer container: at most 80
lines or 2 KiB on a real kubelet), read as hostile (a pod writes what it likes there): only a bounded tail is
looked at, every field is cut to a bound, and nothing in it is more than text to quote.

Two things are looked for, the last of each counting:
- the trainer's exit record: a JSON line `{"event": "exit", "code": 1, "exception": "ValueError", "message":
  "...", "frames": ["train.py:190 in train", ...], "savedStep": 540}` (trainer-image/ringleader_trainer/
  exitrecord.py), written last by a rank that exits non-zero;
- else a Python traceback, as any script's uncaught exception prints it (a script under torchrun): the exception
  line that ends it and the frames above it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

LINES = 80  # the most a kubelet keeps of the logs as the termination message
LINE_CHARACTERS = 4096  # a longer line is not one the trainer wrote
EXCEPTION_CHARACTERS = 120
MESSAGE_CHARACTERS = 300
FRAMES = 3
FRAME_CHARACTERS = 160
MAX_STEP = 2**53

_FRAME = re.compile(r'^\s+File "(?:.*/)?([^"/]+)", line (\d+), in (\S+)')
# The line a traceback ends with: a dotted name (a class, as Python prints it), then its message, if any.
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


@dataclass(frozen=True)
class Said:
    """What a rank said of its end: its exception (qualified type name; empty: none said), the exception's
    message (one line), the innermost frames (`file:line in function`), the step it saved before it stopped,
    and the exit code its record gives."""

    exception: str = ""
    message: str = ""
    frames: tuple[str, ...] = ()
    saved_step: int | None = None
    code: int | None = None

    @property
    def error(self) -> str:
        """`ValueError: bad shape`: what identifies the error (the same error twice in a row reads the same)."""
        return f"{self.exception}: {self.message}" if self.message else self.exception

    def describe(self) -> str:
        """`ValueError: bad shape (train.py:190 in train)`, empty when no exception was said."""
        if not self.exception:
            return ""
        where = f" ({self.frames[-1]})" if self.frames else ""
        return f"{self.error}{where}"


def read(output: str) -> Said:
    """What the termination message `output` says: the trainer's exit record if it has one, else the last
    traceback's exception, else nothing (Said())."""
    lines = [line[:LINE_CHARACTERS] for line in output[-LINES * LINE_CHARACTERS :].splitlines()[-LINES:]]
    for line in reversed(lines):
        said = _record(line)
        if said is not None:
            return said
    return _traceback(lines)


def _record(line: str) -> Said | None:
    """The trainer's exit record on this line, None when the line is not one."""
    text = line.strip()
    if not (text.startswith("{") and '"exit"' in text):
        return None
    try:
        fields = json.loads(text)
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("event") != "exit":
        return None
    frames = fields.get("frames")
    return Said(
        exception=_text(fields.get("exception"), EXCEPTION_CHARACTERS),
        message=_text(fields.get("message"), MESSAGE_CHARACTERS),
        frames=tuple(_text(f, FRAME_CHARACTERS) for f in frames[-FRAMES:]) if isinstance(frames, list) else (),
        saved_step=_whole(fields.get("savedStep"), MAX_STEP),
        code=_whole(fields.get("code"), 255),
    )


def _traceback(lines: list[str]) -> Said:
    """The exception line that ends the last traceback in `lines`, and the frames above it."""
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("Traceback (most recent call")), None)
    if start is None:
        return Said()
    frames: list[str] = []
    for line in lines[start + 1 :]:
        if frame := _FRAME.match(line):
            frames.append(_text(f"{frame[1]}:{frame[2]} in {frame[3]}", FRAME_CHARACTERS))
        elif not line.startswith((" ", "\t")) and (found := _EXCEPTION.match(line.strip())):
            return Said(
                exception=found[1][:EXCEPTION_CHARACTERS],
                message=_text(found[2], MESSAGE_CHARACTERS),
                frames=tuple(frames[-FRAMES:]),
            )
    return Said()


def _whole(value: object, most: int) -> int | None:
    """`value` if it is a whole number from 0 to `most`, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most else None


def _text(value: object, limit: int) -> str:
    """A field as one printable line of at most `limit` characters (empty when it is not a string)."""
    if not isinstance(value, str):
        return ""
    line = " ".join(value.split())
    return "".join(c for c in line if c.isprintable())[:limit]
