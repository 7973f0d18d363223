"""--workers measured side by side in one run: 1 process against N worker processes.

1. Accuracy at many slow streams (``fastbench validate``'s own run, merged over the workers): 4,096
   streams, 200 ms between chunks, against the built-in synthetic server: streams kept open, client
   skew p99, and the p99-level error bounds of TTFT and of chunk gaps (ITL).
2. Capacity: validate's run against bench/fast_server.c (the C twin of the synthetic server, which keeps
   its schedule far past one Python core) over a sweep of chunk gaps, with 1 and N workers: chunks/s
   taken, skew p99 and the chunk-gap error bound, client CPU per chunk (all workers), client cores
   busy, and chunks/s per client core. "Sustained" is the most chunks/s of a point whose skew p99 is
   within --tolerance-ms (as bench_client.py's max_sustained).
3. Merge: one --workers run of --merge-seconds (short requests: many rows), and what merging its
   workers took, as a share of the window (the target: under 1 %).
4. Uneven requests (``--part uneven``), closed loop: long and short requests alternate; the mean in
   flight of one process, of N workers claiming each request from the shared table as a slot frees,
   and of N workers dealt their requests up front by slot (what --ray's workers, which share no
   memory, do), beside --concurrency.
5. Open loop under a binding cap (``--part open-cap``): the same drawn Poisson arrivals and requests
   (2 or --open-cap-long-len tokens at random), --concurrency below what they need at times: one
   process, N workers sharing the cap (this build), and N workers each holding its share of it (the
   arrivals dealt i mod N: what the open loop did before the cap was shared, and what --ray's workers
   still do). Per mode: the mean and p99 wait for a slot (send less arrival), the client's lateness
   past the later of the arrival and a free slot of the whole cap (p50/p99/max, as validate computes
   it over one pool), the share sent > 0.1 ms late, the most in flight (from the rows) and the mean.

Rounds alternate 1, N, 1, N, ... so that the host's drift falls on both alike. On a 2-core machine the
server, the workers and anything else running share two cores: the figures say what this machine
does, not what the design allows (see bench/RESULTS.md).

    .venv/bin/python bench/workers.py                   # every part, 2 rounds each
    .venv/bin/python bench/workers.py --part capacity --rounds 2 --workers 2
    .venv/bin/python bench/workers.py --part merge --rounds 1 --merge-seconds 60
    .venv/bin/python bench/workers.py --part uneven --rounds 3
    .venv/bin/python bench/workers.py --part open-cap --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fast_server import FastServer  # noqa: E402  (a sibling script)

from fastbench.api.validation import ENDPOINT, avalidate_client, request_body  # noqa: E402
from fastbench.load import pacer  # noqa: E402
from fastbench.load import workerreport as workerreport_module  # noqa: E402
from fastbench.load import workers as workers_module  # noqa: E402
from fastbench.load.driver import LoadGenerator  # noqa: E402
from fastbench.load.hostload import process_cpu_s  # noqa: E402
from fastbench.load.plan import LoadPlan, Target  # noqa: E402
from fastbench.load.workers import WorkerPool  # noqa: E402
from fastbench.results.figures import client_lateness_ns  # noqa: E402
from fastbench.results.records import COL, RunData  # noqa: E402
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


def open_cap(mode: str, workers: int, concurrency: int, requests: int, rate: float, long_len: int
             ) -> dict[str, float | None]:
    """One open-loop run under a cap: Poisson arrivals at ``rate``, requests of 2 or ``long_len`` tokens
    (1 ms each) drawn with a fixed seed, so that every mode runs the same schedule."""
    tokens = np.random.default_rng(7).choice([2, long_len], requests)
    plan = LoadPlan(bodies=[request_body(int(t)) for t in tokens], warmup_bodies=[], concurrency=concurrency,
                    request_rate=rate, arrival_offsets_ns=pacer.arrival_offsets_ns(requests, rate, 1.0, seed=7))
    with SyntheticServer(ttft_ms=2, itl_ms=1) as server:
        target = Target.parse(server.base_url, ENDPOINT)
        generator = (LoadGenerator(target, plan) if mode == "1 process"
                     else (WorkerPool if mode == "shared" else DealtPool)(target, plan, workers=workers))
        data = uvloop.run(generator.run())
    rows = data.rows
    wait_ms = (rows[:, COL["sent_ns"]] - rows[:, COL["scheduled_ns"]]) / 1e6
    late_ms = client_lateness_ns(rows, concurrency, True) / 1e6
    edges = sorted([(int(t), 1) for t in rows[:, COL["sent_ns"]]] + [(int(t), -1) for t in rows[:, COL["end_ns"]]])
    level = most = 0
    for _, step in edges:
        level += step
        most = max(most, level)
    section = data.extra.get("workers")
    others = (sum(w["others_arrivals"] for w in section["per_worker"]) / requests if section is not None else None)
    return {"wait_mean_ms": float(wait_ms.mean()), "wait_p99_ms": float(np.percentile(wait_ms, 99)),
            "late_p50_ms": float(np.percentile(late_ms, 50)), "late_p99_ms": float(np.percentile(late_ms, 99)),
            "late_max_ms": float(late_ms.max()), "late_share": float(np.mean(late_ms > 0.1)),
            "most_in_flight": float(most), "mean_in_flight": data.mean_in_flight,
            "failed": float((rows[:, COL["error"]] != 0).sum()), "others_arrivals_share": others}


def accuracy(workers: int, streams: int, itl_ms: float, output_len: int) -> dict[str, float | None]:
    # validate's default TTFT and requests
    report = uvloop.run(avalidate_client(streams, itl_ms=itl_ms, ttft_ms=50.0, num_requests=3 * streams,
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


def capacity(workers: int, streams: int, gap_ms: float, seconds: float, output_len: int) -> dict[str, float | None]:
    """One point of the capacity sweep: validate's run (merged over the workers) against bench/fast_server.c
    at ``gap_ms`` between chunks, ended by the time cap: what it took, at what skew and CPU."""
    with FastServer(ttft_ms=1.0, itl_ms=gap_ms, max_model_len=output_len + 64) as server:
        server_cpu = process_cpu_s(server.pid)
        per_request_s = output_len * gap_ms / 1e3
        n = int(streams * (seconds / per_request_s + 2))  # more than the window takes: the time cap ends it
        report = uvloop.run(avalidate_client(streams, itl_ms=gap_ms, ttft_ms=1.0, num_requests=n,
                                             output_len=output_len, base_url=server.base_url, max_seconds=seconds,
                                             workers=workers))
        server_cpu_s = (process_cpu_s(server.pid) or 0.0) - (server_cpu or 0.0)
    return {
        "offered_chunks_per_s": streams / (gap_ms / 1e3),
        "chunks_per_s": report.chunks_per_s,
        "skew_p99_ms": report.skew.p99,
        "itl_bound_p99_ms": next(x.error_bound_p99_ms for x in report.series if x.name == "itl_chunk"),
        "streams_open": report.streams_open_mean,
        "cpu_us_per_chunk": report.client_cpu_us_per_chunk,  # all workers' CPU over their chunks
        "client_cores": report.client_cpu_share_of_core,  # all workers' CPU over the window
        "server_cpu_s_whole_run": server_cpu_s,  # warm-up and set-up included
        "chunks_per_client_core_s": 1e6 / report.client_cpu_us_per_chunk if report.client_cpu_us_per_chunk else None,
        "verdict": 1.0 if report.passed else 0.0,
    }


def _baseline_merge(path: str) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """--baseline-merge FILE: another version's merge.py (e.g. ``git show main:src/fastbench/load/merge.py``),
    and the library's own percentile walk for the per-worker skew (as before values_at_percentiles):
    a context in which WorkerPool merges as that version did."""
    spec = importlib.util.spec_from_file_location("baseline_merge", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    # where they are called from, and by what name: the pool merges, its report takes the skew's percentiles
    names = ((workers_module, "merge_parts"), (workerreport_module, "values_at_percentiles"))

    def library_percentiles(hist: Any, percentiles: Sequence[float]) -> list[int]:
        return [hist.get_value_at_percentile(p) for p in percentiles]

    @contextlib.contextmanager
    def as_baseline() -> Iterator[None]:
        saved = [getattr(where, name) for where, name in names]
        for (where, name), value in zip(names, (module.merge_parts, library_percentiles), strict=True):
            setattr(where, name, value)
        try:
            yield
        finally:
            for (where, name), value in zip(names, saved, strict=True):
                setattr(where, name, value)

    return as_baseline


def merge_cost(workers: int, streams: int, gap_ms: float, output_len: int, seconds: float,
               baseline: Callable[[], contextlib.AbstractContextManager[None]] | None, baseline_first: bool
               ) -> dict[str, float]:
    """A --workers run of ``seconds`` against bench/fast_server.c, and what merging its workers took (the
    whole of WorkerPool._merged: rows put back, histograms added, counters summed, the per-worker
    section), wall and CPU time. With ``baseline``, the same workers' data merged a second time as the
    baseline merges it (before or after this version's, as ``baseline_first`` says), the results
    checked equal."""
    real_merged = WorkerPool._merged
    timings: dict[str, float] = {}

    def timed_merge(self: WorkerPool, label: str) -> RunData:
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        data = real_merged(self)
        timings[f"{label}_merge_s"] = (time.perf_counter_ns() - wall) / 1e9
        timings[f"{label}_merge_cpu_s"] = (time.thread_time_ns() - cpu) / 1e9
        return data

    def both(self: WorkerPool) -> RunData:
        # What _merged reads and then lets go (each worker's table and claim count; the run's claimed table,
        # its counter and marks), kept as copies for the second merge.
        def copy(value: Any) -> Any:
            return None if value is None else np.array(value)

        kept = [(copy(w.table), copy(w.claims)) for w in self._workers]
        shared = {name: copy(getattr(self, name, None)) for name in ("_claim_next", "_claimers", "_claim_table")}
        order = ["baseline", "this"] if baseline_first else ["this", "baseline"]
        merged: dict[str, RunData] = {}
        for label in order if baseline is not None else ["this"]:
            for worker, (table, claims) in zip(self._workers, kept, strict=True):
                worker.table, worker.claims, worker.shared = copy(table), copy(claims), None
            for name, value in shared.items():
                if hasattr(self, name):
                    setattr(self, name, copy(value))
            with baseline() if label == "baseline" and baseline is not None else contextlib.nullcontext():
                merged[label] = timed_merge(self, label)
        if "baseline" in merged:  # the same figures, whichever merged them
            a, b = merged["this"], merged["baseline"]
            assert np.array_equal(a.rows, b.rows)
            assert a.extra["workers"]["per_worker"] == b.extra["workers"]["per_worker"]
        return merged["this"]

    async def run(base_url: str) -> tuple[RunData, WorkerPool]:
        n = int(streams * (seconds / (output_len * gap_ms / 1e3) + 2))
        plan = LoadPlan(bodies=[request_body(output_len)] * n, warmup_bodies=[request_body(1)] * streams,
                        concurrency=streams, max_seconds=seconds, expected_output_tokens=[output_len] * n)
        pool = WorkerPool(Target.parse(base_url, ENDPOINT), plan, workers=workers)
        return await pool.run(), pool

    WorkerPool._merged = both  # type: ignore[method-assign]
    try:
        with FastServer(ttft_ms=1.0, itl_ms=gap_ms, max_model_len=output_len + 64) as server:
            data, pool = uvloop.run(run(server.base_url))
    finally:
        WorkerPool._merged = real_merged  # type: ignore[method-assign]
    window_s = (data.end_ns - data.start_ns) / 1e9
    started = int((data.rows[:, COL["sent_ns"]] > 0).sum())
    out = {"window_s": window_s, "rows": float(len(data.rows)), "requests_started": float(started),
           "chunks": float(data.rows[:, COL["chunks"]].sum()), **timings}
    for label in ("this", "baseline"):
        if f"{label}_merge_s" in timings:
            out[f"{label}_merge_share"] = timings[f"{label}_merge_s"] / window_s
    return out


def _rounds(part: str, modes: list[str], rounds: int,
            measure: Callable[[str], dict[str, float | None]]) -> dict[str, list[dict[str, float | None]]]:
    """Each mode measured once a round, each mode first in turn, every run's figures printed."""
    runs: dict[str, list[dict[str, float | None]]] = {m: [] for m in modes}
    for r in range(rounds):
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
            runs[mode].append(measure(mode))
            print(f"  {part} round {r + 1}, {mode}: "
                  + ", ".join(f"{k} {v:.4g}" for k, v in runs[mode][-1].items() if v is not None), flush=True)
    return runs


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
    p.add_argument("--part", choices=("all", "accuracy", "capacity", "merge", "uneven", "open-cap"), default="all",
                   help="all: accuracy, capacity and merge (uneven and open-cap only when asked)")
    p.add_argument("--workers", type=int, default=2, help="the N measured beside one process")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--streams", type=int, default=4096, help="accuracy: streams kept open")
    p.add_argument("--itl-ms", type=float, default=200.0, help="accuracy: ms between chunks")
    p.add_argument("--output-len", type=int, default=25, help="accuracy: chunks per request")
    p.add_argument("--capacity-streams", type=int, default=256)
    p.add_argument("--capacity-gaps-ms", default="10,5,3.3,2.5,2",
                   help="capacity: the chunk gaps swept (offered chunks/s = streams / gap)")
    p.add_argument("--capacity-seconds", type=float, default=4.0)
    p.add_argument("--capacity-output-len", type=int, default=200)
    p.add_argument("--tolerance-ms", type=float, default=0.5, help="capacity: 'sustained' means skew p99 <= this")
    p.add_argument("--merge-seconds", type=float, default=30.0, help="merge: the run's window")
    p.add_argument("--merge-gap-ms", type=float, default=5.0)
    p.add_argument("--merge-output-len", type=int, default=20, help="merge: chunks per request (short: many rows)")
    p.add_argument("--baseline-merge", metavar="FILE",
                   help="merge: also merge each run's data as this merge.py did (e.g. git show "
                   "main:src/fastbench/load/merge.py > /tmp/merge_main.py), side by side, alternating which goes first")
    p.add_argument("--uneven-concurrency", type=int, default=4)
    p.add_argument("--uneven-requests", type=int, default=200)
    p.add_argument("--uneven-long-len", type=int, default=100, help="uneven: the long requests' tokens")
    p.add_argument("--open-cap-concurrency", type=int, default=8)
    p.add_argument("--open-cap-requests", type=int, default=1500)
    p.add_argument("--open-cap-rate", type=float, default=400.0, help="open-cap: arrivals per second")
    p.add_argument("--open-cap-long-len", type=int, default=30, help="open-cap: the long requests' tokens")
    a = p.parse_args()
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start")
    if a.part in ("all", "accuracy"):
        acc: dict[int, list[dict[str, float | None]]] = {1: [], a.workers: []}
        for r in range(a.rounds):
            for w in (1, a.workers) if r % 2 == 0 else (a.workers, 1):
                acc[w].append(accuracy(w, a.streams, a.itl_ms, a.output_len))
                print(f"  accuracy round {r + 1}, {w} worker(s): {acc[w][-1]}", flush=True)
        print(_table(f"accuracy: {a.streams} streams, {a.itl_ms:g} ms between chunks (validate, merged)", acc,
                     ["streams_open", "skew_p99_ms", "ttft_bound_p99_ms", "itl_bound_p99_ms", "cpu_us_per_chunk",
                      "verdict"]))
    if a.part in ("all", "capacity"):
        gaps = [float(g) for g in a.capacity_gaps_ms.split(",")]
        points: dict[tuple[int, float], list[dict[str, float | None]]] = {}
        for r in range(a.rounds):
            for w in (1, a.workers) if r % 2 == 0 else (a.workers, 1):
                for gap in gaps:
                    point = capacity(w, a.capacity_streams, gap, a.capacity_seconds, a.capacity_output_len)
                    points.setdefault((w, gap), []).append(point)
                    print(f"  capacity round {r + 1}, {w} worker(s), gap {gap:g} ms: "
                          + ", ".join(f"{k} {v:.4g}" for k, v in point.items() if v is not None), flush=True)
        keys = ["offered_chunks_per_s", "chunks_per_s", "skew_p99_ms", "itl_bound_p99_ms", "cpu_us_per_chunk",
                "client_cores", "chunks_per_client_core_s", "verdict"]
        print(f"capacity: {a.capacity_streams} streams against bench/fast_server.c, {a.capacity_seconds:g} s windows "
              f"(medians of {a.rounds} rounds)")
        print("  workers gap_ms " + " ".join(f"{k:>24}" for k in keys))
        for (w, gap), rows in sorted(points.items()):
            print(f"  {w:>7} {gap:>6g} " + " ".join(
                f"{v:>24.4f}" if (v := _median(rows, k)) is not None else f"{'-':>24}" for k in keys))
        for w in (1, a.workers):
            held = [_median(points[(w, g)], "chunks_per_s") or 0.0 for g in gaps
                    if (_median(points[(w, g)], "skew_p99_ms") or math.inf) <= a.tolerance_ms]
            print(f"  {w} worker(s): most chunks/s with skew p99 <= {a.tolerance_ms:g} ms: "
                  f"{max(held) if held else float('nan'):,.0f}")
    if a.part in ("all", "merge"):
        baseline = _baseline_merge(a.baseline_merge) if a.baseline_merge else None
        for r in range(a.rounds):
            cost = merge_cost(a.workers, a.capacity_streams, a.merge_gap_ms, a.merge_output_len, a.merge_seconds,
                              baseline, baseline_first=r % 2 == 1)
            print(f"  merge round {r + 1}, {a.workers} workers: "
                  + ", ".join(f"{k} {v:.6g}" for k, v in cost.items()), flush=True)
    if a.part == "uneven":
        modes = ["1 process", "claimed", "dealt"]
        runs = _rounds("uneven", modes, a.rounds, lambda mode: uneven(
            mode, a.workers, a.uneven_concurrency, a.uneven_requests, a.uneven_long_len))
        print(f"uneven: {a.uneven_requests} requests alternating {a.uneven_long_len} and 2 tokens (2 ms each), "
              f"--concurrency {a.uneven_concurrency}, {a.workers} workers claimed or dealt (median of rounds)")
        for mode in modes:
            values = {key: _median(runs[mode], key) for key in
                      ("mean_in_flight", "duration_s", "completed", "idle_slot_share")}
            cells = "".join(f"  {key} {'-' if v is None else f'{v:.3f}'}" for key, v in values.items())
            print(f"  {mode:<10}{cells}")
    if a.part == "open-cap":
        modes = ["1 process", "shared", "split"]
        caps = _rounds("open-cap", modes, a.rounds, lambda mode: open_cap(
            mode, a.workers, a.open_cap_concurrency, a.open_cap_requests, a.open_cap_rate, a.open_cap_long_len))
        print(f"open-cap: {a.open_cap_requests} Poisson arrivals at {a.open_cap_rate:g}/s, 2 or {a.open_cap_long_len} "
              f"tokens (1 ms each), --concurrency {a.open_cap_concurrency}, {a.workers} workers sharing the cap "
              "or each holding its share (median of rounds)")
        keys = ["wait_mean_ms", "wait_p99_ms", "late_p50_ms", "late_p99_ms", "late_max_ms", "late_share",
                "most_in_flight", "mean_in_flight", "failed", "others_arrivals_share"]
        print(f"  {'figure':<24}" + "".join(f"{m:>12}" for m in modes) + f"{'shared/1':>10}")
        for key in keys:
            medians = [_median(caps[m], key) for m in modes]
            ratio = f"{medians[1] / medians[0]:>10.2f}" if medians[0] and medians[1] is not None else ""
            print(f"  {key:<24}" + "".join(f"{v:>12.4f}" if v is not None else f"{'-':>12}" for v in medians) + ratio)
    print(f"host load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
