"""The operator's own Prometheus metrics (served by `main.py` on --metrics-port)."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram
from ringleader_api import JobPhase

PODS_CREATED = Counter("ringleader_pods_created_total", "Pods the operator created.")
RESTARTS = Counter("ringleader_rank_restarts_total", "Ranks restarted after a failure.")
SCRAPE_FAILURES = Counter("ringleader_progress_scrape_failures_total", "Reads of worker 0's metrics page that failed.")
RECONCILE_SECONDS = Histogram(
    "ringleader_reconcile_duration_seconds",
    "Duration of one reconcile round of one job.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CLIENT_WAIT_SECONDS = Counter(
    "ringleader_client_rate_limit_wait_seconds_total",
    "Seconds requests to the API server waited for the operator's client budget (--kube-api-qps, --kube-api-burst).",
)
API_REQUESTS = Counter(
    "ringleader_api_requests_total",
    "Requests to the API server: client 'operator' (the operator's own calls, by client method) or 'kopf' (its "
    "watches, patches, events and peering, by method and resource; a watch counted when it starts).",
    ["client", "call"],
)
JOBS = Gauge("ringleader_jobs", "TrainingJobs by phase, as last seen.", ["phase"])
# Per job, from status.goodput as its last change of phase counted it; a job's series go with the job.
GOODPUT_RATIO = Gauge(
    "ringleader_job_goodput_ratio", "Productive seconds over the job's wall time so far.", ["namespace", "job"]
)
LOST_SECONDS = Gauge(
    "ringleader_job_lost_seconds",
    "Seconds of the job's wall time not spent on productive steps, by cause (queued, restarting, recomputing, "
    "stalled, suspended).",
    ["namespace", "job", "cause"],
)
LOST_CAUSES = ("queued", "restarting", "recomputing", "stalled", "suspended")
KNOWN_PHASES = tuple(p.value for p in JobPhase)


class PhaseGauge:
    """JOBS kept in step with the phases jobs' last rounds planned: it moves by one job's change, so a round costs
    the same with ten jobs or ten thousand."""

    def __init__(self) -> None:
        self.counts: Tally[str] = Tally()
        for name in KNOWN_PHASES:
            JOBS.labels(phase=name).set(0)

    def move(self, before: str | None, after: str | None) -> None:
        """A job went from phase `before` to `after` (None: not counted, a job new or gone)."""
        for name, change in ((before, -1), (after, 1)):
            if name is not None:
                self.counts[name] += change
                JOBS.labels(phase=name).set(self.counts[name])
