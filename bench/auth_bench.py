"""What the job-token handshake costs (trainer transport/auth.py): it runs once per connection, never per step, so a
parameter-server step or a ring allreduce carries none of it; this measures the one-time cost.

    python -m bench.auth_bench [--reps 200] [--ranks 2 4]

- one handshake over loopback TCP (connect, both proofs), median and p90 of `--reps`, against a bare TCP connect
  measured alternately in the same run; the verdict compares the ranges of the medians of 10 batches of each
  ("not distinguishable" when they overlap);
- ring setup (the first allreduce of a group: its links, handshakes included) at each rank count, median of 5.
Results go to bench/results/auth.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from ringleader_trainer.strategies.ring import ring_allreduce
from ringleader_trainer.transport import auth

from bench.record import range_verdict, summary, write_result
from tests.support.ranks import run_ranks

TOKEN = secrets.token_hex(32).encode()


def one_connection(listener: socket.socket, handshake: bool) -> float:
    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            if handshake:
                auth.accept(conn, TOKEN, b"bench")

    server = threading.Thread(target=serve)
    server.start()
    t0 = time.perf_counter()
    with socket.create_connection(listener.getsockname(), timeout=5) as sock:
        if handshake:
            auth.initiate(sock, TOKEN, b"bench")
    elapsed = time.perf_counter() - t0
    server.join()
    return elapsed


def ring_setup(rank: int, world: int, reps: int, out: str) -> None:
    times = []
    for _ in range(reps):
        group = dist.new_group(list(range(world)))
        assert isinstance(group, dist.ProcessGroup)  # every rank is a member
        t = torch.ones(16)
        dist.barrier()
        t0 = time.perf_counter()
        ring_allreduce(t, group=group)  # the first call on a group sets up its links
        times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    args = p.parse_args()
    print(f"[bench] loopback TCP, {args.reps} connections each way, alternated; ring setup at {args.ranks} ranks, "
          "5 groups each", flush=True)  # fmt: skip
    runs: dict[str, list[float]] = {"tcp connect": [], "tcp connect + handshake": []}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        for _ in range(args.reps):  # alternately, so drift falls on both
            runs["tcp connect"].append(one_connection(listener, handshake=False))
            runs["tcp connect + handshake"].append(one_connection(listener, handshake=True))
    rows = {name: summary(v) for name, v in runs.items()}
    for name, s in rows.items():
        print(f"[bench] {name:24s}: median {s['median'] * 1e6:7.0f} us, p90 {s['p90'] * 1e6:7.0f} us", flush=True)
    extra = statistics.median(runs["tcp connect + handshake"]) - statistics.median(runs["tcp connect"])
    size = max(1, args.reps // 10)
    batches = {k: [statistics.median(v[i : i + size]) for i in range(0, len(v), size)] for k, v in runs.items()}
    verdict = range_verdict(batches)
    print(f"[bench] the handshake adds {extra * 1e6:.0f} us per connection (median difference): {verdict}", flush=True)
    ring = {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in args.ranks:
            out = Path(tmp) / f"ring-{world}.json"
            run_ranks(world, ring_setup, 5, str(out))
            ring[str(world)] = summary(json.loads(out.read_text()))
            print(f"[bench] ring setup, {world} ranks: median {ring[str(world)]['median'] * 1000:.1f} ms", flush=True)
    write_result("auth", {"reps": args.reps, "connection_s": rows, "handshake_extra_s": extra,
                          "batch_medians_s": batches, "verdict": verdict, "ring_setup_s": ring})  # fmt: skip


if __name__ == "__main__":
    main()
