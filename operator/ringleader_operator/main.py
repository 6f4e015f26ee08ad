"""`ringleader-operator`: run the operator against the current kubeconfig or in-cluster credentials.

    ringleader-operator [--namespace NS ...] [--metrics-port 8080] [--health-port 8081]

Without --namespace it watches all namespaces. /metrics serves Prometheus metrics; /healthz is kopf's
liveness endpoint (it fails when the operator stops processing events).
"""

from __future__ import annotations

import argparse
import logging

import kopf
from prometheus_client import start_http_server

from . import handlers  # noqa: F401  (registers the handlers)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="ringleader-operator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--namespace", action="append", default=[], help="watch only this namespace (repeatable)")
    p.add_argument("--metrics-port", type=int, default=8080)
    p.add_argument("--health-port", type=int, default=8081)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.verbose:  # kopf logs every handler run at INFO; our own log lines say what matters
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    start_http_server(args.metrics_port)
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=True,
        liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz",
    )


if __name__ == "__main__":
    main()
