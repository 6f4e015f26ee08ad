"""A job's pods cannot hurt the operator: worker 0 serving a 100 MB metrics page (no length announced, as a
stream) leaves the operator's memory where it was and every round quick, the job gets one ProgressUnavailable
event, and another job runs to Succeeded meanwhile."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import operatorprocess

from tests.support.cluster import wait_for
from tests.support.jobs import create, round_durations, training_job, wait_condition

# Serial: the operator's memory and round durations must see these jobs alone.
pytestmark = [pytest.mark.usefixtures("operator"), pytest.mark.serial]

# Worker 0 answers /metrics on the metrics port with 100 MB of valid-looking metrics, streamed without a length.
HOSTILE = """
import http.server, os
class Page(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        line = b"ringleader_trainer_step 1\\n" + b"junk_total 1\\n" * 80000
        try:
            for _ in range(100):
                self.wfile.write(line)
        except OSError:
            pass
    def log_message(self, *args):
        pass
if os.environ["RANK"] == "0":
    http.server.ThreadingHTTPServer(("", int(os.environ["RINGLEADER_METRICS_PORT"])), Page).serve_forever()
import time
time.sleep(600)
"""
MIB = 2**20


def rss(pid: int) -> int:
    """The process's resident memory in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_a_hostile_metrics_page_leaves_the_operator_as_it_was(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    pid = operatorprocess.operator_pid()
    assert pid is not None
    before = rss(pid)
    rounds_before = round_durations()
    create(custom, namespace, training_job("hostile", HOSTILE))
    wait_condition(custom, namespace, "hostile", "Running", timeout=60)

    peak = before
    t0 = time.monotonic()

    def reported() -> list[str]:
        nonlocal peak
        peak = max(peak, rss(pid))
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=hostile").items
        return [e.message for e in events if e.reason == "ProgressUnavailable"]

    # Three scrapes in a row fail (5 s apart) before the event: about 15 s of the operator reading the page.
    message = wait_for("the ProgressUnavailable event", reported, timeout=60, every=0.1)[0]
    assert "larger than 256 KiB" in message, message
    # Meanwhile another job runs as usual.
    create(custom, namespace, training_job("neighbour", "print('fine')"))
    wait_condition(custom, namespace, "neighbour", "Succeeded", timeout=60)
    reported()
    took = time.monotonic() - t0
    assert peak - before < 64 * MIB, f"the operator grew {(peak - before) / MIB:.0f} MiB reading the page"
    assert took < 120
    # Every round meanwhile (the hostile job's scrapes included, bounded at 2 s) took at most 2.5 s.
    rounds_after = round_durations()
    rounds, quick = (rounds_after[k] - rounds_before[k] for k in ("count", "2.5"))
    assert rounds > 0 and quick == rounds, f"{rounds - quick} of {rounds} rounds took over 2.5 s"
