"""How every rank logs: one JSON object per line on stdout (docs/trainer.md, "Metrics and logs", lists the events)."""

from __future__ import annotations

import json
import time
from typing import Any


def log_json(**fields: Any) -> None:
    """One JSON object per line on stdout, stamped with the time."""
    print(json.dumps({"ts": round(time.time(), 3), **fields}), flush=True)
