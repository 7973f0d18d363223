"""--workers measured side by side in one run: 1 process against N worker processes.

1. Accuracy at many slow streams (``fastbench validate``'s own run, merged over the workers): 4,096
   streams, 200 ms between chunks, against the built-in synthetic server: streams kept open, client
   skew p99, and the p99-level error bounds of TTFT and of chunk gaps (ITL).
2. Capacity: chunks/s one client takes from bench/fast_server.c (the C twin of the synthetic server,
   which keeps its schedule far past one Python core) when its chunks come faster than the client can
   read them, with 1 and N workers; and the merge's cost as a share of the run.
3. Uneven requests (``--part uneven``), closed loop: long and short requests alternate; the mean in
   flight of one process, of N workers claiming each request from the shared table as a slot frees,
   and of N workers dealt their requests up front by slot (what --ray's workers, which share no
   memory, do), beside --concurrency.

Rounds alternate 1, N, 1, N, ... so that the host's drift falls on both alike. On a 2-core machine the
server, the workers and anything else running share two cores: the figures say what this machine
does, not what the design allows (see bench/RESULTS.md).

    .venv/bin/python bench/workers.py                   # both parts, 2 rounds each
    .venv/bin/python bench/workers.py --part capacity --rounds 3 --workers 2
    .venv/bin/python bench/workers.py --part uneven --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fast_server import FastServer  # noqa: E402  (a sibling script)

from fastbench.cli.validate import ENDPOINT, avalidate, request_body  # noqa: E402
from fastbench.load.driver import LoadGenerator  # noqa: E402
from fastbench.load.plan import LoadPlan, Target  # noqa: E402
from fastbench.load.workers import WorkerPool  # noqa: E402
from fastbench.results.records import COL  # noqa: E402
from fastbench.synthetic import SyntheticServer  # noqa: E402


class DealtPool(WorkerPool):
    """Workers of this machine dealt the closed loop's requests up front by slot, as --ray's are."""

    SHARED_MEMORY = False


def uneven(mode: str, workers: int, concurrency: int, requests: int, long_len: int) -> dict[str, float | None]:
    """One closed-loop run of alternating long (``long_len`` tokens) and 2-token requests, 2 ms per token."""
    bodies = [request_body(long_len if i % 2 == 0 else 2) for i in range(requests)]
    plan = LoadPlan(bodies=bodies, warmup_bodies=[], concurrency=concurrency)
    with SyntheticServer(ttft_ms=1, itl_ms=2) as server:
        target = Target.parse(server.base_url, ENDPOINT)
        generator = (LoadGenerator(target, plan) if mode == "1 process"
                     else (WorkerPool if mode == "claimed" else DealtPool)(target, plan, workers=workers))
        data = uvloop.run(generator.run())
    completed = int(((data.rows[:, COL["error"]] == 0) & (data.rows[:, COL["end_ns"]] > 0)).sum())
    section = data.extra.get("workers")
    return {"mean_in_flight": data.mean_in_flight, "duration_s": (data.end_ns - data.start_ns) / 1e9,
            "completed": float(completed),
            "idle_slot_share": section["idle_slot_share"] if section is not None else None}


def accuracy(workers: int, streams: int, itl_ms: float, output_len: int) -> dict[str, float | None]:
    report = uvloop.run(avalidate(streams, itl_ms=itl_ms, ttft_ms=50.0, num_requests=3 * streams,  # validate's default
                                  output_len=output_len, workers=workers))
    bounds = {s.name: s.error_bound_p99_ms for s in report.series}
    return {
        "streams_open": report.streams_open_mean,
        "skew_p99_ms": report.skew.p99,
        "ttft_bound_p99_ms": bounds.get("ttft"),
        "itl_bound_p99_ms": bounds.get("itl_chunk"),
        "cpu_us_per_chunk": report.client_cpu_us_per_chunk,
        "verdict": 1.0 if report.passed else 0.0,
    }


async def _capacity_run(base_url: str, workers: int, streams: int, output_len: int, seconds: float
                        ) -> dict[str, float]:
    n = streams * 50  # more than the window takes: the time cap ends it
    plan = LoadPlan(bodies=[request_body(output_len)] * n, warmup_bodies=[request_body(1)] * streams,
                    concurrency=streams, max_seconds=seconds, expected_output_tokens=[output_len] * n)
    target = Target.parse(base_url, ENDPOINT)
    generator = LoadGenerator(target, plan) if workers == 1 else WorkerPool(target, plan, workers=workers)
    data = await generator.run()
    duration_s = (data.end_ns - data.start_ns) / 1e9
    chunks = int(data.rows[:, COL["chunks"]].sum())
    merge_s = data.extra["workers"]["merge_s"] if "workers" in data.extra else 0.0
    return {"chunks_per_s": chunks / duration_s, "cpu_us_per_chunk": data.client_cpu_ns / 1e3 / max(chunks, 1),
            "merge_share": merge_s / duration_s}


def capacity(workers: int, streams: int, itl_ms: float, seconds: float) -> dict[str, float]:
    with FastServer(ttft_ms=1.0, itl_ms=itl_ms, max_model_len=1_000_000) as server:
        return uvloop.run(_capacity_run(server.base_url, workers, streams, 400, seconds))


def _median(rows: list[dict[str, float | None]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None  # type: ignore[type-var]


def _table(title: str, results: dict[int, list[dict[str, float | None]]], keys: list[str]) -> str:
    counts = sorted(results)
    lines = [title, f"  {'figure (median of rounds)':<28}" + "".join(f"{f'{w} worker(s)':>16}" for w in counts)
             + (f"{'ratio':>10}" if len(counts) == 2 else "")]
    for key in keys:
        values = [_median(results[w], key) for w in counts]
        cells = "".join(f"{v:>16.4f}" if v is not None else f"{'-':>16}" for v in values)
        ratio = (f"{values[1] / values[0]:>10.2f}" if len(values) == 2 and values[0] and values[1] is not None
                 else "")
        lines.append(f"  {key:<28}{cells}{ratio}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("both", "accuracy", "capacity", "uneven"), default="both")
    p.add_argument("--workers", type=int, default=2, help="the N measured beside one process")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--streams", type=int, default=4096, help="accuracy: streams kept open")
    p.add_argument("--itl-ms", type=float, default=200.0, help="accuracy: ms between chunks")
    p.add_argument("--output-len", type=int, default=25, help="accuracy: chunks per request")
    p.add_argument("--capacity-streams", type=int, default=256)
    p.add_argument("--capacity-itl-ms", type=float, default=0.2,
                   help="capacity: ms between chunks (fast enough that the client, not the server, is the limit)")
    p.add_argument("--capacity-seconds", type=float, default=5.0)
    p.add_argument("--uneven-concurrency", type=int, default=4)
    p.add_argument("--uneven-requests", type=int, default=200)
    p.add_argument("--uneven-long-len", type=int, default=100, help="uneven: the long requests' tokens")
    a = p.parse_args()
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start")
    if a.part in ("both", "accuracy"):
        acc: dict[int, list[dict[str, float | None]]] = {1: [], a.workers: []}
        for r in range(a.rounds):
            for w in (1, a.workers) if r % 2 == 0 else (a.workers, 1):
                acc[w].append(accuracy(w, a.streams, a.itl_ms, a.output_len))
                print(f"  accuracy round {r + 1}, {w} worker(s): {acc[w][-1]}", flush=True)
        print(_table(f"accuracy: {a.streams} streams, {a.itl_ms:g} ms between chunks (validate, merged)", acc,
                     ["streams_open", "skew_p99_ms", "ttft_bound_p99_ms", "itl_bound_p99_ms", "cpu_us_per_chunk",
                      "verdict"]))
    if a.part in ("both", "capacity"):
        cap: dict[int, list[dict[str, float | None]]] = {1: [], a.workers: []}
        for r in range(a.rounds):
            for w in (1, a.workers) if r % 2 == 0 else (a.workers, 1):
                cap[w].append(dict(capacity(w, a.capacity_streams, a.capacity_itl_ms, a.capacity_seconds)))
                print(f"  capacity round {r + 1}, {w} worker(s): {cap[w][-1]}", flush=True)
        print(_table(f"capacity: {a.capacity_streams} streams against bench/fast_server.c, "
                     f"{a.capacity_itl_ms:g} ms between chunks, {a.capacity_seconds:g} s windows", cap,
                     ["chunks_per_s", "cpu_us_per_chunk", "merge_share"]))
    if a.part == "uneven":
        modes = ["1 process", "claimed", "dealt"]
        runs: dict[str, list[dict[str, float | None]]] = {m: [] for m in modes}
        for r in range(a.rounds):
            for mode in modes[r % 3:] + modes[:r % 3]:  # each mode first in turn
                runs[mode].append(uneven(mode, a.workers, a.uneven_concurrency, a.uneven_requests,
                                         a.uneven_long_len))
                print(f"  uneven round {r + 1}, {mode}: {runs[mode][-1]}", flush=True)
        print(f"uneven: {a.uneven_requests} requests alternating {a.uneven_long_len} and 2 tokens (2 ms each), "
              f"--concurrency {a.uneven_concurrency}, {a.workers} workers claimed or dealt (median of rounds)")
        for mode in modes:
            values = {key: _median(runs[mode], key) for key in
                      ("mean_in_flight", "duration_s", "completed", "idle_slot_share")}
            cells = "".join(f"  {key} {'-' if v is None else f'{v:.3f}'}" for key, v in values.items())
            print(f"  {mode:<10}{cells}")
    print(f"host load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
