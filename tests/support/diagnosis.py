"""`ringleader diagnose` of a job in a test, keeping the state it read when RINGLEADER_RECORD_STATES=DIR is set:
the unit tests' recorded job states (tests/unit/cli/states/) are made by running the tests that call this."""

from __future__ import annotations

import os
from pathlib import Path

from ringleader import Client
from ringleader.diagnose import Diagnosis, diagnose


def diagnose_job(kubeconfig: Path, namespace: str, name: str, record_as: str) -> Diagnosis:
    state = Client(namespace, str(kubeconfig)).state(name)
    folder = os.environ.get("RINGLEADER_RECORD_STATES")
    if folder:
        state.save(Path(folder) / f"{record_as}.json")
    return diagnose(state)
