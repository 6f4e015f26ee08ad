"""The trainer's exit codes: the contract the operator's `ExitCode` restart policy relies on.

1-127 are the program's own errors and fail the job at once under `ExitCode`; 128-255 are retried (the
kernel's signal exits 128+N, e.g. 137 for SIGKILL/OOM and 143 for SIGTERM, and the trainer's own retryable
codes below, chosen above the signal range so they cannot be mistaken for one). docs/exit-codes.md lists them.
"""

from __future__ import annotations

import os
import sys
from enum import IntEnum
from typing import ClassVar, NoReturn


class ExitCode(IntEnum):
    OK = 0
    CRASH = 1  # an unexpected error (Python's own exit code for an uncaught exception; traceback logged)
    # Permanent: the same pod would fail the same way again.
    BAD_ENVIRONMENT = 2  # the operator's environment contract is missing or inconsistent
    BAD_CONFIG = 3  # unknown example, invalid trainer arguments
    CORRUPT_CHECKPOINT = 4  # a checkpoint exists but cannot be loaded, and no older one can
    # Retryable: infrastructure or peers; recreating the rank may succeed.
    RENDEZVOUS_TIMEOUT = 200  # the master or a parameter server was not reachable in time
    PEER_LOST = 201  # a collective or parameter-server exchange failed or timed out (a rank died)
    # Not a failure: asked to stop (SIGTERM), the rank wrote its checkpoint at the step it stopped at
    # (elastic/stopping.py). The operator recreates the rank if the job still wants it and counts no restart.
    STOPPED = 202

    @property
    def retryable(self) -> bool:
        return self >= 128


class TrainerError(Exception):
    """Base of the trainer's own errors: each subclass declares the exit code that ends the trainer when one
    escapes (`train.exit_code_for`)."""

    exit_code: ClassVar[ExitCode] = ExitCode.CRASH


class StrategyUsageError(TrainerError):
    """The script called the API in a way this rank's strategy cannot honour."""

    exit_code = ExitCode.BAD_CONFIG


def one_line(exc: BaseException) -> str:
    """An exception as the one line an error message quotes: its first line, or its type if it has no text."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def exit_now(code: int) -> NoReturn:
    """End the process with `code` right away, after flushing stdout and stderr.

    torch keeps gloo's loop threads and the rendezvous store's server thread alive after
    destroy_process_group(); in the normal interpreter teardown, static destructors can then meet a
    thread that is still joinable and abort the process ("terminate called without an active exception",
    exit -6) after the work is done and saved. Leaving with os._exit skips that teardown; everything the
    trainer writes (checkpoints, the final model) is closed and fsynced before this point."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
