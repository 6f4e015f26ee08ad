"""`ringleader-operator`: run the operator against the current kubeconfig or in-cluster credentials.

    ringleader-operator [--namespace NS ...] [--metrics-port 8080] [--health-port 8081] [--standalone]

Without --namespace it watches all namespaces. /metrics serves Prometheus metrics; /healthz is kopf's
liveness endpoint (it fails when the operator stops processing events).

Leader election: replicas meet in kopf's peering object `ringleader` (a ClusterKopfPeering, or a
KopfPeering in each watched namespace; crds/kopf-peering.yaml) and only the live replica with the highest
priority acts; the others stay paused. The priority is the negated start time in milliseconds, so the
oldest replica leads and a newly started one never takes over from a healthy leader. A leader that stops
cleanly leaves at once; one that is killed is taken over from when its keep-alive expires (PEERING_LIFETIME
seconds). --standalone runs without peering (one replica only).
"""

from __future__ import annotations

import argparse
import logging
import os
import pwd
import time

import kopf
from prometheus_client import start_http_server

from . import (
    gang_backends,
    handlers,  # noqa: F401  (registers the handlers)
    late_crds,
)
from .builders import DEFAULT_MAX_RANKS
from .handlers import PEERING_NAME, WATCHES_PER_NAMESPACE
from .ratelimit import DEFAULT_BURST, DEFAULT_QPS, ClientBudget


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The operator's command line (argparse's one-line usage error for a bad one)."""
    p = argparse.ArgumentParser(
        prog="ringleader-operator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--namespace", action="append", default=[], help="watch only this namespace (repeatable)")
    p.add_argument("--metrics-port", type=int, default=8080)
    p.add_argument("--health-port", type=int, default=8081)
    p.add_argument("--standalone", action="store_true", help="no leader election: run exactly one replica")
    p.add_argument("--peering", default=PEERING_NAME, help="the kopf peering object replicas elect a leader in")
    p.add_argument(
        "--max-replicas-per-job",
        type=int,
        default=DEFAULT_MAX_RANKS,
        help="the most pods (workers and parameter servers) one TrainingJob may have; a job asking for more fails "
        "with InvalidSpec",
    )
    p.add_argument(
        "--network-policies",
        metavar="NAMESPACE/LABELS",
        type=operator_pods,
        help="give every job a NetworkPolicy admitting to its pods only its own pods and, to the metrics port, the "
        "operator's: the operator's namespace and its pods' labels, e.g. ringleader-system/app=ringleader,tier=op",
    )
    p.add_argument(
        "--kube-api-qps",
        type=float,
        default=DEFAULT_QPS,
        help="requests a second to the API server, the operator's own and kopf's together (0: no limit)",
    )
    p.add_argument("--kube-api-burst", type=positive, default=DEFAULT_BURST, help="requests sent at once above qps")
    p.add_argument(
        "--gang-backend",
        choices=("auto", *gang_backends.CLUSTER_BACKENDS),
        default="auto",
        help="how a job's pods are placed all or none: the operator's own gate, kube-scheduler's gang scheduling "
        "through the Workload API (scheduling.k8s.io/v1alpha2, Kubernetes 1.36), or auto: the Workload API where "
        "the cluster serves it",
    )
    p.add_argument("--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.verbose:  # kopf logs every handler run at INFO; our own log lines say what matters
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # a probe every few seconds
    _name_the_user()
    budget = ClientBudget(args.kube_api_qps, args.kube_api_burst)
    logging.getLogger("ringleader").info("client budget for the API server: %s", budget)
    start_http_server(args.metrics_port)
    late_crds.install()
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=True if args.standalone else None,
        peering_name=None if args.standalone else args.peering,
        priority=-int(time.time() * 1000),  # the oldest replica leads
        liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz",
        memo=kopf.Memo(
            namespaces=args.namespace,  # the pod watch's scopes (none: the whole cluster)
            watches=WATCHES_PER_NAMESPACE * max(1, len(args.namespace)),  # kopf's open watch streams, at most
            max_ranks=args.max_replicas_per_job,
            operator_pods=args.network_policies,
            budget=budget,
            gang_backend=args.gang_backend,
        ),
    )


def positive(text: str) -> int:
    """A whole number >= 1, or argparse's one-line usage error."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def operator_pods(text: str) -> tuple[str, dict[str, str]]:
    """`NAMESPACE/k=v,k=v` -> (namespace, labels); anything else is argparse's one-line usage error."""
    namespace, _, labels = text.partition("/")
    pairs = [item.partition("=") for item in labels.split(",") if item]
    if not namespace or not pairs or any(not k or not eq for k, eq, _ in pairs):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/key=value[,key=value...]")
    return namespace, {k: v for k, _, v in pairs}


def _name_the_user() -> None:
    """kopf names a replica user@host for peering and asks the password database for the user; a container run
    under an arbitrary uid without an entry (OpenShift does this, and so may a securityContext's runAsUser)
    would crash it at start. Give such a uid a name through $USER, which is asked first."""
    if not any(os.environ.get(v) for v in ("LOGNAME", "USER", "LNAME", "USERNAME")):
        try:
            pwd.getpwuid(os.getuid())
        except KeyError:
            os.environ["USER"] = f"uid-{os.getuid()}"


if __name__ == "__main__":
    main()
