"""The figures behind docs/workers.md's projection for 100,000 streams on a Ray cluster.

1. Memory per open stream: one client process (a worker's whole load generator) holding S slow
   streams open against the built-in synthetic server, its RSS read once every stream is open, for
   two values of S in fresh processes each; the slope is the memory one more stream costs, the
   intercept what a worker costs with none. Side by side in one run, alternating S.
2. With --ray: a local Ray cluster of two nodes on this machine, one run over it: the RSS of each
   worker actor's process, of the Ray processes (raylets, GCS, workers), and each node's clock offset
   estimate (its uncertainty: half the shortest round trip to the driver).

    .venv/bin/python bench/ray_projection.py                 # part 1, 2 rounds of 512 and 4096 streams
    .venv/bin/python bench/ray_projection.py --ray           # and part 2 (needs fastbench-llm[ray])
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ENDPOINT = "/v1/completions"


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hold_streams(streams: int) -> dict[str, float]:
    """In this process: hold ``streams`` slow streams open, read RSS once all are, then stop."""
    import uvloop

    from fastbench.load.driver import LoadGenerator
    from fastbench.load.plan import LoadPlan, Target
    from fastbench.synthetic import SyntheticServer

    body = json.dumps({"model": "synthetic", "prompt": "hi", "max_tokens": 1000, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()

    async def main(base_url: str) -> dict[str, float]:
        before = rss_mb()
        plan = LoadPlan(bodies=[body] * streams, warmup_bodies=[], concurrency=streams)
        generator = LoadGenerator(Target.parse(base_url, ENDPOINT), plan)
        task = asyncio.ensure_future(generator.run())
        while generator.state.in_flight < streams and not task.done():
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # a few chunks on every stream: buffers at their working size
        held = rss_mb()
        generator.stop("measured")
        await task
        return {"streams": streams, "rss_before_mb": before, "rss_held_mb": held}

    with SyntheticServer(ttft_ms=50, itl_ms=200) as server:
        return uvloop.run(main(server.base_url))


def per_stream(rounds: int, small: int, large: int) -> None:
    held: dict[int, list[float]] = {small: [], large: []}
    for _ in range(rounds):
        for streams in (small, large):
            out = subprocess.run([sys.executable, __file__, "--hold", str(streams)], capture_output=True, text=True,
                                 check=True, timeout=600)
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            held[streams].append(figures["rss_held_mb"])
            print(f"  {streams:>6} streams open: client RSS {figures['rss_held_mb']:.1f} MB "
                  f"(before the load {figures['rss_before_mb']:.1f} MB)")
    slope_kb = (statistics.median(held[large]) - statistics.median(held[small])) * 1024 / (large - small)
    base_mb = statistics.median(held[small]) - slope_kb * small / 1024
    print(f"memory per open stream: {slope_kb:.1f} KB; a client with none: {base_mb:.0f} MB "
          f"(medians of {rounds} rounds)")


def ray_figures() -> None:
    import ray
    from ray.cluster_utils import Cluster

    from fastbench.load.plan import LoadPlan, Target
    from fastbench.load.raypool import RayPool
    from fastbench.synthetic import SyntheticServer

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        body = json.dumps({"model": "synthetic", "prompt": "hi", "max_tokens": 20, "ignore_eos": True,
                           "stream": True}).encode()
        seen: dict[str, float] = {}

        async def run(base_url: str) -> dict[str, object]:
            plan = LoadPlan(bodies=[body] * 2000, warmup_bodies=[], concurrency=512)
            pool = RayPool(Target.parse(base_url, ENDPOINT), plan, address=cluster.address)
            task = asyncio.ensure_future(pool.run())
            while not task.done():
                await asyncio.sleep(0.2)
                if pool._start_ns and all(w.progress.get("in_flight", 0) >= 200 for w in pool._workers):
                    for w in pool._workers:
                        pid = w.pid()
                        if pid is not None:
                            seen[f"actor {w.index}"] = rss_mb(pid)
                    seen["all Ray processes"] = _ray_rss_mb()
                    break
            data = await task
            return dict(data.extra["workers"])

        import uvloop

        with SyntheticServer(ttft_ms=50, itl_ms=100) as server:
            section = uvloop.run(run(server.base_url))
        for name, mb in seen.items():
            print(f"  RSS of {name}: {mb:.0f} MB")
        for node in section["ray"]["nodes"]:  # type: ignore[index]
            estimate = node["estimate"]
            trips = (f"min {estimate['min_round_trip_ns'] / 1e3:.0f} us, "
                     f"median {estimate['median_round_trip_ns'] / 1e3:.0f} us")
            print(f"  node {node['node'][:8]}: offset {estimate['offset_ns'] / 1e3:+.1f} us "
                  f"+- {estimate['uncertainty_ns'] / 1e3:.1f} us (round trip {trips}, {estimate['samples']} samples)")
    finally:
        ray.shutdown()
        cluster.shutdown()


def _ray_rss_mb() -> float:
    """RSS of every process whose command line names Ray (raylets, GCS, workers, agents)."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"ray" in cmdline.lower() and int(pid) != os.getpid():
            try:
                total += rss_mb(pid)
            except OSError:
                pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hold", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--small", type=int, default=512)
    parser.add_argument("--large", type=int, default=4096)
    parser.add_argument("--ray", action="store_true", help="also run on a local two-node Ray cluster")
    args = parser.parse_args()
    if args.hold:
        print(json.dumps(hold_streams(args.hold)))
        return
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    per_stream(args.rounds, args.small, args.large)
    if args.ray:
        ray_figures()


if __name__ == "__main__":
    main()
