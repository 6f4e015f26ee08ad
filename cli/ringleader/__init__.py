"""Ringleader for people: the `ringleader` CLI (`kubectl ringleader`) and the Python SDK.

    from ringleader import Client
    name = Client().submit("train.py", workers=4, strategy="allreduce")

See docs/cli.md. The TrainingJob models are `ringleader_api`'s, the operator's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .diagnose import Diagnosis, Finding
from .errors import InvalidSpec, NotFound, NoTrainingJobApi, RingleaderError, UsageError, WaitTimeout
from .jobstate import JobState
from .logmerge import LogLine

if TYPE_CHECKING:
    from .client import Client

__version__ = "0.1.0"
__all__ = [
    "Client", "Diagnosis", "Finding", "InvalidSpec", "JobState", "LogLine", "NoTrainingJobApi", "NotFound",
    "RingleaderError", "UsageError", "WaitTimeout",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    """`Client` is imported on first use: the Kubernetes client is slow to import, and the CLI's --help and
    --dry-run do not need it."""
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(name)
