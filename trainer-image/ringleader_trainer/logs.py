"""How every rank logs: one JSON object per line on stdout (docs/trainer.md, "Metrics and logs", lists the events)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO


def log_json(**fields: Any) -> None:
    """One JSON object per line on stdout, stamped with the time."""
    emit(json.dumps({"ts": round(time.time(), 3), **fields}))


def emit(line: str, stream: TextIO | None = None) -> None:
    """Write `line` and its newline in one write, flushed: the processes of a pod of several ranks share its
    stdout and stderr, and print() under `python -u` writes the text and the newline apart, so two ranks' lines
    would run together."""
    out = stream or sys.stdout
    out.write(line + "\n")
    out.flush()
