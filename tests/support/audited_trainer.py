"""`python tests/support/audited_trainer.py ARGS`: the built-in trainer (`python -m ringleader_trainer ARGS`) with
an audit hook that writes a line to stderr for every checkpoint file (`*.pt` under RINGLEADER_CHECKPOINT_DIR)
this process or a training process it forks opens for reading:

    audit: read <path>

so a test can assert that a run read no checkpoint (healing from a live peer)."""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

READ_FLAGS = os.O_WRONLY | os.O_RDWR


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not isinstance(args[0], str | bytes):
        return
    path, mode, flags = os.fsdecode(args[0]), args[1], args[2]
    directory = os.environ.get("RINGLEADER_CHECKPOINT_DIR")
    reading = ("r" in mode and "+" not in mode) if isinstance(mode, str) else not flags & READ_FLAGS
    if directory and reading and path.endswith(".pt") and os.path.abspath(path).startswith(directory):
        sys.stderr.write(f"audit: read {path}\n")
        sys.stderr.flush()


sys.addaudithook(_hook)
runpy.run_module("ringleader_trainer", run_name="__main__", alter_sys=True)
