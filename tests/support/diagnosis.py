"""`ringleader diagnose` of a job in a test, keeping the state it read when RINGLEADER_RECORD_STATES=DIR is set:
the unit tests' recorded job states (tests/unit/cli/states/) are made by running the tests that call this."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from ringleader import Client
from ringleader.diagnose import Diagnosis, diagnose

REPO = Path(__file__).resolve().parents[2]


def diagnose_job(kubeconfig: Path, namespace: str, name: str, record_as: str) -> Diagnosis:
    state = Client(namespace, str(kubeconfig)).state(name)
    folder = os.environ.get("RINGLEADER_RECORD_STATES")
    if folder:
        path = Path(folder) / f"{record_as}.json"
        state.save(path)
        path.write_text(scrub(path.read_text()))
    return diagnose(state)


def scrub(text: str) -> str:
    """The recording without this machine's paths (the checkout, the cache, home, pytest's temporary folders)."""
    cache = os.environ.get("RINGLEADER_CACHE") or str(Path.home() / ".cache" / "ringleader")
    for path, placeholder in ((str(REPO), "<repo>"), (cache, "<cache>"), (str(Path.home()), "<home>")):
        text = text.replace(path, placeholder)
    return re.sub(re.escape(tempfile.gettempdir()) + r"/pytest-of-[^/]+/pytest-\d+", "<tmp>", text)
