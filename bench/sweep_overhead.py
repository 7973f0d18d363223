"""The sweep's own overhead between cells, launch aside (target: under 1 s), beside the cells' run time.

One built-in synthetic server is started here and attached to (so no launch is timed), and a sweep
of CELLS cells runs against it through the CLI's plan (``cli.sweep.load_plan``), the API's runner
(``api.sweeps.SweepRunner``) and ``study.sweep.execute``, the runner wrapped to stamp when each run
starts and returns. Per cell, side by side:

- window: the run's measured window (the result's ``duration``);
- run: ``api.arun`` from call to return (the run's own set-up, window, result and store writing);
- gap: from one run's return to the next one's start: the sweep's own work between cells (finding
  the run in the store, the stop rules, the journal, the next cell's start);
- between windows: from one cell's measured window to the next one's: the gap and each run's own
  set-up and wrap-up (run - window), which is what a sweep costs beyond its measurements.

Then the sweep's start (reading the file, building and checking every cell's config, finding the
complete cells in the store) and a second pass over the same file, which finds every cell done.

Usage (from the repository root)::

    .venv/bin/python bench/sweep_overhead.py              # 12 cells, ~30 s
    .venv/bin/python bench/sweep_overhead.py --cells 24
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from fastbench.api.sweeps import SweepRunner
from fastbench.cli import command
from fastbench.cli import sweep as sweep_cli
from fastbench.study.store import Store
from fastbench.study.sweep import execute
from fastbench.study.sweepplan import Cell
from fastbench.synthetic import SyntheticServer

TARGET_S = 1.0


class StampedRunner(SweepRunner):
    def __init__(self, plan: Any) -> None:
        super().__init__(plan)
        self.stamps: list[tuple[float, float, str]] = []

    async def run(self, cell: Cell, server: Any, stop: asyncio.Event) -> str:
        started = time.perf_counter()
        run_id = await super().run(cell, server, stop)
        self.stamps.append((started, time.perf_counter(), run_id))
        return run_id


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=12)
    args = ap.parse_args()
    run_command = sweep_cli.RunCommand(command.build_parser, command.config_from_args)
    with tempfile.TemporaryDirectory() as tmp, SyntheticServer("--ttft-ms", "5", "--itl-ms", "5") as server:
        path = Path(tmp) / "overhead.toml"
        path.write_text(f"""
[sweep]
store = "{tmp}/store"
warmup = 0
stop = []
[variants.attached]
base_url = "{server.base_url}"
[benchmark]
concurrency = 4
max_tokens = 8
num_prompts = 32
seed = [{', '.join(str(i) for i in range(args.cells))}]  # one cell per seed
""")
        t0 = time.perf_counter()
        plan, _ = sweep_cli.load_plan(str(path), run_command)
        plan_s = time.perf_counter() - t0
        runner = StampedRunner(plan)
        with Store(plan.store) as store:
            t0 = time.perf_counter()
            points = uvloop.run(execute(plan, store, runner, asyncio.Event(), say=lambda line: None))
            sweep_s = time.perf_counter() - t0
            flat = store.flat([run_id for _, _, run_id in runner.stamps])
        assert all(p["status"] == "done" for p in points), points
        windows = [float(flat[run_id][1]["duration"]) for _, _, run_id in runner.stamps]
        runs = [end - start for start, end, _ in runner.stamps]
        gaps = [runner.stamps[i + 1][0] - runner.stamps[i][1] for i in range(len(runner.stamps) - 1)]
        between = [gap + (runs[i] - windows[i]) for i, gap in enumerate(gaps)]
        before = runner.stamps[0][0] - t0  # from execute's call to the first run (the store's lookup)
        t0 = time.perf_counter()
        plan, _ = sweep_cli.load_plan(str(path), run_command)
        with Store(plan.store) as store:
            again = uvloop.run(execute(plan, store, runner, asyncio.Event(), say=lambda line: None))
        again_s = time.perf_counter() - t0
        assert len(runner.stamps) == len(plan.cells) and all(p["status"] == "done" for p in again)

    print(f"# The sweep's overhead between cells: {len(plan.cells)} cells against one attached synthetic server\n")
    print("| per cell | median ms | max ms |")
    print("|---|---:|---:|")
    for name, values in (("window (measured part of the run)", windows),
                         ("run (api.arun: set-up, window, result, store)", runs),
                         ("gap between cells (the sweep's own work)", gaps),
                         ("between measured windows (gap + run - window)", between)):
        print(f"| {name} | {statistics.median(values) * 1e3:.1f} | {max(values) * 1e3:.1f} |")
    print(f"\nbetween measured windows: max {max(between) * 1e3:.0f} ms (target under {TARGET_S:.0f} s: "
          f"{'yes' if max(between) < TARGET_S else 'NO'}); the sweep's own gaps {sum(gaps) / sweep_s:.2%} of its "
          f"{sweep_s:.1f} s")
    print(f"before the first cell: load_plan {plan_s * 1e3:.0f} ms ({len(plan.cells)} configs built and checked; the "
          f"first call imports the API), execute's store lookup {before * 1e3:.0f} ms")
    print(f"the same sweep again, every cell done: {again_s * 1e3:.0f} ms in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
