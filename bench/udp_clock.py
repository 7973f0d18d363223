"""A node's clock offset to the driver, by UDP pings (fastbench.load.udpclock) against Ray actor calls,
side by side in one run.

1. Without Ray: the responder (a Python thread) in a child process, pinged from this one, rounds
   alternating an idle child and one whose other thread keeps the GIL busy (as a worker in full
   load would): does the thread's wait for the GIL show in the round trips?
2. With --ray: a local Ray cluster of three nodes on this machine (two CPUs each; the third started
   with the test hook that shows a clock 1.5 s ahead, as tests/load/test_ray.py does), one worker actor
   on each; before the window, for each node in turn and alternating, the estimate by UDP
   (udpclock.PINGS pings) and by Ray calls (raypool.CLOCK_SAMPLES calls), several rounds; then the
   run itself, whose result records the estimate it applied.
3. With --ray --validate: ``fastbench validate --ray`` at its default tolerance (0.5 ms) over the same
   three nodes, three times.

    .venv/bin/python bench/udp_clock.py              # part 1
    .venv/bin/python bench/udp_clock.py --ray        # and part 2 (needs fastbench-llm[ray])
    .venv/bin/python bench/udp_clock.py --ray --validate   # and part 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import threading
import time
from typing import Any

from fastbench.load.clocks import ClockOffset
from fastbench.load.udpclock import ClockResponder, udp_offset

SHIFT_NS = 1_500_000_123
ENDPOINT = "/v1/completions"


def _respond(queue: Any, busy: bool) -> None:
    responder = ClockResponder("127.0.0.1")
    if busy:
        def spin() -> None:
            while True:
                sum(range(1000))

        threading.Thread(target=spin, daemon=True).start()
    queue.put(responder.address)
    time.sleep(3600)


def _line(name: str, estimates: list[ClockOffset], truth_ns: int = 0) -> str:
    unc = [e.uncertainty_ns / 1e3 for e in estimates]
    med = [e.median_round_trip_ns / 1e3 for e in estimates]
    held = sum(e.agrees_with(truth_ns) for e in estimates)
    return (f"  {name:<34} uncertainty us: median {statistics.median(unc):7.1f}, worst {max(unc):7.1f}; "
            f"median round trip {statistics.median(med):8.1f} us; held the true offset {held}/{len(estimates)}")


def local(rounds: int) -> None:
    print(f"1. responder thread in a child process, {rounds} rounds alternating:")
    found: dict[str, list[ClockOffset]] = {"idle child": [], "child with a GIL-busy thread": []}
    context = multiprocessing.get_context("spawn")
    children = {}
    for name in found:
        queue = context.Queue()
        child = context.Process(target=_respond, args=(queue, "busy" in name), daemon=True)
        child.start()
        children[name] = (child, queue.get(timeout=30))
    try:
        for _ in range(rounds):
            for name, (_, (host, port)) in children.items():
                found[name].append(udp_offset(host, port))
    finally:
        for child, _ in children.values():
            child.terminate()
    for name, estimates in found.items():
        print(_line(name, estimates))


def on_ray(rounds: int, validate_too: bool) -> None:
    import ray
    import uvloop
    from ray.cluster_utils import Cluster

    from fastbench.load.plan import LoadPlan, Target
    from fastbench.load.raypool import RayPool, RayWorkerLink
    from fastbench.load.rayworker import CLOCK_SHIFT_ENV
    from fastbench.synthetic import SyntheticServer

    figures: dict[tuple[str, str], list[ClockOffset]] = {}

    class SideBySide(RayPool):
        async def _before_start(self) -> None:
            first: dict[str, RayWorkerLink] = {}
            for worker in self._workers:
                assert isinstance(worker, RayWorkerLink)
                first.setdefault(str(worker.identity.get("node_id")), worker)
            for _ in range(rounds):
                for node_id, worker in first.items():
                    ip, port = worker.identity["clock_udp"]
                    figures.setdefault((node_id, "udp"), []).append(
                        await asyncio.to_thread(udp_offset, ip, port))
                    figures.setdefault((node_id, "ray-call"), []).append(
                        await asyncio.to_thread(self._ray_call_offset, worker.actor))
            await super()._before_start()

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        cluster.add_node(num_cpus=2)
        shifted = cluster.add_node(num_cpus=2, env_vars={CLOCK_SHIFT_ENV: str(SHIFT_NS)})
        cluster.wait_for_nodes()
        body = json.dumps({"model": "synthetic", "prompt": "hi", "max_tokens": 10, "ignore_eos": True,
                           "stream": True}).encode()
        with SyntheticServer(ttft_ms=5, itl_ms=5) as server:
            plan = LoadPlan(bodies=[body] * 60, warmup_bodies=[], concurrency=6)
            pool = SideBySide(Target.parse(server.base_url, ENDPOINT), plan, address=cluster.address)
            data = uvloop.run(pool.run())
        print(f"2. Ray cluster of 3 nodes on this host, {rounds} rounds alternating per node "
              f"(load average {os.getloadavg()[0]:.1f}):")
        for (node_id, method), estimates in figures.items():
            truth = SHIFT_NS if node_id == shifted.node_id else 0
            name = f"node {node_id[:8]}{' (shifted)' if truth else ''} {method}"
            print(_line(name, estimates, truth))
        print("  the run's own estimates (result's fastbench.workers.ray.nodes):")
        for node in data.extra["workers"]["ray"]["nodes"]:
            for key in ("estimate", "estimate_after"):
                e = node[key]
                if e is not None:
                    print(f"    node {node['node'][:8]} {key:<14} {e['method']:<8} offset {e['offset_ns'] / 1e6:+.3f} "
                          f"+- {e['uncertainty_ns'] / 1e3:.1f} us (round trip min {e['min_round_trip_ns'] / 1e3:.1f}, "
                          f"median {e['median_round_trip_ns'] / 1e3:.1f} us; {e['samples']} samples, "
                          f"{e['unanswered']} unanswered); fallback: {node['clock_fallback']}")
        if validate_too:
            _validate(cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()


def _validate(address: str, rounds: int = 3) -> None:
    """fastbench validate --ray at its default tolerance (0.5 ms) over the same three nodes, three times:
    the shifted node's skews carry its uncertainty, now by UDP."""
    from fastbench.api import validation as fv
    from fastbench.results.validation_report import _clock_lines

    for _ in range(rounds):
        report = fv.validate_client(12, itl_ms=5, ttft_ms=10, num_requests=36, output_len=12, ray=address)
        failed = {c.name: round(c.value, 3) for c in report.checks if not c.passed and c.value is not None}
        print(f"3. validate --ray --concurrency 12 --num-requests 36 --output-len 12 --itl-ms 5 --ttft-ms 10 "
              f"(tolerance 0.5 ms; load average {os.getloadavg()[0]:.1f}): {report.verdict} {failed or ''} "
              f"(cause: {report.verdict_cause})")
        print(f"   merged skew p99 {report.skew.p99:.3f} ms; per worker: "
              + "; ".join(re.findall(r"worker \d+ \(node \w+\) [^;]*?skew p99 [0-9.]+ ms", " ".join(report.notes))))
        for line in _clock_lines(report.clocks):
            print("  " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ray", action="store_true", help="also on a local three-node Ray cluster")
    parser.add_argument("--validate", action="store_true", help="with --ray: and fastbench validate --ray over it")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    local(args.rounds)
    if args.ray:
        on_ray(args.rounds, args.validate)


if __name__ == "__main__":
    main()
