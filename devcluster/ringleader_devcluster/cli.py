"""Command line of the dev cluster: `python -m ringleader_devcluster up|down|status`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from . import cluster, images, kueue, operatorprocess, realnode
from .layout import Layout

# Commands that take no argument: what each runs.
SIMPLE = {
    "netpol-up": lambda: cluster.start_network_policy(Layout.from_env()),
    "kueue-up": lambda: kueue.start(Layout.from_env()),
    "down": cluster.down,
    "operator-up": operatorprocess.operator_up,
    "operator-down": operatorprocess.operator_down,
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="ringleader-devcluster", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    _up_parser(sub)
    sub.add_parser("down", help="stop everything the dev cluster started and remove its state")
    sub.add_parser("netpol-up", help="enforce NetworkPolicy on the running dev cluster's real node (kube-router)")
    sub.add_parser("kueue-up", help="start Kueue's manager in the running dev cluster (CRDs, webhooks)")
    sub.add_parser("status", help="say what runs")
    sub.add_parser("operator-up", help="install the CRD and run the operator from this checkout")
    sub.add_parser("operator-down", help="stop the operator started by operator-up")
    im = sub.add_parser("images", help="build the operator and trainer images with buildah (no Docker engine)")
    im.add_argument("names", nargs="*", help=f"some of: {', '.join(images.IMAGES)} (default: all)")
    im.add_argument("--push", action="store_true",
                    help="push to the running dev cluster's registry instead of writing archives")  # fmt: skip
    args = p.parse_args(argv)
    try:
        if args.command == "up":
            cluster.up(args.fake_nodes, args.gpus, args.nodes, build=not args.no_build, real_node=args.real_node,
                       kueue=args.kueue, netpol=args.netpol)  # fmt: skip
            if args.kueue:
                kueue.start(Layout.from_env())
        elif args.command in SIMPLE:
            SIMPLE[args.command]()
        elif args.command == "images":
            _images(p, args.names, args.push)
        else:
            sys.exit(cluster.status())
    except (cluster.ClusterError, realnode.RealNodeError) as e:
        sys.exit(f"dev-cluster: {e}")
    except KeyboardInterrupt:
        sys.exit("dev-cluster: interrupted")


def _up_parser(sub: Any) -> None:
    """`up`'s options: the nodes, and what else runs beside them (the real node, Kueue, NetworkPolicy)."""
    u = sub.add_parser("up", help="build what is missing, start the control plane, the process node and the real node")
    u.add_argument("--fake-nodes", type=int, default=None, help="kwok-managed fake nodes for scale tests")
    u.add_argument(
        "--gpus",
        type=int,
        default=int(os.environ.get("RINGLEADER_NODE_GPUS", "8")),
        help="fake nvidia.com/gpu per process node",
    )
    u.add_argument(
        "--nodes", type=int, default=int(os.environ.get("RINGLEADER_NODES", "1")), help="process nodes to register"
    )
    u.add_argument("--no-build", action="store_true", help="fail instead of building missing binaries")
    u.add_argument(
        "--real-node",
        action=argparse.BooleanOptionalAction,
        default=cluster.real_node_wanted(),
        help="also run the real node (kubelet, containerd, runc, CNI); RINGLEADER_REAL_NODE=0 leaves it out",
    )
    u.add_argument(
        "--kueue",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("KUEUE", "0") not in ("", "0"),
        help="also start Kueue's manager with its CRDs and webhooks (KUEUE=1 does too)",
    )
    u.add_argument(
        "--netpol",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("NETPOL", "0") not in ("", "0"),
        help="also enforce NetworkPolicy on the real node (kube-router; NETPOL=1 does too)",
    )


def _images(p: argparse.ArgumentParser, names: list[str], push: bool) -> None:
    """Build the images `names` (all when none), pushed to the running cluster's registry or written as archives."""
    layout = Layout.from_env()
    if unknown := set(names) - set(images.IMAGES):
        p.error(f"no image named {', '.join(sorted(unknown))}: one of {', '.join(images.IMAGES)}")
    for name in names or images.IMAGES:
        image = images.IMAGES[name]
        print(images.publish(layout, image) if push else images.build(layout, image))
