"""One job of 2,000 workers on kwok fake nodes (kwok runs nothing: the pods stay Running): it reaches Running, its
object (managedFields included) stays under 100 KB, and once it runs and nothing changes, a minute costs the
operator no request to the API server and no round. Requests are read from the operator's own counter
(ringleader_api_requests_total: its own calls and kopf's), rounds from its round-duration histogram."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster.operatorprocess import OPERATOR_METRICS_PORT

from tests.support.cluster import wait_for
from tests.support.fakenodes import add_fake_nodes, fake_node, pool_job, remove_fake_nodes
from tests.support.jobs import create, get, operator_rounds

# Serial: the operator's own request and round counters must see this job alone.
pytestmark = [pytest.mark.usefixtures("operator"), pytest.mark.serial]

POOL = "ringleader.dev/pool"
WORKERS = 2000
NODES = 20  # a fake node holds 110 pods
# kopf's own upkeep, whatever the jobs do: its watches (one long request each, renewed now and then) and the
# peering object it keeps alive (leader election).
UPKEEP = re.compile(r" watch$|peerings")


def api_requests() -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{OPERATOR_METRICS_PORT}/metrics", timeout=5) as r:
        text = r.read().decode()
    found = re.findall(r'^ringleader_api_requests_total\{client="([^"]+)",call="([^"]+)"\} (\S+)$', text, re.M)
    return {(c, call): float(v) for c, call, v in found}


def job_requests(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[str, float]:
    """Requests made between two readings, kopf's upkeep left out."""
    delta = {f"{c} {call}": n - before.get((c, call), 0) for (c, call), n in after.items()}
    return {k: n for k, n in delta.items() if n and not UPKEEP.search(k)}


def test_a_2000_worker_job_runs_with_a_small_object_and_an_idle_minute_costs_no_request(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    pool = f"scale-{uuid.uuid4().hex[:6]}"
    nodes = add_fake_nodes(core, [fake_node(f"{pool}-n{i}", {POOL: pool}, 0, cpu="200") for i in range(NODES)])
    try:
        create(custom, namespace, pool_job("big", WORKERS, pool, 0))

        def running() -> dict[str, Any] | None:
            job = get(custom, namespace, "big")
            return job if (job.get("status") or {}).get("phase") == "Running" else None

        job = wait_for(f"{WORKERS} workers Running", running, timeout=600, every=5)
        assert job["status"]["replicaStatuses"]["worker"]["ready"] == WORKERS, job["status"]["replicaStatuses"]
        size = len(json.dumps(job))
        assert size < 100_000, f"the job's object is {size} bytes"
        # The scraper's failure to reach worker 0 (kwok runs no trainer) is reported once, after 3 tries 5 s
        # apart; then nothing is left to happen.
        time.sleep(30)
        before, rounds = api_requests(), operator_rounds()
        time.sleep(60)
        assert job_requests(before, api_requests()) == {}
        assert operator_rounds() == rounds
        assert get(custom, namespace, "big")["status"]["phase"] == "Running"
    finally:
        custom.delete_namespaced_custom_object("ringleader.dev", "v1alpha1", namespace, "trainingjobs", "big")
        remove_fake_nodes(core, nodes)
