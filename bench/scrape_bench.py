"""Rank 0's metrics page against the operator: peak memory and event-loop stall while the operator scrapes a
100 MB page streamed without a length, the progress scraper before its hardening (commit 832aa18) and now.

    python -m bench.scrape_bench [--megabytes 100] [--reps 3]

Each scrape runs in a fresh process (so peak RSS is its own), with a ticker task on its event loop recording the
longest gap between ticks (what every other job's rounds would wait); the page comes from another process.
Implementations alternate, `--reps` each. Results go to bench/results/scrape.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ringleader_devcluster.layout import REPO_ROOT

from bench.record import range_verdict, summary, write_result
from tests.support.ranks import free_port

BEFORE = "832aa18"  # the last commit of progress.py before the hardening
PAGE_SERVER = """
import sys
from aiohttp import web
megabytes, port = int(sys.argv[1]), int(sys.argv[2])
line = b"ringleader_trainer_step 1\\n" + b"junk_total 1\\n" * 80000  # ~1 MB
async def page(request):
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for _ in range(megabytes):
        await resp.write(line)
    return resp
app = web.Application()
app.router.add_get("/metrics", page)
web.run_app(app, host="127.0.0.1", port=port, print=lambda *a: print("ready", flush=True))
"""
MEASURE = """
import asyncio, importlib.util, json, sys, time
import aiohttp
path, port, hardened = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
spec = importlib.util.spec_from_file_location("scraper", path)
scraper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scraper)
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
def rss():
    return status("VmRSS")
async def main():
    gaps = [0.0]
    async def ticker():
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last - 0.01)
            last = now
    session = scraper.session() if hardened else aiohttp.ClientSession()
    async with session:
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        base = rss()
        t0 = time.perf_counter()
        try:
            await scraper.scrape(session, "127.0.0.1", port, "now")
            outcome = "parsed"
        except Exception as e:
            outcome = type(e).__name__ + ": " + str(e)[:120]
        seconds = time.perf_counter() - t0
        await asyncio.sleep(0.05)
        tick.cancel()
    peak = status("VmHWM")  # not ru_maxrss: that survives exec, so it would be the forking parent's
    print(json.dumps({"peak_rss_over_start": peak - base, "max_stall_s": max(gaps), "seconds": seconds,
                      "outcome": outcome}))
asyncio.run(main())
"""


def implementation(tmp: Path, name: str) -> Path:
    """The scraper module's source as of `name`, importable on its own (its one relative import made absolute)."""
    if name == "now":
        source = (REPO_ROOT / "operator" / "ringleader_operator" / "progress.py").read_text()
    else:
        source = subprocess.run(["git", "show", f"{name}:operator/ringleader_operator/progress.py"], cwd=REPO_ROOT,
                                check=True, capture_output=True, text=True).stdout  # fmt: skip
    path = tmp / f"progress_{name}.py"
    path.write_text(source.replace("from .api import", "from ringleader_api import"))  # the API moved to its package
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--megabytes", type=int, default=100)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    print(f"[bench] a {args.megabytes} MB page, chunked, no length; the scraper at {BEFORE} and now, alternated, "
          f"{args.reps} runs each, each in a fresh process", flush=True)  # fmt: skip
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", PAGE_SERVER, str(args.megabytes), str(port)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    runs: dict[str, list[dict[str, float | str]]] = {"before": [], "now": []}
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        with tempfile.TemporaryDirectory() as tmp:
            paths = {"before": implementation(Path(tmp), BEFORE), "now": implementation(Path(tmp), "now")}
            for rep in range(args.reps):
                for name, path in paths.items():
                    out = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(port), str(int(name == "now"))],
                                         check=True, capture_output=True, text=True, timeout=600)  # fmt: skip
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    runs[name].append(row)
                    mib = row["peak_rss_over_start"] / 2**20
                    print(f"[bench] {rep + 1}/{args.reps} {name:6s}: peak RSS +{mib:7.1f} MiB, longest loop stall "
                          f"{row['max_stall_s']:.3f} s, {row['seconds']:.2f} s: {row['outcome']}",
                          flush=True)  # fmt: skip
    finally:
        server.kill()
    rss = {k: [float(r["peak_rss_over_start"]) / 2**20 for r in v] for k, v in runs.items()}
    stall = {k: [float(r["max_stall_s"]) for r in v] for k, v in runs.items()}
    for k in runs:
        print(f"[bench] {k:6s}: median peak RSS +{summary(rss[k])['median']:.1f} MiB, median longest stall "
              f"{summary(stall[k])['median']:.3f} s", flush=True)  # fmt: skip
    print(f"[bench] peak RSS: {range_verdict(rss, 'smaller')}; stall: {range_verdict(stall, 'shorter')}", flush=True)
    write_result("scrape", {"megabytes": args.megabytes, "reps": args.reps, "before_commit": BEFORE, "runs": runs,
                            "peak_rss_mib": {k: summary(v) for k, v in rss.items()},
                            "max_stall_s": {k: summary(v) for k, v in stall.items()}})  # fmt: skip


if __name__ == "__main__":
    main()
